/* test_stream.c - the stream data model (storage/model/stream.c) over LMDB.
 *
 * Expected node counts and trimming results were taken from Redis
 * (redis-server 7.0.15, whose stream node layout and trimming match
 * 7.4's): see the comments at each table for the commands used.
 */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "echd.h"
#include "storage.h"
#include "stream.h"
#include "stream_impl.h" /* the trash row layout */
#include "unit_storage.h"

/* stream-node-max-entries / -bytes for add(); setup() resets them. */
static uint64_t node_entries, node_bytes;
/* Names visited by stream_scan, with how often. */
struct visits {
	char names[64][512];
	size_t lens[64];
	unsigned counts[64];
	unsigned n;
	unsigned this_call;
};

/* What the scan tests saw; setup() clears it. */
static struct visits seen;

/* ---- fixture (the rest is in unit_storage.h) ---------------------------- */

static void
setup(void)
{
	node_entries = 100;
	node_bytes = 4096;
	memset(&seen, 0, sizeof(seen));
	fixture_open();
	begin();
}

/* ---- helpers ------------------------------------------------------------ */

static void
create(unsigned db, const char *name, struct stream_meta *m)
{
	struct st_buf n = B(name);

	OK(stream_create(tx, db, &n, m));
}

static void
save(unsigned db, const char *name, const struct stream_meta *m)
{
	struct st_buf n = B(name);

	OK(stream_meta_save(tx, db, &n, m));
}

static int
lookup(unsigned db, const char *name, struct stream_meta *m)
{
	struct st_buf n = B(name);

	return stream_lookup(tx, db, &n, m);
}

static uint64_t
db_size(unsigned db)
{
	uint64_t n = 12345;

	OK(stream_db_size(tx, db, &n));
	return n;
}

/* Appends ms-seq with fields fv under the current node limits. */
static void
add_fv(struct stream_meta *m, uint64_t ms, uint64_t seq, const struct st_buf *fv, size_t nfv)
{
	struct stream_id id = ID(ms, seq);

	OK(stream_append(tx, m, &id, fv, nfv, node_entries, node_bytes));
}

/* Appends ms-seq with the single pair "f" = val. */
static void
add(struct stream_meta *m, uint64_t ms, uint64_t seq, const char *val)
{
	struct st_buf fv[2] = {B("f"), B(val)};

	add_fv(m, ms, seq, fv, 2);
}

/* Appends i-1 for i in [from, to], value "v<i>". */
static void
add_range(struct stream_meta *m, uint64_t from, uint64_t to)
{
	char val[32];

	for (uint64_t i = from; i <= to; i++) {
		snprintf(val, sizeof(val), "v%" PRIu64, i);
		add(m, i, 1, val);
	}
}

/* Appends n entries whose value is len bytes of 'x', ids 1-0, 2-0, ... */
static void
add_sized(struct stream_meta *m, unsigned n, size_t len)
{
	char *v = malloc(len + 1);

	ck_assert_ptr_nonnull(v);
	memset(v, 'x', len);
	v[len] = '\0';
	for (unsigned i = 1; i <= n; i++) {
		add(m, m->last.ms + 1, 0, v);
	}
	free(v);
}

/* Rows of table tb whose key starts with the 8-byte sid. */
static uint64_t
rows_of(enum storage_table tb, uint64_t sid)
{
	unsigned char k[8];
	struct st_buf seek = {k, 8}, key, val;
	struct storage_cursor *c;
	uint64_t n = 0;
	int rc;

	st_put_u64(k, sid);
	OK(storage_cursor_open(tx, tb, &c));
	rc = storage_cursor_seek(c, &seek, &key, &val);
	while (rc == 0 && key.len >= 8 && memcmp(key.data, k, 8) == 0) {
		n++;
		rc = storage_cursor_next(c, &key, &val);
	}
	storage_cursor_close(c);
	ck_assert_msg(rc == 0 || rc == ECHD_ENOTFOUND, "cursor: %d", rc);
	return n;
}

static uint64_t
rows_all(enum storage_table tb)
{
	return table_rows(tb, NULL);
}

static bool
in_trash(uint64_t sid)
{
	unsigned char k[9];
	struct st_buf kb = {k, 9}, v;
	int rc;

	k[0] = ST_TRASH_STREAM;
	st_put_u64(k + 1, sid);
	rc = storage_get(tx, STORAGE_T_TRASH, &kb, &v);
	ck_assert_msg(rc == 0 || rc == ECHD_ENOTFOUND, "trash get: %d", rc);
	return rc == 0;
}

/* Checks the metadata against the rows: entry rows == length, node rows
 * == nodes, the node rows' live counters (first 8 bytes of the value, see
 * stream.c) add up to length, tail_node is the last node row, first is
 * the first entry row. */
static void
check_rows(const struct stream_meta *m)
{
	unsigned char k[8];
	struct st_buf seek = {k, 8}, key, val;
	struct storage_cursor *c;
	uint64_t nodes = 0, live = 0;
	struct stream_id last_node = {0, 0}, first = {0, 0};
	int rc;

	st_put_u64(k, m->sid);
	OK(storage_cursor_open(tx, STORAGE_T_NODES, &c));
	rc = storage_cursor_seek(c, &seek, &key, &val);
	while (rc == 0 && key.len >= 8 && memcmp(key.data, k, 8) == 0) {
		ck_assert_uint_eq(key.len, 24);
		ck_assert_uint_ge(val.len, 8);
		nodes++;
		live += st_get_u64(val.data);
		last_node.ms = st_get_u64((const unsigned char *)key.data + 8);
		last_node.seq = st_get_u64((const unsigned char *)key.data + 16);
		rc = storage_cursor_next(c, &key, &val);
	}
	storage_cursor_close(c);

	OK(storage_cursor_open(tx, STORAGE_T_ENTRIES, &c));
	rc = storage_cursor_seek(c, &seek, &key, &val);
	if (rc == 0 && key.len == 24 && memcmp(key.data, k, 8) == 0) {
		first.ms = st_get_u64((const unsigned char *)key.data + 8);
		first.seq = st_get_u64((const unsigned char *)key.data + 16);
	}
	storage_cursor_close(c);

	U64_EQ(rows_of(STORAGE_T_ENTRIES, m->sid), m->length);
	U64_EQ(nodes, m->nodes);
	U64_EQ(live, m->length);
	ID_EQ(m->tail_node, last_node.ms, last_node.seq);
	ID_EQ(m->first, first.ms, first.seq);
}

static void
meta_eq(const struct stream_meta *a, const struct stream_meta *b)
{
	U64_EQ(a->sid, b->sid);
	U64_EQ(a->length, b->length);
	ID_EQ(a->first, b->first.ms, b->first.seq);
	ID_EQ(a->last, b->last.ms, b->last.seq);
	ID_EQ(a->max_deleted, b->max_deleted.ms, b->max_deleted.seq);
	U64_EQ(a->entries_added, b->entries_added);
	U64_EQ(a->nodes, b->nodes);
	ID_EQ(a->tail_node, b->tail_node.ms, b->tail_node.seq);
	U64_EQ(a->groups, b->groups);
	U64_EQ(a->expire_ms, b->expire_ms);
}

/* Iterates [start, end] and stores the ids (up to cap); returns the count.
 * Walks read ahead 0, 3, 6 or 9 entries in turn: a hint changes no answer. */
static size_t
iter_ids(const struct stream_meta *m, struct stream_id start, struct stream_id end, bool rev,
	struct stream_id *out, size_t cap)
{
	static unsigned walks;
	struct stream_iter *it;
	struct stream_id id;
	struct st_buf f;
	size_t n = 0;
	int rc;

	OK(stream_iter_create(tx, m, &start, &end, rev, &it));
	stream_iter_ahead(it, walks++ % 4 * 3);
	while ((rc = stream_iter_next(it, &id, &f)) == 0) {
		if (n < cap) {
			out[n] = id;
		}
		n++;
	}
	FAILS(rc, ECHD_ENOTFOUND);
	/* the end is sticky */
	FAILS(stream_iter_next(it, &id, &f), ECHD_ENOTFOUND);
	stream_iter_destroy(it);
	return n;
}

/* ---- ids ---------------------------------------------------------------- */

static int
parse(const char *s, uint64_t missing_seq, bool minmax, struct stream_id *out)
{
	return stream_id_parse(s, strlen(s), missing_seq, minmax, out);
}

START_TEST(test_id_parse_ms)
{
	struct stream_id id;

	OK(parse("0", 0, false, &id));
	ID_EQ(id, 0, 0);
	OK(parse("12345", 7, false, &id));
	ID_EQ(id, 12345, 7);
	OK(parse("5", UINT64_MAX, false, &id));
	ID_EQ(id, 5, UINT64_MAX);
	OK(parse("18446744073709551615", 0, false, &id));
	ID_EQ(id, UINT64_MAX, 0);
}
END_TEST

START_TEST(test_id_parse_ms_seq)
{
	struct stream_id id;

	OK(parse("1-2", 99, false, &id));
	ID_EQ(id, 1, 2);
	OK(parse("0-0", 99, false, &id));
	ID_EQ(id, 0, 0);
	OK(parse("18446744073709551615-18446744073709551615", 0, false, &id));
	ID_EQ(id, UINT64_MAX, UINT64_MAX);
	/* only len bytes are read */
	OK(stream_id_parse("7-89junk", 3, 0, false, &id));
	ID_EQ(id, 7, 8);
}
END_TEST

START_TEST(test_id_parse_minmax)
{
	struct stream_id id = {3, 3};

	OK(parse("-", 5, true, &id));
	ID_EQ(id, 0, 0);
	OK(parse("+", 5, true, &id));
	ID_EQ(id, UINT64_MAX, UINT64_MAX);

	id = ID(3, 3);
	FAILS(parse("-", 0, false, &id), ECHD_EINVAL);
	FAILS(parse("+", 0, false, &id), ECHD_EINVAL);
	ID_EQ(id, 3, 3); /* untouched on failure */
	FAILS(parse("--", 0, true, &id), ECHD_EINVAL);
	FAILS(parse("-+", 0, true, &id), ECHD_EINVAL);
	FAILS(parse("+-", 0, true, &id), ECHD_EINVAL);
	ID_EQ(id, 3, 3);
	/* "+1" is not "+": a number with its sign, as strtoull reads it */
	OK(parse("+1", 0, true, &id));
	ID_EQ(id, 1, 0);
}
END_TEST

START_TEST(test_id_parse_overflow)
{
	struct stream_id id = {3, 3};

	FAILS(parse("18446744073709551616", 0, false, &id), ECHD_EINVAL);
	FAILS(parse("18446744073709551616-0", 0, false, &id), ECHD_EINVAL);
	FAILS(parse("0-18446744073709551616", 0, false, &id), ECHD_EINVAL);
	FAILS(parse("99999999999999999999", 0, false, &id), ECHD_EINVAL);
	FAILS(parse("-18446744073709551616", 0, false, &id), ECHD_EINVAL);
	FAILS(parse("1- -18446744073709551616", 0, false, &id), ECHD_EINVAL);
	ID_EQ(id, 3, 3);
	/* leading zeros are fine, however many, up to the text limit */
	OK(parse("000000000000000000001", 0, false, &id));
	ID_EQ(id, 1, 0);
	{
		char buf[STREAM_ID_MAX_TEXT + 2];
		memset(buf, '0', sizeof(buf));
		buf[STREAM_ID_MAX_TEXT - 1] = '7';
		OK(stream_id_parse(buf, STREAM_ID_MAX_TEXT, 0, false, &id));
		ID_EQ(id, 7, 0);
		buf[STREAM_ID_MAX_TEXT] = '7';
		FAILS(stream_id_parse(buf, STREAM_ID_MAX_TEXT + 1, 0, false, &id), ECHD_EINVAL);
		ID_EQ(id, 7, 0);
	}
}
END_TEST

START_TEST(test_id_parse_garbage)
{
	static const char *const bad[] = {"", "1-", "-1", "-", "1--2", "1-2-3", "a", "1a", "1-a",
		"1 ", "1.5", "0x10", "-0", "1-2 ", " ", "+", "1-+", " -", "1- ", "++1", "+-1",
		"- 1", "1-*"};
	struct stream_id id = {3, 3};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = parse(bad[i], 0, false, &id);
		ck_assert_msg(rc == ECHD_EINVAL, "'%s' parsed: %d", bad[i], rc);
	}
	/* "-1" and "1-" stay invalid with minmax allowed */
	FAILS(parse("-1", 0, true, &id), ECHD_EINVAL);
	FAILS(parse("1-", 0, true, &id), ECHD_EINVAL);
	FAILS(stream_id_parse("", 0, 0, true, &id), ECHD_EINVAL);
	FAILS(stream_id_parse("\0001", 2, 0, true, &id), ECHD_EINVAL);
	ID_EQ(id, 3, 3);
}
END_TEST

/* What Redis' string2ull takes besides plain digits, half by half. */
START_TEST(test_id_parse_lenient)
{
	static const struct {
		const char *s;
		uint64_t ms, seq;
	} ok[] = {
		{" 1", 1, 9},
		{"\t\n\v\f\r 12", 12, 9},
		{"+1", 1, 9},
		{"1-+2", 1, 2},
		{"1- 2", 1, 2},
		{" +5- +6", 5, 6},
		{"1- -1", 1, UINT64_MAX},
		{"1- -18446744073709551615", 1, 1},
		{"0-00", 0, 0},
		{"007-008", 7, 8},
	};
	struct stream_id id;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		int rc = parse(ok[i].s, 9, false, &id);
		ck_assert_msg(rc == 0, "'%s' refused: %d", ok[i].s, rc);
		ck_assert_msg(id.ms == ok[i].ms && id.seq == ok[i].seq, "'%s' read as %llu-%llu",
			ok[i].s, (unsigned long long)id.ms, (unsigned long long)id.seq);
	}
	/* the text ends at a NUL, as a C string does */
	OK(stream_id_parse("1\0002", 3, 0, false, &id));
	ID_EQ(id, 1, 0);
	OK(stream_id_parse("4-5\000-6", 6, 0, false, &id));
	ID_EQ(id, 4, 5);
	OK(stream_id_parse("-\000x", 3, 0, true, &id));
	ID_EQ(id, 0, 0);
}
END_TEST

START_TEST(test_id_format)
{
	static const struct {
		uint64_t ms, seq;
		const char *want;
	} cases[] = {
		{0, 0, "0-0"},
		{1, 2, "1-2"},
		{1234567890123, 10, "1234567890123-10"},
		{UINT64_MAX, UINT64_MAX, "18446744073709551615-18446744073709551615"},
		{UINT64_MAX, 0, "18446744073709551615-0"},
	};
	char buf[42];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct stream_id id = ID(cases[i].ms, cases[i].seq), back;
		size_t n;

		memset(buf, '#', sizeof(buf));
		n = stream_id_format(&id, buf);
		ck_assert_uint_eq(n, strlen(cases[i].want));
		ck_assert_str_eq(buf, cases[i].want); /* NUL-terminated */
		OK(stream_id_parse(buf, n, 0, false, &back));
		ck_assert_int_eq(stream_id_cmp(&id, &back), 0);
	}
}
END_TEST

START_TEST(test_id_cmp)
{
	struct stream_id a = {1, 5}, b = {2, 0}, c = {1, 6}, d = {1, 5};

	ck_assert_int_lt(stream_id_cmp(&a, &b), 0);
	ck_assert_int_gt(stream_id_cmp(&b, &a), 0);
	ck_assert_int_lt(stream_id_cmp(&a, &c), 0);
	ck_assert_int_eq(stream_id_cmp(&a, &d), 0);
}
END_TEST

START_TEST(test_id_incr)
{
	struct stream_id id = {5, 7};

	ck_assert(stream_id_incr(&id));
	ID_EQ(id, 5, 8);
	id = ID(5, UINT64_MAX);
	ck_assert(stream_id_incr(&id));
	ID_EQ(id, 6, 0);
	id = ID(UINT64_MAX, UINT64_MAX - 1);
	ck_assert(stream_id_incr(&id));
	ID_EQ(id, UINT64_MAX, UINT64_MAX);
	ck_assert(!stream_id_incr(&id));
	ID_EQ(id, UINT64_MAX, UINT64_MAX);
}
END_TEST

START_TEST(test_id_decr)
{
	struct stream_id id = {5, 7};

	ck_assert(stream_id_decr(&id));
	ID_EQ(id, 5, 6);
	id = ID(5, 0);
	ck_assert(stream_id_decr(&id));
	ID_EQ(id, 4, UINT64_MAX);
	id = ID(0, 1);
	ck_assert(stream_id_decr(&id));
	ID_EQ(id, 0, 0);
	ck_assert(!stream_id_decr(&id));
	ID_EQ(id, 0, 0);
}
END_TEST

static Suite *
ids_suite(void)
{
	Suite *s = suite_create("ids");
	TCase *tc;

	tc = tcase_create("parse");
	tcase_add_test(tc, test_id_parse_ms);
	tcase_add_test(tc, test_id_parse_ms_seq);
	tcase_add_test(tc, test_id_parse_minmax);
	tcase_add_test(tc, test_id_parse_overflow);
	tcase_add_test(tc, test_id_parse_garbage);
	tcase_add_test(tc, test_id_parse_lenient);
	suite_add_tcase(s, tc);

	tc = tcase_create("format");
	tcase_add_test(tc, test_id_format);
	suite_add_tcase(s, tc);

	tc = tcase_create("cmp");
	tcase_add_test(tc, test_id_cmp);
	suite_add_tcase(s, tc);

	tc = tcase_create("incr_decr");
	tcase_add_test(tc, test_id_incr);
	tcase_add_test(tc, test_id_decr);
	suite_add_tcase(s, tc);
	return s;
}

/* ---- keys --------------------------------------------------------------- */

static int
collect_cb(const struct st_buf *name, void *ud)
{
	struct visits *v = ud;
	unsigned i;

	ck_assert_uint_le(name->len, sizeof(v->names[0]));
	for (i = 0; i < v->n; i++) {
		if (buf_eq(name, v->names[i], v->lens[i])) {
			break;
		}
	}
	if (i == v->n) {
		ck_assert_uint_lt(v->n, 64);
		memcpy(v->names[i], name->data, name->len);
		v->lens[i] = name->len;
		v->counts[i] = 0;
		v->n++;
	}
	v->counts[i]++;
	v->this_call++;
	return 0;
}

static unsigned
visited(const struct visits *v, const char *name)
{
	for (unsigned i = 0; i < v->n; i++) {
		if (v->lens[i] == strlen(name) && memcmp(v->names[i], name, v->lens[i]) == 0) {
			return v->counts[i];
		}
	}
	return 0;
}

/* Scans all of db with count per call; returns the number of calls. */
static unsigned
scan_all(unsigned db, unsigned count, struct visits *v)
{
	uint64_t cursor = 0;
	unsigned calls = 0;

	do {
		v->this_call = 0;
		OK(stream_scan(tx, db, 0, &cursor, count, collect_cb, v));
		ck_assert_uint_le(v->this_call, count);
		ck_assert_uint_lt(++calls, 1000);
	} while (cursor != 0);
	return calls;
}

START_TEST(test_key_create_lookup)
{
	struct stream_meta a, b, got;

	FAILS(lookup(0, "s", &got), ECHD_ENOTFOUND);
	create(0, "s", &a);
	ck_assert_uint_ne(a.sid, 0);
	U64_EQ(a.length, 0);
	U64_EQ(a.nodes, 0);
	ID_EQ(a.first, 0, 0);
	ID_EQ(a.last, 0, 0);
	OK(lookup(0, "s", &got));
	meta_eq(&got, &a);

	/* same name in another db is another key */
	FAILS(lookup(1, "s", &got), ECHD_ENOTFOUND);
	create(1, "s", &b);
	ck_assert_uint_gt(b.sid, a.sid);
	OK(lookup(1, "s", &got));
	U64_EQ(got.sid, b.sid);
	OK(lookup(0, "s", &got));
	U64_EQ(got.sid, a.sid);

	/* names are compared as bytes: no prefix matches */
	FAILS(lookup(0, "", &got), ECHD_ENOTFOUND);
	FAILS(stream_lookup(tx, 0, &(struct st_buf){"s\0", 2}, &got), ECHD_ENOTFOUND);
	FAILS(lookup(0, "ss", &got), ECHD_ENOTFOUND);
}
END_TEST

START_TEST(test_key_binary_names)
{
	static const char bin[] = {'a', '\0', 'b', '\xff'};
	struct st_buf nb = {bin, sizeof(bin)}, nb2 = {bin, 2};
	struct stream_meta a, got;

	OK(stream_create(tx, 0, &nb, &a));
	OK(stream_lookup(tx, 0, &nb, &got));
	U64_EQ(got.sid, a.sid);
	FAILS(stream_lookup(tx, 0, &nb2, &got), ECHD_ENOTFOUND);
	scan_all(0, 10, &seen);
	U64_EQ(seen.n, 1);
	ck_assert(seen.lens[0] == sizeof(bin) && memcmp(seen.names[0], bin, sizeof(bin)) == 0);
}
END_TEST

/* Key names live in LMDB keys (db + length + name), so with LMDB's
 * default 511-byte key limit a name may have at most 506 bytes; longer
 * ones fail cleanly with ECHD_EINVAL. Redis allows names up to 512 MB: this
 * pins down a known limit of the key layout, not a wanted behaviour. */
static int
long_len_cb(const struct st_buf *name, void *ud)
{
	uint64_t *lens = ud;

	lens[lens[0] ? 1 : 0] = name->len;
	return 0;
}

START_TEST(test_key_long_names)
{
	/* LMDB keys stop at 511 bytes; longer names are hashed into the key
	 * and kept whole in the value. Names differing only past the part kept
	 * in the key, or only in length, must stay distinct keys. */
	enum { BIG = 64 * 1024 };
	char *lname = malloc(BIG);
	char *other = malloc(BIG);
	struct st_buf lb = {lname, BIG}, ob = {other, BIG};
	struct stream_meta a, b, got;

	ck_assert_ptr_nonnull(lname);
	ck_assert_ptr_nonnull(other);
	memset(lname, 'L', BIG);
	memcpy(other, lname, BIG);
	other[BIG - 1] = 'M'; /* differs only in the last byte */
	OK(stream_create(tx, 0, &lb, &a));
	add_range(&a, 1, 3);
	OK(stream_meta_save(tx, 0, &lb, &a));
	OK(stream_lookup(tx, 0, &lb, &got));
	meta_eq(&got, &a);
	FAILS(stream_lookup(tx, 0, &ob, &got), ECHD_ENOTFOUND);
	OK(stream_create(tx, 0, &ob, &b));
	ck_assert_uint_ne(a.sid, b.sid);
	OK(stream_lookup(tx, 0, &ob, &got));
	ck_assert_uint_eq(got.sid, b.sid);
	OK(stream_lookup(tx, 0, &lb, &got));
	ck_assert_uint_eq(got.sid, a.sid);
	lb.len = 600; /* same bytes, shorter */
	FAILS(stream_lookup(tx, 0, &lb, &got), ECHD_ENOTFOUND);
	lb.len = BIG;
	{
		uint64_t cursor = 0, lens[2] = {0, 0};
		OK(stream_scan(tx, 0, 0, &cursor, 10, long_len_cb, lens));
		U64_EQ(cursor, 0);
		U64_EQ(lens[0], BIG); /* SCAN returns the whole names */
		U64_EQ(lens[1], BIG);
	}
	commit();
	begin();
	OK(stream_lookup(tx, 0, &lb, &got));
	ck_assert_uint_eq(got.length, 3);
	OK(stream_rename(tx, 0, &lb, &ob)); /* over the other long key */
	FAILS(stream_lookup(tx, 0, &lb, &got), ECHD_ENOTFOUND);
	OK(stream_lookup(tx, 0, &ob, &got));
	ck_assert_uint_eq(got.sid, a.sid);
	U64_EQ(db_size(0), 1);
	OK(stream_delete(tx, 0, &ob));
	U64_EQ(db_size(0), 0);
	free(lname);
	free(other);
}
END_TEST

START_TEST(test_key_meta_save_round_trip)
{
	struct stream_meta m, got;

	create(3, "k", &m);
	m.length = 0x0102030405060708u;
	m.first = ID(UINT64_MAX, 1);
	m.last = ID(2, UINT64_MAX);
	m.max_deleted = ID(3, 4);
	m.entries_added = UINT64_MAX;
	m.nodes = 77;
	m.tail_node = ID(0x8000000000000000u, 9);
	m.groups = 5;
	m.expire_ms = 0xfedcba9876543210u;
	save(3, "k", &m);
	OK(lookup(3, "k", &got));
	meta_eq(&got, &m);
	U64_EQ(db_size(3), 1); /* saving is not creating */

	reopen();
	OK(lookup(3, "k", &got));
	meta_eq(&got, &m);
}
END_TEST

/* Rows that fail validation are reported, not trusted (layouts: stream.c). */
START_TEST(test_key_corrupt_rows)
{
	static const unsigned char key[] = {0, 0, 0, 0, 3, 'b', 'a', 'd'};
	unsigned char val[129];
	struct st_buf k = {key, sizeof(key)}, v = {val, 3}, nk;
	struct stream_meta m, got;
	struct stream_id id = {2, 0};
	struct st_buf fv[2] = {B("f"), B("v")};
	unsigned char node_key[24];

	memset(val, 0, sizeof(val));
	val[0] = 1;
	OK(storage_put(tx, STORAGE_T_KEYS, &k, &v, 0));
	FAILS(lookup(0, "bad", &got), ECHD_ECORRUPT);
	v.len = sizeof(val);
	OK(storage_put(tx, STORAGE_T_KEYS, &k, &v, 0));
	OK(lookup(0, "bad", &got)); /* the right size and version */
	val[0] = 99;
	OK(storage_put(tx, STORAGE_T_KEYS, &k, &v, 0));
	FAILS(lookup(0, "bad", &got), ECHD_ECORRUPT);

	/* the tail node row gone: appending must not invent one */
	create(0, "s", &m);
	add(&m, 1, 0, "x");
	st_put_u64(node_key, m.sid);
	st_put_u64(node_key + 8, 1);
	st_put_u64(node_key + 16, 0);
	nk.data = node_key;
	nk.len = sizeof(node_key);
	OK(storage_del(tx, STORAGE_T_NODES, &nk));
	FAILS(stream_append(tx, &m, &id, fv, 2, node_entries, node_bytes), ECHD_ECORRUPT);
	U64_EQ(m.length, 1); /* unchanged on failure */
}
END_TEST

START_TEST(test_key_db_size)
{
	struct stream_meta m;
	char name[16];

	U64_EQ(db_size(0), 0);
	U64_EQ(db_size(255), 0);
	for (int i = 0; i < 5; i++) {
		snprintf(name, sizeof(name), "a%d", i);
		create(0, name, &m);
	}
	create(2, "x", &m);
	create(2, "y", &m);
	create(255, "z", &m);
	U64_EQ(db_size(0), 5);
	U64_EQ(db_size(1), 0);
	U64_EQ(db_size(2), 2);
	U64_EQ(db_size(255), 1);
	OK(stream_delete(tx, 0, &(struct st_buf){"a3", 2}));
	U64_EQ(db_size(0), 4);
	U64_EQ(db_size(2), 2);
}
END_TEST

START_TEST(test_key_delete)
{
	struct stream_meta a, b, got;
	struct st_buf na = B("a");

	create(0, "a", &a);
	create(0, "b", &b);
	add_range(&a, 1, 30);
	save(0, "a", &a);
	ck_assert(!in_trash(a.sid));

	OK(stream_delete(tx, 0, &na));
	FAILS(lookup(0, "a", &got), ECHD_ENOTFOUND);
	FAILS(stream_delete(tx, 0, &na), ECHD_ENOTFOUND);
	ck_assert(in_trash(a.sid));
	ck_assert(!in_trash(b.sid));
	U64_EQ(db_size(0), 1);
	/* the rows stay until the collector runs */
	U64_EQ(rows_of(STORAGE_T_ENTRIES, a.sid), 30);
	OK(lookup(0, "b", &got));

	/* a new key of the same name is a new stream */
	create(0, "a", &got);
	ck_assert_uint_ne(got.sid, a.sid);
	U64_EQ(got.length, 0);
	U64_EQ(db_size(0), 2);
	/* deleting in another db misses */
	FAILS(stream_delete(tx, 1, &na), ECHD_ENOTFOUND);
}
END_TEST

START_TEST(test_key_gc)
{
	struct stream_meta a, b, c;
	struct st_buf na = B("a");
	bool more = true;
	unsigned steps = 0;

	node_entries = 10;
	create(0, "a", &a);
	create(0, "b", &b);
	create(0, "c", &c);
	add_range(&a, 1, 95);
	add_range(&b, 1, 20);
	add_range(&c, 1, 7);
	save(0, "a", &a);
	save(0, "b", &b);
	save(0, "c", &c);
	U64_EQ(rows_of(STORAGE_T_NODES, a.sid), 10);

	/* nothing to collect */
	OK(stream_gc_step(tx, 1000, &more));
	ck_assert(!more);
	U64_EQ(rows_of(STORAGE_T_ENTRIES, a.sid), 95);

	OK(stream_delete(tx, 0, &na));
	commit();
	begin();
	do {
		OK(stream_gc_step(tx, 1000, &more));
		ck_assert_uint_lt(++steps, 10);
	} while (more);
	U64_EQ(rows_of(STORAGE_T_ENTRIES, a.sid), 0);
	U64_EQ(rows_of(STORAGE_T_NODES, a.sid), 0);
	ck_assert(!in_trash(a.sid));
	/* the neighbours on both sides keep every row */
	check_rows(&b);
	check_rows(&c);
	U64_EQ(rows_of(STORAGE_T_ENTRIES, b.sid), 20);
	U64_EQ(rows_of(STORAGE_T_ENTRIES, c.sid), 7);
	OK(lookup(0, "b", &b));
	OK(lookup(0, "c", &c));
}
END_TEST

START_TEST(test_key_gc_budget)
{
	struct stream_meta a, b, c;
	struct st_buf na = B("a"), nc = B("c");
	bool more = false;
	unsigned steps = 0;
	uint64_t rows;

	node_entries = 10;
	create(0, "a", &a);
	create(0, "b", &b);
	create(0, "c", &c);
	add_range(&a, 1, 50); /* 50 entry rows + 5 node rows */
	add_range(&b, 1, 12);
	add_range(&c, 1, 4); /* 4 + 1 */
	save(0, "a", &a);
	save(0, "b", &b);
	save(0, "c", &c);
	OK(stream_delete(tx, 0, &na));
	OK(stream_delete(tx, 0, &nc));
	rows = rows_all(STORAGE_T_ENTRIES) + rows_all(STORAGE_T_NODES);
	U64_EQ(rows, 55 + 12 + 2 + 5);

	for (;;) {
		uint64_t now;

		OK(stream_gc_step(tx, 7, &more));
		steps++;
		now = rows_all(STORAGE_T_ENTRIES) + rows_all(STORAGE_T_NODES);
		/* a step removes at most its budget, and some rows while any are due */
		ck_assert_uint_le(rows - now, 7);
		ck_assert(now < rows || now == 14);
		rows = now;
		if (!more) {
			break;
		}
		ck_assert_uint_lt(steps, 100);
		/* b is never touched */
		U64_EQ(rows_of(STORAGE_T_ENTRIES, b.sid), 12);
	}
	ck_assert_uint_ge(steps, (55 + 5 + 6) / 7);
	U64_EQ(rows_of(STORAGE_T_ENTRIES, a.sid) + rows_of(STORAGE_T_NODES, a.sid), 0);
	U64_EQ(rows_of(STORAGE_T_ENTRIES, c.sid) + rows_of(STORAGE_T_NODES, c.sid), 0);
	ck_assert(!in_trash(a.sid));
	ck_assert(!in_trash(c.sid));
	U64_EQ(rows_all(STORAGE_T_TRASH), 0);
	check_rows(&b);
	U64_EQ(rows_all(STORAGE_T_ENTRIES), 12);
	OK(stream_gc_step(tx, 7, &more));
	ck_assert(!more);
}
END_TEST

START_TEST(test_key_rename_new)
{
	struct stream_meta a, got;
	struct st_buf na = B("a"), nb = B("b");

	create(0, "a", &a);
	add_range(&a, 1, 5);
	save(0, "a", &a);
	OK(stream_rename(tx, 0, &na, &nb));
	FAILS(lookup(0, "a", &got), ECHD_ENOTFOUND);
	OK(lookup(0, "b", &got));
	meta_eq(&got, &a);
	U64_EQ(db_size(0), 1);
	ck_assert(!in_trash(a.sid));
	check_rows(&got);
	/* missing source; the other db's key of that name is not the source */
	FAILS(stream_rename(tx, 0, &na, &nb), ECHD_ENOTFOUND);
	FAILS(stream_rename(tx, 1, &nb, &na), ECHD_ENOTFOUND);
	OK(lookup(0, "b", &got));
}
END_TEST

START_TEST(test_key_rename_over_existing)
{
	struct stream_meta a, b, got;
	struct st_buf na = B("a"), nb = B("b");
	bool more = true;

	create(0, "a", &a);
	create(0, "b", &b);
	add_range(&a, 1, 5);
	add_range(&b, 100, 120);
	save(0, "a", &a);
	save(0, "b", &b);
	OK(stream_rename(tx, 0, &na, &nb));
	FAILS(lookup(0, "a", &got), ECHD_ENOTFOUND);
	OK(lookup(0, "b", &got));
	meta_eq(&got, &a);
	U64_EQ(db_size(0), 1);
	ck_assert(in_trash(b.sid));
	ck_assert(!in_trash(a.sid));
	while (more) {
		OK(stream_gc_step(tx, 1000, &more));
	}
	U64_EQ(rows_of(STORAGE_T_ENTRIES, b.sid), 0);
	check_rows(&got);
	U64_EQ(rows_of(STORAGE_T_ENTRIES, a.sid), 5);
}
END_TEST

START_TEST(test_key_rename_same)
{
	struct stream_meta a, got;
	struct st_buf na = B("a");

	create(0, "a", &a);
	add_range(&a, 1, 3);
	save(0, "a", &a);
	OK(stream_rename(tx, 0, &na, &na));
	OK(lookup(0, "a", &got));
	meta_eq(&got, &a);
	U64_EQ(db_size(0), 1);
	ck_assert(!in_trash(a.sid));
	U64_EQ(rows_of(STORAGE_T_ENTRIES, a.sid), 3);
	FAILS(stream_rename(tx, 0, &(struct st_buf){"z", 1}, &(struct st_buf){"z", 1}),
		ECHD_ENOTFOUND);
}
END_TEST

START_TEST(test_key_flush_one_db)
{
	struct stream_meta m0, m1a, m1b, m2, got;
	bool more = true;

	create(0, "k", &m0);
	create(1, "k", &m1a);
	create(1, "j", &m1b);
	create(2, "k", &m2);
	add_range(&m0, 1, 3);
	add_range(&m1a, 1, 4);
	add_range(&m1b, 1, 5);
	add_range(&m2, 1, 6);
	save(0, "k", &m0);
	save(1, "k", &m1a);
	save(1, "j", &m1b);
	save(2, "k", &m2);

	OK(stream_flush(tx, 1, false));
	FAILS(lookup(1, "k", &got), ECHD_ENOTFOUND);
	FAILS(lookup(1, "j", &got), ECHD_ENOTFOUND);
	OK(lookup(0, "k", &got));
	OK(lookup(2, "k", &got));
	U64_EQ(db_size(0), 1);
	U64_EQ(db_size(1), 0);
	U64_EQ(db_size(2), 1);
	ck_assert(in_trash(m1a.sid));
	ck_assert(in_trash(m1b.sid));
	ck_assert(!in_trash(m0.sid));
	ck_assert(!in_trash(m2.sid));
	scan_all(1, 10, &seen);
	U64_EQ(seen.n, 0);
	while (more) {
		OK(stream_gc_step(tx, 1000, &more));
	}
	U64_EQ(rows_all(STORAGE_T_ENTRIES), 3 + 6);
	check_rows(&m0);
	check_rows(&m2);

	/* the db is usable again */
	create(1, "k", &got);
	U64_EQ(db_size(1), 1);
	/* flushing an empty db is fine */
	OK(stream_flush(tx, 7, false));
	U64_EQ(db_size(0), 1);
}
END_TEST

START_TEST(test_key_flush_all)
{
	struct stream_meta m, got;
	bool more = true;

	create(0, "a", &m);
	add_range(&m, 1, 3);
	save(0, "a", &m);
	create(5, "b", &m);
	add_range(&m, 1, 3);
	save(5, "b", &m);
	create(255, "c", &m);
	add_range(&m, 1, 3);
	save(255, "c", &m);

	OK(stream_flush(tx, 0, true));
	FAILS(lookup(0, "a", &got), ECHD_ENOTFOUND);
	FAILS(lookup(5, "b", &got), ECHD_ENOTFOUND);
	FAILS(lookup(255, "c", &got), ECHD_ENOTFOUND);
	U64_EQ(db_size(0), 0);
	U64_EQ(db_size(5), 0);
	U64_EQ(db_size(255), 0);
	U64_EQ(rows_all(STORAGE_T_KEYS), 0);
	U64_EQ(rows_all(STORAGE_T_BYID), 0);
	U64_EQ(rows_all(STORAGE_T_TRASH), 3);
	scan_all(5, 10, &seen);
	U64_EQ(seen.n, 0);
	while (more) {
		OK(stream_gc_step(tx, 1000, &more));
	}
	U64_EQ(rows_all(STORAGE_T_ENTRIES), 0);
	U64_EQ(rows_all(STORAGE_T_NODES), 0);
	U64_EQ(rows_all(STORAGE_T_TRASH), 0);
	/* new keys get new internal ids */
	create(0, "a", &got);
	ck_assert_uint_gt(got.sid, m.sid);
	U64_EQ(db_size(0), 1);
}
END_TEST

START_TEST(test_key_scan_all_once)
{
	struct stream_meta m;
	char name[16];
	unsigned calls;

	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "k%02d", i);
		create(0, name, &m);
	}
	for (int i = 0; i < 5; i++) {
		snprintf(name, sizeof(name), "o%d", i);
		create(1, name, &m);
	}
	calls = scan_all(0, 3, &seen);
	U64_EQ(seen.n, 20);
	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "k%02d", i);
		ck_assert_msg(visited(&seen, name) == 1, "%s visited %u times", name,
			visited(&seen, name));
	}
	ck_assert_uint_ge(calls, 7);
	ck_assert_uint_le(calls, 8);

	memset(&seen, 0, sizeof(seen));
	scan_all(1, 1, &seen);
	U64_EQ(seen.n, 5);
	ck_assert_uint_eq(visited(&seen, "o4"), 1);
	ck_assert_uint_eq(visited(&seen, "k00"), 0);

	memset(&seen, 0, sizeof(seen));
	calls = scan_all(3, 5, &seen); /* empty db */
	U64_EQ(seen.n, 0);
	U64_EQ(calls, 1);
}
END_TEST

START_TEST(test_key_scan_concurrent_changes)
{
	struct stream_meta m;
	struct st_buf from = B("k08"), to = B("renamed"), del = B("k09");
	uint64_t cursor = 0;
	char name[16];
	unsigned calls = 0;

	for (int i = 0; i < 10; i++) {
		snprintf(name, sizeof(name), "k%02d", i);
		create(0, name, &m);
	}
	do {
		seen.this_call = 0;
		OK(stream_scan(tx, 0, 0, &cursor, 2, collect_cb, &seen));
		ck_assert_uint_le(seen.this_call, 2);
		calls++;
		if (calls == 2) {
			ck_assert_uint_ne(cursor, 0);
			/* keys added between calls */
			create(0, "late0", &m);
			create(0, "late1", &m);
			/* an unvisited key renamed: it keeps its older id */
			OK(stream_rename(tx, 0, &from, &to));
			/* an unvisited key deleted */
			OK(stream_delete(tx, 0, &del));
		}
		if (calls == 3) {
			commit(); /* cursors survive transactions */
			begin();
			create(0, "late2", &m);
		}
		ck_assert_uint_lt(calls, 100);
	} while (cursor != 0);
	for (int i = 0; i < 8; i++) {
		snprintf(name, sizeof(name), "k%02d", i);
		ck_assert_msg(visited(&seen, name) == 1, "%s visited %u times", name,
			visited(&seen, name));
	}
	ck_assert_uint_eq(visited(&seen, "k08"), 0);
	ck_assert_uint_eq(visited(&seen, "k09"), 0);
	ck_assert_uint_eq(visited(&seen, "renamed"), 1);
	ck_assert_uint_eq(visited(&seen, "late0"), 1);
	ck_assert_uint_eq(visited(&seen, "late1"), 1);
	ck_assert_uint_eq(visited(&seen, "late2"), 1);
	U64_EQ(seen.n, 12);
}
END_TEST

static int
stop_cb(const struct st_buf *name, void *ud)
{
	unsigned *n = ud;

	(*n)++;
	return 42;
}

START_TEST(test_key_scan_callback_stops)
{
	struct stream_meta m;
	uint64_t cursor = 0;
	unsigned n = 0;

	create(0, "a", &m);
	create(0, "b", &m);
	FAILS(stream_scan(tx, 0, 0, &cursor, 10, stop_cb, &n), 42);
	ck_assert_uint_eq(n, 1);
}
END_TEST


/* ---- expiry ------------------------------------------------------------- */

struct dropped {
	char names[8][16];
	unsigned dbs[8];
	unsigned n;
};

static void
dropped_cb(unsigned db, const struct st_buf *name, void *ud)
{
	struct dropped *d = ud;

	ck_assert_uint_lt(d->n, 8);
	ck_assert_uint_lt(name->len, sizeof(d->names[0]));
	memcpy(d->names[d->n], name->data, name->len);
	d->names[d->n][name->len] = '\0';
	d->dbs[d->n++] = db;
}

static void
set_expire(unsigned db, const char *name, struct stream_meta *m, uint64_t when)
{
	struct st_buf n = {name, strlen(name)};
	OK(stream_set_expire(tx, db, &n, m, when));
}

START_TEST(test_expire_set_and_clear)
{
	struct stream_meta a, got;

	create(0, "a", &a);
	add_range(&a, 1, 4);
	save(0, "a", &a);
	set_expire(0, "a", &a, 5000);
	U64_EQ(a.expire_ms, 5000);
	OK(lookup(0, "a", &got));
	meta_eq(&got, &a);
	U64_EQ(rows_all(STORAGE_T_EXPIRES), 1);
	ck_assert(!stream_expired(&got, 4999));
	ck_assert(stream_expired(&got, 5000));
	/* moving it replaces the row; clearing removes it */
	set_expire(0, "a", &a, 7000);
	U64_EQ(rows_all(STORAGE_T_EXPIRES), 1);
	reopen();
	OK(lookup(0, "a", &got));
	U64_EQ(got.expire_ms, 7000);
	set_expire(0, "a", &got, 0);
	U64_EQ(rows_all(STORAGE_T_EXPIRES), 0);
	OK(lookup(0, "a", &got));
	U64_EQ(got.expire_ms, 0);
	ck_assert(!stream_expired(&got, UINT64_MAX));
	U64_EQ(got.length, 4); /* the rows are untouched */
}
END_TEST

START_TEST(test_expire_due_in_order)
{
	struct stream_meta a, b, c, got;
	struct dropped d = {0};
	uint64_t next;
	unsigned n;
	bool more = true;

	create(0, "a", &a);
	create(1, "b", &b);
	create(0, "c", &c);
	add_range(&b, 1, 10);
	save(1, "b", &b);
	set_expire(0, "a", &a, 300);
	set_expire(1, "b", &b, 100);
	set_expire(0, "c", &c, 200);

	OK(stream_expire_due(tx, 99, 10, dropped_cb, &d, &n, &next));
	U64_EQ(n, 0);
	U64_EQ(next, 100);
	/* a budget of one drops the earliest and says more are due */
	OK(stream_expire_due(tx, 250, 1, dropped_cb, &d, &n, &next));
	U64_EQ(n, 1);
	U64_EQ(next, 250);
	ck_assert_str_eq(d.names[0], "b");
	U64_EQ(d.dbs[0], 1);
	FAILS(lookup(1, "b", &got), ECHD_ENOTFOUND);
	U64_EQ(db_size(1), 0);
	ck_assert(in_trash(b.sid));
	OK(stream_expire_due(tx, 250, 10, dropped_cb, &d, &n, &next));
	U64_EQ(n, 1);
	U64_EQ(next, 300);
	ck_assert_str_eq(d.names[1], "c");
	OK(lookup(0, "a", &got));
	OK(stream_expire_due(tx, 300, 10, dropped_cb, &d, &n, &next));
	U64_EQ(n, 1);
	U64_EQ(next, 0);
	U64_EQ(rows_all(STORAGE_T_EXPIRES), 0);
	U64_EQ(db_size(0), 0);
	while (more) {
		OK(stream_gc_step(tx, 1000, &more));
	}
	U64_EQ(rows_all(STORAGE_T_ENTRIES), 0);
}
END_TEST

START_TEST(test_expire_budget_past_one_walk)
{
	struct stream_meta m;
	uint64_t next;
	unsigned n;
	char name[16];

	for (int i = 0; i < 150; i++) {
		snprintf(name, sizeof(name), "k%d", i);
		create(0, name, &m);
		set_expire(0, name, &m, 10 + (uint64_t)i);
	}
	/* a walk reads at most 64 rows; a budget beyond it takes several */
	OK(stream_expire_due(tx, 1000, 130, NULL, NULL, &n, &next));
	U64_EQ(n, 130);
	U64_EQ(next, 1000);
	U64_EQ(db_size(0), 20);
	OK(stream_expire_due(tx, 150, 100, NULL, NULL, &n, &next));
	U64_EQ(n, 11); /* 140..150 */
	U64_EQ(next, 151);
	OK(stream_expire_due(tx, 1000, 100, NULL, NULL, &n, &next));
	U64_EQ(n, 9);
	U64_EQ(next, 0);
	U64_EQ(db_size(0), 0);
}
END_TEST

/* A key written by an echd before expiry keeps its row but loses its time
 * (the field was reserved, written as zero): the row goes, the key stays. */
START_TEST(test_expire_stale_row)
{
	struct stream_meta a, got;
	uint64_t next;
	unsigned n;

	struct dropped d = {0};

	create(0, "a", &a);
	set_expire(0, "a", &a, 100);
	a.expire_ms = 0;
	save(0, "a", &a); /* as the older echd saves it */
	OK(stream_expire_due(tx, 100, 10, dropped_cb, &d, &n, &next));
	U64_EQ(n, 1);   /* a row taken, */
	U64_EQ(d.n, 0); /* no key dropped */
	U64_EQ(next, 0);
	U64_EQ(rows_all(STORAGE_T_EXPIRES), 0);
	OK(lookup(0, "a", &got));
	U64_EQ(db_size(0), 1);
}
END_TEST

START_TEST(test_expire_follows_key)
{
	struct stream_meta a, b, got;
	struct st_buf na = B("a"), nb = B("b");
	struct dropped d = {0};
	uint64_t next, cnt[256], avg[256];
	unsigned n;

	/* rename keeps the time: the row names the stream id, not the name */
	create(0, "a", &a);
	set_expire(0, "a", &a, 1000);
	OK(stream_rename(tx, 0, &na, &nb));
	OK(lookup(0, "b", &got));
	U64_EQ(got.expire_ms, 1000);
	OK(stream_expires_stat(tx, 400, cnt, avg));
	U64_EQ(cnt[0], 1);
	U64_EQ(avg[0], 600);
	OK(stream_expire_due(tx, 1000, 10, dropped_cb, &d, &n, &next));
	U64_EQ(n, 1);
	ck_assert_str_eq(d.names[0], "b");

	/* delete, rename over, and flush take the row with the key */
	create(0, "a", &a);
	set_expire(0, "a", &a, 50);
	OK(stream_delete(tx, 0, &na));
	create(0, "a", &a);
	create(0, "b", &b);
	set_expire(0, "b", &b, 60);
	OK(stream_rename(tx, 0, &na, &nb));
	OK(lookup(0, "b", &got));
	U64_EQ(got.expire_ms, 0);
	create(3, "x", &a);
	set_expire(3, "x", &a, 70);
	create(4, "y", &b);
	set_expire(4, "y", &b, 80);
	OK(stream_expires_stat(tx, 0, cnt, avg));
	U64_EQ(cnt[3], 1);
	U64_EQ(cnt[4], 1);
	U64_EQ(avg[4], 80);
	/* the mean of TTLs whose sum does not fit in 64 bits */
	create(4, "z", &b);
	set_expire(4, "z", &b, (uint64_t)INT64_MAX);
	create(4, "w", &b);
	set_expire(4, "w", &b, (uint64_t)INT64_MAX - 1000);
	OK(stream_expires_stat(tx, 0, cnt, avg));
	U64_EQ(cnt[4], 3);
	ck_assert_uint_gt(avg[4], (uint64_t)INT64_MAX / 3 * 2 - 1000000);
	ck_assert_uint_lt(avg[4], (uint64_t)INT64_MAX / 3 * 2 + 1000000);
	OK(stream_flush(tx, 3, false));
	U64_EQ(rows_all(STORAGE_T_EXPIRES), 3); /* db 4's */
	OK(stream_flush(tx, 0, true));
	U64_EQ(rows_all(STORAGE_T_EXPIRES), 0);
	OK(stream_expire_due(tx, UINT64_MAX, 10, dropped_cb, &d, &n, &next));
	U64_EQ(n, 0);
	U64_EQ(next, 0);
}
END_TEST

START_TEST(test_key_move)
{
	struct stream_meta a, b, got;
	struct st_buf na = B("a"), nb = B("b"), nz = B("z");
	struct dropped d = {0};
	uint64_t next, cnt[256], avg[256];
	unsigned n;

	create(0, "a", &a);
	add_range(&a, 1, 5);
	save(0, "a", &a);
	set_expire(0, "a", &a, 1000);
	FAILS(stream_move(tx, 0, &nz, 2), ECHD_ENOTFOUND);
	OK(stream_move(tx, 0, &na, 2));
	FAILS(lookup(0, "a", &got), ECHD_ENOTFOUND);
	OK(lookup(2, "a", &got));
	meta_eq(&got, &a); /* same internal id, so the same entries */
	U64_EQ(db_size(0), 0);
	U64_EQ(db_size(2), 1);
	scan_all(0, 10, &seen);
	U64_EQ(seen.n, 0);
	scan_all(2, 10, &seen);
	U64_EQ(visited(&seen, "a"), 1);
	/* the expiry row follows the key to its new database */
	OK(stream_expires_stat(tx, 0, cnt, avg));
	U64_EQ(cnt[0], 0);
	U64_EQ(cnt[2], 1);

	/* a name taken in the destination: nothing changes */
	create(0, "b", &b);
	create(2, "b", &got);
	FAILS(stream_move(tx, 0, &nb, 2), ECHD_EEXIST);
	OK(lookup(0, "b", &got));
	U64_EQ(got.sid, b.sid);
	U64_EQ(db_size(0), 1);
	U64_EQ(db_size(2), 2);

	reopen();
	OK(lookup(2, "a", &got));
	U64_EQ(got.length, 5);
	OK(stream_expire_due(tx, 1000, 10, dropped_cb, &d, &n, &next));
	U64_EQ(n, 1);
	ck_assert_str_eq(d.names[0], "a");
	U64_EQ(d.dbs[0], 2);
	FAILS(lookup(2, "a", &got), ECHD_ENOTFOUND);
}
END_TEST

START_TEST(test_expire_scan_skips)
{
	struct stream_meta a, b;

	create(0, "a", &a);
	create(0, "b", &b);
	set_expire(0, "b", &b, 100);
	scan_all(0, 10, &seen);
	U64_EQ(seen.n, 2); /* now 0: no time given, nothing is skipped */
	memset(&seen, 0, sizeof(seen));
	{
		uint64_t cursor = 0;
		OK(stream_scan(tx, 0, 100, &cursor, 10, collect_cb, &seen));
		U64_EQ(cursor, 0);
	}
	U64_EQ(seen.n, 1);
	ck_assert(buf_eq(&(struct st_buf){"a", 1}, seen.names[0], seen.lens[0]));
}
END_TEST

static uint64_t
usage(const char *name, const struct stream_meta *m, uint64_t samples)
{
	struct st_buf n = B(name);
	uint64_t bytes = 0;

	OK(stream_usage(tx, 0, &n, m, samples, &bytes));
	return bytes;
}

START_TEST(test_usage_rows)
{
	struct stream_meta m;
	uint64_t exact, est;
	struct stream_id id = ID(500, 0);

	create(0, "s", &m);
	add_sized(&m, 1000, 100); /* nodes of 4096 bytes: 28 of them */
	save(0, "s", &m);
	ck_assert_uint_gt(m.nodes, 10);
	/* the only key: its rows are every row of these tables */
	exact = table_bytes(STORAGE_T_KEYS) + table_bytes(STORAGE_T_BYID) +
		table_bytes(STORAGE_T_NODES) + table_bytes(STORAGE_T_ENTRIES);
	U64_EQ(usage("s", &m, 0), exact);
	U64_EQ(usage("s", &m, m.nodes), exact);
	U64_EQ(usage("s", &m, 1000), exact);
	/* a few nodes of uniform entries stand for the others within 1% */
	est = usage("s", &m, 5);
	ck_assert_uint_le(est > exact ? est - exact : exact - est, exact / 100);
	est = usage("s", &m, 1);
	ck_assert_uint_le(est > exact ? est - exact : exact - est, exact / 100);

	/* a deleted entry and an expiry time change it by their rows */
	OK(stream_delete_entry(tx, &m, &id));
	save(0, "s", &m);
	exact = table_bytes(STORAGE_T_KEYS) + table_bytes(STORAGE_T_BYID) +
		table_bytes(STORAGE_T_NODES) + table_bytes(STORAGE_T_ENTRIES);
	U64_EQ(usage("s", &m, 0), exact);
	set_expire(0, "s", &m, 5000);
	U64_EQ(usage("s", &m, 0), exact + table_bytes(STORAGE_T_EXPIRES));
	ck_assert_uint_gt(table_bytes(STORAGE_T_EXPIRES), 0);
}
END_TEST

START_TEST(test_usage_empty_and_corrupt)
{
	struct stream_meta m, bad;
	uint64_t bytes;

	create(0, "e", &m);
	U64_EQ(usage("e", &m, 5),
		table_bytes(STORAGE_T_KEYS) + table_bytes(STORAGE_T_BYID));
	add_sized(&m, 3, 10);
	save(0, "e", &m);
	/* a node that counts more entries than the stream has */
	bad = m;
	{
		unsigned char k[24];
		struct st_buf kb = {k, 24};
		st_put_u64(k, m.sid);
		st_put_u64(k + 8, 3);
		memset(k + 16, 0, 8);
		OK(storage_del(tx, STORAGE_T_ENTRIES, &kb));
	}
	{
		struct st_buf n = B("e");
		FAILS(stream_usage(tx, 0, &n, &bad, 0, &bytes), ECHD_ECORRUPT);
	}
}
END_TEST

static int
copy_name_cb(const struct st_buf *name, void *ud)
{
	char *out = ud;

	ck_assert_uint_lt(name->len, 16);
	memcpy(out, name->data, name->len);
	out[name->len] = '\0';
	return 0;
}

static int
refuse_cb(const struct st_buf *name, void *ud)
{
	(void)name;
	(void)ud;
	return -ENOMEM;
}

static int
rk(unsigned db, uint64_t now, uint64_t rnd, char *out)
{
	return stream_random_key(tx, db, now, rnd, copy_name_cb, out);
}

START_TEST(test_random_key)
{
	static const char *names[] = {"a", "b", "c", "d", "e"};
	struct stream_meta m[5], other;
	char got[16];

	FAILS(rk(0, 0, 7, got), ECHD_ENOTFOUND);
	for (int i = 0; i < 5; i++) {
		create(0, names[i], &m[i]);
	}
	create(1, "x", &other);
	/* internal ids in a row: draw i is the i-th key, and the draws wrap */
	for (uint64_t r = 0; r < 10; r++) {
		OK(rk(0, 0, r, got));
		ck_assert_str_eq(got, names[r % 5]);
	}
	OK(rk(1, 0, 12345, got));
	ck_assert_str_eq(got, "x");
	FAILS(stream_random_key(tx, 0, 0, 3, refuse_cb, NULL), -ENOMEM); /* fn's error */
	FAILS(rk(2, 0, 1, got), ECHD_ENOTFOUND);

	/* expired keys are passed over, the last one wrapping to the first */
	set_expire(0, "c", &m[2], 100);
	set_expire(0, "e", &m[4], 100);
	OK(rk(0, 99, 2, got));
	ck_assert_str_eq(got, "c");
	OK(rk(0, 100, 2, got));
	ck_assert_str_eq(got, "d");
	OK(rk(0, 100, 4, got));
	ck_assert_str_eq(got, "a");
	set_expire(0, "a", &m[0], 100);
	set_expire(0, "b", &m[1], 100);
	set_expire(0, "d", &m[3], 100);
	for (uint64_t r = 0; r < 5; r++) {
		FAILS(rk(0, 100, r, got), ECHD_ENOTFOUND);
	}
	OK(rk(1, 100, 3, got)); /* another db's keys are their own */
	ck_assert_str_eq(got, "x");
	/* a deleted key leaves a gap the next key fills */
	{
		struct st_buf n = B("b");
		OK(stream_delete(tx, 0, &n));
	}
	OK(rk(0, 0, 1, got));
	ck_assert_str_eq(got, "c");
}
END_TEST

static Suite *
keys_suite(void)
{
	Suite *s = suite_create("keys");
	TCase *tc;

	tc = tcase_create("create_lookup");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_key_create_lookup);
	tcase_add_test(tc, test_key_binary_names);
	tcase_add_test(tc, test_key_long_names);
	tcase_add_test(tc, test_key_meta_save_round_trip);
	suite_add_tcase(s, tc);

	tc = tcase_create("corrupt");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_key_corrupt_rows);
	suite_add_tcase(s, tc);

	tc = tcase_create("db_size");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_key_db_size);
	suite_add_tcase(s, tc);

	tc = tcase_create("delete");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_key_delete);
	suite_add_tcase(s, tc);

	tc = tcase_create("gc");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_key_gc);
	tcase_add_test(tc, test_key_gc_budget);
	suite_add_tcase(s, tc);

	tc = tcase_create("rename");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_key_rename_new);
	tcase_add_test(tc, test_key_rename_over_existing);
	tcase_add_test(tc, test_key_rename_same);
	tcase_add_test(tc, test_key_move);
	suite_add_tcase(s, tc);

	tc = tcase_create("flush");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_key_flush_one_db);
	tcase_add_test(tc, test_key_flush_all);
	suite_add_tcase(s, tc);

	tc = tcase_create("scan");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_key_scan_all_once);
	tcase_add_test(tc, test_key_scan_concurrent_changes);
	tcase_add_test(tc, test_key_scan_callback_stops);
	suite_add_tcase(s, tc);

	tc = tcase_create("expire");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_expire_set_and_clear);
	tcase_add_test(tc, test_expire_due_in_order);
	tcase_add_test(tc, test_expire_budget_past_one_walk);
	tcase_add_test(tc, test_expire_stale_row);
	tcase_add_test(tc, test_expire_follows_key);
	tcase_add_test(tc, test_expire_scan_skips);
	suite_add_tcase(s, tc);

	tc = tcase_create("usage_random");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_usage_rows);
	tcase_add_test(tc, test_usage_empty_and_corrupt);
	tcase_add_test(tc, test_random_key);
	suite_add_tcase(s, tc);
	return s;
}

/* ---- entries ------------------------------------------------------------ */

START_TEST(test_entry_append_meta)
{
	struct stream_meta m, got;

	create(0, "s", &m);
	add(&m, 5, 1, "a");
	U64_EQ(m.length, 1);
	ID_EQ(m.first, 5, 1);
	ID_EQ(m.last, 5, 1);
	U64_EQ(m.entries_added, 1);
	U64_EQ(m.nodes, 1);
	ID_EQ(m.tail_node, 5, 1);
	add(&m, 5, 2, "b");
	add(&m, 9, 0, "c");
	U64_EQ(m.length, 3);
	ID_EQ(m.first, 5, 1);
	ID_EQ(m.last, 9, 0);
	U64_EQ(m.entries_added, 3);
	U64_EQ(m.nodes, 1);
	ID_EQ(m.max_deleted, 0, 0);
	check_rows(&m);
	/* append changes only the caller's copy until it is saved */
	OK(lookup(0, "s", &got));
	U64_EQ(got.length, 0);
	save(0, "s", &m);
	OK(lookup(0, "s", &got));
	meta_eq(&got, &m);
}
END_TEST

START_TEST(test_entry_append_count_nodes)
{
	struct stream_meta m;

	node_entries = 10;
	create(0, "s", &m);
	add_range(&m, 1, 10);
	U64_EQ(m.nodes, 1);
	ID_EQ(m.tail_node, 1, 1);
	add_range(&m, 11, 11);
	U64_EQ(m.nodes, 2);
	ID_EQ(m.tail_node, 11, 1);
	add_range(&m, 12, 95);
	U64_EQ(m.nodes, 10);
	ID_EQ(m.tail_node, 91, 1);
	check_rows(&m);
}
END_TEST

/* Ids 10-0, 10-1, 10-2, 11-0, ... : i -> (10 + i / 3, i % 3). */
static void
add_grid(struct stream_meta *m, unsigned n)
{
	char val[16];

	for (unsigned i = 0; i < n; i++) {
		snprintf(val, sizeof(val), "%u", i);
		add(m, 10 + i / 3, i % 3, val);
	}
}

static struct stream_id
grid(unsigned i)
{
	return ID(10 + i / 3, i % 3);
}

/* ids[0..n) must be grid(from), grid(from + step), ... */
static void
ids_are(const struct stream_id *ids, size_t n, unsigned from, int step)
{
	for (size_t i = 0; i < n; i++) {
		struct stream_id want = grid((unsigned)((int)from + (int)i * step));
		ck_assert_msg(stream_id_cmp(&ids[i], &want) == 0,
			"id %zu: %" PRIu64 "-%" PRIu64 ", expected %" PRIu64 "-%" PRIu64, i,
			ids[i].ms, ids[i].seq, want.ms, want.seq);
	}
}

START_TEST(test_entry_iter_full)
{
	struct stream_meta m, other;
	struct stream_id ids[64];
	size_t n;

	node_entries = 4; /* several nodes: iteration must not care */
	create(0, "s", &m);
	create(0, "t", &other);
	/* interleave another stream's rows on both sides of s's id range */
	add(&other, 1, 0, "x");
	add_grid(&m, 20);
	add(&other, UINT64_MAX, 0, "y");

	n = iter_ids(&m, ID(0, 0), ID(UINT64_MAX, UINT64_MAX), false, ids, 64);
	U64_EQ(n, 20);
	ids_are(ids, n, 0, 1);
	n = iter_ids(&m, ID(0, 0), ID(UINT64_MAX, UINT64_MAX), true, ids, 64);
	U64_EQ(n, 20);
	ids_are(ids, n, 19, -1);
	n = iter_ids(&other, ID(0, 0), ID(UINT64_MAX, UINT64_MAX), true, ids, 64);
	U64_EQ(n, 2);
	ID_EQ(ids[0], UINT64_MAX, 0);
	ID_EQ(ids[1], 1, 0);
}
END_TEST

START_TEST(test_entry_iter_ranges)
{
	struct stream_meta m;
	struct stream_id ids[64], s, e;
	size_t n;

	create(0, "s", &m);
	add_grid(&m, 20); /* 10-0 .. 16-1 */

	/* inclusive bounds on existing ids */
	n = iter_ids(&m, grid(4), grid(9), false, ids, 64);
	U64_EQ(n, 6);
	ids_are(ids, n, 4, 1);
	n = iter_ids(&m, grid(4), grid(9), true, ids, 64);
	U64_EQ(n, 6);
	ids_are(ids, n, 9, -1);

	/* exclusive bounds, as XRANGE (a (b does them */
	s = grid(4);
	e = grid(9);
	ck_assert(stream_id_incr(&s));
	ck_assert(stream_id_decr(&e));
	n = iter_ids(&m, s, e, false, ids, 64);
	U64_EQ(n, 4);
	ids_are(ids, n, 5, 1);
	n = iter_ids(&m, s, e, true, ids, 64);
	U64_EQ(n, 4);
	ids_are(ids, n, 8, -1);

	/* bounds between ids: ms only, as "11" - "12" */
	n = iter_ids(&m, ID(11, 0), ID(12, UINT64_MAX), false, ids, 64);
	U64_EQ(n, 6);
	ids_are(ids, n, 3, 1);
	n = iter_ids(&m, ID(10, 5), ID(11, 1), true, ids, 64);
	U64_EQ(n, 2);
	ids_are(ids, n, 4, -1);

	/* one id */
	n = iter_ids(&m, grid(7), grid(7), true, ids, 64);
	U64_EQ(n, 1);
	ids_are(ids, n, 7, 1);

	/* empty: start > end, before the first, after the last, in a gap */
	U64_EQ(iter_ids(&m, grid(9), grid(4), false, ids, 64), 0);
	U64_EQ(iter_ids(&m, grid(9), grid(4), true, ids, 64), 0);
	U64_EQ(iter_ids(&m, ID(0, 0), ID(9, UINT64_MAX), false, ids, 64), 0);
	U64_EQ(iter_ids(&m, ID(0, 0), ID(9, UINT64_MAX), true, ids, 64), 0);
	U64_EQ(iter_ids(&m, ID(16, 2), ID(UINT64_MAX, UINT64_MAX), false, ids, 64), 0);
	U64_EQ(iter_ids(&m, ID(16, 2), ID(UINT64_MAX, UINT64_MAX), true, ids, 64), 0);
	U64_EQ(iter_ids(&m, ID(11, 3), ID(11, 100), true, ids, 64), 0);
	U64_EQ(iter_ids(&m, ID(11, 3), ID(11, 100), false, ids, 64), 0);
}
END_TEST

START_TEST(test_entry_iter_empty_and_deleted)
{
	struct stream_meta m, other;
	struct stream_id ids[64], id;

	create(0, "s", &m);
	create(0, "t", &other);
	add_grid(&other, 5);
	U64_EQ(iter_ids(&m, ID(0, 0), ID(UINT64_MAX, UINT64_MAX), false, ids, 64), 0);
	U64_EQ(iter_ids(&m, ID(0, 0), ID(UINT64_MAX, UINT64_MAX), true, ids, 64), 0);

	add_grid(&m, 6);
	id = grid(0);
	OK(stream_delete_entry(tx, &m, &id));
	id = grid(3);
	OK(stream_delete_entry(tx, &m, &id));
	id = grid(5);
	OK(stream_delete_entry(tx, &m, &id));
	U64_EQ(iter_ids(&m, ID(0, 0), ID(UINT64_MAX, UINT64_MAX), false, ids, 64), 3);
	ids_are(ids, 1, 1, 1);
	ids_are(ids + 1, 1, 2, 1);
	ids_are(ids + 2, 1, 4, 1);
	U64_EQ(iter_ids(&m, ID(0, 0), ID(UINT64_MAX, UINT64_MAX), true, ids, 64), 3);
	ids_are(ids, 1, 4, 1);
	ids_are(ids + 2, 1, 1, 1);
}
END_TEST

START_TEST(test_entry_iter_stop_early)
{
	struct stream_meta m;
	struct stream_iter *it;
	struct stream_id id, s = {0, 0}, e = {UINT64_MAX, UINT64_MAX};
	struct st_buf f, fld, val;
	size_t pos = 0;

	create(0, "s", &m);
	add_grid(&m, 10);
	OK(stream_iter_create(tx, &m, &s, &e, true, &it));
	OK(stream_iter_next(it, &id, &f));
	ids_are(&id, 1, 9, 1);
	ck_assert(stream_fields_next(&f, &pos, &fld, &val));
	ck_assert(buf_eq(&val, "9", 1));
	OK(stream_iter_next(it, &id, &f));
	ids_are(&id, 1, 8, 1);
	stream_iter_destroy(it); /* before the end */
	stream_iter_destroy(NULL);
}
END_TEST

/* Checks that fields holds exactly the pairs fv[0..nfv). */
static void
fields_are(const struct st_buf *fields, const struct st_buf *fv, size_t nfv)
{
	struct st_buf f, v;
	size_t pos = 0, i = 0;

	U64_EQ(stream_fields_count(fields), nfv / 2);
	while (stream_fields_next(fields, &pos, &f, &v)) {
		ck_assert_uint_lt(i, nfv);
		ck_assert_msg(buf_eq(&f, fv[i].data, fv[i].len), "field %zu differs", i / 2);
		ck_assert_msg(
			buf_eq(&v, fv[i + 1].data, fv[i + 1].len), "value %zu differs", i / 2);
		i += 2;
	}
	U64_EQ(i, nfv);
	U64_EQ(pos, fields->len); /* the walk consumed the whole row */
}

START_TEST(test_entry_fields_binary)
{
	static const char bin[] = {'\0', 'a', '\0', '\xff', '\0'};
	struct st_buf fv[8] = {
		B("plain"),
		B("value"),
		{bin, sizeof(bin)},
		{bin + 1, 3},
		B("empty"),
		{"", 0},
		{"", 0},
		B("empty field"),
	};
	struct stream_meta m;
	struct stream_id id = {7, 7}, got_id;
	struct st_buf fields;
	struct stream_iter *it;

	create(0, "s", &m);
	add_fv(&m, 7, 7, fv, 8);
	OK(stream_get_entry(tx, &m, &id, &fields));
	fields_are(&fields, fv, 8);
	OK(stream_iter_create(tx, &m, &id, &id, false, &it));
	OK(stream_iter_next(it, &got_id, &fields));
	fields_are(&fields, fv, 8);
	stream_iter_destroy(it);
	id.seq = 8;
	FAILS(stream_get_entry(tx, &m, &id, &fields), ECHD_ENOTFOUND);

	reopen();
	id.seq = 7;
	OK(stream_get_entry(tx, &m, &id, &fields));
	fields_are(&fields, fv, 8);
}
END_TEST

START_TEST(test_entry_fields_many)
{
	enum { PAIRS = 1000 };
	struct st_buf *fv = calloc(2 * PAIRS, sizeof(*fv));
	char *text = malloc(2 * PAIRS * 16);
	struct stream_meta m;
	struct stream_id id = {1, 0};
	struct st_buf fields;

	ck_assert_ptr_nonnull(fv);
	ck_assert_ptr_nonnull(text);
	for (unsigned i = 0; i < 2 * PAIRS; i++) {
		char *p = text + i * 16;
		int len = snprintf(p, 16, "%c%u", i % 2 ? 'v' : 'f', i * 7919u);
		fv[i].data = p;
		fv[i].len = (size_t)len - i % 5; /* varying lengths, some empty */
	}
	create(0, "s", &m);
	add_fv(&m, 1, 0, fv, 2 * PAIRS);
	add_fv(&m, 2, 0, fv, 2); /* a short one after it */
	OK(stream_get_entry(tx, &m, &id, &fields));
	fields_are(&fields, fv, 2 * PAIRS);
	id.ms = 2;
	OK(stream_get_entry(tx, &m, &id, &fields));
	fields_are(&fields, fv, 2);
	check_rows(&m);
	free(fv);
	free(text);
}
END_TEST

START_TEST(test_entry_fields_malformed)
{
	/* nfields 1, field "ab", value length 5 but 2 bytes follow */
	static const unsigned char row[] = {0, 0, 0, 1, 0, 0, 0, 2, 'a', 'b', 0, 0, 0, 5, 'x', 'y'};
	static const unsigned char ok[] = {0, 0, 0, 1, 0, 0, 0, 2, 'a', 'b', 0, 0, 0, 2, 'x', 'y'};
	struct st_buf r = {row, sizeof(row)}, f, v;
	size_t pos = 0;

	U64_EQ(stream_fields_count(&r), 1);
	ck_assert(!stream_fields_next(&r, &pos, &f, &v));
	/* heap copies of exact length, so that a sanitizer sees any over-read */
	for (size_t len = 0; len < sizeof(ok); len++) {
		unsigned char *copy = malloc(len ? len : 1);
		struct st_buf cut = {copy, len};

		ck_assert_ptr_nonnull(copy);
		memcpy(copy, ok, len);
		pos = 0;
		ck_assert_msg(!stream_fields_next(&cut, &pos, &f, &v), "truncated to %zu", len);
		free(copy);
	}
	r.data = ok;
	r.len = sizeof(ok);
	pos = 0;
	ck_assert(stream_fields_next(&r, &pos, &f, &v));
	ck_assert(buf_eq(&f, "ab", 2));
	ck_assert(buf_eq(&v, "xy", 2));
	ck_assert(!stream_fields_next(&r, &pos, &f, &v));
	r.len = 2;
	U64_EQ(stream_fields_count(&r), 0);
}
END_TEST

START_TEST(test_entry_delete)
{
	struct stream_meta m;
	struct stream_id id;
	struct st_buf f;

	create(0, "s", &m);
	add_grid(&m, 6); /* 10-0 10-1 10-2 11-0 11-1 11-2 */

	id = grid(2);
	OK(stream_delete_entry(tx, &m, &id));
	U64_EQ(m.length, 5);
	ID_EQ(m.first, 10, 0);
	ID_EQ(m.max_deleted, 10, 2);
	ID_EQ(m.last, 11, 2);
	U64_EQ(m.entries_added, 6);
	FAILS(stream_get_entry(tx, &m, &id, &f), ECHD_ENOTFOUND);
	check_rows(&m);

	/* deleting the first entry moves first */
	id = grid(0);
	OK(stream_delete_entry(tx, &m, &id));
	U64_EQ(m.length, 4);
	ID_EQ(m.first, 10, 1);
	ID_EQ(m.max_deleted, 10, 2); /* an older id does not lower it */
	id = grid(1);
	OK(stream_delete_entry(tx, &m, &id));
	ID_EQ(m.first, 11, 0); /* skips the deleted 10-2 */
	check_rows(&m);

	/* missing ids change nothing */
	id = grid(2);
	FAILS(stream_delete_entry(tx, &m, &id), ECHD_ENOTFOUND);
	id = ID(10, 5);
	FAILS(stream_delete_entry(tx, &m, &id), ECHD_ENOTFOUND);
	id = ID(99, 0);
	FAILS(stream_delete_entry(tx, &m, &id), ECHD_ENOTFOUND);
	U64_EQ(m.length, 3);
	ID_EQ(m.max_deleted, 10, 2);

	/* the last entry: last stays, max_deleted follows */
	id = grid(5);
	OK(stream_delete_entry(tx, &m, &id));
	ID_EQ(m.max_deleted, 11, 2);
	ID_EQ(m.last, 11, 2);
	ID_EQ(m.first, 11, 0);
	check_rows(&m);
}
END_TEST

START_TEST(test_entry_delete_all)
{
	struct stream_meta m, got;
	struct stream_id id;

	node_entries = 3;
	create(0, "s", &m);
	add_grid(&m, 7); /* nodes of 3, 3, 1 */
	U64_EQ(m.nodes, 3);
	for (unsigned i = 0; i < 7; i++) {
		id = grid((i * 3) % 7); /* 0 3 6 2 5 1 4 */
		OK(stream_delete_entry(tx, &m, &id));
		check_rows(&m);
	}
	U64_EQ(m.length, 0);
	ID_EQ(m.first, 0, 0);
	ID_EQ(m.last, 12, 0);
	ID_EQ(m.max_deleted, 12, 0);
	U64_EQ(m.entries_added, 7);
	U64_EQ(m.nodes, 0);
	ID_EQ(m.tail_node, 0, 0);
	save(0, "s", &m);
	OK(lookup(0, "s", &got));
	meta_eq(&got, &m);

	/* appending again starts a node */
	add(&m, 20, 0, "again");
	U64_EQ(m.nodes, 1);
	ID_EQ(m.tail_node, 20, 0);
	ID_EQ(m.first, 20, 0);
	U64_EQ(m.length, 1);
	check_rows(&m);
}
END_TEST

/* XDEL of a whole tail node: the previous node is the tail again, and it
 * counts deleted entries towards stream-node-max-entries (Redis, with
 * stream-node-max-entries 10: XADD a 1-1..15-1, XDEL a 11-1 12-1 ->
 * XADD 16-1..22-1 -> radix-tree-keys 3; XADD b 1-1..15-1, XDEL
 * 11-1..15-1 -> 1 key; XDEL b 5-1, XADD b 16-1 -> 2 keys). */
START_TEST(test_entry_delete_node_bookkeeping)
{
	struct stream_meta a, b;
	struct stream_id id;

	node_entries = 10;
	create(0, "a", &a);
	add_range(&a, 1, 15);
	id = ID(11, 1);
	OK(stream_delete_entry(tx, &a, &id));
	id = ID(12, 1);
	OK(stream_delete_entry(tx, &a, &id));
	add_range(&a, 16, 20);
	U64_EQ(a.nodes, 2);
	add_range(&a, 21, 22);
	U64_EQ(a.nodes, 3);
	U64_EQ(a.length, 20);
	ID_EQ(a.tail_node, 21, 1);
	check_rows(&a);

	create(0, "b", &b);
	add_range(&b, 1, 15);
	for (uint64_t i = 11; i <= 15; i++) {
		id = ID(i, 1);
		OK(stream_delete_entry(tx, &b, &id));
	}
	U64_EQ(b.nodes, 1);
	ID_EQ(b.tail_node, 1, 1);
	check_rows(&b);
	id = ID(5, 1);
	OK(stream_delete_entry(tx, &b, &id));
	add_range(&b, 16, 16);
	U64_EQ(b.nodes, 2);
	ID_EQ(b.tail_node, 16, 1);
	U64_EQ(b.length, 10);
	check_rows(&b);
}
END_TEST

static Suite *
entries_suite(void)
{
	Suite *s = suite_create("entries");
	TCase *tc;

	tc = tcase_create("append");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_entry_append_meta);
	tcase_add_test(tc, test_entry_append_count_nodes);
	suite_add_tcase(s, tc);

	tc = tcase_create("iterate");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_entry_iter_full);
	tcase_add_test(tc, test_entry_iter_ranges);
	tcase_add_test(tc, test_entry_iter_empty_and_deleted);
	tcase_add_test(tc, test_entry_iter_stop_early);
	suite_add_tcase(s, tc);

	tc = tcase_create("fields");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_entry_fields_binary);
	tcase_add_test(tc, test_entry_fields_many);
	tcase_add_test(tc, test_entry_fields_malformed);
	suite_add_tcase(s, tc);

	tc = tcase_create("delete");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_entry_delete);
	tcase_add_test(tc, test_entry_delete_all);
	tcase_add_test(tc, test_entry_delete_node_bookkeeping);
	suite_add_tcase(s, tc);
	return s;
}

/* ---- trimming ----------------------------------------------------------- */

/* Every case starts from XADD t i-1 f v<i> for i in 1..95 with
 * stream-node-max-entries 10 (so nodes of 10 and a tail of 5), then runs
 * XTRIM; the expectations are what Redis answered:
 *   XTRIM t <args> -> removed, XLEN, radix-tree-keys, first id. */
struct trim_case {
	const char *what;
	struct stream_trim tr;
	uint64_t removed, length, nodes, first_ms;
};

static const struct trim_case trim_cases[] = {
	{"MAXLEN ~ 50", {STREAM_TRIM_MAXLEN, true, 50, {0, 0}, 0}, 40, 55, 6, 41},
	{"MAXLEN = 50", {STREAM_TRIM_MAXLEN, false, 50, {0, 0}, 0}, 45, 50, 6, 46},
	{"MAXLEN ~ 95", {STREAM_TRIM_MAXLEN, true, 95, {0, 0}, 0}, 0, 95, 10, 1},
	{"MAXLEN = 200", {STREAM_TRIM_MAXLEN, false, 200, {0, 0}, 0}, 0, 95, 10, 1},
	{"MAXLEN ~ 85", {STREAM_TRIM_MAXLEN, true, 85, {0, 0}, 0}, 10, 85, 9, 11},
	{"MAXLEN ~ 86", {STREAM_TRIM_MAXLEN, true, 86, {0, 0}, 0}, 0, 95, 10, 1},
	{"MAXLEN = 94", {STREAM_TRIM_MAXLEN, false, 94, {0, 0}, 0}, 1, 94, 10, 2},
	{"MAXLEN ~ 3", {STREAM_TRIM_MAXLEN, true, 3, {0, 0}, 0}, 90, 5, 1, 91},
	{"MAXLEN = 3", {STREAM_TRIM_MAXLEN, false, 3, {0, 0}, 0}, 92, 3, 1, 93},
	{"MINID ~ 46-1", {STREAM_TRIM_MINID, true, 0, {46, 1}, 0}, 40, 55, 6, 41},
	{"MINID = 46-1", {STREAM_TRIM_MINID, false, 0, {46, 1}, 0}, 45, 50, 6, 46},
	{"MINID ~ 41-1", {STREAM_TRIM_MINID, true, 0, {41, 1}, 0}, 40, 55, 6, 41},
	{"MINID ~ 40-2", {STREAM_TRIM_MINID, true, 0, {40, 2}, 0}, 40, 55, 6, 41},
	{"MINID = 40-2", {STREAM_TRIM_MINID, false, 0, {40, 2}, 0}, 40, 55, 6, 41},
	{"MINID = 1-1", {STREAM_TRIM_MINID, false, 0, {1, 1}, 0}, 0, 95, 10, 1},
	{"MINID = 0-0", {STREAM_TRIM_MINID, false, 0, {0, 0}, 0}, 0, 95, 10, 1},
	{"MAXLEN ~ 50 LIMIT 25", {STREAM_TRIM_MAXLEN, true, 50, {0, 0}, 25}, 20, 75, 8, 21},
	{"MAXLEN ~ 50 LIMIT 10", {STREAM_TRIM_MAXLEN, true, 50, {0, 0}, 10}, 10, 85, 9, 11},
	{"MAXLEN ~ 50 LIMIT 5", {STREAM_TRIM_MAXLEN, true, 50, {0, 0}, 5}, 0, 95, 10, 1},
	{"MAXLEN ~ 50 LIMIT 1000", {STREAM_TRIM_MAXLEN, true, 50, {0, 0}, 1000}, 40, 55, 6, 41},
	{"MINID ~ 96 LIMIT 30", {STREAM_TRIM_MINID, true, 0, {96, 0}, 30}, 30, 65, 7, 31},
	{"MAXLEN ~ 0", {STREAM_TRIM_MAXLEN, true, 0, {0, 0}, 0}, 95, 0, 0, 0},
	{"MAXLEN = 0", {STREAM_TRIM_MAXLEN, false, 0, {0, 0}, 0}, 95, 0, 0, 0},
	{"MINID ~ 96", {STREAM_TRIM_MINID, true, 0, {96, 0}, 0}, 95, 0, 0, 0},
	{"MINID = 96", {STREAM_TRIM_MINID, false, 0, {96, 0}, 0}, 95, 0, 0, 0},
	{"MINID = 95-2", {STREAM_TRIM_MINID, false, 0, {95, 2}, 0}, 95, 0, 0, 0},
	{"NONE", {STREAM_TRIM_NONE, false, 0, {0, 0}, 0}, 0, 95, 10, 1},
};

static void
trim_case_run(const struct trim_case *c)
{
	struct stream_meta m, got;
	uint64_t removed = 12345;
	struct stream_id ids[100];
	size_t n;

	node_entries = 10;
	create(0, "t", &m);
	add_range(&m, 1, 95);
	U64_EQ(m.nodes, 10);
	OK(stream_trim(tx, &m, &c->tr, &removed));
	ck_assert_msg(removed == c->removed, "%s: removed %" PRIu64 ", Redis %" PRIu64, c->what,
		removed, c->removed);
	ck_assert_msg(m.length == c->length, "%s: length %" PRIu64 ", Redis %" PRIu64, c->what,
		m.length, c->length);
	ck_assert_msg(m.nodes == c->nodes, "%s: nodes %" PRIu64 ", Redis %" PRIu64, c->what,
		m.nodes, c->nodes);
	ck_assert_msg(m.first.ms == c->first_ms && m.first.seq == (c->first_ms ? 1 : 0),
		"%s: first %" PRIu64 "-%" PRIu64 ", Redis %" PRIu64, c->what, m.first.ms,
		m.first.seq, c->first_ms);
	/* trimming never touches these */
	ID_EQ(m.last, 95, 1);
	ID_EQ(m.max_deleted, 0, 0);
	U64_EQ(m.entries_added, 95);
	check_rows(&m);

	/* the survivors are exactly the newest `length` entries */
	n = iter_ids(&m, ID(0, 0), ID(UINT64_MAX, UINT64_MAX), false, ids, 100);
	U64_EQ(n, c->length);
	for (size_t i = 0; i < n; i++) {
		ID_EQ(ids[i], 96 - c->length + i, 1);
	}
	save(0, "t", &m);
	OK(lookup(0, "t", &got));
	meta_eq(&got, &m);
}

START_TEST(test_trim_case)
{
	trim_case_run(&trim_cases[_i]);
}
END_TEST

/* After trimming everything, appending starts over with one node. */
START_TEST(test_trim_everything_then_append)
{
	struct stream_trim all = {STREAM_TRIM_MAXLEN, true, 0, {0, 0}, 0};
	struct stream_trim exact = {STREAM_TRIM_MAXLEN, false, 3, {0, 0}, 0};
	struct stream_meta m;
	uint64_t removed;

	node_entries = 10;
	create(0, "t", &m);
	add_range(&m, 1, 95);
	OK(stream_trim(tx, &m, &all, &removed));
	U64_EQ(removed, 95);
	U64_EQ(m.nodes, 0);
	ID_EQ(m.tail_node, 0, 0);
	ID_EQ(m.first, 0, 0);
	check_rows(&m);
	OK(stream_trim(tx, &m, &all, &removed)); /* empty: nothing to do */
	U64_EQ(removed, 0);

	add_range(&m, 100, 100);
	U64_EQ(m.nodes, 1);
	ID_EQ(m.tail_node, 100, 1);
	ID_EQ(m.first, 100, 1);
	U64_EQ(m.length, 1);
	add_range(&m, 101, 125);
	U64_EQ(m.nodes, 3);
	ID_EQ(m.tail_node, 120, 1);
	check_rows(&m);

	/* exact trim into the tail node (120..125): it keeps counting the
	 * entries deleted from it, as Redis does (XADD 100-1..125-1, XTRIM
	 * MAXLEN 3 -> 23; XADD 126-1..129-1 -> 1 key; XADD 130-1 -> 2 keys) */
	OK(stream_trim(tx, &m, &exact, &removed));
	U64_EQ(removed, 23);
	U64_EQ(m.length, 3);
	ID_EQ(m.first, 123, 1);
	U64_EQ(m.nodes, 1);
	ID_EQ(m.tail_node, 120, 1);
	check_rows(&m);
	add_range(&m, 126, 129);
	U64_EQ(m.nodes, 1);
	add_range(&m, 130, 130);
	U64_EQ(m.nodes, 2);
	ID_EQ(m.tail_node, 130, 1);
	check_rows(&m);
}
END_TEST

/* Trimming after XDEL: Redis counts only live entries against LIMIT and
 * MAXLEN (XADD 1-1..95-1, XDEL 1-1..5-1, then XTRIM MAXLEN ~ 50 LIMIT 15
 * -> 15 removed, XLEN 75, 8 keys; XTRIM MAXLEN 50 -> 40, 50, 6 keys, first
 * 46-1). */
START_TEST(test_trim_after_delete)
{
	struct stream_trim lim = {STREAM_TRIM_MAXLEN, true, 50, {0, 0}, 15};
	struct stream_trim exact = {STREAM_TRIM_MAXLEN, false, 50, {0, 0}, 0};
	struct stream_meta a, b;
	struct stream_id id;
	uint64_t removed;

	node_entries = 10;
	create(0, "a", &a);
	create(0, "b", &b);
	add_range(&a, 1, 95);
	add_range(&b, 1, 95);
	for (uint64_t i = 1; i <= 5; i++) {
		id = ID(i, 1);
		OK(stream_delete_entry(tx, &a, &id));
		OK(stream_delete_entry(tx, &b, &id));
	}
	OK(stream_trim(tx, &a, &lim, &removed));
	U64_EQ(removed, 15);
	U64_EQ(a.length, 75);
	U64_EQ(a.nodes, 8);
	ID_EQ(a.first, 21, 1);
	ID_EQ(a.max_deleted, 5, 1);
	check_rows(&a);

	OK(stream_trim(tx, &b, &exact, &removed));
	U64_EQ(removed, 40);
	U64_EQ(b.length, 50);
	U64_EQ(b.nodes, 6);
	ID_EQ(b.first, 46, 1);
	check_rows(&b);
}
END_TEST

/* Exact MINID inside a node whose live entries all fall below minid: the
 * node stays (Redis keeps the empty listpack), and a later trim removes
 * it. The node's last entry was XDELed, so its last id still counts. */
START_TEST(test_trim_minid_empties_node)
{
	struct stream_trim tr = {STREAM_TRIM_MINID, false, 0, {10, 1}, 0};
	struct stream_trim more = {STREAM_TRIM_MAXLEN, false, 3, {0, 0}, 0};
	struct stream_meta m;
	struct stream_id id = {10, 1};
	uint64_t removed;

	node_entries = 10;
	create(0, "t", &m);
	add_range(&m, 1, 15);
	OK(stream_delete_entry(tx, &m, &id));
	OK(stream_trim(tx, &m, &tr, &removed));
	U64_EQ(removed, 9);
	U64_EQ(m.length, 5);
	U64_EQ(m.nodes, 2);
	ID_EQ(m.first, 11, 1);
	check_rows(&m);
	OK(stream_trim(tx, &m, &more, &removed));
	U64_EQ(removed, 2);
	U64_EQ(m.nodes, 1);
	ID_EQ(m.first, 13, 1);
	check_rows(&m);
}
END_TEST

/* Hooks that hold the even ids up to horizon (and every id past it), and
 * record what DELREF drops. */
struct fake_refs {
	uint64_t horizon;
	uint64_t dropped[64];
	unsigned ndropped;
};

static int
fake_held(void *ud, const struct stream_id *first, const struct stream_id *last, bool *held,
	bool *stop)
{
	struct fake_refs *f = ud;

	*stop = first->ms > f->horizon;
	*held = *stop || last->ms > f->horizon;
	for (uint64_t i = first->ms; i <= last->ms && !*held; i++) {
		*held = i % 2 == 0;
	}
	return 0;
}

static int
fake_drop(void *ud, const struct stream_id *id)
{
	struct fake_refs *f = ud;

	ck_assert_uint_lt(f->ndropped, 64);
	f->dropped[f->ndropped++] = id->ms;
	return 0;
}

/* ACKED skips held entries across nodes and stops at the horizon; a node
 * it empties stays (as Redis keeps the listpack) until a trim removes it. */
START_TEST(test_trim_acked_hooks)
{
	struct fake_refs f = {.horizon = 12};
	struct stream_refs refs = {STREAM_REF_ACKED, fake_held, fake_drop, &f};
	struct stream_trim tr = {STREAM_TRIM_MAXLEN, false, 0, {0, 0}, 0, &refs};
	struct stream_meta m;
	uint64_t removed, n;

	node_entries = 5;
	create(0, "t", &m);
	add_range(&m, 1, 20); /* nodes 1..5 6..10 11..15 16..20 */
	OK(stream_trim(tx, &m, &tr, &removed));
	U64_EQ(removed, 6); /* 1 3 5 7 9 11; 13 is past the horizon */
	U64_EQ(m.length, 14);
	U64_EQ(m.nodes, 4);
	ID_EQ(m.first, 2, 1);
	U64_EQ(f.ndropped, 0);
	check_rows(&m);
	OK(stream_count_after(tx, &m, &(struct stream_id){7, 1}, &n));
	U64_EQ(n, 11); /* 8 10 12 13..20 */
	/* MINID stops at its threshold before the horizon */
	f.horizon = 100;
	tr = (struct stream_trim){STREAM_TRIM_MINID, false, 0, {14, 0}, 0, &refs};
	OK(stream_trim(tx, &m, &tr, &removed));
	U64_EQ(removed, 1); /* 13 */
	check_rows(&m);
	/* DELREF: every removed entry is reported, whole nodes too; ~ does
	 * not spare the node the target cuts through (Redis' streamTrim()) */
	refs.policy = STREAM_REF_DEL;
	tr = (struct stream_trim){STREAM_TRIM_MAXLEN, true, 3, {0, 0}, 1000, &refs};
	OK(stream_trim(tx, &m, &tr, &removed));
	U64_EQ(removed, 10); /* nodes 1..5 (2 4), 6..10 (6 8 10), 11..15 (12 14 15), 16 17 */
	U64_EQ(f.ndropped, 10);
	U64_EQ(f.dropped[0], 2);
	U64_EQ(f.dropped[9], 17);
	U64_EQ(m.length, 3);
	U64_EQ(m.nodes, 1);
	ID_EQ(m.first, 18, 1);
	check_rows(&m);
}
END_TEST

static Suite *
trim_suite(void)
{
	Suite *s = suite_create("trim");
	TCase *tc;

	tc = tcase_create("as_redis");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(
		tc, test_trim_case, 0, (int)(sizeof(trim_cases) / sizeof(trim_cases[0])));
	suite_add_tcase(s, tc);

	tc = tcase_create("bookkeeping");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_trim_everything_then_append);
	tcase_add_test(tc, test_trim_minid_empties_node);
	tcase_add_test(tc, test_trim_acked_hooks);
	suite_add_tcase(s, tc);

	tc = tcase_create("after_delete");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_trim_after_delete);
	suite_add_tcase(s, tc);
	return s;
}

/* ---- node boundaries by bytes ------------------------------------------- */

/* Redis starts a node when lpBytes(tail) + the new entry's field and value
 * lengths >= stream-node-max-bytes. With one field "f" and an L-byte
 * value the master entry costs 18 bytes and each entry L + 12, so with
 * 4096 bytes the 4th entry still fits while 3 * (L + 12) + 18 + L + 1 <
 * 4096, i.e. L <= 1010. Redis (stream-node-max-entries 0, XADD s i-0 f
 * <L bytes> for i in 1..12): L = 1000 and 1010 -> 3 radix-tree-keys;
 * L = 1011 and 1012 -> 4. */
START_TEST(test_nodes_bytes_1000)
{
	struct stream_meta m;

	node_entries = 0;
	create(0, "s", &m);
	add_sized(&m, 4, 1000);
	U64_EQ(m.nodes, 1);
	add_sized(&m, 1, 1000);
	U64_EQ(m.nodes, 2);
	ID_EQ(m.tail_node, 5, 0);
	add_sized(&m, 7, 1000);
	U64_EQ(m.nodes, 3);
	check_rows(&m);
}
END_TEST

START_TEST(test_nodes_bytes_edge)
{
	struct stream_meta a, b;

	node_entries = 0;
	create(0, "a", &a);
	create(0, "b", &b);
	add_sized(&a, 12, 1010);
	add_sized(&b, 12, 1011);
	U64_EQ(a.nodes, 3);
	U64_EQ(b.nodes, 4);
	ID_EQ(b.tail_node, 10, 0);
	check_rows(&a);
	check_rows(&b);
}
END_TEST

/* A value of node_max_bytes or more always gets its own node; 0 means
 * no byte limit beyond Redis' 1 GiB listpack cap. */
START_TEST(test_nodes_bytes_big_values)
{
	struct stream_meta a, b;

	node_entries = 0;
	create(0, "a", &a);
	add_sized(&a, 3, 5000);
	U64_EQ(a.nodes, 3);
	node_bytes = 0;
	node_entries = 100;
	create(0, "b", &b);
	add_sized(&b, 3, 5000);
	U64_EQ(b.nodes, 1);
	check_rows(&a);
	check_rows(&b);
}
END_TEST

/* Small entries: the master entry's live counter grows from one to two
 * bytes' encoding at 128. Redis (stream-node-max-entries 0, XADD q 5-<i>
 * a 1 for i in 1..1000): new nodes at entries 384 and 767. */
START_TEST(test_nodes_bytes_small_entries)
{
	struct stream_meta m;
	struct st_buf fv[2] = {B("a"), B("1")};

	node_entries = 0;
	create(0, "q", &m);
	for (uint64_t i = 1; i <= 1000; i++) {
		add_fv(&m, 5, i, fv, 2);
		if (i == 383 || i == 766) {
			U64_EQ(m.nodes, i == 383 ? 1 : 2);
		}
		if (i == 384 || i == 767) {
			U64_EQ(m.nodes, i == 384 ? 2 : 3);
			ID_EQ(m.tail_node, 5, i);
		}
	}
	U64_EQ(m.nodes, 3);
	check_rows(&m);
}
END_TEST

/* ---- a generator replayed against Redis --------------------------------
 *
 * A pseudo-random mix of ids (ms and seq deltas of every integer width,
 * negative seq deltas), field sets (the master's, fewer, more, reordered,
 * an integer field name) and values (integers at both ends of every
 * listpack integer width, strings that look like integers but are not,
 * string lengths at every string-encoding and backlen boundary), with
 * XDELs. The same generator, ported to Python, sent the same XADD/XDEL
 * sequence to redis-server 7.0.15 to produce the tables below (XLEN and
 * XINFO STREAM's radix-tree-keys). */
struct gen {
	uint64_t x, ms, seq;
	struct stream_id ids[512];
	unsigned n;
	unsigned special;    /* round robin over the special string lengths */
	unsigned force_many; /* every entry gets this many fields f0, f1, ... */
	char vals[3][16384];
	char names[160][8];
	struct st_buf fv[2 * 160];
	size_t nfv;
};

static uint32_t
gen_next(struct gen *g)
{
	g->x = g->x * 6364136223846793005u + 1442695040888963407u;
	return (uint32_t)(g->x >> 33);
}

static void
gen_init(struct gen *g, uint64_t seed, unsigned force_many)
{
	g->x = seed;
	g->ms = 1000;
	g->seq = 0;
	g->n = 0;
	g->special = 0;
	g->force_many = force_many;
	for (unsigned j = 0; j < 160; j++) {
		snprintf(g->names[j], sizeof(g->names[j]), "f%u", j);
	}
}

/* The next entry: *id and g->fv[0..g->nfv). */
static void
gen_entry(struct gen *g, struct stream_id *id)
{
	static const char *const table[] = {"", "0", "127", "128", "-1", "4095", "4096", "-4096",
		"-4097", "32767", "32768", "-32768", "-32769", "8388607", "8388608", "-8388608",
		"-8388609", "2147483647", "2147483648", "-2147483648", "-2147483649",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808", "007", "-0"};
	static const size_t special[] = {62, 63, 64, 65, 124, 125, 126, 127, 4094, 4095, 4096, 4097,
		16376, 16377, 16378, 16379};
	/* the last one stands for f0 .. f<n - 1>, n from many[] */
	static const char *const pats[][4] = {{"a", "b", NULL}, {"a", "b", NULL}, {"a", "b", NULL},
		{"a", "b", NULL}, {"a", "b", NULL}, {"a", NULL}, {"a", "b", "c", NULL},
		{"b", "a", NULL}, {"7", "b", NULL}, {NULL}};
	static const unsigned many[] = {61, 62, 63, 124, 125, 126, 130};
	const char *const *pat = NULL;
	unsigned nf = g->force_many;

	switch (gen_next(g) % 8) {
	case 0:
	case 1:
		g->seq += 1;
		break;
	case 2:
		g->seq += 200;
		break;
	case 3:
		g->ms += 1;
		g->seq = 0;
		break;
	case 4:
		g->ms += 150;
		g->seq = gen_next(g) % 5;
		break;
	case 5:
		g->ms += 5000;
		g->seq = 0;
		break;
	case 6:
		g->ms += 10000000;
		g->seq = 7;
		break;
	default:
		g->ms += 3000000000u;
		g->seq = 0;
		break;
	}
	g->nfv = 0;
	if (nf == 0) {
		pat = pats[gen_next(g) % 10];
		if (pat[0] == NULL) {
			nf = many[gen_next(g) % 7];
		}
	}
	if (nf != 0) {
		ck_assert_uint_le(nf, sizeof(g->names) / sizeof(g->names[0]));
		for (unsigned j = 0; j < nf; j++) {
			g->fv[g->nfv++] = B(g->names[j]);
			g->fv[g->nfv++] = B(table[gen_next(g) % 26]);
		}
		pat = pats[9];
	}
	for (unsigned f = 0; pat[f] != NULL; f++) {
		unsigned k = gen_next(g) % 29;
		size_t len;
		char c;

		g->fv[g->nfv++] = B(pat[f]);
		if (k < 26) {
			g->fv[g->nfv++] = B(table[k]);
			continue;
		}
		if (k == 26) {
			len = gen_next(g) % 700;
			c = 'v';
		} else if (k == 27) {
			len = 60 + gen_next(g) % 8;
			c = 'w';
		} else {
			len = special[g->special++ % 16];
			c = 'z';
		}
		memset(g->vals[f], c, len);
		g->fv[g->nfv].data = g->vals[f];
		g->fv[g->nfv++].len = len;
	}
	ck_assert_uint_lt(g->n, sizeof(g->ids) / sizeof(g->ids[0]));
	*id = g->ids[g->n++] = ID(g->ms, g->seq);
}

/* After an entry: whether to XDEL, and which (possibly already gone) id. */
static bool
gen_delete(struct gen *g, unsigned delprob, struct stream_id *out)
{
	if (delprob == 0 || g->n < 9 || gen_next(g) % delprob != 0) {
		return false;
	}
	*out = g->ids[gen_next(g) % g->n];
	return true;
}

static void
gen_apply_delete(struct gen *g, struct stream_meta *m, unsigned delprob)
{
	struct stream_id d;

	if (gen_delete(g, delprob, &d)) {
		int rc = stream_delete_entry(tx, m, &d);
		ck_assert_msg(rc == 0 || rc == ECHD_ENOTFOUND, "xdel: %d", rc);
	}
}

/* want[] holds XLEN and radix-tree-keys after every 10th XADD, with
 * CONFIG SET stream-node-max-entries/-bytes as in the case. */
struct mix_case {
	uint64_t seed;
	unsigned n;
	uint64_t max_entries, max_bytes;
	unsigned delprob; /* XDEL a random earlier id with probability 1/delprob */
	const uint64_t (*want)[2];
};

static const uint64_t mix1[][2] = {{10, 1}, {20, 2}, {30, 2}, {40, 2}, {50, 3}, {60, 4}, {70, 4},
	{80, 4}, {90, 5}, {100, 8}, {110, 10}, {120, 10}, {130, 12}, {140, 12}, {150, 12},
	{160, 12}, {170, 16}, {180, 17}, {190, 19}, {200, 22}, {210, 22}, {220, 22}, {230, 22},
	{240, 23}, {250, 23}, {260, 23}, {270, 24}, {280, 24}, {290, 25}, {300, 25}};
static const uint64_t mix2[][2] = {{9, 2}, {17, 5}, {26, 6}, {32, 8}, {39, 10}, {48, 12}, {58, 15},
	{64, 15}, {72, 17}, {80, 18}, {90, 20}, {100, 22}, {107, 25}, {115, 30}, {125, 34},
	{130, 35}, {138, 38}, {147, 39}, {157, 43}, {166, 45}, {172, 47}, {177, 48}, {184, 50},
	{191, 51}, {199, 52}, {209, 54}, {215, 56}, {221, 57}, {230, 60}, {238, 62}};
static const uint64_t mix3[][2] = {{10, 3}, {18, 7}, {25, 9}, {32, 10}, {41, 11}, {49, 15},
	{58, 16}, {66, 17}, {73, 18}, {83, 20}, {89, 23}, {97, 25}, {105, 25}, {113, 27}, {120, 31},
	{130, 31}, {139, 34}, {146, 34}, {152, 33}, {160, 39}, {168, 40}, {176, 40}, {183, 42},
	{190, 41}, {200, 43}, {208, 45}, {217, 48}, {224, 50}, {233, 50}, {241, 51}, {249, 53},
	{257, 55}, {265, 59}, {273, 63}, {281, 66}, {290, 71}, {297, 71}, {303, 73}, {310, 74},
	{318, 77}};
static const uint64_t exact1[] = {51, 73, 100, 141, 157, 247, 276, 292, 324, 348, 378, 417, 490,
	514, 547, 583, 616, 658, 684, 713, 1965, 2077, 2081, 2110, 2141, 2178, 2206, 2253, 2341,
	2372, 2453, 2490, 2517, 2555, 2591, 2627, 2659, 2691, 3304, 3392, 3423, 3447, 4020, 4117,
	4144, 4171, 4271, 5641, 6954, 7073, 7123, 7156, 7254, 7306, 7391, 7419, 7459, 7470, 7498,
	8101, 8169, 8200, 8234, 8863, 8942, 8970, 9548, 9636, 9662, 9674, 10971, 11110, 12414,
	13063, 13154, 14481, 14643, 14693, 14723, 14749, 14787, 16122, 16286, 16334, 16359, 16388,
	16412, 17668, 17749, 17791, 17833, 19142, 19267, 19296, 19335, 19376, 19393, 19433, 19457,
	19498, 20789, 21543, 22284, 22375, 22529, 22570, 22583, 23943, 24078, 24232, 24256, 24286,
	24323, 24355, 24374, 24420, 24468, 24493, 24514};
static const uint64_t exact2[] = {231, 261, 299, 316, 1580, 1671, 1700, 1729, 1752, 3139, 3392,
	3525, 3578, 3622, 3666, 3675, 3705, 3745, 4389, 4499, 4525, 4536, 5799, 5960, 5992, 6013,
	6055, 6078, 6099, 6142, 6167, 6257, 6304, 6333, 6353, 6393, 6415, 6450, 6492, 6511, 6541,
	6584, 6633, 6650, 7967, 8054, 8076, 8101, 8140, 8167, 9462, 9578, 10240, 10378, 10415,
	10458, 10467, 10491, 10531, 10610, 10638, 11366, 11451, 11483, 12686, 12815, 12889, 12923,
	13009, 13037, 13073, 13103, 13140, 13729, 13823, 13849, 13875, 13908, 13922, 13956, 14108,
	14269, 14896, 15379, 15427, 16081, 16171, 16206, 16241, 16253, 16795, 16898, 16936, 16967,
	16988, 17010, 17043, 17089, 17117, 17141, 17167, 17190, 17218, 17359, 17417, 17456, 17477,
	17500, 18057, 18161, 18206, 18286, 18513, 18547, 18571, 19758, 19952, 19968, 20126, 20147,
	20201, 20228, 20260, 20298, 20336, 20378, 20411, 20878, 20910, 20931, 20962, 20981, 21007,
	21043, 21074, 22458, 23814, 23911, 23933, 28064, 28730, 28756, 28854, 28899, 28932, 28968,
	28987, 29013, 29046, 29083, 29724, 29782, 29814, 29841, 29867, 29906, 29948, 29998, 30029,
	30070, 30096, 30123, 30150, 30186, 30227, 30268, 30298, 30328, 30352, 31709, 31803, 31899,
	31918, 36041, 36082, 36120, 36344, 36383, 36412, 36446, 37134, 37171, 37197, 37237, 37755,
	41883, 41971, 42008, 42316, 42355, 42400, 42427, 42465, 43070, 43150, 43180, 44494, 45192,
	45296, 45322, 45344, 45377, 45412, 45435, 45459, 45495, 45519, 45549, 45576, 49710, 50096,
	50396, 50439, 50637, 50769, 50789, 50817, 50861, 52225, 52929, 52979, 53016, 53033, 53134,
	53157, 53184, 53211, 53229, 53274, 69663, 69718, 70307, 70329, 70959, 71028, 71051, 71101,
	71125, 71156, 71172, 71197, 71220, 71251, 71287, 71918, 71976, 88625, 105053, 105087,
	105129, 121590, 121648, 121668, 122306, 122406, 122434, 122576, 122620, 123066, 123096,
	123123, 123143, 123172, 123217, 123250, 123284, 123311, 123336, 123370, 123396, 123421,
	123444, 123485, 123524, 124175, 124229, 125528, 125637, 126271, 126339, 126375, 126395,
	126441, 126462, 126507, 126521, 126662, 126748, 126779, 126813, 126833, 126861, 128238,
	128855, 128947, 128969, 128994, 129036, 129066, 129682, 129770, 129858, 129884, 131155,
	131295, 132575, 132779, 133407, 133484, 133515, 133536, 133566, 133590, 133629, 133653,
	133678, 133704, 133730, 133820, 133854, 133881, 133910, 133951, 133982, 134032, 134050,
	134076, 134109, 134193, 134222, 134273, 134372, 134534, 134563, 134593, 135826, 135949,
	135963, 136012, 136031, 136069, 136105, 136127, 136170, 136316, 136349, 136400, 136410,
	136439, 136468, 136502, 136532, 136563, 136586, 136616, 136716, 136753, 136786, 136809,
	136840, 136896, 136924, 137077, 137100, 137270, 137285, 137846, 137888, 137933, 137964,
	137996, 138024, 138064, 139349, 139874, 139905, 139937, 139964, 140014, 140640, 140708,
	140732, 141291, 141320, 141406, 141435, 141814, 141974, 142011, 142096, 142126, 142155,
	142169, 142216, 142239, 142268, 142310, 142335, 142533};
static const uint64_t exact3[] = {605, 700, 1084, 1109, 1132, 1179, 1204, 1294, 1342, 1363, 1399,
	1440, 1468, 1493, 1525, 1858, 1887, 1910, 1932, 2606, 2735, 2762, 2794, 3092, 3185, 3210,
	3248, 3279, 3322, 3360, 3382, 3600, 3645, 4266, 4361, 4379, 4409, 4462, 4504, 4534, 4573,
	4585, 4622, 4646, 5127, 5355, 5384, 5473, 5501, 5519, 5555, 6822, 6960, 7003, 7022, 7049,
	7068, 7104, 7182, 7278, 7312, 7336, 7362, 7497, 7526, 7559, 7581, 7619, 7659, 7677, 9148,
	9254, 9302, 9334, 9349, 9388, 9417, 9444, 9470, 10781, 10872, 10896, 12145, 12312, 13007,
	13024, 13056, 13150, 13182, 13205, 13353, 14668, 14735, 15350, 15451, 15478, 15526, 16227,
	16376, 16401, 16450, 16489, 16636, 16675, 16735, 16757, 16800, 16842, 16907, 16923, 16971,
	17190, 18525, 18619, 18767, 18794, 18964, 23091, 27205, 27242, 27281, 27326, 27380, 27410,
	28650, 32891, 34186, 34312, 34350, 34378, 34561, 35135, 35252, 35283, 35302, 35336, 35372,
	35398, 35446, 35462, 35490, 35539, 35572, 35602, 36301, 36351, 40479, 40538, 40579, 41910,
	42050, 58452, 58485, 58524, 59196, 60546, 60640, 60674, 60699, 77102, 77139, 78329, 78532,
	78547, 78572, 79291, 80627, 80733, 97137, 97177, 97234, 97243, 97260, 97291, 97322, 97337,
	97371, 97409, 97448, 97466, 97494, 97584, 97640, 97670, 97690, 97706, 97741, 97832, 99093,
	100464, 100624, 100663, 101378, 101416, 101449, 101484, 101529, 101542, 101589, 101663,
	101693, 118086, 119433, 119539, 119558, 119597, 119621, 119669, 119706, 119791, 119829,
	119868, 119901, 119928, 119959, 119972, 120062, 120117, 121450, 121620, 121810, 121916,
	121942, 121973, 121993, 122038, 122126, 122158, 122201, 122242, 122265, 122307, 122904,
	122960, 122995, 123042, 123137, 123164, 123195, 123233, 123258, 123335, 123384, 123393,
	123426, 123466, 123518, 123675, 123715, 123765, 123776, 123830, 123830, 123862, 123894,
	123919, 123954, 124058, 124142, 124181, 124210, 124263, 124287, 124325, 124353, 124374,
	124402, 124440, 124470, 124512, 124537, 124556, 124787, 124812, 124889, 125048, 125145,
	125209, 125362, 125403, 125444, 125465, 126119, 126544, 126576, 126737, 126771, 126799,
	126824, 126851, 126880, 126927, 126939, 126962, 126992, 127034, 127067, 127092, 127121};
static const uint64_t exact4[] = {2600, 3440, 4131, 4828, 5413};
static const uint64_t exact5[] = {1304, 1704, 2072, 2393, 2798};
static const uint64_t exact6[] = {2676, 3450, 4315, 4900, 5694};

static const struct mix_case mix_cases[] = {
	{1, 300, 0, 4096, 0, mix1},
	{2, 300, 7, 1500, 5, mix2},
	{3, 400, 0, 1024, 4, mix3},
};

START_TEST(test_nodes_redis_mix)
{
	const struct mix_case *mc = &mix_cases[_i];
	static struct gen g;
	struct stream_meta m;

	gen_init(&g, mc->seed, 0);
	node_entries = mc->max_entries;
	node_bytes = mc->max_bytes;
	create(0, "m", &m);
	for (unsigned i = 0; i < mc->n; i++) {
		struct stream_id id;

		gen_entry(&g, &id);
		add_fv(&m, id.ms, id.seq, g.fv, g.nfv);
		gen_apply_delete(&g, &m, mc->delprob);
		if ((i + 1) % 10 == 0) {
			const uint64_t *w = mc->want[i / 10];
			ck_assert_msg(m.length == w[0] && m.nodes == w[1],
				"seed %" PRIu64 " after %u: length %" PRIu64 " nodes %" PRIu64
				", Redis %" PRIu64 " and %" PRIu64,
				mc->seed, i + 1, m.length, m.nodes, w[0], w[1]);
		}
	}
	check_rows(&m);
}
END_TEST

/* Appends id in a child transaction with node_max_bytes max_bytes and
 * checks the node count, then rolls back. */
static void
probe(const struct stream_meta *m, const struct stream_id *id, const struct st_buf *fv, size_t nfv,
	uint64_t max_bytes, uint64_t want_nodes, unsigned i)
{
	struct storage_txn *child;
	struct stream_meta copy = *m;

	OK(storage_txn_begin(st, tx, 0, &child));
	OK(stream_append(child, &copy, id, fv, nfv, 0, max_bytes));
	ck_assert_msg(copy.nodes == want_nodes,
		"entry %u, node_max_bytes %" PRIu64 ": %" PRIu64 " nodes, Redis %" PRIu64, i,
		max_bytes, copy.nodes, want_nodes);
	storage_txn_abort(child);
}

/* Byte-exact: all entries in one node (no limits); before each XADD of
 * entry i + 1, Redis was asked for the largest stream-node-max-bytes at
 * which that XADD starts a new node (COPY of the stream, CONFIG SET,
 * XADD, XINFO, binary search), i.e. lpBytes + the entry's field and
 * value lengths. The data model must split at exactly that value and
 * not one byte above it. The cases reach live and deleted counters over
 * 127 and entries of 62, 125 and 130 fields (lp-count and field counts
 * over 127, with and without the master's fields). */
struct exact_case {
	uint64_t seed;
	unsigned n;
	unsigned delprob;
	unsigned force_many;
	const uint64_t *thresholds; /* n - 1 of them */
};

static const struct exact_case exact_cases[] = {
	{5, 120, 6, 0, exact1},
	{6, 400, 2, 0, exact2},
	{7, 300, 0, 0, exact3},
	{8, 6, 0, 125, exact4},
	{9, 6, 0, 62, exact5},
	{10, 6, 0, 130, exact6},
};

START_TEST(test_nodes_bytes_exact)
{
	const struct exact_case *ec = &exact_cases[_i];
	static struct gen g;
	struct stream_meta m;

	gen_init(&g, ec->seed, ec->force_many);
	create(0, "x", &m);
	for (unsigned i = 0; i < ec->n; i++) {
		struct stream_id id;

		gen_entry(&g, &id);
		if (i > 0) {
			probe(&m, &id, g.fv, g.nfv, ec->thresholds[i - 1], 2, i);
			probe(&m, &id, g.fv, g.nfv, ec->thresholds[i - 1] + 1, 1, i);
		}
		OK(stream_append(tx, &m, &id, g.fv, g.nfv, 0, 0));
		U64_EQ(m.nodes, 1);
		gen_apply_delete(&g, &m, ec->delprob);
	}
	check_rows(&m);
}
END_TEST

static Suite *
nodes_suite(void)
{
	Suite *s = suite_create("nodes");
	TCase *tc;

	tc = tcase_create("bytes");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_nodes_bytes_1000);
	tcase_add_test(tc, test_nodes_bytes_edge);
	tcase_add_test(tc, test_nodes_bytes_big_values);
	tcase_add_test(tc, test_nodes_bytes_small_entries);
	suite_add_tcase(s, tc);

	tc = tcase_create("redis_exact");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(
		tc, test_nodes_bytes_exact, 0, (int)(sizeof(exact_cases) / sizeof(exact_cases[0])));
	suite_add_tcase(s, tc);

	tc = tcase_create("redis_mix");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(
		tc, test_nodes_redis_mix, 0, (int)(sizeof(mix_cases) / sizeof(mix_cases[0])));
	suite_add_tcase(s, tc);
	return s;
}

/* ---- the stream cache --------------------------------------------------- */

/* The rows of table tb under sid, past the sid: each key's rest and value,
 * length-prefixed, one after the other. Returns a malloc()ed buffer. */
static unsigned char *
rows_dump(enum storage_table tb, uint64_t sid, size_t *len)
{
	unsigned char k[8], *out = NULL;
	struct st_buf seek = {k, 8}, key, val;
	struct storage_cursor *c;
	size_t n = 0;
	int rc;

	st_put_u64(k, sid);
	OK(storage_cursor_open(tx, tb, &c));
	rc = storage_cursor_seek(c, &seek, &key, &val);
	while (rc == 0 && key.len >= 8 && memcmp(key.data, k, 8) == 0) {
		size_t kl = key.len - 8, add = 2 * sizeof(size_t) + kl + val.len;
		out = realloc(out, n + add);
		ck_assert_ptr_nonnull(out);
		memcpy(out + n, &kl, sizeof(kl));
		memcpy(out + n + sizeof(kl), (const unsigned char *)key.data + 8, kl);
		memcpy(out + n + sizeof(kl) + kl, &val.len, sizeof(val.len));
		memcpy(out + n + 2 * sizeof(kl) + kl, val.data, val.len);
		n += add;
		rc = storage_cursor_next(c, &key, &val);
	}
	storage_cursor_close(c);
	ck_assert_msg(rc == 0 || rc == ECHD_ENOTFOUND, "cursor: %d", rc);
	*len = n;
	return out;
}

static void
rows_same(enum storage_table tb, uint64_t a, uint64_t b)
{
	size_t la, lb;
	unsigned char *da = rows_dump(tb, a, &la), *db = rows_dump(tb, b, &lb);

	ck_assert_msg(la == lb && (la == 0 || memcmp(da, db, la) == 0),
		"table %d: rows of sid %" PRIu64 " differ from those of %" PRIu64, (int)tb, a, b);
	free(da);
	free(db);
}

#define CACHED 40 /* streams: the cache's table grows past its first size */

/* Appends through the cache to c<i>, then the same plainly to p<i>, with
 * nodes filling up and field sets changing: after the flush both kinds of
 * streams have the same rows, byte for byte. (Not interleaved: while the
 * cache holds appends, nobody else may write.) */
START_TEST(test_cache_same_rows)
{
	struct stream_cache *c;
	struct stream_meta plain[CACHED], m, got;
	char cn[16], pn[16], val[32];
	struct st_buf fv[4];
	size_t nfv;

	node_entries = 7;
	OK(stream_cache_create(&c));
	ck_assert(stream_cache_empty(c));
	for (unsigned i = 0; i < CACHED; i++) {
		snprintf(cn, sizeof(cn), "c%u", i);
		snprintf(pn, sizeof(pn), "p%u", i);
		create(0, cn, &m);
		create(0, pn, &plain[i]);
		if (i % 3 == 0) { /* some start with stored nodes */
			add_range(&m, 1, 3 + i % 5);
			add_range(&plain[i], 1, 3 + i % 5);
			save(0, cn, &m);
			save(0, pn, &plain[i]);
		}
	}
	for (unsigned pass = 0; pass < 2; pass++) {
		for (unsigned r = 1; r <= 30; r++) {
			for (unsigned i = 0; i < CACHED; i++) {
				struct stream_id id = ID(100 + r, i);
				struct st_buf name;

				snprintf(cn, sizeof(cn), "c%u", i);
				snprintf(pn, sizeof(pn), "p%u", i);
				snprintf(val, sizeof(val), "v%u", r * 1000 + i);
				fv[0] = B("f");
				fv[1] = B(val);
				fv[2] = B(r % 4 == 0 ? "g" : "h");
				fv[3] = B("x");
				nfv = r % 3 == 0 ? 2 : 4;
				if (pass == 1) {
					OK(stream_append(tx, &plain[i], &id, fv, nfv, node_entries,
						node_bytes));
					save(0, pn, &plain[i]);
					continue;
				}
				name = B(cn);
				OK(stream_cache_lookup(c, tx, 0, &name, &m));
				U64_EQ(m.length, (i % 3 == 0 ? 3 + i % 5 : 0) + r - 1);
				OK(stream_cache_append(c, tx, &m, &id, fv, nfv, node_entries,
					node_bytes));
			}
		}
		if (pass == 1) {
			break;
		}
		/* until the flush the keys rows are the first append's (written
		 * at once, so that the flush only rewrites rows) */
		OK(lookup(0, "c1", &got));
		U64_EQ(got.length, 1);
		OK(lookup(0, "c0", &got));
		U64_EQ(got.length, 4);
		ck_assert(!stream_cache_empty(c));
		OK(stream_cache_flush(c, tx));
		ck_assert(stream_cache_empty(c));
	}
	for (unsigned i = 0; i < CACHED; i++) {
		uint64_t psid = plain[i].sid;

		snprintf(cn, sizeof(cn), "c%u", i);
		OK(lookup(0, cn, &got));
		ck_assert_uint_ne(got.sid, psid);
		plain[i].sid = got.sid;
		meta_eq(&got, &plain[i]);
		check_rows(&got);
		rows_same(STORAGE_T_NODES, got.sid, psid);
		rows_same(STORAGE_T_ENTRIES, got.sid, psid);
	}
	stream_cache_destroy(c);
}
END_TEST

/* A lookup that found nothing keeps nothing; an append must go to the
 * stream the last lookup found; a dropped cache forgets its appends and
 * reads the rows again. */
START_TEST(test_cache_lookup_drop)
{
	struct stream_cache *c;
	struct stream_meta m, other;
	struct st_buf name = B("s"), none = B("none"), fv[2] = {B("f"), B("v")};
	struct stream_id id = ID(5, 0);

	OK(stream_cache_create(&c));
	FAILS(stream_cache_lookup(c, tx, 0, &none, &m), ECHD_ENOTFOUND);
	ck_assert(stream_cache_empty(c));
	create(0, "s", &m);
	create(0, "t", &other);
	FAILS(stream_cache_append(c, tx, &other, &id, fv, 2, node_entries, node_bytes), -EINVAL);
	OK(stream_cache_lookup(c, tx, 0, &name, &m));
	FAILS(stream_cache_append(c, tx, &other, &id, fv, 2, node_entries, node_bytes), -EINVAL);
	OK(stream_cache_append(c, tx, &m, &id, fv, 2, node_entries, node_bytes));
	id = ID(6, 0);
	OK(stream_cache_append(c, tx, &m, &id, fv, 2, node_entries, node_bytes));
	OK(stream_cache_lookup(c, tx, 0, &name, &m));
	U64_EQ(m.length, 2);
	/* a different db is a different stream */
	FAILS(stream_cache_lookup(c, tx, 1, &name, &m), ECHD_ENOTFOUND);
	stream_cache_drop(c);
	ck_assert(stream_cache_empty(c));
	OK(stream_cache_lookup(c, tx, 0, &name, &m));
	U64_EQ(m.length, 1); /* the stored row: the first append's, written at once */
	stream_cache_destroy(c);
	stream_cache_destroy(NULL);
}
END_TEST

/* The cache puts an entry at the table's end (STORAGE_PUT_APPEND, which
 * fails on a key that is not last) only when no other stream's rows sort
 * after it, as the end moves: its own appends, a stream created after a
 * lookup found nothing. */
START_TEST(test_cache_table_end)
{
	struct stream_cache *c;
	struct stream_meta a, b, z, m;
	struct st_buf an = B("a"), bn = B("b"), zn = B("z"), fv[2] = {B("f"), B("v")};
	struct stream_id id;

	OK(stream_cache_create(&c));
	create(0, "a", &a);
	create(0, "b", &b);
	add_range(&a, 1, 2);
	save(0, "a", &a);
	for (uint64_t ms = 10; ms < 14; ms++) {
		/* b (the end, once it has rows), then a (before b) */
		id = ID(ms, 0);
		OK(stream_cache_lookup(c, tx, 0, &bn, &m));
		OK(stream_cache_append(c, tx, &m, &id, fv, 2, node_entries, node_bytes));
		OK(stream_cache_lookup(c, tx, 0, &an, &m));
		OK(stream_cache_append(c, tx, &m, &id, fv, 2, node_entries, node_bytes));
	}
	/* an XADD that creates its stream: after the lookup that found nothing */
	FAILS(stream_cache_lookup(c, tx, 0, &zn, &m), ECHD_ENOTFOUND);
	create(0, "z", &z);
	add_range(&z, 1, 1);
	save(0, "z", &z);
	id = ID(20, 0);
	OK(stream_cache_lookup(c, tx, 0, &bn, &m));
	OK(stream_cache_append(c, tx, &m, &id, fv, 2, node_entries, node_bytes));
	OK(stream_cache_lookup(c, tx, 0, &zn, &m));
	OK(stream_cache_append(c, tx, &m, &id, fv, 2, node_entries, node_bytes));
	OK(stream_cache_flush(c, tx));
	OK(lookup(0, "a", &m));
	U64_EQ(m.length, 6);
	check_rows(&m);
	OK(lookup(0, "b", &m));
	U64_EQ(m.length, 5);
	check_rows(&m);
	OK(lookup(0, "z", &m));
	U64_EQ(m.length, 2);
	check_rows(&m);
	stream_cache_destroy(c);
}
END_TEST

static Suite *
cache_suite(void)
{
	Suite *s = suite_create("cache");
	TCase *tc = tcase_create("cache");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_cache_same_rows);
	tcase_add_test(tc, test_cache_lookup_drop);
	tcase_add_test(tc, test_cache_table_end);
	suite_add_tcase(s, tc);
	return s;
}

/* ---- persistence -------------------------------------------------------- */

START_TEST(test_persist_reopen)
{
	struct stream_meta a, b, got, c;
	struct stream_id ids[64], id = {3, 1};
	struct st_buf fields, fv[2] = {B("f"), B("v3")};
	size_t n;

	node_entries = 10;
	create(0, "a", &a);
	create(4, "b", &b);
	add_range(&a, 1, 25);
	add_range(&b, 1, 3);
	OK(stream_delete_entry(tx, &a, &id));
	save(0, "a", &a);
	save(4, "b", &b);

	reopen();
	OK(lookup(0, "a", &got));
	meta_eq(&got, &a);
	OK(lookup(4, "b", &got));
	meta_eq(&got, &b);
	U64_EQ(db_size(0), 1);
	U64_EQ(db_size(4), 1);
	check_rows(&a);
	n = iter_ids(&a, ID(0, 0), ID(UINT64_MAX, UINT64_MAX), false, ids, 64);
	U64_EQ(n, 24);
	ID_EQ(ids[0], 1, 1);
	ID_EQ(ids[2], 4, 1);
	id = ID(3, 1);
	OK(stream_get_entry(tx, &b, &id, &fields));
	fields_are(&fields, fv, 2);
	id = ID(9, 9);
	FAILS(stream_get_entry(tx, &b, &id, &fields), ECHD_ENOTFOUND);
	id = ID(3, 1);
	FAILS(stream_get_entry(tx, &a, &id, &fields), ECHD_ENOTFOUND);
	OK(stream_get_entry(tx, &b, &id, &fields));
	fields_are(&fields, fv, 2);

	/* appending continues in the stored tail node, and ids keep growing */
	add_range(&a, 26, 30);
	U64_EQ(a.nodes, 3);
	add_range(&a, 31, 31);
	U64_EQ(a.nodes, 4);
	check_rows(&a);
	create(0, "c", &c);
	ck_assert_uint_gt(c.sid, b.sid);

	/* an uncommitted change does not survive */
	save(0, "a", &a);
	storage_txn_abort(tx);
	tx = NULL;
	begin();
	FAILS(lookup(0, "c", &got), ECHD_ENOTFOUND);
	OK(lookup(0, "a", &got));
	U64_EQ(got.length, 24);
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
	suite_add_tcase(s, tc);
	return s;
}

/* ---- idempotent producers (stream_idmp.c) -------------------------------- */

static const struct stream_idmp_cfg idmp_def = {100, 100};

static struct stream_idmp_info
idmp_info(const struct stream_meta *m)
{
	struct stream_idmp_info i;

	OK(stream_idmp_info(tx, m, &idmp_def, &i));
	return i;
}

/* Records (pid, iid) -> ms-1 at now_ms. */
static void
idmp_put(const struct stream_meta *m, const char *pid, const char *iid, uint64_t ms,
	uint64_t now_ms)
{
	struct st_buf p = B(pid), i = B(iid);
	struct stream_id id = ID(ms, 1);

	OK(stream_idmp_record(tx, m, &p, &i, &id, now_ms, &idmp_def));
}

/* The id (pid, iid) maps to at now_ms, or 0-0 when none. */
static struct stream_id
idmp_get(const struct stream_meta *m, const char *pid, const char *iid, uint64_t now_ms)
{
	struct st_buf p = B(pid), i = B(iid);
	struct stream_id id = ID(0, 0);
	int rc = stream_idmp_find(tx, m, &p, &i, now_ms, false, &id);

	ck_assert_msg(rc == 0 || rc == ECHD_ENOTFOUND, "find: %d", rc);
	return id;
}

START_TEST(test_idmp_record_find)
{
	struct stream_meta a, b;
	struct st_buf p = B("p"), i = B("i");
	struct stream_id id;

	create(0, "a", &a);
	create(0, "b", &b);
	FAILS(stream_idmp_find(tx, &a, &p, &i, 1000, true, &id), ECHD_ENOTFOUND);
	U64_EQ(rows_all(STORAGE_T_IDMP), 0); /* a miss writes nothing */
	idmp_put(&a, "p", "i", 7, 1000);
	idmp_put(&a, "q", "i", 8, 1000);
	ID_EQ(idmp_get(&a, "p", "i", 1000), 7, 1);
	ID_EQ(idmp_get(&a, "q", "i", 1000), 8, 1);
	ID_EQ(idmp_get(&a, "p", "j", 1000), 0, 0);
	ID_EQ(idmp_get(&b, "p", "i", 1000), 0, 0); /* another stream's */
	OK(stream_idmp_find(tx, &a, &p, &i, 1000, true, &id));
	ID_EQ(id, 7, 1);
	struct stream_idmp_info in = idmp_info(&a);
	U64_EQ(in.pids, 2);
	U64_EQ(in.iids, 2);
	U64_EQ(in.added, 2);
	U64_EQ(in.duplicates, 1);
	U64_EQ(in.duration_s, 100);
	/* C, 2 P, 2 I, 2 Q rows for a, and the index row */
	U64_EQ(rows_of(STORAGE_T_IDMP, a.sid), 7);
	U64_EQ(rows_all(STORAGE_T_IDMP), 8);
	in = idmp_info(&b);
	U64_EQ(in.pids + in.iids + in.added, 0);
	reopen();
	ID_EQ(idmp_get(&a, "p", "i", 1000), 7, 1);
}
END_TEST

START_TEST(test_idmp_long_and_binary)
{
	struct stream_meta a;
	char *big = malloc(70000), *big2 = malloc(70000);
	struct st_buf pb, ib, ib2, bin = {"\0\1\0", 3}, bin2 = {"\0\1\1", 3};
	struct stream_id id = ID(5, 1), got;

	ck_assert_ptr_nonnull(big);
	ck_assert_ptr_nonnull(big2);
	memset(big, 'x', 70000);
	memcpy(big2, big, 70000);
	big2[69999] = 'y'; /* same prefix, other hash */
	pb.data = big;
	pb.len = 1000;
	ib.data = big;
	ib.len = 70000;
	ib2.data = big2;
	ib2.len = 70000;
	create(0, "a", &a);
	OK(stream_idmp_record(tx, &a, &pb, &ib, &id, 1000, &idmp_def));
	OK(stream_idmp_find(tx, &a, &pb, &ib, 1000, false, &got));
	ID_EQ(got, 5, 1);
	FAILS(stream_idmp_find(tx, &a, &pb, &ib2, 1000, false, &got), ECHD_ENOTFOUND);
	id = ID(6, 1);
	OK(stream_idmp_record(tx, &a, &bin, &bin, &id, 1000, &idmp_def));
	OK(stream_idmp_find(tx, &a, &bin, &bin, 1000, false, &got));
	ID_EQ(got, 6, 1);
	FAILS(stream_idmp_find(tx, &a, &bin, &bin2, 1000, false, &got), ECHD_ENOTFOUND);
	FAILS(stream_idmp_find(tx, &a, &bin2, &bin, 1000, false, &got), ECHD_ENOTFOUND);
	U64_EQ(idmp_info(&a).pids, 2);
	free(big);
	free(big2);
}
END_TEST

START_TEST(test_idmp_maxsize)
{
	struct stream_meta a;
	char iid[16];

	create(0, "a", &a);
	OK(stream_idmp_configure(tx, &a, 0, 3, &idmp_def));
	for (unsigned i = 1; i <= 10; i++) {
		snprintf(iid, sizeof(iid), "r%u", i);
		idmp_put(&a, "p", iid, i, 1000);
		idmp_put(&a, "q", iid, 100 + i, 1000);
	}
	/* each producer keeps its last three */
	ID_EQ(idmp_get(&a, "p", "r7", 1000), 0, 0);
	ID_EQ(idmp_get(&a, "p", "r8", 1000), 8, 1);
	ID_EQ(idmp_get(&a, "p", "r10", 1000), 10, 1);
	ID_EQ(idmp_get(&a, "q", "r8", 1000), 108, 1);
	struct stream_idmp_info in = idmp_info(&a);
	U64_EQ(in.iids, 6);
	U64_EQ(in.added, 20);
	U64_EQ(in.maxsize, 3);
	/* C + 2 P + 6 I + 6 Q */
	U64_EQ(rows_of(STORAGE_T_IDMP, a.sid), 15);
	/* re-recording a pair replaces its record */
	idmp_put(&a, "p", "r8", 50, 1000);
	ID_EQ(idmp_get(&a, "p", "r8", 1000), 50, 1);
	U64_EQ(idmp_info(&a).iids, 6);
}
END_TEST

START_TEST(test_idmp_duration)
{
	struct stream_meta a;
	unsigned n = 0;
	uint64_t next = 0;

	create(0, "a", &a);
	OK(stream_idmp_configure(tx, &a, 2, 0, &idmp_def));
	idmp_put(&a, "p", "old", 1, 10000);
	idmp_put(&a, "idle", "x", 2, 10000);
	idmp_put(&a, "p", "new", 3, 11500);
	/* lookups honour the duration exactly */
	ID_EQ(idmp_get(&a, "p", "old", 11999), 1, 1);
	ID_EQ(idmp_get(&a, "p", "old", 12000), 0, 0);
	/* nothing due yet */
	OK(stream_idmp_expire_due(tx, 11000, 64, &n, &next));
	U64_EQ(n, 0);
	U64_EQ(next, 12000);
	/* the next add of p drops its expired record */
	idmp_put(&a, "p", "newer", 4, 12500);
	U64_EQ(idmp_info(&a).iids, 3);
	/* the expiry step drops the idle producer's */
	OK(stream_idmp_expire_due(tx, 12600, 64, &n, &next));
	U64_EQ(n, 1);
	struct stream_idmp_info in = idmp_info(&a);
	U64_EQ(in.pids, 1);
	U64_EQ(in.iids, 2);
	ck_assert_uint_ge(next, 13500); /* new's time + 2 s, at least a second on */
	OK(stream_idmp_expire_due(tx, 20000, 64, &n, &next));
	U64_EQ(idmp_info(&a).iids, 0);
	U64_EQ(idmp_info(&a).pids, 0);
	U64_EQ(next, 0);
	/* only the C row is left */
	U64_EQ(rows_all(STORAGE_T_IDMP), 1);
}
END_TEST

START_TEST(test_idmp_configure_clears)
{
	struct stream_meta a;

	create(0, "a", &a);
	idmp_put(&a, "p", "i", 1, 1000);
	idmp_put(&a, "q", "i", 2, 1000);
	OK(stream_idmp_configure(tx, &a, 100, 100, &idmp_def)); /* the same: kept */
	ID_EQ(idmp_get(&a, "p", "i", 1000), 1, 1);
	OK(stream_idmp_configure(tx, &a, 50, 0, &idmp_def));
	ID_EQ(idmp_get(&a, "p", "i", 1000), 0, 0);
	struct stream_idmp_info in = idmp_info(&a);
	U64_EQ(in.duration_s, 50);
	U64_EQ(in.maxsize, 100);
	U64_EQ(in.pids, 0);
	U64_EQ(in.iids, 0);
	U64_EQ(in.added, 2);
	U64_EQ(rows_all(STORAGE_T_IDMP), 1); /* the C row; no index row */
}
END_TEST

START_TEST(test_idmp_copy_delete)
{
	struct stream_meta a, b;
	struct st_buf na = B("a"), nb = B("b");
	uint64_t usage_with;
	bool more = true;

	create(0, "a", &a);
	add_range(&a, 1, 3);
	save(0, "a", &a);
	idmp_put(&a, "p", "i", 1, 1000);
	OK(stream_copy(tx, 0, &na, 0, &nb, &b));
	save(0, "b", &b);
	ID_EQ(idmp_get(&b, "p", "i", 1000), 1, 1);
	idmp_put(&b, "p", "j", 2, 1000);
	ID_EQ(idmp_get(&a, "p", "j", 1000), 0, 0);
	OK(stream_usage(tx, 0, &nb, &b, 0, &usage_with));
	/* the copy has its own index row: both streams expire */
	unsigned n;
	uint64_t next;
	OK(stream_idmp_expire_due(tx, UINT64_MAX / 2, 64, &n, &next));
	U64_EQ(n, 2);
	U64_EQ(idmp_info(&a).iids + idmp_info(&b).iids, 0);
	idmp_put(&a, "p", "i", 1, 1000);
	OK(stream_delete(tx, 0, &na));
	do {
		OK(stream_gc_step(tx, 1000, &more));
	} while (more);
	U64_EQ(rows_of(STORAGE_T_IDMP, a.sid), 0);
	/* a's index row is stale now: the expiry step drops it alone */
	OK(stream_idmp_expire_due(tx, UINT64_MAX / 2, 64, &n, &next));
	U64_EQ(rows_all(STORAGE_T_IDMP), rows_of(STORAGE_T_IDMP, b.sid));
}
END_TEST

START_TEST(test_idmp_usage)
{
	struct stream_meta a;
	struct st_buf na = B("a");
	uint64_t plain, with;
	char iid[16];

	create(0, "a", &a);
	add_range(&a, 1, 3);
	save(0, "a", &a);
	OK(stream_usage(tx, 0, &na, &a, 0, &plain));
	for (unsigned i = 0; i < 200; i++) {
		snprintf(iid, sizeof(iid), "iid-%u", i);
		idmp_put(&a, "producer", iid, 1, 1000);
	}
	OK(stream_usage(tx, 0, &na, &a, 0, &with));
	/* the estimate is within a tenth of the rows' bytes */
	uint64_t rows = 0, bytes = 0;
	rows = table_rows(STORAGE_T_IDMP, &bytes);
	ck_assert_uint_gt(rows, 0);
	ck_assert_uint_ge(with - plain, bytes - bytes / 10);
	ck_assert_uint_le(with - plain, bytes + bytes / 10);
}
END_TEST

/* SipHash-2-4-128 against the reference vectors (key 00..0f, message
 * 00..len-1; the same as `openssl mac -macopt size:16 SIPHASH` prints). */
START_TEST(test_idmp_siphash_vectors)
{
	static const struct {
		size_t len;
		const char *hex;
	} v[] = {
		{0, "a3817f04ba25a8e66df67214c7550293"},
		{7, "a1f1ebbed8dbc153c0b84aa61ff08239"},
		{8, "3b62a9ba6258f5610f83e264f31497b4"},
		{15, "5493e99933b0a8117e08ec0f97cfc3d9"},
		{63, "5150d1772f50834a503e069a973fbd7c"},
	};
	unsigned char key[16], msg[64], out[16];
	char hex[33];

	for (int i = 0; i < 16; i++) {
		key[i] = (unsigned char)i;
	}
	for (int i = 0; i < 64; i++) {
		msg[i] = (unsigned char)i;
	}
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		stream_idmp_siphash128(key, msg, v[i].len, out);
		for (int b = 0; b < 16; b++) {
			snprintf(hex + 2 * b, 3, "%02x", out[b]);
		}
		ck_assert_str_eq(hex, v[i].hex);
	}
}
END_TEST

START_TEST(test_idmp_auto_iid)
{
	struct st_buf x[6] = {B("f1"), B("a"), B("f2"), B("b"), B("f3"), B("c")};
	struct st_buf y[6] = {B("f3"), B("c"), B("f1"), B("a"), B("f2"), B("b")};
	struct st_buf z[6] = {B("f1"), B("b"), B("f2"), B("a"), B("f3"), B("c")};
	struct st_buf w[8] = {B("f1"), B("a"), B("f2"), B("b"), B("f3"), B("c"), B("f3"),
		B("c")};
	struct st_buf s1[2] = {B("ab"), B("c")}, s2[2] = {B("a"), B("bc")};
	unsigned char k1[16] = {1}, k2[16] = {2}, scratch[16 * 4];
	unsigned char hx[16], hy[16], hz[16], hw[16], h4[16], hk[16], a1[16], a2[16];

	stream_idmp_keyed_iid(k1, x, 6, scratch, hx);
	stream_idmp_keyed_iid(k1, y, 6, scratch, hy);
	stream_idmp_keyed_iid(k1, z, 6, scratch, hz);
	stream_idmp_keyed_iid(k1, w, 8, scratch, hw);
	stream_idmp_keyed_iid(k1, x, 4, scratch, h4);
	stream_idmp_keyed_iid(k2, x, 6, scratch, hk);
	stream_idmp_keyed_iid(k1, s1, 2, scratch, a1);
	stream_idmp_keyed_iid(k1, s2, 2, scratch, a2);
	ck_assert(memcmp(hx, hy, 16) == 0);  /* order does not matter */
	ck_assert(memcmp(hx, hz, 16) != 0);  /* which value goes with which field does */
	ck_assert(memcmp(hx, hw, 16) != 0);  /* a repeated pair counts */
	ck_assert(memcmp(hx, h4, 16) != 0);
	ck_assert(memcmp(hx, hk, 16) != 0);  /* another key, another iid */
	ck_assert(memcmp(a1, a2, 16) != 0);  /* where the field ends counts */
}
END_TEST

/* The stream's secret: made at the first IDMPAUTO that records, kept in
 * its C row (after a reopen too, and by COPY), read by the next; a C row
 * of before the secret reads and gets one. */
START_TEST(test_idmp_auto_secret)
{
	struct stream_meta a, b, c;
	struct st_buf fv[4] = {B("f"), B("1"), B("g"), B("2")}, rev[4] = {B("g"), B("2"), B("f"),
		B("1")};
	struct st_buf p = B("p"), iid;
	unsigned char h1[16], h2[16], hb[16], hc[16];
	struct stream_id id = ID(9, 1), got;
	unsigned char kb[9];
	struct st_buf k = {kb, 9}, v;
	unsigned char legacy[64];

	create(0, "a", &a);
	create(0, "b", &b);
	/* no secret yet: nothing can match, and a lookup writes nothing */
	FAILS(stream_idmp_auto_iid(tx, &a, &idmp_def, false, fv, 4, h1), ECHD_ENOTFOUND);
	U64_EQ(rows_all(STORAGE_T_IDMP), 0);
	OK(stream_idmp_auto_iid(tx, &a, &idmp_def, true, fv, 4, h1));
	iid.data = h1;
	iid.len = 16;
	OK(stream_idmp_record(tx, &a, &p, &iid, &id, 1000, &idmp_def));
	OK(stream_idmp_auto_iid(tx, &a, &idmp_def, false, rev, 4, h2));
	ck_assert(memcmp(h1, h2, 16) == 0);
	OK(stream_idmp_find(tx, &a, &p, &iid, 1000, false, &got));
	ID_EQ(got, 9, 1);
	/* another stream, another secret */
	OK(stream_idmp_auto_iid(tx, &b, &idmp_def, true, fv, 4, hb));
	ck_assert(memcmp(h1, hb, 16) != 0);
	/* the row: the 64 bytes of settings and counters, then 16 of secret */
	st_put_u64(kb, a.sid);
	kb[8] = 'C';
	OK(storage_get(tx, STORAGE_T_IDMP, &k, &v));
	U64_EQ(v.len, 80);
	/* a restart keeps it */
	reopen();
	OK(stream_idmp_auto_iid(tx, &a, &idmp_def, false, fv, 4, h2));
	ck_assert(memcmp(h1, h2, 16) == 0);
	/* COPY copies it: the copy's records match the same message */
	{
		struct st_buf from = B("a"), to = B("c");
		OK(stream_copy(tx, 0, &from, 0, &to, &c));
	}
	OK(stream_idmp_auto_iid(tx, &c, &idmp_def, false, fv, 4, hc));
	ck_assert(memcmp(h1, hc, 16) == 0);
	/* a row written before secrets (64 bytes) still reads, and gets one */
	OK(storage_get(tx, STORAGE_T_IDMP, &k, &v));
	memcpy(legacy, v.data, 64);
	v.data = legacy;
	v.len = 64;
	OK(storage_put(tx, STORAGE_T_IDMP, &k, &v, 0));
	U64_EQ(idmp_info(&a).iids, 1);
	FAILS(stream_idmp_auto_iid(tx, &a, &idmp_def, false, fv, 4, h2), ECHD_ENOTFOUND);
	OK(stream_idmp_auto_iid(tx, &a, &idmp_def, true, fv, 4, h2));
	OK(storage_get(tx, STORAGE_T_IDMP, &k, &v));
	U64_EQ(v.len, 80);
	U64_EQ(idmp_info(&a).iids, 1); /* the counters kept */
}
END_TEST

static Suite *
idmp_suite(void)
{
	Suite *s = suite_create("idmp");
	TCase *tc;

	tc = tcase_create("records");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_idmp_record_find);
	tcase_add_test(tc, test_idmp_long_and_binary);
	tcase_add_test(tc, test_idmp_maxsize);
	tcase_add_test(tc, test_idmp_duration);
	tcase_add_test(tc, test_idmp_configure_clears);
	tcase_add_test(tc, test_idmp_copy_delete);
	tcase_add_test(tc, test_idmp_usage);
	tcase_add_test(tc, test_idmp_siphash_vectors);
	tcase_add_test(tc, test_idmp_auto_iid);
	tcase_add_test(tc, test_idmp_auto_secret);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr;

	if (fixture_init("stream", NULL, 64 * MIB) != 0) {
		return 1;
	}
	sr = srunner_create(ids_suite());
	srunner_add_suite(sr, keys_suite());
	srunner_add_suite(sr, entries_suite());
	srunner_add_suite(sr, trim_suite());
	srunner_add_suite(sr, nodes_suite());
	srunner_add_suite(sr, persist_suite());
	srunner_add_suite(sr, cache_suite());
	srunner_add_suite(sr, idmp_suite());
	return fixture_run(sr);
}
