/* resp_write.c - reply buffer and RESP2/RESP3 reply writer.
 *
 * Byte for byte what Redis 7.4's addReply*() functions produce, including
 * the RESP2 downgrades (maps as flat arrays, booleans as integers, doubles
 * as bulk strings). Integers are formatted by hand: they are on every
 * reply's path.
 */
#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "echd.h"
#include "resp.h"

#define BUF_MIN 512

/* ---- buffer ------------------------------------------------------------ */

void
resp_buf_init(struct resp_buf *b)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	b->limit = 0;
	b->oom = false;
	b->over_limit = false;
}

void
resp_buf_finish(struct resp_buf *b)
{
	echd_free(b->data);
	resp_buf_init(b);
}

void
resp_buf_consume(struct resp_buf *b, size_t n)
{
	assert(n <= b->len);
	if (n >= b->len) {
		b->len = 0;
		return;
	}
	memmove(b->data, b->data + n, b->len - n);
	b->len -= n;
}

void
resp_buf_truncate(struct resp_buf *b, size_t len)
{
	if (len < b->len) {
		b->len = len;
	}
}

static bool
grow(struct resp_buf *b, size_t n)
{
	size_t ncap;
	char *nd;

	if (n > SIZE_MAX - b->len) {
		b->oom = true;
		return false;
	}
	if (b->limit > 0 && b->len + n > b->limit) {
		b->oom = true;
		b->over_limit = true;
		return false;
	}
	ncap = b->cap < BUF_MIN ? BUF_MIN : b->cap;
	while (ncap < b->len + n) {
		ncap = ncap > SIZE_MAX / 2 ? b->len + n : ncap * 2;
	}
	nd = echd_realloc(b->data, ncap);
	if (nd == NULL) {
		b->oom = true;
		return false;
	}
	b->data = nd;
	b->cap = ncap;
	return true;
}

/* Returns where n more bytes go (len is not advanced), or NULL once the
 * buffer is out of memory. */
static inline char *
reserve(struct resp_buf *b, size_t n)
{
	if (b->oom) {
		return NULL;
	}
	if (b->cap - b->len < n && !grow(b, n)) {
		return NULL;
	}
	return b->data + b->len;
}

void
resp_buf_append(struct resp_buf *b, const void *p, size_t n)
{
	char *d;

	if (n == 0) {
		return;
	}
	d = reserve(b, n);
	if (d == NULL) {
		return;
	}
	memcpy(d, p, n);
	b->len += n;
}

void
resp_buf_printf(struct resp_buf *b, const char *fmt, ...)
{
	size_t room = 128;
	va_list ap;
	char *d;
	int n;

	for (int pass = 0; pass < 2; pass++) {
		if ((d = reserve(b, room)) == NULL) {
			return;
		}
		room = b->cap - b->len; /* use what growth gave */
		va_start(ap, fmt);
		n = vsnprintf(d, room, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = true;
			return;
		}
		if ((size_t)n < room) {
			b->len += (size_t)n;
			return;
		}
		room = (size_t)n + 1; /* the second pass has room for all of it */
	}
}

/* ---- number formatting ------------------------------------------------- */

static const char digit_pairs[201] = "00010203040506070809"
				     "10111213141516171819"
				     "20212223242526272829"
				     "30313233343536373839"
				     "40414243444546474849"
				     "50515253545556575859"
				     "60616263646566676869"
				     "70717273747576777879"
				     "80818283848586878889"
				     "90919293949596979899";

static int
digits10(unsigned long long v)
{
	int n = 1;

	while (v >= 10000) {
		v /= 10000;
		n += 4;
	}
	if (v >= 1000) {
		return n + 3;
	}
	if (v >= 100) {
		return n + 2;
	}
	if (v >= 10) {
		return n + 1;
	}
	return n;
}

/* Writes v in decimal to dst (at least 21 bytes, not terminated); returns
 * the length. Two digits per division, filled from the right. */
static size_t
ll2str(char *dst, long long v)
{
	unsigned long long u;
	size_t neg = 0;
	int n, i;

	if (v < 0) {
		*dst++ = '-';
		neg = 1;
		u = (unsigned long long)(-(v + 1)) + 1;
	} else {
		u = (unsigned long long)v;
	}
	n = digits10(u);
	i = n - 1;
	while (u >= 100) {
		unsigned k = (unsigned)(u % 100) * 2;

		u /= 100;
		dst[i] = digit_pairs[k + 1];
		dst[i - 1] = digit_pairs[k];
		i -= 2;
	}
	if (u < 10) {
		dst[i] = (char)('0' + u);
	} else {
		dst[i] = digit_pairs[u * 2 + 1];
		dst[i - 1] = digit_pairs[u * 2];
	}
	return neg + (size_t)n;
}

/* Redis's double2ll(): the double is an integer that prints exactly. */
static bool
double_is_ll(double d, long long *out)
{
	long long ll;

	if (d < (double)(-LLONG_MAX / 2) || d > (double)(LLONG_MAX / 2)) {
		return false;
	}
	ll = (long long)d;
	if ((double)ll != d) {
		return false;
	}
	*out = ll;
	return true;
}

/* Shortest digits that read back as d, as fpconv_dtoa (grisu2) finds them.
 * Fills digits (no dot, no sign) and returns their count; *e10 is the
 * decimal exponent of the first digit. */
static int
shortest_digits(double d, char *digits, int *e10)
{
	char tmp[40];
	int prec, n = 0;

	for (prec = 1; prec <= 17; prec++) {
		snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, d);
		if (strtod(tmp, NULL) == d) {
			break;
		}
	}
	/* tmp is "[-]d[.ddd]e[+-]xx" */
	for (const char *p = tmp; *p != 'e'; p++) {
		if (*p >= '0' && *p <= '9') {
			digits[n++] = *p;
		}
	}
	*e10 = atoi(strchr(tmp, 'e') + 1);
	return n;
}

/* fpconv's emit_digits(): plain notation for moderate exponents,
 * otherwise d.ddde+x. */
static size_t
emit_digits(char *dst, const char *digits, int nd, int e10)
{
	int k = e10 - (nd - 1); /* value = digits * 10^k */
	int exp = e10 < 0 ? -e10 : e10;
	size_t n = 0;

	if (k >= 0 && exp < nd + 7) {
		memcpy(dst, digits, (size_t)nd);
		memset(dst + nd, '0', (size_t)k);
		return (size_t)(nd + k);
	}
	if (k < 0 && (k > -7 || exp < 4)) {
		int intlen = nd + k;

		if (intlen <= 0) {
			dst[n++] = '0';
			dst[n++] = '.';
			memset(dst + n, '0', (size_t)-intlen);
			n += (size_t)-intlen;
			memcpy(dst + n, digits, (size_t)nd);
			return n + (size_t)nd;
		}
		memcpy(dst, digits, (size_t)intlen);
		dst[intlen] = '.';
		memcpy(dst + intlen + 1, digits + intlen, (size_t)(nd - intlen));
		return (size_t)nd + 1;
	}
	dst[n++] = digits[0];
	if (nd > 1) {
		dst[n++] = '.';
		memcpy(dst + n, digits + 1, (size_t)(nd - 1));
		n += (size_t)(nd - 1);
	}
	dst[n++] = 'e';
	dst[n++] = e10 < 0 ? '-' : '+';
	if (exp > 99) {
		dst[n++] = (char)('0' + exp / 100);
		dst[n++] = (char)('0' + exp / 10 % 10);
	} else if (exp > 9) {
		dst[n++] = (char)('0' + exp / 10);
	}
	dst[n++] = (char)('0' + exp % 10);
	return n;
}

/* Redis 7.4's d2string(): "nan", "inf", "-inf", "0", "-0", integers as
 * integers, anything else in the shortest form that reads back exactly.
 * dst needs 32 bytes. */
static size_t
double2str(char *dst, double d)
{
	char digits[20];
	long long ll;
	size_t n = 0;
	int nd, e10;

	if (isnan(d)) {
		memcpy(dst, "nan", 3);
		return 3;
	}
	if (isinf(d)) {
		if (d < 0) {
			memcpy(dst, "-inf", 4);
			return 4;
		}
		memcpy(dst, "inf", 3);
		return 3;
	}
	if (d == 0) {
		if (signbit(d)) {
			memcpy(dst, "-0", 2);
			return 2;
		}
		dst[0] = '0';
		return 1;
	}
	if (double_is_ll(d, &ll)) {
		return ll2str(dst, ll);
	}
	if (d < 0) {
		dst[n++] = '-';
	}
	nd = shortest_digits(d, digits, &e10);
	return n + emit_digits(dst + n, digits, nd, e10);
}

/* ---- writer ------------------------------------------------------------ */

/* Appends <prefix><v>\r\n: integers, and array and bulk headers. */
static void
add_ll_line(struct resp_buf *b, char prefix, long long v)
{
	char *d = reserve(b, 24);
	size_t n;

	if (d == NULL) {
		return;
	}
	d[0] = prefix;
	n = 1 + ll2str(d + 1, v);
	d[n++] = '\r';
	d[n++] = '\n';
	b->len += n;
}

static void
add_len_line(struct resp_buf *b, char prefix, size_t v)
{
	add_ll_line(b, prefix, v > LLONG_MAX ? LLONG_MAX : (long long)v);
}

/* Appends s with CR and LF replaced by spaces, framed by prefix and CRLF. */
static void
add_line_sanitised(struct resp_buf *b, char prefix, const char *s, size_t n)
{
	char *d;
	size_t i;

	if (n > SIZE_MAX - 3) {
		b->oom = true;
		return;
	}
	d = reserve(b, n + 3);
	if (d == NULL) {
		return;
	}
	d[0] = prefix;
	for (i = 0; i < n; i++) {
		char c = s[i];

		d[i + 1] = c == '\r' || c == '\n' ? ' ' : c;
	}
	d[n + 1] = '\r';
	d[n + 2] = '\n';
	b->len += n + 3;
}

void
resp_add_simple(struct resp_writer *w, const char *s)
{
	/* Sanitised like errors: a stray CRLF would desynchronise the client. */
	add_line_sanitised(w->out, '+', s, strlen(s));
}

void
resp_add_error(struct resp_writer *w, const char *msg)
{
	/* Tolerate a caller passing the dash, as Redis's addReplyError does. */
	if (msg[0] == '-') {
		msg++;
	}
	add_line_sanitised(w->out, '-', msg, strlen(msg));
}

void
resp_add_errorf(struct resp_writer *w, const char *fmt, ...)
{
	char small[256];
	char *s = small;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0) {
		resp_add_error(w, "ERR internal error formatting an error");
		return;
	}
	if ((size_t)n >= sizeof(small)) {
		s = echd_malloc((size_t)n + 1);
		if (s == NULL) {
			w->out->oom = true;
			return;
		}
		va_start(ap, fmt);
		vsnprintf(s, (size_t)n + 1, fmt, ap);
		va_end(ap);
	}
	resp_add_error(w, s);
	if (s != small) {
		echd_free(s);
	}
}

void
resp_add_int(struct resp_writer *w, long long v)
{
	add_ll_line(w->out, ':', v);
}

void
resp_add_bulk(struct resp_writer *w, const void *p, size_t n)
{
	struct resp_buf *b = w->out;
	char hdr[24];
	size_t h;
	char *d;

	hdr[0] = '$';
	h = 1 + ll2str(hdr + 1, n > LLONG_MAX ? LLONG_MAX : (long long)n);
	hdr[h++] = '\r';
	hdr[h++] = '\n';
	if (n > SIZE_MAX - h - 2) {
		b->oom = true;
		return;
	}
	/* One reservation for header, payload and CRLF. */
	d = reserve(b, h + n + 2);
	if (d == NULL) {
		return;
	}
	memcpy(d, hdr, h);
	if (n > 0) {
		memcpy(d + h, p, n);
	}
	d[h + n] = '\r';
	d[h + n + 1] = '\n';
	b->len += h + n + 2;
}

void
resp_add_bulk_cstr(struct resp_writer *w, const char *s)
{
	if (s == NULL) {
		resp_add_null(w);
		return;
	}
	resp_add_bulk(w, s, strlen(s));
}

void
resp_add_bulk_ll(struct resp_writer *w, long long v)
{
	char tmp[24];

	resp_add_bulk(w, tmp, ll2str(tmp, v));
}

void
resp_add_null(struct resp_writer *w)
{
	if (w->proto >= 3) {
		resp_buf_append(w->out, "_\r\n", 3);
	} else {
		resp_buf_append(w->out, "$-1\r\n", 5);
	}
}

void
resp_add_null_array(struct resp_writer *w)
{
	if (w->proto >= 3) {
		resp_buf_append(w->out, "_\r\n", 3);
	} else {
		resp_buf_append(w->out, "*-1\r\n", 5);
	}
}

void
resp_add_array(struct resp_writer *w, size_t n)
{
	add_len_line(w->out, '*', n);
}

void
resp_add_map(struct resp_writer *w, size_t n)
{
	if (w->proto >= 3) {
		add_len_line(w->out, '%', n);
	} else {
		add_len_line(w->out, '*', n > SIZE_MAX / 2 ? SIZE_MAX : n * 2);
	}
}

void
resp_add_set(struct resp_writer *w, size_t n)
{
	add_len_line(w->out, w->proto >= 3 ? '~' : '*', n);
}

void
resp_add_push(struct resp_writer *w, size_t n)
{
	add_len_line(w->out, w->proto >= 3 ? '>' : '*', n);
}

void
resp_add_bool(struct resp_writer *w, bool v)
{
	if (w->proto >= 3) {
		resp_buf_append(w->out, v ? "#t\r\n" : "#f\r\n", 4);
	} else {
		resp_buf_append(w->out, v ? ":1\r\n" : ":0\r\n", 4);
	}
}

void
resp_add_double(struct resp_writer *w, double d)
{
	char tmp[40];
	size_t n;

	if (w->proto >= 3) {
		tmp[0] = ',';
		n = 1 + double2str(tmp + 1, d);
		tmp[n++] = '\r';
		tmp[n++] = '\n';
		resp_buf_append(w->out, tmp, n);
		return;
	}
	resp_add_bulk(w, tmp, double2str(tmp, d));
}

void
resp_add_verbatim(struct resp_writer *w, const char *fmt, const void *p, size_t n)
{
	struct resp_buf *b = w->out;
	char *d;
	size_t h, i;

	if (w->proto < 3) {
		resp_add_bulk(w, p, n);
		return;
	}
	if (n > SIZE_MAX - 40) {
		b->oom = true;
		return;
	}
	d = reserve(b, 24 + 4 + n + 2);
	if (d == NULL) {
		return;
	}
	d[0] = '=';
	h = 1 + ll2str(d + 1, (long long)(n + 4));
	d[h++] = '\r';
	d[h++] = '\n';
	/* Like Redis, a short format is padded with spaces to three bytes. */
	for (i = 0; i < 3; i++) {
		d[h++] = *fmt != '\0' ? *fmt++ : ' ';
	}
	d[h++] = ':';
	if (n > 0) {
		memcpy(d + h, p, n);
	}
	h += n;
	d[h++] = '\r';
	d[h++] = '\n';
	b->len += h;
}

size_t
resp_add_deferred(struct resp_writer *w)
{
	return w->out->len;
}

void
resp_set_deferred_len(struct resp_writer *w, size_t handle, char kind, size_t n)
{
	struct resp_buf *b = w->out;
	char hdr[24];
	size_t h;
	char prefix;

	switch (kind) {
	case '*':
		prefix = '*';
		break;
	case '%':
		prefix = w->proto >= 3 ? '%' : '*';
		if (w->proto < 3) {
			n = n > SIZE_MAX / 2 ? SIZE_MAX : n * 2;
		}
		break;
	case '~':
	case '>':
		prefix = w->proto >= 3 ? kind : '*';
		break;
	default:
		assert(!"resp_set_deferred_len: unknown kind");
		return;
	}
	if (b->oom) {
		return;
	}
	/* The bytes after handle are this reply's elements; the caller must
	 * not have consumed past the handle meanwhile. */
	assert(handle <= b->len);
	hdr[0] = prefix;
	h = 1 + ll2str(hdr + 1, n > LLONG_MAX ? LLONG_MAX : (long long)n);
	hdr[h++] = '\r';
	hdr[h++] = '\n';
	if (reserve(b, h) == NULL) {
		return;
	}
	memmove(b->data + handle + h, b->data + handle, b->len - handle);
	memcpy(b->data + handle, hdr, h);
	b->len += h;
}
