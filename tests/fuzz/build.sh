#!/bin/bash
# Build every libFuzzer target of tests/fuzz into OUTDIR (default build-fuzz/).
#   tests/fuzz/build.sh [OUTDIR]
# Needs clang with libFuzzer (clang 14 + libclang-rt-14-dev) and lld. The
# sources each target needs are compiled here directly, with the
# Makefile's include flags and warnings plus ASan and UBSan; lib/ goes into
# an archive so a target pulls only what it uses. Targets link with
# --gc-sections (lld), so the HTTP handlers sharing a file with a parser
# (and their libpq/FastCGI/libmicrohttpd calls) drop out of targets that
# never call them. To add a target, see tests/fuzz/README.md.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/build-fuzz}
cd "$root"
mkdir -p "$out"
out=$(cd "$out" && pwd)

CC=${CC:-clang}
PKG_CONFIG=${PKG_CONFIG:-pkg-config}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}

# The targets: fuzz_NAME.c plus the sources it needs beyond lib/, the
# include directory of its headers and the libraries it links.
declare -A SRC INC LIBS
TARGETS=(json quantity utf8 tar_name path b64 git_patch pty_frame exec_request api_create api_exec
	api_query k8s_event trajectory api_route api_files api_git api_admin api_replay api_params
	agent_body imgref)
SRC[tar_name]="agent/fsutil.c";      INC[tar_name]=agent
SRC[path]="agent/fsutil.c";                          INC[path]=agent
SRC[b64]="agent/files_base64.c";                INC[b64]=agent
# libgit2 is loaded on first use (agent/dl.c); the target loads it as the agent does.
SRC[git_patch]="agent/git_patch.c agent/dl_git.c agent/dl.c agent/dl_archive.c"; INC[git_patch]=agent
LIBS[git_patch]="-ldl $($PKG_CONFIG --libs libgit2)"   # git_patch_* of the checks: not in the agent's table
SRC[pty_frame]="agent/pty_proto.c";                  INC[pty_frame]=agent
SRC[exec_request]="agent/cancel.c";                  INC[exec_request]=agent
SRC[api_create]="api/validate.c api/step_policy.c api/fail.c"; INC[api_create]=api
SRC[api_exec]="api/validate.c api/fail.c";           INC[api_exec]=api
INC[api_query]=api
SRC[k8s_event]="controller/k8s_podstate.c controller/k8s_pod.c"; INC[k8s_event]=controller
# The api targets of fuzz_req.h include api/request.c (api_req_release
# calls PQclear: libpq is linked, never connected) and the handler file.
LIBS_REQ="-lfcgi $($PKG_CONFIG --libs libpq)"
SRC[api_route]="api/tenant_share.c api/rate_limit.c api/fail.c"; INC[api_route]=api; LIBS[api_route]=$LIBS_REQ
SRC[api_files]="api/sandbox_agent.c api/fail.c agent/files_base64.c agent/fsutil.c"; INC[api_files]=api
LIBS[api_files]="$LIBS_REQ $($PKG_CONFIG --libs libcrypto)"
SRC[api_git]="api/fail.c"; INC[api_git]=api;          LIBS[api_git]=$LIBS_REQ
SRC[api_admin]="api/step_policy.c api/fail.c"; INC[api_admin]=api; LIBS[api_admin]=$LIBS_REQ
SRC[api_replay]="api/fail.c"; INC[api_replay]=api;    LIBS[api_replay]=$LIBS_REQ
SRC[api_params]="api/cursor.c api/sandbox_agent.c api/validate.c api/fail.c"; INC[api_params]=api
LIBS[api_params]=$LIBS_REQ
SRC[agent_body]="agent/files_args.c agent/fsutil.c"; INC[agent_body]=agent
LIBS[agent_body]="$($PKG_CONFIG --libs libmicrohttpd)"

WARNINGS="-Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla
	-Wformat=2 -Wno-format-nonliteral -Wpointer-arith -Wcast-qual -Wwrite-strings
	-Wno-missing-field-initializers"
PKG_CFLAGS=$($PKG_CONFIG --cflags json-c libpq libcurl libgit2 libmicrohttpd 2>/dev/null)
SAN="-fsanitize=address,undefined -fsanitize-address-globals-dead-stripping -fno-sanitize-recover=all -fno-omit-frame-pointer"
CFLAGS="-std=gnu11 -D_GNU_SOURCE -pthread -Ilib -include lib/banned.h -g -O1
	-ffunction-sections -fdata-sections $WARNINGS $PKG_CFLAGS $SAN ${FUZZ_CFLAGS:-}"
LDFLAGS="-fuse-ld=lld -Wl,--gc-sections -pthread"
LIBS_COMMON="$($PKG_CONFIG --libs json-c) -lm"

fail_dir=$(mktemp -d "${TMPDIR:-/tmp}/fuzz-build.XXXXXX")
trap 'rm -rf "$fail_dir"' EXIT

# compile SRC OBJ EXTRA...: one object, in the background pool.
compile() {
	local src=$1 obj=$2
	shift 2
	mkdir -p "$(dirname "$obj")"
	if ! $CC $CFLAGS "$@" -c -o "$obj" "$src" 2>"$obj.log"; then
		cat "$obj.log" >&2
		touch "$fail_dir/$(basename "$obj")"
	fi
}

pool() {
	while (( $(jobs -rp | wc -l) >= JOBS )); do
		wait -n || true
	done
}

# lib/ and every extra source once, with coverage but without the
# libFuzzer main; each target's own file with -fsanitize=fuzzer.
declare -A seen
lib_objs=()
for src in lib/*.c; do
	obj=$out/obj/${src%.c}.o
	lib_objs+=("$obj")
	pool; compile "$src" "$obj" -fsanitize=fuzzer-no-link &
done
for t in "${TARGETS[@]}"; do
	for src in ${SRC[$t]:-}; do
		[[ -n ${seen[$src]:-} ]] && continue
		seen[$src]=1
		pool; compile "$src" "$out/obj/${src%.c}.o" -fsanitize=fuzzer-no-link &
	done
	inc=${INC[$t]:+-I${INC[$t]}}
	pool; compile "tests/fuzz/fuzz_$t.c" "$out/obj/fuzz_$t.o" -fsanitize=fuzzer $inc &
done
wait
if [[ -n $(ls -A "$fail_dir") ]]; then
	echo "fuzz build: compilation failed: $(ls "$fail_dir" | tr '\n' ' ')" >&2
	exit 1
fi

rm -f "$out/liborchard-fuzz.a"
ar rcs "$out/liborchard-fuzz.a" "${lib_objs[@]}"

status=0
for t in "${TARGETS[@]}"; do
	objs=("$out/obj/fuzz_$t.o")
	for src in ${SRC[$t]:-}; do
		objs+=("$out/obj/${src%.c}.o")
	done
	# shellcheck disable=SC2086
	if ! $CC -fsanitize=fuzzer $SAN $LDFLAGS -o "$out/fuzz_$t" "${objs[@]}" \
		"$out/liborchard-fuzz.a" ${LIBS[$t]:-} $LIBS_COMMON; then
		echo "fuzz build: linking fuzz_$t failed" >&2
		status=1
	fi
done
[[ $status -eq 0 ]] && echo "fuzz build: ${#TARGETS[@]} targets in $out"
exit $status
