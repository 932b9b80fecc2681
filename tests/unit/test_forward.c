/* test_forward.c - the forwarding base (storage/forward.c) under a wrapper
 * of the test's own, "spy", which hooks in every way forward.h names: a
 * read it answers itself, writes it counts or fails on purpose, a commit it
 * may refuse, a bigger transaction and cursor. The whole contract through
 * the base (no hooks) is test_storage.c's on "fwd"; the engines' options
 * are test_storage.c's too.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "echd.h"
#include "forward.h"
#include "unit_storage.h"

/* ---- the spy ------------------------------------------------------------- */

static const char *spy_inner = "mem"; /* the engine it wraps, set per test */
static int spy_refuse_commit;         /* a top-level commit fails with this */
static unsigned spy_gets, spy_moves, spy_commits;

struct spy_txn {
	struct storage_fwd_txn fwd;
	unsigned magic; /* its own state: set at begin, checked at commit */
};

struct spy_cursor {
	struct storage_fwd_cursor fwd;
	unsigned moves;
};

static const struct storage_ops spy_ops;

static void
spy_close(struct storage *s)
{
	struct storage_fwd *f = (struct storage_fwd *)s;

	storage_fwd_finish(f);
	free(f);
}

static int
spy_open(const struct storage_opts *o, struct storage **out)
{
	struct storage_fwd *f = calloc(1, sizeof(*f));
	int rc;

	ck_assert_ptr_nonnull(f);
	storage_fwd_init(f, &spy_ops, sizeof(struct spy_txn), sizeof(struct spy_cursor));
	rc = storage_open(spy_inner, o, &f->inner);
	if (rc != 0) {
		f->inner = NULL;
		spy_close(&f->base);
		return rc;
	}
	*out = &f->base;
	return 0;
}

static int
spy_txn_begin(struct storage *s, struct storage_txn *parent, unsigned flags,
	struct storage_txn **out)
{
	int rc = storage_fwd_txn_begin(s, parent, flags, out);

	if (rc == 0) {
		((struct spy_txn *)*out)->magic = 0x5b1;
	}
	return rc;
}

static int
spy_txn_commit(struct storage_txn *t)
{
	ck_assert_uint_eq(((struct spy_txn *)t)->magic, 0x5b1);
	if (t->parent == NULL && !t->rdonly && spy_refuse_commit != 0) {
		storage_fwd_txn_abort(t);
		return spy_refuse_commit;
	}
	spy_commits += t->parent == NULL && !t->rdonly;
	return storage_fwd_txn_commit(t);
}

/* A read answered here: "virtual" exists in every table, nowhere stored. */
static int
spy_get(struct storage_txn *t, enum storage_table tb, const struct st_buf *k,
	struct st_buf *v)
{
	int rc = storage_fwd_get(t, tb, k, v);

	spy_gets++;
	if (rc == ECHD_ENOTFOUND && buf_eq(k, "virtual", 7)) {
		*v = B("from the spy");
		return 0;
	}
	return rc;
}

/* A write refused on purpose: "poison" fails its transaction, as LMDB
 * fails one after a failed write. */
static int
spy_put(struct storage_txn *t, enum storage_table tb, const struct st_buf *k,
	const struct st_buf *v, unsigned flags)
{
	if (buf_eq(k, "poison", 6)) {
		storage_fwd_txn_fail(t, -EIO);
		return -EIO;
	}
	return storage_fwd_put(t, tb, k, v, flags);
}

static int
spy_cursor_next(struct storage_cursor *c, struct st_buf *key, struct st_buf *val)
{
	((struct spy_cursor *)c)->moves++;
	spy_moves++;
	return storage_fwd_cursor_next(c, key, val);
}

static const struct storage_ops spy_ops = {
	.version = STORAGE_OPS_V2,
	.name = "spy",
	.base = &storage_fwd_ops,
	.open = spy_open,
	.close = spy_close,
	.txn_begin = spy_txn_begin,
	.txn_commit = spy_txn_commit,
	.get = spy_get,
	.put = spy_put,
	.cursor_next = spy_cursor_next,
};

/* ---- fixture ------------------------------------------------------------- */

static void
open_spy(const char *inner)
{
	struct storage_opts o = opts_default();

	storage_close(st);
	st = NULL;
	spy_inner = inner;
	OK(storage_open_ops(&spy_ops, &o, &st));
}

static void
setup(void)
{
	fixture_open();
	spy_refuse_commit = 0;
	spy_gets = spy_moves = spy_commits = 0;
	open_spy("mem");
}

/* k's value in st's inner storage, read there directly (NULL: none). */
static void
inner_is(const char *k, const char *want)
{
	struct storage_txn *t;
	struct st_buf kb = B(k), v;
	int rc;

	OK(storage_txn_begin(storage_fwd_inner(st), NULL, STORAGE_TXN_RDONLY, &t));
	rc = storage_get(t, STORAGE_T_KEYS, &kb, &v);
	if (want == NULL) {
		FAILS(rc, ECHD_ENOTFOUND);
	} else {
		OK(rc);
		ck_assert(buf_eq(&v, want, strlen(want)));
	}
	storage_txn_abort(t);
}

static void
put_s(struct storage_txn *t, const char *k, const char *v)
{
	struct st_buf kb = B(k), vb = B(v);

	OK(storage_put(t, STORAGE_T_KEYS, &kb, &vb, 0));
}

/* ---- tests ------------------------------------------------------------------ */

/* Writes reach the inner storage at the top-level commit, through the
 * wrapper's own commit; nested transactions are the inner one's. */
START_TEST(test_forwards_to_inner)
{
	struct storage_txn *t, *c;
	struct st_buf k = B("a"), v;

	begin();
	put_s(tx, "a", "1");
	OK(storage_txn_begin(st, tx, 0, &c));
	put_s(c, "b", "2");
	OK(storage_txn_commit(c));
	OK(storage_txn_begin(st, tx, 0, &c));
	put_s(c, "lost", "3");
	storage_txn_abort(c);
	inner_is("a", NULL); /* not before the commit */
	commit();
	ck_assert_uint_eq(spy_commits, 1);
	inner_is("a", "1");
	inner_is("b", "2");
	inner_is("lost", NULL);
	U64_EQ(storage_commit_gen(st), 1);
	U64_EQ(storage_durable_gen(st), 1); /* the inner one's, the same commits */

	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	OK(storage_get(t, STORAGE_T_KEYS, &k, &v));
	ck_assert(buf_eq(&v, "1", 1));
	storage_txn_abort(t);
}
END_TEST

/* A read the wrapper answers itself, on a miss of the inner storage. */
START_TEST(test_intercepts_get)
{
	struct st_buf k = B("virtual"), v;

	begin();
	OK(storage_get(tx, STORAGE_T_GROUPS, &k, &v));
	ck_assert(buf_eq(&v, "from the spy", 12));
	k = B("absent");
	FAILS(storage_get(tx, STORAGE_T_GROUPS, &k, &v), ECHD_ENOTFOUND);
	ck_assert_uint_eq(spy_gets, 2);
	commit();
}
END_TEST

/* A commit the wrapper refuses: nothing reaches the inner storage, no
 * generation is taken, and the writer slot is free again. */
START_TEST(test_intercepts_commit)
{
	struct storage_txn *t;

	spy_refuse_commit = -ENOSPC;
	begin();
	put_s(tx, "a", "1");
	t = tx;
	tx = NULL;
	FAILS(storage_txn_commit(t), -ENOSPC);
	inner_is("a", NULL);
	U64_EQ(storage_commit_gen(st), 0);
	spy_refuse_commit = 0;
	begin();
	put_s(tx, "a", "2");
	commit();
	inner_is("a", "2");
	U64_EQ(storage_commit_gen(st), 1);
}
END_TEST

/* Cursors wrap the inner ones (with the wrapper's own state), and a cursor
 * left open is closed by storage.c at its transaction's end. */
START_TEST(test_cursors)
{
	struct storage_cursor *c;
	struct st_buf key, val;
	unsigned n = 1;

	begin();
	put_s(tx, "a", "1");
	put_s(tx, "b", "2");
	put_s(tx, "c", "3");
	OK(storage_cursor_open(tx, STORAGE_T_KEYS, &c));
	OK(storage_cursor_seek(c, NULL, &key, &val));
	ck_assert(buf_eq(&key, "a", 1));
	while (storage_cursor_next(c, &key, &val) == 0) {
		n++;
	}
	ck_assert_uint_eq(n, 3);
	ck_assert_uint_eq(((struct spy_cursor *)c)->moves, 3); /* two rows, then the end */
	ck_assert_uint_eq(spy_moves, 3);
	OK(storage_cursor_seek_last(c, NULL, &key, &val));
	ck_assert(buf_eq(&key, "c", 1));
	OK(storage_cursor_del(c));
	commit(); /* c is still open: ended with its transaction */
	inner_is("c", NULL);
	inner_is("b", "2");
}
END_TEST

/* storage_fwd_txn_fail(): the failed transaction refuses every further
 * call, a child included, and its commit aborts it with the error; its
 * parent, when it is a child, stays usable (LMDB's rule). */
START_TEST(test_failed_txn)
{
	struct storage_txn *c, *gc;
	struct storage_cursor *cur;
	struct st_buf k = B("a"), v;

	begin();
	put_s(tx, "a", "1");
	OK(storage_txn_begin(st, tx, 0, &c));
	put_s(c, "b", "2");
	k = B("poison");
	FAILS(storage_put(c, STORAGE_T_KEYS, &k, &k, 0), -EIO);
	k = B("b");
	FAILS(storage_get(c, STORAGE_T_KEYS, &k, &v), ECHD_EINVAL);
	FAILS(storage_put(c, STORAGE_T_KEYS, &k, &k, 0), ECHD_EINVAL);
	FAILS(storage_del(c, STORAGE_T_KEYS, &k), ECHD_EINVAL);
	FAILS(storage_cursor_open(c, STORAGE_T_KEYS, &cur), ECHD_EINVAL);
	FAILS(storage_txn_begin(st, c, 0, &gc), ECHD_EINVAL);
	FAILS(storage_txn_commit(c), -EIO);
	/* The parent goes on, without the child's rows. */
	k = B("b");
	FAILS(storage_get(tx, STORAGE_T_KEYS, &k, &v), ECHD_ENOTFOUND);
	put_s(tx, "c", "3");
	commit();
	inner_is("a", "1");
	inner_is("b", NULL);
	inner_is("c", "3");

	/* A failed top-level one commits nothing. */
	begin();
	put_s(tx, "d", "4");
	k = B("poison");
	FAILS(storage_put(tx, STORAGE_T_KEYS, &k, &k, 0), -EIO);
	c = tx;
	tx = NULL;
	FAILS(storage_txn_commit(c), -EIO);
	inner_is("d", NULL);
	U64_EQ(storage_commit_gen(st), 1);
}
END_TEST

/* The optional interfaces are the inner engine's: lmdb's capacity answers
 * through the wrapper; over mem there is none, and no HA either way. */
START_TEST(test_interfaces_passed_on)
{
	struct storage_capacity *cap;
	struct storage_capacity_stat cs;

	ck_assert_ptr_null(storage_capacity(st));
	ck_assert_ptr_null(storage_ha(st));
	open_spy("lmdb");
	cap = storage_capacity(st);
	ck_assert_ptr_nonnull(cap);
	ck_assert_ptr_eq(cap, storage_capacity(storage_fwd_inner(st)));
	ck_assert_ptr_null(storage_ha(st));
	OK(storage_capacity_stat(cap, &cs));
	U64_EQ(cs.map_size, 16 * MIB); /* the fixture's lmdb.map-size reached lmdb */
	/* A write through the wrapper holds the inner engine's writer: lmdb
	 * cannot grow under it. */
	begin();
	FAILS(storage_capacity_grow(cap, 0), -EBUSY);
	commit();
	OK(storage_capacity_grow(cap, 0));
}
END_TEST

static Suite *
forward_suite(void)
{
	Suite *s = suite_create("forward");
	TCase *tc = tcase_create("base");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_forwards_to_inner);
	tcase_add_test(tc, test_intercepts_get);
	tcase_add_test(tc, test_intercepts_commit);
	tcase_add_test(tc, test_cursors);
	tcase_add_test(tc, test_failed_txn);
	tcase_add_test(tc, test_interfaces_passed_on);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	if (fixture_init("forward", "mem", 16 * MIB) != 0) {
		return 1;
	}
	echd_log_set(ECHD_LOG_WARNING, NULL, NULL);
	return fixture_run(srunner_create(forward_suite()));
}
