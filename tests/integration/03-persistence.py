"""Durability: everything acknowledged survives kill -9 and a restart on the same dir.

echd promises this by default (every write committed and fsynced before its reply). Redis
keeps nothing without persistence, so against Redis these tests run with its AOF and
`appendfsync always`, its equivalent promise: that validates the tests themselves.
"""

import os
import shutil
import signal
import socket
import subprocess
import threading
import time

from echdtest import (Closed, RespConn, RespError, admin_exe, echd_only, fill, free_port,
                      lmdb_only, wait_until)

# Redis: the AOF with an fsync before every reply. echd needs nothing: durable by default.
REDIS_ARGS = ["--appendonly", "yes", "--appendfsync", "always"]
# Node boundaries (for `~` trimming) must survive a restart as well.
SERVER_ARGS = ["--stream-node-max-entries", "10"]
TIMEOUT = 120

META = ("length", "last-generated-id", "max-deleted-entry-id", "entries-added",
        "recorded-first-entry-id", "first-entry", "last-entry")


def snapshot(c, dbs=(0, 1)):
    """Everything observable about the keyspace: per db, key -> (entries, metadata)."""
    out = {}
    for db in dbs:
        c.call("SELECT", str(db))
        keys = sorted(c.call("KEYS", "*"))
        state = {}
        for k in keys:
            info = c.call("XINFO", "STREAM", k)
            d = dict(zip([x.decode() for x in info[0::2]], info[1::2]))
            state[k] = (c.call("XRANGE", k, "-", "+"), {m: d[m] for m in META})
        out[db] = state
    c.call("SELECT", "0")
    return out


def test_entries_survive_sigkill(server):
    c = server.raw()
    acked = []
    for i in range(300):
        r = c.call("XADD", "s%d" % (i % 3), "*", "n", str(i), "payload", "x" * (i % 50))
        acked.append(r)
    c.call("XADD", "explicit", "5-5", "a", "b")
    c.call("XDEL", "s0", acked[0], acked[3])
    c.call("XTRIM", "s1", "MAXLEN", "50")
    c.call("XSETID", "explicit", "9-9", "ENTRIESADDED", "7", "MAXDELETEDID", "6-0")
    c.call("XADD", "gone", "1-1", "f", "v")
    c.call("DEL", "gone")
    c.call("XADD", "before", "1-1", "f", "v")
    c.call("RENAME", "before", "after")
    c.call("XADD", "emptied", "1-1", "f", "v")
    c.call("XDEL", "emptied", "1-1")
    c.call("SELECT", "1")
    c.call("XADD", "s0", "7-7", "db", "one")
    c.call("SELECT", "0")
    before = snapshot(c)
    assert len(before[0]) == 6 and len(before[1]) == 1, before.keys()

    server.restart(kill=signal.SIGKILL)
    c = server.raw()
    after = snapshot(c)
    assert after == before
    assert c.call("DBSIZE") == 6
    # ids keep growing from where they were
    assert c.call("XADD", "explicit", "9-10", "f", "v") == b"9-10"
    last = before[0][b"s2"][1]["last-generated-id"]
    new = c.call("XADD", "s2", "*", "f", "v")
    assert tuple(map(int, new.split(b"-"))) > tuple(map(int, last.split(b"-")))


def test_flush_and_delete_survive_sigkill(server):
    c = server.raw()
    fill(c, "a", 10)
    fill(c, "b", 10)
    c.call("SELECT", "2")
    fill(c, "c", 10)
    assert c.call("FLUSHALL") == "OK"
    c.call("SELECT", "0")
    fill(c, "d", 3)
    c.call("DEL", "d")
    server.restart(kill=signal.SIGKILL)
    c = server.raw()
    assert c.call("DBSIZE") == 0
    c.call("SELECT", "2")
    assert c.call("DBSIZE") == 0


def test_pipelined_burst_then_sigkill(server):
    """A burst pipelined on one connection: every acknowledged entry is there after kill -9,
    and what is there is a prefix of what was sent, each entry whole."""
    n, kill_after = 20000, 3000
    c = server.raw(plain=True)       # a thread sends while this one reads
    payload = b"".join(b"*7\r\n$4\r\nXADD\r\n$5\r\nburst\r\n$%d\r\n%d-1\r\n$1\r\nn\r\n$%d\r\n%d\r\n"
                       b"$4\r\npad8\r\n$8\r\n01234567\r\n"
                       % (len(str(i)) + 2, i, len(str(i)), i) for i in range(1, n + 1))
    sender_error = []

    def send():
        try:
            c.sock.sendall(payload)
        except OSError as e:
            sender_error.append(e)

    t = threading.Thread(target=send, daemon=True)
    t.start()
    acked = 0
    while acked < kill_after:
        r = c.read()
        assert r == b"%d-1" % (acked + 1), (acked, r)
        acked += 1
    server.kill(signal.SIGKILL)
    # replies already on their way were acknowledged too
    try:
        c.sock.settimeout(2)
        while True:
            r = c.read()
            assert r == b"%d-1" % (acked + 1), (acked, r)
            acked += 1
    except (Closed, OSError):
        pass
    t.join(10)
    server.start()
    c = server.raw()
    length = c.call("XLEN", "burst")
    assert acked <= length <= n, (acked, length)
    got = c.call("XRANGE", "burst", "-", "+")
    assert len(got) == length
    for i, (eid, fields) in enumerate(got, 1):
        assert eid == b"%d-1" % i and fields == [b"n", str(i).encode(), b"pad8", b"01234567"], (
            i, eid, fields)


def test_concurrent_writers_then_sigkill(server):
    """Several clients write at once; kill -9; every acknowledged entry of each is there."""
    writers = 4
    acked = [[] for _ in range(writers)]
    stop = threading.Event()
    errors = []

    def writer(w):
        try:
            conn = RespConn(server.port, timeout=10)
        except OSError as e:
            errors.append(e)
            return
        i = 0
        try:
            while not stop.is_set():
                i += 1
                r = conn.call("XADD", "w%d" % w, "%d-1" % i, "i", str(i))
                acked[w].append(r)
        except (Closed, OSError, RespError):
            pass
        finally:
            conn.close()

    threads = [threading.Thread(target=writer, args=(w,), daemon=True) for w in range(writers)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while sum(map(len, acked)) < 2000 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not errors, errors
    server.kill(signal.SIGKILL)
    stop.set()
    for t in threads:
        t.join(10)
    assert all(acked), [len(a) for a in acked]
    server.start()
    c = server.raw()
    for w in range(writers):
        got = c.call("XRANGE", "w%d" % w, "-", "+")
        ids_ = [e[0] for e in got]
        assert ids_[:len(acked[w])] == acked[w], (w, len(acked[w]), len(ids_))
        assert ids_ == [b"%d-1" % i for i in range(1, len(ids_) + 1)]  # no holes


def test_woken_reader_saw_durable_entry(server):
    """A blocked XREAD is woken only by a committed XADD: what the reader got survives
    kill -9 even though the writer never read its own reply."""
    reader = server.raw()
    writer = server.raw()
    reader.send("XREAD", "BLOCK", "10000", "STREAMS", "s", "$")
    check = server.raw()
    wait_until(lambda: b"blocked_clients:1\r\n" in check.call("INFO", "clients"),
               what="reader blocked")
    writer.send("XADD", "s", "42-1", "f", "v")
    assert reader.read() == [[b"s", [[b"42-1", [b"f", b"v"]]]]]
    server.restart(kill=signal.SIGKILL)
    assert server.raw().call("XRANGE", "s", "-", "+") == [[b"42-1", [b"f", b"v"]]]


def test_restart_cycles(server):
    c = server.raw()
    total = 0
    for cycle in range(5):
        for i in range(50):
            total += 1
            c.call("XADD", "cycles", "%d-1" % total, "cycle", str(cycle))
        server.restart(kill=signal.SIGKILL)
        c = server.raw()
        assert c.call("XLEN", "cycles") == total
    assert c.call("XRANGE", "cycles", "-", "+", "COUNT", "1") == [[b"1-1", [b"cycle", b"0"]]]
    info = c.call("XINFO", "STREAM", "cycles")
    assert info[info.index(b"entries-added") + 1] == total


def test_graceful_restart(server):
    c = server.raw()
    fill(c, "s", 100)
    server.restart(kill=signal.SIGTERM)   # records a non-zero exit status as a failure
    assert server.raw().call("XLEN", "s") == 100


def test_node_boundaries_survive_restart(server):
    # stream-node-max-entries is 10 for this module: nodes [1..10] [11..20] [21..25]
    c = server.raw()
    fill(c, "s", 25)
    server.restart(kill=signal.SIGKILL)
    c = server.raw()
    fill(c, "s", 5, start_ms=26)            # completes [21..30]
    fill(c, "s", 3, start_ms=31)            # [31..33]
    assert c.call("XTRIM", "s", "MAXLEN", "~", "12") == 20
    assert c.call("XTRIM", "s", "MAXLEN", "~", "3") == 10
    assert c.call("XLEN", "s") == 3


@echd_only("Redis' everysec may postpone the AOF write() while a background fsync runs, "
           "replying meanwhile, so a killed Redis can lose acknowledged writes")
def test_everysec_survives_process_kill(server):
    """appendfsync everysec may lose the last second on a machine crash, but a killed
    process loses nothing that was acknowledged: only the fsync is deferred."""
    s = server.spawn("--appendfsync", "everysec")
    c = s.raw()
    fill(c, "s", 500)
    s.restart(kill=signal.SIGKILL)
    assert s.raw().call("XLEN", "s") == 500


def persistence_counts(c):
    info = dict(line.split(":", 1) for line in c.call("INFO", "persistence").decode().split("\r\n")
                if ":" in line)
    return int(info["commits"]), int(info["fsyncs"])


@echd_only("INFO persistence commits and fsyncs are echd's")
@lmdb_only("LMDB's two flushes per commit (data pages, then the meta page)")
def test_everysec_does_not_wait_for_the_meta_flush(server):
    """A commit flushes its data pages; the meta page that makes it the current state needs a
    second flush. With always, a lone client's reply waits for both (two flushes per write);
    with everysec it goes after the first, and the meta page is flushed once a second."""
    for mode in ("always", "everysec"):
        s = server.spawn("--appendfsync", mode)
        c = s.raw()
        commits0, fsyncs0 = persistence_counts(c)
        t0 = time.monotonic()
        for i in range(100):
            c.call("XADD", "s", "*", "f", "v")
        elapsed = time.monotonic() - t0
        commits, fsyncs = persistence_counts(c)
        commits -= commits0
        fsyncs -= fsyncs0
        assert commits == 100, (mode, commits)
        if mode == "always":
            assert fsyncs >= 2 * commits, (mode, commits, fsyncs)
        else:
            assert fsyncs <= commits + elapsed + 2, (mode, commits, fsyncs, elapsed)
        # and the meta page does get flushed within a second or so
        time.sleep(1.5)
        _, fsyncs_later = persistence_counts(c)
        if mode == "everysec":
            assert fsyncs_later - fsyncs0 == fsyncs + 1, (fsyncs, fsyncs_later - fsyncs0)
        assert c.call("CONFIG", "RESETSTAT") == "OK"
        assert persistence_counts(c) == (0, 0)
        s.stop()


@echd_only("WAITAOF came with Redis 7.2; the 7.0 oracle lacks it")
def test_waitaof(server):
    """WAITAOF numlocal numreplicas timeout, with Redis 7.4's errors. echd's LMDB environment
    is its append-only file, always on, and with appendfsync always every reply already waits
    for the flush of the writes before it: the local count is 1. Replicas never come, so
    asking for one blocks until the timeout, as WAIT does."""
    c = server.raw()
    assert c.err("WAITAOF", "2", "0", "0") == "ERR value is out of range, value must between 0 and 1"
    assert c.err("WAITAOF", "-1", "0", "0") == "ERR value is out of range, value must between 0 and 1"
    assert c.err("WAITAOF", "x", "0", "0") == "ERR value is not an integer or out of range"
    assert c.err("WAITAOF", "0", "x", "0") == "ERR value is out of range, must be positive"
    assert c.err("WAITAOF", "0", "-1", "0") == "ERR value is out of range, must be positive"
    assert c.err("WAITAOF", "1", "0", "x") == "ERR timeout is not an integer or out of range"
    assert c.err("WAITAOF", "1", "0", "-1") == "ERR timeout is negative"
    assert c.err("WAITAOF", "1", "0") == "ERR wrong number of arguments for 'waitaof' command"
    assert c.pipeline([("XADD", "s", "1-1", "f", "v"), ("WAITAOF", "0", "0", "0")]) == [
        b"1-1", [1, 0]]
    assert c.call("WAITAOF", "1", "0", "0") == [1, 0]
    t0 = time.monotonic()
    assert c.call("WAITAOF", "1", "1", "200") == [1, 0]
    assert time.monotonic() - t0 >= 0.19
    assert c.call("MULTI") == "OK"
    assert c.call("XADD", "s", "2-1", "f", "v") == "QUEUED"
    assert c.call("WAITAOF", "1", "1", "0") == "QUEUED"
    assert c.call("EXEC") == [b"2-1", [1, 0]]        # inside MULTI nothing blocks
    w = server.raw()
    wid = w.call("CLIENT", "ID")
    w.send("WAITAOF", "0", "1", "0")
    wait_until(lambda: b"blocked_clients:1\r\n" in c.call("INFO", "clients"),
               what="WAITAOF blocked")
    assert c.call("CLIENT", "UNBLOCK", str(wid)) == 1
    assert w.read() == [1, 0]


@echd_only("WAITAOF came with Redis 7.2; echd's flush counts are its own")
@lmdb_only("everysec's deferred flush of LMDB's meta page, counted in fsyncs (a commit on "
           "PostgreSQL is durable when it returns: there is no flush to defer)")
def test_waitaof_everysec(server):
    """With everysec a write is acknowledged before its meta page is flushed: WAITAOF 0 says
    so with a local count of 0, and WAITAOF 1 has the flush done at once (not at the next
    second) and answers 1 after it. Inside MULTI it cannot wait, and says 0."""
    s = server.spawn("--appendfsync", "everysec")
    c = s.raw()
    assert c.call("XADD", "s", "1-1", "f", "v") == b"1-1"
    time.sleep(1.5)                                   # the once-a-second flush
    assert c.call("WAITAOF", "0", "0", "0") == [1, 0]
    assert c.pipeline([("XADD", "s", "2-1", "f", "v"), ("WAITAOF", "0", "0", "0")]) == [
        b"2-1", [0, 0]]
    _, fsyncs0 = persistence_counts(c)
    t0 = time.monotonic()
    assert c.call("WAITAOF", "1", "0", "0") == [1, 0]
    assert time.monotonic() - t0 < 0.5
    _, fsyncs = persistence_counts(c)
    assert fsyncs == fsyncs0 + 1, (fsyncs0, fsyncs)
    assert c.call("WAITAOF", "0", "0", "0") == [1, 0]
    # a pipeline's own writes are waited for, in the same turn
    assert c.pipeline([("XADD", "s", "3-1", "f", "v"), ("WAITAOF", "1", "0", "0")]) == [
        b"3-1", [1, 0]]
    assert c.call("WAITAOF", "0", "0", "0") == [1, 0]
    assert c.call("MULTI") == "OK"
    assert c.call("XADD", "s", "4-1", "f", "v") == "QUEUED"
    assert c.call("WAITAOF", "1", "0", "0") == "QUEUED"
    assert c.call("EXEC") == [b"4-1", [0, 0]]
    # another connection's writes are not this one's to wait for
    other = s.raw()
    assert other.call("WAITAOF", "0", "0", "0") == [1, 0]
    s.stop()


@echd_only("echd's lock on its data directory")
def test_second_echd_on_the_same_dir_is_refused(server):
    """LMDB would let two processes write one environment, but blocked readers, WATCH and the
    commit order live in one echd's memory: a second echd on the same dir must not start."""
    s = server.spawn()
    c = s.raw()
    assert c.call("XADD", "s", "1-1", "f", "v") == b"1-1"
    p = subprocess.run([s.exe, "--port", str(free_port()), "--bind", "127.0.0.1", "--dir", s.dir],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=20)
    out = p.stdout.decode(errors="replace")
    assert p.returncode == 1, (p.returncode, out)
    assert "data directory '%s' is in use by another echd (pid %d)" % (s.dir, s.proc.pid) in out, out
    assert c.call("XADD", "s", "2-1", "f", "v") == b"2-1"
    # the lock dies with the process: a restart after kill -9 is not refused
    s.restart(kill=signal.SIGKILL)
    assert s.raw().call("XLEN", "s") == 2


def unix_ping(path):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as u:
        u.settimeout(5)
        u.connect(path)
        u.sendall(b"PING\r\n")
        return u.recv(64)


@echd_only("echd's lock on its data directory")
def test_echd_that_cannot_start_leaves_the_running_ones_files(server):
    """An echd that exits because it could not start (the data directory is locked, the port
    is taken, the unix socket is live) removes neither the unix socket nor the pidfile: they
    are the running echd's. The running one removes its own when it stops."""
    import tempfile
    root = tempfile.mkdtemp(prefix="echd-e2e-files-")
    sock, pidfile = os.path.join(root, "a.sock"), os.path.join(root, "a.pid")
    s = server.spawn("--unixsocket", sock, "--pidfile", pidfile)
    pid = s.proc.pid
    assert unix_ping(sock) == b"+PONG\r\n"
    other_dir = os.path.join(root, "other")
    cases = [  # (why it cannot start, its data dir, its port)
        ("in use by another echd", s.dir, free_port()),
        ("failed listening on 127.0.0.1 port %d" % s.port, other_dir, s.port),
        ("unixsocket %s is in use by another process" % sock, other_dir, free_port()),
    ]
    for why, d, port in cases:
        p = subprocess.run([s.exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
                            "--unixsocket", sock, "--pidfile", pidfile],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=20)
        out = p.stdout.decode(errors="replace")
        assert p.returncode == 1 and why in out, (why, p.returncode, out)
        with open(pidfile) as f:
            assert f.read() == "%d\n" % pid, why
        assert unix_ping(sock) == b"+PONG\r\n", why
    # a file at the socket's path that is no socket is not deleted to make room
    with open(os.path.join(root, "plain"), "w") as f:
        f.write("keep")
    p = subprocess.run([s.exe, "--port", str(free_port()), "--bind", "127.0.0.1", "--dir",
                        other_dir, "--unixsocket", os.path.join(root, "plain")],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=20)
    assert p.returncode == 1 and b"is not a socket" in p.stdout, p.stdout
    with open(os.path.join(root, "plain")) as f:
        assert f.read() == "keep"
    # the echd that made them removes them when it stops
    assert s.stop() == 0
    assert not os.path.exists(sock) and not os.path.exists(pidfile)
    # a socket left by a killed echd is stale: the next one takes the path over
    s.start()
    s.kill()
    assert os.path.exists(sock)
    s.start()
    assert unix_ping(sock) == b"+PONG\r\n"
    s.stop()
    shutil.rmtree(root, ignore_errors=True)


def start_fails(exe, d):
    """Starts echd on dir d, expecting it to refuse: returns its output."""
    p = subprocess.run([exe, "--port", str(free_port()), "--bind", "127.0.0.1", "--dir", d],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=20)
    out = p.stdout.decode(errors="replace")
    assert p.returncode == 1, (p.returncode, out)  # not -SIGBUS
    assert "cannot open storage 'lmdb' in '%s': stored data is corrupt" % d in out, out
    return out


def check_fails(exe, d):
    p = subprocess.run([admin_exe(exe), "check", d], capture_output=True, text=True,
                       timeout=20)
    assert p.returncode == 3, (p.returncode, p.stdout, p.stderr)  # cannot open, no SIGBUS
    assert "cannot open %s read-only: stored data is corrupt" % d in p.stderr, p.stderr
    return p.stderr


@echd_only("echd's data file")
@lmdb_only("LMDB's data.mdb cut short or emptied")
def test_truncated_or_emptied_data_file_is_refused(server):
    """A data.mdb shorter than its pages (a copy cut short) is refused at start, by echd and
    by echo-admin, instead of killing them with SIGBUS at the first page past its end; one
    cut to exactly its pages (the zeroes written ahead gone) is whole. An emptied data.mdb
    (0 bytes) is refused rather than opened as an empty broker: a new directory has none."""
    s = server.spawn()
    c = s.raw()
    for i in range(30):
        c.call("XADD", "big", "*", "v", "x" * 100000)
    used = int([l for l in c.call("INFO", "storage").decode().split("\r\n")
                if l.startswith("storage_used_bytes:")][0].split(":")[1])
    assert s.stop() == 0
    data = os.path.join(s.dir, "data.mdb")
    whole = data + ".whole"
    shutil.copyfile(data, whole)
    assert os.path.getsize(data) > used > 3000000
    for size in (1000000, used - 1):
        os.truncate(data, size)
        out = start_fails(s.exe, s.dir)
        assert "data.mdb is %d bytes, but its pages reach %d bytes" % (size, used) in out, out
        assert "cut short" in check_fails(s.exe, s.dir)
        shutil.copyfile(whole, data)
    os.truncate(data, used)
    s.start()
    assert s.raw().call("XLEN", "big") == 30
    assert s.stop() == 0
    # a small one: one entry, cut into its second page
    small = server.spawn()
    assert small.raw().call("XADD", "s", "1-1", "f", "v") == b"1-1"
    assert small.stop() == 0
    os.truncate(os.path.join(small.dir, "data.mdb"), 5000)
    assert "cut short" in start_fails(small.exe, small.dir)
    assert "cut short" in check_fails(small.exe, small.dir)
    # emptied: refused, with how to start afresh; which then works
    with open(data, "w"):
        pass
    out = start_fails(s.exe, s.dir)
    assert "data.mdb is empty (0 bytes)" in out and "remove data.mdb and lock.mdb" in out, out
    assert "is empty (0 bytes)" in check_fails(s.exe, s.dir)
    os.unlink(whole)
    os.unlink(data)
    os.unlink(os.path.join(s.dir, "lock.mdb"))
    s.start()
    assert s.raw().call("DBSIZE") == 0


def break_a_leaf(path, psize, needle):
    """Clears the flags of a leaf page in the middle of those holding `needle`: LMDB then
    meets a page that is no leaf where a cursor moves to the next one."""
    with open(path, "r+b") as f:
        data = f.read()
        leaves = [pg for pg in range(2, len(data) // psize)
                  if int.from_bytes(data[pg * psize:pg * psize + 8], "little") == pg
                  and data[pg * psize + 10] & 0x02 and needle in data[pg * psize:(pg + 1) * psize]]
        assert len(leaves) >= 3, leaves
        f.seek(leaves[len(leaves) // 2] * psize + 10)
        f.write(b"\0\0")


@echd_only("echd's data file")
@lmdb_only("a corrupt page of LMDB's data.mdb")
def test_corrupt_page_fails_the_command_not_the_server(server):
    """A corrupt page inside data.mdb passes the start; a command whose read meets it gets
    the corruption error (LMDB's assertion is turned into an error), and echd goes on
    serving everything else."""
    s = server.spawn()
    c = s.raw()
    for i in range(200):
        c.call("XADD", "s", "*", "v", "needle-" + "y" * 400)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XADD", "other", "1-1", "f", "v")
    psize = int([l for l in c.call("INFO", "storage").decode().split("\r\n")
                 if l.startswith("storage_page_size:")][0].split(":")[1])
    assert s.stop() == 0
    break_a_leaf(os.path.join(s.dir, "data.mdb"), psize, b"needle-")
    s.start()
    c = s.raw()
    corrupt = RespError("ERR storage error: stored data is corrupt")
    for cmd in [("XRANGE", "s", "-", "+"), ("XREVRANGE", "s", "+", "-"),
                ("XINFO", "STREAM", "s", "FULL", "COUNT", "0"),
                ("XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", ">")]:
        assert c.err(*cmd) == corrupt.msg, cmd
        assert c.call("PING") == "PONG"
    assert c.call("XLEN", "s") == 200
    assert c.call("XRANGE", "other", "-", "+") == [[b"1-1", [b"f", b"v"]]]
    assert c.call("XADD", "other", "2-1", "f", "v") == b"2-1"
    assert "Assertion" in s.log_tail(20) and "the data file is corrupt" in s.log_tail(20)
    assert s.stop() == 0
    # echo-admin check meets it too, and says so rather than dying of SIGABRT
    p = subprocess.run([admin_exe(s.exe), "check", s.dir], capture_output=True, text=True,
                       timeout=20)
    assert p.returncode == 5 and "check stopped: stored data is corrupt" in p.stderr, \
        (p.returncode, p.stderr)


def empty_the_branches(path, psize):
    """Sets the key count of every branch page to 0 (mp_lower to the header's end): a
    search through one meets LMDB's assertion that a branch holds at least two keys."""
    with open(path, "r+b") as f:
        data = f.read()
        branches = [pg for pg in range(2, len(data) // psize)
                    if int.from_bytes(data[pg * psize:pg * psize + 8], "little") == pg
                    and data[pg * psize + 10] & 0x01]
        assert branches
        for pg in branches:
            f.seek(pg * psize + 12)
            f.write((16).to_bytes(2, "little"))


@echd_only("echd's data file")
@lmdb_only("a corrupt page of LMDB's data.mdb")
def test_corrupt_page_fails_a_write_not_the_server(server):
    """A write whose LMDB put or delete must search through a corrupt page gets the
    corruption error instead of aborting the process; its batch applies nothing, and echd
    goes on serving what the corruption does not reach (here every entry is under the
    broken branch, the streams' metadata and groups are not)."""
    s = server.spawn()
    c = s.raw()
    ids = [c.call("XADD", "s", "*", "v", "needle-" + "y" * 400) for i in range(200)]
    c.call("XADD", "other", "1-1", "f", "v")
    psize = int([l for l in c.call("INFO", "storage").decode().split("\r\n")
                 if l.startswith("storage_page_size:")][0].split(":")[1])
    assert s.stop() == 0
    empty_the_branches(os.path.join(s.dir, "data.mdb"), psize)
    s.start()
    c = s.raw()
    corrupt = "ERR storage error: stored data is corrupt"
    for cmd in [("XDEL", "s", ids[100]), ("XADD", "s", "*", "v", "more"),
                ("XDEL", "s", ids[0], ids[199])]:
        assert c.err(*cmd) == corrupt, cmd
        assert c.call("PING") == "PONG"
    assert c.call("XLEN", "s") == 200
    assert c.call("XLEN", "other") == 1
    assert c.call("XGROUP", "CREATE", "other", "g", "$") == "OK"
    assert c.call("XINFO", "GROUPS", "other")[0][1] == b"g"
    assert "Assertion" in s.log_tail(20) and "the data file is corrupt" in s.log_tail(20)
    assert s.stop() == 0


@echd_only("INFO persistence meta_flush_waits is echd's")
def test_lone_writer_beside_idle_connections_does_not_wait(server):
    """With appendfsync always a reply may wait flush-wait-us for the next commit, whose flush
    would make it durable for free. That pays off only when other clients are about to send:
    a lone writer beside idle connections (a connection pool) gets its commit flushed at once,
    and the wait is kept for when other clients were just answered."""
    s = server.spawn("--flush-wait-us", "20000")
    idle = [s.raw() for _ in range(10)]
    for c in idle:
        assert c.call("PING") == "PONG"
    c = s.raw()

    def waits():
        info = c.call("INFO", "persistence").decode()
        return int(info.split("meta_flush_waits:")[1].split()[0])
    w0 = waits()
    t0 = time.monotonic()
    for i in range(50):
        c.call("XADD", "s", "*", "f", "v")
    elapsed = time.monotonic() - t0
    assert waits() == w0, (waits(), w0)
    # 50 waits of 20 ms would take a second at least
    print("50 XADDs beside 10 idle connections in %.3f s" % elapsed)
