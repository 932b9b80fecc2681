"""The Redis Cluster protocol, first slice (issue 36): cluster-enabled on the postgres engine,
one shard holding all 16384 slots, served by the front end itself.

- Without cluster-enabled, CLUSTER, READONLY, READWRITE and ASKING answer Redis' "cluster
  support disabled" error and INFO cluster says cluster_enabled:0 (against Redis too).
- cluster-enabled needs a store front ends share: echd refuses to start with it on lmdb and
  mem (exit status 2, the option named), and refuses cluster-shards past 256 (several
  shards over several front ends: 31-shards.py).
- On postgres (@pg_only: each test spawns a cluster-enabled echd of its own): CLUSTER
  KEYSLOT against a CRC16 written here and redis-py's own key_slot(); the shapes of CLUSTER
  SLOTS, SHARDS, NODES, MYID (kept across a restart) and INFO; COUNTKEYSINSLOT and
  GETKEYSINSLOT; CROSSSLOT for keys in different slots (XREAD, XREADGROUP, DEL), at MULTI's
  queueing and at EXEC over the commands queued, as Redis 7.0 in cluster mode answers; and
  redis-py's RedisCluster working a queue of several streams in different slots.
"""

import os
import re
import shutil
import subprocess
import tempfile

import redis
import redis.cluster
import redis.crc

from echdtest import Verbatim, echd_only, free_port, pg_only, timeout

TIMEOUT = 60

DISABLED = "ERR This instance has cluster support disabled"
CROSSSLOT = "CROSSSLOT Keys in request don't hash to the same slot"


def crc16_xmodem(data):
    """CRC16-CCITT, XMODEM's: polynomial 0x1021, initial value 0, no reflection."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def keyslot(key):
    """The Redis Cluster specification's HASH_SLOT: of the hash tag when there is a non-empty
    one between the first '{' and the next '}', else of the whole key."""
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1:end]
    return crc16_xmodem(key) % 16384


def cluster_server(server):
    return server.spawn("--cluster-enabled", "yes")


def fields(text):
    return dict(ln.split(":", 1) for ln in text.decode().split("\r\n") if ":" in ln)


# ---------------------------------------------------------------------------
# Without cluster-enabled, and where it cannot be had
# ---------------------------------------------------------------------------

def test_disabled_by_default(server):
    """CLUSTER's subcommands, READONLY, READWRITE and ASKING answer Redis' error; the
    subcommand's arity and name are checked first; INFO says cluster_enabled:0."""
    c = server.raw()
    for args in (["CLUSTER", "KEYSLOT", "a"], ["CLUSTER", "INFO"], ["CLUSTER", "MYID"],
                 ["CLUSTER", "SLOTS"], ["CLUSTER", "SHARDS"], ["CLUSTER", "NODES"],
                 ["CLUSTER", "COUNTKEYSINSLOT", "0"], ["CLUSTER", "GETKEYSINSLOT", "0", "1"],
                 ["CLUSTER", "HELP"], ["READONLY"], ["READWRITE"], ["ASKING"]):
        assert c.err(*args) == (DISABLED), args
    assert c.err("CLUSTER", "KEYSLOT") == (
        "ERR wrong number of arguments for 'cluster|keyslot' command")
    assert c.err("CLUSTER", "FOO") == (
        "ERR unknown subcommand 'FOO'. Try CLUSTER HELP.")
    assert fields(c.call("INFO", "cluster"))["cluster_enabled"] == "0"
    assert fields(c.call("INFO", "server"))["redis_mode"] == "standalone"
    # nothing routes by slot: keys in different slots are fine
    assert keyslot(b"a") != keyslot(b"b")
    assert c.call("DEL", "a", "b") == 0


def start_fails(server, *args):
    """Runs echd with these arguments; it must exit with status 2 (a configuration error)
    within 10 s. Returns its output."""
    d = tempfile.mkdtemp(prefix="echd-e2e-cluster-")
    try:
        cmd = [server.exe, "--port", str(free_port()), "--bind", "127.0.0.1",
               "--dir", os.path.join(d, "data")] + list(args)
        try:
            p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=10)
        except subprocess.TimeoutExpired:
            raise AssertionError("echd %s started instead of failing" % " ".join(args))
        out = p.stdout.decode(errors="replace")
        assert p.returncode == 2, "echd %s exited %d: %s" % (" ".join(args), p.returncode, out)
        return out
    finally:
        shutil.rmtree(d, ignore_errors=True)


@echd_only("echd's options")
def test_refused_without_a_shared_store(server):
    """lmdb and mem are no store front ends share: cluster-enabled refuses to start on them,
    saying what it needs; cluster-shards past its bound (256) is refused whatever the engine."""
    for engine in ("lmdb", "mem"):
        out = start_fails(server, "--storage", engine, "--cluster-enabled", "yes")
        assert ("cluster-enabled yes needs storage postgres, a store front ends share; "
                "storage is '%s'" % engine) in out, out
    out = start_fails(server, "--storage", "lmdb", "--cluster-shards", "257")
    assert "option 'cluster-shards': argument must be between 1 and 256 inclusive" in out, out
    out = start_fails(server, "--cluster-enabled", "maybe")
    assert "cluster-enabled" in out, out


# ---------------------------------------------------------------------------
# On postgres
# ---------------------------------------------------------------------------

KEYS = [b"somekey", b"foo", b"{user1000}.following", b"{user1000}.followers", b"foo{}{bar}",
        b"foo{{bar}}zap", b"{bar", b"foo{bar}{zap}", b"", b"{}", b"a{}", b"}{", b"{a}{b}",
        b"\x00\xff{\x01}", "ключ{тег}".encode()] + [b"k%d" % i for i in range(200)]


@pg_only("cluster-enabled needs the postgres engine")
def test_keyslot(server):
    """CLUSTER KEYSLOT against this module's CRC16 and redis-py's key_slot(), and the values
    Redis 7.0 gave for a few of them."""
    c = cluster_server(server).raw()
    got = {k: c.call("CLUSTER", "KEYSLOT", k) for k in KEYS}
    assert got == {k: keyslot(k) for k in KEYS}
    assert got == {k: redis.crc.key_slot(k) for k in KEYS}
    assert (got[b"somekey"], got[b"foo"], got[b"foo{}{bar}"], got[b"foo{{bar}}zap"]) == \
        (11058, 12182, 8363, 4015)
    assert got[b"{user1000}.following"] == got[b"{user1000}.followers"] == 3443
    assert len(set(got.values())) > 150  # spread over the slots


@pg_only("cluster-enabled needs the postgres engine")
def test_topology(server):
    """One shard, 0-16383, with this front end as its primary, in CLUSTER SLOTS (RESP2 and
    RESP3), SHARDS, NODES and INFO; MYID is 40 hex digits and survives a restart."""
    s = cluster_server(server)
    c = s.raw()
    myid = c.call("CLUSTER", "MYID")
    assert re.fullmatch(rb"[0-9a-f]{40}", myid), myid
    port = s.port
    assert c.call("CLUSTER", "SLOTS") == [[0, 16383, [b"127.0.0.1", port, myid, []]]]
    assert c.call("CLUSTER", "SHARDS") == [[
        b"slots", [0, 16383], b"nodes", [[
            b"id", myid, b"port", port, b"ip", b"127.0.0.1", b"endpoint", b"127.0.0.1",
            b"role", b"master", b"replication-offset", 0, b"health", b"online"]]]]
    nodes = c.call("CLUSTER", "NODES")
    assert nodes == b"%s 127.0.0.1:%d@%d myself,master - 0 0 1 connected 0-16383\n" % (
        myid, port, port + 10000)
    info = c.call("CLUSTER", "INFO")
    assert info.endswith(b"\r\n")
    assert fields(info) == {
        "cluster_state": "ok", "cluster_slots_assigned": "16384", "cluster_slots_ok": "16384",
        "cluster_slots_pfail": "0", "cluster_slots_fail": "0", "cluster_known_nodes": "1",
        "cluster_size": "1", "cluster_current_epoch": "1", "cluster_my_epoch": "1",
        "cluster_stats_messages_sent": "0", "cluster_stats_messages_received": "0",
        "total_cluster_links_buffer_limit_exceeded": "0"}
    assert fields(c.call("INFO", "cluster"))["cluster_enabled"] == "1"
    assert fields(c.call("INFO", "server"))["redis_mode"] == "cluster"
    for cmd in ("READONLY", "READWRITE", "ASKING"):
        assert c.call(cmd) == "OK"
    # RESP3: the fourth element of a node in SLOTS is a map, a shard and its nodes are
    # maps, NODES and INFO verbatim strings
    c.call("HELLO", "3")
    assert c.call("CLUSTER", "SLOTS") == [[0, 16383, [b"127.0.0.1", port, myid, {}]]]
    shard = c.call("CLUSTER", "SHARDS")[0]
    assert shard[b"slots"] == [0, 16383] and shard[b"nodes"][0][b"role"] == b"master"
    assert isinstance(c.call("CLUSTER", "NODES"), Verbatim)
    # the id is the front end's, kept in its data directory
    s.restart()
    assert s.raw().call("CLUSTER", "MYID") == myid
    with open(os.path.join(s.dir, "cluster-node-id"), "rb") as f:
        assert f.read() == myid + b"\n"


@pg_only("cluster-enabled needs the postgres engine")
def test_keys_in_slot(server):
    """COUNTKEYSINSLOT and GETKEYSINSLOT list the keys hashing to a slot, count bounded; bad
    slots and counts get Redis 7.0's errors."""
    c = cluster_server(server).raw()
    tagged = [b"{q}%d" % i for i in range(5)]
    for k in tagged + [b"other", b"more"]:
        c.call("XADD", k, "*", "f", "v")
    slot = keyslot(b"q")
    assert keyslot(b"other") != slot and keyslot(b"more") != slot
    assert c.call("CLUSTER", "COUNTKEYSINSLOT", slot) == 5
    assert c.call("CLUSTER", "COUNTKEYSINSLOT", keyslot(b"other")) == 1
    assert sorted(c.call("CLUSTER", "GETKEYSINSLOT", slot, 100)) == tagged
    assert len(c.call("CLUSTER", "GETKEYSINSLOT", slot, 2)) == 2
    assert c.call("CLUSTER", "GETKEYSINSLOT", slot, 0) == []
    for args, msg in ((["COUNTKEYSINSLOT", "16384"], "ERR Invalid slot"),
                      (["COUNTKEYSINSLOT", "-1"], "ERR Invalid slot"),
                      (["COUNTKEYSINSLOT", "x"], "ERR value is not an integer or out of range"),
                      (["GETKEYSINSLOT", "16384", "1"], "ERR Invalid slot or number of keys"),
                      (["GETKEYSINSLOT", "0", "-1"], "ERR Invalid slot or number of keys"),
                      (["GETKEYSINSLOT", "x", "1"],
                       "ERR value is not an integer or out of range")):
        assert c.err("CLUSTER", *args) == (msg), args


def two_slots():
    a, b = b"orders", b"invoices"
    assert keyslot(a) != keyslot(b)
    return a, b


@pg_only("cluster-enabled needs the postgres engine")
def test_crossslot(server):
    """Keys in different slots: CROSSSLOT before the command runs (nothing written, the call
    counted as rejected); with a hash tag they share a slot and the command runs."""
    c = cluster_server(server).raw()
    a, b = two_slots()
    for k in (a, b):
        c.call("XADD", k, "1-1", "f", "v")
        c.call("XGROUP", "CREATE", k, "g", "0")
    assert c.err("XREAD", "STREAMS", a, b, "0", "0") == (CROSSSLOT)
    assert c.err("XREADGROUP", "GROUP", "g", "c", "STREAMS", a, b, ">", ">") == \
        (CROSSSLOT)
    assert c.err("DEL", a, b) == (CROSSSLOT)
    assert c.call("XPENDING", a, "g")[0] == 0  # the XREADGROUP delivered nothing
    assert c.call("EXISTS", a) == 1 and c.call("EXISTS", b) == 1
    stats = c.call("INFO", "commandstats").decode()
    assert re.search(r"cmdstat_xreadgroup:calls=0,.*rejected_calls=1,", stats), stats
    # one key, or keys with one hash tag, run
    ta, tb = b"{jobs}" + a, b"{jobs}" + b
    c.call("XADD", ta, "1-1", "f", "a")
    c.call("XADD", tb, "1-1", "f", "b")
    assert c.call("XREAD", "STREAMS", ta, tb, "0", "0") == [
        [ta, [[b"1-1", [b"f", b"a"]]]], [tb, [[b"1-1", [b"f", b"b"]]]]]
    assert c.call("DEL", ta, tb) == 2
    # one database, as in Redis' cluster mode
    assert c.err("SELECT", "1") == "ERR SELECT is not allowed in cluster mode"
    assert c.call("SELECT", "0") == "OK"
    assert c.err("MOVE", a, "1") == "ERR MOVE is not allowed in cluster mode"
    assert c.err("COPY", a, b"{orders}x", "DB", "1") == \
        "ERR Copying to another database is not allowed in cluster mode"
    assert c.err("COPY", a, b) == CROSSSLOT
    assert c.call("COPY", a, b"{orders}x") == 1
    # a request its handler refuses is not routed: the handler's own error
    assert c.err("XREAD", "STREAMS", a, b, "0").startswith("ERR Unbalanced 'xread' list")


@pg_only("cluster-enabled needs the postgres engine")
def test_crossslot_in_multi(server):
    """As Redis 7.0 in cluster mode: a queued command across slots is refused at MULTI's
    queueing (EXEC then aborts); commands each in one slot but in different slots are
    queued, and EXEC answers CROSSSLOT and discards the transaction, running none."""
    c = cluster_server(server).raw()
    a, b = two_slots()
    assert c.call("MULTI") == "OK"
    assert c.err("XREAD", "STREAMS", a, b, "0", "0") == (CROSSSLOT)
    assert c.call("XADD", a, "*", "f", "v") == "QUEUED"
    assert c.err("EXEC") == ("EXECABORT Transaction discarded because of previous "
                                      "errors.")
    assert c.call("MULTI") == "OK"
    assert c.call("XADD", a, "*", "f", "v") == "QUEUED"
    assert c.call("XADD", b, "*", "f", "v") == "QUEUED"
    assert c.err("EXEC") == (CROSSSLOT)
    assert c.err("EXEC") == ("ERR EXEC without MULTI")  # discarded
    assert c.call("EXISTS", a) == 0 and c.call("EXISTS", b) == 0
    # one slot: it runs
    ta, tb = b"{t}" + a, b"{t}" + b
    assert c.call("MULTI") == "OK"
    assert c.call("XADD", ta, "1-1", "f", "v") == "QUEUED"
    assert c.call("PING") == "QUEUED"
    assert c.call("XADD", tb, "1-1", "f", "v") == "QUEUED"
    assert c.call("EXEC") == [b"1-1", "PONG", b"1-1"]
    # EXEC without MULTI is not routed
    assert c.err("EXEC") == ("ERR EXEC without MULTI")


@pg_only("cluster-enabled needs the postgres engine")
@timeout(120)
def test_redis_py_cluster_client(server):
    """redis-py's RedisCluster against the one front end: it reads the slots, then works a
    queue over streams in several slots (XADD, XGROUP CREATE, XREADGROUP, XACK, XPENDING),
    and its pipeline of commands to different slots; a cross-slot XREAD gets CROSSSLOT."""
    s = cluster_server(server)
    rc = redis.cluster.RedisCluster(host="127.0.0.1", port=s.port, decode_responses=True)
    try:
        nodes = rc.get_nodes()
        assert [(n.host, n.port, n.server_type) for n in nodes] == \
            [("127.0.0.1", s.port, "primary")]
        streams = ["queue:%d" % i for i in range(8)]
        assert len({keyslot(k.encode()) for k in streams}) == 8
        ids = {}
        for k in streams:
            rc.xgroup_create(k, "workers", id="0", mkstream=True)
            ids[k] = [rc.xadd(k, {"job": "%s-%d" % (k, j)}) for j in range(3)]
        done = 0
        for k in streams:
            got = rc.xreadgroup("workers", "w1", {k: ">"}, count=10)
            assert [e[0] for e in got[0][1]] == ids[k]
            assert rc.xack(k, "workers", *ids[k]) == 3
            assert rc.xpending(k, "workers")["pending"] == 0
            done += len(got[0][1])
        assert done == 24
        pipe = rc.pipeline()
        for k in streams:
            pipe.xlen(k)
        assert pipe.execute() == [3] * 8
        # redis-py refuses that itself; sent through its connection to the node, echd
        # answers CROSSSLOT
        node = rc.get_default_node().redis_connection
        try:
            node.execute_command("XREAD", "STREAMS", streams[0], streams[1], "0", "0")
            raise AssertionError("XREAD across slots ran")
        except redis.exceptions.ClusterCrossSlotError as e:
            # (redis-py's class for a "-CROSSSLOT" reply; the text after the code)
            assert str(e) == CROSSSLOT.split(" ", 1)[1], e
        tagged = ["{q}a", "{q}b"]
        for k in tagged:
            rc.xadd(k, {"n": "1"}, id="1-1")
        got = rc.xread({k: "0" for k in tagged})
        assert sorted(x[0] for x in got) == tagged
    finally:
        rc.close()
