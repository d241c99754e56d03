#!/usr/bin/env bash
# stack-pids.sh VAR_DIR: the pids of a scripts/stack.sh stack (postgres,
# orchard-api, orchard-controller, nginx and all their descendants, and the
# sandboxes' process trees), comma-separated, for `perf record -p`.
set -euo pipefail
VAR=$(cd "$1" && pwd -P)
roots=$(awk '{ print $1 }' "$VAR"/run/{postgres,api,controller,nginx}.pid 2>/dev/null | tr -dc '0-9\n' || true)
roots="$roots $(grep -laF -f <(printf '%s\n' "$VAR/sandboxes/") /proc/[0-9]*/cmdline 2>/dev/null |
	sed -e 's|^/proc/||' -e 's|/cmdline$||' || true)"
ps -eo pid=,ppid= | awk -v roots="$roots" '
	BEGIN { n = split(roots, r, /[ \n]+/); for (i = 1; i <= n; i++) if (r[i] != "") in_[r[i]] = 1 }
	{ parent[$1] = $2 }
	END {
		do { changed = 0
			for (p in parent) if (!(p in in_) && (parent[p] in in_)) { in_[p] = 1; changed = 1 }
		} while (changed)
		sep = ""; for (p in in_) if (p in parent) { printf "%s%s", sep, p; sep = "," }
		print ""
	}'
