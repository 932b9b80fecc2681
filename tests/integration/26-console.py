"""The JSON API under /api/ and the web console at / (echd only: Redis has no HTTP side).

Covered: each view of the API against what RESP says of the same data (XINFO GROUPS, XINFO
CONSUMERS, XPENDING, XRANGE), released (XNACKed) entries shown with owner "" and idle -1;
paging of streams and pending entries (every item once, in order) and its bounds
(http-api-max-page); the lag/pending history the sampler keeps; 401/403 for each auth rule
(no credentials, a user without the equivalent command, a key pattern that hides a stream);
the actions (XACK, XCLAIM, XNACK, XGROUP DELCONSUMER): POST only, refused without the CSRF
token, refused to a user without write permission, refused on a plain listener bound beyond
loopback, and their effect seen over RESP; malformed requests answered 4xx while RESP keeps
serving; the page served from the binary with nothing from outside; and the console in
Debian's Chromium (playwright-core, tests/clients/node/console_e2e.js): streams, groups,
charts with points, the PEL paged, an entry's fields, an ACK from the page gone in XPENDING.
Screenshots are kept in a temporary directory printed in the output.
"""

import base64
import hashlib
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse

from echdtest import (RespConn, basic_auth, echd_only, free_port, free_ports, http_server,
                      timeout)

ECHD_ONLY = "the HTTP listener and its console are echd's own"
TLS_SUITE = False
TLS_SUITE_WHY = "its tests speak HTTP, not through the suite's RESP clients"

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NODE_DIR = os.path.join(ROOT, "tests", "clients", "node")
CHROMIUM = "/usr/bin/chromium"


def request(port, path, method="GET", params=None, headers=None, body=None):
    """(status, headers lower-cased, body bytes)."""
    if params:
        path += "?" + urllib.parse.urlencode(params)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        h = dict(headers or {})
        if body is not None and not isinstance(body, bytes):
            body = urllib.parse.urlencode(body).encode()
            h.setdefault("Content-Type", "application/x-www-form-urlencoded")
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def api(port, view, headers=None, status=200, **params):
    st, hdrs, body = request(port, "/api/" + view, params=params, headers=headers)
    assert st == status, (view, params, st, body[:300])
    assert hdrs["content-type"].startswith("application/json"), hdrs
    return json.loads(body)


def token(port, headers=None):
    return api(port, "server", headers=headers)["csrf"]


def action(port, what, status=200, headers=None, csrf=True, **params):
    h = dict(headers or {})
    if csrf:
        h["X-CSRF-Token"] = token(port, headers)
    st, _, body = request(port, "/api/action/" + what, method="POST", body=params, headers=h)
    assert st == status, (what, params, st, body[:300])
    return json.loads(body)


def s(x):
    return x.decode() if isinstance(x, bytes) else x


def fill(r, n=25):
    """jobs: n entries, group workers (alice 12, bob 5 pending, the rest lag), group audit
    at $; mail: 3 entries, no group. Returns jobs' ids."""
    ids = [s(r.call("XADD", "jobs", "*", "task", "t%d" % i, "n", str(i))) for i in range(n)]
    for i in range(3):
        r.call("XADD", "mail", "*", "m", str(i))
    r.call("XGROUP", "CREATE", "jobs", "workers", "0")
    r.call("XGROUP", "CREATE", "jobs", "audit", "$")
    r.call("XREADGROUP", "GROUP", "workers", "alice", "COUNT", "12", "STREAMS", "jobs", ">")
    r.call("XREADGROUP", "GROUP", "workers", "bob", "COUNT", "5", "STREAMS", "jobs", ">")
    return ids


def xinfo(flat):
    return {s(flat[i]): flat[i + 1] for i in range(0, len(flat), 2)}


def ping(srv):
    c = RespConn(srv.port, timeout=5)
    try:
        assert c.call("PING") == "PONG"
    finally:
        c.close()


# ---------------------------------------------------------------------------
# views
# ---------------------------------------------------------------------------

@echd_only(ECHD_ONLY)
def test_api_views_match_resp(server):
    srv, port = http_server(server)
    r = srv.raw()
    ids = fill(r)
    r.call("XNACK", "jobs", "workers", "FAIL", "IDS", "1", ids[2])
    sv = api(port, "server")
    assert sv["user"] == "default" and sv["actions"] is True and len(sv["csrf"]) == 32, sv
    assert sv["commit"]["count"] > 0 and sv["used_bytes"] > 0, sv
    st = api(port, "streams")
    byname = {x["name"]: x for x in st["streams"]}
    assert set(byname) == {"jobs", "mail"} and st["cursor"] == "0", st
    assert byname["jobs"]["length"] == 25 and byname["jobs"]["groups"] == 2, byname
    assert byname["jobs"]["first"] == ids[0] and byname["jobs"]["last"] == ids[-1], byname
    assert 0 <= byname["jobs"]["last_age_ms"] < 60000, byname
    # groups as XINFO GROUPS
    gs = api(port, "groups", stream="jobs")
    want = {s(g[1]): xinfo(g) for g in r.call("XINFO", "GROUPS", "jobs")}
    assert [g["name"] for g in gs["groups"]] == sorted(want), gs
    for g in gs["groups"]:
        w = want[g["name"]]
        assert (g["pending"], g["lag"], g["consumers"], g["last_delivered"]) == (
            w["pending"], w["lag"], w["consumers"], s(w["last-delivered-id"])), (g, w)
    # consumers as XINFO CONSUMERS
    cs = api(port, "consumers", stream="jobs", group="workers")
    want = {s(c[1]): xinfo(c)["pending"] for c in r.call("XINFO", "CONSUMERS", "jobs", "workers")}
    assert {c["name"]: c["pending"] for c in cs["consumers"]} == want == {"alice": 11, "bob": 5}
    # the PEL as XPENDING's extended form, the released entry with no owner
    pel = api(port, "pending", stream="jobs", group="workers", count=100)
    xp = r.call("XPENDING", "jobs", "workers", "-", "+", "100")
    assert [e["id"] for e in pel["entries"]] == [s(x[0]) for x in xp], (pel, xp)
    for e, x in zip(pel["entries"], xp):
        assert e["owner"] == s(x[1]) and e["deliveries"] == x[3], (e, x)
        if e["id"] == ids[2]:
            assert e["owner"] == "" and e["idle_ms"] == -1, e
        else:
            assert e["owner"] in ("alice", "bob") and e["idle_ms"] >= 0, e
    assert pel["pending"] == 17 and pel["next"] is None, pel
    # one entry's fields as XRANGE
    e = api(port, "entry", stream="jobs", id=ids[7])
    assert e == {"id": ids[7], "fields": [["task", "t7"], ["n", "7"]]}, e
    api(port, "entry", status=404, stream="jobs", id="1-1")
    api(port, "groups", status=404, stream="nosuch")
    api(port, "consumers", status=404, stream="jobs", group="nosuch")


@echd_only(ECHD_ONLY)
def test_api_paging_and_bounds(server):
    srv, port = http_server(server, "--http-api-max-page", "4")
    r = srv.raw()
    ids = fill(r)
    names = ["s%02d" % i for i in range(9)]
    for n in names:
        r.call("XADD", n, "*", "a", "1")
    # streams: every one once, over pages of at most 4 keys
    seen, cursor, pages = [], "0", 0
    while True:
        page = api(port, "streams", cursor=cursor, count=4)
        assert len(page["streams"]) <= 4, page
        seen += [x["name"] for x in page["streams"]]
        cursor = page["cursor"]
        pages += 1
        if cursor == "0":
            break
    assert sorted(seen) == sorted(names + ["jobs", "mail"]) and pages >= 3, seen
    # pending: pages of 4 after the last id shown, in order, each id once
    got, after = [], ""
    while True:
        page = api(port, "pending", stream="jobs", group="workers", count=4, after=after)
        assert len(page["entries"]) <= 4, page
        got += [e["id"] for e in page["entries"]]
        if page["next"] is None:
            break
        after = page["next"]
    assert got == ids[:17], got
    # past the cap, zero, not a number: refused
    for bad in ("5", "0", "-1", "x", "1e3", ""):
        api(port, "pending", status=400, stream="jobs", group="workers", count=bad)
        api(port, "streams", status=400, count=bad)
    api(port, "pending", status=400, stream="jobs", group="workers", after="nope")
    # a group with more consumers than a page is refused, not walked
    for i in range(5):
        r.call("XGROUP", "CREATECONSUMER", "jobs", "workers", "c%d" % i)
    api(port, "consumers", status=413, stream="jobs", group="workers")


@echd_only(ECHD_ONLY)
@timeout(60)
def test_history_sampled(server):
    srv, port = http_server(server, "--http-sample-interval", "1")
    r = srv.raw()
    fill(r)
    import time
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        h = api(port, "history", stream="jobs")
        pts = {g["name"]: g["points"] for g in h["groups"]}
        if len(pts.get("workers", [])) >= 3:
            break
        time.sleep(0.5)
    assert h["interval_s"] == 1 and set(pts) == {"audit", "workers"}, h
    assert all(p[1] == 8 and p[2] == 17 for p in pts["workers"]), pts
    ts = [p[0] for p in pts["workers"]]
    assert ts == sorted(ts) and len(set(ts)) == len(ts), ts
    # a group dropped leaves the history at the next pass
    r.call("XGROUP", "DESTROY", "jobs", "audit")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        names = [g["name"] for g in api(port, "history", stream="jobs")["groups"]]
        if names == ["workers"]:
            break
        time.sleep(0.3)
    assert names == ["workers"], names


@echd_only(ECHD_ONLY)
def test_history_group_cap(server):
    srv, port = http_server(server, "--http-sample-interval", "1", "--http-sample-max-groups",
                            "3")
    r = srv.raw()
    for i in range(5):
        r.call("XGROUP", "CREATE", "q", "g%d" % i, "$", "MKSTREAM")
    import time
    time.sleep(2.5)
    h = api(port, "history", stream="q")
    assert len(h["groups"]) == 3, h


# ---------------------------------------------------------------------------
# authentication and permissions
# ---------------------------------------------------------------------------

@echd_only(ECHD_ONLY)
def test_api_auth_rules(server):
    srv, port = http_server(server, "--requirepass", "sekret")
    r = srv.raw()
    r.call("AUTH", "sekret")
    fill(r)
    r.call("XADD", "vis:a", "*", "a", "1")
    r.call("ACL", "SETUSER", "limited", "on", ">p2", "~vis:*", "+@all")
    r.call("ACL", "SETUSER", "nopel", "on", ">p3", "~*", "+@all", "-xpending")
    r.call("ACL", "SETUSER", "noinfo", "on", ">p4", "~*", "+@all", "-info")
    # no credentials, wrong password: 401 with a challenge, for every view
    for view in ("server", "streams", "groups", "pending"):
        st, hdrs, _ = request(port, "/api/" + view, params={"stream": "jobs", "group": "workers"})
        assert st == 401 and hdrs["www-authenticate"].startswith("Basic"), (view, st)
        st, _, _ = request(port, "/api/" + view,
                           headers={"Authorization": basic_auth("default", "x")})
        assert st == 401, (view, st)
    st, _, _ = request(port, "/")
    assert st == 401
    ok = {"Authorization": basic_auth("default", "sekret")}
    assert api(port, "groups", headers=ok, stream="jobs")["groups"]
    # key patterns filter the list and hide a stream's views
    lim = {"Authorization": basic_auth("limited", "p2")}
    names = [x["name"] for x in api(port, "streams", headers=lim)["streams"]]
    assert names == ["vis:a"], names
    for view in ("groups", "history", "entry"):
        body = api(port, view, headers=lim, status=403, stream="jobs", id="1-1")
        assert body["error"].startswith("NOPERM"), body
    body = api(port, "pending", headers=lim, status=403, stream="jobs", group="workers")
    # the command equivalent to a view
    nopel = {"Authorization": basic_auth("nopel", "p3")}
    assert api(port, "groups", headers=nopel, stream="jobs")["groups"]
    body = api(port, "pending", headers=nopel, status=403, stream="jobs", group="workers")
    assert "xpending" in body["error"], body
    noinfo = {"Authorization": basic_auth("noinfo", "p4")}
    st, _, _ = request(port, "/api/server", headers=noinfo)
    assert st == 403


# ---------------------------------------------------------------------------
# actions
# ---------------------------------------------------------------------------

def pending_ids(r, consumer=None):
    args = ["XPENDING", "jobs", "workers", "-", "+", "100"] + ([consumer] if consumer else [])
    return {s(x[0]): s(x[1]) for x in r.call(*args)}


@echd_only(ECHD_ONLY)
def test_actions_effect_over_resp(server):
    srv, port = http_server(server)
    r = srv.raw()
    ids = fill(r)
    assert action(port, "xack", stream="jobs", group="workers", id=ids[0])["result"] == 1
    assert ids[0] not in pending_ids(r)
    assert action(port, "xclaim", stream="jobs", group="workers", id=ids[1],
                  consumer="bob")["result"] == 1
    assert pending_ids(r)[ids[1]] == "bob"
    assert action(port, "xnack", stream="jobs", group="workers", id=ids[3])["result"] == 1
    assert pending_ids(r)[ids[3]] == ""
    assert api(port, "pending", stream="jobs", group="workers", count=3)["entries"][2] == {
        "id": ids[3], "owner": "", "idle_ms": -1,
        "deliveries": api(port, "pending", stream="jobs", group="workers",
                          count=3)["entries"][2]["deliveries"]}
    assert action(port, "delconsumer", stream="jobs", group="workers",
                  consumer="alice")["result"] == 9
    cons = [s(xinfo(c)["name"]) for c in r.call("XINFO", "CONSUMERS", "jobs", "workers")]
    assert cons == ["bob"], cons
    # the action's error replies as RESP gives them
    body = action(port, "xclaim", status=404, stream="jobs", group="nosuch", id=ids[5],
                  consumer="x")
    assert body["error"].startswith("NOGROUP"), body
    body = action(port, "xack", status=400, stream="jobs", group="workers", id="bad")
    assert "Invalid stream ID" in body["error"], body
    # each action ran on a connection that is gone once it was answered
    assert "echd-http-console" not in s(r.call("CLIENT", "LIST"))


@echd_only(ECHD_ONLY)
def test_actions_refused(server):
    srv, port = http_server(server, "--requirepass", "sekret")
    r = srv.raw()
    r.call("AUTH", "sekret")
    ids = fill(r)
    ok = {"Authorization": basic_auth("default", "sekret")}
    # POST only
    for method in ("GET", "PUT", "DELETE"):
        st, hdrs, _ = request(port, "/api/action/xack", method=method, headers=ok,
                              params={"stream": "jobs", "group": "workers", "id": ids[0]})
        assert st == 405 and hdrs["allow"] == "POST", (method, st)
    # no token, a wrong one, another user's
    r.call("ACL", "SETUSER", "other", "on", ">p", "~*", "+@all")
    other_tok = token(port, {"Authorization": basic_auth("other", "p")})
    for tok in (None, "0" * 32, "abc", other_tok):
        h = dict(ok)
        if tok is not None:
            h["X-CSRF-Token"] = tok
        st, _, body = request(port, "/api/action/xack", method="POST", headers=h,
                              body={"stream": "jobs", "group": "workers", "id": ids[0]})
        assert st == 403 and b"CSRF" in body, (tok, st, body)
    # unauthenticated
    st, _, _ = request(port, "/api/action/xack", method="POST",
                       body={"stream": "jobs", "group": "workers", "id": ids[0]})
    assert st == 401
    # a user that may read but not write
    r.call("ACL", "SETUSER", "reader", "on", ">r", "~*", "+@read", "+info")
    rd = {"Authorization": basic_auth("reader", "r")}
    assert api(port, "pending", headers=rd, stream="jobs", group="workers")["entries"]
    for what, extra in (("xack", {"id": ids[0]}), ("xclaim", {"id": ids[0], "consumer": "z"}),
                        ("xnack", {"id": ids[0]}), ("delconsumer", {"consumer": "alice"})):
        body = action(port, what, status=403, headers=rd, stream="jobs", group="workers",
                      **extra)
        assert body["error"].startswith("NOPERM"), body
    # a key outside the user's patterns
    r.call("ACL", "SETUSER", "narrow", "on", ">n", "~other:*", "+@all")
    body = action(port, "xack", status=403, headers={"Authorization": basic_auth("narrow", "n")},
                  stream="jobs", group="workers", id=ids[0])
    assert body["error"].startswith("NOPERM"), body
    # missing parameters
    for params in ({"group": "workers", "id": ids[0]}, {"stream": "jobs", "id": ids[0]},
                   {"stream": "jobs", "group": "workers"}):
        action(port, "xack", status=400, headers=ok, **params)
    assert len(pending_ids(r)) == 17


@echd_only(ECHD_ONLY)
def test_actions_refused_beyond_loopback(server):
    srv, port = http_server(server, "--http-bind", "0.0.0.0", "--protected-mode", "no")
    r = srv.raw()
    ids = fill(r)
    assert api(port, "server")["actions"] is False
    body = action(port, "xack", status=403, stream="jobs", group="workers", id=ids[0])
    assert "loopback" in body["error"], body
    assert ids[0] in pending_ids(r)


# ---------------------------------------------------------------------------
# malformed requests
# ---------------------------------------------------------------------------

@echd_only(ECHD_ONLY)
def test_malformed_api_requests(server):
    srv, port = http_server(server)
    r = srv.raw()
    fill(r)
    cases = [
        ("groups", {}),
        ("groups", {"stream": ""}),
        ("groups", {"stream": "jobs", "db": "99"}),
        ("groups", {"stream": "jobs", "db": "-1"}),
        ("consumers", {"stream": "jobs"}),
        ("pending", {"stream": "jobs", "group": "workers", "after": "1-2-3"}),
        ("entry", {"stream": "jobs"}),
        ("entry", {"stream": "jobs", "id": "x"}),
        ("streams", {"cursor": "abc"}),
    ]
    for view, params in cases:
        body = api(port, view, status=400, **params)
        assert body["error"], (view, params)
    for path in ("/api/groups?stream=%zz", "/api/groups?stream=jobs&&&=", "/api/nosuch",
                 "/api/", "/index.html"):
        st, _, _ = request(port, path)
        assert 400 <= st < 500, (path, st)
    st, _, _ = request(port, "/api/action/xack", method="POST",
                       headers={"X-CSRF-Token": token(port)}, body=b"stream=jobs&\x00&id=1")
    assert st == 400, st
    ping(srv)


@echd_only(ECHD_ONLY)
def test_console_page_served(server):
    srv, port = http_server(server)
    st, hdrs, body = request(port, "/")
    assert st == 200 and hdrs["content-type"].startswith("text/html"), hdrs
    page = body.decode()
    assert "<title>echd console</title>" in page
    # everything inline: no script, style, image or font from elsewhere
    for bad in ('src="http', "src='http", 'href="http', "@import", "url(http", "<script src"):
        assert bad not in page, bad
    st, _, body = request(port, "/", method="HEAD")
    assert st == 200 and body == b""


def csp_sources(csp, directive):
    for part in csp.split(";"):
        words = part.split()
        if words and words[0] == directive:
            return words[1:]
    return None


@echd_only(ECHD_ONLY)
@timeout(150)
def test_console_not_frameable_and_strict_csp(server):
    """Issue 35: the console could be framed (clickjacking its Ack, Nack and Delete buttons).
    Now it forbids framing (X-Frame-Options, CSP frame-ancestors) and its CSP allows its own
    inline script and style only, by their hashes; every other answer cannot be framed
    either. The browser test proves the page still works under that policy."""
    srv, port = http_server(server)
    srv.raw().call("XADD", "jobs", "*", "task", "t")
    st, hdrs, body = request(port, "/")
    assert st == 200
    assert hdrs.get("x-frame-options") == "DENY", hdrs
    csp = hdrs.get("content-security-policy")
    assert csp, hdrs
    assert csp_sources(csp, "frame-ancestors") == ["'none'"], csp
    assert csp_sources(csp, "default-src") == ["'none'"], csp
    assert "unsafe" not in csp, csp
    page = body.decode()
    scripts = re.findall(r"<script>(.*?)</script>", page, re.S)
    styles = re.findall(r"<style>(.*?)</style>", page, re.S)
    assert len(scripts) == 1 and len(styles) == 1
    digest = lambda t: "'sha256-%s'" % base64.b64encode(hashlib.sha256(t.encode()).digest()).decode()
    assert csp_sources(csp, "script-src") == [digest(scripts[0])], csp
    assert csp_sources(csp, "style-src") == [digest(styles[0])], csp
    # no inline handler or style attribute the policy would block (the page builds its HTML
    # in strings, so look at the whole text)
    assert not re.search(r"\son[a-z]+\s*=", page), "an inline event handler"
    assert 'style="' not in page, "a style attribute"
    # the other answers: the API, /metrics, an error
    for path in ("/api/server", "/metrics", "/nope"):
        st, hdrs, _ = request(port, path)
        assert hdrs.get("x-frame-options") == "DENY", (path, hdrs)
        assert "frame-ancestors 'none'" in hdrs.get("content-security-policy", ""), (path, hdrs)
    # in Chromium: an injected script does not run, and a page of another origin framing the
    # console gets none of it
    node = shutil.which("node")
    assert node and os.path.exists(CHROMIUM), "node and Debian's chromium are needed"
    env = dict(os.environ, PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD="1")
    p = subprocess.run([node, os.path.join(NODE_DIR, "console_e2e.js"), "--url",
                        "http://127.0.0.1:%d/" % port, "--probe", "1"],
                       capture_output=True, text=True, timeout=120, env=env, cwd=NODE_DIR)
    assert p.returncode == 0, "console_e2e.js --probe failed:\n" + p.stderr[-3000:]
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    assert seen["injected"] is None and seen["injectionReported"], seen
    assert seen["framed"] is False, seen


def port_free(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def echd_dev_run(server, *args):
    """tools/echd-dev run ARGS with the build directory of the echd under test: (the process,
    the lines it logged up to echd's "Ready ... http", or its exit)."""
    build = os.path.dirname(os.path.dirname(os.path.abspath(server.exe)))
    env = dict(os.environ, ECHD_DEV_BUILD_DIR=build)
    p = subprocess.Popen([os.path.join(ROOT, "tools", "echd-dev"), "run", *args],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
    lines = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if "Ready to accept connections http" in line:
            break
    return p, lines


def stop(p):
    p.terminate()
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


@echd_only(ECHD_ONLY)
@timeout(300)
def test_echd_dev_run_serves_the_console(server):
    """Issue 35: a newcomer's tools/echd-dev run served no console. Now it serves it (and
    /metrics) on 127.0.0.1:7380 as the Debian package does, and prints its URL; --http-port
    and the rest still override."""
    port, http = free_ports(2)
    data = tempfile.mkdtemp(prefix="echd-dev-run-")
    try:
        p, lines = echd_dev_run(server, "--port", str(port), "--http-port", str(http),
                                "--dir", data)
        try:
            url = "http://127.0.0.1:%d/" % http
            assert any("the console: " + url in ln for ln in lines), lines
            st, hdrs, body = request(http, "/")
            assert st == 200 and b"<title>echd console</title>" in body, (st, lines)
            c = RespConn(port, timeout=5)
            assert c.call("PING") == "PONG"
            c.close()
        finally:
            stop(p)
        # the defaults, when 7380 is free on this machine
        if port_free(7380):
            port = free_port()
            p, lines = echd_dev_run(server, "--port", str(port), "--dir", data)
            try:
                assert any("the console: http://127.0.0.1:7380/" in ln for ln in lines), lines
                st, _, body = request(7380, "/")
                assert st == 200 and b"<title>echd console</title>" in body, (st, lines)
            finally:
                stop(p)
        else:
            print("port 7380 is taken here: the default port was not tried")
    finally:
        shutil.rmtree(data, ignore_errors=True)


# ---------------------------------------------------------------------------
# the console in a browser
# ---------------------------------------------------------------------------

@echd_only(ECHD_ONLY)
@timeout(180)
def test_console_in_browser(server):
    node = shutil.which("node")
    assert node and os.path.exists(CHROMIUM), "node and Debian's chromium are needed"
    assert os.path.isdir(os.path.join(NODE_DIR, "node_modules", "playwright-core")), (
        "playwright-core is missing in %s: tools/echd-dev deps runs npm ci there" % NODE_DIR)
    srv, port = http_server(server, "--requirepass", "sekret", "--http-sample-interval", "1")
    r = srv.raw()
    r.call("AUTH", "sekret")
    ids = [s(r.call("XADD", "jobs", "*", "task", "t%d" % i, "n", str(i))) for i in range(40)]
    for n in ("mail", "audit-log", "payments"):
        r.call("XADD", n, "*", "x", "1")
    r.call("XGROUP", "CREATE", "jobs", "workers", "0")
    r.call("XGROUP", "CREATE", "jobs", "archive", "0")
    r.call("XREADGROUP", "GROUP", "workers", "alice", "COUNT", "15", "STREAMS", "jobs", ">")
    r.call("XREADGROUP", "GROUP", "workers", "bob", "COUNT", "12", "STREAMS", "jobs", ">")
    r.call("XNACK", "jobs", "workers", "FAIL", "IDS", "1", ids[4])
    out = tempfile.mkdtemp(prefix="echd-console-shots-")
    print("console screenshots in", out)
    env = dict(os.environ, PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD="1")
    p = subprocess.run([node, os.path.join(NODE_DIR, "console_e2e.js"), "--url",
                        "http://127.0.0.1:%d/" % port, "--out", out, "--stream", "jobs",
                        "--group", "workers", "--user", "default", "--pass", "sekret"],
                       capture_output=True, text=True, timeout=150, env=env, cwd=NODE_DIR)
    assert p.returncode == 0, "console_e2e.js failed:\n" + p.stderr[-3000:]
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    assert {"jobs", "mail", "payments"} <= set(seen["streams"]), seen
    assert seen["groups"] == ["archive", "workers"], seen
    assert seen["chartPoints"] and min(seen["chartPoints"]) >= 2, seen
    # the PEL paged by the page's buttons: every pending id once, in order
    flat = [i for page in seen["pages"] for i in page]
    assert flat == ids[:27] and len(seen["pages"]) == 3, seen["pages"]
    assert seen["fields"] == ["task", "n"], seen
    # the ACK from the page, seen over RESP
    acked = seen["acked"]
    assert acked in ids[:27]
    assert r.call("XPENDING", "jobs", "workers", acked, acked, "1") == []
    assert r.call("XPENDING", "jobs", "workers")[0] == 26
    # under its CSP (26-console::test_console_not_frameable_and_strict_csp): the legend's
    # colours applied from the style sheet, not style attributes, and no violation reported
    # while it worked (console_e2e.js fails on any console error)
    assert seen["legend"] == ["rgb(47, 111, 222)", "rgb(217, 119, 6)"], seen
    for name in ("1-server", "2-stream", "3-group", "4-entry", "5-acked"):
        assert os.path.getsize(os.path.join(out, name + ".png")) > 10000, name
