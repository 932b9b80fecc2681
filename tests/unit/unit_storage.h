/* unit_storage.h - the fixture shared by the unit tests that run over a
 * real storage backend (test_storage.c, test_stream.c, test_group.c).
 *
 * Test-only: included by tests/unit/test_*.c and nothing else; it is not
 * API. Everything here is a macro or static, so each test binary gets its
 * own copy. The functions are static inline only so that a test which
 * does not call one (test_storage.c has no tx) gets no unused-function
 * warning; rm_rf() is the exception, see there.
 *
 * Each binary's main() calls fixture_init() with what differs between
 * them (the base directory's name, the backend, the map size), then
 * fixture_run(). The environment variable ECHD_TEST_BACKEND overrides the
 * backend: meson runs each of these binaries once per backend (lmdb, mem, fwd,
 * postgres under tests/helpers/pgtmp.py). Every test works in its own
 * directory under base_dir (on postgres, its own schema too):
 * its setup is fixture_open() (or a setup() that calls it) and its
 * teardown is teardown(). fixture_run() removes base_dir at the end, so a
 * failed (forked-away) test leaves nothing.
 */
#ifndef ECHD_TESTS_UNIT_STORAGE_H
#define ECHD_TESTS_UNIT_STORAGE_H

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "echd.h"
#include "storage.h"
#include "stream.h"
#include "unit_assert.h"
#include "unit_opts.h"

#define MIB ((uint64_t)1 << 20)

/* ---- assertions (OK, FAILS, U64_EQ, I64_EQ: unit_assert.h) ---------------- */

#define ID_EQ(got, ms_, seq_)                                                                      \
	do {                                                                                       \
		const struct stream_id g_ = (got);                                                 \
		ck_assert_msg(g_.ms == (uint64_t)(ms_) && g_.seq == (uint64_t)(seq_),              \
			"%s = %" PRIu64 "-%" PRIu64 ", expected %" PRIu64 "-%" PRIu64, #got,       \
			g_.ms, g_.seq, (uint64_t)(ms_), (uint64_t)(seq_));                         \
	} while (0)

/* ---- fixture ------------------------------------------------------------ */

/* What differs between the test binaries; fixture_init() sets it. */
static struct fixture {
	const char *backend; /* storage_open()'s name; NULL: the default backend */
	uint64_t map_size;   /* opts_default()'s lmdb.map-size */
} fixture;

static char base_dir[64];      /* /tmp/echd-test-<name>-XXXXXX, made by fixture_init() */
static char dir[PATH_MAX];     /* this test's directory, under base_dir */
static struct storage *st;     /* opened on dir by fixture_open() */
static struct storage_txn *tx; /* begin() .. commit(); NULL between */

/* Removes a directory tree (nftw() would need _XOPEN_SOURCE). Every test
 * uses it; not inline, as gcc would then inline the recursion and warn
 * that the nested snprintf() may truncate. */
static void
rm_rf(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	char sub[PATH_MAX];
	struct stat sb;

	if (d == NULL) {
		remove(path);
		return;
	}
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) {
			continue;
		}
		snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
		if (lstat(sub, &sb) == 0 && S_ISDIR(sb.st_mode)) {
			rm_rf(sub);
		} else {
			remove(sub);
		}
	}
	closedir(d);
	rmdir(path);
}

/* For main(), before any test runs: records backend (borrows; NULL for the
 * default) and map_size, and makes base_dir from name (borrows). Returns 0,
 * or -errno after printing why. */
static inline int
fixture_init(const char *name, const char *backend, uint64_t map_size)
{
	int n = snprintf(base_dir, sizeof(base_dir), "/tmp/echd-test-%s-XXXXXX", name);

	if (n < 0 || (size_t)n >= sizeof(base_dir)) {
		fprintf(stderr, "fixture_init: name too long: %s\n", name);
		return -ENAMETOOLONG;
	}
	if (mkdtemp(base_dir) == NULL) {
		int err = errno;

		perror("mkdtemp");
		return -err;
	}
	if (getenv("ECHD_TEST_BACKEND") != NULL) {
		backend = getenv("ECHD_TEST_BACKEND");
	}
	fixture.backend = backend;
	fixture.map_size = map_size;
	fprintf(stderr, "%s: backend %s\n", name, backend != NULL ? backend : "(default)");
	return 0;
}

/* Whether the tests run on the backend named (NULL: the default, lmdb). */
static inline bool
fixture_is(const char *backend)
{
	const char *b = fixture.backend != NULL ? fixture.backend : "lmdb";

	return strcmp(b, backend) == 0;
}

/* Whether the backend keeps nothing past storage_close(): mem, and fwd,
 * which is mem behind the forwarding base. */
static inline bool
fixture_in_memory(void)
{
	return fixture_is("mem") || fixture_is("fwd");
}

/* Runs every suite in sr (takes it), then removes base_dir. Returns the
 * exit status for main(). */
static inline int
fixture_run(SRunner *sr)
{
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	rm_rf(base_dir);
	return failed == 0 ? 0 : 1;
}

/* On postgres: this test's own schema, named after its directory, in the
 * server ECHD_TEST_PG_URL names (tests/helpers/pgtmp.py starts one). */
static char pg_schema[64];

static inline struct storage_opts
opts_default(void)
{
	struct storage_opts o = {
		.dir = dir,
		.sync_mode = STORAGE_SYNC_FULL,
	};

	opt_clear(&o);
	opt_u64(&o, "lmdb.map-size", fixture.map_size);
	if (fixture_is("postgres")) {
		const char *t = strrchr(dir, '/');
		const char *url = getenv("ECHD_TEST_PG_URL");

		snprintf(pg_schema, sizeof(pg_schema), "%.24s_%.24s", strrchr(base_dir, '-') + 1,
			t != NULL ? t + 1 : dir);
		ck_assert_msg(url != NULL, "ECHD_TEST_PG_URL is not set (run under pgtmp.py)");
		opt_str(&o, "postgres.url", url);
		opt_str(&o, "postgres.schema", pg_schema);
		/* The contract suites are not about lost connections (test-pg is): a
		 * big commit of theirs on a loaded machine may take seconds. */
		opt_u64(&o, "postgres.timeout-ms", 60000);
	}
	return o;
}

static inline void
begin(void)
{
	ck_assert_ptr_null(tx);
	OK(storage_txn_begin(st, NULL, 0, &tx));
}

static inline void
commit(void)
{
	struct storage_txn *t = tx;

	tx = NULL;
	OK(storage_txn_commit(t));
}

/* The start of every setup(): makes this test's directory and opens st
 * there with opts_default(); no transaction is open. */
static inline void
fixture_open(void)
{
	struct storage_opts o;

	snprintf(dir, sizeof(dir), "%s/t-XXXXXX", base_dir);
	ck_assert_ptr_nonnull(mkdtemp(dir));
	o = opts_default(); /* after dir: postgres names its schema after it */
	st = NULL;
	tx = NULL;
	OK(storage_open(fixture.backend, &o, &st));
}

/* Every test's teardown: aborts tx if one is open, closes st and removes
 * the test's directory. */
static inline void
teardown(void)
{
	storage_txn_abort(tx);
	tx = NULL;
	storage_close(st);
	st = NULL;
	rm_rf(dir);
}

/* Commits, closes, reopens the same directory and begins a new
 * transaction. On mem (and fwd), which keep nothing past storage_close(), only
 * commits and begins: the state is then read back from a new transaction. */
static inline void
reopen(void)
{
	struct storage_opts o = opts_default();

	commit();
	if (fixture_in_memory()) {
		begin();
		return;
	}
	storage_close(st);
	st = NULL;
	OK(storage_open(fixture.backend, &o, &st));
	begin();
}

/* ---- helpers ------------------------------------------------------------ */

static inline struct st_buf
B(const char *s)
{
	struct st_buf b = {s, strlen(s)};
	return b;
}

static inline struct stream_id
ID(uint64_t ms, uint64_t seq)
{
	struct stream_id id = {ms, seq};
	return id;
}

static inline bool
buf_eq(const struct st_buf *b, const void *p, size_t len)
{
	return b->len == len && (len == 0 || memcmp(b->data, p, len) == 0);
}

/* Rows of table tb, as the current transaction sees them; *bytes (when
 * not NULL) gets the sum of their keys' and values' lengths. */
static inline uint64_t
table_rows(enum storage_table tb, uint64_t *bytes)
{
	struct st_buf key, val;
	struct storage_cursor *c;
	uint64_t n = 0, b = 0;
	int rc;

	OK(storage_cursor_open(tx, tb, &c));
	rc = storage_cursor_seek(c, NULL, &key, &val);
	while (rc == 0) {
		n++;
		b += key.len + val.len;
		rc = storage_cursor_next(c, &key, &val);
	}
	storage_cursor_close(c);
	FAILS(rc, ECHD_ENOTFOUND);
	if (bytes != NULL) {
		*bytes = b;
	}
	return n;
}

static inline uint64_t
table_bytes(enum storage_table tb)
{
	uint64_t b;

	table_rows(tb, &b);
	return b;
}

#endif /* ECHD_TESTS_UNIT_STORAGE_H */
