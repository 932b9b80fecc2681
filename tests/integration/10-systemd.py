"""systemd integration and the packaged files: the unit files, the notify protocol (READY=1
once listening, WATCHDOG=1 at half WATCHDOG_USEC, RELOADING/READY on SIGHUP, STOPPING=1 on
SIGTERM and exit status 0), socket activation (LISTEN_FDS/LISTEN_PID), journald priority
prefixes (JOURNAL_STREAM), log reopening on SIGHUP, and packaging/echd.conf and
docs/echd.conf.5 against `echd --list-options`.

Each test starts its own echd processes (the module's shared server only gives the binary);
none needs a running systemd. `systemd-analyze` (Debian package systemd) is required: without
it the unit-file tests fail and say so.

The Debian package itself is tested by tests/packaging/build-deb.sh.
"""

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from echdtest import Closed, RespConn, RespError, free_port, wait_until

ECHD_ONLY = "systemd integration and echd's packaging files"
PG_SUITE = False
PG_SUITE_WHY = ("its echds are its own processes (notify socket, socket activation, the "
                "packaged echd.conf) on LMDB in their own --dir: this pass would repeat the "
                "LMDB pass, not test PostgreSQL")
TIMEOUT = 60

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SERVICE = os.path.join(ROOT, "packaging", "systemd", "echd.service")
SOCKET = os.path.join(ROOT, "packaging", "systemd", "echd.socket")
CONF = os.path.join(ROOT, "packaging", "echd.conf")
CONF_MAN = os.path.join(ROOT, "docs", "echd.conf.5")

# Variables through which a service manager talks to echd: never inherited from the runner.
SD_VARS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID",
           "LISTEN_FDNAMES", "JOURNAL_STREAM")


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in SD_VARS}
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Echd:
    """One echd started by a test with its own environment, data dir and stderr file."""

    def __init__(self, exe, args=(), env=None, argv0=None, stderr_path=None, **popen):
        self.root = tempfile.mkdtemp(prefix="echd-sd-")
        self.dir = os.path.join(self.root, "data")
        self.stderr_path = stderr_path or os.path.join(self.root, "stderr.log")
        cmd = (argv0 or []) + [exe] + list(args)
        if "--dir" not in args:
            cmd += ["--dir", self.dir]
        self.cmd = cmd
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=err,
                                         env=env if env is not None else clean_env(),
                                         cwd=self.root, start_new_session=True, **popen)

    def log(self):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return "(no log)"

    def stop(self, timeout=10):
        """SIGTERM; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("echd did not exit within %d s of SIGTERM\n%s"
                                     % (timeout, self.log()))
        return self.proc.returncode

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def can_connect(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def ping_tcp(port):
    c = RespConn(port, timeout=5)
    try:
        return c.call("PING")
    finally:
        c.close()


def wait_serving(port, e, timeout=5.0):
    """Waits until echd e answers PING on 127.0.0.1:port; fails with its log."""
    deadline = time.monotonic() + timeout
    while True:
        if e.proc.poll() is not None:
            raise AssertionError("echd exited with status %s\n%s" % (e.proc.returncode, e.log()))
        try:
            if ping_tcp(port) == "PONG":
                return
        except (OSError, Closed, RespError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError("echd did not answer PING on port %d within %.0f s\n%s"
                                 % (port, timeout, e.log()))
        time.sleep(0.02)


def ping_unix(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(path)
        s.sendall(b"*1\r\n$4\r\nPING\r\n")
        data = b""
        while not data.endswith(b"\r\n"):
            chunk = s.recv(100)
            if not chunk:
                break
            data += chunk
        return data
    finally:
        s.close()


def wait_unix(path, e, timeout=5.0):
    """Waits until echd e answers PING on the unix socket path; fails with its log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if e.proc.poll() is not None:
            raise AssertionError("echd exited with status %s\n%s" % (e.proc.returncode, e.log()))
        try:
            if ping_unix(path) == b"+PONG\r\n":
                return
        except OSError:
            pass
        time.sleep(0.02)
    raise AssertionError("no PONG on %s within %.0f s\n%s" % (path, timeout, e.log()))


class NotifySocket:
    """The service manager's end of the sd_notify protocol: a unix datagram socket."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="echd-notify-")
        self.path = os.path.join(self.dir, "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)

    def recv(self, timeout):
        """One message as {key: value} plus its arrival time, or None on timeout."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(4096)
        except socket.timeout:
            return None
        now = time.monotonic()
        msg = {}
        for line in data.decode().split("\n"):
            if line:
                k, _, v = line.partition("=")
                msg[k] = v
        return msg, now

    def wait_for(self, key, value, timeout, seen=None):
        """Messages until one has key=value; returns (that message, its time)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            r = self.recv(max(left, 0.001)) if left > 0 else None
            if r is None:
                raise AssertionError("no %s=%s within %.1f s; got %r" % (key, value, timeout, seen))
            if seen is not None:
                seen.append(r[0])
            if r[0].get(key) == value:
                return r

    def close(self):
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def list_options(exe):
    """[(name, default, 'runtime'|'restart', help)] from echd --list-options."""
    out = subprocess.run([exe, "--list-options"], capture_output=True, text=True, timeout=10,
                         check=True).stdout
    opts = [tuple(line.split("\t")) for line in out.splitlines() if line]
    assert opts and all(len(o) == 4 for o in opts), out
    return opts


def unit_copy(exe, dest):
    """Copies the unit files to dest, pointing ExecStart at the built echd and the
    repository's echd.conf (systemd-analyze checks that the binary exists)."""
    paths = []
    for src in (SERVICE, SOCKET):
        with open(src) as f:
            text = f.read()
        text = text.replace("/usr/sbin/echd", exe).replace("/etc/echd/echd.conf", CONF)
        p = os.path.join(dest, os.path.basename(src))
        with open(p, "w") as f:
            f.write(text)
        paths.append(p)
    return paths


def systemd_analyze():
    path = shutil.which("systemd-analyze")
    assert path, ("systemd-analyze not found: install the Debian package 'systemd' "
                  "(tools/echd-dev deps does)")
    return path


def unit_settings(path):
    """{(section, key): [values]} of a unit file."""
    settings, section = {}, None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("["):
                section = line.strip("[]")
                continue
            k, _, v = line.partition("=")
            settings.setdefault((section, k.strip()), []).append(v.strip())
    return settings


# ---------------------------------------------------------------------------
# unit files
# ---------------------------------------------------------------------------

def test_unit_files_verify(server):
    sa = systemd_analyze()
    tmp = tempfile.mkdtemp(prefix="echd-units-")
    try:
        units = unit_copy(server.exe, tmp)
        # --man=no: the man pages are checked below (they are not installed here)
        p = subprocess.run([sa, "verify", "--man=no"] + units, capture_output=True, text=True,
                           timeout=60, cwd=tmp)
        assert p.returncode == 0 and not p.stderr.strip() and not p.stdout.strip(), (
            "systemd-analyze verify: status %d\n%s%s" % (p.returncode, p.stdout, p.stderr))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for unit in (SERVICE, SOCKET):
        for doc in unit_settings(unit).get(("Unit", "Documentation"), []):
            for name, sect in re.findall(r"man:([\w.-]+)\((\d)\)", doc):
                page = os.path.join(ROOT, "docs", "%s.%s" % (name, sect))
                assert os.path.isfile(page), "%s names man:%s(%s), no %s" % (
                    unit, name, sect, page)


def test_service_unit_settings(server):
    s = unit_settings(SERVICE)
    want = {
        "Type": "notify", "NotifyAccess": "main",
        "ExecStart": "/usr/sbin/echd /etc/echd/echd.conf",
        "ExecReload": "/bin/kill -HUP $MAINPID",
        "User": "echd", "Group": "echd",
        "StateDirectory": "echd", "ConfigurationDirectory": "echd",
        "Restart": "on-failure", "NoNewPrivileges": "yes", "ProtectSystem": "strict",
        "ProtectHome": "yes", "PrivateTmp": "yes", "PrivateDevices": "yes",
        "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes",
        "ProtectKernelLogs": "yes", "ProtectControlGroups": "yes",
        "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
        "MemoryDenyWriteExecute": "yes", "CapabilityBoundingSet": "",
    }
    for k, v in want.items():
        assert v in s.get(("Service", k), []), "echd.service: want %s=%s, has %r" % (
            k, v, s.get(("Service", k)))
    assert "@system-service" in s.get(("Service", "SystemCallFilter"), []), s
    for k in ("LimitNOFILE", "WatchdogSec", "TimeoutStopSec"):
        assert s.get(("Service", k)), "echd.service sets no %s" % k
    # the unit's state directory is the configuration's data directory, and echd logs to
    # stderr (the journal) there
    with open(CONF) as f:
        conf = [line.split(None, 1) for line in f if line.strip() and line[0] != "#"]
    conf = {w[0]: w[1].strip() if len(w) > 1 else "" for w in conf}
    assert conf.get("dir") == "/var/lib/echd", conf
    assert conf.get("logfile", '""') == '""', conf
    # /metrics on loopback out of the box (issue 28); the unit needs nothing for it
    assert conf.get("http-port") == "7380" and conf.get("http-bind") == "127.0.0.1", conf

    sock = unit_settings(SOCKET)
    assert sock.get(("Socket", "Service")) == ["echd.service"], sock
    listen = sock.get(("Socket", "ListenStream"), [])
    assert "127.0.0.1:7379" in listen, listen


def test_service_security_exposure(server):
    sa = systemd_analyze()
    tmp = tempfile.mkdtemp(prefix="echd-units-")
    try:
        service = unit_copy(server.exe, tmp)[0]
        p = subprocess.run([sa, "security", "--offline=true", "--no-pager", service],
                           capture_output=True, text=True, timeout=60, cwd=tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    m = re.search(r"Overall exposure level for \S+: ([\d.]+) (\w+)", p.stdout)
    assert m, "systemd-analyze security --offline=true: status %d\n%s%s" % (
        p.returncode, p.stdout[-2000:], p.stderr)
    score, word = float(m.group(1)), m.group(2)
    assert word in ("SAFE", "OK"), "exposure %.1f %s (want OK or better)\n%s" % (
        score, word, p.stdout)
    # docs/operations.md states the score: keep it true
    with open(os.path.join(ROOT, "docs", "operations.md")) as f:
        ops = f.read()
    assert "%.1f %s" % (score, word) in ops, (
        "docs/operations.md does not state the exposure level '%.1f %s'" % (score, word))


# ---------------------------------------------------------------------------
# echd.conf and echd.conf(5)
# ---------------------------------------------------------------------------

def conf_blocks():
    """echd.conf split at empty lines: [[line, ...], ...]."""
    with open(CONF) as f:
        text = f.read()
    return [b.splitlines() for b in re.split(r"\n\s*\n", text) if b.strip()]


def conf_words(line):
    """The words of an echd.conf line, commented out or not, quotes removed."""
    try:
        return shlex.split(line.lstrip("#"))
    except ValueError:
        return line.lstrip("#").split()


def test_conf_documents_every_option(server):
    """Each option of --list-options is in packaging/echd.conf, redis.conf style: a commented
    `# name default` line (or the option set, uncommented), in a block that explains it and
    says [runtime] exactly for the options CONFIG SET may change."""
    blocks = conf_blocks()
    problems = []
    for name, default, mut, _help in list_options(server.exe):
        found = None
        for b in blocks:
            for line in b:
                words = conf_words(line)
                if len(words) >= 2 and words[0] == name and (
                        not line.startswith("#") or
                        " ".join(words[1:]).split() == default.split()):
                    found = b
        if found is None:
            problems.append("%s: no '# %s %s' line (nor the option set)"
                            % (name, name, default or '""'))
            continue
        comment = " ".join(line for line in found if line.startswith("#"))
        prose = [line for line in found if line.startswith("# ") and
                 conf_words(line)[:1] != [name]]
        if not prose:
            problems.append("%s: no comment explains it" % name)
        if (mut == "runtime") != ("[runtime]" in comment):
            problems.append("%s is %s but its comment %s [runtime]" % (
                name, mut, "lacks" if mut == "runtime" else "says"))
    # nothing set that echd does not know
    names = {o[0] for o in list_options(server.exe)}
    for b in blocks:
        for line in b:
            if not line.startswith("#") and line.split()[0] not in names:
                problems.append("unknown option set: %r" % line)
    assert not problems, "packaging/echd.conf:\n  " + "\n  ".join(problems)


def test_conf_starts_echd(server):
    """`echd packaging/echd.conf --dir D --port 0 --unixsocket D/s` parses and serves."""
    tmp = tempfile.mkdtemp(prefix="echd-conf-")
    sock = os.path.join(tmp, "s")
    e = Echd(server.exe, [CONF, "--dir", os.path.join(tmp, "data"), "--port", "0",
                          "--http-port", "0", "--unixsocket", sock])
    try:
        wait_unix(sock, e)
        assert os.path.exists(os.path.join(tmp, "data", "data.mdb")), os.listdir(tmp)
        assert e.stop() == 0, e.log()
    finally:
        e.close()
        shutil.rmtree(tmp, ignore_errors=True)


def man_text(path):
    """The text of a man page with font escapes removed."""
    with open(path) as f:
        t = f.read()
    t = re.sub(r"\\f[BIRP]", "", t)
    return t.replace("\\-", "-").replace("\\(dq", '"').replace("\\(aq", "'")


def test_conf_man_page_documents_every_option(server):
    text = man_text(CONF_MAN)
    entries = {}
    for chunk in text.split("\n.TP\n")[1:]:
        first = chunk.split("\n", 1)[0]
        m = re.match(r"\.BI? (\S+)", first)
        if m:
            entries[m.group(1)] = chunk.split("\n.SS", 1)[0].split("\n.SH", 1)[0]
    problems = []
    for name, default, mut, _help in list_options(server.exe):
        body = entries.get(name)
        if body is None:
            problems.append("%s: no .TP entry" % name)
            continue
        flat = re.sub(r"\s+", " ", re.sub(r"^\.\w+ ?", "", body, flags=re.M))
        flat = flat.replace('"', "")
        want = "Default: %s" % (default if default else "empty")
        if want not in flat:
            problems.append("%s: does not say '%s'" % (name, want))
        if (mut == "runtime") != ("Runtime." in flat):
            problems.append("%s is %s: 'Runtime.' %s" % (
                name, mut, "missing" if mut == "runtime" else "wrongly there"))
    assert not problems, "docs/echd.conf.5:\n  " + "\n  ".join(problems)


# ---------------------------------------------------------------------------
# notify protocol
# ---------------------------------------------------------------------------

def test_notify_ready_watchdog_reload_stopping(server):
    ns = NotifySocket()
    port = free_port()
    e = None
    try:
        assert ns.recv(0.2) is None, "a notification before echd was started"
        e = Echd(server.exe, ["--port", str(port), "--bind", "127.0.0.1"],
                 env=clean_env(NOTIFY_SOCKET=ns.path, WATCHDOG_USEC=600000))
        seen = []
        ready, _ = ns.wait_for("READY", "1", 10, seen)
        # READY=1 comes only once the listeners are bound: a connection succeeds now
        assert can_connect(port), "READY=1 received but port %d refuses connections" % port
        assert ping_tcp(port) == "PONG"
        assert [m for m in seen[:-1] if "READY" in m] == [], seen
        assert ready.get("MAINPID") in (None, str(e.proc.pid)), ready
        assert ready.get("STATUS"), "READY=1 without a STATUS= line: %r" % ready

        # WATCHDOG=1 every WATCHDOG_USEC/2 = 0.3 s, from the loop
        pings = []
        t_end = time.monotonic() + 2.0
        while time.monotonic() < t_end:
            r = ns.recv(t_end - time.monotonic())
            if r is not None and r[0].get("WATCHDOG") == "1":
                pings.append(r[1])
        assert 4 <= len(pings) <= 9, "%d WATCHDOG=1 in 2 s (want ~6)" % len(pings)
        gaps = [b - a for a, b in zip(pings, pings[1:])]
        mean = sum(gaps) / len(gaps)
        assert 0.2 <= mean <= 0.45, "WATCHDOG=1 every %.3f s (want 0.3): %r" % (mean, gaps)

        # SIGHUP (ExecReload): RELOADING=1 then READY=1
        e.proc.send_signal(signal.SIGHUP)
        ns.wait_for("RELOADING", "1", 5)
        ns.wait_for("READY", "1", 5)
        assert ping_tcp(port) == "PONG"

        # SIGTERM: STOPPING=1, then exit status 0
        e.proc.send_signal(signal.SIGTERM)
        ns.wait_for("STOPPING", "1", 10)
        e.proc.wait(10)
        assert e.proc.returncode == 0, "exit status %s\n%s" % (e.proc.returncode, e.log())
    finally:
        if e is not None:
            e.close()
        ns.close()


def test_watchdog_for_another_pid_is_ignored(server):
    ns = NotifySocket()
    port = free_port()
    e = None
    try:
        e = Echd(server.exe, ["--port", str(port), "--bind", "127.0.0.1"],
                 env=clean_env(NOTIFY_SOCKET=ns.path, WATCHDOG_USEC=200000, WATCHDOG_PID=1))
        ns.wait_for("READY", "1", 10)
        t_end = time.monotonic() + 0.8
        while time.monotonic() < t_end:
            r = ns.recv(t_end - time.monotonic())
            assert r is None or "WATCHDOG" not in r[0], "WATCHDOG=1 sent for pid 1: %r" % (r,)
        assert e.stop() == 0, e.log()
    finally:
        if e is not None:
            e.close()
        ns.close()


# ---------------------------------------------------------------------------
# socket activation
# ---------------------------------------------------------------------------

def test_socket_activation(server):
    """A listening socket passed as fd 3 with LISTEN_FDS=1 and LISTEN_PID=<echd's pid> is the
    only one echd serves on: its own port stays closed."""
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    port = lsock.getsockname()[1]
    own_port = free_port()
    fd = lsock.fileno()

    def to_fd3():
        # fd 3 in echd, inheritable (Python's own descriptors are close-on-exec)
        if fd == 3:
            os.set_inheritable(3, True)
        else:
            os.dup2(fd, 3)

    e = None
    try:
        # LISTEN_PID must be echd's pid: the shell's $$ survives its exec
        e = Echd(server.exe, ["--port", str(own_port), "--bind", "127.0.0.1"],
                 argv0=["/bin/sh", "-c", 'LISTEN_PID=$$; export LISTEN_PID; exec "$@"', "sh"],
                 env=clean_env(LISTEN_FDS=1), preexec_fn=to_fd3, close_fds=False)
        lsock.close()  # echd holds the only copy now
        wait_serving(port, e)
        c = RespConn(port, timeout=10)
        try:
            eid = c.call("XADD", "act", "*", "f", "v")
            assert c.call("XLEN", "act") == 1
            assert c.call("XRANGE", "act", "-", "+") == [[eid, [b"f", b"v"]]]
        finally:
            c.close()
        assert not can_connect(own_port), "echd also listens on its own port %d" % own_port
        assert "socket activation" in e.log(), e.log()
        assert e.stop() == 0, e.log()
    finally:
        lsock.close()
        if e is not None:
            e.close()


def test_listen_fds_for_another_pid_are_ignored(server):
    port = free_port()
    e = Echd(server.exe, ["--port", str(port), "--bind", "127.0.0.1"],
             env=clean_env(LISTEN_FDS=1, LISTEN_PID=1))
    try:
        wait_serving(port, e)
        assert e.stop() == 0, e.log()
    finally:
        e.close()


# ---------------------------------------------------------------------------
# logging
# ---------------------------------------------------------------------------

def test_journal_stream_priority_prefixes(server):
    tmp = tempfile.mkdtemp(prefix="echd-journal-")
    try:
        err_path = os.path.join(tmp, "stderr")
        open(err_path, "wb").close()
        st = os.stat(err_path)
        port = free_port()
        e = Echd(server.exe, ["--port", str(port), "--bind", "127.0.0.1",
                              "--loglevel", "verbose"],
                 env=clean_env(JOURNAL_STREAM="%d:%d" % (st.st_dev, st.st_ino)),
                 stderr_path=err_path)
        try:
            wait_serving(port, e)   # a client connecting and leaving: verbose lines
            assert e.stop() == 0, e.log()
            lines = e.log().splitlines()
        finally:
            e.close()
        assert lines, "nothing logged"
        bad = [l for l in lines if not re.match(r"<[4-7]>\S", l)]
        assert not bad, "lines without a <N> prefix: %r" % bad
        assert any(l.startswith("<5>") and "started" in l for l in lines), lines
        assert any(l.startswith("<4>") and "SIGTERM" in l for l in lines), lines
        # journald adds the time itself
        assert not any(re.search(r"\d\d:\d\d:\d\d", l) for l in lines), lines

        # JOURNAL_STREAM naming another file: stderr is not the journal, normal format
        other = os.stat(tmp)
        e = Echd(server.exe, ["--port", str(port), "--bind", "127.0.0.1"],
                 env=clean_env(JOURNAL_STREAM="%d:%d" % (other.st_dev, other.st_ino)))
        try:
            wait_serving(port, e)
            assert e.stop() == 0, e.log()
            lines = e.log().splitlines()
        finally:
            e.close()
        assert lines and all(re.match(r"\d+:M \d", l) for l in lines), lines
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_sighup_reopens_log_file(server):
    """ExecReload: after logrotate renamed the log, SIGHUP makes echd write a new one."""
    tmp = tempfile.mkdtemp(prefix="echd-logfile-")
    log = os.path.join(tmp, "echd.log")
    port = free_port()
    e = Echd(server.exe, ["--port", str(port), "--bind", "127.0.0.1", "--logfile", log])
    try:
        wait_serving(port, e)
        wait_until(lambda: os.path.exists(log), timeout=5, what="the log file")
        os.rename(log, log + ".1")
        e.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: os.path.exists(log), timeout=5, what="a new log file after SIGHUP")
        assert ping_tcp(port) == "PONG"
        assert e.stop() == 0, e.log()
        with open(log + ".1") as f:
            old = f.read()
        with open(log) as f:
            new = f.read()
        assert "started" in old and "SIGHUP" in old, old
        assert "SIGTERM" in new and "started" not in new, new
    finally:
        e.close()
        shutil.rmtree(tmp, ignore_errors=True)
