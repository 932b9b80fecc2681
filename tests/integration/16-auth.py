"""Authentication and authorisation: requirepass, AUTH, HELLO AUTH, NOAUTH, ACL users (key
patterns and categories for every stream and group command), ACL SETUSER/DELUSER/LIST/USERS/
WHOAMI/CAT/SAVE/LOAD with an aclfile, failed attempts in INFO and the log, protected mode;
auth-timeout, and maxclients connections that never log in not keeping clients out.

The module's own server has no password (the harness' PING and FLUSHALL need that); every test
that needs a password or users starts its own server (AuthServer, below: its readiness check
takes NOAUTH for an answer) so that no user or password leaks from one test to the next.

Redis 7.0, the oracle on this machine, words a few errors differently from Redis 7.2+, whose
words echd follows; those tests check 7.2's words on echd and 7.0's on redis-server (see
Words below), so that the decisions (allowed, denied, which error) are checked on both:
    NOPERM (command)  7.0 "NOPERM this user has no permissions to run the '<cmd>' command"
                      7.2 "NOPERM User <user> has no permissions to run the '<cmd>' command"
    NOPERM (key)      7.0 "NOPERM this user has no permissions to access one of the keys used
                      as arguments"; 7.2 "NOPERM No permissions to access a key"
    HELLO without AUTH: 7.2 adds "<proto>" to "HELLO <proto> AUTH <user> <pass>".
"""

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import echdtest
from echdtest import RespConn, RespError, Closed, echd_only, wait_until

TIMEOUT = 60

NOAUTH = "NOAUTH Authentication required."
WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."
NOPASS_CONFIGURED = ("ERR AUTH <password> called without any password configured for the "
                     "default user. Are you sure your configuration is correct?")
ACL_LOAD_REFUSED = ("WARNING: ACL errors detected, no change to the previously active ACL "
                    "rules was performed")


class Words:
    """The texts that differ between Redis 7.0 and 7.2+ (echd)."""

    def __init__(self, server):
        self.v72 = server.is_echd

    def cmd(self, user, name):
        if self.v72:
            return "NOPERM User %s has no permissions to run the '%s' command" % (user, name)
        return "NOPERM this user has no permissions to run the '%s' command" % name

    def key(self):
        if self.v72:
            return "NOPERM No permissions to access a key"
        return "NOPERM this user has no permissions to access one of the keys used as arguments"

    def hello_noauth(self):
        return ("NOAUTH HELLO must be called with the client already authenticated, otherwise "
                "the HELLO %sAUTH <user> <pass> option can be used to authenticate the client "
                "and select the RESP protocol version at the same time"
                % ("<proto> " if self.v72 else ""))


# ---------------------------------------------------------------------------
# Servers of our own
# ---------------------------------------------------------------------------

class AuthServer(echdtest.Server):
    """A server like the harness' (whose start-up check takes NOAUTH for an answer, as with
    requirepass); bind, if given, replaces 127.0.0.1."""

    def __init__(self, kind, exe, extra=(), bind=None):
        super().__init__(kind, exe, list(extra))
        self.bind = bind

    def args(self):
        a = super().args()
        if self.bind:
            a[a.index("--bind") + 1] = self.bind
        return a

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")


def spawn(server, *extra, bind=None):
    """Start an AuthServer of the module's kind; stopped when the test ends."""
    s = AuthServer(server.kind, server.exe, list(extra), bind=bind)
    server._children.append(s)
    return s.start()


def login(s, user, password):
    c = s.raw()
    assert c.call("AUTH", user, password) == "OK"
    return c


def sha256(pw):
    return hashlib.sha256(pw.encode()).hexdigest()


def info_field(c, section, name):
    for line in c.call("INFO", section).decode().splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1]
    raise AssertionError("no %s in INFO %s" % (name, section))


# ---------------------------------------------------------------------------
# requirepass, AUTH, NOAUTH
# ---------------------------------------------------------------------------

def test_noauth_before_auth(server):
    s = spawn(server, "--requirepass", "pw-noauth-1")
    c = s.raw()
    for cmd in [("XADD", "s", "*", "f", "v"), ("XRANGE", "s", "-", "+"),
                ("XREAD", "STREAMS", "s", "0"),
                ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"),
                ("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"), ("XACK", "s", "g", "1-1"),
                ("XLEN", "s"), ("DEL", "s"), ("PING",), ("SELECT", "0"), ("CONFIG", "GET", "port"),
                ("ACL", "WHOAMI"), ("INFO",), ("CLIENT", "ID"), ("MULTI",), ("FLUSHALL",)]:
        assert c.err(*cmd) == NOAUTH, cmd
    # an unknown command and a wrong arity are reported before NOAUTH, as Redis does
    assert c.err("NOSUCHCMD", "x") == ("ERR unknown command 'NOSUCHCMD', with args beginning "
                                       "with: 'x' ")
    assert c.err("XADD", "s") == "ERR wrong number of arguments for 'xadd' command"
    # the commands a client may run before AUTH: AUTH, HELLO, RESET, QUIT
    assert c.err("HELLO", "2") == Words(s).hello_noauth()
    assert c.call("RESET") == "RESET"
    assert c.err("XLEN", "s") == NOAUTH                  # RESET does not log in
    assert c.call("AUTH", "pw-noauth-1") == "OK"
    assert c.call("XADD", "s", "1-1", "f", "v") == b"1-1"
    assert c.call("ACL", "WHOAMI") == b"default"
    # RESET logs the connection out again when the default user needs a password
    assert c.call("RESET") == "RESET"
    assert c.err("XLEN", "s") == NOAUTH
    q = s.raw()
    assert q.call("QUIT") == "OK"
    assert q.wait_closed()
    # a fresh connection starts unauthenticated; an authenticated one sees the data
    assert s.raw().err("XLEN", "s") == NOAUTH
    assert login(s, "default", "pw-noauth-1").call("XLEN", "s") == 1


def test_wrong_password(server):
    s = spawn(server, "--requirepass", "pw-right-1")
    c = s.raw()
    assert c.err("AUTH", "pw-wrong") == WRONGPASS
    assert c.err("AUTH", "default", "pw-wrong") == WRONGPASS
    assert c.err("AUTH", "nosuchuser", "pw-right-1") == WRONGPASS
    assert c.err("XLEN", "s") == NOAUTH
    assert c.call("AUTH", "pw-right-1") == "OK"
    assert c.call("XLEN", "s") == 0
    # a failed AUTH later does not log the connection out
    assert c.err("AUTH", "pw-wrong") == WRONGPASS
    assert c.call("XLEN", "s") == 0
    assert c.call("ACL", "WHOAMI") == b"default"
    assert c.err("AUTH", "a", "b", "c") == "ERR syntax error"
    # requirepass changed at run time: new logins need the new one, this one stays in
    assert c.call("CONFIG", "SET", "requirepass", "pw-right-2") == "OK"
    assert s.raw().err("AUTH", "pw-right-1") == WRONGPASS
    assert login(s, "default", "pw-right-2").call("PING") == "PONG"
    assert c.call("PING") == "PONG"
    # and removed: new connections are logged in from the start
    assert c.call("CONFIG", "SET", "requirepass", "") == "OK"
    assert s.raw().call("XLEN", "s") == 0


@echd_only("auth-timeout is echd's: Redis gives a login no deadline")
@echdtest.timeout(60)
def test_auth_timeout_closes_connections_not_logged_in(server):
    """With a password, a connection not logged in auth-timeout seconds after it was accepted
    is closed: one that says nothing, one that sends an AUTH a byte at a time (the time counts
    from accept, not from the last byte), one that tried a wrong password and one answered
    NOAUTH. A logged-in connection may then be idle as long as it likes, also once a RESET
    has logged it out; without a password (nothing to log in to) a silent connection stays."""
    pw = "pw-deadline-" + "x" * 40
    s = spawn(server, "--requirepass", pw, "--auth-timeout", "1", "--loglevel", "verbose")
    inside = login(s, "default", pw)
    logged_out = login(s, "default", pw)
    assert logged_out.call("RESET") == "RESET"     # logged in once: no deadline again
    auth = echdtest.encode_command("AUTH", pw)
    sent = [0]

    def one_byte(sock):
        if sent[0] < len(auth):
            sock.send(auth[sent[0]:sent[0] + 1])
            sent[0] += 1
    silent = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    dribbler = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    wrong = s.raw(plain=True)
    assert wrong.err("AUTH", "pw-wrong") == WRONGPASS
    noauth = s.raw(plain=True)
    assert noauth.err("PING") == NOAUTH
    try:
        closed = echdtest.watch_closed([(silent, None), (dribbler, one_byte),
                                        (wrong.sock, None), (noauth.sock, None)], 8)
    finally:
        silent.close()
        dribbler.close()
    assert None not in closed, "open 8 s after accept with auth-timeout 1: %s" % [
        name for name, t in zip(("silent", "dribbler", "wrong", "noauth"), closed) if t is None]
    assert min(closed) >= 0.6, closed
    assert sent[0] < len(auth), "the AUTH was sent whole before the close"
    wait_until(lambda: s.log_text().count("not authenticated within 1s") >= 4,
               what="the closes logged")
    assert info_field(inside, "clients", "unauthenticated_clients") == "0"
    time.sleep(1.2)       # longer than the timeout, logged in
    assert inside.call("PING") == "PONG"
    assert logged_out.err("PING") == NOAUTH
    assert login(s, "default", pw).call("PING") == "PONG"
    # no password: connections are logged in from the start, and nothing is due
    free = spawn(server, "--auth-timeout", "1")
    quiet = socket.create_connection(("127.0.0.1", free.port), timeout=10)
    try:
        assert echdtest.watch_closed([(quiet, None)], 2.5) == [None]
        quiet.settimeout(10)
        quiet.sendall(b"PING\r\n")
        assert quiet.recv(100) == b"+PONG\r\n"
    finally:
        quiet.close()


def connected_clients(c):
    return int(info_field(c, "clients", "connected_clients"))


@echd_only("Redis refuses a new connection at maxclients, whoever holds the slots")
@echdtest.timeout(60)
def test_unauthenticated_flood_does_not_lock_out_logins(server):
    """maxclients connections that never log in (silent, or half an AUTH) do not keep
    clients with the password out: at maxclients a new connection closes the oldest one not
    logged in, never a logged-in one; only when every slot is logged in is a new connection
    refused."""
    n, pw = 10, "pw-flood-1"
    s = spawn(server, "--requirepass", pw, "--maxclients", str(n))
    inside = [login(s, "default", pw) for _ in range(3)]
    # the start-up check's connection may not be gone yet
    wait_until(lambda: connected_clients(inside[0]) == 3, what="3 clients connected")
    attackers = []
    try:
        for i in range(n):
            a = socket.create_connection(("127.0.0.1", s.port), timeout=10)
            if i % 3 == 0:
                a.sendall(b"*2\r\n$4\r\nAUTH\r\n$10\r\npw-")
            attackers.append(a)
        inside.append(login(s, "default", pw))
        # 7 slots were free: the 4 oldest made room for the 3 newest and the login
        wait_until(lambda: not any(echdtest.sock_open(a) for a in attackers[:4]),
                   what="the 4 oldest connections not logged in closed")
        assert all(echdtest.sock_open(a) for a in attackers[4:])
        assert info_field(inside[0], "clients", "unauthenticated_clients") == "6"
        assert connected_clients(inside[0]) == n
        while len(inside) < n:
            inside.append(login(s, "default", pw))
        wait_until(lambda: not any(echdtest.sock_open(a) for a in attackers),
                   what="every connection not logged in closed to make room")
        for c in inside:
            assert c.call("PING") == "PONG"
        assert info_field(inside[0], "clients", "unauthenticated_clients") == "0"
        assert s.raw().read() == RespError("ERR max number of clients reached")
    finally:
        for a in attackers:
            a.close()


def test_auth_without_password_configured(server):
    c = server.raw()
    assert c.err("AUTH", "anything") == NOPASS_CONFIGURED
    # naming the user: a nopass user takes any password
    assert c.call("AUTH", "default", "anything") == "OK"
    assert c.call("ACL", "WHOAMI") == b"default"
    assert c.call("CONFIG", "GET", "requirepass") == [b"requirepass", b""]


def test_hello_auth(server):
    s = spawn(server, "--requirepass", "pw-hello-1")
    w = Words(s)
    c = s.raw()
    assert c.err("HELLO", "3") == w.hello_noauth()
    assert c.err("HELLO", "3", "AUTH", "default", "pw-wrong") == WRONGPASS
    assert c.err("HELLO", "3", "AUTH", "default") == "ERR Syntax error in HELLO option 'AUTH'"
    assert c.err("XLEN", "s") == NOAUTH
    r = c.call("HELLO", "3", "AUTH", "default", "pw-hello-1")
    assert isinstance(r, dict) and r[b"proto"] == 3, r
    assert c.call("XADD", "s", "1-1", "f", "v") == b"1-1"
    assert c.call("XRANGE", "s", "-", "+") == [[b"1-1", [b"f", b"v"]]]
    # HELLO once authenticated needs no AUTH
    assert c.call("HELLO", "2")[4:6] == [b"proto", 2]

    # HELLO AUTH with an ACL user, RESP2
    c.call("ACL", "SETUSER", "alice", "on", ">pw-alice", "~*", "+@all")
    a = s.raw()
    r = a.call("HELLO", "2", "AUTH", "alice", "pw-alice")
    assert r[4:6] == [b"proto", 2], r
    assert a.call("ACL", "WHOAMI") == b"alice"
    assert s.raw().err("HELLO", "2", "AUTH", "alice", "pw-wrong") == WRONGPASS


# ---------------------------------------------------------------------------
# ACL: key patterns and categories for each stream and group command
# ---------------------------------------------------------------------------

# (name in NOPERM, category: "read" or "write", argv for key K): every stream and group
# command. Each runs after the ones above it on the same key (setup: entry 1-1, group g).
STREAM_COMMANDS = [
    ("xadd", "write", lambda k: ["XADD", k, "2-1", "f", "v"]),
    ("xrange", "read", lambda k: ["XRANGE", k, "-", "+"]),
    ("xread", "read", lambda k: ["XREAD", "COUNT", "1", "STREAMS", k, "0"]),
    ("xreadgroup", "write", lambda k: ["XREADGROUP", "GROUP", "g", "c1", "STREAMS", k, ">"]),
    ("xpending", "read", lambda k: ["XPENDING", k, "g"]),
    ("xclaim", "write", lambda k: ["XCLAIM", k, "g", "c2", "0", "1-1"]),
    ("xautoclaim", "write", lambda k: ["XAUTOCLAIM", k, "g", "c3", "0", "0-0"]),
    ("xack", "write", lambda k: ["XACK", k, "g", "1-1"]),
    ("xgroup|create", "write", lambda k: ["XGROUP", "CREATE", k, "g2", "$"]),
    ("xinfo|stream", "read", lambda k: ["XINFO", "STREAM", k]),
    ("xtrim", "write", lambda k: ["XTRIM", k, "MAXLEN", "100"]),
    ("xdel", "write", lambda k: ["XDEL", k, "9-9"]),
    ("del", "write", lambda k: ["DEL", k]),
]


def acl_setup(s):
    admin = s.raw()
    for k in ("jobs:a", "other:a"):
        admin.call("XADD", k, "1-1", "f", "v")
        admin.call("XGROUP", "CREATE", k, "g", "0")
    admin.call("ACL", "SETUSER", "worker", "on", ">pw-worker", "~jobs:*", "+@read", "+@write",
               "+@stream", "-@admin")
    admin.call("ACL", "SETUSER", "reader", "on", ">pw-reader", "~jobs:*", "+@read")
    return admin


def run_matrix(conn, user, key, expect, words, problems):
    """Run every stream command on key; expect(name, category) says 'ok', 'cmd' or 'key'."""
    for name, cat, argv in STREAM_COMMANDS:
        want = expect(name, cat)
        conn.send(*argv(key))
        r = conn.read()
        if want == "ok":
            if isinstance(r, RespError):
                problems.append("%s %s on %s: expected a reply, got %r" % (user, name, key, r))
        else:
            text = words.cmd(user, name) if want == "cmd" else words.key()
            if r != RespError(text):
                problems.append("%s %s on %s: expected -%s, got %r" % (user, name, key, text, r))


def test_acl_stream_commands_keys_and_categories(server):
    s = spawn(server)
    words = Words(s)
    admin = acl_setup(s)
    problems = []

    # worker: ~jobs:* +@read +@write +@stream -@admin. Every stream command on jobs:*, none
    # elsewhere (the key check), and no CONFIG.
    w = login(s, "worker", "pw-worker")
    run_matrix(w, "worker", "other:a", lambda n, c: "key", words, problems)
    run_matrix(w, "worker", "jobs:a", lambda n, c: "ok", words, problems)
    # several keys: one forbidden key refuses the whole command
    for argv in (["XREAD", "STREAMS", "jobs:b", "other:a", "0", "0"],
                 ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "jobs:b", "other:a", ">", ">"],
                 ["DEL", "jobs:b", "other:a"]):
        r = w.err(*argv)
        if r != words.key():
            problems.append("worker %s: expected -%s, got %r" % (argv, words.key(), r))
    r = w.err("CONFIG", "GET", "port")
    if r != words.cmd("worker", "config|get"):
        problems.append("worker CONFIG GET: got %r" % r)

    # reader: ~jobs:* +@read. Read commands on jobs:* only; write commands refused as
    # commands whatever the key (the command check comes first).
    admin.call("XADD", "jobs:a", "1-1", "f", "v")
    admin.call("XGROUP", "CREATE", "jobs:a", "g", "0")
    r_ = login(s, "reader", "pw-reader")
    run_matrix(r_, "reader", "jobs:a", lambda n, c: "ok" if c == "read" else "cmd", words,
               problems)
    run_matrix(r_, "reader", "other:a", lambda n, c: "key" if c == "read" else "cmd", words,
               problems)

    # nothing refused changed anything
    assert admin.call("XLEN", "other:a") == 1
    assert admin.call("XRANGE", "other:a", "-", "+") == [[b"1-1", [b"f", b"v"]]]
    assert admin.call("XPENDING", "other:a", "g")[0] == 0
    assert problems == [], "\n".join(problems)


def test_acl_noperm_names_subcommands(server):
    """Redis names a container's subcommand in NOPERM: 'config|get', 'xgroup|create'."""
    s = spawn(server)
    words = Words(s)
    admin = s.raw()
    admin.call("ACL", "SETUSER", "limited", "on", ">pw-l", "~*", "+xadd", "+xlen")
    c = login(s, "limited", "pw-l")
    assert c.err("CONFIG", "GET", "port") == words.cmd("limited", "config|get")
    assert c.err("CONFIG", "SET", "timeout", "0") == words.cmd("limited", "config|set")
    assert c.err("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM") == words.cmd("limited",
                                                                            "xgroup|create")
    assert c.err("XINFO", "STREAM", "s") == words.cmd("limited", "xinfo|stream")
    assert c.err("ACL", "SETUSER", "x") == words.cmd("limited", "acl|setuser")
    assert c.err("XRANGE", "s", "-", "+") == words.cmd("limited", "xrange")


def test_acl_admin_category(server):
    s = spawn(server)
    words = Words(s)
    admin = s.raw()
    admin.call("ACL", "SETUSER", "ops", "on", ">pw-ops", "~*", "+@all", "-@admin")
    c = login(s, "ops", "pw-ops")
    # refused (the exact words, 'config|get', are test_acl_noperm_names_subcommands')
    for argv in (("CONFIG", "GET", "port"), ("CONFIG", "SET", "requirepass", "x"),
                 ("ACL", "SETUSER", "ops", "+@admin"), ("ACL", "LIST"), ("ACL", "SAVE")):
        e = c.err(*argv)
        assert e.startswith("NOPERM ") and "permissions to run the '%s" % argv[0].lower() in e, \
            (argv, e)
    assert c.call("XADD", "s", "1-1", "f", "v") == b"1-1"
    assert c.call("XLEN", "s") == 1
    assert c.call("DEL", "s") == 1
    assert admin.call("CONFIG", "GET", "requirepass") == [b"requirepass", b""]
    assert admin.call("ACL", "USERS") == [b"default", b"ops"]
    # +@admin back: allowed at once on the logged-in connection
    admin.call("ACL", "SETUSER", "ops", "+@admin")
    assert c.call("CONFIG", "GET", "timeout") == [b"timeout", b"0"]
    # and a single command taken away again
    admin.call("ACL", "SETUSER", "ops", "-xadd")
    assert c.err("XADD", "s", "1-1", "f", "v") == words.cmd("ops", "xadd")


def test_acl_whoami_is_not_admin(server):
    """ACL WHOAMI and ACL CAT are not @admin in Redis: a -@admin user may ask who it is."""
    s = spawn(server)
    s.raw().call("ACL", "SETUSER", "ops", "on", ">pw-ops", "~*", "+@all", "-@admin")
    c = login(s, "ops", "pw-ops")
    assert c.call("ACL", "WHOAMI") == b"ops"
    assert b"stream" in c.call("ACL", "CAT")


def test_acl_connection_commands_always_allowed(server):
    """AUTH, HELLO, RESET and QUIT are never refused by the rules (Redis' no-auth flag)."""
    s = spawn(server, "--requirepass", "pw-conn-1")
    words = Words(s)
    admin = login(s, "default", "pw-conn-1")
    admin.call("ACL", "SETUSER", "narrow", "on", ">pw-n", "~*", "+xlen")
    c = login(s, "narrow", "pw-n")
    assert c.call("XLEN", "s") == 0
    assert c.err("PING") == words.cmd("narrow", "ping")
    assert c.call("HELLO", "2")[4:6] == [b"proto", 2]
    assert c.call("AUTH", "narrow", "pw-n") == "OK"
    assert c.call("RESET") == "RESET"
    assert c.err("XLEN", "s") == NOAUTH          # RESET: back to the default user, who needs AUTH
    assert c.call("AUTH", "narrow", "pw-n") == "OK"
    assert c.call("AUTH", "pw-conn-1") == "OK"   # a narrow user may log in as another
    assert c.call("PING") == "PONG"
    q = login(s, "narrow", "pw-n")
    assert q.call("QUIT") == "OK"
    assert q.wait_closed()


def test_acl_user_passwords_and_state(server):
    s = spawn(server)
    admin = s.raw()
    assert admin.call("ACL", "SETUSER", "alice", "on", ">pw-a1", ">pw-a2", "~*", "+@all") == "OK"
    assert login(s, "alice", "pw-a1") and login(s, "alice", "pw-a2")
    admin.call("ACL", "SETUSER", "alice", "<pw-a1")
    assert s.raw().err("AUTH", "alice", "pw-a1") == WRONGPASS
    assert login(s, "alice", "pw-a2")
    admin.call("ACL", "SETUSER", "alice", "#" + sha256("pw-hashed"))
    assert login(s, "alice", "pw-hashed")
    logged_in = s.raw()
    assert logged_in.call("AUTH", "alice", "pw-a2") == "OK"
    admin.call("ACL", "SETUSER", "alice", "off")
    assert s.raw().err("AUTH", "alice", "pw-a2") == WRONGPASS       # disabled
    # ...for new logins: a connection already logged in goes on, as in Redis
    assert logged_in.call("PING") == "PONG"
    assert isinstance(logged_in.call("XADD", "off-user", "*", "f", "v"), bytes)
    assert logged_in.call("ACL", "WHOAMI") == b"alice"
    admin.call("ACL", "SETUSER", "alice", "on", "resetpass")
    assert s.raw().err("AUTH", "alice", "pw-a2") == WRONGPASS       # no password at all
    admin.call("ACL", "SETUSER", "alice", "nopass")
    assert login(s, "alice", "anything")
    # a bad rule changes nothing, and does not create the user
    assert admin.err("ACL", "SETUSER", "alice", "off", "bogus") == (
        "ERR Error in ACL SETUSER modifier 'bogus': Syntax error")
    assert login(s, "alice", "anything2")
    assert admin.err("ACL", "SETUSER", "bob", "on", "+@nosuch") == (
        "ERR Error in ACL SETUSER modifier '+@nosuch': Unknown command or category name in ACL")
    assert admin.err("ACL", "SETUSER", "bob", "+nosuchcmd") == (
        "ERR Error in ACL SETUSER modifier '+nosuchcmd': Unknown command or category name in "
        "ACL")
    assert admin.err("ACL", "SETUSER", "bob", "#abc") == (
        "ERR Error in ACL SETUSER modifier '#abc': The password hash must be exactly 64 "
        "characters and contain only lowercase hexadecimal characters")
    assert admin.call("ACL", "USERS") == [b"alice", b"default"]


def test_acl_password_hashes(server):
    """#<hash> and !<hash> add and remove a hash as <password and >password do; removing a
    password the user does not have is an error, as is a hash not in lowercase hex."""
    s = spawn(server)
    admin = s.raw()
    h = sha256("pw-h1")
    gone = "The password you are trying to remove from the user does not exist"
    admin.call("ACL", "SETUSER", "hal", "on", "~*", "+@all", ">pw-h1", "#" + h, ">pw-h2")
    line = [x for x in admin.call("ACL", "LIST") if x.startswith(b"user hal ")][0].decode()
    assert line.count("#") == 2 and line.count(h) == 1, line    # one hash, not two
    assert login(s, "hal", "pw-h1") and login(s, "hal", "pw-h2")
    assert admin.call("ACL", "SETUSER", "hal", "!" + h) == "OK"
    assert s.raw().err("AUTH", "hal", "pw-h1") == WRONGPASS
    assert login(s, "hal", "pw-h2")
    assert admin.err("ACL", "SETUSER", "hal", "!" + h) == (
        "ERR Error in ACL SETUSER modifier '!%s': %s" % (h, gone))
    assert admin.err("ACL", "SETUSER", "hal", "<pw-h1") == (
        "ERR Error in ACL SETUSER modifier '<pw-h1': %s" % gone)
    for bad in ("!" + h.upper(), "#" + h.upper(), "!abc"):
        assert admin.err("ACL", "SETUSER", "hal", bad) == (
            "ERR Error in ACL SETUSER modifier '%s': The password hash must be exactly 64 "
            "characters and contain only lowercase hexadecimal characters" % bad)
    assert admin.call("ACL", "SETUSER", "hal", "<pw-h2") == "OK"
    assert s.raw().err("AUTH", "hal", "pw-h2") == WRONGPASS


def test_acl_whoami_users_list(server):
    s = spawn(server)
    admin = s.raw()
    assert admin.call("ACL", "WHOAMI") == b"default"
    admin.call("ACL", "SETUSER", "zed", "on", ">pw-z", "~jobs:*", "+@read")
    admin.call("ACL", "SETUSER", "bob")
    admin.call("ACL", "SETUSER", "carol", "on", "nopass", "~a:*", "~b:*", "+@all", "-@admin")
    assert admin.call("ACL", "USERS") == [b"bob", b"carol", b"default", b"zed"]
    lines = [x.decode() for x in admin.call("ACL", "LIST")]
    assert len(lines) == 4, lines
    assert lines[0] == "user bob off resetchannels -@all", lines
    assert lines[1] == "user carol on nopass ~a:* ~b:* resetchannels +@all -@admin", lines
    assert lines[2].startswith("user default on nopass ~* ") and lines[2].endswith(" +@all"), \
        lines
    assert lines[3] == ("user zed on #%s ~jobs:* resetchannels -@all +@read" % sha256("pw-z")), \
        lines
    admin.call("ACL", "SETUSER", "dan", "on", ">pw-d", "~*", "+@all")
    d = login(s, "dan", "pw-d")
    assert d.call("ACL", "WHOAMI") == b"dan"
    assert admin.call("ACL", "WHOAMI") == b"default"
    assert s.raw().call("ACL", "WHOAMI") == b"default"       # logged in from the start
    assert d.call("AUTH", "default", "x") == "OK"               # the default user is nopass
    assert d.call("ACL", "WHOAMI") == b"default"


def test_acl_deluser(server):
    s = spawn(server)
    admin = s.raw()
    assert admin.err("ACL", "DELUSER", "default") == "ERR The 'default' user cannot be removed"
    admin.call("ACL", "SETUSER", "alice", "on", ">pw-a", "~*", "+@all")
    admin.call("ACL", "SETUSER", "bob", "on", ">pw-b", "~*", "+@all")
    admin.call("ACL", "SETUSER", "carol", "on", ">pw-c", "~*", "+@all")
    a1, a2 = login(s, "alice", "pw-a"), login(s, "alice", "pw-a")
    b = login(s, "bob", "pw-b")
    a1.send("XREAD", "BLOCK", "0", "STREAMS", "s", "$")        # even while blocked
    assert admin.call("ACL", "DELUSER", "alice", "nosuch") == 1
    assert a1.wait_closed(), "a connection of a deleted user was not closed"
    assert a2.wait_closed(), "a connection of a deleted user was not closed"
    assert b.call("PING") == "PONG"
    assert s.raw().err("AUTH", "alice", "pw-a") == WRONGPASS
    assert admin.call("ACL", "DELUSER", "bob", "carol") == 2
    assert b.wait_closed()
    assert admin.call("ACL", "DELUSER", "nosuch") == 0
    assert admin.call("ACL", "USERS") == [b"default"]
    assert admin.call("PING") == "PONG"
    # a user that deletes itself hears how many were deleted, then is closed
    admin.call("ACL", "SETUSER", "dave", "on", ">pw-d", "~*", "+@all")
    d = login(s, "dave", "pw-d")
    assert d.call_raw("ACL", "DELUSER", "dave") == b":1\r\n"
    assert d.wait_closed(), "a connection of a deleted user was not closed"


def test_acl_cat(server):
    c = server.raw()
    cats = {x.decode() for x in c.call("ACL", "CAT")}
    need = {"keyspace", "read", "write", "stream", "admin", "dangerous", "connection", "fast",
            "slow", "blocking", "transaction"}
    assert need <= cats, need - cats

    def names(cat):
        return {x.decode() for x in c.call("ACL", "CAT", cat)}

    stream = names("stream")
    for cmd in ("xadd", "xrange", "xrevrange", "xlen", "xread", "xreadgroup", "xack", "xpending",
                "xclaim", "xautoclaim", "xtrim", "xdel", "xsetid"):
        assert cmd in stream, (cmd, stream)
    # containers: Redis lists the subcommands, echd the command
    assert "xgroup" in stream or "xgroup|create" in stream, stream
    assert "xinfo" in stream or "xinfo|stream" in stream, stream
    assert "del" not in stream and "config" not in stream
    read, write = names("read"), names("write")
    assert {"xrange", "xread", "xpending", "xlen"} <= read and "xadd" not in read
    assert {"xadd", "xreadgroup", "xack", "xclaim", "xautoclaim", "xtrim", "xdel",
            "del"} <= write and "xrange" not in write
    assert "xread" in names("blocking") and "xreadgroup" in names("blocking")
    admin = names("admin")
    assert "config" in admin or "config|get" in admin, admin
    assert "xadd" not in admin
    assert c.err("ACL", "CAT", "nosuch") == "ERR Unknown category 'nosuch'"
    assert c.err("ACL", "CAT", "stream", "read") == (
        "ERR unknown subcommand or wrong number of arguments for 'CAT'. Try ACL HELP.")
    assert c.err("ACL", "cat", "stream", "read") == (
        "ERR unknown subcommand or wrong number of arguments for 'cat'. Try ACL HELP.")


# ---------------------------------------------------------------------------
# aclfile: SAVE, restart, LOAD
# ---------------------------------------------------------------------------

def test_acl_save_load_roundtrip(server):
    root = tempfile.mkdtemp(prefix="echd-e2e-acl-")
    try:
        aclfile = os.path.join(root, "users.acl")
        open(aclfile, "w").close()          # redis-server refuses to start without the file
        s = spawn(server, "--aclfile", aclfile)
        admin = s.raw()
        admin.call("ACL", "SETUSER", "worker", "on", ">pw-worker", "~jobs:*", "+@read",
                   "+@write", "+@stream", "-@admin")
        admin.call("ACL", "SETUSER", "reader", "on", ">pw-reader", "~jobs:*", "+@read")
        before = sorted(admin.call("ACL", "LIST"))
        assert admin.call("ACL", "SAVE") == "OK"
        with open(aclfile) as f:
            saved = f.read()
        assert "user worker on #%s ~jobs:*" % sha256("pw-worker") in saved, saved
        assert "pw-worker" not in saved and "pw-reader" not in saved

        # restart with the file: the users are there, with their passwords and rules
        s.restart(kill=signal.SIGTERM)
        admin = s.raw()
        assert admin.call("ACL", "USERS") == [b"default", b"reader", b"worker"]
        after = sorted(admin.call("ACL", "LIST"))
        if s.is_echd:
            assert after == before, (before, after)
        else:   # Redis 7.0 writes the command rules of a loaded user in another (equal) form
            assert [x.split(b" resetchannels")[0] for x in after if b"user default" not in x] \
                == [x.split(b" resetchannels")[0] for x in before if b"user default" not in x]
        w = login(s, "worker", "pw-worker")
        assert w.call("XADD", "jobs:1", "1-1", "f", "v") == b"1-1"
        assert w.err("XADD", "other", "1-1", "f", "v") == Words(s).key()
        r = login(s, "reader", "pw-reader")
        assert r.err("XADD", "jobs:1", "2-1", "f", "v") == Words(s).cmd("reader", "xadd")

        # LOAD after editing the file: a new user, a changed one
        with open(aclfile, "a") as f:
            f.write("user carol on >pw-carol ~carol:* +@stream\n")
        assert admin.call("ACL", "LOAD") == "OK"
        assert admin.call("ACL", "USERS") == [b"carol", b"default", b"reader", b"worker"]
        c = login(s, "carol", "pw-carol")
        assert c.call("XADD", "carol:1", "1-1", "f", "v") == b"1-1"
        assert c.err("XLEN", "jobs:1") == Words(s).key()

        # a bad line: LOAD refused, naming the file and line; the users in force stay
        good = open(aclfile).read()
        nlines = good.count("\n")
        with open(aclfile, "a") as f:
            f.write("user dave on >pw-dave +@nosuch\n")
        assert admin.err("ACL", "LOAD") == (
            "ERR %s:%d: Error in applying operation '+@nosuch': Unknown command or category "
            "name in ACL. %s" % (aclfile, nlines + 1, ACL_LOAD_REFUSED))
        with open(aclfile, "w") as f:
            f.write(good + "this is not a user line\n")
        assert admin.err("ACL", "LOAD") == (
            "ERR %s:%d should start with user keyword followed by the username. %s"
            % (aclfile, nlines + 1, ACL_LOAD_REFUSED))
        assert admin.call("ACL", "USERS") == [b"carol", b"default", b"reader", b"worker"]
        assert s.raw().err("AUTH", "dave", "pw-dave") == WRONGPASS
        assert c.call("XLEN", "carol:1") == 1            # logged-in users go on
        assert login(s, "worker", "pw-worker").call("XLEN", "jobs:1") == 1

        # a user taken out of the file: LOAD drops it and closes its connections
        with open(aclfile, "w") as f:
            f.write("".join(l for l in good.splitlines(True) if not l.startswith("user reader")))
        r = login(s, "reader", "pw-reader")
        assert r.call("XLEN", "jobs:1") == 1
        assert admin.call("ACL", "LOAD") == "OK"
        assert admin.call("ACL", "USERS") == [b"carol", b"default", b"worker"]
        assert r.wait_closed(), "a connection of a user dropped by ACL LOAD was not closed"
        if s.is_echd:
            # echd keeps the connections of users still in the file (Redis 7.0 closes every
            # connection of a user other than default on a successful LOAD)
            assert c.call("XLEN", "carol:1") == 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_aclfile_as_redis_writes_it(server):
    """Redis writes channel rules and sanitize-payload into every aclfile (ACL SAVE of 7.x):
    such a file loads, the words change nothing that exists in echd, and SETUSER takes them."""
    root = tempfile.mkdtemp(prefix="echd-e2e-acl-")
    try:
        aclfile = os.path.join(root, "users.acl")
        with open(aclfile, "w") as f:
            f.write("user default on nopass sanitize-payload ~* &* +@all\n"
                    "user worker on #%s ~jobs:* resetchannels &jobs:* skip-sanitize-payload "
                    "+@read +@write +@stream -@admin\n" % sha256("pw-worker"))
        s = spawn(server, "--aclfile", aclfile)
        admin = s.raw()
        assert admin.call("ACL", "USERS") == [b"default", b"worker"]
        w = login(s, "worker", "pw-worker")
        assert w.call("XADD", "jobs:1", "1-1", "f", "v") == b"1-1"
        assert w.err("XADD", "other", "1-1", "f", "v") == Words(s).key()
        assert admin.call("ACL", "SETUSER", "ch", "on", ">pw-ch", "resetchannels", "&news:*",
                          "sanitize-payload", "~*", "+@all") == "OK"
        assert admin.call("ACL", "SETUSER", "ch", "allchannels") == "OK"
        assert login(s, "ch", "pw-ch").call("XLEN", "jobs:1") == 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_acl_save_load_without_aclfile(server):
    c = server.raw()
    text = ("ERR This Redis instance is not configured to use an ACL file. You may want to "
            "specify users via the ACL SETUSER command and then issue a CONFIG REWRITE "
            "(assuming you have a Redis configuration file set) in order to store users in the "
            "Redis configuration.")
    assert c.err("ACL", "SAVE") == text
    assert c.err("ACL", "LOAD") == text


def test_bad_aclfile_at_startup(server):
    root = tempfile.mkdtemp(prefix="echd-e2e-acl-")
    try:
        aclfile = os.path.join(root, "users.acl")
        with open(aclfile, "w") as f:
            f.write("user ok on >pw ~* +@all\nuser broken on +@nosuch\n")
        cmd = [server.exe, "--port", str(echdtest.free_port()), "--bind", "127.0.0.1",
               "--dir", os.path.join(root, "data"), "--aclfile", aclfile]
        if not server.is_echd:
            cmd += ["--save", "", "--appendonly", "no"]
        os.makedirs(os.path.join(root, "data"))
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise AssertionError("started with a bad aclfile")
        out = out.decode(errors="replace")
        assert p.returncode != 0, out
        if server.is_echd:
            # a configuration error: the status systemd's unit does not restart on
            assert p.returncode == 2, (p.returncode, out)
        assert "%s:2" % aclfile in out, out
    finally:
        shutil.rmtree(root, ignore_errors=True)


@echd_only("echd reloads the aclfile on SIGHUP (Redis does not)")
def test_sighup_reloads_aclfile(server):
    root = tempfile.mkdtemp(prefix="echd-e2e-acl-")
    try:
        aclfile = os.path.join(root, "users.acl")
        with open(aclfile, "w") as f:
            f.write("user alice on >pw-a ~* +@all\n")
        s = spawn(server, "--aclfile", aclfile)
        assert login(s, "alice", "pw-a")
        with open(aclfile, "a") as f:
            f.write("user bob on >pw-b ~* +@all\n")
        s.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: s.raw().call("ACL", "USERS") == [b"alice", b"bob", b"default"],
                   what="SIGHUP to load bob")
        with open(aclfile, "a") as f:
            f.write("nonsense\n")
        s.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "ACL reload refused" in s.log_text(), what="the refusal in the log")
        assert s.raw().call("ACL", "USERS") == [b"alice", b"bob", b"default"]
        assert login(s, "bob", "pw-b")
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------------
# Failed attempts: INFO and the log
# ---------------------------------------------------------------------------

def test_failed_auth_counted_and_logged_without_password(server):
    s = spawn(server)
    admin = s.raw()
    # passwords set at run time so that they are not in the start-up line of the log
    assert admin.call("CONFIG", "SET", "requirepass", "Right-Pw-7431") == "OK"
    admin.call("ACL", "SETUSER", "alice", "on", ">Alice-Pw-2290", "~*", "+@all")
    # the acl_access_denied_* fields of INFO stats came with Redis 7.2 (7.0 has only ACL LOG)
    counts = s.is_echd
    n0 = int(info_field(admin, "stats", "acl_access_denied_auth")) if counts else 0
    c = s.raw()
    assert c.err("AUTH", "Wrong-Attempt-5521") == WRONGPASS
    assert c.err("AUTH", "alice", "Wrong-Attempt-5522") == WRONGPASS
    assert c.err("AUTH", "nobody-such", "Wrong-Attempt-5523") == WRONGPASS
    assert c.err("HELLO", "3", "AUTH", "default", "Wrong-Attempt-5524") == WRONGPASS
    assert c.call("AUTH", "alice", "Alice-Pw-2290") == "OK"
    assert c.call("AUTH", "Right-Pw-7431") == "OK"
    if counts:
        assert int(info_field(admin, "stats", "acl_access_denied_auth")) == n0 + 4
    # NOPERM refusals are counted apart
    admin.call("ACL", "SETUSER", "reader", "on", ">Reader-Pw-1", "~jobs:*", "+@read")
    r = login(s, "reader", "Reader-Pw-1")
    r.err("XADD", "jobs:1", "*", "f", "v")
    r.err("XRANGE", "other", "-", "+")
    if counts:
        assert int(info_field(admin, "stats", "acl_access_denied_cmd")) == 1
        assert int(info_field(admin, "stats", "acl_access_denied_key")) == 1
        assert int(info_field(admin, "stats", "acl_access_denied_auth")) == n0 + 4
        assert admin.call("CONFIG", "RESETSTAT") == "OK"
        assert int(info_field(admin, "stats", "acl_access_denied_auth")) == 0

    time.sleep(0.2)
    log = s.log_text()
    for secret in ("Wrong-Attempt-552", "Right-Pw-7431", "Alice-Pw-2290", "Reader-Pw-1"):
        assert secret not in log, "%r in the server log:\n%s" % (secret, log)
    if s.is_echd:   # Redis keeps these in ACL LOG, not in its log file
        assert "AUTH failed for user 'default'" in log, log
        assert "AUTH failed for user 'alice'" in log, log
        assert "AUTH failed for user 'nobody-such'" in log, log


# ---------------------------------------------------------------------------
# Protected mode
# ---------------------------------------------------------------------------

# A client that is not on the loopback interface: this machine's only other address is on
# its network interface, and test traffic stays on loopback or in network namespaces the test
# makes. So the test runs the server and its clients in a new network namespace (`unshare -n`,
# root) with a second address, 198.18.0.1 (benchmarking range), on its own loopback device:
# a client bound to it is not a loopback client to the server, and nothing leaves the
# namespace. Without unshare (not root, no user namespaces) only the loopback and unix sides
# are tested.
NETNS_PROBE = textwrap.dedent(r'''
    import ctypes, json, os, socket, subprocess, sys, time
    exe, kind, root = sys.argv[1:4]
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["ip", "addr", "add", "198.18.0.1/32", "dev", "lo"], check=True)
    port = 7379
    sock = os.path.join(root, "s.sock")
    cmd = [exe, "--port", str(port), "--bind", "0.0.0.0", "--dir", os.path.join(root, "data"),
           "--unixsocket", sock]
    if kind == "redis":
        cmd += ["--save", "", "--appendonly", "no"]
    os.makedirs(os.path.join(root, "data"), exist_ok=True)
    # the server dies with this probe (PR_SET_PDEATHSIG), even if the probe is killed
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         preexec_fn=lambda: ctypes.CDLL(None).prctl(1, 15))
    out = {}
    def ask(src, data, lines=1):
        if src == "unix":
            s = socket.socket(socket.AF_UNIX); s.settimeout(5); s.connect(sock)
        else:
            s = socket.create_connection(("198.18.0.1" if src != "127.0.0.1" else src, port),
                                         timeout=5, source_address=(src, 0))
        s.sendall(data)
        got = b""
        try:
            while got.count(b"\r\n") < lines or not got.endswith(b"\r\n"):
                chunk = s.recv(65536)
                if not chunk:
                    got += b"<closed>"
                    break
                got += chunk
        finally:
            s.close()
        return got.decode(errors="replace")
    try:
        for _ in range(250):
            try:
                ask("127.0.0.1", b"PING\r\n"); break
            except OSError:
                time.sleep(0.02)
        out["loopback"] = ask("127.0.0.1", b"PING\r\n")
        out["unix"] = ask("unix", b"PING\r\n")
        out["remote"] = ask("198.18.0.1", b"PING\r\n")
        out["config"] = ask("127.0.0.1", b"CONFIG GET protected-mode\r\n", 5)
        ask("127.0.0.1", b"CONFIG SET requirepass pm-Pw-99\r\n")
        out["remote_with_password"] = ask("198.18.0.1", b"PING\r\n")
        out["remote_auth"] = ask("198.18.0.1", b"AUTH pm-Pw-99\r\n")
        out["unset"] = ask("127.0.0.1", b"AUTH pm-Pw-99\r\n*4\r\n$6\r\nCONFIG\r\n$3\r\nSET\r\n"
                         b"$11\r\nrequirepass\r\n$0\r\n\r\n", 2)
        out["remote_again"] = ask("198.18.0.1", b"PING\r\n")
        ask("127.0.0.1", b"CONFIG SET protected-mode no\r\n")
        out["remote_unprotected"] = ask("198.18.0.1", b"PING\r\n")
    finally:
        p.terminate()
        p.wait()
    print(json.dumps(out))
''')


def test_protected_mode(server):
    c = server.raw()
    assert c.call("CONFIG", "GET", "protected-mode") == [b"protected-mode", b"yes"]
    unshare = shutil.which("unshare")
    root = tempfile.mkdtemp(prefix="echd-e2e-pm-")
    try:
        usable = unshare and shutil.which("ip") and subprocess.run(
            [unshare, "-n", "true"], capture_output=True, timeout=10).returncode == 0
        if not usable:
            # the limitation stated above: only loopback and unix clients can be tried
            sock = os.path.join(root, "s.sock")
            s = spawn(server, "--unixsocket", sock)
            assert s.raw().call("PING") == "PONG"
            u = socket.socket(socket.AF_UNIX)
            u.connect(sock)
            u.sendall(b"PING\r\n")
            assert u.recv(100) == b"+PONG\r\n"
            u.close()
            print("# protected mode: no network namespace here; non-loopback side not tested")
            return
        p = subprocess.run([unshare, "-n", sys.executable, "-c", NETNS_PROBE, server.exe,
                            server.kind, root], capture_output=True, text=True, timeout=40)
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert out["loopback"] == "+PONG\r\n", out
    assert out["unix"] == "+PONG\r\n", out
    assert out["remote"].startswith("-DENIED ") and "protected mode" in out["remote"], out
    assert out["remote"].endswith("<closed>") or out["remote"].endswith("\r\n"), out
    assert out["config"] == "*2\r\n$14\r\nprotected-mode\r\n$3\r\nyes\r\n", out
    # with a password, remote clients are served (and must AUTH)
    assert out["remote_with_password"] == "-%s\r\n" % NOAUTH, out
    assert out["remote_auth"] == "+OK\r\n", out
    # the password removed: refused again
    assert out["remote_again"].startswith("-DENIED "), out
    # protected-mode no: served without a password
    assert out["remote_unprotected"] == "+PONG\r\n", out


# ---------------------------------------------------------------------------
# ACL LOG, GETUSER, GENPASS, DRYRUN
# ---------------------------------------------------------------------------

def log_entries(c, *args):
    """ACL LOG as a list of dicts (RESP2 maps are flat lists)."""
    out = []
    for e in c.call("ACL", "LOG", *args):
        d = dict(zip(e[0::2], e[1::2]))
        out.append({k.decode(): (v.decode() if isinstance(v, bytes) else v)
                    for k, v in d.items()})
    return out


def test_acl_log(server):
    """Refused logins, commands and keys, newest first, grouped within a minute; each entry
    names the client (its CLIENT INFO line) and the user."""
    s = spawn(server)
    w = Words(server)
    admin = s.raw()
    admin.call("ACL", "SETUSER", "app", "on", ">pw-app", "~jobs:*", "+@stream", "+@connection",
               "+@transaction")
    assert admin.call("ACL", "LOG") == []
    bad = s.raw()
    assert bad.err("AUTH", "app", "nope") == WRONGPASS
    assert bad.err("auth", "app", "nope") == WRONGPASS          # the command as typed
    app = login(s, "app", "pw-app")
    assert app.call("CLIENT", "SETNAME", "worker-7") == "OK"
    for _ in range(3):
        assert app.err("XADD", "other", "*", "f", "v") == w.key()
    assert app.err("CONFIG", "GET", "maxclients") == w.cmd("app", "config|get")
    assert app.pipeline([("MULTI",), ("XLEN", "secret"), ("DISCARD",)])[1] == RespError(
        w.key())
    log = log_entries(admin)
    want = [("key", "multi", "secret", 1), ("command", "toplevel", "config|get", 1),
            ("key", "toplevel", "other", 3), ("auth", "toplevel", "auth", 1),
            ("auth", "toplevel", "AUTH", 1)]
    assert [(e["reason"], e["context"], e["object"], e["count"]) for e in log] == want, log
    assert all(e["username"] == "app" for e in log)
    assert "name=worker-7" in log[2]["client-info"] and "user=app" in log[2]["client-info"]
    assert 0 <= float(log[0]["age-seconds"]) < 60
    assert len(log_entries(admin, "2")) == 2
    assert log_entries(admin, "-1") == []
    assert admin.err("ACL", "LOG", "x") == "ERR value is not an integer or out of range"
    assert admin.call("ACL", "LOG", "RESET") == "OK"
    assert admin.call("ACL", "LOG") == []
    # a key may hold any byte, NUL included: logged and grouped whole
    for _ in range(2):
        assert app.err("XLEN", b"bin\x00key") == w.key()
    e = log_entries(admin, "1")[0]
    assert (e["reason"], e["object"], e["count"]) == ("key", "bin\x00key", 2), e
    # acllog-max-len keeps the newest
    assert admin.call("CONFIG", "SET", "acllog-max-len", "2") == "OK"
    for k in ("a", "b", "c"):
        assert app.err("XLEN", k) == w.key()
    assert [e["object"] for e in log_entries(admin)] == ["c", "b"]


@echd_only("entry-id and the timestamps are Redis 7.2's fields; Debian's 7.0 has no them")
def test_acl_log_ids_and_times(server):
    s = spawn(server)
    admin = s.raw()
    t0 = int(time.time() * 1000)
    bad = s.raw()
    for _ in range(2):
        assert bad.err("AUTH", "ghost", "x") == WRONGPASS
    assert bad.err("AUTH", "other", "x") == WRONGPASS
    log = log_entries(admin)
    assert [(e["object"], e["username"], e["count"], e["entry-id"]) for e in log] == [
        ("AUTH", "other", 1, 1), ("AUTH", "ghost", 2, 0)]
    ghost = log[1]
    assert t0 <= ghost["timestamp-created"] <= ghost["timestamp-last-updated"] <= \
        time.time() * 1000 + 1
    # ids go on counting after a RESET
    assert admin.call("ACL", "LOG", "RESET") == "OK"
    assert bad.err("AUTH", "ghost", "x") == WRONGPASS
    assert log_entries(admin)[0]["entry-id"] == 2
    # RESP3: a map per entry, age a double
    admin.call("HELLO", "3")
    e = admin.call("ACL", "LOG")[0]
    assert isinstance(e, dict) and isinstance(e[b"age-seconds"], float)


def test_acl_getuser(server):
    s = spawn(server)
    c = s.raw()
    assert c.call("ACL", "GETUSER", "nosuch") is None
    c.call("ACL", "SETUSER", "app", "on", ">pw-app", "~jobs:*", "~audit", "+@read")
    u = dict(zip(*[iter(c.call("ACL", "GETUSER", "app"))] * 2))
    assert u[b"flags"] == [b"on"]
    assert u[b"passwords"] == [sha256("pw-app").encode()]
    assert u[b"keys"] == b"~jobs:* ~audit"
    assert u[b"commands"].split() == [b"-@all", b"+@read"]
    assert u[b"selectors"] == []
    d = dict(zip(*[iter(c.call("ACL", "GETUSER", "default"))] * 2))
    assert d[b"flags"] == [b"on", b"nopass"] and d[b"passwords"] == []
    assert d[b"commands"] == b"+@all" and d[b"keys"] == b"~*"
    assert c.err("ACL", "GETUSER") == "ERR wrong number of arguments for 'acl|getuser' command"


def test_acl_genpass(server):
    c = server.raw()
    a, b = c.call("ACL", "GENPASS"), c.call("ACL", "GENPASS")
    assert len(a) == 64 and int(a, 16) >= 0 and a != b
    for bits, chars in (("1", 1), ("5", 2), ("128", 32), ("4096", 1024)):
        p = c.call("ACL", "GENPASS", bits)
        assert len(p) == chars and all(ch in b"0123456789abcdef" for ch in p), (bits, p)
    why = ("ERR ACL GENPASS argument must be the number of bits for the output password, a "
           "positive number up to 4096")
    for bits in ("0", "-8", "4097"):
        assert c.err("ACL", "GENPASS", bits) == why
    assert c.err("ACL", "GENPASS", "x") == "ERR value is not an integer or out of range"


def test_acl_dryrun(server):
    s = spawn(server)
    c = s.raw()
    c.call("ACL", "SETUSER", "app", "on", ">pw-app", "~jobs:*", "+@stream", "+@connection")
    assert c.call("ACL", "DRYRUN", "app", "XADD", "jobs:1", "*", "f", "v") == "OK"
    assert c.call("ACL", "DRYRUN", "app", "PING") == "OK"
    assert c.err("ACL", "DRYRUN", "nosuch", "PING") == "ERR User 'nosuch' not found"
    assert c.err("ACL", "DRYRUN", "app", "NOSUCHCMD") == "ERR Command 'NOSUCHCMD' not found"
    assert c.err("ACL", "DRYRUN", "app", "CONFIG", "nosub") == "ERR Command 'CONFIG' not found"
    assert c.err("ACL", "DRYRUN", "app", "XADD", "k") == (
        "ERR wrong number of arguments for 'xadd' command")
    assert c.err("ACL", "DRYRUN", "app") == (
        "ERR wrong number of arguments for 'acl|dryrun' command")
    # nothing ran, and nothing was logged
    assert c.call("EXISTS", "jobs:1") == 0 and c.call("ACL", "LOG") == []


@echd_only("Redis 7.2's words for a refusal; Debian's 7.0 words them differently")
def test_acl_dryrun_refusals(server):
    s = spawn(server)
    c = s.raw()
    c.call("ACL", "SETUSER", "app", "on", ">pw-app", "~jobs:*", "+@stream")
    assert c.call("ACL", "DRYRUN", "app", "XADD", "other", "*", "f", "v") == (
        b"No permissions to access the 'other' key")
    assert c.call("ACL", "DRYRUN", "app", "CONFIG", "GET", "x") == (
        b"User app has no permissions to run the 'config|get' command")
    # long names and keys come back whole
    name = "n" * 300
    c.call("ACL", "SETUSER", name, "on", "nopass", "~a*", "+@stream")
    assert c.call("ACL", "DRYRUN", name, "CONFIG", "GET", "x") == (
        "User %s has no permissions to run the 'config|get' command" % name).encode()
    assert c.call("ACL", "DRYRUN", name, "XLEN", "b" * 1000) == (
        "No permissions to access the '%s' key" % ("b" * 1000)).encode()
    assert c.call("ACL", "LOG") == []


def test_acl_long_key_pattern_survives_setuser(server):
    """A key pattern longer than 1 KiB stays whole when the user is changed again (echd
    once rebuilt each pattern in a 1 KiB buffer, read past it and crashed under ASan)."""
    s = spawn(server)
    c = s.raw()
    key = "k" * 2000
    assert c.call("ACL", "SETUSER", "u1", "~" + key, ">pw-u1", "+@stream") == "OK"
    assert c.call("ACL", "SETUSER", "u1", "on") == "OK"
    u = dict(zip(*[iter(c.call("ACL", "GETUSER", "u1"))] * 2))
    assert u[b"keys"] == ("~" + key).encode()
    u1 = login(s, "u1", "pw-u1")
    assert u1.call("XADD", key, "*", "f", "v")
    assert u1.err("XADD", key + "x", "*", "f", "v") == Words(server).key()


def test_acl_xreadgroup_keys_follow_group_and_options(server):
    """The keys of XREADGROUP (and XREAD) are the arguments after the STREAMS that ends the
    options, not after the first argument spelled "streams": a group or a consumer may be
    called that. echd once took the first one, so a user could read another tenant's stream
    by naming a consumer "streams", while its own reads were refused."""
    s = spawn(server)
    words = Words(s)
    admin = s.raw()
    for k in ("jobs:a", "secret", "other"):
        admin.call("XADD", k, "1-1", "f", "v")
        for g in ("streams", "STREAMS", "g2"):
            admin.call("XGROUP", "CREATE", k, g, "0")
    admin.call("ACL", "SETUSER", "jobs", "on", ">pw-jobs", "~jobs:*", "+@all")
    admin.call("ACL", "SETUSER", "jobs2", "on", ">pw-jobs2", "~jobs:*", "~STREAMS", "+@all")
    admin.call("ACL", "SETUSER", "tenant", "on", ">pw-tenant", "~s*", "~app:*", "+@all")

    # a consumer named "streams": the key is other, not "streams"
    t = login(s, "tenant", "pw-tenant")
    argv = ["XREADGROUP", "GROUP", "g2", "streams", "streams", "other", ">"]
    assert t.err(*argv) == words.key()
    assert t.err("XREADGROUP", "NOACK", "COUNT", "1", "GROUP", "g2", "streams", "STREAMS",
                 "other", ">") == words.key()
    assert admin.call("ACL", "DRYRUN", "tenant", *argv) != "OK"

    # group "STREAMS", consumer "jobs:x": the second key, secret, is checked
    j2 = login(s, "jobs2", "pw-jobs2")
    assert j2.err("XRANGE", "secret", "-", "+") == words.key()
    argv = ["XREADGROUP", "GROUP", "STREAMS", "jobs:x", "STREAMS", "jobs:a", "secret", "0", ">"]
    assert j2.err(*argv) == words.key()
    assert admin.call("ACL", "DRYRUN", "jobs2", *argv) != "OK"

    # a group named "streams": its own key is allowed
    j = login(s, "jobs", "pw-jobs")
    argv = ["XREADGROUP", "GROUP", "streams", "c1", "STREAMS", "jobs:a", ">"]
    assert j.call(*argv) == [[b"jobs:a", [[b"1-1", [b"f", b"v"]]]]]
    assert admin.call("ACL", "DRYRUN", "jobs", *argv) == "OK"
    assert j.call("XREAD", "COUNT", "1", "BLOCK", "1", "STREAMS", "jobs:a", "0") == (
        [[b"jobs:a", [[b"1-1", [b"f", b"v"]]]]])

    # nothing of the other tenant's was delivered
    assert admin.call("XPENDING", "other", "g2")[0] == 0
    assert admin.call("XPENDING", "secret", "STREAMS")[0] == 0

def test_acl_object_and_memory_usage_check_the_key(server):
    """OBJECT's and MEMORY USAGE's key is a key: a user limited to ~app:* does not learn
    whether another key exists, or its size."""
    s = spawn(server)
    words = Words(s)
    admin = s.raw()
    admin.call("XADD", "secret", "1-1", "f", "v")
    admin.call("XADD", "app:s", "1-1", "f", "v")
    admin.call("ACL", "SETUSER", "app", "on", ">pw-app", "~app:*", "+@all")
    c = login(s, "app", "pw-app")
    for argv in (["OBJECT", "ENCODING", "secret"], ["OBJECT", "REFCOUNT", "secret"],
                 ["OBJECT", "FREQ", "secret"], ["OBJECT", "ENCODING", "nosuch"],
                 ["MEMORY", "USAGE", "secret"], ["MEMORY", "USAGE", "secret", "SAMPLES", "5"]):
        assert c.err(*argv) == words.key(), argv
        assert admin.call("ACL", "DRYRUN", "app", *argv) != "OK", argv
    assert c.call("OBJECT", "ENCODING", "app:s") == b"stream"
    assert c.call("OBJECT", "REFCOUNT", "app:s") == 1
    assert c.call("MEMORY", "USAGE", "app:s") > 0
    assert c.call("OBJECT", "ENCODING", "app:nosuch") is None
    assert admin.call("ACL", "DRYRUN", "app", "MEMORY", "USAGE", "app:s") == "OK"
    # no keys in HELP
    assert isinstance(c.call("OBJECT", "HELP"), list)
    assert isinstance(c.call("MEMORY", "HELP"), list)


def test_acl_rules_for_subcommands_with_own_permissions(server):
    """+acl|whoami allows that subcommand alone, +acl every ACL subcommand, and -acl|whoami
    takes one back; +@slow covers WHOAMI (it is @slow only), -@admin leaves it."""
    s = spawn(server)
    words = Words(s)
    admin = s.raw()
    admin.call("ACL", "SETUSER", "who", "on", ">pw-who", "~*", "+acl|whoami")
    admin.call("ACL", "SETUSER", "most", "on", ">pw-most", "~*", "+acl", "-acl|whoami")
    admin.call("ACL", "SETUSER", "slow", "on", ">pw-slow", "~*", "+@slow", "-@admin")
    w = login(s, "who", "pw-who")
    assert w.call("ACL", "WHOAMI") == b"who"
    assert w.err("ACL", "CAT") == words.cmd("who", "acl|cat")
    assert w.err("ACL", "LIST") == words.cmd("who", "acl|list")
    m = login(s, "most", "pw-most")
    assert m.err("ACL", "WHOAMI") == words.cmd("most", "acl|whoami")
    assert isinstance(m.call("ACL", "CAT"), list)
    assert m.call("ACL", "USERS")[0] == b"default"
    sl = login(s, "slow", "pw-slow")
    assert sl.call("ACL", "WHOAMI") == b"slow"
    assert sl.err("ACL", "LIST") == words.cmd("slow", "acl|list")
