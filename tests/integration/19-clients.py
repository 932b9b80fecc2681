"""Client libraries other than the harness' own, unchanged, against the server.

- hiredis, the C client (Debian's libhiredis 0.14): tests/clients/hiredis_e2e.c, built as
  <build>/tests/hiredis-e2e. Its blocking, pipelined and asynchronous (libevent adapter)
  APIs, binary values, group commands and error replies. hiredis 0.14 has no TLS, so it
  always uses the server's plain port.
- ioredis, the Node.js client (from npm into tests/clients/node: `tools/echd-dev deps`
  runs `npm ci` there): tests/clients/node/ioredis_e2e.js. Its handshake (CLIENT SETINFO,
  the INFO ready check, SETNAME, SELECT), stream and group commands, pipelines and MULTI,
  blocking reads, Buffers, error replies, ACL users.
- node-redis (@redis/client, from npm beside ioredis): tests/clients/node/node_redis_e2e.js,
  in RESP3: HELLO 3 on connect, and echd's RESP3 maps, verbatim strings and nulls parsed by
  a client library rather than by the harness' own reader.

The Node.js clients go through the TLS port in the run over TLS.

Each test runs one named scenario of those programs, which check every reply themselves
and exit non-zero naming the first that was wrong. Against redis-server (run.py --redis)
the same scenarios check the expectations; only the lib-name/lib-ver check of CLIENT
SETINFO, new in Redis 7.2, is left out there.
"""

import os
import shutil
import subprocess

import echdtest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NODE_DIR = os.path.join(ROOT, "tests", "clients", "node")
TIMEOUT = 90

HIREDIS_TESTS = ("basics", "binary", "pipeline", "groups", "blocking", "async", "errors")
IOREDIS_TESTS = ("connect", "streams", "groups", "blocking", "pipeline", "binary", "errors",
                 "auth", "pubsub")
NODE_REDIS_TESTS = ("handshake", "maps", "blocking", "pipeline")


def hiredis_exe(server):
    """<build>/tests/hiredis-e2e beside echd's <build>/broker/echd; for redis-server, the
    default build directory (or $ECHD_HIREDIS_E2E)."""
    if os.environ.get("ECHD_HIREDIS_E2E"):
        return os.environ["ECHD_HIREDIS_E2E"]
    if server.is_echd:
        build = os.path.dirname(os.path.dirname(os.path.abspath(server.exe)))
    else:
        build = os.path.join(ROOT, "build")
    return os.path.join(build, "tests", "hiredis-e2e")


def run_client(argv, what):
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, "%s exited with status %d\n%s%s" % (
        what, p.returncode, p.stdout, p.stderr)


def run_hiredis(server, test):
    exe = hiredis_exe(server)
    assert os.access(exe, os.X_OK), (
        "%s is missing: build with libhiredis-dev installed (tools/echd-dev deps)" % exe)
    run_client([exe, str(server.port), test], "hiredis-e2e " + test)


def run_node(server, script, package, test):
    node = shutil.which("node")
    assert node, "node is missing: tools/echd-dev deps installs it"
    assert os.path.isdir(os.path.join(NODE_DIR, "node_modules", package)), (
        "%s is missing in %s: tools/echd-dev deps runs npm ci there" % (package, NODE_DIR))
    argv = [node, os.path.join(NODE_DIR, script), "--port", str(server.client_port)]
    if server.suite_tls_port:
        argv += ["--tls-ca", echdtest.TLS["ca"]]
    if server.is_echd:
        argv.append("--expect-setinfo")
    run_client(argv + [test], "%s %s" % (script, test))


def run_ioredis(server, test):
    run_node(server, "ioredis_e2e.js", "ioredis", test)


def run_node_redis(server, test):
    run_node(server, "node_redis_e2e.js", os.path.join("@redis", "client"), test)


def _make(runner, test):
    def fn(server):
        runner(server, test)
    return fn


for _t in HIREDIS_TESTS:
    globals()["test_hiredis_" + _t] = _make(run_hiredis, _t)
for _t in IOREDIS_TESTS:
    globals()["test_ioredis_" + _t] = _make(run_ioredis, _t)
for _t in NODE_REDIS_TESTS:
    globals()["test_node_redis_" + _t] = _make(run_node_redis, _t)


@echdtest.echd_only("Redis 8.2 commands; 7.0 lacks them")
def test_node_redis_deletion(server):
    run_node_redis(server, "deletion")


@echdtest.echd_only("idempotent producers are Redis 8.6/8.8; 7.0 lacks them")
def test_node_redis_idmp(server):
    run_node_redis(server, "idmp")


@echdtest.echd_only("XNACK is Redis 8.8 and XREADGROUP CLAIM 8.4; 7.0 lacks both")
def test_node_redis_xnack(server):
    run_node_redis(server, "xnack")
