/* test_keys.c - unit tests for brk_keys_find(), the one finder of a
 * request's keys (broker/commands/commands.c): the table's rows on tricky
 * requests (a group named STREAMS, GROUP after COUNT, DEADLETTER twice or
 * named DEADLETTER), and the spec kinds no row of echd's uses yet (a
 * keyword searched from the end, KEYNUM), on rows made here. No connection.
 */
#include <check.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "broker.h"

#define MAXARGS 16

static struct resp_arg args[MAXARGS];
static int nargs;

/* Sets args to the NULL-terminated words given. */
static void
req(const char *first, ...)
{
	va_list ap;
	const char *w = first;

	nargs = 0;
	va_start(ap, first);
	while (w != NULL && nargs < MAXARGS) {
		args[nargs].p = w;
		args[nargs].len = strlen(w);
		nargs++;
		w = va_arg(ap, const char *);
	}
	va_end(ap);
}

/* The keys found for args with cmd (looked up by name unless given), as
 * their argv indexes joined with spaces; "EINVAL" when it does not fit. */
static const char *
found(const struct brk_cmd *cmd, unsigned how)
{
	static char out[128];
	struct brk_keys k;
	size_t n = 0;

	if (cmd == NULL) {
		cmd = brk_cmd_lookup(args[0].p, args[0].len);
		ck_assert_ptr_nonnull(cmd);
	}
	if (brk_keys_find(cmd, nargs, args, how, &k) != 0) {
		return "EINVAL";
	}
	out[0] = '\0';
	for (int i = 0; i < brk_keys_count(&k); i++) {
		n += (size_t)snprintf(out + n, sizeof(out) - n, "%s%d", i ? " " : "",
			brk_keys_at(&k, i, NULL));
	}
	return out;
}

START_TEST(test_read_keys_follow_the_options)
{
	/* a group and a consumer named STREAMS; GROUP after COUNT */
	req("XREADGROUP", "GROUP", "STREAMS", "STREAMS", "STREAMS", "a", "b", ">", ">", NULL);
	ck_assert_str_eq(found(NULL, 0), "5 6");
	req("XREADGROUP", "COUNT", "1", "GROUP", "g", "STREAMS", "STREAMS", "k", ">", NULL);
	ck_assert_str_eq(found(NULL, 0), "7");
	req("XREAD", "COUNT", "1", "STREAMS", "streams", "0", NULL);
	ck_assert_str_eq(found(NULL, 0), "4");
	/* unbalanced, or no STREAMS: what the handler refuses */
	req("XREAD", "STREAMS", "a", "b", "0", NULL);
	ck_assert_str_eq(found(NULL, 0), "EINVAL");
	ck_assert_str_eq(found(NULL, BRK_KEYS_PARTIAL), "");
	req("XREAD", "COUNT", "1", "BLOCK", "0", NULL);
	ck_assert_str_eq(found(NULL, 0), "EINVAL");
}
END_TEST

START_TEST(test_deadletter)
{
	req("XGROUP", "SETPOLICY", "k", "g", "MAXDELIVER", "1", "DEADLETTER", "dlq", NULL);
	ck_assert_str_eq(found(NULL, 0), "2 7");
	/* the key and the group may be called DEADLETTER: the search starts after them */
	req("XGROUP", "SETPOLICY", "DEADLETTER", "DEADLETTER", "ACKWAIT", "5", NULL);
	ck_assert_str_eq(found(NULL, 0), "2");
	req("XGROUP", "SETPOLICY", "k", "DEADLETTER", "DEADLETTER", "DEADLETTER", NULL);
	ck_assert_str_eq(found(NULL, 0), "2 5");
	/* a DEADLETTER with nothing after it names no key (the handler refuses it) */
	req("XGROUP", "SETPOLICY", "k", "g", "DEADLETTER", NULL);
	ck_assert_str_eq(found(NULL, 0), "2");
	/* twice: the first is found, and the handler refuses the second */
	req("XGROUP", "SETPOLICY", "k", "g", "DEADLETTER", "a", "DEADLETTER", "b", NULL);
	ck_assert_str_eq(found(NULL, 0), "2 5");
}
END_TEST

START_TEST(test_table_rows)
{
	unsigned flags = 0;
	struct brk_keys k;

	req("COPY", "a", "b", "REPLACE", NULL);
	ck_assert_str_eq(found(NULL, 0), "1 2");
	ck_assert_int_eq(brk_keys_find(brk_cmd_lookup("copy", 4), nargs, args, 0, &k), 0);
	ck_assert_int_eq(brk_keys_at(&k, 1, &flags), 2);
	ck_assert_uint_eq(flags, BRK_KS_OW | BRK_KS_UPDATE);
	req("DEL", "a", "b", "c", NULL);
	ck_assert_str_eq(found(NULL, 0), "1 2 3");
	req("XINFO", "CONSUMERS", "k", "g", NULL);
	ck_assert_str_eq(found(NULL, 0), "2");
	req("XINFO", "NOSUCH", "k", NULL); /* an unknown subcommand: refused, no keys */
	ck_assert_str_eq(found(NULL, 0), "");
	/* shard channels are not keys, unless asked for */
	req("SPUBLISH", "ch", "m", NULL);
	ck_assert_str_eq(found(NULL, 0), "");
	ck_assert_str_eq(found(NULL, BRK_KEYS_NOT_KEYS), "1");
	req("PING", NULL);
	ck_assert_str_eq(found(NULL, 0), "");
}
END_TEST

/* Rows of this test's own: a keyword searched from the end, and KEYNUM. */
static int
fn_none(struct brk_ctx *x)
{
	(void)x;
	return 0;
}

START_TEST(test_spec_kinds)
{
	/* MIGRATE-like: KEYS searched from the second-to-last argument backwards */
	static const struct brk_cmd back = {"back", fn_none, -2, 0,
		{{.bs = BRK_KS_KEYWORD, .keyword = "KEYS", .startfrom = -2, .lastkey = -1,
			.step = 1, .flags = BRK_KS_RW}}};
	/* EVAL-like: argv[2] counts the keys that follow it */
	static const struct brk_cmd num = {"num", fn_none, -3, 0,
		{{.bs = BRK_KS_INDEX, .pos = 2, .fk = BRK_KS_KEYNUM, .keynumidx = 0, .firstkey = 1,
			.step = 1, .flags = BRK_KS_RW}}};
	int first, last, step;
	bool movable;

	req("back", "x", "KEYS", "KEYS", "a", "b", NULL);
	ck_assert_str_eq(found(&back, 0), "4 5"); /* the last KEYS, not the first */
	req("back", "KEYS", NULL); /* a keyword in the last place has nothing after it */
	ck_assert_str_eq(found(&back, 0), "");
	req("num", "script", "2", "a", "b", "arg", NULL);
	ck_assert_str_eq(found(&num, 0), "3 4");
	req("num", "script", "0", "arg", NULL);
	ck_assert_str_eq(found(&num, 0), "EINVAL"); /* Redis: no keys is an invalid range */
	req("num", "script", "9", "a", NULL);
	ck_assert_str_eq(found(&num, 0), "EINVAL");
	req("num", "script", "x", "a", NULL);
	ck_assert_str_eq(found(&num, 0), "EINVAL");
	/* neither is a plain range: no legacy first/last/step, movable keys */
	brk_keys_legacy(&num, NULL, &first, &last, &step, &movable);
	ck_assert(first == 0 && last == 0 && step == 0 && movable);
	brk_keys_legacy(brk_cmd_lookup("rename", 6), NULL, &first, &last, &step, &movable);
	ck_assert(first == 1 && last == 2 && step == 1 && !movable);
	brk_keys_legacy(brk_cmd_lookup("xgroup", 6),
		brk_subcmd_find(brk_cmd_lookup("xgroup", 6), &(struct resp_arg){"setpolicy", 9}),
		&first, &last, &step, &movable);
	ck_assert(first == 2 && last == 2 && step == 1 && movable);
}
END_TEST

static Suite *
keys_suite(void)
{
	Suite *s = suite_create("keys");
	TCase *tc = tcase_create("keys");

	tcase_add_test(tc, test_read_keys_follow_the_options);
	tcase_add_test(tc, test_deadletter);
	tcase_add_test(tc, test_table_rows);
	tcase_add_test(tc, test_spec_kinds);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(keys_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
