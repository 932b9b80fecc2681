/* group.c - consumer groups, consumers and pending-entries lists. */
#include "group.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "echd.h"
#include "stream_impl.h"

#define GROUP_VLEN   (8 + 16 + 8 + 8 + 8)
/* The policy tail after a group record: a version byte, then version 1's
 * fields (4 u64, nbackoff u32, the values, dl_len u32, the key). A later
 * version appends after these. */
#define POLICY_V1    1
#define POLICY_FIXED (1 + 4 * 8 + 4 + 4)
/* Then, last, the count of released rows: a tag byte and a u64. Every
 * record is written with it; one without it (written before the count
 * was kept) reads its count from the PEL. */
#define NACKED_TAG   2
#define NACKED_LEN   (1 + 8)
#define GROUP_VMAX   (GROUP_VLEN + POLICY_FIXED + 8 * GROUP_BACKOFF_MAX + GROUP_DEADLETTER_MAX + \
		      NACKED_LEN)
#define CONSREC_FIXED (8 + 8 + 8)
#define PEL_VLEN     (8 + 8 + 8)
#define DUE_KLEN     (8 + 1 + 8 + 16)

static int due_drop_stored(struct storage_txn *t, const struct group_meta *g,
	const struct stream_id *id);

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

static bool
policy_stored(const struct group_policy *p)
{
	return group_policy_active(p) || p->dead_lettered != 0;
}

static void
put_u32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

static uint32_t
get_u32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Writes the policy tail at p; returns its length. */
static size_t
policy_encode(unsigned char *p, const struct group_policy *pol)
{
	size_t n = 0;

	p[n++] = POLICY_V1;
	st_put_u64(p + n, pol->ack_wait);
	st_put_u64(p + n + 8, pol->max_deliver);
	st_put_u64(p + n + 16, pol->max_ack_pending);
	st_put_u64(p + n + 24, pol->dead_lettered);
	n += 32;
	put_u32(p + n, pol->nbackoff);
	n += 4;
	for (uint32_t i = 0; i < pol->nbackoff; i++, n += 8) {
		st_put_u64(p + n, pol->backoff[i]);
	}
	put_u32(p + n, pol->dl_len);
	n += 4;
	memcpy(p + n, pol->dl, pol->dl_len);
	return n + pol->dl_len;
}

/* Writes g's record at p (GROUP_VMAX bytes); returns its length. */
static size_t
group_encode(unsigned char *p, const struct group_meta *g)
{
	const struct group_policy *pol = &g->policy;
	size_t n = GROUP_VLEN;

	st_put_u64(p, g->gid);
	st_put_id(p + 8, &g->last_delivered);
	st_put_u64(p + 24, (uint64_t)g->entries_read);
	st_put_u64(p + 32, g->pending);
	st_put_u64(p + 40, g->consumers);
	if (policy_stored(pol)) {
		n += policy_encode(p + n, pol);
	}
	p[n] = NACKED_TAG;
	st_put_u64(p + n + 1, g->nacked);
	return n + NACKED_LEN;
}

/* Reads the policy tail at p (len bytes left); *used gets its length. */
static int
policy_decode(const unsigned char *p, size_t len, struct group_policy *pol, size_t *used)
{
	size_t n = 1;

	if (len < POLICY_FIXED || p[0] != POLICY_V1) {
		return ECHD_ECORRUPT;
	}
	pol->ack_wait = st_get_u64(p + n);
	pol->max_deliver = st_get_u64(p + n + 8);
	pol->max_ack_pending = st_get_u64(p + n + 16);
	pol->dead_lettered = st_get_u64(p + n + 24);
	n += 32;
	pol->nbackoff = get_u32(p + n);
	n += 4;
	if (pol->nbackoff > GROUP_BACKOFF_MAX || len < POLICY_FIXED + 8 * (size_t)pol->nbackoff) {
		return ECHD_ECORRUPT;
	}
	for (uint32_t i = 0; i < pol->nbackoff; i++, n += 8) {
		pol->backoff[i] = st_get_u64(p + n);
	}
	pol->dl_len = get_u32(p + n);
	n += 4;
	if (pol->dl_len > GROUP_DEADLETTER_MAX || len < n + pol->dl_len) {
		return ECHD_ECORRUPT;
	}
	memcpy(pol->dl, p + n, pol->dl_len);
	*used = n + pol->dl_len;
	return 0;
}

static int nacked_recount(struct storage_txn *t, struct group_meta *g);

/* Reads a group record (v borrowed) into g; a record from before the
 * released-row count was kept gets it by a walk of the PEL in t. */
static int
group_decode(struct storage_txn *t, const struct st_buf *v, struct group_meta *g)
{
	const unsigned char *p = v->data;
	size_t rest, used;
	int rc;

	if (v->len < GROUP_VLEN) {
		return ECHD_ECORRUPT;
	}
	memset(g, 0, sizeof(*g));
	g->gid = st_get_u64(p);
	st_get_id(p + 8, &g->last_delivered);
	g->entries_read = (int64_t)st_get_u64(p + 24);
	g->pending = st_get_u64(p + 32);
	g->consumers = st_get_u64(p + 40);
	p += GROUP_VLEN;
	rest = v->len - GROUP_VLEN;
	if (rest > 0 && p[0] == POLICY_V1) {
		rc = policy_decode(p, rest, &g->policy, &used);
		if (rc != 0) {
			return rc;
		}
		p += used;
		rest -= used;
	}
	if (rest == NACKED_LEN && p[0] == NACKED_TAG) {
		g->nacked = st_get_u64(p + 1);
		return 0;
	}
	if (rest != 0) {
		return ECHD_ECORRUPT;
	}
	return nacked_recount(t, g);
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
		rc = group_decode(t, &v, out);
	}
	namekey_finish(&k);
	return rc;
}

int
group_save(struct storage_txn *t, const struct stream_meta *m, const struct st_buf *name,
	const struct group_meta *g)
{
	unsigned char val[GROUP_VMAX];
	struct namekey k;
	struct st_buf kb, v = {val, 0};
	int rc;

	rc = namekey_init(&k, m->sid, name);
	if (rc != 0) {
		return rc;
	}
	kb.data = k.p;
	kb.len = k.len;
	v.len = group_encode(val, g);
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
	struct storage_txn *t;
	group_fn fn;
	void *ud;
};

static int
group_row(const struct st_buf *name, const struct st_buf *val, void *ud)
{
	struct group_walk *w = ud;
	struct group_meta g;
	int rc = group_decode(w->t, val, &g);

	return rc != 0 ? rc : w->fn(name, &g, w->ud);
}

int
group_each(struct storage_txn *t, const struct stream_meta *m, group_fn fn, void *ud)
{
	struct group_walk w = {t, fn, ud};

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
		if (group_policy_timed(&g->policy)) {
			struct stream_id id;

			st_get_id(pk + 8, &id);
			rc = due_drop_stored(t, g, &id);
			if (rc != 0) {
				break;
			}
		}
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
	unsigned char rec[GROUP_VMAX];

	u->bytes += 8 + name->len + group_encode(rec, g); /* with its policy */
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
		if (rc == 0) {
			/* keyed by group, deadline and id: the same under the copy's id */
			rc = st_copy_rows(t, STORAGE_T_DUE, og, ng, NULL, NULL);
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

/* ---- due rows ----------------------------------------------------------- */

static pel_due_hook_fn due_hook;
static void *due_hook_ud;

void
pel_due_hook_set(pel_due_hook_fn fn, void *ud)
{
	due_hook = fn;
	due_hook_ud = ud;
}

static size_t
due_key(unsigned char *k, uint64_t gid, enum pel_due_kind kind, uint64_t at,
	const struct stream_id *id)
{
	st_put_u64(k, gid);
	k[8] = (unsigned char)kind;
	st_put_u64(k + 9, at);
	st_put_id(k + 17, id);
	return DUE_KLEN;
}

bool
pel_due_of(const struct group_policy *p, const struct pel_row *r, enum pel_due_kind *kind,
	uint64_t *at)
{
	uint64_t when = pel_deadline(p, r);

	if (when == UINT64_MAX) {
		return false; /* no timed policy, or no deadline */
	}
	*at = when;
	*kind = p->max_deliver != 0 && r->delivery_count >= p->max_deliver ? PEL_DUE_DEAD
									    : PEL_DUE_REDELIVER;
	return true;
}

/* Writes (present) or deletes r's due row under g's policy. A missing
 * row is not an error: a PEL written before due rows has none until the
 * broker rebuilds them. */
static int
due_set(struct storage_txn *t, const struct group_meta *g, const struct pel_row *r, bool present)
{
	unsigned char key[DUE_KLEN];
	struct st_buf k = {key, DUE_KLEN}, empty = {"", 0};
	enum pel_due_kind kind;
	uint64_t at;
	int rc;

	if (!pel_due_of(&g->policy, r, &kind, &at)) {
		return 0;
	}
	due_key(key, g->gid, kind, at, &r->id);
	if (!present) {
		rc = storage_del(t, STORAGE_T_DUE, &k);
		return rc == ECHD_ENOTFOUND ? 0 : rc;
	}
	rc = storage_put(t, STORAGE_T_DUE, &k, &empty, 0);
	if (rc == 0 && due_hook != NULL) {
		due_hook(due_hook_ud, g->gid, at);
	}
	return rc;
}

/* Deletes r's due row, r being the stored PEL row of id (read here). */
static int
due_drop_stored(struct storage_txn *t, const struct group_meta *g, const struct stream_id *id)
{
	struct pel_row old;
	int rc;

	if (!group_policy_timed(&g->policy)) {
		return 0;
	}
	rc = pel_get(t, g, id, &old);
	if (rc == ECHD_ENOTFOUND) {
		return 0;
	}
	return rc == 0 ? due_set(t, g, &old, false) : rc;
}

int
pel_put(struct storage_txn *t, struct group_meta *g, struct consumer_meta *c,
	const struct pel_row *r, uint64_t prev_cid)
{
	uint64_t cid = c ? c->cid : PEL_UNOWNED;
	int rc;

	assert(r->cid == cid);
	if (prev_cid != PEL_NEW) {
		rc = due_drop_stored(t, g, &r->id);
		if (rc != 0) {
			return rc;
		}
	}
	if (prev_cid != cid) {
		if (cid == PEL_UNOWNED) {
			g->nacked++;
		}
		if (prev_cid == PEL_NEW) {
			g->pending++;
		} else if (prev_cid == PEL_UNOWNED) {
			if (g->nacked == 0) {
				return ECHD_ECORRUPT;
			}
			g->nacked--;
		} else {
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
	rc = pel_write(t, g, r);
	if (rc == 0 && group_policy_timed(&g->policy)) {
		rc = due_set(t, g, r, true);
	}
	return rc;
}

int
pel_release(struct storage_txn *t, struct group_meta *g, const struct pel_row *r,
	uint64_t prev_cid)
{
	return pel_release_until(t, g, r, prev_cid, 0);
}

int
pel_release_until(struct storage_txn *t, struct group_meta *g, const struct pel_row *r,
	uint64_t prev_cid, uint64_t until)
{
	struct pel_row u = *r;

	u.cid = PEL_UNOWNED;
	u.delivery_time = until;
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
	if (rc == 0 && group_policy_timed(&g->policy)) {
		rc = due_set(t, g, &r, false);
	}
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
	if (g->pending == 0 || (r.cid == PEL_UNOWNED && g->nacked == 0)) {
		return ECHD_ECORRUPT;
	}
	g->pending--;
	if (r.cid == PEL_UNOWNED) {
		g->nacked--;
	}
	run->n++;
	return 0;
}

static int
nacked_recount(struct storage_txn *t, struct group_meta *g)
{
	struct stream_id lo = {0, 0}, hi = {UINT64_MAX, UINT64_MAX};
	struct pel_iter *it;
	struct pel_row r;
	int rc;

	g->nacked = 0;
	if (g->pending == 0) {
		return 0;
	}
	rc = pel_iter_create(t, g, 0, &lo, &hi, &it);
	if (rc != 0) {
		return rc;
	}
	while ((rc = pel_iter_next(it, &r)) == 0) {
		g->nacked += r.cid == PEL_UNOWNED;
	}
	pel_iter_destroy(it);
	return rc == ECHD_ENOTFOUND ? 0 : rc;
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

/* ---- policies ----------------------------------------------------------- */

bool
group_policy_active(const struct group_policy *p)
{
	return p->ack_wait != 0 || p->nbackoff != 0 || p->max_deliver != 0 ||
		p->max_ack_pending != 0 || p->dl_len != 0;
}

bool
group_policy_timed(const struct group_policy *p)
{
	return p->ack_wait != 0 || p->nbackoff != 0;
}

uint64_t
group_policy_wait(const struct group_policy *p, uint64_t count)
{
	if (p->nbackoff > 0) {
		uint64_t i = count == 0 ? 0 : count - 1;
		return p->backoff[i < p->nbackoff ? i : p->nbackoff - 1];
	}
	return p->ack_wait;
}

uint64_t
pel_deadline(const struct group_policy *p, const struct pel_row *r)
{
	uint64_t wait;

	if (!group_policy_timed(p)) {
		return UINT64_MAX;
	}
	if (r->cid == PEL_UNOWNED) {
		return r->delivery_time;
	}
	wait = group_policy_wait(p, r->delivery_count);
	if (wait == 0 || r->delivery_time > UINT64_MAX - wait) {
		return UINT64_MAX;
	}
	return r->delivery_time + wait;
}

int
pel_due_collect(struct storage_txn *t, const struct group_meta *g, enum pel_due_kind kind,
	uint64_t now, size_t limit, struct pel_due *out)
{
	unsigned char sk[9];
	struct st_buf key, val, seek = {sk, 9};
	struct storage_cursor *c;
	int rc;

	out->n = 0;
	out->next = UINT64_MAX;
	if (!group_policy_timed(&g->policy)) {
		return 0;
	}
	st_put_u64(sk, g->gid);
	sk[8] = (unsigned char)kind;
	rc = storage_cursor_open(t, STORAGE_T_DUE, &c);
	if (rc != 0) {
		return rc;
	}
	rc = storage_cursor_seek(c, &seek, &key, &val);
	while (rc == 0) {
		const unsigned char *k = key.data;
		enum pel_due_kind rkind;
		struct pel_row r;
		struct stream_id id;
		uint64_t at, rat;

		if (key.len != DUE_KLEN || memcmp(k, sk, 9) != 0) {
			rc = ECHD_ENOTFOUND;
			break;
		}
		at = st_get_u64(k + 9);
		if (at > now || (limit != 0 && out->n == limit)) {
			out->next = at;
			break;
		}
		st_get_id(k + 17, &id);
		rc = pel_get(t, g, &id, &r);
		if (rc == 0 && (!pel_due_of(&g->policy, &r, &rkind, &rat) || rkind != kind ||
				       rat != at)) {
			rc = ECHD_ENOTFOUND; /* not this row's due row */
		}
		if (rc == ECHD_ENOTFOUND) {
			rc = storage_cursor_del(c);
			if (rc == 0) {
				rc = storage_cursor_next(c, &key, &val);
			}
			continue;
		}
		if (rc != 0) {
			break;
		}
		if (out->n == out->cap) {
			size_t ncap = out->cap ? out->cap * 2 : 16;
			struct pel_due_row *nr = echd_realloc(out->rows, ncap * sizeof(*nr));
			if (nr == NULL) {
				rc = -ENOMEM;
				break;
			}
			out->rows = nr;
			out->cap = ncap;
		}
		out->rows[out->n].at = at;
		out->rows[out->n++].row = r;
		rc = storage_cursor_next(c, &key, &val);
	}
	storage_cursor_close(c);
	return rc == ECHD_ENOTFOUND ? 0 : rc;
}

int
pel_due_any(struct storage_txn *t, const struct group_meta *g, bool *any)
{
	unsigned char sk[8];
	struct st_buf key, val, seek = {sk, 8};
	struct storage_cursor *c;
	int rc;

	st_put_u64(sk, g->gid);
	rc = storage_cursor_open(t, STORAGE_T_DUE, &c);
	if (rc != 0) {
		return rc;
	}
	rc = storage_cursor_seek(c, &seek, &key, &val);
	storage_cursor_close(c);
	if (rc == 0) {
		*any = key.len == DUE_KLEN && memcmp(key.data, sk, 8) == 0;
	} else if (rc == ECHD_ENOTFOUND) {
		*any = false;
		rc = 0;
	}
	return rc;
}

int
pel_due_rebuild(struct storage_txn *t, const struct group_meta *g)
{
	struct stream_id lo = {0, 0}, hi = {UINT64_MAX, UINT64_MAX};
	unsigned char sk[8];
	unsigned budget = UINT_MAX;
	struct pel_iter *it;
	struct pel_row r;
	bool done;
	int rc;

	st_put_u64(sk, g->gid);
	rc = st_delete_prefix(t, STORAGE_T_DUE, sk, 8, &budget, &done);
	if (rc != 0) {
		return rc;
	}
	if (!group_policy_timed(&g->policy) || g->pending == 0) {
		return 0;
	}
	rc = pel_iter_create(t, g, 0, &lo, &hi, &it);
	if (rc != 0) {
		return rc;
	}
	while ((rc = pel_iter_next(it, &r)) == 0) {
		rc = due_set(t, g, &r, true);
		if (rc != 0) {
			break;
		}
	}
	pel_iter_destroy(it);
	return rc == ECHD_ENOTFOUND ? 0 : rc;
}

void
pel_due_finish(struct pel_due *d)
{
	ECHD_FREE(d->rows);
	d->n = d->cap = 0;
}

/* The record's own fields before the entry's pairs. */
#define DL_HEAD 12

static int
dl_append(struct storage_txn *t, const struct group_meta *g, const struct dead_letter *d,
	const struct st_buf *fv, size_t nfv)
{
	struct st_buf dk = {g->policy.dl, g->policy.dl_len};
	struct stream_meta dm;
	struct stream_id id;
	int rc;

	rc = stream_lookup(t, d->db, &dk, &dm);
	if (rc == ECHD_ENOTFOUND) {
		rc = stream_create(t, d->db, &dk, &dm);
	}
	if (rc != 0) {
		return rc;
	}
	/* '*': the time now, or past the last id when the clock is behind */
	id.ms = d->now;
	id.seq = 0;
	if (stream_id_cmp(&id, &dm.last) <= 0) {
		id = dm.last;
		if (!stream_id_incr(&id)) {
			return ECHD_ELIMIT;
		}
	}
	rc = stream_append(t, &dm, &id, fv, nfv, d->node_max_entries, d->node_max_bytes);
	if (rc == 0) {
		rc = stream_meta_save(t, d->db, &dk, &dm);
	}
	return rc;
}

int
pel_dead_letter(struct storage_txn *t, const struct stream_meta *m, struct group_meta *g,
	const struct pel_row *r, const struct dead_letter *d)
{
	struct st_buf fields, f, v, *fv = NULL, cname = {"", 0};
	struct consumer_meta c;
	char idbuf[48], cnt[24];
	size_t nfv = DL_HEAD, pos = 0;
	bool have_entry = false;
	void *copy = NULL;
	int rc = 0;

	if (g->policy.dl_len > 0) {
		if (r->cid != PEL_UNOWNED) {
			rc = consumer_by_id(t, g, r->cid, &c, &cname);
			if (rc != 0) {
				return rc == ECHD_ENOTFOUND ? ECHD_ECORRUPT : rc;
			}
		}
		rc = stream_get_entry(t, m, &r->id, &fields);
		if (rc == 0) {
			have_entry = true;
			nfv += 2 * stream_fields_count(&fields);
		} else if (rc != ECHD_ENOTFOUND) {
			return rc;
		}
		/* The borrowed values must outlive the appends below. */
		copy = echd_malloc(cname.len + (have_entry ? fields.len : 0) + 1);
		fv = echd_malloc(nfv * sizeof(*fv));
		if (copy == NULL || fv == NULL) {
			rc = -ENOMEM;
			goto out;
		}
		memcpy(copy, cname.data, cname.len);
		cname.data = copy;
		if (have_entry) {
			memcpy((char *)copy + cname.len, fields.data, fields.len);
			fields.data = (char *)copy + cname.len;
		}
		fv[0] = (struct st_buf){"stream", 6};
		fv[1] = *d->key;
		fv[2] = (struct st_buf){"id", 2};
		fv[3] = (struct st_buf){idbuf, stream_id_format(&r->id, idbuf)};
		fv[4] = (struct st_buf){"group", 5};
		fv[5] = *d->group;
		fv[6] = (struct st_buf){"consumer", 8};
		fv[7] = cname;
		fv[8] = (struct st_buf){"deliveries", 10};
		fv[9] = (struct st_buf){cnt, (size_t)snprintf(cnt, sizeof(cnt), "%llu",
						     (unsigned long long)r->delivery_count)};
		fv[10] = (struct st_buf){"reason", 6};
		fv[11] = (struct st_buf){d->reason, strlen(d->reason)};
		for (size_t i = DL_HEAD; have_entry && stream_fields_next(&fields, &pos, &f, &v);
			i += 2) {
			fv[i] = f;
			fv[i + 1] = v;
		}
		rc = dl_append(t, g, d, fv, nfv);
		if (rc != 0) {
			goto out;
		}
	}
	rc = pel_remove(t, g, &r->id);
	if (rc == 0) {
		g->policy.dead_lettered++;
	}
out:
	echd_free(fv);
	echd_free(copy);
	return rc;
}

struct policy_walk {
	struct storage_txn *t;
	unsigned ndb;
	group_policy_fn fn;
	void *ud;
};

/* The stream's name and database from its internal id: one lookup per
 * database (BYID is keyed by db + sid). */
static int
key_of_sid(struct storage_txn *t, unsigned ndb, uint64_t sid, unsigned *db, struct st_buf *name)
{
	unsigned char bk[9];
	struct st_buf k = {bk, sizeof(bk)};

	for (unsigned i = 0; i < ndb && i < 256; i++) {
		int rc;

		bk[0] = (unsigned char)i;
		st_put_u64(bk + 1, sid);
		rc = storage_get(t, STORAGE_T_BYID, &k, name);
		if (rc != ECHD_ENOTFOUND) {
			*db = i;
			return rc;
		}
	}
	return ECHD_ENOTFOUND;
}

int
group_policy_each(struct storage_txn *t, unsigned ndb, group_policy_fn fn, void *ud)
{
	struct storage_cursor *c;
	struct st_buf key, val;
	int rc;

	rc = storage_cursor_open(t, STORAGE_T_GROUPS, &c);
	if (rc != 0) {
		return rc;
	}
	rc = storage_cursor_seek(c, NULL, &key, &val);
	while (rc == 0) {
		struct group_meta g;
		struct st_buf gname, kname;
		unsigned db;

		if (key.len < 8) {
			rc = ECHD_ECORRUPT;
			break;
		}
		rc = group_decode(t, &val, &g);
		if (rc != 0) {
			break;
		}
		if (group_policy_active(&g.policy)) {
			gname.data = (const unsigned char *)key.data + 8;
			gname.len = key.len - 8;
			rc = key_of_sid(t, ndb, st_get_u64(key.data), &db, &kname);
			if (rc == 0) {
				rc = fn(db, &kname, &gname, &g, ud);
			} else if (rc == ECHD_ENOTFOUND) {
				rc = 0; /* a deleted stream's group, awaiting collection */
			}
			if (rc != 0) {
				break;
			}
		}
		rc = storage_cursor_next(c, &key, &val);
	}
	storage_cursor_close(c);
	return rc == ECHD_ENOTFOUND ? 0 : rc;
}
