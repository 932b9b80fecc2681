#!/usr/bin/env bash
# bench_xadd.sh: XADD throughput and latency of echd beside Debian's redis-server.
#
#   tests/bench/bench_xadd.sh [options]            compare echd (appendfsync always) with
#                                                  redis-server appendfsync always and everysec
#   tests/bench/bench_xadd.sh --large [options]    load 10,000,000 entries of ~100 bytes: memory,
#                                                  disk per entry, throughput at 10M vs 0, start-up
# Options:
#   --echd PATH      echd binary (default: build/broker/echd)
#   --redis PATH     redis-server binary (default: /usr/bin/redis-server)
#   --echd-args STR  extra echd arguments, split on blanks (e.g. "--map-size 4gb")
#   -n N             requests per redis-benchmark run (default: 200000)
#   --c1-n N         requests of the -c 1 runs only (default: as -n; with fsync per request
#                    a -c 1 run of 200000 can take minutes)
#   --quick          -n 20000 (a fast sanity run)
#   --rounds N       measure every server N times, round robin, and report medians
#                    (default: 1; the disk of a shared machine varies from minute to minute)
#   --entries N      entries loaded by --large (default: 10000000)
#   --redis-only     skip echd (to check the script itself)
#   --echd-only      skip redis-server
#
# Every server runs on 127.0.0.1 on a free port with a temporary data directory, and is stopped
# on exit. This script is not part of `tools/echd-dev test`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=benchlib.sh
. "$ROOT/tests/bench/benchlib.sh"
ECHD=$ROOT/build/broker/echd
REDIS=/usr/bin/redis-server
BENCH=$(command -v redis-benchmark || echo /usr/bin/redis-benchmark)
CLI=$(command -v redis-cli || echo /usr/bin/redis-cli)
N=200000
C1_N=
ENTRIES=10000000
LARGE=0
RUN_ECHD=1
RUN_REDIS=1
ROUNDS=1
ECHD_ARGS=()

usage() {
	sed -n '2,23s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

while [ $# -gt 0 ]; do
	case $1 in
	--echd) ECHD=$2; shift 2 ;;
	--redis) REDIS=$2; shift 2 ;;
	--echd-args) read -r -a ECHD_ARGS <<<"$2"; shift 2 ;;
	-n) N=$2; shift 2 ;;
	--c1-n) C1_N=$2; shift 2 ;;
	--quick) N=20000; shift ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	--large) LARGE=1; shift ;;
	--entries) ENTRIES=$2; shift 2 ;;
	--redis-only) RUN_ECHD=0; shift ;;
	--echd-only) RUN_REDIS=0; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done

[ $RUN_ECHD -eq 0 ] || [ -x "$ECHD" ] || { echo "echd not found at $ECHD (build it first: tools/echd-dev build)" >&2; exit 1; }
[ $RUN_REDIS -eq 0 ] || [ -x "$REDIS" ] || { echo "redis-server not found at $REDIS" >&2; exit 1; }
command -v "$BENCH" >/dev/null || { echo "redis-benchmark not found (apt-get install redis-tools)" >&2; exit 1; }

bench_begin echd-bench

# launch NAME KIND [ARGS...]: start a server in $TMP/NAME; sets PORT, PID, DIR and START_MS
# (milliseconds from exec to the first +PONG; a Redis still loading answers -LOADING).
launch() {
	local name=$1 kind=$2
	shift 2
	DIR=$TMP/$name
	mkdir -p "$DIR"
	[ -n "${PORT_FOR[$name]:-}" ] || PORT_FOR[$name]=$(free_port)
	PORT=${PORT_FOR[$name]}
	local cmd
	if [ "$kind" = echd ]; then
		cmd=("$ECHD" --port "$PORT" --bind 127.0.0.1 --dir "$DIR" --loglevel warning "${ECHD_ARGS[@]}" "$@")
	else
		cmd=("$REDIS" --port "$PORT" --bind 127.0.0.1 --dir "$DIR" --save "" "$@")
	fi
	started "$name" "$(spawn_ready "$TMP/$name.log" "$PORT" "${cmd[@]}")"
}

# bench PORT CLIENTS PIPELINE REQUESTS [XADD args...]: prints "rps p50 p99 client_cpu"
# (latencies in ms; client_cpu: redis-benchmark's user + system CPU seconds, from `times`)
bench() {
	local port=$1 c=$2 p=$3 n=$4
	shift 4
	[ $# -gt 0 ] || set -- XADD s '*' f v
	{
		"$BENCH" -h 127.0.0.1 -p "$port" -n "$n" -c "$c" -P "$p" --csv "$@" 2>/dev/null
		times
	} | awk -F'"' 'NR == 2 { r = $4 " " $10 " " $14 }
		/^[0-9]+m[0-9.]+s [0-9]+m[0-9.]+s$/ { t = $0 }   # the children line comes last
		END { split(t, a, /[ ms]+/); print r, a[1] * 60 + a[2] + a[3] * 60 + a[4] }'
}

anon_kb() {
	awk '/^Anonymous:/ { print $2 }' "/proc/$1/smaps_rollup"
}

declare -A PORT_FOR
declare -A RPS P50 P99 SCPU CCPU

# ---------------------------------------------------------------------------
# Standard mode: three runs against each server
# ---------------------------------------------------------------------------
standard() {
	local servers=() s c p key n r t0 cli
	declare -A SPID SPORT
	[ $RUN_ECHD -eq 0 ] || servers+=(echd)
	[ $RUN_REDIS -eq 0 ] || servers+=(redis-always redis-everysec)
	local runs=("50 1" "50 16" "1 1")
	# every server stays up for the whole run; rounds go round them, so that a slow minute
	# of the disk does not fall on one server only
	for s in "${servers[@]}"; do
		case $s in
		echd) launch "$s" echd ;;
		redis-always) launch "$s" redis --appendonly yes --appendfsync always ;;
		redis-everysec) launch "$s" redis --appendonly yes --appendfsync everysec ;;
		esac
		SPID[$s]=$PID
		SPORT[$s]=$PORT
	done
	for r in $(seq "$ROUNDS"); do
		for s in "${servers[@]}"; do
			for run in "${runs[@]}"; do
				read -r c p <<<"$run"
				key="$s/c$c/P$p"
				n=$N
				[ "$c" -ne 1 ] || n=${C1_N:-$N}
				log "round $r/$ROUNDS $key: redis-benchmark -n $n -c $c -P $p XADD s * f v"
				t0=$(cpu_ticks "${SPID[$s]}")
				read -r "RPS[$key/$r]" "P50[$key/$r]" "P99[$key/$r]" cli < <(bench "${SPORT[$s]}" "$c" "$p" "$n")
				SCPU[$key/$r]=$(per_request_us "$(($(cpu_ticks "${SPID[$s]}") - t0))" "$n")
				CCPU[$key/$r]=$(per_request_us "$(awk -v s="$cli" -v hz="$(getconf CLK_TCK)" \
					'BEGIN { print s * hz }')" "$n")
			done
		done
	done
	for s in "${servers[@]}"; do
		stop "${SPID[$s]}"
	done
	local rr=()
	for r in $(seq "$ROUNDS"); do
		rr+=("$r")
	done
	for s in "${servers[@]}"; do
		for run in "${runs[@]}"; do
			read -r c p <<<"$run"
			key="$s/c$c/P$p"
			local a=() b=() d=() e=() f=()
			for r in "${rr[@]}"; do
				a+=("${RPS[$key/$r]}") b+=("${P50[$key/$r]}") d+=("${P99[$key/$r]}")
				e+=("${SCPU[$key/$r]}") f+=("${CCPU[$key/$r]}")
			done
			RPS[$key]=$(median "${a[@]}") P50[$key]=$(median "${b[@]}") P99[$key]=$(median "${d[@]}")
			SCPU[$key]=$(median "${e[@]}") CCPU[$key]=$(median "${f[@]}")
			if [ "$ROUNDS" -gt 1 ]; then
				log "$key requests/s by round: ${a[*]}"
			fi
		done
	done
	[ "$ROUNDS" -eq 1 ] || printf '\nmedians of %s rounds\n' "$ROUNDS"

	printf '\n%-10s %-16s %12s %9s %9s %12s %12s\n' run server 'requests/s' 'p50 ms' 'p99 ms' \
		'server µs' 'client µs'
	for run in "${runs[@]}"; do
		read -r c p <<<"$run"
		for s in "${servers[@]}"; do
			key="$s/c$c/P$p"
			printf '%-10s %-16s %12s %9s %9s %12s %12s\n' "c$c P$p" "$s" "${RPS[$key]}" \
				"${P50[$key]}" "${P99[$key]}" "${SCPU[$key]}" "${CCPU[$key]}"
		done
	done
	printf '(server µs, client µs: CPU time, user + system, per request: of the server process and\n'
	printf ' of redis-benchmark; they share the machine'"'"'s %s CPUs)\n' "$(nproc)"
	if [ $RUN_ECHD -eq 1 ] && [ $RUN_REDIS -eq 1 ]; then
		printf '\nratios echd/redis (requests/s; for c1 also p50, lower is better):\n'
		local t1 t2
		for run in "${runs[@]}"; do
			read -r c p <<<"$run"
			t1="" t2=""
			if [ "$c" -ne 1 ]; then
				t1=" (target >= 1.2)" t2=" (target >= 0.9)"
			fi
			printf '  c%-3s P%-3s vs always %5sx%-16s   vs everysec %5sx%s\n' \
				"$c" "$p" "$(ratio "${RPS[echd/c$c/P$p]}" "${RPS[redis-always/c$c/P$p]}")" "$t1" \
				"$(ratio "${RPS[echd/c$c/P$p]}" "${RPS[redis-everysec/c$c/P$p]}")" "$t2"
		done
		printf '  c1   P1   p50 echd/always %5sx (target <= 1.0)\n' \
			"$(ratio "${P50[echd/c1/P1]}" "${P50[redis-always/c1/P1]}")"
	fi
}

# ---------------------------------------------------------------------------
# --large: ENTRIES entries of ~100 bytes
# ---------------------------------------------------------------------------
# field "f" + a 96-byte value of random digits (redis-benchmark replaces each __rand_int__
# with its own 12-digit number below -r, an int), so that neither side compresses repeats
VALUE=$(printf '__rand_int__%.0s' 1 2 3 4 5 6 7 8)
PROBE=200000                         # requests of the throughput probe

xadd_bench() {  # xadd_bench PORT CLIENTS PIPELINE REQUESTS [-q|--csv]
	"$BENCH" -h 127.0.0.1 -p "$1" -c "$2" -P "$3" -n "$4" -r 2000000000 "${5:---csv}" \
		XADD big '*' f "$VALUE"
}

xlen() {
	"$CLI" -h 127.0.0.1 -p "$1" XLEN big
}

load_to() {  # load_to PORT TOTAL: XADD until the stream holds TOTAL entries
	local port=$1 total=$2 have out
	have=$(xlen "$port")
	[ "$total" -gt "$have" ] || return 0
	# redis-benchmark stops at the first error reply (e.g. a full disk): say so
	if ! out=$(xadd_bench "$port" 50 64 "$((total - have))" -q 2>&1); then
		printf 'loading stopped at %s entries: %s\nlast lines of the server log:\n' \
			"$(xlen "$port" 2>/dev/null)" \
			"$(printf '%s\n' "$out" | tr '\r' '\n' | grep -m1 -i error)" >&2
		tail -5 "$DIR.log" >&2
		return 1
	fi
}

probe() {  # probe PORT: requests/s of XADD c50 P16 with ~100-byte entries
	{ xadd_bench "$1" 50 16 "$PROBE" 2>/dev/null || true; } | awk -F'"' 'NR == 2 { print $4 }'
}

large() {
	local i rps0 rps10 bytes n
	if [ $RUN_ECHD -eq 1 ]; then
		log "echd: $ENTRIES entries of ~100 bytes"
		launch echd-large echd
		printf 'echd start-up on an empty dir: first PONG after %s ms\n' "$START_MS"
		printf 'echd anonymous memory at start: %s KiB\n' "$(anon_kb "$PID")"
		rps0=$(probe "$PORT")
		printf 'echd XADD c50 P16 at 0 entries: %s requests/s\n' "$rps0"
		for i in $(seq 1 10); do
			load_to "$PORT" $((ENTRIES * i / 10)) || break
			printf '  %9d entries: anonymous %8s KiB, data dir %6s MiB\n' "$(xlen "$PORT")" \
				"$(anon_kb "$PID")" "$(($(du -sb "$DIR" | cut -f1) / 1048576))"
		done
		n=$(xlen "$PORT")
		bytes=$(du -sb "$DIR" | cut -f1)
		printf 'echd data dir: %s bytes, %s bytes per entry\n' "$bytes" "$(ratio "$bytes" "$n")"
		rps10=$(probe "$PORT")
		printf 'echd XADD c50 P16 at %s entries: %s requests/s (%s of the rate at 0; target >= 0.80)\n' \
			"$n" "$rps10" "$(ratio "$rps10" "$rps0")"
		n=$(xlen "$PORT")
		stop "$PID"
		launch echd-large echd
		printf 'echd restart on %s entries: first PONG after %s ms (target < 50)\n' "$n" "$START_MS"
		printf 'echd anonymous memory after restart: %s KiB\n' "$(anon_kb "$PID")"
		stop "$PID"
		rm -rf "$TMP/echd-large"
	fi
	if [ $RUN_REDIS -eq 1 ]; then
		log "redis-server (AOF, everysec, no rewrite): $ENTRIES entries of ~100 bytes"
		launch redis-large redis --appendonly yes --appendfsync everysec --auto-aof-rewrite-percentage 0
		load_to "$PORT" "$ENTRIES" || true
		n=$(xlen "$PORT")
		bytes=$(du -sb "$DIR/appendonlydir" | cut -f1)
		printf 'redis AOF: %s bytes, %s bytes per entry (%s entries)\n' "$bytes" "$(ratio "$bytes" "$n")" "$n"
		"$CLI" -h 127.0.0.1 -p "$PORT" SAVE >/dev/null
		bytes=$(stat -c %s "$DIR/dump.rdb")
		printf 'redis RDB: %s bytes, %s bytes per entry\n' "$bytes" "$(ratio "$bytes" "$n")"
		printf 'redis used_memory: %s bytes\n' "$("$CLI" -h 127.0.0.1 -p "$PORT" INFO memory |
			tr -d '\r' | awk -F: '/^used_memory:/ { print $2 }')"
		stop "$PID"
		launch redis-large redis --appendonly yes --appendfsync everysec --auto-aof-rewrite-percentage 0
		printf 'redis restart (AOF replay): first PONG after %s ms\n' "$START_MS"
		stop "$PID"
	fi
}

if [ $LARGE -eq 1 ]; then
	large
else
	standard
fi
