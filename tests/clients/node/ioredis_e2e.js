// ioredis_e2e.js - echd end to end through ioredis, the Node.js client.
//
//   node ioredis_e2e.js --port PORT [--tls-ca FILE] [--expect-setinfo] TEST
//
// Runs one TEST (see TESTS below) against the server on 127.0.0.1:PORT, over
// TLS when --tls-ca names the CA of its certificate (common.js: the exit status).
// tests/integration/19-clients.py runs each test against echd, and the same
// file against redis-server to check the expectations themselves. Keys start
// with the test's name; the runner flushes the server between tests.
"use strict";

const assert = require("node:assert/strict");
const crypto = require("node:crypto");
const fs = require("node:fs");
const Redis = require("ioredis");
const { opts, ID, idLess, replyError, clientFields, INVALID_ID, run } = require("./common");

const open = [];

// A connection that fails rather than retries: a test must not hang on a
// server that went away.
function connect(extra = {}) {
  const o = {
    host: "127.0.0.1",
    port: opts.port,
    connectTimeout: 5000,
    commandTimeout: 10000,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    ...extra,
  };
  if (opts.tlsCa) {
    o.tls = { ca: fs.readFileSync(opts.tlsCa) };
  }
  const r = new Redis(o);
  r.on("error", () => {}); // reported through the commands' promises
  open.push(r);
  return r;
}

async function ready(r) {
  if (r.status !== "ready") {
    await new Promise((resolve, reject) => {
      r.once("ready", resolve);
      r.once("end", () => reject(new Error("connection ended before ready")));
    });
  }
  return r;
}

// Flat [k1, v1, k2, v2, ...] (XINFO in RESP2) as an object.
function fields(flat) {
  const o = {};
  for (let i = 0; i + 1 < flat.length; i += 2) {
    o[flat[i]] = flat[i + 1];
  }
  return o;
}

const TESTS = {
  // The handshake ioredis makes (CLIENT SETINFO, INFO as its ready check,
  // CLIENT SETNAME, SELECT) and what it leaves on the server.
  async connect() {
    const r = await ready(connect({ connectionName: "worker-7", db: 2 }));
    assert.equal(await r.ping(), "PONG");
    assert.equal(await r.client("GETNAME"), "worker-7");
    const id = await r.client("ID");
    const other = await ready(connect());
    const f = clientFields(await other.client("LIST", "ID", String(id)));
    assert.equal(f.name, "worker-7");
    assert.equal(f.db, "2");
    if (opts.expectSetinfo) {
      const version = require("ioredis/package.json").version;
      assert.equal(f["lib-name"], "ioredis");
      assert.equal(f["lib-ver"], version);
    }
    await r.xadd("connect:s", "1-1", "f", "v");
    assert.equal(await r.xlen("connect:s"), 1);
    assert.equal(await other.xlen("connect:s"), 0); // that was database 2
  },

  async streams() {
    const r = await ready(connect());
    const k = "streams:s";
    const id1 = await r.xadd(k, "*", "f", "v1");
    assert.match(id1, ID);
    const id2 = await r.xadd(k, "*", "f", "v2", "g", "w");
    assert.ok(idLess(id1, id2), `${id1} < ${id2}`);
    assert.equal(await r.xlen(k), 2);
    assert.deepEqual(await r.xrange(k, "-", "+"), [
      [id1, ["f", "v1"]],
      [id2, ["f", "v2", "g", "w"]],
    ]);
    assert.deepEqual(await r.xrevrange(k, "+", "-", "COUNT", 1), [[id2, ["f", "v2", "g", "w"]]]);
    assert.equal(await r.xdel(k, id1), 1);
    assert.equal(await r.xdel(k, id1), 0);
    await r.xadd(k, "*", "f", "v3");
    assert.equal(await r.xtrim(k, "MAXLEN", 1), 1);
    assert.equal(await r.xlen(k), 1);
    assert.equal(await r.xadd("streams:none", "NOMKSTREAM", "*", "f", "v"), null);
    assert.equal(await r.exists("streams:none"), 0);
    assert.equal(await r.type(k), "stream");
    const info = fields(await r.xinfo("STREAM", k));
    assert.equal(info.length, 1);
    assert.equal(info["entries-added"], 3);
    assert.equal(info["max-deleted-entry-id"], id1);
  },

  async groups() {
    const r = await ready(connect());
    const k = "groups:q";
    assert.equal(await r.xgroup("CREATE", k, "g", "0", "MKSTREAM"), "OK");
    for (const id of ["1-1", "1-2", "1-3"]) {
      await r.xadd(k, id, "job", id);
    }
    assert.deepEqual(await r.xreadgroup("GROUP", "g", "alice", "COUNT", 2, "STREAMS", k, ">"), [
      [k, [["1-1", ["job", "1-1"]], ["1-2", ["job", "1-2"]]]],
    ]);
    assert.deepEqual(await r.xreadgroup("GROUP", "g", "bob", "STREAMS", k, ">"), [
      [k, [["1-3", ["job", "1-3"]]]],
    ]);
    assert.equal(await r.xreadgroup("GROUP", "g", "bob", "STREAMS", k, ">"), null);
    assert.deepEqual(await r.xpending(k, "g"), [3, "1-1", "1-3", [["alice", "2"], ["bob", "1"]]]);
    assert.equal(await r.xack(k, "g", "1-1"), 1);
    assert.equal(await r.xack(k, "g", "1-1"), 0);
    const rows = await r.xpending(k, "g", "-", "+", 10, "alice");
    assert.equal(rows.length, 1);
    assert.equal(rows[0][0], "1-2");
    assert.equal(rows[0][1], "alice");
    assert.equal(rows[0][3], 1);
    assert.deepEqual(await r.xclaim(k, "g", "bob", 0, "1-2", "JUSTID"), ["1-2"]);
    assert.deepEqual(await r.xautoclaim(k, "g", "carol", 0, "0", "COUNT", 10), [
      "0-0",
      [["1-2", ["job", "1-2"]], ["1-3", ["job", "1-3"]]],
      [],
    ]);
    assert.equal(await r.xdel(k, "1-3"), 1);
    assert.deepEqual(await r.xautoclaim(k, "g", "dave", 0, "0", "JUSTID"), ["0-0", ["1-2"], ["1-3"]]);
    const groups = (await r.xinfo("GROUPS", k)).map(fields);
    assert.equal(groups.length, 1);
    assert.equal(groups[0].name, "g");
    assert.equal(groups[0].pending, 1);
    assert.equal(groups[0]["last-delivered-id"], "1-3");
    const consumers = (await r.xinfo("CONSUMERS", k, "g")).map(fields);
    assert.deepEqual(consumers.map((c) => [c.name, c.pending]),
      [["alice", 0], ["bob", 0], ["carol", 0], ["dave", 1]]);
    assert.equal(await replyError(r.xgroup("CREATE", k, "g", "$")),
      "BUSYGROUP Consumer Group name already exists");
    assert.equal(await r.xgroup("DELCONSUMER", k, "g", "dave"), 1);
    assert.deepEqual(await r.xpending(k, "g"), [0, null, null, null]);
    assert.equal(await r.xgroup("DESTROY", k, "g"), 1);
  },

  // A blocked read on one connection woken by a write on another.
  async blocking() {
    const a = await ready(connect());
    const b = await ready(connect());
    const k = "blocking:q";
    let t0 = Date.now();
    assert.equal(await a.xread("BLOCK", 100, "STREAMS", k, "$"), null);
    assert.ok(Date.now() - t0 >= 90, "XREAD BLOCK 100 returned early");

    await b.xgroup("CREATE", k, "g", "$", "MKSTREAM");
    t0 = Date.now();
    const read = a.xreadgroup("GROUP", "g", "c", "BLOCK", 5000, "STREAMS", k, ">");
    await new Promise((resolve) => setTimeout(resolve, 100));
    const id = await b.xadd(k, "*", "n", "1");
    assert.deepEqual(await read, [[k, [[id, ["n", "1"]]]]]);
    assert.ok(Date.now() - t0 < 4000, "the XADD did not wake the reader");
    const pending = await b.xpending(k, "g", "-", "+", 10);
    assert.deepEqual(pending.map((p) => [p[0], p[1], p[3]]), [[id, "c", 1]]);

    const tail = a.xread("BLOCK", 5000, "STREAMS", k, "$");
    await new Promise((resolve) => setTimeout(resolve, 100));
    const id2 = await b.xadd(k, "*", "n", "2");
    assert.deepEqual(await tail, [[k, [[id2, ["n", "2"]]]]]);
  },

  async pipeline() {
    const r = await ready(connect());
    const k = "pipeline:s";
    const p = r.pipeline();
    for (let i = 0; i < 1000; i++) {
      p.xadd(k, "*", "i", String(i));
    }
    p.xlen(k);
    const res = await p.exec();
    assert.equal(res.length, 1001);
    for (let i = 0; i < 1000; i++) {
      assert.equal(res[i][0], null);
      if (i > 0) {
        assert.ok(idLess(res[i - 1][1], res[i][1]), `${res[i - 1][1]} < ${res[i][1]}`);
      }
    }
    assert.deepEqual(res[1000], [null, 1000]);
    const last = await r.xrevrange(k, "+", "-", "COUNT", 1);
    assert.deepEqual(last, [[res[999][1], ["i", "999"]]]);

    const m = await r.multi().xadd("pipeline:m", "*", "f", "v")
      .xadd("pipeline:m", "bad", "f", "v").xlen("pipeline:m").exec();
    assert.equal(m.length, 3);
    assert.equal(m[0][0], null);
    assert.match(m[0][1], ID);
    assert.ok(m[1][0] instanceof Error);
    assert.equal(m[1][0].message, INVALID_ID);
    assert.deepEqual(m[2], [null, 1]);
  },

  // Values are bytes: NUL, CR LF and high bytes survive, and so does 1 MiB.
  async binary() {
    const r = await ready(connect());
    const k = "binary:s";
    const field = Buffer.from([0x66, 0x00, 0x0d, 0x0a, 0xff]);
    const small = Buffer.from([0x00, 0x80, 0xfe, 0x0d, 0x0a, 0x24, 0x2a]);
    const big = crypto.randomBytes(1 << 20);
    await r.xadd(k, "1-1", field, small, "big", big);
    const got = await r.xrangeBuffer(k, "-", "+");
    assert.equal(got.length, 1);
    assert.ok(got[0][0].equals(Buffer.from("1-1")));
    const fv = got[0][1];
    assert.equal(fv.length, 4);
    assert.ok(fv[0].equals(field), "field");
    assert.ok(fv[1].equals(small), "small value");
    assert.ok(fv[2].equals(Buffer.from("big")));
    assert.equal(fv[3].length, big.length);
    assert.ok(fv[3].equals(big), "1 MiB value");
  },

  // Error replies become rejected promises with the server's words, and the
  // connection goes on working.
  async errors() {
    const r = await ready(connect());
    assert.equal(await replyError(r.xadd("errors:s", "bad", "f", "v")), INVALID_ID);
    assert.equal(await replyError(r.call("XADD", "errors:s", "*", "f")),
      "ERR wrong number of arguments for 'xadd' command");
    const unknown = await replyError(r.call("FOO", "bar"));
    assert.ok(unknown.startsWith("ERR unknown command 'FOO'"), unknown);
    const nogroup = await replyError(r.xreadgroup("GROUP", "g", "c", "STREAMS", "errors:none", ">"));
    assert.ok(nogroup.startsWith("NOGROUP "), nogroup);
    await r.xgroup("CREATE", "errors:s", "g", "$", "MKSTREAM");
    assert.equal(await replyError(r.xack("errors:s", "g", "bad")), INVALID_ID);
    assert.equal(await r.ping(), "PONG");
    assert.equal(await r.xlen("errors:s"), 0);
  },

  // ACL users: ioredis' username/password, a key pattern, a wrong password.
  async auth() {
    const admin = await ready(connect());
    await admin.acl("SETUSER", "io-user", "reset", "on", ">io-pw", "~auth:*", "+@all");
    try {
      const u = await ready(connect({ username: "io-user", password: "io-pw" }));
      assert.equal(await u.acl("WHOAMI"), "io-user");
      assert.match(await u.xadd("auth:s", "*", "f", "v"), ID);
      const denied = await replyError(u.xadd("other:s", "*", "f", "v"));
      assert.ok(denied.startsWith("NOPERM "), denied);
      assert.equal(await admin.exists("other:s"), 0);

      // ioredis reports a refused AUTH as an 'error' event, then closes
      const bad = connect({ username: "io-user", password: "wrong", lazyConnect: true });
      const refused = new Promise((resolve) => bad.once("error", resolve));
      await replyError(bad.connect());
      assert.equal((await refused).message,
        "WRONGPASS invalid username-password pair or user is disabled.");
    } finally {
      await admin.acl("DELUSER", "io-user");
    }
  },

  // Pub/Sub: ioredis' subscriber mode, a pattern, and its 'message' events.
  async pubsub() {
    const sub = await ready(connect());
    const pub = await ready(connect());
    const got = [];
    const both = new Promise((resolve) => {
      const add = (m) => {
        got.push(m);
        if (got.length === 2) {
          resolve();
        }
      };
      sub.on("message", (ch, msg) => add(["message", ch, msg]));
      sub.on("pmessage", (pat, ch, msg) => add(["pmessage", pat, ch, msg]));
    });
    assert.equal(await sub.subscribe("pubsub:news"), 1);
    assert.equal(await sub.psubscribe("pubsub:*"), 2);
    assert.equal(await pub.publish("pubsub:news", "hello"), 2);
    await both;
    assert.deepEqual(got.sort(), [["message", "pubsub:news", "hello"],
      ["pmessage", "pubsub:*", "pubsub:news", "hello"]]);
    assert.deepEqual(await pub.pubsub("NUMSUB", "pubsub:news"), ["pubsub:news", 1]);
    await sub.unsubscribe("pubsub:news");
    await sub.punsubscribe("pubsub:*");
    assert.equal(await pub.publish("pubsub:news", "again"), 0);
  },
};

run("ioredis-e2e", TESTS, async () => {
  for (const r of open) {
    r.disconnect();
  }
});
