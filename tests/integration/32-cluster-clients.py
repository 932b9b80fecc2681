"""The Node.js cluster clients against 3 shards over 4 front ends (issue 36): ioredis'
Redis.Cluster and node-redis' createCluster, unchanged, run tests/clients/node/cluster_e2e.js.

Each works a queue of 24 streams across the shards (XGROUP CREATE MKSTREAM, XADD, XREADGROUP,
XACK, XPENDING) and leaves two entries of each stream pending; the front end of the shard
holding the most of those streams is then killed with SIGKILL, and once the standby has taken
the shard the client, its slot map stale, must follow it: every acknowledged XADD is there,
the pending entries are claimed by another consumer (XAUTOCLAIM) and the queue goes on.
"""

import json
import os
import signal
import subprocess

from echdtest import pg_only, timeout, wait_until
from shardtest import (NODE_DIR, PG, Shards, four_front_ends, myself, node_for, settled,
                       shard_of)


def run_cluster_client(server, client, package):
    node = node_for(package)
    sh = Shards(server)
    p = None
    try:
        fronts, held, standby = four_front_ends(sh)
        ports = ",".join(str(s.port) for s in fronts)
        p = subprocess.Popen([node, os.path.join(NODE_DIR, "cluster_e2e.js"), "--ports", ports,
                              client], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        assert line.startswith("READY "), "%s: %s%s" % (client, line, p.stderr.read())
        ready = json.loads(line[6:])
        assert sorted(ready["primaries"]) == sorted(s.port for s in held.values()), ready
        # the standby is a replica in the client's map too; by default it sends there nothing
        assert set(ready["replicas"]) == {standby.port}, ready
        # the shard with the most streams loses its front end
        counts = [0, 0, 0]
        for k in ready["acked"]:
            counts[shard_of(k)[0]] += 1
        victim_shard = counts.index(max(counts))
        held[victim_shard].kill(signal.SIGKILL)
        survivors = [s for s in fronts if s is not held[victim_shard]]

        def standby_took():
            me = myself(standby)
            return len(me) > 8

        wait_until(standby_took, 5, interval=0.05, what="the standby holding the lost shard")
        wait_until(lambda: settled(survivors, 3), 5, what="every front end sees the new primary")
        out, err = p.communicate("GO\n", timeout=60)
        assert p.returncode == 0 and out.strip() == "DONE", "%s exited %d\n%s%s" % (
            client, p.returncode, out, err)
    finally:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()
        sh.drop()


@pg_only(PG)
@timeout(150)
def test_ioredis_cluster_queue_and_takeover(server):
    run_cluster_client(server, "ioredis", "ioredis")


@pg_only(PG)
@timeout(150)
def test_node_redis_cluster_queue_and_takeover(server):
    run_cluster_client(server, "node-redis", os.path.join("@redis", "client"))
