# benchlib.sh: what the shell benchmarks share (sourced by bench_xadd.sh and bench_tls.sh).
#
# bench_begin PREFIX makes $TMP and arranges for every server in PIDS to be stopped and $TMP
# removed on exit; spawn_ready starts a server and waits for its first +PONG.

# bench_begin PREFIX: a temporary directory $TMP (under $TMPDIR or /tmp), an empty PIDS list,
# and the traps that clean both up.
bench_begin() {
	TMP=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
	PIDS=()
	trap cleanup EXIT
	trap 'exit 130' INT TERM
}

cleanup() {
	local pid
	for pid in "${PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		for _ in $(seq 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
	done
	rm -rf "$TMP"
}

# cpu_ticks PID: the CPU time (user + system) PID has used so far, in clock ticks.
cpu_ticks() {
	awk '{ print $14 + $15 }' "/proc/$1/stat"
}

# per_request_us TICKS REQUESTS: CPU microseconds per request.
per_request_us() {
	awk -v t="$1" -v n="$2" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", t * 1e6 / hz / n }'
}

log() {
	printf '# %s\n' "$*" >&2
}

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# spawn_ready LOG PORT CMD...: runs CMD in its own session with its output appended to LOG,
# and waits (600 s at most) until a plain PING on 127.0.0.1:PORT answers +PONG (a Redis still
# loading answers -LOADING). Prints "PID MS": MS milliseconds from exec to that PONG, or -1
# when it never came (PID 0 if the server exited; otherwise it is still running).
spawn_ready() {
	python3 - "$@" <<'PYEOF'
import socket, subprocess, sys, time
log, port, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
t0 = time.monotonic()
p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=open(log, "ab"),
                     stderr=subprocess.STDOUT, start_new_session=True)
deadline = t0 + 600
while time.monotonic() < deadline and p.poll() is None:
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=1)
        s.sendall(b"PING\r\n")
        if s.recv(64).startswith(b"+PONG"):
            print(p.pid, round((time.monotonic() - t0) * 1000, 1))
            sys.exit(0)
        s.close()
    except OSError:
        pass
    time.sleep(0.0005)
print(p.pid if p.poll() is None else 0, -1)
PYEOF
}

# started NAME "PID MS": records the server; on a failed start prints its log and exits.
started() {
	local name=$1 pid=${2% *} ms=${2#* }
	[ "$pid" -eq 0 ] || PIDS+=("$pid")
	if [ "$ms" = -1 ]; then
		echo "$name did not start; its log:" >&2
		tail -20 "$TMP/$name.log" >&2
		exit 1
	fi
	PID=$pid
	START_MS=$ms
}

stop() {
	local pid=$1
	kill -TERM "$pid" 2>/dev/null || return 0
	for _ in $(seq 600); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
}

median() {  # median of the numbers given
	printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
		if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'
}
