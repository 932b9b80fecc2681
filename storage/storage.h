/* storage.h - the storage interface the broker talks to.
 *
 * A small key/value contract over named tables, with nested write
 * transactions, in the spirit of SQLite's VFS: the broker and the data
 * model (stream.h) call these functions; a backend (LMDB by default, or
 * mem, an in-memory tree that keeps the same contract) implements them
 * through struct storage_ops (storage_impl.h).
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
 *  - storage_txn_commit() of a top-level transaction returns 0 only once
 *    the data is durable as the open options ask (see sync_mode).
 *  - storage_grow() must be called with no transaction open.
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
	STORAGE_T__COUNT
};

/* Unstable: STORAGE_SYNC_DATA is LMDB's meta-page scheme, and the broker
 * counts on its shape (commit N is durable once commit N+1 returns). The
 * plan (docs/architecture.md, "Where the contract goes next"): a commit
 * returns its generation, and storage_durable_gen() answers the highest
 * one on stable storage, for any engine's way of flushing. */
enum storage_sync_mode {
	STORAGE_SYNC_FULL, /* commit flushes data and meta page: durable on return */
	STORAGE_SYNC_DATA, /* commit flushes data only; the caller must call
			    * storage_sync() (or commit again) before the commit is durable */
};

struct storage_opts {
	const char *dir;    /* borrowed; must exist */
	uint64_t map_size;  /* initial map size in bytes */
	uint64_t map_max;   /* 0, or the largest map: a larger one recorded is shrunk to it
			     * (never below the data) */
	enum storage_sync_mode sync_mode;
	bool read_only;     /* open for inspection only (echo-admin) */
};

/* Opens the backend named (NULL = default "lmdb"). Borrows o.
 * Returns 0 and *out (owned, free with storage_close()), ECHD_ENOTFOUND for
 * an unknown backend, or a negative error. */
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

struct storage_stat {
	uint64_t map_size;    /* bytes mapped; UINT64_MAX: no map, nothing to fill */
	uint64_t used_bytes;  /* pages in use * page size */
	uint64_t page_size;
	uint64_t last_txn_id;
	uint64_t commits;     /* top-level write commits since open */
	uint64_t syncs;       /* explicit flushes (commits included) since open */
	uint64_t reserve_bytes; /* disk claimed past the used pages: growth into it needs no new space */
	int reserve_error;    /* why claiming more failed (-ENOSPC, ...); 0 once a claim succeeds */
};
int storage_stat(struct storage *st, struct storage_stat *out);

/* Capacity: storage_free_bytes(), storage_grow() and storage_reserve() are
 * about a map of bounded size, and a backend without one leaves them out
 * (0 and nothing done; storage_stat's map_size UINT64_MAX). Planned: these
 * and the broker's headroom logic become an optional part of the
 * interface that the broker asks for before it uses (docs/architecture.md).
 *
 * Bytes of pages on the free list: space inside the map that new writes
 * reuse before they need more of it. Walks the free list: call it only
 * when the map is nearly full. No write transaction may be open. */
int storage_free_bytes(struct storage *st, uint64_t *out);

/* Grows the map (about doubles it) up to max_bytes (0: no limit; a limit
 * per call, so it may change while the storage is open). No transaction
 * may be open. Returns 0, or ECHD_ELIMIT when already at max_bytes. */
int storage_grow(struct storage *st, uint64_t max_bytes);
/* Claims disk space past the data now, as every commit does (the LMDB
 * backend keeps zeroes written past its last page): whether a full file
 * system has room again. No write transaction may be open. Returns 0 or
 * the new reserve_error. */
int storage_reserve(struct storage *st);
/* Flushes everything committed so far to stable storage. */
int storage_sync(struct storage *st);
/* Writes a consistent, compacted copy of the environment into dir (which
 * must exist) and syncs it: the copy is on disk when this returns 0. */
int storage_copy(struct storage *st, const char *dir);

#endif
