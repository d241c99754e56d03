#!/usr/bin/env bash
# Run every test suite: the lint of the OpenAPI spec, the C unit tests, the
# fuzz targets, the integration tests (which start their own stacks in
# temporary directories on free ports, and check every answer against
# docs/openapi.yaml: tests/integration/spec_check.py), the unit and integration tests
# again against the ASan+UBSan build in bin-san/, valgrind memcheck over
# the agent and the api, a short soak, and the images and compose stack
# under podman (scripts/deploy-test.sh). `make test` builds bin/ and
# bin-san/ first; this script only runs.
# Exits non-zero on any failure; the last lines give each stage's time and
# "test: all suites passed" or "test: FAILED".
#
#   scripts/test.sh [PYTEST ARGS...]     e.g. scripts/test.sh -k auth -x
#
# PYTEST ARGS go to both integration runs (plain and sanitized).
# ORCHARD_TEST_STAGES picks stages, default all of, in this order:
#   spec unit fuzz integration san valgrind soak deploy
# spec lints docs/openapi.yaml with Redocly's linter, which
# scripts/lint-openapi.sh installs with npm into ~/.cache/orchard once (it
# needs Node >= 20.19; the stage fails saying so when node is older).
# ORCHARD_SOAK_SECONDS is the soak's length (default 120; `make soak`: 600).
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO" || exit 1

STAGES=${ORCHARD_TEST_STAGES:-spec unit fuzz integration san valgrind soak deploy}
# Every pytest run: a test that hangs fails after PYTEST_TIMEOUT seconds
# instead of holding the whole run (pytest-timeout), and a failed test is
# run once more before it counts (pytest-rerunfailures): this 2-core machine
# is shared, and a test that needs a deadline can miss it under load. A
# test that fails twice fails the stage; reruns are listed in the summary
# (R), so a test that needs them shows. ORCHARD_TEST_RERUNS=0 turns it off.
PYTEST=(/usr/bin/python3 -m pytest -q -p no:cacheprovider -rfER
	--timeout "${PYTEST_TIMEOUT:-900}" --reruns "${ORCHARD_TEST_RERUNS:-1}" --reruns-delay 2)
stage() { [[ " $STAGES " == *" $1 "* ]] && T0=$SECONDS && RC0=$rc; }
# timed NAME: record the stage's time, and its name among the failed ones
# when it set rc; the last lines repeat both, since a CI log is often read
# from its tail only.
timed() {
	TIMES+=("$1 $((SECONDS - T0))s")
	[ "$rc" -ne "$RC0" ] && FAILED_STAGES+=("$1")
	return 0
}
TIMES=()
FAILED_STAGES=()
rc=0
RC0=0
# Every pytest run's failed tests, repeated at the end (see timed()).
FAILED_TESTS=$(mktemp /tmp/orchard-failed.XXXXXX)
trap 'rm -f "$FAILED_TESTS"' EXIT
pytest_run() {
	# pytest_run LABEL ARGS...: run pytest, keep its FAILED/ERROR summary lines.
	local label=$1 prc
	shift
	"${PYTEST[@]}" "$@" 2>&1 | tee >(grep -E '^(FAILED|ERROR) ' | sed "s|^|$label: |" >>"$FAILED_TESTS")
	prc=${PIPESTATUS[0]}
	return "$prc"
}

if stage spec; then
echo "== OpenAPI lint (docs/openapi.yaml, scripts/lint-openapi.sh)"
if ! scripts/lint-openapi.sh; then
	echo "test: docs/openapi.yaml lint FAILED" >&2
	rc=1
fi
timed spec
fi

if stage unit; then
echo "== unit tests (bin/unit-tests)"
if [ ! -x bin/unit-tests ]; then
	echo "test: bin/unit-tests is missing; run make test (or make bin/unit-tests)" >&2
	rc=1
elif ! bin/unit-tests; then
	echo "test: unit tests FAILED" >&2
	rc=1
fi
timed unit
fi

if stage fuzz; then
echo "== fuzz targets (tests/fuzz, ${FUZZ_SECONDS:-10} s each)"
if ! command -v clang >/dev/null || ! command -v ld.lld >/dev/null; then
	echo "test: clang and lld are needed for tests/fuzz (clang-14 lld-14 libclang-rt-14-dev)" >&2
	rc=1
elif ! tests/fuzz/run.sh "${FUZZ_SECONDS:-10}"; then
	echo "test: fuzzing FAILED" >&2
	rc=1
fi
timed fuzz
fi

if stage integration; then
echo "== integration tests (tests/integration, tests/k8s)"
pytest_run integration tests/integration tests/reliability tests/k8s "$@"
prc=$?
case $prc in
0) ;;
5) echo "test: pytest collected no tests" >&2; rc=1 ;;
*) rc=1 ;;
esac
timed integration
fi

# The sanitizer stage: bin-san/unit-tests, then the integration suite with
# every binary taken from bin-san/ (docs/reliability.md, "Sanitizers").
# Every sanitized process writes its reports to SAN_LOG (log_path); stack.py
# adds the stack logs and sandbox agent logs that hold a report. Any report
# fails the stage, whatever the tests said.
SAN_SKIP=(
	# stack.sh and nginx's config, no C code beyond what other files run
	--ignore=tests/integration/test_scripts.py --ignore=tests/integration/test_nginx.py
)
san_reports() {
	# Sanitizer reports (not the runtime's warnings) among the files in $1.
	grep -lE 'ERROR: [A-Za-z]+Sanitizer|runtime error:|SUMMARY: [A-Za-z]+Sanitizer|==[0-9]+==ABORTING' \
		"$1"/* 2>/dev/null
}
if stage san; then
echo "== unit and integration tests under ASan+UBSan (bin-san/)"
san_log=$(mktemp -d /tmp/orchard-san.XXXXXX)
chmod 0755 "$san_log"
if [ ! -x bin-san/unit-tests ] || [ ! -x bin-san/orchard-api ]; then
	echo "test: bin-san/ is incomplete; run make test (or make test-san)" >&2
	rc=1
else
	(
		opts="log_path=$san_log/asan:detect_leaks=1:check_initialization_order=1"
		export ASAN_OPTIONS="$opts${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
		opts="log_path=$san_log/ubsan:print_stacktrace=1:halt_on_error=1"
		export UBSAN_OPTIONS="$opts${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
		export ORCHARD_BIN_DIR=$REPO/bin-san ORCHARD_SAN_LOG_DIR=$san_log
		export ORCHARD_AGENT_BIN=$REPO/bin-san/orchard-agent
		export ORCHARD_TEST_ORCHARDCTL=$REPO/bin-san/orchardctl
		export ORCHARD_TEST_CONTROLLER=$REPO/bin-san/orchard-controller
		src=0
		if ! bin-san/unit-tests; then
			echo "test: unit tests under sanitizers FAILED" >&2
			src=1
		fi
		pytest_run san tests/integration "${SAN_SKIP[@]}" "$@"
		case $? in
		0) ;;
		5) echo "test: pytest collected no tests" >&2; src=1 ;;
		*) src=1 ;;
		esac
		exit $src
	) || rc=1
	reports=$(san_reports "$san_log")
	if [ -n "$reports" ]; then
		for f in $reports; do
			echo "---- $f" >&2
			head -n 80 "$f" >&2
		done
		echo "test: sanitizer reports in $san_log (kept)" >&2
		rc=1
	else
		rm -rf "$san_log"
	fi
fi
timed san
fi

if stage valgrind; then
echo "== valgrind memcheck (tests/valgrind: the agent and the api)"
if ! tests/valgrind/run.sh; then
	echo "test: valgrind FAILED" >&2
	rc=1
fi
timed valgrind
fi

if stage soak; then
echo "== soak (tests/soak, ${ORCHARD_SOAK_SECONDS:-120} s)"
if ! /usr/bin/python3 tests/soak/soak.py --seconds "${ORCHARD_SOAK_SECONDS:-120}"; then
	echo "test: soak FAILED" >&2
	rc=1
fi
timed soak
fi

if stage deploy; then
echo "== deploy (scripts/deploy-test.sh: podman images, docker-compose.yml, smoke)"
if ! scripts/deploy-test.sh; then
	echo "test: deploy FAILED" >&2
	rc=1
fi
timed deploy
fi

(IFS=,; echo "test: stage times: ${TIMES[*]}")
if [ $rc -ne 0 ]; then
	sleep 1 # the tee'd grep of the last pytest run may still be writing
	sed 's/^/test: /' "$FAILED_TESTS" >&2
	echo "test: FAILED stages: ${FAILED_STAGES[*]}" >&2
else
	echo "test: all suites passed"
fi
exit $rc
