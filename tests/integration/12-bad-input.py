"""Bad input: protocol garbage, absurd lengths and counts, ids at and past the edges, huge
commands, empty, long and binary names, and every command with every wrong arity.

Each case gets the Redis error for it, and the server goes on serving everyone else: a
bystander connection, opened before the bad input, must still work after it (check()).
Replies are Redis 7.0's (the oracle on this machine) unless a test is @echd_only: echd's
proto-max-multibulk-len (Redis 7.0 has no such limit) and its 400-byte limit on group and
consumer names. Run against both:

    run.py --echd build/broker/echd -k 12-bad-input
    run.py --redis /usr/bin/redis-server -k 12-bad-input
"""

import time

from echdtest import Closed, RespConn, RespError, echd_only, encode_command, timeout

TIMEOUT = 120

INVALID_ID = "ERR Invalid stream ID specified as stream command argument"
EXHAUSTED = "ERR The stream has exhausted the last possible ID, unable to add more items"
ZERO_ID = "ERR The ID specified in XADD must be greater than 0-0"
MAX_ID = "18446744073709551615-18446744073709551615"
PLUS_IN_XRG = ("ERR The + ID is meaningless in the context of XREADGROUP: you want to read the "
               "history of this consumer by specifying a proper ID, or use the > ID to get new "
               "messages. The + ID would just return an empty result set.")
ARITY = "ERR wrong number of arguments for '%s' command"
# EXEC of the wrong arity ends a transaction, in MULTI or not (Redis's execCommandAbort)
EXEC_ARITY = ("EXECABORT Transaction discarded because of: wrong number of arguments for "
              "'exec' command")
NAME_LIMIT = "ERR consumer group and consumer names are limited to 400 bytes"
BINARY = b"\x00\xff\xfe\r\n\x80 \xc3\x28 \xed\xa0\x80 end"  # NUL, CRLF, invalid UTF-8

# Redis 7.0's subcommand arities for echd's container commands. COMMAND INFO lists them
# (element 10) on Redis and on echd; test_arity_matches_redis compares echd's with these,
# and a server that lists none for a container is tested with these.
SUBCOMMANDS = {
    "acl": {"cat": -2, "deluser": -3, "dryrun": -4, "genpass": -2, "getuser": 3, "help": 2,
            "list": 2, "load": 2, "log": -2, "save": 2, "setuser": -3, "users": 2, "whoami": 2},
    "client": {"caching": 3, "getname": 2, "getredir": 2, "help": 2, "id": 2, "info": 2,
               "kill": -3, "list": -2, "no-evict": 3, "pause": -3, "reply": 3, "setname": 3,
               "tracking": -3, "trackinginfo": 2, "unblock": -3, "unpause": 2},
    "command": {"count": 2, "docs": -2, "getkeys": -4, "getkeysandflags": -4, "help": 2,
                "info": -2, "list": -2},
    "config": {"get": -3, "help": 2, "resetstat": 2, "rewrite": 2, "set": -4},
    "slowlog": {"get": -2, "help": 2, "len": 2, "reset": 2},
    "xgroup": {"create": -5, "createconsumer": 5, "delconsumer": 5, "destroy": 4, "help": 2,
               "setid": -5},
    "xinfo": {"consumers": 4, "groups": 3, "help": 2, "stream": -3},
}


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

class Bystander:
    """A client connected before the bad input, with a stream of its own in database 9
    (out of the way of the test's KEYS and DBSIZE)."""

    def __init__(self, server):
        self.c = server.raw()
        self.n = 0
        self.c.call("CLIENT", "SETNAME", "bystander")
        assert self.c.call("SELECT", "9") == "OK"

    def check(self):
        """It is still served: a write and a read, answered at once."""
        t0 = time.monotonic()
        self.n += 1
        assert self.c.call("XADD", "bystander-stream", "*", "n", str(self.n)).count(b"-") == 1
        assert self.c.call("XLEN", "bystander-stream") == self.n
        assert self.c.call("PING") == "PONG"
        dt = time.monotonic() - t0
        assert dt < 5, "bystander waited %.1f s" % dt


def protocol_error(server, raw, expect, by):
    """Sends raw bytes on a new connection: expect the error, then the close."""
    c = server.raw(timeout=10)
    c.send_raw(raw)
    got = c.read_raw()
    assert got == b"-ERR Protocol error: " + expect + b"\r\n", (raw[:60], got)
    assert c.wait_closed(5), "connection not closed after %r" % (raw[:60],)
    by.check()


def raw_error(c, *args):
    """Sends a command that must fail; returns its error line as bytes (errors that quote
    binary names are not UTF-8), checking it is one line."""
    c.send(*args)
    line = c._line()
    assert line.startswith(b"-"), (args[:2], line[:200])
    assert b"\r" not in line and b"\n" not in line, line
    return line[1:]


def rss_kb(server):
    with open("/proc/%d/status" % server.proc.pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def wrong_argcs(arity):
    """Argument counts (command name included) that break arity."""
    if arity > 0:
        return [n for n in range(1, arity + 3) if n != arity]
    return list(range(1, -arity))


def arities(c):
    """{name: arity} from COMMAND, and {name: {sub: arity}} from COMMAND INFO's
    subcommands where the server lists them, else from SUBCOMMANDS."""
    cmds, subs = {}, {}
    for info in c.call("COMMAND"):
        name = info[0].decode()
        cmds[name] = info[1]
        listed = info[9] if len(info) > 9 else []
        if listed:
            subs[name] = {s[0].decode().split("|", 1)[1]: s[1] for s in listed}
        elif name in SUBCOMMANDS:
            subs[name] = dict(SUBCOMMANDS[name])
    return cmds, subs


# ---------------------------------------------------------------------------
# protocol: lengths and counts
# ---------------------------------------------------------------------------

def test_bulk_length_negative(server):
    by = Bystander(server)
    for raw in (b"*1\r\n$-1\r\n", b"*1\r\n$-5\r\n", b"*2\r\n$4\r\nECHO\r\n$-100\r\n",
                b"*1\r\n$-9223372036854775808\r\n"):
        protocol_error(server, raw, b"invalid bulk length", by)


def test_bulk_length_huge(server):
    by = Bystander(server)
    for raw in (b"*1\r\n$99999999999999999999\r\n",       # past 64 bits
                b"*1\r\n$18446744073709551616\r\n",
                b"*1\r\n$9223372036854775807\r\n",        # LLONG_MAX, past proto-max-bulk-len
                b"*1\r\n$536870913\r\n",                  # proto-max-bulk-len (512mb) + 1
                b"*1\r\n$1x\r\n", b"*1\r\n$\r\n", b"*1\r\n$+5\r\n"):
        protocol_error(server, raw, b"invalid bulk length", by)


def test_bulk_length_claimed_not_sent(server):
    """A client announces the largest bulk allowed (512 MiB), sends a little of it, and
    stays: the server does not set aside the memory it claimed, serves everyone else, and
    drops it when it goes."""
    by = Bystander(server)
    base = rss_kb(server)
    claims = []
    for _ in range(8):
        c = server.raw()
        c.send_raw(b"*3\r\n$4\r\nXADD\r\n$1\r\nk\r\n$536870912\r\n" + b"x" * 1000)
        claims.append(c)
    by.check()
    grown = rss_kb(server) - base
    print("rss before %d kB, with 8 claims of 512 MiB: +%d kB" % (base, grown))
    assert grown < 64 * 1024, "8 claimed 512 MiB bulks cost %d kB" % grown
    for c in claims:
        c.close()
    by.check()
    assert by.c.call("EXISTS", "k") == 0


def test_bulk_length_past_configured_limit(server):
    by = Bystander(server)
    assert by.c.call("CONFIG", "SET", "proto-max-bulk-len", "1048576") == "OK"
    try:
        protocol_error(server, b"*2\r\n$4\r\nECHO\r\n$1048577\r\n", b"invalid bulk length", by)
        c = server.raw()
        assert c.call("ECHO", "y" * 1048576) == b"y" * 1048576
    finally:
        by.c.call("CONFIG", "SET", "proto-max-bulk-len", "536870912")


def test_array_count_huge(server):
    by = Bystander(server)
    for raw in (b"*99999999999\r\n", b"*2147483648\r\n", b"*9223372036854775808\r\n",
                b"*1x\r\n", b"*\r\n"):
        protocol_error(server, raw, b"invalid multibulk length", by)
    # a count is not a reservation: 8 clients announcing a million arguments each
    base = rss_kb(server)
    claims = []
    for _ in range(8):
        c = server.raw()
        c.send_raw(b"*1000000\r\n$4\r\nXADD\r\n")
        claims.append(c)
    by.check()
    grown = rss_kb(server) - base
    print("rss before %d kB, with 8 claims of 10^6 arguments: +%d kB" % (base, grown))
    assert grown < 64 * 1024, grown
    for c in claims:
        c.close()
    by.check()
    # negative counts are empty requests, as in Redis
    c = server.raw()
    c.send_raw(b"*-1\r\n*-5\r\n*0\r\n")
    assert c.call("PING") == "PONG"


@echd_only("proto-max-multibulk-len is echd's (Redis 7.0 takes up to INT_MAX arguments)")
def test_array_count_past_configured_limit(server):
    by = Bystander(server)
    protocol_error(server, b"*1048577\r\n", b"invalid multibulk length", by)
    assert by.c.call("CONFIG", "SET", "proto-max-multibulk-len", "10") == "OK"
    try:
        protocol_error(server, encode_command("XADD", "s", "*", *(["f", "v"] * 4)),
                       b"invalid multibulk length", by)
        assert server.raw().call("XADD", "s", "*", *(["f", "v"] * 3)).count(b"-") == 1
    finally:
        by.c.call("CONFIG", "SET", "proto-max-multibulk-len", "1048576")


def test_protocol_garbage(server):
    by = Bystander(server)
    protocol_error(server, b"*1\r\n+PING\r\n", b"expected '$', got '+'", by)
    protocol_error(server, b"*2\r\n$4\r\nECHO\r\n:12\r\n", b"expected '$', got ':'", by)
    protocol_error(server, b"ECHO \"unbalanced\r\n", b"unbalanced quotes in request", by)
    protocol_error(server, b"ECHO 'x'y\r\n", b"unbalanced quotes in request", by)
    protocol_error(server, b"*1" + b"1" * 70000, b"too big mbulk count string", by)
    protocol_error(server, b"*1\r\n$" + b"1" * 70000, b"too big bulk count string", by)
    protocol_error(server, b"PING " + b"x" * 70000, b"too big inline request", by)
    # binary bytes in an inline command are an unknown command, not a crash
    c = server.raw()
    c.send_raw(b"\xff\xfe\x80 \x01\r\n")
    line = c._line()
    assert line.startswith(b"-ERR unknown command '\xff\xfe\x80'"), line
    assert c.call("PING") == "PONG"
    by.check()


# ---------------------------------------------------------------------------
# ids
# ---------------------------------------------------------------------------

def test_bad_ids_everywhere(server):
    """abc, -1 and 2^64 are not ids, for every command that takes one."""
    by = Bystander(server)
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    for bad in ("abc", "-1", "18446744073709551616-0", "0-18446744073709551616", "1-2-3",
                "1-", "-", "+", "", "0x10", "1-0x1"):
        if bad not in ("-", "+"):
            assert c.err("XADD", "s", bad, "f", "v") == INVALID_ID, bad
            assert c.err("XRANGE", "s", bad, "+") == INVALID_ID, bad
            assert c.err("XREVRANGE", "s", "+", bad) == INVALID_ID, bad
            assert c.err("XREAD", "STREAMS", "s", bad) == INVALID_ID, bad
            assert c.err("XGROUP", "CREATE", "s", "g2", bad) == INVALID_ID, bad
            assert c.err("XGROUP", "SETID", "s", "g", bad) == INVALID_ID, bad
            assert c.err("XSETID", "s", bad) == INVALID_ID, bad
            assert c.err("XTRIM", "s", "MINID", bad) == INVALID_ID, bad
            assert c.err("XPENDING", "s", "g", bad, "+", "10") == INVALID_ID, bad
            assert c.err("XAUTOCLAIM", "s", "g", "c", "0", bad) == INVALID_ID, bad
        assert c.err("XDEL", "s", bad) == INVALID_ID, bad
        assert c.err("XACK", "s", "g", bad) == INVALID_ID, bad
        # XCLAIM takes ids up to the first argument that is not one: the rest are options
        assert c.err("XCLAIM", "s", "g", "c", "0", bad) == (
            "ERR Unrecognized XCLAIM option '%s'" % bad), bad
        want = INVALID_ID
        if bad == "+" and server.is_echd:
            want = PLUS_IN_XRG    # Redis 7.4's words (7.0 says INVALID_ID)
        assert c.err("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", bad) == want, bad
    # nothing changed
    assert c.call("XRANGE", "s", "-", "+") == [[b"1-1", [b"f", b"v"]]]
    assert c.call("XPENDING", "s", "g") == [0, None, None, None]
    by.check()


def test_missing_key_before_bad_arguments(server):
    """XDEL, XACK and XINFO look the key (and XACK the group) up first: with none, their
    answer is the same whatever the rest says (found by 18-differential)."""
    by = Bystander(server)
    c = server.raw()
    for bad in ("abc", "-1", "+", ""):
        assert c.call("XDEL", "nokey", bad) == 0, bad
        assert c.call("XACK", "nokey", "g", bad) == 0, bad
    assert c.err("XINFO", "STREAM", "nokey", "NOTFULL") == "ERR no such key"
    assert c.err("XINFO", "STREAM", "nokey", "FULL", "COUNT", "x") == "ERR no such key"
    c.call("XADD", "s", "1-1", "f", "v")
    assert c.call("XACK", "s", "nogroup", "abc") == 0
    # with them, the arguments are checked, and nothing changes
    c.call("XGROUP", "CREATE", "s", "g", "0")
    assert c.err("XDEL", "s", "1-1", "abc") == INVALID_ID
    assert c.err("XACK", "s", "g", "abc") == INVALID_ID
    assert c.err("XINFO", "STREAM", "s", "NOTFULL").startswith("ERR unknown subcommand")
    assert c.call("XLEN", "s") == 1
    by.check()


def test_noack_in_xread(server):
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    assert c.err("XREAD", "NOACK", "STREAMS", "s", "0") == (
        "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.")
    assert c.err("XREAD", "GROUP", "g", "c", "STREAMS", "s", "0") == (
        "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.")


def test_zero_id(server):
    c = server.raw()
    assert c.err("XADD", "s", "0-0", "f", "v") == ZERO_ID
    assert c.err("XADD", "s", "0", "f", "v") == ZERO_ID
    assert c.call("EXISTS", "s") == 0
    assert c.call("XADD", "s", "0-*", "f", "v") == b"0-1"
    assert c.call("XRANGE", "s", "0-0", "0-0") == []
    assert c.err("XADD", "s", "0-1", "f", "v") == (
        "ERR The ID specified in XADD is equal or smaller than the target stream top item")


def test_max_id(server):
    by = Bystander(server)
    c = server.raw()
    assert c.call("XADD", "s", MAX_ID, "f", "v") == MAX_ID.encode()
    # and then nothing more can be added, whatever the id
    assert c.err("XADD", "s", "*", "f", "v") == EXHAUSTED
    assert c.err("XADD", "s", "18446744073709551615-*", "f", "v") == EXHAUSTED
    assert c.err("XADD", "s", MAX_ID, "f", "v") == EXHAUSTED
    assert c.err("XADD", "s", "MAXLEN", "0", "*", "f", "v") == EXHAUSTED
    assert c.call("XLEN", "s") == 1
    # the max id works everywhere else
    assert c.call("XRANGE", "s", MAX_ID, MAX_ID) == [[MAX_ID.encode(), [b"f", b"v"]]]
    assert c.call("XRANGE", "s", "18446744073709551615", "+") == [[MAX_ID.encode(), [b"f", b"v"]]]
    assert c.err("XRANGE", "s", "(" + MAX_ID, "+") == "ERR invalid start ID for the interval"
    assert c.call("XREAD", "STREAMS", "s", MAX_ID) is None
    assert c.call("XGROUP", "CREATE", "s", "g", "0") == "OK"
    assert c.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">") == [
        [b"s", [[MAX_ID.encode(), [b"f", b"v"]]]]]
    assert c.call("XACK", "s", "g", MAX_ID) == 1
    assert c.call("XDEL", "s", MAX_ID) == 1
    # deleting the entry does not give the id back
    assert c.err("XADD", "s", "*", "f", "v") == EXHAUSTED
    by.check()


# ---------------------------------------------------------------------------
# big commands, names
# ---------------------------------------------------------------------------

@timeout(180)
def test_xadd_100000_fields(server):
    by = Bystander(server)
    c = server.raw(timeout=120)
    fields = []
    for i in range(100000):
        fields += ["f%d" % i, "v%d" % i]
    t0 = time.monotonic()
    r = c.call("XADD", "big", "1-1", *fields)
    dt = time.monotonic() - t0
    print("XADD with 100000 fields: %.2f s" % dt)
    assert r == b"1-1", r
    by.check()
    [[eid, got]] = c.call("XRANGE", "big", "-", "+")
    assert eid == b"1-1"
    assert len(got) == 200000
    assert got[:4] == [b"f0", b"v0", b"f1", b"v1"]
    assert got[-2:] == [b"f99999", b"v99999"]
    [[key, [[eid, got2]]]] = c.call("XREAD", "STREAMS", "big", "0")
    assert got2 == got
    # and again, with a group (the entry travels whole through the PEL)
    assert c.call("XGROUP", "CREATE", "big", "g", "0") == "OK"
    [[_, [[eid, got3]]]] = c.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", "big", ">")
    assert got3 == got
    assert c.call("DEL", "big") == 1
    by.check()


def test_empty_names(server):
    c = server.raw()
    assert c.call("XADD", "", "1-1", "", "") == b"1-1"
    assert c.call("XLEN", "") == 1
    assert c.call("XRANGE", "", "-", "+") == [[b"1-1", [b"", b""]]]
    assert c.call("EXISTS", "") == 1
    assert c.call("TYPE", "") == "stream"
    assert c.call("KEYS", "*") == [b""]
    assert c.call("XGROUP", "CREATE", "", "", "0") == "OK"
    assert c.call("XREADGROUP", "GROUP", "", "", "STREAMS", "", ">") == [
        [b"", [[b"1-1", [b"", b""]]]]]
    assert c.call("XPENDING", "", "", "-", "+", "10", "")[0][:2] == [b"1-1", b""]
    assert [g[1] for g in c.call("XINFO", "GROUPS", "")] == [b""]
    assert [x[1] for x in c.call("XINFO", "CONSUMERS", "", "")] == [b""]
    assert c.call("XACK", "", "", "1-1") == 1
    assert c.call("XGROUP", "DELCONSUMER", "", "", "") == 0
    assert c.call("XGROUP", "DESTROY", "", "") == 1
    assert c.call("RENAME", "", "x") == "OK"
    assert c.call("RENAME", "x", "") == "OK"
    assert c.call("DEL", "") == 1


@timeout(120)
def test_64k_key_names(server):
    """echd keeps long stream names (past LMDB's key size) and gives them back whole."""
    by = Bystander(server)
    c = server.raw()
    k1 = b"a" * 65536
    k2 = b"a" * 65535 + b"b"          # differs in its last byte only
    k3 = b"\xff" * 65536
    for i, k in enumerate((k1, k2, k3)):
        assert c.call("XADD", k, "%d-1" % (i + 1), "k", str(i)) == b"%d-1" % (i + 1)
    assert c.call("DBSIZE") == 3
    assert sorted(c.call("KEYS", "*")) == sorted([k1, k2, k3])
    assert c.call("XRANGE", k2, "-", "+") == [[b"2-1", [b"k", b"1"]]]
    assert c.call("EXISTS", k1, k2, k3, b"a" * 65537) == 3
    assert c.call("XREAD", "STREAMS", k1, k3, "0", "0") == [
        [k1, [[b"1-1", [b"k", b"0"]]]], [k3, [[b"3-1", [b"k", b"2"]]]]]
    assert c.call("XGROUP", "CREATE", k1, "g", "0") == "OK"
    assert c.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", k1, ">")[0][0] == k1
    cursor, seen = b"0", []
    for _ in range(100):
        cursor, keys = c.call("SCAN", cursor, "COUNT", "1")
        seen += keys
        if cursor == b"0":
            break
    assert sorted(set(seen)) == sorted([k1, k2, k3])
    k4 = b"c" * 65536
    assert c.call("RENAME", k1, k4) == "OK"
    assert c.call("XLEN", k4) == 1
    assert c.call("XPENDING", k4, "g")[0] == 1
    assert c.call("DEL", k2, k3, k4) == 3
    assert c.call("DBSIZE") == 0
    by.check()


@echd_only("the redis-server of these tests runs without persistence")
def test_64k_key_names_survive_restart(server):
    c = server.raw()
    k1, k2 = b"a" * 65536, b"a" * 65535 + b"\xff"
    c.call("XADD", k1, "1-1", "f", "v")
    c.call("XADD", k2, "2-1", "f", "w")
    c.call("XGROUP", "CREATE", k2, "g", "0")
    server.restart()
    c = server.raw()
    assert sorted(c.call("KEYS", "*")) == sorted([k1, k2])
    assert c.call("XRANGE", k1, "-", "+") == [[b"1-1", [b"f", b"v"]]]
    assert c.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", k2, ">") == [
        [k2, [[b"2-1", [b"f", b"w"]]]]]


def test_group_names_up_to_400_bytes(server):
    """400-byte group and consumer names work everywhere (on Redis too)."""
    c = server.raw()
    g, cn = "g" * 400, "c" * 400
    c.call("XADD", "s", "1-1", "f", "v")
    assert c.call("XGROUP", "CREATE", "s", g, "0") == "OK"
    assert c.call("XGROUP", "CREATECONSUMER", "s", g, cn) == 1
    assert c.call("XREADGROUP", "GROUP", g, cn, "STREAMS", "s", ">") == [
        [b"s", [[b"1-1", [b"f", b"v"]]]]]
    assert c.call("XPENDING", "s", g) == [1, b"1-1", b"1-1", [[cn.encode(), b"1"]]]
    assert c.call("XCLAIM", "s", g, cn, "0", "1-1", "JUSTID") == [b"1-1"]
    assert c.call("XINFO", "GROUPS", "s")[0][1] == g.encode()
    assert c.call("XINFO", "CONSUMERS", "s", g)[0][1] == cn.encode()
    assert c.call("XACK", "s", g, "1-1") == 1
    assert c.call("XGROUP", "DELCONSUMER", "s", g, cn) == 0
    assert c.call("XGROUP", "DESTROY", "s", g) == 1


@echd_only("echd's limit: group and consumer names are at most 400 bytes (Redis has none)")
def test_group_names_past_400_bytes(server):
    by = Bystander(server)
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    ok = "g" * 400
    assert c.call("XGROUP", "CREATE", "s", ok, "0") == "OK"
    for long_name in ("g" * 401, "g" * 65536):
        assert c.err("XGROUP", "CREATE", "s", long_name, "0") == NAME_LIMIT
        assert c.err("XGROUP", "CREATE", "t", long_name, "$", "MKSTREAM") == NAME_LIMIT
        assert c.err("XGROUP", "CREATECONSUMER", "s", ok, long_name) == NAME_LIMIT
        assert c.err("XREADGROUP", "GROUP", ok, long_name, "STREAMS", "s", ">") == NAME_LIMIT
        # a lookup of a group that cannot exist is an ordinary "no such group"
        assert c.err("XREADGROUP", "GROUP", long_name, "c", "STREAMS", "s", ">").startswith(
            "NOGROUP No such key 's' or consumer group 'ggg")
        assert c.err("XCLAIM", "s", ok, long_name, "0", "1-1") == NAME_LIMIT
        assert c.err("XAUTOCLAIM", "s", ok, long_name, "0", "0") == NAME_LIMIT
    # a refused name fails its own command only, not the others of its batch
    fails0 = c.call("INFO", "persistence").count(b"commit_failures:0")
    r = c.pipeline([("XADD", "u", "*", "f", "v"),
                    ("XREADGROUP", "GROUP", ok, "c" * 401, "STREAMS", "s", ">"),
                    ("XGROUP", "CREATE", "t", "g" * 401, "$", "MKSTREAM"),
                    ("XADD", "u", "*", "f", "v")])
    assert isinstance(r[0], bytes) and isinstance(r[3], bytes), r
    assert r[1] == RespError(NAME_LIMIT) and r[2] == RespError(NAME_LIMIT), r
    assert c.call("XLEN", "u") == 2
    assert c.call("INFO", "persistence").count(b"commit_failures:0") == fails0 == 1
    c.call("DEL", "u")
    # nothing was created by the refused commands
    assert c.call("EXISTS", "t") == 0
    assert [g[1] for g in c.call("XINFO", "GROUPS", "s")] == [ok.encode()]
    assert c.call("XINFO", "CONSUMERS", "s", ok) == []
    # a group by that name cannot exist: the lookups say so in their usual words
    assert c.call("XGROUP", "DESTROY", "s", "g" * 401) == 0
    assert c.call("XACK", "s", "g" * 401, "1-1") == 0
    assert c.err("XPENDING", "s", "g" * 401).startswith("NOGROUP ")
    by.check()


def test_binary_names_round_trip(server):
    """Keys, groups, consumers, fields and values that are not UTF-8 (NUL, CR, LF, bytes
    0x80-0xff) come back byte for byte, and errors that quote them keep the stream in sync."""
    by = Bystander(server)
    c = server.raw()
    key, grp, con = b"k" + BINARY, b"g" + BINARY, b"c" + BINARY
    assert c.call("XADD", key, "1-1", BINARY, BINARY + b"v") == b"1-1"
    assert c.call("KEYS", "*") == [key]
    assert c.call("XRANGE", key, "-", "+") == [[b"1-1", [BINARY, BINARY + b"v"]]]
    assert c.call("XGROUP", "CREATE", key, grp, "0") == "OK"
    assert c.call("XREADGROUP", "GROUP", grp, con, "STREAMS", key, ">") == [
        [key, [[b"1-1", [BINARY, BINARY + b"v"]]]]]
    assert c.call("XPENDING", key, grp) == [1, b"1-1", b"1-1", [[con, b"1"]]]
    assert c.call("XINFO", "GROUPS", key)[0][1] == grp
    assert c.call("XINFO", "CONSUMERS", key, grp)[0][1] == con
    full = c.call("XINFO", "STREAM", key, "FULL")
    [g] = full[full.index(b"groups") + 1]
    assert g[0:2] == [b"name", grp], g[0:2]
    consumers = g[g.index(b"consumers") + 1]
    assert [x[1] for x in consumers] == [con]
    # errors quoting binary names are single lines: the next reply is still in step
    for args, code in ((("XREADGROUP", "GROUP", b"no" + BINARY, con, "STREAMS", key, ">"),
                        b"NOGROUP "),
                       (("XPENDING", b"missing" + BINARY, grp), b"NOGROUP "),
                       (("XINFO", "CONSUMERS", key, b"no" + BINARY), b"NOGROUP "),
                       ((b"NO\r\nSUCH" + BINARY, "x"), b"ERR unknown command ")):
        assert raw_error(c, *args).startswith(code), args
        assert c.call("PING") == "PONG"
    assert c.call("RENAME", key, BINARY) == "OK"
    assert c.call("XACK", BINARY, grp, "1-1") == 1
    assert c.call("DEL", BINARY) == 1
    by.check()


# ---------------------------------------------------------------------------
# arity
# ---------------------------------------------------------------------------

def test_arity_matches_redis(server):
    """COMMAND's arities: each command's own, and Redis 7.0's for those Redis has."""
    c = server.raw()
    cmds, subs = arities(c)
    redis70 = {"acl": -2, "auth": -2, "bgsave": -1, "client": -2, "command": -1, "config": -2,
               "dbsize": 1, "del": -2, "discard": 1, "echo": 2, "exec": 1, "exists": -2,
               "flushall": -1, "flushdb": -1, "hello": -1, "info": -1, "keys": 2,
               "lastsave": 1, "multi": 1, "ping": -1, "quit": -1, "rename": 3, "renamenx": 3,
               "reset": 1, "save": 1, "scan": -2, "select": 2, "shutdown": -1, "time": 1,
               "type": 2, "unlink": -2, "unwatch": 1, "watch": -2, "xack": -4, "xadd": -5,
               "xautoclaim": -6, "xclaim": -6, "xdel": -3, "xgroup": -2, "xinfo": -2,
               "xlen": 2, "xpending": -3, "xrange": -4, "xread": -4, "xreadgroup": -7,
               "xrevrange": -4, "xsetid": -3, "xtrim": -4}
    assert len(cmds) >= 40, sorted(cmds)
    for name, arity in sorted(cmds.items()):
        if name in redis70:
            assert arity == redis70[name], (name, arity, redis70[name])
    assert set(redis70) - {"acl", "auth"} <= set(cmds), set(redis70) - set(cmds)
    for name, table in subs.items():
        if name in SUBCOMMANDS:
            for sub, arity in table.items():
                if sub in SUBCOMMANDS[name]:
                    assert arity == SUBCOMMANDS[name][sub], (name, sub, arity)


@timeout(180)
def test_every_command_every_wrong_arity(server):
    """Every command COMMAND lists, called with every wrong number of arguments (the name
    in any case): the Redis arity error naming it in lower case (EXEC's says the transaction
    is discarded); then the same inside MULTI, where each is refused as it is queued and EXEC
    aborts."""
    by = Bystander(server)
    c = server.raw()
    cmds, _ = arities(c)
    calls = []
    for name, arity in sorted(cmds.items()):
        for n in wrong_argcs(arity):
            spelled = name.upper() if len(calls) % 2 else name.capitalize()
            calls.append(([spelled] + ["x"] * (n - 1),
                          EXEC_ARITY if name == "exec" else ARITY % name))
    assert len(calls) > 60, len(calls)
    replies = c.pipeline([args for args, _ in calls])
    bad = [(args, want, got) for (args, want), got in zip(calls, replies)
           if got != RespError(want)]
    assert not bad, "%d wrong: %r" % (len(bad), bad[:10])
    by.check()

    # in MULTI, EXEC of the wrong arity ends the transaction (below); all others are
    # refused as they are queued
    queued = [(args, want) for args, want in calls if args[0].lower() != "exec"]
    assert c.call("MULTI") == "OK"
    replies = c.pipeline([args for args, _ in queued])
    bad = [(args, want, got) for (args, want), got in zip(queued, replies)
           if got != RespError(want)]
    assert not bad, "in MULTI, %d wrong: %r" % (len(bad), bad[:10])
    assert c.err("EXEC") == "EXECABORT Transaction discarded because of previous errors."
    assert c.call("PING") == "PONG"   # not in MULTI any more
    for n in wrong_argcs(cmds["exec"]):
        assert c.call("MULTI") == "OK"
        assert c.call("XADD", "s", "*", "f", "v") == "QUEUED"
        assert c.err(*(["EXEC"] + ["x"] * (n - 1))) == EXEC_ARITY
        assert c.err("EXEC") == "ERR EXEC without MULTI"
    assert c.call("EXISTS", "s") == 0
    by.check()


@timeout(120)
def test_every_subcommand_every_wrong_arity(server):
    """Subcommands of the wrong arity get the container's 'cmd|sub' form. A subcommand echd
    does not implement is an unknown subcommand whatever its arity."""
    by = Bystander(server)
    c = server.raw()
    _, subs = arities(c)
    assert {"config", "client", "command", "xgroup", "xinfo"} <= set(subs), sorted(subs)
    checked = unknown = 0
    for name, table in sorted(subs.items()):
        for sub, arity in sorted(table.items()):
            for n in wrong_argcs(arity):
                if n < 2:
                    continue
                args = [name.upper(), sub.upper()] + ["x"] * (n - 2)
                got = c.err(*args)
                if got == ARITY % ("%s|%s" % (name, sub)):
                    checked += 1
                    continue
                # only for a subcommand the server does not have at all
                assert server.is_echd, (args, got)
                assert got.startswith("ERR unknown subcommand '%s'" % sub.upper()), (args, got)
                right = [name.upper(), sub.upper()] + ["x"] * (abs(arity) - 2)
                got_right = c.err(*right)
                assert got_right == got, (
                    "%s answers %r with %d arguments but %r with the right number" % (
                        right[:2], got, n, got_right))
                unknown += 1
    print("subcommand arity errors checked: %d; unknown subcommands: %d" % (checked, unknown))
    assert checked >= 30, checked
    # in MULTI they are refused as they are queued, and EXEC aborts (the stream commands'
    # containers; echd still queues CONFIG, CLIENT and COMMAND ones and fails them in EXEC)
    assert c.call("MULTI") == "OK"
    assert c.call("XADD", "s", "*", "f", "v") == "QUEUED"
    for name in ("xgroup", "xinfo"):
        for sub, arity in sorted(subs[name].items()):
            for n in wrong_argcs(arity):
                if n >= 2:
                    args = [name, sub] + ["x"] * (n - 2)
                    assert c.err(*args) == ARITY % ("%s|%s" % (name, sub)), args
    assert c.err("EXEC") == "EXECABORT Transaction discarded because of previous errors."
    assert c.call("EXISTS", "s") == 0
    by.check()
