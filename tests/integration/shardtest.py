"""What the modules on several shards share (31-shards.py, 32-cluster-clients.py): a cluster of
front ends over one base schema on the pass' PostgreSQL, what each front end says of the slots,
and redis-py's RedisCluster with the workaround Debian's 4.3 needs."""

import os
import shutil
import time
import uuid

import redis
import redis.cluster
import redis.crc
import redis.exceptions

import echdtest
from echdtest import RespError, wait_until

PG = "several shards need the postgres engine"
READONLY = "READONLY You can't write against a standby echd."
# the cut of cluster.c: shard i from i * 16384 / 3
RANGES = [(i * 16384 // 3, (i + 1) * 16384 // 3 - 1) for i in range(3)]


def shard_of(key):
    """The shard of 3 holding key (no hash tags in the keys used here)."""
    slot = redis.crc.key_slot(key.encode())  # 30-cluster.py checks it against echd's
    return next(i for i, (lo, hi) in enumerate(RANGES) if lo <= slot <= hi), slot


class Shards:
    """Front ends of one cluster: one base schema on the pass' PostgreSQL."""

    def __init__(self, server, nshards=3):
        self.server = server
        self.nshards = nshards
        self.base = "sh_%s" % uuid.uuid4().hex[:8]
        self.fronts = []

    def args(self, nshards=None):
        return ["--storage", "postgres", "--storage-url", echdtest.PG_URL,
                "--storage-pg-schema", self.base, "--cluster-enabled", "yes",
                "--cluster-shards", str(nshards or self.nshards), "--ha-retry-ms", "100"]

    def start(self):
        s = self.server.spawn(*self.args())
        self.fronts.append(s)
        return s

    def drop(self):
        for name in [self.base] + ["%s_s%d" % (self.base, i) for i in range(self.nshards)]:
            echdtest.pg_drop_schema(name)


def slots_of(s):
    """CLUSTER SLOTS of front end s as {(first, last): port of the primary}."""
    return {(r[0], r[1]): r[2][1] for r in s.raw(timeout=5).call("CLUSTER", "SLOTS")}


def text_of(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def nodes_of(s):
    """CLUSTER NODES of front end s, each line split."""
    return [ln.split() for ln in text_of(s.raw(timeout=5).call("CLUSTER", "NODES")).splitlines()]


def replicas_of(s):
    """What front end s lists as replicas: {(first, last): [(port, id), ...]} from CLUSTER
    SLOTS, the nodes after each range's primary."""
    return {(r[0], r[1]): [(n[1], text_of(n[2])) for n in r[3:]]
            for r in s.raw(timeout=5).call("CLUSTER", "SLOTS")}


def four_front_ends(sh):
    """3 shards over 4 front ends of sh, once every one sees 3 primaries and lists the standby
    (its first heartbeat may come after a primary's last poll): the front ends, {shard index:
    front end}, and the standby."""
    fronts = [sh.start() for _ in range(4)]
    wait_until(lambda: settled(fronts, 3), 5, what="every front end sees 3 primaries")
    held = held_by(fronts)
    standby = next(s for s in fronts if s not in held.values())
    wait_until(lambda: all(len(nodes_of(s)) == 4 for s in fronts), 5,
               what="every front end listing the standby")
    return fronts, held, standby


def cinfo(s):
    text = s.raw(timeout=5).call("CLUSTER", "INFO")
    text = text.decode() if isinstance(text, bytes) else str(text)
    return dict(ln.split(":", 1) for ln in text.split("\r\n") if ":" in ln)


def myself(s):
    """The myself line of CLUSTER NODES, split."""
    text = s.raw(timeout=5).call("CLUSTER", "NODES")
    text = text.decode() if isinstance(text, bytes) else str(text)
    return next(ln.split() for ln in text.splitlines() if "myself" in ln)


def held_by(fronts):
    """{shard index: front end} as each front end's own CLUSTER NODES line says."""
    out = {}
    for s in fronts:
        me = myself(s)
        if len(me) > 8:
            lo = int(me[8].split("-")[0])
            out[next(i for i, r in enumerate(RANGES) if r[0] == lo)] = s
    return out


def settled(fronts, nprimaries):
    """Every front end sees the same nprimaries primaries."""
    try:
        seen = [slots_of(s) for s in fronts]
    except (OSError, RespError):
        return False
    return all(v == seen[0] and len(v) == nprimaries for v in seen)


class _Shared:
    """redis-py 4.3 (Debian's) deep-copies its connection options at each reinitialize after
    a lost node, its own bound on_connect among them, and fails ("cannot pickle
    '_thread.lock' object"; 4.4 no longer copies it): the callback is kept as it is."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *a, **kw):
        return self.fn(*a, **kw)

    def __deepcopy__(self, memo):
        return self


def cluster_client(fronts):
    rc = redis.cluster.RedisCluster(
        startup_nodes=[redis.cluster.ClusterNode("127.0.0.1", s.port) for s in fronts],
        decode_responses=True, socket_timeout=5)
    kw = rc.nodes_manager.connection_kwargs
    if "redis_connect_func" in kw:
        kw["redis_connect_func"] = _Shared(kw["redis_connect_func"])
    return rc


def fill_queue(rc, streams, n=5):
    """A group "workers" on each stream and n XADDs: {stream: the ids acknowledged}."""
    acked = {}
    for k in streams:
        rc.xgroup_create(k, "workers", id="0", mkstream=True)
        acked[k] = [rc.xadd(k, {"job": "%s-%d" % (k, j)}) for j in range(n)]
    return acked


def retrying(fn, what, limit=15.0):
    """fn() until it works: a cluster client meets refused connections and CLUSTERDOWN while a
    shard changes hands."""
    t0 = time.monotonic()
    while True:
        try:
            return fn()
        except (redis.exceptions.ConnectionError, redis.exceptions.ClusterDownError,
                redis.exceptions.TimeoutError, redis.exceptions.ClusterError) as e:
            if time.monotonic() - t0 > limit:
                raise AssertionError("%s: still failing after %.0f s: %r" % (what, limit, e))
            time.sleep(0.1)


NODE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "clients",
                        "node")


def node_for(package):
    """node, once it and the client package are there (tools/echd-dev deps installs both)."""
    node = shutil.which("node")
    assert node, "node is missing: tools/echd-dev deps installs it"
    assert os.path.isdir(os.path.join(NODE_DIR, "node_modules", package)), (
        "%s is missing in %s: tools/echd-dev deps runs npm ci there" % (package, NODE_DIR))
    return node
