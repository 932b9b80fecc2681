/* storage.c - the backend registry and the public storage functions, which
 * dispatch through the backend's struct storage_ops, and what every backend
 * shares on the way: the checks of txn_begin and of writes, nested
 * transactions ended child first, open cursors closed at their
 * transaction's end, the write counts (storage_txn_writes()), the commit
 * generations and the cursor-versus-write rule of storage.h; and the
 * optional interfaces' getters and the engines' option reader. */
#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "echd.h"
#include "storage_impl.h"

#define DEFAULT_BACKEND "lmdb"
/* storage_cursor.seen before the cursor's first seek. */
#define CURSOR_UNSET UINT64_MAX
/* Operation op of st's engine: its own, or its base's (a wrapper's
 * forwarding defaults, forward.h); NULL for an optional one neither has. */
#define OP(st, op)                                                                                 \
	((st)->ops->op != NULL || (st)->ops->base == NULL ? (st)->ops->op : (st)->ops->base->op)

/* NULL-terminated; backend_names[] mirrors it (storage_backends() returns
 * it, and a static initializer cannot read ops->name from another file). */
static const struct storage_ops *const backends[] = {
	&st_lmdb_ops,
	&st_fault_ops, /* tests only: lmdb with injected failures */
	&st_mem_ops,   /* in memory: the contract kept without LMDB */
	&st_pg_ops,    /* PostgreSQL: a store several front ends share */
	&st_fwd_ops,   /* tests only: mem behind the forwarding base, nothing optional */
	&st_stage_ops, /* lmdb with a staging table: writes in arrival order */
	NULL,
};
static const char *const backend_names[] = {
	"lmdb",
	"fault",
	"mem",
	"postgres",
	"fwd",
	"lmdb-staged",
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

/* Whether every option in o names a registered engine ("<engine>.<x>"):
 * one misspelt ("lmbd.map-size") would otherwise be nobody's and go unread. */
static int
opts_check(const struct storage_opts *o)
{
	for (size_t i = 0; i < o->nopt; i++) {
		const char *name = o->opt[i].name, *dot = strchr(name, '.');
		bool known = false;

		for (size_t b = 0; dot != NULL && backend_names[b] != NULL; b++) {
			size_t n = strlen(backend_names[b]);

			known |= (size_t)(dot - name) == n && strncmp(name, backend_names[b], n) == 0;
		}
		if (!known || o->opt[i].value == NULL) {
			echd_log(ECHD_LOG_WARNING,
				"storage: option '%s' %s", name,
				known ? "has no value" : "names no engine (<engine>.<option>)");
			return ECHD_EINVAL;
		}
	}
	return 0;
}

int
storage_open_ops(const struct storage_ops *ops, const struct storage_opts *o,
	struct storage **out)
{
	struct storage *st;
	int rc;

	if (ops->version < STORAGE_OPS_V2) {
		return ECHD_ENOTFOUND;
	}
	/* A base is one level deep (OP() looks no further). */
	assert(ops->open != NULL && ops->close != NULL &&
	       (ops->base == NULL || ops->base->base == NULL));
	rc = opts_check(o);
	if (rc != 0) {
		return rc;
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

int
storage_open(const char *backend, const struct storage_opts *o, struct storage **out)
{
	if (backend == NULL) {
		backend = DEFAULT_BACKEND;
	}
	for (size_t i = 0; backends[i] != NULL; i++) {
		assert(strcmp(backends[i]->name, backend_names[i]) == 0);
		if (strcmp(backends[i]->name, backend) == 0) {
			return storage_open_ops(backends[i], o, out);
		}
	}
	return ECHD_ENOTFOUND;
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
	rc = OP(st, txn_begin)(st, parent, flags, &t);
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
	uint64_t writes[STORAGE_T__ALL];
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
	rc = OP(st, txn_commit)(t);
	if (rc == 0 && parent != NULL) {
		/* The child's rows are the parent's now: its cursors on those
		 * tables must seek again, as after a write of their own. */
		for (int tb = 0; tb < STORAGE_T__ALL; tb++) {
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

	if (OP(st, durable_gen) == NULL) {
		return st->commit_gen;
	}
	g = OP(st, durable_gen)(st);
	assert(g <= st->commit_gen);
	return g;
}

uint64_t
storage_txn_writes(const struct storage_txn *t)
{
	uint64_t n = 0;

	for (int tb = 0; tb < STORAGE_T__ALL; tb++) {
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
	OP(t->st, txn_abort)(t);
}

int
storage_get(struct storage_txn *t, enum storage_table tb, const struct st_buf *k,
	struct st_buf *v)
{
	return OP(t->st, get)(t, tb, k, v);
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
		rc = OP(t->st, put)(t, tb, k, v, flags);
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
		rc = OP(t->st, del)(t, tb, k);
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

	rc = OP(t->st, cursor_open)(t, tb, &c);
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
	OP(c->txn->st, cursor_close)(c);
}

int
storage_cursor_seek(struct storage_cursor *c, const struct st_buf *k, struct st_buf *key,
	struct st_buf *val)
{
	c->seen = c->txn->writes[c->tb];
	return OP(c->txn->st, cursor_seek)(c, k, key, val);
}

int
storage_cursor_seek_last(struct storage_cursor *c, const struct st_buf *k, struct st_buf *key,
	struct st_buf *val)
{
	c->seen = c->txn->writes[c->tb];
	return OP(c->txn->st, cursor_seek_last)(c, k, key, val);
}

int
storage_cursor_next(struct storage_cursor *c, struct st_buf *key, struct st_buf *val)
{
	if (!cursor_placed(c)) {
		return ECHD_EINVAL;
	}
	c->seen = c->txn->writes[c->tb];
	return OP(c->txn->st, cursor_next)(c, key, val);
}

int
storage_cursor_prev(struct storage_cursor *c, struct st_buf *key, struct st_buf *val)
{
	if (!cursor_placed(c)) {
		return ECHD_EINVAL;
	}
	c->seen = c->txn->writes[c->tb];
	return OP(c->txn->st, cursor_prev)(c, key, val);
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
	rc = OP(c->txn->st, cursor_del)(c);
	if (rc == 0) {
		c->txn->writes[c->tb]++;
		c->seen = c->txn->writes[c->tb]; /* its own delete keeps its place */
	}
	return rc;
}

void
storage_cursor_ahead(struct storage_cursor *c, unsigned rows)
{
	void (*ahead)(struct storage_cursor *, unsigned) = OP(c->txn->st, cursor_ahead);

	if (ahead != NULL) {
		ahead(c, rows);
	}
}

int
storage_stat(struct storage *st, struct storage_stat *out)
{
	return OP(st, stat)(st, out);
}

void *
storage_iface(struct storage *st, enum storage_iface which)
{
	void *(*iface)(struct storage *, enum storage_iface) = OP(st, iface);

	return iface == NULL ? NULL : iface(st, which);
}

struct storage_capacity *
storage_capacity(struct storage *st)
{
	struct storage_capacity *cap = storage_iface(st, STORAGE_IFACE_CAPACITY);

	assert(cap == NULL || (cap->ops != NULL && cap->st != NULL));
	return cap;
}

int
storage_capacity_admit(struct storage_capacity *cap, uint64_t max_bytes, struct storage_room *out)
{
	struct storage_room room = {0};
	int rc = cap->ops->admit(cap->st, max_bytes, &room);

	if (rc == 0) {
		*out = room;
	}
	return rc;
}

int
storage_capacity_grow(struct storage_capacity *cap, uint64_t max_bytes)
{
	return cap->ops->grow(cap->st, max_bytes);
}

int
storage_capacity_stat(struct storage_capacity *cap, struct storage_capacity_stat *out)
{
	return cap->ops->stat(cap->st, out);
}

int
storage_capacity_free_bytes(struct storage_capacity *cap, uint64_t *out)
{
	return cap->ops->free_bytes(cap->st, out);
}

int
storage_capacity_reserve(struct storage_capacity *cap)
{
	return cap->ops->reserve(cap->st);
}

struct storage_ha *
storage_ha(struct storage *st)
{
	struct storage_ha *ha = storage_iface(st, STORAGE_IFACE_HA);

	assert(ha == NULL || (ha->ops != NULL && ha->st != NULL));
	return ha;
}

enum storage_role
storage_ha_role(const struct storage_ha *ha)
{
	return ha->ops->role(ha->st);
}

int
storage_ha_poll(struct storage_ha *ha, struct storage_ha_state *out)
{
	assert(ha->st->writer == NULL);
	return ha->ops->poll(ha->st, out);
}

struct storage_fetch *
storage_fetch(struct storage *st)
{
	struct storage_fetch *f = storage_iface(st, STORAGE_IFACE_FETCH);

	assert(f == NULL || (f->ops != NULL && f->st != NULL));
	return f;
}

int
storage_fetch_poll(struct storage_fetch *f, struct storage_fetch_state *out)
{
	assert(f->st->writer == NULL);
	return f->ops->poll(f->st, out);
}

uint64_t
storage_fetch_misses(const struct storage_fetch *f)
{
	return f->ops->misses(f->st);
}

struct storage_inflight *
storage_inflight(struct storage *st)
{
	struct storage_inflight *f = storage_iface(st, STORAGE_IFACE_INFLIGHT);

	assert(f == NULL || (f->ops != NULL && f->st != NULL));
	return f;
}

int
storage_inflight_poll(struct storage_inflight *f, int *fd)
{
	*fd = -1;
	return f->ops->poll(f->st, fd);
}

struct storage_maintain *
storage_maintain(struct storage *st)
{
	struct storage_maintain *m = storage_iface(st, STORAGE_IFACE_MAINTAIN);

	assert(m == NULL || (m->ops != NULL && m->st != NULL));
	return m;
}

bool
storage_maintain_due(struct storage_maintain *m, bool idle)
{
	return !m->st->read_only && m->ops->due(m->st, idle);
}

int
storage_maintain_step(struct storage_maintain *m, struct storage_txn *t, bool idle, bool *more)
{
	int rc;

	*more = false;
	/* t must be the engine's own: a wrapper passing the interface on
	 * would hand its transactions, which the engine cannot read. */
	assert(t->st == m->st);
	if (t->st != m->st || t->rdonly || t->child != NULL || t->cursors != NULL) {
		return ECHD_EINVAL;
	}
	rc = m->ops->step(t, idle, more);
	if (rc < 0) {
		return rc;
	}
	/* What it moved are writes of t: a commit of t is not empty. */
	t->writes[STORAGE_T_STAGE] += (uint64_t)rc;
	return 0;
}

int
storage_maintain_stat(struct storage_maintain *m, struct storage_maintain_stat *out)
{
	memset(out, 0, sizeof(*out));
	return m->ops->stat(m->st, out);
}

int
storage_maintain_verify(struct storage_maintain *m, struct storage_txn *t,
	storage_problem_fn problem, void *ud, uint64_t *rows)
{
	*rows = 0;
	assert(t->st == m->st);
	return t->st != m->st ? ECHD_EINVAL : m->ops->verify(t, problem, ud, rows);
}

size_t
storage_ha_nparts(const struct storage_ha *ha)
{
	return ha->ops->nparts != NULL ? ha->ops->nparts(ha->st) : 0;
}

int
storage_ha_part(const struct storage_ha *ha, size_t i, struct storage_ha_part *out)
{
	if (i >= storage_ha_nparts(ha)) {
		return -EINVAL;
	}
	return ha->ops->part(ha->st, i, out);
}

int
storage_ha_part_move(struct storage_ha *ha, size_t i, const char *url, char *why, size_t len)
{
	if (len > 0) {
		why[0] = '\0';
	}
	if (ha->ops->part_move == NULL) {
		return -ENOTSUP;
	}
	if (i >= storage_ha_nparts(ha)) {
		return -EINVAL;
	}
	return ha->ops->part_move(ha->st, i, url, why, len);
}

size_t
storage_ha_nfronts(const struct storage_ha *ha)
{
	return ha->ops->nfronts != NULL ? ha->ops->nfronts(ha->st) : 0;
}

int
storage_ha_front(const struct storage_ha *ha, size_t i, struct storage_ha_front *out)
{
	if (i >= storage_ha_nfronts(ha)) {
		return -EINVAL;
	}
	return ha->ops->front(ha->st, i, out);
}

int
storage_ha_confirm(struct storage_ha *ha)
{
	enum storage_role r;

	if (ha->ops->confirm != NULL) {
		return ha->ops->confirm(ha->st);
	}
	r = ha->ops->role(ha->st);
	return r == STORAGE_ROLE_ACTIVE ? 0 : r == STORAGE_ROLE_STANDBY ? ECHD_ESTANDBY :
									ECHD_EOFFLINE;
}

int
storage_sync(struct storage *st)
{
	return OP(st, sync)(st);
}

int
storage_copy(struct storage *st, const char *dir)
{
	return OP(st, copy)(st, dir);
}

/* ---- engine options ------------------------------------------------------ */

/* Decimal digits only, no sign or space: "12x", "-1" and "" are refused. */
static bool
parse_u64(const char *v, uint64_t *out)
{
	uint64_t n = 0;

	if (*v == '\0') {
		return false;
	}
	for (; *v != '\0'; v++) {
		if (*v < '0' || *v > '9' || n > (UINT64_MAX - (uint64_t)(*v - '0')) / 10) {
			return false;
		}
		n = n * 10 + (uint64_t)(*v - '0');
	}
	*out = n;
	return true;
}

int
storage_opts_read(const struct storage_opts *o, const char *engine,
	const struct storage_optdef *defs, size_t ndefs, void *out)
{
	size_t elen = strlen(engine);

	for (size_t i = 0; i < o->nopt; i++) {
		const char *name = o->opt[i].name, *value = o->opt[i].value;
		const struct storage_optdef *d = NULL;
		uint64_t n;

		if (strncmp(name, engine, elen) != 0 || name[elen] != '.') {
			continue; /* another engine's */
		}
		for (size_t k = 0; k < ndefs && d == NULL; k++) {
			if (strcmp(name + elen + 1, defs[k].name) == 0) {
				d = &defs[k];
			}
		}
		if (d == NULL) {
			echd_log(ECHD_LOG_WARNING, "%s: unknown option '%s'", engine, name);
			return ECHD_EINVAL;
		}
		switch (d->type) {
		case STORAGE_OPTDEF_U64:
			if (!parse_u64(value, &n) || n < d->min || n > d->max) {
				echd_log(ECHD_LOG_WARNING,
					"%s: option '%s': '%s' is not a whole number from %llu to %llu",
					engine, name, value, (unsigned long long)d->min,
					(unsigned long long)d->max);
				return ECHD_EINVAL;
			}
			memcpy((char *)out + d->off, &n, sizeof(n));
			break;
		case STORAGE_OPTDEF_STR:
			memcpy((char *)out + d->off, &value, sizeof(value));
			break;
		}
	}
	return 0;
}
