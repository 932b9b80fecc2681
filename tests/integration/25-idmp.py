"""Idempotent producers (Redis 8.6/8.8): XADD IDMP pid iid / IDMPAUTO pid, XCFGSET, XIDMPRECORD
and the idempotency fields of XINFO STREAM.

Written from Redis' pages (commands/xadd, xcfgset, xidmprecord, xinfo-stream and
develop/data-types/streams/idempotency): a duplicate gets the id of the first entry and adds
nothing; records expire by IDMP-DURATION and by IDMP-MAXSIZE per producer; XCFGSET with other
settings clears them; the records survive kill -9, go with the stream on DEL and are copied by
COPY. Debian's Redis 7.0 has none of this, so every test is echd-only.
"""

import os
import signal
import subprocess
import time

from echdtest import echd_only, timeout, wait_until

R86 = "Redis 8.6 command; 7.0 lacks it"
SYNTAX = "ERR syntax error"
NOT_INT = "ERR value is not an integer or out of range"


def info(c, key="s", *full):
    r = c.call("XINFO", "STREAM", key, *full)
    return dict(zip(r[0::2], r[1::2]))


def idmp_fields(c, key="s", *full):
    d = info(c, key, *full)
    return [d[k] for k in (b"idmp-duration", b"idmp-maxsize", b"pids-tracked",
                           b"iids-tracked", b"iids-added", b"iids-duplicates")]


# ---------------------------------------------------------------------------
# the documented examples
# ---------------------------------------------------------------------------

@echd_only(R86)
def test_idempotency_page_examples(server):
    c = server.raw()
    # "XADD mystream IDMP producer-1 iid-1 * field value" and IDMPAUTO producer-2
    a = c.call("XADD", "mystream", "IDMP", "producer-1", "iid-1", "*", "field", "value")
    b = c.call("XADD", "mystream", "IDMPAUTO", "producer-2", "*", "field", "value")
    assert a != b
    # the retry returns the first id and adds nothing, whatever the fields say
    assert c.call("XADD", "mystream", "IDMP", "producer-1", "iid-1", "*", "field",
                  "other") == a
    assert c.call("XADD", "mystream", "IDMPAUTO", "producer-2", "*", "field", "value") == b
    assert c.call("XLEN", "mystream") == 2
    assert c.call("XRANGE", "mystream", a, a) == [[a, [b"field", b"value"]]]
    # producer isolation: the same iid under another pid is another message
    d = c.call("XADD", "mystream", "IDMP", "producer-2", "iid-1", "*", "field", "value")
    assert d not in (a, b) and c.call("XLEN", "mystream") == 3
    # "XCFGSET mystream IDMP-DURATION 300 IDMP-MAXSIZE 1000"
    assert c.call_raw("XCFGSET", "mystream", "IDMP-DURATION", "300", "IDMP-MAXSIZE",
                      "1000") == b"+OK\r\n"
    assert idmp_fields(c, "mystream")[:2] == [300, 1000]


@echd_only(R86)
def test_xcfgset_page_examples(server):
    c = server.raw()
    c.call("XADD", "mystream", "*", "field", "value")
    assert c.call_raw("XCFGSET", "mystream", "IDMP-DURATION", "300") == b"+OK\r\n"
    assert c.call_raw("XCFGSET", "mystream", "IDMP-MAXSIZE", "1000") == b"+OK\r\n"
    assert c.call_raw("XCFGSET", "mystream", "IDMP-DURATION", "600", "IDMP-MAXSIZE",
                      "500") == b"+OK\r\n"
    assert idmp_fields(c, "mystream")[:2] == [600, 500]


@echd_only(R86)
def test_xinfo_stream_fields(server):
    """The XINFO STREAM page's example (its XCFGSET spells the options as the XCFGSET page
    does not: DURATION and MAXSIZE; see docs/compatibility.md)."""
    c = server.raw()
    c.call("XADD", "mystream", "*", "message", "apple")
    assert c.err("XCFGSET", "mystream", "DURATION", "100", "MAXSIZE", "100") == SYNTAX
    assert c.call("XCFGSET", "mystream", "IDMP-DURATION", "100", "IDMP-MAXSIZE", "100") == "OK"
    c.call("XADD", "mystream", "IDMP", "producer1", "msg1", "*", "field", "value")
    assert idmp_fields(c, "mystream") == [100, 100, 1, 1, 1, 0]
    c.call("XADD", "s", "1-1", "message", "apple")
    # defaults (stream-idmp-duration/-maxsize), and the fields sit after
    # recorded-first-entry-id as in the page's example
    r = c.call("XINFO", "STREAM", "s")
    keys = r[0::2]
    at = keys.index(b"recorded-first-entry-id")
    assert keys[at + 1:at + 7] == [b"idmp-duration", b"idmp-maxsize", b"pids-tracked",
                                   b"iids-tracked", b"iids-added", b"iids-duplicates"]
    assert keys[at + 7:] == [b"groups", b"first-entry", b"last-entry"]
    assert idmp_fields(c) == [100, 100, 0, 0, 0, 0]
    c.call("XADD", "s", "IDMP", "producer1", "msg1", "*", "field", "value")
    assert idmp_fields(c) == [100, 100, 1, 1, 1, 0]
    c.call("XADD", "s", "IDMP", "producer1", "msg1", "*", "field", "value")
    c.call("XADD", "s", "IDMP", "producer2", "msg1", "*", "field", "value")
    assert idmp_fields(c) == [100, 100, 2, 2, 2, 1]
    # FULL has them too, in the same place
    full = c.call("XINFO", "STREAM", "s", "FULL")
    fk = full[0::2]
    at = fk.index(b"recorded-first-entry-id")
    assert fk[at + 1:at + 7] == keys[at + 1:at + 7] and fk[at + 7:] == [b"entries", b"groups"]
    assert idmp_fields(c, "s", "FULL") == [100, 100, 2, 2, 2, 1]
    # RESP3: a map of 16 (10 + 6) and of 15 with FULL
    c.call("HELLO", "3")
    assert c.call_raw("XINFO", "STREAM", "s").startswith(b"%16\r\n")
    assert c.call_raw("XINFO", "STREAM", "s", "FULL").startswith(b"%15\r\n")


@echd_only(R86)
def test_config_defaults(server):
    c = server.raw()
    assert c.call("CONFIG", "GET", "stream-idmp-duration") == [b"stream-idmp-duration", b"100"]
    assert c.call("CONFIG", "GET", "stream-idmp-maxsize") == [b"stream-idmp-maxsize", b"100"]
    for opt, bad in (("stream-idmp-duration", "0"), ("stream-idmp-duration", "86401"),
                     ("stream-idmp-maxsize", "0"), ("stream-idmp-maxsize", "10001")):
        assert c.err("CONFIG", "SET", opt, bad).startswith("ERR CONFIG SET failed")
    c.call("CONFIG", "SET", "stream-idmp-duration", "7")
    c.call("CONFIG", "SET", "stream-idmp-maxsize", "3")
    try:
        c.call("XADD", "s", "IDMP", "p", "i", "*", "f", "v")
        assert idmp_fields(c)[:2] == [7, 3]
    finally:
        c.call("CONFIG", "SET", "stream-idmp-duration", "100")
        c.call("CONFIG", "SET", "stream-idmp-maxsize", "100")


# ---------------------------------------------------------------------------
# duplicates
# ---------------------------------------------------------------------------

@echd_only(R86)
def test_duplicate_returns_first_id(server):
    c = server.raw()
    id1 = c.call("XADD", "s", "IDMP", "p1", "payment-abc", "*", "amount", "100", "cur", "USD")
    time.sleep(0.002)
    assert c.call("XADD", "s", "IDMP", "p1", "payment-abc", "*", "amount", "200") == id1
    assert c.call("XLEN", "s") == 1
    assert c.call("XRANGE", "s", "-", "+") == [[id1, [b"amount", b"100", b"cur", b"USD"]]]
    # binary-safe and long pids and iids (longer than a storage key)
    for pid, iid in ((b"\x00\x01", b"\x00\x02\xff"), (b"p" * 1000, b"x" * 65536),
                     (b"q" * 401, b"y" * 401), (b"q" * 400, b"y" * 400)):
        first = c.call("XADD", "s", "IDMP", pid, iid, "*", "f", "v")
        assert c.call("XADD", "s", "IDMP", pid, iid, "*", "f", "w") == first
    assert c.call("XLEN", "s") == 5
    # a pid whose first 384 bytes equal a long one's is another producer
    other = c.call("XADD", "s", "IDMP", b"p" * 999 + b"z", b"x" * 65536, "*", "f", "v")
    assert c.call("XLEN", "s") == 6 and other != first
    # the same options with trimming, NOMKSTREAM, the option order Redis allows
    a = c.call("XADD", "t", "MAXLEN", "~", "100", "IDMP", "p1", "r1", "*", "f", "v")
    assert c.call("XADD", "t", "IDMP", "p1", "r1", "MAXLEN", "~", "100", "*", "f", "v") == a
    assert c.call("XADD", "t", "NOMKSTREAM", "IDMP", "p1", "r1", "*", "f", "v") == a
    assert c.call("XADD", "nokey", "NOMKSTREAM", "IDMP", "p1", "r1", "*", "f", "v") is None
    assert c.call("EXISTS", "nokey") == 0


@echd_only(R86)
def test_duplicate_of_trimmed_entry(server):
    c = server.raw()
    a = c.call("XADD", "s", "IDMP", "p", "i", "*", "f", "v")
    c.call("XADD", "s", "MAXLEN", "0", "*", "f", "v")
    assert c.call("XLEN", "s") == 0
    # the record names the first entry even when it is gone
    assert c.call("XADD", "s", "IDMP", "p", "i", "*", "f", "v") == a
    assert c.call("XLEN", "s") == 0


@echd_only(R86)
def test_idmpauto(server):
    c = server.raw()
    a = c.call("XADD", "s", "IDMPAUTO", "p1", "*", "f1", "a", "f2", "b", "f3", "c")
    assert c.call("XADD", "s", "IDMPAUTO", "p1", "*", "f2", "b", "f3", "c", "f1", "a") == a
    assert c.call("XLEN", "s") == 1
    for fv in (("f1", "x", "f2", "b", "f3", "c"), ("f1", "a", "f2", "b"),
               ("f1", "a", "f2", "b", "f3", "c", "f3", "c"), ("g1", "a", "f2", "b", "f3", "c"),
               ("a", "f1", "f2", "b", "f3", "c")):
        assert c.call("XADD", "s", "IDMPAUTO", "p1", "*", *fv) != a
    assert c.call("XLEN", "s") == 6
    # another producer with the same content is another message
    b = c.call("XADD", "s", "IDMPAUTO", "p2", "*", "f1", "a", "f2", "b", "f3", "c")
    assert b != a and c.call("XLEN", "s") == 7
    # IDMP and IDMPAUTO of one producer share its records
    e = c.call("XADD", "s", "IDMPAUTO", "p3", "*", "k", "")
    assert c.call("XADD", "s", "IDMPAUTO", "p3", "*", "k", "") == e
    assert idmp_fields(c)[2:] == [3, 8, 8, 2]


@echd_only(R86)
def test_multi_and_pipeline(server):
    c = server.raw()
    c.call("MULTI")
    for iid in ("r1", "r2", "r1", "r3"):
        c.call("XADD", "s", "IDMP", "p1", iid, "*", "f", iid)
    r = c.call("EXEC")
    assert r[0] == r[2] and len(set(r)) == 3
    out = c.pipeline([("XADD", "s", "IDMP", "p2", "x", "*", "f", "v")] * 20)
    assert len(set(out)) == 1 and c.call("XLEN", "s") == 4


# ---------------------------------------------------------------------------
# expiry
# ---------------------------------------------------------------------------

@echd_only(R86)
def test_maxsize_evicts_oldest_per_producer(server):
    c = server.raw()
    c.call("XADD", "s", "IDMP", "p1", "init", "*", "f", "v")
    c.call("XCFGSET", "s", "IDMP-MAXSIZE", "3", "IDMP-DURATION", "60")
    ids = {i: c.call("XADD", "s", "IDMP", "p1", "r%d" % i, "*", "f", "v") for i in (1, 2, 3)}
    q = {i: c.call("XADD", "s", "IDMP", "p2", "r%d" % i, "*", "f", "v") for i in (1, 2, 3)}
    for i in (1, 2, 3):    # each producer keeps its own three
        assert c.call("XADD", "s", "IDMP", "p1", "r%d" % i, "*", "f", "d") == ids[i]
        assert c.call("XADD", "s", "IDMP", "p2", "r%d" % i, "*", "f", "d") == q[i]
    c.call("XADD", "s", "IDMP", "p1", "r4", "*", "f", "v")       # evicts p1's r1
    assert c.call("XADD", "s", "IDMP", "p1", "r1", "*", "f", "new") != ids[1]   # evicts r2
    assert c.call("XADD", "s", "IDMP", "p1", "r3", "*", "f", "d") == ids[3]
    assert c.call("XADD", "s", "IDMP", "p2", "r1", "*", "f", "d") == q[1]
    assert c.call("XLEN", "s") == 9
    assert idmp_fields(c) == [60, 3, 2, 6, 9, 8]


@echd_only(R86)
def test_maxsize_wraparound(server):
    c = server.raw()
    c.call("XADD", "s", "*", "f", "v")
    c.call("XCFGSET", "s", "IDMP-MAXSIZE", "8")
    ids = [c.call("XADD", "s", "IDMP", "p1", "req-%d" % i, "*", "f", "v") for i in range(100)]
    for i in range(92, 100):
        assert c.call("XADD", "s", "IDMP", "p1", "req-%d" % i, "*", "f", "d") == ids[i]
    assert c.call("XADD", "s", "IDMP", "p1", "req-0", "*", "f", "d") != ids[0]
    assert idmp_fields(c)[2:] == [1, 8, 101, 8]


@echd_only(R86)
def test_duration_expiry(server):
    c = server.raw()
    c.call("XADD", "s", "IDMP", "p1", "req-1", "*", "f", "v")
    c.call("XCFGSET", "s", "IDMP-DURATION", "1")
    t0 = time.monotonic()
    a = c.call("XADD", "s", "IDMP", "p1", "req-1", "*", "f", "v")
    c.call("XADD", "s", "IDMP", "p2", "idle", "*", "f", "v")    # nobody adds for p2 again
    assert c.call("XADD", "s", "IDMP", "p1", "req-1", "*", "f", "w") == a
    if time.monotonic() - t0 < 0.9:        # still within the second: kept (lower bound)
        assert idmp_fields(c)[2:4] == [2, 2]
    time.sleep(max(0.0, 1.05 - (time.monotonic() - t0)))
    # past the duration a retry is a new message
    b = c.call("XADD", "s", "IDMP", "p1", "req-1", "*", "f", "v")
    assert b != a and c.call("XLEN", "s") == 4
    # the idle producer's record goes by itself (the active expiry step)
    wait_until(lambda: idmp_fields(c)[2:4] == [1, 1], timeout=4.0, what="p2 expired")


# ---------------------------------------------------------------------------
# XCFGSET
# ---------------------------------------------------------------------------

@echd_only(R86)
def test_xcfgset_clears_only_on_change(server):
    c = server.raw()
    a = c.call("XADD", "s", "IDMP", "p1", "r1", "*", "f", "v")
    c.call("XADD", "s", "IDMP", "p2", "r1", "*", "f", "v")
    c.call("XADD", "s", "IDMP", "p1", "r1", "*", "f", "v")
    for same in (("IDMP-DURATION", "100"), ("IDMP-MAXSIZE", "100"),
                 ("IDMP-DURATION", "100", "IDMP-MAXSIZE", "100")):
        assert c.call("XCFGSET", "s", *same) == "OK"
        assert c.call("XADD", "s", "IDMP", "p1", "r1", "*", "f", "v") == a
    assert idmp_fields(c) == [100, 100, 2, 2, 2, 4]
    c.call("XCFGSET", "s", "IDMP-DURATION", "50")
    assert idmp_fields(c) == [50, 100, 0, 0, 2, 4]       # lifetime counters stay
    n = c.call("XADD", "s", "IDMP", "p1", "r1", "*", "f", "v")
    assert n != a and c.call("XLEN", "s") == 3
    # an option given twice is refused (Redis' t_stream.c), nothing changed
    assert c.err("XCFGSET", "s", "IDMP-MAXSIZE", "5", "IDMP-MAXSIZE", "6") == \
        "ERR IDMP-MAXSIZE specified multiple times"
    assert c.err("XCFGSET", "s", "IDMP-DURATION", "5", "IDMP-MAXSIZE", "6", "IDMP-DURATION",
                 "7") == "ERR IDMP-DURATION specified multiple times"
    assert idmp_fields(c)[:2] == [50, 100]


@echd_only(R86)
def test_xcfgset_errors(server):
    c = server.raw()
    assert c.err("XCFGSET", "s", "IDMP-DURATION", "5") == "ERR no such key"
    # the key is looked up first (Redis' order): a missing one answers so whatever follows
    assert c.err("XCFGSET", "s", "BOGUS") == "ERR no such key"
    assert c.err("XCFGSET", "s") == "ERR no such key"
    c.call("XADD", "s", "*", "f", "v")
    assert c.err("XCFGSET", "s").startswith("ERR At least one parameter")
    for args in (("IDMP-DURATION",), ("IDMP-MAXSIZE",), ("INVALID",), ("INVALID", "1"),
                 ("IDMP-DURATION", "5", "IDMP-MAXSIZE")):
        assert c.err("XCFGSET", "s", *args) == SYNTAX, args
    for bad in ("A", "*", "-", "+", "120-5", "3.14", "000000000", "IDMP-DURATION"):
        assert c.err("XCFGSET", "s", "IDMP-DURATION", bad) == NOT_INT, bad
        assert c.err("XCFGSET", "s", "IDMP-MAXSIZE", bad) == NOT_INT, bad
    assert c.err("XCFGSET", "s", "IDMP-DURATION", "INVALID", "IDMP-MAXSIZE") == NOT_INT
    for v in ("0", "-100", "86401"):
        assert c.err("XCFGSET", "s", "IDMP-DURATION", v) == (
            "ERR IDMP-DURATION must be between 1 and 86400 seconds")
    for v in ("0", "-50", "10001"):
        assert c.err("XCFGSET", "s", "IDMP-MAXSIZE", v) == (
            "ERR IDMP-MAXSIZE must be between 1 and 10000 entries")
    # nothing changed by a refused call, even one whose first half was good
    assert c.err("XCFGSET", "s", "IDMP-DURATION", "5", "IDMP-MAXSIZE", "0").startswith("ERR")
    assert c.call("XCFGSET", "s", "IDMP-DURATION", "86400", "IDMP-MAXSIZE", "10000") == "OK"
    assert c.call("XCFGSET", "s", "IDMP-DURATION", "1", "IDMP-MAXSIZE", "1") == "OK"
    assert idmp_fields(c)[:2] == [1, 1]
    c.call("SELECT", "1")
    assert c.err("XCFGSET", "s", "IDMP-DURATION", "5") == "ERR no such key"


@echd_only(R86)
def test_xadd_idmp_errors(server):
    c = server.raw()
    assert c.err("XADD", "s", "IDMP", "p1", "*", "f", "v") == (
        "ERR Invalid stream ID specified as stream command argument")
    assert c.err("XADD", "s", "IDMP", "p1", "iid1", "1-1", "f", "v") == (
        "ERR IDMP/IDMPAUTO can be used only with auto-generated IDs")
    assert c.err("XADD", "s", "IDMPAUTO", "p1", "1-*", "f", "v") == (
        "ERR IDMP/IDMPAUTO can be used only with auto-generated IDs")
    for args in (("IDMP", "p1", "i1", "IDMP", "p2", "i2"), ("IDMPAUTO", "p1", "IDMP", "p2", "i"),
                 ("IDMP", "p1", "i1", "IDMPAUTO", "p2"), ("IDMPAUTO", "p1", "IDMPAUTO", "p2")):
        assert c.err("XADD", "s", *args, "*", "f", "v") == (
            "ERR IDMP/IDMPAUTO specified multiple times"), args
    assert c.err("XADD", "s", "IDMP", "", "i", "*", "f", "v") == (
        "ERR IDMP requires a non-empty producer ID")
    assert c.err("XADD", "s", "IDMP", "p", "", "*", "f", "v") == (
        "ERR IDMP requires a non-empty idempotent ID")
    assert c.err("XADD", "s", "IDMPAUTO", "", "*", "f", "v") == (
        "ERR IDMPAUTO requires a non-empty producer ID")
    assert c.err("XADD", "s", "IDMP", "p", "i", "*", "f") == (
        "ERR wrong number of arguments for 'xadd' command")
    assert c.call("EXISTS", "s") == 0
    # iids that read like options or ids are plain strings
    for iid in ("*", "-", "+", "IDMP", "MAXLEN", "123-456"):
        c.call("XADD", "s", "IDMP", "p", iid, "*", "f", "v")
    assert c.call("XLEN", "s") == 6


# ---------------------------------------------------------------------------
# XIDMPRECORD
# ---------------------------------------------------------------------------

@echd_only("Redis 8.8 command; 7.0 lacks it")
def test_xidmprecord(server):
    c = server.raw()
    assert c.err("XIDMPRECORD", "s", "p", "i", "1-1") == "ERR no such key"
    c.call("XADD", "s", "1-1", "f", "v")
    c.call("XADD", "s", "2-1", "f", "v")
    assert c.call_raw("XIDMPRECORD", "s", "p", "i", "1-1") == b"+OK\r\n"
    assert c.call_raw("XIDMPRECORD", "s", "p", "i", "1-1") == b"+OK\r\n"    # idempotent
    # Redis 8.8's texts and order (t_stream.c): the id, the names, the key, the entry
    assert c.err("XIDMPRECORD", "s", "p", "i", "2-1") == (
        "ERR IID already exists for this producer with a different stream ID")
    assert c.err("XIDMPRECORD", "s", "p", "j", "3-1") == "ERR No such message in stream"
    assert c.err("XIDMPRECORD", "s", "", "j", "1-1") == "ERR producer ID must be non-empty"
    assert c.err("XIDMPRECORD", "s", "p", "", "1-1") == "ERR idempotent ID must be non-empty"
    assert c.err("XIDMPRECORD", "s", "p", "j", "abc") == (
        "ERR Invalid stream ID specified as stream command argument")
    assert c.err("XIDMPRECORD", "nokey", "", "j", "abc") == (
        "ERR Invalid stream ID specified as stream command argument")
    assert c.err("XIDMPRECORD", "nokey", "", "j", "1-1") == "ERR producer ID must be non-empty"
    assert c.err("XIDMPRECORD", "s", "p", "j") == (
        "ERR wrong number of arguments for 'xidmprecord' command")
    # what it recorded is what a retried XADD finds
    assert c.call("XADD", "s", "IDMP", "p", "i", "*", "f", "v") == b"1-1"
    assert c.call("XLEN", "s") == 2
    assert idmp_fields(c)[2:] == [1, 1, 1, 1]


# ---------------------------------------------------------------------------
# the records and the key: restart, DEL, COPY, RENAME, MOVE, MEMORY USAGE
# ---------------------------------------------------------------------------

@echd_only(R86)
def test_records_survive_kill9(server):
    c = server.raw()
    c.call("XADD", "s", "*", "f", "v")
    c.call("XCFGSET", "s", "IDMP-DURATION", "75", "IDMP-MAXSIZE", "7500")
    ids = [c.call("XADD", "s", "IDMP", "p%d" % (i % 3), "r%d" % i, "*", "f", "v")
           for i in range(30)]
    auto = c.call("XADD", "s", "IDMPAUTO", "pa", "*", "k", "v")
    c.call("XADD", "s", "IDMP", "p0", "r0", "*", "f", "v")
    before = idmp_fields(c)
    server.restart(kill=signal.SIGKILL)
    c = server.raw()
    assert idmp_fields(c) == before == [75, 7500, 4, 31, 31, 1]
    for i in range(30):
        assert c.call("XADD", "s", "IDMP", "p%d" % (i % 3), "r%d" % i, "*", "f", "x") == ids[i]
    assert c.call("XADD", "s", "IDMPAUTO", "pa", "*", "k", "v") == auto
    assert c.call("XLEN", "s") == 32


def crafted_pair(server):
    """Two messages that shared an IDMPAUTO iid under echd's unkeyed hash of before issue 35,
    made by tests/helpers/idmp_collide.c (beside echd in the build tree) in a few seconds."""
    exe = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(server.exe))), "tests",
                       "idmp-collide")
    p = subprocess.run([exe], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    m1, m2 = [line.split() for line in p.stdout.splitlines()[:2]]
    assert m1 != m2 and len(m1) == len(m2) == 2048, (len(m1), len(m2))
    return m1, m2


def reversed_pairs(m):
    pairs = [m[i:i + 2] for i in range(0, len(m), 2)]
    return [x for pair in reversed(pairs) for x in pair]


@echd_only(R86)
@timeout(180)
def test_auto_iid_keyed(server):
    """Issue 35: IDMPAUTO's iid was an unkeyed sum over the pairs, so two messages crafted
    to share it (a k-sum, about 2^22 hashes) had the second answered with the first's id and
    dropped. Keyed by a secret of the stream's own, they are two entries; a retry of either,
    its pairs in another order, still gets its first id, after a kill -9 too."""
    m1, m2 = crafted_pair(server)
    c = server.raw()
    id1 = c.call("XADD", "crafted", "IDMPAUTO", "p", "*", *m1)
    id2 = c.call("XADD", "crafted", "IDMPAUTO", "p", "*", *m2)
    assert id1 != id2, "the crafted messages share an iid"
    assert c.call("XLEN", "crafted") == 2
    assert c.call("XADD", "crafted", "IDMPAUTO", "p", "*", *reversed_pairs(m1)) == id1
    server.restart(kill=signal.SIGKILL)
    c = server.raw()
    assert c.call("XADD", "crafted", "IDMPAUTO", "p", "*", *reversed_pairs(m2)) == id2
    assert c.call("XADD", "crafted", "IDMPAUTO", "p", "*", *m1) == id1
    assert c.call("XLEN", "crafted") == 2
    assert idmp_fields(c, "crafted")[3:] == [2, 2, 3]


@echd_only(R86)
def test_records_go_with_the_key(server):
    c = server.raw()
    a = c.call("XADD", "s", "IDMP", "p", "i", "*", "f", "v")
    # COPY copies them; the copy's records are its own
    assert c.call("COPY", "s", "t") == 1
    assert c.call("XADD", "t", "IDMP", "p", "i", "*", "f", "v") == a
    assert c.call("XADD", "t", "IDMP", "p", "j", "*", "f", "v") != a
    assert idmp_fields(c, "t")[2:4] == [1, 2] and idmp_fields(c, "s")[2:4] == [1, 1]
    # RENAME and MOVE take them along
    c.call("RENAME", "t", "u")
    assert c.call("XADD", "u", "IDMP", "p", "i", "*", "f", "v") == a
    assert c.call("MOVE", "u", "3") == 1
    c.call("SELECT", "3")
    assert c.call("XADD", "u", "IDMP", "p", "i", "*", "f", "v") == a
    c.call("SELECT", "0")
    # MEMORY USAGE counts them
    c.call("XADD", "m", "1-1", "f", "v")
    plain = c.call("MEMORY", "USAGE", "m")
    for i in range(50):
        c.call("XIDMPRECORD", "m", "producer", "iid-%d" % i, "1-1")
    assert c.call("MEMORY", "USAGE", "m") > plain + 50 * 40
    # DEL drops them: a new stream of the name starts with none
    assert c.call("DEL", "s") == 1
    b = c.call("XADD", "s", "IDMP", "p", "i", "*", "f", "v")
    assert b != a and idmp_fields(c)[2:] == [1, 1, 1, 0]
    c.call("FLUSHALL")
    assert c.call("XADD", "s", "IDMP", "p", "i", "*", "f", "v") != b
