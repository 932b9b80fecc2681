/* storage.h - the storage interface the broker talks to.
 *
 * A small key/value contract over named tables, with nested write
 * transactions, in the spirit of SQLite's VFS: the broker and the data
 * model (stream.h) call these functions; an engine (LMDB by default, mem,
 * an in-memory tree that keeps the same contract, postgres) implements them
 * through struct storage_ops (storage_impl.h), and an engine that wraps
 * another through the forwarding base (forward.h). This is the core every
 * engine keeps; capacity and HA are optional interfaces (Caveats).
 *
 * Caveats
 *  - One write transaction at a time per storage, and only on the thread
 *    that opened it (the event loop). Nested write transactions are
 *    supported: a child commits into its parent, an aborted child leaves
 *    the parent as it was.
 *  - Values returned by get or by a cursor are borrowed: valid until the
 *    next write in that transaction or the transaction's end.
 *  - Cursors and writes (the rule every backend keeps and every caller
 *    relies on, nothing more): a write to a table in a transaction - a put,
 *    a del, another cursor's cursor_del, or the commit of a child that
 *    wrote it - takes the place of every cursor open on that table in that
 *    transaction. Such a cursor must be re-positioned with seek() or
 *    seek_last() before next(), prev() or cursor_del(); it then sees the
 *    transaction's state at that seek, writes included. Moving it without
 *    the seek is a programmer error (an assert; ECHD_EINVAL when asserts
 *    are off), checked in storage.c for every backend. A cursor's own
 *    cursor_del() keeps its place, and writes to other tables do not touch
 *    it. So an engine need not keep cursors stable under its own writes (a
 *    B-tree may split the node a cursor stands on; SQL re-runs a query).
 *  - Durability is told in generations (below): a top-level commit may
 *    return before it is on stable storage (sync_mode), and the backend
 *    says when it is, with storage_durable_gen().
 *  - A read transaction may be begun while the writer is open, on the same
 *    thread (LMDB allows it with MDB_NOTLS, which st_lmdb.c sets): it sees
 *    the last top-level commit, which may not be durable yet.
 *  - What only some engines have is an optional interface the caller asks
 *    for, never a field every engine fills: capacity (a bounded store:
 *    storage_capacity()), high availability (a store several front ends
 *    share: storage_ha()) and fetching (an engine that holds only part of
 *    its store in memory: storage_fetch()). Each getter returns NULL for an
 *    engine without the interface, and the caller then does without (every
 *    write admitted, never ECHD_EMAPFULL; always active; never
 *    ECHD_EWOULDFETCH). Deferred work (storage_maintain()) is the fourth:
 *    an engine that files later what it wrote. A wrapper may pass on the
 *    interfaces of the engine it wraps (st_fault.c and st_stage.c: lmdb's
 *    capacity).
 *  - "Not here yet": only an engine with the fetch interface, and only once
 *    its caller asked for that by an option (postgres: cache-size), may
 *    answer a get, a del, or a cursor's seek, seek_last, next or prev with
 *    ECHD_EWOULDFETCH (see storage_fetch()). lmdb and mem never do.
 *  - Engine options travel opaque: struct storage_opts carries what every
 *    engine takes (dir, sync mode, read-only) and a list of name/value
 *    strings named "<engine>.<option>"; each engine reads its own, refuses
 *    an unknown name or a malformed value of its own (ECHD_EINVAL, logged),
 *    and leaves the other engines' alone, so that one list can serve
 *    whichever engine is chosen (and a wrapper can hand it on).
 */
#ifndef ECHD_STORAGE_STORAGE_H
#define ECHD_STORAGE_STORAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct storage;
struct storage_txn;
struct storage_cursor;

struct st_buf {
	const void *data;
	size_t len;
};

/* The tables; layout of their keys and values is the data model's (stream.c). */
enum storage_table {
	STORAGE_T_META,      /* global counters (next internal id, ...) */
	STORAGE_T_KEYS,      /* db + name -> stream metadata */
	STORAGE_T_ENTRIES,   /* stream id + ms + seq -> fields */
	STORAGE_T_NODES,     /* stream id + first id -> node bookkeeping (~ trimming) */
	STORAGE_T_GROUPS,    /* stream id + group name -> group record */
	STORAGE_T_CONSUMERS, /* group id + consumer name -> consumer id */
	STORAGE_T_CONSREC,   /* group id + consumer id -> consumer record */
	STORAGE_T_PEL,       /* group id + ms + seq -> owner, delivery time, count */
	STORAGE_T_CPEL,      /* group id + consumer id + ms + seq -> (empty) */
	STORAGE_T_BYID,      /* db + stream id -> name (SCAN order, stable cursors) */
	STORAGE_T_TRASH,     /* stream ids whose rows are still being deleted */
	STORAGE_T_EXPIRES,   /* expiry ms + db + stream id -> (empty), for active expiry */
	STORAGE_T_IDMP,      /* stream id + ... -> idempotent producers' records (stream_idmp.c) */
	STORAGE_T_DUE,       /* group id + kind + deadline + ms + seq -> (empty): policy deadlines */
	STORAGE_T__COUNT
};

/* How soon a top-level commit must be durable. Either way the backend
 * reports what is durable through storage_durable_gen(). */
enum storage_sync_mode {
	STORAGE_SYNC_FULL, /* each commit is durable when it returns */
	STORAGE_SYNC_DATA, /* a commit may return before it is durable (LMDB: its
			    * meta page is written, not flushed); storage_sync()
			    * makes every commit durable */
};

/* One engine option: name is "<engine>.<option>" ("lmdb.map-size",
 * "postgres.url"); value is a string (numbers in decimal). Both borrowed. */
struct storage_opt {
	const char *name;
	const char *value;
};

struct storage_opts {
	const char *dir;    /* borrowed; must exist */
	enum storage_sync_mode sync_mode;
	bool read_only;     /* open for inspection only (echo-admin) */
	/* The engines' own options (borrowed, nopt of them), each read by the
	 * engine its name begins with; see Caveats. lmdb: map-size (the map's
	 * initial size in bytes), map-max (0, or the largest map: a larger one
	 * recorded is shrunk to it, never below the data). postgres: url (a
	 * libpq URI or key=value string), schema ("echd"), ha-name ("echd"),
	 * announce-host and announce-port (this front end's address for
	 * clients), timeout-ms (a longer round trip is a lost connection),
	 * cache-size (bytes of entries held in memory; 0: the whole schema),
	 * shards ("" or "first-last,first-last,...": the store cut into
	 * parts, schema <schema>_s<i> for the i-th, a range of the caller's
	 * each, kept in <schema>.shards; storage_ha_nparts()), node (this
	 * front end's name in each part's ha row, as other front ends read it),
	 * node-timeout-ms (a front end not heard from this long is not listed
	 * by storage_ha_front()).
	 * lmdb-staged: lmdb's, and stage-size (the staging table's bound in
	 * bytes). lmdb.stage-owner (0 or 1) is for lmdb-staged alone, opening
	 * its lmdb: it reads the staging table itself (without it, lmdb refuses
	 * to open for writing a directory holding staged rows it would not
	 * see). */
	const struct storage_opt *opt;
	size_t nopt;
};

/* Opens the backend named (NULL = default "lmdb"). Borrows o.
 * Returns 0 and *out (owned, free with storage_close()), ECHD_ENOTFOUND for
 * an unknown backend, ECHD_EINVAL for an option that names no engine, that
 * the engine does not know or whose value it refuses (logged), or another
 * negative error. */
int storage_open(const char *backend, const struct storage_opts *o, struct storage **out);
/* Closes; aborts nothing (every transaction must be finished). NULL is a no-op. */
void storage_close(struct storage *st);
/* Names of the compiled-in backends, NULL-terminated; borrowed static. */
const char *const *storage_backends(void);

#define STORAGE_TXN_RDONLY 0x1u

/* Begins a transaction, nested in parent when parent is not NULL (a write
 * transaction only). Returns 0 and *out, or a negative error. */
int storage_txn_begin(struct storage *st, struct storage_txn *parent, unsigned flags,
	struct storage_txn **out);
/* Commits and frees t (even on failure). Returns 0, ECHD_EMAPFULL, -EIO, -ENOSPC ... */
int storage_txn_commit(struct storage_txn *t);
/* The same, and for a top-level write transaction that commits writes
 * *gen with the generation it got (0 for a nested or read one). */
int storage_txn_commit_gen(struct storage_txn *t, uint64_t *gen);
/* Rows t has written so far (successful puts, dels and cursor_dels, those
 * of its committed children included), counted by storage.c for every
 * backend: 0 means committing t would change nothing. */
uint64_t storage_txn_writes(const struct storage_txn *t);
/* Aborts and frees t; NULL is a no-op. */
void storage_txn_abort(struct storage_txn *t);

/* Returns 0 with *v borrowed, or ECHD_ENOTFOUND. */
int storage_get(struct storage_txn *t, enum storage_table tb, const struct st_buf *k,
	struct st_buf *v);
/* Keys are 1 to STORAGE_KEY_MAX bytes (LMDB's limit, kept by every
 * backend so that data can move between them); put refuses others with
 * ECHD_EINVAL. Keys sort by memcmp(), a shorter key first on a tie. */
#define STORAGE_KEY_MAX 511
#define STORAGE_PUT_APPEND 0x1u /* k sorts after every key in the table (fast path) */
/* Borrows k and v (copied). Returns 0, ECHD_EMAPFULL, or a negative error. */
int storage_put(struct storage_txn *t, enum storage_table tb, const struct st_buf *k,
	const struct st_buf *v, unsigned flags);
/* Returns 0 or ECHD_ENOTFOUND. */
int storage_del(struct storage_txn *t, enum storage_table tb, const struct st_buf *k);

/* Cursors are valid until closed or their transaction ends; see Caveats for
 * what a write to their table does to them. A new cursor stands nowhere:
 * next() returns the first row, prev() the last. A seek or move that finds
 * nothing leaves it past that end (a forward miss: next() finds nothing,
 * prev() returns the last row; a backward miss the other way round). */
int storage_cursor_open(struct storage_txn *t, enum storage_table tb,
	struct storage_cursor **out);
void storage_cursor_close(struct storage_cursor *c);
/* Positions at the first key >= k (k NULL: the first key). Returns 0 with
 * *key and *val borrowed, or ECHD_ENOTFOUND when there is none. */
int storage_cursor_seek(struct storage_cursor *c, const struct st_buf *k, struct st_buf *key,
	struct st_buf *val);
/* Positions at the last key (k NULL) or the last key <= k. */
int storage_cursor_seek_last(struct storage_cursor *c, const struct st_buf *k,
	struct st_buf *key, struct st_buf *val);
int storage_cursor_next(struct storage_cursor *c, struct st_buf *key, struct st_buf *val);
int storage_cursor_prev(struct storage_cursor *c, struct st_buf *key, struct st_buf *val);
/* Deletes the current row; the cursor then stands so that next() returns
 * the row after it. */
int storage_cursor_del(struct storage_cursor *c);
/* A hint: the caller means to read about rows rows in a row with next()
 * (or prev()) after its seeks. A backend may fetch them in batches (the
 * mem backend collects them in one walk of its tree; a SQL engine would
 * use a LIMIT; LMDB reads pages and ignores it). Rows read ahead go with
 * the cursor's place at a write to its table (Caveats), so a caller sees
 * nothing it would not have seen without the hint. 0 or 1: no batches. */
void storage_cursor_ahead(struct storage_cursor *c, unsigned rows);

/* Durability, in generations. Each top-level write transaction that
 * commits gets the next generation: 1, 2, ... from the open (storage.c
 * counts them, for every backend), so the open writer, if it commits, gets
 * storage_commit_gen() + 1. The backend tells which are durable:
 * storage_durable_gen() is the highest generation G such that every
 * commit up to G is on stable storage, never more than storage_commit_gen()
 * and never lower than before. With STORAGE_SYNC_FULL it equals
 * storage_commit_gen() after every commit; with STORAGE_SYNC_DATA it may
 * lag (LMDB: commit N is durable once commit N+1's flush returns, as that
 * flush also carries N's meta page; a write-ahead log would report a group
 * at once), and storage_sync() brings it to storage_commit_gen(). A caller
 * that must not acknowledge before durable holds its answer to a commit of
 * generation G until storage_durable_gen() >= G, and calls storage_sync()
 * when no later commit is coming. Call it after a commit or a sync: the
 * value changes only then, or at storage_inflight_poll(). */
uint64_t storage_commit_gen(const struct storage *st);
uint64_t storage_durable_gen(struct storage *st);

/* Commits in flight: an optional interface, of an engine whose commits
 * become durable in the background (postgres with pipeline-depth > 0: a
 * commit returns once sent, its answer read later). Returns it (borrowed:
 * valid until storage_close(st)), or NULL when every commit is durable, or
 * known not to be, when it returns or at storage_sync(). */
struct storage_inflight;
struct storage_inflight *storage_inflight(struct storage *st);
/* Reads, without blocking, the answers that have come in, after which
 * storage_durable_gen() may be higher. *fd: a socket to watch for reading
 * while commits are out (-1: none now; storage_sync() is then the way).
 * Returns 0, or the failure of a commit that returned 0: the caller calls
 * storage_sync(), which answers it, and closes the clients that waited for
 * a generation it never reached. */
int storage_inflight_poll(struct storage_inflight *f, int *fd);

struct storage_stat {
	uint64_t commits;     /* top-level write commits since open */
	uint64_t syncs;       /* explicit flushes (commits included) since open */
	uint64_t last_txn_id; /* the backend's own commit counter (LMDB's txn id), 0 if none */
	uint64_t used_bytes;  /* bytes the data take (LMDB: pages in use, free ones inside
			       * included; mem: keys and values) */
	uint64_t rows;        /* rows held, when the engine counts them (mem; postgres: its
			       * cache's); 0 otherwise */
};
int storage_stat(struct storage *st, struct storage_stat *out);

/* Capacity: an optional interface. An engine whose store is bounded (LMDB's
 * map, a quota) keeps the policy of room behind it; one without (mem,
 * postgres) has none, admits every write and never reports ECHD_EMAPFULL.
 * Returns the interface (borrowed: valid until storage_close(st)), or NULL
 * when st has none. */
struct storage_capacity;
struct storage_capacity *storage_capacity(struct storage *st);

/* storage_capacity_admit() asks, between write transactions, whether
 * writes that add data may run until it is asked again; the engine may make
 * room first (LMDB grows its map while a quarter of it is free). max_bytes
 * is the limit in force (0: none), passed on each call because it may
 * change while the storage is open. The answer: */
struct storage_room {
	bool adds_ok;  /* writes that add data may run; when not, only writes
			* that free space should (they run in a reserve kept for them) */
	bool nest;     /* room is short: run each write in its own nested
			* transaction, so that one that does not fit fails alone */
	int full_rc;   /* !adds_ok: why: ECHD_ELIMIT (max_bytes reached), or the
			* file system's -ENOSPC or -EDQUOT */
	bool fs_full;  /* the file system, not max_bytes, is what is full */
	bool grew;     /* the store was grown to make room */
};
/* No transaction may be open. Returns 0 and *out, or a negative error
 * (*out untouched: the caller keeps its last answer). */
int storage_capacity_admit(struct storage_capacity *cap, uint64_t max_bytes,
	struct storage_room *out);
/* Makes room after a write or commit failed with ECHD_EMAPFULL (LMDB: about
 * doubles the map) up to max_bytes (0: no limit). No transaction may be
 * open. Returns 0 (retry the write), or ECHD_ELIMIT when already at
 * max_bytes, -EBUSY, -EROFS ... */
int storage_capacity_grow(struct storage_capacity *cap, uint64_t max_bytes);
struct storage_capacity_stat {
	uint64_t map_size;      /* bytes the store may hold now (LMDB's map) */
	uint64_t page_size;     /* the unit of allocation */
	uint64_t reserve_bytes; /* disk claimed past the used pages: growth into it needs no new space */
	int reserve_error;      /* why claiming more failed (-ENOSPC, ...); 0 once a claim succeeds */
};
int storage_capacity_stat(struct storage_capacity *cap, struct storage_capacity_stat *out);
/* The primitives storage_capacity_admit() works with, for tests and tools
 * (the broker asks storage_capacity_admit()). No write transaction may be
 * open.
 * storage_capacity_free_bytes(): bytes of free pages inside the store,
 * which new writes reuse before they need more of it (LMDB walks its free
 * list: call it only when the store is nearly full).
 * storage_capacity_reserve(): claims disk space past the data now, as
 * every commit does (LMDB keeps zeroes written past its last page): whether
 * a full file system has room again. Returns 0 or the new reserve_error. */
int storage_capacity_free_bytes(struct storage_capacity *cap, uint64_t *out);
int storage_capacity_reserve(struct storage_capacity *cap);

/* High availability: an optional interface, of a store that several echd
 * front ends share (postgres). Exactly one front end is active: it may
 * begin write transactions and reads state it loaded when it became
 * active. The others are standbys: a write transaction fails with
 * ECHD_ESTANDBY, a read one sees nothing they should serve. An engine
 * without this interface is always active. Returns it (borrowed: valid
 * until storage_close(st)), or NULL when st has none.
 *
 * The role changes in storage_ha_poll(), and at a failed commit: a commit
 * refused because another front end took over (fencing) fails with
 * ECHD_ESTANDBY, one that lost the connection before COMMIT was sent with
 * ECHD_EOFFLINE (nothing applied), one that lost it during COMMIT with
 * ECHD_EINDOUBT (applied or not: the caller must not acknowledge, nor
 * deny); after each the front end is no longer active, and the next polls
 * reconnect (with back-off) and try to become active again. */
struct storage_ha;
struct storage_ha *storage_ha(struct storage *st);

enum storage_role {
	STORAGE_ROLE_ACTIVE,  /* holds the store: serves and writes */
	STORAGE_ROLE_STANDBY, /* connected; another front end is active */
	STORAGE_ROLE_OFFLINE, /* not connected to the store: reconnecting */
};
struct storage_ha_state {
	enum storage_role role;
	bool became_active; /* this poll made it active: state was read fresh, so
			     * the caller drops whatever it derived from the old */
	uint64_t gen;       /* the active front end's generation: +1 per takeover */
	char active_host[256]; /* the active front end's announced address ("" unknown) */
	int active_port;
	char why[256];      /* OFFLINE: the last connection error */
	int part;           /* ACTIVE on a store of parts: the part held (below); else -1 */
};
/* The role as of the last poll or commit; no round trip. */
enum storage_role storage_ha_role(const struct storage_ha *ha);
/* Called every ha-retry-ms with no write transaction open: reconnects when
 * offline (not more often than its back-off allows), tries to become
 * active when standby, checks the store is still held when active, and
 * reads the active front end's address. Returns 0 and *out, or a negative
 * error (then *out still says the role). */
int storage_ha_poll(struct storage_ha *ha, struct storage_ha_state *out);
/* Before answering reads from what it loaded: whether this front end is
 * still known to be the active one. The engine may need a round trip for
 * that (postgres: when its session was last heard of longer ago than its
 * lease), which may change the role. Returns 0 (active), ECHD_ESTANDBY,
 * ECHD_EOFFLINE, or another error (nothing known). No write transaction
 * need be closed. */
int storage_ha_confirm(struct storage_ha *ha);

/* A store cut into parts (postgres with postgres.shards: a schema each),
 * each with its own active front end (lock and fence), a front end holding
 * at most one. A standby tries each free part in turn; storage_ha_state's
 * part says which one it holds. What the last poll read of part i (<
 * storage_ha_nparts(ha); 0: a store of one piece, then none of this
 * applies): whether a front end is active on it, and that front end's
 * node (postgres.node), address and generation. Returns 0 with *out, or
 * -EINVAL (no part i). No round trip. */
struct storage_ha_part {
	bool held;        /* a front end is active on it (this one included) */
	uint64_t gen;     /* its generation: +1 per takeover */
	char node[64];    /* the active front end's node ("" unknown) */
	char host[256];   /* its announced address ("" unknown) */
	int port;
	char name[64];    /* the part's own name (postgres: its schema) */
	unsigned first, last; /* the range of keys the caller gave it */
	/* where it lives (postgres: its PostgreSQL's URL, password redacted),
	 * and whether that is the store's own (postgres.url) */
	char server[256];
	bool home;
	/* that server's own standbys (postgres: pg_stat_replication, read by a
	 * read_only open of the map only, else 0 and -1): how many stream
	 * from it, how many of them synchronously, and the largest lag of one,
	 * in bytes of WAL not yet replayed and in ms (replay_lag); -1: not
	 * known (none, or a role that may not see them) */
	int replicas, sync_replicas;
	int64_t lag_bytes, lag_ms;
};
size_t storage_ha_nparts(const struct storage_ha *ha);
int storage_ha_part(const struct storage_ha *ha, size_t i, struct storage_ha_part *out);

/* Puts part i on another server (postgres: the url of its row in
 * <schema>.shards; NULL or "": back on the store's own), from a read_only
 * open of the map (postgres.shards "map"). Front ends follow at their next
 * poll; nothing moves data. Refused: -EBUSY while a front end holds the
 * part, -ENOTEMPTY when its schema holds rows where it lives now,
 * ECHD_EOFFLINE when its server or the new one cannot be reached, -EINVAL
 * (no part i), -ENOTSUP (no such open). why (len bytes) says which, for a
 * person. One round trip or a few per server. */
int storage_ha_part_move(struct storage_ha *ha, size_t i, const char *url, char *why,
	size_t len);

/* The front ends of a store of parts as the last poll read them from the
 * store's registry (postgres: <schema>.frontends), where each front end
 * writes its row at every poll, with the time by the store's clock: every
 * front end heard from within the engine's bound (postgres.node-timeout-ms),
 * in node order, this one's own row left out; a read_only open lists every
 * row, with its age. Returns 0 with *out, or -EINVAL (no front end i). No
 * round trip. nfronts is 0 for an engine without a registry. */
struct storage_ha_front {
	char node[64];   /* its node (postgres.node) */
	char host[256];  /* its announced address */
	int port;
	int part;        /* the part it is active on; -1: a standby */
	uint64_t age_ms; /* since its last poll wrote the row */
};
size_t storage_ha_nfronts(const struct storage_ha *ha);
int storage_ha_front(const struct storage_ha *ha, size_t i, struct storage_ha_front *out);

/* Fetching: an optional interface, of an engine that keeps a bounded part
 * of its store in memory and reads the rest when it is needed, without
 * blocking the thread that asked (postgres with postgres.cache-size: the
 * entries and nodes tables are read by range from PostgreSQL). Returns it
 * (borrowed: valid until storage_close(st)), or NULL when st has none or
 * holds its whole store (then nothing is ever fetched).
 *
 * The rule. A get, a del, or a cursor seek, seek_last, next or prev that
 * needs rows the engine does not hold answers ECHD_EWOULDFETCH: the engine
 * has queued a fetch of those rows (and of rows near them). Nothing it
 * returned before in that transaction was wrong, but what the caller did
 * since it began the work at hand must be undone (abort the nested
 * transaction it ran in: a read may fail half-way through a write) and
 * the work run again once a fetch landed: storage_fetch_poll()'s landed
 * changed. The cursor that answered it stands nowhere (seek again). A row
 * fetched stays until evicted, which happens only inside
 * storage_fetch_poll(), so the run after a landing usually finds its rows;
 * one that misses again waits again.
 *
 * The caller's loop: watch fd (readable, and writable when want_write)
 * while busy, and call storage_fetch_poll() with no write transaction open
 * after the fd fires, at the end of each turn, and at least every
 * poll_ms while busy (a fetch that takes too long fails there). */
struct storage_fetch;
struct storage_fetch *storage_fetch(struct storage *st);

struct storage_fetch_state {
	int fd;            /* the socket to watch (-1: none now); it may change */
	bool want_write;   /* a request is not all sent: watch fd for writing too */
	bool busy;         /* fetches queued or in flight */
	unsigned poll_ms;  /* while busy, poll again within this many ms */
	uint64_t landed;   /* fetches ended since open (landed, or failed: the
			    * run again then fails with the error); a change
			    * means: run again what waited */
	uint64_t misses;   /* ECHD_EWOULDFETCH answers since open */
	uint64_t fetched_rows; /* rows read from the store since open */
	uint64_t evicted_rows; /* rows dropped from memory since open */
	uint64_t cache_bytes;  /* the memory the rows held take (estimated) */
	uint64_t cache_max;    /* what they may take before eviction */
};
/* Reads what arrived and puts those rows in memory, evicts down to the
 * limit, and sends what is queued. No write transaction may be open. An
 * engine may do the putting and the evicting in bounded steps, one a poll,
 * so as not to stall the loop: then it answers busy with poll_ms 0 until
 * done (a fetch has landed once all its rows are in).
 * Returns 0 and *out, or a negative error (*out still filled). */
int storage_fetch_poll(struct storage_fetch *f, struct storage_fetch_state *out);
/* The misses so far (storage_fetch_state.misses), without any I/O: a
 * caller that compares it before and after some work knows whether the
 * work met a miss, even one a caller below it did not pass on. */
uint64_t storage_fetch_misses(const struct storage_fetch *f);

/* Deferred work: an optional interface, of an engine that writes now and
 * files later (lmdb-staged appends a batch's rows in arrival order and
 * moves them to their tables afterwards, sorted and in bulk). Returns it
 * (borrowed: valid until storage_close(st)), or NULL when st has none:
 * then there is nothing to run, count or check.
 *
 * storage_maintain_due() tells whether a step is wanted now: always once
 * the deferred work passes the engine's mark, and whenever there is any
 * when idle (the caller has had nothing else to do for a while). Never on
 * a read-only storage. No transaction need be closed.
 *
 * storage_maintain_step() does one step, bounded so that it adds little to
 * a batch's latency (more while the engine is full: its back-pressure),
 * inside t: a write transaction of the storage the interface came from,
 * with no child or cursor open, and at most one step per top-level
 * transaction (the broker runs it in a child of its batch, so that one
 * commit, one flush, carries both, and a failed step costs the step
 * alone). Its rows count as writes of t; what t reads does not change.
 * *more is set when another step is due at once. Returns 0, ECHD_EINVAL
 * for a t that is not such a transaction, or a write's error (ECHD_EMAPFULL
 * when the store has no room: t should then be aborted). */
struct storage_maintain;
struct storage_maintain *storage_maintain(struct storage *st);
bool storage_maintain_due(struct storage_maintain *m, bool idle);
int storage_maintain_step(struct storage_maintain *m, struct storage_txn *t, bool idle,
	bool *more);

/* The deferred work's figures (lmdb-staged: its staging table). */
struct storage_maintain_stat {
	uint64_t rows;   /* rows written and not yet filed (staged records) */
	uint64_t bytes;  /* their bytes, as counted against bound */
	uint64_t bound;  /* what they may take (lmdb-staged.stage-size) */
	uint64_t filed;  /* rows filed since open */
	uint64_t rounds; /* rounds of filing finished since open (epochs) */
};
int storage_maintain_stat(struct storage_maintain *m, struct storage_maintain_stat *out);

/* Checks the engine's own structures as t (a transaction of the storage the
 * interface came from, read-only is fine) sees them, for echo-admin check:
 * lmdb-staged: every staged record decodes, and the in-memory overlay holds
 * exactly the newest staged version of each staged row. Calls problem
 * (borrowed; msg borrowed for the call) once per problem and sets *rows to
 * the rows looked at. Returns 0 (problems found or not), or a read's
 * error. */
typedef void (*storage_problem_fn)(void *ud, const char *msg);
int storage_maintain_verify(struct storage_maintain *m, struct storage_txn *t,
	storage_problem_fn problem, void *ud, uint64_t *rows);

/* Flushes everything committed so far to stable storage. */
int storage_sync(struct storage *st);
/* Writes a consistent, compacted copy of the environment into dir (which
 * must exist) and syncs it: the copy is on disk when this returns 0. */
int storage_copy(struct storage *st, const char *dir);

#endif
