// cluster_e2e.js - a work queue across the shards of a clustered echd through
// the cluster clients of ioredis (Redis.Cluster) and node-redis (createCluster).
//
//   node cluster_e2e.js --ports P1,P2,... CLIENT      (CLIENT: ioredis | node-redis)
//   node cluster_e2e.js --ports P1,P2,... --commands CLIENT
//
// tests/integration/32-cluster-clients.py starts the front ends on 127.0.0.1 and
// talks to this program over its stdin and stdout:
//   1. it works 24 streams (XGROUP CREATE MKSTREAM, XADD, XREADGROUP, XACK,
//      XPENDING), leaves two entries of each pending, prints "READY" and the
//      acknowledged XADD ids as one JSON line, then waits for a line on stdin;
//   2. meanwhile the runner kill -9s one shard's front end and waits for the
//      standby to take the shard; then it writes "GO";
//   3. the client, its slot map stale, must follow: every acknowledged entry is
//      there (XRANGE), still pending (XPENDING), claimed by another consumer
//      (XAUTOCLAIM), and the queue goes on (XADD, XREADGROUP, XACK). "DONE".
// Exit status 0 when every check held, 1 on the first that did not (stderr).
//
// With --commands (tests/integration/33-cluster-commands.py) it reads one JSON
// line from stdin, a list of {name, key, argv}, sends each argv through the
// client (key: the one node-redis routes by; ioredis finds the keys itself),
// and prints "RESULTS" and a JSON list of {name, error}: error is null when
// the command was answered without an error reply.
"use strict";

const assert = require("node:assert/strict");
const readline = require("node:readline");

const STREAMS = Array.from({ length: 24 }, (_, i) => `job:${i}`);
const GROUP = "workers";
const RETRY_MS = 20000;

function usage() {
  console.error("usage: node cluster_e2e.js --ports P1,P2,... [--commands] ioredis|node-redis");
  process.exit(2);
}

function parseArgs(argv) {
  let ports = null;
  let client = null;
  let commands = false;
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--ports" && i + 1 < argv.length) {
      ports = argv[++i].split(",").map(Number);
    } else if (argv[i] === "--commands") {
      commands = true;
    } else if (client === null && !argv[i].startsWith("-")) {
      client = argv[i];
    } else {
      usage();
    }
  }
  if (!ports || ports.some((p) => !Number.isInteger(p) || p <= 0) ||
      !["ioredis", "node-redis"].includes(client)) {
    usage();
  }
  return { ports, client, commands };
}

// Each client behind one call: cmd(key, args) -> the raw reply (RESP2 for
// ioredis, RESP3 for node-redis).
async function ioredisCluster(ports) {
  const Redis = require("ioredis");
  const c = new Redis.Cluster(ports.map((port) => ({ host: "127.0.0.1", port })), {
    redisOptions: { connectTimeout: 2000, commandTimeout: 5000, maxRetriesPerRequest: 1 },
    clusterRetryStrategy: (times) => (times > 50 ? null : 100),
    retryDelayOnClusterDown: 100,
    retryDelayOnFailover: 100,
    slotsRefreshTimeout: 2000,
  });
  c.on("error", () => {}); // reported through the commands' promises
  await new Promise((resolve, reject) => {
    c.once("ready", resolve);
    c.once("end", () => reject(new Error("cluster ended before ready")));
  });
  return {
    cmd: (key, args) => c.call(...args),
    primaries: () => c.nodes("master").map((n) => n.options.port),
    replicas: () => c.nodes("slave").map((n) => n.options.port),
    close: () => c.disconnect(),
  };
}

async function nodeRedisCluster(ports) {
  const { createCluster } = require("@redis/client");
  const c = createCluster({
    rootNodes: ports.map((port) => ({ socket: { host: "127.0.0.1", port } })),
    // keeps the replicas CLUSTER SLOTS lists (without it node-redis drops them) and
    // connects to them with READONLY: a standby front end must take that
    useReplicas: true,
    // a node that keeps reconnecting makes the client refresh its slot map; a
    // command to it fails at once (no offline queue) and is retried here
    defaults: {
      socket: { connectTimeout: 2000, reconnectStrategy: (n) => (n > 100 ? false : 100) },
      disableOfflineQueue: true,
    },
  });
  c.on("error", () => {});
  await c.connect();
  return {
    cmd: (key, args) => c.sendCommand(key, false, args),
    primaries: () => c.masters.map((n) => n.port),
    replicas: () => c.replicas.map((n) => n.port),
    close: () => c.destroy(),
  };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// fn() until it works: while a shard changes hands the client meets refused
// connections, CLUSTERDOWN and stale MOVED. A failed check is not retried.
async function retrying(what, fn) {
  const t0 = Date.now();
  for (;;) {
    try {
      return await fn();
    } catch (e) {
      if (e instanceof assert.AssertionError || Date.now() - t0 > RETRY_MS) {
        throw new Error(`${what}: ${e.message}`);
      }
      await sleep(100);
    }
  }
}

const ids = (entries) => entries.map((e) => String(e[0]));

// The entries of stream k in an XREADGROUP reply: an array of [key, entries]
// in RESP2 (ioredis), a map of key to entries in RESP3 (node-redis 6's default).
function entriesOf(reply, k) {
  if (Array.isArray(reply)) {
    assert.equal(reply.length, 1);
    assert.equal(String(reply[0][0]), k);
    return reply[0][1];
  }
  const m = reply instanceof Map ? Object.fromEntries(reply) : reply;
  assert.deepEqual(Object.keys(m), [k]);
  return m[k];
}

async function work(c) {
  const acked = {};
  for (const k of STREAMS) {
    assert.equal(String(await c.cmd(k, ["XGROUP", "CREATE", k, GROUP, "0", "MKSTREAM"])), "OK");
    acked[k] = [];
    for (let j = 0; j < 5; j++) {
      acked[k].push(String(await c.cmd(k, ["XADD", k, "*", "job", `${k}-${j}`])));
    }
  }
  for (const k of STREAMS) {
    const got = await c.cmd(k, ["XREADGROUP", "GROUP", GROUP, "w1", "COUNT", "3", "STREAMS", k,
      ">"]);
    assert.deepEqual(ids(entriesOf(got, k)), acked[k].slice(0, 3), k);
    assert.equal(Number(await c.cmd(k, ["XACK", k, GROUP, ...acked[k].slice(0, 3)])), 3, k);
    // the last two are delivered and left pending, for XAUTOCLAIM after the takeover
    const rest = await c.cmd(k, ["XREADGROUP", "GROUP", GROUP, "w1", "STREAMS", k, ">"]);
    assert.deepEqual(ids(entriesOf(rest, k)), acked[k].slice(3), k);
    const pend = await c.cmd(k, ["XPENDING", k, GROUP]);
    assert.equal(Number(pend[0]), 2, k);
    assert.deepEqual(pend[3].map((x) => [String(x[0]), Number(x[1])]), [["w1", 2]], k);
  }
  return acked;
}

async function after(c, acked) {
  for (const k of STREAMS) {
    const all = await retrying(`XRANGE ${k}`, () => c.cmd(k, ["XRANGE", k, "-", "+"]));
    assert.deepEqual(ids(all), acked[k], `every acknowledged XADD of ${k} is there`);
    const pend = await retrying(`XPENDING ${k}`, () => c.cmd(k, ["XPENDING", k, GROUP]));
    assert.equal(Number(pend[0]), 2, k);
    const claim = await retrying(`XAUTOCLAIM ${k}`,
      () => c.cmd(k, ["XAUTOCLAIM", k, GROUP, "w2", "0", "0-0"]));
    assert.equal(String(claim[0]), "0-0", k);
    assert.deepEqual(ids(claim[1]), acked[k].slice(3), k);
    assert.equal(Number(await retrying(`XACK ${k}`,
      () => c.cmd(k, ["XACK", k, GROUP, ...acked[k].slice(3)]))), 2, k);
    const id = String(await retrying(`XADD ${k}`,
      () => c.cmd(k, ["XADD", k, "*", "job", "after"])));
    const got = await retrying(`XREADGROUP ${k}`,
      () => c.cmd(k, ["XREADGROUP", "GROUP", GROUP, "w2", "STREAMS", k, ">"]));
    assert.deepEqual(ids(entriesOf(got, k)), [id], k);
    assert.equal(Number(await c.cmd(k, ["XACK", k, GROUP, id])), 1, k);
    const left = await c.cmd(k, ["XPENDING", k, GROUP]);
    assert.equal(Number(left[0]), 0, k);
  }
}

// Each command of the list through c: [{name, error}], error null when answered.
async function runCommands(c, list) {
  const out = [];
  for (const { name, key, argv } of list) {
    try {
      await c.cmd(key, argv);
      out.push({ name, error: null });
    } catch (e) {
      out.push({ name, error: String(e.message || e) });
    }
  }
  return out;
}

async function main() {
  const { ports, client, commands } = parseArgs(process.argv.slice(2));
  const c = await (client === "ioredis" ? ioredisCluster(ports) : nodeRedisCluster(ports));
  const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  try {
    if (commands) {
      const list = JSON.parse((await lines.next()).value);
      console.log("RESULTS " + JSON.stringify(await runCommands(c, list)));
      return 0;
    }
    const acked = await work(c);
    console.log("READY " + JSON.stringify({ primaries: c.primaries(), replicas: c.replicas(),
      acked }));
    const go = await lines.next();
    assert.equal(go.value, "GO", "the runner's go-ahead");
    await after(c, acked);
    console.log("DONE");
    return 0;
  } catch (e) {
    console.error(`cluster_e2e ${client}: ${e.stack || e}`);
    return 1;
  } finally {
    await c.close();
  }
}

main().then((status) => {
  process.exitCode = status;
  process.exit(status); // readline holds stdin open
});
