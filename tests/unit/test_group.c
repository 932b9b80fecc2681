/* test_group.c - consumer groups, consumers and PELs (storage/model/group.c)
 * over LMDB.
 *
 * The cursor arithmetic (entries_read, lag) is checked against values
 * worked out by hand from Redis 7.4's rules in t_stream.c:
 *   E: streamEstimateDistanceFromFirstEverEntry
 *      E1 entries_added == 0                      -> 0
 *      E2 length == 0 and id <= last              -> entries_added
 *      E3 id == last                              -> entries_added
 *      E4 id > last                               -> unknown
 *      E5 no tombstone at or after first (max_deleted == 0-0 or
 *         max_deleted < first): id < first         -> entries_added - length
 *                                  id == first     -> entries_added - length + 1
 *      E6 otherwise                               -> unknown
 *   T: streamRangeHasTombstones(start, end): false when the stream is empty,
 *      has no max_deleted, or max_deleted < first; else start <= max_deleted <= end.
 *   A: the group update in streamReplyWithRange (id > last_delivered):
 *      counter valid and !T(id, +inf) -> entries_read + 1,
 *      else if entries_added          -> E(id).
 *   L: streamCGLag: entries_added == 0 -> 0; counter valid and
 *      !T(last_delivered, +inf) -> entries_added - entries_read; else
 *      E(last_delivered) when known, else NULL (echd counts instead).
 * Each expected value names the rule that gives it.
 */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "echd.h"
#include "group.h"
#include "storage.h"
#include "stream.h"
#include "stream_impl.h" /* st_put_u64 and the trash row layout */
#include "unit_storage.h"

#define UNK GROUP_ENTRIES_READ_UNKNOWN

static const struct stream_id ID_MIN = {0, 0};
static const struct stream_id ID_MAX = {UINT64_MAX, UINT64_MAX};

/* ---- fixture (the rest is in unit_storage.h) ---------------------------- */

static void
setup(void)
{
	fixture_open();
	begin();
}

/* ---- helpers ------------------------------------------------------------ */

static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void
mkstream(unsigned db, const char *name, struct stream_meta *m)
{
	struct st_buf n = B(name);

	OK(stream_create(tx, db, &n, m));
}

static void
savestream(unsigned db, const char *name, const struct stream_meta *m)
{
	struct st_buf n = B(name);

	OK(stream_meta_save(tx, db, &n, m));
}

static void
add(struct stream_meta *m, uint64_t ms, uint64_t seq)
{
	struct st_buf fv[2] = {B("f"), B("v")};
	struct stream_id id = ID(ms, seq);

	OK(stream_append(tx, m, &id, fv, 2, 100, 4096));
}

/* Appends i-1 for i in [from, to]. */
static void
add_range(struct stream_meta *m, uint64_t from, uint64_t to)
{
	for (uint64_t i = from; i <= to; i++) {
		add(m, i, 1);
	}
}

/* XDEL ms-seq. */
static void
xdel(struct stream_meta *m, uint64_t ms, uint64_t seq)
{
	struct stream_id id = ID(ms, seq);

	OK(stream_delete_entry(tx, m, &id));
}

static void
gcreate(struct stream_meta *m, const char *name, struct stream_id last, int64_t entries_read,
	struct group_meta *g)
{
	struct st_buf n = B(name);

	OK(group_create(tx, m, &n, &last, entries_read, g));
}

static void
gload(const struct stream_meta *m, const char *name, struct group_meta *g)
{
	struct st_buf n = B(name);

	OK(group_lookup(tx, m, &n, g));
}

static void
gsave(const struct stream_meta *m, const char *name, const struct group_meta *g)
{
	struct st_buf n = B(name);

	OK(group_save(tx, m, &n, g));
}

static void
ccreate(struct group_meta *g, const char *name, uint64_t now, struct consumer_meta *c)
{
	struct st_buf n = B(name);

	OK(consumer_create(tx, g, &n, now, c));
}

static void
cload(const struct group_meta *g, const char *name, struct consumer_meta *c)
{
	struct st_buf n = B(name);

	OK(consumer_lookup(tx, g, &n, c));
}

static void
csave(const struct group_meta *g, const char *name, const struct consumer_meta *c)
{
	struct st_buf n = B(name);

	OK(consumer_save(tx, g, &n, c));
}

static void
deliver(struct group_meta *g, struct consumer_meta *c, uint64_t ms, uint64_t seq, uint64_t now)
{
	struct stream_id id = ID(ms, seq);

	OK(pel_deliver(tx, g, c, &id, now));
}

/* Runs stream_gc_step with budget until nothing is left; returns the steps. */
static unsigned
gc_all(unsigned budget)
{
	unsigned steps = 0;
	bool more = true;

	while (more) {
		int rc = stream_gc_step(tx, budget, &more);
		if (rc != 0) {
			ck_abort_msg("stream_gc_step: %d (%s)", rc, echd_strerror(rc));
		}
		if (++steps > 1000000) {
			ck_abort_msg("stream_gc_step never finishes");
		}
	}
	return steps;
}

/* Rows of table tb whose key starts with the plen bytes at prefix. */
static uint64_t
count_prefix(enum storage_table tb, const void *prefix, size_t plen)
{
	struct storage_cursor *c;
	struct st_buf key, val, seek = {prefix, plen};
	uint64_t n = 0;
	int rc;

	OK(storage_cursor_open(tx, tb, &c));
	rc = storage_cursor_seek(c, plen ? &seek : NULL, &key, &val);
	while (rc == 0) {
		if (key.len < plen || (plen > 0 && memcmp(key.data, prefix, plen) != 0)) {
			break;
		}
		n++;
		rc = storage_cursor_next(c, &key, &val);
	}
	storage_cursor_close(c);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		ck_abort_msg("cursor: %d (%s)", rc, echd_strerror(rc));
	}
	return n;
}

static uint64_t
rows_all(enum storage_table tb)
{
	return count_prefix(tb, NULL, 0);
}

/* Rows keyed by the 8-byte integer a (a stream's or group's rows). */
static uint64_t
rows_of(enum storage_table tb, uint64_t a)
{
	unsigned char p[8];

	st_put_u64(p, a);
	return count_prefix(tb, p, 8);
}

/* Rows keyed by a then b (one consumer's CPEL rows). */
static uint64_t
rows_of2(enum storage_table tb, uint64_t a, uint64_t b)
{
	unsigned char p[16];

	st_put_u64(p, a);
	st_put_u64(p + 8, b);
	return count_prefix(tb, p, 16);
}

/* Every row a group may own, in the five per-group tables. */
static uint64_t
group_rows(uint64_t gid)
{
	return rows_of(STORAGE_T_PEL, gid) + rows_of(STORAGE_T_CPEL, gid) +
	       rows_of(STORAGE_T_CONSREC, gid) + rows_of(STORAGE_T_CONSUMERS, gid) +
	       rows_of(STORAGE_T_DUE, gid);
}

/* g's due rows are exactly those of its PEL rows under its policy: one
 * per row with a deadline, of the kind and at the time pel_due_of() says. */
static void
verify_due(const struct group_meta *g)
{
	struct pel_iter *it;
	struct pel_row r;
	uint64_t want = 0;
	int rc;

	OK(pel_iter_create(tx, g, 0, &ID_MIN, &ID_MAX, &it));
	while ((rc = pel_iter_next(it, &r)) == 0) {
		unsigned char k[33];
		struct st_buf kb = {k, 33}, v;
		enum pel_due_kind kind;
		uint64_t at;

		if (!pel_due_of(&g->policy, &r, &kind, &at)) {
			continue;
		}
		want++;
		st_put_u64(k, g->gid);
		k[8] = (unsigned char)kind;
		st_put_u64(k + 9, at);
		st_put_id(k + 17, &r.id);
		if (storage_get(tx, STORAGE_T_DUE, &kb, &v) != 0) {
			ck_abort_msg("PEL %" PRIu64 "-%" PRIu64 " (count %" PRIu64 ") lacks its due "
				     "row (kind %d at %" PRIu64 ")",
				r.id.ms, r.id.seq, r.delivery_count, (int)kind, at);
		}
	}
	pel_iter_destroy(it);
	FAILS(rc, ECHD_ENOTFOUND);
	U64_EQ(rows_of(STORAGE_T_DUE, g->gid), want);
}

/* Is id in consumer cid's PEL index? */
static bool
cpel_has(uint64_t gid, uint64_t cid, const struct stream_id *id)
{
	unsigned char k[32];
	struct st_buf kb = {k, 32}, v;
	int rc;

	st_put_u64(k, gid);
	st_put_u64(k + 8, cid);
	st_put_id(k + 16, id);
	rc = storage_get(tx, STORAGE_T_CPEL, &kb, &v);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		ck_abort_msg("storage_get: %d (%s)", rc, echd_strerror(rc));
	}
	return rc == 0;
}

struct csum {
	uint64_t gid;
	uint64_t n, pending;
};

static int
csum_fn(const struct st_buf *name, const struct consumer_meta *c, void *ud)
{
	struct csum *s = ud;
	uint64_t rows = rows_of2(STORAGE_T_CPEL, s->gid, c->cid);

	if (rows != c->pending) {
		ck_abort_msg("consumer %.*s (cid %" PRIu64 "): pending %" PRIu64 ", %" PRIu64
			     " CPEL rows",
			(int)name->len, (const char *)name->data, c->cid, c->pending, rows);
	}
	s->n++;
	s->pending += c->pending;
	return 0;
}

/* The group's invariants, from storage: pending == PEL rows == CPEL rows +
 * released rows == the sum of its consumers' pending + released rows, the
 * released ones its nacked count; each consumer's pending == its CPEL
 * rows; consumers == consumer and record rows; every PEL row's owner exists
 * and indexes it, and every CPEL row's PEL row names that consumer. */
static void
verify_group(const struct group_meta *g)
{
	struct csum s = {g->gid, 0, 0};
	unsigned char p[8];
	struct storage_cursor *c;
	struct st_buf key, val, seek = {p, 8};
	uint64_t pel = 0, cpel = 0, unowned = 0;
	int rc;

	OK(consumer_each(tx, g, csum_fn, &s));
	U64_EQ(s.n, g->consumers);
	U64_EQ(rows_of(STORAGE_T_CONSUMERS, g->gid), g->consumers);
	U64_EQ(rows_of(STORAGE_T_CONSREC, g->gid), g->consumers);

	st_put_u64(p, g->gid);
	OK(storage_cursor_open(tx, STORAGE_T_PEL, &c));
	rc = storage_cursor_seek(c, &seek, &key, &val);
	for (; rc == 0; rc = storage_cursor_next(c, &key, &val)) {
		struct consumer_meta cm;
		struct stream_id id;
		uint64_t owner;

		if (key.len < 8 || memcmp(key.data, p, 8) != 0) {
			break;
		}
		if (key.len != 24 || val.len != 24) {
			ck_abort_msg("PEL row of %zu/%zu bytes", key.len, val.len);
		}
		st_get_id((const unsigned char *)key.data + 8, &id);
		owner = st_get_u64(val.data);
		pel++;
		if (owner == PEL_UNOWNED) {
			/* released: no index row, no owner; its time is 0 or the end
			 * of an XNACK DELAY */
			unowned++;
			continue;
		}
		if (!cpel_has(g->gid, owner, &id)) {
			ck_abort_msg("PEL %" PRIu64 "-%" PRIu64 ": owner %" PRIu64
				     " lacks its CPEL row",
				id.ms, id.seq, owner);
		}
		if (consumer_by_id(tx, g, owner, &cm, NULL) != 0) {
			ck_abort_msg("PEL %" PRIu64 "-%" PRIu64 ": owner %" PRIu64
				     " does not exist",
				id.ms, id.seq, owner);
		}
	}
	storage_cursor_close(c);
	ck_assert_msg(rc == 0 || rc == ECHD_ENOTFOUND, "PEL walk: %d", rc);

	OK(storage_cursor_open(tx, STORAGE_T_CPEL, &c));
	rc = storage_cursor_seek(c, &seek, &key, &val);
	for (; rc == 0; rc = storage_cursor_next(c, &key, &val)) {
		struct stream_id id;
		struct pel_row r;
		uint64_t cid;

		if (key.len < 8 || memcmp(key.data, p, 8) != 0) {
			break;
		}
		if (key.len != 32 || val.len != 0) {
			ck_abort_msg("CPEL row of %zu/%zu bytes", key.len, val.len);
		}
		cid = st_get_u64((const unsigned char *)key.data + 8);
		st_get_id((const unsigned char *)key.data + 16, &id);
		if (pel_get(tx, g, &id, &r) != 0 || r.cid != cid) {
			ck_abort_msg("CPEL %" PRIu64 " %" PRIu64 "-%" PRIu64
				     " has no PEL row of its own",
				cid, id.ms, id.seq);
		}
		cpel++;
	}
	storage_cursor_close(c);
	ck_assert_msg(rc == 0 || rc == ECHD_ENOTFOUND, "CPEL walk: %d", rc);
	U64_EQ(pel, g->pending);
	U64_EQ(cpel + unowned, g->pending);
	U64_EQ(s.pending + unowned, g->pending);
	U64_EQ(unowned, g->nacked);
	verify_due(g);
}

/* A group at 0-0 with consumers c0.. and ids 1-0 .. nrows-0 delivered round
 * robin (id r to c(r % ncons) at time 100 + r); everything saved. */
static void
populate(struct stream_meta *m, const char *gname, unsigned ncons, unsigned nrows,
	struct group_meta *g)
{
	struct consumer_meta c[8];
	char name[16];

	ck_assert_uint_le(ncons, 8);
	gcreate(m, gname, ID_MIN, 0, g);
	for (unsigned i = 0; i < ncons; i++) {
		snprintf(name, sizeof(name), "c%u", i);
		ccreate(g, name, 1, &c[i]);
	}
	for (unsigned r = 1; r <= nrows; r++) {
		struct stream_id id = ID(r, 0);
		int rc = pel_deliver(tx, g, &c[r % ncons], &id, 100 + r);
		if (rc != 0) {
			ck_abort_msg("pel_deliver %u: %d (%s)", r, rc, echd_strerror(rc));
		}
	}
	for (unsigned i = 0; i < ncons; i++) {
		snprintf(name, sizeof(name), "c%u", i);
		csave(g, name, &c[i]);
	}
	gsave(m, gname, g);
}

/* ---- groups ------------------------------------------------------------- */

START_TEST(test_group_create_lookup)
{
	struct stream_meta m, t, got;
	struct group_meta g1, g2, g, x, y;
	struct st_buf n1 = B("g1"), none = B("none");
	struct stream_id nine = ID(9, 9);
	char longname[GROUP_NAME_MAX + 1];
	struct st_buf ln = {longname, sizeof(longname)}, bin = {"a\0b", 3}, a = B("a");

	mkstream(0, "s", &m);
	add_range(&m, 1, 3);
	U64_EQ(m.groups, 0);
	gcreate(&m, "g1", ID(2, 1), 2, &g1);
	ck_assert_uint_ne(g1.gid, 0);
	ck_assert_uint_ne(g1.gid, m.sid);
	ID_EQ(g1.last_delivered, 2, 1);
	I64_EQ(g1.entries_read, 2);
	U64_EQ(g1.pending, 0);
	U64_EQ(g1.consumers, 0);
	U64_EQ(m.groups, 1);
	gcreate(&m, "g2", ID_MIN, UNK, &g2);
	U64_EQ(m.groups, 2);
	ck_assert_uint_ne(g2.gid, g1.gid);

	OK(group_lookup(tx, &m, &n1, &g));
	U64_EQ(g.gid, g1.gid);
	ID_EQ(g.last_delivered, 2, 1);
	I64_EQ(g.entries_read, 2);
	U64_EQ(g.pending, 0);
	U64_EQ(g.consumers, 0);
	gload(&m, "g2", &g);
	U64_EQ(g.gid, g2.gid);
	I64_EQ(g.entries_read, UNK);

	/* a duplicate changes nothing and writes no output */
	memset(&x, 0xab, sizeof(x));
	y = x;
	FAILS(group_create(tx, &m, &n1, &nine, 9, &x), ECHD_EEXIST);
	ck_assert_mem_eq(&x, &y, sizeof(x));
	U64_EQ(m.groups, 2);
	gload(&m, "g1", &g);
	U64_EQ(g.gid, g1.gid);
	ID_EQ(g.last_delivered, 2, 1);
	FAILS(group_lookup(tx, &m, &none, &g), ECHD_ENOTFOUND);

	/* save round trip, every field */
	g = g1;
	g.last_delivered = ID(3, 1);
	g.entries_read = 3;
	g.pending = 7;
	g.consumers = 2;
	gsave(&m, "g1", &g);
	memset(&g, 0, sizeof(g));
	gload(&m, "g1", &g);
	U64_EQ(g.gid, g1.gid);
	ID_EQ(g.last_delivered, 3, 1);
	I64_EQ(g.entries_read, 3);
	U64_EQ(g.pending, 7);
	U64_EQ(g.consumers, 2);
	g.last_delivered = ID_MAX;
	g.entries_read = INT64_MAX;
	g.pending = UINT64_MAX;
	gsave(&m, "g1", &g);
	gload(&m, "g1", &g);
	ID_EQ(g.last_delivered, UINT64_MAX, UINT64_MAX);
	I64_EQ(g.entries_read, INT64_MAX);
	U64_EQ(g.pending, UINT64_MAX);

	/* the same name on another stream is another group */
	mkstream(0, "t", &t);
	gcreate(&t, "g1", ID_MIN, 0, &x);
	U64_EQ(t.groups, 1);
	ck_assert_uint_ne(x.gid, g1.gid);
	gload(&m, "g1", &g);
	U64_EQ(g.gid, g1.gid);
	gload(&t, "g1", &g);
	U64_EQ(g.gid, x.gid);

	/* the longest name (a heap key), one byte more, and binary names */
	memset(longname, 'n', sizeof(longname));
	ln.len = GROUP_NAME_MAX + 1;
	FAILS(group_create(tx, &m, &ln, &nine, 5, &x), ECHD_ETOOLONG);
	FAILS(group_lookup(tx, &m, &ln, &g), ECHD_ENOTFOUND);
	FAILS(group_destroy(tx, &m, &ln), ECHD_ENOTFOUND);
	U64_EQ(m.groups, 2);
	ln.len = GROUP_NAME_MAX;
	OK(group_create(tx, &m, &ln, &nine, 5, &x));
	OK(group_lookup(tx, &m, &ln, &g));
	U64_EQ(g.gid, x.gid);
	ID_EQ(g.last_delivered, 9, 9);
	ln.len--;
	FAILS(group_lookup(tx, &m, &ln, &g), ECHD_ENOTFOUND);
	ln.len++;
	OK(group_create(tx, &m, &bin, &nine, 1, &x));
	FAILS(group_lookup(tx, &m, &a, &g), ECHD_ENOTFOUND);
	OK(group_create(tx, &m, &a, &nine, 2, &y));
	OK(group_lookup(tx, &m, &bin, &g));
	U64_EQ(g.gid, x.gid);
	OK(group_lookup(tx, &m, &a, &g));
	U64_EQ(g.gid, y.gid);
	U64_EQ(m.groups, 5);

	/* m->groups is the caller's to save */
	savestream(0, "s", &m);
	reopen();
	OK(stream_lookup(tx, 0, &(struct st_buf){"s", 1}, &got));
	U64_EQ(got.groups, 5);
	gload(&got, "g1", &g);
	U64_EQ(g.gid, g1.gid);
	OK(group_lookup(tx, &got, &ln, &g));
	commit();
}
END_TEST

struct seen_groups {
	char names[16][16];
	size_t lens[16];
	uint64_t gids[16];
	unsigned n, stop_at;
};

static int
seen_group_fn(const struct st_buf *name, const struct group_meta *g, void *ud)
{
	struct seen_groups *s = ud;

	ck_assert_uint_lt(s->n, 16);
	ck_assert_uint_le(name->len, 16);
	memcpy(s->names[s->n], name->data, name->len);
	s->lens[s->n] = name->len;
	s->gids[s->n] = g->gid;
	s->n++;
	return s->n == s->stop_at ? 42 : 0;
}

START_TEST(test_group_each)
{
	/* created out of order; name order is byte order, a prefix first */
	static const char *const create_order[] = {"b", "a\xff", "ab", "c", "A", "a"};
	static const char *const want[] = {"A", "a", "ab", "a\xff", "b", "c"};
	struct stream_meta before, m, after, empty;
	struct group_meta g, gids[6];
	struct seen_groups s;

	mkstream(0, "before", &before);
	gcreate(&before, "zz", ID_MIN, 0, &g);
	mkstream(0, "s", &m);
	mkstream(0, "after", &after);
	gcreate(&after, "", ID_MIN, 0, &g);
	gcreate(&after, "a", ID_MIN, 0, &g);
	mkstream(0, "empty", &empty);
	for (unsigned i = 0; i < 6; i++) {
		gcreate(&m, create_order[i], ID(i, 0), (int64_t)i, &gids[i]);
	}

	memset(&s, 0, sizeof(s));
	OK(group_each(tx, &m, seen_group_fn, &s));
	U64_EQ(s.n, 6);
	for (unsigned i = 0; i < 6; i++) {
		struct group_meta want_g;

		ck_assert_msg(
			s.lens[i] == strlen(want[i]) && memcmp(s.names[i], want[i], s.lens[i]) == 0,
			"group %u is %.*s, expected %s", i, (int)s.lens[i], s.names[i], want[i]);
		gload(&m, want[i], &want_g);
		U64_EQ(s.gids[i], want_g.gid);
	}

	/* a non-zero return stops the walk and is returned */
	memset(&s, 0, sizeof(s));
	s.stop_at = 3;
	FAILS(group_each(tx, &m, seen_group_fn, &s), 42);
	U64_EQ(s.n, 3);

	memset(&s, 0, sizeof(s));
	OK(group_each(tx, &empty, seen_group_fn, &s));
	U64_EQ(s.n, 0);
	memset(&s, 0, sizeof(s));
	OK(group_each(tx, &after, seen_group_fn, &s));
	U64_EQ(s.n, 2);
	U64_EQ(s.lens[0], 0);
	commit();
}
END_TEST

START_TEST(test_group_destroy)
{
	struct stream_meta m;
	struct group_meta g1, g2, g;
	struct consumer_meta c;
	struct st_buf n1 = B("g1"), c0 = B("c0");
	struct seen_groups s;
	struct stream_id id;
	unsigned char tk[9];
	struct st_buf tkb = {tk, 9}, v;
	uint64_t old_gid;
	unsigned steps;
	bool more;

	mkstream(0, "s", &m);
	add_range(&m, 1, 10);
	populate(&m, "g1", 3, 3000, &g1);
	populate(&m, "g2", 2, 500, &g2);
	savestream(0, "s", &m);
	U64_EQ(m.groups, 2);
	U64_EQ(rows_of(STORAGE_T_PEL, g1.gid), 3000);
	U64_EQ(rows_of(STORAGE_T_CPEL, g1.gid), 3000);
	U64_EQ(rows_of(STORAGE_T_CONSREC, g1.gid), 3);
	U64_EQ(rows_of(STORAGE_T_CONSUMERS, g1.gid), 3);
	verify_group(&g1);
	verify_group(&g2);
	commit();

	begin();
	OK(group_destroy(tx, &m, &n1));
	U64_EQ(m.groups, 1);
	FAILS(group_lookup(tx, &m, &n1, &g), ECHD_ENOTFOUND);
	FAILS(group_destroy(tx, &m, &n1), ECHD_ENOTFOUND);
	U64_EQ(m.groups, 1);
	memset(&s, 0, sizeof(s));
	OK(group_each(tx, &m, seen_group_fn, &s));
	U64_EQ(s.n, 1);
	U64_EQ(s.gids[0], g2.gid);
	/* its rows wait for the collector */
	tk[0] = ST_TRASH_GROUP;
	st_put_u64(tk + 1, g1.gid);
	OK(storage_get(tx, STORAGE_T_TRASH, &tkb, &v));
	savestream(0, "s", &m);
	commit();

	/* collect in small batches, each in its own transaction */
	for (steps = 0, more = true; more; steps++) {
		ck_assert_uint_lt(steps, 10000);
		begin();
		OK(stream_gc_step(tx, 97, &more));
		commit();
	}
	ck_assert_uint_ge(steps, (3000 * 2 + 6) / 97);
	begin();
	U64_EQ(group_rows(g1.gid), 0);
	U64_EQ(rows_all(STORAGE_T_TRASH), 0);
	U64_EQ(rows_of(STORAGE_T_PEL, g2.gid), 500);
	U64_EQ(rows_of(STORAGE_T_CPEL, g2.gid), 500);
	U64_EQ(rows_of(STORAGE_T_CONSREC, g2.gid), 2);
	U64_EQ(rows_of(STORAGE_T_CONSUMERS, g2.gid), 2);
	gload(&m, "g2", &g);
	U64_EQ(g.pending, 500);
	verify_group(&g);
	OK(stream_gc_step(tx, 1000, &more));
	ck_assert(!more);

	/* the name is free again, for a new, empty group */
	old_gid = g1.gid;
	gcreate(&m, "g1", ID_MIN, 0, &g1);
	ck_assert_uint_ne(g1.gid, old_gid);
	U64_EQ(g1.pending, 0);
	U64_EQ(g1.consumers, 0);
	FAILS(consumer_lookup(tx, &g1, &c0, &c), ECHD_ENOTFOUND);
	FAILS(pel_last(tx, &g1, &id), ECHD_ENOTFOUND);
	U64_EQ(m.groups, 2);

	/* destroy and collect within one transaction, one row per step */
	populate(&m, "g3", 2, 40, &g);
	U64_EQ(group_rows(g.gid), 40 + 40 + 2 + 2);
	n1 = B("g3");
	OK(group_destroy(tx, &m, &n1));
	U64_EQ(m.groups, 2);
	steps = gc_all(1);
	ck_assert_uint_ge(steps, 84);
	U64_EQ(group_rows(g.gid), 0);
	U64_EQ(rows_of(STORAGE_T_PEL, g2.gid), 500);
	commit();
}
END_TEST

START_TEST(test_group_stream_delete)
{
	struct stream_meta s, t, got;
	struct group_meta g1, g2, tg, g;
	struct st_buf sn = B("s"), g1n = B("g1");
	uint64_t sid;

	mkstream(0, "s", &s);
	add_range(&s, 1, 20);
	populate(&s, "g1", 2, 1000, &g1);
	populate(&s, "g2", 1, 300, &g2);
	savestream(0, "s", &s);
	mkstream(0, "t", &t);
	add_range(&t, 1, 20);
	populate(&t, "g1", 2, 200, &tg);
	savestream(0, "t", &t);
	U64_EQ(rows_of(STORAGE_T_GROUPS, s.sid), 2);
	sid = s.sid;
	commit();

	begin();
	OK(stream_delete(tx, 0, &sn));
	FAILS(stream_lookup(tx, 0, &sn, &got), ECHD_ENOTFOUND);
	/* the group rows go at once, the rest later */
	U64_EQ(rows_of(STORAGE_T_GROUPS, sid), 0);
	FAILS(group_lookup(tx, &s, &g1n, &g), ECHD_ENOTFOUND);
	gc_all(13);
	U64_EQ(group_rows(g1.gid), 0);
	U64_EQ(group_rows(g2.gid), 0);
	U64_EQ(rows_of(STORAGE_T_ENTRIES, sid), 0);
	U64_EQ(rows_of(STORAGE_T_NODES, sid), 0);
	U64_EQ(rows_all(STORAGE_T_TRASH), 0);
	commit();

	begin();
	/* the other stream's group is whole */
	OK(stream_lookup(tx, 0, &(struct st_buf){"t", 1}, &got));
	U64_EQ(got.groups, 1);
	gload(&got, "g1", &g);
	U64_EQ(g.gid, tg.gid);
	U64_EQ(g.pending, 200);
	U64_EQ(rows_of(STORAGE_T_PEL, tg.gid), 200);
	verify_group(&g);
	/* a new stream of the old name has no groups */
	mkstream(0, "s", &s);
	FAILS(group_lookup(tx, &s, &g1n, &g), ECHD_ENOTFOUND);
	commit();
}
END_TEST

START_TEST(test_group_stream_flush)
{
	struct stream_meta s, u, got;
	struct group_meta g0, g1, g;

	mkstream(0, "s", &s);
	populate(&s, "g", 2, 100, &g0);
	savestream(0, "s", &s);
	mkstream(1, "u", &u);
	populate(&u, "g", 2, 60, &g1);
	savestream(1, "u", &u);
	OK(stream_flush(tx, 0, false));
	gc_all(10);
	U64_EQ(rows_of(STORAGE_T_GROUPS, s.sid), 0);
	U64_EQ(group_rows(g0.gid), 0);
	OK(stream_lookup(tx, 1, &(struct st_buf){"u", 1}, &got));
	gload(&got, "g", &g);
	U64_EQ(g.pending, 60);
	verify_group(&g);

	OK(stream_flush(tx, 0, true));
	gc_all(10);
	U64_EQ(group_rows(g1.gid), 0);
	U64_EQ(rows_all(STORAGE_T_GROUPS), 0);
	U64_EQ(rows_all(STORAGE_T_PEL), 0);
	U64_EQ(rows_all(STORAGE_T_CPEL), 0);
	U64_EQ(rows_all(STORAGE_T_CONSREC), 0);
	U64_EQ(rows_all(STORAGE_T_CONSUMERS), 0);
	commit();
}
END_TEST

/* RENAME over an existing key: the source's groups follow it, the
 * destination's are collected. */
START_TEST(test_group_stream_rename)
{
	struct stream_meta a, b, got;
	struct group_meta ga, gb, g;
	struct st_buf an = B("a"), bn = B("b"), gbn = B("gb");

	mkstream(0, "a", &a);
	add_range(&a, 1, 5);
	populate(&a, "ga", 2, 50, &ga);
	savestream(0, "a", &a);
	mkstream(0, "b", &b);
	populate(&b, "gb", 1, 40, &gb);
	savestream(0, "b", &b);
	OK(stream_rename(tx, 0, &an, &bn));
	gc_all(3);
	OK(stream_lookup(tx, 0, &bn, &got));
	U64_EQ(got.sid, a.sid);
	U64_EQ(got.groups, 1);
	gload(&got, "ga", &g);
	U64_EQ(g.gid, ga.gid);
	U64_EQ(g.pending, 50);
	verify_group(&g);
	FAILS(group_lookup(tx, &got, &gbn, &g), ECHD_ENOTFOUND);
	U64_EQ(group_rows(gb.gid), 0);
	U64_EQ(rows_of(STORAGE_T_GROUPS, b.sid), 0);
	commit();
}
END_TEST

static Suite *
groups_suite(void)
{
	Suite *s = suite_create("groups");
	TCase *tc;

	tc = tcase_create("create_lookup");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_group_create_lookup);
	suite_add_tcase(s, tc);

	tc = tcase_create("each");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_group_each);
	suite_add_tcase(s, tc);

	tc = tcase_create("destroy");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_group_destroy);
	suite_add_tcase(s, tc);

	tc = tcase_create("with_stream");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_group_stream_delete);
	tcase_add_test(tc, test_group_stream_flush);
	tcase_add_test(tc, test_group_stream_rename);
	suite_add_tcase(s, tc);
	return s;
}

/* ---- cursor: entries_read and lag ---------------------------------------- */

/* Streams in the states the tables below use, all from ids 1-1 .. 5-1:
 *   never  nothing ever added
 *   b      1-1 .. 5-1
 *   c      b, XDEL 3-1                (a tombstone inside)
 *   d      b, XDEL 1-1                (the tombstone is before first)
 *   e      b, XDEL all five           (empty, entries_added 5)
 *   f      b, XDEL 5-1                (tombstone at last)
 *   h      b, XDEL 1-1 2-1
 *   i      b, XDEL 1-1 4-1
 *   tr     b, XTRIM MAXLEN 2          (trimming leaves no tombstone)
 *   ctr    c, XTRIM MAXLEN 1          (the tombstone was trimmed away) */
struct states {
	struct stream_meta never, b, c, d, e, f, h, i, tr, ctr;
};

static void
trim_maxlen(struct stream_meta *m, uint64_t maxlen)
{
	struct stream_trim tr = {.strategy = STREAM_TRIM_MAXLEN, .maxlen = maxlen};
	uint64_t removed;

	OK(stream_trim(tx, m, &tr, &removed));
}

static void
five(const char *name, struct stream_meta *m)
{
	mkstream(0, name, m);
	add_range(m, 1, 5);
}

static void
make_states(struct states *s)
{
	mkstream(0, "never", &s->never);
	five("b", &s->b);
	five("c", &s->c);
	xdel(&s->c, 3, 1);
	five("d", &s->d);
	xdel(&s->d, 1, 1);
	five("e", &s->e);
	for (uint64_t i = 1; i <= 5; i++) {
		xdel(&s->e, i, 1);
	}
	five("f", &s->f);
	xdel(&s->f, 5, 1);
	five("h", &s->h);
	xdel(&s->h, 1, 1);
	xdel(&s->h, 2, 1);
	five("i", &s->i);
	xdel(&s->i, 1, 1);
	xdel(&s->i, 4, 1);
	five("tr", &s->tr);
	trim_maxlen(&s->tr, 2);
	five("ctr", &s->ctr);
	xdel(&s->ctr, 3, 1);
	trim_maxlen(&s->ctr, 1);

	/* the states are what the tables assume */
	U64_EQ(s->never.entries_added, 0);
	U64_EQ(s->b.length, 5);
	ID_EQ(s->b.max_deleted, 0, 0);
	U64_EQ(s->c.length, 4);
	ID_EQ(s->c.first, 1, 1);
	ID_EQ(s->c.max_deleted, 3, 1);
	ID_EQ(s->d.first, 2, 1);
	ID_EQ(s->d.max_deleted, 1, 1);
	U64_EQ(s->e.length, 0);
	ID_EQ(s->e.first, 0, 0);
	ID_EQ(s->e.last, 5, 1);
	ID_EQ(s->e.max_deleted, 5, 1);
	U64_EQ(s->e.entries_added, 5);
	ID_EQ(s->f.first, 1, 1);
	ID_EQ(s->f.max_deleted, 5, 1);
	ID_EQ(s->h.first, 3, 1);
	ID_EQ(s->h.max_deleted, 2, 1);
	ID_EQ(s->i.first, 2, 1);
	ID_EQ(s->i.max_deleted, 4, 1);
	U64_EQ(s->tr.length, 2);
	ID_EQ(s->tr.first, 4, 1);
	ID_EQ(s->tr.max_deleted, 0, 0);
	U64_EQ(s->ctr.length, 1);
	ID_EQ(s->ctr.first, 5, 1);
	ID_EQ(s->ctr.max_deleted, 3, 1);
}

struct est_case {
	const struct stream_meta *m;
	const char *name;
	struct stream_id id;
	int64_t want;
	const char *rule;
};

START_TEST(test_cursor_estimate)
{
	struct states s;

	make_states(&s);
	const struct est_case cases[] = {
		{&s.never, "never", {0, 0}, 0, "E1"},
		{&s.never, "never", {7, 0}, 0, "E1"},
		{&s.b, "b", {0, 0}, 0, "E5 <first"},
		{&s.b, "b", {1, 0}, 0, "E5 <first"},
		{&s.b, "b", {1, 1}, 1, "E5 ==first"},
		{&s.b, "b", {3, 1}, UNK, "E6 inside"},
		{&s.b, "b", {5, 0}, UNK, "E6 inside"},
		{&s.b, "b", {5, 1}, 5, "E3"},
		{&s.b, "b", {5, 2}, UNK, "E4"},
		{&s.b, "b", {UINT64_MAX, UINT64_MAX}, UNK, "E4"},
		{&s.c, "c", {0, 0}, UNK, "E6 tombstone"},
		{&s.c, "c", {1, 1}, UNK, "E6 tombstone"},
		{&s.c, "c", {4, 1}, UNK, "E6"},
		{&s.c, "c", {5, 1}, 5, "E3"},
		{&s.c, "c", {6, 0}, UNK, "E4"},
		{&s.d, "d", {0, 0}, 1, "E5 <first"},
		{&s.d, "d", {1, 1}, 1, "E5 <first"},
		{&s.d, "d", {2, 0}, 1, "E5 <first"},
		{&s.d, "d", {2, 1}, 2, "E5 ==first"},
		{&s.d, "d", {3, 1}, UNK, "E6"},
		{&s.d, "d", {5, 1}, 5, "E3"},
		{&s.e, "e", {0, 0}, 5, "E2"},
		{&s.e, "e", {3, 1}, 5, "E2"},
		{&s.e, "e", {5, 1}, 5, "E2"},
		{&s.e, "e", {5, 2}, UNK, "E4"},
		{&s.f, "f", {5, 1}, 5, "E3 before the tombstone test"},
		{&s.f, "f", {4, 1}, UNK, "E6"},
		{&s.f, "f", {1, 1}, UNK, "E6"},
		{&s.f, "f", {0, 0}, UNK, "E6"},
		{&s.h, "h", {0, 0}, 2, "E5 <first"},
		{&s.h, "h", {2, 1}, 2, "E5 <first"},
		{&s.h, "h", {3, 1}, 3, "E5 ==first"},
		{&s.h, "h", {4, 1}, UNK, "E6"},
		{&s.i, "i", {0, 0}, UNK, "E6 tombstone"},
		{&s.i, "i", {2, 1}, UNK, "E6 tombstone"},
		{&s.i, "i", {5, 1}, 5, "E3"},
		{&s.tr, "tr", {0, 0}, 3, "E5 <first"},
		{&s.tr, "tr", {3, 1}, 3, "E5 <first"},
		{&s.tr, "tr", {4, 1}, 4, "E5 ==first"},
		{&s.tr, "tr", {5, 1}, 5, "E3"},
		{&s.ctr, "ctr", {0, 0}, 4, "E5 <first"},
		{&s.ctr, "ctr", {4, 1}, 4, "E5 <first"},
		{&s.ctr, "ctr", {5, 1}, 5, "E3"},
	};

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		const struct est_case *c = &cases[k];
		int64_t got = group_estimate_distance(c->m, &c->id);

		ck_assert_msg(got == c->want,
			"%s: estimate(%" PRIu64 "-%" PRIu64 ") = %" PRId64 ", expected %" PRId64
			" (%s)",
			c->name, c->id.ms, c->id.seq, got, c->want, c->rule);
	}
	commit();
}
END_TEST

struct tomb_case {
	const struct stream_meta *m;
	const char *name;
	const struct stream_id *start, *end;
	bool want;
};

START_TEST(test_cursor_tombstones)
{
	struct states s;
	struct stream_id i00 = {0, 0}, i11 = {1, 1}, i21 = {2, 1}, i31 = {3, 1}, i32 = {3, 2},
			 i41 = {4, 1}, i42 = {4, 2};

	make_states(&s);
	const struct tomb_case cases[] = {
		{&s.never, "never", NULL, NULL, false},
		{&s.b, "b", NULL, NULL, false},
		{&s.b, "b", &i00, NULL, false},
		{&s.c, "c", NULL, NULL, true},
		{&s.c, "c", &i00, NULL, true},
		{&s.c, "c", &i31, NULL, true}, /* inclusive */
		{&s.c, "c", &i32, NULL, false},
		{&s.c, "c", &i41, NULL, false},
		{&s.c, "c", &i11, &i21, false},
		{&s.c, "c", &i11, &i31, true},
		{&s.c, "c", &i31, &i31, true},
		{&s.c, "c", NULL, &i21, false},
		{&s.d, "d", NULL, NULL, false}, /* max_deleted < first */
		{&s.e, "e", NULL, NULL, false}, /* empty */
		{&s.f, "f", &i41, NULL, true},
		{&s.h, "h", NULL, NULL, false},
		{&s.i, "i", &i00, NULL, true},
		{&s.i, "i", &i41, NULL, true},
		{&s.i, "i", &i42, NULL, false},
		{&s.tr, "tr", NULL, NULL, false},
		{&s.ctr, "ctr", NULL, NULL, false},
	};

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		const struct tomb_case *c = &cases[k];
		bool got = group_range_has_tombstones(c->m, c->start, c->end);

		ck_assert_msg(
			got == c->want, "%s: case %zu: %d, expected %d", c->name, k, got, c->want);
	}
	commit();
}
END_TEST

/* A group at (cursor, entries_read) advanced through ids in turn: the
 * entries_read after each step. */
struct adv_case {
	const struct stream_meta *m;
	const char *name;
	struct stream_id cursor;
	int64_t entries_read;
	size_t n;
	struct {
		struct stream_id id;
		int64_t want;
		const char *rule;
	} steps[6];
};

START_TEST(test_cursor_advance)
{
	struct states s;

	make_states(&s);
	const struct adv_case cases[] = {
		{&s.b, "b", {0, 0}, 0, 5,
			{{{1, 1}, 1, "A +1"}, {{2, 1}, 2, "A +1"}, {{3, 1}, 3, "A +1"},
				{{4, 1}, 4, "A +1"}, {{5, 1}, 5, "A +1"}}},
		/* ids at or behind the cursor change nothing */
		{&s.b, "b", {2, 1}, 2, 3,
			{{{1, 1}, 2, "behind"}, {{2, 1}, 2, "equal"}, {{3, 1}, 3, "A +1"}}},
		{&s.b, "b", {0, 0}, UNK, 2, {{{1, 1}, 1, "A E5 ==first"}, {{2, 1}, 2, "A +1"}}},
		{&s.b, "b", {0, 0}, UNK, 3,
			{{{3, 1}, UNK, "A E6"}, {{4, 1}, UNK, "A E6"}, {{5, 1}, 5, "A E3"}}},
		/* a tombstone ahead makes Redis estimate, and lose the count */
		{&s.c, "c", {0, 0}, 0, 4,
			{{{1, 1}, UNK, "A T, E6"}, {{2, 1}, UNK, "A E6"}, {{4, 1}, UNK, "A E6"},
				{{5, 1}, 5, "A E3"}}},
		{&s.c, "c", {2, 1}, 2, 1, {{{3, 0}, UNK, "A T(3-0) E6"}}},
		/* past the tombstone the count goes on */
		{&s.c, "c", {4, 1}, 4, 1, {{{5, 1}, 5, "A +1"}}},
		/* a tombstone at the cursor: entries may be missing between it and
		 * id, so the counter is estimated (as Redis does) */
		{&s.c, "c", {3, 1}, 3, 1, {{{3, 2}, UNK, "A T(3-1), E6"}}},
		/* a cursor before the first entry: entries before it were removed,
		 * so the counter is estimated, not counted on (Redis since its
		 * trimming fixes; 7.0 counted 1 where 2 were added up to 2-1) */
		{&s.d, "d", {0, 0}, 0, 1, {{{2, 1}, 2, "A cursor < first, E5 ==first"}}},
		{&s.d, "d", {0, 0}, UNK, 2, {{{2, 1}, 2, "A E5 ==first"}, {{3, 1}, 3, "A +1"}}},
		{&s.e, "e", {0, 0}, UNK, 1, {{{2, 1}, 5, "A E2"}}},
		/* entries_added 0: no estimate is made */
		{&s.never, "never", {0, 0}, UNK, 1, {{{1, 0}, UNK, "A entries_added 0"}}},
		{&s.never, "never", {0, 0}, 0, 1, {{{1, 0}, 1, "A +1"}}},
		{&s.i, "i", {0, 0}, UNK, 3,
			{{{2, 1}, UNK, "A E6"}, {{3, 1}, UNK, "A E6"}, {{5, 1}, 5, "A E3"}}},
		{&s.i, "i", {4, 1}, 3, 1, {{{5, 1}, 5, "A T(4-1), E3"}}},
		{&s.tr, "tr", {1, 1}, 1, 2, {{{4, 1}, 4, "A cursor < first, E5 ==first"},
			{{5, 1}, 5, "A +1"}}},
		{&s.ctr, "ctr", {1, 1}, 1, 1, {{{5, 1}, 5, "A cursor < first, E3"}}},
	};

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		const struct adv_case *c = &cases[k];
		struct group_meta g;

		memset(&g, 0, sizeof(g));
		g.last_delivered = c->cursor;
		g.entries_read = c->entries_read;
		for (size_t j = 0; j < c->n; j++) {
			struct stream_id want_last = g.last_delivered;

			if (stream_id_cmp(&c->steps[j].id, &want_last) > 0) {
				want_last = c->steps[j].id;
			}
			group_advance(c->m, &g, &c->steps[j].id);
			ck_assert_msg(g.entries_read == c->steps[j].want,
				"%s case %zu step %zu (%" PRIu64 "-%" PRIu64
				"): entries_read %" PRId64 ", expected %" PRId64 " (%s)",
				c->name, k, j, c->steps[j].id.ms, c->steps[j].id.seq,
				g.entries_read, c->steps[j].want, c->steps[j].rule);
			ck_assert_msg(stream_id_cmp(&g.last_delivered, &want_last) == 0,
				"%s case %zu step %zu: cursor %" PRIu64 "-%" PRIu64, c->name, k, j,
				g.last_delivered.ms, g.last_delivered.seq);
		}
	}
	commit();
}
END_TEST

struct lag_case {
	const struct stream_meta *m;
	const char *name;
	struct stream_id cursor;
	int64_t entries_read;
	int64_t want; /* the live entries after the cursor */
	const char *rule;
};

/* The lag is the live entries after the cursor, whatever entries_read
 * says: Redis' entries_added - entries_read is wrong after trimming or an
 * XDEL after the cursor, and NULL where it cannot tell. */
START_TEST(test_cursor_lag)
{
	struct states s;

	make_states(&s);
	const struct lag_case cases[] = {
		{&s.never, "never", {0, 0}, UNK, 0, "empty"},
		{&s.never, "never", {3, 0}, 2, 0, "empty"},
		{&s.b, "b", {2, 1}, 2, 3, "inside"},
		{&s.b, "b", {2, 1}, UNK, 3, "inside, Redis: NULL"},
		{&s.b, "b", {2, 1}, 100, 3, "inside, entries_read set wrong (SETID ENTRIESREAD)"},
		{&s.b, "b", {5, 1}, 5, 0, "at the last"},
		{&s.b, "b", {5, 1}, UNK, 0, "at the last"},
		{&s.b, "b", {0, 0}, UNK, 5, "before the first"},
		{&s.b, "b", {1, 0}, UNK, 5, "before the first"},
		{&s.b, "b", {1, 1}, UNK, 4, "at the first"},
		{&s.b, "b", {9, 0}, UNK, 0, "past the last"},
		{&s.b, "b", {UINT64_MAX, UINT64_MAX}, UNK, 0, "past the last"},
		{&s.c, "c", {2, 1}, 2, 2, "XDEL after the cursor: 4-1 5-1"},
		{&s.c, "c", {3, 1}, 3, 2, "at the deleted one"},
		{&s.c, "c", {0, 0}, 0, 4, "before the first, one deleted"},
		{&s.c, "c", {4, 1}, 4, 1, "XDEL before the cursor"},
		{&s.c, "c", {5, 1}, UNK, 0, "at the last"},
		{&s.d, "d", {0, 0}, 0, 4, "first deleted, Redis: 5"},
		{&s.d, "d", {0, 0}, UNK, 4, "first deleted"},
		{&s.d, "d", {3, 1}, UNK, 2, "inside"},
		{&s.e, "e", {2, 1}, UNK, 0, "all deleted"},
		{&s.e, "e", {2, 1}, 2, 0, "all deleted, Redis: 3"},
		{&s.f, "f", {1, 1}, 1, 3, "last deleted: 2-1 3-1 4-1"},
		{&s.i, "i", {2, 1}, UNK, 2, "3-1 5-1"},
		{&s.tr, "tr", {0, 0}, UNK, 2, "trimmed, before the first"},
		{&s.tr, "tr", {1, 1}, 1, 2, "trimmed past the cursor, Redis 7.0: 4"},
		{&s.tr, "tr", {3, 1}, 3, 2, "trimmed up to the cursor"},
		{&s.tr, "tr", {4, 1}, UNK, 1, "at the first"},
		{&s.ctr, "ctr", {0, 0}, UNK, 1, "XDEL, trimmed"},
		{&s.ctr, "ctr", {1, 1}, 1, 1, "XDEL, trimmed past the cursor, Redis 7.0: 4"},
	};

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		const struct lag_case *c = &cases[k];
		struct group_meta g;
		int64_t lag = -12345;
		int rc;

		memset(&g, 0, sizeof(g));
		g.last_delivered = c->cursor;
		g.entries_read = c->entries_read;
		rc = group_lag(tx, c->m, &g, &lag);
		ck_assert_msg(rc == 0, "%s case %zu: %d", c->name, k, rc);
		ck_assert_msg(lag == c->want,
			"%s case %zu (%" PRIu64 "-%" PRIu64 ", %" PRId64 "): lag %" PRId64
			", expected %" PRId64 " (%s)",
			c->name, k, c->cursor.ms, c->cursor.seq, c->entries_read, lag, c->want,
			c->rule);
	}
	commit();
}
END_TEST

/* A group reading a stream to its end, as XREADGROUP would: lag falls to 0
 * and entries_read ends at entries_added, tombstone or not. */
/* The live entries after id, one by one. */
static int64_t
live_after(const struct stream_meta *m, const struct stream_id *after)
{
	struct stream_id start = *after, end = ID_MAX, id;
	struct stream_iter *it;
	struct st_buf f;
	int64_t n = 0;
	int rc;

	if (!stream_id_incr(&start)) {
		return 0;
	}
	OK(stream_iter_create(tx, m, &start, &end, false, &it));
	while ((rc = stream_iter_next(it, &id, &f)) == 0) {
		n++;
	}
	stream_iter_destroy(it);
	FAILS(rc, ECHD_ENOTFOUND);
	return n;
}

/* Over many nodes (100 entries each here), with XDEL inside and at the
 * edges of nodes and trimming by MINID: the lag at every cursor, on an
 * entry, on a deleted one and between ids, is the live entries after it. */
START_TEST(test_cursor_lag_nodes)
{
	static const uint64_t dels[] = {1, 100, 101, 150, 199, 200, 201, 450, 999, 1000};
	struct stream_meta m;
	struct stream_trim tr;
	uint64_t removed;

	mkstream(0, "s", &m);
	add_range(&m, 1, 1000);
	for (size_t k = 0; k < sizeof(dels) / sizeof(dels[0]); k++) {
		xdel(&m, dels[k], 1);
	}
	for (int pass = 0; pass < 2; pass++) {
		for (uint64_t ms = 0; ms <= 1001; ms++) {
			for (uint64_t seq = 0; seq <= 2; seq++) {
				struct group_meta g;
				int64_t lag = -1, want;

				memset(&g, 0, sizeof(g));
				g.last_delivered = ID(ms, seq);
				g.entries_read = (int64_t)ms; /* what Redis would trust */
				want = live_after(&m, &g.last_delivered);
				OK(group_lag(tx, &m, &g, &lag));
				if (lag != want) {
					ck_abort_msg("pass %d cursor %" PRIu64 "-%" PRIu64
						     ": lag %" PRId64 ", expected %" PRId64,
						pass, ms, seq, lag, want);
				}
			}
		}
		/* then trim part of a node away */
		memset(&tr, 0, sizeof(tr));
		tr.strategy = STREAM_TRIM_MINID;
		tr.minid = ID(333, 1);
		OK(stream_trim(tx, &m, &tr, &removed));
		U64_EQ(m.length, 1000 - 10 - 332 + 7);
	}
	commit();
}
END_TEST

START_TEST(test_cursor_read_through)
{
	struct stream_meta m;
	struct group_meta g;
	struct stream_iter *it;
	struct stream_id id, end = ID_MAX, start;
	struct st_buf f;
	int64_t lag;
	int rc, n = 0;

	mkstream(0, "s", &m);
	add_range(&m, 1, 50);
	xdel(&m, 20, 1);
	xdel(&m, 30, 1);
	gcreate(&m, "g", ID_MIN, 0, &g);
	OK(group_lag(tx, &m, &g, &lag));
	I64_EQ(lag, 48);
	start = ID_MIN;
	OK(stream_iter_create(tx, &m, &start, &end, false, &it));
	while ((rc = stream_iter_next(it, &id, &f)) == 0) {
		group_advance(&m, &g, &id);
		n++;
		OK(group_lag(tx, &m, &g, &lag));
		if (lag != 48 - n) {
			ck_abort_msg(
				"after %d reads (at %" PRIu64 "): lag %" PRId64, n, id.ms, lag);
		}
	}
	stream_iter_destroy(it);
	FAILS(rc, ECHD_ENOTFOUND);
	I64_EQ(n, 48);
	I64_EQ(g.entries_read, 50); /* A E3 at 50-1 */
	OK(group_lag(tx, &m, &g, &lag));
	I64_EQ(lag, 0);
	/* new entries count from there */
	add_range(&m, 51, 53);
	OK(group_lag(tx, &m, &g, &lag));
	I64_EQ(lag, 3);
	id = ID(51, 1);
	group_advance(&m, &g, &id);
	I64_EQ(g.entries_read, 51);
	commit();
}
END_TEST

static Suite *
cursor_suite(void)
{
	Suite *s = suite_create("cursor");
	TCase *tc;

	tc = tcase_create("estimate");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_cursor_estimate);
	suite_add_tcase(s, tc);

	tc = tcase_create("tombstones");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_cursor_tombstones);
	suite_add_tcase(s, tc);

	tc = tcase_create("advance");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_cursor_advance);
	tcase_add_test(tc, test_cursor_read_through);
	suite_add_tcase(s, tc);

	tc = tcase_create("lag");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_cursor_lag);
	tcase_add_test(tc, test_cursor_lag_nodes);
	suite_add_tcase(s, tc);
	return s;
}

/* ---- consumers ---------------------------------------------------------- */

START_TEST(test_consumer_create_lookup)
{
	struct stream_meta m;
	struct group_meta g, g2;
	struct consumer_meta a, b, c, x, y;
	struct st_buf an = B("alice"), cn = B("carol"), name;
	char longname[GROUP_NAME_MAX + 1];
	struct st_buf ln = {longname, GROUP_NAME_MAX};
	uint64_t pending;

	mkstream(0, "s", &m);
	gcreate(&m, "g", ID_MIN, 0, &g);
	gcreate(&m, "g2", ID_MIN, 0, &g2);
	ccreate(&g, "alice", 1000, &a);
	ck_assert_uint_ne(a.cid, 0);
	ck_assert_uint_ne(a.cid, g.gid);
	U64_EQ(a.seen_time, 1000);
	I64_EQ(a.active_time, -1);
	U64_EQ(a.pending, 0);
	U64_EQ(g.consumers, 1);
	ccreate(&g, "bob", 1001, &b);
	ck_assert_uint_ne(b.cid, a.cid);
	U64_EQ(g.consumers, 2);

	memset(&x, 0x5a, sizeof(x));
	y = x;
	FAILS(consumer_create(tx, &g, &an, 2000, &x), ECHD_EEXIST);
	ck_assert_mem_eq(&x, &y, sizeof(x));
	U64_EQ(g.consumers, 2);

	cload(&g, "alice", &c);
	U64_EQ(c.cid, a.cid);
	U64_EQ(c.seen_time, 1000); /* the duplicate did not touch it */
	I64_EQ(c.active_time, -1);
	U64_EQ(c.pending, 0);
	OK(consumer_by_id(tx, &g, b.cid, &c, &name));
	ck_assert(buf_eq(&name, "bob", 3));
	U64_EQ(c.cid, b.cid);
	U64_EQ(c.seen_time, 1001);
	OK(consumer_by_id(tx, &g, a.cid, &c, NULL));
	U64_EQ(c.seen_time, 1000);
	FAILS(consumer_lookup(tx, &g, &cn, &c), ECHD_ENOTFOUND);
	FAILS(consumer_by_id(tx, &g, 999999, &c, &name), ECHD_ENOTFOUND);
	FAILS(consumer_by_id(tx, &g2, a.cid, &c, &name), ECHD_ENOTFOUND);
	FAILS(consumer_lookup(tx, &g2, &an, &c), ECHD_ENOTFOUND);

	/* save round trip */
	a.seen_time = 5000;
	a.active_time = 4500;
	a.pending = 0;
	csave(&g, "alice", &a);
	cload(&g, "alice", &c);
	U64_EQ(c.seen_time, 5000);
	I64_EQ(c.active_time, 4500);
	OK(consumer_by_id(tx, &g, a.cid, &c, &name));
	ck_assert(buf_eq(&name, "alice", 5));

	/* the same name in another group is another consumer */
	ccreate(&g2, "alice", 7, &x);
	ck_assert_uint_ne(x.cid, a.cid);
	U64_EQ(g2.consumers, 1);
	cload(&g, "alice", &c);
	U64_EQ(c.cid, a.cid);

	/* the longest name (heap buffers for both rows), and one byte more */
	for (size_t i = 0; i < sizeof(longname); i++) {
		longname[i] = (char)('a' + i % 26);
	}
	ln.len = GROUP_NAME_MAX + 1;
	FAILS(consumer_create(tx, &g, &ln, 77, &x), ECHD_ETOOLONG);
	FAILS(consumer_lookup(tx, &g, &ln, &c), ECHD_ENOTFOUND);
	FAILS(consumer_delete(tx, &g, &ln, &pending), ECHD_ENOTFOUND);
	U64_EQ(g.consumers, 2);
	ln.len = GROUP_NAME_MAX;
	OK(consumer_create(tx, &g, &ln, 77, &x));
	OK(consumer_lookup(tx, &g, &ln, &c));
	U64_EQ(c.cid, x.cid);
	OK(consumer_by_id(tx, &g, x.cid, &c, &name));
	ck_assert(buf_eq(&name, longname, GROUP_NAME_MAX));
	x.seen_time = 78;
	OK(consumer_save(tx, &g, &ln, &x));
	OK(consumer_lookup(tx, &g, &ln, &c));
	U64_EQ(c.seen_time, 78);
	/* a long name survives the counter updates of pel_remove */
	deliver(&g, &x, 1, 0, 79);
	OK(consumer_save(tx, &g, &ln, &x));
	OK(pel_remove(tx, &g, &(struct stream_id){1, 0}));
	OK(consumer_by_id(tx, &g, x.cid, &c, &name));
	ck_assert(buf_eq(&name, longname, GROUP_NAME_MAX));
	U64_EQ(c.pending, 0);
	U64_EQ(g.consumers, 3);
	verify_group(&g);
	commit();
}
END_TEST

struct seen_cons {
	char names[16][16];
	size_t lens[16];
	struct consumer_meta c[16];
	unsigned n, stop_at;
};

static int
seen_cons_fn(const struct st_buf *name, const struct consumer_meta *c, void *ud)
{
	struct seen_cons *s = ud;

	ck_assert_uint_lt(s->n, 16);
	ck_assert_uint_le(name->len, 16);
	memcpy(s->names[s->n], name->data, name->len);
	s->lens[s->n] = name->len;
	s->c[s->n] = *c;
	s->n++;
	return s->n == s->stop_at ? -7 : 0;
}

START_TEST(test_consumer_each)
{
	static const char *const create_order[] = {"zed", "b", "", "ab", "a", "B"};
	static const char *const want[] = {"", "B", "a", "ab", "b", "zed"};
	struct stream_meta m;
	struct group_meta g0, g, g2;
	struct consumer_meta c;
	struct seen_cons s;

	mkstream(0, "s", &m);
	gcreate(&m, "g0", ID_MIN, 0, &g0);
	gcreate(&m, "g", ID_MIN, 0, &g);
	gcreate(&m, "g2", ID_MIN, 0, &g2);
	ccreate(&g0, "zzz", 1, &c); /* neighbours on either side */
	ccreate(&g2, "", 1, &c);
	for (unsigned i = 0; i < 6; i++) {
		ccreate(&g, create_order[i], 100 + i, &c);
		for (unsigned j = 0; j < i; j++) {
			deliver(&g, &c, i, j, 5);
		}
		csave(&g, create_order[i], &c);
	}
	memset(&s, 0, sizeof(s));
	OK(consumer_each(tx, &g, seen_cons_fn, &s));
	U64_EQ(s.n, 6);
	for (unsigned i = 0; i < 6; i++) {
		struct consumer_meta w;

		ck_assert_msg(
			s.lens[i] == strlen(want[i]) && memcmp(s.names[i], want[i], s.lens[i]) == 0,
			"consumer %u is %.*s, expected %s", i, (int)s.lens[i], s.names[i], want[i]);
		cload(&g, want[i], &w);
		U64_EQ(s.c[i].cid, w.cid);
		U64_EQ(s.c[i].seen_time, w.seen_time);
		U64_EQ(s.c[i].pending, w.pending);
	}
	U64_EQ(s.c[5].pending, 0); /* "zed", created first */
	U64_EQ(s.c[0].pending, 2); /* "", third */
	verify_group(&g);

	memset(&s, 0, sizeof(s));
	s.stop_at = 2;
	FAILS(consumer_each(tx, &g, seen_cons_fn, &s), -7);
	U64_EQ(s.n, 2);
	memset(&s, 0, sizeof(s));
	OK(consumer_each(tx, &g2, seen_cons_fn, &s));
	U64_EQ(s.n, 1);
	U64_EQ(s.lens[0], 0);
	commit();
}
END_TEST

START_TEST(test_consumer_delete)
{
	struct stream_meta m;
	struct group_meta g, other;
	struct consumer_meta a, b, e, oa, c;
	struct st_buf an = B("a"), bn = B("b"), en = B("e"), name;
	struct pel_row r;
	uint64_t pending = 999;

	mkstream(0, "s", &m);
	gcreate(&m, "g", ID_MIN, 0, &g);
	gcreate(&m, "other", ID_MIN, 0, &other);
	ccreate(&g, "a", 1, &a);
	ccreate(&g, "b", 1, &b);
	ccreate(&g, "e", 1, &e);
	ccreate(&other, "a", 1, &oa);
	/* a owns 2500 ids (enough to span pages), interleaved with b's 5 */
	for (uint64_t i = 1; i <= 2500; i++) {
		struct stream_id id = ID(i, 0);
		int rc = pel_deliver(tx, &g, (i % 500) == 0 ? &b : &a, &id, i);
		if (rc == 0) {
			rc = pel_deliver(tx, &other, &oa, &id, i);
		}
		if (rc != 0) {
			ck_abort_msg("pel_deliver: %d", rc);
		}
	}
	csave(&g, "a", &a);
	csave(&g, "b", &b);
	csave(&other, "a", &oa);
	U64_EQ(a.pending, 2495);
	U64_EQ(b.pending, 5);
	U64_EQ(g.pending, 2500);
	verify_group(&g);

	OK(consumer_delete(tx, &g, &an, &pending));
	U64_EQ(pending, 2495);
	U64_EQ(g.pending, 5);
	U64_EQ(g.consumers, 2);
	U64_EQ(rows_of(STORAGE_T_PEL, g.gid), 5);
	U64_EQ(rows_of2(STORAGE_T_CPEL, g.gid, a.cid), 0);
	FAILS(pel_get(tx, &g, &(struct stream_id){1, 0}, &r), ECHD_ENOTFOUND);
	OK(pel_get(tx, &g, &(struct stream_id){500, 0}, &r));
	U64_EQ(r.cid, b.cid);
	FAILS(consumer_lookup(tx, &g, &an, &c), ECHD_ENOTFOUND);
	FAILS(consumer_by_id(tx, &g, a.cid, &c, &name), ECHD_ENOTFOUND);
	pending = 999;
	FAILS(consumer_delete(tx, &g, &an, &pending), ECHD_ENOTFOUND);
	U64_EQ(pending, 999);
	U64_EQ(g.pending, 5);
	U64_EQ(g.consumers, 2);
	verify_group(&g);
	/* the other group's consumer of the same name is untouched */
	U64_EQ(rows_of(STORAGE_T_PEL, other.gid), 2500);
	cload(&other, "a", &c);
	U64_EQ(c.pending, 2500);
	verify_group(&other);

	/* no pending entries */
	OK(consumer_delete(tx, &g, &en, &pending));
	U64_EQ(pending, 0);
	U64_EQ(g.consumers, 1);
	U64_EQ(g.pending, 5);
	OK(consumer_delete(tx, &g, &bn, &pending));
	U64_EQ(pending, 5);
	U64_EQ(g.consumers, 0);
	U64_EQ(g.pending, 0);
	U64_EQ(group_rows(g.gid), 0);
	verify_group(&g);
	gsave(&m, "g", &g);
	/* a recreated consumer starts empty */
	ccreate(&g, "a", 9, &c);
	ck_assert_uint_ne(c.cid, a.cid);
	U64_EQ(c.pending, 0);
	verify_group(&g);
	commit();
}
END_TEST

static Suite *
consumers_suite(void)
{
	Suite *s = suite_create("consumers");
	TCase *tc;

	tc = tcase_create("create_lookup");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_consumer_create_lookup);
	suite_add_tcase(s, tc);

	tc = tcase_create("each");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_consumer_each);
	suite_add_tcase(s, tc);

	tc = tcase_create("delete");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_consumer_delete);
	suite_add_tcase(s, tc);
	return s;
}

/* ---- pending entries ---------------------------------------------------- */

static void
row_eq(const struct pel_row *r, struct stream_id id, uint64_t cid, uint64_t time, uint64_t count)
{
	ck_assert_msg(stream_id_cmp(&r->id, &id) == 0 && r->cid == cid &&
			      r->delivery_time == time && r->delivery_count == count,
		"row %" PRIu64 "-%" PRIu64 " cid %" PRIu64 " time %" PRIu64 " count %" PRIu64
		", expected %" PRIu64 "-%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64,
		r->id.ms, r->id.seq, r->cid, r->delivery_time, r->delivery_count, id.ms, id.seq,
		cid, time, count);
}

START_TEST(test_pel_deliver)
{
	struct stream_meta m;
	struct group_meta g, g2;
	struct consumer_meta a, b, c;
	struct pel_row r;
	struct stream_id id = ID(5, 1);

	mkstream(0, "s", &m);
	gcreate(&m, "g", ID_MIN, 0, &g);
	gcreate(&m, "g2", ID_MIN, 0, &g2);
	ccreate(&g, "a", 1, &a);
	ccreate(&g, "b", 1, &b);

	FAILS(pel_get(tx, &g, &id, &r), ECHD_ENOTFOUND);
	deliver(&g, &a, 5, 1, 100);
	U64_EQ(g.pending, 1);
	U64_EQ(a.pending, 1);
	OK(pel_get(tx, &g, &id, &r));
	row_eq(&r, id, a.cid, 100, 1);
	ck_assert(cpel_has(g.gid, a.cid, &id));
	deliver(&g, &a, 6, 0, 101);
	deliver(&g, &b, 7, 0, 102);
	U64_EQ(g.pending, 3);
	U64_EQ(a.pending, 2);
	U64_EQ(b.pending, 1);
	/* another group's PEL is apart */
	FAILS(pel_get(tx, &g2, &id, &r), ECHD_ENOTFOUND);
	csave(&g, "a", &a);
	csave(&g, "b", &b);
	gsave(&m, "g", &g);
	verify_group(&g);

	/* a re-delivery to the owner resets the row, no counter moves */
	r.delivery_count = 5;
	r.delivery_time = 150;
	OK(pel_put(tx, &g, &a, &r, a.cid));
	OK(pel_get(tx, &g, &id, &r));
	row_eq(&r, id, a.cid, 150, 5);
	deliver(&g, &a, 5, 1, 200);
	OK(pel_get(tx, &g, &id, &r));
	row_eq(&r, id, a.cid, 200, 1);
	U64_EQ(g.pending, 3);
	U64_EQ(a.pending, 2);
	csave(&g, "a", &a);

	/* delivered to b (the cursor went back): the row moves, count 1 */
	r.delivery_count = 3;
	OK(pel_put(tx, &g, &a, &r, a.cid));
	deliver(&g, &b, 5, 1, 300);
	OK(pel_get(tx, &g, &id, &r));
	row_eq(&r, id, b.cid, 300, 1);
	U64_EQ(g.pending, 3);
	U64_EQ(b.pending, 2);
	ck_assert(!cpel_has(g.gid, a.cid, &id));
	ck_assert(cpel_has(g.gid, b.cid, &id));
	cload(&g, "a", &c); /* the old owner, updated in storage */
	U64_EQ(c.pending, 1);
	U64_EQ(c.seen_time, a.seen_time);
	csave(&g, "b", &b);
	gsave(&m, "g", &g);
	verify_group(&g);
	commit();
}
END_TEST

START_TEST(test_pel_put)
{
	struct stream_meta m;
	struct group_meta g;
	struct consumer_meta a, b, c;
	struct pel_row r, got;
	struct stream_id id = ID(10, 0), fid = ID(11, 0);

	mkstream(0, "s", &m);
	gcreate(&m, "g", ID_MIN, 0, &g);
	ccreate(&g, "a", 1, &a);
	ccreate(&g, "b", 1, &b);
	deliver(&g, &a, 10, 0, 100);
	deliver(&g, &a, 12, 0, 100);
	csave(&g, "a", &a);

	/* XCLAIM: b takes 10-0 from a, with its own time and count */
	r.id = id;
	r.cid = b.cid;
	r.delivery_time = 500;
	r.delivery_count = 4;
	OK(pel_put(tx, &g, &b, &r, a.cid));
	U64_EQ(g.pending, 2);
	U64_EQ(b.pending, 1);
	OK(pel_get(tx, &g, &id, &got));
	row_eq(&got, id, b.cid, 500, 4);
	ck_assert(!cpel_has(g.gid, a.cid, &id));
	ck_assert(cpel_has(g.gid, b.cid, &id));
	cload(&g, "a", &c);
	U64_EQ(c.pending, 1);
	csave(&g, "b", &b);
	verify_group(&g);

	/* claimed by its owner: rewritten, no counter moves */
	r.delivery_count = 5;
	r.delivery_time = 600;
	OK(pel_put(tx, &g, &b, &r, b.cid));
	U64_EQ(g.pending, 2);
	U64_EQ(b.pending, 1);
	OK(pel_get(tx, &g, &id, &got));
	row_eq(&got, id, b.cid, 600, 5);
	csave(&g, "b", &b);
	verify_group(&g);

	/* FORCE: an id pending nowhere becomes a new row */
	r.id = fid;
	r.delivery_count = 1;
	r.delivery_time = 700;
	OK(pel_put(tx, &g, &b, &r, PEL_NEW));
	U64_EQ(g.pending, 3);
	U64_EQ(b.pending, 2);
	OK(pel_get(tx, &g, &fid, &got));
	row_eq(&got, fid, b.cid, 700, 1);
	csave(&g, "b", &b);
	gsave(&m, "g", &g);
	verify_group(&g);

	/* and back to a (loaded fresh, as a caller does) */
	cload(&g, "a", &a);
	r.cid = a.cid;
	r.delivery_count = 2;
	OK(pel_put(tx, &g, &a, &r, b.cid));
	csave(&g, "a", &a);
	U64_EQ(a.pending, 2);
	cload(&g, "b", &c);
	U64_EQ(c.pending, 1);
	verify_group(&g);
	commit();
}
END_TEST

/* XNACK: pel_release() gives a row back to the group; the other PEL
 * functions treat a released row as owned by no one. */
START_TEST(test_pel_release)
{
	struct stream_meta m, cm;
	struct group_meta g, cg;
	struct consumer_meta a, b, c;
	struct pel_row r, got;
	struct pel_run run = {0, 0};
	struct stream_id id = ID(10, 0), id2 = ID(12, 0), fid = ID(11, 0), id4 = ID(14, 0);
	struct st_buf from = B("s"), to = B("t"), gname = B("g");
	uint64_t pending;

	mkstream(0, "s", &m);
	gcreate(&m, "g", ID_MIN, 0, &g);
	ccreate(&g, "a", 1, &a);
	ccreate(&g, "b", 1, &b);
	deliver(&g, &a, 10, 0, 100);
	deliver(&g, &a, 12, 0, 100);
	deliver(&g, &a, 13, 0, 100);
	csave(&g, "a", &a);

	/* released from a: a's record and index lose it, the group keeps it */
	OK(pel_get(tx, &g, &id, &r));
	r.delivery_count = 4;
	r.delivery_time = 555; /* ignored: a released row has time 0 */
	OK(pel_release(tx, &g, &r, a.cid));
	U64_EQ(g.pending, 3);
	OK(pel_get(tx, &g, &id, &got));
	row_eq(&got, id, PEL_UNOWNED, 0, 4);
	ck_assert(!cpel_has(g.gid, a.cid, &id));
	cload(&g, "a", &a);
	U64_EQ(a.pending, 2);
	verify_group(&g);

	/* released again: only the count changes */
	r = got;
	r.delivery_count = 3;
	OK(pel_release(tx, &g, &r, PEL_UNOWNED));
	U64_EQ(g.pending, 3);
	OK(pel_get(tx, &g, &id, &got));
	row_eq(&got, id, PEL_UNOWNED, 0, 3);
	verify_group(&g);

	/* FORCE: an id pending nowhere becomes a released row */
	r.id = fid;
	r.delivery_count = 0;
	OK(pel_release(tx, &g, &r, PEL_NEW));
	U64_EQ(g.pending, 4);
	OK(pel_get(tx, &g, &fid, &got));
	row_eq(&got, fid, PEL_UNOWNED, 0, 0);
	gsave(&m, "g", &g);
	verify_group(&g);

	/* the group PEL lists them in id order; a's own list does not */
	{
		struct pel_iter *it;
		uint64_t n = 0;

		OK(pel_iter_create(tx, &g, a.cid, &ID_MIN, &ID_MAX, &it));
		while (pel_iter_next(it, &got) == 0) {
			ck_assert_uint_ne(got.cid, PEL_UNOWNED);
			n++;
		}
		pel_iter_destroy(it);
		U64_EQ(n, 2);
	}

	/* a copy of the stream keeps released rows released */
	savestream(0, "s", &m);
	OK(stream_copy(tx, 0, &from, 0, &to, &cm));
	OK(group_copy(tx, &m, &cm));
	OK(group_lookup(tx, &cm, &gname, &cg));
	U64_EQ(cg.pending, 4);
	OK(pel_get(tx, &cg, &fid, &got));
	row_eq(&got, fid, PEL_UNOWNED, 0, 0);
	verify_group(&cg);

	/* claimed by b (XCLAIM/XAUTOCLAIM): b gains it, the group count stays */
	OK(pel_get(tx, &g, &id, &r));
	r.cid = b.cid;
	r.delivery_time = 900;
	r.delivery_count++;
	OK(pel_put(tx, &g, &b, &r, PEL_UNOWNED));
	U64_EQ(g.pending, 4);
	U64_EQ(b.pending, 1);
	ck_assert(cpel_has(g.gid, b.cid, &id));
	csave(&g, "b", &b);
	verify_group(&g);

	/* delivered again after SETID moved the cursor back: to b, count 1 */
	OK(pel_deliver(tx, &g, &b, &fid, 950));
	U64_EQ(g.pending, 4);
	U64_EQ(b.pending, 2);
	OK(pel_get(tx, &g, &fid, &got));
	row_eq(&got, fid, b.cid, 950, 1);
	csave(&g, "b", &b);
	verify_group(&g);

	/* XACK of released and owned rows in one run */
	OK(pel_get(tx, &g, &fid, &r));
	OK(pel_release(tx, &g, &r, b.cid));
	OK(pel_get(tx, &g, &id2, &r));
	OK(pel_release(tx, &g, &r, a.cid));
	cload(&g, "a", &a);
	cload(&g, "b", &b);
	U64_EQ(a.pending, 1);
	U64_EQ(b.pending, 1);
	verify_group(&g);
	OK(pel_remove_run(tx, &g, &fid, &run));
	OK(pel_remove_run(tx, &g, &id, &run));  /* b's */
	OK(pel_remove_run(tx, &g, &id2, &run)); /* released */
	OK(pel_run_end(tx, &g, &run));
	U64_EQ(g.pending, 1);
	cload(&g, "b", &b);
	U64_EQ(b.pending, 0);
	gsave(&m, "g", &g);
	verify_group(&g);

	/* a consumer deleted after releasing leaves its released rows */
	deliver(&g, &a, 14, 0, 100);
	csave(&g, "a", &a);
	OK(pel_get(tx, &g, &id4, &r));
	OK(pel_release(tx, &g, &r, a.cid));
	cload(&g, "a", &c);
	{
		struct st_buf an = B("a");
		OK(consumer_delete(tx, &g, &an, &pending));
	}
	U64_EQ(pending, 1);
	U64_EQ(g.pending, 1);
	OK(pel_get(tx, &g, &id4, &got));
	row_eq(&got, id4, PEL_UNOWNED, 0, 1);
	gsave(&m, "g", &g);
	verify_group(&g);
	commit();
}
END_TEST

START_TEST(test_pel_remove)
{
	struct stream_meta m;
	struct group_meta g, g2;
	struct consumer_meta a, b, c;
	struct pel_row r;
	struct stream_id id = ID(3, 3), never = ID(4, 0);

	mkstream(0, "s", &m);
	gcreate(&m, "g", ID_MIN, 0, &g);
	gcreate(&m, "g2", ID_MIN, 0, &g2);
	ccreate(&g, "a", 1, &a);
	ccreate(&g, "b", 1, &b);
	deliver(&g, &a, 3, 3, 10);
	deliver(&g, &a, 3, 4, 10);
	deliver(&g, &b, 3, 5, 10);
	csave(&g, "a", &a);
	csave(&g, "b", &b);
	ccreate(&g2, "a", 1, &c);
	deliver(&g2, &c, 3, 3, 10);
	csave(&g2, "a", &c);

	OK(pel_remove(tx, &g, &id));
	U64_EQ(g.pending, 2);
	FAILS(pel_get(tx, &g, &id, &r), ECHD_ENOTFOUND);
	ck_assert(!cpel_has(g.gid, a.cid, &id));
	cload(&g, "a", &c);
	U64_EQ(c.pending, 1);
	cload(&g, "b", &c);
	U64_EQ(c.pending, 1);
	/* the other group still has it */
	OK(pel_get(tx, &g2, &id, &r));
	U64_EQ(g2.pending, 1);

	/* not pending: nothing changes */
	FAILS(pel_remove(tx, &g, &id), ECHD_ENOTFOUND);
	FAILS(pel_remove(tx, &g, &never), ECHD_ENOTFOUND);
	U64_EQ(g.pending, 2);
	cload(&g, "a", &c);
	U64_EQ(c.pending, 1);
	gsave(&m, "g", &g);
	verify_group(&g);

	OK(pel_remove(tx, &g, &(struct stream_id){3, 5}));
	OK(pel_remove(tx, &g, &(struct stream_id){3, 4}));
	U64_EQ(g.pending, 0);
	U64_EQ(rows_of(STORAGE_T_PEL, g.gid), 0);
	U64_EQ(rows_of(STORAGE_T_CPEL, g.gid), 0);
	cload(&g, "b", &c);
	U64_EQ(c.pending, 0);
	verify_group(&g);
	commit();
}
END_TEST

START_TEST(test_pel_deliver_new)
{
	struct stream_meta m;
	struct group_meta g;
	struct consumer_meta a, c;
	struct stream_id last;
	struct pel_row r;

	mkstream(0, "s", &m);
	gcreate(&m, "g", ID_MIN, 0, &g);
	ccreate(&g, "a", 1, &a);
	deliver(&g, &a, 1, 1, 10);
	OK(pel_deliver_new(tx, &g, &a, &(struct stream_id){2, 0}, 20));
	OK(pel_deliver_new(tx, &g, &a, &(struct stream_id){2, 1}, 30));
	U64_EQ(g.pending, 3);
	U64_EQ(a.pending, 3);
	OK(pel_get(tx, &g, &(struct stream_id){2, 1}, &r));
	row_eq(&r, ID(2, 1), a.cid, 30, 1);
	ck_assert(cpel_has(g.gid, a.cid, &(struct stream_id){2, 1}));
	OK(pel_last(tx, &g, &last));
	ck_assert(stream_id_cmp(&last, &(struct stream_id){2, 1}) == 0);
	csave(&g, "a", &a);
	gsave(&m, "g", &g);
	cload(&g, "a", &c);
	U64_EQ(c.pending, 3);
	verify_group(&g);
	commit();
}
END_TEST

static uint64_t
group_rows_bytes(void)
{
	return table_bytes(STORAGE_T_GROUPS) + table_bytes(STORAGE_T_CONSUMERS) +
		table_bytes(STORAGE_T_CONSREC) + table_bytes(STORAGE_T_PEL) + table_bytes(STORAGE_T_CPEL);
}

START_TEST(test_group_usage)
{
	struct stream_meta m;
	struct group_meta g, h;
	struct consumer_meta a, b;
	uint64_t bytes = 1;

	mkstream(0, "s", &m);
	OK(group_usage(tx, &m, &bytes));
	U64_EQ(bytes, 0);
	/* the only stream: its groups' rows are every row of those tables */
	gcreate(&m, "g", ID_MIN, 0, &g);
	gcreate(&m, "a-longer-group-name", ID_MIN, 0, &h);
	ccreate(&g, "alice", 1, &a);
	ccreate(&g, "b", 1, &b);
	for (uint64_t i = 1; i <= 30; i++) {
		deliver(&g, i % 3 ? &a : &b, i, 0, 10);
	}
	csave(&g, "alice", &a);
	csave(&g, "b", &b);
	gsave(&m, "g", &g);
	gsave(&m, "a-longer-group-name", &h);
	OK(group_usage(tx, &m, &bytes));
	U64_EQ(bytes, group_rows_bytes());
	/* acknowledged entries leave both PELs */
	OK(pel_remove(tx, &g, &(struct stream_id){1, 0}));
	gsave(&m, "g", &g);
	OK(group_usage(tx, &m, &bytes));
	U64_EQ(bytes, group_rows_bytes());
}
END_TEST

/* The PEL of g as (id, owner's name, time, count) lines, for comparing copies. */
static char *
pel_text(const struct group_meta *g)
{
	struct pel_iter *it;
	struct pel_row r;
	size_t cap = 1 << 16, len = 0;
	char *out = malloc(cap);
	int rc;

	ck_assert_ptr_nonnull(out);
	out[0] = '\0';
	OK(pel_iter_create(tx, g, 0, &ID_MIN, &ID_MAX, &it));
	while ((rc = pel_iter_next(it, &r)) == 0) {
		struct consumer_meta cm;
		struct st_buf name;
		char line[256];
		int n;

		OK(consumer_by_id(tx, g, r.cid, &cm, &name));
		n = snprintf(line, sizeof(line), "%" PRIu64 "-%" PRIu64 " %.*s %" PRIu64 " %" PRIu64 "\n",
			r.id.ms, r.id.seq, (int)name.len, (const char *)name.data, r.delivery_time,
			r.delivery_count);
		while (len + (size_t)n + 1 > cap) {
			cap *= 2;
			out = realloc(out, cap);
			ck_assert_ptr_nonnull(out);
		}
		memcpy(out + len, line, (size_t)n + 1);
		len += (size_t)n;
	}
	FAILS(rc, ECHD_ENOTFOUND);
	pel_iter_destroy(it);
	return out;
}

START_TEST(test_group_copy)
{
	struct stream_meta m, c, got;
	struct group_meta g, h, cg;
	struct consumer_meta a, b, ca, cb;
	struct st_buf from = B("s"), to = B("t");
	struct stream_iter *i1, *i2;
	struct stream_id id1, id2;
	struct st_buf f1, f2;
	char *p1, *p2;
	int rc;

	mkstream(0, "s", &m);
	add_range(&m, 1, 20000); /* past one chunk of rows */
	gcreate(&m, "g", ID_MIN, 0, &g);
	gcreate(&m, "h", ID(5, 1), 5, &h);
	ccreate(&g, "alice", 1, &a);
	ccreate(&g, "bob", 1, &b);
	for (uint64_t i = 1; i <= 12000; i++) {
		deliver(&g, i % 3 ? &a : &b, i, 1, 100 + i);
	}
	csave(&g, "alice", &a);
	csave(&g, "bob", &b);
	gsave(&m, "g", &g);
	gsave(&m, "h", &h);
	savestream(0, "s", &m);
	OK(stream_set_expire(tx, 0, &from, &m, 777));

	OK(stream_copy(tx, 0, &from, 3, &to, &c));
	OK(group_copy(tx, &m, &c));
	ck_assert_uint_ne(c.sid, m.sid);
	OK(stream_lookup(tx, 3, &to, &got));
	U64_EQ(got.sid, c.sid);
	U64_EQ(got.length, 20000);
	U64_EQ(got.nodes, m.nodes);
	U64_EQ(got.groups, 2);
	U64_EQ(got.expire_ms, 777);
	ID_EQ(got.last, 20000, 1);
	/* the same entries */
	OK(stream_iter_create(tx, &m, &ID_MIN, &ID_MAX, false, &i1));
	OK(stream_iter_create(tx, &got, &ID_MIN, &ID_MAX, false, &i2));
	while ((rc = stream_iter_next(i1, &id1, &f1)) == 0) {
		OK(stream_iter_next(i2, &id2, &f2));
		ck_assert(stream_id_cmp(&id1, &id2) == 0);
		ck_assert(f1.len == f2.len && memcmp(f1.data, f2.data, f1.len) == 0);
	}
	FAILS(rc, ECHD_ENOTFOUND);
	FAILS(stream_iter_next(i2, &id2, &f2), ECHD_ENOTFOUND);
	stream_iter_destroy(i1);
	stream_iter_destroy(i2);
	/* the same groups, consumers and PEL, under new ids */
	gload(&got, "g", &cg);
	ck_assert_uint_ne(cg.gid, g.gid);
	U64_EQ(cg.pending, 12000);
	U64_EQ(cg.consumers, 2);
	verify_group(&cg);
	cload(&cg, "alice", &ca);
	cload(&cg, "bob", &cb);
	ck_assert_uint_ne(ca.cid, a.cid);
	U64_EQ(ca.pending, a.pending);
	U64_EQ(cb.pending, b.pending);
	p1 = pel_text(&g);
	p2 = pel_text(&cg);
	ck_assert_str_eq(p1, p2);
	free(p1);
	free(p2);
	gload(&got, "h", &cg);
	ID_EQ(cg.last_delivered, 5, 1);
	U64_EQ(cg.pending, 0);
	/* and independent: the copy's PEL changes alone */
	gload(&got, "g", &cg);
	OK(pel_remove(tx, &cg, &(struct stream_id){1, 1}));
	verify_group(&g);
	U64_EQ(rows_of(STORAGE_T_PEL, g.gid), 12000);
	U64_EQ(rows_of(STORAGE_T_PEL, cg.gid), 11999);
	/* a taken destination */
	FAILS(stream_copy(tx, 0, &from, 3, &to, &c), ECHD_EEXIST);
	FAILS(stream_copy(tx, 0, &to, 3, &from, &c), ECHD_ENOTFOUND);

	/* a stream whose only group has no consumers (no id map at all) */
	{
		struct st_buf un = B("u"), vn = B("v");
		struct stream_meta u, v;

		mkstream(0, "u", &u);
		add_range(&u, 1, 3);
		gcreate(&u, "lonely", ID(2, 1), 2, &g);
		savestream(0, "u", &u);
		OK(stream_copy(tx, 0, &un, 0, &vn, &v));
		OK(group_copy(tx, &u, &v));
		gload(&v, "lonely", &cg);
		ID_EQ(cg.last_delivered, 2, 1);
		U64_EQ(cg.consumers, 0);
		verify_group(&cg);
	}
}
END_TEST

START_TEST(test_pel_remove_run)
{
	struct stream_meta m;
	struct group_meta g;
	struct consumer_meta a, b, c;
	struct pel_run run = {0, 0};
	struct pel_row r;

	mkstream(0, "s", &m);
	gcreate(&m, "g", ID_MIN, 0, &g);
	ccreate(&g, "a", 1, &a);
	ccreate(&g, "b", 1, &b);
	deliver(&g, &a, 1, 1, 10);
	deliver(&g, &a, 1, 2, 10);
	deliver(&g, &b, 1, 3, 10);
	deliver(&g, &a, 1, 4, 10);
	deliver(&g, &b, 1, 5, 10);
	csave(&g, "a", &a);
	csave(&g, "b", &b);

	OK(pel_remove_run(tx, &g, &(struct stream_id){1, 1}, &run));
	OK(pel_remove_run(tx, &g, &(struct stream_id){1, 2}, &run));
	/* a's count is gathered, not yet written */
	cload(&g, "a", &c);
	U64_EQ(c.pending, 3);
	OK(pel_remove_run(tx, &g, &(struct stream_id){1, 3}, &run));
	/* the owner changed: a's two are written */
	cload(&g, "a", &c);
	U64_EQ(c.pending, 1);
	/* an id not pending neither counts nor ends the run */
	FAILS(pel_remove_run(tx, &g, &(struct stream_id){9, 9}, &run), ECHD_ENOTFOUND);
	U64_EQ(run.cid, b.cid);
	U64_EQ(run.n, 1);
	OK(pel_remove_run(tx, &g, &(struct stream_id){1, 4}, &run));
	OK(pel_run_end(tx, &g, &run));
	U64_EQ(run.n, 0);
	/* ending twice writes nothing more */
	OK(pel_run_end(tx, &g, &run));

	U64_EQ(g.pending, 1);
	cload(&g, "a", &c);
	U64_EQ(c.pending, 0);
	cload(&g, "b", &c);
	U64_EQ(c.pending, 1);
	OK(pel_get(tx, &g, &(struct stream_id){1, 5}, &r));
	FAILS(pel_get(tx, &g, &(struct stream_id){1, 4}, &r), ECHD_ENOTFOUND);
	gsave(&m, "g", &g);
	verify_group(&g);
	commit();
}
END_TEST

START_TEST(test_pel_last)
{
	struct stream_meta m;
	struct group_meta g1, g2, g3;
	struct consumer_meta a;
	struct stream_id id = ID(77, 77);

	mkstream(0, "s", &m);
	gcreate(&m, "g1", ID_MIN, 0, &g1);
	gcreate(&m, "g2", ID_MIN, 0, &g2);
	gcreate(&m, "g3", ID_MIN, 0, &g3);
	ck_assert_uint_lt(g1.gid, g2.gid);
	ck_assert_uint_lt(g2.gid, g3.gid);
	FAILS(pel_last(tx, &g2, &id), ECHD_ENOTFOUND);
	ID_EQ(id, 77, 77); /* written only on success */

	/* rows on both sides of the empty g2 */
	ccreate(&g1, "a", 1, &a);
	deliver(&g1, &a, 9, 0, 1);
	ccreate(&g3, "a", 1, &a);
	deliver(&g3, &a, 1, 0, 1);
	FAILS(pel_last(tx, &g2, &id), ECHD_ENOTFOUND);

	ccreate(&g2, "a", 1, &a);
	deliver(&g2, &a, 5, 0, 1);
	deliver(&g2, &a, 3, 0, 1);
	deliver(&g2, &a, 5, 2, 1);
	csave(&g2, "a", &a);
	OK(pel_last(tx, &g2, &id));
	ID_EQ(id, 5, 2);
	OK(pel_remove(tx, &g2, &(struct stream_id){5, 2}));
	OK(pel_last(tx, &g2, &id));
	ID_EQ(id, 5, 0);
	deliver(&g2, &a, UINT64_MAX, UINT64_MAX, 1);
	OK(pel_last(tx, &g2, &id));
	ID_EQ(id, UINT64_MAX, UINT64_MAX);
	OK(pel_last(tx, &g1, &id));
	ID_EQ(id, 9, 0);
	OK(pel_last(tx, &g3, &id));
	ID_EQ(id, 1, 0);
	commit();
}
END_TEST

/* Collects up to 64 rows of an iterator. */
static unsigned
collect(uint64_t cid, const struct group_meta *g, struct stream_id start, struct stream_id end,
	struct pel_row *out)
{
	struct pel_iter *it;
	unsigned n = 0;
	int rc;

	OK(pel_iter_create(tx, g, cid, &start, &end, &it));
	while ((rc = pel_iter_next(it, &out[n])) == 0) {
		n++;
		ck_assert_uint_lt(n, 64);
	}
	FAILS(rc, ECHD_ENOTFOUND);
	FAILS(pel_iter_next(it, &out[n]), ECHD_ENOTFOUND); /* stays at the end */
	pel_iter_destroy(it);
	return n;
}

START_TEST(test_pel_iter)
{
	struct stream_meta m;
	struct group_meta g0, g, g2;
	struct consumer_meta a, b, c, x;
	struct pel_row rows[64];
	unsigned n;

	mkstream(0, "s", &m);
	gcreate(&m, "g0", ID_MIN, 0, &g0);
	gcreate(&m, "g", ID_MIN, 0, &g);
	gcreate(&m, "g2", ID_MIN, 0, &g2);
	ccreate(&g0, "x", 1, &x);
	deliver(&g0, &x, 4, 0, 1);
	ccreate(&g, "a", 1, &a);
	ccreate(&g, "b", 1, &b);
	ccreate(&g, "c", 1, &c); /* with nothing pending */
	/* ids 1-0 .. 10-0, a the odd ones, b the even ones, at time 100+i */
	for (uint64_t i = 10; i >= 1; i--) {
		deliver(&g, i % 2 ? &a : &b, i, 0, 100 + i);
	}
	ccreate(&g2, "x", 1, &x);
	deliver(&g2, &x, 5, 0, 1);
	deliver(&g2, &x, 0, 5, 1);

	n = collect(0, &g, ID_MIN, ID_MAX, rows);
	U64_EQ(n, 10);
	for (unsigned i = 0; i < n; i++) {
		row_eq(&rows[i], ID(i + 1, 0), (i + 1) % 2 ? a.cid : b.cid, 101 + i, 1);
	}
	n = collect(0, &g, ID(3, 0), ID(7, 0), rows);
	U64_EQ(n, 5);
	ID_EQ(rows[0].id, 3, 0);
	ID_EQ(rows[4].id, 7, 0);
	n = collect(0, &g, ID(3, 1), ID(6, UINT64_MAX), rows);
	U64_EQ(n, 3);
	ID_EQ(rows[0].id, 4, 0);
	ID_EQ(rows[2].id, 6, 0);
	n = collect(0, &g, ID(7, 0), ID(3, 0), rows);
	U64_EQ(n, 0);
	n = collect(0, &g, ID(11, 0), ID_MAX, rows);
	U64_EQ(n, 0);
	n = collect(0, &g, ID(10, 0), ID(10, 0), rows);
	U64_EQ(n, 1);

	/* one consumer's PEL, full rows from the group PEL */
	n = collect(a.cid, &g, ID_MIN, ID_MAX, rows);
	U64_EQ(n, 5);
	for (unsigned i = 0; i < n; i++) {
		row_eq(&rows[i], ID(2 * i + 1, 0), a.cid, 101 + 2 * i, 1);
	}
	n = collect(b.cid, &g, ID(3, 0), ID(8, 0), rows);
	U64_EQ(n, 3);
	ID_EQ(rows[0].id, 4, 0);
	ID_EQ(rows[2].id, 8, 0);
	row_eq(&rows[1], ID(6, 0), b.cid, 106, 1);
	n = collect(c.cid, &g, ID_MIN, ID_MAX, rows);
	U64_EQ(n, 0);
	n = collect(b.cid, &g, ID(9, 0), ID_MAX, rows);
	U64_EQ(n, 1);

	/* the walk carries from seq UINT64_MAX to the next ms */
	deliver(&g, &a, 20, UINT64_MAX, 1);
	deliver(&g, &a, 21, 0, 1);
	n = collect(0, &g, ID(11, 0), ID(21, 0), rows);
	U64_EQ(n, 2);
	ID_EQ(rows[0].id, 20, UINT64_MAX);
	ID_EQ(rows[1].id, 21, 0);
	n = collect(a.cid, &g, ID(10, 0), ID(30, 0), rows);
	U64_EQ(n, 2);
	ID_EQ(rows[1].id, 21, 0);
	csave(&g, "a", &a);
	OK(pel_remove(tx, &g, &(struct stream_id){20, UINT64_MAX}));
	OK(pel_remove(tx, &g, &(struct stream_id){21, 0}));

	/* the largest id ends the walk */
	deliver(&g, &a, UINT64_MAX, UINT64_MAX, 1);
	n = collect(0, &g, ID(10, 0), ID_MAX, rows);
	U64_EQ(n, 2);
	ID_EQ(rows[1].id, UINT64_MAX, UINT64_MAX);
	n = collect(a.cid, &g, ID(UINT64_MAX, 0), ID_MAX, rows);
	U64_EQ(n, 1);
	ID_EQ(rows[0].id, UINT64_MAX, UINT64_MAX);
	n = collect(0, &g2, ID_MIN, ID_MAX, rows);
	U64_EQ(n, 2);
	ID_EQ(rows[0].id, 0, 5);
	commit();
}
END_TEST

/* Rows change between pel_iter_next calls: the iterator carries on from
 * the last row it returned. */
START_TEST(test_pel_iter_mutation)
{
	/* 15-5 is delivered while 9-0 is read: ahead, so it is seen */
	static const struct stream_id want[] = {{1, 0}, {3, 0}, {5, 0}, {7, 0}, {9, 0}, {11, 0},
		{13, 0}, {15, 0}, {15, 5}, {17, 0}, {19, 0}};
	struct stream_meta m;
	struct group_meta g;
	struct consumer_meta a, b;
	struct pel_iter *it;
	struct pel_row r;
	struct stream_id seen[64];
	unsigned n = 0;
	int rc;

	mkstream(0, "s", &m);
	gcreate(&m, "g", ID_MIN, 0, &g);
	ccreate(&g, "a", 1, &a);
	ccreate(&g, "b", 1, &b);
	for (uint64_t i = 1; i <= 20; i++) {
		deliver(&g, &a, i, 0, 1);
	}
	csave(&g, "a", &a);

	/* group PEL: ack each row as it is read, and the row after it */
	OK(pel_iter_create(tx, &g, 0, &ID_MIN, &ID_MAX, &it));
	while ((rc = pel_iter_next(it, &r)) == 0) {
		struct stream_id next = ID(r.id.ms + 1, 0);

		ck_assert_uint_lt(n, 64);
		seen[n++] = r.id;
		OK(pel_remove(tx, &g, &r.id));
		rc = pel_remove(tx, &g, &next);
		/* 15-5's successor 16-0 went with 15-0 */
		ck_assert(rc == 0 || (rc == ECHD_ENOTFOUND && r.id.seq == 5));
		if (r.id.ms == 9) {
			/* a new row behind is not seen, one ahead is */
			deliver(&g, &b, 2, 5, 1);
			deliver(&g, &b, 15, 5, 1);
			csave(&g, "b", &b);
		}
	}
	FAILS(rc, ECHD_ENOTFOUND);
	pel_iter_destroy(it);
	U64_EQ(n, sizeof(want) / sizeof(want[0]));
	for (unsigned i = 0; i < n; i++) {
		ck_assert_msg(stream_id_cmp(&seen[i], &want[i]) == 0,
			"row %u: %" PRIu64 "-%" PRIu64 ", expected %" PRIu64 "-%" PRIu64, i,
			seen[i].ms, seen[i].seq, want[i].ms, want[i].seq);
	}
	/* only 2-5 is left */
	U64_EQ(g.pending, 1);
	OK(pel_get(tx, &g, &(struct stream_id){2, 5}, &r));
	U64_EQ(r.cid, b.cid);
	verify_group(&g);

	/* one consumer's PEL while rows move away from it */
	cload(&g, "a", &a);
	cload(&g, "b", &b);
	for (uint64_t i = 100; i < 110; i++) {
		deliver(&g, &a, i, 0, 1);
	}
	csave(&g, "a", &a);
	n = 0;
	OK(pel_iter_create(tx, &g, a.cid, &ID_MIN, &ID_MAX, &it));
	while ((rc = pel_iter_next(it, &r)) == 0) {
		ck_assert_uint_lt(n, 64);
		seen[n++] = r.id;
		U64_EQ(r.cid, a.cid);
		if (r.id.ms < 109) {
			deliver(&g, &b, r.id.ms + 1, 0, 2); /* moves the next row to b */
		}
	}
	FAILS(rc, ECHD_ENOTFOUND);
	pel_iter_destroy(it);
	csave(&g, "b", &b);
	U64_EQ(n, 5);
	for (unsigned i = 0; i < n; i++) {
		ID_EQ(seen[i], 100 + 2 * i, 0);
	}
	U64_EQ(rows_of2(STORAGE_T_CPEL, g.gid, b.cid), 6);
	verify_group(&g);
	commit();
}
END_TEST

/* ---- the random mix --------------------------------------------------- */

#define R_IDS  200
#define R_CONS 5
#define R_OPS  2000

#define R_RELEASED (-2) /* pending, owned by no one (XNACK) */

/* What the PEL should hold, kept by the test. */
struct model {
	int owner[R_IDS]; /* consumer slot, -1 (not pending) or R_RELEASED */
	uint64_t time[R_IDS], count[R_IDS];
	uint64_t cid[R_CONS];
	bool exists[R_CONS];
	uint64_t pending;
};

static uint64_t rng_state;

static uint64_t
rng(void)
{
	/* xorshift64*: deterministic, so a failure reproduces */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ull;
}

static struct stream_id
r_id(unsigned i)
{
	return ID(1000 + i / 4, i % 4);
}

static void
r_name(unsigned slot, char *buf)
{
	snprintf(buf, 8, "c%u", slot);
}

/* Storage against the model, row by row. */
static void
r_check(const struct model *md, const struct group_meta *g)
{
	struct pel_iter *it;
	struct pel_row r;
	bool seen[R_IDS] = {false};
	uint64_t n = 0;
	int rc;

	if (g->pending != md->pending) {
		ck_abort_msg("group pending %" PRIu64 ", model %" PRIu64, g->pending, md->pending);
	}
	OK(pel_iter_create(tx, g, 0, &ID_MIN, &ID_MAX, &it));
	while ((rc = pel_iter_next(it, &r)) == 0) {
		unsigned i = (unsigned)((r.id.ms - 1000) * 4 + r.id.seq);

		if (r.id.ms < 1000 || r.id.seq >= 4 || i >= R_IDS || seen[i]) {
			ck_abort_msg("unexpected row %" PRIu64 "-%" PRIu64, r.id.ms, r.id.seq);
		}
		seen[i] = true;
		if (md->owner[i] == -1 ||
			(md->owner[i] == R_RELEASED ? r.cid != PEL_UNOWNED
						    : md->cid[md->owner[i]] != r.cid) ||
			md->time[i] != r.delivery_time || md->count[i] != r.delivery_count) {
			ck_abort_msg("row %u: cid %" PRIu64 " time %" PRIu64 " count %" PRIu64
				     "; model slot %d time %" PRIu64 " count %" PRIu64,
				i, r.cid, r.delivery_time, r.delivery_count, md->owner[i],
				md->time[i], md->count[i]);
		}
		n++;
	}
	pel_iter_destroy(it);
	FAILS(rc, ECHD_ENOTFOUND);
	U64_EQ(n, md->pending);
	for (unsigned s = 0; s < R_CONS; s++) {
		struct consumer_meta c;
		char name[8];
		uint64_t want = 0;

		r_name(s, name);
		rc = consumer_lookup(tx, g, &(struct st_buf){name, strlen(name)}, &c);
		if (!md->exists[s]) {
			FAILS(rc, ECHD_ENOTFOUND);
			continue;
		}
		OK(rc);
		U64_EQ(c.cid, md->cid[s]);
		for (unsigned i = 0; i < R_IDS; i++) {
			want += md->owner[i] == (int)s;
		}
		U64_EQ(c.pending, want);
	}
	verify_group(g);
}

START_TEST(test_pel_random)
{
	struct stream_meta m;
	struct group_meta g;
	struct model md;
	unsigned counts[7] = {0};

	rng_state = 0x9e3779b97f4a7c15ull;
	memset(&md, 0, sizeof(md));
	for (unsigned i = 0; i < R_IDS; i++) {
		md.owner[i] = -1;
	}
	mkstream(0, "s", &m);
	gcreate(&m, "g", ID_MIN, 0, &g);
	if (_i == 1) {
		/* a timed policy: every write keeps the due rows (verify_due) */
		g.policy.ack_wait = 50;
		g.policy.nbackoff = 2;
		g.policy.backoff[0] = 30;
		g.policy.backoff[1] = 70;
		g.policy.max_deliver = 4;
	}
	gsave(&m, "g", &g);
	for (unsigned op = 0; op < R_OPS; op++) {
		unsigned kind = (unsigned)(rng() % 100), s = (unsigned)(rng() % R_CONS);
		unsigned i = (unsigned)(rng() % R_IDS);
		struct stream_id id = r_id(i);
		struct st_buf name;
		struct consumer_meta c;
		char nbuf[8];
		uint64_t now = 10000 + op;
		int rc;

		/* as the broker does: load, change, save */
		gload(&m, "g", &g);
		r_name(s, nbuf);
		name.data = nbuf;
		name.len = strlen(nbuf);
		if (kind < 70 && !md.exists[s]) {
			OK(consumer_create(tx, &g, &name, now, &c));
			md.exists[s] = true;
			md.cid[s] = c.cid;
		} else if (md.exists[s]) {
			OK(consumer_lookup(tx, &g, &name, &c));
		}
		if (kind < 40) {
			/* XREADGROUP (a cursor moved back re-delivers) */
			rc = pel_deliver(tx, &g, &c, &id, now);
			if (rc != 0) {
				ck_abort_msg("op %u deliver: %d", op, rc);
			}
			if (md.owner[i] == -1) {
				md.pending++;
			}
			md.owner[i] = (int)s;
			md.time[i] = now;
			md.count[i] = 1;
			counts[0]++;
		} else if (kind < 55) {
			/* XCLAIM, FORCE when not pending */
			struct pel_row r = {id, c.cid, now, 7};
			uint64_t prev = PEL_NEW;

			if (md.owner[i] >= 0) {
				prev = md.cid[md.owner[i]];
				r.delivery_count = md.count[i] + 1;
			} else if (md.owner[i] == R_RELEASED) {
				prev = PEL_UNOWNED;
				r.delivery_count = md.count[i] + 1;
			} else {
				md.pending++;
			}
			rc = pel_put(tx, &g, &c, &r, prev);
			if (rc != 0) {
				ck_abort_msg("op %u put: %d", op, rc);
			}
			md.owner[i] = (int)s;
			md.time[i] = now;
			md.count[i] = r.delivery_count;
			counts[prev == PEL_NEW ? 2 : 1]++;
		} else if (kind < 70) {
			/* XNACK, FORCE when not pending */
			struct pel_row r = {id, 0, now, md.count[i] / 2};
			uint64_t prev = PEL_NEW;

			if (md.owner[i] >= 0) {
				prev = md.cid[md.owner[i]];
			} else if (md.owner[i] == R_RELEASED) {
				prev = PEL_UNOWNED;
			} else {
				r.delivery_count = 0;
				md.pending++;
			}
			if (md.exists[s]) {
				OK(consumer_save(tx, &g, &name, &c)); /* the owner's record moves */
			}
			rc = pel_release(tx, &g, &r, prev);
			if (rc != 0) {
				ck_abort_msg("op %u release: %d", op, rc);
			}
			if (md.exists[s]) {
				OK(consumer_lookup(tx, &g, &name, &c));
			}
			md.owner[i] = R_RELEASED;
			md.time[i] = 0;
			md.count[i] = r.delivery_count;
			counts[6]++;
		} else if (kind < 95) {
			/* XACK */
			rc = pel_remove(tx, &g, &id);
			if (rc != (md.owner[i] != -1 ? 0 : ECHD_ENOTFOUND)) {
				ck_abort_msg(
					"op %u remove %u: %d, owner %d", op, i, rc, md.owner[i]);
			}
			if (md.owner[i] != -1) {
				md.owner[i] = -1;
				md.pending--;
			}
			counts[rc == 0 ? 3 : 4]++;
			if (md.exists[s]) {
				/* the owner's record may have changed under c */
				OK(consumer_lookup(tx, &g, &name, &c));
			}
		} else if (md.exists[s]) {
			/* XGROUP DELCONSUMER */
			uint64_t pending = 0, want = 0;

			for (unsigned j = 0; j < R_IDS; j++) {
				if (md.owner[j] == (int)s) {
					md.owner[j] = -1;
					want++;
				}
			}
			OK(consumer_delete(tx, &g, &name, &pending));
			if (pending != want) {
				ck_abort_msg("op %u delconsumer: %" PRIu64 ", model %" PRIu64, op,
					pending, want);
			}
			md.pending -= want;
			md.exists[s] = false;
			counts[5]++;
		}
		if (md.exists[s]) {
			OK(consumer_save(tx, &g, &name, &c));
		}
		gsave(&m, "g", &g);
		if (g.pending != md.pending) {
			ck_abort_msg("op %u: group pending %" PRIu64 ", model %" PRIu64, op,
				g.pending, md.pending);
		}
		if (op % 250 == 249) {
			r_check(&md, &g);
			commit();
			begin();
		}
	}
	gload(&m, "g", &g);
	r_check(&md, &g);
	printf("pel random: %u delivers, %u claims, %u forced, %u acks, %u misses, %u delconsumers,"
	       " %u releases; %" PRIu64 " pending\n",
		counts[0], counts[1], counts[2], counts[3], counts[4], counts[5], counts[6],
		md.pending);
	/* the mix did exercise every path */
	for (unsigned k = 0; k < 7; k++) {
		ck_assert_uint_gt(counts[k], 0);
	}
	commit();
}
END_TEST

static Suite *
pel_suite(void)
{
	Suite *s = suite_create("pel");
	TCase *tc;

	tc = tcase_create("deliver");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_pel_deliver);
	suite_add_tcase(s, tc);

	tc = tcase_create("put");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_pel_put);
	tcase_add_test(tc, test_pel_release);
	suite_add_tcase(s, tc);

	tc = tcase_create("remove");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_pel_remove);
	tcase_add_test(tc, test_pel_remove_run);
	tcase_add_test(tc, test_pel_deliver_new);
	suite_add_tcase(s, tc);

	tc = tcase_create("last");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_pel_last);
	suite_add_tcase(s, tc);

	tc = tcase_create("usage");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_group_usage);
	tcase_add_test(tc, test_group_copy);
	suite_add_tcase(s, tc);

	tc = tcase_create("iter");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_pel_iter);
	tcase_add_test(tc, test_pel_iter_mutation);
	suite_add_tcase(s, tc);

	tc = tcase_create("random");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 240);
	tcase_add_loop_test(tc, test_pel_random, 0, 2);
	suite_add_tcase(s, tc);
	return s;
}

/* ---- references to entries (deletion policies) -------------------------- */

/* Appends i-1 for i in [from, to] in nodes of at most 5 entries. */
static void
add_small_nodes(struct stream_meta *m, uint64_t from, uint64_t to)
{
	struct st_buf fv[2] = {B("f"), B("v")};

	for (uint64_t i = from; i <= to; i++) {
		struct stream_id id = ID(i, 1);
		OK(stream_append(tx, m, &id, fv, 2, 5, 4096));
	}
}

/* The live ids of m, as "a b c" (ms parts). */
static void
live_ids(const struct stream_meta *m, char *buf, size_t len)
{
	struct stream_iter *it;
	struct stream_id id;
	struct st_buf f;
	size_t n = 0;

	buf[0] = '\0';
	OK(stream_iter_create(tx, m, &ID_MIN, &ID_MAX, false, &it));
	while (stream_iter_next(it, &id, &f) == 0) {
		n += (size_t)snprintf(buf + n, len - n, "%s%" PRIu64, n ? " " : "", id.ms);
		ck_assert_uint_lt(n, len);
	}
	stream_iter_destroy(it);
}

static void
held(struct group_refs *r, uint64_t first, uint64_t last, bool want_held, bool want_stop)
{
	struct stream_id a = ID(first, 1), b = ID(last, 1);
	bool h, stop;

	OK(group_refs_held(r, &a, &b, &h, &stop));
	ck_assert_msg(h == want_held && stop == want_stop, "[%" PRIu64 ", %" PRIu64 "]: held %d stop %d",
		first, last, h, stop);
}

/* g1: cursor 6-1, 3-1 pending (c1); g2: cursor 4-1, 2-1 pending (c2). */
static void
refs_fixture(struct stream_meta *m, struct group_meta *g1, struct group_meta *g2)
{
	struct consumer_meta c1, c2;

	mkstream(0, "s", m);
	add_small_nodes(m, 1, 10);
	gcreate(m, "g1", ID(6, 1), 6, g1);
	gcreate(m, "g2", ID(4, 1), 4, g2);
	ccreate(g1, "c1", 1, &c1);
	ccreate(g2, "c2", 1, &c2);
	deliver(g1, &c1, 3, 1, 5);
	deliver(g2, &c2, 2, 1, 5);
	csave(g1, "c1", &c1);
	csave(g2, "c2", &c2);
	gsave(m, "g1", g1);
	gsave(m, "g2", g2);
	savestream(0, "s", m);
}

START_TEST(test_refs_held)
{
	struct stream_meta m, bare;
	struct group_meta g1, g2;
	struct group_refs *r;

	refs_fixture(&m, &g1, &g2);
	OK(group_refs_create(tx, &m, &r));
	held(r, 1, 1, false, false);
	held(r, 2, 2, true, false);  /* pending in g2 */
	held(r, 3, 3, true, false);  /* pending in g1 */
	held(r, 4, 4, false, false); /* delivered to both, pending in neither */
	held(r, 5, 5, true, true);   /* past g2's cursor: so is everything after */
	held(r, 1, 4, true, false);
	held(r, 4, 4, false, false);
	held(r, 4, 9, true, false);  /* runs past g2's cursor */
	group_refs_destroy(r);

	/* no groups: nothing is held */
	mkstream(0, "bare", &bare);
	add_small_nodes(&bare, 1, 3);
	OK(group_refs_create(tx, &bare, &r));
	held(r, 1, 3, false, false);
	group_refs_destroy(r);
	group_refs_destroy(NULL);
	commit();
}
END_TEST

START_TEST(test_refs_drop)
{
	struct stream_meta m;
	struct group_meta g1, g2;
	struct consumer_meta c;
	struct group_refs *r;
	struct pel_row row;
	uint64_t n = 99;

	refs_fixture(&m, &g1, &g2);
	/* 3-1 pending in g2 too, owned by another consumer there */
	ccreate(&g2, "c3", 1, &c);
	deliver(&g2, &c, 3, 1, 5);
	csave(&g2, "c3", &c);
	gsave(&m, "g2", &g2);

	OK(group_refs_create(tx, &m, &r));
	OK(group_refs_drop(r, &(struct stream_id){3, 1}, &n));
	U64_EQ(n, 2);
	OK(group_refs_drop(r, &(struct stream_id){7, 1}, &n)); /* pending nowhere */
	U64_EQ(n, 0);
	OK(group_refs_save(r));
	group_refs_destroy(r);

	gload(&m, "g1", &g1);
	gload(&m, "g2", &g2);
	U64_EQ(g1.pending, 0);
	U64_EQ(g2.pending, 1);
	FAILS(pel_get(tx, &g1, &(struct stream_id){3, 1}, &row), ECHD_ENOTFOUND);
	FAILS(pel_get(tx, &g2, &(struct stream_id){3, 1}, &row), ECHD_ENOTFOUND);
	OK(pel_get(tx, &g2, &(struct stream_id){2, 1}, &row));
	cload(&g1, "c1", &c);
	U64_EQ(c.pending, 0);
	cload(&g2, "c3", &c);
	U64_EQ(c.pending, 0);
	cload(&g2, "c2", &c);
	U64_EQ(c.pending, 1);
	/* the cursors are untouched */
	ID_EQ(g1.last_delivered, 6, 1);
	ID_EQ(g2.last_delivered, 4, 1);
	verify_group(&g1);
	verify_group(&g2);
	commit();
}
END_TEST

/* Trims m under policy through group_refs; returns the entries removed. */
static uint64_t
trim_refs(struct stream_meta *m, struct stream_trim *tr, enum stream_ref_policy policy)
{
	struct group_refs *r;
	struct stream_refs hooks;
	uint64_t removed;

	OK(group_refs_create(tx, m, &r));
	group_refs_trim(r, policy, &hooks);
	tr->refs = &hooks;
	OK(stream_trim(tx, m, tr, &removed));
	OK(group_refs_save(r));
	group_refs_destroy(r);
	tr->refs = NULL;
	return removed;
}

/* The lag counted from the rows matches a count of the live ids. */
static void
check_count_after(const struct stream_meta *m, uint64_t after_ms, uint64_t want)
{
	uint64_t n;

	OK(stream_count_after(tx, m, &(struct stream_id){after_ms, 1}, &n));
	U64_EQ(n, want);
}

START_TEST(test_refs_trim_acked)
{
	struct stream_meta m;
	struct group_meta g1, g2;
	struct stream_trim tr = {.strategy = STREAM_TRIM_MAXLEN, .maxlen = 0};
	char ids[256];

	refs_fixture(&m, &g1, &g2);
	U64_EQ(m.nodes, 2);
	/* exact: 1 and 4 go; 2 and 3 are held; 5 is past g2's cursor: stop */
	U64_EQ(trim_refs(&m, &tr, STREAM_REF_ACKED), 2);
	live_ids(&m, ids, sizeof(ids));
	ck_assert_str_eq(ids, "2 3 5 6 7 8 9 10");
	U64_EQ(m.length, 8);
	ID_EQ(m.first, 2, 1);
	check_count_after(&m, 4, 6);
	check_count_after(&m, 2, 7);
	/* nothing more can go */
	U64_EQ(trim_refs(&m, &tr, STREAM_REF_ACKED), 0);

	/* MINID: stops at the threshold as well */
	g2.last_delivered = ID(10, 1);
	gsave(&m, "g2", &g2);
	g1.last_delivered = ID(10, 1);
	gsave(&m, "g1", &g1);
	tr = (struct stream_trim){.strategy = STREAM_TRIM_MINID, .minid = ID(8, 0)};
	U64_EQ(trim_refs(&m, &tr, STREAM_REF_ACKED), 3); /* 5 6 7 */
	live_ids(&m, ids, sizeof(ids));
	ck_assert_str_eq(ids, "2 3 8 9 10");
	check_count_after(&m, 3, 3);
	U64_EQ(m.nodes, 2);

	/* ~ under ACKED as Redis: the first node (1..5) holds 2 and 3 and
	 * stays; the next one, which the target cuts through, is trimmed
	 * inside all the same */
	tr = (struct stream_trim){.strategy = STREAM_TRIM_MAXLEN, .approx = true, .limit = 500,
		.maxlen = 3};
	U64_EQ(trim_refs(&m, &tr, STREAM_REF_ACKED), 2); /* 8 9 */
	live_ids(&m, ids, sizeof(ids));
	ck_assert_str_eq(ids, "2 3 10");
	/* KEEPREF hooks never hold: the first node goes whole, ~ spares the next */
	tr.maxlen = 1;
	U64_EQ(trim_refs(&m, &tr, STREAM_REF_KEEP), 2);
	live_ids(&m, ids, sizeof(ids));
	ck_assert_str_eq(ids, "10");
	U64_EQ(m.nodes, 1);
	/* and the records stay */
	gload(&m, "g1", &g1);
	gload(&m, "g2", &g2);
	U64_EQ(g1.pending + g2.pending, 2);
	verify_group(&g1);
	verify_group(&g2);
	commit();
}
END_TEST

START_TEST(test_refs_trim_delref)
{
	struct stream_meta m;
	struct group_meta g1, g2;
	struct stream_trim tr = {.strategy = STREAM_TRIM_MAXLEN, .approx = true, .limit = 500,
		.maxlen = 4};
	char ids[256];

	refs_fixture(&m, &g1, &g2);
	/* ~ removes the node 1..5 whole, its entries' records with it, and
	 * (as Redis under DELREF) trims inside the next node to the target */
	U64_EQ(trim_refs(&m, &tr, STREAM_REF_DEL), 6);
	live_ids(&m, ids, sizeof(ids));
	ck_assert_str_eq(ids, "7 8 9 10");
	gload(&m, "g1", &g1);
	gload(&m, "g2", &g2);
	U64_EQ(g1.pending, 0);
	U64_EQ(g2.pending, 0);
	verify_group(&g1);
	verify_group(&g2);
	/* exact, inside a node */
	{
		struct consumer_meta c;
		cload(&g1, "c1", &c);
		deliver(&g1, &c, 7, 1, 9);
		deliver(&g1, &c, 9, 1, 9);
		csave(&g1, "c1", &c);
		gsave(&m, "g1", &g1);
	}
	tr = (struct stream_trim){.strategy = STREAM_TRIM_MINID, .minid = ID(9, 0)};
	U64_EQ(trim_refs(&m, &tr, STREAM_REF_DEL), 2);
	gload(&m, "g1", &g1);
	U64_EQ(g1.pending, 1); /* 9-1 stays */
	verify_group(&g1);
	check_count_after(&m, 0, 2);
	commit();
}
END_TEST

static Suite *
refs_suite(void)
{
	Suite *s = suite_create("refs");
	TCase *tc;

	tc = tcase_create("held_drop");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_refs_held);
	tcase_add_test(tc, test_refs_drop);
	suite_add_tcase(s, tc);

	tc = tcase_create("trim");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_refs_trim_acked);
	tcase_add_test(tc, test_refs_trim_delref);
	suite_add_tcase(s, tc);
	return s;
}

/* ---- persistence and scale -------------------------------------------- */

/* Everything of a stream's groups, as group_each/consumer_each/pel_iter
 * see it. */
struct snap {
	unsigned ngroups, ncons, nrows;
	struct {
		char name[8];
		struct group_meta g;
	} groups[4];
	struct {
		char name[8];
		struct consumer_meta c;
	} cons[16];
	struct pel_row rows[256];
};

static int
snap_cons_fn(const struct st_buf *name, const struct consumer_meta *c, void *ud)
{
	struct snap *s = ud;

	ck_assert_uint_lt(s->ncons, 16);
	ck_assert_uint_lt(name->len, 8);
	memcpy(s->cons[s->ncons].name, name->data, name->len);
	s->cons[s->ncons].c = *c;
	s->ncons++;
	return 0;
}

static int
snap_group_fn(const struct st_buf *name, const struct group_meta *g, void *ud)
{
	struct snap *s = ud;
	struct pel_iter *it;
	int rc;

	ck_assert_uint_lt(s->ngroups, 4);
	ck_assert_uint_lt(name->len, 8);
	memcpy(s->groups[s->ngroups].name, name->data, name->len);
	s->groups[s->ngroups].g = *g;
	s->ngroups++;
	OK(consumer_each(tx, g, snap_cons_fn, s));
	OK(pel_iter_create(tx, g, 0, &ID_MIN, &ID_MAX, &it));
	while ((rc = pel_iter_next(it, &s->rows[s->nrows])) == 0) {
		s->nrows++;
		ck_assert_uint_lt(s->nrows, 256);
	}
	pel_iter_destroy(it);
	FAILS(rc, ECHD_ENOTFOUND);
	return 0;
}

START_TEST(test_persist_reopen)
{
	struct stream_meta m, got;
	struct group_meta g1, g2;
	struct consumer_meta a, b;
	struct snap *before = calloc(1, sizeof(*before)), *after = calloc(1, sizeof(*after));
	struct st_buf sn = B("s");

	ck_assert_ptr_nonnull(before);
	ck_assert_ptr_nonnull(after);
	mkstream(0, "s", &m);
	add_range(&m, 1, 30);
	xdel(&m, 10, 1);
	gcreate(&m, "g1", ID(12, 1), 11, &g1);
	gcreate(&m, "g2", ID_MIN, UNK, &g2);
	ccreate(&g1, "a", 11, &a);
	ccreate(&g1, "b", 12, &b);
	for (uint64_t i = 1; i <= 30; i++) {
		deliver(&g1, i % 3 ? &a : &b, i, 1, 1000 + i);
	}
	csave(&g1, "a", &a);
	csave(&g1, "b", &b);
	OK(pel_remove(tx, &g1, &(struct stream_id){4, 1}));
	cload(&g1, "a", &a);
	a.active_time = 2000;
	csave(&g1, "a", &a);
	group_advance(&m, &g1, &(struct stream_id){13, 1}); /* A +1: 10-1 is behind */
	gsave(&m, "g1", &g1);
	ccreate(&g2, "z", 13, &a);
	deliver(&g2, &a, 30, 1, 9);
	csave(&g2, "z", &a);
	gsave(&m, "g2", &g2);
	savestream(0, "s", &m);
	OK(group_each(tx, &m, snap_group_fn, before));
	U64_EQ(before->ngroups, 2);
	U64_EQ(before->ncons, 3);
	U64_EQ(before->nrows, 30);
	I64_EQ(before->groups[0].g.entries_read, 12);
	U64_EQ(before->groups[0].g.pending, 29);

	reopen();
	OK(stream_lookup(tx, 0, &sn, &got));
	U64_EQ(got.groups, 2);
	OK(group_each(tx, &got, snap_group_fn, after));
	ck_assert_mem_eq(before, after, sizeof(*before));
	gload(&got, "g1", &g1);
	verify_group(&g1);
	gload(&got, "g2", &g2);
	verify_group(&g2);
	I64_EQ(g2.entries_read, UNK);
	cload(&g1, "a", &a);
	I64_EQ(a.active_time, 2000);
	U64_EQ(a.pending, 19);
	free(before);
	free(after);
	commit();
}
END_TEST

/* Aborted work leaves no trace. */
START_TEST(test_persist_abort)
{
	struct stream_meta m;
	struct group_meta g;
	struct consumer_meta a;
	struct st_buf gn = B("g"), an = B("a");

	mkstream(0, "s", &m);
	gcreate(&m, "g", ID_MIN, 0, &g);
	ccreate(&g, "a", 1, &a);
	deliver(&g, &a, 1, 0, 1);
	csave(&g, "a", &a);
	gsave(&m, "g", &g);
	savestream(0, "s", &m);
	commit();

	begin();
	deliver(&g, &a, 2, 0, 1);
	csave(&g, "a", &a);
	gsave(&m, "g", &g);
	OK(group_destroy(tx, &m, &gn));
	storage_txn_abort(tx);
	tx = NULL;
	begin();
	gload(&m, "g", &g);
	U64_EQ(g.pending, 1);
	OK(consumer_lookup(tx, &g, &an, &a));
	U64_EQ(a.pending, 1);
	U64_EQ(rows_all(STORAGE_T_TRASH), 0);
	verify_group(&g);
	commit();
}
END_TEST

#define BIG 100000

START_TEST(test_scale_big_pel)
{
	struct stream_meta m;
	struct group_meta g;
	struct consumer_meta c[4];
	struct stream_id mid = ID(BIG / 2, 0), last, missing = ID(BIG + 5, 0);
	struct pel_row r;
	double t0, t_fill, t_remove, t_last, t_miss;
	uint64_t n;

	mkstream(0, "s", &m);
	gcreate(&m, "g", ID_MIN, 0, &g);
	for (unsigned i = 0; i < 4; i++) {
		char name[8];

		r_name(i, name);
		ccreate(&g, name, 1, &c[i]);
	}
	t0 = now_ms();
	for (uint64_t i = 1; i <= BIG; i++) {
		struct stream_id id = ID(i, 0);
		int rc = pel_deliver(tx, &g, &c[i % 4], &id, i);
		if (rc != 0) {
			ck_abort_msg("pel_deliver %" PRIu64 ": %d (%s)", i, rc, echd_strerror(rc));
		}
	}
	t_fill = now_ms() - t0;
	for (unsigned i = 0; i < 4; i++) {
		char name[8];

		r_name(i, name);
		csave(&g, name, &c[i]);
	}
	gsave(&m, "g", &g);
	commit();

	begin();
	gload(&m, "g", &g);
	U64_EQ(g.pending, BIG);
	t0 = now_ms();
	OK(pel_remove(tx, &g, &mid));
	t_remove = now_ms() - t0;
	t0 = now_ms();
	OK(pel_last(tx, &g, &last));
	t_last = now_ms() - t0;
	t0 = now_ms();
	FAILS(pel_remove(tx, &g, &missing), ECHD_ENOTFOUND);
	t_miss = now_ms() - t0;
	ID_EQ(last, BIG, 0);
	U64_EQ(g.pending, BIG - 1);
	FAILS(pel_get(tx, &g, &mid, &r), ECHD_ENOTFOUND);
	OK(pel_get(tx, &g, &(struct stream_id){BIG / 2 + 1, 0}, &r));
	U64_EQ(r.cid, c[(BIG / 2 + 1) % 4].cid);
	cload(&g, "c0", &c[0]); /* BIG/2 is a multiple of 4: c0 had it */
	U64_EQ(c[0].pending, BIG / 4 - 1);
	OK(pel_remove(tx, &g, &last));
	OK(pel_last(tx, &g, &last));
	ID_EQ(last, BIG - 1, 0);
	n = rows_of(STORAGE_T_PEL, g.gid);
	U64_EQ(n, BIG - 2);
	U64_EQ(rows_of(STORAGE_T_CPEL, g.gid), BIG - 2);
	U64_EQ(rows_of2(STORAGE_T_CPEL, g.gid, c[0].cid), BIG / 4 - 2); /* c0 had BIG too */
	gsave(&m, "g", &g);
	commit();
	printf("big pel: %d deliveries %.1f ms; pel_remove %.3f ms, pel_last %.3f ms, missing "
	       "remove %.3f ms\n",
		BIG, t_fill, t_remove, t_last, t_miss);
	/* generous: these are single seeks, the fill took 100,000 */
	ck_assert_msg(
		t_remove < 1000 && t_last < 1000, "remove %.1f ms, last %.1f ms", t_remove, t_last);
}
END_TEST

static Suite *
persist_suite(void)
{
	Suite *s = suite_create("persist");
	TCase *tc;

	tc = tcase_create("reopen");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_persist_reopen);
	tcase_add_test(tc, test_persist_abort);
	suite_add_tcase(s, tc);

	tc = tcase_create("big_pel");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_scale_big_pel);
	suite_add_tcase(s, tc);
	return s;
}

/* ---- policies (XGROUP SETPOLICY) ----------------------------------------- */

/* A pointer to an id, for the calls that take one. */
static const struct stream_id *
pid(uint64_t ms, uint64_t seq)
{
	static struct stream_id ids[4];
	static unsigned n;
	struct stream_id *p = &ids[n++ % 4];

	*p = ID(ms, seq);
	return p;
}

/* A policy survives the record's round trip, a row without one (48 bytes,
 * as every row before policies, and the 9 of the released count) reads as
 * none, and group_copy() keeps it. */
START_TEST(test_policy_record)
{
	struct stream_meta m, m2;
	struct group_meta g, got;
	struct st_buf gn = B("g"), k2 = B("s2"), sn = B("s");
	unsigned char key[9], raw[48];
	struct st_buf kb = {key, 9}, v;

	mkstream(0, "s", &m);
	add_range(&m, 1, 3);
	gcreate(&m, "g", ID(0, 0), 0, &g);
	savestream(0, "s", &m);
	/* no policy: the record is the plain 48 bytes and the released count */
	st_put_u64(key, m.sid);
	key[8] = 'g';
	OK(storage_get(tx, STORAGE_T_GROUPS, &kb, &v));
	U64_EQ(v.len, 48 + 9);
	memcpy(raw, v.data, 48);
	gload(&m, "g", &got);
	ck_assert(!group_policy_active(&got.policy));

	g.policy.ack_wait = 5000;
	g.policy.max_deliver = 3;
	g.policy.max_ack_pending = 7;
	g.policy.dead_lettered = 2;
	g.policy.nbackoff = 3;
	g.policy.backoff[0] = 10;
	g.policy.backoff[1] = 20;
	g.policy.backoff[2] = 40;
	memcpy(g.policy.dl, "dead", 4);
	g.policy.dl_len = 4;
	gsave(&m, "g", &g);
	gload(&m, "g", &got);
	ck_assert(memcmp(&got, &g, sizeof(g)) == 0);
	ck_assert(group_policy_active(&got.policy) && group_policy_timed(&got.policy));

	/* an old row still reads */
	OK(storage_put(tx, STORAGE_T_GROUPS, &kb, &(struct st_buf){raw, 48}, 0));
	gload(&m, "g", &got);
	ck_assert(!group_policy_active(&got.policy));
	U64_EQ(got.policy.dead_lettered, 0);
	U64_EQ(got.gid, g.gid);
	/* a tail of an unknown version is corrupt, not silently dropped */
	{
		unsigned char bad[49];
		memcpy(bad, raw, 48);
		bad[48] = 9;
		OK(storage_put(tx, STORAGE_T_GROUPS, &kb, &(struct st_buf){bad, 49}, 0));
		FAILS(group_lookup(tx, &m, &gn, &got), ECHD_ECORRUPT);
	}
	gsave(&m, "g", &g);

	/* a copy keeps the policy under its new group id */
	OK(stream_copy(tx, 0, &sn, 0, &k2, &m2));
	OK(group_copy(tx, &m, &m2));
	gload(&m2, "g", &got);
	ck_assert(got.gid != g.gid);
	U64_EQ(got.policy.ack_wait, 5000);
	U64_EQ(got.policy.nbackoff, 3);
	U64_EQ(got.policy.backoff[2], 40);
	ck_assert(got.policy.dl_len == 4 && memcmp(got.policy.dl, "dead", 4) == 0);
	commit();
}
END_TEST

/* The released (nacked) count follows every move into and out of the
 * unowned state in the same transaction, survives the record's round
 * trip, and a record written before it was kept (no tail, or a policy
 * tail only) reads it from the PEL. */
START_TEST(test_nacked_count)
{
	struct stream_meta m;
	struct group_meta g, got;
	struct consumer_meta c;
	struct pel_row r;
	struct st_buf gn = B("g");
	unsigned char key[9], raw[1024];
	struct st_buf kb = {key, 9}, v;
	size_t len;

	mkstream(0, "s", &m);
	add_range(&m, 1, 5);
	gcreate(&m, "g", ID(0, 0), 0, &g);
	ccreate(&g, "c", 1, &c);
	for (uint64_t i = 1; i <= 5; i++) {
		deliver(&g, &c, i, 1, 10);
	}
	U64_EQ(g.nacked, 0);
	csave(&g, "c", &c); /* a release changes the stored record */
	/* released: 2 and 3, and 3 again (no change) */
	OK(pel_get(tx, &g, pid(2, 1), &r));
	OK(pel_release(tx, &g, &r, c.cid));
	OK(pel_get(tx, &g, pid(3, 1), &r));
	OK(pel_release(tx, &g, &r, c.cid));
	OK(pel_release(tx, &g, &r, PEL_UNOWNED));
	U64_EQ(g.nacked, 2);
	/* FORCE-made released row: a new one */
	OK(pel_remove(tx, &g, pid(5, 1)));
	r = (struct pel_row){.id = ID(5, 1), .cid = PEL_UNOWNED};
	OK(pel_release(tx, &g, &r, PEL_NEW));
	U64_EQ(g.nacked, 3);
	U64_EQ(g.pending, 5);
	/* taken by a consumer (a claim): one less; acknowledged: one less */
	cload(&g, "c", &c);
	OK(pel_get(tx, &g, pid(2, 1), &r));
	r.cid = c.cid;
	r.delivery_time = 20;
	OK(pel_put(tx, &g, &c, &r, PEL_UNOWNED));
	OK(pel_remove(tx, &g, pid(5, 1)));
	U64_EQ(g.nacked, 1);
	U64_EQ(g.pending, 4);
	csave(&g, "c", &c);
	gsave(&m, "g", &g);
	savestream(0, "s", &m);
	gload(&m, "g", &got);
	U64_EQ(got.nacked, 1);
	verify_group(&got);

	/* a record from before the count: read from the PEL (3-1 released) */
	st_put_u64(key, m.sid);
	key[8] = 'g';
	OK(storage_get(tx, STORAGE_T_GROUPS, &kb, &v));
	U64_EQ(v.len, 48 + 9);
	memcpy(raw, v.data, 48);
	OK(storage_put(tx, STORAGE_T_GROUPS, &kb, &(struct st_buf){raw, 48}, 0));
	OK(group_lookup(tx, &m, &gn, &got));
	U64_EQ(got.nacked, 1);
	U64_EQ(got.pending, 4);
	/* with a policy tail and no count */
	got.policy.ack_wait = 1000;
	gsave(&m, "g", &got);
	OK(storage_get(tx, STORAGE_T_GROUPS, &kb, &v));
	len = v.len - 9;
	memcpy(raw, v.data, len);
	OK(storage_put(tx, STORAGE_T_GROUPS, &kb, &(struct st_buf){raw, len}, 0));
	memset(&got, 0, sizeof(got));
	OK(group_lookup(tx, &m, &gn, &got));
	U64_EQ(got.nacked, 1);
	U64_EQ(got.policy.ack_wait, 1000);
	/* saved again, the count is stored (a stale one would show) */
	got.nacked = 7;
	gsave(&m, "g", &got);
	gload(&m, "g", &got);
	U64_EQ(got.nacked, 7);
	commit();
}
END_TEST

START_TEST(test_policy_wait_deadline)
{
	struct group_policy p;
	struct pel_row r = {.cid = 5, .delivery_time = 1000, .delivery_count = 1};

	memset(&p, 0, sizeof(p));
	U64_EQ(pel_deadline(&p, &r), UINT64_MAX); /* no ACKWAIT: never */
	p.ack_wait = 100;
	U64_EQ(group_policy_wait(&p, 1), 100);
	U64_EQ(pel_deadline(&p, &r), 1100);
	p.nbackoff = 2;
	p.backoff[0] = 10;
	p.backoff[1] = 30;
	/* BACKOFF wins over ACKWAIT; the last value repeats */
	U64_EQ(group_policy_wait(&p, 0), 10);
	U64_EQ(group_policy_wait(&p, 1), 10);
	U64_EQ(group_policy_wait(&p, 2), 30);
	U64_EQ(group_policy_wait(&p, 9), 30);
	r.delivery_count = 2;
	U64_EQ(pel_deadline(&p, &r), 1030);
	/* a released row is due at its delivery time (XNACK DELAY's end) */
	r.cid = PEL_UNOWNED;
	r.delivery_time = 0;
	U64_EQ(pel_deadline(&p, &r), 0);
	r.delivery_time = 777;
	U64_EQ(pel_deadline(&p, &r), 777);
	/* no overflow near the end of time */
	r.cid = 5;
	r.delivery_time = UINT64_MAX - 5;
	U64_EQ(pel_deadline(&p, &r), UINT64_MAX);
}
END_TEST

/* Sets g's policy to a timed one (ACKWAIT wait, MAXDELIVER maxd) and
 * writes its due rows, as SETPOLICY does. */
static void
set_timed(const struct stream_meta *m, struct group_meta *g, uint64_t wait, uint64_t maxd)
{
	g->policy.ack_wait = wait;
	g->policy.max_deliver = maxd;
	gsave(m, "g", g);
	OK(pel_due_rebuild(tx, g));
}

/* pel_due_collect(): due rows of a kind by deadline then id, up to a
 * limit, and the next deadline; found through the due rows, not the PEL. */
START_TEST(test_policy_collect_due)
{
	struct stream_meta m;
	struct group_meta g;
	struct consumer_meta a, b;
	struct pel_due d = {NULL, 0, 0, 0};
	struct pel_row r;

	mkstream(0, "s", &m);
	add_range(&m, 1, 5);
	gcreate(&m, "g", ID(0, 0), 0, &g);
	ccreate(&g, "a", 0, &a);
	ccreate(&g, "b", 0, &b);
	deliver(&g, &a, 1, 1, 1000); /* due 1100 */
	deliver(&g, &b, 2, 1, 900);  /* due 1000 */
	deliver(&g, &a, 3, 1, 1500); /* due 1600 */
	deliver(&g, &b, 4, 1, 900);  /* due 1000 */
	csave(&g, "a", &a);
	csave(&g, "b", &b);
	/* no timed policy: no due rows, nothing collected, nothing next */
	U64_EQ(rows_of(STORAGE_T_DUE, g.gid), 0);
	OK(pel_due_collect(tx, &g, PEL_DUE_REDELIVER, 5000, 0, &d));
	U64_EQ(d.n, 0);
	U64_EQ(d.next, UINT64_MAX);
	set_timed(&m, &g, 100, 0);
	U64_EQ(rows_of(STORAGE_T_DUE, g.gid), 4);
	verify_group(&g);
	OK(pel_due_collect(tx, &g, PEL_DUE_REDELIVER, 999, 0, &d));
	U64_EQ(d.n, 0);
	U64_EQ(d.next, 1000);
	OK(pel_due_collect(tx, &g, PEL_DUE_REDELIVER, 1100, 0, &d));
	U64_EQ(d.n, 3);
	ID_EQ(d.rows[0].row.id, 2, 1);
	ID_EQ(d.rows[1].row.id, 4, 1);
	ID_EQ(d.rows[2].row.id, 1, 1);
	U64_EQ(d.rows[0].at, 1000);
	U64_EQ(d.next, 1600);
	/* a limit: the first ones, and next says more are due */
	OK(pel_due_collect(tx, &g, PEL_DUE_REDELIVER, 1100, 2, &d));
	U64_EQ(d.n, 2);
	ID_EQ(d.rows[1].row.id, 4, 1);
	U64_EQ(d.next, 1100);
	/* nothing is spent without MAXDELIVER */
	OK(pel_due_collect(tx, &g, PEL_DUE_DEAD, 5000, 0, &d));
	U64_EQ(d.n, 0);
	/* a row released with a delay is due at the delay's end */
	OK(pel_get(tx, &g, pid(3, 1), &r));
	OK(pel_release_until(tx, &g, &r, a.cid, 1200));
	cload(&g, "a", &a);
	OK(pel_due_collect(tx, &g, PEL_DUE_REDELIVER, 1100, 0, &d));
	U64_EQ(d.n, 3);
	U64_EQ(d.next, 1200);
	OK(pel_due_collect(tx, &g, PEL_DUE_REDELIVER, 1200, 0, &d));
	U64_EQ(d.n, 4);
	ID_EQ(d.rows[3].row.id, 3, 1);
	U64_EQ(d.rows[3].row.cid, PEL_UNOWNED);
	/* a redelivery moves its due row: due again a wait after it */
	r = d.rows[0].row; /* 2-1 of b */
	r.delivery_time = 2000;
	r.delivery_count = 2;
	OK(pel_put(tx, &g, &b, &r, b.cid));
	OK(pel_due_collect(tx, &g, PEL_DUE_REDELIVER, 1200, 0, &d));
	U64_EQ(d.n, 3);
	verify_group(&g);
	/* MAXDELIVER 2: 2-1 (delivered twice) is dead-lettered at its deadline */
	set_timed(&m, &g, 100, 2);
	OK(pel_due_collect(tx, &g, PEL_DUE_REDELIVER, 5000, 0, &d));
	U64_EQ(d.n, 3); /* 2-1 is of the other kind now */
	OK(pel_due_collect(tx, &g, PEL_DUE_DEAD, 2099, 0, &d));
	U64_EQ(d.n, 0);
	U64_EQ(d.next, 2100);
	OK(pel_due_collect(tx, &g, PEL_DUE_DEAD, 2100, 0, &d));
	U64_EQ(d.n, 1);
	ID_EQ(d.rows[0].row.id, 2, 1);
	verify_group(&g);
	/* acks and a deleted consumer take their due rows along */
	OK(pel_remove(tx, &g, pid(1, 1)));
	verify_group(&g);
	{
		uint64_t n;
		cload(&g, "b", &b);
		OK(consumer_delete(tx, &g, &(struct st_buf){"b", 1}, &n));
		U64_EQ(n, 2);
	}
	verify_group(&g);
	U64_EQ(rows_of(STORAGE_T_DUE, g.gid), 1); /* 3-1, released */
	/* no timed policy any more: none left */
	set_timed(&m, &g, 0, 0);
	U64_EQ(rows_of(STORAGE_T_DUE, g.gid), 0);
	pel_due_finish(&d);
	commit();
}
END_TEST

/* A due row that names a row no longer there (or no longer due then) is
 * dropped by the collection that meets it, not returned; pel_due_any()
 * and pel_due_rebuild() write what an older PEL lacks. */
START_TEST(test_policy_due_stale)
{
	struct stream_meta m;
	struct group_meta g;
	struct consumer_meta a;
	struct pel_due d = {NULL, 0, 0, 0};
	unsigned char k[33];
	struct st_buf kb = {k, 33}, empty = {"", 0};
	bool any = true;

	mkstream(0, "s", &m);
	add_range(&m, 1, 3);
	gcreate(&m, "g", ID(0, 0), 0, &g);
	ccreate(&g, "a", 0, &a);
	deliver(&g, &a, 1, 1, 1000);
	deliver(&g, &a, 2, 1, 1000);
	csave(&g, "a", &a);
	/* a policy set behind the model's back (an echd before due rows) */
	g.policy.ack_wait = 100;
	gsave(&m, "g", &g);
	OK(pel_due_any(tx, &g, &any));
	ck_assert(!any);
	OK(pel_due_rebuild(tx, &g));
	OK(pel_due_any(tx, &g, &any));
	ck_assert(any);
	verify_group(&g);
	/* stale rows: one for an id not pending, one at a wrong time */
	st_put_u64(k, g.gid);
	k[8] = PEL_DUE_REDELIVER;
	st_put_u64(k + 9, 1050);
	st_put_id(k + 17, pid(3, 1));
	OK(storage_put(tx, STORAGE_T_DUE, &kb, &empty, 0));
	st_put_id(k + 17, pid(1, 1));
	OK(storage_put(tx, STORAGE_T_DUE, &kb, &empty, 0));
	U64_EQ(rows_of(STORAGE_T_DUE, g.gid), 4);
	OK(pel_due_collect(tx, &g, PEL_DUE_REDELIVER, 1100, 0, &d));
	U64_EQ(d.n, 2);
	ID_EQ(d.rows[0].row.id, 1, 1);
	ID_EQ(d.rows[1].row.id, 2, 1);
	verify_group(&g);
	pel_due_finish(&d);
	commit();
}
END_TEST

/* Due rows follow their group: a copy has them under its id, and a
 * destroyed group's go with its other rows. */
START_TEST(test_policy_due_copy_gc)
{
	struct stream_meta m, m2;
	struct group_meta g, g2;
	struct st_buf sn = B("s"), k2 = B("s2"), gn = B("g");

	mkstream(0, "s", &m);
	add_range(&m, 1, 50);
	populate(&m, "g", 3, 40, &g);
	set_timed(&m, &g, 100, 0);
	savestream(0, "s", &m);
	U64_EQ(rows_of(STORAGE_T_DUE, g.gid), 40);
	OK(stream_copy(tx, 0, &sn, 0, &k2, &m2));
	OK(group_copy(tx, &m, &m2));
	gload(&m2, "g", &g2);
	U64_EQ(rows_of(STORAGE_T_DUE, g2.gid), 40);
	verify_group(&g2);
	OK(group_destroy(tx, &m, &gn));
	gc_all(7);
	U64_EQ(group_rows(g.gid), 0);
	U64_EQ(rows_of(STORAGE_T_DUE, g2.gid), 40);
	commit();
}
END_TEST

/* pel_dead_letter(): the record, the ack and the count together. */
START_TEST(test_policy_dead_letter)
{
	struct stream_meta m, dm;
	struct group_meta g;
	struct consumer_meta a;
	struct st_buf key = B("s"), gname = B("g"), dk = B("dlq"), fields, f, v;
	struct dead_letter d = {0, &key, &gname, "maxdeliver", 5000, 100, 4096};
	struct pel_row r;
	struct stream_iter *it;
	struct stream_id id;
	size_t pos = 0;
	const char *want[] = {"stream", "s", "id", "2-1", "group", "g", "consumer", "a",
		"deliveries", "3", "reason", "maxdeliver", "f", "v"};

	mkstream(0, "s", &m);
	add_range(&m, 1, 3);
	gcreate(&m, "g", ID(0, 0), 0, &g);
	ccreate(&g, "a", 0, &a);
	deliver(&g, &a, 1, 1, 100);
	deliver(&g, &a, 2, 1, 100);
	csave(&g, "a", &a);
	memcpy(g.policy.dl, "dlq", 3);
	g.policy.dl_len = 3;
	OK(pel_get(tx, &g, pid(2, 1), &r));
	r.delivery_count = 3;
	OK(pel_dead_letter(tx, &m, &g, &r, &d));
	U64_EQ(g.pending, 1);
	U64_EQ(g.policy.dead_lettered, 1);
	FAILS(pel_get(tx, &g, pid(2, 1), &r), ECHD_ENOTFOUND);
	cload(&g, "a", &a);
	U64_EQ(a.pending, 1);
	OK(stream_lookup(tx, 0, &dk, &dm));
	U64_EQ(dm.length, 1);
	OK(stream_iter_create(tx, &dm, &ID_MIN, &ID_MAX, false, &it));
	OK(stream_iter_next(it, &id, &fields));
	ID_EQ(id, 5000, 0);
	for (size_t i = 0; i < sizeof(want) / sizeof(*want); i += 2) {
		ck_assert(stream_fields_next(&fields, &pos, &f, &v));
		ck_assert(f.len == strlen(want[i]) && memcmp(f.data, want[i], f.len) == 0);
		ck_assert_msg(v.len == strlen(want[i + 1]) && memcmp(v.data, want[i + 1], v.len) == 0,
			"field %s", want[i]);
	}
	ck_assert(!stream_fields_next(&fields, &pos, &f, &v));
	stream_iter_destroy(it);

	/* a deleted entry: the head only; the clock behind the last id: after it */
	xdel(&m, 1, 1);
	OK(pel_get(tx, &g, pid(1, 1), &r));
	d.now = 10;
	d.reason = "fatal";
	OK(pel_dead_letter(tx, &m, &g, &r, &d));
	OK(stream_lookup(tx, 0, &dk, &dm));
	U64_EQ(dm.length, 2);
	ID_EQ(dm.last, 5000, 1);
	OK(stream_get_entry(tx, &dm, pid(5000, 1), &fields));
	U64_EQ(stream_fields_count(&fields), 6);
	U64_EQ(g.pending, 0);
	U64_EQ(g.policy.dead_lettered, 2);

	/* without DEADLETTER: only acknowledged and counted */
	deliver(&g, &a, 3, 1, 100);
	csave(&g, "a", &a);
	g.policy.dl_len = 0;
	OK(pel_get(tx, &g, pid(3, 1), &r));
	OK(pel_dead_letter(tx, &m, &g, &r, &d));
	U64_EQ(g.pending, 0);
	U64_EQ(g.policy.dead_lettered, 3);
	OK(stream_lookup(tx, 0, &dk, &dm));
	U64_EQ(dm.length, 2);
	commit();
}
END_TEST

struct pol_seen {
	unsigned n, db;
	char key[16], group[16];
};

static int
pol_cb(unsigned db, const struct st_buf *key, const struct st_buf *name,
	const struct group_meta *g, void *ud)
{
	struct pol_seen *s = ud;

	(void)g;
	s->n++;
	s->db = db;
	snprintf(s->key, sizeof(s->key), "%.*s", (int)key->len, (const char *)key->data);
	snprintf(s->group, sizeof(s->group), "%.*s", (int)name->len, (const char *)name->data);
	return 0;
}

/* group_policy_each() finds the groups with a policy, with their key. */
START_TEST(test_policy_each)
{
	struct stream_meta m, m3;
	struct group_meta g;
	struct pol_seen s = {0};

	mkstream(0, "a", &m);
	gcreate(&m, "plain", ID(0, 0), 0, &g);
	savestream(0, "a", &m);
	mkstream(3, "b", &m3);
	gcreate(&m3, "pol", ID(0, 0), 0, &g);
	g.policy.max_ack_pending = 4;
	gsave(&m3, "pol", &g);
	savestream(3, "b", &m3);
	OK(group_policy_each(tx, 16, pol_cb, &s));
	U64_EQ(s.n, 1);
	U64_EQ(s.db, 3);
	ck_assert_str_eq(s.key, "b");
	ck_assert_str_eq(s.group, "pol");
	commit();
}
END_TEST

static Suite *
policy_suite(void)
{
	Suite *s = suite_create("policy");
	TCase *tc = tcase_create("policy");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_policy_record);
	tcase_add_test(tc, test_nacked_count);
	tcase_add_test(tc, test_policy_wait_deadline);
	tcase_add_test(tc, test_policy_collect_due);
	tcase_add_test(tc, test_policy_due_stale);
	tcase_add_test(tc, test_policy_due_copy_gc);
	tcase_add_test(tc, test_policy_dead_letter);
	tcase_add_test(tc, test_policy_each);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr;

	if (fixture_init("group", NULL, 64 * MIB) != 0) {
		return 1;
	}
	sr = srunner_create(groups_suite());
	srunner_add_suite(sr, cursor_suite());
	srunner_add_suite(sr, consumers_suite());
	srunner_add_suite(sr, pel_suite());
	srunner_add_suite(sr, persist_suite());
	srunner_add_suite(sr, refs_suite());
	srunner_add_suite(sr, policy_suite());
	return fixture_run(sr);
}
