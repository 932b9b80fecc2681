"""Documentation that cannot drift: docs/configuration.md against echd's option table, and
every shell session in README.md and docs/**/*.md run against a real echd.

docs/configuration.md
    Every option `echd --list-options` prints has exactly one row in a table whose header is
    `| option | default | unit | CONFIG SET | meaning |`, with the same default (`""` is the
    empty value) and CONFIG SET `yes` exactly for the `runtime` options; no row names an option
    that does not exist. The unit column is checked against echd's parser (echd --NAME VALUE
    --no-such-option x: the error names the first option it refuses): a `bytes` option accepts
    64gb (and CONFIG GET then shows 68719476736), a seconds/microseconds/count/port option
    refuses 1kb, an option whose unit lists words accepts each of them and refuses others (and
    when echd lists the allowed words, they are the documented ones), and a meaning that says
    "(1mb at least)" holds (1mb accepted, one byte less refused). A `yes` option takes
    CONFIG SET of its current value, a `no` option is refused as immutable. The suffix table
    must list exactly the 1- and 2-letter suffixes the parser accepts, each with the right
    multiplier, and its examples must hold. Every ```conf block must parse, and the example
    configuration (the ```conf block under "## An example") must start echd and mean what it
    says: CONFIG GET shows each of its values (network, directory and file options are
    replaced by the test's own).

Shell sessions: the convention
    A fenced code block whose info string is `console` is a shell session. A line starting with
    `$ ` is a command; a command line ending in `\\` continues on the next line. The lines after
    a command, up to the next `$ ` line or the end of the block, are its expected output:
    standard output and standard error together, as a terminal shows them. Other fences
    (```sh, ```conf, ```text, no info string) are not run: use them for systemctl, apt and
    other lines a test cannot run. A `$ ` line in a fence that is not `console` is an error (a
    session in the wrong fence). A console block is skipped only when the line before its
    fence (blank lines aside) is `<!-- not-tested: reason -->`; the test prints how many were
    skipped and why.

How a session runs
    Blocks run in file order, README.md first, then docs/**/*.md sorted. Before each block:
    FLUSHALL. After it, if CONFIG GET * or ACL LIST changed (or the server needs AUTH, or
    stopped), the server is restarted, so every block starts from the defaults. Each block runs
    in its own `bash --noprofile --norc` in a new empty directory in which `data` is the
    server's data directory (`tools/echd-dev run` keeps its data in ./data), with HOME that
    directory, LC_ALL=C.UTF-8, NO_COLOR=1 and TERM=dumb. The commands run one after another in
    that shell (cd, variables and $? carry over), each with stdin /dev/null and a 30 s limit;
    whatever a block leaves running is killed at its end. PATH starts with
    wrappers, so that the docs show the commands a user types against the default port 7379:
      redis-cli   /usr/bin/redis-cli -p <the test server's port>; a `-p 7379` in the doc is
                  turned into that port too. When its output goes to the session it prints
                  replies as on a terminal (--no-raw); captured by $(...) or piped it prints
                  them raw, as redis-cli itself does.
      echo-admin  the built echo-admin (beside echd, as in 09-admin.py) with --port set to the
                  test server's; `-p 7379`, `--port 7379` are turned into that port.
      echd        the built echd.

How output is compared (loosely)
    Expected and actual output are normalised line by line:
      1. stream ids with 13-digit milliseconds (\\d{13}-\\d+) become <id>;
      2. other 13-digit numbers (millisecond times) become <ms>;
      3. timestamps (2026-01-02T03:04:05Z, 2026-01-02 03:04:05, 02 Jan 2026 03:04:05.678)
         become <time>;
      4. durations as echo-admin prints them (850ms, 7s, 1m0s, 2h5m, 3d4h, 7 ms) become <dur>;
      5. runs of white space become one space; leading and trailing white space is dropped;
    and trailing empty lines are dropped. Then the lines must match one for one, except that
    in the expected output `...` matches any text within a line, and a line that is only `...`
    matches any number of lines (none too). The expected output may show redis-cli's replies
    as a terminal shows them (1) "jobs", (integer) 1) or as redis-cli prints them into a pipe
    (one value per line, no quotes): a command passes if either matches.
    An id (\\d{13}-\\d+) that the doc shows in an output and types in a later command (XACK
    jobs workers 1796001383361-0) is replaced in that command by the id the server returned at
    the same place of the actual output.
    A command's exit status is not compared, except that a command that exits non-zero must
    show some expected output (the error the doc means to show); `$ echo $?` shows a status.
    A failure is reported as file:line of the command, the command, expected and actual output.
"""

import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import uuid

import echdtest
from echdtest import Closed, RespConn, RespError, echd_only, free_port, lmdb_only, timeout

TIMEOUT = 120

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CONFIG_MD = os.path.join(ROOT, "docs", "configuration.md")

COMMAND_TIMEOUT = 30
DOC_PORT = "7379"        # the port the docs show: echd's default
NOT_TESTED = re.compile(r"^\s*<!--\s*not-tested:\s*(.*?)\s*-->\s*$")
ID_RE = re.compile(r"(?<![\w.-])(\d{13}-\d+)(?![\w.])")


def rel(path):
    return os.path.relpath(path, ROOT)


def reply(c, *args):
    """One command's reply on a RespConn, an error reply returned (not raised)."""
    c.send(*args)
    return c.read(args)


def doc_files():
    """README.md, then docs/**/*.md sorted."""
    docs = sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
    return [os.path.join(ROOT, "README.md")] + docs


# ---------------------------------------------------------------------------
# Markdown: fences, console blocks, tables
# ---------------------------------------------------------------------------

FENCE_RE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^`\s]*)[^`]*$")


class Fence:
    def __init__(self, path, line, info, indent, body, body_line, opt_out):
        self.path = path            # the Markdown file
        self.line = line            # 1-based line of the opening fence
        self.info = info            # first word of the info string, lower case ('' if none)
        self.indent = indent
        self.body = body            # the lines inside, opening indentation removed
        self.body_line = body_line  # 1-based line of body[0]
        self.opt_out = opt_out      # reason of a <!-- not-tested: ... --> marker, or None

    def where(self, i=0):
        return "%s:%d" % (rel(self.path), self.body_line + i)


def fences(path, text=None):
    """Every fenced code block of a Markdown file. Raises AssertionError on an unclosed one."""
    if text is None:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = FENCE_RE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, mark, info = m.group(1), m.group(2), m.group(3).lower()
        start = i
        body = []
        i += 1
        while i < len(lines):
            line = lines[i]
            s = line.strip()
            if s and set(s) == {mark[0]} and len(s) >= len(mark):
                break
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            i += 1
        else:
            raise AssertionError("%s:%d: fence never closed" % (rel(path), start + 1))
        prev = start - 1
        while prev >= 0 and not lines[prev].strip():
            prev -= 1
        mo = NOT_TESTED.match(lines[prev]) if prev >= 0 else None
        out.append(Fence(path, start + 1, info, indent, body, start + 2,
                         mo.group(1) if mo else None))
        i += 1
    return out


class Command:
    def __init__(self, fence, index, text, expected):
        self.fence = fence
        self.index = index          # index in fence.body of its first line
        self.text = text            # the command as bash reads it (continuations kept)
        self.expected = expected    # expected output lines

    def where(self):
        return self.fence.where(self.index)


def parse_session(fence):
    """The commands of a console block, or raises AssertionError naming file:line."""
    cmds = []
    body = list(fence.body)
    while body and not body[-1].strip():
        body.pop()
    i = 0
    while i < len(body):
        line = body[i]
        if not line.startswith("$ "):
            raise AssertionError("%s: a console block must start with a '$ ' command line, "
                                 "not %r" % (fence.where(i), line))
        start = i
        parts = [line[2:]]
        while parts[-1].endswith("\\"):
            i += 1
            if i >= len(body):
                raise AssertionError("%s: the command's last line ends in '\\'"
                                     % fence.where(start))
            parts.append(body[i])
        i += 1
        expected = []
        while i < len(body) and not body[i].startswith("$ "):
            expected.append(body[i])
            i += 1
        text = "\n".join(parts)
        if not text.strip():
            raise AssertionError("%s: empty command" % fence.where(start))
        cmds.append(Command(fence, start, text, expected))
    if not cmds:
        raise AssertionError("%s: empty console block" % fence.where(0))
    return cmds


def check_fence_kinds(fs):
    """Problems: `$ ` prompts in fences that are not console blocks."""
    problems = []
    for f in fs:
        if f.info == "console":
            continue
        for k, line in enumerate(f.body):
            if line.startswith("$ "):
                problems.append("%s: a '$ ' prompt in a ```%s fence: a shell session is a "
                                "```console block (or drop the prompts)"
                                % (f.where(k), f.info or ""))
                break
    return problems


def split_row(line):
    """The cells of a Markdown table row (a '|' escaped as '\\|' stays in its cell)."""
    s = line.strip()
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|") and not s.endswith("\\|"):
        s = s[:-1]
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", s)]


def tables(text, header):
    """Rows (lineno, [cells]) of every table whose header cells are `header` (lower case)."""
    lines = text.split("\n")
    rows = []
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("|"):
            continue
        if [c.lower() for c in split_row(line)] != header:
            continue
        j = i + 2   # past the header and the --- row
        while j < len(lines) and lines[j].lstrip().startswith("|"):
            rows.append((j + 1, split_row(lines[j])))
            j += 1
    return rows


def code_span(cell):
    """The text of a cell that is exactly one `code span`, else None. `""` is ''."""
    m = re.fullmatch(r"`([^`]*)`", cell.strip())
    if not m:
        return None
    return "" if m.group(1) == '""' else m.group(1)


# ---------------------------------------------------------------------------
# Loose comparison
# ---------------------------------------------------------------------------

NORMALISE = [
    (re.compile(r"(?<![\w.-])\d{13}-\d+(?![\w.])"), "<id>"),
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?"), "<time>"),
    (re.compile(r"\b\d\d? [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d(\.\d+)?"), "<time>"),
    (re.compile(r"(?<![\w.])\d{13}(?![\w.])"), "<ms>"),
    (re.compile(r"(?<![\w.])\d+(ms|s|m\d+s|h\d+m|d\d+h)(?![\w.])"), "<dur>"),
    (re.compile(r"(?<![\w.])\d+ ms(?![\w.])"), "<dur>"),
]


def normalise(line):
    for rx, rep in NORMALISE:
        line = rx.sub(rep, line)
    return " ".join(line.split())


def norm_lines(lines):
    out = [normalise(l) for l in lines]
    while out and out[-1] == "":
        out.pop()
    return out


def line_matches(exp, act):
    if "..." not in exp:
        return exp == act
    rx = ".*".join(re.escape(p) for p in exp.split("..."))
    return re.fullmatch(rx, act) is not None


def lines_match(exp, act):
    """exp, act: normalised lines; '...' alone in exp matches any number of lines."""
    memo = {}

    def m(i, j):
        key = (i, j)
        if key in memo:
            return memo[key]
        if i == len(exp):
            r = j == len(act)
        elif exp[i] == "...":
            r = m(i + 1, j) or (j < len(act) and m(i, j + 1))
        else:
            r = j < len(act) and line_matches(exp[i], act[j]) and m(i + 1, j + 1)
        memo[key] = r
        return r

    return m(0, 0)


CLI_MARKERS = re.compile(r"^(\d+[)#~] +)+")
CLI_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "a": "\a", "b": "\b", '"': '"', "\\": "\\"}


def cli_value(tok):
    """One value as redis-cli prints it on a terminal, as it prints it into a pipe."""
    m = re.fullmatch(r"\((?:integer|double)\) (.*)", tok)
    if m:
        return m.group(1)
    if tok == "(nil)" or re.fullmatch(r"\(empty [a-z ]+\)", tok):
        return ""
    if tok.startswith("(error) "):
        return tok[8:]
    if len(tok) >= 2 and tok[0] == '"' and tok[-1] == '"':
        return re.sub(r'\\(x[0-9a-fA-F]{2}|.)', lambda e: chr(int(e.group(1)[1:], 16))
                      if e.group(1)[0] == "x" and len(e.group(1)) == 3
                      else CLI_ESCAPES.get(e.group(1), e.group(1)), tok[1:-1])
    return tok


def cli_raw_view(lines):
    """redis-cli's terminal format (1) "jobs", (integer) 1, 1# "k" => "v") turned into what
    it prints into a pipe (jobs, 1, k v): one value per line."""
    out = []
    for line in lines:
        s = CLI_MARKERS.sub("", line.strip())
        k, sep, v = s.partition(" => ")
        s = cli_value(k) + " " + cli_value(v) if sep else cli_value(s)
        out += s.split("\n")
    return out


# ---------------------------------------------------------------------------
# Running sessions
# ---------------------------------------------------------------------------

REDIS_CLI_WRAPPER = r"""#!/bin/bash
# 17-docs.py: the docs' redis-cli, against the test server
args=(-p @PORT@)
while [ $# -gt 0 ]; do
	case $1 in
	-p)
		if [ "$2" = @DOC_PORT@ ]; then args+=(-p @PORT@); shift; shift; continue; fi ;;
	esac
	args+=("$1"); shift
done
# as on a terminal when the output goes to the session, raw when captured or piped
if [ /dev/stdout -ef "$ECHD_DOC_TTY" ]; then
	args=(--no-raw "${args[@]}")
fi
exec @REDIS_CLI@ "${args[@]}"
"""

ECHO_ADMIN_WRAPPER = r"""#!/bin/bash
# 17-docs.py: the docs' echo-admin, against the test server
if [ ! -x @ADMIN@ ]; then
	echo "echo-admin: (docs test) @ADMIN@ is not built" >&2
	exit 127
fi
args=()
while [ $# -gt 0 ]; do
	case $1 in
	-p|--port)
		if [ "$2" = @DOC_PORT@ ]; then args+=("$1" @PORT@); shift; shift; continue; fi ;;
	--port=@DOC_PORT@)
		args+=(--port=@PORT@); shift; continue ;;
	esac
	args+=("$1"); shift
done
exec @ADMIN@ --port @PORT@ "${args[@]}"
"""

ECHD_WRAPPER = r"""#!/bin/bash
# 17-docs.py: the docs' echd is the built one
exec @ECHD@ "$@"
"""


def admin_exe(server):
    """echo-admin in the build tree beside echd (as 09-admin.py finds it)."""
    build = os.path.dirname(os.path.dirname(os.path.abspath(server.exe)))
    return os.path.join(build, "tools", "echo-admin")


def echd_exe(server):
    """The echd to run as `echd`: the server itself, or (against Redis) none."""
    return server.exe if server.is_echd else "/bin/false"


def write_wrappers(server, dest):
    subst = {"@PORT@": str(server.port), "@DOC_PORT@": DOC_PORT,
             "@REDIS_CLI@": shlex.quote(echdtest.REDIS_CLI),
             "@ADMIN@": shlex.quote(admin_exe(server)),
             "@ECHD@": shlex.quote(echd_exe(server))}
    for name, text in (("redis-cli", REDIS_CLI_WRAPPER), ("echo-admin", ECHO_ADMIN_WRAPPER),
                       ("echd", ECHD_WRAPPER)):
        for k, v in subst.items():
            text = text.replace(k, v)
        p = os.path.join(dest, name)
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, 0o755)


class Shell:
    """One bash for one block; run() sends a command and returns (output, status)."""

    def __init__(self, cwd, env, out_path):
        self.out_path = out_path
        self.token = uuid.uuid4().hex[:12]
        self.n = 0
        self.pos = 0
        with open(out_path, "wb") as out:
            self.proc = subprocess.Popen(["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE,
                                         stdout=out, stderr=subprocess.STDOUT, cwd=cwd,
                                         env=env, start_new_session=True)
        # $? carries from one command to the next, as at a prompt
        self.proc.stdin.write(b"__echd_doc_rc=0; __echd_doc_status() { return \"$1\"; }\n")

    def run(self, cmd, limit=COMMAND_TIMEOUT):
        """(output text, exit status); status None: timed out or the shell exited."""
        self.n += 1
        marker = "@@echd-doc-%s-%d@@" % (self.token, self.n)
        # the status call also makes a comment-only command a valid { } group
        script = ("{ __echd_doc_status \"$__echd_doc_rc\"; %s\n} </dev/null\n"
                  "__echd_doc_rc=$?; printf '\\n%%s %%d\\n' %s \"$__echd_doc_rc\"\n"
                  % (cmd, marker))
        try:
            self.proc.stdin.write(script.encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return self._read_rest() + "\n(the shell has exited)", None
        needle = ("\n%s " % marker).encode()
        deadline = time.monotonic() + limit
        while True:
            with open(self.out_path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
            k = data.find(needle)
            if k >= 0:
                end = data.find(b"\n", k + len(needle))
                if end >= 0:
                    status = int(data[k + len(needle):end])
                    self.pos += end + 1
                    return data[:k].decode(errors="replace"), status
            if self.proc.poll() is not None:
                return data.decode(errors="replace") + "\n(the shell has exited)", None
            if time.monotonic() > deadline:
                self.kill()
                return data.decode(errors="replace") + "\n(no end after %d s)" % limit, None
            time.sleep(0.005)

    def _read_rest(self):
        with open(self.out_path, "rb") as f:
            f.seek(self.pos)
            return f.read().decode(errors="replace")

    def kill(self):
        """Ends the shell and whatever the block left running in its process group."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()


def is_comment(cmd):
    return all(not l.strip() or l.strip().startswith("#") for l in cmd.split("\n"))


def substitute_ids(cmd, ids):
    return ID_RE.sub(lambda m: ids.get(m.group(1), m.group(1)), cmd)


def server_state(server):
    """What a block could change that FLUSHALL does not reset; None if it cannot be read."""
    if not server.alive():
        return None
    try:
        c = RespConn(server.port, timeout=10)
        try:
            return repr((c.call("CONFIG", "GET", "*"), c.call("ACL", "LIST")))
        finally:
            c.close()
    except (OSError, Closed, RespError, AssertionError, ValueError):
        return None


def flushall(server):
    c = RespConn(server.port, timeout=10)
    try:
        r = c.call("FLUSHALL")
        assert r == "OK", "FLUSHALL replied %r" % (r,)
    finally:
        c.close()


def reset_server(server):
    server.close_clients()
    if server.alive():
        server.stop()
    server.proc = None
    server.start()


def indent(lines):
    return "\n".join("      | " + l for l in lines) if lines else "      (nothing)"


def run_block(server, fence, wrappers, root):
    """Runs one console block; returns (failure reports, number of commands)."""
    cmds = parse_session(fence)
    work = tempfile.mkdtemp(prefix="block-", dir=root)
    os.symlink(server.dir, os.path.join(work, "data"))
    out_path = os.path.join(root, "session-%s.out" % os.path.basename(work))
    env = {k: v for k, v in os.environ.items()
           if k not in ("ECHD_AUTH", "ECHD_USER", "REDISCLI_AUTH", "CDPATH", "BASH_ENV", "ENV")}
    env.update({"PATH": wrappers + os.pathsep + env.get("PATH", "/usr/bin:/bin"),
                "HOME": work, "LC_ALL": "C.UTF-8", "NO_COLOR": "1", "TERM": "dumb",
                "ECHD_DOC_TTY": out_path})
    flushall(server)
    failures = []
    ids = {}
    sh = Shell(work, env, out_path)
    try:
        for cmd in cmds:
            text = substitute_ids(cmd.text, ids)
            out, status = sh.run(text)
            actual = out.split("\n")
            exp_n, act_n = norm_lines(cmd.expected), norm_lines(actual)
            problem = None
            if status is None:
                problem = "did not finish"
            elif not (lines_match(exp_n, act_n) or
                      lines_match(exp_n, norm_lines(cli_raw_view(actual)))):
                problem = "output differs"
            elif status != 0 and not exp_n and not is_comment(cmd.text):
                problem = "exit status %d, and the doc shows no output" % status
            if problem:
                shown = "$ " + cmd.text.replace("\n", "\n      ")
                if text != cmd.text:
                    shown += "\n    (run as: %s)" % text.replace("\n", " ")
                failures.append("%s: %s\n    %s\n    expected:\n%s\n    actual (exit %s):\n%s"
                                % (cmd.where(), problem, shown, indent(cmd.expected),
                                   status, indent(norm_trailing(actual))))
                if status is None:
                    break
            exp_ids = ID_RE.findall("\n".join(cmd.expected))
            act_ids = ID_RE.findall(out)
            if exp_ids and len(exp_ids) == len(act_ids):
                ids.update(zip(exp_ids, act_ids))
    finally:
        sh.kill()
    return failures, len(cmds)


def norm_trailing(lines):
    lines = list(lines)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def run_sessions(server, files):
    """Runs every console block of files. Returns (failures, counts by file, opted-out)."""
    failures, counts, skipped = [], {}, []
    root = tempfile.mkdtemp(prefix="echd-docs-")
    try:
        wrappers = os.path.join(root, "bin")
        os.makedirs(wrappers)
        write_wrappers(server, wrappers)
        for path in files:
            try:
                fs = fences(path)
            except AssertionError as e:
                failures.append(str(e))
                continue
            failures += check_fence_kinds(fs)
            n_blocks = n_cmds = 0
            for f in fs:
                if f.info != "console":
                    continue
                if f.opt_out is not None:
                    if not f.opt_out:
                        failures.append("%s: <!-- not-tested: --> without a reason"
                                        % f.where(-1))
                    skipped.append("%s: %s" % (f.where(-1), f.opt_out))
                    continue
                before = server_state(server)
                try:
                    fails, n = run_block(server, f, wrappers, root)
                except AssertionError as e:
                    fails, n = [str(e)], 0
                failures += fails
                n_blocks += 1
                n_cmds += n
                if before is None or server_state(server) != before:
                    reset_server(server)
            counts[rel(path)] = (n_blocks, n_cmds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return failures, counts, skipped


# ---------------------------------------------------------------------------
# The sessions of README.md and docs/
# ---------------------------------------------------------------------------

@echd_only("the docs describe echd (echo-admin, echd's options and replies)")
@lmdb_only("the docs' sessions are transcripts of an echd on LMDB, the default (CONFIG GET "
           "storage-backend, INFO storage, echo-admin --data-dir and backup)")
@timeout(600)
def test_doc_sessions(server):
    failures, counts, skipped = run_sessions(server, doc_files())
    for name, (b, c) in counts.items():
        print("# docs: %s: %d console block%s run, %d command%s" % (
            name, b, "" if b == 1 else "s", c, "" if c == 1 else "s"))
    print("# docs: %d console block%s not tested%s" % (
        len(skipped), "" if len(skipped) == 1 else "s", ":" if skipped else ""))
    for s in skipped:
        print("#   %s" % s)
    assert counts.get("README.md", (0, 0))[0] >= 1, "README.md has no console session"
    assert sum(b for b, _ in counts.values()) >= 3, counts
    assert not failures, "%d failure%s in the docs' sessions:\n%s" % (
        len(failures), "" if len(failures) == 1 else "s", "\n\n".join(failures))


SELF_TEST_MD = """\
# A session that holds

```console
$ redis-cli -p 7379 XADD s '*' f v
"1700000000000-0"
$ redis-cli -p 7379 XRANGE s 1700000000000-0 1700000000000-0
1) 1) "1700000000000-0"
   2) 1) "f"
      2) "v"
$ id=$(redis-cli -p 7379 XADD s '*' f w)
$ echo "$id"
1700000000001-0
$ redis-cli XRANGE s - + COUNT 1
1700000000000-0
f
v
$ printf 'a    b   \\n'
a b
$ printf 'x\\ny\\nz\\n' && \\
  printf 'last\\n'
x
...
last
$ printf 'took 12ms at 2026-05-01T10:00:00Z\\n'
took 3s at <time>
$ ls nosuch-file
ls: ...No such file or directory
$ # a comment keeps $? as at a prompt
$ echo $?
2
```

<!-- not-tested: there is no TLS server here -->

```console
$ redis-cli -p 6380 --tls PING
PONG
```

# Sessions that do not

```console
$ redis-cli -p 7379 PING
PANG
$ false
$ redis-cli XLEN s
(integer) 3
```

```sh
$ echo not a console fence
```

```console
$ printf 'one\\n'
one
two
```
"""


def test_session_checker_catches_drift(server):
    """The checker itself, on a made-up document: what must pass passes (an id carried into
    a later command, raw output when captured, both redis-cli formats, normalisation, `...`,
    continuation lines, $? across commands), what must fail fails with file:line, and an
    opted-out block is counted."""
    tmp = tempfile.mkdtemp(prefix="echd-docs-self-")
    try:
        md = os.path.join(tmp, "self.md")
        with open(md, "w") as f:
            f.write(SELF_TEST_MD)
        failures, counts, skipped = run_sessions(server, [md])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = "\n\n".join(failures)
    name = rel(md)
    lines = SELF_TEST_MD.split("\n")

    def lineno(s):
        return lines.index(s) + 1

    assert counts == {name: (3, 15)}, (counts, text)
    assert skipped == ["%s:%d: there is no TLS server here"
                       % (name, lineno("$ redis-cli -p 6380 --tls PING") - 1)], skipped
    # PANG; `false` failing silently; a wrong count; $ in a sh fence; a missing line
    want = {lineno(s) for s in ("$ redis-cli -p 7379 PING", "$ false", "$ redis-cli XLEN s",
                                "$ echo not a console fence", "$ printf 'one\\n'")}
    got = {int(m.group(1)) for m in re.finditer(re.escape(name) + r":(\d+): ", text)}
    assert got == want and len(failures) == len(want), "want failures at lines %s:\n%s" % (
        sorted(want), text)
    assert "PANG" in text and "PONG" in text, text
    assert "exit status 1, and the doc shows no output" in text, text
    assert "(integer) 3" in text, text
    assert "```console block" in text, text
    assert "two" in text, text


# ---------------------------------------------------------------------------
# docs/configuration.md
# ---------------------------------------------------------------------------

OPTION_HEADER = ["option", "default", "unit", "config set", "meaning"]
INT_UNITS = ("seconds", "milliseconds", "microseconds", "count", "port")


def list_options(exe):
    """{name: (default, 'runtime'|'restart', help)} from echd --list-options."""
    out = subprocess.run([exe, "--list-options"], capture_output=True, text=True, timeout=10,
                         check=True).stdout
    opts = {}
    for line in out.splitlines():
        f = line.split("\t")
        assert len(f) == 4, "echd --list-options: %r" % line
        assert f[0] not in opts, "echd --list-options: %s twice" % f[0]
        opts[f[0]] = (f[1], f[2], f[3])
    assert opts, out
    return opts


def config_text():
    with open(CONFIG_MD, encoding="utf-8") as f:
        return f.read()


def doc_options():
    """{name: (lineno, default, 'runtime'|'restart', unit, meaning)} from configuration.md's
    tables;
    problems with the rows themselves are raised."""
    rows = tables(config_text(), OPTION_HEADER)
    assert rows, "docs/configuration.md has no table headed | %s |" % " | ".join(OPTION_HEADER)
    docs, problems = {}, []
    for lineno, cells in rows:
        where = "docs/configuration.md:%d" % lineno
        if len(cells) != 5:
            problems.append("%s: %d cells, want 5" % (where, len(cells)))
            continue
        name, default, unit, cset, meaning = cells
        name_s, default_s = code_span(name), code_span(default)
        if not name_s:
            problems.append("%s: the option is not one `code span`: %r" % (where, name))
            continue
        if default_s is None:
            problems.append("%s: %s: the default is not one `code span` (`\"\"` for empty): %r"
                            % (where, name_s, default))
            continue
        if cset not in ("yes", "no"):
            problems.append("%s: %s: CONFIG SET must be yes or no, not %r" % (where, name_s, cset))
            continue
        if not unit or not meaning:
            problems.append("%s: %s: empty unit or meaning" % (where, name_s))
        if name_s in docs:
            problems.append("%s: %s listed again (first at line %d)"
                            % (where, name_s, docs[name_s][0]))
            continue
        docs[name_s] = (lineno, default_s, "runtime" if cset == "yes" else "restart", unit,
                        meaning)
    assert not problems, "docs/configuration.md:\n  " + "\n  ".join(problems)
    return docs


def enum_words(unit):
    """The words of a unit cell such as "`yes`, `optional` or `no`", else None."""
    if not re.fullmatch(r"`[^`]+`((, | or |, or )`[^`]+`)*", unit):
        return None
    return re.findall(r"`([^`]+)`", unit)


def parser_verdict(exe, name, value_words):
    """None if echd's command-line parser accepts `--name value`, else its complaint.
    A trailing unknown option makes echd exit before it starts anything either way."""
    p = subprocess.run([exe, "--" + name] + list(value_words) + ["--no-such-option", "x"],
                       capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    assert p.returncode == 2, "echd --%s %s --no-such-option x: exit %d\n%s" % (
        name, " ".join(value_words), p.returncode, p.stderr)
    if "unknown option 'no-such-option'" in p.stderr:
        return None
    return p.stderr.strip().splitlines()[0] if p.stderr.strip() else "(no message)"


def suffix_table():
    """[(lineno, [suffixes], multiplier, [(example text, bytes)])] of the Units table."""
    rows = tables(config_text(), ["suffix", "one unit, in bytes", "example"])
    assert rows, "docs/configuration.md: no | suffix | one unit, in bytes | example | table"
    out = []
    for lineno, cells in rows:
        assert len(cells) == 3, (lineno, cells)
        sufs = re.findall(r"`([^`]*)`", cells[0])
        if re.match(r"none\b", cells[0]):
            sufs.append("")
        assert sufs and re.fullmatch(r"\d+", cells[1]), (lineno, cells)
        examples = [(m.group(1), int(m.group(2)))
                    for m in re.finditer(r"`([^`]+)` = (\d+)", cells[2])]
        out.append((lineno, sufs, int(cells[1]), examples))
    return out


def mem_value(word, table):
    """bytes of a size word, by the documented suffixes; None if it is not one."""
    m = re.fullmatch(r"(\d+)([a-zA-Z]*)", word)
    if not m:
        return None
    for _lineno, sufs, mult, _ex in table:
        if m.group(2).lower() in sufs:
            return int(m.group(1)) * mult
    return None


@echd_only("echd's option table")
def test_configuration_md_lists_every_option(server):
    opts = list_options(server.exe)
    docs = doc_options()
    problems = []
    for name, (default, mut, _help) in opts.items():
        if name not in docs:
            problems.append("%s is not listed (default `%s`, CONFIG SET %s)"
                            % (name, default or '""', "yes" if mut == "runtime" else "no"))
            continue
        lineno, d_default, d_mut = docs[name][:3]
        if d_default != default:
            problems.append("line %d: %s: default `%s`, echd's is `%s`"
                            % (lineno, name, d_default or '""', default or '""'))
        if d_mut != mut:
            problems.append("line %d: %s: CONFIG SET %s, but echd says %s"
                            % (lineno, name, "yes" if d_mut == "runtime" else "no", mut))
    for name, (lineno, *_rest) in docs.items():
        if name not in opts:
            problems.append("line %d: %s is not an option of echd" % (lineno, name))
    assert not problems, "docs/configuration.md against echd --list-options:\n  " + \
        "\n  ".join(problems)


@echd_only("echd's option parser")
def test_configuration_md_units(server):
    """The unit column against echd's parser, the CONFIG SET column against the server."""
    opts = list_options(server.exe)
    docs = doc_options()
    table = suffix_table()
    problems = []
    c = server.raw()
    for name, (lineno, default, mut, unit, meaning) in sorted(docs.items()):
        if name not in opts:
            continue    # reported by test_configuration_md_lists_every_option
        where = "line %d: %s" % (lineno, name)
        v = parser_verdict(server.exe, name, default.split() if default else [""])
        if v is not None:
            problems.append("%s: the documented default is refused: %s" % (where, v))
        words = enum_words(unit)
        least = re.search(r"\((\S+) at least\)", meaning)
        if least:
            low = mem_value(least.group(1), table)
            if low is None or parser_verdict(server.exe, name, [str(low)]) is not None or \
                    parser_verdict(server.exe, name, [str(low - 1)]) is None:
                problems.append("%s: the least value is not %s" % (where, least.group(1)))
        if unit == "bytes":
            if mem_value(default, table) is None:
                problems.append("%s: unit bytes, but the default %r is no size" % (where, default))
            v = parser_verdict(server.exe, name, ["64gb"])
            if v is not None:
                problems.append("%s: unit bytes, but 64gb is refused: %s" % (where, v))
        elif unit.split()[0] in INT_UNITS:
            if not re.fullmatch(r"\d+", default):
                problems.append("%s: unit %s, but the default %r is no integer"
                                % (where, unit, default))
            if parser_verdict(server.exe, name, ["1kb"]) is None:
                problems.append("%s: unit %s, but 1kb is accepted (a size?)" % (where, unit))
        elif words is not None:
            if default not in words:
                problems.append("%s: the default %r is not among %s" % (where, default, words))
            for w in words:
                v = parser_verdict(server.exe, name, [w])
                if v is not None:
                    problems.append("%s: %r is refused: %s" % (where, w, v))
            v = parser_verdict(server.exe, name, ["no-such-value"])
            if v is None:
                problems.append("%s: accepts other values than %s" % (where, words))
            else:
                m = re.search(r"one of the following: (.*)$", v)
                if m and sorted(x.strip().lower() for x in m.group(1).split(",")) != \
                        sorted(w.lower() for w in words):
                    problems.append("%s: echd allows %s, the doc says %s"
                                    % (where, m.group(1), words))
        # the CONFIG SET column against the running server
        cur = c.call("CONFIG", "GET", name)
        assert isinstance(cur, list) and len(cur) == 2, (name, cur)
        r = reply(c, "CONFIG", "SET", name, cur[1])
        if mut == "runtime" and r != "OK":
            problems.append("%s: CONFIG SET yes, but setting its own value answers %r"
                            % (where, r))
        if mut == "restart" and not (isinstance(r, RespError) and "immutable" in r.msg):
            problems.append("%s: CONFIG SET no, but CONFIG SET answers %r" % (where, r))
        if mut == "runtime" and unit == "bytes":
            try:
                r = reply(c, "CONFIG", "SET", name, "64gb")
                got = c.call("CONFIG", "GET", name)[1]
                if r != "OK" or got != b"68719476736":
                    problems.append("%s: CONFIG SET %s 64gb answers %r, then CONFIG GET %r"
                                    % (where, name, r, got))
            finally:
                c.call("CONFIG", "SET", name, cur[1])
    assert not problems, "docs/configuration.md units:\n  " + "\n  ".join(problems)


@echd_only("echd's size suffixes")
def test_configuration_md_size_suffixes(server):
    """The suffix table lists exactly the 1- and 2-letter suffixes echd accepts, each with
    the right multiplier, in either case, and its examples hold (through CONFIG SET of a
    runtime size option, whose CONFIG GET shows bytes)."""
    table = suffix_table()
    opt = "stream-node-max-bytes"
    c = server.raw()
    old = c.call("CONFIG", "GET", opt)[1]
    problems = []
    try:
        documented = {}
        for lineno, sufs, mult, examples in table:
            for s in sufs:
                documented[s] = mult
                for variant in {s, s.upper()}:
                    r = reply(c, "CONFIG", "SET", opt, "3" + variant)
                    got = c.call("CONFIG", "GET", opt)[1]
                    if r != "OK" or got != str(3 * mult).encode():
                        problems.append("line %d: 3%s should be %d bytes: CONFIG SET %r, "
                                        "CONFIG GET %r" % (lineno, variant, 3 * mult, r, got))
            for text, want in examples:
                r = reply(c, "CONFIG", "SET", opt, text)
                got = c.call("CONFIG", "GET", opt)[1]
                if r != "OK" or got != str(want).encode():
                    problems.append("line %d: `%s` = %d, but CONFIG SET %r, CONFIG GET %r"
                                    % (lineno, text, want, r, got))
        letters = "abcdefghijklmnopqrstuvwxyz"
        cands = list(letters) + [a + b for a in letters for b in letters]
        replies = c.pipeline([("CONFIG", "SET", opt, "1" + s) for s in cands])
        accepted = {s for s, r in zip(cands, replies) if r == "OK"}
        if set(documented) - {""} != accepted:
            problems.append("echd accepts the suffixes %s, the table lists %s"
                            % (sorted(accepted), sorted(set(documented) - {""})))
    finally:
        c.call("CONFIG", "SET", opt, old)
    assert not problems, "docs/configuration.md size suffixes:\n  " + "\n  ".join(problems)


def conf_lines(body):
    """[(name, [words])] of a config block (comments and empty lines dropped)."""
    out = []
    for line in body:
        words = shlex.split(line, comments=True)
        if words:
            out.append((words[0].lower(), words[1:]))
    return out


@echd_only("echd's configuration file")
def test_configuration_md_conf_blocks_parse(server):
    fs = [f for f in fences(CONFIG_MD) if f.info == "conf"]
    assert fs, "docs/configuration.md has no ```conf block"
    tmp = tempfile.mkdtemp(prefix="echd-docs-conf-")
    try:
        for f in fs:
            path = os.path.join(tmp, "echd.conf")
            with open(path, "w") as out:
                out.write("\n".join(f.body) + "\n")
            p = subprocess.run([server.exe, path, "--no-such-option", "x"], capture_output=True,
                               text=True, timeout=10, stdin=subprocess.DEVNULL)
            assert p.returncode == 2 and "unknown option 'no-such-option'" in p.stderr, (
                "%s: the ```conf block does not parse:\n%s" % (f.where(), p.stderr))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@echd_only("echd's configuration file")
def test_configuration_md_example_means_what_it_says(server):
    text = config_text()
    head = text.find("\n## An example")
    assert head >= 0, "docs/configuration.md has no '## An example' section"
    ex = [f for f in fences(CONFIG_MD) if f.info == "conf" and
          text.count("\n", 0, head) + 1 < f.line]
    assert ex, "no ```conf block under '## An example'"
    example = conf_lines(ex[0].body)
    docs = doc_options()
    table = suffix_table()

    tmp = tempfile.mkdtemp(prefix="echd-docs-example-")
    port = free_port()
    own = {"bind": ["127.0.0.1"], "port": [str(port)], "tls-port": ["0"],
           "dir": [os.path.join(tmp, "data")]}
    args, checked = [], {}
    for name, words in example:
        assert name in docs, "%s: %s is not a documented option" % (ex[0].where(), name)
        unit = docs[name][3]
        if name in own or unit in ("path", "addresses", "port"):
            continue    # replaced below: this test's own address, directory, files
        checked[name] = words
    for name, (_l, _d, _m, unit, _meaning) in docs.items():
        if name in own:
            args += ["--" + name] + own[name]
        elif unit == "path":
            args += ["--" + name, ""]
    assert len(checked) >= 5, "the example sets only %s" % sorted(checked)
    password = checked.get("requirepass", [None])[0]

    conf = os.path.join(tmp, "echd.conf")
    with open(conf, "w") as f:
        f.write("\n".join(ex[0].body) + "\n")
    log = open(os.path.join(tmp, "log"), "wb")
    proc = subprocess.Popen([server.exe, conf] + args, stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, cwd=tmp, start_new_session=True)
    log.close()

    def log_text():
        with open(os.path.join(tmp, "log"), errors="replace") as f:
            return f.read()

    try:
        deadline = time.monotonic() + echdtest.STARTUP_TIMEOUT * 2
        c = None
        while c is None:
            assert proc.poll() is None, "echd with the example exited %s\n%s" % (
                proc.returncode, log_text())
            try:
                c = RespConn(port, timeout=5)
            except OSError:
                assert time.monotonic() < deadline, "no answer\n" + log_text()
                time.sleep(0.02)
        try:
            if password is not None:
                assert c.err("PING").startswith("NOAUTH"), "requirepass is not in force"
                assert c.call("AUTH", password) == "OK"
            assert c.call("PING") == "PONG"
            problems = []
            for name, words in checked.items():
                got = c.call("CONFIG", "GET", name)
                got = got[1].decode().split() if len(got) == 2 else []
                want = " ".join(words).split()
                # CONFIG GET shows sizes in bytes, and client-output-buffer-limit adds the
                # classes echd ignores after the ones set
                ok = len(got) >= len(want) and all(
                    w.lower() == g.lower() or str(mem_value(w, table)) == g
                    for w, g in zip(want, got))
                if not ok:
                    problems.append("%s %s: CONFIG GET shows %s" % (name, " ".join(words), got))
            assert not problems, "the example in docs/configuration.md:\n  " + \
                "\n  ".join(problems)
        finally:
            c.close()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
