"""Consumer groups: XGROUP XREADGROUP XACK XPENDING XCLAIM XAUTOCLAIM XINFO GROUPS/CONSUMERS
and XINFO STREAM FULL with groups; groups and the keyspace (DEL, RENAME, FLUSHDB); the partition
rule under concurrency; blocking XREADGROUP; a dead consumer's entries claimed by another; groups
across kill -9.

Every reply and error string is Redis 7.4's.  Where the Redis 7.0 on this machine differs from
Redis 7.4 the test is marked @echd_only and says what 7.0 does.  One echd extension is tested
too (also @echd_only): where Redis answers a NULL `lag` in XINFO GROUPS, echd answers the exact
number of live entries after the group's last-delivered-id.
"""

import json
import signal
import subprocess
import threading
import time

from echdtest import RespConn, RespError, admin_exe, echd_only, fill, timeout, wait_until

TIMEOUT = 60

ARITY = "ERR wrong number of arguments for '%s' command"
INVALID_ID = "ERR Invalid stream ID specified as stream command argument"
NOT_INT = "ERR value is not an integer or out of range"
SYNTAX = "ERR syntax error"
BUSYGROUP = "BUSYGROUP Consumer Group name already exists"
NEEDS_KEY = ("ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you "
             "may want to use the MKSTREAM option to create an empty stream automatically.")
XGROUP_SUBSYNTAX = ("ERR unknown subcommand or wrong number of arguments for '%s'. "
                    "Try XGROUP HELP.")


def XRG_NOGROUP(key, group):
    return ("NOGROUP No such key '%s' or consumer group '%s' in XREADGROUP with GROUP option"
            % (key, group))


def NOGROUP(key, group):
    """XPENDING, XCLAIM, XAUTOCLAIM."""
    return "NOGROUP No such key '%s' or consumer group '%s'" % (key, group)


def XGROUP_NOGROUP(key, group):
    """XGROUP SETID/CREATECONSUMER/DELCONSUMER and XINFO CONSUMERS."""
    return "NOGROUP No such consumer group '%s' for key name '%s'" % (group, key)


DOLLAR_IN_XRG = ("ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the "
                 "history of this consumer by specifying a proper ID, or use the > ID to get new "
                 "messages. The $ ID would just return an empty result set.")


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def e(i, *fv):
    """Entry '<i>-1' as XRANGE/XREADGROUP return it; fields default to f v (fill())."""
    fv = fv or ("f", "v")
    return [("%d-1" % i).encode(), [x.encode() if isinstance(x, str) else x for x in fv]]


def ids(entries):
    return [x[0].decode() for x in entries]


def kv(flat):
    """A RESP2 flat name/value list -> dict with str keys."""
    assert len(flat) % 2 == 0, flat
    return {k.decode(): v for k, v in zip(flat[0::2], flat[1::2])}


def groups(c, key):
    """XINFO GROUPS as a list of dicts (checks the field names and their order)."""
    out = []
    for g in c.call("XINFO", "GROUPS", key):
        assert g[0::2] == [b"name", b"consumers", b"pending", b"last-delivered-id",
                           b"entries-read", b"lag"], g
        out.append(kv(g))
    return out


def group(c, key, name):
    for g in groups(c, key):
        if g["name"] == name.encode():
            return g
    raise AssertionError("no group %r in %r" % (name, groups(c, key)))


def consumers(c, key, grp):
    """XINFO CONSUMERS as a list of dicts; name, pending and idle first (7.4 adds inactive)."""
    out = []
    for x in c.call("XINFO", "CONSUMERS", key, grp):
        assert x[0:6:2] == [b"name", b"pending", b"idle"], x
        out.append(kv(x))
    return out


def pel(c, key, grp, *consumer):
    """Extended XPENDING over the whole group PEL: [(id, consumer, delivery count)]."""
    rows = c.call("XPENDING", key, grp, "-", "+", "1000000", *consumer)
    for r in rows:
        assert isinstance(r[2], int) and r[2] >= 0, r
    return [(r[0].decode(), r[1].decode(), r[3]) for r in rows]


def idle_of(c, key, grp, eid):
    r = c.call("XPENDING", key, grp, eid, eid, "1")
    assert len(r) == 1, r
    return r[0][2]


def full(c, key, *extra):
    """XINFO STREAM FULL with its groups and their consumers as dicts."""
    d = kv(c.call("XINFO", "STREAM", key, "FULL", *extra))
    d["groups"] = [kv(g) for g in d["groups"]]
    for g in d["groups"]:
        # nacked-count (Redis 8.8) follows pel-count; 7.0, the oracle, has none
        names = list(g)
        if "nacked-count" in names:
            assert names.index("nacked-count") == names.index("pel-count") + 1, names
            names.remove("nacked-count")
        assert names == ["name", "last-delivered-id", "entries-read", "lag", "pel-count",
                         "pending", "consumers"], list(g)
        g["consumers"] = [kv(x) for x in g["consumers"]]
    return d


def untimed(d):
    """XINFO STREAM FULL (from full()) without clock readings and radix-tree sizes:
    delivery times, seen-time and active-time (only whether it was ever set is kept)."""
    out = {k: v for k, v in d.items() if not k.startswith("radix-tree") and k != "groups"}
    out["groups"] = []
    for g in d["groups"]:
        g2 = {k: v for k, v in g.items() if k not in ("pending", "consumers")}
        g2["pending"] = [[r[0], r[1], r[3]] for r in g["pending"]]
        g2["consumers"] = []
        for x in g["consumers"]:
            x2 = {k: v for k, v in x.items() if k not in ("seen-time", "active-time", "pending")}
            x2["pending"] = [[r[0], r[2]] for r in x["pending"]]
            if "active-time" in x:
                x2["ever-active"] = x["active-time"] != -1
            g2["consumers"].append(x2)
        out["groups"].append(g2)
    return out


def server_ms(c):
    sec, usec = c.call("TIME")
    return int(sec) * 1000 + int(usec) // 1000


def wait_blocked(server, n=1):
    """Wait until n clients are blocked (so that a following write is seen by them)."""
    c = server.raw()

    def blocked():
        return ("blocked_clients:%d\r\n" % n) in c.call("INFO", "clients").decode()
    wait_until(blocked, what="%d blocked client(s)" % n)
    c.close()


def durable(server):
    """A server of its own whose acknowledged writes survive kill -9: echd as it is, Redis with
    its AOF fsynced before every reply (its equivalent promise)."""
    if server.is_echd:
        return server.spawn()
    return server.spawn("--appendonly", "yes", "--appendfsync", "always")


def setup_read(c, key="s", grp="g", n=5, consumer="c1", count=None):
    """n entries 1-1..n-1, a group at 0, and `consumer` reading them (all, or COUNT count)."""
    fill(c, key, n)
    c.call("XGROUP", "CREATE", key, grp, "0")
    extra = ("COUNT", str(count)) if count else ()
    return c.call("XREADGROUP", "GROUP", grp, consumer, *extra, "STREAMS", key, ">")


# ---------------------------------------------------------------------------
# XGROUP
# ---------------------------------------------------------------------------

def test_xgroup_create(server):
    c = server.raw()
    assert c.err("XGROUP", "CREATE", "s", "g", "$") == NEEDS_KEY
    assert c.err("XGROUP", "CREATE", "s", "g", "0") == NEEDS_KEY
    assert c.call("EXISTS", "s") == 0
    assert c.call_raw("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM") == b"+OK\r\n"
    assert c.call("EXISTS", "s") == 1 and c.call("TYPE", "s") == "stream"
    assert c.call("XLEN", "s") == 0
    assert c.err("XGROUP", "CREATE", "s", "g", "0") == BUSYGROUP
    assert c.err("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM") == BUSYGROUP
    fill(c, "s", 5)
    assert c.call("XGROUP", "CREATE", "s", "zero", "0") == "OK"
    assert c.call("XGROUP", "CREATE", "s", "zerozero", "0-0") == "OK"
    assert c.call("XGROUP", "CREATE", "s", "at3", "3-1") == "OK"
    assert c.call("XGROUP", "CREATE", "s", "incomplete", "3") == "OK"      # 3-0
    assert c.call("XGROUP", "CREATE", "s", "dollar", "$") == "OK"
    assert c.call("XGROUP", "CREATE", "s", "future", "100-7") == "OK"
    # MKSTREAM on an existing stream changes nothing
    assert c.call("xgroup", "create", "s", "mk", "0", "mkstream") == "OK"
    assert c.call("XLEN", "s") == 5
    got = {g["name"].decode(): (g["last-delivered-id"], g["consumers"], g["pending"])
           for g in groups(c, "s")}
    assert got == {"g": (b"0-0", 0, 0), "zero": (b"0-0", 0, 0), "zerozero": (b"0-0", 0, 0),
                   "at3": (b"3-1", 0, 0), "incomplete": (b"3-0", 0, 0),
                   "dollar": (b"5-1", 0, 0), "future": (b"100-7", 0, 0), "mk": (b"0-0", 0, 0)}
    # sorted by name
    assert [g["name"] for g in groups(c, "s")] == sorted(x.encode() for x in got)
    # a group created at '$' reads only what comes later; one at 0 reads everything
    assert c.call_raw("XREADGROUP", "GROUP", "dollar", "c", "STREAMS", "s", ">") == b"*-1\r\n"
    assert ids(c.call("XREADGROUP", "GROUP", "zero", "c", "STREAMS", "s", ">")[0][1]) == [
        "1-1", "2-1", "3-1", "4-1", "5-1"]
    assert ids(c.call("XREADGROUP", "GROUP", "at3", "c", "STREAMS", "s", ">")[0][1]) == [
        "4-1", "5-1"]
    assert ids(c.call("XREADGROUP", "GROUP", "incomplete", "c", "STREAMS", "s", ">")[0][1]) == [
        "3-1", "4-1", "5-1"]
    c.call("XADD", "s", "6-1", "f", "v")
    assert c.call("XREADGROUP", "GROUP", "dollar", "c", "STREAMS", "s", ">") == [[b"s", [e(6)]]]
    assert c.call("XREADGROUP", "GROUP", "future", "c", "STREAMS", "s", ">") is None
    # the group name is binary safe; the empty name is a name
    assert c.call("XGROUP", "CREATE", "s", b"\x00g\xff", "0") == "OK"
    assert c.call("XGROUP", "CREATE", "s", "", "0") == "OK"
    assert c.err("XGROUP", "CREATE", "s", "", "0") == BUSYGROUP
    assert b"\x00g\xff" in [g["name"] for g in groups(c, "s")]
    r = c.call("XINFO", "STREAM", "s")
    assert r[r.index(b"groups") + 1] == 10      # 'groups' count in XINFO STREAM
    # redis-py
    r = server.client()
    assert r.xgroup_create("py", "pg", id="0", mkstream=True) is True
    assert r.xinfo_groups("py")[0]["name"] == "pg"


def test_xgroup_create_entriesread(server):
    c = server.raw()
    fill(c, "s", 5)
    assert c.call("XGROUP", "CREATE", "s", "g2", "2-1", "ENTRIESREAD", "2") == "OK"
    assert c.call("XGROUP", "CREATE", "s", "gm", "0", "ENTRIESREAD", "-1") == "OK"
    assert c.call("XGROUP", "CREATE", "s", "g0", "0", "entriesread", "0", "MKSTREAM") == "OK"
    g2 = group(c, "s", "g2")
    assert g2["entries-read"] == 2 and g2["last-delivered-id"] == b"2-1" and g2["lag"] == 3
    assert group(c, "s", "gm")["entries-read"] is None
    assert group(c, "s", "g0")["entries-read"] == 0
    # reading advances the counter from the value given
    c.call("XREADGROUP", "GROUP", "g2", "c", "COUNT", "2", "STREAMS", "s", ">")
    g2 = group(c, "s", "g2")
    assert g2["entries-read"] == 4 and g2["lag"] == 1 and g2["last-delivered-id"] == b"4-1"
    assert c.err("XGROUP", "CREATE", "s", "x", "0", "ENTRIESREAD", "-2") == (
        "ERR value for ENTRIESREAD must be positive or -1")
    assert c.err("XGROUP", "CREATE", "s", "x", "0", "ENTRIESREAD", "abc") == NOT_INT
    assert c.err("XGROUP", "CREATE", "s", "x", "0", "ENTRIESREAD") == XGROUP_SUBSYNTAX % "CREATE"
    assert c.err("XGROUP", "CREATE", "s", "x", "0", "FOO") == XGROUP_SUBSYNTAX % "CREATE"
    assert c.err("xgroup", "create", "s", "x", "0", "FOO") == XGROUP_SUBSYNTAX % "create"
    assert "x" not in [g["name"].decode() for g in groups(c, "s")]


@echd_only("Redis 8.2.2 clamps ENTRIESREAD; 7.0 keeps the value given")
def test_xgroup_entriesread_clamped(server):
    c = server.raw()
    fill(c, "s", 5)
    c.call("XDEL", "s", "5-1")                          # added stays 5, length 4
    assert c.call("XGROUP", "CREATE", "s", "g", "0", "ENTRIESREAD", "99") == "OK"
    g = group(c, "s", "g")
    assert g["entries-read"] == 5
    assert c.call("XGROUP", "SETID", "s", "g", "2-1", "ENTRIESREAD", "1000") == "OK"
    assert group(c, "s", "g")["entries-read"] == 5
    # lag stays the count of what the group will still get
    assert group(c, "s", "g")["lag"] == 2
    assert c.call("XGROUP", "CREATE", "new", "g", "$", "ENTRIESREAD", "7", "MKSTREAM") == "OK"
    assert group(c, "new", "g")["entries-read"] == 0
    # a value within range is kept
    assert c.call("XGROUP", "SETID", "s", "g", "2-1", "ENTRIESREAD", "3") == "OK"
    assert group(c, "s", "g")["entries-read"] == 3


def test_xgroup_create_bad_ids(server):
    c = server.raw()
    fill(c, "s", 2)
    for bad in ("abc", "1-x", "1-1-1", "-", "+", ">", "*", "", "(1", "18446744073709551616"):
        assert c.err("XGROUP", "CREATE", "s", "g", bad) == INVALID_ID, bad
    # the id is checked before MKSTREAM creates anything
    assert c.err("XGROUP", "CREATE", "new", "g", "abc", "MKSTREAM") == INVALID_ID
    assert c.call("EXISTS", "new") == 0
    assert c.call("XINFO", "GROUPS", "s") == []
    big = "18446744073709551615-18446744073709551615"
    assert c.call("XGROUP", "CREATE", "s", "max", big) == "OK"
    assert group(c, "s", "max")["last-delivered-id"] == big.encode()


def test_xgroup_setid(server):
    c = server.raw()
    setup_read(c, n=5, count=2)                     # c1 has 1-1 2-1
    assert c.call_raw("XGROUP", "SETID", "s", "g", "$") == b"+OK\r\n"
    g = group(c, "s", "g")
    assert g["last-delivered-id"] == b"5-1" and g["lag"] == 0 and g["pending"] == 2
    assert c.call("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">") is None
    assert c.call("XGROUP", "SETID", "s", "g", "3-1") == "OK"
    g = group(c, "s", "g")
    assert g["last-delivered-id"] == b"3-1" and g["entries-read"] is None
    assert c.call("XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", ">") == [[b"s", [e(4), e(5)]]]
    # back to the start: delivered again, ownership and delivery count reset
    assert c.call("XGROUP", "SETID", "s", "g", "0", "ENTRIESREAD", "0") == "OK"
    g = group(c, "s", "g")
    assert g["last-delivered-id"] == b"0-0" and g["entries-read"] == 0 and g["lag"] == 5
    c.call("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", "0")      # 1-1 2-1 -> count 2
    assert pel(c, "s", "g")[:2] == [("1-1", "c1", 2), ("2-1", "c1", 2)]
    assert c.call("XREADGROUP", "GROUP", "g", "c3", "COUNT", "4", "STREAMS", "s", ">") == [
        [b"s", [e(1), e(2), e(3), e(4)]]]
    assert pel(c, "s", "g") == [("1-1", "c3", 1), ("2-1", "c3", 1), ("3-1", "c3", 1),
                                ("4-1", "c3", 1), ("5-1", "c2", 1)]
    g = group(c, "s", "g")
    assert g["entries-read"] == 4 and g["lag"] == 1 and g["pending"] == 5
    assert c.call("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", "0") == [[b"s", []]]
    # SETID takes incomplete ids and ids beyond the stream's end
    assert c.call("XGROUP", "SETID", "s", "g", "7") == "OK"
    assert group(c, "s", "g")["last-delivered-id"] == b"7-0"
    # errors
    assert c.err("XGROUP", "SETID", "s", "nog", "0") == XGROUP_NOGROUP("s", "nog")
    assert c.err("XGROUP", "SETID", "nokey", "g", "0") == NEEDS_KEY
    assert c.err("XGROUP", "SETID", "s", "g", "abc") == INVALID_ID
    assert c.err("XGROUP", "SETID", "s", "g", "0", "ENTRIESREAD", "-5") == (
        "ERR value for ENTRIESREAD must be positive or -1")
    assert c.err("XGROUP", "SETID", "s", "g", "0", "ENTRIESREAD", "x") == NOT_INT
    assert c.err("XGROUP", "SETID", "s", "g", "0", "MKSTREAM") == XGROUP_SUBSYNTAX % "SETID"
    assert c.err("XGROUP", "SETID", "s", "g", "0", "ENTRIESREAD") == XGROUP_SUBSYNTAX % "SETID"
    assert c.err("XGROUP", "SETID", "s", "g", "0", "ENTRIESREAD", "1", "x") == (
        XGROUP_SUBSYNTAX % "SETID")
    assert c.err("XGROUP", "SETID", "s", "g") == ARITY % "xgroup|setid"
    assert group(c, "s", "g")["last-delivered-id"] == b"7-0"
    # an option twice makes too many arguments: SETID takes 5 or 7, CREATE 5 to 8; options
    # are read first, then the key and the group are checked, then the count
    assert c.err("XGROUP", "SETID", "s", "g", "0", "ENTRIESREAD", "1", "ENTRIESREAD", "2") == (
        XGROUP_SUBSYNTAX % "SETID")
    assert c.err("XGROUP", "SETID", "s", "nog", "0", "x") == XGROUP_SUBSYNTAX % "SETID"
    assert c.err("XGROUP", "SETID", "s", "nog", "0", "ENTRIESREAD", "1", "ENTRIESREAD",
                 "2") == XGROUP_NOGROUP("s", "nog")
    assert c.err("XGROUP", "CREATE", "s", "h", "+", "ENTRIESREAD", "MINID", "x", "y") == NOT_INT
    assert c.err("XGROUP", "CREATE", "nokey", "h", "0", "ENTRIESREAD", "1", "ENTRIESREAD",
                 "2") == NEEDS_KEY
    assert c.err("XGROUP", "CREATE", "s", "h", "0", *["MKSTREAM"] * 4) == (
        XGROUP_SUBSYNTAX % "CREATE")
    assert c.err("XGROUP", "CREATE", "s", "h", "0", "ENTRIESREAD", "1", "MKSTREAM",
                 "MKSTREAM") == XGROUP_SUBSYNTAX % "CREATE"
    assert c.err("XGROUP", "CREATE", "nokey", "h", "0", *["MKSTREAM"] * 4) == (
        XGROUP_SUBSYNTAX % "CREATE")
    assert c.call("XGROUP", "CREATE", "s", "h", "0", *["MKSTREAM"] * 3) == "OK"
    assert c.call("EXISTS", "nokey") == 0
    assert group(c, "s", "g")["last-delivered-id"] == b"7-0"
    # SETID also takes "-" and "+"; CREATE does not
    assert c.call("XGROUP", "SETID", "s", "g", "-") == "OK"
    assert group(c, "s", "g")["last-delivered-id"] == b"0-0"
    assert c.call("XGROUP", "SETID", "s", "g", "+") == "OK"
    assert group(c, "s", "g")["last-delivered-id"] == b"18446744073709551615-18446744073709551615"
    assert c.err("XGROUP", "CREATE", "s", "i", "-") == INVALID_ID
    assert c.err("XGROUP", "CREATE", "s", "i", "+") == INVALID_ID


def test_xgroup_destroy(server):
    c = server.raw()
    setup_read(c, n=3)
    c.call("XGROUP", "CREATE", "s", "other", "0")
    assert c.call_raw("XGROUP", "DESTROY", "s", "g") == b":1\r\n"
    assert c.call("XGROUP", "DESTROY", "s", "g") == 0
    assert c.call("XGROUP", "DESTROY", "s", "never") == 0
    assert c.err("XGROUP", "DESTROY", "nokey", "g") == NEEDS_KEY
    assert [g["name"] for g in groups(c, "s")] == [b"other"]
    assert c.err("XPENDING", "s", "g") == NOGROUP("s", "g")
    assert c.err("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">") == XRG_NOGROUP("s", "g")
    assert c.call("XACK", "s", "g", "1-1") == 0
    assert c.call("XLEN", "s") == 3                  # the entries stay
    # a new group of that name starts from scratch
    c.call("XGROUP", "CREATE", "s", "g", "$")
    g = group(c, "s", "g")
    assert (g["consumers"], g["pending"], g["last-delivered-id"]) == (0, 0, b"3-1")
    assert c.call("XINFO", "CONSUMERS", "s", "g") == []
    assert c.err("XGROUP", "DESTROY", "s") == ARITY % "xgroup|destroy"
    assert c.err("XGROUP", "DESTROY", "s", "g", "x") == ARITY % "xgroup|destroy"


def test_xgroup_createconsumer_delconsumer(server):
    c = server.raw()
    fill(c, "s", 6)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    assert c.call_raw("XGROUP", "CREATECONSUMER", "s", "g", "idle") == b":1\r\n"
    assert c.call("XGROUP", "CREATECONSUMER", "s", "g", "idle") == 0
    assert [x["name"] for x in consumers(c, "s", "g")] == [b"idle"]
    assert group(c, "s", "g")["consumers"] == 1
    c.call("XREADGROUP", "GROUP", "g", "a", "COUNT", "3", "STREAMS", "s", ">")
    c.call("XREADGROUP", "GROUP", "g", "b", "COUNT", "2", "STREAMS", "s", ">")
    assert c.call("XGROUP", "CREATECONSUMER", "s", "g", "a") == 0
    assert c.call("XPENDING", "s", "g") == [5, b"1-1", b"5-1", [[b"a", b"3"], [b"b", b"2"]]]
    # DELCONSUMER answers the consumer's pending count; its PEL entries vanish
    assert c.call_raw("XGROUP", "DELCONSUMER", "s", "g", "a") == b":3\r\n"
    assert c.call("XPENDING", "s", "g") == [2, b"4-1", b"5-1", [[b"b", b"2"]]]
    assert pel(c, "s", "g") == [("4-1", "b", 1), ("5-1", "b", 1)]
    assert c.call("XPENDING", "s", "g", "-", "+", "10", "a") == []
    assert c.call("XACK", "s", "g", "1-1", "2-1", "3-1") == 0
    assert [x["name"] for x in consumers(c, "s", "g")] == [b"b", b"idle"]
    g = group(c, "s", "g")
    assert (g["consumers"], g["pending"], g["last-delivered-id"]) == (2, 2, b"5-1")
    assert c.call("XLEN", "s") == 6                   # the entries themselves stay
    # the deleted entries are not new again
    assert c.call("XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", ">") == [[b"s", [e(6)]]]
    assert c.call("XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", "0") == [[b"s", [e(6)]]]
    assert c.call("XGROUP", "DELCONSUMER", "s", "g", "nobody") == 0
    assert c.call("XGROUP", "DELCONSUMER", "s", "g", "idle") == 0
    assert c.call("XGROUP", "DELCONSUMER", "s", "g", "idle") == 0
    assert c.call("XGROUP", "DELCONSUMER", "s", "g", "b") == 2
    assert c.call("XPENDING", "s", "g") == [1, b"6-1", b"6-1", [[b"a", b"1"]]]
    # errors
    for sub in ("CREATECONSUMER", "DELCONSUMER"):
        assert c.err("XGROUP", sub, "s", "nog", "x") == XGROUP_NOGROUP("s", "nog")
        assert c.err("XGROUP", sub, "nokey", "g", "x") == NEEDS_KEY
        assert c.err("XGROUP", sub, "s", "g") == ARITY % ("xgroup|" + sub.lower())
        assert c.err("XGROUP", sub, "s", "g", "x", "y") == ARITY % ("xgroup|" + sub.lower())
    # redis-py
    r = server.client()
    assert r.xgroup_createconsumer("s", "g", "py") == 1
    assert r.xgroup_delconsumer("s", "g", "a") == 1


def test_xgroup_help_and_errors(server):
    c = server.raw()
    c.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    help_ = c.call("XGROUP", "HELP")
    assert isinstance(help_, list) and all(isinstance(x, str) for x in help_), help_
    assert help_[0] == "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    for line in ("CREATE <key> <groupname> <id|$> [option]", "    * MKSTREAM",
                 "    * ENTRIESREAD entries_read",
                 "CREATECONSUMER <key> <groupname> <consumer>",
                 "DELCONSUMER <key> <groupname> <consumer>", "DESTROY <key> <groupname>",
                 "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]", "HELP"):
        assert line in help_, line
    assert c.call("xgroup", "help")[1:] == help_[1:]
    assert c.err("XGROUP", "HELP", "x") == ARITY % "xgroup|help"
    assert c.err("XGROUP") == ARITY % "xgroup"
    assert c.err("XGROUP", "FOO") == "ERR unknown subcommand 'FOO'. Try XGROUP HELP."
    assert c.err("XGROUP", "foo", "s", "g") == "ERR unknown subcommand 'foo'. Try XGROUP HELP."
    for sub, args in (("create", ("s", "g")), ("create", ("s",)), ("create", ()),
                      ("setid", ("s", "g")), ("destroy", ("s",)), ("createconsumer", ("s", "g")),
                      ("delconsumer", ("s", "g"))):
        assert c.err("XGROUP", sub.upper(), *args) == ARITY % ("xgroup|" + sub), (sub, args)
    assert c.err("XGROUP", "CREATE", "s", "g", "0", "MKSTREAM", "ENTRIESREAD", "1", "x") == (
        XGROUP_SUBSYNTAX % "CREATE")


@echd_only("the last HELP line is '    Print this help.' since Redis 7.2 (#10965); "
           "7.0 says 'Prints this help.'")
def test_xgroup_help_text(server):
    c = server.raw()
    assert c.call("XGROUP", "HELP") == [
        "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CREATE <key> <groupname> <id|$> [option]",
        "    Create a new consumer group. Options are:",
        "    * MKSTREAM",
        "      Create the empty stream if it does not exist.",
        "    * ENTRIESREAD entries_read",
        "      Set the group's entries_read counter (internal use).",
        "CREATECONSUMER <key> <groupname> <consumer>",
        "    Create a new consumer in the specified group.",
        "DELCONSUMER <key> <groupname> <consumer>",
        "    Remove the specified consumer.",
        "DESTROY <key> <groupname>",
        "    Remove the specified group.",
        "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
        "    Set the current group ID and entries_read counter.",
        # echd's extension (issue 26), before HELP as Redis orders its lines
        "SETPOLICY <key> <groupname> [ACKWAIT ms] [BACKOFF n ms1 ... msn] [MAXDELIVER n]",
        "          [DEADLETTER key] [MAXACKPENDING n] [RESET]",
        "    Set the group's delivery policy (echd's extension); 0 turns an option off.",
        "HELP",
        "    Print this help."]


# ---------------------------------------------------------------------------
# XREADGROUP
# ---------------------------------------------------------------------------

def test_xreadgroup_new_entries(server):
    c = server.raw()
    fill(c, "s", 5, fields=("k", "x"))
    c.call("XGROUP", "CREATE", "s", "g", "0")
    assert c.call_raw("XREADGROUP", "GROUP", "g", "c1", "COUNT", "2", "STREAMS", "s", ">") == (
        b"*1\r\n*2\r\n$1\r\ns\r\n*2\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nk\r\n$1\r\nx\r\n"
        b"*2\r\n$3\r\n2-1\r\n*2\r\n$1\r\nk\r\n$1\r\nx\r\n")
    g = group(c, "s", "g")
    assert (g["last-delivered-id"], g["entries-read"], g["lag"], g["pending"], g["consumers"]) \
        == (b"2-1", 2, 3, 2, 1)
    assert pel(c, "s", "g") == [("1-1", "c1", 1), ("2-1", "c1", 1)]
    assert idle_of(c, "s", "g", "1-1") < 2000
    # '>' never hands out the same entry twice, whoever asks
    assert c.call("XREADGROUP", "GROUP", "g", "c2", "COUNT", "1", "STREAMS", "s", ">") == [
        [b"s", [e(3, "k", "x")]]]
    assert c.call("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">") == [
        [b"s", [e(4, "k", "x"), e(5, "k", "x")]]]
    g = group(c, "s", "g")
    assert (g["last-delivered-id"], g["entries-read"], g["lag"], g["pending"], g["consumers"]) \
        == (b"5-1", 5, 0, 5, 2)
    assert c.call("XPENDING", "s", "g") == [5, b"1-1", b"5-1", [[b"c1", b"4"], [b"c2", b"1"]]]
    # nothing new: a null array
    assert c.call_raw("XREADGROUP", "GROUP", "g", "c3", "STREAMS", "s", ">") == b"*-1\r\n"
    c.call("XADD", "s", "6-1", "k", "x")
    assert c.call("XREADGROUP", "GROUP", "g", "c3", "COUNT", "0", "STREAMS", "s", ">") == [
        [b"s", [e(6, "k", "x")]]]
    # COUNT 0 or negative: no limit; the last COUNT wins; options in any order, any case
    fill(c, "s", 4, start_ms=7)
    assert ids(c.call("XREADGROUP", "GROUP", "g", "c1", "COUNT", "-1", "STREAMS", "s", ">")[0][1]) \
        == ["7-1", "8-1", "9-1", "10-1"]
    fill(c, "s", 4, start_ms=11)
    assert ids(c.call("xreadgroup", "count", "9", "group", "g", "c1", "count", "2",
                      "streams", "s", ">")[0][1]) == ["11-1", "12-1"]
    # a deleted entry is skipped by '>' (and counted by nobody)
    c.call("XDEL", "s", "13-1")
    assert ids(c.call("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">")[0][1]) == ["14-1"]
    assert ("13-1", "c1", 1) not in pel(c, "s", "g")
    # redis-py
    r = server.client()
    r.xadd("s", {"py": "1"}, id="20-1")
    assert r.xreadgroup("g", "pyc", {"s": ">"}) == [["s", [("20-1", {"py": "1"})]]]


def test_xreadgroup_history(server):
    c = server.raw()
    fill(c, "s", 6)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XREADGROUP", "GROUP", "g", "c1", "COUNT", "3", "STREAMS", "s", ">")
    c.call("XREADGROUP", "GROUP", "g", "c2", "COUNT", "2", "STREAMS", "s", ">")
    before = group(c, "s", "g")
    time.sleep(0.15)
    # an explicit id: the consumer's own pending entries after it, nobody else's
    assert c.call("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", "0") == [
        [b"s", [e(1), e(2), e(3)]]]
    assert c.call("XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", "0-0") == [[b"s", [e(4), e(5)]]]
    # re-reading counts as a delivery: count + 1, idle back to ~0 (Redis does the same)
    assert pel(c, "s", "g") == [("1-1", "c1", 2), ("2-1", "c1", 2), ("3-1", "c1", 2),
                                ("4-1", "c2", 2), ("5-1", "c2", 2)]
    assert idle_of(c, "s", "g", "1-1") < 140
    assert c.call("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", "1-1") == [[b"s", [e(2), e(3)]]]
    assert c.call("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", "2") == [[b"s", [e(2), e(3)]]]
    assert c.call("XREADGROUP", "GROUP", "g", "c1", "COUNT", "1", "STREAMS", "s", "0") == [
        [b"s", [e(1)]]]
    assert pel(c, "s", "g")[:3] == [("1-1", "c1", 3), ("2-1", "c1", 4), ("3-1", "c1", 4)]
    # the group's cursor and counters are untouched by history reads
    after = group(c, "s", "g")
    assert after == before, (before, after)
    # nothing pending after the id: an empty list for the stream, not a null
    assert c.call_raw("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", "3-1") == (
        b"*1\r\n*2\r\n$1\r\ns\r\n*0\r\n")
    assert c.call("XREADGROUP", "GROUP", "g", "newbie", "STREAMS", "s", "0") == [[b"s", []]]
    # an entry deleted while pending: [id, nil], and no delivery is counted for it
    c.call("XDEL", "s", "2-1")
    assert c.call_raw("XREADGROUP", "GROUP", "g", "c1", "COUNT", "2", "STREAMS", "s", "1-1") == (
        b"*1\r\n*2\r\n$1\r\ns\r\n*2\r\n*2\r\n$3\r\n2-1\r\n*-1\r\n"
        b"*2\r\n$3\r\n3-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n")
    assert pel(c, "s", "g")[:3] == [("1-1", "c1", 3), ("2-1", "c1", 4), ("3-1", "c1", 5)]
    # NOACK means nothing to a history read
    assert c.call("XREADGROUP", "GROUP", "g", "c2", "NOACK", "STREAMS", "s", "0") == [
        [b"s", [e(4), e(5)]]]
    # once acknowledged, gone from the history
    c.call("XACK", "s", "g", "1-1", "2-1")
    assert c.call("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", "0") == [[b"s", [e(3)]]]
    # and the history read of a fresh entry (after BLOCK) returns at once
    t0 = time.monotonic()
    assert c.call("XREADGROUP", "GROUP", "g", "c1", "BLOCK", "2000", "STREAMS", "s", "5") == [
        [b"s", []]]
    assert time.monotonic() - t0 < 1.0


def test_xreadgroup_noack(server):
    c = server.raw()
    fill(c, "s", 4)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    assert c.call("XREADGROUP", "GROUP", "g", "c", "COUNT", "3", "NOACK", "STREAMS", "s", ">") == [
        [b"s", [e(1), e(2), e(3)]]]
    g = group(c, "s", "g")
    assert (g["last-delivered-id"], g["entries-read"], g["lag"], g["pending"], g["consumers"]) \
        == (b"3-1", 3, 1, 0, 1)
    assert c.call("XPENDING", "s", "g") == [0, None, None, None]
    assert c.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "0") == [[b"s", []]]
    assert c.call("XACK", "s", "g", "1-1") == 0
    assert c.call("XREADGROUP", "GROUP", "g", "d", "STREAMS", "s", ">") == [[b"s", [e(4)]]]
    assert pel(c, "s", "g") == [("4-1", "d", 1)]
    assert [(x["name"], x["pending"]) for x in consumers(c, "s", "g")] == [(b"c", 0), (b"d", 1)]


@echd_only("since Redis 7.2 XREADGROUP creates the consumer (and sets its seen-time) before "
           "it looks for entries, so also when it gets none or blocks; 7.0 creates it only when "
           "it serves something")
def test_xreadgroup_creates_consumer(server):
    c = server.raw()
    fill(c, "s", 1)
    c.call("XGROUP", "CREATE", "s", "g", "$")
    assert c.call("XREADGROUP", "GROUP", "g", "empty", "STREAMS", "s", ">") is None
    assert c.call("XREADGROUP", "GROUP", "g", "timedout", "BLOCK", "50", "STREAMS", "s", ">") \
        is None
    r = server.raw()
    r.send("XREADGROUP", "GROUP", "g", "waiting", "BLOCK", "0", "STREAMS", "s", ">")
    wait_blocked(server)
    assert [(x["name"], x["pending"], x["inactive"]) for x in consumers(c, "s", "g")] == [
        (b"empty", 0, -1), (b"timedout", 0, -1), (b"waiting", 0, -1)]
    assert group(c, "s", "g")["consumers"] == 3
    c.call("XADD", "s", "2-1", "f", "v")
    assert r.read() == [[b"s", [e(2)]]]


def test_xreadgroup_errors(server):
    c = server.raw()
    fill(c, "s", 2)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    assert c.err("XREADGROUP", "GROUP", "nog", "c", "STREAMS", "s", ">") == XRG_NOGROUP("s", "nog")
    assert c.err("XREADGROUP", "GROUP", "g", "c", "STREAMS", "nokey", ">") == (
        XRG_NOGROUP("nokey", "g"))
    assert c.err("XREADGROUP", "GROUP", "g", "c", "STREAMS", "nokey", "0") == (
        XRG_NOGROUP("nokey", "g"))
    assert c.err("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "$") == DOLLAR_IN_XRG
    assert c.err("XREADGROUP", "COUNT", "1", "BLOCK", "0", "STREAMS", "s", ">") == (
        "ERR Missing GROUP option for XREADGROUP")
    assert c.err("XREADGROUP", "COUNT", "1", "NOACK", "STREAMS", "s", ">") == (
        "ERR Missing GROUP option for XREADGROUP")
    assert c.err("XREADGROUP", "GROUP", "g", "c", "COUNT", "x", "STREAMS", "s", ">") == NOT_INT
    assert c.err("XREADGROUP", "GROUP", "g", "c", "BLOCK", "x", "STREAMS", "s", ">") == (
        "ERR timeout is not an integer or out of range")
    assert c.err("XREADGROUP", "GROUP", "g", "c", "BLOCK", "-1", "STREAMS", "s", ">") == (
        "ERR timeout is negative")
    for bad in ("abc", "-", "1-x", "", "(1"):
        assert c.err("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", bad) == INVALID_ID, bad
    assert c.err("XREADGROUP", "GROUP", "g", "c", "FOO", "STREAMS", "s", ">") == SYNTAX
    assert c.err("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "s", ">") == SYNTAX
    for args in (("GROUP", "g", "c", "STREAMS", "s"), ("GROUP", "g", "STREAMS", "s", ">"),
                 ("GROUP", "g", "c", "NOACK"), ("STREAMS", "s", ">")):
        assert c.err("XREADGROUP", *args) == ARITY % "xreadgroup", args
    # the last of several GROUP options wins
    assert c.err("XREADGROUP", "GROUP", "g", "c", "GROUP", "g2", "c2", "STREAMS", "s", ">") == (
        XRG_NOGROUP("s", "g2"))
    # nothing was delivered by any of these
    g = group(c, "s", "g")
    assert (g["last-delivered-id"], g["pending"]) == (b"0-0", 0)


@echd_only("Redis 7.0 says \"Unbalanced XREAD list of streams: ... an ID or '$' ...\"; "
           "7.4 quotes the command name and asks XREADGROUP for '>'")
def test_xreadgroup_unbalanced(server):
    c = server.raw()
    fill(c, "s", 1)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    msg = ("ERR Unbalanced 'xreadgroup' list of streams: for each stream key an ID or '>' "
           "must be specified.")
    assert c.err("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "t", ">") == msg
    assert c.err("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "a", "b", "c",
                 ">", ">") == msg
    assert group(c, "s", "g")["pending"] == 0


@echd_only("'+' in XREADGROUP has its own error since Redis 7.4 (XREAD learnt '+'); "
           "7.0 calls it an invalid stream ID")
def test_xreadgroup_plus(server):
    c = server.raw()
    fill(c, "s", 1)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    assert c.err("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "+") == (
        "ERR The + ID is meaningless in the context of XREADGROUP: you want to read the history "
        "of this consumer by specifying a proper ID, or use the > ID to get new messages. The + "
        "ID would just return an empty result set.")


def test_xreadgroup_several_streams(server):
    c = server.raw()
    fill(c, "a", 2, fields=("k", "a"))
    fill(c, "b", 1, fields=("k", "b"))
    c.call("XGROUP", "CREATE", "a", "g", "0")
    c.call("XGROUP", "CREATE", "b", "g", "$")
    # a missing group on any stream fails the whole command before anything is delivered
    assert c.err("XREADGROUP", "GROUP", "g", "c", "STREAMS", "a", "b", "nokey", ">", ">", ">") \
        == XRG_NOGROUP("nokey", "g")
    assert group(c, "a", "g")["pending"] == 0
    # '>' leaves out streams without new entries
    assert c.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", "a", "b", ">", ">") == [
        [b"a", [e(1, "k", "a"), e(2, "k", "a")]]]
    assert c.call_raw("XREADGROUP", "GROUP", "g", "c", "STREAMS", "a", "b", ">", ">") == b"*-1\r\n"
    # a history read lists every stream asked for
    assert c.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", "a", "b", "0", "0") == [
        [b"a", [e(1, "k", "a"), e(2, "k", "a")]], [b"b", []]]
    c.call("XADD", "b", "2-1", "k", "b")
    # history and new mixed; COUNT applies per stream
    assert c.call("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "a", "b", "0", ">") \
        == [[b"a", [e(1, "k", "a")]], [b"b", [e(2, "k", "b")]]]
    assert pel(c, "b", "g") == [("2-1", "c", 1)]
    assert pel(c, "a", "g") == [("1-1", "c", 3), ("2-1", "c", 2)]


def test_xreadgroup_resp3(server):
    c = server.raw()
    c.call("HELLO", "3")
    fill(c, "s", 2)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    assert c.call_raw("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "s", ">") == (
        b"%1\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n")
    assert c.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "0") == {b"s": [e(1)]}
    c.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")
    assert c.call_raw("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">") == b"_\r\n"
    assert c.call_raw("XREADGROUP", "GROUP", "g", "c", "BLOCK", "50", "STREAMS", "s", ">") == (
        b"_\r\n")
    info = c.call("XINFO", "GROUPS", "s")
    assert isinstance(info, list) and isinstance(info[0], dict), info
    assert info[0][b"name"] == b"g" and info[0][b"pending"] == 2 and info[0][b"lag"] == 0
    assert c.call("XINFO", "CONSUMERS", "s", "g")[0][b"pending"] == 2
    assert c.call("XPENDING", "s", "g") == [2, b"1-1", b"2-1", [[b"c", b"2"]]]


# ---------------------------------------------------------------------------
# XACK
# ---------------------------------------------------------------------------

def test_xack(server):
    c = server.raw()
    setup_read(c, n=5, count=3)                     # c1: 1 2 3
    c.call("XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", ">")   # c2: 4 5
    assert c.call_raw("XACK", "s", "g", "1-1") == b":1\r\n"
    assert c.call("XACK", "s", "g", "1-1") == 0
    # counts the ids really pending; duplicates and unknown ids count nothing
    assert c.call("XACK", "s", "g", "2-1", "2-1", "9-9", "4-1", "1-1") == 2
    # any consumer's entries, whoever acknowledges (XACK names no consumer)
    assert c.call("XPENDING", "s", "g") == [2, b"3-1", b"5-1", [[b"c1", b"1"], [b"c2", b"1"]]]
    assert c.call("XACK", "s", "g", "3") == 0              # incomplete id: 3-0
    assert c.call("XACK", "nokey", "g", "3-1") == 0
    assert c.call("XACK", "s", "nog", "3-1") == 0
    assert c.call("EXISTS", "nokey") == 0
    # ids are all validated first: nothing is acknowledged when one is bad
    assert c.err("XACK", "s", "g", "3-1", "abc") == INVALID_ID
    assert c.err("XACK", "s", "g", "-") == INVALID_ID
    assert c.err("XACK", "s", "g", "+") == INVALID_ID
    assert c.call("XPENDING", "s", "g")[0] == 2
    assert c.err("XACK", "s", "g") == ARITY % "xack"
    assert c.err("XACK", "s") == ARITY % "xack"
    # acknowledging an entry deleted from the stream works
    c.call("XDEL", "s", "3-1")
    assert c.call("XACK", "s", "g", "3-1", "5-1") == 2
    assert c.call("XPENDING", "s", "g") == [0, None, None, None]
    assert [(x["name"], x["pending"]) for x in consumers(c, "s", "g")] == [(b"c1", 0), (b"c2", 0)]
    # the group keeps its cursor
    assert group(c, "s", "g")["last-delivered-id"] == b"5-1"
    # redis-py
    r = server.client()
    r.xadd("s", {"a": "b"}, id="6-1")
    r.xreadgroup("g", "c1", {"s": ">"})
    assert r.xack("s", "g", "6-1", "7-1") == 1


# ---------------------------------------------------------------------------
# XPENDING
# ---------------------------------------------------------------------------

def test_xpending_summary(server):
    c = server.raw()
    fill(c, "s", 6)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    assert c.call_raw("XPENDING", "s", "g") == b"*4\r\n:0\r\n$-1\r\n$-1\r\n*-1\r\n"
    c.call("XREADGROUP", "GROUP", "g", "bob", "COUNT", "2", "STREAMS", "s", ">")
    c.call("XREADGROUP", "GROUP", "g", "alice", "COUNT", "3", "STREAMS", "s", ">")
    c.call("XGROUP", "CREATECONSUMER", "s", "g", "carol")
    # consumers by name, counts as bulk strings; consumers without pending entries left out
    assert c.call_raw("XPENDING", "s", "g") == (
        b"*4\r\n:5\r\n$3\r\n1-1\r\n$3\r\n5-1\r\n*2\r\n*2\r\n$5\r\nalice\r\n$1\r\n3\r\n"
        b"*2\r\n$3\r\nbob\r\n$1\r\n2\r\n")
    c.call("XACK", "s", "g", "1-1", "5-1")
    assert c.call("XPENDING", "s", "g") == [3, b"2-1", b"4-1", [[b"alice", b"2"], [b"bob", b"1"]]]
    c.call("XACK", "s", "g", "2-1")
    assert c.call("XPENDING", "s", "g") == [2, b"3-1", b"4-1", [[b"alice", b"2"]]]
    assert c.err("XPENDING", "s", "nog") == NOGROUP("s", "nog")
    assert c.err("XPENDING", "nokey", "g") == NOGROUP("nokey", "g")
    assert c.err("XPENDING", "s") == ARITY % "xpending"
    r = server.client()
    assert r.xpending("s", "g") == {"pending": 2, "min": "3-1", "max": "4-1",
                                    "consumers": [{"name": "alice", "pending": 2}]}


def test_xpending_extended(server):
    c = server.raw()
    fill(c, "s", 8)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XREADGROUP", "GROUP", "g", "a", "COUNT", "3", "STREAMS", "s", ">")   # 1 2 3
    time.sleep(0.3)
    c.call("XREADGROUP", "GROUP", "g", "b", "COUNT", "3", "STREAMS", "s", ">")   # 4 5 6
    rows = c.call("XPENDING", "s", "g", "-", "+", "10")
    assert [(r[0], r[1], r[3]) for r in rows] == [
        (b"1-1", b"a", 1), (b"2-1", b"a", 1), (b"3-1", b"a", 1),
        (b"4-1", b"b", 1), (b"5-1", b"b", 1), (b"6-1", b"b", 1)]
    assert all(250 <= r[2] < 5000 for r in rows[:3]), rows
    assert all(0 <= r[2] < 250 for r in rows[3:]), rows
    raw = c.call_raw("XPENDING", "s", "g", "4-1", "4-1", "1")
    assert raw.startswith(b"*1\r\n*4\r\n$3\r\n4-1\r\n$1\r\nb\r\n:") and raw.endswith(b"\r\n:1\r\n")
    # ranges: inclusive, exclusive, incomplete ids
    assert ids(c.call("XPENDING", "s", "g", "2-1", "4-1", "10")) == ["2-1", "3-1", "4-1"]
    assert ids(c.call("XPENDING", "s", "g", "(2-1", "(4-1", "10")) == ["3-1"]
    # "(3" is after 3-0: 3-1 is in
    assert ids(c.call("XPENDING", "s", "g", "(3", "+", "10")) == ["3-1", "4-1", "5-1", "6-1"]
    assert ids(c.call("XPENDING", "s", "g", "(3-1", "+", "10")) == ["4-1", "5-1", "6-1"]
    assert ids(c.call("XPENDING", "s", "g", "3", "5", "10")) == ["3-1", "4-1", "5-1"]
    assert ids(c.call("XPENDING", "s", "g", "-", "(0", "10")) == []
    assert c.call("XPENDING", "s", "g", "5-1", "2-1", "10") == []
    # count
    assert ids(c.call("XPENDING", "s", "g", "-", "+", "2")) == ["1-1", "2-1"]
    assert c.call_raw("XPENDING", "s", "g", "-", "+", "0") == b"*0\r\n"
    assert c.call("XPENDING", "s", "g", "-", "+", "-1") == []
    # consumer filter
    assert ids(c.call("XPENDING", "s", "g", "-", "+", "10", "b")) == ["4-1", "5-1", "6-1"]
    assert ids(c.call("XPENDING", "s", "g", "-", "(6-1", "1", "b")) == ["4-1"]
    assert c.call("XPENDING", "s", "g", "-", "+", "10", "nobody") == []
    # IDLE: only entries idle at least that long
    assert ids(c.call("XPENDING", "s", "g", "IDLE", "250", "-", "+", "10")) == [
        "1-1", "2-1", "3-1"]
    assert ids(c.call("XPENDING", "s", "g", "idle", "250", "-", "+", "10", "b")) == []
    assert ids(c.call("XPENDING", "s", "g", "IDLE", "0", "-", "+", "10", "b")) == [
        "4-1", "5-1", "6-1"]
    assert ids(c.call("XPENDING", "s", "g", "IDLE", "250", "(1-1", "+", "1")) == ["2-1"]
    assert c.call("XPENDING", "s", "g", "IDLE", "100000", "-", "+", "10") == []
    # redis-py
    r = server.client()
    got = r.xpending_range("s", "g", min="-", max="+", count=10, consumername="a")
    assert [(x["message_id"], x["consumer"], x["times_delivered"]) for x in got] == [
        ("1-1", "a", 1), ("2-1", "a", 1), ("3-1", "a", 1)]


def test_xpending_errors(server):
    c = server.raw()
    setup_read(c, n=2)
    assert c.err("XPENDING", "s", "nog", "-", "+", "10") == NOGROUP("s", "nog")
    assert c.err("XPENDING", "nokey", "g", "-", "+", "10") == NOGROUP("nokey", "g")
    assert c.err("XPENDING", "s", "g", "-") == SYNTAX
    assert c.err("XPENDING", "s", "g", "-", "+") == SYNTAX
    assert c.err("XPENDING", "s", "g", "IDLE", "5") == SYNTAX
    assert c.err("XPENDING", "s", "g", "IDLE", "5", "-", "+") == SYNTAX
    assert c.err("XPENDING", "s", "g", "-", "+", "abc") == NOT_INT
    assert c.err("XPENDING", "s", "g", "IDLE", "abc", "-", "+", "10") == NOT_INT
    assert c.err("XPENDING", "s", "g", "abc", "+", "10") == INVALID_ID
    assert c.err("XPENDING", "s", "g", "-", "abc", "10") == INVALID_ID
    assert c.err("XPENDING", "s", "g", "(", "+", "10") == INVALID_ID
    assert c.err("XPENDING", "s", "g", "(18446744073709551615-18446744073709551615", "+", "10") \
        == "ERR invalid start ID for the interval"
    assert c.err("XPENDING", "s", "g", "-", "(0-0", "10") == "ERR invalid end ID for the interval"


# ---------------------------------------------------------------------------
# XCLAIM
# ---------------------------------------------------------------------------

def test_xclaim_basic(server):
    c = server.raw()
    setup_read(c, n=4, count=3)                          # c1: 1 2 3
    # min-idle not reached: nothing moves
    assert c.call_raw("XCLAIM", "s", "g", "c2", "100000", "1-1") == b"*0\r\n"
    assert pel(c, "s", "g")[0] == ("1-1", "c1", 1)
    time.sleep(0.2)
    assert c.call("XCLAIM", "s", "g", "c2", "150", "1-1", "2-1") == [e(1), e(2)]
    assert pel(c, "s", "g") == [("1-1", "c2", 2), ("2-1", "c2", 2), ("3-1", "c1", 1)]
    assert idle_of(c, "s", "g", "1-1") < 150
    assert c.call("XPENDING", "s", "g") == [3, b"1-1", b"3-1", [[b"c1", b"1"], [b"c2", b"2"]]]
    # just claimed: idle ~0 now, so another claim with that min-idle fails
    assert c.call("XCLAIM", "s", "g", "c3", "150", "1-1") == []
    # min-idle 0 (or negative) claims whatever the idle time; reply in argument order
    assert c.call("XCLAIM", "s", "g", "c3", "0", "3-1", "1-1") == [e(3), e(1)]
    assert c.call("XCLAIM", "s", "g", "c3", "-5", "2-1") == [e(2)]
    assert pel(c, "s", "g") == [("1-1", "c3", 3), ("2-1", "c3", 3), ("3-1", "c3", 2)]
    # ids not pending (never delivered, acknowledged, unknown) are ignored
    c.call("XACK", "s", "g", "3-1")
    assert c.call("XCLAIM", "s", "g", "c1", "0", "3-1", "4-1", "9-9", "1-1") == [e(1)]
    assert pel(c, "s", "g") == [("1-1", "c1", 4), ("2-1", "c3", 3)]
    # claiming from oneself still counts a delivery
    assert c.call("XCLAIM", "s", "g", "c1", "0", "1-1") == [e(1)]
    assert pel(c, "s", "g")[0] == ("1-1", "c1", 5)
    assert [(x["name"], x["pending"]) for x in consumers(c, "s", "g")] == [
        (b"c1", 1), (b"c2", 0), (b"c3", 1)]
    # the claimer's history now holds the entry
    assert c.call("XREADGROUP", "GROUP", "g", "c3", "STREAMS", "s", "0") == [[b"s", [e(2)]]]
    r = server.client()
    assert r.xclaim("s", "g", "py", 0, ["2-1"]) == [("2-1", {"f": "v"})]


def test_xclaim_options(server):
    c = server.raw()
    setup_read(c, n=5, count=3)                          # c1: 1 2 3
    # JUSTID: ids only, no delivery counted
    assert c.call_raw("XCLAIM", "s", "g", "c2", "0", "1-1", "JUSTID") == b"*1\r\n$3\r\n1-1\r\n"
    assert pel(c, "s", "g")[0] == ("1-1", "c2", 1)
    # IDLE sets the idle time; RETRYCOUNT the delivery count (it beats JUSTID's 'no bump')
    assert c.call("XCLAIM", "s", "g", "c3", "0", "2-1", "IDLE", "5000000", "RETRYCOUNT", "7",
                  "JUSTID") == [b"2-1"]
    rows = c.call("XPENDING", "s", "g", "2-1", "2-1", "1")
    assert rows[0][1] == b"c3" and rows[0][3] == 7 and 5000000 <= rows[0][2] < 5010000, rows
    assert c.call("XCLAIM", "s", "g", "c3", "0", "2-1", "RETRYCOUNT", "0") == [e(2)]
    assert pel(c, "s", "g")[1] == ("2-1", "c3", 0)
    # a negative RETRYCOUNT is as if not given
    assert c.call("XCLAIM", "s", "g", "c3", "0", "2-1", "RETRYCOUNT", "-1") == [e(2)]
    assert pel(c, "s", "g")[1] == ("2-1", "c3", 1)
    # TIME: the delivery time as a unix time in ms
    now = server_ms(c)
    assert c.call("XCLAIM", "s", "g", "c3", "0", "3-1", "TIME", str(now - 60000), "JUSTID") == [
        b"3-1"]
    assert 60000 <= idle_of(c, "s", "g", "3-1") < 70000
    # a time in the future, or a negative idle time, means now
    c.call("XCLAIM", "s", "g", "c3", "0", "3-1", "TIME", str(now + 10 ** 8), "JUSTID")
    assert idle_of(c, "s", "g", "3-1") < 5000
    c.call("XCLAIM", "s", "g", "c3", "0", "3-1", "IDLE", "-100000", "JUSTID")
    assert idle_of(c, "s", "g", "3-1") < 5000
    # IDLE then min-idle: the claim after that sees the idle time set
    c.call("XCLAIM", "s", "g", "c3", "0", "3-1", "IDLE", "100000", "JUSTID")
    assert c.call("XCLAIM", "s", "g", "c4", "90000", "3-1", "JUSTID") == [b"3-1"]
    # FORCE: creates the PEL entry of an entry never delivered (but only if it exists)
    assert c.call("XCLAIM", "s", "g", "c4", "0", "5-1") == []
    assert c.call("XCLAIM", "s", "g", "c4", "0", "5-1", "9-9", "FORCE", "JUSTID") == [b"5-1"]
    assert [x[:2] for x in pel(c, "s", "g")] == [("1-1", "c2"), ("2-1", "c3"), ("3-1", "c4"),
                                                  ("5-1", "c4")]
    assert group(c, "s", "g")["last-delivered-id"] == b"3-1"     # FORCE moves no cursor
    # LASTID moves the group's cursor forward, never back
    assert c.call("XCLAIM", "s", "g", "c4", "0", "1-1", "LASTID", "4-1", "JUSTID") == [b"1-1"]
    assert group(c, "s", "g")["last-delivered-id"] == b"4-1"
    assert c.call("XCLAIM", "s", "g", "c4", "0", "1-1", "LASTID", "2-1", "JUSTID") == [b"1-1"]
    assert group(c, "s", "g")["last-delivered-id"] == b"4-1"
    # ... even when nothing is claimed
    assert c.call("XCLAIM", "s", "g", "c4", "100000", "1-1", "LASTID", "5-1") == []
    assert group(c, "s", "g")["last-delivered-id"] == b"5-1"
    assert c.call("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">") is None
    # options are case-insensitive and may repeat
    assert c.call("XCLAIM", "s", "g", "c1", "0", "1-1", "justid", "force", "idle", "5",
                  "idle", "10", "JUSTID") == [b"1-1"]


def test_xclaim_extreme_times(server):
    """IDLE and TIME at the ends of the 64-bit range are bogus times and mean now, and a
    min-idle-time at the end of the range claims nothing; none of it may overflow (UBSan
    stops the sanitizer build at a signed overflow, so the server would die here)."""
    c = server.raw()
    setup_read(c, n=3)                                   # c1: 1 2 3
    lo, hi = str(-2 ** 63), str(2 ** 63 - 1)
    for opt, v in (("IDLE", str(-2 ** 63 + 1)), ("IDLE", lo), ("IDLE", hi),
                   ("TIME", lo), ("TIME", hi), ("TIME", "-1")):
        c.call("XCLAIM", "s", "g", "c1", "0", "1-1", "IDLE", "100000", "JUSTID")
        assert c.call("XCLAIM", "s", "g", "c2", "0", "1-1", opt, v, "JUSTID") == [b"1-1"], v
        assert idle_of(c, "s", "g", "1-1") < 5000, (opt, v)
    # a min-idle-time nobody reaches, in each command that takes one
    assert c.call("XCLAIM", "s", "g", "c3", hi, "1-1", "2-1") == []
    assert c.call("XAUTOCLAIM", "s", "g", "c3", hi, "0") == [b"0-0", [], []]
    assert c.call("XPENDING", "s", "g", "IDLE", hi, "-", "+", "10") == []
    assert c.call("XCLAIM", "s", "g", "c3", lo, "2-1", "JUSTID") == [b"2-1"]
    assert c.call("XAUTOCLAIM", "s", "g", "c3", lo, "0", "JUSTID")[1] == [b"1-1", b"2-1", b"3-1"]
    assert len(c.call("XPENDING", "s", "g", "IDLE", lo, "-", "+", "10")) == 3
    assert c.call("PING") == "PONG"


def test_xclaim_force_delivery_count(server):
    """A PEL entry that FORCE creates starts like a delivery (count 1), and the claim then
    counts as usual: 2 without JUSTID, 1 with JUSTID (Redis' streamCreateNACK + bump)."""
    c = server.raw()
    fill(c, "s", 3)
    c.call("XGROUP", "CREATE", "s", "g", "$")
    assert c.call("XCLAIM", "s", "g", "c", "0", "1-1", "FORCE", "JUSTID") == [b"1-1"]
    assert c.call("XCLAIM", "s", "g", "c", "0", "2-1", "FORCE") == [e(2)]
    assert pel(c, "s", "g") == [("1-1", "c", 1), ("2-1", "c", 2)]
    # FORCE with a min-idle time claims an entry nobody had (nothing to be idle)
    assert c.call("XCLAIM", "s", "g", "c", "100000", "3-1", "FORCE", "JUSTID") == [b"3-1"]
    assert pel(c, "s", "g")[2] == ("3-1", "c", 1)


def test_read_new_over_forced_claim(server):
    """'>' delivers an entry that XCLAIM FORCE made pending beyond the cursor: the row moves
    to the reader with count 1 and the counts stay exact (echd looks rows up only then)."""
    c = server.raw()
    fill(c, "s", 4)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    assert c.call("XCLAIM", "s", "g", "a", "0", "3-1", "FORCE", "JUSTID") == [b"3-1"]
    assert c.call("XREADGROUP", "GROUP", "g", "b", "STREAMS", "s", ">") == [
        [b"s", [e(1), e(2), e(3), e(4)]]]
    assert pel(c, "s", "g") == [("1-1", "b", 1), ("2-1", "b", 1), ("3-1", "b", 1),
                                ("4-1", "b", 1)]
    assert c.call("XPENDING", "s", "g") == [4, b"1-1", b"4-1", [[b"b", b"4"]]]
    assert {x["name"]: x["pending"] for x in consumers(c, "s", "g")} == {b"a": 0, b"b": 4}
    assert c.call("XACK", "s", "g", "1-1", "2-1", "3-1", "4-1") == 4
    assert group(c, "s", "g")["pending"] == 0


def test_xclaim_deleted_entries(server):
    c = server.raw()
    setup_read(c, n=4)                                   # c1: 1 2 3 4
    c.call("XDEL", "s", "2-1", "3-1")
    # a deleted entry is not returned and its PEL entry goes away
    assert c.call("XCLAIM", "s", "g", "c2", "0", "1-1", "2-1") == [e(1)]
    assert pel(c, "s", "g") == [("1-1", "c2", 2), ("3-1", "c1", 1), ("4-1", "c1", 1)]
    # even if the min-idle time is not reached, and with JUSTID or FORCE
    assert c.call("XCLAIM", "s", "g", "c2", "100000", "3-1", "FORCE", "JUSTID") == []
    assert pel(c, "s", "g") == [("1-1", "c2", 2), ("4-1", "c1", 1)]
    assert c.call("XPENDING", "s", "g") == [2, b"1-1", b"4-1", [[b"c1", b"1"], [b"c2", b"1"]]]
    assert c.call("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", "0") == [[b"s", [e(4)]]]
    # an entry trimmed away likewise
    c.call("XTRIM", "s", "MAXLEN", "0")
    assert c.call("XPENDING", "s", "g")[0] == 2             # XTRIM leaves the PEL alone
    assert c.call("XCLAIM", "s", "g", "c2", "0", "4-1", "JUSTID") == []
    assert pel(c, "s", "g") == [("1-1", "c2", 2)]


def test_xclaim_errors(server):
    c = server.raw()
    setup_read(c, n=2)
    assert c.err("XCLAIM", "s", "nog", "c", "0", "1-1") == NOGROUP("s", "nog")
    assert c.err("XCLAIM", "nokey", "g", "c", "0", "1-1") == NOGROUP("nokey", "g")
    assert c.err("XCLAIM", "s", "g", "c", "abc", "1-1") == (
        "ERR Invalid min-idle-time argument for XCLAIM")
    assert c.err("XCLAIM", "s", "g", "c", "0", "abc") == "ERR Unrecognized XCLAIM option 'abc'"
    assert c.err("XCLAIM", "s", "g", "c", "0", "1-1", "FOO") == (
        "ERR Unrecognized XCLAIM option 'FOO'")
    assert c.err("XCLAIM", "s", "g", "c", "0", "1-1", "IDLE") == (
        "ERR Unrecognized XCLAIM option 'IDLE'")
    # ids after the first option are options too
    assert c.err("XCLAIM", "s", "g", "c", "0", "1-1", "JUSTID", "2-1") == (
        "ERR Unrecognized XCLAIM option '2-1'")
    assert c.err("XCLAIM", "s", "g", "c", "0", "1-1", "IDLE", "x") == (
        "ERR Invalid IDLE option argument for XCLAIM")
    assert c.err("XCLAIM", "s", "g", "c", "0", "1-1", "TIME", "x") == (
        "ERR Invalid TIME option argument for XCLAIM")
    assert c.err("XCLAIM", "s", "g", "c", "0", "1-1", "RETRYCOUNT", "x") == (
        "ERR Invalid RETRYCOUNT option argument for XCLAIM")
    assert c.err("XCLAIM", "s", "g", "c", "0", "1-1", "LASTID", "x") == INVALID_ID
    assert c.err("XCLAIM", "s", "g", "c", "0") == ARITY % "xclaim"
    # nothing was claimed by any of these (all or nothing)
    assert pel(c, "s", "g") == [("1-1", "c1", 1), ("2-1", "c1", 1)]
    assert group(c, "s", "g")["last-delivered-id"] == b"2-1"


# ---------------------------------------------------------------------------
# XAUTOCLAIM
# ---------------------------------------------------------------------------

def test_xautoclaim_cursor(server):
    c = server.raw()
    setup_read(c, n=7)                                   # c1: 1..7
    assert c.call_raw("XAUTOCLAIM", "s", "g", "c2", "100000", "0") == (
        b"*3\r\n$3\r\n0-0\r\n*0\r\n*0\r\n")
    # COUNT pages through the PEL; the cursor is the next id to look at, 0-0 at the end
    assert c.call("XAUTOCLAIM", "s", "g", "c2", "0", "0", "COUNT", "3") == [
        b"4-1", [e(1), e(2), e(3)], []]
    assert c.call("XAUTOCLAIM", "s", "g", "c2", "0", "4-1", "COUNT", "3", "JUSTID") == [
        b"7-1", [b"4-1", b"5-1", b"6-1"], []]
    assert c.call("XAUTOCLAIM", "s", "g", "c2", "0", "7-1", "COUNT", "3") == [b"0-0", [e(7)], []]
    # delivery counts: +1 per claim, JUSTID none
    assert pel(c, "s", "g") == [("1-1", "c2", 2), ("2-1", "c2", 2), ("3-1", "c2", 2),
                                ("4-1", "c2", 1), ("5-1", "c2", 1), ("6-1", "c2", 1),
                                ("7-1", "c2", 2)]
    # the start id: exclusive and incomplete forms, '-'; the default COUNT is 100
    assert c.call("XAUTOCLAIM", "s", "g", "c3", "0", "(5-1", "JUSTID") == [
        b"0-0", [b"6-1", b"7-1"], []]
    assert c.call("XAUTOCLAIM", "s", "g", "c3", "0", "5", "COUNT", "1", "JUSTID") == [
        b"6-1", [b"5-1"], []]
    assert c.call("XAUTOCLAIM", "s", "g", "c3", "0", "-", "COUNT", "1", "JUSTID") == [
        b"2-1", [b"1-1"], []]
    assert c.call("XAUTOCLAIM", "s", "g", "c3", "0", "+") == [b"0-0", [], []]
    assert c.call("XPENDING", "s", "g") == [7, b"1-1", b"7-1", [[b"c2", b"3"], [b"c3", b"4"]]]
    # min-idle: only entries idle long enough move; the rest stay with their owner
    time.sleep(0.3)
    c.call("XCLAIM", "s", "g", "c1", "0", "2-1", "4-1", "JUSTID")     # idle ~0 again
    assert c.call("XAUTOCLAIM", "s", "g", "c4", "250", "0", "JUSTID") == [
        b"0-0", [b"1-1", b"3-1", b"5-1", b"6-1", b"7-1"], []]
    assert [x[:2] for x in pel(c, "s", "g")] == [
        ("1-1", "c4"), ("2-1", "c1"), ("3-1", "c4"), ("4-1", "c1"), ("5-1", "c4"),
        ("6-1", "c4"), ("7-1", "c4")]
    r = server.client()
    got = r.xautoclaim("s", "g", "py", 0, "0-0", count=1)
    assert got[0] == "2-1" and got[1] == [("1-1", {"f": "v"})], got


def test_xautoclaim_deleted_entries(server):
    c = server.raw()
    setup_read(c, n=6)                                    # c1: 1..6
    c.call("XDEL", "s", "2-1", "3-1", "5-1")
    # deleted entries go to the third element and out of the PEL; they count against COUNT
    assert c.call("XAUTOCLAIM", "s", "g", "c2", "0", "0", "COUNT", "2") == [
        b"3-1", [e(1)], [b"2-1"]]
    assert c.call("XAUTOCLAIM", "s", "g", "c2", "0", "3-1", "COUNT", "2", "JUSTID") == [
        b"5-1", [b"4-1"], [b"3-1"]]
    assert c.call("XAUTOCLAIM", "s", "g", "c2", "100000", "5-1") == [b"0-0", [], [b"5-1"]]
    assert pel(c, "s", "g") == [("1-1", "c2", 2), ("4-1", "c2", 1), ("6-1", "c1", 1)]
    assert c.call("XPENDING", "s", "g") == [3, b"1-1", b"6-1", [[b"c1", b"1"], [b"c2", b"2"]]]
    c.call("XDEL", "s", "1-1", "4-1", "6-1")
    assert c.call("XAUTOCLAIM", "s", "g", "c3", "0", "0") == [
        b"0-0", [], [b"1-1", b"4-1", b"6-1"]]
    assert c.call("XPENDING", "s", "g") == [0, None, None, None]


def test_xautoclaim_scan_limit(server):
    """At most COUNT*10 PEL entries are looked at per call; the cursor says where to go on."""
    c = server.raw()
    setup_read(c, n=30)
    assert c.call("XAUTOCLAIM", "s", "g", "c2", "100000", "0", "COUNT", "1") == [b"11-1", [], []]
    assert c.call("XAUTOCLAIM", "s", "g", "c2", "100000", "0", "COUNT", "2") == [b"21-1", [], []]
    assert c.call("XAUTOCLAIM", "s", "g", "c2", "100000", "21-1", "COUNT", "2") == [
        b"0-0", [], []]
    assert c.call("XPENDING", "s", "g")[3] == [[b"c1", b"30"]]


def test_xautoclaim_errors(server):
    c = server.raw()
    setup_read(c, n=2)
    assert c.err("XAUTOCLAIM", "s", "nog", "c", "0", "0") == NOGROUP("s", "nog")
    assert c.err("XAUTOCLAIM", "nokey", "g", "c", "0", "0") == NOGROUP("nokey", "g")
    for bad in ("0", "-1", "abc", "1.5"):
        assert c.err("XAUTOCLAIM", "s", "g", "c", "0", "0", "COUNT", bad) == (
            "ERR COUNT must be > 0"), bad
    assert c.err("XAUTOCLAIM", "s", "g", "c", "abc", "0") == (
        "ERR Invalid min-idle-time argument for XAUTOCLAIM")
    assert c.err("XAUTOCLAIM", "s", "g", "c", "0", "abc") == INVALID_ID
    assert c.err("XAUTOCLAIM", "s", "g", "c", "0", "(18446744073709551615-18446744073709551615") \
        == "ERR invalid start ID for the interval"
    assert c.err("XAUTOCLAIM", "s", "g", "c", "0", "0", "FOO") == SYNTAX
    assert c.err("XAUTOCLAIM", "s", "g", "c", "0", "0", "COUNT") == SYNTAX
    assert c.err("XAUTOCLAIM", "s", "g", "c", "0", "0", "JUSTID", "x") == SYNTAX
    assert c.err("XAUTOCLAIM", "s", "g", "c", "0") == ARITY % "xautoclaim"
    assert pel(c, "s", "g") == [("1-1", "c1", 1), ("2-1", "c1", 1)]


@echd_only("since Redis 7.2 XCLAIM and XAUTOCLAIM create the consumer (and update its "
           "seen-time) even when they claim nothing; 7.0 creates it only when it gets an entry")
def test_claim_creates_consumer(server):
    c = server.raw()
    setup_read(c, n=2)
    assert c.call("XCLAIM", "s", "g", "x1", "100000", "1-1") == []
    assert c.call("XCLAIM", "s", "g", "x2", "0", "9-9") == []
    assert c.call("XAUTOCLAIM", "s", "g", "x3", "100000", "0") == [b"0-0", [], []]
    got = {x["name"]: (x["pending"], x["inactive"]) for x in consumers(c, "s", "g")}
    assert got == {b"c1": (2, got[b"c1"][1]), b"x1": (0, -1), b"x2": (0, -1), b"x3": (0, -1)}
    assert group(c, "s", "g")["consumers"] == 4


# ---------------------------------------------------------------------------
# XINFO GROUPS / CONSUMERS / STREAM FULL
# ---------------------------------------------------------------------------

def test_xinfo_groups_lifecycle(server):
    c = server.raw()
    assert c.err("XINFO", "GROUPS", "nokey") == "ERR no such key"
    assert c.err("XINFO", "GROUPS") == ARITY % "xinfo|groups"
    assert c.err("XINFO", "GROUPS", "s", "x") == ARITY % "xinfo|groups"
    c.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    assert c.call_raw("XINFO", "GROUPS", "s") == (
        b"*1\r\n*12\r\n$4\r\nname\r\n$1\r\ng\r\n$9\r\nconsumers\r\n:0\r\n$7\r\npending\r\n:0\r\n"
        b"$17\r\nlast-delivered-id\r\n$3\r\n0-0\r\n$12\r\nentries-read\r\n$-1\r\n"
        b"$3\r\nlag\r\n:0\r\n")

    def state():
        g = group(c, "s", "g")
        return (g["consumers"], g["pending"], g["last-delivered-id"], g["entries-read"], g["lag"])
    fill(c, "s", 5)
    assert state() == (0, 0, b"0-0", None, 5)
    c.call("XREADGROUP", "GROUP", "g", "a", "COUNT", "2", "STREAMS", "s", ">")
    assert state() == (1, 2, b"2-1", 2, 3)
    c.call("XADD", "s", "6-1", "f", "v")
    assert state() == (1, 2, b"2-1", 2, 4)
    # deleting before the cursor changes no lag
    c.call("XDEL", "s", "1-1")
    assert state() == (1, 2, b"2-1", 2, 4)
    c.call("XREADGROUP", "GROUP", "g", "b", "COUNT", "1", "STREAMS", "s", ">")
    assert state() == (2, 3, b"3-1", 3, 3)
    c.call("XDEL", "s", "2-1")
    assert state() == (2, 3, b"3-1", 3, 3)
    c.call("XREADGROUP", "GROUP", "g", "b", "NOACK", "STREAMS", "s", ">")
    assert state() == (2, 3, b"6-1", 6, 0)
    c.call("XACK", "s", "g", "1-1", "3-1")
    assert state() == (2, 1, b"6-1", 6, 0)
    fill(c, "s", 3, start_ms=7)
    assert state() == (2, 1, b"6-1", 6, 3)
    c.call("XGROUP", "CREATECONSUMER", "s", "g", "c")
    c.call("XGROUP", "DELCONSUMER", "s", "g", "a")
    assert state() == (2, 0, b"6-1", 6, 3)
    # a second group, at the end; groups listed by name
    c.call("XGROUP", "CREATE", "s", "a-group", "$")
    assert [g["name"] for g in groups(c, "s")] == [b"a-group", b"g"]
    assert group(c, "s", "a-group")["lag"] == 0
    c.call("XADD", "s", "10-1", "f", "v")
    assert group(c, "s", "g")["lag"] == 4
    c.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")
    assert state() == (2, 4, b"10-1", 10, 0)
    # redis-py
    r = server.client()
    info = {g["name"]: g for g in r.xinfo_groups("s")}
    assert info["g"]["pending"] == 4 and info["g"]["lag"] == 0


@echd_only("echd extension: where Redis answers a NULL lag (an XDEL in the unread range, a "
           "group set to an arbitrary id), echd answers the exact number of live entries "
           "after the group's last-delivered-id")
def test_xinfo_groups_exact_lag(server):
    c = server.raw()
    fill(c, "s", 10)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XREADGROUP", "GROUP", "g", "a", "COUNT", "3", "STREAMS", "s", ">")   # cursor 3-1
    assert group(c, "s", "g")["lag"] == 7
    c.call("XDEL", "s", "5-1")              # Redis: NULL from here on
    assert group(c, "s", "g")["lag"] == 6
    c.call("XDEL", "s", "9-1", "2-1")
    assert group(c, "s", "g")["lag"] == 5   # 4 6 7 8 10
    c.call("XREADGROUP", "GROUP", "g", "a", "COUNT", "2", "STREAMS", "s", ">")   # 4 6
    g = group(c, "s", "g")
    assert g["last-delivered-id"] == b"6-1" and g["lag"] == 3
    c.call("XADD", "s", "11-1", "f", "v")
    assert group(c, "s", "g")["lag"] == 4
    c.call("XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", ">")
    assert group(c, "s", "g")["lag"] == 0
    # groups created or set at an arbitrary id
    c.call("XGROUP", "CREATE", "s", "mid", "6-1")
    assert group(c, "s", "mid")["lag"] == 4  # 7 8 10 11
    c.call("XGROUP", "SETID", "s", "mid", "7-5")
    assert group(c, "s", "mid")["lag"] == 3
    c.call("XGROUP", "SETID", "s", "mid", "0")
    assert group(c, "s", "mid")["lag"] == 8  # 1 3 4 6 7 8 10 11
    c.call("XDEL", "s", "10-1")
    assert group(c, "s", "mid")["lag"] == 7 and group(c, "s", "g")["lag"] == 0
    c.call("XREADGROUP", "GROUP", "mid", "x", "COUNT", "3", "STREAMS", "s", ">")
    assert group(c, "s", "mid")["lag"] == 4
    # a group created at '$' of a stream that has entries (Redis: NULL after the next XADD)
    c.call("XGROUP", "CREATE", "s", "end", "$")
    c.call("XADD", "s", "12-1", "f", "v")
    assert group(c, "s", "end")["lag"] == 1 and group(c, "s", "end")["entries-read"] is None
    c.call("XGROUP", "DESTROY", "s", "end")
    c.call("XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", ">")
    # XINFO STREAM FULL says the same
    assert [(g["name"], g["lag"]) for g in full(c, "s")["groups"]] == [(b"g", 0), (b"mid", 5)]


@echd_only("echd counts the lag exactly after trimming; Redis 7.0 answers entries_added - "
           "entries_read there (lag 4 where one entry is left), 7.4 fixed only some shapes")
def test_xinfo_groups_lag_after_trimming(server):
    """The lag is the number of entries the group will still be given, whatever removed
    entries before or after its cursor: XTRIM MAXLEN and MINID, XADD with MAXLEN, XDEL, a
    cursor before the first entry, at the last one, and an ENTRIESREAD that lies. echo-admin
    (live and offline) shows the same."""
    c = server.raw()

    def lag(grp):
        return group(c, "s", grp)["lag"]

    def live_after(cursor):
        ms, seq = (int(x) for x in cursor.split("-"))
        return len(c.call("XRANGE", "s", "(%d-%d" % (ms, seq), "+"))
    # the case: five entries, the first read, trimmed to one
    fill(c, "s", 5)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XREADGROUP", "GROUP", "g", "a", "COUNT", "1", "STREAMS", "s", ">")
    assert c.call("XTRIM", "s", "MAXLEN", "1") == 4
    assert lag("g") == 1
    assert c.call("XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", ">") == [[b"s", [e(5)]]]
    g = group(c, "s", "g")
    assert (g["lag"], g["entries-read"]) == (0, 5), g      # Redis 7.0: lag 3, entries-read 2
    # new entries after that count one each
    fill(c, "s", 4, start_ms=6)                                  # 5..9
    assert lag("g") == 4
    # XDEL after the cursor, then before it
    c.call("XREADGROUP", "GROUP", "g", "a", "COUNT", "1", "STREAMS", "s", ">")   # cursor 6-1
    c.call("XDEL", "s", "8-1")
    assert lag("g") == 2                                         # 7 9
    c.call("XDEL", "s", "5-1")
    assert lag("g") == 2
    # XTRIM MINID up to the cursor, and past it
    c.call("XTRIM", "s", "MINID", "6-1")
    assert lag("g") == 2
    c.call("XTRIM", "s", "MINID", "9-1")
    assert lag("g") == 1                                         # 9
    # XADD with MAXLEN trimming past the cursor
    c.call("XADD", "s", "MAXLEN", "2", "10-1", "f", "v")
    c.call("XADD", "s", "MAXLEN", "2", "11-1", "f", "v")
    assert lag("g") == 2                                         # 10 11
    # a group whose cursor is before the first entry; one at the last; one set at a
    # deleted id with an entries_read that is plainly wrong
    c.call("XGROUP", "CREATE", "s", "zero", "0")
    c.call("XGROUP", "CREATE", "s", "end", "$")
    c.call("XGROUP", "CREATE", "s", "liar", "8-1", "ENTRIESREAD", "1000")
    assert (lag("zero"), lag("end"), lag("liar")) == (2, 0, 2)
    c.call("XTRIM", "s", "MAXLEN", "0")
    assert (lag("g"), lag("zero"), lag("end"), lag("liar")) == (0, 0, 0, 0)
    # every lag is the live entries after the cursor, here and in echo-admin
    fill(c, "s", 4, start_ms=20)
    c.call("XDEL", "s", "21-1")
    c.call("XGROUP", "SETID", "s", "liar", "20-1", "ENTRIESREAD", "7")
    want = {}
    for grp in groups(c, "s"):
        cursor = grp["last-delivered-id"].decode()
        assert grp["lag"] == live_after(cursor), grp
        want[grp["name"].decode()] = grp["lag"]
    assert want == {"end": 3, "g": 3, "liar": 2, "zero": 3}
    for where in (["-p", str(server.port)], server.offline_args()):
        p = subprocess.run([admin_exe(server.exe)] + where + ["--json", "groups", "s"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert {g["name"]: g["lag"] for g in json.loads(p.stdout)["groups"]} == want, where


def test_xinfo_consumers(server):
    c = server.raw()
    fill(c, "s", 5)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    assert c.call_raw("XINFO", "CONSUMERS", "s", "g") == b"*0\r\n"
    c.call("XGROUP", "CREATECONSUMER", "s", "g", "zed")
    c.call("XREADGROUP", "GROUP", "g", "bob", "COUNT", "2", "STREAMS", "s", ">")
    time.sleep(0.3)
    c.call("XREADGROUP", "GROUP", "g", "alice", "COUNT", "1", "STREAMS", "s", ">")
    got = consumers(c, "s", "g")
    assert [(x["name"], x["pending"]) for x in got] == [(b"alice", 1), (b"bob", 2), (b"zed", 0)]
    idle = {x["name"]: x["idle"] for x in got}
    assert 0 <= idle[b"alice"] < 250 <= idle[b"bob"] < 10000 and idle[b"zed"] >= 250, idle
    # an attempt with nothing to read still counts as the consumer being seen
    c.call("XREADGROUP", "GROUP", "g", "bob", "COUNT", "1", "STREAMS", "s", "9-9")
    assert {x["name"]: x["idle"] for x in consumers(c, "s", "g")}[b"bob"] < 250
    c.call("XACK", "s", "g", "1-1")
    c.call("XCLAIM", "s", "g", "alice", "0", "2-1")
    assert [(x["name"], x["pending"]) for x in consumers(c, "s", "g")] == [
        (b"alice", 2), (b"bob", 0), (b"zed", 0)]
    r = server.client()
    assert [(x["name"], x["pending"]) for x in r.xinfo_consumers("s", "g")] == [
        ("alice", 2), ("bob", 0), ("zed", 0)]


def test_xinfo_consumers_errors(server):
    c = server.raw()
    c.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    assert c.err("XINFO", "CONSUMERS", "s", "nog") == XGROUP_NOGROUP("s", "nog")
    assert c.err("XINFO", "CONSUMERS", "nokey", "g") == "ERR no such key"
    assert c.err("XINFO", "CONSUMERS", "s") == ARITY % "xinfo|consumers"
    assert c.err("XINFO", "CONSUMERS", "s", "g", "x") == ARITY % "xinfo|consumers"


@echd_only("XINFO CONSUMERS has 'inactive' (and 'idle' means the last attempt) since "
           "Redis 7.2; 7.0 answers name, pending, idle only")
def test_xinfo_consumers_inactive(server):
    c = server.raw()
    fill(c, "s", 5)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XGROUP", "CREATECONSUMER", "s", "g", "never")
    c.call("XREADGROUP", "GROUP", "g", "reader", "COUNT", "2", "STREAMS", "s", ">")
    c.call("XREADGROUP", "GROUP", "g", "empty", "STREAMS", "s", "0")
    raw = c.call_raw("XINFO", "CONSUMERS", "s", "g")
    assert raw.startswith(b"*3\r\n*8\r\n$4\r\nname\r\n$5\r\nempty\r\n$7\r\npending\r\n:0\r\n"
                          b"$4\r\nidle\r\n:"), raw
    got = {x["name"]: x for x in consumers(c, "s", "g")}
    for x in got.values():
        assert list(x) == ["name", "pending", "idle", "inactive"], x
    assert got[b"never"]["inactive"] == -1 and got[b"empty"]["inactive"] == -1
    assert 0 <= got[b"reader"]["inactive"] < 250
    time.sleep(0.3)
    # an attempt that gets nothing: idle resets, inactive does not
    assert c.call("XREADGROUP", "GROUP", "g", "reader", "COUNT", "1", "STREAMS", "s", "9") == [
        [b"s", []]]
    x = {x["name"]: x for x in consumers(c, "s", "g")}[b"reader"]
    assert x["idle"] < 250 and x["inactive"] >= 300, x
    # a claim that gets something: both reset
    time.sleep(0.3)
    c.call("XCLAIM", "s", "g", "never", "0", "1-1")
    x = {x["name"]: x for x in consumers(c, "s", "g")}[b"never"]
    assert x["idle"] < 250 and 0 <= x["inactive"] < 250, x
    # XAUTOCLAIM that gets nothing: seen, not active
    time.sleep(0.3)
    c.call("XAUTOCLAIM", "s", "g", "reader", "100000", "0")
    x = {x["name"]: x for x in consumers(c, "s", "g")}[b"reader"]
    assert x["idle"] < 250 and x["inactive"] >= 600, x
    # a read of new entries: active
    c.call("XREADGROUP", "GROUP", "g", "reader", "COUNT", "1", "STREAMS", "s", ">")
    x = {x["name"]: x for x in consumers(c, "s", "g")}[b"reader"]
    assert x["idle"] < 250 and x["inactive"] < 250, x


@echd_only("'inactive' is Redis 7.2+: it counts reads that put entries into the PEL, which a "
           "NOACK read does not (7.4 sets active-time only when it creates a PEL entry)")
def test_xinfo_consumers_noack_is_not_activity(server):
    c = server.raw()
    fill(c, "s", 3)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    assert len(c.call("XREADGROUP", "GROUP", "g", "n", "NOACK", "STREAMS", "s", ">")[0][1]) == 3
    x = consumers(c, "s", "g")[0]
    assert x["name"] == b"n" and x["pending"] == 0 and x["inactive"] == -1, x


def test_xinfo_stream_full_groups(server):
    c = server.raw()
    fill(c, "s", 6)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XGROUP", "CREATE", "s", "empty", "$")
    c.call("XGROUP", "CREATECONSUMER", "s", "g", "idle")
    c.call("XREADGROUP", "GROUP", "g", "a", "COUNT", "3", "STREAMS", "s", ">")   # 1 2 3
    c.call("XREADGROUP", "GROUP", "g", "b", "COUNT", "2", "STREAMS", "s", ">")   # 4 5
    c.call("XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", "2-1")               # 3: count 2
    before = server_ms(c)
    d = full(c, "s")
    now = server_ms(c)
    assert d["length"] == 6 and d["entries-added"] == 6 and d["last-generated-id"] == b"6-1"
    assert [g["name"] for g in d["groups"]] == [b"empty", b"g"]
    gg = d["groups"][1]
    assert (gg["last-delivered-id"], gg["entries-read"], gg["lag"], gg["pel-count"]) == (
        b"5-1", 5, 1, 5)
    assert [(r[0], r[1], r[3]) for r in gg["pending"]] == [
        (b"1-1", b"a", 1), (b"2-1", b"a", 1), (b"3-1", b"a", 2), (b"4-1", b"b", 1),
        (b"5-1", b"b", 1)]
    # delivery times are unix times in ms
    assert all(before - 10000 <= r[2] <= now for r in gg["pending"]), gg["pending"]
    assert [x["name"] for x in gg["consumers"]] == [b"a", b"b", b"idle"]
    for x in gg["consumers"]:
        assert before - 10000 <= x["seen-time"] <= now, x
        assert [k for k in x if k != "active-time"] == ["name", "seen-time", "pel-count",
                                                         "pending"], x
    cons = {x["name"]: x for x in gg["consumers"]}
    assert cons[b"a"]["pel-count"] == 3 and cons[b"b"]["pel-count"] == 2
    assert [(r[0], r[2]) for r in cons[b"a"]["pending"]] == [(b"1-1", 1), (b"2-1", 1), (b"3-1", 2)]
    assert cons[b"a"]["pending"][0][1] == gg["pending"][0][2]    # the same delivery time
    assert cons[b"idle"]["pel-count"] == 0 and cons[b"idle"]["pending"] == []
    ge = d["groups"][0]
    assert (ge["last-delivered-id"], ge["lag"], ge["pel-count"], ge["pending"],
            ge["consumers"]) == (b"6-1", 0, 0, [], [])
    # COUNT limits the entries and every PEL listing, not the counts; COUNT 0: everything
    d2 = full(c, "s", "COUNT", "2")
    assert ids(d2["entries"]) == ["1-1", "2-1"]
    g2 = d2["groups"][1]
    assert g2["pel-count"] == 5 and ids(g2["pending"]) == ["1-1", "2-1"]
    c2 = {x["name"]: x for x in g2["consumers"]}
    assert c2[b"a"]["pel-count"] == 3 and [r[0] for r in c2[b"a"]["pending"]] == [b"1-1", b"2-1"]
    d0 = full(c, "s", "COUNT", "0")
    assert len(d0["entries"]) == 6 and len(d0["groups"][1]["pending"]) == 5
    # an entry deleted while pending stays in the PEL listings
    c.call("XDEL", "s", "2-1")
    assert ids(full(c, "s")["groups"][1]["pending"]) == ["1-1", "2-1", "3-1", "4-1", "5-1"]
    # RESP3: maps
    c.call("HELLO", "3")
    m = c.call("XINFO", "STREAM", "s", "FULL")
    assert isinstance(m, dict) and isinstance(m[b"groups"][1], dict)
    assert isinstance(m[b"groups"][1][b"consumers"][0], dict)
    assert m[b"groups"][1][b"pel-count"] == 5


@echd_only("XINFO STREAM FULL lists each consumer's active-time since Redis 7.2")
def test_xinfo_stream_full_active_time(server):
    c = server.raw()
    fill(c, "s", 2)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XGROUP", "CREATECONSUMER", "s", "g", "idle")
    t0 = server_ms(c)
    c.call("XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", ">")
    t1 = server_ms(c)
    cons = {x["name"]: x for x in full(c, "s")["groups"][0]["consumers"]}
    for x in cons.values():
        assert list(x) == ["name", "seen-time", "active-time", "pel-count", "pending"], x
    assert cons[b"idle"]["active-time"] == -1
    assert t0 <= cons[b"a"]["active-time"] <= t1 and t0 <= cons[b"a"]["seen-time"] <= t1


def test_xinfo_help_mentions_groups(server):
    c = server.raw()
    help_ = c.call("XINFO", "HELP")
    assert "CONSUMERS <key> <groupname>" in help_ and "GROUPS <key>" in help_, help_


# ---------------------------------------------------------------------------
# the keyspace: DEL, RENAME, FLUSHDB, XTRIM, XDEL
# ---------------------------------------------------------------------------

def test_del_drops_groups(server):
    c = server.raw()
    setup_read(c, n=3)
    assert c.call("DEL", "s") == 1
    assert c.err("XPENDING", "s", "g") == NOGROUP("s", "g")
    assert c.err("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">") == XRG_NOGROUP("s", "g")
    c.call("XADD", "s", "1-1", "f", "v")
    assert c.call("XINFO", "GROUPS", "s") == []
    r = c.call("XINFO", "STREAM", "s")
    assert r[r.index(b"groups") + 1] == 0
    assert c.err("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", "0") == XRG_NOGROUP("s", "g")
    # a group of the same name is new
    c.call("XGROUP", "CREATE", "s", "g", "0")
    assert c.call("XPENDING", "s", "g") == [0, None, None, None]
    assert c.call("XINFO", "CONSUMERS", "s", "g") == []


def test_rename_keeps_groups(server):
    c = server.raw()
    setup_read(c, n=3, count=2)
    before = untimed(full(c, "s"))
    assert c.call("RENAME", "s", "t") == "OK"
    assert untimed(full(c, "t")) == before
    assert c.call("XPENDING", "t", "g") == [2, b"1-1", b"2-1", [[b"c1", b"2"]]]
    assert c.call("XREADGROUP", "GROUP", "g", "c2", "STREAMS", "t", ">") == [[b"t", [e(3)]]]
    assert c.err("XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", ">") == XRG_NOGROUP("s", "g")
    # renamed onto a stream with groups of its own: those go
    fill(c, "u", 1)
    c.call("XGROUP", "CREATE", "u", "ug", "0")
    assert c.call("RENAME", "t", "u") == "OK"
    assert [g["name"] for g in groups(c, "u")] == [b"g"]
    assert group(c, "u", "g")["pending"] == 3
    # RENAMENX keeps them too
    assert c.call("RENAMENX", "u", "v") == 1
    assert group(c, "v", "g")["pending"] == 3


def test_flushdb_drops_groups(server):
    c = server.raw()
    setup_read(c, n=2)
    c.call("SELECT", "1")
    setup_read(c, key="other", n=2)
    assert c.call("FLUSHDB") == "OK"
    assert c.err("XPENDING", "other", "g") == NOGROUP("other", "g")
    c.call("SELECT", "0")
    assert c.call("XPENDING", "s", "g")[0] == 2                 # the other db keeps its own
    assert c.call("FLUSHALL") == "OK"
    assert c.err("XPENDING", "s", "g") == NOGROUP("s", "g")
    c.call("XADD", "s", "1-1", "f", "v")
    assert c.call("XINFO", "GROUPS", "s") == []


def test_xdel_xtrim_leave_the_pel(server):
    c = server.raw()
    setup_read(c, n=5)
    c.call("XDEL", "s", "2-1")
    c.call("XTRIM", "s", "MAXLEN", "2")                          # 1-1 3-1 go
    assert c.call("XPENDING", "s", "g") == [5, b"1-1", b"5-1", [[b"c1", b"5"]]]
    assert c.call("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", "0") == [
        [b"s", [[b"1-1", None], [b"2-1", None], [b"3-1", None], e(4), e(5)]]]
    assert c.call("XACK", "s", "g", "1-1", "2-1") == 2
    assert c.call("XPENDING", "s", "g")[0] == 3


# ---------------------------------------------------------------------------
# the partition rule
# ---------------------------------------------------------------------------

@timeout(180)
def test_partition_four_consumers(server):
    """10,000 entries drained by 4 concurrent consumers (XREADGROUP COUNT 50 + XACK): every
    entry reaches exactly one consumer."""
    n, workers = 10000, 4
    c = server.raw()
    for start in range(1, n + 1, 1000):
        fill(c, "q", 1000, start_ms=start)
    c.call("XGROUP", "CREATE", "q", "g", "0")
    got = [[] for _ in range(workers)]
    errors = []
    go = threading.Event()

    def work(w):
        conn = None
        try:
            conn = RespConn(server.port, timeout=30)
            go.wait(10)
            for _ in range(n):                           # bounded; ends at the first null
                r = conn.call("XREADGROUP", "GROUP", "g", "w%d" % w, "COUNT", "50",
                              "STREAMS", "q", ">")
                if r is None:
                    return
                batch = [x[0] for x in r[0][1]]
                assert 0 < len(batch) <= 50, r
                got[w].extend(batch)
                acked = conn.call("XACK", "q", "g", *batch)
                assert acked == len(batch), (w, acked, len(batch))
        except Exception as ex:                          # reported by the main thread
            errors.append((w, repr(ex)))
        finally:
            if conn:
                conn.close()

    threads = [threading.Thread(target=work, args=(w,), daemon=True) for w in range(workers)]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join(150)
    assert not any(t.is_alive() for t in threads), "a consumer thread did not finish"
    assert not errors, errors
    every = [x for g in got for x in g]
    assert len(every) == n, (len(every), [len(g) for g in got])
    assert set(every) == {b"%d-1" % i for i in range(1, n + 1)}
    for i in range(workers):
        for j in range(i + 1, workers):
            both = set(got[i]) & set(got[j])
            assert not both, (i, j, sorted(both)[:10])
    for g in got:
        assert g == sorted(g, key=lambda x: int(x.split(b"-")[0])), "out of order"
    assert sum(1 for g in got if g) >= 2, [len(g) for g in got]
    assert c.call("XPENDING", "q", "g") == [0, None, None, None]
    g = group(c, "q", "g")
    assert (g["last-delivered-id"], g["entries-read"], g["lag"], g["consumers"]) == (
        b"10000-1", n, 0, workers)


# ---------------------------------------------------------------------------
# blocking
# ---------------------------------------------------------------------------

def test_block_woken_by_xadd(server):
    w = server.raw()
    r = server.raw()
    w.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    r.send("XREADGROUP", "GROUP", "g", "alice", "BLOCK", "5000", "STREAMS", "s", ">")
    wait_blocked(server)
    t0 = time.monotonic()
    assert w.call("XADD", "s", "1-1", "k", "v") == b"1-1"
    assert r.read() == [[b"s", [[b"1-1", [b"k", b"v"]]]]]
    assert time.monotonic() - t0 < 2.0
    # the delivery is the group's: the PEL, the cursor, the consumer
    assert pel(w, "s", "g") == [("1-1", "alice", 1)]
    g = group(w, "s", "g")
    assert (g["last-delivered-id"], g["entries-read"], g["lag"], g["pending"]) == (
        b"1-1", 1, 0, 1)
    # BLOCK 0 waits as long as it takes; COUNT applies; NOACK leaves no PEL entry
    r.send("XREADGROUP", "GROUP", "g", "bob", "COUNT", "1", "BLOCK", "0", "NOACK",
           "STREAMS", "s", ">")
    wait_blocked(server)
    time.sleep(0.2)
    w.pipeline([("XADD", "s", "2-1", "a", "1"), ("XADD", "s", "3-1", "b", "2")])
    assert r.read() == [[b"s", [[b"2-1", [b"a", b"1"]]]]]
    assert pel(w, "s", "g") == [("1-1", "alice", 1)]
    assert r.call("XREADGROUP", "GROUP", "g", "bob", "STREAMS", "s", ">") == [
        [b"s", [[b"3-1", [b"b", b"2"]]]]]
    # entries already there: no blocking at all
    w.call("XADD", "s", "4-1", "c", "3")
    t0 = time.monotonic()
    assert r.call("XREADGROUP", "GROUP", "g", "bob", "BLOCK", "5000", "STREAMS", "s", ">") == [
        [b"s", [[b"4-1", [b"c", b"3"]]]]]
    assert time.monotonic() - t0 < 1.0
    # an XADD to another stream does not wake it; one to a second stream asked for does
    w.call("XGROUP", "CREATE", "s2", "g", "$", "MKSTREAM")
    r.send("XREADGROUP", "GROUP", "g", "bob", "BLOCK", "5000", "STREAMS", "s", "s2", ">", ">")
    wait_blocked(server)
    w.call("XADD", "elsewhere", "*", "f", "v")
    w.call("XADD", "s2", "9-1", "x", "y")
    assert r.read() == [[b"s2", [[b"9-1", [b"x", b"y"]]]]]
    assert pel(w, "s2", "g") == [("9-1", "bob", 1)]


def test_block_timeout(server):
    c = server.raw()
    c.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    t0 = time.monotonic()
    assert c.call_raw("XREADGROUP", "GROUP", "g", "c", "BLOCK", "200", "STREAMS", "s", ">") == (
        b"*-1\r\n")
    assert 0.15 <= time.monotonic() - t0 < 3.0
    assert group(c, "s", "g")["pending"] == 0
    assert c.call("PING") == "PONG"
    r = server.client()
    assert not r.xreadgroup("g", "c", {"s": ">"}, block=50)


def test_block_two_consumers_one_entry(server):
    a = server.raw()
    b = server.raw()
    w = server.raw()
    w.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    a.send("XREADGROUP", "GROUP", "g", "a", "BLOCK", "1500", "STREAMS", "s", ">")
    b.send("XREADGROUP", "GROUP", "g", "b", "BLOCK", "1500", "STREAMS", "s", ">")
    wait_blocked(server, 2)
    w.call("XADD", "s", "1-1", "f", "v")
    ra, rb = a.read(), b.read()
    replies = [x for x in (ra, rb) if x is not None]
    assert replies == [[[b"s", [e(1)]]]], (ra, rb)
    winner = "a" if ra is not None else "b"
    assert pel(w, "s", "g") == [("1-1", winner, 1)]
    g = group(w, "s", "g")
    assert (g["last-delivered-id"], g["pending"]) == (b"1-1", 1)


def test_block_client_disconnects(server):
    w = server.raw()
    r = server.raw()
    w.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    r.send("XREADGROUP", "GROUP", "g", "gone", "BLOCK", "0", "STREAMS", "s", ">")
    wait_blocked(server)
    r.close()
    wait_blocked(server, 0)
    w.call("XADD", "s", "1-1", "f", "v")
    # nobody was served: the entry is still new to the group
    assert w.call("XPENDING", "s", "g") == [0, None, None, None]
    assert w.call("XREADGROUP", "GROUP", "g", "other", "STREAMS", "s", ">") == [[b"s", [e(1)]]]
    assert pel(w, "s", "g") == [("1-1", "other", 1)]


@echd_only("Redis 7.2+ re-runs a blocked XREADGROUP when its key or group goes, which answers "
           "the usual -NOGROUP; 7.0 answers '-UNBLOCKED the stream key no longer exists' "
           "(DEL, FLUSHALL, FLUSHDB, RENAME) or '-NOGROUP the consumer group this client was "
           "blocked on no longer exists' (XGROUP DESTROY)")
def test_block_nogroup_when_deleted(server):
    actions = [("DEL", "s"), ("XGROUP", "DESTROY", "s", "g"), ("FLUSHALL",), ("FLUSHDB",),
               ("RENAME", "s", "t"), ("UNLINK", "s"), ("MOVE", "s", "1")]
    w = server.raw()
    for action in actions:
        w.call("FLUSHALL")
        w.call("XADD", "s", "1-1", "f", "v")
        w.call("XGROUP", "CREATE", "s", "g", "$")
        r = server.raw()
        r.send("XREADGROUP", "GROUP", "g", "c", "BLOCK", "5000", "STREAMS", "s", ">")
        wait_blocked(server)
        t0 = time.monotonic()
        w.call(*action)
        got = r.read()
        assert got == RespError(XRG_NOGROUP("s", "g")), (action, got)
        assert time.monotonic() - t0 < 2.0, action
        assert r.call("PING") == "PONG"
        r.close()
    # likewise without a timeout (BLOCK 0)
    w.call("FLUSHALL")
    w.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    r = server.raw()
    r.send("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">")
    wait_blocked(server)
    w.call("DEL", "s")
    assert r.read() == RespError(XRG_NOGROUP("s", "g"))


# ---------------------------------------------------------------------------
# a consumer that dies
# ---------------------------------------------------------------------------

def test_dead_consumer_entries_claimed(server):
    w = server.raw()
    fill(w, "jobs", 8)
    w.call("XGROUP", "CREATE", "jobs", "workers", "0")
    dying = server.raw()
    got = dying.call("XREADGROUP", "GROUP", "workers", "dying", "COUNT", "5", "STREAMS", "jobs",
                     ">")
    assert ids(got[0][1]) == ["1-1", "2-1", "3-1", "4-1", "5-1"]
    dying.call("XACK", "jobs", "workers", "1-1")
    dying.close()                                        # dies without acknowledging the rest
    time.sleep(0.05)
    assert pel(w, "jobs", "workers") == [("2-1", "dying", 1), ("3-1", "dying", 1),
                                        ("4-1", "dying", 1), ("5-1", "dying", 1)]
    heir = server.raw()
    # the heir takes new work first; the dead one's entries are not idle long enough yet
    assert ids(heir.call("XREADGROUP", "GROUP", "workers", "heir", "STREAMS", "jobs", ">")[0][1]) \
        == ["6-1", "7-1", "8-1"]
    heir.call("XACK", "jobs", "workers", "6-1", "7-1", "8-1")
    assert heir.call("XAUTOCLAIM", "jobs", "workers", "heir", "400", "0") == [b"0-0", [], []]
    assert [x[1] for x in pel(w, "jobs", "workers")] == ["dying"] * 4
    time.sleep(0.45)
    r = heir.call("XAUTOCLAIM", "jobs", "workers", "heir", "400", "0", "COUNT", "10")
    assert r == [b"0-0", [e(2), e(3), e(4), e(5)], []], r
    assert pel(w, "jobs", "workers") == [("2-1", "heir", 2), ("3-1", "heir", 2),
                                        ("4-1", "heir", 2), ("5-1", "heir", 2)]
    assert w.call("XPENDING", "jobs", "workers") == [4, b"2-1", b"5-1", [[b"heir", b"4"]]]
    assert heir.call("XACK", "jobs", "workers", "2-1", "3-1", "4-1", "5-1") == 4
    assert w.call("XPENDING", "jobs", "workers") == [0, None, None, None]
    assert [(x["name"], x["pending"]) for x in consumers(w, "jobs", "workers")] == [
        (b"dying", 0), (b"heir", 0)]


# ---------------------------------------------------------------------------
# persistence
# ---------------------------------------------------------------------------

def difference(a, b, path="state"):
    """Where two nested values first differ (for failure messages), or None."""
    if type(a) is not type(b):
        return "%s: %r != %r" % (path, a, b)
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b), key=repr):
            if k not in a or k not in b:
                return "%s: key %r only on one side" % (path, k)
            d = difference(a[k], b[k], "%s[%r]" % (path, k))
            if d:
                return d
        return None
    if isinstance(a, (list, tuple)):
        for i, (x, y) in enumerate(zip(a, b)):
            d = difference(x, y, "%s[%d]" % (path, i))
            if d:
                return d
        if len(a) != len(b):
            return "%s: length %d != %d" % (path, len(a), len(b))
        return None
    return None if a == b else "%s: %r != %r" % (path, a, b)


def group_snapshot(c, keys):
    out = {}
    for k in keys:
        d = untimed(full(c, k, "COUNT", "0"))
        d["xinfo-groups"] = groups(c, k)
        d["xpending"] = {}
        for g in d["xinfo-groups"]:
            name = g["name"]
            d["xpending"][name] = (c.call("XPENDING", k, name), pel(c, k, name))
            d["consumers-" + name.decode()] = [(x["name"], x["pending"])
                                               for x in consumers(c, k, name)]
        out[k] = d
    return out


def test_groups_survive_sigkill(server):
    s = durable(server)
    c = s.raw()
    fill(c, "s", 12)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XGROUP", "CREATE", "s", "h", "3-1", "ENTRIESREAD", "3")
    c.call("XGROUP", "CREATE", "s", "late", "$")
    c.call("XGROUP", "CREATE", "mk", "g", "$", "MKSTREAM")
    c.call("XGROUP", "CREATECONSUMER", "s", "g", "idle")
    c.call("XREADGROUP", "GROUP", "g", "a", "COUNT", "4", "STREAMS", "s", ">")       # 1..4
    c.call("XREADGROUP", "GROUP", "g", "b", "COUNT", "3", "STREAMS", "s", ">")       # 5..7
    c.call("XREADGROUP", "GROUP", "g", "n", "COUNT", "2", "NOACK", "STREAMS", "s", ">")  # 8 9
    c.call("XACK", "s", "g", "2-1", "6-1")
    c.call("XCLAIM", "s", "g", "b", "0", "3-1", "RETRYCOUNT", "5", "JUSTID")
    c.call("XCLAIM", "s", "g", "c", "0", "4-1")
    c.call("XCLAIM", "s", "g", "c", "0", "11-1", "FORCE", "JUSTID")
    c.call("XGROUP", "CREATECONSUMER", "s", "h", "z")
    c.call("XDEL", "s", "12-1")
    c.call("XADD", "s", "13-1", "f", "v")
    c.call("XGROUP", "CREATE", "gone", "g", "$", "MKSTREAM")
    c.call("DEL", "gone")
    before = group_snapshot(c, [b"s", b"mk"])
    assert before[b"s"]["xpending"][b"g"][0][0] == 6, before
    s.restart(kill=signal.SIGKILL)
    c = s.raw()
    after = group_snapshot(c, [b"s", b"mk"])
    assert after == before, difference(before, after)
    assert c.call("EXISTS", "gone") == 0
    # and work goes on where it stopped
    assert c.call("XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", ">") == [
        [b"s", [e(10), e(11), e(13)]]]
    assert ids(c.call("XREADGROUP", "GROUP", "h", "z", "STREAMS", "s", ">")[0][1]) == [
        "4-1", "5-1", "6-1", "7-1", "8-1", "9-1", "10-1", "11-1", "13-1"]


@echd_only("Redis' AOF does not log a consumer that an XREADGROUP or XCLAIM creates without "
           "delivering anything, the delivery a history read counts, consumers' seen/active "
           "times, nor (7.0) the entries-read that reads advance: echd keeps them all")
def test_groups_survive_sigkill_everything(server):
    c = server.raw()
    fill(c, "s", 5)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XREADGROUP", "GROUP", "g", "a", "COUNT", "2", "STREAMS", "s", ">")
    c.call("XREADGROUP", "GROUP", "g", "empty", "STREAMS", "s", "0")
    c.call("XREADGROUP", "GROUP", "g", "a", "COUNT", "1", "STREAMS", "s", "0")   # 1-1: count 2
    c.call("XREADGROUP", "GROUP", "g", "rest", "STREAMS", "s", ">")                # 3 4 5
    c.call("XREADGROUP", "GROUP", "g", "nothing", "STREAMS", "s", ">")
    c.call("XCLAIM", "s", "g", "claimer", "100000", "1-1")
    c.call("XGROUP", "CREATE", "s", "h", "1-1", "ENTRIESREAD", "1")
    c.call("XREADGROUP", "GROUP", "h", "x", "COUNT", "3", "STREAMS", "s", ">")      # 2 3 4
    c.call("XGROUP", "DELCONSUMER", "s", "h", "x")
    c.call("XDEL", "s", "4-1")                   # h's lag: exact, where Redis says NULL
    before_full = full(c, "s", "COUNT", "0")
    before_groups = groups(c, "s")
    server.restart(kill=signal.SIGKILL)
    c = server.raw()
    after_full = full(c, "s", "COUNT", "0")
    for d in (before_full, after_full):
        d.pop("radix-tree-keys")
        d.pop("radix-tree-nodes")
    # seen-time, active-time, delivery times too
    assert after_full == before_full, difference(before_full, after_full)
    assert groups(c, "s") == before_groups
    assert [x["name"] for x in consumers(c, "s", "g")] == [b"a", b"claimer", b"empty",
                                                           b"nothing", b"rest"]
    assert pel(c, "s", "g") == [("1-1", "a", 2), ("2-1", "a", 1), ("3-1", "rest", 1),
                                ("4-1", "rest", 1), ("5-1", "rest", 1)]
    assert group(c, "s", "g")["lag"] == 0
    h = group(c, "s", "h")
    assert (h["entries-read"], h["last-delivered-id"], h["consumers"], h["lag"]) == (
        4, b"4-1", 0, 1)


@echd_only("where echd keeps a seen-time (Redis keeps them all in memory only)")
def test_empty_reads_are_not_writes(server):
    """An XREADGROUP that returns nothing, an XCLAIM or XAUTOCLAIM that claims nothing: each
    changes only the consumer's seen-time, which echd then keeps in memory (as Redis keeps
    all of them): no commit and no flush before the reply. XINFO shows it while echd runs;
    after a restart the consumer shows the seen-time of its last command that wrote."""
    s = server.spawn()
    c = s.raw()
    fill(c, "s", 2)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    assert len(c.call("XREADGROUP", "GROUP", "g", "w", "STREAMS", "s", ">")[0][1]) == 2

    def seen():
        return full(c, "s")["groups"][0]["consumers"][0]["seen-time"]

    def commits():
        info = c.call("INFO", "persistence").decode()
        return int(info.split("commits:")[1].split()[0])
    stored = seen()
    time.sleep(0.3)
    before = commits()
    assert c.call("XREADGROUP", "GROUP", "g", "w", "STREAMS", "s", ">") is None
    assert c.call("XREADGROUP", "GROUP", "g", "w", "STREAMS", "s", "9-9") == [[b"s", []]]
    assert c.call("XCLAIM", "s", "g", "w", "100000", "1-1", "JUSTID") == []
    assert c.call("XAUTOCLAIM", "s", "g", "w", "100000", "0") == [b"0-0", [], []]
    assert commits() == before
    assert seen() >= stored + 250
    assert consumers(c, "s", "g")[0]["idle"] < 250
    # a command that writes stores it with the rest
    c.call("XADD", "s", "3-1", "f", "v")
    assert len(c.call("XREADGROUP", "GROUP", "g", "w", "STREAMS", "s", ">")[0][1]) == 1
    wrote = seen()
    time.sleep(0.05)
    assert c.call("XREADGROUP", "GROUP", "g", "w", "STREAMS", "s", ">") is None
    assert seen() > wrote
    s.restart(kill=signal.SIGKILL)
    c = s.raw()
    assert seen() == wrote
    assert [p[0] for p in c.call("XPENDING", "s", "g", "-", "+", "10")] == [b"1-1", b"2-1",
                                                                           b"3-1"]


# ---------------------------------------------------------------------------
# clients
# ---------------------------------------------------------------------------

def test_redis_cli(server):
    server.cli("XADD", "s", "1-1", "f", "v")
    assert server.cli("XGROUP", "CREATE", "s", "g", "0") == "OK\n"
    assert server.cli("XGROUP", "CREATE", "s", "g", "0", check=False).strip() == (
        "BUSYGROUP Consumer Group name already exists")
    out = server.cli("--no-raw", "XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")
    assert out.split() == ['1)', '1)', '"s"', '2)', '1)', '1)', '"1-1"', '2)', '1)', '"f"',
                           '2)', '"v"'], out
    assert server.cli("XACK", "s", "g", "1-1") == "1\n"
    assert server.cli("XPENDING", "s", "g") == "0\n\n\n\n"
    out = server.cli("XINFO", "GROUPS", "s").split("\n")
    assert out[:8] == ["name", "g", "consumers", "1", "pending", "0", "last-delivered-id",
                       "1-1"], out

