#!/usr/bin/env bash
# Lint docs/openapi.yaml with Redocly's OpenAPI linter (@redocly/cli, a
# validator this project did not write), rules in docs/redocly.yaml.
# npm installs the pinned version once into a cache directory outside the
# repository (ORCHARD_CACHE_DIR, default ~/.cache/orchard); later runs use it
# without the network. Exits non-zero on any lint error, or when node or npm
# is missing or too old (Redocly 2 needs Node >= 20.19).
#
#   scripts/lint-openapi.sh [SPEC]       default docs/openapi.yaml
set -euo pipefail

REDOCLY_VERSION=2.77.0
NODE_MIN=20.19

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SPEC=${1:-$REPO/docs/openapi.yaml}
CACHE=${ORCHARD_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/orchard}
DIR=$CACHE/redocly-cli-$REDOCLY_VERSION
BIN=$DIR/node_modules/.bin/redocly

die() { echo "lint-openapi: $*" >&2; exit 1; }

command -v node >/dev/null || die "node is missing: Redocly $REDOCLY_VERSION needs Node.js >= $NODE_MIN"
command -v npm >/dev/null || die "npm is missing: it installs Redocly $REDOCLY_VERSION"
node_version=$(node --version)
# sort -V: the smaller of the two comes first.
lowest=$(printf '%s\n%s\n' "${node_version#v}" "$NODE_MIN" | sort -V | head -n 1)
[ "$lowest" = "$NODE_MIN" ] ||
	die "node $node_version is too old: Redocly $REDOCLY_VERSION needs Node >= $NODE_MIN"

if [ ! -x "$BIN" ]; then
	echo "lint-openapi: installing @redocly/cli@$REDOCLY_VERSION into $DIR" >&2
	mkdir -p "$CACHE"
	# Into a fresh directory renamed at the end: a run cut short leaves
	# no half installation behind.
	tmp=$(mktemp -d "$CACHE/.redocly.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	npm install --prefix "$tmp" --no-audit --no-fund --no-save --loglevel=error \
		"@redocly/cli@$REDOCLY_VERSION" >&2 || die "npm install @redocly/cli@$REDOCLY_VERSION failed"
	rm -rf "$DIR"
	mv "$tmp" "$DIR"
	trap - EXIT
fi

# No telemetry and no update check: CI reaches only the npm registry.
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true NO_UPDATE_NOTIFIER=1
exec "$BIN" lint --config "$REPO/docs/redocly.yaml" --format stylish "$SPEC"
