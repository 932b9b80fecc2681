/* fuzz_resp.c - libFuzzer harness for proto/: the request reader and the
 * reply writer.
 *
 * The input is a byte stream as a client would send it. It is parsed
 *   1. fed whole,
 *   2. fed in pieces of random sizes (the PRNG is seeded from the input,
 *      so a saved crash replays exactly),
 *   3. fed one byte at a time (inputs up to 4 KiB),
 * and the three transcripts (every request's arguments, then how the input
 * ended: need-more with N bytes pending, or the error and its text) must be
 * identical: resp_read.c promises results that never depend on packet
 * boundaries. Limits come from the input hash, from the Redis defaults down
 * to a few bytes, and change between requests as CONFIG SET would.
 *
 * Every request is echoed through the writer in a mix of reply types, in
 * RESP2 and RESP3, and the output must parse as exactly one well-formed
 * reply per request (fuzz_common.h). A last pass injects one allocation
 * failure and only asks for no crash and no leak.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "echd.h"
#include "resp.h"

#include "fuzz_common.h"

#define BYTEWISE_MAX 4096

struct transcript {
	uint64_t h;       /* hash of every request returned */
	unsigned nreq;
	int end;          /* -EAGAIN or the error code */
	size_t pending;   /* at -EAGAIN */
	char errstr[128]; /* at an error */
};

static void
limits_pick(uint64_t seed, struct resp_limits *l)
{
	resp_limits_default(l);
	switch (seed % 4) {
	case 0:
		break; /* the Redis defaults */
	case 1:
		l->max_bulk_len = 1 + seed / 4 % 64;
		l->max_multibulk_len = 1 + seed / 256 % 16;
		l->max_inline_len = 1 + seed / 4096 % 64;
		break;
	case 2:
		l->max_inline_len = 4 + seed / 4 % 512;
		break;
	case 3:
		l->max_bulk_len = seed / 4 % 40000; /* around BIG_ARG */
		l->max_multibulk_len = 1 + seed / 1024 % 2000;
		break;
	}
}

/* Echoes one request through the writer as one reply: an array (or a map,
 * set or push in RESP3) whose elements take their type from the argument. */
static void
echo_request(struct resp_writer *w, int argc, const struct resp_arg *argv, uint64_t *rng)
{
	size_t h = resp_add_deferred(w);
	size_t n = 0;
	char kind = "*~%"[fuzz_rand(rng) % 3];

	for (int i = 0; i < argc; i++) {
		const struct resp_arg *a = &argv[i];
		unsigned sel = a->len ? (unsigned char)a->p[0] % 16 : 0;

		switch (sel) {
		case 0:
		case 1:
		case 2:
		case 3:
			resp_add_bulk(w, a->p, a->len);
			break;
		case 4:
			resp_add_error(w, a->p); /* up to the first NUL */
			break;
		case 5:
			resp_add_simple(w, a->p);
			break;
		case 6:
			resp_add_int(w, strtoll(a->p, NULL, 10));
			break;
		case 7:
			resp_add_double(w, strtod(a->p, NULL));
			break;
		case 8:
			resp_add_verbatim(w, "txt", a->p, a->len);
			break;
		case 9:
			resp_add_bool(w, a->len % 2 == 0);
			break;
		case 10:
			resp_add_null(w);
			break;
		case 11:
			resp_add_null_array(w);
			break;
		case 12:
			/* longer than resp_add_errorf's stack buffer */
			resp_add_errorf(w, "ERR %.*s %.*s", (int)a->len, a->p, (int)a->len, a->p);
			break;
		case 13:
			resp_add_bulk_ll(w, (long long)fuzz_rand(rng));
			break;
		case 14: {
			/* a nested aggregate: map of the argument's bytes */
			size_t m = a->len < 4 ? a->len : 4;
			resp_add_map(w, m);
			for (size_t k = 0; k < m; k++) {
				resp_add_bulk(w, a->p + k, 1);
				resp_add_int(w, (unsigned char)a->p[k]);
			}
			break;
		}
		default: {
			double d;
			memcpy(&d, &(uint64_t){fuzz_rand(rng)}, sizeof(d));
			resp_add_double(w, d); /* any bit pattern: nan, inf, subnormal */
			break;
		}
		}
		n++;
	}
	if (kind == '%') {
		/* a map needs pairs: pad with a null value */
		if (n % 2) {
			resp_add_null(w);
			n++;
		}
		resp_set_deferred_len(w, h, '%', n / 2);
	} else {
		resp_set_deferred_len(w, h, kind, n);
	}
}

/* Takes the requests the reader has; returns false once it ended. */
static bool
drain(struct resp_reader *r, struct transcript *t, uint64_t limseed, struct resp_writer *w,
	uint64_t *rng)
{
	for (;;) {
		struct resp_arg *argv;
		int argc, rc;

		rc = resp_reader_next(r, &argc, &argv);
		if (rc == -EAGAIN) {
			t->end = -EAGAIN;
			t->pending = resp_reader_pending(r);
			return true;
		}
		if (rc != 0) {
			t->end = rc;
			snprintf(t->errstr, sizeof(t->errstr), "%s", resp_reader_errstr(r));
			if (rc == ECHD_EPROTO && resp_reader_errstr(r)[0] == '\0') {
				fuzz_fail("protocol error without a text", "", 0);
			}
			return false;
		}
		if (argc < 0) {
			fuzz_fail("negative argc", "", 0);
		}
		t->h = fuzz_hash(t->h, &argc, sizeof(argc));
		for (int i = 0; i < argc; i++) {
			if (argv[i].p[argv[i].len] != '\0') {
				fuzz_fail("argument not NUL-terminated", argv[i].p, argv[i].len);
			}
			t->h = fuzz_hash(t->h, &argv[i].len, sizeof(argv[i].len));
			t->h = fuzz_hash(t->h, argv[i].p, argv[i].len);
		}
		t->nreq++;
		if (w != NULL) {
			echo_request(w, argc, argv, rng);
			if (t->nreq % 3 == 0) {
				w->proto = w->proto == 2 ? 3 : 2;
			}
		}
		if (t->nreq % 4 == 0) {
			/* as CONFIG SET does: applies from the next request */
			struct resp_limits l;
			limits_pick(limseed + t->nreq, &l);
			resp_reader_set_limits(r, &l);
		}
	}
}

/* mode 0: whole; 1: random pieces; 2: byte by byte. */
static void
run(const uint8_t *data, size_t size, int mode, uint64_t seed, struct transcript *t,
	struct resp_buf *out, bool tolerant)
{
	struct resp_limits lim;
	struct resp_reader *r;
	struct resp_writer w = {out, 2};
	uint64_t rng = seed ^ 0x5eed;
	size_t off = 0;
	bool live = true;
	int rc;

	memset(t, 0, sizeof(*t));
	limits_pick(seed, &lim);
	r = resp_reader_create(&lim);
	if (r == NULL && tolerant) {
		return;
	}
	if (r == NULL) {
		fuzz_fail("resp_reader_create failed", "", 0);
	}
	while (off < size && live) {
		size_t n = size - off;

		if (mode == 1) {
			uint64_t x = fuzz_rand(&rng);
			n = x % 4 == 0 ? 1 + x / 4 % 3 : 1 + x / 4 % 700;
		} else if (mode == 2) {
			n = 1;
		}
		if (n > size - off) {
			n = size - off;
		}
		rc = resp_reader_feed(r, (const char *)data + off, n);
		if (rc == -ENOMEM && tolerant) {
			break;
		}
		if (rc != 0) {
			fuzz_fail("resp_reader_feed failed under a 1 GiB query limit", "", 0);
		}
		off += n;
		live = drain(r, t, seed, out ? &w : NULL, &rng);
	}
	if (size == 0) {
		drain(r, t, seed, out ? &w : NULL, &rng);
	}
	if (!live) {
		/* a failed reader stays failed */
		if (resp_reader_feed(r, "PING\r\n", 6) != t->end && t->end != -ENOMEM) {
			fuzz_fail("failed reader took more input", "", 0);
		}
	}
	resp_reader_destroy(r);
}

static void
compare(const struct transcript *a, const struct transcript *b, const char *what,
	const uint8_t *data, size_t size)
{
	if (a->h != b->h || a->nreq != b->nreq || a->end != b->end ||
		(a->end == -EAGAIN && a->pending != b->pending) ||
		(a->end != -EAGAIN && strcmp(a->errstr, b->errstr) != 0)) {
		fprintf(stderr,
			"whole: %u requests, end %d pending %zu '%s'\n"
			"%s: %u requests, end %d pending %zu '%s'\n",
			a->nreq, a->end, a->pending, a->errstr, what, b->nreq, b->end, b->pending,
			b->errstr);
		fuzz_fail(
			"transcript depends on how the input was split", (const char *)data, size);
	}
}

/* One injected allocation failure somewhere in a parse: no crash, no leak,
 * and a request that does come back is still whole. */
static void
run_alloc_failure(const uint8_t *data, size_t size, uint64_t seed)
{
	struct resp_buf out;
	struct transcript t;

	resp_buf_init(&out);
	echd_alloc_fail_at(1 + seed % 16);
	run(data, size, 1, seed, &t, &out, true);
	echd_alloc_fail_at(0);
	if (!out.oom) {
		reply_check_all(out.data, out.len, true);
	}
	resp_buf_finish(&out);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t seed = fuzz_hash(1469598103934665603ULL, data, size);
	struct transcript whole, split, bytewise;
	struct resp_buf out;
	size_t nreplies;

	resp_buf_init(&out);
	run(data, size, 0, seed, &whole, &out, false);
	if (out.oom) {
		fuzz_fail("reply buffer out of memory", "", 0);
	}
	nreplies = reply_check_all(out.data, out.len, true);
	if (nreplies != whole.nreq) {
		fprintf(stderr, "%zu replies for %u requests\n", nreplies, whole.nreq);
		fuzz_fail("writer output has the wrong number of replies", out.data, out.len);
	}
	if (out.len > 0) {
		/* consume a prefix: the rest must be the same bytes */
		size_t cut = (size_t)(seed % out.len);
		char *copy = malloc(out.len - cut);
		if (copy != NULL) {
			memcpy(copy, out.data + cut, out.len - cut);
			resp_buf_consume(&out, cut);
			if (memcmp(copy, out.data, out.len) != 0) {
				fuzz_fail("resp_buf_consume moved the wrong bytes", "", 0);
			}
			free(copy);
		}
	}
	resp_buf_finish(&out);

	run(data, size, 1, seed, &split, NULL, false);
	compare(&whole, &split, "random pieces", data, size);
	if (size <= BYTEWISE_MAX) {
		run(data, size, 2, seed, &bytewise, NULL, false);
		compare(&whole, &bytewise, "byte by byte", data, size);
	}
	if (seed % 8 == 0) {
		run_alloc_failure(data, size, seed / 8);
	}
	return 0;
}
