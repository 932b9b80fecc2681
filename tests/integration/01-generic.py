"""Generic commands, connection handling and the RESP protocol.

Replies are those of Redis 7.4; keys are created with XADD only (echd has streams only).
"""

import os
import re
import shutil
import subprocess
import tempfile
import time

from echdtest import RespError, Server, Verbatim, echd_only, wait_until

ARITY = "ERR wrong number of arguments for '%s' command"


def info_fields(text):
    """INFO text -> {field: value} (section headers dropped)."""
    if isinstance(text, bytes):
        text = text.decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and ":" in line:
            k, v = line.split(":", 1)
            out[k] = v
    return out


def client_fields(line):
    """One CLIENT LIST/INFO line -> {field: value}."""
    if isinstance(line, bytes):
        line = line.decode()
    return dict(kv.split("=", 1) for kv in line.strip().split(" "))


# ---------------------------------------------------------------------------
# PING, ECHO, HELLO, QUIT, RESET
# ---------------------------------------------------------------------------

def test_ping(server):
    c = server.raw()
    assert c.call_raw("PING") == b"+PONG\r\n"
    assert c.call_raw("PING", "hello") == b"$5\r\nhello\r\n"
    assert c.call_raw("ping", "") == b"$0\r\n\r\n"
    assert c.err("PING", "a", "b") == ARITY % "ping"
    assert server.client().ping() is True
    assert server.cli("PING") == "PONG\n"


def test_echo(server):
    c = server.raw()
    assert c.call("ECHO", "hello") == b"hello"
    binary = b"a\r\nb\x00c\xff" * 100
    assert c.call("ECHO", binary) == binary
    assert c.call_raw("ECHO", "") == b"$0\r\n\r\n"
    assert c.err("ECHO") == ARITY % "echo"
    assert c.err("ECHO", "a", "b") == ARITY % "echo"
    assert server.client(decode_responses=False).echo(binary) == binary


HELLO_KEYS = ["server", "version", "proto", "id", "mode", "role", "modules"]


def check_hello_map(m, proto, cid, server):
    assert list(m.keys()) == [k.encode() for k in HELLO_KEYS], m
    if not server.is_echd:
        assert m[b"server"] == b"redis"
    assert isinstance(m[b"server"], bytes) and m[b"server"]
    assert re.fullmatch(rb"\d+\.\d+\.\d+", m[b"version"]), m[b"version"]
    assert m[b"proto"] == proto
    assert m[b"id"] == cid
    assert m[b"mode"] == b"standalone"
    assert m[b"role"] == b"master"
    assert m[b"modules"] == []


def test_hello_resp2(server):
    c = server.raw()
    cid = c.call("CLIENT", "ID")
    r = c.call("HELLO", "2")
    # RESP2: the map is a flat array of 14 elements, keys as bulk strings
    assert isinstance(r, list) and len(r) == 14, r
    check_hello_map(dict(zip(r[0::2], r[1::2])), 2, cid, server)
    # HELLO without arguments: same, protocol unchanged
    r = c.call("HELLO")
    check_hello_map(dict(zip(r[0::2], r[1::2])), 2, cid, server)
    assert c.call_raw("CLIENT", "GETNAME") == b"$-1\r\n"


def test_hello_resp3(server):
    c = server.raw()
    cid = c.call("CLIENT", "ID")
    c.send("HELLO", "3")
    raw = c.read_raw()
    assert raw.startswith(b"%7\r\n$6\r\nserver\r\n"), raw
    c.send("HELLO")
    m = c.read()
    assert isinstance(m, dict)
    check_hello_map(m, 3, cid, server)
    # nulls are '_' in RESP3
    assert c.call_raw("CLIENT", "GETNAME") == b"_\r\n"
    assert c.call_raw("XADD", "nokey", "NOMKSTREAM", "*", "f", "v") == b"_\r\n"
    assert c.call_raw("XREAD", "BLOCK", "10", "STREAMS", "nokey", "$") == b"_\r\n"
    # simple strings and integers are unchanged
    assert c.call_raw("PING") == b"+PONG\r\n"
    assert c.call_raw("XADD", "s", "1-1", "f", "v") == b"$3\r\n1-1\r\n"
    assert c.call_raw("XLEN", "s") == b":1\r\n"
    # maps: CONFIG GET, XREAD, XINFO STREAM
    assert c.call_raw("CONFIG", "GET", "stream-node-max-entries") == (
        b"%1\r\n$23\r\nstream-node-max-entries\r\n$3\r\n100\r\n")
    assert c.call_raw("XREAD", "STREAMS", "s", "0") == (
        b"%1\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n")
    info = c.call("XINFO", "STREAM", "s")
    assert isinstance(info, dict) and info[b"length"] == 1
    # CLIENT LIST/INFO are verbatim strings in RESP3
    v = c.call("CLIENT", "INFO")
    assert isinstance(v, Verbatim) and v.fmt == "txt", repr(v)
    assert client_fields(v)["resp"] == "3"
    # back to RESP2
    c.call("HELLO", "2")
    assert c.call_raw("CLIENT", "GETNAME") == b"$-1\r\n"
    assert c.call_raw("XREAD", "BLOCK", "10", "STREAMS", "nokey", "$") == b"*-1\r\n"
    assert c.call_raw("XADD", "nokey", "NOMKSTREAM", "*", "f", "v") == b"$-1\r\n"


def test_hello_setname_and_errors(server):
    c = server.raw()
    r = c.call("HELLO", "3", "SETNAME", "worker-1")
    assert r[b"proto"] == 3
    assert c.call("CLIENT", "GETNAME") == b"worker-1"
    assert c.err("HELLO", "4") == "NOPROTO unsupported protocol version"
    assert c.err("HELLO", "1") == "NOPROTO unsupported protocol version"
    assert c.err("HELLO", "abc") == "ERR Protocol version is not an integer or out of range"
    assert c.err("HELLO", "3", "foo") == "ERR Syntax error in HELLO option 'foo'"
    # a failed HELLO leaves the protocol alone
    assert c.call_raw("CLIENT", "GETNAME") == b"$8\r\nworker-1\r\n"
    assert c.call_raw("XADD", "nokey", "NOMKSTREAM", "*", "f", "v") == b"_\r\n"
    assert c.call("HELLO")[b"proto"] == 3


def test_quit(server):
    c = server.raw()
    c.send("QUIT")
    assert c.read_raw() == b"+OK\r\n"
    assert c.wait_closed(5), "connection not closed after QUIT"
    # pipelined commands after QUIT are not executed
    c2 = server.raw()
    c2.send_raw(b"*1\r\n$4\r\nQUIT\r\n*5\r\n$4\r\nXADD\r\n$1\r\nq\r\n$3\r\n1-1\r\n$1\r\nf\r\n$1\r\nv\r\n")
    assert c2.read_raw() == b"+OK\r\n"
    assert c2.wait_closed(5)
    assert server.raw().call("EXISTS", "q") == 0


def test_reset(server):
    c = server.raw()
    cid = c.call("CLIENT", "ID")
    c.call("SELECT", "5")
    c.call("CLIENT", "SETNAME", "before-reset")
    c.call("HELLO", "3")
    assert c.call_raw("RESET") == b"+RESET\r\n"
    # back to RESP2, db 0, no name; same connection id
    assert c.call_raw("CLIENT", "GETNAME") == b"$-1\r\n"
    f = client_fields(c.call("CLIENT", "INFO"))
    assert f["db"] == "0" and f["name"] == "" and f["resp"] == "2", f
    assert c.call("CLIENT", "ID") == cid


# ---------------------------------------------------------------------------
# Keyspace commands
# ---------------------------------------------------------------------------

def test_select(server):
    c = server.raw()
    for db in range(16):
        assert c.call_raw("SELECT", str(db)) == b"+OK\r\n"
    assert c.err("SELECT", "16") == "ERR DB index is out of range"
    assert c.err("SELECT", "-1") == "ERR DB index is out of range"
    # read as an int before the range check, as Redis does
    int_range = "ERR value is out of range, value must between -2147483648 and 2147483647"
    assert c.err("SELECT", "2147483647") == "ERR DB index is out of range"
    assert c.err("SELECT", "2147483648") == int_range
    assert c.err("SELECT", "-2147483649") == int_range
    assert c.err("SELECT", "99999999999999999999") == "ERR value is not an integer or out of range"
    assert c.err("SELECT", "abc") == "ERR value is not an integer or out of range"
    assert c.err("SELECT") == ARITY % "select"
    assert c.err("SELECT", "0", "1") == ARITY % "select"
    # databases are separate keyspaces
    c.call("SELECT", "1")
    c.call("XADD", "k", "1-1", "f", "v")
    assert c.call("DBSIZE") == 1
    c.call("SELECT", "0")
    assert c.call("DBSIZE") == 0
    assert c.call("EXISTS", "k") == 0
    c.call("XADD", "k", "1-1", "f", "zero")
    c.call("SELECT", "1")
    assert c.call("XRANGE", "k", "-", "+") == [[b"1-1", [b"f", b"v"]]]
    # a new connection starts in db 0
    assert server.raw().call("XRANGE", "k", "-", "+") == [[b"1-1", [b"f", b"zero"]]]


def test_dbsize(server):
    c = server.raw()
    assert c.call_raw("DBSIZE") == b":0\r\n"
    for i in range(10):
        c.call("XADD", "k%d" % i, "*", "f", "v")
    assert c.call("DBSIZE") == 10
    c.call("DEL", "k0")
    assert c.call("DBSIZE") == 9
    assert c.err("DBSIZE", "x") == ARITY % "dbsize"


def test_time(server):
    c = server.raw()
    r = c.call("TIME")
    assert isinstance(r, list) and len(r) == 2 and all(isinstance(x, bytes) for x in r), r
    secs, usecs = int(r[0]), int(r[1])
    assert abs(secs + usecs / 1e6 - time.time()) < 5
    assert 0 <= usecs < 1000000
    assert c.err("TIME", "x") == ARITY % "time"


def test_del_unlink_exists(server):
    c = server.raw()
    for k in ("a", "b", "c", "d"):
        c.call("XADD", k, "1-1", "f", "v")
    assert c.call("EXISTS", "a") == 1
    assert c.call("EXISTS", "a", "b", "nokey") == 2
    assert c.call("EXISTS", "a", "a", "a") == 3  # repeated keys count each time
    assert c.call("DEL", "a", "a", "nokey") == 1
    assert c.call("EXISTS", "a") == 0
    assert c.call("UNLINK", "b", "c", "nokey") == 2
    assert c.call("DEL", "nokey") == 0
    assert c.call("UNLINK", "nokey") == 0
    assert c.call("DBSIZE") == 1
    for cmd in ("DEL", "UNLINK", "EXISTS"):
        assert c.err(cmd) == ARITY % cmd.lower()
    # a deleted stream is gone entirely: re-created from scratch
    c.call("XADD", "d", "5-1", "f", "v")
    c.call("DEL", "d")
    assert c.call("XADD", "d", "1-1", "f", "v") == b"1-1"
    assert c.call("XINFO", "STREAM", "d")[10:12] == [b"entries-added", 1]  # restarted


def test_type(server):
    c = server.raw()
    c.call("XADD", "s", "*", "f", "v")
    assert c.call_raw("TYPE", "s") == b"+stream\r\n"
    assert c.call_raw("TYPE", "nokey") == b"+none\r\n"
    assert c.err("TYPE") == ARITY % "type"
    assert server.client().type("s") == "stream"


def test_keys(server):
    c = server.raw()
    names = ["hello", "hallo", "hxllo", "hllo", "heeeello", "h*llo", "other", "key:1", "key:2",
             "key:10"]
    for k in names:
        c.call("XADD", k, "1-1", "f", "v")

    def keys(pattern):
        r = c.call("KEYS", pattern)
        assert isinstance(r, list)
        return sorted(x.decode() for x in r)

    assert keys("*") == sorted(names)
    assert keys("h?llo") == ["h*llo", "hallo", "hello", "hxllo"]
    assert keys("h*llo") == sorted(["hello", "hallo", "hxllo", "hllo", "heeeello", "h*llo"])
    assert keys("h[ae]llo") == ["hallo", "hello"]
    assert keys("h[^e]llo") == ["h*llo", "hallo", "hxllo"]
    assert keys("h[a-b]llo") == ["hallo"]
    assert keys("h\\*llo") == ["h*llo"]
    assert keys("key:?") == ["key:1", "key:2"]
    assert keys("key:*") == ["key:1", "key:10", "key:2"]
    assert keys("nomatch*") == []
    assert keys("other") == ["other"]
    # the empty name matches only "*" (every key) and the empty pattern
    c.call("XADD", "", "1-1", "f", "v")
    assert "" in keys("*") and keys("") == [""]
    for pattern in ("**", "*?", "?*", "[^x]*", "***"):
        assert "" not in keys(pattern), pattern
    # a pattern whose stars could be placed in astronomically many ways answers at once
    # (it used to hold the server's only thread for hours); stars nest at most 1000 deep
    long_name = "a" * 1100
    c.call("XADD", long_name, "1-1", "f", "v")
    assert keys("*a" * 40 + "b") == []
    assert keys("*a" * 1000) == [long_name]
    assert keys("*a" * 1001) == []
    assert c.call("SCAN", "0", "MATCH", "*a" * 40 + "b", "COUNT", "100") == [b"0", []]
    c.call("DEL", "", long_name)
    assert c.err("KEYS") == ARITY % "keys"
    # per database
    c.call("SELECT", "3")
    assert keys("*") == []


def scan_all(c, *opts):
    cursor = b"0"
    seen = []
    rounds = 0
    while True:
        r = c.call("SCAN", cursor, *opts)
        assert isinstance(r, list) and len(r) == 2 and isinstance(r[0], bytes), r
        cursor, batch = r
        seen += [k.decode() for k in batch]
        rounds += 1
        assert rounds < 10000, "SCAN does not terminate"
        if cursor == b"0":
            return seen, rounds


def test_scan(server):
    c = server.raw()
    names = ["user:%d" % i for i in range(150)] + ["order:%d" % i for i in range(60)]
    c.pipeline([("XADD", k, "1-1", "f", "v") for k in names])
    seen, _ = scan_all(c)
    assert set(seen) == set(names)
    seen, _ = scan_all(c, "COUNT", "7")
    assert set(seen) == set(names)
    seen, _ = scan_all(c, "COUNT", "1000")
    assert set(seen) == set(names)
    seen, _ = scan_all(c, "MATCH", "order:*", "COUNT", "5")
    assert set(seen) == {k for k in names if k.startswith("order:")}
    seen, _ = scan_all(c, "MATCH", "user:1?")
    assert set(seen) == {"user:%d" % i for i in range(10, 20)}
    seen, _ = scan_all(c, "TYPE", "stream")
    assert set(seen) == set(names)
    seen, _ = scan_all(c, "TYPE", "string")
    assert seen == []
    seen, _ = scan_all(c, "MATCH", "user:*", "TYPE", "stream", "COUNT", "20")
    assert set(seen) == {k for k in names if k.startswith("user:")}
    # empty database
    c.call("SELECT", "2")
    assert c.call("SCAN", "0") == [b"0", []]
    assert c.err("SCAN", "abc") == "ERR invalid cursor"
    for cursor in ("1 ", "0x1", "18446744073709551616", "- 0"):
        assert c.err("SCAN", cursor) == "ERR invalid cursor", cursor
    for cursor in ("+0", "-0", "00"):
        assert c.call("SCAN", cursor) == [b"0", []], cursor
    assert c.err("SCAN", "0", "COUNT", "0") == "ERR syntax error"
    assert c.err("SCAN", "0", "COUNT", "abc") == "ERR value is not an integer or out of range"
    assert c.err("SCAN", "0", "FOO") == "ERR syntax error"
    assert c.err("SCAN", "0", "MATCH") == "ERR syntax error"
    assert c.err("SCAN") == ARITY % "scan"
    # redis-py's iterator
    assert set(server.client().scan_iter(match="user:*", count=10)) == {
        k for k in names if k.startswith("user:")}


@echd_only("Redis 7.4 reads SCAN's cursor with string2ull and knows NOVALUES; the oracle "
           "here, 7.0, reads it with strtoul (so it takes -1 and the empty string, and refuses "
           "a leading blank) and answers NOVALUES with a syntax error")
def test_scan_cursor_as_redis_74(server):
    c = server.raw()
    c.call("XADD", "k", "1-1", "f", "v")
    for cursor in ("-1", "", "-9223372036854775808"):
        assert c.err("SCAN", cursor) == "ERR invalid cursor", cursor
    for cursor in (" 0", "\t+0", "-0"):
        assert c.call("SCAN", cursor) == [b"0", [b"k"]], cursor
    # strtoull's wrap-around: a cursor past every key
    assert c.call("SCAN", " -1") == [b"0", []]
    assert c.err("SCAN", "0", "NOVALUES") == "ERR NOVALUES option can only be used in HSCAN"
    assert c.err("SCAN", "0", "COUNT", "5", "NOVALUES") == (
        "ERR NOVALUES option can only be used in HSCAN")


def test_rename(server):
    c = server.raw()
    assert c.err("RENAME", "nokey", "x") == "ERR no such key"
    assert c.err("RENAME", "nokey", "nokey") == "ERR no such key"
    c.call("XADD", "a", "1-1", "f", "a1")
    c.call("XADD", "a", "2-1", "f", "a2")
    c.call("XDEL", "a", "1-1")
    assert c.call_raw("RENAME", "a", "b") == b"+OK\r\n"
    assert c.call("EXISTS", "a") == 0
    assert c.call("XRANGE", "b", "-", "+") == [[b"2-1", [b"f", b"a2"]]]
    info = c.call("XINFO", "STREAM", "b")
    assert info[6:12] == [b"last-generated-id", b"2-1", b"max-deleted-entry-id", b"1-1",
                          b"entries-added", 2], info
    # overwrite an existing destination
    c.call("XADD", "c", "9-1", "f", "c9")
    assert c.call("RENAME", "b", "c") == "OK"
    assert c.call("XRANGE", "c", "-", "+") == [[b"2-1", [b"f", b"a2"]]]
    assert c.call("DBSIZE") == 1
    # rename onto itself
    assert c.call("RENAME", "c", "c") == "OK"
    assert c.call("XLEN", "c") == 1
    assert c.err("RENAME", "c") == ARITY % "rename"
    # the renamed stream keeps growing from its last id
    assert c.err("XADD", "c", "2-1", "f", "v") == (
        "ERR The ID specified in XADD is equal or smaller than the target stream top item")


def test_flushdb_flushall(server):
    c = server.raw()
    for db in ("0", "1"):
        c.call("SELECT", db)
        c.call("XADD", "k", "1-1", "f", "v")
        c.call("XADD", "k2", "1-1", "f", "v")
    c.call("SELECT", "1")
    assert c.call_raw("FLUSHDB") == b"+OK\r\n"
    assert c.call("DBSIZE") == 0
    c.call("SELECT", "0")
    assert c.call("DBSIZE") == 2
    c.call("SELECT", "1")
    c.call("XADD", "k", "1-1", "f", "v")
    assert c.call_raw("FLUSHALL") == b"+OK\r\n"
    assert c.call("DBSIZE") == 0
    c.call("SELECT", "0")
    assert c.call("DBSIZE") == 0
    c.call("XADD", "k", "1-1", "f", "v")
    assert c.call("FLUSHALL", "SYNC") == "OK"
    c.call("XADD", "k", "1-1", "f", "v")
    assert c.call("FLUSHALL", "ASYNC") == "OK"
    assert c.call("DBSIZE") == 0
    c.call("XADD", "k", "1-1", "f", "v")
    assert c.call("FLUSHDB", "ASYNC") == "OK"
    assert c.call("DBSIZE") == 0
    assert c.err("FLUSHALL", "foo") == "ERR syntax error"
    assert c.err("FLUSHDB", "foo") == "ERR syntax error"


# ---------------------------------------------------------------------------
# INFO, CONFIG, CLIENT, COMMAND
# ---------------------------------------------------------------------------

def test_info(server):
    c = server.raw()
    for i in range(3):
        c.call("XADD", "k%d" % i, "1-1", "f", "v")
    c.call("SELECT", "4")
    c.call("XADD", "k", "1-1", "f", "v")
    text = c.call("INFO")
    assert isinstance(text, bytes)
    text = text.decode()
    for section in ("Server", "Clients", "Memory", "Persistence", "Stats", "Keyspace"):
        assert ("# %s\r\n" % section) in text, "section %s missing" % section
    f = info_fields(text)
    assert f["db0"].startswith("keys=3,"), f["db0"]
    assert f["db4"].startswith("keys=1,"), f["db4"]
    assert "db1" not in f
    for field in ("connected_clients", "blocked_clients", "total_connections_received",
                  "total_commands_processed", "tcp_port", "process_id"):
        assert re.fullmatch(r"\d+", f[field]), (field, f.get(field))
    assert int(f["tcp_port"]) == server.port
    assert int(f["connected_clients"]) >= 1
    # one section only
    ks = c.call("INFO", "keyspace").decode()
    assert ks.startswith("# Keyspace\r\n")
    assert "# Server" not in ks
    assert set(info_fields(ks)) == {"db0", "db4"}
    cl = c.call("INFO", "clients").decode()
    assert cl.startswith("# Clients\r\n") and "blocked_clients:" in cl


def test_info_commandstats_errorstats(server):
    c = server.raw()
    assert c.call("CONFIG", "RESETSTAT") == "OK"
    c.call("XADD", "s", "1-1", "f", "v")
    c.err("XADD", "s", "1-1", "f", "v")      # fails while executing: failed_calls
    c.err("XADD", "s")                       # wrong arity: rejected_calls
    c.err("NOSUCHCMD")                       # only in errorstats
    cs = info_fields(c.call("INFO", "commandstats"))
    m = re.fullmatch(r"calls=(\d+),usec=\d+,usec_per_call=[\d.]+,rejected_calls=(\d+),"
                     r"failed_calls=(\d+)", cs["cmdstat_xadd"])
    assert m, cs["cmdstat_xadd"]
    assert m.groups() == ("2", "1", "1"), cs["cmdstat_xadd"]
    es = info_fields(c.call("INFO", "errorstats"))
    assert es["errorstat_ERR"] == "count=3", es


def test_info_blocked_clients(server):
    c = server.raw()
    b = server.raw()
    b.send("XREAD", "BLOCK", "0", "STREAMS", "s", "$")
    wait_until(lambda: info_fields(c.call("INFO", "clients"))["blocked_clients"] == "1",
               what="blocked_clients:1")
    c.call("XADD", "s", "1-1", "f", "v")
    assert b.read() == [[b"s", [[b"1-1", [b"f", b"v"]]]]]
    wait_until(lambda: info_fields(c.call("INFO", "clients"))["blocked_clients"] == "0",
               what="blocked_clients:0")


def test_config(server):
    c = server.raw()
    assert c.call("CONFIG", "GET", "stream-node-max-entries") == [b"stream-node-max-entries",
                                                                   b"100"]
    assert c.call_raw("CONFIG", "SET", "stream-node-max-entries", "7") == b"+OK\r\n"
    try:
        assert c.call("CONFIG", "GET", "stream-node-max-entries") == [
            b"stream-node-max-entries", b"7"]
        r = c.call("CONFIG", "GET", "stream-node-*")
        d = dict(zip(r[0::2], r[1::2]))
        assert d[b"stream-node-max-entries"] == b"7" and b"stream-node-max-bytes" in d, r
        assert c.err("CONFIG", "SET", "stream-node-max-entries", "abc") == (
            "ERR CONFIG SET failed (possibly related to argument 'stream-node-max-entries') - "
            "argument couldn't be parsed into an integer")
        assert c.err("CONFIG", "SET", "stream-node-max-entries", "-1") == (
            "ERR CONFIG SET failed (possibly related to argument 'stream-node-max-entries') - "
            "argument must be between 0 and 9223372036854775807 inclusive")
        assert c.call("CONFIG", "GET", "stream-node-max-entries")[1] == b"7"
    finally:
        c.call("CONFIG", "SET", "stream-node-max-entries", "100")
    # other runtime options read back as set
    for name in ("timeout", "maxclients"):
        v = c.call("CONFIG", "GET", name)
        assert len(v) == 2 and v[0] == name.encode() and re.fullmatch(rb"\d+", v[1]), v
    assert c.call("CONFIG", "GET", "port") == [b"port", str(server.port).encode()]
    assert c.call("CONFIG", "GET", "no-such-option") == []
    assert c.err("CONFIG", "SET", "no-such-option", "1") == (
        "ERR Unknown option or number of arguments for CONFIG SET - 'no-such-option'")
    assert c.err("CONFIG", "SET", "stream-node-max-entries") == ARITY % "config|set"
    assert c.err("CONFIG", "SET", "timeout", "0", "maxclients") == "ERR syntax error"
    # a plain name is answered as typed; a pattern by the option's own name
    assert c.call("CONFIG", "GET", "MAXCLIENTS", "maxclients")[0] == b"MAXCLIENTS"
    assert len(c.call("CONFIG", "GET", "MAXCLIENTS", "maxclients")) == 2
    assert c.call("CONFIG", "GET", "MAXCLIENT?")[0] == b"maxclients"
    # every name is checked before any value: the first unknown, immutable or repeated
    # one is the error, named as typed; a bad value names the option itself
    failed = "ERR CONFIG SET failed (possibly related to argument '%s') - %s"
    assert c.err("CONFIG", "SET", "timeout", "x", "databases", "1") == (
        failed % ("databases", "can't set immutable config"))
    assert c.err("CONFIG", "SET", "timeout", "7", "TimeOut", "8") == (
        failed % ("TimeOut", "duplicate parameter"))
    assert c.err("CONFIG", "SET", "timeout", "x", "no-such", "1") == (
        "ERR Unknown option or number of arguments for CONFIG SET - 'no-such'")
    assert c.err("CONFIG", "SET", "TIMEOUT", "x") == (
        failed % ("timeout", "argument couldn't be parsed into an integer"))
    assert c.call("CONFIG", "GET", "timeout") == [b"timeout", b"0"]
    for name in ("timeout", "tcp-keepalive"):
        old = c.call("CONFIG", "GET", name)[1]
        assert c.call("CONFIG", "SET", name, "2147483647") == "OK"
        assert c.err("CONFIG", "SET", name, "2147483648") == (
            failed % (name, "argument must be between 0 and 2147483647 inclusive"))
        assert c.call("CONFIG", "SET", name, old) == "OK"
    old = c.call("CONFIG", "GET", "maxclients")[1]
    assert c.call("CONFIG", "SET", "maxclients", "4294967295") == "OK"
    assert c.err("CONFIG", "SET", "maxclients", "4294967296") == (
        failed % ("maxclients", "argument must be between 1 and 4294967295 inclusive"))
    assert c.call("CONFIG", "SET", "maxclients", old) == "OK"
    # the replica class is still called slave; no classes at all changes nothing
    cobl = c.call("CONFIG", "GET", "client-output-buffer-limit")[1]
    assert b" slave 268435456 67108864 60 " in cobl, cobl
    assert c.call("CONFIG", "SET", "client-output-buffer-limit", "") == "OK"
    assert c.call("CONFIG", "GET", "client-output-buffer-limit")[1] == cobl
    assert c.err("CONFIG", "GET") == ARITY % "config|get"
    assert c.err("CONFIG", "FOO") == "ERR unknown subcommand 'FOO'. Try CONFIG HELP."
    assert c.call("CONFIG", "RESETSTAT") == "OK"
    # redis-py view
    assert server.client().config_get("stream-node-max-entries") == {
        "stream-node-max-entries": "100"}


def test_config_long_values_are_whole(server):
    """A long value comes back whole from CONFIG GET (echd once cut it at 511 bytes)."""
    s = server.spawn()
    c = s.raw()
    pw = "".join(chr(ord("a") + i % 26) for i in range(3000))
    assert c.call("CONFIG", "SET", "requirepass", pw) == "OK"
    assert c.call("CONFIG", "GET", "requirepass") == [b"requirepass", pw.encode()]
    other = s.raw()
    assert other.err("AUTH", pw[:1023]) == (
        "WRONGPASS invalid username-password pair or user is disabled.")
    assert other.call("AUTH", pw) == "OK"


@echd_only("echd's bound on an option's value (a config file line must hold it)")
def test_config_value_too_long(server):
    c = server.raw()
    assert c.err("CONFIG", "SET", "requirepass", "x" * 3969) == (
        "ERR CONFIG SET failed (possibly related to argument 'requirepass') - value longer "
        "than 3968 bytes")
    assert c.call("CONFIG", "GET", "requirepass") == [b"requirepass", b""]
    tmp = tempfile.mkdtemp(prefix="echd-longline-")
    try:
        conf = os.path.join(tmp, "echd.conf")
        with open(conf, "w") as f:
            f.write("maxclients 100\nrequirepass %s\n" % ("y" * 5000))
        p = subprocess.run([server.exe, conf, "--no-such-option", "x"], capture_output=True,
                           text=True, timeout=10, stdin=subprocess.DEVNULL)
        assert p.returncode == 2 and "echd.conf:2: line longer than 4095 bytes" in p.stderr, (
            p.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_config_rewrite_without_a_file(server):
    c = server.raw()
    assert c.err("CONFIG", "REWRITE") == "ERR The server is running without a config file"
    assert c.err("CONFIG", "REWRITE", "x") == ARITY % "config|rewrite"
    assert "REWRITE" in c.call("CONFIG", "HELP")


class ConfServer(Server):
    """An echd started with a config file (its first argument) as well as the harness'
    options, which override the file's."""

    def __init__(self, exe, conf):
        super().__init__("echd", exe)
        self.conf = conf

    def args(self):
        a = super().args()
        return [a[0], self.conf] + a[1:]


def conf_lines(path):
    with open(path) as f:
        return f.read().split("\n")


@echd_only("echd's config file layout (Redis' rewrite keeps the same rules, its file differs)")
def test_config_rewrite(server):
    tmp = tempfile.mkdtemp(prefix="echd-rewrite-")
    conf = os.path.join(tmp, "echd.conf")
    with open(conf, "w") as f:
        f.write("# the queue broker\n"
                "maxclients 100\n"
                "\n"
                "loglevel verbose\n"
                "LOGLEVEL warning   # a repeat: this one was in force\n"
                "slowlog-max-len 128\n")
    os.chmod(conf, 0o640)
    s = ConfServer(server.exe, conf)
    try:
        s.start()
        c = s.raw()
        assert c.call("CONFIG", "GET", "loglevel") == [b"loglevel", b"notice"]  # the harness'
        assert c.call("CONFIG", "SET", "maxclients", "200", "slowlog-max-len", "5",
                      "latency-tracking-info-percentiles", "1 2.5",
                      "requirepass", "pass with 'blanks'") == "OK"
        c.call("AUTH", "pass with 'blanks'")
        assert c.call("CONFIG", "REWRITE") == "OK"
        lines = conf_lines(conf)
        # comments, blank lines and the place of every option the file named stay;
        # a repeated option keeps its first line, with the value in force
        assert lines[:6] == ["# the queue broker", "maxclients 200", "", "loglevel notice",
                             "slowlog-max-len 5", "# Generated by CONFIG REWRITE"], lines
        added = dict(line.split(" ", 1) for line in lines[6:] if line)
        # what differs from the defaults is added: the harness' command-line options too
        assert added["port"] == str(s.port) and added["dir"] == s.dir
        assert added["latency-tracking-info-percentiles"] == "1 2.5"
        assert added["requirepass"] == '"pass with \'blanks\'"'
        assert "timeout" not in added and "databases" not in added      # at their defaults
        assert os.stat(conf).st_mode & 0o777 == 0o640
        assert sorted(os.listdir(tmp)) == ["echd.conf"]      # no temporary file is left
        # a second rewrite changes nothing, and the file gives back what was in force
        assert c.call("CONFIG", "REWRITE") == "OK"
        assert conf_lines(conf) == lines
        s.stop()
        s.start()
        c = s.raw()
        assert c.err("PING").startswith("NOAUTH")
        c.call("AUTH", "pass with 'blanks'")
        assert c.call("CONFIG", "GET", "maxclients")[1] == b"200"
        assert c.call("CONFIG", "GET", "slowlog-max-len")[1] == b"5"
        assert c.call("CONFIG", "GET", "latency-tracking-info-percentiles")[1] == b"1 2.5"
        # a value the file cannot hold is refused and the file left alone
        assert c.call("CONFIG", "SET", "requirepass", "both \" and '") == "OK"
        c.call("AUTH", "both \" and '")
        assert c.err("CONFIG", "REWRITE") == ("ERR Rewriting config file: the value of "
                                              "'requirepass' cannot be written in a config file")
        assert conf_lines(conf) == lines and sorted(os.listdir(tmp)) == ["echd.conf"]
        # so is a rewrite whose directory went away; the server keeps working
        moved = tmp + ".moved"
        os.rename(tmp, moved)
        try:
            assert c.err("CONFIG", "REWRITE") == (
                "ERR Rewriting config file: No such file or directory")
            assert c.call("PING") == "PONG"
        finally:
            os.rename(moved, tmp)
    finally:
        s.stop()
        s.remove()
        shutil.rmtree(tmp, ignore_errors=True)


def test_client_id_name_info(server):
    c = server.raw()
    cid = c.call("CLIENT", "ID")
    assert isinstance(cid, int) and cid > 0
    other = server.raw()
    assert other.call("CLIENT", "ID") > cid  # ids increase
    assert c.call_raw("CLIENT", "GETNAME") == b"$-1\r\n"
    assert c.call_raw("CLIENT", "SETNAME", "app-1") == b"+OK\r\n"
    assert c.call("CLIENT", "GETNAME") == b"app-1"
    assert c.err("CLIENT", "SETNAME", "a b") == (
        "ERR Client names cannot contain spaces, newlines or special characters.")
    assert c.err("CLIENT", "SETNAME", "a\nb") == (
        "ERR Client names cannot contain spaces, newlines or special characters.")
    assert c.call("CLIENT", "GETNAME") == b"app-1"
    c.call("CLIENT", "SETNAME", "")            # clears the name
    assert c.call("CLIENT", "GETNAME") is None
    c.call("CLIENT", "SETNAME", "app-1")
    c.call("SELECT", "3")
    info = c.call("CLIENT", "INFO")
    assert isinstance(info, bytes) and info.endswith(b"\n") and info.count(b"\n") == 1
    f = client_fields(info)
    for k in ("id", "addr", "laddr", "fd", "name", "age", "idle", "flags", "db", "cmd", "resp"):
        assert k in f, (k, f)
    assert f["id"] == str(cid) and f["name"] == "app-1" and f["db"] == "3", f
    assert f["cmd"] == "client|info", f
    assert f["laddr"] == "127.0.0.1:%d" % server.client_port
    assert f["addr"] == "127.0.0.1:%d" % c.sock.getsockname()[1]
    assert c.err("CLIENT", "FOO") == "ERR unknown subcommand 'FOO'. Try CLIENT HELP."
    assert c.err("CLIENT") == ARITY % "client"


def test_client_info_long_name(server):
    # a name is limited only by the bulk length: the line is never cut short
    c = server.raw()
    name = "n" * 5000
    c.call("CLIENT", "SETNAME", name)
    info = c.call("CLIENT", "INFO")
    assert info.endswith(b"\n") and info.count(b"\n") == 1, info[-100:]
    f = client_fields(info)
    assert f["name"] == name and f["cmd"] == "client|info", info[-200:]
    line = [x for x in c.call("CLIENT", "LIST").decode().splitlines() if name in x]
    assert len(line) == 1 and client_fields(line[0])["resp"] == "2", line


def test_command_getkeys(server):
    """COMMAND GETKEYS finds keys as the ACL does: the arguments after the STREAMS that
    ends XREAD's and XREADGROUP's options (a group, consumer or key may be called
    "streams"), a container's key after its subcommand, OBJECT's and MEMORY USAGE's too."""
    c = server.raw()
    cases = [
        (["XREADGROUP", "GROUP", "streams", "c1", "STREAMS", "jobs:a", ">"], [b"jobs:a"]),
        (["XREADGROUP", "GROUP", "STREAMS", "jobs:x", "STREAMS", "jobs:a", "secret", "0", ">"],
         [b"jobs:a", b"secret"]),
        (["XREADGROUP", "GROUP", "g2", "streams", "streams", "other", ">"], [b"other"]),
        (["XREADGROUP", "GROUP", "g", "c", "NOACK", "COUNT", "1", "BLOCK", "1", "STREAMS",
          "k", ">"], [b"k"]),
        (["XREAD", "COUNT", "1", "STREAMS", "a", "b", "0", "0"], [b"a", b"b"]),
        (["XREAD", "BLOCK", "0", "COUNT", "2", "STREAMS", "streams", "0"], [b"streams"]),
        (["XREAD", "STREAMS", "streams", "streams", "0", "0"], [b"streams", b"streams"]),
        (["XGROUP", "CREATE", "k", "g", "0"], [b"k"]),
        (["XGROUP", "DESTROY", "k", "g"], [b"k"]),
        (["XINFO", "STREAM", "k", "FULL"], [b"k"]),
        (["XINFO", "CONSUMERS", "k", "g"], [b"k"]),
        (["OBJECT", "ENCODING", "k"], [b"k"]),
        (["OBJECT", "FREQ", "k"], [b"k"]),
        (["MEMORY", "USAGE", "k", "SAMPLES", "5"], [b"k"]),
        (["XADD", "k", "*", "f", "v"], [b"k"]),
        (["XCLAIM", "k", "g", "c", "0", "1-1"], [b"k"]),
        (["DEL", "a", "b", "c"], [b"a", b"b", b"c"]),
        (["RENAME", "a", "b"], [b"a", b"b"]),
        (["COPY", "a", "b", "REPLACE"], [b"a", b"b"]),
        (["MOVE", "a", "1"], [b"a"]),
        (["WATCH", "a", "b"], [b"a", b"b"]),
        (["EXPIRE", "a", "10", "NX"], [b"a"]),
        (["TOUCH", "a", "b"], [b"a", b"b"]),
    ]
    for argv, keys in cases:
        assert c.call("COMMAND", "GETKEYS", *argv) == keys, argv
    errors = [
        (["NOSUCH", "a"], "ERR Invalid command specified"),
        (["XGROUP", "BOGUS", "k"], "ERR Invalid command specified"),
        (["PING", "x"], "ERR The command has no key arguments"),
        (["XGROUP", "HELP"], "ERR The command has no key arguments"),
        (["OBJECT", "HELP"], "ERR The command has no key arguments"),
        (["XREAD", "STREAMS", "a"], "ERR Invalid number of arguments specified for command"),
        (["OBJECT", "ENCODING"], "ERR Invalid number of arguments specified for command"),
        (["XREAD", "COUNT", "1", "STREAMS"], "ERR Invalid arguments specified for command"),
        (["PING"], "ERR wrong number of arguments for 'command|getkeys' command"),
    ]
    for argv, err in errors:
        assert c.err("COMMAND", "GETKEYS", *argv) == err, argv
    assert b"command|getkeys" in c.call("COMMAND", "LIST")
    # every keyspace, stream and transaction command whose keys do not move (the kinds
    # echd has): GETKEYS agrees with COMMAND's first, last, step
    checked = 0
    for row in c.call("COMMAND"):
        name, arity, flags, first, last, step, cats = row[:7]
        if first == 0 or "movablekeys" in flags or not (
                {"@keyspace", "@stream", "@transaction"} & set(cats)):
            continue
        n = max(abs(arity), first + 1, last + 1)
        argv = [name.decode()] + ["k%d" % i for i in range(1, arity if arity > 0 else n)]
        end = last if last > 0 else len(argv) + last
        want = [a.encode() for a in argv[first:end + 1:step]]
        assert c.call("COMMAND", "GETKEYS", *argv) == want, (argv, first, last, step)
        checked += 1
    assert checked >= 25, checked
    auth = c.call("COMMAND", "INFO", "auth", "hello")
    assert "no_auth" in auth[0][2] and "no_auth" in auth[1][2], auth


@echd_only("Redis 7.0, the oracle here, has no CLIENT NO-TOUCH")
def test_command_info_resp3_sets_and_no_touch(server):
    c = server.raw()
    c.call("HELLO", "3")
    raw = c.call_raw("COMMAND", "INFO", "xlen")
    # flags and categories, then tips, key specs (a set of maps) and subcommands: all sets,
    # byte for byte as Redis 7.0 sends them
    assert raw == (b"*1\r\n*10\r\n$4\r\nxlen\r\n:2\r\n~2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n"
                   b":1\r\n~3\r\n+@read\r\n+@stream\r\n+@fast\r\n~0\r\n~1\r\n%3\r\n$5\r\nflags\r\n"
                   b"~1\r\n+RO\r\n$12\r\nbegin_search\r\n%2\r\n$4\r\ntype\r\n$5\r\nindex\r\n$4\r\n"
                   b"spec\r\n%1\r\n$5\r\nindex\r\n:1\r\n$9\r\nfind_keys\r\n%2\r\n$4\r\ntype\r\n"
                   b"$5\r\nrange\r\n$4\r\nspec\r\n%3\r\n$7\r\nlastkey\r\n:0\r\n$7\r\nkeystep\r\n"
                   b":1\r\n$5\r\nlimit\r\n:0\r\n~0\r\n"), raw
    assert c.call_raw("COMMAND", "INFO", "no-such-command") == b"*1\r\n_\r\n"
    assert c.call("CLIENT", "NO-TOUCH", "OFF") == "OK"
    assert c.err("CLIENT", "NO-TOUCH", "1") == "ERR syntax error"


@echd_only("CLIENT SETINFO is Redis 7.2's; the oracle here is Redis 7.0")
def test_client_setinfo(server):
    c = server.raw()
    other = server.raw()
    assert c.call_raw("CLIENT", "SETINFO", "LIB-NAME", "ioredis") == b"+OK\r\n"
    assert c.call_raw("CLIENT", "SETINFO", "lib-ver", "5.9.3") == b"+OK\r\n"
    f = client_fields(c.call("CLIENT", "INFO"))
    assert (f["lib-name"], f["lib-ver"]) == ("ioredis", "5.9.3"), f
    cid = str(c.call("CLIENT", "ID"))
    seen = client_fields(other.call("CLIENT", "LIST", "ID", cid).decode().strip())
    assert (seen["lib-name"], seen["lib-ver"]) == ("ioredis", "5.9.3"), seen
    # the attribute is echoed as the client spelled it
    assert c.err("CLIENT", "SETINFO", "Lib-Name", "a b") == (
        "ERR Lib-Name cannot contain spaces, newlines or special characters.")
    assert c.err("CLIENT", "SETINFO", "lib-ver", "1\n2") == (
        "ERR lib-ver cannot contain spaces, newlines or special characters.")
    assert c.err("CLIENT", "SETINFO", "lib-color", "red") == "ERR Unrecognized option 'lib-color'"
    assert c.err("CLIENT", "SETINFO", "lib-name") == ARITY % "client|setinfo"
    f = client_fields(c.call("CLIENT", "INFO"))
    assert (f["lib-name"], f["lib-ver"]) == ("ioredis", "5.9.3"), f  # errors changed nothing
    c.call("CLIENT", "SETINFO", "LIB-NAME", "")  # an empty value clears it
    f = client_fields(c.call("CLIENT", "INFO"))
    assert (f["lib-name"], f["lib-ver"]) == ("", "5.9.3"), f
    assert "SETINFO <option> <value>" in c.call("CLIENT", "HELP")


def test_client_list(server):
    a = server.raw()
    b = server.raw()
    a.call("CLIENT", "SETNAME", "alpha")
    bid = b.call("CLIENT", "ID")
    text = a.call("CLIENT", "LIST")
    assert isinstance(text, bytes)
    lines = [client_fields(x) for x in text.decode().splitlines()]
    ids = {x["id"] for x in lines}
    assert {str(a.call("CLIENT", "ID")), str(bid)} <= ids
    me = [x for x in lines if x["name"] == "alpha"]
    assert len(me) == 1 and me[0]["cmd"] == "client|list", me
    only = a.call("CLIENT", "LIST", "ID", str(bid)).decode().splitlines()
    assert len(only) == 1 and client_fields(only[0])["id"] == str(bid)
    normal = a.call("CLIENT", "LIST", "TYPE", "normal").decode().splitlines()
    assert len(normal) == len(lines)
    for other in ("replica", "slave", "master", "pubsub"):
        assert a.call("CLIENT", "LIST", "TYPE", other) == b"", other
    assert a.err("CLIENT", "LIST", "TYPE", "bogus") == "ERR Unknown client type 'bogus'"
    assert a.err("CLIENT", "LIST", "TYPE", "normal", "ID", str(bid)) == "ERR syntax error"
    assert a.err("CLIENT", "LIST", "ID") == "ERR syntax error"
    # oldest first
    c3 = server.raw()
    cid = c3.call("CLIENT", "ID")
    order = [int(client_fields(x)["id"]) for x in a.call("CLIENT", "LIST").decode().splitlines()]
    assert order == sorted(order) and order[-1] == cid, order
    assert a.err("CLIENT", "UNBLOCK", "1", "ERROR", "x") == (
        "ERR unknown subcommand or wrong number of arguments for 'UNBLOCK'. Try CLIENT HELP.")
    assert a.err("CLIENT", "UNBLOCK") == ARITY % "client|unblock"
    # one line per id given, in their order, repeats included; ids no client has (0 and
    # negative ones too) add nothing; a non-number fails the whole command
    aid = a.call("CLIENT", "ID")

    def listed(*ids):
        text = a.call("CLIENT", "LIST", "ID", *[str(i) for i in ids]).decode()
        return [int(client_fields(x)["id"]) for x in text.splitlines()]

    assert listed(bid, aid) == [bid, aid]
    assert listed(aid, bid) == [aid, bid]
    assert listed(aid, aid) == [aid, aid]
    assert listed(0, bid, -1, 10**12) == [bid]
    assert listed(0) == []
    assert a.err("CLIENT", "LIST", "ID", str(bid), "x") == "ERR Invalid client ID"
    assert a.call("CLIENT", "NO-EVICT", "on") == "OK"
    assert a.err("CLIENT", "NO-EVICT", "maybe") == "ERR syntax error"
    assert server.client().client_setname("py") is True


def test_client_kill(server):
    c = server.raw()
    victim = server.raw()
    vid = victim.call("CLIENT", "ID")
    assert c.call("CLIENT", "KILL", "ID", str(vid)) == 1
    assert victim.wait_closed(5), "killed client still connected"
    assert c.call("CLIENT", "KILL", "ID", str(vid)) == 0
    assert c.call("CLIENT", "KILL", "ID", "999999") == 0
    # old form: addr
    v2 = server.raw()
    v2.call("PING")
    addr = "127.0.0.1:%d" % v2.sock.getsockname()[1]
    assert c.call_raw("CLIENT", "KILL", addr) == b"+OK\r\n"
    assert v2.wait_closed(5)
    assert c.err("CLIENT", "KILL", "1.2.3.4:5") == "ERR No such client"
    # new form: ADDR filter
    v3 = server.raw()
    v3.call("PING")
    addr = "127.0.0.1:%d" % v3.sock.getsockname()[1]
    assert c.call("CLIENT", "KILL", "ADDR", addr) == 1
    assert v3.wait_closed(5)
    # the new form skips the caller unless SKIPME no; then it closes after the reply
    myid = c.call("CLIENT", "ID")
    assert c.call("CLIENT", "KILL", "ID", str(myid)) == 0
    assert c.call("CLIENT", "KILL", "ID", str(myid), "SKIPME", "no") == 1
    assert c.wait_closed(5)
    # the old form on the caller's own address answers too, then closes
    me = server.raw()
    addr = "127.0.0.1:%d" % me.sock.getsockname()[1]
    assert me.call_raw("CLIENT", "KILL", addr) == b"+OK\r\n"
    assert me.wait_closed(5)
    assert server.raw().call("PING") == "PONG"


def test_client_kill_filters(server):
    c = server.raw()
    assert c.call("ACL", "SETUSER", "kf", "on", ">pw", "+@all", "~*") == "OK"
    try:
        alice = server.raw()
        assert alice.call("AUTH", "kf", "pw") == "OK"
        other = server.raw()
        oid = other.call("CLIENT", "ID")
        aid = alice.call("CLIENT", "ID")
        # CLIENT LIST names each connection's user and counts what MULTI queued
        assert alice.call("MULTI") == "OK"
        assert alice.call("PING") == "QUEUED"
        f = client_fields(c.call("CLIENT", "LIST", "ID", str(aid)))
        assert (f["user"], f["multi"], f["flags"]) == ("kf", "1", "x"), f
        f = client_fields(c.call("CLIENT", "LIST", "ID", str(oid)))
        assert (f["user"], f["multi"], f["flags"]) == ("default", "-1", "N"), f
        assert alice.call("EXEC") == ["PONG"]

        assert c.err("CLIENT", "KILL", "TYPE", "bogus") == "ERR Unknown client type 'bogus'"
        assert c.err("CLIENT", "KILL", "USER", "nobody") == "ERR No such user 'nobody'"
        assert c.call("CLIENT", "KILL", "TYPE", "pubsub") == 0
        assert c.call("CLIENT", "KILL", "TYPE", "master") == 0
        # USER closes that user's connections only
        assert c.call("CLIENT", "KILL", "USER", "kf") == 1
        assert alice.wait_closed(5)
        assert other.call("PING") == "PONG"
        assert c.call("CLIENT", "KILL", "TYPE", "normal", "ID", str(oid)) == 1
        assert other.wait_closed(5)
        assert c.call("PING") == "PONG"
    finally:
        c.call("ACL", "DELUSER", "kf")


@echd_only("CLIENT KILL MAXAGE is new in Redis 7.4")
def test_client_kill_maxage(server):
    c = server.raw()
    victim = server.raw()
    vid = victim.call("CLIENT", "ID")
    assert c.err("CLIENT", "KILL", "MAXAGE", "x") == "ERR value is not an integer or out of range"
    assert c.call("CLIENT", "KILL", "MAXAGE", "1000", "ID", str(vid)) == 0
    time.sleep(1.1)
    assert victim.call("PING") == "PONG"
    assert c.call("CLIENT", "KILL", "MAXAGE", "1", "ID", str(vid)) == 1
    assert victim.wait_closed(5)


def commandstats(c):
    return {k[len("cmdstat_"):]: dict(kv.split("=") for kv in v.split(","))
            for k, v in info_fields(c.call("INFO", "commandstats")).items()}


def test_wait_without_replicas(server):
    """WAIT numreplicas timeout. There are no replicas (Redis without any, echd never has
    them): asking for none answers 0 at once, asking for more blocks until the timeout and
    answers 0, and inside MULTI it does not block."""
    c = server.raw()
    assert c.call("WAIT", "0", "0") == 0
    assert c.call("WAIT", "-1", "0") == 0
    assert c.err("WAIT", "x", "0") == "ERR value is not an integer or out of range"
    assert c.err("WAIT", "0", "x") == "ERR timeout is not an integer or out of range"
    assert c.err("WAIT", "0", "1.5") == "ERR timeout is not an integer or out of range"
    assert c.err("WAIT", "0", "-1") == "ERR timeout is negative"
    assert c.err("WAIT", "1") == ARITY % "wait"
    t0 = time.monotonic()
    assert c.call("WAIT", "1", "200") == 0
    assert time.monotonic() - t0 >= 0.19
    assert c.call("MULTI") == "OK"
    assert c.call("WAIT", "5", "0") == "QUEUED"
    assert c.call("EXEC") == [0]           # would block for ever outside MULTI
    assert c.call("PING") == "PONG"


def test_wait_blocked_and_unblocked(server):
    """A blocking WAIT is a blocked client like a blocked XREAD: counted in blocked_clients,
    flagged b, ended by CLIENT UNBLOCK (TIMEOUT: its timeout reply; ERROR: UNBLOCKED), and
    counted in commandstats once it answers, as is an XREAD that timed out."""
    c = server.raw()
    assert c.call("CONFIG", "RESETSTAT") == "OK"
    w = server.raw()
    wid = w.call("CLIENT", "ID")
    w.send("WAIT", "1", "0")
    wait_until(lambda: info_fields(c.call("INFO", "clients"))["blocked_clients"] == "1",
               what="WAIT blocked")
    line = [ln for ln in c.call("CLIENT", "LIST").decode().splitlines()
            if client_fields(ln)["id"] == str(wid)][0]
    assert client_fields(line)["flags"] == "b"
    assert c.call("CLIENT", "UNBLOCK", str(wid)) == 1
    assert w.read() == 0
    assert info_fields(c.call("INFO", "clients"))["blocked_clients"] == "0"
    assert c.call("CLIENT", "UNBLOCK", str(wid)) == 0      # no longer blocked
    w.send("WAIT", "1", "0")
    wait_until(lambda: info_fields(c.call("INFO", "clients"))["blocked_clients"] == "1",
               what="WAIT blocked again")
    assert c.call("CLIENT", "UNBLOCK", str(wid), "ERROR") == 1
    e = w.read()
    assert isinstance(e, RespError) and str(e) == "UNBLOCKED client unblocked via CLIENT UNBLOCK"
    assert w.call("WAIT", "1", "30") == 0
    assert w.call("XREAD", "BLOCK", "30", "STREAMS", "nothing", "$") is None
    stats = commandstats(c)
    assert stats["wait"]["calls"] == "3", stats["wait"]
    assert stats["xread"]["calls"] == "1", stats["xread"]


def slowlog_args(c, n=1):
    """The argument lists of the newest n SLOWLOG entries, newest first."""
    return [[a.decode() for a in e[3]] for e in c.call("SLOWLOG", "GET", str(n))]


def test_slowlog(server):
    """SLOWLOG GET/LEN/RESET/HELP with Redis' entry shape, limits and redactions."""
    c = server.raw()
    try:
        check_slowlog(server, c)
    finally:
        c.call("CONFIG", "SET", "slowlog-max-len", "128", "slowlog-log-slower-than", "10000")


def check_slowlog(server, c):
    assert c.call("CONFIG", "SET", "slowlog-log-slower-than", "0") == "OK"
    assert c.call("CONFIG", "SET", "slowlog-max-len", "128") == "OK"
    assert c.call("SLOWLOG", "RESET") == "OK"
    assert c.call("SLOWLOG", "LEN") == 1                 # the RESET itself
    assert c.call("CLIENT", "SETNAME", "logged") == "OK"
    t0 = int(time.time())
    assert c.call("XADD", "s", "1-1", "f", "x" * 200) == b"1-1"
    entry = c.call("SLOWLOG", "GET", "1")[0]
    assert len(entry) == 6
    ident, when, micros, args, peer, name = entry
    assert t0 - 1 <= when <= time.time() + 1 and micros >= 0
    assert args == [b"XADD", b"s", b"1-1", b"f", b"x" * 128 + b"... (72 more bytes)"]
    assert peer.decode() == client_fields(c.call("CLIENT", "INFO"))["addr"]
    assert name == b"logged"
    # the GET and CLIENT INFO above came next
    assert slowlog_args(c) == [["CLIENT", "INFO"]]
    assert c.call("SLOWLOG", "GET", "1")[0][0] == ident + 3
    # 32 arguments at most, the last one saying how many more there were
    fields = [x for i in range(40) for x in ("f%d" % i, "v")]
    assert c.call("XADD", "s", "2-1", *fields) == b"2-1"
    args = slowlog_args(c)[0]
    assert len(args) == 32 and args[:4] == ["XADD", "s", "2-1", "f0"]
    assert args[31] == "... (52 more arguments)"
    # secrets are not logged
    assert c.err("AUTH", "nobody", "secret1") == (
        "WRONGPASS invalid username-password pair or user is disabled.")
    assert slowlog_args(c)[0] == ["AUTH", "(redacted)", "(redacted)"]
    assert c.err("HELLO", "2", "AUTH", "nobody", "secret2") == (
        "WRONGPASS invalid username-password pair or user is disabled.")
    assert slowlog_args(c)[0] == ["HELLO", "2", "AUTH", "(redacted)", "(redacted)"]
    assert c.err("HELLO", "2", "SETNAME", "auth", "AUTH", "nobody", "secret2") == (
        "WRONGPASS invalid username-password pair or user is disabled.")
    assert slowlog_args(c)[0] == ["HELLO", "2", "SETNAME", "auth", "AUTH", "(redacted)",
                                  "(redacted)"]
    assert c.call("ACL", "SETUSER", "u1", "on", ">secret3") == "OK"
    assert slowlog_args(c)[0] == ["ACL", "SETUSER"] + ["(redacted)"] * 3
    assert c.call("CONFIG", "SET", "requirepass", "", "maxclients", "1000") == "OK"
    assert slowlog_args(c)[0] == ["CONFIG", "SET", "requirepass", "(redacted)", "maxclients",
                                  "1000"]
    assert c.call("ACL", "DELUSER", "u1") == 1
    # EXEC is not logged, the commands it ran are
    assert c.pipeline([("MULTI",), ("XLEN", "s"), ("EXEC",)]) == ["OK", "QUEUED", [2]]
    assert slowlog_args(c, 2) == [["XLEN", "s"], ["MULTI"]]
    # newest first, ids one apart, GET's count
    n = c.call("SLOWLOG", "LEN")
    got = c.call("SLOWLOG", "GET")
    assert len(got) == 10 and [e[0] for e in got] == list(range(got[0][0], got[0][0] - 10, -1))
    assert len(c.call("SLOWLOG", "GET", "-1")) == n + 2      # the LEN and the GET
    assert c.call("SLOWLOG", "GET", "0") == []
    # slowlog-max-len keeps the newest; -1 logs nothing, nor does a high threshold
    assert c.call("CONFIG", "SET", "slowlog-max-len", "3") == "OK"
    assert c.call("PING") == "PONG"
    assert c.call("SLOWLOG", "LEN") == 3
    assert slowlog_args(c, 3) == [["SLOWLOG", "LEN"], ["PING"],
                                  ["CONFIG", "SET", "slowlog-max-len", "3"]]
    assert c.call("CONFIG", "SET", "slowlog-log-slower-than", "-1") == "OK"
    assert c.call("SLOWLOG", "RESET") == "OK"
    assert c.call("PING") == "PONG"
    assert c.call("SLOWLOG", "LEN") == 0
    assert c.call("CONFIG", "SET", "slowlog-log-slower-than", "10000000") == "OK"
    assert c.call("PING") == "PONG"
    assert c.call("SLOWLOG", "LEN") == 0
    assert c.call("CONFIG", "SET", "slowlog-log-slower-than", "0") == "OK"
    assert c.call("SLOWLOG", "LEN") == 1
    # a blocked command is logged once it answers, as it was sent
    r = server.raw()
    r.send("XREAD", "BLOCK", "0", "STREAMS", "k", "$")
    wait_until(lambda: info_fields(c.call("INFO", "clients"))["blocked_clients"] == "1",
               what="XREAD blocked")
    assert c.call("XADD", "k", "5-1", "f", "v") == b"5-1"
    assert r.read() == [[b"k", [[b"5-1", [b"f", b"v"]]]]]
    assert slowlog_args(c, 2) == [["XREAD", "BLOCK", "0", "STREAMS", "k", "$"],
                                  ["XADD", "k", "5-1", "f", "v"]]


@echd_only("Redis 7.0 logs no blocked command that timed out; 7.2 logs a timed-out XREAD "
           "(updateStatsOnUnblock), and echd logs WAIT's the same way")
def test_slowlog_blocked_timeout(server):
    c = server.raw()
    try:
        assert c.call("CONFIG", "SET", "slowlog-log-slower-than", "0") == "OK"
        assert c.call("WAIT", "1", "20") == 0
        assert slowlog_args(c)[0] == ["WAIT", "1", "20"]
        assert c.call("XREAD", "BLOCK", "20", "STREAMS", "none", "$") is None
        assert slowlog_args(c)[0] == ["XREAD", "BLOCK", "20", "STREAMS", "none", "$"]
        w = server.raw()
        wid = w.call("CLIENT", "ID")
        w.send("WAITAOF", "0", "1", "0")
        wait_until(lambda: info_fields(c.call("INFO", "clients"))["blocked_clients"] == "1",
                   what="WAITAOF blocked")
        assert c.call("CLIENT", "UNBLOCK", str(wid)) == 1
        assert w.read() == [1, 0]
        assert slowlog_args(c, 2)[1] == ["WAITAOF", "0", "1", "0"]
    finally:
        c.call("CONFIG", "SET", "slowlog-log-slower-than", "10000")


def test_slowlog_errors(server):
    c = server.raw()
    assert c.err("SLOWLOG") == ARITY % "slowlog"
    assert c.err("SLOWLOG", "FOO") == "ERR unknown subcommand 'FOO'. Try SLOWLOG HELP."
    assert c.err("SLOWLOG", "GET", "1", "2") == (
        "ERR unknown subcommand or wrong number of arguments for 'GET'. Try SLOWLOG HELP.")
    for bad in ("x", "-2", "1.5"):
        assert c.err("SLOWLOG", "GET", bad) == "ERR count should be greater than or equal to -1"
    for sub in ("LEN", "RESET", "HELP"):
        assert c.err("SLOWLOG", sub, "x") == ARITY % ("slowlog|" + sub.lower())
    helptext = c.call("SLOWLOG", "HELP")
    assert helptext[0].startswith("SLOWLOG <subcommand>") and "LEN" in helptext
    for name, bad, lo in (("slowlog-log-slower-than", "-2", "-1"), ("slowlog-max-len", "-1", "0")):
        assert c.err("CONFIG", "SET", name, bad) == (
            "ERR CONFIG SET failed (possibly related to argument '%s') - argument must be "
            "between %s and 9223372036854775807 inclusive" % (name, lo))
    got = c.call("CONFIG", "GET", "slowlog*")
    assert dict(zip(got[::2], got[1::2])) == {b"slowlog-log-slower-than": b"10000",
                                              b"slowlog-max-len": b"128"}


MONITOR_LINE = re.compile(r"^(\d+)\.(\d{6}) \[(\d+) ([^\]]+)\] (.*)$")


def monitor_lines(m, n):
    """The next n MONITOR lines of m as (db, addr, quoted arguments)."""
    out = []
    for _ in range(n):
        line = m.read()
        assert isinstance(line, str), line
        mt = MONITOR_LINE.match(line)
        assert mt, line
        assert abs(int(mt.group(1)) - time.time()) < 60
        out.append((int(mt.group(3)), mt.group(4), mt.group(5)))
    return out


def test_monitor(server):
    """MONITOR shows each command once it ran: its database and client, its arguments quoted
    as Redis quotes them, secrets redacted, admin commands and refused ones left out, the
    commands of a transaction at EXEC. A monitoring client may not touch keys."""
    m = server.raw()
    assert m.call("MONITOR") == "OK"
    c = server.raw()
    addr = client_fields(c.call("CLIENT", "INFO"))["addr"]
    value = b'a "q" \\ \n\r\t\x01\xff'
    cmds = [("SELECT", "3"), ("XADD", "s", "1-1", "f", value), ("CONFIG", "GET", "port"),
            ("AUTH", "x", "y"), ("NOSUCH", "x"), ("XLEN",), ("MULTI",), ("XLEN", "s"),
            ("EXEC",), ("ACL", "WHOAMI"), ("ACL", "USERS"), ("PING",)]
    for cmd in cmds:
        c.send(*cmd)
        c.read()
    assert monitor_lines(m, 1)[0] == (0, addr, '"CLIENT" "INFO"')
    got = monitor_lines(m, 8)
    assert all(db == 3 and a == addr for db, a, _ in got), got
    assert [line for _, _, line in got] == [
        '"SELECT" "3"',
        '"XADD" "s" "1-1" "f" "a \\"q\\" \\\\ \\n\\r\\t\\x01\\xff"',
        '"AUTH" "(redacted)" "(redacted)"',
        '"MULTI"', '"XLEN" "s"', '"EXEC"', '"ACL" "WHOAMI"', '"PING"']
    # the monitor itself
    assert m.err("XLEN", "s") == "ERR Replica can't interact with the keyspace"
    assert m.call("PING") == "PONG"
    assert monitor_lines(m, 1)[0][2] == '"PING"'
    m.send("MONITOR")                      # no reply: the PING after it answers first
    assert m.call("PING") == "PONG"
    assert monitor_lines(m, 1)[0][2] == '"PING"'
    line = [ln for ln in c.call("CLIENT", "LIST").decode().splitlines()
            if client_fields(ln)["addr"] != addr][0]
    assert client_fields(line)["flags"] == "O"
    assert m.call("RESET") == "RESET"
    assert c.call("PING") == "PONG"
    assert m.call("XLEN", "s") == 0        # database 0 again, and no line came before it
    t = server.raw()
    assert t.pipeline([("MULTI",), ("MONITOR",), ("EXEC",)]) == [
        "OK", "QUEUED", [RespError("ERR MONITOR isn't allowed for DENY BLOCKING client")]]


def test_save_and_bgsave(server):
    """Every acknowledged write is already on disk in echd; SAVE and BGSAVE answer as Redis
    does and parse their arguments as it does."""
    c = server.raw()
    assert c.err("BGSAVE", "FOO") == "ERR syntax error"
    assert c.err("BGSAVE", "SCHEDULE", "x") == "ERR syntax error"
    assert c.err("SAVE", "x") == ARITY % "save"
    assert c.call("BGSAVE") == "Background saving started"
    wait_until(lambda: b"rdb_bgsave_in_progress:0" in c.call("INFO", "persistence"),
               timeout=10, what="the background save to end")
    assert c.call("SAVE") == "OK"


def test_command(server):
    c = server.raw()
    n = c.call("COMMAND", "COUNT")
    assert isinstance(n, int) and n > 0
    names = [x.decode() for x in c.call("COMMAND", "LIST")]
    required = ["ping", "echo", "hello", "quit", "reset", "select", "dbsize", "time", "del",
                "unlink", "exists", "type", "keys", "scan", "rename", "flushdb", "flushall",
                "info", "config", "client", "command", "shutdown", "xadd", "xlen", "xrange",
                "xrevrange", "xdel", "xtrim", "xread", "xsetid", "xinfo"]
    for name in required:
        assert name in names, "%s missing from COMMAND LIST" % name
    # COMMAND COUNT counts top-level commands; COMMAND LIST also lists "parent|sub"
    assert n == len([x for x in names if "|" not in x]), (n, len(names))
    for sub in ("xgroup|create", "xinfo|stream", "config|get", "client|list", "acl|whoami"):
        assert sub in names, sub

    def listed(*filt):
        return sorted(x.decode() for x in c.call("COMMAND", "LIST", "FILTERBY", *filt))

    assert listed("PATTERN", "xgroup|c*") == ["xgroup|create", "xgroup|createconsumer"]
    assert listed("pattern", "XINFO*") == ["xinfo", "xinfo|consumers", "xinfo|groups",
                                           "xinfo|help", "xinfo|stream"]
    # a container is filed under @slow only, its subcommands under their own categories
    stream = listed("ACLCAT", "stream")
    assert "xadd" in stream and "xgroup|setid" in stream and "xinfo|stream" in stream
    assert "xgroup" not in stream and "xinfo" not in stream and "del" not in stream
    assert listed("ACLCAT", "nosuch") == [] and listed("MODULE", "x") == []
    for bad in (("bogus",), ("FILTERBY",), ("FILTERBY", "BOGUS", "x"),
                ("FILTERBY", "PATTERN", "x", "y")):
        assert c.err("COMMAND", "LIST", *bad) == "ERR syntax error", bad
    info = c.call("COMMAND", "INFO", "xadd")
    assert len(info) == 1 and len(info[0]) == 10, info
    name, arity, flags, first, last, step, acl = info[0][:7]
    assert (name, arity, first, last, step) == (b"xadd", -5, 1, 1, 1), info
    assert flags == ["write", "denyoom", "fast"], flags          # status replies
    assert acl == ["@write", "@stream", "@fast"], acl
    info = c.call("COMMAND", "INFO", "xread", "no-such-command", "XLEN")
    assert info[0][:6] == [b"xread", -4, ["readonly", "blocking", "movablekeys"], 0, 0, 0], info[0]
    assert info[1] is None
    assert c.call_raw("COMMAND", "INFO", "no-such-command") == b"*1\r\n$-1\r\n"  # a null bulk
    assert info[2][:6] == [b"xlen", 2, ["readonly", "fast"], 1, 1, 1], info[2]
    # a container lists its subcommands, each with its own arity and keys; "container|sub"
    # names one
    info = c.call("COMMAND", "INFO", "xgroup", "xgroup|create", "config|get", "xgroup|nosuch")
    subs = {s[0]: (s[1], s[3], s[4], s[5]) for s in info[0][9]}
    assert subs[b"xgroup|create"] == (-5, 2, 2, 1) and subs[b"xgroup|help"] == (2, 0, 0, 0), subs
    assert info[1][:2] == [b"xgroup|create", -5] and info[1][3:6] == [2, 2, 1], info[1]
    assert info[2][0] == b"config|get" and "admin" in info[2][2], info[2]
    assert info[3] is None
    docs = c.call("COMMAND", "DOCS", "xadd")
    assert len(docs) == 2 and docs[0] == b"xadd", docs
    d = dict(zip(docs[1][0::2], docs[1][1::2]))
    assert d[b"group"] == b"stream" and d[b"since"] == b"5.0.0", d
    assert isinstance(d[b"summary"], bytes) and d[b"summary"]
    assert isinstance(d[b"arguments"], list) and d[b"arguments"]
    assert c.call("COMMAND", "DOCS", "no-such-command") == []
    assert c.err("COMMAND", "FOO") == "ERR unknown subcommand 'FOO'. Try COMMAND HELP."


CONTAINERS = ("xgroup", "xinfo", "config", "client", "acl", "slowlog", "latency", "object",
              "memory", "pubsub", "command")


def pairs(flat):
    """A RESP2 map (a flat array) as a dict."""
    assert isinstance(flat, list) and len(flat) % 2 == 0, flat
    return dict(zip(flat[0::2], flat[1::2]))


def test_command_docs_subcommands(server):
    """A container's docs map its subcommands, "container|sub", to docs of their own; the
    subcommands are the ones COMMAND LIST lists, none forgotten."""
    c = server.raw()
    listed = [x.decode() for x in c.call("COMMAND", "LIST")]
    for cont in CONTAINERS:
        [name, docs] = c.call("COMMAND", "DOCS", cont)
        assert name == cont.encode(), name
        d = pairs(docs)
        assert {b"summary", b"since", b"group", b"complexity", b"subcommands"} <= set(d), d
        subs = pairs(d[b"subcommands"])
        want = {x for x in listed if x.startswith(cont + "|")}
        assert {k.decode() for k in subs} == want, (cont, sorted(subs), sorted(want))
        for full, sd in subs.items():
            sd = pairs(sd)
            for field in (b"summary", b"since", b"complexity"):
                assert isinstance(sd[field], bytes) and sd[field], (full, field, sd)
            assert sd[b"group"] == d[b"group"], (full, sd)
            assert b"subcommands" not in sd, full
            if b"arguments" in sd:
                assert isinstance(sd[b"arguments"], list) and sd[b"arguments"], (full, sd)
    # each subcommand, named alone, answers the same map
    [name, create] = c.call("COMMAND", "DOCS", "xgroup|create")
    assert name == b"xgroup|create"
    create = pairs(create)
    assert create[b"since"] == b"5.0.0" and create[b"group"] == b"stream", create
    assert create[b"complexity"] == b"O(1)", create
    args = [pairs(a) for a in create[b"arguments"]]
    assert args[0][b"type"] == b"key", args
    assert b"MKSTREAM" in [a.get(b"token") for a in args], args
    kill = pairs(c.call("COMMAND", "DOCS", "client|kill")[1])
    assert kill[b"group"] == b"connection" and kill[b"since"] == b"2.4.0", kill
    assert pairs(c.call("COMMAND", "DOCS", "client|id")[1])[b"since"] == b"5.0.0"
    help_ = pairs(c.call("COMMAND", "DOCS", "xinfo|help")[1])
    assert b"arguments" not in help_ and help_[b"complexity"] == b"O(1)", help_
    assert c.call("COMMAND", "DOCS", "xgroup|nosuch", "nosuch|create") == []


def test_command_docs_subcommands_resp3(server):
    """In RESP3 the docs and the subcommands are maps."""
    c = server.raw()
    c.call("HELLO", "3")
    docs = c.call("COMMAND", "DOCS", "xgroup", "client|setname")
    assert isinstance(docs, dict) and set(docs) == {b"xgroup", b"client|setname"}, docs
    subs = docs[b"xgroup"][b"subcommands"]
    assert isinstance(subs, dict) and b"xgroup|create" in subs, subs
    create = subs[b"xgroup|create"]
    assert isinstance(create, dict) and create[b"since"] == b"5.0.0", create
    assert isinstance(create[b"arguments"][0], dict), create
    setname = docs[b"client|setname"]
    assert [a[b"name"] for a in setname[b"arguments"]] == [b"connection-name"], setname
    # the whole table holds the subcommands too
    every = c.call("COMMAND", "DOCS")
    assert isinstance(every, dict) and b"client|list" in every[b"client"][b"subcommands"]


@echd_only("XGROUP SETPOLICY is echd's extension")
def test_command_docs_setpolicy(server):
    c = server.raw()
    subs = pairs(pairs(c.call("COMMAND", "DOCS", "xgroup")[1])[b"subcommands"])
    sp = pairs(subs[b"xgroup|setpolicy"])
    assert sp[b"group"] == b"stream" and b"policy" in sp[b"summary"], sp
    # echd's own subcommand dates from an echd version, not a Redis one
    version = info_fields(c.call("INFO", "server"))["echd_version"]
    assert sp[b"since"].decode() == version, (sp, version)
    args = [pairs(a) for a in sp[b"arguments"]]
    assert [a[b"name"] for a in args] == [b"key", b"group", b"ackwait", b"backoff",
                                          b"maxdeliver", b"deadletter", b"maxackpending",
                                          b"reset"], args
    # BACKOFF n ms [ms ...]: a block whose delays repeat
    backoff = [pairs(a) for a in args[3][b"arguments"]]
    assert [b.get(b"token") for b in backoff][0] == b"BACKOFF", backoff
    assert backoff[-1][b"flags"] == ["multiple"], backoff
    assert args[7][b"token"] == b"RESET" and args[7][b"flags"] == ["optional"], args
    assert pairs(c.call("COMMAND", "DOCS", "xgroup|setpolicy")[1]) == sp
    # XNACK's DELAY, the policies' other option, is in XNACK's arguments
    xnack = [pairs(a) for a in pairs(c.call("COMMAND", "DOCS", "xnack")[1])[b"arguments"]]
    assert xnack[-1][b"name"] == b"delay" and xnack[-1][b"flags"] == ["optional"], xnack


# ---------------------------------------------------------------------------
# Errors, protocol, pipelining
# ---------------------------------------------------------------------------

def test_unknown_command(server):
    c = server.raw()
    assert c.err("foo", "a", "b") == "ERR unknown command 'foo', with args beginning with: 'a' 'b' "
    assert c.err("FOO") == "ERR unknown command 'FOO', with args beginning with: "
    assert c.err("foo", "a", "b", "c", "d", "e", "f") == (
        "ERR unknown command 'foo', with args beginning with: 'a' 'b' 'c' 'd' 'e' 'f' ")
    # arguments are shown up to 128 characters, the name up to 128
    assert c.err("foo", "x" * 200, "y") == (
        "ERR unknown command 'foo', with args beginning with: '%s' " % ("x" * 128))
    assert c.err("f" * 200, "a") == (
        "ERR unknown command '%s', with args beginning with: 'a' " % ("f" * 128))
    # the connection stays usable
    assert c.call("PING") == "PONG"


def test_wrong_arity(server):
    c = server.raw()
    cases = [("XADD",), ("XADD", "s"), ("XADD", "s", "*"), ("XADD", "s", "*", "f"),
             ("XLEN",), ("XLEN", "a", "b"), ("XRANGE", "s", "-"), ("XREVRANGE", "s"),
             ("XDEL", "s"), ("XTRIM", "s"), ("XREAD",), ("XREAD", "STREAMS"),
             ("XSETID", "s"), ("XINFO",), ("TYPE",), ("RENAME", "a")]
    for args in cases:
        name = args[0].lower()
        assert c.err(*args) == ARITY % name, args
    assert c.err("xadd") == ARITY % "xadd"
    assert c.err("XaDd", "s") == ARITY % "xadd"


def protocol_error(server, data, expected):
    """Send garbage on a fresh connection: exact error, then the server closes it."""
    c = server.raw()
    c.send_raw(data)
    r = c.read_raw()
    assert r == expected, (data[:60], r)
    assert c.wait_closed(5), "connection left open after %r" % data[:60]


def test_protocol_errors(server):
    bystander = server.raw()
    bystander.call("XADD", "s", "1-1", "f", "v")
    protocol_error(server, b"*abc\r\n", b"-ERR Protocol error: invalid multibulk length\r\n")
    protocol_error(server, b"*3000000000\r\n", b"-ERR Protocol error: invalid multibulk length\r\n")
    protocol_error(server, b"*1\r\n$abc\r\n", b"-ERR Protocol error: invalid bulk length\r\n")
    protocol_error(server, b"*1\r\n$-1\r\n", b"-ERR Protocol error: invalid bulk length\r\n")
    protocol_error(server, b"*1\r\nfoo\r\n", b"-ERR Protocol error: expected '$', got 'f'\r\n")
    protocol_error(server, b"*2\r\n$4\r\nECHO\r\n:12\r\n",
                   b"-ERR Protocol error: expected '$', got ':'\r\n")
    protocol_error(server, b'ECHO "unbalanced\r\n',
                   b"-ERR Protocol error: unbalanced quotes in request\r\n")
    protocol_error(server, b"x" * 70000, b"-ERR Protocol error: too big inline request\r\n")
    protocol_error(server, b"*" + b"1" * 70000, b"-ERR Protocol error: too big mbulk count string\r\n")
    protocol_error(server, b"*1\r\n$" + b"1" * 70000,
                   b"-ERR Protocol error: too big bulk count string\r\n")
    # other clients are unaffected
    assert bystander.call("XLEN", "s") == 1
    assert server.raw().call("PING") == "PONG"


def test_protocol_error_after_reply(server):
    c = server.raw()
    c.send_raw(b"*1\r\n$4\r\nPING\r\n*x\r\n")
    assert c.read_raw() == b"+PONG\r\n"
    assert c.read_raw() == b"-ERR Protocol error: invalid multibulk length\r\n"
    assert c.wait_closed(5)


def test_empty_and_null_multibulk(server):
    c = server.raw()
    # '*0' and '*-1' are ignored, empty inline lines too
    c.send_raw(b"*0\r\n*-1\r\n\r\n\r\n*1\r\n$4\r\nPING\r\n")
    assert c.read_raw() == b"+PONG\r\n"


def test_pipeline_1000(server):
    c = server.raw()
    cmds = []
    for i in range(500):
        cmds.append(("XADD", "p", "%d-1" % (i + 1), "n", str(i)))
        cmds.append(("XLEN", "p"))
    replies = c.pipeline(cmds)
    assert len(replies) == 1000
    for i in range(500):
        assert replies[2 * i] == b"%d-1" % (i + 1), (i, replies[2 * i])
        assert replies[2 * i + 1] == i + 1, (i, replies[2 * i + 1])
    # errors inside a pipeline don't disturb the order
    replies = c.pipeline([("XLEN", "p"), ("XADD", "p", "1-1", "f", "v"), ("NOSUCH",),
                          ("XLEN", "p"), ("PING",)])
    assert replies[0] == 500
    assert replies[1] == RespError(
        "ERR The ID specified in XADD is equal or smaller than the target stream top item")
    assert isinstance(replies[2], RespError)
    assert replies[3:] == [500, "PONG"]
    # redis-py pipeline, 1000 commands in one round trip
    r = server.client()
    p = r.pipeline(transaction=False)
    for i in range(1000):
        p.xadd("q", {"i": str(i)}, id="%d-0" % (i + 1))
    out = p.execute()
    assert out == ["%d-0" % (i + 1) for i in range(1000)]
    assert r.xlen("q") == 1000


def test_pipelined_read_sees_own_writes(server):
    c = server.raw()
    replies = c.pipeline([("XADD", "w", "1-1", "a", "1"), ("XRANGE", "w", "-", "+"),
                          ("XADD", "w", "2-1", "a", "2"), ("XREVRANGE", "w", "+", "-", "COUNT", "1"),
                          ("DEL", "w"), ("EXISTS", "w")])
    assert replies == [b"1-1", [[b"1-1", [b"a", b"1"]]], b"2-1", [[b"2-1", [b"a", b"2"]]], 1, 0]


def test_inline_commands(server):
    c = server.raw()
    c.send_raw(b"PING\r\n")
    assert c.read_raw() == b"+PONG\r\n"
    c.send_raw(b"ECHO hello\r\n")
    assert c.read_raw() == b"$5\r\nhello\r\n"
    c.send_raw(b"ECHO \"a b\"\r\n")
    assert c.read_raw() == b"$3\r\na b\r\n"
    c.send_raw(b"ECHO 'c d'\r\n")
    assert c.read_raw() == b"$3\r\nc d\r\n"
    c.send_raw(b"ECHO \"a\\x41\\n\"\r\n")
    assert c.read_raw() == b"$3\r\naA\n\r\n"
    c.send_raw(b"PING\n")  # a bare LF ends an inline command too
    assert c.read_raw() == b"+PONG\r\n"
    c.send_raw(b"XADD s 1-1 field value\r\nXLEN s\r\n")
    assert c.read_raw() == b"$3\r\n1-1\r\n"
    assert c.read_raw() == b":1\r\n"
    c.send_raw(b"   PING   \r\n")
    assert c.read_raw() == b"+PONG\r\n"
    # inline and multibulk mixed in one packet
    c.send_raw(b"PING\r\n*2\r\n$4\r\nECHO\r\n$1\r\nx\r\nPING\r\n")
    assert [c.read_raw() for _ in range(3)] == [b"+PONG\r\n", b"$1\r\nx\r\n", b"+PONG\r\n"]


def test_one_byte_at_a_time(server):
    c = server.raw()
    data = (b"*5\r\n$4\r\nXADD\r\n$1\r\nb\r\n$3\r\n1-1\r\n$5\r\nfield\r\n$5\r\nvalue\r\n"
            b"ECHO abc\r\n")
    for i in range(len(data)):
        c.send_raw(data[i:i + 1])
        time.sleep(0.002)
    assert c.read_raw() == b"$3\r\n1-1\r\n"
    assert c.read_raw() == b"$3\r\nabc\r\n"


def test_big_values(server):
    c = server.raw()
    big = bytes(range(256)) * 4096   # 1 MiB, every byte value
    assert c.call("XADD", "big", "1-1", "blob", big) == b"1-1"
    assert c.call("XRANGE", "big", "-", "+") == [[b"1-1", [b"blob", big]]]
    r = server.client(decode_responses=False)
    assert r.xrange("big") == [(b"1-1", {b"blob": big})]


def test_redis_cli(server):
    assert server.cli("XADD", "cli", "1-1", "name", "hello world") == "1-1\n"
    assert server.cli("XLEN", "cli") == "1\n"
    assert server.cli("XRANGE", "cli", "-", "+") == "1-1\nname\nhello world\n"
    assert server.cli("TYPE", "cli") == "stream\n"
    assert server.cli("XADD", "cli", "1-1", "a", "b") == (
        "ERR The ID specified in XADD is equal or smaller than the target stream top item\n\n")
    # commands from standard input (redis-cli's pipe-less batch mode)
    out = server.cli(input="XADD cli 2-1 a b\nXLEN cli\n")
    assert out == "2-1\n2\n"
    # --pipe mass insertion uses raw RESP
    payload = "".join("*5\r\n$4\r\nXADD\r\n$4\r\nmass\r\n$1\r\n*\r\n$1\r\nf\r\n$1\r\nv\r\n"
                      for _ in range(100))
    out = server.cli("--pipe", input=payload)
    assert "errors: 0, replies: 100" in out, out
    assert server.cli("XLEN", "mass") == "100\n"


def test_shutdown(server):
    s = server.spawn()
    c = s.raw()
    c.call("XADD", "k", "1-1", "f", "v")
    c.send("SHUTDOWN")
    assert c.wait_closed(10)
    rc = s.proc.wait(10)
    assert rc == 0, rc
    s.proc = None
