#!/usr/bin/env bash
# make deploy-test: the images built here and docker-compose.yml run under
# podman-compose, smoked from the host through nginx and TLS
# (docs/deploy.md, "Compose under podman"; what it proves and what not).
#
#   scripts/deploy-test.sh            base image (cached), build, compose up,
#                                     smoke, tear down
#   ORCHARD_DEPLOY_KEEP=1 ...         leave the stack up (tear down by hand:
#                                     podman-compose -p orchard-dt down -v)
#
# Needs root and scripts/deps.sh's podman group (podman, podman-compose,
# buildah, runc, mmdebstrap, netavark). Cached between runs in podman's
# storage: the Debian base image (localhost/orchard-base:bookworm, made by
# mmdebstrap + podman import) and the orchard/*:dev images with their
# layers. Everything else it makes (containers, volumes, the network and
# netavark's iptables chains) goes at the end, pass or fail. Publishes only
# on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."

# A mount namespace of our own, private: rootful podman keeps each
# container's network namespace as a bind mount under /run/netns, and
# another tool re-mounting /run/netns on the host meanwhile (`ip netns add`
# does when it is not a mount point) would hide them from podman, which then
# cannot list, stop or tear down the containers ("unknown FS magic").
if [ -z "${ORCHARD_DEPLOY_UNSHARED:-}" ]; then
	exec unshare --mount --propagation private env ORCHARD_DEPLOY_UNSHARED=1 "$0" "$@"
fi

PROJECT=${ORCHARD_DEPLOY_PROJECT:-orchard-dt}
BASE=${ORCHARD_BASE_IMAGE:-localhost/orchard-base:bookworm}
MIRROR=${ORCHARD_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# build: the compile stage, tagged so that the prune below keeps its cache
TARGETS="build postgres api nginx controller agent"
t0=$(date +%s)

die() { echo "deploy-test: $*" >&2; exit 1; }
step() { echo "deploy-test: [$(( $(date +%s) - t0 ))s] $*"; }

[ "$(id -u)" -eq 0 ] || die "needs root (rootful podman: the controller container runs bubblewrap)"
scripts/deps.sh --check || die "missing packages: run scripts/deps.sh as root"

work=$(mktemp -d /tmp/orchard-deploy.XXXXXX)
# podman's default rlimits (nofile/nproc from its own, raised, limits) are
# refused here by runc ("error setting rlimits"); give containers fixed ones.
printf '[containers]\ndefault_ulimits = ["nofile=16384:16384", "nproc=8192:8192"]\n' \
	>"$work/containers.conf"
export CONTAINERS_CONF=$work/containers.conf
ORCHARD_PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export ORCHARD_PORT
compose() { podman-compose -p "$PROJECT" -f docker-compose.yml "$@"; }

# netavark leaves its base chains (NETAVARK_*) once its last network is
# gone; remove them when no container is left at all (then nothing of
# podman's needs them). Jumps from the built-in chains first.
netavark_chains_down() {
	local ipt table chain
	[ -z "$(podman ps -aq)" ] || return 0
	for ipt in iptables ip6tables; do
		command -v "$ipt" >/dev/null || continue
		for table in filter nat; do
			"$ipt" -t "$table" -S 2>/dev/null | grep -E '^-A [A-Z]+ .*-j NETAVARK' |
				sed 's/^-A /-D /' | while read -r rule; do
					eval "$ipt -t $table $rule" || true
				done || true
			for chain in $("$ipt" -t "$table" -S 2>/dev/null | awk '/^-N NETAVARK/ {print $2}'); do
				"$ipt" -t "$table" -F "$chain" 2>/dev/null || true
			done
			for chain in $("$ipt" -t "$table" -S 2>/dev/null | awk '/^-N NETAVARK/ {print $2}'); do
				"$ipt" -t "$table" -X "$chain" 2>/dev/null || true
			done
		done
	done
}

teardown() {
	local rc=$?
	if [ "${ORCHARD_DEPLOY_KEEP:-0}" = 1 ]; then
		echo "deploy-test: left up: ORCHARD_PORT=$ORCHARD_PORT podman-compose -p $PROJECT down -v"
		exit $rc
	fi
	step "tear down"
	[ $rc -eq 0 ] || compose logs >"$work/compose.log" 2>&1 || true
	[ $rc -eq 0 ] || { tail -n 60 "$work/compose.log" >&2; echo "(whole log: $work/compose.log)" >&2; }
	compose down -v >/dev/null 2>&1 || true
	podman ps -aq --filter "label=io.podman.compose.project=$PROJECT" | xargs -r podman rm -f >/dev/null 2>&1 || true
	podman volume ls -q --filter "label=io.podman.compose.project=$PROJECT" | xargs -r podman volume rm -f >/dev/null 2>&1 || true
	podman network rm -f "${PROJECT}_default" >/dev/null 2>&1 || true
	# What netavark could not undo itself (its teardown needs the
	# containers' netns handles under /run/netns: another tool re-mounting
	# /run/netns meanwhile hides them): stale handles, bridges, DNS server.
	if [ -z "$(podman ps -aq)" ]; then
		for f in /run/netns/netns-*; do
			[ -f "$f" ] && ! mountpoint -q "$f" && rm -f "$f"
		done
		ip -o link show type bridge | awk -F': ' '$2 ~ /^podman[0-9]+$/ {print $2}' |
			xargs -r -n1 ip link del 2>/dev/null || true
		dns=/run/containers/networks/aardvark-dns
		rm -f "$dns/${PROJECT}_default"
		if [ -f "$dns/aardvark.pid" ] && [ -z "$(ls "$dns" | grep -v '^aardvark.pid$')" ] &&
			grep -q aardvark-dns "/proc/$(cat "$dns/aardvark.pid")/cmdline" 2>/dev/null; then
			kill "$(cat "$dns/aardvark.pid")" 2>/dev/null || true
			rm -f "$dns/aardvark.pid"
		fi
	fi
	podman image prune -f >/dev/null 2>&1 || true     # dangling layers of replaced builds
	netavark_chains_down
	[ $rc -ne 0 ] || rm -rf "$work"
	step "done (exit $rc)"
	exit $rc
}
trap teardown EXIT

# 1. The base image: Debian 12 minbase from Debian's archive, cached.
if ! podman image exists "$BASE"; then
	step "making $BASE with mmdebstrap"
	nice -n 19 mmdebstrap --quiet --variant=minbase --include=ca-certificates bookworm \
		"$work/base.tar" "$MIRROR"
	podman import -q "$work/base.tar" "$BASE" >/dev/null
	rm -f "$work/base.tar"
fi

# 2. Every image of docker/Dockerfile on it (layers cached by podman).
for t in $TARGETS; do
	step "building orchard/$t:dev"
	nice -n 19 podman build -q -f docker/Dockerfile --build-arg BASE_IMAGE="$BASE" \
		--target "$t" -t "orchard/$t:dev" . >"$work/build-$t.log" 2>&1 ||
		{ tail -n 40 "$work/build-$t.log" >&2; die "building $t failed"; }
done

# 2b. The sandbox-tools image (docker/Dockerfile.tools): the bundle `make
# tools` builds (a no-op when it is current; its downloads are cached), as
# the image's build context. Checked by running each tool's --version from
# the image as its non-root user, with the image's glibc and (claude,
# opencode) the bundle's own, and comparing it with its pin.
step "building orchard/tools:dev (the sandbox-tools bundle)"
nice -n 19 scripts/tools-build.sh >"$work/tools-build.log" 2>&1 ||
	{ tail -n 40 "$work/tools-build.log" >&2; die "scripts/tools-build.sh failed"; }
nice -n 19 podman build -q -f docker/Dockerfile.tools --build-arg BASE_IMAGE="$BASE" \
	-t orchard/tools:dev bin/sandbox-tools >"$work/build-tools.log" 2>&1 ||
	{ tail -n 40 "$work/build-tools.log" >&2; die "building tools failed"; }
podman run --rm --network none --read-only orchard/tools:dev sh -c '
	b=/opt/sandbox-tools/bin
	for t in codex claude opencode; do echo "$t $($b/$t --version)"; done
	for t in claude opencode; do echo "$t $(SANDBOX_TOOLS_OWN_LIBC=1 $b/$t --version)"; done
' >"$work/tools-run.log" 2>"$work/tools-run.err" ||
	{ cat "$work/tools-run.log" "$work/tools-run.err" >&2; die "orchard/tools:dev does not run"; }
declare -A pin
while read -r name _ spec _; do
	case $name in ''|'#'*) continue ;; esac
	v=${spec##*@}
	pin[$name]=${v%%-*}
done <sandbox-tools/versions
[ "$(wc -l <"$work/tools-run.log")" -eq 5 ] || die "orchard/tools:dev: $(cat "$work/tools-run.log" "$work/tools-run.err")"
while read -r name out; do
	[ -n "${pin[$name]:-}" ] && [[ $out == *"${pin[$name]}"* ]] ||
		die "orchard/tools:dev: \"$name $out\" is not the pinned version ($(cat "$work/tools-run.err"))"
done <"$work/tools-run.log"
step "orchard/tools:dev runs $(awk '{print $1}' "$work/tools-run.log" | sort -u | tr '\n' ' ')"
# What the smoke runs in a compose sandbox (the `tools` service's volume,
# bound into every sandbox by the controller): NAME=VERSION,...
tools=$(for n in "${!pin[@]}"; do printf '%s=%s,' "$n" "${pin[$n]}"; done)

# 3. The compose stack, as a user runs it.
step "podman-compose up (127.0.0.1:$ORCHARD_PORT)"
compose up -d >"$work/up.log" 2>&1 || { cat "$work/up.log" >&2; die "compose up failed"; }

# Nothing published beyond loopback.
published=$(podman ps --filter "label=io.podman.compose.project=$PROJECT" --format '{{.Ports}}' | tr ',' '\n' | grep -- '->' || true)
[ -n "$published" ] || die "nginx publishes nothing"
if grep -v "127.0.0.1:$ORCHARD_PORT->8443/tcp" <<<"$published" | grep -q .; then
	die "published beyond 127.0.0.1:$ORCHARD_PORT: $published"
fi

step "waiting for the migrations and an admin key"
key=""
for _ in $(seq 1 120); do
	if key=$(podman exec "${PROJECT}_api_1" orchard-admin key create --tenant default \
		--admin --create-tenant 2>/dev/null); then
		break
	fi
	key=""
	sleep 1
done
[ -n "$key" ] || die "no admin key after 120 s (migrate: $(podman logs "${PROJECT}_migrate_1" 2>&1 | tail -n 3))"

# 4. The smoke, from the host through nginx and TLS.
step "smoke"
/usr/bin/python3 tests/deploy/smoke.py "https://127.0.0.1:$ORCHARD_PORT" "$key" \
	--tools "$tools" --restart-controller "podman restart ${PROJECT}_controller_1 >/dev/null"
step "compose smoke passed"
