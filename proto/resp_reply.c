/* resp_reply.c - RESP2/RESP3 reply parser (the client side: echo-admin).
 *
 * Stateless: each call parses from the start of what the caller has
 * received. A first pass checks that one whole, valid reply is there and
 * measures it (nodes, element slots, string bytes) without allocating, so
 * incomplete input costs no memory and garbage is refused before any
 * allocation; a second pass builds the tree into one allocation, which
 * makes freeing it (or failing half-way) trivial.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "echd.h"
#include "resp.h"

#define DOUBLE_TEXT_MAX 512 /* longer "," lines are refused, not truncated */

struct pctx {
	const char *buf;
	size_t len;
	size_t pos;
	const struct resp_reply_limits *lim;
	bool build;
	/* pass 1: what the tree needs */
	size_t nnodes;
	size_t nptrs;
	size_t nbytes;
	/* pass 2: the arenas, carved from one block */
	struct resp_reply *nodes;
	struct resp_reply **ptrs;
	char *chars;
};

void
resp_reply_limits_default(struct resp_reply_limits *l)
{
	l->max_depth = 128;
	l->max_bulk_len = 512ULL * 1024 * 1024;
	l->max_elements = (size_t)1 << 31;
	l->max_line_len = 64 * 1024;
}

const char *
resp_reply_type_name(enum resp_reply_type t)
{
	switch (t) {
	case RESP_REPLY_STRING:
		return "string";
	case RESP_REPLY_ERROR:
		return "error";
	case RESP_REPLY_INTEGER:
		return "integer";
	case RESP_REPLY_BULK:
		return "bulk";
	case RESP_REPLY_NULL:
		return "null";
	case RESP_REPLY_ARRAY:
		return "array";
	case RESP_REPLY_MAP:
		return "map";
	case RESP_REPLY_SET:
		return "set";
	case RESP_REPLY_PUSH:
		return "push";
	case RESP_REPLY_DOUBLE:
		return "double";
	case RESP_REPLY_BOOL:
		return "bool";
	case RESP_REPLY_BIGNUM:
		return "bignum";
	case RESP_REPLY_VERBATIM:
		return "verbatim";
	}
	return "unknown";
}

/* ---- lexing ------------------------------------------------------------- */

/* The line at p->pos, without its CRLF; advances past it. A CR must be
 * followed by LF, and a bare LF is garbage, as in no reply Redis sends. */
static int
read_line(struct pctx *p, const char **line, size_t *n)
{
	const char *s = p->buf + p->pos;
	size_t avail = p->len - p->pos;
	size_t scan = avail < p->lim->max_line_len + 1 ? avail : p->lim->max_line_len + 1;
	const char *cr = memchr(s, '\r', scan);
	size_t l;

	if (memchr(s, '\n', cr != NULL ? (size_t)(cr - s) : scan) != NULL) {
		return ECHD_EPROTO;
	}
	if (cr == NULL) {
		return avail > p->lim->max_line_len ? ECHD_EPROTO : -EAGAIN;
	}
	l = (size_t)(cr - s);
	if (l + 1 >= avail) {
		return -EAGAIN;
	}
	if (cr[1] != '\n') {
		return ECHD_EPROTO;
	}
	*line = s;
	*n = l;
	p->pos += l + 2;
	return 0;
}

/* A signed decimal: optional '-', at least one digit, nothing else. */
static bool
parse_ll(const char *s, size_t n, long long *out)
{
	bool neg = false;
	unsigned long long v = 0, limit;
	size_t i = 0;

	if (n > 0 && s[0] == '-') {
		neg = true;
		i = 1;
	}
	if (i == n) {
		return false;
	}
	limit = neg ? (unsigned long long)LLONG_MAX + 1 : (unsigned long long)LLONG_MAX;
	for (; i < n; i++) {
		unsigned d;
		if (s[i] < '0' || s[i] > '9') {
			return false;
		}
		d = (unsigned)(s[i] - '0');
		if (v > (limit - d) / 10) {
			return false;
		}
		v = v * 10 + d;
	}
	if (neg) {
		/* -(LLONG_MAX + 1) without overflowing on the way */
		*out = v == 0 ? 0 : -(long long)(v - 1) - 1;
	} else {
		*out = (long long)v;
	}
	return true;
}

static bool
valid_double(const char *s, size_t n, double *out)
{
	char tmp[DOUBLE_TEXT_MAX + 1];
	char *end;
	bool digit = false;

	if (n == 0 || n > DOUBLE_TEXT_MAX) {
		return false;
	}
	memcpy(tmp, s, n);
	tmp[n] = '\0';
	if (strcmp(tmp, "inf") == 0 || strcmp(tmp, "+inf") == 0) {
		*out = HUGE_VAL;
		return true;
	}
	if (strcmp(tmp, "-inf") == 0) {
		*out = -HUGE_VAL;
		return true;
	}
	if (strcmp(tmp, "nan") == 0 || strcmp(tmp, "-nan") == 0) {
		*out = NAN;
		return true;
	}
	/* strtod() also takes hex, "infinity" and spaces: only the RESP3 form */
	for (size_t i = 0; i < n; i++) {
		char c = tmp[i];
		if (c >= '0' && c <= '9') {
			digit = true;
		} else if (c != '+' && c != '-' && c != '.' && c != 'e' && c != 'E') {
			return false;
		}
	}
	if (!digit) {
		return false;
	}
	*out = strtod(tmp, &end);
	return end == tmp + n;
}

/* ---- building ----------------------------------------------------------- */

static struct resp_reply *
take_node(struct pctx *p)
{
	struct resp_reply *r = &p->nodes[p->nnodes++];

	memset(r, 0, sizeof(*r));
	return r;
}

static struct resp_reply **
take_ptrs(struct pctx *p, size_t n)
{
	struct resp_reply **v = p->ptrs + p->nptrs;

	p->nptrs += n;
	return v;
}

/* Records a string of n bytes (copied in pass 2) on node r. */
static void
set_str(struct pctx *p, struct resp_reply *r, const char *s, size_t n)
{
	if (!p->build) {
		p->nbytes += n + 1;
		return;
	}
	memcpy(p->chars + p->nbytes, s, n);
	p->chars[p->nbytes + n] = '\0';
	r->str = p->chars + p->nbytes;
	r->len = n;
	p->nbytes += n + 1;
}

/* ---- the grammar -------------------------------------------------------- */

static int parse_value(struct pctx *p, size_t depth, struct resp_reply *r);

/* Fixed-length payload after a $ ! = header: n bytes and a CRLF. */
static int
read_blob(struct pctx *p, long long n, const char **data)
{
	size_t avail = p->len - p->pos;

	if (n < 0 || (unsigned long long)n > p->lim->max_bulk_len) {
		return ECHD_EPROTO;
	}
	if (avail < (size_t)n + 2) {
		return -EAGAIN;
	}
	*data = p->buf + p->pos;
	if ((*data)[n] != '\r' || (*data)[n + 1] != '\n') {
		return ECHD_EPROTO;
	}
	p->pos += (size_t)n + 2;
	return 0;
}

/* $?: ;len chunks until ;0. Pass 2 measures the chunks again to size the copy. */
static int
read_streamed_string(struct pctx *p, struct resp_reply *r)
{
	size_t start = p->pos, total = 0;
	int pass;

	for (pass = 0; pass < (p->build ? 2 : 1); pass++) {
		size_t off = 0;
		char *dst = NULL;

		p->pos = start;
		if (pass == 1) {
			dst = p->chars + p->nbytes;
		}
		for (;;) {
			const char *line, *data;
			size_t n;
			long long cl;
			int rc = read_line(p, &line, &n);

			if (rc != 0) {
				return rc;
			}
			if (n < 2 || line[0] != ';' || !parse_ll(line + 1, n - 1, &cl)) {
				return ECHD_EPROTO;
			}
			if (cl == 0) {
				break;
			}
			rc = read_blob(p, cl, &data);
			if (rc != 0) {
				return rc;
			}
			if (pass == 0) {
				total += (size_t)cl;
				if (total > p->lim->max_bulk_len) {
					return ECHD_EPROTO;
				}
			} else {
				memcpy(dst + off, data, (size_t)cl);
				off += (size_t)cl;
			}
		}
		if (pass == 1) {
			dst[off] = '\0';
			r->str = dst;
			r->len = off;
		}
	}
	p->nbytes += total + 1;
	return 0;
}

/* Counts the elements of a streamed aggregate starting at p->pos (after
 * its header), up to the "." end marker; validates them on the way. */
static int
count_streamed(struct pctx *p, size_t depth, size_t *count)
{
	struct pctx q = *p;
	size_t n = 0;

	q.build = false;
	for (;;) {
		int rc;

		if (q.pos >= q.len) {
			return -EAGAIN;
		}
		if (q.buf[q.pos] == '.') {
			const char *line;
			size_t l;
			rc = read_line(&q, &line, &l);
			if (rc != 0) {
				return rc;
			}
			if (l != 1) {
				return ECHD_EPROTO;
			}
			break;
		}
		if (n == q.lim->max_elements) {
			return ECHD_EPROTO;
		}
		rc = parse_value(&q, depth + 1, NULL);
		if (rc != 0) {
			return rc;
		}
		n++;
	}
	*count = n;
	return 0;
}

static int
parse_aggregate(
	struct pctx *p, size_t depth, struct resp_reply *r, char t, const char *hdr, size_t hlen)
{
	size_t n, i;
	bool streamed = hlen == 1 && hdr[0] == '?';
	struct resp_reply **slots = NULL;
	int rc;

	if (depth >= p->lim->max_depth) {
		return ECHD_EPROTO;
	}
	if (streamed) {
		rc = count_streamed(p, depth, &n);
		if (rc != 0) {
			return rc;
		}
		if (t == '%' && n % 2 != 0) {
			return ECHD_EPROTO;
		}
	} else {
		long long ln;
		if (!parse_ll(hdr, hlen, &ln)) {
			return ECHD_EPROTO;
		}
		if (ln == -1 && t == '*') {
			if (r != NULL) {
				r->type = RESP_REPLY_NULL;
			}
			return 0;
		}
		if (ln < 0 || (unsigned long long)ln > p->lim->max_elements) {
			return ECHD_EPROTO;
		}
		n = (size_t)ln;
		if (t == '%' || t == '|') {
			/* the limit counts elements, two per pair */
			if (n > p->lim->max_elements / 2) {
				return ECHD_EPROTO;
			}
			n *= 2;
		}
	}
	if (p->build) {
		slots = take_ptrs(p, n);
		r->elements = n;
		r->element = n > 0 ? slots : NULL;
		switch (t) {
		case '%':
		case '|':
			r->type = RESP_REPLY_MAP;
			break;
		case '~':
			r->type = RESP_REPLY_SET;
			break;
		case '>':
			r->type = RESP_REPLY_PUSH;
			break;
		default:
			r->type = RESP_REPLY_ARRAY;
			break;
		}
	} else {
		p->nptrs += n;
	}
	for (i = 0; i < n; i++) {
		struct resp_reply *child = NULL;
		if (p->build) {
			child = take_node(p);
			slots[i] = child;
		} else {
			p->nnodes++;
		}
		rc = parse_value(p, depth + 1, child);
		if (rc != 0) {
			return rc;
		}
	}
	if (streamed) {
		p->pos += 3; /* ".\r\n", checked by count_streamed() */
	}
	return 0;
}

/* Parses one value at p->pos into r (NULL in pass 1). The caller counted
 * r's node; an attribute adds its own. */
static int
parse_value(struct pctx *p, size_t depth, struct resp_reply *r)
{
	struct resp_reply *attr = NULL;
	const char *line, *data;
	size_t n;
	long long v;
	char t;
	int rc;

again:
	if (p->pos >= p->len) {
		return -EAGAIN;
	}
	t = p->buf[p->pos];
	if (strchr("+-:$_*%~>,#(=!|", t) == NULL || t == '\0') {
		return ECHD_EPROTO;
	}
	p->pos++;
	rc = read_line(p, &line, &n);
	if (rc != 0) {
		return rc;
	}
	if (t == '|') {
		/* An attribute annotates the value after it: keep the last. */
		if (p->build) {
			attr = take_node(p);
		} else {
			p->nnodes++;
		}
		if (n == 1 && line[0] == '?') {
			return ECHD_EPROTO;
		}
		rc = parse_aggregate(p, depth, attr, t, line, n);
		if (rc != 0) {
			return rc;
		}
		goto again;
	}
	if (r != NULL) {
		r->attr = attr;
	}
	switch (t) {
	case '+':
	case '-':
		if (r != NULL) {
			r->type = t == '+' ? RESP_REPLY_STRING : RESP_REPLY_ERROR;
		}
		set_str(p, r, line, n);
		return 0;
	case ':':
		if (!parse_ll(line, n, &v)) {
			return ECHD_EPROTO;
		}
		if (r != NULL) {
			r->type = RESP_REPLY_INTEGER;
			r->integer = v;
		}
		return 0;
	case '_':
		if (n != 0) {
			return ECHD_EPROTO;
		}
		if (r != NULL) {
			r->type = RESP_REPLY_NULL;
		}
		return 0;
	case '#':
		if (n != 1 || (line[0] != 't' && line[0] != 'f')) {
			return ECHD_EPROTO;
		}
		if (r != NULL) {
			r->type = RESP_REPLY_BOOL;
			r->integer = line[0] == 't';
		}
		return 0;
	case ',': {
		double d;
		if (!valid_double(line, n, &d)) {
			return ECHD_EPROTO;
		}
		if (r != NULL) {
			r->type = RESP_REPLY_DOUBLE;
			r->dval = d;
		}
		set_str(p, r, line, n);
		return 0;
	}
	case '(': {
		size_t i = n > 0 && line[0] == '-' ? 1 : 0;
		if (i == n) {
			return ECHD_EPROTO;
		}
		for (; i < n; i++) {
			if (line[i] < '0' || line[i] > '9') {
				return ECHD_EPROTO;
			}
		}
		if (r != NULL) {
			r->type = RESP_REPLY_BIGNUM;
		}
		set_str(p, r, line, n);
		return 0;
	}
	case '$':
		if (n == 1 && line[0] == '?') {
			if (r != NULL) {
				r->type = RESP_REPLY_BULK;
			}
			return read_streamed_string(p, r);
		}
		__attribute__((fallthrough));
	case '!':
	case '=':
		if (!parse_ll(line, n, &v)) {
			return ECHD_EPROTO;
		}
		if (v == -1 && t == '$') {
			if (r != NULL) {
				r->type = RESP_REPLY_NULL;
			}
			return 0;
		}
		rc = read_blob(p, v, &data);
		if (rc != 0) {
			return rc;
		}
		if (t == '=') {
			if (v < 4 || data[3] != ':') {
				return ECHD_EPROTO;
			}
			if (r != NULL) {
				r->type = RESP_REPLY_VERBATIM;
				memcpy(r->fmt, data, 3);
				r->fmt[3] = '\0';
			}
			set_str(p, r, data + 4, (size_t)v - 4);
			return 0;
		}
		if (r != NULL) {
			r->type = t == '$' ? RESP_REPLY_BULK : RESP_REPLY_ERROR;
		}
		set_str(p, r, data, (size_t)v);
		return 0;
	default:
		/* * % ~ > */
		return parse_aggregate(p, depth, r, t, line, n);
	}
}

int
resp_reply_parse(const char *buf, size_t len, const struct resp_reply_limits *lim, size_t *consumed,
	struct resp_reply **out)
{
	struct resp_reply_limits defaults;
	struct pctx p;
	size_t node_bytes, ptr_bytes, total;
	char *block;
	int rc;

	if (lim == NULL) {
		resp_reply_limits_default(&defaults);
		lim = &defaults;
	}
	memset(&p, 0, sizeof(p));
	p.buf = buf;
	p.len = len;
	p.lim = lim;
	p.nnodes = 1; /* the root */
	rc = parse_value(&p, 0, NULL);
	if (rc != 0) {
		return rc;
	}
	/* Every node and slot took at least one input byte, so none of
	 * these products can overflow for an input that fits in memory. */
	node_bytes = p.nnodes * sizeof(struct resp_reply);
	ptr_bytes = p.nptrs * sizeof(struct resp_reply *);
	total = node_bytes + ptr_bytes + p.nbytes;
	block = echd_malloc(total > 0 ? total : 1);
	if (block == NULL) {
		return -ENOMEM;
	}
	p.nodes = (struct resp_reply *)(void *)block;
	p.ptrs = (struct resp_reply **)(void *)(block + node_bytes);
	p.chars = block + node_bytes + ptr_bytes;
	p.build = true;
	p.pos = 0;
	p.nnodes = 0;
	p.nptrs = 0;
	p.nbytes = 0;
	rc = parse_value(&p, 0, take_node(&p));
	if (rc != 0) {
		/* pass 1 accepted these bytes: pass 2 cannot disagree */
		echd_free(block);
		return ECHD_EPROTO;
	}
	*consumed = p.pos;
	*out = p.nodes;
	return 0;
}

void
resp_reply_free(struct resp_reply *r)
{
	echd_free(r);
}
