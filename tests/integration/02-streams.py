"""Stream commands: XADD XLEN XRANGE XREVRANGE XDEL XTRIM XREAD XSETID XINFO STREAM.

Every reply and error string is Redis 7.4's.  Where the Redis 7.0 on this machine differs
from Redis 7.4 the test is marked @echd_only with the reason.
"""

import time

from echdtest import echd_only, fill, wait_until

ARITY = "ERR wrong number of arguments for '%s' command"
INVALID_ID = "ERR Invalid stream ID specified as stream command argument"
NOT_INT = "ERR value is not an integer or out of range"
SYNTAX = "ERR syntax error"
SMALLER = "ERR The ID specified in XADD is equal or smaller than the target stream top item"
MAX_ID = "18446744073709551615-18446744073709551615"


def entry(i, *fv):
    """XRANGE-style entry for id '<i>-1' (the ids fill() uses)."""
    return [("%d-1" % i).encode(), [x.encode() if isinstance(x, str) else x for x in fv]]


def ids(entries):
    return [e[0].decode() for e in entries]


def info(c, key, *extra):
    """XINFO STREAM as a dict (RESP2 flat list -> dict); radix-tree-* checked to be ints."""
    r = c.call("XINFO", "STREAM", key, *extra)
    d = dict(zip([k.decode() for k in r[0::2]], r[1::2]))
    assert isinstance(d["radix-tree-keys"], int) and isinstance(d["radix-tree-nodes"], int)
    return d


class NodeSize:
    """CONFIG SET stream-node-max-entries for the duration of a with-block."""

    def __init__(self, c, n):
        self.c, self.n = c, n

    def __enter__(self):
        self.old = self.c.call("CONFIG", "GET", "stream-node-max-entries")[1]
        assert self.c.call("CONFIG", "SET", "stream-node-max-entries", str(self.n)) == "OK"

    def __exit__(self, *exc):
        self.c.call("CONFIG", "SET", "stream-node-max-entries", self.old)


def wait_blocked(server, n=1):
    """Wait until n clients are blocked (so that a following XADD is seen by them)."""
    c = server.raw()

    def blocked():
        text = c.call("INFO", "clients").decode()
        return "blocked_clients:%d\r\n" % n in text
    wait_until(blocked, what="%d blocked client(s)" % n)
    c.close()


# ---------------------------------------------------------------------------
# XADD
# ---------------------------------------------------------------------------

def test_xadd_auto_id(server):
    c = server.raw()
    now_ms = int(c.call("TIME")[0]) * 1000
    got = [c.call("XADD", "s", "*", "f", str(i)).decode() for i in range(50)]
    parsed = [tuple(map(int, x.split("-"))) for x in got]
    assert parsed == sorted(parsed) and len(set(parsed)) == 50, got
    assert abs(parsed[0][0] - now_ms) < 10000, (parsed[0], now_ms)
    for (ms1, seq1), (ms2, seq2) in zip(parsed, parsed[1:]):
        assert ms2 > ms1 and seq2 == 0 or ms2 == ms1 and seq2 == seq1 + 1, (ms1, seq1, ms2, seq2)
    assert c.call("XLEN", "s") == 50
    # a last id in the future: '*' continues from it (the ms clock never goes backwards)
    assert c.call("XADD", "f", "99999999999999-5", "a", "1") == b"99999999999999-5"
    assert c.call("XADD", "f", "*", "a", "2") == b"99999999999999-6"
    # an id is never reused, even after the last entry is deleted
    c.call("XDEL", "f", "99999999999999-6")
    assert c.call("XADD", "f", "*", "a", "3") == b"99999999999999-7"
    # redis-py
    r = server.client()
    rid = r.xadd("py", {"k": "v"})
    assert r.xrange("py") == [(rid, {"k": "v"})]


def test_xadd_explicit_ids(server):
    c = server.raw()
    assert c.call_raw("XADD", "s", "1-1", "f", "v") == b"$3\r\n1-1\r\n"
    assert c.call("XADD", "s", "1-2", "f", "v") == b"1-2"
    assert c.call("XADD", "s", "2", "f", "v") == b"2-0"          # seq defaults to 0
    assert c.call("XADD", "s", "3-*", "f", "v") == b"3-0"        # ms-*: next seq for ms
    assert c.call("XADD", "s", "3-*", "f", "v") == b"3-1"
    assert c.call("XADD", "s", "5-*", "f", "v") == b"5-0"
    assert c.call("XADD", "s", "18446744073709551614-0", "f", "v") == b"18446744073709551614-0"
    assert ids(c.call("XRANGE", "s", "-", "+")) == ["1-1", "1-2", "2-0", "3-0", "3-1", "5-0",
                                                     "18446744073709551614-0"]
    # 0-* on an empty stream gives 0-1 (0-0 is not a valid entry id)
    assert c.call("XADD", "z", "0-*", "f", "v") == b"0-1"
    assert c.call("XADD", "z", "0-*", "f", "v") == b"0-2"
    # the largest id, after which nothing can be added
    assert c.call("XADD", "m", MAX_ID, "f", "v") == MAX_ID.encode()
    exhausted = "ERR The stream has exhausted the last possible ID, unable to add more items"
    assert c.err("XADD", "m", "*", "f", "v") == exhausted
    assert c.err("XADD", "m", "18446744073709551615-*", "f", "v") == exhausted
    assert c.err("XADD", "m", MAX_ID, "f", "v") == exhausted


def test_xadd_id_errors(server):
    c = server.raw()
    c.call("XADD", "s", "5-5", "f", "v")
    assert c.err("XADD", "s", "5-5", "f", "v") == SMALLER
    assert c.err("XADD", "s", "5-4", "f", "v") == SMALLER
    assert c.err("XADD", "s", "4-9", "f", "v") == SMALLER
    assert c.err("XADD", "s", "5", "f", "v") == SMALLER
    assert c.err("XADD", "s", "4-*", "f", "v") == SMALLER
    zero = "ERR The ID specified in XADD must be greater than 0-0"
    assert c.err("XADD", "s", "0-0", "f", "v") == zero
    assert c.err("XADD", "new", "0-0", "f", "v") == zero
    assert c.err("XADD", "new", "0", "f", "v") == zero
    for bad in ("abc", "1-abc", "1-1-1", "-1", "1-", "-", "+", "$", ">", "1.5-0", "",
                "18446744073709551616-0", "1-18446744073709551616", "*-1", "**"):
        assert c.err("XADD", "s", bad, "f", "v") == INVALID_ID, bad
    assert c.call("XLEN", "s") == 1
    assert c.call("EXISTS", "new") == 0


def test_ids_read_as_redis_reads_them(server):
    """Redis reads each half of an id with string2ull: plain digits, or what strtoull takes
    whole (leading blanks, a sign, leading zeros; '-' wraps around); the text ends at a NUL
    and may be at most 127 bytes; it splits at the first '-'."""
    c = server.raw()
    assert c.call("XADD", "s", " 1", "f", "v") == b"1-0"
    assert c.call("XADD", "s", "+1-+1", "f", "v") == b"1-1"
    assert c.call("XADD", "s", "\t2- 0", "f", "v") == b"2-0"
    assert c.call("XADD", "s", "0003-0004", "f", "v") == b"3-4"
    assert c.call("XADD", "s", " 4-*", "f", "v") == b"4-0"
    assert c.call("XADD", "s", "5-*\x00junk", "f", "v") == b"5-0"
    assert c.call("XADD", "s", "6\x00-9", "f", "v") == b"6-0"
    assert c.call("XADD", "s", "7- -1", "f", "v") == b"7-18446744073709551615"
    for bad in ("1-2-*", "8 ", "8-1 ", "- 8", "8-", " ", "0x9", "8--1", "8-1-"):
        assert c.err("XADD", "s", bad, "f", "v") == INVALID_ID, bad
    assert c.err("XADD", "s", "0" * 127 + "9", "f", "v") == INVALID_ID
    assert c.call("XADD", "s", "0" * 126 + "9", "f", "v") == b"9-0"
    assert c.call("XLEN", "s") == 9
    # every command reads ids the same way
    assert ids(c.call("XRANGE", "s", " 2", "+3")) == ["2-0", "3-4"]
    assert ids(c.call("XREVRANGE", "s", "(+4-0", "( 2")) == ["3-4"]
    assert c.call("XDEL", "s", "+1-+1", " 2") == 2
    c.call("XGROUP", "CREATE", "s", "g", " 0")
    got = c.call("XREADGROUP", "GROUP", "g", "c", "COUNT", "2", "STREAMS", "s", ">")
    assert ids(got[0][1]) == ["1-0", "3-4"]
    assert c.call("XACK", "s", "g", "+1") == 1
    assert c.call("XPENDING", "s", "g", " 0", "+", "10")[0][0] == b"3-4"
    assert c.call("XCLAIM", "s", "g", "d", "0", " 3-4", "JUSTID") == [b"3-4"]


def test_xadd_fields(server):
    c = server.raw()
    assert c.call("XADD", "s", "1-1", "a", "1", "b", "2", "a", "3") == b"1-1"
    # field order and repeated fields are kept as given
    assert c.call("XRANGE", "s", "-", "+") == [[b"1-1", [b"a", b"1", b"b", b"2", b"a", b"3"]]]
    binary = bytes(range(256))
    c.call("XADD", "s", "2-1", binary, b"", b"", binary)
    assert c.call("XRANGE", "s", "2", "2") == [[b"2-1", [binary, b"", b"", binary]]]
    assert c.err("XADD", "s", "*", "f") == ARITY % "xadd"
    assert c.err("XADD", "s", "*", "f", "v", "g") == ARITY % "xadd"
    assert c.err("XADD", "s", "*") == ARITY % "xadd"
    assert c.err("XADD", "s", "MAXLEN", "5", "*", "f") == ARITY % "xadd"
    assert c.err("XADD", "s") == ARITY % "xadd"
    assert c.call("XLEN", "s") == 2


def test_xadd_nomkstream(server):
    c = server.raw()
    assert c.call_raw("XADD", "s", "NOMKSTREAM", "*", "f", "v") == b"$-1\r\n"
    assert c.call("EXISTS", "s") == 0
    assert c.call("XADD", "s", "NOMKSTREAM", "MAXLEN", "1", "*", "f", "v") is None
    assert c.call("EXISTS", "s") == 0
    c.call("XADD", "s", "1-1", "f", "v")
    assert c.call("XADD", "s", "NOMKSTREAM", "2-1", "f", "v") == b"2-1"
    assert c.call("XADD", "s", "nomkstream", "MAXLEN", "1", "3-1", "f", "v") == b"3-1"
    assert ids(c.call("XRANGE", "s", "-", "+")) == ["3-1"]
    assert server.client().xadd("other", {"f": "v"}, nomkstream=True) is None


def test_xadd_maxlen_minid_exact(server):
    c = server.raw()
    fill(c, "s", 10)
    assert c.call("XADD", "s", "MAXLEN", "5", "11-1", "f", "v") == b"11-1"
    assert ids(c.call("XRANGE", "s", "-", "+")) == ["%d-1" % i for i in range(7, 12)]
    assert c.call("XADD", "s", "MAXLEN", "=", "3", "12-1", "f", "v") == b"12-1"
    assert ids(c.call("XRANGE", "s", "-", "+")) == ["10-1", "11-1", "12-1"]
    assert c.call("XADD", "s", "MINID", "12", "13-1", "f", "v") == b"13-1"
    assert ids(c.call("XRANGE", "s", "-", "+")) == ["12-1", "13-1"]
    assert c.call("XADD", "s", "MINID", "=", "13-1", "14-1", "f", "v") == b"14-1"
    assert ids(c.call("XRANGE", "s", "-", "+")) == ["13-1", "14-1"]
    # MAXLEN 0 removes even the entry just added
    assert c.call("XADD", "s", "MAXLEN", "0", "15-1", "f", "v") == b"15-1"
    assert c.call("XLEN", "s") == 0
    assert c.call("EXISTS", "s") == 1
    d = info(c, "s")
    assert d["last-generated-id"] == b"15-1" and d["entries-added"] == 15
    # MINID above the new id: likewise
    assert c.call("XADD", "s", "MINID", "100", "16-1", "f", "v") == b"16-1"
    assert c.call("XLEN", "s") == 0


def test_xadd_trim_errors(server):
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    assert c.err("XADD", "s", "MAXLEN", "-1", "*", "f", "v") == (
        "ERR The MAXLEN argument must be >= 0.")
    assert c.err("XADD", "s", "MAXLEN", "abc", "*", "f", "v") == NOT_INT
    assert c.err("XADD", "s", "MINID", "abc", "*", "f", "v") == INVALID_ID
    assert c.err("XADD", "s", "MAXLEN", "=", "1", "LIMIT", "10", "*", "f", "v") == (
        "ERR syntax error, LIMIT cannot be used without the special ~ option")
    assert c.err("XADD", "s", "MAXLEN", "1", "LIMIT", "10", "*", "f", "v") == (
        "ERR syntax error, LIMIT cannot be used without the special ~ option")
    assert c.err("XADD", "s", "LIMIT", "1", "*", "f", "v") == (
        "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy")
    assert c.err("XADD", "s", "MAXLEN", "~", "1", "LIMIT", "-1", "*", "f", "v") == (
        "ERR The LIMIT argument must be >= 0.")
    assert c.err("XADD", "s", "MAXLEN", "~", "1", "LIMIT", "abc", "*", "f", "v") == NOT_INT
    assert c.err("XADD", "s", "MAXLEN", "1", "MINID", "1", "*", "f", "v") == (
        "ERR syntax error, MAXLEN and MINID options at the same time are not compatible")
    assert c.call("XLEN", "s") == 1


# ---------------------------------------------------------------------------
# XLEN, XRANGE, XREVRANGE
# ---------------------------------------------------------------------------

def test_xlen(server):
    c = server.raw()
    assert c.call_raw("XLEN", "nokey") == b":0\r\n"
    fill(c, "s", 7)
    assert c.call("XLEN", "s") == 7
    c.call("XDEL", "s", "1-1", "2-1")
    assert c.call("XLEN", "s") == 5
    assert c.err("XLEN") == ARITY % "xlen"
    assert c.err("XLEN", "a", "b") == ARITY % "xlen"


def test_xrange_basic(server):
    c = server.raw()
    fill(c, "s", 10, fields=("n", "x"))
    full = c.call("XRANGE", "s", "-", "+")
    assert full == [entry(i, "n", "x") for i in range(1, 11)]
    assert c.call("XREVRANGE", "s", "+", "-") == full[::-1]
    assert c.call("XRANGE", "s", "-", "+", "COUNT", "3") == full[:3]
    assert c.call("XREVRANGE", "s", "+", "-", "COUNT", "3") == full[::-1][:3]
    assert c.call("XRANGE", "s", "3-1", "5-1") == full[2:5]
    assert c.call("XREVRANGE", "s", "5-1", "3-1") == full[2:5][::-1]
    assert c.call("XRANGE", "s", "4-1", "4-1") == full[3:4]
    assert c.call("XRANGE", "s", "5", "3") == []
    assert c.call("XREVRANGE", "s", "3", "5") == []
    # COUNT 0 (and a negative COUNT, taken as 0) give a null array, not an empty one
    assert c.call_raw("XRANGE", "s", "-", "+", "COUNT", "0") == b"*-1\r\n"
    assert c.call_raw("XRANGE", "s", "-", "+", "COUNT", "-1") == b"*-1\r\n"
    assert c.call_raw("XREVRANGE", "s", "+", "-", "COUNT", "0") == b"*-1\r\n"
    assert c.call("XRANGE", "s", "-", "+", "COUNT", "1", "COUNT", "2") == full[:2]  # last wins
    assert c.call("XRANGE", "s", "-", "+", "count", "100") == full
    assert c.call_raw("XRANGE", "nokey", "-", "+") == b"*0\r\n"
    assert c.call("XREVRANGE", "nokey", "+", "-") == []
    # the full ids as range ends
    assert c.call("XRANGE", "s", "0-0", MAX_ID) == full
    # pagination with exclusive ranges
    page, got = c.call("XRANGE", "s", "-", "+", "COUNT", "4"), []
    while page:
        got += page
        page = c.call("XRANGE", "s", "(" + page[-1][0].decode(), "+", "COUNT", "4")
    assert got == full
    # redis-py
    r = server.client()
    assert r.xrange("s", min="2-1", max="3-1") == [("2-1", {"n": "x"}), ("3-1", {"n": "x"})]
    assert r.xrevrange("s", count=1) == [("10-1", {"n": "x"})]


def test_xrange_incomplete_and_exclusive_ids(server):
    c = server.raw()
    for i in ("2-0", "2-1", "3-0", "3-5", "4-0"):
        c.call("XADD", "s", i, "f", "v")
    assert ids(c.call("XRANGE", "s", "2", "3")) == ["2-0", "2-1", "3-0", "3-5"]
    assert ids(c.call("XRANGE", "s", "3", "+")) == ["3-0", "3-5", "4-0"]
    assert ids(c.call("XRANGE", "s", "-", "2")) == ["2-0", "2-1"]
    assert ids(c.call("XRANGE", "s", "(2", "+")) == ["2-1", "3-0", "3-5", "4-0"]
    assert ids(c.call("XRANGE", "s", "(2-1", "(4-0")) == ["3-0", "3-5"]
    assert ids(c.call("XRANGE", "s", "-", "(3")) == ["2-0", "2-1", "3-0", "3-5"]
    # an exclusive incomplete end id "(4" means below 4-18446744073709551615
    assert ids(c.call("XREVRANGE", "s", "(4", "(2-1")) == ["4-0", "3-5", "3-0"]
    assert ids(c.call("XREVRANGE", "s", "(4-0", "(2-1")) == ["3-5", "3-0"]
    assert ids(c.call("XREVRANGE", "s", "3", "3")) == ["3-5", "3-0"]
    assert ids(c.call("XRANGE", "s", "(3-0", "(3-5")) == []
    assert c.err("XRANGE", "s", "(" + MAX_ID, "+") == "ERR invalid start ID for the interval"
    assert c.err("XRANGE", "s", "-", "(0-0") == "ERR invalid end ID for the interval"
    assert c.err("XREVRANGE", "s", "(0-0", "-") == "ERR invalid end ID for the interval"
    assert c.err("XREVRANGE", "s", "+", "(" + MAX_ID) == "ERR invalid start ID for the interval"


def test_xrange_errors(server):
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    for bad in (("abc", "+"), ("-", "x"), ("(-", "+"), ("-", "(+"), ("1-x", "+"),
                ("18446744073709551616", "+"), ("1-1-1", "+"), ("", "+")):
        assert c.err("XRANGE", "s", *bad) == INVALID_ID, bad
        assert c.err("XREVRANGE", "s", bad[1], bad[0]) == INVALID_ID, bad
    assert c.err("XRANGE", "s", "-", "+", "COUNT", "abc") == NOT_INT
    assert c.err("XRANGE", "s", "-", "+", "COUNT") == SYNTAX
    assert c.err("XRANGE", "s", "-", "+", "FOO") == SYNTAX
    assert c.err("XRANGE", "s", "-", "+", "COUNT", "1", "FOO") == SYNTAX
    assert c.err("XREVRANGE", "s", "+", "-", "COUNT", "1.5") == NOT_INT
    assert c.err("XRANGE", "s", "-") == ARITY % "xrange"
    assert c.err("XREVRANGE", "s") == ARITY % "xrevrange"


# ---------------------------------------------------------------------------
# XDEL
# ---------------------------------------------------------------------------

def test_xdel(server):
    c = server.raw()
    fill(c, "s", 5)
    assert c.call_raw("XDEL", "s", "2-1") == b":1\r\n"
    assert c.call("XDEL", "s", "2-1") == 0
    assert c.call("XDEL", "s", "1-1", "3-1", "9-9", "3-1") == 2
    assert ids(c.call("XRANGE", "s", "-", "+")) == ["4-1", "5-1"]
    assert c.call("XDEL", "nokey", "1-1") == 0
    assert c.call("EXISTS", "nokey") == 0
    # ids are validated before anything is deleted
    assert c.err("XDEL", "s", "4-1", "abc") == INVALID_ID
    assert c.call("XLEN", "s") == 2
    assert c.err("XDEL", "s", "-") == INVALID_ID
    assert c.err("XDEL", "s") == ARITY % "xdel"
    # incomplete id: ms only means ms-0
    c.call("XADD", "s", "6-0", "f", "v")
    assert c.call("XDEL", "s", "6") == 1
    # deleting every entry keeps an empty stream
    assert c.call("XDEL", "s", "4-1", "5-1") == 2
    assert c.call("XLEN", "s") == 0
    assert c.call("EXISTS", "s") == 1
    assert c.call("TYPE", "s") == "stream"
    assert c.call("XRANGE", "s", "-", "+") == []
    d = info(c, "s")
    assert d["length"] == 0 and d["last-generated-id"] == b"6-0"
    assert d["max-deleted-entry-id"] == b"6-0" and d["entries-added"] == 6
    assert d["first-entry"] is None and d["last-entry"] is None
    assert d["recorded-first-entry-id"] == b"0-0"
    # ...whose ids keep growing from the last generated one
    assert c.err("XADD", "s", "6-0", "f", "v") == SMALLER
    assert c.call("XADD", "s", "6-1", "f", "v") == b"6-1"


def test_xdel_metadata(server):
    c = server.raw()
    fill(c, "s", 5)
    c.call("XDEL", "s", "3-1")
    d = info(c, "s")
    assert d["max-deleted-entry-id"] == b"3-1" and d["recorded-first-entry-id"] == b"1-1"
    c.call("XDEL", "s", "1-1")
    d = info(c, "s")
    # max-deleted-entry-id only grows; recorded-first-entry-id follows the first entry
    assert d["max-deleted-entry-id"] == b"3-1" and d["recorded-first-entry-id"] == b"2-1"
    assert d["length"] == 3 and d["entries-added"] == 5
    c.call("XDEL", "s", "5-1")
    d = info(c, "s")
    assert d["max-deleted-entry-id"] == b"5-1" and d["last-generated-id"] == b"5-1"
    assert d["last-entry"] == entry(4, "f", "v")


# ---------------------------------------------------------------------------
# XTRIM
# ---------------------------------------------------------------------------

def test_xtrim_exact(server):
    c = server.raw()
    fill(c, "s", 20)
    assert c.call_raw("XTRIM", "s", "MAXLEN", "15") == b":5\r\n"
    assert ids(c.call("XRANGE", "s", "-", "+", "COUNT", "1")) == ["6-1"]
    assert c.call("XTRIM", "s", "MAXLEN", "=", "10") == 5
    assert c.call("XTRIM", "s", "MAXLEN", "100") == 0
    assert c.call("XTRIM", "s", "MINID", "14") == 3
    assert ids(c.call("XRANGE", "s", "-", "+", "COUNT", "1")) == ["14-1"]
    assert c.call("XTRIM", "s", "MINID", "=", "15-1") == 1
    assert c.call("XTRIM", "s", "MINID", "1") == 0
    assert c.call("XLEN", "s") == 6
    assert c.call("XTRIM", "nokey", "MAXLEN", "0") == 0
    assert c.call("EXISTS", "nokey") == 0
    # XTRIM does not move max-deleted-entry-id (only XDEL does)
    d = info(c, "s")
    assert d["max-deleted-entry-id"] == b"0-0", d
    assert d["recorded-first-entry-id"] == b"15-1" and d["entries-added"] == 20
    assert c.call("XTRIM", "s", "MAXLEN", "0") == 6
    assert c.call("XLEN", "s") == 0 and c.call("EXISTS", "s") == 1
    assert server.client().xtrim("s", maxlen=0) == 0


def test_xtrim_removes_a_node_with_no_live_entries(server):
    """A node whose live entries are all gone, but whose last (deleted) entry is at or above
    an exact MINID, stays; a later XTRIM past it removes it and says 0 entries. That removal
    is a change like any other: alone, or in one batch with another client's write, it is
    kept, and the stream takes new entries after it (found by 18-differential)."""
    def empty_node(c, key):
        for i in ("4-3", "6-0", "11-0", "11-1"):
            c.call("XADD", key, i, "f", "v")
        for i in ("11-1", "6-0", "4-3"):
            assert c.call("XDEL", key, i) == 1
        assert c.call("XTRIM", key, "MINID", "=", "11-1") == 1
        d = info(c, key)
        assert d["length"] == 0 and d["radix-tree-keys"] == 1, d

    c, other = server.raw(), server.raw()
    empty_node(c, "alone")
    assert c.call("XTRIM", "alone", "MINID", "12-0") == 0
    assert info(c, "alone")["radix-tree-keys"] == 0
    assert c.call("XADD", "alone", "12-1", "f", "v") == b"12-1"

    empty_node(c, "batched")
    # the trim and another client's write, sent so they are likely to share a commit
    c.send("XTRIM", "batched", "MINID", "12-0")
    other.send("XADD", "elsewhere", "1-1", "f", "v")
    assert c.read() == 0 and other.read() == b"1-1"
    d = info(c, "batched")
    assert d["radix-tree-keys"] == 0 and d["length"] == 0, d
    assert c.call("XADD", "batched", "12-1", "f", "v") == b"12-1"
    assert c.call("XADD", "batched", "12-2", "f", "v") == b"12-2"
    assert ids(c.call("XRANGE", "batched", "-", "+")) == ["12-1", "12-2"]
    assert info(c, "batched")["radix-tree-keys"] == 1
    if not server.is_echd:
        return  # the oracle runs without persistence
    server.restart()
    c = server.raw()
    assert ids(c.call("XRANGE", "batched", "-", "+")) == ["12-1", "12-2"]
    assert info(c, "alone")["radix-tree-keys"] == 1


def test_xtrim_errors(server):
    c = server.raw()
    fill(c, "s", 3)
    assert c.err("XTRIM", "s") == ARITY % "xtrim"
    assert c.err("XTRIM", "s", "MAXLEN") == ARITY % "xtrim"
    assert c.err("XTRIM", "s", "MAXLEN", "~") == NOT_INT   # "~" taken as the threshold
    assert c.err("XTRIM", "s", "FOO", "5") == SYNTAX
    assert c.err("XTRIM", "s", "MAXLEN", "abc") == NOT_INT
    assert c.err("XTRIM", "s", "MAXLEN", "-1") == "ERR The MAXLEN argument must be >= 0."
    assert c.err("XTRIM", "s", "MINID", "abc") == INVALID_ID
    assert c.err("XTRIM", "s", "MAXLEN", "1", "LIMIT", "5") == (
        "ERR syntax error, LIMIT cannot be used without the special ~ option")
    assert c.err("XTRIM", "s", "MAXLEN", "~", "1", "LIMIT", "abc") == NOT_INT
    assert c.err("XTRIM", "s", "MAXLEN", "~", "1", "LIMIT", "-1") == (
        "ERR The LIMIT argument must be >= 0.")
    assert c.err("XTRIM", "s", "MAXLEN", "5", "foo") == SYNTAX
    assert c.err("XTRIM", "s", "MAXLEN", "1", "MINID", "1") == (
        "ERR syntax error, MAXLEN and MINID options at the same time are not compatible")
    assert c.call("XLEN", "s") == 3


def test_xtrim_approx_default_nodes(server):
    # default stream-node-max-entries 100; tiny entries so that the node byte limit
    # (stream-node-max-bytes, 4096) is never what closes a node
    c = server.raw()
    fill(c, "s", 250)
    # nodes [1..100] [101..200] [201..250]: only whole nodes go
    assert c.call("XTRIM", "s", "MAXLEN", "~", "120") == 100
    assert c.call("XLEN", "s") == 150
    assert c.call("XTRIM", "s", "MAXLEN", "~", "120") == 0
    assert c.call("XTRIM", "s", "MAXLEN", "~", "50") == 100
    assert ids(c.call("XRANGE", "s", "-", "+", "COUNT", "1")) == ["201-1"]
    assert c.call("XTRIM", "s", "MAXLEN", "~", "0") == 50
    assert c.call("XLEN", "s") == 0


def test_xtrim_approx_small_nodes(server):
    c = server.raw()
    with NodeSize(c, 10):
        fill(c, "s", 100)                   # ten nodes of ten entries
        assert info(c, "s")["length"] == 100
        assert c.call("XTRIM", "s", "MAXLEN", "~", "55") == 40
        assert c.call("XLEN", "s") == 60
        assert ids(c.call("XRANGE", "s", "-", "+", "COUNT", "1")) == ["41-1"]
        assert c.call("XTRIM", "s", "MAXLEN", "~", "41", "LIMIT", "10") == 10
        assert c.call("XTRIM", "s", "MAXLEN", "~", "41", "LIMIT", "9") == 0   # a node is 10
        assert c.call("XLEN", "s") == 50
        assert c.call("XTRIM", "s", "MINID", "~", "75") == 20    # 51..70; 71..80 holds 75
        assert ids(c.call("XRANGE", "s", "-", "+", "COUNT", "1")) == ["71-1"]
        assert c.call("XTRIM", "s", "MINID", "~", "75-1") == 0
        assert c.call("XTRIM", "s", "MINID", "75") == 4           # exact: inside the node
        assert c.call("XLEN", "s") == 26
        assert c.call("XTRIM", "s", "MAXLEN", "=", "20") == 6
        assert c.call("XLEN", "s") == 20


def test_xtrim_approx_default_limit(server):
    # with ~ and no LIMIT at most 100 * stream-node-max-entries entries go per call;
    # LIMIT 0 means no limit
    c = server.raw()
    with NodeSize(c, 10):
        fill(c, "s", 2500)
        assert c.call("XTRIM", "s", "MAXLEN", "~", "0") == 1000
        assert c.call("XLEN", "s") == 1500
        assert c.call("XTRIM", "s", "MAXLEN", "~", "0", "LIMIT", "0") == 1500
        assert c.call("XLEN", "s") == 0
        fill(c, "t", 10)
        # an approximate XADD may even drop the node holding the new entry: the full
        # node [1..10] goes, then the new node [100] since dropping it leaves >= 0
        assert c.call("XADD", "t", "MAXLEN", "~", "0", "100-1", "f", "v") == b"100-1"
        assert c.call("XLEN", "t") == 0
        with NodeSize(c, 1):
            fill(c, "u", 3)
            assert c.call("XADD", "u", "MAXLEN", "~", "0", "100-1", "f", "v") == b"100-1"
            assert c.call("XLEN", "u") == 0


def test_xadd_approx_trim(server):
    c = server.raw()
    with NodeSize(c, 10):
        fill(c, "s", 25)                     # nodes [1..10] [11..20] [21..25]
        assert c.call("XADD", "s", "MAXLEN", "~", "10", "26-1", "f", "v") == b"26-1"
        assert c.call("XLEN", "s") == 16     # [1..10] went
        # exact trimming leaves a partly deleted node [11..20]
        assert c.call("XADD", "s", "MAXLEN", "10", "27-1", "f", "v") == b"27-1"
        assert ids(c.call("XRANGE", "s", "-", "+", "COUNT", "1")) == ["18-1"]
        assert c.call("XADD", "s", "MINID", "20", "28-1", "f", "v") == b"28-1"
        assert c.call("XLEN", "s") == 9      # 20..28
        # that node now holds one live entry (20): LIMIT 1 is enough to drop it whole
        assert c.call("XADD", "s", "MAXLEN", "~", "1", "LIMIT", "1", "29-1", "f", "v") == b"29-1"
        assert ids(c.call("XRANGE", "s", "-", "+", "COUNT", "1")) == ["21-1"]
        assert c.call("XLEN", "s") == 9
        assert c.call("XTRIM", "s", "MAXLEN", "~", "1", "LIMIT", "5") == 0
        assert c.call("XTRIM", "s", "MAXLEN", "~", "1") == 0   # dropping [21..29] leaves 0 < 1
        # redis-py's approximate XADD
        r = server.client()
        r.xadd("s", {"f": "v"}, id="30-1", maxlen=1, approximate=True)
        assert r.xlen("s") == 10


# ---------------------------------------------------------------------------
# XREAD
# ---------------------------------------------------------------------------

def test_xread_basic(server):
    c = server.raw()
    fill(c, "a", 5)
    fill(c, "b", 3, start_ms=10)
    assert c.call("XREAD", "STREAMS", "a", "0") == [[b"a", [entry(i, "f", "v")
                                                           for i in range(1, 6)]]]
    assert c.call("XREAD", "COUNT", "2", "STREAMS", "a", "0-0") == [[b"a", [entry(1, "f", "v"),
                                                                            entry(2, "f", "v")]]]
    assert c.call("XREAD", "STREAMS", "a", "3-1") == [[b"a", [entry(4, "f", "v"),
                                                              entry(5, "f", "v")]]]
    assert c.call("XREAD", "STREAMS", "a", "3") == [[b"a", [entry(3, "f", "v"),
                                                            entry(4, "f", "v"),
                                                            entry(5, "f", "v")]]]
    # several streams; those without new entries are left out
    r = c.call("XREAD", "COUNT", "1", "STREAMS", "a", "b", "nokey", "4-1", "0", "0")
    assert r == [[b"a", [entry(5, "f", "v")]], [b"b", [entry(10, "f", "v")]]]
    r = c.call("XREAD", "STREAMS", "a", "b", "5-1", "11-1")
    assert r == [[b"b", [entry(12, "f", "v")]]]
    # nothing at all: a null array
    assert c.call_raw("XREAD", "STREAMS", "a", "b", "5-1", "12-1") == b"*-1\r\n"
    assert c.call_raw("XREAD", "STREAMS", "nokey", "0") == b"*-1\r\n"
    assert c.call_raw("XREAD", "STREAMS", "a", "$") == b"*-1\r\n"
    # COUNT 0 or negative: no limit
    assert len(c.call("XREAD", "COUNT", "0", "STREAMS", "a", "0")[0][1]) == 5
    assert len(c.call("XREAD", "COUNT", "-5", "STREAMS", "a", "0")[0][1]) == 5
    # the same key twice
    r = c.call("XREAD", "STREAMS", "a", "a", "4-1", "3-1")
    assert r == [[b"a", [entry(5, "f", "v")]], [b"a", [entry(4, "f", "v"), entry(5, "f", "v")]]]
    # redis-py
    assert server.client().xread({"a": "4-1"}) == [["a", [("5-1", {"f": "v"})]]]


def test_xread_errors(server):
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    assert c.err("XREAD", "STREAMS", "s") == ARITY % "xread"
    assert c.err("XREAD", "COUNT", "1", "s", "0") == SYNTAX
    assert c.err("XREAD", "FOO", "STREAMS", "s", "0") == SYNTAX
    assert c.err("XREAD", "COUNT", "abc", "STREAMS", "s", "0") == NOT_INT
    assert c.err("XREAD", "BLOCK", "abc", "STREAMS", "s", "0") == (
        "ERR timeout is not an integer or out of range")
    assert c.err("XREAD", "BLOCK", "-1", "STREAMS", "s", "0") == "ERR timeout is negative"
    assert c.err("XREAD", "STREAMS", "s", "abc") == INVALID_ID
    assert c.err("XREAD", "STREAMS", "s", "-") == INVALID_ID
    assert c.err("XREAD", "STREAMS", "s", ">") == (
        "ERR The > ID can be specified only when calling XREADGROUP using the GROUP "
        "<group> <consumer> option.")
    assert c.err("XREAD", "GROUP", "g", "c", "STREAMS", "s", "0") == (
        "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.")


@echd_only("Redis 7.0 says \"Unbalanced XREAD list\"; Redis 8 quotes the command and names '+'")
def test_xread_unbalanced(server):
    # Redis 8's text (7.4.0 said "an ID or '$'" though XREAD had learnt '+')
    c = server.raw()
    msg = ("ERR Unbalanced 'xread' list of streams: for each stream key an ID, '+', or '$' "
           "must be specified.")
    assert c.err("XREAD", "STREAMS", "a", "b", "0") == msg
    assert c.err("XREAD", "COUNT", "2", "STREAMS", "a", "b", "c", "0", "0") == msg


def test_xread_block_woken_by_xadd(server):
    reader = server.raw()
    writer = server.raw()
    writer.call("XADD", "s", "1-1", "old", "x")
    reader.send("XREAD", "BLOCK", "5000", "STREAMS", "s", "$")
    wait_blocked(server)
    t0 = time.monotonic()
    assert writer.call("XADD", "s", "2-1", "new", "y") == b"2-1"
    assert reader.read() == [[b"s", [[b"2-1", [b"new", b"y"]]]]]
    assert time.monotonic() - t0 < 2.0
    # data already there: BLOCK returns at once
    t0 = time.monotonic()
    assert reader.call("XREAD", "BLOCK", "5000", "STREAMS", "s", "1-1") == [
        [b"s", [[b"2-1", [b"new", b"y"]]]]]
    assert time.monotonic() - t0 < 1.0
    # blocked on a stream that does not exist yet
    reader.send("XREAD", "BLOCK", "5000", "STREAMS", "later", "$")
    wait_blocked(server)
    writer.call("XADD", "later", "7-7", "a", "b")
    assert reader.read() == [[b"later", [[b"7-7", [b"a", b"b"]]]]]


def test_xread_block_timeout(server):
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    t0 = time.monotonic()
    assert c.call_raw("XREAD", "BLOCK", "200", "STREAMS", "s", "$") == b"*-1\r\n"
    dt = time.monotonic() - t0
    assert 0.15 <= dt < 3.0, dt
    t0 = time.monotonic()
    assert c.call("XREAD", "BLOCK", "100", "STREAMS", "nokey", "s", "$", "$") is None
    assert time.monotonic() - t0 >= 0.08
    # an XADD to another key does not wake the reader
    other = server.raw()
    c.send("XREAD", "BLOCK", "300", "STREAMS", "s", "$")
    wait_blocked(server)
    other.call("XADD", "unrelated", "*", "f", "v")
    assert c.read() is None
    assert c.call("PING") == "PONG"
    # redis-py: timeout -> None
    assert not server.client().xread({"s": "$"}, block=50)


def test_xread_block_forever(server):
    reader = server.raw()
    reader.send("XREAD", "BLOCK", "0", "STREAMS", "s", "$")
    wait_blocked(server)
    time.sleep(0.3)  # still blocked: BLOCK 0 has no timeout
    writer = server.raw()
    writer.call("XADD", "s", "5-5", "k", "v")
    assert reader.read() == [[b"s", [[b"5-5", [b"k", b"v"]]]]]


def test_xread_block_several_streams(server):
    reader = server.raw()
    writer = server.raw()
    writer.call("XADD", "a", "1-1", "f", "a1")
    reader.send("XREAD", "COUNT", "10", "BLOCK", "5000", "STREAMS", "a", "b", "$", "$")
    wait_blocked(server)
    writer.call("XADD", "b", "3-1", "f", "b3")
    assert reader.read() == [[b"b", [[b"3-1", [b"f", b"b3"]]]]]
    # an explicit id below the stream's end is served at once
    r = reader.call("XREAD", "BLOCK", "5000", "STREAMS", "a", "b", "0", "3-1")
    assert r == [[b"a", [[b"1-1", [b"f", b"a1"]]]]]


def test_xread_block_count_and_many_readers(server):
    readers = [server.raw() for _ in range(3)]
    writer = server.raw()
    writer.call("XADD", "s", "1-1", "f", "v")
    for r in readers:
        r.send("XREAD", "COUNT", "1", "BLOCK", "5000", "STREAMS", "s", "1-1")
    wait_blocked(server, 3)
    writer.call("XADD", "s", "2-1", "f", "v2")
    for r in readers:
        assert r.read() == [[b"s", [[b"2-1", [b"f", b"v2"]]]]]


def test_xread_block_client_disconnects(server):
    c = server.raw()
    c.send("XREAD", "BLOCK", "0", "STREAMS", "s", "$")
    wait_blocked(server)
    c.close()
    wait_blocked(server, 0)
    w = server.raw()
    assert w.call("XADD", "s", "1-1", "f", "v") == b"1-1"
    assert w.call("PING") == "PONG"


def test_xread_block_woken_in_resp3(server):
    reader = server.raw()
    reader.call("HELLO", "3")
    reader.send("XREAD", "BLOCK", "5000", "STREAMS", "s", "$")
    wait_blocked(server)
    server.raw().call("XADD", "s", "1-1", "f", "v")
    assert reader.read_raw() == (
        b"%1\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n")
    assert reader.call_raw("XREAD", "BLOCK", "50", "STREAMS", "s", "$") == b"_\r\n"


@echd_only("XREAD '+' (the last entry) is new in Redis 7.4")
def test_xread_plus_last_entry(server):
    c = server.raw()
    fill(c, "a", 3)
    fill(c, "b", 2, start_ms=10)
    assert c.call("XREAD", "STREAMS", "a", "+") == [[b"a", [entry(3, "f", "v")]]]
    assert c.call("XREAD", "COUNT", "10", "STREAMS", "a", "+") == [[b"a", [entry(3, "f", "v")]]]
    assert c.call("XREAD", "STREAMS", "a", "b", "+", "+") == [[b"a", [entry(3, "f", "v")]],
                                                             [b"b", [entry(11, "f", "v")]]]
    assert c.call("XREAD", "STREAMS", "a", "b", "+", "0") == [
        [b"a", [entry(3, "f", "v")]], [b"b", [entry(10, "f", "v"), entry(11, "f", "v")]]]
    # a missing stream has no last entry
    assert c.call_raw("XREAD", "STREAMS", "nokey", "+") == b"*-1\r\n"
    # the last entry still there, not the last id ever generated
    c.call("XDEL", "a", "3-1")
    assert c.call("XREAD", "STREAMS", "a", "+") == [[b"a", [entry(2, "f", "v")]]]
    c.call("XDEL", "a", "1-1", "2-1")
    assert c.call_raw("XREAD", "STREAMS", "a", "+") == b"*-1\r\n"
    # with BLOCK: an entry is there, so no blocking at all
    t0 = time.monotonic()
    assert c.call("XREAD", "BLOCK", "0", "STREAMS", "b", "+") == [[b"b", [entry(11, "f", "v")]]]
    assert time.monotonic() - t0 < 1.0


@echd_only("XREAD '+' (the last entry) is new in Redis 7.4")
def test_xread_plus_blocks_on_empty_stream(server):
    reader = server.raw()
    reader.send("XREAD", "BLOCK", "5000", "STREAMS", "empty", "+")
    wait_blocked(server)
    server.raw().call("XADD", "empty", "4-4", "f", "v")
    assert reader.read() == [[b"empty", [[b"4-4", [b"f", b"v"]]]]]


# ---------------------------------------------------------------------------
# XSETID
# ---------------------------------------------------------------------------

def test_xsetid(server):
    c = server.raw()
    fill(c, "s", 5)
    assert c.call_raw("XSETID", "s", "10-0") == b"+OK\r\n"
    d = info(c, "s")
    assert d["last-generated-id"] == b"10-0" and d["entries-added"] == 5
    assert c.err("XADD", "s", "9-9", "f", "v") == SMALLER
    assert c.call("XADD", "s", "10-*", "f", "v") == b"10-1"
    assert c.call("XSETID", "s", "10-1") == "OK"            # equal to the top item is fine
    assert c.err("XSETID", "s", "10-0") == (
        "ERR The ID specified in XSETID is smaller than the target stream top item")
    assert c.call("XSETID", "s", "20-0", "ENTRIESADDED", "50", "MAXDELETEDID", "15-0") == "OK"
    d = info(c, "s")
    assert d["last-generated-id"] == b"20-0"
    assert d["entries-added"] == 50 and d["max-deleted-entry-id"] == b"15-0"
    assert c.call("XSETID", "s", "20-0", "entriesadded", "6") == "OK"     # == length: fine
    assert c.err("XSETID", "s", "20-0", "ENTRIESADDED", "5") == (
        "ERR The entries_added specified in XSETID is smaller than the target stream length")
    assert c.err("XSETID", "s", "20-0", "ENTRIESADDED", "-1") == "ERR entries_added must be positive"
    assert c.err("XSETID", "s", "20-0", "MAXDELETEDID", "21-0") == (
        "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id")
    assert c.err("XSETID", "nokey", "1-1") == "ERR no such key"
    assert c.err("XSETID", "s", "abc") == INVALID_ID
    assert c.err("XSETID", "s", "30-0", "MAXDELETEDID", "abc") == INVALID_ID
    assert c.err("XSETID", "s", "30-0", "ENTRIESADDED", "abc") == NOT_INT
    assert c.err("XSETID", "s", "30-0", "FOO") == SYNTAX
    assert c.err("XSETID", "s", "30-0", "ENTRIESADDED") == SYNTAX
    assert c.err("XSETID", "s") == ARITY % "xsetid"
    d = info(c, "s")
    assert d["last-generated-id"] == b"20-0" and d["entries-added"] == 6
    # '*' continues after the id set
    c.call("XSETID", "s", "99999999999999-9")
    assert c.call("XADD", "s", "*", "f", "v") == b"99999999999999-10"


@echd_only("Redis 7.2 (#11444) refuses an id below the current max-deleted-entry-id; "
           "7.0 accepts it")
def test_xsetid_below_max_deleted(server):
    c = server.raw()
    c.call("XADD", "s", "5-0", "f", "v")
    c.call("XDEL", "s", "5-0")
    assert c.err("XSETID", "s", "1-0") == (
        "ERR The ID specified in XSETID is smaller than current max_deleted_entry_id")
    assert c.call("XSETID", "s", "5-0") == "OK"
    assert c.call("XSETID", "s", "6-0") == "OK"
    assert c.err("XADD", "s", "6-0", "f", "v") == SMALLER
    assert c.call("XADD", "s", "6-1", "f", "v") == b"6-1"
    d = info(c, "s")
    assert d["max-deleted-entry-id"] == b"5-0" and d["last-generated-id"] == b"6-1"


# ---------------------------------------------------------------------------
# XINFO STREAM
# ---------------------------------------------------------------------------

STREAM_FIELDS = ["length", "radix-tree-keys", "radix-tree-nodes", "last-generated-id",
                 "max-deleted-entry-id", "entries-added", "recorded-first-entry-id", "groups",
                 "first-entry", "last-entry"]
# Redis 8.6's idempotent producers' fields, after recorded-first-entry-id (25-idmp tests them)
IDMP_FIELDS = ["idmp-duration", "idmp-maxsize", "pids-tracked", "iids-tracked", "iids-added",
               "iids-duplicates"]


def stream_fields(server, full=False):
    """XINFO STREAM's field names as this server gives them (7.0 lacks the IDMP ones)."""
    tail = ["entries", "groups"] if full else STREAM_FIELDS[7:]
    return STREAM_FIELDS[:7] + (IDMP_FIELDS if server.is_echd else []) + tail


def test_xinfo_stream(server):
    c = server.raw()
    fill(c, "s", 5, fields=("k", "v"))
    c.call("XDEL", "s", "2-1")
    r = c.call("XINFO", "STREAM", "s")
    assert r[0::2] == [f.encode() for f in stream_fields(server)], r
    d = info(c, "s")
    assert d["length"] == 4
    assert d["last-generated-id"] == b"5-1"
    assert d["max-deleted-entry-id"] == b"2-1"
    assert d["entries-added"] == 5
    assert d["recorded-first-entry-id"] == b"1-1"
    assert d["groups"] == 0
    assert d["first-entry"] == entry(1, "k", "v")
    assert d["last-entry"] == entry(5, "k", "v")
    # status replies are not used: every name is a bulk string, ids too
    raw = c.call_raw("XINFO", "STREAM", "s")
    assert raw.startswith(b"*%d\r\n$6\r\nlength\r\n:4\r\n$15\r\nradix-tree-keys\r\n:"
                          % (2 * len(stream_fields(server)))), raw
    assert c.err("XINFO", "STREAM", "nokey") == "ERR no such key"
    # the subcommand is quoted as typed
    assert c.err("XINFO", "STREAM", "s", "bar") == (
        "ERR unknown subcommand or wrong number of arguments for 'STREAM'. Try XINFO HELP.")
    assert c.err("xinfo", "stream", "s", "bar") == (
        "ERR unknown subcommand or wrong number of arguments for 'stream'. Try XINFO HELP.")
    assert c.err("XINFO", "FOO", "s") == "ERR unknown subcommand 'FOO'. Try XINFO HELP."
    assert c.err("XINFO", "STREAM") == ARITY % "xinfo|stream"
    assert c.err("XINFO") == ARITY % "xinfo"
    # redis-py parses it
    i = server.client().xinfo_stream("s")
    assert i["length"] == 4 and i["first-entry"] == ("1-1", {"k": "v"})


def test_xinfo_stream_full(server):
    c = server.raw()
    fill(c, "s", 15)
    c.call("XDEL", "s", "15-1")
    r = c.call("XINFO", "STREAM", "s", "FULL")
    assert r[0::2] == [f.encode() for f in stream_fields(server, full=True)], r[0::2]
    d = dict(zip([k.decode() for k in r[0::2]], r[1::2]))
    assert d["length"] == 14
    assert isinstance(d["radix-tree-keys"], int) and isinstance(d["radix-tree-nodes"], int)
    assert d["last-generated-id"] == b"15-1" and d["max-deleted-entry-id"] == b"15-1"
    assert d["entries-added"] == 15 and d["recorded-first-entry-id"] == b"1-1"
    assert d["entries"] == [entry(i, "f", "v") for i in range(1, 11)]    # COUNT 10 by default
    assert d["groups"] == []
    full = dict(zip([k.decode() for k in r[0::2]],
                    c.call("XINFO", "STREAM", "s", "FULL", "COUNT", "0")[1::2]))
    assert full["entries"] == [entry(i, "f", "v") for i in range(1, 15)]
    three = c.call("XINFO", "STREAM", "s", "FULL", "COUNT", "3")
    assert three[three.index(b"entries") + 1] == [entry(i, "f", "v") for i in range(1, 4)]
    assert c.err("XINFO", "STREAM", "s", "FULL", "COUNT", "abc") == NOT_INT
    assert c.err("XINFO", "Stream", "s", "FULL", "FOO") == (
        "ERR unknown subcommand or wrong number of arguments for 'Stream'. Try XINFO HELP.")
    # RESP3: a map
    c.call("HELLO", "3")
    m = c.call("XINFO", "STREAM", "s", "FULL", "COUNT", "1")
    assert isinstance(m, dict) and list(m) == [k for k in r[0::2]]
    assert m[b"entries"] == [entry(1, "f", "v")]


def test_xinfo_empty_stream(server):
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    c.call("XDEL", "s", "1-1")
    d = info(c, "s")
    assert d == {**d, "length": 0, "last-generated-id": b"1-1", "max-deleted-entry-id": b"1-1",
                 "entries-added": 1, "recorded-first-entry-id": b"0-0", "groups": 0,
                 "first-entry": None, "last-entry": None}
    assert c.call_raw("XINFO", "STREAM", "s").endswith(
        b"$11\r\nfirst-entry\r\n$-1\r\n$10\r\nlast-entry\r\n$-1\r\n")
    r = c.call("XINFO", "STREAM", "s", "FULL")
    assert r[r.index(b"entries"):] == [b"entries", [], b"groups", []]
