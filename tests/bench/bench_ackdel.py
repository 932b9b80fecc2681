#!/usr/bin/python3
"""bench_ackdel.py: finishing entries with XACKDEL against XACK followed by XDEL.

  tests/bench/bench_ackdel.py [--entries N] [--rounds R] [--echd PATH]

Starts echd (appendfsync always) on a free loopback port with a temporary data directory. In
each round, for each case: a fresh stream of N entries (XADD pipelined), group g at 0, all of
it delivered to one consumer (XREADGROUP COUNT N), then every entry finished in one redis-py
pipeline (no MULTI), timed from the first request to the last reply; the stream must be empty
and the group's pending list too. The cases:
  XACK+XDEL, 1 id each       2N commands: XACK key g id, XDEL key id
  XACKDEL, 1 id each          N commands: XACKDEL key g IDS 1 id (KEEPREF)
  XACK+XDEL, 100 ids each     2N/100 commands
  XACKDEL, 100 ids each       N/100 commands
  XACKDEL DELREF / ACKED, 1 id each
Prints every run and the median and minimum per case. Not part of `tools/echd-dev test`.
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402
import redis  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def prep(r, key, n):
    r.delete(key)
    p = r.pipeline(transaction=False)
    for i in range(1, n + 1):
        p.xadd(key, {"f": "v"}, id="%d-1" % i)
    p.execute()
    r.xgroup_create(key, "g", "0")
    got = r.xreadgroup("g", "c", {key: ">"}, count=n)
    assert len(got[0][1]) == n
    return [e[0] for e in got[0][1]]


def per_id(*cmd):
    """Each id finished by the commands cmd (with "{id}" for the id)."""
    def run(p, key, ids):
        for i in ids:
            for c in cmd:
                p.execute_command(*[i if a == "{id}" else key if a == "{key}" else a for a in c])
    return run


def batched(ackdel):
    def run(p, key, ids):
        for j in range(0, len(ids), 100):
            chunk = ids[j:j + 100]
            if ackdel:
                p.execute_command("XACKDEL", key, "g", "IDS", len(chunk), *chunk)
            else:
                p.execute_command("XACK", key, "g", *chunk)
                p.execute_command("XDEL", key, *chunk)
    return run


CASES = [
    ("XACK+XDEL, 1 id each", per_id(("XACK", "{key}", "g", "{id}"), ("XDEL", "{key}", "{id}"))),
    ("XACKDEL, 1 id each", per_id(("XACKDEL", "{key}", "g", "IDS", "1", "{id}"))),
    ("XACK+XDEL, 100 ids each", batched(False)),
    ("XACKDEL, 100 ids each", batched(True)),
    ("XACKDEL DELREF, 1 id each", per_id(("XACKDEL", "{key}", "g", "DELREF", "IDS", "1",
                                          "{id}"))),
    ("XACKDEL ACKED, 1 id each", per_id(("XACKDEL", "{key}", "g", "ACKED", "IDS", "1",
                                         "{id}"))),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--echd", default=os.path.join(ROOT, "build", "broker", "echd"))
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-ackdel-")
    servers = []
    try:
        p, port, d = benchlib.launch(tmp, servers, "echd", lambda port, d: [
            args.echd, "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
            "--loglevel", "warning"])
        r = redis.Redis(port=port)
        res = {}
        for _ in range(args.rounds):
            for k, (label, fill) in enumerate(CASES):
                key = "b%d" % k
                ids = prep(r, key, args.entries)
                pipe = r.pipeline(transaction=False)
                fill(pipe, key, ids)
                t = time.perf_counter()
                pipe.execute()
                dt = time.perf_counter() - t
                assert r.xlen(key) == 0 and r.xpending(key, "g")["pending"] == 0, label
                res.setdefault(label, []).append(dt)
                print("%-28s %8.1f ms" % (label, dt * 1e3), flush=True)
        print("\n%d entries, %d rounds, %d CPUs; ms per %d entries (median, min):"
              % (args.entries, args.rounds, os.cpu_count(), args.entries))
        for label, _ in CASES:
            v = res[label]
            print("  %-28s %8.1f %8.1f" % (label, statistics.median(v) * 1e3, min(v) * 1e3))
        benchlib.stop(servers, p)
    finally:
        for p in list(servers):
            benchlib.stop(servers, p)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
