/* unit_assert.h - the assertion macros the Check unit tests share (test_pg.c
 * and, through unit_storage.h, the tests over a storage backend).
 *
 * Test-only: included by tests/unit/test_*.c and nothing else; it is not
 * API. Each macro names the expression it checks and, for a return code,
 * what echd_strerror() says of it.
 */
#ifndef ECHD_TESTS_UNIT_ASSERT_H
#define ECHD_TESTS_UNIT_ASSERT_H

#include <check.h>
#include <inttypes.h>
#include <stdint.h>

#include "echd.h"

/* x returns 0. */
#define OK(x)                                                                                      \
	do {                                                                                       \
		int rc_ = (x);                                                                     \
		ck_assert_msg(rc_ == 0, "%s: %d (%s)", #x, rc_, echd_strerror(rc_));               \
	} while (0)
/* x returns code. */
#define FAILS(x, code)                                                                             \
	do {                                                                                       \
		int rc_ = (x);                                                                     \
		ck_assert_msg(rc_ == (code), "%s: %d (%s), expected %d (%s)", #x, rc_,             \
			echd_strerror(rc_), (code), echd_strerror(code));                          \
	} while (0)
#define U64_EQ(got, want)                                                                          \
	do {                                                                                       \
		uint64_t g_ = (got), w_ = (want);                                                  \
		ck_assert_msg(g_ == w_, "%s = %" PRIu64 ", expected %" PRIu64, #got, g_, w_);      \
	} while (0)
#define I64_EQ(got, want)                                                                          \
	do {                                                                                       \
		int64_t g_ = (got), w_ = (want);                                                   \
		ck_assert_msg(g_ == w_, "%s = %" PRId64 ", expected %" PRId64, #got, g_, w_);      \
	} while (0)

#endif /* ECHD_TESTS_UNIT_ASSERT_H */
