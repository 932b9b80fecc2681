#!/usr/bin/env bash
# bench_streams.sh: XADD to many streams (issue 33), echd beside Debian's redis-server: requests/s
# and bytes written to the disk per XADD.
#
#   tests/bench/bench_streams.sh [options]
#
# For each number of streams (redis-benchmark -r: XADD s:__rand_int__ * f v; 1 stream: XADD s),
# each server is started afresh on an empty directory and runs redis-benchmark -c 50 -P 16:
# redis-server appendfsync always, echd on lmdb, echd on lmdb-staged. Beside requests/s it
# prints the bytes the server wrote per XADD (/proc/PID/io write_bytes over the run); for
# lmdb-staged also with the filing of what it staged (the server is left idle until its staging
# table is empty: compaction included).
# Options:
#   --echd PATH      echd binary (default: build/broker/echd)
#   --redis PATH     redis-server binary (default: /usr/bin/redis-server)
#   --echd-args STR  extra echd arguments, split on blanks (e.g. "--storage-stage-size 32mb")
#   --streams LIST   numbers of streams, comma-separated (default: 1,100,10000)
#   --servers LIST   of redis-always, echd-lmdb, echd-staged (default: all three)
#   -n N             requests per run (default: 200000)
#   -P N             pipeline (default: 16)
#   --tmpfs          data directories on /dev/shm (flush-free: CPU only)
#   --rounds N       repeat every run N times, round robin, and report medians (default: 1)
#
# The machine may be shared: requests/s are noisy there; bytes per XADD are not.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=benchlib.sh
. "$ROOT/tests/bench/benchlib.sh"
ECHD=$ROOT/build/broker/echd
REDIS=/usr/bin/redis-server
BENCH=$(command -v redis-benchmark || echo /usr/bin/redis-benchmark)
CLI=$(command -v redis-cli || echo /usr/bin/redis-cli)
N=200000
PIPE=16
STREAMS=1,100,10000
SERVERS=redis-always,echd-lmdb,echd-staged
ROUNDS=1
TMPFS=0
ECHD_ARGS=()

usage() {
	sed -n '2,24s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

while [ $# -gt 0 ]; do
	case $1 in
	--echd) ECHD=$2; shift 2 ;;
	--redis) REDIS=$2; shift 2 ;;
	--echd-args) read -r -a ECHD_ARGS <<<"$2"; shift 2 ;;
	--streams) STREAMS=$2; shift 2 ;;
	--servers) SERVERS=$2; shift 2 ;;
	-n) N=$2; shift 2 ;;
	-P) PIPE=$2; shift 2 ;;
	--tmpfs) TMPFS=1; shift ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done
command -v "$BENCH" >/dev/null || { echo "redis-benchmark not found (apt-get install redis-tools)" >&2; exit 1; }
[ $TMPFS -eq 0 ] || export TMPDIR=/dev/shm
bench_begin echd-streams

write_bytes() {
	awk '/^write_bytes:/ { print $2 }' "/proc/$1/io"
}

# run SERVER STREAMS ROUND: prints "rps bytes_per_xadd bytes_per_xadd_with_filing"
run() {
	local s=$1 k=$2 r=$3 dir port pid w0 w1 w2 rps key
	dir=$TMP/$s-$k-$r
	mkdir -p "$dir"
	port=$(free_port)
	case $s in
	redis-always)
		pid=$(spawn_ready "$dir.log" "$port" "$REDIS" --port "$port" --bind 127.0.0.1 --dir "$dir" \
			--save "" --appendonly yes --appendfsync always) ;;
	echd-lmdb)
		pid=$(spawn_ready "$dir.log" "$port" "$ECHD" --port "$port" --bind 127.0.0.1 --dir "$dir" \
			--loglevel warning "${ECHD_ARGS[@]}") ;;
	echd-staged)
		pid=$(spawn_ready "$dir.log" "$port" "$ECHD" --port "$port" --bind 127.0.0.1 --dir "$dir" \
			--loglevel warning --storage lmdb-staged "${ECHD_ARGS[@]}") ;;
	esac
	started "$s" "$pid"
	pid=$PID
	key=s
	[ "$k" -eq 1 ] || key='s:__rand_int__'
	local rflag=()
	[ "$k" -eq 1 ] || rflag=(-r "$k")
	w0=$(write_bytes "$pid")
	rps=$("$BENCH" -h 127.0.0.1 -p "$port" -n "$N" -c 50 -P "$PIPE" "${rflag[@]}" --csv \
		XADD "$key" '*' f v 2>/dev/null | awk -F'"' 'NR == 2 { print $4 }')
	w1=$(write_bytes "$pid")
	w2=$w1
	if [ "$s" = echd-staged ]; then
		# idle: echd files what it staged; wait for the staging table to empty (120 s at most)
		for _ in $(seq 1200); do
			[ "$("$CLI" -p "$port" INFO storage | tr -d '\r' |
				awk -F: '/^storage_stage_rows:/ { print $2 }')" != 0 ] || break
			sleep 0.1
		done
		w2=$(write_bytes "$pid")
	fi
	stop "$pid"
	rm -rf "$dir"
	printf '%s %s %s\n' "$rps" "$(ratio "$((w1 - w0))" "$N")" "$(ratio "$((w2 - w0))" "$N")"
}

declare -A RPS BPX BPXF
IFS=, read -r -a KS <<<"$STREAMS"
IFS=, read -r -a SS <<<"$SERVERS"
for k in "${KS[@]}"; do
	for r in $(seq "$ROUNDS"); do
		for s in "${SS[@]}"; do
			log "round $r/$ROUNDS: $s, $k stream(s), redis-benchmark -n $N -c 50 -P $PIPE"
			read -r "RPS[$s/$k/$r]" "BPX[$s/$k/$r]" "BPXF[$s/$k/$r]" < <(run "$s" "$k" "$r")
		done
	done
	for s in "${SS[@]}"; do
		a=() b=() c=()
		for r in $(seq "$ROUNDS"); do
			a+=("${RPS[$s/$k/$r]}") b+=("${BPX[$s/$k/$r]}") c+=("${BPXF[$s/$k/$r]}")
		done
		RPS[$s/$k]=$(median "${a[@]}") BPX[$s/$k]=$(median "${b[@]}") BPXF[$s/$k]=$(median "${c[@]}")
		[ "$ROUNDS" -eq 1 ] || log "$s/$k requests/s by round: ${a[*]}"
	done
done

printf '\nXADD -c 50 -P %s, %s requests per run%s%s\n' "$PIPE" "$N" \
	"$([ "$ROUNDS" -eq 1 ] || printf ', medians of %s rounds' "$ROUNDS")" \
	"$([ $TMPFS -eq 0 ] || printf ', on tmpfs')"
printf '%-8s %-13s %12s %10s %15s %18s\n' streams server 'requests/s' 'vs always' 'bytes/XADD' \
	'with filing'
for k in "${KS[@]}"; do
	for s in "${SS[@]}"; do
		vs=n/a
		[ -z "${RPS[redis-always/$k]:-}" ] || vs=$(ratio "${RPS[$s/$k]}" "${RPS[redis-always/$k]}")
		printf '%-8s %-13s %12s %10s %15s %18s\n' "$k" "$s" "${RPS[$s/$k]}" "$vs" \
			"${BPX[$s/$k]}" "${BPXF[$s/$k]}"
	done
done
