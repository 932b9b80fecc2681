/* config.c - the option table: command line, config file, CONFIG GET/SET/REWRITE.
 *
 * Options use Redis' names and units where Redis has them; the table is
 * the single place an option's default, type and mutability are stated,
 * and, for an option a storage engine reads, the name it reads it under
 * ("lmdb.map-size": storage.h's engine options), which is how it reaches
 * the engine: brk_config_engine_opts() hands on every such row, and the
 * broker's code names no engine option.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker.h"
#include "cluster.h"

enum opt_type {
	OPT_INT,    /* plain integer */
	OPT_MEM,    /* integer with optional k/kb/m/mb/g/gb suffix */
	OPT_BOOL,   /* yes|no */
	OPT_STR,    /* string; "" clears */
	OPT_ENUM,   /* one of a list */
	OPT_SPECIAL /* handled by its own function */
};

struct opt {
	const char *name;
	enum opt_type type;
	bool runtime;   /* CONFIG SET may change it */
	const char *def;
	size_t off;     /* offset into struct brk_config */
	long long min, max;
	const char *const *enums; /* OPT_ENUM values, index is the stored int */
	const char *help;
	/* NULL, or the storage engine option it is handed on as (storage.h's
	 * "<engine>.<option>"; brk_config_engine_opts()) */
	const char *engine;
};

static const char *const loglevels[] = {"debug", "verbose", "notice", "warning", NULL};
static const char *const fsyncs[] = {"always", "everysec", NULL};
static const char *const tls_auth[] = {"yes", "no", "optional", NULL};
static const char *const tls_user[] = {"off", "CN", NULL};

#define OFF(f) offsetof(struct brk_config, f)
#define LLMAX  0x7fffffffffffffffLL

static const struct opt opts[] = {
	{"bind", OPT_SPECIAL, false, "127.0.0.1 -::1", 0, 0, 0, NULL,
		"addresses to listen on (IPv4 and IPv6; '-' prefix: skip if unavailable)"},
	{"port", OPT_INT, false, "7379", OFF(port), 0, 65535, NULL, "TCP port, 0 disables TCP"},
	{"unixsocket", OPT_STR, false, "", OFF(unixsocket), 0, 0, NULL, "unix socket path"},
	{"unixsocketperm", OPT_SPECIAL, false, "0", OFF(unixsocketperm), 0, 0777, NULL,
		"octal permissions of the unix socket"},
	{"dir", OPT_STR, false, "./data", OFF(dir), 0, 0, NULL, "data directory (LMDB)"},
	{"logfile", OPT_STR, false, "", OFF(logfile), 0, 0, NULL, "log file; empty = stderr"},
	{"loglevel", OPT_ENUM, true, "notice", OFF(loglevel), 0, 0, loglevels, "log verbosity"},
	{"pidfile", OPT_STR, false, "", OFF(pidfile), 0, 0, NULL, "write the pid here"},
	{"databases", OPT_INT, false, "16", OFF(databases), 1, 256, NULL, "number of databases"},
	{"maxclients", OPT_INT, true, "10000", OFF(maxclients), 1, 4294967295LL, NULL,
		"maximum connected clients"},
	{"timeout", OPT_INT, true, "0", OFF(timeout), 0, 2147483647, NULL,
		"close idle clients after this many seconds; 0 = never"},
	{"auth-timeout", OPT_INT, true, "30", OFF(auth_timeout), 1, 86400, NULL,
		"close a connection not logged in this many seconds after it was accepted, when a "
		"login is needed (the default user has a password or is off)"},
	{"tcp-backlog", OPT_INT, false, "511", OFF(tcp_backlog), 0, 65535, NULL, "listen backlog"},
	{"tcp-keepalive", OPT_INT, true, "300", OFF(tcp_keepalive), 0, 2147483647, NULL,
		"TCP keepalive seconds; 0 = off"},
	/* Redis' default, normal 0 0 0, lets one client that never reads grow
	 * the server without bound; a broker's readers fetch in batches, so a
	 * bound as generous as Redis' replica class costs them nothing. The
	 * pubsub class is Redis' own. */
	{"client-output-buffer-limit", OPT_SPECIAL, true, "normal 256mb 64mb 60 pubsub 32mb 8mb 60",
		0, 0, 0, NULL,
		"<class> <hard> <soft> <soft-seconds>: pending reply bytes before a client of class "
		"normal or pubsub (subscribed to a channel) is closed"},
	/* Redis' default, 0, leaves the sum of those limits unbounded (40
	 * subscribers that never read, 1.26 GB); a share of the memory bounds
	 * it wherever echd runs. */
	{"maxmemory-clients", OPT_SPECIAL, true, "5%", 0, 0, 0, NULL,
		"bytes, or a percentage of the machine's memory, that the output of all clients "
		"together may take; past it the clients with the most are closed (CLIENT "
		"NO-EVICT spares one); 0 = no bound"},
	{"client-query-buffer-limit", OPT_MEM, true, "1gb", OFF(query_buf_limit), 1024 * 1024,
		LLMAX, NULL, "unparsed input a client may send"},
	{"proto-max-bulk-len", OPT_MEM, true, "512mb", OFF(proto_max_bulk_len), 1024 * 1024,
		LLMAX, NULL, "largest bulk string in a request"},
	{"proto-max-multibulk-len", OPT_INT, true, "1048576", OFF(proto_max_multibulk_len), 1,
		2147483647LL, NULL, "most arguments in one request"},
	{"proto-inline-max-size", OPT_MEM, true, "64kb", OFF(proto_inline_max_size), 1024,
		LLMAX, NULL, "longest inline command line"},
	{"stream-node-max-entries", OPT_INT, true, "100", OFF(stream_node_max_entries), 0,
		LLMAX, NULL, "entries per stream node (affects ~ trimming)"},
	{"stream-node-max-bytes", OPT_MEM, true, "4096", OFF(stream_node_max_bytes), 0, LLMAX,
		NULL, "bytes per stream node (affects ~ trimming)"},
	{"stream-idmp-duration", OPT_INT, true, "100", OFF(stream_idmp_duration),
		STREAM_IDMP_DURATION_MIN, STREAM_IDMP_DURATION_MAX, NULL,
		"seconds a stream keeps an idempotent id (IDMP-DURATION until XCFGSET)"},
	{"stream-idmp-maxsize", OPT_INT, true, "100", OFF(stream_idmp_maxsize),
		STREAM_IDMP_MAXSIZE_MIN, STREAM_IDMP_MAXSIZE_MAX, NULL,
		"idempotent ids a stream keeps per producer (IDMP-MAXSIZE until XCFGSET)"},
	{"appendfsync", OPT_ENUM, false, "always", OFF(appendfsync), 0, 0, fsyncs,
		"always: reply once the commit is durable; everysec: reply after the commit, durable within a second"},
	{"map-size", OPT_MEM, false, "256mb", OFF(map_size), 1024 * 1024, LLMAX, NULL,
		"initial LMDB map size; grows on demand up to maxdisk", "lmdb.map-size"},
	{"maxdisk", OPT_MEM, true, "0", OFF(maxdisk), 0, LLMAX, NULL,
		"largest the data file may grow; 0 = no limit", "lmdb.map-max"},
	{"storage", OPT_STR, false, "lmdb", OFF(storage_backend), 0, 0, NULL,
		"storage backend: lmdb, lmdb-staged (lmdb written in arrival order), mem (in "
		"memory), or postgres (storage-url; also storage-backend)"},
	{"storage-stage-size", OPT_MEM, false, "64mb", OFF(storage_stage_size), 64 * 1024,
		LLMAX, NULL,
		"lmdb-staged: bytes of rows kept in arrival order before they are filed in their "
		"tables (the bound of the staging table)", "lmdb-staged.stage-size"},
	{"storage-url", OPT_STR, false, "", OFF(storage_url), 0, 0, NULL,
		"postgres: where, as a libpq URI or key=value string (CONFIG GET hides its "
		"password)", "postgres.url"},
	{"storage-pg-schema", OPT_STR, false, "echd", OFF(storage_pg_schema), 0, 0, NULL,
		"postgres: the schema echd creates and owns; one per echd namespace",
		"postgres.schema"},
	{"storage-timeout-ms", OPT_INT, false, "5000", OFF(storage_timeout_ms), 10, 3600000, NULL,
		"postgres: a round trip longer than this many milliseconds is a lost connection",
		"postgres.timeout-ms"},
	{"storage-pg-pipeline-depth", OPT_INT, false, "0", OFF(storage_pg_depth), 0, 16, NULL,
		"postgres: transactions that may be in flight (sent, their COMMIT not answered) "
		"while the next turns run, whose commits wait in memory and go as one when one "
		"lands; replies wait for their answer; 0 = each commit waits in the loop",
		"postgres.pipeline-depth"},
	{"storage-cache-size", OPT_MEM, false, "64mb", OFF(storage_cache_size), 0, LLMAX, NULL,
		"postgres: memory the active front end keeps stream entries in (estimated); the "
		"rest is read from PostgreSQL when needed; 0 = the whole schema, loaded at takeover",
		"postgres.cache-size"},
	{"ha-name", OPT_STR, false, "echd", OFF(ha_name), 0, 0, NULL,
		"the service's name for SENTINEL (get-master-addr-by-name, masters)",
		"postgres.ha-name"},
	/* the engine gets the address in effect: brk_config_announce() */
	{"ha-announce-ip", OPT_STR, false, "", OFF(ha_announce_ip), 0, 0, NULL,
		"the address clients reach this front end at, as SENTINEL tells them; empty = the "
		"first bind address (127.0.0.1 for a wildcard)", "postgres.announce-host"},
	{"ha-announce-port", OPT_INT, false, "0", OFF(ha_announce_port), 0, 65535, NULL,
		"the port SENTINEL tells clients for this front end; 0 = port",
		"postgres.announce-port"},
	{"ha-retry-ms", OPT_INT, true, "1000", OFF(ha_retry_ms), 10, 60000, NULL,
		"postgres: milliseconds between two checks of who is the active front end (a "
		"standby's try to take over, a reconnect)"},
	{"ha-lease-ms", OPT_INT, false, "5000", OFF(ha_lease_ms), 0, 3600000, NULL,
		"postgres: the active front end's lease: PostgreSQL ends its session after this "
		"many idle milliseconds (a hung front end loses its place), and reads are served "
		"from memory only this long after its last round trip; 0 = none",
		"postgres.lease-ms"},
	{"ha-reconnect-max-ms", OPT_INT, false, "5000", OFF(ha_reconnect_max_ms), 100, 600000,
		NULL,
		"postgres: the longest wait between two tries to reconnect to PostgreSQL (the "
		"wait doubles from 100 ms after each failed try, up to this): it bounds what a "
		"PostgreSQL failover adds to the outage", "postgres.reconnect-max-ms"},
	/* the engine gets the node id (cluster-enabled yes) and the shards'
	 * slot ranges (more than one): brk_config_engine_opts() */
	{"cluster-enabled", OPT_BOOL, false, "no", OFF(cluster_enabled), 0, 0, NULL,
		"speak the Redis Cluster protocol (CLUSTER SLOTS, hash slots, CROSSSLOT); needs "
		"storage postgres", "postgres.node"},
	{"cluster-shards", OPT_INT, false, "1", OFF(cluster_shards), 1, BRK_CLUSTER_SHARDS_MAX,
		NULL,
		"cluster-enabled: shards the 16384 hash slots are cut into, each a schema "
		"<storage-pg-schema>_s<i> (1: storage-pg-schema itself); every front end of a "
		"cluster gives the same number", "postgres.shards"},
	{"cluster-shards-per-node", OPT_INT, false, "1", OFF(cluster_shards_per_node), 1,
		BRK_WORKERS_MAX, NULL,
		"cluster-enabled: shards this front end may be active for at once; above 1 it "
		"runs that many worker processes, worker i on port + i (tls-port, http-port and "
		"ha-announce-port too) with its data in <dir>/node<i>, each active for one shard "
		"or standing by"},
	{"cluster-node-timeout", OPT_INT, false, "0", OFF(cluster_node_timeout), 0, 3600000, NULL,
		"cluster-shards > 1: milliseconds after its last HA poll a front end is no longer "
		"listed (a standby as a replica); 0 = three polls (ha-retry-ms, or a third of "
		"ha-lease-ms when shorter), at least 1000", "postgres.node-timeout-ms"},
	{"batch-max-commands", OPT_INT, true, "1024", OFF(batch_max_commands), 1, 1000000, NULL,
		"commands in one group commit before it is closed"},
	{"batch-max-reply-bytes", OPT_MEM, true, "4mb", OFF(batch_max_reply_bytes), 1024, LLMAX,
		NULL, "reply bytes one connection's pipeline may add to a loop turn before the rest "
		"of it waits for the next turn"},
	{"flush-wait-us", OPT_INT, true, "200", OFF(flush_wait_us), 0, 1000000, NULL,
		"appendfsync always: how long replies may wait for the next commit's flush "
		"before their commit is flushed alone"},
	{"slowlog-log-slower-than", OPT_INT, true, "10000", OFF(slowlog_log_slower_than), -1,
		LLMAX, NULL, "microseconds a command must run to be logged in SLOWLOG; -1 = none"},
	{"slowlog-max-len", OPT_INT, true, "128", OFF(slowlog_max_len), 0, LLMAX, NULL,
		"entries SLOWLOG keeps"},
	{"acllog-max-len", OPT_INT, true, "128", OFF(acllog_max_len), 0, LLMAX, NULL,
		"entries ACL LOG keeps"},
	{"latency-tracking", OPT_BOOL, true, "yes", OFF(latency_tracking), 0, 0, NULL,
		"keep a histogram of each command's run times (LATENCY HISTOGRAM, INFO latencystats)"},
	{"latency-tracking-info-percentiles", OPT_SPECIAL, true, "50 99 99.9", 0, 0, 0, NULL,
		"the percentiles INFO latencystats shows, up to 16 numbers from 0 to 100"},
	{"latency-monitor-threshold", OPT_INT, true, "0", OFF(latency_monitor_threshold), 0,
		LLMAX, NULL, "milliseconds from which the latency monitor records a spike; 0 = off"},
	{"multi-max-commands", OPT_INT, true, "100000", OFF(multi_max_commands), 1, 100000000,
		NULL, "commands one MULTI may queue before it is refused"},
	{"gc-batch-rows", OPT_INT, true, "10000", OFF(gc_batch_rows), 1, 100000000, NULL,
		"rows of deleted streams removed per batch"},
	{"policy-batch-rows", OPT_INT, true, "1000", OFF(policy_batch_rows), 1, 100000000, NULL,
		"entries group policies dead-letter per loop turn (the timer) and per XREADGROUP"},
	{"active-expire-keys", OPT_INT, true, "64", OFF(active_expire_keys), 0, 100000, NULL,
		"expired keys dropped per loop turn by the background cycle; 0 = only when used"},
	{"requirepass", OPT_STR, true, "", OFF(requirepass), 0, 0, NULL,
		"password of the default user; empty = none"},
	{"aclfile", OPT_STR, false, "", OFF(aclfile), 0, 0, NULL,
		"file of ACL users (user <name> <rules>), read at start and by ACL LOAD"},
	{"protected-mode", OPT_BOOL, true, "yes", OFF(protected_mode), 0, 0, NULL,
		"with no password, serve only loopback and unix-socket clients"},
	{"tls-port", OPT_INT, false, "0", OFF(tls_port), 0, 65535, NULL,
		"TLS port on the bind addresses, 0 = no TLS"},
	{"tls-cert-file", OPT_STR, true, "", OFF(tls_cert_file), 0, 0, NULL,
		"server certificate (PEM, may hold the chain)"},
	{"tls-key-file", OPT_STR, true, "", OFF(tls_key_file), 0, 0, NULL, "server private key (PEM)"},
	{"tls-key-file-pass", OPT_STR, true, "", OFF(tls_key_file_pass), 0, 0, NULL,
		"passphrase of tls-key-file"},
	{"tls-ca-cert-file", OPT_STR, true, "", OFF(tls_ca_cert_file), 0, 0, NULL,
		"CA certificates that sign client certificates"},
	{"tls-ca-cert-dir", OPT_STR, true, "", OFF(tls_ca_cert_dir), 0, 0, NULL,
		"directory of CA certificates (c_rehash layout)"},
	{"tls-auth-clients", OPT_ENUM, true, "yes", OFF(tls_auth_clients), 0, 0, tls_auth,
		"client certificates: yes (required), optional, or no"},
	{"tls-auth-clients-user", OPT_ENUM, true, "off", OFF(tls_auth_clients_user), 0, 0, tls_user,
		"CN: a client certificate's common name logs the client in as that ACL user"},
	{"tls-protocols", OPT_STR, true, "TLSv1.2 TLSv1.3", OFF(tls_protocols), 0, 0, NULL,
		"TLS versions allowed"},
	{"tls-ciphers", OPT_STR, true, "", OFF(tls_ciphers), 0, 0, NULL,
		"TLSv1.2 cipher list (OpenSSL syntax); empty = OpenSSL's default"},
	{"tls-ciphersuites", OPT_STR, true, "", OFF(tls_ciphersuites), 0, 0, NULL,
		"TLSv1.3 cipher suites; empty = OpenSSL's default"},
	{"tls-prefer-server-ciphers", OPT_BOOL, true, "no", OFF(tls_prefer_server_ciphers), 0, 0,
		NULL, "prefer the server's cipher order"},
	{"tls-session-caching", OPT_BOOL, true, "yes", OFF(tls_session_caching), 0, 0, NULL,
		"cache TLS sessions for resumption"},
	{"tls-handshake-timeout", OPT_INT, true, "10", OFF(tls_handshake_timeout), 1, 86400, NULL,
		"close a TLS connection whose handshake has not finished this many seconds after "
		"it was accepted"},
	{"http-port", OPT_INT, false, "0", OFF(http_port), 0, 65535, NULL,
		"port of the HTTP listener (GET /metrics); 0 = none"},
	{"http-bind", OPT_STR, false, "127.0.0.1", OFF(http_bind), 0, 0, NULL,
		"addresses the HTTP listener binds, space separated"},
	{"http-tls", OPT_BOOL, false, "no", OFF(http_tls), 0, 0, NULL,
		"serve HTTPS on http-port with the tls-cert-file and tls-key-file certificate"},
	{"http-maxclients", OPT_INT, true, "64", OFF(http_maxclients), 1, 100000, NULL,
		"HTTP connections open at once; past it the oldest without an authenticated request "
		"makes way, or the new one is closed when all have one"},
	{"http-max-header-size", OPT_MEM, false, "8kb", OFF(http_max_header_size), 1024,
		LLMAX, NULL, "largest request line and headers of an HTTP request"},
	{"http-max-body-size", OPT_MEM, false, "64kb", OFF(http_max_body_size), 0,
		LLMAX, NULL, "largest body of an HTTP request"},
	{"http-timeout", OPT_INT, true, "10", OFF(http_timeout), 1, 86400, NULL,
		"seconds an HTTP connection has to send a whole request, from its accept and "
		"from each answer; an idle one is closed then too"},
	{"metrics-max-series", OPT_INT, true, "10000", OFF(metrics_max_series), 0, 100000000,
		NULL, "per-stream, per-group and per-consumer series one /metrics scrape exports "
		"at most; the rest are counted in echd_metrics_series_dropped_total"},
	{"http-api-max-page", OPT_INT, true, "500", OFF(http_api_max_page), 1, 100000, NULL,
		"items one /api/ request lists at most (streams, pending entries, groups, "
		"consumers)"},
	{"http-sample-interval", OPT_INT, false, "5", OFF(http_sample_interval), 1, 3600, NULL,
		"seconds between two samples of each group's lag and pending count (the console's "
		"charts of the last hour)"},
	{"http-sample-max-groups", OPT_INT, true, "1000", OFF(http_sample_max_groups), 0,
		1000000, NULL, "groups whose lag and pending count are sampled at most; 0 = none"},
	{"daemonize", OPT_BOOL, false, "no", OFF(daemonize), 0, 0, NULL,
		"must be no: run under a supervisor"},
};

#define NOPTS (sizeof(opts) / sizeof(opts[0]))

/* Other names of an option (as Redis' replicaof/slaveof): they set and
 * show the same value; --list-options, --help and CONFIG REWRITE use the
 * option's own name. */
static const struct {
	const char *alias, *name;
} aliases[] = {
	{"storage-backend", "storage"},
};

#define NALIASES (sizeof(aliases) / sizeof(aliases[0]))

static const struct opt *
opt_find(const char *name)
{
	for (size_t i = 0; i < NALIASES; i++) {
		if (strcasecmp(aliases[i].alias, name) == 0) {
			name = aliases[i].name;
			break;
		}
	}
	for (size_t i = 0; i < NOPTS; i++) {
		if (strcasecmp(opts[i].name, name) == 0) {
			return &opts[i];
		}
	}
	return NULL;
}

/* Parses "100", "1k", "1kb", "5mb", "2gb" (Redis' memtoull rules). */
static bool
parse_mem(const char *s, long long *out)
{
	char *end;
	long long mul = 1, v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || end == s || v < 0) {
		return false;
	}
	if (*end == '\0') {
		mul = 1;
	} else if (!strcasecmp(end, "b")) {
		mul = 1;
	} else if (!strcasecmp(end, "k")) {
		mul = 1000;
	} else if (!strcasecmp(end, "kb")) {
		mul = 1024;
	} else if (!strcasecmp(end, "m")) {
		mul = 1000 * 1000;
	} else if (!strcasecmp(end, "mb")) {
		mul = 1024 * 1024;
	} else if (!strcasecmp(end, "g")) {
		mul = 1000LL * 1000 * 1000;
	} else if (!strcasecmp(end, "gb")) {
		mul = 1024LL * 1024 * 1024;
	} else {
		return false;
	}
	if (v > LLMAX / mul) {
		return false;
	}
	*out = v * mul;
	return true;
}

static bool
parse_int(const char *s, long long *out)
{
	return brk_str2ll(s, strlen(s), out);
}

static void
set_str(char **slot, const char *v)
{
	char *d = echd_strndup(v, strlen(v));
	if (d == NULL) {
		return;
	}
	echd_free(*slot);
	*slot = d;
}

static int
apply_bind(struct brk_config *cfg, int argc, char **argv, char *err, size_t errlen)
{
	if (argc < 1 || argc > BRK_MAX_BIND) {
		snprintf(err, errlen, "'bind' takes 1 to %d addresses", BRK_MAX_BIND);
		return -1;
	}
	for (int i = 0; i < cfg->nbind; i++) {
		ECHD_FREE(cfg->bind[i]);
	}
	cfg->nbind = 0;
	for (int i = 0; i < argc; i++) {
		cfg->bind[cfg->nbind] = echd_strndup(argv[i], strlen(argv[i]));
		if (cfg->bind[cfg->nbind] == NULL) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		cfg->nbind++;
	}
	return 0;
}

static int
apply_obuf(struct brk_config *cfg, int argc, char **argv, char *err, size_t errlen)
{
	/* Classes come in fours: <class> <hard> <soft> <seconds>. The normal
	 * and pubsub classes apply to echd; replica is accepted. The errors
	 * are Redis' words. */
	if (argc % 4 != 0 || argc == 0) {
		snprintf(err, errlen, "Wrong number of arguments in buffer limit configuration.");
		return -1;
	}
	for (int i = 0; i < argc; i += 4) {
		long long hard, soft, secs;
		if (strcasecmp(argv[i], "normal") && strcasecmp(argv[i], "replica") &&
			strcasecmp(argv[i], "slave") && strcasecmp(argv[i], "pubsub")) {
			snprintf(err, errlen,
				"Invalid client class specified in buffer limit configuration.");
			return -1;
		}
		if (!parse_mem(argv[i + 1], &hard) || !parse_mem(argv[i + 2], &soft) ||
			!parse_int(argv[i + 3], &secs) || secs < 0) {
			snprintf(err, errlen, "Error in hard, soft or soft_seconds setting in buffer "
					      "limit configuration.");
			return -1;
		}
		if (strcasecmp(argv[i], "normal") == 0) {
			cfg->obuf_hard = hard;
			cfg->obuf_soft = soft;
			cfg->obuf_soft_secs = secs;
		} else if (strcasecmp(argv[i], "pubsub") == 0) {
			cfg->obuf_pubsub_hard = hard;
			cfg->obuf_pubsub_soft = soft;
			cfg->obuf_pubsub_soft_secs = secs;
		}
	}
	return 0;
}

static int split_line(char *line, char **words, int max);

static int
apply_one(struct brk_config *cfg, const struct opt *o, int argc, char **argv, char *err,
	size_t errlen)
{
	char *base = (char *)cfg;
	long long v;

	if (o->type == OPT_SPECIAL && argc == 1 && strchr(argv[0], ' ') != NULL) {
		char copy[BRK_CONFIG_LINE_MAX], *words[BRK_MAX_BIND * 4 + 1];
		int n = 0;
		if ((size_t)snprintf(copy, sizeof(copy), "%s", argv[0]) >= sizeof(copy)) {
			snprintf(err, errlen, "value too long");
			return -1;
		}
		n = split_line(copy, words, (int)(sizeof(words) / sizeof(words[0])));
		if (n <= 0) {
			snprintf(err, errlen, "invalid value");
			return -1;
		}
		return apply_one(cfg, o, n, words, err, errlen);
	}
	if (o->type == OPT_SPECIAL) {
		if (strcmp(o->name, "bind") == 0) {
			return apply_bind(cfg, argc, argv, err, errlen);
		}
		if (strcmp(o->name, "client-output-buffer-limit") == 0) {
			return apply_obuf(cfg, argc, argv, err, errlen);
		}
		if (strcmp(o->name, "latency-tracking-info-percentiles") == 0) {
			/* "": no percentiles */
			bool none = argc == 1 && argv[0][0] == '\0';
			const char *why = brk_latency_parse_pcts(cfg, none ? 0 : argc, argv);
			if (why != NULL) {
				snprintf(err, errlen, "%s", why);
				return -1;
			}
			return 0;
		}
		if (strcmp(o->name, "maxmemory-clients") == 0) {
			size_t n = argc == 1 ? strlen(argv[0]) : 0;
			if (argc != 1) {
				goto arity;
			}
			if (n > 1 && argv[0][n - 1] == '%') {
				char num[32];
				if (n - 1 >= sizeof(num)) {
					goto bad_pct;
				}
				memcpy(num, argv[0], n - 1);
				num[n - 1] = '\0';
				if (!parse_int(num, &v) || v < 0 || v > 100) {
					goto bad_pct;
				}
				cfg->maxmemory_clients_pct = (int)v;
				cfg->maxmemory_clients = 0;
				return 0;
			}
			if (!parse_mem(argv[0], &v) || v < 0) {
				snprintf(err, errlen, "argument must be a memory or percent value");
				return -1;
			}
			cfg->maxmemory_clients = v;
			cfg->maxmemory_clients_pct = 0;
			return 0;
bad_pct:
			snprintf(err, errlen, "percentage argument must be between 0%% and 100%%");
			return -1;
		}
		if (strcmp(o->name, "unixsocketperm") == 0) {
			char *end;
			unsigned long p;
			if (argc != 1) {
				goto arity;
			}
			errno = 0;
			p = strtoul(argv[0], &end, 8);
			if (errno || *end || p > 0777) {
				snprintf(err, errlen, "invalid octal mode '%s'", argv[0]);
				return -1;
			}
			cfg->unixsocketperm = (unsigned)p;
			return 0;
		}
	}
	if (o->type == OPT_STR && argc > 1) {
		/* "tls-protocols TLSv1.2 TLSv1.3": the words are one value */
		char joined[1024];
		size_t n = 0;
		for (int i = 0; i < argc && n < sizeof(joined); i++) {
			n += (size_t)snprintf(joined + n, sizeof(joined) - n, "%s%s", i ? " " : "",
				argv[i]);
		}
		if (n >= sizeof(joined)) {
			snprintf(err, errlen, "value too long");
			return -1;
		}
		set_str((char **)(base + o->off), joined);
		return 0;
	}
	if (argc != 1) {
		goto arity;
	}
	switch (o->type) {
	case OPT_INT:
	case OPT_MEM:
		if (!(o->type == OPT_MEM ? parse_mem(argv[0], &v) : parse_int(argv[0], &v))) {
			snprintf(err, errlen, "%s",
				o->type == OPT_MEM ? "argument must be a memory value"
						   : "argument couldn't be parsed into an integer");
			return -1;
		}
		if (v < o->min || v > o->max) {
			snprintf(err, errlen, "argument must be between %lld and %lld inclusive",
				o->min, o->max);
			return -1;
		}
		if (o->off == OFF(port) || o->off == OFF(databases) || o->off == OFF(tls_port)) {
			*(int *)(base + o->off) = (int)v;
		} else {
			*(long long *)(base + o->off) = v;
		}
		return 0;
	case OPT_BOOL:
		if (!strcasecmp(argv[0], "yes")) {
			*(bool *)(base + o->off) = true;
		} else if (!strcasecmp(argv[0], "no")) {
			*(bool *)(base + o->off) = false;
		} else {
			snprintf(err, errlen, "argument must be 'yes' or 'no'");
			return -1;
		}
		return 0;
	case OPT_STR:
		set_str((char **)(base + o->off), argv[0]);
		return 0;
	case OPT_ENUM:
		for (int i = 0; o->enums[i] != NULL; i++) {
			if (!strcasecmp(o->enums[i], argv[0])) {
				*(int *)(base + o->off) = i;
				return 0;
			}
		}
		{
			size_t n = (size_t)snprintf(err, errlen, "argument(s) must be one of the following: ");
			for (int i = 0; o->enums[i] != NULL && n < errlen; i++) {
				n += (size_t)snprintf(err + n, errlen - n, "%s%s", i ? ", " : "",
					o->enums[i]);
			}
		}
		return -1;
	case OPT_SPECIAL:
		break;
	}
arity:
	snprintf(err, errlen, "wrong number of arguments");
	return -1;
}

int
brk_config_apply(struct brk_config *cfg, int argc, char **argv, bool from_set, char *err,
	size_t errlen)
{
	const struct opt *o;

	if (argc < 1) {
		snprintf(err, errlen, "empty option");
		return -1;
	}
	o = opt_find(argv[0]);
	if (o == NULL) {
		snprintf(err, errlen, "unknown option '%s'", argv[0]);
		return -1;
	}
	if (from_set && !o->runtime) {
		snprintf(err, errlen, "can't set immutable config");
		return -1;
	}
	if (o->type == OPT_BOOL && o->off == OFF(daemonize) && argc == 2 &&
		!strcasecmp(argv[1], "yes")) {
		snprintf(err, errlen, "'daemonize yes' is not supported: run echd under systemd");
		return -1;
	}
	return apply_one(cfg, o, argc - 1, argv + 1, err, errlen);
}

/* As brk_config_apply, with the option's name in front of the reason. */
static int
apply_named(struct brk_config *cfg, int argc, char **argv, char *err, size_t errlen)
{
	char sub[256];

	if (brk_config_apply(cfg, argc, argv, false, sub, sizeof(sub)) == 0) {
		return 0;
	}
	if (strncmp(sub, "unknown option", 14) == 0) {
		snprintf(err, errlen, "%s", sub);
	} else {
		snprintf(err, errlen, "option '%s': %s", argv[0], sub);
	}
	return -1;
}

/* Splits a config line into words, honouring "double" and 'single' quotes. */
static int
split_line(char *line, char **words, int max)
{
	int n = 0;
	char *p = line;

	while (*p) {
		char *w;
		while (isspace((unsigned char)*p)) {
			p++;
		}
		if (*p == '\0' || *p == '#') {
			break;
		}
		if (n == max) {
			return -1;
		}
		if (*p == '"' || *p == '\'') {
			char q = *p++;
			w = p;
			while (*p && *p != q) {
				p++;
			}
			if (*p != q) {
				return -1;
			}
			*p++ = '\0';
		} else {
			w = p;
			while (*p && !isspace((unsigned char)*p)) {
				p++;
			}
			if (*p) {
				*p++ = '\0';
			}
		}
		words[n++] = w;
	}
	return n;
}

int
brk_config_load_file(struct brk_config *cfg, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	char line[BRK_CONFIG_LINE_MAX];
	int lineno = 0;

	if (f == NULL) {
		snprintf(err, errlen, "cannot open config file '%s': %s", path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		char *words[64];
		char sub[512]; /* apply_named()'s "option 'name': " around a reason of up to 255 */
		int n;

		lineno++;
		if (strchr(line, '\n') == NULL && !feof(f)) {
			snprintf(err, errlen, "%s:%d: line longer than %d bytes", path, lineno,
				BRK_CONFIG_LINE_MAX - 1);
			fclose(f);
			return -1;
		}
		line[strcspn(line, "\r\n")] = '\0';
		n = split_line(line, words, 64);
		if (n < 0) {
			snprintf(err, errlen, "%s:%d: unbalanced quotes or too many words", path,
				lineno);
			fclose(f);
			return -1;
		}
		if (n == 0) {
			continue;
		}
		if (apply_named(cfg, n, words, sub, sizeof(sub)) != 0) {
			snprintf(err, errlen, "%s:%d: %s", path, lineno, sub);
			fclose(f);
			return -1;
		}
	}
	fclose(f);
	return 0;
}

void
brk_config_defaults(struct brk_config *cfg)
{
	char err[256];

	memset(cfg, 0, sizeof(*cfg));
	for (size_t i = 0; i < NOPTS; i++) {
		char buf[256], *words[16];
		int n;

		snprintf(buf, sizeof(buf), "%s %s", opts[i].name, opts[i].def);
		n = split_line(buf, words, 16);
		if (opts[i].type == OPT_STR && n == 1) {
			set_str((char **)((char *)cfg + opts[i].off), "");
			continue;
		}
		if (brk_config_apply(cfg, n, words, false, err, sizeof(err)) != 0) {
			echd_log(ECHD_LOG_WARNING, "bad default for %s: %s", opts[i].name, err);
		}
	}
}

void
brk_config_finish(struct brk_config *cfg)
{
	for (int i = 0; i < cfg->nbind; i++) {
		ECHD_FREE(cfg->bind[i]);
	}
	for (size_t i = 0; i < NOPTS; i++) {
		if (opts[i].type == OPT_STR) {
			ECHD_FREE(*(char **)((char *)cfg + opts[i].off));
		}
	}
}

void
brk_config_usage(FILE *f)
{
	fprintf(f, "Usage: echd [CONFIG_FILE] [--name value ...]\n"
		   "       echd --help | --version | --list-options\n\n"
		   "echd is a durable message broker speaking the Redis protocol; streams and\n"
		   "consumer groups are kept in LMDB and every reply follows its commit.\n\n"
		   "Options (config file lines are 'name value'; the command line uses --name value):\n");
	for (size_t i = 0; i < NOPTS; i++) {
		fprintf(f, "  --%-28s %s (default: %s)%s\n", opts[i].name, opts[i].help,
			opts[i].def[0] ? opts[i].def : "\"\"", opts[i].runtime ? "" : " [restart]");
	}
	fprintf(f, "\nExamples:\n  echd --port 7379 --dir /var/lib/echd\n"
		   "  echd /etc/echd/echd.conf --loglevel verbose\n");
}

int
brk_config_from_args(struct brk_config *cfg, int argc, char **argv, char *err, size_t errlen)
{
	int i = 1;

	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		brk_config_usage(stdout);
		return 1;
	}
	if (argc >= 2 && !strcmp(argv[1], "--list-options")) {
		/* For tools and tests that keep echd.conf and the docs true:
		 * name, default, "runtime" or "restart", help; tab-separated. */
		for (size_t k = 0; k < NOPTS; k++) {
			printf("%s\t%s\t%s\t%s\n", opts[k].name, opts[k].def,
				opts[k].runtime ? "runtime" : "restart", opts[k].help);
		}
		return 1;
	}
	if (argc >= 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-v"))) {
		printf("echd v=%s redis-compat=%s\n", ECHD_VERSION, ECHD_REDIS_VERSION);
		return 1;
	}
	if (argc >= 2 && argv[1][0] != '-') {
		if (brk_config_load_file(cfg, argv[1], err, errlen) != 0) {
			return -1;
		}
		i = 2;
	}
	while (i < argc) {
		char line[BRK_CONFIG_LINE_MAX], *words[BRK_MAX_BIND + 8];
		size_t len;
		int n, j;

		if (strncmp(argv[i], "--", 2) != 0 || argv[i][2] == '\0') {
			snprintf(err, errlen, "unexpected argument '%s' (options are --name value)",
				argv[i]);
			return -1;
		}
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "--version")) {
			snprintf(err, errlen, "'%s' must be the only argument", argv[i]);
			return -1;
		}
		/* Like redis-server: the values are read as a config line, so
		 * --client-output-buffer-limit "normal 1mb 0 0" works. */
		len = (size_t)snprintf(line, sizeof(line), "%s", argv[i] + 2);
		for (j = i + 1; j < argc && strncmp(argv[j], "--", 2) != 0; j++) {
			len += (size_t)snprintf(line + len, len < sizeof(line) ? sizeof(line) - len : 0,
				argv[j][0] ? " %s" : " \"\"", argv[j]);
		}
		if (len >= sizeof(line)) {
			snprintf(err, errlen, "option '--%s': value too long", argv[i] + 2);
			return -1;
		}
		n = split_line(line, words, (int)(sizeof(words) / sizeof(words[0])));
		if (n < 0) {
			snprintf(err, errlen, "option '--%s': unbalanced quotes or too many values",
				argv[i] + 2);
			return -1;
		}
		if (n == 1) {
			snprintf(err, errlen, "option '--%s' needs a value", words[0]);
			return -1;
		}
		if (apply_named(cfg, n, words, err, errlen) != 0) {
			return -1;
		}
		i = j;
	}
	return 0;
}

static void
format_opt(const struct brk_config *cfg, const struct opt *o, char *buf, size_t len)
{
	const char *base = (const char *)cfg;

	switch (o->type) {
	case OPT_INT:
	case OPT_MEM:
		if (o->off == OFF(port) || o->off == OFF(databases) || o->off == OFF(tls_port)) {
			snprintf(buf, len, "%d", *(const int *)(base + o->off));
		} else {
			snprintf(buf, len, "%lld", *(const long long *)(base + o->off));
		}
		return;
	case OPT_BOOL:
		snprintf(buf, len, "%s", *(const bool *)(base + o->off) ? "yes" : "no");
		return;
	case OPT_STR: {
		const char *s = *(char *const *)(base + o->off);
		snprintf(buf, len, "%s", s ? s : "");
		return;
	}
	case OPT_ENUM:
		snprintf(buf, len, "%s", o->enums[*(const int *)(base + o->off)]);
		return;
	case OPT_SPECIAL:
		break;
	}
	if (strcmp(o->name, "bind") == 0) {
		size_t n = 0;
		buf[0] = '\0';
		for (int i = 0; i < cfg->nbind && n < len; i++) {
			n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? " " : "", cfg->bind[i]);
		}
	} else if (strcmp(o->name, "unixsocketperm") == 0) {
		snprintf(buf, len, "%o", cfg->unixsocketperm);
	} else if (strcmp(o->name, "maxmemory-clients") == 0) {
		if (cfg->maxmemory_clients_pct > 0) {
			snprintf(buf, len, "%d%%", cfg->maxmemory_clients_pct);
		} else {
			snprintf(buf, len, "%lld", cfg->maxmemory_clients);
		}
	} else if (strcmp(o->name, "latency-tracking-info-percentiles") == 0) {
		brk_latency_format_pcts(cfg, buf, len);
	} else {
		/* Redis 7 still names the replica class "slave" here */
		snprintf(buf, len, "normal %lld %lld %lld slave 268435456 67108864 60 pubsub "
				   "%lld %lld %lld",
			cfg->obuf_hard, cfg->obuf_soft, cfg->obuf_soft_secs, cfg->obuf_pubsub_hard,
			cfg->obuf_pubsub_soft, cfg->obuf_pubsub_soft_secs);
	}
}

/* What CONFIG GET shows: the value, with storage-url's password hidden. */
static void
format_shown(const struct brk_config *cfg, const struct opt *o, char *buf, size_t len)
{
	if (o->off == OFF(storage_url) && o->type == OPT_STR) {
		const char *url = cfg->storage_url ? cfg->storage_url : "";
		echd_url_redact(url, buf, len);
		return;
	}
	format_opt(cfg, o, buf, len);
}

const char *
brk_config_lookup(const char *name, bool *runtime)
{
	const struct opt *o = opt_find(name);

	if (o == NULL) {
		return NULL;
	}
	*runtime = o->runtime;
	return o->name;
}

bool
brk_config_value(const struct brk_config *cfg, const char *name, char *buf, size_t len)
{
	const struct opt *o = opt_find(name);

	if (o == NULL) {
		return false;
	}
	format_shown(cfg, o, buf, len);
	return true;
}

void
brk_config_get(const struct brk_config *cfg, const char *pattern, brk_config_fn fn, void *ud)
{
	for (size_t i = 0; i < NOPTS; i++) {
		char buf[BRK_CONFIG_LINE_MAX];
		if (!brk_glob_match(pattern, strlen(pattern), opts[i].name, strlen(opts[i].name),
			    true)) {
			continue;
		}
		format_shown(cfg, &opts[i], buf, sizeof(buf));
		fn(opts[i].name, buf, ud);
	}
	for (size_t i = 0; i < NALIASES; i++) {
		char buf[BRK_CONFIG_LINE_MAX];
		const char *a = aliases[i].alias;
		if (!brk_glob_match(pattern, strlen(pattern), a, strlen(a), true)) {
			continue;
		}
		format_shown(cfg, opt_find(a), buf, sizeof(buf));
		fn(a, buf, ud);
	}
}

/* ------------------------------------------------------------------------
 * CONFIG REWRITE
 * ---------------------------------------------------------------------- */

/* The comment above the options a rewrite adds at the end (Redis' words). */
#define REWRITE_SIGNATURE "# Generated by CONFIG REWRITE"

/* Writes "name value" as the file parser reads it back: a string that is
 * empty, holds blanks or starts with a quote or '#' is quoted with a quote
 * it does not hold. False if it cannot be written so (a newline, or both
 * quotes where quoting is needed). */
static bool
write_opt(FILE *out, const struct brk_config *cfg, const struct opt *o)
{
	char v[BRK_CONFIG_LINE_MAX];
	const char *q = "";
	bool plain = true;

	format_opt(cfg, o, v, sizeof(v));
	if (strpbrk(v, "\r\n") != NULL || strlen(o->name) + strlen(v) + 4 >= sizeof(v)) {
		return false; /* a line the loader could not read back */
	}
	if (o->type == OPT_STR || o->type == OPT_SPECIAL) {
		for (const char *p = v; *p && plain; p++) {
			plain = !isspace((unsigned char)*p) || o->type == OPT_SPECIAL;
		}
		plain = plain && v[0] != '\0' && v[0] != '"' && v[0] != '\'' && v[0] != '#';
	}
	if (!plain) {
		if (strchr(v, '"') == NULL) {
			q = "\"";
		} else if (strchr(v, '\'') == NULL) {
			q = "'";
		} else {
			return false;
		}
	}
	fprintf(out, "%s %s%s%s\n", o->name, q, v, q);
	return true;
}

/* Whether an option's current value is its default. */
static bool
at_default(const struct brk_config *cfg, const struct brk_config *def, const struct opt *o)
{
	char a[BRK_CONFIG_LINE_MAX], b[BRK_CONFIG_LINE_MAX];

	format_opt(cfg, o, a, sizeof(a));
	format_opt(def, o, b, sizeof(b));
	return strcmp(a, b) == 0;
}

/* Flushes the directory that holds path, so that a rename in it lasts. */
static int
sync_dir_of(const char *path)
{
	char dir[4096];
	const char *slash = strrchr(path, '/');

	if (slash == NULL) {
		snprintf(dir, sizeof(dir), ".");
	} else {
		snprintf(dir, sizeof(dir), "%.*s", slash == path ? 1 : (int)(slash - path), path);
	}
	return echd_fsync_path(dir, O_RDONLY | O_DIRECTORY);
}

int
brk_config_rewrite(const struct brk_config *cfg, const char *path, char *err, size_t errlen)
{
	struct brk_config def;
	bool done[NOPTS] = {false}, signed_off = false, created = false;
	const struct opt *bad = NULL;
	char tmp[4096], line[BRK_CONFIG_LINE_MAX];
	FILE *in = NULL, *out = NULL;
	struct stat st;
	mode_t mode = 0644;
	int fd = -1, rc = 0;

	brk_config_defaults(&def);
	if (stat(path, &st) == 0) {
		mode = st.st_mode & 07777; /* the rewritten file keeps its permissions */
	}
	in = fopen(path, "r");
	if (in == NULL && errno != ENOENT) {
		rc = -errno;
		goto out;
	}
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.rewrite-%ld", path, (long)getpid()) >=
		sizeof(tmp)) {
		rc = -ENAMETOOLONG;
		goto out;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0) {
		rc = -errno;
		goto out;
	}
	created = true;
	out = fdopen(fd, "w");
	if (out == NULL) {
		rc = -errno;
		goto out;
	}
	fd = -1; /* out owns it */
	/* Every line stays where it is; an option's first line gets its value
	 * now, a repeat of it goes (the last one was the one in force). */
	while (in != NULL && fgets(line, sizeof(line), in) != NULL) {
		char copy[sizeof(line)], *words[64];
		const struct opt *o = NULL;
		size_t len = strcspn(line, "\r\n");

		line[len] = '\0';
		signed_off |= strcmp(line, REWRITE_SIGNATURE) == 0; /* a rewrite's, kept */
		memcpy(copy, line, len + 1);
		if (split_line(copy, words, 64) > 0) {
			o = opt_find(words[0]);
		}
		if (o == NULL) {
			fprintf(out, "%s\n", line);
		} else if (!done[o - opts]) {
			done[o - opts] = true;
			if (!write_opt(out, cfg, o)) {
				bad = o;
				goto out;
			}
		}
	}
	if (in != NULL && ferror(in)) {
		rc = -EIO;
		goto out;
	}
	/* Then what differs from the defaults and the file did not name. */
	for (size_t i = 0; i < NOPTS; i++) {
		if (done[i] || at_default(cfg, &def, &opts[i])) {
			continue;
		}
		if (!signed_off) {
			fprintf(out, "%s\n", REWRITE_SIGNATURE);
			signed_off = true;
		}
		if (!write_opt(out, cfg, &opts[i])) {
			bad = &opts[i];
			goto out;
		}
	}
	if (fflush(out) != 0 || fsync(fileno(out)) != 0) {
		rc = -errno;
		goto out;
	}
	rc = fclose(out) == 0 ? 0 : -errno;
	out = NULL;
	if (rc == 0 && rename(tmp, path) != 0) {
		rc = -errno;
	}
	if (rc == 0) {
		created = false; /* it is the config file now */
		rc = sync_dir_of(path);
	}
out:
	if (bad != NULL) {
		snprintf(err, errlen, "the value of '%s' cannot be written in a config file",
			bad->name);
		rc = -1;
	} else if (rc != 0) {
		snprintf(err, errlen, "%s", strerror(-rc));
	}
	if (out != NULL) {
		fclose(out);
	} else if (fd >= 0) {
		close(fd);
	}
	if (created) {
		unlink(tmp);
	}
	if (in != NULL) {
		fclose(in);
	}
	brk_config_finish(&def);
	return rc;
}

void
brk_config_announce(const struct brk_config *cfg, char *host, size_t len, int *port)
{
	const char *ip = cfg->ha_announce_ip;

	if (ip == NULL || ip[0] == '\0') {
		ip = cfg->nbind > 0 ? cfg->bind[0] : "127.0.0.1";
		ip += ip[0] == '-'; /* "-::1": bound if available */
		if (!strcmp(ip, "*") || !strcmp(ip, "0.0.0.0") || !strcmp(ip, "::") ||
			!strcmp(ip, "::*")) {
			ip = "127.0.0.1"; /* a wildcard is no address to give clients */
		}
	}
	snprintf(host, len, "%s", ip);
	*port = cfg->ha_announce_port != 0 ? (int)cfg->ha_announce_port : cfg->port;
}

long long
brk_config_ha_poll_ms(const struct brk_config *cfg)
{
	long long ms = cfg->ha_retry_ms;

	if (cfg->ha_lease_ms > 0 && ms > cfg->ha_lease_ms / 3) {
		ms = cfg->ha_lease_ms / 3 > 0 ? cfg->ha_lease_ms / 3 : 1;
	}
	return ms;
}

long long
brk_config_node_timeout(const struct brk_config *cfg)
{
	long long ms = 3 * brk_config_ha_poll_ms(cfg);

	if (cfg->cluster_node_timeout > 0) {
		return cfg->cluster_node_timeout;
	}
	/* a standby's poll is a few round trips: three missed are a front end
	 * gone, not a slow one */
	return ms > BRK_CONFIG_NODE_TIMEOUT_MIN ? ms : BRK_CONFIG_NODE_TIMEOUT_MIN;
}

void
brk_config_engine_opts_free(struct storage_opt *opt, size_t n)
{
	for (size_t i = 0; opt != NULL && i < n; i++) {
		echd_free((char *)opt[i].value);
	}
	echd_free(opt);
}

int
brk_config_engine_opts(const struct brk_config *cfg, struct storage_opt **out, size_t *n)
{
	struct storage_opt *opt = echd_calloc(NOPTS, sizeof(*opt));
	size_t k = 0;

	if (opt == NULL) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < NOPTS; i++) {
		char buf[BRK_CONFIG_LINE_MAX];
		int port;

		if (opts[i].engine == NULL) {
			continue;
		}
		/* the announced address in effect, not the option as set */
		if (opts[i].off == OFF(cluster_enabled)) {
			snprintf(buf, sizeof(buf), "%s", cfg->cluster_enabled ? cfg->cluster_node : "");
		} else if (opts[i].off == OFF(cluster_shards)) {
			buf[0] = '\0';
			if (cfg->cluster_enabled && cfg->cluster_shards > 1 &&
				brk_cluster_ranges((unsigned)cfg->cluster_shards, buf, sizeof(buf)) != 0) {
				brk_config_engine_opts_free(opt, k);
				return -EINVAL; /* not with the table's bound */
			}
		} else if (opts[i].off == OFF(cluster_node_timeout)) {
			snprintf(buf, sizeof(buf), "%lld", brk_config_node_timeout(cfg));
		} else if (opts[i].off == OFF(ha_announce_ip)) {
			brk_config_announce(cfg, buf, sizeof(buf), &port);
		} else if (opts[i].off == OFF(ha_announce_port)) {
			brk_config_announce(cfg, buf, sizeof(buf), &port);
			snprintf(buf, sizeof(buf), "%d", port);
		} else {
			format_opt(cfg, &opts[i], buf, sizeof(buf));
		}
		opt[k].name = opts[i].engine;
		opt[k].value = echd_strndup(buf, strlen(buf));
		if (opt[k++].value == NULL) {
			brk_config_engine_opts_free(opt, k);
			return -ENOMEM;
		}
	}
	*out = opt;
	*n = k;
	return 0;
}
