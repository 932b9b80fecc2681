"""LATENCY (HISTOGRAM LATEST HISTORY GRAPH DOCTOR RESET HELP), INFO latencystats and the
latency-* options.

The shapes, bucket edges, percentiles and errors are Redis 7.4's (the shared tests run
against redis-server too); the texts of GRAPH and DOCTOR are echd's own, and so are the
"commit" and "flush" events of the monitor.
"""

import re
import time

from echdtest import Verbatim, echd_only

PCTS = "latency-tracking-info-percentiles"
# run.py -j: alone, since it measures how long commands take
SERIAL = True
BIG = 32 * 1024 * 1024      # an XADD of this much takes milliseconds on any machine


def as_map(flat):
    """A RESP2 map (a flat list) as a dict."""
    assert len(flat) % 2 == 0, flat
    return dict(zip(flat[0::2], flat[1::2]))


def histograms(c, *names):
    """{name: (calls, [(usec, cumulative count), ...])} of LATENCY HISTOGRAM."""
    out = {}
    for name, body in as_map(c.call("LATENCY", "HISTOGRAM", *names)).items():
        body = as_map(body)
        assert set(body) == {b"calls", b"histogram_usec"}, body
        buckets = body[b"histogram_usec"]
        out[name.decode()] = (body[b"calls"], list(zip(buckets[0::2], buckets[1::2])))
    return out


def bucket_edges():
    """The upper edges Redis labels its buckets with: from 1024 ns doubling, each the
    highest value HdrHistogram (2 significant figures) holds with it, in microseconds."""
    edges = []
    for k in range(21):
        level = 1024 << k
        edges.append((level + (level >> 7) - 1) // 1000)
    return edges


def check_cdf(name, calls, buckets):
    edges = bucket_edges()
    assert buckets, (name, buckets)
    labels = [u for u, _ in buckets]
    counts = [n for _, n in buckets]
    assert all(u in edges for u in labels), (name, labels)
    assert labels == sorted(set(labels)), (name, labels)
    # cumulative, and a bucket that adds nothing is left out
    assert all(a < b for a, b in zip(counts, counts[1:])), (name, counts)
    assert counts[-1] == calls, (name, buckets, calls)


def info_section(c, *args):
    """(whether '# Latencystats' is there, {command: 'p50=..,..'})."""
    text = c.call("INFO", *args).decode()
    lines = {}
    for line in text.split("\r\n"):
        if line.startswith("latency_percentiles_usec_"):
            name, _, value = line[len("latency_percentiles_usec_"):].partition(":")
            lines[name] = value
    return "# Latencystats" in text, lines


def test_histogram(server):
    c = server.raw()
    assert c.call("CONFIG", "RESETSTAT") == "OK"
    for _ in range(7):
        assert c.call("PING") == "PONG"
    for i in range(3):
        c.call("XADD", "s", "*", "f", str(i))
    h = histograms(c, "ping", "XADD")
    assert set(h) == {"ping", "xadd"}
    assert h["ping"][0] == 7 and h["xadd"][0] == 3
    for name, (calls, buckets) in h.items():
        check_cdf(name, calls, buckets)
    # no filter: every command run since the reset, the reset itself included, and
    # container subcommands by their full name
    every = histograms(c)
    assert {"ping", "xadd", "config|resetstat", "latency|histogram"} <= set(every)
    assert every["config|resetstat"][0] == 1
    assert every["latency|histogram"][0] == 1           # this call is not in its own reply
    for name, (calls, buckets) in every.items():
        check_cdf(name, calls, buckets)
    # a container brings its subcommands; a full name one; unknown names are skipped
    assert set(histograms(c, "config")) == {"config|resetstat"}
    assert set(histograms(c, "CONFIG|RESETSTAT", "nosuch")) == {"config|resetstat"}
    assert histograms(c, "nosuch") == {}
    assert c.call("CONFIG", "RESETSTAT") == "OK"
    assert histograms(c, "ping") == {}


def test_histogram_counts_exec_and_its_commands(server):
    c = server.raw()
    assert c.call("CONFIG", "RESETSTAT") == "OK"
    assert c.pipeline([("MULTI",), ("PING",), ("PING",), ("EXEC",)]) == \
        ["OK", "QUEUED", "QUEUED", ["PONG", "PONG"]]
    h = histograms(c, "ping", "exec", "multi")
    assert {k: v[0] for k, v in h.items()} == {"ping": 2, "exec": 1, "multi": 1}


@echd_only("Redis 7.2 and later count a blocked read that timed out; Debian's 7.0 does not")
def test_histogram_counts_blocked_reads(server):
    c = server.raw()
    assert c.call("CONFIG", "RESETSTAT") == "OK"
    # a blocked read counts once, when it answers (here its timeout)
    assert c.call("XREAD", "BLOCK", "50", "STREAMS", "nokey", "$") is None
    calls, buckets = histograms(c, "xread")["xread"]
    assert calls == 1
    # the histogram is of the run, not of the wait: 50 ms blocked is not 50 ms run
    assert buckets[-1][0] < 50000
    # one woken by an XADD counts once too
    r = server.raw()
    r.send("XREAD", "BLOCK", "0", "STREAMS", "woken", "$")
    deadline = time.time() + 10
    while b"blocked_clients:1" not in c.call("INFO", "clients") and time.time() < deadline:
        time.sleep(0.01)
    c.call("XADD", "woken", "*", "f", "v")
    assert r.read()[0][0] == b"woken"
    assert histograms(c, "xread")["xread"][0] == 2


def test_info_latencystats(server):
    c = server.raw()
    try:
        assert c.call("CONFIG", "RESETSTAT") == "OK"
        assert c.call("PING") == "PONG"
        there, lines = info_section(c)
        assert not there                                   # not in the default sections
        for args in (("latencystats",), ("all",), ("everything",)):
            there, lines = info_section(c, *args)
            assert there, args
            assert re.fullmatch(r"p50=\d+\.\d{3},p99=\d+\.\d{3},p99\.9=\d+\.\d{3}",
                                lines["ping"]), lines
        assert c.call("CONFIG", "GET", PCTS) == [PCTS.encode(), b"50 99 99.9"]
        # the percentiles are the histogram's: p0 <= p100, within the last bucket
        assert c.call("CONFIG", "SET", PCTS, "0 100 50.5") == "OK"
        assert c.call("CONFIG", "GET", PCTS) == [PCTS.encode(), b"0 100 50.5"]
        for _ in range(20):
            c.call("PING")
        _, lines = info_section(c, "latencystats")
        m = re.fullmatch(r"p0=(\d+\.\d{3}),p100=(\d+\.\d{3}),p50\.5=(\d+\.\d{3})",
                         lines["ping"])
        assert m, lines
        p0, p100, p50 = (float(x) for x in m.groups())
        assert p0 <= p50 <= p100
        last_edge = histograms(c, "ping")["ping"][1][-1][0]
        assert p100 <= last_edge + 1
        # the errors are Redis'
        for bad, why in (("abc", "Invalid latency-tracking-info-percentiles parameters"),
                         ("50 x", "Invalid latency-tracking-info-percentiles parameters"),
                         ("101", "latency-tracking-info-percentiles parameters should sit "
                                 "between [0.0,100.0]"),
                         ("-1", "latency-tracking-info-percentiles parameters should sit "
                                "between [0.0,100.0]")):
            assert c.err("CONFIG", "SET", PCTS, bad) == (
                "ERR CONFIG SET failed (possibly related to argument '%s') - %s" % (PCTS, why))
        assert c.call("CONFIG", "GET", PCTS) == [PCTS.encode(), b"0 100 50.5"]
        # none at all: the line stays, empty
        assert c.call("CONFIG", "SET", PCTS, "") == "OK"
        assert c.call("CONFIG", "GET", PCTS) == [PCTS.encode(), b""]
        assert info_section(c, "latencystats")[1]["ping"] == ""
        # latency-tracking no: no lines, and nothing more is counted
        assert c.call("CONFIG", "SET", "latency-tracking", "no") == "OK"
        before = histograms(c, "ping")["ping"][0]
        c.call("PING")
        assert info_section(c, "latencystats") == (True, {})
        assert histograms(c, "ping")["ping"][0] == before
    finally:
        c.call("CONFIG", "SET", PCTS, "50 99 99.9", "latency-tracking", "yes")


def big_xadd(c):
    # Kept, not deleted: echd drops a deleted stream's rows in later commits, which could
    # add a "commit" spike between two LATENCY calls of a test.
    c.call("XADD", "big", "*", "f", b"x" * BIG)


def test_monitor(server):
    c = server.raw()
    try:
        assert c.call("LATENCY", "RESET") >= 0
        assert c.call("CONFIG", "GET", "latency-monitor-threshold") == \
            [b"latency-monitor-threshold", b"0"]
        big_xadd(c)
        assert c.call("LATENCY", "LATEST") == []            # off by default
        assert c.call("CONFIG", "SET", "latency-monitor-threshold", "1") == "OK"
        t0 = int(time.time())
        big_xadd(c)
        latest = {e[0]: e[1:] for e in c.call("LATENCY", "LATEST")}
        # XADD is a fast command to Redis: its spike is a "fast-command" one
        assert b"fast-command" in latest, latest
        when, ms, worst = latest[b"fast-command"]
        assert t0 <= when <= time.time() + 1 and 1 <= ms <= worst
        history = c.call("LATENCY", "HISTORY", "fast-command")
        assert history[-1] == [when, ms]
        assert all(len(s) == 2 and s[1] >= 1 for s in history)
        graph = c.call("LATENCY", "GRAPH", "fast-command")
        assert isinstance(graph, bytes) and b"fast-command" in graph
        assert isinstance(c.call("LATENCY", "DOCTOR"), bytes)
        assert c.call("LATENCY", "HISTORY", "nosuch") == []
        assert c.err("LATENCY", "GRAPH", "nosuch") == \
            "ERR No samples available for event 'nosuch'"
        # RESET of named events counts the ones that existed
        assert c.call("LATENCY", "RESET", "nosuch") == 0
        assert c.call("LATENCY", "RESET", "fast-command", "fast-command") == 1
        assert b"fast-command" not in {e[0] for e in c.call("LATENCY", "LATEST")}
        n = len(c.call("LATENCY", "LATEST"))
        assert c.call("LATENCY", "RESET") == n
        assert c.call("LATENCY", "LATEST") == []
        # below the threshold nothing is kept
        assert c.call("CONFIG", "SET", "latency-monitor-threshold", "100000") == "OK"
        big_xadd(c)
        assert c.call("LATENCY", "LATEST") == []
    finally:
        c.call("CONFIG", "SET", "latency-monitor-threshold", "0")
        c.call("LATENCY", "RESET")


def test_errors_and_help(server):
    c = server.raw()
    assert c.err("LATENCY") == "ERR wrong number of arguments for 'latency' command"
    assert c.err("LATENCY", "FOO") == "ERR unknown subcommand 'FOO'. Try LATENCY HELP."
    for sub, args in (("history", ()), ("graph", ()), ("latest", ("x",)), ("doctor", ("x",)),
                      ("help", ("x",))):
        assert c.err("LATENCY", sub, *args) == \
            "ERR wrong number of arguments for 'latency|%s' command" % sub
    help_lines = c.call("LATENCY", "HELP")
    assert help_lines[0].startswith("LATENCY <subcommand>")
    for sub in ("DOCTOR", "GRAPH <event>", "HISTORY <event>", "LATEST", "RESET [<event> ...]",
                "HISTOGRAM [COMMAND ...]", "HELP"):
        assert sub in help_lines, sub
    for opt, bad in (("latency-tracking", "maybe"), ("latency-monitor-threshold", "-1"),
                     ("latency-monitor-threshold", "x")):
        assert c.err("CONFIG", "SET", opt, bad).startswith(
            "ERR CONFIG SET failed (possibly related to argument '%s')" % opt)


@echd_only("the commit and flush events are echd's")
def test_monitor_commit_event(server):
    c = server.raw()
    try:
        assert c.call("LATENCY", "RESET") >= 0
        assert c.call("CONFIG", "SET", "latency-monitor-threshold", "1") == "OK"
        big_xadd(c)     # 32 MiB of pages written and flushed in one commit
        latest = {e[0]: e[1:] for e in c.call("LATENCY", "LATEST")}
        assert b"commit" in latest, latest
        assert 1 <= latest[b"commit"][1] <= latest[b"commit"][2]
        doctor = c.call("LATENCY", "DOCTOR")
        assert isinstance(doctor, bytes) and b"commit:" in doctor
        assert c.call("CONFIG", "SET", "latency-monitor-threshold", "0") == "OK"
        assert b"is off" in c.call("LATENCY", "DOCTOR")
    finally:
        c.call("CONFIG", "SET", "latency-monitor-threshold", "0")
        c.call("LATENCY", "RESET")


@echd_only("RESP3 verbatim strings of echd's own texts")
def test_doctor_and_graph_are_verbatim_in_resp3(server):
    c = server.raw()
    c.call("HELLO", "3")
    try:
        assert c.call("CONFIG", "SET", "latency-monitor-threshold", "1") == "OK"
        big_xadd(c)
        for args in (("DOCTOR",), ("GRAPH", "fast-command")):
            r = c.call("LATENCY", *args)
            assert isinstance(r, Verbatim) and len(r) > 0, (args, r)
        assert isinstance(c.call("LATENCY", "HISTOGRAM", "ping"), dict)
    finally:
        c.call("CONFIG", "SET", "latency-monitor-threshold", "0")
        c.call("LATENCY", "RESET")



def persistence_pcts(c):
    """{'commit': 'p50=..', 'flush': '..'} of INFO persistence."""
    out = {}
    for line in c.call("INFO", "persistence").decode().split("\r\n"):
        for ev in ("commit", "flush"):
            if line.startswith(ev + "_latency_percentiles_usec:"):
                out[ev] = line.split(":", 1)[1]
    return out


@echd_only("how long commits and their flushes take is echd's own INFO field")
def test_commit_and_flush_percentiles(server):
    c = server.raw()
    try:
        assert c.call("CONFIG", "RESETSTAT") == "OK"
        assert persistence_pcts(c) == {}                     # no commit since the reset
        for i in range(20):
            c.call("XADD", "s", "*", "f", str(i))
        got = persistence_pcts(c)
        # on PostgreSQL a commit is durable when it returns: no flush of its own to time
        assert set(got) == ({"commit", "flush"} if server.pg_schema is None else {"commit"}), got
        for ev, line in got.items():
            m = re.fullmatch(r"p50=(\d+\.\d{3}),p99=(\d+\.\d{3}),p99\.9=(\d+\.\d{3})", line)
            assert m, (ev, line)
            p50, p99, p999 = (float(x) for x in m.groups())
            assert 0 < p50 <= p99 <= p999, (ev, line)
        # the same percentiles as the commands'
        assert c.call("CONFIG", "SET", PCTS, "0 100") == "OK"
        m = re.fullmatch(r"p0=(\d+\.\d{3}),p100=(\d+\.\d{3})", persistence_pcts(c)["commit"])
        assert m and float(m.group(1)) <= float(m.group(2))
        # latency-tracking no: nothing recorded
        assert c.call("CONFIG", "SET", "latency-tracking", "no") == "OK"
        assert c.call("CONFIG", "RESETSTAT") == "OK"
        c.call("XADD", "s", "*", "f", "v")
        assert persistence_pcts(c) == {}
    finally:
        c.call("CONFIG", "SET", PCTS, "50 99 99.9", "latency-tracking", "yes")
