/* test_hist.c - unit tests for broker/diagnostics/hist.c, the LATENCY HISTOGRAM buckets.
 *
 * The fixed figures are what Redis 7 replies for the same durations (a
 * 12 us PING shows as p50=12.031 and p0=11.968 in INFO latencystats, a
 * 1 us one as 1.003); the rest are properties of HdrHistogram's buckets
 * with 2 significant figures: a percentile is never below the exact value
 * at its rank and at most 1/128 above it.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "hist.h"

static struct brk_hist *
hist_of(const uint64_t *ns, size_t n)
{
	struct brk_hist *h = brk_hist_new();

	ck_assert_ptr_nonnull(h);
	for (size_t i = 0; i < n; i++) {
		brk_hist_record(h, ns[i]);
	}
	return h;
}

START_TEST(test_redis_figures)
{
	uint64_t twelve = 12000, one = 1000, small = 200;
	struct brk_hist *h = hist_of(&twelve, 1);

	ck_assert_uint_eq(brk_hist_percentile(h, 50), 12031);
	ck_assert_uint_eq(brk_hist_percentile(h, 100), 12031);
	ck_assert_uint_eq(brk_hist_percentile(h, 0), 11968);
	brk_hist_free(h);
	h = hist_of(&one, 1);
	ck_assert_uint_eq(brk_hist_percentile(h, 99.9), 1003);
	brk_hist_free(h);
	/* below 256 ns every value has a slot of its own */
	h = hist_of(&small, 1);
	ck_assert_uint_eq(brk_hist_percentile(h, 50), 200);
	ck_assert_uint_eq(brk_hist_percentile(h, 0), 200);
	brk_hist_free(h);
}
END_TEST

START_TEST(test_clamped)
{
	uint64_t v[] = {0, 5000000000ULL};
	struct brk_hist *h = hist_of(v, 2);

	ck_assert_uint_eq(brk_hist_total(h), 2);
	ck_assert_uint_eq(brk_hist_percentile(h, 0), BRK_HIST_MIN_NS);
	/* 1 s lands in the last slot that holds it, never past it */
	ck_assert_uint_ge(brk_hist_percentile(h, 100), BRK_HIST_MAX_NS);
	ck_assert_uint_le(brk_hist_percentile(h, 100), BRK_HIST_MAX_NS + BRK_HIST_MAX_NS / 128);
	brk_hist_free(h);
}
END_TEST

START_TEST(test_percentiles_within_bucket_error)
{
	enum { N = 5000 };
	static uint64_t v[N];
	const double pcts[] = {0.1, 1, 10, 25, 50, 75, 90, 99, 99.9, 100};
	struct brk_hist *h;

	/* microsecond durations as Redis records them (us * 1000), in order */
	for (int i = 0; i < N; i++) {
		v[i] = (uint64_t)(i * 7 + 1) * 1000;
	}
	h = hist_of(v, N);
	for (size_t k = 0; k < sizeof(pcts) / sizeof(pcts[0]); k++) {
		uint64_t rank = (uint64_t)(pcts[k] / 100.0 * N + 0.5);
		uint64_t exact = v[(rank ? rank : 1) - 1];
		uint64_t got = brk_hist_percentile(h, pcts[k]);
		ck_assert_msg(got >= exact && got <= exact + exact / 128, "p%g: %llu for %llu",
			pcts[k], (unsigned long long)got, (unsigned long long)exact);
	}
	brk_hist_free(h);
}
END_TEST

START_TEST(test_cdf)
{
	/* 1, 2, 12, 12 and 100 us: the buckets Redis shows are 1, 2, 16 and
	 * 132, cumulative; 4, 8, 33 and 66 add nothing and are left out */
	uint64_t v[] = {1000, 2000, 12000, 12000, 100000};
	uint64_t usec[BRK_HIST_LEVELS], count[BRK_HIST_LEVELS];
	struct brk_hist *h = hist_of(v, 5);
	int n = brk_hist_cdf(h, usec, count);

	ck_assert_int_eq(n, 4);
	ck_assert_uint_eq(usec[0], 1);
	ck_assert_uint_eq(count[0], 1);
	ck_assert_uint_eq(usec[1], 2);
	ck_assert_uint_eq(count[1], 2);
	ck_assert_uint_eq(usec[2], 16);
	ck_assert_uint_eq(count[2], 4);
	ck_assert_uint_eq(usec[3], 132);
	ck_assert_uint_eq(count[3], 5);
	brk_hist_free(h);
}
END_TEST

START_TEST(test_cdf_ends_at_total)
{
	/* values spread over the whole range: the last bucket holds them all
	 * and the edges double (each the highest value of its slot) */
	uint64_t v[40], usec[BRK_HIST_LEVELS], count[BRK_HIST_LEVELS];
	struct brk_hist *h;
	int n;

	for (int i = 0; i < 40; i++) {
		v[i] = (uint64_t)1 << (i % 31);
	}
	h = hist_of(v, 40);
	n = brk_hist_cdf(h, usec, count);
	ck_assert_int_gt(n, 1);
	ck_assert_uint_eq(count[n - 1], 40);
	for (int i = 1; i < n; i++) {
		ck_assert_uint_gt(count[i], count[i - 1]);
		ck_assert_uint_ge(usec[i], 2 * usec[i - 1] - 1);
	}
	ck_assert_uint_eq(usec[n - 1], ((1ULL << 30) + (1ULL << 23) - 1) / 1000);
	brk_hist_free(h);
}
END_TEST

static Suite *
hist_suite(void)
{
	Suite *s = suite_create("hist");
	TCase *tc = tcase_create("hist");

	tcase_add_test(tc, test_redis_figures);
	tcase_add_test(tc, test_clamped);
	tcase_add_test(tc, test_percentiles_within_bucket_error);
	tcase_add_test(tc, test_cdf);
	tcase_add_test(tc, test_cdf_ends_at_total);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(hist_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
