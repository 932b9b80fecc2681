#!/usr/bin/python3
"""bench_pel.py: consumer-group operations on a large pending-entries list (PEL).

  tests/bench/bench_pel.py [options]

For echd (appendfsync always) and, for comparison, redis-server (appendonly yes, appendfsync
always, --save ""):
  1. build two groups: stream "long" with PENDING small entries (XADD pipelined), group g
     created at 0, all of it delivered to consumer c1 (XREADGROUP COUNT 10000, pipelined), so
     that g has PENDING pending entries; and the same on stream "short" with SMALL entries, the
     baseline;
  2. latency (p50/p99/mean, single client, one request at a time, OPS operations each, the
     two PELs taken in turn) of: XACK of one id (distinct ids drawn over the whole PEL), XCLAIM
     of one id to consumer c2 with min-idle 0 (distinct ids, none of those acked), XPENDING
     summary, XPENDING extended COUNT 10 from a random id, XINFO GROUPS;
  3. XREADGROUP > COUNT 10 throughput, single client, READS calls per case, the cases taken in
     turn: new groups on the SMALL-entry stream and on the PENDING-entry stream (from 0 and from
     its middle), and group g itself (PENDING pending) after SMALL more entries were added to
     "long": it should not fall with the stream's length nor with the size of the PEL.

Options:
  --pending N      entries of the long stream and pending entries of its group (default: 1000000)
  --quick          --pending 100000 (a fast sanity run)
  --small N        entries and pending entries of the baseline (default: 10000)
  --ops N          operations of each latency figure (default: 2000)
  --reads N        XREADGROUP calls of each throughput case (default: 1000, at most SMALL/10)
  --echd PATH      echd binary (default: build/broker/echd)
  --redis PATH     redis-server binary (default: /usr/bin/redis-server)
  --echd-args STR  extra echd arguments, split on blanks
  --echd-only      skip redis-server
  --time-limit S   stop everything after S seconds (default: 1800)

Every server runs on 127.0.0.1 on a free port with a temporary data directory, and is stopped
on exit. This script is not part of `tools/echd-dev test`.
"""
import argparse
import atexit
import os
import random
import shlex
import shutil
import signal
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402
import redis

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
GROUP = "g"
COUNT = 10

SERVERS = []                 # Popen of every server still running
TMP = None
TIME_LIMIT = 1800


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
    for p in list(SERVERS):
        stop(p, 10)
    if TMP:
        shutil.rmtree(TMP, ignore_errors=True)


def on_signal(signum, _frame):
    # Stop everything here and leave at once: an exception raised from a signal handler can be
    # swallowed by the code it interrupts (e.g. inside multiprocessing or logging).
    if signum == signal.SIGALRM:
        print(f"bench_pel.py: still running after {TIME_LIMIT} s; stopped", file=sys.stderr)
    else:
        print(f"bench_pel.py: {signal.Signals(signum).name}; stopped", file=sys.stderr)
    signal.signal(signum, signal.SIG_IGN)
    cleanup()
    os._exit(1 if signum == signal.SIGALRM else 128 + signum)


def du(path):
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(dirpath, f)).st_blocks * 512
            except OSError:
                pass
    return total


# ---------------------------------------------------------------------------------------------
# measurements
# ---------------------------------------------------------------------------------------------
class Raw:
    """One redis-py connection used directly: raw replies, no pool, one request at a time."""

    def __init__(self, port):
        self.conn = redis.Connection(host="127.0.0.1", port=port, socket_timeout=120)
        self.conn.connect()

    def __call__(self, *args):
        self.conn.send_command(*args)
        rep = self.conn.read_response()
        if isinstance(rep, redis.ResponseError):
            raise rep
        return rep

    def timed(self, *args):
        """(reply, microseconds from sending the request to its whole reply)"""
        t = time.perf_counter_ns()
        self.conn.send_command(*args)
        rep = self.conn.read_response()
        us = (time.perf_counter_ns() - t) / 1000
        if isinstance(rep, redis.ResponseError):
            raise rep
        return rep, us

    def pipeline(self, cmds):
        self.conn.send_packed_command(self.conn.pack_commands(cmds))
        reps = [self.conn.read_response() for _ in cmds]
        for rep in reps:
            if isinstance(rep, redis.ResponseError):
                raise rep
        return reps


def build(c, key, n):
    """XADD n small entries to key (pipelined), create group g at 0 and deliver every entry to
    consumer c1 (XREADGROUP COUNT 10000, pipelined). Returns (ids, load s, deliver s)."""
    t0 = time.monotonic()
    ids = []
    batch = 10000
    for start in range(0, n, batch):
        ids.extend(c.pipeline([("XADD", key, "*", "n", str(i))
                               for i in range(start, min(n, start + batch))]))
    t1 = time.monotonic()
    c("XGROUP", "CREATE", key, GROUP, "0")
    delivered = 0
    depth = 10
    while True:
        reps = c.pipeline([("XREADGROUP", "GROUP", GROUP, "c1", "COUNT", 10000, "STREAMS", key,
                            ">")] * depth)
        got = sum(len(r[0][1]) for r in reps if r)
        delivered += got
        if got < 10000 * depth:
            break
    t2 = time.monotonic()
    pending = c("XPENDING", key, GROUP)[0]
    if delivered != n or pending != n:
        sys.exit(f"{key}: {delivered} delivered and {pending} pending, not {n}")
    return ids, t1 - t0, t2 - t1


def pct(xs, p):
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, int(-(-p * len(xs) // 1)) - 1))]


def latencies(c, groups, ops):
    """groups: {label: (key, ids)}; returns {op: {label: [us, ...]}}. The groups are taken in
    turn, one request each, so that a burst of other load on the machine falls on all."""
    rnd = random.Random(1)
    plan = {}
    for label, (key, ids) in groups.items():
        n = len(ids)
        if 2 * ops > n:
            sys.exit(f"--ops {ops}: a PEL of {n} has not 2 x {ops} distinct ids")
        pick = rnd.sample(range(n), 2 * ops)
        plan[label] = (key, ids, [ids[i] for i in pick[:ops]], [ids[i] for i in pick[ops:]])

    def xpending_summary(key, ids, claim, ack, i):
        rep, us = c.timed("XPENDING", key, GROUP)
        assert rep[0] > 0, rep
        return us

    def xpending_ext(key, ids, claim, ack, i):
        rep, us = c.timed("XPENDING", key, GROUP, rnd.choice(ids), "+", COUNT)
        assert 0 < len(rep) <= COUNT, rep
        return us

    def xinfo_groups(key, ids, claim, ack, i):
        rep, us = c.timed("XINFO", "GROUPS", key)
        assert len(rep) == 1, rep
        return us

    def xclaim(key, ids, claim, ack, i):
        rep, us = c.timed("XCLAIM", key, GROUP, "c2", 0, claim[i])
        assert len(rep) == 1 and rep[0][0] == claim[i], rep
        return us

    def xack(key, ids, claim, ack, i):
        rep, us = c.timed("XACK", key, GROUP, ack[i])
        assert rep == 1, rep
        return us

    out = {}
    for name, fn in (("XACK 1 id", xack), ("XCLAIM 1 id", xclaim),
                     ("XPENDING summary", xpending_summary),
                     ("XPENDING - + 10 (random start)", xpending_ext),
                     ("XINFO GROUPS", xinfo_groups)):
        out[name] = {label: [] for label in plan}
        for i in range(ops):
            for label, (key, ids, claim, ack) in plan.items():
                out[name][label].append(fn(key, ids, claim, ack, i))
    for label, (key, ids, claim, ack) in plan.items():
        rep = c("XPENDING", key, GROUP)
        per = {cons: int(n) for cons, n in rep[3]}
        if rep[0] != len(ids) - ops or per.get(b"c2") != ops:
            sys.exit(f"{key}: after the latency runs XPENDING says {rep}, expected "
                     f"{len(ids) - ops} pending, {ops} of them owned by c2")
    return out


def throughput(c, cases, reads):
    """cases: {label: (key, group, consumer)}; XREADGROUP > COUNT 10 `reads` times per case,
    the cases in turn. Returns {label: (entries/s, p50 us, p99 us)}."""
    times = {label: [] for label in cases}
    got = {label: 0 for label in cases}
    for _ in range(reads):
        for label, (key, group, consumer) in cases.items():
            rep, us = c.timed("XREADGROUP", "GROUP", group, consumer, "COUNT", COUNT,
                              "STREAMS", key, ">")
            n = len(rep[0][1]) if rep else 0
            if n != COUNT:
                sys.exit(f"{label}: XREADGROUP gave {n} entries, not {COUNT}")
            times[label].append(us)
            got[label] += n
    return {label: (got[label] / (sum(ts) / 1e6), pct(ts, 0.5), pct(ts, 0.99))
            for label, ts in times.items()}


def bench_server(name, port, d, args):
    c = Raw(port)
    res = {}
    log(f"{name}: XADD {args.pending} small entries to 'long', deliver all to c1")
    ids_long, load_s, deliver_s = build(c, "long", args.pending)
    log(f"{name}: loaded in {load_s:.1f} s ({args.pending / load_s:.0f} entries/s), delivered in "
        f"{deliver_s:.1f} s ({args.pending / deliver_s:.0f} entries/s)")
    res["build"] = (load_s, deliver_s)
    ids_short, _, _ = build(c, "short", args.small)
    res["disk"] = du(d)
    small_label, long_label = f"PEL {human(args.small)}", f"PEL {human(args.pending)}"
    log(f"{name}: latency of {args.ops} operations each, PELs of {args.small} and {args.pending}")
    res["lat"] = latencies(c, {small_label: ("short", ids_short), long_label: ("long", ids_long)},
                           args.ops)

    reads = min(args.reads, args.small // COUNT)
    mid = ids_long[len(ids_long) // 2]
    c("XGROUP", "CREATE", "short", "t", "0")
    c("XGROUP", "CREATE", "long", "t", "0")
    c("XGROUP", "CREATE", "long", "tm", mid)
    # SMALL new entries for g, whose PEL still holds PENDING - OPS entries
    for start in range(0, args.small, 10000):
        c.pipeline([("XADD", "long", "*", "n", str(i))
                    for i in range(start, min(args.small, start + 10000))])
    log(f"{name}: XREADGROUP > COUNT {COUNT}, {reads} calls per case")
    res["tput"] = throughput(c, {
        f"stream of {human(args.small)}, new group at 0": ("short", "t", "r1"),
        f"stream of {human(args.pending)}, new group at 0": ("long", "t", "r1"),
        f"stream of {human(args.pending)}, new group at its middle": ("long", "tm", "r1"),
        f"stream of {human(args.pending)}, group g with {human(args.pending - args.ops)} "
        "pending": ("long", GROUP, "c1"),
    }, reads)
    res["reads"] = reads
    c.conn.disconnect()
    return res


def human(n):
    for div, unit in ((1000000, "M"), (1000, "k")):
        if n >= div and n % (div // 10) == 0:
            v = n / div
            return f"{v:g}{unit}"
    return str(n)


def main():
    global TMP, TIME_LIMIT
    ap = argparse.ArgumentParser(description="consumer-group operations on a large PEL",
                                 epilog="See the head of this file for details.")
    ap.add_argument("--pending", type=int, default=1000000)
    ap.add_argument("--quick", action="store_true", help="--pending 100000")
    ap.add_argument("--small", type=int, default=10000)
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--reads", type=int, default=1000)
    ap.add_argument("--echd", default=os.path.join(ROOT, "build", "broker", "echd"))
    ap.add_argument("--redis", default="/usr/bin/redis-server")
    ap.add_argument("--echd-args", default="")
    ap.add_argument("--echd-only", action="store_true")
    ap.add_argument("--time-limit", type=int, default=1800)
    args = ap.parse_args()
    if args.quick:
        args.pending = 100000
    if args.small < 2 * args.ops or args.small < COUNT:
        sys.exit("--small must be at least 2 x --ops (distinct ids to XCLAIM and to XACK)")

    if not os.access(args.echd, os.X_OK):
        sys.exit(f"echd not found at {args.echd} (build it first: tools/echd-dev build)")
    echd_args = shlex.split(args.echd_args)
    servers = [("echd", lambda port, d: [
        args.echd, "--port", str(port), "--bind", "127.0.0.1", "--dir", d, "--loglevel",
        "warning", "--appendfsync", "always", *echd_args])]
    if not args.echd_only:
        if not os.access(args.redis, os.X_OK):
            sys.exit(f"redis-server not found at {args.redis} (or use --echd-only)")
        servers.append(("redis-always", lambda port, d: [
            args.redis, "--port", str(port), "--bind", "127.0.0.1", "--dir", d, "--save", "",
            "--appendonly", "yes", "--appendfsync", "always"]))

    TIME_LIMIT = args.time_limit
    TMP = tempfile.mkdtemp(prefix="echd-bench-pel.", dir=os.environ.get("TMPDIR", "/tmp"))
    atexit.register(cleanup)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM):
        signal.signal(sig, on_signal)
    signal.alarm(TIME_LIMIT)

    t_all = time.monotonic()
    res = {}
    for name, cmd_for in servers:
        p, port, d = launch(name, cmd_for)
        res[name] = bench_server(name, port, d, args)
        stop(p)
        shutil.rmtree(d, ignore_errors=True)

    print(f"\nPEL of {args.pending} entries (baseline {args.small}); single client, one request "
          f"at a time; {os.cpu_count()} CPUs")
    print("\nbuild:")
    for name, r in res.items():
        load_s, deliver_s = r["build"]
        print(f"  {name:<14} XADD {args.pending / load_s:>8.0f} entries/s pipelined, XREADGROUP "
              f"COUNT 10000 {args.pending / deliver_s:>8.0f} entries/s; data dir "
              f"{r['disk'] / 1048576:.0f} MiB")

    print(f"\nlatency, microseconds, {args.ops} operations each:")
    print(f"  {'operation':<32} {'server':<14} {'PEL':>6} {'p50':>8} {'p99':>8} {'mean':>8}"
          f"  {'p50 vs baseline':>15}")
    for op in next(iter(res.values()))["lat"]:
        for name, r in res.items():
            base = None
            for label, us in r["lat"][op].items():
                p50 = pct(us, 0.5)
                vs = "" if base is None else f"{p50 / base:.2f}x"
                base = p50 if base is None else base
                print(f"  {op:<32} {name:<14} {label[4:]:>6} {p50:>8.0f} {pct(us, 0.99):>8.0f} "
                      f"{statistics.fmean(us):>8.0f}  {vs:>15}")

    print(f"\nXREADGROUP > COUNT {COUNT} throughput, single client, "
          f"{next(iter(res.values()))['reads']} calls per case:")
    print(f"  {'case':<48} {'server':<14} {'entries/s':>10} {'p50 us':>8} {'p99 us':>8}"
          f"  {'vs first':>8}")
    for case in next(iter(res.values()))["tput"]:
        for name, r in res.items():
            eps, p50, p99 = r["tput"][case]
            first = next(iter(r["tput"].values()))[0]
            print(f"  {case:<48} {name:<14} {eps:>10.0f} {p50:>8.0f} {p99:>8.0f}"
                  f"  {eps / first:>7.2f}x")
    if "redis-always" in res:
        print("\nechd/redis-always (p50 latency at the large PEL; lower is better):")
        long_label = f"PEL {human(args.pending)}"
        for op in res["echd"]["lat"]:
            e = pct(res["echd"]["lat"][op][long_label], 0.5)
            rr = pct(res["redis-always"]["lat"][op][long_label], 0.5)
            print(f"  {op:<32} {e / rr:5.2f}x")
    print(f"\ntotal time {time.monotonic() - t_all:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
