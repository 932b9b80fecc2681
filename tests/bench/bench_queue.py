#!/usr/bin/python3
"""bench_queue.py: the work-queue cycle of echd beside Debian's redis-server.

  tests/bench/bench_queue.py [options]

For each server (echd with appendfsync always; redis-server with appendonly yes and
appendfsync always; redis-server with appendonly yes and appendfsync everysec; both redis with
--save ""), a stream is preloaded with ENTRIES entries of ~100 bytes (pipelined), a group
is created at 0, then WORKERS clients, each with its own connection and consumer name, loop
  XREADGROUP GROUP g wN COUNT 10 STREAMS s >   then   XACK s g <the ids it got>
until the stream is drained (a worker stops at its first empty reply). With --streams K the
entries are spread over K streams (s:0 .. s:K-1, a group on each; issue 33's "work queue over
1,000 streams") and each cycle reads a stream picked at random among those not yet drained. The figure is entries/s:
entries acknowledged / wall time from the common start to the last worker's last XACK. At the
end it checks that XPENDING counts 0, that ENTRIES were acknowledged, and that every entry was
delivered exactly once. Beside the ratios of the medians it prints the server's CPU per
entry and, with several rounds, the spread of each round's ratio to the Redis round run
right after it (the disk's pace changes from minute to minute).

Options:
  --entries N      entries preloaded (default: 200000)
  --quick          --entries 20000 (a fast sanity run)
  --workers N      concurrent worker processes (default: 50)
  --count N        COUNT of each XREADGROUP (default: 10)
  --streams K      spread the entries over K streams (default: 1; K > 1 needs the C clients)
  --staged         also run an echd on --storage lmdb-staged, in the same rounds
  --echd PATH      echd binary (default: build/broker/echd)
  --redis PATH     redis-server binary (default: /usr/bin/redis-server)
  --echd-args STR  extra echd arguments, split on blanks (e.g. "--flush-wait-us 500")
  --policy         also run an echd whose group has a policy (XGROUP SETPOLICY ACKWAIT 30000
                   MAXDELIVER 5 DEADLETTER dead: echd's extension), in the same rounds
  --scrape         also run an echd with an HTTP listener whose /metrics is fetched every
                   second while its workers drain (issue 28: a scrape may cost < 2%), in the
                   same rounds; prints the scrapes made and the ratio to plain echd
  --echd-only      skip redis-server
  --redis-only     skip echd (to check the script itself)
  --rounds N       measure each server N times, round robin, and compare medians (default: 1)
  --timeout S      bound of each drain phase, in seconds (default: 600)
  --clients c|python  the workers: threads of build/tests/bench-queue-worker (C; the default
                   when it is built), or Python processes with redis-py
  --worker-exe PATH   bench-queue-worker (default: build/tests/bench-queue-worker)

Every server runs on 127.0.0.1 on a free port with a temporary data directory, and is stopped
on exit. Python workers are processes (multiprocessing), not threads, so that the GIL does
not limit them; even so they spent more CPU than the servers on a 2-CPU machine, which is why
the C workers are the default. Clients and servers share the CPUs, so the CPU seconds that the
server and the clients (all workers, from the common start to each one's end) spent are
printed beside each figure. This script is not part of
`tools/echd-dev test`.
"""
import argparse
import atexit
import ctypes
import multiprocessing as mp
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402
import redis

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
STREAM = "s"
GROUP = "g"
TIME_LIMIT = 3600            # the whole run, all servers: a last resort (SIGALRM)

MAIN_PID = os.getpid()
SERVERS = []                 # Popen of every server still running
TMP = None


def log(msg):
    print(f"# {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# servers
# ---------------------------------------------------------------------------------------------
def launch(name, cmd_for, timeout=60):
    """Start a server in TMP/name; returns (Popen, port, dir). cmd_for(port, dir) -> argv."""
    return benchlib.launch(TMP, SERVERS, name, cmd_for, timeout)


def stop(p, timeout=60):
    benchlib.stop(SERVERS, p, timeout)


def cleanup():
    if os.getpid() != MAIN_PID:
        return
    children = mp.active_children()
    for c in children:
        c.kill()
    for c in children:
        c.join(10)
    for p in list(SERVERS):
        stop(p, 10)
    if TMP:
        shutil.rmtree(TMP, ignore_errors=True)


def on_signal(signum, _frame):
    # Stop everything here and leave at once: an exception raised from a signal handler can be
    # swallowed by the code it interrupts (e.g. inside multiprocessing or logging).
    if os.getpid() != MAIN_PID:
        os._exit(130)
    if signum == signal.SIGALRM:
        print(f"bench_queue.py: still running after {TIME_LIMIT} s; stopped", file=sys.stderr)
    else:
        print(f"bench_queue.py: {signal.Signals(signum).name}; stopped", file=sys.stderr)
    signal.signal(signum, signal.SIG_IGN)
    cleanup()
    os._exit(1 if signum == signal.SIGALRM else 128 + signum)


def cpu_seconds(pid):
    """user + system CPU seconds of a process so far (from /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------
# the work-queue cycle
# ---------------------------------------------------------------------------------------------
POLICY = ("ACKWAIT", "30000", "MAXDELIVER", "5", "DEADLETTER", "dead")


class Scraper:
    """GET /metrics on 127.0.0.1:port every second in a thread, until stop() (which
    returns how many answered 200)."""

    def __init__(self, port):
        self.port, self.ok = port, 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.done.is_set():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics",
                                            timeout=10) as r:
                    r.read()
                    self.ok += r.status == 200
            except OSError:
                pass
            self.done.wait(1.0)

    def stop(self):
        self.done.set()
        self.thread.join()
        return self.ok


def stream_names(stream, k):
    """The streams of a round: the one stream, or stream:0 .. stream:k-1."""
    return [stream] if k == 1 else [f"{stream}:{i}" for i in range(k)]


def preload(port, stream, n, k=1, policy=False):
    """XADD n entries of ~100 bytes (field "f", a 96-character random value), pipelined, round
    robin over the k streams; with policy, each group gets POLICY. Returns the ids as the
    workers write them: the id, or with k > 1 "stream id"."""
    names = stream_names(stream, k)
    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=120)
    ids = []
    batch = 1000
    for start in range(0, n, batch):
        pipe = r.pipeline(transaction=False)
        keys = [names[i % k] for i in range(start, min(start + batch, n))]
        for key in keys:
            pipe.execute_command("XADD", key, "*", "f", os.urandom(48).hex())
        got = pipe.execute()
        ids.extend(got if k == 1 else [f"{key} ".encode() + i for key, i in zip(keys, got)])
    pipe = r.pipeline(transaction=False)
    for key in names:
        pipe.execute_command("XGROUP", "CREATE", key, GROUP, "0")
        if policy:
            pipe.execute_command("XGROUP", "SETPOLICY", key, GROUP, *POLICY)
    pipe.execute()
    r.close()
    return ids


def worker(idx, port, stream, count, barrier, timeout, outdir, results):
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    try:  # die with the parent, however it ends
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    name = f"w{idx}"
    status = "ok"
    delivered = []
    acked = 0
    t_end = 0.0
    cpu0 = cpu1 = 0.0
    try:
        # One connection of redis-py used directly: raw replies (no conversion of each entry
        # into a dict) and no connection pool, the least client CPU per cycle.
        conn = redis.Connection(host="127.0.0.1", port=port, socket_timeout=60)
        conn.connect()
        barrier.wait(120)
        deadline = time.monotonic() + timeout
        cpu0 = time.process_time()
        while True:
            if time.monotonic() > deadline:
                status = "timeout"
                break
            conn.send_command("XREADGROUP", "GROUP", GROUP, name, "COUNT", count,
                              "STREAMS", stream, ">")
            rep = conn.read_response()
            if not rep or not rep[0][1]:
                break
            ids = [e[0] for e in rep[0][1]]
            conn.send_command("XACK", stream, GROUP, *ids)
            acked += conn.read_response()
            delivered.extend(ids)
        t_end = time.monotonic()
        cpu1 = time.process_time()
        conn.disconnect()
    except Exception as e:  # reported to the parent, which fails the run
        status = f"error: {type(e).__name__}: {e}"
        t_end = time.monotonic()
    try:
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(b"\n".join(delivered))
    except OSError:
        return  # the run is being stopped
    results.put((idx, status, acked, len(delivered), t_end, cpu1 - cpu0))


def c_workers(port, stream, args, outdir):
    """Runs the cycle with bench-queue-worker (threads in one C process); returns the
    per-worker tuples of worker() and the wall time from the common start."""
    cmd = [args.worker_exe, str(port), stream, GROUP, str(args.workers), str(args.count),
           outdir, str(args.timeout), str(getattr(args, "streams", 1))]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         timeout=args.timeout + 120)
    got, wall = [], None
    for line in out.stdout.splitlines():
        f = line.split()
        if f[0] == "worker":
            status = f[2] if f[2] in ("ok", "timeout") else "error: " + f[2]
            got.append((int(f[1]), status, int(f[3]), int(f[4]), float(f[5]), float(f[6])))
        elif f[0] == "total":
            wall = float(f[1])
    if wall is None:
        sys.exit(f"bench-queue-worker failed (exit {out.returncode}): {out.stderr.strip()}")
    return got, wall


def run_cycle(server_pid, port, stream, args, ids):
    outdir = tempfile.mkdtemp(prefix="ids-", dir=TMP)
    if args.clients == "c":
        cpu0 = cpu_seconds(server_pid)
        got, wall = c_workers(port, stream, args, outdir)
        cpu1 = cpu_seconds(server_pid)
        return check_cycle(port, stream, args, ids, outdir, got, wall, cpu1 - cpu0)
    results = mp.Queue()
    barrier = mp.Barrier(args.workers + 1)
    deadline_start = time.monotonic() + 120
    procs = [mp.Process(target=worker, args=(i, port, stream, args.count, barrier, args.timeout,
                                             outdir, results), daemon=True)
             for i in range(args.workers)]
    for p in procs:
        p.start()
    try:
        barrier.wait(max(1, deadline_start - time.monotonic()))
    except Exception:
        sys.exit("workers did not connect within 120 s")
    t0 = time.monotonic()
    cpu0 = cpu_seconds(server_pid)
    deadline = t0 + args.timeout
    got = []
    while len(got) < args.workers:
        try:
            got.append(results.get(timeout=max(1, deadline + 90 - time.monotonic())))
        except Exception:
            break
    cpu1 = cpu_seconds(server_pid)
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
            p.join()
    t_end = max((g[4] for g in got), default=time.monotonic())
    return check_cycle(port, stream, args, ids, outdir, got, t_end - t0, cpu1 - cpu0)


def check_cycle(port, stream, args, ids, outdir, got, wall, server_cpu):
    """Checks a drained cycle (every entry acknowledged, each delivered once) and returns
    its figures."""
    problems = []
    if len(got) < args.workers:
        problems.append(f"{args.workers - len(got)} workers did not report")
    late = sum(1 for g in got if g[1] == "timeout")
    if late:
        problems.append(f"{late} workers stopped after --timeout {args.timeout:g} s")
    problems.extend(f"worker {g[0]}: {g[1]}" for g in got if g[1] not in ("ok", "timeout"))
    acked = sum(g[2] for g in got)
    delivered = sum(g[3] for g in got)
    client_cpu = sum(g[5] for g in got)

    # correctness
    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=120)
    names = stream_names(stream, getattr(args, "streams", 1))
    pipe = r.pipeline(transaction=False)
    for key in names:
        pipe.execute_command("XPENDING", key, GROUP)
        pipe.xlen(key)
    got_pl = pipe.execute()
    pending = sum(p["pending"] if isinstance(p, dict) else p[0] for p in got_pl[0::2])
    xlen = sum(got_pl[1::2])
    seen = set()
    dups = 0
    for name in os.listdir(outdir):
        with open(os.path.join(outdir, name), "rb") as f:
            data = f.read()
        for i in (i for i in data.split(b"\n") if i):
            if i in seen:
                dups += 1
            seen.add(i)
    shutil.rmtree(outdir, ignore_errors=True)
    want = set(ids)
    if pending != 0:
        problems.append(f"XPENDING counts {pending}, not 0")
    if acked != args.entries:
        problems.append(f"{acked} acknowledged, not {args.entries}")
    if delivered != acked:
        problems.append(f"{delivered} delivered but {acked} acknowledged")
    if dups:
        problems.append(f"{dups} entries delivered more than once")
    if seen != want:
        problems.append(f"{len(want - seen)} entries never delivered, "
                        f"{len(seen - want)} delivered that were not added")
    if xlen != args.entries:
        problems.append(f"XLEN is {xlen}, not {args.entries}")
    r.close()
    return {
        "eps": acked / wall if wall > 0 else 0.0,
        "wall": wall,
        "server_cpu": server_cpu,
        "client_cpu": client_cpu,
        "acked": acked,
        "problems": problems,
    }


def main():
    global TMP, TIME_LIMIT
    ap = argparse.ArgumentParser(
        description="work-queue cycle (XREADGROUP COUNT 10 + XACK) of echd vs redis-server",
        epilog="See the head of this file for details.")
    ap.add_argument("--entries", type=int, default=200000)
    ap.add_argument("--quick", action="store_true", help="--entries 20000")
    ap.add_argument("--workers", type=int, default=50)
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--staged", action="store_true")
    ap.add_argument("--echd", default=os.path.join(ROOT, "build", "broker", "echd"))
    ap.add_argument("--redis", default="/usr/bin/redis-server")
    ap.add_argument("--echd-args", default="")
    ap.add_argument("--policy", action="store_true")
    ap.add_argument("--scrape", action="store_true")
    ap.add_argument("--echd-only", action="store_true")
    ap.add_argument("--redis-only", action="store_true")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--clients", choices=("c", "python"), default=None)
    ap.add_argument("--worker-exe",
                    default=os.path.join(ROOT, "build", "tests", "bench-queue-worker"))
    args = ap.parse_args()
    if args.clients is None:
        args.clients = "c" if os.access(args.worker_exe, os.X_OK) else "python"
    if args.clients == "c" and not os.access(args.worker_exe, os.X_OK):
        sys.exit(f"bench-queue-worker not found at {args.worker_exe} (build it first)")
    if args.quick:
        args.entries = 20000
    if args.streams < 1 or args.streams > args.entries:
        sys.exit("--streams must be 1 to --entries")
    if args.streams > 1 and args.clients != "c":
        sys.exit("--streams > 1 needs the C clients (bench-queue-worker)")

    servers = []
    if not args.redis_only:
        if not os.access(args.echd, os.X_OK):
            sys.exit(f"echd not found at {args.echd} (build it first: tools/echd-dev build)")
        echd_args = shlex.split(args.echd_args)
        echd_cmd = (lambda port, d: [
            args.echd, "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
            "--loglevel", "warning", "--appendfsync", "always", *echd_args])
        servers.append(("echd", echd_cmd))
        if args.staged:
            servers.append(("echd-staged", lambda port, d: echd_cmd(port, d) + [
                "--storage", "lmdb-staged"]))
        if args.policy:
            servers.append(("echd-policy", echd_cmd))
        if args.scrape:
            http_port = benchlib.free_port()
            servers.append(("echd-scraped", lambda port, d: echd_cmd(port, d) + [
                "--http-port", str(http_port)]))
    if not args.echd_only:
        if not os.access(args.redis, os.X_OK):
            sys.exit(f"redis-server not found at {args.redis}")
        for name, fsync in (("redis-always", "always"), ("redis-everysec", "everysec")):
            servers.append((name, lambda port, d, fsync=fsync: [
                args.redis, "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
                "--save", "", "--appendonly", "yes", "--appendfsync", fsync,
                "--maxclients", "10000"]))

    TIME_LIMIT = int(len(servers) * args.rounds * (args.timeout + 600))
    TMP = tempfile.mkdtemp(prefix="echd-bench-queue.", dir=os.environ.get("TMPDIR", "/tmp"))
    atexit.register(cleanup)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM):
        signal.signal(sig, on_signal)
    signal.alarm(TIME_LIMIT)
    mp.set_start_method("fork")

    # All servers are up for the whole run (idle when not measured), and the rounds go round
    # the servers, so that a burst of other load on the machine does not fall on one server.
    up = {}
    for name, cmd_for in servers:
        up[name] = launch(name, cmd_for)
    res = {name: [] for name, _ in servers}
    t_all = time.monotonic()
    for rnd in range(args.rounds):
        stream = f"{STREAM}{rnd}" if args.rounds > 1 else STREAM
        for name, _ in servers:
            p, port, _d = up[name]
            t = time.monotonic()
            ids = preload(port, stream, args.entries, args.streams,
                          policy=name == "echd-policy")
            log(f"{name}: preloaded {args.entries} entries of ~100 bytes in "
                f"{time.monotonic() - t:.1f} s; {args.workers} workers, XREADGROUP COUNT "
                f"{args.count} > + XACK until drained")
            scraper = Scraper(http_port) if name == "echd-scraped" else None
            r = run_cycle(p.pid, port, stream, args, ids)
            if scraper is not None:
                r["scrapes"] = scraper.stop()
                if r["scrapes"] == 0:
                    r["problems"].append("no /metrics scrape answered during the drain")
            res[name].append(r)
            log(f"{name}: {r['acked']} entries in {r['wall']:.2f} s = {r['eps']:.0f} entries/s"
                + ("" if not r["problems"] else "; PROBLEMS: " + "; ".join(r["problems"])))
    for name, _ in servers:
        stop(up[name][0])

    print(f"\nwork-queue cycle: {args.entries} entries of ~100 bytes, {args.workers} worker "
          + ("threads of bench-queue-worker (C)" if args.clients == "c" else "processes (Python)")
          + f", XREADGROUP COUNT {args.count} + XACK, {os.cpu_count()} CPUs"
          + (f", {args.streams} streams" if args.streams > 1 else "")
          + (f", {args.rounds} rounds" if args.rounds > 1 else ""))
    print(f"{'server':<16} {'round':>5} {'entries/s':>10} {'wall s':>8} {'server CPU s':>13} "
          f"{'clients CPU s':>14}  check")
    for name, _ in servers:
        for rnd, r in enumerate(res[name], 1):
            check = "ok" if not r["problems"] else "FAILED: " + "; ".join(r["problems"])
            print(f"{name:<16} {rnd:>5} {r['eps']:>10.0f} {r['wall']:>8.2f} "
                  f"{r['server_cpu']:>13.2f} {r['client_cpu']:>14.2f}  {check}")
    eps = {name: statistics.median(r["eps"] for r in rs) for name, rs in res.items()}
    if args.rounds > 1:
        print("\nmedian entries/s: " + ", ".join(f"{n} {v:.0f}" for n, v in eps.items()))
    if "echd" in eps and "redis-always" in eps:
        e = eps["echd"]
        print("\nratios echd/redis (entries/s" + (", medians" if args.rounds > 1 else "") + "):")
        print(f"  vs always   {e / eps['redis-always']:5.2f}x"
              + (" (target >= 1.2)" if args.streams == 1 else " (issue 33: >= 0.8 on disk)"))
        print(f"  vs everysec {e / eps['redis-everysec']:5.2f}x")
        if args.rounds > 1:
            # The medians come from different minutes; each round's pair ran back to back,
            # so their spread shows how much the disk's pace moved the ratio.
            for other in ("redis-always", "redis-everysec"):
                pairs = [a["eps"] / b["eps"] for a, b in zip(res["echd"], res[other])]
                print(f"  round by round vs {other[len('redis-'):]}: {min(pairs):.2f}x to "
                      f"{max(pairs):.2f}x, median {statistics.median(pairs):.2f}x")
        cpu = {n: statistics.median(r["server_cpu"] / max(r["acked"], 1) * 1e6 for r in res[n])
               for n in ("echd", "redis-always")}
        print(f"  server CPU per entry: echd {cpu['echd']:.1f} us, redis-always "
              f"{cpu['redis-always']:.1f} us ({cpu['echd'] / cpu['redis-always']:.2f}x)")
    if "echd-staged" in eps and "redis-always" in eps:
        print(f"  lmdb-staged vs always {eps['echd-staged'] / eps['redis-always']:5.2f}x, "
              f"vs echd on lmdb {eps['echd-staged'] / eps['echd']:5.2f}x")
    if "echd-policy" in eps:
        print(f"\nwith a policy ({' '.join(POLICY)}): "
              f"{eps['echd-policy'] / eps['echd']:.3f}x echd's entries/s without one")
    if "echd-scraped" in eps:
        n = sum(r["scrapes"] for r in res["echd-scraped"])
        print(f"\nwith /metrics scraped every second ({n} scrapes during the drains): "
              f"{eps['echd-scraped'] / eps['echd']:.3f}x echd's entries/s without (target "
              f">= 0.98)")
    print(f"\ntotal time {time.monotonic() - t_all:.0f} s")
    return 1 if any(r["problems"] for rs in res.values() for r in rs) else 0

if __name__ == "__main__":
    sys.exit(main())
