/* test_resp_reply.c - unit tests for the RESP2/RESP3 reply parser.
 *
 * A parsed tree is compared as a one-line dump (see dump()). Every valid
 * input is also cut at every byte: each proper prefix must ask for more
 * (-EAGAIN) and never fail or succeed early; every invalid input must
 * fail once complete, and no prefix of it may parse.
 *
 * Test scaffolding allocates with libc, not echd_malloc, so that
 * echd_alloc_fail_at() counts only the allocations of the code under test.
 */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "echd.h"
#include "resp.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* ---- dumping a tree ----------------------------------------------------- */

struct dbuf {
	char s[8192];
	size_t len;
};

static void dput(struct dbuf *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
dput(struct dbuf *d, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(d->s + d->len, sizeof(d->s) - d->len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(d->s) - d->len) {
		ck_abort_msg("dump overflow");
	}
	d->len += (size_t)n;
}

static void
dquoted(struct dbuf *d, const char *p, size_t n)
{
	dput(d, "\"");
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
			dput(d, "\\x%02x", c);
		} else {
			dput(d, "%c", c);
		}
	}
	dput(d, "\"");
}

static void dump(struct dbuf *d, const struct resp_reply *r);

static void
dump_elems(struct dbuf *d, const struct resp_reply *r, const char *open, const char *close)
{
	dput(d, "%s", open);
	for (size_t i = 0; i < r->elements; i++) {
		if (i > 0) {
			dput(d, r->type == RESP_REPLY_MAP && i % 2 == 1 ? ": " : ", ");
		}
		dump(d, r->element[i]);
	}
	dput(d, "%s", close);
}

static void
dump(struct dbuf *d, const struct resp_reply *r)
{
	if (r->attr != NULL) {
		dput(d, "|");
		dump(d, r->attr);
	}
	switch (r->type) {
	case RESP_REPLY_STRING:
		dput(d, "s");
		dquoted(d, r->str, r->len);
		break;
	case RESP_REPLY_ERROR:
		dput(d, "e");
		dquoted(d, r->str, r->len);
		break;
	case RESP_REPLY_INTEGER:
		dput(d, "i%lld", r->integer);
		break;
	case RESP_REPLY_BULK:
		dput(d, "b");
		dquoted(d, r->str, r->len);
		break;
	case RESP_REPLY_NULL:
		dput(d, "nil");
		break;
	case RESP_REPLY_ARRAY:
		dump_elems(d, r, "[", "]");
		break;
	case RESP_REPLY_MAP:
		dump_elems(d, r, "{", "}");
		break;
	case RESP_REPLY_SET:
		dump_elems(d, r, "~[", "]");
		break;
	case RESP_REPLY_PUSH:
		dump_elems(d, r, ">[", "]");
		break;
	case RESP_REPLY_DOUBLE:
		dput(d, "d%s=%.17g", r->str, r->dval);
		break;
	case RESP_REPLY_BOOL:
		dput(d, "#%s", r->integer ? "t" : "f");
		break;
	case RESP_REPLY_BIGNUM:
		dput(d, "(%s", r->str);
		break;
	case RESP_REPLY_VERBATIM:
		dput(d, "=%s:", r->fmt);
		dquoted(d, r->str, r->len);
		break;
	}
	/* the tree's own invariants */
	switch (r->type) {
	case RESP_REPLY_STRING:
	case RESP_REPLY_ERROR:
	case RESP_REPLY_BULK:
	case RESP_REPLY_DOUBLE:
	case RESP_REPLY_BIGNUM:
	case RESP_REPLY_VERBATIM:
		ck_assert_ptr_nonnull(r->str);
		ck_assert_int_eq(r->str[r->len], '\0');
		ck_assert_uint_eq(r->elements, 0);
		break;
	case RESP_REPLY_MAP:
		ck_assert_uint_eq(r->elements % 2, 0);
		__attribute__((fallthrough));
	case RESP_REPLY_ARRAY:
	case RESP_REPLY_SET:
	case RESP_REPLY_PUSH:
		ck_assert_ptr_null(r->str);
		ck_assert(r->elements == 0 || r->element != NULL);
		break;
	default:
		ck_assert_ptr_null(r->str);
		ck_assert_uint_eq(r->elements, 0);
		break;
	}
}

/* ---- cases -------------------------------------------------------------- */

struct vcase {
	const char *in;
	size_t len; /* 0: strlen(in) */
	const char *want;
};

#define V(in, want)                                                                                \
	{                                                                                          \
		in, sizeof(in) - 1, want                                                           \
	}

static const struct vcase valid_cases[] = {
	/* RESP2 */
	V("+OK\r\n", "s\"OK\""),
	V("+\r\n", "s\"\""),
	V("+hello world\r\n", "s\"hello world\""),
	V("-ERR unknown command 'FOO'\r\n", "e\"ERR unknown command 'FOO'\""),
	V("-\r\n", "e\"\""),
	V(":0\r\n", "i0"),
	V(":-1\r\n", "i-1"),
	V(":9223372036854775807\r\n", "i9223372036854775807"),
	V(":-9223372036854775808\r\n", "i-9223372036854775808"),
	V("$5\r\nhello\r\n", "b\"hello\""),
	V("$0\r\n\r\n", "b\"\""),
	V("$-1\r\n", "nil"),
	V("$6\r\na\r\nb\0c\r\n", "b\"a\\x0d\\x0ab\\x00c\""),
	V("*0\r\n", "[]"),
	V("*-1\r\n", "nil"),
	V("*2\r\n$1\r\na\r\n:1\r\n", "[b\"a\", i1]"),
	V("*3\r\n$-1\r\n*-1\r\n+x\r\n", "[nil, nil, s\"x\"]"),
	V("*2\r\n*2\r\n:1\r\n:2\r\n*1\r\n*0\r\n", "[[i1, i2], [[]]]"),
	V("*1\r\n-WRONGTYPE x\r\n", "[e\"WRONGTYPE x\"]"),
	/* RESP3 */
	V("_\r\n", "nil"),
	V(",1.5\r\n", "d1.5=1.5"),
	V(",-0\r\n", "d-0=-0"),
	V(",inf\r\n", "dinf=inf"),
	V(",-inf\r\n", "d-inf=-inf"),
	V(",1.5e-7\r\n", "d1.5e-7=1.4999999999999999e-07"),
	V(",10\r\n", "d10=10"),
	V("#t\r\n", "#t"),
	V("#f\r\n", "#f"),
	V("(3492890328409238509324850943850943825024385\r\n",
		"(3492890328409238509324850943850943825024385"),
	V("(-1\r\n", "(-1"),
	V("=15\r\ntxt:Some string\r\n", "=txt:\"Some string\""),
	V("=4\r\nmkd:\r\n", "=mkd:\"\""),
	V("!21\r\nSYNTAX invalid syntax\r\n", "e\"SYNTAX invalid syntax\""),
	V("!0\r\n\r\n", "e\"\""),
	V("%0\r\n", "{}"),
	V("%2\r\n+first\r\n:1\r\n+second\r\n:2\r\n", "{s\"first\": i1, s\"second\": i2}"),
	V("~3\r\n:1\r\n:2\r\n:3\r\n", "~[i1, i2, i3]"),
	V("~0\r\n", "~[]"),
	V(">3\r\n+message\r\n+chan\r\n$3\r\nmsg\r\n", ">[s\"message\", s\"chan\", b\"msg\"]"),
	V("|1\r\n+ttl\r\n:3600\r\n+OK\r\n", "|{s\"ttl\": i3600}s\"OK\""),
	V("*2\r\n|1\r\n+a\r\n#t\r\n:1\r\n:2\r\n", "[|{s\"a\": #t}i1, i2]"),
	V("|1\r\n+a\r\n:1\r\n|1\r\n+b\r\n:2\r\n_\r\n", "|{s\"b\": i2}nil"),
	/* streamed */
	V("$?\r\n;4\r\nHell\r\n;5\r\no wor\r\n;1\r\nd\r\n;0\r\n", "b\"Hello word\""),
	V("$?\r\n;0\r\n", "b\"\""),
	V("*?\r\n:1\r\n:2\r\n.\r\n", "[i1, i2]"),
	V("*?\r\n.\r\n", "[]"),
	V("%?\r\n+a\r\n:1\r\n+b\r\n:2\r\n.\r\n", "{s\"a\": i1, s\"b\": i2}"),
	V("~?\r\n*?\r\n:1\r\n.\r\n$?\r\n;1\r\nx\r\n;0\r\n.\r\n", "~[[i1], b\"x\"]"),
	V(">?\r\n+p\r\n.\r\n", ">[s\"p\"]"),
	/* nesting of every aggregate */
	V("%1\r\n*2\r\n~1\r\n#f\r\n>1\r\n_\r\n%1\r\n(1\r\n=5\r\ntxt:x\r\n",
		"{[~[#f], >[nil]]: {(1: =txt:\"x\"}}"),
	V("*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:8\r\n", "[[[[[[[[i8]]]]]]]]"),
	/* XPENDING summary and XINFO CONSUMERS as echd sends them */
	V("*4\r\n:2\r\n$3\r\n1-1\r\n$3\r\n2-1\r\n*1\r\n*2\r\n$2\r\nc1\r\n$1\r\n2\r\n",
		"[i2, b\"1-1\", b\"2-1\", [[b\"c1\", b\"2\"]]]"),
	V("*1\r\n%2\r\n$4\r\nname\r\n$2\r\nc1\r\n$4\r\nidle\r\n:5\r\n",
		"[{b\"name\": b\"c1\", b\"idle\": i5}]"),
};

struct ecase {
	const char *in;
	size_t len;
	const char *why;
};

#define E(in, why)                                                                                 \
	{                                                                                          \
		in, sizeof(in) - 1, why                                                            \
	}

static const struct ecase error_cases[] = {
	E("?\r\n", "unknown type byte"),
	E("\0\r\n", "NUL type byte"),
	E(".\r\n", "end marker outside a streamed aggregate"),
	E(";3\r\nabc\r\n", "chunk outside a streamed string"),
	E("+OK\rX", "CR without LF"),
	E("+O\nK\r\n", "bare LF in a line"),
	E(":\r\n", "empty integer"),
	E(":-\r\n", "sign only"),
	E(":+1\r\n", "plus sign"),
	E(":1.5\r\n", "integer with a dot"),
	E(":9223372036854775808\r\n", "integer overflow"),
	E(":-9223372036854775809\r\n", "integer underflow"),
	E("$abc\r\n", "bad bulk length"),
	E("$-2\r\n", "negative bulk length"),
	E("$3\r\nabcXY", "bulk not followed by CRLF"),
	E("$3\r\nabc\rX", "bulk followed by CR and garbage"),
	E("*x\r\n", "bad array length"),
	E("*-2\r\n", "negative array length"),
	E("%-1\r\n", "null map"),
	E("~-1\r\n", "null set"),
	E("*2\r\n:1\r\n?\r\n", "bad element"),
	E("_x\r\n", "null with text"),
	E("#x\r\n", "bool neither t nor f"),
	E("#tt\r\n", "bool too long"),
	E(",\r\n", "empty double"),
	E(",abc\r\n", "double letters"),
	E(",0x10\r\n", "hex double"),
	E(",1.5.5\r\n", "double two dots"),
	E(",infinity\r\n", "double spelled out"),
	E("(\r\n", "empty bignum"),
	E("(12a\r\n", "bignum letter"),
	E("(-\r\n", "bignum sign only"),
	E("=3\r\ntxt\r\n", "verbatim shorter than its format"),
	E("=5\r\ntxtxy\r\n", "verbatim without colon"),
	E("!-1\r\n", "null blob error"),
	E("=-1\r\n", "null verbatim"),
	E("$?\r\n;x\r\n", "bad chunk length"),
	E("$?\r\n+OK\r\n", "not a chunk"),
	E("$?\r\n;2\r\nabc\r\n", "chunk longer than said"),
	E("*?\r\n:1\r\n.x\r\n", "end marker with text"),
	E("%?\r\n:1\r\n.\r\n", "streamed map of odd length"),
	E("|?\r\n", "streamed attribute"),
	E("|1\r\n+a\r\n?\r\n", "bad attribute value"),
	E("*1\r\n|1\r\n+a\r\n:1\r\n.\r\n", "attribute before an end marker"),
};

/* ---- helpers ------------------------------------------------------------ */

static int
parse_copy(const char *in, size_t len, size_t *consumed, struct resp_reply **out)
{
	/* a heap copy of exactly len bytes, so ASan sees any read past it */
	char *buf = malloc(len ? len : 1);
	int rc;

	memcpy(buf, in, len);
	rc = resp_reply_parse(buf, len, NULL, consumed, out);
	free(buf);
	return rc;
}

/* A literal without NULs. */
static int
plit(const char *s, const struct resp_reply_limits *lim, size_t *consumed, struct resp_reply **out)
{
	return resp_reply_parse(s, strlen(s), lim, consumed, out);
}

static void
assert_dump(const struct resp_reply *r, const char *want)
{
	struct dbuf d = {.len = 0};

	dump(&d, r);
	ck_assert_str_eq(d.s, want);
}

/* ---- tests -------------------------------------------------------------- */

START_TEST(test_valid_whole)
{
	const struct vcase *c = &valid_cases[_i];
	struct resp_reply *r = NULL;
	size_t consumed = 0;

	ck_assert_int_eq(parse_copy(c->in, c->len, &consumed, &r), 0);
	ck_assert_uint_eq(consumed, c->len);
	assert_dump(r, c->want);
	resp_reply_free(r);
}
END_TEST

START_TEST(test_valid_every_split)
{
	const struct vcase *c = &valid_cases[_i];

	for (size_t cut = 0; cut < c->len; cut++) {
		struct resp_reply *r = NULL;
		size_t consumed = 12345;
		int rc = parse_copy(c->in, cut, &consumed, &r);

		ck_assert_msg(rc == -EAGAIN, "case %s cut at %zu: rc %d", c->want, cut, rc);
		ck_assert_ptr_null(r);
		ck_assert_uint_eq(consumed, 12345);
	}
}
END_TEST

START_TEST(test_valid_then_more)
{
	const struct vcase *c = &valid_cases[_i];
	static const char tail[] = "+next\r\n:7";
	size_t len = c->len + sizeof(tail) - 1, consumed;
	char *buf = malloc(len);
	struct resp_reply *r;

	memcpy(buf, c->in, c->len);
	memcpy(buf + c->len, tail, sizeof(tail) - 1);
	ck_assert_int_eq(resp_reply_parse(buf, len, NULL, &consumed, &r), 0);
	ck_assert_uint_eq(consumed, c->len);
	assert_dump(r, c->want);
	resp_reply_free(r);
	ck_assert_int_eq(resp_reply_parse(buf + consumed, len - consumed, NULL, &consumed, &r), 0);
	assert_dump(r, "s\"next\"");
	resp_reply_free(r);
	free(buf);
}
END_TEST

START_TEST(test_error_cases)
{
	const struct ecase *c = &error_cases[_i];
	struct resp_reply *r = NULL;
	size_t consumed = 0;
	bool failed = false;

	ck_assert_msg(parse_copy(c->in, c->len, &consumed, &r) == ECHD_EPROTO, "%s", c->why);
	ck_assert_ptr_null(r);
	/* each prefix asks for more or fails; once failed, longer ones fail too */
	for (size_t cut = 0; cut < c->len; cut++) {
		int rc = parse_copy(c->in, cut, &consumed, &r);
		ck_assert_msg(
			rc == -EAGAIN || rc == ECHD_EPROTO, "%s: cut %zu rc %d", c->why, cut, rc);
		ck_assert_msg(!(failed && rc == -EAGAIN), "%s: cut %zu asks for more after failing",
			c->why, cut);
		failed = rc == ECHD_EPROTO;
	}
}
END_TEST

START_TEST(test_pipelined)
{
	static const char in[] = "+OK\r\n:1\r\n$2\r\nab\r\n*1\r\n_\r\n%1\r\n#t\r\n#f\r\n";
	static const char *const want[] = {
		"s\"OK\"",
		"i1",
		"b\"ab\"",
		"[nil]",
		"{#t: #f}",
	};
	size_t pos = 0, len = sizeof(in) - 1;

	for (size_t i = 0; i < NELEM(want); i++) {
		struct resp_reply *r;
		size_t consumed;
		ck_assert_int_eq(resp_reply_parse(in + pos, len - pos, NULL, &consumed, &r), 0);
		assert_dump(r, want[i]);
		resp_reply_free(r);
		pos += consumed;
	}
	ck_assert_uint_eq(pos, len);
	{
		struct resp_reply *r;
		size_t consumed;
		ck_assert_int_eq(resp_reply_parse(in + pos, 0, NULL, &consumed, &r), -EAGAIN);
	}
}
END_TEST

START_TEST(test_big_reply)
{
	/* an XPENDING-like page: 10000 rows, built then cut at many places */
	size_t n = 10000, cap = n * 64 + 32, len = 0, consumed;
	char *buf = malloc(cap);
	struct resp_reply *r;

	len += (size_t)sprintf(buf + len, "*%zu\r\n", n);
	for (size_t i = 0; i < n; i++) {
		char id[32];
		int l = sprintf(id, "%zu-1", i + 1);
		len += (size_t)sprintf(
			buf + len, "*4\r\n$%d\r\n%s\r\n$2\r\nc1\r\n:%zu\r\n:1\r\n", l, id, i);
	}
	ck_assert_int_eq(resp_reply_parse(buf, len, NULL, &consumed, &r), 0);
	ck_assert_uint_eq(consumed, len);
	ck_assert_int_eq(r->type, RESP_REPLY_ARRAY);
	ck_assert_uint_eq(r->elements, n);
	for (size_t i = 0; i < n; i++) {
		const struct resp_reply *row = r->element[i];
		char id[32];
		sprintf(id, "%zu-1", i + 1);
		ck_assert_uint_eq(row->elements, 4);
		ck_assert_str_eq(row->element[0]->str, id);
		ck_assert_int_eq(row->element[2]->integer, (long long)i);
	}
	resp_reply_free(r);
	for (size_t cut = 0; cut < len; cut += 997) {
		r = NULL;
		ck_assert_int_eq(resp_reply_parse(buf, cut, NULL, &consumed, &r), -EAGAIN);
	}
	free(buf);
}
END_TEST

START_TEST(test_limit_depth)
{
	struct resp_reply_limits lim;
	char buf[256];
	size_t len = 0, consumed;
	struct resp_reply *r;

	resp_reply_limits_default(&lim);
	lim.max_depth = 4;
	for (int i = 0; i < 4; i++) {
		len += (size_t)sprintf(buf + len, "*1\r\n");
	}
	len += (size_t)sprintf(buf + len, ":1\r\n");
	ck_assert_int_eq(resp_reply_parse(buf, len, &lim, &consumed, &r), 0);
	assert_dump(r, "[[[[i1]]]]");
	resp_reply_free(r);
	/* one more level, and the same through maps, sets and streamed arrays */
	ck_assert_int_eq(
		plit("*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", &lim, &consumed, &r), ECHD_EPROTO);
	ck_assert_int_eq(plit("%1\r\n:1\r\n~1\r\n>1\r\n*?\r\n*0\r\n.\r\n", &lim, &consumed, &r),
		ECHD_EPROTO);
	/* refused before the rest arrives */
	ck_assert_int_eq(plit("*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n", &lim, &consumed, &r), ECHD_EPROTO);
	/* the default stops a deep bomb */
	{
		size_t deep = 100000;
		char *b = malloc(deep * 4 + 4);
		for (size_t i = 0; i < deep; i++) {
			memcpy(b + i * 4, "*1\r\n", 4);
		}
		memcpy(b + deep * 4, ":1\r\n", 4);
		ck_assert_int_eq(
			resp_reply_parse(b, deep * 4 + 4, NULL, &consumed, &r), ECHD_EPROTO);
		free(b);
	}
}
END_TEST

START_TEST(test_limit_sizes)
{
	struct resp_reply_limits lim;
	size_t consumed;
	struct resp_reply *r;

	resp_reply_limits_default(&lim);
	lim.max_bulk_len = 3;
	lim.max_elements = 2;
	lim.max_line_len = 8;
	ck_assert_int_eq(plit("$3\r\nabc\r\n", &lim, &consumed, &r), 0);
	resp_reply_free(r);
	ck_assert_int_eq(plit("$4\r\n", &lim, &consumed, &r), ECHD_EPROTO);
	ck_assert_int_eq(plit("!4\r\n", &lim, &consumed, &r), ECHD_EPROTO);
	ck_assert_int_eq(
		plit("$?\r\n;2\r\nab\r\n;2\r\nab\r\n;0\r\n", &lim, &consumed, &r), ECHD_EPROTO);
	ck_assert_int_eq(plit("*2\r\n:1\r\n:2\r\n", &lim, &consumed, &r), 0);
	resp_reply_free(r);
	ck_assert_int_eq(plit("*3\r\n", &lim, &consumed, &r), ECHD_EPROTO);
	ck_assert_int_eq(plit("%2\r\n", &lim, &consumed, &r), ECHD_EPROTO);
	ck_assert_int_eq(plit("*?\r\n:1\r\n:2\r\n:3\r\n.\r\n", &lim, &consumed, &r), ECHD_EPROTO);
	ck_assert_int_eq(plit("+12345678\r\n", &lim, &consumed, &r), 0);
	resp_reply_free(r);
	ck_assert_int_eq(plit("+123456789\r\n", &lim, &consumed, &r), ECHD_EPROTO);
	/* a line that cannot end within the limit fails before its CR arrives */
	ck_assert_int_eq(plit("+123456789", &lim, &consumed, &r), ECHD_EPROTO);
	ck_assert_int_eq(plit("+12345678", &lim, &consumed, &r), -EAGAIN);
	/* huge counts are refused, not allocated */
	ck_assert_int_eq(plit("*99999999999999999999\r\n", NULL, &consumed, &r), ECHD_EPROTO);
	ck_assert_int_eq(plit("*2147483647\r\n:1\r\n", NULL, &consumed, &r), -EAGAIN);
}
END_TEST

START_TEST(test_values)
{
	size_t consumed;
	struct resp_reply *r;

	ck_assert_int_eq(plit(",nan\r\n", NULL, &consumed, &r), 0);
	ck_assert_int_eq(r->type, RESP_REPLY_DOUBLE);
	ck_assert(isnan(r->dval));
	resp_reply_free(r);
	ck_assert_int_eq(plit(",-1.25E+2\r\n", NULL, &consumed, &r), 0);
	ck_assert(r->dval == -125.0);
	resp_reply_free(r);
	ck_assert_int_eq(plit("=8\r\nmkd:# hi\r\n", NULL, &consumed, &r), 0);
	ck_assert_str_eq(r->fmt, "mkd");
	ck_assert_uint_eq(r->len, 4);
	ck_assert_str_eq(r->str, "# hi");
	resp_reply_free(r);
	ck_assert_int_eq(plit("#t\r\n", NULL, &consumed, &r), 0);
	ck_assert_int_eq(r->type, RESP_REPLY_BOOL);
	ck_assert_int_eq(r->integer, 1);
	resp_reply_free(r);
	ck_assert_str_eq(resp_reply_type_name(RESP_REPLY_MAP), "map");
	ck_assert_str_eq(resp_reply_type_name(RESP_REPLY_VERBATIM), "verbatim");
	ck_assert_str_eq(resp_reply_type_name((enum resp_reply_type)99), "unknown");
	resp_reply_free(NULL);
}
END_TEST

START_TEST(test_alloc_failure)
{
	static const char in[] = "*2\r\n%1\r\n+k\r\n$1\r\nv\r\n|1\r\n+a\r\n:1\r\n~1\r\n,2.5\r\n";
	size_t consumed;
	struct resp_reply *r = NULL;

	/* one allocation per reply, whatever its size */
	echd_alloc_fail_at(1);
	ck_assert_int_eq(resp_reply_parse(in, sizeof(in) - 1, NULL, &consumed, &r), -ENOMEM);
	ck_assert_ptr_null(r);
	echd_alloc_fail_at(2);
	ck_assert_int_eq(resp_reply_parse(in, sizeof(in) - 1, NULL, &consumed, &r), 0);
	echd_alloc_fail_at(0);
	assert_dump(r, "[{s\"k\": b\"v\"}, |{s\"a\": i1}~[d2.5=2.5]]");
	resp_reply_free(r);
	/* incomplete or bad input allocates nothing */
	echd_alloc_fail_at(1);
	ck_assert_int_eq(resp_reply_parse(in, 10, NULL, &consumed, &r), -EAGAIN);
	ck_assert_int_eq(plit("?", NULL, &consumed, &r), ECHD_EPROTO);
	ck_assert_int_eq(resp_reply_parse(in, sizeof(in) - 1, NULL, &consumed, &r), -ENOMEM);
	echd_alloc_fail_at(0);
}
END_TEST

/* ---- suite -------------------------------------------------------------- */

static TCase *
tcase(Suite *s, const char *name)
{
	TCase *tc = tcase_create(name);

	suite_add_tcase(s, tc);
	return tc;
}

static Suite *
reply_suite(void)
{
	Suite *s = suite_create("resp_reply");

	tcase_add_loop_test(tcase(s, "valid, whole"), test_valid_whole, 0, NELEM(valid_cases));
	tcase_add_loop_test(
		tcase(s, "valid, every split"), test_valid_every_split, 0, NELEM(valid_cases));
	tcase_add_loop_test(
		tcase(s, "valid, then more"), test_valid_then_more, 0, NELEM(valid_cases));
	tcase_add_loop_test(tcase(s, "errors"), test_error_cases, 0, NELEM(error_cases));
	tcase_add_test(tcase(s, "pipelined replies"), test_pipelined);
	tcase_add_test(tcase(s, "big reply"), test_big_reply);
	tcase_add_test(tcase(s, "depth limit"), test_limit_depth);
	tcase_add_test(tcase(s, "size limits"), test_limit_sizes);
	tcase_add_test(tcase(s, "values"), test_values);
	tcase_add_test(tcase(s, "allocation failure"), test_alloc_failure);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(reply_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? 0 : 1;
}
