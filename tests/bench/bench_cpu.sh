#!/usr/bin/env bash
# bench_cpu.sh: server CPU per request, as instructions counted by callgrind, of echd beside
# Debian's redis-server, both with every write made durable before its reply.
#
#   tests/bench/bench_cpu.sh [options]
#
# Each server runs under `valgrind --tool=callgrind` with its data directory on a tmpfs
# (flushes are free there, so what is left is CPU): echd with appendfsync always, redis-server
# with appendonly yes, appendfsync always and save "". For every workload the counters are
# zeroed, redis-benchmark (or bench-queue-worker) drives a small run of N/10 requests, the
# counters are dumped, and the same again with N requests: the figure is the difference of the
# two totals over the difference of the requests, so that start-up, connects and the idle loop
# drop out. Workloads:
#   xadd-100   XADD s:<rand> * f v over 100 streams, 50 clients, pipeline 16
#   xadd-1     XADD s * f v on one stream, 50 clients, pipeline 16
#   xadd-p1    XADD s * f v on one stream, 50 clients, pipeline 1
#   queue      work-queue cycle: 50 workers XREADGROUP COUNT 10 + XACK of a preloaded stream
#              (entries of ~100 bytes); the figure is per entry (one tenth of a read, plus an
#              XACK of ten ids)
# Options:
#   --echd PATH      echd binary (default: build/broker/echd)
#   --redis PATH     redis-server binary (default: /usr/bin/redis-server)
#   --echd-args STR  extra echd arguments, split on blanks
#   --worker PATH    bench-queue-worker (default: build/tests/bench-queue-worker)
#   -n N             requests (entries, for queue) of the large run (default: 100000)
#   --runs LIST      workloads, blank separated (default: "xadd-100 xadd-1 xadd-p1 queue")
#   --top K          also print each server's K costliest functions (self cost) per workload
#   --keep DIR       keep the callgrind dumps in DIR (for callgrind_annotate)
#   --echd-only, --redis-only
#
# Callgrind counts user-space instructions only: system calls (read, write, epoll, fdatasync)
# and the kernel's side are not in the figures. Under valgrind the server runs some 50 times
# slower, so its batches (commands per loop turn and per commit) are larger than they would be
# natively: compare servers in the same run, not figures of different machines. The machine's
# load does not change the counts, which is why this measures instructions and not seconds.
# This script is a benchmark, not a test: it is not part of `tools/echd-dev test`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=benchlib.sh
. "$ROOT/tests/bench/benchlib.sh"
ECHD=$ROOT/build/broker/echd
REDIS=/usr/bin/redis-server
WORKER=$ROOT/build/tests/bench-queue-worker
BENCH=$(command -v redis-benchmark || echo /usr/bin/redis-benchmark)
CLI=$(command -v redis-cli || echo /usr/bin/redis-cli)
N=100000
RUNS="xadd-100 xadd-1 xadd-p1 queue"
TOP=0
KEEP=
RUN_ECHD=1
RUN_REDIS=1
ECHD_ARGS=()

usage() {
	sed -n '2,32s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

while [ $# -gt 0 ]; do
	case $1 in
	--echd) ECHD=$2; shift 2 ;;
	--redis) REDIS=$2; shift 2 ;;
	--echd-args) read -r -a ECHD_ARGS <<<"$2"; shift 2 ;;
	--worker) WORKER=$2; shift 2 ;;
	-n) N=$2; shift 2 ;;
	--runs) RUNS=$2; shift 2 ;;
	--top) TOP=$2; shift 2 ;;
	--keep) KEEP=$2; shift 2 ;;
	--echd-only) RUN_REDIS=0; shift ;;
	--redis-only) RUN_ECHD=0; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done

for t in valgrind callgrind_control callgrind_annotate "$BENCH" "$CLI"; do
	command -v "$t" >/dev/null || { echo "$t not found (apt-get install valgrind redis-tools)" >&2; exit 1; }
done
[ $RUN_ECHD -eq 0 ] || [ -x "$ECHD" ] || { echo "echd not found at $ECHD (build it first)" >&2; exit 1; }
[ $RUN_REDIS -eq 0 ] || [ -x "$REDIS" ] || { echo "redis-server not found at $REDIS" >&2; exit 1; }
case " $RUNS " in
*" queue "*) [ -x "$WORKER" ] || { echo "bench-queue-worker not found at $WORKER" >&2; exit 1; } ;;
esac
[ -z "$KEEP" ] || mkdir -p "$KEEP"

# the data directories must be on a tmpfs: /dev/shm unless TMPDIR says otherwise
export TMPDIR=${TMPDIR:-/dev/shm}
bench_begin echd-bench-cpu
SMALL=$((N / 10))
VALUE=$(printf 'v%.0s' $(seq 96))

# launch NAME KIND: starts the server under callgrind in $TMP/NAME; sets PORT, PID, CG (its
# callgrind output prefix).
launch() {
	local name=$1 kind=$2 dir=$TMP/$1 cmd
	mkdir -p "$dir"
	PORT=$(free_port)
	CG=$dir/callgrind.out
	if [ "$kind" = echd ]; then
		cmd=("$ECHD" --port "$PORT" --bind 127.0.0.1 --dir "$dir/data" --loglevel warning
			--appendfsync always "${ECHD_ARGS[@]}")
	else
		cmd=("$REDIS" --port "$PORT" --bind 127.0.0.1 --dir "$dir" --save ""
			--appendonly yes --appendfsync always)
	fi
	started "$name" "$(spawn_ready "$TMP/$name.log" "$PORT" valgrind --tool=callgrind \
		--callgrind-out-file="$CG" --dump-instr=no "${cmd[@]}")"
}

# counted PID CG TAG CMD...: zeroes PID's counters, runs CMD (output dropped), dumps the counters
# and prints the instructions counted; the dump is kept as $KEEP/TAG when --keep was given.
# Not in a subshell: DUMPS counts the server's dumps. Sets COUNT.
counted() {
	local pid=$1 cg=$2 tag=$3
	shift 3
	callgrind_control -z "$pid" >/dev/null 2>&1
	DUMPS=$((DUMPS + 1))  # callgrind numbers its dumps 1, 2, ...
	"$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }
	callgrind_control -d "$pid" >/dev/null 2>&1
	local f=$cg.$DUMPS
	[ -f "$f" ] || { echo "no callgrind dump for $tag ($f)" >&2; exit 1; }
	[ -z "$KEEP" ] || cp "$f" "$KEEP/$tag"
	if [ "$TOP" -gt 0 ] && [ "${tag%-small}" = "$tag" ]; then
		printf '\n%s: top %s functions (self instructions, whole run)\n' "$tag" "$TOP" >&2
		# callgrind_annotate also lists main and its callers at 100%: left out
		callgrind_annotate --inclusive=no --auto=no --threshold=100 "$f" 2>/dev/null |
			awk '$1 ~ /^[0-9,]+$/ && $2 ~ /^\(/ && $2 != "(100.0%)" && $3 != "PROGRAM" { print }' |
			head -"$TOP" | cut -c1-150 >&2 || true  # head's early exit is no failure
	fi
	COUNT=$(awk '/^totals:/ { print $2 }' "$f")
}

# xadd_cmd PORT WORKLOAD N: sets CMD to the redis-benchmark command of an XADD workload
xadd_cmd() {
	case $2 in
	xadd-100) CMD=("$BENCH" -p "$1" -c 50 -P 16 -n "$3" -r 100 XADD 's:__rand_int__' '*' f v) ;;
	xadd-1) CMD=("$BENCH" -p "$1" -c 50 -P 16 -n "$3" XADD s '*' f v) ;;
	xadd-p1) CMD=("$BENCH" -p "$1" -c 50 -P 1 -n "$3" XADD s1 '*' f v) ;;
	*) echo "unknown workload $2" >&2; exit 2 ;;
	esac
}

# queue_prepare PORT STREAM ENTRIES: preloads the stream and creates its group g at 0;
# queue_drain PORT STREAM: 50 workers read (COUNT 10) and ack until it is drained
queue_prepare() {
	"$BENCH" -p "$1" -c 4 -P 100 -n "$3" XADD "$2" '*' f "$VALUE" >/dev/null 2>&1
	"$CLI" -p "$1" XGROUP CREATE "$2" g 0 >/dev/null
}

queue_drain() {
	local out
	out=$(mktemp -d "$TMP/ids.XXXX")
	"$WORKER" "$1" "$2" g 50 10 "$out" 3600 | tail -1
	rm -rf "$out"
}

declare -A PER
servers=()
[ $RUN_ECHD -eq 0 ] || servers+=(echd)
[ $RUN_REDIS -eq 0 ] || servers+=(redis)
for s in "${servers[@]}"; do
	launch "$s" "$([ "$s" = echd ] && echo echd || echo redis)"
	DUMPS=0
	for w in $RUNS; do
		log "$s $w: $SMALL then $N requests"
		if [ "$w" = queue ]; then
			queue_prepare "$PORT" qs "$SMALL"
			queue_prepare "$PORT" ql "$N"
			counted "$PID" "$CG" "$s-$w-small" queue_drain "$PORT" qs
			a=$COUNT
			counted "$PID" "$CG" "$s-$w" queue_drain "$PORT" ql
			b=$COUNT
		else
			xadd_cmd "$PORT" "$w" "$SMALL"
			counted "$PID" "$CG" "$s-$w-small" "${CMD[@]}"
			a=$COUNT
			xadd_cmd "$PORT" "$w" "$N"
			counted "$PID" "$CG" "$s-$w" "${CMD[@]}"
			b=$COUNT
		fi
		PER[$s/$w]=$(awk -v a="$a" -v b="$b" -v n="$((N - SMALL))" 'BEGIN { printf "%.0f", (b - a) / n }')
	done
	stop "$PID"
done

printf '\n%-10s' workload
for s in "${servers[@]}"; do
	printf ' %14s' "$s instr/req"
done
[ ${#servers[@]} -lt 2 ] || printf ' %12s' 'redis/echd'
printf '\n'
for w in $RUNS; do
	printf '%-10s' "$w"
	for s in "${servers[@]}"; do
		printf ' %14s' "${PER[$s/$w]}"
	done
	[ ${#servers[@]} -lt 2 ] || printf ' %12s' "$(ratio "${PER[redis/$w]}" "${PER[echd/$w]}")"
	printf '\n'
done
printf '(user-space instructions per request, callgrind; queue: per entry delivered and acked)\n'
