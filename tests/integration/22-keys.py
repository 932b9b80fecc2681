"""Key introspection: TOUCH, RANDOMKEY, OBJECT (ENCODING REFCOUNT FREQ HELP) and MEMORY
(USAGE HELP), MOVE and COPY, with their errors, in the databases and with expired keys.

Replies are those of Redis 7.4 unless a test is marked echd-only. MEMORY USAGE is a byte
count in both, but not the same count: Redis measures RAM, echd the bytes of the key's rows
in storage. The shared tests check only what both promise (null for a missing key, a number
that grows with the data); the echd-only ones check echd's own accounting.
"""

import time

from echdtest import RespError, echd_only, lmdb_only, wait_until

ARITY = "ERR wrong number of arguments for '%s' command"
NOT_INT = "ERR value is not an integer or out of range"
SYNTAX = "ERR syntax error"
NO_LFU = ("ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please "
          "note that when switching between policies at runtime LRU and LFU data will take "
          "some time to adjust.")


def blocked_clients(c):
    lines = c.call("INFO", "clients").decode().split("\r\n")
    return int(dict(line.split(":", 1) for line in lines if ":" in line)["blocked_clients"])


def add(c, key, n=1, value="v"):
    for _ in range(n):
        c.call("XADD", key, "*", "f", value)


def test_touch(server):
    c = server.raw()
    assert c.call("TOUCH", "nokey") == 0
    add(c, "a")
    add(c, "b")
    assert c.call("TOUCH", "a", "b", "nokey", "a") == 3   # a key named twice counts twice
    assert c.call("PEXPIRE", "b", "100000") == 1
    assert c.call("TOUCH", "b") == 1
    assert 0 < c.call("PTTL", "b") <= 100000              # TOUCH keeps the TTL
    assert c.err("TOUCH") == ARITY % "touch"
    assert c.call("XLEN", "a") == 1


def test_randomkey(server):
    c = server.raw()
    assert c.call("RANDOMKEY") is None
    add(c, "only")
    assert c.call("RANDOMKEY") == b"only"
    names = {b"k%d" % i for i in range(10)}
    for n in sorted(names):
        add(c, n.decode())
    drawn = [c.call("RANDOMKEY") for _ in range(300)]
    assert set(drawn) <= names | {b"only"}
    # 11 keys made one after the other: each is drawn (a miss of one in 300 draws has a
    # chance of about 1e-12 when they are equally likely)
    assert set(drawn) == names | {b"only"}
    assert c.err("RANDOMKEY", "x") == ARITY % "randomkey"


def test_randomkey_databases_and_long_names(server):
    c = server.raw()
    add(c, "in0")
    assert c.call("SELECT", "1") == "OK"
    assert c.call("RANDOMKEY") is None
    long_name = "L" * 600   # past what a storage key holds whole
    add(c, long_name)
    assert c.call("RANDOMKEY") == long_name.encode()
    assert c.call("SELECT", "0") == "OK"
    assert c.call("RANDOMKEY") == b"in0"


def test_randomkey_skips_expired(server):
    c = server.raw()
    for i in range(5):
        add(c, "e%d" % i)
        assert c.call("PEXPIRE", "e%d" % i, "1") == 1
    add(c, "live")
    time.sleep(0.05)
    assert {c.call("RANDOMKEY") for _ in range(40)} == {b"live"}
    assert c.call("DEL", "live") == 1
    assert c.call("RANDOMKEY") is None


def test_object(server):
    c = server.raw()
    add(c, "s")
    assert c.call("OBJECT", "ENCODING", "s") == b"stream"
    assert c.call("object", "encoding", "s") == b"stream"
    assert c.call("OBJECT", "REFCOUNT", "s") == 1
    assert c.err("OBJECT", "FREQ", "s") == NO_LFU
    for sub in ("ENCODING", "REFCOUNT", "FREQ"):
        assert c.call("OBJECT", sub, "nokey") is None
    assert c.err("OBJECT", "ENCODING") == ARITY % "object|encoding"
    assert c.err("OBJECT", "ENCODING", "s", "x") == ARITY % "object|encoding"
    assert c.err("OBJECT") == ARITY % "object"
    assert c.err("OBJECT", "nosuch", "s") == \
        "ERR unknown subcommand 'nosuch'. Try OBJECT HELP."
    helptext = c.call("OBJECT", "HELP")
    assert helptext[0].startswith("OBJECT <subcommand>")
    assert any(line.startswith("ENCODING") for line in helptext)
    assert c.err("OBJECT", "HELP", "x") == ARITY % "object|help"


@echd_only("echd keeps no access times: OBJECT IDLETIME is not offered")
def test_object_idletime_unknown(server):
    c = server.raw()
    add(c, "s")
    assert c.err("OBJECT", "IDLETIME", "s") == \
        "ERR unknown subcommand 'IDLETIME'. Try OBJECT HELP."


def test_memory_usage(server):
    c = server.raw()
    assert c.call("MEMORY", "USAGE", "nokey") is None
    add(c, "small", 10)
    add(c, "big", 1000, "x" * 100)
    small = c.call("MEMORY", "USAGE", "small")
    big = c.call("MEMORY", "USAGE", "big")
    assert isinstance(small, int) and small > 0
    assert big > small + 1000 * 100          # at least the values' bytes more
    assert c.call("MEMORY", "USAGE", "big", "SAMPLES", "0") > 1000 * 100
    assert c.call("MEMORY", "USAGE", "big", "samples", "1000") > 1000 * 100
    # a consumer group's pending entries take room as well
    assert c.call("XGROUP", "CREATE", "big", "g", "0") == "OK"
    before = c.call("MEMORY", "USAGE", "big", "SAMPLES", "0")
    c.call("XREADGROUP", "GROUP", "g", "c1", "COUNT", "500", "STREAMS", "big", ">")
    assert c.call("MEMORY", "USAGE", "big", "SAMPLES", "0") > before
    # errors
    assert c.err("MEMORY", "USAGE", "small", "SAMPLES", "-1") == SYNTAX
    assert c.err("MEMORY", "USAGE", "small", "SAMPLES", "x") == NOT_INT
    assert c.err("MEMORY", "USAGE", "small", "SAMPLES") == SYNTAX
    assert c.err("MEMORY", "USAGE", "small", "FOO") == SYNTAX
    assert c.err("MEMORY", "USAGE") == ARITY % "memory|usage"
    assert c.err("MEMORY") == ARITY % "memory"
    helptext = c.call("MEMORY", "HELP")
    assert helptext[0].startswith("MEMORY <subcommand>")
    assert any(line.startswith("USAGE <key>") for line in helptext)


@echd_only("echd counts the bytes of the key's rows in storage, not RAM")
def test_memory_usage_accounting(server):
    c = server.raw()
    add(c, "s", 10, "y" * 1000)
    exact = c.call("MEMORY", "USAGE", "s", "SAMPLES", "0")
    # ten values of 1000 bytes, plus ids, field names and the key's own rows
    assert 10 * 1000 < exact < 10 * 1000 + 1500
    # uniform entries over many nodes: five sampled nodes estimate the whole within 5%
    add(c, "many", 3000, "z" * 50)
    whole = c.call("MEMORY", "USAGE", "many", "SAMPLES", "0")
    assert 3000 * 50 < whole
    assert abs(c.call("MEMORY", "USAGE", "many") - whole) <= whole // 20
    assert c.call("MEMORY", "USAGE", "many", "SAMPLES", "1000000") == whole
    # each pending entry is a row in the group's PEL and one in the consumer's
    assert c.call("XGROUP", "CREATE", "many", "g", "0") == "OK"
    base = c.call("MEMORY", "USAGE", "many", "SAMPLES", "0")
    c.call("XREADGROUP", "GROUP", "g", "c1", "COUNT", "100", "STREAMS", "many", ">")
    grown = c.call("MEMORY", "USAGE", "many", "SAMPLES", "0")
    assert grown - base >= 100 * (24 + 24 + 32)
    c.call("XACK", "many", "g", *[e[0] for e in
                                  c.call("XRANGE", "many", "-", "+", "COUNT", "100")])
    assert c.call("MEMORY", "USAGE", "many", "SAMPLES", "0") < grown
    # XDEL and XTRIM shrink it; an expired key has none
    c.call("XTRIM", "many", "MAXLEN", "1000")
    assert c.call("MEMORY", "USAGE", "many", "SAMPLES", "0") < base * 2 // 3
    assert c.call("PEXPIRE", "s", "1") == 1
    time.sleep(0.02)
    assert c.call("MEMORY", "USAGE", "s") is None


def test_command_table(server):
    c = server.raw()
    listed = set(c.call("COMMAND", "LIST"))
    for name in (b"touch", b"randomkey", b"object", b"object|encoding", b"object|refcount",
                 b"object|freq", b"memory", b"memory|usage"):
        assert name in listed
    info = c.call("COMMAND", "INFO", "touch", "randomkey")
    assert [(i[0], i[1], i[3], i[4], i[5]) for i in info] == \
        [(b"touch", -2, 1, -1, 1), (b"randomkey", 1, 0, 0, 0)]
    # in MULTI like other reads
    add(c, "s")
    assert c.call("MULTI") == "OK"
    for cmd in (("TOUCH", "s"), ("OBJECT", "ENCODING", "s"), ("RANDOMKEY",)):
        assert c.call(*cmd) == "QUEUED"
    assert c.call("EXEC") == [1, b"stream", b"s"]


def test_move(server):
    c = server.raw()
    assert c.call("MOVE", "nokey", "1") == 0
    for i in range(1, 4):
        c.call("XADD", "s", "%d-1" % i, "f", "v%d" % i)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XREADGROUP", "GROUP", "g", "alice", "COUNT", "2", "STREAMS", "s", ">")
    assert c.call("PEXPIRE", "s", "100000") == 1
    entries = c.call("XRANGE", "s", "-", "+")
    assert c.call("MOVE", "s", "1") == 1
    assert [c.call("EXISTS", "s"), c.call("DBSIZE"), c.call("XLEN", "s")] == [0, 0, 0]
    assert c.call("SELECT", "1") == "OK"
    # entries, group, pending entries and TTL went along
    assert c.call("DBSIZE") == 1
    assert c.call("XRANGE", "s", "-", "+") == entries
    assert c.call("XPENDING", "s", "g")[:3] == [2, b"1-1", b"2-1"]
    assert 0 < c.call("PTTL", "s") <= 100000
    assert c.call("XREADGROUP", "GROUP", "g", "bob", "STREAMS", "s", ">") == \
        [[b"s", [[b"3-1", [b"f", b"v3"]]]]]
    assert c.call("KEYS", "*") == [b"s"]
    # the name taken in the destination: nothing moves
    c.call("SELECT", "0")
    c.call("XADD", "s", "9-9", "f", "other")
    assert c.call("MOVE", "s", "1") == 0
    assert c.call("XRANGE", "s", "-", "+") == [[b"9-9", [b"f", b"other"]]]
    c.call("SELECT", "1")
    assert c.call("XLEN", "s") == 3
    assert c.call("MOVE", "s", "0") == 0


def test_move_errors(server):
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    assert c.err("MOVE", "s", "x") == NOT_INT
    assert c.err("MOVE", "s", "99999999999") == \
        "ERR value is out of range, value must between -2147483648 and 2147483647"
    assert c.err("MOVE", "s", "16") == "ERR DB index is out of range"
    assert c.err("MOVE", "s", "-1") == "ERR DB index is out of range"
    assert c.err("MOVE", "s", "0") == "ERR source and destination objects are the same"
    assert c.err("MOVE", "nokey", "0") == "ERR source and destination objects are the same"
    assert c.err("MOVE", "s") == ARITY % "move"
    assert c.call("XLEN", "s") == 1


def test_move_expired_keys(server):
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    c.call("SELECT", "1")
    c.call("XADD", "s", "5-5", "f", "old")
    c.call("PEXPIRE", "s", "1")
    c.call("XADD", "gone", "1-1", "f", "v")
    c.call("PEXPIRE", "gone", "1")
    time.sleep(0.02)
    assert c.call("MOVE", "gone", "0") == 0          # expired in the source: no key
    c.call("SELECT", "0")
    assert c.call("MOVE", "s", "1") == 1             # expired in the destination: replaced
    c.call("SELECT", "1")
    assert c.call("XRANGE", "s", "-", "+") == [[b"1-1", [b"f", b"v"]]]
    assert c.call("TTL", "s") == -1


def test_move_watch_and_blocked_reader(server):
    c = server.raw()
    other = server.raw()
    reader = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    # a WATCH of the name in the destination sees it
    other.call("SELECT", "1")
    other.call("WATCH", "s")
    assert c.call("MOVE", "s", "1") == 1
    other.call("MULTI")
    other.call("XLEN", "s")
    assert other.call("EXEC") is None
    # a reader blocked on the name in the destination is woken by the move
    c.call("SELECT", "1")
    assert c.call("MOVE", "s", "0") == 1
    reader.call("SELECT", "1")
    reader.send("XREAD", "BLOCK", "5000", "STREAMS", "s", "0-0")
    wait_until(lambda: blocked_clients(c) == 1, what="1 blocked client")
    c.call("SELECT", "0")
    assert c.call("MOVE", "s", "1") == 1
    assert reader.read() == [[b"s", [[b"1-1", [b"f", b"v"]]]]]


def group_state(c, key):
    """A stream's entries, groups and pending entries, without clocks."""
    groups = c.call("XINFO", "GROUPS", key)
    pending = {g[1]: [p[:2] + p[3:] for p in c.call("XPENDING", key, g[1], "-", "+", "100")]
               for g in groups}
    return c.call("XRANGE", key, "-", "+"), groups, pending


def test_copy(server):
    c = server.raw()
    assert c.call("COPY", "nokey", "t") == 0
    for i in range(1, 6):
        c.call("XADD", "s", "%d-1" % i, "f", "v%d" % i)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XGROUP", "CREATE", "s", "h", "$")
    c.call("XREADGROUP", "GROUP", "g", "alice", "COUNT", "2", "STREAMS", "s", ">")
    c.call("XREADGROUP", "GROUP", "g", "bob", "COUNT", "1", "STREAMS", "s", ">")
    c.call("PEXPIRE", "s", "100000")
    source = group_state(c, "s")
    assert c.call("COPY", "s", "t") == 1
    assert group_state(c, "t") == source
    assert 0 < c.call("PTTL", "t") <= 100000
    assert c.call("XINFO", "STREAM", "t")[:14] == c.call("XINFO", "STREAM", "s")[:14]
    # the copy goes its own way
    assert c.call("XACK", "t", "g", "1-1") == 1
    c.call("XADD", "t", "9-1", "f", "new")
    c.call("XREADGROUP", "GROUP", "g", "carol", "STREAMS", "t", ">")
    assert group_state(c, "s") == source
    assert c.call("XPENDING", "t", "g")[0] == 5         # 3 - 1 acknowledged + 3 delivered
    # a taken name: 0, unless REPLACE
    assert c.call("COPY", "s", "t") == 0
    assert c.call("XLEN", "t") == 6
    assert c.call("COPY", "s", "t", "REPLACE") == 1
    assert group_state(c, "t") == source
    # to another database, also under the same name
    assert c.call("COPY", "s", "s", "DB", "1") == 1
    assert c.call("COPY", "s", "u", "db", "2", "replace") == 1
    c.call("SELECT", "1")
    assert group_state(c, "s") == source
    c.call("SELECT", "2")
    assert group_state(c, "u") == source
    assert c.call("DBSIZE") == 1


def test_copy_errors(server):
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    assert c.err("COPY", "s", "s") == "ERR source and destination objects are the same"
    assert c.err("COPY", "s", "s", "DB", "0") == \
        "ERR source and destination objects are the same"
    assert c.err("COPY", "s", "t", "DB", "abc") == NOT_INT
    assert c.err("COPY", "s", "t", "DB", "16") == "ERR DB index is out of range"
    assert c.err("COPY", "s", "t", "DB", "-1") == "ERR DB index is out of range"
    assert c.err("COPY", "s", "t", "DB") == SYNTAX
    assert c.err("COPY", "s", "t", "FOO") == SYNTAX
    assert c.err("COPY", "s") == ARITY % "copy"
    assert c.call("KEYS", "*") == [b"s"]


def test_copy_expired_and_blocked(server):
    c = server.raw()
    reader = server.raw()
    c.call("XADD", "gone", "1-1", "f", "v")
    c.call("PEXPIRE", "gone", "1")
    c.call("XADD", "old", "1-1", "f", "old")
    c.call("PEXPIRE", "old", "1")
    c.call("XADD", "s", "2-2", "f", "v")
    time.sleep(0.02)
    assert c.call("COPY", "gone", "x") == 0           # expired: no source
    assert c.call("COPY", "s", "old") == 1            # expired: no destination to keep
    assert c.call("XRANGE", "old", "-", "+") == [[b"2-2", [b"f", b"v"]]]
    assert c.call("TTL", "old") == -1
    # a reader blocked on the destination's name is served by the copy
    reader.send("XREAD", "BLOCK", "5000", "STREAMS", "t", "0-0")
    wait_until(lambda: blocked_clients(c) == 1, what="1 blocked client")
    assert c.call("COPY", "s", "t") == 1
    assert reader.read() == [[b"t", [[b"2-2", [b"f", b"v"]]]]]


@echd_only("maxdisk is echd's")
@lmdb_only("maxdisk bounds the LMDB map: a backend without capacity admits every write")
def test_copy_that_does_not_fit_fails_alone(server):
    """A COPY runs in a transaction of its own inside the batch: when it cannot fit, it fails
    with the maxdisk error and the commands around it still commit."""
    s = server.spawn("--map-size", "24mb", "--maxdisk", "24mb")
    c = s.raw()
    value = "x" * 1000
    # about 15 MB: below 3/4 of the map, yet a copy cannot fit (the appends to the entries
    # table's last stream fill LMDB's pages whole: three of these entries a page)
    for _ in range(11):
        c.pipeline([("XADD", "big", "*", "v", value) for _ in range(1000)])
    assert c.call("XLEN", "big") == 11000
    replies = c.pipeline([("XADD", "a", "1-1", "f", "v"), ("COPY", "big", "big2"),
                          ("XADD", "b", "1-1", "f", "v")])
    assert replies[0] == b"1-1" and replies[2] == b"1-1", replies
    assert isinstance(replies[1], RespError) and "maxdisk" in replies[1].msg, replies[1]
    assert [c.call("EXISTS", k) for k in ("a", "big2", "b")] == [1, 0, 1]
    assert c.call("XLEN", "big") == 11000
    assert c.call("COPY", "a", "a2") == 1          # a small one still fits
