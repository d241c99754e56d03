#!/usr/bin/env bash
# Run every test suite: the C unit tests, then the integration tests (which
# start their own stacks in temporary directories on free ports).
# `make test` builds first; this script only runs. Exits non-zero on any
# failure; pytest's summary line ("N passed, M failed in Xs") ends the run.
#
#   scripts/test.sh [PYTEST ARGS...]     e.g. scripts/test.sh -k auth -x
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO" || exit 1

if [ -n "${SANITIZE:-}" ]; then
	export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
	export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fi

rc=0

echo "== unit tests (bin/unit-tests)"
if [ ! -x bin/unit-tests ]; then
	echo "test: bin/unit-tests is missing; run make test (or make bin/unit-tests)" >&2
	rc=1
elif ! bin/unit-tests; then
	echo "test: unit tests FAILED" >&2
	rc=1
fi

echo "== fuzz targets (tests/fuzz, ${FUZZ_SECONDS:-10} s each)"
if ! command -v clang >/dev/null || ! command -v ld.lld >/dev/null; then
	echo "test: clang and lld are needed for tests/fuzz (clang-14 lld-14 libclang-rt-14-dev)" >&2
	rc=1
elif ! tests/fuzz/run.sh "${FUZZ_SECONDS:-10}"; then
	echo "test: fuzzing FAILED" >&2
	rc=1
fi

echo "== integration tests (tests/integration, tests/k8s)"
/usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration tests/k8s "$@"
prc=$?
case $prc in
0) ;;
5) echo "test: pytest collected no tests" >&2; rc=1 ;;
*) rc=1 ;;
esac

if [ $rc -ne 0 ]; then
	echo "test: FAILED" >&2
else
	echo "test: all suites passed"
fi
exit $rc
