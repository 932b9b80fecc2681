"""Crash test: producers and consumers of one consumer group run against echd, which is killed
with SIGKILL at random moments and restarted on the same data directory, at least 20 times.

Producers (2 threads) XADD, some of them pipelined with redis-py (transaction=False).
Consumers (2 threads) XREADGROUP '>' COUNT 10 (sometimes with BLOCK), XACK part of what they
hold, drop a few entries unacknowledged (a failed job), now and then XAUTOCLAIM idle entries,
and after every reconnect read their own history (XREADGROUP ... 0) as a real worker would.
Every reply a client receives is recorded.  While echd is down the clients park; after each
restart the test checks:

  * every acknowledged XADD exists with exactly its fields; no entry exists twice or that no
    producer sent; ids strictly increase, also across restarts (last-generated-id);
  * no entry is delivered from '>' twice, across all consumers and cycles, and every entry a
    consumer got is the entry a producer sent;
  * every entry a consumer received (from '>', XAUTOCLAIM or its history) whose XACK was not
    acknowledged is pending in exactly one consumer's PEL (group PEL and consumer PELs agree);
    an XACK whose reply was lost may or may not have happened (both allowed, then settled by
    what the PEL says);
  * no entry whose XACK was acknowledged is pending;
  * every entry at or below the group's last-delivered-id is pending or acknowledged, and none
    above it is pending;
  * last-delivered-id and entries-read never go backwards, cover every delivery a consumer saw,
    and entries-read (and lag) are exact.

The workload and the checks live in tests/crash/driver.py (shared with 14-powercut.py and
the standalone, long tests/crash/run.py).

echd only: Redis without an fsynced AOF keeps nothing across kill -9, and even with one its AOF
does not log everything this test checks (e.g. the delivery counts of history reads).
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crash"))

import driver  # noqa: E402

ECHD_ONLY = ("asserts durability across SIGKILL of every acknowledged write, which Redis "
             "without an fsynced AOF does not have")
TIMEOUT = 170

MIN_CYCLES, MAX_CYCLES = 20, 40
RUN_DEADLINE = 85.0          # seconds of cycles at most (then the final check)


def test_crash_cycles(server):
    seed = int(time.time())
    cycles, model, secs = driver.run_cycles(server, driver.SigkillCrash(), seed, MIN_CYCLES,
                                            MAX_CYCLES, RUN_DEADLINE)
    assert cycles >= MIN_CYCLES, "only %d kill/restart cycles in %.0f s (seed %d)" % (
        cycles, secs, seed)
    s = model.stats
    print("# 06-crash: %d kill -9 cycles in %.0f s, seed %d, %s" % (
        cycles, secs, seed, driver.stats_line(model)), flush=True)
    # the run did exercise what it checks
    assert s["xadd"] > 100 and s["delivered"] > 100 and s["acked"] > 50, (s, seed)
    assert s["nacked"] > 0, (s, seed)
    assert s["idmp_resends"] > 0, (s, seed)     # the IDMP producer re-sent after a restart
