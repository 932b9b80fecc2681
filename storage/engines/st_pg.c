/* st_pg.c - the postgres storage backend (issue 27): storage.h on a
 * PostgreSQL schema that several echd front ends share, one of them active.
 *
 * The cache. Exactly one front end is active per schema (an advisory lock,
 * and fencing, below), so what it loaded when it became active plus what it
 * committed since is the schema's state. The schema is therefore kept in an
 * inner "mem" storage (st_mem.c) that this backend owns: every get and
 * cursor is served from memory, and PostgreSQL sees only the load at
 * takeover and the writes at commit. With cache-size, the entries and
 * nodes tables are held only in part and read by range when needed ("The
 * partial cache" below, issue 34); without, the whole schema. Transactions, rows and cursors are
 * forwarded to the inner storage by the forwarding base (forward.h), as
 * st_fault.c's are to lmdb; nested transactions and their aborts are the
 * inner engine's. What this file changes: the begin (only when active), the
 * writes (logged, below), the cursor moves of a write transaction (they
 * keep the key a cursor_del removes), the commit, and the optional
 * interfaces: HA is this file's, and mem's (none) are not passed on.
 *
 * The commit. A top-level write transaction logs the (table, key) pairs
 * that its puts and deletes touched, its children's included (an aborted
 * child's stay in the log: harmless, as the commit reads each key's final
 * state). Its commit sorts and dedups the log, reads each key in the inner
 * transaction (found: to that table's upsert arrays; not: to its delete
 * array) and sends, in one round trip in libpq's pipeline mode: BEGIN; the
 * fence check; per touched table one DELETE ... WHERE k = ANY($1) and one
 * INSERT ... SELECT unnest($1, $2) ON CONFLICT (k) DO UPDATE; COMMIT. The
 * arrays travel as binary bytea[] parameters of statements prepared once
 * per connection; an array over PG_PARAM_MAX bytes goes as several
 * statements, because PostgreSQL takes no value (and no message) past
 * 1 GB, and one row's value over PG_VALUE_MAX is refused at its put
 * (-EFBIG: that command fails, not its batch). Each write statement checks
 * its row count (rows written against those sent, rows deleted against
 * those there were) and divides by zero on a mismatch, so that a trigger or
 * rule that drops rows fails the transaction before its COMMIT; tables with
 * triggers, rules or row level security are refused at open and takeover
 * (check_plain()). The inner transaction commits once the batch is sent
 * (or, at depth 0, once its COMMIT answered); a failure known by then
 * aborts it, so the cache equals PostgreSQL again. A commit that touched
 * nothing sends nothing.
 *
 * Durability: a commit is durable once PostgreSQL answered its COMMIT,
 * under its synchronous_commit (on for one server; remote_apply with a
 * synchronous standby for no loss at a PostgreSQL failover). With
 * postgres.pipeline-depth > 0 commits overlap ("Overlapped commits"
 * below): up to that many stay in flight when a commit returns, the
 * commits meanwhile wait in the cache and go as one batch, and durable_gen
 * lags by them; sync reads every answer. At depth 0 (the default: on two
 * CPUs, PostgreSQL's share of one, overlap measured slower) or with
 * STORAGE_SYNC_FULL, a commit is durable when it returns.
 *
 * Fencing. The row <schema>.ha (id 1) holds gen, bumped by each takeover.
 * Every write transaction locks it FOR SHARE right after BEGIN and divides
 * by zero unless gen is still ours: a front end that lost its place fails
 * there, and a takeover's UPDATE waits for an in-flight commit, so an old
 * active can never commit after the new one loaded its state. The active
 * one also holds a session advisory lock (a 64-bit FNV-1a of "echd:" +
 * schema); standbys try it on every poll, and PostgreSQL releases it when
 * the active one's session dies.
 *
 * The lease. With lease-ms, PostgreSQL (14+) ends a session idle that long
 * (idle_session_timeout): a hung active front end loses its lock, and the
 * broker polls at least three times a lease. Reads are served from the
 * cache while the session is known alive: within lease-ms of the send of
 * the last statement it answered; past that storage_ha_confirm() asks. A
 * transaction-mode pooler would break the session's lock: the session
 * carries a token (echd.session) that the polls check (session_check()).
 *
 * Shards (postgres.shards, issue 36). The store is then cut into parts,
 * schema <schema>_s<i> each with its own ha row, lock and fence, the map
 * (index, schema, the caller's first and last key of each) in
 * <schema>.shards, created under the creation lock and compared at every
 * open (another map: refused). A front end holds at most one part: while
 * standby each poll tries the parts' locks in order and takes the first
 * free one, preparing the statements again for its schema; then the part
 * is served exactly as a lone schema. Every poll also reads, in one
 * statement, each part's ha row (its front end's node, postgres.node, and
 * address) and whether its lock is held (pg_locks), which
 * storage_ha_part() answers from. The same statement keeps the registry
 * of front ends, <schema>.frontends: it writes this front end's row (node,
 * address, role, the part held, and now() as its heartbeat), and reads the
 * others' rows younger than node-timeout-ms, which storage_ha_front()
 * answers from (a standby is listed nowhere else); older rows are deleted.
 * A read_only open with shards "map" (echo-admin shards) reads no data:
 * the map of the store <schema> names, who holds each part, and every
 * registry row with its age, once.
 *
 * Servers (issue 36). A part may live on another PostgreSQL: the url of
 * its row in the map (NULL: postgres.url, the home server, which keeps the
 * map and the registry), set by echo-admin (storage_ha_part_move(), only
 * for a part no front end holds and whose schema is empty: no data moves).
 * A front end keeps a session per server (struct pg_srv); s->conn is the
 * one statements go to, and srv_use() swaps another in with what belongs
 * to a session (token, liveness, back-off). A standby tries each part's
 * lock on its server, and the session that wins serves the part (the data
 * server: commits, fence, lease, the fetch connection's URL). The poll's
 * read is one statement per server, the home one also writing the
 * heartbeat and returning each part's url: a front end follows a move at
 * its next poll (relocate()), and before a takeover reads the url again
 * (echo-admin holds the part's lock on the old server while it writes
 * the map, so the one that wins the lock after sees the new url). A server
 * lost is logged by name ("server <url>: ...", password redacted) and
 * reconnected with its own back-off; it takes the role only when it is the
 * data server's. Without the home server no takeover happens.
 *
 * Never blocking forever. The socket is non-blocking; every wait is a
 * poll() against the option timeout-ms (default 5000) per round trip, past
 * which (after one more look: a stall of this process is not a lost
 * answer) the connection counts as lost and is closed.
 *
 * Options (storage.h, "postgres.<name>"): url (required), schema ("echd"),
 * ha-name ("echd"), announce-host, announce-port, timeout-ms, lease-ms (0:
 * none), reconnect-max-ms (the reconnect back-off's cap, 5000), cache-size
 * (0: the whole schema), shards ("": one schema), node, node-timeout-ms (the
 * registry's bound; 0: 5000, or every row read_only), pipeline-depth (0; 0 to
 * 16).
 *
 * What a failed top-level commit returns (nothing of it is in the cache;
 * a commit that returned 0 and failed later in flight is answered by
 * storage_sync(), with the same codes, and leaves the role):
 *   ECHD_ESTANDBY  the fence failed: another front end took over; now STANDBY
 *   -EIO           PostgreSQL refused a statement, or stored other rows than
 *                  sent (logged); still ACTIVE
 *   ECHD_EOFFLINE  the connection was lost (or timed out) before COMMIT was
 *                  sent: nothing applied; now OFFLINE
 *   ECHD_EINDOUBT  lost after COMMIT was sent, before its answer: applied or
 *                  not; now OFFLINE (a takeover reloads the cache)
 * A write transaction begun when not active fails with ECHD_ESTANDBY or
 * ECHD_EOFFLINE; read transactions always run (on what was loaded last).
 *
 * A read_only open (echo-admin, tools) loads one consistent snapshot and
 * neither locks nor writes. All libpq types stay in this file.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "echd.h"
#include "forward.h"
#include "st_pg_cache.h"
#include "st_pg_test.h"

#define PG_TIMEOUT_MS_DEFAULT 5000
#define PG_BACKOFF_MIN_MS     100
#define PG_BACKOFF_MAX_MS     5000 /* the default of reconnect-max-ms */
/* postgres.node-timeout-ms unset: a registry row older is not listed */
#define PG_NODE_TIMEOUT_MS_DEFAULT 5000
#define PG_SCHEMA_VERSION     1
#define PG_SHARDS_MAX          16384 /* postgres.shards: parts of one store */
#define PG_NAME_MAX           63    /* NAMEDATALEN - 1: longer names are cut */
#define PG_DEPTH_DEFAULT      0     /* postgres.pipeline-depth (measured: tests/bench) */
#define PG_DEPTH_MAX          16
#define PG_PEND_MAX           ((size_t)64 << 20) /* log bytes pending before a commit waits */
#define PG_OID_INT8           20
#define PG_OID_BYTEA_ARRAY    1001
#define PG_OID_BYTEA          17
/* PostgreSQL keeps at most 1 GB in one value, and reads no message past
 * that: a row's value may take PG_VALUE_MAX (room left for its key and the
 * message around it), and the arrays of one statement PG_PARAM_MAX
 * together (its in-memory form adds up to 3 bytes an element). */
#define PG_VALUE_MAX ((size_t)960 << 20)
#define PG_PARAM_MAX ((size_t)256 << 20)

static size_t pg_value_max = PG_VALUE_MAX, pg_param_max = PG_PARAM_MAX;
static unsigned pg_stall_ms;

void
st_pg_test_limits(size_t value_max, size_t param_max)
{
	pg_value_max = value_max != 0 ? value_max : PG_VALUE_MAX;
	pg_param_max = param_max != 0 ? param_max : PG_PARAM_MAX;
}

void
st_pg_test_stall(unsigned ms)
{
	pg_stall_ms = ms;
}

static const char *const pg_tables[] = {
	"meta", "keys", "entries", "nodes", "groups", "consumers", "consrec",
	"pel", "cpel", "byid", "trash", "expires", "idmp", "due",
};
_Static_assert(sizeof(pg_tables) / sizeof(pg_tables[0]) == STORAGE_T__COUNT,
	"pg_tables[] must name every enum storage_table");

/* The lazy tables of the partial cache: read by range when needed. */
#define PG_NLAZY 2
#define PG_NSEQ  8
static const enum storage_table pg_lazy_tb[PG_NLAZY] = {STORAGE_T_ENTRIES, STORAGE_T_NODES};

/* A fetch: the rows of [lo, hi) of a lazy table, the first (back: the
 * last) rows of them. */
struct pg_req {
	int ix; /* into pg_lazy_tb */
	bool back;
	struct pgc_bound lo, hi;
	unsigned rows;
};

/* A part of a store cut into shards (postgres.shards): a schema each,
 * with its own lock and fence. */
struct pg_shard {
	char *schema;         /* owned: <schema>_s<i> */
	unsigned first, last; /* the caller's range, kept in <schema>.shards */
	int64_t lock_key;
	struct storage_ha_part seen; /* as of the last poll (peers_read()) */
	char *url;            /* owned: its server's, as the map said last; NULL: home */
	size_t srv;           /* into st_pg.srv */
};

/* A PostgreSQL server of a store of shards ("Servers" below): 0 is the
 * home one (postgres.url: the map, the registry, and each shard without a
 * url of its own). The statements go to s->conn, the session of server
 * s->at; the others' sessions, and what belongs to a session, wait here
 * (srv_use()). */
/* What belongs to a session besides its connection: st_pg.sess for
 * s->conn's, a pg_srv's for a session parked there (srv_use()). */
struct pg_sess {
	char why[256];       /* the last connection error */
	/* Reconnecting: not before next_try_ms; backoff_ms doubles per failure. */
	int64_t next_try_ms;
	unsigned backoff_ms;
	bool warned;         /* this back-off step's failure was logged */
	/* The session is known alive (and so holds the lock, when active) as
	 * of alive_ms: the send time of the last statement it answered. */
	int64_t sent_ms, alive_ms;
	char token[40];      /* our session's echd.session setting (a pooler check) */
};

struct pg_srv {
	char *url;         /* owned */
	char *label;       /* owned: url, its password redacted (logs, echo-admin) */
	char *peers_sql;   /* owned: its shards' ha rows (home: and the registry); NULL: none */
	PGconn *conn;      /* NULL while it is s->conn, or offline */
	struct pg_sess sess; /* conn's, while parked */
	/* its standbys, as a read_only open of the map read them
	 * (repl_read()); storage_ha_part's fields */
	int replicas, sync_replicas;
	int64_t lag_bytes, lag_ms;
};

/* One (table, key) a write transaction touched: the key is at off in
 * st_pg.log_bytes. */
struct pg_touch {
	uint32_t tb;
	uint32_t klen;
	size_t off;
};

/* A commit sent whose answer is not all read: its statements (their
 * results are read in order: i, and whether the NULL that ends result i
 * is next), and what they said so far. */
struct pg_flight {
	int nsteps;
	int *step_tb; /* owned: the table of each write statement */
	size_t cap_steps;
	uint64_t gen; /* the first commit generation it carries (the last: the
		       * next flight's, or the pending batch's, minus one) */
	bool cached;  /* its writes are in the cache (committed there) */
	int64_t sent_ms;
	int i;
	bool want_null, failed, fenced;
};

/* A growing byte buffer (binary array parameters). */
struct pg_buf {
	unsigned char *p;
	size_t len, cap;
};

struct st_pg {
	struct storage_fwd fwd; /* fwd.inner: "mem", the cache of the whole schema */
	struct storage_ha ha;   /* storage_ha() */
	PGconn *conn;          /* NULL when offline */
	enum storage_role role;
	bool read_only;
	char *url, *schema, *ha_name, *host; /* owned copies of the opts */
	int port;
	unsigned timeout_ms;
	unsigned lease_ms;   /* idle_session_timeout of the session; 0: none */
	char *qschema;       /* the schema quoted as an identifier */
	int64_t lock_key;    /* the advisory lock that makes a front end active */
	int64_t create_key;  /* the one that serializes creating the schema */
	int64_t gen;         /* ours when active; the last seen otherwise */
	char active_host[256];
	int active_port;
	struct pg_sess sess; /* conn's */
	unsigned backoff_max_ms; /* reconnect-max-ms */
	bool refused_logged; /* check_plain()'s refusal was logged */
	bool pooled;         /* session_check() failed: a transaction-mode pooler */
	/* Shards (postgres.shards): schema and qschema are then the part
	 * tried or held last, base the schema holding the map. */
	struct pg_shard *shard;
	size_t nshard;
	int cur;             /* the part held when active; -1: none */
	char *base, *node;   /* owned; node: postgres.node ("" none) */
	char *qbase;         /* base quoted (PQfreemem) */
	/* Servers: srv[0] is home; none for a lone schema (nsrv 0). at: whose
	 * session s->conn is; data: the server of the part held (last). */
	struct pg_srv *srv;
	size_t nsrv, at, data;
	/* The registry of front ends (<base>.frontends): each writes its row
	 * at every poll (peers_read()); front lists the others' live ones. */
	bool registry;       /* the table is there (a read_only open asks) */
	unsigned node_timeout_ms; /* a row older than this is not listed; 0: all */
	struct storage_ha_front *front;
	size_t nfront;
	/* The write log of the open top-level write transaction. */
	struct pg_touch *log;
	size_t nlog, caplog;
	unsigned char *log_bytes;
	size_t log_len, log_cap;
	/* Parameter buffers of a commit, kept between commits. */
	struct pg_buf del[STORAGE_T__COUNT], ink[STORAGE_T__COUNT], inv[STORAGE_T__COUNT];
	uint32_t ndel[STORAGE_T__COUNT], nins[STORAGE_T__COUNT];
	struct pg_buf part[2]; /* a piece of an array too big for one statement */
	int *step_tb;          /* the table of each write statement of a commit */
	size_t cap_steps;
	uint64_t commits;
	/* Commits in flight ("Overlapped commits" below): a ring, oldest at
	 * fhead; depth of them may stay out when a commit returns. */
	struct pg_flight flight[PG_DEPTH_MAX + 1];
	unsigned fhead, nflight, depth;
	int fail_rc;          /* a batch in flight failed: what storage_sync() says */
	bool fail_told;       /* ... and has said it (then cleared at the next) */
	uint64_t fail_upto;   /* durable_gen() stays here while fail_rc is set */
	int uncached_rc;      /* the outcome of the batch a commit sent (1: out) */
	/* Commits in the cache not sent yet (depth out already): one batch,
	 * sent when a flight lands, the final state of each key it touched
	 * read from the cache then. */
	struct pg_touch *plog;
	size_t nplog, capplog;
	unsigned char *plog_bytes;
	size_t plog_len, plog_cap;
	uint64_t pend_gen;    /* its first generation; 0: nothing pending */
	bool sync_sent;       /* the pipeline's Sync is out (drain()) */
	/* The partial cache (cache-size; "The partial cache" below). */
	struct storage_fetch fetch; /* storage_fetch(), when lazy */
	struct storage_inflight out; /* storage_inflight(), when depth > 0 */
	uint64_t cache_max;   /* bytes the cache may take; 0: the whole schema */
	bool lazy;            /* cache_max > 0 (never for a read_only open) */
	struct pgc_spans spans[PG_NLAZY]; /* what is known of each lazy table */
	struct pgc_parts parts;  /* partitions, least recently used first out */
	struct pgc_gone gone;    /* deleted while the fetch in flight was out */
	PGconn *fconn;           /* the fetches' own connection (NULL: none) */
	struct pg_req *q;        /* fetches asked for; q[0] is out when inflight */
	size_t nq, capq;
	bool inflight;
	int64_t inflight_dl;     /* the answer is late past this (timeout-ms) */
	PGresult *land;          /* q[0]'s answer, put in the cache from row land_i on
				  * (PG_LAND_ROWS a poll; owned; NULL: none) */
	int land_i;
	bool evict_more;         /* an eviction went on past its budget: the rest next poll */
	int64_t fconn_retry_ms;  /* no new connection before this */
	int fetch_err;           /* the last failure, answered to misses ... */
	int64_t fetch_err_ms;    /* ... until this time */
	/* a forward fetch that starts where a recent one ended fetches more
	 * (scans of several clients interleave: a few are remembered) */
	struct pg_seq {
		int ix; /* -1: none */
		struct pgc_bound end;
		unsigned rows;
	} seq[PG_NSEQ];
	unsigned seq_next;
	uint64_t landed, misses, fetched_rows, evicted_rows;
};

/* A write transaction logs its writes (in st_pg.log). */
struct pg_cursor {
	struct storage_fwd_cursor fwd;
	bool on; /* key holds the row it stands on (write txns, and lazy tables) */
	size_t klen;
	unsigned char key[STORAGE_KEY_MAX];
	/* lazy tables: where a next() or prev() starts from */
	enum { REF_NONE, REF_KEY, REF_BEGIN, REF_END } ref;
	bool failed;    /* answered ECHD_EWOULDFETCH: seek again */
	unsigned ahead; /* storage_cursor_ahead()'s hint */
};

static struct st_pg *
pg_from(struct storage *st)
{
	assert(st->ops == &st_pg_ops);
	return (struct st_pg *)st;
}

static const struct st_pg *
pg_from_const(const struct storage *st)
{
	assert(st->ops == &st_pg_ops);
	return (const struct st_pg *)st;
}

static struct pg_cursor *
cursor_from(struct storage_cursor *c)
{
	assert(c->txn->st->ops == &st_pg_ops);
	return (struct pg_cursor *)c;
}

/* ---- small helpers ------------------------------------------------------- */

static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* 64-bit FNV-1a of prefix + s, as PostgreSQL's signed bigint. */
static int64_t
fnv_key(const char *prefix, const char *s)
{
	uint64_t h = 14695981039346656037ULL;

	for (const char *p = prefix; *p != '\0'; p++) {
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	}
	for (const char *p = s; *p != '\0'; p++) {
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	}
	return (int64_t)h;
}

static char *
dup_or_null(const char *s)
{
	return s == NULL ? NULL : echd_strndup(s, strlen(s));
}

static int
buf_reserve(struct pg_buf *b, size_t more)
{
	size_t cap = b->cap != 0 ? b->cap : 256;
	unsigned char *p;

	if (b->len + more <= b->cap) {
		return 0;
	}
	while (cap < b->len + more) {
		cap *= 2;
	}
	p = echd_realloc(b->p, cap);
	if (p == NULL) {
		return -ENOMEM;
	}
	b->p = p;
	b->cap = cap;
	return 0;
}

static void
put_be32(unsigned char *p, uint32_t v)
{
	v = htonl(v);
	memcpy(p, &v, 4);
}

/* Starts a binary one-dimensional bytea[]; the count is filled in by
 * array_finish(). */
static int
array_start(struct pg_buf *b)
{
	b->len = 0;
	if (buf_reserve(b, 20) != 0) {
		return -ENOMEM;
	}
	put_be32(b->p, 1);            /* ndim */
	put_be32(b->p + 4, 0);        /* flags: no NULLs */
	put_be32(b->p + 8, PG_OID_BYTEA);
	put_be32(b->p + 12, 0);       /* n, later */
	put_be32(b->p + 16, 1);       /* lower bound */
	b->len = 20;
	return 0;
}

static int
array_add(struct pg_buf *b, const void *p, size_t len)
{
	if (buf_reserve(b, 4 + len) != 0) {
		return -ENOMEM;
	}
	put_be32(b->p + b->len, (uint32_t)len);
	if (len > 0) {
		memcpy(b->p + b->len + 4, p, len);
	}
	b->len += 4 + len;
	return 0;
}

static void
array_finish(struct pg_buf *b, uint32_t n)
{
	put_be32(b->p + 12, n);
}

/* ---- the connection: waiting with a deadline ------------------------------ */

/* Remembers why the connection failed, for storage_ha.why and the log. */
static void
set_why(struct st_pg *s, const char *what, const char *detail)
{
	size_t n;

	bool has = detail != NULL && detail[0] != '\0';
	/* shards on several servers: say which one */
	bool many = s->nsrv > 1;

	snprintf(s->sess.why, sizeof(s->sess.why), "%s%s%s%s%s%s", many ? "server " : "",
		many ? s->srv[s->at].label : "", many ? ": " : "", what, has ? ": " : "",
		has ? detail : "");
	n = strlen(s->sess.why);
	while (n > 0 && (s->sess.why[n - 1] == '\n' || s->sess.why[n - 1] == ' ')) {
		s->sess.why[--n] = '\0';
	}
}

static void flights_lost(struct st_pg *s);
static int drain(struct st_pg *s);
static void reap(struct st_pg *s, unsigned keep);
static void pump(struct st_pg *s);
static int send_pending(struct st_pg *s);
static void pipe_idle(struct st_pg *s);
static void pend_failed(struct st_pg *s, int rc);
static struct pg_flight *flight_at(struct st_pg *s, unsigned k);

/* Drops the connection (the server drops our advisory lock with it), and
 * with it the batches in flight (in doubt). Another server's session than
 * the one of the part held takes neither the batches nor the role. */
static void
conn_lost(struct st_pg *s, const char *what)
{
	bool data = s->at == s->data;

	if (data) {
		flights_lost(s);
	}
	if (s->conn != NULL) {
		set_why(s, what, PQerrorMessage(s->conn));
		PQfinish(s->conn);
		s->conn = NULL;
	}
	if (data || s->role != STORAGE_ROLE_ACTIVE) {
		s->role = STORAGE_ROLE_OFFLINE;
	}
}

/* ---- servers ---------------------------------------------------------------- */

/* Makes server k's session s->conn, parking the current one with what
 * belongs to a session (its token, its liveness, its back-off, why it
 * failed). Leaving the data server first ends its pipeline: the commits
 * out are read on their own connection only. */
static void
srv_use(struct st_pg *s, size_t k)
{
	struct pg_srv *a, *b;

	if (s->nsrv == 0 || k == s->at) {
		return;
	}
	if (s->at == s->data && s->conn != NULL && (s->nflight > 0 || s->pend_gen != 0)) {
		(void)drain(s);
	}
	a = &s->srv[s->at];
	b = &s->srv[k];
	a->conn = s->conn;
	a->sess = s->sess;
	s->conn = b->conn;
	s->sess = b->sess;
	b->conn = NULL;
	s->at = k;
}

/* Whether server k has a session. */
static bool
srv_up(const struct st_pg *s, size_t k)
{
	return k == s->at ? s->conn != NULL : s->srv[k].conn != NULL;
}

/* The URL of the session s->conn is (or is to be). */
static const char *
cur_url(const struct st_pg *s)
{
	return s->nsrv > 0 ? s->srv[s->at].url : s->url;
}

/* Back to the session the role rests on: the data server's when active;
 * else the home's, or while it is out any server's; STANDBY while one
 * answers. */
static void
srv_rest(struct st_pg *s)
{
	if (s->nsrv == 0) {
		return;
	}
	if (s->role == STORAGE_ROLE_ACTIVE) {
		srv_use(s, s->data);
		return;
	}
	srv_use(s, 0);
	for (size_t k = 1; s->conn == NULL && k < s->nsrv; k++) {
		if (srv_up(s, k)) {
			srv_use(s, k);
		}
	}
	s->role = s->conn != NULL ? STORAGE_ROLE_STANDBY : STORAGE_ROLE_OFFLINE;
}

/* Whether two of the map's urls name one server (NULL: home). */
static bool
url_same(const char *a, const char *b)
{
	return (a == NULL) == (b == NULL) && (a == NULL || strcmp(a, b) == 0);
}

/* The server of url (NULL: home), added when new. Returns its index, or
 * -ENOMEM. */
static int
srv_add(struct st_pg *s, const char *url)
{
	char shown[256];
	struct pg_srv *n;
	size_t k;

	url = url != NULL ? url : s->url;
	for (k = 0; k < s->nsrv; k++) {
		if (strcmp(s->srv[k].url, url) == 0) {
			return (int)k;
		}
	}
	n = echd_realloc(s->srv, (s->nsrv + 1) * sizeof(*n));
	if (n == NULL) {
		return -ENOMEM;
	}
	s->srv = n;
	n = &s->srv[s->nsrv];
	memset(n, 0, sizeof(*n));
	echd_url_redact(url, shown, sizeof(shown));
	n->url = dup_or_null(url);
	n->label = dup_or_null(shown);
	n->sess.backoff_ms = PG_BACKOFF_MIN_MS;
	n->lag_bytes = n->lag_ms = -1; /* not read (repl_read()) */
	if (n->url == NULL || n->label == NULL) {
		echd_free(n->url);
		echd_free(n->label);
		return -ENOMEM;
	}
	return (int)s->nsrv++;
}

/* The servers of the parts, from their urls (the map's): home first.
 * Returns 0 or -ENOMEM. */
static int
srv_build(struct st_pg *s)
{
	int k = srv_add(s, NULL);

	for (size_t i = 0; i < s->nshard && k >= 0; i++) {
		k = srv_add(s, s->shard[i].url);
		s->shard[i].srv = k >= 0 ? (size_t)k : 0;
	}
	return k < 0 ? k : 0;
}

/* Drops the connection after a wait failed with rc. */
static void
conn_failed(struct st_pg *s, int rc)
{
	char what[64];

	if (rc == -ETIMEDOUT) {
		snprintf(what, sizeof(what), "no answer within %u ms (timeout_ms)", s->timeout_ms);
	} else {
		snprintf(what, sizeof(what), "connection lost");
	}
	conn_lost(s, what);
}

/* Waits until c's socket is ready for events or the deadline passes.
 * Returns 0, or -ETIMEDOUT, or -EIO. */
static int
wait_conn(PGconn *c, short events, int64_t deadline)
{
	struct pollfd pfd = {.fd = PQsocket(c), .events = events};
	int64_t left;
	int rc;

	if (pfd.fd < 0) {
		return -EIO;
	}
	for (;;) {
		/* Past the deadline, look once more: a stall of this process (a
		 * VM pause, SIGSTOP) may have outlasted it with the answer there. */
		left = deadline - now_ms();
		rc = poll(&pfd, 1, left > 0 ? (int)left : 0);
		if (rc > 0) {
			return 0;
		}
		if (rc == 0) {
			return -ETIMEDOUT;
		}
		if (errno != EINTR) {
			return -EIO;
		}
	}
}

static int
wait_sock(struct st_pg *s, short events, int64_t deadline)
{
	return wait_conn(s->conn, events, deadline);
}

/* Sends what libpq has queued. Returns 0, -ETIMEDOUT or -EIO. */
static int
io_flush(struct st_pg *s, int64_t deadline)
{
	int rc;

	while ((rc = PQflush(s->conn)) == 1) {
		rc = wait_sock(s, POLLOUT | POLLIN, deadline);
		if (rc != 0) {
			return rc;
		}
		/* The server may be waiting for us to read before it reads. */
		if (PQconsumeInput(s->conn) == 0) {
			return -EIO;
		}
	}
	return rc == 0 ? 0 : -EIO;
}

/* The next result, waited for until the deadline. Returns 0 and *out
 * (NULL at the end of a query's results), -ETIMEDOUT or -EIO. */
static int
io_result(struct st_pg *s, int64_t deadline, PGresult **out)
{
	int rc;

	*out = NULL;
	while (PQisBusy(s->conn)) {
		rc = io_flush(s, deadline);
		if (rc != 0) {
			return rc;
		}
		if (!PQisBusy(s->conn)) {
			break;
		}
		rc = wait_sock(s, POLLIN, deadline);
		if (rc != 0) {
			return rc;
		}
		if (PQconsumeInput(s->conn) == 0) {
			return -EIO;
		}
	}
	*out = PQgetResult(s->conn);
	return 0;
}

static int64_t
deadline(const struct st_pg *s)
{
	return now_ms() + s->timeout_ms;
}

/* Collects every result of the query sent last. Returns 0 and *out (the
 * last result, owned; NULL when there was none) after an OK one, -EIO
 * (the server's message logged, the connection kept) after an error, or
 * ECHD_EOFFLINE after losing the connection (then closed). sqlstate, when
 * not NULL, gets the error's SQLSTATE ("" if none). */
static int
collect(struct st_pg *s, const char *what, PGresult **out, char sqlstate[6])
{
	PGresult *res, *last = NULL;
	int64_t dl = deadline(s);
	int err = 0;
	int rc;

	if (sqlstate != NULL) {
		sqlstate[0] = '\0';
	}
	for (;;) {
		rc = io_result(s, dl, &res);
		if (rc != 0) {
			PQclear(last);
			conn_failed(s, rc);
			echd_log(ECHD_LOG_WARNING, "st_pg: %s: %s", what, s->sess.why);
			return ECHD_EOFFLINE;
		}
		if (res == NULL) {
			break;
		}
		dl = deadline(s); /* a row (single-row mode) is progress */
		switch (PQresultStatus(res)) {
		case PGRES_COMMAND_OK:
		case PGRES_TUPLES_OK:
		case PGRES_SINGLE_TUPLE:
		case PGRES_EMPTY_QUERY:
			break;
		default:
			if (err == 0) {
				const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);

				err = -EIO;
				echd_log(ECHD_LOG_WARNING, "st_pg: %s: %s", what,
					PQresultErrorMessage(res));
				if (sqlstate != NULL && st != NULL) {
					snprintf(sqlstate, 6, "%s", st);
				}
			}
			break;
		}
		PQclear(last);
		last = res;
	}
	if (PQstatus(s->conn) == CONNECTION_BAD) {
		PQclear(last);
		conn_lost(s, "connection lost");
		return ECHD_EOFFLINE;
	}
	s->sess.alive_ms = s->sess.sent_ms; /* answered: the session lived then */
	if (err != 0 || out == NULL) {
		PQclear(last);
		last = NULL;
	}
	if (out != NULL) {
		*out = last;
	}
	return err;
}

/* Runs sql (several statements allowed when nparams is 0) with text
 * parameters. Returns as collect(). */
static int
run(struct st_pg *s, const char *what, const char *sql, int nparams, const char *const *params,
	PGresult **out)
{
	int ok;

	if (drain(s) != 0) {
		return ECHD_EOFFLINE; /* the commits in flight first */
	}
	s->sess.sent_ms = now_ms();
	if (nparams == 0) {
		ok = PQsendQuery(s->conn, sql);
	} else {
		ok = PQsendQueryParams(s->conn, sql, nparams, NULL, params, NULL, NULL, 0);
	}
	if (!ok) {
		conn_lost(s, "cannot send");
		echd_log(ECHD_LOG_WARNING, "st_pg: %s: %s", what, s->sess.why);
		return ECHD_EOFFLINE;
	}
	return collect(s, what, out, NULL);
}

/* ---- connecting ------------------------------------------------------------ */

/* The server's notices ("schema exists, skipping") are for debugging. */
static void
notice(void *ud, const char *msg)
{
	(void)ud;
	echd_log(ECHD_LOG_DEBUG, "st_pg: %.*s", (int)strcspn(msg, "\n"), msg);
}

/* A transaction-mode pooler (PgBouncer's pool_mode=transaction) runs each
 * statement on whichever server session is free: a session-level lock is
 * then not ours, nor our prepared statements. col of res's first row is
 * echd.session as the statement saw it: another value than ours means
 * another session. Returns 0, or ECHD_EOFFLINE (connection closed). */
static int
session_check(struct st_pg *s, PGresult *res, int col)
{
	const char *v;

	if (s->sess.token[0] == '\0' || res == NULL || PQntuples(res) != 1 || PQnfields(res) <= col) {
		return 0;
	}
	v = PQgetisnull(res, 0, col) ? "" : PQgetvalue(res, 0, col);
	if (strcmp(v, s->sess.token) == 0) {
		return 0;
	}
	echd_log(ECHD_LOG_WARNING,
		"st_pg: two statements ran in different PostgreSQL sessions: a pooler in "
		"transaction mode (PgBouncer pool_mode=transaction?) is between echd and "
		"PostgreSQL; echd needs a session of its own (connect directly, or pool_mode=session)");
	s->pooled = true;
	conn_lost(s, "the PostgreSQL session changed between statements (a transaction-mode pooler)");
	return ECHD_EOFFLINE;
}

/* Marks our session with a token of its own (echd.session), which the
 * statements that depend on the session check (session_check()). */
static int
session_mark(struct st_pg *s)
{
	static unsigned seq;
	struct timespec ts;
	PGresult *res = NULL;
	char sql[128];
	int rc;

	clock_gettime(CLOCK_REALTIME, &ts);
	snprintf(s->sess.token, sizeof(s->sess.token), "%lx.%lx.%lx.%x", (unsigned long)getpid(),
		(unsigned long)ts.tv_sec, (unsigned long)ts.tv_nsec, ++seq);
	snprintf(sql, sizeof(sql), "SELECT set_config('echd.session', '%s', false)", s->sess.token);
	rc = run(s, "session set-up", sql, 0, NULL, NULL);
	if (rc == 0) {
		/* at once: a pooler handing statements round robin shows here */
		rc = run(s, "session set-up", "SELECT current_setting('echd.session', true)", 0,
			NULL, &res);
	}
	if (rc == 0) {
		rc = session_check(s, res, 0);
	}
	PQclear(res);
	return rc;
}

/* Connects (without blocking past the timeout) and prepares the session.
 * Returns 0, or ECHD_EOFFLINE with s->sess.why set. */
static int
conn_open(struct st_pg *s)
{
	const char *keys[] = {"dbname", "fallback_application_name", NULL};
	const char *vals[] = {cur_url(s), "echd", NULL};
	int64_t dl = deadline(s);
	PostgresPollingStatusType ps = PGRES_POLLING_WRITING;
	int rc;

	assert(s->conn == NULL);
	/* expand_dbname: url is a whole URI or key=value string. */
	s->conn = PQconnectStartParams(keys, vals, 1);
	if (s->conn == NULL) {
		set_why(s, "out of memory", NULL);
		return ECHD_EOFFLINE;
	}
	if (PQstatus(s->conn) == CONNECTION_BAD) {
		conn_lost(s, "cannot connect");
		return ECHD_EOFFLINE;
	}
	while (ps != PGRES_POLLING_OK) {
		if (ps == PGRES_POLLING_FAILED) {
			conn_lost(s, "cannot connect");
			return ECHD_EOFFLINE;
		}
		rc = wait_sock(s, ps == PGRES_POLLING_READING ? POLLIN : POLLOUT, dl);
		if (rc != 0) {
			conn_lost(s, rc == -ETIMEDOUT ? "connect timed out" : "cannot connect");
			return ECHD_EOFFLINE;
		}
		ps = PQconnectPoll(s->conn);
	}
	PQsetNoticeProcessor(s->conn, notice, NULL);
	if (PQsetnonblocking(s->conn, 1) != 0) {
		conn_lost(s, "cannot make the connection non-blocking");
		return ECHD_EOFFLINE;
	}
	/* PostgreSQL 14+ notices a vanished client during a long statement:
	 * a dead front end's session then ends (and frees its lock) sooner.
	 * And it ends a session idle past lease_ms: a hung front end (SIGSTOP,
	 * a VM pause) loses its lock to a standby then, as a healthy one polls
	 * more often than that (ha.c); fencing covers it when it resumes. */
	if (PQserverVersion(s->conn) >= 140000) {
		char sql[128];

		snprintf(sql, sizeof(sql),
			"SET client_connection_check_interval = %u; SET idle_session_timeout = %u",
			s->timeout_ms, s->read_only ? 0 : s->lease_ms);
		rc = run(s, "session set-up", sql, 0, NULL, NULL);
		if (rc == ECHD_EOFFLINE) {
			return rc;
		}
	} else if (s->lease_ms > 0 && !s->read_only && !s->sess.warned) {
		echd_log(ECHD_LOG_WARNING, "st_pg: PostgreSQL %d has no idle_session_timeout (14 "
					   "has): no lease, a hung active front end keeps its place",
			PQserverVersion(s->conn));
	}
	return s->read_only ? 0 : session_mark(s);
}

/* Prepares the statements of a commit on this connection. Returns 0, -EIO
 * or ECHD_EOFFLINE. */
static int
prepare_all(struct st_pg *s)
{
	const Oid arr[2] = {PG_OID_BYTEA_ARRAY, PG_OID_BYTEA_ARRAY};
	const Oid i8 = PG_OID_INT8;
	char sql[1024], name[16];
	int rc;

	snprintf(sql, sizeof(sql),
		"SELECT 1 / count(*)::int FROM (SELECT 1 FROM %s.ha WHERE id = 1 AND gen = $1 "
		"FOR SHARE) s",
		s->qschema);
	if (!PQsendPrepare(s->conn, "fence", sql, 1, &i8)) {
		goto lost;
	}
	rc = collect(s, "prepare", NULL, NULL);
	if (rc != 0) {
		return rc;
	}
	for (int tb = 0; tb < STORAGE_T__COUNT; tb++) {
		snprintf(name, sizeof(name), "d%d", tb);
		/* Each statement checks its row count and divides by zero on a
		 * mismatch, failing the transaction before its COMMIT: the rows
		 * it deleted against those there were (its snapshot's), the rows
		 * it wrote against those sent (check_plain()'s belt and braces). */
		snprintf(sql, sizeof(sql),
			"WITH d AS (DELETE FROM %s.%s WHERE k = ANY($1::bytea[]) RETURNING 1) "
			"SELECT 1 / ((SELECT count(*) FROM d) = (SELECT count(*) FROM %s.%s "
			"WHERE k = ANY($1::bytea[])))::int",
			s->qschema, pg_tables[tb], s->qschema, pg_tables[tb]);
		if (!PQsendPrepare(s->conn, name, sql, 1, arr)) {
			goto lost;
		}
		rc = collect(s, "prepare", NULL, NULL);
		if (rc != 0) {
			return rc;
		}
		snprintf(name, sizeof(name), "i%d", tb);
		snprintf(sql, sizeof(sql),
			"WITH i AS (INSERT INTO %s.%s (k, v) SELECT * FROM unnest($1::bytea[], "
			"$2::bytea[]) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v RETURNING 1) "
			"SELECT 1 / ((SELECT count(*) FROM i) = cardinality($1::bytea[]))::int",
			s->qschema, pg_tables[tb]);
		if (!PQsendPrepare(s->conn, name, sql, 2, arr)) {
			goto lost;
		}
		rc = collect(s, "prepare", NULL, NULL);
		if (rc != 0) {
			return rc;
		}
	}
	return 0;
lost:
	conn_lost(s, "cannot send");
	return ECHD_EOFFLINE;
}

static int check_plain(struct st_pg *s);

/* Creates the schema if missing (under a transaction-level advisory lock,
 * so front ends starting together do not race) and checks its version.
 * Read-only: only checks; else refuses triggers and rules too
 * (check_plain()). Returns 0, -EIO, -ENOENT, -EPROTO, -EPERM or
 * ECHD_EOFFLINE. */
static int
schema_ensure(struct st_pg *s)
{
	char what[64], *sql = NULL, *p;
	size_t cap = 4096 + 160 * STORAGE_T__COUNT + 16 * strlen(s->qschema) * STORAGE_T__COUNT;
	PGresult *res = NULL;
	int rc, n;
	long v;

	snprintf(what, sizeof(what), "schema %s", s->schema);
	if (!s->read_only) {
		sql = echd_malloc(cap);
		if (sql == NULL) {
			return -ENOMEM;
		}
		p = sql;
		n = snprintf(p, cap,
			"BEGIN; SELECT pg_advisory_xact_lock(%" PRId64 "); "
			"CREATE SCHEMA IF NOT EXISTS %s; "
			"CREATE TABLE IF NOT EXISTS %s.version (v int NOT NULL); "
			"INSERT INTO %s.version SELECT %d WHERE NOT EXISTS (SELECT 1 FROM %s.version); "
			"CREATE TABLE IF NOT EXISTS %s.ha (id int PRIMARY KEY CHECK (id = 1), "
			"gen bigint NOT NULL, name text, host text, port int, since timestamptz); "
			"INSERT INTO %s.ha (id, gen) VALUES (1, 0) ON CONFLICT (id) DO NOTHING; "
			"ALTER TABLE %s.ha ADD COLUMN IF NOT EXISTS node text; ",
			s->create_key, s->qschema, s->qschema, s->qschema, PG_SCHEMA_VERSION,
			s->qschema, s->qschema, s->qschema, s->qschema);
		p += n;
		for (int tb = 0; tb < STORAGE_T__COUNT; tb++) {
			n = snprintf(p, cap - (size_t)(p - sql),
				"CREATE TABLE IF NOT EXISTS %s.%s (k bytea PRIMARY KEY, "
				"v bytea NOT NULL); ",
				s->qschema, pg_tables[tb]);
			p += n;
		}
		snprintf(p, cap - (size_t)(p - sql), "COMMIT");
		rc = run(s, what, sql, 0, NULL, NULL);
		echd_free(sql);
		if (rc != 0) {
			if (s->conn != NULL) {
				(void)run(s, what, "ROLLBACK", 0, NULL, NULL);
			}
			return rc;
		}
	}
	sql = echd_malloc(cap);
	if (sql == NULL) {
		return -ENOMEM;
	}
	snprintf(sql, cap, "SELECT max(v) FROM %s.version", s->qschema);
	rc = run(s, what, sql, 0, NULL, &res);
	echd_free(sql);
	if (rc != 0) {
		if (rc == -EIO) {
			echd_log(ECHD_LOG_WARNING, "st_pg: schema %s is missing or unreadable",
				s->schema);
			rc = -ENOENT;
		}
		return rc;
	}
	v = res != NULL && PQntuples(res) == 1 && !PQgetisnull(res, 0, 0) ?
		    strtol(PQgetvalue(res, 0, 0), NULL, 10) :
		    0;
	PQclear(res);
	if (v != PG_SCHEMA_VERSION) {
		echd_log(ECHD_LOG_WARNING,
			"st_pg: schema %s has version %ld; this echd knows version %d: refused",
			s->schema, v, PG_SCHEMA_VERSION);
		return -EPROTO;
	}
	return s->read_only ? 0 : check_plain(s);
}

/* ---- loading the cache ------------------------------------------------------ */

static int lazy_ix(const struct st_pg *s, enum storage_table tb);
static int fconn_open(struct st_pg *s);
static void fconn_close(struct st_pg *s);
static int lazy_scan(struct st_pg *s, int ix, struct pgc_spans *out);
static void lazy_reset(struct st_pg *s, struct pgc_spans *fresh);

/* Reads every table, in one snapshot, into a fresh inner "mem" storage
 * that replaces the old one; when lazy, every table but the lazy ones,
 * and of those only which partitions they hold (lazy_scan()). Returns 0,
 * -EIO, -ENOMEM or ECHD_EOFFLINE. */
static int
load_all(struct st_pg *s)
{
	struct storage_opts mo = {0};
	struct storage *fresh = NULL;
	struct storage_txn *t = NULL;
	struct pgc_spans spans[PG_NLAZY] = {{0}};
	char sql[256];
	int rc;

	rc = run(s, "load", "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0, NULL, NULL);
	if (rc != 0) {
		return rc;
	}
	rc = storage_open("mem", &mo, &fresh);
	if (rc != 0) {
		goto fail;
	}
	rc = storage_txn_begin(fresh, NULL, 0, &t);
	if (rc != 0) {
		goto fail;
	}
	for (int tb = 0; tb < STORAGE_T__COUNT; tb++) {
		PGresult *res;
		int64_t dl = deadline(s);
		int err = 0;

		if (lazy_ix(s, (enum storage_table)tb) >= 0) {
			rc = lazy_scan(s, lazy_ix(s, (enum storage_table)tb),
				&spans[lazy_ix(s, (enum storage_table)tb)]);
			if (rc != 0) {
				goto fail;
			}
			continue;
		}
		snprintf(sql, sizeof(sql), "SELECT k, v FROM %s.%s ORDER BY k", s->qschema,
			pg_tables[tb]);
		if (!PQsendQueryParams(s->conn, sql, 0, NULL, NULL, NULL, NULL, 1) ||
			!PQsetSingleRowMode(s->conn)) {
			conn_lost(s, "cannot send");
			rc = ECHD_EOFFLINE;
			goto fail;
		}
		for (;;) {
			rc = io_result(s, dl, &res);
			if (rc != 0) {
				conn_failed(s, rc);
				echd_log(ECHD_LOG_WARNING, "st_pg: load: %s", s->sess.why);
				rc = ECHD_EOFFLINE;
				goto fail;
			}
			if (res == NULL) {
				break;
			}
			dl = deadline(s);
			if (PQresultStatus(res) == PGRES_SINGLE_TUPLE && err == 0) {
				struct st_buf k = {PQgetvalue(res, 0, 0), (size_t)PQgetlength(res, 0, 0)};
				struct st_buf v = {PQgetvalue(res, 0, 1), (size_t)PQgetlength(res, 0, 1)};

				err = storage_put(t, (enum storage_table)tb, &k, &v, STORAGE_PUT_APPEND);
				if (err != 0) {
					echd_log(ECHD_LOG_WARNING, "st_pg: load %s.%s: a row: %s",
						s->schema, pg_tables[tb], echd_strerror(err));
				}
			} else if (PQresultStatus(res) != PGRES_TUPLES_OK &&
				   PQresultStatus(res) != PGRES_SINGLE_TUPLE && err == 0) {
				echd_log(ECHD_LOG_WARNING, "st_pg: load %s.%s: %s", s->schema,
					pg_tables[tb], PQresultErrorMessage(res));
				err = -EIO;
			}
			PQclear(res);
		}
		if (err != 0) {
			rc = err;
			goto fail;
		}
	}
	rc = run(s, "load", "COMMIT", 0, NULL, NULL);
	if (rc != 0) {
		goto fail;
	}
	rc = storage_txn_commit(t);
	t = NULL;
	if (rc != 0) {
		goto fail;
	}
	storage_close(s->fwd.inner); /* no transaction is open: storage_ha_poll() */
	s->fwd.inner = fresh;
	lazy_reset(s, spans);
	return 0;
fail:
	for (int i = 0; i < PG_NLAZY; i++) {
		pgc_spans_clear(&spans[i]);
	}
	storage_txn_abort(t);
	storage_close(fresh);
	if (s->conn != NULL && PQtransactionStatus(s->conn) != PQTRANS_IDLE) {
		(void)run(s, "load", "ROLLBACK", 0, NULL, NULL);
	}
	return rc;
}

/* ---- roles ------------------------------------------------------------------ */

static void
ha_row_read(struct st_pg *s, PGresult *res)
{
	if (res == NULL || PQntuples(res) != 1) {
		return;
	}
	s->gen = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	snprintf(s->active_host, sizeof(s->active_host), "%s",
		PQgetisnull(res, 0, 1) ? "" : PQgetvalue(res, 0, 1));
	s->active_port = PQgetisnull(res, 0, 2) ? 0 : atoi(PQgetvalue(res, 0, 2));
}

/* Reads the ha row: gen and the active front end's address (and checks
 * the session, session_check()). */
static int
ha_row(struct st_pg *s)
{
	PGresult *res = NULL;
	char sql[192];
	int rc;

	snprintf(sql, sizeof(sql),
		"SELECT gen, host, port, current_setting('echd.session', true) FROM %s.ha "
		"WHERE id = 1",
		s->qschema);
	rc = run(s, "ha", sql, 0, NULL, &res);
	if (rc == 0) {
		rc = session_check(s, res, 3);
	}
	if (rc == 0) {
		ha_row_read(s, res);
	}
	PQclear(res);
	return rc;
}

/* Refuses tables whose writes PostgreSQL may change behind echd's back: a
 * trigger or rule may drop, alter or add rows, row level security hide
 * them. echd serves what it sent from memory, so each would lose
 * acknowledged data at the next takeover. Returns 0, -EPERM (logged once
 * until it passes again), or a run() error. */
static int
check_plain(struct st_pg *s)
{
	char names[512], *p = names;
	const char *params[2] = {s->schema, names};
	PGresult *res = NULL;
	int rc;

	*p++ = '{';
	for (int tb = 0; tb < STORAGE_T__COUNT; tb++) {
		p += snprintf(p, sizeof(names) - (size_t)(p - names), "%s,", pg_tables[tb]);
	}
	snprintf(p, sizeof(names) - (size_t)(p - names), "ha,version}");
	rc = run(s, "table check",
		"SELECT string_agg(what, ', ' ORDER BY what) FROM ("
		"SELECT format('trigger %I on %I', t.tgname, c.relname) AS what FROM pg_trigger t "
		"JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
		"WHERE n.nspname = $1 AND c.relname = ANY($2::text[]) AND NOT t.tgisinternal "
		"UNION ALL SELECT format('rule %I on %I', r.rulename, c.relname) FROM pg_rewrite r "
		"JOIN pg_class c ON c.oid = r.ev_class JOIN pg_namespace n ON n.oid = c.relnamespace "
		"WHERE n.nspname = $1 AND c.relname = ANY($2::text[]) AND r.rulename <> '_RETURN' "
		"UNION ALL SELECT format('row level security on %I', c.relname) FROM pg_class c "
		"JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 "
		"AND c.relname = ANY($2::text[]) AND c.relrowsecurity) x",
		2, params, &res);
	if (rc != 0) {
		PQclear(res);
		return rc;
	}
	if (res != NULL && PQntuples(res) == 1 && !PQgetisnull(res, 0, 0)) {
		if (!s->refused_logged) {
			echd_log(ECHD_LOG_WARNING,
				"st_pg: schema %s refused: %s; what PostgreSQL stores must be what "
				"echd sent (drop them)",
				s->schema, PQgetvalue(res, 0, 0));
		}
		s->refused_logged = true;
		rc = -EPERM;
	} else {
		s->refused_logged = false;
	}
	PQclear(res);
	return rc;
}

static int
unlock(struct st_pg *s)
{
	char sql[96];

	snprintf(sql, sizeof(sql), "SELECT pg_advisory_unlock(%" PRId64 ")", s->lock_key);
	return run(s, "unlock", sql, 0, NULL, NULL);
}

/* Tries the advisory lock key (a session lock: ours until unlocked or
 * the session ends). Returns 0 with *got, or a run() error. */
static int
try_lock(struct st_pg *s, int64_t key, bool *got)
{
	PGresult *res = NULL;
	char sql[96];
	int rc;

	snprintf(sql, sizeof(sql), "SELECT pg_try_advisory_lock(%" PRId64 ")", key);
	rc = run(s, "lock", sql, 0, NULL, &res);
	*got = rc == 0 && res != NULL && PQntuples(res) == 1 && PQgetvalue(res, 0, 0)[0] == 't';
	PQclear(res);
	return rc;
}

static int take(struct st_pg *s, bool *became);
static int reconnect(struct st_pg *s);

/* STANDBY: tries the lock, and on success takes over (bumps gen, loads
 * the schema). Returns 0 (*became set), or an error. */
static int
try_takeover(struct st_pg *s, bool *became)
{
	bool got;
	int rc;

	*became = false;
	rc = try_lock(s, s->lock_key, &got);
	if (rc != 0 || !got) {
		return rc != 0 ? rc : ha_row(s);
	}
	return take(s, became);
}

/* The lock of s->schema is ours: takes over (bumps gen, loads the
 * schema), or unlocks. Returns 0 (*became set), or an error. */
static int
take(struct st_pg *s, bool *became)
{
	char sql[384], port[16];
	const char *params[4];
	PGresult *res = NULL;
	int rc;

	snprintf(port, sizeof(port), "%d", s->port);
	params[0] = s->ha_name;
	params[1] = s->host;
	params[2] = port;
	params[3] = s->node;
	snprintf(sql, sizeof(sql),
		"UPDATE %s.ha SET gen = gen + 1, name = $1, host = $2, port = $3, "
		"node = nullif($4, ''), since = now() "
		"WHERE id = 1 RETURNING gen, host, port, current_setting('echd.session', true)",
		s->qschema);
	rc = check_plain(s);
	if (rc == 0) {
		rc = run(s, "takeover", sql, 4, params, &res);
	}
	if (rc == 0 && (res == NULL || PQntuples(res) != 1)) {
		echd_log(ECHD_LOG_WARNING, "st_pg: schema %s has no ha row", s->schema);
		rc = -EIO;
	}
	if (rc == 0) {
		rc = session_check(s, res, 3);
	}
	if (rc == 0) {
		ha_row_read(s, res);
	}
	PQclear(res);
	if (rc == 0) {
		rc = load_all(s);
	}
	if (rc != 0) {
		if (s->conn != NULL) {
			(void)unlock(s);
		}
		return rc;
	}
	if (s->lazy) {
		(void)fconn_open(s); /* or later, at the first fetch */
	}
	s->role = STORAGE_ROLE_ACTIVE;
	*became = true;
	echd_log(ECHD_LOG_NOTICE, "st_pg: active on schema %s (generation %" PRId64 ")",
		s->schema, s->gen);
	return 0;
}

/* ---- shards ------------------------------------------------------------------ */

/* Parses postgres.shards ("first-last,first-last,..."): one part per
 * range, schema <base>_s<i>. Returns 0, ECHD_EINVAL (logged) or -ENOMEM. */
static int
shards_parse(struct st_pg *s, const char *text)
{
	const char *p = text;
	size_t n = 1;
	char name[256];

	for (const char *q = text; *q != '\0'; q++) {
		n += *q == ',';
	}
	if (n > PG_SHARDS_MAX) {
		echd_log(ECHD_LOG_WARNING, "st_pg: shards: more than %d", PG_SHARDS_MAX);
		return ECHD_EINVAL;
	}
	s->shard = echd_calloc(n, sizeof(*s->shard));
	if (s->shard == NULL) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		char *end;
		unsigned long first = strtoul(p, &end, 10), last = 0;
		bool ok = end != p && *end == '-';

		if (ok) {
			p = end + 1;
			last = strtoul(p, &end, 10);
			ok = end != p && (*end == ',' || *end == '\0') && first <= last &&
			     last <= UINT32_MAX;
		}
		if (!ok) {
			echd_log(ECHD_LOG_WARNING, "st_pg: shards: '%s' is not first-last,...", text);
			return ECHD_EINVAL;
		}
		p = *end == ',' ? end + 1 : end;
		snprintf(name, sizeof(name), "%s_s%zu", s->base, i);
		if (strlen(name) > PG_NAME_MAX) {
			/* PostgreSQL would cut it, and two shards could share a schema */
			echd_log(ECHD_LOG_WARNING, "st_pg: shard schema %s: longer than %d bytes",
				name, PG_NAME_MAX);
			return ECHD_EINVAL;
		}
		s->shard[i].schema = echd_strndup(name, strlen(name));
		if (s->shard[i].schema == NULL) {
			return -ENOMEM;
		}
		s->nshard = i + 1; /* pg_close() frees what is counted */
		s->shard[i].first = (unsigned)first;
		s->shard[i].last = (unsigned)last;
		s->shard[i].lock_key = fnv_key("echd:", name); /* a lone schema's key */
	}
	return 0;
}

/* Makes part i the schema the statements name (its lock, its fence).
 * Returns 0 or -ENOMEM. */
static int
use_shard(struct st_pg *s, size_t i)
{
	const char *name = s->shard[i].schema;
	char *q = PQescapeIdentifier(s->conn, name, strlen(name));
	char *dup = echd_strndup(name, strlen(name));

	if (q == NULL || dup == NULL) {
		if (q != NULL) {
			PQfreemem(q);
		}
		echd_free(dup);
		return -ENOMEM;
	}
	if (s->qschema != NULL) {
		PQfreemem(s->qschema);
	}
	echd_free(s->schema);
	s->qschema = q;
	s->schema = dup;
	s->lock_key = s->shard[i].lock_key;
	s->create_key = fnv_key("echd-create:", name);
	return 0;
}

/* Creates <base>.shards, the map of the parts (under the transaction-level
 * lock schema_ensure() takes), when missing, adds its url column to a map
 * of an older echd, and refuses to go on when it holds another map than
 * ours: the parts' ranges cannot change under the data yet. Reads each
 * part's server (url). Returns 0, ECHD_EINVAL (logged), -ENOMEM or a run()
 * error. */
static int
map_ensure(struct st_pg *s)
{
	size_t cap = 2048 + s->nshard * (64 + 2 * strlen(s->base));
	const char *qb = s->qbase;
	char *sql = echd_malloc(cap), *p;
	char what[300];
	PGresult *res = NULL;
	bool same;
	int rc = -ENOMEM;

	if (qb == NULL || sql == NULL) {
		goto out;
	}
	p = sql + snprintf(sql, cap,
			  "BEGIN; SELECT pg_advisory_xact_lock(%" PRId64 "); "
			  "CREATE SCHEMA IF NOT EXISTS %s; "
			  "CREATE TABLE IF NOT EXISTS %s.shards (ix int PRIMARY KEY, "
			  "schema text NOT NULL UNIQUE, first bigint NOT NULL, last bigint NOT NULL); "
			  /* a part's server (NULL: this one), set by echo-admin */
			  "ALTER TABLE %s.shards ADD COLUMN IF NOT EXISTS url text; "
			  /* unlogged: a heartbeat needs no WAL flush (nor a synchronous
			   * standby's) at every poll, and is worth nothing after a crash */
			  "CREATE UNLOGGED TABLE IF NOT EXISTS %s.frontends ("
			  "node text PRIMARY KEY, host text NOT NULL, port int NOT NULL, "
			  "role text NOT NULL, shard int, seen timestamptz NOT NULL); "
			  "INSERT INTO %s.shards (ix, schema, first, last) SELECT * FROM (VALUES ",
			  fnv_key("echd-create:", s->base), qb, qb, qb, qb, qb);
	for (size_t i = 0; i < s->nshard; i++) {
		/* the names are the base's (quoted) plus "_s<i>": no quote inside */
		char *lit = PQescapeLiteral(s->conn, s->shard[i].schema, strlen(s->shard[i].schema));

		if (lit == NULL) {
			goto out;
		}
		p += snprintf(p, cap - (size_t)(p - sql), "%s(%zu, %s, %u, %u)", i > 0 ? ", " : "",
			i, lit, s->shard[i].first, s->shard[i].last);
		PQfreemem(lit);
	}
	snprintf(p, cap - (size_t)(p - sql),
		") v WHERE NOT EXISTS (SELECT 1 FROM %s.shards); COMMIT", qb);
	snprintf(what, sizeof(what), "shard map %s.shards", s->base);
	rc = run(s, what, sql, 0, NULL, NULL);
	if (rc != 0) {
		if (s->conn != NULL) {
			(void)run(s, what, "ROLLBACK", 0, NULL, NULL);
		}
		goto out;
	}
	snprintf(sql, cap, "SELECT ix, schema, first, last, url FROM %s.shards ORDER BY ix", qb);
	rc = run(s, what, sql, 0, NULL, &res);
	if (rc != 0) {
		goto out;
	}
	same = PQntuples(res) == (int)s->nshard;
	for (int r = 0; same && r < PQntuples(res); r++) {
		if (!PQgetisnull(res, r, 4)) {
			s->shard[r].url = dup_or_null(PQgetvalue(res, r, 4));
			if (s->shard[r].url == NULL) {
				rc = -ENOMEM;
				goto out;
			}
		}
	}
	for (int r = 0; same && r < PQntuples(res); r++) {
		const struct pg_shard *pt = &s->shard[r];

		same = atoi(PQgetvalue(res, r, 0)) == r &&
		       strcmp(PQgetvalue(res, r, 1), pt->schema) == 0 &&
		       strtoul(PQgetvalue(res, r, 2), NULL, 10) == pt->first &&
		       strtoul(PQgetvalue(res, r, 3), NULL, 10) == pt->last;
	}
	if (!same) {
		echd_log(ECHD_LOG_WARNING,
			"st_pg: %s.shards maps the store in %d shard(s), from %s %s-%s; this front "
			"end was started with %zu (%s %u-%u first): refused (every front end of a "
			"cluster is started with the same number of shards)",
			s->base, PQntuples(res), PQntuples(res) > 0 ? PQgetvalue(res, 0, 1) : "-",
			PQntuples(res) > 0 ? PQgetvalue(res, 0, 2) : "",
			PQntuples(res) > 0 ? PQgetvalue(res, 0, 3) : "", s->nshard,
			s->shard[0].schema, s->shard[0].first, s->shard[0].last);
		rc = ECHD_EINVAL;
	}
	s->registry = true;
out:
	PQclear(res);
	echd_free(sql);
	return rc;
}

/* A read_only open with shards "map": the parts as <base>.shards lists them
 * (no data read). Returns 0, ECHD_ENOTFOUND (logged: no map there),
 * -ENOMEM or a run() error. */
static int
map_load(struct st_pg *s)
{
	const char *qb = s->qbase;
	char sql[512], what[300], map[300], reg[300];
	const char *params[2] = {map, reg};
	PGresult *res = NULL;
	int rc = -ENOMEM, n;

	if (qb == NULL) {
		return -ENOMEM;
	}
	snprintf(what, sizeof(what), "shard map %s.shards", s->base);
	/* a missing table is an error of the whole statement: ask first, the
	 * names as parameters (a quote in the schema's name is no literal's
	 * end); the registry is missing where no front end of this version ran */
	snprintf(map, sizeof(map), "%s.shards", qb);
	snprintf(reg, sizeof(reg), "%s.frontends", qb);
	rc = run(s, what, "SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL", 2,
		params, &res);
	if (rc == 0 && strcmp(PQgetvalue(res, 0, 0), "t") != 0) {
		echd_log(ECHD_LOG_WARNING, "st_pg: schema %s holds no shard map (%s.shards)",
			s->base, s->base);
		rc = ECHD_ENOTFOUND;
	}
	s->registry = rc == 0 && strcmp(PQgetvalue(res, 0, 1), "t") == 0;
	PQclear(res);
	res = NULL;
	if (rc == 0) {
		/* the url column may be missing (no front end of this version
		 * opened the map): read through a row's JSON */
		snprintf(sql, sizeof(sql),
			"SELECT ix, schema, first, last, to_jsonb(m) ->> 'url' FROM %s.shards m "
			"ORDER BY ix",
			qb);
		rc = run(s, what, sql, 0, NULL, &res);
	}
	n = rc == 0 ? PQntuples(res) : 0;
	if (rc == 0 && n == 0) {
		echd_log(ECHD_LOG_WARNING, "st_pg: %s.shards is empty", s->base);
		rc = ECHD_ENOTFOUND;
	}
	if (rc == 0) {
		s->shard = echd_calloc((size_t)n, sizeof(*s->shard));
		rc = s->shard == NULL ? -ENOMEM : 0;
	}
	for (int r = 0; rc == 0 && r < n; r++) {
		const char *name = PQgetvalue(res, r, 1);

		s->shard[r].schema = echd_strndup(name, strlen(name));
		if (s->shard[r].schema == NULL) {
			rc = -ENOMEM;
			break;
		}
		s->nshard = (size_t)r + 1; /* pg_close() frees what is counted */
		s->shard[r].first = (unsigned)strtoul(PQgetvalue(res, r, 2), NULL, 10);
		s->shard[r].last = (unsigned)strtoul(PQgetvalue(res, r, 3), NULL, 10);
		s->shard[r].lock_key = fnv_key("echd:", name);
		if (!PQgetisnull(res, r, 4)) {
			s->shard[r].url = dup_or_null(PQgetvalue(res, r, 4));
			rc = s->shard[r].url == NULL ? -ENOMEM : 0;
		}
	}
	PQclear(res);
	return rc;
}

/* Whether peers_read() writes this front end's row in the registry: a
 * front end (not a read_only open) with a node, on a store that has one. */
static bool
beats(const struct st_pg *s)
{
	return s->registry && !s->read_only && s->node[0] != '\0';
}

/* The statement peers_read() runs on server k, one round trip: per part
 * there (kind 0), its index, its ha row and whether its advisory lock is
 * held (pg_locks shows a bigint key's high half as classid, its low half
 * as objid, objsubid 1); then on the home server (kind 1) the registry's
 * live front ends other than this one, each with its part (-1: standby)
 * and the age of its row by PostgreSQL's clock. A front end first writes
 * its own row ($1 node, $2 host, $3 port, $4 the part held or -1), and
 * deletes rows past the bound that no one holds (SKIP LOCKED: a poll never
 * waits on another's). NULL when there is nothing to read there. Returns 0
 * or -ENOMEM. */
static int
peers_sql_build(struct st_pg *s, size_t k)
{
	size_t cap = 2048 + s->nshard * (400 + 2 * strlen(s->base));
	const char *qb = s->qbase;
	bool home = k == 0, any = false;
	char *p, *sql = echd_malloc(cap);

	if (sql == NULL) {
		return -ENOMEM;
	}
	p = sql;
	*p = '\0';
	if (home && beats(s)) {
		p += snprintf(p, cap - (size_t)(p - sql),
			"WITH beat AS (INSERT INTO %s.frontends "
			"(node, host, port, role, shard, seen) VALUES ($1, $2, $3::int, "
			"CASE WHEN $4::int < 0 THEN 'standby' ELSE 'active' END, "
			"nullif($4::int, -1), now()) ON CONFLICT (node) DO UPDATE SET "
			"host = excluded.host, port = excluded.port, role = excluded.role, "
			"shard = excluded.shard, seen = excluded.seen), "
			"gone AS (DELETE FROM %s.frontends WHERE ctid = ANY (ARRAY ("
			"SELECT ctid FROM %s.frontends WHERE seen < now() - interval '%u ms' "
			"AND node <> $1 FOR UPDATE SKIP LOCKED))) ",
			qb, qb, qb, s->node_timeout_ms);
	}
	for (size_t i = 0; i < s->nshard; i++) {
		uint64_t key = (uint64_t)s->shard[i].lock_key;
		char *q;

		if (s->shard[i].srv != k) {
			continue;
		}
		q = PQescapeIdentifier(s->conn, s->shard[i].schema, strlen(s->shard[i].schema));
		if (q == NULL) {
			echd_free(sql);
			return -ENOMEM;
		}
		p += snprintf(p, cap - (size_t)(p - sql),
			"%sSELECT 0, %zu, h.gen, h.node, h.host, h.port, EXISTS (SELECT 1 "
			"FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND "
			"l.objsubid = 1 AND "
			"l.classid = %u::oid AND l.objid = %u::oid AND l.database = (SELECT oid FROM "
			"pg_database WHERE datname = current_database())), 0::bigint FROM %s.ha h "
			"WHERE h.id = 1",
			any ? " UNION ALL " : "", i, (unsigned)(key >> 32),
			(unsigned)(key & 0xffffffffu), q);
		any = true;
		PQfreemem(q);
	}
	if (home && s->registry) {
		p += snprintf(p, cap - (size_t)(p - sql),
			"%sSELECT 1, coalesce(f.shard, -1), 0, f.node, f.host, f.port, "
			"false, greatest(0, extract(epoch FROM now() - f.seen) * 1000)::bigint "
			"FROM %s.frontends f "
			"WHERE true%s",
			any ? " UNION ALL " : "", qb, beats(s) ? " AND f.node <> $1" : "");
		any = true;
		if (s->node_timeout_ms > 0) {
			p += snprintf(p, cap - (size_t)(p - sql),
				" AND f.seen >= now() - interval '%u ms'", s->node_timeout_ms);
		}
	}
	if (home && !s->read_only) {
		/* (kind 2) each part's server, as echo-admin may change it */
		snprintf(p, cap - (size_t)(p - sql),
			"%sSELECT 2, ix, 0, url, NULL, 0, false, 0 FROM %s.shards", any ? " UNION ALL " : "",
			qb);
		any = true;
	}
	echd_free(s->srv[k].peers_sql);
	s->srv[k].peers_sql = any ? sql : NULL;
	if (!any) {
		echd_free(sql);
	}
	return 0;
}

static int
front_cmp(const void *a, const void *b)
{
	return strcmp(((const struct storage_ha_front *)a)->node,
		((const struct storage_ha_front *)b)->node);
}

/* The map names url for part i (NULL: home): a part put on another server
 * (echo-admin shards set-url, which refuses a part held) is tried and read
 * there from the next statement on. Returns 0 (*moved set when it moved)
 * or -ENOMEM. */
static int
relocate(struct st_pg *s, size_t i, const char *url, bool *moved)
{
	struct pg_shard *pt = &s->shard[i];
	char *dup = NULL;
	int k;

	if (url_same(url, pt->url)) {
		return 0;
	}
	if (s->role == STORAGE_ROLE_ACTIVE && s->cur == (int)i) {
		return 0; /* ours: held, so not moved (the refusal), whatever the row says */
	}
	k = srv_add(s, url);
	if (k < 0 || (url != NULL && (dup = dup_or_null(url)) == NULL)) {
		return -ENOMEM;
	}
	echd_free(pt->url);
	pt->url = dup;
	pt->srv = (size_t)k;
	memset(&pt->seen, 0, sizeof(pt->seen));
	echd_log(ECHD_LOG_NOTICE, "st_pg: shard %zu (schema %s) now lives on PostgreSQL %s",
		i, pt->schema, s->srv[k].label);
	*moved = true;
	return 0;
}

/* Reads who holds each part of the server whose session s->conn is (its
 * lock) and their addresses, and on the home one the live front ends of
 * the registry (writing this one's row first) and each part's server (the
 * map, relocate()). Returns 0, -ENOMEM or a run() error (what the last
 * read said stays). */
static int
peers_read(struct st_pg *s)
{
	char port[16], part[16];
	const char *params[4] = {s->node, s->host, port, part};
	bool home = s->at == 0, p4 = home && beats(s), moved = false;
	PGresult *res = NULL;
	int rc, n;

	if (s->srv[s->at].peers_sql == NULL) {
		return 0;
	}
	snprintf(port, sizeof(port), "%d", s->port);
	snprintf(part, sizeof(part), "%d", s->role == STORAGE_ROLE_ACTIVE ? s->cur : -1);
	rc = run(s, "shards", s->srv[s->at].peers_sql, p4 ? 4 : 0, p4 ? params : NULL, &res);
	if (rc != 0) {
		PQclear(res);
		return rc;
	}
	for (size_t i = 0; i < s->nshard; i++) {
		if (s->shard[i].srv == s->at) {
			memset(&s->shard[i].seen, 0, sizeof(s->shard[i].seen));
		}
	}
	n = res != NULL ? PQntuples(res) : 0;
	if (home) {
		ECHD_FREE(s->front);
		s->nfront = 0;
	}
	if (n > 0 && home) {
		s->front = echd_calloc((size_t)n, sizeof(*s->front));
		if (s->front == NULL) {
			PQclear(res);
			return -ENOMEM;
		}
	}
	for (int r = 0; r < n; r++) {
		long i = strtol(PQgetvalue(res, r, 1), NULL, 10);
		struct storage_ha_part *pt;

		if (PQgetvalue(res, r, 0)[0] == '2') {
			if (i >= 0 && (size_t)i < s->nshard && rc == 0) {
				rc = relocate(s, (size_t)i,
					PQgetisnull(res, r, 3) ? NULL : PQgetvalue(res, r, 3), &moved);
			}
			continue;
		}
		if (PQgetvalue(res, r, 0)[0] == '1') {
			struct storage_ha_front *f = &s->front[s->nfront++];

			snprintf(f->node, sizeof(f->node), "%s", PQgetvalue(res, r, 3));
			snprintf(f->host, sizeof(f->host), "%s", PQgetvalue(res, r, 4));
			f->port = atoi(PQgetvalue(res, r, 5));
			f->part = i >= 0 && (size_t)i < s->nshard ? (int)i : -1;
			/* a row written after this statement's now() was taken is
			 * younger than 0: greatest() makes it 0 */
			f->age_ms = strtoull(PQgetvalue(res, r, 7), NULL, 10);
			continue;
		}
		if (i < 0 || (size_t)i >= s->nshard || s->shard[i].srv != s->at) {
			continue;
		}
		pt = &s->shard[i].seen;
		pt->gen = strtoull(PQgetvalue(res, r, 2), NULL, 10);
		/* "" when NULL */
		snprintf(pt->node, sizeof(pt->node), "%s", PQgetvalue(res, r, 3));
		snprintf(pt->host, sizeof(pt->host), "%s", PQgetvalue(res, r, 4));
		pt->port = atoi(PQgetvalue(res, r, 5));
		pt->held = PQgetvalue(res, r, 6)[0] == 't';
	}
	PQclear(res);
	if (s->nfront > 1) {
		qsort(s->front, s->nfront, sizeof(*s->front), front_cmp);
	}
	for (size_t k = 0; moved && rc == 0 && k < s->nsrv; k++) {
		rc = peers_sql_build(s, k); /* the parts of each server changed */
	}
	return rc;
}

/* Whether the map names, for part i, the server this front end opened it
 * on (echo-admin shards set-url may have moved it since: it holds the
 * part's lock on the old server while it writes the map, so a front end
 * that wins that lock after reads the new url here). On the home server.
 * Returns 0 with *same, or a run() error. */
static int
map_same(struct st_pg *s, size_t i, bool *same)
{
	char sql[512], ix[24];
	const char *params[1] = {ix};
	const char *url;
	PGresult *res = NULL;
	int rc;

	snprintf(ix, sizeof(ix), "%zu", i);
	snprintf(sql, sizeof(sql), "SELECT url FROM %s.shards WHERE ix = $1::int", s->qbase);
	rc = run(s, "shard map", sql, 1, params, &res);
	*same = false;
	if (rc == 0 && res != NULL && PQntuples(res) == 1) {
		url = PQgetisnull(res, 0, 0) ? NULL : PQgetvalue(res, 0, 0);
		*same = url_same(url, s->shard[i].url);
	}
	PQclear(res);
	return rc;
}

/* STANDBY, the lock of part i won in s->conn (its server's session): takes
 * the part over (the statements prepared again for its schema), unless the
 * map names another server for it now: then it is left to this poll's read
 * of the map (relocate()). Returns 0 (*became set), or an error. */
static int
take_shard(struct st_pg *s, size_t i, bool *became)
{
	size_t k = s->at;
	bool same = false;
	int rc;

	/* the statements name the schema: prepared again for this one, and
	 * the fetch connection read another's */
	fconn_close(s);
	rc = use_shard(s, i);
	if (rc == 0) {
		srv_use(s, 0);
		rc = s->conn != NULL ? map_same(s, i, &same) : ECHD_EOFFLINE;
		srv_use(s, k);
	}
	if (rc == 0 && !same) {
		echd_log(ECHD_LOG_NOTICE, "st_pg: shard %zu (schema %s) was put on another "
					  "server: not taken here",
			i, s->schema);
	}
	if (rc == 0 && same && s->conn != NULL) {
		rc = run(s, "takeover", "DEALLOCATE ALL", 0, NULL, NULL);
		if (rc == 0) {
			rc = prepare_all(s);
		}
		if (rc == 0) {
			s->data = k;
			rc = take(s, became);
			s->cur = rc == 0 ? (int)i : s->cur;
			return rc;
		}
	}
	if (s->conn != NULL) {
		(void)unlock(s);
	}
	return rc != 0 ? rc : (s->conn != NULL ? 0 : ECHD_EOFFLINE);
}

/* Reads who holds each part, one statement per server (a session each);
 * a server out is reconnected when its back-off allows. Returns 0, or the
 * first error other than a lost server (logged). */
/* echo-admin (a read_only open of the map): the standbys of the server
 * whose session s->conn is, from its pg_stat_replication: how many, how
 * many synchronous, and the largest lag of one in bytes of WAL not yet
 * replayed (a hot standby's cascade: from what it replayed) and in ms. A
 * statement of its own, so that a server where no front end created a
 * part's schema yet still tells. Returns 0 or a run() error. */
static int
repl_read(struct st_pg *s)
{
	struct pg_srv *v = &s->srv[s->at];
	PGresult *res = NULL;
	int rc = run(s, "replication",
		"SELECT count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')), count(*), "
		"coalesce(max(extract(epoch FROM replay_lag) * 1000), -1)::bigint, "
		"coalesce(max(pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN "
		"pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END, replay_lsn)), -1)::bigint "
		"FROM pg_stat_replication",
		0, NULL, &res);

	if (rc == 0 && res != NULL && PQntuples(res) == 1) {
		v->sync_replicas = atoi(PQgetvalue(res, 0, 0));
		v->replicas = atoi(PQgetvalue(res, 0, 1));
		v->lag_ms = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
		v->lag_bytes = strtoll(PQgetvalue(res, 0, 3), NULL, 10);
	}
	PQclear(res);
	return rc;
}

static int
peers_all(struct st_pg *s)
{
	int rc, err = 0;

	for (size_t k = 0; k < s->nsrv; k++) {
		srv_use(s, k);
		if (k > 0 && s->srv[k].peers_sql == NULL) {
			/* no part lives there (any more): no session */
			if (s->conn != NULL) {
				PQfinish(s->conn);
				s->conn = NULL;
			}
			continue;
		}
		if (s->conn == NULL && !s->read_only) {
			(void)reconnect(s);
		}
		rc = s->conn != NULL ? peers_read(s) : ECHD_EOFFLINE;
		if (s->read_only && s->conn != NULL) {
			(void)repl_read(s); /* not told: its standbys unknown (logged) */
		}
		/* echo-admin: a part on a server where no front end created its
		 * schema yet is only not held (the error is logged) */
		if (rc != 0 && rc != ECHD_EOFFLINE && err == 0 && !(s->read_only && k > 0)) {
			err = rc;
		}
		for (size_t i = 0; s->conn == NULL && i < s->nshard; i++) {
			if (s->shard[i].srv == k) {
				/* its server gone, so is the lock: held by no one known */
				memset(&s->shard[i].seen, 0, sizeof(s->shard[i].seen));
			}
		}
	}
	srv_rest(s);
	return err;
}

/* STANDBY (or OFFLINE) on a store of parts: (re)connects each server its
 * back-off allows, takes over the first part (in order) whose lock is free
 * on a server it reaches (one: this front end holds none now), then reads
 * who holds each. A server lost is logged and tried again at the next
 * poll; the others go on. Returns 0 (*became set), or the first error
 * other than a lost server, or ECHD_EOFFLINE when no server answers. */
static int
try_shards(struct st_pg *s, bool *became)
{
	bool got = false;
	int rc, err = 0;

	for (size_t k = 0; k < s->nsrv; k++) {
		srv_use(s, k);
		if (s->conn == NULL) {
			(void)reconnect(s);
		}
	}
	for (size_t i = 0; i < s->nshard && !*became; i++) {
		srv_use(s, s->shard[i].srv);
		if (s->conn == NULL) {
			continue;
		}
		rc = try_lock(s, s->shard[i].lock_key, &got);
		if (rc == 0 && got) {
			rc = take_shard(s, i, became);
		}
		if (rc != 0 && rc != ECHD_EOFFLINE && err == 0) {
			err = rc;
		}
	}
	rc = peers_all(s);
	err = err != 0 ? err : rc;
	if (err == 0 && s->role == STORAGE_ROLE_OFFLINE) {
		err = ECHD_EOFFLINE;
	}
	return err;
}

static size_t
pg_ha_nfronts(const struct storage *st)
{
	return pg_from_const(st)->nfront;
}

static int
pg_ha_front(const struct storage *st, size_t i, struct storage_ha_front *out)
{
	*out = pg_from_const(st)->front[i];
	return 0;
}

static size_t
pg_ha_nparts(const struct storage *st)
{
	return pg_from_const(st)->nshard;
}

static int
pg_ha_part(const struct storage *st, size_t i, struct storage_ha_part *out)
{
	const struct st_pg *s = pg_from_const(st);

	*out = s->shard[i].seen;
	if (s->role == STORAGE_ROLE_ACTIVE && s->cur == (int)i) {
		/* ours, whatever the last read showed */
		out->held = true;
		out->gen = (uint64_t)s->gen;
		snprintf(out->node, sizeof(out->node), "%s", s->node);
		snprintf(out->host, sizeof(out->host), "%s", s->host);
		out->port = s->port;
	}
	snprintf(out->name, sizeof(out->name), "%s", s->shard[i].schema);
	out->first = s->shard[i].first;
	out->last = s->shard[i].last;
	snprintf(out->server, sizeof(out->server), "%s", s->srv[s->shard[i].srv].label);
	out->home = s->shard[i].srv == 0;
	out->replicas = s->srv[s->shard[i].srv].replicas;
	out->sync_replicas = s->srv[s->shard[i].srv].sync_replicas;
	out->lag_bytes = s->srv[s->shard[i].srv].lag_bytes;
	out->lag_ms = s->srv[s->shard[i].srv].lag_ms;
	return 0;
}

/* Creates the schemas of the parts on the server whose session s->conn
 * is, when missing (schema_ensure()), then names the part held (or the
 * first) again. Returns 0 or a schema_ensure() error. */
static int
srv_schemas(struct st_pg *s)
{
	int rc = 0;
	size_t back = s->cur >= 0 ? (size_t)s->cur : 0;

	for (size_t i = 0; i < s->nshard && rc == 0; i++) {
		if (s->shard[i].srv == s->at) {
			rc = use_shard(s, i);
			if (rc == 0) {
				rc = schema_ensure(s);
			}
		}
	}
	if (s->conn != NULL && use_shard(s, back) != 0 && rc == 0) {
		rc = -ENOMEM;
	}
	return rc;
}

/* Whether schema holds a row in any table (no schema: none). Returns 0
 * with *any, or a run() error. */
static int
schema_rows(struct st_pg *s, const char *schema, bool *any)
{
	char *q = PQescapeIdentifier(s->conn, schema, strlen(schema));
	size_t cap = 512 + STORAGE_T__COUNT * (64 + (q != NULL ? strlen(q) : 0));
	char *sql = echd_malloc(cap), *p, ver[200];
	const char *params[1] = {ver};
	PGresult *res = NULL;
	int rc = -ENOMEM;

	*any = false;
	if (q == NULL || sql == NULL) {
		goto out;
	}
	snprintf(ver, sizeof(ver), "%s.version", q);
	rc = run(s, "shard check", "SELECT to_regclass($1) IS NOT NULL", 1, params, &res);
	if (rc != 0 || strcmp(PQgetvalue(res, 0, 0), "t") != 0) {
		goto out;
	}
	p = sql + snprintf(sql, cap, "SELECT ");
	for (int tb = 0; tb < STORAGE_T__COUNT; tb++) {
		p += snprintf(p, cap - (size_t)(p - sql), "%sEXISTS (SELECT 1 FROM %s.%s)",
			tb > 0 ? " OR " : "", q, pg_tables[tb]);
	}
	PQclear(res);
	res = NULL;
	rc = run(s, "shard check", sql, 0, NULL, &res);
	*any = rc == 0 && res != NULL && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
out:
	PQclear(res);
	if (q != NULL) {
		PQfreemem(q);
	}
	echd_free(sql);
	return rc;
}

/* Writes part i's url in the map (NULL: home), adding the column to a map
 * no front end of this version opened yet, under the creation lock as
 * map_ensure() does. On the home server. Returns 0 or a run() error. */
static int
map_set_url(struct st_pg *s, size_t i, const char *url)
{
	char sql[512], ix[24];
	const char *params[2] = {ix, url};
	int rc;

	snprintf(sql, sizeof(sql),
		"BEGIN; SELECT pg_advisory_xact_lock(%" PRId64 "); "
		"ALTER TABLE %s.shards ADD COLUMN IF NOT EXISTS url text; COMMIT",
		fnv_key("echd-create:", s->base), s->qbase);
	rc = run(s, "shard map", sql, 0, NULL, NULL);
	if (rc != 0) {
		if (s->conn != NULL) {
			(void)run(s, "shard map", "ROLLBACK", 0, NULL, NULL);
		}
		return rc;
	}
	snprintf(ix, sizeof(ix), "%zu", i);
	snprintf(sql, sizeof(sql), "UPDATE %s.shards SET url = $2 WHERE ix = $1::int", s->qbase);
	return run(s, "shard map", sql, 2, params, NULL);
}

/* echo-admin shards set-url (a read_only open of the map): puts part i on
 * the server of url (NULL or "": home) when no front end holds it and its
 * schema holds no row where it lives now. It holds the part's lock on
 * that server while it writes the map: a front end winning the lock after
 * reads the new url at its takeover (take_shard()) and leaves the part. */
static int
pg_ha_part_move(struct storage *st, size_t i, const char *url, char *why, size_t len)
{
	struct st_pg *s = pg_from(st);
	struct pg_shard *pt = &s->shard[i];
	const char *to = url != NULL && url[0] != '\0' ? url : NULL;
	bool got = false, any = false;
	char sql[96];
	int k, rc;

	if (!s->read_only || s->nsrv == 0) {
		return -ENOTSUP;
	}
	k = srv_add(s, to); /* the new server answers */
	if (k < 0 || url_same(to, pt->url)) {
		return k < 0 ? k : 0; /* there already */
	}
	srv_use(s, (size_t)k);
	if (s->conn == NULL && conn_open(s) != 0) {
		snprintf(why, len, "cannot connect to the new server: %s", s->sess.why);
		return ECHD_EOFFLINE;
	}
	srv_use(s, pt->srv);
	if (s->conn == NULL) {
		snprintf(why, len, "cannot reach the shard's server to check it is free and "
				   "empty: %s", s->sess.why);
		return ECHD_EOFFLINE;
	}
	rc = try_lock(s, pt->lock_key, &got);
	if (rc == 0 && !got) {
		if (pt->seen.held && pt->seen.node[0] != '\0') {
			snprintf(why, len, "a front end holds it (node %s at %s:%d): stop it first",
				pt->seen.node, pt->seen.host, pt->seen.port);
		} else {
			snprintf(why, len, "a front end holds it: stop it first");
		}
		return -EBUSY;
	}
	if (rc == 0) {
		rc = schema_rows(s, pt->schema, &any);
	}
	if (rc == 0 && any) {
		snprintf(why, len, "its schema %s holds data there, and echd moves no data "
				   "between servers",
			pt->schema);
		rc = -ENOTEMPTY;
	}
	if (rc == 0) {
		srv_use(s, 0);
		rc = s->conn != NULL ? map_set_url(s, i, to) : ECHD_EOFFLINE;
		srv_use(s, pt->srv);
	}
	if (rc != 0 && why[0] == '\0') {
		snprintf(why, len, "%s", s->sess.why[0] != '\0' ? s->sess.why : "PostgreSQL refused (logged)");
	}
	if (got && s->conn != NULL) {
		snprintf(sql, sizeof(sql), "SELECT pg_advisory_unlock(%" PRId64 ")", pt->lock_key);
		(void)run(s, "unlock", sql, 0, NULL, NULL);
	}
	return rc;
}

/* OFFLINE: reconnects when the back-off allows. Returns 0 (now STANDBY),
 * or ECHD_EOFFLINE. On a store of parts, the session of server s->at,
 * whose parts' schemas it creates when missing; the role is try_shards()'
 * to say. */
static int
reconnect(struct st_pg *s)
{
	int64_t now = now_ms();
	int rc;

	if (now < s->sess.next_try_ms) {
		return ECHD_EOFFLINE;
	}
	rc = conn_open(s);
	if (rc == 0) {
		rc = s->nshard > 0 ? srv_schemas(s) : prepare_all(s);
	}
	if (rc != 0) {
		if (s->conn != NULL) {
			conn_lost(s, "set-up failed");
		}
		if (!s->sess.warned) {
			echd_log(ECHD_LOG_WARNING, "st_pg: cannot reach PostgreSQL (retry in %u ms): %s",
				s->sess.backoff_ms, s->sess.why);
			s->sess.warned = true;
		}
		s->sess.next_try_ms = now_ms() + s->sess.backoff_ms;
		if (s->sess.backoff_ms < s->backoff_max_ms) {
			s->sess.backoff_ms = s->sess.backoff_ms * 2 > s->backoff_max_ms ? s->backoff_max_ms :
										s->sess.backoff_ms * 2;
			s->sess.warned = false;
		}
		return ECHD_EOFFLINE;
	}
	if (s->nsrv > 1) {
		echd_log(ECHD_LOG_NOTICE, "st_pg: connected to PostgreSQL server %s",
			s->srv[s->at].label);
	} else {
		echd_log(ECHD_LOG_NOTICE, "st_pg: connected to PostgreSQL (schema %s)", s->schema);
	}
	s->sess.backoff_ms = PG_BACKOFF_MIN_MS;
	s->sess.next_try_ms = 0;
	s->sess.warned = false;
	s->sess.why[0] = '\0';
	if (s->nshard == 0) {
		s->role = STORAGE_ROLE_STANDBY;
	}
	return 0;
}

static void
ha_fill(const struct st_pg *s, struct storage_ha_state *out, bool became)
{
	memset(out, 0, sizeof(*out));
	out->role = s->role;
	out->became_active = became;
	out->gen = s->gen > 0 ? (uint64_t)s->gen : 0;
	if (s->role == STORAGE_ROLE_ACTIVE) {
		snprintf(out->active_host, sizeof(out->active_host), "%s",
			s->host != NULL ? s->host : "");
		out->active_port = s->port;
	} else {
		snprintf(out->active_host, sizeof(out->active_host), "%s", s->active_host);
		out->active_port = s->active_port;
	}
	if (s->role == STORAGE_ROLE_OFFLINE) {
		snprintf(out->why, sizeof(out->why), "%s", s->sess.why);
	}
	out->part = s->role == STORAGE_ROLE_ACTIVE && s->nshard > 0 ? s->cur : -1;
}

/* ACTIVE: checks in the ha row that no one took over. Returns 0 (the role
 * says the outcome), or an error. */
static int
still_ours(struct st_pg *s)
{
	int64_t ours = s->gen;
	int rc = ha_row(s);

	if (rc == 0 && s->gen != ours) {
		echd_log(ECHD_LOG_WARNING,
			"st_pg: schema %s was taken over (generation %" PRId64 " > %" PRId64
			"): standby",
			s->schema, s->gen, ours);
		s->role = STORAGE_ROLE_STANDBY;
		(void)unlock(s);
	} else if (rc != 0 && s->conn != NULL) {
		s->gen = ours; /* a SQL error: keep our place */
	}
	return rc;
}

/* What the cache shows is current while no one else can have taken over:
 * while our session, and with it the lock, lives. It lived at alive_ms,
 * and the lease cannot end it before alive_ms + lease_ms; past that, a
 * round trip says. (Without a lease, only a commit or poll says.) */
static int
pg_ha_confirm(struct storage *st)
{
	struct st_pg *s = pg_from(st);
	int rc;

	if (s->read_only) {
		return 0;
	}
	if (s->role == STORAGE_ROLE_ACTIVE && s->lease_ms > 0 &&
		now_ms() - s->sess.alive_ms >= (int64_t)s->lease_ms) {
		rc = still_ours(s);
		if (rc != 0 && s->conn != NULL) {
			return rc; /* a SQL error: nothing known */
		}
		if (s->conn == NULL) {
			s->role = STORAGE_ROLE_OFFLINE;
		}
	}
	return s->role == STORAGE_ROLE_ACTIVE	 ? 0 :
	       s->role == STORAGE_ROLE_STANDBY ? ECHD_ESTANDBY :
						 ECHD_EOFFLINE;
}

static int
pg_ha_poll(struct storage *st, struct storage_ha_state *out)
{
	struct st_pg *s = pg_from(st);
	bool became = false;
	int rc = 0;

	if (s->read_only) {
		ha_fill(s, out, false);
		return 0;
	}
	if (s->role == STORAGE_ROLE_ACTIVE) {
		pump(s);
		/* Commits out check the fence themselves, and their answers say
		 * the session lives: waiting for them here would stall the loop
		 * behind a commit that waits in PostgreSQL. */
		if (s->nflight == 0 && s->pend_gen == 0) {
			rc = still_ours(s);
		}
		if (rc == 0 && s->nshard > 0 && s->conn != NULL) {
			rc = peers_all(s); /* the other parts' front ends */
		}
		if (s->nshard > 0 && s->role != STORAGE_ROLE_ACTIVE) {
			srv_rest(s); /* a standby while another server answers */
		}
	} else if (s->nshard > 0) {
		rc = try_shards(s, &became);
	} else {
		if (s->role == STORAGE_ROLE_OFFLINE) {
			rc = reconnect(s);
		}
		if (rc == 0 && s->role == STORAGE_ROLE_STANDBY) {
			rc = try_takeover(s, &became);
		}
	}
	if (s->conn == NULL) {
		s->role = STORAGE_ROLE_OFFLINE;
	}
	ha_fill(s, out, became);
	return rc;
}

static enum storage_role
pg_ha_role(const struct storage *st)
{
	return pg_from_const(st)->role;
}

/* ---- environment ------------------------------------------------------------ */

static void
pg_close(struct storage *st)
{
	struct st_pg *s = pg_from(st);

	if (s->conn != NULL) {
		PQfinish(s->conn); /* ends the session: the lock goes with it */
	}
	for (size_t k = 0; k < s->nsrv; k++) {
		if (s->srv[k].conn != NULL) {
			PQfinish(s->srv[k].conn);
		}
		echd_free(s->srv[k].url);
		echd_free(s->srv[k].label);
		echd_free(s->srv[k].peers_sql);
	}
	echd_free(s->srv);
	fconn_close(s);
	for (int i = 0; i < PG_NLAZY; i++) {
		pgc_spans_clear(&s->spans[i]);
	}
	pgc_parts_clear(&s->parts);
	pgc_gone_free(&s->gone);
	echd_free(s->q);
	storage_fwd_finish(&s->fwd);
	for (int tb = 0; tb < STORAGE_T__COUNT; tb++) {
		echd_free(s->del[tb].p);
		echd_free(s->ink[tb].p);
		echd_free(s->inv[tb].p);
	}
	echd_free(s->part[0].p);
	echd_free(s->part[1].p);
	echd_free(s->step_tb);
	for (int i = 0; i <= PG_DEPTH_MAX; i++) {
		echd_free(s->flight[i].step_tb);
	}
	echd_free(s->log);
	echd_free(s->log_bytes);
	echd_free(s->plog);
	echd_free(s->plog_bytes);
	for (size_t i = 0; i < s->nshard; i++) {
		echd_free(s->shard[i].schema);
		echd_free(s->shard[i].url);
	}
	echd_free(s->shard);
	echd_free(s->base);
	echd_free(s->node);
	if (s->qbase != NULL) {
		PQfreemem(s->qbase);
	}
	echd_free(s->front);
	echd_free(s->url);
	echd_free(s->schema);
	echd_free(s->ha_name);
	echd_free(s->host);
	if (s->qschema != NULL) {
		PQfreemem(s->qschema);
	}
	echd_free(s);
}

/* The options postgres reads (storage.h: "postgres.<name>"). */
struct pg_settings {
	const char *url, *schema, *ha_name, *host, *shards, *node;
	uint64_t port, timeout_ms, lease_ms, cache_size, reconnect_max_ms, node_timeout_ms, depth;
};
static const struct storage_optdef pg_optdefs[] = {
	{"url", STORAGE_OPTDEF_STR, 0, 0, offsetof(struct pg_settings, url)},
	{"schema", STORAGE_OPTDEF_STR, 0, 0, offsetof(struct pg_settings, schema)},
	{"ha-name", STORAGE_OPTDEF_STR, 0, 0, offsetof(struct pg_settings, ha_name)},
	{"announce-host", STORAGE_OPTDEF_STR, 0, 0, offsetof(struct pg_settings, host)},
	{"announce-port", STORAGE_OPTDEF_U64, 0, 65535, offsetof(struct pg_settings, port)},
	/* 0: the default */
	{"timeout-ms", STORAGE_OPTDEF_U64, 0, 3600000, offsetof(struct pg_settings, timeout_ms)},
	/* 0: no lease */
	{"lease-ms", STORAGE_OPTDEF_U64, 0, 3600000, offsetof(struct pg_settings, lease_ms)},
	/* 0: PG_BACKOFF_MAX_MS */
	{"reconnect-max-ms", STORAGE_OPTDEF_U64, 0, 600000,
		offsetof(struct pg_settings, reconnect_max_ms)},
	/* 0: the whole schema in memory */
	{"cache-size", STORAGE_OPTDEF_U64, 0, UINT64_MAX, offsetof(struct pg_settings, cache_size)},
	/* "": one schema; else its parts' ranges (storage.h) */
	{"shards", STORAGE_OPTDEF_STR, 0, 0, offsetof(struct pg_settings, shards)},
	{"node", STORAGE_OPTDEF_STR, 0, 0, offsetof(struct pg_settings, node)},
	/* 0: the default; a read_only open: every row */
	{"node-timeout-ms", STORAGE_OPTDEF_U64, 0, 3600000,
		offsetof(struct pg_settings, node_timeout_ms)},
	/* commits in flight when one returns; 0: each waits for its COMMIT */
	{"pipeline-depth", STORAGE_OPTDEF_U64, 0, PG_DEPTH_MAX,
		offsetof(struct pg_settings, depth)},
};

static const struct storage_ha_ops pg_ha_ops;
static const struct storage_fetch_ops pg_fetch_ops;
static const struct storage_inflight_ops pg_inflight_ops;

static int
pg_open(const struct storage_opts *o, struct storage **out)
{
	struct storage_opts mo = {0};
	struct pg_settings set = {.ha_name = "echd", .host = "", .shards = "", .node = "",
		.depth = PG_DEPTH_DEFAULT};
	struct st_pg *s;
	struct storage_ha_state ha;
	bool map_only;
	int rc;

	*out = NULL;
	rc = storage_opts_read(o, "postgres", pg_optdefs, sizeof(pg_optdefs) / sizeof(pg_optdefs[0]),
		&set);
	if (rc != 0) {
		return rc;
	}
	if (set.url == NULL || set.url[0] == '\0') {
		echd_log(ECHD_LOG_WARNING, "st_pg: no storage url given");
		return ECHD_EINVAL;
	}
	s = echd_calloc(1, sizeof(*s));
	if (s == NULL) {
		return -ENOMEM;
	}
	storage_fwd_init(&s->fwd, &st_pg_ops, sizeof(struct storage_fwd_txn), sizeof(struct pg_cursor));
	s->ha.ops = &pg_ha_ops;
	s->ha.st = &s->fwd.base;
	s->fetch.ops = &pg_fetch_ops;
	s->fetch.st = &s->fwd.base;
	s->out.ops = &pg_inflight_ops;
	s->out.st = &s->fwd.base;
	s->cache_max = set.cache_size;
	s->lazy = set.cache_size > 0 && !o->read_only;
	for (int i = 0; i < PG_NSEQ; i++) {
		s->seq[i].ix = -1;
	}
	s->role = STORAGE_ROLE_OFFLINE;
	s->read_only = o->read_only;
	s->url = dup_or_null(set.url);
	s->schema = dup_or_null(set.schema != NULL && set.schema[0] != '\0' ? set.schema : "echd");
	s->ha_name = dup_or_null(set.ha_name);
	s->host = dup_or_null(set.host);
	s->port = (int)set.port;
	s->cur = -1;
	s->base = dup_or_null(s->schema);
	s->node = dup_or_null(set.node != NULL ? set.node : "");
	if (s->base == NULL || s->node == NULL) {
		rc = -ENOMEM;
		goto fail;
	}
	/* a read_only open reads one schema: the base's (tools), or its map */
	map_only = o->read_only && set.shards != NULL && strcmp(set.shards, "map") == 0;
	if (set.shards != NULL && set.shards[0] != '\0' && !o->read_only) {
		rc = shards_parse(s, set.shards);
		if (rc != 0) {
			goto fail;
		}
		echd_free(s->schema);
		s->schema = dup_or_null(s->shard[0].schema); /* until use_shard() */
	}
	s->timeout_ms = set.timeout_ms != 0 ? (unsigned)set.timeout_ms : PG_TIMEOUT_MS_DEFAULT;
	s->lease_ms = (unsigned)set.lease_ms;
	s->backoff_max_ms = set.reconnect_max_ms != 0 ? (unsigned)set.reconnect_max_ms :
							 PG_BACKOFF_MAX_MS;
	s->node_timeout_ms = set.node_timeout_ms != 0 || o->read_only ?
				     (unsigned)set.node_timeout_ms :
				     PG_NODE_TIMEOUT_MS_DEFAULT;
	/* STORAGE_SYNC_FULL: durable when a commit returns, none left out */
	s->depth = o->sync_mode == STORAGE_SYNC_FULL ? 0 : (unsigned)set.depth;
	s->sess.backoff_ms = PG_BACKOFF_MIN_MS;
	if (s->url == NULL || s->schema == NULL || s->ha_name == NULL || s->host == NULL) {
		rc = -ENOMEM;
		goto fail;
	}
	s->lock_key = fnv_key("echd:", s->schema);
	s->create_key = fnv_key("echd-create:", s->schema);
	rc = storage_open("mem", &mo, &s->fwd.inner);
	if (rc != 0) {
		s->fwd.inner = NULL;
		goto fail;
	}
	rc = conn_open(s);
	if (rc != 0) {
		echd_log(ECHD_LOG_WARNING, "st_pg: cannot connect to PostgreSQL: %s", s->sess.why);
		rc = s->pooled ? -EPROTO : rc;
		goto fail;
	}
	s->qschema = PQescapeIdentifier(s->conn, s->schema, strlen(s->schema));
	if (s->qschema == NULL) {
		echd_log(ECHD_LOG_WARNING, "st_pg: bad schema name %s: %s", s->schema,
			PQerrorMessage(s->conn));
		rc = ECHD_EINVAL;
		goto fail;
	}
	if (map_only || s->nshard > 0) {
		s->qbase = PQescapeIdentifier(s->conn, s->base, strlen(s->base));
		if (s->qbase == NULL) {
			rc = -ENOMEM;
			goto fail;
		}
	}
	if (map_only) {
		rc = map_load(s);
		if (rc == 0) {
			rc = srv_build(s);
		}
		for (size_t k = 0; k < s->nsrv && rc == 0; k++) {
			rc = peers_sql_build(s, k);
		}
		for (size_t k = 1; k < s->nsrv && rc == 0; k++) {
			srv_use(s, k);
			if (conn_open(s) != 0) {
				echd_log(ECHD_LOG_WARNING, "st_pg: %s", s->sess.why);
			}
		}
		if (rc == 0) {
			rc = peers_all(s);
		}
		if (rc != 0) {
			goto fail;
		}
		s->role = STORAGE_ROLE_STANDBY; /* holds nothing, reads nothing */
		*out = &s->fwd.base;
		return 0;
	}
	if (s->nshard > 0) {
		rc = map_ensure(s);
		if (rc == 0) {
			rc = srv_build(s);
		}
		for (size_t k = 0; k < s->nsrv && rc == 0; k++) {
			rc = peers_sql_build(s, k);
		}
		if (rc == 0) {
			rc = srv_schemas(s); /* and the statements name the first part's */
		}
		/* another server out is retried at each poll, as a lost one */
		for (size_t k = 1; k < s->nsrv && rc == 0; k++) {
			srv_use(s, k);
			(void)reconnect(s);
		}
		srv_use(s, 0);
	} else {
		rc = schema_ensure(s);
	}
	if (rc != 0) {
		goto fail;
	}
	if (s->read_only) {
		rc = load_all(s);
		if (rc != 0) {
			goto fail;
		}
		(void)ha_row(s);
		s->role = STORAGE_ROLE_ACTIVE; /* for reading */
		echd_log(ECHD_LOG_NOTICE, "st_pg: read a snapshot of schema %s", s->schema);
		*out = &s->fwd.base;
		return 0;
	}
	/* parts: prepared for the part at its takeover (take_shard()) */
	rc = s->nshard > 0 ? 0 : prepare_all(s);
	if (rc != 0) {
		goto fail;
	}
	s->role = STORAGE_ROLE_STANDBY;
	echd_log(ECHD_LOG_NOTICE, "st_pg: connected to PostgreSQL (schema %s)", s->schema);
	/* A lone echd starts active. */
	rc = pg_ha_poll(&s->fwd.base, &ha);
	if (rc != 0 && (s->conn != NULL || s->pooled)) {
		rc = s->pooled ? -EPROTO : rc;
		goto fail; /* a SQL error, a pooler: not something a retry fixes */
	}
	if (ha.role == STORAGE_ROLE_STANDBY) {
		echd_log(ECHD_LOG_NOTICE, "st_pg: standby: %s:%d is active on schema %s",
			ha.active_host, ha.active_port, s->schema);
	}
	*out = &s->fwd.base;
	return 0;
fail:
	if (rc == ECHD_EOFFLINE) {
		rc = -ECONNREFUSED;
	}
	pg_close(&s->fwd.base);
	return rc;
}

static int
pg_stat(struct storage *st, struct storage_stat *out)
{
	struct st_pg *s = pg_from(st);
	struct storage_stat in;
	int rc = storage_fwd_stat(st, &in);

	memset(out, 0, sizeof(*out));
	out->used_bytes = rc == 0 ? in.used_bytes : 0;
	out->rows = rc == 0 ? in.rows : 0;
	out->commits = s->commits;
	out->syncs = s->commits;
	return 0;
}

/* Forgets a failure storage_sync() answered: the broker closed the
 * clients that waited for it then (brk_release_durable()). */
static void
fail_forget(struct st_pg *s)
{
	if (s->fail_rc != 0 && s->fail_told) {
		s->fail_rc = 0;
		s->fail_told = false;
	}
}

/* Every batch in flight answered (a commit that returned is then durable:
 * synchronous_commit), or the failure of one. */
static int
pg_sync(struct storage *st)
{
	struct st_pg *s = pg_from(st);

	fail_forget(s);
	(void)drain(s);
	if (s->fail_rc != 0) {
		s->fail_told = true;
		return s->fail_rc;
	}
	return 0;
}

/* Not the cache's: it is replaced at each takeover, its count restarting.
 * The batches in flight are not durable, nor, after one failed, it and
 * any later one, until storage_sync() said so. */
static uint64_t
pg_durable_gen(struct storage *st)
{
	struct st_pg *s = pg_from(st);
	uint64_t g = s->nflight > 0 ? flight_at(s, 0)->gen - 1 :
		     s->pend_gen != 0 ? s->pend_gen - 1 :
					st->commit_gen;

	if (s->fail_rc != 0 && s->fail_upto < g) {
		g = s->fail_upto;
	}
	return g;
}

/* Reads the answers that are in; *fd the socket to watch while batches
 * are out. Returns 0, or a failure storage_sync() will answer. */
static int
pg_inflight_poll(struct storage *st, int *fd)
{
	struct st_pg *s = pg_from(st);

	pump(s);
	*fd = s->nflight > 0 && s->conn != NULL ? PQsocket(s->conn) : -1;
	return s->fail_rc != 0 && !s->fail_told ? s->fail_rc : 0;
}

/* HA, (when lazy) fetching and (when commits overlap) commits in flight,
 * this file's; no capacity (mem's none is not passed on either). */
static void *
pg_iface(struct storage *st, enum storage_iface which)
{
	struct st_pg *s = pg_from(st);

	switch (which) {
	case STORAGE_IFACE_HA:
		return &s->ha;
	case STORAGE_IFACE_FETCH:
		return s->lazy ? &s->fetch : NULL;
	case STORAGE_IFACE_INFLIGHT:
		return s->depth > 0 ? &s->out : NULL;
	default:
		return NULL;
	}
}

static int
pg_copy(struct storage *st, const char *dir)
{
	(void)dir;
	echd_log(ECHD_LOG_WARNING,
		"st_pg: no copy of schema %s here: use PostgreSQL's tools (pg_dump -n %s)",
		pg_from(st)->schema, pg_from(st)->schema);
	return -ENOTSUP;
}

/* ---- the write log ----------------------------------------------------------- */

static int
log_touch(struct st_pg *s, enum storage_table tb, const void *k, size_t klen)
{
	if (s->nlog == s->caplog) {
		size_t cap = s->caplog != 0 ? s->caplog * 2 : 64;
		struct pg_touch *p = echd_realloc(s->log, cap * sizeof(*p));

		if (p == NULL) {
			return -ENOMEM;
		}
		s->log = p;
		s->caplog = cap;
	}
	if (s->log_len + klen > s->log_cap) {
		size_t cap = s->log_cap != 0 ? s->log_cap : 4096;
		unsigned char *p;

		while (cap < s->log_len + klen) {
			cap *= 2;
		}
		p = echd_realloc(s->log_bytes, cap);
		if (p == NULL) {
			return -ENOMEM;
		}
		s->log_bytes = p;
		s->log_cap = cap;
	}
	memcpy(s->log_bytes + s->log_len, k, klen);
	s->log[s->nlog].tb = (uint32_t)tb;
	s->log[s->nlog].klen = (uint32_t)klen;
	s->log[s->nlog].off = s->log_len;
	s->nlog++;
	s->log_len += klen;
	return 0;
}

static const unsigned char *sort_bytes; /* touch_cmp's: single-threaded, like the loop */

static int
touch_cmp(const void *a, const void *b)
{
	const struct pg_touch *x = a, *y = b;
	size_t n;
	int c;

	if (x->tb != y->tb) {
		return x->tb < y->tb ? -1 : 1;
	}
	n = x->klen < y->klen ? x->klen : y->klen;
	c = memcmp(sort_bytes + x->off, sort_bytes + y->off, n);
	if (c != 0) {
		return c;
	}
	return x->klen < y->klen ? -1 : x->klen > y->klen ? 1 : 0;
}

/* Fills the parameter arrays from the log and t's final state. */
static int
build_params(struct st_pg *s, struct storage_txn *inner)
{
	int rc;

	sort_bytes = s->log_bytes;
	qsort(s->log, s->nlog, sizeof(*s->log), touch_cmp);
	for (int tb = 0; tb < STORAGE_T__COUNT; tb++) {
		s->ndel[tb] = s->nins[tb] = 0;
		if (array_start(&s->del[tb]) != 0 || array_start(&s->ink[tb]) != 0 ||
			array_start(&s->inv[tb]) != 0) {
			return -ENOMEM;
		}
	}
	for (size_t i = 0; i < s->nlog; i++) {
		const struct pg_touch *e = &s->log[i];
		struct st_buf k = {s->log_bytes + e->off, e->klen}, v;

		if (i > 0 && touch_cmp(e - 1, e) == 0) {
			continue;
		}
		rc = storage_get(inner, (enum storage_table)e->tb, &k, &v);
		if (rc == 0) {
			if (array_add(&s->ink[e->tb], k.data, k.len) != 0 ||
				array_add(&s->inv[e->tb], v.data, v.len) != 0) {
				return -ENOMEM;
			}
			s->nins[e->tb]++;
		} else if (rc == ECHD_ENOTFOUND) {
			if (array_add(&s->del[e->tb], k.data, k.len) != 0) {
				return -ENOMEM;
			}
			s->ndel[e->tb]++;
		} else {
			return rc;
		}
	}
	for (int tb = 0; tb < STORAGE_T__COUNT; tb++) {
		array_finish(&s->del[tb], s->ndel[tb]);
		array_finish(&s->ink[tb], s->nins[tb]);
		array_finish(&s->inv[tb], s->nins[tb]);
	}
	return 0;
}

/* ---- the commit round trip --------------------------------------------------- */

/* What the results of a pipelined commit said. */
enum pg_step { STEP_BEGIN, STEP_FENCE, STEP_WRITE, STEP_COMMIT };

static uint32_t
get_be32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return ntohl(v);
}

/* Sends statement name over the n elements of nparams parallel arrays:
 * once, or in pieces of at most pg_param_max bytes together (one element
 * at least). Returns the statements sent, or -1 when one was not. */
static int
send_split(struct st_pg *s, const char *name, int nparams, const struct pg_buf *const *arr,
	uint32_t n)
{
	const int fmt[2] = {1, 1};
	const char *pv[2];
	int pl[2], sent = 0;
	size_t total = 0, off[2] = {20, 20};

	for (int p = 0; p < nparams; p++) {
		total += arr[p]->len;
		pv[p] = (const char *)arr[p]->p;
		pl[p] = (int)arr[p]->len;
	}
	if (total <= pg_param_max) {
		return PQsendQueryPrepared(s->conn, name, nparams, pv, pl, fmt, 0) ? 1 : -1;
	}
	for (uint32_t i = 0; i < n; sent++) {
		size_t start[2] = {off[0], off[1]}, bytes = 0;
		uint32_t cnt = 0;

		while (i < n) {
			size_t len[2] = {0, 0}, el = 0;
			for (int p = 0; p < nparams; p++) {
				len[p] = 4 + get_be32(arr[p]->p + off[p]);
				el += len[p];
			}
			if (cnt > 0 && bytes + el > pg_param_max) {
				break;
			}
			for (int p = 0; p < nparams; p++) {
				off[p] += len[p];
			}
			bytes += el;
			cnt++;
			i++;
		}
		for (int p = 0; p < nparams; p++) {
			struct pg_buf *b = &s->part[p];
			size_t len = off[p] - start[p];
			if (array_start(b) != 0 || buf_reserve(b, len) != 0) {
				return -1;
			}
			memcpy(b->p + b->len, arr[p]->p + start[p], len);
			b->len += len;
			array_finish(b, cnt);
			pv[p] = (const char *)b->p;
			pl[p] = (int)b->len;
		}
		/* libpq copies the parameters: the pieces' buffers serve again */
		if (!PQsendQueryPrepared(s->conn, name, nparams, pv, pl, fmt, 0)) {
			return -1;
		}
	}
	return sent;
}

/* Notes that statements [from, to) of a commit write table tb. Returns
 * false without memory. */
static bool
note_steps(struct st_pg *s, int from, int to, int tb)
{
	if ((size_t)to > s->cap_steps) {
		size_t cap = s->cap_steps != 0 ? s->cap_steps : 64;
		int *p;

		while (cap < (size_t)to) {
			cap *= 2;
		}
		p = echd_realloc(s->step_tb, cap * sizeof(*p));
		if (p == NULL) {
			return false;
		}
		s->step_tb = p;
		s->cap_steps = cap;
	}
	for (int i = from; i < to; i++) {
		s->step_tb[i] = tb;
	}
	return true;
}

/* The step of result i of nsteps: BEGIN, the fence, the writes, COMMIT. */
static enum pg_step
step_at(int i, int nsteps)
{
	return i == 0 ? STEP_BEGIN : i == 1 ? STEP_FENCE : i == nsteps - 1 ? STEP_COMMIT : STEP_WRITE;
}

/* ---- overlapped commits -------------------------------------------------------
 *
 * A commit sends its batch (BEGIN; the fence; the writes; COMMIT) in
 * libpq's pipeline mode followed by a flush request, not a Sync, commits
 * the cache, and returns while PostgreSQL works on it: up to depth
 * (postgres.pipeline-depth) batches stay in flight, the next one's
 * statements queued behind them on the same session. Commits while depth
 * are out go to the cache and a pending batch (their touched keys), sent
 * when one lands with each key's state in the cache then, so that the
 * batches grow with the wait as the blocking commit's did. Answers are
 * read when they are in (storage_inflight_poll(), each commit) or when more
 * than depth are out (blocking), and a batch's generations are durable
 * once its COMMIT's answer is read: the broker holds the replies until
 * then.
 * Every other statement on the session first ends the pipeline (drain():
 * a Sync, every answer read), as does storage_sync().
 *
 * With no Sync between them, a batch that fails in PostgreSQL (its fence,
 * a write) makes PostgreSQL skip every later statement up to the next
 * Sync, the later batches' included: they never apply on a state that does
 * not exist. Their writes are in the cache already, which is then ahead of
 * PostgreSQL: the front end leaves the role (standby, unlocked; the next
 * takeover loads afresh), and the failed batch and those after it never
 * become durable. storage_sync() answers the failure (-EIO, ECHD_ESTANDBY
 * for a fence, ECHD_EINDOUBT for a lost connection: every batch out is in
 * doubt then), and the broker closes their clients unanswered. */

static struct pg_flight *
flight_at(struct st_pg *s, unsigned k)
{
	return &s->flight[(s->fhead + k) % (PG_DEPTH_MAX + 1)];
}

/* The batches out are gone with the connection: in doubt. */
static void
flights_lost(struct st_pg *s)
{
	for (unsigned k = 0; k < s->nflight; k++) {
		struct pg_flight *f = flight_at(s, k);
		int rc = f->failed ? ECHD_EOFFLINE : ECHD_EINDOUBT;

		if (!f->cached) {
			s->uncached_rc = rc;
		} else if (s->fail_rc == 0) {
			s->fail_rc = ECHD_EINDOUBT; /* this one or a later one may have applied */
			s->fail_told = false;
			s->fail_upto = f->gen - 1;
		}
	}
	if (s->pend_gen != 0 && s->fail_rc == 0) {
		s->fail_rc = ECHD_EOFFLINE; /* never sent: not applied, but in the cache */
		s->fail_told = false;
		s->fail_upto = s->pend_gen - 1;
	}
	s->pend_gen = 0;
	s->nplog = 0;
	s->plog_len = 0;
	s->nflight = 0;
	s->sync_sent = false;
}

/* What result res of flight f says. */
static void
step_result(struct st_pg *s, struct pg_flight *f, PGresult *res)
{
	int i = f->i;

	switch (PQresultStatus(res)) {
	case PGRES_COMMAND_OK:
	case PGRES_TUPLES_OK:
		/* A COMMIT of a failed txn answers ROLLBACK. (In a pipeline the
		 * error before it aborts the pipeline, so COMMIT is skipped
		 * instead; were it not, later batches would have run: they are
		 * then counted failed too, never durable.) */
		if (step_at(i, f->nsteps) == STEP_COMMIT &&
			strcmp(PQcmdStatus(res), "COMMIT") != 0) {
			f->failed = true;
		}
		break;
	case PGRES_PIPELINE_ABORTED:
		f->failed = true;
		break;
	default: {
		const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);

		if (!f->failed && step_at(i, f->nsteps) == STEP_FENCE && st != NULL &&
			strcmp(st, "22012") == 0) {
			f->fenced = true;
		} else if (!f->failed && step_at(i, f->nsteps) == STEP_WRITE && st != NULL &&
			   strcmp(st, "22012") == 0) {
			echd_log(ECHD_LOG_WARNING,
				"st_pg: commit: PostgreSQL did not store the rows sent to %s.%s (a "
				"trigger, rule or policy on it?): nothing committed",
				s->schema, pg_tables[f->step_tb[i]]);
		} else if (!f->failed) {
			echd_log(ECHD_LOG_WARNING, "st_pg: commit: %s", PQresultErrorMessage(res));
		}
		f->failed = true;
		break;
	}
	}
}

/* Reads the results of the oldest batch in flight: block, waiting until
 * dl; else only those in. Returns 0 (all read), 1 (not all in yet), or
 * -ETIMEDOUT or -EIO (the connection lost). */
static int
flight_read(struct st_pg *s, bool block, int64_t dl)
{
	struct pg_flight *f = flight_at(s, 0);
	PGresult *res;
	int rc;

	if (!block && PQconsumeInput(s->conn) == 0) {
		return -EIO;
	}
	while (f->i < f->nsteps) {
		if (!block && PQisBusy(s->conn)) {
			return 1;
		}
		rc = io_result(s, dl, &res);
		if (rc != 0) {
			return rc;
		}
		if (f->want_null) {
			if (res != NULL) {
				PQclear(res);
				return -EIO; /* more than one result: not what was sent */
			}
			f->want_null = false;
			f->i++;
			continue;
		}
		if (res == NULL) {
			return -EIO;
		}
		step_result(s, f, res);
		PQclear(res);
		f->want_null = true;
	}
	return 0;
}

/* Ends pipeline mode once nothing is in flight: the Sync's answer read, a
 * transaction a failed statement left open rolled back. Returns 0 or
 * ECHD_EOFFLINE (the connection closed). */
static int
pipe_end(struct st_pg *s)
{
	PGresult *res = NULL;
	int rc = 0;

	if (s->conn == NULL || PQpipelineStatus(s->conn) == PQ_PIPELINE_OFF) {
		return 0;
	}
	if (!s->sync_sent && !PQpipelineSync(s->conn)) {
		rc = -EIO;
	}
	s->sync_sent = false;
	if (rc == 0) {
		rc = io_result(s, deadline(s), &res);
	}
	if (rc == 0 && (res == NULL || PQresultStatus(res) != PGRES_PIPELINE_SYNC)) {
		rc = -EIO;
	}
	PQclear(res);
	if (rc == 0 && !PQexitPipelineMode(s->conn)) {
		rc = -EIO;
	}
	if (rc != 0) {
		conn_failed(s, rc);
		echd_log(ECHD_LOG_WARNING, "st_pg: commit: %s", s->sess.why);
		return ECHD_EOFFLINE;
	}
	if (PQtransactionStatus(s->conn) != PQTRANS_IDLE) {
		return run(s, "commit", "ROLLBACK", 0, NULL, NULL) == ECHD_EOFFLINE ? ECHD_EOFFLINE
										   : 0;
	}
	return 0;
}

/* Batch f (read whole, and popped) failed with rc: every later one was
 * skipped by PostgreSQL (read here). When f or a later one is in the cache,
 * the cache is ahead of PostgreSQL: leave the role (the next takeover
 * loads afresh) and keep the generations from f on from becoming durable. */
static void
flights_failed(struct st_pg *s, const struct pg_flight *f, int rc)
{
	bool ahead = f->cached || s->pend_gen != 0;
	int64_t dl = deadline(s);

	s->pend_gen = 0; /* never to be sent: PostgreSQL would skip it */
	s->nplog = 0;
	s->plog_len = 0;
	if (!f->cached) {
		s->uncached_rc = rc;
	}
	while (s->nflight > 0 && s->conn != NULL) {
		struct pg_flight *g = flight_at(s, 0);
		int r = flight_read(s, true, dl);

		if (r != 0) {
			conn_failed(s, r);
			echd_log(ECHD_LOG_WARNING, "st_pg: commit: %s", s->sess.why);
			break; /* flights_lost() took the rest */
		}
		ahead |= g->cached;
		if (!g->cached) {
			s->uncached_rc = -EIO; /* skipped */
		}
		s->fhead = (s->fhead + 1) % (PG_DEPTH_MAX + 1);
		s->nflight--;
	}
	if (ahead && s->fail_rc == 0) {
		s->fail_rc = rc;
		s->fail_told = false;
		s->fail_upto = f->gen - 1;
	}
	(void)pipe_end(s);
	if (s->conn == NULL) {
		/* the error was the session's end (terminated): nothing applied */
		s->uncached_rc = s->uncached_rc == -EIO ? ECHD_EOFFLINE : s->uncached_rc;
		s->fail_rc = s->fail_rc == -EIO ? ECHD_EOFFLINE : s->fail_rc;
		return;
	}
	if (f->fenced) {
		echd_log(ECHD_LOG_WARNING, "st_pg: schema %s was taken over: standby", s->schema);
	} else if (ahead) {
		echd_log(ECHD_LOG_WARNING,
			"st_pg: a commit in flight failed after later ones were taken into the "
			"cache: standby until a takeover loads schema %s again",
			s->schema);
	}
	if (f->fenced || ahead) {
		s->role = STORAGE_ROLE_STANDBY;
		(void)unlock(s);
	}
}

/* Reads the answers of the batches in flight: those in, and the oldest's
 * (blocking) while more than keep are out. A failure ends the pipeline
 * (flights_failed()). */
static void
reap_until(struct st_pg *s, unsigned keep, int64_t dl)
{
	while (s->nflight > 0 && s->conn != NULL) {
		struct pg_flight *f = flight_at(s, 0);
		int rc = flight_read(s, s->nflight > keep, dl);

		if (rc == 1) {
			return;
		}
		if (rc != 0) {
			conn_failed(s, rc); /* flights_lost() */
			echd_log(ECHD_LOG_WARNING, "st_pg: commit: %s", s->sess.why);
			return;
		}
		s->fhead = (s->fhead + 1) % (PG_DEPTH_MAX + 1);
		s->nflight--;
		s->sess.alive_ms = f->sent_ms; /* answered: the session lived then */
		rc = f->fenced ? ECHD_ESTANDBY : f->failed ? -EIO : 0;
		if (rc == -EIO && PQstatus(s->conn) == CONNECTION_BAD) {
			rc = ECHD_EOFFLINE; /* an error answered before COMMIT: nothing applied */
		}
		if (!f->cached) {
			s->uncached_rc = rc;
		}
		if (rc != 0) {
			flights_failed(s, f, rc);
			return;
		}
	}
}

static void
reap(struct st_pg *s, unsigned keep)
{
	reap_until(s, keep, deadline(s));
}

/* Ends the pipeline: every batch out answered (one round trip: the Sync
 * goes first), so that a statement of another kind may run. Returns 0, or
 * ECHD_EOFFLINE when the connection is gone. */
static int
drain(struct st_pg *s)
{
	if (s->pend_gen != 0) {
		if (s->conn != NULL && s->role == STORAGE_ROLE_ACTIVE) {
			(void)send_pending(s);
		} else {
			pend_failed(s, s->conn == NULL ? ECHD_EOFFLINE : ECHD_ESTANDBY);
		}
	}
	if (s->conn == NULL || PQpipelineStatus(s->conn) == PQ_PIPELINE_OFF) {
		return s->conn == NULL ? ECHD_EOFFLINE : 0;
	}
	if (!s->sync_sent) {
		if (!PQpipelineSync(s->conn)) {
			conn_lost(s, "cannot send");
			return ECHD_EOFFLINE;
		}
		s->sync_sent = true;
	}
	reap(s, 0);
	if (s->conn != NULL && s->nflight == 0) {
		(void)pipe_end(s);
	}
	return s->conn == NULL ? ECHD_EOFFLINE : 0;
}

/* Sends the commit of the logged writes (and a flush request) in pipeline
 * mode, behind the batches in flight, and queues it as the newest flight
 * (not yet cached). Returns 0, or ECHD_EOFFLINE (lost before COMMIT was
 * sent: nothing applied) or ECHD_EINDOUBT (lost after), now OFFLINE. */
static int
send_batch(struct st_pg *s, uint64_t first, bool cached)
{
	int nsteps = 0, rc = 0;
	bool commit_sent = false;
	int64_t dl = deadline(s);
	char name[16], gen[24];
	const char *gp[1] = {gen};
	PGconn *c = s->conn;
	struct pg_flight *f;
	int *tb;
	size_t cap;

	if (PQpipelineStatus(c) == PQ_PIPELINE_OFF && !PQenterPipelineMode(c)) {
		conn_lost(s, "cannot enter pipeline mode");
		return ECHD_EOFFLINE;
	}
	s->sess.sent_ms = now_ms();
	snprintf(gen, sizeof(gen), "%" PRId64, s->gen);
	if (!PQsendQueryParams(c, "BEGIN", 0, NULL, NULL, NULL, NULL, 0)) {
		goto send_failed;
	}
	nsteps++; /* BEGIN */
	if (!PQsendQueryPrepared(c, "fence", 1, gp, NULL, NULL, 0)) {
		goto send_failed;
	}
	nsteps++; /* the fence */
	for (int t = 0; t < STORAGE_T__COUNT; t++) {
		if (s->ndel[t] > 0) {
			const struct pg_buf *arr[1] = {&s->del[t]};
			int sent;

			snprintf(name, sizeof(name), "d%d", t);
			if ((sent = send_split(s, name, 1, arr, s->ndel[t])) < 0) {
				goto send_failed;
			}
			if (!note_steps(s, nsteps, nsteps + sent, t)) {
				goto send_failed;
			}
			nsteps += sent;
		}
		if (s->nins[t] > 0) {
			const struct pg_buf *arr[2] = {&s->ink[t], &s->inv[t]};
			int sent;

			snprintf(name, sizeof(name), "i%d", t);
			if ((sent = send_split(s, name, 2, arr, s->nins[t])) < 0) {
				goto send_failed;
			}
			if (!note_steps(s, nsteps, nsteps + sent, t)) {
				goto send_failed;
			}
			nsteps += sent;
		}
	}
	/* All before COMMIT out first: a loss until here applied nothing of
	 * this batch. */
	rc = io_flush(s, dl);
	if (rc != 0) {
		conn_failed(s, rc);
		echd_log(ECHD_LOG_WARNING, "st_pg: commit: %s", s->sess.why);
		return ECHD_EOFFLINE;
	}
	commit_sent = true; /* from here a loss leaves the outcome unknown */
	/* depth 0: the Sync goes along (its answer comes with COMMIT's) */
	if (!PQsendQueryParams(c, "COMMIT", 0, NULL, NULL, NULL, NULL, 0) ||
		!(s->depth == 0 ? PQpipelineSync(c) : PQsendFlushRequest(c))) {
		goto send_failed;
	}
	s->sync_sent = s->depth == 0;
	nsteps++; /* COMMIT */
	/* the flight takes the step table; the one it had serves the next */
	f = flight_at(s, s->nflight);
	tb = f->step_tb;
	cap = f->cap_steps;
	*f = (struct pg_flight){.nsteps = nsteps, .step_tb = s->step_tb, .cap_steps = s->cap_steps,
		.gen = first, .cached = cached, .sent_ms = s->sess.sent_ms};
	s->step_tb = tb;
	s->cap_steps = cap;
	s->nflight++;
	rc = io_flush(s, dl);
	if (rc != 0) {
		conn_failed(s, rc); /* flights_lost(): this one in doubt */
		echd_log(ECHD_LOG_WARNING, "st_pg: commit: %s", s->sess.why);
		return ECHD_EINDOUBT;
	}
	if (pg_stall_ms > 0) {
		usleep(pg_stall_ms * 1000); /* a test's stall of this process */
	}
	return 0;
send_failed:
	conn_lost(s, "cannot send");
	echd_log(ECHD_LOG_WARNING, "st_pg: commit: %s", s->sess.why);
	return commit_sent ? ECHD_EINDOUBT : ECHD_EOFFLINE;
}

/* Swaps the write log with the pending batch's. */
static void
log_swap(struct st_pg *s)
{
	struct pg_touch *l = s->log;
	unsigned char *b = s->log_bytes;
	size_t n = s->nlog, cap = s->caplog, len = s->log_len, bcap = s->log_cap;

	s->log = s->plog;
	s->nlog = s->nplog;
	s->caplog = s->capplog;
	s->log_bytes = s->plog_bytes;
	s->log_len = s->plog_len;
	s->log_cap = s->plog_cap;
	s->plog = l;
	s->nplog = n;
	s->capplog = cap;
	s->plog_bytes = b;
	s->plog_len = len;
	s->plog_cap = bcap;
}

/* Adds the write log of the commit just taken into the cache to the
 * pending batch. Returns 0 or -ENOMEM. */
static int
pend_add(struct st_pg *s)
{
	int rc = 0;

	log_swap(s); /* the pending log is s->log now, the commit's s->plog */
	for (size_t i = 0; i < s->nplog && rc == 0; i++) {
		const struct pg_touch *e = &s->plog[i];

		rc = log_touch(s, (enum storage_table)e->tb, s->plog_bytes + e->off, e->klen);
	}
	log_swap(s);
	return rc;
}

/* The pending batch cannot go (rc): it is in the cache and never will be
 * in PostgreSQL, so the cache is ahead: leave the role, and its
 * generations never become durable. */
static void
pend_failed(struct st_pg *s, int rc)
{
	echd_log(ECHD_LOG_WARNING, "st_pg: commits not sent (%s): standby until a takeover "
				   "loads schema %s again",
		echd_strerror(rc), s->schema);
	if (s->fail_rc == 0) {
		s->fail_rc = rc;
		s->fail_told = false;
		s->fail_upto = s->pend_gen - 1;
	}
	s->pend_gen = 0;
	s->nplog = 0;
	s->plog_len = 0;
	if (s->role == STORAGE_ROLE_ACTIVE && s->conn != NULL) {
		s->role = STORAGE_ROLE_STANDBY;
		(void)unlock(s);
	}
}

/* Sends the pending batch: the final state, in the cache, of each key its
 * commits touched. No write transaction is open on the cache. Returns 0 or
 * an error (the batch failed: pend_failed(), or the connection lost). */
static int
send_pending(struct st_pg *s)
{
	struct storage_txn *r = NULL;
	uint64_t first = s->pend_gen;
	int rc;

	log_swap(s);
	rc = storage_txn_begin(s->fwd.inner, NULL, STORAGE_TXN_RDONLY, &r);
	if (rc == 0) {
		rc = build_params(s, r);
	}
	storage_txn_abort(r);
	s->nlog = 0; /* the pending log, consumed */
	s->log_len = 0;
	log_swap(s);
	if (rc != 0) {
		pend_failed(s, rc);
		return rc;
	}
	rc = send_batch(s, first, true); /* lost: flights_lost() took it */
	s->pend_gen = 0;
	return rc;
}

/* Nothing out nor pending: ends the pipeline. PostgreSQL arms
 * idle_session_timeout (the lease) only at a Sync's ReadyForQuery, so a
 * session left in a pipeline would never time out. */
static void
pipe_idle(struct st_pg *s)
{
	if (s->nflight == 0 && s->pend_gen == 0 && s->conn != NULL &&
		PQpipelineStatus(s->conn) != PQ_PIPELINE_OFF) {
		(void)pipe_end(s);
	}
}

/* Reads the answers in (judging the oldest late past timeout-ms); when
 * fewer than depth are out then, sends the pending batch; ends the
 * pipeline when nothing is left. */
static void
pump(struct st_pg *s)
{
	if (s->nflight > 0 && s->conn != NULL) {
		reap(s, s->depth);
	}
	/* the oldest out unanswered past timeout-ms: one more look (a stall
	 * of this process is not a lost answer), else the connection is lost */
	while (s->nflight > 0 && s->conn != NULL &&
		now_ms() - flight_at(s, 0)->sent_ms > (int64_t)s->timeout_ms) {
		reap_until(s, s->nflight - 1, now_ms());
	}
	if (s->pend_gen != 0 && s->nflight < s->depth && s->conn != NULL &&
		s->role == STORAGE_ROLE_ACTIVE) {
		(void)send_pending(s);
	}
	pipe_idle(s);
}

/* ---- the partial cache (cache-size, issue 34) --------------------------------
 *
 * With cache-size > 0 the cache holds every table but the lazy ones
 * (entries and nodes, the tables whose rows grow with the entries) whole,
 * loaded at takeover as before, and of the lazy ones what was read or
 * written lately, up to cache-size bytes (keys, values and PG_ROW_COST a
 * row), so that neither a takeover nor the memory grows with the entries.
 * st_pg_cache.h keeps what is known: spans of keys held completely (a key
 * missing inside one is missing from PostgreSQL too), when each partition
 * (stream) was last used, and keys deleted while a fetch was out.
 *
 * At takeover the lazy tables load no row: a loose index scan finds which
 * partitions they hold (one probe per stream), and everything else (the
 * gaps between them, and so every stream created from then on) is a span.
 * A read that needs rows outside the spans does not wait: it queues a
 * fetch of that gap (forward or backward from the point needed, as many
 * rows as the cursor's hint or PG_FETCH_ROWS, twice as many as last time
 * when it goes on where the last one ended) and answers ECHD_EWOULDFETCH
 * (storage.h's fetch interface). The fetches go one at a time over a
 * second, read-only connection; storage_fetch_poll() reads the answer,
 * puts each row that is not in the cache already (a row there is newer:
 * it was written since) nor deleted by a commit since the fetch left (the
 * gone keys), and adds the range the answer covers to the spans. It puts
 * an answer in, and evicts, PG_LAND_ROWS / PG_EVICT_ROWS rows a poll, so
 * that a scan does not stall the other clients; the fetch counts as out
 * until its last row is in.
 *
 * A fetch sees every commit whose COMMIT was answered before it was sent,
 * and is sent only with no commit in flight (storage_fetch_poll() ends the
 * pipeline first; miss() leaves it to that), so it sees every commit in
 * the cache; commits while it is out are in the cache (rows written) or in
 * the gone keys (rows deleted), so what it brings never overrides a newer
 * state. Eviction, which would make a row
 * written since a fetch left look absent, runs only while no fetch is
 * out: in storage_fetch_poll(), before it reads an answer, so the rows a
 * waiting command asked for are there when it runs again. It drops rows
 * of the least recently used partition, its oldest ids first (entries,
 * then nodes), and cuts the spans where it dropped.
 */

#define PG_ROW_COST       96    /* a row's bytes besides key and value (mem's node, row) */
#define PG_FETCH_ROWS     256   /* rows a fetch asks for, without a hint */
#define PG_FETCH_ROWS_MAX 4096  /* rows one fetch asks for at most */
#define PG_EVICT_ROWS     128   /* rows one poll drops at most */
/* ... and while writes keep the cache past a sixteenth over cache-size,
 * this many: 512 a poll let a loader take it to 2.7 times its size. */
#define PG_EVICT_ROWS_HARD 4096
#define PG_LAND_ROWS      128   /* rows one poll puts in at most */
#define PG_FETCH_BYTES_MIN ((uint64_t)1 << 20)
#define PG_FETCH_ERR_MS   1000  /* misses answer a failed fetch's error this long */
#define PG_FETCH_POLL_MS  100

static int
lazy_ix(const struct st_pg *s, enum storage_table tb)
{
	if (!s->lazy) {
		return -1;
	}
	return tb == STORAGE_T_ENTRIES ? 0 : tb == STORAGE_T_NODES ? 1 : -1;
}

/* A bound at key k (after: just after it). Returns 0, or ECHD_EINVAL for a
 * key too long for a lazy table (st_pg_cache.h). */
static int
bound_at(struct pgc_bound *b, const void *k, size_t len, bool after)
{
	if (len >= PGC_KEY_MAX) {
		return ECHD_EINVAL;
	}
	pgc_bound_key(b, k, len, after);
	return 0;
}

static uint64_t
cache_bytes(struct st_pg *s)
{
	struct storage_stat in;

	if (s->fwd.inner == NULL || storage_stat(s->fwd.inner, &in) != 0) {
		return 0;
	}
	return in.used_bytes + in.rows * PG_ROW_COST;
}

/* Finds which partitions lazy table ix holds (the first PGC_PART_LEN bytes
 * of its keys), one index probe each, in the load's snapshot, and sets
 * *out to everything else. Returns as run(). */
static int
lazy_scan(struct st_pg *s, int ix, struct pgc_spans *out)
{
	unsigned char ff[STORAGE_KEY_MAX - PGC_PART_LEN];
	const char *pv[1] = {(const char *)ff};
	const int pl[1] = {sizeof(ff)}, pf[1] = {1};
	const Oid pt[1] = {PG_OID_BYTEA};
	const char *tb = pg_tables[pg_lazy_tb[ix]];
	struct pgc_bound prev, lo;
	char sql[768];
	PGresult *res = NULL;
	int rc;

	/* past every key of partition p: p + 0xff... to the longest key */
	memset(ff, 0xff, sizeof(ff));
	snprintf(sql, sizeof(sql),
		"WITH RECURSIVE p(s) AS ("
		"(SELECT substring(k FROM 1 FOR %d) FROM %s.%s ORDER BY k LIMIT 1) UNION ALL "
		"SELECT (SELECT substring(k FROM 1 FOR %d) FROM %s.%s WHERE k > p.s || $1 "
		"ORDER BY k LIMIT 1) FROM p WHERE p.s IS NOT NULL) "
		"SELECT s FROM p WHERE s IS NOT NULL",
		PGC_PART_LEN, s->qschema, tb, PGC_PART_LEN, s->qschema, tb);
	if (!PQsendQueryParams(s->conn, sql, 1, pt, pv, pl, pf, 1)) {
		conn_lost(s, "cannot send");
		return ECHD_EOFFLINE;
	}
	rc = collect(s, "load", &res, NULL);
	if (rc != 0) {
		return rc;
	}
	pgc_bound_min(&prev);
	for (int i = 0; res != NULL && i < PQntuples(res) && rc == 0; i++) {
		const char *p = PQgetvalue(res, i, 0);
		int n = PQgetlength(res, i, 0);

		pgc_bound_key(&lo, p, (size_t)n, false);
		rc = pgc_spans_add(out, &prev, &lo);
		pgc_bound_part_end(&prev, p, (size_t)n);
	}
	if (rc == 0 && !prev.inf) {
		pgc_bound_inf(&lo);
		rc = pgc_spans_add(out, &prev, &lo);
	}
	PQclear(res);
	return rc;
}

static void
fconn_close(struct st_pg *s)
{
	if (s->fconn != NULL) {
		PQfinish(s->fconn);
		s->fconn = NULL;
	}
	PQclear(s->land); /* rows put so far stay: a row without a span is safe */
	s->land = NULL;
	s->inflight = false;
}

/* Ends every fetch asked for with rc: the commands that wait run again and
 * meet rc for PG_FETCH_ERR_MS. */
static void
fetch_fail(struct st_pg *s, int rc, const char *why)
{
	echd_log(ECHD_LOG_WARNING, "st_pg: fetch from schema %s failed: %s", s->schema, why);
	fconn_close(s);
	s->nq = 0;
	s->fetch_err = rc;
	s->fetch_err_ms = now_ms() + PG_FETCH_ERR_MS;
	s->fconn_retry_ms = now_ms() + PG_BACKOFF_MIN_MS;
	s->landed++;
}

/* A fresh load (fresh: its spans, taken) or leaving active: nothing asked
 * for stands. */
static void
lazy_reset(struct st_pg *s, struct pgc_spans *fresh)
{
	if (!s->lazy) {
		return;
	}
	for (int i = 0; i < PG_NLAZY; i++) {
		pgc_spans_clear(&s->spans[i]);
		if (fresh != NULL) {
			s->spans[i] = fresh[i];
			memset(&fresh[i], 0, sizeof(fresh[i]));
		}
	}
	pgc_parts_clear(&s->parts);
	pgc_gone_clear(&s->gone);
	fconn_close(s);
	s->nq = 0;
	s->fetch_err = 0;
	s->evict_more = false;
	for (int i = 0; i < PG_NSEQ; i++) {
		s->seq[i].ix = -1;
	}
	s->landed++;
}

/* Opens the fetches' connection, read-only, within timeout-ms. Returns 0
 * or ECHD_EOFFLINE (logged). */
static int
fconn_open(struct st_pg *s)
{
	/* Read-only, on the primary: libpq's read-write test (a URL's
	 * target_session_attrs=read-write) would fail this session on every
	 * host, as it asks transaction_read_only; "primary" asks whether the
	 * server is in recovery. Later keywords override the URL's. */
	const char *keys[] = {"dbname", "fallback_application_name", "options",
		"target_session_attrs", NULL};
	/* the fetches read the part held: on its server */
	const char *vals[] = {s->nsrv > 0 ? s->srv[s->data].url : s->url, "echd-fetch",
		"-c default_transaction_read_only=on", "primary", NULL};
	PostgresPollingStatusType ps = PGRES_POLLING_WRITING;
	int64_t dl = deadline(s);
	PGconn *c;

	s->fconn_retry_ms = now_ms() + PG_BACKOFF_MIN_MS;
	c = PQconnectStartParams(keys, vals, 1);
	if (c == NULL || PQstatus(c) == CONNECTION_BAD) {
		goto fail;
	}
	while (ps != PGRES_POLLING_OK) {
		if (ps == PGRES_POLLING_FAILED ||
			wait_conn(c, ps == PGRES_POLLING_READING ? POLLIN : POLLOUT, dl) != 0) {
			goto fail;
		}
		ps = PQconnectPoll(c);
	}
	PQsetNoticeProcessor(c, notice, NULL);
	if (PQsetnonblocking(c, 1) != 0) {
		goto fail;
	}
	s->fconn = c;
	return 0;
fail:
	echd_log(ECHD_LOG_WARNING, "st_pg: cannot open the fetch connection: %s",
		c != NULL ? PQerrorMessage(c) : "out of memory");
	if (c != NULL) {
		PQfinish(c);
	}
	return ECHD_EOFFLINE;
}

/* The bytes of values one fetch brings at most: a quarter of the cache,
 * but PG_FETCH_BYTES_MIN at least. */
static uint64_t
fetch_bytes(const struct st_pg *s)
{
	return s->cache_max / 4 > PG_FETCH_BYTES_MIN ? s->cache_max / 4 : PG_FETCH_BYTES_MIN;
}

/* Sends q[0]. Returns 0, or ECHD_EOFFLINE (the connection closed). */
static int
fetch_send(struct st_pg *s)
{
	const struct pg_req *r = &s->q[0];
	const Oid pt[2] = {PG_OID_BYTEA, PG_OID_BYTEA};
	const int pf[2] = {1, 1};
	const char *pv[2];
	int pl[2], n = 0;
	char sql[768], cond[64] = "";
	const char *dir = r->back ? " DESC" : "";
	size_t clen = 0;

	if (r->lo.len > 0) {
		pv[n] = (const char *)r->lo.k;
		pl[n++] = r->lo.len;
		clen += (size_t)snprintf(cond + clen, sizeof(cond) - clen, " AND k >= $%d", n);
	}
	if (!r->hi.inf) {
		pv[n] = (const char *)r->hi.k;
		pl[n++] = r->hi.len;
		snprintf(cond + clen, sizeof(cond) - clen, " AND k < $%d", n);
	}
	/* r->rows rows, but no more than fetch_bytes() of values (one row at
	 * least): n says how many rows there were before that cut */
	snprintf(sql, sizeof(sql),
		"SELECT k, v, n FROM (SELECT k, v, count(*) OVER () AS n, sum(octet_length(v)) "
		"OVER (ORDER BY k%s ROWS UNBOUNDED PRECEDING) - octet_length(v) AS before FROM "
		"(SELECT k, v FROM %s.%s WHERE true%s ORDER BY k%s LIMIT %u) i) j "
		"WHERE before < %" PRIu64 " ORDER BY k%s",
		dir, s->qschema, pg_tables[pg_lazy_tb[r->ix]], cond, dir, r->rows, fetch_bytes(s),
		dir);
	if (!PQsendQueryParams(s->fconn, sql, n, pt, pv, pl, pf, 1) || PQflush(s->fconn) < 0) {
		return ECHD_EOFFLINE;
	}
	s->inflight = true;
	s->inflight_dl = deadline(s);
	return 0;
}

/* How many rows r asks for: the hint, at least PG_FETCH_ROWS, twice as many as
 * last time when it goes on where a recent forward one ended (a long scan
 * gets there in a few rounds), PG_FETCH_ROWS_MAX at most; fetch_bytes()
 * bounds what they bring. */
static unsigned
fetch_rows(const struct st_pg *s, const struct pg_req *r, unsigned hint)
{
	uint64_t cap = PG_FETCH_ROWS_MAX;
	uint64_t rows = hint > PG_FETCH_ROWS ? hint : PG_FETCH_ROWS;

	for (int i = 0; i < PG_NSEQ && !r->back; i++) {
		const struct pg_seq *q = &s->seq[i];

		if (q->ix == r->ix && pgc_bound_cmp(&r->lo, &q->end) == 0 &&
			rows < (uint64_t)q->rows * 2) {
			rows = (uint64_t)q->rows * 2;
		}
	}
	if (rows > cap) {
		rows = cap;
	}
	return (unsigned)rows;
}

/* A read of lazy table ix needs what is at `at` and has not got it: queues
 * the fetch of the gap there (back: the gap below at). Returns
 * ECHD_EWOULDFETCH, or the error that answers reads meanwhile. */
static int
miss(struct st_pg *s, int ix, bool back, const struct pgc_bound *at, unsigned hint)
{
	struct pg_req r = {.ix = ix, .back = back};

	s->misses++;
	if (s->role != STORAGE_ROLE_ACTIVE) {
		return s->role == STORAGE_ROLE_STANDBY ? ECHD_ESTANDBY : ECHD_EOFFLINE;
	}
	if (s->fetch_err != 0 && now_ms() < s->fetch_err_ms) {
		return s->fetch_err;
	}
	if (back) {
		pgc_spans_gap_before(&s->spans[ix], at, &r.lo, &r.hi);
	} else {
		pgc_spans_gap_after(&s->spans[ix], at, &r.lo, &r.hi);
	}
	for (size_t i = 0; i < s->nq; i++) {
		const struct pg_req *q = &s->q[i];

		if (q->ix == ix && q->back == back && pgc_bound_cmp(&q->lo, &r.lo) == 0 &&
			pgc_bound_cmp(&q->hi, &r.hi) == 0) {
			return ECHD_EWOULDFETCH; /* asked for already */
		}
	}
	r.rows = fetch_rows(s, &r, hint);
	if (s->nq == s->capq) {
		size_t cap = s->capq != 0 ? s->capq * 2 : 8;
		struct pg_req *q = echd_realloc(s->q, cap * sizeof(*q));

		if (q == NULL) {
			return -ENOMEM;
		}
		s->q = q;
		s->capq = cap;
	}
	s->q[s->nq++] = r;
	/* with commits in flight, storage_fetch_poll() sends it after them */
	if (s->nq == 1 && s->fconn != NULL && s->nflight == 0 && s->pend_gen == 0 &&
		fetch_send(s) != 0) {
		fconn_close(s); /* storage_fetch_poll() reconnects */
	}
	return ECHD_EWOULDFETCH;
}

/* [lo, hi) of lazy table ix is needed: 0 when it is known, else miss(). */
static int
need(struct st_pg *s, int ix, const struct pgc_bound *lo, const struct pgc_bound *hi, bool back,
	unsigned hint)
{
	if (pgc_spans_covered(&s->spans[ix], lo, hi)) {
		return 0;
	}
	return miss(s, ix, back, back ? hi : lo, hint);
}

/* How many rows the answer had before fetch_bytes() cut it (column n,
 * an int8 in binary). */
static unsigned
inner_rows(PGresult *res)
{
	const unsigned char *p;
	uint64_t v = 0;

	if (PQntuples(res) == 0 || PQgetlength(res, 0, 2) != 8) {
		return 0;
	}
	p = (const unsigned char *)PQgetvalue(res, 0, 2);
	for (int i = 0; i < 8; i++) {
		v = v << 8 | p[i];
	}
	return (unsigned)v;
}

/* Puts up to PG_LAND_ROWS more rows of s->land, the answer to r, in the
 * cache, but for those it holds (newer) and those deleted since r left;
 * once all are in, the range r covers becomes a span and *done is set.
 * Putting an answer in steps bounds what one poll stalls the loop for
 * (a 4096-row answer and its eviction took some 15 ms); the fetch stays in
 * flight meanwhile, so commits keep their deleted keys in the gone list and
 * nothing is evicted. No transaction is open. */
static int
land_step(struct st_pg *s, const struct pg_req *r, bool *done)
{
	enum storage_table tb = pg_lazy_tb[r->ix];
	PGresult *res = s->land;
	struct pgc_bound lo = r->lo, hi = r->hi;
	int n = PQntuples(res), end, rc;
	struct storage_txn *t;

	*done = false;
	end = n - s->land_i > PG_LAND_ROWS ? s->land_i + PG_LAND_ROWS : n;
	rc = storage_txn_begin(s->fwd.inner, NULL, 0, &t);
	if (rc != 0) {
		return rc;
	}
	for (int i = s->land_i; i < end && rc == 0; i++) {
		struct st_buf k = {PQgetvalue(res, i, 0), (size_t)PQgetlength(res, i, 0)};
		struct st_buf v = {PQgetvalue(res, i, 1), (size_t)PQgetlength(res, i, 1)}, cur;

		if (pgc_gone_has(&s->gone, (unsigned)r->ix, k.data, k.len)) {
			continue;
		}
		rc = storage_get(t, tb, &k, &cur);
		if (rc == 0) {
			continue;
		}
		rc = storage_put(t, tb, &k, &v, 0);
		s->fetched_rows += rc == 0;
		if (rc == 0 && (i == 0 || i == n - 1)) {
			rc = pgc_parts_touch(&s->parts, k.data, k.len);
		}
	}
	if (rc == 0) {
		rc = storage_txn_commit(t);
		t = NULL;
	}
	storage_txn_abort(t);
	if (rc != 0 || end < n) {
		s->land_i = end;
		return rc;
	}
	if (n > 0 && ((unsigned)n >= r->rows || (unsigned)n < inner_rows(res))) {
		/* as far as the last row it got (all it asked for, or all its
		 * bytes allowed) */
		const char *p = PQgetvalue(res, n - 1, 0);
		rc = bound_at(r->back ? &lo : &hi, p, (size_t)PQgetlength(res, n - 1, 0), !r->back);
	}
	if (rc == 0) {
		rc = pgc_spans_add(&s->spans[r->ix], &lo, &hi);
	}
	if (rc == 0 && !r->back) {
		struct pg_seq *q = &s->seq[s->seq_next++ % PG_NSEQ];

		q->ix = r->ix;
		q->end = hi;
		q->rows = r->rows;
	}
	PQclear(s->land);
	s->land = NULL;
	*done = rc == 0;
	return rc;
}

/* Reads what the fetch in flight got, and puts it in the cache (in steps:
 * land_step()); the fetch has landed once all of it is in. */
static void
fetch_read(struct st_pg *s)
{
	PGresult *res;
	bool done;
	int rc = 0;

	if (s->land != NULL) {
		rc = land_step(s, &s->q[0], &done);
		if (rc != 0 || !done) {
			if (rc != 0) {
				fetch_fail(s, rc, echd_strerror(rc));
			}
			return; /* the rest at the next poll */
		}
	}
	if (PQconsumeInput(s->fconn) == 0 || PQflush(s->fconn) < 0) {
		fetch_fail(s, ECHD_EOFFLINE, PQerrorMessage(s->fconn));
		return;
	}
	while (!PQisBusy(s->fconn)) {
		res = PQgetResult(s->fconn);
		if (res == NULL) {
			/* the query's end */
			s->inflight = false;
			memmove(&s->q[0], &s->q[1], (s->nq - 1) * sizeof(*s->q));
			s->nq--;
			s->landed++;
			return;
		}
		if (PQresultStatus(res) != PGRES_TUPLES_OK) {
			echd_log(ECHD_LOG_WARNING, "st_pg: fetch: %s", PQresultErrorMessage(res));
			PQclear(res);
			fetch_fail(s, -EIO, "the query failed");
			return;
		}
		PQclear(s->land); /* (one answer a query: never set here) */
		s->land = res;
		s->land_i = 0;
		rc = land_step(s, &s->q[0], &done);
		if (rc != 0) {
			fetch_fail(s, rc, echd_strerror(rc));
			return;
		}
		if (!done) {
			return; /* the rest at the next poll; its end is read after */
		}
	}
	if (now_ms() > s->inflight_dl) {
		fetch_fail(s, ECHD_EOFFLINE, "no answer within timeout-ms");
	}
}

/* Drops rows of partition p, oldest first, entries before nodes, while the
 * cache is over low and budget lasts; cuts the spans where it dropped. */
static int
evict_part(struct st_pg *s, struct storage_txn *t, const unsigned char *p, uint64_t low,
	uint64_t *est, unsigned *budget)
{
	bool left = false;
	int rc = 0;

	for (int ix = 0; ix < PG_NLAZY && !left && *est > low && *budget > 0; ix++) {
		struct st_buf pk = {p, PGC_PART_LEN}, key, val;
		struct storage_cursor *c;
		struct pgc_bound lo, last;
		bool any = false;

		rc = storage_cursor_open(t, pg_lazy_tb[ix], &c);
		if (rc != 0) {
			return rc;
		}
		rc = storage_cursor_seek(c, &pk, &key, &val);
		while (rc == 0 && key.len >= PGC_PART_LEN && memcmp(key.data, p, PGC_PART_LEN) == 0) {
			if (*est <= low || *budget == 0) {
				left = true;
				break;
			}
			if (bound_at(&last, key.data, key.len, true) != 0) {
				rc = ECHD_ECORRUPT;
				break;
			}
			*est -= key.len + val.len + PG_ROW_COST < *est ? key.len + val.len + PG_ROW_COST
								     : *est;
			rc = storage_cursor_del(c);
			if (rc == 0) {
				any = true;
				(*budget)--;
				s->evicted_rows++;
				rc = storage_cursor_next(c, &key, &val);
			}
		}
		storage_cursor_close(c);
		if (rc == ECHD_ENOTFOUND) {
			rc = 0;
		}
		if (rc == 0 && any) {
			pgc_bound_key(&lo, p, PGC_PART_LEN, false);
			rc = pgc_spans_cut(&s->spans[ix], &lo, &last);
		}
		if (rc != 0) {
			return rc;
		}
	}
	if (!left) {
		pgc_parts_drop(&s->parts, p);
	}
	return 0;
}

/* Over cache-size (or going on with a drop begun): drops rows down to 7/8
 * of it, PG_EVICT_ROWS a call at most (PG_EVICT_ROWS_HARD while past a
 * sixteenth over it); s->evict_more says when some are left for the next.
 * No fetch is out, no transaction open. */
static int
evict(struct st_pg *s)
{
	uint64_t est = cache_bytes(s), low = s->cache_max - s->cache_max / 8;
	unsigned budget = est > s->cache_max + s->cache_max / 16 ? PG_EVICT_ROWS_HARD :
								  PG_EVICT_ROWS;
	unsigned char p[PGC_PART_LEN];
	struct storage_txn *t;
	int rc;

	if (est <= (s->evict_more ? low : s->cache_max)) {
		s->evict_more = false;
		return 0;
	}
	rc = storage_txn_begin(s->fwd.inner, NULL, 0, &t);
	while (rc == 0 && est > low && budget > 0 && pgc_parts_oldest(&s->parts, p)) {
		rc = evict_part(s, t, p, low, &est, &budget);
	}
	s->evict_more = rc == 0 && budget == 0 && est > low;
	if (rc != 0) {
		storage_txn_abort(t);
		/* the spans may be cut already: fewer known rows is safe */
		return rc;
	}
	return storage_txn_commit(t);
}

/* A commit went through while a fetch was out: its deleted keys of the
 * lazy tables must not come back with that fetch's answer. */
static int
lazy_committed(struct st_pg *s, size_t nlog)
{
	struct storage_txn *t;
	int rc;

	if (!s->inflight) {
		return 0;
	}
	rc = storage_txn_begin(s->fwd.inner, NULL, STORAGE_TXN_RDONLY, &t);
	for (size_t i = 0; rc == 0 && i < nlog; i++) {
		const struct pg_touch *e = &s->log[i];
		int ix = lazy_ix(s, (enum storage_table)e->tb);
		struct st_buf k = {s->log_bytes + e->off, e->klen}, v;

		if (ix >= 0 && storage_get(t, (enum storage_table)e->tb, &k, &v) == ECHD_ENOTFOUND) {
			rc = pgc_gone_add(&s->gone, (unsigned)ix, k.data, k.len);
		}
	}
	storage_txn_abort(t);
	return rc;
}

static void
fetch_fill(const struct st_pg *s, struct storage_fetch_state *out, uint64_t bytes)
{
	memset(out, 0, sizeof(*out));
	out->fd = s->fconn != NULL ? PQsocket(s->fconn) : -1;
	out->want_write = s->fconn != NULL && PQisnonblocking(s->fconn) && s->inflight &&
			  PQflush(s->fconn) == 1;
	out->busy = s->nq > 0 || s->evict_more;
	out->poll_ms = PG_FETCH_POLL_MS < s->timeout_ms ? PG_FETCH_POLL_MS : s->timeout_ms;
	if (s->land != NULL || s->evict_more) {
		out->poll_ms = 0; /* the rest of an answer, or of an eviction: next turn */
	}
	out->landed = s->landed;
	out->misses = s->misses;
	out->fetched_rows = s->fetched_rows;
	out->evicted_rows = s->evicted_rows;
	out->cache_bytes = bytes;
	out->cache_max = s->cache_max;
}

static int
pg_fetch_poll(struct storage *st, struct storage_fetch_state *out)
{
	struct st_pg *s = pg_from(st);
	int rc = 0;

	if (s->role != STORAGE_ROLE_ACTIVE) {
		if (s->nq > 0 || s->fconn != NULL) {
			fconn_close(s);
			s->nq = 0;
			s->landed++; /* the broker answers what waited: not active */
		}
		fetch_fill(s, out, cache_bytes(s));
		return 0;
	}
	if (!s->inflight && s->pend_gen == 0) {
		/* (pending commits read their rows from the cache when sent) */
		pgc_gone_clear(&s->gone);
		rc = evict(s);
		if (rc != 0) {
			echd_log(ECHD_LOG_WARNING, "st_pg: evicting from the cache: %s",
				echd_strerror(rc));
		}
	}
	if (s->inflight) {
		fetch_read(s);
	}
	/* over cache-size, the next fetch waits for the eviction's next steps:
	 * the cache stays within one answer of its limit */
	if (!s->inflight && s->nq > 0 && !(s->evict_more && cache_bytes(s) > s->cache_max)) {
		if (s->fconn == NULL && now_ms() >= s->fconn_retry_ms && fconn_open(s) != 0) {
			fetch_fail(s, ECHD_EOFFLINE, "no connection");
		}
		/* A fetch must see every commit in the cache: none in flight. */
		if (s->fconn != NULL && (s->nflight > 0 || s->pend_gen != 0) && drain(s) != 0) {
			fetch_fail(s, ECHD_EOFFLINE, "the store was lost");
		}
		if (s->fconn != NULL && s->role == STORAGE_ROLE_ACTIVE && fetch_send(s) != 0) {
			fetch_fail(s, ECHD_EOFFLINE, PQerrorMessage(s->fconn));
		}
	}
	fetch_fill(s, out, cache_bytes(s));
	return rc;
}

static uint64_t
pg_fetch_misses(const struct storage *st)
{
	return pg_from_const(st)->misses;
}

static const struct storage_inflight_ops pg_inflight_ops = {
	.poll = pg_inflight_poll,
};

static const struct storage_fetch_ops pg_fetch_ops = {
	.poll = pg_fetch_poll,
	.misses = pg_fetch_misses,
};

/* ---- reads of the lazy tables ------------------------------------------------ */

static int
pg_get(struct storage_txn *t, enum storage_table tb, const struct st_buf *k, struct st_buf *v)
{
	struct st_pg *s = pg_from(t->st);
	int ix = lazy_ix(s, tb), rc = storage_fwd_get(t, tb, k, v);
	struct pgc_bound lo, hi;

	if (ix < 0 || (rc != 0 && rc != ECHD_ENOTFOUND)) {
		return rc;
	}
	if (rc == 0) {
		return pgc_parts_touch(&s->parts, k->data, k->len);
	}
	if (bound_at(&lo, k->data, k->len, false) != 0) {
		return rc;
	}
	pgc_bound_key(&hi, k->data, k->len, true);
	rc = need(s, ix, &lo, &hi, false, 0);
	return rc == 0 ? ECHD_ENOTFOUND : rc;
}

enum move { MOVE_SEEK, MOVE_SEEK_LAST, MOVE_NEXT, MOVE_PREV };

static int
move_inner(struct storage_cursor *c, enum move m, const struct st_buf *k, struct st_buf *key,
	struct st_buf *val)
{
	switch (m) {
	case MOVE_SEEK:
		return storage_fwd_cursor_seek(c, k, key, val);
	case MOVE_SEEK_LAST:
		return storage_fwd_cursor_seek_last(c, k, key, val);
	case MOVE_NEXT:
		return storage_fwd_cursor_next(c, key, val);
	case MOVE_PREV:
		break;
	}
	return storage_fwd_cursor_prev(c, key, val);
}

/* A cursor move on a lazy table: the cache's answer stands when the range
 * between where the move starts and the row it found (or the end) is
 * known. */
static int
lazy_move(struct storage_cursor *base, enum move m, const struct st_buf *k, struct st_buf *key,
	struct st_buf *val)
{
	struct pg_cursor *c = cursor_from(base);
	struct st_pg *s = pg_from(base->txn->st);
	int ix = lazy_ix(s, base->tb), rc;
	bool back = m == MOVE_SEEK_LAST || m == MOVE_PREV;
	struct pgc_bound from, to;

	if ((m == MOVE_NEXT || m == MOVE_PREV) && c->failed) {
		return ECHD_EWOULDFETCH; /* the caller should have sought again */
	}
	/* where the move starts: from (forward), to (backward) */
	if (m == MOVE_SEEK || m == MOVE_SEEK_LAST) {
		rc = k == NULL ? 0 : bound_at(back ? &to : &from, k->data, k->len, back);
		if (k == NULL) {
			pgc_bound_min(&from);
			pgc_bound_inf(&to);
		}
	} else if ((m == MOVE_NEXT && c->ref == REF_END) || (m == MOVE_PREV && c->ref == REF_BEGIN)) {
		return move_inner(base, m, k, key, val); /* past the end it stays */
	} else if (c->ref == REF_KEY) {
		rc = 0;
		pgc_bound_key(back ? &to : &from, c->key, c->klen, !back);
	} else {
		rc = 0;
		pgc_bound_min(&from);
		pgc_bound_inf(&to);
	}
	if (rc != 0) {
		return rc;
	}
	rc = move_inner(base, m, k, key, val);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return rc;
	}
	/* where it ends */
	if (rc == ECHD_ENOTFOUND) {
		if (back) {
			pgc_bound_min(&from);
		} else {
			pgc_bound_inf(&to);
		}
	} else if (bound_at(back ? &from : &to, key->data, key->len, back) != 0) {
		return ECHD_ECORRUPT;
	}
	{
		int nr = need(s, ix, &from, &to, back, c->ahead);

		if (nr != 0) {
			c->failed = true;
			c->on = false;
			c->ref = REF_NONE;
			return nr;
		}
	}
	c->failed = false;
	c->on = rc == 0;
	if (rc == 0) {
		memcpy(c->key, key->data, key->len);
		c->klen = key->len;
		c->ref = REF_KEY;
		if (m == MOVE_SEEK || m == MOVE_SEEK_LAST) {
			int tr = pgc_parts_touch(&s->parts, key->data, key->len);
			if (tr != 0) {
				return tr;
			}
		}
	} else {
		c->ref = back ? REF_BEGIN : REF_END;
	}
	return rc;
}

static void
pg_cursor_ahead(struct storage_cursor *c, unsigned rows)
{
	cursor_from(c)->ahead = rows;
	storage_fwd_cursor_ahead(c, rows);
}

/* ---- transactions ------------------------------------------------------------ */

static int
pg_txn_begin(struct storage *st, struct storage_txn *parent, unsigned flags,
	struct storage_txn **out)
{
	struct st_pg *s = pg_from(st);
	bool top_write = parent == NULL && (flags & STORAGE_TXN_RDONLY) == 0;
	int rc;

	if (top_write && s->role != STORAGE_ROLE_ACTIVE) {
		return s->role == STORAGE_ROLE_STANDBY ? ECHD_ESTANDBY : ECHD_EOFFLINE;
	}
	rc = storage_fwd_txn_begin(st, parent, flags, out);
	if (rc == 0 && top_write) {
		s->nlog = 0;
		s->log_len = 0;
	}
	return rc;
}

/* depth batches are out: t joins the pending batch, sent when one lands
 * (or at once, when one did meanwhile). Returns 0, or -ENOMEM. */
static int
commit_pending(struct st_pg *s, struct storage_txn *t)
{
	size_t nlog = s->nlog;
	int rc;

	rc = storage_fwd_txn_commit(t);
	if (rc == 0) {
		rc = pend_add(s);
		if (rc != 0) {
			/* in the cache, not in the batch: never in PostgreSQL */
			if (s->pend_gen == 0) {
				s->pend_gen = s->fwd.base.commit_gen + 1;
			}
			pend_failed(s, rc);
			s->nlog = 0;
			s->log_len = 0;
			return ECHD_EINDOUBT;
		}
	}
	if (rc != 0) {
		s->nlog = 0;
		s->log_len = 0;
		return rc; /* mem's commit failed (memory): nothing of it anywhere */
	}
	if (s->pend_gen == 0) {
		s->pend_gen = s->fwd.base.commit_gen + 1; /* storage.c gives it that */
	}
	s->commits++;
	if (lazy_committed(s, nlog) != 0) {
		for (int i = 0; i < PG_NLAZY; i++) {
			pgc_spans_clear(&s->spans[i]);
		}
	}
	s->nlog = 0;
	s->log_len = 0;
	if (s->nflight >= s->depth && s->plog_len + s->nplog * sizeof(struct pg_touch) >
						 PG_PEND_MAX) {
		reap(s, s->depth - 1); /* too much waiting: wait for a flight */
	}
	if (s->nflight < s->depth && s->conn != NULL && s->role == STORAGE_ROLE_ACTIVE) {
		(void)send_pending(s); /* a failure: storage_sync() answers it */
	}
	return 0;
}

static int
pg_txn_commit(struct storage_txn *t)
{
	struct st_pg *s = pg_from(t->st);
	bool top_write = t->parent == NULL && !t->rdonly;
	size_t nlog = s->nlog;
	int rc;

	if (!top_write) {
		return storage_fwd_txn_commit(t);
	}
	if (s->nlog == 0) {
		rc = storage_fwd_txn_commit(t); /* nothing to send */
		s->commits += rc == 0;
		return rc;
	}
	fail_forget(s);
	if (s->nflight > 0 && s->conn != NULL) {
		reap(s, s->depth); /* the answers in; a failure there leaves the role */
	}
	if (s->role != STORAGE_ROLE_ACTIVE || s->conn == NULL) {
		storage_fwd_txn_abort(t);
		return s->role == STORAGE_ROLE_STANDBY ? ECHD_ESTANDBY : ECHD_EOFFLINE;
	}
	if (s->depth > 0 && (s->nflight >= s->depth || s->pend_gen != 0)) {
		return commit_pending(s, t);
	}
	rc = build_params(s, storage_fwd_txn_inner(t));
	if (rc == 0) {
		rc = send_batch(s, s->fwd.base.commit_gen + 1, false);
	}
	if (rc == 0) {
		/* more than depth out: wait for the oldest (this one at depth 0) */
		s->uncached_rc = 1;
		reap(s, s->depth);
		rc = s->uncached_rc == 1 ? 0 : s->uncached_rc;
		if (rc == -EIO && s->role == STORAGE_ROLE_STANDBY) {
			rc = ECHD_ESTANDBY; /* skipped: an earlier one failed, the role left */
		}
	}
	s->nlog = 0;
	s->log_len = 0;
	if (rc != 0) {
		storage_fwd_txn_abort(t); /* not applied (or in doubt): not in the cache */
		return rc;
	}
	rc = storage_fwd_txn_commit(t);
	if (rc != 0) {
		/* mem cannot fail a commit but for memory; PostgreSQL has it (or
		 * will), the cache does not: reload it at the next takeover. */
		echd_log(ECHD_LOG_WARNING, "st_pg: cache commit failed after COMMIT: %s",
			echd_strerror(rc));
		s->role = STORAGE_ROLE_STANDBY;
		(void)unlock(s);
		return ECHD_EINDOUBT;
	}
	if (s->nflight > 0) {
		flight_at(s, s->nflight - 1)->cached = true;
	}
	pipe_idle(s); /* depth 0: its answer and the Sync's are in */
	s->commits++;
	rc = lazy_committed(s, nlog);
	if (rc != 0) {
		/* a deleted row could come back with the fetch out: know less */
		echd_log(ECHD_LOG_WARNING, "st_pg: %s: the cache starts over", echd_strerror(rc));
		for (int i = 0; i < PG_NLAZY; i++) {
			pgc_spans_clear(&s->spans[i]);
		}
	}
	return 0;
}

/* ---- writes ------------------------------------------------------------------ */

static int
pg_put(struct storage_txn *t, enum storage_table tb, const struct st_buf *k,
	const struct st_buf *v, unsigned flags)
{
	int rc;

	struct st_pg *s = pg_from(t->st);

	if (v->len > pg_value_max) {
		return -EFBIG; /* PostgreSQL would refuse the whole commit */
	}
	if (lazy_ix(s, tb) >= 0 && k->len >= PGC_KEY_MAX) {
		return ECHD_EINVAL; /* st_pg_cache.h: longer than the spans keep */
	}
	rc = storage_fwd_put(t, tb, k, v, flags);
	if (rc == 0 && !t->rdonly) {
		rc = log_touch(s, tb, k->data, k->len);
	}
	if (rc == 0 && lazy_ix(s, tb) >= 0) {
		rc = pgc_parts_touch(&s->parts, k->data, k->len);
	}
	return rc;
}

static int
pg_del(struct storage_txn *t, enum storage_table tb, const struct st_buf *k)
{
	struct st_pg *s = pg_from(t->st);
	int rc = storage_fwd_del(t, tb, k);

	if (rc == 0 && !t->rdonly) {
		rc = log_touch(s, tb, k->data, k->len);
	}
	if (rc == ECHD_ENOTFOUND && lazy_ix(s, tb) >= 0) {
		struct st_buf v;

		rc = pg_get(t, tb, k, &v); /* not held: is it absent, or not known? */
		if (rc == 0) {
			rc = ECHD_ENOTFOUND; /* not reached: the del found none */
		}
	}
	return rc;
}

/* ---- cursors ----------------------------------------------------------------- */

/* Keeps the key a write txn's cursor stands on, for its cursor_del. */
static int
landed(struct storage_cursor *base, int rc, const struct st_buf *key)
{
	struct pg_cursor *c = cursor_from(base);

	c->on = false;
	if (rc == 0 && !base->txn->rdonly && key->len <= sizeof(c->key)) {
		memcpy(c->key, key->data, key->len);
		c->klen = key->len;
		c->on = true;
	}
	return rc;
}

static bool
is_lazy(struct storage_cursor *c)
{
	return lazy_ix(pg_from(c->txn->st), c->tb) >= 0;
}

static int
pg_cursor_seek(struct storage_cursor *c, const struct st_buf *k, struct st_buf *key,
	struct st_buf *val)
{
	if (is_lazy(c)) {
		return lazy_move(c, MOVE_SEEK, k, key, val);
	}
	return landed(c, storage_fwd_cursor_seek(c, k, key, val), key);
}

static int
pg_cursor_seek_last(struct storage_cursor *c, const struct st_buf *k, struct st_buf *key,
	struct st_buf *val)
{
	if (is_lazy(c)) {
		return lazy_move(c, MOVE_SEEK_LAST, k, key, val);
	}
	return landed(c, storage_fwd_cursor_seek_last(c, k, key, val), key);
}

static int
pg_cursor_next(struct storage_cursor *c, struct st_buf *key, struct st_buf *val)
{
	if (is_lazy(c)) {
		return lazy_move(c, MOVE_NEXT, NULL, key, val);
	}
	return landed(c, storage_fwd_cursor_next(c, key, val), key);
}

static int
pg_cursor_prev(struct storage_cursor *c, struct st_buf *key, struct st_buf *val)
{
	if (is_lazy(c)) {
		return lazy_move(c, MOVE_PREV, NULL, key, val);
	}
	return landed(c, storage_fwd_cursor_prev(c, key, val), key);
}

static int
pg_cursor_del(struct storage_cursor *base)
{
	struct pg_cursor *c = cursor_from(base);
	bool on = c->on;
	int rc;

	rc = storage_fwd_cursor_del(base);
	if (rc == 0 && !base->txn->rdonly) {
		assert(on); /* the inner one deleted a row: the cursor stood on it */
		c->on = false;
		if (on) {
			rc = log_touch(pg_from(base->txn->st), base->tb, c->key, c->klen);
		}
	}
	return rc;
}

static const struct storage_ha_ops pg_ha_ops = {
	.poll = pg_ha_poll,
	.role = pg_ha_role,
	.confirm = pg_ha_confirm,
	.nparts = pg_ha_nparts,
	.part = pg_ha_part,
	.part_move = pg_ha_part_move,
	.nfronts = pg_ha_nfronts,
	.front = pg_ha_front,
};

/* Cursor open and close and the txn abort: the base's, served by the
 * cache; reads of the lazy tables are this file's (lazy_move()). */
const struct storage_ops st_pg_ops = {
	.version = STORAGE_OPS_V2,
	.name = "postgres",
	.base = &storage_fwd_ops,
	.open = pg_open,
	.close = pg_close,
	.txn_begin = pg_txn_begin,
	.txn_commit = pg_txn_commit,
	.get = pg_get,
	.put = pg_put,
	.del = pg_del,
	.cursor_seek = pg_cursor_seek,
	.cursor_seek_last = pg_cursor_seek_last,
	.cursor_next = pg_cursor_next,
	.cursor_prev = pg_cursor_prev,
	.cursor_del = pg_cursor_del,
	.cursor_ahead = pg_cursor_ahead,
	.stat = pg_stat,
	.sync = pg_sync,
	.copy = pg_copy,
	.durable_gen = pg_durable_gen,
	.iface = pg_iface,
};
