"""TLS client connections (echd only: the module's servers are echd's own TLS listeners).

Certificates are made at test time with the `openssl` command in a throw-away directory (no
private key is committed): a CA, a second CA nobody trusts, two server certificates (CN
server-a and server-b, for the reload tests), client certificates (CN client, worker, sleepy),
one signed by the untrusted CA, an expired one, and server certificates expired and not yet
valid (`openssl ca -startdate/-enddate`: OpenSSL 3.0's `x509` has no -not_before/-not_after).

Covered: redis-cli --tls and python3-redis ssl=True running stream and group commands; a
blocking XREAD/XREADGROUP woken by an XADD over TLS; replies written at once, queued whole when
the socket is full, and clients that reset while answered; what is refused (untrusted CA, no client
certificate with tls-auth-clients yes but accepted with optional/no, an expired certificate,
plaintext/garbage/truncated handshakes on the TLS port) while a parallel good TLS client keeps
working; handshakes that never finish, silent or a byte at a time, closed at
tls-handshake-timeout, and maxclients of them not keeping clients out (the oldest makes room);
reload on SIGHUP and CONFIG SET (old connections keep working, new ones see the new
certificate, a bad certificate is refused and the old one stays, the log names the reason; an
expired or not yet valid one is taken with a warning, as at start);
start-up failures naming the file; tls-auth-clients-user CN; `--port 0 --tls-port P`;
tls-protocols. echo-admin --tls (<build>/tools/echo-admin beside echd): its listings compared
with XINFO/XPENDING over a TLS-only server, a PEL of several pages, an action, --json; and what
it refuses, with exit status 3 and the reason (unknown CA, server name or address mismatch, no
client certificate with TLS 1.3 and 1.2, plaintext and silent ports within --timeout,
unreadable or mismatched files) or 2 (--cert without --key, --tls with -s or -d); SNI.

Each test starts its own TLS server (TlsServer below): the harness' readiness check speaks plain
RESP, which a TLS-only server does not, so the subclass waits for a PING over TLS instead.
"""

import atexit
import collections
import json
import os
import re
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import tempfile
import threading
import time

import redis

import echdtest
from echdtest import (Closed, RespConn, RespError, free_port, free_ports, sock_open, timeout,
                      wait_until, watch_closed)

ECHD_ONLY = "TLS listener tests use echd's own options (the Redis suite is not run over TLS here)"
TLS_SUITE = False
TLS_SUITE_WHY = "its servers are TLS servers of their own, with their own certificates"
TIMEOUT = 60

OPENSSL = shutil.which("openssl") or "/usr/bin/openssl"


# ---------------------------------------------------------------------------
# Certificates, made once per run
# ---------------------------------------------------------------------------

class Certs:
    """Paths of the throw-away PKI. c.path('name.crt'|'name.key')."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="echd-e2e-tls-")
        atexit.register(shutil.rmtree, self.dir, True)
        self._make()

    def path(self, name):
        return os.path.join(self.dir, name)

    def _run(self, *args):
        p = subprocess.run([OPENSSL] + list(args), cwd=self.dir, capture_output=True, text=True,
                           timeout=60)
        if p.returncode != 0:
            raise AssertionError("openssl %s failed: %s" % (" ".join(args), p.stderr))

    def _ca(self, name, cn):
        self._run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                  "-nodes", "-keyout", name + ".key", "-out", name + ".crt", "-subj", "/CN=" + cn,
                  "-days", "30")

    def _csr(self, name, cn):
        self._run("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                  "-nodes", "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + cn)

    def _signed(self, name, cn, ca, server=False, san="DNS:localhost,IP:127.0.0.1"):
        self._csr(name, cn)
        ext = name + ".ext"
        with open(self.path(ext), "w") as f:
            if server:
                f.write("subjectAltName=%s\n"
                        "extendedKeyUsage=serverAuth\n" % san)
            else:
                f.write("extendedKeyUsage=clientAuth\n")
        self._run("x509", "-req", "-in", name + ".csr", "-CA", ca + ".crt", "-CAkey", ca + ".key",
                  "-CAcreateserial", "-out", name + ".crt", "-days", "30", "-extfile", ext)

    def _make(self):
        self._ca("ca", "echd-test-ca")
        self._ca("otherca", "echd-untrusted-ca")
        self._signed("server-a", "server-a", "ca", server=True)
        self._signed("server-b", "server-b", "ca", server=True)
        # names neither localhost nor 127.0.0.1 (echo-admin's host name checks)
        self._signed("elsewhere", "elsewhere", "ca", server=True, san="DNS:mq.example.net")
        self._signed("client", "client", "ca")
        self._signed("worker", "worker", "ca")
        self._signed("sleepy", "sleepy", "ca")
        self._signed("untrusted", "client", "otherca")
        # expired: valid for one day in 2020, signed by the trusted CA
        self._csr("expired", "client")
        with open(self.path("ca.cnf"), "w") as f:
            f.write("[ca]\ndefault_ca = test\n[test]\ndatabase = index.txt\nnew_certs_dir = .\n"
                    "serial = serial\ndefault_md = sha256\npolicy = any\n"
                    "[any]\ncommonName = supplied\n")
        open(self.path("index.txt"), "w").close()
        with open(self.path("serial"), "w") as f:
            f.write("1000\n")
        self._run("ca", "-batch", "-config", "ca.cnf", "-cert", "ca.crt", "-keyfile", "ca.key",
                  "-in", "expired.csr", "-out", "expired.crt", "-notext",
                  "-startdate", "20200101000000Z", "-enddate", "20200102000000Z")
        # server certificates out of their validity period: one expired, one not valid yet
        for name, start, end in (("server-old", "20200101000000Z", "20200102000000Z"),
                                 ("server-future", "20990101000000Z", "20990102000000Z")):
            self._csr(name, name)
            self._run("ca", "-batch", "-config", "ca.cnf", "-cert", "ca.crt", "-keyfile",
                      "ca.key", "-in", name + ".csr", "-out", name + ".crt", "-notext",
                      "-startdate", start, "-enddate", end)
        # server-a's key under a passphrase (tls-key-file-pass)
        self._run("pkey", "-in", "server-a.key", "-aes256", "-passout", "pass:key-pass-123",
                  "-out", "server-a-enc.key")


_CERTS = None


def certs():
    global _CERTS
    if _CERTS is None:
        _CERTS = Certs()
    return _CERTS


# ---------------------------------------------------------------------------
# TLS clients
# ---------------------------------------------------------------------------

def client_context(ca="ca", cert="client", minv=None, maxv=None):
    """An SSLContext trusting CA file <ca>.crt and presenting <cert> (None: no certificate)."""
    c = certs()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(c.path(ca + ".crt"))
    ctx.check_hostname = True
    if cert:
        ctx.load_cert_chain(c.path(cert + ".crt"), c.path(cert + ".key"))
    if minv:
        ctx.minimum_version = minv
    if maxv:
        ctx.maximum_version = maxv
    return ctx


class TlsConn(RespConn):
    """RespConn over TLS. The handshake happens in the constructor."""

    def __init__(self, port, ca="ca", cert="client", timeout=10.0, minv=None, maxv=None):
        raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self.sock = client_context(ca, cert, minv, maxv).wrap_socket(
                raw, server_hostname="localhost")
        except BaseException:
            raw.close()
            raise
        self.buf = bytearray()
        self.pos = 0
        self.history = collections.deque(maxlen=6)

    def peer_cn(self):
        return peer_cn(self.sock)

    def wait_closed(self, timeout=5.0):
        try:
            return RespConn.wait_closed(self, timeout)
        except (ssl.SSLError, OSError):
            return True


def peer_cn(sslsock):
    cert = sslsock.getpeercert()
    for rdn in cert["subject"]:
        for k, v in rdn:
            if k == "commonName":
                return v
    return None


REFUSED = (ssl.SSLError, OSError, Closed)


def refused(port, **kw):
    """True if a TLS client with these settings cannot run PING: the handshake fails, or (TLS
    1.3: the server checks the client's certificate after the client finished) the first
    read finds an alert or the connection closed. Returns the exception text."""
    try:
        c = TlsConn(port, timeout=5, **kw)
    except REFUSED as e:
        return "handshake: %s" % e
    try:
        c.send("PING")
        r = c.read()
    except REFUSED as e:
        return "first read: %s" % e
    finally:
        c.close()
    raise AssertionError("expected the connection to be refused, got %r" % (r,))


def cli_tls(port, *args, cert="client", ca="ca", check=True):
    c = certs()
    cmd = [echdtest.REDIS_CLI, "--tls", "--cacert", c.path(ca + ".crt"), "-h", "127.0.0.1",
           "-p", str(port)]
    if cert:
        cmd += ["--cert", c.path(cert + ".crt"), "--key", c.path(cert + ".key")]
    p = subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True, timeout=20)
    if check and (p.returncode != 0 or p.stdout.startswith("(error)")):
        raise AssertionError("redis-cli --tls %s failed (%d): %s %s" % (args, p.returncode,
                                                                      p.stdout, p.stderr))
    return p


# ---------------------------------------------------------------------------
# TLS servers
# ---------------------------------------------------------------------------

class TlsServer(echdtest.Server):
    """echd with a TLS port (self.tls_port) and, unless plain=False, a plain one (self.port;
    0 in the arguments when plain=False). Certificates are copied into the server's own dir
    as cert.pem/key.pem so that a test can replace them for the reload tests."""

    def __init__(self, exe, extra=(), plain=True, loglevel="verbose", cert="server-a",
                 key=None, ca_file=True):
        super().__init__("echd", exe, list(extra))
        self.port, self.tls_port = free_ports(2)  # distinct
        self.plain = plain
        self.loglevel = loglevel
        self.ca_file = ca_file
        self.cert_file = os.path.join(self.root, "cert.pem")
        self.key_file = os.path.join(self.root, "key.pem")
        self.install(cert, key)

    def install(self, cert, key=None):
        """Copy <cert>.crt and <key or cert>.key over the files the server is configured with."""
        c = certs()
        shutil.copyfile(c.path(cert + ".crt"), self.cert_file + ".new")
        os.replace(self.cert_file + ".new", self.cert_file)
        shutil.copyfile(c.path((key or cert) + ".key"), self.key_file + ".new")
        os.replace(self.key_file + ".new", self.key_file)

    def args(self):
        c = certs()
        return [self.exe, "--port", str(self.port if self.plain else 0),
                "--tls-port", str(self.tls_port), "--bind", "127.0.0.1", "--dir", self.dir,
                "--loglevel", self.loglevel, "--tls-cert-file", self.cert_file,
                "--tls-key-file", self.key_file
                ] + (["--tls-ca-cert-file", c.path("ca.crt")] if self.ca_file else []
                     ) + self.storage_args() + self.extra_args

    def pick_ports(self):
        self.port, self.tls_port = free_ports(2)

    def _start(self, timeout=None):
        timeout = echdtest.STARTUP_TIMEOUT if timeout is None else timeout
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
                raise echdtest.ServerError("echd exited with status %s during start-up\n%s"
                                           % (self.proc.returncode, self.log_tail()))
            try:
                c = TlsConn(self.tls_port, timeout=1.0)
                try:
                    c.send("PING")
                    r = c.read()   # PONG, or NOAUTH with requirepass: either says it is up
                    if r == "PONG" or isinstance(r, RespError):
                        return self
                finally:
                    c.close()
            except (OSError, ssl.SSLError, Closed, AssertionError, ValueError):
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise echdtest.ServerError("echd did not answer PING over TLS within %.1f s\n%s"
                                           % (timeout, self.log_tail()))
            time.sleep(0.02)

    def tls(self, **kw):
        c = TlsConn(self.tls_port, **kw)
        self._resources.append(c)
        return c

    def tls_client(self, cert="client", **kw):
        c = certs()
        kw.setdefault("decode_responses", True)
        kw.setdefault("socket_timeout", 30)
        if cert:
            kw.update(ssl_certfile=c.path(cert + ".crt"), ssl_keyfile=c.path(cert + ".key"))
        r = redis.Redis(host="127.0.0.1", port=self.tls_port, ssl=True,
                        ssl_ca_certs=c.path("ca.crt"), **kw)
        self._resources.append(r)
        return r

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def log_lines_since(self, mark):
        """The log lines written after mark (a length from len(log_text()))."""
        return self.log_text()[mark:].splitlines()


def tls_server(server, *extra, **kw):
    """Start a TlsServer; it is stopped when the test ends (as server.spawn() servers are)."""
    s = TlsServer(server.exe, list(extra), **kw)
    server._children.append(s)
    return s.start()


def wait_log(s, text, mark=0, timeout=5.0):
    return wait_until(lambda: text in s.log_text()[mark:], timeout=timeout,
                      what="%r in the server log" % text)


# ---------------------------------------------------------------------------
# Clients: redis-cli and python3-redis run stream and group commands
# ---------------------------------------------------------------------------

def test_redis_cli_streams_and_groups(server):
    s = tls_server(server)
    p = s.tls_port
    assert cli_tls(p, "XADD", "jobs", "1-1", "f", "v").stdout == "1-1\n"
    assert cli_tls(p, "XADD", "jobs", "2-1", "f", "w").stdout == "2-1\n"
    assert cli_tls(p, "XGROUP", "CREATE", "jobs", "g", "0").stdout == "OK\n"
    out = cli_tls(p, "XREADGROUP", "GROUP", "g", "alice", "COUNT", "10", "STREAMS", "jobs", ">")
    assert out.stdout.split() == ["jobs", "1-1", "f", "v", "2-1", "f", "w"], out.stdout
    out = cli_tls(p, "XPENDING", "jobs", "g")
    assert out.stdout.split() == ["2", "1-1", "2-1", "alice", "2"], out.stdout
    assert cli_tls(p, "XACK", "jobs", "g", "1-1", "2-1").stdout == "2\n"
    assert cli_tls(p, "XPENDING", "jobs", "g").stdout.split()[0] == "0"
    assert cli_tls(p, "XLEN", "jobs").stdout == "2\n"
    # the same data through the plain port: one server, two listeners
    assert s.cli("XLEN", "jobs") == "2\n"


def test_redis_py_streams_and_groups(server):
    s = tls_server(server)
    r = s.tls_client()
    assert r.ping() is True
    ids = [r.xadd("jobs", {"n": str(i)}) for i in range(5)]
    r.xgroup_create("jobs", "g", id="0")
    got = r.xreadgroup("g", "alice", {"jobs": ">"}, count=3)
    assert [e[0] for e in got[0][1]] == ids[:3]
    pend = r.xpending("jobs", "g")
    assert pend["pending"] == 3 and pend["min"] == ids[0] and pend["max"] == ids[2], pend
    assert r.xack("jobs", "g", *ids[:3]) == 3
    assert r.xpending("jobs", "g")["pending"] == 0
    claimed = r.xautoclaim("jobs", "g", "bob", 0, "0-0")
    assert claimed[1] == [], claimed
    info = r.xinfo_stream("jobs")
    assert info["length"] == 5 and info["groups"] == 1, info
    # a pipeline of many commands and a large value: several TLS records each way
    pipe = r.pipeline(transaction=False)
    for i in range(500):
        pipe.xadd("bulk", {"i": str(i)}, id="%d-1" % (i + 1))
    assert pipe.execute()[-1] == "500-1"
    big = "x" * (1 << 20)
    r.xadd("big", {"v": big}, id="1-1")
    assert r.xrange("big")[0][1]["v"] == big
    # and python's own view of the session
    c = s.tls()
    assert c.call("XLEN", "bulk") == 500
    assert c.sock.version() in ("TLSv1.2", "TLSv1.3")
    assert c.peer_cn() == "server-a"


def test_blocking_reads_woken_over_tls(server):
    s = tls_server(server)
    reader, writer = s.tls(timeout=15), s.tls()
    reader.send("XREAD", "BLOCK", "10000", "STREAMS", "q", "$")
    wait_until(lambda: b"blocked_clients:1" in writer.call("INFO", "clients"),
               what="the XREAD to block")
    t0 = time.monotonic()
    assert writer.call("XADD", "q", "5-1", "f", "v") == b"5-1"
    assert reader.read() == [[b"q", [[b"5-1", [b"f", b"v"]]]]]
    assert time.monotonic() - t0 < 5

    # XREADGROUP BLOCK over TLS too, woken by an XADD from python3-redis over TLS
    writer.call("XGROUP", "CREATE", "q", "g", "$")
    reader.send("XREADGROUP", "GROUP", "g", "c", "BLOCK", "10000", "STREAMS", "q", ">")
    wait_until(lambda: b"blocked_clients:1" in writer.call("INFO", "clients"),
               what="the XREADGROUP to block")
    s.tls_client().xadd("q", {"k": "w"}, id="6-1")
    assert reader.read() == [[b"q", [[b"6-1", [b"k", b"w"]]]]]


def client_field(conn, name, field):
    """Field <field> of client <name> in CLIENT LIST, as an int (None: no such client)."""
    for line in conn.call("CLIENT", "LIST").decode().splitlines():
        kv = dict(p.split("=", 1) for p in line.split(" ") if "=" in p)
        if kv.get("name") == name:
            return int(kv[field])
    return None


@timeout(120)
def test_replies_queue_while_a_tls_reader_stalls(server):
    """A reply of up to one TLS record is written at once; when the socket is full it is
    queued whole, as OpenSSL will repeat that write. A client that sends without reading
    gets every reply, in order, once it reads."""
    s = tls_server(server)
    other = s.tls()
    value = "v" * 12000  # one reply of ~12 KB: under a TLS record (16 KB)
    other.call("XADD", "big", "1-1", "f", value)
    stalled = s.tls(timeout=60)
    stalled.call("CLIENT", "SETNAME", "stalled")
    req = b"*4\r\n$6\r\nXRANGE\r\n$3\r\nbig\r\n$1\r\n-\r\n$1\r\n+\r\n"
    sent, queued = 0, 0
    # one request at a time, so that each reply is written on its own
    while sent < 4000 and not queued:
        stalled.send_raw(req)
        sent += 1
        time.sleep(0.0005)
        if sent % 25 == 0:
            queued = client_field(other, "stalled", "omem")  # bytes queued for the socket
    assert queued, "%d replies of 12 KB never filled the socket" % sent
    for _ in range(50):  # more behind the queued ones
        stalled.send_raw(req)
        sent += 1
    assert other.call("PING") == "PONG"  # nobody else waits for the stalled reader
    for i in range(sent):
        assert stalled.read() == [[b"1-1", [b"f", value.encode()]]], "reply %d" % i
    assert stalled.call("PING") == "PONG"
    assert client_field(other, "stalled", "omem") == 0


def test_clients_reset_while_answered(server):
    """Clients that pipeline PINGs and reset the connection (RST) while their replies are
    written: each is closed and forgotten, the reason logged, and the server keeps serving."""
    s = tls_server(server)
    watch = s.tls()
    for k in range(30):
        c = TlsConn(s.tls_port)
        c.send_raw(b"PING\r\n" * (50 + 20 * k))
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()
        assert watch.call("PING") == "PONG"

    def connected():
        info = watch.call("INFO", "clients").decode()
        return int(info.split("connected_clients:")[1].split("\r\n")[0])
    wait_until(lambda: connected() == 1, what="the reset clients to be closed")
    closed = re.findall(r"TLS connection from (\S+) closed: (.*)", s.log_text())
    assert ("connection reset or closed without a TLS close_notify" in [w for _, w in closed])
    # once each: a client already closed is not written to (and logged) again
    seen = collections.Counter(a for a, _ in closed)
    assert max(seen.values()) == 1, [a for a, n in seen.items() if n > 1]
    assert s.tls().call("XADD", "s", "1-1", "f", "v") == b"1-1"


# ---------------------------------------------------------------------------
# What is refused
# ---------------------------------------------------------------------------

def test_untrusted_client_certificate_refused(server):
    s = tls_server(server)
    good = s.tls()
    assert good.call("PING") == "PONG"
    mark = len(s.log_text())
    why = refused(s.tls_port, cert="untrusted")
    assert good.call("XADD", "s", "1-1", "f", "v") == b"1-1", why
    wait_log(s, "certificate verify failed (unable to get local issuer certificate)", mark)
    # redis-cli with that certificate fails too
    p = cli_tls(s.tls_port, "PING", cert="untrusted", check=False)
    assert "PONG" not in p.stdout, p.stdout
    # and a client that trusts the wrong CA refuses the server (its own check)
    with_wrong_ca = refused(s.tls_port, ca="otherca")
    assert "CERTIFICATE_VERIFY_FAILED" in with_wrong_ca, with_wrong_ca
    assert good.call("XLEN", "s") == 1


def test_client_certificate_required_optional_or_not(server):
    s = tls_server(server)   # tls-auth-clients yes (the default)
    admin = s.raw()
    assert admin.call("CONFIG", "GET", "tls-auth-clients") == [b"tls-auth-clients", b"yes"]
    good = s.tls()
    mark = len(s.log_text())
    why = refused(s.tls_port, cert=None)
    assert good.call("PING") == "PONG", why
    wait_log(s, "peer did not return a certificate", mark)
    p = cli_tls(s.tls_port, "PING", cert=None, check=False)
    assert "PONG" not in p.stdout, p.stdout

    # optional: no certificate is fine, a bad one is not
    assert admin.call("CONFIG", "SET", "tls-auth-clients", "optional") == "OK"
    c = s.tls(cert=None)
    assert c.call("PING") == "PONG"
    assert cli_tls(s.tls_port, "PING", cert=None).stdout == "PONG\n"
    refused(s.tls_port, cert="untrusted")
    assert s.tls(cert="client").call("PING") == "PONG"

    # no: the server does not ask, so even an untrusted certificate is never looked at
    assert admin.call("CONFIG", "SET", "tls-auth-clients", "no") == "OK"
    assert s.tls(cert=None).call("PING") == "PONG"
    assert s.tls(cert="untrusted").call("PING") == "PONG"
    assert good.call("PING") == "PONG"

    # back to yes: new connections need a certificate again
    assert admin.call("CONFIG", "SET", "tls-auth-clients", "yes") == "OK"
    refused(s.tls_port, cert=None)

    # and the same at start-up
    s2 = tls_server(server, "--tls-auth-clients", "optional")
    assert s2.tls(cert=None).call("PING") == "PONG"
    s3 = tls_server(server, "--tls-auth-clients", "no")
    assert s3.tls(cert=None).call("PING") == "PONG"


def test_ca_cert_dir(server):
    """tls-ca-cert-dir instead of tls-ca-cert-file: a c_rehash directory of trusted CAs."""
    c = certs()
    cadir = os.path.join(c.dir, "cadir")
    if not os.path.isdir(cadir):
        os.mkdir(cadir)
        shutil.copyfile(c.path("ca.crt"), os.path.join(cadir, "ca.crt"))
        c._run("rehash", cadir)
    s = tls_server(server, "--tls-ca-cert-dir", cadir, ca_file=False)
    assert s.raw().call("CONFIG", "GET", "tls-ca-cert-file") == [b"tls-ca-cert-file", b""]
    assert s.tls(cert="client").call("PING") == "PONG"
    refused(s.tls_port, cert="untrusted")
    refused(s.tls_port, cert=None)


def test_expired_client_certificate_refused(server):
    s = tls_server(server)
    good = s.tls()
    mark = len(s.log_text())
    refused(s.tls_port, cert="expired")
    wait_log(s, "certificate verify failed (certificate has expired)", mark)
    p = cli_tls(s.tls_port, "PING", cert="expired", check=False)
    assert "PONG" not in p.stdout, p.stdout
    assert good.call("PING") == "PONG"
    # optional does not let an expired certificate in either
    s.raw().call("CONFIG", "SET", "tls-auth-clients", "optional")
    refused(s.tls_port, cert="expired")


def client_hello():
    """The bytes of a real TLS ClientHello (python's, never sent anywhere)."""
    ctx = client_context()
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname="localhost")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


def test_plaintext_and_garbage_on_tls_port(server):
    s = tls_server(server)          # loglevel verbose
    good = s.tls()
    assert good.call("XADD", "s", "1-1", "f", "v") == b"1-1"
    hello = client_hello()
    assert hello[:1] == b"\x16" and len(hello) > 100
    mark = len(s.log_text())
    attempts = [
        ("plaintext inline", b"PING\r\n"),
        ("plaintext RESP", echdtest.encode_command("XADD", "s", "*", "f", "v")),
        ("garbage", bytes(range(256)) * 16),
        ("truncated ClientHello", hello[:60]),
    ]
    for what, data in attempts:
        c = RespConn(s.tls_port, timeout=5)
        try:
            c.send_raw(data)
            if what == "truncated ClientHello":
                c.sock.shutdown(socket.SHUT_WR)    # the rest never comes
            got = b""
            try:
                while True:
                    chunk = c.sock.recv(4096)
                    if not chunk:
                        break
                    got += chunk
            except (ConnectionResetError, socket.timeout):
                pass
            assert b"PONG" not in got and not got.startswith(b"$") and not got.startswith(b"+"), \
                (what, got)
        finally:
            c.close()
        assert good.call("PING") == "PONG", what
    # a client that connects and says nothing, and one that closes at once
    silent = RespConn(s.tls_port, timeout=5)
    RespConn(s.tls_port, timeout=5).close()
    assert good.call("XLEN", "s") == 1         # nothing was added by the plaintext XADD
    assert s.tls().call("PING") == "PONG"      # new TLS clients still get in
    silent.close()
    assert s.alive()
    # each refusal is logged once at verbose level ('-'), none as a warning ('#')
    wait_until(lambda: sum("TLS connection from" in l for l in s.log_lines_since(mark)) >= 4,
               what="the refused handshakes to be logged")
    lines = [l for l in s.log_lines_since(mark) if "TLS connection from" in l]
    for l in lines:
        assert " - TLS connection from" in l, l
    assert not any(" # " in l for l in s.log_lines_since(mark)), s.log_lines_since(mark)
    assert any("wrong version number" in l or "http request" in l or "packet length" in l
               for l in lines), lines


def test_plaintext_client_does_not_block_tls_clients(server):
    """A plaintext client stuck on the TLS port (it waits for a reply that never comes) while
    TLS clients keep being served, including a blocking read woken meanwhile."""
    s = tls_server(server)
    stuck = RespConn(s.tls_port, timeout=5)
    stuck.send_raw(b"*1\r\n$4\r\nPING\r\n")
    reader, writer = s.tls(timeout=15), s.tls()
    reader.send("XREAD", "BLOCK", "10000", "STREAMS", "q", "$")
    wait_until(lambda: b"blocked_clients:1" in writer.call("INFO", "clients"),
               what="the XREAD to block")
    writer.call("XADD", "q", "1-1", "a", "b")
    assert reader.read() == [[b"q", [[b"1-1", [b"a", b"b"]]]]]
    assert stuck.wait_closed(5), "the plaintext client on the TLS port was not closed"


# ---------------------------------------------------------------------------
# Reload
# ---------------------------------------------------------------------------

def new_cn(s, **kw):
    c = TlsConn(s.tls_port, **kw)
    try:
        return c.peer_cn()
    finally:
        c.close()


def test_sighup_reloads_certificate(server):
    s = tls_server(server)
    old = s.tls()
    assert old.peer_cn() == "server-a"
    old.call("XADD", "s", "1-1", "f", "v")
    old.send("XREAD", "BLOCK", "20000", "STREAMS", "s", "$")   # blocked across the reload
    s.install("server-b")
    mark = len(s.log_text())
    s.proc.send_signal(signal.SIGHUP)
    wait_log(s, "TLS certificates reloaded", mark)
    assert new_cn(s) == "server-b"
    assert cli_tls(s.tls_port, "XLEN", "s").stdout == "1\n"
    # the old connection: same session, its blocking read still woken
    writer = s.tls()
    assert writer.peer_cn() == "server-b"
    writer.call("XADD", "s", "2-1", "f", "w")
    assert old.read() == [[b"s", [[b"2-1", [b"f", b"w"]]]]]
    assert old.call("XLEN", "s") == 2
    assert old.peer_cn() == "server-a"
    # redis-py sees the new one as well
    assert s.tls_client().xlen("s") == 2


def test_sighup_bad_certificate_keeps_old(server):
    s = tls_server(server)
    old = s.tls()
    assert old.peer_cn() == "server-a"

    # 1. garbage in the certificate file
    with open(s.cert_file, "w") as f:
        f.write("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n"
                "-----END CERTIFICATE-----\n")
    mark = len(s.log_text())
    s.proc.send_signal(signal.SIGHUP)
    wait_log(s, "TLS reload refused", mark)
    line = [l for l in s.log_lines_since(mark) if "TLS reload refused" in l][0]
    assert "cannot load tls-cert-file '%s'" % s.cert_file in line, line
    assert " # " in line, "a refused reload is a warning: " + line
    assert new_cn(s) == "server-a"
    assert old.call("PING") == "PONG"

    # 2. a certificate with a key that is not its own
    s.install("server-b", key="server-a")
    mark = len(s.log_text())
    s.proc.send_signal(signal.SIGHUP)
    wait_log(s, "TLS reload refused", mark)
    line = [l for l in s.log_lines_since(mark) if "TLS reload refused" in l][0]
    assert "does not match" in line and s.key_file in line and s.cert_file in line, line
    assert new_cn(s) == "server-a"

    # 3. the key file missing
    s.install("server-b")
    os.unlink(s.key_file)
    mark = len(s.log_text())
    s.proc.send_signal(signal.SIGHUP)
    wait_log(s, "TLS reload refused", mark)
    line = [l for l in s.log_lines_since(mark) if "TLS reload refused" in l][0]
    assert "cannot load tls-key-file '%s'" % s.key_file in line, line
    assert new_cn(s) == "server-a"
    assert old.call("PING") == "PONG"

    # 4. fixed: the next SIGHUP takes it
    s.install("server-b")
    mark = len(s.log_text())
    s.proc.send_signal(signal.SIGHUP)
    wait_log(s, "TLS certificates reloaded", mark)
    assert new_cn(s) == "server-b"
    assert old.call("PING") == "PONG"


def validity_warnings(s, mark):
    return [l for l in s.log_lines_since(mark) if "in tls-cert-file" in l]


def reload_with(s, cert):
    """Installs cert, sends SIGHUP, waits for the reload; returns the log mark before it."""
    s.install(cert)
    mark = len(s.log_text())
    s.proc.send_signal(signal.SIGHUP)
    wait_log(s, "TLS certificates reloaded", mark)
    return mark


def test_certificate_out_of_its_validity_period_warned(server):
    """OpenSSL loads an expired (or not yet valid) server certificate without a word, and
    clients then refuse it: echd takes it, as asked, but logs a warning naming the file, the
    certificate and the date, at start and on SIGHUP."""
    s = tls_server(server)
    assert not validity_warnings(s, 0), validity_warnings(s, 0)
    for name, what in (("server-old", "has expired: not valid after 2020-01-02 00:00:00 UTC"),
                       ("server-future", "is not valid yet: not before 2099-01-01 00:00:00 UTC")):
        mark = reload_with(s, name)
        wait_until(lambda: validity_warnings(s, mark), what="the warning about " + name)
        lines = validity_warnings(s, mark)
        assert len(lines) == 1, lines
        assert " # " in lines[0], "a warning: " + lines[0]
        assert ("TLS: the certificate /CN=%s in tls-cert-file '%s' %s" % (name, s.cert_file, what)
                in lines[0]), lines[0]
        # taken all the same: new clients are shown it (and refuse it)
        assert refused(s.tls_port)
        assert s.raw().call("PING") == "PONG"
    # a good one again: no warning
    mark = reload_with(s, "server-a")
    assert new_cn(s) == "server-a"
    assert not validity_warnings(s, mark), validity_warnings(s, mark)
    # CONFIG SET of the files reloads them the same way
    mark = len(s.log_text())
    assert s.raw().call("CONFIG", "SET", "tls-cert-file", certs().path("server-old.crt"),
                        "tls-key-file", certs().path("server-old.key")) == "OK"
    wait_until(lambda: validity_warnings(s, mark), what="the warning after CONFIG SET")
    assert "/CN=server-old" in validity_warnings(s, mark)[0]
    # at start: TlsServer's readiness check would refuse the certificate, so ask the plain port
    old = TlsServer(server.exe, cert="server-old")
    server._children.append(old)
    echdtest.Server._start(old)
    lines = validity_warnings(old, 0)
    assert len(lines) == 1 and "/CN=server-old" in lines[0] and "has expired" in lines[0], lines


def test_config_set_tls_files(server):
    s = tls_server(server)
    admin = s.raw()
    old = s.tls()
    missing = os.path.join(s.root, "no-such-cert.pem")
    e = admin.err("CONFIG", "SET", "tls-cert-file", missing)
    assert e.startswith("ERR CONFIG SET failed - Unable to update TLS configuration: "
                        "cannot load tls-cert-file '%s'" % missing), e
    assert admin.call("CONFIG", "GET", "tls-cert-file") == [b"tls-cert-file",
                                                            s.cert_file.encode()]
    assert new_cn(s) == "server-a"
    assert old.call("PING") == "PONG"

    # a pair that does not match is refused too, both values stay
    c = certs()
    e = admin.err("CONFIG", "SET", "tls-cert-file", c.path("server-b.crt"),
                  "tls-key-file", c.path("server-a.key"))
    assert "does not match" in e, e
    assert admin.call("CONFIG", "GET", "tls-key-file") == [b"tls-key-file", s.key_file.encode()]
    assert new_cn(s) == "server-a"

    # a good pair: new connections see it at once, old ones go on
    assert admin.call("CONFIG", "SET", "tls-cert-file", c.path("server-b.crt"),
                      "tls-key-file", c.path("server-b.key")) == "OK"
    assert admin.call("CONFIG", "GET", "tls-cert-file") == [b"tls-cert-file",
                                                            c.path("server-b.crt").encode()]
    assert new_cn(s) == "server-b"
    assert old.call("PING") == "PONG" and old.peer_cn() == "server-a"

    # over TLS itself, too
    assert old.call("CONFIG", "SET", "tls-cert-file", c.path("server-a.crt"),
                    "tls-key-file", c.path("server-a.key")) == "OK"
    assert new_cn(s) == "server-a"


def test_tls_protocols(server):
    s = tls_server(server)
    admin = s.raw()
    assert admin.call("CONFIG", "GET", "tls-protocols") == [b"tls-protocols",
                                                            b"TLSv1.2 TLSv1.3"]
    assert s.tls(maxv=ssl.TLSVersion.TLSv1_2).sock.version() == "TLSv1.2"
    assert s.tls(minv=ssl.TLSVersion.TLSv1_3).sock.version() == "TLSv1.3"
    assert admin.call("CONFIG", "SET", "tls-protocols", "TLSv1.3") == "OK"
    refused(s.tls_port, maxv=ssl.TLSVersion.TLSv1_2)
    assert s.tls().sock.version() == "TLSv1.3"
    assert admin.call("CONFIG", "SET", "tls-protocols", "TLSv1.2") == "OK"
    refused(s.tls_port, minv=ssl.TLSVersion.TLSv1_3)
    assert s.tls().sock.version() == "TLSv1.2"
    e = admin.err("CONFIG", "SET", "tls-protocols", "TLSv9")
    assert e.startswith("ERR "), e
    assert admin.call("CONFIG", "GET", "tls-protocols") == [b"tls-protocols", b"TLSv1.2"]
    assert s.tls().call("PING") == "PONG"


# ---------------------------------------------------------------------------
# Start-up
# ---------------------------------------------------------------------------

def start_fails(server, *args):
    """Run echd with a TLS port and these arguments; it must exit non-zero within 10 s.
    Returns its output."""
    d = tempfile.mkdtemp(prefix="echd-e2e-tls-start-")
    try:
        cmd = [server.exe, "--port", "0", "--tls-port", str(free_port()), "--bind", "127.0.0.1",
               "--dir", os.path.join(d, "data")] + list(args)
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise AssertionError("echd %s started instead of failing" % " ".join(args))
        out = out.decode(errors="replace")
        assert p.returncode != 0, "echd %s exited 0: %s" % (" ".join(args), out)
        if server.is_echd:
            # a configuration error: the status systemd's unit does not restart on
            assert p.returncode == 2, "echd %s exited %d: %s" % (" ".join(args), p.returncode, out)
        return out
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_startup_refuses_bad_certificates(server):
    c = certs()
    ca = ["--tls-ca-cert-file", c.path("ca.crt")]
    missing = os.path.join(c.dir, "missing.crt")
    out = start_fails(server, "--tls-cert-file", missing,
                      "--tls-key-file", c.path("server-a.key"), *ca)
    assert "cannot load tls-cert-file '%s'" % missing in out, out

    missing_key = os.path.join(c.dir, "missing.key")
    out = start_fails(server, "--tls-cert-file", c.path("server-a.crt"),
                      "--tls-key-file", missing_key, *ca)
    assert "cannot load tls-key-file '%s'" % missing_key in out, out

    out = start_fails(server, "--tls-cert-file", c.path("server-a.crt"),
                      "--tls-key-file", c.path("server-b.key"), *ca)
    assert ("tls-key-file '%s' does not match tls-cert-file '%s'"
            % (c.path("server-b.key"), c.path("server-a.crt"))) in out, out

    out = start_fails(server, "--tls-cert-file", c.path("client.csr"),
                      "--tls-key-file", c.path("server-a.key"), *ca)
    assert "cannot load tls-cert-file '%s'" % c.path("client.csr") in out, out

    out = start_fails(server, *ca)
    assert "tls-cert-file and tls-key-file must be set" in out, out

    out = start_fails(server, "--tls-cert-file", c.path("server-a.crt"),
                      "--tls-key-file", c.path("server-a.key"))
    assert "tls-ca-cert-file" in out, out          # mutual TLS needs a CA

    missing_ca = os.path.join(c.dir, "missing-ca.crt")
    out = start_fails(server, "--tls-cert-file", c.path("server-a.crt"),
                      "--tls-key-file", c.path("server-a.key"), "--tls-ca-cert-file", missing_ca)
    assert missing_ca in out, out

    out = start_fails(server, "--tls-cert-file", c.path("server-a.crt"),
                      "--tls-key-file", c.path("server-a-enc.key"), "--tls-key-file-pass",
                      "wrong-pass", *ca)
    assert "cannot load tls-key-file '%s'" % c.path("server-a-enc.key") in out, out


def test_key_file_passphrase(server):
    s = tls_server(server, "--tls-key-file-pass", "key-pass-123", key="server-a-enc")
    assert s.tls().call("PING") == "PONG"
    # a reload reads the encrypted key with the same passphrase
    s.install("server-b")
    mark = len(s.log_text())
    s.proc.send_signal(signal.SIGHUP)
    wait_log(s, "TLS certificates reloaded", mark)
    assert new_cn(s) == "server-b"
    # the passphrase itself is never logged
    assert "key-pass-123" not in s.log_text().split("=== start:")[-1].split("\n", 1)[1]


def test_no_certificate_user_without_tls_auth_clients_user(server):
    """tls-auth-clients-user off (the default): a client certificate logs nobody in."""
    s = tls_server(server, "--requirepass", "pw-default-1")
    admin = s.raw()
    admin.call("AUTH", "pw-default-1")
    admin.call("ACL", "SETUSER", "worker", "on", ">worker-pw", "~*", "+@all")
    c = s.tls(cert="worker")
    assert c.err("XADD", "jobs:1", "*", "f", "v") == "NOAUTH Authentication required."


def test_certificate_cn_logs_in_as_user(server):
    s = tls_server(server, "--requirepass", "pw-default-2", "--tls-auth-clients-user", "CN")
    admin = s.raw()
    assert admin.err("PING") == "NOAUTH Authentication required."
    admin.call("AUTH", "pw-default-2")
    admin.call("ACL", "SETUSER", "worker", "on", ">worker-pw", "~jobs:*", "+@all", "-@admin")
    admin.call("ACL", "SETUSER", "sleepy", "off", ">sleepy-pw", "~*", "+@all")

    w = s.tls(cert="worker")
    assert w.call("XADD", "jobs:1", "1-1", "f", "v") == b"1-1"
    assert w.err("XADD", "other", "1-1", "f", "v") == "NOPERM No permissions to access a key"
    assert w.err("CONFIG", "GET", "port").startswith(
        "NOPERM User worker has no permissions to run the 'config")
    assert w.call("XLEN", "jobs:1") == 1

    # python3-redis with the worker certificate and no password at all
    r = s.tls_client(cert="worker")
    assert r.xadd("jobs:2", {"a": "b"}, id="1-1") == "1-1"
    assert r.xlen("jobs:2") == 1

    # a certificate naming no user, or a disabled one: not logged in
    c = s.tls(cert="client")
    assert c.err("XLEN", "jobs:1") == "NOAUTH Authentication required."
    assert c.call("AUTH", "pw-default-2") == "OK"     # a password still works
    assert c.call("XLEN", "jobs:1") == 1
    z = s.tls(cert="sleepy")
    assert z.err("XLEN", "jobs:1") == "NOAUTH Authentication required."

    # with tls-auth-clients optional, no certificate means no user either
    admin.call("CONFIG", "SET", "tls-auth-clients", "optional")
    n = s.tls(cert=None)
    assert n.err("XLEN", "jobs:1") == "NOAUTH Authentication required."

    # turned off at run time: new connections are no longer logged in by certificate
    admin.call("CONFIG", "SET", "tls-auth-clients-user", "off")
    assert s.tls(cert="worker").err("XLEN", "jobs:1") == "NOAUTH Authentication required."
    assert w.call("XLEN", "jobs:1") == 1   # the one logged in before stays logged in


def test_certificate_cn_with_default_user_off(server):
    """No password at all: the default user switched off, so that only clients whose
    certificate names an enabled user get in."""
    s = tls_server(server, "--tls-auth-clients-user", "CN")
    admin = s.raw()
    admin.call("ACL", "SETUSER", "worker", "on", "~jobs:*", "+@all")   # no password
    admin.call("ACL", "SETUSER", "default", "off")
    assert s.raw().err("PING") == "NOAUTH Authentication required."
    assert s.tls(cert="client").err("PING") == "NOAUTH Authentication required."
    w = s.tls(cert="worker")
    assert w.call("XADD", "jobs:1", "1-1", "f", "v") == b"1-1"
    assert w.call("ACL", "WHOAMI") == b"worker"
    # a user without a password cannot be reached with AUTH: it has no password to match
    assert s.raw().err("AUTH", "worker", "") == (
        "WRONGPASS invalid username-password pair or user is disabled.")


def test_certificate_cn_whoami(server):
    s = tls_server(server, "--requirepass", "pw-default-3", "--tls-auth-clients-user", "CN")
    admin = s.raw()
    admin.call("AUTH", "pw-default-3")
    admin.call("ACL", "SETUSER", "worker", "on", "nopass", "~jobs:*", "+@all")
    assert s.tls(cert="worker").call("ACL", "WHOAMI") == b"worker"
    assert s.tls(cert="client").call("AUTH", "pw-default-3") == "OK"


# ---------------------------------------------------------------------------
# TLS only
# ---------------------------------------------------------------------------

def listening_ports(pid):
    """TCP ports the process listens on (from /proc: its socket inodes in state LISTEN)."""
    inodes = set()
    fd_dir = "/proc/%d/fd" % pid
    for fd in os.listdir(fd_dir):
        try:
            t = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if t.startswith("socket:["):
            inodes.add(t[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if parts[3] == "0A" and parts[9] in inodes:
                        ports.add(int(parts[1].rsplit(":", 1)[1], 16))
        except OSError:
            pass
    return ports


def test_tls_only(server):
    s = tls_server(server, plain=False)
    c = s.tls()
    assert c.call("CONFIG", "GET", "port") == [b"port", b"0"]
    assert c.call("XADD", "s", "1-1", "f", "v") == b"1-1"
    assert listening_ports(s.proc.pid) == {s.tls_port}
    assert cli_tls(s.tls_port, "XLEN", "s").stdout == "1\n"
    # the port the harness picked for plain TCP is not served
    try:
        RespConn(s.port, timeout=2).close()
        raise AssertionError("something listens on the unused plain port %d" % s.port)
    except ConnectionRefusedError:
        pass
    # and the server stops cleanly (stop() records a non-zero exit)
    s.stop()
    assert not s.bad_exits, s.bad_exits


# ---------------------------------------------------------------------------
# echo-admin --tls
# ---------------------------------------------------------------------------

def admin_exe(server):
    """echo-admin in the build tree beside echd: <build>/tools/echo-admin."""
    build = os.path.dirname(os.path.dirname(os.path.abspath(server.exe)))
    return os.path.join(build, "tools", "echo-admin")


def admin(server, port, *args, ca="ca", cert="client", host="127.0.0.1", timeout=30):
    """Run `echo-admin --tls --cacert <ca>.crt [--cert/--key <cert>] --host host -p port args`.
    ca=None or cert=None leave those options out."""
    c = certs()
    cmd = [admin_exe(server), "--tls", "--host", host, "-p", str(port)]
    if ca:
        cmd += ["--cacert", c.path(ca + ".crt")]
    if cert:
        cmd += ["--cert", c.path(cert + ".crt"), "--key", c.path(cert + ".key")]
    env = dict(os.environ, NO_COLOR="1")
    env.pop("ECHD_AUTH", None)
    env.pop("ECHD_USER", None)
    return subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def admin_ok(server, port, *args, **kw):
    p = admin(server, port, *args, **kw)
    assert p.returncode == 0, "exit %d\nstdout: %s\nstderr: %s" % (p.returncode, p.stdout,
                                                                 p.stderr)
    return p


def admin_json(server, port, *args, **kw):
    return json.loads(admin_ok(server, port, "--json", *args, **kw).stdout)


def admin_fails(server, port, *args, code=3, **kw):
    """echo-admin must exit with status code, print nothing on stdout; returns its stderr."""
    p = admin(server, port, *args, **kw)
    assert p.returncode == code, "exit %d, wanted %d\nstdout: %s\nstderr: %s" % (
        p.returncode, code, p.stdout, p.stderr)
    assert p.stdout == "", p.stdout
    assert p.stderr.startswith("echo-admin: "), p.stderr
    return p.stderr


def test_admin_over_tls_matches_xinfo_and_xpending(server):
    s = tls_server(server, plain=False)   # TLS only, client certificates required
    r = s.tls_client()
    for i in range(1, 31):
        r.xadd("orders", {"item": "book%d" % i}, id="%d-1" % i)
    r.xadd("events", {"n": "1"}, id="5-0")
    r.xgroup_create("orders", "billing", id="0")
    r.xgroup_create("orders", "shipping", id="0")
    r.xreadgroup("billing", "alice", {"orders": ">"}, count=10)
    r.xreadgroup("billing", "bob", {"orders": ">"}, count=5)
    r.xreadgroup("shipping", "carol", {"orders": ">"}, count=3)
    port = s.tls_port

    table = admin_ok(server, port, "streams").stdout.splitlines()
    assert table[0].split()[:2] == ["STREAM", "LENGTH"], table
    assert sorted(line.split()[0] for line in table[1:]) == ["events", "orders"], table
    assert [line.split()[1] for line in table[1:] if line.startswith("orders")] == ["30"]

    doc = admin_json(server, port, "streams")
    assert sorted(x["name"] for x in doc["streams"]) == ["events", "orders"], doc
    for st in doc["streams"]:
        info = r.xinfo_stream(st["name"])
        assert st["length"] == info["length"], (st, info)
        assert st["groups"] == info["groups"]
        assert st["entries_added"] == info["entries-added"]
        assert st["first_id"] == info["first-entry"][0]
        assert st["last_id"] == info["last-entry"][0]
        assert st["last_generated_id"] == info["last-generated-id"]

    doc = admin_json(server, port, "groups", "orders")
    want = {g["name"]: g for g in r.xinfo_groups("orders")}
    got = {g["name"]: g for g in doc["groups"]}
    assert sorted(got) == sorted(want) == ["billing", "shipping"], (got, want)
    for name, g in got.items():
        w = want[name]
        assert (g["pending"], g["consumers"], g["last_delivered_id"], g["entries_read"],
                g["lag"]) == (w["pending"], w["consumers"], w["last-delivered-id"],
                              w["entries-read"], w["lag"]), (g, w)

    def xpending(key, grp):
        return [(x["message_id"], x["consumer"], x["times_delivered"])
                for x in r.xpending_range(key, grp, "-", "+", 1000000)]

    doc = admin_json(server, port, "pending", "orders", "billing")
    rows = [(x["id"], x["consumer"], x["deliveries"]) for x in doc["pending"]]
    assert rows == xpending("orders", "billing") and len(rows) == 15, rows
    assert doc["count"] == 15 and doc["truncated"] is False, doc
    table = admin_ok(server, port, "pending", "orders", "shipping").stdout.splitlines()
    assert [line.split()[:2] for line in table[1:]] == [["1-1", "carol"], ["2-1", "carol"],
                                                        ["3-1", "carol"]], table

    # a pending list of three XPENDING pages (1,000 rows each): replies of many TLS records,
    # read while OpenSSL may hold decrypted bytes that poll() cannot see
    pipe = r.pipeline(transaction=False)
    for i in range(2500):
        pipe.xadd("bulk", {"i": "x" * 40}, id="%d-1" % (i + 1))
    pipe.execute()
    r.xgroup_create("bulk", "g", id="0")
    r.xreadgroup("g", "worker", {"bulk": ">"}, count=2500)
    doc = admin_json(server, port, "pending", "bulk", "g")
    assert doc["count"] == 2500, doc["count"]
    assert [(x["id"], x["consumer"], x["deliveries"]) for x in doc["pending"]] == \
        xpending("bulk", "g")

    # an action over TLS, and the name check for a DNS name (the certificate names localhost)
    doc = admin_json(server, port, "ack", "orders", "billing", "1-1", "2-1", host="localhost")
    assert (doc["action"], doc["acked"]) == ("ack", 2), doc
    assert r.xpending("orders", "billing")["pending"] == 13


def test_admin_tls_refusals(server):
    s = tls_server(server)                 # tls-auth-clients yes
    s.tls_client().xadd("q", {"a": "b"}, id="1-1")
    port = s.tls_port
    c = certs()

    # the server's certificate is checked: against --cacert, else the system's CAs
    err = admin_fails(server, port, "streams", ca="otherca")
    assert "127.0.0.1:%d: TLS handshake failed: certificate verify failed: " % port in err, err
    assert ("self-signed certificate in certificate chain" in err
            or "unable to get local issuer certificate" in err), err
    err = admin_fails(server, port, "streams", ca=None)
    assert "TLS handshake failed: certificate verify failed: " in err, err
    # unless --insecure
    assert admin_ok(server, port, "--insecure", "streams", ca="otherca").stdout.startswith(
        "STREAM")

    # a client certificate is required: TLS 1.3 refuses it after the client's handshake ended,
    # so echo-admin learns it from the alert when it sends its first command
    err = admin_fails(server, port, "streams", cert=None)
    assert "127.0.0.1:%d: TLS: tlsv13 alert certificate required" % port in err, err
    assert "--cert and --key" in err, err
    # with TLS 1.2 the handshake itself fails
    admin_conn = s.raw()
    assert admin_conn.call("CONFIG", "SET", "tls-protocols", "TLSv1.2") == "OK"
    err = admin_fails(server, port, "streams", cert=None)
    assert "127.0.0.1:%d: TLS handshake failed: sslv3 alert handshake failure" % port in err, err
    assert "client certificate? --cert and --key" in err, err
    assert admin_ok(server, port, "streams").stdout.startswith("STREAM")
    assert admin_conn.call("CONFIG", "SET", "tls-protocols", "TLSv1.2 TLSv1.3") == "OK"
    assert admin_ok(server, port, "streams").stdout.startswith("STREAM")

    # --cert and --key go together: a usage error, before any connection
    for opt in ("--cert", "--key"):
        p = subprocess.run([admin_exe(server), "-p", str(port), "--cacert", c.path("ca.crt"),
                            opt, c.path("client.crt"), "streams"], capture_output=True,
                           text=True, timeout=30)
        assert p.returncode == 2 and "--cert and --key go together" in p.stderr, (opt, p.stderr)

    # files that cannot be used: exit 3, naming the file
    missing = os.path.join(c.dir, "missing.crt")
    p = subprocess.run([admin_exe(server), "-p", str(port), "--cacert", missing, "streams"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 3, p.stderr
    assert "cannot load --cacert '%s': No such file or directory" % missing in p.stderr, p.stderr
    p = subprocess.run([admin_exe(server), "-p", str(port), "--cacert", c.path("client.csr"),
                        "streams"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 3 and "cannot load --cacert '%s'" % c.path("client.csr") in p.stderr, \
        p.stderr
    p = subprocess.run([admin_exe(server), "-p", str(port), "--cacert", c.path("ca.crt"),
                        "--cert", missing, "--key", c.path("client.key"), "streams"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 3 and "cannot load --cert '%s'" % missing in p.stderr, p.stderr
    p = subprocess.run([admin_exe(server), "-p", str(port), "--cacert", c.path("ca.crt"),
                        "--cert", c.path("client.crt"), "--key", c.path("worker.key"),
                        "streams"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 3, p.stderr
    assert "--key '%s' does not match --cert '%s'" % (c.path("worker.key"),
                                                       c.path("client.crt")) in p.stderr

    # --cacertdir: a directory prepared with openssl rehash
    cadir = os.path.join(c.dir, "admin-cadir")
    if not os.path.isdir(cadir):
        os.mkdir(cadir)
        shutil.copyfile(c.path("ca.crt"), os.path.join(cadir, "ca.crt"))
        c._run("rehash", cadir)
    assert admin_ok(server, port, "--cacertdir", cadir, "streams", ca=None).stdout.startswith(
        "STREAM")
    p = admin(server, port, "--cacertdir", missing, "streams", ca=None)
    assert p.returncode == 3 and "cannot load --cacertdir '%s'" % missing in p.stderr, p.stderr

    # TLS is for TCP and for live mode
    p = admin(server, port, "-s", os.path.join(c.dir, "echd.sock"), "streams")
    assert p.returncode == 2 and "--unixsocket" in p.stderr, p.stderr
    p = admin(server, port, "-d", s.dir, "streams")
    assert p.returncode == 2 and "--data-dir" in p.stderr, p.stderr
    # and the connection the failures shared stays fine
    assert s.tls().call("XLEN", "q") == 1


def test_admin_tls_checks_the_server_name(server):
    s = tls_server(server)
    c = certs()
    port = s.tls_port
    # a certificate for mq.example.net only (CONFIG SET: start() itself checks "localhost")
    assert s.raw().call("CONFIG", "SET", "tls-cert-file", c.path("elsewhere.crt"),
                        "tls-key-file", c.path("elsewhere.key")) == "OK"
    err = admin_fails(server, port, "streams")
    assert err.startswith("echo-admin: 127.0.0.1:%d: TLS handshake failed: certificate verify "
                          "failed: IP address mismatch" % port), err
    err = admin_fails(server, port, "streams", host="localhost")
    assert "localhost:%d: TLS handshake failed: certificate verify failed: hostname mismatch"\
        % port in err, err
    admin_ok(server, port, "--insecure", "streams", host="localhost")
    # back to a certificate for localhost and 127.0.0.1: both names pass
    assert s.raw().call("CONFIG", "SET", "tls-cert-file", c.path("server-a.crt"),
                        "tls-key-file", c.path("server-a.key")) == "OK"
    admin_ok(server, port, "streams", host="localhost")
    admin_ok(server, port, "streams", host="127.0.0.1")


def test_admin_tls_against_plaintext_and_silent_ports(server):
    """A port that does not speak TLS fails within --timeout, never hangs."""
    t0 = time.monotonic()
    err = admin_fails(server, server.port, "--timeout", "2", "streams")   # the plain echd
    assert time.monotonic() - t0 < 10
    assert "127.0.0.1:%d: TLS handshake" % server.port in err, err
    # a listener that never answers (the kernel completes the connection, nobody accepts it)
    quiet = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        quiet.bind(("127.0.0.1", 0))
        quiet.listen(4)
        port = quiet.getsockname()[1]
        t0 = time.monotonic()
        err = admin_fails(server, port, "--timeout", "1", "streams")
        took = time.monotonic() - t0
        assert 0.9 < took < 8, took
        assert "127.0.0.1:%d: TLS handshake: no answer within 1000 ms (--timeout)" % port in err, \
            err
    finally:
        quiet.close()


def test_admin_tls_certificate_logs_in(server):
    """tls-auth-clients-user CN: echo-admin's certificate is its login, no password needed."""
    s = tls_server(server, "--requirepass", "pw-admin-1", "--tls-auth-clients-user", "CN")
    a = s.raw()
    a.call("AUTH", "pw-admin-1")
    a.call("ACL", "SETUSER", "worker", "on", "nopass", "~*", "+@all")
    a.call("XADD", "jobs", "1-1", "f", "v")
    doc = admin_json(server, s.tls_port, "streams", cert="worker")
    assert [x["name"] for x in doc["streams"]] == ["jobs"], doc
    err = admin_fails(server, s.tls_port, "streams", cert="client")   # CN names no user
    assert "needs a password" in err, err


def test_admin_tls_sends_sni_for_names_only(server):
    """SNI carries --host when it is a name; an address is never sent (RFC 6066)."""
    c = certs()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(c.path("server-a.crt"), c.path("server-a.key"))
    seen = []
    ctx.sni_callback = lambda sock, name, _ctx: seen.append(name)
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.bind(("127.0.0.1", 0))
    ls.listen(4)
    ls.settimeout(20)

    def serve():
        # answers the first command (HELLO) with an error: echo-admin stops there
        for _ in range(2):
            try:
                conn, _ = ls.accept()
            except OSError:
                return
            try:
                s = ctx.wrap_socket(conn, server_side=True)
                s.recv(1024)
                s.sendall(b"-ERR not a real server\r\n")
                s.close()
            except (OSError, ssl.SSLError):
                conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        port = ls.getsockname()[1]
        for host in ("localhost", "127.0.0.1"):
            err = admin_fails(server, port, "streams", host=host, cert=None)
            assert "%s:%d: authentication failed: ERR not a real server" % (host, port) in err, err
        t.join(20)
    finally:
        ls.close()
    assert seen == ["localhost", None], seen


@timeout(60)
def test_refused_over_tls_hears_why(server):
    """Over maxclients, a TLS client is refused after the handshake, with the error encrypted
    (sent in clear it would read as a broken handshake); a refused connection that never
    shakes hands is closed after tls-handshake-timeout; the clients already in are not
    disturbed."""
    s = tls_server(server, "--maxclients", "1", "--tls-handshake-timeout", "4")

    def first_in():
        # the start-up check's own connection may not be gone yet
        c = s.tls()
        c.send("PING")
        if c.read() == "PONG":
            return c
        c.close()
        return None
    inside = wait_until(first_in, timeout=5, what="the first client in")
    over = s.tls()
    assert over.read() == RespError("ERR max number of clients reached")
    assert over.wait_closed(5)
    silent = socket.create_connection(("127.0.0.1", s.tls_port), timeout=15)
    t0 = time.monotonic()
    try:
        assert silent.recv(100) == b""          # closed by echd, not by us
    finally:
        silent.close()
    waited = time.monotonic() - t0
    assert 3 < waited < 12, waited
    assert inside.call("PING") == "PONG"
    rejected = [x for x in inside.call("INFO", "stats").decode().split("\r\n")
                if x.startswith("rejected_connections:")]
    assert len(rejected) == 1 and int(rejected[0].split(":")[1]) >= 2, rejected


@timeout(60)
def test_unfinished_handshakes_closed_in_time(server):
    """tls-handshake-timeout counts from accept: a connection that says nothing and one that
    sends a real ClientHello a byte at a time (slow loris: never idle) are both closed once it
    has passed, while the handshake is still unfinished; a client that finished its handshake
    may then be idle as long as it likes."""
    s = tls_server(server, "--tls-handshake-timeout", "1")
    good = s.tls()
    assert good.call("PING") == "PONG"
    hello = client_hello()
    assert len(hello) > 100, len(hello)
    sent = collections.Counter()

    def one_byte(sock):
        if sent[sock] < len(hello):
            sock.send(hello[sent[sock]:sent[sock] + 1])
            sent[sock] += 1
    mark = len(s.log_text())
    silent = socket.create_connection(("127.0.0.1", s.tls_port), timeout=10)
    dribbler = socket.create_connection(("127.0.0.1", s.tls_port), timeout=10)
    try:
        t_silent, t_dribbler = watch_closed([(silent, None), (dribbler, one_byte)], 8)
        assert t_silent is not None, "a silent TLS connection open 8 s after accept"
        assert t_dribbler is not None, \
            "a dribbling TLS connection open 8 s after accept (%d bytes sent)" % sent[dribbler]
        assert t_silent >= 0.8 and t_dribbler >= 0.8, (t_silent, t_dribbler)
        # the dribbler was closed mid-ClientHello, not by a finished or failed handshake
        assert 4 <= sent[dribbler] < len(hello), (sent[dribbler], len(hello))
    finally:
        silent.close()
        dribbler.close()
    wait_until(lambda: sum("TLS handshake not finished within 1s" in l
                           for l in s.log_lines_since(mark)) == 2,
               what="both closes logged")
    assert unauthenticated_clients(good) == 0
    time.sleep(1.2)       # longer than the timeout, on a finished handshake
    assert good.call("PING") == "PONG"
    assert s.tls().call("PING") == "PONG"


def clients_field(c, name):
    info = c.call("INFO", "clients").decode()
    return int(info.split(name + ":")[1].split("\r\n")[0])


def connected_clients(c):
    return clients_field(c, "connected_clients")


def unauthenticated_clients(c):
    return clients_field(c, "unauthenticated_clients")


@timeout(90)
def test_handshake_flood_does_not_lock_out_clients(server):
    """maxclients connections that never finish their handshake (silent, or a few bytes of a
    ClientHello) do not keep clients out: at maxclients a new connection closes the oldest
    one still in its handshake (or not logged in), never an established client, so clients
    with a certificate get in all along; only when every slot is held by an established
    client is a new one refused."""
    n = 20
    s = tls_server(server, "--maxclients", str(n), "--tls-handshake-timeout", "60")
    hello = client_hello()
    inside = [s.tls() for _ in range(3)]
    for c in inside:
        assert c.call("PING") == "PONG"
    # the start-up check's connection may not be gone yet
    wait_until(lambda: connected_clients(inside[0]) == 3, what="3 clients connected")

    def flood(k):
        socks = []
        for i in range(k):
            sock = socket.create_connection(("127.0.0.1", s.tls_port), timeout=10)
            if i % 3 == 0:
                sock.sendall(hello[:10])       # a handshake begun, never finished
            socks.append(sock)
        return socks
    attackers = flood(n)
    try:
        c = s.tls()
        assert c.call("PING") == "PONG"
        inside.append(c)
        # 17 slots were free: the 4 oldest made room for the 3 newest and the client
        wait_until(lambda: not any(sock_open(a) for a in attackers[:4]),
                   what="the 4 oldest unfinished handshakes closed")
        assert all(sock_open(a) for a in attackers[4:])
        assert unauthenticated_clients(inside[0]) == n - 4
        assert connected_clients(inside[0]) == n
        for c in inside:
            assert c.call("PING") == "PONG"
        # clients get in, each one at the cost of the oldest unfinished handshake
        for _ in range(5):
            c = s.tls()
            assert c.call("PING") == "PONG"
            inside.append(c)
            attackers += flood(n)
            for c in inside:
                assert c.call("PING") == "PONG"
        assert connected_clients(inside[0]) <= n + 1
        # every slot established: now a new client is refused, and no client was closed
        while len(inside) < n:
            c = s.tls()
            assert c.call("PING") == "PONG"
            inside.append(c)
        wait_until(lambda: not any(sock_open(a) for a in attackers),
                   what="every unfinished handshake closed to make room")
        assert unauthenticated_clients(inside[0]) == 0
        over = s.tls()
        assert over.read() == RespError("ERR max number of clients reached")
        for c in inside:
            assert c.call("PING") == "PONG"
    finally:
        for a in attackers:
            a.close()
