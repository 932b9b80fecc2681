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
  --memory            instead of (a) to (c): part (m), issue 34's figures. Per engine (lmdb,
                      postgres): --m-entries entries of 16 bytes in one stream (default
                      2000000), --m-pending of them pending (default 10000); the anonymous
                      memory (RssAnon) after the load; a cold start (exec to the first XLEN
                      answered) and the memory then; on postgres also the p99 of a c1 XADD
                      loop (--m-c1-n requests, default 3000) alone and beside a scan of
                      --m-scan cold entries with XRANGE COUNT 1000 (default 1000000), and a
                      standby's takeover after kill -9 of the active one (to the first XLEN
                      answered), with the longest PING wait meanwhile (the watchdog's view).
                      The c1 loop beside the scan runs on lmdb too, as the reference: there
                      nothing is fetched, so it shows what the scanning client costs alone
  --m-vacuum          VACUUM (FREEZE, ANALYZE) the schema's tables after the load, and a
                      CHECKPOINT, before the cold start: the state autovacuum and the
                      checkpointer leave, rather than a scan of rows no one read yet right
                      after a bulk load
  --m-scan-nice       run the scanning client in its own process at nice 19, so that what it
                      costs the c1 loop is the server's work, not the client's CPU
  --m-pg-scan         on postgres, a third c1 loop beside the same rows read straight from
                      PostgreSQL (psycopg2, 1000 a query by key range, paced to the rate of
                      the scan through echd): what such a reader costs PostgreSQL's commits
                      without echd in the way
  --m-perf DIR        record every process's CPU (perf record -a) while each scan runs, into
                      DIR/<server>.data, and print each process's share

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
import socket
import tempfile
import threading
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
    """user + system CPU seconds of the PostgreSQL server: the postmaster, its children (the
    backends and the auxiliary processes: each calls setsid(), so they are not found by the
    postmaster's session) and the children it has reaped (backends of closed connections)."""
    hz = os.sysconf("SC_CLK_TCK")
    top = PG.proc.pid
    ticks = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(pid) == top:
            ticks += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        elif int(fields[1]) == top:        # field 4 of stat: the parent
            ticks += int(fields[11]) + int(fields[12])
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
# (m) memory, start and takeover with many entries (issue 34)
# ---------------------------------------------------------------------------------------------
def rss_anon_mib(pid):
    """The anonymous memory a process holds (RssAnon of /proc/PID/status), in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith("RssAnon:"):
                return int(ln.split()[1]) / 1024
    return 0.0


def answers_xlen(port, key=b"q"):
    """Whether the server on port answers XLEN key with a length now (a standby answers
    READONLY, a server not listening yet nothing)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as c:
            c.settimeout(5)
            c.sendall(b"XLEN %s\r\n" % key)
            return c.recv(64).startswith(b":")
    except OSError:
        return False


def wait_xlen(port, timeout=600):
    """Seconds until XLEN q answers with a length."""
    t0 = time.monotonic()
    while not answers_xlen(port):
        if time.monotonic() - t0 > timeout:
            sys.exit(f"no answer to XLEN on port {port} within {timeout} s")
        time.sleep(0.002)
    return time.monotonic() - t0


def spawn(name, cmd):
    logf = open(os.path.join(TMP, name + ".log"), "ab")
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                         start_new_session=True, preexec_fn=benchlib.die_with_parent)
    logf.close()
    SERVERS.append(p)
    return p


class Pinger:
    """PING every 2 ms from a thread; the longest wait for an answer (a loop that stalls
    shows here, as systemd's watchdog would see it) once the server first answered."""

    def __init__(self, port):
        self.port, self.gap, self.done = port, 0.0, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        conn = None
        while not self.done.is_set():
            try:
                if conn is None:
                    conn = socket.create_connection(("127.0.0.1", self.port), timeout=60)
                t = time.monotonic()
                conn.sendall(b"PING\r\n")
                conn.recv(64)
                self.gap = max(self.gap, time.monotonic() - t)
            except OSError:
                conn = None
            time.sleep(0.002)

    def stop(self):
        self.done.set()
        self.thread.join(5)
        return self.gap


def bench_p99(port, n, key="w"):
    out = subprocess.run([BENCH, "-h", "127.0.0.1", "-p", str(port), "-n", str(n), "-c", "1",
                          "-P", "1", "--csv", "XADD", key, "*", "f", "v"],
                         capture_output=True, text=True, timeout=1800)
    f = [x.strip('"') for x in out.stdout.splitlines()[-1].split('","')]
    return float(f[2]), float(f[6])  # mean, p99


def scanner(port, stop_evt, out, limit):
    """XRANGE q <from> + COUNT 1000 from the first entry on, up to limit entries."""
    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=600)
    start, n = "-", 0
    try:
        while not stop_evt.is_set() and n < limit:
            got = r.xrange("q", start, "+", count=1000)
            if not got:
                break
            n += len(got)
            last = got[-1][0].decode()
            ms, seq = last.split("-")
            start = f"{ms}-{int(seq) + 1}"
    finally:
        out["scanned"] = n
        r.close()


def pg_scanner(schema, out, limit, rate):
    """--m-pg-scan: up to limit rows of the schema's entries table, 1000 a query by key
    range, read straight from PostgreSQL (psycopg2, Debian's python3-psycopg2), at most rate
    rows a second (the scan through echd's: the same load, 0: unpaced)."""
    import psycopg2
    c = psycopg2.connect(host="127.0.0.1", port=PG.port, user=PG.user, dbname="postgres")
    c.autocommit = True
    cur, last, n = c.cursor(), b"", 0
    t0 = time.monotonic()
    try:
        while n < limit:
            if rate > 0:
                time.sleep(max(0.0, t0 + n / rate - time.monotonic()))
            cur.execute(f'SELECT k, v FROM "{schema}".entries WHERE k > %s ORDER BY k '
                        f'LIMIT 1000', (psycopg2.Binary(last),))
            rows = cur.fetchall()
            if not rows:
                break
            n += len(rows)
            last = bytes(rows[-1][0])
    finally:
        out["scanned"] = n
        c.close()


def scanner_niced(port, stop_evt, out, limit):
    """scanner() in a process of its own at nice 19 (--m-scan-nice): the scanning client then
    takes only the CPU no one else wants."""
    code = ("import sys, threading; sys.path.insert(0, %r); import bench_pg; o = {}; "
            "bench_pg.scanner(%d, threading.Event(), o, %d); print(o['scanned'])"
            % (os.path.dirname(os.path.abspath(__file__)), port, limit))
    p = subprocess.run(["nice", "-n", "19", sys.executable, "-c", code], capture_output=True,
                       text=True, timeout=1800)
    out["scanned"] = int(p.stdout.strip() or 0)


def part_m(args):
    """Per engine: preload, anonymous memory, a cold start, (postgres) a scan beside a c1
    XADD loop, and a takeover by a standby after kill -9 of the active one."""
    value = "v" * 16
    rows = {}
    engines = [("echd-lmdb", None)] + ([] if args.no_postgres else [("echd-postgres", "pg")])
    for name, pg in engines:
        d = os.path.join(TMP, name + "-m")
        os.makedirs(d, exist_ok=True)
        schema = "bench_m_%s" % uuid.uuid4().hex[:8]
        port = benchlib.free_port()

        def cmd(p, dd=d, schema=schema, pg=pg):
            c = [args.echd, "--port", str(p), "--bind", "127.0.0.1", "--dir", dd,
                 "--loglevel", "notice", "--appendfsync", "always",
                 *shlex.split(args.echd_args)]
            if pg:
                c += ["--storage", "postgres", "--storage-url", PG.url,
                      "--storage-pg-schema", schema, *shlex.split(args.pg_args)]
            return c
        r = {}
        proc = spawn(name + "-load", cmd(port))
        wait_xlen(port)
        log(f"(m) {name}: preloading {args.m_entries} entries")
        t = time.monotonic()
        out = subprocess.run([BENCH, "-h", "127.0.0.1", "-p", str(port), "-n",
                              str(args.m_entries), "-c", "20", "-P", "100", "-q",
                              "XADD", "q", "*", "f", value],
                             capture_output=True, text=True, timeout=7200)
        if out.returncode != 0:
            sys.exit(f"preload failed: {out.stderr[-300:]}")
        cl = redis.Redis(host="127.0.0.1", port=port, socket_timeout=600)
        cl.execute_command("XGROUP", "CREATE", "q", "g", "0")
        cl.execute_command("XREADGROUP", "GROUP", "g", "c", "COUNT", str(args.m_pending),
                           "STREAMS", "q", ">")
        r["entries"] = cl.xlen("q")
        cl.close()
        r["load_s"] = time.monotonic() - t
        r["rss_loaded"] = rss_anon_mib(proc.pid)
        benchlib.stop(SERVERS, proc)
        if pg and args.m_vacuum:
            # what autovacuum would have done by the time anyone scans history: without
            # it, the scan's first reads set every tuple's hint bits and autovacuum may run
            # beside the measurement
            t = time.monotonic()
            for tb in PG.psql(f"SELECT tablename FROM pg_tables WHERE schemaname = '{schema}'"
                              ).split():
                PG.psql(f'VACUUM (FREEZE, ANALYZE) "{schema}"."{tb}"')
            PG.psql("CHECKPOINT")  # and the load's dirty pages on disk: the scan writes none
            r["vacuum_s"] = time.monotonic() - t
        # a cold start: exec to the first XLEN answered
        t = time.monotonic()
        proc = spawn(name + "-start", cmd(port))
        wait_xlen(port)
        r["start_s"] = time.monotonic() - t
        r["rss_started"] = rss_anon_mib(proc.pid)
        # the scan: cold on postgres (fetched), on lmdb the reference (nothing to fetch: what
        # the scanning client and the replies alone cost the c1 loop on this machine)
        resetstat(port)
        mean0, p99_0 = bench_p99(port, args.m_c1_n)
        r["inner_0"] = inner_p99(port)
        resetstat(port)
        stop_evt, res = threading.Event(), {}
        th = threading.Thread(target=scanner if not args.m_scan_nice else scanner_niced,
                              args=(port, stop_evt, res, args.m_scan), daemon=True)
        prof = perf_start(args, name)
        t = time.monotonic()
        th.start()
        mean1, p99_1 = bench_p99(port, args.m_c1_n)
        r["inner_1"] = inner_p99(port)
        th.join()
        r.update(p99_0=p99_0, p99_1=p99_1, mean0=mean0, mean1=mean1,
                 scanned=res.get("scanned", 0), scan_s=time.monotonic() - t,
                 rss_scanned=rss_anon_mib(proc.pid), perf=perf_stop(prof))
        if pg and args.m_pg_scan:
            # the reference on PostgreSQL: the same rows read by a client of PostgreSQL
            # itself, by key ranges as the cache's fetches do, beside the same c1 loop
            resetstat(port)
            res2 = {}
            rate = r["scanned"] / r["scan_s"] if r["scan_s"] > 0 else 0
            th = threading.Thread(target=pg_scanner, args=(schema, res2, args.m_scan, rate),
                                  daemon=True)
            t = time.monotonic()
            th.start()
            mean2, p99_2 = bench_p99(port, args.m_c1_n)
            r["inner_2"] = inner_p99(port)
            th.join()
            r.update(p99_2=p99_2, pg_scanned=res2.get("scanned", 0),
                     pg_scan_s=time.monotonic() - t)
        if pg:
            # a takeover: a standby on the same schema, kill -9 of the active one
            port2 = benchlib.free_port()
            d2 = d + "-standby"  # its own lock and log; the same schema
            os.makedirs(d2, exist_ok=True)
            proc2 = spawn(name + "-standby", cmd(port2, d2))
            t = time.monotonic()
            while not answers_ping(port2):
                if time.monotonic() - t > 120:
                    sys.exit("the standby did not start")
                time.sleep(0.01)
            time.sleep(0.5)
            pinger = Pinger(port2)
            time.sleep(0.1)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            SERVERS.remove(proc)
            t = time.monotonic()
            while not answers_xlen(port2):
                if time.monotonic() - t > 600:
                    sys.exit("no takeover within 600 s")
                time.sleep(0.002)
            r["takeover_s"] = time.monotonic() - t
            time.sleep(0.2)
            r["takeover_gap_s"] = pinger.stop()
            r["rss_takeover"] = rss_anon_mib(proc2.pid)
            proc = proc2
        benchlib.stop(SERVERS, proc)
        rows[name] = r
    return rows


def resetstat(port):
    with redis.Redis(host="127.0.0.1", port=port, socket_timeout=60) as c:
        c.execute_command("CONFIG", "RESETSTAT")


def inner_p99(port):
    """The server's own p99s since the last RESETSTAT, in ms: its commits (the storage's round
    trip: PostgreSQL's COMMIT, LMDB's write) and XADD's run in the loop."""
    with redis.Redis(host="127.0.0.1", port=port, socket_timeout=60) as c:
        info = c.info("everything")
    def p99(v):
        if isinstance(v, dict):
            return float(v.get("p99", v.get("p99.0", "nan")))
        m = re.search(r"p99=([\d.]+)", str(v))
        return float(m.group(1)) if m else float("nan")
    return (p99(info.get("commit_latency_percentiles_usec", "")) / 1000,
            p99(info.get("latency_percentiles_usec_xadd", "")) / 1000)


def perf_start(args, name):
    """--m-perf: every process's CPU while the scan runs (perf record -a, no call graphs)."""
    if not args.m_perf:
        return None
    os.makedirs(args.m_perf, exist_ok=True)
    out = os.path.join(args.m_perf, name + ".data")
    pr = subprocess.Popen(["perf", "record", "-a", "-F", "499", "-o", out, "--", "sleep", "600"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # perf's own start is not the scan's
    return pr, out


def perf_stop(prof):
    """Each process's share of the samples, the largest first: 'comm pct, ...'."""
    if prof is None:
        return ""
    pr, out = prof
    pr.send_signal(signal.SIGINT)
    pr.wait(60)
    rep = subprocess.run(["perf", "report", "-i", out, "--stdio", "--sort", "comm",
                          "--percent-limit", "2"], capture_output=True, text=True, timeout=300)
    shares = []
    for line in rep.stdout.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S.*)$", line)
        if m:
            shares.append(f"{m.group(2).strip()} {float(m.group(1)):.0f}%")
    return ", ".join(shares)


def answers_ping(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as c:
            c.settimeout(5)
            c.sendall(b"PING\r\n")
            return c.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def report_m(args, rows):
    print(f"\n(m) {args.m_entries} entries of 16 bytes in one stream, {args.m_pending} pending "
          f"({os.cpu_count()} CPUs; the machine is shared: times are of this run)")
    print(f"{'server':<16} {'RssAnon MiB':>11} {'after start':>11} {'cold start s':>12} "
          f"{'takeover s':>10} {'max PING s':>10}")
    for n, r in rows.items():
        print(f"{n:<16} {r['rss_loaded']:>11.1f} {r['rss_started']:>11.1f} "
              f"{r['start_s']:>12.3f} {r.get('takeover_s', float('nan')):>10.3f} "
              f"{r.get('takeover_gap_s', float('nan')):>10.3f}")
    for n, r in rows.items():
        if "p99_0" in r:
            what = "cold" if "rss_takeover" in r else "warm (the reference)"
            print(f"{n}: c1 XADD p99 {r['p99_0']:.3f} ms alone, {r['p99_1']:.3f} ms beside a "
                  f"scan of {r['scanned']} {what} entries (XRANGE COUNT 1000, "
                  f"{r['scan_s']:.1f} s): {r['p99_1'] / r['p99_0'] if r['p99_0'] else 0:.2f}x"
                  f"{' (target <= 2)' if 'rss_takeover' in r else ''}; RssAnon after the scan "
                  f"{r['rss_scanned']:.1f} MiB"
                  + (f", after the takeover {r['rss_takeover']:.1f} MiB"
                     if "rss_takeover" in r else ""))
            print(f"{n}: inside the server, p99 alone / beside the scan: its commits "
                  f"{r['inner_0'][0]:.3f} / {r['inner_1'][0]:.3f} ms, XADD in the loop "
                  f"{r['inner_0'][1]:.3f} / {r['inner_1'][1]:.3f} ms")
            if "p99_2" in r:
                print(f"{n}: the reference on PostgreSQL: c1 XADD p99 {r['p99_2']:.3f} ms "
                      f"beside {r['pg_scanned']} rows read straight from PostgreSQL (1000 a "
                      f"query, {r['pg_scan_s']:.1f} s): {r['p99_2'] / r['p99_0']:.2f}x alone; "
                      f"its commits {r['inner_2'][0]:.3f} ms, XADD in the loop "
                      f"{r['inner_2'][1]:.3f} ms")
            if "vacuum_s" in r:
                print(f"{n}: the tables were vacuumed and checkpointed after the load "
                      f"({r['vacuum_s']:.1f} s)")
            if r.get("perf"):
                print(f"{n}: CPU during the scan, by process (perf, all CPUs): {r['perf']}")


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
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--m-entries", type=int, default=2000000)
    ap.add_argument("--m-pending", type=int, default=10000)
    ap.add_argument("--m-scan", type=int, default=1000000)
    ap.add_argument("--m-perf", default="")
    ap.add_argument("--m-vacuum", action="store_true")
    ap.add_argument("--m-scan-nice", action="store_true")
    ap.add_argument("--m-pg-scan", action="store_true")
    ap.add_argument("--m-c1-n", type=int, default=3000)
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

    if args.memory:
        rows = part_m(args)
        report_m(args, rows)
        return 0
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
