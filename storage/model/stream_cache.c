/* stream_cache.c - a batch's streams as its XADDs left them (see stream.h).
 *
 * An XADD reads its stream's keys row and tail node row, decodes both and
 * writes both back: two reads and two writes beside the one that matters,
 * its entries row. A batch of XADDs to a few streams did that for every
 * command. The cache keeps each stream's decoded metadata and tail node
 * (st_tail) from the first XADD of the batch on, and writes the two rows
 * once more, when the broker flushes it: before anything else uses the
 * batch, and before the commit. The rows written are the ones the appends
 * would have left, byte for byte.
 *
 * The flush must not fail for room: a command that finds the map full is
 * run again after the map grew, but a flush belongs to no command, and its
 * failure fails the whole batch. So a stream's first append of the batch
 * writes its keys and node rows at once, and so does an append that begins
 * a new node: the flush then only rewrites, at the same size, rows this
 * transaction already wrote (LMDB: pages already dirty, no page to
 * allocate).
 *
 * While the cache holds anything, its appends are the only writes to the
 * entries table (everyone else flushes first), so it can know the table's
 * last stream: read once, then moved by its own appends. An append to that
 * stream, or to one after it, goes at the table's end (STORAGE_PUT_APPEND:
 * LMDB then skips its search). A lookup that finds nothing forgets it: the
 * caller may create that stream and append to it.
 */
#include <errno.h>
#include <string.h>

#include "echd.h"
#include "stream.h"
#include "stream_impl.h"

struct cached {
	unsigned db;
	unsigned char *name; /* owned */
	size_t name_len;
	uint64_t hash;
	struct stream_meta m;
	struct st_tail *tail; /* owned */
	bool fresh;           /* no append yet: the first one writes its rows */
	bool dirty;           /* m differs from the keys row */
};

struct stream_cache {
	struct cached **list; /* in the order they were cached */
	size_t n, cap;
	struct cached **slots; /* open addressing over list's items; nslots a power of 2 */
	size_t nslots;
	struct cached *cur; /* the last lookup's */
	bool end_known;     /* end_sid is the highest sid with entries rows */
	uint64_t end_sid;
};

int
stream_cache_create(struct stream_cache **out)
{
	struct stream_cache *c = echd_calloc(1, sizeof(*c));

	if (c == NULL) {
		return -ENOMEM;
	}
	*out = c;
	return 0;
}

void
stream_cache_drop(struct stream_cache *c)
{
	for (size_t i = 0; i < c->n; i++) {
		st_tail_destroy(c->list[i]->tail);
		echd_free(c->list[i]->name);
		echd_free(c->list[i]);
	}
	if (c->n > 0) {
		memset(c->slots, 0, c->nslots * sizeof(*c->slots));
	}
	c->n = 0;
	c->cur = NULL;
	c->end_known = false;
}

void
stream_cache_destroy(struct stream_cache *c)
{
	if (c == NULL) {
		return;
	}
	stream_cache_drop(c);
	echd_free(c->list);
	echd_free(c->slots);
	echd_free(c);
}

bool
stream_cache_empty(const struct stream_cache *c)
{
	return c->n == 0;
}

static uint64_t
name_hash(unsigned db, const struct st_buf *name)
{
	const unsigned char *p = name->data;
	uint64_t h = 14695981039346656037ull ^ db; /* FNV-1a */

	for (size_t i = 0; i < name->len; i++) {
		h = (h ^ p[i]) * 1099511628211ull;
	}
	return h;
}

static struct cached **
slot_of(struct stream_cache *c, unsigned db, const struct st_buf *name, uint64_t h)
{
	size_t mask = c->nslots - 1;

	for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
		struct cached *e = c->slots[i];
		if (e == NULL || (e->hash == h && e->db == db && e->name_len == name->len &&
					 memcmp(e->name, name->data, name->len) == 0)) {
			return &c->slots[i];
		}
	}
}

/* Room for one more: the list grows, the slots stay under half full. */
static int
reserve(struct stream_cache *c)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 16;
		struct cached **l = echd_realloc(c->list, cap * sizeof(*l));
		if (l == NULL) {
			return -ENOMEM;
		}
		c->list = l;
		c->cap = cap;
	}
	if ((c->n + 1) * 2 > c->nslots) {
		size_t ns = c->nslots ? c->nslots * 2 : 32;
		struct cached **s = echd_calloc(ns, sizeof(*s));
		if (s == NULL) {
			return -ENOMEM;
		}
		echd_free(c->slots);
		c->slots = s;
		c->nslots = ns;
		for (size_t i = 0; i < c->n; i++) {
			struct st_buf nm = {c->list[i]->name, c->list[i]->name_len};
			*slot_of(c, c->list[i]->db, &nm, c->list[i]->hash) = c->list[i];
		}
	}
	return 0;
}

int
stream_cache_lookup(struct stream_cache *c, struct storage_txn *t, unsigned db,
	const struct st_buf *name, struct stream_meta *out)
{
	uint64_t h = name_hash(db, name);
	struct cached *e, **slot;
	struct stream_meta m;
	int rc;

	c->cur = NULL;
	if (c->nslots > 0) {
		e = *slot_of(c, db, name, h);
		if (e != NULL) {
			c->cur = e;
			*out = e->m;
			return 0;
		}
	}
	rc = stream_lookup(t, db, name, &m);
	if (rc == ECHD_ENOTFOUND) {
		c->end_known = false; /* see the top */
	}
	if (rc != 0) {
		return rc;
	}
	rc = reserve(c);
	if (rc != 0) {
		return rc;
	}
	e = echd_calloc(1, sizeof(*e));
	if (e == NULL) {
		return -ENOMEM;
	}
	e->name = echd_malloc(name->len ? name->len : 1);
	rc = e->name == NULL ? -ENOMEM : st_tail_create(&e->tail);
	if (rc != 0) {
		echd_free(e->name);
		echd_free(e);
		return rc;
	}
	memcpy(e->name, name->data, name->len);
	e->name_len = name->len;
	e->db = db;
	e->hash = h;
	e->m = m;
	e->fresh = true;
	slot = slot_of(c, db, name, h);
	*slot = e;
	c->list[c->n++] = e;
	c->cur = e;
	*out = m;
	return 0;
}

/* Learns the highest sid with entries rows, when it is not known. */
static int
learn_end(struct stream_cache *c, struct storage_txn *t)
{
	struct storage_cursor *cur;
	struct st_buf key, val;
	int rc;

	if (c->end_known) {
		return 0;
	}
	rc = storage_cursor_open(t, STORAGE_T_ENTRIES, &cur);
	if (rc != 0) {
		return rc;
	}
	rc = storage_cursor_seek_last(cur, NULL, &key, &val);
	if (rc == 0 && key.len < 8) {
		rc = ECHD_ECORRUPT;
	}
	if (rc == 0) {
		c->end_sid = st_get_u64(key.data);
	} else if (rc == ECHD_ENOTFOUND) {
		c->end_sid = 0;
		rc = 0;
	}
	storage_cursor_close(cur);
	c->end_known = rc == 0;
	return rc;
}

int
stream_cache_append(struct stream_cache *c, struct storage_txn *t, struct stream_meta *m,
	const struct stream_id *id, const struct st_buf *fv, size_t nfv, uint64_t node_max_entries,
	uint64_t node_max_bytes)
{
	struct cached *e = c->cur;
	uint64_t nodes = m->nodes;
	int rc;

	if (e == NULL || e->m.sid != m->sid) {
		return -EINVAL; /* not the stream the last lookup found */
	}
	rc = learn_end(c, t);
	if (rc != 0) {
		return rc;
	}
	rc = st_tail_append(t, m, e->tail, id, fv, nfv, node_max_entries, node_max_bytes,
		m->sid >= c->end_sid);
	if (rc == 0 && m->sid > c->end_sid) {
		c->end_sid = m->sid;
	}
	if (rc == 0 && (e->fresh || m->nodes != nodes)) {
		/* rows the flush will only rewrite (see the top) */
		rc = st_tail_save(t, m->sid, e->tail);
	}
	if (rc == 0 && e->fresh) {
		struct st_buf name = {e->name, e->name_len};
		rc = stream_meta_save(t, e->db, &name, m);
	}
	if (rc != 0) {
		return rc;
	}
	e->dirty = !e->fresh;
	e->fresh = false;
	e->m = *m;
	return 0;
}

int
stream_cache_flush(struct stream_cache *c, struct storage_txn *t)
{
	int rc = 0;

	for (size_t i = 0; i < c->n && rc == 0; i++) {
		struct cached *e = c->list[i];
		struct st_buf name = {e->name, e->name_len};

		rc = st_tail_save(t, e->m.sid, e->tail);
		if (rc == 0 && e->dirty) {
			rc = stream_meta_save(t, e->db, &name, &e->m);
		}
	}
	stream_cache_drop(c);
	return rc;
}
