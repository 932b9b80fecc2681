"""The HTTP listener and GET /metrics (echd only: Redis has no HTTP side).

Covered: /metrics accepted by Debian's `promtool check metrics`; its values against XLEN,
XINFO GROUPS, XINFO CONSUMERS and XPENDING for a few streams, groups and consumers; label
values escaped (quote, backslash, newline, UTF-8, binary names); metrics-max-series and
echd_metrics_series_dropped_total; 401/403 for each rule (no credentials, wrong password, a
user without +info, a user whose key pattern hides a stream); malformed HTTP (garbage, an
unknown method, huge headers, a request sent a byte at a time, more connections than
http-maxclients) answered 4xx or closed while PING is answered; http-tls with a throw-away
certificate; and Debian's real Prometheus scraping echd, its PromQL answer equal to XINFO's
lag.

Each test starts its own echd (server.spawn) with --http-port on a free port.
"""

import base64
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request

from echdtest import (RespConn, basic_auth, echd_only, free_port, free_ports, http_server,
                      make_cert, timeout)

ECHD_ONLY = "the HTTP listener and /metrics are echd's own"
TLS_SUITE = False
TLS_SUITE_WHY = ("its tests speak HTTP, not through the suite's RESP clients, and the http-tls "
                 "ones bring certificates of their own, which the suite's would override")
PROMTOOL = "/usr/bin/promtool"
PROMETHEUS = "/usr/bin/prometheus"


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def get(port, path="/metrics", headers=None, method="GET", tls_ctx=None):
    """(status, headers dict lower-cased, body bytes)."""
    if tls_ctx is not None:
        c = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=tls_ctx)
    else:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request(method, path, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def unescape_label(s, i):
    """Reads a label value from s[i] (after the opening quote): (value, index after quote)."""
    out = []
    while s[i] != '"':
        if s[i] == "\\":
            nxt = s[i + 1]
            out.append({"\\": "\\", '"': '"', "n": "\n"}[nxt])
            i += 2
        else:
            out.append(s[i])
            i += 1
    return "".join(out), i + 1


def parse_metrics(text):
    """{(name, ((label, value), ...) sorted): float} of an exposition text."""
    series = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        brace = line.find("{")
        space = line.find(" ")
        labels = []
        if brace != -1 and brace < space:
            name = line[:brace]
            i = brace + 1
            while line[i] != "}":
                eq = line.index("=", i)
                key = line[i:eq]
                assert line[eq + 1] == '"', line
                val, i = unescape_label(line, eq + 2)
                labels.append((key, val))
                if line[i] == ",":
                    i += 1
            rest = line[i + 1:].strip()
        else:
            name, rest = line.split(" ", 1)
        series[(name, tuple(sorted(labels)))] = float(rest.split()[0])
    return series


def value(series, name, **labels):
    return series.get((name, tuple(sorted(labels.items()))))


def scrape(port, **kw):
    status, hdrs, body = get(port, **kw)
    assert status == 200, (status, body[:300])
    assert hdrs["content-type"].startswith("text/plain; version=0.0.4"), hdrs
    return body.decode(), parse_metrics(body.decode())


def promtool_check(text):
    p = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, "promtool check metrics:\n%s%s\n---\n%s" % (
        p.stdout, p.stderr, text[:2000])


def ping(s):
    c = RespConn(s.port, timeout=5)
    try:
        assert c.call("PING") == "PONG"
    finally:
        c.close()


def fill(r):
    """Two streams with groups, consumers and pending entries; returns nothing."""
    for i in range(10):
        r.call("XADD", "orders", "*", "n", str(i))
    for i in range(4):
        r.call("XADD", "mail", "*", "n", str(i))
    r.call("XGROUP", "CREATE", "orders", "billing", "0")
    r.call("XGROUP", "CREATE", "orders", "audit", "$")
    r.call("XGROUP", "CREATE", "mail", "senders", "0")
    r.call("XREADGROUP", "GROUP", "billing", "alice", "COUNT", "3", "STREAMS", "orders", ">")
    r.call("XREADGROUP", "GROUP", "billing", "bob", "COUNT", "2", "STREAMS", "orders", ">")
    r.call("XREADGROUP", "GROUP", "senders", "carol", "COUNT", "4", "STREAMS", "mail", ">")
    ids = [e[0] for e in r.call("XRANGE", "mail", "-", "+")]
    r.call("XACK", "mail", "senders", ids[0])
    r.call("XADD", "orders", "*", "n", "late")


def as_dict(flat):
    return {flat[i].decode() if isinstance(flat[i], bytes) else flat[i]: flat[i + 1]
            for i in range(0, len(flat), 2)}


# ---------------------------------------------------------------------------
# /metrics
# ---------------------------------------------------------------------------

@echd_only(ECHD_ONLY)
def test_metrics_accepted_by_promtool(server):
    s, port = http_server(server)
    r = s.raw()
    fill(r)
    r.call("XADD", 'we"ird\\name\nwith lines', "*", "a", "1")
    text, _ = scrape(port)
    promtool_check(text)
    for fam in ("echd_stream_entries", "echd_group_pending_entries", "echd_group_lag_entries",
                "echd_group_oldest_pending_age_seconds", "echd_group_dead_lettered_total",
                "echd_consumer_pending_entries",
                "echd_commands_total", "echd_command_errors_total",
                "echd_commit_duration_seconds", "echd_flush_duration_seconds",
                "echd_connected_clients", "echd_blocked_clients", "echd_storage_used_bytes",
                "echd_metrics_series_dropped_total"):
        assert "# HELP %s " % fam in text and "# TYPE %s " % fam in text, fam
    # the map is LMDB's: a backend without one (postgres) has no such gauge
    has_map = s.pg_schema is None
    assert ("# TYPE echd_storage_map_bytes gauge" in text) == has_map, has_map
    # HEAD answers the headers alone
    status, hdrs, body = get(port, method="HEAD")
    assert status == 200 and body == b"", (status, body)


@echd_only(ECHD_ONLY)
def test_metrics_values_match_xinfo(server):
    s, port = http_server(server)
    r = s.raw()
    fill(r)
    r.call("SELECT", "3")
    r.call("XADD", "other-db", "*", "a", "1")
    r.call("SELECT", "0")
    r.call("XLEN", "nosuch")
    try:
        r.call("XADD", "orders", "0-1", "a", "1")
    except Exception:
        pass
    _, m = scrape(port)
    for stream in ("orders", "mail"):
        assert value(m, "echd_stream_entries", db="0", stream=stream) == r.call("XLEN", stream)
        for g in r.call("XINFO", "GROUPS", stream):
            g = as_dict(g)
            name = g["name"].decode()
            lbl = dict(db="0", stream=stream, group=name)
            assert value(m, "echd_group_pending_entries", **lbl) == g["pending"], (lbl, g)
            assert value(m, "echd_group_lag_entries", **lbl) == g["lag"], (lbl, g)
            assert r.call("XPENDING", stream, name)[0] == g["pending"]
            consumers = r.call("XINFO", "CONSUMERS", stream, name)
            for c in consumers:
                c = as_dict(c)
                got = value(m, "echd_consumer_pending_entries", consumer=c["name"].decode(),
                            **lbl)
                assert got == c["pending"], (lbl, c, got)
            age = value(m, "echd_group_oldest_pending_age_seconds", **lbl)
            if g["pending"]:
                first = r.call("XPENDING", stream, name, "-", "+", "1")[0]
                assert abs(age * 1000 - first[2]) < 1500, (age, first)
            else:
                assert age == 0, age
    assert value(m, "echd_stream_entries", db="3", stream="other-db") == 1
    assert value(m, "echd_commands_total", cmd="xreadgroup") == 3
    assert value(m, "echd_commands_total", cmd="xgroup|create") == 3
    assert value(m, "echd_command_errors_total") >= 1
    info = r.call("INFO", "clients").decode()
    clients = int(info.split("connected_clients:")[1].split()[0])
    assert value(m, "echd_connected_clients") == clients
    commits = value(m, "echd_commit_duration_seconds_count")
    assert commits >= 8, commits
    assert value(m, "echd_commit_duration_seconds_bucket", le="+Inf") == commits
    buckets = sorted((float(dict(k[1])["le"]), v) for k, v in m.items()
                     if k[0] == "echd_commit_duration_seconds_bucket")
    assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), buckets
    assert value(m, "echd_storage_used_bytes") > 0
    if s.pg_schema is None:     # LMDB's map; postgres has none (test_metrics_accepted...)
        assert value(m, "echd_storage_map_bytes") >= value(m, "echd_storage_used_bytes")


def label_name(value):
    """The name a label value stands for (docs/operations.md): \\\\ is a backslash, \\xHH
    a byte; the rest is the name's own UTF-8."""
    out = bytearray()
    i = 0
    while i < len(value):
        if value[i] == "\\":
            assert i + 1 < len(value), ("a lone backslash ends", value)
            if value[i + 1] == "\\":
                out += b"\\"
                i += 2
            else:
                assert value[i + 1] == "x", value
                out.append(int(value[i + 2:i + 4], 16))
                i += 4
        else:
            out += value[i].encode()
            i += 1
    return bytes(out)


def series_by_name(m, name, key):
    """{decoded label key's name: value} of one family's series (db 0)."""
    out = {}
    for (n, labels), v in m.items():
        if n == name:
            d = dict(labels)
            decoded = label_name(d[key])
            assert decoded not in out, ("two series for one name", decoded)
            out[decoded] = v
    return out


@echd_only(ECHD_ONLY)
def test_metrics_label_escaping(server):
    s, port = http_server(server)
    r = s.raw()
    names = ['quo"te', "back\\slash", "new\nline", "ünïcödé ✓", "plain"]
    for n in names:
        r.call("XADD", n, "*", "a", "1")
    r.call("XGROUP", "CREATE", "plain", 'g"\\\n', "0")
    r.call("XREADGROUP", "GROUP", 'g"\\\n', 'c\n"', "STREAMS", "plain", ">")
    r.call("XADD", b"bin\x00\xff\x01", "*", "a", "1")
    text, m = scrape(port)
    promtool_check(text)
    for n in ["quo\"te", "new\nline", "ünïcödé ✓", "plain"]:
        assert value(m, "echd_stream_entries", db="0", stream=n) == 1, (n, text)
    # a backslash of a name reads as two in the value (after the format's own escaping)
    assert value(m, "echd_stream_entries", db="0", stream="back\\\\slash") == 1, text
    assert value(m, "echd_group_pending_entries", db="0", stream="plain",
                 group='g"\\\\\n') == 1, text
    assert value(m, "echd_consumer_pending_entries", db="0", stream="plain",
                 group='g"\\\\\n', consumer='c\n"') == 1
    # bytes that are not UTF-8 (and control characters) read as \xHH
    assert value(m, "echd_stream_entries", db="0", stream="bin\\x00\\xff\\x01") == 1, text
    got = series_by_name(m, "echd_stream_entries", "stream")
    for n in names + [b"bin\x00\xff\x01"]:
        n = n if isinstance(n, bytes) else n.encode()
        assert got.get(n) == 1, (n, sorted(got))


@echd_only(ECHD_ONLY)
def test_metrics_labels_one_to_one(server):
    """Names that read alike once escaped (issue 35: a\\xff and a\\\\xff both exported
    stream="a\\\\xff") each get their own label value, which decodes back to the name's bytes."""
    s, port = http_server(server)
    r = s.raw()
    names = [b"a\xff", b"a\\xff", b"a\\\\xff", b"a\\", b"a\\\\", b"\\x41", b"A", b"c\x01",
             b"c\\x01", b"\xc3\xa9", b"\\xc3\\xa9", b"\xc3", b"\\xc3", b"n\n", b"n\\n",
             b"\xed\xa0\x80", b"\x7f", b"\\x7f"]
    assert len(set(names)) == len(names)
    for i, n in enumerate(names):
        for _ in range(i + 1):
            r.call("XADD", n, "*", "a", "1")
        r.call("XGROUP", "CREATE", "grouped", n, "0", "MKSTREAM")
    text, m = scrape(port)
    promtool_check(text)
    got = series_by_name(m, "echd_stream_entries", "stream")
    assert got.pop(b"grouped") == 0
    assert len(got) == len(names), sorted(got)
    for i, n in enumerate(names):
        assert got.get(n) == i + 1, (n, sorted(got), text)
    groups = series_by_name(m, "echd_group_pending_entries", "group")
    assert sorted(groups) == sorted(names), sorted(groups)


@echd_only(ECHD_ONLY)
def test_metrics_policy_and_released_entries(server):
    """The dead-lettered count of a group policy (issue 26's extension), and the oldest
    pending age past entries XNACK released (they have no delivery time)."""
    s, port = http_server(server)
    r = s.raw()
    for i in range(3):
        r.call("XADD", "q", "%d-1" % (i + 1), "n", str(i))
    r.call("XGROUP", "CREATE", "q", "g", "0")
    r.call("XGROUP", "CREATE", "q", "plain", "0")
    assert r.call("XGROUP", "SETPOLICY", "q", "g", "MAXDELIVER", "3", "DEADLETTER", "dead") == "OK"
    r.call("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "q", ">")
    # a poison message: XNACK FATAL moves it to the dead-letter stream at once
    assert r.call("XNACK", "q", "g", "FATAL", "IDS", "1", "1-1") == 1
    dead = as_dict(next(g for g in r.call("XINFO", "GROUPS", "q")
                        if as_dict(g)["name"] == b"g"))["dead-lettered"]
    assert dead == 1, dead
    # plain: 1-1 released, 2-1 owned; the age is 2-1's, not 56 years of a zero time
    r.call("XREADGROUP", "GROUP", "plain", "c", "COUNT", "2", "STREAMS", "q", ">")
    assert r.call("XNACK", "q", "plain", "FAIL", "IDS", "1", "1-1") == 1
    time.sleep(0.3)
    _, m = scrape(port)
    assert value(m, "echd_group_dead_lettered_total", db="0", stream="q", group="g") == 1
    assert value(m, "echd_group_dead_lettered_total", db="0", stream="q", group="plain") == 0
    age = value(m, "echd_group_oldest_pending_age_seconds", db="0", stream="q", group="plain")
    idle = r.call("XPENDING", "q", "plain", "-", "+", "10")[1][2]
    assert 0.2 <= age < 60 and abs(age * 1000 - idle) < 1500, (age, idle)


@echd_only(ECHD_ONLY)
def test_metrics_series_cap(server):
    s, port = http_server(server, "--metrics-max-series", "7")
    r = s.raw()
    for name in ("s1", "s2", "s3"):
        r.call("XADD", name, "*", "a", "1")
        r.call("XGROUP", "CREATE", name, "g", "0")
        r.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", name, ">")
    text, m = scrape(port)
    promtool_check(text)
    per_stream = [k for k in m if k[0].startswith(("echd_stream_", "echd_group_",
                                                   "echd_consumer_"))]
    # s1 whole (1 + 4 group series + 1 consumer), s2's own series; the cap leaves out s2's
    # group (4) and consumer (1) and s3, not reached (counted as one)
    assert len(per_stream) == 7, per_stream
    assert value(m, "echd_stream_entries", db="0", stream="s1") == 1
    assert value(m, "echd_consumer_pending_entries", db="0", stream="s1", group="g",
                 consumer="c") == 1
    assert value(m, "echd_stream_entries", db="0", stream="s2") == 1
    assert value(m, "echd_stream_entries", db="0", stream="s3") is None
    assert value(m, "echd_metrics_series_dropped_total") == 6
    assert value(m, "echd_metrics_max_series") == 7
    _, m = scrape(port)
    assert value(m, "echd_metrics_series_dropped_total") == 12   # a counter: it adds up
    r.call("CONFIG", "SET", "metrics-max-series", "100")
    _, m = scrape(port)
    assert value(m, "echd_stream_entries", db="0", stream="s3") == 1
    assert value(m, "echd_metrics_series_dropped_total") == 12
    r.call("CONFIG", "SET", "metrics-max-series", "0")
    _, m = scrape(port)
    assert value(m, "echd_stream_entries", db="0", stream="s1") is None
    assert value(m, "echd_metrics_series_dropped_total") == 15


@echd_only(ECHD_ONLY)
def test_metrics_walk_over_turns(server):
    """A keyspace larger than one turn's share is walked over several loop turns, and the
    answer still has every stream, right; scrapes at once do not mix."""
    s, port = http_server(server)
    r = s.raw()
    for i in range(450):
        r.call("XADD", "k%03d" % i, "*", "a", "1")
        if i % 3 == 0:
            r.call("XADD", "k%03d" % i, "*", "b", "2")
            r.call("XGROUP", "CREATE", "k%03d" % i, "g", "0")
    results = []
    import threading
    threads = [threading.Thread(target=lambda: results.append(scrape(port)))
               for _ in range(3)]
    for t in threads:
        t.start()
    ping(s)
    for t in threads:
        t.join(30)
    assert len(results) == 3
    for text, m in results:
        assert value(m, "echd_metrics_scrape_turns") >= 4, value(m, "echd_metrics_scrape_turns")
        entries = {dict(k[1])["stream"]: v for k, v in m.items()
                   if k[0] == "echd_stream_entries"}
        assert len(entries) == 450
        for i in range(450):
            assert entries["k%03d" % i] == (2 if i % 3 == 0 else 1)
        assert value(m, "echd_group_lag_entries", db="0", stream="k003", group="g") == 2
    promtool_check(results[0][0])


# ---------------------------------------------------------------------------
# authentication
# ---------------------------------------------------------------------------

@echd_only(ECHD_ONLY)
def test_auth_rules(server):
    s, port = http_server(server, "--requirepass", "sekret")
    r = s.raw()
    r.call("AUTH", "sekret")
    r.call("XADD", "vis:a", "*", "a", "1")
    r.call("XADD", "hidden", "*", "a", "1")
    r.call("ACL", "SETUSER", "noinfo", "on", ">p1", "~*", "+@all", "-info")
    r.call("ACL", "SETUSER", "limited", "on", ">p2", "~vis:*", "+info")
    r.call("ACL", "SETUSER", "off", "off", ">p3", "~*", "+@all")
    # no credentials
    status, hdrs, _ = get(port)
    assert status == 401 and hdrs["www-authenticate"].startswith('Basic realm="echd"'), hdrs
    # wrong password, unknown user, a disabled user, not Basic, malformed base64
    for h in (basic_auth("default", "nope"), basic_auth("ghost", "x"),
              basic_auth("off", "p3"), "Bearer abc", "Basic ***", "Basic " +
              base64.b64encode(b"no-colon").decode()):
        status, hdrs, _ = get(port, headers={"Authorization": h})
        assert status == 401 and "www-authenticate" in hdrs, (h, status)
    # the default user by name, and by an empty name (curl -u :password)
    for h in (basic_auth("default", "sekret"), basic_auth("", "sekret")):
        text, m = scrape(port, headers={"Authorization": h})
        assert value(m, "echd_stream_entries", db="0", stream="hidden") == 1
    # a user without +info
    status, _, body = get(port, headers={"Authorization": basic_auth("noinfo", "p1")})
    assert status == 403 and b"NOPERM" in body, (status, body)
    # a user whose key patterns hide a stream
    text, m = scrape(port, headers={"Authorization": basic_auth("limited", "p2")})
    promtool_check(text)
    assert value(m, "echd_stream_entries", db="0", stream="vis:a") == 1
    assert value(m, "echd_stream_entries", db="0", stream="hidden") is None
    assert "hidden" not in text
    # failed logins are counted as RESP's are
    info = r.call("INFO", "stats").decode()
    assert int(info.split("acl_access_denied_auth:")[1].split()[0]) == 3, info


@echd_only(ECHD_ONLY)
def test_no_password_needs_no_credentials(server):
    s, port = http_server(server)
    status, _, _ = get(port)
    assert status == 200
    # an ACL user is still checked when named
    r = s.raw()
    r.call("ACL", "SETUSER", "noinfo", "on", ">p1", "~*", "+@all", "-info")
    status, _, _ = get(port, headers={"Authorization": basic_auth("noinfo", "p1")})
    assert status == 403
    status, _, _ = get(port, headers={"Authorization": basic_auth("noinfo", "bad")})
    assert status == 401


HTTP_NETNS_PROBE = r"""
import ctypes, json, os, socket, subprocess, sys, time
exe, root = sys.argv[1:3]
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
subprocess.run(["ip", "addr", "add", "198.18.0.1/32", "dev", "lo"], check=True)
os.makedirs(os.path.join(root, "data"), exist_ok=True)
# the server dies with this probe (PR_SET_PDEATHSIG), even if the probe is killed
p = subprocess.Popen([exe, "--port", "7379", "--bind", "127.0.0.1", "--http-port", "7380",
                      "--http-bind", "0.0.0.0", "--dir", os.path.join(root, "data")],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     preexec_fn=lambda: ctypes.CDLL(None).prctl(1, 15))
def ask(src):
    s = socket.create_connection(("198.18.0.1" if src != "127.0.0.1" else src, 7380),
                                 timeout=5, source_address=(src, 0))
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    got = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    s.close()
    head, _, body = got.partition(b"\r\n\r\n")
    return [int(head.split()[1]), body.decode(errors="replace")[:200]]
def resp(data):
    s = socket.create_connection(("127.0.0.1", 7379), timeout=5)
    s.sendall(data)
    got = s.recv(100)
    s.close()
    return got.decode()
out = {}
try:
    for _ in range(250):
        try:
            ask("127.0.0.1"); break
        except OSError:
            time.sleep(0.02)
    out["loopback"] = ask("127.0.0.1")
    out["remote"] = ask("198.18.0.1")
    resp(b"CONFIG SET protected-mode no\r\n")
    out["remote_unprotected"] = ask("198.18.0.1")
finally:
    p.terminate()
    p.wait()
print(json.dumps(out))
"""


@echd_only(ECHD_ONLY)
def test_protected_mode(server):
    """No password and protected-mode yes: only loopback HTTP clients are served, as RESP.
    The other address is 198.18.0.1 in a network namespace of the test's own (unshare -n),
    as 16-auth does for RESP: nothing leaves loopback."""
    unshare = shutil.which("unshare")
    usable = unshare and shutil.which("ip") and subprocess.run(
        [unshare, "-n", "true"], capture_output=True, timeout=10).returncode == 0
    assert usable, "unshare -n is needed to try a client from another address"
    root = tempfile.mkdtemp(prefix="echd-e2e-httppm-")
    try:
        p = subprocess.run([unshare, "-n", "/usr/bin/python3", "-c", HTTP_NETNS_PROBE,
                            server.exe, root], capture_output=True, text=True, timeout=40)
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert out["loopback"][0] == 200, out
    assert out["remote"][0] == 403 and "protected mode" in out["remote"][1], out
    assert out["remote_unprotected"][0] == 200, out


# ---------------------------------------------------------------------------
# bad requests
# ---------------------------------------------------------------------------

def raw_exchange(port, data, wait=3.0):
    """Sends data, returns what comes back until the server closes or wait passes."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=wait)
    got = b""
    try:
        sock.sendall(data)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += chunk
    finally:
        sock.close()
    return got


def status_of(resp):
    if not resp:
        return None
    return int(resp.split(b" ", 2)[1])


@echd_only(ECHD_ONLY)
def test_malformed_requests(server):
    s, port = http_server(server, "--http-max-header-size", "4kb")
    cases = [
        b"\x00\x01\x02garbage\xff\r\n\r\n",
        b"GET\r\n\r\n",
        b"BREW /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /metrics HTTP/9.9\r\nHost: x\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n",
        b"GET /" + b"p" * 10000 + b" HTTP/1.1\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n",
    ]
    for data in cases:
        resp = raw_exchange(port, data)
        code = status_of(resp)
        assert code is None or 400 <= code < 500, (data[:60], resp[:200])
        if data.startswith(b"BREW"):
            assert code == 405, resp[:200]
        ping(s)
    assert status_of(raw_exchange(port, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")) == 404
    resp = raw_exchange(port, b"DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_of(resp) == 405, resp
    # still serving
    status, _, _ = get(port)
    assert status == 200
    assert s.alive()


@echd_only(ECHD_ONLY)
@timeout(60)
def test_slow_request_cut_off(server):
    s, port = http_server(server, "--http-timeout", "1")
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    t0 = time.monotonic()
    closed_at = None
    try:
        sock.sendall(b"GET /metrics HTTP/1.1\r\n")
        for ch in b"Host: localhost\r\nX-Drip: " + b"z" * 200:
            try:
                sock.sendall(bytes([ch]))
            except OSError:
                closed_at = time.monotonic()
                break
            sock.settimeout(0.2)
            try:
                if sock.recv(4096) == b"":
                    closed_at = time.monotonic()
                    break
            except socket.timeout:
                pass
            except OSError:
                closed_at = time.monotonic()
                break
            ping(s)     # RESP keeps serving meanwhile
            if time.monotonic() - t0 > 8:
                break
    finally:
        sock.close()
    assert closed_at is not None, "a request dripped a byte at a time was not cut off"
    assert closed_at - t0 < 4, closed_at - t0
    # an idle keep-alive connection is closed too; a fresh one is served
    status, _, _ = get(port)
    assert status == 200


def keepalive(port, headers=None, path="/api/server"):
    """An HTTP/1.1 connection that has had one request answered (kept open): (conn, status)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", path, headers=headers or {})
    r = c.getresponse()
    r.read()
    return c, r.status


def again(c, headers=None, path="/api/server"):
    """Another request on a kept connection: its status, or None when it was closed."""
    try:
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        r.read()
        return r.status
    except (OSError, http.client.HTTPException):
        return None


@echd_only(ECHD_ONLY)
def test_maxclients(server):
    s, port = http_server(server, "--http-maxclients", "2")
    # two connections whose requests passed authentication hold their slots
    held = [keepalive(port) for _ in range(2)]
    assert [st for _, st in held] == [200, 200]
    try:
        extra = socket.create_connection(("127.0.0.1", port), timeout=5)
        try:
            extra.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            got = extra.recv(4096)
        except OSError:
            got = b""
        finally:
            extra.close()
        # closed, or told 503 if its request was read before the close
        assert got == b"" or got.startswith(b"HTTP/1.1 503"), got[:100]
        ping(s)
        # the held ones are served
        assert again(held[0][0]) == 200 and again(held[1][0]) == 200
    finally:
        for c, _ in held:
            c.close()
    # once they are gone (the sweep runs each second) new ones are let in
    deadline = time.monotonic() + 5
    while True:
        try:
            status, _, _ = get(port)
            if status == 200:
                break
        except (OSError, http.client.HTTPException):
            pass
        assert time.monotonic() < deadline, "closed connections still counted"
        time.sleep(0.2)
    # no descriptor leak after many connections
    fds = len(os.listdir("/proc/%d/fd" % s.proc.pid))
    for _ in range(50):
        get(port)
    time.sleep(1.5)
    assert len(os.listdir("/proc/%d/fd" % s.proc.pid)) <= fds + 2


@echd_only(ECHD_ONLY)
@timeout(120)
def test_slow_clients_cannot_hold_the_slots(server):
    """Issue 35: 70 connections sending their headers a byte a second held all 64
    http-maxclients slots, and /metrics was down for everyone. Now a newcomer takes the slot
    of the oldest connection none of whose requests passed authentication (as at the RESP
    port's maxclients): the drippers and clients without credentials make way, a logged-in
    keep-alive connection keeps its slot."""
    s, port = http_server(server, "--requirepass", "sekret", "--http-timeout", "60")
    auth = {"Authorization": basic_auth("default", "sekret")}
    drips, lock, stop = [], threading.Lock(), threading.Event()

    def open_drips(n):
        for _ in range(n):
            try:
                c = socket.create_connection(("127.0.0.1", port), timeout=5)
                c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Drip: ")
            except OSError:
                continue
            with lock:
                drips.append(c)

    def drip():
        while not stop.wait(1.0):
            with lock:
                socks = list(drips)
            for c in socks:
                try:
                    c.sendall(b"z")
                except OSError:
                    pass

    t = threading.Thread(target=drip, daemon=True)
    nocred = []
    try:
        open_drips(70)
        t.start()
        time.sleep(1.5)
        for _ in range(3):
            status, _, body = get(port, headers=auth)
            assert status == 200 and b"echd_uptime_seconds" in body, (status, body[:200])
        # complete requests without credentials are answered 401 and hold no slot either
        for _ in range(3):
            c, st = keepalive(port, path="/metrics")
            assert st == 401, st
            nocred.append(c)
        keep, st = keepalive(port, headers=auth)
        assert st == 200, st
        open_drips(80)       # each takes the slot of an older dripper (or of a 401 one)
        time.sleep(1.5)
        assert again(keep, headers=auth) == 200, "a logged-in connection lost its slot"
        status, _, _ = get(port, headers=auth)
        assert status == 200
        assert all(again(c, path="/metrics") is None for c in nocred), "a 401 kept its slot"
        rc = RespConn(s.port, timeout=5)
        try:
            assert rc.call("AUTH", "sekret") == "OK" and rc.call("PING") == "PONG"
        finally:
            rc.close()
    finally:
        stop.set()
        t.join(timeout=5)
        for c in drips + nocred:
            c.close()


@echd_only(ECHD_ONLY)
def test_http_tls(server):
    tmp = tempfile.mkdtemp(prefix="echd-http-tls-")
    try:
        c = make_cert(tmp)
        ca, cert, key = c["ca"], c["cert"], c["key"]
        s, port = http_server(server, "--http-tls", "yes", "--tls-cert-file", cert,
                              "--tls-key-file", key, "--tls-auth-clients", "no")
        ctx = ssl.create_default_context(cafile=ca)
        text, m = scrape(port, tls_ctx=ctx)
        promtool_check(text)
        assert value(m, "echd_connected_clients") is not None
        # plain HTTP to the TLS port: no answer in the clear, and nothing breaks
        resp = raw_exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", wait=2)
        assert not resp.startswith(b"HTTP/"), resp[:100]
        ping(s)
        text, _ = scrape(port, tls_ctx=ctx)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@echd_only(ECHD_ONLY)
def test_http_tls_needs_certificate(server):
    port = free_port()
    from echdtest import Server, ServerError
    s = Server("echd", server.exe, ["--http-port", str(port), "--http-tls", "yes"])
    try:
        try:
            s.start()
        except ServerError as e:
            assert "tls-cert-file" in str(e), str(e)
        else:
            raise AssertionError("echd started with http-tls and no certificate")
        assert s.proc is None or s.proc.wait(5) == 2
    finally:
        s.kill()
        s.remove()


# ---------------------------------------------------------------------------
# a real Prometheus
# ---------------------------------------------------------------------------

@echd_only(ECHD_ONLY)
@timeout(120)
def test_prometheus_scrapes_lag(server):
    s, port = http_server(server, "--requirepass", "pw")
    r = s.raw()
    r.call("AUTH", "pw")
    for i in range(7):
        r.call("XADD", "jobs", "*", "n", str(i))
    r.call("XGROUP", "CREATE", "jobs", "workers", "0")
    r.call("XREADGROUP", "GROUP", "workers", "w1", "COUNT", "2", "STREAMS", "jobs", ">")
    lag = as_dict(r.call("XINFO", "GROUPS", "jobs")[0])["lag"]
    assert lag == 5
    tmp = tempfile.mkdtemp(prefix="echd-prom-")
    prom_port = free_port()
    with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                "scrape_configs:\n  - job_name: echd\n    basic_auth:\n"
                "      username: default\n      password: pw\n"
                "    static_configs:\n      - targets: ['127.0.0.1:%d']\n" % port)
    log = open(os.path.join(tmp, "prometheus.log"), "wb")
    proc = subprocess.Popen([PROMETHEUS, "--config.file", os.path.join(tmp, "prometheus.yml"),
                             "--storage.tsdb.path", os.path.join(tmp, "tsdb"),
                             "--web.listen-address", "127.0.0.1:%d" % prom_port],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            cwd=tmp, start_new_session=True)
    got = None
    try:
        q = urllib.parse.urlencode({"query": 'echd_group_lag_entries{stream="jobs"}'})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/api/v1/query?%s"
                                            % (prom_port, q), timeout=5) as resp:
                    data = json.load(resp)
                res = data["data"]["result"]
                if res:
                    assert res[0]["metric"]["group"] == "workers", res
                    got = float(res[0]["value"][1])
                    if got == lag:
                        break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.5)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        with open(os.path.join(tmp, "prometheus.log"), "rb") as f:
            plog = f.read()[-3000:].decode(errors="replace")
        shutil.rmtree(tmp, ignore_errors=True)
    assert got == lag, "Prometheus' echd_group_lag_entries: %r, XINFO lag %d\n%s" % (
        got, lag, plog)
