"""Support library for echd's end-to-end tests (see run.py).

A test module (NN-area-what.py) defines functions ``test_*(server)``.  ``server`` is a
:class:`Server`: a real echd (or, to validate the tests themselves, a real redis-server)
on a free loopback port with a fresh temporary data directory.  One server is shared by
all tests of a module and FLUSHALL runs before each test.

Module-level settings a test module may define:
    SERVER_ARGS = [...]   extra server arguments for echd and redis alike
    ECHD_ARGS = [...]     extra arguments for echd only
    REDIS_ARGS = [...]    extra arguments for redis only
    TIMEOUT = 60          default per-test timeout in seconds

    TLS_SUITE = False     the module is not run by run.py --tls (its reason in TLS_SUITE_WHY)
    PG_SUITE = False      the module is not run by run.py --storage postgres (its reason in
                          PG_SUITE_WHY): it is about LMDB itself

The whole suite on PostgreSQL (run.py --storage postgres, echd only): every echd Server
(spawn() and restarts included) stores in a schema of its own on one throw-away PostgreSQL
cluster (enable_pg()); a restart keeps the schema, so a persistence test sees its data
again. Its --dir stays (echd keeps its lock and logs there). A Server whose extra arguments
name their own backend or store (--storage, --storage-backend, --storage-url) keeps it. The
after-each-test check reads that schema (echo-admin --storage-url URL --storage-pg-schema
NAME check). A test about LMDB itself carries @lmdb_only("why"), one about PostgreSQL
@pg_only("why").

The whole suite over TLS (run.py --tls, echd only): every echd Server also listens on a TLS
port with a throw-away certificate (enable_tls()), and the harness' own clients -- RespConn
to a server's port, Server.client() (redis-py) and Server.cli() (redis-cli) -- go through
that port; the plain port stays open for what a test starts itself (echo-admin, sockets).
server.client_port is the port those clients use.

Decorators:
    @echd_only("why")     collected only when testing echd (e.g. Redis 7.0, the oracle on
                          this machine, differs from the Redis 7.4 documentation, or the
                          behaviour is echd's own).  Such a test always runs against echd.
    @timeout(seconds)     per-test timeout other than the module's.
    @lmdb_only("why")     not collected by run.py --storage postgres (about LMDB itself:
                          its files, its map, its fsyncs).
    @pg_only("why")       collected only by run.py --storage postgres (about PostgreSQL).

Replies from :class:`RespConn` are decoded without interpretation: simple strings are
``str``, bulk strings ``bytes``, errors :class:`RespError` (raised by ``call``, returned by
``err``), nulls ``None``, arrays ``list``, RESP3 maps ``dict``, sets :class:`RSet`, pushes
:class:`Push`, verbatim strings :class:`Verbatim`, doubles ``float``, booleans ``bool``.
Use it wherever the exact reply matters: redis-py strips the "ERR " prefix from errors
and converts many replies.
"""

import base64
import collections
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time

import redis

STARTUP_TIMEOUT = float(os.environ.get("E2E_STARTUP_TIMEOUT", "5"))
REDIS_CLI = os.environ.get("REDIS_CLI", shutil.which("redis-cli") or "/usr/bin/redis-cli")


# ---------------------------------------------------------------------------
# Decorators
# ---------------------------------------------------------------------------

def admin_exe(echd_exe):
    """echo-admin of the same build: <build>/tools/echo-admin beside <build>/broker/echd,
    or $ECHD_ADMIN (for an echd run through a wrapper, as under valgrind)."""
    return os.environ.get("ECHD_ADMIN") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(echd_exe))), "tools", "echo-admin")


def check_data(echd_exe, data_dir, timeout=120, pg_schema=None):
    """`echo-admin check` of a data directory (live or not: it reads one snapshot), so that a
    stored counter or index out of step with the rows fails whatever test ran; with
    pg_schema, of that schema on the suite's PostgreSQL (enable_pg()) instead. Returns None,
    or a text saying what is wrong."""
    admin = admin_exe(echd_exe)
    if not os.access(admin, os.X_OK):
        return "echo-admin not found at %s (built with echd; or set ECHD_ADMIN)\n" % admin
    if pg_schema is not None:
        cmd, what = [admin] + pg_admin_args(pg_schema) + ["check"], "schema " + pg_schema
    else:
        cmd, what = [admin, "check", data_dir], data_dir
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "echo-admin check %s did not finish within %d s\n" % (what, timeout)
    if p.returncode != 0:
        return "echo-admin check %s exited %d:\n%s%s" % (what, p.returncode, p.stdout,
                                                       p.stderr)
    return None


def echd_only(reason):
    """Collect the decorated test only when the server under test is echd."""
    def deco(fn):
        fn.echd_only = reason
        return fn
    return deco


def timeout(seconds):
    def deco(fn):
        fn.timeout = seconds
        return fn
    return deco


def lmdb_only(reason):
    """Leave the decorated test out of the pass on PostgreSQL: it is about LMDB itself."""
    def deco(fn):
        fn.lmdb_only = reason
        return fn
    return deco


def pg_only(reason):
    """Collect the decorated test only in the pass on PostgreSQL (run.py --storage
    postgres): it is about the postgres backend itself."""
    def deco(fn):
        fn.pg_only = reason
        return fn
    return deco


# ---------------------------------------------------------------------------
# A minimal RESP2/RESP3 client on a raw socket
# ---------------------------------------------------------------------------

class RespError(Exception):
    """An error reply; .msg is the whole line without '-' (e.g. 'ERR syntax error')."""

    def __init__(self, msg):
        super().__init__(msg)
        self.msg = msg

    def __eq__(self, other):
        return isinstance(other, RespError) and other.msg == self.msg

    def __hash__(self):
        return hash(self.msg)

    def __repr__(self):
        return "RespError(%r)" % self.msg


class RSet(list):
    """A RESP3 set (order as sent)."""


class Push(list):
    """A RESP3 push message."""


class Verbatim(bytes):
    """A RESP3 verbatim string; .fmt is its 3-letter format ('txt', 'mkd')."""
    fmt = None


class Closed(Exception):
    """The server closed the connection."""


def encode_command(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, int):
            a = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


# ---------------------------------------------------------------------------
# The suite over TLS
# ---------------------------------------------------------------------------

TLS = None          # after enable_tls(): {"ca": path, "cert": path, "key": path}
_TLS_SERVER = {}    # a plain port -> the Server whose clients go to its TLS port


def make_cert(workdir):
    """A CA and a server certificate for 127.0.0.1/localhost in workdir (openssl, EC P-256):
    the paths {"ca", "cert", "key"}."""
    def run(*args):
        subprocess.run(["openssl"] + list(args), cwd=workdir, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=e2e-ca",
        "-days", "2")
    run("req", "-new", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=e2e")
    with open(os.path.join(workdir, "server.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "server.ext")
    return {k: os.path.join(workdir, v) for k, v in
            (("ca", "ca.crt"), ("cert", "server.crt"), ("key", "server.key"))}


def enable_tls(workdir):
    """Makes a certificate (make_cert) in workdir and turns TLS on for every echd Server
    made from now on."""
    global TLS
    TLS = make_cert(workdir)


def http_server(server, *extra):
    """An echd of its own (server.spawn) with an HTTP listener: (Server, http port)."""
    port = free_port()
    return server.spawn("--http-port", str(port), *extra), port


def basic_auth(user, password):
    """An HTTP Authorization header's value for user:password."""
    return "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()


# ---------------------------------------------------------------------------
# The suite on PostgreSQL
# ---------------------------------------------------------------------------

PG_URL = None       # after enable_pg(): the libpq URI every echd Server stores at
PG_TIMEOUT_MS = None  # after enable_pg(): storage-timeout-ms to give echd (None: echd has none)
# E2E_PG_CACHE_SIZE (e.g. "1", "64kb"): storage-cache-size for every echd on PostgreSQL, so
# that entries are evicted at every idle turn and each test reads them back from
# PostgreSQL (the partial cache's cold path); unset: echd's default.
PG_CACHE_SIZE = os.environ.get("E2E_PG_CACHE_SIZE") or None
_pg_schemas = 0


def enable_pg(url, echd_exe):
    """Every echd Server made from now on stores in a schema of its own at url."""
    global PG_URL, PG_TIMEOUT_MS
    PG_URL, PG_TIMEOUT_MS = url, None
    # A loaded CI machine's PostgreSQL (fsync on) may take seconds over one commit of a
    # 32 MiB entry (23-latency): echd's 5 s default would take that for a lost connection.
    out = subprocess.run([echd_exe, "--list-options"], capture_output=True, text=True,
                         timeout=30, stdin=subprocess.DEVNULL).stdout
    if any(line.split("\t")[0] == "storage-timeout-ms" for line in out.splitlines()):
        PG_TIMEOUT_MS = int(os.environ.get("E2E_PG_TIMEOUT_MS", "60000"))


# ---------------------------------------------------------------------------
# The suite on lmdb-staged (issue 33): run.py --storage lmdb-staged, by hand
# ---------------------------------------------------------------------------

STAGED_ARGS = None  # after enable_staged(): the arguments every echd Server gets


def enable_staged(stage_size):
    """Every echd Server made from now on stores on lmdb-staged, with a staging table of
    stage_size (small: rows are filed home while the tests run, and it is often full)."""
    global STAGED_ARGS
    STAGED_ARGS = ["--storage", "lmdb-staged", "--storage-stage-size", stage_size]


def pg_new_schema():
    """A schema name no other Server of this run uses (echd creates it on first open)."""
    global _pg_schemas
    _pg_schemas += 1
    return "e2e_%d_%d" % (os.getpid(), _pg_schemas)


def pg_admin_args(schema):
    """echo-admin's options that read schema on the suite's PostgreSQL."""
    return ["--storage-url", PG_URL, "--storage-pg-schema", schema]


def pg_sql(sql, timeout=30):
    """Runs sql with psql on the suite's PostgreSQL, a side channel beside echd; returns its
    unaligned, tuples-only output. Raises AssertionError if it fails."""
    bindir = os.environ.get("ECHD_TEST_PG_BIN", "")
    psql = os.path.join(bindir, "psql") if bindir and os.path.exists(
        os.path.join(bindir, "psql")) else (shutil.which("psql") or "psql")
    p = subprocess.run([psql, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", PG_URL,
                        "-c", sql], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=timeout)
    if p.returncode != 0:
        raise AssertionError("psql failed (%d): %s\n%s" % (p.returncode, sql, p.stderr))
    return p.stdout.strip()


def pg_drop_schema(schema):
    """Drops a Server's schema once it is removed (best effort: the cluster is thrown away
    at the end of the pass anyway)."""
    try:
        pg_sql('DROP SCHEMA IF EXISTS "%s" CASCADE' % schema)
    except (OSError, subprocess.TimeoutExpired, AssertionError):
        pass


def tls_context():
    return ssl.create_default_context(cafile=TLS["ca"])


class RespConn:
    def __init__(self, port, host="127.0.0.1", timeout=30.0, plain=False):
        srv = None if plain else _TLS_SERVER.get(port)
        # only while that server runs: its port may go to another server later
        tls_port = srv.suite_tls_port if srv is not None and srv.alive() else None
        self.sock = socket.create_connection((host, tls_port or port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls_port:
            self.sock = tls_context().wrap_socket(self.sock, server_hostname=host)
        self.buf = bytearray()
        self.pos = 0
        self.history = collections.deque(maxlen=6)  # (command, reply) for failure reports

    def _note(self, args, reply):
        def short(x, n):
            r = repr(x)
            return r if len(r) <= n else r[:n] + "...(%d chars)" % len(r)
        self.history.append("%s -> %s" % (" ".join(short(a, 40) for a in args)
                                          if args else "(read)", short(reply, 300)))

    def describe(self):
        try:
            port = self.sock.getsockname()[1]
        except OSError:
            port = "?"
        return "connection :%s, last exchanges:\n    %s" % (port, "\n    ".join(self.history))

    # -- sending
    def send_raw(self, data):
        self.sock.sendall(data)

    def send(self, *args):
        self.sock.sendall(encode_command(*args))

    # -- receiving
    def _compact(self):
        # only between replies: read_raw() slices the buffer from a reply's start
        if self.pos > 65536 and self.pos > len(self.buf) // 2:
            del self.buf[:self.pos]
            self.pos = 0

    def _fill(self):
        data = self.sock.recv(1 << 20)
        if not data:
            raise Closed("connection closed by server")
        self.buf += data

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n", self.pos)
            if i >= 0:
                line = bytes(self.buf[self.pos:i])
                self.pos = i + 2
                return line
            self._fill()

    def _exact(self, n):
        while len(self.buf) - self.pos < n + 2:
            self._fill()
        data = bytes(self.buf[self.pos:self.pos + n])
        if self.buf[self.pos + n:self.pos + n + 2] != b"\r\n":
            raise AssertionError("bulk string not terminated by CRLF")
        self.pos += n + 2
        return data

    def read(self, _args=None):
        """Read one reply. Errors are returned (not raised) as RespError."""
        self._compact()
        r = self._read()
        self._note(_args, r)
        return r

    def _read(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            return RespError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if t in (b"*", b"~", b">"):
            n = int(rest)
            if n < 0:
                return None
            items = [self._read() for _ in range(n)]
            return items if t == b"*" else (RSet(items) if t == b"~" else Push(items))
        if t == b"%":
            n = int(rest)
            d = {}
            for _ in range(n):
                k = self._read()
                if isinstance(k, list):
                    k = tuple(k)
                d[k] = self._read()
            return d
        if t == b"|":  # attribute: skip it, return the reply it annotates
            n = int(rest)
            for _ in range(2 * n):
                self._read()
            return self._read()
        if t == b"_":
            return None
        if t == b",":
            return float(rest)          # also "inf", "-inf", "nan"
        if t == b"#":
            return rest == b"t"
        if t == b"(":
            return int(rest)
        if t == b"=":
            data = self._exact(int(rest))
            v = Verbatim(data[4:])
            v.fmt = data[:3].decode()
            return v
        if t == b"!":
            return RespError(self._exact(int(rest)).decode())
        raise AssertionError("unexpected RESP type byte in %r" % line[:80])

    def read_raw(self, _args=None):
        """Read one reply and return its exact bytes on the wire."""
        self._compact()
        start = self.pos
        self._read()
        raw = bytes(self.buf[start:self.pos])
        self._note(_args, raw)
        return raw

    def call(self, *args):
        self.send(*args)
        r = self.read(args)
        if isinstance(r, RespError):
            raise r
        return r

    def call_raw(self, *args):
        self.send(*args)
        return self.read_raw(args)

    def err(self, *args):
        """Send a command that must fail; return its error message (e.g. 'ERR syntax error')."""
        self.send(*args)
        r = self.read(args)
        assert isinstance(r, RespError), "expected an error reply to %r, got %r" % (args, r)
        return r.msg

    def pipeline(self, commands):
        """Send all commands in one write, then read one reply per command (errors returned)."""
        self.sock.sendall(b"".join(encode_command(*c) for c in commands))
        return [self.read(c) for c in commands]

    def wait_closed(self, timeout=5.0):
        """True if the server closes the connection within timeout (pending input is discarded)."""
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                self.sock.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    data = self.sock.recv(1 << 20)
                except socket.timeout:
                    continue
                if not data:
                    return True
            return False
        except (ConnectionResetError, BrokenPipeError):
            return True

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


# ---------------------------------------------------------------------------
# Servers
# ---------------------------------------------------------------------------

def free_ports(n):
    """n distinct free ports: the sockets stay bound until all are picked, or the kernel may
    hand out the same port twice (a --port equal to --tls-port then fails to start)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port():
    return free_ports(1)[0]


class ServerError(Exception):
    pass


class Server:
    """One echd or redis-server process on 127.0.0.1, data in its own temporary dir."""

    def __init__(self, kind, exe, extra_args=(), root=None):
        assert kind in ("echd", "redis")
        self.kind = kind
        self.exe = exe
        self.is_echd = kind == "echd"
        self.extra_args = list(extra_args)
        self.root = root or tempfile.mkdtemp(prefix="echd-e2e-")
        self.dir = os.path.join(self.root, "data")
        os.makedirs(self.dir, exist_ok=True)
        self.log_path = os.path.join(self.root, "server.log")
        self.port = free_port()
        self.started = False         # once: start() keeps the ports from then on
        self.suite_tls_port = None   # run.py --tls: the port the harness' clients use
        if TLS is not None and self.is_echd:
            self.port, self.suite_tls_port = free_ports(2)
            _TLS_SERVER[self.port] = self
        # run.py --storage postgres: this Server's schema, kept across restarts
        self._pg_schema = pg_new_schema() if PG_URL is not None and self.is_echd else None
        self.proc = None
        self.bad_exits = []      # "exit status N" of stops that should have been clean
        self._resources = []     # clients/connections to close after each test
        self._children = []      # servers started by spawn()

    # -- process management
    @property
    def pg_schema(self):
        """The schema this server stores in (run.py --storage postgres), or None: not
        on PostgreSQL, or its arguments name a backend of their own."""
        if self._pg_schema is None or any(a in self.extra_args for a in (
                "--storage", "--storage-backend", "--storage-url")):
            return None
        return self._pg_schema

    def args(self):
        a = [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir]
        if self.is_echd:
            a += ["--loglevel", "notice"]
        else:
            a += ["--save", "", "--appendonly", "no"]
        if self.suite_tls_port:
            a += ["--tls-port", str(self.suite_tls_port), "--tls-cert-file", TLS["cert"],
                  "--tls-key-file", TLS["key"], "--tls-ca-cert-file", TLS["ca"],
                  "--tls-auth-clients", "no"]
        return a + self.storage_args() + self.extra_args

    def storage_args(self):
        """The arguments that put this server on the pass' backend: on PostgreSQL, its own
        schema; else none. A subclass with args() of its own adds them too."""
        if self.pg_schema is None:
            if STAGED_ARGS is not None and self.is_echd and not any(a in self.extra_args for a in (
                    "--storage", "--storage-backend", "--storage-url")):
                return list(STAGED_ARGS)
            return []
        a = ["--storage-backend", "postgres", "--storage-url", PG_URL,
             "--storage-pg-schema", self.pg_schema]
        if PG_TIMEOUT_MS is not None:
            # (enable_pg says why; a test of the timeout passes its own, later, which wins)
            a += ["--storage-timeout-ms", str(PG_TIMEOUT_MS)]
        if PG_CACHE_SIZE is not None:
            a += ["--storage-cache-size", PG_CACHE_SIZE]
        return a

    def offline_args(self):
        """echo-admin's options that read what this server stores, offline: its data
        directory, or on PostgreSQL its schema."""
        if self.pg_schema is not None:
            return pg_admin_args(self.pg_schema)
        return ["-d", self.dir]

    def check_data(self, timeout=120):
        """echo-admin check of what this server stores (its dir, or its schema)."""
        return check_data(self.exe, self.dir, timeout=timeout, pg_schema=self.pg_schema)

    def start(self, timeout=None):
        """Starts the server and waits for its PING. free_ports() lets its sockets go before
        the server binds, so another process (a module running beside this one) may take a
        port meanwhile: a first start that finds one taken picks new ports and tries again,
        up to three times. A restart keeps the ports its clients know."""
        for attempt in range(3):
            try:
                self._start(timeout)
                self.started = True
                return self
            except ServerError as e:
                if self.started or attempt == 2 or "Address already in use" not in str(e):
                    raise
                self.pick_ports()
        raise AssertionError("not reached")

    def pick_ports(self):
        self.port = free_port()
        if self.suite_tls_port is not None:
            self.port, self.suite_tls_port = free_ports(2)

    def _start(self, timeout=None):
        timeout = STARTUP_TIMEOUT if timeout is None else timeout
        log = open(self.log_path, "ab")
        log.write(("\n=== start: %s\n" % " ".join(self.args())).encode())
        log.flush()
        self.proc = subprocess.Popen(self.args(), stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, cwd=self.root,
                                     start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise ServerError("%s exited with status %s during start-up\n%s"
                                  % (self.kind, self.proc.returncode, self.log_tail()))
            try:
                c = RespConn(self.port, timeout=1.0)
                try:
                    if c.call("PING") == "PONG":
                        return self
                except RespError as e:
                    if e.msg.startswith("NOAUTH"):
                        return self     # up, and asking for a password
                    raise
                finally:
                    c.close()
            except (OSError, Closed, RespError, AssertionError, ValueError):
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise ServerError("%s did not answer PING within %.1f s\n%s"
                                  % (self.kind, timeout, self.log_tail()))
            time.sleep(0.02)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=10.0):
        """SIGTERM, wait; SIGKILL if it does not exit. Records a non-zero exit status."""
        if self.proc is None:
            return None
        timed_out = False
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                self.bad_exits.append("did not exit within %.0f s of SIGTERM" % timeout)
                self.proc.kill()
                self.proc.wait()
        rc = self.proc.returncode
        if rc != 0 and not timed_out:
            self.bad_exits.append("exit status %s after SIGTERM" % rc)
        self.proc = None
        return rc

    def kill(self, sig=signal.SIGKILL):
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(sig)
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            self.proc = None

    def restart(self, kill=signal.SIGKILL):
        """Stop the server with signal `kill` (SIGKILL: no chance to flush anything), wait for
        it, and start it again on the same port and data directory."""
        self.close_clients()
        if kill == signal.SIGTERM:
            self.stop()
        else:
            self.kill(kill)
        self.start()
        return self

    def spawn(self, *extra_args):
        """Start another server of the same kind with extra arguments (own port and dir);
        it is stopped when the test ends."""
        s = Server(self.kind, self.exe, list(extra_args))
        self._children.append(s)
        return s.start()

    def cleanup_after_test(self):
        """Close the test's clients, stop the servers it spawned. Returns (problems, logs):
        non-zero exits of spawned servers, and their log tails (read after they stopped,
        so that everything they wrote is there)."""
        self.close_clients()
        bad, logs = [], []
        for s in self._children:
            s.close_clients()
            s.stop()
            bad += s.bad_exits
            logs.append("spawned " + s.log_tail(15))
            s.remove()
        self._children = []
        return bad, logs

    def remove(self):
        if _TLS_SERVER.get(self.port) is self:
            del _TLS_SERVER[self.port]
        if os.environ.get("E2E_KEEP"):
            return
        shutil.rmtree(self.root, ignore_errors=True)
        if self._pg_schema is not None and not self.alive():
            pg_drop_schema(self._pg_schema)

    def log_tail(self, lines=40):
        try:
            with open(self.log_path, "rb") as f:
                data = f.read().decode(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "--- %s log (last %d lines) ---\n%s" % (self.kind, lines, "\n".join(data[-lines:]))

    # -- clients
    @property
    def client_port(self):
        """The port the harness' clients connect to: the TLS one in a run over TLS."""
        return self.suite_tls_port or self.port

    def client(self, **kw):
        kw.setdefault("decode_responses", True)
        kw.setdefault("socket_timeout", 30)
        if self.suite_tls_port:
            kw.setdefault("ssl", True)
            kw.setdefault("ssl_ca_certs", TLS["ca"])
        c = redis.Redis(host="127.0.0.1", port=self.client_port, **kw)
        self._resources.append(c)
        return c

    def raw(self, timeout=30.0, plain=False):
        """A RespConn (raw RESP2 unless HELLO 3 is sent on it). plain: to the plain port even
        in a run over TLS, for a test that writes and reads one connection from two threads
        (an SSL socket may not be used that way)."""
        c = RespConn(self.port, timeout=timeout, plain=plain)
        self._resources.append(c)
        return c

    def cli(self, *args, input=None, check=True, timeout=20):
        """Run redis-cli against the server and return its stdout (str)."""
        cmd = [REDIS_CLI, "-h", "127.0.0.1", "-p", str(self.client_port)]
        if self.suite_tls_port:
            cmd += ["--tls", "--cacert", TLS["ca"]]
        cmd += [str(a) for a in args]
        p = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError("redis-cli %s failed (%d): %s" % (args, p.returncode, p.stderr))
        return p.stdout

    def describe_connections(self):
        return "\n".join(c.describe() for c in self._resources
                         if isinstance(c, RespConn) and c.history)

    def close_clients(self):
        for c in self._resources:
            try:
                c.close()
            except Exception:
                pass
        self._resources = []


# ---------------------------------------------------------------------------
# Helpers for tests
# ---------------------------------------------------------------------------

def wait_until(pred, timeout=5.0, interval=0.02, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1f s waiting for %s" % (timeout, what))
        time.sleep(interval)


def fill(conn, key, n, start_ms=1, fields=("f", "v")):
    """XADD n entries with ids start_ms-1 .. start_ms+n-1 - 1 in one pipeline."""
    replies = conn.pipeline([("XADD", key, "%d-1" % (start_ms + i)) + tuple(fields)
                             for i in range(n)])
    for r in replies:
        assert not isinstance(r, RespError), r
    return [r.decode() for r in replies]


def sock_open(sock):
    """True while the server has not closed sock (reads nothing from it; leaves it
    non-blocking)."""
    try:
        sock.settimeout(0)
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def watch_closed(socks, timeout):
    """socks: (socket, dribble) pairs. Polls every 0.1 s for up to timeout seconds, calling
    dribble(socket) (unless None) on each socket still open every round, and returns for each
    socket the seconds until it was seen closed by the server (None: still open)."""
    t0 = time.monotonic()
    closed = {}
    while time.monotonic() - t0 < timeout and len(closed) < len(socks):
        for sock, dribble in socks:
            if sock in closed:
                continue
            if dribble is not None:
                try:
                    dribble(sock)
                except OSError:
                    closed[sock] = time.monotonic() - t0
                    continue
            if not sock_open(sock):
                closed[sock] = time.monotonic() - t0
        time.sleep(0.1)
    return [closed.get(sock) for sock, _ in socks]
