#!/usr/bin/python3
"""echd end-to-end test runner.

    run.py --echd build/broker/echd          run every NN-*.py module against echd
    run.py --redis /usr/bin/redis-server     run them against real Redis (validates the tests)
    run.py --echd build/broker/echd --tls    the same over TLS (modules with TLS_SUITE = False
                                             are left out and listed)
    run.py --echd build/broker/echd --storage postgres
                                             the same with every echd on the postgres backend,
                                             each server in a schema of its own on one
                                             throw-away cluster ($ECHD_TEST_PG_URL, or one
                                             started here with tests/helpers/pgtmp.py);
                                             tests about LMDB itself (PG_SUITE = False,
                                             @lmdb_only) are left out and listed with why
    run.py --echd build/broker/echd --storage lmdb-staged
                                             every echd on lmdb-staged with a small staging
                                             table ($E2E_STAGE_SIZE, 256kb), so that rows are
                                             filed home while the tests run (by hand: not
                                             one of meson's passes)
    options: -k PATTERN (substring or glob of 'module::test', repeatable), -v,
             -j N (N modules at once, each in a process of its own; modules that set
             SERIAL = True run alone after the others; default $ECHD_E2E_JOBS or 1)

For each module one server is started (fresh temporary dir, free loopback port); FLUSHALL
runs before each test. Each test has a timeout (SIGALRM). After each test against echd,
`echo-admin check` (from the same build tree) verifies the stored invariants in the live
server's directory (on postgres: in its schema); a broken one fails the test. Output:
'PASS name' / 'FAIL name' with a traceback, then exactly 'e2e: N passed, M failed' as the
last line ('e2e over TLS: ...', 'e2e on postgres: ...'); exit status 1 if any test failed.
Each module's time is printed as '# NN-module: S s' once it ends, so a slow module shows.
See echdtest.py for the fixture and the module conventions.
"""

import argparse
import fnmatch
import glob
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "helpers"))

import echdtest  # noqa: E402

DEFAULT_TIMEOUT = 60


class TestTimeout(Exception):
    pass


def on_alarm(signum, frame):
    raise TestTimeout("test timed out")


def on_term(signum, frame):
    # meson (or a user) stops us: unwind through the finally blocks that stop servers.
    raise SystemExit("terminated by signal %d" % signum)


def load_module(path):
    name = "e2e_" + os.path.basename(path)[:-3].replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def selected(full_name, patterns):
    if not patterns:
        return True
    return any(p in full_name or fnmatch.fnmatch(full_name, p) for p in patterns)


class Runner:
    def __init__(self, kind, exe, patterns, verbose, tls=False, storage="lmdb"):
        self.tls = tls
        self.pg = storage == "postgres"
        self.kind = kind
        self.exe = exe
        self.patterns = patterns
        self.verbose = verbose
        self.passed = 0
        self.failed = 0
        self.not_collected = []

    def log(self, msg):
        print(msg, flush=True)

    def fail(self, name, detail):
        self.failed += 1
        self.log("FAIL %s" % name)
        if detail:
            self.log(detail.rstrip())

    def collect(self, modname, mod):
        tests = []
        for name, fn in list(vars(mod).items()):
            if not name.startswith("test_") or not callable(fn):
                continue
            full = "%s::%s" % (modname, name)
            if not selected(full, self.patterns):
                continue
            reason = getattr(fn, "echd_only", None) or getattr(mod, "ECHD_ONLY", None)
            if reason and self.kind != "echd":
                self.not_collected.append((full, reason))
                continue
            reason = getattr(fn, "lmdb_only", None)
            if reason and self.pg:
                self.not_collected.append((full, "on postgres: " + reason))
                continue
            reason = getattr(fn, "pg_only", None)
            if reason and not self.pg:
                self.not_collected.append((full, "only on postgres: " + reason))
                continue
            tests.append((full, fn))
        return tests

    def run_module(self, path):
        t0, n0 = time.monotonic(), self.passed + self.failed
        try:
            self._run_module(path)
        finally:
            if self.passed + self.failed != n0:
                self.log("# %s: %.1f s" % (os.path.basename(path)[:-3], time.monotonic() - t0))

    def _run_module(self, path):
        modname = os.path.basename(path)[:-3]
        try:
            mod = load_module(path)
        except Exception:
            self.fail(modname + "::<import>", traceback.format_exc())
            return
        tests = self.collect(modname, mod)
        if self.tls and not getattr(mod, "TLS_SUITE", True):
            why = getattr(mod, "TLS_SUITE_WHY", "not run over TLS")
            self.not_collected += [(full, "over TLS: " + why) for full, _ in tests]
            return
        if self.pg and not getattr(mod, "PG_SUITE", True):
            why = getattr(mod, "PG_SUITE_WHY", "about LMDB itself")
            self.not_collected += [(full, "on postgres: " + why) for full, _ in tests]
            return
        if not tests:
            return
        extra = list(getattr(mod, "SERVER_ARGS", []))
        extra += list(getattr(mod, "ECHD_ARGS" if self.kind == "echd" else "REDIS_ARGS", []))
        mod_timeout = getattr(mod, "TIMEOUT", DEFAULT_TIMEOUT)

        server = echdtest.Server(self.kind, self.exe, extra)
        try:
            try:
                server.start()
            except Exception:
                detail = traceback.format_exc()
                for full, _ in tests:
                    self.fail(full, detail)
                    detail = None
                return
            if self.verbose:
                self.log("# %s: %s on port %d, dir %s" % (modname, self.kind, server.port, server.dir))
            for full, fn in tests:
                self.run_test(server, full, fn, getattr(fn, "timeout", mod_timeout))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            server.close_clients()
            for s in server._children:
                s.stop()
                s.remove()
            server.stop()
            if server.bad_exits:
                self.fail(modname + "::<server-exit>",
                          "; ".join(server.bad_exits) + "\n" + server.log_tail())
            server.remove()

    def run_test(self, server, full, fn, seconds):
        detail = None
        t0 = time.monotonic()
        try:
            if not server.alive():
                server.proc = None
                server.start()
            c = echdtest.RespConn(server.port, timeout=10)
            try:
                r = c.call("FLUSHALL")
                assert r == "OK", "FLUSHALL replied %r" % (r,)
            finally:
                c.close()
            signal.setitimer(signal.ITIMER_REAL, seconds)
            try:
                fn(server)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except TestTimeout:
            detail = "timed out after %d s\n%s" % (seconds, traceback.format_exc())
        except Exception:
            detail = traceback.format_exc()
        signal.setitimer(signal.ITIMER_REAL, 0)
        if detail is not None:
            for s in [server] + server._children:
                conns = s.describe_connections()
                if conns:
                    detail += conns + "\n"
        try:
            bad, logs = server.cleanup_after_test()
        except Exception:
            bad, logs = [traceback.format_exc()], []
        if bad:
            detail = (detail or "") + "spawned server: " + "; ".join(bad) + "\n"
        if detail is not None and logs:
            detail += "\n".join(logs) + "\n"

        # The server must survive every test (unless the test itself stopped it and
        # restarted it, which restart() does).
        if server.alive() and self.kind == "echd":
            # every test is also a test of the stored invariants
            bad = server.check_data(timeout=60)
            if bad:
                detail = (detail or "") + bad
        if not server.alive():
            rc = server.proc.returncode if server.proc else None
            detail = (detail or "") + "server not running after the test (status %s)\n%s\n" % (
                rc, server.log_tail())
            server.proc = None
            try:
                server.start()
            except Exception:
                detail += "restart failed:\n" + traceback.format_exc()
        elif detail is not None:
            detail += server.log_tail(15) + "\n"

        dt = time.monotonic() - t0
        if detail is None:
            self.passed += 1
            self.log("PASS %s%s" % (full, " (%.2fs)" % dt if self.verbose else ""))
        else:
            self.fail(full, detail)


# The modules that take longest (seconds, measured on the 2-core development machine, plain
# build): started first, so that -j N ends with short modules rather than one long tail.
# A module missing here is taken as short; order only, nothing depends on the figures.
SLOW_MODULES = {
    "14-powercut": 83, "09-admin": 56, "17-docs": 39, "22-keys": 38, "15-tls": 38,
    "26-console": 34, "07-transactions": 33, "03-persistence": 32, "25-http": 31, "27-ha": 29,
    "11-faults": 26, "19-clients": 26, "04-limits": 23, "18-differential": 23, "06-crash": 23,
    "05-groups": 18, "16-auth": 15,
}


def module_is_serial(path):
    """SERIAL = True at a module's top level: it measures time or load and runs alone."""
    with open(path, encoding="utf-8") as f:
        return any(line.startswith("SERIAL = True") for line in f)


def run_parallel(a, runner, paths, jobs):
    """Runs each module in a child run.py (--child), jobs at a time, then the serial ones
    one by one; prints each module's output whole once it ends and adds up the results."""
    serial = [p for p in paths if module_is_serial(p)]
    pool = [p for p in paths if p not in serial]
    pool.sort(key=lambda p: -SLOW_MODULES.get(os.path.basename(p)[:-3], 0))
    base = [sys.executable, os.path.abspath(__file__), "--echd", a.echd, "--child"]
    if a.tls:
        base.append("--tls")
    if a.storage != "lmdb":
        base += ["--storage", a.storage]
    for k in a.k:
        base += ["-k", k]
    if a.v:
        base.append("-v")
    running = {}  # Popen -> (path, output file)

    def start(path):
        out = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        proc = subprocess.Popen(base + ["--module", path], stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        running[proc] = (path, out)

    def finish(proc):
        path, out = running.pop(proc)
        out.seek(0)
        got = False
        for line in out:
            if line.startswith("@@result "):
                p, f = line.split()[1:3]
                runner.passed += int(p)
                runner.failed += int(f)
                got = True
            elif line.startswith("@@nc "):
                full, _, reason = line[5:].rstrip("\n").partition("\t")
                runner.not_collected.append((full, reason))
            else:
                sys.stdout.write(line)
        sys.stdout.flush()
        out.close()
        if not got:
            runner.fail(os.path.basename(path)[:-3] + "::<module>",
                        "the module's process ended with status %s and no result" %
                        proc.returncode)

    try:
        for group, width in ((pool, jobs), (serial, 1)):
            queue = list(group)
            while queue or running:
                while queue and len(running) < width:
                    start(queue.pop(0))
                done = None
                while done is None:
                    for proc in running:
                        if proc.poll() is not None:
                            done = proc
                            break
                    else:
                        time.sleep(0.05)
                finish(done)
    finally:
        for proc in list(running):
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except OSError:
                pass
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            finish(proc)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--echd", metavar="PATH", help="echd binary to test")
    g.add_argument("--redis", metavar="PATH", help="redis-server binary (to validate the tests)")
    ap.add_argument("-k", action="append", default=[], metavar="PATTERN",
                    help="run only tests whose 'module::test' name contains or globs PATTERN")
    ap.add_argument("-v", action="store_true", help="verbose")
    ap.add_argument("--tls", action="store_true",
                    help="echd only: the harness' clients talk to every server over TLS")
    ap.add_argument("--storage", choices=("lmdb", "postgres", "lmdb-staged"), default="lmdb",
                    help="echd only: the backend every server the harness starts stores in "
                         "(lmdb-staged: with a staging table of E2E_STAGE_SIZE, 256kb; a "
                         "manual pass, not one of meson's)")
    ap.add_argument("-j", "--jobs", type=int, metavar="N",
                    default=int(os.environ.get("ECHD_E2E_JOBS", "1")),
                    help="run N modules at once (SERIAL modules alone, after the others)")
    # run_parallel()'s children: one module, results as @@ lines for the parent
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--module", metavar="PATH", help=argparse.SUPPRESS)
    ap.add_argument("extra", nargs="*", help=argparse.SUPPRESS)  # tolerated (meson passes none)
    a = ap.parse_args()

    kind, exe = ("echd", a.echd) if a.echd else ("redis", a.redis)
    exe = os.path.abspath(exe) if os.sep in exe else exe
    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_term)

    runner = Runner(kind, exe, a.k, a.v, tls=a.tls, storage=a.storage)
    pki = None
    cluster = None
    if a.storage == "postgres":
        if kind != "echd":
            ap.error("--storage goes with --echd")
        url = os.environ.get("ECHD_TEST_PG_URL")
        if not url:
            import pgtmp
            try:
                cluster = pgtmp.Cluster().__enter__()
            except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
                runner.fail("<setup>", "cannot start PostgreSQL: %s\n%s" % (
                    e, getattr(e, "stderr", b"") or b""))
                print("e2e on postgres: %d passed, %d failed" % (runner.passed, runner.failed))
                return 1
            os.environ["ECHD_TEST_PG_BIN"] = cluster.bin
            url = cluster.url
            os.environ["ECHD_TEST_PG_URL"] = url  # -j: the children share this cluster
        echdtest.enable_pg(url, exe)
    if a.storage == "lmdb-staged":
        if kind != "echd":
            ap.error("--storage goes with --echd")
        echdtest.enable_staged(os.environ.get("E2E_STAGE_SIZE", "256kb"))
    if a.tls:
        if kind != "echd":
            ap.error("--tls goes with --echd")
        pki = tempfile.mkdtemp(prefix="echd-e2e-pki-")
        echdtest.enable_tls(pki)
    try:
        if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            runner.fail("<setup>", "%s binary not found or not executable: %s" % (kind, exe))
        elif a.child:
            runner.run_module(a.module)
        else:
            paths = sorted(glob.glob(os.path.join(HERE, "[0-9][0-9]-*.py")))
            if a.jobs > 1 and kind == "echd":
                run_parallel(a, runner, paths, a.jobs)
            else:
                for path in paths:
                    runner.run_module(path)
    except SystemExit as e:
        runner.fail("<runner>", str(e))
    except KeyboardInterrupt:
        runner.fail("<runner>", "interrupted")
    finally:
        if cluster is not None:
            cluster.cleanup()
    if pki:
        shutil.rmtree(pki, ignore_errors=True)
    if a.child:
        for full, reason in runner.not_collected:
            print("@@nc %s\t%s" % (full, reason))
        print("@@result %d %d" % (runner.passed, runner.failed), flush=True)
        return 0
    if runner.not_collected:
        print("# not collected for %s%s%s (echd-only%s%s): %d" % (
            kind, " over TLS" if a.tls else "", " on postgres" if runner.pg else "",
            ", or not run over TLS" if a.tls else "",
            ", or about LMDB itself" if runner.pg else ", or only on postgres",
            len(runner.not_collected)))
        # on postgres always: what the pass leaves out is part of what it proves
        if a.v or runner.pg:
            for full, reason in runner.not_collected:
                print("#   %s: %s" % (full, reason))
    if runner.passed + runner.failed == 0:
        runner.fail("<runner>", "no test was selected")
    print("e2e%s%s: %d passed, %d failed" % (" over TLS" if a.tls else "",
                                             " on postgres" if runner.pg else "",
                                             runner.passed, runner.failed), flush=True)
    return 1 if runner.failed else 0


if __name__ == "__main__":
    sys.exit(main())
