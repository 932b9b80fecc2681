"""XREAD and XREADGROUP MAXCOUNT and MAXSIZE (Redis 8.10): caps over the whole reply.

COUNT caps each stream; MAXCOUNT caps the entries of all streams together, served in the order
the caller named them, and the streams after the cap are left out of the reply. MAXSIZE is a
soft cap on the reply's bytes: no entry is added once the reply has reached it, but the entry
that crosses it stays, and one entry larger than MAXSIZE still goes out so a reader always
progresses. Both combine with COUNT, BLOCK (a reader woken by an XADD honours them), NOACK and
CLAIM (claimed entries count like new ones); an entry left out is not delivered: it stays new
for the group, or pending as it was. Written from redis.io's XREAD and XREADGROUP pages and the
8.10 argument metadata; decisions where they leave a case open are in docs/compatibility.md
("XREAD and XREADGROUP MAXCOUNT/MAXSIZE").
"""

import time

from echdtest import fill

TIMEOUT = 60
ECHD_ONLY = "Redis 8.10 option; 7.0 lacks it"

MAXCOUNT_ERR = "ERR MAXCOUNT must be a positive integer"
MAXSIZE_ERR = "ERR MAXSIZE must be a positive integer"
BELOW_COUNT = "ERR MAXCOUNT must be greater than or equal to COUNT"


def ids(reply):
    """A RESP2 or RESP3 XREAD reply as [(key, [id, ...])]."""
    pairs = reply.items() if isinstance(reply, dict) else reply
    return [(k.decode(), [e[0].decode() for e in entries]) for k, entries in pairs]


def three_streams(c, n=3):
    for k in ("a", "b", "c"):
        fill(c, k, n)


def groups(c, keys=("a", "b", "c")):
    for k in keys:
        c.call("XGROUP", "CREATE", k, "g", "0")


def pending(c, key):
    return [r[0].decode() for r in c.call("XPENDING", key, "g", "-", "+", "100")]


def last_delivered(c, key):
    info = c.call("XINFO", "GROUPS", key)[0]
    return dict(zip(info[0::2], info[1::2]))[b"last-delivered-id"].decode()


def test_xread_maxcount_across_streams(server):
    c = server.raw()
    three_streams(c)
    args = ("STREAMS", "a", "b", "c", "0", "0", "0")
    # COUNT per stream, MAXCOUNT over all: 2 from a, 1 from b, c left out
    assert ids(c.call("XREAD", "COUNT", "2", "MAXCOUNT", "3", *args)) == [
        ("a", ["1-1", "2-1"]), ("b", ["1-1"])]
    # without COUNT: a whole, then the rest of the budget from b
    assert ids(c.call("XREAD", "MAXCOUNT", "4", *args)) == [
        ("a", ["1-1", "2-1", "3-1"]), ("b", ["1-1"])]
    # the order is the caller's
    assert ids(c.call("XREAD", "MAXCOUNT", "2", "STREAMS", "c", "a", "0", "0")) == [
        ("c", ["1-1", "2-1"])]
    # a cap above what there is changes nothing; MAXCOUNT equal to COUNT is allowed
    assert ids(c.call("XREAD", "MAXCOUNT", "100", *args)) == ids(c.call("XREAD", *args))
    assert ids(c.call("XREAD", "COUNT", "1", "MAXCOUNT", "1", *args)) == [("a", ["1-1"])]
    # streams with nothing to read use none of the budget
    assert ids(c.call("XREAD", "MAXCOUNT", "2", "STREAMS", "nokey", "a", "b", "0", "3-1",
                      "0")) == [("b", ["1-1", "2-1"])]
    # nothing at all: the usual null reply
    assert c.call("XREAD", "MAXCOUNT", "2", "STREAMS", "a", "3-1") is None


def test_xreadgroup_maxcount_delivers_only_what_it_returns(server):
    c = server.raw()
    three_streams(c)
    groups(c)
    got = c.call("XREADGROUP", "GROUP", "g", "c1", "COUNT", "2", "MAXCOUNT", "3",
                 "STREAMS", "a", "b", "c", ">", ">", ">")
    assert ids(got) == [("a", ["1-1", "2-1"]), ("b", ["1-1"])]
    assert pending(c, "a") == ["1-1", "2-1"] and pending(c, "b") == ["1-1"]
    assert pending(c, "c") == []
    assert (last_delivered(c, "a"), last_delivered(c, "b"), last_delivered(c, "c")) == \
        ("2-1", "1-1", "0-0")
    # the stream left out was not reached: no consumer was made in its group
    assert c.call("XINFO", "CONSUMERS", "c", "g") == []
    assert len(c.call("XINFO", "CONSUMERS", "b", "g")) == 1
    # the next read goes on where this one stopped
    got = c.call("XREADGROUP", "GROUP", "g", "c1", "MAXCOUNT", "3",
                 "STREAMS", "a", "b", "c", ">", ">", ">")
    assert ids(got) == [("a", ["3-1"]), ("b", ["2-1", "3-1"])]
    # history reads ('0') share the budget too
    got = c.call("XREADGROUP", "GROUP", "g", "c1", "MAXCOUNT", "4",
                 "STREAMS", "a", "b", "0", "0")
    assert ids(got) == [("a", ["1-1", "2-1", "3-1"]), ("b", ["1-1"])]
    rows = {r[0]: r[3] for r in c.call("XPENDING", "b", "g", "-", "+", "10")}
    assert rows == {b"1-1": 2, b"2-1": 1, b"3-1": 1}     # only 1-1 was delivered again
    # once the budget is spent a history stream is left out, not listed empty
    got = c.call("XREADGROUP", "GROUP", "g", "c1", "MAXCOUNT", "3",
                 "STREAMS", "a", "b", "0", "0")
    assert ids(got) == [("a", ["1-1", "2-1", "3-1"])]


def test_xreadgroup_maxcount_noack(server):
    c = server.raw()
    fill(c, "s", 4)
    groups(c, ("s",))
    got = c.call("XREADGROUP", "GROUP", "g", "c1", "NOACK", "MAXCOUNT", "3",
                 "STREAMS", "s", ">")
    assert ids(got) == [("s", ["1-1", "2-1", "3-1"])]
    assert pending(c, "s") == [] and last_delivered(c, "s") == "3-1"


def big_entries(c, key, n, size=100, start=1):
    c.pipeline([("XADD", key, "%d-1" % (start + i), "f", "x" * size) for i in range(n)])


def test_maxsize_cut_points(server):
    """An entry of a 100-byte value is about 130 bytes of reply."""
    c = server.raw()
    big_entries(c, "s", 5)
    read = lambda size: ids(c.call("XREAD", "MAXSIZE", str(size), "STREAMS", "s", "0"))
    # one entry larger than MAXSIZE still goes out
    assert read(1) == [("s", ["1-1"])]
    assert read(100) == [("s", ["1-1"])]
    # the entry that crosses MAXSIZE is in, none after it
    assert read(200) == [("s", ["1-1", "2-1"])]
    assert read(300) == [("s", ["1-1", "2-1", "3-1"])]
    assert read(100000) == [("s", ["1-1", "2-1", "3-1", "4-1", "5-1"])]
    # with COUNT and MAXCOUNT, whichever cap comes first
    assert ids(c.call("XREAD", "COUNT", "1", "MAXSIZE", "100000", "STREAMS", "s", "0")) == \
        [("s", ["1-1"])]
    assert ids(c.call("XREAD", "MAXCOUNT", "4", "MAXSIZE", "300", "STREAMS", "s", "0")) == \
        [("s", ["1-1", "2-1", "3-1"])]
    assert ids(c.call("XREAD", "MAXCOUNT", "2", "MAXSIZE", "300", "STREAMS", "s", "0")) == \
        [("s", ["1-1", "2-1"])]
    # across streams: the bytes of the earlier streams count, later streams are left out
    for k in ("t", "u", "v"):
        big_entries(c, k, 1)
    assert ids(c.call("XREAD", "MAXSIZE", "200", "STREAMS", "t", "u", "v", "0", "0", "0")) \
        == [("t", ["1-1"]), ("u", ["1-1"])]
    assert ids(c.call("XREAD", "MAXSIZE", "100", "STREAMS", "t", "u", "v", "0", "0", "0")) \
        == [("t", ["1-1"])]


def test_maxsize_xreadgroup_oversized_entry(server):
    c = server.raw()
    big_entries(c, "s", 2, size=10000)
    groups(c, ("s",))
    got = c.call("XREADGROUP", "GROUP", "g", "c1", "MAXSIZE", "10", "STREAMS", "s", ">")
    assert ids(got) == [("s", ["1-1"])] and len(got[0][1][0][1][1]) == 10000
    assert pending(c, "s") == ["1-1"] and last_delivered(c, "s") == "1-1"
    got = c.call("XREADGROUP", "GROUP", "g", "c1", "MAXSIZE", "10", "STREAMS", "s", ">")
    assert ids(got) == [("s", ["2-1"])]
    assert c.call("XREADGROUP", "GROUP", "g", "c1", "MAXSIZE", "10", "STREAMS", "s", ">") \
        is None


def test_with_claim(server):
    """Claimed entries count against MAXCOUNT like new ones; what is left out stays as it
    was: pending for its owner, or new for the group."""
    c = server.raw()
    fill(c, "a", 4)
    fill(c, "b", 2)
    groups(c, ("a", "b"))
    c.call("XREADGROUP", "GROUP", "g", "c1", "COUNT", "2", "STREAMS", "a", ">")   # a 1 2
    c.call("XREADGROUP", "GROUP", "g", "c1", "COUNT", "1", "STREAMS", "b", ">")   # b 1
    time.sleep(0.05)
    got = c.call("XREADGROUP", "GROUP", "g", "c2", "MAXCOUNT", "3", "CLAIM", "10",
                 "STREAMS", "a", "b", ">", ">")
    # a: the two claimable ones first, then one new (four elements too); b left out
    assert [k for k, _ in got] == [b"a"]
    assert [(len(e), e[0]) for e in got[0][1]] == [(4, b"1-1"), (4, b"2-1"), (4, b"3-1")]
    rows = [(r[0], r[1]) for r in c.call("XPENDING", "a", "g", "-", "+", "10")]
    assert rows == [(b"1-1", b"c2"), (b"2-1", b"c2"), (b"3-1", b"c2")]
    assert last_delivered(c, "a") == "3-1"
    assert [(r[0], r[1]) for r in c.call("XPENDING", "b", "g", "-", "+", "10")] == \
        [(b"1-1", b"c1")]
    assert last_delivered(c, "b") == "1-1"
    time.sleep(0.05)
    # a budget spent on claims alone: no new entry goes out
    got = c.call("XREADGROUP", "GROUP", "g", "c3", "MAXCOUNT", "2", "CLAIM", "10",
                 "STREAMS", "a", ">")
    assert [(len(e), e[0]) for e in got[0][1]] == [(4, b"1-1"), (4, b"2-1")]
    assert last_delivered(c, "a") == "3-1"
    # MAXSIZE: the first claimed entry goes out however small the cap
    time.sleep(0.05)
    got = c.call("XREADGROUP", "GROUP", "g", "c4", "MAXSIZE", "1", "CLAIM", "10",
                 "STREAMS", "b", "a", ">", ">")
    assert [k for k, _ in got] == [b"b"] and [e[0] for e in got[0][1]] == [b"1-1"]
    assert len(got[0][1][0]) == 4


def test_block_woken_honours_caps(server):
    c = server.raw()
    fill(c, "s", 1)
    groups(c, ("s",))
    c.call("XREADGROUP", "GROUP", "g", "c0", "STREAMS", "s", ">")
    # XREADGROUP: woken by three entries added at once, takes MAXCOUNT of them
    r = server.raw()
    r.send("XREADGROUP", "GROUP", "g", "c1", "BLOCK", "10000", "MAXCOUNT", "2",
           "STREAMS", "s", ">")
    time.sleep(0.2)
    c.pipeline([("MULTI",), ("XADD", "s", "2-1", "f", "v"), ("XADD", "s", "3-1", "f", "v"),
                ("XADD", "s", "4-1", "f", "v"), ("EXEC",)])
    assert ids(r.read()) == [("s", ["2-1", "3-1"])]
    assert last_delivered(c, "s") == "3-1"
    # XREAD on '$' across two streams, woken by a transaction writing both: MAXSIZE 1
    # lets one entry out, of the first stream named that has one
    r.send("XREAD", "BLOCK", "10000", "MAXSIZE", "1", "STREAMS", "t", "s", "$", "$")
    time.sleep(0.2)
    c.pipeline([("MULTI",), ("XADD", "s", "5-1", "f", "v"), ("XADD", "s", "6-1", "f", "v"),
                ("XADD", "t", "1-1", "f", "v"), ("EXEC",)])
    assert ids(r.read()) == [("t", ["1-1"])]
    # a blocked read with nothing yet times out as usual
    t0 = time.monotonic()
    assert r.call("XREAD", "BLOCK", "200", "MAXCOUNT", "1", "STREAMS", "s", "$") is None
    assert time.monotonic() - t0 >= 0.15


def test_resp3(server):
    c = server.raw()
    three_streams(c, 2)
    groups(c)
    c.call("HELLO", "3")
    got = c.call("XREAD", "COUNT", "1", "MAXCOUNT", "2", "STREAMS", "a", "b", "c", "0", "0",
                 "0")
    assert isinstance(got, dict) and ids(got) == [("a", ["1-1"]), ("b", ["1-1"])]
    got = c.call("XREADGROUP", "GROUP", "g", "c1", "MAXCOUNT", "3", "STREAMS", "a", "b", "c",
                 ">", ">", ">")
    assert isinstance(got, dict) and ids(got) == [("a", ["1-1", "2-1"]), ("b", ["1-1"])]
    got = c.call("XREADGROUP", "GROUP", "g", "c1", "MAXSIZE", "1", "STREAMS", "b", "c",
                 ">", ">")
    assert ids(got) == [("b", ["2-1"])]


def test_errors(server):
    c = server.raw()
    fill(c, "s", 2)
    groups(c, ("s",))
    for word, err in (("MAXCOUNT", MAXCOUNT_ERR), ("MAXSIZE", MAXSIZE_ERR)):
        for bad in ("0", "-1", "x", "1.5", "99999999999999999999"):
            assert c.err("XREAD", word, bad, "STREAMS", "s", "0") == err, (word, bad)
            assert c.err("XREADGROUP", "GROUP", "g", "c", word, bad, "STREAMS", "s", ">") == \
                err, (word, bad)
        # as for COUNT: the word after the option is its value
        assert c.err("XREAD", word, "STREAMS", "s", "0") == err
    # MAXCOUNT below COUNT, in either order; COUNT 0 or below is no per-stream cap
    assert c.err("XREAD", "COUNT", "3", "MAXCOUNT", "2", "STREAMS", "s", "0") == BELOW_COUNT
    assert c.err("XREAD", "MAXCOUNT", "2", "COUNT", "3", "STREAMS", "s", "0") == BELOW_COUNT
    assert c.err("XREADGROUP", "GROUP", "g", "c", "COUNT", "3", "MAXCOUNT", "2",
                 "STREAMS", "s", ">") == BELOW_COUNT
    assert ids(c.call("XREAD", "COUNT", "0", "MAXCOUNT", "1", "STREAMS", "s", "0")) == \
        [("s", ["1-1"])]
    # the last one given counts, as for COUNT
    assert ids(c.call("XREAD", "MAXCOUNT", "1", "MAXCOUNT", "2", "STREAMS", "s", "0")) == \
        [("s", ["1-1", "2-1"])]
    # nothing was delivered by the refused ones
    assert c.call("XPENDING", "s", "g")[0] == 0
    assert c.call("XINFO", "CONSUMERS", "s", "g") == []
    # the keys are found past the new options
    assert c.call("COMMAND", "GETKEYS", "XREAD", "MAXCOUNT", "1", "MAXSIZE", "10",
                  "STREAMS", "s", "0") == [b"s"]
    assert c.call("COMMAND", "GETKEYS", "XREADGROUP", "GROUP", "g", "c", "MAXCOUNT", "1",
                  "MAXSIZE", "10", "CLAIM", "5", "STREAMS", "s", ">") == [b"s"]


def test_command_docs(server):
    """COMMAND DOCS lists the options, in Redis' order."""
    c = server.raw()
    for cmd in ("xread", "xreadgroup"):
        docs = c.call("COMMAND", "DOCS", cmd)
        doc = dict(zip(docs[1][0::2], docs[1][1::2]))
        names = [dict(zip(a[0::2], a[1::2]))[b"name"] for a in doc[b"arguments"]]
        assert names.index(b"count") < names.index(b"maxcount") < \
            names.index(b"maxsize") < names.index(b"block"), (cmd, names)
