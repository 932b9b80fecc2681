/* clock.h - the broker's clocks, in a room of their own: handlers read the
 * time here and need nothing else of the server.
 *
 * brk_now_ms() is wall-clock milliseconds (CLOCK_REALTIME): entry ids,
 * idle and delivery times, expiry, as Redis uses them. brk_now_us() is
 * monotonic microseconds (CLOCK_MONOTONIC): durations (SLOWLOG, LATENCY,
 * timeouts), which must not jump when the wall clock is set. Both may be
 * called from the event-loop thread and from nowhere else.
 */
#ifndef ECHD_BROKER_CLOCK_H
#define ECHD_BROKER_CLOCK_H

#include <stdint.h>

uint64_t brk_now_ms(void);
uint64_t brk_now_us(void);

#endif
