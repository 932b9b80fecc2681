/* resp_read.c - incremental RESP request reader (multibulk and inline).
 *
 * The rules are those of Redis 7.4's processMultibulkBuffer() and
 * processInlineBuffer(): same error texts, same limits, same quirks (a
 * "*-5" count is an empty request; the two bytes after a bulk are skipped,
 * not checked). Unlike Redis, a line that is too long is refused whatever
 * way its bytes were split across feeds, so results never depend on
 * packet boundaries.
 *
 * Requests are parsed in place: arguments point into the input buffer, and
 * inline arguments are unescaped over their own quoted text (the output
 * never overtakes the input). Positions are kept relative to the start of
 * the current request because feeding may move the buffer.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "echd.h"
#include "resp.h"

#define HDR_MAX   (64 * 1024)   /* PROTO_INLINE_MAX_SIZE: longest *N or $L line */
#define BIG_ARG   (32 * 1024)   /* PROTO_MBULK_BIG_ARG: room is made in advance */
#define BIG_ROOM  (1024 * 1024) /* but no more than this on a bare $L claim */
#define ARGV_KEEP 1024          /* argv entries kept from one request to the next */
#define BUF_INIT  (16 * 1024)   /* PROTO_IOBUF_LEN */
#define BUF_KEEP  (256 * 1024)  /* an idle buffer larger than this is shrunk */

enum req_type {
	REQ_NONE,
	REQ_INLINE,
	REQ_MULTIBULK,
};

struct resp_reader {
	char *buf;
	size_t cap;
	size_t len;    /* bytes in buf */
	size_t pos;    /* start of the current request; bytes before are consumed */
	size_t cur;    /* parse cursor, relative to pos */
	size_t seek;   /* where the search for a line end resumes, relative to pos */
	bool returned; /* the request [pos, pos + cur) was handed out */

	enum req_type type;
	long long mb_left; /* bulks still expected; 0 until the *N line is read */
	long long bulklen; /* -1 until the $L line is read */

	int argc;
	int arg_cap;
	size_t *off;           /* argument offsets relative to pos */
	struct resp_arg *argv; /* lengths while parsing, pointers once complete */

	struct resp_limits lim;      /* in force for the current request */
	struct resp_limits lim_next; /* from resp_reader_set_limits() */
	int err;                     /* sticky failure code, 0 while healthy */
	char errstr[128];
};

void
resp_limits_default(struct resp_limits *l)
{
	l->max_bulk_len = 512ULL * 1024 * 1024;
	l->max_multibulk_len = 1024 * 1024;
	l->max_inline_len = 64 * 1024;
	l->max_query_buf = 1024ULL * 1024 * 1024;
}

struct resp_reader *
resp_reader_create(const struct resp_limits *lim)
{
	struct resp_reader *r;

	r = echd_calloc(1, sizeof(*r));
	if (r == NULL) {
		return NULL;
	}
	/* The buffer is allocated by the first feed: idle connections cost little. */
	r->bulklen = -1;
	if (lim != NULL) {
		r->lim_next = *lim;
	} else {
		resp_limits_default(&r->lim_next);
	}
	r->lim = r->lim_next;
	return r;
}

void
resp_reader_destroy(struct resp_reader *r)
{
	if (r == NULL) {
		return;
	}
	echd_free(r->buf);
	echd_free(r->off);
	echd_free(r->argv);
	echd_free(r);
}

void
resp_reader_set_limits(struct resp_reader *r, const struct resp_limits *lim)
{
	r->lim_next = *lim;
}

const char *
resp_reader_errstr(const struct resp_reader *r)
{
	return r->errstr;
}

size_t
resp_reader_pending(const struct resp_reader *r)
{
	return r->len - r->pos - (r->returned ? r->cur : 0);
}

size_t
resp_reader_capacity(const struct resp_reader *r)
{
	return r->cap;
}

static int
fail(struct resp_reader *r, int err, const char *msg)
{
	r->err = err;
	snprintf(r->errstr, sizeof(r->errstr), "%s", msg);
	return err;
}

/* Forgets the request handed out by the previous resp_reader_next(). */
static void
drop_returned(struct resp_reader *r)
{
	if (r->returned) {
		r->pos += r->cur;
		r->cur = 0;
		r->seek = 0;
		r->argc = 0;
		r->returned = false;
	}
	if (r->pos == r->len) {
		r->pos = 0;
		r->len = 0;
	}
}

/* Makes room for need bytes counted from pos. Consumed bytes are reclaimed
 * first, so only the unparsed tail is ever moved, and at most once per
 * request (pos is 0 afterwards). */
static int
make_room(struct resp_reader *r, size_t need)
{
	size_t live = r->len - r->pos;
	size_t ncap;
	char *nb;

	if (r->cap - r->pos >= need) {
		return 0;
	}
	if (need <= r->cap) {
		memmove(r->buf, r->buf + r->pos, live);
		r->len = live;
		r->pos = 0;
		return 0;
	}
	ncap = r->cap < BUF_INIT ? BUF_INIT : r->cap;
	while (ncap < need) {
		ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
	}
	if (r->pos == 0) {
		/* realloc may remap large blocks instead of copying them */
		nb = echd_realloc(r->buf, ncap);
		if (nb == NULL) {
			return -ENOMEM;
		}
	} else {
		nb = echd_malloc(ncap);
		if (nb == NULL) {
			return -ENOMEM;
		}
		if (live > 0) {
			memcpy(nb, r->buf + r->pos, live);
		}
		echd_free(r->buf);
		r->len = live;
		r->pos = 0;
	}
	r->buf = nb;
	r->cap = ncap;
	return 0;
}

int
resp_reader_feed(struct resp_reader *r, const char *buf, size_t len)
{
	size_t pending;
	int rc;

	if (r->err != 0) {
		return r->err;
	}
	drop_returned(r);
	if (len == 0) {
		return 0;
	}
	pending = r->len - r->pos;
	if (len > r->lim_next.max_query_buf || pending > r->lim_next.max_query_buf - len) {
		return fail(r, ECHD_ELIMIT, "client query buffer limit reached");
	}
	if (pending == 0 && r->cap > BUF_KEEP && len < BUF_KEEP) {
		/* Give back the room a big request needed once. */
		ECHD_FREE(r->buf);
		r->cap = 0;
		r->len = 0;
		r->pos = 0;
	}
	rc = make_room(r, pending + len);
	if (rc != 0) {
		return rc;
	}
	memcpy(r->buf + r->len, buf, len);
	r->len += len;
	return 0;
}

/* Looks for byte c at most max bytes past cur (so a line may be max bytes
 * long). The search resumes where it stopped, so a line trickling in byte
 * by byte is scanned once. Sets *at relative to pos. */
static bool
find_eol(struct resp_reader *r, char c, size_t max, size_t *at)
{
	size_t avail = r->len - r->pos;
	size_t end = avail;
	const char *base = r->buf + r->pos;
	const char *hit;

	if (max < avail - r->cur) {
		end = r->cur + max + 1;
	}
	if (r->seek < r->cur) {
		r->seek = r->cur;
	}
	hit = r->seek < end ? memchr(base + r->seek, c, end - r->seek) : NULL;
	if (hit == NULL) {
		r->seek = end;
		return false;
	}
	*at = (size_t)(hit - base);
	r->seek = *at;
	return true;
}

static int
argv_reserve(struct resp_reader *r, size_t want)
{
	size_t *noff;
	struct resp_arg *nargv;

	if (want <= (size_t)r->arg_cap) {
		return 0;
	}
	if (want > INT_MAX) {
		return -ENOMEM;
	}
	noff = echd_realloc(r->off, want * sizeof(*noff));
	if (noff == NULL) {
		return -ENOMEM;
	}
	r->off = noff;
	nargv = echd_realloc(r->argv, want * sizeof(*nargv));
	if (nargv == NULL) {
		return -ENOMEM;
	}
	r->argv = nargv;
	r->arg_cap = (int)want;
	return 0;
}

static void
start_request(struct resp_reader *r)
{
	r->type = r->buf[r->pos] == '*' ? REQ_MULTIBULK : REQ_INLINE;
	r->lim = r->lim_next;
	r->mb_left = 0;
	r->bulklen = -1;
	r->argc = 0;
	r->cur = 0;
	r->seek = 0;
	if (r->arg_cap > ARGV_KEEP) {
		/* One huge request should not pin its argv for the connection's life. */
		ECHD_FREE(r->off);
		ECHD_FREE(r->argv);
		r->arg_cap = 0;
	}
}

/* ---- multibulk --------------------------------------------------------- */

static int
add_bulk(struct resp_reader *r)
{
	int rc;

	if (r->argc == r->arg_cap) {
		/* Grow geometrically, but never past what the *N line announced:
		 * a client claiming a million arguments gets them only as they come. */
		size_t total = (size_t)r->argc + (size_t)r->mb_left;
		size_t want = r->arg_cap < 8 ? 8 : (size_t)r->arg_cap * 2;

		if (want > total) {
			want = total;
		}
		rc = argv_reserve(r, want);
		if (rc != 0) {
			return rc;
		}
	}
	r->off[r->argc] = r->cur;
	r->argv[r->argc].len = (size_t)r->bulklen;
	r->argc++;
	return 0;
}

/* The usual bulk header, "$" and 1 to 9 digits (no leading zero) then CR
 * with a byte after it, read in one pass: *len and the CR's offset *nl.
 * Anything else (longer, partial, malformed) is left to the general path,
 * which gives the same answer for these. */
static bool
quick_bulk_len(const char *base, size_t cur, size_t avail, long long *len, size_t *nl)
{
	long long v = 0;
	size_t i = cur + 1;

	if (base[cur] != '$' || i + 1 >= avail || base[i] < '0' || base[i] > '9' ||
		(base[i] == '0' && base[i + 1] != '\r')) {
		return false;
	}
	for (; i < avail && i - cur <= 10; i++) {
		unsigned d = (unsigned)(base[i] - '0');
		if (base[i] == '\r') {
			if (i + 1 >= avail) {
				return false;
			}
			*len = v;
			*nl = i;
			return true;
		}
		if (d > 9) {
			return false;
		}
		v = v * 10 + d;
	}
	return false;
}

static int
parse_multibulk(struct resp_reader *r)
{
	size_t avail = r->len - r->pos;
	const char *base = r->buf + r->pos;
	size_t nl;
	long long ll;
	int rc;

	if (r->mb_left == 0) {
		if (!find_eol(r, '\r', HDR_MAX, &nl)) {
			if (avail - r->cur > HDR_MAX) {
				return fail(r, ECHD_EPROTO, "too big mbulk count string");
			}
			return -EAGAIN;
		}
		/* Like Redis: the byte after \r must be there, but is not checked. */
		if (nl + 1 >= avail) {
			return -EAGAIN;
		}
		if (!echd_str2ll(base + r->cur + 1, nl - r->cur - 1, &ll) || ll > INT_MAX ||
			(ll > 0 && (unsigned long long)ll > r->lim.max_multibulk_len)) {
			return fail(r, ECHD_EPROTO, "invalid multibulk length");
		}
		r->cur = nl + 2;
		r->seek = r->cur;
		if (ll <= 0) {
			return 0;
		}
		r->mb_left = ll;
	}

	while (r->mb_left > 0) {
		if (r->bulklen < 0 && quick_bulk_len(base, r->cur, avail, &ll, &nl) &&
			(unsigned long long)ll <= r->lim.max_bulk_len && ll < BIG_ARG) {
			r->cur = nl + 2;
			r->seek = r->cur;
			r->bulklen = ll;
		} else if (r->bulklen < 0) {
			if (!find_eol(r, '\r', HDR_MAX, &nl)) {
				if (avail - r->cur > HDR_MAX) {
					return fail(r, ECHD_EPROTO, "too big bulk count string");
				}
				return -EAGAIN;
			}
			if (nl + 1 >= avail) {
				return -EAGAIN;
			}
			if (base[r->cur] != '$') {
				char msg[32];
				/* A NUL would cut errstr short; CR and LF become spaces
				 * on the wire anyway. */
				char got = base[r->cur] == '\0' ? ' ' : base[r->cur];

				snprintf(msg, sizeof(msg), "expected '$', got '%c'", got);
				return fail(r, ECHD_EPROTO, msg);
			}
			if (!echd_str2ll(base + r->cur + 1, nl - r->cur - 1, &ll) || ll < 0 ||
				(unsigned long long)ll > r->lim.max_bulk_len ||
				(unsigned long long)ll > SIZE_MAX - 2) {
				return fail(r, ECHD_EPROTO, "invalid bulk length");
			}
			r->cur = nl + 2;
			r->seek = r->cur;
			r->bulklen = ll;
			if (ll >= BIG_ARG && avail - r->cur <= (size_t)ll + 2) {
				/* Make room now so the argument lands in place instead
				 * of being moved by repeated growth. Redis reserves all
				 * of it; here a 16-byte "$536870912" costs about
				 * BIG_ROOM, and bigger arguments grow by doubling as
				 * they arrive. A failure only loses the hint: the feed
				 * that needs the room reports it. */
				size_t want = (size_t)ll + 2 < BIG_ROOM ? (size_t)ll + 2 : BIG_ROOM;

				(void)make_room(r, r->cur + want);
				base = r->buf + r->pos;
			}
		}
		if (avail - r->cur < (size_t)r->bulklen + 2) {
			return -EAGAIN;
		}
		rc = add_bulk(r);
		if (rc != 0) {
			return rc;
		}
		r->cur += (size_t)r->bulklen + 2;
		r->seek = r->cur;
		r->bulklen = -1;
		r->mb_left--;
	}
	return 0;
}

/* ---- inline ------------------------------------------------------------ */

/* isspace() in the C locale, without the locale lookup. */
static bool
is_space(int c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static bool
is_hex(int c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int
hex_val(int c)
{
	if (c <= '9') {
		return c - '0';
	}
	return (c | 0x20) - 'a' + 10;
}

/* The byte at i of the line, or -1 past its end (where sdssplitargs sees
 * the terminating NUL). */
static int
at(const char *s, size_t i, size_t end)
{
	return i < end ? (unsigned char)s[i] : -1;
}

/* Splits s[start, end) as sdssplitargs() does, unescaping each argument
 * over its own text. A NUL byte inside the line is an ordinary byte here,
 * where Redis would stop at it. */
static int
split_inline(struct resp_reader *r, size_t start, size_t end)
{
	char *s = r->buf + r->pos;
	size_t p = start;

	for (;;) {
		size_t tok, out;
		bool inq = false, insq = false, done = false;

		while (p < end && is_space((unsigned char)s[p])) {
			p++;
		}
		if (p == end) {
			return 0;
		}
		tok = p;
		out = p;
		while (!done) {
			int c = at(s, p, end);

			if (inq) {
				if (c == '\\' && at(s, p + 1, end) == 'x' &&
					is_hex(at(s, p + 2, end)) && is_hex(at(s, p + 3, end))) {
					s[out++] =
						(char)(hex_val(s[p + 2]) * 16 + hex_val(s[p + 3]));
					p += 3;
				} else if (c == '\\' && at(s, p + 1, end) != -1) {
					p++;
					switch (s[p]) {
					case 'n':
						c = '\n';
						break;
					case 'r':
						c = '\r';
						break;
					case 't':
						c = '\t';
						break;
					case 'b':
						c = '\b';
						break;
					case 'a':
						c = '\a';
						break;
					default:
						c = (unsigned char)s[p];
						break;
					}
					s[out++] = (char)c;
				} else if (c == '"') {
					/* the closing quote must end the argument */
					if (at(s, p + 1, end) != -1 &&
						!is_space(at(s, p + 1, end))) {
						goto unbalanced;
					}
					done = true;
				} else if (c == -1) {
					goto unbalanced;
				} else {
					s[out++] = (char)c;
				}
			} else if (insq) {
				if (c == '\\' && at(s, p + 1, end) == '\'') {
					p++;
					s[out++] = '\'';
				} else if (c == '\'') {
					if (at(s, p + 1, end) != -1 &&
						!is_space(at(s, p + 1, end))) {
						goto unbalanced;
					}
					done = true;
				} else if (c == -1) {
					goto unbalanced;
				} else {
					s[out++] = (char)c;
				}
			} else {
				switch (c) {
				case ' ':
				case '\n':
				case '\r':
				case '\t':
				case -1:
					done = true;
					break;
				case '"':
					inq = true;
					break;
				case '\'':
					insq = true;
					break;
				default:
					s[out++] = (char)c;
					break;
				}
			}
			if (p < end) {
				p++;
			}
		}
		/* argv_reserve() made room for every possible argument */
		r->off[r->argc] = tok;
		r->argv[r->argc].len = out - tok;
		r->argc++;
	}

unbalanced:
	return fail(r, ECHD_EPROTO, "unbalanced quotes in request");
}

static int
parse_inline(struct resp_reader *r)
{
	size_t avail = r->len - r->pos;
	size_t nl, end;
	int rc;

	if (!find_eol(r, '\n', r->lim.max_inline_len, &nl)) {
		if (avail - r->cur > r->lim.max_inline_len) {
			return fail(r, ECHD_EPROTO, "too big inline request");
		}
		return -EAGAIN;
	}
	end = nl;
	if (end > r->cur && r->buf[r->pos + end - 1] == '\r') {
		end--;
	}
	/* Reserve for the most arguments the line can hold before unescaping in
	 * place: once the text is rewritten, the split cannot be retried. */
	rc = argv_reserve(r, (end - r->cur + 1) / 2 + 1);
	if (rc != 0) {
		return rc;
	}
	rc = split_inline(r, r->cur, end);
	if (rc != 0) {
		return rc;
	}
	r->cur = nl + 1;
	r->seek = r->cur;
	return 0;
}

int
resp_reader_next(struct resp_reader *r, int *argc, struct resp_arg **argv)
{
	char *base;
	int rc, i;

	if (r->err != 0) {
		return ECHD_EPROTO;
	}
	drop_returned(r);
	if (r->type == REQ_NONE) {
		if (r->pos == r->len) {
			return -EAGAIN;
		}
		start_request(r);
	}
	rc = r->type == REQ_INLINE ? parse_inline(r) : parse_multibulk(r);
	if (rc != 0) {
		return rc;
	}

	/* Complete: the buffer no longer moves before the next call. */
	base = r->buf + r->pos;
	for (i = 0; i < r->argc; i++) {
		char *p = base + r->off[i];

		/* The byte after an argument is its CR (or delimiter) and belongs
		 * to this request. */
		p[r->argv[i].len] = '\0';
		r->argv[i].p = p;
	}
	r->type = REQ_NONE;
	r->returned = true;
	*argc = r->argc;
	*argv = r->argv;
	return 0;
}
