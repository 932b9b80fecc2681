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
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crash"))

import driver  # noqa: E402

ECHD_ONLY = "simulates power loss under echd's own storage (an LD_PRELOAD shim on its data file)"
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
    assert st.get("syncs", 0) > 0 and st.get("writes", 0) > 0, (
        "the shim saw no writes or syncs of the data file: %r" % st)
    assert crash.with_pending > 0, (
        "no cut found an unsynced write: the reordering was not exercised (seed %d, %s)"
        % (seed, crash.summary()))


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
