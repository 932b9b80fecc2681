/* stream.c - streams as rows in the storage tables.
 *
 * Key layout (all integers big-endian, so byte order is numeric order):
 *   keys     db(1) namelen(4) name        -> stream metadata (see meta_encode)
 *   byid     db(1) sid(8)                 -> name
 *   entries  sid(8) ms(8) seq(8)          -> nfields(4) { len(4) bytes }*
 *   nodes    sid(8) ms(8) seq(8)          -> node bookkeeping (see node_encode)
 *   meta     "next-sid"                   -> u64
 *            "dbsize" db(1)               -> u64
 *   trash    'S' sid(8) | 'G' gid(8)      -> (empty): rows still to delete
 *   idmp     sid(8) ...                   -> idempotent producers (stream_idmp.c)
 *
 * A node row stands for one of Redis' listpack nodes: it counts live and
 * deleted entries and the bytes the listpack would hold, so that node
 * boundaries, and with them `~` trimming, fall where Redis puts them.
 *
 * This file holds the keys: ids, a stream's metadata row, and what is done
 * to a key as a whole (lookup, create, rename, copy, move, expiry, deletion
 * and the deferred removal of its rows). The entries and their nodes
 * (append, trim, delete, read, iterate) are in stream_entry.c.
 */
#include "stream.h"

#include <errno.h>
#include <string.h>

#include "echd.h"
#include "stream_impl.h"

#define META_VERSION 1
#define META_LEN     (1 + 8 * 8 + 16 * 4)
#define KEY_MAX      (1 + 4 + 512 * 1024 * 1024)

/* ---- ids ---------------------------------------------------------------- */

int
stream_id_cmp(const struct stream_id *a, const struct stream_id *b)
{
	if (a->ms != b->ms) {
		return a->ms < b->ms ? -1 : 1;
	}
	if (a->seq != b->seq) {
		return a->seq < b->seq ? -1 : 1;
	}
	return 0;
}

int
stream_id_parse(const char *s, size_t len, uint64_t missing_seq, bool allow_minmax,
	struct stream_id *out)
{
	const char *dash, *nul;
	struct stream_id id;

	if (len > STREAM_ID_MAX_TEXT) {
		return ECHD_EINVAL;
	}
	nul = memchr(s, '\0', len);
	if (nul != NULL) {
		len = (size_t)(nul - s);
	}
	if (len == 1 && (s[0] == '-' || s[0] == '+')) {
		if (!allow_minmax) {
			return ECHD_EINVAL;
		}
		id.ms = id.seq = s[0] == '-' ? 0 : UINT64_MAX;
		*out = id;
		return 0;
	}
	dash = memchr(s, '-', len);
	if (dash == NULL) {
		if (!echd_str2ull(s, len, &id.ms)) {
			return ECHD_EINVAL;
		}
		id.seq = missing_seq;
	} else {
		if (!echd_str2ull(s, (size_t)(dash - s), &id.ms) ||
			!echd_str2ull(dash + 1, len - (size_t)(dash - s) - 1, &id.seq)) {
			return ECHD_EINVAL;
		}
	}
	*out = id;
	return 0;
}

/* Two digits at a time from the end: every XADD's reply formats an id. */
static size_t
u64_format(uint64_t v, char *buf)
{
	static const char pairs[] = "00010203040506070809101112131415161718192021222324"
				    "25262728293031323334353637383940414243444546474849"
				    "50515253545556575859606162636465666768697071727374"
				    "75767778798081828384858687888990919293949596979899";
	size_t n = 1;

	for (uint64_t t = v; t >= 10; t /= 10) {
		n++;
	}
	for (size_t i = n; v >= 10; v /= 100) {
		unsigned d = (unsigned)(v % 100);
		buf[--i] = pairs[2 * d + 1];
		buf[--i] = pairs[2 * d];
		if (v < 100) {
			return n;
		}
	}
	buf[0] = (char)('0' + v);
	return n;
}

size_t
stream_id_format(const struct stream_id *id, char *buf)
{
	/* Ids formatted one after another mostly share their ms (a turn's
	 * XADDs, a range's entries): its digits are kept. */
	static _Thread_local uint64_t last_ms;
	static _Thread_local char ms_text[24];
	static _Thread_local size_t ms_len; /* 0: none kept yet */
	size_t n;

	if (ms_len == 0 || id->ms != last_ms) {
		ms_len = u64_format(id->ms, ms_text);
		last_ms = id->ms;
	}
	memcpy(buf, ms_text, ms_len);
	n = ms_len;
	buf[n++] = '-';
	n += u64_format(id->seq, buf + n);
	buf[n] = '\0';
	return n;
}

bool
stream_id_incr(struct stream_id *id)
{
	if (id->seq == UINT64_MAX) {
		if (id->ms == UINT64_MAX) {
			return false;
		}
		id->ms++;
		id->seq = 0;
		return true;
	}
	id->seq++;
	return true;
}

bool
stream_id_decr(struct stream_id *id)
{
	if (id->seq == 0) {
		if (id->ms == 0) {
			return false;
		}
		id->ms--;
		id->seq = UINT64_MAX;
		return true;
	}
	id->seq--;
	return true;
}

/* ---- metadata ----------------------------------------------------------- */

/* Builds the keys-table key in buf; returns its length or 0 if too long. */
static size_t
keys_key(unsigned char *buf, size_t cap, unsigned db, const struct st_buf *name)
{
	if (name->len > UINT32_MAX || 5 + name->len > cap) {
		return 0;
	}
	buf[0] = (unsigned char)db;
	st_put_u32(buf + 1, (uint32_t)name->len);
	memcpy(buf + 5, name->data, name->len);
	return 5 + name->len;
}

static void
meta_encode(unsigned char *p, const struct stream_meta *m)
{
	p[0] = META_VERSION;
	p += 1;
	st_put_u64(p, m->sid);
	st_put_u64(p + 8, m->length);
	st_put_u64(p + 16, m->entries_added);
	st_put_u64(p + 24, m->nodes);
	st_put_u64(p + 32, m->groups);
	st_put_u64(p + 40, m->expire_ms); /* was reserved (0) before expiry */
	st_put_u64(p + 48, 0); /* reserved */
	st_put_u64(p + 56, 0);
	p += 64;
	st_put_id(p, &m->first);
	st_put_id(p + 16, &m->last);
	st_put_id(p + 32, &m->max_deleted);
	st_put_id(p + 48, &m->tail_node);
}

static int
meta_decode(const struct st_buf *v, struct stream_meta *m)
{
	const unsigned char *p = v->data;

	if (v->len < META_LEN || p[0] != META_VERSION) {
		return ECHD_ECORRUPT;
	}
	p += 1;
	m->sid = st_get_u64(p);
	m->length = st_get_u64(p + 8);
	m->entries_added = st_get_u64(p + 16);
	m->nodes = st_get_u64(p + 24);
	m->groups = st_get_u64(p + 32);
	m->expire_ms = st_get_u64(p + 40);
	p += 64;
	st_get_id(p, &m->first);
	st_get_id(p + 16, &m->last);
	st_get_id(p + 32, &m->max_deleted);
	st_get_id(p + 48, &m->tail_node);
	return 0;
}

/* Runs fn with the keys-table key of (db, name) built on the stack or heap. */
/* LMDB keys are at most 511 bytes. A longer name keeps its first
 * KEY_NAME_INLINE bytes in the key, then two 64-bit hashes of the whole
 * name; the whole name is kept in the value and checked on lookup. */
#define KEY_NAME_DIRECT 470
#define KEY_NAME_INLINE 443

struct keybuf {
	unsigned char small[KEY_NAME_DIRECT + 5];
	unsigned char *p;
	size_t len;
	bool hashed;
};

static uint64_t
hash64(const unsigned char *p, size_t n, uint64_t h, uint64_t prime)
{
	for (size_t i = 0; i < n; i++) {
		h = (h ^ p[i]) * prime;
	}
	return h ^ (h >> 29);
}

static int
keybuf_init(struct keybuf *kb, unsigned db, const struct st_buf *name)
{
	const unsigned char *np = name->data;

	kb->p = kb->small;
	kb->hashed = false;
	if (name->len > UINT32_MAX) {
		return ECHD_EINVAL;
	}
	if (name->len <= KEY_NAME_DIRECT) {
		kb->len = keys_key(kb->p, sizeof(kb->small), db, name);
		return 0;
	}
	kb->hashed = true;
	kb->p[0] = (unsigned char)db;
	st_put_u32(kb->p + 1, (uint32_t)name->len);
	memcpy(kb->p + 5, np, KEY_NAME_INLINE);
	st_put_u64(kb->p + 5 + KEY_NAME_INLINE,
		hash64(np, name->len, 14695981039346656037ULL, 1099511628211ULL));
	st_put_u64(kb->p + 13 + KEY_NAME_INLINE,
		hash64(np, name->len, 0x9e3779b97f4a7c15ULL, 0x100000001b3ULL ^ 0x5bd1e995ULL));
	kb->len = 21 + KEY_NAME_INLINE;
	return 0;
}

static void
keybuf_finish(struct keybuf *kb)
{
	if (kb->p != kb->small) {
		echd_free(kb->p);
	}
}

int
stream_lookup(struct storage_txn *t, unsigned db, const struct st_buf *name,
	struct stream_meta *out)
{
	struct keybuf kb;
	struct st_buf k, v;
	int rc;

	rc = keybuf_init(&kb, db, name);
	if (rc != 0) {
		return rc;
	}
	k.data = kb.p;
	k.len = kb.len;
	rc = storage_get(t, STORAGE_T_KEYS, &k, &v);
	if (rc == 0 && kb.hashed &&
		(v.len != META_LEN + name->len ||
			memcmp((const unsigned char *)v.data + META_LEN, name->data, name->len) != 0)) {
		/* another long name with the same prefix and hashes */
		rc = ECHD_EINVAL;
	}
	if (rc == 0) {
		rc = meta_decode(&v, out);
	}
	keybuf_finish(&kb);
	return rc;
}

int
stream_meta_save(struct storage_txn *t, unsigned db, const struct st_buf *name,
	const struct stream_meta *m)
{
	unsigned char small[META_LEN], *val = small;
	struct keybuf kb;
	struct st_buf k, v;
	int rc;

	rc = keybuf_init(&kb, db, name);
	if (rc != 0) {
		return rc;
	}
	v.len = META_LEN;
	if (kb.hashed) {
		v.len += name->len;
		val = echd_malloc(v.len);
		if (val == NULL) {
			keybuf_finish(&kb);
			return -ENOMEM;
		}
		memcpy(val + META_LEN, name->data, name->len);
	}
	meta_encode(val, m);
	k.data = kb.p;
	k.len = kb.len;
	v.data = val;
	rc = storage_put(t, STORAGE_T_KEYS, &k, &v, 0);
	if (val != small) {
		echd_free(val);
	}
	keybuf_finish(&kb);
	return rc;
}

static int
meta_u64_get(struct storage_txn *t, const void *key, size_t klen, uint64_t *out)
{
	struct st_buf k = {key, klen}, v;
	int rc = storage_get(t, STORAGE_T_META, &k, &v);

	if (rc == ECHD_ENOTFOUND) {
		*out = 0;
		return 0;
	}
	if (rc != 0) {
		return rc;
	}
	if (v.len != 8) {
		return ECHD_ECORRUPT;
	}
	*out = st_get_u64(v.data);
	return 0;
}

static int
meta_u64_put(struct storage_txn *t, const void *key, size_t klen, uint64_t val)
{
	unsigned char buf[8];
	struct st_buf k = {key, klen}, v = {buf, 8};

	st_put_u64(buf, val);
	return storage_put(t, STORAGE_T_META, &k, &v, 0);
}

static int
dbsize_add(struct storage_txn *t, unsigned db, int delta)
{
	unsigned char key[7] = {'d', 'b', 's', 'i', 'z', 'e', (unsigned char)db};
	uint64_t n;
	int rc = meta_u64_get(t, key, sizeof(key), &n);

	if (rc != 0) {
		return rc;
	}
	if (delta < 0 && n < (uint64_t)-delta) {
		return ECHD_ECORRUPT;
	}
	return meta_u64_put(t, key, sizeof(key), n + (uint64_t)(int64_t)delta);
}

int
stream_db_size(struct storage_txn *t, unsigned db, uint64_t *out)
{
	unsigned char key[7] = {'d', 'b', 's', 'i', 'z', 'e', (unsigned char)db};
	return meta_u64_get(t, key, sizeof(key), out);
}

static int
byid_put(struct storage_txn *t, unsigned db, uint64_t sid, const struct st_buf *name)
{
	unsigned char key[9];
	struct st_buf k = {key, 9};

	key[0] = (unsigned char)db;
	st_put_u64(key + 1, sid);
	return storage_put(t, STORAGE_T_BYID, &k, name, 0);
}

static int
byid_del(struct storage_txn *t, unsigned db, uint64_t sid)
{
	unsigned char key[9];
	struct st_buf k = {key, 9};

	key[0] = (unsigned char)db;
	st_put_u64(key + 1, sid);
	return storage_del(t, STORAGE_T_BYID, &k);
}

/* expires: when_ms(8) db(1) sid(8) -> (empty). Big-endian, so the
 * earliest expiry sorts first. */
#define EXPIRES_KEY_LEN 17

static void
expires_key(unsigned char *k, uint64_t when_ms, unsigned db, uint64_t sid)
{
	st_put_u64(k, when_ms);
	k[8] = (unsigned char)db;
	st_put_u64(k + 9, sid);
}

static int
expires_row(struct storage_txn *t, uint64_t when_ms, unsigned db, uint64_t sid, bool add)
{
	unsigned char kb[EXPIRES_KEY_LEN];
	struct st_buf k = {kb, sizeof(kb)}, empty = {"", 0};

	int rc;

	expires_key(kb, when_ms, db, sid);
	if (add) {
		return storage_put(t, STORAGE_T_EXPIRES, &k, &empty, 0);
	}
	rc = storage_del(t, STORAGE_T_EXPIRES, &k);
	/* Missing only if the index lost a row (`echo-admin check` reports
	 * it): deleting or changing the key still goes on. */
	return rc == ECHD_ENOTFOUND ? 0 : rc;
}

int
st_next_id(struct storage_txn *t, uint64_t *out)
{
	static const char next_key[] = "next-sid";
	uint64_t id;
	int rc;

	rc = meta_u64_get(t, next_key, sizeof(next_key) - 1, &id);
	if (rc != 0) {
		return rc;
	}
	id++; /* ids start at 1; 0 is the SCAN end marker */
	rc = meta_u64_put(t, next_key, sizeof(next_key) - 1, id);
	if (rc == 0) {
		*out = id;
	}
	return rc;
}

int
st_trash_add(struct storage_txn *t, enum st_trash_kind kind, uint64_t id)
{
	unsigned char tk[9];
	struct st_buf k = {tk, 9}, empty = {"", 0};

	tk[0] = (unsigned char)kind;
	st_put_u64(tk + 1, id);
	return storage_put(t, STORAGE_T_TRASH, &k, &empty, 0);
}

/* Schedules a dropped stream's rows, and its groups', for deletion. The
 * group rows go at once (a stream has few groups); their PEL and consumer
 * rows, like the entries, go in later batches. */
static int
trash_stream(struct storage_txn *t, uint64_t sid)
{
	unsigned char prefix[8];
	struct storage_cursor *c;
	struct st_buf key, val, seek = {prefix, 8};
	int rc;

	st_put_u64(prefix, sid);
	rc = storage_cursor_open(t, STORAGE_T_GROUPS, &c);
	if (rc != 0) {
		return rc;
	}
	rc = storage_cursor_seek(c, &seek, &key, &val);
	while (rc == 0) {
		if (key.len < 8 || memcmp(key.data, prefix, 8) != 0 || val.len < 8) {
			rc = ECHD_ENOTFOUND;
			break;
		}
		rc = st_trash_add(t, ST_TRASH_GROUP, st_get_u64(val.data));
		if (rc == 0) {
			rc = storage_cursor_del(c);
		}
		if (rc == 0) {
			rc = storage_cursor_next(c, &key, &val);
		}
	}
	storage_cursor_close(c);
	if (rc != ECHD_ENOTFOUND) {
		return rc;
	}
	return st_trash_add(t, ST_TRASH_STREAM, sid);
}

int
stream_create(struct storage_txn *t, unsigned db, const struct st_buf *name,
	struct stream_meta *out)
{
	struct stream_meta m;
	uint64_t sid;
	int rc;

	rc = st_next_id(t, &sid);
	if (rc != 0) {
		return rc;
	}
	memset(&m, 0, sizeof(m));
	m.sid = sid;
	rc = stream_meta_save(t, db, name, &m);
	if (rc == 0) {
		rc = byid_put(t, db, sid, name);
	}
	if (rc == 0) {
		rc = dbsize_add(t, db, 1);
	}
	if (rc == 0) {
		*out = m;
	}
	return rc;
}

/* Removes the key's own rows: its row in KEYS and in BYID, its expiry
 * row, and its count in db. The rows it names stay. */
static int
key_unlink(struct storage_txn *t, unsigned db, const struct st_buf *name,
	const struct stream_meta *m)
{
	struct keybuf kb;
	struct st_buf kk;
	int rc;

	rc = keybuf_init(&kb, db, name);
	if (rc != 0) {
		return rc;
	}
	kk.data = kb.p;
	kk.len = kb.len;
	rc = storage_del(t, STORAGE_T_KEYS, &kk);
	keybuf_finish(&kb);
	if (rc != 0) {
		return rc;
	}
	rc = byid_del(t, db, m->sid);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return rc;
	}
	rc = dbsize_add(t, db, -1);
	if (rc == 0 && m->expire_ms != 0) {
		rc = expires_row(t, m->expire_ms, db, m->sid, false);
	}
	return rc;
}

/* Removes the key row and schedules its rows for deletion. */
static int
key_drop(struct storage_txn *t, unsigned db, const struct st_buf *name, const struct stream_meta *m)
{
	int rc = key_unlink(t, db, name, m);

	return rc != 0 ? rc : trash_stream(t, m->sid);
}

/* Bytes read before a chunk of st_copy_rows() is written. */
#define COPY_CHUNK_BYTES (256u * 1024)

int
st_copy_rows(struct storage_txn *t, enum storage_table tb, uint64_t from, uint64_t to,
	st_copy_fn fn, void *ud)
{
	unsigned char prefix[8], *buf = NULL, *last = NULL;
	size_t cap = 0, used, pos, lastlen = 0;
	bool more = true;
	int rc = 0;

	st_put_u64(prefix, from);
	while (more && rc == 0) {
		struct storage_cursor *c;
		struct st_buf key, val, seek = {prefix, 8};

		if (last != NULL) {
			seek.data = last;
			seek.len = lastlen;
		}
		rc = storage_cursor_open(t, tb, &c);
		if (rc != 0) {
			break;
		}
		rc = storage_cursor_seek(c, &seek, &key, &val);
		if (rc == 0 && last != NULL && key.len == lastlen &&
			memcmp(key.data, last, lastlen) == 0) {
			rc = storage_cursor_next(c, &key, &val); /* copied already */
		}
		used = 0;
		while (rc == 0) {
			size_t need = 8 + key.len + val.len;
			if (key.len < 8 || memcmp(key.data, prefix, 8) != 0) {
				rc = ECHD_ENOTFOUND;
				break;
			}
			if (used > 0 && used + need > COPY_CHUNK_BYTES) {
				break; /* written first; the walk goes on after it */
			}
			if (used + need > cap) {
				size_t ncap = cap ? cap : 4096;
				unsigned char *nb;
				while (ncap < used + need) {
					ncap *= 2;
				}
				nb = echd_realloc(buf, ncap);
				if (nb == NULL) {
					rc = -ENOMEM;
					break;
				}
				buf = nb;
				cap = ncap;
			}
			st_put_u32(buf + used, (uint32_t)key.len);
			st_put_u32(buf + used + 4, (uint32_t)val.len);
			memcpy(buf + used + 8, key.data, key.len);
			memcpy(buf + used + 8 + key.len, val.data, val.len);
			used += need;
			rc = storage_cursor_next(c, &key, &val);
		}
		storage_cursor_close(c);
		more = rc == 0;
		if (rc == ECHD_ENOTFOUND || rc == 0) {
			rc = 0;
		}
		for (pos = 0; rc == 0 && pos < used;) {
			size_t klen = st_get_u32(buf + pos), vlen = st_get_u32(buf + pos + 4);
			unsigned char *kp = buf + pos + 8, *vp = kp + klen;
			struct st_buf k = {kp, klen}, v = {vp, vlen};

			if (pos + 8 + klen + vlen == used) {
				/* the walk resumes after this source key */
				unsigned char *nl = echd_realloc(last, klen);
				if (nl == NULL) {
					rc = -ENOMEM;
					break;
				}
				memcpy(nl, kp, klen);
				last = nl;
				lastlen = klen;
			}
			st_put_u64(kp, to);
			if (fn != NULL) {
				rc = fn(kp, klen, vp, vlen, ud);
			}
			if (rc == 0) {
				rc = storage_put(t, tb, &k, &v, 0);
			}
			pos += 8 + klen + vlen;
		}
	}
	echd_free(buf);
	echd_free(last);
	return rc;
}

/* Looks (db, name) up into *m for a copy or move to (dst, dst_name):
 * ECHD_EEXIST when the destination is taken. */
static int
lookup_to_free(struct storage_txn *t, unsigned db, const struct st_buf *name, unsigned dst,
	const struct st_buf *dst_name, struct stream_meta *m)
{
	struct stream_meta there;
	int rc = stream_lookup(t, db, name, m);

	if (rc == 0) {
		rc = stream_lookup(t, dst, dst_name, &there);
		rc = rc == 0 ? ECHD_EEXIST : rc == ECHD_ENOTFOUND ? 0 : rc;
	}
	return rc;
}

int
stream_copy(struct storage_txn *t, unsigned db, const struct st_buf *name, unsigned dst,
	const struct st_buf *dst_name, struct stream_meta *out)
{
	struct stream_meta m, there;
	int rc = lookup_to_free(t, db, name, dst, dst_name, &m);

	if (rc == 0) {
		rc = stream_create(t, dst, dst_name, &there);
	}
	if (rc == 0) {
		rc = st_copy_rows(t, STORAGE_T_ENTRIES, m.sid, there.sid, NULL, NULL);
	}
	if (rc == 0) {
		rc = st_copy_rows(t, STORAGE_T_NODES, m.sid, there.sid, NULL, NULL);
	}
	if (rc == 0) {
		rc = stream_idmp_copy(t, m.sid, there.sid);
	}
	if (rc != 0) {
		return rc;
	}
	*out = m; /* groups too: group_copy() makes their rows */
	out->sid = there.sid;
	out->expire_ms = 0; /* set below, with its expiry row */
	rc = stream_meta_save(t, dst, dst_name, out);
	if (rc == 0 && m.expire_ms != 0) {
		rc = stream_set_expire(t, dst, dst_name, out, m.expire_ms);
	}
	return rc;
}

int
stream_move(struct storage_txn *t, unsigned db, const struct st_buf *name, unsigned dst)
{
	struct stream_meta m;
	int rc = lookup_to_free(t, db, name, dst, name, &m);

	if (rc == 0) {
		rc = key_unlink(t, db, name, &m);
	}
	if (rc == 0) {
		rc = stream_meta_save(t, dst, name, &m);
	}
	if (rc == 0) {
		rc = byid_put(t, dst, m.sid, name);
	}
	if (rc == 0) {
		rc = dbsize_add(t, dst, 1);
	}
	if (rc == 0 && m.expire_ms != 0) {
		rc = expires_row(t, m.expire_ms, dst, m.sid, true);
	}
	return rc;
}

int
stream_delete(struct storage_txn *t, unsigned db, const struct st_buf *name)
{
	struct stream_meta m;
	int rc = stream_lookup(t, db, name, &m);

	if (rc != 0) {
		return rc;
	}
	return key_drop(t, db, name, &m);
}

int
stream_rename(struct storage_txn *t, unsigned db, const struct st_buf *from,
	const struct st_buf *to)
{
	struct stream_meta m, dst;
	struct keybuf kb;
	struct st_buf k;
	int rc;

	rc = stream_lookup(t, db, from, &m);
	if (rc != 0) {
		return rc;
	}
	if (from->len == to->len && memcmp(from->data, to->data, from->len) == 0) {
		return 0;
	}
	rc = stream_lookup(t, db, to, &dst);
	if (rc == 0) {
		rc = key_drop(t, db, to, &dst);
	} else if (rc == ECHD_ENOTFOUND) {
		rc = 0;
	}
	if (rc != 0) {
		return rc;
	}
	rc = keybuf_init(&kb, db, from);
	if (rc != 0) {
		return rc;
	}
	k.data = kb.p;
	k.len = kb.len;
	rc = storage_del(t, STORAGE_T_KEYS, &k);
	keybuf_finish(&kb);
	if (rc == 0) {
		rc = stream_meta_save(t, db, to, &m);
	}
	if (rc == 0) {
		rc = byid_put(t, db, m.sid, to);
	}
	return rc;
}

int
stream_flush(struct storage_txn *t, unsigned db, bool all_dbs)
{
	struct storage_cursor *c;
	struct st_buf key, val, seek;
	unsigned char start = (unsigned char)db;
	int rc;

	rc = storage_cursor_open(t, STORAGE_T_KEYS, &c);
	if (rc != 0) {
		return rc;
	}
	seek.data = &start;
	seek.len = 1;
	rc = storage_cursor_seek(c, all_dbs ? NULL : &seek, &key, &val);
	while (rc == 0) {
		const unsigned char *kp = key.data;
		struct stream_meta m;
		struct st_buf name;

		if (key.len < 5 || (!all_dbs && kp[0] != db)) {
			break;
		}
		rc = meta_decode(&val, &m);
		if (rc != 0) {
			break;
		}
		name.data = kp + 5;
		name.len = key.len - 5;
		rc = byid_del(t, kp[0], m.sid);
		if (rc != 0 && rc != ECHD_ENOTFOUND) {
			break;
		}
		if (m.expire_ms != 0) {
			rc = expires_row(t, m.expire_ms, kp[0], m.sid, false);
			if (rc != 0) {
				break;
			}
		}
		rc = trash_stream(t, m.sid);
		if (rc != 0) {
			break;
		}
		(void)name;
		rc = storage_cursor_del(c);
		if (rc != 0) {
			break;
		}
		rc = storage_cursor_next(c, &key, &val);
	}
	storage_cursor_close(c);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return rc;
	}
	for (unsigned d = all_dbs ? 0 : db; d <= (all_dbs ? 255u : db); d++) {
		unsigned char dk[7] = {'d', 'b', 's', 'i', 'z', 'e', (unsigned char)d};
		struct st_buf k = {dk, sizeof(dk)};
		rc = storage_del(t, STORAGE_T_META, &k);
		if (rc != 0 && rc != ECHD_ENOTFOUND) {
			return rc;
		}
	}
	return 0;
}

int
stream_set_expire(struct storage_txn *t, unsigned db, const struct st_buf *name,
	struct stream_meta *m, uint64_t when_ms)
{
	int rc = 0;

	if (m->expire_ms == when_ms) {
		return 0;
	}
	if (m->expire_ms != 0) {
		rc = expires_row(t, m->expire_ms, db, m->sid, false);
	}
	if (rc == 0 && when_ms != 0) {
		rc = expires_row(t, when_ms, db, m->sid, true);
	}
	if (rc != 0) {
		return rc;
	}
	m->expire_ms = when_ms;
	return stream_meta_save(t, db, name, m);
}

/* One due row of EXPIRES, read before any is dropped (dropping deletes
 * rows of the table the cursor walks). */
struct expiry {
	uint64_t when_ms;
	uint64_t sid;
	unsigned db;
};

/* Drops the key an EXPIRES row names. A row whose key is gone or has
 * another expiry time is a broken invariant: it goes, the key stays. */
static int
expire_one(struct storage_txn *t, const struct expiry *e, stream_expired_fn fn, void *ud)
{
	unsigned char bk[9];
	struct st_buf k = {bk, sizeof(bk)}, v, name = {NULL, 0};
	struct stream_meta m;
	void *copy = NULL;
	int rc;

	bk[0] = (unsigned char)e->db;
	st_put_u64(bk + 1, e->sid);
	rc = storage_get(t, STORAGE_T_BYID, &k, &v);
	if (rc == 0) {
		/* v points into the table that key_drop() changes */
		copy = echd_malloc(v.len ? v.len : 1);
		if (copy == NULL) {
			return -ENOMEM;
		}
		memcpy(copy, v.data, v.len);
		name.data = copy;
		name.len = v.len;
		rc = stream_lookup(t, e->db, &name, &m);
	}
	if (rc == 0 && m.sid == e->sid && m.expire_ms == e->when_ms) {
		if (fn != NULL) {
			fn(e->db, &name, ud);
		}
		rc = key_drop(t, e->db, &name, &m);
	} else if (rc == 0 || rc == ECHD_ENOTFOUND) {
		echd_log(ECHD_LOG_WARNING,
			"expiry row of stream %llu in db %u at %llu ms matches no key; removed",
			(unsigned long long)e->sid, e->db, (unsigned long long)e->when_ms);
		rc = expires_row(t, e->when_ms, e->db, e->sid, false);
	}
	echd_free(copy);
	return rc;
}

/* Opens a cursor on EXPIRES at its first row. ECHD_ENOTFOUND, and no
 * cursor, when the table is empty or missing (read-only, on an environment
 * of an echd before expiry). */
static int
expires_first(struct storage_txn *t, struct storage_cursor **c, struct st_buf *key,
	struct st_buf *val)
{
	int rc = storage_cursor_open(t, STORAGE_T_EXPIRES, c);

	if (rc == 0) {
		rc = storage_cursor_seek(*c, NULL, key, val);
		if (rc != 0) {
			storage_cursor_close(*c);
		}
	}
	if (rc != 0) {
		*c = NULL;
	}
	return rc;
}

/* Due rows read per cursor walk; a larger budget takes several walks. */
#define EXPIRE_CHUNK 64

/* One walk: drops up to budget (<= EXPIRE_CHUNK) due keys. */
static int
expire_chunk(struct storage_txn *t, uint64_t now_ms, unsigned budget, stream_expired_fn fn,
	void *ud, unsigned *n, uint64_t *next_ms)
{
	struct expiry due[EXPIRE_CHUNK];
	struct storage_cursor *c;
	struct st_buf key, val;
	unsigned nd = 0;
	int rc;

	*next_ms = 0;
	rc = expires_first(t, &c, &key, &val);
	while (rc == 0) {
		const unsigned char *kp = key.data;
		if (key.len != EXPIRES_KEY_LEN) {
			rc = ECHD_ECORRUPT;
			break;
		}
		if (st_get_u64(kp) > now_ms) {
			*next_ms = st_get_u64(kp);
			break;
		}
		if (nd == budget) {
			*next_ms = now_ms;
			break;
		}
		due[nd].when_ms = st_get_u64(kp);
		due[nd].db = kp[8];
		due[nd].sid = st_get_u64(kp + 9);
		nd++;
		rc = storage_cursor_next(c, &key, &val);
	}
	if (c != NULL) {
		storage_cursor_close(c);
	}
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return rc;
	}
	for (unsigned i = 0; i < nd; i++) {
		rc = expire_one(t, &due[i], fn, ud);
		if (rc != 0) {
			return rc;
		}
		(*n)++;
	}
	return 0;
}

int
stream_expire_due(struct storage_txn *t, uint64_t now_ms, unsigned budget,
	stream_expired_fn fn, void *ud, unsigned *n, uint64_t *next_ms)
{
	int rc;

	*n = 0;
	do {
		unsigned step = budget - *n < EXPIRE_CHUNK ? budget - *n : EXPIRE_CHUNK;
		rc = expire_chunk(t, now_ms, step, fn, ud, n, next_ms);
	} while (rc == 0 && *next_ms == now_ms && *n < budget);
	return rc;
}

int
stream_expires_stat(struct storage_txn *t, uint64_t now_ms, uint64_t *count, uint64_t *avg_ttl)
{
	struct storage_cursor *c;
	struct st_buf key, val;
	long double sum[256] = {0}; /* a u64 sum wraps: TTLs go up to 2^63 ms */
	int rc;

	memset(count, 0, 256 * sizeof(*count));
	rc = expires_first(t, &c, &key, &val);
	while (rc == 0) {
		const unsigned char *kp = key.data;
		uint64_t when;

		if (key.len != EXPIRES_KEY_LEN) {
			rc = ECHD_ECORRUPT;
			break;
		}
		when = st_get_u64(kp);
		if (when > now_ms) {
			count[kp[8]]++;
			sum[kp[8]] += (long double)(when - now_ms);
		}
		rc = storage_cursor_next(c, &key, &val);
	}
	if (c != NULL) {
		storage_cursor_close(c);
	}
	for (int db = 0; db < 256; db++) {
		avg_ttl[db] = count[db] ? (uint64_t)(sum[db] / (long double)count[db]) : 0;
	}
	return rc == ECHD_ENOTFOUND ? 0 : rc;
}

/* Whether any key has an expiry time: SCAN checks each key only then. */
static int
expires_any(struct storage_txn *t, bool *any)
{
	struct storage_cursor *c;
	struct st_buf key, val;
	int rc = expires_first(t, &c, &key, &val);

	*any = rc == 0;
	if (c != NULL) {
		storage_cursor_close(c);
	}
	return rc == ECHD_ENOTFOUND ? 0 : rc;
}

int
stream_scan(struct storage_txn *t, unsigned db, uint64_t now_ms, uint64_t *cursor,
	unsigned count, stream_key_fn fn, void *ud)
{
	struct storage_cursor *c;
	struct st_buf key, val, seek;
	unsigned char sk[9];
	unsigned seen = 0;
	bool check_expiry, live = true;
	int rc;

	rc = expires_any(t, &check_expiry);
	if (rc != 0) {
		return rc;
	}
	rc = storage_cursor_open(t, STORAGE_T_BYID, &c);
	if (rc != 0) {
		return rc;
	}
	sk[0] = (unsigned char)db;
	st_put_u64(sk + 1, *cursor);
	seek.data = sk;
	seek.len = sizeof(sk);
	rc = storage_cursor_seek(c, &seek, &key, &val);
	while (rc == 0) {
		const unsigned char *kp = key.data;
		if (key.len != 9 || kp[0] != db) {
			rc = ECHD_ENOTFOUND;
			break;
		}
		if (seen == count) {
			*cursor = st_get_u64(kp + 1);
			break;
		}
		if (check_expiry) {
			struct stream_meta m;
			rc = stream_lookup(t, db, &val, &m);
			if (rc != 0) {
				break;
			}
			live = !stream_expired(&m, now_ms);
		}
		rc = live ? fn(&val, ud) : 0;
		if (rc != 0) {
			storage_cursor_close(c);
			return rc;
		}
		seen++;
		rc = storage_cursor_next(c, &key, &val);
	}
	storage_cursor_close(c);
	if (rc == ECHD_ENOTFOUND) {
		*cursor = 0;
		return 0;
	}
	return rc;
}

/* The least and greatest internal ids of db's keys; ECHD_ENOTFOUND if none. */
static int
byid_span(struct storage_txn *t, unsigned db, uint64_t *lo, uint64_t *hi)
{
	struct storage_cursor *c;
	struct st_buf key, val, seek;
	unsigned char sk[9];
	int rc;

	rc = storage_cursor_open(t, STORAGE_T_BYID, &c);
	if (rc != 0) {
		return rc;
	}
	sk[0] = (unsigned char)db;
	st_put_u64(sk + 1, UINT64_MAX);
	seek.data = sk;
	seek.len = sizeof(sk);
	rc = storage_cursor_seek_last(c, &seek, &key, &val);
	if (rc == 0 && (key.len != 9 || ((const unsigned char *)key.data)[0] != db)) {
		rc = ECHD_ENOTFOUND;
	}
	if (rc == 0) {
		*hi = st_get_u64((const unsigned char *)key.data + 1);
		st_put_u64(sk + 1, 0);
		rc = storage_cursor_seek(c, &seek, &key, &val); /* finds *hi's row at worst */
	}
	if (rc == 0) {
		*lo = st_get_u64((const unsigned char *)key.data + 1);
	}
	storage_cursor_close(c);
	return rc;
}

struct pick {
	stream_key_fn fn;
	void *ud;
	int rc;
	bool found;
};

static int
pick_cb(const struct st_buf *name, void *ud)
{
	struct pick *p = ud;

	p->rc = p->fn(name, p->ud);
	p->found = true;
	return 1; /* stop the walk */
}

int
stream_random_key(struct storage_txn *t, unsigned db, uint64_t now_ms, uint64_t rnd,
	stream_key_fn fn, void *ud)
{
	struct pick p = {fn, ud, 0, false};
	uint64_t lo, hi, cursor;
	int rc;

	rc = byid_span(t, db, &lo, &hi);
	if (rc != 0) {
		return rc;
	}
	/* From a random id of the span to the end, then from the start. */
	cursor = lo + (hi - lo == UINT64_MAX ? rnd : rnd % (hi - lo + 1));
	rc = stream_scan(t, db, now_ms, &cursor, UINT32_MAX, pick_cb, &p);
	if (rc == 0 && !p.found) {
		cursor = 0;
		rc = stream_scan(t, db, now_ms, &cursor, UINT32_MAX, pick_cb, &p);
	}
	if (p.found) {
		return p.rc;
	}
	return rc == 0 ? ECHD_ENOTFOUND : rc; /* every key has expired */
}

int
st_delete_prefix(struct storage_txn *t, enum storage_table tb, const unsigned char *prefix,
	size_t plen, unsigned *budget, bool *done)
{
	struct storage_cursor *c;
	struct st_buf key, val, seek = {prefix, plen};
	int rc;

	*done = false;
	rc = storage_cursor_open(t, tb, &c);
	if (rc != 0) {
		return rc;
	}
	rc = storage_cursor_seek(c, &seek, &key, &val);
	while (rc == 0 && *budget > 0) {
		if (key.len < plen || memcmp(key.data, prefix, plen) != 0) {
			rc = ECHD_ENOTFOUND;
			break;
		}
		rc = storage_cursor_del(c);
		if (rc != 0) {
			break;
		}
		(*budget)--;
		rc = storage_cursor_next(c, &key, &val);
	}
	storage_cursor_close(c);
	if (rc == ECHD_ENOTFOUND) {
		*done = true;
		return 0;
	}
	return rc;
}

int
stream_gc_pending(struct storage_txn *t, bool *pending)
{
	struct storage_cursor *c;
	struct st_buf key, val;
	int rc;

	rc = storage_cursor_open(t, STORAGE_T_TRASH, &c);
	if (rc != 0) {
		return rc;
	}
	rc = storage_cursor_seek(c, NULL, &key, &val);
	storage_cursor_close(c);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return rc;
	}
	*pending = rc == 0;
	return 0;
}

int
stream_gc_step(struct storage_txn *t, unsigned budget, bool *more)
{
	static const enum storage_table stream_tables[] = {STORAGE_T_ENTRIES, STORAGE_T_NODES,
		STORAGE_T_IDMP};
	static const enum storage_table group_tables[] = {STORAGE_T_PEL, STORAGE_T_CPEL,
		STORAGE_T_DUE, STORAGE_T_CONSREC, STORAGE_T_CONSUMERS};
	struct storage_cursor *c;
	struct st_buf key, val;
	int rc;

	*more = false;
	for (;;) {
		unsigned char tk[9];
		struct st_buf k = {tk, 9};
		const enum storage_table *tables;
		size_t ntables;
		bool done = true;

		rc = storage_cursor_open(t, STORAGE_T_TRASH, &c);
		if (rc != 0) {
			return rc;
		}
		rc = storage_cursor_seek(c, NULL, &key, &val);
		if (rc == 0) {
			if (key.len != 9) {
				rc = ECHD_ECORRUPT;
			} else {
				memcpy(tk, key.data, 9);
			}
		}
		storage_cursor_close(c);
		if (rc != 0) {
			return rc == ECHD_ENOTFOUND ? 0 : rc;
		}
		if (budget == 0) {
			*more = true;
			return 0;
		}
		tables = tk[0] == ST_TRASH_STREAM ? stream_tables : group_tables;
		ntables = tk[0] == ST_TRASH_STREAM ? 3 : 5;
		for (size_t i = 0; i < ntables && done; i++) {
			rc = st_delete_prefix(t, tables[i], tk + 1, 8, &budget, &done);
			if (rc != 0) {
				return rc;
			}
		}
		if (!done) {
			*more = true;
			return 0;
		}
		rc = storage_del(t, STORAGE_T_TRASH, &k);
		if (rc != 0) {
			return rc;
		}
	}
}

/* ---- MEMORY USAGE ------------------------------------------------------- */

/* Bytes of the entry rows of one node: live rows from first on. */
static int
node_entry_bytes(struct storage_cursor *ec, uint64_t sid, const struct stream_id *first,
	uint64_t live, uint64_t *bytes)
{
	unsigned char kb[24];
	struct st_buf seek = {kb, st_entry_key(kb, sid, first)}, key, val;
	uint64_t n = 0;
	int rc;

	rc = storage_cursor_seek(ec, &seek, &key, &val);
	while (rc == 0 && n < live) {
		if (key.len != 24 || memcmp(key.data, kb, 8) != 0) {
			return ECHD_ECORRUPT; /* the node counts more entries than there are */
		}
		*bytes += key.len + val.len;
		if (++n < live) {
			rc = storage_cursor_next(ec, &key, &val);
		}
	}
	return rc == ECHD_ENOTFOUND ? ECHD_ECORRUPT : rc;
}

int
stream_usage(struct storage_txn *t, unsigned db, const struct st_buf *name,
	const struct stream_meta *m, uint64_t samples, uint64_t *out)
{
	struct storage_cursor *nc = NULL, *ec = NULL;
	struct st_buf k, key, val, seek;
	unsigned char prefix[8];
	uint64_t bytes, nodes = 0, node_bytes = 0, entries = 0, entry_bytes = 0;
	struct keybuf kb;
	int rc;

	rc = keybuf_init(&kb, db, name);
	if (rc != 0) {
		return rc;
	}
	k.data = kb.p;
	k.len = kb.len;
	rc = storage_get(t, STORAGE_T_KEYS, &k, &val);
	bytes = k.len + val.len;
	keybuf_finish(&kb);
	if (rc != 0) {
		return rc;
	}
	bytes += 9 + name->len; /* byid */
	if (m->expire_ms != 0) {
		bytes += EXPIRES_KEY_LEN;
	}

	rc = storage_cursor_open(t, STORAGE_T_NODES, &nc);
	if (rc == 0) {
		rc = storage_cursor_open(t, STORAGE_T_ENTRIES, &ec);
	}
	if (rc != 0) {
		goto out;
	}
	st_put_u64(prefix, m->sid);
	seek.data = prefix;
	seek.len = sizeof(prefix);
	rc = storage_cursor_seek(nc, &seek, &key, &val);
	while (rc == 0 && (samples == 0 || nodes < samples)) {
		struct stream_id first;
		if (key.len != 24 || memcmp(key.data, prefix, 8) != 0) {
			rc = ECHD_ENOTFOUND;
			break;
		}
		if (val.len < ST_NODE_FIXED) {
			rc = ECHD_ECORRUPT;
			break;
		}
		st_get_id((const unsigned char *)key.data + 8, &first);
		nodes++;
		node_bytes += key.len + val.len;
		entries += st_get_u64(val.data);
		/* the entry cursor moves; the node cursor's key and value stay */
		rc = node_entry_bytes(ec, m->sid, &first, st_get_u64(val.data), &entry_bytes);
		if (rc == 0) {
			rc = storage_cursor_next(nc, &key, &val);
		}
	}
	if (rc == ECHD_ENOTFOUND) {
		rc = 0; /* every node counted */
	}
	if (rc != 0) {
		goto out;
	}
	bytes += node_bytes + entry_bytes;
	{
		uint64_t idmp = 0;
		rc = stream_idmp_usage(t, m, &idmp);
		if (rc != 0) {
			goto out;
		}
		bytes += idmp;
	}
	/* The nodes not sampled: the sampled ones' mean per node and per entry. */
	if (nodes > 0 && m->nodes > nodes) {
		bytes += node_bytes / nodes * (m->nodes - nodes);
	}
	if (entries > 0 && m->length > entries) {
		bytes += (uint64_t)((long double)entry_bytes / entries * (m->length - entries));
	}
	*out = bytes;
out:
	storage_cursor_close(ec);
	storage_cursor_close(nc);
	return rc;
}
