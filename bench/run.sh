#!/usr/bin/env bash
# Orchard's benchmarks (issue 8; bench/README.md). `make bench` builds and
# runs this. It starts its own stack (scripts/stack.sh) in a temporary
# directory on a free port, runs every scenario with bin/orchard-bench,
# prints the tables, ratios and targets, writes bench/results/<date>.json
# and stops the stack again, whatever happens.
#
# Sizes (defaults are issue 8's; BENCH_QUICK=1 runs small ones in about a
# minute, BENCH_TINY=1 runs each scenario once at a tiny size):
#   BENCH_EXEC_N        sequential execs, each of stack/agent/bash   (1000)
#   BENCH_CPU_N         execs of each command in exec-cpu             (300)
#   BENCH_CREATE_N      sequential create+wait+delete cycles          (200)
#   BENCH_SCALE_N       sandboxes in the scale scenario               (1000)
#   BENCH_SCALE_C       client concurrency of the scale scenario      (128)
#   BENCH_SCALE_EXECS   execs per sandbox                             (4)
#   BENCH_READ_N        GETs per rung of the read path                (20000)
#   BENCH_READ_C        read-path concurrency                         (64)
#   BENCH_FILES_N       rounds of the files scenario                  (5)
#   BENCH_FILES_MIB     raw file size in MiB                          (256)
#   BENCH_FILES_SMALL   small files in the tar                        (10000)
#   BENCH_SCENARIOS     which to run, in order
#                       (exec-latency exec-cpu create-latency read-path files scale)
#   BENCH_PORTS         port range to pick a free one from (18800-18819)
#   BENCH_KEEP=1        keep the temporary stack directory (logs)
#   BENCH_OUT           results file (bench/results/<date>.json)
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO" || exit 1
BENCH=$REPO/bin/orchard-bench

say() { echo "bench: $*" >&2; }
die() { say "$*"; exit 1; }

[ -x "$BENCH" ] || die "$BENCH is missing: run make bin/orchard-bench (or make bench)"

if [ -n "${BENCH_TINY:-}" ]; then
	d_exec=5 d_cpu=5 d_create=2 d_scale=4 d_scale_c=4 d_read=200 d_read_c=8
	d_files=1 d_files_mib=1 d_files_small=50
elif [ -n "${BENCH_QUICK:-}" ]; then
	d_exec=100 d_cpu=100 d_create=20 d_scale=50 d_scale_c=16 d_read=2000 d_read_c=64
	d_files=2 d_files_mib=64 d_files_small=1000
else
	d_exec=1000 d_cpu=300 d_create=200 d_scale=1000 d_scale_c=128 d_read=20000 d_read_c=64
	d_files=5 d_files_mib=256 d_files_small=10000
fi
EXEC_N=${BENCH_EXEC_N:-$d_exec}
CPU_N=${BENCH_CPU_N:-$d_cpu}
CREATE_N=${BENCH_CREATE_N:-$d_create}
SCALE_N=${BENCH_SCALE_N:-$d_scale}
SCALE_C=${BENCH_SCALE_C:-$d_scale_c}
SCALE_EXECS=${BENCH_SCALE_EXECS:-4}
READ_N=${BENCH_READ_N:-$d_read}
READ_C=${BENCH_READ_C:-$d_read_c}
FILES_N=${BENCH_FILES_N:-$d_files}
FILES_MIB=${BENCH_FILES_MIB:-$d_files_mib}
FILES_SMALL=${BENCH_FILES_SMALL:-$d_files_small}
SCENARIOS=${BENCH_SCENARIOS:-exec-latency exec-cpu create-latency read-path files scale}
for v in "$EXEC_N" "$CPU_N" "$CREATE_N" "$SCALE_N" "$SCALE_C" "$SCALE_EXECS" "$READ_N" "$READ_C" \
	"$FILES_N" "$FILES_MIB" "$FILES_SMALL"; do
	[[ $v =~ ^[0-9]{1,7}$ ]] || die "sizes must be integers (got \"$v\")"
done

# ---- a free port and our own stack ---------------------------------------

PORTS=${BENCH_PORTS:-18800-18819}
[[ $PORTS =~ ^([0-9]+)-([0-9]+)$ ]] || die "BENCH_PORTS \"$PORTS\" must be LOW-HIGH"
PORT_LO=${BASH_REMATCH[1]} PORT_HI=${BASH_REMATCH[2]}
# The first free port in the range above $1 (or from its start).
free_port() {
	local p
	for ((p = ${1:-PORT_LO - 1} + 1; p <= PORT_HI; p++)); do
		if [ -z "$(ss -Hltn "sport = :$p" 2>/dev/null)" ]; then
			echo "$p"
			return 0
		fi
	done
	return 1
}
PORT=$(free_port) || die "no free port in $PORTS"

VAR=$(mktemp -d /tmp/bench-XXXXXX) || die "mktemp failed"
chmod 0755 "$VAR"
cleanup() {
	local rc=$?
	trap - EXIT INT TERM HUP
	baseline_nginx_stop
	say "stopping the stack in $VAR"
	scripts/stack.sh down "$VAR" >>"$VAR/stack.log" 2>&1 || say "stack.sh down failed; see $VAR/stack.log"
	if [ -z "${BENCH_KEEP:-}" ] && [ $rc -eq 0 ]; then
		rm -rf "$VAR"
	else
		say "kept $VAR (logs in $VAR/log)"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

say "starting a stack in $VAR on 127.0.0.1:$PORT"
ORCHARD_PORT=$PORT scripts/stack.sh up "$VAR" >"$VAR/stack.log" 2>&1 || {
	tail -n 20 "$VAR/stack.log" >&2
	die "the stack did not start"
}
# shellcheck disable=SC1091
. "$VAR/env"

# ---- the files scenario's baseline: a plain nginx --------------------------
# The same nginx binary, TLS certificate and worker count as the stack's,
# nothing else: a static file for GET and the dav module for PUT, so the
# files scenario can say how close the stack comes to nginx+TLS alone.

BASE_NGX=
baseline_nginx_stop() {
	[ -n "$BASE_NGX" ] && [ -s "$BASE_NGX/nginx.pid" ] || return 0
	kill "$(cat "$BASE_NGX/nginx.pid")" 2>/dev/null || true
}
baseline_nginx_start() {
	local port
	port=$(free_port "$PORT") || { say "no free port for the baseline nginx"; return 1; }
	BASE_NGX=$VAR/baseline-nginx
	mkdir -p "$BASE_NGX/www/put" "$BASE_NGX/body" || return 1
	chmod -R 0777 "$BASE_NGX/www" "$BASE_NGX/body"
	cat >"$BASE_NGX/nginx.conf" <<NGX || return 1
worker_processes ${ORCHARD_NGINX_WORKERS:-auto};
pid $BASE_NGX/nginx.pid;
error_log $BASE_NGX/error.log;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path $BASE_NGX/body;
    client_body_buffer_size 1m;
    client_max_body_size 2g;
    server {
        listen 127.0.0.1:$port ssl;
        ssl_certificate $VAR/tls/server.crt;
        ssl_certificate_key $VAR/tls/server.key;
        ssl_protocols TLSv1.2 TLSv1.3;
        root $BASE_NGX/www;
        location /put/ { dav_methods PUT; }
    }
}
NGX
	"$(command -v nginx || echo /usr/sbin/nginx)" -p "$BASE_NGX/" -c "$BASE_NGX/nginx.conf" \
		-e "$BASE_NGX/error.log" >>"$VAR/stack.log" 2>&1 || return 1
	BASE_URL=https://127.0.0.1:$port
}

# ---- scenarios -------------------------------------------------------------

declare -a jsons=()
failed=0
run() {
	local name=$1
	shift
	say "running $name $*"
	if "$BENCH" "$name" "$@" --json "$VAR/$name.json"; then
		jsons+=("$VAR/$name.json")
	else
		say "$name FAILED"
		failed=1
	fi
}

for s in $SCENARIOS; do
	case $s in
	exec-latency) run exec-latency -n "$EXEC_N" ;;
	exec-cpu) run exec-cpu -n "$CPU_N" --stack-dir "$VAR" ;;
	create-latency) run create-latency -n "$CREATE_N" ;;
	read-path) run read-path -n "$READ_N" -c "$READ_C" ;;
	files)
		args=(-n "$FILES_N" --file-mib "$FILES_MIB" --small-files "$FILES_SMALL")
		if baseline_nginx_start; then
			args+=(--baseline-url "$BASE_URL" --baseline-dir "$BASE_NGX/www")
		else
			say "the baseline nginx did not start (see $VAR/stack.log): files runs without it"
		fi
		run files "${args[@]}"
		baseline_nginx_stop ;;
	scale) run scale -n "$SCALE_N" -c "$SCALE_C" --execs "$SCALE_EXECS" --stack-dir "$VAR" ;;
	*) say "unknown scenario \"$s\""; failed=1 ;;
	esac
done

# ---- results ---------------------------------------------------------------

mkdir -p "$REPO/bench/results"
OUT=${BENCH_OUT:-$REPO/bench/results/$(date -u +%Y-%m-%dT%H%M%SZ).json}
/usr/bin/python3 - "$OUT" "${BENCH_QUICK:+quick}${BENCH_TINY:+tiny}" "${jsons[@]}" <<'EOF'
import json, os, platform, subprocess, sys, time

out, size, files = sys.argv[1], sys.argv[2] or "full", sys.argv[3:]
def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()
def mem_gb():
    for line in open("/proc/meminfo"):
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 1048576, 1)
try:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
except OSError:
    commit = ""
doc = {
    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "size": size,
    "commit": commit,
    "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "memory_gb": mem_gb(),
                "kernel": platform.release(), "load_avg_at_end": os.getloadavg()},
    "scenarios": [json.load(open(f)) for f in files],
}
with open(out + ".tmp", "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
os.replace(out + ".tmp", out)

print("\n== summary (%s sizes, %s, %d cores, load %.2f)" % (size, doc["machine"]["cpu"],
      doc["machine"]["cores"], doc["machine"]["load_avg_at_end"][0]))
for s in doc["scenarios"]:
    for r in s.get("ratios", []):
        if r["value"] is not None:
            print("  %-15s ratio  %-38s %8.2fx" % (s["scenario"], r["name"], r["value"]))
    for t in s.get("targets", []):
        v = "n/a" if t["value"] is None else "%.2f" % t["value"]
        print("  %-15s target %-38s %8s %s %g %s: %s" % (s["scenario"], t["name"], v, t["cmp"],
              t["limit"], t["unit"], "met" if t["met"] else "NOT MET"))
print("results: %s" % out)
EOF
[ $failed -eq 0 ] || die "some scenarios failed"
