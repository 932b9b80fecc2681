"""The house knows its keys (issue 32): one finder, read from the key specs in each command's
table row, tells the ACL, COMMAND GETKEYS / GETKEYSANDFLAGS / INFO, ACL DRYRUN and EXEC which
arguments are keys.

- XGROUP SETPOLICY's DEADLETTER key is a key: a user who may not touch it cannot set it, so
  a later XNACK FATAL (or MAXDELIVER) cannot write into it on that user's behalf.
- EXEC checks the ACL again as it runs each queued command: rights narrowed on another
  connection after the command was queued refuse it with Redis' NOPERM text inside EXEC's
  reply (ACL LOG context "multi"); the other queued commands still run.
- Generated from the command table: every command and subcommand the server lists with keys
  must have an example below; for each example the key positions COMMAND GETKEYS reports
  must be those of Redis' src/commands/<cmd>.json key specs (written here by hand, the
  independent ground truth), and for every one of them a user allowed every other key of the
  example but not that one gets NOPERM and nothing in the keyspace changes.
"""

from echdtest import RespError, RSet, echd_only

TIMEOUT = 120

NOPERM_KEY = "NOPERM No permissions to access a key"
NOPERM_KEY_70 = "NOPERM this user has no permissions to access one of the keys used as arguments"
EXEC_CHANGED = ("NOPERM ACLs rules changed between the moment the transaction was accumulated "
                "and the EXEC call. This command is no longer allowed for the following "
                "reason: %s")
WHY_CMD = "no permission to execute the command or subcommand"
WHY_KEY = "no permission to touch the specified keys"
WHY_CHANNEL = "no permission to access one of the channels used as arguments"


def noperm_key(server):
    return NOPERM_KEY if server.is_echd else NOPERM_KEY_70


def user(admin, name, *rules):
    """A user that logs in without a password, with the rules given and no others (reset:
    its connections stay, with the new rules)."""
    assert admin.call("ACL", "SETUSER", name, "reset", "on", "nopass", *rules) == "OK"


def login(server, name):
    c = server.raw()
    assert c.call("AUTH", name, "any") == "OK"
    return c


def log_entries(c):
    out = []
    for e in c.call("ACL", "LOG"):
        d = e if isinstance(e, dict) else dict(zip(e[0::2], e[1::2]))
        out.append({k.decode(): (v.decode() if isinstance(v, bytes) else v)
                    for k, v in d.items()})
    return out


def snapshot(c):
    """What the keyspace holds, as the default user sees it: every key with its type and
    expiry; for a stream its entries, last ID, groups with their cursors and pending counts,
    and each group's consumers with their pending counts."""
    out = {}
    for db in (0, 1):
        c.call("SELECT", str(db))
        for k in sorted(c.call("KEYS", "*")):
            s = {"type": c.call("TYPE", k), "ttl": c.call("PTTL", k) > 0}
            if s["type"] == "stream":
                info = c.call("XINFO", "STREAM", k)
                info = dict(zip(info[0::2], info[1::2]))
                s["last"] = info[b"last-generated-id"]
                s["entries"] = c.call("XRANGE", k, "-", "+")
                s["groups"] = []
                for g in c.call("XINFO", "GROUPS", k):
                    g = dict(zip(g[0::2], g[1::2]))
                    cons = [tuple(x[:4]) for x in c.call("XINFO", "CONSUMERS", k, g[b"name"])]
                    s["groups"].append((g[b"name"], g[b"last-delivered-id"], g[b"pending"],
                                        cons))
            out[(db, k)] = s
    c.call("SELECT", "0")
    return out


# ---------------------------------------------------------------------------
# (a) XGROUP SETPOLICY ... DEADLETTER key
# ---------------------------------------------------------------------------

@echd_only("XGROUP SETPOLICY and XNACK's dead-lettering are echd's")
def test_deadletter_key_is_a_key(server):
    """A user with ~jobs:* cannot name a dead-letter stream outside its patterns: SETPOLICY is
    refused (NOPERM, ACL LOG), ACL DRYRUN says why and COMMAND GETKEYS lists the key, and the
    XNACK FATAL that follows writes nothing into it. echd once took SETPOLICY's key alone."""
    admin = server.raw()
    admin.call("ACL", "LOG", "RESET")
    user(admin, "dl-app", "~jobs:*", "+@all")
    app = login(server, "dl-app")
    assert app.err("XADD", "secret", "*", "f", "v") == NOPERM_KEY
    assert app.call("XADD", "jobs:a", "1-1", "f", "v") == b"1-1"
    assert app.call("XGROUP", "CREATE", "jobs:a", "g", "0") == "OK"
    assert app.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", "jobs:a", ">")
    argv = ["XGROUP", "SETPOLICY", "jobs:a", "g", "MAXDELIVER", "1", "DEADLETTER", "secret"]
    assert app.err(*argv) == NOPERM_KEY
    assert admin.call("ACL", "DRYRUN", "dl-app", *argv) == (
        b"No permissions to access the 'secret' key")
    assert admin.call("COMMAND", "GETKEYS", *argv) == [b"jobs:a", b"secret"]
    assert admin.call("COMMAND", "GETKEYSANDFLAGS", *argv) == [
        [b"jobs:a", ["RW", "update"]], [b"secret", ["RW", "insert"]]]
    e = log_entries(admin)[0]
    assert (e["reason"], e["context"], e["object"]) == ("key", "toplevel", "secret"), e
    assert app.call("XNACK", "jobs:a", "g", "FATAL", "IDS", "1", "1-1") == 1
    assert admin.call("EXISTS", "secret") == 0
    # a dead-letter stream of its own works; DEADLETTER twice is refused, whoever asks
    # (the finder checks the first, the handler would have kept the last)
    assert app.call(*argv[:-1], "jobs:dlq") == "OK"
    assert app.err(*argv[:-1], "jobs:dlq", "DEADLETTER", "jobs:dlq2") == (
        "ERR DEADLETTER may be given only once")
    assert admin.err(*argv[:-1], "jobs:dlq", "DEADLETTER", "secret") == (
        "ERR DEADLETTER may be given only once")
    assert app.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", "jobs:a", "0")
    app.call("XADD", "jobs:a", "2-1", "f", "v")
    assert app.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", "jobs:a", ">")
    assert app.call("XNACK", "jobs:a", "g", "FATAL", "IDS", "1", "2-1") == 1
    assert admin.call("XLEN", "jobs:dlq") == 1
    assert admin.call("EXISTS", "secret") == 0
    # a key named DEADLETTER, a group named DEADLETTER: the keyword search starts after them
    assert admin.call("COMMAND", "GETKEYS", "XGROUP", "SETPOLICY", "DEADLETTER", "DEADLETTER",
                      "DEADLETTER", "DEADLETTER") == [b"DEADLETTER", b"DEADLETTER"]
    assert admin.call("COMMAND", "GETKEYS", "XGROUP", "SETPOLICY", "k", "DEADLETTER",
                      "ACKWAIT", "5") == [b"k"]


# ---------------------------------------------------------------------------
# (b) EXEC checks the ACL again
# ---------------------------------------------------------------------------

def test_exec_rechecks_acl(server):
    """Keys, commands and channels taken away between MULTI and EXEC: each queued command the
    user may no longer run answers Redis' NOPERM text inside EXEC's reply, is logged with
    context "multi", and writes nothing; the others run."""
    admin = server.raw()
    admin.call("ACL", "LOG", "RESET")
    user(admin, "tx-app", "~jobs:*", "~other:*", "&chan:*", "+@all")
    app = login(server, "tx-app")
    queued = [("XADD", "other:x", "1-1", "f", "v"), ("XADD", "jobs:a", "1-1", "f", "v"),
              ("XLEN", "jobs:a"), ("XTRIM", "jobs:a", "MAXLEN", "5"),
              ("PUBLISH", "chan:1", "m")]
    assert app.call("MULTI") == "OK"
    for q in queued:
        assert app.call(*q) == "QUEUED", q
    # on another connection: other:* goes, XTRIM goes, the channels go
    assert admin.call("ACL", "SETUSER", "tx-app", "resetkeys", "~jobs:*", "-xtrim",
                      "resetchannels") == "OK"
    got = app.call("EXEC")
    assert got == [RespError(EXEC_CHANGED % WHY_KEY), b"1-1", 1,
                   RespError(EXEC_CHANGED % WHY_CMD), RespError(EXEC_CHANGED % WHY_CHANNEL)], got
    assert admin.call("EXISTS", "other:x") == 0
    assert admin.call("XLEN", "jobs:a") == 1
    log = log_entries(admin)
    got = [(e["reason"], e["context"], e["object"]) for e in log[:3]]
    assert got == [("channel", "multi", "chan:1"), ("command", "multi", "xtrim"),
                   ("key", "multi", "other:x")], log
    assert all(e["username"] == "tx-app" for e in log[:3])
    # the connection goes on: a transaction within its new rights runs whole
    assert app.call("MULTI") == "OK"
    assert app.call("XADD", "jobs:a", "2-1", "f", "v") == "QUEUED"
    assert app.call("EXEC") == [b"2-1"]
    # and a key refused at queue time still aborts the transaction, as before
    assert app.call("MULTI") == "OK"
    assert app.err("XADD", "other:x", "1-1", "f", "v") == noperm_key(server)
    assert app.err("EXEC") == "EXECABORT Transaction discarded because of previous errors."


# ---------------------------------------------------------------------------
# Generated from the command table
# ---------------------------------------------------------------------------

# One example per command or subcommand with keys, and the positions of its keys as Redis'
# src/commands/<cmd>.json key specs find them (echd's own XGROUP SETPOLICY: the key and the
# DEADLETTER key). Every key in an example is named k<n> and appears once, so that a name
# tells its position. Allowed its keys, each example runs without an error (it is a real
# invocation), but for those in RUNTIME_ERROR. 33-cluster-commands.py runs the stream ones
# through a cluster of 3 shards.
EXAMPLES = {
    "del": (["DEL", "k1", "k2"], [1, 2]),
    "unlink": (["UNLINK", "k1", "k2"], [1, 2]),
    "exists": (["EXISTS", "k1", "k2"], [1, 2]),
    "expire": (["EXPIRE", "k1", "100"], [1]),
    "pexpire": (["PEXPIRE", "k1", "100000"], [1]),
    "expireat": (["EXPIREAT", "k1", "4000000000"], [1]),
    "pexpireat": (["PEXPIREAT", "k1", "4000000000000"], [1]),
    "ttl": (["TTL", "k1"], [1]),
    "pttl": (["PTTL", "k1"], [1]),
    "expiretime": (["EXPIRETIME", "k1"], [1]),
    "pexpiretime": (["PEXPIRETIME", "k1"], [1]),
    "persist": (["PERSIST", "k3"], [1]),
    "touch": (["TOUCH", "k1", "k2"], [1, 2]),
    "type": (["TYPE", "k1"], [1]),
    "rename": (["RENAME", "k1", "k9"], [1, 2]),
    "renamenx": (["RENAMENX", "k1", "k9"], [1, 2]),
    "copy": (["COPY", "k1", "k9"], [1, 2]),
    "move": (["MOVE", "k1", "1"], [1]),
    "watch": (["WATCH", "k1", "k2"], [1, 2]),
    "object|encoding": (["OBJECT", "ENCODING", "k1"], [2]),
    "object|refcount": (["OBJECT", "REFCOUNT", "k1"], [2]),
    "object|freq": (["OBJECT", "FREQ", "k1"], [2]),
    "memory|usage": (["MEMORY", "USAGE", "k1"], [2]),
    "xadd": (["XADD", "k1", "*", "f", "v"], [1]),
    "xcfgset": (["XCFGSET", "k1", "IDMP-DURATION", "100"], [1]),
    "xidmprecord": (["XIDMPRECORD", "k1", "p1", "i1", "1-1"], [1]),
    "xlen": (["XLEN", "k1"], [1]),
    "xrange": (["XRANGE", "k1", "-", "+"], [1]),
    "xrevrange": (["XREVRANGE", "k1", "+", "-"], [1]),
    "xdel": (["XDEL", "k1", "1-1"], [1]),
    "xtrim": (["XTRIM", "k1", "MAXLEN", "0"], [1]),
    "xdelex": (["XDELEX", "k1", "IDS", "1", "1-1"], [1]),
    "xread": (["XREAD", "COUNT", "5", "STREAMS", "k1", "k2", "0", "0"], [4, 5]),
    "xsetid": (["XSETID", "k1", "99-1"], [1]),
    "xinfo|stream": (["XINFO", "STREAM", "k1"], [2]),
    "xinfo|groups": (["XINFO", "GROUPS", "k1"], [2]),
    "xinfo|consumers": (["XINFO", "CONSUMERS", "k1", "g"], [2]),
    "xgroup|create": (["XGROUP", "CREATE", "k1", "g2", "0"], [2]),
    "xgroup|setid": (["XGROUP", "SETID", "k1", "g", "0"], [2]),
    "xgroup|destroy": (["XGROUP", "DESTROY", "k1", "g"], [2]),
    "xgroup|createconsumer": (["XGROUP", "CREATECONSUMER", "k1", "g", "c2"], [2]),
    "xgroup|delconsumer": (["XGROUP", "DELCONSUMER", "k1", "g", "c"], [2]),
    "xgroup|setpolicy": (["XGROUP", "SETPOLICY", "k1", "g", "MAXDELIVER", "1", "DEADLETTER",
                          "k2"], [2, 7]),
    "xreadgroup": (["XREADGROUP", "GROUP", "g", "c", "STREAMS", "k1", "k2", ">", ">"], [5, 6]),
    "xack": (["XACK", "k1", "g", "1-1"], [1]),
    "xackdel": (["XACKDEL", "k1", "g", "IDS", "1", "1-1"], [1]),
    "xnack": (["XNACK", "k1", "g", "FAIL", "IDS", "1", "1-1"], [1]),
    "xpending": (["XPENDING", "k1", "g"], [1]),
    "xclaim": (["XCLAIM", "k1", "g", "c2", "0", "1-1"], [1]),
    "xautoclaim": (["XAUTOCLAIM", "k1", "g", "c2", "0", "0"], [1]),
}


# as in Redis: no LFU policy, no frequencies
RUNTIME_ERROR = {"object|freq": "ERR An LFU maxmemory policy is not selected"}


def setup_keys(c):
    """k1..k3: streams with two entries, group g whose consumer c has both pending; k3 expires
    in an hour; k9 does not exist."""
    c.call("FLUSHALL")
    for k in ("k1", "k2", "k3"):
        c.call("XADD", k, "1-1", "f", "v")
        c.call("XADD", k, "2-1", "f", "v")
        c.call("XGROUP", "CREATE", k, "g", "0")
        c.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", k, ">")
    c.call("EXPIRE", "k3", "3600")


def commands_with_keys(c, category=None):
    """Every command and subcommand ("container|sub") the server lists whose key specs
    (COMMAND INFO's element 9) name a key (not only shard channels); with category (say
    "@stream"), only those in that ACL category."""
    out = []

    def walk(row):
        name = row[0].decode()
        specs = row[8]
        cats = [x if isinstance(x, str) else x.decode() for x in row[6]]
        if any("not_key" not in flags_of(s) for s in specs) and (
                category is None or category in cats):
            out.append(name)
        for sub in row[9]:
            walk(sub)
    for row in c.call("COMMAND"):
        walk(row)
    return out


def flags_of(spec):
    d = dict(zip(spec[0::2], spec[1::2]))
    return [f if isinstance(f, str) else f.decode() for f in d[b"flags"]]


@echd_only("the list is echd's commands (echd's own SETPOLICY, Redis 8's stream commands)")
def test_every_key_is_checked(server):
    admin = server.raw()
    names = commands_with_keys(admin)
    missing = sorted(set(names) - set(EXAMPLES))
    assert not missing, "commands with keys and no example in EXAMPLES: %s" % missing
    assert sorted(EXAMPLES) == sorted(names), sorted(set(EXAMPLES) - set(names))
    denied = 0
    for name, (argv, want) in sorted(EXAMPLES.items()):
        found = admin.call("COMMAND", "GETKEYS", *argv)
        pos = [argv.index(k.decode()) for k in found]
        assert pos == want, (name, argv, pos, want)
        flags = admin.call("COMMAND", "GETKEYSANDFLAGS", *argv)
        assert [f[0] for f in flags] == found, (name, flags)
        for p in pos:
            setup_keys(admin)
            others = ["~" + argv[q] for q in pos if q != p]
            user(admin, "ks-user", "+@all", *others)
            before = snapshot(admin)
            u = login(server, "ks-user")
            assert u.err(*argv) == NOPERM_KEY, (name, argv, p)
            got = admin.call("ACL", "DRYRUN", "ks-user", *argv)
            assert got == ("No permissions to access the '%s' key" % argv[p]).encode(), (
                name, got)
            if name == "watch":
                # not queued in MULTI (it runs at once, and is refused there)
                assert snapshot(admin) == before, (name, argv, p)
                denied += 1
                continue
            # the same inside MULTI: refused when queued, and EXEC runs nothing
            assert u.call("MULTI") == "OK"
            assert u.err(*argv) == NOPERM_KEY, (name, argv, p)
            assert isinstance(u.err("EXEC"), str)
            # rights narrowed after queueing: refused by EXEC
            user(admin, "ks-user", "+@all", "~" + argv[p], *others)
            u2 = login(server, "ks-user")
            assert u2.call("MULTI") == "OK"
            assert u2.call(*argv) == "QUEUED", (name, argv)
            user(admin, "ks-user", "+@all", *others)
            got = u2.call("EXEC")
            assert got == [RespError(EXEC_CHANGED % WHY_KEY)], (name, argv, got)
            assert snapshot(admin) == before, (name, argv, p)
            u.close()
            u2.close()
            denied += 1
        # the example is a real invocation: allowed every key, it runs
        setup_keys(admin)
        user(admin, "ks-user", "+@all", *["~" + argv[q] for q in pos])
        u = login(server, "ks-user")
        r = u.call_raw(*argv)
        want = b"-" + RUNTIME_ERROR[name].encode() if name in RUNTIME_ERROR else None
        assert r.startswith(want) if want else not r.startswith(b"-"), (name, argv, r)
        u.close()
    assert denied >= 55, denied


# ---------------------------------------------------------------------------
# COMMAND INFO's keys and GETKEYSANDFLAGS, as Redis 7.0 sends them
# ---------------------------------------------------------------------------

def spec(flags, begin, find, notes=None):
    out = []
    if notes:
        out += [b"notes", notes]
    return out + [b"flags", flags, b"begin_search", begin, b"find_keys", find]


def index(i):
    return [b"type", b"index", b"spec", [b"index", i]]


def keyword(word, start):
    return [b"type", b"keyword", b"spec", [b"keyword", word, b"startfrom", start]]


def rng(last, step, limit):
    return [b"type", b"range", b"spec", [b"lastkey", last, b"keystep", step, b"limit", limit]]


# name: (first, last, step, movablekeys, key specs), copied from Redis 7.0's COMMAND INFO
INFO = {
    "xread": (0, 0, 0, True, [spec(["RO", "access"], keyword(b"STREAMS", 1), rng(-1, 1, 2))]),
    "xreadgroup": (0, 0, 0, True,
                   [spec(["RO", "access"], keyword(b"STREAMS", 4), rng(-1, 1, 2))]),
    "xadd": (1, 1, 1, False, [spec(["RW", "update"], index(1), rng(0, 1, 0),
                                   b"UPDATE instead of INSERT because of the optional trimming "
                                   b"feature")]),
    "copy": (1, 2, 1, False, [spec(["RO", "access"], index(1), rng(0, 1, 0)),
                              spec(["OW", "update"], index(2), rng(0, 1, 0))]),
    "rename": (1, 2, 1, False, [spec(["RW", "access", "delete"], index(1), rng(0, 1, 0)),
                                spec(["OW", "update"], index(2), rng(0, 1, 0))]),
    "del": (1, -1, 1, False, [spec(["RM", "delete"], index(1), rng(-1, 1, 0))]),
    "xgroup|create": (2, 2, 1, False, [spec(["RW", "insert"], index(2), rng(0, 1, 0))]),
    "spublish": (1, 1, 1, False, [spec(["not_key"], index(1), rng(0, 1, 0))]),
    "ssubscribe": (1, -1, 1, False, [spec(["not_key"], index(1), rng(-1, 1, 0))]),
    "ping": (0, 0, 0, False, []),
}


def test_command_info_keys_as_redis(server):
    """first, last, step derived from the key specs, movablekeys, and the key specs element
    in Redis 7.0's shape (RESP2: maps as flat arrays)."""
    c = server.raw()
    for name, (first, last, step, movable, specs) in INFO.items():
        row = c.call("COMMAND", "INFO", name)[0]
        assert row[3:6] == [first, last, step], (name, row[3:6])
        assert ("movablekeys" in row[2]) == movable, (name, row[2])
        assert row[8] == specs, (name, row[8])


def test_getkeysandflags(server):
    c = server.raw()
    assert c.call("COMMAND", "GETKEYSANDFLAGS", "COPY", "a", "b") == [
        [b"a", ["RO", "access"]], [b"b", ["OW", "update"]]]
    assert c.call("COMMAND", "GETKEYSANDFLAGS", "XREADGROUP", "GROUP", "g", "c", "STREAMS",
                  "a", "b", ">", ">") == [[b"a", ["RO", "access"]], [b"b", ["RO", "access"]]]
    assert c.call("COMMAND", "GETKEYSANDFLAGS", "DEL", "a") == [[b"a", ["RM", "delete"]]]
    errors = [
        (["NOSUCH", "a"], "ERR Invalid command specified"),
        (["SPUBLISH", "ch", "m"], "ERR The command has no key arguments"),
        (["XREAD", "STREAMS", "a"], "ERR Invalid number of arguments specified for command"),
        (["XREAD", "COUNT", "1", "STREAMS"], "ERR Invalid arguments specified for command"),
        (["GET"] if not server.is_echd else ["PING"],
         "ERR wrong number of arguments for 'command|getkeysandflags' command"),
    ]
    for argv, err in errors:
        assert c.err("COMMAND", "GETKEYSANDFLAGS", *argv) == err, argv
    c.call("HELLO", "3")
    assert c.call("COMMAND", "GETKEYSANDFLAGS", "COPY", "a", "b") == [
        [b"a", RSet(["RO", "access"])], [b"b", RSet(["OW", "update"])]]
