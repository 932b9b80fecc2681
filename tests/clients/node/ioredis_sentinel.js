// ioredis_sentinel.js - ioredis' sentinel mode against echd's front ends.
//
//   node ioredis_sentinel.js NAME HOST:PORT [HOST:PORT ...]
//
// Connects with the `sentinels` option (the front ends) and `name`, as an
// application would, adds an entry to the stream ha:ioredis and prints one
// line of JSON: the port of the front end it was sent to and the stream's
// length. tests/integration/27-ha.py runs it. Exit status 1 on any error.
"use strict";

const Redis = require("ioredis");

async function main() {
  const [name, ...addrs] = process.argv.slice(2);
  const sentinels = addrs.map((a) => {
    const i = a.lastIndexOf(":");
    return { host: a.slice(0, i), port: Number(a.slice(i + 1)) };
  });
  const r = new Redis({
    sentinels,
    name,
    connectTimeout: 5000,
    commandTimeout: 10000,
    sentinelRetryStrategy: () => null,
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
  });
  r.on("error", () => {}); // reported through the commands' promises
  try {
    await r.xadd("ha:ioredis", "*", "f", "v");
    const len = await r.xlen("ha:ioredis");
    console.log(JSON.stringify({ port: r.stream.remotePort, len }));
  } finally {
    r.disconnect();
  }
}

main().catch((e) => {
  console.error(String(e && e.stack ? e.stack : e));
  process.exit(1);
});
