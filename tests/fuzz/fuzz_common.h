/* fuzz_common.h - shared by the libFuzzer harnesses: a strict RESP reply
 * checker (the oracle for everything the writer produced), a hash and a
 * small deterministic PRNG. Test code only; every function is static.
 */
#ifndef ECHD_TESTS_FUZZ_COMMON_H
#define ECHD_TESTS_FUZZ_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* libFuzzer's entry points (the project warns on missing prototypes). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FUZZ_REPLY_MAX_DEPTH 256

/* Not every harness uses every helper. */
#define FUZZ_UNUSED __attribute__((unused))

/* Aborts with what is wrong, so libFuzzer saves the input. */
static void fuzz_fail(const char *what, const char *p, size_t n) __attribute__((noreturn));

static void
fuzz_fail(const char *what, const char *p, size_t n)
{
	fprintf(stderr, "fuzz: %s near \"", what);
	for (size_t i = 0; i < n && i < 80; i++) {
		unsigned char c = (unsigned char)p[i];
		if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
			fputc(c, stderr);
		} else {
			fprintf(stderr, "\\x%02x", c);
		}
	}
	fprintf(stderr, "\"\n");
	abort();
}

static uint64_t
fuzz_hash(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++) {
		h = (h ^ b[i]) * 1099511628211ULL;
	}
	return h;
}

/* splitmix64: splits and choices that depend only on the input. */
FUZZ_UNUSED static uint64_t
fuzz_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Finds the CRLF that ends the line at p; returns its offset or aborts. */
static size_t
reply_line(const char *p, size_t n, bool text)
{
	for (size_t i = 0; i + 1 < n; i++) {
		if (p[i] == '\r' && p[i + 1] == '\n') {
			return i;
		}
		if (text && (p[i] == '\r' || p[i] == '\n')) {
			fuzz_fail("bare CR or LF in a reply line", p, n);
		}
	}
	fuzz_fail("reply line without CRLF", p, n);
}

/* A decimal integer, as the writer prints them: optional '-', no leading
 * zeros. min is the smallest value allowed. */
static long long
reply_int(const char *p, size_t n, long long min)
{
	unsigned long long u = 0;
	size_t i = 0;
	long long v;
	bool neg = false;

	if (n > 0 && p[0] == '-') {
		neg = true;
		i = 1;
	}
	if (i == n || n - i > 19 || (p[i] == '0' && n - i > 1) || (neg && p[i] == '0')) {
		fuzz_fail("malformed integer in a reply", p, n);
	}
	for (; i < n; i++) {
		if (p[i] < '0' || p[i] > '9') {
			fuzz_fail("malformed integer in a reply", p, n);
		}
		u = u * 10 + (unsigned)(p[i] - '0');
	}
	if (u > (unsigned long long)INT64_MAX + (neg ? 1 : 0)) {
		fuzz_fail("integer out of range in a reply", p, n);
	}
	v = neg ? (long long)(0 - u) : (long long)u;
	if (v < min) {
		fuzz_fail("length out of range in a reply", p, n);
	}
	return v;
}

/* Checks one complete reply at p; returns its length. resp3 allows the
 * RESP3 types (a RESP2 connection must never see them). */
static size_t
reply_check_one(const char *p, size_t n, bool resp3, int depth)
{
	size_t eol, off, len;
	long long v, items = 0;

	if (depth > FUZZ_REPLY_MAX_DEPTH) {
		fuzz_fail("reply nested too deep", p, n);
	}
	if (n < 3) {
		fuzz_fail("truncated reply", p, n);
	}
	eol = reply_line(p, n, p[0] == '+' || p[0] == '-');
	off = eol + 2;
	switch (p[0]) {
	case '+':
	case '-':
		return off;
	case ':':
		(void)reply_int(p + 1, eol - 1, INT64_MIN);
		return off;
	case '$':
		v = reply_int(p + 1, eol - 1, -1);
		if (v < 0) {
			return off;
		}
		goto payload;
	case '*':
		items = reply_int(p + 1, eol - 1, -1);
		if (items < 0) {
			return off;
		}
		goto aggregate;
	}
	if (!resp3) {
		fuzz_fail("RESP3 type on a RESP2 connection", p, n);
	}
	switch (p[0]) {
	case '_':
		if (eol != 1) {
			fuzz_fail("malformed null", p, n);
		}
		return off;
	case '#':
		if (eol != 2 || (p[1] != 't' && p[1] != 'f')) {
			fuzz_fail("malformed boolean", p, n);
		}
		return off;
	case ',':
	case '(':
		if (eol < 2) {
			fuzz_fail("empty double or big number", p, n);
		}
		return off;
	case '=':
	case '!':
		v = reply_int(p + 1, eol - 1, 0);
		if (p[0] == '=' && (v < 4 || (size_t)v > n - off || p[off + 3] != ':')) {
			fuzz_fail("malformed verbatim string", p, n);
		}
		goto payload;
	case '%':
		items = reply_int(p + 1, eol - 1, 0) * 2;
		goto aggregate;
	case '~':
	case '>':
		items = reply_int(p + 1, eol - 1, 0);
		goto aggregate;
	}
	fuzz_fail("unknown reply type", p, n);

payload:
	len = (size_t)v;
	if (len > n - off || n - off - len < 2 || p[off + len] != '\r' ||
		p[off + len + 1] != '\n') {
		fuzz_fail("bulk payload not followed by CRLF", p, n);
	}
	return off + len + 2;

aggregate:
	for (long long i = 0; i < items; i++) {
		if (off >= n) {
			fuzz_fail("aggregate with fewer elements than announced", p, n);
		}
		off += reply_check_one(p + off, n - off, resp3, depth + 1);
	}
	return off;
}

/* Checks that buf holds whole, well-formed replies and nothing else;
 * returns how many. */
static size_t
reply_check_all(const char *p, size_t n, bool resp3)
{
	size_t off = 0, count = 0;

	while (off < n) {
		off += reply_check_one(p + off, n - off, resp3, 0);
		count++;
	}
	return count;
}

#endif
