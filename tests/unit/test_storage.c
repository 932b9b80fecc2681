/* test_storage.c - the storage registry and the LMDB backend. */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "echd.h"
#include "storage.h"
#include "unit_storage.h"

/* ---- fixture (the rest is in unit_storage.h) ---------------------------- */

/* Closes st and opens the same directory with o (no tx to commit, unlike
 * reopen() in unit_storage.h). */
static void
reopen_with(const struct storage_opts *o)
{
	storage_close(st);
	st = NULL;
	OK(storage_open("lmdb", o, &st));
}

/* st's capacity interface: the tests that ask run on lmdb, which has one. */
static struct storage_capacity *
cap(void)
{
	struct storage_capacity *c = storage_capacity(st);

	ck_assert_ptr_nonnull(c);
	return c;
}

/* st's figures: storage_stat()'s and its capacity interface's. */
static void
stat_both(struct storage_stat *s, struct storage_capacity_stat *c)
{
	OK(storage_stat(st, s));
	OK(storage_capacity_stat(cap(), c));
}

/* Reopens on an empty directory: a smaller map-size than the fixture's
 * would otherwise lose to the size the environment records. */
static void
reopen_fresh(const struct storage_opts *o)
{
	storage_close(st);
	st = NULL;
	rm_rf(dir);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	OK(storage_open("lmdb", o, &st));
}

/* ---- helpers ------------------------------------------------------------ */

static bool
buf_is(const struct st_buf *b, const char *s)
{
	return b->len == strlen(s) && memcmp(b->data, s, b->len) == 0;
}

static void
put_s(struct storage_txn *t, enum storage_table tb, const char *k, const char *v)
{
	struct st_buf kb = B(k), vb = B(v);

	OK(storage_put(t, tb, &kb, &vb, 0));
}

/* want NULL: the key must be absent. */
static void
get_is(struct storage_txn *t, enum storage_table tb, const char *k, const char *want)
{
	struct st_buf kb = B(k), v;
	int rc = storage_get(t, tb, &kb, &v);

	if (want == NULL) {
		ck_assert_msg(rc == ECHD_ENOTFOUND, "get %s: %d, expected not found", k, rc);
		return;
	}
	ck_assert_msg(rc == 0, "get %s: %d (%s)", k, rc, echd_strerror(rc));
	ck_assert_msg(buf_is(&v, want), "get %s: '%.*s', expected '%s'", k, (int)v.len,
		(const char *)v.data, want);
}

/* Checks a cursor call's result: want NULL means ECHD_ENOTFOUND. */
static void
cur_is(int line, int rc, const struct st_buf *key, const char *want)
{
	if (want == NULL) {
		ck_assert_msg(rc == ECHD_ENOTFOUND, "line %d: rc %d key '%.*s', expected not found",
			line, rc, rc == 0 ? (int)key->len : 0, rc == 0 ? (const char *)key->data : "");
		return;
	}
	ck_assert_msg(rc == 0, "line %d: rc %d (%s), expected '%s'", line, rc, echd_strerror(rc),
		want);
	ck_assert_msg(buf_is(key, want), "line %d: key '%.*s', expected '%s'", line,
		(int)key->len, (const char *)key->data, want);
}
#define CUR(call, want) cur_is(__LINE__, (call), &key, (want))

/* ---- registry ------------------------------------------------------------ */

START_TEST(test_registry_lists_lmdb)
{
	const char *const *names = storage_backends();
	bool found = false;
	size_t n;

	for (n = 0; names[n] != NULL; n++) {
		found |= strcmp(names[n], "lmdb") == 0;
	}
	ck_assert(found);
	ck_assert_uint_ge(n, 1);
}
END_TEST

START_TEST(test_registry_every_name_opens)
{
	const char *const *names = storage_backends();
	struct storage_opts o = opts_default();

	for (size_t i = 0; names[i] != NULL; i++) {
		struct storage *s2 = NULL;

		storage_close(st);
		st = NULL;
		if (strcmp(names[i], "postgres") == 0 && !fixture_is("postgres")) {
			/* A store on a server: refused, clearly, without one. */
			FAILS(storage_open(names[i], &o, &s2), ECHD_EINVAL);
			continue;
		}
		OK(storage_open(names[i], &o, &s2));
		ck_assert_ptr_nonnull(s2);
		storage_close(s2);
	}
}
END_TEST

START_TEST(test_registry_default_is_lmdb)
{
	struct storage_opts o = opts_default();
	struct storage_txn *t;

	storage_close(st);
	st = NULL;
	OK(storage_open(NULL, &o, &st));
	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_META, "k", "v");
	OK(storage_txn_commit(t));
	/* The default and "lmdb" are the same environment format. */
	reopen_with(&o);
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, STORAGE_T_META, "k", "v");
	storage_txn_abort(t);
}
END_TEST

START_TEST(test_registry_unknown_backend)
{
	struct storage_opts o = opts_default();
	struct storage *s2 = NULL;

	FAILS(storage_open("berkeley", &o, &s2), ECHD_ENOTFOUND);
	ck_assert_ptr_null(s2); /* outputs are written only on success */
	FAILS(storage_open("", &o, &s2), ECHD_ENOTFOUND);
	FAILS(storage_open("LMDB", &o, &s2), ECHD_ENOTFOUND);
}
END_TEST

START_TEST(test_registry_null_noops)
{
	struct storage_txn *t;

	storage_close(NULL);
	storage_txn_abort(NULL);
	storage_cursor_close(NULL);
	/* The storage is still fine afterwards. */
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_txn_commit(t));
}
END_TEST

/* ---- engine options (storage.h: "<engine>.<option>" strings) ------------ */

/* Opens backend with the one option name=value (and nothing else). */
static int
open_with_opt(const char *backend, const char *name, const char *value)
{
	struct storage_opts o = {.dir = dir, .sync_mode = STORAGE_SYNC_FULL};
	struct storage *s2 = NULL;
	int rc;

	opt_clear(&o);
	opt_str(&o, name, value);
	rc = storage_open(backend, &o, &s2);
	if (rc == 0) {
		ck_assert_ptr_nonnull(s2);
		storage_close(s2);
	} else {
		ck_assert_ptr_null(s2);
	}
	return rc;
}

/* Each engine refuses an unknown option of its own and a malformed value,
 * before it touches anything; another engine's options it leaves alone. */
START_TEST(test_options_refused)
{
	storage_close(st);
	st = NULL;
	FAILS(open_with_opt("lmdb", "lmdb.map-size", "12x"), ECHD_EINVAL);
	FAILS(open_with_opt("lmdb", "lmdb.map-size", ""), ECHD_EINVAL);
	FAILS(open_with_opt("lmdb", "lmdb.map-size", "-1"), ECHD_EINVAL);
	FAILS(open_with_opt("lmdb", "lmdb.map-size", " 1"), ECHD_EINVAL);
	FAILS(open_with_opt("lmdb", "lmdb.map-size", "18446744073709551616"), ECHD_EINVAL);
	FAILS(open_with_opt("lmdb", "lmdb.map-max", "1e9"), ECHD_EINVAL);
	FAILS(open_with_opt("lmdb", "lmdb.map-sise", "1048576"), ECHD_EINVAL);
	/* a name that is no engine's is nobody's to refuse: storage.c does */
	FAILS(open_with_opt("lmdb", "lmbd.map-size", "1048576"), ECHD_EINVAL);
	FAILS(open_with_opt("lmdb", "map-size", "1048576"), ECHD_EINVAL);
	FAILS(open_with_opt("mem", "mem.map-size", "1048576"), ECHD_EINVAL);
	FAILS(open_with_opt("fwd", "fwd.inner", "lmdb"), ECHD_EINVAL);
	/* a wrapper hands its inner engine's options on */
	FAILS(open_with_opt("fault", "lmdb.map-size", "big"), ECHD_EINVAL);
	/* postgres refuses its own before it connects: not -ECONNREFUSED */
	{
		struct storage_opts o = {.dir = dir};
		struct storage *s2 = NULL;

		opt_clear(&o);
		opt_str(&o, "postgres.url", "postgresql://127.0.0.1:1/postgres");
		opt_str(&o, "postgres.timeout-ms", "soon");
		FAILS(storage_open("postgres", &o, &s2), ECHD_EINVAL);
		opt_str(&o, "postgres.timeout-ms", "1000");
		opt_str(&o, "postgres.announce-port", "65536");
		FAILS(storage_open("postgres", &o, &s2), ECHD_EINVAL);
		opt_str(&o, "postgres.announce-port", "7001");
		opt_str(&o, "postgres.port", "5432");
		FAILS(storage_open("postgres", &o, &s2), ECHD_EINVAL);
		ck_assert_ptr_null(s2);
	}
}
END_TEST

/* Each engine reads its own; the others' travel past it. */
START_TEST(test_options_read)
{
	struct storage_opts o = {.dir = dir, .sync_mode = STORAGE_SYNC_FULL};
	struct storage_capacity_stat cs;

	storage_close(st);
	st = NULL;
	OK(open_with_opt("mem", "lmdb.map-size", "12x")); /* not mem's to judge */
	OK(open_with_opt("fwd", "postgres.url", "nowhere"));
	rm_rf(dir);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	opt_clear(&o);
	opt_str(&o, "postgres.schema", "not lmdb's");
	opt_u64(&o, "lmdb.map-size", 8 * MIB);
	opt_u64(&o, "lmdb.map-max", 4 * MIB); /* a map-size past map-max is cut to it */
	OK(storage_open("lmdb", &o, &st));
	OK(storage_capacity_stat(cap(), &cs));
	U64_EQ(cs.map_size, 4 * MIB);
}
END_TEST

static Suite *
registry_suite(void)
{
	Suite *s = suite_create("registry");
	TCase *tc;

	tc = tcase_create("backends");
	tcase_add_checked_fixture(tc, fixture_open, teardown);
	tcase_add_test(tc, test_registry_lists_lmdb);
	tcase_add_test(tc, test_registry_every_name_opens);
	tcase_add_test(tc, test_registry_default_is_lmdb);
	suite_add_tcase(s, tc);

	tc = tcase_create("unknown");
	tcase_add_checked_fixture(tc, fixture_open, teardown);
	tcase_add_test(tc, test_registry_unknown_backend);
	suite_add_tcase(s, tc);

	tc = tcase_create("options");
	tcase_add_checked_fixture(tc, fixture_open, teardown);
	tcase_add_test(tc, test_options_refused);
	tcase_add_test(tc, test_options_read);
	suite_add_tcase(s, tc);

	tc = tcase_create("null");
	tcase_add_checked_fixture(tc, fixture_open, teardown);
	tcase_add_test(tc, test_registry_null_noops);
	suite_add_tcase(s, tc);
	return s;
}

/* ---- rows (loop tests: _i is the table) --------------------------------- */

START_TEST(test_rows_roundtrip)
{
	enum storage_table tb = (enum storage_table)_i;
	struct storage_txn *t;
	struct st_buf k = B("alpha"), v;

	OK(storage_txn_begin(st, NULL, 0, &t));
	get_is(t, tb, "alpha", NULL);
	put_s(t, tb, "alpha", "one");
	get_is(t, tb, "alpha", "one");
	put_s(t, tb, "alpha", "uno"); /* overwrite */
	get_is(t, tb, "alpha", "uno");
	OK(storage_txn_commit(t));

	OK(storage_txn_begin(st, NULL, 0, &t));
	get_is(t, tb, "alpha", "uno");
	OK(storage_del(t, tb, &k));
	get_is(t, tb, "alpha", NULL);
	FAILS(storage_del(t, tb, &k), ECHD_ENOTFOUND);
	FAILS(storage_get(t, tb, &k, &v), ECHD_ENOTFOUND);
	OK(storage_txn_commit(t));

	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, tb, "alpha", NULL);
	OK(storage_txn_commit(t));
}
END_TEST

START_TEST(test_rows_tables_are_separate)
{
	enum storage_table tb = (enum storage_table)_i;
	struct storage_txn *t;

	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, tb, "shared", "mine");
	/* A table mapped onto LMDB's main database would collide with the
	 * record of the sub-database "meta" here. */
	put_s(t, tb, "meta", "plain row");
	for (int i = 0; i < STORAGE_T__COUNT; i++) {
		if (i != (int)tb) {
			get_is(t, (enum storage_table)i, "shared", NULL);
		}
	}
	OK(storage_txn_commit(t));
}
END_TEST

START_TEST(test_rows_binary_keys)
{
	enum storage_table tb = (enum storage_table)_i;
	static const unsigned char k1[] = {0x00};
	static const unsigned char k2[] = {0x00, 0x00};
	static const unsigned char k3[] = {0x00, 0xff, 0x00, 0x7f};
	static const unsigned char k4[] = {0x80};
	static const unsigned char k5[] = {0xff, 0xff};
	/* Inserted out of order; memcmp order is k1 < k2 < k3 < k4 < k5. */
	const struct st_buf keys[] = {{k4, 1}, {k1, 1}, {k5, 2}, {k3, 4}, {k2, 2}};
	const struct st_buf sorted[] = {{k1, 1}, {k2, 2}, {k3, 4}, {k4, 1}, {k5, 2}};
	unsigned char big[511];
	struct storage_txn *t;
	struct storage_cursor *c;
	struct st_buf kb, v, key;
	unsigned char valbuf[4];
	int i, rc;

	memset(big, 0xff, sizeof(big)); /* sorts after k5, its prefix */
	OK(storage_txn_begin(st, NULL, 0, &t));
	for (i = 0; i < 5; i++) {
		valbuf[0] = (unsigned char)i;
		valbuf[1] = 0;
		valbuf[2] = 0xff;
		v.data = valbuf;
		v.len = 3;
		OK(storage_put(t, tb, &keys[i], &v, 0));
	}
	/* The longest key LMDB accepts by default, and an empty value. */
	kb.data = big;
	kb.len = sizeof(big);
	v.data = "";
	v.len = 0;
	OK(storage_put(t, tb, &kb, &v, 0));
	OK(storage_txn_commit(t));

	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	for (i = 0; i < 5; i++) {
		OK(storage_get(t, tb, &keys[i], &v));
		ck_assert_uint_eq(v.len, 3);
		ck_assert_uint_eq(((const unsigned char *)v.data)[0], (unsigned)i);
		ck_assert_uint_eq(((const unsigned char *)v.data)[2], 0xff);
	}
	OK(storage_get(t, tb, &kb, &v));
	ck_assert_uint_eq(v.len, 0);
	OK(storage_cursor_open(t, tb, &c));
	for (i = 0, rc = storage_cursor_seek(c, NULL, &key, NULL); rc == 0 && i < 5;
		i++, rc = storage_cursor_next(c, &key, NULL)) {
		ck_assert_uint_eq(key.len, sorted[i].len);
		ck_assert_mem_eq(key.data, sorted[i].data, key.len);
	}
	ck_assert_int_eq(i, 5);
	storage_cursor_close(c);
	OK(storage_txn_commit(t));
}
END_TEST

START_TEST(test_rows_large_value)
{
	enum storage_table tb = (enum storage_table)_i;
	size_t n = 300 * 1000;
	char *big = malloc(n);
	struct storage_txn *t;
	struct st_buf k = B("big"), v = {big, n}, got;

	ck_assert_ptr_nonnull(big);
	for (size_t i = 0; i < n; i++) {
		big[i] = (char)(i * 7);
	}
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_put(t, tb, &k, &v, 0));
	OK(storage_txn_commit(t));
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	OK(storage_get(t, tb, &k, &got));
	ck_assert_uint_eq(got.len, n);
	ck_assert_mem_eq(got.data, big, n);
	storage_txn_abort(t);
	free(big);
}
END_TEST

START_TEST(test_rows_bad_keys)
{
	struct storage_txn *t;
	char big[512];
	struct st_buf empty = {"", 0}, toolong = {big, sizeof(big)}, v = B("v");

	memset(big, 'x', sizeof(big));
	OK(storage_txn_begin(st, NULL, 0, &t));
	FAILS(storage_put(t, STORAGE_T_KEYS, &empty, &v, 0), ECHD_EINVAL);
	FAILS(storage_put(t, STORAGE_T_KEYS, &toolong, &v, 0), ECHD_EINVAL);
	FAILS(storage_put(t, STORAGE_T_KEYS, &v, &v, 0x80), ECHD_EINVAL);
	/* None of these poisons the txn. */
	put_s(t, STORAGE_T_KEYS, "fine", "yes");
	OK(storage_txn_commit(t));
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, STORAGE_T_KEYS, "fine", "yes");
	storage_txn_abort(t);
}
END_TEST

START_TEST(test_rows_append)
{
	enum storage_table tb = (enum storage_table)_i;
	struct storage_txn *t;
	char kbuf[16];
	struct st_buf k, v = B("x");

	OK(storage_txn_begin(st, NULL, 0, &t));
	for (int i = 0; i < 1000; i++) {
		snprintf(kbuf, sizeof(kbuf), "e%06d", i);
		k = B(kbuf);
		OK(storage_put(t, tb, &k, &v, STORAGE_PUT_APPEND));
	}
	/* Equal to the last key, and before it: both refused. */
	k = B("e000999");
	FAILS(storage_put(t, tb, &k, &v, STORAGE_PUT_APPEND), ECHD_EEXIST);
	k = B("e000500x");
	FAILS(storage_put(t, tb, &k, &v, STORAGE_PUT_APPEND), ECHD_EEXIST);
	/* The refusal leaves the txn usable. */
	k = B("e001000");
	OK(storage_put(t, tb, &k, &v, STORAGE_PUT_APPEND));
	OK(storage_txn_commit(t));

	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, tb, "e000000", "x");
	get_is(t, tb, "e001000", "x");
	get_is(t, tb, "e000500x", NULL);
	storage_txn_abort(t);
}
END_TEST

START_TEST(test_rows_put_in_read_txn)
{
	struct storage_txn *t;
	struct st_buf k = B("k"), v = B("v");
	int rc;

	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	rc = storage_put(t, STORAGE_T_KEYS, &k, &v, 0);
	ck_assert_int_lt(rc, 0);
	rc = storage_del(t, STORAGE_T_KEYS, &k);
	ck_assert_int_lt(rc, 0);
	storage_txn_abort(t);
}
END_TEST

/* ---- cursors ------------------------------------------------------------ */

static void
fill(enum storage_table tb, const char *const *keys)
{
	struct storage_txn *t;
	char vbuf[32];

	OK(storage_txn_begin(st, NULL, 0, &t));
	for (; *keys != NULL; keys++) {
		snprintf(vbuf, sizeof(vbuf), "v%s", *keys);
		put_s(t, tb, *keys, vbuf);
	}
	OK(storage_txn_commit(t));
}

static const char *const k3[] = {"10", "20", "30", NULL};

START_TEST(test_cursor_empty_table)
{
	enum storage_table tb = (enum storage_table)_i;
	struct storage_txn *t;
	struct storage_cursor *c;
	struct st_buf key = {NULL, 0}, probe = B("m");

	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_cursor_open(t, tb, &c));
	CUR(storage_cursor_next(c, &key, NULL), NULL);
	CUR(storage_cursor_prev(c, &key, NULL), NULL);
	CUR(storage_cursor_seek(c, NULL, &key, NULL), NULL);
	CUR(storage_cursor_seek(c, &probe, &key, NULL), NULL);
	CUR(storage_cursor_seek_last(c, NULL, &key, NULL), NULL);
	CUR(storage_cursor_seek_last(c, &probe, &key, NULL), NULL);
	CUR(storage_cursor_prev(c, &key, NULL), NULL);
	CUR(storage_cursor_next(c, &key, NULL), NULL);
	FAILS(storage_cursor_del(c), ECHD_ENOTFOUND);
	storage_cursor_close(c);
	OK(storage_txn_commit(t));
}
END_TEST

START_TEST(test_cursor_seek)
{
	enum storage_table tb = (enum storage_table)_i;
	struct storage_txn *t;
	struct storage_cursor *c;
	struct st_buf key, val, k;

	fill(tb, k3);
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	OK(storage_cursor_open(t, tb, &c));
	CUR(storage_cursor_seek(c, NULL, &key, &val), "10");
	ck_assert(buf_is(&val, "v10"));
	k = B("05");
	CUR(storage_cursor_seek(c, &k, &key, NULL), "10");
	k = B("10");
	CUR(storage_cursor_seek(c, &k, &key, NULL), "10");
	k = B("15");
	CUR(storage_cursor_seek(c, &k, &key, &val), "20");
	ck_assert(buf_is(&val, "v20"));
	k = B("30");
	CUR(storage_cursor_seek(c, &k, &key, NULL), "30");
	/* Past the end: the cursor stands after the last row. */
	k = B("35");
	CUR(storage_cursor_seek(c, &k, &key, NULL), NULL);
	CUR(storage_cursor_next(c, &key, NULL), NULL);
	CUR(storage_cursor_prev(c, &key, NULL), "30");
	/* An empty key sorts before every key. */
	k.data = "";
	k.len = 0;
	CUR(storage_cursor_seek(c, &k, &key, NULL), "10");
	storage_cursor_close(c);
	OK(storage_txn_commit(t));
}
END_TEST

START_TEST(test_cursor_seek_last)
{
	enum storage_table tb = (enum storage_table)_i;
	struct storage_txn *t;
	struct storage_cursor *c;
	struct st_buf key, val, k;

	fill(tb, k3);
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	OK(storage_cursor_open(t, tb, &c));
	CUR(storage_cursor_seek_last(c, NULL, &key, &val), "30");
	ck_assert(buf_is(&val, "v30"));
	k = B("35");
	CUR(storage_cursor_seek_last(c, &k, &key, NULL), "30");
	k = B("30");
	CUR(storage_cursor_seek_last(c, &k, &key, NULL), "30");
	k = B("25");
	CUR(storage_cursor_seek_last(c, &k, &key, &val), "20");
	ck_assert(buf_is(&val, "v20"));
	k = B("20");
	CUR(storage_cursor_seek_last(c, &k, &key, NULL), "20");
	/* A prefix of "20" sorts before it. */
	k = B("2");
	CUR(storage_cursor_seek_last(c, &k, &key, NULL), "10");
	k = B("10");
	CUR(storage_cursor_seek_last(c, &k, &key, NULL), "10");
	/* Before the first: the cursor stands before the first row. */
	k = B("05");
	CUR(storage_cursor_seek_last(c, &k, &key, NULL), NULL);
	CUR(storage_cursor_prev(c, &key, NULL), NULL);
	CUR(storage_cursor_next(c, &key, NULL), "10");
	k.data = "";
	k.len = 0;
	CUR(storage_cursor_seek_last(c, &k, &key, NULL), NULL);
	CUR(storage_cursor_next(c, &key, NULL), "10");
	storage_cursor_close(c);
	OK(storage_txn_commit(t));
}
END_TEST

START_TEST(test_cursor_walk)
{
	enum storage_table tb = (enum storage_table)_i;
	struct storage_txn *t;
	struct storage_cursor *c;
	struct st_buf key, val;

	fill(tb, k3);
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));

	/* Unpositioned: next is the first row. */
	OK(storage_cursor_open(t, tb, &c));
	CUR(storage_cursor_next(c, &key, &val), "10");
	ck_assert(buf_is(&val, "v10"));
	CUR(storage_cursor_next(c, &key, NULL), "20");
	CUR(storage_cursor_next(c, &key, NULL), "30");
	CUR(storage_cursor_next(c, &key, NULL), NULL);
	CUR(storage_cursor_next(c, &key, NULL), NULL);
	/* LMDB alone would answer "20" here (its cursor stayed on "30"). */
	CUR(storage_cursor_prev(c, &key, NULL), "30");
	CUR(storage_cursor_prev(c, &key, NULL), "20");
	CUR(storage_cursor_prev(c, &key, NULL), "10");
	CUR(storage_cursor_prev(c, &key, NULL), NULL);
	CUR(storage_cursor_prev(c, &key, NULL), NULL);
	CUR(storage_cursor_next(c, &key, NULL), "10");
	storage_cursor_close(c);

	/* Unpositioned: prev is the last row. */
	OK(storage_cursor_open(t, tb, &c));
	CUR(storage_cursor_prev(c, &key, NULL), "30");
	CUR(storage_cursor_next(c, &key, NULL), NULL);
	storage_cursor_close(c);
	OK(storage_txn_commit(t));
}
END_TEST

START_TEST(test_cursor_del_middle)
{
	enum storage_table tb = (enum storage_table)_i;
	static const char *const k5[] = {"10", "20", "30", "40", "50", NULL};
	struct storage_txn *t;
	struct storage_cursor *c;
	struct st_buf key, k;

	fill(tb, k5);
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_cursor_open(t, tb, &c));
	k = B("20");
	CUR(storage_cursor_seek(c, &k, &key, NULL), "20");
	OK(storage_cursor_del(c));
	/* Nothing is current after a delete: a second delete is refused. */
	FAILS(storage_cursor_del(c), ECHD_ENOTFOUND);
	CUR(storage_cursor_next(c, &key, NULL), "30");
	OK(storage_cursor_del(c));
	CUR(storage_cursor_prev(c, &key, NULL), "10");
	CUR(storage_cursor_next(c, &key, NULL), "40");
	storage_cursor_close(c);
	get_is(t, tb, "20", NULL);
	get_is(t, tb, "30", NULL);
	get_is(t, tb, "40", "v40");
	OK(storage_txn_commit(t));
}
END_TEST

START_TEST(test_cursor_del_edges)
{
	enum storage_table tb = (enum storage_table)_i;
	struct storage_txn *t;
	struct storage_cursor *c;
	struct st_buf key;

	fill(tb, k3);
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_cursor_open(t, tb, &c));
	/* The last row. */
	CUR(storage_cursor_seek_last(c, NULL, &key, NULL), "30");
	OK(storage_cursor_del(c));
	CUR(storage_cursor_next(c, &key, NULL), NULL);
	CUR(storage_cursor_prev(c, &key, NULL), "20");
	/* The first row. */
	CUR(storage_cursor_seek(c, NULL, &key, NULL), "10");
	OK(storage_cursor_del(c));
	CUR(storage_cursor_prev(c, &key, NULL), NULL);
	CUR(storage_cursor_next(c, &key, NULL), "20");
	/* The only row left: the table becomes empty. */
	OK(storage_cursor_del(c));
	CUR(storage_cursor_next(c, &key, NULL), NULL);
	CUR(storage_cursor_prev(c, &key, NULL), NULL);
	CUR(storage_cursor_seek(c, NULL, &key, NULL), NULL);
	/* Refilled through the txn, the same cursor sees the row. */
	put_s(t, tb, "99", "v99");
	CUR(storage_cursor_seek(c, NULL, &key, NULL), "99");
	storage_cursor_close(c);
	OK(storage_txn_commit(t));
	/* The deletions were committed. */
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, tb, "10", NULL);
	get_is(t, tb, "20", NULL);
	get_is(t, tb, "30", NULL);
	get_is(t, tb, "99", "v99");
	storage_txn_abort(t);
}
END_TEST

/* Many rows over many pages, so deletions cross page boundaries and make
 * LMDB rebalance and merge pages under the cursor. */
#define NROWS 3000

static void
fill_many(enum storage_table tb)
{
	struct storage_txn *t;
	char kbuf[16], vbuf[300];
	struct st_buf k, v = {vbuf, sizeof(vbuf)};

	memset(vbuf, 'v', sizeof(vbuf));
	OK(storage_txn_begin(st, NULL, 0, &t));
	for (int i = 0; i < NROWS; i++) {
		snprintf(kbuf, sizeof(kbuf), "r%05d", i);
		k = B(kbuf);
		OK(storage_put(t, tb, &k, &v, STORAGE_PUT_APPEND));
	}
	OK(storage_txn_commit(t));
}

START_TEST(test_cursor_del_many_forward)
{
	enum storage_table tb = (enum storage_table)_i;
	struct storage_txn *t;
	struct storage_cursor *c;
	struct st_buf key;
	char want[16];
	int i, rc, seen = 0;

	fill_many(tb);
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_cursor_open(t, tb, &c));
	/* Delete every row whose number is not a multiple of 3. */
	for (i = 0, rc = storage_cursor_seek(c, NULL, &key, NULL); rc == 0;
		i++, rc = storage_cursor_next(c, &key, NULL)) {
		snprintf(want, sizeof(want), "r%05d", i);
		ck_assert_msg(buf_is(&key, want), "row %d: got '%.*s'", i, (int)key.len,
			(const char *)key.data);
		if (i % 3 != 0) {
			OK(storage_cursor_del(c));
		}
	}
	FAILS(rc, ECHD_ENOTFOUND);
	ck_assert_int_eq(i, NROWS);
	storage_cursor_close(c);
	OK(storage_txn_commit(t));

	/* Exactly the multiples of 3 remain, in order. */
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_cursor_open(t, tb, &c));
	for (i = 0, rc = storage_cursor_seek(c, NULL, &key, NULL); rc == 0;
		i += 3, rc = storage_cursor_next(c, &key, NULL)) {
		snprintf(want, sizeof(want), "r%05d", i);
		ck_assert_msg(buf_is(&key, want), "kept %d: got '%.*s'", i, (int)key.len,
			(const char *)key.data);
		seen++;
	}
	ck_assert_int_eq(seen, (NROWS + 2) / 3);
	/* Then delete everything with del + next. */
	seen = 0;
	for (rc = storage_cursor_seek(c, NULL, &key, NULL); rc == 0;
		rc = storage_cursor_next(c, &key, NULL)) {
		OK(storage_cursor_del(c));
		seen++;
	}
	FAILS(rc, ECHD_ENOTFOUND);
	ck_assert_int_eq(seen, (NROWS + 2) / 3);
	CUR(storage_cursor_seek(c, NULL, &key, NULL), NULL);
	storage_cursor_close(c);
	OK(storage_txn_commit(t));
}
END_TEST

START_TEST(test_cursor_del_many_backward)
{
	enum storage_table tb = (enum storage_table)_i;
	struct storage_txn *t;
	struct storage_cursor *c;
	struct st_buf key;
	char want[16];
	int i, rc;

	fill_many(tb);
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_cursor_open(t, tb, &c));
	for (i = NROWS - 1, rc = storage_cursor_seek_last(c, NULL, &key, NULL); rc == 0;
		i--, rc = storage_cursor_prev(c, &key, NULL)) {
		snprintf(want, sizeof(want), "r%05d", i);
		ck_assert_msg(buf_is(&key, want), "row %d: got '%.*s'", i, (int)key.len,
			(const char *)key.data);
		if (i % 2 == 0) {
			OK(storage_cursor_del(c));
		}
	}
	FAILS(rc, ECHD_ENOTFOUND);
	ck_assert_int_eq(i, -1);
	/* Odd rows remain. */
	for (i = 1, rc = storage_cursor_seek(c, NULL, &key, NULL); rc == 0;
		i += 2, rc = storage_cursor_next(c, &key, NULL)) {
		snprintf(want, sizeof(want), "r%05d", i);
		ck_assert_msg(buf_is(&key, want), "kept %d: got '%.*s'", i, (int)key.len,
			(const char *)key.data);
	}
	ck_assert_int_eq(i, NROWS + 1);
	storage_cursor_close(c);
	OK(storage_txn_commit(t));
}
END_TEST

START_TEST(test_cursor_sees_txn_writes)
{
	enum storage_table tb = (enum storage_table)_i;
	enum storage_table other = (enum storage_table)((_i + 1) % STORAGE_T__COUNT);
	struct storage_txn *t, *child;
	struct storage_cursor *c;
	struct st_buf key, k;

	fill(tb, k3);
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_cursor_open(t, tb, &c));
	k = B("20");
	CUR(storage_cursor_seek(c, &k, &key, NULL), "20");
	/* A write to another table leaves the cursor's place alone. */
	put_s(t, other, "x", "1");
	CUR(storage_cursor_next(c, &key, NULL), "30");
	/* After a put to its table, a seek sees the new row. */
	put_s(t, tb, "25", "v25");
	CUR(storage_cursor_seek(c, &k, &key, NULL), "20");
	CUR(storage_cursor_next(c, &key, NULL), "25");
	/* Deleting the cursor's row through storage_del: a seek lands on its
	 * successor. */
	k = B("25");
	OK(storage_del(t, tb, &k));
	CUR(storage_cursor_seek(c, &k, &key, NULL), "30");
	CUR(storage_cursor_prev(c, &key, NULL), "20");
	/* A child's writes reach the parent's cursors at the child's commit. */
	OK(storage_txn_begin(st, t, 0, &child));
	put_s(child, tb, "15", "v15");
	OK(storage_txn_commit(child));
	k = B("10");
	CUR(storage_cursor_seek(c, &k, &key, NULL), "10");
	CUR(storage_cursor_next(c, &key, NULL), "15");
	storage_cursor_close(c);
	OK(storage_txn_commit(t));
}
END_TEST

/* The rule of storage.h: a cursor whose table was written since its last
 * seek may not move on. Kept in storage.c, so every backend refuses alike:
 * an assert, or ECHD_EINVAL when built without asserts. */
static void
cursor_moved_after_write(int how)
{
	enum storage_table tb = STORAGE_T_ENTRIES;
	struct storage_txn *t, *child;
	struct storage_cursor *c, *c2;
	struct st_buf key, k = B("20");

	fill(tb, k3);
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_cursor_open(t, tb, &c));
	CUR(storage_cursor_seek(c, &k, &key, NULL), "20");
	switch (how) {
	case 0:
		put_s(t, tb, "25", "v25");
		break;
	case 1:
		OK(storage_del(t, tb, &k));
		break;
	case 2: /* another cursor's delete */
		OK(storage_cursor_open(t, tb, &c2));
		CUR(storage_cursor_seek(c2, NULL, &key, NULL), "10");
		OK(storage_cursor_del(c2));
		CUR(storage_cursor_next(c2, &key, NULL), "20"); /* its own keeps its place */
		break;
	default: /* a child's committed write */
		OK(storage_txn_begin(st, t, 0, &child));
		put_s(child, tb, "25", "v25");
		OK(storage_txn_commit(child));
		break;
	}
	FAILS(how % 2 ? storage_cursor_prev(c, &key, NULL) : storage_cursor_next(c, &key, NULL),
		ECHD_EINVAL);
	FAILS(storage_cursor_del(c), ECHD_EINVAL);
	storage_txn_abort(t);
}

START_TEST(test_cursor_moved_after_write)
{
	cursor_moved_after_write(_i);
}
END_TEST

START_TEST(test_cursor_ahead)
{
	enum storage_table tb = (enum storage_table)_i;
	static const char *const k6[] = {"10", "20", "30", "40", "50", "60", NULL};
	struct storage_txn *t;
	struct storage_cursor *c;
	struct st_buf key, k = B("20");

	fill(tb, k6);
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_cursor_open(t, tb, &c));
	/* A hint changes no answer: forwards, a turn back, forwards again. */
	storage_cursor_ahead(c, 3);
	CUR(storage_cursor_seek(c, &k, &key, NULL), "20");
	CUR(storage_cursor_next(c, &key, NULL), "30");
	CUR(storage_cursor_next(c, &key, NULL), "40");
	CUR(storage_cursor_prev(c, &key, NULL), "30");
	CUR(storage_cursor_prev(c, &key, NULL), "20");
	CUR(storage_cursor_next(c, &key, NULL), "30");
	CUR(storage_cursor_next(c, &key, NULL), "40");
	CUR(storage_cursor_next(c, &key, NULL), "50");
	CUR(storage_cursor_next(c, &key, NULL), "60");
	CUR(storage_cursor_next(c, &key, NULL), NULL);
	CUR(storage_cursor_prev(c, &key, NULL), "60");
	/* Rows read ahead go with the place: a delete through the cursor and
	 * a put behind it are seen. */
	CUR(storage_cursor_seek(c, &k, &key, NULL), "20");
	CUR(storage_cursor_next(c, &key, NULL), "30"); /* 40 and 50 read ahead */
	OK(storage_cursor_del(c));
	CUR(storage_cursor_next(c, &key, NULL), "40");
	put_s(t, tb, "45", "v45");
	k = B("40");
	CUR(storage_cursor_seek(c, &k, &key, NULL), "40");
	CUR(storage_cursor_next(c, &key, NULL), "45");
	CUR(storage_cursor_next(c, &key, NULL), "50");
	storage_cursor_ahead(c, 0);
	CUR(storage_cursor_next(c, &key, NULL), "60");
	storage_cursor_close(c);
	storage_txn_abort(t);
}
END_TEST

START_TEST(test_cursor_closed_by_txn_end)
{
	enum storage_table tb = (enum storage_table)_i;
	struct storage_txn *t, *child;
	struct storage_cursor *c1, *c2, *c3;
	struct st_buf key;

	fill(tb, k3);
	/* Cursors left open are closed by commit and abort (ASan/valgrind
	 * would report the leak), in write, nested and read txns. */
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_cursor_open(t, tb, &c1));
	OK(storage_cursor_open(t, tb, &c2));
	OK(storage_cursor_open(t, tb, &c3));
	storage_cursor_close(c2); /* from the middle of the list */
	CUR(storage_cursor_seek(c1, NULL, &key, NULL), "10");
	OK(storage_txn_begin(st, t, 0, &child));
	OK(storage_cursor_open(child, tb, &c2));
	CUR(storage_cursor_seek_last(c2, NULL, &key, NULL), "30");
	storage_txn_abort(child);
	/* The parent's cursor works again once the child is gone. */
	CUR(storage_cursor_next(c1, &key, NULL), "20");
	put_s(t, tb, "40", "v40");
	OK(storage_txn_commit(t));

	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	OK(storage_cursor_open(t, tb, &c1));
	CUR(storage_cursor_seek_last(c1, NULL, &key, NULL), "40");
	storage_txn_abort(t);
}
END_TEST

START_TEST(test_cursor_read_only_del)
{
	struct storage_txn *t;
	struct storage_cursor *c;
	struct st_buf key;

	fill(STORAGE_T_ENTRIES, k3);
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	OK(storage_cursor_open(t, STORAGE_T_ENTRIES, &c));
	CUR(storage_cursor_seek(c, NULL, &key, NULL), "10");
	ck_assert_int_lt(storage_cursor_del(c), 0);
	storage_cursor_close(c);
	get_is(t, STORAGE_T_ENTRIES, "10", "v10");
	storage_txn_abort(t);
}
END_TEST

/* ---- transactions ------------------------------------------------------- */

START_TEST(test_nested_commit_and_abort)
{
	enum storage_table tb = (enum storage_table)_i;
	struct storage_txn *t, *c1, *c2;
	struct st_buf k = B("a");

	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, tb, "a", "1");

	/* An aborted child changes nothing, even what the parent wrote. */
	OK(storage_txn_begin(st, t, 0, &c1));
	put_s(c1, tb, "b", "2");
	put_s(c1, tb, "a", "changed");
	get_is(c1, tb, "a", "changed");
	storage_txn_abort(c1);
	get_is(t, tb, "a", "1");
	get_is(t, tb, "b", NULL);

	OK(storage_txn_begin(st, t, 0, &c1));
	OK(storage_del(c1, tb, &k));
	storage_txn_abort(c1);
	get_is(t, tb, "a", "1");

	/* A committed child lands in the parent. */
	OK(storage_txn_begin(st, t, 0, &c1));
	get_is(c1, tb, "a", "1");
	put_s(c1, tb, "c", "3");
	OK(storage_txn_commit(c1));
	get_is(t, tb, "c", "3");

	/* Grandchild committed into a child that is then aborted: gone. */
	OK(storage_txn_begin(st, t, 0, &c1));
	OK(storage_txn_begin(st, c1, 0, &c2));
	put_s(c2, tb, "d", "4");
	OK(storage_txn_commit(c2));
	get_is(c1, tb, "d", "4");
	storage_txn_abort(c1);
	get_is(t, tb, "d", NULL);

	/* Nothing is visible outside before the top-level commit. */
	{
		struct storage_txn *r;

		OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &r));
		get_is(r, tb, "a", NULL);
		storage_txn_abort(r);
	}
	OK(storage_txn_commit(t));

	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, tb, "a", "1");
	get_is(t, tb, "b", NULL);
	get_is(t, tb, "c", "3");
	get_is(t, tb, "d", NULL);
	storage_txn_abort(t);
}
END_TEST

START_TEST(test_nested_open_child_at_parent_end)
{
	struct storage_txn *t, *c1, *c2;

	/* Committing a parent commits its open children, as LMDB does. */
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_txn_begin(st, t, 0, &c1));
	OK(storage_txn_begin(st, c1, 0, &c2));
	put_s(c2, STORAGE_T_KEYS, "deep", "yes");
	OK(storage_txn_commit(t));

	/* Aborting one aborts them. */
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_txn_begin(st, t, 0, &c1));
	put_s(c1, STORAGE_T_KEYS, "lost", "yes");
	storage_txn_abort(t);

	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, STORAGE_T_KEYS, "deep", "yes");
	get_is(t, STORAGE_T_KEYS, "lost", NULL);
	storage_txn_abort(t);
	/* Every wrapper came back: grow needs zero open txns. */
	if (storage_capacity(st) != NULL) {
		OK(storage_capacity_grow(cap(), 0));
	}
}
END_TEST

START_TEST(test_nested_misuse)
{
	struct storage_txn *t, *r, *c1, *c2;

	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &r));
	FAILS(storage_txn_begin(st, r, 0, &c1), ECHD_EINVAL);
	OK(storage_txn_begin(st, NULL, 0, &t));
	FAILS(storage_txn_begin(st, t, STORAGE_TXN_RDONLY, &c1), ECHD_EINVAL);
	FAILS(storage_txn_begin(st, NULL, 0x40, &c1), ECHD_EINVAL);
	/* One write txn at a time. */
	FAILS(storage_txn_begin(st, NULL, 0, &c1), -EBUSY);
	OK(storage_txn_begin(st, t, 0, &c1));
	/* One child at a time. */
	FAILS(storage_txn_begin(st, t, 0, &c2), ECHD_EINVAL);
	storage_txn_abort(c1);
	OK(storage_txn_commit(t));
	OK(storage_txn_commit(r));
	/* The writer slot is free again. */
	OK(storage_txn_begin(st, NULL, 0, &t));
	storage_txn_abort(t);
}
END_TEST

START_TEST(test_nested_many)
{
	struct storage_txn *t, *c;
	struct storage_stat s0, s1;
	char kbuf[16];

	/* The hot path: one nested txn per command in one batch. */
	OK(storage_stat(st, &s0));
	OK(storage_txn_begin(st, NULL, 0, &t));
	for (int i = 0; i < 2000; i++) {
		snprintf(kbuf, sizeof(kbuf), "n%05d", i);
		OK(storage_txn_begin(st, t, 0, &c));
		put_s(c, STORAGE_T_ENTRIES, kbuf, "x");
		if (i % 10 == 9) {
			storage_txn_abort(c);
		} else {
			OK(storage_txn_commit(c));
		}
	}
	OK(storage_txn_commit(t));
	OK(storage_stat(st, &s1));
	/* Only the top-level commit counts. */
	ck_assert_uint_eq(s1.commits, s0.commits + 1);
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, STORAGE_T_ENTRIES, "n00008", "x");
	get_is(t, STORAGE_T_ENTRIES, "n00009", NULL);
	get_is(t, STORAGE_T_ENTRIES, "n01999", NULL);
	get_is(t, STORAGE_T_ENTRIES, "n01998", "x");
	storage_txn_abort(t);
}
END_TEST

START_TEST(test_txn_writes)
{
	struct storage_txn *t, *c1, *c2;
	struct storage_cursor *c;
	struct st_buf key, k = B("a"), v = B("v"), empty = {"", 0};

	OK(storage_txn_begin(st, NULL, 0, &t));
	U64_EQ(storage_txn_writes(t), 0);
	put_s(t, STORAGE_T_KEYS, "a", "1");
	put_s(t, STORAGE_T_KEYS, "a", "2"); /* a rewrite is a write too */
	U64_EQ(storage_txn_writes(t), 2);
	/* What fails writes nothing. */
	FAILS(storage_put(t, STORAGE_T_KEYS, &empty, &v, 0), ECHD_EINVAL);
	FAILS(storage_del(t, STORAGE_T_KEYS, &v), ECHD_ENOTFOUND);
	U64_EQ(storage_txn_writes(t), 2);
	/* A child's writes count in the parent once it commits, not before
	 * and not when it aborts; a grandchild's through its parent. */
	OK(storage_txn_begin(st, t, 0, &c1));
	OK(storage_del(c1, STORAGE_T_KEYS, &k));
	OK(storage_txn_begin(st, c1, 0, &c2));
	put_s(c2, STORAGE_T_META, "m", "1");
	OK(storage_txn_commit(c2));
	U64_EQ(storage_txn_writes(c1), 2);
	U64_EQ(storage_txn_writes(t), 2);
	storage_txn_abort(c1);
	U64_EQ(storage_txn_writes(t), 2);
	OK(storage_txn_begin(st, t, 0, &c1));
	OK(storage_cursor_open(c1, STORAGE_T_KEYS, &c));
	CUR(storage_cursor_seek(c, NULL, &key, NULL), "a");
	OK(storage_cursor_del(c));
	OK(storage_txn_begin(st, c1, 0, &c2));
	put_s(c2, STORAGE_T_META, "m", "1");
	/* c2 left open: committing c1 commits it, and counts it. */
	OK(storage_txn_commit(c1));
	U64_EQ(storage_txn_writes(t), 4);
	storage_txn_abort(t);
	/* A read txn writes nothing. */
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	ck_assert_int_lt(storage_put(t, STORAGE_T_KEYS, &k, &v, 0), 0);
	U64_EQ(storage_txn_writes(t), 0);
	storage_txn_abort(t);
}
END_TEST

/* Random puts, dels and cursor dels in nested transactions, against a
 * model: every backend must agree with a plain array. The seed is fixed,
 * so a failure repeats. */
#define MODEL_KEYS 200
#define MODEL_DEPTH 4

struct model {
	int val[MODEL_DEPTH + 1][MODEL_KEYS]; /* per level; -1: absent */
};

static void
model_key(char *buf, size_t n, int i)
{
	/* Varying lengths, so that a shorter key sorts before its extensions. */
	snprintf(buf, n, i % 2 == 0 ? "k%d" : "k%dx", i / 2);
}

static int
model_key_cmp(const void *a, const void *b)
{
	char ka[16], kb[16];

	model_key(ka, sizeof(ka), *(const int *)a);
	model_key(kb, sizeof(kb), *(const int *)b);
	return strcmp(ka, kb);
}

/* Walks t's table forwards and backwards (reading ahead ahead rows) and
 * gets every key. */
static void
model_check(struct storage_txn *t, const int *val, const int *order, unsigned ahead)
{
	struct storage_cursor *c;
	struct st_buf key, v, kb;
	char kbuf[16], vbuf[16];
	int rc, i;

	OK(storage_cursor_open(t, STORAGE_T_PEL, &c));
	storage_cursor_ahead(c, ahead);
	for (int pass = 0; pass < 2; pass++) {
		i = pass == 0 ? 0 : MODEL_KEYS - 1;
		rc = pass == 0 ? storage_cursor_seek(c, NULL, &key, &v)
			       : storage_cursor_seek_last(c, NULL, &key, &v);
		for (;;) {
			while (i >= 0 && i < MODEL_KEYS && val[order[i]] < 0) {
				i += pass == 0 ? 1 : -1;
			}
			if (i < 0 || i >= MODEL_KEYS) {
				FAILS(rc, ECHD_ENOTFOUND);
				break;
			}
			OK(rc);
			model_key(kbuf, sizeof(kbuf), order[i]);
			snprintf(vbuf, sizeof(vbuf), "%d", val[order[i]]);
			ck_assert_msg(buf_is(&key, kbuf) && buf_is(&v, vbuf),
				"walk %d: got '%.*s'='%.*s', expected '%s'='%s'", pass, (int)key.len,
				(const char *)key.data, (int)v.len, (const char *)v.data, kbuf, vbuf);
			i += pass == 0 ? 1 : -1;
			rc = pass == 0 ? storage_cursor_next(c, &key, &v)
				       : storage_cursor_prev(c, &key, &v);
		}
	}
	storage_cursor_close(c);
	for (i = 0; i < MODEL_KEYS; i++) {
		model_key(kbuf, sizeof(kbuf), i);
		kb = B(kbuf);
		rc = storage_get(t, STORAGE_T_PEL, &kb, &v);
		if (val[i] < 0) {
			FAILS(rc, ECHD_ENOTFOUND);
		} else {
			OK(rc);
			snprintf(vbuf, sizeof(vbuf), "%d", val[i]);
			ck_assert(buf_is(&v, vbuf));
		}
	}
}

START_TEST(test_random_against_model)
{
	static struct model m;
	struct storage_txn *txn[MODEL_DEPTH + 1];
	int order[MODEL_KEYS], depth = 0;
	unsigned seed = 12345;
	char kbuf[16], vbuf[16];

	for (int i = 0; i < MODEL_KEYS; i++) {
		order[i] = i;
		m.val[0][i] = -1;
	}
	qsort(order, MODEL_KEYS, sizeof(order[0]), model_key_cmp);
	OK(storage_txn_begin(st, NULL, 0, &txn[0]));
	for (int op = 0; op < 20000; op++) {
		int r = rand_r(&seed) % 100, i = rand_r(&seed) % MODEL_KEYS;
		struct storage_txn *t = txn[depth];
		struct st_buf k, v;

		model_key(kbuf, sizeof(kbuf), i);
		k = B(kbuf);
		if (r < 50) {
			snprintf(vbuf, sizeof(vbuf), "%d", op);
			v = B(vbuf);
			OK(storage_put(t, STORAGE_T_PEL, &k, &v, 0));
			m.val[depth][i] = op;
		} else if (r < 80) {
			FAILS(storage_del(t, STORAGE_T_PEL, &k), m.val[depth][i] < 0 ? ECHD_ENOTFOUND : 0);
			m.val[depth][i] = -1;
		} else if (r < 85) {
			/* Deletes a run of rows through a cursor. */
			struct storage_cursor *c;
			struct st_buf key;
			int rc, n = rand_r(&seed) % 8;

			OK(storage_cursor_open(t, STORAGE_T_PEL, &c));
			storage_cursor_ahead(c, (unsigned)n);
			rc = storage_cursor_seek(c, &k, &key, NULL);
			for (; rc == 0 && n > 0; n--) {
				for (int j = 0; j < MODEL_KEYS; j++) {
					model_key(kbuf, sizeof(kbuf), j);
					if (buf_is(&key, kbuf)) {
						ck_assert_int_ge(m.val[depth][j], 0);
						m.val[depth][j] = -1;
					}
				}
				OK(storage_cursor_del(c));
				rc = storage_cursor_next(c, &key, NULL);
			}
			storage_cursor_close(c);
		} else if (r < 91 && depth < MODEL_DEPTH) {
			OK(storage_txn_begin(st, t, 0, &txn[depth + 1]));
			depth++;
			memcpy(m.val[depth], m.val[depth - 1], sizeof(m.val[0]));
		} else if (r < 95 && depth > 0) {
			OK(storage_txn_commit(t));
			depth--;
			memcpy(m.val[depth], m.val[depth + 1], sizeof(m.val[0]));
		} else if (r < 98 && depth > 0) {
			storage_txn_abort(t);
			depth--;
		} else if (depth == 0) {
			/* A reader sees the committed state, not this txn's. */
			struct storage_txn *rd;

			OK(storage_txn_commit(t));
			OK(storage_txn_begin(st, NULL, 0, &txn[0]));
			OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &rd));
			k = B("k0");
			v = B("changed");
			OK(storage_put(txn[0], STORAGE_T_PEL, &k, &v, 0));
			model_check(rd, m.val[0], order, 5);
			storage_txn_abort(rd);
			OK(storage_del(txn[0], STORAGE_T_PEL, &k));
			m.val[0][0] = -1;
		}
		if (op % 500 == 0) {
			model_check(txn[depth], m.val[depth], order, (unsigned)(op / 500) % 9);
		}
	}
	model_check(txn[depth], m.val[depth], order, 64);
	storage_txn_abort(txn[0]);
}
END_TEST

/* Generations, on every backend: storage.c numbers the top-level write
 * commits; the backend says which are durable, never more than were
 * committed, never fewer than before, and all of them after a sync. */
static void
reopen_backend(enum storage_sync_mode mode)
{
	struct storage_opts o = opts_default();

	o.sync_mode = mode;
	storage_close(st);
	st = NULL;
	rm_rf(dir);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	OK(storage_open(fixture.backend, &o, &st));
}

START_TEST(test_commit_generations)
{
	struct storage_txn *t, *c;
	uint64_t gen, before, d;
	char k[16];

	reopen_backend(STORAGE_SYNC_DATA);
	U64_EQ(storage_commit_gen(st), 0);
	U64_EQ(storage_durable_gen(st), 0);
	for (uint64_t i = 1; i <= 4; i++) {
		snprintf(k, sizeof(k), "k%" PRIu64, i);
		OK(storage_txn_begin(st, NULL, 0, &t));
		OK(storage_txn_begin(st, t, 0, &c));
		put_s(c, STORAGE_T_KEYS, k, "v");
		gen = 99;
		OK(storage_txn_commit_gen(c, &gen));
		U64_EQ(gen, 0); /* a nested commit gets none */
		U64_EQ(storage_commit_gen(st), i - 1);
		before = storage_durable_gen(st);
		OK(storage_txn_commit_gen(t, &gen));
		U64_EQ(gen, i);
		U64_EQ(storage_commit_gen(st), i);
		d = storage_durable_gen(st);
		ck_assert_uint_le(d, i);
		ck_assert_uint_ge(d, before);
	}
	/* Reads and aborts get no generation. */
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	gen = 99;
	OK(storage_txn_commit_gen(t, &gen));
	U64_EQ(gen, 0);
	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_KEYS, "lost", "v");
	storage_txn_abort(t);
	U64_EQ(storage_commit_gen(st), 4);
	OK(storage_sync(st));
	U64_EQ(storage_durable_gen(st), 4);

	/* Full sync: durable when the commit returns. */
	reopen_backend(STORAGE_SYNC_FULL);
	for (uint64_t i = 1; i <= 2; i++) {
		OK(storage_txn_begin(st, NULL, 0, &t));
		put_s(t, STORAGE_T_KEYS, "k", "v");
		OK(storage_txn_commit_gen(t, &gen));
		U64_EQ(gen, i);
		U64_EQ(storage_durable_gen(st), i);
	}
}
END_TEST

/* The optional interfaces, on every backend: which engine offers which.
 * mem and fwd offer none, so the contract suites passing on them prove
 * that an engine needs neither; a capacity, where there is one, admits the
 * writes of a fresh store with no limit set. Deferred work is
 * lmdb-staged's alone (which passes lmdb's capacity on). */
START_TEST(test_optional_interfaces)
{
	struct storage_capacity *c = storage_capacity(st);
	struct storage_room room;

	ck_assert((fixture_is("lmdb") || fixture_is("fault") || fixture_is("lmdb-staged")) ==
		  (c != NULL));
	ck_assert(fixture_is("postgres") == (storage_ha(st) != NULL));
	ck_assert(fixture_is("lmdb-staged") == (storage_maintain(st) != NULL));
	if (fixture_in_memory()) {
		ck_assert_ptr_null(c);
		ck_assert_ptr_null(storage_ha(st));
	}
	if (c != NULL) {
		memset(&room, 0xff, sizeof(room));
		OK(storage_capacity_admit(c, 0, &room));
		ck_assert(room.adds_ok && !room.fs_full);
	}
}
END_TEST

START_TEST(test_stat_used_bytes)
{
	struct storage_stat s0, s1, s2;
	struct storage_txn *t, *c;
	char vbuf[1000], kbuf[16];
	struct st_buf k, v = {vbuf, sizeof(vbuf)};

	memset(vbuf, 'u', sizeof(vbuf));
	OK(storage_stat(st, &s0));
	OK(storage_txn_begin(st, NULL, 0, &t));
	for (int i = 0; i < 200; i++) {
		snprintf(kbuf, sizeof(kbuf), "u%04d", i);
		k = B(kbuf);
		OK(storage_put(t, STORAGE_T_ENTRIES, &k, &v, 0));
	}
	/* An aborted child's rows are not counted. */
	OK(storage_txn_begin(st, t, 0, &c));
	k = B("aborted");
	OK(storage_put(c, STORAGE_T_ENTRIES, &k, &v, 0));
	storage_txn_abort(c);
	OK(storage_stat(st, &s1));
	U64_EQ(s1.used_bytes, s0.used_bytes); /* not committed yet */
	OK(storage_txn_commit(t));
	OK(storage_stat(st, &s1));
	ck_assert_uint_ge(s1.used_bytes, s0.used_bytes + 200 * 1000);
	U64_EQ(s1.commits, s0.commits + 1);
	if (fixture_in_memory()) {
		/* Exactly its keys and values: 200 of 5 + 1000 bytes. */
		U64_EQ(s1.used_bytes, s0.used_bytes + 200 * 1005);
		OK(storage_txn_begin(st, NULL, 0, &t));
		for (int i = 0; i < 100; i++) {
			snprintf(kbuf, sizeof(kbuf), "u%04d", i);
			k = B(kbuf);
			OK(storage_del(t, STORAGE_T_ENTRIES, &k));
		}
		k = B("u0100");
		v = B("short");
		OK(storage_put(t, STORAGE_T_ENTRIES, &k, &v, 0));
		OK(storage_txn_commit(t));
		OK(storage_stat(st, &s2));
		U64_EQ(s2.used_bytes, s0.used_bytes + 99 * 1005 + 10);
	}
}
END_TEST

START_TEST(test_isolation_snapshot)
{
	enum storage_table tb = (enum storage_table)_i;
	struct storage_txn *w, *r1, *r2, *r3;

	fill(tb, k3);
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &r1));
	OK(storage_txn_begin(st, NULL, 0, &w));
	put_s(w, tb, "new", "1");
	put_s(w, tb, "10", "overwritten");
	get_is(w, tb, "new", "1");
	/* A reader begun while the write is pending sees committed data only. */
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &r2));
	get_is(r1, tb, "new", NULL);
	get_is(r2, tb, "new", NULL);
	get_is(r2, tb, "10", "v10");
	OK(storage_txn_commit(w));
	/* Old snapshots stay as they were; a new reader sees the commit. */
	get_is(r1, tb, "new", NULL);
	get_is(r2, tb, "10", "v10");
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &r3));
	get_is(r3, tb, "new", "1");
	get_is(r3, tb, "10", "overwritten");
	storage_txn_abort(r1);
	OK(storage_txn_commit(r2));
	storage_txn_abort(r3);
	/* A reused reader (renewed from the cache) sees the latest state. */
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &r1));
	get_is(r1, tb, "new", "1");
	storage_txn_abort(r1);
}
END_TEST

START_TEST(test_aborted_write_invisible)
{
	struct storage_txn *t;

	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_META, "gone", "1");
	storage_txn_abort(t);
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, STORAGE_T_META, "gone", NULL);
	storage_txn_abort(t);
}
END_TEST

START_TEST(test_enomem)
{
	struct storage_opts o = opts_default();
	struct storage *s2 = NULL;
	struct storage_txn *t;
	struct storage_cursor *c;

	echd_alloc_fail_at(1);
	FAILS(storage_open("lmdb", &o, &s2), -ENOMEM);
	ck_assert_ptr_null(s2);
	/* No wrapper cached yet: the first begin allocates. */
	echd_alloc_fail_at(1);
	FAILS(storage_txn_begin(st, NULL, 0, &t), -ENOMEM);
	OK(storage_txn_begin(st, NULL, 0, &t));
	echd_alloc_fail_at(1);
	FAILS(storage_cursor_open(t, STORAGE_T_KEYS, &c), -ENOMEM);
	echd_alloc_fail_at(0);
	OK(storage_cursor_open(t, STORAGE_T_KEYS, &c));
	storage_cursor_close(c);
	OK(storage_txn_commit(t));
}
END_TEST

/* ---- environment -------------------------------------------------------- */

START_TEST(test_reopen_keeps_state)
{
	struct storage_opts o = opts_default();
	struct storage_txn *t;
	char kbuf[16];

	OK(storage_txn_begin(st, NULL, 0, &t));
	for (int i = 0; i < STORAGE_T__COUNT; i++) {
		snprintf(kbuf, sizeof(kbuf), "t%d", i);
		put_s(t, (enum storage_table)i, kbuf, "kept");
	}
	OK(storage_txn_commit(t));
	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_META, "t0", "aborted");
	storage_txn_abort(t);

	reopen_with(&o);
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	for (int i = 0; i < STORAGE_T__COUNT; i++) {
		snprintf(kbuf, sizeof(kbuf), "t%d", i);
		get_is(t, (enum storage_table)i, kbuf, "kept");
	}
	storage_txn_abort(t);
}
END_TEST

START_TEST(test_open_missing_dir)
{
	struct storage_opts o = opts_default();
	struct storage *s2 = NULL;
	char missing[PATH_MAX + 16];

	snprintf(missing, sizeof(missing), "%s/nope", dir);
	o.dir = missing;
	FAILS(storage_open("lmdb", &o, &s2), -ENOENT);
	ck_assert_ptr_null(s2);
}
END_TEST

START_TEST(test_stat_counts)
{
	struct storage_stat s0, s1;
	struct storage_capacity_stat c;
	struct storage_txn *t;
	char vbuf[1000];
	struct st_buf k, v = {vbuf, sizeof(vbuf)};
	char kbuf[16];

	memset(vbuf, 's', sizeof(vbuf));
	stat_both(&s0, &c);
	ck_assert_uint_ge(c.page_size, 512);
	ck_assert_uint_eq(c.map_size, 16 * MIB);
	ck_assert_uint_eq(s0.commits, 0);
	ck_assert_uint_eq(s0.syncs, 0);
	ck_assert_uint_gt(s0.used_bytes, 0);

	OK(storage_txn_begin(st, NULL, 0, &t));
	for (int i = 0; i < 200; i++) {
		snprintf(kbuf, sizeof(kbuf), "s%04d", i);
		k = B(kbuf);
		OK(storage_put(t, STORAGE_T_ENTRIES, &k, &v, 0));
	}
	OK(storage_txn_commit(t));
	/* Read txns count for nothing. */
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	OK(storage_txn_commit(t));

	OK(storage_stat(st, &s1));
	ck_assert_uint_eq(s1.commits, 1);
	ck_assert_uint_eq(s1.syncs, 1);
	ck_assert_uint_eq(s1.last_txn_id, s0.last_txn_id + 1);
	ck_assert_uint_ge(s1.used_bytes, s0.used_bytes + 200 * 1000);
	ck_assert_uint_eq(s1.used_bytes % c.page_size, 0);
	OK(storage_sync(st));
	OK(storage_stat(st, &s1));
	ck_assert_uint_eq(s1.syncs, 2);
}
END_TEST

START_TEST(test_sync_data_mode)
{
	struct storage_opts o = opts_default();
	struct storage_stat s;
	struct storage_txn *t;

	o.sync_mode = STORAGE_SYNC_DATA;
	reopen_with(&o);
	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_KEYS, "k1", "v1");
	OK(storage_txn_commit(t));
	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_KEYS, "k2", "v2");
	OK(storage_txn_commit(t));
	OK(storage_sync(st));
	OK(storage_stat(st, &s));
	ck_assert_uint_eq(s.commits, 2);
	ck_assert_uint_eq(s.syncs, 3);
	/* Readable in the same process and after reopening in full mode. */
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, STORAGE_T_KEYS, "k2", "v2");
	storage_txn_abort(t);
	o.sync_mode = STORAGE_SYNC_FULL;
	reopen_with(&o);
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, STORAGE_T_KEYS, "k1", "v1");
	get_is(t, STORAGE_T_KEYS, "k2", "v2");
	storage_txn_abort(t);
}
END_TEST

/* A 1 MiB map with one committed row, "before". */
static void
open_tiny_map(void)
{
	struct storage_opts o = opts_default();
	struct storage_stat s;
	struct storage_capacity_stat c;
	struct storage_txn *t;

	opt_u64(&o, "lmdb.map-size", MIB);
	reopen_fresh(&o);
	stat_both(&s, &c);
	ck_assert_uint_eq(c.map_size, MIB);
	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_META, "before", "1");
	OK(storage_txn_commit(t));
}

/* LMDB's meta-page rule, behind storage_durable_gen(): with
 * STORAGE_SYNC_DATA commit N is durable once commit N+1 has flushed, or
 * after a sync; a commit that wrote nothing flushes nothing. */
START_TEST(test_durable_gen_meta_page)
{
	struct storage_opts o = opts_default();
	struct storage_txn *t;

	o.sync_mode = STORAGE_SYNC_DATA;
	reopen_fresh(&o);
	for (uint64_t i = 1; i <= 3; i++) {
		OK(storage_txn_begin(st, NULL, 0, &t));
		put_s(t, STORAGE_T_KEYS, "k", "v");
		OK(storage_txn_commit(t));
		U64_EQ(storage_durable_gen(st), i - 1);
	}
	/* An empty commit (generation 4) waits with the others... */
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_txn_commit(t));
	U64_EQ(storage_commit_gen(st), 4);
	U64_EQ(storage_durable_gen(st), 2);
	OK(storage_sync(st));
	U64_EQ(storage_durable_gen(st), 4);
	/* ...and is durable at once when nothing waits. */
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_txn_commit(t));
	U64_EQ(storage_durable_gen(st), 5);
}
END_TEST

/* LMDB's answer to storage_write_admit(): it grows the map while a quarter
 * is free; at max_bytes it refuses writes that add data once the live
 * pages and a reserve reach it, and asks for nested writes; pages freed
 * inside the map count as room. */
START_TEST(test_write_admit_lmdb)
{
	size_t n = 800 * 1024;
	char *big = calloc(1, n);
	struct st_buf kb = B("big"), vb = {big, n};
	struct storage_room room;
	struct storage_stat s;
	struct storage_capacity_stat c;
	struct storage_txn *t;

	ck_assert_ptr_nonnull(big);
	open_tiny_map();
	OK(storage_capacity_admit(cap(), MIB, &room));
	ck_assert(room.adds_ok && !room.nest && !room.grew && !room.fs_full);

	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_put(t, STORAGE_T_ENTRIES, &kb, &vb, 0));
	OK(storage_txn_commit(t));
	/* More than 3/4 used, and the map is at max_bytes: full. */
	OK(storage_capacity_admit(cap(), MIB, &room));
	ck_assert(!room.adds_ok && room.nest && !room.grew && !room.fs_full);
	I64_EQ(room.full_rc, ECHD_ELIMIT);
	/* Not with a transaction open: the last answer stands. */
	OK(storage_txn_begin(st, NULL, 0, &t));
	room.adds_ok = true;
	FAILS(storage_capacity_admit(cap(), MIB, &room), -EBUSY);
	ck_assert(room.adds_ok);
	OK(storage_del(t, STORAGE_T_ENTRIES, &kb));
	OK(storage_txn_commit(t));
	/* The freed pages are room: still short (nest), but admitted. */
	OK(storage_capacity_admit(cap(), MIB, &room));
	ck_assert(room.adds_ok && room.nest && !room.grew);
	stat_both(&s, &c);
	U64_EQ(c.map_size, MIB);
	/* Without a limit the map grows instead. */
	OK(storage_capacity_admit(cap(), 0, &room));
	ck_assert(room.adds_ok && !room.nest && room.grew);
	stat_both(&s, &c);
	ck_assert_uint_ge(c.map_size, MIB + 64 * MIB);
	free(big);
}
END_TEST

static void
grow_and_check(uint64_t old_size)
{
	struct storage_stat s;
	struct storage_capacity_stat c;

	OK(storage_capacity_grow(cap(), 0));
	stat_both(&s, &c);
	ck_assert_uint_ge(c.map_size, old_size + 64 * MIB);
}

/* The broker's flow: a command's child hits the full map and is aborted,
 * the batch commits what it had, the map grows, the command runs again. */
static void
map_full_in_child(bool commit_failed)
{
	size_t n = 2 * MIB;
	char *big = calloc(1, n);
	struct st_buf kb = B("big"), vb = {big, n}, v;
	struct storage_txn *t, *c;

	ck_assert_ptr_nonnull(big);
	open_tiny_map();
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_txn_begin(st, t, 0, &c));
	put_s(c, STORAGE_T_KEYS, "small", "1");
	OK(storage_txn_commit(c));
	OK(storage_txn_begin(st, t, 0, &c));
	put_s(c, STORAGE_T_KEYS, "also-lost", "1");
	FAILS(storage_put(c, STORAGE_T_ENTRIES, &kb, &vb, 0), ECHD_EMAPFULL);
	if (commit_failed) {
		/* Bare LMDB would answer MDB_BAD_TXN and fail the parent too;
		 * the backend aborts the child and names the first error. */
		FAILS(storage_txn_commit(c), ECHD_EMAPFULL);
	} else {
		storage_txn_abort(c);
	}
	/* The parent is intact and commits. */
	get_is(t, STORAGE_T_KEYS, "small", "1");
	get_is(t, STORAGE_T_KEYS, "also-lost", NULL);
	put_s(t, STORAGE_T_KEYS, "after", "1");
	OK(storage_txn_commit(t));

	grow_and_check(MIB);
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_put(t, STORAGE_T_ENTRIES, &kb, &vb, 0));
	OK(storage_txn_commit(t));

	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, STORAGE_T_META, "before", "1");
	get_is(t, STORAGE_T_KEYS, "small", "1");
	get_is(t, STORAGE_T_KEYS, "after", "1");
	get_is(t, STORAGE_T_KEYS, "also-lost", NULL);
	OK(storage_get(t, STORAGE_T_ENTRIES, &kb, &v));
	ck_assert_uint_eq(v.len, n);
	storage_txn_abort(t);
	free(big);
}

START_TEST(test_map_full_child_abort_grow_retry)
{
	map_full_in_child(false);
}
END_TEST

START_TEST(test_map_full_child_commit_refused)
{
	map_full_in_child(true);
}
END_TEST

START_TEST(test_map_full_top_level)
{
	static char vbuf[2000];
	struct st_buf k, v = {vbuf, sizeof(vbuf)};
	struct storage_txn *t;
	char kbuf[16];
	int i, rc = 0;

	open_tiny_map();
	memset(vbuf, 't', sizeof(vbuf));
	OK(storage_txn_begin(st, NULL, 0, &t));
	for (i = 0; i < 10000; i++) {
		snprintf(kbuf, sizeof(kbuf), "t%05d", i);
		k = B(kbuf);
		rc = storage_put(t, STORAGE_T_ENTRIES, &k, &v, 0);
		if (rc != 0) {
			break;
		}
	}
	FAILS(rc, ECHD_EMAPFULL);
	ck_assert_int_gt(i, 100);
	/* The failed txn cannot commit; it is freed all the same. */
	FAILS(storage_txn_commit(t), ECHD_EMAPFULL);
	grow_and_check(MIB);
	OK(storage_txn_begin(st, NULL, 0, &t));
	for (int j = 0; j <= i; j++) {
		snprintf(kbuf, sizeof(kbuf), "t%05d", j);
		k = B(kbuf);
		OK(storage_put(t, STORAGE_T_ENTRIES, &k, &v, 0));
	}
	OK(storage_txn_commit(t));
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, STORAGE_T_META, "before", "1");
	OK(storage_get(t, STORAGE_T_ENTRIES, &k, &v));
	ck_assert_uint_eq(v.len, sizeof(vbuf));
	storage_txn_abort(t);
}
END_TEST

/* Children of one batch fill the map to the last page. The batch itself
 * may then be unable to commit (LMDB needs pages to save the freelist): a
 * broker must keep headroom or treat that commit failure as "nothing
 * happened". Either way nothing committed before is lost. */
START_TEST(test_map_full_exhausted_batch)
{
	static char vbuf[2000];
	struct st_buf k, v = {vbuf, sizeof(vbuf)};
	struct storage_txn *t, *c;
	char kbuf[16];
	int i, rc = 0;

	open_tiny_map();
	memset(vbuf, 'x', sizeof(vbuf));
	OK(storage_txn_begin(st, NULL, 0, &t));
	for (i = 0; i < 10000; i++) {
		snprintf(kbuf, sizeof(kbuf), "x%05d", i);
		k = B(kbuf);
		OK(storage_txn_begin(st, t, 0, &c));
		rc = storage_put(c, STORAGE_T_ENTRIES, &k, &v, 0);
		if (rc != 0) {
			storage_txn_abort(c);
			break;
		}
		OK(storage_txn_commit(c));
	}
	FAILS(rc, ECHD_EMAPFULL);
	ck_assert_int_gt(i, 100);
	get_is(t, STORAGE_T_META, "before", "1");
	rc = storage_txn_commit(t);
	ck_assert_msg(rc == 0 || rc == ECHD_EMAPFULL, "batch commit: %d", rc);

	grow_and_check(MIB);
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, STORAGE_T_META, "before", "1");
	k = B("x00000");
	ck_assert_int_eq(storage_get(t, STORAGE_T_ENTRIES, &k, &v), rc == 0 ? 0 : ECHD_ENOTFOUND);
	storage_txn_abort(t);
}
END_TEST

START_TEST(test_grow_limits)
{
	struct storage_opts o = opts_default();
	struct storage_stat s;
	struct storage_capacity_stat c;
	struct storage_txn *t;

	/* Already at the cap. */
	opt_u64(&o, "lmdb.map-size", 4 * MIB);
	reopen_fresh(&o);
	FAILS(storage_capacity_grow(cap(), 4 * MIB), ECHD_ELIMIT);

	/* Capped growth, then the cap; a higher cap in a later call counts. */
	reopen_fresh(&o);
	OK(storage_capacity_grow(cap(), 6 * MIB));
	stat_both(&s, &c);
	ck_assert_uint_eq(c.map_size, 6 * MIB);
	FAILS(storage_capacity_grow(cap(), 6 * MIB), ECHD_ELIMIT);
	OK(storage_capacity_grow(cap(), 8 * MIB));
	stat_both(&s, &c);
	ck_assert_uint_eq(c.map_size, 8 * MIB);

	/* No cap: doubles, at least +64 MiB. */
	opt_u64(&o, "lmdb.map-size", 100 * MIB);
	reopen_fresh(&o);
	OK(storage_capacity_grow(cap(), 0));
	stat_both(&s, &c);
	ck_assert_uint_eq(c.map_size, 200 * MIB);

	/* Never with a txn open, read ones included. */
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	FAILS(storage_capacity_grow(cap(), 0), -EBUSY);
	storage_txn_abort(t);
	OK(storage_capacity_grow(cap(), 0));
}
END_TEST

START_TEST(test_map_size_kept_on_reopen)
{
	struct storage_opts o = opts_default();
	struct storage_stat s;
	struct storage_capacity_stat c;
	struct storage_txn *t;

	opt_u64(&o, "lmdb.map-size", 2 * MIB);
	reopen_fresh(&o);
	OK(storage_capacity_grow(cap(), 0));
	stat_both(&s, &c);
	ck_assert_uint_eq(c.map_size, 66 * MIB);
	/* The new size is recorded by the next commit. */
	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_META, "k", "v");
	OK(storage_txn_commit(t));

	reopen_with(&o);
	stat_both(&s, &c);
	ck_assert_uint_eq(c.map_size, 66 * MIB);
	/* A larger request wins over the recorded size. */
	opt_u64(&o, "lmdb.map-size", 80 * MIB);
	reopen_with(&o);
	stat_both(&s, &c);
	ck_assert_uint_eq(c.map_size, 80 * MIB);
	/* map_max (maxdisk lowered since the map grew) shrinks it... */
	opt_u64(&o, "lmdb.map-size", 2 * MIB);
	opt_u64(&o, "lmdb.map-max", 8 * MIB);
	reopen_with(&o);
	stat_both(&s, &c);
	ck_assert_uint_eq(c.map_size, 8 * MIB);
	/* ...never below the data and room to trim them in... */
	opt_u64(&o, "lmdb.map-max", 64 * 1024);
	reopen_with(&o);
	stat_both(&s, &c);
	ck_assert_uint_ge(c.map_size, s.used_bytes + 64 * c.page_size);
	ck_assert_uint_lt(c.map_size, 8 * MIB);
	/* ...and only while asked: LMDB records growth, not shrinking */
	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_META, "k", "w");
	OK(storage_txn_commit(t));
	opt_u64(&o, "lmdb.map-max", 0);
	reopen_with(&o);
	stat_both(&s, &c);
	ck_assert_uint_eq(c.map_size, 66 * MIB);
}
END_TEST

/* The size LMDB's pages take in data.mdb, after a commit; closes st. */
static uint64_t
used_and_close(void)
{
	struct storage_stat s;
	struct storage_txn *t;

	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_KEYS, "k", "v");
	OK(storage_txn_commit(t));
	OK(storage_stat(st, &s));
	storage_close(st);
	st = NULL;
	return s.used_bytes;
}

START_TEST(test_truncated_data_file_refused)
{
	struct storage_opts o = opts_default();
	char path[PATH_MAX + 16];
	uint64_t used = used_and_close();
	struct storage_txn *t;

	snprintf(path, sizeof(path), "%s/data.mdb", dir);
	/* cut into the last page: refused before a page is read through the map */
	ck_assert_int_eq(truncate(path, (off_t)used - 1), 0);
	ck_assert_int_eq(storage_open("lmdb", &o, &st), ECHD_ECORRUPT);
	o.read_only = true;
	ck_assert_int_eq(storage_open("lmdb", &o, &st), ECHD_ECORRUPT);
	/* cut to the last page's end (the zeroes written ahead gone): whole */
	ck_assert_int_eq(truncate(path, (off_t)used), 0);
	OK(storage_open("lmdb", &o, &st));
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, STORAGE_T_KEYS, "k", "v");
	storage_txn_abort(t);
}
END_TEST

START_TEST(test_emptied_data_file_refused)
{
	struct storage_opts o = opts_default();
	char path[PATH_MAX + 16];

	(void)used_and_close();
	snprintf(path, sizeof(path), "%s/data.mdb", dir);
	ck_assert_int_eq(truncate(path, 0), 0);
	ck_assert_int_eq(storage_open("lmdb", &o, &st), ECHD_ECORRUPT);
	/* without data.mdb the directory is new */
	ck_assert_int_eq(unlink(path), 0);
	OK(storage_open("lmdb", &o, &st));
}
END_TEST

static void
seed_and_close(void)
{
	struct storage_txn *t;

	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_KEYS, "seed", "1");
	OK(storage_txn_commit(t));
	storage_close(st);
	st = NULL;
}

START_TEST(test_read_only_refuses_writes)
{
	struct storage_opts o = opts_default();
	struct storage_txn *t, *w;

	seed_and_close();
	o.read_only = true;
	OK(storage_open("lmdb", &o, &st));
	FAILS(storage_txn_begin(st, NULL, 0, &w), -EROFS);
	FAILS(storage_capacity_grow(cap(), 0), -EROFS);
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, STORAGE_T_KEYS, "seed", "1");
	FAILS(storage_txn_begin(st, t, 0, &w), ECHD_EINVAL);
	storage_txn_abort(t);
}
END_TEST

START_TEST(test_read_only_empty_dir)
{
	struct storage_opts o = opts_default();
	struct storage *s2 = NULL;
	char empty[PATH_MAX + 16];

	snprintf(empty, sizeof(empty), "%s/empty", dir);
	ck_assert_int_eq(mkdir(empty, 0700), 0);
	o.dir = empty;
	o.read_only = true;
	FAILS(storage_open("lmdb", &o, &s2), -ENOENT);
	ck_assert_ptr_null(s2);
}
END_TEST

/* echo-admin's case: another process grows the map past the reader's. */
START_TEST(test_read_only_follows_growth)
{
	struct storage_opts o = opts_default();
	struct storage_txn *t;
	int status;
	pid_t pid;

	opt_u64(&o, "lmdb.map-size", MIB);
	reopen_fresh(&o);
	seed_and_close();
	o.read_only = true;
	OK(storage_open("lmdb", &o, &st));
	/* Leaves a reset reader cached: its renewal must cope too. */
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, STORAGE_T_KEYS, "seed", "1");
	storage_txn_abort(t);

	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* The child never touches the parent's environment. */
		static char vbuf[4000];
		struct storage_opts wo = opts_default();
		struct storage *w;
		struct storage_txn *wt;
		char kbuf[16];
		struct st_buf k, v = {vbuf, sizeof(vbuf)};

		opt_u64(&wo, "lmdb.map-size", 16 * MIB);
		if (storage_open("lmdb", &wo, &w) != 0 || storage_txn_begin(w, NULL, 0, &wt) != 0) {
			_exit(2);
		}
		for (int i = 0; i < 1000; i++) {
			snprintf(kbuf, sizeof(kbuf), "g%04d", i);
			k = B(kbuf);
			if (storage_put(wt, STORAGE_T_ENTRIES, &k, &v, 0) != 0) {
				_exit(3);
			}
		}
		if (storage_txn_commit(wt) != 0) {
			_exit(4);
		}
		storage_close(w);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), 0);

	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, STORAGE_T_KEYS, "seed", "1");
	{
		struct st_buf k = B("g0999"), v;

		OK(storage_get(t, STORAGE_T_ENTRIES, &k, &v));
		ck_assert_uint_eq(v.len, 4000);
	}
	storage_txn_abort(t);
}
END_TEST

START_TEST(test_read_only_sync_is_noop)
{
	struct storage_opts o = opts_default();

	seed_and_close();
	o.read_only = true;
	OK(storage_open("lmdb", &o, &st));
	OK(storage_sync(st));
}
END_TEST

/* The file is kept written 1 to 2 MiB past LMDB's last page, never past
 * the map, and what is written ahead never overwrites a row. */
static uint64_t
data_file_size(void)
{
	char path[PATH_MAX + 16];
	struct stat sb;

	snprintf(path, sizeof(path), "%s/data.mdb", dir);
	ck_assert_int_eq(stat(path, &sb), 0);
	return (uint64_t)sb.st_size;
}

START_TEST(test_zero_ahead)
{
	struct storage_opts o = opts_default();
	struct storage_stat s;
	struct storage_capacity_stat c;
	struct storage_txn *t;
	char k[32], v[2048];
	struct st_buf kb, vb;
	const int rounds = 40, per = 64; /* 40 commits of 128 KiB: past the first 2 MiB */

	opt_u64(&o, "lmdb.map-size", 64 * MIB);
	reopen_fresh(&o);
	for (int r = 0; r < rounds; r++) {
		OK(storage_txn_begin(st, NULL, 0, &t));
		for (int i = 0; i < per; i++) {
			snprintf(k, sizeof(k), "k%06d", r * per + i);
			memset(v, 'a' + (r * per + i) % 26, sizeof(v));
			kb = B(k);
			vb = (struct st_buf){v, sizeof(v)};
			OK(storage_put(t, STORAGE_T_ENTRIES, &kb, &vb, 0));
		}
		OK(storage_txn_commit(t));
		stat_both(&s, &c);
		ck_assert_msg(data_file_size() >= s.used_bytes + MIB,
			"round %d: file %llu bytes, %llu used", r,
			(unsigned long long)data_file_size(), (unsigned long long)s.used_bytes);
		ck_assert_uint_le(data_file_size(), s.used_bytes + 2 * MIB);
		U64_EQ(c.reserve_bytes, data_file_size() - s.used_bytes);
		ck_assert_int_eq(c.reserve_error, 0);
	}
	/* Not while a write txn is open: it may spill pages past the last one. */
	OK(storage_txn_begin(st, NULL, 0, &t));
	FAILS(storage_capacity_reserve(cap()), -EBUSY);
	storage_txn_abort(t);
	OK(storage_capacity_reserve(cap()));
	ck_assert_uint_gt(s.used_bytes, 4 * MIB);

	/* Every row is intact after a reopen. */
	reopen_with(&o);
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	for (int i = 0; i < rounds * per; i++) {
		struct st_buf got;
		snprintf(k, sizeof(k), "k%06d", i);
		kb = B(k);
		OK(storage_get(t, STORAGE_T_ENTRIES, &kb, &got));
		ck_assert_uint_eq(got.len, sizeof(v));
		memset(v, 'a' + i % 26, sizeof(v));
		ck_assert(memcmp(got.data, v, sizeof(v)) == 0);
	}
	storage_txn_abort(t);

	/* A small map bounds it. */
	opt_u64(&o, "lmdb.map-size", 1 * MIB + 512 * 1024);
	reopen_fresh(&o);
	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_META, "k", "v");
	OK(storage_txn_commit(t));
	stat_both(&s, &c);
	ck_assert_uint_eq(data_file_size(), c.map_size);
	U64_EQ(c.reserve_bytes, c.map_size - s.used_bytes);
	ck_assert_int_eq(c.reserve_error, 0);
}
END_TEST

START_TEST(test_copy_opens_with_same_data)
{
	struct storage_opts o = opts_default();
	struct storage *cp = NULL;
	struct storage_txn *t, *w;
	struct storage_cursor *c;
	struct st_buf key;
	char cdir[PATH_MAX + 16];
	int n = 0, rc;

	fill(STORAGE_T_ENTRIES, k3);
	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_GROUPS, "g", "1");
	OK(storage_txn_commit(t));

	snprintf(cdir, sizeof(cdir), "%s/copy", dir);
	ck_assert_int_eq(mkdir(cdir, 0700), 0);
	/* A write txn of this thread, uncommitted, is not in the copy and
	 * does not block it. */
	OK(storage_txn_begin(st, NULL, 0, &w));
	put_s(w, STORAGE_T_GROUPS, "uncommitted", "1");
	OK(storage_copy(st, cdir));
	storage_txn_abort(w);

	o.dir = cdir;
	OK(storage_open("lmdb", &o, &cp));
	OK(storage_txn_begin(cp, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, STORAGE_T_GROUPS, "g", "1");
	get_is(t, STORAGE_T_GROUPS, "uncommitted", NULL);
	OK(storage_cursor_open(t, STORAGE_T_ENTRIES, &c));
	for (rc = storage_cursor_seek(c, NULL, &key, NULL); rc == 0;
		rc = storage_cursor_next(c, &key, NULL)) {
		ck_assert(buf_is(&key, k3[n]));
		n++;
	}
	ck_assert_int_eq(n, 3);
	storage_txn_abort(t);
	storage_close(cp);

	/* Into a directory that does not exist. */
	snprintf(cdir, sizeof(cdir), "%s/nope", dir);
	ck_assert_int_lt(storage_copy(st, cdir), 0);
}
END_TEST

#define TC(name)                                                                                   \
	do {                                                                                       \
		tc = tcase_create(name);                                                           \
		tcase_add_checked_fixture(tc, fixture_open, teardown);                             \
		tcase_set_timeout(tc, 60);                                                         \
		suite_add_tcase(s, tc);                                                            \
	} while (0)
#define EACH_TABLE(fn) tcase_add_loop_test(tc, fn, 0, STORAGE_T__COUNT)

/* What storage.h promises, which every backend keeps. */
static Suite *
contract_suite(void)
{
	Suite *s = suite_create("contract");
	TCase *tc;

	TC("rows");
	EACH_TABLE(test_rows_roundtrip);
	EACH_TABLE(test_rows_tables_are_separate);
	EACH_TABLE(test_rows_binary_keys);
	EACH_TABLE(test_rows_large_value);
	tcase_add_test(tc, test_rows_bad_keys);
	tcase_add_test(tc, test_rows_put_in_read_txn);

	TC("append");
	EACH_TABLE(test_rows_append);

	TC("cursor_seek");
	EACH_TABLE(test_cursor_empty_table);
	EACH_TABLE(test_cursor_seek);
	EACH_TABLE(test_cursor_seek_last);
	EACH_TABLE(test_cursor_walk);

	TC("cursor_del");
	EACH_TABLE(test_cursor_del_middle);
	EACH_TABLE(test_cursor_del_edges);
	EACH_TABLE(test_cursor_del_many_forward);
	EACH_TABLE(test_cursor_del_many_backward);
	tcase_add_test(tc, test_cursor_read_only_del);

	TC("cursor_lifetime");
	EACH_TABLE(test_cursor_sees_txn_writes);
#ifdef NDEBUG
	tcase_add_loop_test(tc, test_cursor_moved_after_write, 0, 4);
#else
	/* The assert kills the process: only where Check forks per test
	 * (valgrind's setup runs CK_FORK=no). */
	if (getenv("CK_FORK") == NULL || strcmp(getenv("CK_FORK"), "no") != 0) {
		tcase_add_loop_test_raise_signal(tc, test_cursor_moved_after_write, SIGABRT, 0,
			4);
	}
#endif
	EACH_TABLE(test_cursor_closed_by_txn_end);
	EACH_TABLE(test_cursor_ahead);

	TC("nested");
	EACH_TABLE(test_nested_commit_and_abort);
	tcase_add_test(tc, test_nested_open_child_at_parent_end);
	tcase_add_test(tc, test_nested_misuse);
	tcase_add_test(tc, test_nested_many);
	tcase_add_test(tc, test_txn_writes);

	TC("isolation");
	EACH_TABLE(test_isolation_snapshot);
	tcase_add_test(tc, test_aborted_write_invisible);

	TC("stat");
	tcase_add_test(tc, test_stat_used_bytes);

	TC("generations");
	tcase_add_test(tc, test_commit_generations);

	TC("capacity");
	tcase_add_test(tc, test_optional_interfaces);

	TC("model");
	tcase_add_test(tc, test_random_against_model);
	return s;
}

/* LMDB's own: files, the map and its growth, page sizes, read-only
 * environments, copies, and its allocations. Run on LMDB only. */
static Suite *
lmdb_suite(void)
{
	Suite *s = suite_create("lmdb");
	TCase *tc;

	TC("enomem");
	tcase_add_test(tc, test_enomem);

	TC("reopen");
	tcase_add_test(tc, test_reopen_keeps_state);
	tcase_add_test(tc, test_open_missing_dir);
	tcase_add_test(tc, test_truncated_data_file_refused);
	tcase_add_test(tc, test_emptied_data_file_refused);

	TC("stat");
	tcase_add_test(tc, test_stat_counts);

	TC("sync");
	tcase_add_test(tc, test_sync_data_mode);
	tcase_add_test(tc, test_durable_gen_meta_page);
	tcase_add_test(tc, test_write_admit_lmdb);

	TC("map_full");
	tcase_add_test(tc, test_map_full_child_abort_grow_retry);
	tcase_add_test(tc, test_map_full_child_commit_refused);
	tcase_add_test(tc, test_map_full_top_level);
	tcase_add_test(tc, test_map_full_exhausted_batch);

	TC("grow");
	tcase_add_test(tc, test_grow_limits);
	tcase_add_test(tc, test_map_size_kept_on_reopen);
	tcase_add_test(tc, test_zero_ahead);

	TC("read_only");
	tcase_add_test(tc, test_read_only_refuses_writes);
	tcase_add_test(tc, test_read_only_empty_dir);
	tcase_add_test(tc, test_read_only_follows_growth);
	tcase_add_test(tc, test_read_only_sync_is_noop);

	TC("copy");
	tcase_add_test(tc, test_copy_opens_with_same_data);
	return s;
}
#undef EACH_TABLE
#undef TC

int
main(void)
{
	SRunner *sr;

	/* ECHD_TEST_BACKEND (meson runs this once per backend) picks it. */
	if (fixture_init("storage", "lmdb", 16 * MIB) != 0) {
		return 1;
	}
	echd_log_set(ECHD_LOG_WARNING, NULL, NULL); /* no "map grown" notices */
	sr = srunner_create(registry_suite());
	srunner_add_suite(sr, contract_suite());
	if (fixture_is("lmdb")) {
		srunner_add_suite(sr, lmdb_suite());
	}
	return fixture_run(sr);
}
