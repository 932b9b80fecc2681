/* clock.h - the broker's clocks, in a room of their own: handlers read the
 * time here and need nothing else of the server.
 *
 * brk_now_ms() is wall-clock milliseconds (CLOCK_REALTIME): entry ids,
 * idle and delivery times, expiry, as Redis uses them. While the event loop
 * runs it is the time of the loop turn: read once, at its first use after
 * the poll returned (or after a commit's flush, the one long wait inside a
 * turn), and the same for every command of the turn, as Redis caches its
 * time per event. A clock read costs some 100 ns on a virtual machine, and
 * a command asked for it several times. Entry ids still increase strictly:
 * an id never goes below its stream's last one, whatever the clock says.
 *
 * brk_now_us() is monotonic microseconds (CLOCK_MONOTONIC), read every
 * call: durations (SLOWLOG, LATENCY, commandstats, timeouts), which must be
 * precise and must not jump when the wall clock is set.
 *
 * All may be called from the event-loop thread and from nowhere else.
 */
#ifndef ECHD_BROKER_CLOCK_H
#define ECHD_BROKER_CLOCK_H

#include <stdbool.h>
#include <stdint.h>

uint64_t brk_now_ms(void);
uint64_t brk_now_us(void);

/* Turns the per-turn cache of brk_now_ms() on (the loop starts) or off
 * (every call reads the clock: start-up, shutdown). */
void brk_clock_cache(bool on);

/* The next brk_now_ms() reads the clock again: before the loop polls, and
 * after a wait inside a turn (a commit's flush). */
void brk_clock_refresh(void);

#endif
