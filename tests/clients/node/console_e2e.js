// console_e2e.js - the web console in a real browser: Debian's Chromium
// (/usr/bin/chromium) driven by playwright-core, which downloads no browser.
// Run by tests/integration/26-console.py against a live echd it has filled.
//
//   node console_e2e.js --url URL --out DIR --stream S --group G [--user U --pass P]
//
// It opens the console, sees the stream and the group, opens the group,
// pages through its pending entries, opens one entry, ACKs an entry from the
// page, and checks the charts have points; it saves a screenshot of each
// view into DIR. On success it prints one JSON line: what it saw and the id
// it acknowledged (the caller checks XPENDING over RESP). Exit status 1 and
// the message on stderr on the first failed check. With --probe 1 it checks
// what the page's Content-Security-Policy refuses instead (probe() below).
"use strict";

const assert = require("node:assert/strict");
const http = require("node:http");
const path = require("node:path");
const { chromium } = require("playwright-core");

const opts = {};
for (let i = 2; i + 1 < process.argv.length; i += 2) {
  opts[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
}

// --probe: what the console's CSP refuses, on a server that needs no login (a
// cross-origin frame gets no HTTP credentials): a script injected into the page
// does not run (and the browser reports it), and a page of another origin that
// frames the console gets none of it.
async function probe(browser) {
  const seen = {};
  const ctx = await browser.newContext();
  const page = await ctx.newPage();
  const reports = [];
  page.on("console", (m) => { if (m.type() === "error") reports.push(m.text()); });
  await page.goto(opts.url);
  await page.waitForSelector("#streams");
  seen.injected = await page.evaluate(() => {
    const s = document.createElement("script");
    s.textContent = "window.injected = 'ran';";
    document.body.appendChild(s);
    return window.injected === undefined ? null : window.injected;
  });
  await page.waitForTimeout(300);
  seen.injectionReported = reports.some((r) => r.includes("Content Security Policy"));
  // the framing page comes from another origin on loopback (a port of its own)
  const framer = http.createServer((req, res) => {
    res.writeHead(200, { "Content-Type": "text/html" });
    res.end(`<iframe id="f" src="${opts.url}" width="800" height="600"></iframe>`);
  });
  await new Promise((ok) => framer.listen(0, "127.0.0.1", ok));
  await page.goto(`http://127.0.0.1:${framer.address().port}/`);
  await page.waitForTimeout(3000);
  framer.close();
  const child = page.frames().find((f) => f !== page.mainFrame());
  seen.frameUrl = child ? child.url() : null;
  seen.framed = false;
  if (child) {
    try {
      seen.framed = (await child.$("#streams")) !== null;
    } catch (e) {
      seen.framed = false; // an error page of the browser's own
    }
  }
  await ctx.close();
  return seen;
}

async function main() {
  const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  if (opts.probe) {
    try {
      process.stdout.write(JSON.stringify(await probe(browser)) + "\n");
    } finally {
      await browser.close();
    }
    return;
  }
  const errors = [];
  const seen = {};
  try {
    const ctx = await browser.newContext({
      viewport: { width: 1280, height: 860 },
      httpCredentials: opts.user ? { username: opts.user, password: opts.pass } : undefined,
    });
    const page = await ctx.newPage();
    page.on("pageerror", (e) => errors.push("page error: " + e.message));
    page.on("console", (m) => { if (m.type() === "error") errors.push("console: " + m.text()); });
    // nothing may come from anywhere but echd
    const origin = new URL(opts.url).origin;
    page.on("request", (r) => {
      if (!r.url().startsWith(origin)) errors.push("fetched from outside: " + r.url());
    });
    const shot = (name) => page.screenshot({ path: path.join(opts.out, name + ".png"), fullPage: true });

    // server and streams
    await page.goto(opts.url);
    await page.waitForSelector("#streams");
    seen.streams = await page.$$eval("#streams tbody tr td:first-child", (tds) => tds.map((t) => t.textContent));
    assert.ok(seen.streams.includes(opts.stream), "stream listed: " + seen.streams);
    seen.cards = await page.$$eval(".card .k", (ks) => ks.map((k) => k.textContent));
    await shot("1-server");

    // the stream: groups and charts (the sampler runs every second in the test)
    await page.click(`#streams a:text-is("${opts.stream}")`);
    await page.waitForSelector("#groups");
    seen.groups = await page.$$eval("#groups tbody tr td:first-child", (tds) => tds.map((t) => t.textContent));
    assert.ok(seen.groups.includes(opts.group), "group listed: " + seen.groups);
    await page.waitForFunction(() => {
      const s = [...document.querySelectorAll("svg[data-points]")];
      return s.length > 0 && s.every((x) => Number(x.dataset.points) >= 2) &&
        document.querySelectorAll("svg path.series").length === s.length;
    }, null, { timeout: 15000 });
    seen.chartPoints = await page.$$eval("svg[data-points]", (s) => s.map((x) => Number(x.dataset.points)));
    // the legend's swatches take their colours from the style sheet, under the CSP
    seen.legend = await page.$$eval(".chart .sw", (s) => [...new Set(s.map((x) => getComputedStyle(x).backgroundColor))]);
    await shot("2-stream");
    // left open, the page redraws itself without growing: the same number of
    // elements after two more refreshes (the footer's time says one happened)
    const footer = () => page.$eval("footer", (f) => f.textContent);
    const nodes = () => page.evaluate(() => document.getElementsByTagName("*").length);
    const n0 = await nodes();
    for (let i = 0; i < 2; i++) {
      const f0 = await footer();
      await page.waitForFunction((f) => document.querySelector("footer") &&
        document.querySelector("footer").textContent !== f, f0, { timeout: 15000 });
    }
    seen.domNodes = [n0, await nodes()];
    assert.equal(seen.domNodes[1], seen.domNodes[0], "the page grew while left open");

    // the group: consumers and the PEL, paged
    await page.click(`#groups a:text-is("${opts.group}")`);
    await page.waitForSelector("#pel");
    await page.waitForSelector("#consumers");
    const ids = () => page.$$eval("#pel tbody tr", (trs) => trs.map((t) => t.dataset.id));
    seen.pages = [await ids()];
    await shot("3-group");
    for (;;) {
      const next = await page.$('button[data-a="pnext"]:not([disabled])');
      if (!next) break;
      const before = seen.pages[seen.pages.length - 1][0];
      await next.click();
      await page.waitForFunction((b) => {
        const r = document.querySelector("#pel tbody tr");
        return r && r.dataset.id !== b;
      }, before);
      seen.pages.push(await ids());
      assert.ok(seen.pages.length < 50, "paging ends");
    }
    // back to the first page, one entry's fields
    while (await page.$('button[data-a="pprev"]:not([disabled])')) {
      const before = (await ids())[0];
      await page.click('button[data-a="pprev"]');
      await page.waitForFunction((b) => document.querySelector("#pel tbody tr").dataset.id !== b, before);
    }
    const first = (await ids())[0];
    await page.click(`a[data-a="show"][data-id="${first}"]`);
    await page.waitForSelector("#entry dl dt");
    seen.fields = await page.$$eval("#entry dt", (d) => d.map((x) => x.textContent));
    await shot("4-entry");

    // ACK the second entry of the page from its button
    const target = (await ids())[1];
    await page.click(`button[data-a="ack"][data-id="${target}"]`);
    await page.waitForFunction((t) => !document.querySelector(`#pel tr[data-id="${t}"]`), target);
    await page.waitForSelector("#toast:has-text('Acknowledged')");
    seen.acked = target;
    await shot("5-acked");
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(seen) + "\n");
}

main().catch((e) => {
  process.stderr.write((e && e.stack) || String(e));
  process.stderr.write("\n");
  process.exit(1);
});
