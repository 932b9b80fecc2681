"""Group policies (echd's own extension, issue 26): XGROUP SETPOLICY.

ACKWAIT and BACKOFF hand an unacknowledged entry again to the next XREADGROUP '>' of any
consumer, before new entries, in the plain reply shape; MAXDELIVER with DEADLETTER moves an
entry past its last delivery to the dead-letter stream with the ack and the count in one
transaction (from the read or from a timer); MAXACKPENDING bounds what a group has in flight.
Timings are asserted as ordering and lower bounds only.
"""

import signal
import threading
import time

from echdtest import lmdb_only

TIMEOUT = 60
# run.py -j: alone, since back-offs and deadlines are measured in time
SERIAL = True
ECHD_ONLY = "echd's own extension: Redis has no group policies"

SYNTAX = "ERR syntax error"


def info_groups(c, key="s"):
    out = []
    for g in c.call("XINFO", "GROUPS", key):
        out.append({k.decode(): v for k, v in zip(g[0::2], g[1::2])})
    return out


def kv(flat):
    return {k.decode(): v for k, v in zip(flat[0::2], flat[1::2])}


def ids(reply):
    """The ids of an XREADGROUP reply on one stream (or [] for nil)."""
    if reply is None:
        return []
    return [e[0].decode() for e in reply[0][1]]


def read(c, consumer, count=None, key="s", grp="g", block=None):
    args = ["XREADGROUP", "GROUP", grp, consumer]
    if count is not None:
        args += ["COUNT", str(count)]
    if block is not None:
        args += ["BLOCK", str(block)]
    return c.call(*(args + ["STREAMS", key, ">"]))


def counts(c, key="s", grp="g"):
    return {r[0].decode(): (r[1].decode(), r[3])
            for r in c.call("XPENDING", key, grp, "-", "+", "1000")}


def wait_for(pred, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    return pred()


def test_setpolicy_and_xinfo(server):
    """SETPOLICY keeps what it is not given, RESET clears, 0 turns one off; XINFO shows it."""
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    assert c.call("XGROUP", "CREATE", "s", "g", "0") == "OK"
    assert c.call("XGROUP", "CREATE", "s", "plain", "0") == "OK"
    # no policy: the six fields of Redis only
    assert len(info_groups(c)[1]) == 6
    assert c.call("XGROUP", "SETPOLICY", "s", "g", "ACKWAIT", "5000", "MAXDELIVER", "3") == "OK"
    assert c.call("XGROUP", "SETPOLICY", "s", "g", "DEADLETTER", "dead",
                  "MAXACKPENDING", "10") == "OK"
    g = info_groups(c)[0]
    assert list(g)[6:] == ["ack-wait", "max-deliver", "dead-letter", "max-ack-pending",
                           "dead-lettered"]
    assert (g["ack-wait"], g["max-deliver"], g["dead-letter"], g["max-ack-pending"],
            g["dead-lettered"]) == (5000, 3, b"dead", 10, 0)
    assert len(info_groups(c)[1]) == 6  # the other group has none
    assert c.call("XGROUP", "SETPOLICY", "s", "g", "MAXDELIVER", "0") == "OK"
    assert info_groups(c)[0]["max-deliver"] == 0
    assert info_groups(c)[0]["ack-wait"] == 5000
    assert c.call("XGROUP", "SETPOLICY", "s", "g", "RESET", "ACKWAIT", "7") == "OK"
    g = info_groups(c)[0]
    assert (g["ack-wait"], g["dead-letter"], g["max-ack-pending"]) == (7, None, 0)
    assert c.call("XGROUP", "SETPOLICY", "s", "g", "RESET") == "OK"
    assert len(info_groups(c)[0]) == 6
    help_lines = [l.decode() if isinstance(l, bytes) else l for l in c.call("XGROUP", "HELP")]
    assert any(l.startswith("SETPOLICY") for l in help_lines)


def test_setpolicy_errors(server):
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    assert c.err("XGROUP", "SETPOLICY", "s", "nog", "ACKWAIT", "1") == \
        "NOGROUP No such consumer group 'nog' for key name 's'"
    assert c.err("XGROUP", "SETPOLICY", "nokey", "g", "ACKWAIT", "1").startswith(
        "ERR The XGROUP subcommand requires the key to exist")
    assert c.err("XGROUP", "SETPOLICY", "s", "g", "ACKWAIT", "-1") == \
        "ERR value for ACKWAIT must be a non-negative integer"
    assert c.err("XGROUP", "SETPOLICY", "s", "g", "MAXDELIVER", "x") == \
        "ERR value for MAXDELIVER must be a non-negative integer"
    assert c.err("XGROUP", "SETPOLICY", "s", "g", "MAXACKPENDING", "1.5") == \
        "ERR value for MAXACKPENDING must be a non-negative integer"
    assert c.err("XGROUP", "SETPOLICY", "s", "g", "DEADLETTER", "s") == \
        "ERR DEADLETTER key must not be the stream itself"
    assert c.err("XGROUP", "SETPOLICY", "s", "g", "BACKOFF", "2", "10") == SYNTAX
    assert c.err("XGROUP", "SETPOLICY", "s", "g", "BACKOFF", "1", "0") == \
        "ERR BACKOFF values must be positive"
    assert c.err("XGROUP", "SETPOLICY", "s", "g", "BACKOFF", "33", *(["1"] * 33)) == \
        "ERR BACKOFF takes at most 32 values"
    assert c.err("XGROUP", "SETPOLICY", "s", "g", "ACKWAIT") == SYNTAX
    assert c.err("XGROUP", "SETPOLICY", "s", "g", "BOGUS", "1") == SYNTAX
    assert c.err("XGROUP", "SETPOLICY", "s") == \
        "ERR wrong number of arguments for 'xgroup|setpolicy' command"
    # nothing was set by the failures
    assert len(info_groups(c)[0]) == 6


def test_ackwait_redelivers_before_new(server):
    """An entry not acked within ACKWAIT goes to the next '>' reader, first, plain shape."""
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "a")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XGROUP", "SETPOLICY", "s", "g", "ACKWAIT", "200")
    t0 = time.time()
    assert ids(read(c, "c1")) == ["1-1"]
    c.call("XADD", "s", "2-1", "f", "b")
    # before the deadline: only the new entry
    assert ids(read(c, "c2", count=1)) == ["2-1"]
    got = wait_for(lambda: read(c, "c2", count=1))
    assert time.time() - t0 >= 0.2
    assert got == [[b"s", [[b"1-1", [b"f", b"a"]]]]]  # plain (id, fields)
    pend = counts(c)
    assert pend["1-1"] == ("c2", 2)
    c.call("XACK", "s", "g", "1-1", "2-1")
    assert c.call("XPENDING", "s", "g")[0] == 0


def test_blocked_reader_wakes_at_deadline(server):
    """A reader blocked in XREADGROUP '>' BLOCK wakes when a deadline passes."""
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "a")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XGROUP", "SETPOLICY", "s", "g", "ACKWAIT", "300")
    t0 = time.time()
    assert ids(read(c, "c1")) == ["1-1"]
    b = server.raw()
    got = read(b, "c2", block=10000)
    dt = time.time() - t0
    assert ids(got) == ["1-1"]
    assert 0.3 <= dt < 8
    assert counts(c)["1-1"] == ("c2", 2)


def test_backoff_order_and_bounds(server):
    """BACKOFF: the n-th delivery waits the n-th value, the last repeating."""
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "a")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XGROUP", "SETPOLICY", "s", "g", "BACKOFF", "3", "100", "300", "600")
    # Delivery n happens after read n was sent, and its reply arrives some time later (a
    # commit, a flush): so read n+1's reply arrives at least the back-off after read n was
    # sent, whatever the reply latency; gaps between arrivals alone would shrink by it.
    sent, got = [], []
    t0 = time.time()
    sent.append(time.time())
    assert ids(read(c, "w")) == ["1-1"]
    got.append(time.time())
    b = server.raw()
    for _ in range(4):
        sent.append(time.time())
        assert ids(read(b, "w", block=10000)) == ["1-1"]
        got.append(time.time())
    waits = [g - s for s, g in zip(sent, got[1:])]
    for wait, low in zip(waits, [0.1, 0.3, 0.6, 0.6]):
        assert wait >= low * 0.95, (waits, low)
    gaps = [b - a for a, b in zip(got, got[1:])]
    assert gaps[1] > gaps[0] and gaps[2] > gaps[0], gaps
    assert counts(c)["1-1"] == ("w", 5)
    assert time.time() - t0 < 30


def test_maxdeliver_deadletter_from_read(server):
    """Past MAXDELIVER the entry goes to DEADLETTER with the record of the issue."""
    c = server.raw()
    c.call("XADD", "s", "1-1", "job", "poison", "n", "7")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XGROUP", "SETPOLICY", "s", "g", "ACKWAIT", "100", "MAXDELIVER", "2",
           "DEADLETTER", "dlq")
    assert ids(read(c, "w1")) == ["1-1"]
    assert ids(wait_for(lambda: read(c, "w2"))) == ["1-1"]
    # the second delivery was the last: once its deadline passes it is dead-lettered
    dl = wait_for(lambda: c.call("XRANGE", "dlq", "-", "+"))
    assert len(dl) == 1
    assert kv(dl[0][1]) == {"stream": b"s", "id": b"1-1", "group": b"g", "consumer": b"w2",
                            "deliveries": b"2", "reason": b"maxdeliver", "job": b"poison",
                            "n": b"7"}
    assert [f.decode() for f in dl[0][1][0::2]] == [
        "stream", "id", "group", "consumer", "deliveries", "reason", "job", "n"]
    assert c.call("XPENDING", "s", "g")[0] == 0
    assert info_groups(c)[0]["dead-lettered"] == 1
    assert read(c, "w3") is None


def test_deadletter_timer_without_reader(server):
    """The timer dead-letters when the deadline passes, with nobody reading."""
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XGROUP", "SETPOLICY", "s", "g", "ACKWAIT", "150", "MAXDELIVER", "1",
           "DEADLETTER", "dlq")
    t0 = time.time()
    assert ids(read(c, "w1")) == ["1-1"]
    dl = wait_for(lambda: c.call("XRANGE", "dlq", "-", "+"))
    assert time.time() - t0 >= 0.15
    assert kv(dl[0][1])["reason"] == b"maxdeliver"
    assert kv(dl[0][1])["consumer"] == b"w1"
    assert c.call("XPENDING", "s", "g")[0] == 0
    g = info_groups(c)[0]
    assert g["dead-lettered"] == 1 and g["pending"] == 0


def test_deadletter_deleted_entry(server):
    """A deleted entry's record has the reason and no original fields."""
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XGROUP", "SETPOLICY", "s", "g", "ACKWAIT", "100", "MAXDELIVER", "1",
           "DEADLETTER", "dlq")
    assert ids(read(c, "w1")) == ["1-1"]
    assert c.call("XDEL", "s", "1-1") == 1
    dl = wait_for(lambda: c.call("XRANGE", "dlq", "-", "+"))
    assert list(kv(dl[0][1])) == ["stream", "id", "group", "consumer", "deliveries", "reason"]


def test_maxdeliver_without_deadletter_acks(server):
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XGROUP", "SETPOLICY", "s", "g", "ACKWAIT", "100", "MAXDELIVER", "1")
    assert ids(read(c, "w1")) == ["1-1"]
    assert wait_for(lambda: info_groups(c)[0]["dead-lettered"] == 1)
    assert c.call("XPENDING", "s", "g")[0] == 0
    assert c.call("EXISTS", "dlq") == 0


def test_maxackpending_limits_reads(server):
    c = server.raw()
    for i in range(1, 11):
        c.call("XADD", "s", "%d-1" % i, "f", "v")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XGROUP", "SETPOLICY", "s", "g", "MAXACKPENDING", "3")
    assert ids(read(c, "a", count=2)) == ["1-1", "2-1"]
    assert ids(read(c, "b", count=5)) == ["3-1"]
    assert read(c, "b") is None
    # a blocked reader wakes when an ack makes room
    b = server.raw()
    b.send("XREADGROUP", "GROUP", "g", "b", "BLOCK", "10000", "STREAMS", "s", ">")
    time.sleep(0.1)
    c.call("XACK", "s", "g", "1-1")
    assert ids(b.read()) == ["4-1"]
    assert c.call("XPENDING", "s", "g")[0] == 3


def test_maxackpending_room_from_xackdel(server):
    """XACKDEL acknowledges as XACK does: a reader blocked for room wakes, also when the
    entry itself stays (ACKED keeps what another group has not been given)."""
    c = server.raw()
    for i in range(1, 4):
        c.call("XADD", "s", "%d-1" % i, "f", "v")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XGROUP", "CREATE", "s", "other", "0")
    c.call("XGROUP", "SETPOLICY", "s", "g", "MAXACKPENDING", "1")
    assert ids(read(c, "a")) == ["1-1"]
    b = server.raw()
    b.send("XREADGROUP", "GROUP", "g", "b", "BLOCK", "10000", "STREAMS", "s", ">")
    time.sleep(0.1)
    assert c.call("XACKDEL", "s", "g", "ACKED", "IDS", "1", "1-1") == [2]
    assert ids(b.read()) == ["2-1"]
    assert c.call("XLEN", "s") == 3


def test_maxackpending_concurrent(server):
    """50 consumers reading and acking at once never hold more than the limit."""
    c = server.raw()
    limit = 5
    for i in range(1, 301):
        c.call("XADD", "s", "%d-1" % i, "f", "v")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XGROUP", "SETPOLICY", "s", "g", "MAXACKPENDING", str(limit))
    seen = []
    over = []
    lock = threading.Lock()
    held = [0]

    def worker(k):
        w = server.raw()
        while True:
            got = ids(read(w, "w%d" % k, count=2, block=500))
            if not got:
                return
            with lock:
                held[0] += len(got)
                if held[0] > limit:
                    over.append(held[0])
                seen.extend(got)
            with lock:
                held[0] -= len(got)
            w.call("XACK", "s", "g", *got)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(50)]
    for t in ts:
        t.start()
    mon = server.raw()
    peak = 0
    while any(t.is_alive() for t in ts):
        peak = max(peak, mon.call("XPENDING", "s", "g")[0])
        time.sleep(0.005)
    for t in ts:
        t.join()
    assert peak <= limit
    assert not over
    assert sorted(seen, key=lambda s: int(s.split("-")[0])) == ["%d-1" % i for i in range(1, 301)]


def test_restart_keeps_policy_and_deadlines(server):
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XGROUP", "SETPOLICY", "s", "g", "ACKWAIT", "400", "MAXDELIVER", "1",
           "DEADLETTER", "dlq", "MAXACKPENDING", "9")
    assert ids(read(c, "w1")) == ["1-1"]
    server.restart(kill=signal.SIGKILL)
    c = server.raw()
    g = info_groups(c)[0]
    assert (g["ack-wait"], g["max-deliver"], g["dead-letter"], g["max-ack-pending"]) == \
        (400, 1, b"dlq", 9)
    # the deadline survives: the timer dead-letters after the restart
    dl = wait_for(lambda: c.call("XRANGE", "dlq", "-", "+"))
    assert kv(dl[0][1])["id"] == b"1-1"
    assert c.call("XPENDING", "s", "g")[0] == 0


def test_copy_rename_keep_policy(server):
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XGROUP", "SETPOLICY", "s", "g", "ACKWAIT", "1234", "DEADLETTER", "dlq")
    assert c.call("COPY", "s", "s2") == 1
    assert c.call("RENAME", "s", "s3") == "OK"
    for k in ("s2", "s3"):
        g = info_groups(c, k)[0]
        assert (g["ack-wait"], g["dead-letter"]) == (1234, b"dlq")


def test_xnack_fatal_deadletters(server):
    """XNACK FATAL in a group with DEADLETTER: to the dead-letter stream at once."""
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    c.call("XADD", "s", "2-1", "f", "w")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XGROUP", "SETPOLICY", "s", "g", "DEADLETTER", "dlq")
    assert ids(read(c, "w1")) == ["1-1", "2-1"]
    assert c.call("XNACK", "s", "g", "FATAL", "IDS", "1", "1-1") == 1
    dl = c.call("XRANGE", "dlq", "-", "+")
    assert kv(dl[0][1]) == {"stream": b"s", "id": b"1-1", "group": b"g", "consumer": b"w1",
                            "deliveries": b"1", "reason": b"fatal", "f": b"v"}
    assert list(counts(c)) == ["2-1"]
    assert info_groups(c)[0]["dead-lettered"] == 1
    # FAIL still releases
    assert c.call("XNACK", "s", "g", "FAIL", "IDS", "1", "2-1") == 1
    assert counts(c) == {"2-1": ("", 1)}


def test_xnack_delay(server):
    """XNACK DELAY: no one takes the entry before the delay; XPENDING shows it released."""
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    assert ids(read(c, "w1")) == ["1-1"]
    assert c.err("XNACK", "s", "g", "FAIL", "IDS", "1", "1-1", "DELAY", "-5") == \
        "ERR Invalid DELAY option argument for XNACK"
    t0 = time.time()
    assert c.call("XNACK", "s", "g", "FAIL", "IDS", "1", "1-1", "DELAY", "400") == 1
    assert c.call("XPENDING", "s", "g", "-", "+", "10") == [[b"1-1", b"", -1, 1]]
    assert c.call("XAUTOCLAIM", "s", "g", "w2", "0", "0")[1] == []
    assert c.call("XCLAIM", "s", "g", "w2", "0", "1-1") == []
    got = c.call("XREADGROUP", "GROUP", "g", "w2", "CLAIM", "0", "BLOCK", "5000",
                 "STREAMS", "s", ">")
    assert time.time() - t0 >= 0.4
    assert got[0][1][0][0] == b"1-1"


def test_xnack_delay_with_ackwait(server):
    """In a group with ACKWAIT a delayed entry comes back to '>' readers after the delay."""
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XGROUP", "SETPOLICY", "s", "g", "ACKWAIT", "60000")
    assert ids(read(c, "w1")) == ["1-1"]
    t0 = time.time()
    assert c.call("XNACK", "s", "g", "FAIL", "IDS", "1", "1-1", "DELAY", "300") == 1
    assert read(c, "w2") is None
    b = server.raw()
    assert ids(read(b, "w2", block=5000)) == ["1-1"]
    assert time.time() - t0 >= 0.3
    assert counts(c)["1-1"] == ("w2", 2)
    # without a delay: at once
    assert c.call("XNACK", "s", "g", "FAIL", "IDS", "1", "1-1") == 1
    assert ids(read(c, "w3")) == ["1-1"]


def test_admin_shows_policy(server):
    """echo-admin groups --json shows the policy, live and offline; check accepts it and a
    delayed release."""
    import json
    import subprocess
    from echdtest import admin_exe
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    c.call("XADD", "s", "2-1", "f", "v")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XGROUP", "CREATE", "s", "plain", "0")
    c.call("XGROUP", "SETPOLICY", "s", "g", "ACKWAIT", "60000", "MAXDELIVER", "4",
           "DEADLETTER", "dlq", "MAXACKPENDING", "8", "BACKOFF", "2", "100", "200")
    assert ids(read(c, "w")) == ["1-1", "2-1"]
    assert c.call("XNACK", "s", "g", "FAIL", "IDS", "1", "2-1", "DELAY", "3600000") == 1
    env = {"NO_COLOR": "1", "PATH": "/usr/bin:/bin"}
    for where in (["-p", str(server.port)], server.offline_args()):
        p = subprocess.run([admin_exe(server.exe)] + where + ["--json", "groups", "s"],
                           capture_output=True, text=True, timeout=60, env=env)
        assert p.returncode == 0, p.stderr
        groups = {g["name"]: g for g in json.loads(p.stdout)["groups"]}
        assert groups["g"]["policy"] == {"ack_wait_ms": 60000, "max_deliver": 4,
                                         "dead_letter": "dlq", "max_ack_pending": 8,
                                         "dead_lettered": 0}, where
        assert "policy" not in groups["plain"]
    # and check takes the policy rows as valid (its dir, or its schema on PostgreSQL)
    bad = server.check_data(timeout=60)
    assert bad is None, bad


def test_rename_move_copy_keep_deadlines(server):
    """A policy group's timer follows its stream through RENAME, MOVE and COPY."""
    c = server.raw()
    # ACKWAIT long enough that the three moves below come first, even under ASan on a
    # loaded machine (at 200 ms 'a' was once dead-lettered before its RENAME)
    for k in ("a", "b", "c"):
        c.call("XADD", k, "1-1", "f", k)
        c.call("XGROUP", "CREATE", k, "g", "0")
        c.call("XGROUP", "SETPOLICY", k, "g", "ACKWAIT", "2000", "MAXDELIVER", "1",
               "DEADLETTER", "dlq")
        assert ids(read(c, "w", key=k)) == ["1-1"]
    assert c.call("RENAME", "a", "a2") == "OK"
    assert c.call("MOVE", "b", "1") == 1
    assert c.call("COPY", "c", "c2") == 1
    # the timer dead-letters every group's entry (three here, one in db 1), nobody reading
    assert wait_for(lambda: len(c.call("XRANGE", "dlq", "-", "+")) == 3)
    streams = sorted(kv(f)["stream"] for _, f in c.call("XRANGE", "dlq", "-", "+"))
    assert streams == [b"a2", b"c", b"c2"]
    c.call("SELECT", "1")
    assert wait_for(lambda: c.call("EXISTS", "dlq") == 1)
    assert kv(c.call("XRANGE", "dlq", "-", "+")[0][1])["stream"] == b"b"


def test_redelivery_within_maxcount(server):
    """Redeliveries count against XREADGROUP's MAXCOUNT like new entries."""
    c = server.raw()
    for i in (1, 2, 3):
        c.call("XADD", "s", "%d-1" % i, "f", "v")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XGROUP", "SETPOLICY", "s", "g", "ACKWAIT", "100")
    assert ids(read(c, "w1")) == ["1-1", "2-1", "3-1"]
    c.call("XADD", "s", "4-1", "f", "v")
    time.sleep(0.2)
    got = c.call("XREADGROUP", "GROUP", "g", "w2", "MAXCOUNT", "2", "STREAMS", "s", ">")
    assert ids(got) == ["1-1", "2-1"]
    assert ids(read(c, "w2")) == ["3-1", "4-1"]


# ---------------------------------------------------------------------------
# issue 35: due rows by deadline, the timer's cap, restarts
# ---------------------------------------------------------------------------

def info_stat(c, name):
    for line in c.call("INFO", "stats").decode().split("\r\n"):
        if line.startswith(name + ":"):
            return int(line.split(":", 1)[1])
    raise AssertionError("INFO stats has no " + name)


def fill_pending(c, key, n, grp="g"):
    """n entries 1-1 .. n-1 on key, and grp created at 0."""
    for lo in range(1, n + 1, 5000):
        c.pipeline([("XADD", key, "%d-1" % i, "f", "v")
                    for i in range(lo, min(n, lo + 4999) + 1)])
    c.call("XGROUP", "CREATE", key, grp, "0")


def deliver_all(c, key, n, grp="g", consumer="w"):
    got = 0
    while got < n:
        got += len(ids(c.call("XREADGROUP", "GROUP", grp, consumer, "COUNT", "5000",
                              "STREAMS", key, ">")))
    assert got == n


def test_deadletter_turns_capped(server):
    """Issue 35 (10d): the timer dead-letters at most policy-batch-rows entries a loop turn,
    the rest in the next turns, of every group, till all are done, in deadline then id
    order."""
    s = server.spawn("--policy-batch-rows", "100")
    c = s.raw()
    assert c.call("CONFIG", "GET", "policy-batch-rows") == [b"policy-batch-rows", b"100"]
    n = {"a": 1500, "b": 700}
    for k in n:
        fill_pending(c, k, n[k])
        c.call("XGROUP", "SETPOLICY", k, "g", "ACKWAIT", "100", "MAXDELIVER", "1",
               "DEADLETTER", "dlq")
    for k in n:
        deliver_all(c, k, n[k])
    assert wait_for(lambda: c.call("XLEN", "dlq") == sum(n.values()), timeout=30)
    # never more than the cap in one turn, and the cap was reached: several turns
    assert info_stat(c, "policy_turn_rows_max") == 100
    assert info_stat(c, "policy_dead_lettered") == sum(n.values())
    for k in n:
        assert c.call("XPENDING", k, "g")[0] == 0
        assert info_groups(c, k)[0]["dead-lettered"] == n[k]
        got = [kv(f)["id"].decode() for _, f in c.call("XRANGE", "dlq", "-", "+")
               if kv(f)["stream"] == k.encode()]
        assert got == ["%d-1" % i for i in range(1, n[k] + 1)]
    assert c.err("CONFIG", "SET", "policy-batch-rows", "0").startswith("ERR")
    assert c.call("CONFIG", "SET", "policy-batch-rows", "5000") == "OK"


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def test_due_reads_do_not_walk_the_pel(server):
    """Issue 35 (8): XREADGROUP COUNT 10 '>' that redelivers due entries of a group with many
    pending costs about what a plain group's read of 10 new entries costs: the due entries
    are found by deadline, not by a walk of the pending list (which made it grow with the
    list: 10.9 ms at 100,000 pending, against 0.14 ms for XRANGE COUNT 10)."""
    # in memory: the reads' own work, not the storage's flushes, is timed
    s = server.spawn("--storage", "mem")
    c = s.raw()
    n = 20000
    fill_pending(c, "s", n)
    c.call("XGROUP", "CREATE", "s", "plain", "0")
    deliver_all(c, "s", n)
    # every entry due at once, and once (the next wait is an hour)
    c.call("XGROUP", "SETPOLICY", "s", "g", "BACKOFF", "2", "1", "3600000")
    time.sleep(0.05)
    due, plain = [], []
    for _ in range(60):
        t0 = time.perf_counter()
        assert len(ids(read(c, "w2", count=10))) == 10
        t1 = time.perf_counter()
        assert len(ids(read(c, "p", count=10, grp="plain"))) == 10
        t2 = time.perf_counter()
        due.append(t1 - t0)
        plain.append(t2 - t1)
    assert median(due) < 4 * median(plain), (median(due), median(plain))
    # the redeliveries came by deadline then id: the first 600 ids, each delivered twice
    pend = c.call("XPENDING", "s", "g", "-", "+", "600")
    assert [p[0].decode() for p in pend] == ["%d-1" % i for i in range(1, 601)]
    assert {(p[1], p[3]) for p in pend} == {(b"w2", 2)}


def test_deadlines_fire_after_restart(server):
    """After a restart (SIGKILL) the stored deadlines fire: a blocked reader gets the entry
    whose ack deadline passed, and the spent one is dead-lettered with nobody reading."""
    c = server.raw()
    for k in ("r", "d"):
        c.call("XADD", k, "1-1", "f", k)
        c.call("XGROUP", "CREATE", k, "g", "0")
    c.call("XGROUP", "SETPOLICY", "r", "g", "ACKWAIT", "500")
    c.call("XGROUP", "SETPOLICY", "d", "g", "ACKWAIT", "500", "MAXDELIVER", "1",
           "DEADLETTER", "dlq")
    t0 = time.time()
    assert ids(read(c, "w1", key="r")) == ["1-1"]
    assert ids(read(c, "w1", key="d")) == ["1-1"]
    server.restart(kill=signal.SIGKILL)
    c = server.raw()
    b = server.raw()
    assert ids(read(b, "w2", key="r", block=10000)) == ["1-1"]
    assert time.time() - t0 >= 0.5
    assert counts(c, key="r")["1-1"] == ("w2", 2)
    assert wait_for(lambda: c.call("XLEN", "dlq") == 1)
    assert c.call("XPENDING", "d", "g")[0] == 0


def fixture(server, *args):
    import os
    import subprocess
    exe = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(server.exe))), "tests",
                       "adm-fixture")
    r = subprocess.run([exe, server.dir] + list(args), capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr


@lmdb_only("adm-fixture writes LMDB directories")
def test_due_rows_checked_and_rebuilt(server):
    """echo-admin check verifies the due rows (a policy's stored deadlines) against the PEL;
    a PEL without any (as an echd before them left it) is no problem, and echd writes them
    when it starts: the deadlines fire."""
    c = server.raw()
    for k in ("r", "d"):
        for i in (1, 2):
            c.call("XADD", k, "%d-1" % i, "f", k)
        c.call("XGROUP", "CREATE", k, "g", "0")
    c.call("XGROUP", "SETPOLICY", "r", "g", "ACKWAIT", "300")
    c.call("XGROUP", "SETPOLICY", "d", "g", "ACKWAIT", "300", "MAXDELIVER", "1",
           "DEADLETTER", "dlq")
    t0 = time.time()
    assert ids(read(c, "w1", key="r")) == ["1-1", "2-1"]
    assert ids(read(c, "w1", key="d")) == ["1-1", "2-1"]
    server.stop()
    assert server.check_data() is None
    fixture(server, "due-shift", "r", "g")
    bad = server.check_data()
    assert "the due row of 1-1 says redelivery at" in bad, bad
    assert "1 pending entries have no due row (the first: 1-1)" in bad, bad
    assert "FAILED: 2 problems" in bad, bad
    for k in ("r", "d"):
        fixture(server, "due-clear", k, "g")
    assert server.check_data() is None
    server.start()
    c = server.raw()
    b = server.raw()
    assert ids(read(b, "w2", key="r", block=10000)) == ["1-1", "2-1"]
    assert time.time() - t0 >= 0.3
    assert wait_for(lambda: c.call("XLEN", "dlq") == 2)
    assert c.call("XPENDING", "d", "g")[0] == 0
    assert server.check_data() is None
