"""Shared by the Python benchmarks: start servers on free loopback ports and stop them.

Each server runs in its own directory under the benchmark's temporary directory, logs there,
and dies with the benchmark (PR_SET_PDEATHSIG), even if the benchmark is killed.
"""

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def free_run(n):
    """A port p with p .. p + n - 1 free (a server of n workers listens on them all)."""
    for _ in range(100):
        p = free_port()
        socks = []
        try:
            for q in range(p, p + n):
                socks.append(socket.socket())
                socks[-1].bind(("127.0.0.1", q))
            return p
        except (OSError, OverflowError):
            continue
        finally:
            for x in socks:
                x.close()
    sys.exit("no run of %d free ports" % n)


def die_with_parent():
    """In a child before exec: SIGTERM it when the benchmark ends, even by SIGKILL."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def launch(tmp, servers, name, cmd_for, timeout=60, nports=1):
    """Start a server in tmp/name, add it to servers; returns (Popen, port, dir) once it
    answers PING. cmd_for(port, dir) -> argv. Exits with the server's log if it does not.
    nports: the server listens on port .. port + nports - 1, all free when it starts."""
    d = os.path.join(tmp, name)
    os.makedirs(d, exist_ok=True)
    port = free_run(nports)
    cmd = cmd_for(port, d)
    logf = open(os.path.join(tmp, name + ".log"), "ab")
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                         start_new_session=True, preexec_fn=die_with_parent)
    logf.close()
    servers.append(p)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and p.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return p, port, d
        except OSError:
            pass
        time.sleep(0.005)
    with open(os.path.join(tmp, name + ".log"), "rb") as f:
        tail = f.read().decode(errors="replace").splitlines()[-20:]
    sys.exit(f"{name} did not start ({' '.join(cmd)}); its log:\n" + "\n".join(tail))


def stop(servers, p, timeout=60):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    if p in servers:
        servers.remove(p)
