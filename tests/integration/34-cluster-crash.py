"""The crash checker's workload spread over 3 shards (issue 36's proof): 3 shards over 4 front
ends on the pass' PostgreSQL, and on each shard the workload of tests/crash/driver.py
(producers XADD, some pipelined, one idempotent; consumers XREADGROUP/XACK/XACKDEL/XNACK/
XAUTOCLAIM; a dead-letter worker whose policy dead-letters to a stream of the same shard), all
three at once, with keys under a hash tag of the shard's slots.

Each shard's run kills -9 the front end serving it, twice: the standby takes the shard within
5 s (the times are printed), the killed front end comes back as the new standby, the shard's
workers reconnect to the new primary, and the checker finds every acknowledged entry, PEL
record and dead letter of that shard there, and `echo-admin check` finds the shard's schema
sound. The kills are one at a time (a second needs the standby the first one's restart
makes), while the other shards' workloads go on; each shard's checker reads only its front
end, so a kill elsewhere must not disturb it.

Runs in the PostgreSQL pass only (the cluster needs the postgres engine).
"""

import os
import signal
import sys
import threading
import time

import redis.crc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crash"))

import driver  # noqa: E402
import echdtest  # noqa: E402
from echdtest import RespError, pg_only, timeout, wait_until  # noqa: E402
from shardtest import PG, RANGES, Shards, held_by, myself, settled  # noqa: E402

ECHD_ONLY = "the cluster of front ends on PostgreSQL is echd's own"
TLS_SUITE = False
TLS_SUITE_WHY = "the front ends are started by the test itself"
TIMEOUT = 170
# run.py -j: alone: it times takeovers and starts five front ends' worth of load
SERIAL = True

TAKEOVER_MAX = 5.0      # seconds from kill -9 to another front end serving the shard
CYCLES = 3              # kills per shard
LOCK_WAIT = 90.0        # seconds a shard's kill may wait for another shard's to end
# The workers treat these replies as a lost connection: the outcome is unknown. A standby
# answers READONLY, or MOVED while the map catches up; a shard between front ends CLUSTERDOWN.
TRANSIENT = ("READONLY", "MOVED", "CLUSTERDOWN", "storage commit failed",
             "the store cannot be reached")


def tag_for(shard):
    """A hash tag whose slot is in the shard's range."""
    lo, hi = RANGES[shard]
    i = 0
    while not lo <= redis.crc.key_slot(("{t%d}" % i).encode()) <= hi:
        i += 1
    return "t%d" % i


class Cluster:
    """The front ends, and who serves which shard."""

    def __init__(self, sh, fronts):
        self.sh = sh
        self.fronts = fronts
        self.lock = threading.Lock()      # one kill at a time

    def serving(self, shard, exclude=None):
        """The live front end (not exclude) whose own CLUSTER NODES line holds the shard."""
        live = [s for s in self.fronts if s is not exclude and s.alive()]
        try:
            return held_by(live).get(shard)
        except (OSError, RespError):
            return None

    def wait_serving(self, shard, limit, exclude=None):
        deadline = time.monotonic() + limit
        while True:
            s = self.serving(shard, exclude)
            if s is not None:
                return s
            if time.monotonic() > deadline:
                raise driver.Violation("no front end serves shard %d within %.1f s; logs:\n%s"
                                       % (shard, limit, "\n".join(f.log_tail(10)
                                                                 for f in self.fronts)))
            time.sleep(0.02)


class ShardView(driver.Through):
    """One shard as the crash driver sees a server: .active is the front end that serves it
    now."""

    def __init__(self, cl, shard):
        self.cl = cl
        self.shard = shard
        self.schema = "%s_s%d" % (cl.sh.base, shard)
        self.active = cl.wait_serving(shard, 10.0)

    def check_data(self):
        """`echo-admin check` of the shard's schema: its counters and indexes against rows."""
        return echdtest.check_data(self.active.exe, None, pg_schema=self.schema)


class ShardKill:
    """kill -9 of the front end serving the shard; another takes the shard over; the killed
    one comes back as a standby."""

    label = "kill -9 of the shard's front end"

    def __init__(self, cl):
        self.cl = cl
        self.takeovers = []

    def resume(self, view, rng):
        pass

    def kill(self, view, rng):
        if not self.cl.lock.acquire(timeout=LOCK_WAIT):
            raise driver.Violation("another shard's kill did not end within %.0f s" % LOCK_WAIT)
        try:
            driver.died_by_itself(view.active)
        except BaseException:
            self.cl.lock.release()
            raise
        self.killed = view.active
        self.t_kill = time.monotonic()
        view.active.kill(signal.SIGKILL)

    def restart(self, view, rng):
        try:
            view.active = self.cl.wait_serving(view.shard, TAKEOVER_MAX, exclude=self.killed)
            took = time.monotonic() - self.t_kill
            self.takeovers.append(took)
            try:
                self.killed.start()
            except echdtest.ServerError as e:
                raise driver.StartFailure("the killed front end did not come back: %s" % e)
            if len(myself(self.killed)) > 8:
                raise driver.Violation("the restarted front end serves slots while every "
                                       "shard has a front end")
            return "front end :%d took shard %d in %.2f s" % (view.active.port, view.shard,
                                                               took)
        finally:
            self.cl.lock.release()

    def summary(self):
        return "takeovers %s s" % ", ".join("%.2f" % t for t in self.takeovers)


@pg_only(PG)
@timeout(TIMEOUT)
def test_crash_workload_over_three_shards(server):
    seed = int(time.time())
    sh = Shards(server)
    results, errors = {}, {}
    saved = driver.TRANSIENT
    try:
        fronts = [sh.start() for _ in range(4)]
        wait_until(lambda: settled(fronts, 3), 10, what="every front end sees 3 primaries")
        cl = Cluster(sh, fronts)
        driver.TRANSIENT = TRANSIENT

        def one(shard):
            crash = ShardKill(cl)
            try:
                view = ShardView(cl, shard)
                results[shard] = (driver.run_cycles(view, crash, seed + 1000 * shard, CYCLES,
                                                    CYCLES, 120.0, uptime=(0.5, 1.0),
                                                    tag=tag_for(shard)), crash)
            except BaseException as e:    # reported below, with the shard
                errors[shard] = e

        threads = [threading.Thread(target=one, args=(i,), name="shard%d" % i)
                   for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT - 20)
        assert not any(t.is_alive() for t in threads), "a shard's run did not end"
    finally:
        driver.TRANSIENT = saved
        sh.drop()
    assert not errors, "seed %d: %s" % (seed, "; ".join(
        "shard %d: %s: %s" % (i, type(e).__name__, e) for i, e in sorted(errors.items())))
    for shard, ((cycles, model, secs), crash) in sorted(results.items()):
        s = model.stats
        print("# 34-cluster-crash shard %d (tag %s): %d cycles in %.0f s, seed %d, %s; %s"
              % (shard, model.key, cycles, secs, seed + 1000 * shard, crash.summary(),
                 driver.stats_line(model)), flush=True)
        assert cycles == CYCLES, (shard, cycles)
        assert max(crash.takeovers) <= TAKEOVER_MAX, (shard, crash.takeovers)
        assert s["xadd"] > 50 and s["delivered"] > 20 and s["acked"] > 10, (shard, s)
