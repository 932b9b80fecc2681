#!/usr/bin/python3
"""Crash harness, standalone: the workload and checks of tests/crash/driver.py through many
crash/restart cycles of one echd.

    run.py --echd build/broker/echd --mode kill  --cycles 200    kill -9 (process death)
    run.py --echd build/broker/echd --mode power --cycles 200    simulated power loss

The long mode (by hand; CI runs the short forms tests/integration/06-crash.py and
14-powercut.py):

    /usr/bin/python3 tests/crash/run.py --mode kill  --cycles 200 --echd build/broker/echd
    /usr/bin/python3 tests/crash/run.py --mode power --cycles 200 --echd build/broker/echd

--mode power runs echd under the LD_PRELOAD shim tests/crash/powercut.c (found next to echd
in <build>/tests/crash/, or built with cc; --shim or $ECHD_POWERCUT_SHIM to choose), cuts the
power at random moments (the restart image is what was synced, optionally plus a random
prefix per sector of what was not), and afterwards runs --broken-trials (default 10)
single-cut trials with fsync/fdatasync dropped, each of which must be caught (missing
acknowledged writes, or an environment echd cannot open).  A failure prints the seed; rerun
with --seed to replay the same choices (the timing of the kills is not replayable).
Other options: --seed N, --uptime MIN,MAX (seconds of load between crashes), --styles
durable,subset,all (power-cut image styles), -- ECHD_ARGS... (extra echd arguments, e.g.
-- --appendfsync always).  Exit status 0 only if every check passed and every broken trial
was caught.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import driver  # noqa: E402
from echdtest import Server, ServerError  # noqa: E402


def log(msg):
    print(msg, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--echd", required=True, metavar="PATH")
    ap.add_argument("--mode", choices=("kill", "power"), default="kill")
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--uptime", default="0.1,0.5", metavar="MIN,MAX")
    ap.add_argument("--styles", default="durable,subset,subset,all",
                    help="power-cut image styles to draw from (default %(default)s)")
    ap.add_argument("--broken-trials", type=int, default=10, metavar="N",
                    help="power mode: single-cut trials with fsync dropped (default 10)")
    ap.add_argument("--shim", default=None, help="the power-cut shim (.so)")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="print what caught each broken-build trial")
    ap.add_argument("echd_args", nargs="*", help="extra echd arguments (after --)")
    a = ap.parse_args()

    exe = os.path.abspath(a.echd)
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        log("echd not found or not executable: %s" % exe)
        return 2
    seed = a.seed if a.seed is not None else int(time.time())
    uptime = tuple(float(x) for x in a.uptime.split(","))
    log("# crash harness: mode %s, %d cycles, seed %d, echd %s %s"
        % (a.mode, a.cycles, seed, exe, " ".join(a.echd_args)))
    t0 = time.monotonic()
    failed = False
    if a.mode == "kill":
        srv = Server("echd", exe, a.echd_args)
        try:
            srv.start()
            cycles, model, secs = driver.run_cycles(srv, driver.SigkillCrash(), seed, a.cycles,
                                                    uptime=uptime, log=log)
            log("# kill -9: %d cycles in %.0f s, seed %d: %s"
                % (cycles, secs, seed, driver.stats_line(model)))
        except (driver.Violation, ServerError) as e:
            log("FAIL: %s" % e)
            failed = True
        finally:
            srv.stop() if srv.alive() else None
            if not failed:
                srv.remove()
            else:
                log("# data kept in %s" % srv.root)
    else:
        work = tempfile.mkdtemp(prefix="echd-powercut-shim-")
        try:
            log("# %s" % driver.shim_selftest(driver.build_shim(work), work))
            shim = a.shim or driver.find_shim(exe, work)
            log("# shim %s, LD_PRELOAD=%s" % (shim, driver.preload_list(exe, shim)))
            styles = tuple(a.styles.split(","))
            try:
                srv_root = tempfile.mkdtemp(prefix="echd-powercut-")
                cycles, model, secs, crash, st = driver.powercut_cycles(
                    exe, shim, seed, a.cycles, extra_args=a.echd_args, styles=styles,
                    log=log, root=srv_root)
                log("# power cut: %d cycles in %.0f s, seed %d: %s"
                    % (cycles, secs, seed, driver.stats_line(model)))
                log("# power cut: %s" % crash.summary())
                log("# shim, last generation: %s" % " ".join("%s %s" % kv for kv in st.items()))
            except (driver.Violation, ServerError) as e:
                log("FAIL: %s" % e)
                failed = True
            if a.broken_trials > 0:
                res = driver.broken_trials(exe, shim, seed, a.broken_trials,
                                           extra_args=a.echd_args, log=log)
                caught = sum(1 for r in res if r[1])
                log("# broken build (fsync dropped): caught in %d of %d trials"
                    % (caught, len(res)))
                for line, ok, how, xadd, cuts in res:
                    log("#   %s (%d XADD acknowledged)" % (line, xadd))
                    if ok and a.verbose:
                        for k in how.splitlines()[:8]:
                            log("#       %s" % k.strip()[:300])
                if caught != len(res):
                    log("FAIL: the broken build went unnoticed in %d trial(s)"
                        % (len(res) - caught))
                    failed = True
        finally:
            shutil.rmtree(work, ignore_errors=True)
    log("# %s in %.0f s" % ("FAILED" if failed else "passed", time.monotonic() - t0))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
