/* clock.c - the broker's clocks (see clock.h). */
#include <time.h>

#include "clock.h"

static bool cache_on;
static bool cache_valid;
static uint64_t cache_ms;

static uint64_t
realtime_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t
brk_now_ms(void)
{
	if (!cache_valid) {
		cache_ms = realtime_ms();
		cache_valid = cache_on;
	}
	return cache_ms;
}

uint64_t
brk_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

void
brk_clock_cache(bool on)
{
	cache_on = on;
	cache_valid = false;
}

void
brk_clock_refresh(void)
{
	cache_valid = false;
}
