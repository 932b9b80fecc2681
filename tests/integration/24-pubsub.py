"""Pub/Sub: SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE and their UNSUBSCRIBEs, PUBLISH, SPUBLISH,
PUBSUB, the RESP2 subscribed context and RESP3 pushes, ACL channel rules, the pubsub class
of client-output-buffer-limit, and what INFO and CLIENT LIST show.

The shapes and errors are Redis' (these tests run against redis-server too); where Redis
7.4 words an error differently from the 7.0 on this machine, the test is echd-only.
"""

import subprocess
import time

from echdtest import REDIS_CLI, TLS, Push, echd_only, timeout, wait_until

NOPERM_CHANNEL = "NOPERM No permissions to access a channel"
CONTEXT = ("ERR Can't execute '%s': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / "
           "RESET are allowed in this context")


def b(*xs):
    return [x.encode() if isinstance(x, str) else x for x in xs]


def subscribe(c, cmd, *names):
    """Sends one (P|S)SUBSCRIBE and reads its confirmations."""
    c.send(cmd, *names)
    return [c.read() for _ in names]


def test_subscribe_and_publish(server):
    sub, pub = server.raw(), server.raw()
    # a repeated channel is confirmed again with the same count
    assert subscribe(sub, "SUBSCRIBE", "a", "b", "a") == [
        b("subscribe", "a", 1), b("subscribe", "b", 2), b("subscribe", "a", 2)]
    assert subscribe(sub, "PSUBSCRIBE", "h*") == [b("psubscribe", "h*", 3)]
    # shard channels are counted apart
    assert subscribe(sub, "SSUBSCRIBE", "sh") == [b("ssubscribe", "sh", 1)]
    assert pub.call("PUBLISH", "a", "m1") == 1
    assert pub.call("PUBLISH", "hello", "m2") == 1
    assert pub.call("SPUBLISH", "sh", "m3") == 1
    assert pub.call("PUBLISH", "nobody", "x") == 0
    # a shard channel hears only SPUBLISH, a channel only PUBLISH
    assert pub.call("PUBLISH", "sh", "x") == 0
    assert pub.call("SPUBLISH", "a", "x") == 0
    assert sub.read() == b("message", "a", "m1")
    assert sub.read() == b("pmessage", "h*", "hello", "m2")
    assert sub.read() == b("smessage", "sh", "m3")
    # binary channel names and payloads come through whole
    assert subscribe(sub, "SUBSCRIBE", b"\x00\xff ch") == [b("subscribe", b"\x00\xff ch", 4)]
    assert pub.call("PUBLISH", b"\x00\xff ch", b"\r\n\x00") == 1
    assert sub.read() == b("message", b"\x00\xff ch", b"\r\n\x00")


def test_every_subscription_gets_its_message(server):
    s1, s2, pub = server.raw(), server.raw(), server.raw()
    subscribe(s1, "SUBSCRIBE", "news.x")
    subscribe(s1, "PSUBSCRIBE", "news.*", "*.x", "other.*")
    subscribe(s2, "SUBSCRIBE", "news.x")
    # one message per channel subscription and per matching pattern
    assert pub.call("PUBLISH", "news.x", "hi") == 4
    got = [s1.read() for _ in range(3)]
    assert got[0] == b("message", "news.x", "hi")
    assert sorted(got[1:]) == sorted([b("pmessage", "news.*", "news.x", "hi"),
                                      b("pmessage", "*.x", "news.x", "hi")])
    assert s2.read() == b("message", "news.x", "hi")
    # messages keep the order they were published in
    pub.pipeline([("PUBLISH", "news.y", str(i)) for i in range(50)])
    assert [s1.read()[3] for _ in range(50)] == [str(i).encode() for i in range(50)]


def test_subscribed_context_resp2(server):
    c = server.raw()
    subscribe(c, "SUBSCRIBE", "a")
    assert c.err("XADD", "s", "*", "f", "v") == CONTEXT % "xadd"
    assert c.err("CONFIG", "GET", "maxclients") == CONTEXT % "config|get"
    assert c.err("NOSUCHCMD").startswith("ERR unknown command 'NOSUCHCMD'")
    assert c.call("PING") == [b"pong", b""]
    assert c.call("PING", "hi") == [b"pong", b"hi"]
    # patterns and shard channels keep the context too
    subscribe(c, "PSUBSCRIBE", "p*")
    c.send("UNSUBSCRIBE")
    assert c.read() == b("unsubscribe", "a", 1)
    assert c.err("XLEN", "s") == CONTEXT % "xlen"
    c.send("PUNSUBSCRIBE")
    assert c.read() == b("punsubscribe", "p*", 0)
    subscribe(c, "SSUBSCRIBE", "s1")
    assert c.err("XLEN", "s") == CONTEXT % "xlen"
    c.send("SUNSUBSCRIBE", "s1")
    assert c.read() == b("sunsubscribe", "s1", 0)
    # out of the context: everything again
    assert c.call("PING") == "PONG"
    assert c.call("XLEN", "s") == 0


def test_unsubscribe_replies(server):
    c = server.raw()
    for cmd in ("UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE"):
        # from nothing: one confirmation with a null name
        c.send(cmd)
        assert c.read() == [cmd.lower().encode(), None, 0]
    subscribe(c, "SUBSCRIBE", "a", "b")
    subscribe(c, "PSUBSCRIBE", "p*")
    # a name it is not subscribed to is still confirmed, with the count
    c.send("UNSUBSCRIBE", "zz", "a")
    assert [c.read(), c.read()] == [b("unsubscribe", "zz", 3), b("unsubscribe", "a", 2)]
    c.send("PUNSUBSCRIBE", "p*")
    assert c.read() == b("punsubscribe", "p*", 1)
    subscribe(c, "SUBSCRIBE", "c")
    c.send("UNSUBSCRIBE")
    got = [c.read(), c.read()]
    assert sorted(x[1] for x in got) == [b"b", b"c"] and [x[2] for x in got] == [1, 0], got
    assert c.err("SUBSCRIBE") == "ERR wrong number of arguments for 'subscribe' command"
    assert c.err("PUBLISH", "a") == "ERR wrong number of arguments for 'publish' command"


def test_pubsub_command(server):
    s1, s2, c = server.raw(), server.raw(), server.raw()
    subscribe(s1, "SUBSCRIBE", "a", "ab", "b")
    subscribe(s2, "SUBSCRIBE", "a")
    subscribe(s1, "PSUBSCRIBE", "x*", "y*")
    subscribe(s2, "PSUBSCRIBE", "x*")
    subscribe(s2, "SSUBSCRIBE", "sh1", "sh2")
    assert sorted(c.call("PUBSUB", "CHANNELS")) == [b"a", b"ab", b"b"]
    assert sorted(c.call("PUBSUB", "CHANNELS", "a*")) == [b"a", b"ab"]
    assert c.call("PUBSUB", "CHANNELS", "zz*") == []
    assert c.call("PUBSUB", "NUMSUB", "a", "ab", "zz") == [b"a", 2, b"ab", 1, b"zz", 0]
    assert c.call("PUBSUB", "NUMSUB") == []
    # patterns, not subscriptions to them
    assert c.call("PUBSUB", "NUMPAT") == 2
    assert sorted(c.call("PUBSUB", "SHARDCHANNELS")) == [b"sh1", b"sh2"]
    assert c.call("PUBSUB", "SHARDCHANNELS", "*2") == [b"sh2"]
    assert c.call("PUBSUB", "SHARDNUMSUB", "sh1", "a") == [b"sh1", 1, b"a", 0]
    help_ = c.call("PUBSUB", "HELP")
    assert help_[0].startswith("PUBSUB <subcommand>") and "NUMPAT" in help_, help_
    assert c.err("PUBSUB", "NOPE") == "ERR unknown subcommand 'NOPE'. Try PUBSUB HELP."
    assert c.err("PUBSUB") == "ERR wrong number of arguments for 'pubsub' command"
    assert c.err("PUBSUB", "CHANNELS", "a", "b") == (
        "ERR unknown subcommand or wrong number of arguments for 'CHANNELS'. "
        "Try PUBSUB HELP.")
    assert c.err("PUBSUB", "NUMPAT", "x") == (
        "ERR wrong number of arguments for 'pubsub|numpat' command")
    # RESP3: NUMSUB stays a flat array, as Redis replies it
    c.call("HELLO", "3")
    assert c.call("PUBSUB", "NUMSUB", "a") == [b"a", 2]


def test_resp3_pushes(server):
    c, pub = server.raw(), server.raw()
    c.call("HELLO", "3")
    c.send("SUBSCRIBE", "ch")
    r = c.read()
    assert isinstance(r, Push) and r == b("subscribe", "ch", 1), r
    # RESP3 has no subscribed context: any command, PING as usual
    assert c.call("PING") == "PONG"
    assert c.call("XADD", "s", "1-1", "f", "v") == b"1-1"
    assert pub.call("PUBLISH", "ch", "hi") == 1
    r = c.read()
    assert isinstance(r, Push) and r == b("message", "ch", "hi"), r
    # publishing to its own channel: the push comes before the reply
    c.send("PUBLISH", "ch", "me")
    r = c.read()
    assert isinstance(r, Push) and r == b("message", "ch", "me"), r
    assert c.read() == 1
    c.send("UNSUBSCRIBE")
    r = c.read()
    assert isinstance(r, Push) and r == b("unsubscribe", "ch", 0), r


def test_reset_and_close_leave_channels(server):
    c, other = server.raw(), server.raw()
    subscribe(c, "SUBSCRIBE", "a")
    subscribe(c, "PSUBSCRIBE", "p*")
    subscribe(c, "SSUBSCRIBE", "s")
    assert c.call("RESET") == "RESET"
    assert c.call("XLEN", "x") == 0   # out of the subscribed context
    assert other.call("PUBSUB", "NUMSUB", "a") == [b"a", 0]
    assert other.call("PUBSUB", "NUMPAT") == 0
    assert other.call("PUBSUB", "SHARDNUMSUB", "s") == [b"s", 0]
    subscribe(c, "SUBSCRIBE", "a")
    assert other.call("PUBLISH", "a", "x") == 1
    c.close()
    wait_until(lambda: other.call("PUBSUB", "NUMSUB", "a") == [b"a", 0],
               what="a closed subscriber leaves its channels")
    assert other.call("PUBLISH", "a", "x") == 0


def test_subscribe_in_multi(server):
    c, pub = server.raw(), server.raw()
    assert c.call("MULTI") == "OK"
    assert c.call("SUBSCRIBE", "m") == "QUEUED"
    assert c.call("EXEC") == [b("subscribe", "m", 1)]
    pub.call("MULTI")
    pub.call("XADD", "s", "*", "f", "v")
    pub.call("PUBLISH", "m", "after-xadd")
    assert pub.call("EXEC")[1] == 1
    assert c.read() == b("message", "m", "after-xadd")


def info_stats(c):
    text = c.call("INFO", "stats").decode()
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def test_info_and_client_list(server):
    c, other = server.raw(), server.raw()
    c.call("CLIENT", "SETNAME", "listener")
    subscribe(c, "SUBSCRIBE", "a", "b")
    subscribe(c, "PSUBSCRIBE", "p*")
    subscribe(c, "SSUBSCRIBE", "s")
    st = info_stats(other)
    assert (st["pubsub_channels"], st["pubsub_patterns"], st["pubsubshard_channels"]) == (
        "2", "1", "1"), st
    lines = other.call("CLIENT", "LIST").decode().splitlines()
    mine = [ln for ln in lines if "name=listener" in ln]
    assert len(mine) == 1 and " sub=2 psub=1 ssub=1 " in mine[0], lines
    assert " flags=P " in mine[0], mine
    sub_only = other.call("CLIENT", "LIST", "TYPE", "pubsub").decode().splitlines()
    assert len(sub_only) == 1 and "name=listener" in sub_only[0], sub_only
    normal = other.call("CLIENT", "LIST", "TYPE", "normal").decode()
    assert "name=listener" not in normal and normal.count("\n") >= 1, normal
    assert other.call("CLIENT", "KILL", "TYPE", "pubsub") == 1
    assert c.wait_closed()
    wait_until(lambda: info_stats(other)["pubsub_channels"] == "0", what="channels freed")


def test_command_info_and_docs(server):
    c = server.raw()
    info = {x[0]: x for x in c.call("COMMAND", "INFO", "subscribe", "publish", "pubsub")}
    assert info[b"subscribe"][1] == -2 and "pubsub" in info[b"subscribe"][2]
    assert info[b"publish"][1] == 3 and "fast" in info[b"publish"][2]
    assert "@pubsub" in info[b"publish"][6]
    docs = c.call("COMMAND", "DOCS", "publish")
    d = dict(zip(docs[1][0::2], docs[1][1::2]))
    assert d[b"group"] == b"pubsub", d
    assert b"publish" in c.call("COMMAND", "LIST", "FILTERBY", "ACLCAT", "pubsub")


def test_slow_subscriber_is_closed(server):
    c, sub = server.raw(), server.raw()
    big = "x" * 65536
    old = c.call("CONFIG", "GET", "client-output-buffer-limit")[1]
    c.call("CONFIG", "SET", "client-output-buffer-limit", "pubsub 1mb 0 0")
    # the counter is Redis 7.2's: the 7.0 here has no such field
    counter = "client_output_buffer_limit_disconnections"
    try:
        before = int(info_stats(c).get(counter, -1))
        sub.call("CLIENT", "SETNAME", "slow")
        subscribe(sub, "SUBSCRIBE", "flood")
        # the subscriber reads nothing: 64 MiB is past what the kernel's buffers hold
        # and far past its 1 MiB
        for _ in range(16):
            c.pipeline([("PUBLISH", "flood", big)] * 64)
            if b"name=slow" not in c.call("CLIENT", "LIST"):
                break
        wait_until(lambda: b"name=slow" not in c.call("CLIENT", "LIST"),
                   what="the slow subscriber closed")
        assert int(info_stats(c).get(counter, -1)) == (before + 1 if before >= 0 else -1)
        assert sub.wait_closed(timeout=20)
        # the publisher, a normal client, is not bound by the pubsub class
        assert c.call("PUBLISH", "flood", "x") == 0
        assert c.call("PING") == "PONG"
    finally:
        c.call("CONFIG", "SET", "client-output-buffer-limit", old)


def listed(c, name):
    """The CLIENT LIST line of the client named name, or None."""
    for line in c.call("CLIENT", "LIST").decode().splitlines():
        if " name=%s " % name in line:
            return line
    return None


def flood(c, channel, gone, mib, each=65536):
    """Publishes up to mib MiB to channel in pipelines of 1 MiB, until client gone has left."""
    big = "x" * each
    for _ in range(mib):
        c.pipeline([("PUBLISH", channel, big)] * (1048576 // each))
        if listed(c, gone) is None:
            return True
    return listed(c, gone) is None


@timeout(120)
def test_maxmemory_clients_evicts_the_biggest(server):
    """Issue 35: each subscriber's output was bounded (client-output-buffer-limit) but not their
    sum: 40 that never read took 1.26 GB. maxmemory-clients bounds the sum: past it the client
    with the most output is closed first (evicted_clients counts it), one with CLIENT NO-EVICT
    ON never, and neither the pubsub class' own limit nor the publisher comes into it. Redis
    7.0 has the option, so this runs against it too."""
    c = server.raw()
    old = c.call("CONFIG", "GET", "maxmemory-clients")[1]
    st = info_stats(c)
    # client_output_buffer_limit_disconnections is Redis 7.2's: the 7.0 here has none
    evicted = int(st["evicted_clients"])
    obuf = int(st.get("client_output_buffer_limit_disconnections", -1))
    conns = {n: server.raw() for n in ("big", "small", "exempt")}
    c.call("CONFIG", "SET", "maxmemory-clients", "8mb")
    try:
        for name, sub in conns.items():
            sub.call("CLIENT", "SETNAME", name)
        assert conns["exempt"].call("CLIENT", "NO-EVICT", "ON") == "OK"
        subscribe(conns["big"], "SUBSCRIBE", "to-big")
        subscribe(conns["small"], "SUBSCRIBE", "to-small")
        subscribe(conns["exempt"], "SUBSCRIBE", "to-small")
        assert " flags=Pe " in listed(c, "exempt"), listed(c, "exempt")
        # RESET turns NO-EVICT off, as Redis' page says (the 7.0 here keeps it on)
        r = server.raw()
        r.call("CLIENT", "NO-EVICT", "ON")
        r.call("CLIENT", "SETNAME", "reset")
        assert " flags=e " in listed(c, "reset"), listed(c, "reset")
        assert r.call("RESET") == "RESET"
        r.call("CLIENT", "SETNAME", "reset")
        if server.kind == "echd":
            assert " flags=N " in listed(c, "reset"), listed(c, "reset")
        r.close()
        # a little for small and exempt (the kernel's buffers take it), then big's alone
        flood(c, "to-small", "nobody", 1)
        assert flood(c, "to-big", "big", 24), "big was not evicted"
        assert conns["big"].wait_closed(timeout=20)
        assert listed(c, "small") is not None and listed(c, "exempt") is not None
        st = info_stats(c)
        assert int(st["evicted_clients"]) == evicted + 1, st
        # then small and exempt grow alike: small goes, exempt stays, over the bound alone
        assert flood(c, "to-small", "small", 20), "small was not evicted"
        assert listed(c, "exempt") is not None
        st = info_stats(c)
        assert int(st["evicted_clients"]) == evicted + 2, st
        assert int(st.get("client_output_buffer_limit_disconnections", -1)) == obuf, st
        assert c.call("PING") == "PONG"
    finally:
        c.call("CONFIG", "SET", "maxmemory-clients", old)
        for sub in conns.values():
            sub.close()


def test_redis_py_and_cli(server):
    r = server.client()
    p = r.pubsub()
    p.subscribe("jobs.done")
    p.psubscribe("jobs.*")
    for _ in range(2):
        assert p.get_message(timeout=5)["type"] in ("subscribe", "psubscribe")
    assert r.publish("jobs.done", "42") == 2
    got = [p.get_message(timeout=5) for _ in range(2)]
    assert {(m["type"], m["channel"], m["data"]) for m in got} == {
        ("message", "jobs.done", "42"), ("pmessage", "jobs.done", "42")}, got
    assert r.pubsub_numsub("jobs.done") == [("jobs.done", 1)]
    p.close()
    # redis-cli in subscribe mode prints what it hears
    cmd = [REDIS_CLI, "-h", "127.0.0.1", "-p", str(server.client_port)]
    if server.suite_tls_port:
        cmd += ["--tls", "--cacert", TLS["ca"]]
    proc = subprocess.Popen(cmd + ["SUBSCRIBE", "cli"], stdout=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: r.pubsub_numsub("cli") == [("cli", 1)], what="redis-cli subscribed")
        assert r.publish("cli", "hello from redis-py") == 1
        lines = []
        deadline = time.monotonic() + 10
        while "hello from redis-py" not in lines and time.monotonic() < deadline:
            lines.append(proc.stdout.readline().strip())
        assert lines[-3:] == ["message", "cli", "hello from redis-py"], lines
    finally:
        proc.kill()
        proc.wait()


def test_acl_pubsub_category(server):
    a = server.raw()
    a.call("ACL", "SETUSER", "ps", "on", "nopass", "-@all", "+@pubsub", "allchannels")
    u = server.raw()
    u.call("AUTH", "ps", "x")
    assert u.call("PUBLISH", "c", "x") == 0
    assert u.call("PUBSUB", "NUMSUB", "c") == [b"c", 0]
    assert u.call("PUBSUB", "CHANNELS") == []
    # HELP is @slow only, as the container
    assert u.err("PUBSUB", "HELP").startswith("NOPERM")
    assert u.err("XLEN", "s").startswith("NOPERM")
    cat = a.call("ACL", "CAT", "pubsub")
    for name in (b"publish", b"subscribe", b"ssubscribe", b"pubsub|numsub"):
        assert name in cat, (name, cat)
    assert b"pubsub|help" not in cat and b"xlen" not in cat


@echd_only("Redis 7.4's NOPERM and DRYRUN words; 7.0 says 'this user has no permissions "
           "to access one of the channels used as arguments'")
def test_acl_channels(server):
    a = server.raw()
    assert a.call("ACL", "SETUSER", "u", "on", "nopass", "+@all", "~*", "&news.*",
                  "&exact") == "OK"
    u = server.raw()
    assert u.call("AUTH", "u", "x") == "OK"
    # all or nothing: one channel not allowed refuses the command
    assert u.err("SUBSCRIBE", "news.a", "other") == NOPERM_CHANNEL
    assert subscribe(u, "SUBSCRIBE", "news.a") == [b("subscribe", "news.a", 1)]
    # a pattern must be one of the user's own, word for word
    assert subscribe(u, "PSUBSCRIBE", "news.*") == [b("psubscribe", "news.*", 2)]
    assert u.err("PSUBSCRIBE", "news.a*") == NOPERM_CHANNEL
    assert u.err("SSUBSCRIBE", "other") == NOPERM_CHANNEL
    assert u.call("UNSUBSCRIBE", "other") == b("unsubscribe", "other", 2)  # never checked
    p = server.raw()
    assert p.call("AUTH", "u", "x") == "OK"
    assert p.err("PUBLISH", "other", "x") == NOPERM_CHANNEL
    assert p.err("SPUBLISH", "other", "x") == NOPERM_CHANNEL
    assert p.call("PUBLISH", "exact", "x") == 0
    assert a.call("ACL", "DRYRUN", "u", "PUBLISH", "other", "x") == (
        b"User u has no permissions to access the 'other' channel")
    assert a.call("ACL", "DRYRUN", "u", "PUBLISH", "news.b", "x") == "OK"
    log = a.call("ACL", "LOG", "1")[0]
    entry = dict(zip(log[0::2], log[1::2]))
    assert (entry[b"reason"], entry[b"object"], entry[b"username"]) == (
        b"channel", b"other", b"u"), entry
    st = info_stats(a)
    assert int(st["acl_access_denied_channel"]) >= 5, st
    user = a.call("ACL", "GETUSER", "u")
    assert dict(zip(user[0::2], user[1::2]))[b"channels"] == b"&news.* &exact"
    lines = a.call("ACL", "LIST")
    assert b"user u on nopass ~* resetchannels &news.* &exact +@all" in lines, lines
    assert any(ln.startswith(b"user default on nopass ~* &* ") for ln in lines), lines
    assert a.err("ACL", "SETUSER", "v", "allchannels", "&x").startswith(
        "ERR Error in ACL SETUSER modifier '&x': Adding a pattern after the * pattern")
    # a new user has no channels (acl-pubsub-default resetchannels)
    a.call("ACL", "SETUSER", "w", "on", "nopass", "+@all", "~*")
    user = a.call("ACL", "GETUSER", "w")
    assert dict(zip(user[0::2], user[1::2]))[b"channels"] == b""
    # taking a channel away closes the subscriber that still hears it
    assert a.call("ACL", "SETUSER", "u", "resetchannels", "&exact") == "OK"
    assert u.wait_closed(timeout=5)
    assert p.call("PUBLISH", "exact", "x") == 0


@echd_only("the default is Redis' own; redis-server 7.0 prints the class as 'slave' too, but "
           "this checks echd's option table")
def test_pubsub_output_limit_option(server):
    c = server.raw()
    val = c.call("CONFIG", "GET", "client-output-buffer-limit")[1].decode()
    assert val.endswith(" pubsub 33554432 8388608 60"), val
    c.call("CONFIG", "SET", "client-output-buffer-limit", "pubsub 2mb 1mb 30")
    val2 = c.call("CONFIG", "GET", "client-output-buffer-limit")[1].decode()
    assert val2.endswith(" pubsub 2097152 1048576 30"), val2
    c.call("CONFIG", "SET", "client-output-buffer-limit", val)
    assert "Invalid client class" in c.err("CONFIG", "SET", "client-output-buffer-limit",
                                           "nope 1 1 1")
    assert c.call("PING") == "PONG"


def test_closed_subscriber_during_publish(server):
    """A subscriber gone between two publishes: no message for it, no error for the
    publisher."""
    pub = server.raw()
    subs = [server.raw() for _ in range(5)]
    for s in subs:
        subscribe(s, "SUBSCRIBE", "gone")
    for s in subs[:3]:
        s.close()
    wait_until(lambda: pub.call("PUBSUB", "NUMSUB", "gone") == [b"gone", 2],
               what="closed subscribers leave")
    assert pub.call("PUBLISH", "gone", "x") == 2
    for s in subs[3:]:
        assert s.read() == b("message", "gone", "x")
    # closed without a word between the PUBLISH and its delivery
    subs[3].close()
    assert pub.call("PUBLISH", "gone", "y") in (1, 2)
    assert subs[4].read() == b("message", "gone", "y")
    assert pub.call("PING") == "PONG"
