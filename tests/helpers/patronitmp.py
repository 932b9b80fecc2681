"""patronitmp.py - a throw-away Patroni cluster for echd's tests, on loopback.

    with patronitmp.Cluster() as pc:
        pc.url                    # libpq multi-host URL of the three nodes, read-write
        pc.leader(), pc.sync_standby()    # member names, from Patroni's REST API
        pc.kill_node(name)        # SIGKILL of that node's Patroni and all its PostgreSQL
        pc.wait_leader(not_name=name, limit=60)

What it starts, each on 127.0.0.1 at free ports, under one temporary directory:

  * one etcd (Debian's etcd-server), the DCS. A single member is enough for a test: what is
    under test is Patroni's failover of PostgreSQL, not etcd's own availability. Production
    runs three or five etcd members on separate machines (docs/operations.md).
  * three Patroni nodes (Debian's patroni), n0 to n2, each managing a PostgreSQL from
    Debian (the newest /usr/lib/postgresql/N/bin, as pgtmp.py finds it: 15 on Debian 12).
    Patroni and PostgreSQL run as the postgres user when the test runs as root (initdb
    refuses root). Patroni bootstraps n0 (initdb), the others by pg_basebackup from the
    leader.

synchronous_mode is on: Patroni names one standby in synchronous_standby_names, the
primary's commits wait for it (synchronous_commit on), and only that standby may be
promoted, so a failover keeps every commit the primary acknowledged.

Timing (dynamic configuration in the DCS): ttl 10, loop_wait 2, retry_timeout 4 (Patroni's
rule: loop_wait + 2 * retry_timeout <= ttl), so a failover after a dead primary takes about
ttl: the leader key expires, the synchronous standby takes it and promotes. Patroni's
defaults (ttl 30, loop_wait 10, retry_timeout 10) are what production should start from:
a short ttl fails over on a leader that was only slow, and Patroni 3.2 and later raise a ttl
under 20 to 20. The clusters run with fsync off (as pgtmp.py's do): a test kills processes, it never
cuts the power.

Teardown is bounded: every process started here (etcd, the Patroni daemons, and the
PostgreSQL processes Patroni starts in their own sessions, which are no children of ours) is
found by its working directory under the cluster's directory and killed with SIGKILL; then
the directory is removed. The same happens when start-up fails.
"""

import glob
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pgtmp import _as_postgres, free_port, pg_bindir  # noqa: E402

PATRONI = "/usr/bin/patroni"
ETCD = "/usr/bin/etcd"
NODES = 3
TTL, LOOP_WAIT, RETRY_TIMEOUT = 10, 2, 4
START_TIMEOUT = 90.0
REPL_USER, REPL_PASSWORD = "replicator", "repl-test"


def http_json(url, timeout=2.0):
    """GET of a JSON document; None when the server does not answer (or not with JSON)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        # Patroni answers some health endpoints with 503 and a JSON body
        try:
            return json.loads(e.read().decode())
        except ValueError:
            return None
    except (OSError, ValueError):
        return None


def procs_under(path):
    """pids of the processes whose working directory is path or below it. PostgreSQL's
    postmaster and every backend run in their data directory, Patroni and etcd in the
    directory they are started in (see Node.start)."""
    out = []
    prefix = path.rstrip("/") + "/"
    for d in glob.glob("/proc/[0-9]*"):
        try:
            cwd = os.readlink(d + "/cwd")
        except OSError:
            continue                    # gone, a zombie, or not ours to see
        if cwd == path or cwd.startswith(prefix):
            out.append(int(d[6:]))
    return out


def signal_pids(pids, sig):
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


def kill_under(path, limit=15.0):
    """SIGKILL of every process under path (procs_under), frozen first with SIGSTOP so that
    none forks or restarts another between the look and the kill; waits (at most limit
    seconds) until none is left. Returns the pids killed."""
    me = os.getpid()
    stopped = set()
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        new = [p for p in procs_under(path) if p not in stopped and p != me]
        if not new:
            break
        signal_pids(new, signal.SIGSTOP)
        stopped.update(new)
    signal_pids(stopped, signal.SIGKILL)
    while time.monotonic() < deadline:
        left = [p for p in procs_under(path) if p != me]
        if not left:
            break
        signal_pids(left, signal.SIGKILL)
        time.sleep(0.05)
    return sorted(stopped)


def tail(path, n):
    """The last n lines of a log file ("" if there is none)."""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def _chown_postgres(path):
    if os.getuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(path, pw.pw_uid, pw.pw_gid)


class Etcd:
    """One etcd member (v3 API) on 127.0.0.1."""

    def __init__(self, root):
        self.dir = os.path.join(root, "etcd")
        os.mkdir(self.dir)
        self.port = free_port()
        self.peer_port = free_port()
        self.log = os.path.join(self.dir, "etcd.log")
        self.proc = None

    @property
    def endpoint(self):
        return "127.0.0.1:%d" % self.port

    def start(self):
        client = "http://127.0.0.1:%d" % self.port
        peer = "http://127.0.0.1:%d" % self.peer_port
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen(
                [ETCD, "--name", "e0", "--data-dir", os.path.join(self.dir, "data"),
                 "--listen-client-urls", client, "--advertise-client-urls", client,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", "e0=" + peer, "--initial-cluster-state", "new",
                 "--initial-cluster-token", os.path.basename(os.path.dirname(self.dir))],
                cwd=self.dir, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("etcd exited during start-up:\n" + self.log_tail())
            h = http_json("http://%s/health" % self.endpoint)
            if h and h.get("health") == "true":
                return self
            time.sleep(0.1)
        raise RuntimeError("etcd did not start within 30 s:\n" + self.log_tail())

    def log_tail(self, n=20):
        return tail(self.log, n)


class Node:
    """One Patroni daemon and the PostgreSQL it manages."""

    def __init__(self, root, name, scope, etcd, bindir, synchronous=True):
        self.name = name
        self.dir = os.path.join(root, name)
        os.mkdir(self.dir)
        _chown_postgres(self.dir)
        self.pg_port = free_port()
        self.api_port = free_port()
        self.datadir = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "patroni.log")
        self.conf = os.path.join(self.dir, "patroni.yml")
        self.proc = None
        pg_params = {
            "max_connections": 200,
            "fsync": "off",                 # see the module's doc
            "wal_keep_size": "256MB",
        }
        conf = {
            "scope": scope,
            "namespace": "/echd-test/",
            "name": name,
            "log": {"level": "INFO"},
            "restapi": {"listen": "127.0.0.1:%d" % self.api_port,
                        "connect_address": "127.0.0.1:%d" % self.api_port},
            # etcd3: Patroni's own client of etcd's v3 API (etcd 3.4 serves v2 only when asked)
            "etcd3": {"hosts": [etcd.endpoint]},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL, "loop_wait": LOOP_WAIT, "retry_timeout": RETRY_TIMEOUT,
                    "maximum_lag_on_failover": 1048576,
                    "synchronous_mode": synchronous,
                    "postgresql": {"use_pg_rewind": False, "use_slots": True,
                                   "parameters": pg_params},
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}, "no-sync"],
            },
            "postgresql": {
                "listen": "127.0.0.1:%d" % self.pg_port,
                "connect_address": "127.0.0.1:%d" % self.pg_port,
                "data_dir": self.datadir,
                "bin_dir": bindir,
                "pgpass": os.path.join(self.dir, "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "su-test"},
                    "replication": {"username": REPL_USER, "password": REPL_PASSWORD},
                },
                # the socket in the node's own directory, not /var/run/postgresql, which
                # another cluster on this machine may use for the same port number
                "parameters": {"unix_socket_directories": self.dir},
                # loopback only, trust: a throw-away test cluster
                "pg_hba": ["local all all trust",
                           "host all all 127.0.0.1/32 trust",
                           "host replication all 127.0.0.1/32 trust"],
                "basebackup": [{"checkpoint": "fast"}],
            },
            "watchdog": {"mode": "off"},
        }
        # YAML is a superset of JSON: Patroni reads this as its YAML configuration
        with open(self.conf, "w") as f:
            json.dump(conf, f, indent=2)
        _chown_postgres(self.conf)

    def start(self):
        with open(self.log, "ab") as logf:
            _chown_postgres(self.log)
            env = {"PATH": "/usr/bin:/bin", "HOME": self.dir, "LC_ALL": "C.UTF-8",
                   "PYTHONUNBUFFERED": "1"}
            self.proc = subprocess.Popen([PATRONI, self.conf], cwd=self.dir, env=env,
                                         stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                         preexec_fn=_as_postgres(), start_new_session=True)
        return self

    def api(self, path="/patroni", timeout=2.0):
        return http_json("http://127.0.0.1:%d%s" % (self.api_port, path), timeout)

    def pids(self, word):
        """pids of this node's processes whose command line has word (e.g. walsender)."""
        out = []
        for p in procs_under(self.dir):
            try:
                with open("/proc/%d/cmdline" % p, "rb") as f:
                    if word.encode() in f.read():
                        out.append(p)
            except OSError:
                pass
        return out

    def kill(self):
        """SIGKILL of this node's Patroni and every PostgreSQL process of it (the postmaster
        and its backends, which are not Patroni's children: Patroni starts PostgreSQL in a
        session of its own, and each backend calls setsid(), see pgtmp.pause()). Returns the
        number of processes killed."""
        pids = kill_under(self.dir)
        if self.proc is not None:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        return len(pids)

    def log_tail(self, n=30):
        return tail(self.log, n)


class Cluster:
    """An etcd and NODES Patroni nodes; see the module's doc."""

    def __init__(self, nodes=NODES, synchronous=True):
        """synchronous: Patroni's synchronous_mode (False only to show what an asynchronous
        cluster loses)."""
        for exe, pkg in ((PATRONI, "patroni"), (ETCD, "etcd-server")):
            if not os.access(exe, os.X_OK):
                raise RuntimeError("%s is missing: install Debian's %s (tools/echd-dev deps)"
                                   % (exe, pkg))
        self.bin = pg_bindir()
        self.root = tempfile.mkdtemp(prefix="echd-patroni-")
        os.chmod(self.root, 0o755)
        self.scope = os.path.basename(self.root)
        self.etcd = None
        self.nodes = []
        self.n = nodes
        self.synchronous = synchronous
        self.user = "postgres" if os.getuid() == 0 else pwd.getpwuid(os.getuid()).pw_name

    def start(self, limit=START_TIMEOUT):
        self.etcd = Etcd(self.root).start()
        self.nodes = [Node(self.root, "n%d" % i, self.scope, self.etcd, self.bin,
                           self.synchronous) for i in range(self.n)]
        for node in self.nodes:
            node.start()
        self.wait_healthy(limit)
        return self

    def node(self, name):
        return next(n for n in self.nodes if n.name == name)

    @property
    def url(self):
        """Every node, in order; libpq keeps the first that takes writes (the primary)."""
        hosts = ",".join("127.0.0.1:%d" % n.pg_port for n in self.nodes)
        return ("postgresql://%s@%s/postgres?target_session_attrs=read-write&connect_timeout=2"
                % (self.user, hosts))

    def members(self, exclude=()):
        """Patroni's view of the cluster (GET /cluster of the first node that answers):
        a list of {name, role (leader, sync_standby, replica), state, ...}, or None."""
        for n in self.nodes:
            if n.name in exclude:
                continue
            c = n.api("/cluster")
            if c and "members" in c:
                return c["members"]
        return None

    def _role(self, role, exclude=()):
        """The one running member with role (excluded ones neither asked nor counted)."""
        ms = self.members(exclude) or []
        names = [m["name"] for m in ms if m.get("role") == role
                 and m.get("state") == "running" and m["name"] not in exclude]
        return names[0] if len(names) == 1 else None

    def leader(self, exclude=()):
        return self._role("leader", exclude)

    def sync_standby(self, exclude=()):
        return self._role("sync_standby", exclude)

    def psql(self, node, sql):
        r = subprocess.run([os.path.join(self.bin, "psql"), "-X", "-q", "-A", "-t",
                            "-h", "127.0.0.1", "-p", str(node.pg_port), "-U", self.user,
                            "-d", "postgres", "-c", sql],
                           capture_output=True, text=True, timeout=20)
        return r.stdout.strip() if r.returncode == 0 else None

    def wait_healthy(self, limit, exclude=()):
        """Until a leader streams to every other (not excluded) node, one of them
        synchronous, as Patroni and pg_stat_replication both say. Returns the leader."""
        deadline = time.monotonic() + limit
        want = self.n - len(exclude) - 1
        while True:
            lead = self.leader(exclude)
            sync = self.sync_standby(exclude)
            if lead and (sync or not self.synchronous):
                row = self.psql(self.node(lead), "SELECT count(*) FILTER (WHERE sync_state = "
                                "'sync'), count(*) FROM pg_stat_replication WHERE state = "
                                "'streaming'")
                if row == "%d|%d" % (1 if self.synchronous else 0, want):
                    return lead
            if time.monotonic() > deadline:
                raise RuntimeError("no healthy Patroni cluster within %.0f s (leader %s, "
                                   "sync standby %s); members %s\n%s"
                                   % (limit, lead, sync, self.members(exclude),
                                      self.logs(exclude)))
            for n in self.nodes:
                if n.name not in exclude and n.proc.poll() is not None:
                    raise RuntimeError("Patroni %s exited with status %s:\n%s"
                                       % (n.name, n.proc.returncode, n.log_tail()))
            time.sleep(0.2)

    def wait_leader(self, not_name, limit):
        """Until a member other than not_name is the running leader; returns its name."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            lead = self.leader(exclude=(not_name,))
            if lead:
                return lead
            time.sleep(0.1)
        raise RuntimeError("no new leader within %.0f s; members %s\n%s"
                           % (limit, self.members((not_name,)), self.logs((not_name,))))

    def kill_node(self, name):
        return self.node(name).kill()

    def logs(self, exclude=(), n=15):
        return "\n".join("--- %s\n%s" % (x.name, x.log_tail(n)) for x in self.nodes
                         if x.name not in exclude)

    def cleanup(self):
        """Kills everything under the cluster's directory (see kill_under) and removes it."""
        kill_under(self.root, limit=30.0)
        for n in self.nodes:
            if n.proc is not None:
                try:
                    n.proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
        if self.etcd is not None and self.etcd.proc is not None:
            try:
                self.etcd.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, *exc):
        self.cleanup()
        return False


def main(argv):
    """patronitmp.py up: starts a cluster, prints its URL and members, waits for ^C."""
    if argv != ["up"]:
        sys.stderr.write(__doc__)
        return 2
    with Cluster() as pc:
        print(pc.url)
        print(json.dumps(pc.members(), indent=1))
        print("directory", pc.root, "; ^C stops it", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
