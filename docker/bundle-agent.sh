#!/usr/bin/env bash
# Make orchard-agent self-contained: the binary, every shared library it
# loads and the dynamic loader, in one directory tree that runs in any
# Linux image (no libc, busybox-only, distroless) once copied to PREFIX.
#
#   docker/bundle-agent.sh AGENT_BINARY OUT_DIR [PREFIX]
#
# OUT_DIR gets bin/orchard-agent and lib/*. PREFIX (default /orchard) is
# where the tree will live at run time (the pod's emptyDir mount): with
# patchelf the binary's interpreter becomes PREFIX/lib/ld-linux-*.so and its
# RPATH $ORIGIN/../lib (DT_RPATH, which unlike RUNPATH also covers the
# libraries' own dependencies), so `PREFIX/bin/orchard-agent ...` just works and
# children (user commands) inherit no LD_LIBRARY_PATH. Without patchelf, run
# it as `PREFIX/lib/ld-linux-x86-64.so.2 --library-path PREFIX/lib
# PREFIX/bin/orchard-agent ...`.
set -euo pipefail

[ $# -ge 2 ] || { echo "usage: $0 AGENT_BINARY OUT_DIR [PREFIX]" >&2; exit 2; }
agent=$1 out=$2 prefix=${3:-/orchard}
[ -x "$agent" ] || { echo "bundle-agent: \"$agent\" is not executable" >&2; exit 1; }
case $prefix in /*) ;; *) echo "bundle-agent: PREFIX must be absolute" >&2; exit 2 ;; esac

mkdir -p "$out/bin" "$out/lib"
cp -L "$agent" "$out/bin/orchard-agent"

# ldd prints "name => /path (addr)" for libraries and "/path (addr)" for
# the loader; vdso has no path.
loader=
while read -r a b c _; do
	if [ "$b" = "=>" ] && [ -n "$c" ] && [ "${c#/}" != "$c" ]; then
		cp -L "$c" "$out/lib/"
	elif [ "${a#/}" != "$a" ]; then
		loader=$a
		cp -L "$a" "$out/lib/"
	fi
done < <(ldd "$agent")
[ -n "$loader" ] || { echo "bundle-agent: no dynamic loader found (static binary?)" >&2; }

# glibc loads NSS modules at run time (user and group lookups); ship the
# file-based one so getpwuid works against the image's /etc/passwd.
for nss in /lib/x86_64-linux-gnu/libnss_files.so.2 /lib/aarch64-linux-gnu/libnss_files.so.2; do
	[ -e "$nss" ] && cp -L "$nss" "$out/lib/"
done

if [ -n "$loader" ] && command -v patchelf >/dev/null; then
	patchelf --set-interpreter "$prefix/lib/$(basename "$loader")" \
		--force-rpath --set-rpath '$ORIGIN/../lib' "$out/bin/orchard-agent"
	patched=1
else
	patched=0
fi
chmod -R a+rX "$out"
echo "bundle-agent: $out ($(ls "$out/lib" | wc -l) libraries, patched=$patched, prefix=$prefix)"
