"""Power loss, not just process death (the CI short form; tests/crash/run.py is the long one).

SIGKILL keeps the page cache, so 06-crash.py cannot tell a missing fsync from a present one.
Here echd runs under the LD_PRELOAD shim tests/crash/powercut.c, which keeps a copy of what
a disk would hold for sure (writes made durable by fsync/fdatasync; O_DSYNC writes) next to
each data file, plus a log of the writes not yet synced.  The same workload and checks as
06-crash.py (tests/crash/driver.py) run through power cuts: echd is killed -- at a random
moment, or by the shim itself just before a random write or sync of its data file (inside
a commit) -- and restarted on an image of the disk: the synced data, alone ('durable'), with
every unsynced write ('all'), or with a random prefix, per sector, of the unsynced writes
to it ('subset': any state a disk writing back in any order may be left in).  Every
acknowledged XADD must be there with its fields, no entry delivered twice from '>', the PELs
and cursors exact, and the environment must open.

test_powercut_everysec holds appendfsync everysec to its own, weaker promise: after a power
cut, a gap-free prefix of what was written, missing nothing acknowledged more than 1.5 s
before the cut.

test_powercut_broken_build_is_caught runs the same against a broken build: the shim drops
fsync/fdatasync of the data file (ECHD_POWERCUT_DROP_SYNC=1, what MDB_NOSYNC or replies sent
before the flush leave on the disk; with a writeback every 0/50/200 ms as a kernel would do).
Every such trial must be caught (missing acknowledged entries, or an image echd cannot open)
within 5 cuts.

The shim: the one built next to echd (<build>/tests/crash/libechd-powercut.so, from
tests/crash/meson.build), else built now with cc; $ECHD_POWERCUT_SHIM overrides.  Under the
sanitizer build it is instrumented too, and resolves the ASan runtime from echd (clang links
it statically into the executable); with a shared libasan (gcc) the driver preloads libasan
first.  If the shim cannot be found or built, or is not active in echd, the tests fail.

Long mode, by hand (200 power cuts, then 10 broken-build trials):
    /usr/bin/python3 tests/crash/run.py --mode power --cycles 200 --echd build/broker/echd
"""

import os
import random
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crash"))

import driver  # noqa: E402

ECHD_ONLY = "simulates power loss under echd's own storage (an LD_PRELOAD shim on its data file)"
PG_SUITE = False
PG_SUITE_WHY = ("power cuts intercept the fsync/msync of LMDB's data file (PostgreSQL's own "
                "durability is PostgreSQL's to prove)")
TIMEOUT = 120

MIN_CYCLES, MAX_CYCLES = 20, 40
RUN_DEADLINE = 25.0          # seconds of cycles at most (more than MIN_CYCLES only until 80%)
BROKEN_TRIALS = 6            # writeback never/50/200 ms x image durable/subset
BROKEN_MAX_CUTS = 5


def shim_for(server, work):
    try:
        return driver.find_shim(server.exe, work)
    except RuntimeError as e:
        raise AssertionError("the power-cut shim is not available, so power loss cannot be "
                             "simulated: %s" % e)


def test_shim_selftest(server):
    """The shim and the image builder themselves, on a small program that writes, syncs and
    kills itself: what is synced survives, what is not may or may not (per sector, in write
    order), dropped syncs lose everything, a cut at an I/O stops before it."""
    work = tempfile.mkdtemp(prefix="echd-e2e-shim-")
    try:
        try:
            shim = driver.build_shim(work)       # plain (the one next to echd may be ASan's)
        except RuntimeError as e:
            raise AssertionError("cannot build the power-cut shim for its self-test: %s" % e)
        print("# 14-powercut: %s" % driver.shim_selftest(shim, work), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_powercut_cycles(server):
    work = tempfile.mkdtemp(prefix="echd-e2e-shim-")
    try:
        shim = shim_for(server, work)
        seed = int(time.time())
        cycles, model, secs, crash, st = driver.powercut_cycles(
            server.exe, shim, seed, MIN_CYCLES, MAX_CYCLES, RUN_DEADLINE,
            extra_args=server.extra_args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    s = model.stats
    print("# 14-powercut: %d power cuts in %.0f s, seed %d, %s" % (
        cycles, secs, seed, driver.stats_line(model)), flush=True)
    print("# 14-powercut: %s" % crash.summary(), flush=True)
    assert cycles >= MIN_CYCLES, "only %d power cuts in %.0f s (seed %d)" % (cycles, secs, seed)
    # the run did exercise what it checks
    assert s["xadd"] > 100 and s["delivered"] > 100 and s["acked"] > 50, (s, seed)
    assert s["idmp_resends"] > 0, (s, seed)     # the IDMP producer re-sent after a restart
    assert st.get("syncs", 0) > 0 and st.get("writes", 0) > 0, (
        "the shim saw no writes or syncs of the data file: %r" % st)
    assert crash.with_pending > 0, (
        "no cut found an unsynced write: the reordering was not exercised (seed %d, %s)"
        % (seed, crash.summary()))


WAITAOF_CUTS = 6


def test_powercut_everysec_waitaof(server):
    """WAITAOF 1 0 0 under appendfsync everysec: once it answers [1, 0], every write the
    connection made before it is on disk, even though everysec acknowledged them before
    their flush. A producer pipelines XADDs with a WAITAOF after them, and the power is cut
    right after its answer (on the synced data alone, or with any subset of what was not
    synced): every entry before the WAITAOF must be there."""
    work = tempfile.mkdtemp(prefix="echd-e2e-shim-")
    rng = random.Random(int(time.time()))
    srv = None
    try:
        srv = everysec_server(server, work)
        nxt = 1
        for cut in range(WAITAOF_CUTS):
            c = srv.raw()
            n = rng.randrange(1, 200)
            cmds = [("XADD", "s", "%d-1" % i, *everysec_fields(i)) for i in range(nxt, nxt + n)]
            replies = c.pipeline(cmds + [("WAITAOF", "1", "0", "0")])
            assert replies[-1] == [1, 0], replies[-1]
            nxt += n
            srv.kill(signal.SIGKILL)
            c.close()
            info = srv.power_cut(rng.choice(("durable", "subset")), rng.randrange(1 << 32))
            srv.start()
            c = srv.raw()
            got = c.call("XRANGE", "s", "-", "+")
            assert [e for e, _ in got] == [eid(i) for i in range(1, nxt)], (
                "cut %d (%s): WAITAOF said [1, 0], yet the disk holds %d of %d entries"
                % (cut, info["desc"], len(got), nxt - 1))
            c.close()
    finally:
        if srv is not None:
            srv.kill()
        shutil.rmtree(work, ignore_errors=True)


def test_powercut_broken_build_is_caught(server):
    work = tempfile.mkdtemp(prefix="echd-e2e-shim-")
    try:
        shim = shim_for(server, work)
        seed = int(time.time())
        res = driver.broken_trials(server.exe, shim, seed, BROKEN_TRIALS, BROKEN_MAX_CUTS,
                                   extra_args=server.extra_args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    missed = [line for line, caught, _, _, _ in res if not caught]
    for line, caught, how, xadd, cuts in res:
        print("# 14-powercut: broken build %s (%d XADD acknowledged)" % (line, xadd), flush=True)
    assert not missed, ("a build that drops fsync went unnoticed (seed %d):\n  %s"
                        % (seed, "\n  ".join(missed)))


EVERYSEC_MIN_CUTS, EVERYSEC_MAX_CUTS = 5, 8
EVERYSEC_DEADLINE = 30.0     # seconds of cuts at most, beyond the minimum
EVERYSEC_WINDOW = 1.5        # acknowledged longer than this before a cut: must survive it
EVERYSEC_DEPTH = 16          # XADDs per pipeline


def everysec_fields(i):
    return ["n", str(i), "pad", "x" * (i % 97)]


def eid(i):
    return ("%d-1" % i).encode()


def everysec_server(server, work):
    """A started echd with appendfsync everysec under the shim, its generations in work."""
    srv = driver.PowercutServer(server.exe, shim_for(server, work),
                                list(server.extra_args) + ["--appendfsync", "everysec"],
                                root=os.path.join(work, "srv"))
    srv.start()
    return srv


def test_powercut_everysec(server):
    """appendfsync everysec through power cuts. It promises less than always: a crash of the
    machine may take up to the last second of acknowledged writes, never more, and never a
    torn state. A producer XADDs the explicit ids 1-1, 2-1, ... in order, pipelined, for 1.6
    to 3 s, sends one more pipeline it does not wait for, and echd loses power (SIGKILL, then
    an image of what the disk held for sure, alone or with any subset of the unsynced writes).
    echd must open the image and hold a gap-free prefix 1..k of the sent entries, each with
    its fields, where k covers every entry acknowledged more than EVERYSEC_WINDOW s before
    the cut; and it must take writes again."""
    work = tempfile.mkdtemp(prefix="echd-e2e-shim-")
    rng = random.Random(int(time.time()))
    srv = None
    lost = []
    try:
        srv = everysec_server(server, work)
        nxt, cuts, t0 = 1, 0, time.monotonic()
        while cuts < EVERYSEC_MAX_CUTS and (
                cuts < EVERYSEC_MIN_CUTS or time.monotonic() - t0 < EVERYSEC_DEADLINE):
            c = srv.raw()
            assert c.call("CONFIG", "GET", "appendfsync") == [b"appendfsync", b"everysec"]
            acked = []                                  # (n, monotonic time of the reply)
            first = nxt
            stop = time.monotonic() + rng.uniform(1.6, 3.0)
            while time.monotonic() < stop:
                cmds = [("XADD", "s", "%d-1" % i, *everysec_fields(i))
                        for i in range(nxt, nxt + EVERYSEC_DEPTH)]
                replies = c.pipeline(cmds)
                now = time.monotonic()
                for i, r in zip(range(nxt, nxt + EVERYSEC_DEPTH), replies):
                    assert r == eid(i), (i, r)
                    acked.append((i, now))
                nxt += EVERYSEC_DEPTH
            for i in range(nxt, nxt + EVERYSEC_DEPTH):  # in flight at the cut
                c.send("XADD", "s", "%d-1" % i, *everysec_fields(i))
            sent = nxt + EVERYSEC_DEPTH - 1
            cut = time.monotonic()
            srv.kill(signal.SIGKILL)
            c.close()
            style = rng.choice(("durable", "subset"))
            info = srv.power_cut(style, rng.randrange(1 << 32))
            srv.start()
            cuts += 1
            c = srv.raw()
            got = c.call("XRANGE", "s", "-", "+")
            k = len(got)
            for pos, (e, fields) in enumerate(got):
                assert e == eid(pos + 1), ("a gap or a stranger after cut %d (%s): position "
                                           "%d holds %s" % (cuts, info["desc"], pos, e))
                assert fields == [f.encode() for f in everysec_fields(pos + 1)], (e, fields)
            assert k <= sent, (k, sent)
            must = max([i for i, t in acked if cut - t > EVERYSEC_WINDOW], default=first - 1)
            assert k >= must, ("cut %d (%s) lost entries acknowledged more than %.1f s before "
                               "it: holds 1..%d, entry %d was acknowledged %.2f s before"
                               % (cuts, info["desc"], EVERYSEC_WINDOW, k, must,
                                  cut - dict(acked)[must]))
            lost.append(max(0, (acked[-1][0] if acked else first - 1) - k))
            # writes go on from what is there
            nxt = k + 1
            assert c.call("XADD", "s", "%d-1" % nxt, *everysec_fields(nxt)) == eid(nxt)
            nxt += 1
            c.close()
        print("# 14-powercut: everysec, %d power cuts; acknowledged entries lost per cut: %s"
              % (cuts, lost), flush=True)
        assert cuts >= EVERYSEC_MIN_CUTS
    finally:
        if srv is not None:
            srv.kill()
        shutil.rmtree(work, ignore_errors=True)
