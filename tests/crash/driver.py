"""The crash-test workload, its invariant checks, and the power-cut machinery.

Used by tests/integration/06-crash.py (SIGKILL, CI), tests/integration/14-powercut.py
(simulated power loss, CI) and tests/crash/run.py (either, standalone and long).

The workload: producers (XADD, some pipelined with redis-py) and consumers of one consumer
group (XREADGROUP '>' COUNT 10, sometimes with BLOCK; XACK of part of what they hold, or
instead XACKDEL (KEEPREF or DELREF) or XDELEX DELREF, which also delete it; a few entries
dropped unacknowledged, as by a failed worker; now and then one given back with XNACK, which
XAUTOCLAIM then takes at once; now and then XAUTOCLAIM; after every
reconnect their own history, XREADGROUP ... 0, as a real worker reads it).  Every reply a
client receives is recorded in a Model.  While echd is down the clients park (Gate); after
every restart check_state() compares what echd holds with what the clients were told:

  * every acknowledged XADD exists with exactly its fields; no entry exists twice or that no
    producer sent; ids strictly increase, also across restarts (last-generated-id);
  * the idempotent producer (XADD IDMP) re-sends a batch whose reply it lost until it gets one,
    and after every restart re-sends its last acknowledged message: that must answer the id
    the first send got, and add nothing (no entry twice);
  * no entry is delivered from '>' twice, across all consumers and cycles, and every entry a
    consumer got is the entry a producer sent;
  * every entry a consumer received (from '>', XAUTOCLAIM or its history) whose XACK was not
    acknowledged is pending in exactly one consumer's PEL (group PEL and consumer PELs agree);
    an XACK whose reply was lost may or may not have happened (both allowed, then settled by
    what the PEL says);
  * no entry whose XACK was acknowledged is pending;
  * an entry whose XACKDEL answered 1, or whose XDELEX DELREF was acknowledged, is gone from
    the stream and from every PEL; a lost one happened as a whole or not at all (a pending
    entry is never missing from the stream: the group's records go in the same transaction);
    entries-added and entries-read count the deleted entries;
  * an entry whose XNACK was acknowledged is pending with no owner ("" in XPENDING) until a
    claim takes it; no entry is released that no XNACK named;
  * every entry at or below the group's last-delivered-id is pending or acknowledged, and none
    above it is pending;
  * last-delivered-id and entries-read never go backwards, cover every delivery a consumer saw,
    and entries-read (and lag) are exact;
  * dead-lettering (a second stream whose group has ACKWAIT 30 MAXDELIVER 1 DEADLETTER: a
    worker reads and never acks, or XNACKs FATAL; the timer or the XNACK moves the entry):
    every entry it was given is in exactly one of the group's PEL and the dead-letter stream,
    never both, never neither; no entry is dead-lettered twice; the group's dead-lettered
    count is the dead-letter stream's length;
  * `echo-admin check` of the data directory: every counter and index agrees with the rows.

A violation names the stream, the ids and the replies that prove it (Violation, with the seed).

run_cycles() runs the workload through a number of crash/restart cycles; what a crash is comes
from a Crash object: SigkillCrash (kill -9, restart on the same directory: the page cache
survives) or PowercutCrash (echd runs under the LD_PRELOAD shim tests/crash/powercut.c; a
cut kills it and restarts it on an image of what the disk held: the durable copies the shim
kept, optionally plus part of the writes not yet synced -- see build_image()).
"""

import glob
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

import redis

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

from echdtest import (Closed, RespConn, RespError, Server, ServerError,  # noqa: E402
                      check_data)

KEY, GROUP = "cs", "cg"
PRODUCERS, CONSUMERS = 2, 2
# dead-lettering (echd's group policies): its own stream, group and dead-letter stream
DKEY, DGROUP, DLQ = "ds", "dg", "ds:dead"
DPOLICY = ("ACKWAIT", "30", "MAXDELIVER", "1", "DEADLETTER", DLQ)
IDMP_PRODUCER = 1      # sends XADD IDMP p1 <n>: retries an unanswered batch, and re-sends its
                       # last acknowledged message after each restart to get the first id back
CLAIM_IDLE_MS = 300

# Error replies that mean "this front end cannot serve now" rather than a wrong answer: the
# failover tests (two front ends on PostgreSQL) set it to the standby's READONLY and the
# failed-commit error. A worker treats such a reply as a lost connection: the outcome of
# what it sent is unknown, and it reconnects (to server.port, which then names the active).
TRANSIENT = ()


def transient(err):
    """err: an error reply's text, or redis-py's exception (which drops the code: READONLY
    arrives as ReadOnlyError, "ERR x" as "x")."""
    if not TRANSIENT:
        return False
    if isinstance(err, redis.ReadOnlyError) and any(t.startswith("READONLY") for t in TRANSIENT):
        return True
    return any(t in str(err) for t in TRANSIENT)


class Conn(RespConn):
    """RespConn whose TRANSIENT error replies raise Closed (a lost connection)."""

    def call(self, *args):
        try:
            return super().call(*args)
        except RespError as e:
            if transient(e.msg):
                raise Closed("transient error reply: %s" % e.msg)
            raise


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

    def __init__(self, seed, tag=None):
        self.seed = seed
        # The keys: KEY, DKEY and DLQ, or with a tag "{tag}KEY" and so on, all three in the
        # tag's hash slot (a workload per cluster shard, 34-cluster-crash.py)
        pre = "" if tag is None else "{%s}" % tag
        self.key, self.group = pre + KEY, GROUP
        self.dkey, self.dgroup, self.dlq = pre + DKEY, DGROUP, pre + DLQ
        self.dpolicy = tuple(self.dlq if x == DLQ else x for x in DPOLICY)
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
        self.deleted = {}           # id -> (consumer, cycle, command)  deletion acknowledged
        self.del_unknown = {}       # id -> (consumer, cycle)  XACKDEL/XDELEX sent, no reply
        self.lost_reply = set()     # consumers whose XREADGROUP/XAUTOCLAIM reply got lost
        self.released = {}          # id -> (consumer, cycle)  XNACK acknowledged, not claimed
        self.claims = {}            # id -> XAUTOCLAIM replies that named it
        self.nack_unknown = {}      # id -> (consumer, cycle)  XNACK sent, no reply
        self.last_batch = {}        # consumer -> last id it got from '>'
        self.cursor = None          # (last-delivered-id, entries-read) at the previous check
        self.max_delivered = None   # largest id any '>' reply contained
        self.dl_given = set()       # ids of DKEY the dead-letter worker got from '>'
        self.stats = dict(xadd=0, xadd_unknown=0, delivered=0, acked=0, ack_unknown=0,
                          deleted=0, del_unknown=0,
                          claimed=0, history=0, adopted=0, nacked=0, nack_unknown=0,
                          idmp_retries=0, idmp_resends=0, dl_given=0, dl_fatal=0)

    def violate(self, msg):
        self.violations.append("cycle %d: %s" % (self.cycle, msg))


# ---------------------------------------------------------------------------
# workers
# ---------------------------------------------------------------------------

def xadd_cmd(model, p, n, flat):
    """The XADD of producer p's message n: IDMP for the idempotent producer."""
    if p == IDMP_PRODUCER:
        return ["XADD", model.key, "IDMP", "p%d" % p, "%d" % n, "*"] + flat
    return ["XADD", model.key, "*"] + flat


def idmp_resend(client, model, p, last):
    """After a restart: the last acknowledged message again must get its first id."""
    n, flat, eid = last
    got = client.execute_command(*xadd_cmd(model, p, n, flat))
    with model.lock:
        model.stats["idmp_resends"] += 1
        if got != eid:
            model.violate("producer %d: IDMP re-send of acknowledged #%d after the restart got "
                          "%r, the first send %s" % (p, n, got, eid))


def producer(server, gate, model, p, wid, seed):
    rng = random.Random(seed)
    client, epoch, n = None, None, 0
    retry = None            # the idempotent producer's batch whose reply was lost
    last = None             # its last acknowledged (n, flat, id)
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
                    restarted = epoch is not None and e != epoch
                    epoch = e
                    if restarted and last is not None:
                        try:
                            idmp_resend(client, model, p, last)
                        except (redis.ConnectionError, redis.TimeoutError, OSError,
                                redis.ResponseError) as ex:
                            if isinstance(ex, redis.ResponseError) and not transient(ex):
                                raise
                            client.close()
                            client = None
                            time.sleep(0.01)
                            continue
                if retry is not None:
                    items, retried = retry, True
                else:
                    retried = False
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
                batch = len(items)
                try:
                    if batch == 1:
                        ids = [client.execute_command(*xadd_cmd(model, p, items[0][0],
                                                                items[0][2]))]
                        how = "XADD"
                    else:
                        pipe = client.pipeline(transaction=False)
                        for nn, _, flat in items:
                            pipe.execute_command(*xadd_cmd(model, p, nn, flat))
                        ids = pipe.execute()
                        how = "pipelined XADD x%d" % batch
                    if p == IDMP_PRODUCER:
                        how = "IDMP " + how + (" (retried)" if retried else "")
                except (redis.ConnectionError, redis.TimeoutError, OSError,
                        redis.ResponseError) as ex:
                    if isinstance(ex, redis.ResponseError) and not transient(ex):
                        with model.lock:
                            model.violate("producer %d: %s of #%d..#%d failed: %r"
                                          % (p, "XADD" if batch == 1 else "pipeline",
                                             items[0][0], items[-1][0], ex))
                        client.close()
                        client = None
                        retry = None
                        time.sleep(0.05)
                        continue
                    with model.lock:
                        model.stats["xadd_unknown"] += batch
                    if p == IDMP_PRODUCER:
                        retry = items                 # sent again until answered
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
                    retry = None
                    time.sleep(0.05)
                    continue
                retry = None
                with model.lock:
                    if retried:
                        model.stats["idmp_retries"] += 1
                    for (nn, _, flat), eid in zip(items, ids):
                        if not isinstance(eid, bytes):
                            model.violate("producer %d: XADD #%d replied %r" % (p, nn, eid))
                            continue
                        prev = model.last_added.get(p)
                        if prev is not None and parse_id(eid) <= parse_id(prev):
                            model.violate("producer %d: XADD #%d got id %s after %s (ids must "
                                          "increase)" % (p, nn, eid, prev))
                        # a retried message the lost send had added keeps its (older) id
                        if (not retried and model.lastgen_checked is not None
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
                        if p == IDMP_PRODUCER:
                            last = (nn, flat, eid)
            finally:
                gate.leave(wid)
    finally:
        if client is not None:
            client.close()


def dead_letter_worker(server, gate, model, wid, seed):
    """Adds entries to DKEY and takes them from its group without ever acking: the policy's
    timer dead-letters them after ACKWAIT (MAXDELIVER 1), or an XNACK FATAL does at once."""
    rng = random.Random(seed)
    conn, epoch = None, None
    try:
        for _ in range(10 ** 7):
            e = gate.enter(wid)
            if e is None:
                return
            try:
                if conn is None or e != epoch:
                    if conn is not None:
                        conn.close()
                    conn = Conn(server.port, timeout=5)
                    epoch = e
                    try:
                        conn.call("XGROUP", "CREATE", model.dkey, model.dgroup, "0",
                                  "MKSTREAM")
                    except RespError:
                        pass                                  # BUSYGROUP: made before
                    conn.call("XGROUP", "SETPOLICY", model.dkey, model.dgroup, *model.dpolicy)
                conn.call("XADD", model.dkey, "*", "v", "%d" % rng.randrange(10 ** 6))
                got = conn.call("XREADGROUP", "GROUP", model.dgroup, "d", "COUNT", "5",
                                "STREAMS", model.dkey, ">")
                ids = [eid for eid, _ in got[0][1]] if got else []
                with model.lock:
                    again = model.dl_given.intersection(ids)
                    if again:
                        model.violate("dead-letter worker: %r delivered from '>' again"
                                      % sorted(again))
                    model.dl_given.update(ids)
                    model.stats["dl_given"] += len(ids)
                if ids and rng.random() < 0.3:
                    conn.call("XNACK", model.dkey, model.dgroup, "FATAL", "IDS", "1", ids[0])
                    with model.lock:
                        model.stats["dl_fatal"] += 1
                time.sleep(rng.random() * 0.02)
            except (Closed, OSError, RespError) as ex:
                if isinstance(ex, RespError) and "LOADING" not in str(ex):
                    with model.lock:
                        model.violate("dead-letter worker: %r" % ex)
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.01)
            finally:
                gate.leave(wid)
    finally:
        if conn is not None:
            conn.close()


def check_dead_letters(c, m):
    """Every DKEY entry the worker was given is in exactly one of the PEL and DLQ.

    The policy's timer goes on dead-lettering while this reads (ACKWAIT 30: after a restart
    every entry pending is due), so the PEL, the DLQ and the group's count are read in one
    MULTI/EXEC: read one by one, an entry moved between two reads shows in both."""
    v = m.violate
    c.call("MULTI")
    for cmd in (("XPENDING", m.dkey, m.dgroup, "-", "+", "1000000"),
                ("XRANGE", m.dlq, "-", "+"), ("XINFO", "GROUPS", m.dkey)):
        c.call(*cmd)
    pending, records, groups = c.call("EXEC")
    if isinstance(pending, RespError) or isinstance(groups, RespError):
        if c.call("EXISTS", m.dkey):            # no DKEY yet: no group, nothing given
            v("reading the dead-letter group: %r %r" % (pending, groups))
        pending, groups = [], None
    pel = {r[0] for r in pending}
    dead = {}
    for rid, fields in records:
        f = kv(fields)
        eid = f.get("id")
        if eid in dead:
            v("%s dead-lettered twice: records %s and %s" % (eid, dead[eid], rid))
        dead[eid] = rid
        if f.get("stream") != m.dkey.encode() or f.get("reason") not in (b"maxdeliver",
                                                                       b"fatal"):
            v("dead-letter record %s is not one: %r" % (rid, fields))
        if eid in pel:
            v("%s is both pending and dead-lettered (record %s: %r)" % (eid, rid, fields))
    with m.lock:
        given = set(m.dl_given)
    for eid in given:
        if eid not in pel and eid not in dead:
            v("%s was delivered but is neither pending nor dead-lettered" % eid)
    if groups:
        g = {k.decode(): x for k, x in zip(groups[0][0::2], groups[0][1::2])}
        if g.get("dead-lettered") != len(dead):
            v("the group counts %r dead-lettered, the dead-letter stream has %d"
              % (g.get("dead-lettered"), len(dead)))


def consumer(server, gate, model, name, wid, seed):
    rng = random.Random(seed)
    conn, epoch = None, None
    ack_inflight, nack_inflight = [], []
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
                    conn = Conn(server.port, timeout=5)
                    epoch = e
                    op = "history"
                    r = conn.call("XREADGROUP", "GROUP", model.group, name, "COUNT",
                                  "100000", "STREAMS", model.key, "0")
                    got = r[0][1] if r else []
                    with model.lock:
                        for eid, fields in got:
                            check_fields(model, eid, fields, "%s history" % name)
                            take(model, name, eid)
                        model.stats["history"] += len(got)
                elif rng.random() < 0.12:
                    op = "claim"
                    r = conn.call("XAUTOCLAIM", model.key, model.group, name,
                                  str(CLAIM_IDLE_MS), "0", "COUNT", "10")
                    with model.lock:
                        if r[2]:
                            model.violate("%s: XAUTOCLAIM reports deleted entries %r (nothing "
                                          "was deleted): %r" % (name, r[2], r))
                        for eid, fields in r[1]:
                            check_fields(model, eid, fields, "%s XAUTOCLAIM" % name)
                            take(model, name, eid)
                            model.released.pop(eid, None)
                            model.claims[eid] = model.claims.get(eid, 0) + 1
                            model.stats["claimed"] += 1
                else:
                    op = "read"
                    block = ("BLOCK", "100") if rng.random() < 0.3 else ()
                    r = conn.call("XREADGROUP", "GROUP", model.group, name, "COUNT", "10", *block,
                                  "STREAMS", model.key, ">")
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
                # now and then give one back (a worker that cannot do it): XNACK
                with model.lock:
                    held = sorted(model.mine[name], key=parse_id)
                if held and rng.random() < 0.05:
                    nack_inflight = [rng.choice(held)]
                    with model.lock:
                        model.mine[name].discard(nack_inflight[0])
                        claims0 = model.claims.get(nack_inflight[0], 0)
                    op = "nack"
                    n = conn.call("XNACK", model.key, model.group,
                                  rng.choice(("SILENT", "FAIL", "FATAL")),
                                  "IDS", "1", *nack_inflight)
                    with model.lock:
                        # 0: another consumer claimed and acknowledged it meanwhile
                        if n not in (0, 1):
                            model.violate("%s: XNACK of 1 id replied %r" % (name, n))
                        for eid in nack_inflight:
                            # a claim reported while the XNACK's reply was on its way
                            # took the entry after the release (it was this consumer's
                            # until then): released, and taken since
                            if n == 1 and model.claims.get(eid, 0) == claims0:
                                model.released[eid] = (name, model.cycle)
                        model.stats["nacked"] += 1
                    nack_inflight = []
                    with model.lock:
                        held = sorted(model.mine[name], key=parse_id)
                # acknowledge part of what this consumer holds
                if held:
                    ack_inflight = rng.sample(held, max(1, int(len(held) * 0.7)))
                    how = rng.random()
                    if how < 0.6:
                        op = "ack"
                        n = conn.call("XACK", model.key, model.group, *ack_inflight)
                        codes = None
                    elif how < 0.85:
                        op = "ackdel"
                        cmd = ["XACKDEL", model.key, model.group,
                               rng.choice(("KEEPREF", "DELREF")), "IDS",
                               str(len(ack_inflight))] + ack_inflight
                        codes = conn.call(*cmd)
                    else:
                        op = "delex"
                        cmd = ["XDELEX", model.key, "DELREF", "IDS", str(len(ack_inflight))]
                        codes = conn.call(*(cmd + ack_inflight))
                    with model.lock:
                        if codes is None:
                            if not isinstance(n, int) or not 0 <= n <= len(ack_inflight):
                                model.violate("%s: XACK of %d ids replied %r"
                                              % (name, len(ack_inflight), n))
                        elif (not isinstance(codes, list) or len(codes) != len(ack_inflight)
                              or any(x not in (1, -1) for x in codes)):
                            model.violate("%s: %s replied %r" % (name, cmd[:6], codes))
                            codes = None
                        for k, eid in enumerate(ack_inflight):
                            model.acked[eid] = (name, model.cycle, ack_inflight,
                                                codes if codes is not None else n)
                            model.ack_unknown.pop(eid, None)
                            # XACKDEL deletes what it acknowledged (1); XDELEX DELREF leaves
                            # every id gone, deleted now (1) or before (-1)
                            if codes is not None and (op == "delex" or codes[k] == 1):
                                model.deleted[eid] = (name, model.cycle, op)
                                model.del_unknown.pop(eid, None)
                                model.stats["deleted"] += 1
                            for holders in model.mine.values():
                                holders.discard(eid)
                        model.stats["acked"] += len(ack_inflight)
                    ack_inflight = []
            except (Closed, OSError):
                with model.lock:
                    if op in ("ack", "ackdel", "delex"):
                        for eid in ack_inflight:
                            model.ack_unknown[eid] = (name, model.cycle)
                            if op != "ack":
                                model.del_unknown[eid] = (name, model.cycle)
                        model.stats["ack_unknown"] += len(ack_inflight)
                        if op != "ack":
                            model.stats["del_unknown"] += len(ack_inflight)
                    elif op == "nack":
                        for eid in nack_inflight:
                            model.nack_unknown[eid] = (name, model.cycle)
                        model.stats["nack_unknown"] += len(nack_inflight)
                    elif op in ("read", "claim", "history"):
                        model.lost_reply.add(name)
                ack_inflight, nack_inflight = [], []
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
        check_dead_letters(c, model)
    finally:
        c.close()
    if model.violations:
        raise Violation("seed %d: %s" % (model.seed, describe(model.violations)))
    check_storage(server, model.seed)


def check_storage(server, seed):
    """What the replies cannot show: every stored counter and index against the rows."""
    own = getattr(server, "check_data", None)    # a store that is not a data directory
    bad = own() if own is not None else check_data(server.exe, server.dir)
    if bad:
        raise Violation("seed %d: %s" % (seed, bad))


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
    entries = c.call("XRANGE", m.key, "-", "+")
    stream, prev = {}, None
    for eid, fields in entries:
        if prev is not None and parse_id(eid) <= parse_id(prev):
            v("XRANGE ids do not increase: %s after %s" % (eid, prev))
        prev = eid
        stream[eid] = fields
    for eid, (p, n, cyc, how) in m.added.items():
        if eid in m.deleted or eid in m.del_unknown:
            continue
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
    for eid, how in m.deleted.items():
        if eid in stream:
            v("%s is in the stream though its deletion was acknowledged: %r" % (eid, how))
    # entries deleted so far: every one was delivered, so at or below the cursor
    gone = {eid for eid in list(m.deleted) + list(m.del_unknown) if eid not in stream}
    if c.call("EXISTS", m.key) != 1:
        v("the stream %r (and its group) is gone" % m.key)
        return
    info = kv(c.call("XINFO", "STREAM", m.key))
    lastgen = info["last-generated-id"]
    if info["length"] != len(stream) or info["entries-added"] != len(stream) + len(gone):
        v("XINFO STREAM length %r / entries-added %r, XRANGE has %d and %d were deleted"
          % (info["length"], info["entries-added"], len(stream), len(gone)))
    if stream and parse_id(lastgen) < parse_id(prev):
        v("last-generated-id %s below the last entry %s" % (lastgen, prev))
    if m.lastgen_checked is not None and parse_id(lastgen) < parse_id(m.lastgen_checked):
        v("last-generated-id went back from %s to %s" % (m.lastgen_checked, lastgen))
    m.lastgen_checked = lastgen

    # --- the group and its cursor
    groups = [kv(g) for g in c.call("XINFO", "GROUPS", m.key)]
    if [g["name"] for g in groups] != [m.group.encode()]:
        v("XINFO GROUPS: %r" % (groups,))
        return
    g = groups[0]
    ldi, er = g["last-delivered-id"], g["entries-read"]
    upto = sum(1 for eid in stream if parse_id(eid) <= parse_id(ldi))
    # deleting the entry at a group's cursor makes its counter unknown until it can be
    # worked out again (as in Redis: XINFO shows nil); once known it must be exact
    if (er is not None or not gone) and er != upto + len(gone):
        v("entries-read %r, but %d entries are at or below last-delivered-id %s and %d were "
          "deleted" % (er, upto, ldi, len(gone)))
    if g["lag"] != len(stream) - upto:
        v("lag %r, but %d entries are above last-delivered-id %s"
          % (g["lag"], len(stream) - upto, ldi))
    if m.cursor is not None:
        pldi, per = m.cursor
        if parse_id(ldi) < parse_id(pldi) or (er is None and not gone) or (
                er is not None and per is not None and er < per):
            v("the cursor went back: last-delivered-id %s -> %s, entries-read %r -> %r"
              % (pldi, ldi, per, er))
    if m.max_delivered is not None and parse_id(ldi) < parse_id(m.max_delivered):
        v("last-delivered-id %s is below %s, which '>' delivered: %r"
          % (ldi, m.max_delivered, m.delivered[m.max_delivered]))
    m.cursor = (ldi, er)

    # --- the PEL: group and consumers agree
    rows = c.call("XPENDING", m.key, m.group, "-", "+", "100000000")
    gpel = {r[0]: r[1].decode() for r in rows}
    if len(gpel) != len(rows):
        v("XPENDING lists an id twice: %r" % (rows,))
    summary = c.call("XPENDING", m.key, m.group)
    if summary[0] != len(gpel) or g["pending"] != len(gpel):
        v("XPENDING summary %r / XINFO GROUPS pending %r, extended form lists %d"
          % (summary[:3], g["pending"], len(gpel)))
    names = [kv(x)["name"].decode() for x in c.call("XINFO", "CONSUMERS", m.key, m.group)]
    seen = {}
    for name in names:
        for r in c.call("XPENDING", m.key, m.group, "-", "+", "100000000", name):
            if r[0] in seen:
                v("%s is in the PELs of both %s and %s" % (r[0], seen[r[0]], name))
            seen[r[0]] = name
            if gpel.get(r[0]) != name:
                v("%s is in %s's PEL, the group PEL says %r" % (r[0], name, gpel.get(r[0])))
    for eid, owner in gpel.items():
        if owner != "" and seen.get(eid) != owner:
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
        elif gpel[eid] == "":
            if eid not in m.released and eid not in m.nack_unknown:
                v("%s is released (owner \"\") but no XNACK named it" % eid)
        elif gpel[eid] not in m.owners.get(eid, ()) and gpel[eid] not in m.lost_reply:
            v("%s is pending for %s, which never received it (held by %s)"
              % (eid, gpel[eid], sorted(m.owners.get(eid, ()))))
    for eid, (name, cyc) in m.released.items():
        if eid in m.acked or eid in m.ack_unknown or eid not in gpel:
            continue                               # acknowledged since, or reported above
        if gpel[eid] != "" and gpel[eid] not in m.lost_reply:
            v("%s was released by %s's XNACK (cycle %d) but is owned by %s, whose claim no "
              "reply reported" % (eid, name, cyc, gpel[eid]))
    # every entry at or below the cursor was delivered: pending, or acknowledged
    for eid in stream:
        if parse_id(eid) > parse_id(ldi):
            break
        if eid not in gpel and eid not in m.acked and eid not in m.ack_unknown:
            v("%s is at or below last-delivered-id %s but neither pending nor acknowledged%s"
              % (eid, ldi, " ('>' %r)" % (m.delivered[eid],) if eid in m.delivered else
                 " (nobody received it)"))

    # --- settle the unknowns by what echd says: a lost XACKDEL or XDELEX DELREF happened
    # whole or not at all; a pending entry is never missing (checked above)
    for eid, (name, cyc) in list(m.del_unknown.items()):
        if eid not in stream:
            m.deleted[eid] = (name, cyc, "lost reply")
        del m.del_unknown[eid]
    for eid, (name, cyc) in list(m.ack_unknown.items()):
        if eid in gpel:
            del m.ack_unknown[eid]                 # that XACK did not happen
        else:
            m.acked[eid] = (name, cyc, [eid], "lost reply")
            del m.ack_unknown[eid]
            for holders in m.mine.values():
                holders.discard(eid)
    for eid, (name, cyc) in list(m.nack_unknown.items()):
        if gpel.get(eid) == "":
            m.released[eid] = (name, cyc)          # that XNACK happened
        del m.nack_unknown[eid]
    for eid, owner in gpel.items():
        if owner == "":
            continue                               # released: nobody holds it
        m.released.pop(eid, None)                  # claimed (its reply lost)
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
# the cycles
# ---------------------------------------------------------------------------

class StartFailure(Violation):
    """echd did not come up after a crash (e.g. it could not open the environment)."""


class Workload:
    """The producer and consumer threads. They connect to server.port, which stays the same
    across restarts (also when a power cut moves the data directory)."""

    def __init__(self, server, model, seed):
        self.gate = Gate(PRODUCERS + CONSUMERS + 1)
        names = ["c%d" % i for i in range(CONSUMERS)]
        for name in names:
            model.mine[name] = set()
        self.threads = []
        for p in range(PRODUCERS):
            self.threads.append(threading.Thread(
                target=producer, name="producer%d" % p, daemon=True,
                args=(server, self.gate, model, p, p, seed + p)))
        for i, name in enumerate(names):
            self.threads.append(threading.Thread(
                target=consumer, name=name, daemon=True,
                args=(server, self.gate, model, name, PRODUCERS + i, seed + 100 + i)))
        self.threads.append(threading.Thread(
            target=dead_letter_worker, name="dead-letter", daemon=True,
            args=(server, self.gate, model, PRODUCERS + CONSUMERS, seed + 200)))

    def start(self):
        for t in self.threads:
            t.start()

    def stop(self):
        """Ends the threads; returns the names of those still running."""
        self.gate.finish()
        for t in self.threads:
            t.join(15)
        return [t.name for t in self.threads if t.is_alive()]


class Through:
    """A server that is whichever front end .active is at the moment (of several sharing a
    store): what the workload and the checks read of a server, taken from it. The workers
    reconnect to .port after a failure, so a failover moves them."""

    active = None

    @property
    def port(self):
        return self.active.port

    @property
    def proc(self):
        return self.active.proc

    @property
    def dir(self):
        return self.active.dir

    def log_tail(self, n=20):
        return self.active.log_tail(n)


def died_by_itself(server, cut_armed=False):
    """Before the test kills echd: True if the shim cut the power at an I/O (cut_armed), and
    a Violation if echd is not running for any other reason (it crashed)."""
    if server.proc is None or server.proc.poll() is None:
        return False
    rc = server.proc.returncode
    log = server.log_tail(20)
    if cut_armed and rc == -signal.SIGKILL and "powercut: power cut before I/O" in log:
        return True
    raise Violation("echd exited by itself with status %s while the clients ran\n%s"
                    % (rc, log))


class SigkillCrash:
    """kill -9, restart on the same directory: the process dies, the page cache survives."""

    label = "kill -9"

    def resume(self, server, rng):
        pass

    def kill(self, server, rng):
        died_by_itself(server)
        server.kill(signal.SIGKILL)

    def restart(self, server, rng):
        try:
            server.start()
        except ServerError as e:
            raise StartFailure("echd did not start after kill -9: %s" % e)
        return "kill -9"

    def summary(self):
        return ""


class PowercutCrash:
    """A power cut of a PowercutServer: kill -9, then restart on an image of what the disk
    held (build_image), in a new directory.

    Where: with probability io_cuts a generation is armed to cut itself just before its
    k-th tracked write/sync once the clients run (the shim's ECHD_POWERCUT_KILL_AT, k drawn
    from about as many I/Os as the last generation did in 0.3 s): that hits the inside of
    commits (data pages written, not synced; synced, meta page not written), which a kill
    from outside rarely does; otherwise (or if the I/O never comes) the test kills it after
    its random uptime.

    The image style of each cut is drawn from `styles`: 'durable' (only what was synced),
    'all' (every write, as after a process crash), 'subset' (synced data plus, per sector, a
    random prefix of the writes not yet synced: any state a disk that writes back in any
    order can be left in)."""

    label = "power cut"

    def __init__(self, styles=("durable", "subset", "subset", "all"), io_cuts=0.5):
        self.styles = styles
        self.io_cuts = io_cuts
        self.count = {}
        self.with_pending = 0       # cuts that found unsynced writes
        self.pending_writes = 0     # unsynced writes found, all cuts
        self.partial = 0            # 'subset' cuts that kept some but not all of them
        self.rolled = 0             # cuts that hit the shim applying a sync
        self.io_armed = 0           # generations armed to cut at an I/O
        self.io_hit = 0             # ... that did
        self.rate = None            # tracked I/Os per second, last generation
        self.t_resume = None
        self.last = None

    def resume(self, server, rng):
        """The clients are about to run: arm the cut at an I/O, if this generation has one."""
        if server.gen_env.get("ECHD_POWERCUT_KILL_AT"):
            with open(os.path.join(server.state, "arm"), "w"):
                pass
        self.t_resume = time.monotonic()

    def kill(self, server, rng):
        if died_by_itself(server, server.gen_env.get("ECHD_POWERCUT_KILL_AT")):
            self.io_hit += 1
        elif self.t_resume is not None:
            st = server.shim_stats()
            ops = st.get("writes", 0) + st.get("syncs", 0) + st.get("dropped", 0)
            self.rate = ops / max(0.05, time.monotonic() - self.t_resume)
        server.kill(signal.SIGKILL)

    def restart(self, server, rng):
        style = rng.choice(self.styles)
        info = server.power_cut(style, rng.randrange(1 << 32))
        self.last = info
        self.count[style] = self.count.get(style, 0) + 1
        if info["pending"]:
            self.with_pending += 1
        self.pending_writes += info["pending"]
        if style == "subset" and 0 < info["kept_sectors"] < info["pending_sectors"]:
            self.partial += 1
        self.rolled += info["rolled"] > 0
        desc = info["desc"]
        if self.rate and rng.random() < self.io_cuts:
            k = rng.randint(1, max(10, int(self.rate * 0.3)))
            server.gen_env = {"ECHD_POWERCUT_KILL_AT": str(k)}
            self.io_armed += 1
            desc += "; next cut armed at I/O #%d" % k
        else:
            server.gen_env = {}
        try:
            server.start()
        except ServerError as e:
            raise StartFailure("echd did not start on the image (%s): %s; its log:\n%s"
                               % (info["desc"], str(e).splitlines()[0],
                                  server.last_start_log()))
        return desc

    def summary(self):
        return ("images %s; %d of %d armed cut(s) hit at an I/O; %d cut(s) found unsynced "
                "writes (%d writes), %d kept part of them, %d hit a sync being applied"
                % (", ".join("%s %d" % kv for kv in sorted(self.count.items())),
                   self.io_hit, self.io_armed, self.with_pending, self.pending_writes,
                   self.partial, self.rolled))


def run_cycles(server, crash, seed, min_cycles, max_cycles=None, deadline=None,
               uptime=(0.1, 0.5), log=None, log_every=10, tag=None):
    """Creates the group, runs the workload, crashes and restarts the server (crash: a
    SigkillCrash or PowercutCrash) at least min_cycles times (up to max_cycles while less
    than 80% of `deadline` seconds have passed; never past `deadline`), checks everything
    after each restart and once more at the end.

    Returns (cycles, model, seconds). Raises Violation (StartFailure if echd did not come
    back) at the first failed check, naming the seed, the cycle and the crash (for a power
    cut: the image style and seed); the exception carries .model and .cycles."""
    max_cycles = max_cycles or min_cycles
    rng = random.Random(seed)
    model = Model(seed, tag)
    c = RespConn(server.port, timeout=30)
    try:
        assert c.call("XGROUP", "CREATE", model.key, model.group, "0", "MKSTREAM",
                      "ENTRIESREAD", "0") == "OK"
    finally:
        c.close()
    work = Workload(server, model, seed)
    work.start()
    t0 = time.monotonic()
    cycles = 0
    alive = []

    def elapsed():
        return time.monotonic() - t0

    try:
        try:
            while cycles < max_cycles and (cycles < min_cycles or deadline is None
                                           or elapsed() < deadline * 0.8):
                if deadline is not None and elapsed() > deadline:
                    break
                cycles += 1
                with model.lock:
                    model.cycle = cycles
                crash.resume(server, rng)
                work.gate.resume()
                time.sleep(rng.uniform(*uptime))
                where = "%s %d" % (crash.label, cycles)
                try:
                    crash.kill(server, rng)
                except Violation as e:
                    raise Violation("seed %d, before %s: %s" % (seed, where, e))
                work.gate.close()
                try:
                    what = crash.restart(server, rng)
                except Violation as e:
                    raise type(e)("seed %d, %s: %s" % (seed, where, e))
                try:
                    check_state(server, model)
                except Violation as e:
                    raise Violation("%s (%s): %s" % (where, what, e))
                if log is not None and cycles % log_every == 0:
                    s = model.stats
                    log("# %s: %d cycles, %.0f s, acknowledged XADD %d, delivered %d, XACK %d"
                        % (crash.label, cycles, elapsed(), s["xadd"], s["delivered"],
                           s["acked"]))
            # a last round without a crash, then a look at everything
            work.gate.resume()
            time.sleep(0.3)
            work.gate.close()
            check_state(server, model)
        finally:
            alive = work.stop()
    except Violation as e:
        e.model, e.cycles = model, cycles
        raise
    assert not alive, "threads still running: %r" % alive
    if model.violations:
        raise Violation("seed %d: %s" % (seed, describe(model.violations)))
    return cycles, model, elapsed()


def stats_line(model):
    return ", ".join("%s %d" % kv for kv in sorted(model.stats.items()))


# ---------------------------------------------------------------------------
# power cuts
# ---------------------------------------------------------------------------

SHIM_NAME = "libechd-powercut.so"
REC = struct.Struct("<IIQQQ")            # struct rec in powercut.c (x86-64, little-endian)
REC_MAGIC, REC_WRITE, REC_TRUNC, REC_SYNC = 0x54554350, 1, 2, 3
SECTOR = 512


def find_shim(exe, workdir):
    """The shim: $ECHD_POWERCUT_SHIM, else the one built next to echd
    (<build>/tests/crash/libechd-powercut.so, echd being <build>/broker/echd), else built
    now from powercut.c with cc into workdir. Raises RuntimeError if there is none."""
    path = os.environ.get("ECHD_POWERCUT_SHIM")
    if path:
        if not os.path.isfile(path):
            raise RuntimeError("ECHD_POWERCUT_SHIM=%s: no such file" % path)
        return path
    build = os.path.dirname(os.path.dirname(os.path.realpath(exe)))
    path = os.path.join(build, "tests", "crash", SHIM_NAME)
    src = os.path.join(HERE, "powercut.c")
    if os.path.isfile(path) and os.path.getmtime(path) >= os.path.getmtime(src):
        return path
    return build_shim(workdir)


def build_shim(workdir):
    """Builds powercut.c, without sanitizers, into workdir; returns its path."""
    src = os.path.join(HERE, "powercut.c")
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise RuntimeError("no C compiler to build %s" % src)
    out = os.path.join(workdir, SHIM_NAME)
    p = subprocess.run([cc, "-std=c11", "-O2", "-shared", "-fPIC", "-o", out, src,
                        "-ldl", "-lpthread"], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("building %s with %s failed:\n%s" % (src, cc, p.stderr))
    return out


def preload_list(exe, shim):
    """LD_PRELOAD for echd: the shim, after a shared ASan runtime if echd or the shim use one
    (it must come first in the library list). clang's static runtime (tools/echd-dev's
    sanitizer build) lives in echd itself and needs nothing."""
    first = []
    for obj in (exe, shim):
        try:
            out = subprocess.run(["ldd", obj], capture_output=True, text=True,
                                 timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        for line in out.splitlines():
            m = re.search(r"(lib(?:asan|clang_rt\.asan[^ ]*)\.so[^ ]*) => (\S+)", line)
            if m and m.group(2) not in first:
                first.append(m.group(2))
    return ":".join(first + [shim])


class PowercutServer(Server):
    """echd under the power-cut shim. Generation N lives in root/gNNNN: data/ (echd's --dir)
    and powercut/ (the shim's durable copies and pending logs). power_cut() starts the next
    generation from an image of the last one; the port stays the same. The last `keep`
    generations are kept for a post-mortem (all with E2E_KEEP set)."""

    def __init__(self, exe, shim, extra_args=(), shim_env=None, root=None, keep=3):
        super().__init__("echd", exe, list(extra_args), root=root)
        os.rmdir(self.dir)
        self.shim = shim
        self.preload = preload_list(exe, shim)
        self.shim_env = dict(shim_env or {})
        self.gen_env = {}           # more environment, this generation only
        self.keep = keep
        self.gen = -1
        self.state = None
        self._next_gen()

    def _gen_dir(self, n):
        return os.path.join(self.root, "g%04d" % n)

    def _next_gen(self):
        self.gen += 1
        g = self._gen_dir(self.gen)
        self.dir = os.path.join(g, "data")
        self.state = os.path.join(g, "powercut")
        os.makedirs(self.dir)
        os.makedirs(self.state)
        old = self.gen - self.keep
        if old >= 0 and not os.environ.get("E2E_KEEP"):
            shutil.rmtree(self._gen_dir(old), ignore_errors=True)

    def env(self):
        e = dict(os.environ)
        e.pop("LD_PRELOAD", None)
        e.update(LD_PRELOAD=self.preload, ECHD_POWERCUT_DIR=self.dir,
                 ECHD_POWERCUT_STATE=self.state)
        e.update(self.shim_env)
        e.update(self.gen_env)
        return e

    def start(self, timeout=None):
        """Server.start(), with the shim; fails if the shim did not load."""
        timeout = 10.0 if timeout is None else timeout
        with open(self.log_path, "ab") as log:
            log.write(("\n=== start (generation %d, LD_PRELOAD=%s): %s\n"
                       % (self.gen, self.preload, " ".join(self.args()))).encode())
            log.flush()
            self.proc = subprocess.Popen(self.args(), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, cwd=self.root,
                                         env=self.env(), start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise ServerError("echd exited with status %s during start-up\n%s"
                                  % (self.proc.returncode, self.log_tail()))
            try:
                c = RespConn(self.port, timeout=1.0)
                try:
                    if c.call("PING") == "PONG":
                        break
                finally:
                    c.close()
            except (OSError, Closed, RespError, AssertionError, ValueError):
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise ServerError("echd did not answer PING within %.1f s\n%s"
                                  % (timeout, self.log_tail()))
            time.sleep(0.02)
        st = self.shim_stats()
        if st.get("pid") != self.proc.pid:
            pid = self.proc.pid
            self.kill()
            raise ServerError("the power-cut shim is not active in echd (pid %d; shim stats "
                              "%r; LD_PRELOAD=%s)\n%s" % (pid, st, self.preload,
                                                          self.log_tail()))
        return self

    def last_start_log(self):
        """What echd (and the shim) logged since the last start."""
        try:
            with open(self.log_path, "rb") as f:
                text = f.read().decode(errors="replace")
        except OSError:
            return "(no log)"
        return text[text.rfind("\n=== start") + 1:].rstrip()

    def shim_stats(self):
        """The shim's counters (its 'stats' file): pid, writes, bytes, syncs, dropped, ..."""
        try:
            with open(os.path.join(self.state, "stats")) as f:
                words = f.read().split()
        except OSError:
            return {}
        return {k: int(v) for k, v in zip(words[0::2], words[1::2]) if v.isdigit()}

    def power_cut(self, style, seed):
        """echd must be dead (kill it first). The next generation's data dir gets the image.
        Returns build_image()'s description."""
        assert not self.alive(), "power_cut() of a running echd"
        old = self.state
        self._next_gen()
        return build_image(old, self.dir, style, seed)


def read_log(path):
    """A pending log -> (records, torn_bytes); a record: (kind, seq, off, data)."""
    try:
        with open(path, "rb") as f:
            buf = memoryview(f.read())
    except FileNotFoundError:
        return [], 0
    recs, pos = [], 0
    while pos + REC.size <= len(buf):
        magic, kind, seq, off, n = REC.unpack_from(buf, pos)
        if magic != REC_MAGIC:
            break
        data = b""
        if kind == REC_WRITE:
            if pos + REC.size + n > len(buf):
                break
            data = buf[pos + REC.size:pos + REC.size + n]
            pos += REC.size + n
        else:
            pos += REC.size
        recs.append((kind, seq, off, data))
    return recs, len(buf) - pos


def _put(img, off, data):
    end = off + len(data)
    if end > len(img):
        img.extend(bytes(end - len(img)))
    img[off:end] = data


def build_image(state_dir, out_dir, style, seed, sector=SECTOR):
    """What a disk holds after a power cut, from the shim's state: per data file its durable
    copy; a log that ends in the middle of applying a sync (a SYNC marker) is rolled forward
    (that sync had not returned: the disk may hold all of it). Then, by style:
      durable  nothing more;
      all      every write not yet synced (as if the disk had written everything back);
      subset   per sector, the first k of the unsynced writes to it, k random in 0..n: a disk
               writes back dirty pages in any order, never a page's older contents after
               its newer ones, and a sector either entirely or not at all.
    Writes the files into out_dir (lock.mdb is not kept: LMDB rebuilds it). Returns a dict:
    desc (a line naming style, seed and what was kept), pending (unsynced writes),
    pending_sectors, kept_sectors, rolled (records rolled forward)."""
    rng = random.Random(seed)
    parts, pending, psec, ksec, rolled = [], 0, 0, 0, 0
    for dpath in sorted(glob.glob(os.path.join(state_dir, "*.durable"))):
        name = os.path.basename(dpath)[:-len(".durable")]
        with open(dpath, "rb") as f:
            img = bytearray(f.read())
        durable_size = len(img)
        recs, torn = read_log(os.path.join(state_dir, name + ".pending"))
        marks = [i for i, r in enumerate(recs) if r[0] == REC_SYNC]
        if marks:
            for kind, _, off, data in recs[:marks[-1]]:
                if kind == REC_WRITE:
                    _put(img, off, data)
                elif kind == REC_TRUNC:
                    del img[off:]
                    img.extend(bytes(max(0, off - len(img))))
            rolled += marks[-1]
            recs = recs[marks[-1] + 1:]
        writes = [r for r in recs if r[0] != REC_SYNC]
        pending += len(writes)
        # history: per sector, how many pending writes touch it; k of them are kept
        hist = {}
        for kind, _, off, data in writes:
            if kind == REC_WRITE and len(data):
                for s in range(off // sector, (off + len(data) - 1) // sector + 1):
                    hist[s] = hist.get(s, 0) + 1
        if style == "durable":
            keep = {s: 0 for s in hist}
        elif style == "all":
            keep = dict(hist)
        elif style == "subset":
            keep = {s: rng.randint(0, n) for s, n in sorted(hist.items())}
        else:
            raise ValueError("image style %r" % style)
        seen = {}
        for kind, _, off, data in writes:
            if kind == REC_TRUNC:
                if style == "all" or (style == "subset" and rng.random() < 0.5):
                    del img[off:]
                    img.extend(bytes(max(0, off - len(img))))
                continue
            end = off + len(data)
            for s in range(off // sector, (end - 1) // sector + 1):
                rank = seen.get(s, 0)
                seen[s] = rank + 1
                if rank < keep[s]:
                    a, b = max(off, s * sector), min(end, (s + 1) * sector)
                    _put(img, a, data[a - off:b - off])
        kept = sum(1 for s, k in keep.items() if k > 0)
        psec += len(hist)
        ksec += kept
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(img)
        parts.append("%s %d B synced, %d unsynced write(s) on %d sector(s), %d kept%s%s"
                     % (name, durable_size, len(writes), len(hist), kept,
                        ", %d rolled forward" % marks[-1] if marks else "",
                        ", %d B torn" % torn if torn else ""))
    if not parts:
        raise RuntimeError("no durable copies in %s: the shim tracked nothing" % state_dir)
    return dict(desc="image '%s' seed %d from %s: %s" % (style, seed, state_dir, "; ".join(parts)),
                pending=pending, pending_sectors=psec, kept_sectors=ksec, rolled=rolled)


def powercut_cycles(exe, shim, seed, min_cycles, max_cycles=None, deadline=None,
                    extra_args=(), shim_env=None, styles=None, log=None, root=None):
    """run_cycles() with power cuts against a fresh PowercutServer. Returns
    (cycles, model, seconds, crash, server_stats); the data is removed unless the run failed
    or E2E_KEEP is set (the exception's message then names the directory)."""
    root = root or tempfile.mkdtemp(prefix="echd-powercut-")
    srv = PowercutServer(exe, shim, extra_args, shim_env=shim_env, root=root)
    crash = PowercutCrash(styles) if styles else PowercutCrash()
    ok = False
    try:
        srv.start()
        cycles, model, secs = run_cycles(srv, crash, seed, min_cycles, max_cycles, deadline,
                                         log=log)
        st = srv.shim_stats()
        ok = True
        return cycles, model, secs, crash, st
    except Violation as e:
        e.args = ("%s\n(data kept in %s; echd log %s)" % (e, root, srv.log_path),)
        raise
    finally:
        srv.kill()
        if ok and not os.environ.get("E2E_KEEP"):
            shutil.rmtree(root, ignore_errors=True)


def short_reason(exc):
    """One line on what a failed check found."""
    if isinstance(exc, StartFailure):
        text = str(exc)
        words = [ln.split(" # ", 1)[-1] for ln in text.splitlines() if " # " in ln]
        m = re.search(r"exited with status (-?\d+)", text)
        if words:
            return "echd cannot open the image (%s)" % words[0]
        if m and int(m.group(1)) < 0:
            return "echd crashed opening the image (%s)" % signal.Signals(-int(m.group(1))).name
        return "echd did not start on the image (%s)" % text.splitlines()[0][-200:]
    model = getattr(exc, "model", None)
    if model is None or not model.violations:
        return str(exc).splitlines()[0][:200]
    v = model.violations
    missing = sum(1 for m in v if "acknowledged" in m and m.endswith("is missing"))
    gone = any("is gone" in m for m in v)
    return "%d violation(s): %d acknowledged XADD(s) missing%s" % (
        len(v), missing, ", the stream itself is gone" if gone else "")


def broken_trials(exe, shim, seed, trials, max_cuts=5, extra_args=(), log=None):
    """The same power cuts against a broken build: fsync/fdatasync of the data file do
    nothing (ECHD_POWERCUT_DROP_SYNC=1: what MDB_NOSYNC, or replies sent before the flush,
    leave on the disk), with a kernel-like writeback every 0 (never), 50 or 200 ms. Each
    trial is a fresh server cut up to max_cuts times, until a check fails (a cut that lost
    nothing acknowledged leaves a state the model still matches, so the next cut continues
    from it). Returns a list of (line, caught, how, acknowledged XADDs, cuts)."""
    rng = random.Random(seed)
    out = []
    for i in range(trials):
        wb = (0, 50, 200)[i % 3]
        style = ("durable", "subset")[(i // 3) % 2]
        env = {"ECHD_POWERCUT_DROP_SYNC": "1", "ECHD_POWERCUT_WRITEBACK_MS": str(wb)}
        tseed = rng.randrange(1 << 31)
        root = tempfile.mkdtemp(prefix="echd-powercut-broken-")
        srv = PowercutServer(exe, shim, extra_args, shim_env=env, root=root)
        caught, how, xadd, cuts = False, "no violation found", -1, max_cuts
        found = how
        try:
            srv.start()
            exc = None
            try:
                cuts, model, _ = run_cycles(srv, PowercutCrash((style,), io_cuts=0), tseed,
                                            max_cuts, uptime=(0.3, 0.6))
                xadd = model.stats["xadd"]
            except Violation as e:
                exc = e
            except (RespError, Closed, ServerError, OSError) as e:
                # the broken image made echd refuse its data ("stored data is corrupt"),
                # fail to start, or drop the connection: caught just the same
                exc = e
            if exc is not None:
                caught, how = True, str(exc)
                if getattr(exc, "model", None) is not None:
                    xadd, cuts = exc.model.stats["xadd"], exc.cycles
                found = short_reason(exc) if isinstance(exc, Violation) else (
                    "echd failed on the broken image: %s" % str(exc).splitlines()[0][:200])
        finally:
            srv.kill()
            if not os.environ.get("E2E_KEEP"):
                shutil.rmtree(root, ignore_errors=True)
        line = "trial %d (writeback %s, image '%s', seed %d): %s" % (
            i + 1, "%d ms" % wb if wb else "never", style, tseed,
            "CAUGHT at cut %d: %s" % (cuts, found) if caught
            else "not caught in %d cuts" % cuts)
        if log is not None:
            log("# broken build " + line)
        out.append((line, caught, how, xadd, cuts))
    return out


# ---------------------------------------------------------------------------
# the shim's own test
# ---------------------------------------------------------------------------

_SELFTEST_CHILD = r"""
import os, signal, sys
d = sys.argv[1]
fd = os.open(os.path.join(d, "f"), os.O_RDWR | os.O_CREAT, 0o644)
os.pwrite(fd, b"A" * 4096, 0)
os.fdatasync(fd)
os.pwrite(fd, b"B" * 4096, 4096)
os.pwrite(fd, b"b" * 100, 4096 + 1000)
os.lseek(fd, 8192, os.SEEK_SET)
os.writev(fd, [b"C" * 1000, b"D" * 3096])
g = os.open(os.path.join(d, "g"), os.O_WRONLY | os.O_CREAT | os.O_DSYNC, 0o644)
os.write(g, b"G" * 10)
lk = os.open(os.path.join(d, "lock.mdb"), os.O_RDWR | os.O_CREAT, 0o644)
os.write(lk, b"L")
print("reached the end", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def shim_selftest(shim, workdir):
    """Checks the shim and build_image() on a small Python program that writes, syncs and
    kills itself (the shim must be one that loads into any process: not sanitizer-
    instrumented). Raises AssertionError; returns a one-line summary."""
    def run(name, env_extra, arm=False):
        root = os.path.join(workdir, name)
        data, state = os.path.join(root, "data"), os.path.join(root, "powercut")
        os.makedirs(data)
        os.makedirs(state)
        if arm:
            open(os.path.join(state, "arm"), "w").close()
        env = dict(os.environ, LD_PRELOAD=shim, ECHD_POWERCUT_DIR=data,
                   ECHD_POWERCUT_STATE=state, **env_extra)
        p = subprocess.run([sys.executable, "-c", _SELFTEST_CHILD, data], env=env,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == -signal.SIGKILL, (name, p.returncode, p.stdout, p.stderr)

        def image(style, seed=1):
            out = os.path.join(root, "img-%s-%d" % (style, seed))
            os.makedirs(out)
            info = build_image(state, out, style, seed)
            files = {}
            for n in os.listdir(out):
                with open(os.path.join(out, n), "rb") as f:
                    files[n] = f.read()
            return files, info
        return p, state, image

    A, B, C, D = b"A" * 4096, b"B" * 4096, b"C" * 1000, b"D" * 3096
    b2 = B[:1000] + b"b" * 100 + B[1100:]
    real_all = A + b2 + C + D

    # real mode
    p, state, image = run("real", {})
    assert "reached the end" in p.stdout, p.stderr
    assert sorted(os.listdir(state)) == ["f.durable", "f.pending", "g.durable", "g.pending",
                                         "stats"], os.listdir(state)
    files, info = image("durable")
    assert files == {"f": A, "g": b"G" * 10}, ("durable image", {k: len(v) for k, v in
                                                                 files.items()})
    assert info["pending"] == 3, info
    files, _ = image("all")
    assert files["f"] == real_all, "'all' image"
    b_only = A + B + C + D          # before the second write to sectors 9 and 10
    seen = set()
    for seed in range(40):
        f = image("subset", seed)[0]["f"]
        assert f[:4096] == A, "a synced page lost"
        # per sector: unwritten (absent or zeros), or the state after a prefix of its writes
        for sec in range(8, len(real_all) // 512):
            lo, hi = sec * 512, (sec + 1) * 512
            got = f[lo:hi]
            ok = (got in (real_all[lo:hi], b_only[lo:hi]) or got == bytes(len(got)))
            assert ok, ("subset image, seed %d, sector %d: %r" % (seed, sec, got[:16]))
            seen.add((sec, "final" if got == real_all[lo:hi] else
                      "first" if got == b_only[lo:hi] else "none"))
    assert {(9, "final"), (9, "first"), (9, "none")} <= seen, ("the subsets never varied",
                                                               sorted(seen))
    # a kill while a sync was being applied is rolled forward; a torn record is ignored
    with open(os.path.join(state, "f.pending"), "ab") as f:
        f.write(REC.pack(REC_MAGIC, REC_SYNC, 99, 0, 0) + REC.pack(REC_MAGIC, REC_WRITE, 100,
                                                                    0, 4096)[:20])
    files, info = image("durable", 2)
    assert files["f"] == real_all and info["rolled"] == 3, ("roll forward", info)

    # broken mode: nothing synced, O_DSYNC included
    p, state, image = run("drop", {"ECHD_POWERCUT_DROP_SYNC": "1"})
    files, info = image("durable")
    assert files == {"f": b"", "g": b""}, ("dropped syncs", {k: len(v) for k, v in
                                                             files.items()})
    assert image("all")[0]["f"] == real_all

    # a cut at an I/O: before the 3rd tracked write/sync (pwrite A, fdatasync, [pwrite B])
    p, state, image = run("cut", {"ECHD_POWERCUT_KILL_AT": "3"}, arm=True)
    assert "reached the end" not in p.stdout and "power cut before I/O #3" in p.stderr, (
        p.stdout, p.stderr)
    files, info = image("all")
    assert files == {"f": A}, {k: len(v) for k, v in files.items()}
    return "shim self-test passed (sync, O_DSYNC, writev, per-sector subsets, roll-forward, " \
           "torn record, dropped syncs, cut at an I/O)"
