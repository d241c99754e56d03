#!/usr/bin/env bash
# Build a self-contained orchard-agent: the binary, the dynamic loader and
# every shared library it links (from ldd), so that it runs in any Linux
# x86-64 image, including one without glibc (busybox, distroless, alpine).
#
#   scripts/agent-bundle.sh OUTDIR [--prefix DIR]
#
# OUTDIR gets:
#   orchard-agent            the agent binary (unchanged)
#   ld-linux-x86-64.so.2     the loader it was linked against
#   lib/                     the libraries, by soname
#   command                  the command line that starts it once OUTDIR is
#                            mounted (read-only is fine) at DIR inside the
#                            sandbox (default /run/orchard-agent):
#     DIR/ld-linux-x86-64.so.2 --inhibit-cache --library-path DIR/lib DIR/orchard-agent
#   followed by the agent's own arguments (--listen ..., --token-file ...).
#
# The loader is run directly, so nothing in the image is used to start the
# agent (no shell, no /etc/ld.so.cache, no libc) and nothing leaks into the
# commands it runs: they are the image's programs with the image's
# libraries (no LD_LIBRARY_PATH is set).
# ORCHARD_AGENT_BIN overrides the binary (default bin/orchard-agent).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
AGENT=${ORCHARD_AGENT_BIN:-$REPO/bin/orchard-agent}
PREFIX=/run/orchard-agent
OUT=

while [ $# -gt 0 ]; do
	case $1 in
	--prefix) PREFIX=${2:?--prefix needs a directory}; shift 2 ;;
	--prefix=*) PREFIX=${1#--prefix=}; shift ;;
	-h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "agent-bundle: unknown option \"$1\"" >&2; exit 2 ;;
	*) [ -z "$OUT" ] || { echo "agent-bundle: one OUTDIR only" >&2; exit 2; }; OUT=$1; shift ;;
	esac
done
[ -n "$OUT" ] || { echo "usage: agent-bundle.sh OUTDIR [--prefix DIR]" >&2; exit 2; }
[ -x "$AGENT" ] || { echo "agent-bundle: \"$AGENT\" is missing: run make bin/orchard-agent" >&2; exit 1; }
case $PREFIX in /*) ;; *) echo "agent-bundle: --prefix must be absolute" >&2; exit 2 ;; esac

mkdir -p "$OUT/lib"
rm -f "$OUT"/lib/*
install -m 0755 "$AGENT" "$OUT/orchard-agent"

loader=
# ldd lines: "libx.so.1 => /usr/lib/.../libx.so.1 (0x...)" and the loader
# as "/lib64/ld-linux-x86-64.so.2 (0x...)"; linux-vdso has no file.
while read -r first second third _; do
	if [ "$second" = "=>" ]; then
		case $third in
		/*) install -m 0644 "$(readlink -f "$third")" "$OUT/lib/$first" ;;
		*) echo "agent-bundle: ldd cannot find $first" >&2; exit 1 ;;
		esac
	elif [[ $first == /*ld-linux* ]]; then
		loader=$first
	fi
done < <(ldd "$AGENT")
[ -n "$loader" ] || { echo "agent-bundle: no dynamic loader in ldd's output" >&2; exit 1; }
install -m 0755 "$(readlink -f "$loader")" "$OUT/ld-linux-x86-64.so.2"

echo "$PREFIX/ld-linux-x86-64.so.2 --inhibit-cache --library-path $PREFIX/lib $PREFIX/orchard-agent" > "$OUT/command"

# Smoke test from where it was built.
if ! "$OUT/ld-linux-x86-64.so.2" --inhibit-cache --library-path "$OUT/lib" "$OUT/orchard-agent" --version >/dev/null; then
	echo "agent-bundle: the bundled agent does not start" >&2
	exit 1
fi
echo "agent-bundle: $OUT ($(ls "$OUT/lib" | wc -l) libraries, $(du -sh "$OUT" | cut -f1))"
