#!/usr/bin/env bash
# soak.sh: a long mixed workload against echd, its memory sampled as it runs.
#
#   tests/bench/soak.sh [options]
# Options:
#   --duration SECONDS  how long the workload runs (default: 3600, one hour)
#   --interval SECONDS  how often RSS is sampled (default: 60)
#   --echd PATH         echd binary (default: build/broker/echd)
#   --echd-args STR     extra echd arguments, split on blanks
#   --clients N         worker threads, each with its own connections (default: 8)
#
# echd runs on 127.0.0.1 on a free port with a temporary data directory and is stopped on
# exit. The workload is steady-state, so that memory has no reason to grow: producers XADD
# with MAXLEN ~ 20000 (some pipelined, some with 64 KiB values, some in MULTI/EXEC);
# consumers XREADGROUP (some blocking) and XACK four in five, XAUTOCLAIM and XACK the rest
# (so the PEL stays bounded), XPENDING; readers XRANGE/XREAD
# including multi-megabyte replies; connection churn (a new connection per few commands,
# CLIENT SETNAME, HELLO 3); error replies (wrong arity, bad ids, unknown commands); stream
# and group create/destroy cycles; WATCH.
#
# Every interval it prints a table row: elapsed time, VmRSS, RssAnon (the heap: where a
# leak shows), RssFile (mapped LMDB pages), the data file size, connected clients, commands
# done in the interval and errors seen. At the end it compares the heap (RssAnon) of the
# last sample with the first one taken after a warm-up (the first fifth of the run, at
# least one interval), prints the growth, and exits 1 when it grew by more than 10% plus
# 8 MiB, or when a worker failed. Not part of `tools/echd-dev test`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ECHD=$ROOT/build/broker/echd
ECHD_ARGS=""
DURATION=3600
INTERVAL=60
CLIENTS=8

usage() {
	sed -n '2,26s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

while [ $# -gt 0 ]; do
	case $1 in
	--duration) DURATION=$2; shift 2 ;;
	--interval) INTERVAL=$2; shift 2 ;;
	--echd) ECHD=$2; shift 2 ;;
	--echd-args) ECHD_ARGS=$2; shift 2 ;;
	--clients) CLIENTS=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done

[ -x "$ECHD" ] || { echo "soak: no echd at $ECHD (build it, or pass --echd)" >&2; exit 2; }

exec /usr/bin/python3 - "$ROOT" "$ECHD" "$DURATION" "$INTERVAL" "$CLIENTS" "$ECHD_ARGS" <<'EOF'
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

root, echd, duration, interval, nclients, extra = sys.argv[1:7]
duration, interval, nclients = float(duration), float(interval), int(nclients)
sys.path.insert(0, os.path.join(root, "tests", "integration"))
from echdtest import Closed, RespConn, RespError, free_port  # noqa: E402

tmp = tempfile.mkdtemp(prefix="echd-soak-")
port = free_port()
log = open(os.path.join(tmp, "echd.log"), "wb")
proc = subprocess.Popen([echd, "--port", str(port), "--bind", "127.0.0.1", "--dir",
                         os.path.join(tmp, "data"), "--loglevel", "notice"] + extra.split(),
                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
stop = threading.Event()
lock = threading.Lock()
counts = {"commands": 0, "errors": 0}
failures = []


def cleanup():
    stop.set()
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    shutil.rmtree(tmp, ignore_errors=True)


def connect():
    deadline = time.monotonic() + 10
    while True:
        try:
            return RespConn(port, timeout=60)
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise
            time.sleep(0.05)


def status():
    out = {}
    with open("/proc/%d/status" % proc.pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "RssAnon", "RssFile"):
                out[k] = int(v.split()[0])
    return out


def call(c, *args, expect_error=False):
    c.send(*args)
    r = c.read(args)
    with lock:
        counts["commands"] += 1
        if isinstance(r, RespError):
            counts["errors"] += 1
    if isinstance(r, RespError) and not expect_error:
        raise AssertionError("%r -> %r" % (args[:4], r))
    return r


def worker(n):
    rnd = random.Random(n)
    c = connect()
    streams = ["soak:%d" % i for i in range(4)]
    small, big = "v" * 100, "B" * 65536
    ops = 0
    while not stop.is_set():
        s = rnd.choice(streams)
        op = rnd.randrange(100)
        try:
            if op < 30:
                call(c, "XADD", s, "MAXLEN", "~", "20000", "*", "w", str(n), "p", small)
            elif op < 35:
                cmds = [("XADD", s, "MAXLEN", "~", "20000", "*", "i", str(i), "p", small)
                        for i in range(50)]
                for r in c.pipeline(cmds):
                    assert not isinstance(r, RespError), r
                with lock:
                    counts["commands"] += len(cmds)
            elif op < 37:
                call(c, "XADD", s, "MAXLEN", "~", "2000", "*", "big", big)
            elif op < 52:
                try:
                    call(c, "XGROUP", "CREATE", s, "g", "0", "MKSTREAM", expect_error=True)
                except Closed:
                    raise
                r = call(c, "XREADGROUP", "GROUP", "g", "c%d" % (n % 3), "COUNT", "20",
                         *(["BLOCK", "50"] if op < 40 else []), "STREAMS", s, ">")
                if r:
                    ids = [e[0] for e in r[0][1]]
                    if ids:
                        call(c, "XACK", s, "g", *ids[: len(ids) - len(ids) // 5])
            elif op < 56:
                # the entries left unacked above: claimed, then acked (a bounded PEL)
                r = call(c, "XAUTOCLAIM", s, "g", "c9", "0", "0-0", "COUNT", "100", "JUSTID",
                         expect_error=True)
                if isinstance(r, list) and r[1]:
                    call(c, "XACK", s, "g", *r[1])
                call(c, "XPENDING", s, "g", "-", "+", "10", expect_error=True)
            elif op < 66:
                call(c, "XRANGE", s, "-", "+", "COUNT", str(rnd.choice([1, 100, 1000])))
                call(c, "XREVRANGE", s, "+", "-", "COUNT", "10")
            elif op < 68:
                call(c, "XREAD", "COUNT", "500", "STREAMS", s, "0")   # up to megabytes
            elif op < 72:
                call(c, "XINFO", "STREAM", s)
                call(c, "XINFO", "GROUPS", s, expect_error=True)
                call(c, "XLEN", s)
            elif op < 78:
                c.close()
                c = connect()
                call(c, "CLIENT", "SETNAME", "soak-%d-%d" % (n, ops))
                if rnd.random() < 0.3:
                    call(c, "HELLO", "3")
                    call(c, "HELLO", "2")
            elif op < 84:
                call(c, "XADD", s, expect_error=True)
                call(c, "XADD", s, "abc", "f", "v", expect_error=True)
                call(c, "NOSUCHCOMMAND", "x", expect_error=True)
                call(c, "XREADGROUP", "GROUP", "nog", "c", "STREAMS", s, ">", expect_error=True)
            elif op < 88:
                call(c, "MULTI")
                call(c, "XADD", s, "MAXLEN", "~", "20000", "*", "m", "1")
                call(c, "XLEN", s)
                r = call(c, "EXEC")
                assert isinstance(r, list) and len(r) == 2, r
            elif op < 91:
                call(c, "WATCH", s)
                call(c, "MULTI")
                call(c, "XLEN", s)
                call(c, "EXEC")
            elif op < 95:
                t = "soak:tmp:%d" % n
                call(c, "XADD", t, "*", "f", "v")
                call(c, "XGROUP", "CREATE", t, "tg", "0")
                call(c, "XREADGROUP", "GROUP", "tg", "tc", "STREAMS", t, ">")
                call(c, "DEL", t)
            else:
                call(c, "INFO")
                call(c, "CLIENT", "LIST")
                call(c, "PING")
        except Exception as e:
            if not stop.is_set():
                failures.append("worker %d: %r" % (n, e))
                stop.set()
            break
        ops += 1
    c.close()


try:
    connect().close()
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(nclients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    admin = connect()
    print("soak: echd pid %d on port %d, %d workers, %.0f s, a sample every %.0f s"
          % (proc.pid, port, nclients, duration, interval), flush=True)
    header = "%8s %10s %10s %10s %10s %7s %12s %8s" % (
        "elapsed", "VmRSS kB", "RssAnon", "RssFile", "data kB", "clients", "commands", "errors")
    print(header)
    print("-" * len(header), flush=True)
    rows = []
    last_cmds = 0
    next_sample = t0
    while True:
        now = time.monotonic()
        if now >= next_sample or stop.is_set() or now - t0 >= duration:
            st = status()
            data = os.path.getsize(os.path.join(tmp, "data", "data.mdb"))
            info = admin.call("INFO", "clients").decode()
            clients = int(info.split("connected_clients:")[1].split("\r\n")[0])
            with lock:
                cmds, errs = counts["commands"], counts["errors"]
            row = (now - t0, st["VmRSS"], st["RssAnon"], st["RssFile"], data // 1024, clients,
                   cmds - last_cmds, errs)
            last_cmds = cmds
            rows.append(row)
            print("%7.0fs %10d %10d %10d %10d %7d %12d %8d" % row, flush=True)
            next_sample += interval
            if stop.is_set() or now - t0 >= duration:
                break
        if proc.poll() is not None:
            failures.append("echd exited with status %s" % proc.returncode)
            break
        time.sleep(min(1.0, max(0.05, next_sample - time.monotonic())))
    stop.set()
    for t in threads:
        t.join(30)
    warm = [r for r in rows if r[0] >= max(interval, duration / 5)] or rows
    first, last = warm[0], rows[-1]
    growth = last[2] - first[2]
    allowed = first[2] // 10 + 8 * 1024
    print("soak: heap (RssAnon) %d kB after warm-up (%.0f s), %d kB at the end: %+d kB "
          "(allowed %d kB); VmRSS %d -> %d kB; %d commands, %d error replies"
          % (first[2], first[0], last[2], growth, allowed, first[1], last[1],
             sum(r[6] for r in rows), last[7]))
    if failures:
        print("soak: FAILED: %s" % "; ".join(failures))
        sys.exit(1)
    if growth > allowed:
        print("soak: FAILED: the heap grew")
        sys.exit(1)
    print("soak: passed")
finally:
    cleanup()
EOF
