// common.js - what the Node.js client scenarios share: the command line, the
// checks on ids and error replies, and the run of one named test.
//
//   node FILE.js --port PORT [--tls-ca FILE] [--expect-setinfo] TEST
//
// Exit status 0 when every check of TEST held, 1 on the first that did not
// (its message on stderr), 2 on bad usage.
"use strict";

const assert = require("node:assert/strict");
const path = require("node:path");

const opts = { port: 0, tlsCa: null, expectSetinfo: false, test: null };

function parseArgs(argv) {
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--port" && i + 1 < argv.length) {
      opts.port = Number(argv[++i]);
    } else if (argv[i] === "--tls-ca" && i + 1 < argv.length) {
      opts.tlsCa = argv[++i];
    } else if (argv[i] === "--expect-setinfo") {
      opts.expectSetinfo = true;
    } else if (opts.test === null && !argv[i].startsWith("-")) {
      opts.test = argv[i];
    } else {
      return false;
    }
  }
  return Number.isInteger(opts.port) && opts.port > 0 && opts.test !== null;
}

const ID = /^(\d+)-(\d+)$/;

function idLess(a, b) {
  const x = ID.exec(a);
  const y = ID.exec(b);
  assert.ok(x && y, `ids ${a} ${b}`);
  const xm = BigInt(x[1]);
  const ym = BigInt(y[1]);
  return xm < ym || (xm === ym && BigInt(x[2]) < BigInt(y[2]));
}

// The message of the error reply promise brings; a fulfilled one fails.
async function replyError(promise) {
  try {
    const v = await promise;
    assert.fail("expected an error reply, got " + JSON.stringify(v));
  } catch (e) {
    if (e instanceof assert.AssertionError) {
      throw e;
    }
    return e.message;
  }
}

// "k=v k=v ..." of CLIENT INFO / CLIENT LIST as an object.
function clientFields(line) {
  return Object.fromEntries(line.trim().split(" ").map((kv) => {
    const at = kv.indexOf("=");
    return [kv.slice(0, at), kv.slice(at + 1)];
  }));
}

const INVALID_ID = "ERR Invalid stream ID specified as stream command argument";

// Runs the test named on the command line from tests (name -> async
// function); close() then ends the connections it left open.
function run(name, tests, close) {
  const main = async () => {
    if (!parseArgs(process.argv.slice(2))) {
      console.error(`usage: node ${path.basename(process.argv[1])} --port PORT [--tls-ca FILE] ` +
        "[--expect-setinfo] TEST" +
        `\ntests: ${Object.keys(tests).join(" ")}`);
      return 2;
    }
    const test = tests[opts.test];
    if (test === undefined) {
      console.error(`${name}: unknown test '${opts.test}'; tests: ${Object.keys(tests).join(" ")}`);
      return 2;
    }
    let status = 0;
    try {
      await test();
    } catch (e) {
      console.error(`${name}: ${opts.test}: ${e.stack || e}`);
      status = 1;
    }
    await close();
    return status;
  };
  main().then((status) => {
    process.exitCode = status;
  });
}

module.exports = { opts, ID, idLess, replyError, clientFields, INVALID_ID, run };
