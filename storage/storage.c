/* storage.c - the backend registry and the public storage functions, which
 * dispatch through the backend's struct storage_ops. */
#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "echd.h"
#include "storage_impl.h"

#define DEFAULT_BACKEND "lmdb"

/* NULL-terminated; backend_names[] mirrors it (storage_backends() returns
 * it, and a static initializer cannot read ops->name from another file). */
static const struct storage_ops *const backends[] = {
	&st_lmdb_ops,
	&st_fault_ops, /* tests only: lmdb with injected failures */
	NULL,
};
static const char *const backend_names[] = {
	"lmdb",
	"fault",
	NULL,
};
_Static_assert(sizeof(backends) / sizeof(backends[0]) ==
		       sizeof(backend_names) / sizeof(backend_names[0]),
	"backends[] and backend_names[] differ");

const char *const *
storage_backends(void)
{
	return backend_names;
}

int
storage_open(const char *backend, const struct storage_opts *o, struct storage **out)
{
	const struct storage_ops *ops = NULL;
	struct storage *st;
	int rc;

	if (backend == NULL) {
		backend = DEFAULT_BACKEND;
	}
	for (size_t i = 0; backends[i] != NULL; i++) {
		assert(strcmp(backends[i]->name, backend_names[i]) == 0);
		if (strcmp(backends[i]->name, backend) == 0) {
			ops = backends[i];
			break;
		}
	}
	if (ops == NULL || ops->version < STORAGE_OPS_V1) {
		return ECHD_ENOTFOUND;
	}
	rc = ops->open(o, &st);
	if (rc != 0) {
		return rc;
	}
	assert(st->ops == ops);
	*out = st;
	return 0;
}

void
storage_close(struct storage *st)
{
	if (st != NULL) {
		st->ops->close(st);
	}
}

int
storage_txn_begin(struct storage *st, struct storage_txn *parent, unsigned flags,
	struct storage_txn **out)
{
	return st->ops->txn_begin(st, parent, flags, out);
}

int
storage_txn_commit(struct storage_txn *t)
{
	return t->st->ops->txn_commit(t);
}

void
storage_txn_abort(struct storage_txn *t)
{
	if (t != NULL) {
		t->st->ops->txn_abort(t);
	}
}

int
storage_get(struct storage_txn *t, enum storage_table tb, const struct st_buf *k,
	struct st_buf *v)
{
	return t->st->ops->get(t, tb, k, v);
}

int
storage_put(struct storage_txn *t, enum storage_table tb, const struct st_buf *k,
	const struct st_buf *v, unsigned flags)
{
	return t->st->ops->put(t, tb, k, v, flags);
}

int
storage_del(struct storage_txn *t, enum storage_table tb, const struct st_buf *k)
{
	return t->st->ops->del(t, tb, k);
}

int
storage_cursor_open(struct storage_txn *t, enum storage_table tb, struct storage_cursor **out)
{
	return t->st->ops->cursor_open(t, tb, out);
}

void
storage_cursor_close(struct storage_cursor *c)
{
	if (c != NULL) {
		c->txn->st->ops->cursor_close(c);
	}
}

int
storage_cursor_seek(struct storage_cursor *c, const struct st_buf *k, struct st_buf *key,
	struct st_buf *val)
{
	return c->txn->st->ops->cursor_seek(c, k, key, val);
}

int
storage_cursor_seek_last(struct storage_cursor *c, const struct st_buf *k, struct st_buf *key,
	struct st_buf *val)
{
	return c->txn->st->ops->cursor_seek_last(c, k, key, val);
}

int
storage_cursor_next(struct storage_cursor *c, struct st_buf *key, struct st_buf *val)
{
	return c->txn->st->ops->cursor_next(c, key, val);
}

int
storage_cursor_prev(struct storage_cursor *c, struct st_buf *key, struct st_buf *val)
{
	return c->txn->st->ops->cursor_prev(c, key, val);
}

int
storage_cursor_del(struct storage_cursor *c)
{
	return c->txn->st->ops->cursor_del(c);
}

int
storage_stat(struct storage *st, struct storage_stat *out)
{
	return st->ops->stat(st, out);
}

int
storage_grow(struct storage *st, uint64_t max_bytes)
{
	return st->ops->grow(st, max_bytes);
}

int
storage_sync(struct storage *st)
{
	return st->ops->sync(st);
}

int
storage_copy(struct storage *st, const char *dir)
{
	return st->ops->copy(st, dir);
}

int
storage_reserve(struct storage *st)
{
	return st->ops->reserve == NULL ? 0 : st->ops->reserve(st);
}

int
storage_free_bytes(struct storage *st, uint64_t *out)
{
	if (st->ops->free_bytes == NULL) {
		*out = 0;
		return 0;
	}
	return st->ops->free_bytes(st, out);
}
