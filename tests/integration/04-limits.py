"""Limits: maxclients, proto-max-bulk-len, timeout, client-output-buffer-limit.

Each test starts its own server with the limit it needs (server.spawn).
"""

import os
import signal
import socket
import time

from echdtest import Closed, RespConn, RespError, echd_only, lmdb_only, wait_until

TIMEOUT = 90


def client_names(c):
    text = c.call("CLIENT", "LIST").decode()
    return [f.split("=", 1)[1] for line in text.splitlines() for f in line.split(" ")
            if f.startswith("name=")]


def test_maxclients(server):
    s = server.spawn("--maxclients", "3")
    # the start-up PING connection may still be counted for a moment: retry briefly
    deadline = time.monotonic() + 5
    while True:
        conns = [s.raw() for _ in range(3)]
        replies = []
        for c in conns:
            c.send("PING")
            replies.append(c.read())
        if all(r == "PONG" for r in replies):
            break
        for c in conns:
            c.close()
        assert time.monotonic() < deadline, replies
        time.sleep(0.1)
    fourth = s.raw()
    # the server speaks first: the error arrives without any command being sent
    assert fourth.read_raw() == b"-ERR max number of clients reached\r\n"
    assert fourth.wait_closed(5)
    # the three keep working
    for c in conns:
        assert c.call("PING") == "PONG"
    assert s.cli("PING", check=False) != "PONG\n"
    # a slot freed is a slot usable
    conns[0].close()

    def fifth_ok():
        c = s.raw()
        try:
            return c.call("PING") == "PONG"
        except Exception:
            return False
        finally:
            c.close()
    wait_until(fifth_ok, what="a connection accepted after one closed")
    info = conns[1].call("INFO", "stats").decode()
    assert "rejected_connections:" in info
    rejected = int(info.split("rejected_connections:")[1].split("\r\n")[0])
    assert rejected >= 2, rejected


def test_proto_max_bulk_len(server):
    s = server.spawn()
    c = s.raw()
    assert c.call("CONFIG", "SET", "proto-max-bulk-len", "1048576") == "OK"
    assert c.call("CONFIG", "GET", "proto-max-bulk-len") == [b"proto-max-bulk-len", b"1048576"]
    assert c.err("CONFIG", "SET", "proto-max-bulk-len", "1000") == (
        "ERR CONFIG SET failed (possibly related to argument 'proto-max-bulk-len') - "
        "argument must be between 1048576 and 9223372036854775807 inclusive")
    # exactly the limit is fine
    ok = b"x" * 1048576
    assert c.call("XADD", "s", "1-1", "f", ok) == b"1-1"
    # one byte more: a protocol error as soon as the length is read, then the close
    bad = s.raw()
    bad.send_raw(b"*5\r\n$4\r\nXADD\r\n$1\r\ns\r\n$1\r\n*\r\n$1\r\nf\r\n$1048577\r\n")
    assert bad.read_raw() == b"-ERR Protocol error: invalid bulk length\r\n"
    assert bad.wait_closed(5)
    assert c.call("XLEN", "s") == 1
    # also set on the command line
    s2 = server.spawn("--proto-max-bulk-len", "2mb")
    assert s2.raw().call("CONFIG", "GET", "proto-max-bulk-len") == [b"proto-max-bulk-len",
                                                                   b"2097152"]


def test_idle_timeout(server):
    s = server.spawn("--timeout", "1")
    idle = s.raw()
    idle.call("PING")
    busy = s.raw()
    blocked = s.raw()
    blocked.call("CLIENT", "SETNAME", "blocked")
    blocked.send("XREAD", "BLOCK", "0", "STREAMS", "s", "$")
    t0 = time.monotonic()
    closed_at = None
    while time.monotonic() - t0 < 4.0:
        assert busy.call("PING") == "PONG"       # active: never closed
        if closed_at is None:
            idle.sock.settimeout(0.01)
            try:
                if idle.sock.recv(1) == b"":
                    closed_at = time.monotonic() - t0
            except socket.timeout:
                pass
            except OSError:
                closed_at = time.monotonic() - t0
        time.sleep(0.2)
    assert closed_at is not None, "idle client not closed after 4 s with timeout 1"
    assert closed_at >= 0.9, closed_at
    # a client blocked in XREAD is not idle: it is still there...
    assert "blocked" in client_names(busy)
    # ...and gets its entry. (Redis 7.0 may close it instead, when its idle check runs
    # between the unblocking and the write of the reply: a race echd must not have.)
    busy.call("XADD", "s", "1-1", "f", "v")
    try:
        assert blocked.read() == [[b"s", [[b"1-1", [b"f", b"v"]]]]]
    except Closed:
        if s.is_echd:
            raise
    assert s.raw().call("CONFIG", "GET", "timeout") == [b"timeout", b"1"]


def test_output_buffer_limit(server):
    s = server.spawn("--client-output-buffer-limit", "normal 1mb 0 0")
    c = s.raw()
    # a 500 KB reply: under the limit on its own
    big = "x" * 10000
    c.pipeline([("XADD", "big", "%d-1" % i, "f", big) for i in range(1, 51)])
    fast = s.raw()
    assert len(fast.call("XRANGE", "big", "-", "+")) == 50

    slow = RespConn(s.port)
    slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    slow.call("CLIENT", "SETNAME", "slow")
    slow.send_raw(b"*4\r\n$6\r\nXRANGE\r\n$3\r\nbig\r\n$1\r\n-\r\n$1\r\n+\r\n" * 400)  # ~200 MB
    # the slow reader is disconnected, nobody else
    wait_until(lambda: "slow" not in client_names(c), timeout=10, what="slow client dropped")
    assert c.call("PING") == "PONG"
    assert len(fast.call("XRANGE", "big", "-", "+")) == 50
    got = 0
    try:
        slow.sock.settimeout(5)
        while True:
            data = slow.sock.recv(1 << 20)
            if not data:
                break
            got += len(data)
    except (OSError, Closed):
        pass
    assert got < 400 * 500000, got
    assert s.raw().call("CONFIG", "GET", "client-output-buffer-limit")[1].startswith(
        b"normal 1048576 0 0")


def test_output_buffer_limit_errors(server):
    c = server.raw()
    pre = "ERR CONFIG SET failed (possibly related to argument 'client-output-buffer-limit') - "
    for value, why in (("foo 1 2 3", "Invalid client class specified"),
                       ("normal 1 2", "Wrong number of arguments"),
                       ("normal x 2 3", "Error in hard, soft or soft_seconds setting")):
        assert c.err("CONFIG", "SET", "client-output-buffer-limit", value) == (
            pre + why + " in buffer limit configuration."), value
    assert c.call("CONFIG", "SET", "client-output-buffer-limit", "normal 0 0 0") == "OK"


def test_many_clients(server):
    conns = [server.raw() for _ in range(200)]
    for i, c in enumerate(conns):
        c.send("XADD", "many", "*", "client", str(i))
    for c in conns:
        assert isinstance(c.read(), bytes)
    assert conns[0].call("XLEN", "many") == 200
    info = conns[0].call("INFO", "clients").decode()
    n = int(info.split("connected_clients:")[1].split("\r\n")[0])
    assert n >= 200, n


@echd_only("echd's own options: the LMDB map grows on demand up to maxdisk")
@lmdb_only("the LMDB map's growth up to maxdisk, and the size of data.mdb")
def test_map_growth_and_maxdisk(server):
    s = server.spawn("--map-size", "1mb", "--maxdisk", "8mb")
    c = s.raw()
    value = "x" * 1000
    acked, first_error = 0, None
    while acked < 20000 and first_error is None:
        for r in c.pipeline([("XADD", "s", "*", "f", value)] * 100):
            if isinstance(r, RespError):
                first_error = first_error or r.msg
            else:
                acked += 1
    # the map grew past its initial 1 MiB...
    assert acked >= 3000, (acked, first_error)
    # ...up to maxdisk, where writes fail with an error naming the limit
    assert first_error is not None, "20 MB written with maxdisk 8mb"
    assert first_error.startswith("ERR ") and "maxdisk" in first_error, first_error
    size = sum(os.path.getsize(os.path.join(s.dir, f)) for f in os.listdir(s.dir))
    assert size <= 9 * 1024 * 1024, size
    # reads still work, and nothing acknowledged is missing
    assert c.call("XLEN", "s") == acked
    assert len(c.call("XRANGE", "s", "-", "+", "COUNT", "10")) == 10
    assert c.call("PING") == "PONG"
    # a higher maxdisk set at run time lets the map grow again
    assert c.call("CONFIG", "SET", "maxdisk", "16mb") == "OK"
    more = 0
    for _ in range(20):
        if any(isinstance(r, RespError) for r in c.pipeline([("XADD", "s", "*", "f", value)] * 100)):
            break
        more += 100
    assert more >= 2000, more
    acked = c.call("XLEN", "s")
    s.restart()
    assert s.raw().call("XLEN", "s") == acked


def storage_info(c, name):
    text = c.call("INFO", "storage").decode()
    return int([l.split(":", 1)[1] for l in text.split("\r\n") if l.startswith(name + ":")][0])


def xadd_until_refused(c, key, value, limit):
    acked = 0
    while acked < limit:
        for r in c.pipeline([("XADD", key, "*", "f", value)] * 100):
            if isinstance(r, RespError):
                return acked, r.msg
            acked += 1
    return acked, None


@echd_only("echd's own options: maxdisk bounds the LMDB map")
@lmdb_only("maxdisk bounds the LMDB map (data.mdb's size)")
def test_maxdisk_below_map_size(server):
    """A maxdisk below map-size (256mb by default) holds from the first write: the map
    starts at maxdisk. An environment whose map is larger (grown in a run without maxdisk)
    is shrunk to maxdisk at start (never below its data), and a maxdisk lowered at run time
    below the map refuses new data once the live data reach it."""
    s = server.spawn("--maxdisk", "8mb")
    c = s.raw()
    value = "x" * 1000
    assert storage_info(c, "storage_map_bytes") == 8 << 20
    acked, err = xadd_until_refused(c, "s", value, 40000)
    assert err is not None and "maxdisk (8388608 bytes)" in err, (acked, err)
    assert 3000 <= acked < 8200, acked
    assert os.path.getsize(os.path.join(s.dir, "data.mdb")) <= 8 << 20
    # a MULTI of 10 MB does not fit either, and changes nothing
    assert c.call("DEL", "s") == 1
    wait_until(lambda: storage_info(c, "storage_disk_full") == 0, what="room after DEL")
    replies = c.pipeline([("MULTI",)] + [("XADD", "m", "*", "f", value)] * 10000 + [("EXEC",)])
    assert isinstance(replies[-1], RespError) and "maxdisk" in replies[-1].msg, replies[-1]
    assert c.call("EXISTS", "m") == 0
    assert os.path.getsize(os.path.join(s.dir, "data.mdb")) <= 8 << 20
    # a run without maxdisk grows the map (256mb) and writes 12 MB...
    s.extra_args = []
    s.restart(kill=signal.SIGTERM)
    c = s.raw()
    assert storage_info(c, "storage_map_bytes") == 256 << 20
    acked, err = xadd_until_refused(c, "big", value, 12000)
    assert err is None, err
    # ...a maxdisk set at run time below that refuses XADD at once...
    assert c.call("CONFIG", "SET", "maxdisk", "8mb") == "OK"
    c.call("PING")
    assert "maxdisk (8388608 bytes)" in c.err("XADD", "big", "*", "f", value)
    assert storage_info(c, "storage_disk_full") == 1
    # ...and a start with maxdisk shrinks the map to the data, which are all there
    s.extra_args = ["--maxdisk", "8mb"]
    s.restart(kill=signal.SIGTERM)
    c = s.raw()
    used = storage_info(c, "storage_used_bytes")
    map_bytes = storage_info(c, "storage_map_bytes")
    assert used > 8 << 20 and used < map_bytes <= used + (1 << 20), (used, map_bytes)
    assert c.call("XLEN", "big") == 12000
    assert "maxdisk" in c.err("XADD", "big", "*", "f", value)
    # trimming the live data below maxdisk makes room again
    assert c.call("XTRIM", "big", "MAXLEN", "=", 2000) == 10000
    wait_until(lambda: storage_info(c, "storage_disk_full") == 0, what="room after XTRIM")
    assert not isinstance(c.call("XADD", "big", "*", "f", value), RespError)
