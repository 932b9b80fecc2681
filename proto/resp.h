/* resp.h - RESP2/RESP3 request reader and reply writer.
 *
 * proto/ knows nothing of sockets, event loops or storage: the reader is
 * fed bytes and yields requests; the writer appends replies to a byte
 * buffer that the caller sends. Single-threaded use per object.
 */
#ifndef ECHD_PROTO_RESP_H
#define ECHD_PROTO_RESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- request reader ---------------------------------------------------- */

struct resp_reader;

struct resp_limits {
	size_t max_bulk_len;      /* proto-max-bulk-len, default 512 MiB */
	size_t max_multibulk_len; /* elements in one request, default 1024*1024 */
	size_t max_inline_len;    /* one inline command line, default 64 KiB */
	size_t max_query_buf;     /* client-query-buffer-limit, default 1 GiB */
};

/* Fills l with the Redis defaults. */
void resp_limits_default(struct resp_limits *l);

/* One argument of a request: borrowed, valid until the next call of
 * resp_reader_feed() or resp_reader_next() on the same reader. Arguments
 * are NUL-terminated at p[len] for convenience (binary data may hold NULs). */
struct resp_arg {
	const char *p;
	size_t len;
};

/* Returns owned (free with resp_reader_destroy()), or NULL on ENOMEM.
 * Borrows lim (copied). */
struct resp_reader *resp_reader_create(const struct resp_limits *lim);
void resp_reader_destroy(struct resp_reader *r);
/* Changes the limits for requests not yet started. Borrows lim (copied). */
void resp_reader_set_limits(struct resp_reader *r, const struct resp_limits *lim);

/* Appends bytes. Borrows buf (copied). Returns 0, -ENOMEM, or ECHD_ELIMIT
 * when the buffered, unparsed input would exceed max_query_buf (the reader
 * is then failed, see resp_reader_errstr()). A failed reader takes no more
 * input and returns the code it failed with (ECHD_ELIMIT or ECHD_EPROTO). */
int resp_reader_feed(struct resp_reader *r, const char *buf, size_t len);

/* Parses the next complete request.
 *   0           *argc and *argv set (argv borrowed, see struct resp_arg);
 *               *argc may be 0 for an empty inline line or "*0\r\n" and
 *               "*-1\r\n", which the caller ignores as Redis does.
 *   -EAGAIN     need more input.
 *   ECHD_EPROTO protocol error; resp_reader_errstr() says what, in the
 *               words Redis uses after "Protocol error: ". The reader stays
 *               failed. -ENOMEM on allocation failure. */
int resp_reader_next(struct resp_reader *r, int *argc, struct resp_arg **argv);

/* Returns borrowed text (valid while r lives), "" when not failed. */
const char *resp_reader_errstr(const struct resp_reader *r);
/* Bytes fed but not yet consumed by a returned request. */
size_t resp_reader_pending(const struct resp_reader *r);
/* Bytes of buffer memory held (for CLIENT LIST qbuf/qbuf-free style stats). */
size_t resp_reader_capacity(const struct resp_reader *r);

/* ---- reply buffer and writer ------------------------------------------- */

/* A growable byte buffer; replies are appended to it. Allocation failure
 * is sticky: the buffer sets oom and further appends are ignored, so a
 * reply is never silently half-written without the caller able to see.
 * Growing len past a non-zero limit fails the same way and also sets
 * over_limit (the buffer may hold up to twice limit before it notices). */
struct resp_buf {
	char *data;
	size_t len;
	size_t cap;
	size_t limit;
	bool oom;
	bool over_limit;
};

void resp_buf_init(struct resp_buf *b);
void resp_buf_finish(struct resp_buf *b);
/* Drops the first n bytes (after they were sent). */
void resp_buf_consume(struct resp_buf *b, size_t n);
void resp_buf_truncate(struct resp_buf *b, size_t len);
void resp_buf_append(struct resp_buf *b, const void *p, size_t n);
/* Appends printf-formatted text of any length (never cut short); a
 * formatting error sets oom like a failed allocation. */
void resp_buf_printf(struct resp_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* The writer appends replies in protocol version proto (2 or 3) to out.
 * It is a plain struct so connections can embed it. */
struct resp_writer {
	struct resp_buf *out; /* borrowed */
	int proto;            /* 2 or 3 */
};

void resp_add_simple(struct resp_writer *w, const char *s);  /* +s */
/* -msg; msg is the whole error text, e.g. "ERR syntax error" (no dash, no CRLF).
 * CR and LF in msg are replaced by spaces, as Redis does. */
void resp_add_error(struct resp_writer *w, const char *msg);
void resp_add_errorf(struct resp_writer *w, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void resp_add_int(struct resp_writer *w, long long v);       /* :v */
void resp_add_bulk(struct resp_writer *w, const void *p, size_t n);
void resp_add_bulk_cstr(struct resp_writer *w, const char *s);
void resp_add_bulk_ll(struct resp_writer *w, long long v);   /* integer as bulk */
void resp_add_null(struct resp_writer *w);        /* RESP3 _ ; RESP2 $-1 */
void resp_add_null_array(struct resp_writer *w);  /* RESP3 _ ; RESP2 *-1 */
void resp_add_array(struct resp_writer *w, size_t n);
void resp_add_map(struct resp_writer *w, size_t n);  /* RESP2: array of 2n */
void resp_add_set(struct resp_writer *w, size_t n);  /* RESP2: array */
void resp_add_push(struct resp_writer *w, size_t n); /* RESP2: array */
void resp_add_bool(struct resp_writer *w, bool v);   /* RESP2: :1 / :0 */
/* RESP3 ,d ; RESP2 bulk string of the same text. The text is Redis 7.4's
 * d2string(): "inf", "-inf", "nan", "0", "-0", integral values as integers,
 * others in the shortest form that reads back exactly ("0.1", "1.5e-7"). */
void resp_add_double(struct resp_writer *w, double d);
/* RESP3 =len\r\nfmt:text ; RESP2 plain bulk. fmt is 3 chars, e.g. "txt". */
void resp_add_verbatim(struct resp_writer *w, const char *fmt, const void *p, size_t n);

/* Deferred aggregate length, for replies whose size is known only after
 * the elements are written: returns a handle; resp_set_deferred_len()
 * later patches it in (kind: '*' array, '%' map (n pairs), '~' set). */
size_t resp_add_deferred(struct resp_writer *w);
void resp_set_deferred_len(struct resp_writer *w, size_t handle, char kind, size_t n);

/* ---- reply parser ------------------------------------------------------ */

/* What a client reads back: one reply of RESP2 or RESP3 as a tree. The
 * parser is stateless; the caller keeps the bytes received so far and
 * calls resp_reply_parse() again with more of them after -EAGAIN. */

enum resp_reply_type {
	RESP_REPLY_STRING,   /* +simple */
	RESP_REPLY_ERROR,    /* -simple error, or !blob error */
	RESP_REPLY_INTEGER,  /* :n */
	RESP_REPLY_BULK,     /* $len (also a streamed $? string) */
	RESP_REPLY_NULL,     /* _ , and RESP2's $-1 and *-1 */
	RESP_REPLY_ARRAY,    /* *n */
	RESP_REPLY_MAP,      /* %n: elements are key, value, key, value ... */
	RESP_REPLY_SET,      /* ~n */
	RESP_REPLY_PUSH,     /* >n */
	RESP_REPLY_DOUBLE,   /* ,d: dval, and the text in str */
	RESP_REPLY_BOOL,     /* #t / #f: integer 1 / 0 */
	RESP_REPLY_BIGNUM,   /* (digits: the text in str */
	RESP_REPLY_VERBATIM, /* =len fmt:text: fmt, and the text in str */
};

/* One node. STRING, ERROR, BULK, DOUBLE, BIGNUM and VERBATIM carry text
 * in str, NUL-terminated at str[len] (it may hold NULs too);
 * str is NULL for the other types. Every node of a tree lives in the root's
 * allocation: free the root only. */
struct resp_reply {
	enum resp_reply_type type;
	const char *str;
	size_t len;
	long long integer;           /* INTEGER; BOOL as 0 or 1 */
	double dval;                 /* DOUBLE */
	char fmt[4];                 /* VERBATIM: "txt", "mkd" */
	size_t elements;             /* aggregates; a MAP holds 2 per pair */
	struct resp_reply **element; /* borrowed from the root */
	struct resp_reply *attr;     /* a |n attribute sent before this reply, as a MAP, or NULL */
};

struct resp_reply_limits {
	size_t max_depth;     /* nesting of aggregates, default 128 */
	size_t max_bulk_len;  /* one string, default 512 MiB */
	size_t max_elements;  /* one aggregate, default 2^31 */
	size_t max_line_len;  /* a line (+, -, :, headers), default 64 KiB */
};

/* Fills l with the defaults above. */
void resp_reply_limits_default(struct resp_reply_limits *l);

/* Parses the reply at the start of buf[0, len). Borrows buf (strings are
 * copied into the tree). lim may be NULL (the defaults).
 *   0           *out is the reply, owned (free with resp_reply_free()),
 *               and *consumed the bytes it took from buf.
 *   -EAGAIN     buf holds the start of a reply, not all of it (or nothing).
 *   ECHD_EPROTO buf does not start with a valid reply, or a limit was
 *               passed; the stream cannot be resynchronised.
 *   -ENOMEM     allocation failed.
 * Streamed strings ($?) and aggregates (*?, %?, ~?, >?) are assembled
 * into ordinary BULK and aggregate nodes. Any thread; no shared state. */
int resp_reply_parse(const char *buf, size_t len, const struct resp_reply_limits *lim,
	size_t *consumed, struct resp_reply **out);

/* Frees a tree returned by resp_reply_parse(). NULL is a no-op. */
void resp_reply_free(struct resp_reply *r);

/* The type's name ("string", "error", "map", ...), borrowed static. */
const char *resp_reply_type_name(enum resp_reply_type t);

#endif
