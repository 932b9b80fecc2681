"""Limits under load: as many connections as `ulimit -n` allows against a lower maxclients;
a never-ending bulk string; a client that never reads while XREAD returns megabytes; a
slow-loris. Through all of it another client's PING stays fast, and echd's resident memory
(VmRSS from /proc) stays bounded and comes back down afterwards. Each test prints its
figures (connections reached, RSS baseline/peak/after, worst PING latency).

echd only: the figures are echd's, and some limits are echd's (a slow-loris is not idle).
Every loop is bounded in count and time; everything is on 127.0.0.1 and closed at the end.
"""

import resource
import socket
import threading
import time

from echdtest import RespConn, encode_command, timeout, wait_until

ECHD_ONLY = "load and resource limits: echd's own memory figures and limits"
TIMEOUT = 240
# run.py -j: alone, since it loads the machine and bounds another client's latency
SERIAL = True

MAX_CONNS = 10000
PING_LIMIT = 2.0          # seconds: the worst PING latency allowed while under load
MiB = 1024


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

_sanitized = {}


def sanitized(server):
    """True for an ASan build: its allocator keeps freed memory in quarantine and its
    shadow memory grows with the heap, so RSS bounds are not checked (only printed)."""
    if server.exe not in _sanitized:
        with open(server.exe, "rb") as f:
            _sanitized[server.exe] = b"AddressSanitizer" in f.read()
    return _sanitized[server.exe]


def check_rss(server, what, value_kb, limit_kb):
    if sanitized(server):
        print("(ASan build: %s of %d kB not checked against %d kB)" % (what, value_kb, limit_kb))
        return
    assert value_kb < limit_kb, "%s: %d kB, limit %d kB" % (what, value_kb, limit_kb)


def rss_kb(server):
    with open("/proc/%d/status" % server.proc.pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for pid %d" % server.proc.pid)


def hwm_kb(server):
    """The peak of echd's resident memory so far (VmHWM): it sees a peak inside a long
    event-loop turn, when no sampling client gets an answer."""
    with open("/proc/%d/status" % server.proc.pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM for pid %d" % server.proc.pid)


def info_field(c, section, name):
    for line in c.call("INFO", section).decode().split("\r\n"):
        if line.startswith(name + ":"):
            return int(line.split(":", 1)[1])
    raise AssertionError("no %s in INFO %s" % (name, section))


def client_names(c):
    text = c.call("CLIENT", "LIST").decode()
    return [f.split("=", 1)[1] for line in text.splitlines() for f in line.split(" ")
            if f.startswith("name=")]


class Watch:
    """A background thread on its own connection: PINGs every 20 ms and samples echd's RSS
    every 5 ms, recording the worst latency and the peak."""

    def __init__(self, server):
        self.server = server
        self.conn = server.raw(timeout=30)
        self.conn.call("CLIENT", "SETNAME", "watch")
        self.worst = 0.0
        self.pings = 0
        self.peak = rss_kb(server)
        self.error = None
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._ping, daemon=True),
                         threading.Thread(target=self._rss, daemon=True)]
        for t in self._threads:
            t.start()

    def _ping(self):
        # PING first, then every 20 ms: a load that ends within 20 ms still sees one
        try:
            while True:
                t0 = time.monotonic()
                r = self.conn.call("PING")
                dt = time.monotonic() - t0
                assert r == "PONG", r
                self.worst = max(self.worst, dt)
                self.pings += 1
                if self._stop.wait(0.02):
                    break
        except Exception as e:  # reported by stop()
            self.error = e

    def _rss(self):
        try:
            while not self._stop.wait(0.005):
                self.peak = max(self.peak, rss_kb(self.server))
        except Exception as e:
            self.error = self.error or e

    def stop(self):
        self._stop.set()
        for t in self._threads:
            t.join(10)
        assert self.error is None, "watcher failed: %r" % (self.error,)
        assert self.pings > 0, "no PING completed"
        assert self.worst < PING_LIMIT, "a PING took %.2f s under load" % self.worst
        return self


def read_line(sock, limit=256):
    """One CRLF-terminated line from a blocking socket (b'' when closed first)."""
    buf = b""
    while not buf.endswith(b"\r\n") and len(buf) < limit:
        b = sock.recv(1)
        if not b:
            break
        buf += b
    return buf


def raise_nofile():
    """Raises this process's soft RLIMIT_NOFILE to the hard limit (servers spawned after
    this inherit it); returns the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft == resource.RLIM_INFINITY:
        return hard
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return soft


# ---------------------------------------------------------------------------
# connections
# ---------------------------------------------------------------------------

@timeout(300)
def test_connections_past_maxclients(server):
    """N connections (10,000, or what `ulimit -n` allows) against maxclients N - N/10: the
    first maxclients are served, each one past it gets -ERR max number of clients reached
    and is closed; PING stays fast throughout, a freed slot is usable at once, and RSS
    comes back down once they are gone."""
    nofile = raise_nofile()
    total = min(MAX_CONNS, nofile - 200)
    assert total >= 500, "ulimit -n is %d: too low for this test" % nofile
    maxclients = total - max(50, total // 10)
    s = server.spawn("--maxclients", str(maxclients), "--tcp-backlog", "4096")
    admin = s.raw()
    admin.call("CLIENT", "SETNAME", "admin")
    watch = Watch(s)
    wait_until(lambda: info_field(admin, "clients", "connected_clients") == 2,
               what="only admin and watch connected")
    base = rss_kb(s)
    served, refused, socks = [], [], []
    t0 = time.monotonic()
    try:
        # up to maxclients: every connection is served (PING answered)
        while len(served) + 2 < maxclients:
            assert time.monotonic() - t0 < 120, "connecting took over 120 s"
            batch = []
            for _ in range(min(250, maxclients - 2 - len(served))):
                sk = socket.create_connection(("127.0.0.1", s.port), timeout=10)
                socks.append(sk)
                batch.append(sk)
            for sk in batch:
                sk.sendall(b"*1\r\n$4\r\nPING\r\n")
            for sk in batch:
                line = read_line(sk)
                assert line == b"+PONG\r\n", (len(served), line)
                served.append(sk)
        peak_conns = rss_kb(s)
        # past it: refused, with the error, and closed by the server
        for _ in range(total - maxclients):
            assert time.monotonic() - t0 < 180, "connecting took over 180 s"
            sk = socket.create_connection(("127.0.0.1", s.port), timeout=10)
            socks.append(sk)
            line = read_line(sk, 100)
            assert line == b"-ERR max number of clients reached\r\n", (len(refused), line)
            assert sk.recv(1) == b"", "refused connection left open"
            refused.append(sk)
        elapsed = time.monotonic() - t0
        assert info_field(admin, "clients", "connected_clients") == maxclients
        assert info_field(admin, "stats", "rejected_connections") >= len(refused)
        # every one served still is: one PING each, all sent before any reply is read
        for sk in served:
            sk.sendall(b"*1\r\n$4\r\nPING\r\n")
        for sk in served:
            assert read_line(sk) == b"+PONG\r\n"
        # a slot freed is a slot usable
        for sk in served[:100]:
            sk.close()
        del served[:100]

        def one_more():
            c = RespConn(s.port, timeout=5)
            try:
                return c.call("PING") == "PONG"
            except Exception:
                return False
            finally:
                c.close()
        wait_until(one_more, timeout=10, what="a connection accepted after 100 closed")
        assert info_field(admin, "clients", "maxclients") == maxclients
    finally:
        for sk in socks:
            sk.close()
    wait_until(lambda: info_field(admin, "clients", "connected_clients") == 2, timeout=30,
               what="the connections to be gone")
    watch.stop()
    time.sleep(1.5)   # a cron turn or so
    after = rss_kb(s)
    print("connections: ulimit -n %d; %d in all, opened in %.1f s: %d served concurrently "
          "(maxclients %d), %d refused with -ERR max number of clients reached"
          % (nofile, len(socks) + 2, elapsed, maxclients, maxclients, len(refused)))
    print("rss kB: baseline %d, with %d clients %d (%.1f kB each), peak %d, after %d"
          % (base, maxclients, peak_conns, (peak_conns - base) / maxclients, watch.peak,
             after))
    print("worst PING latency %.3f s over %d PINGs" % (watch.worst, watch.pings))
    assert len(refused) == total - maxclients
    check_rss(s, "growth at the peak", watch.peak - base, 1024 * MiB)
    # near the baseline: most of what the connections took is given back
    check_rss(s, "growth after", after - base, max(32 * MiB, (watch.peak - base) // 4))


# ---------------------------------------------------------------------------
# input that never ends
# ---------------------------------------------------------------------------

def stream_until_closed(sock, head, limit_bytes, seconds):
    """Sends head, then 64 KiB chunks until the server closes the connection (or the
    limits are reached); returns (bytes sent, closed)."""
    chunk = b"y" * 65536
    sent = 0
    deadline = time.monotonic() + seconds
    sock.settimeout(5)
    try:
        sock.sendall(head)
        while sent < limit_bytes and time.monotonic() < deadline:
            sock.sendall(chunk)
            sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        return sent, True
    return sent, False


@timeout(120)
def test_never_ending_bulk(server):
    """A bulk that never ends is cut off by client-query-buffer-limit (here 4 MiB) or, when
    its length is past proto-max-bulk-len, at once; an endless inline line at 64 KiB. Memory
    stays bounded and everyone else is served."""
    s = server.spawn("--client-query-buffer-limit", "4mb", "--proto-max-bulk-len", "16mb")
    admin = s.raw()
    watch = Watch(s)
    base = rss_kb(s)
    # 1. within proto-max-bulk-len, past the query buffer limit
    endless = socket.create_connection(("127.0.0.1", s.port))
    sent, closed = stream_until_closed(
        endless, b"*3\r\n$4\r\nXADD\r\n$1\r\nk\r\n$15000000\r\n", 256 << 20, 30)
    assert closed, "sent %d bytes of a 15 MB bulk with a 4 MiB query buffer limit" % sent
    assert sent < 64 << 20, sent
    endless.close()
    # 2. past proto-max-bulk-len: refused as soon as the length is read
    c = s.raw()
    c.send_raw(b"*3\r\n$4\r\nXADD\r\n$1\r\nk\r\n$16777217\r\n")
    assert c.read_raw() == b"-ERR Protocol error: invalid bulk length\r\n"
    assert c.wait_closed(5)
    # 3. an inline line without its end
    inline = socket.create_connection(("127.0.0.1", s.port))
    sent_inline, closed_inline = stream_until_closed(inline, b"PING ", 64 << 20, 30)
    assert closed_inline and sent_inline < 16 << 20, sent_inline
    inline.close()
    # several at once, while the others work
    ends = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(8)]
    threads = [threading.Thread(target=stream_until_closed,
                                args=(e, b"*2\r\n$4\r\nECHO\r\n$16000000\r\n", 64 << 20, 30))
               for e in ends]
    for t in threads:
        t.start()
    for i in range(50):
        assert admin.call("XADD", "ok", "*", "i", str(i)).count(b"-") == 1
    for t in threads:
        t.join(40)
    for e in ends:
        e.close()
    assert admin.call("XLEN", "ok") == 50
    assert admin.call("EXISTS", "k") == 0
    watch.stop()
    wait_until(lambda: info_field(admin, "clients", "connected_clients") == 2,
               what="the endless clients to be gone")
    after = rss_kb(s)
    print("never-ending bulk cut after %d bytes, inline after %d bytes" % (sent, sent_inline))
    print("rss kB: baseline %d, peak %d, after %d; worst PING %.3f s"
          % (base, watch.peak, after, watch.worst))
    check_rss(s, "growth at the peak", watch.peak - base, 160 * MiB)
    check_rss(s, "growth after", after - base, 48 * MiB)


# ---------------------------------------------------------------------------
# a client that never reads
# ---------------------------------------------------------------------------

@timeout(120)
def test_reader_that_never_reads(server):
    """A client pipelines XREADs of 10 MB each and never reads: client-output-buffer-limit
    (hard 4 MiB) disconnects it before the replies pile up in echd's memory; a second one
    does it with a single 10 MB reply; everyone else is served."""
    s = server.spawn("--client-output-buffer-limit", "normal 4mb 2mb 2")
    admin = s.raw(timeout=60)
    value = "x" * 100000
    for i in range(10):
        admin.pipeline([("XADD", "big", "*", "f", value)] * 10)
    # read it all once, so that its pages are resident in the baseline (in 3 MB replies:
    # one reply over the 4 MiB hard limit is a disconnection, as in Redis)
    last = "-"
    for _ in range(4):
        got = admin.call("XRANGE", "big", last, "+", "COUNT", "30")
        last = "(" + got[-1][0].decode()
    assert last == "(" + admin.call("XREVRANGE", "big", "+", "-", "COUNT", "1")[0][0].decode()
    watch = Watch(s)
    base = rss_kb(s)
    slow = []
    for name, count in (("pipeline", 50), ("single", 1)):
        c = RespConn(s.port)
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.call("CLIENT", "SETNAME", name)
        c.send_raw(encode_command("XREAD", "COUNT", "100", "STREAMS", "big", "0") * count)
        slow.append(c)
        wait_until(lambda: name not in client_names(admin), timeout=15,
                   what="the %s reader to be disconnected" % name)
    assert admin.call("XLEN", "big") == 100
    assert len(admin.call("XRANGE", "big", "-", "+", "COUNT", "5")) == 5
    watch.stop()
    time.sleep(0.5)
    after = rss_kb(s)
    for c in slow:
        c.close()
    disconnections = info_field(admin, "stats", "client_output_buffer_limit_disconnections")
    print("rss kB: baseline %d, peak %d, after %d (50 x 10 MB of replies requested); "
          "worst PING %.3f s; output buffer disconnections %d"
          % (base, watch.peak, after, watch.worst, disconnections))
    assert disconnections == 2, disconnections
    check_rss(s, "growth at the peak", watch.peak - base, 96 * MiB)
    check_rss(s, "growth after", after - base, 48 * MiB)


def test_big_replies_end_the_turn(server):
    """batch-max-reply-bytes: once one connection's pipeline has added that many reply bytes
    in a loop turn, the rest of it waits for the next turn, so a pipeline of big reads
    cannot hold every other client for the seconds its replies take to build. Seen through
    the commits: a pipeline of (XRANGE, XADD) pairs shares one commit under the default
    cap and takes a commit per pair when each XRANGE alone passes the cap."""
    c = server.raw()
    for i in range(20):
        c.call("XADD", "big", "*", "f", "x" * 200)          # XRANGE answers ~4.5 kB

    def run():
        before = info_field(c, "persistence", "commits")
        c.send_raw(b"".join(encode_command("XRANGE", "big", "-", "+") +
                            encode_command("XADD", "w", "*", "f", "v") for _ in range(40)))
        for _ in range(40):
            assert len(c.read()) == 20
            assert isinstance(c.read(), bytes)
        return info_field(c, "persistence", "commits") - before
    shared = run()
    assert shared <= 10, "40 pipelined XADDs took %d commits under a 4 MB cap" % shared
    assert c.call("CONFIG", "SET", "batch-max-reply-bytes", "1024") == "OK"
    try:
        split = run()
    finally:
        c.call("CONFIG", "SET", "batch-max-reply-bytes", "4mb")
    assert split >= 40, "40 XADDs, each after a reply over the cap, took %d commits" % split
    assert c.call("XLEN", "w") == 80
    assert c.err("CONFIG", "SET", "batch-max-reply-bytes", "100").startswith("ERR")


@timeout(180)
def test_default_limit_bounds_a_reader_that_never_reads(server):
    """With the default settings, a client that pipelines XRANGEs of 10 MB each (1 GB of
    replies) and never reads is disconnected by the default output limit (hard 256 MB), where
    Redis' default (no limit) would hold every reply; another client is served throughout,
    and echd's resident memory stays far below what the replies would take."""
    s = server.spawn()
    admin = s.raw(timeout=60)
    cobl = admin.call("CONFIG", "GET", "client-output-buffer-limit")[1]
    assert cobl.startswith(b"normal 268435456 67108864 60 "), cobl
    value = "x" * 100000
    for i in range(10):
        admin.pipeline([("XADD", "big", "*", "f", value)] * 10)
    last = "-"
    for _ in range(4):        # page the stream in, so that its pages are in the baseline
        got = admin.call("XRANGE", "big", last, "+", "COUNT", "30")
        last = "(" + got[-1][0].decode()
    base = rss_kb(s)
    slow = RespConn(s.port)
    slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.call("CLIENT", "SETNAME", "slow")
    slow.send_raw(encode_command("XRANGE", "big", "-", "+") * 100)
    # another client is served meanwhile (a turn that builds 256 MB of replies is slow, so
    # no latency is asserted here: test_reader_that_never_reads does that at 4 MB)
    other = s.raw(timeout=120)
    deadline = time.monotonic() + 90
    while "slow" in client_names(other):
        assert other.call("XLEN", "big") == 100
        assert time.monotonic() < deadline, "the reader that never reads is still connected"
        time.sleep(0.01)
    peak = hwm_kb(s)
    assert len(other.call("XRANGE", "big", "-", "+", "COUNT", "5")) == 5
    slow.close()
    disconnections = info_field(admin, "stats", "client_output_buffer_limit_disconnections")
    print("rss kB: baseline %d, peak %d (100 x 10 MB of replies requested)" % (base, peak))
    assert disconnections == 1, disconnections
    # up to 256 MB held in a buffer that doubles as it grows (so briefly the old and the new
    # one): about twice the limit, where the 1 GB requested would take 1.5 GB and more
    check_rss(s, "growth at the peak", peak - base, 640 * MiB)


@timeout(180)
def test_one_reply_over_the_limit(server):
    """One XRANGE and one XREADGROUP whose replies (60 MB each) are far over the hard limit
    (4 MiB): echd stops building each at the limit and closes that client, so its memory
    never holds the whole reply; the XREADGROUP delivers (makes pending) only what it had
    built, and the rest stays new for the group."""
    s = server.spawn("--client-output-buffer-limit", "normal 4mb 0 0")
    admin = s.raw(timeout=60)
    value = "x" * 100000
    for i in range(60):
        admin.pipeline([("XADD", "huge", "*", "f", value)] * 10)
    # page the stream in once (3 MB replies), so that file pages are in the baseline
    last = "-"
    while True:
        got = admin.call("XRANGE", "huge", last, "+", "COUNT", "30")
        if not got:
            break
        last = "(" + got[-1][0].decode()
    admin.call("XGROUP", "CREATE", "huge", "g", "0")
    watch = Watch(s)
    base = rss_kb(s)
    for name, cmd in (("range", ("XRANGE", "huge", "-", "+")),
                      ("group", ("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "huge", ">"))):
        c = RespConn(s.port)
        c.call("CLIENT", "SETNAME", name)
        c.send(*cmd)
        wait_until(lambda: name not in client_names(admin), timeout=30,
                   what="the %s reader to be disconnected" % name)
        c.close()
    # the watcher must have seen echd answer meanwhile (over TLS this can all take < 20 ms)
    wait_until(lambda: watch.pings > 0, timeout=10, what="a PING of the watcher")
    watch.stop()
    print("rss kB: baseline %d, peak %d (two replies of 60 MB asked for, limit 4 MiB)"
          % (base, watch.peak))
    assert info_field(admin, "stats", "client_output_buffer_limit_disconnections") == 2
    check_rss(s, "growth at the peak", watch.peak - base, 32 * MiB)
    # what c1 was given is pending; nothing else was delivered
    pending = admin.call("XPENDING", "huge", "g")[0]
    assert 0 < pending < 60, pending
    new = 0
    while True:
        got = admin.call("XREADGROUP", "GROUP", "g", "c2", "COUNT", "20", "STREAMS", "huge", ">")
        if got is None:
            break
        new += len(got[0][1])
    assert pending + new == 600, (pending, new)
    assert admin.call("XLEN", "huge") == 600


# ---------------------------------------------------------------------------
# slow-loris
# ---------------------------------------------------------------------------

@timeout(60)
def test_slow_loris(server):
    """With timeout 2, a client trickling a request one byte a second is idle: it is closed
    within a few seconds. A client uploading a big argument in steady chunks, one that PINGs
    now and then, and one blocked in XREAD are not."""
    s = server.spawn("--timeout", "2")
    admin = s.raw()
    watch = Watch(s)
    loris = socket.create_connection(("127.0.0.1", s.port))
    loris.settimeout(1.0)
    request = b"*3\r\n$4\r\nXADD\r\n$5\r\nloris\r\n$100\r\n" + b"z" * 100
    blocked = s.raw()
    blocked.call("CLIENT", "SETNAME", "blocked")
    blocked.send("XREAD", "BLOCK", "0", "STREAMS", "wake", "$")
    uploader = socket.create_connection(("127.0.0.1", s.port))
    size = 64 * 1024 * 12
    uploader.sendall(b"*2\r\n$4\r\nECHO\r\n$%d\r\n" % size)
    t0 = time.monotonic()
    closed_at = None
    uploaded = 0
    for i, byte in enumerate(request):
        if time.monotonic() - t0 > 12:
            break
        try:
            loris.sendall(bytes([byte]))
            if loris.recv(64) == b"":
                closed_at = time.monotonic() - t0
                break
        except socket.timeout:
            pass
        except (BrokenPipeError, ConnectionResetError):
            closed_at = time.monotonic() - t0
            break
        if uploaded < size:
            uploader.sendall(b"u" * 65536)
            uploaded += 65536
        assert admin.call("PING") == "PONG"
    loris.close()
    watch.stop()
    print("slow-loris closed after %s s (timeout 2)" % (
        "%.1f" % closed_at if closed_at is not None else "never"))
    assert closed_at is not None, "slow-loris still connected after 12 s with timeout 2"
    assert 1.5 <= closed_at <= 8, closed_at
    # the upload went on past the timeout and completes
    while uploaded < size:
        uploader.sendall(b"u" * 65536)
        uploaded += 65536
    uploader.sendall(b"\r\n")
    up = RespConn.__new__(RespConn)
    up.sock, up.buf, up.pos = uploader, bytearray(), 0
    up.history = []
    uploader.settimeout(10)
    assert up.read_raw() == b"$%d\r\n%s\r\n" % (size, b"u" * size)
    uploader.close()
    names = client_names(admin)
    assert "blocked" in names, names
    assert admin.call("XADD", "wake", "*", "f", "v").count(b"-") == 1
    assert blocked.read()[0][0] == b"wake"
    assert admin.call("EXISTS", "loris") == 0

