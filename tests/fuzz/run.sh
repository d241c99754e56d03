#!/bin/bash
# Build the libFuzzer targets, replay each committed corpus as a
# regression test, then fuzz each target for SECONDS (default 10).
#   tests/fuzz/run.sh [SECONDS]
# Environment: FUZZ_OUT (build directory, default build-fuzz/), JOBS
# (targets fuzzed at once, default the number of CPUs, at most 4).
# New corpus entries and crash files go to a temporary directory, kept and
# printed when something failed. Exit status 1 on any crash, leak,
# timeout or broken property; the last line is "fuzz: N passed, M failed".
set -uo pipefail

secs=${1:-10}
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${FUZZ_OUT:-$root/build-fuzz}
here=$root/tests/fuzz
jobs_max=${JOBS:-$(nproc 2>/dev/null || echo 2)}
(( jobs_max > 4 )) && jobs_max=4

targets=()
for f in "$here"/fuzz_*.c; do
	t=${f##*/fuzz_}
	targets+=("${t%.c}")
done

if ! "$here/build.sh" "$out"; then
	echo "fuzz: the build failed"
	echo "fuzz: 0 passed, ${#targets[@]} failed"
	exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/fuzz-run.XXXXXX")

dict_for() {
	case $1 in
	git_patch) echo "$here/dict/git_patch.dict" ;;
	json|pty_frame|exec_request|api_create|api_exec|api_files|api_git|api_admin|api_replay|agent_body)
		echo "$here/dict/json.dict" ;;
	api_route|api_params) echo "$here/dict/api_request.dict" ;;
	esac
}

# The first line that says what went wrong in a libFuzzer log.
summary() {
	grep -m1 -E 'property failed|^SUMMARY: |ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|out-of-memory|timeout after' "$1" ||
		tail -n1 "$1"
}

# run_target NAME: writes $work/NAME.result ("ok ..." or "FAIL ...").
run_target() {
	local t=$1 bin=$out/fuzz_$1 log=$work/$1.log res=$work/$1.result
	local crashes=$work/crashes/$1 newc=$work/corpus/$1 dict seeds=() runs input
	mkdir -p "$crashes" "$newc"
	shopt -s nullglob
	seeds=("$here/corpus/$t"/*)
	shopt -u nullglob
	if (( ${#seeds[@]} == 0 )); then
		echo "FAIL no seed corpus in tests/fuzz/corpus/$t" >"$res"
		return
	fi
	# (a) the committed corpus, each input once
	if ! "$bin" -rss_limit_mb=2048 -timeout=5 "${seeds[@]}" >"$log.regression" 2>&1; then
		input=$(grep '^Running: ' "$log.regression" | tail -n1 | cut -d' ' -f2-)
		echo "FAIL regression input ${input:-?}: $(summary "$log.regression")" >"$res"
		return
	fi
	# (b) fuzzing, new inputs into $newc, crash files into $crashes
	dict=$(dict_for "$t")
	"$bin" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=5 -print_final_stats=1 \
		-artifact_prefix="$crashes/" ${dict:+-dict="$dict"} "$newc" "$here/corpus/$t" \
		>"$log" 2>&1
	input=$(find "$crashes" -type f | head -n1)
	if [[ -n $input ]]; then
		echo "FAIL crash input $input: $(summary "$log")" >"$res"
		return
	fi
	runs=$(grep -m1 -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$')
	if [[ -z $runs ]]; then
		echo "FAIL fuzzing ended without its stats: $(summary "$log")" >"$res"
		return
	fi
	echo "ok ${#seeds[@]} seeds replayed, $runs runs in ${secs}s" >"$res"
}

for t in "${targets[@]}"; do
	while (( $(jobs -rp | wc -l) >= jobs_max )); do
		wait -n
	done
	run_target "$t" &
done
wait

passed=0
failed=0
for t in "${targets[@]}"; do
	res=$(cat "$work/$t.result" 2>/dev/null || echo "FAIL no result")
	echo "fuzz_$t: $res"
	if [[ $res == ok* ]]; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
	fi
done
if (( failed )); then
	echo "fuzz: logs, crash files and new inputs are in $work"
else
	rm -rf "$work"
fi
echo "fuzz: $passed passed, $failed failed"
(( failed == 0 ))
