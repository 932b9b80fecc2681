/* storage.c - the backend registry and the public storage functions, which
 * dispatch through the backend's struct storage_ops, and what every backend
 * shares on the way: the checks of txn_begin and of writes, nested
 * transactions ended child first, open cursors closed at their
 * transaction's end, the write counts (storage_txn_writes()), the commit
 * generations and the cursor-versus-write rule of storage.h. */
#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "echd.h"
#include "storage_impl.h"

#define DEFAULT_BACKEND "lmdb"
/* storage_cursor.seen before the cursor's first seek. */
#define CURSOR_UNSET UINT64_MAX

/* NULL-terminated; backend_names[] mirrors it (storage_backends() returns
 * it, and a static initializer cannot read ops->name from another file). */
static const struct storage_ops *const backends[] = {
	&st_lmdb_ops,
	&st_fault_ops, /* tests only: lmdb with injected failures */
	&st_mem_ops,   /* in memory: the contract kept without LMDB */
	&st_pg_ops,    /* PostgreSQL: a store several front ends share */
	NULL,
};
static const char *const backend_names[] = {
	"lmdb",
	"fault",
	"mem",
	"postgres",
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
	st->read_only = o->read_only;
	st->writer = NULL;
	st->commit_gen = 0;
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

/* Closes the cursors t left open, before t ends. */
static void
cursors_close(struct storage_txn *t)
{
	while (t->cursors != NULL) {
		storage_cursor_close(t->cursors);
	}
}

/* Forgets t, about to end, in its parent or as the writer. */
static void
txn_unlink(struct storage_txn *t)
{
	if (t->parent != NULL) {
		t->parent->child = NULL;
	} else if (t->st->writer == t) {
		t->st->writer = NULL;
	}
}

int
storage_txn_begin(struct storage *st, struct storage_txn *parent, unsigned flags,
	struct storage_txn **out)
{
	bool rdonly = (flags & STORAGE_TXN_RDONLY) != 0;
	struct storage_txn *t;
	int rc;

	if ((flags & ~STORAGE_TXN_RDONLY) != 0) {
		return ECHD_EINVAL;
	}
	if (parent != NULL) {
		if (rdonly || parent->rdonly || parent->child != NULL || parent->st != st) {
			return ECHD_EINVAL;
		}
	} else if (!rdonly) {
		if (st->read_only) {
			return -EROFS;
		}
		if (st->writer != NULL) {
			return -EBUSY; /* LMDB's second writer would wait forever */
		}
	}
	rc = st->ops->txn_begin(st, parent, flags, &t);
	if (rc != 0) {
		return rc;
	}
	t->rdonly = rdonly;
	if (parent == NULL && !rdonly) {
		st->writer = t;
	}
	t->parent = parent;
	t->child = NULL;
	t->cursors = NULL;
	if (parent != NULL) {
		parent->child = t;
	}
	memset(t->writes, 0, sizeof(t->writes));
	*out = t;
	return 0;
}

int
storage_txn_commit(struct storage_txn *t)
{
	return storage_txn_commit_gen(t, NULL);
}

int
storage_txn_commit_gen(struct storage_txn *t, uint64_t *gen)
{
	struct storage_txn *parent = t->parent;
	struct storage *st = t->st;
	bool top_write = parent == NULL && !t->rdonly;
	uint64_t writes[STORAGE_T__COUNT];
	int rc;

	if (t->child != NULL) {
		/* An open child commits first (LMDB's way), here so that its
		 * writes are counted in t like any other child's. */
		rc = storage_txn_commit(t->child);
		if (rc != 0) {
			storage_txn_abort(t);
			return rc;
		}
	}
	cursors_close(t);
	memcpy(writes, t->writes, sizeof(writes)); /* t is freed by the commit */
	txn_unlink(t);
	rc = st->ops->txn_commit(t);
	if (rc == 0 && parent != NULL) {
		/* The child's rows are the parent's now: its cursors on those
		 * tables must seek again, as after a write of their own. */
		for (int tb = 0; tb < STORAGE_T__COUNT; tb++) {
			parent->writes[tb] += writes[tb];
		}
	}
	if (rc == 0 && top_write) {
		st->commit_gen++; /* the backend gave it st->commit_gen + 1 */
	}
	if (rc == 0 && gen != NULL) {
		*gen = top_write ? st->commit_gen : 0;
	}
	return rc;
}

uint64_t
storage_commit_gen(const struct storage *st)
{
	return st->commit_gen;
}

uint64_t
storage_durable_gen(struct storage *st)
{
	uint64_t g;

	if (st->ops->durable_gen == NULL) {
		return st->commit_gen;
	}
	g = st->ops->durable_gen(st);
	assert(g <= st->commit_gen);
	return g;
}

uint64_t
storage_txn_writes(const struct storage_txn *t)
{
	uint64_t n = 0;

	for (int tb = 0; tb < STORAGE_T__COUNT; tb++) {
		n += t->writes[tb];
	}
	return n;
}

void
storage_txn_abort(struct storage_txn *t)
{
	if (t == NULL) {
		return;
	}
	storage_txn_abort(t->child);
	cursors_close(t);
	txn_unlink(t);
	t->st->ops->txn_abort(t);
}

int
storage_get(struct storage_txn *t, enum storage_table tb, const struct st_buf *k,
	struct st_buf *v)
{
	return t->st->ops->get(t, tb, k, v);
}

/* Whether t may write now: not a read txn, nor one with a child open. */
static int
write_check(const struct storage_txn *t)
{
	if (t->rdonly) {
		return -EACCES;
	}
	return t->child != NULL ? ECHD_EINVAL : 0;
}

int
storage_put(struct storage_txn *t, enum storage_table tb, const struct st_buf *k,
	const struct st_buf *v, unsigned flags)
{
	int rc = write_check(t);

	if (rc == 0) {
		rc = t->st->ops->put(t, tb, k, v, flags);
	}
	if (rc == 0) {
		t->writes[tb]++;
	}
	return rc;
}

int
storage_del(struct storage_txn *t, enum storage_table tb, const struct st_buf *k)
{
	int rc = write_check(t);

	if (rc == 0) {
		rc = t->st->ops->del(t, tb, k);
	}
	if (rc == 0) {
		t->writes[tb]++;
	}
	return rc;
}

/* The cursor-versus-write rule of storage.h, kept here so that every
 * backend, and every caller, is held to it alike: a cursor whose table
 * was written since its last seek may not move on. */
static bool
cursor_placed(const struct storage_cursor *c)
{
	if (c->seen == CURSOR_UNSET || c->seen == c->txn->writes[c->tb]) {
		return true;
	}
	assert(!"cursor moved on after a write to its table: seek again first");
	return false;
}

int
storage_cursor_open(struct storage_txn *t, enum storage_table tb, struct storage_cursor **out)
{
	struct storage_cursor *c;
	int rc;

	rc = t->st->ops->cursor_open(t, tb, &c);
	if (rc != 0) {
		return rc;
	}
	c->tb = tb;
	c->seen = CURSOR_UNSET;
	c->prev = NULL;
	c->next = t->cursors;
	if (t->cursors != NULL) {
		t->cursors->prev = c;
	}
	t->cursors = c;
	*out = c;
	return 0;
}

void
storage_cursor_close(struct storage_cursor *c)
{
	if (c == NULL) {
		return;
	}
	if (c->prev != NULL) {
		c->prev->next = c->next;
	} else {
		c->txn->cursors = c->next;
	}
	if (c->next != NULL) {
		c->next->prev = c->prev;
	}
	c->txn->st->ops->cursor_close(c);
}

int
storage_cursor_seek(struct storage_cursor *c, const struct st_buf *k, struct st_buf *key,
	struct st_buf *val)
{
	c->seen = c->txn->writes[c->tb];
	return c->txn->st->ops->cursor_seek(c, k, key, val);
}

int
storage_cursor_seek_last(struct storage_cursor *c, const struct st_buf *k, struct st_buf *key,
	struct st_buf *val)
{
	c->seen = c->txn->writes[c->tb];
	return c->txn->st->ops->cursor_seek_last(c, k, key, val);
}

int
storage_cursor_next(struct storage_cursor *c, struct st_buf *key, struct st_buf *val)
{
	if (!cursor_placed(c)) {
		return ECHD_EINVAL;
	}
	c->seen = c->txn->writes[c->tb];
	return c->txn->st->ops->cursor_next(c, key, val);
}

int
storage_cursor_prev(struct storage_cursor *c, struct st_buf *key, struct st_buf *val)
{
	if (!cursor_placed(c)) {
		return ECHD_EINVAL;
	}
	c->seen = c->txn->writes[c->tb];
	return c->txn->st->ops->cursor_prev(c, key, val);
}

int
storage_cursor_del(struct storage_cursor *c)
{
	int rc;

	if (!cursor_placed(c)) {
		return ECHD_EINVAL;
	}
	rc = write_check(c->txn);
	if (rc != 0) {
		return rc;
	}
	rc = c->txn->st->ops->cursor_del(c);
	if (rc == 0) {
		c->txn->writes[c->tb]++;
		c->seen = c->txn->writes[c->tb]; /* its own delete keeps its place */
	}
	return rc;
}

void
storage_cursor_ahead(struct storage_cursor *c, unsigned rows)
{
	if (c->txn->st->ops->cursor_ahead != NULL) {
		c->txn->st->ops->cursor_ahead(c, rows);
	}
}

int
storage_stat(struct storage *st, struct storage_stat *out)
{
	return st->ops->stat(st, out);
}

bool
storage_has_capacity(const struct storage *st)
{
	return st->ops->write_admit != NULL;
}

bool
storage_has_ha(const struct storage *st)
{
	return st->ops->ha_poll != NULL;
}

enum storage_role
storage_ha_role(const struct storage *st)
{
	return st->ops->ha_role == NULL ? STORAGE_ROLE_ACTIVE : st->ops->ha_role(st);
}

int
storage_ha_poll(struct storage *st, struct storage_ha *out)
{
	assert(st->writer == NULL);
	if (st->ops->ha_poll == NULL) {
		memset(out, 0, sizeof(*out));
		out->role = STORAGE_ROLE_ACTIVE;
		return 0;
	}
	return st->ops->ha_poll(st, out);
}

int
storage_write_admit(struct storage *st, uint64_t max_bytes, struct storage_room *out)
{
	struct storage_room room = {.adds_ok = true}; /* without capacity */
	int rc;

	if (st->ops->write_admit != NULL) {
		rc = st->ops->write_admit(st, max_bytes, &room);
		if (rc != 0) {
			return rc;
		}
	}
	*out = room;
	return 0;
}

int
storage_grow(struct storage *st, uint64_t max_bytes)
{
	return st->ops->grow == NULL ? 0 : st->ops->grow(st, max_bytes);
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
