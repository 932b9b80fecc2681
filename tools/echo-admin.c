/* echo-admin.c - the operator's CLI for echd: streams, groups, consumers
 * and pending lists, live over RESP or read-only from the store (the LMDB
 * directory, or echd's schema on PostgreSQL).
 *
 * This file parses the command line and dispatches; adm_live.c and
 * adm_offline.c read, adm_view.c prints, adm_check.c verifies.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adm.h"
#include "echd.h"

#define DEFAULT_PORT       7379
#define DEFAULT_TIMEOUT_MS 10000

/* ---- commands ------------------------------------------------------------ */

enum cmd_id {
	C_STREAMS,
	C_GROUPS,
	C_CONSUMERS,
	C_PENDING,
	C_ENTRY,
	C_ACK,
	C_CLAIM,
	C_DELCONSUMER,
	C_SETID,
	C_TRIM,
	C_BACKUP,
	C_CHECK,
	C_STATS,
	C_SHARDS,
	C_HELP,
	C__COUNT
};

#define BIT(c)    (1u << (c))
#define LIVE_ONLY 0x1u /* changes state: one server command */

struct cmddef {
	const char *name;
	int min_args;
	int max_args; /* -1: any number */
	unsigned flags;
	const char *synopsis;
	const char *summary;
	const char *help;
};

static const struct cmddef cmds[C__COUNT] = {
	[C_STREAMS] = {"streams", 0, 0, 0, "streams",
		"length, first/last id, groups, last entry age",
		"Lists the streams of the database (--db) in creation order: length, first and\n"
		"last live entry id, number of consumer groups, and the age of the last entry\n"
		"(from its id's millisecond part).\n"},
	[C_GROUPS] = {"groups", 1, 1, 0, "groups STREAM",
		"cursor, read, lag, pending, consumers, oldest",
		"Lists the consumer groups of STREAM: last-delivered id (the cursor), entries\n"
		"read, lag (entries added after the cursor), pending entries, consumers, and\n"
		"how long the oldest pending entry has waited since its last delivery.\n"},
	[C_CONSUMERS] = {"consumers", 2, 2, 0, "consumers STREAM GROUP",
		"each consumer: pending, idle, inactive",
		"Lists the consumers of GROUP: pending entries, idle (since its last attempt\n"
		"to read or claim) and inactive (since its last successful one; \"never\").\n"},
	[C_PENDING] = {"pending", 2, 2, 0, "pending STREAM GROUP [options]",
		"pending entries: id, owner, idle, deliveries",
		"Lists the pending entries of GROUP in id order: owner, idle time since the\n"
		"last delivery and delivery count. Rows are printed as they are read, so a\n"
		"million-entry list starts at once; live, it is read in pages of 1,000.\n"
		"  --consumer C         only C's entries\n"
		"  --min-idle DURATION  only entries idle at least this long (5m, 90s, 1h30m)\n"
		"  --min-deliveries N   only entries delivered at least N times\n"
		"  --limit N            stop after N rows\n"
		"  --payload            show each entry's fields (\"(deleted)\" when it is "
		"gone)\n"},
	[C_ENTRY] = {"entry", 2, 2, 0, "entry STREAM ID",
		"an entry, and who holds it in each group",
		"Shows entry ID of STREAM (its fields, or that it was deleted) and, for every\n"
		"group, whether it was delivered and which consumer holds it, for how long,\n"
		"after how many deliveries.\n"},
	[C_ACK] = {"ack", 3, -1, LIVE_ONLY, "ack STREAM GROUP ID...", "acknowledge entries (XACK)",
		"Acknowledges the given entries in GROUP: one XACK command.\n"},
	[C_CLAIM] = {"claim", 2, -1, LIVE_ONLY, "claim STREAM GROUP --to C [--min-idle D] [ID...]",
		"give entries to consumer C (XCLAIM)",
		"Gives pending entries to consumer C (created if missing). With IDs, one\n"
		"XCLAIM of those entries (only those idle at least --min-idle, when given).\n"
		"Without, one XAUTOCLAIM of up to --limit (default 100) entries idle at least\n"
		"--min-idle. Delivery counts are kept (JUSTID); entries deleted from the\n"
		"stream leave the PEL.\n"
		"  --to C               the new owner (required)\n"
		"  --min-idle DURATION  only entries idle at least this long\n"
		"  --limit N            at most N entries (without IDs)\n"},
	[C_DELCONSUMER] = {"delconsumer", 3, 3, LIVE_ONLY, "delconsumer STREAM GROUP CONSUMER",
		"delete a consumer (XGROUP DELCONSUMER)",
		"Deletes CONSUMER from GROUP; its pending entries leave the PEL (claim them\n"
		"first to keep them). One XGROUP DELCONSUMER command.\n"},
	[C_SETID] = {"setid", 3, 3, LIVE_ONLY, "setid STREAM GROUP ID [--entries-read N]",
		"move a cursor (XGROUP SETID)",
		"Sets GROUP's last-delivered id to ID ('$' for the stream's last id): entries\n"
		"after it are new to the group. One XGROUP SETID command.\n"
		"  --entries-read N     also set the entries-read counter (-1: unknown)\n"},
	[C_TRIM] = {"trim", 1, 1, LIVE_ONLY, "trim STREAM --maxlen N | --minid ID [--approx]",
		"trim a stream (XTRIM)",
		"Trims STREAM to --maxlen entries, or removes entries below --minid. One XTRIM\n"
		"command.\n"
		"  --maxlen N           keep the last N entries\n"
		"  --minid ID           remove entries with smaller ids\n"
		"  --approx             only whole nodes (~): cheaper, may keep a few more\n"
		"  --limit N            with --approx: remove at most N entries\n"},
	[C_BACKUP] = {"backup", 1, 1, 0, "backup DEST", "hot, consistent, compacted copy",
		"Writes a consistent copy of the LMDB environment into DEST (created if\n"
		"missing; it must hold no data.mdb), compacted, while echd keeps serving.\n"
		"The source is --data-dir, or the directory the server reports (CONFIG GET\n"
		"dir): the copy is made from the files, so run it on the server's machine.\n"
		"Start echd with --dir DEST to serve the copy.\n"},
	[C_CHECK] = {"check", 0, 1, 0, "check [DIR]", "verify a data directory's invariants",
		"Verifies a data directory (DIR, or --data-dir), or echd's schema on\n"
		"PostgreSQL (--storage-url), read-only, in one snapshot, so it may run\n"
		"while echd writes: every PEL row's group and consumer exist,\n"
		"each consumer's index (cpel) equals its part of the group PEL, the counters\n"
		"(group pending and consumers, consumer pending, stream length, nodes, keys)\n"
		"equal the rows, ids are in order, no row is orphaned. Prints each problem;\n"
		"exits 4 if there is any.\n"},
	[C_STATS] = {"stats", 0, 0, 0, "stats", "server (or directory) figures",
		"Live: highlights of INFO (clients, commands, commits and fsyncs, how long\n"
		"commits and flushes took, storage, memory, keys). With --data-dir: the\n"
		"environment's size and key counts; with --storage-url: the key counts.\n"},
	[C_SHARDS] = {"shards", 0, 3, 0, "shards [set-url IX URL|-] --storage-url URL",
		"a cluster's shards, who holds each, the standbys",
		"Lists the shards of the cluster whose base schema is --storage-pg-schema\n"
		"(echd's cluster-shards: the map in <schema>.shards), read from PostgreSQL\n"
		"without a lock: each one's slots and schema, whether a front end holds it\n"
		"(held) or none does (free: its slots answer CLUSTERDOWN), and the holder's\n"
		"node id, announced address and generation (+1 per takeover). Then the front\n"
		"ends of <schema>.frontends: each one's address, role (active on a shard, or\n"
		"standby: it could take any) and the age of its last heartbeat (one per HA\n"
		"poll). --json lists the standbys under every shard too. SERVER is the\n"
		"PostgreSQL each shard lives on (its password redacted); LAG, when a server\n"
		"has standbys of its own, the WAL its furthest one has not replayed yet.\n"
		"\n"
		"shards set-url IX URL puts shard IX on the PostgreSQL of URL (a libpq URI\n"
		"or key=value string; - puts it back on --storage-url's). Refused while a\n"
		"front end holds the shard, or when its schema holds data where it lives\n"
		"now: echd moves no data. Running front ends follow at their next HA poll.\n"},
	[C_HELP] = {"help", 0, 1, 0, "help [COMMAND]", "this text, or a command's", NULL},
};

/* ---- options --------------------------------------------------------------- */

enum opt_id {
	O_HOST,
	O_PORT,
	O_SOCK,
	O_USER,
	O_PASS,
	O_TLS,
	O_CACERT,
	O_CACERTDIR,
	O_CERT,
	O_KEY,
	O_INSECURE,
	O_TIMEOUT,
	O_DB,
	O_DATADIR,
	O_STORAGEURL,
	O_PGSCHEMA,
	O_JSON,
	O_NOCOLOR,
	O_HELP,
	O_VERSION,
	O_CONSUMER,
	O_MINIDLE,
	O_MINDELIV,
	O_LIMIT,
	O_PAYLOAD,
	O_TO,
	O_MAXLEN,
	O_MINID,
	O_APPROX,
	O_ENTRIESREAD,
};

struct optdef {
	enum opt_id id;
	const char *name;
	char shortc;
	bool arg;
	unsigned cmds; /* commands that take it; 0: every command */
};

static const struct optdef opts[] = {
	{O_HOST, "host", 0, true, 0},
	{O_PORT, "port", 'p', true, 0},
	{O_SOCK, "unixsocket", 's', true, 0},
	{O_USER, "user", 0, true, 0},
	{O_PASS, "pass", 0, true, 0},
	{O_TLS, "tls", 0, false, 0},
	{O_CACERT, "cacert", 0, true, 0},
	{O_CACERTDIR, "cacertdir", 0, true, 0},
	{O_CERT, "cert", 0, true, 0},
	{O_KEY, "key", 0, true, 0},
	{O_INSECURE, "insecure", 0, false, 0},
	{O_TIMEOUT, "timeout", 0, true, 0},
	{O_DB, "db", 'n', true, 0},
	{O_DATADIR, "data-dir", 'd', true, 0},
	{O_STORAGEURL, "storage-url", 0, true, 0},
	{O_PGSCHEMA, "storage-pg-schema", 0, true, 0},
	{O_JSON, "json", 0, false, 0},
	{O_NOCOLOR, "no-color", 0, false, 0},
	{O_HELP, "help", 'h', false, 0},
	{O_VERSION, "version", 'V', false, 0},
	{O_CONSUMER, "consumer", 0, true, BIT(C_PENDING)},
	{O_MINIDLE, "min-idle", 0, true, BIT(C_PENDING) | BIT(C_CLAIM)},
	{O_MINDELIV, "min-deliveries", 0, true, BIT(C_PENDING)},
	{O_LIMIT, "limit", 0, true, BIT(C_PENDING) | BIT(C_CLAIM) | BIT(C_TRIM)},
	{O_PAYLOAD, "payload", 0, false, BIT(C_PENDING)},
	{O_TO, "to", 0, true, BIT(C_CLAIM)},
	{O_MAXLEN, "maxlen", 0, true, BIT(C_TRIM)},
	{O_MINID, "minid", 0, true, BIT(C_TRIM)},
	{O_APPROX, "approx", 0, false, BIT(C_TRIM)},
	{O_ENTRIESREAD, "entries-read", 0, true, BIT(C_SETID)},
};

static const char usage_head[] =
	"Usage: echo-admin [OPTIONS] COMMAND [ARGS]\n"
	"\n"
	"Inspects echd's streams, consumer groups and pending lists, live over RESP or\n"
	"read-only from the store (--data-dir, or --storage-url), and acts on them.\n"
	"\n"
	"Commands:\n";

static const char usage_tail[] =
	"\n"
	"Connection (live mode):\n"
	"      --host HOST        server host (default 127.0.0.1)\n"
	"  -p, --port PORT        server port (default 7379)\n"
	"  -s, --unixsocket PATH  connect through a Unix socket instead\n"
	"      --user USER        user to authenticate as (default \"default\")\n"
	"      --pass PASSWORD    password; better ECHD_AUTH=PASSWORD (and ECHD_USER) in\n"
	"                         the environment: the command line is visible to others\n"
	"      --tls              connect with TLS; each option below implies it\n"
	"      --cacert FILE      CA certificates (PEM) to verify the server against\n"
	"      --cacertdir DIR    the same, from a directory made by `openssl rehash`\n"
	"                         (neither: the system's trusted CAs)\n"
	"      --cert FILE, --key FILE\n"
	"                         client certificate and its key (both or neither)\n"
	"      --insecure         do not verify the server's certificate or name\n"
	"      --timeout SECONDS  connect, TLS handshake and reply timeout (default 10)\n"
	"  -n, --db N             database (default 0)\n"
	"Offline mode:\n"
	"  -d, --data-dir DIR     read DIR's LMDB environment, read-only: no server is\n"
	"                         needed, echd may keep running; changes need a server\n"
	"      --storage-url URL  read echd's schema on PostgreSQL instead (the postgres\n"
	"                         backend; a libpq URI or key=value string, as given to\n"
	"                         echd; a password better in PGPASSWORD or ~/.pgpass):\n"
	"                         one snapshot, read-only, without the active echd's lock\n"
	"      --storage-pg-schema NAME\n"
	"                         the schema echd was given (default echd)\n"
	"Output:\n"
	"      --json             one JSON document on stdout\n"
	"      --no-color         no colour (also NO_COLOR=1; never when not a terminal)\n"
	"  -h, --help             this text; `echo-admin COMMAND --help` for a command\n"
	"  -V, --version\n"
	"\n"
	"Durations: 250ms, 90s, 5m, 1h30m, 2d; a bare number is milliseconds.\n"
	"Exit status: 0 ok, 1 not found (stream, group, consumer, entry), 2 usage error\n"
	"(or a change asked of a directory), 3 cannot connect or open, 4 check found\n"
	"damage, 5 the server or the storage refused.\n"
	"See echo-admin(1).\n";

static void
print_usage(FILE *f)
{
	fputs(usage_head, f);
	for (int i = 0; i < C__COUNT; i++) {
		const struct cmddef *c = &cmds[i];
		/* a long synopsis gets a line of its own: 80 columns */
		if (strlen(c->synopsis) > 28) {
			fprintf(f, "  %s\n%31s", c->synopsis, "");
		} else {
			fprintf(f, "  %-28s ", c->synopsis);
		}
		fprintf(f, "%s%s\n", c->summary, (c->flags & LIVE_ONLY) ? " [live]" : "");
	}
	fputs(usage_tail, f);
}

static void
print_cmd_help(const struct cmddef *c)
{
	printf("Usage: echo-admin [OPTIONS] %s\n\n%s", c->synopsis, c->help);
	if (c->flags & LIVE_ONLY) {
		printf("\nChanges state, so it needs a live connection (not --data-dir or "
		       "--storage-url).\n");
	}
	printf("\nThe connection, offline (--data-dir, --storage-url) and output options of\n"
	       "`echo-admin --help` apply.\n");
}

static int usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int
usage(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "echo-admin: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'echo-admin --help'.\n");
	return ADM_EXIT_USAGE;
}

static const struct cmddef *
find_cmd(const char *name, enum cmd_id *id)
{
	for (int i = 0; i < C__COUNT; i++) {
		if (strcmp(cmds[i].name, name) == 0) {
			*id = (enum cmd_id)i;
			return &cmds[i];
		}
	}
	return NULL;
}

/* ---- parsing ------------------------------------------------------------- */

struct parsed {
	struct adm_opts o;
	bool help;
	bool version;
	bool no_color;
	int color_mode;
	/* options seen, to check them against the command */
	const struct optdef *seen[32];
	int nseen;
};

static bool
int_arg(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
		return false;
	}
	*out = v;
	return true;
}

static int
apply_opt(struct parsed *p, const struct optdef *d, char *val)
{
	struct adm_opts *o = &p->o;
	int64_t v;
	char *end;
	double secs;

	switch (d->id) {
	case O_HOST:
		o->host = val;
		break;
	case O_PORT:
		if (!int_arg(val, 1, 65535, &v)) {
			return usage("--port: '%s' is not a port number", val);
		}
		o->port = (int)v;
		break;
	case O_SOCK:
		o->unixsocket = val;
		break;
	case O_USER:
		o->user = val;
		break;
	case O_PASS:
		echd_free(o->pass);
		o->pass = echd_strndup(val, strlen(val));
		/* keep it out of ps(1) from now on */
		memset(val, 'x', strlen(val));
		break;
	case O_TLS:
		o->tls = true;
		break;
	case O_CACERT:
		o->cacert = val;
		o->tls = true;
		break;
	case O_CACERTDIR:
		o->cacertdir = val;
		o->tls = true;
		break;
	case O_CERT:
		o->cert = val;
		o->tls = true;
		break;
	case O_KEY:
		o->key = val;
		o->tls = true;
		break;
	case O_INSECURE:
		o->insecure = true;
		o->tls = true;
		break;
	case O_TIMEOUT:
		errno = 0;
		secs = strtod(val, &end);
		if (errno != 0 || end == val || *end != '\0' || !(secs > 0) || secs > 86400) {
			return usage("--timeout: '%s' is not a number of seconds", val);
		}
		o->timeout_ms = (int)(secs * 1000);
		if (o->timeout_ms < 1) {
			o->timeout_ms = 1;
		}
		break;
	case O_DB:
		if (!int_arg(val, 0, 255, &v)) {
			return usage("--db: '%s' is not a database number (0-255)", val);
		}
		o->db = (unsigned)v;
		break;
	case O_DATADIR:
		o->data_dir = val;
		break;
	case O_STORAGEURL:
		o->storage_url = val;
		break;
	case O_PGSCHEMA:
		o->pg_schema = val;
		break;
	case O_JSON:
		o->json = true;
		break;
	case O_NOCOLOR:
		p->no_color = true;
		break;
	case O_HELP:
		p->help = true;
		break;
	case O_VERSION:
		p->version = true;
		break;
	case O_CONSUMER:
		o->consumer = val;
		break;
	case O_MINIDLE:
		if (!adm_parse_duration(val, &o->min_idle)) {
			return usage(
				"--min-idle: '%s' is not a duration (5m, 90s, 1h30m, 250ms)", val);
		}
		break;
	case O_MINDELIV:
		if (!int_arg(val, 0, INT64_MAX, &o->min_deliveries)) {
			return usage("--min-deliveries: '%s' is not a count", val);
		}
		break;
	case O_LIMIT:
		if (!int_arg(val, 0, INT64_MAX, &o->limit)) {
			return usage("--limit: '%s' is not a count", val);
		}
		break;
	case O_PAYLOAD:
		o->payload = true;
		break;
	case O_TO:
		o->to = val;
		break;
	case O_MAXLEN:
		if (!int_arg(val, 0, INT64_MAX, &o->maxlen)) {
			return usage("--maxlen: '%s' is not a count", val);
		}
		break;
	case O_MINID:
		o->minid = val;
		break;
	case O_APPROX:
		o->approx = true;
		break;
	case O_ENTRIESREAD:
		if (!int_arg(val, -1, INT64_MAX, &o->entries_read)) {
			return usage("--entries-read: '%s' is not a count (or -1)", val);
		}
		break;
	}
	if (p->nseen < (int)(sizeof(p->seen) / sizeof(p->seen[0]))) {
		p->seen[p->nseen++] = d;
	}
	return 0;
}

/* GNU-style: options anywhere, --opt=value or --opt value, -p 7379 or
 * -p7379, "--" ends them. Positional arguments collect in o->args. */
static int
parse_args(int argc, char **argv, struct parsed *p)
{
	struct adm_opts *o = &p->o;
	bool only_pos = false;

	o->args = echd_calloc((size_t)argc + 1, sizeof(char *));
	if (o->args == NULL) {
		return adm_err(ADM_EXIT_FAILED, "out of memory");
	}
	for (int i = 1; i < argc; i++) {
		char *a = argv[i], *val = NULL;
		const struct optdef *d = NULL;
		int rc;

		if (only_pos || a[0] != '-' || a[1] == '\0') {
			if (o->cmd == NULL) {
				o->cmd = a;
			} else {
				o->args[o->nargs++] = a;
			}
			continue;
		}
		if (strcmp(a, "--") == 0) {
			only_pos = true;
			continue;
		}
		if (a[1] == '-') {
			char *eq = strchr(a + 2, '=');
			size_t nl = eq != NULL ? (size_t)(eq - a - 2) : strlen(a + 2);
			for (size_t j = 0; j < sizeof(opts) / sizeof(opts[0]); j++) {
				if (strlen(opts[j].name) == nl &&
					strncmp(opts[j].name, a + 2, nl) == 0) {
					d = &opts[j];
					break;
				}
			}
			if (d == NULL) {
				return usage("unknown option '%s'", a);
			}
			if (eq != NULL) {
				if (!d->arg) {
					return usage("option '--%s' takes no value", d->name);
				}
				val = eq + 1;
			}
		} else {
			for (size_t j = 0; j < sizeof(opts) / sizeof(opts[0]); j++) {
				if (opts[j].shortc != 0 && opts[j].shortc == a[1]) {
					d = &opts[j];
					break;
				}
			}
			if (d == NULL) {
				return usage("unknown option '%s'", a);
			}
			if (a[2] != '\0') {
				if (!d->arg) {
					return usage("unknown option '%s'", a);
				}
				val = a + 2;
			}
		}
		if (d->arg && val == NULL) {
			if (i + 1 >= argc) {
				return usage("option '--%s' needs a value", d->name);
			}
			val = argv[++i];
		}
		rc = apply_opt(p, d, val);
		if (rc != 0) {
			return rc;
		}
	}
	return 0;
}

/* ---- running --------------------------------------------------------------- */

static int
run_read(struct adm_ctx *x, enum cmd_id id)
{
	const struct adm_opts *o = x->o;
	struct stream_id sid;
	bool live = o->data_dir == NULL && o->storage_url == NULL;
	int rc;

	if (id == C_ENTRY && stream_id_parse(o->args[1], strlen(o->args[1]), 0, false, &sid) != 0) {
		return usage("'%s' is not a stream id (ms-seq)", o->args[1]);
	}
	rc = live ? adm_live_open(x) : adm_off_open(x, o->data_dir);
	if (rc != 0) {
		return rc;
	}
	switch (id) {
	case C_STREAMS:
		rc = live ? adm_live_streams(x) : adm_off_streams(x);
		break;
	case C_GROUPS:
		rc = live ? adm_live_groups(x, o->args[0]) : adm_off_groups(x, o->args[0]);
		break;
	case C_CONSUMERS:
		rc = live ? adm_live_consumers(x, o->args[0], o->args[1])
			  : adm_off_consumers(x, o->args[0], o->args[1]);
		break;
	case C_PENDING:
		rc = live ? adm_live_pending(x, o->args[0], o->args[1])
			  : adm_off_pending(x, o->args[0], o->args[1]);
		break;
	case C_ENTRY:
		rc = live ? adm_live_entry(x, o->args[0], &sid)
			  : adm_off_entry(x, o->args[0], &sid);
		break;
	case C_STATS:
		rc = live ? adm_live_stats(x) : adm_off_stats(x);
		break;
	default:
		rc = ADM_EXIT_USAGE;
		break;
	}
	if (live) {
		adm_live_close(x);
	} else {
		adm_off_close(x);
	}
	return rc;
}

static int
run_action(struct adm_ctx *x, enum cmd_id id)
{
	const struct adm_opts *o = x->o;
	int rc;

	switch (id) {
	case C_CLAIM:
		if (o->to == NULL) {
			return usage("claim: --to CONSUMER is required");
		}
		if (o->nargs == 2 && o->min_idle < 0) {
			return usage("claim: give entry IDs, or --min-idle to claim by idleness");
		}
		break;
	case C_TRIM:
		if ((o->maxlen >= 0) == (o->minid != NULL)) {
			return usage("trim: give one of --maxlen N and --minid ID");
		}
		if (o->limit >= 0 && !o->approx) {
			return usage("trim: --limit needs --approx");
		}
		break;
	default:
		break;
	}
	rc = adm_live_open(x);
	if (rc != 0) {
		return rc;
	}
	switch (id) {
	case C_ACK:
		rc = adm_live_ack(x, o->args[0], o->args[1], o->nargs - 2, o->args + 2);
		break;
	case C_CLAIM:
		rc = adm_live_claim(x, o->args[0], o->args[1], o->nargs - 2, o->args + 2);
		break;
	case C_DELCONSUMER:
		rc = adm_live_delconsumer(x, o->args[0], o->args[1], o->args[2]);
		break;
	case C_SETID:
		rc = adm_live_setid(x, o->args[0], o->args[1], o->args[2]);
		break;
	case C_TRIM:
		rc = adm_live_trim(x, o->args[0]);
		break;
	default:
		rc = ADM_EXIT_USAGE;
		break;
	}
	adm_live_close(x);
	return rc;
}

static int
run_backup(struct adm_ctx *x)
{
	const struct adm_opts *o = x->o;
	char *dir = NULL;
	int rc;

	if (o->storage_url != NULL) {
		return usage("backup copies an LMDB directory: back PostgreSQL up with its own "
			     "tools (pg_dump -n SCHEMA, pg_basebackup)");
	}
	if (o->data_dir != NULL) {
		return adm_backup(o->data_dir, o->args[0]);
	}
	rc = adm_live_open(x);
	if (rc != 0) {
		return rc;
	}
	rc = adm_live_data_dir(x, &dir);
	adm_live_close(x);
	if (rc == 0) {
		rc = adm_backup(dir, o->args[0]);
	}
	echd_free(dir);
	return rc;
}

static int
run(struct parsed *p)
{
	struct adm_opts *o = &p->o;
	const struct cmddef *c;
	struct adm_ctx x;
	enum cmd_id id;

	if (p->version) {
		printf("echo-admin %s (echd %s)\n", ECHD_VERSION, ECHD_VERSION);
		return 0;
	}
	if (o->cmd == NULL) {
		if (p->help) {
			print_usage(stdout);
			return 0;
		}
		print_usage(stderr);
		return ADM_EXIT_USAGE;
	}
	c = find_cmd(o->cmd, &id);
	if (c == NULL) {
		return usage("unknown command '%s'", o->cmd);
	}
	if (id == C_HELP) {
		const struct cmddef *h;
		enum cmd_id hid;
		if (o->nargs == 0) {
			print_usage(stdout);
			return 0;
		}
		h = find_cmd(o->args[0], &hid);
		if (h == NULL || hid == C_HELP) {
			if (h != NULL) {
				print_usage(stdout);
				return 0;
			}
			return usage("unknown command '%s'", o->args[0]);
		}
		print_cmd_help(h);
		return 0;
	}
	if (p->help) {
		print_cmd_help(c);
		return 0;
	}
	for (int i = 0; i < p->nseen; i++) {
		if (p->seen[i]->cmds != 0 && (p->seen[i]->cmds & BIT(id)) == 0) {
			return usage("'%s' takes no --%s", c->name, p->seen[i]->name);
		}
	}
	if (o->nargs < c->min_args || (c->max_args >= 0 && o->nargs > c->max_args)) {
		fprintf(stderr, "echo-admin: usage: echo-admin %s\n", c->synopsis);
		return ADM_EXIT_USAGE;
	}
	if (o->data_dir != NULL && o->storage_url != NULL) {
		return usage("--data-dir and --storage-url are two stores: give one");
	}
	if (o->pg_schema != NULL && o->storage_url == NULL) {
		return usage("--storage-pg-schema goes with --storage-url");
	}
	if (o->pg_schema != NULL && o->pg_schema[0] == '\0') {
		return usage("--storage-pg-schema: give a schema name");
	}
	if ((c->flags & LIVE_ONLY) && (o->data_dir != NULL || o->storage_url != NULL)) {
		return usage("'%s' changes state: it needs a live connection, not --%s", c->name,
			o->data_dir != NULL ? "data-dir" : "storage-url");
	}
	if (o->tls) {
		if ((o->cert == NULL) != (o->key == NULL)) {
			return usage("--cert and --key go together: give both or neither");
		}
		if (o->unixsocket != NULL) {
			return usage("--tls is for TCP: it does not go with --unixsocket");
		}
		if (o->data_dir != NULL || o->storage_url != NULL) {
			return usage("--tls is for live mode: it does not go with --%s",
				o->data_dir != NULL ? "data-dir" : "storage-url");
		}
	}
	memset(&x, 0, sizeof(x));
	x.o = o;
	switch (id) {
	case C_CHECK:
		if (o->storage_url != NULL) {
			if (o->nargs > 0) {
				return usage("check: give DIR or --storage-url, not both");
			}
			return adm_check_store(o, NULL);
		}
		if (o->nargs == 0 && o->data_dir == NULL) {
			return usage("check: give DIR (or --data-dir DIR, or --storage-url URL)");
		}
		return adm_check_store(o, o->nargs > 0 ? o->args[0] : o->data_dir);
	case C_BACKUP:
		return run_backup(&x);
	case C_SHARDS:
		if (o->storage_url == NULL) {
			return usage("shards reads the map on PostgreSQL: give --storage-url");
		}
		if (o->nargs > 0) {
			char *end = NULL;
			unsigned long ix = o->nargs == 3 ? strtoul(o->args[1], &end, 10) : 0;

			if (o->nargs != 3 || strcmp(o->args[0], "set-url") != 0) {
				return usage("shards takes no argument, or set-url IX URL");
			}
			if (end == o->args[1] || *end != '\0' || o->args[1][0] == '-') {
				return usage("shards set-url: IX is a shard's index, not '%s'",
					o->args[1]);
			}
			return adm_off_shard_url(&x, (size_t)ix,
				strcmp(o->args[2], "-") == 0 ? NULL : o->args[2]);
		}
		return adm_off_shards(&x);
	case C_ACK:
	case C_CLAIM:
	case C_DELCONSUMER:
	case C_SETID:
	case C_TRIM:
		return run_action(&x, id);
	default:
		return run_read(&x, id);
	}
}

int
main(int argc, char **argv)
{
	struct parsed p;
	const char *env;
	int rc;

	memset(&p, 0, sizeof(p));
	p.o.host = "127.0.0.1";
	p.o.port = DEFAULT_PORT;
	p.o.timeout_ms = DEFAULT_TIMEOUT_MS;
	p.o.min_idle = -1;
	p.o.min_deliveries = -1;
	p.o.limit = -1;
	p.o.maxlen = -1;
	p.o.entries_read = -2;
	rc = parse_args(argc, argv, &p);
	if (rc == 0) {
		if (p.o.pass == NULL && (env = getenv("ECHD_AUTH")) != NULL && env[0] != '\0') {
			p.o.pass = echd_strndup(env, strlen(env));
		}
		if (p.o.user == NULL && (env = getenv("ECHD_USER")) != NULL && env[0] != '\0') {
			p.o.user = env;
		}
		adm_out_init(p.o.json, p.no_color ? 0 : -1);
		rc = run(&p);
	}
	if (p.o.pass != NULL) {
		memset(p.o.pass, 0, strlen(p.o.pass));
		echd_free(p.o.pass);
	}
	echd_free(p.o.args);
	if (fflush(stdout) != 0 && rc == 0) {
		rc = adm_err(ADM_EXIT_FAILED, "writing the output: %s", strerror(errno));
	}
	return rc;
}
