"""Crash test: producers and consumers of one consumer group run against echd, which is killed
with SIGKILL at random moments and restarted on the same data directory, at least 20 times.

Producers (2 threads) XADD, some of them pipelined with redis-py (transaction=False).
Consumers (2 threads) XREADGROUP '>' COUNT 10 (sometimes with BLOCK), XACK part of what they
hold, drop a few entries unacknowledged (a failed job), now and then XAUTOCLAIM idle entries,
and after every reconnect read their own history (XREADGROUP ... 0) as a real worker would.
Every reply a client receives is recorded.  While echd is down the clients park; after each
restart the test checks:

  * every acknowledged XADD exists with exactly its fields; no entry exists twice or that no
    producer sent; ids strictly increase, also across restarts (last-generated-id);
  * no entry is delivered from '>' twice, across all consumers and cycles, and every entry a
    consumer got is the entry a producer sent;
  * every entry a consumer received (from '>', XAUTOCLAIM or its history) whose XACK was not
    acknowledged is pending in exactly one consumer's PEL (group PEL and consumer PELs agree);
    an XACK whose reply was lost may or may not have happened (both allowed, then settled by
    what the PEL says);
  * no entry whose XACK was acknowledged is pending;
  * every entry at or below the group's last-delivered-id is pending or acknowledged, and none
    above it is pending;
  * last-delivered-id and entries-read never go backwards, cover every delivery a consumer saw,
    and entries-read (and lag) are exact.

echd only: Redis without an fsynced AOF keeps nothing across kill -9, and even with one its AOF
does not log everything this test checks (e.g. the delivery counts of history reads).
"""

import random
import re
import signal
import threading
import time

import redis

from echdtest import Closed, RespConn, RespError

ECHD_ONLY = ("asserts durability across SIGKILL of every acknowledged write, which Redis "
             "without an fsynced AOF does not have")
TIMEOUT = 170

KEY, GROUP = "cs", "cg"
PRODUCERS, CONSUMERS = 2, 2
MIN_CYCLES, MAX_CYCLES = 20, 40
RUN_DEADLINE = 85.0          # seconds of cycles at most (then the final check)
CLAIM_IDLE_MS = 300


def parse_id(x):
    ms, seq = x.split(b"-")
    return int(ms), int(seq)


class Violation(AssertionError):
    pass


class Gate:
    """Lets the workers run, or parks them (none mid-operation) while echd is down."""

    def __init__(self, n):
        self.cv = threading.Condition()
        self.open = False
        self.stop = False
        self.epoch = 0
        self.busy = [False] * n

    def enter(self, i):
        """Wait until running; returns the epoch, or None to stop. Marks worker i busy."""
        with self.cv:
            while not self.open and not self.stop:
                self.cv.wait(0.5)
            if self.stop:
                return None
            self.busy[i] = True
            return self.epoch

    def leave(self, i):
        with self.cv:
            self.busy[i] = False
            self.cv.notify_all()

    def close(self, timeout=20.0):
        with self.cv:
            self.open = False
            ok = self.cv.wait_for(lambda: not any(self.busy), timeout)
        if not ok:
            raise Violation("workers did not park within %.0f s: busy=%r" % (timeout, self.busy))

    def resume(self):
        with self.cv:
            self.epoch += 1
            self.open = True
            self.cv.notify_all()

    def finish(self):
        with self.cv:
            self.stop = True
            self.cv.notify_all()


class Model:
    """What the clients were told, and what that implies about echd's state."""

    def __init__(self, seed):
        self.seed = seed
        self.lock = threading.Lock()
        self.violations = []
        self.cycle = 0
        # producers
        self.sent = {}              # (p, n) -> fields as stored (list of bytes)
        self.added = {}             # id -> (p, n, cycle, how)  acknowledged XADDs
        self.last_added = {}        # producer -> last acknowledged id (ack order)
        self.lastgen_checked = None  # last-generated-id at the previous check
        # consumers
        self.delivered = {}         # id -> (consumer, cycle, batch ids)  from '>' (or adopted)
        self.received = set()       # ids a consumer holds or held (>, XAUTOCLAIM, history)
        self.owners = {}            # id -> set of consumers that received it
        self.mine = {}              # consumer -> set of ids it will XACK
        self.acked = {}             # id -> (consumer, cycle, XACK ids, reply)
        self.ack_unknown = {}       # id -> (consumer, cycle)  XACK sent, no reply
        self.lost_reply = set()     # consumers whose XREADGROUP/XAUTOCLAIM reply got lost
        self.last_batch = {}        # consumer -> last id it got from '>'
        self.cursor = None          # (last-delivered-id, entries-read) at the previous check
        self.max_delivered = None   # largest id any '>' reply contained
        self.stats = dict(xadd=0, xadd_unknown=0, delivered=0, acked=0, ack_unknown=0,
                          claimed=0, history=0, adopted=0)

    def violate(self, msg):
        self.violations.append("cycle %d: %s" % (self.cycle, msg))


# ---------------------------------------------------------------------------
# workers
# ---------------------------------------------------------------------------

def producer(server, gate, model, p, wid, seed):
    rng = random.Random(seed)
    client, epoch, n = None, None, 0
    try:
        for _ in range(10 ** 7):                              # bounded; ends with gate.finish
            e = gate.enter(wid)
            if e is None:
                return
            try:
                if client is None or e != epoch:
                    if client is not None:
                        client.close()
                    client = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=5,
                                         socket_connect_timeout=2, retry_on_timeout=False)
                    epoch = e
                batch = 5 if rng.random() < 0.3 else 1
                items = []
                for _ in range(batch):
                    n += 1
                    fields = {b"p": b"%d" % p, b"n": b"%d" % n,
                              b"pad": b"x" * rng.randrange(0, 40)}
                    flat = [x for kv in fields.items() for x in kv]
                    with model.lock:
                        model.sent[(b"%d" % p, b"%d" % n)] = flat
                    items.append((n, fields, flat))
                try:
                    if batch == 1:
                        ids = [client.xadd(KEY, items[0][1])]
                        how = "XADD"
                    else:
                        pipe = client.pipeline(transaction=False)
                        for _, fields, _ in items:
                            pipe.xadd(KEY, fields)
                        ids = pipe.execute()
                        how = "pipelined XADD x%d" % batch
                except (redis.ConnectionError, redis.TimeoutError, OSError):
                    with model.lock:
                        model.stats["xadd_unknown"] += batch
                    client.close()
                    client = None
                    time.sleep(0.01)
                    continue
                except Exception as ex:                   # an error reply, a bad reply
                    with model.lock:
                        model.violate("producer %d: %s of #%d..#%d failed: %r"
                                      % (p, "XADD" if batch == 1 else "pipeline", items[0][0],
                                         items[-1][0], ex))
                    client.close()
                    client = None
                    time.sleep(0.05)
                    continue
                with model.lock:
                    for (nn, _, _), eid in zip(items, ids):
                        if not isinstance(eid, bytes):
                            model.violate("producer %d: XADD #%d replied %r" % (p, nn, eid))
                            continue
                        prev = model.last_added.get(p)
                        if prev is not None and parse_id(eid) <= parse_id(prev):
                            model.violate("producer %d: XADD #%d got id %s after %s (ids must "
                                          "increase)" % (p, nn, eid, prev))
                        if (model.lastgen_checked is not None
                                and parse_id(eid) <= parse_id(model.lastgen_checked)):
                            model.violate("producer %d: XADD #%d got id %s, not above the "
                                          "last-generated-id %s seen after the restart"
                                          % (p, nn, eid, model.lastgen_checked))
                        if eid in model.added:
                            model.violate("id %s acknowledged twice: %r and producer %d #%d"
                                          % (eid, model.added[eid], p, nn))
                        model.last_added[p] = eid
                        model.added[eid] = (b"%d" % p, b"%d" % nn, model.cycle, how)
                        model.stats["xadd"] += 1
            finally:
                gate.leave(wid)
    finally:
        if client is not None:
            client.close()


def consumer(server, gate, model, name, wid, seed):
    rng = random.Random(seed)
    conn, epoch = None, None
    ack_inflight = []
    try:
        for _ in range(10 ** 7):                              # bounded; ends with gate.finish
            e = gate.enter(wid)
            if e is None:
                return
            op = None
            try:
                if conn is None or e != epoch:
                    if conn is not None:
                        conn.close()
                        conn = None
                    conn = RespConn(server.port, timeout=5)
                    epoch = e
                    op = "history"
                    r = conn.call("XREADGROUP", "GROUP", GROUP, name, "COUNT", "100000",
                                  "STREAMS", KEY, "0")
                    got = r[0][1] if r else []
                    with model.lock:
                        for eid, fields in got:
                            check_fields(model, eid, fields, "%s history" % name)
                            take(model, name, eid)
                        model.stats["history"] += len(got)
                elif rng.random() < 0.12:
                    op = "claim"
                    r = conn.call("XAUTOCLAIM", KEY, GROUP, name, str(CLAIM_IDLE_MS), "0",
                                  "COUNT", "10")
                    with model.lock:
                        if r[2]:
                            model.violate("%s: XAUTOCLAIM reports deleted entries %r (nothing "
                                          "was deleted): %r" % (name, r[2], r))
                        for eid, fields in r[1]:
                            check_fields(model, eid, fields, "%s XAUTOCLAIM" % name)
                            take(model, name, eid)
                            model.stats["claimed"] += 1
                else:
                    op = "read"
                    block = ("BLOCK", "100") if rng.random() < 0.3 else ()
                    r = conn.call("XREADGROUP", "GROUP", GROUP, name, "COUNT", "10", *block,
                                  "STREAMS", KEY, ">")
                    if r is None:
                        if not block:
                            time.sleep(0.005)
                    else:
                        batch = r[0][1]
                        bids = [x[0] for x in batch]
                        with model.lock:
                            if not 0 < len(batch) <= 10:
                                model.violate("%s: '>' returned %d entries with COUNT 10: %r"
                                              % (name, len(batch), r))
                            prev = model.last_batch.get(name)
                            order = [parse_id(x) for x in bids]
                            if order != sorted(set(order)) or (
                                    prev is not None and order[0] <= parse_id(prev)):
                                model.violate("%s: '>' went backwards: after %s got %r"
                                              % (name, prev, bids))
                            model.last_batch[name] = bids[-1]
                            for eid, fields in batch:
                                if eid in model.delivered:
                                    model.violate(
                                        "%s: entry %s delivered from '>' again (cycle %d, "
                                        "batch %r); first delivery: %r"
                                        % (name, eid, model.cycle, bids, model.delivered[eid]))
                                model.delivered[eid] = (name, model.cycle, bids)
                                check_fields(model, eid, fields, "%s '>'" % name)
                                # now and then a consumer drops an entry without XACK (its
                                # worker failed): it stays pending until XAUTOCLAIM takes it
                                take(model, name, eid, keep=rng.random() >= 0.1)
                                model.stats["delivered"] += 1
                                if (model.max_delivered is None
                                        or parse_id(eid) > parse_id(model.max_delivered)):
                                    model.max_delivered = eid
                # acknowledge part of what this consumer holds
                with model.lock:
                    held = sorted(model.mine[name], key=parse_id)
                if held:
                    ack_inflight = rng.sample(held, max(1, int(len(held) * 0.7)))
                    op = "ack"
                    n = conn.call("XACK", KEY, GROUP, *ack_inflight)
                    with model.lock:
                        if not isinstance(n, int) or not 0 <= n <= len(ack_inflight):
                            model.violate("%s: XACK of %d ids replied %r"
                                          % (name, len(ack_inflight), n))
                        for eid in ack_inflight:
                            model.acked[eid] = (name, model.cycle, ack_inflight, n)
                            model.ack_unknown.pop(eid, None)
                            for holders in model.mine.values():
                                holders.discard(eid)
                        model.stats["acked"] += len(ack_inflight)
                    ack_inflight = []
            except (Closed, OSError):
                with model.lock:
                    if op == "ack":
                        for eid in ack_inflight:
                            model.ack_unknown[eid] = (name, model.cycle)
                        model.stats["ack_unknown"] += len(ack_inflight)
                    elif op in ("read", "claim", "history"):
                        model.lost_reply.add(name)
                ack_inflight = []
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.01)
            except RespError as ex:
                with model.lock:
                    model.violate("%s: %s answered an error: %s" % (name, op, ex.msg))
                time.sleep(0.05)
            except Exception as ex:                       # a reply of the wrong shape
                with model.lock:
                    model.violate("%s: %s failed: %r" % (name, op, ex))
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.05)
            finally:
                gate.leave(wid)
    finally:
        if conn is not None:
            conn.close()


def check_fields(model, eid, fields, where):
    """An entry a consumer got is the one a producer sent (caller holds the lock)."""
    if fields is None:
        model.violate("%s: entry %s came without fields (nothing is ever deleted)" % (where, eid))
        return
    d = dict(zip(fields[0::2], fields[1::2]))
    key = (d.get(b"p"), d.get(b"n"))
    if model.sent.get(key) != fields:
        model.violate("%s: entry %s has fields %r, which no producer sent" % (where, eid, fields))
    added = model.added.get(eid)
    if added is not None and added[:2] != key:
        model.violate("%s: entry %s has fields %r but XADD of producer %s #%s got that id"
                      % (where, eid, fields, added[0], added[1]))


def take(model, name, eid, keep=True):
    """Consumer `name` now holds eid; unless keep is false it will XACK it (caller holds the
    lock)."""
    model.received.add(eid)
    model.owners.setdefault(eid, set()).add(name)
    if keep and eid not in model.acked:
        model.mine[name].add(eid)


# ---------------------------------------------------------------------------
# the check after each restart
# ---------------------------------------------------------------------------

def kv(flat):
    return {k.decode(): v for k, v in zip(flat[0::2], flat[1::2])}


def check_state(server, model):
    """Everything echd holds against everything the clients were told. The workers are parked
    (no client but this one). Settles the unknowns (XACKs and deliveries whose replies were
    lost) by what the PEL says."""
    c = RespConn(server.port, timeout=30)
    try:
        _check_state(c, model)
    finally:
        c.close()
    if model.violations:
        raise Violation("seed %d: %s" % (model.seed, describe(model.violations)))


def describe(violations):
    """Violations grouped by kind (ids and numbers aside): a count and the first two of each."""
    kinds = {}
    for msg in violations:
        kind = re.sub(r"b'[^']*'|\[[^]]*\]|\d+", "#", msg.split(": ", 1)[-1])
        kinds.setdefault(kind, []).append(msg)
    out = ["%d violation(s) of %d kind(s):" % (len(violations), len(kinds))]
    for msgs in kinds.values():
        out.append("  %d x %s" % (len(msgs), msgs[0]))
        out += ["      %s" % m for m in msgs[1:2]]
    return "\n".join(out)


def _check_state(c, m):
    v = m.violate
    # --- the stream
    entries = c.call("XRANGE", KEY, "-", "+")
    stream, prev = {}, None
    for eid, fields in entries:
        if prev is not None and parse_id(eid) <= parse_id(prev):
            v("XRANGE ids do not increase: %s after %s" % (eid, prev))
        prev = eid
        stream[eid] = fields
    for eid, (p, n, cyc, how) in m.added.items():
        if eid not in stream:
            v("acknowledged %s %s (producer %s #%s, cycle %d) is missing" % (how, eid, p, n, cyc))
        elif stream[eid] != m.sent[(p, n)]:
            v("acknowledged %s %s (producer %s #%s) has fields %r, sent %r"
              % (how, eid, p, n, stream[eid], m.sent[(p, n)]))
    stored = {}
    for eid, fields in stream.items():
        d = dict(zip(fields[0::2], fields[1::2]))
        key = (d.get(b"p"), d.get(b"n"))
        if m.sent.get(key) != fields:
            v("entry %s %r was never sent" % (eid, fields))
        if key in stored:
            v("producer %s #%s stored twice: %s and %s" % (key[0], key[1], stored[key], eid))
        stored[key] = eid
    if c.call("EXISTS", KEY) != 1:
        v("the stream %r (and its group) is gone" % KEY)
        return
    info = kv(c.call("XINFO", "STREAM", KEY))
    lastgen = info["last-generated-id"]
    if info["length"] != len(stream) or info["entries-added"] != len(stream):
        v("XINFO STREAM length %r / entries-added %r, XRANGE has %d (nothing is ever deleted)"
          % (info["length"], info["entries-added"], len(stream)))
    if stream and parse_id(lastgen) < parse_id(prev):
        v("last-generated-id %s below the last entry %s" % (lastgen, prev))
    if m.lastgen_checked is not None and parse_id(lastgen) < parse_id(m.lastgen_checked):
        v("last-generated-id went back from %s to %s" % (m.lastgen_checked, lastgen))
    m.lastgen_checked = lastgen

    # --- the group and its cursor
    groups = [kv(g) for g in c.call("XINFO", "GROUPS", KEY)]
    if [g["name"] for g in groups] != [GROUP.encode()]:
        v("XINFO GROUPS: %r" % (groups,))
        return
    g = groups[0]
    ldi, er = g["last-delivered-id"], g["entries-read"]
    upto = sum(1 for eid in stream if parse_id(eid) <= parse_id(ldi))
    if er != upto:
        v("entries-read %r, but %d entries are at or below last-delivered-id %s" % (er, upto, ldi))
    if g["lag"] != len(stream) - upto:
        v("lag %r, but %d entries are above last-delivered-id %s"
          % (g["lag"], len(stream) - upto, ldi))
    if m.cursor is not None:
        pldi, per = m.cursor
        if parse_id(ldi) < parse_id(pldi) or (er is None or per is not None and er < per):
            v("the cursor went back: last-delivered-id %s -> %s, entries-read %r -> %r"
              % (pldi, ldi, per, er))
    if m.max_delivered is not None and parse_id(ldi) < parse_id(m.max_delivered):
        v("last-delivered-id %s is below %s, which '>' delivered: %r"
          % (ldi, m.max_delivered, m.delivered[m.max_delivered]))
    m.cursor = (ldi, er)

    # --- the PEL: group and consumers agree
    rows = c.call("XPENDING", KEY, GROUP, "-", "+", "100000000")
    gpel = {r[0]: r[1].decode() for r in rows}
    if len(gpel) != len(rows):
        v("XPENDING lists an id twice: %r" % (rows,))
    summary = c.call("XPENDING", KEY, GROUP)
    if summary[0] != len(gpel) or g["pending"] != len(gpel):
        v("XPENDING summary %r / XINFO GROUPS pending %r, extended form lists %d"
          % (summary[:3], g["pending"], len(gpel)))
    names = [kv(x)["name"].decode() for x in c.call("XINFO", "CONSUMERS", KEY, GROUP)]
    seen = {}
    for name in names:
        for r in c.call("XPENDING", KEY, GROUP, "-", "+", "100000000", name):
            if r[0] in seen:
                v("%s is in the PELs of both %s and %s" % (r[0], seen[r[0]], name))
            seen[r[0]] = name
            if gpel.get(r[0]) != name:
                v("%s is in %s's PEL, the group PEL says %r" % (r[0], name, gpel.get(r[0])))
    for eid, owner in gpel.items():
        if seen.get(eid) != owner:
            v("%s (owner %s in the group PEL) is in no consumer's PEL" % (eid, owner))
        if eid not in stream:
            v("pending %s does not exist in the stream" % eid)
        if parse_id(eid) > parse_id(ldi):
            v("pending %s is above last-delivered-id %s" % (eid, ldi))

    # --- the PEL against what clients were told
    for eid, how in m.acked.items():
        if eid in gpel:
            v("%s is pending (owner %s) though its XACK was acknowledged: %s XACK %r -> %r "
              "(cycle %d)" % (eid, gpel[eid], how[0], how[2], how[3], how[1]))
    for eid in m.received:
        if eid in m.acked or eid in m.ack_unknown:
            continue
        if eid not in gpel:
            v("%s was received (%s%s) and never acknowledged, but is not pending"
              % (eid, sorted(m.owners.get(eid, ())),
                 ", from '>' %r" % (m.delivered[eid],) if eid in m.delivered else ""))
        elif gpel[eid] not in m.owners.get(eid, ()) and gpel[eid] not in m.lost_reply:
            v("%s is pending for %s, which never received it (held by %s)"
              % (eid, gpel[eid], sorted(m.owners.get(eid, ()))))
    # every entry at or below the cursor was delivered: pending, or acknowledged
    for eid in stream:
        if parse_id(eid) > parse_id(ldi):
            break
        if eid not in gpel and eid not in m.acked and eid not in m.ack_unknown:
            v("%s is at or below last-delivered-id %s but neither pending nor acknowledged%s"
              % (eid, ldi, " ('>' %r)" % (m.delivered[eid],) if eid in m.delivered else
                 " (nobody received it)"))

    # --- settle the unknowns by what echd says
    for eid, (name, cyc) in list(m.ack_unknown.items()):
        if eid in gpel:
            del m.ack_unknown[eid]                 # that XACK did not happen
        else:
            m.acked[eid] = (name, cyc, [eid], "lost reply")
            del m.ack_unknown[eid]
            for holders in m.mine.values():
                holders.discard(eid)
    for eid, owner in gpel.items():
        if eid not in m.received:                 # a '>' whose reply was lost
            if owner not in m.lost_reply:
                v("%s is pending for %s, but no reply to %s was lost and it never got it"
                  % (eid, owner, owner))
            m.delivered.setdefault(eid, (owner, m.cycle, "reply lost, found in the PEL"))
            m.received.add(eid)
            m.stats["adopted"] += 1
        m.owners.setdefault(eid, set()).add(owner)
        if eid not in m.acked:
            m.mine.setdefault(owner, set()).add(eid)
    m.lost_reply.clear()


# ---------------------------------------------------------------------------
# the test
# ---------------------------------------------------------------------------

def test_crash_cycles(server):
    seed = int(time.time())
    rng = random.Random(seed)
    model = Model(seed)
    c = server.raw()
    assert c.call("XGROUP", "CREATE", KEY, GROUP, "0", "MKSTREAM", "ENTRIESREAD", "0") == "OK"
    c.close()
    names = ["c%d" % i for i in range(CONSUMERS)]
    for name in names:
        model.mine[name] = set()
    gate = Gate(PRODUCERS + CONSUMERS)
    threads = []
    for p in range(PRODUCERS):
        threads.append(threading.Thread(target=producer, name="producer%d" % p, daemon=True,
                                        args=(server, gate, model, p, p, seed + p)))
    for i, name in enumerate(names):
        threads.append(threading.Thread(target=consumer, name=name, daemon=True,
                                        args=(server, gate, model, name, PRODUCERS + i,
                                              seed + 100 + i)))
    for t in threads:
        t.start()
    t0 = time.monotonic()
    cycles = 0
    try:
        while cycles < MAX_CYCLES and (cycles < MIN_CYCLES or
                                       time.monotonic() - t0 < RUN_DEADLINE * 0.8):
            if time.monotonic() - t0 > RUN_DEADLINE:
                break
            cycles += 1
            with model.lock:
                model.cycle = cycles
            gate.resume()
            time.sleep(rng.uniform(0.1, 0.5))
            server.kill(signal.SIGKILL)
            gate.close()
            server.start()
            check_state(server, model)
        # a last round without a kill, then a graceful look at everything
        gate.resume()
        time.sleep(0.3)
        gate.close()
        check_state(server, model)
    finally:
        gate.finish()
        for t in threads:
            t.join(15)
    alive = [t.name for t in threads if t.is_alive()]
    assert not alive, "threads still running: %r" % alive
    assert not model.violations, "seed %d: %s" % (seed, describe(model.violations))
    assert cycles >= MIN_CYCLES, "only %d kill/restart cycles in %.0f s (seed %d)" % (
        cycles, time.monotonic() - t0, seed)
    s = model.stats
    print("# 06-crash: %d kill -9 cycles in %.0f s, seed %d, %s" % (
        cycles, time.monotonic() - t0, seed,
        ", ".join("%s %d" % kv for kv in sorted(s.items()))), flush=True)
    # the run did exercise what it checks
    assert s["xadd"] > 100 and s["delivered"] > 100 and s["acked"] > 50, (s, seed)
