"""Failover on the PostgreSQL backend: nothing acknowledged is lost when a front end, the
PostgreSQL primary or the link between them fails under load (issue 27's proof a, b, c).

Each test starts its own throw-away PostgreSQL (tests/helpers/pgtmp.py: initdb as the postgres
user, 127.0.0.1, a free port; for (b) three of them under Patroni with an etcd,
tests/helpers/patronitmp.py) and two echd front ends on one schema, then runs the crash
workload of tests/crash/driver.py (producers XADD, some pipelined, one idempotent; consumers
XREADGROUP/XACK/XACKDEL/XNACK/XAUTOCLAIM; a dead-letter worker) through failures, checking
after each that every acknowledged entry and PEL record is there (driver.check_state):

  (a) kill -9 of the active front end: a standby is active within 5 s (its INFO says
      role:master), the clients reconnect to it;
  (b) Patroni in synchronous_mode over three PostgreSQL nodes: the primary's WAL senders
      stopped (SIGSTOP) for 0.5 s, so that it holds commits no standby has, then SIGKILL of
      its Patroni and of all its PostgreSQL processes under load; Patroni promotes the
      synchronous standby (the test checks it was that one) when the leader key expires
      (ttl 10 s here), and the front ends reconnect through the multi-host URL
      (target_session_attrs=read-write), one of them active. The workload runs through the
      outage; the test prints the write outage (from the kill to the first acknowledged
      XADD sent after it, by a probe client) and the acknowledged counts;
  (c) PostgreSQL stopped (SIGSTOP of all its processes) past storage-timeout-ms, then resumed:
      replies fail or their clients are closed, none is acknowledged that did not commit, and
      afterwards exactly one front end is active.

The workers treat the standby's READONLY reply and the failed-commit error as a lost
connection (driver.TRANSIENT): the outcome is unknown, so they reconnect and the model lets
either outcome stand, settled by what the store holds.

echd only; not part of the TLS pass (the front ends are started here, not by the suite).
"""

import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crash"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "helpers"))

import driver  # noqa: E402
import patronitmp  # noqa: E402
import pgtmp  # noqa: E402
from echdtest import Closed, RespConn, RespError, Server, ServerError, timeout  # noqa: E402

ECHD_ONLY = "front ends sharing a PostgreSQL store are echd's own"
TLS_SUITE = False
TLS_SUITE_WHY = "the front ends and PostgreSQL are started by the tests themselves"
PG_SUITE = False
PG_SUITE_WHY = ("its tests start PostgreSQL and the front ends themselves: the LMDB pass "
                "already runs them on postgres")
TIMEOUT = 170
# run.py -j: alone: it starts PostgreSQL clusters and front ends of its own and times takeovers
SERIAL = True

TAKEOVER_MAX = 5.0       # seconds from kill -9 of the active to a standby serving
HA_RETRY_MS = 100
STORE_TIMEOUT_MS = 1000  # storage-timeout-ms: a round trip longer than this is a lost link
OUTAGE_MAX = 40.0        # seconds from the primary's kill to a write acknowledged again
PROBE_KEY, PROBE_EVERY = "fo:probe", 0.02
REPLICATION_STALL = 0.5  # seconds the primary's WAL senders are stopped before its kill
TRANSIENT = ("READONLY", "storage commit failed", "the store cannot be reached")


def info_role(port):
    """INFO's role (master / standby), or None when the front end does not answer."""
    try:
        c = RespConn(port, timeout=2)
    except OSError:
        return None
    try:
        text = c.call("INFO", "replication")
    except (Closed, OSError, RespError):
        return None
    finally:
        c.close()
    if isinstance(text, bytes):
        text = text.decode()
    for line in text.splitlines():
        if line.startswith("role:"):
            return line[5:].strip()
    return None


def front_end(exe, url, schema, *extra):
    return Server("echd", exe, ["--storage-backend", "postgres", "--storage-url", url,
                                "--storage-pg-schema", schema, "--ha-retry-ms", str(HA_RETRY_MS),
                                "--storage-timeout-ms", str(STORE_TIMEOUT_MS)] + list(extra))


class Pair(driver.Through):
    """Front ends on one schema, seen by the workload as one server: .port is the active
    one's (the workers reconnect to it after a failure)."""

    def __init__(self, exe, url, schema, n=2):
        self.exe = exe
        self.url = url
        self.schema = schema
        self.fronts = [front_end(exe, url, schema) for _ in range(n)]
        self.active = None

    def start(self):
        for s in self.fronts:
            s.start()
        self.active = self.wait_active(10.0)
        return self

    def wait_active(self, limit, exclude=None):
        """The one front end whose INFO says role:master, within limit seconds; raises if
        none, or more than one, is."""
        deadline = time.monotonic() + limit
        while True:
            masters = [s for s in self.fronts if s is not exclude and s.alive()
                       and info_role(s.port) == "master"]
            if len(masters) == 1:
                return masters[0]
            if len(masters) > 1:
                raise driver.Violation("%d front ends say role:master at once" % len(masters))
            if time.monotonic() > deadline:
                raise driver.Violation("no front end became active within %.1f s; logs:\n%s"
                                       % (limit, "\n".join(s.log_tail(15)
                                                           for s in self.fronts)))
            time.sleep(0.02)

    def masters(self):
        return [s for s in self.fronts if s.alive() and info_role(s.port) == "master"]

    def log_tail(self, n=20):
        return "\n".join(s.log_tail(n) for s in self.fronts)

    def check_data(self):
        return pg_check(self.exe, self.url, self.schema)

    def stop(self):
        for s in self.fronts:
            s.stop()


def pg_check(exe, url, schema):
    """`echo-admin check` of the schema in PostgreSQL: the stored counters and indexes against
    the rows (what driver.check_storage does for a data directory)."""
    import subprocess
    from echdtest import admin_exe
    p = subprocess.run([admin_exe(exe), "check", "--storage-url", url,
                        "--storage-pg-schema", schema], capture_output=True, text=True,
                       timeout=120)
    if p.returncode != 0:
        return "echo-admin check of schema %s exited %d:\n%s%s" % (schema, p.returncode,
                                                                   p.stdout, p.stderr)
    return None


class FrontEndKill:
    """(a) kill -9 of the active front end; a standby takes over; the killed one comes back
    as a standby."""

    label = "kill -9 of the active"

    def __init__(self):
        self.takeovers = []

    def resume(self, pair, rng):
        pass

    def kill(self, pair, rng):
        driver.died_by_itself(pair.active)
        self.t_kill = time.monotonic()
        self.killed = pair.active
        pair.active.kill(signal.SIGKILL)

    def restart(self, pair, rng):
        pair.active = pair.wait_active(TAKEOVER_MAX, exclude=self.killed)
        took = time.monotonic() - self.t_kill
        self.takeovers.append(took)
        try:
            self.killed.start()
        except ServerError as e:
            raise driver.StartFailure("the killed front end did not come back: %s" % e)
        role = info_role(self.killed.port)
        if role == "master":
            raise driver.Violation("the restarted front end says role:master while another "
                                   "is active")
        return "a standby took over in %.2f s" % took

    def summary(self):
        return "takeovers %s s" % ", ".join("%.2f" % t for t in self.takeovers)


class Probe(threading.Thread):
    """A client of its own that sends an XADD to PROBE_KEY every PROBE_EVERY seconds, to the
    active front end of the moment (pair.port), and records when each acknowledged one was
    sent and answered: the write outage is the time from a kill to the first XADD sent after
    it that was acknowledged."""

    def __init__(self, pair):
        super().__init__(name="probe", daemon=True)
        self.pair = pair
        self.acked = []             # (sent, answered), monotonic
        self.done = threading.Event()

    def run(self):
        c = None
        while not self.done.is_set():
            try:
                if c is None:
                    c = driver.Conn(self.pair.port, timeout=2)
                sent = time.monotonic()
                c.call("XADD", PROBE_KEY, "*", "t", "%.3f" % sent)
                self.acked.append((sent, time.monotonic()))
            except (Closed, OSError, RespError):
                if c is not None:
                    c.close()
                c = None
            self.done.wait(PROBE_EVERY)
        if c is not None:
            c.close()

    def first_after(self, t):
        """When the first XADD sent at or after t was answered, or None."""
        for sent, answered in list(self.acked):
            if sent >= t:
                return answered
        return None

    def stop(self):
        self.done.set()
        self.join(10)


class PatroniFailover:
    """(b) SIGKILL of the primary's Patroni and of every process of its PostgreSQL; Patroni
    promotes the synchronous standby once the leader key expires. The workload runs on
    through the outage: kill() returns once a write sent after the kill was acknowledged,
    following whichever front end is active by then."""

    label = "Patroni failover"

    def __init__(self, cluster):
        self.pc = cluster
        self.outage = None          # seconds from the kill to a write acknowledged again
        self.elected = None         # ... to Patroni showing the new leader running
        self.killed = self.sync = self.promoted = None
        self.nprocs = 0

    def resume(self, pair, rng):
        pass

    def kill(self, pair, rng):
        driver.died_by_itself(pair.active)
        self.killed, self.sync = self.pc.leader(), self.pc.sync_standby()
        if self.killed is None or self.sync is None:
            raise driver.Violation("before the kill Patroni shows leader %s, synchronous "
                                   "standby %s" % (self.killed, self.sync))
        probe = Probe(pair)
        probe.start()
        try:
            time.sleep(0.2)
            # The primary's WAL senders stopped first: it then holds commits that no standby
            # has when it dies. With synchronous_mode none of them was acknowledged (they
            # wait for the synchronous standby); without, some were, and are lost.
            senders = self.pc.node(self.killed).pids("walsender")
            if not senders:
                raise driver.Violation("the primary %s has no WAL sender to stop" % self.killed)
            patronitmp.signal_pids(senders, signal.SIGSTOP)
            time.sleep(REPLICATION_STALL)
            t_kill = time.monotonic()
            self.nprocs = self.pc.kill_node(self.killed)
            deadline = t_kill + OUTAGE_MAX
            while probe.first_after(t_kill) is None:
                if time.monotonic() > deadline:
                    raise driver.Violation("no write acknowledged within %.0f s of the kill; "
                                           "Patroni:\n%s\nfront ends:\n%s"
                                           % (OUTAGE_MAX, self.pc.logs(), pair.log_tail()))
                masters = pair.masters()
                if len(masters) == 1:
                    pair.active = masters[0]        # the workers reconnect to it
                if self.elected is None and self.pc.leader(exclude=(self.killed,)):
                    self.elected = time.monotonic() - t_kill
                time.sleep(0.05)
            self.outage = probe.first_after(t_kill) - t_kill
            time.sleep(1.0)                         # the workload on the new primary
        finally:
            probe.stop()
        try:
            self.promoted = self.pc.wait_leader(self.killed, 10.0)
        except RuntimeError as e:
            raise driver.Violation(str(e))

    def restart(self, pair, rng):
        pair.active = pair.wait_active(30.0)
        if self.promoted != self.sync:
            raise driver.Violation("Patroni promoted %s; the synchronous standby was %s"
                                   % (self.promoted, self.sync))
        return ("%s killed (%d processes), %s promoted, writes resumed %.1f s after the kill"
                % (self.killed, self.nprocs, self.promoted, self.outage))

    def summary(self):
        elected = "%.1f s" % self.elected if self.elected is not None else "(not seen)"
        return ("%s killed (%d processes), %s promoted (Patroni's leader after %s); write "
                "outage %.1f s" % (self.killed, self.nprocs, self.promoted, elected,
                                   self.outage))


class PgStop:
    """(c) every PostgreSQL process stopped (SIGSTOP) past storage-timeout-ms, then resumed."""

    label = "PostgreSQL stopped"

    def __init__(self, cluster):
        self.cluster = cluster
        self.outages = 0

    def resume(self, pair, rng):
        pass

    def kill(self, pair, rng):
        driver.died_by_itself(pair.active)
        self.cluster.pause()
        try:
            time.sleep(STORE_TIMEOUT_MS / 1000.0 * rng.uniform(1.5, 3.0))
        finally:
            self.cluster.resume()
        self.outages += 1

    def restart(self, pair, rng):
        pair.active = pair.wait_active(20.0)
        # exactly one, and it stays so a moment later (no flapping)
        time.sleep(HA_RETRY_MS * 3 / 1000.0)
        masters = pair.masters()
        if masters != [pair.active]:
            raise driver.Violation("after the outage %d front ends are active"
                                   % len(masters))
        return "PostgreSQL resumed, one front end active"

    def summary(self):
        return "%d outages" % self.outages


def run(pair, crash, seed, cycles, deadline, uptime=(0.3, 0.8)):
    saved = driver.TRANSIENT
    driver.TRANSIENT = TRANSIENT
    try:
        return driver.run_cycles(pair, crash, seed, cycles, cycles, deadline,
                                 uptime=uptime)
    finally:
        driver.TRANSIENT = saved


@timeout(TIMEOUT)
def test_failover_kill9(server):
    seed = int(time.time())
    with pgtmp.Cluster() as pg:
        pair = Pair(server.exe, pg.url, "fo_a").start()
        try:
            crash = FrontEndKill()
            cycles, model, secs = run(pair, crash, seed, 6, 120.0)
        finally:
            pair.stop()
    assert cycles >= 6, (cycles, seed)
    assert max(crash.takeovers) <= TAKEOVER_MAX, crash.takeovers
    s = model.stats
    print("# 27-failover kill -9: %d cycles in %.0f s, seed %d, %s; %s"
          % (cycles, secs, seed, crash.summary(), driver.stats_line(model)), flush=True)
    assert s["xadd"] > 100 and s["delivered"] > 50 and s["acked"] > 20, (s, seed)


@timeout(TIMEOUT)
def test_failover_patroni(server):
    seed = int(time.time())
    with patronitmp.Cluster() as pc:
        pair = Pair(server.exe, pc.url, "fo_b").start()
        try:
            crash = PatroniFailover(pc)
            cycles, model, secs = run(pair, crash, seed, 1, 100.0, uptime=(3.0, 4.0))
        finally:
            pair.stop()
    s = model.stats
    print("# 27-failover Patroni: %s; acknowledged XADD %d, XACK %d, all kept; %d cycle(s) in "
          "%.0f s, seed %d; %s" % (crash.summary(), s["xadd"], s["acked"], cycles, secs, seed,
                                  driver.stats_line(model)), flush=True)
    assert cycles == 1 and s["xadd"] > 100 and s["acked"] > 20, (s, seed)
    assert crash.nprocs >= 5, crash.nprocs     # Patroni, the postmaster and its children
    assert crash.outage < OUTAGE_MAX, crash.outage


@timeout(TIMEOUT)
def test_failover_pg_stopped(server):
    seed = int(time.time())
    with pgtmp.Cluster() as pg:
        pair = Pair(server.exe, pg.url, "fo_c").start()
        try:
            crash = PgStop(pg)
            cycles, model, secs = run(pair, crash, seed, 3, 120.0)
        finally:
            pair.stop()
    s = model.stats
    print("# 27-failover PostgreSQL stopped: %d cycles in %.0f s, seed %d, %s; %s"
          % (cycles, secs, seed, crash.summary(), driver.stats_line(model)), flush=True)
    assert cycles == 3 and s["xadd"] > 50, (s, seed)
    # the outages did reach the clients: some replies never came
    assert s["xadd_unknown"] + s["ack_unknown"] > 0, (s, seed)
