/* forward.h - the forwarding base, for engines that wrap another (engine
 * authors only, with storage_impl.h; the broker includes storage.h).
 *
 * A wrapper owns an inner storage and changes a few of its operations:
 * st_fault.c fails chosen ones, st_pg.c keeps a PostgreSQL schema behind
 * an inner "mem" cache, st_fwd.c changes nothing (the tests' proof that the
 * base forwards the whole contract). Its structs begin with this file's,
 * and its struct storage_ops names only the operations it changes (with
 * .base = &storage_fwd_ops, storage.c takes the others from the base);
 * each of those calls the storage_fwd_* one of the same name for the
 * forwarding part.
 *
 * What the base does for each call: a transaction wraps one inner
 * transaction (a child wraps a child of its parent's inner one), a cursor
 * one inner cursor, and each operation goes to the inner storage through
 * the public storage_* functions, so that the inner storage.c keeps its
 * checks too. storage.c ends children and cursors before their
 * transaction, so the base keeps no lists of its own. The optional
 * interfaces are the inner engine's (iface: a capacity or HA call reaches
 * the inner engine directly); stat, sync, copy, cursor_ahead and
 * durable_gen are forwarded (durable_gen only holds while a top-level
 * commit here succeeds exactly when the inner one does: a wrapper that
 * commits otherwise, or swaps its inner storage, sets its own).
 *
 * Intercepting, the ways a wrapper hooks in:
 *  - reads: an own get or cursor move that calls storage_fwd_get() /
 *    storage_fwd_cursor_seek() ... and looks at, or replaces, what came
 *    back; or that reads elsewhere first (storage_fwd_txn_inner() is the
 *    inner transaction, to read or write the inner storage directly);
 *  - writes: an own put/del/cursor_del that checks or records, then
 *    forwards; a write it refuses on purpose can mark the transaction
 *    failed (storage_fwd_txn_fail()), as LMDB fails a transaction after a
 *    failed write: every later call on it returns ECHD_EINVAL, a child is
 *    refused, and its commit aborts it and returns the error;
 *  - commits: an own txn_commit that does its work on the inner
 *    transaction first, then ends with storage_fwd_txn_commit() or, to
 *    drop it, storage_fwd_txn_abort() (both free the wrapper);
 *  - extra state per transaction or cursor: a bigger struct, beginning
 *    with struct storage_fwd_txn / storage_fwd_cursor, whose size is given
 *    to storage_fwd_init(); the base allocates it zeroed.
 * The wrapper may replace fwd->inner while no transaction is open (st_pg.c
 * loads a fresh cache at takeover).
 *
 * Single-threaded, like the storage it wraps.
 */
#ifndef ECHD_STORAGE_FORWARD_H
#define ECHD_STORAGE_FORWARD_H

#include "storage_impl.h"

struct storage_fwd {
	struct storage base;
	struct storage *inner; /* owned: closed by storage_fwd_finish() */
	size_t txn_size;       /* of the wrapper's transaction struct */
	size_t cursor_size;    /* of its cursor struct */
};

struct storage_fwd_txn {
	struct storage_txn base;
	struct storage_txn *inner; /* owned */
	int err;                   /* storage_fwd_txn_fail()'s, 0 while usable */
};

struct storage_fwd_cursor {
	struct storage_cursor base;
	struct storage_cursor *inner; /* owned */
};

/* Sets up f (zeroed by the caller, who allocated the wrapper) for ops:
 * its transactions and cursors are txn_size and cursor_size bytes (at least
 * the base structs'). The wrapper then opens f->inner. */
void storage_fwd_init(struct storage_fwd *f, const struct storage_ops *ops, size_t txn_size,
	size_t cursor_size);
/* Closes f->inner (NULL is fine: a half-open wrapper); frees nothing else. */
void storage_fwd_finish(struct storage_fwd *f);

/* The inner storage and transaction of a wrapper's st and t (borrowed). */
struct storage *storage_fwd_inner(struct storage *st);
struct storage_txn *storage_fwd_txn_inner(struct storage_txn *t);
/* Marks t failed with err (negative): see Intercepting above. */
void storage_fwd_txn_fail(struct storage_txn *t, int err);
/* t's failure: 0 while usable. */
int storage_fwd_txn_err(const struct storage_txn *t);

/* The default operations: each forwards to the inner storage. */
int storage_fwd_txn_begin(struct storage *st, struct storage_txn *parent, unsigned flags,
	struct storage_txn **out);
int storage_fwd_txn_commit(struct storage_txn *t);
void storage_fwd_txn_abort(struct storage_txn *t);
int storage_fwd_get(struct storage_txn *t, enum storage_table tb, const struct st_buf *k,
	struct st_buf *v);
int storage_fwd_put(struct storage_txn *t, enum storage_table tb, const struct st_buf *k,
	const struct st_buf *v, unsigned flags);
int storage_fwd_del(struct storage_txn *t, enum storage_table tb, const struct st_buf *k);
int storage_fwd_cursor_open(struct storage_txn *t, enum storage_table tb,
	struct storage_cursor **out);
void storage_fwd_cursor_close(struct storage_cursor *c);
int storage_fwd_cursor_seek(struct storage_cursor *c, const struct st_buf *k, struct st_buf *key,
	struct st_buf *val);
int storage_fwd_cursor_seek_last(struct storage_cursor *c, const struct st_buf *k,
	struct st_buf *key, struct st_buf *val);
int storage_fwd_cursor_next(struct storage_cursor *c, struct st_buf *key, struct st_buf *val);
int storage_fwd_cursor_prev(struct storage_cursor *c, struct st_buf *key, struct st_buf *val);
int storage_fwd_cursor_del(struct storage_cursor *c);
void storage_fwd_cursor_ahead(struct storage_cursor *c, unsigned rows);
int storage_fwd_stat(struct storage *st, struct storage_stat *out);
int storage_fwd_sync(struct storage *st);
int storage_fwd_copy(struct storage *st, const char *dir);
uint64_t storage_fwd_durable_gen(struct storage *st);
void *storage_fwd_iface(struct storage *st, enum storage_iface which);

/* The base's table: every operation above (name, open and close are the
 * wrapper's). A wrapper's struct storage_ops sets .base = &storage_fwd_ops
 * and names only what it changes; storage.c takes every operation it
 * leaves NULL from here. */
extern const struct storage_ops storage_fwd_ops;

#endif
