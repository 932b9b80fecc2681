/* test_resp.c - unit tests for proto/: the request reader and reply writer.
 *
 * Reader results are compared as transcripts: every returned request, then
 * how the input ended ("EAGAIN pending=N" or the error and its text). The
 * same input must give the same transcript however it is cut into feeds.
 *
 * Test scaffolding allocates with libc, not echd_malloc, so that
 * echd_alloc_fail_at() counts only the allocations of the code under test.
 */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "echd.h"
#include "resp.h"

/* ---- transcripts ------------------------------------------------------- */

struct tr {
	char *s;
	size_t len;
	size_t cap;
};

static void
tr_add(struct tr *t, const char *p, size_t n)
{
	if (t->len + n + 1 > t->cap) {
		size_t ncap = t->cap ? t->cap : 256;

		while (ncap < t->len + n + 1) {
			ncap *= 2;
		}
		t->s = realloc(t->s, ncap);
		if (t->s == NULL) {
			ck_abort_msg("out of memory in the test scaffolding");
		}
		t->cap = ncap;
	}
	memcpy(t->s + t->len, p, n);
	t->len += n;
	t->s[t->len] = '\0';
}

static void tr_printf(struct tr *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
tr_printf(struct tr *t, const char *fmt, ...)
{
	char tmp[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(tmp)) {
		ck_abort_msg("tr_printf overflow");
	}
	tr_add(t, tmp, (size_t)n);
}

/* Printable bytes as they are; others and \ [ ] as \xHH. Called per byte
 * of big arguments, so no Check assertion here: each passing one costs Check
 * a write() to record its location. */
static void
tr_escaped(struct tr *t, const char *p, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];

		if (c < 0x20 || c > 0x7e || c == '\\' || c == '[' || c == ']') {
			char esc[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};

			tr_add(t, esc, 4);
		} else {
			tr_add(t, (const char *)&c, 1);
		}
	}
}

static void
tr_error(struct tr *t, const char *what, int rc, struct resp_reader *r)
{
	const char *name = rc == ECHD_EPROTO   ? "EPROTO"
			   : rc == ECHD_ELIMIT ? "ELIMIT"
			   : rc == -ENOMEM     ? "ENOMEM"
					       : "OTHER";

	tr_printf(t, "%s%s(", what, name);
	tr_escaped(t, resp_reader_errstr(r), strlen(resp_reader_errstr(r)));
	tr_add(t, ")", 1);
}

static void
tr_request(struct tr *t, int argc, const struct resp_arg *argv)
{
	int i;

	tr_printf(t, "%d", argc);
	for (i = 0; i < argc; i++) {
		/* every argument is NUL-terminated at p[len] */
		ck_assert_int_eq(argv[i].p[argv[i].len], '\0');
		tr_add(t, "[", 1);
		tr_escaped(t, argv[i].p, argv[i].len);
		tr_add(t, "]", 1);
	}
	tr_add(t, ";", 1);
}

/* Returns requests until the reader wants input or fails. */
static int
drain(struct resp_reader *r, struct tr *t)
{
	struct resp_arg *argv;
	int argc, rc;

	for (;;) {
		rc = resp_reader_next(r, &argc, &argv);
		if (rc == -EAGAIN) {
			return rc;
		}
		if (rc != 0) {
			tr_error(t, "", rc, r);
			return rc;
		}
		tr_request(t, argc, argv);
	}
}

/* Feeds in[] cut at cuts[] (ascending), draining after each piece.
 * Returns the transcript (free() it). */
static char *
run_cuts(const char *in, size_t n, const size_t *cuts, size_t ncuts, const struct resp_limits *lim)
{
	struct resp_reader *r = resp_reader_create(lim);
	struct tr t = {0};
	size_t start = 0, i;
	int rc;

	ck_assert_ptr_nonnull(r);
	tr_add(&t, "", 0);
	for (i = 0; i <= ncuts; i++) {
		size_t end = i < ncuts ? cuts[i] : n;

		rc = resp_reader_feed(r, in + start, end - start);
		if (rc != 0) {
			tr_error(&t, "feed:", rc, r);
			goto out;
		}
		start = end;
		if (drain(r, &t) != -EAGAIN) {
			goto out;
		}
	}
	tr_printf(&t, "EAGAIN pending=%zu", resp_reader_pending(r));
out:
	resp_reader_destroy(r);
	return t.s;
}

static char *
run_whole(const char *in, size_t n, const struct resp_limits *lim)
{
	return run_cuts(in, n, NULL, 0, lim);
}

static char *
run_split(const char *in, size_t n, size_t at, const struct resp_limits *lim)
{
	return run_cuts(in, n, &at, 1, lim);
}

static char *
run_bytewise(const char *in, size_t n, const struct resp_limits *lim)
{
	size_t *cuts = malloc((n + 1) * sizeof(*cuts));
	char *res;
	size_t i;

	ck_assert_ptr_nonnull(cuts);
	for (i = 1; i < n; i++) {
		cuts[i - 1] = i;
	}
	res = run_cuts(in, n, cuts, n > 0 ? n - 1 : 0, lim);
	free(cuts);
	return res;
}

/* The transcript of in[] must be want when fed whole, cut once at every
 * offset, and one byte at a time. Big inputs are cut every step bytes. */
static void
check_all_splits(
	const char *in, size_t n, const char *want, const struct resp_limits *lim, size_t step)
{
	char *got;
	size_t k;

	got = run_whole(in, n, lim);
	ck_assert_str_eq(got, want);
	free(got);
	for (k = 0; k <= n; k += step) {
		got = run_split(in, n, k, lim);
		if (strcmp(got, want) != 0) {
			ck_abort_msg("split at %zu: got '%s', want '%s'", k, got, want);
		}
		free(got);
	}
	got = run_bytewise(in, n, lim);
	ck_assert_str_eq(got, want);
	free(got);
}

static void
teardown(void)
{
	echd_alloc_fail_at(0);
}

static char *
repeat(char c, size_t n, const char *suffix)
{
	size_t sl = strlen(suffix);
	char *s = malloc(n + sl + 1);

	ck_assert_ptr_nonnull(s);
	memset(s, c, n);
	memcpy(s + n, suffix, sl + 1);
	return s;
}

/* ---- reader: valid input ----------------------------------------------- */

struct rcase {
	const char *in;
	size_t n;
	const char *want;
};

/* clang-format off */
#define RCASE(lit, want) {lit, sizeof(lit) - 1, want}
/* clang-format on */

static const struct rcase valid_cases[] = {
	RCASE("*1\r\n$4\r\nPING\r\n", "1[PING];EAGAIN pending=0"),
	RCASE("*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n",
		"3[SET][key][value];EAGAIN pending=0"),
	/* several requests, both kinds, in one feed */
	RCASE("*1\r\n$4\r\nPING\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$0\r\n\r\nECHO hi\n",
		"1[PING];1[PING];2[ECHO][];2[ECHO][hi];EAGAIN pending=0"),
	/* binary bulk: NUL, CR, LF inside */
	RCASE("*2\r\n$4\r\nECHO\r\n$6\r\na\0\r\nb\n\r\n",
		"2[ECHO][a\\x00\\x0d\\x0ab\\x0a];EAGAIN pending=0"),
	/* empty inline lines are requests with no arguments */
	RCASE("\r\n\n \t \r\nPING\r\n", "0;0;0;1[PING];EAGAIN pending=0"),
	RCASE("\n", "0;EAGAIN pending=0"),
	RCASE("\r\r\nPING\r\n", "0;1[PING];EAGAIN pending=0"),
	/* counts of zero and below are empty requests, as in Redis */
	RCASE("*0\r\n*-1\r\n*-5\r\n", "0;0;0;EAGAIN pending=0"),
	RCASE("PING\nPING\n", "1[PING];1[PING];EAGAIN pending=0"),
	RCASE(" \t SET\t\tk  v \r\n", "3[SET][k][v];EAGAIN pending=0"),
	RCASE("SET \"a b\" 'c d'\r\n", "3[SET][a b][c d];EAGAIN pending=0"),
	RCASE("ECHO \"\\x41\\x7a\\n\\r\\t\\b\\a\\\\\\\"\\q\" 'it\\'s' '\\n'\r\n",
		"4[ECHO][Az\\x0a\\x0d\\x09\\x08\\x07\\x5c\"q][it's][\\x5cn];EAGAIN pending=0"),
	RCASE("ECHO \"\\xZZ\\x4\"\n", "2[ECHO][xZZx4];EAGAIN pending=0"),
	RCASE("ECHO \"\\xfF\"\n", "2[ECHO][\\xff];EAGAIN pending=0"),
	RCASE("a\"b c\" x'y'\r\n", "2[ab c][xy];EAGAIN pending=0"),
	RCASE("SET k \"\" ''\n", "4[SET][k][][];EAGAIN pending=0"),
	RCASE("'a\\' b' \"a\\\"b\"\n", "2[a' b][a\"b];EAGAIN pending=0"),
	RCASE("\"a\" 'b'\t\"c\"\r\n", "3[a][b][c];EAGAIN pending=0"),
	/* a NUL is an ordinary byte in an inline line */
	RCASE("ECHO a\0b\r\n", "2[ECHO][a\\x00b];EAGAIN pending=0"),
	/* \v and \f separate only at the start, as isspace() vs the switch */
	RCASE("\va\vb\n", "1[a\\x0bb];EAGAIN pending=0"),
	RCASE("+PING\r\n", "1[+PING];EAGAIN pending=0"),
	/* Redis quirks: the two bytes after a line's CR and after a bulk are
	 * skipped without being checked */
	RCASE("*1\r\n$3\r\nfooXY*1\r\n$1\r\nx\r\n", "1[foo];1[x];EAGAIN pending=0"),
	RCASE("*1\rx$4\ryPING\r\n", "1[PING];EAGAIN pending=0"),
	RCASE("*5\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n$2\r\nee\r\n",
		"5[a][b][c][d][ee];EAGAIN pending=0"),
	/* an incomplete request stays pending */
	RCASE("*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET", "1[PING];EAGAIN pending=11"),
	RCASE("GET k", "EAGAIN pending=5"),
	RCASE("", "EAGAIN pending=0"),
	/* the largest count the default limit allows is waited on, not refused */
	RCASE("*1048576\r\n$1\r\na\r\n", "EAGAIN pending=17"),
};

START_TEST(test_valid_splits)
{
	const struct rcase *c = &valid_cases[_i];

	check_all_splits(c->in, c->n, c->want, NULL, 1);
}
END_TEST

START_TEST(test_pipeline_many)
{
	static const char one[] = "*3\r\n$4\r\nXADD\r\n$1\r\ns\r\n$3\r\n1-1\r\n";
	size_t n = 1000, i, len = sizeof(one) - 1;
	char *in = malloc(n * len);
	struct resp_reader *r = resp_reader_create(NULL);
	struct resp_arg *argv;
	int argc, count = 0;

	ck_assert_ptr_nonnull(in);
	ck_assert_ptr_nonnull(r);
	for (i = 0; i < n; i++) {
		memcpy(in + i * len, one, len);
	}
	ck_assert_int_eq(resp_reader_feed(r, in, n * len), 0);
	ck_assert_uint_eq(resp_reader_pending(r), n * len);
	while (resp_reader_next(r, &argc, &argv) == 0) {
		ck_assert_int_eq(argc, 3);
		ck_assert_str_eq(argv[0].p, "XADD");
		ck_assert_str_eq(argv[2].p, "1-1");
		count++;
		ck_assert_uint_eq(resp_reader_pending(r), (n - (size_t)count) * len);
	}
	ck_assert_int_eq(count, (int)n);
	ck_assert_uint_eq(resp_reader_pending(r), 0);
	resp_reader_destroy(r);
	free(in);
}
END_TEST

/* Requests straddling feeds, for a long time: consumed bytes are reclaimed,
 * so the buffer stays the size of a feed rather than of the stream. */
START_TEST(test_pipeline_steady)
{
	static const char one[] = "*3\r\n$4\r\nXADD\r\n$1\r\ns\r\n$3\r\n1-1\r\n";
	size_t len = sizeof(one) - 1, fed = 0, want_next = 0, i;
	struct resp_reader *r = resp_reader_create(NULL);
	char feed[4000];
	struct resp_arg *argv;
	int argc, rc;
	long count = 0;

	ck_assert_ptr_nonnull(r);
	for (i = 0; i < 2000; i++) {
		size_t k;

		/* a feed of 4000 bytes cuts requests at shifting offsets */
		for (k = 0; k < sizeof(feed); k++) {
			feed[k] = one[(fed + k) % len];
		}
		fed += sizeof(feed);
		ck_assert_int_eq(resp_reader_feed(r, feed, sizeof(feed)), 0);
		while ((rc = resp_reader_next(r, &argc, &argv)) == 0) {
			if (argc != 3 || strcmp(argv[2].p, "1-1") != 0) {
				ck_abort_msg("request %ld garbled", count);
			}
			count++;
		}
		ck_assert_int_eq(rc, -EAGAIN);
		want_next = fed / len;
		if (resp_reader_capacity(r) > 16 * 1024) {
			ck_abort_msg("capacity %zu after %zu bytes", resp_reader_capacity(r), fed);
		}
	}
	ck_assert_int_eq(count, (long)want_next);
	ck_assert_uint_eq(resp_reader_pending(r), fed % len);
	resp_reader_destroy(r);
}
END_TEST

/* ---- reader: big arguments --------------------------------------------- */

static char *
big_request(size_t arglen, size_t *n)
{
	char hdr[64];
	int h = snprintf(hdr, sizeof(hdr), "*2\r\n$3\r\nSET\r\n$%zu\r\n", arglen);
	char *in = malloc((size_t)h + arglen + 2);
	size_t i;

	ck_assert_ptr_nonnull(in);
	memcpy(in, hdr, (size_t)h);
	for (i = 0; i < arglen; i++) {
		/* binary, with CRLF and NUL in it */
		in[h + i] = (char)(i * 7 + i / 251);
	}
	memcpy(in + h + arglen, "\r\n", 2);
	*n = (size_t)h + arglen + 2;
	return in;
}

START_TEST(test_big_arg_splits)
{
	size_t arglen = 100000, n;
	char *in = big_request(arglen, &n);
	struct tr want = {0};

	tr_add(&want, "2[SET][", 7);
	tr_escaped(&want, in + n - 2 - arglen, arglen);
	tr_add(&want, "];EAGAIN pending=0", 18);
	check_all_splits(in, n, want.s, NULL, 997);
	free(want.s);
	free(in);
}
END_TEST

START_TEST(test_big_arg_lands_in_place)
{
	size_t arglen = 1000000, n, off, hdr;
	char *in = big_request(arglen, &n);
	struct resp_reader *r = resp_reader_create(NULL);
	struct resp_arg *argv;
	size_t cap;
	int argc;

	ck_assert_ptr_nonnull(r);
	hdr = n - arglen - 2;
	/* a small request first, so the big one does not start at offset 0 */
	ck_assert_int_eq(resp_reader_feed(r, "PING\r\n", 6), 0);
	ck_assert_int_eq(resp_reader_feed(r, in, hdr), 0);
	ck_assert_int_eq(resp_reader_next(r, &argc, &argv), 0);
	ck_assert_int_eq(argc, 1);
	ck_assert_int_eq(resp_reader_next(r, &argc, &argv), -EAGAIN);
	/* room for the whole argument is made when its $L line is read ... */
	cap = resp_reader_capacity(r);
	ck_assert_uint_ge(cap, n);
	/* ... so the buffer never grows, and never moves, while it arrives */
	for (off = hdr; off < n; off += 4096) {
		size_t piece = n - off < 4096 ? n - off : 4096;

		ck_assert_int_eq(resp_reader_feed(r, in + off, piece), 0);
		ck_assert_uint_eq(resp_reader_capacity(r), cap);
		if (off + piece < n) {
			ck_assert_int_eq(resp_reader_next(r, &argc, &argv), -EAGAIN);
		}
	}
	ck_assert_int_eq(resp_reader_next(r, &argc, &argv), 0);
	ck_assert_int_eq(argc, 2);
	ck_assert_uint_eq(argv[1].len, arglen);
	ck_assert_mem_eq(argv[1].p, in + hdr, arglen);
	ck_assert_int_eq(argv[1].p[arglen], '\0');
	/* once idle, a buffer that big is given back */
	ck_assert_int_eq(resp_reader_feed(r, "PING\r\n", 6), 0);
	ck_assert_uint_lt(resp_reader_capacity(r), 256 * 1024);
	ck_assert_int_eq(resp_reader_next(r, &argc, &argv), 0);
	ck_assert_str_eq(argv[0].p, "PING");
	resp_reader_destroy(r);
	free(in);
}
END_TEST

/* A length claimed but not sent does not buy its size in memory. */
START_TEST(test_big_arg_claim)
{
	static const char hdr[] = "*1\r\n$536870912\r\n";
	struct resp_reader *r = resp_reader_create(NULL);
	struct resp_arg *argv;
	char chunk[65536];
	size_t i;
	int argc;

	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(resp_reader_feed(r, hdr, sizeof(hdr) - 1), 0);
	ck_assert_int_eq(resp_reader_next(r, &argc, &argv), -EAGAIN);
	ck_assert_uint_le(resp_reader_capacity(r), 2 * 1024 * 1024);
	/* sent for real, it grows with the data */
	memset(chunk, 'x', sizeof(chunk));
	for (i = 0; i < 64; i++) {
		ck_assert_int_eq(resp_reader_feed(r, chunk, sizeof(chunk)), 0);
	}
	ck_assert_int_eq(resp_reader_next(r, &argc, &argv), -EAGAIN);
	ck_assert_uint_ge(resp_reader_capacity(r), 64 * sizeof(chunk));
	ck_assert_uint_le(resp_reader_capacity(r), 2 * 64 * sizeof(chunk) + sizeof(hdr));
	resp_reader_destroy(r);
}
END_TEST

/* ---- reader: protocol errors ------------------------------------------- */

static const struct rcase error_cases[] = {
	RCASE("*abc\r\n", "EPROTO(invalid multibulk length)"),
	RCASE("*\r\n", "EPROTO(invalid multibulk length)"),
	RCASE("*+1\r\n", "EPROTO(invalid multibulk length)"),
	RCASE("*01\r\n", "EPROTO(invalid multibulk length)"),
	RCASE("*-0\r\n", "EPROTO(invalid multibulk length)"),
	RCASE("* 1\r\n", "EPROTO(invalid multibulk length)"),
	RCASE("*1 \r\n", "EPROTO(invalid multibulk length)"),
	RCASE("*99999999999999999999\r\n", "EPROTO(invalid multibulk length)"),
	RCASE("*1048577\r\n", "EPROTO(invalid multibulk length)"),
	RCASE("*1\r\n$abc\r\n", "EPROTO(invalid bulk length)"),
	RCASE("*1\r\n$-1\r\n", "EPROTO(invalid bulk length)"),
	RCASE("*1\r\n$\r\n", "EPROTO(invalid bulk length)"),
	RCASE("*1\r\n$03\r\nfoo\r\n", "EPROTO(invalid bulk length)"),
	RCASE("*1\r\n$536870913\r\n", "EPROTO(invalid bulk length)"),
	RCASE("*1\r\n$9223372036854775808\r\n", "EPROTO(invalid bulk length)"),
	RCASE("*1\r\nfoo\r\n", "EPROTO(expected '$', got 'f')"),
	RCASE("*1\r\n\r\n", "EPROTO(expected '$', got '\\x0d')"),
	RCASE("*1\r\n\0\r\n", "EPROTO(expected '$', got ' ')"),
	RCASE("*2\r\n$1\r\na\r\n:1\r\n", "EPROTO(expected '$', got ':')"),
	RCASE("\"abc\r\n", "EPROTO(unbalanced quotes in request)"),
	RCASE("'abc\n", "EPROTO(unbalanced quotes in request)"),
	RCASE("\"abc\"x\r\n", "EPROTO(unbalanced quotes in request)"),
	RCASE("'a'b\n", "EPROTO(unbalanced quotes in request)"),
	RCASE("\"abc\\\"\r\n", "EPROTO(unbalanced quotes in request)"),
	RCASE("'abc\\'\n", "EPROTO(unbalanced quotes in request)"),
	RCASE("\"a\\\n", "EPROTO(unbalanced quotes in request)"),
	/* requests before the bad one are still returned */
	RCASE("PING\r\nSET \"k\n", "1[PING];EPROTO(unbalanced quotes in request)"),
	RCASE("*1\r\n$4\r\nPING\r\n*x\r\n", "1[PING];EPROTO(invalid multibulk length)"),
};

START_TEST(test_error_splits)
{
	const struct rcase *c = &error_cases[_i];

	check_all_splits(c->in, c->n, c->want, NULL, 1);
}
END_TEST

/* After a protocol error, neither feeding nor asking gets anything more. */
START_TEST(test_failed_stays_failed)
{
	struct resp_reader *r = resp_reader_create(NULL);
	struct resp_arg *argv;
	int argc;

	ck_assert_ptr_nonnull(r);
	ck_assert_str_eq(resp_reader_errstr(r), "");
	ck_assert_int_eq(resp_reader_feed(r, "*1\r\nfoo\r\n*1\r\n$4\r\nPING\r\n", 23), 0);
	ck_assert_int_eq(resp_reader_next(r, &argc, &argv), ECHD_EPROTO);
	ck_assert_str_eq(resp_reader_errstr(r), "expected '$', got 'f'");
	ck_assert_int_eq(resp_reader_next(r, &argc, &argv), ECHD_EPROTO);
	ck_assert_int_eq(resp_reader_feed(r, "PING\r\n", 6), ECHD_EPROTO);
	ck_assert_int_eq(resp_reader_next(r, &argc, &argv), ECHD_EPROTO);
	ck_assert_str_eq(resp_reader_errstr(r), "expected '$', got 'f'");
	resp_reader_destroy(r);
}
END_TEST

/* ---- reader: limits ---------------------------------------------------- */

START_TEST(test_limit_inline_len)
{
	struct resp_limits lim;

	resp_limits_default(&lim);
	lim.max_inline_len = 8;
	check_all_splits("12345678\n", 9, "1[12345678];EAGAIN pending=0", &lim, 1);
	check_all_splits("1234567\r\n", 9, "1[1234567];EAGAIN pending=0", &lim, 1);
	check_all_splits("12345678", 8, "EAGAIN pending=8", &lim, 1);
	/* one byte over, with or without its newline, whatever the cuts */
	check_all_splits("123456789", 9, "EPROTO(too big inline request)", &lim, 1);
	check_all_splits("123456789\n", 10, "EPROTO(too big inline request)", &lim, 1);
	check_all_splits("12345678\r\n", 10, "EPROTO(too big inline request)", &lim, 1);
	check_all_splits("PING\n123456789", 14, "1[PING];EPROTO(too big inline request)", &lim, 1);
	/* multibulk requests are not inline lines */
	check_all_splits("*1\r\n$9\r\n123456789\r\n", 19, "1[123456789];EAGAIN pending=0", &lim, 1);
}
END_TEST

START_TEST(test_limit_inline_default)
{
	char *ok = repeat('A', 64 * 1024, "\n");
	char *big = repeat('A', 64 * 1024 + 1, "");
	char *got;

	got = run_whole(ok, strlen(ok), NULL);
	ck_assert_uint_eq(strlen(got), 1 + 2 + 64 * 1024 + strlen(";EAGAIN pending=0"));
	free(got);
	check_all_splits(big, strlen(big), "EPROTO(too big inline request)", NULL, 4099);
	free(ok);
	free(big);
}
END_TEST

START_TEST(test_limit_mbulk_count_string)
{
	/* "*" and 65535 digits: 64 KiB without CR is still waited on */
	char *in = repeat('1', 64 * 1024, "");
	char *line;

	in[0] = '*';
	check_all_splits(in, strlen(in), "EAGAIN pending=65536", NULL, 4099);
	free(in);
	/* one more byte without CR is refused */
	in = repeat('1', 64 * 1024 + 1, "");
	in[0] = '*';
	check_all_splits(in, strlen(in), "EPROTO(too big mbulk count string)", NULL, 4099);
	free(in);
	/* a 64 KiB line that does end is just a bad number */
	line = repeat('1', 64 * 1024, "\r\n");
	line[0] = '*';
	check_all_splits(line, strlen(line), "EPROTO(invalid multibulk length)", NULL, 4099);
	free(line);
}
END_TEST

START_TEST(test_limit_bulk_count_string)
{
	char *in = repeat('1', 64 * 1024 + 1 + 4, "");

	memcpy(in, "*1\r\n$", 5);
	check_all_splits(in, strlen(in), "EPROTO(too big bulk count string)", NULL, 4099);
	in[strlen(in) - 1] = '\0';
	check_all_splits(in, strlen(in), "EAGAIN pending=65540", NULL, 4099);
	free(in);
}
END_TEST

START_TEST(test_limit_bulk_len)
{
	struct resp_limits lim;

	resp_limits_default(&lim);
	lim.max_bulk_len = 10;
	check_all_splits(
		"*1\r\n$10\r\n0123456789\r\n", 21, "1[0123456789];EAGAIN pending=0", &lim, 1);
	check_all_splits(
		"*1\r\n$11\r\n01234567890\r\n", 22, "EPROTO(invalid bulk length)", &lim, 1);
	/* the default is proto-max-bulk-len, 512 MiB */
	check_all_splits("*1\r\n$536870912\r\n", 16, "EAGAIN pending=16", NULL, 1);
}
END_TEST

START_TEST(test_limit_multibulk_len)
{
	struct resp_limits lim;

	resp_limits_default(&lim);
	lim.max_multibulk_len = 3;
	check_all_splits("*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n", 25,
		"3[a][b][c];EAGAIN pending=0", &lim, 1);
	check_all_splits("*4\r\n", 4, "EPROTO(invalid multibulk length)", &lim, 1);
	/* a count past INT_MAX is refused even when the limit allows it */
	lim.max_multibulk_len = SIZE_MAX;
	check_all_splits("*2147483647\r\n", 13, "EAGAIN pending=13", &lim, 1);
	check_all_splits("*2147483648\r\n", 13, "EPROTO(invalid multibulk length)", &lim, 1);
}
END_TEST

START_TEST(test_limit_query_buf)
{
	struct resp_limits lim;
	struct resp_reader *r;
	struct resp_arg *argv;
	int argc;

	resp_limits_default(&lim);
	lim.max_query_buf = 16;
	r = resp_reader_create(&lim);
	ck_assert_ptr_nonnull(r);
	/* consumed requests do not count: only what is still unparsed */
	ck_assert_int_eq(resp_reader_feed(r, "*1\r\n$4\r\nPING\r\n", 14), 0);
	ck_assert_int_eq(resp_reader_next(r, &argc, &argv), 0);
	ck_assert_int_eq(resp_reader_feed(r, "*1\r\n$4\r\nPING\r\n", 14), 0);
	ck_assert_int_eq(resp_reader_next(r, &argc, &argv), 0);
	ck_assert_int_eq(resp_reader_feed(r, "*2\r\n$4\r\nECHO\r\n$", 15), 0);
	ck_assert_int_eq(resp_reader_next(r, &argc, &argv), -EAGAIN);
	ck_assert_int_eq(resp_reader_feed(r, "1", 1), 0);
	ck_assert_uint_eq(resp_reader_pending(r), 16);
	ck_assert_int_eq(resp_reader_feed(r, "\r", 1), ECHD_ELIMIT);
	ck_assert_str_eq(resp_reader_errstr(r), "client query buffer limit reached");
	ck_assert_uint_eq(resp_reader_pending(r), 16);
	/* and it stays failed */
	ck_assert_int_eq(resp_reader_next(r, &argc, &argv), ECHD_EPROTO);
	ck_assert_int_eq(resp_reader_feed(r, "x", 1), ECHD_ELIMIT);
	ck_assert_str_eq(resp_reader_errstr(r), "client query buffer limit reached");
	resp_reader_destroy(r);

	/* one feed bigger than the limit */
	r = resp_reader_create(&lim);
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(resp_reader_feed(r, "*1\r\n$10\r\n0123456789\r\n", 21), ECHD_ELIMIT);
	ck_assert_int_eq(resp_reader_next(r, &argc, &argv), ECHD_EPROTO);
	resp_reader_destroy(r);
}
END_TEST

/* New limits apply from the next request, not to one half read. */
START_TEST(test_set_limits_next_request)
{
	struct resp_reader *r = resp_reader_create(NULL);
	struct resp_limits lim;
	struct resp_arg *argv;
	int argc;

	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(resp_reader_feed(r, "*2\r\n$5\r\nhello\r\n", 15), 0);
	ck_assert_int_eq(resp_reader_next(r, &argc, &argv), -EAGAIN);
	resp_limits_default(&lim);
	lim.max_bulk_len = 3;
	resp_reader_set_limits(r, &lim);
	ck_assert_int_eq(resp_reader_feed(r, "$5\r\nworld\r\n", 11), 0);
	ck_assert_int_eq(resp_reader_next(r, &argc, &argv), 0);
	ck_assert_int_eq(argc, 2);
	ck_assert_str_eq(argv[1].p, "world");
	ck_assert_int_eq(resp_reader_feed(r, "*1\r\n$5\r\nhello\r\n", 15), 0);
	ck_assert_int_eq(resp_reader_next(r, &argc, &argv), ECHD_EPROTO);
	ck_assert_str_eq(resp_reader_errstr(r), "invalid bulk length");
	resp_reader_destroy(r);
}
END_TEST

/* ---- reader: lifecycle and allocation failure -------------------------- */

START_TEST(test_reader_lifecycle)
{
	struct resp_reader *r;
	struct resp_arg *argv;
	int argc;

	resp_reader_destroy(NULL);
	r = resp_reader_create(NULL);
	ck_assert_ptr_nonnull(r);
	ck_assert_uint_eq(resp_reader_pending(r), 0);
	ck_assert_uint_eq(resp_reader_capacity(r), 0);
	ck_assert_int_eq(resp_reader_next(r, &argc, &argv), -EAGAIN);
	ck_assert_int_eq(resp_reader_feed(r, "", 0), 0);
	ck_assert_int_eq(resp_reader_next(r, &argc, &argv), -EAGAIN);
	ck_assert_int_eq(resp_reader_feed(r, "PI", 2), 0);
	ck_assert_uint_gt(resp_reader_capacity(r), 0);
	ck_assert_uint_eq(resp_reader_pending(r), 2);
	ck_assert_int_eq(resp_reader_next(r, &argc, &argv), -EAGAIN);
	ck_assert_int_eq(resp_reader_feed(r, "NG\r\n", 4), 0);
	ck_assert_int_eq(resp_reader_next(r, &argc, &argv), 0);
	ck_assert_uint_eq(resp_reader_pending(r), 0);
	ck_assert_str_eq(resp_reader_errstr(r), "");
	resp_reader_destroy(r);

	echd_alloc_fail_at(1);
	ck_assert_ptr_null(resp_reader_create(NULL));
}
END_TEST

/* Fails the Nth allocation for every N: every call either works or says
 * -ENOMEM and can be retried, and the requests come out unchanged. */
static char *
run_with_alloc_failure(const char *in, size_t n, size_t piece, unsigned long fail_at, bool *hit)
{
	struct resp_reader *r;
	struct tr t = {0};
	struct resp_arg *argv;
	size_t off = 0;
	int argc, rc;

	r = resp_reader_create(NULL);
	ck_assert_ptr_nonnull(r);
	tr_add(&t, "", 0);
	echd_alloc_fail_at(fail_at);
	while (off < n) {
		size_t len = n - off < piece ? n - off : piece;

		rc = resp_reader_feed(r, in + off, len);
		if (rc == -ENOMEM) {
			*hit = true;
			continue;
		}
		ck_assert_int_eq(rc, 0);
		off += len;
		for (;;) {
			rc = resp_reader_next(r, &argc, &argv);
			if (rc == -ENOMEM) {
				*hit = true;
				continue;
			}
			if (rc != 0) {
				break;
			}
			tr_request(&t, argc, argv);
		}
		ck_assert_int_eq(rc, -EAGAIN);
	}
	echd_alloc_fail_at(0);
	resp_reader_destroy(r);
	return t.s;
}

START_TEST(test_reader_alloc_failure)
{
	static const char in[] = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n"
				 "SET \"a\\x41\" 'b c' d e f g h i j k\r\n"
				 "*12\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n$1\r\n4\r\n$1\r\n5\r\n"
				 "$1\r\n6\r\n$1\r\n7\r\n$1\r\n8\r\n$1\r\n9\r\n$1\r\na\r\n"
				 "$1\r\nb\r\n$1\r\nc\r\n";
	static const char *want = "3[SET][k][hello];11[SET][aA][b c][d][e][f][g][h][i][j][k];"
				  "12[1][2][3][4][5][6][7][8][9][a][b][c];";
	size_t pieces[] = {sizeof(in) - 1, 7, 1};
	unsigned long n;
	size_t p;

	for (p = 0; p < sizeof(pieces) / sizeof(pieces[0]); p++) {
		bool hit = true;

		/* until a run no longer reaches the failing allocation */
		for (n = 1; hit; n++) {
			char *got;

			hit = false;
			got = run_with_alloc_failure(in, sizeof(in) - 1, pieces[p], n, &hit);
			ck_assert_str_eq(got, want);
			free(got);
		}
		ck_assert_uint_gt(n, 2);
	}
}
END_TEST

/* ---- writer ------------------------------------------------------------ */

struct wfix {
	struct resp_buf buf;
	struct resp_writer w;
};

static void
wfix_init(struct wfix *f, int proto)
{
	resp_buf_init(&f->buf);
	f->w.out = &f->buf;
	f->w.proto = proto;
}

#define ck_assert_buf(b, lit)                                                                      \
	do {                                                                                       \
		ck_assert_uint_eq((b)->len, sizeof(lit) - 1);                                      \
		ck_assert_mem_eq((b)->data, lit, sizeof(lit) - 1);                                 \
	} while (0)

START_TEST(test_buf_basics)
{
	struct resp_buf b;

	resp_buf_init(&b);
	ck_assert_uint_eq(b.len, 0);
	ck_assert(!b.oom);
	resp_buf_append(&b, "hello ", 6);
	resp_buf_append(&b, "world", 5);
	resp_buf_append(&b, NULL, 0);
	ck_assert_buf(&b, "hello world");
	resp_buf_consume(&b, 6);
	ck_assert_buf(&b, "world");
	resp_buf_truncate(&b, 3);
	ck_assert_buf(&b, "wor");
	resp_buf_truncate(&b, 10);
	ck_assert_buf(&b, "wor");
	resp_buf_consume(&b, 3);
	ck_assert_uint_eq(b.len, 0);
	resp_buf_finish(&b);
	ck_assert_ptr_null(b.data);
	ck_assert_uint_eq(b.cap, 0);
	resp_buf_finish(&b);
}
END_TEST

START_TEST(test_buf_growth)
{
	struct resp_buf b;
	char chunk[1000];
	size_t i;

	resp_buf_init(&b);
	for (i = 0; i < sizeof(chunk); i++) {
		chunk[i] = (char)i;
	}
	for (i = 0; i < 1000; i++) {
		resp_buf_append(&b, chunk, sizeof(chunk));
	}
	ck_assert(!b.oom);
	ck_assert_uint_eq(b.len, 1000 * sizeof(chunk));
	ck_assert_uint_ge(b.cap, b.len);
	for (i = 0; i < 1000; i++) {
		ck_assert_mem_eq(b.data + i * sizeof(chunk), chunk, sizeof(chunk));
	}
	resp_buf_finish(&b);
}
END_TEST

START_TEST(test_buf_oom)
{
	struct wfix f;

	wfix_init(&f, 2);
	echd_alloc_fail_at(1);
	resp_add_bulk(&f.w, "hello", 5);
	ck_assert(f.buf.oom);
	ck_assert_uint_eq(f.buf.len, 0);
	/* sticky: later appends are dropped even though memory is back */
	resp_add_int(&f.w, 1);
	resp_add_simple(&f.w, "OK");
	resp_buf_append(&f.buf, "x", 1);
	ck_assert_uint_eq(f.buf.len, 0);
	ck_assert(f.buf.oom);
	resp_buf_finish(&f.buf);
	ck_assert(!f.buf.oom);

	/* failing to grow keeps what was already written */
	wfix_init(&f, 3);
	resp_add_simple(&f.w, "OK");
	echd_alloc_fail_at(1);
	{
		char big[4096] = {0};

		resp_add_bulk(&f.w, big, sizeof(big));
	}
	ck_assert(f.buf.oom);
	ck_assert_buf(&f.buf, "+OK\r\n");
	resp_set_deferred_len(&f.w, 0, '*', 1);
	ck_assert_buf(&f.buf, "+OK\r\n");
	resp_buf_finish(&f.buf);

	/* an error too long for the stack buffer needs the heap */
	wfix_init(&f, 2);
	echd_alloc_fail_at(1);
	resp_add_errorf(&f.w, "ERR %0300d", 7);
	ck_assert(f.buf.oom);
	ck_assert_uint_eq(f.buf.len, 0);
	resp_buf_finish(&f.buf);
}
END_TEST

START_TEST(test_buf_printf)
{
	struct resp_buf b;
	char name[5001];

	resp_buf_init(&b);
	resp_buf_printf(&b, "id=%d ", 7);
	ck_assert_uint_eq(b.len, 5);
	/* longer than any first guess: formatted whole, after what was there */
	memset(name, 'n', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	resp_buf_printf(&b, "name=%s end\n", name);
	ck_assert_uint_eq(b.len, 5 + 5 + 5000 + 5);
	ck_assert(memcmp(b.data, "id=7 name=nnn", 13) == 0);
	ck_assert(memcmp(b.data + b.len - 5, " end\n", 5) == 0);
	ck_assert(!b.oom);
	resp_buf_finish(&b);

	/* growth that fails keeps what was written and sets oom */
	resp_buf_init(&b);
	resp_buf_printf(&b, "ok ");
	echd_alloc_fail_at(1);
	resp_buf_printf(&b, "%s", name);
	echd_alloc_fail_at(0);
	ck_assert(b.oom);
	ck_assert_uint_eq(b.len, 3);
	ck_assert(memcmp(b.data, "ok ", 3) == 0);
	resp_buf_finish(&b);
}
END_TEST

START_TEST(test_buf_limit)
{
	struct wfix f;
	char chunk[300];

	memset(chunk, 'x', sizeof(chunk));
	wfix_init(&f, 2);
	f.buf.limit = 2000;
	/* growth within the limit works */
	for (int i = 0; i < 6; i++) {
		resp_add_bulk(&f.w, chunk, sizeof(chunk));
	}
	ck_assert(!f.buf.oom);
	ck_assert(!f.buf.over_limit);
	ck_assert_uint_eq(f.buf.len, 6 * (sizeof(chunk) + 8));
	/* the append that would pass it is refused whole, and stays refused */
	for (int i = 0; i < 10 && !f.buf.oom; i++) {
		resp_add_bulk(&f.w, chunk, sizeof(chunk));
	}
	ck_assert(f.buf.oom);
	ck_assert(f.buf.over_limit);
	ck_assert_uint_le(f.buf.len, 2 * f.buf.limit);
	ck_assert_uint_eq(f.buf.len % (sizeof(chunk) + 8), 0);
	{
		size_t len = f.buf.len;
		resp_add_int(&f.w, 1);
		ck_assert_uint_eq(f.buf.len, len);
	}
	resp_buf_finish(&f.buf);
	ck_assert(!f.buf.over_limit);
	ck_assert_uint_eq(f.buf.limit, 0);
}
END_TEST

/* Every allocation of a reply sequence fails in turn: no crash, no leak,
 * and either the full reply or the oom flag. */
static void
write_sequence(struct resp_writer *w)
{
	size_t h = resp_add_deferred(w);
	char big[3000];

	memset(big, 'z', sizeof(big));
	resp_add_bulk(w, "a", 1);
	resp_add_errorf(w, "ERR %s %d", "bad", 3);
	resp_add_errorf(w, "ERR %.*s", 400, big);
	resp_add_bulk(w, big, sizeof(big));
	resp_add_double(w, 0.5);
	resp_add_verbatim(w, "txt", big, 1000);
	resp_set_deferred_len(w, h, '*', 6);
}

START_TEST(test_writer_alloc_failure)
{
	struct wfix ref, f;
	unsigned long n;
	bool failed = true;

	wfix_init(&ref, 3);
	write_sequence(&ref.w);
	ck_assert(!ref.buf.oom);
	for (n = 1; failed; n++) {
		wfix_init(&f, 3);
		echd_alloc_fail_at(n);
		write_sequence(&f.w);
		echd_alloc_fail_at(0);
		failed = f.buf.oom;
		if (!failed) {
			ck_assert_uint_eq(f.buf.len, ref.buf.len);
			ck_assert_mem_eq(f.buf.data, ref.buf.data, ref.buf.len);
		}
		resp_buf_finish(&f.buf);
	}
	ck_assert_uint_gt(n, 2);
	resp_buf_finish(&ref.buf);
}
END_TEST

START_TEST(test_write_simple_error)
{
	struct wfix f;

	wfix_init(&f, _i);
	resp_add_simple(&f.w, "OK");
	resp_add_simple(&f.w, "a\r\nb");
	resp_add_error(&f.w, "ERR syntax error");
	resp_add_error(&f.w, "ERR line\r\nbreak\n");
	resp_add_error(&f.w, "-WRONGTYPE dash given");
	resp_add_errorf(&f.w, "ERR unknown command '%s', with args beginning with: %d", "FOO", 2);
	resp_add_errorf(&f.w, "ERR %s", "in\r\njected");
	ck_assert_buf(&f.buf, "+OK\r\n"
			      "+a  b\r\n"
			      "-ERR syntax error\r\n"
			      "-ERR line  break \r\n"
			      "-WRONGTYPE dash given\r\n"
			      "-ERR unknown command 'FOO', with args beginning with: 2\r\n"
			      "-ERR in  jected\r\n");
	resp_buf_finish(&f.buf);
}
END_TEST

START_TEST(test_write_errorf_long)
{
	struct wfix f;
	char want[1100];
	int n;

	wfix_init(&f, 2);
	resp_add_errorf(&f.w, "ERR %01000d\n", 42);
	n = snprintf(want, sizeof(want), "-ERR %01000d \r\n", 42);
	ck_assert_uint_eq(f.buf.len, (size_t)n);
	ck_assert_mem_eq(f.buf.data, want, (size_t)n);
	resp_buf_finish(&f.buf);
}
END_TEST

START_TEST(test_write_int)
{
	static const long long vals[] = {0, 1, -1, 9, 10, 99, 100, 101, 999, 1000, 12345, -12345,
		1000000007LL, 99999999999LL, 100000000000LL, LLONG_MAX, LLONG_MIN, LLONG_MIN + 1};
	struct wfix f;
	size_t i;

	wfix_init(&f, 2);
	resp_add_int(&f.w, 0);
	resp_add_int(&f.w, -42);
	resp_add_int(&f.w, LLONG_MIN);
	ck_assert_buf(&f.buf, ":0\r\n:-42\r\n:-9223372036854775808\r\n");
	resp_buf_finish(&f.buf);

	/* the hand-made formatter against printf, around every digit count */
	for (i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		char want[64];
		int n = snprintf(want, sizeof(want), ":%lld\r\n", vals[i]);

		wfix_init(&f, 3);
		resp_add_int(&f.w, vals[i]);
		ck_assert_uint_eq(f.buf.len, (size_t)n);
		ck_assert_mem_eq(f.buf.data, want, (size_t)n);
		resp_buf_finish(&f.buf);
	}
	for (long long p = 1; p <= LLONG_MAX / 10; p *= 10) {
		long long around[] = {p - 1, p, p + 1, -p, 5 * p};

		for (i = 0; i < 5; i++) {
			char want[64];
			int n = snprintf(want, sizeof(want), ":%lld\r\n", around[i]);

			wfix_init(&f, 2);
			resp_add_int(&f.w, around[i]);
			ck_assert_uint_eq(f.buf.len, (size_t)n);
			ck_assert_mem_eq(f.buf.data, want, (size_t)n);
			resp_buf_finish(&f.buf);
		}
	}
}
END_TEST

START_TEST(test_write_bulk)
{
	struct wfix f;

	wfix_init(&f, _i);
	resp_add_bulk(&f.w, "hello", 5);
	resp_add_bulk(&f.w, "", 0);
	resp_add_bulk(&f.w, "a\0\r\nb", 5);
	resp_add_bulk_cstr(&f.w, "cstr");
	resp_add_bulk_ll(&f.w, -1234567890123LL);
	resp_add_bulk_ll(&f.w, 0);
	ck_assert_buf(&f.buf, "$5\r\nhello\r\n"
			      "$0\r\n\r\n"
			      "$5\r\na\0\r\nb\r\n"
			      "$4\r\ncstr\r\n"
			      "$14\r\n-1234567890123\r\n"
			      "$1\r\n0\r\n");
	resp_buf_finish(&f.buf);
}
END_TEST

START_TEST(test_write_null)
{
	struct wfix f;

	wfix_init(&f, 2);
	resp_add_null(&f.w);
	resp_add_null_array(&f.w);
	resp_add_bulk_cstr(&f.w, NULL);
	ck_assert_buf(&f.buf, "$-1\r\n*-1\r\n$-1\r\n");
	resp_buf_finish(&f.buf);

	wfix_init(&f, 3);
	resp_add_null(&f.w);
	resp_add_null_array(&f.w);
	resp_add_bulk_cstr(&f.w, NULL);
	ck_assert_buf(&f.buf, "_\r\n_\r\n_\r\n");
	resp_buf_finish(&f.buf);
}
END_TEST

START_TEST(test_write_aggregates)
{
	struct wfix f;

	wfix_init(&f, 2);
	resp_add_array(&f.w, 3);
	resp_add_array(&f.w, 0);
	resp_add_map(&f.w, 2);
	resp_add_map(&f.w, 0);
	resp_add_set(&f.w, 5);
	resp_add_push(&f.w, 3);
	resp_add_array(&f.w, 1234567);
	ck_assert_buf(&f.buf, "*3\r\n*0\r\n*4\r\n*0\r\n*5\r\n*3\r\n*1234567\r\n");
	resp_buf_finish(&f.buf);

	wfix_init(&f, 3);
	resp_add_array(&f.w, 3);
	resp_add_array(&f.w, 0);
	resp_add_map(&f.w, 2);
	resp_add_map(&f.w, 0);
	resp_add_set(&f.w, 5);
	resp_add_push(&f.w, 3);
	resp_add_array(&f.w, 1234567);
	ck_assert_buf(&f.buf, "*3\r\n*0\r\n%2\r\n%0\r\n~5\r\n>3\r\n*1234567\r\n");
	resp_buf_finish(&f.buf);
}
END_TEST

START_TEST(test_write_bool)
{
	struct wfix f;

	wfix_init(&f, 2);
	resp_add_bool(&f.w, true);
	resp_add_bool(&f.w, false);
	ck_assert_buf(&f.buf, ":1\r\n:0\r\n");
	resp_buf_finish(&f.buf);

	wfix_init(&f, 3);
	resp_add_bool(&f.w, true);
	resp_add_bool(&f.w, false);
	ck_assert_buf(&f.buf, "#t\r\n#f\r\n");
	resp_buf_finish(&f.buf);
}
END_TEST

struct dcase {
	double d;
	const char *text;
};

/* Redis 7.4 d2string() output (fpconv_dtoa after the integer fast path). */
static const struct dcase double_cases[] = {
	{1.5, "1.5"},
	{-1.5, "-1.5"},
	{3.0, "3"},
	{-42.0, "-42"},
	{0.0, "0"},
	{-0.0, "-0"},
	{0.1, "0.1"},
	{0.3, "0.3"},
	{0.1 + 0.2, "0.30000000000000004"},
	{1.0 / 3, "0.3333333333333333"},
	{123456789.125, "123456789.125"},
	/* fpconv goes scientific past 6 decimals once the exponent reaches 4 */
	{31952.324492599862, "3.1952324492599862e+4"},
	{1234.5678901, "1234.5678901"},
	{1e-5, "0.00001"},
	{1.5e-7, "1.5e-7"},
	{1e-7, "1e-7"},
	{1e17, "100000000000000000"},
	{1e21, "1e+21"},
	{1.5e300, "1.5e+300"},
	{-2.5e-300, "-2.5e-300"},
	{1.7976931348623157e308, "1.7976931348623157e+308"},
	{5e-324, "5e-324"},
	{4611686018427387904.0, "4611686018427387904"},
	{9223372036854775808.0, "9223372036854776000"},
	{12345678901234567890.0, "12345678901234567000"},
};

START_TEST(test_write_double)
{
	struct wfix f;
	char want[96];
	size_t i;
	int n;

	wfix_init(&f, 3);
	resp_add_double(&f.w, INFINITY);
	resp_add_double(&f.w, -INFINITY);
	resp_add_double(&f.w, NAN);
	resp_add_double(&f.w, 2.5);
	ck_assert_buf(&f.buf, ",inf\r\n,-inf\r\n,nan\r\n,2.5\r\n");
	resp_buf_finish(&f.buf);

	wfix_init(&f, 2);
	resp_add_double(&f.w, INFINITY);
	resp_add_double(&f.w, -INFINITY);
	resp_add_double(&f.w, -NAN);
	resp_add_double(&f.w, 2.5);
	ck_assert_buf(&f.buf, "$3\r\ninf\r\n$4\r\n-inf\r\n$3\r\nnan\r\n$3\r\n2.5\r\n");
	resp_buf_finish(&f.buf);

	for (i = 0; i < sizeof(double_cases) / sizeof(double_cases[0]); i++) {
		const struct dcase *c = &double_cases[i];

		wfix_init(&f, 3);
		resp_add_double(&f.w, c->d);
		n = snprintf(want, sizeof(want), ",%s\r\n", c->text);
		ck_assert_msg(f.buf.len == (size_t)n && memcmp(f.buf.data, want, (size_t)n) == 0,
			"%.17g: got '%.*s', want '%s'", c->d, (int)f.buf.len, f.buf.data, want);
		resp_buf_finish(&f.buf);

		wfix_init(&f, 2);
		resp_add_double(&f.w, c->d);
		n = snprintf(want, sizeof(want), "$%zu\r\n%s\r\n", strlen(c->text), c->text);
		ck_assert_msg(f.buf.len == (size_t)n && memcmp(f.buf.data, want, (size_t)n) == 0,
			"%.17g: got '%.*s', want '%s'", c->d, (int)f.buf.len, f.buf.data, want);
		resp_buf_finish(&f.buf);
	}
}
END_TEST

/* Any finite double reads back exactly. */
START_TEST(test_write_double_roundtrip)
{
	uint64_t x = 0x9e3779b97f4a7c15ULL;
	int i;

	for (i = 0; i < 20000; i++) {
		struct wfix f;
		char text[64];
		uint64_t bits;
		double d;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		bits = i % 2 ? x
			     : (x & 0x800fffffffffffffULL) | ((uint64_t)(1023 + i % 64 - 32) << 52);
		memcpy(&d, &bits, sizeof(d));
		if (!isfinite(d)) {
			continue;
		}
		wfix_init(&f, 3);
		resp_add_double(&f.w, d);
		/* plain ifs: a passing Check assertion costs a write() */
		if (f.buf.len < 4 || f.buf.len > 30 || f.buf.data[0] != ',' ||
			memcmp(f.buf.data + f.buf.len - 2, "\r\n", 2) != 0) {
			ck_abort_msg("%.17g: bad frame '%.*s'", d, (int)f.buf.len, f.buf.data);
		}
		memcpy(text, f.buf.data + 1, f.buf.len - 3);
		text[f.buf.len - 3] = '\0';
		if (strtod(text, NULL) != d) {
			ck_abort_msg("%.17g printed as %s", d, text);
		}
		resp_buf_finish(&f.buf);
	}
}
END_TEST

START_TEST(test_write_verbatim)
{
	struct wfix f;

	wfix_init(&f, 3);
	resp_add_verbatim(&f.w, "txt", "hello", 5);
	resp_add_verbatim(&f.w, "mkd", "", 0);
	resp_add_verbatim(&f.w, "md", "a\r\nb", 4);
	ck_assert_buf(&f.buf, "=9\r\ntxt:hello\r\n"
			      "=4\r\nmkd:\r\n"
			      "=8\r\nmd :a\r\nb\r\n");
	resp_buf_finish(&f.buf);

	wfix_init(&f, 2);
	resp_add_verbatim(&f.w, "txt", "hello", 5);
	resp_add_verbatim(&f.w, "md", "a\r\nb", 4);
	ck_assert_buf(&f.buf, "$5\r\nhello\r\n$4\r\na\r\nb\r\n");
	resp_buf_finish(&f.buf);
}
END_TEST

START_TEST(test_write_deferred)
{
	struct wfix f;
	size_t h;

	/* after earlier replies, with elements behind it */
	wfix_init(&f, 2);
	resp_add_simple(&f.w, "OK");
	h = resp_add_deferred(&f.w);
	resp_add_int(&f.w, 1);
	resp_add_int(&f.w, 2);
	resp_add_int(&f.w, 3);
	resp_set_deferred_len(&f.w, h, '*', 3);
	resp_add_simple(&f.w, "next");
	ck_assert_buf(&f.buf, "+OK\r\n*3\r\n:1\r\n:2\r\n:3\r\n+next\r\n");
	resp_buf_finish(&f.buf);

	/* empty, at the very end */
	wfix_init(&f, 3);
	h = resp_add_deferred(&f.w);
	resp_set_deferred_len(&f.w, h, '*', 0);
	ck_assert_buf(&f.buf, "*0\r\n");
	resp_buf_finish(&f.buf);

	/* nested: the inner length is known first and patched first */
	wfix_init(&f, 3);
	h = resp_add_deferred(&f.w);
	{
		size_t inner = resp_add_deferred(&f.w);

		resp_add_bulk(&f.w, "a", 1);
		resp_add_bulk(&f.w, "b", 1);
		resp_set_deferred_len(&f.w, inner, '*', 2);
	}
	resp_add_int(&f.w, 7);
	resp_set_deferred_len(&f.w, h, '*', 2);
	ck_assert_buf(&f.buf, "*2\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n:7\r\n");
	resp_buf_finish(&f.buf);

	/* a long count, many bytes behind it */
	wfix_init(&f, 2);
	h = resp_add_deferred(&f.w);
	for (int i = 0; i < 12345; i++) {
		resp_add_int(&f.w, i % 10);
	}
	resp_set_deferred_len(&f.w, h, '*', 12345);
	ck_assert_uint_eq(f.buf.len, 8 + 12345 * 4);
	ck_assert_mem_eq(f.buf.data, "*12345\r\n:0\r\n:1\r\n", 16);
	ck_assert_mem_eq(f.buf.data + f.buf.len - 8, ":3\r\n:4\r\n", 8);
	resp_buf_finish(&f.buf);
}
END_TEST

START_TEST(test_write_deferred_kinds)
{
	struct wfix f;
	size_t h1, h2;

	wfix_init(&f, 2);
	h1 = resp_add_deferred(&f.w);
	resp_add_bulk(&f.w, "k", 1);
	resp_add_int(&f.w, 1);
	resp_set_deferred_len(&f.w, h1, '%', 1);
	h2 = resp_add_deferred(&f.w);
	resp_add_bulk(&f.w, "m", 1);
	resp_set_deferred_len(&f.w, h2, '~', 1);
	ck_assert_buf(&f.buf, "*2\r\n$1\r\nk\r\n:1\r\n*1\r\n$1\r\nm\r\n");
	resp_buf_finish(&f.buf);

	wfix_init(&f, 3);
	h1 = resp_add_deferred(&f.w);
	resp_add_bulk(&f.w, "k", 1);
	resp_add_int(&f.w, 1);
	resp_set_deferred_len(&f.w, h1, '%', 1);
	h2 = resp_add_deferred(&f.w);
	resp_add_bulk(&f.w, "m", 1);
	resp_set_deferred_len(&f.w, h2, '~', 1);
	ck_assert_buf(&f.buf, "%1\r\n$1\r\nk\r\n:1\r\n~1\r\n$1\r\nm\r\n");
	resp_buf_finish(&f.buf);
}
END_TEST

/* ---- main -------------------------------------------------------------- */

static TCase *
tcase(Suite *s, const char *name)
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_set_timeout(tc, 120);
	suite_add_tcase(s, tc);
	return tc;
}

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

static Suite *
reader_suite(void)
{
	Suite *s = suite_create("resp_reader");

	tcase_add_loop_test(
		tcase(s, "valid input, any split"), test_valid_splits, 0, NELEM(valid_cases));
	tcase_add_test(tcase(s, "pipelined requests"), test_pipeline_many);
	tcase_add_test(tcase(s, "steady pipeline, bounded buffer"), test_pipeline_steady);
	tcase_add_test(tcase(s, "big argument, any split"), test_big_arg_splits);
	tcase_add_test(tcase(s, "big argument lands in place"), test_big_arg_lands_in_place);
	tcase_add_test(tcase(s, "big argument claimed, not sent"), test_big_arg_claim);
	tcase_add_loop_test(
		tcase(s, "protocol errors, any split"), test_error_splits, 0, NELEM(error_cases));
	tcase_add_test(tcase(s, "failed stays failed"), test_failed_stays_failed);
	tcase_add_test(tcase(s, "inline length limit"), test_limit_inline_len);
	tcase_add_test(tcase(s, "inline length default"), test_limit_inline_default);
	tcase_add_test(tcase(s, "mbulk count line limit"), test_limit_mbulk_count_string);
	tcase_add_test(tcase(s, "bulk count line limit"), test_limit_bulk_count_string);
	tcase_add_test(tcase(s, "bulk length limit"), test_limit_bulk_len);
	tcase_add_test(tcase(s, "multibulk length limit"), test_limit_multibulk_len);
	tcase_add_test(tcase(s, "query buffer limit"), test_limit_query_buf);
	tcase_add_test(tcase(s, "limits change between requests"), test_set_limits_next_request);
	tcase_add_test(tcase(s, "lifecycle"), test_reader_lifecycle);
	tcase_add_test(tcase(s, "allocation failure"), test_reader_alloc_failure);
	return s;
}

static Suite *
writer_suite(void)
{
	Suite *s = suite_create("resp_writer");

	tcase_add_test(tcase(s, "buffer basics"), test_buf_basics);
	tcase_add_test(tcase(s, "buffer growth"), test_buf_growth);
	tcase_add_test(tcase(s, "buffer out of memory"), test_buf_oom);
	tcase_add_test(tcase(s, "buffer limit"), test_buf_limit);
	tcase_add_test(tcase(s, "buffer printf"), test_buf_printf);
	tcase_add_test(tcase(s, "allocation failure"), test_writer_alloc_failure);
	tcase_add_loop_test(tcase(s, "simple and error"), test_write_simple_error, 2, 4);
	tcase_add_test(tcase(s, "long formatted error"), test_write_errorf_long);
	tcase_add_test(tcase(s, "integer"), test_write_int);
	tcase_add_loop_test(tcase(s, "bulk"), test_write_bulk, 2, 4);
	tcase_add_test(tcase(s, "null"), test_write_null);
	tcase_add_test(tcase(s, "aggregates"), test_write_aggregates);
	tcase_add_test(tcase(s, "bool"), test_write_bool);
	tcase_add_test(tcase(s, "double"), test_write_double);
	tcase_add_test(tcase(s, "double round trip"), test_write_double_roundtrip);
	tcase_add_test(tcase(s, "verbatim"), test_write_verbatim);
	tcase_add_test(tcase(s, "deferred length"), test_write_deferred);
	tcase_add_test(tcase(s, "deferred map and set"), test_write_deferred_kinds);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(reader_suite());
	int failed;

	srunner_add_suite(sr, writer_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? 0 : 1;
}
