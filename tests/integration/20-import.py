"""tools/echd-import: streams copied from a real redis-server into echd, with their ids,
metadata, groups, consumers and pending entries.

Each test starts a redis-server of its own (the oracle of the other modules), fills it with
XADD, XDEL, XGROUP, XREADGROUP and XCLAIM, runs tools/echd-import against the module's
echd, and compares what both servers then answer to XRANGE, XINFO STREAM, XINFO GROUPS,
XINFO CONSUMERS and XPENDING (the clock fields aside).
"""

import os
import pty
import re
import shutil
import subprocess
import time

from echdtest import Server

ECHD_ONLY = "it copies from a redis-server of its own into echd"
TIMEOUT = 120

IMPORT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                      "echd-import")
CLOCK_FIELDS = {b"idle", b"seen-time", b"active-time", b"inactive"}


def redis_server():
    exe = shutil.which("redis-server") or "/usr/bin/redis-server"
    assert os.access(exe, os.X_OK), "redis-server is not installed (tools/echd-dev test does)"
    r = Server("redis", exe)
    r.start()
    return r


def run_import(src, dst, *extra):
    p = subprocess.run(["/usr/bin/python3", IMPORT, "--from", "redis://127.0.0.1:%d/0" % src.port,
                        "--to", "redis://127.0.0.1:%d/0" % dst.port, *extra],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def plain(reply):
    """A flat field/value reply as a dict, the clock fields dropped."""
    return {k: v for k, v in zip(reply[0::2], reply[1::2]) if k not in CLOCK_FIELDS}


# Redis 8.6's idempotent producers: the Redis 7.0 sources here have none, and a copy
# starts with none (echd's XINFO STREAM shows the defaults and zeros, asserted below)
IDMP_FIELDS = (b"idmp-duration", b"idmp-maxsize", b"pids-tracked", b"iids-tracked",
               b"iids-added", b"iids-duplicates")


def state(c, key):
    """What a client can see of a stream, the clocks and the idempotency fields aside."""
    groups = [plain(g) for g in c.call("XINFO", "GROUPS", key)]
    out = {"entries": c.call("XRANGE", key, "-", "+"),
           "stream": {k: v for k, v in plain(c.call("XINFO", "STREAM", key)).items()
                      if k not in (b"radix-tree-keys", b"radix-tree-nodes") + IDMP_FIELDS},
           "groups": groups}
    for g in groups:
        name = g[b"name"]
        out["consumers", name] = [plain(x) for x in c.call("XINFO", "CONSUMERS", key, name)]
        out["pending", name] = [p[:2] + p[3:] for p in c.call("XPENDING", key, name, "-", "+",
                                                              "1000")]
        out["idle", name] = [p[2] for p in c.call("XPENDING", key, name, "-", "+", "1000")]
    return out


def fill(r):
    """Streams that exercise every part of the copy; returns the keys."""
    # jobs: 1200 entries (more than a --batch), repeated and binary fields, deletions
    for i in range(1, 1201):
        r.call("XADD", "jobs", "%d-1" % i, "n", str(i), "n", b"\x00\xff\r\n%d" % i)
    for i in (3, 500, 1200):
        r.call("XDEL", "jobs", "%d-1" % i)
    r.call("XGROUP", "CREATE", "jobs", "workers", "0")
    r.call("XREADGROUP", "GROUP", "workers", "w1", "COUNT", "30", "STREAMS", "jobs", ">")
    r.call("XREADGROUP", "GROUP", "workers", "w2", "COUNT", "20", "STREAMS", "jobs", ">")
    r.call("XACK", "jobs", "workers", "10-1", "11-1")
    r.call("XCLAIM", "jobs", "workers", "w2", "0", "12-1", "13-1")          # delivered twice
    r.call("XCLAIM", "jobs", "workers", "w1", "0", "14-1", "RETRYCOUNT", "7")
    r.call("XGROUP", "CREATECONSUMER", "jobs", "workers", "idle-one")
    r.call("XGROUP", "CREATE", "jobs", "audit", "600-1", "ENTRIESREAD", "599")
    # a pending entry whose entry is then deleted: it cannot be carried over
    r.call("XREADGROUP", "GROUP", "audit", "a1", "COUNT", "2", "STREAMS", "jobs", ">")
    r.call("XDEL", "jobs", "601-1")
    # empty with a group; emptied by XDEL; and a non-stream key, left alone
    r.call("XGROUP", "CREATE", "fresh", "g", "$", "MKSTREAM")
    r.call("XADD", "gone", "5-5", "f", "v")
    r.call("XDEL", "gone", "5-5")
    r.call("SET", "not-a-stream", "x")
    r.call("XADD", b"bin\xff\x00key", "1-1", "f", "v")      # a name that is not UTF-8
    r.call("PEXPIREAT", "fresh", FAR_MS)                      # a TTL comes along
    return ("jobs", "fresh", "gone", b"bin\xff\x00key")


FAR_MS = 4000000000123       # in 2096


def test_import_copies_streams_groups_and_pending(server):
    r = redis_server()
    try:
        rc_ = r.raw()
        keys = fill(rc_)
        before = {k: state(rc_, k) for k in keys}
        time.sleep(2.5)              # idle times that a copy without them could not match
        e = server.raw()
        rc, out = run_import(r, server, "--dry-run")
        assert rc == 0 and "jobs: would copy 1196 entries, 2 groups" in out, out
        assert e.call("EXISTS", *keys) == 0
        rc, out = run_import(r, server, "--batch", "500")
        assert rc == 0, out
        assert "4 stream(s) found, 0 not copied" in out, out
        # the summary: what was copied, how fast; no progress line (stdout is not a terminal)
        assert re.search(r"4 stream\(s\) found, 0 not copied; copied 1197 entries, 3 groups, "
                         r"4 consumers, 49 pending in \d+\.\d s \(\d+ entries/s\)\n", out), out
        assert "\r" not in out and "left" not in out, out
        assert "jobs: 1196 entries, 2 groups, 4 consumers, 49 pending; 1 pending entries not " \
               "carried over: their entries were deleted" in out, out
        assert e.call("EXISTS", "not-a-stream") == 0
        assert "fresh: 0 entries, 1 groups, 0 consumers, 0 pending; expires at %d ms" % FAR_MS \
            in out, out
        assert [e.call("PEXPIRETIME", k) for k in keys] == [-1, FAR_MS, -1, -1]
        for k in keys:
            got, want = state(e, k), state(rc_, k)
            for part in want:                              # the source is untouched
                if part[0] != "idle":
                    assert want[part] == before[k][part], (k, part)
            lost = k == "jobs"
            # where Redis cannot tell a group's lag (null), echd tells the exact one
            # (emq.streams.md): compare it where Redis has one
            for gw, gg in zip(want["groups"], got["groups"]):
                if gw[b"lag"] is None:
                    gg[b"lag"] = None
            for part in want:
                if part == ("pending", b"audit") and lost:
                    assert got[part] == want[part][1:], (k, part)
                elif part == "groups" and lost:
                    # audit's PEL count differs by the entry that could not come along
                    w = [dict(g) for g in want[part]]
                    for g in w:
                        g[b"pending"] -= g[b"name"] == b"audit"
                    assert got[part] == w, (k, got[part], w)
                elif part == ("consumers", b"audit") and lost:
                    assert got[part] == [{**want[part][0], b"pending": 1}], got[part]
                elif part == ("idle", b"audit") and lost:
                    pass
                elif part[0] == "idle":
                    # carried over: the idle time Redis tells, but for the moments between
                    # the two reads
                    assert all(abs(g - w) < 2000 for g, w in zip(got[part], want[part])), \
                        (k, part, got[part], want[part])
                    assert len(got[part]) == len(want[part])
                else:
                    assert got[part] == want[part], (k, part, got[part], want[part])
        for k in keys:
            info = plain(e.call("XINFO", "STREAM", k))
            assert [info[f] for f in IDMP_FIELDS] == [100, 100, 0, 0, 0, 0], (k, info)
        # new ids continue after the copied ones, in echd as they would have in Redis
        assert e.call("XADD", "gone", "5-*", "f", "v") == b"5-6"
        # a second run leaves what exists and says so; --replace copies again
        rc, out = run_import(r, server)
        assert rc == 1 and "jobs: NOT COPIED: the key exists in echd" in out, out
        assert "4 stream(s) found, 4 not copied" in out, out
        rc, out = run_import(r, server, "--replace", "--dry-run", "--match", "jobs")
        assert rc == 0 and "jobs: would replace the key in echd with 1196 entries" in out, out
        assert e.call("XLEN", "jobs") == 1196               # a dry run deletes nothing
        rc, out = run_import(r, server, "--replace", "--match", "gone")
        assert rc == 0 and "1 stream(s) found, 0 not copied" in out, out
        assert state(e, "gone") == state(rc_, "gone")
    finally:
        r.stop()


def test_import_progress_on_a_terminal(server):
    """On a terminal (a pty here) echd-import redraws one progress line: entries copied of
    those to copy, entries a second, time left; it takes the line away before each report
    line and the summary."""
    r = redis_server()
    try:
        c = r.raw()
        for i in range(30):
            c.pipeline([("XADD", "big", "%d-%d" % (i + 1, j + 1), "n", str(j))
                        for j in range(100)])
        c.call("XADD", "small", "1-1", "f", "v")
        master, slave = pty.openpty()
        p = subprocess.Popen(["/usr/bin/python3", IMPORT, "--from",
                              "redis://127.0.0.1:%d/0" % r.port, "--to",
                              "redis://127.0.0.1:%d/0" % server.port, "--batch", "100"],
                             stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE)
        os.close(slave)
        out = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:              # EIO once the child has closed the pty
                break
            if not chunk:
                break
            out += chunk
        os.close(master)
        assert p.wait(timeout=TIMEOUT) == 0, p.stderr.read()
        text = out.decode()
        # the first batch is drawn at once, the last too
        assert re.search(r"\r\x1b\[Kcopied \d+ of 3001 entries \(\d+%\), \d+ entries/s, "
                         r"\d+[smh]\S* left", text), repr(text)
        assert "copied 3000 of 3001 entries" in text or "copied 3001 of 3001 entries" in text, \
            repr(text)
        # each report line starts on a cleared line, and the summary on a line of its own
        assert re.search(r"\r\x1b\[Kbig: 3000 entries", text), repr(text)
        assert re.search(r"\r\x1b\[Ksmall: 1 entries", text), repr(text)
        assert re.search(r"\n2 stream\(s\) found, 0 not copied; copied 3001 entries, 0 groups, "
                         r"0 consumers, 0 pending in \d+\.\d s \(\d+ entries/s\)\r\n$", text), \
            repr(text)
    finally:
        r.stop()
        e = server.raw()
        e.call("DEL", "big", "small")


def test_import_usage_and_unreachable(server):
    p = subprocess.run(["/usr/bin/python3", IMPORT, "--help"], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0 and "--replace" in p.stdout and "--dry-run" in p.stdout
    p = subprocess.run(["/usr/bin/python3", IMPORT, "--batch", "0"], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 2 and "--batch must be at least 1" in p.stderr, p.stderr
    p = subprocess.run(["/usr/bin/python3", IMPORT, "--nonsense"], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 2, p.stderr
    r = redis_server()
    try:
        r.raw().call("XADD", "s", "1-1", "f", "v")
        port = r.port
    finally:
        r.stop()
    rc, out = run_import(r, server)
    assert rc != 0 and "cannot use the source server redis://127.0.0.1:%d/0" % port in out, out
