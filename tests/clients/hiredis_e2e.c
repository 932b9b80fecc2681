/* hiredis_e2e.c - echd through the real hiredis client library, end to end.
 *
 *   hiredis-e2e PORT TEST
 *
 * Connects to 127.0.0.1:PORT and runs one named test with Debian's hiredis 0.14:
 *   basics    PING, ECHO, XADD (auto and explicit ids), XLEN, XRANGE, XREVRANGE, XDEL,
 *             XTRIM, TYPE, EXISTS, XADD NOMKSTREAM, SELECT
 *   binary    fields and values with NUL, CR LF and high bytes through "%b", a 1 MiB value
 *   pipeline  2000 pipelined XADDs and an XLEN; MULTI/XADD/XLEN/EXEC pipelined
 *   groups    XGROUP, XREADGROUP, XPENDING (both forms), XACK, XCLAIM, XAUTOCLAIM, XINFO
 *   blocking  XREAD BLOCK and XREADGROUP BLOCK timing out and woken by a second client
 *   async     the async API on libevent: a blocked XREADGROUP woken by another context
 *   errors    error replies, after each of which the connection keeps working
 * so that hiredis programs are shown to work unchanged; tests/integration/19-clients.py
 * runs every test against echd and against redis-server, which keeps the expectations
 * honest. Each test DELs its own keys first ("hiredis:TEST...").
 *
 * Exit 0 when every check passed; 1 at the first failed check, after printing
 *   hiredis-e2e: TEST: FILE:LINE: what was expected, what came
 * to stderr; 2 on a usage error.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HOST      "127.0.0.1"
#define SHOW_DATA 40  /* bytes of a bulk string a message shows */
#define SHOW_TEXT 160 /* of a status, an error or an expected string */

static const char *test_name = "?";
static int port;
static bool failed;              /* a check failed: only the first one is reported */
static const char *cur_cmd = ""; /* format of the command whose reply is checked */
static char why[2048];           /* what the last failed predicate expected and got */

/* ---------------------------------------------------------------- reporting */

static const char *
src_name(void)
{
	const char *s = strrchr(__FILE__, '/');
	return s != NULL ? s + 1 : __FILE__;
}

__attribute__((format(printf, 2, 3))) static void
fail(int line, const char *fmt, ...)
{
	va_list ap;

	if (failed) {
		return;
	}
	failed = true;
	fprintf(stderr, "hiredis-e2e: %s: %s:%d: ", test_name, src_name(), line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* Reports and leaves through the function's out: label when cond is false. */
#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fail(__LINE__, __VA_ARGS__);                                               \
			goto out;                                                                  \
		}                                                                                  \
	} while (0)

/* The predicates below leave what they expected and what came in why. */
#define EXPECT_(pred, r)            CHECK((pred), "%s: %s: %s", cur_cmd, #r, why)
#define EXPECT_STATUS(r, s)         EXPECT_(is_status((r), (s)), r)
#define EXPECT_STR(r, s)            EXPECT_(is_str((r), (s)), r)
#define EXPECT_BIN(r, p, n)         EXPECT_(is_bin((r), (p), (n)), r)
#define EXPECT_INT(r, n)            EXPECT_(is_int((r), (n)), r)
#define EXPECT_NIL(r)               EXPECT_(is_nil(r), r)
#define EXPECT_ARRAY(r, n)          EXPECT_(is_array((r), (n)), r)
#define EXPECT_ERROR(r, s)          EXPECT_(is_error((r), (s), false), r)
#define EXPECT_ERROR_PREFIX(r, s)   EXPECT_(is_error((r), (s), true), r)
#define EXPECT_ID(r, ms, seq)       EXPECT_(is_id((r), (ms), (seq)), r)
#define EXPECT_STREAM(r, key, n)    EXPECT_(is_stream_reply((r), (key), (n)), r)
#define EXPECT_INT_RANGE(r, lo, hi) EXPECT_(is_int_range((r), (lo), (hi)), r)
/* An entry [id, [field, value, ...]] with exactly the strings given. */
#define EXPECT_ENTRY(e, id, ...)                                                                   \
	EXPECT_(is_entry((e), (id), (const char *const[]){__VA_ARGS__},                            \
			sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *)),        \
		e)

#define FIRST(...)     FIRST_(__VA_ARGS__, 0)
#define FIRST_(a, ...) a

/* Runs one command on c with redisCommand into the test's local r, freeing the previous
 * reply. No reply means the connection failed; hiredis then leaves c unusable. */
#define CMD(c, ...)                                                                                \
	do {                                                                                       \
		freeReplyObject(r);                                                                \
		cur_cmd = FIRST(__VA_ARGS__);                                                      \
		r = redisCommand((c), __VA_ARGS__);                                                \
		CHECK(r != NULL, "%s: no reply: %s", cur_cmd, (c)->errstr);                        \
	} while (0)

/* Reads the next pipelined reply into r (cur_cmd is set by the caller). */
#define GET_REPLY(c)                                                                               \
	do {                                                                                       \
		void *reply_ = NULL;                                                               \
		freeReplyObject(r);                                                                \
		r = NULL;                                                                          \
		CHECK(redisGetReply((c), &reply_) == REDIS_OK && reply_ != NULL,                   \
			"%s: no reply: %s", cur_cmd, (c)->errstr);                                 \
		r = reply_;                                                                        \
	} while (0)

/* Writes a quoted copy of the first max bytes of p, escaping what is not printable ASCII. */
static void
quote(char *out, size_t size, const char *p, size_t n, size_t max)
{
	size_t shown = n < max ? n : max, o = 1, i;

	out[0] = '"';
	for (i = 0; i < shown && o + 8 < size; i++) {
		unsigned char ch = (unsigned char)p[i];

		if (ch == '"' || ch == '\\') {
			o += (size_t)snprintf(out + o, size - o, "\\%c", ch);
		} else if (ch >= 0x20 && ch < 0x7f) {
			out[o++] = (char)ch;
		} else {
			o += (size_t)snprintf(out + o, size - o, "\\x%02x", ch);
		}
	}
	snprintf(out + o, size - o, "\"%s", i < n ? "..." : "");
}

static const char *
describe(const redisReply *r)
{
	static char buf[720];
	char q[660];

	if (r == NULL) {
		return "nothing (not an array, or no element there)";
	}
	switch (r->type) {
	case REDIS_REPLY_STRING:
		quote(q, sizeof(q), r->str, r->len, SHOW_DATA);
		snprintf(buf, sizeof(buf), "STRING %s (%zu bytes)", q, r->len);
		break;
	case REDIS_REPLY_STATUS:
		quote(q, sizeof(q), r->str, r->len, SHOW_TEXT);
		snprintf(buf, sizeof(buf), "STATUS %s", q);
		break;
	case REDIS_REPLY_ERROR:
		quote(q, sizeof(q), r->str, r->len, SHOW_TEXT);
		snprintf(buf, sizeof(buf), "ERROR %s", q);
		break;
	case REDIS_REPLY_INTEGER:
		snprintf(buf, sizeof(buf), "INTEGER %lld", r->integer);
		break;
	case REDIS_REPLY_NIL:
		snprintf(buf, sizeof(buf), "NIL");
		break;
	case REDIS_REPLY_ARRAY:
		snprintf(buf, sizeof(buf), "ARRAY of %zu", r->elements);
		break;
	default:
		snprintf(buf, sizeof(buf), "reply of type %d", r->type);
		break;
	}
	return buf;
}

__attribute__((format(printf, 2, 3))) static void
set_why(const redisReply *got, const char *fmt, ...)
{
	char want[720];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(want, sizeof(want), fmt, ap);
	va_end(ap);
	snprintf(why, sizeof(why), "expected %s, got %s", want, describe(got));
}

/* Puts "PREFIX: " before why, to say where inside a nested reply it went wrong. */
__attribute__((format(printf, 1, 2))) static void
prefix_why(const char *fmt, ...)
{
	char pre[64];
	size_t pl, wl;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(pre, sizeof(pre), fmt, ap);
	va_end(ap);
	pl = strlen(pre);
	wl = strlen(why);
	if (pl + 2 + wl >= sizeof(why)) {
		wl = sizeof(why) - pl - 3;
	}
	memmove(why + pl + 2, why, wl);
	memcpy(why, pre, pl);
	why[pl] = ':';
	why[pl + 1] = ' ';
	why[pl + 2 + wl] = '\0';
}

/* ---------------------------------------------------------------- predicates */

/* Element i of an array reply, or NULL (which every predicate rejects). */
static const redisReply *
el(const redisReply *r, size_t i)
{
	if (r == NULL || r->type != REDIS_REPLY_ARRAY || i >= r->elements) {
		return NULL;
	}
	return r->element[i];
}

/* A reply of type (STATUS or STRING, named label) whose text is s. */
static bool
is_text(const redisReply *r, int type, const char *label, const char *s)
{
	char q[660];

	if (r != NULL && r->type == type && r->len == strlen(s) && memcmp(r->str, s, r->len) == 0) {
		return true;
	}
	quote(q, sizeof(q), s, strlen(s), SHOW_TEXT);
	set_why(r, "%s %s", label, q);
	return false;
}

static bool
is_status(const redisReply *r, const char *s)
{
	return is_text(r, REDIS_REPLY_STATUS, "STATUS", s);
}

static bool
is_str(const redisReply *r, const char *s)
{
	return is_text(r, REDIS_REPLY_STRING, "STRING", s);
}

/* A bulk string byte-identical to the n bytes at p. */
static bool
is_bin(const redisReply *r, const void *p, size_t n)
{
	char q[200];
	size_t i;

	if (r != NULL && r->type == REDIS_REPLY_STRING && r->len == n &&
		memcmp(r->str, p, n) == 0) {
		return true;
	}
	quote(q, sizeof(q), p, n, SHOW_DATA);
	set_why(r, "STRING %s (%zu bytes)", q, n);
	if (r != NULL && r->type == REDIS_REPLY_STRING && r->len == n) {
		for (i = 0; r->str[i] == ((const char *)p)[i]; i++) {
		}
		prefix_why("differs at byte %zu", i);
	}
	return false;
}

static bool
is_int(const redisReply *r, long long n)
{
	if (r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == n) {
		return true;
	}
	set_why(r, "INTEGER %lld", n);
	return false;
}

static bool
is_int_range(const redisReply *r, long long lo, long long hi)
{
	if (r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer >= lo && r->integer <= hi) {
		return true;
	}
	set_why(r, "INTEGER in [%lld, %lld]", lo, hi);
	return false;
}

static bool
is_nil(const redisReply *r)
{
	if (r != NULL && r->type == REDIS_REPLY_NIL) {
		return true;
	}
	set_why(r, "NIL");
	return false;
}

static bool
is_array(const redisReply *r, size_t n)
{
	if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == n) {
		return true;
	}
	set_why(r, "ARRAY of %zu", n);
	return false;
}

/* An error reply equal to s, or starting with s when prefix. */
static bool
is_error(const redisReply *r, const char *s, bool prefix)
{
	size_t n = strlen(s);
	char q[660];

	if (r != NULL && r->type == REDIS_REPLY_ERROR && (prefix ? r->len >= n : r->len == n) &&
		memcmp(r->str, s, n) == 0) {
		return true;
	}
	quote(q, sizeof(q), s, n, SHOW_TEXT);
	set_why(r, "ERROR %s%s", prefix ? "starting with " : "", q);
	return false;
}

/* Parses exactly "<ms>-<seq>", both decimal and without sign. */
static bool
parse_id(const char *s, size_t n, unsigned long long *ms, unsigned long long *seq)
{
	unsigned long long v[2] = {0, 0};
	size_t i = 0;
	int part;

	for (part = 0; part < 2; part++) {
		size_t start = i;

		if (part == 1) {
			if (i >= n || s[i] != '-') {
				return false;
			}
			start = ++i;
		}
		for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
			if (v[part] > (ULLONG_MAX - 9) / 10) {
				return false;
			}
			v[part] = v[part] * 10 + (unsigned)(s[i] - '0');
		}
		if (i == start) {
			return false;
		}
	}
	if (i != n) {
		return false;
	}
	*ms = v[0];
	*seq = v[1];
	return true;
}

/* A STRING stream id; ms and seq may be NULL. */
static bool
is_id(const redisReply *r, unsigned long long *ms, unsigned long long *seq)
{
	unsigned long long m, s;

	if (r != NULL && r->type == REDIS_REPLY_STRING && parse_id(r->str, r->len, &m, &s)) {
		if (ms != NULL) {
			*ms = m;
		}
		if (seq != NULL) {
			*seq = s;
		}
		return true;
	}
	set_why(r, "STRING stream id <ms>-<seq>");
	return false;
}

static bool
is_entry(const redisReply *e, const char *id, const char *const *kv, size_t nkv)
{
	const redisReply *fv = el(e, 1);
	size_t i;

	if (!is_array(e, 2)) {
		prefix_why("entry %s", id);
		return false;
	}
	if (!is_str(el(e, 0), id)) {
		prefix_why("[0] (entry id)");
		return false;
	}
	if (!is_array(fv, nkv)) {
		prefix_why("[1] (fields of %s)", id);
		return false;
	}
	for (i = 0; i < nkv; i++) {
		if (!is_str(el(fv, i), kv[i])) {
			prefix_why("[1][%zu] (fields of %s)", i, id);
			return false;
		}
	}
	return true;
}

/* The XREAD/XREADGROUP shape for one stream: [[key, [n entries]]]. */
static bool
is_stream_reply(const redisReply *r, const char *key, size_t n)
{
	if (!is_array(r, 1)) {
		return false;
	}
	if (!is_array(el(r, 0), 2)) {
		prefix_why("[0]");
		return false;
	}
	if (!is_str(el(el(r, 0), 0), key)) {
		prefix_why("[0][0] (key)");
		return false;
	}
	if (!is_array(el(el(r, 0), 1), n)) {
		prefix_why("[0][1] (entries)");
		return false;
	}
	return true;
}

/* Entry i of an XREAD-shaped reply. */
static const redisReply *
stream_entry(const redisReply *r, size_t i)
{
	return el(el(el(r, 0), 1), i);
}

/* The value after key name in a flat [key, value, ...] array (XINFO in RESP2). */
static const redisReply *
field_of(const redisReply *r, const char *name)
{
	size_t i;

	for (i = 0; r != NULL && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
		const redisReply *k = r->element[i];

		if (k->type == REDIS_REPLY_STRING && k->len == strlen(name) &&
			memcmp(k->str, name, k->len) == 0) {
			return r->element[i + 1];
		}
	}
	return NULL;
}

/* ---------------------------------------------------------------- helpers */

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0) {
	}
}

/* A connected context with bounded connect and reply waits, or NULL (reported). */
static redisContext *
connect_sync(int line)
{
	struct timeval ctv = {5, 0}, rtv = {10, 0};
	redisContext *c = redisConnectWithTimeout(HOST, port, ctv);

	if (c == NULL || c->err) {
		fail(line, "connect to %s:%d: %s", HOST, port, c != NULL ? c->errstr : "no memory");
		redisFree(c);
		return NULL;
	}
	if (redisSetTimeout(c, rtv) != REDIS_OK) {
		fail(line, "redisSetTimeout: %s", c->errstr);
		redisFree(c);
		return NULL;
	}
	return c;
}

/* Copies a STRING reply (an id) into buf as a C string. */
static void
copy_str(char *buf, size_t size, const redisReply *r)
{
	snprintf(buf, size, "%.*s", (int)r->len, r->str);
}

/* Sends what is buffered in c without reading: the command is then in the server's hands. */
static int
flush_out(redisContext *c)
{
	int done = 0;

	while (!done) {
		if (redisBufferWrite(c, &done) != REDIS_OK) {
			return -1;
		}
	}
	return 0;
}

/* ---------------------------------------------------------------- basics */

static int
test_basics(void)
{
	const char *k = "hiredis:basics", *missing = "hiredis:basics:missing";
	unsigned long long ms = 0, seq = 0;
	redisContext *c = NULL;
	redisReply *r = NULL;
	char auto_id[64];
	int ret = -1;

	if ((c = connect_sync(__LINE__)) == NULL) {
		goto out;
	}
	CMD(c, "DEL %s %s", k, missing);
	EXPECT_INT_RANGE(r, 0, 2);
	CMD(c, "PING");
	EXPECT_STATUS(r, "PONG");
	CMD(c, "ECHO %s", "hello hiredis");
	EXPECT_STR(r, "hello hiredis");

	CMD(c, "XADD %s 1-1 %s %s %s %s", k, "f1", "v1", "f2", "v2");
	EXPECT_STR(r, "1-1");
	CMD(c, "XADD %s 1-2 %s %s", k, "f", "v");
	EXPECT_STR(r, "1-2");
	CMD(c, "XADD %s * %s %s %s %s", k, "name", "hiredis", "n", "3");
	EXPECT_ID(r, &ms, &seq);
	/* '*' takes the clock, far past 1-2 */
	CHECK(ms > 1, "XADD *: id after 1-2 expected, got %llu-%llu", ms, seq);
	copy_str(auto_id, sizeof(auto_id), r);
	CMD(c, "XLEN %s", k);
	EXPECT_INT(r, 3);

	CMD(c, "XRANGE %s - +", k);
	EXPECT_ARRAY(r, 3);
	EXPECT_ENTRY(el(r, 0), "1-1", "f1", "v1", "f2", "v2");
	EXPECT_ENTRY(el(r, 1), "1-2", "f", "v");
	EXPECT_ENTRY(el(r, 2), auto_id, "name", "hiredis", "n", "3");
	CMD(c, "XRANGE %s 1-2 1-2", k);
	EXPECT_ARRAY(r, 1);
	EXPECT_ENTRY(el(r, 0), "1-2", "f", "v");
	CMD(c, "XREVRANGE %s + - COUNT 1", k);
	EXPECT_ARRAY(r, 1);
	EXPECT_ENTRY(el(r, 0), auto_id, "name", "hiredis", "n", "3");

	CMD(c, "XDEL %s 1-2", k);
	EXPECT_INT(r, 1);
	CMD(c, "XDEL %s 1-2", k);
	EXPECT_INT(r, 0);
	CMD(c, "XTRIM %s MAXLEN 1", k);
	EXPECT_INT(r, 1);
	CMD(c, "XRANGE %s - +", k);
	EXPECT_ARRAY(r, 1);
	EXPECT_ENTRY(el(r, 0), auto_id, "name", "hiredis", "n", "3");

	CMD(c, "TYPE %s", k);
	EXPECT_STATUS(r, "stream");
	CMD(c, "TYPE %s", missing);
	EXPECT_STATUS(r, "none");
	CMD(c, "EXISTS %s", k);
	EXPECT_INT(r, 1);
	CMD(c, "EXISTS %s %s %s", k, missing, k);
	EXPECT_INT(r, 2);
	CMD(c, "XADD %s NOMKSTREAM * %s %s", missing, "f", "v");
	EXPECT_NIL(r);
	CMD(c, "EXISTS %s", missing);
	EXPECT_INT(r, 0);

	/* Another database does not see the key; if SELECT were ignored, the DEL below
	 * would delete it and the XLEN after SELECT 0 would say so. */
	CMD(c, "SELECT 3");
	EXPECT_STATUS(r, "OK");
	CMD(c, "DEL %s", k);
	EXPECT_INT(r, 0);
	CMD(c, "XLEN %s", k);
	EXPECT_INT(r, 0);
	CMD(c, "SELECT 0");
	EXPECT_STATUS(r, "OK");
	CMD(c, "XLEN %s", k);
	EXPECT_INT(r, 1);
	ret = 0;
out:
	freeReplyObject(r);
	redisFree(c);
	return ret;
}

/* ---------------------------------------------------------------- binary */

#define BIG_LEN (1024 * 1024)

static int
test_binary(void)
{
	static const unsigned char field[] = {
		'b', 'i', 'n', 0, '\r', '\n', 0x80, 0xbf, 0xc0, 0xff, '\r', '\n', 0};
	const char *k = "hiredis:binary";
	unsigned char value[256 + 4];
	unsigned char *big = NULL;
	uint64_t x = 0x9e3779b97f4a7c15u;
	redisContext *c = NULL;
	redisReply *r = NULL;
	const redisReply *fv;
	char id[64];
	size_t i;
	int ret = -1;

	/* every byte value once, then CR LF NUL NUL */
	for (i = 0; i < 256; i++) {
		value[i] = (unsigned char)i;
	}
	memcpy(value + 256, "\r\n\0\0", 4);
	big = malloc(BIG_LEN);
	CHECK(big != NULL, "malloc(%d) failed", BIG_LEN);
	for (i = 0; i < BIG_LEN; i++) { /* xorshift64: incompressible, reproducible */
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		big[i] = (unsigned char)(x >> 24);
	}

	if ((c = connect_sync(__LINE__)) == NULL) {
		goto out;
	}
	CMD(c, "DEL %s", k);
	EXPECT_INT_RANGE(r, 0, 1);
	CMD(c, "XADD %s * %b %b %s %b", k, field, sizeof(field), value, sizeof(value), "big",
		(const void *)big, (size_t)BIG_LEN);
	EXPECT_ID(r, NULL, NULL);
	copy_str(id, sizeof(id), r);
	CMD(c, "XADD %s * %b %b", k, value, sizeof(value), field, sizeof(field));
	EXPECT_ID(r, NULL, NULL);
	CMD(c, "XLEN %s", k);
	EXPECT_INT(r, 2);

	CMD(c, "XRANGE %s - +", k);
	EXPECT_ARRAY(r, 2);
	EXPECT_ARRAY(el(r, 0), 2);
	EXPECT_STR(el(el(r, 0), 0), id);
	fv = el(el(r, 0), 1);
	EXPECT_ARRAY(fv, 4);
	EXPECT_BIN(el(fv, 0), field, sizeof(field));
	EXPECT_BIN(el(fv, 1), value, sizeof(value));
	EXPECT_STR(el(fv, 2), "big");
	EXPECT_BIN(el(fv, 3), big, BIG_LEN);
	fv = el(el(r, 1), 1);
	EXPECT_ARRAY(fv, 2);
	EXPECT_BIN(el(fv, 0), value, sizeof(value));
	EXPECT_BIN(el(fv, 1), field, sizeof(field));

	/* binary-safe by id range too, and ECHO of the same bytes */
	CMD(c, "XRANGE %b %b %b", k, strlen(k), id, strlen(id), id, strlen(id));
	EXPECT_ARRAY(r, 1);
	EXPECT_BIN(el(el(el(r, 0), 1), 1), value, sizeof(value));
	CMD(c, "ECHO %b", value, sizeof(value));
	EXPECT_BIN(r, value, sizeof(value));
	ret = 0;
out:
	freeReplyObject(r);
	redisFree(c);
	free(big);
	return ret;
}

/* ---------------------------------------------------------------- pipeline */

#define PIPE_N 2000

struct stream_id {
	unsigned long long ms, seq;
};

static int
test_pipeline(void)
{
	const char *k = "hiredis:pipeline";
	struct stream_id *ids = NULL, *prev;
	unsigned long long ms, seq;
	redisContext *c = NULL;
	redisReply *r = NULL;
	char val[16];
	int i, ret = -1;

	ids = calloc(PIPE_N, sizeof(*ids));
	CHECK(ids != NULL, "calloc failed");
	if ((c = connect_sync(__LINE__)) == NULL) {
		goto out;
	}
	CMD(c, "DEL %s", k);
	EXPECT_INT_RANGE(r, 0, 1);

	/* nothing goes out until the first redisGetReply */
	for (i = 0; i < PIPE_N; i++) {
		CHECK(redisAppendCommand(c, "XADD %s * i %d", k, i) == REDIS_OK,
			"redisAppendCommand XADD %d: %s", i, c->errstr);
	}
	CHECK(redisAppendCommand(c, "XLEN %s", k) == REDIS_OK, "redisAppendCommand XLEN: %s",
		c->errstr);
	cur_cmd = "XADD %s * i %d (pipelined)";
	for (i = 0; i < PIPE_N; i++) {
		GET_REPLY(c);
		EXPECT_ID(r, &ids[i].ms, &ids[i].seq);
		prev = &ids[i > 0 ? i - 1 : 0];
		CHECK(i == 0 || ids[i].ms > prev->ms ||
				(ids[i].ms == prev->ms && ids[i].seq > prev->seq),
			"%s: reply %d: id above %llu-%llu expected, got %llu-%llu", cur_cmd, i,
			prev->ms, prev->seq, ids[i].ms, ids[i].seq);
	}
	cur_cmd = "XLEN %s (pipelined)";
	GET_REPLY(c);
	EXPECT_INT(r, PIPE_N);

	/* the entries are the ones the replies named, in order */
	CMD(c, "XRANGE %s - +", k);
	EXPECT_ARRAY(r, PIPE_N);
	for (i = 0; i < PIPE_N; i++) {
		char id[64];

		snprintf(id, sizeof(id), "%llu-%llu", ids[i].ms, ids[i].seq);
		snprintf(val, sizeof(val), "%d", i);
		EXPECT_ENTRY(el(r, (size_t)i), id, "i", val);
	}

	/* a transaction, pipelined */
	CHECK(redisAppendCommand(c, "MULTI") == REDIS_OK, "redisAppendCommand MULTI: %s",
		c->errstr);
	CHECK(redisAppendCommand(c, "XADD %s * tx 1", k) == REDIS_OK, "redisAppendCommand: %s",
		c->errstr);
	CHECK(redisAppendCommand(c, "XLEN %s", k) == REDIS_OK, "redisAppendCommand: %s", c->errstr);
	CHECK(redisAppendCommand(c, "EXEC") == REDIS_OK, "redisAppendCommand EXEC: %s", c->errstr);
	cur_cmd = "MULTI (pipelined)";
	GET_REPLY(c);
	EXPECT_STATUS(r, "OK");
	cur_cmd = "XADD %s * tx 1 (in MULTI)";
	GET_REPLY(c);
	EXPECT_STATUS(r, "QUEUED");
	cur_cmd = "XLEN %s (in MULTI)";
	GET_REPLY(c);
	EXPECT_STATUS(r, "QUEUED");
	cur_cmd = "EXEC (pipelined)";
	GET_REPLY(c);
	EXPECT_ARRAY(r, 2);
	EXPECT_ID(el(r, 0), &ms, &seq);
	prev = &ids[PIPE_N - 1];
	CHECK(ms > prev->ms || (ms == prev->ms && seq > prev->seq),
		"EXEC: [0]: XADD id above %llu-%llu expected, got %llu-%llu", prev->ms, prev->seq,
		ms, seq);
	EXPECT_INT(el(r, 1), PIPE_N + 1);
	ret = 0;
out:
	freeReplyObject(r);
	redisFree(c);
	free(ids);
	return ret;
}

/* ---------------------------------------------------------------- groups */

static int
test_groups(void)
{
	const char *k = "hiredis:groups";
	redisContext *c = NULL;
	redisReply *r = NULL;
	const redisReply *row, *g;
	int ret = -1;

	if ((c = connect_sync(__LINE__)) == NULL) {
		goto out;
	}
	CMD(c, "DEL %s", k);
	EXPECT_INT_RANGE(r, 0, 1);
	CMD(c, "XGROUP CREATE %s g 0 MKSTREAM", k);
	EXPECT_STATUS(r, "OK");
	CMD(c, "XADD %s 1-1 n 1", k);
	EXPECT_STR(r, "1-1");
	CMD(c, "XADD %s 1-2 n 2", k);
	EXPECT_STR(r, "1-2");
	CMD(c, "XADD %s 1-3 n 3", k);
	EXPECT_STR(r, "1-3");

	CMD(c, "XREADGROUP GROUP g alice COUNT 2 STREAMS %s >", k);
	EXPECT_STREAM(r, k, 2);
	EXPECT_ENTRY(stream_entry(r, 0), "1-1", "n", "1");
	EXPECT_ENTRY(stream_entry(r, 1), "1-2", "n", "2");
	CMD(c, "XREADGROUP GROUP g bob STREAMS %s >", k);
	EXPECT_STREAM(r, k, 1);
	EXPECT_ENTRY(stream_entry(r, 0), "1-3", "n", "3");
	CMD(c, "XREADGROUP GROUP g bob STREAMS %s >", k);
	EXPECT_NIL(r);

	/* the summary form; Redis sends the per-consumer counts as bulk strings */
	CMD(c, "XPENDING %s g", k);
	EXPECT_ARRAY(r, 4);
	EXPECT_INT(el(r, 0), 3);
	EXPECT_STR(el(r, 1), "1-1");
	EXPECT_STR(el(r, 2), "1-3");
	EXPECT_ARRAY(el(r, 3), 2);
	EXPECT_ARRAY(el(el(r, 3), 0), 2);
	EXPECT_STR(el(el(el(r, 3), 0), 0), "alice");
	EXPECT_STR(el(el(el(r, 3), 0), 1), "2");
	EXPECT_ARRAY(el(el(r, 3), 1), 2);
	EXPECT_STR(el(el(el(r, 3), 1), 0), "bob");
	EXPECT_STR(el(el(el(r, 3), 1), 1), "1");

	CMD(c, "XACK %s g 1-1", k);
	EXPECT_INT(r, 1);
	CMD(c, "XACK %s g 1-1", k);
	EXPECT_INT(r, 0);

	/* the extended form: [id, consumer, idle ms, deliveries] */
	CMD(c, "XPENDING %s g - + 10 alice", k);
	EXPECT_ARRAY(r, 1);
	row = el(r, 0);
	EXPECT_ARRAY(row, 4);
	EXPECT_STR(el(row, 0), "1-2");
	EXPECT_STR(el(row, 1), "alice");
	EXPECT_INT_RANGE(el(row, 2), 0, 60000);
	EXPECT_INT(el(row, 3), 1);

	/* JUSTID moves ownership without counting a delivery */
	CMD(c, "XCLAIM %s g bob 0 1-2 JUSTID", k);
	EXPECT_ARRAY(r, 1);
	EXPECT_STR(el(r, 0), "1-2");
	CMD(c, "XPENDING %s g - + 10", k);
	EXPECT_ARRAY(r, 2);
	EXPECT_STR(el(el(r, 0), 0), "1-2");
	EXPECT_STR(el(el(r, 0), 1), "bob");
	EXPECT_INT(el(el(r, 0), 3), 1);
	EXPECT_STR(el(el(r, 1), 0), "1-3");
	EXPECT_STR(el(el(r, 1), 1), "bob");
	EXPECT_INT(el(el(r, 1), 3), 1);

	/* [next cursor, claimed entries, deleted ids] */
	CMD(c, "XAUTOCLAIM %s g carol 0 0 COUNT 10", k);
	EXPECT_ARRAY(r, 3);
	EXPECT_STR(el(r, 0), "0-0");
	EXPECT_ARRAY(el(r, 1), 2);
	EXPECT_ENTRY(el(el(r, 1), 0), "1-2", "n", "2");
	EXPECT_ENTRY(el(el(r, 1), 1), "1-3", "n", "3");
	EXPECT_ARRAY(el(r, 2), 0);
	CMD(c, "XPENDING %s g - + 10 carol", k);
	EXPECT_ARRAY(r, 2);
	EXPECT_INT(el(el(r, 0), 3), 2);
	EXPECT_INT(el(el(r, 1), 3), 2);

	/* an entry deleted while pending is reported and dropped from the PEL */
	CMD(c, "XDEL %s 1-3", k);
	EXPECT_INT(r, 1);
	CMD(c, "XAUTOCLAIM %s g dave 0 0", k);
	EXPECT_ARRAY(r, 3);
	EXPECT_STR(el(r, 0), "0-0");
	EXPECT_ARRAY(el(r, 1), 1);
	EXPECT_ENTRY(el(el(r, 1), 0), "1-2", "n", "2");
	EXPECT_ARRAY(el(r, 2), 1);
	EXPECT_STR(el(el(r, 2), 0), "1-3");

	/* RESP2 XINFO replies are flat [name, value, ...] arrays */
	CMD(c, "XINFO GROUPS %s", k);
	EXPECT_ARRAY(r, 1);
	g = el(r, 0);
	CHECK(g != NULL && g->type == REDIS_REPLY_ARRAY && g->elements >= 8 && g->elements % 2 == 0,
		"XINFO GROUPS: [0]: expected a flat ARRAY of name/value pairs, got %s",
		describe(g));
	EXPECT_STR(field_of(g, "name"), "g");
	EXPECT_INT(field_of(g, "consumers"), 4);
	EXPECT_INT(field_of(g, "pending"), 1);
	EXPECT_STR(field_of(g, "last-delivered-id"), "1-3");

	CMD(c, "XGROUP CREATE %s g $", k);
	EXPECT_ERROR(r, "BUSYGROUP Consumer Group name already exists");
	CMD(c, "XGROUP CREATE %s g2 $", k);
	EXPECT_STATUS(r, "OK");
	CMD(c, "XPENDING %s g2", k);
	EXPECT_ARRAY(r, 4);
	EXPECT_INT(el(r, 0), 0);
	EXPECT_NIL(el(r, 1));
	EXPECT_NIL(el(r, 2));
	EXPECT_NIL(el(r, 3));
	ret = 0;
out:
	freeReplyObject(r);
	redisFree(c);
	return ret;
}

/* ---------------------------------------------------------------- blocking */

/* No reply may have arrived yet on c: the command is really blocked. */
static bool
nothing_to_read(redisContext *c)
{
	struct pollfd p = {.fd = c->fd, .events = POLLIN};

	return poll(&p, 1, 0) == 0;
}

/* Sends block_fmt (its %s: key k) on a and checks that it stays blocked for
 * 100 ms; then B adds entry id with field f = value, which must be a's reply. */
static int
wake_blocked(redisContext *a, redisContext *b, const char *block_fmt, const char *k,
	const char *id, const char *value)
{
	redisReply *r = NULL;
	double t0, dt;
	int ret = -1;

	cur_cmd = block_fmt;
	CHECK(redisAppendCommand(a, block_fmt, k) == REDIS_OK, "redisAppendCommand: %s", a->errstr);
	t0 = now_s();
	CHECK(flush_out(a) == 0, "%s: send: %s", cur_cmd, a->errstr);
	sleep_ms(100);
	CHECK(nothing_to_read(a), "%s: a blocked read expected, but a reply came before XADD",
		cur_cmd);
	CMD(b, "XADD %s %s f %s", k, id, value);
	EXPECT_STR(r, id);
	cur_cmd = block_fmt;
	GET_REPLY(a);
	dt = now_s() - t0;
	EXPECT_STREAM(r, k, 1);
	EXPECT_ENTRY(stream_entry(r, 0), id, "f", value);
	CHECK(dt >= 0.09 && dt < 4.0,
		"%s: the entry expected 0.09 to 4 s after sending, came after %.3f s", cur_cmd, dt);
	ret = 0;
out:
	freeReplyObject(r);
	return ret;
}

static int
test_blocking(void)
{
	const char *k = "hiredis:blocking";
	redisContext *a = NULL, *b = NULL;
	redisReply *r = NULL;
	double t0, dt;
	int ret = -1;

	if ((a = connect_sync(__LINE__)) == NULL || (b = connect_sync(__LINE__)) == NULL) {
		goto out;
	}
	CMD(b, "DEL %s", k);
	EXPECT_INT_RANGE(r, 0, 1);

	/* a timeout is a nil reply, after the timeout */
	t0 = now_s();
	CMD(a, "XREAD BLOCK 100 STREAMS %s $", k);
	dt = now_s() - t0;
	EXPECT_NIL(r);
	CHECK(dt >= 0.09 && dt < 4.0, "%s: NIL after 0.09 to 4 s expected, came after %.3f s",
		cur_cmd, dt);

	/* A blocks; B's XADD wakes it */
	if (wake_blocked(a, b, "XREAD BLOCK 5000 STREAMS %s $", k, "5-1", "v") != 0) {
		goto out;
	}

	/* the same with a group read, which also makes the entry pending */
	CMD(b, "XGROUP CREATE %s g $", k);
	EXPECT_STATUS(r, "OK");
	if (wake_blocked(a, b, "XREADGROUP GROUP g c BLOCK 5000 STREAMS %s >", k, "6-1", "v2") != 0) {
		goto out;
	}
	CMD(b, "XPENDING %s g", k);
	EXPECT_ARRAY(r, 4);
	EXPECT_INT(el(r, 0), 1);
	EXPECT_STR(el(r, 1), "6-1");
	EXPECT_STR(el(r, 2), "6-1");
	EXPECT_ARRAY(el(r, 3), 1);
	EXPECT_STR(el(el(el(r, 3), 0), 0), "c");
	EXPECT_STR(el(el(el(r, 3), 0), 1), "1");
	/* A's connection is in step again */
	CMD(a, "PING");
	EXPECT_STATUS(r, "PONG");
	ret = 0;
out:
	freeReplyObject(r);
	redisFree(a);
	redisFree(b);
	return ret;
}

/* ---------------------------------------------------------------- async */

struct async_state {
	struct event_base *base;
	redisAsyncContext *a, *b; /* NULL once hiredis has freed them */
	struct event *kick;       /* 100 ms: B adds two entries */
	struct event *safety;     /* 8 s: the loop should long be over */
	const char *key;
	int connects, disconnects, kicks, xadds, reads, acks;
	char added[2][64]; /* ids from B's XADDs */
	char got[2][64];   /* ids A's XREADGROUP delivered */
	size_t ngot;
};

/* A check failed in a callback: stop the loop, the test's cleanup frees the rest. */
static void
async_abort(struct async_state *st)
{
	event_base_loopbreak(st->base);
}

static void
on_connect(const redisAsyncContext *ac, int status)
{
	struct async_state *st = ac->data;

	if (status != REDIS_OK) {
		fail(__LINE__, "async connect to %s:%d: %s", HOST, port, ac->errstr);
		/* hiredis frees a context whose connect failed */
		if (ac == st->a) {
			st->a = NULL;
		} else {
			st->b = NULL;
		}
		async_abort(st);
		return;
	}
	st->connects++;
}

static void
on_disconnect(const redisAsyncContext *ac, int status)
{
	struct async_state *st = ac->data;

	if (ac == st->a) {
		st->a = NULL;
	} else {
		st->b = NULL;
	}
	if (status != REDIS_OK) {
		fail(__LINE__, "async context lost its connection: %s", ac->errstr);
		async_abort(st);
		return;
	}
	st->disconnects++;
	if (st->a == NULL && st->b == NULL) {
		/* with no event left, event_base_dispatch returns */
		event_del(st->safety);
	}
}

static void
on_ack(redisAsyncContext *ac, void *reply, void *priv)
{
	struct async_state *st = priv;
	const redisReply *r = reply;

	cur_cmd = "XACK %s g ID... (async)";
	CHECK(r != NULL, "%s: no reply: %s", cur_cmd, ac->errstr);
	EXPECT_INT(r, (long long)st->ngot);
	st->acks++;
	/* both leave once their replies are in (B's second XADD may still be coming) */
	redisAsyncDisconnect(st->a);
	if (st->b != NULL) {
		redisAsyncDisconnect(st->b);
	}
	return;
out:
	async_abort(st);
}

static void
on_read(redisAsyncContext *ac, void *reply, void *priv)
{
	struct async_state *st = priv;
	const redisReply *r = reply, *entries;
	const char *argv[2 + 2 + 1] = {"XACK", st->key, "g"};
	size_t i;

	cur_cmd = "XREADGROUP GROUP g w BLOCK 5000 COUNT 10 STREAMS %s > (async)";
	CHECK(r != NULL, "%s: no reply: %s", cur_cmd, ac->errstr);
	st->reads++;
	/* B's two XADDs may wake A once or be read together */
	EXPECT_ARRAY(r, 1);
	EXPECT_ARRAY(el(r, 0), 2);
	EXPECT_STR(el(el(r, 0), 0), st->key);
	entries = el(el(r, 0), 1);
	CHECK(entries != NULL && entries->type == REDIS_REPLY_ARRAY && entries->elements >= 1 &&
			entries->elements <= 2,
		"%s: [0][1]: expected ARRAY of 1 or 2 entries, got %s", cur_cmd, describe(entries));
	for (i = 0; i < entries->elements; i++) {
		EXPECT_ID(el(el(entries, i), 0), NULL, NULL);
		copy_str(st->got[i], sizeof(st->got[i]), el(el(entries, i), 0));
		EXPECT_ENTRY(el(entries, i), st->got[i], "n", i == 0 ? "1" : "2");
		argv[3 + i] = st->got[i];
	}
	st->ngot = entries->elements;
	CHECK(redisAsyncCommandArgv(st->a, on_ack, st, (int)(3 + st->ngot), argv, NULL) == REDIS_OK,
		"redisAsyncCommandArgv XACK: %s", st->a->errstr);
	return;
out:
	async_abort(st);
}

static void
on_xadd(redisAsyncContext *ac, void *reply, void *priv)
{
	struct async_state *st = priv;
	const redisReply *r = reply;

	cur_cmd = "XADD %s * n %d (async)";
	CHECK(r != NULL, "%s: no reply: %s", cur_cmd, ac->errstr);
	CHECK(st->xadds < 2, "%s: a third XADD reply", cur_cmd);
	EXPECT_ID(r, NULL, NULL);
	copy_str(st->added[st->xadds], sizeof(st->added[0]), r);
	st->xadds++;
	return;
out:
	async_abort(st);
}

static void
on_kick(evutil_socket_t fd, short what, void *priv)
{
	struct async_state *st = priv;
	int n;

	(void)fd;
	(void)what;
	st->kicks++;
	CHECK(st->b != NULL, "B is gone before the timer fired");
	for (n = 1; n <= 2; n++) {
		CHECK(redisAsyncCommand(st->b, on_xadd, st, "XADD %s * n %d", st->key, n) ==
				REDIS_OK,
			"redisAsyncCommand XADD: %s", st->b->errstr);
	}
	return;
out:
	async_abort(st);
}

static void
on_safety(evutil_socket_t fd, short what, void *priv)
{
	struct async_state *st = priv;

	(void)fd;
	(void)what;
	fail(__LINE__,
		"the event loop still ran after 8 s (connects %d, XADD replies %d, reads %d, "
		"acks %d, disconnects %d)",
		st->connects, st->xadds, st->reads, st->acks, st->disconnects);
	async_abort(st);
}

/* A new async context on st->base, or NULL (reported). */
static redisAsyncContext *
connect_async(struct async_state *st, int line)
{
	redisAsyncContext *ac = redisAsyncConnect(HOST, port);

	if (ac == NULL || ac->err) {
		fail(line, "async connect to %s:%d: %s", HOST, port,
			ac != NULL ? ac->errstr : "no memory");
		if (ac != NULL) {
			redisAsyncFree(ac);
		}
		return NULL;
	}
	ac->data = st;
	if (redisLibeventAttach(ac, st->base) != REDIS_OK) {
		fail(line, "redisLibeventAttach failed");
		redisAsyncFree(ac);
		return NULL;
	}
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	return ac;
}

static int
test_async(void)
{
	struct async_state st = {.key = "hiredis:async"};
	struct timeval kick_tv = {0, 100000}, safety_tv = {8, 0};
	redisContext *c = NULL;
	redisReply *r = NULL;
	size_t i;
	int ret = -1;

	/* the group comes first, so A's read finds it */
	if ((c = connect_sync(__LINE__)) == NULL) {
		goto out;
	}
	CMD(c, "DEL %s", st.key);
	EXPECT_INT_RANGE(r, 0, 1);
	CMD(c, "XGROUP CREATE %s g $ MKSTREAM", st.key);
	EXPECT_STATUS(r, "OK");

	st.base = event_base_new();
	CHECK(st.base != NULL, "event_base_new failed");
	st.kick = evtimer_new(st.base, on_kick, &st);
	st.safety = evtimer_new(st.base, on_safety, &st);
	CHECK(st.kick != NULL && st.safety != NULL, "evtimer_new failed");
	if ((st.a = connect_async(&st, __LINE__)) == NULL ||
		(st.b = connect_async(&st, __LINE__)) == NULL) {
		goto out;
	}
	CHECK(redisAsyncCommand(st.a, on_read, &st,
		      "XREADGROUP GROUP g w BLOCK 5000 COUNT 10 STREAMS %s >", st.key) == REDIS_OK,
		"redisAsyncCommand XREADGROUP: %s", st.a->errstr);
	CHECK(evtimer_add(st.kick, &kick_tv) == 0 && evtimer_add(st.safety, &safety_tv) == 0,
		"evtimer_add failed");
	CHECK(event_base_dispatch(st.base) >= 0, "event_base_dispatch failed");
	if (failed) {
		goto out;
	}

	CHECK(st.connects == 2 && st.kicks == 1 && st.xadds == 2 && st.reads == 1 && st.acks == 1 &&
			st.disconnects == 2,
		"callbacks: expected connects 2, timer 1, XADD replies 2, reads 1, acks 1, "
		"disconnects 2, got %d, %d, %d, %d, %d, %d",
		st.connects, st.kicks, st.xadds, st.reads, st.acks, st.disconnects);
	for (i = 0; i < st.ngot; i++) {
		CHECK(strcmp(st.got[i], st.added[i]) == 0,
			"XREADGROUP (async): entry %zu: expected id %s (from XADD), got %s", i,
			st.added[i], st.got[i]);
	}
	/* everything delivered was acknowledged */
	CMD(c, "XPENDING %s g", st.key);
	EXPECT_ARRAY(r, 4);
	EXPECT_INT(el(r, 0), 0);
	CMD(c, "XLEN %s", st.key);
	EXPECT_INT(r, 2);
	ret = 0;
out:
	/* only after a failure are the contexts still there */
	if (st.a != NULL) {
		redisAsyncFree(st.a);
	}
	if (st.b != NULL) {
		redisAsyncFree(st.b);
	}
	if (st.kick != NULL) {
		event_free(st.kick);
	}
	if (st.safety != NULL) {
		event_free(st.safety);
	}
	if (st.base != NULL) {
		event_base_free(st.base);
	}
	freeReplyObject(r);
	redisFree(c);
	return ret;
}

/* ---------------------------------------------------------------- errors */

#define BAD_ID "ERR Invalid stream ID specified as stream command argument"

/* An error reply must leave the connection usable. */
#define EXPECT_ALIVE(c)                                                                            \
	do {                                                                                       \
		CMD(c, "PING");                                                                    \
		EXPECT_STATUS(r, "PONG");                                                          \
	} while (0)

static int
test_errors(void)
{
	const char *k = "hiredis:errors";
	redisContext *c = NULL;
	redisReply *r = NULL;
	int ret = -1;

	if ((c = connect_sync(__LINE__)) == NULL) {
		goto out;
	}
	CMD(c, "DEL %s", k);
	EXPECT_INT_RANGE(r, 0, 1);
	CMD(c, "XGROUP CREATE %s g $ MKSTREAM", k);
	EXPECT_STATUS(r, "OK");

	CMD(c, "XADD %s notanid f v", k);
	EXPECT_ERROR(r, BAD_ID);
	EXPECT_ALIVE(c);
	CMD(c, "XADD %s * f", k);
	EXPECT_ERROR(r, "ERR wrong number of arguments for 'xadd' command");
	EXPECT_ALIVE(c);
	CMD(c, "FOO bar");
	EXPECT_ERROR_PREFIX(r, "ERR unknown command 'FOO'");
	EXPECT_ALIVE(c);
	CMD(c, "XREADGROUP GROUP nog c STREAMS %s >", "hiredis:errors:nokey");
	EXPECT_ERROR_PREFIX(r, "NOGROUP ");
	EXPECT_ALIVE(c);
	CMD(c, "XACK %s g notanid", k);
	EXPECT_ERROR(r, BAD_ID);
	EXPECT_ALIVE(c);
	CMD(c, "XADD %s 0-0 f v", k);
	EXPECT_ERROR(r, "ERR The ID specified in XADD must be greater than 0-0");
	EXPECT_ALIVE(c);
	CMD(c, "XADD %s 5-5 f v", k);
	EXPECT_STR(r, "5-5");
	CMD(c, "XADD %s 5-5 f v", k);
	EXPECT_ERROR(r, "ERR The ID specified in XADD is equal or smaller than the target stream "
			"top item");
	EXPECT_ALIVE(c);
	/* nothing above changed the stream but the one good XADD */
	CMD(c, "XLEN %s", k);
	EXPECT_INT(r, 1);
	ret = 0;
out:
	freeReplyObject(r);
	redisFree(c);
	return ret;
}

/* ---------------------------------------------------------------- main */

static const struct {
	const char *name;
	int (*run)(void);
} tests[] = {
	{"basics", test_basics},
	{"binary", test_binary},
	{"pipeline", test_pipeline},
	{"groups", test_groups},
	{"blocking", test_blocking},
	{"async", test_async},
	{"errors", test_errors},
};

static int
usage(void)
{
	size_t i;

	fprintf(stderr, "usage: hiredis-e2e PORT TEST\ntests:");
	for (i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		fprintf(stderr, " %s", tests[i].name);
	}
	fputc('\n', stderr);
	return 2;
}

int
main(int argc, char **argv)
{
	char *end;
	long p;
	size_t i;

	if (argc != 3) {
		return usage();
	}
	p = strtol(argv[1], &end, 10);
	if (end == argv[1] || *end != '\0' || p < 1 || p > 65535) {
		return usage();
	}
	port = (int)p;
	/* a server that closes on us must fail a check, not kill us */
	signal(SIGPIPE, SIG_IGN);
	for (i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		if (strcmp(argv[2], tests[i].name) == 0) {
			test_name = tests[i].name;
			if (tests[i].run() != 0 || failed) {
				fail(__LINE__, "failed without saying why");
				return 1;
			}
			return 0;
		}
	}
	return usage();
}
