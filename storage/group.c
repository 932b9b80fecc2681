/* group.c - consumer groups, consumers and pending-entries lists. */
#include "group.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "echd.h"
#include "stream_impl.h"

#define GROUP_VLEN   (8 + 16 + 8 + 8 + 8)
#define CONSREC_FIXED (8 + 8 + 8)
#define PEL_VLEN     (8 + 8 + 8)

/* ---- keys ----------------------------------------------------------------- */

/* A key of a fixed prefix and a name, on the stack when small. */
struct namekey {
	unsigned char small[256];
	unsigned char *p;
	size_t len;
};

static int
namekey_init(struct namekey *k, uint64_t prefix, const struct st_buf *name)
{
	if (name->len > GROUP_NAME_MAX) {
		return ECHD_ETOOLONG;
	}
	k->len = 8 + name->len;
	k->p = k->small;
	if (k->len > sizeof(k->small)) {
		k->p = echd_malloc(k->len);
		if (k->p == NULL) {
			return -ENOMEM;
		}
	}
	st_put_u64(k->p, prefix);
	memcpy(k->p + 8, name->data, name->len);
	return 0;
}

static void
namekey_finish(struct namekey *k)
{
	if (k->p != k->small) {
		echd_free(k->p);
	}
}

/* ---- groups ------------------------------------------------------------- */

static void
group_encode(unsigned char *p, const struct group_meta *g)
{
	st_put_u64(p, g->gid);
	st_put_id(p + 8, &g->last_delivered);
	st_put_u64(p + 24, (uint64_t)g->entries_read);
	st_put_u64(p + 32, g->pending);
	st_put_u64(p + 40, g->consumers);
}

static int
group_decode(const struct st_buf *v, struct group_meta *g)
{
	const unsigned char *p = v->data;

	if (v->len != GROUP_VLEN) {
		return ECHD_ECORRUPT;
	}
	g->gid = st_get_u64(p);
	st_get_id(p + 8, &g->last_delivered);
	g->entries_read = (int64_t)st_get_u64(p + 24);
	g->pending = st_get_u64(p + 32);
	g->consumers = st_get_u64(p + 40);
	return 0;
}

int
group_lookup(struct storage_txn *t, const struct stream_meta *m, const struct st_buf *name,
	struct group_meta *out)
{
	struct namekey k;
	struct st_buf kb, v;
	int rc;

	rc = namekey_init(&k, m->sid, name);
	if (rc != 0) {
		return rc == ECHD_ETOOLONG ? ECHD_ENOTFOUND : rc;
	}
	kb.data = k.p;
	kb.len = k.len;
	rc = storage_get(t, STORAGE_T_GROUPS, &kb, &v);
	if (rc == 0) {
		rc = group_decode(&v, out);
	}
	namekey_finish(&k);
	return rc;
}

int
group_save(struct storage_txn *t, const struct stream_meta *m, const struct st_buf *name,
	const struct group_meta *g)
{
	unsigned char val[GROUP_VLEN];
	struct namekey k;
	struct st_buf kb, v = {val, sizeof(val)};
	int rc;

	rc = namekey_init(&k, m->sid, name);
	if (rc != 0) {
		return rc;
	}
	kb.data = k.p;
	kb.len = k.len;
	group_encode(val, g);
	rc = storage_put(t, STORAGE_T_GROUPS, &kb, &v, 0);
	namekey_finish(&k);
	return rc;
}

int
group_create(struct storage_txn *t, struct stream_meta *m, const struct st_buf *name,
	const struct stream_id *last, int64_t entries_read, struct group_meta *out)
{
	struct group_meta g;
	int rc;

	if (name->len > GROUP_NAME_MAX) {
		return ECHD_ETOOLONG;
	}
	rc = group_lookup(t, m, name, &g);
	if (rc == 0) {
		return ECHD_EEXIST;
	}
	if (rc != ECHD_ENOTFOUND) {
		return rc;
	}
	memset(&g, 0, sizeof(g));
	rc = st_next_id(t, &g.gid);
	if (rc != 0) {
		return rc;
	}
	g.last_delivered = *last;
	g.entries_read = entries_read;
	rc = group_save(t, m, name, &g);
	if (rc != 0) {
		return rc;
	}
	m->groups++;
	*out = g;
	return 0;
}

int
group_destroy(struct storage_txn *t, struct stream_meta *m, const struct st_buf *name)
{
	struct group_meta g;
	struct namekey k;
	struct st_buf kb;
	int rc;

	rc = group_lookup(t, m, name, &g);
	if (rc != 0) {
		return rc;
	}
	rc = namekey_init(&k, m->sid, name);
	if (rc != 0) {
		return rc;
	}
	kb.data = k.p;
	kb.len = k.len;
	rc = storage_del(t, STORAGE_T_GROUPS, &kb);
	namekey_finish(&k);
	if (rc != 0) {
		return rc;
	}
	m->groups--;
	return st_trash_add(t, ST_TRASH_GROUP, g.gid);
}

/* A row of a table keyed by an 8-byte id and a name: name is the key less
 * the id. */
typedef int (*prefix_row_fn)(const struct st_buf *name, const struct st_buf *val, void *ud);

/* Calls row for each row of table tb whose key starts with id, in key
 * order; a non-zero return from row ends the walk and is returned. */
static int
prefix_each(struct storage_txn *t, enum storage_table tb, uint64_t id, prefix_row_fn row,
	void *ud)
{
	unsigned char prefix[8];
	struct storage_cursor *c;
	struct st_buf key, val, seek = {prefix, 8};
	int rc;

	st_put_u64(prefix, id);
	rc = storage_cursor_open(t, tb, &c);
	if (rc != 0) {
		return rc;
	}
	rc = storage_cursor_seek(c, &seek, &key, &val);
	while (rc == 0) {
		struct st_buf name;

		if (key.len < 8 || memcmp(key.data, prefix, 8) != 0) {
			rc = ECHD_ENOTFOUND;
			break;
		}
		name.data = (const unsigned char *)key.data + 8;
		name.len = key.len - 8;
		rc = row(&name, &val, ud);
		if (rc != 0) {
			storage_cursor_close(c);
			return rc;
		}
		rc = storage_cursor_next(c, &key, &val);
	}
	storage_cursor_close(c);
	return rc == ECHD_ENOTFOUND ? 0 : rc;
}

struct group_walk {
	group_fn fn;
	void *ud;
};

static int
group_row(const struct st_buf *name, const struct st_buf *val, void *ud)
{
	struct group_walk *w = ud;
	struct group_meta g;
	int rc = group_decode(val, &g);

	return rc != 0 ? rc : w->fn(name, &g, w->ud);
}

int
group_each(struct storage_txn *t, const struct stream_meta *m, group_fn fn, void *ud)
{
	struct group_walk w = {fn, ud};

	return prefix_each(t, STORAGE_T_GROUPS, m->sid, group_row, &w);
}

int64_t
group_estimate_distance(const struct stream_meta *m, const struct stream_id *id)
{
	int cmp_last, cmp_first;
	bool no_tombstone_ahead;

	if (m->entries_added == 0) {
		return 0; /* a never-used stream: every id is at 0 */
	}
	if (m->length == 0 && stream_id_cmp(id, &m->last) < 1) {
		return (int64_t)m->entries_added;
	}
	cmp_last = stream_id_cmp(id, &m->last);
	if (cmp_last == 0) {
		return (int64_t)m->entries_added;
	}
	if (cmp_last > 0) {
		return GROUP_ENTRIES_READ_UNKNOWN;
	}
	cmp_first = stream_id_cmp(id, &m->first);
	no_tombstone_ahead = (m->max_deleted.ms == 0 && m->max_deleted.seq == 0) ||
		stream_id_cmp(&m->max_deleted, &m->first) < 0;
	if (no_tombstone_ahead) {
		if (cmp_first < 0) {
			return (int64_t)(m->entries_added - m->length);
		}
		if (cmp_first == 0) {
			return (int64_t)(m->entries_added - m->length + 1);
		}
	}
	return GROUP_ENTRIES_READ_UNKNOWN;
}

bool
group_range_has_tombstones(const struct stream_meta *m, const struct stream_id *start,
	const struct stream_id *end)
{
	struct stream_id lo = {0, 0}, hi = {UINT64_MAX, UINT64_MAX};

	if (m->length == 0 || (m->max_deleted.ms == 0 && m->max_deleted.seq == 0)) {
		return false;
	}
	if (stream_id_cmp(&m->first, &m->max_deleted) > 0) {
		return false;
	}
	if (start) {
		lo = *start;
	}
	if (end) {
		hi = *end;
	}
	return stream_id_cmp(&lo, &m->max_deleted) <= 0 && stream_id_cmp(&m->max_deleted, &hi) <= 0;
}

int
group_lag(struct storage_txn *t, const struct stream_meta *m, const struct group_meta *g,
	int64_t *lag)
{
	uint64_t n;
	int rc;

	/* Counted from the rows, not from entries_added - entries_read as
	 * Redis does: that difference is wrong once trimming or XDEL removed
	 * entries after the cursor, or after an XGROUP SETID ENTRIESREAD,
	 * and Redis answers NULL where it cannot tell. */
	rc = stream_count_after(t, m, &g->last_delivered, &n);
	if (rc != 0) {
		return rc;
	}
	*lag = (int64_t)n;
	return 0;
}

void
group_advance(const struct stream_meta *m, struct group_meta *g, const struct stream_id *id)
{
	if (stream_id_cmp(id, &g->last_delivered) <= 0) {
		return;
	}
	if (g->entries_read != GROUP_ENTRIES_READ_UNKNOWN &&
		stream_id_cmp(&g->last_delivered, &m->first) >= 0 &&
		!group_range_has_tombstones(m, &g->last_delivered, NULL)) {
		/* A valid counter, and nothing removed after the cursor (trimming
		 * removes only entries before the first): id is the next entry
		 * ever added, so count this read. Otherwise entries may have gone
		 * between the cursor and id, and the counter is recomputed. */
		g->entries_read++;
	} else if (m->entries_added) {
		g->entries_read = group_estimate_distance(m, id);
	}
	g->last_delivered = *id;
}

/* ---- consumers ---------------------------------------------------------- */

static size_t
consrec_key(unsigned char *k, uint64_t gid, uint64_t cid)
{
	st_put_u64(k, gid);
	st_put_u64(k + 8, cid);
	return 16;
}

static int
consrec_decode(const struct st_buf *v, struct consumer_meta *c, struct st_buf *name)
{
	const unsigned char *p = v->data;

	if (v->len < CONSREC_FIXED) {
		return ECHD_ECORRUPT;
	}
	c->seen_time = st_get_u64(p);
	c->active_time = (int64_t)st_get_u64(p + 8);
	c->pending = st_get_u64(p + 16);
	if (name) {
		name->data = p + CONSREC_FIXED;
		name->len = v->len - CONSREC_FIXED;
	}
	return 0;
}

static int
consrec_put(struct storage_txn *t, const struct group_meta *g, const struct st_buf *name,
	const struct consumer_meta *c)
{
	unsigned char key[16], small[256], *val = small;
	size_t vlen = CONSREC_FIXED + name->len;
	struct st_buf k = {key, 16}, v;
	int rc;

	if (vlen > sizeof(small)) {
		val = echd_malloc(vlen);
		if (val == NULL) {
			return -ENOMEM;
		}
	}
	consrec_key(key, g->gid, c->cid);
	st_put_u64(val, c->seen_time);
	st_put_u64(val + 8, (uint64_t)c->active_time);
	st_put_u64(val + 16, c->pending);
	memmove(val + CONSREC_FIXED, name->data, name->len);
	v.data = val;
	v.len = vlen;
	rc = storage_put(t, STORAGE_T_CONSREC, &k, &v, 0);
	if (val != small) {
		echd_free(val);
	}
	return rc;
}

int
consumer_by_id(struct storage_txn *t, const struct group_meta *g, uint64_t cid,
	struct consumer_meta *out, struct st_buf *name)
{
	unsigned char key[16];
	struct st_buf k = {key, 16}, v;
	int rc;

	consrec_key(key, g->gid, cid);
	rc = storage_get(t, STORAGE_T_CONSREC, &k, &v);
	if (rc != 0) {
		return rc;
	}
	out->cid = cid;
	return consrec_decode(&v, out, name);
}

int
consumer_lookup(struct storage_txn *t, const struct group_meta *g, const struct st_buf *name,
	struct consumer_meta *out)
{
	struct namekey k;
	struct st_buf kb, v;
	uint64_t cid;
	int rc;

	rc = namekey_init(&k, g->gid, name);
	if (rc != 0) {
		return rc == ECHD_ETOOLONG ? ECHD_ENOTFOUND : rc;
	}
	kb.data = k.p;
	kb.len = k.len;
	rc = storage_get(t, STORAGE_T_CONSUMERS, &kb, &v);
	namekey_finish(&k);
	if (rc != 0) {
		return rc;
	}
	if (v.len != 8) {
		return ECHD_ECORRUPT;
	}
	cid = st_get_u64(v.data);
	rc = consumer_by_id(t, g, cid, out, NULL);
	return rc == ECHD_ENOTFOUND ? ECHD_ECORRUPT : rc;
}

int
consumer_create(struct storage_txn *t, struct group_meta *g, const struct st_buf *name,
	uint64_t now, struct consumer_meta *out)
{
	unsigned char cidbuf[8];
	struct consumer_meta c;
	struct namekey k;
	struct st_buf kb, v = {cidbuf, 8};
	int rc;

	if (name->len > GROUP_NAME_MAX) {
		return ECHD_ETOOLONG;
	}
	rc = consumer_lookup(t, g, name, &c);
	if (rc == 0) {
		return ECHD_EEXIST;
	}
	if (rc != ECHD_ENOTFOUND) {
		return rc;
	}
	memset(&c, 0, sizeof(c));
	rc = st_next_id(t, &c.cid);
	if (rc != 0) {
		return rc;
	}
	c.seen_time = now;
	c.active_time = -1;
	rc = namekey_init(&k, g->gid, name);
	if (rc != 0) {
		return rc;
	}
	kb.data = k.p;
	kb.len = k.len;
	st_put_u64(cidbuf, c.cid);
	rc = storage_put(t, STORAGE_T_CONSUMERS, &kb, &v, 0);
	namekey_finish(&k);
	if (rc == 0) {
		rc = consrec_put(t, g, name, &c);
	}
	if (rc != 0) {
		return rc;
	}
	g->consumers++;
	*out = c;
	return 0;
}

int
consumer_save(struct storage_txn *t, const struct group_meta *g, const struct st_buf *name,
	const struct consumer_meta *c)
{
	return consrec_put(t, g, name, c);
}

/* Updates only the counters of the consumer record cid, keeping its name. */
static int
consumer_adjust(struct storage_txn *t, const struct group_meta *g, uint64_t cid, int64_t delta)
{
	struct consumer_meta c;
	struct st_buf name;
	unsigned char *copy;
	int rc;

	rc = consumer_by_id(t, g, cid, &c, &name);
	if (rc != 0) {
		return rc == ECHD_ENOTFOUND ? ECHD_ECORRUPT : rc;
	}
	if (delta < 0 && c.pending < (uint64_t)-delta) {
		return ECHD_ECORRUPT;
	}
	c.pending = (uint64_t)((int64_t)c.pending + delta);
	/* name points into the stored value, which the put replaces */
	copy = echd_malloc(name.len ? name.len : 1);
	if (copy == NULL) {
		return -ENOMEM;
	}
	memcpy(copy, name.data, name.len);
	name.data = copy;
	rc = consrec_put(t, g, &name, &c);
	echd_free(copy);
	return rc;
}

int
consumer_delete(struct storage_txn *t, struct group_meta *g, const struct st_buf *name,
	uint64_t *pending)
{
	struct consumer_meta c;
	unsigned char prefix[16];
	struct storage_cursor *cur;
	struct st_buf key, val, seek = {prefix, 16};
	struct namekey k;
	struct st_buf kb;
	uint64_t n = 0;
	int rc;

	rc = consumer_lookup(t, g, name, &c);
	if (rc != 0) {
		return rc;
	}
	/* Walk its PEL index; drop each row from the group PEL too. */
	consrec_key(prefix, g->gid, c.cid);
	rc = storage_cursor_open(t, STORAGE_T_CPEL, &cur);
	if (rc != 0) {
		return rc;
	}
	rc = storage_cursor_seek(cur, &seek, &key, &val);
	while (rc == 0) {
		unsigned char pk[24];
		struct st_buf pkb = {pk, 24};

		if (key.len != 32 || memcmp(key.data, prefix, 16) != 0) {
			rc = ECHD_ENOTFOUND;
			break;
		}
		st_put_u64(pk, g->gid);
		memcpy(pk + 8, (const unsigned char *)key.data + 16, 16);
		rc = storage_del(t, STORAGE_T_PEL, &pkb);
		if (rc != 0) {
			rc = rc == ECHD_ENOTFOUND ? ECHD_ECORRUPT : rc;
			break;
		}
		rc = storage_cursor_del(cur);
		if (rc != 0) {
			break;
		}
		n++;
		rc = storage_cursor_next(cur, &key, &val);
	}
	storage_cursor_close(cur);
	if (rc != ECHD_ENOTFOUND) {
		return rc;
	}
	rc = namekey_init(&k, g->gid, name);
	if (rc != 0) {
		return rc;
	}
	kb.data = k.p;
	kb.len = k.len;
	rc = storage_del(t, STORAGE_T_CONSUMERS, &kb);
	namekey_finish(&k);
	if (rc == 0) {
		unsigned char ck[16];
		struct st_buf ckb = {ck, 16};
		consrec_key(ck, g->gid, c.cid);
		rc = storage_del(t, STORAGE_T_CONSREC, &ckb);
	}
	if (rc != 0) {
		return rc;
	}
	if (g->pending < n || g->consumers == 0) {
		return ECHD_ECORRUPT;
	}
	g->pending -= n;
	g->consumers--;
	*pending = n;
	return 0;
}

struct consumer_walk {
	struct storage_txn *t;
	const struct group_meta *g;
	consumer_fn fn;
	void *ud;
};

/* consumers: gid + name -> cid; the record is in consrec */
static int
consumer_row(const struct st_buf *name, const struct st_buf *val, void *ud)
{
	struct consumer_walk *w = ud;
	struct consumer_meta cm;
	int rc;

	if (val->len != 8) {
		return ECHD_ECORRUPT;
	}
	rc = consumer_by_id(w->t, w->g, st_get_u64(val->data), &cm, NULL);
	if (rc != 0) {
		return rc == ECHD_ENOTFOUND ? ECHD_ECORRUPT : rc;
	}
	return w->fn(name, &cm, w->ud);
}

int
consumer_each(struct storage_txn *t, const struct group_meta *g, consumer_fn fn, void *ud)
{
	struct consumer_walk w = {t, g, fn, ud};

	return prefix_each(t, STORAGE_T_CONSUMERS, g->gid, consumer_row, &w);
}

struct usage_walk {
	struct storage_txn *t;
	uint64_t bytes;
};

static int
usage_consumer(const struct st_buf *name, const struct consumer_meta *c, void *ud)
{
	struct usage_walk *u = ud;

	(void)c;
	u->bytes += 8 + name->len + 8;                 /* consumers: gid + name -> cid */
	u->bytes += 16 + CONSREC_FIXED + name->len;    /* consrec: gid + cid -> record */
	return 0;
}

static int
usage_group(const struct st_buf *name, const struct group_meta *g, void *ud)
{
	struct usage_walk *u = ud;

	u->bytes += 8 + name->len + GROUP_VLEN;
	u->bytes += g->pending * (24 + PEL_VLEN + 32); /* pel row and cpel row */
	return consumer_each(u->t, g, usage_consumer, u);
}

int
group_usage(struct storage_txn *t, const struct stream_meta *m, uint64_t *out)
{
	struct usage_walk u = {t, 0};
	int rc = group_each(t, m, usage_group, &u);

	*out = u.bytes;
	return rc;
}

/* ---- copies (COPY) ------------------------------------------------------ */

/* Old and new ids of the groups, or of one group's consumers, as copied. */
struct id_map {
	uint64_t (*pairs)[2];
	size_t n, cap;
	struct storage_txn *t;
};

/* Copying a row keyed by an id + name: gives the copy a fresh id. */
static int
copy_fresh_id(unsigned char *key, size_t klen, unsigned char *val, size_t vlen, void *ud)
{
	struct id_map *map = ud;
	uint64_t id;
	int rc;

	(void)key;
	(void)klen;
	if (vlen < 8) {
		return ECHD_ECORRUPT;
	}
	if (map->n == map->cap) {
		size_t ncap = map->cap ? map->cap * 2 : 16;
		uint64_t(*np)[2] = echd_realloc(map->pairs, ncap * sizeof(*np));
		if (np == NULL) {
			return -ENOMEM;
		}
		map->pairs = np;
		map->cap = ncap;
	}
	rc = st_next_id(map->t, &id);
	if (rc != 0) {
		return rc;
	}
	map->pairs[map->n][0] = st_get_u64(val); /* groups: gid; consumers: cid */
	map->pairs[map->n][1] = id;
	map->n++;
	st_put_u64(val, id);
	return 0;
}

static int
pair_cmp(const void *a, const void *b)
{
	uint64_t x = ((const uint64_t *)a)[0], y = ((const uint64_t *)b)[0];

	return x < y ? -1 : x > y;
}

/* Rewrites the consumer id at p from the old id to the new one. */
static int
map_cid(const struct id_map *map, unsigned char *p)
{
	uint64_t key[2] = {st_get_u64(p), 0};
	const uint64_t *hit = map->n == 0 ? NULL :
		bsearch(key, map->pairs, map->n, sizeof(*map->pairs), pair_cmp);

	if (hit == NULL) {
		return ECHD_ECORRUPT; /* a row of a consumer the group does not have */
	}
	st_put_u64(p, hit[1]);
	return 0;
}

static int
copy_key_cid(unsigned char *key, size_t klen, unsigned char *val, size_t vlen, void *ud)
{
	(void)val;
	(void)vlen;
	return klen < 16 ? ECHD_ECORRUPT : map_cid(ud, key + 8);
}

static int
copy_pel(unsigned char *key, size_t klen, unsigned char *val, size_t vlen, void *ud)
{
	(void)key;
	(void)klen;
	if (vlen != PEL_VLEN) {
		return ECHD_ECORRUPT;
	}
	return st_get_u64(val) == PEL_UNOWNED ? 0 : map_cid(ud, val);
}

int
group_copy(struct storage_txn *t, const struct stream_meta *from, const struct stream_meta *to)
{
	struct id_map groups = {NULL, 0, 0, t}, cons = {NULL, 0, 0, t};
	int rc;

	rc = st_copy_rows(t, STORAGE_T_GROUPS, from->sid, to->sid, copy_fresh_id, &groups);
	for (size_t i = 0; rc == 0 && i < groups.n; i++) {
		uint64_t og = groups.pairs[i][0], ng = groups.pairs[i][1];

		cons.n = 0;
		rc = st_copy_rows(t, STORAGE_T_CONSUMERS, og, ng, copy_fresh_id, &cons);
		if (rc != 0) {
			break;
		}
		if (cons.n > 1) { /* a group may have no consumers: pairs NULL */
			qsort(cons.pairs, cons.n, sizeof(*cons.pairs), pair_cmp);
		}
		rc = st_copy_rows(t, STORAGE_T_CONSREC, og, ng, copy_key_cid, &cons);
		if (rc == 0) {
			rc = st_copy_rows(t, STORAGE_T_PEL, og, ng, copy_pel, &cons);
		}
		if (rc == 0) {
			rc = st_copy_rows(t, STORAGE_T_CPEL, og, ng, copy_key_cid, &cons);
		}
	}
	echd_free(groups.pairs);
	echd_free(cons.pairs);
	return rc;
}

/* ---- pending entries ---------------------------------------------------- */

static size_t
pel_key(unsigned char *k, uint64_t gid, const struct stream_id *id)
{
	st_put_u64(k, gid);
	st_put_id(k + 8, id);
	return 24;
}

static size_t
cpel_key(unsigned char *k, uint64_t gid, uint64_t cid, const struct stream_id *id)
{
	st_put_u64(k, gid);
	st_put_u64(k + 8, cid);
	st_put_id(k + 16, id);
	return 32;
}

static int
pel_decode(const struct st_buf *v, const struct stream_id *id, struct pel_row *r)
{
	const unsigned char *p = v->data;

	if (v->len != PEL_VLEN) {
		return ECHD_ECORRUPT;
	}
	r->id = *id;
	r->cid = st_get_u64(p);
	r->delivery_time = st_get_u64(p + 8);
	r->delivery_count = st_get_u64(p + 16);
	return 0;
}

int
pel_get(struct storage_txn *t, const struct group_meta *g, const struct stream_id *id,
	struct pel_row *out)
{
	unsigned char key[24];
	struct st_buf k = {key, 24}, v;
	int rc;

	pel_key(key, g->gid, id);
	rc = storage_get(t, STORAGE_T_PEL, &k, &v);
	if (rc != 0) {
		return rc;
	}
	return pel_decode(&v, id, out);
}

static int
pel_write(struct storage_txn *t, const struct group_meta *g, const struct pel_row *r)
{
	unsigned char key[24], val[PEL_VLEN];
	struct st_buf k = {key, 24}, v = {val, sizeof(val)};

	pel_key(key, g->gid, &r->id);
	st_put_u64(val, r->cid);
	st_put_u64(val + 8, r->delivery_time);
	st_put_u64(val + 16, r->delivery_count);
	return storage_put(t, STORAGE_T_PEL, &k, &v, 0);
}

static int
cpel_set(struct storage_txn *t, const struct group_meta *g, uint64_t cid,
	const struct stream_id *id, bool present)
{
	unsigned char key[32];
	struct st_buf k = {key, 32}, empty = {"", 0};

	cpel_key(key, g->gid, cid, id);
	if (present) {
		return storage_put(t, STORAGE_T_CPEL, &k, &empty, 0);
	}
	return storage_del(t, STORAGE_T_CPEL, &k);
}

int
pel_put(struct storage_txn *t, struct group_meta *g, struct consumer_meta *c,
	const struct pel_row *r, uint64_t prev_cid)
{
	uint64_t cid = c ? c->cid : PEL_UNOWNED;
	int rc;

	assert(r->cid == cid);
	if (prev_cid != cid) {
		if (prev_cid == PEL_NEW) {
			g->pending++;
		} else if (prev_cid != PEL_UNOWNED) {
			rc = cpel_set(t, g, prev_cid, &r->id, false);
			if (rc == 0) {
				rc = consumer_adjust(t, g, prev_cid, -1);
			}
			if (rc != 0) {
				return rc;
			}
		}
		if (c != NULL) {
			rc = cpel_set(t, g, c->cid, &r->id, true);
			if (rc != 0) {
				return rc;
			}
			c->pending++;
		}
	}
	return pel_write(t, g, r);
}

int
pel_release(struct storage_txn *t, struct group_meta *g, const struct pel_row *r,
	uint64_t prev_cid)
{
	struct pel_row u = *r;

	u.cid = PEL_UNOWNED;
	u.delivery_time = 0;
	return pel_put(t, g, NULL, &u, prev_cid);
}

int
pel_deliver_new(struct storage_txn *t, struct group_meta *g, struct consumer_meta *c,
	const struct stream_id *id, uint64_t now)
{
	struct pel_row r = {.id = *id, .cid = c->cid, .delivery_time = now, .delivery_count = 1};

	return pel_put(t, g, c, &r, PEL_NEW);
}

int
pel_deliver(struct storage_txn *t, struct group_meta *g, struct consumer_meta *c,
	const struct stream_id *id, uint64_t now)
{
	struct pel_row r;
	uint64_t prev = PEL_NEW;
	int rc;

	rc = pel_get(t, g, id, &r);
	if (rc == 0) {
		prev = r.cid;
	} else if (rc != ECHD_ENOTFOUND) {
		return rc;
	}
	r.id = *id;
	r.cid = c->cid;
	r.delivery_time = now;
	r.delivery_count = 1;
	return pel_put(t, g, c, &r, prev);
}

int
pel_run_end(struct storage_txn *t, const struct group_meta *g, struct pel_run *run)
{
	int rc;

	if (run->n == 0 || run->cid == PEL_UNOWNED) {
		run->n = 0; /* released rows count in no consumer */
		return 0;
	}
	rc = consumer_adjust(t, g, run->cid, -(int64_t)run->n);
	run->n = 0;
	return rc;
}

int
pel_remove_run(struct storage_txn *t, struct group_meta *g, const struct stream_id *id,
	struct pel_run *run)
{
	unsigned char key[24];
	struct st_buf k = {key, 24};
	struct pel_row r;
	int rc;

	rc = pel_get(t, g, id, &r);
	if (rc != 0) {
		return rc;
	}
	pel_key(key, g->gid, id);
	rc = storage_del(t, STORAGE_T_PEL, &k);
	if (rc == 0 && r.cid != PEL_UNOWNED) {
		rc = cpel_set(t, g, r.cid, id, false);
	}
	if (rc == 0 && run->cid != r.cid) {
		rc = pel_run_end(t, g, run);
		run->cid = r.cid;
	}
	if (rc != 0) {
		return rc == ECHD_ENOTFOUND ? ECHD_ECORRUPT : rc;
	}
	if (g->pending == 0) {
		return ECHD_ECORRUPT;
	}
	g->pending--;
	run->n++;
	return 0;
}

int
pel_remove(struct storage_txn *t, struct group_meta *g, const struct stream_id *id)
{
	struct pel_run run = {0, 0};
	int rc;

	rc = pel_remove_run(t, g, id, &run);
	if (rc == 0) {
		rc = pel_run_end(t, g, &run);
	}
	return rc;
}

int
pel_last(struct storage_txn *t, const struct group_meta *g, struct stream_id *out)
{
	struct stream_id max = {UINT64_MAX, UINT64_MAX};
	unsigned char sk[24];
	struct storage_cursor *c;
	struct st_buf key, val, seek = {sk, 24};
	int rc;

	pel_key(sk, g->gid, &max);
	rc = storage_cursor_open(t, STORAGE_T_PEL, &c);
	if (rc != 0) {
		return rc;
	}
	rc = storage_cursor_seek_last(c, &seek, &key, &val);
	if (rc == 0 && (key.len != 24 || memcmp(key.data, sk, 8) != 0)) {
		rc = ECHD_ENOTFOUND;
	}
	if (rc == 0) {
		st_get_id((const unsigned char *)key.data + 8, out);
	}
	storage_cursor_close(c);
	return rc;
}

struct pel_iter {
	struct storage_txn *t;
	const struct group_meta *g;
	uint64_t gid, cid;
	struct stream_id next, end;
	struct storage_cursor *c; /* NULL before the first row */
	uint64_t writes;          /* storage_txn_writes(t) at c's last move */
	bool done;
};

int
pel_iter_create(struct storage_txn *t, const struct group_meta *g, uint64_t cid,
	const struct stream_id *start, const struct stream_id *end, struct pel_iter **out)
{
	struct pel_iter *it = echd_calloc(1, sizeof(*it));

	if (it == NULL) {
		return -ENOMEM;
	}
	it->t = t;
	it->g = g;
	it->gid = g->gid;
	it->cid = cid;
	it->next = *start;
	it->end = *end;
	it->done = stream_id_cmp(start, end) > 0;
	*out = it;
	return 0;
}

int
pel_iter_next(struct pel_iter *it, struct pel_row *r)
{
	unsigned char sk[32];
	struct st_buf key, val, seek = {sk, 0};
	struct stream_id id;
	size_t plen = it->cid ? 16 : 8;
	int rc;

	if (it->done) {
		return ECHD_ENOTFOUND;
	}
	seek.len = it->cid ? cpel_key(sk, it->gid, it->cid, &it->next)
			   : pel_key(sk, it->gid, &it->next);
	if (it->c == NULL) {
		rc = storage_cursor_open(it->t, it->cid ? STORAGE_T_CPEL : STORAGE_T_PEL, &it->c);
		if (rc != 0) {
			it->done = true;
			return rc;
		}
		rc = storage_cursor_seek(it->c, &seek, &key, &val);
	} else if (storage_txn_writes(it->t) != it->writes) {
		/* The caller wrote since the last row (the rule in storage.h):
		 * seek past that row again rather than move on. */
		rc = storage_cursor_seek(it->c, &seek, &key, &val);
	} else {
		rc = storage_cursor_next(it->c, &key, &val);
	}
	it->writes = storage_txn_writes(it->t);
	if (rc == 0 && (key.len != plen + 16 || memcmp(key.data, sk, plen) != 0)) {
		rc = ECHD_ENOTFOUND;
	}
	if (rc == 0) {
		st_get_id((const unsigned char *)key.data + plen, &id);
		if (stream_id_cmp(&id, &it->end) > 0) {
			rc = ECHD_ENOTFOUND;
		}
	}
	if (rc == 0 && it->cid == 0) {
		rc = pel_decode(&val, &id, r);
	}
	if (rc == 0 && it->cid != 0) {
		rc = pel_get(it->t, it->g, &id, r);
		if (rc == ECHD_ENOTFOUND) {
			rc = ECHD_ECORRUPT;
		}
	}
	if (rc != 0) {
		it->done = true;
		return rc;
	}
	it->next = id;
	if (!stream_id_incr(&it->next)) {
		it->done = true;
	}
	return 0;
}

void
pel_iter_destroy(struct pel_iter *it)
{
	if (it != NULL) {
		storage_cursor_close(it->c);
	}
	echd_free(it);
}

/* ---- references to entries (deletion policies) ---------------------------- */

struct ref_group {
	struct group_meta g;
	unsigned char *name; /* owned */
	size_t name_len;
	bool dirty;          /* g changed: group_refs_save() writes it */
};

struct group_refs {
	struct storage_txn *t;
	struct stream_meta m;     /* a copy: only its sid is used */
	struct ref_group *v;
	size_t n, cap;
	struct stream_id horizon; /* the lowest last-delivered id of the groups */
};

static int
refs_add(const struct st_buf *name, const struct group_meta *g, void *ud)
{
	struct group_refs *r = ud;
	struct ref_group *e;

	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 4;
		struct ref_group *v = echd_realloc(r->v, cap * sizeof(*v));
		if (v == NULL) {
			return -ENOMEM;
		}
		r->v = v;
		r->cap = cap;
	}
	e = &r->v[r->n];
	e->name = echd_malloc(name->len ? name->len : 1);
	if (e->name == NULL) {
		return -ENOMEM;
	}
	memcpy(e->name, name->data, name->len);
	e->name_len = name->len;
	e->g = *g;
	e->dirty = false;
	if (r->n == 0 || stream_id_cmp(&g->last_delivered, &r->horizon) < 0) {
		r->horizon = g->last_delivered;
	}
	r->n++;
	return 0;
}

int
group_refs_create(struct storage_txn *t, const struct stream_meta *m, struct group_refs **out)
{
	struct group_refs *r = echd_calloc(1, sizeof(*r));
	int rc;

	if (r == NULL) {
		return -ENOMEM;
	}
	r->t = t;
	r->m = *m;
	rc = group_each(t, m, refs_add, r);
	if (rc != 0) {
		group_refs_destroy(r);
		return rc;
	}
	*out = r;
	return 0;
}

void
group_refs_destroy(struct group_refs *r)
{
	if (r == NULL) {
		return;
	}
	for (size_t i = 0; i < r->n; i++) {
		echd_free(r->v[i].name);
	}
	echd_free(r->v);
	echd_free(r);
}

/* *out: the group gid has a PEL row in [first, last]. */
static int
pel_any_in(struct storage_txn *t, uint64_t gid, const struct stream_id *first,
	const struct stream_id *last, bool *out)
{
	unsigned char sk[24], ek[24];
	struct storage_cursor *c;
	struct st_buf key, val, seek = {sk, 24};
	int rc;

	pel_key(sk, gid, first);
	pel_key(ek, gid, last);
	rc = storage_cursor_open(t, STORAGE_T_PEL, &c);
	if (rc != 0) {
		return rc;
	}
	rc = storage_cursor_seek(c, &seek, &key, &val);
	if (rc == 0) {
		*out = key.len == 24 && memcmp(key.data, ek, 24) <= 0;
	} else if (rc == ECHD_ENOTFOUND) {
		*out = false;
		rc = 0;
	}
	storage_cursor_close(c);
	return rc;
}

int
group_refs_held(struct group_refs *r, const struct stream_id *first,
	const struct stream_id *last, bool *held, bool *stop)
{
	*held = *stop = false;
	if (r->n == 0) {
		return 0;
	}
	if (stream_id_cmp(first, &r->horizon) > 0) {
		*held = *stop = true;
		return 0;
	}
	if (stream_id_cmp(last, &r->horizon) > 0) {
		*held = true;
		return 0;
	}
	for (size_t i = 0; i < r->n && !*held; i++) {
		int rc;
		if (r->v[i].g.pending == 0) {
			continue;
		}
		rc = pel_any_in(r->t, r->v[i].g.gid, first, last, held);
		if (rc != 0) {
			return rc;
		}
	}
	return 0;
}

int
group_refs_drop(struct group_refs *r, const struct stream_id *id, uint64_t *n)
{
	uint64_t dropped = 0;

	for (size_t i = 0; i < r->n; i++) {
		int rc;
		if (r->v[i].g.pending == 0) {
			continue;
		}
		rc = pel_remove(r->t, &r->v[i].g, id);
		if (rc == ECHD_ENOTFOUND) {
			continue;
		}
		if (rc != 0) {
			return rc;
		}
		r->v[i].dirty = true;
		dropped++;
	}
	if (n != NULL) {
		*n = dropped;
	}
	return 0;
}

int
group_refs_save(struct group_refs *r)
{
	for (size_t i = 0; i < r->n; i++) {
		struct st_buf name = {r->v[i].name, r->v[i].name_len};
		int rc;
		if (!r->v[i].dirty) {
			continue;
		}
		rc = group_save(r->t, &r->m, &name, &r->v[i].g);
		if (rc != 0) {
			return rc;
		}
		r->v[i].dirty = false;
	}
	return 0;
}

static int
refs_held_hook(void *ud, const struct stream_id *first, const struct stream_id *last, bool *held,
	bool *stop)
{
	return group_refs_held(ud, first, last, held, stop);
}

static int
refs_drop_hook(void *ud, const struct stream_id *id)
{
	return group_refs_drop(ud, id, NULL);
}

void
group_refs_trim(struct group_refs *r, enum stream_ref_policy policy, struct stream_refs *out)
{
	out->policy = policy;
	out->held = refs_held_hook;
	out->drop = refs_drop_hook;
	out->ud = r;
}
