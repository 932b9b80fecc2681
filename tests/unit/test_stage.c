/* test_stage.c - what lmdb-staged (st_stage.c) adds to the storage
 * contract: rows staged in arrival order read back after a reopen, filed
 * home by storage_maintain_step() in steps that may stop anywhere, tombstones,
 * nested aborts, an aborted step, a read-only opener beside a writer, and
 * a random walk checked against the mem engine. The contract itself is
 * test_storage.c's, run on lmdb-staged too (tests/meson.build).
 */
#include "unit_storage.h"

/* ---- helpers ------------------------------------------------------------ */

/* st's deferred-work interface (lmdb-staged always has it). */
static struct storage_maintain *
maint(void)
{
	struct storage_maintain *m = storage_maintain(st);

	ck_assert_ptr_nonnull(m);
	return m;
}

static struct storage_maintain_stat
stat_now(void)
{
	struct storage_maintain_stat s;

	OK(storage_maintain_stat(maint(), &s));
	return s;
}

static void
put_s(struct storage_txn *t, enum storage_table tb, const char *k, const char *v)
{
	struct st_buf kb = B(k), vb = B(v);

	OK(storage_put(t, tb, &kb, &vb, 0));
}

static void
get_is(struct storage_txn *t, enum storage_table tb, const char *k, const char *want)
{
	struct st_buf kb = B(k), v;
	int rc = storage_get(t, tb, &kb, &v);

	if (want == NULL) {
		ck_assert_msg(rc == ECHD_ENOTFOUND, "%s: found, or %d", k, rc);
		return;
	}
	ck_assert_msg(rc == 0, "%s: %d", k, rc);
	ck_assert_msg(buf_eq(&v, want, strlen(want)), "%s = %.*s, want %s", k, (int)v.len,
		(const char *)v.data, want);
}

/* Runs maintenance steps, each in its own committed txn, until none is
 * due when idle; returns the steps. */
static int
compact_all(void)
{
	int steps = 0;
	bool more = true;

	while (storage_maintain_due(maint(), true)) {
		struct storage_txn *t;

		OK(storage_txn_begin(st, NULL, 0, &t));
		OK(storage_maintain_step(maint(), t, true, &more));
		OK(storage_txn_commit(t));
		steps++;
		ck_assert_int_lt(steps, 10000);
	}
	ck_assert(!more);
	U64_EQ(stat_now().rows, 0);
	return steps;
}

/* The value of k in the home table only, as plain lmdb reads it (read-only:
 * it may open an environment with staged rows then). NULL: not home. */
static bool
home_has(enum storage_table tb, const char *k, const char *want)
{
	struct storage_opts o = opts_default();
	struct storage *plain;
	struct storage_txn *t;
	struct st_buf kb = B(k), v;
	bool same;
	int rc;

	o.read_only = true;
	OK(storage_open("lmdb", &o, &plain));
	OK(storage_txn_begin(plain, NULL, STORAGE_TXN_RDONLY, &t));
	rc = storage_get(t, tb, &kb, &v);
	same = want == NULL ? rc == ECHD_ENOTFOUND
			    : rc == 0 && buf_eq(&v, want, strlen(want));
	storage_txn_abort(t);
	storage_close(plain);
	return same;
}

static void
setup(void)
{
	fixture_open();
}

/* ---- staging and reopening ---------------------------------------------- */

START_TEST(test_staged_rows_read_back)
{
	begin();
	put_s(tx, STORAGE_T_META, "m", "1");
	put_s(tx, STORAGE_T_ENTRIES, "e1", "one");
	put_s(tx, STORAGE_T_ENTRIES, "e1", "uno"); /* the newest wins */
	put_s(tx, STORAGE_T_PEL, "p", "x");
	commit();
	U64_EQ(stat_now().rows, 3); /* e1's last version only */
	/* Staged, not home: the home table does not have them yet. */
	ck_assert(home_has(STORAGE_T_ENTRIES, "e1", NULL));
	begin();
	reopen();
	U64_EQ(stat_now().rows, 3);
	get_is(tx, STORAGE_T_META, "m", "1");
	get_is(tx, STORAGE_T_ENTRIES, "e1", "uno");
	get_is(tx, STORAGE_T_PEL, "p", "x");
	U64_EQ(table_rows(STORAGE_T_ENTRIES, NULL), 1);
	commit();
}
END_TEST

START_TEST(test_plain_lmdb_refuses_staged_rows)
{
	struct storage_opts o = opts_default();
	struct storage *plain = NULL;

	begin();
	put_s(tx, STORAGE_T_KEYS, "k", "v");
	commit();
	storage_close(st);
	st = NULL;
	/* Writing around the staged rows would lose them. */
	FAILS(storage_open("lmdb", &o, &plain), ECHD_EINVAL);
	ck_assert_ptr_null(plain);
	OK(storage_open("lmdb-staged", &o, &st));
	compact_all();
	storage_close(st);
	st = NULL;
	OK(storage_open("lmdb", &o, &st));
	begin();
	get_is(tx, STORAGE_T_KEYS, "k", "v");
	commit();
}
END_TEST

/* ---- compaction --------------------------------------------------------- */

START_TEST(test_compaction_files_rows_home)
{
	begin();
	put_s(tx, STORAGE_T_KEYS, "a", "1");
	put_s(tx, STORAGE_T_GROUPS, "g", "2");
	put_s(tx, STORAGE_T_CPEL, "c", "");
	commit();
	ck_assert_int_ge(compact_all(), 1);
	ck_assert(home_has(STORAGE_T_KEYS, "a", "1"));
	ck_assert(home_has(STORAGE_T_GROUPS, "g", "2"));
	ck_assert(home_has(STORAGE_T_CPEL, "c", ""));
	begin();
	get_is(tx, STORAGE_T_KEYS, "a", "1");
	U64_EQ(table_rows(STORAGE_T_CPEL, NULL), 1);
	commit();
	U64_EQ(stat_now().bytes, 0);
	U64_EQ(stat_now().filed, 3);
}
END_TEST

#define MANY 40000

/* Stages MANY rows "row%06d" = "v%d" in one commit. */
static void
stage_many(void)
{
	char k[32], v[32];

	begin();
	for (int i = 0; i < MANY; i++) {
		snprintf(k, sizeof(k), "row%06d", i);
		snprintf(v, sizeof(v), "v%d", i);
		put_s(tx, STORAGE_T_ENTRIES, k, v);
	}
	commit();
}

static void
many_are(int upto, int deleted_mod)
{
	char k[32], v[32];
	uint64_t want = 0;

	for (int i = 0; i < upto; i++) {
		snprintf(k, sizeof(k), "row%06d", i);
		snprintf(v, sizeof(v), "v%d", i);
		if (deleted_mod != 0 && i % deleted_mod == 0) {
			get_is(tx, STORAGE_T_ENTRIES, k, NULL);
		} else {
			get_is(tx, STORAGE_T_ENTRIES, k, v);
			want++;
		}
	}
	U64_EQ(table_rows(STORAGE_T_ENTRIES, NULL), want);
}

/* A step files at most STEP_MAX rows: 40,000 take several, and a reopen
 * between them (a crash mid-compaction, as far as staging knows) loses
 * nothing and files nothing twice wrongly. */
START_TEST(test_compaction_midway_then_reopen)
{
	struct storage_txn *t;
	char k[32];
	bool more;

	stage_many();
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_maintain_step(maint(), t, true, &more));
	ck_assert(more);
	OK(storage_txn_commit(t));
	ck_assert_uint_gt(stat_now().filed, 0);
	ck_assert_uint_lt(stat_now().filed, MANY);
	ck_assert(home_has(STORAGE_T_ENTRIES, "row000000", "v0"));
	ck_assert(home_has(STORAGE_T_ENTRIES, "row039999", NULL));
	begin();
	reopen();
	U64_EQ(stat_now().rows, MANY); /* the head is dropped only at the end */
	many_are(MANY, 0);
	/* Rewrites and deletions on top of half-filed rows. */
	for (int i = 0; i < MANY; i += 7) {
		snprintf(k, sizeof(k), "row%06d", i);
		struct st_buf kb = B(k);
		OK(storage_del(tx, STORAGE_T_ENTRIES, &kb));
	}
	commit();
	compact_all();
	begin();
	many_are(MANY, 7);
	reopen();
	many_are(MANY, 7);
	commit();
	ck_assert(home_has(STORAGE_T_ENTRIES, "row000007", NULL));
	ck_assert(home_has(STORAGE_T_ENTRIES, "row039999", "v39999"));
}
END_TEST

/* Rows staged while an epoch runs are the next epoch's: its end drops
 * the staged head up to where it began, not theirs. */
START_TEST(test_rows_staged_mid_epoch_survive)
{
	struct storage_txn *t;
	bool more;

	stage_many();
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_maintain_step(maint(), t, true, &more));
	ck_assert(more);
	put_s(t, STORAGE_T_ENTRIES, "row000001", "rewritten"); /* behind the sweep */
	put_s(t, STORAGE_T_ENTRIES, "row039998", "rewritten"); /* ahead of it */
	put_s(t, STORAGE_T_META, "late", "1");
	OK(storage_txn_commit(t));
	/* The first epoch to its end, and a reopen before the second. */
	while (stat_now().rounds == 0) {
		OK(storage_txn_begin(st, NULL, 0, &t));
		OK(storage_maintain_step(maint(), t, true, &more));
		OK(storage_txn_commit(t));
	}
	U64_EQ(stat_now().rows, 3);
	begin();
	reopen();
	get_is(tx, STORAGE_T_ENTRIES, "row000001", "rewritten");
	get_is(tx, STORAGE_T_ENTRIES, "row039998", "rewritten");
	get_is(tx, STORAGE_T_ENTRIES, "row039999", "v39999");
	get_is(tx, STORAGE_T_META, "late", "1");
	commit();
	compact_all();
	ck_assert(home_has(STORAGE_T_ENTRIES, "row039998", "rewritten"));
}
END_TEST

/* A step undone with its txn: the sweep starts again, nothing is lost. */
START_TEST(test_aborted_step_starts_again)
{
	struct storage_txn *t;
	bool more;

	stage_many();
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_maintain_step(maint(), t, true, &more));
	OK(storage_txn_commit(t));
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_maintain_step(maint(), t, true, &more));
	storage_txn_abort(t);
	begin();
	many_are(MANY, 0);
	commit();
	compact_all();
	begin();
	many_are(MANY, 0);
	commit();
	ck_assert(home_has(STORAGE_T_ENTRIES, "row039999", "v39999"));
}
END_TEST

START_TEST(test_tombstones_hide_home_rows)
{
	struct storage_cursor *c;
	struct st_buf kb, key, val;

	begin();
	put_s(tx, STORAGE_T_PEL, "a", "1");
	put_s(tx, STORAGE_T_PEL, "b", "2");
	put_s(tx, STORAGE_T_PEL, "c", "3");
	commit();
	compact_all();
	begin();
	kb = B("b");
	OK(storage_del(tx, STORAGE_T_PEL, &kb));
	FAILS(storage_del(tx, STORAGE_T_PEL, &kb), ECHD_ENOTFOUND);
	get_is(tx, STORAGE_T_PEL, "b", NULL);
	OK(storage_cursor_open(tx, STORAGE_T_PEL, &c));
	OK(storage_cursor_seek(c, NULL, &key, &val));
	ck_assert(buf_eq(&key, "a", 1));
	OK(storage_cursor_next(c, &key, &val));
	ck_assert(buf_eq(&key, "c", 1)); /* b is hidden */
	OK(storage_cursor_prev(c, &key, &val));
	ck_assert(buf_eq(&key, "a", 1));
	OK(storage_cursor_seek(c, &kb, &key, &val));
	ck_assert(buf_eq(&key, "c", 1));
	OK(storage_cursor_seek_last(c, &kb, &key, &val));
	ck_assert(buf_eq(&key, "a", 1));
	/* a cursor's own delete: a tombstone over a home row */
	OK(storage_cursor_del(c));
	FAILS(storage_cursor_next(c, &key, &val), 0);
	ck_assert(buf_eq(&key, "c", 1));
	storage_cursor_close(c);
	U64_EQ(table_rows(STORAGE_T_PEL, NULL), 1);
	reopen();
	U64_EQ(table_rows(STORAGE_T_PEL, NULL), 1);
	commit();
	ck_assert(home_has(STORAGE_T_PEL, "b", "2")); /* still home, hidden */
	compact_all();
	ck_assert(home_has(STORAGE_T_PEL, "b", NULL));
	ck_assert(home_has(STORAGE_T_PEL, "a", NULL));
	ck_assert(home_has(STORAGE_T_PEL, "c", "3"));
}
END_TEST

/* A row staged and deleted before it was filed leaves the overlay with
 * no tombstone (nothing home to hide), and the tombstone record in
 * staging still keeps a replay from bringing it back. Filing then has
 * nothing to file for it. */
START_TEST(test_staged_only_deletions_leave_no_tombstone)
{
	struct storage_cursor *c;
	struct st_buf kb, key, val;
	char k[16];

	begin();
	for (int i = 0; i < 100; i++) {
		snprintf(k, sizeof(k), "p%03d", i);
		put_s(tx, STORAGE_T_PEL, k, "x");
	}
	commit();
	begin();
	for (int i = 0; i < 100; i++) {
		snprintf(k, sizeof(k), "p%03d", i);
		kb = B(k);
		OK(storage_del(tx, STORAGE_T_PEL, &kb));
		FAILS(storage_del(tx, STORAGE_T_PEL, &kb), ECHD_ENOTFOUND);
	}
	/* and a cursor's own delete of a row put in this very batch */
	put_s(tx, STORAGE_T_PEL, "q", "y");
	OK(storage_cursor_open(tx, STORAGE_T_PEL, &c));
	OK(storage_cursor_seek(c, NULL, &key, &val));
	ck_assert(buf_eq(&key, "q", 1));
	OK(storage_cursor_del(c));
	FAILS(storage_cursor_next(c, &key, &val), ECHD_ENOTFOUND);
	FAILS(storage_cursor_seek_last(c, NULL, &key, &val), ECHD_ENOTFOUND);
	storage_cursor_close(c);
	reopen(); /* a replay: the puts, then the tombstones over them */
	U64_EQ(stat_now().rows, 201); /* 100 puts, 101 tombstones */
	get_is(tx, STORAGE_T_PEL, "p007", NULL);
	get_is(tx, STORAGE_T_PEL, "q", NULL);
	U64_EQ(table_rows(STORAGE_T_PEL, NULL), 0);
	commit();
	begin();
	put_s(tx, STORAGE_T_PEL, "r", "z");
	commit();
	begin();
	kb = B("r");
	OK(storage_del(tx, STORAGE_T_PEL, &kb));
	commit();
	compact_all();
	/* r's tombstone never reached the overlay: nothing was filed for it
	 * (the replayed tombstones of p and q were, 101 of them) */
	U64_EQ(stat_now().filed, 101);
	ck_assert(home_has(STORAGE_T_PEL, "r", NULL));
	ck_assert(home_has(STORAGE_T_PEL, "p007", NULL));
}
END_TEST

START_TEST(test_nested_abort_undoes_staging)
{
	struct storage_txn *child;
	struct st_buf kb = B("a");

	begin();
	put_s(tx, STORAGE_T_CONSUMERS, "a", "1");
	OK(storage_txn_begin(st, tx, 0, &child));
	put_s(child, STORAGE_T_CONSUMERS, "b", "2");
	OK(storage_del(child, STORAGE_T_CONSUMERS, &kb));
	get_is(child, STORAGE_T_CONSUMERS, "a", NULL);
	storage_txn_abort(child);
	get_is(tx, STORAGE_T_CONSUMERS, "a", "1");
	get_is(tx, STORAGE_T_CONSUMERS, "b", NULL);
	commit();
	U64_EQ(stat_now().rows, 1); /* the child's records went with it */
	begin();
	reopen();
	get_is(tx, STORAGE_T_CONSUMERS, "a", "1");
	get_is(tx, STORAGE_T_CONSUMERS, "b", NULL);
	commit();
}
END_TEST

/* ---- the mark and the bound --------------------------------------------- */

START_TEST(test_due_past_half_the_bound)
{
	struct storage_opts o = opts_default();
	char k[16];

	storage_close(st);
	opt_u64(&o, "lmdb-staged.stage-size", 64 * 1024);
	OK(storage_open("lmdb-staged", &o, &st));
	ck_assert(!storage_maintain_due(maint(), true)); /* nothing staged */
	begin();
	put_s(tx, STORAGE_T_META, "k", "v");
	commit();
	ck_assert(!storage_maintain_due(maint(), false));
	ck_assert(storage_maintain_due(maint(), true)); /* idle: anything is worth filing */
	begin();
	for (int i = 0; i < 1000; i++) {
		snprintf(k, sizeof(k), "k%04d", i);
		put_s(tx, STORAGE_T_META, k, "0123456789");
	}
	commit();
	U64_EQ(stat_now().bound, 64 * 1024);
	ck_assert_uint_ge(stat_now().bytes, 32 * 1024);
	ck_assert(storage_maintain_due(maint(), false));
	compact_all();
	ck_assert(!storage_maintain_due(maint(), false));
}
END_TEST

/* ---- the interfaces and the options -------------------------------------- */

/* Deferred work is lmdb-staged's own optional interface: the others answer
 * NULL. lmdb's capacity is passed on (maxdisk bounds the one file that holds
 * home and staging alike), and so are lmdb's options. */
START_TEST(test_interfaces_and_options)
{
	struct storage_opts o = opts_default();
	struct storage_opts mo = opts_default();
	struct storage_capacity_stat cs;
	struct storage *other;

	ck_assert_ptr_nonnull(storage_maintain(st));
	ck_assert_ptr_nonnull(storage_capacity(st));
	OK(storage_capacity_stat(storage_capacity(st), &cs));
	U64_EQ(cs.map_size, 64 * MIB); /* lmdb.map-size, handed on */
	ck_assert_ptr_null(storage_ha(st));
	ck_assert_ptr_null(storage_fetch(st));
	U64_EQ(stat_now().bound, 64 * MIB); /* the default stage-size */
	storage_close(st);
	st = NULL;
	OK(storage_open("lmdb", &o, &other));
	ck_assert_ptr_null(storage_maintain(other));
	storage_close(other);
	OK(storage_open("mem", &mo, &other));
	ck_assert_ptr_null(storage_maintain(other));
	storage_close(other);
	/* its options: its own refused when unknown or malformed or too small;
	 * lmdb's stage-owner is lmdb's (0 or 1) */
	o = opts_default();
	opt_str(&o, "lmdb-staged.stage-size", "12x");
	FAILS(storage_open("lmdb-staged", &o, &st), ECHD_EINVAL);
	opt_u64(&o, "lmdb-staged.stage-size", 1024);
	FAILS(storage_open("lmdb-staged", &o, &st), ECHD_EINVAL);
	o = opts_default();
	opt_str(&o, "lmdb-staged.stage-bytes", "1");
	FAILS(storage_open("lmdb-staged", &o, &st), ECHD_EINVAL);
	o = opts_default();
	opt_u64(&o, "lmdb.stage-owner", 2);
	FAILS(storage_open("lmdb", &o, &st), ECHD_EINVAL);
	ck_assert_ptr_null(st);
	o = opts_default();
	opt_u64(&o, "lmdb-staged.stage-size", 1 * MIB);
	OK(storage_open("lmdb-staged", &o, &st));
	U64_EQ(stat_now().bound, 1 * MIB);
}
END_TEST

/* ---- a reader in another process's place -------------------------------- */

START_TEST(test_read_only_sees_staged_rows_and_filing)
{
	struct storage_opts o = opts_default();
	struct storage *ro;
	struct storage_txn *rt;
	struct st_buf kb = B("k"), v;

	begin();
	put_s(tx, STORAGE_T_KEYS, "k", "staged");
	commit();
	o.read_only = true;
	OK(storage_open("lmdb-staged", &o, &ro));
	OK(storage_txn_begin(ro, NULL, STORAGE_TXN_RDONLY, &rt));
	OK(storage_get(rt, STORAGE_T_KEYS, &kb, &v));
	ck_assert(buf_eq(&v, "staged", 6));
	storage_txn_abort(rt);
	/* The writer files it, then stages a newer version: the reader's next
	 * snapshot has both the home row and the overlay right. */
	compact_all();
	begin();
	put_s(tx, STORAGE_T_KEYS, "k", "newer");
	put_s(tx, STORAGE_T_KEYS, "j", "j");
	commit();
	compact_all();
	begin();
	kb = B("j");
	OK(storage_del(tx, STORAGE_T_KEYS, &kb));
	commit();
	OK(storage_txn_begin(ro, NULL, STORAGE_TXN_RDONLY, &rt));
	kb = B("k");
	OK(storage_get(rt, STORAGE_T_KEYS, &kb, &v));
	ck_assert(buf_eq(&v, "newer", 5));
	kb = B("j");
	FAILS(storage_get(rt, STORAGE_T_KEYS, &kb, &v), ECHD_ENOTFOUND);
	storage_txn_abort(rt);
	FAILS(storage_txn_begin(ro, NULL, 0, &rt), -EROFS);
	storage_close(ro);
}
END_TEST

/* ---- a random walk against mem ------------------------------------------ */

/* The same random puts, deletes, cursor deletes, aborted children, steps
 * and reopens on lmdb-staged and on mem; after each txn both read the same
 * in every direction. Keys are few, so that rows are rewritten, deleted,
 * filed and staged again over each other. */
static void
same_tables(struct storage_txn *a, struct storage_txn *b, enum storage_table tb, unsigned *seed)
{
	struct storage_cursor *ca, *cb;
	struct st_buf ka, va, kb, vb;
	int ra, rb;

	OK(storage_cursor_open(a, tb, &ca));
	OK(storage_cursor_open(b, tb, &cb));
	for (int back = 0; back < 2; back++) {
		ra = back == 0 ? storage_cursor_seek(ca, NULL, &ka, &va)
			      : storage_cursor_seek_last(ca, NULL, &ka, &va);
		rb = back == 0 ? storage_cursor_seek(cb, NULL, &kb, &vb)
			      : storage_cursor_seek_last(cb, NULL, &kb, &vb);
		while (ra == 0 && rb == 0) {
			ck_assert(buf_eq(&ka, kb.data, kb.len));
			ck_assert(buf_eq(&va, vb.data, vb.len));
			/* now and then a turn back and forth */
			if (rand_r(seed) % 5 == 0) {
				ra = back == 0 ? storage_cursor_prev(ca, &ka, &va)
					      : storage_cursor_next(ca, &ka, &va);
				rb = back == 0 ? storage_cursor_prev(cb, &kb, &vb)
					      : storage_cursor_next(cb, &kb, &vb);
				ck_assert_int_eq(ra, rb);
				if (ra == 0) {
					ck_assert(buf_eq(&ka, kb.data, kb.len));
				}
			}
			ra = back == 0 ? storage_cursor_next(ca, &ka, &va)
				      : storage_cursor_prev(ca, &ka, &va);
			rb = back == 0 ? storage_cursor_next(cb, &kb, &vb)
				      : storage_cursor_prev(cb, &kb, &vb);
		}
		ck_assert_int_eq(ra, rb);
	}
	for (int i = 0; i < 20; i++) {
		char k[8];
		struct st_buf sk;

		snprintf(k, sizeof(k), "%02u", rand_r(seed) % 40);
		sk = B(k);
		ra = storage_cursor_seek_last(ca, &sk, &ka, &va);
		rb = storage_cursor_seek_last(cb, &sk, &kb, &vb);
		ck_assert_int_eq(ra, rb);
		if (ra == 0) {
			ck_assert(buf_eq(&ka, kb.data, kb.len));
		}
		ra = storage_cursor_seek(ca, &sk, &ka, &va);
		rb = storage_cursor_seek(cb, &sk, &kb, &vb);
		ck_assert_int_eq(ra, rb);
		if (ra == 0) {
			ck_assert(buf_eq(&ka, kb.data, kb.len));
		}
	}
	storage_cursor_close(ca);
	storage_cursor_close(cb);
}

static void
random_ops(struct storage_txn *a, struct storage_txn *b, unsigned *seed)
{
	enum storage_table tbs[2] = {STORAGE_T_ENTRIES, STORAGE_T_PEL};

	for (int i = 0, n = (int)(rand_r(seed) % 30); i < n; i++) {
		enum storage_table tb = tbs[rand_r(seed) % 2];
		char k[8], v[16];
		struct st_buf kb, vb;
		unsigned op = rand_r(seed) % 10;

		snprintf(k, sizeof(k), "%02u", rand_r(seed) % 40);
		snprintf(v, sizeof(v), "v%u", rand_r(seed) % 1000);
		kb = B(k);
		vb = B(v);
		if (op < 6) {
			OK(storage_put(a, tb, &kb, &vb, 0));
			OK(storage_put(b, tb, &kb, &vb, 0));
		} else if (op < 9) {
			int ra = storage_del(a, tb, &kb), rb = storage_del(b, tb, &kb);

			ck_assert_int_eq(ra, rb);
		} else {
			struct storage_cursor *ca, *cb;
			struct st_buf k1, v1, k2, v2;
			int ra, rb;

			OK(storage_cursor_open(a, tb, &ca));
			OK(storage_cursor_open(b, tb, &cb));
			ra = storage_cursor_seek(ca, &kb, &k1, &v1);
			rb = storage_cursor_seek(cb, &kb, &k2, &v2);
			ck_assert_int_eq(ra, rb);
			if (ra == 0) {
				OK(storage_cursor_del(ca));
				OK(storage_cursor_del(cb));
				ra = storage_cursor_next(ca, &k1, &v1);
				rb = storage_cursor_next(cb, &k2, &v2);
				ck_assert_int_eq(ra, rb);
				if (ra == 0) {
					ck_assert(buf_eq(&k1, k2.data, k2.len));
				}
			}
			storage_cursor_close(ca);
			storage_cursor_close(cb);
		}
	}
}

START_TEST(test_random_walk_matches_mem)
{
	struct storage_opts mo = opts_default();
	struct storage *mem;
	unsigned seed = 12345u + (unsigned)_i;

	OK(storage_open("mem", &mo, &mem));
	for (int round = 0; round < 300; round++) {
		struct storage_txn *a, *b, *ca, *cb;
		bool more;

		OK(storage_txn_begin(st, NULL, 0, &a));
		OK(storage_txn_begin(mem, NULL, 0, &b));
		random_ops(a, b, &seed);
		OK(storage_txn_begin(st, a, 0, &ca));
		OK(storage_txn_begin(mem, b, 0, &cb));
		random_ops(ca, cb, &seed);
		if (rand_r(&seed) % 3 == 0) {
			storage_txn_abort(ca);
			storage_txn_abort(cb);
		} else {
			OK(storage_txn_commit(ca));
			OK(storage_txn_commit(cb));
		}
		same_tables(a, b, STORAGE_T_ENTRIES, &seed);
		if (rand_r(&seed) % 4 == 0) {
			OK(storage_maintain_step(maint(), a, rand_r(&seed) % 2 == 0, &more));
		}
		same_tables(a, b, STORAGE_T_PEL, &seed);
		if (rand_r(&seed) % 10 == 0) {
			storage_txn_abort(a); /* a step undone, if one ran */
			storage_txn_abort(b);
		} else {
			OK(storage_txn_commit(a));
			OK(storage_txn_commit(b));
		}
		if (rand_r(&seed) % 25 == 0) {
			struct storage_opts o = opts_default();

			storage_close(st);
			OK(storage_open("lmdb-staged", &o, &st));
		}
		OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &a));
		OK(storage_txn_begin(mem, NULL, STORAGE_TXN_RDONLY, &b));
		same_tables(a, b, STORAGE_T_ENTRIES, &seed);
		same_tables(a, b, STORAGE_T_PEL, &seed);
		storage_txn_abort(a);
		storage_txn_abort(b);
	}
	storage_close(mem);
}
END_TEST

static Suite *
stage_suite(void)
{
	Suite *s = suite_create("stage");
	TCase *tc;

	tc = tcase_create("staging");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_staged_rows_read_back);
	tcase_add_test(tc, test_plain_lmdb_refuses_staged_rows);
	tcase_add_test(tc, test_nested_abort_undoes_staging);
	tcase_add_test(tc, test_read_only_sees_staged_rows_and_filing);
	tcase_add_test(tc, test_interfaces_and_options);
	suite_add_tcase(s, tc);

	tc = tcase_create("compaction");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_compaction_files_rows_home);
	tcase_add_test(tc, test_compaction_midway_then_reopen);
	tcase_add_test(tc, test_aborted_step_starts_again);
	tcase_add_test(tc, test_rows_staged_mid_epoch_survive);
	tcase_add_test(tc, test_tombstones_hide_home_rows);
	tcase_add_test(tc, test_staged_only_deletions_leave_no_tombstone);
	tcase_add_test(tc, test_due_past_half_the_bound);
	suite_add_tcase(s, tc);

	tc = tcase_create("random");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_random_walk_matches_mem, 0, 4);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	if (fixture_init("stage", "lmdb-staged", 64 * MIB) != 0) {
		return 1;
	}
	echd_log_set(ECHD_LOG_WARNING, NULL, NULL);
	return fixture_run(srunner_create(stage_suite()));
}
