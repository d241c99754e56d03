#!/usr/bin/env bash
# abab.sh ROUNDS BUILD_A BUILD_B [BUILD_C ...]: the exec-cpu scenario
# (bench/README.md) against builds alternating, A B A B ..., so that the
# machine's load hits every build alike. A BUILD is a directory holding
# bin/ (a `make all` output) and sql/migrations (what orchard-admin
# migrate applies beside the binary). One stack per build runs the whole
# time (scripts/stack.sh, ports from 18820 up), all are stopped at the end
# (trap). Prints one line per run and the median of each build.
#
#   BENCH_CPU_N   execs of each command per run (300)
#   ABAB_STACK    the stack.sh to start them with (this checkout's)
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$REPO/bin/orchard-bench
STACK=${ABAB_STACK:-$REPO/scripts/stack.sh}
N=${BENCH_CPU_N:-300}
die() { echo "abab: $*" >&2; exit 1; }

[ $# -ge 3 ] || die "usage: $0 ROUNDS BUILD_A BUILD_B [BUILD_C ...]"
ROUNDS=$1
shift
[[ $ROUNDS =~ ^[0-9]{1,3}$ && $N =~ ^[0-9]{1,6}$ ]] || die "ROUNDS and BENCH_CPU_N must be integers"
[ -x "$BENCH" ] || die "$BENCH is missing: make bin/orchard-bench"
OUT=$(mktemp -d /tmp/abab-XXXXXX) || die "mktemp failed"
chmod 0755 "$OUT"
declare -a builds=() vars=()
cleanup() {
	local v
	for v in "${vars[@]}"; do
		ORCHARD_PORT=$(cat "$v/port" 2>/dev/null) "$STACK" down "$v" >>"$OUT/stack.log" 2>&1 || true
	done
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

port=18820
for b in "$@"; do
	b=$(cd "$b" && pwd) || die "no build $b"
	[ -x "$b/bin/orchard-api" ] || die "$b/bin/orchard-api is missing"
	v=$OUT/stack-${#builds[@]}
	mkdir -p "$v" && chmod 0755 "$v"
	while [ -n "$(ss -Hltn "sport = :$port" 2>/dev/null)" ]; do port=$((port + 1)); done
	echo "$port" >"$v/port"
	ORCHARD_PORT=$port ORCHARD_BIN_DIR=$b/bin \
		"$STACK" up "$v" >>"$OUT/stack.log" 2>&1 || die "stack for $b did not start ($OUT/stack.log)"
	builds+=("$b")
	vars+=("$v")
	port=$((port + 1))
done

for ((r = 1; r <= ROUNDS; r++)); do
	for i in "${!builds[@]}"; do
		v=${vars[$i]}
		# shellcheck disable=SC1091
		(. "$v/env" && "$BENCH" exec-cpu -n "$N" --stack-dir "$v" --json "$OUT/r$r-b$i.json" \
			>"$OUT/r$r-b$i.log" 2>&1) || echo "abab: run $r of ${builds[$i]} failed ($OUT/r$r-b$i.log)" >&2
		printf '%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >"$OUT/r$r-b$i.load"
	done
done

/usr/bin/python3 - "$OUT" "$ROUNDS" "${builds[@]}" <<'EOF'
import json, os, statistics, sys

out, rounds, builds = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
cols = ("postgres", "orchard-api", "nginx", "sandbox (agent, bwrap)")
per = {i: [] for i in range(len(builds))}
print("run  build                       load(1,5,15)      true: stack  pg    api   nginx agent | bash  | 5 pieces: stack | bash")
for r in range(1, rounds + 1):
    for i, b in enumerate(builds):
        p = os.path.join(out, "r%d-b%d.json" % (r, i))
        if not os.path.exists(p):
            continue
        d = json.load(open(p))["extra"]
        t, q = d["cpu_true"], d["cpu_pieces"]
        per[i].append((t["stack_ms_per_exec"], q["stack_ms_per_exec"]))
        load = open(os.path.join(out, "r%d-b%d.load" % (r, i))).read().strip()
        print("%-4d %-27s %-17s %6.3f %5.3f %5.3f %5.3f %5.3f | %5.3f | %6.3f | %6.3f" % (
            r, os.path.basename(b), load, t["stack_ms_per_exec"],
            *[t["parts_ms_per_exec"][c] for c in cols], t["bash_ms_per_spawn"],
            q["stack_ms_per_exec"], q["bash_ms_per_spawn"]))
print("\nmedian stack CPU per exec (ms): build, `true`, 5 pieces")
for i, b in enumerate(builds):
    if per[i]:
        print("  %-27s %6.3f %6.3f" % (os.path.basename(b), statistics.median(x[0] for x in per[i]),
                                      statistics.median(x[1] for x in per[i])))
print("runs: %s" % out)
EOF
