"""Key expiry on streams: EXPIRE PEXPIRE EXPIREAT PEXPIREAT (with NX XX GT LT), TTL PTTL
EXPIRETIME PEXPIRETIME, PERSIST; what an expired key looks like to other commands (lazily and
actively expired); what keeps a TTL (stream writes, RENAME) and what drops it (DEL, FLUSHALL,
RENAME onto a key); MULTI/EXEC and WATCH; a blocked XREAD; INFO keyspace/stats; kill -9.

Replies are those of Redis 7.4; keys are created with XADD only.  Absolute times far in the
future (FAR, in 2096) give exact answers; relative ones are checked as ranges.  The kill -9
tests run against Redis with its AOF fsynced always (its equivalent promise, as in 05-groups).
"""

import signal
import time

from echdtest import RespError, echd_only, wait_until

ARITY = "ERR wrong number of arguments for '%s' command"
NOT_INT = "ERR value is not an integer or out of range"
BAD_TIME = "ERR invalid expire time in '%s' command"
NX_AND = "ERR NX and XX, GT or LT options at the same time are not compatible"
GT_AND_LT = "ERR GT and LT options at the same time are not compatible"
UNSUPPORTED = "ERR Unsupported option %s"
XRG_NOGROUP = "NOGROUP No such key 's' or consumer group 'g' in XREADGROUP with GROUP option"
LLONG_MAX = 9223372036854775807
LLONG_MIN = -9223372036854775808
FAR = 4000000000123          # ms since the epoch, in 2096
SETTERS = ("EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT")
GETTERS = ("TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME")


def now_ms():
    return int(time.time() * 1000)


def fresh(c, key="s", *ids):
    """A stream `key` with entries ids (default 1-1)."""
    for i in ids or ("1-1",):
        c.call("XADD", key, i, "f", "v")


def pxt(c, key="s"):
    return c.call("PEXPIRETIME", key)


def getters(c, key="s"):
    return [c.call(g, key) for g in GETTERS]


def gone(c, key="s"):
    assert [c.call("EXISTS", key), c.call("XLEN", key)] + getters(c, key) == [0, 0] + [-2] * 4


def info_fields(c, section):
    lines = c.call("INFO", section).decode().splitlines()
    return dict(x.split(":", 1) for x in lines if x and not x.startswith("#") and ":" in x)


def keyspace(c):
    """INFO keyspace db0 as (keys, expires), avg_ttl checked to be a number; None if no db0."""
    v = info_fields(c, "keyspace").get("db0")
    d = {k: int(x) for k, x in (kv.split("=", 1) for kv in v.split(","))} if v else {}
    assert not d or list(d)[:3] == ["keys", "expires", "avg_ttl"] and d["avg_ttl"] >= 0, v
    return (d["keys"], d["expires"]) if d else None


def expired_keys(c):
    return int(info_fields(c, "stats")["expired_keys"])


def blocked(c):
    return int(info_fields(c, "clients")["blocked_clients"])


def durable(server):
    """echd as it is; Redis with its AOF fsynced before every reply (see 05-groups)."""
    if server.is_echd:
        return server
    return server.spawn("--appendonly", "yes", "--appendfsync", "always")


# ---------------------------------------------------------------------------
# setting and reading a TTL, options, errors
# ---------------------------------------------------------------------------

def test_set_and_read(server):
    c = server.raw()
    assert [c.call(cmd, "nokey", "100000") for cmd in SETTERS] == [0] * 4
    assert getters(c, "nokey") == [-2] * 4
    assert c.call("EXISTS", "nokey") == 0          # a setter creates nothing
    fresh(c)
    assert getters(c) == [-1] * 4
    t0 = now_ms()
    assert c.call("EXPIRE", "s", "100") == 1
    t1 = now_ms()
    assert c.call("TTL", "s") == 100                # rounded: ms just short of 100 s
    assert 99000 < c.call("PTTL", "s") <= 100000
    assert t0 + 100000 <= pxt(c) <= t1 + 100000
    assert c.call("PEXPIRE", "s", "5000") == 1 and 4000 < c.call("PTTL", "s") <= 5000
    assert c.call("EXPIREAT", "s", "4000000000") == 1
    assert [c.call("EXPIRETIME", "s"), pxt(c)] == [4000000000, 4000000000000]
    assert c.call("PEXPIREAT", "s", FAR) == 1
    assert [c.call("EXPIRETIME", "s"), pxt(c)] == [4000000000, FAR]
    assert FAR - now_ms() - 1000 < c.call("PTTL", "s") <= FAR - t1
    assert c.call("XRANGE", "s", "-", "+") == [[b"1-1", [b"f", b"v"]]]
    # PERSIST: 1 only when it removed a TTL
    assert c.call("PERSIST", "s") == 1
    assert getters(c) == [-1] * 4
    assert [c.call("PERSIST", "s"), c.call("PERSIST", "nokey"), c.call("XLEN", "s")] == [0, 0, 1]


def test_rounding_to_seconds(server):
    """TTL and EXPIRETIME round the milliseconds to the nearest second."""
    c = server.raw()
    fresh(c)
    for ms, sec in ((4000000000499, 4000000000), (4000000000500, 4000000001),
                    (4000000000999, 4000000001), (4000000001000, 4000000001)):
        c.call("PEXPIREAT", "s", ms)
        assert c.call("EXPIRETIME", "s") == sec, ms
    assert c.pipeline([("PEXPIRE", "s", "1700"), ("TTL", "s")]) == [1, 2]
    assert c.pipeline([("PEXPIRE", "s", "1300"), ("TTL", "s")]) == [1, 1]
    # under half a second left: TTL 0, the key still there
    assert c.pipeline([("PEXPIRE", "s", "400"), ("TTL", "s"), ("EXISTS", "s")]) == [1, 0, 1]


def test_nx_xx(server):
    c = server.raw()
    assert c.call("EXPIRE", "nokey", "10", "NX") == 0
    fresh(c)
    assert [c.call("EXPIRE", "s", "10", "XX"), c.call("TTL", "s")] == [0, -1]   # no TTL yet
    assert c.call("PEXPIREAT", "s", FAR, "NX") == 1
    assert [c.call("EXPIRE", "s", "20", "NX"), pxt(c)] == [0, FAR]              # has one now
    # XX: set, also to the same time again
    assert [c.call("PEXPIREAT", "s", FAR + 5, "XX") for _ in range(2)] == [1, 1]
    assert pxt(c) == FAR + 5
    # options are case-insensitive and may be repeated
    assert c.call("EXPIREAT", "s", "4000000000", "xx", "Xx") == 1
    assert pxt(c) == 4000000000000
    c.call("PERSIST", "s")
    assert c.call("PEXPIRE", "s", "5000", "nx", "NX") == 1
    assert 4000 < c.call("PTTL", "s") <= 5000


def test_gt_lt(server):
    c = server.raw()
    fresh(c)
    # no TTL counts as an infinite one: GT never succeeds, LT always does
    assert [c.call("PEXPIREAT", "s", FAR, "GT"), c.call("TTL", "s")] == [0, -1]
    assert c.call("PEXPIREAT", "s", FAR, "LT") == 1
    # strictly greater / less: the same time is neither
    assert [c.call("PEXPIREAT", "s", t, opt) for t, opt in (
        (FAR, "GT"), (FAR, "LT"), (FAR + 1, "LT"), (FAR - 1, "GT"))] == [0] * 4
    assert pxt(c) == FAR
    assert [c.call("PEXPIREAT", "s", FAR + 1, "GT"), c.call("PEXPIREAT", "s", FAR - 1, "LT"),
            pxt(c)] == [1, 1, FAR - 1]
    # XX goes with GT or LT
    assert [c.call("PEXPIREAT", "s", FAR, "XX", "GT"),
            c.call("PEXPIREAT", "s", FAR - 7, "LT", "XX"), pxt(c)] == [1, 1, FAR - 7]
    c.call("PERSIST", "s")
    assert c.call("PEXPIREAT", "s", FAR, "XX", "LT") == c.call("EXPIRE", "nokey", "10", "LT") == 0
    # a time in the past: with GT on a key without TTL nothing happens, with LT it deletes
    assert [c.call("EXPIRE", "s", "-1", "GT"), c.call("XLEN", "s")] == [0, 1]
    assert c.call("EXPIRE", "s", "-1", "LT") == 1
    gone(c)
    fresh(c)
    c.call("EXPIRE", "s", "100")
    assert c.call("PEXPIREAT", "s", "1", "LT") == 1
    gone(c)


def test_option_errors(server):
    c = server.raw()
    fresh(c)
    c.call("PEXPIREAT", "s", FAR)
    for cmd in SETTERS:
        for opts in (("NX", "XX"), ("NX", "GT"), ("NX", "LT"), ("xx", "nx"), ("GT", "NX", "XX")):
            assert c.err(cmd, "s", "100", *opts) == NX_AND, (cmd, opts)
        assert c.err(cmd, "s", "100", "GT", "LT") == GT_AND_LT, cmd
        assert c.err(cmd, "s", "100", "lt", "gt") == GT_AND_LT, cmd
        assert c.err(cmd, "s", "100", "FOO") == UNSUPPORTED % "FOO", cmd
        assert c.err(cmd, "s", "100", "NX", "foo") == UNSUPPORTED % "foo", cmd
        assert c.err(cmd, "s", "100", "2") == UNSUPPORTED % "2", cmd
    # options are checked before the time and before the key
    assert c.err("EXPIRE", "s", "abc", "FOO") == UNSUPPORTED % "FOO"
    assert c.err("EXPIRE", "s", "abc", "NX", "XX") == NX_AND
    assert c.err("EXPIRE", "nokey", "10", "NX", "XX") == NX_AND
    assert c.err("EXPIRE", "nokey", "10", "BAR") == UNSUPPORTED % "BAR"
    assert pxt(c) == FAR          # no error changed anything


def test_value_errors_and_limits(server):
    c = server.raw()
    fresh(c)
    c.call("PEXPIREAT", "s", FAR)
    for cmd in SETTERS:
        for bad in ("abc", "1.5", "", " 1", "01", "-0", "1e3", "9223372036854775808",
                    "-9223372036854775809"):
            assert c.err(cmd, "s", bad) == NOT_INT, (cmd, bad)
        assert c.err(cmd, "nokey", "x") == NOT_INT, cmd
    # seconds that overflow when made milliseconds, or when added to now
    for cmd, v in (("EXPIRE", LLONG_MAX), ("EXPIRE", "9223372036854776"),
                   ("EXPIRE", "9223372036854775"), ("EXPIRE", "-9223372036854776"),
                   ("EXPIRE", LLONG_MIN), ("PEXPIRE", LLONG_MAX),
                   ("PEXPIRE", LLONG_MAX - 1000), ("EXPIREAT", LLONG_MAX),
                   ("EXPIREAT", "9223372036854776"), ("EXPIREAT", "-9223372036854776")):
        assert c.err(cmd, "s", v) == BAD_TIME % cmd.lower(), (cmd, v)
        assert c.err(cmd, "nokey", v) == BAD_TIME % cmd.lower(), (cmd, v)
    assert pxt(c) == FAR and c.call("XLEN", "s") == 1
    # the largest times there are: kept as they are
    assert c.call("PEXPIREAT", "s", LLONG_MAX) == 1
    assert pxt(c) == LLONG_MAX
    assert c.call("PTTL", "s") > LLONG_MAX - now_ms() - 60000
    assert c.call("EXPIREAT", "s", "9223372036854775") == 1
    assert [c.call("EXPIRETIME", "s"), pxt(c)] == [9223372036854775, 9223372036854775000]


def test_arity(server):
    c = server.raw()
    fresh(c)
    for cmd in SETTERS:
        assert c.err(cmd) == c.err(cmd, "s") == ARITY % cmd.lower()
    for cmd in GETTERS + ("PERSIST",):
        assert c.err(cmd) == c.err(cmd, "s", "s") == ARITY % cmd.lower()
    assert c.call("TTL", "s") == -1


# ---------------------------------------------------------------------------
# expiry
# ---------------------------------------------------------------------------

def test_time_in_the_past_deletes(server):
    c = server.raw()
    past = [("EXPIRE", "0"), ("EXPIRE", "-1"), ("PEXPIRE", "0"), ("PEXPIRE", "-100"),
            ("EXPIREAT", "1"), ("EXPIREAT", "-5"), ("PEXPIREAT", now_ms() - 1000),
            ("PEXPIREAT", "0"), ("EXPIRE", "-9223372036854775"), ("PEXPIRE", LLONG_MIN)]
    for cmd, v in past:
        fresh(c, "s", "5-1")
        c.call("XGROUP", "CREATE", "s", "g", "0")
        assert c.call(cmd, "s", v) == 1, (cmd, v)
        gone(c)
        assert c.call(cmd, "s", v) == 0, (cmd, v)
        # a new stream: the old one's top id and groups went with it
        assert c.call("XADD", "s", "1-1", "f", "v") == b"1-1"
        assert c.call("XINFO", "GROUPS", "s") == []
        c.call("DEL", "s")


def test_expired_key_is_gone(server):
    c = server.raw()
    fresh(c, "keep")
    for k in ("s", "w"):
        fresh(c, k, "5-1", "6-1")
        c.call("XGROUP", "CREATE", k, "g", "0")
        assert c.call("PEXPIRE", k, "100") == 1
    time.sleep(0.15)
    # a write as the first command on the expired key: a fresh stream
    assert c.call("XADD", "w", "1-1", "f", "v") == b"1-1"
    assert [c.call("XLEN", "w"), c.call("TTL", "w"), c.call("XINFO", "GROUPS", "w")] == [1, -1, []]
    c.call("DEL", "w")
    gone(c)
    assert c.call("TYPE", "s") == "none"
    assert c.call("XRANGE", "s", "-", "+") == c.call("XREVRANGE", "s", "+", "-") == []
    assert c.call("XREAD", "STREAMS", "s", "0") is None
    assert c.call("KEYS", "*") == [b"keep"]
    assert c.call("SCAN", "0") == [b"0", [b"keep"]]
    assert c.err("XINFO", "STREAM", "s") == c.err("XINFO", "GROUPS", "s") == "ERR no such key"
    assert [c.call("PERSIST", "s"), c.call("EXPIRE", "s", "100")] == [0, 0]
    assert c.call("XADD", "s", "NOMKSTREAM", "*", "f", "v") is None
    # XADD makes a fresh stream: no TTL, no groups, a lower id than before
    assert c.call("XADD", "s", "1-1", "a", "b") == b"1-1"
    assert [c.call("XLEN", "s"), c.call("TTL", "s"), c.call("XINFO", "GROUPS", "s")] == [1, -1, []]
    assert sorted(c.call("KEYS", "*")) == [b"keep", b"s"]


def test_expired_group_and_pel(server):
    c = server.raw()
    fresh(c, "s", "5-1", "6-1")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    assert len(c.call("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">")[0][1]) == 2
    c.call("PEXPIRE", "s", "100")
    time.sleep(0.2)
    assert c.err("XPENDING", "s", "g") == "NOGROUP No such key 's' or consumer group 'g'"
    assert c.err("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "0") == XRG_NOGROUP
    assert c.call("XACK", "s", "g", "5-1") == 0
    assert c.call("XADD", "s", "1-1", "a", "b") == b"1-1"
    assert c.call("XGROUP", "CREATE", "s", "g", "0") == "OK"
    assert c.call("XPENDING", "s", "g") == [0, None, None, None]
    assert c.call("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "0") == [[b"s", []]]
    assert c.call("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">") == [
        [b"s", [[b"1-1", [b"a", b"b"]]]]]


def test_active_expiry(server):
    """Keys nobody touches go by themselves."""
    c = server.raw()
    fresh(c, "keep")
    for k in ("a", "b", "c"):
        fresh(c, k)
        c.call("PEXPIRE", k, "100")
    assert c.call("DBSIZE") == 4
    wait_until(lambda: c.call("DBSIZE") == 1, timeout=1.5, what="DBSIZE 1")
    assert c.call("KEYS", "*") == [b"keep"] and c.call("TTL", "keep") == -1


@echd_only("active-expire-keys is echd's; Redis needs DEBUG SET-ACTIVE-EXPIRE, off by default")
def test_lazy_expiry_without_the_cycle(server):
    """With the background cycle off, an expired key keeps its rows, yet no command sees it:
    reads pass it by, WATCH fails, a write drops it first (counted in expired_keys), and
    turning the cycle on drops the rest."""
    s = server.spawn("--active-expire-keys", "0")
    c = s.raw()
    fresh(c, "keep")
    for k in ("s", "t", "u"):
        fresh(c, k, "5-1", "6-1")
        c.call("XGROUP", "CREATE", k, "g", "0")
        c.call("XREADGROUP", "GROUP", "g", "w", "STREAMS", k, ">")
    c.call("WATCH", "u")
    for k in ("s", "t", "u"):
        c.call("PEXPIRE", k, "50")
    c.call("UNWATCH")
    c.call("WATCH", "u")                    # watched while it still had time left
    time.sleep(0.15)
    assert c.call("DBSIZE") == 4            # nothing dropped them
    gone(c, "s")
    assert c.call("XRANGE", "s", "-", "+") == []
    assert c.call("KEYS", "*") == [b"keep"]
    assert c.call("SCAN", "0", "COUNT", "100") == [b"0", [b"keep"]]
    assert c.call_raw("TYPE", "s") == b"+none\r\n"
    ks = keyspace(c)
    assert ks == (4, 0), ks                 # the rows are there; no live key has a TTL
    c.call("MULTI")
    c.call("PING")
    assert c.call("EXEC") is None           # the watched key expired
    before = int(info_fields(c, "stats")["expired_keys"])
    assert c.call("XADD", "s", "1-1", "f", "v") == b"1-1"     # a fresh stream
    assert [c.call("XLEN", "s"), c.call("TTL", "s")] == [1, -1]
    assert c.call("XINFO", "GROUPS", "s") == []
    assert c.call("DEL", "t") == 0          # an expired key is not deleted twice
    assert int(info_fields(c, "stats")["expired_keys"]) == before + 2
    assert c.call("DBSIZE") == 3
    assert c.call_raw("CONFIG", "SET", "active-expire-keys", "64") == b"+OK\r\n"
    wait_until(lambda: c.call("DBSIZE") == 2, timeout=1.5, what="DBSIZE 2")
    assert sorted(c.call("KEYS", "*")) == [b"keep", b"s"]


# ---------------------------------------------------------------------------
# what keeps a TTL, what drops it
# ---------------------------------------------------------------------------

def test_stream_commands_keep_ttl(server):
    c = server.raw()
    fresh(c)
    c.call("PEXPIREAT", "s", FAR)
    steps = [("XADD", "s", "2-1", "f", "v"), ("XADD", "s", "MAXLEN", "2", "3-1", "f", "v"),
             ("XGROUP", "CREATE", "s", "g", "0"),
             ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"),
             ("XACK", "s", "g", "2-1"), ("XCLAIM", "s", "g", "d", "0", "3-1"),
             ("XGROUP", "CREATECONSUMER", "s", "g", "x"), ("XSETID", "s", "9-9"),
             ("XDEL", "s", "3-1"), ("XTRIM", "s", "MAXLEN", "0"),
             ("XGROUP", "DESTROY", "s", "g"), ("XADD", "s", "10-1", "f", "v")]
    for step in steps:
        c.call(*step)
        assert pxt(c) == FAR, step
    assert c.call("XLEN", "s") == 1 and c.call("TTL", "s") > 0


def test_delete_drops_ttl(server):
    c = server.raw()
    for drop in (("DEL", "s"), ("UNLINK", "s"), ("FLUSHALL",), ("FLUSHDB",)):
        fresh(c)
        c.call("EXPIRE", "s", "100")
        c.call(*drop)
        assert c.call("TTL", "s") == -2, drop
        fresh(c)
        assert c.call("TTL", "s") == -1, drop
        c.call("DEL", "s")
    c.call("XGROUP", "CREATE", "m", "g", "$", "MKSTREAM")
    assert c.call("TTL", "m") == -1


def test_rename(server):
    c = server.raw()
    fresh(c)
    c.call("PEXPIREAT", "s", FAR)
    assert c.call("RENAME", "s", "t") == "OK"
    assert [pxt(c, "t"), pxt(c, "s")] == [FAR, -2]
    # onto a key with a TTL: the source's TTL wins; a source without one leaves none
    fresh(c, "u")
    c.call("PEXPIREAT", "u", FAR + 1000)
    assert [c.call("RENAME", "t", "u"), pxt(c, "u")] == ["OK", FAR]
    fresh(c, "v")
    assert [c.call("RENAME", "v", "u"), pxt(c, "u")] == ["OK", -1]
    # RENAMENX carries it too; RENAME to itself keeps it
    fresh(c, "w")
    c.call("PEXPIREAT", "w", FAR + 7)
    assert [c.call("RENAMENX", "w", "u"), c.call("RENAMENX", "w", "z"), pxt(c, "z")] == [
        0, 1, FAR + 7]
    assert [c.call("RENAME", "z", "z"), pxt(c, "z")] == ["OK", FAR + 7]
    # the TTL still works under the new name
    c.call("PEXPIRE", "z", "100")
    c.call("RENAME", "z", "y")
    time.sleep(0.2)
    assert c.call("EXISTS", "y", "z") == 0


# ---------------------------------------------------------------------------
# transactions, blocking
# ---------------------------------------------------------------------------

def test_multi_exec(server):
    c = server.raw()
    fresh(c)
    assert c.call("MULTI") == "OK"
    for cmd in (("EXPIRE", "s", "100"), ("TTL", "s"), ("PEXPIRE", "nokey", "5"),
                ("EXPIRE", "s", "x"), ("EXPIRE", "s", "10", "NX", "XX"), ("PERSIST", "s"),
                ("TTL", "s"), ("PEXPIRE", "s", "0"), ("EXISTS", "s")):
        assert c.call(*cmd) == "QUEUED"
    assert c.call("EXEC") == [1, 100, 0, RespError(NOT_INT), RespError(NX_AND), 1, -1, 1, 0]
    fresh(c)
    c.call("MULTI")
    assert c.err("EXPIRE", "s") == ARITY % "expire"
    assert c.err("EXEC") == "EXECABORT Transaction discarded because of previous errors."
    assert c.call("TTL", "s") == -1


def test_watch(server):
    c = server.raw()
    other = server.raw()

    def run(setup, between, sleep=0):
        c.call("FLUSHALL")
        fresh(c)
        if setup:
            c.call(*setup)
        c.call("WATCH", "s")
        if between:
            other.call(*between)
        time.sleep(sleep)
        c.call("MULTI")
        c.call("XADD", "s", "9-1", "f", "v")
        return c.call("EXEC")

    # another client changing the TTL aborts the transaction
    assert run(None, ("PEXPIRE", "s", "100000")) is None
    assert c.call("XLEN", "s") == 1
    assert run(("EXPIRE", "s", "100"), ("PERSIST", "s")) is None
    assert run(("EXPIRE", "s", "100"), ("EXPIRE", "s", "200", "GT")) is None
    # commands that change nothing do not
    assert run(None, ("PERSIST", "s")) == [b"9-1"]
    assert run(("EXPIRE", "s", "100"), ("EXPIRE", "s", "10", "NX")) == [b"9-1"]
    assert run(None, ("TTL", "s")) == [b"9-1"]
    assert run(("PEXPIRE", "s", "5000"), None) == [b"9-1"]         # not expired yet
    # the watched key expires before EXEC: EXEC fails, nothing is written
    assert run(("PEXPIRE", "s", "100"), None, sleep=0.25) is None
    assert c.call("EXISTS", "s") == 0


def test_watch_of_an_expired_key(server):
    """A key that had already expired when WATCHed: its going (by the cycle or FLUSHALL) is
    no change and EXEC runs; made anew, it is a change (Redis 7.0+, touchWatchedKey)."""
    c = server.raw()
    other = server.raw()

    def run(between, sleep=0.0):
        c.call("FLUSHALL")
        fresh(c)
        c.call("PEXPIRE", "s", "1")
        time.sleep(0.02)                   # expired; dropped or not yet
        c.call("WATCH", "s")
        if between:
            other.call(*between)
        time.sleep(sleep)
        c.call("MULTI")
        c.call("XADD", "t", "9-1", "f", "v")
        return c.call("EXEC")

    assert run(None) == [b"9-1"]
    assert run(None, sleep=0.25) == [b"9-1"]             # the cycle drops it meanwhile
    assert run(("FLUSHALL",)) == [b"9-1"]
    assert run(("DEL", "s")) == [b"9-1"]                 # nothing to delete
    assert run(("XADD", "s", "1-1", "f", "v")) is None   # a new stream under the name
    assert c.call("EXISTS", "t") == 0
    assert run(("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")) is None


@echd_only("active-expire-keys is echd's; Redis needs DEBUG SET-ACTIVE-EXPIRE, off by default")
def test_watch_of_an_expired_key_lazily(server):
    """The same with the cycle off, so that the key is still there at WATCH and at EXEC."""
    s = server.spawn("--active-expire-keys", "0")
    c = s.raw()
    other = s.raw()
    for k in ("a", "b"):
        fresh(c, k)
        c.call("PEXPIRE", k, "1")
    time.sleep(0.02)
    assert c.call("DBSIZE") == 2            # not dropped
    c.call("WATCH", "a")
    c.call("MULTI")
    c.call("XLEN", "a")
    assert c.call("EXEC") == [0]
    c.call("WATCH", "a", "b")
    assert other.call("XADD", "b", "1-1", "f", "v") == b"1-1"  # drops b, then makes b
    c.call("MULTI")
    c.call("XLEN", "b")
    assert c.call("EXEC") is None
    c.call("WATCH", "a")
    assert other.call("EXPIRE", "a", "100") == 0    # a write: it drops a, which is no change
    c.call("MULTI")
    c.call("XLEN", "a")
    assert c.call("EXEC") == [0]


def test_blocked_xread_outlives_expiry(server):
    """XREAD BLOCK on $ stays blocked when the key expires; it still waits for an id above the
    old stream's top, so an XADD of a lower id to the fresh stream does not wake it."""
    w = server.raw()
    r = server.raw()
    fresh(w, "s", "5-1")
    w.call("PEXPIRE", "s", "200")
    r.send("XREAD", "BLOCK", "0", "STREAMS", "s", "$")
    wait_until(lambda: blocked(w) == 1, what="1 blocked client")
    wait_until(lambda: w.call("DBSIZE") == 0, timeout=1.5, what="the key to expire")
    assert blocked(w) == 1
    assert w.call("XADD", "s", "1-1", "a", "b") == b"1-1"
    time.sleep(0.05)
    assert blocked(w) == 1
    assert w.call("XADD", "s", "6-1", "c", "d") == b"6-1"
    assert r.read() == [[b"s", [[b"6-1", [b"c", b"d"]]]]]
    assert r.call("PING") == "PONG"


@echd_only("Redis 7.2+ re-runs a blocked XREADGROUP when its key is deleted (expiry deletes "
           "through the same path), which answers the usual -NOGROUP; 7.0 answers "
           "'-UNBLOCKED the stream key no longer exists'")
def test_blocked_xreadgroup_key_expires(server):
    w = server.raw()
    r = server.raw()
    w.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    w.call("PEXPIRE", "s", "200")
    r.send("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">")
    wait_until(lambda: blocked(w) == 1, what="1 blocked client")
    assert r.read() == RespError(XRG_NOGROUP)
    assert w.call("EXISTS", "s") == 0


# ---------------------------------------------------------------------------
# INFO, COMMAND, redis-py
# ---------------------------------------------------------------------------

def test_info_keyspace(server):
    c = server.raw()
    assert keyspace(c) is None
    for k in ("a", "b", "c", "d"):
        fresh(c, k)
    c.call("EXPIRE", "a", "1000")
    c.call("PEXPIREAT", "b", FAR)
    c.call("PEXPIRE", "c", "100")
    assert keyspace(c) == (4, 3)
    wait_until(lambda: keyspace(c) == (3, 2), timeout=1.5, what="c to expire")
    c.call("PERSIST", "a")
    assert keyspace(c) == (3, 1)
    c.call("DEL", "b")
    assert keyspace(c) == (2, 0)


def test_info_expired_keys(server):
    c = server.raw()
    base = expired_keys(c)
    for k in ("a", "b", "c"):
        fresh(c, k)
        c.call("PEXPIRE", k, "50")
    time.sleep(0.1)
    c.call("XLEN", "a")                      # lazily, if not already gone
    wait_until(lambda: expired_keys(c) == base + 3, timeout=1.5, what="expired_keys +3")
    fresh(c, "d")
    c.call("DEL", "d")
    # a time already past deletes the key at once, as DEL does: not counted either
    fresh(c, "e")
    assert c.call("PEXPIREAT", "e", "1") == 1 and c.call("EXISTS", "e") == 0
    time.sleep(0.2)
    assert expired_keys(c) == base + 3       # each counted once; deleted is not expired


def test_command_info(server):
    c = server.raw()
    arity = {"expire": -3, "pexpire": -3, "expireat": -3, "pexpireat": -3, "ttl": 2,
             "pttl": 2, "expiretime": 2, "pexpiretime": 2, "persist": 2}
    got = c.call("COMMAND", "INFO", *arity)
    assert [(x[0].decode(), x[1]) for x in got] == list(arity.items())
    assert all(x[3:6] == [1, 1, 1] for x in got), got       # first key, last key, step


def test_redis_py(server):
    r = server.client()
    r.xadd("s", {"f": "v"}, id="1-1")
    assert r.expire("s", 100) is True and r.ttl("s") == 100
    assert r.expire("s", 10, nx=True) is False
    assert r.pexpireat("s", FAR, xx=True) is True and r.pexpiretime("s") == FAR
    assert r.expireat("s", 4000000001, gt=True) is True and r.expiretime("s") == 4000000001
    assert r.persist("s") is True and r.pttl("s") == -1
    assert r.pexpire("nokey", 100) is False and r.ttl("nokey") == -2


# ---------------------------------------------------------------------------
# kill -9
# ---------------------------------------------------------------------------

def test_ttl_survives_sigkill(server):
    s = durable(server)
    c = s.raw()
    for k in ("a", "b", "c"):
        fresh(c, k)
    at = now_ms() + 60000
    assert c.call("PEXPIREAT", "a", at) == 1
    c.call("EXPIRE", "b", "100")
    c.call("PERSIST", "b")
    c.call("PEXPIREAT", "c", FAR)
    s.restart(kill=signal.SIGKILL)
    c = s.raw()
    assert [pxt(c, "a"), pxt(c, "b"), pxt(c, "c"), c.call("DBSIZE")] == [at, -1, FAR, 3]


def test_ttl_passes_while_down(server):
    s = durable(server)
    c = s.raw()
    fresh(c, "keep")
    for k in ("s", "t"):
        fresh(c, k, "5-1")
        c.call("PEXPIRE", k, "300")
    t0 = time.monotonic()
    s.restart(kill=signal.SIGKILL)
    time.sleep(max(0.0, 0.4 - (time.monotonic() - t0)))
    c = s.raw()
    assert c.call("EXISTS", "t") == 0                                           # when read
    wait_until(lambda: c.call("DBSIZE") == 1, timeout=1.5, what="DBSIZE 1")   # by itself
    gone(c)
    assert c.call("KEYS", "*") == [b"keep"] and c.call("TTL", "keep") == -1
    assert c.call("XADD", "s", "1-1", "f", "v") == b"1-1"
