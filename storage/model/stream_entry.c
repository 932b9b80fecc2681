/* stream_entry.c - a stream's entries and the node rows that count them:
 * append, trim, delete, read and iterate. The row layout, the keys and
 * MEMORY USAGE are in stream.c.
 */
#include "stream.h"

#include <errno.h>
#include <string.h>

#include "echd.h"
#include "stream_impl.h"

/* ---- nodes: Redis' listpack sizes --------------------------------------- */

/* Bytes of a listpack element holding an integer. */
static uint64_t
lp_int_size(int64_t v)
{
	uint64_t enc;

	if (v >= 0 && v <= 127) {
		enc = 1;
	} else if (v >= -4096 && v <= 4095) {
		enc = 2;
	} else if (v >= -32768 && v <= 32767) {
		enc = 3;
	} else if (v >= -8388608 && v <= 8388607) {
		enc = 4;
	} else if (v >= INT32_MIN && v <= INT32_MAX) {
		enc = 5;
	} else {
		enc = 9;
	}
	return enc + 1; /* backlen of 1 byte: enc < 128 */
}

static uint64_t
lp_backlen_size(uint64_t l)
{
	if (l <= 127) {
		return 1;
	} else if (l < 16383) {
		return 2;
	} else if (l < 2097151) {
		return 3;
	} else if (l < 268435455) {
		return 4;
	}
	return 5;
}

/* A string the listpack would store as an integer (lpStringToInt64 rules). */
static bool
lp_string_int(const unsigned char *s, size_t len, int64_t *out)
{
	long long v;

	if (!echd_str2ll((const char *)s, len, &v)) {
		return false;
	}
	*out = (int64_t)v;
	return true;
}

static uint64_t
lp_str_size(const void *p, size_t len)
{
	int64_t iv;
	uint64_t enc;

	if (lp_string_int(p, len, &iv)) {
		return lp_int_size(iv);
	}
	if (len < 64) {
		enc = 1 + len;
	} else if (len < 4096) {
		enc = 2 + len;
	} else {
		enc = 5 + len;
	}
	return enc + lp_backlen_size(enc);
}

/* Node row value: live(8) deleted(8) entry_bytes(8) last(16) nfields(4)
 * { len(4) field }* -- the master fields decide Redis' SAMEFIELDS flag. */
struct node {
	struct stream_id first; /* the node's key */
	uint64_t live, deleted, entry_bytes;
	struct stream_id last; /* last entry, deleted or not */
	const unsigned char *fields; /* master fields part */
	size_t fields_len;
	uint32_t nfields;
	unsigned char *owned; /* fields copied out of the row (a later write in
			       * the transaction may move the stored value) */
};

static void
node_finish(struct node *n)
{
	ECHD_FREE(n->owned);
}

static int
node_decode(const struct st_buf *key, const struct st_buf *v, struct node *n)
{
	const unsigned char *p = v->data;

	n->owned = NULL;
	if (key->len != 24 || v->len < ST_NODE_FIXED) {
		return ECHD_ECORRUPT;
	}
	st_get_id((const unsigned char *)key->data + 8, &n->first);
	n->live = st_get_u64(p);
	n->deleted = st_get_u64(p + 8);
	n->entry_bytes = st_get_u64(p + 16);
	st_get_id(p + 24, &n->last);
	n->nfields = st_get_u32(p + 40);
	n->fields_len = v->len - ST_NODE_FIXED;
	n->owned = echd_malloc(n->fields_len ? n->fields_len : 1);
	if (n->owned == NULL) {
		return -ENOMEM;
	}
	memcpy(n->owned, p + ST_NODE_FIXED, n->fields_len);
	n->fields = n->owned;
	return 0;
}

static size_t
node_key(unsigned char *k, uint64_t sid, const struct stream_id *first)
{
	st_put_u64(k, sid);
	st_put_id(k + 8, first);
	return 24;
}

/* Writes the node row; fields/fields_len are the master fields part. */
static int
node_save(struct storage_txn *t, uint64_t sid, const struct node *n)
{
	unsigned char key[24], small[512], *val = small;
	size_t vlen = ST_NODE_FIXED + n->fields_len;
	struct st_buf k = {key, 24}, v;
	int rc;

	if (vlen > sizeof(small)) {
		val = echd_malloc(vlen);
		if (val == NULL) {
			return -ENOMEM;
		}
	}
	node_key(key, sid, &n->first);
	st_put_u64(val, n->live);
	st_put_u64(val + 8, n->deleted);
	st_put_u64(val + 16, n->entry_bytes);
	st_put_id(val + 24, &n->last);
	st_put_u32(val + 40, n->nfields);
	memmove(val + ST_NODE_FIXED, n->fields, n->fields_len);
	v.data = val;
	v.len = vlen;
	rc = storage_put(t, STORAGE_T_NODES, &k, &v, 0);
	if (val != small) {
		echd_free(val);
	}
	return rc;
}

static int
node_load(struct storage_txn *t, uint64_t sid, const struct stream_id *first, struct node *n)
{
	unsigned char key[24];
	struct st_buf k = {key, 24}, v;
	int rc;

	node_key(key, sid, first);
	rc = storage_get(t, STORAGE_T_NODES, &k, &v);
	if (rc != 0) {
		return rc == ECHD_ENOTFOUND ? ECHD_ECORRUPT : rc;
	}
	return node_decode(&k, &v, n);
}

/* The listpack's total bytes: header, master entry, entries, end byte. */
static uint64_t
node_lp_bytes(const struct node *n)
{
	uint64_t b = 6 + 1;
	size_t pos = 0;

	b += lp_int_size((int64_t)n->live) + lp_int_size((int64_t)n->deleted);
	b += lp_int_size(n->nfields);
	for (uint32_t i = 0; i < n->nfields && pos + 4 <= n->fields_len; i++) {
		uint32_t l = st_get_u32(n->fields + pos);
		b += lp_str_size(n->fields + pos + 4, l);
		pos += 4 + l;
	}
	b += lp_int_size(0);
	return b + n->entry_bytes;
}

static bool
node_same_fields(const struct node *n, const struct st_buf *fv, size_t nfv)
{
	size_t pos = 0;

	if (n->nfields != nfv / 2) {
		return false;
	}
	for (size_t i = 0; i < nfv; i += 2) {
		uint32_t l;
		if (pos + 4 > n->fields_len) {
			return false;
		}
		l = st_get_u32(n->fields + pos);
		if (l != fv[i].len || pos + 4 + l > n->fields_len ||
			memcmp(n->fields + pos + 4, fv[i].data, l) != 0) {
			return false;
		}
		pos += 4 + l;
	}
	return true;
}

/* The bytes one entry adds to its node's listpack. */
static uint64_t
entry_lp_size(const struct node *n, const struct stream_id *id, const struct st_buf *fv,
	size_t nfv, bool same)
{
	uint64_t b = 0, numfields = nfv / 2;
	int64_t lp_count;

	b += lp_int_size(same ? 2 : 0);
	b += lp_int_size((int64_t)(id->ms - n->first.ms));
	b += lp_int_size((int64_t)(id->seq - n->first.seq));
	if (!same) {
		b += lp_int_size((int64_t)numfields);
	}
	for (size_t i = 0; i < nfv; i++) {
		if (same && i % 2 == 0) {
			continue;
		}
		b += lp_str_size(fv[i].data, fv[i].len);
	}
	lp_count = (int64_t)numfields + 3;
	if (!same) {
		lp_count += (int64_t)numfields + 1;
	}
	return b + lp_int_size(lp_count);
}

/* ---- entries ------------------------------------------------------------ */

size_t
st_entry_key(unsigned char *k, uint64_t sid, const struct stream_id *id)
{
	st_put_u64(k, sid);
	st_put_id(k + 8, id);
	return 24;
}

static int
entry_put(struct storage_txn *t, uint64_t sid, const struct stream_id *id,
	const struct st_buf *fv, size_t nfv, unsigned flags)
{
	unsigned char key[24], small[1024], *val = small;
	size_t vlen = 4, pos;
	struct st_buf k = {key, 24}, v;
	int rc;

	for (size_t i = 0; i < nfv; i++) {
		vlen += 4 + fv[i].len;
	}
	if (vlen > sizeof(small)) {
		val = echd_malloc(vlen);
		if (val == NULL) {
			return -ENOMEM;
		}
	}
	st_put_u32(val, (uint32_t)(nfv / 2));
	pos = 4;
	for (size_t i = 0; i < nfv; i++) {
		st_put_u32(val + pos, (uint32_t)fv[i].len);
		memcpy(val + pos + 4, fv[i].data, fv[i].len);
		pos += 4 + fv[i].len;
	}
	st_entry_key(key, sid, id);
	v.data = val;
	v.len = vlen;
	/* Ids only grow, so the row goes at the end of its stream's range; a
	 * plain put keeps working when another stream's rows sort after it,
	 * and the caller says when none does (STORAGE_PUT_APPEND). */
	rc = storage_put(t, STORAGE_T_ENTRIES, &k, &v, flags);
	if (val != small) {
		echd_free(val);
	}
	return rc;
}

static int
master_fields_encode(const struct st_buf *fv, size_t nfv, unsigned char **out, size_t *len)
{
	size_t n = 0, pos = 0;
	unsigned char *p;

	for (size_t i = 0; i < nfv; i += 2) {
		n += 4 + fv[i].len;
	}
	p = echd_malloc(n ? n : 1);
	if (p == NULL) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < nfv; i += 2) {
		st_put_u32(p + pos, (uint32_t)fv[i].len);
		memcpy(p + pos + 4, fv[i].data, fv[i].len);
		pos += 4 + fv[i].len;
	}
	*out = p;
	*len = n;
	return 0;
}

/* A stream's tail node, decoded, kept between appends (see stream_impl.h). */
struct st_tail {
	struct node n;
	bool loaded; /* n is the stream's tail node */
	bool dirty;  /* n differs from its row */
};

int
st_tail_create(struct st_tail **out)
{
	struct st_tail *tl = echd_calloc(1, sizeof(*tl));

	if (tl == NULL) {
		return -ENOMEM;
	}
	*out = tl;
	return 0;
}

void
st_tail_destroy(struct st_tail *tl)
{
	if (tl != NULL) {
		node_finish(&tl->n);
		echd_free(tl);
	}
}

int
st_tail_append(struct storage_txn *t, struct stream_meta *m, struct st_tail *tl,
	const struct stream_id *id, const struct st_buf *fv, size_t nfv, uint64_t node_max_entries,
	uint64_t node_max_bytes, bool at_end)
{
	struct node fresh;
	bool new_node = true, same;
	uint64_t totelelen = 0;
	int rc;

	for (size_t i = 0; i < nfv; i++) {
		totelelen += fv[i].len;
	}
	if (node_max_bytes == 0 || node_max_bytes > (1u << 30)) {
		node_max_bytes = 1u << 30;
	}
	if (m->nodes > 0) {
		if (!tl->loaded) {
			rc = node_load(t, m->sid, &m->tail_node, &tl->n);
			if (rc != 0) {
				return rc;
			}
			tl->loaded = true;
			tl->dirty = false;
		}
		new_node = node_lp_bytes(&tl->n) + totelelen >= node_max_bytes ||
			(node_max_entries && tl->n.live + tl->n.deleted >= node_max_entries);
	}
	if (new_node && tl->loaded && tl->dirty) {
		/* the full node's last appends, before a new one begins */
		rc = node_save(t, m->sid, &tl->n);
		if (rc != 0) {
			return rc;
		}
		tl->dirty = false;
	}
	rc = entry_put(t, m->sid, id, fv, nfv, at_end ? STORAGE_PUT_APPEND : 0);
	if (rc != 0) {
		return rc;
	}
	if (new_node) {
		memset(&fresh, 0, sizeof(fresh));
		fresh.first = *id;
		fresh.nfields = (uint32_t)(nfv / 2);
		rc = master_fields_encode(fv, nfv, &fresh.owned, &fresh.fields_len);
		if (rc != 0) {
			return rc;
		}
		fresh.fields = fresh.owned;
		node_finish(&tl->n);
		tl->n = fresh;
		tl->loaded = true;
		same = true;
	} else {
		same = node_same_fields(&tl->n, fv, nfv);
	}
	tl->n.entry_bytes += entry_lp_size(&tl->n, id, fv, nfv, same);
	tl->n.live++;
	tl->n.last = *id;
	tl->dirty = true;
	if (new_node) {
		m->nodes++;
		m->tail_node = *id;
	}
	if (m->length == 0) {
		m->first = *id;
	}
	m->length++;
	m->last = *id;
	m->entries_added++;
	return 0;
}

int
st_tail_save(struct storage_txn *t, uint64_t sid, struct st_tail *tl)
{
	int rc;

	if (!tl->dirty) {
		return 0;
	}
	rc = node_save(t, sid, &tl->n);
	if (rc == 0) {
		tl->dirty = false;
	}
	return rc;
}

int
stream_append(struct storage_txn *t, struct stream_meta *m, const struct stream_id *id,
	const struct st_buf *fv, size_t nfv, uint64_t node_max_entries, uint64_t node_max_bytes)
{
	struct st_tail tl;
	int rc;

	memset(&tl, 0, sizeof(tl));
	rc = st_tail_append(t, m, &tl, id, fv, nfv, node_max_entries, node_max_bytes, false);
	if (rc == 0) {
		rc = st_tail_save(t, m->sid, &tl);
	}
	node_finish(&tl.n);
	return rc;
}

/* Finds the first live entry at or after from (or the stream's end). */
static int
first_live(struct storage_txn *t, struct stream_meta *m)
{
	struct stream_iter *it;
	struct stream_id start = {0, 0}, end = {UINT64_MAX, UINT64_MAX}, id;
	struct st_buf f;
	int rc;

	if (m->length == 0) {
		m->first.ms = m->first.seq = 0;
		return 0;
	}
	rc = stream_iter_create(t, m, &start, &end, false, &it);
	if (rc != 0) {
		return rc;
	}
	rc = stream_iter_next(it, &id, &f);
	stream_iter_destroy(it);
	if (rc == 0) {
		m->first = id;
	}
	return rc == ECHD_ENOTFOUND ? ECHD_ECORRUPT : rc;
}

/* Removes every entry row of node n and the node row itself; under
 * DELREF each removed entry's group records go too. */
static int
node_remove(struct storage_txn *t, struct stream_meta *m, const struct node *n,
	const struct stream_refs *refs)
{
	unsigned char from[24], nk[24];
	struct storage_cursor *c;
	struct st_buf key, val, seek = {from, 24}, k = {nk, 24};
	int rc;

	st_entry_key(from, m->sid, &n->first);
	rc = storage_cursor_open(t, STORAGE_T_ENTRIES, &c);
	if (rc != 0) {
		return rc;
	}
	rc = storage_cursor_seek(c, &seek, &key, &val);
	while (rc == 0) {
		struct stream_id id;
		if (key.len != 24 || memcmp(key.data, from, 8) != 0) {
			break;
		}
		st_get_id((const unsigned char *)key.data + 8, &id);
		if (stream_id_cmp(&id, &n->last) > 0) {
			break;
		}
		rc = storage_cursor_del(c);
		if (rc == 0 && refs != NULL && refs->policy == STREAM_REF_DEL) {
			rc = refs->drop(refs->ud, &id);
		}
		if (rc != 0) {
			break;
		}
		rc = storage_cursor_next(c, &key, &val);
	}
	storage_cursor_close(c);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return rc;
	}
	node_key(nk, m->sid, &n->first);
	rc = storage_del(t, STORAGE_T_NODES, &k);
	if (rc != 0) {
		return rc;
	}
	m->nodes--;
	return 0;
}

/* After the tail node was removed, the previous node (if any) is the tail. */
static int
tail_refresh(struct storage_txn *t, struct stream_meta *m)
{
	unsigned char sk[24];
	struct stream_id max = {UINT64_MAX, UINT64_MAX};
	struct storage_cursor *c;
	struct st_buf key, val, seek = {sk, 24};
	int rc;

	if (m->nodes == 0) {
		m->tail_node.ms = m->tail_node.seq = 0;
		return 0;
	}
	node_key(sk, m->sid, &max);
	rc = storage_cursor_open(t, STORAGE_T_NODES, &c);
	if (rc != 0) {
		return rc;
	}
	rc = storage_cursor_seek_last(c, &seek, &key, &val);
	if (rc == 0 && (key.len != 24 || memcmp(key.data, sk, 8) != 0)) {
		rc = ECHD_ECORRUPT;
	}
	if (rc == 0) {
		st_get_id((const unsigned char *)key.data + 8, &m->tail_node);
	}
	storage_cursor_close(c);
	return rc == ECHD_ENOTFOUND ? ECHD_ECORRUPT : rc;
}

/* Saves node n after entries of it were deleted, or removes its row when
 * none is left (refreshing the tail when it was the tail). */
static int
node_save_or_drop(struct storage_txn *t, struct stream_meta *m, const struct node *n)
{
	unsigned char nk[24];
	struct st_buf nkb = {nk, 24};
	int rc;

	if (n->live != 0) {
		return node_save(t, m->sid, n);
	}
	node_key(nk, m->sid, &n->first);
	rc = storage_del(t, STORAGE_T_NODES, &nkb);
	if (rc != 0) {
		return rc;
	}
	m->nodes--;
	if (stream_id_cmp(&n->first, &m->tail_node) == 0) {
		rc = tail_refresh(t, m);
	}
	return rc;
}

/* Deletes one entry row that is known to be in node n; updates n. */
static int
entry_del_in_node(struct storage_txn *t, struct stream_meta *m, struct node *n,
	const struct stream_id *id)
{
	unsigned char key[24];
	struct st_buf k = {key, 24};
	int rc;

	st_entry_key(key, m->sid, id);
	rc = storage_del(t, STORAGE_T_ENTRIES, &k);
	if (rc != 0) {
		return rc;
	}
	n->live--;
	n->deleted++;
	m->length--;
	return 0;
}

/* Exact trimming inside node n: deletes its entries in id order until the
 * stream is short enough or reaches minid; under ACKED it skips the
 * entries a group holds. *on is set when the node ran out first (only
 * ACKED gets there: otherwise the whole node would have gone). */
static int
trim_in_node(struct storage_txn *t, struct stream_meta *m, struct node *n,
	const struct stream_trim *tr, uint64_t *deleted, bool *on)
{
	const struct stream_refs *refs = tr->refs;
	unsigned char from[24];
	struct storage_cursor *c;
	struct st_buf key, val, seek = {from, 24};
	uint64_t before = *deleted;
	int rc;

	*on = false;
	st_entry_key(from, m->sid, &n->first);
	rc = storage_cursor_open(t, STORAGE_T_ENTRIES, &c);
	if (rc != 0) {
		return rc;
	}
	rc = storage_cursor_seek(c, &seek, &key, &val);
	for (;;) {
		struct stream_id id;
		bool held = false, stop = false;
		if (rc != 0 || key.len != 24 || memcmp(key.data, from, 8) != 0) {
			*on = true;
			break;
		}
		st_get_id((const unsigned char *)key.data + 8, &id);
		if (stream_id_cmp(&id, &n->last) > 0) {
			*on = true;
			break;
		}
		if (tr->strategy == STREAM_TRIM_MAXLEN ? m->length <= tr->maxlen
						       : stream_id_cmp(&id, &tr->minid) >= 0) {
			break;
		}
		if (refs != NULL && refs->policy == STREAM_REF_ACKED) {
			rc = refs->held(refs->ud, &id, &id, &held, &stop);
			if (rc != 0 || stop) {
				break;
			}
		}
		if (!held) {
			rc = storage_cursor_del(c);
			if (rc == 0 && refs != NULL && refs->policy == STREAM_REF_DEL) {
				rc = refs->drop(refs->ud, &id);
			}
			if (rc != 0) {
				break;
			}
			n->live--;
			n->deleted++;
			m->length--;
			(*deleted)++;
		}
		rc = storage_cursor_next(c, &key, &val);
	}
	storage_cursor_close(c);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return rc;
	}
	/* Nothing to trim writes nothing (the caller does not count it). A
	 * node left empty stays, as Redis keeps its listpack, until a later
	 * trim removes it whole. */
	return *deleted == before ? 0 : node_save(t, m->sid, n);
}

/* What trim_node() tells the trimming loop. */
#define TRIM_NEXT 1 /* the node went: look at the next one */
#define TRIM_STOP 2 /* done */
#define TRIM_ON   3 /* the node stays (ACKED kept some): look at the one after it */

/* Trims node n, the first one not yet looked at, as Redis' streamTrim()
 * does: a node the target passes whole (eligible) goes whole, or under
 * ACKED entry by entry, and the next node is looked at; the first node
 * that is not eligible is trimmed inside (exactly) and is the last. With
 * ~ KEEPREF stops there untouched; DELREF and ACKED trim inside it all the
 * same (Redis ignores ~ for them, but for its LIMIT). */
static int
trim_node(struct storage_txn *t, struct stream_meta *m, const struct stream_trim *tr,
	struct node *n, uint64_t *deleted)
{
	const struct stream_refs *refs = tr->refs;
	bool eligible, remove_node, on;
	int rc;

	if (tr->limit && *deleted + n->live > tr->limit) {
		return TRIM_STOP;
	}
	if (tr->strategy == STREAM_TRIM_MAXLEN) {
		eligible = m->length - n->live >= tr->maxlen;
	} else {
		eligible = stream_id_cmp(&n->last, &tr->minid) < 0;
	}
	remove_node = eligible;
	if (remove_node && refs != NULL && refs->policy == STREAM_REF_ACKED) {
		bool held, stop;
		rc = refs->held(refs->ud, &n->first, &n->last, &held, &stop);
		if (rc != 0) {
			return rc;
		}
		if (stop) {
			return TRIM_STOP;
		}
		remove_node = !held;
	}
	if (remove_node) {
		bool was_tail = stream_id_cmp(&n->first, &m->tail_node) == 0;
		rc = node_remove(t, m, n, refs);
		if (rc != 0) {
			return rc;
		}
		m->length -= n->live;
		*deleted += n->live;
		if (was_tail) {
			rc = tail_refresh(t, m);
			if (rc != 0) {
				return rc;
			}
		}
		return TRIM_NEXT;
	}
	if (tr->approx && (refs == NULL || refs->policy == STREAM_REF_KEEP)) {
		return TRIM_STOP;
	}
	/* Remove entries inside this node, in id order, until the target. */
	rc = trim_in_node(t, m, n, tr, deleted, &on);
	if (rc != 0) {
		return rc;
	}
	if (eligible && n->live == 0) {
		/* what held it was pending rows of entries already gone */
		rc = node_save_or_drop(t, m, n);
		if (rc != 0) {
			return rc;
		}
	}
	return eligible && on ? TRIM_ON : TRIM_STOP;
}

int
stream_trim(struct storage_txn *t, struct stream_meta *m, const struct stream_trim *tr,
	uint64_t *removed)
{
	unsigned char sk[24];
	uint64_t deleted = 0;
	int rc = 0;

	*removed = 0;
	if (tr->strategy == STREAM_TRIM_NONE) {
		return 0;
	}
	st_put_u64(sk, m->sid);
	memset(sk + 8, 0, 16);
	for (;;) {
		struct stream_id next;
		struct storage_cursor *c;
		struct st_buf key, val, seek = {sk, 24};
		struct node n;

		if (tr->strategy == STREAM_TRIM_MAXLEN && m->length <= tr->maxlen) {
			break;
		}
		rc = storage_cursor_open(t, STORAGE_T_NODES, &c);
		if (rc != 0) {
			return rc;
		}
		rc = storage_cursor_seek(c, &seek, &key, &val);
		if (rc == 0 && (key.len != 24 || memcmp(key.data, sk, 8) != 0)) {
			rc = ECHD_ENOTFOUND;
		}
		if (rc == 0) {
			rc = node_decode(&key, &val, &n);
		}
		storage_cursor_close(c);
		if (rc == ECHD_ENOTFOUND) {
			rc = 0;
			break;
		}
		if (rc != 0) {
			return rc;
		}
		rc = trim_node(t, m, tr, &n, &deleted);
		next = n.last;
		node_finish(&n);
		if (rc == TRIM_NEXT) {
			continue;
		}
		if (rc == TRIM_ON) {
			/* the next node starts after this one's last id */
			if (!stream_id_incr(&next)) {
				rc = 0;
				break;
			}
			st_put_id(sk + 8, &next);
			continue;
		}
		if (rc != TRIM_STOP) {
			return rc;
		}
		rc = 0;
		break;
	}
	if (m->length == 0) {
		m->first.ms = m->first.seq = 0;
	} else if (deleted) {
		rc = first_live(t, m);
		if (rc != 0) {
			return rc;
		}
	}
	*removed = deleted;
	return 0;
}

int
stream_delete_entry(struct storage_txn *t, struct stream_meta *m, const struct stream_id *id)
{
	unsigned char ek[24], sk[24];
	struct st_buf k = {ek, 24}, v, key, val, seek = {sk, 24};
	struct storage_cursor *c;
	struct node n;
	int rc;

	st_entry_key(ek, m->sid, id);
	rc = storage_get(t, STORAGE_T_ENTRIES, &k, &v);
	if (rc != 0) {
		return rc;
	}
	node_key(sk, m->sid, id);
	rc = storage_cursor_open(t, STORAGE_T_NODES, &c);
	if (rc != 0) {
		return rc;
	}
	rc = storage_cursor_seek_last(c, &seek, &key, &val);
	if (rc == 0 && (key.len != 24 || memcmp(key.data, sk, 8) != 0)) {
		rc = ECHD_ENOTFOUND;
	}
	if (rc == 0) {
		rc = node_decode(&key, &val, &n);
	}
	storage_cursor_close(c);
	if (rc != 0) {
		return rc == ECHD_ENOTFOUND ? ECHD_ECORRUPT : rc;
	}
	rc = entry_del_in_node(t, m, &n, id);
	if (rc != 0) {
		node_finish(&n);
		return rc;
	}
	rc = node_save_or_drop(t, m, &n);
	node_finish(&n);
	if (rc != 0) {
		return rc;
	}
	if (stream_id_cmp(id, &m->max_deleted) > 0) {
		m->max_deleted = *id;
	}
	if (m->length == 0) {
		m->first.ms = m->first.seq = 0;
	} else if (stream_id_cmp(id, &m->first) == 0) {
		rc = first_live(t, m);
	}
	return rc;
}

int
stream_get_entry(struct storage_txn *t, const struct stream_meta *m, const struct stream_id *id,
	struct st_buf *fields)
{
	unsigned char key[24];
	struct st_buf k = {key, 24};

	st_entry_key(key, m->sid, id);
	return storage_get(t, STORAGE_T_ENTRIES, &k, fields);
}

/* Counts the live entries in (after, last] of the node that holds after:
 * the entry rows themselves, at most one node's worth. */
static int
count_in_node(struct storage_txn *t, const struct stream_meta *m, const struct stream_id *after,
	const struct stream_id *last, uint64_t *n)
{
	struct stream_id start = *after, id;
	struct stream_iter *it;
	struct st_buf f;
	int rc;

	if (!stream_id_incr(&start)) {
		return 0;
	}
	rc = stream_iter_create(t, m, &start, last, false, &it);
	if (rc != 0) {
		return rc;
	}
	while ((rc = stream_iter_next(it, &id, &f)) == 0) {
		(*n)++;
	}
	stream_iter_destroy(it);
	return rc == ECHD_ENOTFOUND ? 0 : rc;
}

int
stream_count_after(struct storage_txn *t, const struct stream_meta *m,
	const struct stream_id *after, uint64_t *out)
{
	unsigned char sk[24];
	struct stream_id max = {UINT64_MAX, UINT64_MAX}, nfirst, nlast;
	struct storage_cursor *c;
	struct st_buf key, val, seek = {sk, 24};
	uint64_t n = 0;
	bool inside = false;
	int rc;

	if (m->length == 0 || stream_id_cmp(after, &m->last) >= 0) {
		*out = 0;
		return 0;
	}
	if (stream_id_cmp(after, &m->first) < 0) {
		*out = m->length;
		return 0;
	}
	/* From the tail back: whole nodes past after by their live count,
	 * then the entries of the node after falls in. */
	node_key(sk, m->sid, &max);
	rc = storage_cursor_open(t, STORAGE_T_NODES, &c);
	if (rc != 0) {
		return rc;
	}
	rc = storage_cursor_seek_last(c, &seek, &key, &val);
	while (rc == 0) {
		if (key.len != 24 || memcmp(key.data, sk, 8) != 0) {
			break;
		}
		if (val.len < ST_NODE_FIXED) {
			rc = ECHD_ECORRUPT;
			break;
		}
		st_get_id((const unsigned char *)key.data + 8, &nfirst);
		if (stream_id_cmp(&nfirst, after) <= 0) {
			st_get_id((const unsigned char *)val.data + 24, &nlast);
			inside = true;
			break;
		}
		n += st_get_u64(val.data);
		rc = storage_cursor_prev(c, &key, &val);
	}
	storage_cursor_close(c);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return rc;
	}
	if (inside) {
		rc = count_in_node(t, m, after, &nlast, &n);
		if (rc != 0) {
			return rc;
		}
	}
	*out = n;
	return 0;
}

/* ---- iteration ---------------------------------------------------------- */

struct stream_iter {
	struct storage_cursor *c;
	uint64_t sid;
	struct stream_id start, end;
	bool rev;
	bool started;
	bool done;
};

int
stream_iter_create(struct storage_txn *t, const struct stream_meta *m,
	const struct stream_id *start, const struct stream_id *end, bool rev,
	struct stream_iter **out)
{
	struct stream_iter *it = echd_calloc(1, sizeof(*it));
	int rc;

	if (it == NULL) {
		return -ENOMEM;
	}
	rc = storage_cursor_open(t, STORAGE_T_ENTRIES, &it->c);
	if (rc != 0) {
		echd_free(it);
		return rc;
	}
	it->sid = m->sid;
	it->start = *start;
	it->end = *end;
	it->rev = rev;
	it->done = stream_id_cmp(start, end) > 0 || m->length == 0;
	*out = it;
	return 0;
}

void
stream_iter_ahead(struct stream_iter *it, unsigned rows)
{
	storage_cursor_ahead(it->c, rows);
}

int
stream_iter_next(struct stream_iter *it, struct stream_id *id, struct st_buf *fields)
{
	unsigned char sk[24];
	struct st_buf key, val, seek = {sk, 24};
	struct stream_id cur;
	int rc;

	if (it->done) {
		return ECHD_ENOTFOUND;
	}
	if (!it->started) {
		it->started = true;
		st_entry_key(sk, it->sid, it->rev ? &it->end : &it->start);
		rc = it->rev ? storage_cursor_seek_last(it->c, &seek, &key, &val)
			     : storage_cursor_seek(it->c, &seek, &key, &val);
	} else {
		rc = it->rev ? storage_cursor_prev(it->c, &key, &val)
			     : storage_cursor_next(it->c, &key, &val);
	}
	if (rc != 0) {
		it->done = true;
		return rc;
	}
	st_put_u64(sk, it->sid);
	if (key.len != 24 || memcmp(key.data, sk, 8) != 0) {
		it->done = true;
		return ECHD_ENOTFOUND;
	}
	st_get_id((const unsigned char *)key.data + 8, &cur);
	if (it->rev ? stream_id_cmp(&cur, &it->start) < 0 : stream_id_cmp(&cur, &it->end) > 0) {
		it->done = true;
		return ECHD_ENOTFOUND;
	}
	*id = cur;
	*fields = val;
	return 0;
}

void
stream_iter_destroy(struct stream_iter *it)
{
	if (it == NULL) {
		return;
	}
	storage_cursor_close(it->c);
	echd_free(it);
}

size_t
stream_fields_count(const struct st_buf *fields)
{
	if (fields->len < 4) {
		return 0;
	}
	return st_get_u32(fields->data);
}

bool
stream_fields_next(const struct st_buf *fields, size_t *pos, struct st_buf *f, struct st_buf *v)
{
	const unsigned char *p = fields->data;
	size_t at = *pos == 0 ? 4 : *pos;
	uint32_t l;

	if (at + 4 > fields->len) {
		return false;
	}
	l = st_get_u32(p + at);
	if (at + 4 + l + 4 > fields->len) {
		return false;
	}
	f->data = p + at + 4;
	f->len = l;
	at += 4 + l;
	l = st_get_u32(p + at);
	if (at + 4 + l > fields->len) {
		return false;
	}
	v->data = p + at + 4;
	v->len = l;
	*pos = at + 4 + l;
	return true;
}
