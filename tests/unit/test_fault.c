/* test_fault.c - the "fault" storage backend (st_fault.c): transparent
 * without a control file; with one, the chosen puts, deletes, commits,
 * begins and syncs fail and leave what LMDB would leave. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "echd.h"
#include "storage.h"
#include "unit_storage.h"

static char ctl[PATH_MAX];   /* this test's control file */
static unsigned nfired;      /* "st_fault: failing ..." lines logged */
static char last_fired[128]; /* the last of them */

/* The log sink: keeps what an injected failure logs, drops the rest. */
static void
log_sink(enum echd_log_level level, const char *line, void *ud)
{
	static const char mark[] = "st_fault: failing ";

	(void)level;
	(void)ud;
	if (strncmp(line, mark, sizeof(mark) - 1) == 0) {
		nfired++;
		snprintf(last_fired, sizeof(last_fired), "%s", line + sizeof(mark) - 1);
	}
}

/* ---- fixture (the rest is in unit_storage.h) ---------------------------- */

/* Replaces the control file (rename: a new inode, seen at the next begin). */
static void
rules(const char *text)
{
	char tmp[PATH_MAX + 8];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", ctl);
	f = fopen(tmp, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_ge(fputs(text, f), 0);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(rename(tmp, ctl), 0);
}

static void
setup(void)
{
	snprintf(ctl, sizeof(ctl), "%s/faults-%d", base_dir, (int)getpid());
	unlink(ctl);
	ck_assert_int_eq(setenv("ECHD_FAULT_FILE", ctl, 1), 0);
	fixture_open();
}

static void
setup_no_env(void)
{
	ck_assert_int_eq(unsetenv("ECHD_FAULT_FILE"), 0);
	fixture_open();
}

static void
fault_teardown(void)
{
	teardown();
	unlink(ctl);
}

/* ---- helpers ------------------------------------------------------------ */

static int
put_rc(struct storage_txn *t, const char *k, const char *v)
{
	struct st_buf kb = B(k), vb = B(v);

	return storage_put(t, STORAGE_T_META, &kb, &vb, 0);
}

/* want NULL: k must be absent. Uses its own read transaction. */
static void
stored_is(const char *k, const char *want)
{
	struct storage_txn *t;
	struct st_buf kb = B(k), v;
	int rc;

	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	rc = storage_get(t, STORAGE_T_META, &kb, &v);
	if (want == NULL) {
		ck_assert_msg(rc == ECHD_ENOTFOUND, "get %s: %d, expected not found", k, rc);
	} else {
		ck_assert_msg(rc == 0, "get %s: %d (%s)", k, rc, echd_strerror(rc));
		ck_assert_msg(buf_eq(&v, want, strlen(want)), "get %s: '%.*s', expected '%s'", k,
			(int)v.len, (const char *)v.data, want);
	}
	storage_txn_abort(t);
}

/* Commits a txn that puts k=v; returns the commit's result. */
static int
put_commit(const char *k, const char *v)
{
	struct storage_txn *t;
	int rc;

	OK(storage_txn_begin(st, NULL, 0, &t));
	rc = put_rc(t, k, v);
	if (rc != 0) {
		storage_txn_abort(t);
		return rc;
	}
	return storage_txn_commit(t);
}

/* ---- without faults ------------------------------------------------------ */

START_TEST(test_registry_lists_fault)
{
	const char *const *names = storage_backends();
	bool found = false;

	for (size_t n = 0; names[n] != NULL; n++) {
		found |= strcmp(names[n], "fault") == 0;
	}
	ck_assert(found);
}
END_TEST

/* No ECHD_FAULT_FILE: rows, cursors, nested txns and reopening as lmdb. */
START_TEST(test_transparent)
{
	struct storage_txn *child;
	struct storage_cursor *c;
	struct st_buf key, val;
	struct storage_opts o = opts_default();

	begin();
	OK(put_rc(tx, "a", "1"));
	OK(put_rc(tx, "b", "2"));
	OK(put_rc(tx, "c", "3"));
	OK(storage_txn_begin(st, tx, 0, &child));
	OK(put_rc(child, "d", "4"));
	storage_txn_abort(child);
	OK(storage_txn_begin(st, tx, 0, &child));
	OK(put_rc(child, "e", "5"));
	OK(storage_txn_commit(child));
	OK(storage_cursor_open(tx, STORAGE_T_META, &c));
	OK(storage_cursor_seek(c, NULL, &key, &val));
	ck_assert(buf_eq(&key, "a", 1));
	OK(storage_cursor_del(c));
	OK(storage_cursor_next(c, &key, &val));
	ck_assert(buf_eq(&key, "b", 1));
	OK(storage_cursor_seek_last(c, NULL, &key, &val));
	ck_assert(buf_eq(&key, "e", 1));
	OK(storage_cursor_prev(c, &key, &val));
	ck_assert(buf_eq(&key, "c", 1));
	/* left open: the commit ends it */
	commit();
	/* the same directory opens as plain lmdb */
	storage_close(st);
	st = NULL;
	OK(storage_open("lmdb", &o, &st));
	stored_is("a", NULL);
	stored_is("b", "2");
	stored_is("d", NULL);
	stored_is("e", "5");
}
END_TEST

/* A control file that names rules only counts once it exists. */
START_TEST(test_missing_file_no_faults)
{
	OK(put_commit("a", "1"));
	rules("put 1 EIO\n");
	FAILS(put_commit("b", "2"), -EIO);
	unlink(ctl);
	OK(put_commit("c", "3"));
	OK(put_commit("d", "4"));
	stored_is("b", NULL);
	stored_is("d", "4");
}
END_TEST

/* ---- puts and deletes --------------------------------------------------- */

START_TEST(test_put_nth_fails_txn)
{
	struct storage_txn *t;
	struct st_buf kb = B("a"), v;

	OK(put_commit("old", "0"));
	rules("put 3 EIO\n");
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(put_rc(t, "a", "1"));
	OK(put_rc(t, "b", "2"));
	FAILS(put_rc(t, "c", "3"), -EIO);
	ck_assert_uint_eq(nfired, 1);
	ck_assert_str_eq(last_fired, "put #3 with EIO");
	/* as LMDB after a failed write: the txn is unusable ... */
	FAILS(storage_get(t, STORAGE_T_META, &kb, &v), ECHD_EINVAL);
	FAILS(put_rc(t, "d", "4"), ECHD_EINVAL);
	/* ... and committing it applies nothing */
	FAILS(storage_txn_commit(t), -EIO);
	stored_is("a", NULL);
	stored_is("c", NULL);
	stored_is("old", "0");
	/* one-shot: the next txn is fine */
	OK(put_commit("e", "5"));
	stored_is("e", "5");
}
END_TEST

START_TEST(test_failed_child_leaves_parent_usable)
{
	struct storage_txn *child;

	rules("put 2 MAPFULL\n");
	begin();
	OK(put_rc(tx, "p", "1"));
	OK(storage_txn_begin(st, tx, 0, &child));
	FAILS(put_rc(child, "c", "2"), ECHD_EMAPFULL);
	FAILS(storage_txn_commit(child), ECHD_EMAPFULL);
	OK(put_rc(tx, "q", "3"));
	commit();
	stored_is("p", "1");
	stored_is("c", NULL);
	stored_is("q", "3");
}
END_TEST

START_TEST(test_del_and_cursor_del)
{
	struct storage_txn *t;
	struct storage_cursor *c;
	struct st_buf kb = B("a"), key, val;

	OK(put_commit("a", "1"));
	OK(put_commit("b", "2"));
	rules("del 1 ENOSPC\ndel 3 EIO\n");
	OK(storage_txn_begin(st, NULL, 0, &t));
	FAILS(storage_del(t, STORAGE_T_META, &kb), -ENOSPC);
	FAILS(storage_txn_commit(t), -ENOSPC);
	stored_is("a", "1");
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_del(t, STORAGE_T_META, &kb)); /* del #2 */
	OK(storage_cursor_open(t, STORAGE_T_META, &c));
	OK(storage_cursor_seek(c, NULL, &key, &val));
	ck_assert(buf_eq(&key, "b", 1));
	FAILS(storage_cursor_del(c), -EIO); /* del #3 */
	FAILS(storage_cursor_next(c, &key, &val), ECHD_EINVAL);
	FAILS(storage_txn_commit(t), -EIO);
	stored_is("a", "1");
	stored_is("b", "2");
}
END_TEST

/* ---- commits ------------------------------------------------------------ */

START_TEST(test_commit_nth_aborts)
{
	struct storage_txn *t, *child;
	struct storage_cursor *c;

	rules("commit 2 ENOSPC\n");
	OK(put_commit("a", "1"));
	/* the second top-level commit fails, with an open child and cursor */
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(put_rc(t, "b", "2"));
	OK(storage_cursor_open(t, STORAGE_T_META, &c));
	OK(storage_txn_begin(st, t, 0, &child));
	OK(put_rc(child, "c", "3"));
	FAILS(storage_txn_commit(t), -ENOSPC);
	stored_is("a", "1");
	stored_is("b", NULL);
	stored_is("c", NULL);
	OK(put_commit("d", "4"));
	stored_is("d", "4");
}
END_TEST

START_TEST(test_read_txns_do_not_count)
{
	struct storage_txn *t;

	rules("commit 1 EIO\nbegin 2 EIO\n");
	for (int i = 0; i < 5; i++) {
		OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
		OK(storage_txn_commit(t));
	}
	FAILS(put_commit("a", "1"), -EIO); /* commit #1 */
	{
		struct storage_txn *t2 = NULL;
		FAILS(storage_txn_begin(st, NULL, 0, &t2), -EIO); /* begin #2 */
		ck_assert_ptr_null(t2);
	}
	OK(put_commit("b", "2"));
	stored_is("a", NULL);
	stored_is("b", "2");
}
END_TEST

START_TEST(test_subcommit)
{
	struct storage_txn *child;

	rules("subcommit 1 EIO\n");
	begin();
	OK(put_rc(tx, "p", "1"));
	OK(storage_txn_begin(st, tx, 0, &child));
	OK(put_rc(child, "c", "2"));
	FAILS(storage_txn_commit(child), -EIO);
	OK(storage_txn_begin(st, tx, 0, &child));
	OK(put_rc(child, "d", "3"));
	OK(storage_txn_commit(child));
	commit();
	stored_is("p", "1");
	stored_is("c", NULL);
	stored_is("d", "3");
}
END_TEST

START_TEST(test_every_until_cleared)
{
	rules("commit every EIO\n");
	for (int i = 0; i < 5; i++) {
		FAILS(put_commit("a", "1"), -EIO);
	}
	rules("");
	OK(put_commit("a", "1"));
	stored_is("a", "1");
}
END_TEST

/* Every rule counts every op; the first due rule in the file decides. */
START_TEST(test_rules_count_independently)
{
	rules("put 2 EIO\nput 3 ENOSPC\nput 2 MAPFULL\n");
	OK(put_commit("a", "1"));             /* put #1 */
	FAILS(put_commit("b", "2"), -EIO);    /* #2: EIO and MAPFULL due, EIO first */
	FAILS(put_commit("c", "3"), -ENOSPC); /* #3 */
	OK(put_commit("d", "4"));             /* all spent */
	ck_assert_uint_eq(nfired, 2);
	/* rewriting the file restarts the counts */
	rules("put 2 EIO\n");
	OK(put_commit("e", "5"));
	FAILS(put_commit("f", "6"), -EIO);
}
END_TEST

START_TEST(test_bad_lines_ignored)
{
	rules("# a comment\n\n  put 2 EIO  # trailing\nput x EIO\nput 1 EFOO\nflush 1 EIO\n"
	      "put 0 EIO\nput 1 EIO more\n");
	OK(put_commit("a", "1"));
	FAILS(put_commit("b", "2"), -EIO);
	OK(put_commit("c", "3"));
}
END_TEST

START_TEST(test_sync)
{
	OK(put_commit("a", "1"));
	rules("sync 1 EIO\n");
	FAILS(storage_sync(st), -EIO);
	ck_assert_str_eq(last_fired, "sync #1 with EIO");
	OK(storage_sync(st));
}
END_TEST

static Suite *
fault_suite(void)
{
	Suite *s = suite_create("fault");
	TCase *tc;

	tc = tcase_create("transparent");
	tcase_add_checked_fixture(tc, setup_no_env, fault_teardown);
	tcase_add_test(tc, test_registry_lists_fault);
	tcase_add_test(tc, test_transparent);
	suite_add_tcase(s, tc);

	tc = tcase_create("control-file");
	tcase_add_checked_fixture(tc, setup, fault_teardown);
	tcase_add_test(tc, test_missing_file_no_faults);
	tcase_add_test(tc, test_rules_count_independently);
	tcase_add_test(tc, test_bad_lines_ignored);
	tcase_add_test(tc, test_every_until_cleared);
	suite_add_tcase(s, tc);

	tc = tcase_create("writes");
	tcase_add_checked_fixture(tc, setup, fault_teardown);
	tcase_add_test(tc, test_put_nth_fails_txn);
	tcase_add_test(tc, test_failed_child_leaves_parent_usable);
	tcase_add_test(tc, test_del_and_cursor_del);
	suite_add_tcase(s, tc);

	tc = tcase_create("commits");
	tcase_add_checked_fixture(tc, setup, fault_teardown);
	tcase_add_test(tc, test_commit_nth_aborts);
	tcase_add_test(tc, test_read_txns_do_not_count);
	tcase_add_test(tc, test_subcommit);
	tcase_add_test(tc, test_sync);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	if (fixture_init("fault", "fault", 16 * MIB) != 0) {
		return 1;
	}
	echd_log_set(ECHD_LOG_WARNING, log_sink, NULL);
	return fixture_run(srunner_create(fault_suite()));
}
