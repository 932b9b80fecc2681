#!/usr/bin/python3
"""bench_pg.py: echd on PostgreSQL beside the same echd on LMDB (issue 27), in one run.

  tests/bench/bench_pg.py [options]

A throw-away PostgreSQL (tests/helpers/pgtmp.py: initdb in a temporary directory, 127.0.0.1,
a free port, fsync on, synchronous_commit on) serves the whole run. Each echd on it gets a
schema of its own (--storage-pg-schema), so nothing of a previous run is read. Measured, each
server in the same run:

  (a) XADD s * f v with redis-benchmark -c 50 -P 16: requests/s, postgres/lmdb (target >= 0.5)
  (b) the work-queue cycle of bench_queue.py (ENTRIES entries of ~100 bytes preloaded, WORKERS
      workers looping XREADGROUP COUNT 10 + XACK until drained, every entry checked delivered
      once): entries/s, postgres/lmdb (target >= 0.5)
  (c) one client, one XADD at a time (redis-benchmark -c 1 -P 1): mean latency, against
      pgbench -c 1 running one INSERT of a row into a bytea table per transaction (autocommit:
      INSERT + COMMIT, one round trip and one WAL flush each) for --pgbench-seconds on the same
      PostgreSQL; pgbench's "latency average". echd/pgbench (target <= 1.5). pgbench runs with
      the simple and the prepared protocol, right after echd on PostgreSQL in each round; the
      lower of the two is the reference.

Redis 7 (appendonly yes, appendfsync always) runs beside them as the usual reference line
(--no-redis leaves it out). For the postgres rows it also prints what PostgreSQL did: its
server processes' CPU (from /proc), transactions committed (pg_stat_database) and rows
written per request, and echd's own commits (INFO). Speed is not asserted: the exit status
is non-zero only when something failed to run or a queue cycle's check failed.

Options:
  -n N                requests of each (a) run (default: 200000)
  --c1-n N            requests of each (c) run (default: 5000)
  --pgbench-seconds S pgbench -T of each protocol (default: 10)
  --entries N         entries of each (b) run (default: 200000)
  --workers N         workers of (b) (default: 50)
  --count N           COUNT of (b)'s XREADGROUP (default: 10)
  --quick             -n 20000, --c1-n 1000, --entries 20000, --pgbench-seconds 3
  --rounds N          measure every server N times, round robin; medians (default: 1)
  --only a,b,c        run these parts only
  --no-postgres       leave echd on PostgreSQL out (to check the script; pgbench still runs)
  --no-redis          leave redis-server out
  --echd PATH         echd binary (default: build/broker/echd)
  --redis PATH        redis-server binary (default: /usr/bin/redis-server)
  --echd-args STR     extra arguments of every echd, split on blanks
  --pg-args STR       extra arguments of the echd on PostgreSQL only
  --clients c|python  (b)'s workers, as bench_queue.py's option
  --worker-exe PATH   bench-queue-worker (default: build/tests/bench-queue-worker)
  --timeout S         bound of each drain of (b), in seconds (default: 600)

Everything listens on 127.0.0.1 on free ports in a temporary directory and is stopped on exit.
This script is not part of `tools/echd-dev test`.
"""
import argparse
import atexit
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import types
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "helpers"))
import benchlib  # noqa: E402
import bench_queue  # noqa: E402
import pgtmp  # noqa: E402
import redis  # noqa: E402

BENCH = shutil.which("redis-benchmark") or "/usr/bin/redis-benchmark"
TIME_LIMIT = 3600

MAIN_PID = os.getpid()
SERVERS = []      # Popen of every server still running
TMP = None
PG = None         # the pgtmp.Cluster


def log(msg):
    print(f"# {msg}", file=sys.stderr, flush=True)


def cleanup():
    if os.getpid() != MAIN_PID:
        return
    for p in list(SERVERS):
        benchlib.stop(SERVERS, p, 10)
    if PG is not None:
        PG.cleanup()
    if TMP:
        shutil.rmtree(TMP, ignore_errors=True)


def on_signal(signum, _frame):
    if os.getpid() != MAIN_PID:
        os._exit(130)
    print(f"bench_pg.py: {signal.Signals(signum).name}; stopped", file=sys.stderr)
    signal.signal(signum, signal.SIG_IGN)
    cleanup()
    os._exit(1 if signum == signal.SIGALRM else 128 + signum)


# ---------------------------------------------------------------------------------------------
# what the servers spent
# ---------------------------------------------------------------------------------------------
def pg_cpu_seconds():
    """user + system CPU seconds of the PostgreSQL server: every process of its session (the
    postmaster was started in a session of its own) and the children it has reaped."""
    hz = os.sysconf("SC_CLK_TCK")
    sid = PG.proc.pid
    ticks = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) != sid:          # field 6 of stat: the session id
            continue
        ticks += int(fields[11]) + int(fields[12])
        if int(pid) == sid:
            ticks += int(fields[13]) + int(fields[14])
    return ticks / hz


def pg_counters():
    """(transactions committed, rows inserted + updated + deleted) of the database so far."""
    out = PG.psql("SELECT xact_commit, tup_inserted + tup_updated + tup_deleted "
                  "FROM pg_stat_database WHERE datname = current_database()")
    c, rows = out.split("|")
    return int(c), int(rows)


def echd_commits(port):
    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)
    try:
        return int(r.info("persistence").get("commits", 0))
    finally:
        r.close()


class Usage:
    """What the server (and PostgreSQL behind it) spent between start() and stop()."""

    def __init__(self, server):
        self.server = server

    def __enter__(self):
        s = self.server
        self.cpu0 = bench_queue.cpu_seconds(s.proc.pid)
        if s.pg:
            self.pg0 = pg_cpu_seconds()
            self.x0, self.rows0 = pg_counters()
            self.c0 = echd_commits(s.port)
        return self

    def __exit__(self, *exc):
        s = self.server
        self.cpu = bench_queue.cpu_seconds(s.proc.pid) - self.cpu0
        if s.pg:
            # pg_stat_database is updated when a backend reports (at the end of a transaction,
            # at most every PGSTAT_MIN_INTERVAL): give it that second
            time.sleep(1.1)
            self.pg_cpu = pg_cpu_seconds() - self.pg0
            x1, rows1 = pg_counters()
            self.xacts, self.rows = x1 - self.x0, rows1 - self.rows0
            self.commits = echd_commits(s.port) - self.c0
        return False

    def figures(self, requests):
        f = {"cpu_us": self.cpu / requests * 1e6}
        if self.server.pg:
            f.update(pg_cpu_us=self.pg_cpu / requests * 1e6, xacts=self.xacts,
                     rows_per_req=self.rows / requests, commits=self.commits,
                     per_commit=requests / self.commits if self.commits else 0.0)
        return f


# ---------------------------------------------------------------------------------------------
# servers
# ---------------------------------------------------------------------------------------------
class Server:
    def __init__(self, name, kind, pg=False):
        self.name, self.kind, self.pg = name, kind, pg
        self.proc = self.port = None


def echd_cmd(args, schema=None):
    extra = shlex.split(args.echd_args)

    def cmd(port, d):
        c = [args.echd, "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
             "--loglevel", "warning", "--appendfsync", "always", *extra]
        if schema is not None:
            c += ["--storage", "postgres", "--storage-url", PG.url,
                  "--storage-pg-schema", schema, *shlex.split(args.pg_args)]
        return c
    return cmd


def redis_cmd(args):
    return lambda port, d: [args.redis, "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
                            "--save", "", "--appendonly", "yes", "--appendfsync", "always",
                            "--maxclients", "10000"]


def wait_active(port, timeout=60):
    """An echd on a shared store answers PING as a standby too: wait until it is active."""
    deadline = time.monotonic() + timeout
    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
    try:
        while True:
            info = r.info()
            if info.get("role", "master") != "standby":
                return
            if time.monotonic() > deadline:
                sys.exit(f"echd on port {port} still a standby after {timeout} s")
            time.sleep(0.1)
    finally:
        r.close()


def start(server, args, part):
    """A fresh server for one part of one round (a fresh schema for postgres)."""
    if server.kind == "redis":
        cmd = redis_cmd(args)
    elif server.pg:
        schema = "bench_%s" % uuid.uuid4().hex[:12]
        cmd = echd_cmd(args, schema)
    else:
        cmd = echd_cmd(args)
    name = f"{server.name}-{part}-{uuid.uuid4().hex[:6]}"
    server.proc, server.port, d = benchlib.launch(TMP, SERVERS, name, cmd)
    server.dir = d
    if server.kind == "echd":
        wait_active(server.port)


def stop(server):
    benchlib.stop(SERVERS, server.proc)
    shutil.rmtree(server.dir, ignore_errors=True)
    server.proc = None


# ---------------------------------------------------------------------------------------------
# the parts
# ---------------------------------------------------------------------------------------------
def redis_benchmark(port, clients, pipeline, n):
    """XADD s * f v; returns (requests/s, mean ms, p50 ms, p99 ms)."""
    out = subprocess.run([BENCH, "-h", "127.0.0.1", "-p", str(port), "-n", str(n),
                          "-c", str(clients), "-P", str(pipeline), "--csv",
                          "XADD", "s", "*", "f", "v"],
                         capture_output=True, text=True, timeout=1800)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith('"XADD')]
    if out.returncode != 0 or not lines:
        sys.exit(f"redis-benchmark failed on port {port} (exit {out.returncode}): "
                 f"{(out.stderr or out.stdout).strip()[-500:]}")
    f = [x.strip('"') for x in lines[-1].split('","')]
    return float(f[1]), float(f[2]), float(f[4]), float(f[6])


def part_a(server, args):
    with Usage(server) as u:
        rps, _mean, p50, p99 = redis_benchmark(server.port, 50, 16, args.n)
    return dict(rps=rps, p50=p50, p99=p99, **u.figures(args.n))


def part_b(server, args, rnd):
    qargs = types.SimpleNamespace(entries=args.entries, workers=args.workers, count=args.count,
                                  timeout=args.timeout, clients=args.clients,
                                  worker_exe=args.worker_exe)
    stream = f"s{rnd}"
    t = time.monotonic()
    ids = bench_queue.preload(server.port, stream, args.entries)
    log(f"{server.name}: preloaded {args.entries} entries in {time.monotonic() - t:.1f} s")
    with Usage(server) as u:
        r = bench_queue.run_cycle(server.proc.pid, server.port, stream, qargs, ids)
    return dict(eps=r["eps"], wall=r["wall"], problems=r["problems"],
                **u.figures(max(r["acked"], 1)))


def part_c(server, args):
    with Usage(server) as u:
        rps, mean, p50, p99 = redis_benchmark(server.port, 1, 1, args.c1_n)
    return dict(rps=rps, mean=mean, p50=p50, p99=p99, **u.figures(args.c1_n))


PGBENCH_SQL = ("INSERT INTO bench_insert (k, v) "
               "VALUES (uuid_send(gen_random_uuid()), '\\x66760a'::bytea);\n")


def pgbench(args, mode):
    """pgbench -c 1 for --pgbench-seconds, one INSERT + COMMIT per transaction; returns
    (mean latency ms, tps, PostgreSQL CPU us per transaction)."""
    script = os.path.join(TMP, "insert.sql")
    with open(script, "w") as f:
        f.write(PGBENCH_SQL)
    cpu0 = pg_cpu_seconds()
    out = subprocess.run([os.path.join(PG.bin, "pgbench") if os.path.exists(
                              os.path.join(PG.bin, "pgbench")) else "pgbench",
                          "-h", "127.0.0.1", "-p", str(PG.port), "-U", PG.user, "-n",
                          "-c", "1", "-M", mode, "-T", str(args.pgbench_seconds),
                          "-f", script, "postgres"],
                         capture_output=True, text=True, timeout=args.pgbench_seconds + 120)
    cpu = pg_cpu_seconds() - cpu0
    lat = re.search(r"latency average = ([0-9.]+) ms", out.stdout)
    tps = re.search(r"tps = ([0-9.]+)", out.stdout)
    if out.returncode != 0 or not lat or not tps:
        sys.exit(f"pgbench failed (exit {out.returncode}): {out.stdout[-500:]}"
                 f"{out.stderr[-500:]}")
    n = float(tps.group(1)) * args.pgbench_seconds
    return float(lat.group(1)), float(tps.group(1)), cpu / max(n, 1) * 1e6


# ---------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------
def med(rs, key):
    return statistics.median(r[key] for r in rs)


def ratio(a, b):
    return f"{a / b:5.2f}x" if b else "  n/a"


def pg_note(rs):
    if "pg_cpu_us" not in rs[0]:
        return ""
    return (f"  PostgreSQL CPU {med(rs, 'pg_cpu_us'):.1f} us/req, "
            f"{med(rs, 'rows_per_req'):.2f} rows/req, "
            f"{med(rs, 'per_commit'):.1f} req/commit")


def report(args, servers, res, pgb):
    names = [s.name for s in servers]
    tail = f", medians of {args.rounds} rounds" if args.rounds > 1 else ""
    print(f"\nechd on PostgreSQL vs LMDB, {os.cpu_count()} CPUs{tail}")
    if "a" in res:
        print(f"\n(a) XADD s * f v, redis-benchmark -c 50 -P 16 -n {args.n}")
        print(f"{'server':<16} {'requests/s':>11} {'p50 ms':>8} {'p99 ms':>8} "
              f"{'server CPU us':>14}")
        for n in names:
            rs = res["a"][n]
            print(f"{n:<16} {med(rs, 'rps'):>11.0f} {med(rs, 'p50'):>8.3f} "
                  f"{med(rs, 'p99'):>8.3f} {med(rs, 'cpu_us'):>14.1f}" + pg_note(rs))
    if "b" in res:
        print(f"\n(b) work-queue cycle: {args.entries} entries, {args.workers} workers, "
              f"XREADGROUP COUNT {args.count} + XACK")
        print(f"{'server':<16} {'entries/s':>11} {'wall s':>8} {'server CPU us':>14}  check")
        for n in names:
            rs = res["b"][n]
            bad = [p for r in rs for p in r["problems"]]
            print(f"{n:<16} {med(rs, 'eps'):>11.0f} {med(rs, 'wall'):>8.2f} "
                  f"{med(rs, 'cpu_us'):>14.1f}  " + ("ok" if not bad else "FAILED: "
                                                     + "; ".join(bad)) + pg_note(rs))
    if "c" in res:
        print(f"\n(c) one client, one XADD at a time (redis-benchmark -c 1 -P 1 -n {args.c1_n})")
        print(f"{'server':<16} {'mean ms':>8} {'p50 ms':>8} {'p99 ms':>8} {'server CPU us':>14}")
        for n in names:
            rs = res["c"][n]
            print(f"{n:<16} {med(rs, 'mean'):>8.3f} {med(rs, 'p50'):>8.3f} "
                  f"{med(rs, 'p99'):>8.3f} {med(rs, 'cpu_us'):>14.1f}" + pg_note(rs))
        for mode in ("simple", "prepared"):
            lat = statistics.median(x[0] for x in pgb[mode])
            tps = statistics.median(x[1] for x in pgb[mode])
            cpu = statistics.median(x[2] for x in pgb[mode])
            print(f"{'pgbench ' + mode:<16} {lat:>8.3f} {'':>8} {'':>8} {'':>14}  "
                  f"{tps:.0f} tps, PostgreSQL CPU {cpu:.1f} us/transaction")

    print("\nsummary")
    ok = True
    if "echd-postgres" in names and "echd-lmdb" in names:
        if "a" in res:
            a_pg, a_l = med(res["a"]["echd-postgres"], "rps"), med(res["a"]["echd-lmdb"], "rps")
            print(f"  (a) XADD c50 P16   postgres/lmdb {ratio(a_pg, a_l)} (target >= 0.5): "
                  f"{a_pg:.0f} vs {a_l:.0f} requests/s")
        if "b" in res:
            b_pg, b_l = med(res["b"]["echd-postgres"], "eps"), med(res["b"]["echd-lmdb"], "eps")
            print(f"  (b) work queue     postgres/lmdb {ratio(b_pg, b_l)} (target >= 0.5): "
                  f"{b_pg:.0f} vs {b_l:.0f} entries/s")
    if "c" in res and "echd-postgres" in names:
        ref = min(statistics.median(x[0] for x in pgb[m]) for m in ("simple", "prepared"))
        c_pg = med(res["c"]["echd-postgres"], "mean")
        print(f"  (c) c1 XADD mean   postgres/pgbench {ratio(c_pg, ref)} (target <= 1.5): "
              f"{c_pg:.3f} vs {ref:.3f} ms")
        if args.rounds > 1:
            # each round's pair ran back to back: their ratio moves less with the disk's pace
            pairs = sorted(r["mean"] / min(pgb["simple"][i][0], pgb["prepared"][i][0])
                           for i, r in enumerate(res["c"]["echd-postgres"]))
            print(f"      round by round {pairs[0]:.2f}x to {pairs[-1]:.2f}x, median "
                  f"{statistics.median(pairs):.2f}x")
    if "redis-always" in names:
        for part, key in (("a", "rps"), ("b", "eps")):
            if part in res:
                r = med(res[part]["redis-always"], key)
                print(f"  ({part}) vs redis always: " + ", ".join(
                    f"{n} {ratio(med(res[part][n], key), r)}" for n in names
                    if n != "redis-always"))
    for rs in res.get("b", {}).values():
        ok = ok and not any(r["problems"] for r in rs)
    return 0 if ok else 1


def main():
    global TMP, PG, TIME_LIMIT
    ap = argparse.ArgumentParser(description="echd on PostgreSQL vs LMDB (issue 27)",
                                 epilog="See the head of this file for details.")
    ap.add_argument("-n", type=int, default=200000)
    ap.add_argument("--c1-n", type=int, default=5000)
    ap.add_argument("--pgbench-seconds", type=int, default=10)
    ap.add_argument("--entries", type=int, default=200000)
    ap.add_argument("--workers", type=int, default=50)
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--only", default="a,b,c")
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--no-redis", action="store_true")
    ap.add_argument("--echd", default=os.path.join(ROOT, "build", "broker", "echd"))
    ap.add_argument("--redis", default="/usr/bin/redis-server")
    ap.add_argument("--echd-args", default="")
    ap.add_argument("--pg-args", default="")
    ap.add_argument("--clients", choices=("c", "python"), default=None)
    ap.add_argument("--worker-exe",
                    default=os.path.join(ROOT, "build", "tests", "bench-queue-worker"))
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    if args.quick:
        args.n, args.c1_n, args.entries, args.pgbench_seconds = 20000, 1000, 20000, 3
    parts = [p for p in args.only.split(",") if p]
    if set(parts) - {"a", "b", "c"} or not parts:
        ap.error("--only takes a comma-separated list of a, b and c")
    if args.clients is None:
        args.clients = "c" if os.access(args.worker_exe, os.X_OK) else "python"
    if args.clients == "c" and not os.access(args.worker_exe, os.X_OK):
        sys.exit(f"bench-queue-worker not found at {args.worker_exe} (build it first)")
    if not os.access(args.echd, os.X_OK):
        sys.exit(f"echd not found at {args.echd} (build it first: tools/echd-dev build)")
    if not os.access(BENCH, os.X_OK):
        sys.exit("redis-benchmark not found (apt-get install redis-tools)")
    if not args.no_redis and not os.access(args.redis, os.X_OK):
        sys.exit(f"redis-server not found at {args.redis} (or give --no-redis)")

    servers = [Server("echd-lmdb", "echd")]
    if not args.no_postgres:
        servers.append(Server("echd-postgres", "echd", pg=True))
    if not args.no_redis:
        servers.append(Server("redis-always", "redis"))

    TMP = tempfile.mkdtemp(prefix="echd-bench-pg.", dir=os.environ.get("TMPDIR", "/tmp"))
    bench_queue.TMP = TMP
    atexit.register(cleanup)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM):
        signal.signal(sig, on_signal)
    signal.alarm(TIME_LIMIT * max(1, args.rounds))

    log("starting PostgreSQL (pgtmp.py)")
    PG = pgtmp.Cluster(fsync=True)  # as production runs: commits wait for the disk
    PG.initdb().start()
    log(f"PostgreSQL on port {PG.port}: synchronous_commit="
        f"{PG.psql('SHOW synchronous_commit')}, fsync={PG.psql('SHOW fsync')}, "
        f"version {PG.psql('SHOW server_version')}")
    PG.psql("CREATE TABLE bench_insert (k bytea PRIMARY KEY, v bytea)")

    res = {p: {s.name: [] for s in servers} for p in parts}
    pgb = {"simple": [], "prepared": []}
    t_all = time.monotonic()
    # Every part of every round on fresh servers (a fresh schema on PostgreSQL, an empty data
    # directory on LMDB), servers taken in turn so that a slow minute of the disk does not fall
    # on one of them only.
    for rnd in range(args.rounds):
        for part in parts:
            for s in servers:
                start(s, args, part)
                log(f"round {rnd + 1}/{args.rounds} ({part}) {s.name}")
                if part == "a":
                    r = part_a(s, args)
                elif part == "b":
                    r = part_b(s, args, rnd)
                else:
                    r = part_c(s, args)
                res[part][s.name].append(r)
                stop(s)
                # pgbench right after echd on PostgreSQL (or first, without it), so that the
                # two latencies of a round see the disk at the same pace
                if part == "c" and (s.pg or (args.no_postgres and s is servers[0])):
                    for mode in ("simple", "prepared"):
                        log(f"round {rnd + 1}/{args.rounds} (c) pgbench -M {mode}")
                        pgb[mode].append(pgbench(args, mode))
    rc = report(args, servers, res, pgb)
    print(f"\ntotal time {time.monotonic() - t_all:.0f} s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
