#!/usr/bin/env bash
# Resident memory of one orchard-agent (issue 3: idle RSS <= 3 MiB): a fresh
# agent, idle, then after its first exec, git and tar calls. Prints RSS and
# PSS (/proc/PID/smaps_rollup) after each step, and the largest resident
# mappings of the idle agent. A figure, not a test: nothing is asserted.
#
#   bench/agent-mem.sh [--top N] [--bundle DIR]
#
# ORCHARD_AGENT_BIN picks the binary (default bin/orchard-agent). --bundle
# DIR runs a bundle made by scripts/agent-bundle.sh DIR (loader form, as
# the sandboxes start it) instead. The agent listens on a unix socket in
# its own /tmp/agent-mem-XXXXXX and is stopped on exit.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
AGENT=${ORCHARD_AGENT_BIN:-$REPO/bin/orchard-agent}
TOP=12
BUNDLE=

while [ $# -gt 0 ]; do
	case $1 in
	--top) TOP=${2:?--top needs a number}; shift 2 ;;
	--bundle) BUNDLE=${2:?--bundle needs a directory}; shift 2 ;;
	-h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "agent-mem: unknown option \"$1\"" >&2; exit 2 ;;
	esac
done
[[ $TOP =~ ^[0-9]+$ ]] || { echo "agent-mem: --top needs a number" >&2; exit 2; }
command -v curl >/dev/null || { echo "agent-mem: needs curl" >&2; exit 1; }

DIR=$(mktemp -d /tmp/agent-mem-XXXXXX)
PID=
cleanup() {
	if [ -n "$PID" ]; then
		kill "$PID" 2>/dev/null || true
		wait "$PID" 2>/dev/null || true
	fi
	rm -rf "$DIR"
}
trap cleanup EXIT

SOCK=$DIR/agent.sock
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DIR/token"
TOKEN=$(cat "$DIR/token")
if [ -n "$BUNDLE" ]; then
	[ -x "$BUNDLE/orchard-agent" ] || { echo "agent-mem: $BUNDLE is not a loader-form bundle" >&2; exit 1; }
	"$BUNDLE/ld-linux-x86-64.so.2" --inhibit-cache --library-path "$BUNDLE/lib" "$BUNDLE/orchard-agent" \
		--listen "unix:$SOCK" --token-file "$DIR/token" 2>"$DIR/agent.log" &
else
	[ -x "$AGENT" ] || { echo "agent-mem: \"$AGENT\" is missing: run make bin/orchard-agent" >&2; exit 1; }
	"$AGENT" --listen "unix:$SOCK" --token-file "$DIR/token" 2>"$DIR/agent.log" &
fi
PID=$!

call() { # METHOD PATH [curl args...]: the body, or fail
	local method=$1 path=$2
	shift 2
	curl -sS --fail --max-time 30 --unix-socket "$SOCK" -H "Authorization: Bearer $TOKEN" \
		-X "$method" "http://agent$path" "$@"
}

for _ in $(seq 100); do
	[ -S "$SOCK" ] && call GET /health >/dev/null 2>&1 && break
	kill -0 "$PID" 2>/dev/null || { cat "$DIR/agent.log" >&2; exit 1; }
	sleep 0.1
done
call GET /health >/dev/null

# The agent's own pid: the loader form execs nothing, so $PID is it.
mem() { # LABEL
	sleep 0.5
	awk -v label="$1" '/^Rss:/ { rss = $2 } /^Pss:/ { pss = $2 }
		END { printf "%-34s %8.2f %8.2f\n", label, rss / 1024, pss / 1024 }' "/proc/$PID/smaps_rollup"
}

printf '%-34s %8s %8s\n' "state" "RSS MiB" "PSS MiB"
mem "idle (fresh)"
IDLE_SMAPS=$(cat "/proc/$PID/smaps")
call POST /exec -H 'Content-Type: application/json' -d '{"command":["true"]}' >/dev/null
mem "after one exec (true)"
mkdir -p "$DIR/work/sub"
echo "old" > "$DIR/work/a.txt"
printf '%s\n' '--- a/a.txt' '+++ b/a.txt' '@@ -1 +1 @@' '-old' '+new' > "$DIR/patch"
/usr/bin/python3 -c 'import json,sys; print(json.dumps({"patch": open(sys.argv[1]).read(), "cwd": sys.argv[2]}))' \
	"$DIR/patch" "$DIR/work" > "$DIR/apply.json"
call POST /git/apply -H 'Content-Type: application/json' --data-binary "@$DIR/apply.json" \
	| grep -q '"success": *true' || { echo "agent-mem: git apply failed" >&2; exit 1; }
mem "after git apply (libgit2 loaded)"
call GET "/archive?path=$DIR/work" -o "$DIR/work.tar"
mem "after GET /archive (libarchive)"

echo
echo "largest resident mappings of the idle agent (kB, summed per file):"
awk '/^[0-9a-f]+-[0-9a-f]+ / { name = ($6 == "" ? "[anon]" : $6); sub(/.*\//, "", name) }
	/^Rss:/ { rss[name] += $2 }
	END { for (n in rss) if (rss[n] > 0) printf "%8d  %s\n", rss[n], n }' <<<"$IDLE_SMAPS" \
	| sort -rn | head -n "$TOP"
echo "shared objects mapped when idle: $(grep -oE '/[^ ]+\.so[.0-9]*$' <<<"$IDLE_SMAPS" | sort -u | wc -l)"
