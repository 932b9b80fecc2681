/* forward.c - the forwarding base of forward.h: transactions and cursors
 * that wrap the inner storage's, and the default operations, each handing
 * its call on through the public storage_* functions. What a wrapper
 * changes is in its own file (st_fault.c, st_pg.c); st_fwd.c changes
 * nothing. */
#include <assert.h>
#include <errno.h>
#include <string.h>

#include "echd.h"
#include "forward.h"

static struct storage_fwd *
fwd_from(struct storage *st)
{
	assert(st->ops->base == &storage_fwd_ops);
	return (struct storage_fwd *)st;
}

static struct storage_fwd_txn *
txn_from(struct storage_txn *t)
{
	assert(t->st->ops->base == &storage_fwd_ops);
	return (struct storage_fwd_txn *)t;
}

static const struct storage_fwd_txn *
txn_from_const(const struct storage_txn *t)
{
	assert(t->st->ops->base == &storage_fwd_ops);
	return (const struct storage_fwd_txn *)t;
}

static struct storage_fwd_cursor *
cursor_from(struct storage_cursor *c)
{
	assert(c->txn->st->ops->base == &storage_fwd_ops);
	return (struct storage_fwd_cursor *)c;
}

/* c's inner cursor, or NULL when its transaction failed. */
static struct storage_cursor *
live(struct storage_cursor *c)
{
	return txn_from(c->txn)->err != 0 ? NULL : cursor_from(c)->inner;
}

void
storage_fwd_init(struct storage_fwd *f, const struct storage_ops *ops, size_t txn_size,
	size_t cursor_size)
{
	assert(ops->base == &storage_fwd_ops);
	assert(txn_size >= sizeof(struct storage_fwd_txn));
	assert(cursor_size >= sizeof(struct storage_fwd_cursor));
	f->base.ops = ops;
	f->inner = NULL;
	f->txn_size = txn_size;
	f->cursor_size = cursor_size;
}

void
storage_fwd_finish(struct storage_fwd *f)
{
	storage_close(f->inner);
	f->inner = NULL;
}

struct storage *
storage_fwd_inner(struct storage *st)
{
	return fwd_from(st)->inner;
}

struct storage_txn *
storage_fwd_txn_inner(struct storage_txn *t)
{
	return txn_from(t)->inner;
}

void
storage_fwd_txn_fail(struct storage_txn *t, int err)
{
	assert(err < 0);
	txn_from(t)->err = err;
}

int
storage_fwd_txn_err(const struct storage_txn *t)
{
	return txn_from_const(t)->err;
}

/* ---- transactions ------------------------------------------------------- */

int
storage_fwd_txn_begin(struct storage *st, struct storage_txn *parent, unsigned flags,
	struct storage_txn **out)
{
	struct storage_fwd *f = fwd_from(st);
	struct storage_fwd_txn *p = parent != NULL ? txn_from(parent) : NULL;
	struct storage_fwd_txn *t;
	int rc;

	if (p != NULL && p->err != 0) {
		return ECHD_EINVAL; /* LMDB: MDB_BAD_TXN */
	}
	t = echd_calloc(1, f->txn_size);
	if (t == NULL) {
		return -ENOMEM;
	}
	rc = storage_txn_begin(f->inner, p != NULL ? p->inner : NULL, flags, &t->inner);
	if (rc != 0) {
		echd_free(t);
		return rc;
	}
	t->base.st = st;
	*out = &t->base;
	return 0;
}

int
storage_fwd_txn_commit(struct storage_txn *base)
{
	struct storage_fwd_txn *t = txn_from(base);
	struct storage_txn *inner = t->inner;
	int err = t->err;

	echd_free(t);
	if (err != 0) {
		storage_txn_abort(inner);
		return err;
	}
	return storage_txn_commit(inner); /* frees inner, committed or not */
}

void
storage_fwd_txn_abort(struct storage_txn *base)
{
	struct storage_fwd_txn *t = txn_from(base);

	storage_txn_abort(t->inner);
	echd_free(t);
}

/* ---- rows ---------------------------------------------------------------- */

int
storage_fwd_get(struct storage_txn *base, enum storage_table tb, const struct st_buf *k,
	struct st_buf *v)
{
	struct storage_fwd_txn *t = txn_from(base);

	return t->err != 0 ? ECHD_EINVAL : storage_get(t->inner, tb, k, v);
}

int
storage_fwd_put(struct storage_txn *base, enum storage_table tb, const struct st_buf *k,
	const struct st_buf *v, unsigned flags)
{
	struct storage_fwd_txn *t = txn_from(base);

	return t->err != 0 ? ECHD_EINVAL : storage_put(t->inner, tb, k, v, flags);
}

int
storage_fwd_del(struct storage_txn *base, enum storage_table tb, const struct st_buf *k)
{
	struct storage_fwd_txn *t = txn_from(base);

	return t->err != 0 ? ECHD_EINVAL : storage_del(t->inner, tb, k);
}

/* ---- cursors -------------------------------------------------------------- */

int
storage_fwd_cursor_open(struct storage_txn *base, enum storage_table tb,
	struct storage_cursor **out)
{
	struct storage_fwd_txn *t = txn_from(base);
	struct storage_fwd_cursor *c;
	int rc;

	if (t->err != 0) {
		return ECHD_EINVAL;
	}
	c = echd_calloc(1, fwd_from(base->st)->cursor_size);
	if (c == NULL) {
		return -ENOMEM;
	}
	rc = storage_cursor_open(t->inner, tb, &c->inner);
	if (rc != 0) {
		echd_free(c);
		return rc;
	}
	c->base.txn = base;
	*out = &c->base;
	return 0;
}

void
storage_fwd_cursor_close(struct storage_cursor *base)
{
	struct storage_fwd_cursor *c = cursor_from(base);

	storage_cursor_close(c->inner);
	echd_free(c);
}

int
storage_fwd_cursor_seek(struct storage_cursor *base, const struct st_buf *k, struct st_buf *key,
	struct st_buf *val)
{
	struct storage_cursor *in = live(base);

	return in == NULL ? ECHD_EINVAL : storage_cursor_seek(in, k, key, val);
}

int
storage_fwd_cursor_seek_last(struct storage_cursor *base, const struct st_buf *k,
	struct st_buf *key, struct st_buf *val)
{
	struct storage_cursor *in = live(base);

	return in == NULL ? ECHD_EINVAL : storage_cursor_seek_last(in, k, key, val);
}

int
storage_fwd_cursor_next(struct storage_cursor *base, struct st_buf *key, struct st_buf *val)
{
	struct storage_cursor *in = live(base);

	return in == NULL ? ECHD_EINVAL : storage_cursor_next(in, key, val);
}

int
storage_fwd_cursor_prev(struct storage_cursor *base, struct st_buf *key, struct st_buf *val)
{
	struct storage_cursor *in = live(base);

	return in == NULL ? ECHD_EINVAL : storage_cursor_prev(in, key, val);
}

int
storage_fwd_cursor_del(struct storage_cursor *base)
{
	struct storage_cursor *in = live(base);

	return in == NULL ? ECHD_EINVAL : storage_cursor_del(in);
}

void
storage_fwd_cursor_ahead(struct storage_cursor *base, unsigned rows)
{
	storage_cursor_ahead(cursor_from(base)->inner, rows);
}

/* ---- the storage ------------------------------------------------------------ */

int
storage_fwd_stat(struct storage *st, struct storage_stat *out)
{
	return storage_stat(fwd_from(st)->inner, out);
}

int
storage_fwd_sync(struct storage *st)
{
	return storage_sync(fwd_from(st)->inner);
}

int
storage_fwd_copy(struct storage *st, const char *dir)
{
	return storage_copy(fwd_from(st)->inner, dir);
}

uint64_t
storage_fwd_durable_gen(struct storage *st)
{
	return storage_durable_gen(fwd_from(st)->inner);
}

void *
storage_fwd_iface(struct storage *st, enum storage_iface which)
{
	return storage_iface(fwd_from(st)->inner, which);
}

const struct storage_ops storage_fwd_ops = {
	.version = STORAGE_OPS_V2,
	.name = NULL, /* a base, not an engine: never in the registry */
	.txn_begin = storage_fwd_txn_begin,
	.txn_commit = storage_fwd_txn_commit,
	.txn_abort = storage_fwd_txn_abort,
	.get = storage_fwd_get,
	.put = storage_fwd_put,
	.del = storage_fwd_del,
	.cursor_open = storage_fwd_cursor_open,
	.cursor_close = storage_fwd_cursor_close,
	.cursor_seek = storage_fwd_cursor_seek,
	.cursor_seek_last = storage_fwd_cursor_seek_last,
	.cursor_next = storage_fwd_cursor_next,
	.cursor_prev = storage_fwd_cursor_prev,
	.cursor_del = storage_fwd_cursor_del,
	.stat = storage_fwd_stat,
	.sync = storage_fwd_sync,
	.copy = storage_fwd_copy,
	.cursor_ahead = storage_fwd_cursor_ahead,
	.durable_gen = storage_fwd_durable_gen,
	.iface = storage_fwd_iface,
};
