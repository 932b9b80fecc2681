"""Transactions: MULTI EXEC DISCARD WATCH UNWATCH (and RESET) with Redis 7.4's replies.

Queued commands answer +QUEUED and EXEC answers an array of their replies; an arity error or an
unknown command (or subcommand) while queueing makes EXEC answer EXECABORT and run nothing; a
runtime error inside EXEC fails only that command's element; a WATCHed key touched by anyone
(this client too) before EXEC makes EXEC answer a null array and run nothing; blocking commands
inside MULTI do not block; RESP3; redis-py and redis-cli.

Durability: an acknowledged EXEC survives kill -9 (Redis: run with an AOF fsynced before every
reply, its equivalent promise, so that this test holds for it too).  echd only: EXECs of 40
XADDs each run from several clients while echd is killed with SIGKILL over and over; after
every restart each EXEC is all there or not at all, and every acknowledged one is all there.
"""

import random
import signal
import socket
import threading
import time

import redis

from echdtest import Closed, RespConn, RespError, echd_only, encode_command, fill, timeout

# Redis: an AOF fsynced before every reply, so that the kill -9 test holds for it as well.
REDIS_ARGS = ["--appendonly", "yes", "--appendfsync", "always"]
TIMEOUT = 60

EXECABORT = "EXECABORT Transaction discarded because of previous errors."
NESTED = "ERR MULTI calls can not be nested"
WATCH_IN_MULTI = "ERR WATCH inside MULTI is not allowed"
EXEC_NO_MULTI = "ERR EXEC without MULTI"
DISCARD_NO_MULTI = "ERR DISCARD without MULTI"
ARITY = "ERR wrong number of arguments for '%s' command"
XADD_SMALL = "ERR The ID specified in XADD is equal or smaller than the target stream top item"
BUSYGROUP = "BUSYGROUP Consumer Group name already exists"
NEEDS_KEY = ("ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you "
             "may want to use the MKSTREAM option to create an empty stream automatically.")
SYNTAX = "ERR syntax error"
NOT_INT = "ERR value is not an integer or out of range"


def XRG_NOGROUP(key, group):
    return ("NOGROUP No such key '%s' or consumer group '%s' in XREADGROUP with GROUP option"
            % (key, group))


def e(i, *fv):
    """Entry '<i>-1' as XRANGE returns it (fields default to f v, as fill() writes)."""
    fv = fv or ("f", "v")
    return [("%d-1" % i).encode(), [x.encode() for x in fv]]


def run_multi(c, *commands):
    """MULTI, the commands, EXEC in one pipeline: (replies while queueing, EXEC's reply)."""
    replies = c.pipeline([("MULTI",)] + [tuple(x) for x in commands] + [("EXEC",)])
    assert replies[0] == "OK", replies
    return replies[1:-1], replies[-1]


# ---------------------------------------------------------------------------
# MULTI / EXEC / DISCARD
# ---------------------------------------------------------------------------

def test_multi_exec_replies(server):
    c = server.raw()
    other = server.raw()
    assert c.call_raw("MULTI") == b"+OK\r\n"
    assert c.call_raw("XADD", "s", "1-1", "f", "v") == b"+QUEUED\r\n"
    assert c.call_raw("XADD", "s", "2-1", "a", "b") == b"+QUEUED\r\n"
    assert c.call_raw("XLEN", "s") == b"+QUEUED\r\n"
    assert c.call_raw("XRANGE", "s", "-", "+") == b"+QUEUED\r\n"
    assert c.call_raw("xadd", "t", "5-5", "x", "y") == b"+QUEUED\r\n"
    # nothing ran yet: another client sees nothing
    assert other.call("EXISTS", "s", "t") == 0
    assert c.call_raw("EXEC") == (
        b"*5\r\n$3\r\n1-1\r\n$3\r\n2-1\r\n:2\r\n"
        b"*2\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
        b"*2\r\n$3\r\n2-1\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n"
        b"$3\r\n5-5\r\n")
    assert other.call("XRANGE", "s", "-", "+") == [e(1), e(2, "a", "b")]
    assert other.call("XLEN", "t") == 1
    # the connection is out of MULTI again
    assert c.call("XLEN", "s") == 2
    assert c.err("EXEC") == EXEC_NO_MULTI
    # an empty transaction answers an empty array
    assert c.call("MULTI") == "OK"
    assert c.call_raw("EXEC") == b"*0\r\n"
    # commands that are not queued: a transaction in a single pipeline
    q, r = run_multi(c, ("XADD", "s", "3-1", "f", "v"), ("PING",), ("XLEN", "s"),
                     ("SELECT", "1"), ("XADD", "s", "9-1", "f", "v"), ("SELECT", "0"))
    assert q == ["QUEUED"] * 6
    assert r == [b"3-1", "PONG", 3, "OK", b"9-1", "OK"]
    assert c.call("XLEN", "s") == 3
    c.call("SELECT", "1")
    assert c.call("XRANGE", "s", "-", "+") == [e(9)]


def test_multi_is_per_connection(server):
    a = server.raw()
    b = server.raw()
    assert a.call("MULTI") == "OK"
    assert a.call("XADD", "s", "1-1", "f", "v") == "QUEUED"
    # another connection is not in MULTI: its commands run at once
    assert b.call("XADD", "s", "2-1", "f", "v") == b"2-1"
    assert b.err("EXEC") == EXEC_NO_MULTI
    assert b.err("DISCARD") == DISCARD_NO_MULTI
    # a's XADD of 1-1 now fails at EXEC (the top is 2-1): only that element
    assert a.call("EXEC") == [RespError(XADD_SMALL)]
    assert b.call("XRANGE", "s", "-", "+") == [e(2)]


def test_discard(server):
    c = server.raw()
    fill(c, "s", 1)
    assert c.call("MULTI") == "OK"
    assert c.call("XADD", "s", "2-1", "f", "v") == "QUEUED"
    assert c.call("XGROUP", "CREATE", "s", "g", "0") == "QUEUED"
    assert c.call("XADD", "new", "1-1", "f", "v") == "QUEUED"
    assert c.call_raw("DISCARD") == b"+OK\r\n"
    assert c.call("XRANGE", "s", "-", "+") == [e(1)]
    assert c.call("XINFO", "GROUPS", "s") == []
    assert c.call("EXISTS", "new") == 0
    # out of MULTI
    assert c.err("EXEC") == EXEC_NO_MULTI
    assert c.err("DISCARD") == DISCARD_NO_MULTI
    assert c.call("XADD", "s", "2-1", "f", "v") == b"2-1"
    # DISCARD of a transaction that had a queueing error
    assert c.call("MULTI") == "OK"
    assert c.err("XADD", "s") == ARITY % "xadd"
    assert c.call("DISCARD") == "OK"
    assert c.call("MULTI") == "OK"
    assert c.call("XLEN", "s") == "QUEUED"
    assert c.call("EXEC") == [2]


def test_exec_discard_without_multi(server):
    c = server.raw()
    assert c.call_raw("EXEC") == b"-ERR EXEC without MULTI\r\n"
    assert c.call_raw("DISCARD") == b"-ERR DISCARD without MULTI\r\n"
    assert c.err("exec") == EXEC_NO_MULTI
    assert c.err("discard") == DISCARD_NO_MULTI
    # arity
    assert c.err("MULTI", "x") == ARITY % "multi"
    assert c.err("DISCARD", "x") == ARITY % "discard"
    assert c.err("WATCH") == ARITY % "watch"
    assert c.err("UNWATCH", "x") == ARITY % "unwatch"
    assert c.call("PING") == "PONG"


def test_exec_with_wrong_arity(server):
    """An EXEC rejected before it runs (arity) answers EXECABORT with the reason, and discards
    the transaction (in MULTI or not)."""
    c = server.raw()
    abort = ("EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' "
             "command")
    assert c.err("EXEC", "x") == abort
    assert c.call("MULTI") == "OK"
    assert c.call("XADD", "s", "1-1", "f", "v") == "QUEUED"
    assert c.err("EXEC", "x") == abort
    assert c.err("EXEC") == EXEC_NO_MULTI
    assert c.call("EXISTS", "s") == 0


def test_nested_multi(server):
    c = server.raw()
    assert c.call("MULTI") == "OK"
    assert c.call("XADD", "s", "1-1", "f", "v") == "QUEUED"
    assert c.call_raw("MULTI") == b"-ERR MULTI calls can not be nested\r\n"
    assert c.err("multi") == NESTED
    # the error does not abort the transaction (it is not a queueing error)
    assert c.call("XADD", "s", "2-1", "f", "v") == "QUEUED"
    assert c.call("EXEC") == [b"1-1", b"2-1"]
    assert c.call("XLEN", "s") == 2


# ---------------------------------------------------------------------------
# errors while queueing: EXECABORT
# ---------------------------------------------------------------------------

def test_queueing_errors_abort_exec(server):
    c = server.raw()
    fill(c, "s", 1)
    cases = [
        (("XADD", "s"), ARITY % "xadd"),                          # arity
        (("XADD", "s", "5-1", "f"), ARITY % "xadd"),
        (("XLEN",), ARITY % "xlen"),
        (("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s"), ARITY % "xreadgroup"),
        (("NOSUCHCMD", "a", "b"),
         "ERR unknown command 'NOSUCHCMD', with args beginning with: 'a' 'b' "),
        (("FOO",), "ERR unknown command 'FOO', with args beginning with: "),
    ]
    for bad, msg in cases:
        assert c.call("MULTI") == "OK"
        assert c.call("XADD", "s", "2-1", "f", "v") == "QUEUED"
        assert c.err(*bad) == msg, bad
        # later commands still queue; EXEC answers EXECABORT and runs none of them
        assert c.call("XADD", "t", "1-1", "f", "v") == "QUEUED"
        assert c.call_raw("EXEC") == b"-" + EXECABORT.encode() + b"\r\n"
        assert c.call("XRANGE", "s", "-", "+") == [e(1)], bad
        assert c.call("EXISTS", "t") == 0, bad
        # and the connection is out of MULTI
        assert c.err("EXEC") == EXEC_NO_MULTI
    # a transaction after an aborted one works
    _, r = run_multi(c, ("XADD", "s", "2-1", "f", "v"))
    assert r == [b"2-1"]


def test_queueing_errors_subcommands(server):
    """Subcommands are looked up (and their arity checked) when queued, as commands are."""
    c = server.raw()
    fill(c, "s", 1)
    cases = [
        (("XGROUP", "CREATE", "s"), ARITY % "xgroup|create"),
        (("XGROUP", "FOO"), "ERR unknown subcommand 'FOO'. Try XGROUP HELP."),
        (("XINFO", "FOO"), "ERR unknown subcommand 'FOO'. Try XINFO HELP."),
        (("XINFO", "STREAM"), ARITY % "xinfo|stream"),
        (("CONFIG", "GET"), ARITY % "config|get"),
        (("CONFIG", "SET", "timeout"), ARITY % "config|set"),
        (("CONFIG", "FOO"), "ERR unknown subcommand 'FOO'. Try CONFIG HELP."),
        (("CLIENT", "SETNAME"), ARITY % "client|setname"),
        (("CLIENT", "KILL"), ARITY % "client|kill"),
        (("CLIENT", "FOO"), "ERR unknown subcommand 'FOO'. Try CLIENT HELP."),
        (("COMMAND", "COUNT", "x"), ARITY % "command|count"),
        (("COMMAND", "FOO"), "ERR unknown subcommand 'FOO'. Try COMMAND HELP."),
        (("ACL", "FOO"), "ERR unknown subcommand 'FOO'. Try ACL HELP."),
        (("ACL", "WHOAMI", "x"), ARITY % "acl|whoami"),
        (("ACL", "SETUSER"), ARITY % "acl|setuser"),
        # commands that never run inside a transaction
        (("SAVE",), "ERR Command not allowed inside a transaction"),
        (("SHUTDOWN", "NOSAVE"), "ERR Command not allowed inside a transaction"),
    ]
    for bad, msg in cases:
        assert c.call("MULTI") == "OK"
        assert c.call("XADD", "s", "2-1", "f", "v") == "QUEUED"
        assert c.err(*bad) == msg, bad
        assert c.err("EXEC") == EXECABORT, bad
        assert c.call("XLEN", "s") == 1, bad


def test_queued_syntax_errors_fail_at_exec(server):
    """Arguments are parsed when the command runs: a syntax error found then fails only that
    command, like any runtime error."""
    c = server.raw()
    q, r = run_multi(c, ("XADD", "s", "1-1", "f", "v"),
                     ("XRANGE", "s", "-", "+", "FOO"),
                     ("XADD", "s", "MAXLEN", "x", "*", "f", "v"),
                     ("XADD", "s", "2-1", "f", "v"))
    assert q == ["QUEUED"] * 4
    assert r == [b"1-1", RespError(SYNTAX), RespError(NOT_INT), b"2-1"]
    assert c.call("XRANGE", "s", "-", "+") == [e(1), e(2)]


# ---------------------------------------------------------------------------
# runtime errors inside EXEC
# ---------------------------------------------------------------------------

def test_runtime_errors_fail_only_their_element(server):
    c = server.raw()
    fill(c, "s", 3)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    q, r = run_multi(c,
                     ("XADD", "s", "2-1", "f", "v"),                    # id below the top
                     ("XADD", "s", "4-1", "f", "v"),
                     ("XGROUP", "CREATE", "s", "g", "$"),              # BUSYGROUP
                     ("XGROUP", "CREATE", "s", "g2", "0"),
                     ("XREADGROUP", "GROUP", "nog", "c", "STREAMS", "s", ">"),   # NOGROUP
                     ("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "s", ">"),
                     ("XGROUP", "CREATE", "missing", "g", "0"),        # needs the key
                     ("XADD", "s", "4-1", "f", "v"),                    # equal to the top
                     ("XLEN", "s"))
    assert q == ["QUEUED"] * 9
    assert r == [RespError(XADD_SMALL), b"4-1", RespError(BUSYGROUP), "OK",
                 RespError(XRG_NOGROUP("s", "nog")), [[b"s", [e(1)]]], RespError(NEEDS_KEY),
                 RespError(XADD_SMALL), 4], r
    # the others were applied
    assert c.call("XRANGE", "s", "-", "+") == [e(1), e(2), e(3), e(4)]
    assert sorted(g[1] for g in c.call("XINFO", "GROUPS", "s")) == [b"g", b"g2"]
    assert c.call("XPENDING", "s", "g") == [1, b"1-1", b"1-1", [[b"c", b"1"]]]
    assert c.call("EXISTS", "missing") == 0
    # raw: the error is an element of the array
    c.call("MULTI")
    c.call("XADD", "s", "1-1", "f", "v")
    c.call("XLEN", "s")
    assert c.call_raw("EXEC") == b"*2\r\n-" + XADD_SMALL.encode() + b"\r\n:4\r\n"


def test_exec_mixing_xadd_xreadgroup_xack(server):
    c = server.raw()
    c.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    q, r = run_multi(c,
                     ("XADD", "s", "1-1", "f", "v"),
                     ("XADD", "s", "2-1", "f", "v"),
                     ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"),
                     ("XACK", "s", "g", "1-1"),
                     ("XPENDING", "s", "g"),
                     ("XADD", "s", "3-1", "f", "v"),
                     ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "0"),
                     ("XACK", "s", "g", "2-1", "3-1", "1-1"),
                     ("XREADGROUP", "GROUP", "g", "d", "STREAMS", "s", ">"),
                     ("XINFO", "GROUPS", "s"))
    assert q == ["QUEUED"] * 10
    assert r[:9] == [b"1-1", b"2-1", [[b"s", [e(1), e(2)]]], 1,
                     [1, b"2-1", b"2-1", [[b"c", b"1"]]], b"3-1", [[b"s", [e(2)]]], 1,
                     [[b"s", [e(3)]]]], r
    g = dict(zip(r[9][0][0::2], r[9][0][1::2]))
    assert (g[b"name"], g[b"consumers"], g[b"pending"], g[b"last-delivered-id"],
            g[b"entries-read"], g[b"lag"]) == (b"g", 2, 1, b"3-1", 3, 0), g
    # the state after EXEC is what the replies said
    assert c.call("XPENDING", "s", "g") == [1, b"3-1", b"3-1", [[b"d", b"1"]]]
    assert c.call("XLEN", "s") == 3


def test_blocking_commands_inside_multi_do_not_block(server):
    c = server.raw()
    c.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    c.call("XGROUP", "CREATE", "empty", "g", "$", "MKSTREAM")
    t0 = time.monotonic()
    q, r = run_multi(c,
                     ("XREAD", "BLOCK", "0", "STREAMS", "s", "$"),
                     ("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">"),
                     ("XREAD", "BLOCK", "0", "STREAMS", "nokey", "0"),
                     ("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS",
                      "s", "empty", ">", ">"),
                     ("XADD", "s", "1-1", "f", "v"),
                     # now there is something to read: it is read
                     ("XREAD", "BLOCK", "0", "STREAMS", "s", "0"),
                     ("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">"),
                     ("XREAD", "BLOCK", "0", "STREAMS", "s", "$"))
    assert time.monotonic() - t0 < 5
    assert q == ["QUEUED"] * 8
    assert r == [None, None, None, None, b"1-1", [[b"s", [e(1)]]], [[b"s", [e(1)]]], None], r
    assert c.call("XINFO", "STREAM", "s")[1] == 1
    # raw: nil arrays inside the EXEC array
    c.call("MULTI")
    c.call("XREAD", "BLOCK", "0", "STREAMS", "s", "$")
    c.call("XREADGROUP", "GROUP", "g", "c2", "BLOCK", "100000", "STREAMS", "s", ">")
    assert c.call_raw("EXEC") == b"*2\r\n*-1\r\n*-1\r\n"
    # no client is left blocked
    assert "blocked_clients:0\r\n" in c.call("INFO", "clients").decode()


# ---------------------------------------------------------------------------
# WATCH / UNWATCH
# ---------------------------------------------------------------------------

def test_watch_concurrent_writer(server):
    c = server.raw()
    other = server.raw()
    fill(c, "s", 1)
    assert c.call_raw("WATCH", "s") == b"+OK\r\n"
    assert other.call("XADD", "s", "2-1", "f", "v") == b"2-1"
    assert c.call("MULTI") == "OK"
    assert c.call("XADD", "s", "3-1", "f", "v") == "QUEUED"
    assert c.call("XADD", "t", "1-1", "f", "v") == "QUEUED"
    assert c.call_raw("EXEC") == b"*-1\r\n"
    # nothing queued ran
    assert c.call("XRANGE", "s", "-", "+") == [e(1), e(2)]
    assert c.call("EXISTS", "t") == 0
    # out of MULTI, and no longer watching
    assert c.err("EXEC") == EXEC_NO_MULTI
    other.call("XADD", "s", "4-1", "f", "v")
    assert run_multi(c, ("XLEN", "s"))[1] == [3]

    # the write comes while the commands are queued (after MULTI)
    c.call("WATCH", "s", "x", "y")
    c.call("MULTI")
    c.call("XADD", "t", "1-1", "f", "v")
    other.call("XADD", "s", "5-1", "f", "v")
    assert c.call("EXEC") is None
    assert c.call("EXISTS", "t") == 0


def test_watch_writes_that_touch(server):
    """Each of these writes by another client to a WATCHed key makes EXEC fail."""
    c = server.raw()
    other = server.raw()
    writes = [
        ("XADD", "s", "9-1", "f", "v"),
        ("XADD", "s", "MAXLEN", "1", "9-1", "f", "v"),
        ("DEL", "s"),
        ("XDEL", "s", "1-1"),
        ("XTRIM", "s", "MAXLEN", "1"),
        ("RENAME", "s", "t"),
        ("RENAME", "u", "s"),
        ("FLUSHDB",),
        ("FLUSHALL",),
    ]
    for w in writes:
        c.call("FLUSHALL")
        fill(c, "s", 3)
        fill(c, "u", 1)
        c.call("WATCH", "s")
        r = other.pipeline([w])[0]
        assert not isinstance(r, RespError), (w, r)
        q, r = run_multi(c, ("XADD", "mark", "1-1", "f", "v"))
        assert r is None, w
        assert c.call("EXISTS", "mark") == 0, w
    # a key that does not exist yet, created by another client
    for w in (("XADD", "new", "1-1", "f", "v"),
              ("XGROUP", "CREATE", "new", "g", "$", "MKSTREAM")):
        c.call("FLUSHALL")
        c.call("WATCH", "new")
        other.call(*w)
        assert run_multi(c, ("XADD", "mark", "1-1", "f", "v"))[1] is None, w
        assert c.call("EXISTS", "mark") == 0, w
    # one of several watched keys
    c.call("FLUSHALL")
    c.call("WATCH", "a", "b")
    c.call("WATCH", "c")
    other.call("XADD", "c", "1-1", "f", "v")
    assert run_multi(c, ("PING",))[1] is None
    # a key of another db
    c.call("FLUSHALL")
    c.call("SELECT", "3")
    c.call("WATCH", "s")
    c.call("SELECT", "0")
    other.call("SELECT", "3")
    other.call("XADD", "s", "1-1", "f", "v")
    other.call("SELECT", "0")
    assert run_multi(c, ("PING",))[1] is None


def test_watch_without_writer(server):
    c = server.raw()
    other = server.raw()
    fill(c, "s", 2)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    assert c.call("WATCH", "s", "nokey") == "OK"
    # reads, writes that change nothing or fail, writes to other keys and dbs do not touch it
    for cmd in (("XRANGE", "s", "-", "+"), ("XLEN", "s"), ("XINFO", "STREAM", "s"),
                ("XREAD", "STREAMS", "s", "0"), ("EXISTS", "s"),
                ("XADD", "s", "1-1", "f", "v"),                    # fails: below the top
                ("XADD", "s", "MAXLEN", "x", "*", "f", "v"),       # fails
                ("XDEL", "s", "9-9"), ("XTRIM", "s", "MAXLEN", "100"), ("DEL", "nokey"),
                ("XADD", "other", "1-1", "f", "v")):
        other.pipeline([cmd])
    other.call("SELECT", "1")
    other.call("XADD", "s", "1-1", "f", "v")
    other.call("SELECT", "0")
    q, r = run_multi(c, ("XADD", "s", "3-1", "f", "v"), ("XLEN", "s"))
    assert r == [b"3-1", 3]
    # WATCH with no other client at all
    c.call("WATCH", "s")
    c.call("XLEN", "s")
    assert run_multi(c, ("XADD", "s", "4-1", "f", "v"))[1] == [b"4-1"]


def test_watch_own_write(server):
    """A WATCHed key the watching client modifies itself before EXEC fails the EXEC too."""
    c = server.raw()
    fill(c, "s", 1)
    c.call("WATCH", "s")
    assert c.call("XADD", "s", "2-1", "f", "v") == b"2-1"
    q, r = run_multi(c, ("XADD", "s", "3-1", "f", "v"))
    assert q == ["QUEUED"] and r is None
    assert c.call("XRANGE", "s", "-", "+") == [e(1), e(2)]
    # its own failed write does not
    c.call("WATCH", "s")
    assert isinstance(c.pipeline([("XADD", "s", "1-1", "f", "v")])[0], RespError)
    assert run_multi(c, ("XADD", "s", "3-1", "f", "v"))[1] == [b"3-1"]


def test_unwatch(server):
    c = server.raw()
    other = server.raw()
    fill(c, "s", 1)
    c.call("WATCH", "s")
    assert c.call_raw("UNWATCH") == b"+OK\r\n"
    other.call("XADD", "s", "2-1", "f", "v")
    assert run_multi(c, ("XLEN", "s"))[1] == [2]
    # UNWATCH with nothing watched
    assert c.call("UNWATCH") == "OK"
    # UNWATCH inside MULTI is queued (and does nothing useful): the watch still applies
    c.call("WATCH", "s")
    c.call("MULTI")
    assert c.call("UNWATCH") == "QUEUED"
    other.call("XADD", "s", "3-1", "f", "v")
    assert c.call("EXEC") is None


def test_watch_inside_multi(server):
    c = server.raw()
    other = server.raw()
    fill(c, "s", 1)
    assert c.call("MULTI") == "OK"
    assert c.call_raw("WATCH", "s") == b"-ERR WATCH inside MULTI is not allowed\r\n"
    assert c.call("XADD", "s", "2-1", "f", "v") == "QUEUED"
    other.call("XADD", "t", "1-1", "f", "v")
    # not an abort, and s was not watched
    other.call("XADD", "s", "1-2", "f", "v")
    assert c.call("EXEC") == [b"2-1"]


def test_exec_and_discard_unwatch(server):
    c = server.raw()
    other = server.raw()
    fill(c, "s", 1)
    # after a successful EXEC
    c.call("WATCH", "s")
    assert run_multi(c, ("XLEN", "s"))[1] == [1]
    other.call("XADD", "s", "2-1", "f", "v")
    assert run_multi(c, ("XLEN", "s"))[1] == [2]
    # after a failed EXEC
    c.call("WATCH", "s")
    other.call("XADD", "s", "3-1", "f", "v")
    assert run_multi(c, ("XLEN", "s"))[1] is None
    other.call("XADD", "s", "4-1", "f", "v")
    assert run_multi(c, ("XLEN", "s"))[1] == [4]
    # after EXECABORT
    c.call("WATCH", "s")
    c.call("MULTI")
    c.err("XADD", "s")
    assert c.err("EXEC") == EXECABORT
    other.call("XADD", "s", "5-1", "f", "v")
    assert run_multi(c, ("XLEN", "s"))[1] == [5]
    # after DISCARD
    c.call("WATCH", "s")
    c.call("MULTI")
    c.call("DISCARD")
    other.call("XADD", "s", "6-1", "f", "v")
    assert run_multi(c, ("XLEN", "s"))[1] == [6]


def test_watch_flush_of_missing_key(server):
    """FLUSHALL/FLUSHDB touch only the watched keys that existed."""
    c = server.raw()
    other = server.raw()
    fill(c, "other", 1)
    c.call("WATCH", "missing")
    other.call("FLUSHALL")
    assert run_multi(c, ("PING",))[1] == ["PONG"]
    fill(c, "other", 1)
    c.call("WATCH", "missing")
    other.call("FLUSHDB")
    assert run_multi(c, ("PING",))[1] == ["PONG"]


def test_reset_discards_multi(server):
    c = server.raw()
    other = server.raw()
    fill(c, "s", 1)
    c.call("WATCH", "s")
    assert c.call("MULTI") == "OK"
    assert c.call("XADD", "s", "2-1", "f", "v") == "QUEUED"
    assert c.call_raw("RESET") == b"+RESET\r\n"
    assert c.err("EXEC") == EXEC_NO_MULTI
    assert c.call("XLEN", "s") == 1
    # RESET unwatched too
    other.call("XADD", "s", "3-1", "f", "v")
    assert run_multi(c, ("XLEN", "s"))[1] == [2]
    # RESET after a queueing error: the next transaction is clean
    c.call("MULTI")
    c.err("XADD", "s")
    c.call("RESET")
    assert run_multi(c, ("XADD", "s", "4-1", "f", "v"))[1] == [b"4-1"]


# ---------------------------------------------------------------------------
# RESP3, clients
# ---------------------------------------------------------------------------

def test_exec_resp3(server):
    c = server.raw()
    hello = c.call("HELLO", "3")
    assert isinstance(hello, dict) and hello[b"proto"] == 3
    fill(c, "s", 1)
    c.call("XGROUP", "CREATE", "s", "g", "0")
    q, r = run_multi(c, ("XADD", "s", "2-1", "f", "v"),
                     ("XREAD", "STREAMS", "s", "1-1"),
                     ("XREAD", "BLOCK", "0", "STREAMS", "s", "$"),
                     ("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "s", ">"),
                     ("XADD", "s", "1-1", "f", "v"),
                     ("XINFO", "STREAM", "s"),
                     ("XLEN", "s"))
    assert q == ["QUEUED"] * 7
    assert r[:5] == [b"2-1", {b"s": [e(2)]}, None, {b"s": [e(1)]}, RespError(XADD_SMALL)], r
    assert isinstance(r[5], dict) and r[5][b"length"] == 2 and r[5][b"groups"] == 1, r[5]
    assert r[6] == 2
    # raw: RESP3 nulls inside the array; a null reply to a failed WATCH
    c.call("MULTI")
    c.call("XREAD", "BLOCK", "0", "STREAMS", "s", "$")
    c.call("XLEN", "s")
    assert c.call_raw("EXEC") == b"*2\r\n_\r\n:2\r\n"
    other = server.raw()
    c.call("WATCH", "s")
    other.call("XADD", "s", "3-1", "f", "v")
    c.call("MULTI")
    c.call("XLEN", "s")
    assert c.call_raw("EXEC") == b"_\r\n"
    c.call("MULTI")
    c.err("XLEN")
    assert c.call_raw("EXEC") == b"-" + EXECABORT.encode() + b"\r\n"


def test_redis_py_transactions(server):
    r = server.client()
    other = server.client()
    # pipeline(transaction=True) is MULTI/EXEC
    p = r.pipeline()
    p.xadd("s", {"f": "v"}, id="1-1")
    p.xadd("s", {"f": "v"}, id="2-1")
    p.xlen("s")
    assert p.execute() == ["1-1", "2-1", 2]
    # a runtime error in the transaction: redis-py raises it, the rest was applied
    p = r.pipeline()
    p.xadd("s", {"f": "v"}, id="1-1")
    p.xadd("s", {"f": "v"}, id="3-1")
    try:
        p.execute()
        raise AssertionError("no error raised")
    except redis.ResponseError as ex:
        assert "equal or smaller" in str(ex), ex
    assert r.xlen("s") == 3
    p = r.pipeline()
    p.xadd("s", {"f": "v"}, id="1-1")
    p.xlen("s")
    res = p.execute(raise_on_error=False)
    assert isinstance(res[0], redis.ResponseError) and res[1] == 3, res
    # optimistic locking with WATCH: a concurrent writer makes it fail
    with r.pipeline() as p:
        p.watch("s")
        n = p.xlen("s")
        other.xadd("s", {"f": "v"}, id="4-1")
        p.multi()
        p.xadd("s", {"n": str(n)}, id="5-1")
        try:
            p.execute()
            raise AssertionError("no WatchError")
        except redis.WatchError:
            pass
    assert r.xlen("s") == 4
    # the retry loop redis-py offers
    def work(pipe):
        n = pipe.xlen("s")
        pipe.multi()
        pipe.xadd("s", {"n": str(n)}, id="6-1")
    assert r.transaction(work, "s") == ["6-1"]
    assert r.xrange("s", "6-1", "6-1") == [("6-1", {"n": "4"})]


def test_redis_cli_transaction(server):
    out = server.cli(input="MULTI\nXADD s 1-1 f v\nXLEN s\nXADD s 1-1 f v\nEXEC\n"
                           "MULTI\nXADD s\nEXEC\nXLEN s\n")
    assert out.splitlines() == [
        "OK", "QUEUED", "QUEUED", "QUEUED", "1-1", "1", XADD_SMALL, "",
        "OK", ARITY % "xadd", "", EXECABORT, "", "1"], out


# ---------------------------------------------------------------------------
# durability
# ---------------------------------------------------------------------------

def test_acknowledged_exec_survives_sigkill(server):
    c = server.raw()
    c.call("XGROUP", "CREATE", "q", "g", "$", "MKSTREAM")
    cmds = []
    for i in range(1, 51):
        cmds.append(("XADD", "a", "%d-1" % i, "n", str(i), "pad", "x" * (i % 30)))
        cmds.append(("XADD", "b", "%d-2" % i, "n", str(i)))
    cmds += [("XADD", "q", "1-1", "f", "v"), ("XADD", "q", "2-1", "f", "v"),
             ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "q", ">"),
             ("XACK", "q", "g", "1-1"),
             ("SELECT", "2"), ("XADD", "a", "7-7", "db", "2"), ("SELECT", "0")]
    q, r = run_multi(c, *cmds)
    assert q == ["QUEUED"] * len(cmds)
    assert len(r) == len(cmds) and not any(isinstance(x, RespError) for x in r), r
    before = (c.call("XRANGE", "a", "-", "+"), c.call("XRANGE", "b", "-", "+"),
              c.call("XPENDING", "q", "g", "-", "+", "10"))
    assert len(before[0]) == 50 and len(before[1]) == 50
    server.restart(kill=signal.SIGKILL)
    c = server.raw()
    after = (c.call("XRANGE", "a", "-", "+"), c.call("XRANGE", "b", "-", "+"),
             c.call("XPENDING", "q", "g", "-", "+", "10"))
    assert after[0] == before[0] and after[1] == before[1]
    assert [(x[0], x[1], x[3]) for x in after[2]] == [(b"2-1", b"c", 1)]
    assert c.call("XPENDING", "q", "g")[0] == 1
    c.call("SELECT", "2")
    assert c.call("XRANGE", "a", "-", "+") == [[b"7-7", [b"db", b"2"]]]


CRASH_KEYS = ("s1", "s2")
PER_KEY = 20               # XADDs per key per transaction
MIN_KILLS = 10
CRASH_SECONDS = 20.0      # kill cycles for this long (at least MIN_KILLS)
WORKERS = 4


class CrashModel:
    def __init__(self):
        self.lock = threading.Lock()
        self.sent = set()          # tags whose EXEC was (maybe) sent
        self.acked = {}            # tag -> the 40 ids EXEC answered
        self.unknown = 0           # EXECs whose reply was lost to a kill
        self.violations = []
        self.stop = False
        self.cursor = {k: None for k in CRASH_KEYS}   # last id checked per stream
        self.found = {}            # tag -> its 40 ids, as found in the streams


def crash_worker(server, model, w, seed):
    rng = random.Random(seed)
    conn, n = None, 0
    while not model.stop:
        pending = []
        try:
            if conn is None:
                conn = RespConn(server.port, timeout=10)
            # one or two transactions in one write
            txs = []
            for _ in range(1 if rng.random() < 0.7 else 2):
                n += 1
                tag = "w%d-%d" % (w, n)
                cmds = [("MULTI",)]
                for key in CRASH_KEYS:
                    for i in range(PER_KEY):
                        cmds.append(("XADD", key, "*", "tag", tag, "i", str(i),
                                     "pad", "x" * rng.randrange(0, 20)))
                cmds.append(("EXEC",))
                txs.append((tag, cmds))
            with model.lock:
                for tag, _ in txs:
                    model.sent.add(tag)
            pending = list(txs)
            conn.sock.sendall(b"".join(encode_command(*x) for _, cmds in txs for x in cmds))
            for tag, cmds in txs:
                replies = [conn.read() for _ in cmds]
                pending.pop(0)
                ok = (replies[0] == "OK" and replies[1:-1] == ["QUEUED"] * (len(cmds) - 2)
                      and isinstance(replies[-1], list) and len(replies[-1]) == len(cmds) - 2
                      and all(isinstance(x, bytes) for x in replies[-1]))
                with model.lock:
                    if not ok:
                        model.violations.append("%s: replies %r" % (tag, replies[:2] +
                                                                     [replies[-1]]))
                    else:
                        model.acked[tag] = replies[-1]
            time.sleep(rng.uniform(0, 0.01))      # bounds the data the checks read
        except (Closed, OSError, socket.timeout):
            with model.lock:
                model.unknown += len(pending)
            if conn is not None:
                conn.close()
            conn = None
            time.sleep(0.02)
        except Exception as ex:              # a reply of the wrong shape
            with model.lock:
                model.violations.append("worker %d: %r" % (w, ex))
            if conn is not None:
                conn.close()
            conn = None
            time.sleep(0.05)
    if conn is not None:
        conn.close()


def crash_check(server, model, kill_no, full=False):
    """Each transaction is in both streams completely or not at all; every acknowledged one is
    there with the ids its EXEC answered; nothing found before is gone.  Reads, in one EXEC (one
    snapshot, while the workers go on), what was added since the previous check (everything if
    full) and the lengths of both streams."""
    with model.lock:
        acked = dict(model.acked)          # acknowledged before the read began
    if full:
        model.cursor = {k: None for k in CRASH_KEYS}
        model.found = {}
    cmds = [("XRANGE", k, "-" if model.cursor[k] is None else b"(" + model.cursor[k], "+")
            for k in CRASH_KEYS] + [("XLEN", k) for k in CRASH_KEYS]
    c = RespConn(server.port, timeout=30)
    try:
        _, r = run_multi(c, *cmds)
    finally:
        c.close()
    with model.lock:
        sent = set(model.sent)             # sent before the read ended
    bad = []
    new = {}                               # tag -> {key: [(i, id)]}
    for key, entries in zip(CRASH_KEYS, r[:2]):
        for eid, fields in entries:
            d = dict(zip(fields[0::2], fields[1::2]))
            tag = d[b"tag"].decode()
            new.setdefault(tag, {}).setdefault(key, []).append((int(d[b"i"]), eid))
        if entries:
            model.cursor[key] = entries[-1][0]
    for tag, per in new.items():
        if tag not in sent:
            bad.append("entries of %s, never sent" % tag)
        if tag in model.found:
            bad.append("transaction %s found again after the previous check" % tag)
        for key in CRASH_KEYS:
            got = per.get(key, [])
            if [i for i, _ in got] != list(range(PER_KEY)):
                bad.append("transaction %s is partial: %s holds i=%r"
                           % (tag, key, [i for i, _ in got]))
        model.found[tag] = [eid for key in CRASH_KEYS for _, eid in per.get(key, [])]
    for tag, ids in acked.items():
        if tag not in model.found:
            bad.append("acknowledged transaction %s is missing" % tag)
        elif model.found[tag] != ids:
            bad.append("transaction %s: stored ids %r..., EXEC answered %r..."
                       % (tag, model.found[tag][:2], ids[:2]))
    for key, n in zip(CRASH_KEYS, r[2:]):
        if n != PER_KEY * len(model.found):
            bad.append("XLEN %s is %d, %d transactions were found: entries vanished or are "
                       "not whole" % (key, n, len(model.found)))
    if bad:
        raise AssertionError("after kill %d: %d violation(s), e.g. %s"
                             % (kill_no, len(bad), "; ".join(bad[:5])))
    return len(model.found)


@echd_only("kills the server with SIGKILL over and over while EXECs run and checks after each "
           "restart that every EXEC is all there or not at all (Redis' AOF can cut an EXEC "
           "short on a crash, and without it Redis keeps nothing)")
@timeout(120)
def test_exec_atomic_across_sigkill(server):
    seed = int(time.time())
    rng = random.Random(seed)
    model = CrashModel()
    threads = [threading.Thread(target=crash_worker, args=(server, model, w, seed + w),
                                daemon=True, name="tx%d" % w) for w in range(WORKERS)]
    for t in threads:
        t.start()
    t0 = time.monotonic()
    kills = 0
    try:
        while kills < MIN_KILLS or time.monotonic() - t0 < CRASH_SECONDS:
            # let transactions run, then kill at a random moment
            time.sleep(rng.uniform(0.1, 0.6))
            server.kill(signal.SIGKILL)
            kills += 1
            server.start()
            crash_check(server, model, kills)
        model.stop = True
        for t in threads:
            t.join(15)
        # a last look at everything, after the workers stopped
        stored = crash_check(server, model, kills, full=True)
    finally:
        model.stop = True
        for t in threads:
            t.join(15)
    assert not [t.name for t in threads if t.is_alive()], "workers still running"
    assert not model.violations, "seed %d: %s" % (seed, model.violations[:5])
    print("# 07-transactions: %d kills in %.0f s, seed %d: %d EXECs acknowledged, %d stored, "
          "%d replies lost to a kill" % (kills, time.monotonic() - t0, seed, len(model.acked),
                                         stored, model.unknown), flush=True)
    # the run exercised what it checks
    assert len(model.acked) >= 50, (len(model.acked), seed)
    assert model.unknown >= 1, "no kill ever interrupted an EXEC in flight (seed %d)" % seed
