/* hist.c - latency histograms with Redis' buckets (see hist.h).
 *
 * HdrHistogram's index arithmetic, fixed at what Redis asks of it: lowest
 * discernible value 1, 2 significant figures (sub-buckets of 256, halves
 * of 128), highest trackable value 1e9. Bucket b holds the values whose
 * top bit is b + 7 (bucket 0 also everything below 256), in steps of 2^b. */
#include <stdlib.h>

#include "echd.h"
#include "hist.h"

#define HALF_MAG 7                      /* log2 of the sub-bucket half count */
#define HALF     (1 << HALF_MAG)        /* 128 */
#define BUCKETS  23                     /* 256 << 22 is the first power past 1e9 */
#define NCOUNTS  ((BUCKETS + 1) * HALF) /* 3072 */

struct brk_hist {
	uint64_t total;
	uint64_t sum_ns; /* of the values as recorded (clamped), for /metrics' _sum */
	uint64_t counts[NCOUNTS];
};

static int
top_bit(uint64_t v)
{
	int b = 0;

	while (v >>= 1) {
		b++;
	}
	return b;
}

static int
bucket_of(uint64_t v)
{
	return top_bit(v | (2 * HALF - 1)) - HALF_MAG;
}

static int
index_of(uint64_t v)
{
	int b = bucket_of(v);

	return ((b + 1) << HALF_MAG) + (int)(v >> b) - HALF;
}

/* The lowest value that lands on counts[i]. */
static uint64_t
value_at(int i)
{
	int b = (i >> HALF_MAG) - 1;
	uint64_t sub = (uint64_t)(i & (HALF - 1)) + HALF;

	if (b < 0) {
		sub -= HALF;
		b = 0;
	}
	return sub << b;
}

/* The highest value that lands where v does. */
static uint64_t
highest_equivalent(uint64_t v)
{
	int b = bucket_of(v);

	return ((v >> b) << b) + ((uint64_t)1 << b) - 1;
}

struct brk_hist *
brk_hist_new(void)
{
	return echd_calloc(1, sizeof(struct brk_hist));
}

void
brk_hist_free(struct brk_hist *h)
{
	echd_free(h);
}

void
brk_hist_record(struct brk_hist *h, uint64_t ns)
{
	if (ns < BRK_HIST_MIN_NS) {
		ns = BRK_HIST_MIN_NS;
	} else if (ns > BRK_HIST_MAX_NS) {
		ns = BRK_HIST_MAX_NS;
	}
	h->counts[index_of(ns)]++;
	h->total++;
	h->sum_ns += ns;
}

uint64_t
brk_hist_sum(const struct brk_hist *h)
{
	return h->sum_ns;
}

uint64_t
brk_hist_count_le(const struct brk_hist *h, uint64_t ns)
{
	uint64_t n = 0;

	for (int i = 0; i < NCOUNTS && value_at(i) <= ns; i++) {
		n += h->counts[i];
	}
	return n;
}

uint64_t
brk_hist_total(const struct brk_hist *h)
{
	return h->total;
}

uint64_t
brk_hist_percentile(const struct brk_hist *h, double pct)
{
	double p = pct < 100.0 ? pct : 100.0;
	uint64_t want = (uint64_t)(p / 100.0 * (double)h->total + 0.5), seen = 0;

	if (want == 0) {
		want = 1;
	}
	for (int i = 0; i < NCOUNTS; i++) {
		seen += h->counts[i];
		if (seen >= want) {
			uint64_t v = value_at(i);
			return pct == 0.0 ? v : highest_equivalent(v);
		}
	}
	return 0;
}

int
brk_hist_cdf(const struct brk_hist *h, uint64_t usec[BRK_HIST_LEVELS],
	uint64_t count[BRK_HIST_LEVELS])
{
	uint64_t cum = 0, prev = 0;
	int i = 0, n = 0;

	/* Redis walks the counts with a logarithmic iterator from 1024 ns
	 * doubling: a level counts every value below it and is labelled by
	 * its highest equivalent value in microseconds. It stops at the first
	 * level that holds them all. */
	for (uint64_t level = 1024; n < BRK_HIST_LEVELS; level *= 2) {
		while (i < NCOUNTS && value_at(i) < level) {
			cum += h->counts[i++];
		}
		if (cum > prev) {
			usec[n] = highest_equivalent(level) / 1000;
			count[n] = cum;
			n++;
		}
		prev = cum;
		if (cum >= h->total) {
			break;
		}
	}
	return n;
}
