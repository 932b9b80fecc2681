"""A front end active for several shards (issue 36's cluster-shards-per-node): above 1, echd
supervises that many worker processes, worker i on port + i with its data in <dir>/node<i>,
each active for one shard no one holds or standing by.

- Refusals, in every pass: without cluster-enabled, past 64, or with a port that would pass
  65535 for the last worker, echd exits 2 naming the option; a worker that cannot start
  (cluster-enabled on lmdb) stops echd with its exit status 2, and (on PostgreSQL) a worker
  whose port is taken with 1, not started again and again.
- 3 shards over two front ends of 2 workers each (on PostgreSQL): the first takes two shards
  (its two ports are two primaries), the second the third and stands by with its other
  worker; every slot is covered, 4 nodes with distinct ids, and CONFIG REWRITE is refused in
  a worker. redis-py's RedisCluster works 24 streams; kill -9 of the first front end's
  supervisor takes both its workers down, the second front end's standby takes one of its
  shards within 5 s, and the other answers CLUSTERDOWN; the first front end started again
  takes that shard back; every acknowledged entry is there.
- A worker killed with kill -9 is started again by its supervisor (a new pid on the same
  port); a worker told SHUTDOWN stays down, and once every worker is shut down the supervisor
  exits 0.
- systemd: every notification comes from the supervisor's pid (NotifyAccess=main): READY=1
  once both workers answer, WATCHDOG=1 relayed while both send theirs, STOPPING=1 on SIGTERM;
  the pidfile holds the supervisor's pid, and is gone once it exits.
"""

import os
import signal
import socket
import subprocess
import tempfile
import time

import echdtest
from echdtest import RespConn, RespError, echd_only, pg_only, timeout, wait_until
from shardtest import (PG, RANGES, Shards, cinfo, cluster_client, fill_queue, myself, nodes_of,
                       retrying, settled, shard_of, slots_of)

ECHD_ONLY = "worker processes are echd's own"
TLS_SUITE = False
TLS_SUITE_WHY = "the front ends are started by the test itself"
TIMEOUT = 150


def free_run(n):
    """A port p with p .. p + n - 1 free on 127.0.0.1."""
    for _ in range(50):
        p = echdtest.free_port()
        if p + n - 1 > 65535:
            continue
        socks = []
        try:
            for q in range(p, p + n):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", q))
            return p
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError("no run of %d free ports" % n)


class Front(echdtest.Server):
    """A front end of n workers: ports port .. port + n - 1."""

    def __init__(self, exe, args, n):
        self.n = n
        super().__init__("echd", exe, list(args) + ["--cluster-shards-per-node", str(n)])
        self.port = free_run(n)

    def pick_ports(self):
        self.port = free_run(self.n)

    @property
    def ports(self):
        return [self.port + i for i in range(self.n)]

    def worker(self, i):
        """A RespConn to worker i (closed with the test)."""
        c = RespConn(self.port + i, timeout=5.0)
        self._resources.append(c)
        return c


class Worker:
    """What shardtest's helpers call (raw(), port) for worker i of a Front."""

    def __init__(self, front, i):
        self.front, self.port = front, front.port + i

    def raw(self, timeout=5):
        c = RespConn(self.port, timeout=timeout)
        self.front._resources.append(c)
        return c


def workers_of(*fronts):
    return [Worker(f, i) for f in fronts for i in range(f.n)]


def start_front(server, sh, n=2):
    f = Front(server.exe, sh.args(), n)
    server._children.append(f)
    return f.start()


def answers(port):
    try:
        c = RespConn(port, timeout=1.0)
    except OSError:
        return False
    try:
        return c.call("PING") == "PONG"
    except (OSError, RespError, echdtest.Closed):
        return False
    finally:
        c.close()


def pid_of(port):
    c = RespConn(port, timeout=5.0)
    try:
        info = c.call("INFO", "server")
    finally:
        c.close()
    info = info.decode() if isinstance(info, bytes) else str(info)
    return int(next(ln.split(":", 1)[1] for ln in info.split("\r\n")
                    if ln.startswith("process_id:")))


def run_echd(exe, *args):
    d = tempfile.mkdtemp(prefix="echd-workers-")
    try:
        return subprocess.run([exe, "--dir", d, "--bind", "127.0.0.1"] + list(args),
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    finally:
        subprocess.run(["rm", "-rf", d])


@echd_only(ECHD_ONLY)
def test_refusals(server):
    """Without cluster-enabled, past 64, or past port 65535 for the last worker: exit 2."""
    p = echdtest.free_port()
    r = run_echd(server.exe, "--port", str(p), "--cluster-shards-per-node", "2")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert b"cluster-shards-per-node 2 needs cluster-enabled yes" in r.stderr, r.stderr
    r = run_echd(server.exe, "--port", str(p), "--cluster-shards-per-node", "65")
    assert r.returncode == 2 and b"cluster-shards-per-node" in r.stderr, (r.returncode, r.stderr)
    r = run_echd(server.exe, "--port", "65535", "--cluster-enabled", "yes",
                 "--cluster-shards-per-node", "2")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert b"port 65535 + 1 is past 65535" in r.stderr, r.stderr
    # a worker that cannot start (cluster-enabled on lmdb) stops the lot, with its status
    r = run_echd(server.exe, "--port", str(p), "--storage", "lmdb", "--cluster-enabled", "yes",
                 "--cluster-shards-per-node", "2")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert b"could not start; stopping" in r.stderr and b"starts again" not in r.stderr, r.stderr
    # nothing was left listening
    assert not answers(p)


@pg_only(PG)
@timeout(120)
def test_two_front_ends_of_two_workers(server):
    """3 shards, two front ends of 2 workers: 2 + 1 primaries and a standby; kill -9 of the
    first front end's supervisor frees both its shards, the standby takes one within 5 s;
    the front end started again takes the other back; nothing acknowledged is lost."""
    sh = Shards(server)
    try:
        a = start_front(server, sh)
        wa = workers_of(a)
        # both workers of a take a shard each: no one else is there
        wait_until(lambda: settled(wa, 2), 10, what="a's two workers serving two shards")
        assert set(slots_of(wa[0]).values()) == set(a.ports), slots_of(wa[0])
        assert cinfo(wa[0])["cluster_state"] == "fail"  # the third shard has no one yet
        b = start_front(server, sh)
        ws = workers_of(a, b)
        wait_until(lambda: settled(ws, 3), 10, what="every worker sees 3 primaries")
        slots = slots_of(ws[0])
        assert sorted(slots) == RANGES, slots
        prim_b = [p for p in b.ports if p in slots.values()]
        assert len(prim_b) == 1, (slots, b.ports)
        standby = next(w for w in workers_of(b) if w.port not in slots.values())
        wait_until(lambda: all(len(nodes_of(w)) == 4 for w in ws), 5,
                   what="every worker listing the 4 nodes")
        ids = {myself(w)[0] for w in ws}
        assert len(ids) == 4, ids  # each worker is a node of its own
        for w in ws:
            assert cinfo(w)["cluster_state"] == "ok"
        # a worker's port and dir are the file's shifted: it does not rewrite the file
        try:
            wa[1].raw().call("CONFIG", "REWRITE")
            raise AssertionError("CONFIG REWRITE in a worker was not refused")
        except RespError as e:
            assert "not from a worker of cluster-shards-per-node" in e.msg, e.msg

        rc = cluster_client(ws)
        streams = ["job:%d" % i for i in range(24)]
        assert {shard_of(k)[0] for k in streams} == {0, 1, 2}
        acked = fill_queue(rc, streams)
        for k in streams:
            got = rc.xreadgroup("workers", "w1", {k: ">"}, count=2)
            assert [e[0] for e in got[0][1]] == acked[k][:2]
        shards_of_a = sorted(i for i, r in enumerate(RANGES) if slots[r] in a.ports)
        assert len(shards_of_a) == 2, slots

        a.kill(signal.SIGKILL)  # the supervisor: its workers die with it
        t0 = time.monotonic()
        wait_until(lambda: not any(answers(p) for p in a.ports), 3, interval=0.05,
                   what="a's workers gone with their supervisor")

        def standby_took():
            try:
                me = myself(standby)
            except (OSError, RespError):
                return False
            return len(me) > 8 and int(me[8].split("-")[0]) in [RANGES[i][0] for i in shards_of_a]
        wait_until(standby_took, 5, interval=0.05, what="b's standby taking one of a's shards")
        took = time.monotonic() - t0
        print("takeover after kill -9 of a front end of 2 workers: %.2f s" % took)
        assert took < 5
        lo = int(myself(standby)[8].split("-")[0])
        taken = next(i for i in shards_of_a if RANGES[i][0] == lo)
        orphan = next(i for i in shards_of_a if i != taken)
        wb = workers_of(b)
        wait_until(lambda: settled(wb, 2), 5, what="b's workers see 2 primaries")
        ci = cinfo(wb[0])
        assert ci["cluster_state"] == "fail", ci  # b has no third worker for a's other shard
        key = next(k for k in streams if shard_of(k)[0] == orphan)
        try:
            wb[0].raw().call("XLEN", key)
            raise AssertionError("XLEN of a shard no one holds answered")
        except RespError as e:
            assert e.msg.startswith("CLUSTERDOWN"), e.msg
        for k in streams:
            if shard_of(k)[0] == taken:
                got = retrying(lambda k=k: rc.xrange(k, "-", "+"), "XRANGE %s" % k)
                assert [e[0] for e in got] == acked[k], k

        a.start()  # the same ports and dirs: its workers take a's other shard back
        wait_until(lambda: settled(ws, 3), 10, what="3 primaries again")
        slots = slots_of(ws[0])
        assert sorted(slots) == RANGES and slots[RANGES[orphan]] in a.ports, slots
        # redis-py keeps a map without the orphan's slots (SlotNotCoveredError, no refresh):
        # a new client, as an application restarted meanwhile would have
        rc.close()
        rc = cluster_client(ws)
        for k in streams:
            got = retrying(lambda k=k: rc.xrange(k, "-", "+"), "XRANGE %s" % k)
            assert [e[0] for e in got] == acked[k], k
            pend = retrying(lambda k=k: rc.xpending(k, "workers"), "XPENDING %s" % k)
            assert pend["pending"] == 2, (k, pend)
        rc.close()
    finally:
        sh.drop()


@pg_only(PG)
@timeout(60)
def test_a_port_taken(server):
    """Worker 1's port taken: it exits 1 before it was ever ready, and so does echd, its
    worker 0 stopped (not a supervisor starting it again and again)."""
    sh = Shards(server)
    try:
        p = free_run(2)
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", p + 1))
            taken.listen()
            r = run_echd(server.exe, "--port", str(p), *sh.args(), "--cluster-shards-per-node",
                         "2")
        assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
        assert b"worker 1 could not start; stopping" in r.stderr, r.stderr[-2000:]
        assert b"starts again" not in r.stderr and not answers(p), r.stderr[-2000:]
    finally:
        sh.drop()


@pg_only(PG)
@timeout(90)
def test_a_worker_is_started_again(server):
    """kill -9 of a worker: its supervisor starts it again on the same port (a new pid);
    SHUTDOWN of a worker: it stays down; of both: the supervisor exits 0."""
    sh = Shards(server, nshards=2)
    try:
        a = start_front(server, sh)
        wa = workers_of(a)
        wait_until(lambda: settled(wa, 2), 10, what="two workers serving two shards")
        supervisor = a.proc.pid
        old = pid_of(a.ports[1])
        assert old != supervisor and pid_of(a.ports[0]) not in (old, supervisor)
        os.kill(old, signal.SIGKILL)
        wait_until(lambda: answers(a.ports[1]) and pid_of(a.ports[1]) != old, 10,
                   interval=0.1, what="worker 1 started again")
        assert a.alive()
        wait_until(lambda: settled(wa, 2), 10, what="both shards served again")
        with open(a.log_path, "rb") as f:
            log = f.read().decode(errors="replace")
        assert "worker 1 (pid %d) was killed by signal 9" % old in log, log[-2000:]
        # SHUTDOWN: that worker stays down, the other goes on
        try:
            wa[1].raw().call("SHUTDOWN", "NOSAVE")
        except (OSError, echdtest.Closed, RespError):
            pass
        wait_until(lambda: not answers(a.ports[1]), 5, what="worker 1 shut down")
        time.sleep(1.5)  # past the restart delay: it is not started again
        assert not answers(a.ports[1]) and answers(a.ports[0]) and a.alive()
        try:
            wa[0].raw().call("SHUTDOWN", "NOSAVE")
        except (OSError, echdtest.Closed, RespError):
            pass
        a.proc.wait(10)
        assert a.proc.returncode == 0, a.log_tail()
        a.proc = None
    finally:
        sh.drop()


class Notify:
    """The service manager's end: a datagram socket that learns each sender's pid."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="echd-notify-")
        self.path = os.path.join(self.dir, "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind(self.path)

    def recv(self, wait):
        """(pid, {key: value}) or None."""
        self.sock.settimeout(max(wait, 0.001))
        try:
            data, anc, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(12))
        except socket.timeout:
            return None
        pid = None
        for level, kind, cdata in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = int.from_bytes(cdata[:4], "little")
        return pid, dict(ln.partition("=")[::2] for ln in data.decode().split("\n") if ln)

    def close(self):
        self.sock.close()
        subprocess.run(["rm", "-rf", self.dir])


@pg_only(PG)
@timeout(90)
def test_systemd_hears_the_supervisor(server):
    """NotifyAccess=main: READY=1 from the supervisor once both workers answer, WATCHDOG=1
    relayed at the workers' pace, STOPPING=1 on SIGTERM, exit 0: all from its pid."""
    sh = Shards(server, nshards=2)
    ns = Notify()
    try:
        port = free_run(2)
        d = tempfile.mkdtemp(prefix="echd-workers-")
        env = {k: v for k, v in os.environ.items()
               if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS",
                            "LISTEN_PID")}
        env.update(NOTIFY_SOCKET=ns.path, WATCHDOG_USEC="600000")
        log = open(os.path.join(d, "log"), "wb")
        pidfile = os.path.join(d, "echd.pid")
        p = subprocess.Popen([server.exe, "--port", str(port), "--bind", "127.0.0.1", "--dir",
                              os.path.join(d, "data"), "--cluster-shards-per-node", "2",
                              "--pidfile", pidfile]
                             + sh.args(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                             env=env, start_new_session=True)
        log.close()
        try:
            msgs = []
            deadline = time.monotonic() + 20
            while not any(m.get("READY") == "1" for _, m in msgs):
                r = ns.recv(deadline - time.monotonic())
                assert r is not None, "no READY=1 in 20 s: %r" % msgs
                msgs.append(r)
            # both workers answer by then; the pidfile names the supervisor
            assert answers(port) and answers(port + 1)
            with open(pidfile) as f:
                assert int(f.read()) == p.pid
            dogs = []
            t_end = time.monotonic() + 2.0
            while time.monotonic() < t_end:
                r = ns.recv(t_end - time.monotonic())
                if r is not None:
                    msgs.append(r)
                    if r[1].get("WATCHDOG") == "1":
                        dogs.append(r)
            # each worker sends every 0.3 s; relayed once both have: about as often
            assert 3 <= len(dogs) <= 9, "%d WATCHDOG=1 in 2 s: %r" % (len(dogs), msgs)
            p.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 10
            while not any(m.get("STOPPING") == "1" for _, m in msgs):
                r = ns.recv(deadline - time.monotonic())
                assert r is not None, "no STOPPING=1: %r" % msgs
                msgs.append(r)
            p.wait(15)
            assert p.returncode == 0, p.returncode
            assert {pid for pid, _ in msgs} == {p.pid}, (p.pid, msgs)
            assert not os.path.exists(pidfile)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            subprocess.run(["rm", "-rf", d])
    finally:
        ns.close()
        sh.drop()
