#!/usr/bin/env bash
# orchard-agent and orchard-api under valgrind memcheck over a short
# scenario each; zero errors and zero definite/indirect leaks required.
# Uses bin/ (make first). See tests/valgrind/memcheck.py and
# docs/reliability.md ("Valgrind").
#
#   tests/valgrind/run.sh [agent] [api]      both by default
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
for b in orchard-agent orchard-api orchard-controller orchard-admin; do
	[ -x "$REPO/bin/$b" ] || { echo "valgrind: bin/$b is missing: run make first" >&2; exit 1; }
done
command -v valgrind >/dev/null || { echo "valgrind: not installed (scripts/deps.sh)" >&2; exit 1; }
exec /usr/bin/python3 "$REPO/tests/valgrind/memcheck.py" "$@"
