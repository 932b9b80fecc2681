"""Differential test: random stream and group commands, sent to echd and to Debian's
redis-server side by side, must get the same replies.

The commands are drawn from a small space on purpose: two keys, two groups, three consumers,
ids 0-0 to 12-3, small counts, every option of XADD, XTRIM, XRANGE, XREVRANGE, XREAD,
XGROUP, XREADGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM, XINFO and XSETID, some wrong
arguments, some commands in MULTI/EXEC, some reads with BLOCK 1 (nothing else writes, so
they time out or answer at once). So they collide: trims that cut entries still pending,
claims of deleted entries, groups destroyed under their consumers, ids at or below the top
item. Each run sets stream-node-max-entries to 2, 3, 5 or 100 on both servers, so that node
boundaries, ~ trimming and nodes left with no live entries come up often. One run kills and
restarts echd as it goes; another sends random arguments to every stream command.

Each run is RESP2 or RESP3 and has a seed; a failure names the seed, the command and the
commands before it on the same keys. DIFF_SEED=<seed> in the environment replays it:

    DIFF_SEED=123 run.py --echd build/broker/echd -k 18-differential

The oracle is Redis 7.0; echd follows 7.4, so where those two differ the comparison leaves
the field out (each case below says why):
- idle, seen-time, active-time and inactive are clocks;
- lag: echd gives the exact count where Redis says NULL or a stale count after trimming
  (docs/compatibility.md);
- entries-read: after trimming left a group's cursor before the first entry, 7.0 goes on
  counting from the stale counter, later Redis (and echd) recount it from the stream (Redis
  #13958); a random run soon meets that case;
- recorded-first-entry-id is 7.2's; idmp-duration, idmp-maxsize, pids-tracked, iids-tracked,
  iids-added and iids-duplicates are 8.6's (idempotent producers, tested in 25-idmp);
- radix-tree-nodes counts the nodes of Redis' radix tree, which echd does not have
  (docs/compatibility.md); radix-tree-keys, its node count, is compared;
- XCLAIM and XAUTOCLAIM create their consumer in 7.4 even when they claim nothing, and 7.0
  does not: so XGROUP CREATECONSUMER's 0 or 1, consumer counts, and consumers without
  pending entries in XINFO CONSUMERS are not compared;
- XSETID checks the current max-deleted-entry-id first in 7.4, not at all in 7.0: the test
  only sets ids at or above it, which both accept or refuse alike;
- 7.4 names the command in quotes in "Unbalanced 'xread' list of streams", and takes + as an
  XREAD id.
"""

import os
import random
import shutil
import signal
import time

from echdtest import RespError, Server

ECHD_ONLY = "it runs a redis-server of its own beside echd and compares the two"
TIMEOUT = 180

COMMANDS = 3000        # per run
KEYS = ("s", "t")
GROUPS = ("g", "h")
CONSUMERS = ("a", "b", "c")
CLOCK_FIELDS = {b"idle", b"seen-time", b"active-time", b"inactive"}
IDMP_FIELDS = {b"idmp-duration", b"idmp-maxsize", b"pids-tracked", b"iids-tracked",
               b"iids-added", b"iids-duplicates"}
NACK_FIELDS = {b"nacked-count"}   # Redis 8.8's XINFO STREAM FULL; 7.0 has none
SKIPPED_FIELDS = CLOCK_FIELDS | IDMP_FIELDS | NACK_FIELDS | {b"lag", b"entries-read",
                                               b"recorded-first-entry-id", b"consumers",
                                               b"radix-tree-nodes"}


def redis_exe():
    exe = shutil.which("redis-server") or "/usr/bin/redis-server"
    assert os.access(exe, os.X_OK), ("redis-server is not installed (tools/echd-dev test "
                                     "installs it): the oracle is missing")
    return exe


class Gen:
    """Random commands over the small space above."""

    def __init__(self, rng, echd):
        self.r = rng
        self.echd = echd    # for XSETID: echd's max-deleted-entry-id of the key

    def pick(self, seq):
        return self.r.choice(seq)

    def sid(self):
        return "%d-%d" % (self.r.randint(0, 12), self.r.randint(0, 3))

    def range_id(self):
        x = self.r.random()
        if x < 0.1:
            return "-"
        if x < 0.2:
            return "+"
        s = str(self.r.randint(0, 12)) if self.r.random() < 0.3 else self.sid()
        return "(" + s if self.r.random() < 0.15 else s

    def min_idle(self):
        """0, or an idle time no entry of a run reaches: either way not a matter of clocks."""
        return self.pick(("0", "0", "0", "86400000"))

    def count(self):
        return "-1" if self.r.random() < 0.05 else str(self.pick((0, 1, 2, 3, 5, 10, 100)))

    def maybe(self, p, *words):
        return list(words) if self.r.random() < p else []

    def xadd(self, k):
        a = ["XADD", k] + self.maybe(0.1, "NOMKSTREAM")
        if self.r.random() < 0.25:
            kind = self.pick(("MAXLEN", "MINID"))
            a += [kind] + self.maybe(0.5, self.pick(("=", "~")))
            a.append(self.count() if kind == "MAXLEN" else self.sid())
            a += self.maybe(0.2, "LIMIT", self.count())
        a.append(self.pick((self.sid(), self.sid(), "%d-*" % self.r.randint(0, 12))))
        return a + ["f", str(self.r.randint(0, 9))] + self.maybe(0.2, "odd")

    def xsetid(self, k):
        floor = (0, 0)
        self.echd.send("XINFO", "STREAM", k)
        info = self.echd.read()
        if isinstance(info, list):
            d = dict(zip(info[0::2], info[1::2]))
        else:
            d = info if isinstance(info, dict) else {}
        if b"max-deleted-entry-id" in d:
            ms, seq = d[b"max-deleted-entry-id"].split(b"-")
            floor = (int(ms), int(seq))
        ms = self.r.randint(floor[0], 13)
        seq = self.r.randint(floor[1] if ms == floor[0] else 0, 3)
        a = ["XSETID", k, "%d-%d" % (ms, seq)]
        a += self.maybe(0.3, "ENTRIESADDED", self.count())
        if self.r.random() < 0.3:
            a += ["MAXDELETEDID", "%d-%d" % (self.r.randint(floor[0], ms), 0)]
        return a

    def expiry(self, k):
        """Expiry commands whose replies do not depend on the moment they run: times far
        ahead (2096) or in the past (the key goes at once), and the getters of those."""
        n = self.r.randint(0, 5)
        flag = self.maybe(0.5, self.pick(("NX", "XX", "GT", "LT")))
        if n == 0:
            return ["PEXPIREAT", k, self.pick(("4000000000000", "4000000001000", "1"))] + flag
        if n == 1:
            return ["EXPIREAT", k, self.pick(("4000000000", "4000000002", "0"))] + flag
        if n == 2:
            return ["EXPIRE", k, self.pick(("0", "-1"))] + flag
        if n == 3:
            return ["PERSIST", k]
        return [self.pick(("EXPIRETIME", "PEXPIRETIME")), k]

    def next_in_multi(self):
        """A command to queue: not XSETID, whose floor (read from echd now) an earlier
        command of the same transaction may move."""
        while True:
            cmd = self.next()
            if cmd[0] != "XSETID":
                return cmd

    def next(self):
        k, g, c = self.pick(KEYS), self.pick(GROUPS), self.pick(CONSUMERS)
        n = self.r.randint(0, 19)
        if n <= 3:
            return self.xadd(k)
        if n == 4:
            return ["XDEL", k] + [self.sid() for _ in range(self.r.randint(0, 3))]
        if n == 5:
            kind = self.pick(("MAXLEN", "MAXLEN", "MINID", "MINID", "SIZE"))
            a = ["XTRIM", k, kind] + self.maybe(0.5, self.pick(("=", "~")))
            a.append(self.count() if kind == "MAXLEN" else self.sid())
            return a + self.maybe(0.2, "LIMIT", self.count())
        if n == 6:
            return ([self.pick(("XRANGE", "XREVRANGE")), k, self.range_id(), self.range_id()]
                    + self.maybe(0.4, "COUNT", self.count()))
        if n == 7:
            if self.r.random() < 0.2:
                return self.pick((["TOUCH", k], ["OBJECT", "ENCODING", k],
                                  ["OBJECT", "REFCOUNT", k], ["OBJECT", "FREQ", k],
                                  ["MOVE", k, self.pick(("1", "0", "x"))],
                                  ["COPY", k, self.pick(KEYS)] + self.maybe(0.5, "REPLACE")))
            return [self.pick(("XLEN", "EXISTS", "TYPE")), k]
        if n == 8:
            sub = self.pick(("CREATE", "SETID", "DESTROY", "CREATECONSUMER", "DELCONSUMER"))
            if sub in ("CREATE", "SETID"):
                a = ["XGROUP", sub, k, g, self.pick(("$", "0", self.sid()))]
                if sub == "CREATE":
                    a += self.maybe(0.3, "MKSTREAM")
                return a + self.maybe(0.2, "ENTRIESREAD", self.count())
            if sub == "DESTROY":
                return ["XGROUP", "DESTROY", k, g]
            return ["XGROUP", sub, k, g, c]
        if n in (9, 10):
            a = (["XREADGROUP", "GROUP", g, c] + self.maybe(0.5, "COUNT", self.count())
                 + self.maybe(0.2, "NOACK") + self.maybe(0.2, "BLOCK", "1"))
            if self.r.random() < 0.3:  # both keys: the group must exist on each
                return a + ["STREAMS", "s", "t", self.pick((">", "0")), self.pick((">", "0"))]
            return a + ["STREAMS", k, self.pick((">", ">", "0", self.sid()))]
        if n == 11:
            return ["XACK", k, g] + [self.sid() for _ in range(self.r.randint(0, 3))]
        if n == 12:
            if self.r.random() < 0.4:
                return ["XPENDING", k, g]
            return (["XPENDING", k, g] + self.maybe(0.3, "IDLE", self.min_idle())
                    + [self.range_id(), self.range_id(), self.count()] + self.maybe(0.4, c))
        if n == 13:
            a = ["XCLAIM", k, g, c, self.min_idle()]
            a += [self.sid() for _ in range(self.r.randint(1, 3))]
            a += self.maybe(0.3, "JUSTID") + self.maybe(0.3, "FORCE")
            a += self.maybe(0.1, "IDLE", "1000") + self.maybe(0.1, "TIME", "1")
            return (a + self.maybe(0.2, "RETRYCOUNT", self.count())
                    + self.maybe(0.2, "LASTID", self.sid()))
        if n == 14:
            return (["XAUTOCLAIM", k, g, c, self.min_idle(), self.pick(("0", "-", self.sid()))]
                    + self.maybe(0.5, "COUNT", self.count()) + self.maybe(0.3, "JUSTID"))
        if n == 15:
            return ["XINFO", self.pick(("GROUPS", "CONSUMERS")), k] + self.maybe(0.5, g)
        if n == 16:
            return self.xsetid(k)
        if n == 17:
            return ["XINFO", "STREAM", k] + self.maybe(0.3, "FULL", "COUNT", self.count())
        if n == 18:
            return self.expiry(k)
        other = self.pick(KEYS)
        return (["XREAD"] + self.maybe(0.5, "COUNT", self.count())
                + self.maybe(0.2, "BLOCK", "1")
                + ["STREAMS", k, other, self.pick(("0", "$", self.sid())), self.sid()])


def comparable(x, cmd):
    """x with what the two versions may differ in taken out (see the module's docstring)."""
    head = [w.upper() for w in cmd[:2]]
    if isinstance(x, RespError):
        # 7.0: "Unbalanced XREAD list", 7.4: "Unbalanced 'xread' list"
        return ("error", "ERR Unbalanced" if str(x).startswith("ERR Unbalanced") else str(x))
    if head == ["XGROUP", "CREATECONSUMER"]:
        return "0 or 1"
    if head == ["XINFO", "STREAM"] and "FULL" in cmd:
        return full_comparable(x)
    if head[0] == "XINFO" and isinstance(x, list) and head[1] in ("GROUPS", "CONSUMERS"):
        rows = [fields(e) for e in x]
        return [e for e in rows if head[1] == "GROUPS" or e.get(b"pending")]
    if head[0] == "XINFO":
        return fields(x)
    if head[0] == "XPENDING" and len(cmd) > 3 and isinstance(x, list):
        return [[e[0], e[1], "idle", e[3]] for e in x]
    return x


def exec_comparable(x, queued):
    """EXEC's reply: each element as its own command's, or the error that aborted it."""
    if isinstance(x, list) and len(x) == len(queued):
        return [comparable(e, c) for e, c in zip(x, queued)]
    return comparable(x, ["EXEC"])


def fields(x):
    """An XINFO reply (a RESP2 flat list or a RESP3 map) as a dict, skipped fields out."""
    if isinstance(x, list):
        x = dict(zip(x[0::2], x[1::2]))
    return {k: v for k, v in x.items() if k not in SKIPPED_FIELDS}


def full_comparable(x):
    """XINFO STREAM FULL: entries, counters and PELs; delivery times and consumer clocks out,
    and consumers without pending entries out (see the docstring)."""
    def as_dict(v):
        return v if isinstance(v, dict) else dict(zip(v[0::2], v[1::2]))
    d = as_dict(x)
    out = {k: v for k, v in d.items() if k not in SKIPPED_FIELDS and k != b"groups"}
    groups = []
    for g in d.get(b"groups") or []:
        gd = as_dict(g)
        row = {k: v for k, v in gd.items()
               if k not in SKIPPED_FIELDS | {b"pending", b"consumers"}}
        # pending: [id, consumer, delivery time, deliveries]; a consumer's: [id, time, n]
        row[b"pending"] = [[p[0], p[1], p[3]] for p in gd.get(b"pending") or []]
        cons = []
        for c in gd.get(b"consumers") or []:
            cd = as_dict(c)
            if cd.get(b"pel-count"):
                cons.append([cd[b"name"], cd[b"pel-count"],
                             [[p[0], p[2]] for p in cd.get(b"pending") or []]])
        row[b"consumers"] = cons
        groups.append(row)
    out[b"groups"] = groups
    return out


def run_against_redis(server, resp, seed, kill_every=0, pipeline=0):
    """kill_every > 0: the run uses an echd of its own, killed with SIGKILL and restarted
    every kill_every commands (between transactions); Redis runs on. What was acknowledged
    must be all there, so the replies stay the same. pipeline > 0: commands go in pipelines
    of 1 to pipeline commands (transactions included), all sent before the first reply is
    read, so that echd runs them in one batch; XSETID is left out then (its floor is read
    from echd when it is drawn, before the commands sent ahead of it ran)."""
    redis = Server("redis", redis_exe())
    try:
        redis.start()
        rng = random.Random(seed)
        # small nodes, so that node boundaries, ~ trimming and empty nodes come up often
        node = rng.choice((2, 3, 5, 100))
        if kill_every:
            server = server.spawn("--stream-node-max-entries", str(node))
        e, r = server.raw(), redis.raw()
        e.call("FLUSHALL")
        for conn in (e, r):
            assert conn.call("CONFIG", "SET", "stream-node-max-entries", str(node)) == "OK"
            if resp == 3:
                conn.call("HELLO", "3")
        gen = Gen(rng, e)
        kills = 0
        history = []
        queued = None    # the commands of an open MULTI
        i = 0
        while i < COMMANDS:
            if kill_every and queued is None and i >= (kills + 1) * kill_every:
                server.restart(kill=signal.SIGKILL)
                e = gen.echd = server.raw()
                if resp == 3:
                    e.call("HELLO", "3")
                kills += 1
                history.append((i, ["(echd killed and restarted)"], None))
            batch = []
            for _ in range(rng.randint(1, pipeline) if pipeline else 1):
                if rng.random() < 0.04:
                    batch += [["MULTI"]] + [gen.next_in_multi()
                                            for _ in range(rng.randint(1, 4))]
                    batch.append(["DISCARD"] if rng.random() < 0.1 else ["EXEC"])
                else:
                    batch.append(gen.next_in_multi() if pipeline else gen.next())
            for cmd in batch if pipeline else []:
                e.send(*cmd)
                r.send(*cmd)
            for cmd in batch:
                if not pipeline:
                    e.send(*cmd)
                    r.send(*cmd)
                got, want = e.read(cmd), r.read(cmd)
                history.append((i, cmd, got))
                i += 1
                if cmd == ["MULTI"]:
                    queued = []
                    if got == want:
                        continue
                elif cmd in (["EXEC"], ["DISCARD"]):
                    same = (exec_comparable(got, queued) == exec_comparable(want, queued)
                            if cmd == ["EXEC"] else got == want)
                    queued = None
                    if same:
                        continue
                elif queued is not None:
                    queued.append(cmd)
                    if got == want:
                        continue
                elif comparable(got, cmd) == comparable(want, cmd):
                    continue
                keys = set(w for c in [cmd] + (queued or []) for w in c[1:]) & set(KEYS)
                before = ["  #%d %s -> %r" % (j, " ".join(c), g) for j, c, g in history[-40:-1]
                          if keys & set(c[1:]) or c[0] in ("MULTI", "EXEC", "DISCARD")
                          or c[0].startswith("(")]
                raise AssertionError(
                    "RESP%d, seed %d, stream-node-max-entries %d, command #%d: %s\n"
                    "  echd:  %r\n  redis: %r\n"
                    "the commands before it on its keys:\n%s"
                    % (resp, seed, node, i - 1, " ".join(cmd), got, want,
                       "\n".join(before[-15:])))
        e.call("HELLO", "2")
        e.call("CONFIG", "SET", "stream-node-max-entries", "100")
        assert kills == (COMMANDS - 1) // kill_every if kill_every else kills == 0, kills
        return history
    finally:
        redis.stop()
        redis.remove()


def check_run(server, resp, kill_every=0, pipeline=0):
    seed = int(os.environ.get("DIFF_SEED") or time.time() * 1000) % (1 << 31)
    history = run_against_redis(server, resp, seed, kill_every, pipeline)
    # the run did exercise the commands it compares, with and without errors
    names = {c[0] for _, c, _ in history}
    assert {"XADD", "XREADGROUP", "XCLAIM", "XAUTOCLAIM", "XPENDING", "EXEC"} <= names, names
    assert pipeline or "XSETID" in names, names
    errors = sum(isinstance(g, RespError) for _, _, g in history)
    delivered = sum(1 for _, c, g in history if c[0] == "XREADGROUP" and g)
    assert 0 < errors < len(history) and delivered > 0, (errors, delivered, seed)
    print("# 18-differential: RESP%d seed %d: %d commands, %d errors, %d XREADGROUP "
          "deliveries, same replies" % (resp, seed, len(history), errors, delivered),
          flush=True)


WORDS = ("s", "t", "g", "h", "a", "0", "1", "-1", "5", "$", ">", "+", "-", "1-1",
         "2-*", "(1-1", "0-0", "18446744073709551615", "18446744073709551616", "1.5", "x",
         "", "MAXLEN", "MINID", "~", "=", "LIMIT", "NOMKSTREAM", "COUNT", "BLOCK", "STREAMS",
         "GROUP", "NOACK", "IDLE", "TIME", "RETRYCOUNT", "FORCE", "JUSTID", "LASTID",
         "ENTRIESREAD", "ENTRIESADDED", "MAXDELETEDID", "MKSTREAM", "FULL", "f", "v")
ARGUMENT_COMMANDS = ("XADD", "XTRIM", "XRANGE", "XREVRANGE", "XDEL", "XLEN", "XREAD",
                     "XREADGROUP", "XACK", "XPENDING", "XCLAIM", "XAUTOCLAIM", "XSETID",
                     "XGROUP CREATE", "XGROUP SETID", "XGROUP DESTROY", "XGROUP CREATECONSUMER",
                     "XGROUP DELCONSUMER", "XINFO STREAM", "XINFO GROUPS", "XINFO CONSUMERS")


def test_random_arguments(server):
    """Stream commands with 0 to 9 arguments drawn from their own option words, ids,
    numbers at and past the limits, and junk: the same reply, mostly the same error, as
    Redis (which of several problems a command reports first, too). BLOCK is given 0 or
    small timeouts only on XREAD over keys with entries, so nothing waits."""
    seed = int(os.environ.get("DIFF_SEED") or time.time() * 1000) % (1 << 31)
    rng = random.Random(seed)
    redis = Server("redis", redis_exe())
    try:
        redis.start()
        e, r = server.raw(), redis.raw()
        e.call("FLUSHALL")
        setup = [["XADD", "s", "1-1", "f", "v"], ["XADD", "s", "2-1", "f", "v"],
                 ["XGROUP", "CREATE", "s", "g", "0"], ["XADD", "t", "1-1", "f", "v"]]
        for cmd in setup:
            assert e.call(*cmd) == r.call(*cmd), cmd
        errors = 0
        for i in range(COMMANDS):
            cmd = rng.choice(ARGUMENT_COMMANDS).split()
            cmd += [rng.choice(WORDS) for _ in range(rng.randint(0, 9))]
            if "BLOCK" in cmd:
                continue  # a blocked read would stall the comparison
            if cmd[0] == "XREAD" and "+" in cmd:
                continue  # XREAD's + (the last entry) is 7.4's
            e.send(*cmd)
            r.send(*cmd)
            got, want = e.read(cmd), r.read(cmd)
            errors += isinstance(got, RespError)
            assert comparable(got, cmd) == comparable(want, cmd), (
                "seed %d, #%d: %s\n  echd:  %r\n  redis: %r"
                % (seed, i, " ".join(repr(w) for w in cmd), got, want))
        assert errors > COMMANDS // 4, errors
        print("# 18-differential: random arguments, seed %d: %d commands, %d errors, same "
              "replies" % (seed, COMMANDS, errors), flush=True)
    finally:
        redis.stop()
        redis.remove()


def test_random_commands_resp2(server):
    check_run(server, 2)


def test_random_commands_resp3(server):
    check_run(server, 3)


def test_random_commands_pipelined(server):
    """The same, in pipelines of up to 40 commands: echd runs each in one batch, where
    XADDs keep their streams' rows in the batch's stream cache (stream_cache.c) and every
    other command must see them written."""
    check_run(server, 3, pipeline=40)


def test_random_commands_across_kills(server):
    """The same, with echd killed (SIGKILL) and restarted every 750 commands: after each
    restart it must answer as Redis, which was not restarted."""
    check_run(server, 2, kill_every=750)
