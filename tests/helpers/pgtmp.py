#!/usr/bin/python3
"""pgtmp.py - a throw-away PostgreSQL cluster for echd's tests.

    pgtmp.py run -- CMD ARGS...
        starts a cluster (initdb as the postgres user in a temporary directory, listening on
        127.0.0.1 at a free port, its unix socket in that directory), runs CMD with
        ECHD_TEST_PG_URL set to a libpq URI of it (and ECHD_TEST_PG_BIN to the server's
        bin directory), stops the cluster and removes it; exits with CMD's status.

As a module: `with pgtmp.Cluster() as pg: pg.url`, and pg.psql(sql) for a side channel.
Cluster.start_replica() makes a streaming standby of it (pg_basebackup), for tests of a
PostgreSQL failover; Cluster.stop(mode) and kill() stop it.

Nothing leaves loopback; every process started is stopped, also when CMD fails.
"""

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

START_TIMEOUT = 60.0


def pg_bindir():
    """The newest installed server's bin directory (Debian: /usr/lib/postgresql/N/bin)."""
    cands = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    if not cands:
        raise RuntimeError("no PostgreSQL server installed (Debian package postgresql)")
    return os.path.dirname(cands[-1])


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_postgres():
    """preexec_fn: drop to the postgres user when running as root (initdb refuses root)."""
    if os.getuid() != 0:
        return None
    pw = pwd.getpwnam("postgres")

    def drop():
        os.setgid(pw.pw_gid)
        os.initgroups("postgres", pw.pw_gid)
        os.setuid(pw.pw_uid)
    return drop


class Cluster:
    """One PostgreSQL server in its own temporary directory on 127.0.0.1."""

    def __init__(self, root=None, port=None, datadir=None, user=None, fsync=False):
        self.bin = pg_bindir()
        # A test's cluster runs without fsync: kill -9 of PostgreSQL (what the failover tests
        # do) keeps what its commits wrote to the page cache, and no test cuts the power.
        # Benchmarks ask for fsync, as production has it.
        self.fsync = fsync
        self.own_root = root is None
        self.root = root or tempfile.mkdtemp(prefix="echd-pg-")
        self.datadir = datadir or os.path.join(self.root, "data")
        self.sockdir = self.root
        self.port = port or free_port()
        self.log = os.path.join(self.root, "pg-%d.log" % self.port)
        self.proc = None
        self.replicas = []
        if os.getuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chmod(self.root, 0o755)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            self.user = "postgres"
        else:
            self.user = user or pwd.getpwuid(os.getuid()).pw_name

    # -- set-up
    def initdb(self):
        subprocess.run([os.path.join(self.bin, "initdb"), "-D", self.datadir, "-U", self.user,
                        "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       preexec_fn=_as_postgres())
        with open(os.path.join(self.datadir, "postgresql.conf"), "a") as f:
            f.write("\n# pgtmp.py\nlisten_addresses = '127.0.0.1'\nport = %d\n"
                    "unix_socket_directories = '%s'\nmax_connections = 200\n"
                    "wal_level = replica\nmax_wal_senders = 5\nfsync = %s\n"
                    "logging_collector = off\n"
                    % (self.port, self.sockdir, "on" if self.fsync else "off"))
        with open(os.path.join(self.datadir, "pg_hba.conf"), "a") as f:
            f.write("host replication all 127.0.0.1/32 trust\n")
        return self

    def start(self):
        logf = open(self.log, "ab")
        if os.getuid() == 0:
            os.chown(self.log, pwd.getpwnam("postgres").pw_uid, -1)
        self.proc = subprocess.Popen([os.path.join(self.bin, "postgres"), "-D", self.datadir],
                                     stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                     preexec_fn=_as_postgres(), start_new_session=True)
        logf.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("postgres exited during start-up:\n" + self.log_tail())
            r = subprocess.run([os.path.join(self.bin, "pg_isready"), "-h", "127.0.0.1",
                                "-p", str(self.port), "-q"])
            if r.returncode == 0:
                return self
            time.sleep(0.1)
        self.kill()
        raise RuntimeError("postgres did not start within %.0f s:\n%s"
                           % (START_TIMEOUT, self.log_tail()))

    def log_tail(self, n=30):
        try:
            with open(self.log, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    @property
    def url(self):
        return "postgresql://%s@127.0.0.1:%d/postgres?connect_timeout=5" % (self.user, self.port)

    def psql(self, sql, db="postgres", check=True):
        """Runs sql with psql over TCP; returns its unaligned, tuples-only output."""
        r = subprocess.run([os.path.join(self.bin, "psql") if os.path.exists(
                               os.path.join(self.bin, "psql")) else "psql",
                            "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                            "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user,
                            "-d", db, "-c", sql],
                           capture_output=True, text=True, timeout=60)
        if check and r.returncode != 0:
            raise RuntimeError("psql failed: %s\n%s" % (sql, r.stderr))
        return r.stdout.strip()

    # -- a streaming standby, for tests of a PostgreSQL failover
    def start_replica(self, synchronous=True):
        """A standby of this cluster, streaming from it; with synchronous, the primary waits
        for it at each commit (synchronous_standby_names). Returns the started Cluster."""
        rep = Cluster(fsync=self.fsync)
        rep.user = self.user
        subprocess.run([os.path.join(self.bin, "pg_basebackup"), "-h", "127.0.0.1",
                        "-p", str(self.port), "-U", self.user, "-D", rep.datadir, "-R",
                        "-X", "stream", "--no-sync", "-c", "fast"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       preexec_fn=_as_postgres())
        # postgresql.auto.conf, where -R put its primary_conninfo: read last, so it wins
        with open(os.path.join(rep.datadir, "postgresql.auto.conf"), "a") as f:
            f.write("\n# pgtmp.py replica\nport = %d\nunix_socket_directories = '%s'\n"
                    "primary_conninfo = 'host=127.0.0.1 port=%d user=%s application_name=rep%d'\n"
                    % (rep.port, rep.sockdir, self.port, self.user, rep.port))
        rep.start()
        self.replicas.append(rep)
        if synchronous:
            self.psql("ALTER SYSTEM SET synchronous_standby_names = 'rep%d'" % rep.port)
            self.psql("SELECT pg_reload_conf()")
            deadline = time.monotonic() + START_TIMEOUT
            while self.psql("SELECT count(*) FROM pg_stat_replication WHERE "
                            "sync_state = 'sync'") != "1":
                if time.monotonic() > deadline:
                    raise RuntimeError("the replica did not become synchronous")
                time.sleep(0.1)
        return rep

    def promote(self):
        subprocess.run([os.path.join(self.bin, "pg_ctl"), "promote", "-w", "-D", self.datadir],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       preexec_fn=_as_postgres())

    # -- its processes: the postmaster and its children (each backend calls setsid(), so a
    # signal to the postmaster's process group reaches the postmaster alone)
    def pids(self):
        if self.proc is None or self.proc.poll() is not None:
            return []
        out = [self.proc.pid]
        for task in glob.glob("/proc/%d/task/*/children" % self.proc.pid):
            try:
                with open(task) as f:
                    out += [int(x) for x in f.read().split()]
            except OSError:
                pass
        return out

    def signal_all(self, sig):
        for pid in self.pids():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def pause(self):
        """SIGSTOP of the postmaster (first: it forks no more) and every backend."""
        self.signal_all(signal.SIGSTOP)

    def resume(self):
        self.signal_all(signal.SIGCONT)

    # -- tear-down
    def kill(self, sig=signal.SIGKILL):
        """Kills the postmaster and its children (SIGKILL: no shutdown at all) and waits."""
        if self.proc is not None and self.proc.poll() is None:
            self.signal_all(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def stop(self):
        """A fast shutdown (SIGINT), SIGKILL if it takes over 30 s."""
        if self.proc is not None and self.proc.poll() is None:
            self.resume()                               # a test may have paused it
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def cleanup(self):
        for r in self.replicas:
            r.cleanup()
        self.replicas = []
        self.stop()
        if self.own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self):
        try:
            return self.initdb().start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, *exc):
        self.cleanup()
        return False


def main(argv):
    if len(argv) < 3 or argv[0] != "run" or "--" not in argv:
        sys.stderr.write(__doc__)
        return 2
    cmd = argv[argv.index("--") + 1:]
    if not cmd:
        sys.stderr.write(__doc__)
        return 2
    try:
        with Cluster() as pg:
            env = dict(os.environ, ECHD_TEST_PG_URL=pg.url, ECHD_TEST_PG_BIN=pg.bin)
            return subprocess.run(cmd, env=env).returncode
    except (RuntimeError, subprocess.CalledProcessError) as e:
        msg = getattr(e, "stderr", None) or b""
        if isinstance(msg, bytes):
            msg = msg.decode(errors="replace")
        sys.stderr.write("pgtmp: %s\n%s\n" % (e, msg))
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
