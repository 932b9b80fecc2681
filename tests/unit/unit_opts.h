/* unit_opts.h - the engines' options (storage.h's "<engine>.<option>"
 * strings) for the unit tests that open a storage: unit_storage.h's
 * fixture and test_pg.c.
 *
 * Test-only, not API. The options live in one static pool that every copy
 * of a struct storage_opts set up here points at, so a test works with one
 * set of options at a time: opt_clear() starts a new one, opt_str() and
 * opt_u64() set one option (replacing its value if it is set).
 */
#ifndef ECHD_TESTS_UNIT_OPTS_H
#define ECHD_TESTS_UNIT_OPTS_H

#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "storage.h"

#define UNIT_OPTS_MAX 8

static struct {
	struct storage_opt opt[UNIT_OPTS_MAX];
	char value[UNIT_OPTS_MAX][512];
	size_t n;
} unit_opts;

/* Empties the pool and points o at it. */
static inline void
opt_clear(struct storage_opts *o)
{
	unit_opts.n = 0;
	o->opt = unit_opts.opt;
	o->nopt = 0;
}

/* Sets option name (borrowed: a string literal) to value (copied) in o. */
static inline void
opt_str(struct storage_opts *o, const char *name, const char *value)
{
	size_t i;

	for (i = 0; i < unit_opts.n && strcmp(unit_opts.opt[i].name, name) != 0; i++) {
	}
	ck_assert_uint_lt(i, UNIT_OPTS_MAX);
	ck_assert_uint_lt(strlen(value), sizeof(unit_opts.value[i]));
	snprintf(unit_opts.value[i], sizeof(unit_opts.value[i]), "%s", value);
	unit_opts.opt[i].name = name;
	unit_opts.opt[i].value = unit_opts.value[i];
	if (i == unit_opts.n) {
		unit_opts.n++;
	}
	o->opt = unit_opts.opt;
	o->nopt = unit_opts.n;
}

static inline void
opt_u64(struct storage_opts *o, const char *name, uint64_t value)
{
	char buf[24];

	snprintf(buf, sizeof(buf), "%" PRIu64, value);
	opt_str(o, name, buf);
}

#endif /* ECHD_TESTS_UNIT_OPTS_H */
