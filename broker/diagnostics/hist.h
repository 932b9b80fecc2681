/* hist.h - latency histograms with Redis' buckets (LATENCY HISTOGRAM).
 *
 * The layout is HdrHistogram's with 2 significant figures over 1 ns to
 * 1 s, as Redis records command latencies: values below 256 ns are exact,
 * above that each power of two is split into 128 steps. So the bucket
 * edges and percentiles echd reports are the ones Redis reports for the
 * same durations. Values are nanoseconds; outside the range they are
 * clamped to it.
 */
#ifndef ECHD_BROKER_HIST_H
#define ECHD_BROKER_HIST_H

#include <stdint.h>

#define BRK_HIST_MIN_NS 1ULL
#define BRK_HIST_MAX_NS 1000000000ULL

struct brk_hist;

/* NULL when out of memory. Owned by the caller: brk_hist_free(). */
struct brk_hist *brk_hist_new(void);
void brk_hist_free(struct brk_hist *h);
void brk_hist_record(struct brk_hist *h, uint64_t ns);
uint64_t brk_hist_total(const struct brk_hist *h);
/* The sum of the values recorded, in ns (a Prometheus histogram's _sum). */
uint64_t brk_hist_sum(const struct brk_hist *h);
/* How many values were at most ns, to the histogram's precision: a value
 * counts when the lowest value of its step is (a Prometheus bucket). */
uint64_t brk_hist_count_le(const struct brk_hist *h, uint64_t ns);
/* The value at a percentile (0-100) as HdrHistogram answers it: the
 * highest value equivalent to the recorded one there. 0 when empty. */
uint64_t brk_hist_percentile(const struct brk_hist *h, double pct);

/* The cumulative distribution LATENCY HISTOGRAM replies: for bucket i,
 * (*usec)[i] is its upper edge in microseconds (1, 2, 4, 8, 16, 33, ...)
 * and (*count)[i] how many values fell at or below it. Buckets that add
 * nothing to the one before are left out. Returns how many were filled,
 * at most BRK_HIST_LEVELS. */
#define BRK_HIST_LEVELS 32
int brk_hist_cdf(const struct brk_hist *h, uint64_t usec[BRK_HIST_LEVELS],
	uint64_t count[BRK_HIST_LEVELS]);

#endif
