"""The postgres backend's partial cache (issue 34, storage-cache-size): a start loads no
entry, commands that need entries not in memory wait for them and answer what was written,
and a fetch held up in PostgreSQL does not hold up other clients, nor the client's own
pipeline's order.

Collected only by run.py --storage postgres (@pg_only): each test spawns an echd of its own
with a small storage-cache-size on the suite's PostgreSQL.
"""

import os
import shutil
import socket
import subprocess
import time

import echdtest
from echdtest import fill, pg_only, timeout, wait_until

CACHE = "256kb"


def info_storage(conn):
    out = conn.call("INFO", "storage").decode()
    return {k: v for k, _, v in (ln.partition(":") for ln in out.splitlines() if ":" in ln)}


def cache(conn, field):
    return int(info_storage(conn)["storage_cache_" + field])


@pg_only("the partial cache is the postgres backend's")
@timeout(120)
def test_cold_reads_after_restart(server):
    """After a restart nothing of the entries is in memory; XRANGE, XPENDING with XCLAIM of
    an old entry and a consumer's pending list read from 0 fetch them, and answer exactly
    what was written; memory stays near storage-cache-size."""
    s = server.spawn("--storage-cache-size", CACHE)
    c = s.raw()
    ids = fill(c, "big", 5000, fields=("f", "x" * 40))
    c.call("XGROUP", "CREATE", "big", "g", "0")
    first = c.call("XREADGROUP", "GROUP", "g", "alice", "COUNT", "100", "STREAMS", "big", ">")
    assert len(first[0][1]) == 100
    s.restart()
    c = s.raw()
    assert cache(c, "fetched_rows") == 0          # the start read no entry
    assert cache(c, "bytes") < 256 * 1024
    got = c.call("XRANGE", "big", "-", "+")
    assert [e[0].decode() for e in got] == ids
    assert all(e[1] == [b"f", b"x" * 40] for e in got)
    assert cache(c, "misses") > 0 and cache(c, "fetched_rows") >= 5000
    # an old pending entry, claimed
    claimed = c.call("XCLAIM", "big", "g", "bob", "0", ids[3])
    assert claimed == [[ids[3].encode(), [b"f", b"x" * 40]]]
    # alice's pending list from 0, after the cache moved on
    c.call("XRANGE", "big", ids[4000], "+")
    mine = c.call("XREADGROUP", "GROUP", "g", "alice", "COUNT", "1000", "STREAMS", "big", "0")
    assert [e[0].decode() for e in mine[0][1]] == ids[:3] + ids[4:100]
    # the memory the entries take stays near the limit (a fetch may pass it until the next
    # turn's eviction)
    wait_until(lambda: cache(c, "bytes") <= 2 * 256 * 1024, what="eviction")
    assert cache(c, "evicted_rows") > 0
    # and a write after all that lands where it should
    new = c.call("XADD", "big", "*", "f", "y").decode()
    assert c.call("XRANGE", "big", "-", "+", "COUNT", "2") == got[:2]
    assert c.call("XREVRANGE", "big", "+", "-", "COUNT", "1")[0][0].decode() == new


def psql_session():
    bindir = os.environ.get("ECHD_TEST_PG_BIN", "")
    psql = os.path.join(bindir, "psql") if bindir and os.path.exists(
        os.path.join(bindir, "psql")) else (shutil.which("psql") or "psql")
    return subprocess.Popen([psql, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d",
                             echdtest.PG_URL], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def answered(conn, wait):
    """Whether a reply is waiting on conn within wait seconds (reads nothing)."""
    conn.sock.settimeout(wait)
    try:
        return conn.sock.recv(1, socket.MSG_PEEK) != b""
    except (socket.timeout, BlockingIOError):
        return False
    finally:
        conn.sock.settimeout(30)


@pg_only("the partial cache is the postgres backend's")
@timeout(120)
def test_fetch_does_not_stall_others(server):
    """While PostgreSQL holds up a fetch (its table locked by another session), the client
    that needs it waits, its pipelined PING behind it, and the other clients are served;
    once the lock goes, it gets what was written, then its PING."""
    s = server.spawn("--storage-cache-size", CACHE)
    c = s.raw()
    ids = fill(c, "old", 2000)
    c.call("XGROUP", "CREATE", "old", "g", "0")
    s.restart()
    a, b = s.raw(), s.raw()
    lock = psql_session()
    try:
        lock.stdin.write('BEGIN;\nLOCK TABLE "%s".entries IN ACCESS EXCLUSIVE MODE;\n'
                         "SELECT 'locked';\n" % s.pg_schema)
        lock.stdin.flush()
        assert lock.stdout.readline().strip() == "locked"
        a.send("XRANGE", "old", "-", "+", "COUNT", "10")
        a.send("PING")
        t0 = time.monotonic()
        # the others go on: what needs no entry is answered at once
        assert b.call("PING") == "PONG"
        assert b.call("XLEN", "old") == 2000
        assert b.call("XINFO", "GROUPS", "old")[0][1] == b"g"
        assert time.monotonic() - t0 < 5
        assert not answered(a, 0.5)                # a waits for its rows
        lock.stdin.write("ROLLBACK;\n")
        lock.stdin.flush()
        got = a.read()
        assert [e[0].decode() for e in got] == ids[:10]
        assert a.read() == "PONG"                 # its pipeline stayed in order
    finally:
        lock.stdin.close()
        lock.wait(30)
    # the writes after it see the stream as it is
    assert "equal or smaller" in b.err("XADD", "old", "1-1", "f", "v")
    assert b.call("XADD", "old", "2001-1", "f", "v") == b"2001-1"
