#!/usr/bin/env bash
# Install the Debian packages Orchard needs to build, run and test.
#
#   scripts/deps.sh          install what is missing (root), or print the
#                            apt-get command and exit 1 (non-root)
#   scripts/deps.sh --check  only report; exit 1 when something is missing
#
# Fast when everything is there: one dpkg-query call, no network.
set -euo pipefail

PACKAGES=(
	# build
	build-essential pkg-config make gcc
	# libraries linked by bin/*
	libfcgi-dev libfcgi-bin libjson-c-dev libcurl4-openssl-dev libgit2-dev
	libargon2-dev libmicrohttpd-dev libwslay-dev libarchive-dev
	libseccomp-dev libssl-dev libpq-dev
	libyaml-dev  # KUBECONFIG (controller/k8s_kubeconfig.c)
	# the local stack (scripts/stack.sh)
	postgresql postgresql-client nginx openssl bubblewrap curl
	iproute2 procps ca-certificates util-linux
	slirp4netns  # egress-only network namespace of block_network:false sandboxes (docs/controller.md)
	umoci   # orchard-admin image import --oci (docs/images.md)
	btrfs-progs  # the btrfs checkpoint backend's tests and bench (docs/checkpoints.md)
	# tests
	python3 python3-pytest python3-pytest-timeout python3-pytest-rerunfailures python3-requests python3-yaml python3-jsonschema python3-kubernetes
	python3-aiohttp python3-websocket  # Orchard's SDK (tests/integration/test_sdk.py)
	python3-websockets  # a second independent WebSocket client (tests/integration/test_pty_clients.py)
	git busybox-static patchelf
	clang lld libclang-rt-14-dev
	valgrind
	linux-perf  # profiles of the stack (bench/README.md)
	fish  # parses the generated fish completion (tests/integration/test_cli.py)
	# make deploy-test: the images and the compose stack under podman (docs/deploy.md)
	podman podman-compose buildah runc mmdebstrap netavark aardvark-dns catatonit uidmap
	fuse-overlayfs iptables
)

check_only=0
case "${1:-}" in
--check) check_only=1 ;;
"") ;;
*) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

# One dpkg-query call for all packages. Unknown packages make dpkg-query
# complain and exit 1; they are simply reported as missing.
installed=$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "${PACKAGES[@]}" 2>/dev/null || true)
missing=()
for p in "${PACKAGES[@]}"; do
	if ! grep -qE "^${p} ii" <<<"$installed"; then
		missing+=("$p")
	fi
done

# Debian's nginx 1.22 has auth_request built in; a custom build may not.
check_nginx() {
	local nginx; nginx=$(command -v nginx || echo /usr/sbin/nginx)
	if ! "$nginx" -V 2>&1 | grep -q -- --with-http_auth_request_module; then
		echo "deps: $nginx lacks the auth_request module (need Debian's nginx)" >&2
		exit 1
	fi
}

if [ "${#missing[@]}" -eq 0 ]; then
	check_nginx
	exit 0
fi

cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$check_only" -eq 1 ]; then
	echo "deps: missing Debian packages: ${missing[*]}" >&2
	exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "deps: missing Debian packages: ${missing[*]}" >&2
	echo "deps: run as root:" >&2
	echo "    $cmd" >&2
	exit 1
fi

echo "deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Installing postgresql and nginx would start the system's own cluster and
# web server (port 80); Orchard runs its own instances, so keep them from
# starting (the usual policy-rc.d of Debian container images), unless the
# machine already has a policy of its own.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
	trap 'rm -f "$policy"' EXIT
	printf '#!/bin/sh\n# scripts/deps.sh: no service starts during its install\nexit 101\n' >"$policy"
	chmod 0755 "$policy"
fi
apt-get update </dev/null
apt-get install -y --no-install-recommends "${missing[@]}" </dev/null
check_nginx
