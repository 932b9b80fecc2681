"""Every stream command with keys, through the cluster (issue 36), generated from the command
table: the list is what COMMAND answers (each command and subcommand in the @stream category
whose key specs name a key), and each needs an example in 28-keyspecs.py's EXAMPLES (a new
stream command without one fails here as it fails there).

Over 3 shards and 3 front ends, each example runs with its keys under one hash tag of its own,
the tags spread over the three shards:
- sent to a front end that does not hold the slot, it answers `MOVED <slot> <host>:<port>` of
  the one that does (the slot is the one the key specs find);
- through redis-py's RedisCluster (which picks the node from COMMAND's key positions and
  follows MOVED) it runs without an error on the shard's front end;
- and so it does through ioredis' Redis.Cluster (which finds the keys from its own command
  table, and for a command it does not know asks any node and follows MOVED) and node-redis'
  createCluster (given the key), run by tests/clients/node/cluster_e2e.js --commands.
"""

import importlib.util
import json
import os
import subprocess

import redis.crc

from echdtest import pg_only, timeout, wait_until
from shardtest import NODE_DIR, PG, RANGES, Shards, cluster_client, held_by, node_for, settled

HERE = os.path.dirname(os.path.abspath(__file__))


def keyspecs_module():
    """28-keyspecs.py, whose EXAMPLES give one real invocation per command with keys."""
    spec = importlib.util.spec_from_file_location(
        "keyspecs28", os.path.join(HERE, "28-keyspecs.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def tag_in_shard(i, n):
    """The n-th hash tag whose slot is in shard i of 3."""
    found = 0
    for t in range(100000):
        slot = redis.crc.key_slot(("{t%d}" % t).encode())
        if RANGES[i][0] <= slot <= RANGES[i][1]:
            if found == n:
                return "t%d" % t, slot
            found += 1
    raise AssertionError("no tag")


def tagged(argv, tag):
    """The example with its keys (k1, k2, k9: every key of EXAMPLES is k<digit>) under tag."""
    return ["{%s}%s" % (tag, a) if len(a) == 2 and a[0] == "k" and a[1].isdigit() else a
            for a in argv]


def setup(rc, tag):
    """28-keyspecs' setup_keys under one tag: streams k1..k3 with two entries, group g whose
    consumer c has both pending; k3 expires in an hour."""
    for k in ("k1", "k2", "k3"):
        k = "{%s}%s" % (tag, k)
        rc.execute_command("XADD", k, "1-1", "f", "v")
        rc.execute_command("XADD", k, "2-1", "f", "v")
        rc.execute_command("XGROUP", "CREATE", k, "g", "0")
        rc.execute_command("XREADGROUP", "GROUP", "g", "c", "STREAMS", k, ">")
    rc.execute_command("EXPIRE", "{%s}k3" % tag, "3600")


def plan(fronts):
    """[(name, shard, tag, slot, argv)]: every stream command with keys (COMMAND's list), its
    example from 28-keyspecs.py under a tag of its own, the tags spread over the 3 shards."""
    ks = keyspecs_module()
    names = ks.commands_with_keys(fronts[0].raw(), "@stream")
    assert "xadd" in names and "xinfo|stream" in names and "xreadgroup" in names, names
    missing = sorted(set(names) - set(ks.EXAMPLES))
    assert not missing, "stream commands with keys and no example in 28-keyspecs.py's " \
        "EXAMPLES: %s" % missing
    out = []
    for n, name in enumerate(sorted(names)):
        shard = n % 3
        tag, slot = tag_in_shard(shard, n // 3)
        out.append((name, shard, tag, slot, tagged(ks.EXAMPLES[name][0], tag)))
    return out


def three_shards(sh):
    fronts = [sh.start() for _ in range(3)]
    wait_until(lambda: settled(fronts, 3), 5, what="every front end sees 3 primaries")
    return fronts


@pg_only(PG)
@timeout(240)
def test_every_stream_command_through_the_cluster(server):
    sh = Shards(server)
    try:
        fronts = three_shards(sh)
        held = held_by(fronts)
        rc = cluster_client(fronts)
        shards_seen = set()
        for name, shard, tag, slot, argv in plan(fronts):
            setup(rc, tag)
            owner = held[shard]
            other = held[(shard + 1) % 3]
            # a front end that does not hold the slot sends the client to the one that does
            assert other.raw().err(*argv) == "MOVED %d 127.0.0.1:%d" % (slot, owner.port), (
                name, argv)
            # through the cluster client it runs, on the shard's front end
            r = rc.execute_command(*argv)
            assert not isinstance(r, Exception), (name, argv, r)
            shards_seen.add(shard)
        assert shards_seen == {0, 1, 2}
        rc.close()
    finally:
        sh.drop()


def run_node_commands(server, client, package):
    """Every example through a Node.js cluster client: each is answered without an error."""
    node = node_for(package)
    sh = Shards(server)
    try:
        fronts = three_shards(sh)
        rc = cluster_client(fronts)
        todo = plan(fronts)
        for _name, _shard, tag, _slot, _argv in todo:
            setup(rc, tag)
        rc.close()
        cmds = [{"name": name, "key": "{%s}k1" % tag, "argv": argv}
                for name, _shard, tag, _slot, argv in todo]
        p = subprocess.run([node, os.path.join(NODE_DIR, "cluster_e2e.js"), "--ports",
                            ",".join(str(s.port) for s in fronts), "--commands", client],
                           input=json.dumps(cmds) + "\n", capture_output=True, text=True,
                           timeout=120)
        line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULTS ")), None)
        assert p.returncode == 0 and line, "%s exited %d\n%s%s" % (client, p.returncode,
                                                                   p.stdout, p.stderr)
        got = json.loads(line[len("RESULTS "):])
        assert [r["name"] for r in got] == [c["name"] for c in cmds]
        failed = [(r["name"], r["error"]) for r in got if r["error"] is not None]
        assert not failed, "%s: %s" % (client, failed)
    finally:
        sh.drop()


@pg_only(PG)
@timeout(150)
def test_every_stream_command_through_ioredis(server):
    run_node_commands(server, "ioredis", "ioredis")


@pg_only(PG)
@timeout(150)
def test_every_stream_command_through_node_redis(server):
    run_node_commands(server, "node-redis", os.path.join("@redis", "client"))
