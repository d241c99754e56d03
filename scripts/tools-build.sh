#!/usr/bin/env bash
# Build the sandbox-tools bundle (docs/sandbox-tools.md): the agent CLIs
# pinned in sandbox-tools/versions, fetched from the npm registry with
# `npm pack` (npm is only the delivery: no node, no npm in the payload),
# checked against the pinned integrity, laid out with POSIX sh launchers,
# each checked to run (`--version`), and described by a MANIFEST.
#
#   scripts/tools-build.sh [OUTDIR]      default: bin/sandbox-tools
#
# OUTDIR gets
#   bin/NAME                 a POSIX sh launcher per tool (and extra tools)
#   libexec/NAME/            the tool's payload, as the package ships it
#   lib/                     glibc's loader and the libraries the glibc tools
#                            need, used only where the image has no glibc
#   etc/profile.d/sandbox-tools.sh   puts bin/ last on PATH in login shells
#   MANIFEST                 the pins, then "sha256 mode path" of every file
#
# Environment:
#   ORCHARD_TOOLS_CACHE      downloaded tarballs, by integrity (default
#                            ${XDG_CACHE_HOME:-~/.cache}/orchard/sandbox-tools)
#   ORCHARD_TOOLS_EXTRA      a directory of relocatable tools copied into the
#                            bundle as is (its bin/* go on PATH); see the docs
#   ORCHARD_TOOLS_VERSIONS   the pins file (default sandbox-tools/versions)
#   ORCHARD_TOOLS_NPM        the npm command (default npm)
#
# Nothing is replaced unless the whole new bundle was built and checked; a
# rebuild from the same inputs is skipped, and gives the same MANIFEST.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$REPO/bin/sandbox-tools}
VERSIONS=${ORCHARD_TOOLS_VERSIONS:-$REPO/sandbox-tools/versions}
CACHE=${ORCHARD_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/orchard/sandbox-tools}
EXTRA=${ORCHARD_TOOLS_EXTRA:-}
NPM=${ORCHARD_TOOLS_NPM:-npm}
LOADER=ld-linux-x86-64.so.2

die() { echo "tools-build: $*" >&2; exit 1; }

case $OUT in /*) ;; *) OUT=$PWD/$OUT ;; esac
[ -r "$VERSIONS" ] || die "pins file \"$VERSIONS\" is missing"
[ -z "$EXTRA" ] || [ -d "$EXTRA" ] || die "ORCHARD_TOOLS_EXTRA \"$EXTRA\" is not a directory"
[ "$(uname -m)" = x86_64 ] || die "the pinned packages are for x86_64, not $(uname -m)"

# ---- the pins --------------------------------------------------------------
NAMES=() KINDS=() SPECS=() SUMS=() PAYLOADS=() EXES=()
lineno=0
while read -r name kind spec sum payload exe rest; do
	lineno=$((lineno + 1))
	case $name in ''|'#'*) continue ;; esac
	[ -n "$exe" ] && [ -z "$rest" ] || die "$VERSIONS:$lineno: want NAME KIND NPM-SPEC INTEGRITY PAYLOAD EXE"
	[[ $name =~ ^[a-z][a-z0-9._-]*$ ]] || die "$VERSIONS:$lineno: bad tool name \"$name\""
	case $kind in static|glibc) ;; *) die "$VERSIONS:$lineno: kind \"$kind\" is not static or glibc" ;; esac
	[[ $spec =~ ^(@[a-z0-9._-]+/)?[a-z0-9._-]+@[0-9][A-Za-z0-9.+-]*$ ]] ||
		die "$VERSIONS:$lineno: \"$spec\" is not a package@exact-version"
	[[ $sum =~ ^sha512-[A-Za-z0-9+/]{86}==$ ]] || die "$VERSIONS:$lineno: \"$sum\" is not a sha512 integrity"
	for p in "$payload" "$exe"; do
		case /$p/ in */../*|//*) die "$VERSIONS:$lineno: path \"$p\" leaves the package" ;; esac
	done
	NAMES+=("$name") KINDS+=("$kind") SPECS+=("$spec") SUMS+=("$sum") PAYLOADS+=("$payload") EXES+=("$exe")
done <"$VERSIONS"
[ "${#NAMES[@]}" -gt 0 ] || die "$VERSIONS pins no tool"

# ---- skip an up-to-date bundle ---------------------------------------------
# Inputs: the pins, this script, and the extra dir's files and contents.
inputs() {
	sha256sum "$VERSIONS" "${BASH_SOURCE[0]}" | cut -d' ' -f1
	if [ -n "$EXTRA" ]; then
		(cd "$EXTRA" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0r sha256sum)
	fi
}
stamp=$(inputs | sha256sum | cut -d' ' -f1)
if [ -f "$OUT/MANIFEST" ] && [ "$(cat "$OUT/.inputs" 2>/dev/null)" = "$stamp" ]; then
	echo "tools-build: $OUT is up to date"
	exit 0
fi

# ---- fetch (cached by integrity) -------------------------------------------
integrity_of() { # FILE -> sha512-BASE64
	printf 'sha512-%s' "$(openssl dgst -sha512 -binary "$1" | base64 -w0)"
}
cached() { # INTEGRITY -> cache path
	printf '%s/%s.tgz' "$CACHE" "$(printf '%s' "$1" | sha256sum | cut -c1-32)"
}
fetch() { # SPEC INTEGRITY
	local spec=$1 sum=$2 dst tmp try got
	dst=$(cached "$sum")
	if [ -f "$dst" ] && [ "$(integrity_of "$dst")" = "$sum" ]; then
		return 0
	fi
	command -v "$NPM" >/dev/null || die "\"$NPM\" is not installed: the bundle is fetched with npm (Node.js)"
	mkdir -p "$CACHE"
	tmp=$(mktemp -d "$CACHE/.fetch.XXXXXX")
	for try in 1 2 3 4; do
		rm -f "$tmp"/*.tgz
		if "$NPM" pack --silent --pack-destination "$tmp" --fetch-retries=3 "$spec" \
			>"$tmp/log" 2>&1 && [ "$(find "$tmp" -name '*.tgz' | wc -l)" = 1 ]; then
			break
		fi
		if [ "$try" = 4 ]; then
			tail -n 20 "$tmp/log" >&2
			rm -rf "$tmp"
			die "npm pack $spec failed 4 times (is the npm registry reachable?)"
		fi
		echo "tools-build: npm pack $spec failed (try $try); retrying" >&2
		sleep $((try * 5))
	done
	got=$(integrity_of "$tmp"/*.tgz)
	if [ "$got" != "$sum" ]; then
		rm -rf "$tmp"
		die "$spec: the registry's tarball has integrity $got, not the pinned $sum; refusing it"
	fi
	mv "$tmp"/*.tgz "$dst"
	rm -rf "$tmp"
}
for i in "${!NAMES[@]}"; do
	echo "tools-build: fetch ${SPECS[$i]}"
	fetch "${SPECS[$i]}" "${SUMS[$i]}"
done

# ---- lay out a new bundle beside OUT ---------------------------------------
mkdir -p "$(dirname "$OUT")"
NEW=$(mktemp -d "$OUT.new.XXXXXX")
trap 'rm -rf "$NEW"' EXIT
mkdir -p "$NEW/bin" "$NEW/libexec" "$NEW/lib" "$NEW/etc/profile.d" "$NEW/.x"

launcher() { # NAME KIND EXE-REL-TO-ROOT COMMENT
	local f=$NEW/bin/$1
	{
		echo '#!/bin/sh'
		echo "# $4 (Orchard sandbox-tools bundle; docs/sandbox-tools.md)"
		echo 'case $0 in */*) t=${0%/*}/.. ;; *) t=$(command -v -- "$0"); t=${t%/*}/.. ;; esac'
		echo '# A read-only HOME (the host image): state under $TMPDIR instead'
		echo 'if [ ! -w "${HOME:-/nonexistent}" ]; then'
		echo '	s=${TMPDIR:-/tmp}/sandbox-tools-home'
		echo '	: "${XDG_DATA_HOME:=$s/.local/share}" "${XDG_STATE_HOME:=$s/.local/state}"'
		echo '	: "${XDG_CONFIG_HOME:=$s/.config}" "${XDG_CACHE_HOME:=$s/.cache}"'
		echo '	export XDG_DATA_HOME XDG_STATE_HOME XDG_CONFIG_HOME XDG_CACHE_HOME'
		echo 'fi'
		if [ "$2" = glibc ]; then
			echo "# glibc's loader: the image's when it has one, else the bundle's own"
			echo "if [ -e /lib64/$LOADER ] && [ -z \"\${SANDBOX_TOOLS_OWN_LIBC-}\" ]; then"
			echo "	exec \"\$t/$3\" \"\$@\""
			echo 'fi'
			echo "exec \"\$t/lib/$LOADER\" --inhibit-cache --library-path \"\$t/lib\" \"\$t/$3\" \"\$@\""
		else
			echo "exec \"\$t/$3\" \"\$@\""
		fi
	} >"$f"
	chmod 0755 "$f"
}

need_glibc=()
for i in "${!NAMES[@]}"; do
	name=${NAMES[$i]} payload=${PAYLOADS[$i]}
	x=$NEW/.x/$name
	mkdir -p "$x"
	tar -xzf "$(cached "${SUMS[$i]}")" -C "$x" --no-same-owner
	src=$x/package/$payload
	mkdir -p "$NEW/libexec/$name"
	if [ -d "$src" ]; then
		cp -R "$src/." "$NEW/libexec/$name/"
	elif [ -f "$src" ]; then
		cp "$src" "$NEW/libexec/$name/"
	else
		die "${SPECS[$i]} has no \"$payload\""
	fi
	exe=libexec/$name/${EXES[$i]}
	[ -f "$NEW/$exe" ] || die "${SPECS[$i]}: \"${EXES[$i]}\" is not in its payload"
	chmod 0755 "$NEW/$exe"
	[ "${KINDS[$i]}" = static ] || need_glibc+=("$NEW/$exe")
	launcher "$name" "${KINDS[$i]}" "$exe" "$name ${SPECS[$i]##*@}, from ${SPECS[$i]}"
done
rm -rf "$NEW/.x"

# glibc for images without one: the loader and, by soname, what ldd lists.
if [ "${#need_glibc[@]}" -gt 0 ]; then
	for f in "${need_glibc[@]}"; do
		ldd "$f" | while read -r first second third _; do
			if [ "$second" = "=>" ] && [ -f "$third" ]; then
				cp -L "$third" "$NEW/lib/$first"
			elif [ -f "$first" ] && [[ $first == */$LOADER ]]; then
				cp -L "$first" "$NEW/lib/$LOADER"
			fi
		done
	done
	[ -f "$NEW/lib/$LOADER" ] || die "no $LOADER among the glibc tools' libraries"
fi

cat >"$NEW/etc/profile.d/sandbox-tools.sh" <<'EOF'
# Orchard sandbox-tools: its bin/ last on PATH, also after a login shell's
# /etc/profile reset PATH. SANDBOX_TOOLS is the bundle's mount point, set
# by the driver in every sandbox that has the bundle.
if [ -n "${SANDBOX_TOOLS-}" ] && [ -d "$SANDBOX_TOOLS/bin" ]; then
	case ":$PATH:" in
	*":$SANDBOX_TOOLS/bin:"*) ;;
	*) PATH="${PATH:+$PATH:}$SANDBOX_TOOLS/bin"; export PATH ;;
	esac
fi
EOF

# Extra tools: copied as they are; they must not replace the pinned ones.
if [ -n "$EXTRA" ]; then
	while IFS= read -r -d '' f; do
		rel=${f#./}
		[ ! -e "$NEW/$rel" ] || die "ORCHARD_TOOLS_EXTRA: \"$rel\" is already in the bundle"
	done < <(cd "$EXTRA" && find . ! -type d -print0)
	cp -R "$EXTRA/." "$NEW/"
fi

# ---- every tool must run ----------------------------------------------------
check_run() { # LABEL CMD...: CMD --version must exit 0
	local label=$1 out rc=0
	shift
	out=$(cd "$NEW" && env -i HOME="$NEW/.home" PATH=/usr/bin:/bin \
		timeout 120 "$@" --version </dev/null 2>&1) || rc=$?
	rm -rf "$NEW/.home"
	if [ "$rc" -ne 0 ]; then
		printf '%s\n' "$out" | tail -n 5 >&2
		die "\"$label --version\" failed (exit $rc); refusing the bundle"
	fi
	printf 'tools-build: %s: %s\n' "$label" "$(printf '%s' "$out" | head -n 1)"
}
for f in "$NEW"/bin/*; do
	[ -f "$f" ] && [ -x "$f" ] || die "\"bin/${f##*/}\" is not an executable file"
	check_run "bin/${f##*/}" "$f"
done
# The glibc tools again through the bundle's own loader (images without glibc).
for i in "${!NAMES[@]}"; do
	[ "${KINDS[$i]}" = glibc ] || continue
	check_run "bin/${NAMES[$i]} (own glibc)" \
		env SANDBOX_TOOLS_OWN_LIBC=1 "$NEW/bin/${NAMES[$i]}"
done

# ---- MANIFEST ---------------------------------------------------------------
rmdir "$NEW/lib" 2>/dev/null || true
chmod -R u+rwX,go+rX,go-w "$NEW"
{
	echo "# Orchard sandbox-tools bundle. Pins (sandbox-tools/versions):"
	for i in "${!NAMES[@]}"; do
		echo "# ${NAMES[$i]} ${KINDS[$i]} ${SPECS[$i]} ${SUMS[$i]}"
	done
	echo "# sha256 mode path"
	(cd "$NEW" && find . -type f ! -name MANIFEST ! -name .inputs -printf '%P\n' | LC_ALL=C sort |
		while IFS= read -r p; do
			printf '%s %s %s\n' "$(sha256sum <"$p" | cut -d' ' -f1)" "$(stat -c %a "$p")" "$p"
		done)
} >"$NEW/MANIFEST"
echo "$stamp" >"$NEW/.inputs"

# ---- swap in ----------------------------------------------------------------
# Running sandboxes keep the old tree through their bind mounts.
if [ -e "$OUT" ]; then
	mv "$OUT" "$NEW.old"
	mv "$NEW" "$OUT"
	rm -rf "$NEW.old"
else
	mv "$NEW" "$OUT"
fi
trap - EXIT
echo "tools-build: built $OUT ($(du -sh "$OUT" | cut -f1))"
