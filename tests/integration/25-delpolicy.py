"""Deletion policies (Redis 8.2): XDELEX and XACKDEL, and KEEPREF | DELREF | ACKED on XADD's and
XTRIM's trimming.

Written from Redis' command pages (xdelex.md, xackdel.md, xadd.md, xtrim.md): the documented
examples give the documented replies; each policy gives its per-id codes (-1 no such entry,
1 deleted, 2 kept because a group still holds it); DELREF removes the pending records of every
group and consumer (XPENDING and XINFO show it); ACKED keeps what a group has pending or has not
yet been given, and trimming under ACKED skips such entries; the errors are Redis'. Redis 7.0 on
this machine lacks all of it, so every test is echd-only. Decisions where the pages leave a case
open are in docs/compatibility.md ("Deletion policies").
"""

from echdtest import echd_only

TIMEOUT = 60

ONLY = "Redis 8.2 command; 7.0 lacks it"
SYNTAX = "ERR syntax error"
NUMIDS = "ERR Number of IDs must be a positive integer"
IDSCOUNT = "ERR The `numids` parameter must match the number of arguments"
INVALID_ID = "ERR Invalid stream ID specified as stream command argument"
ARITY = "ERR wrong number of arguments for '%s' command"


def kv(flat):
    assert len(flat) % 2 == 0, flat
    return {k.decode(): v for k, v in zip(flat[0::2], flat[1::2])}


def groups(c, key):
    return {g["name"].decode(): g for g in (kv(x) for x in c.call("XINFO", "GROUPS", key))}


def consumers(c, key, grp):
    return {x["name"].decode(): x["pending"]
            for x in (kv(y) for y in c.call("XINFO", "CONSUMERS", key, grp))}


def pending_ids(c, key, grp, consumer=None):
    args = ["XPENDING", key, grp, "-", "+", "100"] + ([consumer] if consumer else [])
    return [row[0].decode() for row in c.call(*args)]


def ids(c, key):
    return [x[0].decode() for x in c.call("XRANGE", key, "-", "+")]


def setup(c, n=6, key="s"):
    """Entries 1-1 .. n-1; group g1: c1 read 1 2, c2 read 3; group g2: c3 read 1; group g3
    created at 0, read nothing."""
    for i in range(1, n + 1):
        c.call("XADD", key, "%d-1" % i, "f", "v%d" % i)
    for g in ("g1", "g2", "g3"):
        assert c.call("XGROUP", "CREATE", key, g, "0") == "OK"
    c.call("XREADGROUP", "GROUP", "g1", "c1", "COUNT", "2", "STREAMS", key, ">")
    c.call("XREADGROUP", "GROUP", "g1", "c2", "COUNT", "1", "STREAMS", key, ">")
    c.call("XREADGROUP", "GROUP", "g2", "c3", "COUNT", "1", "STREAMS", key, ">")


# ---------------------------------------------------------------------------
# the documented examples
# ---------------------------------------------------------------------------

@echd_only(ONLY)
def test_xackdel_doc_example(server):
    c = server.raw()
    a = c.call("XADD", "mystream", "*", "field1", "value1")
    b = c.call("XADD", "mystream", "*", "field2", "value2")
    assert c.call("XGROUP", "CREATE", "mystream", "mygroup", "0") == "OK"
    assert c.call("XREADGROUP", "GROUP", "mygroup", "consumer1", "COUNT", "2", "STREAMS",
                  "mystream", ">") == [[b"mystream", [[a, [b"field1", b"value1"]],
                                                      [b, [b"field2", b"value2"]]]]]
    assert c.call("XPENDING", "mystream", "mygroup") == [2, a, b, [[b"consumer1", b"2"]]]
    assert c.call_raw("XACKDEL", "mystream", "mygroup", "KEEPREF", "IDS", "2", a, b) == \
        b"*2\r\n:1\r\n:1\r\n"
    assert c.call("XPENDING", "mystream", "mygroup") == [0, None, None, None]
    assert c.call("XRANGE", "mystream", "-", "+") == []


@echd_only(ONLY)
def test_xdelex_doc_example(server):
    c = server.raw()
    added = [c.call("XADD", "mystream", "*", "field%d" % i, "value%d" % i) for i in (1, 2, 3)]
    before = c.call("XRANGE", "mystream", "-", "+")
    assert [x[0] for x in before] == added
    assert c.call_raw("XDELEX", "mystream", "KEEPREF", "IDS", "2", "1526919030474-55",
                      "1526919030474-56") == b"*2\r\n:-1\r\n:-1\r\n"
    assert c.call("XRANGE", "mystream", "-", "+") == before


# ---------------------------------------------------------------------------
# XDELEX
# ---------------------------------------------------------------------------

@echd_only(ONLY)
def test_xdelex_keepref(server):
    c = server.raw()
    setup(c)
    # the default is KEEPREF: like XDEL, the pending records stay
    assert c.call("XDELEX", "s", "IDS", "2", "1-1", "9-9") == [1, -1]
    assert c.call("XDELEX", "s", "KEEPREF", "IDS", "1", "3-1") == [1]
    assert ids(c, "s") == ["2-1", "4-1", "5-1", "6-1"]
    assert pending_ids(c, "s", "g1") == ["1-1", "2-1", "3-1"]
    assert pending_ids(c, "s", "g2") == ["1-1"]
    assert kv(c.call("XINFO", "STREAM", "s"))["max-deleted-entry-id"] == b"3-1"
    # deleted once: the second time there is no such entry
    assert c.call("XDELEX", "s", "IDS", "2", "1-1", "1-1") == [-1, -1]


@echd_only(ONLY)
def test_xdelex_delref(server):
    c = server.raw()
    setup(c)
    assert consumers(c, "s", "g1") == {"c1": 2, "c2": 1}
    assert c.call("XDELEX", "s", "DELREF", "IDS", "2", "1-1", "3-1") == [1, 1]
    # every group's and every consumer's records of 1-1 and 3-1 are gone
    assert pending_ids(c, "s", "g1") == ["2-1"]
    assert pending_ids(c, "s", "g1", "c1") == ["2-1"]
    assert pending_ids(c, "s", "g1", "c2") == []
    assert pending_ids(c, "s", "g2") == []
    assert consumers(c, "s", "g1") == {"c1": 1, "c2": 0}
    assert consumers(c, "s", "g2") == {"c3": 0}
    assert c.call("XPENDING", "s", "g1") == [1, b"2-1", b"2-1", [[b"c1", b"1"]]]
    assert c.call("XPENDING", "s", "g2") == [0, None, None, None]
    g = groups(c, "s")
    assert (g["g1"]["pending"], g["g2"]["pending"], g["g3"]["pending"]) == (1, 0, 0)
    # lag stays exact: g1 delivered up to 3-1, so 4 5 6 are ahead of it
    assert (g["g1"]["lag"], g["g2"]["lag"], g["g3"]["lag"]) == (3, 4, 4)
    assert ids(c, "s") == ["2-1", "4-1", "5-1", "6-1"]


@echd_only(ONLY)
def test_xdelex_delref_dangling(server):
    c = server.raw()
    setup(c)
    # KEEPREF first leaves records of an entry that is gone; DELREF of the missing entry
    # answers -1 but still removes those records
    assert c.call("XDELEX", "s", "IDS", "1", "1-1") == [1]
    assert pending_ids(c, "s", "g2") == ["1-1"]
    assert c.call("XDELEX", "s", "DELREF", "IDS", "1", "1-1") == [-1]
    assert pending_ids(c, "s", "g1") == ["2-1", "3-1"]
    assert pending_ids(c, "s", "g2") == []
    assert consumers(c, "s", "g1") == {"c1": 1, "c2": 1}


@echd_only(ONLY)
def test_xdelex_acked(server):
    c = server.raw()
    for i in range(1, 4):
        c.call("XADD", "s", "%d-1" % i, "f", "v")
    c.call("XGROUP", "CREATE", "s", "g1", "0")
    c.call("XGROUP", "CREATE", "s", "g2", "0")
    c.call("XREADGROUP", "GROUP", "g1", "c", "STREAMS", "s", ">")     # g1: 1 2 3 pending
    # pending in g1 and never delivered to g2: kept
    assert c.call("XDELEX", "s", "ACKED", "IDS", "2", "1-1", "7-7") == [2, -1]
    assert c.call("XACK", "s", "g1", "1-1", "2-1") == 2
    # acknowledged by g1, but g2 has not been given it yet
    assert c.call("XDELEX", "s", "ACKED", "IDS", "1", "1-1") == [2]
    c.call("XREADGROUP", "GROUP", "g2", "c", "COUNT", "2", "STREAMS", "s", ">")  # g2: 1 2
    # delivered to g2 and pending there
    assert c.call("XDELEX", "s", "ACKED", "IDS", "1", "1-1") == [2]
    assert c.call("XACK", "s", "g2", "1-1") == 1
    # read and acknowledged by every group: deleted; 2-1 still pending in g2
    assert c.call("XDELEX", "s", "ACKED", "IDS", "2", "1-1", "2-1") == [1, 2]
    assert ids(c, "s") == ["2-1", "3-1"]
    # a cursor moved past an entry by XGROUP SETID counts as delivered
    c.call("XGROUP", "SETID", "s", "g2", "$")
    assert c.call("XACK", "s", "g2", "2-1") == 1
    assert c.call("XDELEX", "s", "ACKED", "IDS", "2", "2-1", "3-1") == [1, 2]
    assert c.call("XACK", "s", "g1", "3-1") == 1
    assert c.call("XDELEX", "s", "ACKED", "IDS", "1", "3-1") == [1]
    assert c.call("XLEN", "s") == 0


@echd_only(ONLY)
def test_xdelex_acked_without_groups(server):
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    c.call("XADD", "s", "2-1", "f", "v")
    # no group holds anything: ACKED deletes as KEEPREF does (see compatibility.md)
    assert c.call("XDELEX", "s", "ACKED", "IDS", "1", "1-1") == [1]
    assert ids(c, "s") == ["2-1"]


@echd_only(ONLY)
def test_xdelex_missing_key(server):
    c = server.raw()
    assert c.call("XDELEX", "nokey", "IDS", "3", "1-1", "2", "3-1") == [-1, -1, -1]
    assert c.call("XDELEX", "nokey", "DELREF", "IDS", "1", "1-1") == [-1]
    assert c.call("EXISTS", "nokey") == 0
    # deleting the last entry keeps the key, as XDEL does
    c.call("XADD", "s", "1-1", "f", "v")
    assert c.call("XDELEX", "s", "IDS", "1", "1") == [-1]       # 1 is 1-0
    assert c.call("XDELEX", "s", "IDS", "1", "1-1") == [1]
    assert c.call("EXISTS", "s") == 1
    assert c.call("XLEN", "s") == 0


# ---------------------------------------------------------------------------
# XACKDEL
# ---------------------------------------------------------------------------

@echd_only(ONLY)
def test_xackdel_policies(server):
    c = server.raw()
    setup(c)
    # KEEPREF: acknowledged in g1 and deleted; g2 keeps its record of 1-1
    assert c.call("XACKDEL", "s", "g1", "IDS", "1", "1-1") == [1]
    assert pending_ids(c, "s", "g1") == ["2-1", "3-1"]
    assert pending_ids(c, "s", "g2") == ["1-1"]
    assert ids(c, "s") == ["2-1", "3-1", "4-1", "5-1", "6-1"]
    # not pending in the group (4-1 never delivered, 1-1 acknowledged): -1, nothing done
    assert c.call("XACKDEL", "s", "g1", "IDS", "2", "4-1", "1-1") == [-1, -1]
    assert c.call("XLEN", "s") == 5
    # ACKED: acknowledged in g1, but g2 and g3 have not had 2-1: kept
    assert c.call("XACKDEL", "s", "g1", "ACKED", "IDS", "1", "2-1") == [2]
    assert pending_ids(c, "s", "g1") == ["3-1"]
    assert ids(c, "s")[0] == "2-1"
    # DELREF: acknowledged, deleted, and gone from g2's PEL too
    c.call("XREADGROUP", "GROUP", "g2", "c3", "COUNT", "2", "STREAMS", "s", ">")   # 2 3
    assert pending_ids(c, "s", "g2") == ["1-1", "2-1", "3-1"]
    assert c.call("XACKDEL", "s", "g1", "DELREF", "IDS", "1", "3-1") == [1]
    assert pending_ids(c, "s", "g1") == []
    assert pending_ids(c, "s", "g2") == ["1-1", "2-1"]
    assert consumers(c, "s", "g2") == {"c3": 2}
    assert consumers(c, "s", "g1") == {"c1": 0, "c2": 0}
    # a pending record of an entry already deleted: acknowledged, 1
    assert c.call("XACKDEL", "s", "g2", "IDS", "1", "1-1") == [1]
    assert pending_ids(c, "s", "g2") == ["2-1"]


@echd_only(ONLY)
def test_xackdel_acked_every_group(server):
    c = server.raw()
    c.call("XADD", "s5", "1-1", "a", "1")
    c.call("XGROUP", "CREATE", "s5", "g1", "0")
    c.call("XGROUP", "CREATE", "s5", "g2", "0")
    c.call("XREADGROUP", "GROUP", "g1", "cons1", "COUNT", "10", "STREAMS", "s5", ">")
    assert c.call("XACKDEL", "s5", "g1", "ACKED", "IDS", "1", "1-1") == [2]
    assert c.call("XLEN", "s5") == 1
    c.call("XREADGROUP", "GROUP", "g2", "cons1", "COUNT", "10", "STREAMS", "s5", ">")
    assert c.call("XACKDEL", "s5", "g2", "ACKED", "IDS", "1", "1-1") == [1]
    assert c.call("XLEN", "s5") == 0
    g = groups(c, "s5")
    assert (g["g1"]["pending"], g["g2"]["pending"], g["g1"]["lag"], g["g2"]["lag"]) == \
        (0, 0, 0, 0)


@echd_only(ONLY)
def test_xackdel_missing_key_or_group(server):
    c = server.raw()
    assert c.call("XACKDEL", "nokey", "g", "IDS", "2", "1-1", "2-1") == [-1, -1]
    c.call("XADD", "s", "1-1", "f", "v")
    assert c.call("XACKDEL", "s", "nogroup", "DELREF", "IDS", "1", "1-1") == [-1]
    assert c.call("XLEN", "s") == 1
    assert c.call("EXISTS", "nokey") == 0


# ---------------------------------------------------------------------------
# XTRIM and XADD
# ---------------------------------------------------------------------------

@echd_only(ONLY)
def test_xtrim_keepref_delref(server):
    c = server.raw()
    setup(c)
    assert c.call("XTRIM", "s", "MAXLEN", "5", "KEEPREF") == 1
    assert pending_ids(c, "s", "g2") == ["1-1"]
    assert c.call("XTRIM", "s", "MAXLEN", "4", "DELREF") == 1        # 2-1
    assert pending_ids(c, "s", "g1") == ["1-1", "3-1"]               # 1-1 was KEEPREF
    assert consumers(c, "s", "g1") == {"c1": 1, "c2": 1}
    assert c.call("XTRIM", "s", "MINID", "4", "DELREF") == 1         # 3-1
    assert pending_ids(c, "s", "g1") == ["1-1"]
    assert ids(c, "s") == ["4-1", "5-1", "6-1"]
    # with no group a policy changes nothing
    for i in range(1, 6):
        c.call("XADD", "t", "%d-1" % i, "f", "v")
    assert c.call("XTRIM", "t", "MAXLEN", "2", "ACKED") == 3
    assert c.call("XTRIM", "t", "DELREF", "MINID", "5") == 1


@echd_only(ONLY)
def test_xtrim_acked(server):
    c = server.raw()
    for i in range(1, 11):
        c.call("XADD", "s", "%d-1" % i, "f", "v")
    c.call("XGROUP", "CREATE", "s", "g1", "0")
    c.call("XGROUP", "CREATE", "s", "g2", "0")
    c.call("XREADGROUP", "GROUP", "g1", "c", "COUNT", "6", "STREAMS", "s", ">")   # 1..6
    c.call("XREADGROUP", "GROUP", "g2", "c", "COUNT", "4", "STREAMS", "s", ">")   # 1..4
    c.call("XACK", "s", "g1", "1-1", "2-1", "4-1", "5-1", "6-1")   # g1 holds 3
    c.call("XACK", "s", "g2", "1-1", "3-1", "4-1")                 # g2 holds 2
    # 1 and 4 are free; 2 and 3 are pending; 5 onwards is past g2's cursor: trimming skips
    # the held entries and stops at the first undelivered one, above MAXLEN if need be
    assert c.call("XTRIM", "s", "MAXLEN", "0", "ACKED") == 2
    assert ids(c, "s") == ["2-1", "3-1"] + ["%d-1" % i for i in range(5, 11)]
    assert c.call("XTRIM", "s", "MAXLEN", "0", "ACKED") == 0
    # it stops at MAXLEN when it gets there first
    c.call("XREADGROUP", "GROUP", "g2", "c", "STREAMS", "s", ">")     # g2: 5..10
    c.call("XACK", "s", "g2", "2-1", "5-1", "6-1", "7-1", "8-1")
    # held now: 3 (g1), 7 onwards (past g1's cursor, 6-1), 9 10 (g2)
    assert c.call("XTRIM", "s", "MAXLEN", "5", "ACKED") == 3         # 2 5 6
    assert ids(c, "s") == ["3-1", "7-1", "8-1", "9-1", "10-1"]
    # MINID under ACKED: held entries skipped, nothing at or above the threshold goes
    c.call("XREADGROUP", "GROUP", "g1", "c", "STREAMS", "s", ">")     # g1: 7..10
    c.call("XACK", "s", "g1", "7-1", "8-1")
    assert c.call("XTRIM", "s", "MINID", "9", "ACKED") == 2          # 7 8
    assert ids(c, "s") == ["3-1", "9-1", "10-1"]
    g = groups(c, "s")
    assert (g["g1"]["pending"], g["g2"]["pending"]) == (3, 2)


@echd_only(ONLY)
def test_xtrim_acked_approx(server):
    c = server.raw()
    assert c.call("CONFIG", "SET", "stream-node-max-entries", "5") == "OK"
    for i in range(1, 21):
        c.call("XADD", "s", "%d-1" % i, "f", "v")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XREADGROUP", "GROUP", "g", "c", "COUNT", "12", "STREAMS", "s", ">")  # 1..12
    c.call("XACK", "s", "g", *["%d-1" % i for i in range(1, 13) if i != 7])      # 7 held
    # ~ under ACKED (Redis' streamTrim()): a node the target passes whole goes entry by
    # entry, held ones kept (6..10 keeps 7), and the next one is looked at: 1..12 but 7
    assert c.call("XTRIM", "s", "MAXLEN", "~", "0", "ACKED") == 11
    assert ids(c, "s") == ["7-1"] + ["%d-1" % i for i in range(13, 21)]
    # exact: nothing more (13.. are past g's cursor, 12-1)
    assert c.call("XTRIM", "s", "MAXLEN", "0", "ACKED") == 0
    info = kv(c.call("XINFO", "STREAM", "s"))
    assert info["length"] == 9
    assert info["first-entry"][0] == b"7-1"
    assert groups(c, "s")["g"]["lag"] == 8


@echd_only(ONLY)
def test_trim_approx_acked_issue35(server):
    """Issue 35's case: nodes of 2, 1..5 read, 1 2 4 acknowledged. MINID ~ 6-0 ACKED removes
    1 2 and 4 (leaving 3 and 5) as Redis does: every node the threshold passes whole is gone
    through; so does MAXLEN ~; DELREF ~ trims inside the last node as exact trimming does."""
    c = server.raw()
    assert c.call("CONFIG", "SET", "stream-node-max-entries", "2") == "OK"

    def make(key):
        for i in range(1, 6):
            c.call("XADD", key, "%d-0" % i, "f", "v")
        c.call("XGROUP", "CREATE", key, "g", "0")
        c.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", key, ">")
        c.call("XACK", key, "g", "1-0", "2-0", "4-0")

    make("s")
    assert c.call("XTRIM", "s", "MINID", "~", "6-0", "ACKED") == 3
    assert ids(c, "s") == ["3-0", "5-0"]
    make("m")
    assert c.call("XTRIM", "m", "MAXLEN", "~", "1", "ACKED") == 3
    assert ids(c, "m") == ["3-0", "5-0"]
    # XADD's trimming runs the same code
    make("a")
    assert c.call("XADD", "a", "ACKED", "MINID", "~", "6-0", "6-0", "f", "v") == b"6-0"
    assert ids(c, "a") == ["3-0", "5-0", "6-0"]
    # KEEPREF ~ stops at the first node the target cuts through: 1..4 (two whole nodes)
    make("k")
    assert c.call("XTRIM", "k", "MAXLEN", "~", "1") == 4
    assert ids(c, "k") == ["5-0"]
    # DELREF ~: nodes 1-2 and 3-4 whole, then inside 5.. down to the length; their rows go
    make("d")
    c.call("XADD", "d", "6-0", "f", "v")
    assert c.call("XTRIM", "d", "MAXLEN", "~", "1", "DELREF") == 5
    assert ids(c, "d") == ["6-0"]
    assert c.call("XPENDING", "d", "g")[0] == 0
    # ACKED ~ with no group at all trims inside the last node too; KEEPREF ~ does not
    for key in ("n", "n2"):
        for i in range(1, 7):
            c.call("XADD", key, "%d-0" % i, "f", "v")
    assert c.call("XTRIM", "n", "MAXLEN", "~", "1", "ACKED") == 5
    assert c.call("XTRIM", "n2", "MAXLEN", "~", "1", "KEEPREF") == 4


@echd_only(ONLY)
def test_policy_word_once(server):
    """One of KEEPREF, DELREF, ACKED per call (Redis: a second one is not an option): XDELEX,
    XACKDEL and XTRIM answer a syntax error, XADD reads the word as its id."""
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    c.call("XADD", "s", "2-1", "f", "v")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    for a, b in (("KEEPREF", "DELREF"), ("DELREF", "ACKED"), ("ACKED", "KEEPREF"),
                 ("ACKED", "ACKED")):
        assert c.err("XDELEX", "s", a, b, "IDS", "1", "1-1") == SYNTAX, (a, b)
        assert c.err("XDELEX", "s", a, "IDS", "1", "1-1", b) == SYNTAX, (a, b)
        assert c.err("XACKDEL", "s", "g", a, b, "IDS", "1", "1-1") == SYNTAX, (a, b)
        assert c.err("XTRIM", "s", a, "MAXLEN", "0", b) == SYNTAX, (a, b)
        assert c.err("XTRIM", "s", "MAXLEN", "0", a, b) == SYNTAX, (a, b)
        assert c.err("XADD", "s", a, b, "*", "f", "v") == INVALID_ID, (a, b)
        assert c.err("XADD", "s", a, "MAXLEN", "0", b, "*", "f", "v") == INVALID_ID, (a, b)
    assert c.call("XLEN", "s") == 2
    # a second IDS block is allowed, the last one counts (Redis)
    assert c.call("XDELEX", "s", "IDS", "1", "9-1", "KEEPREF", "IDS", "1", "1-1") == [1]
    assert ids(c, "s") == ["2-1"]
    # the ids are read only once the key (and group) is found: none, all -1
    assert c.call("XDELEX", "nokey", "IDS", "2", "1-1", "bad") == [-1, -1]
    assert c.call("XACKDEL", "s", "nog", "IDS", "2", "1-1", "bad") == [-1, -1]
    assert c.err("XACKDEL", "s", "g", "IDS", "2", "1-1", "bad") == INVALID_ID


@echd_only(ONLY)
def test_xadd_policies(server):
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    c.call("XADD", "s", "2-1", "f", "v")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "s", ">")   # 1-1
    # ACKED: 1-1 pending, 2-1 not yet delivered: nothing goes, the stream grows past MAXLEN
    assert c.call("XADD", "s", "ACKED", "MAXLEN", "1", "3-1", "f", "v") == b"3-1"
    assert ids(c, "s") == ["1-1", "2-1", "3-1"]
    c.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")               # 2 3
    c.call("XACK", "s", "g", "2-1")
    # the policy word may come before or after NOMKSTREAM and the trimming
    assert c.call("XADD", "s", "NOMKSTREAM", "MAXLEN", "1", "ACKED", "4-1", "f", "v") == b"4-1"
    assert ids(c, "s") == ["1-1", "3-1", "4-1"]
    # DELREF: trims as KEEPREF does and the pending records go with the entries
    assert c.call("XADD", "s", "DELREF", "MAXLEN", "1", "5-1", "f", "v") == b"5-1"
    assert ids(c, "s") == ["5-1"]
    assert c.call("XPENDING", "s", "g") == [0, None, None, None]
    assert consumers(c, "s", "g") == {"c": 0}
    # KEEPREF (the default) keeps them
    c.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")               # 5
    assert c.call("XADD", "s", "KEEPREF", "MAXLEN", "0", "6-1", "f", "v") == b"6-1"
    assert c.call("XLEN", "s") == 0
    assert pending_ids(c, "s", "g") == ["5-1"]
    # without trimming the word does nothing
    assert c.call("XADD", "s", "DELREF", "7-1", "f", "v") == b"7-1"
    assert pending_ids(c, "s", "g") == ["5-1"]


# ---------------------------------------------------------------------------
# errors, arity, COMMAND
# ---------------------------------------------------------------------------

@echd_only(ONLY)
def test_errors(server):
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    assert c.err("XDELEX", "s", "IDS", "1") == ARITY % "xdelex"
    assert c.err("XACKDEL", "s", "g", "IDS", "1") == ARITY % "xackdel"
    assert c.err("XDELEX", "s", "IDS", "0", "1-1") == NUMIDS
    assert c.err("XDELEX", "s", "IDS", "-1", "1-1") == NUMIDS
    assert c.err("XDELEX", "s", "IDS", "x", "1-1") == NUMIDS
    assert c.err("XDELEX", "s", "IDS", "3", "1-1") == IDSCOUNT
    assert c.err("XACKDEL", "s", "g", "IDS", "2", "1-1") == IDSCOUNT
    assert c.err("XDELEX", "s", "BOGUS", "IDS", "1", "1-1") == SYNTAX
    assert c.err("XACKDEL", "s", "g", "BOGUS", "IDS", "1", "1-1") == SYNTAX
    # more ids than numids: the rest is not an option
    assert c.err("XDELEX", "s", "IDS", "1", "1-1", "2-1") == SYNTAX
    assert c.err("XDELEX", "s", "KEEPREF", "DELREF", "ACKED") == SYNTAX
    assert c.err("XDELEX", "s", "IDS", "1", "abc") == INVALID_ID
    # no group g: every id -1, unread (Redis parses them only once the group is found)
    assert c.call("XACKDEL", "s", "g", "IDS", "2", "1-1", "+") == [-1, -1]
    # every id is checked before anything is deleted
    assert c.err("XDELEX", "s", "IDS", "2", "1-1", "x") == INVALID_ID
    assert c.call("XLEN", "s") == 1
    # the IDS block may come before the policy
    assert c.call("XDELEX", "s", "IDS", "1", "1-1", "delref") == [1]
    assert c.err("XTRIM", "s", "MAXLEN", "0", "NOPE") == SYNTAX
    assert c.err("XADD", "s", "ACKED") == ARITY % "xadd"


@echd_only(ONLY)
def test_command_rows(server):
    c = server.raw()
    for name, arity in (("xdelex", -5), ("xackdel", -6)):
        [row] = c.call("COMMAND", "INFO", name)
        assert row[0] == name.encode() and row[1] == arity, row
        assert set(row[2]) == {"write", "fast"}, row
        assert (row[3], row[4], row[5]) == (1, 1, 1), row
        assert set(row[6]) == {"@write", "@stream", "@fast"}, row
        docs = c.call("COMMAND", "DOCS", name)
        assert docs[0] == name.encode()
        assert kv(docs[1])["since"] == b"8.2.0"
    assert c.call("COMMAND", "GETKEYS", "XACKDEL", "k", "g", "IDS", "1", "1-1") == [b"k"]
