// node_redis_e2e.js - echd end to end through node-redis (@redis/client), in RESP3.
//
//   node node_redis_e2e.js --port PORT [--tls-ca FILE] [--expect-setinfo] TEST
//
// node-redis speaks RESP3 when asked (it sends HELLO 3 on connect), so this is
// where a real client library parses echd's RESP3 replies: maps for XINFO and
// for XREAD/XREADGROUP, verbatim strings, nulls. Commands go through
// sendCommand(), which hands back the parsed RESP3 reply untransformed, and
// through a few of the typed commands. Runs one TEST (see TESTS below) against
// 127.0.0.1:PORT (common.js: the exit status); tests/integration/19-clients.py
// runs it against echd and against redis-server.
"use strict";

const assert = require("node:assert/strict");
const fs = require("node:fs");
const { createClient } = require("@redis/client");
const { opts, ID, replyError, clientFields, INVALID_ID, run } = require("./common");

const open = [];

// RESP3, no reconnection: a test must not hang on a server that went away.
async function connect() {
  const socket = {
    host: "127.0.0.1",
    port: opts.port,
    connectTimeout: 5000,
    reconnectStrategy: false,
  };
  if (opts.tlsCa) {
    Object.assign(socket, { tls: true, ca: fs.readFileSync(opts.tlsCa) });
  }
  const c = createClient({ socket, RESP: 3 });
  c.on("error", () => {}); // reported through the commands' promises
  open.push(c);
  await c.connect();
  return c;
}

// A RESP3 map as node-redis hands it over (an object without prototype) as
// a plain object, so that deepEqual compares contents only.
function plain(v) {
  if (Array.isArray(v)) {
    return v.map(plain);
  }
  if (v !== null && typeof v === "object") {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]));
  }
  return v;
}

const TESTS = {
  // HELLO 3 on connect; CLIENT INFO (a verbatim string in RESP3) shows it.
  async handshake() {
    const c = await connect();
    assert.equal(await c.ping(), "PONG");
    const info = await c.sendCommand(["CLIENT", "INFO"]);
    assert.equal(typeof info, "string");
    assert.ok(info.endsWith("\n"), info);
    const f = clientFields(info);
    assert.equal(f.resp, "3");
    if (opts.expectSetinfo) {
      assert.equal(f["lib-name"], "node-redis");
      assert.ok(f["lib-ver"].length > 0);
    }
    const hello = plain(await c.sendCommand(["HELLO", "3"]));
    assert.equal(hello.proto, 3);
    assert.equal(hello.server, "redis");
    assert.equal(typeof hello.id, "number");
    assert.equal(await c.sendCommand(["XADD", "handshake:none", "NOMKSTREAM", "*", "f", "v"]), null);
  },

  // Reply shapes in RESP3: maps where Redis 7.4 sends maps.
  async maps() {
    const c = await connect();
    const k = "maps:s";
    assert.equal(await c.xAdd(k, "1-1", { f: "v1" }), "1-1");
    assert.equal(await c.xAdd(k, "1-2", { f: "v2", g: "w" }), "1-2");
    const info = plain(await c.sendCommand(["XINFO", "STREAM", k]));
    // Redis 7.4's fields, and Redis 8.6's six of idempotent producers where the
    // server has them (echd; not the Redis 7.0 this also runs against)
    const base = ["entries-added", "first-entry", "groups", "last-entry", "last-generated-id",
      "length", "max-deleted-entry-id", "radix-tree-keys", "radix-tree-nodes",
      "recorded-first-entry-id"];
    const idmp = ["idmp-duration", "idmp-maxsize", "iids-added", "iids-duplicates",
      "iids-tracked", "pids-tracked"];
    const keys = Object.keys(info).sort();
    assert.deepEqual(keys, ("pids-tracked" in info ? base.concat(idmp) : base).sort());
    assert.equal(info.length, 2);
    assert.equal(info["last-generated-id"], "1-2");
    assert.deepEqual(info["first-entry"], ["1-1", ["f", "v1"]]);
    assert.deepEqual(info["last-entry"], ["1-2", ["f", "v2", "g", "w"]]);
    // the typed command turns the same map into its own shape
    const typed = await c.xInfoStream(k);
    assert.equal(typed.length, 2);
    assert.deepEqual(plain(typed["last-entry"]), { id: "1-2", message: { f: "v2", g: "w" } });

    // XREAD and XREADGROUP answer a map of key -> entries in RESP3
    assert.deepEqual(plain(await c.sendCommand(["XREAD", "STREAMS", k, "1-1"])),
      { [k]: [["1-2", ["f", "v2", "g", "w"]]] });
    assert.equal(await c.sendCommand(["XREAD", "STREAMS", k, "1-2"]), null);
    assert.equal(await c.sendCommand(["XGROUP", "CREATE", k, "g", "0"]), "OK");
    assert.deepEqual(plain(await c.sendCommand(["XREADGROUP", "GROUP", "g", "alice", "COUNT", "1",
      "STREAMS", k, ">"])), { [k]: [["1-1", ["f", "v1"]]] });
    assert.deepEqual(plain(await c.sendCommand(["XPENDING", k, "g"])),
      [1, "1-1", "1-1", [["alice", "1"]]]);
    const groups = plain(await c.sendCommand(["XINFO", "GROUPS", k]));
    assert.equal(groups.length, 1);
    assert.equal(groups[0].name, "g");
    assert.equal(groups[0].pending, 1);
    assert.equal(groups[0]["last-delivered-id"], "1-1");
    assert.equal(groups[0]["entries-read"], 1);
    assert.equal(groups[0].lag, 1);
    const consumers = plain(await c.sendCommand(["XINFO", "CONSUMERS", k, "g"]));
    assert.deepEqual(consumers.map((x) => [x.name, x.pending]), [["alice", 1]]);
    assert.deepEqual(plain(await c.sendCommand(["XAUTOCLAIM", k, "g", "bob", "0", "0"])),
      ["0-0", [["1-1", ["f", "v1"]]], []]);
    const full = plain(await c.sendCommand(["XINFO", "STREAM", k, "FULL"]));
    assert.equal(full.groups.length, 1);
    assert.deepEqual(full.groups[0].consumers.map((x) => x.name), ["alice", "bob"]);
    assert.equal(full.groups[0].pending[0][1], "bob");
  },

  // A blocked XREADGROUP on one connection woken by an XADD on another.
  async blocking() {
    const a = await connect();
    const b = await connect();
    const k = "blocking:q";
    assert.equal(await b.sendCommand(["XGROUP", "CREATE", k, "g", "$", "MKSTREAM"]), "OK");
    const t0 = Date.now();
    const read = a.sendCommand(["XREADGROUP", "GROUP", "g", "c", "BLOCK", "5000", "STREAMS", k, ">"]);
    await new Promise((resolve) => setTimeout(resolve, 100));
    const id = await b.xAdd(k, "*", { n: "1" });
    assert.match(id, ID);
    assert.deepEqual(plain(await read), { [k]: [[id, ["n", "1"]]] });
    assert.ok(Date.now() - t0 < 4000, "the XADD did not wake the reader");
    assert.equal(await a.sendCommand(["XREAD", "BLOCK", "100", "STREAMS", "blocking:none", "$"]),
      null);
  },

  // XNACK (Redis 8.8) and XREADGROUP CLAIM (8.4) through the typed commands,
  // unchanged: released entries, then the claimed entry's extra fields.
  async xnack() {
    const c = await connect();
    const k = "xnack:q";
    assert.equal(await c.xAdd(k, "1-1", { f: "v1" }), "1-1");
    assert.equal(await c.xAdd(k, "1-2", { f: "v2" }), "1-2");
    assert.equal(await c.xGroupCreate(k, "g", "0"), "OK");
    await c.xReadGroup("g", "alice", { key: k, id: ">" });
    assert.equal(await c.xNack(k, "g", "FAIL", ["1-1", "1-2"]), 2);
    assert.equal(await c.xNack(k, "g", "SILENT", "1-2", { RETRYCOUNT: 5 }), 1);
    assert.equal(await c.xNack(k, "g", "FAIL", "9-9"), 0);
    const pending = await c.xPendingRange(k, "g", "-", "+", 10);
    assert.deepEqual(pending.map((p) => [p.id, p.consumer, p.millisecondsSinceLastDelivery,
      p.deliveriesCounter]), [["1-1", "", -1, 1], ["1-2", "", -1, 5]]);
    await c.xAdd(k, "1-3", { f: "v3" });
    const got = plain(await c.xReadGroup("g", "bob", { key: k, id: ">" }, { CLAIM: 60000 }));
    // A released entry has no delivery time: Redis counts its idle time from 0, the
    // epoch (so about now in ms); a new entry of a CLAIM read comes with 0 and 0.
    const now = Date.now();
    for (const m of got[0].messages.slice(0, 2)) {
      assert.ok(Math.abs(m.millisElapsedFromDelivery - now) < 60000, m.millisElapsedFromDelivery);
      m.millisElapsedFromDelivery = "epoch";
    }
    assert.deepEqual(got, [{ name: k, messages: [
      { id: "1-1", message: { f: "v1" }, millisElapsedFromDelivery: "epoch", deliveriesCounter: 1 },
      { id: "1-2", message: { f: "v2" }, millisElapsedFromDelivery: "epoch", deliveriesCounter: 5 },
      { id: "1-3", message: { f: "v3" }, millisElapsedFromDelivery: 0, deliveriesCounter: 0 }] }]);
    const after = await c.xPendingRange(k, "g", "-", "+", 10);
    assert.deepEqual(after.map((p) => [p.id, p.consumer, p.deliveriesCounter]),
      [["1-1", "bob", 2], ["1-2", "bob", 6], ["1-3", "bob", 1]]);
  },

  // Idempotent producers (Redis 8.6/8.8) through the typed commands: a re-sent XADD with
  // the same producer and message id gets the first id back and adds nothing.
  async idmp() {
    const c = await connect();
    const k = "idmp:s";
    assert.equal(await c.xCfgSet(k, { IDMP_DURATION: 60, IDMP_MAXSIZE: 10 }).then(
      () => "OK", (e) => e.message), "ERR no such key");
    const first = await c.xAdd(k, "*", { job: "1" }, { IDMP: { pid: "p1", iid: "m1" } });
    assert.match(first, ID);
    assert.equal(await c.xAdd(k, "*", { job: "1" }, { IDMP: { pid: "p1", iid: "m1" } }), first);
    const auto = await c.xAdd(k, "*", { job: "2" }, { IDMPAUTO: { pid: "p2" } });
    assert.equal(await c.xAdd(k, "*", { job: "2" }, { IDMPAUTO: { pid: "p2" } }), auto);
    assert.notEqual(auto, first);
    assert.equal(await c.xCfgSet(k, { IDMP_DURATION: 60, IDMP_MAXSIZE: 10 }), "OK");
    assert.equal(await c.xLen(k), 2);
    const info = plain(await c.sendCommand(["XINFO", "STREAM", k]));
    assert.equal(info["idmp-duration"], 60);
    assert.equal(info["idmp-maxsize"], 10);
    // a changed setting drops the records; the lifetime counters stay
    assert.equal(info["iids-duplicates"], 2);
    assert.equal(info["iids-added"], 2);
    assert.equal(info["pids-tracked"], 0);
    assert.notEqual(await c.xAdd(k, "*", { job: "1" }, { IDMP: { pid: "p1", iid: "m1" } }),
      first);
  },

  // MULTI/EXEC and a pipeline through the client's own batching.
  async pipeline() {
    const c = await connect();
    const k = "pipeline:s";
    const m = c.multi();
    for (let i = 1; i <= 500; i++) {
      m.xAdd(k, `1-${i}`, { i: String(i) });
    }
    m.xLen(k);
    const res = await m.exec();
    assert.equal(res.length, 501);
    assert.deepEqual(res.slice(0, 3), ["1-1", "1-2", "1-3"]);
    assert.equal(res[500], 500);
    const p = c.multi();
    p.xAdd(k, "2-1", { f: "v" });
    p.xLen(k);
    assert.deepEqual(await p.execAsPipeline(), ["2-1", 501]);
    assert.equal(await replyError(c.sendCommand(["XADD", k, "bad", "f", "v"])), INVALID_ID);
    assert.equal(await replyError(c.sendCommand(["XADD", k, "*", "f"])),
      "ERR wrong number of arguments for 'xadd' command");
    assert.equal(await c.xLen(k), 501);
  },
};

// Redis 8.2's deletion policies through node-redis' own commands (xAckDel,
// xDelEx, and the policy option of xAdd's TRIM and of xTrim), unchanged.
TESTS.deletion = async function deletion() {
  const c = await connect();
  const k = "deletion:s";
  for (let i = 1; i <= 4; i++) {
    await c.xAdd(k, `${i}-1`, { f: "v" });
  }
  await c.xGroupCreate(k, "g1", "0");
  await c.xGroupCreate(k, "g2", "0");
  await c.xReadGroup("g1", "c", { key: k, id: ">" }, { COUNT: 3 }); // 1 2 3
  await c.xReadGroup("g2", "c", { key: k, id: ">" }, { COUNT: 1 }); // 1
  // g2 has not had 2-1: ACKED keeps it; 1-1 is still pending in g2
  assert.deepEqual(await c.xAckDel(k, "g1", ["1-1", "2-1", "9-9"], "ACKED"), [2, 2, -1]);
  // DELREF deletes 1-1 and drops g2's record of it
  assert.deepEqual(await c.xDelEx(k, "1-1", "DELREF"), [1]);
  assert.equal((await c.xPending(k, "g2")).pending, 0);
  assert.deepEqual(await c.xDelEx(k, ["2-1", "8-8"]), [1, -1]);
  // trimming: 3-1 is pending in g1, so ACKED keeps it; DELREF does not
  assert.equal(await c.xTrim(k, "MAXLEN", 0, { policy: "ACKED" }), 0);
  assert.equal(await c.xAdd(k, "5-1", { f: "v" }, {
    TRIM: { strategy: "MAXLEN", threshold: 1, policy: "DELREF" },
  }), "5-1");
  assert.equal(await c.xLen(k), 1);
  assert.equal((await c.xPending(k, "g1")).pending, 0);
};

run("node-redis-e2e", TESTS, async () => {
  for (const c of open) {
    c.destroy();
  }
});
