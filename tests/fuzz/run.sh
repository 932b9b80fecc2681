#!/usr/bin/env bash
# tests/fuzz/run.sh [SECONDS] [FUZZER...]: the short fuzz run (CI) and the long one.
#
# Configures build-fuzz (clang, ASan+UBSan, coverage for libFuzzer) unless it
# already is, builds the harnesses, and runs each fuzzer for SECONDS (default
# 60) over a copy of its seed corpus in tests/fuzz/corpus/, the fuzzers side by
# side. A crash, leak, sanitizer report or timeout fails that fuzzer and leaves
# the input that caused it in $FUZZ_OUT/<fuzzer>/ (printed, with the command
# that replays it). The last line is "fuzz: N passed, M failed"; the exit
# status is 1 when any failed.
#
# Environment: FUZZ_BUILD (default build-fuzz), FUZZ_OUT (default
# $FUZZ_BUILD/fuzz-out), FUZZ_ARGS (extra libFuzzer flags, e.g. "-jobs=4"),
# FUZZ_KEEP_CORPUS=1 merges what the run found back into tests/fuzz/corpus/.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
SECS=${1:-60}
shift || true
FUZZERS=("$@")
[ ${#FUZZERS[@]} -eq 0 ] && FUZZERS=(resp dispatch)
BUILD=${FUZZ_BUILD:-build-fuzz}
OUT=${FUZZ_OUT:-$BUILD/fuzz-out}

summary() {
	echo "fuzz: $1 passed, $2 failed"
	[ "$2" -eq 0 ] && [ "$1" -gt 0 ]
}

if ! [[ $SECS =~ ^[0-9]+$ ]] || [ "$SECS" -eq 0 ]; then
	echo "usage: tests/fuzz/run.sh [SECONDS] [resp|dispatch ...]" >&2
	exit 2
fi

targets=()
for f in "${FUZZERS[@]}"; do
	targets+=("tests/fuzz/fuzz-$f")
done
if [ ! -f "$BUILD/meson-private/coredata.dat" ]; then
	if ! CC=clang meson setup "$BUILD" --werror -Dfuzz=enabled -Dtests=disabled \
		-Db_sanitize=address,undefined -Db_lundef=false \
		-Dc_args=-fsanitize=fuzzer-no-link >&2; then
		echo "fuzz: cannot configure $BUILD (clang and libclang-rt-14-dev installed?)" >&2
		summary 0 1
		exit 1
	fi
fi
if ! ninja -C "$BUILD" "${targets[@]}" >&2; then
	echo "fuzz: build failed" >&2
	summary 0 1
	exit 1
fi

# UBSan reports must stop the run to count as a crash; LSan runs after
# inputs that leaked.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}

pids=()
for f in "${FUZZERS[@]}"; do
	work="$OUT/$f"
	rm -rf "$work/corpus"
	mkdir -p "$work/corpus" "$work/crashes"
	touch "$work/.start"
	cp tests/fuzz/corpus/"$f"/* "$work/corpus/"
	dict=()
	[ -f "tests/fuzz/$f.dict" ] && dict=("-dict=tests/fuzz/$f.dict")
	# -timeout: one input running 20 s is a hang; -rss_limit_mb: a leak or
	# a blow-up; -max_len: the resp seeds hold a 40 KiB argument, while
	# dispatch, which opens an LMDB environment per input, does more with
	# more and shorter inputs.
	maxlen=65536
	[ "$f" = dispatch ] && maxlen=8192
	# shellcheck disable=SC2086
	"$BUILD/tests/fuzz/fuzz-$f" "$work/corpus" -max_total_time="$SECS" -timeout=20 \
		-rss_limit_mb=4096 -max_len="$maxlen" -print_final_stats=1 \
		-artifact_prefix="$work/crashes/" "${dict[@]}" ${FUZZ_ARGS:-} \
		>"$work/log" 2>&1 &
	pids+=($!)
done

passed=0
failed=0
for i in "${!FUZZERS[@]}"; do
	f=${FUZZERS[$i]}
	work="$OUT/$f"
	rc=0
	wait "${pids[$i]}" || rc=$?
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -n1)
	cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$work/log" | tail -n1)
	crash=$(find "$work/crashes" -type f -newer "$work/.start" 2>/dev/null | head -n1)
	if [ "$rc" -eq 0 ]; then
		passed=$((passed + 1))
		echo "fuzz: PASS $f (${SECS}s, ${runs:-?} inputs, ${cov:-no coverage line}, corpus $(ls "$work/corpus" | wc -l) files)"
	else
		failed=$((failed + 1))
		echo "fuzz: FAIL $f (exit $rc)"
		grep -E -m 40 'ERROR|SUMMARY|runtime error|fuzz: |#[0-9]+ 0x' "$work/log" | head -n 40
		if [ -n "$crash" ] && [ -f "$crash" ]; then
			echo "fuzz: input kept in $crash"
			echo "fuzz: replay with: $BUILD/tests/fuzz/fuzz-$f $crash"
		fi
		echo "fuzz: full log in $work/log"
	fi
	if [ "${FUZZ_KEEP_CORPUS:-0}" = 1 ] && [ "$rc" -eq 0 ]; then
		"$BUILD/tests/fuzz/fuzz-$f" -merge=1 "tests/fuzz/corpus/$f" "$work/corpus" \
			>"$work/merge.log" 2>&1 || echo "fuzz: merge of $f failed, see $work/merge.log"
	fi
done
summary "$passed" "$failed"
