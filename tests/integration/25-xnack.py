"""XNACK (Redis 8.8): giving pending entries back to the group without acknowledging them.

A released entry stays in the group's PEL with no owner: XPENDING shows it with consumer ""
and idle -1, it counts in the group's pending but in no consumer's, XCLAIM and XAUTOCLAIM take
it whatever their min-idle-time, XACK removes it, and it survives kill -9. The delivery count
follows the mode (SILENT: one less, FAIL: as it was, FATAL: LLONG_MAX) unless RETRYCOUNT says
otherwise; FORCE makes released rows for entries that were not pending. echo-admin shows such
rows as "(released)" and `check` (run after every test) verifies them.

Every example of redis/docs content/commands/xnack.md gives its documented reply here. Where
the page leaves a case open, the decision is in docs/compatibility.md.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

from echdtest import admin_exe, fill, lmdb_only

TIMEOUT = 60
ECHD_ONLY = "Redis 8.8 command; 7.0 lacks it"

LLONG_MAX = 9223372036854775807
INVALID_ID = "ERR Invalid stream ID specified as stream command argument"
# Redis 8.8's own texts (t_stream.c xnackCommand)
MODE = "ERR mode must be SILENT, FAIL, or FATAL"
NUMIDS = "ERR numids must be a positive integer"
NUMIDS_MATCH = "ERR number of IDs doesn't match numids"
RETRY = "ERR Invalid RETRYCOUNT value, must be >= 0"
NO_IDS = "ERR syntax error, expected IDS keyword"
NOT_INT = "ERR value is not an integer or out of range"
ARITY = "ERR wrong number of arguments for 'xnack' command"


def UNRECOGNIZED(opt):
    return "ERR Unrecognized XNACK option '%s'" % opt


def NOGROUP(key, group):
    return "NOGROUP No such key '%s' or consumer group '%s'" % (key, group)


def pel(c, key="s", grp="g", *extra):
    """Extended XPENDING: [(id, consumer, idle, deliveries)] with idle only as -1 or '>=0'."""
    rows = c.call("XPENDING", key, grp, "-", "+", "1000", *extra)
    return [(r[0].decode(), r[1].decode(), -1 if r[2] == -1 else ">=0", r[3]) for r in rows]


def counts(c, key="s", grp="g"):
    return {r[0].decode(): r[3] for r in c.call("XPENDING", key, grp, "-", "+", "1000")}


def kv(flat):
    return {k.decode(): v for k, v in zip(flat[0::2], flat[1::2])}


def setup(c, n=4, consumer="c1"):
    """Entries 1-1..n-1, group g, all delivered to consumer."""
    fill(c, "s", n)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XREADGROUP", "GROUP", "g", consumer, "STREAMS", "s", ">")


def test_doc_examples(server):
    """The examples of xnack.md, in order, on one stream."""
    c = server.raw()
    a = c.call("XADD", "mystream", "*", "field", "value1").decode()
    b = c.call("XADD", "mystream", "*", "field", "value2").decode()
    assert c.call("XGROUP", "CREATE", "mystream", "mygroup", "0") == "OK"
    got = c.call("XREADGROUP", "GROUP", "mygroup", "consumer1", "STREAMS", "mystream", ">")
    assert got == [[b"mystream", [[a.encode(), [b"field", b"value1"]],
                                  [b.encode(), [b"field", b"value2"]]]]]
    assert c.call("XNACK", "mystream", "mygroup", "FAIL", "IDS", "2", a, b) == 2
    # "After NACKing, the messages appear with empty consumer in XPENDING"
    assert c.call("XPENDING", "mystream", "mygroup", "-", "+", "10") == [
        [a.encode(), b"", -1, 1], [b.encode(), b"", -1, 1]]
    raw = c.call_raw("XPENDING", "mystream", "mygroup", "-", "+", "10")
    assert raw == (b"*2\r\n*4\r\n$%d\r\n%s\r\n$0\r\n\r\n:-1\r\n:1\r\n"
                   b"*4\r\n$%d\r\n%s\r\n$0\r\n\r\n:-1\r\n:1\r\n"
                   % (len(a), a.encode(), len(b), b.encode()))
    # SILENT: the count goes down by one
    assert c.call("XNACK", "mystream", "mygroup", "SILENT", "IDS", "1", a) == 1
    assert counts(c, "mystream", "mygroup")[a] == 0
    # FATAL: LLONG_MAX
    assert c.call("XNACK", "mystream", "mygroup", "FATAL", "IDS", "1", a) == 1
    assert counts(c, "mystream", "mygroup")[a] == LLONG_MAX
    # RETRYCOUNT: exactly that, whatever the mode
    assert c.call("XNACK", "mystream", "mygroup", "FAIL", "IDS", "1", a, "RETRYCOUNT", "5") == 1
    assert counts(c, "mystream", "mygroup") == {a: 5, b: 1}


def test_delivery_counts_per_mode(server):
    c = server.raw()
    setup(c, 6)
    # counts 3 for every entry: two history reads
    for _ in range(2):
        c.call("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", "0")
    assert set(counts(c).values()) == {3}
    assert c.call("XNACK", "s", "g", "SILENT", "IDS", "1", "1-1") == 1
    assert c.call("XNACK", "s", "g", "FAIL", "IDS", "1", "2-1") == 1
    assert c.call("XNACK", "s", "g", "FATAL", "IDS", "1", "3-1") == 1
    assert c.call("XNACK", "s", "g", "FATAL", "IDS", "1", "4-1", "RETRYCOUNT", "0") == 1
    assert c.call("XNACK", "s", "g", "silent", "ids", "1", "5-1", "retrycount", "9") == 1
    assert counts(c) == {"1-1": 2, "2-1": 3, "3-1": LLONG_MAX, "4-1": 0, "5-1": 9, "6-1": 3}
    # SILENT again and again on a released row: down to 0, never below
    for want in (1, 0, 0):
        assert c.call("XNACK", "s", "g", "SILENT", "IDS", "1", "1-1") == 1
        assert counts(c)["1-1"] == want
    # a claim of a FATAL row keeps LLONG_MAX (it does not wrap to a negative count)
    c.call("XCLAIM", "s", "g", "c2", "0", "3-1")
    assert counts(c)["3-1"] == LLONG_MAX


def test_only_pending_ids_count(server):
    c = server.raw()
    fill(c, "s", 5)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XREADGROUP", "GROUP", "g", "c1", "COUNT", "3", "STREAMS", "s", ">")   # 1 2 3
    c.call("XACK", "s", "g", "2-1")
    # 2-1 acknowledged, 4-1 never delivered, 9-1 not in the stream: ignored
    assert c.call("XNACK", "s", "g", "FAIL", "IDS", "4", "1-1", "2-1", "4-1", "9-1") == 1
    assert pel(c) == [("1-1", "", -1, 1), ("3-1", "c1", ">=0", 1)]
    assert c.call("XNACK", "s", "g", "FAIL", "IDS", "1", "4-1") == 0
    # a released row may be released again (counted again)
    assert c.call("XNACK", "s", "g", "FAIL", "IDS", "2", "1-1", "1-1") == 2
    assert c.call("XPENDING", "s", "g")[0] == 2


def test_force(server):
    c = server.raw()
    fill(c, "s", 6)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XREADGROUP", "GROUP", "g", "c1", "COUNT", "1", "STREAMS", "s", ">")   # 1
    c.call("XDEL", "s", "5-1")
    # not pending: FORCE makes released rows, count 0; 5-1 (deleted) and 9-1 are not entries
    assert c.call("XNACK", "s", "g", "FAIL", "IDS", "4", "1-1", "2-1", "5-1", "9-1",
                  "FORCE") == 2
    assert pel(c) == [("1-1", "", -1, 1), ("2-1", "", -1, 0)]
    assert c.call("XNACK", "s", "g", "FATAL", "IDS", "1", "3-1", "FORCE") == 1
    assert c.call("XNACK", "s", "g", "SILENT", "IDS", "1", "4-1", "RETRYCOUNT", "7",
                  "FORCE") == 1
    assert c.call("XNACK", "s", "g", "SILENT", "IDS", "1", "6-1", "FORCE") == 1
    assert counts(c) == {"1-1": 1, "2-1": 0, "3-1": LLONG_MAX, "4-1": 7, "6-1": 0}
    # FORCE on a row already pending does what it does without FORCE
    assert c.call("XNACK", "s", "g", "FAIL", "IDS", "1", "1-1", "FORCE") == 1
    assert counts(c)["1-1"] == 1
    info = kv(c.call("XINFO", "GROUPS", "s")[0])
    assert info["pending"] == 5
    # the cursor does not move: the forced entries after it are still new to the group
    assert info["last-delivered-id"] == b"1-1"


def test_released_in_summaries(server):
    c = server.raw()
    fill(c, "s", 6)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XREADGROUP", "GROUP", "g", "alice", "COUNT", "3", "STREAMS", "s", ">")  # 1 2 3
    c.call("XREADGROUP", "GROUP", "g", "bob", "COUNT", "3", "STREAMS", "s", ">")    # 4 5 6
    assert c.call("XNACK", "s", "g", "FAIL", "IDS", "4", "1-1", "2-1", "3-1", "6-1") == 4
    # summary: all six pending; only owners listed, with what they still own
    assert c.call("XPENDING", "s", "g") == [6, b"1-1", b"6-1", [[b"bob", b"2"]]]
    # a consumer's own list no longer has them
    assert c.call("XPENDING", "s", "g", "-", "+", "10", "alice") == []
    assert [r[0] for r in c.call("XPENDING", "s", "g", "-", "+", "10", "bob")] == [
        b"4-1", b"5-1"]
    # claimable at once: an IDLE filter of any size keeps them
    assert [r[0] for r in c.call("XPENDING", "s", "g", "IDLE", "3600000", "-", "+", "10")] == [
        b"1-1", b"2-1", b"3-1", b"6-1"]
    # XINFO GROUPS / CONSUMERS
    assert kv(c.call("XINFO", "GROUPS", "s")[0])["pending"] == 6
    cons = {kv(x)["name"]: kv(x)["pending"] for x in c.call("XINFO", "CONSUMERS", "s", "g")}
    assert cons == {b"alice": 0, b"bob": 2}
    # XINFO STREAM FULL: the group PEL has them with owner "" and delivery time 0
    full = kv(c.call("XINFO", "STREAM", "s", "FULL"))
    g = kv(full["groups"][0])
    assert g["pel-count"] == 6
    assert [(p[0], p[1], p[2], p[3]) for p in g["pending"] if p[1] == b""] == [
        (b"1-1", b"", 0, 1), (b"2-1", b"", 0, 1), (b"3-1", b"", 0, 1), (b"6-1", b"", 0, 1)]
    byname = {kv(x)["name"]: kv(x) for x in g["consumers"]}
    assert byname[b"alice"]["pel-count"] == 0 and byname[b"alice"]["pending"] == []
    assert [p[0] for p in byname[b"bob"]["pending"]] == [b"4-1", b"5-1"]
    # the history of alice is empty now
    assert c.call("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "0") == [[b"s", []]]


def test_claim_and_ack_released(server):
    c = server.raw()
    setup(c, 5)
    c.call("XNACK", "s", "g", "FAIL", "IDS", "3", "1-1", "2-1", "3-1")
    # XCLAIM with a min-idle-time no owned entry meets: the released rows qualify
    got = c.call("XCLAIM", "s", "g", "c2", "3600000", "1-1", "4-1", "JUSTID")
    assert got == [b"1-1"]
    assert pel(c)[0] == ("1-1", "c2", ">=0", 1)          # JUSTID: count unchanged
    got = c.call("XCLAIM", "s", "g", "c2", "3600000", "2-1")
    assert got == [[b"2-1", [b"f", b"v"]]]
    assert counts(c)["2-1"] == 2
    # XAUTOCLAIM takes only the released one at this min-idle-time
    got = c.call("XAUTOCLAIM", "s", "g", "c3", "3600000", "0")
    assert got == [b"0-0", [[b"3-1", [b"f", b"v"]]], []]
    assert pel(c) == [("1-1", "c2", ">=0", 1), ("2-1", "c2", ">=0", 2),
                      ("3-1", "c3", ">=0", 2), ("4-1", "c1", ">=0", 1),
                      ("5-1", "c1", ">=0", 1)]
    cons = {kv(x)["name"]: kv(x)["pending"] for x in c.call("XINFO", "CONSUMERS", "s", "g")}
    assert cons == {b"c1": 2, b"c2": 2, b"c3": 1}
    # XACK of a released row
    c.call("XNACK", "s", "g", "FAIL", "IDS", "2", "4-1", "5-1")
    assert c.call("XACK", "s", "g", "4-1", "1-1") == 2
    assert c.call("XPENDING", "s", "g")[0] == 3
    assert pel(c) == [("2-1", "c2", ">=0", 2), ("3-1", "c3", ">=0", 2), ("5-1", "", -1, 1)]
    # deleting the consumer that released entries leaves the released rows
    c.call("XGROUP", "DELCONSUMER", "s", "g", "c1")
    assert pel(c)[-1] == ("5-1", "", -1, 1)
    # an XGROUP SETID back and a re-read: the released row goes to the reader
    c.call("XGROUP", "SETID", "s", "g", "4-1")
    c.call("XREADGROUP", "GROUP", "g", "c4", "STREAMS", "s", ">")
    assert pel(c)[-1] == ("5-1", "c4", ">=0", 1)
    assert c.call("XPENDING", "s", "g")[0] == 3


def test_errors(server):
    """Redis 8.8's texts, in its order: the key and group, the mode, then the options."""
    c = server.raw()
    setup(c, 2)
    assert c.err("XNACK", "s", "g", "FAIL", "IDS", "1") == ARITY
    assert c.err("XNACK", "s", "g", "MAYBE", "IDS", "1", "1-1") == MODE
    assert c.err("XNACK", "s", "g", "IDS", "1", "1-1", "FAIL") == MODE     # the mode's place
    assert c.err("XNACK", "s", "g", "FAIL", "ID", "1", "1-1") == UNRECOGNIZED("ID")
    assert c.err("XNACK", "s", "g", "FAIL", "IDS", "0", "1-1") == NUMIDS
    assert c.err("XNACK", "s", "g", "FAIL", "IDS", "-1", "1-1") == NUMIDS
    assert c.err("XNACK", "s", "g", "FAIL", "IDS", "x", "1-1") == NUMIDS
    assert c.err("XNACK", "s", "g", "FAIL", "IDS", "3", "1-1", "2-1") == NUMIDS_MATCH
    assert c.err("XNACK", "s", "g", "FAIL", "IDS", "1", "1-1", "2-1") == UNRECOGNIZED("2-1")
    assert c.err("XNACK", "s", "g", "FAIL", "IDS", "1", "1-1", "RETRYCOUNT") == \
        UNRECOGNIZED("RETRYCOUNT")
    assert c.err("XNACK", "s", "g", "FAIL", "IDS", "1", "1-1", "RETRYCOUNT", "-1") == RETRY
    assert c.err("XNACK", "s", "g", "FAIL", "IDS", "1", "1-1", "RETRYCOUNT", "x") == NOT_INT
    assert c.err("XNACK", "s", "g", "FAIL", "RETRYCOUNT", "x", "IDS", "1", "1-1") == NOT_INT
    assert c.err("XNACK", "s", "g", "FAIL", "FORCE", "RETRYCOUNT", "1") == NO_IDS
    assert c.err("XNACK", "s", "g", "FAIL", "IDS", "2", "1-1", "zz") == INVALID_ID
    assert c.err("XNACK", "s", "nog", "FAIL", "IDS", "1", "1-1") == NOGROUP("s", "nog")
    assert c.err("XNACK", "nokey", "g", "FAIL", "IDS", "1", "1-1") == NOGROUP("nokey", "g")
    # the group is looked up before anything else is read
    assert c.err("XNACK", "s", "nog", "MAYBE", "ID", "x", "y") == NOGROUP("s", "nog")
    # echd's DELAY keeps its own text
    assert c.err("XNACK", "s", "g", "FAIL", "IDS", "1", "1-1", "DELAY", "-1") == \
        "ERR Invalid DELAY option argument for XNACK"
    # nothing changed by the refused ones (a bad id refuses the whole command)
    assert pel(c) == [("1-1", "c1", ">=0", 1), ("2-1", "c1", ">=0", 1)]


def test_options_before_ids(server):
    """RETRYCOUNT, FORCE (and DELAY) may come before the IDS block; a second block wins."""
    c = server.raw()
    setup(c, 4)
    assert c.call("XNACK", "s", "g", "FAIL", "RETRYCOUNT", "5", "IDS", "1", "1-1") == 1
    assert c.call("XNACK", "s", "g", "SILENT", "FORCE", "RETRYCOUNT", "2", "IDS", "1",
                  "9-1") == 0
    c.call("XADD", "s", "9-1", "f", "v")
    assert c.call("XNACK", "s", "g", "fatal", "force", "ids", "1", "9-1", "retrycount",
                  "3") == 1
    assert c.call("XNACK", "s", "g", "FAIL", "IDS", "1", "3-1", "IDS", "1", "2-1") == 1
    assert pel(c) == [("1-1", "", -1, 5), ("2-1", "", -1, 1), ("3-1", "c1", ">=0", 1),
                      ("4-1", "c1", ">=0", 1), ("9-1", "", -1, 3)]
    assert c.call("XNACK", "s", "g", "FAIL", "DELAY", "60000", "IDS", "1", "4-1") == 1
    assert pel(c)[3] == ("4-1", "", -1, 1)


def test_command_info(server):
    c = server.raw()
    info = c.call("COMMAND", "INFO", "xnack")[0]
    assert info[0] == b"xnack" and info[1] == -7
    assert set(info[2]) == {"write", "fast"}
    assert (info[3], info[4], info[5]) == (1, 1, 1)
    assert set(info[6]) == {"@write", "@stream", "@fast"}
    assert c.call("COMMAND", "GETKEYS", "XNACK", "s", "g", "FAIL", "IDS", "1", "1-1") == [b"s"]
    for cat in ("stream", "write", "fast"):
        assert b"xnack" in c.call("ACL", "CAT", cat), cat
    assert b"xnack" not in c.call("ACL", "CAT", "read")


def test_released_survive_kill(server):
    c = server.raw()
    setup(c, 3)
    c.call("XNACK", "s", "g", "FATAL", "IDS", "2", "1-1", "3-1")
    before = c.call("XPENDING", "s", "g")
    server.restart(kill=signal.SIGKILL)
    c = server.raw()
    assert c.call("XPENDING", "s", "g") == before == [3, b"1-1", b"3-1", [[b"c1", b"1"]]]
    assert pel(c) == [("1-1", "", -1, LLONG_MAX), ("2-1", "c1", ">=0", 1),
                      ("3-1", "", -1, LLONG_MAX)]


def adm(server, *args, live=True):
    where = ["-p", str(server.port)] if live else server.offline_args()
    env = {"NO_COLOR": "1", "PATH": "/usr/bin:/bin"}
    return subprocess.run([admin_exe(server.exe)] + where + [str(a) for a in args],
                          capture_output=True, text=True, timeout=60, env=env)


def test_admin_shows_released(server):
    c = server.raw()
    setup(c, 3)
    c.call("XNACK", "s", "g", "FAIL", "IDS", "1", "2-1")
    for live in (True, False):
        p = adm(server, "--json", "pending", "s", "g", live=live)
        assert p.returncode == 0, p.stderr
        rows = [(r["id"], r["consumer"], r["idle_ms"], r["deliveries"])
                for r in json.loads(p.stdout)["pending"]]
        assert [r for r in rows if r[0] == "2-1"] == [("2-1", "", -1, 1)], (live, rows)
        assert [r[1] for r in rows] == ["c1", "", "c1"], (live, rows)
        p = adm(server, "pending", "s", "g", live=live)
        assert p.returncode == 0, p.stderr
        line = [x for x in p.stdout.splitlines() if x.startswith("2-1")]
        assert len(line) == 1 and "(released)" in line[0], (live, p.stdout)
        assert "(released)" not in "".join(x for x in p.stdout.splitlines()
                                           if x.startswith(("1-1", "3-1")))
        p = adm(server, "--json", "entry", "s", "2-1", live=live)
        assert p.returncode == 0, p.stderr
        g = json.loads(p.stdout)["groups"][0]
        assert (g["pending"], g["consumer"], g["idle_ms"], g["deliveries"]) == (
            True, "", -1, 1), (live, g)
        p = adm(server, "entry", "s", "2-1", live=live)
        assert p.returncode == 0 and "(released)" in p.stdout, (live, p.stdout)
    # check accepts them (and the runner's check after the test does too)
    p = adm(server, "check", live=False)
    assert p.returncode == 0, p.stdout + p.stderr


@lmdb_only("the damaged copy is made with echo-admin backup (LMDB's copy) and adm-fixture, "
           "which writes LMDB directories")
def test_check_finds_released_with_a_time(server):
    """check finds a released entry (no owner) that has a delivery time."""
    c = server.raw()
    setup(c, 3)
    c.call("XNACK", "s", "g", "FAIL", "IDS", "1", "2-1")
    root = tempfile.mkdtemp(prefix="echd-e2e-xnack-")
    try:
        bad = os.path.join(root, "bad")
        p = adm(server, "backup", bad, live=False)
        assert p.returncode == 0, p.stderr
        fixture = os.path.join(os.path.dirname(os.path.dirname(admin_exe(server.exe))),
                               "tests", "adm-fixture")
        r = subprocess.run([fixture, bad, "released-time", "s", "g"], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        p = subprocess.run([admin_exe(server.exe), "check", bad], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 4, p.stdout + p.stderr
        problems = [x for x in p.stdout.splitlines() if x.startswith("problem: ")]
        assert len(problems) == 1 and "released pending entry 2-1 has delivery time 1" in \
            problems[0], p.stdout
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_pipeline_in_one_batch(server):
    """XNACK between other writes of one pipeline: each sees the one before."""
    c = server.raw()
    setup(c, 2)
    got = c.pipeline([("XNACK", "s", "g", "SILENT", "IDS", "1", "1-1"),
                      ("XPENDING", "s", "g", "-", "+", "10"),
                      ("XCLAIM", "s", "g", "c2", "100000", "1-1", "JUSTID"),
                      ("XNACK", "s", "g", "FAIL", "IDS", "2", "1-1", "2-1")])
    assert got[0] == 1
    assert got[1][0] == [b"1-1", b"", -1, 0]
    assert got[2] == [b"1-1"]
    assert got[3] == 2
    assert pel(c) == [("1-1", "", -1, 0), ("2-1", "", -1, 1)]


# ---------------------------------------------------------------------------
# XREADGROUP ... CLAIM min-idle-time (Redis 8.4)
# ---------------------------------------------------------------------------

CLAIM_NEG = "ERR min-idle-time must be a positive integer"
CLAIM_NOT_INT = "ERR min-idle-time is not an integer or out of range"
CLAIM_XREAD = "ERR The CLAIM option is only supported by XREADGROUP. You called XREAD instead."


def claimed(entry):
    """A claimed entry: [id, fields, idle, count] -> (id, idle, count). The idle time of a
    released entry is Redis': now less its delivery time 0, the clock ("clock")."""
    assert len(entry) == 4 and isinstance(entry[2], int) and isinstance(entry[3], int), entry
    idle = entry[2]
    if idle > 10 ** 12:
        assert abs(idle - time.time() * 1000) < 60000, entry
        idle = "clock"
    return entry[0].decode(), idle, entry[3]


def new(eid, *fv):
    """A new entry in a CLAIM read: four elements, idle 0, delivered 0 times before."""
    return [eid.encode(), [x.encode() for x in (fv or ("f", "v"))], 0, 0]


def test_claim_ordering(server):
    """Released entries first, then by idle time (longest first), then new entries."""
    c = server.raw()
    fill(c, "s", 7)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XREADGROUP", "GROUP", "g", "c1", "COUNT", "2", "STREAMS", "s", ">")    # 1 2
    time.sleep(0.25)
    c.call("XREADGROUP", "GROUP", "g", "c2", "COUNT", "3", "STREAMS", "s", ">")    # 3 4 5
    time.sleep(0.1)
    # (Redis claims released entries in the order they were released, echd in id order:
    # here both are the same)
    c.call("XNACK", "s", "g", "FAIL", "IDS", "2", "4-1", "5-1")
    got = c.call("XREADGROUP", "GROUP", "g", "c3", "CLAIM", "50", "STREAMS", "s", ">")
    assert [k for k, _ in got] == [b"s"]
    entries = got[0][1]
    head = [claimed(x) for x in entries[:5]]
    assert [h[0] for h in head] == ["4-1", "5-1", "1-1", "2-1", "3-1"], head
    assert [h[1] for h in head[:2]] == ["clock", "clock"]          # released: now - 0
    assert head[2][1] >= 300 and head[3][1] >= 300, head           # c1's, the oldest
    assert 100 <= head[4][1] < head[2][1], head                    # then c2's
    assert [h[2] for h in head] == [1, 1, 1, 1, 1]                 # deliveries before
    assert entries[5:] == [new("6-1"), new("7-1")]                  # new: 0 and 0
    rows = c.call("XPENDING", "s", "g", "-", "+", "10")
    assert [(r[0], r[1], r[3]) for r in rows] == [
        (b"1-1", b"c3", 2), (b"2-1", b"c3", 2), (b"3-1", b"c3", 2), (b"4-1", b"c3", 2),
        (b"5-1", b"c3", 2), (b"6-1", b"c3", 1), (b"7-1", b"c3", 1)]
    assert all(0 <= r[2] < 250 for r in rows)
    cons = {kv(x)["name"]: kv(x)["pending"] for x in c.call("XINFO", "CONSUMERS", "s", "g")}
    assert cons == {b"c1": 0, b"c2": 0, b"c3": 7}


def test_claim_count_and_min_idle(server):
    c = server.raw()
    fill(c, "s", 6)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XREADGROUP", "GROUP", "g", "c1", "COUNT", "3", "STREAMS", "s", ">")    # 1 2 3
    # nothing idle that long: only new entries, in the four-element shape
    got = c.call("XREADGROUP", "GROUP", "g", "c2", "COUNT", "1", "CLAIM", "3600000",
                 "STREAMS", "s", ">")
    assert got == [[b"s", [new("4-1")]]]
    time.sleep(0.05)
    # COUNT covers claimed and new together: 2 claimed, no room for new
    got = c.call("XREADGROUP", "GROUP", "g", "c2", "COUNT", "2", "CLAIM", "0",
                 "STREAMS", "s", ">")
    assert [claimed(x)[0] for x in got[0][1]] == ["1-1", "2-1"]
    # CLAIM 0 takes every pending entry, longest idle first (3-1 and 4-1 were delivered
    # before 1-1 and 2-1 were claimed; ties by id), then one new entry
    got = c.call("XREADGROUP", "GROUP", "g", "c2", "COUNT", "5", "CLAIM", "0",
                 "STREAMS", "s", ">")
    assert [x[0].decode() for x in got[0][1]] == ["3-1", "4-1", "1-1", "2-1", "5-1"], got
    assert [len(x) for x in got[0][1]] == [4, 4, 4, 4, 4], got
    assert got[0][1][4] == new("5-1")
    assert [claimed(x)[2] for x in got[0][1][:4]] == [1, 1, 2, 2], got
    # the history form ignores CLAIM: plain entries of the consumer
    got = c.call("XREADGROUP", "GROUP", "g", "c2", "CLAIM", "0", "STREAMS", "s", "0")
    assert all(len(x) == 2 for x in got[0][1]) and len(got[0][1]) == 5


def test_claim_noack_and_resp3(server):
    c = server.raw()
    fill(c, "s", 3)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XREADGROUP", "GROUP", "g", "c1", "COUNT", "1", "STREAMS", "s", ">")    # 1
    c.call("XNACK", "s", "g", "SILENT", "IDS", "1", "1-1")
    # NOACK applies to the new entries only: the claimed one is pending for c2
    got = c.call("XREADGROUP", "GROUP", "g", "c2", "NOACK", "CLAIM", "10", "STREAMS", "s",
                 ">")
    assert claimed(got[0][1][0]) == ("1-1", "clock", 0)
    assert got[0][1][1:] == [new("2-1"), new("3-1")]
    rows = c.call("XPENDING", "s", "g", "-", "+", "10")
    assert [(r[0], r[1], r[3]) for r in rows] == [(b"1-1", b"c2", 1)]
    # RESP3: a map of streams, claimed entries as in RESP2
    c.call("HELLO", "3")
    c.call("XNACK", "s", "g", "FAIL", "IDS", "1", "1-1")
    got = c.call("XREADGROUP", "GROUP", "g", "c3", "CLAIM", "10", "STREAMS", "s", ">")
    assert isinstance(got, dict) and list(got) == [b"s"], got
    assert claimed(got[b"s"][0]) == ("1-1", "clock", 1)


def test_claim_several_streams(server):
    c = server.raw()
    fill(c, "a", 2)
    fill(c, "b", 2)
    for k in ("a", "b"):
        c.call("XGROUP", "CREATE", k, "g", "0")
        c.call("XREADGROUP", "GROUP", "g", "c1", "COUNT", "1", "STREAMS", k, ">")
    c.call("XNACK", "b", "g", "FAIL", "IDS", "1", "1-1")
    got = c.call("XREADGROUP", "GROUP", "g", "c2", "CLAIM", "3600000", "STREAMS", "a", "b",
                 ">", ">")
    assert got[0] == [b"a", [new("2-1")]]
    assert got[1][0] == b"b" and claimed(got[1][1][0]) == ("1-1", "clock", 1)
    assert got[1][1][1] == new("2-1")


def test_claim_errors(server):
    c = server.raw()
    fill(c, "s", 1)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    assert c.err("XREADGROUP", "GROUP", "g", "c", "CLAIM", "-1", "STREAMS", "s", ">") == \
        CLAIM_NEG
    # Redis 8.4's own text for anything that is not an integer (its tests: test, 5.5,
    # 10e, +10, -0, -5.5 ...); a negative integer has the other one
    for bad in ("x", "test", "5.5", "5,5", "-0", "+10", "10e", "-10e", "-5.5", " 10", "010",
                "9223372036854775808"):
        assert c.err("XREADGROUP", "GROUP", "g", "c", "CLAIM", bad, "STREAMS", "s", ">") == \
            CLAIM_NOT_INT, bad
    for neg in ("-10", "-42", "-9223372036854775808"):
        assert c.err("XREADGROUP", "GROUP", "g", "c", "CLAIM", neg, "STREAMS", "s", ">") == \
            CLAIM_NEG, neg
    # as COUNT and BLOCK: the word after CLAIM is its value
    assert c.err("XREADGROUP", "GROUP", "g", "c", "CLAIM", "STREAMS", "s", ">") == \
        CLAIM_NOT_INT
    assert c.err("XREADGROUP", "GROUP", "g", "c", "CLAIM", "10", "CLAIM", "COUNT", "1",
                 "STREAMS", "s", ">") == CLAIM_NOT_INT
    assert c.err("XREAD", "CLAIM", "10", "STREAMS", "s", "0") == CLAIM_XREAD
    assert c.call("COMMAND", "GETKEYS", "XREADGROUP", "GROUP", "g", "c", "CLAIM", "10",
                  "STREAMS", "s", ">") == [b"s"]
    # nothing was delivered by the refused ones
    assert c.call("XPENDING", "s", "g")[0] == 0


def test_claim_block_wakes_when_claimable(server):
    """A blocked CLAIM reader runs again when the first pending entry reaches min-idle-time:
    not before, and well before its BLOCK timeout."""
    c = server.raw()
    fill(c, "s", 2)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XREADGROUP", "GROUP", "g", "c1", "COUNT", "1", "STREAMS", "s", ">")    # 1
    time.sleep(0.2)
    c.call("XREADGROUP", "GROUP", "g", "c1", "COUNT", "1", "STREAMS", "s", ">")    # 2
    t0 = time.monotonic()
    r = server.raw()
    r.send("XREADGROUP", "GROUP", "g", "c2", "BLOCK", "10000", "CLAIM", "600", "STREAMS", "s",
           ">")
    got = r.read()
    elapsed = time.monotonic() - t0
    # 1-1 was delivered 0.2 s before t0: claimable about 0.4 s after it, 2-1 still not
    assert 0.3 <= elapsed < 5, elapsed
    assert [claimed(x)[0] for x in got[0][1]] == ["1-1"], got
    assert claimed(got[0][1][0])[1] >= 600
    # and it wakes again for the next one
    t0 = time.monotonic()
    r.send("XREADGROUP", "GROUP", "g", "c2", "BLOCK", "10000", "CLAIM", "600", "STREAMS", "s",
           ">")
    got = r.read()
    assert time.monotonic() - t0 < 5
    assert [claimed(x)[0] for x in got[0][1]] == ["2-1"], got


def test_claim_block_wakes_on_xnack_and_times_out(server):
    c = server.raw()
    fill(c, "s", 1)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">")                  # 1
    # the entry becomes claimable after the timeout: the timeout answers
    t0 = time.monotonic()
    assert c.call("XREADGROUP", "GROUP", "g", "c2", "BLOCK", "300", "CLAIM", "60000",
                  "STREAMS", "s", ">") is None
    assert time.monotonic() - t0 >= 0.25
    # an XNACK makes it claimable at once: the blocked reader gets it
    r = server.raw()
    r.send("XREADGROUP", "GROUP", "g", "c2", "BLOCK", "10000", "CLAIM", "60000", "STREAMS",
           "s", ">")
    time.sleep(0.2)
    t0 = time.monotonic()
    assert c.call("XNACK", "s", "g", "FAIL", "IDS", "1", "1-1") == 1
    got = r.read()
    assert time.monotonic() - t0 < 5
    assert claimed(got[0][1][0]) == ("1-1", "clock", 1)
    # a blocked CLAIM reader still takes new entries as they come
    r.send("XREADGROUP", "GROUP", "g", "c2", "BLOCK", "10000", "CLAIM", "60000", "STREAMS",
           "s", ">")
    time.sleep(0.2)
    c.call("XADD", "s", "5-1", "f", "v")
    assert r.read() == [[b"s", [new("5-1")]]]


# ---------------------------------------------------------------------------
# issue 35: CLAIM's reply as Redis 8.x gives it, and the groups' nacked-count
# ---------------------------------------------------------------------------

def test_claim_reply_shape_raw(server):
    """Every entry of a CLAIM read has four elements, claimed or new, in RESP2 and RESP3:
    the bytes, not only the decoded shape."""
    c = server.raw()
    fill(c, "s", 3)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XREADGROUP", "GROUP", "g", "c1", "COUNT", "1", "STREAMS", "s", ">")    # 1
    c.call("XCLAIM", "s", "g", "c1", "0", "1-1", "IDLE", "5000")
    raw = c.call_raw("XREADGROUP", "GROUP", "g", "c2", "COUNT", "2", "CLAIM", "1000",
                     "STREAMS", "s", ">")
    m = re.fullmatch(rb"\*1\r\n\*2\r\n\$1\r\ns\r\n\*2\r\n"
                     rb"\*4\r\n\$3\r\n1-1\r\n\*2\r\n\$1\r\nf\r\n\$1\r\nv\r\n:(\d+)\r\n:2\r\n"
                     rb"\*4\r\n\$3\r\n2-1\r\n\*2\r\n\$1\r\nf\r\n\$1\r\nv\r\n:0\r\n:0\r\n", raw)
    assert m and 5000 <= int(m.group(1)) < 65000, raw
    c.call("HELLO", "3")
    c.call("XNACK", "s", "g", "FAIL", "IDS", "1", "2-1")
    raw = c.call_raw("XREADGROUP", "GROUP", "g", "c3", "CLAIM", "1000", "STREAMS", "s", ">")
    m = re.fullmatch(rb"%1\r\n\$1\r\ns\r\n\*2\r\n"
                     rb"\*4\r\n\$3\r\n2-1\r\n\*2\r\n\$1\r\nf\r\n\$1\r\nv\r\n:(\d+)\r\n:1\r\n"
                     rb"\*4\r\n\$3\r\n3-1\r\n\*2\r\n\$1\r\nf\r\n\$1\r\nv\r\n:0\r\n:0\r\n", raw)
    assert m and abs(int(m.group(1)) - time.time() * 1000) < 60000, raw   # now - 0


def test_claim_only_trimmed_is_null(server):
    """Claimable entries trimmed away: Redis can reply none of them, so the read is served
    as if there were none (null, every time), and they stay pending."""
    c = server.raw()
    fill(c, "s", 3)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">")                  # 1 2 3
    assert c.call("XTRIM", "s", "MAXLEN", "0") == 3
    for _ in range(2):
        assert c.call("XREADGROUP", "GROUP", "g", "c2", "CLAIM", "0", "STREAMS", "s",
                      ">") is None
    assert c.call("XPENDING", "s", "g") == [3, b"1-1", b"3-1", [[b"c1", b"3"]]]
    # one of them released: still nothing to reply; BLOCK times out (RESP3: null)
    c.call("XNACK", "s", "g", "FAIL", "IDS", "1", "2-1")
    c.call("HELLO", "3")
    t0 = time.monotonic()
    assert c.call("XREADGROUP", "GROUP", "g", "c2", "BLOCK", "200", "CLAIM", "0",
                  "STREAMS", "s", ">") is None
    assert time.monotonic() - t0 >= 0.15
    assert c.call_raw("XREADGROUP", "GROUP", "g", "c2", "CLAIM", "0", "STREAMS", "s",
                      ">") == b"_\r\n"
    # a new entry is served, the trimmed rows skipped and left where they were
    c.call("XADD", "s", "4-1", "f", "v")
    assert c.call("XREADGROUP", "GROUP", "g", "c2", "CLAIM", "0", "STREAMS", "s", ">") == \
        {b"s": [new("4-1")]}
    assert pel(c) == [("1-1", "c1", ">=0", 1), ("2-1", "", -1, 1), ("3-1", "c1", ">=0", 1),
                      ("4-1", "c2", ">=0", 1)]
    # a live claimable entry among dead ones: only it
    time.sleep(0.01)
    got = c.call("XREADGROUP", "GROUP", "g", "c3", "CLAIM", "0", "STREAMS", "s", ">")
    assert [claimed(x)[0] for x in got[b"s"]] == ["4-1"], got


def test_claim_redis_py(server):
    """redis-py reads CLAIM replies. Debian's 4.3.4 has no claim parameter: the command goes
    through execute_command and its XREADGROUP parser, which keeps id and fields of each
    entry. The clients with CLAIM support unpack four elements from every entry (the
    IndexError of issue 35 on a two-element one): done here on the same reply, raw."""
    c = server.raw()
    fill(c, "s", 4)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XREADGROUP", "GROUP", "g", "c1", "COUNT", "2", "STREAMS", "s", ">")    # 1 2
    c.call("XNACK", "s", "g", "FAIL", "IDS", "1", "1-1")
    r = server.client()
    got = r.execute_command("XREADGROUP", "GROUP", "g", "c2", "COUNT", "2", "CLAIM", "0",
                            "STREAMS", "s", ">")
    assert got == [["s", [("1-1", {"f": "v"}), ("2-1", {"f": "v"})]]], got
    c.call("XNACK", "s", "g", "FAIL", "IDS", "1", "1-1")
    got = c.call("XREADGROUP", "GROUP", "g", "c3", "CLAIM", "3600000", "STREAMS", "s", ">")
    parsed = []
    for eid, fields, idle, count in got[0][1]:
        parsed.append((eid, dict(zip(fields[0::2], fields[1::2])), idle > 0, count))
    assert parsed == [(b"1-1", {b"f": b"v"}, True, 2), (b"3-1", {b"f": b"v"}, False, 0),
                      (b"4-1", {b"f": b"v"}, False, 0)], got


def full_groups(c, key="s"):
    """XINFO STREAM FULL's groups as dicts, keys in order."""
    d = kv(c.call("XINFO", "STREAM", key, "FULL"))
    return [kv(g) if isinstance(g, list) else {k.decode(): v for k, v in g.items()}
            for g in d["groups"]]


def test_nacked_count(server):
    """XINFO STREAM FULL gives each group nacked-count, right after pel-count: the entries
    released by XNACK and not delivered since. It is kept with the rows (survives kill -9)."""
    c = server.raw()
    setup(c, 6)
    [g] = full_groups(c)
    assert list(g) == ["name", "last-delivered-id", "entries-read", "lag", "pel-count",
                       "nacked-count", "pending", "consumers"], list(g)
    assert (g["pel-count"], g["nacked-count"]) == (6, 0)
    c.call("XNACK", "s", "g", "FAIL", "IDS", "4", "1-1", "2-1", "3-1", "4-1")
    c.call("XNACK", "s", "g", "SILENT", "IDS", "1", "4-1")           # again: still one
    assert full_groups(c)[0]["nacked-count"] == 4
    # the released ones in the group's pending list: consumer "", delivery time 0
    assert [(p[0], p[1], p[2]) for p in full_groups(c)[0]["pending"][:2]] == \
        [(b"1-1", b"", 0), (b"2-1", b"", 0)]
    # re-delivered (CLAIM, XCLAIM, XAUTOCLAIM), acknowledged: out of the count
    got = c.call("XREADGROUP", "GROUP", "g", "c2", "COUNT", "1", "CLAIM", "3600000",
                 "STREAMS", "s", ">")
    assert claimed(got[0][1][0])[0] == "1-1"
    c.call("XCLAIM", "s", "g", "c2", "3600000", "2-1")
    c.call("XACK", "s", "g", "3-1")
    assert full_groups(c)[0]["nacked-count"] == 1
    c.call("XAUTOCLAIM", "s", "g", "c3", "3600000", "0")
    assert full_groups(c)[0]["nacked-count"] == 0
    # FORCE-made, DELAYed (echd), XACKDEL'd and DELREF-trimmed ones
    c.call("XADD", "s", "7-1", "f", "v")
    c.call("XADD", "s", "8-1", "f", "v")
    assert c.call("XNACK", "s", "g", "FATAL", "IDS", "2", "7-1", "8-1", "FORCE") == 2
    assert c.call("XNACK", "s", "g", "FAIL", "IDS", "1", "5-1", "DELAY", "60000") == 1
    assert full_groups(c)[0]["nacked-count"] == 3
    server.restart(kill=signal.SIGKILL)
    c = server.raw()
    assert full_groups(c)[0]["nacked-count"] == 3
    assert c.call("XACKDEL", "s", "g", "IDS", "1", "8-1") == [1]
    assert c.call("XTRIM", "s", "MAXLEN", "2", "DELREF") == 5          # 1..5-1 and their rows
    [g] = full_groups(c)
    assert (g["pel-count"], g["nacked-count"]) == (2, 1)                # 6-1 (c1), 7-1
    # a second group keeps its own count; RESP3 gives the same field
    c.call("XGROUP", "CREATE", "s", "h", "0")
    c.call("XREADGROUP", "GROUP", "h", "x", "STREAMS", "s", ">")
    c.call("XNACK", "s", "h", "FAIL", "IDS", "1", "6-1")
    c.call("HELLO", "3")
    got = c.call("XINFO", "STREAM", "s", "FULL")
    counts = {g[b"name"]: g[b"nacked-count"] for g in got[b"groups"]}
    assert counts == {b"g": 1, b"h": 1}
    c.call("XGROUP", "DELCONSUMER", "s", "g", "c2")
    assert {g[b"name"]: g[b"nacked-count"]
            for g in c.call("XINFO", "STREAM", "s", "FULL")[b"groups"]} == counts
