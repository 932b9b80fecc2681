"""INFO and its statistics: each field the tooling reads, changing as the commands that drive it
run; CONFIG RESETSTAT; the section selectors (plain INFO, default, all, everything, several
sections, unknown ones); redis-py and redis-cli reading it.

Sections and fields: server (redis_version, process_id, tcp_port, uptime_in_seconds), clients
(connected_clients, blocked_clients, maxclients), memory (used_memory, used_memory_rss),
persistence (rdb_changes_since_last_save as Redis' dirty counter counts), stats
(total_commands_processed, total_error_replies, rejected_connections,
instantaneous_ops_per_sec), commandstats, errorstats, keyspace.

echd only: echd_version; total_blocking_keys and total_blocking_keys_on_nokey (Redis 7.2
fields, 7.0 lacks them); LMDB's map size and used bytes; the commit statistics (commits, fsyncs,
avg_batch_size, last_commit_time_ms); a history XREADGROUP not counting as a change (Redis 7.0
counts it, 7.2+ counts only reads that deliver).
"""

import re
import signal
import socket
import time

from echdtest import Closed, RespConn, RespError, echd_only, fill, lmdb_only, wait_until

TIMEOUT = 60

CMDSTAT_RE = re.compile(r"^calls=(\d+),usec=(\d+),usec_per_call=(\d+\.\d\d),"
                        r"rejected_calls=(\d+),failed_calls=(\d+)$")


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def info_text(c, *sections):
    r = c.call("INFO", *sections)
    assert isinstance(r, bytes), r
    return r.decode()


def parse(text):
    """INFO text -> {field: value (str)}; checks the line format on the way."""
    out = {}
    for line in text.split("\r\n"):
        if not line or line.startswith("#"):
            continue
        assert ":" in line, "bad INFO line %r" % line
        k, v = line.split(":", 1)
        assert k not in out, "field %r twice" % k
        out[k] = v
    return out


def info(c, *sections):
    return parse(info_text(c, *sections))


def field(c, section, name, conv=int):
    d = info(c, section)
    assert name in d, "no %s in INFO %s: %r" % (name, section, sorted(d))
    return conv(d[name])


def headers(text):
    return [line[2:] for line in text.split("\r\n") if line.startswith("# ")]


def cmdstats(c):
    """INFO commandstats -> {command: dict(calls, usec, usec_per_call, rejected, failed)}."""
    text = info_text(c, "commandstats")
    assert headers(text) == ["Commandstats"], text
    out = {}
    for k, v in parse(text).items():
        assert k.startswith("cmdstat_"), k
        m = CMDSTAT_RE.match(v)
        assert m, "bad commandstats line %s:%s" % (k, v)
        calls, usec, per, rejected, failed = m.groups()
        calls, usec = int(calls), int(usec)
        if calls:
            assert abs(float(per) - usec / calls) <= 0.0051, (k, v)
        else:
            assert float(per) == 0, (k, v)
        out[k[len("cmdstat_"):]] = dict(calls=calls, usec=usec, usec_per_call=float(per),
                                        rejected=int(rejected), failed=int(failed))
    return out


def errorstats(c):
    text = info_text(c, "errorstats")
    assert headers(text) == ["Errorstats"], text
    out = {}
    for k, v in parse(text).items():
        assert k.startswith("errorstat_"), k
        m = re.match(r"^count=(\d+)$", v)
        assert m, "bad errorstats line %s:%s" % (k, v)
        out[k[len("errorstat_"):]] = int(m.group(1))
    return out


def dirty(c):
    return field(c, "persistence", "rdb_changes_since_last_save")


def commands(c):
    return field(c, "stats", "total_commands_processed")


def errors(c):
    return field(c, "stats", "total_error_replies")


def clients(c):
    return info(c, "clients")


def keyspace(c):
    text = info_text(c, "keyspace")
    assert headers(text) == ["Keyspace"], text
    out = {}
    for k, v in parse(text).items():
        assert re.match(r"^db\d+$", k), k
        m = re.match(r"^keys=(\d+),expires=0,avg_ttl=0(,.*)?$", v)
        assert m, "bad keyspace line %s:%s" % (k, v)
        out[k] = int(m.group(1))
    return out


# ---------------------------------------------------------------------------
# server
# ---------------------------------------------------------------------------

def test_info_server(server):
    c = server.raw()
    text = info_text(c, "server")
    assert text.startswith("# Server\r\n") and text.endswith("\r\n"), text[:40]
    assert headers(text) == ["Server"]
    d = parse(text)
    assert re.match(r"^\d+\.\d+\.\d+$", d["redis_version"]), d["redis_version"]
    assert int(d["process_id"]) == server.proc.pid
    assert int(d["tcp_port"]) == server.port
    up = int(d["uptime_in_seconds"])
    assert 0 <= up < 3600, up
    assert int(d["uptime_in_days"]) == up // 86400
    # uptime counts seconds
    wait_until(lambda: field(c, "server", "uptime_in_seconds") >= up + 1, timeout=4,
               what="uptime_in_seconds to grow")
    # a new process: a new pid, uptime from zero
    server.restart(kill=signal.SIGTERM)
    c = server.raw()
    d = info(c, "server")
    assert int(d["process_id"]) == server.proc.pid
    assert int(d["tcp_port"]) == server.port
    assert int(d["uptime_in_seconds"]) <= 2


@echd_only("echd_version is echd's own field; echd claims the Redis version whose semantics it "
           "implements (7.4)")
def test_info_server_echd(server):
    c = server.raw()
    d = info(c, "server")
    assert re.match(r"^\d+\.\d+\.\d+", d["echd_version"]), d["echd_version"]
    version = tuple(int(x) for x in d["redis_version"].split("."))
    assert version >= (7, 4, 0), d["redis_version"]
    # also in plain INFO
    assert "echd_version" in info(c)


# ---------------------------------------------------------------------------
# clients
# ---------------------------------------------------------------------------

def connected(c):
    return int(clients(c)["connected_clients"])


def test_info_connected_clients(server):
    c = server.raw()
    # the runner's FLUSHALL connection may still be closing: settle first
    wait_until(lambda: connected(c) == 1, what="connected_clients:1")
    extra = []
    for n in range(1, 4):
        x = server.raw()
        assert x.call("PING") == "PONG"
        extra.append(x)
        assert connected(c) == 1 + n
    r = server.client()
    assert r.ping() is True
    assert connected(c) == 5
    extra[0].close()
    wait_until(lambda: connected(c) == 4, what="connected_clients:4 after a close")
    for x in extra[1:]:
        x.close()
    r.connection_pool.disconnect()
    wait_until(lambda: connected(c) == 1, what="connected_clients:1 after all closed")


def test_info_blocked_clients(server):
    c = server.raw()
    assert clients(c)["blocked_clients"] == "0"
    c.call("XGROUP", "CREATE", "g1", "g", "$", "MKSTREAM")
    a = server.raw()
    a.send("XREAD", "BLOCK", "0", "STREAMS", "s1", "s2", "$", "$")
    wait_until(lambda: clients(c)["blocked_clients"] == "1", what="blocked_clients:1")
    b = server.raw()
    b.send("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "g1", ">")
    wait_until(lambda: clients(c)["blocked_clients"] == "2", what="blocked_clients:2")
    t = server.raw()
    t.send("XREAD", "BLOCK", "300", "STREAMS", "s3", "$")
    wait_until(lambda: clients(c)["blocked_clients"] == "3", what="blocked_clients:3")
    # a timeout unblocks
    assert t.read() is None
    wait_until(lambda: clients(c)["blocked_clients"] == "2", what="blocked_clients:2")
    # data unblocks
    c.call("XADD", "s2", "1-1", "f", "v")
    assert a.read() == [[b"s2", [[b"1-1", [b"f", b"v"]]]]]
    assert clients(c)["blocked_clients"] == "1"
    c.call("XADD", "g1", "1-1", "f", "v")
    assert b.read() == [[b"g1", [[b"1-1", [b"f", b"v"]]]]]
    assert clients(c)["blocked_clients"] == "0"
    # a blocked client that goes away
    b.send("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "g1", ">")
    wait_until(lambda: clients(c)["blocked_clients"] == "1", what="blocked_clients:1")
    b.close()
    wait_until(lambda: clients(c)["blocked_clients"] == "0", what="blocked_clients:0")


@echd_only("total_blocking_keys and total_blocking_keys_on_nokey are Redis 7.2 fields; 7.0 "
           "lacks them")
def test_info_blocking_keys(server):
    c = server.raw()

    def keys():
        d = clients(c)
        return (int(d["blocked_clients"]), int(d["total_blocking_keys"]),
                int(d["total_blocking_keys_on_nokey"]))
    assert keys() == (0, 0, 0)
    c.call("XGROUP", "CREATE", "q", "g", "$", "MKSTREAM")
    a = server.raw()
    a.send("XREAD", "BLOCK", "0", "STREAMS", "s1", "s2", "$", "$")
    wait_until(lambda: keys() == (1, 2, 0), what="1 client on 2 keys")
    b = server.raw()                       # a key already waited on is counted once
    b.send("XREAD", "BLOCK", "0", "STREAMS", "s1", "$")
    wait_until(lambda: keys() == (2, 2, 0), what="2 clients on 2 keys")
    # XREADGROUP waiters are unblocked when their key is deleted: the 'on nokey' keys
    d = server.raw()
    d.send("XREADGROUP", "GROUP", "g", "c1", "BLOCK", "0", "STREAMS", "q", ">")
    wait_until(lambda: keys() == (3, 3, 1), what="an XREADGROUP waiter")
    e = server.raw()
    e.send("XREADGROUP", "GROUP", "g", "c2", "BLOCK", "0", "STREAMS", "q", ">")
    wait_until(lambda: keys() == (4, 3, 1), what="two XREADGROUP waiters on one key")
    # XADD to s1 serves a and b: s2 (only a waited there) goes too
    c.call("XADD", "s1", "1-1", "f", "v")
    assert a.read()[0][0] == b"s1" and b.read()[0][0] == b"s1"
    assert keys() == (2, 1, 1)
    c.call("XADD", "q", "1-1", "f", "v")
    assert d.read()[0][0] == b"q"
    assert keys() == (1, 1, 1)
    e.close()
    wait_until(lambda: keys() == (0, 0, 0), what="nothing blocked")


def test_info_maxclients(server):
    c = server.raw()
    assert int(clients(c)["maxclients"]) > 0
    s = server.spawn("--maxclients", "7")
    x = s.raw()
    assert clients(x)["maxclients"] == "7"


# ---------------------------------------------------------------------------
# memory
# ---------------------------------------------------------------------------

def test_info_memory(server):
    c = server.raw()
    text = info_text(c, "memory")
    assert headers(text) == ["Memory"]
    d = parse(text)
    assert int(d["used_memory"]) > 0
    assert int(d["used_memory_rss"]) > 0
    assert d["used_memory_human"].endswith(("B", "K", "M", "G")), d["used_memory_human"]


@echd_only("LMDB's map size and used bytes are echd's fields")
@lmdb_only("INFO memory's lmdb_map_size and lmdb_used_bytes")
def test_info_memory_lmdb(server):
    s = server.spawn()                     # a fresh data file: no free pages to reuse
    c = s.raw()
    d = info(c, "memory")
    size, used = int(d["lmdb_map_size"]), int(d["lmdb_used_bytes"])
    assert size > 0 and 0 < used <= size, d
    # ~1.5 MB of entries use more of the map
    for b in range(10):
        c.pipeline([("XADD", "big", "*", "payload", "x" * 500) for _ in range(300)])
    d = info(c, "memory")
    assert int(d["lmdb_map_size"]) >= size
    assert int(d["lmdb_used_bytes"]) >= used + 1_000_000, (used, d["lmdb_used_bytes"])
    assert int(d["lmdb_used_bytes"]) <= int(d["lmdb_map_size"])


# ---------------------------------------------------------------------------
# persistence
# ---------------------------------------------------------------------------

def test_rdb_changes_since_last_save(server):
    """Counts writes as Redis' dirty counter does: one per entry added, deleted, trimmed or
    acknowledged, one per group or consumer created or destroyed, one per XREADGROUP that
    delivers new entries (however many); nothing for reads, errors and no-ops."""
    c = server.raw()
    steps = [
        ([("XADD", "s", "1-1", "f", "v")], 1),
        ([("XADD", "s", "2-1", "f", "v"), ("XADD", "s", "3-1", "f", "v")], 2),
        ([("XADD", "s", "3-5", "f", "v", "g", "h")], 1),
        ([("XADD", "s", "1-1", "f", "v")], 0),                      # error: below the top
        ([("XADD", "s")], 0),                                       # arity
        ([("XADD", "t", "1-1", "f", "v")], 1),
        ([("XGROUP", "CREATE", "s", "g", "0")], 1),
        ([("XGROUP", "CREATE", "s", "g", "0")], 0),                 # BUSYGROUP
        ([("XGROUP", "CREATECONSUMER", "s", "g", "c")], 1),
        ([("XGROUP", "CREATECONSUMER", "s", "g", "c")], 0),         # exists
        ([("XREADGROUP", "GROUP", "g", "c", "COUNT", "2", "STREAMS", "s", ">")], 1),
        ([("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")], 1),
        ([("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")], 0),   # nothing new
        ([("XREADGROUP", "GROUP", "nog", "c", "STREAMS", "s", ">")], 0),  # NOGROUP
        # a new consumer is a change of its own: one for it, one for the delivery
        ([("XADD", "n", "1-1", "f", "v"), ("XGROUP", "CREATE", "n", "g", "0")], 2),
        ([("XREADGROUP", "GROUP", "g", "new", "STREAMS", "n", ">")], 2),
        ([("XACK", "s", "g", "1-1", "2-1")], 2),
        ([("XACK", "s", "g", "1-1", "9-9")], 0),
        ([("XREAD", "STREAMS", "s", "0"), ("XRANGE", "s", "-", "+"), ("XLEN", "s"),
          ("XINFO", "STREAM", "s"), ("XPENDING", "s", "g"), ("XREVRANGE", "s", "+", "-"),
          ("EXISTS", "s"), ("TYPE", "s"), ("PING",), ("INFO",)], 0),
        ([("MULTI",), ("XADD", "s", "4-1", "f", "v"), ("XADD", "s", "5-1", "f", "v"),
          ("XADD", "u", "1-1", "f", "v"), ("EXEC",)], 3),
        ([("MULTI",), ("XADD", "s", "6-1", "f", "v"), ("XADD", "s"), ("EXEC",)], 0),
        ([("XDEL", "s", "4-1", "5-1", "99-1")], 2),
        ([("XTRIM", "s", "MAXLEN", "2")], 2),
        ([("XTRIM", "s", "MAXLEN", "2")], 0),
        ([("XADD", "s", "MAXLEN", "2", "7-1", "f", "v")], 1),        # its trim is not counted
        ([("DEL", "t", "u", "nokey")], 2),
        ([("XGROUP", "DESTROY", "s", "g")], 1),
        ([("XGROUP", "DESTROY", "s", "g")], 0),
        ([("XGROUP", "CREATE", "m", "g", "$", "MKSTREAM")], 1),
        ([("XSETID", "s", "100-1")], 1),
    ]
    for cmds, expect in steps:
        before = dirty(c)
        c.pipeline(cmds)
        after = dirty(c)
        assert after - before == expect, "%r: rdb_changes_since_last_save +%d, expected +%d" % (
            cmds, after - before, expect)


def test_rdb_changes_not_reset_by_resetstat(server):
    """rdb_changes_since_last_save is Redis' dirty counter, not a statistic: CONFIG RESETSTAT
    leaves it alone (only a save resets it)."""
    c = server.raw()
    fill(c, "s", 3)
    before = dirty(c)
    assert before >= 3
    assert c.call("CONFIG", "RESETSTAT") == "OK"
    after = dirty(c)
    assert after == before, "CONFIG RESETSTAT changed it from %d to %d" % (before, after)
    c.call("XADD", "s", "9-1", "f", "v")
    assert dirty(c) == before + 1


@echd_only("Redis 7.0 counts every XREADGROUP that serves a stream, a history read too; since "
           "7.4 only one that delivers (propagates) something counts (redis#13251); and 7.0 "
           "makes no consumer for a read that serves nothing")
def test_rdb_changes_history_read(server):
    c = server.raw()
    fill(c, "s", 3)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XGROUP", "CREATECONSUMER", "s", "g", "c")
    before = dirty(c)
    assert len(c.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")[0][1]) == 3
    assert dirty(c) == before + 1
    # re-reading the consumer's PEL changes delivery counts, but counts 0
    assert len(c.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "0")[0][1]) == 3
    r = c.call("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "s", "2-1")
    assert len(r[0][1]) == 1
    assert dirty(c) == before + 1
    # a consumer's first read, of its empty history: the consumer it creates is the change
    assert c.call("XREADGROUP", "GROUP", "g", "fresh", "STREAMS", "s", "0") == [[b"s", []]]
    assert dirty(c) == before + 2
    assert c.call("XREADGROUP", "GROUP", "g", "fresh", "STREAMS", "s", "0") == [[b"s", []]]
    assert dirty(c) == before + 2
    # ... and of nothing new (7.0 made no consumer there)
    assert c.call("XREADGROUP", "GROUP", "g", "fresh2", "STREAMS", "s", ">") is None
    assert dirty(c) == before + 3


@echd_only("the commit statistics (commits, fsyncs, avg_batch_size, last_commit_time_ms) are "
           "echd's")
def test_info_commit_stats(server):
    c = server.raw()

    def stats():
        d = info(c, "persistence")
        assert re.match(r"^\d+\.\d\d$", d["avg_batch_size"]), d["avg_batch_size"]
        return (int(d["commits"]), int(d["fsyncs"]), float(d["avg_batch_size"]),
                int(d["last_commit_time_ms"]))
    c.call("XADD", "s", "*", "f", "v")
    commits, fsyncs, avg, last = stats()
    assert commits >= 1 and fsyncs >= 1 and avg > 0, (commits, fsyncs, avg)
    sec, usec = c.call("TIME")
    t0 = int(sec) * 1000 + int(usec) // 1000
    time.sleep(0.01)
    # each acknowledged write waited for its own commit (one client, one at a time)
    for i in range(5):
        c.call("XADD", "s", "*", "n", str(i))
    sec, usec = c.call("TIME")
    t1 = int(sec) * 1000 + int(usec) // 1000
    commits2, fsyncs2, avg2, last2 = stats()
    assert commits2 >= commits + 5, (commits, commits2)
    assert fsyncs2 >= fsyncs + 5, (fsyncs, fsyncs2)
    assert t0 <= last2 <= t1 + 1, (t0, last2, t1)
    assert avg2 > 0
    # reads commit nothing
    for _ in range(5):
        c.call("XRANGE", "s", "-", "+")
        c.call("XLEN", "s")
    assert stats()[0] == commits2
    # Many clients writing pipelines at once share commits: the commands of one loop turn
    # (each client's pipeline arrives in one read) commit together, so 400 XADDs from 8
    # clients take a few commits, not 400. Then the same load with batching broken
    # (batch-max-commands 1: every command commits alone) takes one commit per XADD, which
    # shows that the count tells the two apart.
    conns = [server.raw() for _ in range(8)]

    def load():
        before = stats()[0]
        for x in conns:
            x.send_raw(b"".join(b"*5\r\n$4\r\nXADD\r\n$1\r\np\r\n$1\r\n*\r\n$1\r\nf\r\n"
                                b"$1\r\nv\r\n" for _ in range(50)))
        for x in conns:
            for _ in range(50):
                assert isinstance(x.read(), bytes)
        return stats()[0] - before
    shared = load()
    assert 400 / shared >= 4, "400 XADDs took %d commits" % shared
    commits3, fsyncs3, avg3, last3 = stats()
    assert avg3 > 1.0 and last3 >= last2
    assert c.call("CONFIG", "SET", "batch-max-commands", "1") == "OK"
    try:
        alone = load()
    finally:
        c.call("CONFIG", "SET", "batch-max-commands", "1024")
    assert alone == 400, "400 XADDs, each alone, took %d commits" % alone


# ---------------------------------------------------------------------------
# stats
# ---------------------------------------------------------------------------

def test_total_commands_processed(server):
    c = server.raw()
    a = commands(c)
    for cmd in (("PING",), ("XADD", "s", "1-1", "f", "v"), ("XLEN", "s"),
                ("XRANGE", "s", "-", "+"), ("XADD", "s", "1-1", "f", "v"),    # runtime error
                ("XREADGROUP", "GROUP", "nog", "c", "STREAMS", "s", ">")):
        c.pipeline([cmd])
    b = commands(c)
    assert b - a == 7, (a, b)              # 6 commands and the first INFO
    # other connections count too
    x = server.raw()
    x.pipeline([("XLEN", "s")] * 10)
    assert commands(c) - b == 11


def test_total_commands_processed_not_rejected(server):
    """A command rejected before it runs (unknown command, arity) is not processed: Redis counts
    commands in call(), which a rejected command never reaches."""
    c = server.raw()
    a = commands(c)
    c.err("XADD", "s")
    c.err("NOSUCHCMD")
    c.err("XGROUP", "CREATE", "s")
    b = commands(c)
    assert b - a == 1, ("rejected commands counted: +%d, expected +1 (the INFO)" % (b - a))


def test_total_commands_processed_in_multi(server):
    """A queued command counts once, when EXEC runs it (queueing is not running it)."""
    c = server.raw()
    b = commands(c)
    c.pipeline([("MULTI",), ("XADD", "s", "1-1", "f", "v"), ("XLEN", "s"), ("EXEC",)])
    d = commands(c)
    assert d - b == 5, ("MULTI, 2 queued commands, EXEC (and the INFO): +%d, expected +5"
                        % (d - b))
    # an aborted transaction runs nothing: MULTI and EXEC (the arity error is rejected)
    c.pipeline([("MULTI",), ("XLEN", "s"), ("XLEN",), ("EXEC",)])
    e = commands(c)
    assert e - d == 3, ("MULTI, XLEN queued, XLEN rejected, EXECABORT (and the INFO): +%d, "
                        "expected +3" % (e - d))


def test_total_error_replies(server):
    c = server.raw()
    fill(c, "s", 1)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    a = errors(c)
    c.err("XADD", "s")                                      # arity
    c.err("NOSUCHCMD", "x")                                  # unknown command
    c.err("XADD", "s", "1-1", "f", "v")                      # runtime
    c.err("XREADGROUP", "GROUP", "nog", "c", "STREAMS", "s", ">")
    c.err("XGROUP", "CREATE", "s", "g", "0")
    c.err("XGROUP", "FOO")
    c.err("EXEC")
    assert errors(c) - a == 7
    # replies that are not errors do not count
    c.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")
    c.call("XADD", "s", "2-1", "f", "v")
    assert errors(c) - a == 7
    # a transaction aborted by a queueing error: the error and EXECABORT
    c.pipeline([("MULTI",), ("XADD", "s"), ("EXEC",)])
    assert errors(c) - a == 9
    # a WATCH-failed EXEC is not an error
    c.call("WATCH", "s")
    c.call("XADD", "s", "3-1", "f", "v")
    assert c.pipeline([("MULTI",), ("PING",), ("EXEC",)])[2] is None
    assert errors(c) - a == 9


def test_error_replies_inside_exec(server):
    """Errors inside EXEC's array are error replies too: total_error_replies, errorstats and
    the failed command's failed_calls count them."""
    c = server.raw()
    fill(c, "s", 2)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("CONFIG", "RESETSTAT")
    a = errors(c)
    r = c.pipeline([("MULTI",), ("XADD", "s", "1-1", "f", "v"),
                    ("XGROUP", "CREATE", "s", "g", "0"),
                    ("XREADGROUP", "GROUP", "nog", "c", "STREAMS", "s", ">"),
                    ("XLEN", "s"), ("EXEC",)])
    assert [type(x) for x in r[-1]] == [RespError, RespError, RespError, int], r
    n, es = errors(c) - a, errorstats(c)
    assert (n, es) == (3, {"ERR": 1, "BUSYGROUP": 1, "NOGROUP": 1}), (
        "3 errors inside EXEC: total_error_replies +%d, errorstats %r" % (n, es))
    st = cmdstats(c)
    assert st["xadd"]["failed"] == 1 and st["xadd"]["calls"] == 1
    assert st["xreadgroup"]["failed"] == 1
    assert st["exec"]["failed"] == 0 and st["exec"]["calls"] == 1


def test_rejected_connections(server):
    s = server.spawn("--maxclients", "2")
    # the start-up PING connection may still be counted for a moment: retry briefly
    deadline = time.monotonic() + 5
    while True:
        conns = [s.raw() for _ in range(2)]
        replies = []
        for x in conns:
            try:
                replies.append(x.call("PING"))
            except (RespError, Closed, OSError) as ex:
                replies.append(ex)
        if replies == ["PONG", "PONG"]:
            break
        for x in conns:
            x.close()
        assert time.monotonic() < deadline, replies
        time.sleep(0.1)
    c = conns[0]
    before = field(c, "stats", "rejected_connections")
    for n in (1, 2):
        x = s.raw()
        assert x.read_raw() == b"-ERR max number of clients reached\r\n"
        assert x.wait_closed(5)
        assert field(c, "stats", "rejected_connections") == before + n
    assert clients(c)["connected_clients"] == "2"
    # RESETSTAT resets it
    c.call("CONFIG", "RESETSTAT")
    assert field(c, "stats", "rejected_connections") == 0


def test_instantaneous_ops_per_sec(server):
    c = server.raw()
    assert int(info(c, "stats")["instantaneous_ops_per_sec"]) >= 0
    fill(c, "s", 1)
    x = server.raw()
    deadline = time.monotonic() + 8
    while True:
        # a steady load for a while (reads that touch storage)
        for _ in range(20):
            x.pipeline([("XLEN", "s")] * 50)
        if int(info(c, "stats")["instantaneous_ops_per_sec"]) > 0:
            break
        assert time.monotonic() < deadline, "instantaneous_ops_per_sec stayed 0 under load"
        time.sleep(0.05)


def test_many_non_storage_commands(server):
    """A monitor that only sends PING and INFO, thousands of times: each is answered and
    counted. (A server of its own: if it stops answering, the module's server is not hurt.)"""
    s = server.spawn()
    c = RespConn(s.port, timeout=5)

    def stuck(what):
        try:
            d = RespConn(s.port, timeout=2)
            try:
                other = "a new connection's PING: %r" % (d.call("PING"),)
            finally:
                d.close()
        except (OSError, Closed) as ex:
            other = "a new connection's PING: no reply (%r)" % (ex,)
        return AssertionError("%s got no reply within 5 s; %s" % (what, other))
    try:
        a = commands(c)
        for i in range(1500):
            try:
                assert c.call("PING") == "PONG", i
            except socket.timeout:
                raise stuck("PING #%d (after %d PINGs answered)" % (i + 1, i))
        assert commands(c) - a == 1501
        try:
            replies = c.pipeline([("PING",)] * 1500 + [("ECHO", "x")] * 500)
        except socket.timeout:
            raise stuck("a pipeline of 1500 PING and 500 ECHO")
        assert replies == ["PONG"] * 1500 + [b"x"] * 500
        for i in range(1100):
            try:
                info_text(c, "stats")
            except socket.timeout:
                raise stuck("INFO #%d" % (i + 1))
    finally:
        c.close()


# ---------------------------------------------------------------------------
# commandstats / errorstats
# ---------------------------------------------------------------------------

def test_commandstats(server):
    c = server.raw()
    c.call("CONFIG", "RESETSTAT")
    st = cmdstats(c)
    assert "xadd" not in st and "xlen" not in st, st
    for i in range(1, 4):
        c.call("XADD", "s", "%d-1" % i, "f", "v")
    st = cmdstats(c)
    assert {k: st["xadd"][k] for k in ("calls", "rejected", "failed")} == dict(
        calls=3, rejected=0, failed=0), st["xadd"]
    # rejected before it runs: arity
    c.err("XADD", "s")
    c.err("xadd", "s", "9-9")
    st = cmdstats(c)
    assert (st["xadd"]["calls"], st["xadd"]["rejected"], st["xadd"]["failed"]) == (3, 2, 0)
    # failed while running: calls and failed_calls
    c.err("XADD", "s", "1-1", "f", "v")
    c.err("XADD", "s", "MAXLEN", "x", "*", "f", "v")
    st = cmdstats(c)
    assert (st["xadd"]["calls"], st["xadd"]["rejected"], st["xadd"]["failed"]) == (5, 2, 2)
    # inside EXEC: each queued command counts as a call when it runs
    r = c.pipeline([("MULTI",), ("XADD", "s", "4-1", "f", "v"), ("XADD", "s", "1-1", "f", "v"),
                    ("XLEN", "s"), ("EXEC",)])
    assert r[-1][0] == b"4-1" and isinstance(r[-1][1], RespError), r
    st = cmdstats(c)
    assert (st["xadd"]["calls"], st["xadd"]["rejected"], st["xadd"]["failed"]) == (7, 2, 3)
    assert (st["xlen"]["calls"], st["xlen"]["failed"]) == (1, 0)
    assert (st["multi"]["calls"], st["exec"]["calls"], st["exec"]["failed"]) == (1, 1, 0)
    # an arity error while queueing rejects the command, and EXEC fails
    c.pipeline([("MULTI",), ("XLEN",), ("EXEC",)])
    st = cmdstats(c)
    assert (st["xlen"]["calls"], st["xlen"]["rejected"]) == (1, 1)
    assert (st["exec"]["calls"], st["exec"]["failed"]) == (2, 1)
    # usec adds up
    assert st["xadd"]["usec"] >= 0
    # other commands have their own lines; a command never called has none
    c.call("XRANGE", "s", "-", "+")
    c.call("xrange", "s", "-", "+")
    st = cmdstats(c)
    assert st["xrange"]["calls"] == 2 and "xtrim" not in st and "xautoclaim" not in st
    # INFO counts itself after it has answered
    n = st["info"]["calls"]
    assert cmdstats(c)["info"]["calls"] == n + 1
    # unknown commands have no line
    c.err("NOSUCHCMD")
    assert not [k for k in cmdstats(c) if "nosuch" in k]


def test_commandstats_subcommands(server):
    """Since Redis 7.0 a container command's subcommands have lines of their own
    (cmdstat_xgroup|create), and the container none."""
    c = server.raw()
    fill(c, "s", 1)
    c.call("CONFIG", "RESETSTAT")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.err("XGROUP", "CREATE", "s", "g", "0")                  # BUSYGROUP
    c.err("XGROUP", "CREATE", "s")                            # arity of the subcommand
    c.call("XINFO", "STREAM", "s")
    c.call("XINFO", "GROUPS", "s")
    c.call("OBJECT", "ENCODING", "s")
    c.call("MEMORY", "USAGE", "s")
    st = cmdstats(c)
    assert "xgroup|create" in st, "no cmdstat_xgroup|create line: %r" % sorted(st)
    assert (st["xgroup|create"]["calls"], st["xgroup|create"]["rejected"],
            st["xgroup|create"]["failed"]) == (2, 1, 1), st
    assert st["xinfo|stream"]["calls"] == 1 and st["xinfo|groups"]["calls"] == 1
    assert "xgroup" not in st and "xinfo" not in st, sorted(st)
    assert st["object|encoding"]["calls"] == 1 and st["memory|usage"]["calls"] == 1
    assert "object" not in st and "memory" not in st, sorted(st)
    c.call("CONFIG", "RESETSTAT")
    assert list(cmdstats(c)) == ["config|resetstat"]
    # an unknown subcommand is an error reply, not a command: no line at all
    assert c.err("CONFIG", "zz1") == "ERR unknown subcommand 'zz1'. Try CONFIG HELP."
    assert c.err("XINFO", "qq1", "s").startswith("ERR unknown subcommand 'qq1'.")
    st = cmdstats(c)
    assert sorted(st) == ["config|resetstat", "info"], sorted(st)  # info: cmdstats() itself
    assert errorstats(c) == {"ERR": 2}


def test_errorstats(server):
    c = server.raw()
    fill(c, "s", 1)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("CONFIG", "RESETSTAT")
    assert errorstats(c) == {}
    c.err("XADD", "s")
    c.err("NOSUCHCMD")
    c.err("XADD", "s", "1-1", "f", "v")
    assert errorstats(c) == {"ERR": 3}
    assert c.err("XREADGROUP", "GROUP", "nog", "c", "STREAMS", "s", ">").startswith("NOGROUP ")
    assert c.err("XPENDING", "s", "nog").startswith("NOGROUP ")
    assert c.err("XGROUP", "CREATE", "s", "g", "0").startswith("BUSYGROUP ")
    assert errorstats(c) == {"ERR": 3, "NOGROUP": 2, "BUSYGROUP": 1}
    c.pipeline([("MULTI",), ("XLEN",), ("EXEC",)])
    assert errorstats(c) == {"ERR": 4, "NOGROUP": 2, "BUSYGROUP": 1, "EXECABORT": 1}
    text = info_text(c, "errorstats")
    assert "errorstat_NOGROUP:count=2\r\n" in text and "errorstat_ERR:count=4\r\n" in text
    # in plain INFO too
    assert "errorstat_BUSYGROUP:count=1" in info_text(c)


# ---------------------------------------------------------------------------
# keyspace
# ---------------------------------------------------------------------------

def test_info_keyspace(server):
    c = server.raw()
    assert info_text(c, "keyspace") == "# Keyspace\r\n"     # no db line for an empty db
    c.call("XADD", "a", "*", "f", "v")
    assert keyspace(c) == {"db0": 1}
    c.call("XADD", "b", "*", "f", "v")
    c.call("XADD", "a", "*", "f", "v")
    c.call("XADD", "c", "*", "f", "v")
    assert keyspace(c) == {"db0": 3}
    c.call("XGROUP", "CREATE", "d", "g", "$", "MKSTREAM")
    assert keyspace(c) == {"db0": 4}
    assert c.call("XADD", "e", "NOMKSTREAM", "*", "f", "v") is None
    assert keyspace(c) == {"db0": 4}
    c.call("DEL", "a")
    assert keyspace(c) == {"db0": 3}
    # a stream emptied by XDEL or XTRIM is still a key
    first = c.call("XRANGE", "b", "-", "+")[0][0]
    c.call("XDEL", "b", first)
    c.call("XTRIM", "c", "MAXLEN", "0")
    assert keyspace(c) == {"db0": 3}
    c.call("RENAME", "b", "bb")
    assert keyspace(c) == {"db0": 3}
    c.call("SELECT", "1")
    c.call("XADD", "x", "*", "f", "v")
    c.call("XADD", "y", "*", "f", "v")
    assert keyspace(c) == {"db0": 3, "db1": 2}
    c.call("SELECT", "5")
    c.call("XADD", "x", "*", "f", "v")
    assert keyspace(c) == {"db0": 3, "db1": 2, "db5": 1}
    text = info_text(c, "keyspace")
    assert [line.split(":")[0] for line in text.split("\r\n")[1:] if line] == ["db0", "db1", "db5"]
    c.call("FLUSHDB")
    assert keyspace(c) == {"db0": 3, "db1": 2}
    c.call("FLUSHALL")
    assert keyspace(c) == {}


# ---------------------------------------------------------------------------
# CONFIG RESETSTAT, sections, clients
# ---------------------------------------------------------------------------

def test_config_resetstat(server):
    c = server.raw()
    fill(c, "s", 3)
    c.err("XADD", "s")
    c.err("XADD", "s", "1-1", "f", "v")
    c.err("XPENDING", "s", "nog")
    assert errors(c) >= 3 and commands(c) >= 4
    assert c.call_raw("CONFIG", "RESETSTAT") == b"+OK\r\n"
    d = info(c, "stats")
    assert int(d["total_commands_processed"]) == 1          # CONFIG RESETSTAT itself
    assert int(d["total_error_replies"]) == 0
    assert int(d["rejected_connections"]) == 0
    assert errorstats(c) == {}
    assert set(cmdstats(c)) <= {"config|resetstat", "config", "info"}, cmdstats(c)
    # counting starts again
    c.err("XADD", "s")
    assert errors(c) == 1 and errorstats(c) == {"ERR": 1}
    st = cmdstats(c)
    assert (st["xadd"]["calls"], st["xadd"]["rejected"]) == (0, 1)


def test_info_sections(server):
    c = server.raw()
    fill(c, "s", 1)
    default = ["Server", "Clients", "Memory", "Persistence", "Stats", "Keyspace"]

    def has(text, want, not_=()):
        h = headers(text)
        for w in want:
            assert w in h, (w, h)
        for n in not_:
            assert n not in h, (n, h)
        return h
    plain = info_text(c)
    h = has(plain, default + ["Errorstats"], ["Commandstats"])
    # in Redis' order; the Cluster section (every Redis has it) just before Keyspace
    assert [x for x in h if x in default] == default, h
    assert h.index("Cluster") == h.index("Keyspace") - 1, h
    d = parse(plain)
    for f in ("redis_version", "process_id", "tcp_port", "uptime_in_seconds", "connected_clients",
              "blocked_clients", "maxclients", "used_memory", "used_memory_rss",
              "rdb_changes_since_last_save", "total_commands_processed", "total_error_replies",
              "rejected_connections", "instantaneous_ops_per_sec", "db0"):
        assert f in d, f
    has(info_text(c, "default"), default + ["Errorstats"], ["Commandstats"])
    for sel in ("all", "everything", "ALL", "Everything"):
        text = info_text(c, sel)
        has(text, default + ["Commandstats", "Errorstats"])
        assert "cmdstat_xadd:calls=1," in text, sel
    # one section, several, any case
    assert headers(info_text(c, "commandstats")) == ["Commandstats"]
    assert headers(info_text(c, "SERVER")) == ["Server"]
    assert headers(info_text(c, "server", "clients")) == ["Server", "Clients"]
    assert headers(info_text(c, "Keyspace", "persistence")) == ["Persistence", "Keyspace"]
    assert info_text(c, "cluster") == "# Cluster\r\ncluster_enabled:0\r\n"
    for sel in ("all", "everything"):
        assert "Cluster" in headers(info_text(c, sel)), sel
    assert set(headers(info_text(c, "default", "commandstats"))) >= set(
        default + ["Commandstats"])
    # an unknown section: an empty reply
    assert c.call_raw("INFO", "nosuchsection") == b"$0\r\n\r\n"
    # RESP3: the same text
    c.call("HELLO", "3")
    r = c.call("INFO", "keyspace")
    assert isinstance(r, bytes) and r.decode().startswith("# Keyspace\r\ndb0:keys=1,"), r


def test_info_redis_py_and_cli(server):
    r = server.client()
    assert r.config_resetstat() is True
    r.xadd("s", {"f": "v"})
    r.xgroup_create("s", "g", id="0")
    d = r.info()
    assert d["tcp_port"] == server.port and d["process_id"] == server.proc.pid
    assert d["db0"]["keys"] == 1
    assert isinstance(d["connected_clients"], int)
    cs = r.info("commandstats")
    assert cs["cmdstat_xadd"]["calls"] == 1
    assert r.info("persistence")["rdb_changes_since_last_save"] >= 2
    assert r.info("cluster") == {"cluster_enabled": 0} and r.info()["cluster_enabled"] == 0
    out = server.cli("INFO", "keyspace")
    assert out.splitlines()[:2] == ["# Keyspace", "db0:keys=1,expires=0,avg_ttl=0"] or (
        out.splitlines()[1].startswith("db0:keys=1,expires=0,avg_ttl=0,")), out
    out = server.cli("INFO", "server")
    assert "tcp_port:%d" % server.port in out.splitlines()


@echd_only("INFO storage is echd's own section")
@lmdb_only("INFO storage's LMDB figures: data dir, map, pages, disk reserve")
def test_info_storage(server):
    c = server.raw()
    fill(c, "s", 100)
    text = info_text(c, "storage")
    assert headers(text) == ["Storage"]
    d = parse(text)
    assert parse(info_text(c, "server"))["storage_backend"] == "lmdb"
    assert d["storage_dir"] == server.dir
    used, mapped = int(d["storage_used_bytes"]), int(d["storage_map_bytes"])
    assert 0 < used <= mapped, d
    assert int(d["storage_page_size"]) in (4096, 8192, 16384, 65536), d
    assert d["storage_maxdisk"] == "0" and d["storage_disk_full"] == "0", d
    # disk written ahead of the data, at least 1 MiB (the map is larger), so not full
    assert d["storage_fs_full"] == "0" and int(d["storage_reserve_bytes"]) >= 1 << 20, d
    # it grows as the data does
    fill(c, "t", 2000)
    assert int(parse(info_text(c, "storage"))["storage_used_bytes"]) > used
    assert "Storage" in headers(info_text(c))
