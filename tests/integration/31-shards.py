"""Several shards over several front ends on one PostgreSQL (issue 36): cluster-shards 3 cuts
the 16384 slots into three schemas (<schema>_s0.._s2, the map in <schema>.shards), and each
front end is active for at most one shard no one else holds, standing by for the rest.

- 3 shards over 4 front ends: every slot is covered by 3 distinct primaries, as CLUSTER SLOTS,
  SHARDS, NODES and INFO of each front end say; the 4th is a standby (a replica in its
  CLUSTER NODES) that answers a keyed command MOVED to the shard's primary and a keyless one
  READONLY; a primary answers MOVED, with the right host:port, for another shard's key.
- The standby is a replica of every shard on every front end (CLUSTER SLOTS: after each
  primary; SHARDS: role replica; NODES: one slave line naming shard 0's primary); kill -9 of an
  active front end makes the standby that shard's primary in every view; a standby started
  then is listed, and after its kill -9 is no longer listed once its heartbeat is older than
  the bound (cluster-node-timeout: here 3 polls of 100 ms, at least 1000 ms).
- 3 shards over 3 front ends, one killed: its shard's slots answer CLUSTERDOWN, CLUSTER INFO
  says cluster_state:fail with the slots counted as Redis counts them; a front end started
  later takes the shard (its data there) and the cluster is ok.
- A front end started with another cluster-shards than the stored map refuses to start.
- /metrics of each front end: echd_cluster_shards 3, and echd_cluster_shard_info with the
  index and slots of the shard it serves (none on the standby); promtool accepts it; after a
  takeover the standby's scrape names the shard it took.
- echo-admin shards reads the map from PostgreSQL: each shard's slots, schema, holder (node,
  address, generation) as CLUSTER NODES says; free once its front end is killed; a schema
  without a map is refused.
- redis-py's RedisCluster works a queue of many streams across the shards; kill -9 of one
  shard's front end: the standby takes that shard over within 5 s (the time is printed), the
  client follows the new MOVED, and every XADD acknowledged before the kill is still there.
- A shard on a second PostgreSQL (a throw-away one): echo-admin shards set-url puts shard 2
  there before its first use (refused for an unreachable URL); the front end already running
  and those started then serve all slots, a key of shard 2 lands in the second server's
  schema and not the first's; set-url is refused while shard 2 is held; kill -9 of its front end: the standby takes it over on
  the second server within 5 s with every acknowledged entry; with every front end stopped,
  set-url is refused for a shard holding data (echd moves none).
- echo-admin shards gives each shard its PostgreSQL's own standbys and their lag: shard 2 on a
  second PostgreSQL with a synchronous standby shows one (synchronous) and its lag in bytes,
  the shards at home none; the table's LAG column appears only when a server has standbys.
"""

import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import echdtest
from echdtest import RespError, free_port, http_server, pg_only, timeout, wait_until
from shardtest import (PG, RANGES, READONLY, Shards, cinfo, cluster_client, fill_queue,
                       four_front_ends, held_by, myself, nodes_of, replicas_of, retrying,
                       settled, shard_of, slots_of, text_of)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "helpers"))
import pgtmp  # noqa: E402


@pg_only(PG)
@timeout(120)
def test_three_shards_four_front_ends(server):
    """All 16384 slots are covered by three distinct primaries, the fourth front end stands
    by; MOVED points at the right front end from a primary and from the standby."""
    sh = Shards(server)
    try:
        fronts, held, standby = four_front_ends(sh)
        slots = slots_of(fronts[0])
        assert sorted(slots) == RANGES, slots
        ports = {s.port for s in fronts}
        assert len(set(slots.values())) == 3 and set(slots.values()) <= ports, slots
        assert sorted(held) == [0, 1, 2], held
        assert standby.port not in slots.values()
        for i, s in held.items():
            assert slots[RANGES[i]] == s.port
        # CLUSTER INFO on each: every slot served by 3 primaries
        for s in fronts:
            ci = cinfo(s)
            assert ci["cluster_state"] == "ok", ci
            assert ci["cluster_slots_assigned"] == "16384" and ci["cluster_size"] == "3", ci
            assert ci["cluster_known_nodes"] == "4", ci
        # the standby: a replica in its own NODES; its MYID is its own
        me = myself(standby)
        assert me[2] == "myself,slave" and me[3] == myself(held[0])[0] and len(me) == 8, me
        assert standby.raw().call("CLUSTER", "MYID").decode() == me[0]
        # CLUSTER SHARDS: three shards, each its primary and the standby
        shards = standby.raw().call("CLUSTER", "SHARDS")
        assert len(shards) == 3 and all(len(x[3]) == 2 for x in shards), shards
        # the files are the schemas: <base>_s<i>, the map in <base>.shards
        rows = echdtest.pg_sql('SELECT ix, schema, first, last FROM "%s".shards ORDER BY ix'
                               % sh.base)
        assert rows.split("\n") == ["%d|%s_s%d|%d|%d" % (i, sh.base, i, lo, hi)
                                    for i, (lo, hi) in enumerate(RANGES)], rows
        # MOVED: for a key of each shard, from every front end but its primary
        for key in ("a", "b", "c", "foo", "somekey", "k1", "k2", "k3"):
            i, slot = shard_of(key)
            for s in fronts:
                c = s.raw()
                if s is held[i]:
                    assert c.call("XADD", key, "*", "f", "v")
                    continue
                assert c.err("XADD", key, "*", "f", "v") == \
                    "MOVED %d 127.0.0.1:%d" % (slot, held[i].port), (key, s.port)
        # the standby answers what has no key as a standby does
        assert standby.raw().err("DBSIZE") == READONLY
        assert standby.raw().err("CLUSTER", "COUNTKEYSINSLOT", "0") == READONLY
        assert standby.raw().call("PING") == "PONG"
    finally:
        sh.drop()


def node_map(flat):
    """A CLUSTER SHARDS node (RESP2: a flat list of pairs) as a dict of str."""
    return {text_of(k): (v if isinstance(v, int) else text_of(v))
            for k, v in zip(flat[::2], flat[1::2])}


def check_standby_listed(fronts, held, standby):
    """Every front end lists standby as a replica of each shard, after its primary."""
    sid = myself(standby)[0]
    for s in fronts:
        assert replicas_of(s) == {RANGES[i]: [(standby.port, sid)] for i in range(3)}, s.port
        for i, sh in enumerate(s.raw(timeout=5).call("CLUSTER", "SHARDS")):
            nodes = [node_map(n) for n in sh[3]]
            assert [(n["id"], n["role"]) for n in nodes] == \
                [(myself(held[i])[0], "master"), (sid, "replica")], (s.port, nodes)
            assert nodes[1] == {"id": sid, "port": standby.port, "ip": "127.0.0.1",
                                "endpoint": "127.0.0.1", "role": "replica",
                                "replication-offset": 0, "health": "online"}, nodes[1]
        lines = nodes_of(s)
        assert len(lines) == 4, lines
        line = next(ln for ln in lines if ln[0] == sid)
        # Redis' own: a replica names one primary and shows its config epoch, no slots
        p0 = myself(held[0])
        assert line == [sid, "127.0.0.1:%d@%d" % (standby.port, standby.port + 10000),
                        "myself,slave" if s is standby else "slave", p0[0], "0", "0", p0[6],
                        "connected"], (s.port, line)
        assert cinfo(s)["cluster_known_nodes"] == "4"


def no_replicas(fronts):
    try:
        return all(all(r == [] for r in replicas_of(s).values()) and len(nodes_of(s)) == 3
                   for s in fronts)
    except (OSError, RespError):
        return False


@pg_only(PG)
@timeout(120)
def test_standby_is_a_replica(server):
    """The standby is a replica of every shard in every front end's CLUSTER SLOTS, SHARDS and
    NODES; kill -9 of an active front end makes the standby that shard's primary in every
    view; a standby started then is listed, and is no longer listed within the bound of its
    kill -9 (its heartbeat row goes stale)."""
    sh = Shards(server)
    try:
        fronts, held, standby = four_front_ends(sh)
        check_standby_listed(fronts, held, standby)
        # the registry: one row per front end, the standby's without a shard
        rows = echdtest.pg_sql("SELECT port, role, coalesce(shard, -1) FROM \"%s\".frontends "
                               "ORDER BY port" % sh.base).split("\n")
        want = sorted("%d|%s|%d" % ((s.port, "standby", -1) if s is standby else
                                    (s.port, "active", next(i for i, h in held.items()
                                                            if h is s))) for s in fronts)
        assert sorted(rows) == want, rows
        # kill -9 shard 1's front end: the standby is its primary in every view
        held[1].kill(signal.SIGKILL)
        survivors = [s for s in fronts if s is not held[1]]
        # (between the lock's release and the takeover no one holds shard 1: its slots are
        # not listed, so it is looked up, not indexed)
        wait_until(lambda: settled(survivors, 3) and
                   slots_of(survivors[0]).get(RANGES[1]) == standby.port, 10,
                   what="the standby the primary of shard 1 everywhere")
        wait_until(lambda: no_replicas(survivors), 5, what="no standby left to list")
        for s in survivors:
            assert slots_of(s)[RANGES[1]] == standby.port
            line = next(ln for ln in nodes_of(s) if ln[0] == myself(standby)[0])
            assert line[2].endswith("master") and line[3] == "-" and line[8] == "5461-10921", \
                line
        held[1] = standby
        # a new standby is listed; after its kill -9, not once its row is older than the bound
        spare = sh.start()
        everyone = survivors + [spare]
        wait_until(lambda: all(len(nodes_of(s)) == 4 for s in everyone), 5,
                   what="every front end listing the new standby")
        check_standby_listed(everyone, held, spare)
        spare.kill(signal.SIGKILL)
        t0 = time.monotonic()
        wait_until(lambda: no_replicas(survivors), 5, interval=0.05,
                   what="the killed standby no longer listed")
        gone = time.monotonic() - t0
        print("killed standby unlisted after %.2f s (bound 1.0 s, polls every 0.1 s)" % gone)
        # the bound is 1 s from its last heartbeat, seen by the next poll of each front end
        assert 0.5 < gone < 2.0, gone
        assert cinfo(survivors[0])["cluster_known_nodes"] == "3"
    finally:
        sh.drop()


@pg_only(PG)
@timeout(120)
def test_a_shard_no_one_holds(server):
    """3 shards, 3 front ends, no standby: kill -9 of shard 2's front end leaves its slots
    down (CLUSTERDOWN, not a MOVED to the dead one; cluster_state fail, 10922 slots
    assigned); a front end started later takes the shard, and the cluster is ok."""
    sh = Shards(server)
    try:
        fronts = [sh.start() for _ in range(3)]
        wait_until(lambda: settled(fronts, 3), 5, what="every front end sees 3 primaries")
        held = held_by(fronts)
        a, b = held[0], held[1]
        key = next(k for k in ("k%d" % n for n in range(100)) if shard_of(k)[0] == 2)
        assert held[2].raw().call("XADD", key, "*", "f", "v")
        held[2].kill(signal.SIGKILL)
        wait_until(lambda: settled([a, b], 2), 5, what="shard 2 seen unserved")
        assert a.raw().err("XADD", key, "*", "f", "v") == "CLUSTERDOWN Hash slot not served"
        assert b.raw().err("XLEN", key) == "CLUSTERDOWN Hash slot not served"
        ci = cinfo(a)
        assert ci["cluster_state"] == "fail", ci
        assert ci["cluster_slots_assigned"] == str(RANGES[2][0]), ci  # 10922
        assert ci["cluster_slots_ok"] == ci["cluster_slots_assigned"], ci
        assert ci["cluster_size"] == "2" and ci["cluster_known_nodes"] == "2", ci
        assert sorted(slots_of(a)) == RANGES[:2]
        c = sh.start()
        wait_until(lambda: settled([a, b, c], 3), 5, what="the third shard served")
        assert cinfo(a)["cluster_state"] == "ok"
        assert a.raw().err("XADD", key, "*", "f", "v") == \
            "MOVED %d 127.0.0.1:%d" % (shard_of(key)[1], c.port)
        assert c.raw().call("XLEN", key) == 1
    finally:
        sh.drop()


@pg_only(PG)
@timeout(120)
def test_another_shard_count_is_refused(server):
    """The map is the first front end's: one started with cluster-shards 4 against a map of 3
    refuses to start, saying why."""
    sh = Shards(server)
    tmp = tempfile.mkdtemp(prefix="echd-shards-")
    try:
        sh.start()
        p = subprocess.run([server.exe, "--port", str(free_port()), "--bind", "127.0.0.1",
                            "--dir", tmp] + sh.args(4),
                           stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=30)
        out = p.stdout + p.stderr
        assert p.returncode != 0, out
        assert re.search(r"%s\.shards maps the store in 3 shard\(s\).*started with 4" % sh.base,
                         out), out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        sh.drop()


def shard_series(port):
    """The scrape of /metrics on port, and its echd_cluster_* lines without comments."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", "/metrics")
        r = c.getresponse()
        assert r.status == 200, r.status
        text = r.read().decode()
    finally:
        c.close()
    return text, sorted(ln for ln in text.splitlines() if ln.startswith("echd_cluster_"))


def info_line(i):
    return 'echd_cluster_shard_info{shard="%d",first_slot="%d",last_slot="%d"} 1' % (
        (i,) + RANGES[i])


@pg_only(PG)
@timeout(120)
def test_metrics_name_the_shard(server):
    """Each front end's /metrics says how many shards there are and which one it serves (an
    info series, none on the standby); promtool accepts it; after a takeover the standby's
    scrape names the shard it took."""
    sh = Shards(server)
    try:
        fronts, ports = [], {}
        for _ in range(4):
            s, port = http_server(server, *sh.args())
            fronts.append(s)
            ports[s] = port
        wait_until(lambda: settled(fronts, 3), 5, what="every front end sees 3 primaries")
        held = held_by(fronts)
        standby = next(s for s in fronts if s not in held.values())
        for s in fronts:
            text, lines = shard_series(ports[s])
            want = ["echd_cluster_shards 3"]
            if s is not standby:
                want.insert(0, info_line(next(i for i, h in held.items() if h is s)))
            assert lines == want, (s.port, lines)
            p = subprocess.run(["/usr/bin/promtool", "check", "metrics"], input=text,
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == 0, "promtool:\n%s%s" % (p.stdout, p.stderr)
        held[1].kill(signal.SIGKILL)
        wait_until(lambda: shard_series(ports[standby])[1][0] == info_line(1), 5,
                   what="the standby's scrape naming shard 1")
    finally:
        sh.drop()


def admin_shards(server, base, *opts):
    p = subprocess.run([echdtest.admin_exe(server.exe)] + list(opts) +
                       echdtest.pg_admin_args(base) + ["shards"],
                       capture_output=True, text=True, timeout=60)
    return p


@pg_only(PG)
@timeout(120)
def test_echo_admin_shards(server):
    """echo-admin shards: the map read from PostgreSQL, each shard's holder as the front
    ends' CLUSTER NODES say (its node id, address, generation, heartbeat age); a shard whose
    front end was killed is free; a schema that holds no map is refused; the registry's front
    ends follow the shards (node, address, role, shard, heartbeat age), and a standby started
    later is listed under every shard in --json with its heartbeat's age."""
    sh = Shards(server)
    try:
        fronts = [sh.start() for _ in range(3)]
        wait_until(lambda: settled(fronts, 3), 5, what="every front end sees 3 primaries")
        held = held_by(fronts)
        p = admin_shards(server, sh.base, "--json")
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        assert doc["schema"] == sh.base
        want = []
        for i, (lo, hi) in enumerate(RANGES):
            me = myself(held[i])
            want.append({"shard": i, "first_slot": lo, "last_slot": hi,
                         "schema": "%s_s%d" % (sh.base, i), "held": True,
                         "generation": int(me[6]), "node": me[0],
                         "address": "127.0.0.1:%d" % held[i].port, "standbys": [],
                         "server": echdtest.PG_URL, "home_server": True,
                         "replicas": 0, "sync_replicas": 0, "lag_bytes": None, "lag_ms": None})
        # each holder's last heartbeat: a few polls of 100 ms ago (a loaded machine: more)
        for d in doc["shards"]:
            assert 0 <= d.pop("heartbeat_age_ms") < 3000, doc
        assert doc["shards"] == want, doc
        held[2].kill(signal.SIGKILL)

        def freed():
            d = json.loads(admin_shards(server, sh.base, "--json").stdout)
            return not d["shards"][2]["held"]
        wait_until(freed, 5, what="shard 2 free once its front end is killed")
        d = json.loads(admin_shards(server, sh.base, "--json").stdout)
        assert d["shards"][2]["node"] is None and d["shards"][2]["address"] is None, d
        assert d["shards"][2]["heartbeat_age_ms"] is None, d
        for x in d["shards"]:
            x.pop("heartbeat_age_ms")
        assert d["shards"][:2] == want[:2], d
        # the table: one line per shard, held or free
        text = admin_shards(server, sh.base, "--no-color").stdout.splitlines()
        print("\n".join(text))
        assert text[0].split() == ["SHARD", "SLOTS", "SCHEMA", "STATE", "GEN", "NODE",
                                   "ADDRESS"], text
        assert text[1].split()[:4] == ["0", "0-5460", sh.base + "_s0", "held"], text
        assert text[3].split() == ["2", "10922-16383", sh.base + "_s2", "free",
                                   str(want[2]["generation"]), "-", "-"], text
        # then the registry: the killed front end's row until it is past the bound
        assert text[4] == "" and text[5].split() == ["FRONT", "END", "ADDRESS", "ROLE", "SHARD",
                                                   "HEARTBEAT"], text
        # a schema without a map
        p = admin_shards(server, sh.base + "_s0")
        assert p.returncode != 0 and "holds no shard map" in p.stderr + p.stdout, p
        # two more: one takes shard 2, the other stands by, listed under every shard
        fronts.append(sh.start())
        wait_until(lambda: json.loads(admin_shards(server, sh.base, "--json").stdout)
                   ["shards"][2]["held"], 5, what="shard 2 taken")
        spare = sh.start()
        sid = myself(spare)[0]

        def spare_listed():
            d = json.loads(admin_shards(server, sh.base, "--json").stdout)
            return d if all(x["standbys"] for x in d["shards"]) else None
        d = wait_until(spare_listed, 5, what="the standby in echo-admin shards")
        for x in d["shards"]:
            assert [(y["node"], y["address"]) for y in x["standbys"]] == \
                [(sid, "127.0.0.1:%d" % spare.port)], d
            assert 0 <= x["standbys"][0]["heartbeat_age_ms"] < 3000, d
        # the registry: the four live front ends (the killed one's row is gone by now)
        wait_until(lambda: len(json.loads(admin_shards(server, sh.base, "--json").stdout)
                               ["front_ends"]) == 4, 5, what="the killed front end's row gone")
        d = json.loads(admin_shards(server, sh.base, "--json").stdout)
        roles = {(f["address"], f["role"], f["shard"]) for f in d["front_ends"]}
        assert roles == {("127.0.0.1:%d" % held[0].port, "active", 0),
                         ("127.0.0.1:%d" % held[1].port, "active", 1),
                         ("127.0.0.1:%d" % fronts[-1].port, "active", 2),
                         ("127.0.0.1:%d" % spare.port, "standby", None)}, d
        text = admin_shards(server, sh.base, "--no-color").stdout.splitlines()
        print("\n".join(text))
        line = next(ln.split() for ln in text[6:] if ":%d " % spare.port in ln + " ")
        assert line[1:4] == ["127.0.0.1:%d" % spare.port, "standby", "-"], text
        assert re.fullmatch(r"\d+\.\ds", line[4]) and float(line[4][:-1]) < 3.0, text
    finally:
        sh.drop()


@pg_only(PG)
@timeout(180)
def test_redis_cluster_client_and_takeover(server):
    """redis-py's RedisCluster works a queue of 24 streams across 3 shards; kill -9 of one
    shard's front end: the standby takes that shard over within 5 s, the client follows the
    new MOVED, and every XADD acknowledged before the kill is still there."""
    sh = Shards(server)
    try:
        fronts, held, standby = four_front_ends(sh)
        rc = cluster_client(fronts)
        streams = ["job:%d" % i for i in range(24)]
        assert {shard_of(k)[0] for k in streams} == {0, 1, 2}
        assert sorted((n.port for n in rc.get_primaries())) == sorted(s.port for s in held.values())
        # the standby is a replica in its map; with its defaults it sends nothing there
        assert [n.port for n in rc.get_replicas()] == [standby.port]
        acked = fill_queue(rc, streams)
        for k in streams:
            got = rc.xreadgroup("workers", "w1", {k: ">"}, count=3)
            ids = [e[0] for e in got[0][1]]
            assert ids == acked[k][:3]
            assert rc.xack(k, "workers", *ids) == 3
        # kill -9 the front end of shard 0; the standby takes it over
        victim = held[0]
        victim.kill(signal.SIGKILL)
        t0 = time.monotonic()

        def standby_took():
            try:
                return len(myself(standby)) > 8 and myself(standby)[8] == "0-5460"
            except (OSError, RespError):
                return False
        wait_until(standby_took, 5, interval=0.05,
                   what="the standby holding shard 0 within 5 s of kill -9")
        took = time.monotonic() - t0
        print("takeover of shard 0 after kill -9: %.2f s" % took)
        assert took < 5
        survivors = [s for s in fronts if s is not victim]
        wait_until(lambda: settled(survivors, 3), 5, what="every front end sees the new primary")
        assert slots_of(held[1])[RANGES[0]] == standby.port
        # the client follows: every acknowledged entry is there, on every shard
        for k in streams:
            got = retrying(lambda k=k: rc.xrange(k, "-", "+"), "XRANGE %s" % k)
            assert [e[0] for e in got] == acked[k], k
            pend = retrying(lambda k=k: rc.xpending(k, "workers"), "XPENDING %s" % k)
            assert pend["pending"] == 0, (k, pend)
        # and the queue goes on: the rest is delivered once, from the new primary too
        for k in streams:
            new = retrying(lambda k=k: rc.xadd(k, {"job": "after"}), "XADD %s" % k)
            got = retrying(lambda k=k: rc.xreadgroup("workers", "w2", {k: ">"}, count=10),
                           "XREADGROUP %s" % k)
            assert [e[0] for e in got[0][1]] == acked[k][3:] + [new], k
        rc.close()
    finally:
        sh.drop()


def admin(server, base, *args):
    return subprocess.run([echdtest.admin_exe(server.exe)] + echdtest.pg_admin_args(base) +
                          list(args), capture_output=True, text=True, timeout=60)


def shard_json(server, base):
    p = admin(server, base, "--json", "shards")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["shards"]


@pg_only(PG)
@timeout(240)
def test_a_shard_on_another_server(server):
    """Shard 2 on a second PostgreSQL, set with echo-admin before its first use: its keys land
    there, a standby takes it over there after kill -9 of its front end with every
    acknowledged entry, and echo-admin refuses to move it while held, or once it holds data."""
    sh = Shards(server)
    with pgtmp.Cluster() as pg2:
        try:
            # the first front end makes the map (and takes shard 0)
            first = sh.start()
            wait_until(lambda: len(myself(first)) > 8, 5, what="the first front end active")
            p = admin(server, sh.base, "shards", "set-url", "2",
                      "postgresql://127.0.0.1:1/postgres?connect_timeout=2")
            assert p.returncode == 3 and "cannot connect to the new server" in p.stderr, p
            p = admin(server, sh.base, "shards", "set-url", "2", pg2.url)
            assert p.returncode == 0, p.stderr
            print(p.stdout.strip())
            assert p.stdout == "shard 2 (schema %s_s2) now lives on %s\n" % (sh.base, pg2.url), \
                p.stdout
            d = shard_json(server, sh.base)
            assert [(x["server"], x["home_server"]) for x in d] == \
                [(echdtest.PG_URL, True), (echdtest.PG_URL, True), (pg2.url, False)], d
            text = admin(server, sh.base, "--no-color", "shards").stdout.splitlines()
            print("\n".join(text))
            # a SERVER column, named in a table of the servers under it
            assert text[0].split()[-1] == "SERVER", text
            assert [ln.split()[-1] for ln in text[1:4]] == ["home", "home", "pg1"], text
            assert [ln.split() for ln in text[5:8]] == [["SERVER", "URL"], ["home", echdtest.PG_URL],
                                                        ["pg1", pg2.url]], text
            # the front ends started now serve every slot, shard 2 from the second server
            fronts = [first] + [sh.start() for _ in range(3)]
            # (the first one too: it reads the map again at each poll)
            wait_until(lambda: settled(fronts, 3), 10, what="every front end sees 3 primaries")
            held = held_by(fronts)
            assert sorted(held) == [0, 1, 2] and held[0] is first, held
            standby = next(s for s in fronts if s not in held.values())
            key = next(k for k in ("job:%d" % i for i in range(100)) if shard_of(k)[0] == 2)
            c = held[2].raw()
            acked = [c.call("XADD", key, "*", "n", str(j)) for j in range(50)]
            assert pg2.psql('SELECT count(*) FROM "%s_s2".keys' % sh.base) == "1"
            assert int(pg2.psql('SELECT count(*) FROM "%s_s2".entries' % sh.base)) >= 1
            assert echdtest.pg_sql('SELECT count(*) FROM "%s_s2".keys' % sh.base) == "0"
            # refused while held
            p = admin(server, sh.base, "shards", "set-url", "2", "-")
            assert p.returncode == 5 and "a front end holds it" in p.stderr, p
            print(p.stderr.strip())
            # kill -9 of shard 2's front end: the standby takes it over on the second server
            held[2].kill(signal.SIGKILL)
            t0 = time.monotonic()
            wait_until(lambda: len(myself(standby)) > 8 and myself(standby)[8] == "%d-%d"
                       % RANGES[2], 5, interval=0.05,
                       what="the standby holding shard 2 within 5 s of kill -9")
            print("takeover of shard 2 on the second server after kill -9: %.2f s"
                  % (time.monotonic() - t0))
            got = standby.raw().call("XRANGE", key, "-", "+")
            assert [e[0] for e in got] == acked
            assert int(pg2.psql("SELECT gen FROM \"%s_s2\".ha" % sh.base)) == 2
            # the second server lost: shard 2 is served no more, shards 0 and 1 go on
            pg2.stop()
            wait_until(lambda: RANGES[2] not in slots_of(first), 5,
                       what="shard 2 unserved once its server is gone")
            # its log says which server (the standby's: it served shard 2)
            wait_until(lambda: "server %s: " % pg2.url in standby.log_tail(400), 5,
                       what="the log naming the lost server")
            k0 = next(k for k in ("job:%d" % i for i in range(100)) if shard_of(k)[0] == 0)
            for _ in range(5):
                assert first.raw().call("XADD", k0, "*", "f", "v")
                time.sleep(0.1)
            assert sorted(slots_of(first)) == RANGES[:2] and myself(first)[8] == "0-5460"
            assert "READONLY" in standby.raw().err("DBSIZE")
            # back: a front end takes shard 2 again, every entry there
            pg2.start()
            alive = [s for s in fronts if s is not held[2]]
            wait_until(lambda: settled(alive, 3), 15,
                       what="shard 2 served again once its server is back")
            holder = held_by(alive)[2]
            assert [e[0] for e in holder.raw().call("XRANGE", key, "-", "+")] == acked
            # every front end stopped: shard 2 is free, and holds data
            for s in fronts:
                if s is not held[2]:
                    s.stop()
            wait_until(lambda: not any(x["held"] for x in shard_json(server, sh.base)), 5,
                       what="every shard free")
            p = admin(server, sh.base, "shards", "set-url", "2", "-")
            print(p.stderr.strip())
            assert p.returncode == 5 and "holds data" in p.stderr and \
                "echd moves no data" in p.stderr, p
            assert [x["server"] for x in shard_json(server, sh.base)][2] == pg2.url
        finally:
            sh.drop()


@pg_only(PG)
@timeout(120)
def test_echo_admin_shards_replication_lag(server):
    """echo-admin shards gives each shard its PostgreSQL's own standbys (how many, how many
    synchronous) and their lag, read from that server's pg_stat_replication: shard 2 on a
    second PostgreSQL with a synchronous standby shows it, the shards at home none; the table
    gets a LAG column only then."""
    sh = Shards(server)
    with pgtmp.Cluster() as pg2:
        try:
            pg2.start_replica(synchronous=True)
            first = sh.start()
            wait_until(lambda: len(myself(first)) > 8, 5, what="the first front end active")
            d = shard_json(server, sh.base)
            # no server with a standby yet: no LAG column
            assert [(x["replicas"], x["lag_bytes"]) for x in d] == [(0, None)] * 3, d
            text = admin(server, sh.base, "--no-color", "shards").stdout.splitlines()
            assert "LAG" not in text[0].split(), text
            p = admin(server, sh.base, "shards", "set-url", "2", pg2.url)
            assert p.returncode == 0, p.stderr
            d = shard_json(server, sh.base)
            got = [(x["replicas"], x["sync_replicas"]) for x in d]
            assert got == [(0, 0), (0, 0), (1, 1)], d
            assert d[0]["lag_bytes"] is None and d[0]["lag_ms"] is None, d
            lag = d[2]["lag_bytes"]
            assert isinstance(lag, int) and 0 <= lag < 64 << 20, d
            assert d[2]["lag_ms"] is None or d[2]["lag_ms"] >= 0, d
            text = admin(server, sh.base, "--no-color", "shards").stdout.splitlines()
            print("\n".join(text))
            assert text[0].split()[-2:] == ["SERVER", "LAG"], text
            rows = [ln.split() for ln in text[1:4]]
            assert [r[-1] for r in rows[:2]] == ["-", "-"], text
            assert re.fullmatch(r"\d+(\.\d+)?", rows[2][-2]) and \
                rows[2][-1] in ("B", "KiB", "MiB"), text
        finally:
            sh.drop()
