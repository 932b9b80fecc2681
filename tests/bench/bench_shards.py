#!/usr/bin/python3
"""bench_shards.py: one shard against three (issue 36), on one PostgreSQL, in one run.

  tests/bench/bench_shards.py [options]

A throw-away PostgreSQL (tests/helpers/pgtmp.py, fsync on, synchronous_commit on) serves the
run. Two clusters are measured in turn, each on a fresh base schema:

  1 shard:  one echd, cluster-enabled yes, cluster-shards 1
  3 shards: three echd, cluster-enabled yes, cluster-shards 3: each active for one shard
  3 shards, one echd: cluster-shards-per-node 3, its three workers each active for one shard

and for each, aggregated over its front ends:

  (a) XADD with redis-benchmark, 50 connections in all (split evenly over the front ends),
      pipeline 16, -n requests in all: requests/s (all requests over the longest run's wall)
  (b) the work-queue cycle of bench_queue.py: --entries entries of ~100 bytes in all (one
      stream per front end), --workers workers in all looping XREADGROUP COUNT 10 + XACK with
      bench-queue-worker until drained, every entry checked delivered once: entries/s

redis-benchmark does not follow MOVED, so each front end is driven with keys of its own slots:
a hash tag chosen per front end with CLUSTER KEYSLOT against the slots its CLUSTER NODES line
says it serves. Also printed: the CPU seconds the echd processes and PostgreSQL spent per
second of each part (2.0 = both cores of a 2-core machine busy), the clients' (redis-benchmark,
bench-queue-worker) likewise, and the front ends' commits per second (INFO commits).

Options:
  -n N          XADD requests of (a), in all (default 200000)
  --entries N   entries of (b), in all (default 150000)
  --workers N   workers of (b), in all (default 48)
  --quick       -n 30000, --entries 30000
  --echd PATH   echd binary (default build/broker/echd)
  --worker-exe PATH  bench-queue-worker (default build/tests/bench-queue-worker)

Speed is not asserted: the exit status is non-zero only when something failed to run or a
queue cycle's check failed. This script is not part of `tools/echd-dev test`.
"""
import argparse
import atexit
import os
import resource
import subprocess
import sys
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
import bench_pg  # noqa: E402
import bench_queue  # noqa: E402
import pgtmp  # noqa: E402
import redis  # noqa: E402

# bench_pg's globals: its cleanup() stops these servers and PostgreSQL and removes TMP
SERVERS = bench_pg.SERVERS
log = bench_pg.log


def served_range(port):
    """(first, last) slot this front end serves, from its CLUSTER NODES line; None: none."""
    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10, decode_responses=True)
    try:
        for ln in r.execute_command("CLUSTER", "NODES").splitlines():
            f = ln.split()
            if "myself" in f[2] and len(f) > 8:
                lo, hi = f[8].split("-")
                return int(lo), int(hi)
    finally:
        r.close()
    return None


def tag_for(port, rng):
    """A hash tag whose slot (CLUSTER KEYSLOT, asked of the front end) is in rng."""
    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
    try:
        for n in range(100000):
            tag = "{b%d}" % n
            if rng[0] <= r.execute_command("CLUSTER", "KEYSLOT", tag) <= rng[1]:
                return tag
    finally:
        r.close()
    sys.exit("no hash tag found for slots %d-%d" % rng)


def worker_pid(port):
    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)
    try:
        return r.info("server")["process_id"]
    finally:
        r.close()


def start_cluster(args, nshards, per_node=1):
    """nshards front ends on a fresh base schema, each serving one shard: ([(process, port,
    tag)], [Popen to stop]). per_node > 1: one echd of that many workers (ports port + i),
    each worker a front end (process: its pid, for the CPU it spends)."""
    base = "bsh_%s" % uuid.uuid4().hex[:10]

    def cmd(port, d):
        return [args.echd, "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
                "--loglevel", "warning", "--appendfsync", "always", "--storage", "postgres",
                "--storage-url", bench_pg.PG.url, "--storage-pg-schema", base,
                "--cluster-enabled", "yes", "--cluster-shards", str(nshards),
                "--ha-retry-ms", "100", "--cluster-shards-per-node", str(per_node)]
    fronts, procs = [], []
    for i in range(nshards // per_node):
        p, port, _ = benchlib.launch(bench_pg.TMP, SERVERS, f"{base}-{i}", cmd,
                                     nports=per_node)
        procs.append(p)
        if per_node == 1:
            fronts.append((p, port))
            continue
        for j in range(per_node):
            deadline = time.monotonic() + 60
            while True:
                try:
                    pid = worker_pid(port + j)
                    break
                except redis.exceptions.ConnectionError:
                    if time.monotonic() > deadline:
                        sys.exit(f"worker {j} of {base}-{i} did not start")
                    time.sleep(0.1)
            fronts.append((types.SimpleNamespace(pid=pid), port + j))
    deadline = time.monotonic() + 60
    ranges = [None] * nshards
    while any(r is None for r in ranges):
        if time.monotonic() > deadline:
            sys.exit(f"{nshards} front ends not each serving a shard within 60 s")
        ranges = [served_range(port) for _, port in fronts]
        time.sleep(0.1)
    if len(set(ranges)) != nshards:
        sys.exit(f"front ends serve {ranges}")
    return [(p, port, tag_for(port, rng)) for (p, port), rng in zip(fronts, ranges)], procs


def children_cpu():
    """CPU seconds of this process' children that ended (redis-benchmark, the workers)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


class Usage:
    """CPU seconds per second (cores) of the front ends, PostgreSQL and the clients, and the
    front ends' commits (INFO; PostgreSQL's own counters lag), over a with block."""

    def __init__(self, fronts):
        self.pids = [p.pid for p, _, _ in fronts]
        self.ports = [port for _, port, _ in fronts]

    def __enter__(self):
        self.t = time.monotonic()
        self.echd = sum(bench_queue.cpu_seconds(pid) for pid in self.pids)
        self.pg = bench_pg.pg_cpu_seconds()
        self.clients = children_cpu()
        self.commits = sum(bench_pg.echd_commits(port) for port in self.ports)
        return self

    def __exit__(self, *exc):
        wall = time.monotonic() - self.t
        self.echd_cores = (sum(bench_queue.cpu_seconds(pid) for pid in self.pids)
                           - self.echd) / wall
        self.pg_cores = (bench_pg.pg_cpu_seconds() - self.pg) / wall
        self.client_cores = (children_cpu() - self.clients) / wall
        self.commits_ps = (sum(bench_pg.echd_commits(port) for port in self.ports)
                           - self.commits) / wall


def split(total, parts):
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def part_a(args, fronts):
    """XADD c50 P16 over the front ends at once: requests/s in all."""
    results = [None] * len(fronts)
    clients = split(50, len(fronts))
    reqs = split(args.n, len(fronts))

    def run(i, port, tag):
        t = time.monotonic()
        out = subprocess.run([bench_pg.BENCH, "-h", "127.0.0.1", "-p", str(port), "-n",
                              str(reqs[i]), "-c", str(clients[i]), "-P", "16", "-q",
                              "XADD", tag + "s", "*", "f", "v"],
                             capture_output=True, text=True, timeout=1800)
        results[i] = (out.returncode, time.monotonic() - t, out.stderr)
    with Usage(fronts) as u:
        threads = [threading.Thread(target=run, args=(i, port, tag))
                   for i, (_, port, tag) in enumerate(fronts)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for rc, _, err in results:
        if rc != 0:
            sys.exit(f"redis-benchmark failed: {err.strip()[-300:]}")
    # every XADD was acknowledged: the streams hold them all (with -P, redis-benchmark may
    # send a few past -n: the streams count what was done)
    done = 0
    for (_, port, tag), want in zip(fronts, reqs):
        r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)
        n = r.xlen(tag + "s")
        r.close()
        if n < want:
            sys.exit(f"XLEN {tag}s on port {port} is {n}, fewer than {want}")
        done += n
    return done / max(w for _, w, _ in results), u


def part_b(args, fronts):
    """The work-queue cycle on every front end at once: entries/s in all."""
    entries = split(args.entries, len(fronts))
    workers = split(args.workers, len(fronts))
    ids = []
    for (_, port, tag), n in zip(fronts, entries):
        ids.append(bench_queue.preload(port, tag + "q", n))
    results = [None] * len(fronts)

    def run(i, p, port, tag):
        qargs = types.SimpleNamespace(entries=entries[i], workers=workers[i], count=10,
                                      timeout=600, clients="c", worker_exe=args.worker_exe)
        results[i] = bench_queue.run_cycle(p.pid, port, tag + "q", qargs, ids[i])
    with Usage(fronts) as u:
        threads = [threading.Thread(target=run, args=(i, p, port, tag))
                   for i, (p, port, tag) in enumerate(fronts)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    problems = [x for r in results for x in r["problems"]]
    if problems:
        sys.exit("queue cycle: " + "; ".join(problems))
    return sum(r["acked"] for r in results) / max(r["wall"] for r in results), u


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=200000)
    ap.add_argument("--entries", type=int, default=150000)
    ap.add_argument("--workers", type=int, default=48)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--echd", default=os.path.join(ROOT, "build", "broker", "echd"))
    ap.add_argument("--worker-exe", default=os.path.join(ROOT, "build", "tests",
                                                         "bench-queue-worker"))
    args = ap.parse_args()
    if args.quick:
        args.n, args.entries = 30000, 30000
    for exe in (args.echd, args.worker_exe, bench_pg.BENCH):
        if not os.access(exe, os.X_OK):
            sys.exit(f"{exe} not found (build it first; redis-benchmark: redis-tools)")
    bench_pg.TMP = bench_queue.TMP = tempfile.mkdtemp(prefix="echd-bench-shards.",
                                                      dir=os.environ.get("TMPDIR", "/tmp"))
    atexit.register(bench_pg.cleanup)
    log("starting PostgreSQL (pgtmp.py)")
    bench_pg.PG = pgtmp.Cluster(fsync=True)
    bench_pg.PG.initdb().start()
    rows = []
    layouts = [(1, 1), (3, 1), (3, 3)]  # (shards, cluster-shards-per-node)
    for nshards, per_node in layouts:
        for part in ("a", "b"):
            fronts, procs = start_cluster(args, nshards, per_node)
            log(f"{nshards} shard(s), per node {per_node}, part {part}: front ends on "
                + ", ".join(f"{port} ({tag})" for _, port, tag in fronts))
            rate, u = part_a(args, fronts) if part == "a" else part_b(args, fronts)
            rows.append((nshards, per_node, part, rate, u))
            for p in procs:
                benchlib.stop(SERVERS, p)
    print(f"{'shards':>6}  {'echd':>6}  {'part':<28} {'rate':>10}  {'echd cores':>10}  "
          f"{'pg cores':>8}  {'client cores':>12}  {'commits/s':>9}")
    names = {"a": "XADD c50 P16 (requests/s)", "b": "work queue (entries/s)"}
    for nshards, per_node, part, rate, u in rows:
        print(f"{nshards:>6}  {nshards // per_node:>6}  {names[part]:<28} {rate:>10.0f}  "
              f"{u.echd_cores:>10.2f}  {u.pg_cores:>8.2f}  {u.client_cores:>12.2f}  "
              f"{u.commits_ps:>9.0f}")
    for part in ("a", "b"):
        one = next(r[3] for r in rows if r[:3] == (1, 1, part))
        three = next(r[3] for r in rows if r[:3] == (3, 1, part))
        workers = next(r[3] for r in rows if r[:3] == (3, 3, part))
        print(f"3 shards / 1 shard, {names[part]}: {three / one:.2f} over 3 echd, "
              f"{workers / one:.2f} over one echd of 3 workers")
    print(f"(machine: {os.cpu_count()} CPUs; PostgreSQL fsync on, one WAL for every shard)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
