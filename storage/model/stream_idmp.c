/* stream_idmp.c - idempotent producers: the (producer, idempotent id) ->
 * entry id records of XADD IDMP/IDMPAUTO, kept as rows of the IDMP table
 * in the same transaction as the entry they name, so that a producer that
 * retries after a crash of either side gets the first id back.
 *
 * Rows (all integers big-endian; see docs/architecture.md):
 *   sid(8) 'C'                     -> duration_s maxsize pids iids added
 *                                     duplicates next_pnum due_ms (u64 each)
 *                                     [secret(16)]
 *   sid(8) 'P' form(1) pid-key     -> pnum count next_seq [whole pid]
 *   sid(8) 'I' pnum(8) form(1) iid-key -> id(16) time_ms(8) seq(8) [whole iid]
 *   sid(8) 'Q' pnum(8) seq(8)      -> time_ms(8) form(1) iid-key
 *   0(8)  'E' due_ms(8) sid(8)     -> (empty): a stream whose records may
 *                                     have expired by due_ms
 *
 * A producer gets a number (pnum) local to its stream, so the rows of a
 * stream are all under its sid: COPY copies them with the entries, RENAME
 * and MOVE leave them alone, and a dropped stream's rows go with its
 * entries in the deferred deletion. Q is each producer's records in the
 * order they were added: its head is evicted first, by IDMP-MAXSIZE on
 * each add and by IDMP-DURATION when its time has passed. A pid or iid of
 * up to KEY_INLINE bytes is the key itself (form 'i'); a longer one is
 * its first KEY_PREFIX bytes and a 128-bit hash (form 'h'), and the whole
 * string in the value is compared on lookup.
 *
 * IDMPAUTO's iid is keyed: a SipHash-2-4-128 of the pairs under the
 * stream's secret, 16 random bytes made at its first IDMPAUTO and kept at
 * the end of its C row (so COPY copies it and a restart keeps it). Without
 * the secret nobody can craft two messages that share an iid, which would
 * answer the second with the first's id. A C row of 64 bytes (written
 * before the secret existed) reads as having none; the first IDMPAUTO then
 * adds one, and the iids recorded before it (an unkeyed sum) no longer
 * match.
 *
 * Expiry is exact for lookups (a record past its duration is not a
 * duplicate) and lazy for rows: a producer's expired records go when it
 * adds again, and stream_idmp_expire_due() removes the others from the
 * E index, at most once a second per stream.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "echd.h"
#include "stream.h"
#include "stream_impl.h"

#define CFG_LEN     (8 * 8)
#define SECRET_LEN  16
#define KEY_INLINE  400
#define KEY_PREFIX  384
#define KEY_MAXPART (KEY_PREFIX + 16)
#define E_KEY_LEN   (8 + 1 + 8 + 8)
/* The active step looks at a stream again no sooner than this. */
#define RECHECK_MS 1000

struct cfg {
	uint64_t duration_s, maxsize, pids, iids, added, duplicates, next_pnum, due_ms;
	bool has_secret;                  /* a row written before secrets has none */
	unsigned char secret[SECRET_LEN]; /* IDMPAUTO's key */
};

/* ---- hashing ------------------------------------------------------------- */

static uint64_t
mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

/* Little-endian loads, so that stored hashes do not depend on the host. */
static uint64_t
hash_bytes(const unsigned char *p, size_t n, uint64_t seed)
{
	uint64_t h = mix64(seed ^ ((uint64_t)n * 0x9e3779b97f4a7c15ULL));

	while (n >= 8) {
		uint64_t w = 0;
		for (int i = 7; i >= 0; i--) {
			w = (w << 8) | p[i];
		}
		h = mix64(h ^ w) + 0x632be59bd9b4e019ULL;
		p += 8;
		n -= 8;
	}
	if (n > 0) {
		uint64_t w = 0;
		for (size_t i = n; i > 0; i--) {
			w = (w << 8) | p[i - 1];
		}
		h = mix64(h ^ w ^ ((uint64_t)n << 56));
	}
	return mix64(h);
}

static void
hash128(const struct st_buf *b, unsigned char out[16])
{
	st_put_u64(out, hash_bytes(b->data, b->len, 0x243f6a8885a308d3ULL));
	st_put_u64(out + 8, hash_bytes(b->data, b->len, 0x13198a2e03707344ULL));
}

/* ---- IDMPAUTO's keyed hash ------------------------------------------------ */

/* SipHash-2-4 with its 128-bit output (Aumasson and Bernstein), fed in
 * pieces: a keyed function whose outputs, key unknown, cannot be steered
 * into a collision as the sum of unkeyed hashes could. */
struct sip {
	uint64_t v[4];
	unsigned char tail[8];
	size_t ntail;
	uint64_t total;
};

static uint64_t
rotl(uint64_t x, int b)
{
	return (x << b) | (x >> (64 - b));
}

static uint64_t
load_le64(const unsigned char *p)
{
	uint64_t w = 0;

	for (int i = 7; i >= 0; i--) {
		w = (w << 8) | p[i];
	}
	return w;
}

static void
sip_rounds(uint64_t v[4], int n)
{
	for (int i = 0; i < n; i++) {
		v[0] += v[1];
		v[1] = rotl(v[1], 13);
		v[1] ^= v[0];
		v[0] = rotl(v[0], 32);
		v[2] += v[3];
		v[3] = rotl(v[3], 16);
		v[3] ^= v[2];
		v[0] += v[3];
		v[3] = rotl(v[3], 21);
		v[3] ^= v[0];
		v[2] += v[1];
		v[1] = rotl(v[1], 17);
		v[1] ^= v[2];
		v[2] = rotl(v[2], 32);
	}
}

static void
sip_word(struct sip *h, uint64_t m)
{
	h->v[3] ^= m;
	sip_rounds(h->v, 2);
	h->v[0] ^= m;
}

static void
sip_init(struct sip *h, const unsigned char key[SECRET_LEN])
{
	uint64_t k0 = load_le64(key), k1 = load_le64(key + 8);

	h->v[0] = k0 ^ 0x736f6d6570736575ULL;
	h->v[1] = k1 ^ 0x646f72616e646f6dULL ^ 0xee; /* 0xee: the 128-bit output */
	h->v[2] = k0 ^ 0x6c7967656e657261ULL;
	h->v[3] = k1 ^ 0x7465646279746573ULL;
	h->ntail = 0;
	h->total = 0;
}

static void
sip_update(struct sip *h, const void *data, size_t n)
{
	const unsigned char *p = data;

	h->total += n;
	while (n > 0 && h->ntail > 0) {
		h->tail[h->ntail++] = *p++;
		n--;
		if (h->ntail == 8) {
			sip_word(h, load_le64(h->tail));
			h->ntail = 0;
		}
	}
	for (; n >= 8; p += 8, n -= 8) {
		sip_word(h, load_le64(p));
	}
	memcpy(h->tail + h->ntail, p, n);
	h->ntail += n;
}

static void
sip_u64(struct sip *h, uint64_t x)
{
	unsigned char b[8];

	for (int i = 0; i < 8; i++) {
		b[i] = (unsigned char)(x >> (8 * i));
	}
	sip_update(h, b, 8);
}

/* The 16 bytes of the hash, little-endian halves. */
static void
sip_final(struct sip *h, unsigned char out[16])
{
	uint64_t b = h->total << 56, r[2];

	for (size_t i = 0; i < h->ntail; i++) {
		b |= (uint64_t)h->tail[i] << (8 * i);
	}
	sip_word(h, b);
	h->v[2] ^= 0xee;
	sip_rounds(h->v, 4);
	r[0] = h->v[0] ^ h->v[1] ^ h->v[2] ^ h->v[3];
	h->v[1] ^= 0xdd;
	sip_rounds(h->v, 4);
	r[1] = h->v[0] ^ h->v[1] ^ h->v[2] ^ h->v[3];
	for (int i = 0; i < 16; i++) {
		out[i] = (unsigned char)(r[i / 8] >> (8 * (i % 8)));
	}
}

void
stream_idmp_siphash128(const unsigned char key[16], const void *data, size_t n,
	unsigned char out[16])
{
	struct sip h;

	sip_init(&h, key);
	sip_update(&h, data, n);
	sip_final(&h, out);
}

static int
digest_cmp(const void *a, const void *b)
{
	return memcmp(a, b, 16);
}

void
stream_idmp_keyed_iid(const unsigned char key[16], const struct st_buf *fv, size_t nfv,
	unsigned char *scratch, unsigned char out[STREAM_IDMP_AUTO_LEN])
{
	size_t npairs = nfv / 2;
	struct sip h;

	/* Each pair hashed alone (lengths first, so the split between field
	 * and value counts), the digests sorted: the same pairs in any order
	 * give the same iid, and a pair given twice counts twice. */
	for (size_t i = 0; i < npairs; i++) {
		sip_init(&h, key);
		sip_u64(&h, fv[2 * i].len);
		sip_update(&h, fv[2 * i].data, fv[2 * i].len);
		sip_u64(&h, fv[2 * i + 1].len);
		sip_update(&h, fv[2 * i + 1].data, fv[2 * i + 1].len);
		sip_final(&h, scratch + 16 * i);
	}
	qsort(scratch, npairs, 16, digest_cmp);
	sip_init(&h, key);
	sip_update(&h, "IDMPAUTO", 8);
	sip_u64(&h, npairs);
	sip_update(&h, scratch, 16 * npairs);
	sip_final(&h, out);
}

/* ---- keys ---------------------------------------------------------------- */

/* The form byte and key part of a pid or iid into p; returns its length. */
static size_t
key_part(unsigned char *p, const struct st_buf *s)
{
	if (s->len <= KEY_INLINE) {
		p[0] = 'i';
		memcpy(p + 1, s->data, s->len);
		return 1 + s->len;
	}
	p[0] = 'h';
	memcpy(p + 1, s->data, KEY_PREFIX);
	hash128(s, p + 1 + KEY_PREFIX);
	return 1 + KEY_MAXPART;
}

static size_t
c_key(unsigned char *k, uint64_t sid)
{
	st_put_u64(k, sid);
	k[8] = 'C';
	return 9;
}

static size_t
p_key(unsigned char *k, uint64_t sid, const struct st_buf *pid)
{
	st_put_u64(k, sid);
	k[8] = 'P';
	return 9 + key_part(k + 9, pid);
}

static size_t
i_key(unsigned char *k, uint64_t sid, uint64_t pnum, const unsigned char *part, size_t plen)
{
	st_put_u64(k, sid);
	k[8] = 'I';
	st_put_u64(k + 9, pnum);
	memcpy(k + 17, part, plen);
	return 17 + plen;
}

static size_t
q_key(unsigned char *k, uint64_t sid, uint64_t pnum, uint64_t seq)
{
	st_put_u64(k, sid);
	k[8] = 'Q';
	st_put_u64(k + 9, pnum);
	st_put_u64(k + 17, seq);
	return 25;
}

static void
e_key(unsigned char *k, uint64_t due_ms, uint64_t sid)
{
	st_put_u64(k, 0);
	k[8] = 'E';
	st_put_u64(k + 9, due_ms);
	st_put_u64(k + 17, sid);
}

/* ---- the stream's row ---------------------------------------------------- */

/* Reads the C row; ECHD_ENOTFOUND when the stream never used IDMP. */
static int
cfg_get(struct storage_txn *t, uint64_t sid, struct cfg *c)
{
	unsigned char kb[9];
	struct st_buf k = {kb, c_key(kb, sid)}, v;
	const unsigned char *p;
	int rc = storage_get(t, STORAGE_T_IDMP, &k, &v);

	if (rc != 0) {
		return rc;
	}
	if (v.len != CFG_LEN && v.len != CFG_LEN + SECRET_LEN) {
		return ECHD_ECORRUPT;
	}
	p = v.data;
	c->has_secret = v.len == CFG_LEN + SECRET_LEN;
	if (c->has_secret) {
		memcpy(c->secret, p + CFG_LEN, SECRET_LEN);
	}
	c->duration_s = st_get_u64(p);
	c->maxsize = st_get_u64(p + 8);
	c->pids = st_get_u64(p + 16);
	c->iids = st_get_u64(p + 24);
	c->added = st_get_u64(p + 32);
	c->duplicates = st_get_u64(p + 40);
	c->next_pnum = st_get_u64(p + 48);
	c->due_ms = st_get_u64(p + 56);
	return 0;
}

static int
cfg_put(struct storage_txn *t, uint64_t sid, const struct cfg *c)
{
	unsigned char kb[9], vb[CFG_LEN + SECRET_LEN];
	struct st_buf k = {kb, c_key(kb, sid)}, v = {vb, CFG_LEN};

	st_put_u64(vb, c->duration_s);
	st_put_u64(vb + 8, c->maxsize);
	st_put_u64(vb + 16, c->pids);
	st_put_u64(vb + 24, c->iids);
	st_put_u64(vb + 32, c->added);
	st_put_u64(vb + 40, c->duplicates);
	st_put_u64(vb + 48, c->next_pnum);
	st_put_u64(vb + 56, c->due_ms);
	if (c->has_secret) {
		memcpy(vb + CFG_LEN, c->secret, SECRET_LEN);
		v.len += SECRET_LEN;
	}
	return storage_put(t, STORAGE_T_IDMP, &k, &v, 0);
}

/* The C row, or a fresh one with the defaults. */
static int
cfg_load(struct storage_txn *t, uint64_t sid, const struct stream_idmp_cfg *def, struct cfg *c)
{
	int rc = cfg_get(t, sid, c);

	if (rc == ECHD_ENOTFOUND) {
		memset(c, 0, sizeof(*c));
		c->duration_s = def->duration_s;
		c->maxsize = def->maxsize;
		c->next_pnum = 1;
		rc = 0;
	}
	return rc;
}

int
stream_idmp_auto_iid(struct storage_txn *t, const struct stream_meta *m,
	const struct stream_idmp_cfg *def, bool make, const struct st_buf *fv, size_t nfv,
	unsigned char out[STREAM_IDMP_AUTO_LEN])
{
	unsigned char small[16 * 16], *scratch = small;
	struct cfg c;
	int rc = make ? cfg_load(t, m->sid, def, &c) : cfg_get(t, m->sid, &c);

	if (rc != 0) {
		return rc;
	}
	if (!c.has_secret) {
		if (!make) {
			return ECHD_ENOTFOUND; /* so no iid of this stream is keyed yet */
		}
		if (getrandom(c.secret, SECRET_LEN, 0) != SECRET_LEN) {
			return errno != 0 ? -errno : -EIO;
		}
		c.has_secret = true;
		rc = cfg_put(t, m->sid, &c);
		if (rc != 0) {
			return rc;
		}
	}
	if (nfv / 2 > sizeof(small) / 16) {
		scratch = echd_malloc(nfv / 2 * 16);
		if (scratch == NULL) {
			return -ENOMEM;
		}
	}
	stream_idmp_keyed_iid(c.secret, fv, nfv, scratch, out);
	if (scratch != small) {
		echd_free(scratch);
	}
	return 0;
}

static int
e_row(struct storage_txn *t, uint64_t due_ms, uint64_t sid, bool add)
{
	unsigned char kb[E_KEY_LEN];
	struct st_buf k = {kb, E_KEY_LEN}, empty = {"", 0};
	int rc;

	e_key(kb, due_ms, sid);
	if (add) {
		return storage_put(t, STORAGE_T_IDMP, &k, &empty, 0);
	}
	rc = storage_del(t, STORAGE_T_IDMP, &k);
	return rc == ECHD_ENOTFOUND ? 0 : rc;
}

/* Moves the stream's E row to due_ms (0: none). */
static int
set_due(struct storage_txn *t, uint64_t sid, struct cfg *c, uint64_t due_ms)
{
	int rc = 0;

	if (c->due_ms == due_ms) {
		return 0;
	}
	if (c->due_ms != 0) {
		rc = e_row(t, c->due_ms, sid, false);
	}
	if (rc == 0 && due_ms != 0) {
		rc = e_row(t, due_ms, sid, true);
	}
	if (rc == 0) {
		c->due_ms = due_ms;
	}
	return rc;
}

/* ---- producers ----------------------------------------------------------- */

struct producer {
	unsigned char key[9 + 1 + KEY_MAXPART];
	size_t klen;
	uint64_t pnum, count, next_seq;
	bool exists;
};

static int
producer_get(struct storage_txn *t, uint64_t sid, const struct st_buf *pid, struct producer *p)
{
	struct st_buf k, v;
	int rc;

	p->klen = p_key(p->key, sid, pid);
	k.data = p->key;
	k.len = p->klen;
	p->exists = false;
	rc = storage_get(t, STORAGE_T_IDMP, &k, &v);
	if (rc == ECHD_ENOTFOUND) {
		return 0;
	}
	if (rc != 0) {
		return rc;
	}
	if (v.len < 24) {
		return ECHD_ECORRUPT;
	}
	if (pid->len > KEY_INLINE && (v.len != 24 + pid->len ||
					     memcmp((const unsigned char *)v.data + 24, pid->data,
						     pid->len) != 0)) {
		return ECHD_EINVAL; /* another long pid with the same prefix and hash */
	}
	p->pnum = st_get_u64(v.data);
	p->count = st_get_u64((const unsigned char *)v.data + 8);
	p->next_seq = st_get_u64((const unsigned char *)v.data + 16);
	p->exists = true;
	return 0;
}

/* whole: the whole pid of a long one (kept in the value), or NULL. */
static int
producer_put(struct storage_txn *t, const struct producer *p, const struct st_buf *whole)
{
	unsigned char small[24], *vb = small;
	struct st_buf k = {p->key, p->klen}, v = {small, 24};
	int rc;

	if (whole != NULL) {
		vb = echd_malloc(24 + whole->len);
		if (vb == NULL) {
			return -ENOMEM;
		}
		memcpy(vb + 24, whole->data, whole->len);
		v.data = vb;
		v.len = 24 + whole->len;
	}
	st_put_u64(vb, p->pnum);
	st_put_u64(vb + 8, p->count);
	st_put_u64(vb + 16, p->next_seq);
	rc = storage_put(t, STORAGE_T_IDMP, &k, &v, 0);
	if (vb != small) {
		echd_free(vb);
	}
	return rc;
}

/* The head of a producer's queue: its oldest record. */
struct head {
	uint64_t seq, time_ms;
	unsigned char part[1 + KEY_MAXPART];
	size_t plen;
};

static int
head_get(struct storage_txn *t, uint64_t sid, uint64_t pnum, struct head *h)
{
	unsigned char kb[25];
	struct storage_cursor *c;
	struct st_buf seek = {kb, 17}, key, val;
	int rc;

	q_key(kb, sid, pnum, 0);
	rc = storage_cursor_open(t, STORAGE_T_IDMP, &c);
	if (rc != 0) {
		return rc;
	}
	rc = storage_cursor_seek(c, &seek, &key, &val);
	if (rc == 0 && (key.len != 25 || memcmp(key.data, kb, 17) != 0)) {
		rc = ECHD_ENOTFOUND;
	}
	if (rc == 0 && (val.len < 10 || val.len > 8 + sizeof(h->part))) {
		rc = ECHD_ECORRUPT;
	}
	if (rc == 0) {
		h->seq = st_get_u64((const unsigned char *)key.data + 17);
		h->time_ms = st_get_u64(val.data);
		h->plen = val.len - 8;
		memcpy(h->part, (const unsigned char *)val.data + 8, h->plen);
	}
	storage_cursor_close(c);
	return rc;
}

/* Removes one record: its Q and I rows. */
static int
record_del(struct storage_txn *t, uint64_t sid, uint64_t pnum, uint64_t seq,
	const unsigned char *part, size_t plen)
{
	unsigned char kb[17 + 1 + KEY_MAXPART];
	struct st_buf k = {kb, q_key(kb, sid, pnum, seq)};
	int rc = storage_del(t, STORAGE_T_IDMP, &k);

	if (rc == 0) {
		k.len = i_key(kb, sid, pnum, part, plen);
		rc = storage_del(t, STORAGE_T_IDMP, &k);
	}
	return rc == ECHD_ENOTFOUND ? ECHD_ECORRUPT : rc;
}

static bool
expired(const struct cfg *c, uint64_t time_ms, uint64_t now_ms)
{
	return time_ms + c->duration_s * 1000 <= now_ms;
}

/* Evicts the producer's oldest records while they have expired or while
 * keep more would remain than maxsize allows. */
static int
evict(struct storage_txn *t, uint64_t sid, struct cfg *c, struct producer *p, uint64_t now_ms,
	uint64_t keep)
{
	struct head h;
	int rc;

	while (p->count > 0) {
		rc = head_get(t, sid, p->pnum, &h);
		if (rc != 0) {
			return rc == ECHD_ENOTFOUND ? ECHD_ECORRUPT : rc;
		}
		if (p->count + keep <= c->maxsize && !expired(c, h.time_ms, now_ms)) {
			break;
		}
		rc = record_del(t, sid, p->pnum, h.seq, h.part, h.plen);
		if (rc != 0) {
			return rc;
		}
		p->count--;
		c->iids--;
	}
	return 0;
}

/* ---- records ------------------------------------------------------------- */

struct record {
	struct stream_id id;
	uint64_t time_ms, seq;
};

/* Reads the I row of (pnum, iid); ECHD_ENOTFOUND when there is none. */
static int
record_get(struct storage_txn *t, uint64_t sid, uint64_t pnum, const struct st_buf *iid,
	unsigned char *part, size_t *plen, struct record *r)
{
	unsigned char kb[17 + 1 + KEY_MAXPART];
	struct st_buf k, v;
	int rc;

	*plen = key_part(part, iid);
	k.data = kb;
	k.len = i_key(kb, sid, pnum, part, *plen);
	rc = storage_get(t, STORAGE_T_IDMP, &k, &v);
	if (rc != 0) {
		return rc;
	}
	if (v.len < 32) {
		return ECHD_ECORRUPT;
	}
	st_get_id(v.data, &r->id);
	r->time_ms = st_get_u64((const unsigned char *)v.data + 16);
	r->seq = st_get_u64((const unsigned char *)v.data + 24);
	if (iid->len > KEY_INLINE && (v.len != 32 + iid->len ||
					     memcmp((const unsigned char *)v.data + 32, iid->data,
						     iid->len) != 0)) {
		return ECHD_EINVAL; /* a hash collision: another iid holds the key */
	}
	return 0;
}

int
stream_idmp_find(struct storage_txn *t, const struct stream_meta *m, const struct st_buf *pid,
	const struct st_buf *iid, uint64_t now_ms, bool count_dup, struct stream_id *out)
{
	unsigned char part[1 + KEY_MAXPART];
	struct producer p;
	struct record r;
	struct cfg c;
	size_t plen;
	int rc = cfg_get(t, m->sid, &c);

	if (rc == 0) {
		rc = producer_get(t, m->sid, pid, &p);
	}
	if (rc == 0 && !p.exists) {
		rc = ECHD_ENOTFOUND;
	}
	if (rc == 0) {
		rc = record_get(t, m->sid, p.pnum, iid, part, &plen, &r);
	}
	if (rc == ECHD_EINVAL) {
		rc = ECHD_ENOTFOUND; /* a colliding long pid or iid is another one */
	}
	if (rc == 0 && expired(&c, r.time_ms, now_ms)) {
		rc = ECHD_ENOTFOUND; /* its row goes at the next add or expiry step */
	}
	if (rc != 0) {
		return rc;
	}
	if (count_dup) {
		c.duplicates++;
		rc = cfg_put(t, m->sid, &c);
		if (rc != 0) {
			return rc;
		}
	}
	*out = r.id;
	return 0;
}

int
stream_idmp_record(struct storage_txn *t, const struct stream_meta *m, const struct st_buf *pid,
	const struct st_buf *iid, const struct stream_id *id, uint64_t now_ms,
	const struct stream_idmp_cfg *def)
{
	unsigned char part[1 + KEY_MAXPART], kb[17 + 1 + KEY_MAXPART], vb[32 + 8];
	unsigned char *ival = vb, *qval = NULL;
	struct st_buf k, v;
	struct producer p;
	struct record old;
	struct cfg c;
	size_t plen;
	int rc;

	rc = cfg_load(t, m->sid, def, &c);
	if (rc == 0) {
		rc = producer_get(t, m->sid, pid, &p);
	}
	if (rc != 0) {
		return rc;
	}
	if (!p.exists) {
		p.pnum = c.next_pnum++;
		p.count = 0;
		p.next_seq = 0;
		c.pids++;
	}
	rc = evict(t, m->sid, &c, &p, now_ms, 1);
	if (rc != 0) {
		return rc;
	}
	/* A record still there (expired, clock stepped back, or a hash
	 * collision of long iids) is replaced. */
	rc = record_get(t, m->sid, p.pnum, iid, part, &plen, &old);
	if (rc == 0 || rc == ECHD_EINVAL) {
		if (rc == ECHD_EINVAL) {
			/* the colliding record's seq is in its value all the same */
			k.data = kb;
			k.len = i_key(kb, m->sid, p.pnum, part, plen);
			rc = storage_get(t, STORAGE_T_IDMP, &k, &v);
			if (rc == 0) {
				old.seq = st_get_u64((const unsigned char *)v.data + 24);
			}
		}
		if (rc == 0) {
			rc = record_del(t, m->sid, p.pnum, old.seq, part, plen);
		}
		if (rc != 0) {
			return rc;
		}
		p.count--;
		c.iids--;
	} else if (rc != ECHD_ENOTFOUND) {
		return rc;
	}

	/* I row */
	if (iid->len > KEY_INLINE) {
		ival = echd_malloc(32 + iid->len);
		if (ival == NULL) {
			return -ENOMEM;
		}
		memcpy(ival + 32, iid->data, iid->len);
	}
	st_put_id(ival, id);
	st_put_u64(ival + 16, now_ms);
	st_put_u64(ival + 24, p.next_seq);
	k.data = kb;
	k.len = i_key(kb, m->sid, p.pnum, part, plen);
	v.data = ival;
	v.len = 32 + (iid->len > KEY_INLINE ? iid->len : 0);
	rc = storage_put(t, STORAGE_T_IDMP, &k, &v, 0);
	if (ival != vb) {
		echd_free(ival);
	}
	/* Q row */
	if (rc == 0) {
		qval = echd_malloc(8 + plen);
		rc = qval == NULL ? -ENOMEM : 0;
	}
	if (rc == 0) {
		st_put_u64(qval, now_ms);
		memcpy(qval + 8, part, plen);
		k.len = q_key(kb, m->sid, p.pnum, p.next_seq);
		v.data = qval;
		v.len = 8 + plen;
		rc = storage_put(t, STORAGE_T_IDMP, &k, &v, 0);
	}
	echd_free(qval);
	if (rc != 0) {
		return rc;
	}
	p.next_seq++;
	p.count++;
	c.iids++;
	c.added++;
	rc = producer_put(t, &p, pid->len > KEY_INLINE ? pid : NULL);
	if (rc == 0 && c.due_ms == 0) {
		rc = set_due(t, m->sid, &c, now_ms + c.duration_s * 1000);
	}
	if (rc == 0) {
		rc = cfg_put(t, m->sid, &c);
	}
	return rc;
}

/* ---- settings, clearing -------------------------------------------------- */

/* Opens a cursor at the first row of kind ('I', 'P', 'Q') of stream sid;
 * kb receives the 9-byte prefix those rows share. Returns the seek's code;
 * *c is open (close it) whenever the return is 0 or ECHD_ENOTFOUND. */
static int
kind_first(struct storage_txn *t, uint64_t sid, unsigned char kind, unsigned char kb[9],
	struct storage_cursor **c, struct st_buf *key, struct st_buf *val)
{
	struct st_buf seek = {kb, 9};
	int rc;

	st_put_u64(kb, sid);
	kb[8] = kind;
	rc = storage_cursor_open(t, STORAGE_T_IDMP, c);
	if (rc != 0) {
		*c = NULL;
		return rc;
	}
	rc = storage_cursor_seek(*c, &seek, key, val);
	if (rc == 0 && (key->len < 9 || memcmp(key->data, kb, 9) != 0)) {
		rc = ECHD_ENOTFOUND;
	}
	return rc;
}

/* Deletes the stream's P, I and Q rows. */
static int
clear_records(struct storage_txn *t, uint64_t sid)
{
	static const unsigned char kinds[] = {'I', 'P', 'Q'};
	struct storage_cursor *c;
	struct st_buf key, val;
	unsigned char kb[9];
	int rc = 0;

	for (size_t i = 0; i < sizeof(kinds) && rc == 0; i++) {
		rc = kind_first(t, sid, kinds[i], kb, &c, &key, &val);
		if (c == NULL) {
			return rc;
		}
		while (rc == 0) {
			rc = storage_cursor_del(c);
			if (rc == 0) {
				rc = storage_cursor_next(c, &key, &val);
			}
			if (rc == 0 && (key.len < 9 || memcmp(key.data, kb, 9) != 0)) {
				rc = ECHD_ENOTFOUND;
			}
		}
		storage_cursor_close(c);
		rc = rc == ECHD_ENOTFOUND ? 0 : rc;
	}
	return rc;
}

int
stream_idmp_configure(struct storage_txn *t, const struct stream_meta *m, uint64_t duration_s,
	uint64_t maxsize, const struct stream_idmp_cfg *def)
{
	struct cfg c;
	int rc = cfg_load(t, m->sid, def, &c);

	if (rc != 0) {
		return rc;
	}
	if (duration_s == 0) {
		duration_s = c.duration_s;
	}
	if (maxsize == 0) {
		maxsize = c.maxsize;
	}
	if (duration_s == c.duration_s && maxsize == c.maxsize) {
		return 0; /* the same settings keep the records */
	}
	rc = clear_records(t, m->sid);
	if (rc == 0) {
		rc = set_due(t, m->sid, &c, 0);
	}
	if (rc == 0) {
		c.duration_s = duration_s;
		c.maxsize = maxsize;
		c.pids = 0;
		c.iids = 0;
		rc = cfg_put(t, m->sid, &c);
	}
	return rc;
}

int
stream_idmp_info(struct storage_txn *t, const struct stream_meta *m,
	const struct stream_idmp_cfg *def, struct stream_idmp_info *out)
{
	struct cfg c;
	int rc = cfg_load(t, m->sid, def, &c);

	if (rc != 0) {
		return rc;
	}
	out->duration_s = c.duration_s;
	out->maxsize = c.maxsize;
	out->pids = c.pids;
	out->iids = c.iids;
	out->added = c.added;
	out->duplicates = c.duplicates;
	return 0;
}

/* ---- copy, MEMORY USAGE --------------------------------------------------- */

int
stream_idmp_copy(struct storage_txn *t, uint64_t from, uint64_t to)
{
	struct cfg c;
	int rc = st_copy_rows(t, STORAGE_T_IDMP, from, to, NULL, NULL);

	if (rc == 0) {
		rc = cfg_get(t, to, &c);
		if (rc == ECHD_ENOTFOUND) {
			return 0;
		}
	}
	if (rc == 0 && c.due_ms != 0) {
		/* the copy has records: it gets its own place in the index */
		rc = e_row(t, c.due_ms, to, true);
	}
	return rc;
}

/* Rows sampled per kind before MEMORY USAGE extrapolates. */
#define USAGE_SAMPLE 64

int
stream_idmp_usage(struct storage_txn *t, const struct stream_meta *m, uint64_t *out)
{
	static const unsigned char kinds[] = {'I', 'P', 'Q'};
	struct storage_cursor *c;
	struct st_buf key, val;
	unsigned char kb[9];
	struct cfg cf;
	uint64_t bytes;
	int rc = cfg_get(t, m->sid, &cf);

	if (rc == ECHD_ENOTFOUND) {
		*out = 0;
		return 0;
	}
	if (rc != 0) {
		return rc;
	}
	bytes = 9 + CFG_LEN + (cf.has_secret ? SECRET_LEN : 0) + (cf.due_ms != 0 ? E_KEY_LEN : 0);
	for (size_t i = 0; i < sizeof(kinds); i++) {
		uint64_t n = 0, sum = 0, total = kinds[i] == 'P' ? cf.pids : cf.iids;
		rc = kind_first(t, m->sid, kinds[i], kb, &c, &key, &val);
		if (c == NULL) {
			return rc;
		}
		while (rc == 0 && n < USAGE_SAMPLE) {
			if (key.len < 9 || memcmp(key.data, kb, 9) != 0) {
				break;
			}
			sum += key.len + val.len;
			n++;
			rc = storage_cursor_next(c, &key, &val);
		}
		storage_cursor_close(c);
		if (rc != 0 && rc != ECHD_ENOTFOUND) {
			return rc;
		}
		bytes += n > 0 && total > n ? sum / n * total : sum;
	}
	*out = bytes;
	return 0;
}

/* ---- active expiry --------------------------------------------------------- */

/* Producers of a stream read before any of their rows is written. */
struct pref {
	unsigned char key[9 + 1 + KEY_MAXPART];
	size_t klen;
	uint64_t pnum, count, next_seq;
	unsigned char *whole; /* the value's whole pid, for a long one */
	size_t wlen;
};

static void
prefs_free(struct pref *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		echd_free(v[i].whole);
	}
	echd_free(v);
}

static int
prefs_load(struct storage_txn *t, uint64_t sid, struct pref **out, size_t *nout)
{
	struct storage_cursor *c;
	struct st_buf key, val, seek;
	unsigned char kb[9];
	struct pref *v = NULL;
	size_t n = 0, cap = 0;
	int rc;

	st_put_u64(kb, sid);
	kb[8] = 'P';
	seek.data = kb;
	seek.len = 9;
	rc = storage_cursor_open(t, STORAGE_T_IDMP, &c);
	if (rc != 0) {
		return rc;
	}
	rc = storage_cursor_seek(c, &seek, &key, &val);
	while (rc == 0) {
		struct pref *p;
		if (key.len < 9 || memcmp(key.data, kb, 9) != 0) {
			rc = ECHD_ENOTFOUND;
			break;
		}
		if (val.len < 24 || key.len > sizeof(v->key)) {
			rc = ECHD_ECORRUPT;
			break;
		}
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			struct pref *nv = echd_realloc(v, ncap * sizeof(*nv));
			if (nv == NULL) {
				rc = -ENOMEM;
				break;
			}
			v = nv;
			cap = ncap;
		}
		p = &v[n];
		memcpy(p->key, key.data, key.len);
		p->klen = key.len;
		p->pnum = st_get_u64(val.data);
		p->count = st_get_u64((const unsigned char *)val.data + 8);
		p->next_seq = st_get_u64((const unsigned char *)val.data + 16);
		p->wlen = val.len - 24;
		p->whole = NULL;
		if (p->wlen > 0) {
			p->whole = echd_malloc(p->wlen);
			if (p->whole == NULL) {
				rc = -ENOMEM;
				break;
			}
			memcpy(p->whole, (const unsigned char *)val.data + 24, p->wlen);
		}
		n++;
		rc = storage_cursor_next(c, &key, &val);
	}
	storage_cursor_close(c);
	if (rc != ECHD_ENOTFOUND) {
		prefs_free(v, n);
		return rc;
	}
	*out = v;
	*nout = n;
	return 0;
}

/* Drops the expired records of one stream and moves its E row. */
static int
expire_stream(struct storage_txn *t, uint64_t sid, uint64_t due_ms, uint64_t now_ms)
{
	struct pref *v = NULL;
	size_t n = 0;
	uint64_t earliest = UINT64_MAX;
	struct cfg c;
	int rc = cfg_get(t, sid, &c);

	if (rc == ECHD_ENOTFOUND || (rc == 0 && c.due_ms != due_ms)) {
		/* the stream is gone (its rows are being deleted) or the row is
		 * stale: the row alone goes */
		return e_row(t, due_ms, sid, false);
	}
	if (rc == 0) {
		rc = prefs_load(t, sid, &v, &n);
	}
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct producer p;
		struct st_buf k;
		struct head h;
		uint64_t before;

		memcpy(p.key, v[i].key, v[i].klen);
		p.klen = v[i].klen;
		p.pnum = v[i].pnum;
		p.count = before = v[i].count;
		p.next_seq = v[i].next_seq;
		rc = evict(t, sid, &c, &p, now_ms, 0);
		if (rc != 0 || p.count == before) {
			if (rc == 0 && p.count > 0) {
				rc = head_get(t, sid, p.pnum, &h);
				if (rc == 0 && h.time_ms < earliest) {
					earliest = h.time_ms;
				}
			}
			continue;
		}
		k.data = p.key;
		k.len = p.klen;
		if (p.count == 0) {
			rc = storage_del(t, STORAGE_T_IDMP, &k);
			c.pids--;
			continue;
		}
		{
			struct st_buf whole = {v[i].whole, v[i].wlen};
			rc = producer_put(t, &p, v[i].wlen > 0 ? &whole : NULL);
		}
		if (rc == 0) {
			rc = head_get(t, sid, p.pnum, &h);
			if (rc == 0 && h.time_ms < earliest) {
				earliest = h.time_ms;
			}
		}
	}
	prefs_free(v, n);
	if (rc == 0) {
		uint64_t next = 0;
		if (c.iids > 0 && earliest != UINT64_MAX) {
			next = earliest + c.duration_s * 1000;
			if (next < now_ms + RECHECK_MS) {
				next = now_ms + RECHECK_MS;
			}
		}
		rc = set_due(t, sid, &c, next);
	}
	if (rc == 0) {
		rc = cfg_put(t, sid, &c);
	}
	return rc;
}

#define DUE_CHUNK 32

/* The earliest row of the E index into *due (0: none). */
static int
first_due(struct storage_txn *t, uint64_t *due)
{
	unsigned char kb[9];
	struct storage_cursor *c;
	struct st_buf key, val, seek = {kb, 9};
	int rc;

	st_put_u64(kb, 0);
	kb[8] = 'E';
	*due = 0;
	rc = storage_cursor_open(t, STORAGE_T_IDMP, &c);
	if (rc != 0) {
		return rc;
	}
	rc = storage_cursor_seek(c, &seek, &key, &val);
	if (rc == 0 && key.len == E_KEY_LEN && memcmp(key.data, kb, 9) == 0) {
		*due = st_get_u64((const unsigned char *)key.data + 9);
	}
	storage_cursor_close(c);
	return rc == ECHD_ENOTFOUND ? 0 : rc;
}

int
stream_idmp_expire_due(struct storage_txn *t, uint64_t now_ms, unsigned budget, unsigned *n,
	uint64_t *next_ms)
{
	struct {
		uint64_t due, sid;
	} due[DUE_CHUNK];
	unsigned char kb[9];
	int rc = 0;

	*n = 0;
	*next_ms = 0;
	st_put_u64(kb, 0);
	kb[8] = 'E';
	while (rc == 0 && *n < budget) {
		struct storage_cursor *c;
		struct st_buf key, val, seek = {kb, 9};
		unsigned nd = 0;

		*next_ms = 0;
		rc = storage_cursor_open(t, STORAGE_T_IDMP, &c);
		if (rc != 0) {
			return rc;
		}
		rc = storage_cursor_seek(c, &seek, &key, &val);
		while (rc == 0) {
			const unsigned char *kp = key.data;
			if (key.len != E_KEY_LEN || memcmp(kp, kb, 9) != 0) {
				rc = ECHD_ENOTFOUND;
				break;
			}
			if (st_get_u64(kp + 9) > now_ms) {
				*next_ms = st_get_u64(kp + 9);
				break;
			}
			if (nd == DUE_CHUNK || *n + nd == budget) {
				*next_ms = now_ms;
				break;
			}
			due[nd].due = st_get_u64(kp + 9);
			due[nd].sid = st_get_u64(kp + 17);
			nd++;
			rc = storage_cursor_next(c, &key, &val);
		}
		storage_cursor_close(c);
		if (rc != 0 && rc != ECHD_ENOTFOUND) {
			return rc;
		}
		rc = 0;
		for (unsigned i = 0; rc == 0 && i < nd; i++) {
			rc = expire_stream(t, due[i].sid, due[i].due, now_ms);
			(*n)++;
		}
		if (*next_ms != now_ms || nd == 0) {
			break;
		}
	}
	if (rc == 0 && *n > 0 && *next_ms != now_ms) {
		rc = first_due(t, next_ms); /* the streams looked at moved on */
	}
	return rc;
}
