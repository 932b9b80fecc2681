/* adm_check.c - `echo-admin check`: every invariant of a data directory (or of
 * echd's schema on PostgreSQL: the same rows, read through the same interface).
 *
 * Walks every table once, in one read-only transaction (so it may run
 * while echd writes, and sees one consistent state), and compares the
 * rows with the counters and indexes kept beside them:
 *   keys <-> byid <-> the dbsize counters; every stream's entries against
 *   its node rows and metadata (length, first/last id, node count, tail);
 *   every group's consumers against their records, its PEL against each
 *   consumer's index (cpel) both ways (a row XNACK released has no owner and
 *   no index row), the group's policy (BACKOFF values positive), its due
 *   rows against its PEL both ways (a timed policy's deadlines), and the
 *   pending counters against
 *   the rows; ids in order; and no row whose stream or group is neither
 *   live nor queued for deletion (trash). On lmdb-staged, every table is
 *   read through the rows staged in arrival order (so the invariants hold
 *   of what echd serves), and the staging table is checked against the
 *   overlay built from it (the deferred-work interface's
 *   storage_maintain_verify()).
 * Row layouts are those documented in storage/model/stream.c and group.h; the
 * decoding repeated here is deliberate: a checker that trusted the model's
 * own readers could not see the model's mistakes.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adm.h"
#include "echd.h"
#include "group.h"

/* 2000-01-01 in Unix ms: an XNACK DELAY ends after it */
#define UNIX_MS_2000 946684800000ULL

#define SHOW_MAX   1000 /* problems printed; all are counted */
#define NODE_FIXED (8 * 3 + 16 + 4)
#define PEL_VLEN   24
#define DUE_KLEN   33

struct idset {
	uint64_t *v;
	size_t n;
	size_t cap;
	bool sorted;
};

struct consumer_tally {
	uint64_t cid;
	uint64_t recorded; /* the consumer record's pending counter */
	uint64_t pel;      /* group PEL rows it owns */
	uint64_t cpel;     /* rows of its index */
	struct st_buf name;
};

struct chk {
	struct storage *st;
	struct storage_txn *t;
	uint64_t problems;
	uint64_t streams, entries, nodes, groups, consumers, pending;
	uint64_t expiring; /* keys with an expiry time */
	uint64_t staged;   /* lmdb-staged: rows in the staging table */
	uint64_t max_id;
	uint64_t keys_per_db[256];
	struct idset sids, gids, trash_s, trash_g;
	struct adm_str label;
	struct adm_str msg;
	int err; /* a storage error that stopped the walk */
};

/* ---- helpers ---------------------------------------------------------------- */

static void
get_id(const void *data, struct stream_id *id)
{
	id->ms = echd_get_be64(data);
	id->seq = echd_get_be64((const unsigned char *)data + 8);
}

static const char *
idstr(const struct stream_id *id, char *buf)
{
	stream_id_format(id, buf);
	return buf;
}

static void problem(struct chk *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void verify_problem(void *ud, const char *msg);

static void
problem(struct chk *c, const char *fmt, ...)
{
	va_list ap;
	int n;

	c->problems++;
	if (c->problems > SHOW_MAX) {
		return;
	}
	adm_str_clear(&c->msg);
	adm_str_add(&c->msg, c->label.p != NULL ? c->label.p : "", c->label.len);
	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n > 0) {
		char *tmp = echd_malloc((size_t)n + 1);
		if (tmp != NULL) {
			va_start(ap, fmt);
			vsnprintf(tmp, (size_t)n + 1, fmt, ap);
			va_end(ap);
			adm_str_add(&c->msg, tmp, (size_t)n);
			echd_free(tmp);
		}
	}
	if (adm_out.json) {
		adm_json_str(c->msg.p, c->msg.len);
	} else {
		printf("%sproblem:%s %s\n", adm_out.color ? "\033[31m" : "",
			adm_out.color ? "\033[0m" : "", c->msg.p);
	}
}

/* storage_maintain_verify()'s problems (lmdb-staged's staging table). */
static void
verify_problem(void *ud, const char *msg)
{
	struct chk *c = ud;

	adm_str_clear(&c->label);
	problem(c, "staging: %s", msg);
}

/* The context problems are reported in: "stream 'x' (db 0): ". */
static void
label_stream(struct chk *c, unsigned db, const struct st_buf *name)
{
	adm_str_clear(&c->label);
	adm_str_add(&c->label, "stream '", 8);
	adm_str_add_escaped(&c->label, name->data, name->len);
	adm_str_addf(&c->label, "' (db %u): ", db);
}

static size_t
label_group(struct chk *c, const struct st_buf *name)
{
	size_t keep = c->label.len;

	adm_str_add(&c->label, "group '", 7);
	adm_str_add_escaped(&c->label, name->data, name->len);
	adm_str_add(&c->label, "': ", 3);
	return keep;
}

static void
label_truncate(struct chk *c, size_t len)
{
	c->label.len = len;
	if (c->label.p != NULL) {
		c->label.p[len] = '\0';
	}
}

static void
escaped(struct adm_str *s, const struct st_buf *b)
{
	adm_str_clear(s);
	adm_str_add_escaped(s, b->data, b->len);
}

static bool
idset_add(struct idset *s, uint64_t v)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		uint64_t *p = echd_realloc(s->v, cap * sizeof(*p));
		if (p == NULL) {
			return false;
		}
		s->v = p;
		s->cap = cap;
	}
	s->v[s->n++] = v;
	s->sorted = false;
	return true;
}

static int
u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static bool
idset_has(struct idset *s, uint64_t v)
{
	if (!s->sorted) {
		if (s->n > 1) {
			qsort(s->v, s->n, sizeof(*s->v), u64_cmp);
		}
		s->sorted = true;
	}
	return s->n > 0 && bsearch(&v, s->v, s->n, sizeof(*s->v), u64_cmp) != NULL;
}

/* Reports ids that appear twice (a stream id or group id reused). */
static void
idset_dups(struct chk *c, struct idset *s, const char *what)
{
	idset_has(s, 0);
	for (size_t i = 1; i < s->n; i++) {
		if (s->v[i] == s->v[i - 1]) {
			problem(c, "%s id %llu is used twice", what, (unsigned long long)s->v[i]);
		}
	}
}

static void
see_id(struct chk *c, uint64_t id)
{
	if (id > c->max_id) {
		c->max_id = id;
	}
}

/* Opens a cursor on tb positioned at the first key with the 8-byte prefix. */
static int
seek_prefix(struct chk *c, enum storage_table tb, uint64_t prefix, struct storage_cursor **cur,
	struct st_buf *key, struct st_buf *val)
{
	unsigned char k[8];
	struct st_buf seek = {k, 8};
	int rc;

	echd_put_be64(k, prefix);
	rc = storage_cursor_open(c->t, tb, cur);
	if (rc != 0) {
		return rc;
	}
	return storage_cursor_seek(*cur, &seek, key, val);
}

static bool
has_prefix(const struct st_buf *key, uint64_t prefix)
{
	return key->len >= 8 && echd_get_be64(key->data) == prefix;
}

/* ---- groups ----------------------------------------------------------------- */

static int
tally_cmp(const void *a, const void *b)
{
	const struct consumer_tally *x = a, *y = b;

	return x->cid < y->cid ? -1 : x->cid > y->cid;
}

static struct consumer_tally *
tally_find(struct consumer_tally *v, size_t n, uint64_t cid)
{
	struct consumer_tally key = {.cid = cid};

	return n > 0 ? bsearch(&key, v, n, sizeof(*v), tally_cmp) : NULL;
}

static int
check_consumers(
	struct chk *c, const struct group_meta *g, struct consumer_tally **out, size_t *nout)
{
	struct consumer_tally *v = NULL;
	struct storage_cursor *cur = NULL;
	struct st_buf key, val;
	struct adm_str a = {0};
	size_t n = 0, cap = 0;
	int rc;

	rc = seek_prefix(c, STORAGE_T_CONSUMERS, g->gid, &cur, &key, &val);
	while (rc == 0 && has_prefix(&key, g->gid)) {
		struct st_buf name = {(const unsigned char *)key.data + 8, key.len - 8}, rname;
		struct consumer_meta cm;

		escaped(&a, &name);
		if (val.len != 8) {
			problem(c, "consumer '%s': its id row has %zu bytes, not 8", a.p, val.len);
		} else {
			uint64_t cid = echd_get_be64(val.data);
			see_id(c, cid);
			rc = consumer_by_id(c->t, g, cid, &cm, &rname);
			if (rc == ECHD_ENOTFOUND) {
				problem(c, "consumer '%s' (id %llu) has no consumer record", a.p,
					(unsigned long long)cid);
			} else if (rc == ECHD_ECORRUPT) {
				problem(c, "consumer '%s': its record does not decode", a.p);
			} else if (rc != 0) {
				break;
			} else {
				if (rname.len != name.len ||
					memcmp(rname.data, name.data, name.len) != 0) {
					problem(c,
						"consumer '%s': its record names another consumer",
						a.p);
				}
				if (n == cap) {
					struct consumer_tally *p;
					cap = cap ? cap * 2 : 16;
					p = echd_realloc(v, cap * sizeof(*p));
					if (p == NULL) {
						rc = -ENOMEM;
						break;
					}
					v = p;
				}
				memset(&v[n], 0, sizeof(v[n]));
				v[n].cid = cid;
				v[n].recorded = cm.pending;
				v[n].name = name;
				n++;
			}
		}
		rc = storage_cursor_next(cur, &key, &val);
	}
	storage_cursor_close(cur);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		goto fail;
	}
	if (n != g->consumers) {
		problem(c, "counts %llu consumers, %zu consumers have rows",
			(unsigned long long)g->consumers, n);
	}
	c->consumers += n;
	if (n > 1) {
		qsort(v, n, sizeof(*v), tally_cmp); /* v may be NULL when n is 0 */
	}
	for (size_t i = 1; i < n; i++) {
		if (v[i].cid == v[i - 1].cid) {
			problem(c, "two consumers share the id %llu", (unsigned long long)v[i].cid);
		}
	}
	/* consumer records without a name row */
	rc = seek_prefix(c, STORAGE_T_CONSREC, g->gid, &cur, &key, &val);
	while (rc == 0 && has_prefix(&key, g->gid)) {
		if (key.len != 16) {
			problem(c, "a consumer record key has %zu bytes, not 16", key.len);
		} else if (tally_find(v, n, echd_get_be64((const unsigned char *)key.data + 8)) == NULL) {
			problem(c, "consumer record %llu belongs to no named consumer",
				(unsigned long long)echd_get_be64((const unsigned char *)key.data + 8));
		}
		rc = storage_cursor_next(cur, &key, &val);
	}
	storage_cursor_close(cur);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		goto fail;
	}
	adm_str_finish(&a);
	*out = v;
	*nout = n;
	return 0;
fail:
	adm_str_finish(&a);
	echd_free(v);
	return rc;
}

/* The group PEL and every consumer's index must hold the same rows. */
static int
check_pel(struct chk *c, const struct stream_meta *m, const struct group_meta *g,
	struct consumer_tally *v, size_t nv)
{
	struct storage_cursor *cur = NULL;
	struct st_buf key, val;
	struct stream_id prev = {0, 0};
	struct adm_str a = {0};
	uint64_t rows = 0, released = 0;
	char ib[48], lb[48];
	int rc;

	rc = seek_prefix(c, STORAGE_T_PEL, g->gid, &cur, &key, &val);
	while (rc == 0 && has_prefix(&key, g->gid)) {
		struct consumer_tally *ct;
		struct stream_id id;
		uint64_t cid;

		if (key.len != 24 || val.len != PEL_VLEN) {
			problem(c, "a PEL row has a %zu-byte key and a %zu-byte value", key.len,
				val.len);
			rc = storage_cursor_next(cur, &key, &val);
			continue;
		}
		get_id((const unsigned char *)key.data + 8, &id);
		cid = echd_get_be64(val.data);
		if (rows > 0 && stream_id_cmp(&id, &prev) <= 0) {
			problem(c, "PEL ids out of order: %s after %s", idstr(&id, ib),
				idstr(&prev, lb));
		}
		prev = id;
		rows++;
		/* No bound by the stream's last id: XSETID may lower it below
		 * entries trimmed away while still pending (Redis checks only
		 * the last live entry and the max deleted id). */
		ct = cid == PEL_UNOWNED ? NULL : tally_find(v, nv, cid);
		if (cid == PEL_UNOWNED) {
			/* released by XNACK: no owner, no index row; its delivery
			 * time is 0 (claimable at once) or when an XNACK DELAY ends,
			 * a Unix time in ms (none is before 2000) */
			uint64_t t = echd_get_be64((const unsigned char *)val.data + 8);
			released++;
			if (t != 0 && t < UNIX_MS_2000) {
				problem(c,
					"released pending entry %s has delivery time %llu, not 0 "
					"nor a time",
					idstr(&id, ib), (unsigned long long)t);
			}
				} else if (ct == NULL) {
			problem(c,
				"pending entry %s is owned by consumer id %llu, which does not "
				"exist",
				idstr(&id, ib), (unsigned long long)cid);
		} else {
			unsigned char ck[32];
			struct st_buf k = {ck, 32}, cv;
			int grc;

			ct->pel++;
			echd_put_be64(ck, g->gid);
			echd_put_be64(ck + 8, cid);
			memcpy(ck + 16, (const unsigned char *)key.data + 8, 16);
			grc = storage_get(c->t, STORAGE_T_CPEL, &k, &cv);
			if (grc == ECHD_ENOTFOUND) {
				escaped(&a, &ct->name);
				problem(c,
					"pending entry %s of consumer '%s' is missing from the "
					"consumer's index (cpel)",
					idstr(&id, ib), a.p);
			} else if (grc != 0) {
				rc = grc;
				break;
			}
		}
		rc = storage_cursor_next(cur, &key, &val);
	}
	storage_cursor_close(cur);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		goto out;
	}
	c->pending += rows;
	if (rows != g->pending) {
		problem(c, "counts %llu pending, the PEL holds %llu rows",
			(unsigned long long)g->pending, (unsigned long long)rows);
	}
	if (released != g->nacked) {
		problem(c, "counts %llu released (nacked), the PEL holds %llu",
			(unsigned long long)g->nacked, (unsigned long long)released);
	}
	/* and the other way: each index row has its PEL row, with that owner */
	rc = seek_prefix(c, STORAGE_T_CPEL, g->gid, &cur, &key, &val);
	while (rc == 0 && has_prefix(&key, g->gid)) {
		struct consumer_tally *ct;
		unsigned char pk[24];
		struct st_buf k = {pk, 24}, pv;
		struct stream_id id;
		uint64_t cid;
		int grc;

		if (key.len != 32) {
			problem(c, "an index (cpel) key has %zu bytes, not 32", key.len);
			rc = storage_cursor_next(cur, &key, &val);
			continue;
		}
		cid = echd_get_be64((const unsigned char *)key.data + 8);
		get_id((const unsigned char *)key.data + 16, &id);
		ct = tally_find(v, nv, cid);
		if (ct == NULL) {
			problem(c,
				"the index (cpel) of consumer id %llu, which does not exist, lists "
				"%s",
				(unsigned long long)cid, idstr(&id, ib));
		} else {
			ct->cpel++;
		}
		echd_put_be64(pk, g->gid);
		memcpy(pk + 8, (const unsigned char *)key.data + 16, 16);
		grc = storage_get(c->t, STORAGE_T_PEL, &k, &pv);
		if (grc == ECHD_ENOTFOUND) {
			problem(c,
				"index (cpel) of consumer id %llu lists %s, which is not pending",
				(unsigned long long)cid, idstr(&id, ib));
		} else if (grc != 0) {
			rc = grc;
			break;
		} else if (pv.len == PEL_VLEN && echd_get_be64(pv.data) != cid) {
			problem(c,
				"index (cpel) of consumer id %llu lists %s, pending for consumer "
				"id %llu",
				(unsigned long long)cid, idstr(&id, ib),
				(unsigned long long)echd_get_be64(pv.data));
		}
		rc = storage_cursor_next(cur, &key, &val);
	}
	storage_cursor_close(cur);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		goto out;
	}
	rc = 0;
	for (size_t i = 0; i < nv; i++) {
		escaped(&a, &v[i].name);
		if (v[i].recorded != v[i].pel) {
			problem(c, "consumer '%s' counts %llu pending, the group PEL gives it %llu",
				a.p, (unsigned long long)v[i].recorded,
				(unsigned long long)v[i].pel);
		}
		if (v[i].cpel != v[i].pel) {
			problem(c,
				"consumer '%s': its index (cpel) has %llu rows, the group PEL "
				"gives "
				"it %llu",
				a.p, (unsigned long long)v[i].cpel, (unsigned long long)v[i].pel);
		}
	}
out:
	adm_str_finish(&a);
	return rc;
}

/* When a pending row is due under policy p, as group.h defines it (worked
 * out again here, not by the model's pel_due_of()): *at and *kind (0 dead-
 * lettered then, 1 handed out again); false when it has no deadline. */
static bool
due_expected(const struct group_policy *p, const unsigned char *pv, uint64_t *at, int *kind)
{
	uint64_t cid = echd_get_be64(pv), time = echd_get_be64(pv + 8), count = echd_get_be64(pv + 16), wait;

	if (p->ack_wait == 0 && p->nbackoff == 0) {
		return false;
	}
	if (cid == PEL_UNOWNED) {
		*at = time;
	} else {
		uint64_t i = count == 0 ? 0 : count - 1;
		wait = p->nbackoff > 0 ? p->backoff[i < p->nbackoff ? i : p->nbackoff - 1]
				       : p->ack_wait;
		if (wait == 0 || time > UINT64_MAX - wait) {
			return false;
		}
		*at = time + wait;
	}
	*kind = p->max_deliver != 0 && count >= p->max_deliver ? 0 : 1;
	return true;
}

/* due: gid(8) kind(1) deadline(8) ms seq -> (empty). A group whose policy
 * is timed has one due row per pending row with a deadline, and no other;
 * one without has none. A group with pending rows and no due row at all
 * holds a PEL of an echd before due rows, which echd completes when it
 * starts: not a problem. */
static int
check_due(struct chk *c, const struct group_meta *g)
{
	struct storage_cursor *cur = NULL;
	struct st_buf key, val;
	struct stream_id id, first = {0, 0};
	uint64_t rows = 0, missing = 0, at;
	char ib[48];
	int rc, kind;

	rc = seek_prefix(c, STORAGE_T_DUE, g->gid, &cur, &key, &val);
	while (rc == 0 && has_prefix(&key, g->gid)) {
		const unsigned char *k = key.data;
		unsigned char pk[24];
		struct st_buf pkb = {pk, 24}, pv;
		int grc;

		rows++;
		if (key.len != DUE_KLEN || k[8] > 1 || val.len != 0) {
			problem(c, "a due row has a %zu-byte key (kind %u) and a %zu-byte value",
				key.len, key.len > 8 ? k[8] : 0, val.len);
			rc = storage_cursor_next(cur, &key, &val);
			continue;
		}
		get_id(k + 17, &id);
		echd_put_be64(pk, g->gid);
		memcpy(pk + 8, k + 17, 16);
		grc = storage_get(c->t, STORAGE_T_PEL, &pkb, &pv);
		if (grc == ECHD_ENOTFOUND) {
			problem(c, "a due row names %s, which is not pending", idstr(&id, ib));
		} else if (grc != 0) {
			rc = grc;
			break;
		} else if (pv.len != PEL_VLEN) {
			/* check_pel() reports the row */
		} else if (!due_expected(&g->policy, pv.data, &at, &kind)) {
			problem(c, "a due row names %s, which has no deadline under the policy",
				idstr(&id, ib));
		} else if (at != echd_get_be64(k + 9) || kind != k[8]) {
			problem(c,
				"the due row of %s says %s at %llu, its pending entry %s at %llu",
				idstr(&id, ib), k[8] ? "redelivery" : "dead-lettering",
				(unsigned long long)echd_get_be64(k + 9),
				kind ? "redelivery" : "dead-lettering", (unsigned long long)at);
		}
		rc = storage_cursor_next(cur, &key, &val);
	}
	storage_cursor_close(cur);
	cur = NULL;
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return rc;
	}
	/* and the other way: each pending row with a deadline has its due row */
	rc = seek_prefix(c, STORAGE_T_PEL, g->gid, &cur, &key, &val);
	while (rc == 0 && has_prefix(&key, g->gid)) {
		unsigned char dk[DUE_KLEN];
		struct st_buf dkb = {dk, DUE_KLEN}, dv;
		int grc;

		if (key.len == 24 && val.len == PEL_VLEN &&
			due_expected(&g->policy, val.data, &at, &kind)) {
			echd_put_be64(dk, g->gid);
			dk[8] = (unsigned char)kind;
			echd_put_be64(dk + 9, at);
			memcpy(dk + 17, (const unsigned char *)key.data + 8, 16);
			grc = storage_get(c->t, STORAGE_T_DUE, &dkb, &dv);
			if (grc == ECHD_ENOTFOUND) {
				if (missing++ == 0) {
					get_id((const unsigned char *)key.data + 8, &first);
				}
			} else if (grc != 0) {
				rc = grc;
				break;
			}
		}
		rc = storage_cursor_next(cur, &key, &val);
	}
	storage_cursor_close(cur);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return rc;
	}
	if (missing > 0 && rows > 0) {
		problem(c, "%llu pending entries have no due row (the first: %s)",
			(unsigned long long)missing, idstr(&first, ib));
	}
	return 0;
}

static int
check_groups(struct chk *c, const struct stream_meta *m)
{
	struct storage_cursor *cur = NULL;
	struct st_buf key, val;
	uint64_t n = 0;
	int rc;

	rc = seek_prefix(c, STORAGE_T_GROUPS, m->sid, &cur, &key, &val);
	while (rc == 0 && has_prefix(&key, m->sid)) {
		struct st_buf name = {(const unsigned char *)key.data + 8, key.len - 8};
		struct consumer_tally *v = NULL;
		struct group_meta g;
		size_t nv = 0, keep = label_group(c, &name);

		n++;
		rc = group_lookup(c->t, m, &name, &g);
		if (rc == ECHD_ECORRUPT) {
			problem(c, "its record does not decode (%zu bytes)", val.len);
			rc = 0;
		} else if (rc == 0) {
			see_id(c, g.gid);
			for (uint32_t i = 0; i < g.policy.nbackoff; i++) {
				if (g.policy.backoff[i] == 0) {
					problem(c, "its policy has BACKOFF value %u at 0", i + 1);
				}
			}
			if (!idset_add(&c->gids, g.gid)) {
				rc = -ENOMEM;
			}
			if (rc == 0) {
				rc = check_consumers(c, &g, &v, &nv);
			}
			if (rc == 0) {
				rc = check_pel(c, m, &g, v, nv);
			}
			if (rc == 0) {
				rc = check_due(c, &g);
			}
			echd_free(v);
		}
		label_truncate(c, keep);
		if (rc != 0) {
			break;
		}
		rc = storage_cursor_next(cur, &key, &val);
	}
	storage_cursor_close(cur);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return rc;
	}
	c->groups += n;
	if (n != m->groups) {
		problem(c, "counts %llu groups, %llu have rows", (unsigned long long)m->groups,
			(unsigned long long)n);
	}
	return 0;
}

/* ---- streams ---------------------------------------------------------------- */

struct node {
	struct stream_id first, last;
	uint64_t live;
	uint64_t seen; /* entry rows found in its range */
};

static int
load_nodes(struct chk *c, const struct stream_meta *m, struct node **out, size_t *nout)
{
	struct storage_cursor *cur = NULL;
	struct st_buf key, val;
	struct node *v = NULL;
	size_t n = 0, cap = 0;
	char ib[48], lb[48];
	int rc;

	rc = seek_prefix(c, STORAGE_T_NODES, m->sid, &cur, &key, &val);
	while (rc == 0 && has_prefix(&key, m->sid)) {
		struct node nd;

		if (key.len != 24 || val.len < NODE_FIXED) {
			problem(c, "a node row has a %zu-byte key and a %zu-byte value", key.len,
				val.len);
			rc = storage_cursor_next(cur, &key, &val);
			continue;
		}
		memset(&nd, 0, sizeof(nd));
		get_id((const unsigned char *)key.data + 8, &nd.first);
		nd.live = echd_get_be64(val.data);
		get_id((const unsigned char *)val.data + 24, &nd.last);
		if (stream_id_cmp(&nd.first, &nd.last) > 0) {
			problem(c, "node %s ends before it starts, at %s", idstr(&nd.first, ib),
				idstr(&nd.last, lb));
		}
		if (n > 0 && stream_id_cmp(&v[n - 1].last, &nd.first) >= 0) {
			problem(c, "node %s overlaps the node before it (which ends at %s)",
				idstr(&nd.first, ib), idstr(&v[n - 1].last, lb));
		}
		if (n == cap) {
			struct node *p;
			cap = cap ? cap * 2 : 64;
			p = echd_realloc(v, cap * sizeof(*p));
			if (p == NULL) {
				rc = -ENOMEM;
				break;
			}
			v = p;
		}
		v[n++] = nd;
		rc = storage_cursor_next(cur, &key, &val);
	}
	storage_cursor_close(cur);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		echd_free(v);
		return rc;
	}
	*out = v;
	*nout = n;
	return 0;
}

static int
check_entries(struct chk *c, const struct stream_meta *m)
{
	struct storage_cursor *cur = NULL;
	struct st_buf key, val;
	struct node *nodes = NULL;
	size_t nn = 0, k = 0;
	struct stream_id first = {0, 0}, prev = {0, 0};
	uint64_t n = 0, live = 0;
	bool outside = false;
	char ib[48], lb[48];
	int rc = load_nodes(c, m, &nodes, &nn);

	if (rc != 0) {
		return rc;
	}
	rc = seek_prefix(c, STORAGE_T_ENTRIES, m->sid, &cur, &key, &val);
	while (rc == 0 && has_prefix(&key, m->sid)) {
		struct stream_id id;
		struct st_buf f, fv;
		size_t pairs, walked = 0, pos = 0;

		if (key.len != 24) {
			problem(c, "an entry key has %zu bytes, not 24", key.len);
			rc = storage_cursor_next(cur, &key, &val);
			continue;
		}
		get_id((const unsigned char *)key.data + 8, &id);
		if (n == 0) {
			first = id;
		} else if (stream_id_cmp(&id, &prev) <= 0) {
			problem(c, "entry ids out of order: %s after %s", idstr(&id, ib),
				idstr(&prev, lb));
		}
		prev = id;
		n++;
		pairs = val.len >= 4 ? stream_fields_count(&val) : 0;
		while (stream_fields_next(&val, &pos, &f, &fv)) {
			walked++;
		}
		if (val.len < 4 || walked != pairs || (walked > 0 ? pos : 4) != val.len) {
			problem(c, "entry %s: its fields do not decode", idstr(&id, ib));
		}
		/* the node whose range holds id */
		while (k < nn && stream_id_cmp(&nodes[k].last, &id) < 0) {
			k++;
		}
		if (k == nn || stream_id_cmp(&id, &nodes[k].first) < 0) {
			if (!outside) {
				problem(c, "entry %s lies in no node", idstr(&id, ib));
			}
			outside = true;
		} else {
			nodes[k].seen++;
		}
		rc = storage_cursor_next(cur, &key, &val);
	}
	storage_cursor_close(cur);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		echd_free(nodes);
		return rc;
	}
	c->entries += n;
	c->nodes += nn;
	for (size_t i = 0; i < nn; i++) {
		live += nodes[i].live;
		if (nodes[i].seen != nodes[i].live) {
			problem(c, "node %s counts %llu live entries, %llu rows lie in it",
				idstr(&nodes[i].first, ib), (unsigned long long)nodes[i].live,
				(unsigned long long)nodes[i].seen);
		}
	}
	if (m->length != n) {
		problem(c, "length is %llu, the stream has %llu entry rows",
			(unsigned long long)m->length, (unsigned long long)n);
	}
	if (live != n) {
		problem(c, "its nodes count %llu live entries, the stream has %llu rows",
			(unsigned long long)live, (unsigned long long)n);
	}
	if (m->nodes != nn) {
		problem(c, "counts %llu nodes, %zu node rows exist", (unsigned long long)m->nodes,
			nn);
	}
	if (nn > 0 && stream_id_cmp(&m->tail_node, &nodes[nn - 1].first) != 0) {
		problem(c, "its tail node is recorded as %s, the last node is %s",
			idstr(&m->tail_node, ib), idstr(&nodes[nn - 1].first, lb));
	}
	if (n > 0 && stream_id_cmp(&m->first, &first) != 0) {
		problem(c, "first entry recorded as %s, the first row is %s", idstr(&m->first, ib),
			idstr(&first, lb));
	}
	if (n == 0 && (m->first.ms != 0 || m->first.seq != 0)) {
		problem(c, "empty, yet its first entry is recorded as %s", idstr(&m->first, ib));
	}
	if (n > 0 && stream_id_cmp(&prev, &m->last) > 0) {
		problem(c, "entry %s is beyond the last generated id %s", idstr(&prev, ib),
			idstr(&m->last, lb));
	}
	if (stream_id_cmp(&m->max_deleted, &m->last) > 0) {
		problem(c, "max-deleted-entry-id %s is beyond the last generated id %s",
			idstr(&m->max_deleted, ib), idstr(&m->last, lb));
	}
	if (m->entries_added < m->length) {
		problem(c, "entries-added %llu is less than its length %llu",
			(unsigned long long)m->entries_added, (unsigned long long)m->length);
	}
	echd_free(nodes);
	return 0;
}

/* keys: db(1) namelen(4) name, or for long names a prefix and hashes with
 * the whole name after the metadata in the value. */
/* ---- idempotent producers (stream_idmp.c) ------------------------------------ */

struct ptally {
	uint64_t pnum;
	uint64_t irows, qrows; /* I and Q rows of the producer */
	bool has_p;
	uint64_t count, next_seq; /* its P row's */
};

static struct ptally *
ptally_find(struct ptally *v, size_t n, uint64_t pnum)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (v[mid].pnum == pnum) {
			return &v[mid];
		}
		if (v[mid].pnum < pnum) {
			lo = mid + 1;
		} else {
			hi = mid;
		}
	}
	return NULL;
}

/* Whether an iid or pid key part (form byte and bytes) is well formed. */
static bool
idmp_part_ok(const unsigned char *p, size_t len)
{
	return len >= 1 && ((p[0] == 'i' && len <= 1 + 400) || (p[0] == 'h' && len == 1 + 400));
}

/* A stream's IDMP rows (layout in storage/model/stream_idmp.c): its C row's
 * counters against its P, I and Q rows; every Q row names an I row that
 * names it back; each producer's count against its rows and maxsize; and
 * the stream's row in the E index. */
static int
check_idmp(struct chk *c, const struct stream_meta *m)
{
	struct storage_cursor *cur = NULL;
	struct st_buf key, val;
	struct ptally *tv = NULL;
	size_t tn = 0, tcap = 0;
	uint64_t cfg[8] = {0}, prows = 0, irows = 0, qrows = 0;
	bool has_c = false;
	int rc;

	rc = seek_prefix(c, STORAGE_T_IDMP, m->sid, &cur, &key, &val);
	while (rc == 0 && has_prefix(&key, m->sid)) {
		const unsigned char *kp = key.data, *vp = val.data;
		struct ptally *pt;
		unsigned char kind = key.len > 8 ? kp[8] : 0;

		/* 64 bytes of settings and counters, then IDMPAUTO's 16-byte
		 * secret (none in a row written before issue 35) */
		if (kind == 'C' && key.len == 9 && (val.len == 64 || val.len == 80)) {
			has_c = true;
			for (int i = 0; i < 8; i++) {
				cfg[i] = echd_get_be64(vp + 8 * i);
			}
		} else if (kind == 'I' && key.len >= 18 && idmp_part_ok(kp + 17, key.len - 17) &&
			   val.len >= 32) {
			uint64_t pnum = echd_get_be64(kp + 9);
			irows++;
			if (tn == 0 || tv[tn - 1].pnum != pnum) {
				if (tn == tcap) {
					size_t ncap = tcap ? tcap * 2 : 16;
					struct ptally *nv = realloc(tv, ncap * sizeof(*nv));
					if (nv == NULL) {
						rc = -ENOMEM;
						break;
					}
					tv = nv;
					tcap = ncap;
				}
				memset(&tv[tn], 0, sizeof(tv[tn]));
				tv[tn++].pnum = pnum;
			}
			tv[tn - 1].irows++;
		} else if (kind == 'P' && key.len >= 10 && idmp_part_ok(kp + 9, key.len - 9) &&
			   val.len >= 24) {
			prows++;
			pt = ptally_find(tv, tn, echd_get_be64(vp));
			if (pt == NULL || pt->has_p) {
				problem(c, "idempotent producer %llu has %s",
					(unsigned long long)echd_get_be64(vp),
					pt == NULL ? "no records" : "two producer rows");
			} else {
				pt->has_p = true;
				pt->count = echd_get_be64(vp + 8);
				pt->next_seq = echd_get_be64(vp + 16);
				if (echd_get_be64(vp) >= cfg[6]) {
					problem(c, "idempotent producer %llu is past the stream's next "
						   "number %llu",
						(unsigned long long)pt->pnum, (unsigned long long)cfg[6]);
				}
			}
		} else if (kind == 'Q' && key.len == 25 && val.len >= 9 &&
			   idmp_part_ok(vp + 8, val.len - 8)) {
			unsigned char ik[17 + 1 + 400];
			struct st_buf ikey = {ik, 17 + val.len - 8}, iv;
			uint64_t pnum = echd_get_be64(kp + 9), seq = echd_get_be64(kp + 17);
			int grc;

			qrows++;
			pt = ptally_find(tv, tn, pnum);
			if (pt != NULL) {
				pt->qrows++;
				if (seq >= pt->next_seq) {
					problem(c, "idempotent record %llu of producer %llu is past the "
						   "producer's next number",
						(unsigned long long)seq, (unsigned long long)pnum);
				}
			}
			memcpy(ik, kp, 8);
			ik[8] = 'I';
			memcpy(ik + 9, kp + 9, 8);
			memcpy(ik + 17, vp + 8, val.len - 8);
			grc = storage_get(c->t, STORAGE_T_IDMP, &ikey, &iv);
			if (grc == ECHD_ENOTFOUND || (grc == 0 && (iv.len < 32 ||
								  echd_get_be64((const unsigned char *)iv.data +
									  24) != seq))) {
				problem(c, "idempotent record %llu of producer %llu: its id row is "
					   "missing or names another",
					(unsigned long long)seq, (unsigned long long)pnum);
			} else if (grc != 0) {
				rc = grc;
				break;
			}
		} else {
			problem(c, "an idempotency row (%zu-byte key, %zu-byte value) is malformed",
				key.len, val.len);
		}
		rc = storage_cursor_next(cur, &key, &val);
	}
	storage_cursor_close(cur);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		free(tv);
		return rc;
	}
	rc = 0;
	if (!has_c) {
		if (prows + irows + qrows > 0) {
			problem(c, "idempotency records but no idempotency settings row");
		}
		free(tv);
		return 0;
	}
	if (cfg[0] < 1 || cfg[0] > 86400 || cfg[1] < 1 || cfg[1] > 10000) {
		problem(c, "IDMP-DURATION %llu or IDMP-MAXSIZE %llu out of range",
			(unsigned long long)cfg[0], (unsigned long long)cfg[1]);
	}
	if (cfg[2] != prows || cfg[3] != irows || irows != qrows) {
		problem(c, "pids-tracked %llu, iids-tracked %llu; rows: %llu producers, %llu ids, "
			   "%llu queued",
			(unsigned long long)cfg[2], (unsigned long long)cfg[3],
			(unsigned long long)prows, (unsigned long long)irows,
			(unsigned long long)qrows);
	}
	for (size_t i = 0; i < tn; i++) {
		struct ptally *pt = &tv[i];
		if (!pt->has_p || pt->count != pt->irows || pt->count != pt->qrows ||
			pt->count > cfg[1]) {
			problem(c, "idempotent producer %llu counts %llu records: %llu id rows, %llu "
				   "queued (maxsize %llu)",
				(unsigned long long)pt->pnum, (unsigned long long)pt->count,
				(unsigned long long)pt->irows, (unsigned long long)pt->qrows,
				(unsigned long long)cfg[1]);
		}
	}
	free(tv);
	if (cfg[3] > 0 && cfg[7] == 0) {
		problem(c, "idempotency records but no place in the expiry index");
	}
	if (cfg[7] != 0) {
		unsigned char ek[25];
		struct st_buf ekey = {ek, sizeof(ek)}, ev;
		echd_put_be64(ek, 0);
		ek[8] = 'E';
		echd_put_be64(ek + 9, cfg[7]);
		echd_put_be64(ek + 17, m->sid);
		rc = storage_get(c->t, STORAGE_T_IDMP, &ekey, &ev);
		if (rc == ECHD_ENOTFOUND) {
			problem(c, "its idempotency expiry index row (%llu ms) is missing",
				(unsigned long long)cfg[7]);
			rc = 0;
		}
	}
	return rc;
}

static int
check_keys(struct chk *c)
{
	struct storage_cursor *cur = NULL;
	struct st_buf key, val;
	struct adm_str a = {0};
	int rc;

	rc = storage_cursor_open(c->t, STORAGE_T_KEYS, &cur);
	if (rc == 0) {
		rc = storage_cursor_seek(cur, NULL, &key, &val);
	}
	while (rc == 0) {
		const unsigned char *kp = key.data;
		struct st_buf name, bn;
		struct stream_meta m;
		unsigned char bk[9];
		struct st_buf bkey = {bk, 9};
		uint32_t nlen;
		unsigned db;

		adm_str_clear(&c->label);
		if (key.len < 5) {
			problem(c, "a key row has %zu bytes", key.len);
			rc = storage_cursor_next(cur, &key, &val);
			continue;
		}
		db = kp[0];
		nlen = ((uint32_t)kp[1] << 24) | ((uint32_t)kp[2] << 16) | ((uint32_t)kp[3] << 8) |
		       kp[4];
		if (key.len == 5 + (size_t)nlen) {
			name.data = kp + 5;
		} else if (val.len >= nlen) {
			name.data = (const unsigned char *)val.data + val.len - nlen;
		} else {
			problem(c, "db %u: a key row names %u bytes it does not hold", db, nlen);
			rc = storage_cursor_next(cur, &key, &val);
			continue;
		}
		name.len = nlen;
		c->keys_per_db[db]++;
		label_stream(c, db, &name);
		rc = stream_lookup(c->t, db, &name, &m);
		if (rc == ECHD_ECORRUPT || rc == ECHD_EINVAL) {
			problem(c, "its metadata does not decode");
			rc = storage_cursor_next(cur, &key, &val);
			continue;
		}
		if (rc != 0) {
			break;
		}
		c->streams++;
		see_id(c, m.sid);
		if (!idset_add(&c->sids, m.sid)) {
			rc = -ENOMEM;
			break;
		}
		bk[0] = (unsigned char)db;
		echd_put_be64(bk + 1, m.sid);
		rc = storage_get(c->t, STORAGE_T_BYID, &bkey, &bn);
		if (rc == ECHD_ENOTFOUND) {
			problem(c, "no scan row (byid) for its id %llu", (unsigned long long)m.sid);
		} else if (rc != 0) {
			break;
		} else if (bn.len != name.len || memcmp(bn.data, name.data, name.len) != 0) {
			escaped(&a, &bn);
			problem(c, "its scan row (byid) names '%s'", a.p);
		}
		if (m.expire_ms != 0) {
			unsigned char ek[17];
			struct st_buf ekey = {ek, sizeof(ek)}, ev;

			echd_put_be64(ek, m.expire_ms);
			ek[8] = (unsigned char)db;
			echd_put_be64(ek + 9, m.sid);
			rc = storage_get(c->t, STORAGE_T_EXPIRES, &ekey, &ev);
			if (rc == ECHD_ENOTFOUND) {
				problem(c, "it expires at %llu ms but has no expiry row",
					(unsigned long long)m.expire_ms);
			} else if (rc != 0) {
				break;
			}
			c->expiring++;
		}
		rc = check_entries(c, &m);
		if (rc == 0) {
			rc = check_groups(c, &m);
		}
		if (rc == 0) {
			rc = check_idmp(c, &m);
		}
		if (rc != 0) {
			break;
		}
		rc = storage_cursor_next(cur, &key, &val);
	}
	storage_cursor_close(cur);
	adm_str_clear(&c->label);
	adm_str_finish(&a);
	return rc == ECHD_ENOTFOUND ? 0 : rc;
}

/* byid: db(1) sid(8) -> name, the SCAN order; each must name a live key. */
static int
check_byid(struct chk *c)
{
	struct storage_cursor *cur = NULL;
	struct st_buf key, val;
	uint64_t per_db[256];
	struct adm_str a = {0};
	int rc;

	memset(per_db, 0, sizeof(per_db));
	rc = storage_cursor_open(c->t, STORAGE_T_BYID, &cur);
	if (rc == 0) {
		rc = storage_cursor_seek(cur, NULL, &key, &val);
	}
	while (rc == 0) {
		struct stream_meta m;
		unsigned db;
		uint64_t sid;

		if (key.len != 9) {
			problem(c, "a scan row (byid) key has %zu bytes, not 9", key.len);
			rc = storage_cursor_next(cur, &key, &val);
			continue;
		}
		db = ((const unsigned char *)key.data)[0];
		sid = echd_get_be64((const unsigned char *)key.data + 1);
		per_db[db]++;
		escaped(&a, &val);
		rc = stream_lookup(c->t, db, &val, &m);
		if (rc == ECHD_ENOTFOUND) {
			problem(c, "db %u: scan row (byid) %llu names '%s', which does not exist",
				db, (unsigned long long)sid, a.p);
		} else if (rc == 0 && m.sid != sid) {
			problem(c, "db %u: scan row (byid) %llu names '%s', whose id is %llu", db,
				(unsigned long long)sid, a.p, (unsigned long long)m.sid);
		} else if (rc != 0 && rc != ECHD_ECORRUPT && rc != ECHD_EINVAL) {
			break;
		}
		rc = storage_cursor_next(cur, &key, &val);
	}
	storage_cursor_close(cur);
	adm_str_finish(&a);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return rc;
	}
	for (unsigned db = 0; db < 256; db++) {
		uint64_t n = 0;
		if (per_db[db] != c->keys_per_db[db]) {
			problem(c, "db %u: %llu keys, %llu scan rows (byid)", db,
				(unsigned long long)c->keys_per_db[db],
				(unsigned long long)per_db[db]);
		}
		rc = stream_db_size(c->t, db, &n);
		if (rc == ECHD_ECORRUPT) {
			problem(c, "db %u: the key counter does not decode", db);
		} else if (rc != 0) {
			return rc;
		} else if (n != c->keys_per_db[db]) {
			problem(c, "db %u: counts %llu keys (DBSIZE), %llu key rows exist", db,
				(unsigned long long)n, (unsigned long long)c->keys_per_db[db]);
		}
	}
	return 0;
}

static int
check_trash(struct chk *c)
{
	struct storage_cursor *cur = NULL;
	struct st_buf key, val;
	int rc;

	rc = storage_cursor_open(c->t, STORAGE_T_TRASH, &cur);
	if (rc == 0) {
		rc = storage_cursor_seek(cur, NULL, &key, &val);
	}
	while (rc == 0) {
		const unsigned char *kp = key.data;
		if (key.len != 9 || (kp[0] != 'S' && kp[0] != 'G')) {
			problem(c, "a deletion queue (trash) row is malformed");
		} else if (!idset_add(kp[0] == 'S' ? &c->trash_s : &c->trash_g, echd_get_be64(kp + 1))) {
			rc = -ENOMEM;
			break;
		}
		rc = storage_cursor_next(cur, &key, &val);
	}
	storage_cursor_close(cur);
	return rc == ECHD_ENOTFOUND ? 0 : rc;
}

/* Rows of table tb must belong to a live or a deleted-but-queued owner.
 * Jumps from one 8-byte prefix to the next: one seek per owner. */
static int
check_orphans(struct chk *c, enum storage_table tb, const char *what, struct idset *live,
	struct idset *trash, const char *owner)
{
	struct storage_cursor *cur = NULL;
	struct st_buf key, val;
	unsigned char next[8];
	struct st_buf seek = {next, 8};
	int rc;

	rc = storage_cursor_open(c->t, tb, &cur);
	if (rc == 0) {
		rc = storage_cursor_seek(cur, NULL, &key, &val);
	}
	while (rc == 0) {
		uint64_t p;
		if (key.len < 8) {
			problem(c, "%s: a %zu-byte key", what, key.len);
			rc = storage_cursor_next(cur, &key, &val);
			continue;
		}
		p = echd_get_be64(key.data);
		/* IDMP's expiry index has the prefix 0, which no stream has: its
		 * rows may outlive their streams until the expiry step comes */
		if (p != 0 && !idset_has(live, p) && !idset_has(trash, p)) {
			problem(c, "%s rows of %s id %llu, which is neither live nor being deleted",
				what, owner, (unsigned long long)p);
		}
		if (p == UINT64_MAX) {
			break;
		}
		echd_put_be64(next, p + 1);
		rc = storage_cursor_seek(cur, &seek, &key, &val);
	}
	storage_cursor_close(cur);
	return rc == ECHD_ENOTFOUND ? 0 : rc;
}

/* expires: when(8) db(1) sid(8) -> (empty); each must name a live key
 * that expires at that time. Those keys were counted by check_keys(). */
static int
check_expires(struct chk *c)
{
	struct storage_cursor *cur = NULL;
	struct st_buf key, val;
	uint64_t rows = 0;
	int rc;

	rc = storage_cursor_open(c->t, STORAGE_T_EXPIRES, &cur);
	if (rc == ECHD_ENOTFOUND) {
		return 0; /* an environment of an echd before expiry */
	}
	if (rc == 0) {
		rc = storage_cursor_seek(cur, NULL, &key, &val);
	}
	while (rc == 0) {
		const unsigned char *kp = key.data;
		unsigned char bk[9];
		struct st_buf bkey = {bk, sizeof(bk)}, name;
		struct stream_meta m;

		if (key.len != 17) {
			problem(c, "an expiry row key has %zu bytes, not 17", key.len);
			rc = storage_cursor_next(cur, &key, &val);
			continue;
		}
		rows++;
		memcpy(bk, kp + 8, 9);
		rc = storage_get(c->t, STORAGE_T_BYID, &bkey, &name);
		if (rc == 0) {
			rc = stream_lookup(c->t, kp[8], &name, &m);
		}
		if (rc == ECHD_ENOTFOUND || (rc == 0 && m.sid != echd_get_be64(kp + 9))) {
			problem(c, "db %u: an expiry row names stream id %llu, which does not exist",
				kp[8], (unsigned long long)echd_get_be64(kp + 9));
		} else if (rc == 0 && m.expire_ms != echd_get_be64(kp)) {
			problem(c, "db %u: an expiry row of stream id %llu says %llu ms, the key %llu",
				kp[8], (unsigned long long)m.sid, (unsigned long long)echd_get_be64(kp),
				(unsigned long long)m.expire_ms);
		} else if (rc != 0 && rc != ECHD_ECORRUPT && rc != ECHD_EINVAL) {
			break;
		}
		rc = storage_cursor_next(cur, &key, &val);
	}
	storage_cursor_close(cur);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return rc;
	}
	if (rows != c->expiring) {
		problem(c, "%llu expiry rows for %llu keys with an expiry time",
			(unsigned long long)rows, (unsigned long long)c->expiring);
	}
	return 0;
}

static int
check_all(struct chk *c)
{
	static const char next_key[] = "next-sid";
	struct st_buf k = {next_key, sizeof(next_key) - 1}, v;
	int rc;

	rc = 0;
	if (storage_maintain(c->st) != NULL) {
		rc = storage_maintain_verify(storage_maintain(c->st), c->t, verify_problem, c,
			&c->staged);
	}
	if (rc == 0) {
		rc = check_trash(c);
	}
	if (rc == 0) {
		rc = check_keys(c);
	}
	if (rc == 0) {
		rc = check_byid(c);
	}
	if (rc == 0) {
		rc = check_expires(c);
	}
	if (rc != 0) {
		return rc;
	}
	idset_dups(c, &c->sids, "stream");
	idset_dups(c, &c->gids, "group");
	for (size_t i = 0; i < c->trash_s.n; i++) {
		if (idset_has(&c->sids, c->trash_s.v[i])) {
			problem(c, "stream id %llu is live and queued for deletion",
				(unsigned long long)c->trash_s.v[i]);
		}
	}
	for (size_t i = 0; i < c->trash_g.n; i++) {
		if (idset_has(&c->gids, c->trash_g.v[i])) {
			problem(c, "group id %llu is live and queued for deletion",
				(unsigned long long)c->trash_g.v[i]);
		}
	}
	rc = check_orphans(c, STORAGE_T_ENTRIES, "entry", &c->sids, &c->trash_s, "stream");
	if (rc == 0) {
		rc = check_orphans(c, STORAGE_T_NODES, "node", &c->sids, &c->trash_s, "stream");
	}
	if (rc == 0) {
		rc = check_orphans(c, STORAGE_T_GROUPS, "group", &c->sids, &c->trash_s, "stream");
	}
	if (rc == 0) {
		rc = check_orphans(
			c, STORAGE_T_CONSUMERS, "consumer", &c->gids, &c->trash_g, "group");
	}
	if (rc == 0) {
		rc = check_orphans(
			c, STORAGE_T_CONSREC, "consumer record", &c->gids, &c->trash_g, "group");
	}
	if (rc == 0) {
		rc = check_orphans(c, STORAGE_T_PEL, "PEL", &c->gids, &c->trash_g, "group");
	}
	if (rc == 0) {
		rc = check_orphans(
			c, STORAGE_T_CPEL, "index (cpel)", &c->gids, &c->trash_g, "group");
	}
	if (rc == 0) {
		rc = check_orphans(
			c, STORAGE_T_IDMP, "idempotency", &c->sids, &c->trash_s, "stream");
	}
	if (rc == 0) {
		rc = check_orphans(c, STORAGE_T_DUE, "due", &c->gids, &c->trash_g, "group");
	}
	if (rc != 0) {
		return rc;
	}
	/* ids are handed out from one counter: none may be above it */
	rc = storage_get(c->t, STORAGE_T_META, &k, &v);
	if (rc == 0 && v.len != 8) {
		problem(c, "the id counter (next-sid) has %zu bytes, not 8", v.len);
	} else if (rc == 0 && echd_get_be64(v.data) < c->max_id) {
		problem(c, "the id counter (next-sid) is %llu, but id %llu is in use",
			(unsigned long long)echd_get_be64(v.data), (unsigned long long)c->max_id);
	} else if (rc == ECHD_ENOTFOUND && c->max_id > 0) {
		problem(c, "no id counter (next-sid), but id %llu is in use",
			(unsigned long long)c->max_id);
	} else if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return rc;
	}
	return 0;
}

int
adm_check(const char *dir)
{
	struct adm_opts o;

	memset(&o, 0, sizeof(o));
	return adm_check_store(&o, dir);
}

int
adm_check_store(const struct adm_opts *src, const char *dir)
{
	struct adm_opts o;
	struct adm_ctx x;
	struct chk c;
	char a[40], b[40], d[40], e[40], f[40], g[40];
	int rc;

	memset(&o, 0, sizeof(o));
	memset(&x, 0, sizeof(x));
	memset(&c, 0, sizeof(c));
	o.storage_url = src->storage_url;
	o.pg_schema = src->pg_schema;
	o.timeout_ms = src->timeout_ms;
	x.o = &o;
	rc = adm_off_open(&x, dir);
	if (rc != 0) {
		return rc;
	}
	c.st = x.st;
	c.t = x.txn;
	if (adm_out.json) {
		adm_json_obj();
		if (dir != NULL) {
			adm_json_key("dir");
			adm_json_cstr(dir);
		} else {
			adm_json_key("schema");
			adm_json_cstr(adm_pg_schema(&o));
		}
		adm_json_key("problems");
		adm_json_arr();
	} else if (dir != NULL) {
		printf("checking %s\n", dir);
	} else {
		/* the schema, not the URL: it may carry a password */
		printf("checking schema %s on PostgreSQL\n", adm_pg_schema(&o));
	}
	c.err = check_all(&c);
	if (adm_out.json) {
		adm_json_arr_end();
		adm_json_key("problem_count");
		adm_json_uint(c.problems);
		adm_json_key("ok");
		adm_json_bool(c.problems == 0 && c.err == 0);
		adm_json_key("streams");
		adm_json_uint(c.streams);
		adm_json_key("entries");
		adm_json_uint(c.entries);
		adm_json_key("nodes");
		adm_json_uint(c.nodes);
		adm_json_key("groups");
		adm_json_uint(c.groups);
		adm_json_key("consumers");
		adm_json_uint(c.consumers);
		adm_json_key("pending");
		adm_json_uint(c.pending);
		adm_json_key("staged");
		adm_json_uint(c.staged);
		adm_json_obj_end();
		adm_json_done();
	} else {
		if (c.problems > SHOW_MAX) {
			printf("... and %llu more problems\n",
				(unsigned long long)(c.problems - SHOW_MAX));
		}
		printf("%s streams, %s entries in %s nodes, %s groups, %s consumers, %s pending\n",
			adm_fmt_count(a, c.streams), adm_fmt_count(b, c.entries),
			adm_fmt_count(d, c.nodes), adm_fmt_count(e, c.groups),
			adm_fmt_count(f, c.consumers), adm_fmt_count(g, c.pending));
		if (c.staged > 0) {
			printf("%s rows staged (lmdb-staged: read through, not yet in their tables)\n",
				adm_fmt_count(a, c.staged));
		}
		if (c.err == 0 && c.problems == 0) {
			printf("%sok%s: every invariant holds\n", adm_out.color ? "\033[32m" : "",
				adm_out.color ? "\033[0m" : "");
		} else if (c.problems > 0) {
			printf("%sFAILED%s: %s problem%s\n", adm_out.color ? "\033[31m" : "",
				adm_out.color ? "\033[0m" : "", adm_fmt_count(a, c.problems),
				c.problems == 1 ? "" : "s");
		}
		fflush(stdout);
	}
	adm_off_close(&x);
	echd_free(c.sids.v);
	echd_free(c.gids.v);
	echd_free(c.trash_s.v);
	echd_free(c.trash_g.v);
	adm_str_finish(&c.label);
	adm_str_finish(&c.msg);
	if (c.err != 0) {
		return adm_err(ADM_EXIT_FAILED, "check stopped: %s", echd_strerror(c.err));
	}
	return c.problems == 0 ? ADM_EXIT_OK : ADM_EXIT_DAMAGED;
}
