#!/usr/bin/env bash
# Build a self-contained orchard-agent: the binary, the dynamic loader and
# every shared library it links (from ldd, plus glibc's libnss_files) or
# loads on first use (libgit2 and libarchive, from `orchard-agent
# --lazy-libs`, with their own dependencies), so that it runs in any Linux
# image of its architecture, including one without glibc (busybox,
# distroless, alpine). The one bundling script: the tests, docker/Dockerfile
# and the Kubernetes pod all use it.
#
#   scripts/agent-bundle.sh OUTDIR [--prefix DIR] [--patchelf]
#
# DIR is where OUTDIR is mounted or copied (read-only is fine) inside the
# sandbox. Two forms:
#
# Default (loader form; DIR defaults to /run/orchard-agent). OUTDIR gets
#   orchard-agent            the agent binary (unchanged)
#   ld-linux-x86-64.so.2     the loader it was linked against
#   lib/                     the libraries, by soname
#   command                  the command line that starts it:
#     DIR/ld-linux-x86-64.so.2 --inhibit-cache --library-path DIR/lib DIR/orchard-agent
#   followed by the agent's own arguments (--listen ..., --token-file ...).
#   The loader is run directly, so nothing in the image is used to start
#   the agent (no shell, no /etc/ld.so.cache, no libc).
#
# --patchelf (direct form, needs patchelf; the Kubernetes pod's, whose
# command is /orchard/bin/orchard-agent: use --prefix /orchard). OUTDIR gets
#   bin/orchard-agent        the binary, interpreter set to
#                            DIR/lib/ld-linux-x86-64.so.2 and DT_RPATH to
#                            $ORIGIN/../lib (RPATH, not RUNPATH, so the
#                            libraries' own dependencies resolve there too)
#   lib/                     the libraries and the loader
#   command                  DIR/bin/orchard-agent
#
# Either way no LD_LIBRARY_PATH is set, so nothing leaks into the commands
# the agent runs: they are the image's programs with the image's libraries.
# ORCHARD_AGENT_BIN overrides the binary (default bin/orchard-agent).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
AGENT=${ORCHARD_AGENT_BIN:-$REPO/bin/orchard-agent}
PREFIX=/run/orchard-agent
PATCH=0
OUT=

while [ $# -gt 0 ]; do
	case $1 in
	--prefix) PREFIX=${2:?--prefix needs a directory}; shift 2 ;;
	--prefix=*) PREFIX=${1#--prefix=}; shift ;;
	--patchelf) PATCH=1; shift ;;
	-h|--help) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "agent-bundle: unknown option \"$1\"" >&2; exit 2 ;;
	*) [ -z "$OUT" ] || { echo "agent-bundle: one OUTDIR only" >&2; exit 2; }; OUT=$1; shift ;;
	esac
done
[ -n "$OUT" ] || { echo "usage: agent-bundle.sh OUTDIR [--prefix DIR] [--patchelf]" >&2; exit 2; }
[ -x "$AGENT" ] || { echo "agent-bundle: \"$AGENT\" is missing: run make bin/orchard-agent" >&2; exit 1; }
case $PREFIX in /*) ;; *) echo "agent-bundle: --prefix must be absolute" >&2; exit 2 ;; esac
if [ "$PATCH" = 1 ] && ! command -v patchelf >/dev/null; then
	echo "agent-bundle: --patchelf needs patchelf (Debian package patchelf)" >&2
	exit 1
fi

# Layout: where the binary and the loader go, relative to OUTDIR.
if [ "$PATCH" = 1 ]; then
	bin_rel=bin/orchard-agent ld_dir=lib
else
	bin_rel=orchard-agent ld_dir=.
fi

mkdir -p "$OUT/lib" "$(dirname "$OUT/$bin_rel")"
rm -f "$OUT"/lib/*
install -m 0755 "$AGENT" "$OUT/$bin_rel"

loader=
# ldd lines: "libx.so.1 => /usr/lib/.../libx.so.1 (0x...)" and the loader
# as "/lib64/ld-linux-x86-64.so.2 (0x...)"; linux-vdso has no file.
copy_deps() { # FILE: every library FILE needs, into lib/ by soname
	local first second third rest
	while read -r first second third rest; do
		if [ "$second" = "=>" ]; then
			case $third in
			/*) install -m 0644 "$(readlink -f "$third")" "$OUT/lib/$first" ;;
			*) echo "agent-bundle: ldd cannot find $first (for $1)" >&2; exit 1 ;;
			esac
		elif [[ $first == /*ld-linux* ]]; then
			loader=$first
		fi
	done < <(ldd "$1")
}
copy_deps "$AGENT"
[ -n "$loader" ] || { echo "agent-bundle: no dynamic loader in ldd's output" >&2; exit 1; }
# The libraries the agent dlopens on first use (libgit2, libarchive): ldd
# cannot see them. The agent loads them here and prints where from; each
# goes into lib/ under the name it is opened by (its soname), with its
# dependencies.
lazy=$(ORCHARD_LOG_LEVEL=error "$AGENT" --lazy-libs) ||
	{ echo "agent-bundle: orchard-agent --lazy-libs failed" >&2; exit 1; }
for lib in $lazy; do
	install -m 0644 "$(readlink -f "$lib")" "$OUT/lib/$(basename "$lib")"
	copy_deps "$lib"
done
ld_name=$(basename "$loader")
ld_rel=$ld_dir/$ld_name
ld_rel=${ld_rel#./}
install -m 0755 "$(readlink -f "$loader")" "$OUT/$ld_rel"

# glibc loads NSS modules at run time (user and group lookups); ship the
# file-based one so getpwuid works against the image's /etc/passwd.
libc_dir=$(dirname "$(ldd "$AGENT" | awk '$1 == "libc.so.6" { print $3 }')")
for f in "$libc_dir/libnss_files.so.2" /lib/x86_64-linux-gnu/libnss_files.so.2 \
	/lib/aarch64-linux-gnu/libnss_files.so.2; do
	if [ -e "$f" ]; then
		install -m 0644 "$(readlink -f "$f")" "$OUT/lib/libnss_files.so.2"
		break
	fi
done

if [ "$PATCH" = 1 ]; then
	patchelf --set-interpreter "$PREFIX/lib/$ld_name" \
		--force-rpath --set-rpath '$ORIGIN/../lib' "$OUT/$bin_rel"
	echo "$PREFIX/$bin_rel" > "$OUT/command"
else
	echo "$PREFIX/$ld_rel --inhibit-cache --library-path $PREFIX/lib $PREFIX/$bin_rel" > "$OUT/command"
fi
chmod -R a+rX "$OUT"

# Smoke test from where it was built (through the loader: a patched
# binary's interpreter only exists once the bundle is at PREFIX), the lazy
# libraries included: they must load from lib/, nowhere else.
if ! "$OUT/$ld_rel" --inhibit-cache --library-path "$OUT/lib" "$OUT/$bin_rel" --version >/dev/null; then
	echo "agent-bundle: the bundled agent does not start" >&2
	exit 1
fi
if ! lazy=$(ORCHARD_LOG_LEVEL=error "$OUT/$ld_rel" --inhibit-cache --library-path "$OUT/lib" \
	"$OUT/$bin_rel" --lazy-libs); then
	echo "agent-bundle: the bundled agent cannot load its lazy libraries" >&2
	exit 1
fi
for lib in $lazy; do
	[ "$(dirname "$lib")" -ef "$OUT/lib" ] ||
		{ echo "agent-bundle: the bundled agent loads $lib from outside the bundle" >&2; exit 1; }
done
echo "agent-bundle: $OUT ($(ls "$OUT/lib" | wc -l) libraries, $(du -sh "$OUT" | cut -f1), patchelf=$PATCH, prefix=$PREFIX)"
