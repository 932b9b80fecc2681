#!/usr/bin/env bash
# bench_tls.sh: XADD throughput over TLS, echd beside Debian's redis-server (built with TLS).
#
#   tests/bench/bench_tls.sh [options]
#
# In one run: echd over TLS, echd over plain TCP, and redis-server (appendonly yes,
# appendfsync always) over TLS, each with redis-benchmark XADD s * f v at -c 50 -P 1 and
# -c 50 -P 16. Mutual TLS: the script makes a throw-away CA, a server and a client certificate
# with openssl in its temporary directory, and redis-benchmark connects with
# --tls --cacert --cert --key. Prints requests/s and the ratios echd-TLS/echd-plain (target
# >= 0.7) and echd-TLS/redis-always-TLS (target >= 1.2).
#
# Options:
#   --echd PATH      echd binary (default: build/broker/echd)
#   --redis PATH     redis-server binary (default: /usr/bin/redis-server)
#   --echd-args STR  extra echd arguments, split on blanks
#   -n N             requests per redis-benchmark run (default: 200000)
#   --quick          -n 20000 (a fast sanity run)
#   --rounds K       run the whole sequence K times, report each figure's median (default: 1;
#                    3 or 5 on a busy machine, where one run's ratios are noise)
#   --redis-only     skip echd (to check the script itself)
#   --echd-only      skip redis-server
#
# Every server runs on 127.0.0.1 on free ports with a temporary data directory and is stopped
# on exit (also on Ctrl-C). This script is not part of `tools/echd-dev test`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=benchlib.sh
. "$ROOT/tests/bench/benchlib.sh"
ECHD=$ROOT/build/broker/echd
REDIS=/usr/bin/redis-server
BENCH=$(command -v redis-benchmark || echo /usr/bin/redis-benchmark)
OPENSSL=$(command -v openssl || echo /usr/bin/openssl)
N=200000
ROUNDS=1
RUN_ECHD=1
RUN_REDIS=1
ECHD_ARGS=()

usage() {
	sed -n '2,24s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

while [ $# -gt 0 ]; do
	case $1 in
	--echd) ECHD=$2; shift 2 ;;
	--redis) REDIS=$2; shift 2 ;;
	--echd-args) read -r -a ECHD_ARGS <<<"$2"; shift 2 ;;
	-n) N=$2; shift 2 ;;
	--quick) N=20000; shift ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	--redis-only) RUN_ECHD=0; shift ;;
	--echd-only) RUN_REDIS=0; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done

[ $RUN_ECHD -eq 0 ] || [ -x "$ECHD" ] || { echo "echd not found at $ECHD (build it first: tools/echd-dev build)" >&2; exit 1; }
[ $RUN_REDIS -eq 0 ] || [ -x "$REDIS" ] || { echo "redis-server not found at $REDIS" >&2; exit 1; }
command -v "$BENCH" >/dev/null || { echo "redis-benchmark not found (apt-get install redis-tools)" >&2; exit 1; }
command -v "$OPENSSL" >/dev/null || { echo "openssl not found (apt-get install openssl)" >&2; exit 1; }
"$BENCH" --help 2>&1 | grep -q -- '--tls' || { echo "$BENCH was built without TLS" >&2; exit 1; }

bench_begin echd-bench-tls

# ---------------------------------------------------------------------------
# Throw-away certificates (EC P-256; nothing outlives $TMP)
# ---------------------------------------------------------------------------
PKI=$TMP/pki
mkdir -p "$PKI"
(
	cd "$PKI"
	"$OPENSSL" req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
		-keyout ca.key -out ca.crt -subj /CN=echd-bench-ca -days 2 2>/dev/null
	for who in server client; do
		"$OPENSSL" req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
			-keyout $who.key -out $who.csr -subj /CN=bench-$who 2>/dev/null
		printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >$who.ext
		"$OPENSSL" x509 -req -in $who.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
			-out $who.crt -days 2 -extfile $who.ext 2>/dev/null
	done
)
SERVER_TLS=(--tls-cert-file "$PKI/server.crt" --tls-key-file "$PKI/server.key"
	--tls-ca-cert-file "$PKI/ca.crt")
CLIENT_TLS=(--tls --cacert "$PKI/ca.crt" --cert "$PKI/client.crt" --key "$PKI/client.key")

# launch NAME KIND [ARGS...]: start a server in $TMP/NAME with a plain port ($PORT, used for
# the readiness PING) and a TLS port ($TLS_PORT); sets PID.
launch() {
	local name=$1 kind=$2
	shift 2
	local dir=$TMP/$name
	mkdir -p "$dir"
	PORT=$(free_port)
	TLS_PORT=$(free_port)
	local cmd
	if [ "$kind" = echd ]; then
		cmd=("$ECHD" --port "$PORT" --tls-port "$TLS_PORT" --bind 127.0.0.1 --dir "$dir"
			--loglevel warning "${SERVER_TLS[@]}" "${ECHD_ARGS[@]}" "$@")
	else
		cmd=("$REDIS" --port "$PORT" --tls-port "$TLS_PORT" --bind 127.0.0.1 --dir "$dir"
			--save "" "${SERVER_TLS[@]}" "$@")
	fi
	started "$name" "$(spawn_ready "$TMP/$name.log" "$PORT" "${cmd[@]}")"
}

# bench PORT CLIENTS PIPELINE [redis-benchmark TLS options...]: prints "rps p50 p99" (ms)
bench() {
	local port=$1 c=$2 p=$3
	shift 3
	local out
	out=$("$BENCH" -h 127.0.0.1 -p "$port" "$@" -n "$N" -c "$c" -P "$p" --csv XADD s '*' f v 2>&1) || {
		echo "redis-benchmark failed on port $port: $out" >&2
		exit 1
	}
	printf '%s\n' "$out" | awk -F'"' '/^"XADD/ { print $4, $10, $14 }'
}

declare -A RPS P50 P99 SCPU ALL_RPS ALL_P50 ALL_P99 ALL_SCPU
RUNS=("50 1" "50 16")
SERVERS=()
[ $RUN_ECHD -eq 0 ] || SERVERS+=(echd-tls echd-plain)
[ $RUN_REDIS -eq 0 ] || SERVERS+=(redis-always-tls)

# echd-tls and echd-plain are the same configuration (a fresh data directory each, both ports
# open), measured on the TLS port and on the plain port: only the transport differs.
for round in $(seq "$ROUNDS"); do
	for s in "${SERVERS[@]}"; do
		case $s in
		echd-tls | echd-plain) launch "$s-$round" echd ;;
		redis-always-tls) launch "$s-$round" redis --appendonly yes --appendfsync always ;;
		esac
		for run in "${RUNS[@]}"; do
			read -r c p <<<"$run"
			key="$s/c$c/P$p"
			t0=$(cpu_ticks "$PID")
			if [ "$s" = echd-plain ]; then
				log "round $round $key: redis-benchmark -n $N -c $c -P $p XADD s * f v (plain TCP)"
				read -r rps p50 p99 < <(bench "$PORT" "$c" "$p")
			else
				log "round $round $key: redis-benchmark --tls -n $N -c $c -P $p XADD s * f v"
				read -r rps p50 p99 < <(bench "$TLS_PORT" "$c" "$p" "${CLIENT_TLS[@]}")
			fi
			ALL_RPS[$key]+="$rps " ALL_P50[$key]+="$p50 " ALL_P99[$key]+="$p99 "
			ALL_SCPU[$key]+="$(per_request_us "$(($(cpu_ticks "$PID") - t0))" "$N") "
		done
		stop "$PID"
		rm -rf "$TMP/$s-$round"
	done
done
for key in "${!ALL_RPS[@]}"; do
	# shellcheck disable=SC2086 # the lists are blank-separated numbers
	RPS[$key]=$(median ${ALL_RPS[$key]}) P50[$key]=$(median ${ALL_P50[$key]}) P99[$key]=$(median ${ALL_P99[$key]})
	SCPU[$key]=$(median ${ALL_SCPU[$key]})
done
[ "$ROUNDS" -eq 1 ] || printf '\nmedians of %s rounds of -n %s\n' "$ROUNDS" "$N"

printf '\n%-10s %-18s %12s %9s %9s %12s\n' run server 'requests/s' 'p50 ms' 'p99 ms' 'server µs'
for run in "${RUNS[@]}"; do
	read -r c p <<<"$run"
	for s in "${SERVERS[@]}"; do
		key="$s/c$c/P$p"
		printf '%-10s %-18s %12s %9s %9s %12s\n' "c$c P$p" "$s" "${RPS[$key]}" "${P50[$key]}" \
			"${P99[$key]}" "${SCPU[$key]}"
	done
done
printf '(server µs: CPU time, user + system, of the server process per request)\n'
if [ $RUN_ECHD -eq 1 ]; then
	printf '\nratios (requests/s):\n'
	for run in "${RUNS[@]}"; do
		read -r c p <<<"$run"
		printf '  c%-3s P%-3s echd-TLS/echd-plain %5sx (target >= 0.7)' "$c" "$p" \
			"$(ratio "${RPS[echd-tls/c$c/P$p]}" "${RPS[echd-plain/c$c/P$p]}")"
		if [ $RUN_REDIS -eq 1 ]; then
			printf '   echd-TLS/redis-always-TLS %5sx (target >= 1.2)' \
				"$(ratio "${RPS[echd-tls/c$c/P$p]}" "${RPS[redis-always-tls/c$c/P$p]}")"
		fi
		printf '\n'
	done
fi
