#!/usr/bin/python3
"""bench_policy.py: group policies (XGROUP SETPOLICY) with a large pending list (issue 35).

  tests/bench/bench_policy.py [options]

For each echd given (--echd LABEL=PATH, repeatable: e.g. the build before a change and the one
after, in the same run):
  1. drain: stream "s" with PENDING entries, group g created at 0, all of it delivered to
     consumer c1 (XREADGROUP COUNT 10000), then SETPOLICY BACKOFF 2 1 3600000 (timed: with
     due rows, the deadlines are written here), so that every entry is due once. Then
     XREADGROUP GROUP g c2 COUNT 10 STREAMS s > until every entry was redelivered (or
     --max-reads reads), single client, one request at a time, each read followed by the
     reference XRANGE s - + COUNT 10 on the same connection: the time per read of both, and
     the whole drain (the sum of the reads' times; extrapolated when --max-reads cut it short,
     which is linear: the pending list keeps its size while it drains);
  2. dead-lettering: stream "d" with PENDING entries delivered by one XREADGROUP under
     ACKWAIT 2000 MAXDELIVER 1 DEADLETTER dlq, so that their deadlines pass together; a second
     client sends PING after PING until dlq holds them all: the longest PING round trip from
     the deadline on (how long the loop stalled) and the time from the deadline until all are
     dead-lettered.

Options:
  --pending N       pending entries (default: 100000)
  --echd LABEL=PATH an echd to measure (default: this=build/broker/echd); repeatable
  --max-reads N     stop a drain after N reads, 0: never (default: 0)
  --echd-args STR   extra echd arguments for every echd, split on blanks
  --time-limit S    stop everything after S seconds (default: 1800)

Every server runs on 127.0.0.1 on a free port with a temporary data directory (appendfsync
always unless --echd-args says otherwise), and is stopped on exit. This script is not part of
`tools/echd-dev test`.
"""
import argparse
import atexit
import os
import shlex
import shutil
import signal
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402
import redis  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SERVERS = []
TMP = None


def log(msg):
    print(f"# {msg}", file=sys.stderr, flush=True)


def cleanup():
    for p in list(SERVERS):
        benchlib.stop(SERVERS, p, 10)
    if TMP:
        shutil.rmtree(TMP, ignore_errors=True)


def on_signal(signum, _frame):
    print(f"bench_policy.py: {signal.Signals(signum).name}; stopped", file=sys.stderr)
    signal.signal(signum, signal.SIG_IGN)
    cleanup()
    os._exit(1 if signum == signal.SIGALRM else 128 + signum)


class Raw:
    """One redis-py connection used directly: raw replies, one request at a time."""

    def __init__(self, port):
        self.conn = redis.Connection(host="127.0.0.1", port=port, socket_timeout=300)
        self.conn.connect()

    def __call__(self, *args):
        self.conn.send_command(*args)
        rep = self.conn.read_response()
        if isinstance(rep, redis.ResponseError):
            raise rep
        return rep

    def timed(self, *args):
        t = time.perf_counter_ns()
        rep = self(*args)
        return rep, (time.perf_counter_ns() - t) / 1000

    def pipeline(self, cmds):
        self.conn.send_packed_command(self.conn.pack_commands(cmds))
        reps = [self.conn.read_response() for _ in cmds]
        for rep in reps:
            if isinstance(rep, redis.ResponseError):
                raise rep
        return reps


def fill_and_deliver(c, key, n):
    for lo in range(1, n + 1, 10000):
        c.pipeline([("XADD", key, f"{i}-1", "f", "v") for i in range(lo, min(n, lo + 9999) + 1)])
    c("XGROUP", "CREATE", key, "g", "0")
    got = 0
    while got < n:
        r = c("XREADGROUP", "GROUP", "g", "c1", "COUNT", "10000", "STREAMS", key, ">")
        got += len(r[0][1])


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def drain(c, n, max_reads):
    fill_and_deliver(c, "s", n)
    _, set_us = c.timed("XGROUP", "SETPOLICY", "s", "g", "BACKOFF", "2", "1", "3600000")
    time.sleep(0.05)
    reads, refs, got = [], [], 0
    while got < n and (max_reads == 0 or len(reads) < max_reads):
        r, us = c.timed("XREADGROUP", "GROUP", "g", "c2", "COUNT", "10", "STREAMS", "s", ">")
        got += len(r[0][1]) if r else 0
        reads.append(us)
        _, us = c.timed("XRANGE", "s", "-", "+", "COUNT", "10")
        refs.append(us)
    total_s = sum(reads) / 1e6
    whole = got >= n
    if not whole:
        total_s *= n / max(got, 1)
    return {"setpolicy_ms": set_us / 1000, "reads": len(reads), "redelivered": got,
            "read_p50": pct(reads, 0.5), "read_p99": pct(reads, 0.99),
            "read_mean": statistics.mean(reads), "ref_p50": pct(refs, 0.5),
            "ref_mean": statistics.mean(refs), "drain_s": total_s, "whole": whole}


def deadletter(c, port, n):
    for lo in range(1, n + 1, 10000):
        c.pipeline([("XADD", "d", f"{i}-1", "f", "v")
                    for i in range(lo, min(n, lo + 9999) + 1)])
    c("XGROUP", "CREATE", "d", "g", "0")
    c("XGROUP", "SETPOLICY", "d", "g", "ACKWAIT", "2000", "MAXDELIVER", "1", "DEADLETTER", "dlq")
    # one read delivers them all: their deadlines pass together
    t_sent = time.monotonic()
    assert len(c("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "d", ">")[0][1]) == n
    deadline = t_sent + 2.0
    pinger = Raw(port)
    worst, pings = 0.0, 0
    while True:
        _, us = pinger.timed("PING")
        if time.monotonic() >= deadline:
            worst = max(worst, us)
        pings += 1
        if pings % 20 == 0 and pinger("XLEN", "dlq") >= n:
            break
        if time.monotonic() - deadline > 600:
            break
    done_s = time.monotonic() - deadline
    info = pinger("INFO", "stats").decode()
    turn = [ln.split(":")[1] for ln in info.split("\r\n")
            if ln.startswith("policy_turn_rows_max")]
    return {"ping_max_ms": worst / 1000, "pings": pings, "all_s": done_s,
            "turn_max": turn[0] if turn else "-"}


def main():
    global TMP
    ap = argparse.ArgumentParser()
    ap.add_argument("--pending", type=int, default=100000)
    ap.add_argument("--echd", action="append", default=[])
    ap.add_argument("--max-reads", type=int, default=0)
    ap.add_argument("--echd-args", default="")
    ap.add_argument("--time-limit", type=int, default=1800)
    args = ap.parse_args()
    targets = []
    for spec in args.echd or ["this=" + os.path.join(ROOT, "build", "broker", "echd")]:
        label, _, path = spec.partition("=")
        if not path:
            label, path = os.path.basename(spec), spec
        if not os.access(path, os.X_OK):
            sys.exit(f"echd not found at {path}")
        targets.append((label, path))
    TMP = tempfile.mkdtemp(prefix="bench-policy-")
    atexit.register(cleanup)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM):
        signal.signal(s, on_signal)
    signal.alarm(args.time_limit)
    extra = shlex.split(args.echd_args)
    results = []
    for label, path in targets:
        log(f"{label}: {path}")
        p, port, _ = benchlib.launch(
            TMP, SERVERS, label,
            lambda port, d, path=path: [path, "--port", str(port), "--bind", "127.0.0.1",
                                        "--dir", d, "--loglevel", "warning"] + extra)
        c = Raw(port)
        log(f"{label}: drain of {args.pending} due entries")
        dr = drain(c, args.pending, args.max_reads)
        log(f"{label}: dead-lettering {args.pending} entries")
        dl = deadletter(c, port, args.pending)
        benchlib.stop(SERVERS, p, 60)
        results.append((label, dr, dl))
    n = args.pending
    print(f"group policies, {n} pending entries (time per request: one client, one at a time)")
    print(f"{'echd':<10} {'SETPOLICY':>10} {'due read p50':>13} {'p99':>9} {'mean':>9} "
          f"{'XRANGE p50':>11} {'mean':>8} {'ratio':>6} {'drain of all':>13}")
    for label, dr, _ in results:
        drain_txt = f"{dr['drain_s']:.1f} s" + ("" if dr["whole"] else " (est.)")
        print(f"{label:<10} {dr['setpolicy_ms']:>8.1f}ms {dr['read_p50'] / 1000:>11.3f}ms "
              f"{dr['read_p99'] / 1000:>7.3f}ms {dr['read_mean'] / 1000:>7.3f}ms "
              f"{dr['ref_p50'] / 1000:>9.3f}ms {dr['ref_mean'] / 1000:>6.3f}ms "
              f"{dr['read_p50'] / dr['ref_p50']:>6.1f} {drain_txt:>13}")
    for label, dr, _ in results:
        print(f"  {label}: {dr['reads']} reads redelivered {dr['redelivered']} entries")
    print(f"dead-lettering {n} entries whose deadline passed together, PING from another client:")
    print(f"{'echd':<10} {'longest PING':>13} {'all dead-lettered after':>24} {'turn max rows':>14}")
    for label, _, dl in results:
        print(f"{label:<10} {dl['ping_max_ms']:>11.1f}ms {dl['all_s']:>22.2f} s "
              f"{dl['turn_max']:>14}")


if __name__ == "__main__":
    main()
