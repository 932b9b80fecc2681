"""echo-admin: every subcommand live (over RESP) and offline (--data-dir, read-only on the LMDB
directory while echd keeps running; on the pass on PostgreSQL --storage-url, its schema),
compared with what XINFO and XPENDING answer; --json documents; exit codes; the actions (one
server command each); backup during writes restored into a second echd; check on a good
directory and on copies damaged through the storage API (tests/helpers/adm_fixture.c), and on
a schema damaged with SQL; a million-entry PEL that starts printing at once.

echo-admin and adm-fixture are found in the build tree beside echd:
<build>/tools/echo-admin and <build>/tests/adm-fixture.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import echdtest
from echdtest import RespConn, lmdb_only, pg_only, timeout, wait_until

ECHD_ONLY = "echo-admin is echd's tool: its offline mode reads echd's own LMDB directory"
TIMEOUT = 120

IDLE_SLACK = 5000  # ms: live and offline read the clock at different moments


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def build_dir(server):
    return os.path.dirname(os.path.dirname(os.path.abspath(server.exe)))


def admin_exe(server):
    return echdtest.admin_exe(server.exe)


def fixture_exe(server):
    return os.path.join(build_dir(server), "tests", "adm-fixture")


def env_plain(**extra):
    env = dict(os.environ)
    env.pop("ECHD_AUTH", None)
    env.pop("ECHD_USER", None)
    env["NO_COLOR"] = "1"
    env.update(extra)
    return env


def adm(server, *args, live=True, env=None, timeout=60):
    """Run echo-admin against the server (live) or what it stores (offline: its data
    directory, or its schema on PostgreSQL)."""
    where = ["-p", str(server.port)] if live else server.offline_args()
    cmd = [admin_exe(server)] + where + [str(a) for a in args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=env or env_plain())


def adm_raw(server, *args, env=None, timeout=60):
    """Run echo-admin with exactly these arguments."""
    return subprocess.run([admin_exe(server)] + [str(a) for a in args], capture_output=True,
                          text=True, timeout=timeout, env=env or env_plain())


def check_here(server, *opts):
    """echo-admin check of what the server stores: `check DIR`, or on PostgreSQL its schema
    (--storage-url URL --storage-pg-schema NAME check)."""
    if server.pg_schema is not None:
        return adm_raw(server, *opts, *echdtest.pg_admin_args(server.pg_schema), "check")
    return adm_raw(server, *opts, "check", server.dir)


def ok(p):
    assert p.returncode == 0, "exit %d\nstdout: %s\nstderr: %s" % (p.returncode, p.stdout,
                                                                 p.stderr)
    return p


def adm_json(server, *args, live=True):
    p = ok(adm(server, "--json", *args, live=live))
    return json.loads(p.stdout)  # exactly one document, or this raises


def both(server, *args):
    """The same --json call live and offline."""
    return adm_json(server, *args, live=True), adm_json(server, *args, live=False)


def kv(flat):
    return {k: v for k, v in zip(flat[0::2], flat[1::2])}


def xinfo_groups(c, key):
    return {g["name"]: g for g in (kv(x) for x in c.execute_command("XINFO", "GROUPS", key))}


def xinfo_consumers(c, key, grp):
    return {x["name"]: x for x in (kv(y) for y in c.execute_command("XINFO", "CONSUMERS", key,
                                                                     grp))}


def xpending_rows(c, key, grp, consumer=None):
    rows = c.xpending_range(key, grp, "-", "+", 10000000, consumername=consumer)
    return [(r["message_id"], r["consumer"], r["times_delivered"]) for r in rows]


def xpending_idle(c, key, grp):
    rows = c.xpending_range(key, grp, "-", "+", 10000000)
    return {r["message_id"]: r["time_since_delivered"] for r in rows}


def untimed_pending(doc):
    return [(r["id"], r["consumer"], r["deliveries"]) for r in doc["pending"]]


def build_state(server):
    """Streams, groups, consumers, pending entries (one of them deleted from its stream, one
    delivered twice, one idle for ten minutes) made with python3-redis."""
    c = server.client()
    for i in range(1, 31):
        c.xadd("orders", {"item": "book%d" % i, "qty": str(i)}, id="%d-1" % i)
    for i in range(1, 6):
        c.xadd("events", {"n": str(i)}, id="%d-0" % (i * 10))
    c.xgroup_create("orders", "billing", id="0")
    c.xgroup_create("orders", "shipping", id="0")
    c.xgroup_create("orders", "audit", id="$")
    c.xreadgroup("billing", "alice", {"orders": ">"}, count=10)
    c.xreadgroup("billing", "bob", {"orders": ">"}, count=5)
    c.xreadgroup("shipping", "carol", {"orders": ">"}, count=3)
    c.execute_command("XGROUP", "CREATECONSUMER", "orders", "billing", "dave")
    # delivered twice (the claim counts as a delivery), and one left ten minutes idle
    c.execute_command("XCLAIM", "orders", "billing", "bob", "0", "2-1")
    c.execute_command("XCLAIM", "orders", "billing", "alice", "0", "3-1", "IDLE", "600000",
                      "JUSTID")
    # pending in billing (alice) but deleted from the stream
    c.xdel("orders", "4-1")
    return c


def writer(server, key, stop, counter, fields=("f", "v")):
    """XADD to key until stop is set; counter[0] counts acknowledged entries."""
    conn = RespConn(server.port, timeout=30)
    try:
        while not stop.is_set():
            r = conn.pipeline([("XADD", key, "*") + tuple(fields) for _ in range(50)])
            for x in r:
                assert isinstance(x, bytes), x
            counter[0] += len(r)
    finally:
        conn.close()


# ---------------------------------------------------------------------------
# reading, in both modes
# ---------------------------------------------------------------------------

def test_streams(server):
    c = build_state(server)
    live, off = both(server, "streams")
    assert live == off or [dict(s, last_entry_age_ms=0) for s in live["streams"]] == \
        [dict(s, last_entry_age_ms=0) for s in off["streams"]], (live, off)
    assert live["db"] == 0
    by_name = {s["name"]: s for s in off["streams"]}
    assert sorted(by_name) == ["events", "orders"]
    for name, s in by_name.items():
        info = kv(c.execute_command("XINFO", "STREAM", name))
        assert s["length"] == info["length"]
        assert s["groups"] == info["groups"]
        assert s["entries_added"] == info["entries-added"]
        assert s["last_generated_id"] == info["last-generated-id"]
        assert s["max_deleted_id"] == info["max-deleted-entry-id"]
        assert s["first_id"] == info["first-entry"][0]
        assert s["last_id"] == info["last-entry"][0]
        assert s["last_entry_age_ms"] > 0
    assert by_name["orders"]["length"] == 29 and by_name["orders"]["groups"] == 3
    # an empty stream: no first or last id
    c.xadd("empty", {"a": "b"}, id="1-1")
    c.xdel("empty", "1-1")
    for doc in both(server, "streams"):
        e = [s for s in doc["streams"] if s["name"] == "empty"][0]
        assert e["length"] == 0 and e["first_id"] is None and e["last_id"] is None
        assert e["last_entry_age_ms"] is None and e["last_generated_id"] == "1-1"


def test_groups(server):
    c = build_state(server)
    live, off = both(server, "groups", "orders")
    for doc in (live, off):
        assert doc["stream"] == "orders"
        got = {g["name"]: g for g in doc["groups"]}
        want = xinfo_groups(c, "orders")
        assert sorted(got) == sorted(want) == ["audit", "billing", "shipping"]
        for name, g in got.items():
            w = want[name]
            assert g["consumers"] == w["consumers"], (name, g, w)
            assert g["pending"] == w["pending"]
            assert g["last_delivered_id"] == w["last-delivered-id"]
            assert g["entries_read"] == w["entries-read"]
            assert g["lag"] == w["lag"]
            summary = c.xpending("orders", name)
            if w["pending"]:
                assert g["oldest_pending_id"] == summary["min"]
                idle = xpending_idle(c, "orders", name)[summary["min"]]
                assert abs(g["oldest_pending_idle_ms"] - idle) < IDLE_SLACK
            else:
                assert g["oldest_pending_id"] is None and g["oldest_pending_idle_ms"] is None
    # billing's oldest pending entry, 1-1, is alice's, delivered just now
    assert {g["name"]: g["pending"] for g in off["groups"]} == \
        {"audit": 0, "billing": 15, "shipping": 3}


def test_consumers(server):
    c = build_state(server)
    for doc in both(server, "consumers", "orders", "billing"):
        assert (doc["stream"], doc["group"]) == ("orders", "billing")
        want = xinfo_consumers(c, "orders", "billing")
        got = {x["name"]: x for x in doc["consumers"]}
        assert sorted(got) == sorted(want) == ["alice", "bob", "dave"]
        for name, x in got.items():
            assert x["pending"] == want[name]["pending"]
            assert abs(x["idle_ms"] - want[name]["idle"]) < IDLE_SLACK
            if want[name]["inactive"] == -1:
                assert x["inactive_ms"] is None
            else:
                assert abs(x["inactive_ms"] - want[name]["inactive"]) < IDLE_SLACK
        assert got["dave"]["inactive_ms"] is None and got["dave"]["pending"] == 0


def test_pending(server):
    c = build_state(server)
    want = xpending_rows(c, "orders", "billing")
    assert len(want) == 15
    live, off = both(server, "pending", "orders", "billing")
    for doc in (live, off):
        assert untimed_pending(doc) == want
        assert doc["count"] == 15 and doc["truncated"] is False
        assert "fields" not in doc["pending"][0]
    # idle times agree with XPENDING's
    idle = xpending_idle(c, "orders", "billing")
    for r in off["pending"]:
        assert abs(r["idle_ms"] - idle[r["id"]]) < IDLE_SLACK
    # one consumer
    for doc in both(server, "pending", "orders", "billing", "--consumer", "bob"):
        assert untimed_pending(doc) == xpending_rows(c, "orders", "billing", "bob")
        assert [r[0] for r in untimed_pending(doc)] == ["2-1", "11-1", "12-1", "13-1", "14-1",
                                                        "15-1"]
    # delivered at least twice: 2-1 (claimed by bob; 3-1 was claimed with JUSTID)
    for doc in both(server, "pending", "orders", "billing", "--min-deliveries", "2"):
        assert untimed_pending(doc) == [("2-1", "bob", 2)]
    # idle at least five minutes: only 3-1
    for doc in both(server, "pending", "orders", "billing", "--min-idle", "5m"):
        assert [r["id"] for r in doc["pending"]] == ["3-1"]
        assert doc["pending"][0]["idle_ms"] >= 600000
    # a limit
    for doc in both(server, "pending", "orders", "billing", "--limit", "3"):
        assert untimed_pending(doc) == want[:3] and doc["truncated"] is True
    for doc in both(server, "pending", "orders", "billing", "--limit", "15"):
        assert untimed_pending(doc) == want and doc["truncated"] is False
    # the payload, with the deleted entry
    for doc in both(server, "pending", "orders", "billing", "--payload", "--consumer", "alice"):
        rows = {r["id"]: r for r in doc["pending"]}
        assert rows["4-1"]["deleted"] is True and rows["4-1"]["fields"] is None
        assert rows["1-1"]["deleted"] is False
        assert rows["1-1"]["fields"] == [["item", "book1"], ["qty", "1"]]
        for i in (1, 3, 5, 10):
            e = c.xrange("orders", "%d-1" % i, "%d-1" % i)[0][1]
            assert dict(rows["%d-1" % i]["fields"]) == e


def test_pending_pages(server):
    """Live mode reads XPENDING in pages of 1,000: 2,500 rows cross two page edges."""
    c = server.raw()
    echdtest.fill(c, "big", 2500)
    c.call("XGROUP", "CREATE", "big", "g", "0")
    c.call("XREADGROUP", "GROUP", "g", "c1", "COUNT", "1200", "STREAMS", "big", ">")
    c.call("XREADGROUP", "GROUP", "g", "c2", "STREAMS", "big", ">")
    want = [(r[0].decode(), r[1].decode(), r[3])
            for r in c.call("XPENDING", "big", "g", "-", "+", "100000")]
    live, off = both(server, "pending", "big", "g")
    assert untimed_pending(live) == untimed_pending(off) == want
    live, off = both(server, "pending", "big", "g", "--consumer", "c2", "--limit", "1001")
    assert untimed_pending(live) == untimed_pending(off) == [w for w in want
                                                             if w[1] == "c2"][:1001]
    assert live["truncated"] and off["truncated"]
    # the human table: thousands separators, one header, one line per row
    p = ok(adm(server, "groups", "big", live=False))
    assert "2,500" in p.stdout
    p = ok(adm(server, "pending", "big", "g"))
    lines = p.stdout.splitlines()
    assert lines[0].split() == ["ID", "CONSUMER", "IDLE", "DELIVERIES"]
    assert len(lines) == 2501


def test_entry(server):
    c = build_state(server)
    live, off = both(server, "entry", "orders", "2-1")
    for doc in (live, off):
        assert doc["stream"] == "orders" and doc["id"] == "2-1" and doc["exists"] is True
        assert doc["fields"] == [["item", "book2"], ["qty", "2"]]
        g = {x["name"]: x for x in doc["groups"]}
        assert sorted(g) == ["audit", "billing", "shipping"]
        assert g["billing"]["pending"] and g["billing"]["consumer"] == "bob"
        assert g["billing"]["deliveries"] == 2 and g["billing"]["delivered"]
        assert g["shipping"]["pending"] and g["shipping"]["consumer"] == "carol"
        # audit was created at $: every entry then in the stream counts as delivered
        assert not g["audit"]["pending"] and g["audit"]["delivered"]
        assert g["audit"]["consumer"] is None and g["audit"]["idle_ms"] is None
    # deleted, still pending for alice
    for doc in both(server, "entry", "orders", "4-1"):
        assert doc["exists"] is False and doc["fields"] is None
        g = {x["name"]: x for x in doc["groups"]}
        assert g["billing"]["consumer"] == "alice" and g["billing"]["pending"]
        assert g["shipping"]["pending"] is False and g["shipping"]["delivered"] is False
    # delivered to shipping (last-delivered 3-1) but acknowledged there: not pending
    c.xack("orders", "shipping", "1-1")
    for doc in both(server, "entry", "orders", "1-1"):
        g = {x["name"]: x for x in doc["groups"]}
        assert g["shipping"]["delivered"] and not g["shipping"]["pending"]
    # human form
    p = ok(adm(server, "entry", "orders", "4-1", live=False))
    assert "deleted from the stream" in p.stdout and "alice" in p.stdout


def test_stats(server):
    build_state(server)
    live = adm_json(server, "stats")
    assert live["source"] == "live"
    assert live["redis_version"] and live["uptime_in_seconds"] >= 0
    assert live["keyspace"] == {"db0": 2}
    # build_state committed: how long commits and flushes took, as INFO gives them (on
    # PostgreSQL a commit is durable when it returns: there are no flushes of their own)
    fields = ["commit_latency_percentiles_usec"]
    if server.pg_schema is None:
        fields.append("flush_latency_percentiles_usec")
    else:
        assert "flush_latency_percentiles_usec" not in live, live
    for field in fields:
        assert re.fullmatch(r"p50=[0-9.]+,p99=[0-9.]+,p99\.9=[0-9.]+", live[field]), live
    human = ok(adm(server, "stats")).stdout
    assert re.search(r"^commit time +p50 [0-9.]+ ms, p99 [0-9.]+ ms, p99\.9 [0-9.]+ ms$", human,
                     re.M), human
    off = adm_json(server, "stats", live=False)
    assert off["source"] == "offline" and off["keyspace"] == {"db0": 2}
    if server.pg_schema is not None:
        assert off["storage_backend"] == "postgres" and off["schema"] == server.pg_schema
        assert "lmdb_map_size" not in off, off
    else:
        assert off["storage_backend"] == "lmdb"
        assert off["lmdb_map_size"] >= off["lmdb_used_bytes"] > 0
    for lv in (True, False):
        p = ok(adm(server, "stats", live=lv))
        assert p.stdout.splitlines()[0].split() == ["FIELD", "VALUE"]
        assert "keys db0" in p.stdout


def test_db_option(server):
    c = server.client(db=3)
    c.xadd("in3", {"a": "1"}, id="5-5")
    for lv in (True, False):
        doc = adm_json(server, "--db", "3", "streams", live=lv)
        assert doc["db"] == 3 and [s["name"] for s in doc["streams"]] == ["in3"]
        assert adm_json(server, "streams", live=lv)["streams"] == []
        assert adm(server, "--db", "3", "groups", "nosuch", live=lv).returncode == 1


def test_human_tables(server):
    c = build_state(server)
    long_name = "a-very-long-stream-name-" + "x" * 100
    c.xadd(long_name, {"f": "v"}, id="1-1")
    pipe = server.raw()
    echdtest.fill(pipe, "thousands", 1234)
    for lv in (True, False):
        for args in (("streams",), ("groups", "orders"), ("consumers", "orders", "billing"),
                     ("pending", "orders", "billing", "--payload"),
                     ("entry", "orders", "1-1"), ("stats",)):
            p = ok(adm(server, *args, live=lv))
            for line in p.stdout.splitlines():
                assert len(line) <= 80, (args, line)
            assert "\033[" not in p.stdout  # no colour off a terminal
        p = ok(adm(server, "streams", live=lv))
        assert "1,234" in p.stdout
        assert "a-very-long-stream" in p.stdout and long_name not in p.stdout
    p = ok(adm(server, "pending", "orders", "billing", "--min-idle", "5m"))
    assert re.search(r"\b10m[0-9]+s\b", p.stdout), p.stdout


def test_json_is_one_document(server):
    build_state(server)
    for lv in (True, False):
        for args in (("streams",), ("groups", "orders"), ("consumers", "orders", "billing"),
                     ("pending", "orders", "billing", "--payload"),
                     ("entry", "orders", "4-1"), ("stats",)):
            p = ok(adm(server, "--json", *args, live=lv))
            assert p.stdout.count("\n") == 1 and p.stdout.endswith("\n")
            json.loads(p.stdout)


def test_binary_names(server):
    c = server.raw()
    name = b"bin\x00\xff\n\xc3\xa9"
    c.call("XADD", name, "1-1", b"f\x01", b"\xfe")
    c.call("XGROUP", "CREATE", name, "g", "0")
    c.call("XREADGROUP", "GROUP", "g", b"c\x02", "STREAMS", name, ">")
    for lv in (True, False):
        doc = adm_json(server, "streams", live=lv)
        assert [s["name"] for s in doc["streams"]] == ["bin\x00\u00ff\n\u00e9"]
        p = ok(adm(server, "streams", live=lv))
        assert "bin\\x00\\xff\\x0a" in p.stdout


# ---------------------------------------------------------------------------
# exit codes, usage, help
# ---------------------------------------------------------------------------

def test_not_found(server):
    build_state(server)
    for lv in (True, False):
        for args, text in ((("groups", "nosuch"), "nosuch"),
                           (("consumers", "orders", "nosuch"), "nosuch"),
                           (("consumers", "nosuch", "billing"), "nosuch"),
                           (("pending", "orders", "nosuch"), "nosuch"),
                           (("pending", "orders", "billing", "--consumer", "zed"), "zed"),
                           (("entry", "orders", "999-1"), "999-1"),
                           (("entry", "nosuch", "1-1"), "nosuch")):
            p = adm(server, *args, live=lv)
            assert p.returncode == 1, (lv, args, p.returncode, p.stderr)
            assert text in p.stderr and p.stdout == "", (args, p.stdout, p.stderr)
            p = adm(server, "--json", *args, live=lv)
            assert p.returncode == 1 and p.stdout == ""
    for args in (("ack", "orders", "nosuch", "1-1"), ("ack", "nosuch", "billing", "1-1"),
                 ("claim", "orders", "nosuch", "--to", "x", "1-1"),
                 ("delconsumer", "orders", "billing", "zed"),
                 ("setid", "orders", "nosuch", "0"), ("setid", "nosuch", "g", "0"),
                 ("trim", "nosuch", "--maxlen", "1")):
        p = adm(server, *args)
        assert p.returncode == 1, (args, p.returncode, p.stderr)


def test_usage_errors(server):
    build_state(server)
    for args in (("frobnicate",), ("groups",), ("groups", "a", "b"), ("pending", "orders"),
                 ("streams", "--payload"), ("groups", "orders", "--bogus"),
                 ("pending", "orders", "billing", "--min-idle", "5 minutes"),
                 ("pending", "orders", "billing", "--limit", "-1"),
                 ("entry", "orders", "not-an-id"), ("claim", "orders", "billing", "1-1"),
                 ("claim", "orders", "billing", "--to", "x"),
                 ("trim", "orders"), ("trim", "orders", "--maxlen", "1", "--minid", "1"),
                 ("trim", "orders", "--maxlen", "1", "--limit", "5"),
                 ("ack", "orders", "billing", "nonsense"), ("--port", "0", "streams"),
                 ("--db", "999", "streams"), ("pending", "orders", "billing", "--limit")):
        p = adm(server, *args)
        assert p.returncode == 2, (args, p.returncode, p.stdout, p.stderr)
        assert p.stderr.startswith("echo-admin: "), (args, p.stderr)
    # a change asked of a directory
    for args in (("ack", "orders", "billing", "1-1"), ("claim", "orders", "billing", "--to", "x",
                                                       "1-1"),
                 ("delconsumer", "orders", "billing", "bob"), ("setid", "orders", "billing", "0"),
                 ("trim", "orders", "--maxlen", "3")):
        p = adm(server, *args, live=False)
        assert p.returncode == 2, (args, p.returncode, p.stderr)
        assert "live connection" in p.stderr
    # the offline options: one store, the schema with its URL, no backup of PostgreSQL
    url = "postgresql://nobody@127.0.0.1:1/none"
    for args, text in ((("--storage-pg-schema", "x", "streams"), "goes with --storage-url"),
                       (("-d", server.dir, "--storage-url", url, "streams"), "give one"),
                       (("--storage-url", url, "check", server.dir), "not both"),
                       (("--storage-url", url, "--storage-pg-schema", "", "streams"),
                        "schema name"),
                       (("--storage-url", url, "backup", server.dir + "-copy"), "pg_dump"),
                       (("--storage-url", url, "ack", "orders", "billing", "1-1"),
                        "live connection"),
                       (("--storage-url", url, "--tls", "streams"), "live mode")):
        p = adm_raw(server, *args)
        assert p.returncode == 2, (args, p.returncode, p.stdout, p.stderr)
        assert text in p.stderr and url not in p.stderr, (args, p.stderr)
    assert not os.path.exists(server.dir + "-copy")
    # nothing changed
    assert server.client().xlen("orders") == 29
    p = adm_raw(server)
    assert p.returncode == 2 and "Usage:" in p.stderr


def test_help(server):
    p = ok(adm_raw(server, "--help"))
    for name in ("streams", "groups", "consumers", "pending", "entry", "ack", "claim",
                 "delconsumer", "setid", "trim", "backup", "check", "stats"):
        assert name in p.stdout
        for form in (("help", name), (name, "--help"), (name, "-h")):
            q = ok(adm_raw(server, *form))
            assert q.stdout.startswith("Usage: echo-admin"), (form, q.stdout)
            assert name in q.stdout.splitlines()[0]
    assert "Exit status" in p.stdout
    for opt in ("--tls", "--cacert FILE", "--cacertdir DIR", "--cert FILE", "--key FILE",
                "--insecure", "--data-dir DIR", "--storage-url URL", "--storage-pg-schema NAME"):
        assert opt in p.stdout, opt
    for line in p.stdout.splitlines():
        assert len(line) <= 80, line
    assert ok(adm_raw(server, "--version")).stdout.startswith("echo-admin ")


def test_cannot_connect(server):
    port = echdtest.free_port()
    p = adm_raw(server, "-p", port, "streams")
    assert p.returncode == 3 and "cannot connect" in p.stderr, p.stderr
    p = adm_raw(server, "-s", "/nonexistent/echd.sock", "streams")
    assert p.returncode == 3
    p = adm_raw(server, "--host", "no-such-host.invalid", "streams")
    assert p.returncode == 3
    # TLS (15-tls.py tests it against TLS servers): this plaintext port fails the handshake
    p = adm_raw(server, "-p", server.port, "--tls", "--insecure", "--timeout", "2", "streams")
    assert p.returncode == 3 and "TLS handshake" in p.stderr, p.stderr
    p = adm_raw(server, "-p", server.port, "--cacert", "/nonexistent/ca.pem", "groups", "s")
    assert p.returncode == 3, p.stderr
    assert "cannot load --cacert '/nonexistent/ca.pem': No such file" in p.stderr, p.stderr
    # no PostgreSQL there: exit 3 naming the schema, never the URL (it may hold a password)
    url = "postgresql://nobody:secret@127.0.0.1:%d/none?connect_timeout=2" % port
    p = adm_raw(server, "--storage-url", url, "--storage-pg-schema", "q1", "check")
    assert p.returncode == 3 and "schema 'q1'" in p.stderr, (p.returncode, p.stderr)
    assert "secret" not in p.stderr + p.stdout, p.stderr
    for d in ("/nonexistent/dir", tempfile.gettempdir()):
        p = adm_raw(server, "-d", d, "streams")
        assert p.returncode == 3, (d, p.stderr)
        p = adm_raw(server, "check", d)
        assert p.returncode == 3, (d, p.stderr)


def test_auth_and_unixsocket(server):
    root = tempfile.mkdtemp(prefix="echd-e2e-admin-")
    sock = os.path.join(root, "echd.sock")
    s = server.spawn("--unixsocket", sock)
    c = s.raw()
    c.call("XADD", "q", "1-1", "a", "b")
    # set after start-up: the fixture's readiness PING carries no password
    assert c.call("CONFIG", "SET", "requirepass", "s3cret-pw") == "OK"
    try:
        p = adm_raw(s, "-p", s.port, "streams")
        assert p.returncode == 3 and "password" in p.stderr, p.stderr
        p = adm_raw(s, "-p", s.port, "--pass", "wrong-guess", "streams")
        assert p.returncode == 3 and "authentication failed" in p.stderr
        assert "wrong-guess" not in p.stdout + p.stderr
        p = ok(adm_raw(s, "-p", s.port, "--json", "streams", env=env_plain(ECHD_AUTH="s3cret-pw")))
        assert [x["name"] for x in json.loads(p.stdout)["streams"]] == ["q"]
        assert "s3cret-pw" not in p.stdout + p.stderr
        p = ok(adm_raw(s, "-s", sock, "--pass", "s3cret-pw", "--user", "default", "streams"))
        assert "q" in p.stdout and "s3cret-pw" not in p.stdout + p.stderr
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------------
# actions (live only)
# ---------------------------------------------------------------------------

def test_ack(server):
    c = build_state(server)
    doc = adm_json(server, "ack", "orders", "billing", "1-1", "2-1", "16-1")
    assert doc == {"action": "ack", "stream": "orders", "group": "billing", "requested": 3,
                   "acked": 2}
    assert xinfo_groups(c, "orders")["billing"]["pending"] == 13
    p = ok(adm(server, "ack", "orders", "billing", "5-1"))
    assert "acknowledged 1 of 1" in p.stdout
    assert xinfo_consumers(c, "orders", "billing")["alice"]["pending"] == 7


def test_claim(server):
    c = build_state(server)
    doc = adm_json(server, "claim", "orders", "billing", "--to", "eve", "11-1", "12-1")
    assert doc["claimed"] == ["11-1", "12-1"] and doc["consumer"] == "eve"
    rows = dict((r[0], r) for r in xpending_rows(c, "orders", "billing"))
    # ownership moves, delivery counts stay (JUSTID)
    assert rows["11-1"] == ("11-1", "eve", 1) and rows["12-1"] == ("12-1", "eve", 1)
    # by idleness: only 3-1 has been idle for ten minutes; the deleted 4-1 leaves the PEL
    doc = adm_json(server, "claim", "orders", "billing", "--to", "frank", "--min-idle", "5m")
    assert doc["claimed"] == ["3-1"] and doc["deleted"] == ["4-1"] and doc["next"] == "0-0"
    rows = dict((r[0], r[1]) for r in xpending_rows(c, "orders", "billing"))
    assert rows["3-1"] == "frank" and "4-1" not in rows
    # ids that are not idle enough stay where they are
    doc = adm_json(server, "claim", "orders", "billing", "--to", "gina", "--min-idle", "1h",
                   "13-1")
    assert doc["claimed"] == []
    # --limit bounds one XAUTOCLAIM; the cursor says where it stopped
    doc = adm_json(server, "claim", "orders", "billing", "--to", "eve", "--min-idle", "0",
                   "--limit", "2")
    assert doc["claimed"] == ["1-1", "2-1"] and doc["next"] == "3-1"
    p = ok(adm(server, "claim", "orders", "billing", "--to", "eve", "--min-idle", "0",
               "--limit", "2"))
    assert "claimed 2: 1-1 2-1" in p.stdout and "stopped at 3-1" in p.stdout, p.stdout


def test_delconsumer(server):
    c = build_state(server)
    doc = adm_json(server, "delconsumer", "orders", "billing", "bob")
    assert doc["pending_dropped"] == 6
    assert sorted(xinfo_consumers(c, "orders", "billing")) == ["alice", "dave"]
    assert xinfo_groups(c, "orders")["billing"]["pending"] == 9


def test_setid(server):
    c = build_state(server)
    p = ok(adm(server, "setid", "orders", "audit", "10-1"))
    assert "10-1" in p.stdout
    assert xinfo_groups(c, "orders")["audit"]["last-delivered-id"] == "10-1"
    doc = adm_json(server, "setid", "orders", "audit", "$", "--entries-read", "30")
    assert doc["last_delivered_id"] == "$"
    g = xinfo_groups(c, "orders")["audit"]
    assert g["last-delivered-id"] == "30-1" and g["entries-read"] == 30
    p = adm(server, "setid", "orders", "audit", "bogus")
    assert p.returncode == 2 and "Invalid stream ID" in p.stderr


def test_trim(server):
    c = build_state(server)
    doc = adm_json(server, "trim", "orders", "--maxlen", "20")
    assert doc["removed"] == 9 and c.xlen("orders") == 20
    doc = adm_json(server, "trim", "orders", "--minid", "25-1")
    assert doc["removed"] == 14 and c.xlen("orders") == 6
    doc = adm_json(server, "trim", "orders", "--maxlen", "0", "--approx", "--limit", "1000")
    assert doc["removed"] >= 0
    p = ok(adm(server, "trim", "events", "--maxlen", "2"))
    assert "removed 3 entries" in p.stdout and c.xlen("events") == 2


# ---------------------------------------------------------------------------
# offline while echd writes; backup; check
# ---------------------------------------------------------------------------

@timeout(120)
def test_offline_while_writing(server):
    build_state(server)
    c = server.raw()
    c.call("XGROUP", "CREATE", "w", "g", "0", "MKSTREAM")
    stop, count = threading.Event(), [0]
    t = threading.Thread(target=writer, args=(server, "w", stop, count), daemon=True)
    t.start()
    try:
        wait_until(lambda: count[0] > 500, timeout=20, what="the writer to start")
        lengths = []
        for _ in range(10):
            before = count[0]
            c.call("XREADGROUP", "GROUP", "g", "c", "COUNT", "100", "STREAMS", "w", ">")
            doc = adm_json(server, "streams", live=False)
            w = [s for s in doc["streams"] if s["name"] == "w"][0]
            lengths.append(w["length"])
            pend = adm_json(server, "pending", "w", "g", "--limit", "50", live=False)
            assert pend["count"] == 50
            assert ok(check_here(server)).stdout.endswith(
                "ok: every invariant holds\n")
            # the writer was never held up by the readers
            wait_until(lambda: count[0] > before, timeout=10, what="the writer to go on")
        assert lengths == sorted(lengths) and lengths[-1] > lengths[0]
    finally:
        stop.set()
        t.join(30)
    # what the snapshot saw is what the server says, once writes stop
    live, off = both(server, "groups", "w")
    assert [(g["name"], g["pending"], g["last_delivered_id"]) for g in live["groups"]] == \
        [(g["name"], g["pending"], g["last_delivered_id"]) for g in off["groups"]]


def snapshot(c, keys):
    out = {}
    for k in keys:
        groups = {}
        for g in c.call("XINFO", "GROUPS", k):
            g = dict(zip(g[0::2], g[1::2]))
            name = g[b"name"]
            pel = [(r[0], r[1], r[3]) for r in c.call("XPENDING", k, name, "-", "+", "100000")]
            cons = sorted((x[1], x[3]) for x in c.call("XINFO", "CONSUMERS", k, name))
            groups[name] = (g[b"last-delivered-id"], g[b"entries-read"], g[b"pending"], pel, cons)
        out[k] = (c.call("XRANGE", k, "-", "+"), groups)
    return out


@timeout(120)
@lmdb_only("backup copies the LMDB environment (a PostgreSQL schema is backed up with "
           "pg_dump)")
def test_backup_during_writes(server):
    build_state(server)
    c = server.raw()
    c.call("XGROUP", "CREATE", "w", "g", "0", "MKSTREAM")
    stop, count = threading.Event(), [0]
    t = threading.Thread(target=writer, args=(server, "w", stop, count), daemon=True)
    t.start()
    root = tempfile.mkdtemp(prefix="echd-e2e-backup-")
    dest = os.path.join(root, "data")
    spawned = False
    try:
        wait_until(lambda: count[0] > 1000, timeout=20, what="the writer to start")
        c.call("XREADGROUP", "GROUP", "g", "c", "COUNT", "300", "STREAMS", "w", ">")
        # live: the data directory comes from CONFIG GET dir
        doc = adm_json(server, "backup", dest)
        assert doc["dest"] == dest and doc["bytes"] > 0
        assert os.path.realpath(doc["source"]) == os.path.realpath(server.dir)
        during = count[0]
        wait_until(lambda: count[0] > during + 200, timeout=10, what="writes after the backup")
    finally:
        stop.set()
        t.join(30)
    try:
        assert adm(server, "backup", dest).returncode == 2  # not over an existing copy
        assert ok(adm_raw(server, "check", dest)).stdout.endswith("ok: every invariant holds\n")
        # a second echd on the copy; stopped (and root removed) after the test
        s = echdtest.Server(server.kind, server.exe, [], root=root)
        server._children.append(s)
        spawned = True
        s.start()
        b = RespConn(s.port, timeout=30)
        try:
            keys = [b"orders", b"events"]
            assert sorted(b.call("KEYS", "*")) == [b"events", b"orders", b"w"]
            assert snapshot(b, keys) == snapshot(c, keys)
            # the stream being written: a prefix of what the server has now
            copied = b.call("XRANGE", "w", "-", "+")
            now = c.call("XRANGE", "w", "-", "+")
            assert 1000 <= len(copied) < len(now) and now[:len(copied)] == copied
            # its group as it was: 300 pending, all within the copy
            pel = b.call("XPENDING", "w", "g")
            assert pel[0] == 300
            # the restored server works
            assert b.call("XADD", "w", "*", "after", "restore")
            assert b.call("XACK", "w", "g", pel[1]) == 1
        finally:
            b.close()
    finally:
        if not spawned:
            shutil.rmtree(root, ignore_errors=True)


@lmdb_only("backup copies the LMDB environment (a PostgreSQL schema is backed up with "
           "pg_dump)")
def test_backup_offline(server):
    build_state(server)
    root = tempfile.mkdtemp(prefix="echd-e2e-backup-")
    try:
        dest = os.path.join(root, "copy")
        p = ok(adm(server, "backup", dest, live=False))
        assert "written to " + dest in p.stdout
        src, cp = adm_json(server, "streams", live=False), \
            json.loads(ok(adm_raw(server, "-d", dest, "--json", "streams")).stdout)
        strip = lambda d: [dict(s, last_entry_age_ms=0) for s in d["streams"]]
        assert strip(src) == strip(cp)
        # the copy is compacted: never larger than the original
        assert os.path.getsize(os.path.join(dest, "data.mdb")) <= \
            os.path.getsize(os.path.join(server.dir, "data.mdb"))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_check_pending_past_a_lowered_last_id(server):
    """XSETID may lower a stream's last id below entries that were trimmed away while a
    group still has them pending (Redis checks only the last live entry and the max
    deleted id, which trimming leaves alone): check must take that state as valid."""
    c = server.raw()
    c.call("XADD", "s", "1-1", "f", "v")
    c.call("XADD", "s", "2-1", "f", "v")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    assert len(c.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")[0][1]) == 2
    assert c.call("XTRIM", "s", "MAXLEN", "0") == 2
    assert c.call("XSETID", "s", "1-5") == "OK"
    assert c.call("XPENDING", "s", "g")[0] == 2
    p = ok(check_here(server))
    assert p.stdout.endswith("ok: every invariant holds\n"), p.stdout


def test_check(server):
    build_state(server)
    # a good directory (or schema), echd running on it
    p = ok(check_here(server))
    assert p.stdout.endswith("ok: every invariant holds\n")
    doc = json.loads(ok(check_here(server, "--json")).stdout)
    assert doc["ok"] is True and doc["problems"] == [] and doc["streams"] == 2
    assert doc["groups"] == 3 and doc["consumers"] == 4 and doc["pending"] == 18
    assert doc["entries"] == 34
    if server.pg_schema is not None:
        assert doc["schema"] == server.pg_schema and "dir" not in doc
    else:
        assert doc["dir"] == server.dir


@lmdb_only("damaged copies are made with echo-admin backup (LMDB's copy) and adm-fixture, "
           "which writes LMDB directories")
def test_check_damaged_copies(server):
    build_state(server)
    root = tempfile.mkdtemp(prefix="echd-e2e-check-")
    try:
        good = os.path.join(root, "good")
        ok(adm(server, "backup", good, live=False))
        cases = [
            (("cpel-del", "orders", "billing", "alice"),
             ["pending entry 1-1 of consumer 'alice' is missing from the consumer's index (cpel)",
              "consumer 'alice': its index (cpel) has 8 rows, the group PEL gives it 9"]),
            (("group-pending", "orders", "billing"),
             ["group 'billing': counts 16 pending, the PEL holds 15 rows"]),
            (("consumer-pending", "orders", "shipping", "carol"),
             ["consumer 'carol' counts 4 pending, the group PEL gives it 3"]),
            (("length", "orders"),
             ["stream 'orders' (db 0): length is 30, the stream has 29 entry rows"]),
        ]
        for i, (damage, expect) in enumerate(cases):
            bad = os.path.join(root, "bad%d" % i)
            shutil.copytree(good, bad)
            r = subprocess.run([fixture_exe(server), bad] + list(damage), capture_output=True,
                               text=True, timeout=30)
            assert r.returncode == 0, r.stderr
            p = adm_raw(server, "check", bad)
            assert p.returncode == 4, (damage, p.returncode, p.stdout, p.stderr)
            problems = [l for l in p.stdout.splitlines() if l.startswith("problem: ")]
            assert len(problems) == len(expect), (damage, p.stdout)
            for want in expect:
                assert any(want in l for l in problems), (want, p.stdout)
            assert "FAILED: %d problem" % len(expect) in p.stdout
            doc = json.loads(adm_raw(server, "--json", "check", bad).stdout)
            assert doc["ok"] is False and doc["problem_count"] == len(expect)
        # the copies were damaged, not the original
        assert ok(adm_raw(server, "check", good)).returncode == 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pg_only("damage is made with SQL in the schema of a stopped echd")
def test_check_reads_postgres(server):
    """On the postgres backend check reads the schema itself, not a directory: a row deleted
    there behind echd's back is found, and named by the schema, never by the URL."""
    s = server.spawn()
    build_state(s)
    assert s.stop() == 0
    p = ok(check_here(s))
    assert p.stdout.startswith("checking schema %s on PostgreSQL\n" % s.pg_schema), p.stdout
    # the first row of a consumer's index (cpel), gone from PostgreSQL
    schema = '"%s"' % s.pg_schema
    assert echdtest.pg_sql("DELETE FROM %s.cpel WHERE k = (SELECT k FROM %s.cpel ORDER BY k "
                           "LIMIT 1) RETURNING 1" % (schema, schema)) == "1"
    p = check_here(s)
    assert p.returncode == 4, (p.returncode, p.stdout, p.stderr)
    problems = [l for l in p.stdout.splitlines() if l.startswith("problem: ")]
    assert any("is missing from the consumer's index (cpel)" in l for l in problems), p.stdout
    assert any("its index (cpel) has" in l for l in problems), p.stdout
    doc = json.loads(check_here(s, "--json").stdout)
    assert doc["ok"] is False and doc["schema"] == s.pg_schema
    assert doc["problem_count"] == len(problems)
    assert echdtest.PG_URL not in p.stdout + p.stderr
    # a schema echd never made is not created by a read-only open
    missing = "e2e_never_made"
    p = adm_raw(server, *echdtest.pg_admin_args(missing), "streams")
    assert p.returncode == 3 and "schema '%s'" % missing in p.stderr, (p.returncode, p.stderr)
    assert echdtest.pg_sql("SELECT count(*) FROM pg_namespace WHERE nspname = '%s'"
                           % missing) == "0"


def test_check_idmp(server):
    """check verifies the idempotent producers' records (25-idmp makes them)."""
    c = server.raw()
    for i in range(5):
        c.call("XADD", "idem", "IDMP", "p%d" % (i % 2), "r%d" % i, "*", "f", "v")
    c.call("XADD", "idem", "IDMPAUTO", b"q" * 500, "*", "f", "v")
    assert ok(check_here(server)).stdout.endswith(
        "ok: every invariant holds\n")
    # streams shows the settings and counters, live and offline alike
    c.call("XADD", "plain", "*", "f", "v")
    c.call("XCFGSET", "idem", "IDMP-DURATION", "600")
    c.call("XADD", "idem", "IDMP", "p0", "again", "*", "f", "v")
    c.call("XADD", "idem", "IDMP", "p0", "again", "*", "f", "v")
    for lv in (True, False):
        doc = adm_json(server, "streams", live=lv)
        by = {s["name"]: s["idmp"] for s in doc["streams"]}
        assert by["idem"] == {"duration_s": 600, "maxsize": 100, "pids_tracked": 1,
                              "iids_tracked": 1, "iids_added": 7, "iids_duplicates": 1}, by
        assert by["plain"]["iids_added"] == 0 and by["plain"]["duration_s"] == 100
        table = ok(adm(server, "streams", live=lv)).stdout.splitlines()
        assert table[0].split()[-1] == "IDMP", table
        rows = {l.split()[0]: l.split()[-1] for l in table[1:]}
        assert rows["idem"] == "1:600s/100" and rows["plain"] == "-", table


@lmdb_only("the damaged copy is made with echo-admin backup (LMDB's copy) and adm-fixture, "
           "which writes LMDB directories")
def test_check_idmp_damaged(server):
    """check finds an idempotent producer's records out of step with its counters."""
    c = server.raw()
    for i in range(5):
        c.call("XADD", "idem", "IDMP", "p%d" % (i % 2), "r%d" % i, "*", "f", "v")
    c.call("XADD", "idem", "IDMPAUTO", b"q" * 500, "*", "f", "v")
    root = tempfile.mkdtemp(prefix="echd-e2e-check-")
    try:
        bad = os.path.join(root, "bad")
        ok(adm(server, "backup", bad, live=False))
        r = subprocess.run([fixture_exe(server), bad, "idmp-queue-del", "idem"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        p = adm_raw(server, "check", bad)
        assert p.returncode == 4, (p.stdout, p.stderr)
        problems = [l for l in p.stdout.splitlines() if l.startswith("problem: ")]
        assert any("iids-tracked 6; rows: 3 producers, 6 ids, 5 queued" in l
                   for l in problems), p.stdout
        assert any("idempotent producer 1 counts 3 records: 3 id rows, 2 queued" in l
                   for l in problems), p.stdout
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_check_during_deletions(server):
    """Rows of deleted streams and groups linger until echd's background deletion reaches
    them: check accepts them (they are queued in trash) at any moment."""
    build_state(server)
    c = server.raw()
    for key in ("gone", "kept"):
        echdtest.fill(c, key, 3000)
        c.call("XGROUP", "CREATE", key, "g", "0")
        c.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", key, ">")
    c.call("DEL", "gone")
    c.call("XGROUP", "DESTROY", "kept", "g")
    c.call("XGROUP", "DESTROY", "orders", "shipping")
    for _ in range(3):
        p = ok(check_here(server))
        assert p.stdout.endswith("ok: every invariant holds\n"), p.stdout
    doc = json.loads(ok(check_here(server, "--json")).stdout)
    assert doc["ok"] and doc["streams"] == 3 and doc["groups"] == 2


# ---------------------------------------------------------------------------
# a million pending entries
# ---------------------------------------------------------------------------

def first_line_after(cmd, seconds):
    """Start cmd, return (time to its second stdout line, that line); then stop it."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env_plain())
    try:
        header = p.stdout.readline()
        row = p.stdout.readline()
        return time.monotonic() - t0, header, row
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(seconds)


@timeout(300)
@lmdb_only("adm-fixture writes the million-entry PEL straight into an LMDB directory")
def test_million_pending(server):
    """A million pending entries (written by adm-fixture through the storage API: a million
    XADDs over the network take minutes here), served by a second echd: the listing starts at
    once in both modes, --limit bounds it, and summaries cost no walk."""
    n = 1000000
    root = tempfile.mkdtemp(prefix="echd-e2e-million-")
    os.makedirs(os.path.join(root, "data"))
    r = subprocess.run([fixture_exe(server), os.path.join(root, "data"), "fill", "huge", "g",
                        "c1", str(n)], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    s = echdtest.Server(server.kind, server.exe, [], root=root)
    server._children.append(s)  # stopped, and root removed, after the test
    s.start()
    c = RespConn(s.port, timeout=60)
    try:
        assert c.call("XPENDING", "huge", "g")[0] == n
    finally:
        c.close()
    for lv in (True, False):
        where = ["-p", str(s.port)] if lv else ["-d", s.dir]
        dt, header, row = first_line_after([admin_exe(s)] + where + ["pending", "huge", "g"],
                                           30)
        assert header.split()[0] == "ID" and row.split()[:2] == ["1-1", "c1"], (header, row)
        assert dt < 3.0, "first row after %.2f s (live=%s)" % (dt, lv)
        t0 = time.monotonic()
        doc = adm_json(s, "pending", "huge", "g", "--limit", "10", live=lv)
        assert time.monotonic() - t0 < 3.0
        assert [r["id"] for r in doc["pending"]] == ["%d-1" % i for i in range(1, 11)]
        assert doc["truncated"] is True
        t0 = time.monotonic()
        g = adm_json(s, "groups", "huge", live=lv)["groups"][0]
        assert g["pending"] == n and g["oldest_pending_id"] == "1-1"
        assert time.monotonic() - t0 < 3.0
    # the whole list, offline, in a few seconds
    t0 = time.monotonic()
    p = ok(adm(s, "pending", "huge", "g", live=False))
    assert p.stdout.count("\n") == n + 1
    assert time.monotonic() - t0 < 60
