#!/usr/bin/env bash
# The local Orchard stack: PostgreSQL, orchard-api, orchard-controller, nginx.
#
#   scripts/stack.sh up     [VAR_DIR]   start everything in the background
#   scripts/stack.sh run    [VAR_DIR]   the same in the foreground; Ctrl-C stops
#   scripts/stack.sh down   [VAR_DIR]   stop everything, sandboxes included
#   scripts/stack.sh status [VAR_DIR]   what is running
#   scripts/stack.sh nginx-config [VAR_DIR]
#                       only create TLS material and render and check nginx's
#                       config (tests/integration/test_nginx.py uses it)
#
# VAR_DIR defaults to <repo>/var; the HTTPS port is ORCHARD_PORT (default
# 8443, or the one the var dir was last started with). Everything the stack
# writes lives in VAR_DIR; see docs/operations.md for the layout.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${ORCHARD_BIN_DIR:-$REPO/bin}   # override only to try other builds

die() { echo "stack: $*" >&2; exit 1; }
say() { echo "stack: $*" >&2; }

usage() {
	echo "usage: $0 up|run|down|status|nginx-config [VAR_DIR]" >&2
	exit 2
}

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	usage
fi
CMD=$1
case $CMD in
up | run | nginx-config) mkdir -p "${2:-$REPO/var}" ;;
down | status) ;;
*) usage ;;
esac
VAR=${2:-$REPO/var}
if [ ! -d "$VAR" ]; then
	say "no stack in \"$VAR\""
	[ "$CMD" = down ] && exit 0
	exit 1
fi
VAR=$(cd "$VAR" && pwd -P)
# The path goes into nginx's config, a libpq conninfo and unix socket
# addresses (at most 107 bytes): keep it plain and short.
[[ $VAR =~ ^[A-Za-z0-9._/+-]+$ ]] || die "var dir \"$VAR\" must match [A-Za-z0-9._/+-]+"
[ ${#VAR} -le 64 ] || die "var dir \"$VAR\" is longer than 64 bytes (unix socket paths are limited)"

RUN=$VAR/run
LOG=$VAR/log
PGDATA=$VAR/pg
TLS=$VAR/tls
NGX=$VAR/nginx
STATE=$VAR/sandboxes
# orchard-controller with this stack's state (up starts it; down runs its reap).
CONTROLLER=(env ORCHARD_STATE_DIR="$STATE" ORCHARD_AGENT_BIN="$VAR/bin/orchard-agent"
	ORCHARD_IMAGE_DIR="$VAR/images" ORCHARD_AGENT_BUNDLE="$VAR/bin/orchard-agent.bundle"
	"$BIN/orchard-controller")
SUPERVISE=$VAR/supervise   # the start scripts orchard-supervise runs
API_SOCKET=$RUN/api.sock
# nginx's auth subrequests have their own socket (orchard-api's default name).
API_AUTH_SOCKET=$API_SOCKET.auth
# PostgreSQL on 127.0.0.1 for Grafana's read-only role (docs/observability.md,
# "How Grafana reaches the local stack's PostgreSQL"): off unless asked for,
# remembered like the port ("" turns it off again). PostgreSQL has one port
# for TCP and its socket's name, so the socket follows it (PGPORT for our
# psql calls, port= in the conninfo).
PG_TCP=${ORCHARD_PG_TCP_PORT-$(cat "$VAR/pg-tcp-port" 2>/dev/null || true)}
[[ -z $PG_TCP || ( $PG_TCP =~ ^[0-9]{1,5}$ && $PG_TCP -ge 1024 && $PG_TCP -le 65535 ) ]] ||
	die "ORCHARD_PG_TCP_PORT \"$PG_TCP\" must be a port number in 1024..65535"
export PGPORT=${PG_TCP:-5432}
DB_URL="host=$RUN user=orchard dbname=orchard${PG_TCP:+ port=$PG_TCP}"

ROOT=0
[ "$(id -u)" -eq 0 ] && ROOT=1

# The user nginx's workers run as. The api's sockets are theirs alone:
# group-owned by the user's group, mode 0660, and the api refuses any other
# peer uid (ORCHARD_API_PEER_UIDS, api/peer.c). Not root: workers run as us.
NGINX_USER=$(id -un)
if [ "$ROOT" -eq 1 ]; then
	NGINX_USER=nobody
	id www-data >/dev/null 2>&1 && NGINX_USER=www-data
fi

PGBIN=
find_pgbin() {
	local d
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5 -V -r); do
		if [ -x "$d/pg_ctl" ] && [ -x "$d/initdb" ]; then
			PGBIN=$d
			return 0
		fi
	done
	die "PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin (run scripts/deps.sh)"
}

NGINX_BIN=$(command -v nginx 2>/dev/null || echo /usr/sbin/nginx)

# ---- process bookkeeping -------------------------------------------------

# proc_stat PID: "STATE STARTTIME" of a process (fields 3 and 22 of
# /proc/PID/stat; the command name before them may hold anything).
proc_stat() {
	local stat rest f
	{ read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
	rest=${stat##*) }
	read -ra f <<<"$rest"
	[ "${#f[@]}" -ge 20 ] || return 1
	echo "${f[0]} ${f[19]}"
}

# pid_alive NAME: prints the pid when <run>/NAME.pid names a process that
# is ours and alive. orchard-supervise writes "PID STARTTIME": the start
# time (clock ticks since boot) must match, so a pid that was reused by
# any other process (another stack's controller included) does not count,
# and the command line must name the program. A file without a start time
# is not trusted.
pid_alive() {
	local name=$1 pid= start= want state now
	[ -f "$RUN/$name.pid" ] || return 1
	read -r pid start _ <"$RUN/$name.pid" 2>/dev/null || true
	[[ $pid =~ ^[0-9]+$ && $start =~ ^[0-9]+$ ]] || return 1
	read -r state now < <(proc_stat "$pid") || return 1
	[ "$now" = "$start" ] && [ "$state" != Z ] && [ "$state" != X ] || return 1
	case $name in
	api) want=orchard-api ;;
	controller) want=orchard-controller ;;
	nginx) want=nginx ;;
	postgres) want=postgres ;;
	supervise) want=orchard-supervise ;;
	*) return 1 ;;
	esac
	[[ $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) == *"$want"* ]] || return 1
	echo "$pid"
}

# stop_pid NAME SIGNAL GRACE: signal the recorded process, wait up to GRACE
# seconds, then SIGKILL.
stop_pid() {
	local name=$1 sig=$2 grace=$3 pid i
	if ! pid=$(pid_alive "$name"); then
		rm -f "$RUN/$name.pid"
		return 0
	fi
	say "stopping $name (pid $pid)"
	kill "-$sig" "$pid" 2>/dev/null || true
	for ((i = 0; i < grace * 10; i++)); do
		[ -d "/proc/$pid" ] || break
		# a zombie child of ours (run mode) counts as gone
		[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ] && break
		sleep 0.1
	done
	if [ -d "/proc/$pid" ] && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]; then
		say "$name did not stop in ${grace}s, killing it"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
	rm -f "$RUN/$name.pid"
}

# ---- var dir, PostgreSQL --------------------------------------------------

as_pg() {
	if [ "$ROOT" -eq 1 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

check_traversable() {
	# PostgreSQL (as the postgres user), nginx workers and the sandboxes run
	# under other identities than root and must reach files in the var dir.
	local u
	[ "$ROOT" -eq 1 ] || return 0
	for u in postgres nobody; do
		id "$u" >/dev/null 2>&1 || die "the system user \"$u\" does not exist (is postgresql installed? run scripts/deps.sh)"
		if ! runuser -u "$u" -- test -x "$VAR"; then
			die "user \"$u\" cannot reach \"$VAR\" (a parent directory is not world-searchable, e.g. /root is 0700). Use a var dir elsewhere (scripts/stack.sh $CMD /srv/orchard) or make the parents searchable (chmod o+x)."
		fi
	done
}

make_dirs() {
	mkdir -p "$RUN" "$LOG" "$TLS" "$NGX/tmp" "$STATE"
	chmod 0755 "$VAR" "$RUN" "$NGX" "$STATE"
	chmod 0755 "$TLS"   # ca.crt is for everyone; the keys are 0600
	# Logs are not for every local user: a request line or an error may
	# carry what a client should not have put in a URI. The files exist
	# before anything opens them, so nginx (which would create 0644) keeps
	# 0640; the directory keeps out whatever is recreated later.
	local f
	for f in supervise api controller nginx-access nginx-error admin postgres postgres-init; do
		touch "$LOG/$f.log"
	done
	chmod 0640 "$LOG"/*.log
	chmod 0750 "$LOG"
	if [ "$ROOT" -eq 1 ]; then
		# PostgreSQL puts its socket and lock file into run/, and pg_ctl
		# (as postgres) opens its log in log/.
		chown postgres "$RUN"
		chgrp postgres "$LOG"
		chown postgres "$LOG/postgres.log"
	fi
}

pg_init() {
	if [ -f "$PGDATA/PG_VERSION" ]; then
		return 0
	fi
	say "initialising PostgreSQL cluster in $PGDATA"
	rm -rf "$PGDATA"
	mkdir -p "$PGDATA"
	chmod 0700 "$PGDATA"
	[ "$ROOT" -eq 1 ] && chown postgres "$PGDATA"
	as_pg "$PGBIN/initdb" -D "$PGDATA" -U orchard --auth=trust -E UTF8 \
		--locale=C.UTF-8 --no-sync >>"$LOG/postgres-init.log" 2>&1 ||
		die "initdb failed; see $LOG/postgres-init.log"
	# Only the private unix socket: no TCP at all.
	as_pg tee -a "$PGDATA/postgresql.conf" >/dev/null <<-EOF

		# orchard (scripts/stack.sh)
		listen_addresses = ''
		unix_socket_directories = '$RUN'
		unix_socket_permissions = 0700
		max_connections = 200
		shared_buffers = 128MB
		fsync = on
		log_min_messages = warning
		log_line_prefix = '%m [%p] %q%u@%d '
	EOF
}

# TCP connections: only the role grafana, with its password, to the
# orchard database; every other one is refused. (initdb's --auth=trust lines
# come after these, and hold for the socket alone.) Kept at the top of
# pg_hba.conf whether or not TCP is on, between markers.
pg_hba_tcp() {
	local hba=$PGDATA/pg_hba.conf
	as_pg sed -i '/^# orchard tcp begin$/,/^# orchard tcp end$/d' "$hba"
	as_pg sed -i '1i # orchard tcp begin\
host    orchard    grafana    127.0.0.1/32    scram-sha-256\
host    all        all        0.0.0.0/0       reject\
host    all        all        ::/0            reject\
# orchard tcp end' "$hba"
}

# pg_up: PostgreSQL running and accepting connections, the database there.
# Before the supervisor runs, pg_ctl starts it (the supervisor then adopts
# it: --adopt below); while the supervisor runs, it is the one to start it.
pg_up() {
	local sv i
	if ! as_pg "$PGBIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then
		pg_hba_tcp
		if sv=$(pid_alive supervise); then
			say "postgres is down; asking orchard-supervise (pid $sv) to start it"
			kill -HUP "$sv"
		else
			say "starting postgres"
			as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -l "$LOG/postgres.log" -w -t 60 \
				-o "-c unix_socket_directories=$RUN -c port=$PGPORT -c listen_addresses=${PG_TCP:+127.0.0.1}" \
				start >/dev/null ||
				die "PostgreSQL did not start; see $LOG/postgres.log"
		fi
	fi
	for ((i = 0; i < 600; i++)); do
		"$PGBIN/psql" -h "$RUN" -U orchard -d postgres -XAtqc "SELECT 1" >/dev/null 2>&1 && break
		sleep 0.1
	done
	[ "$i" -lt 600 ] || die "PostgreSQL does not accept connections; see $LOG/postgres.log"
	if [ -z "$("$PGBIN/psql" -h "$RUN" -U orchard -d postgres -XAtqc \
		"SELECT 1 FROM pg_database WHERE datname = 'orchard'")" ]; then
		"$PGBIN/createdb" -h "$RUN" -U orchard orchard
	fi
}

# What is left after the supervisor (or its absence): a postmaster that
# pg_ctl started.
pg_stop() {
	[ -n "$PGBIN" ] || find_pgbin
	if [ -f "$PGDATA/postmaster.pid" ] &&
		as_pg "$PGBIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then
		say "stopping postgres"
		as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -m fast -w -t 60 stop >/dev/null ||
			say "pg_ctl stop failed; see $LOG/postgres.log"
	fi
	rm -f "$RUN/postgres.pid"
}

psql_q() {
	"$PGBIN/psql" -h "$RUN" -U orchard -d orchard -XAtqv ON_ERROR_STOP=1 -c "$1"
}

# ---- schema, first tenant and key ---------------------------------------

need_bin() {
	local b
	for b in "$@"; do
		[ -x "$BIN/$b" ] || die "$BIN/$b is missing: run make first"
	done
}

db_setup() {
	ORCHARD_DATABASE_URL=$DB_URL "$BIN/orchard-admin" migrate >>"$LOG/admin.log" 2>&1 ||
		die "orchard-admin migrate failed; see $LOG/admin.log"
	if [ -s "$VAR/admin.key" ]; then
		return 0
	fi
	if [ -z "$(psql_q "SELECT 1 FROM tenants WHERE name = 'default'")" ]; then
		ORCHARD_DATABASE_URL=$DB_URL "$BIN/orchard-admin" tenant create default \
			>>"$LOG/admin.log" 2>&1 ||
			die "orchard-admin tenant create failed; see $LOG/admin.log"
	fi
	local key
	key=$(ORCHARD_DATABASE_URL=$DB_URL "$BIN/orchard-admin" key create \
		--tenant default --admin 2>>"$LOG/admin.log") ||
		die "orchard-admin key create failed; see $LOG/admin.log"
	key=$(printf '%s' "$key" | tr -d '[:space:]')
	[ -n "$key" ] || die "orchard-admin key create printed no key"
	(umask 077 && printf '%s\n' "$key" >"$VAR/admin.key.tmp")
	mv "$VAR/admin.key.tmp" "$VAR/admin.key"
	say "created tenant \"default\" and an admin key ($VAR/admin.key)"
}

# With ORCHARD_PG_TCP_PORT: the read-only role Grafana logs in as over TCP.
# It may read the dash_* views (which run with their owner's rights) and
# nothing else; its password is in var/grafana-db-password (0600). The SQL
# goes through stdin, so the password is on no command line.
grafana_role() {
	[ -n "$PG_TCP" ] || return 0
	if [ ! -s "$VAR/grafana-db-password" ]; then
		(umask 077 && openssl rand -hex 24 >"$VAR/grafana-db-password.tmp")
		mv "$VAR/grafana-db-password.tmp" "$VAR/grafana-db-password"
	fi
	"$PGBIN/psql" -h "$RUN" -U orchard -d orchard -XAtqv ON_ERROR_STOP=1 >/dev/null <<-EOF ||
		DO \$\$ BEGIN
			IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'grafana') THEN
				CREATE ROLE grafana;
			END IF;
		END \$\$;
		ALTER ROLE grafana LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS
			PASSWORD '$(tr -dc 0-9a-f <"$VAR/grafana-db-password")';
		GRANT CONNECT ON DATABASE orchard TO grafana;
		GRANT USAGE ON SCHEMA public TO grafana;
		DO \$\$ DECLARE v record; BEGIN
			FOR v IN SELECT viewname FROM pg_views
				WHERE schemaname = 'public' AND viewname LIKE 'dash\\_%' LOOP
				EXECUTE format('GRANT SELECT ON %I TO grafana', v.viewname);
			END LOOP;
		END \$\$;
	EOF
		die "creating the grafana role failed"
}

# ---- TLS ----------------------------------------------------------------

tls_setup() {
	if [ -s "$TLS/ca.crt" ] && [ -s "$TLS/server.crt" ] && [ -s "$TLS/server.key" ]; then
		return 0
	fi
	say "creating a local CA and server certificate in $TLS"
	(
		umask 077
		cd "$TLS"
		openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
			-keyout ca.key -out ca.crt -days 3650 -subj "/CN=Orchard local CA" \
			-addext "basicConstraints=critical,CA:TRUE" \
			-addext "keyUsage=critical,keyCertSign,cRLSign" \
			-addext "subjectKeyIdentifier=hash" 2>/dev/null
		openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
			-keyout server.key -out server.csr -subj "/CN=localhost" 2>/dev/null
		cat >server.ext <<-EOF
			basicConstraints=critical,CA:FALSE
			keyUsage=critical,digitalSignature,keyEncipherment
			extendedKeyUsage=serverAuth
			subjectAltName=DNS:localhost,IP:127.0.0.1
			subjectKeyIdentifier=hash
			authorityKeyIdentifier=keyid,issuer
		EOF
		openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
			-out server.crt -days 825 -extfile server.ext 2>/dev/null
		rm -f server.csr server.ext ca.srl
		chmod 0644 ca.crt server.crt
	) || die "creating TLS material failed"
}

# ---- nginx --------------------------------------------------------------

sed_escape() { printf '%s' "$1" | sed -e 's/[\\|&]/\\&/g'; }

render_nginx() {
	local daemon=$1 user_line out workers=${ORCHARD_NGINX_WORKERS:-auto}
	[[ $workers =~ ^(auto|[1-9][0-9]{0,2})$ ]] ||
		die "ORCHARD_NGINX_WORKERS \"$workers\" must be auto or a number"
	if [ "$ROOT" -eq 1 ]; then
		user_line="user $NGINX_USER $(id -gn "$NGINX_USER");"
	else
		user_line="# not root: workers run as $(id -un)"
	fi
	cp "$REPO/nginx/fastcgi_common.conf" "$REPO/nginx/fastcgi_request.conf" "$NGX/"
	out=$NGX/orchard.conf
	sed -e "s|@USER_LINE@|$(sed_escape "$user_line")|g" \
		-e "s|@DAEMON@|$daemon|g" \
		-e "s|@WORKERS@|$workers|g" \
		-e "s|@PREFIX@|$(sed_escape "$NGX")|g" \
		-e "s|@RUN_DIR@|$(sed_escape "$RUN")|g" \
		-e "s|@LOG_DIR@|$(sed_escape "$LOG")|g" \
		-e "s|@PORT@|$PORT|g" \
		-e "s|@API_SOCKET@|$(sed_escape "$API_SOCKET")|g" \
		-e "s|@API_AUTH_SOCKET@|$(sed_escape "$API_AUTH_SOCKET")|g" \
		-e "s|@TLS_CERT@|$(sed_escape "$TLS/server.crt")|g" \
		-e "s|@TLS_KEY@|$(sed_escape "$TLS/server.key")|g" \
		"$REPO/nginx/orchard.conf.in" >"$out.tmp"
	if grep -q '@[A-Z_]*@' "$out.tmp"; then
		die "unrendered placeholder in $out.tmp: $(grep -o '@[A-Z_]*@' "$out.tmp" | head -n1)"
	fi
	mv "$out.tmp" "$out"
}

# One checksum over everything the running nginx has read.
nginx_inputs_sum() {
	cat "$NGX"/orchard.conf "$NGX"/fastcgi_*.conf "$TLS/server.crt" "$TLS/server.key" |
		sha256sum | cut -d' ' -f1
}

nginx_cmd() {
	"$NGINX_BIN" -p "$NGX/" -c "$NGX/orchard.conf" -e "$LOG/nginx-error.log" "$@"
}

# A process that is gone or a zombie (nobody may have reaped it: PID 1 of
# a container need not).
pid_dead() {
	[ ! -d "/proc/$1" ] || [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" = Z ]
}

# Whether process group $1 has a member that is not a zombie.
group_alive() {
	local p
	for p in $(pgrep -g "$1"); do
		pid_dead "$p" || return 0
	done
	return 1
}

# A master killed outright (SIGKILL, OOM killer) leaves its workers
# running with the listening socket, so a new nginx cannot bind and down
# would not find them. They are in the dead master's process group (the
# supervisor starts each process in a session of its own), whose id no new
# process can take while it has members: kill whatever is left in it. (The
# supervisor does the same when it sees the master die; this is for a
# master that died while no supervisor ran.)
nginx_orphans_kill() {
	local pgid i
	[ -f "$RUN/nginx.pid" ] || return 0
	read -r pgid _ <"$RUN/nginx.pid" 2>/dev/null || true
	[[ $pgid =~ ^[0-9]+$ ]] && pid_dead "$pgid" || return 0
	group_alive "$pgid" || return 0
	say "killing the workers left by a dead nginx master (process group $pgid)"
	kill -KILL -- "-$pgid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		group_alive "$pgid" || return 0
		sleep 0.1
	done
}

# nginx_prepare: render and check the config; a running nginx re-reads it
# when it changed. (The supervisor starts nginx with daemon off, so the
# master is the process it forked.)
nginx_prepare() {
	render_nginx off
	local out pid sum
	out=$(nginx_cmd -t -q 2>&1) || {
		printf '%s\n' "$out" | tee -a "$LOG/nginx-error.log" >&2
		die "nginx rejected $NGX/orchard.conf"
	}
	sum=$(nginx_inputs_sum)
	if pid=$(pid_alive nginx); then
		# A reload makes the old workers drop every idle keep-alive
		# connection, which a client may be reusing that very moment: only
		# reload when what nginx reads has changed (port, paths, TLS files).
		if [ "$sum" = "$(cat "$NGX/loaded.sum" 2>/dev/null)" ]; then
			say "nginx already running (pid $pid), config unchanged"
			return 0
		fi
		say "nginx already running (pid $pid); reloading its changed config"
		kill -HUP "$pid"
		printf '%s\n' "$sum" >"$NGX/loaded.sum"
		return 0
	fi
	# A master killed while no supervisor ran left its workers.
	nginx_orphans_kill
	printf '%s\n' "$sum" >"$NGX/loaded.sum"
}

# ---- orchard processes --------------------------------------------------

# The agent that sandboxes run, installed when no controller runs.
agent_install() {
	pid_alive controller >/dev/null && return 0
	# Sandboxes run as an unprivileged user who may not reach the checkout
	# (say, under /root); the var dir is checked to be reachable, so the
	# agent is copied there (atomically: running sandboxes keep theirs).
	mkdir -p "$VAR/bin"
	cp "$BIN/orchard-agent" "$VAR/bin/.orchard-agent.tmp"
	chmod 0755 "$VAR/bin" "$VAR/bin/.orchard-agent.tmp"
	mv -f "$VAR/bin/.orchard-agent.tmp" "$VAR/bin/orchard-agent"
	# Sandboxes of imported images (which may have no libc) run the
	# self-contained bundle; built beside it and swapped in whole.
	rm -rf "$VAR/bin/.orchard-agent.bundle.tmp" "$VAR/bin/.orchard-agent.bundle.old"
	ORCHARD_AGENT_BIN="$VAR/bin/orchard-agent" "$REPO/scripts/agent-bundle.sh" \
		"$VAR/bin/.orchard-agent.bundle.tmp" >/dev/null ||
		die "could not build the agent bundle (scripts/agent-bundle.sh)"
	[ ! -e "$VAR/bin/orchard-agent.bundle" ] ||
		mv "$VAR/bin/orchard-agent.bundle" "$VAR/bin/.orchard-agent.bundle.old"
	mv "$VAR/bin/.orchard-agent.bundle.tmp" "$VAR/bin/orchard-agent.bundle"
	rm -rf "$VAR/bin/.orchard-agent.bundle.old"
	mkdir -p "$VAR/images"
}

# write_start NAME LOGFILE CMD...: VAR/supervise/NAME.start, the script
# orchard-supervise runs to start NAME: it appends its output to LOGFILE
# and execs CMD, so the supervisor's child is the program itself.
write_start() {
	local name=$1 logfile=$2 f=$SUPERVISE/$1.start
	shift 2
	{
		echo "#!/bin/sh"
		echo "# Written by scripts/stack.sh up; run by orchard-supervise."
		printf 'exec >>%q 2>&1 </dev/null\n' "$logfile"
		printf 'exec'
		printf ' %q' "$@"
		echo
	} >"$f.tmp"
	chmod 0755 "$f.tmp"
	mv "$f.tmp" "$f"
}

start_scripts() {
	local pg
	mkdir -p "$SUPERVISE"
	chmod 0755 "$SUPERVISE"
	pg=("$PGBIN/postgres" -D "$PGDATA" -c "unix_socket_directories=$RUN" -c "port=$PGPORT"
		-c "listen_addresses=${PG_TCP:+127.0.0.1}")
	if [ "$ROOT" -eq 1 ]; then
		# setpriv execs (runuser would stay as the parent).
		pg=(setpriv --reuid=postgres --regid=postgres --init-groups -- "${pg[@]}")
	fi
	write_start postgres "$LOG/postgres.log" "${pg[@]}"
	write_start api "$LOG/api.log" env ORCHARD_DATABASE_URL="$DB_URL" \
		ORCHARD_API_SOCKET="$API_SOCKET" ORCHARD_API_AUTH_SOCKET="$API_AUTH_SOCKET" \
		ORCHARD_API_SOCKET_GROUP="$(id -gn "$NGINX_USER")" ORCHARD_API_PEER_UIDS="$NGINX_USER" \
		"$BIN/orchard-api"
	write_start controller "$LOG/controller.log" env ORCHARD_DATABASE_URL="$DB_URL" \
		ORCHARD_CONTROLLER_METRICS="$CTL_METRICS" "${CONTROLLER[@]}"
	write_start nginx "$LOG/nginx-error.log" "$NGINX_BIN" -p "$NGX/" -c "$NGX/orchard.conf" \
		-e "$LOG/nginx-error.log"
}

# supervise_up: orchard-supervise runs (docs/operations.md, "The
# supervisor"). A running one is told to start whatever is stopped; a new
# one adopts what still runs (its pid file names that very process) and
# starts the rest, in this order; down stops them in the reverse order.
supervise_up() {
	local pid i
	if pid=$(pid_alive supervise); then
		say "orchard-supervise running (pid $pid); starting whatever is stopped"
		kill -HUP "$pid"
		return 0
	fi
	say "starting orchard-supervise (postgres, orchard-api, orchard-controller, nginx on https://127.0.0.1:$PORT)"
	# Its own session, detached from the terminal and our stdio. bash
	# starts background commands with SIGINT and SIGQUIT ignored; env
	# restores them for the supervisor and so for what it starts.
	setsid env --default-signal=INT,QUIT "$BIN/orchard-supervise" --run-dir "$RUN" \
		--component postgres --start "$SUPERVISE/postgres.start" --stop INT --grace 60 --group \
		--adopt "$PGDATA/postmaster.pid" "$PGDATA" \
		--component api --start "$SUPERVISE/api.start" --grace 15 --group \
		--component controller --start "$SUPERVISE/controller.start" --grace 10 \
		--component nginx --start "$SUPERVISE/nginx.start" --stop QUIT --grace 10 --group \
		</dev/null >>"$LOG/supervise.log" 2>&1 &
	pid=$!
	for ((i = 0; i < 100; i++)); do
		pid_alive supervise >/dev/null && return 0
		[ -d "/proc/$pid" ] && ! pid_dead "$pid" || break
		sleep 0.05
	done
	tail -n 20 "$LOG/supervise.log" >&2 || true
	die "orchard-supervise did not start; see $LOG/supervise.log"
}

# gone NAME: NAME's process is not running, seen twice 0.2 s apart.
gone() {
	pid_alive "$1" >/dev/null && return 1
	sleep 0.2
	! pid_alive "$1" >/dev/null
}

# Every component running (the supervisor has started or adopted it) and
# /health answering through nginx and the api.
all_running() {
	local name
	for name in postgres api controller nginx; do
		pid_alive "$name" >/dev/null || return 1
	done
}

wait_healthy() {
	local i
	for ((i = 0; i < 300; i++)); do
		if all_running && curl -fsS --max-time 2 --cacert "$TLS/ca.crt" \
			"https://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
			return 0
		fi
		gone supervise && {
			tail -n 20 "$LOG/supervise.log" >&2 || true
			die "orchard-supervise exited; see $LOG/supervise.log"
		}
		sleep 0.2
	done
	tail -n 20 "$LOG/supervise.log" "$LOG/nginx-error.log" "$LOG/api.log" >&2 || true
	die "https://127.0.0.1:$PORT/health did not answer in 60 s; see $LOG/ (supervise.log says which process keeps exiting)"
}

write_env() {
	local key
	key=$(cat "$VAR/admin.key")
	(umask 077 && cat >"$VAR/env.tmp" <<-EOF
		# Written by scripts/stack.sh up; source it: . $VAR/env
		export ORCHARD_URL=https://127.0.0.1:$PORT
		export ORCHARD_API_KEY=$key
		export ORCHARD_CACERT=$TLS/ca.crt
		export ORCHARD_DATABASE_URL='$DB_URL'
		export ORCHARD_IMAGE_DIR=$VAR/images
	EOF
	# Where to scrape, not the setting (which would leak into stacks started
	# from a shell that sourced this file).
	[ -z "$CTL_METRICS" ] ||
		echo "export ORCHARD_CONTROLLER_METRICS_URL=http://$CTL_METRICS/metrics" >>"$VAR/env.tmp"
	[ -z "$PG_TCP" ] ||
		echo "export ORCHARD_GRAFANA_DATABASE_URL='host=127.0.0.1 port=$PG_TCP dbname=orchard user=grafana sslmode=disable'" >>"$VAR/env.tmp"
	)
	mv "$VAR/env.tmp" "$VAR/env"
	echo "$PORT" >"$VAR/port"
	echo "$CTL_METRICS" >"$VAR/controller-metrics"
	echo "$PG_TCP" >"$VAR/pg-tcp-port"
}

what_now() {
	local envf=$VAR/env stop="scripts/stack.sh down $VAR"
	if [ "$VAR" = "$REPO/var" ]; then
		envf=var/env
		stop="make down"
	fi
	cat <<-EOF

		Orchard is up at https://127.0.0.1:$PORT (logs in $LOG/).
		What now:
		  . $envf
		  bin/orchardctl create host --wait          # prints a sandbox id
		  bin/orchardctl exec ID -- echo hi
		  bin/orchardctl rm ID
		  curl --cacert \$ORCHARD_CACERT -H "X-API-Key: \$ORCHARD_API_KEY" \$ORCHARD_URL/sandboxes
		Stop it all with: $stop
	EOF
}

# ---- commands -----------------------------------------------------------

pick_port() {
	if [ -n "${ORCHARD_PORT:-}" ]; then
		PORT=$ORCHARD_PORT
	elif [ -s "$VAR/port" ]; then
		PORT=$(tr -dc 0-9 <"$VAR/port")
	else
		PORT=8443
	fi
	[[ $PORT =~ ^[0-9]+$ ]] && [ "$PORT" -ge 1 ] && [ "$PORT" -le 65535 ] ||
		die "ORCHARD_PORT \"$PORT\" is not a port number"
	# The controller's /metrics (docs/observability.md): off unless asked
	# for; remembered like the port ("" turns it off again).
	CTL_METRICS=${ORCHARD_CONTROLLER_METRICS-$(cat "$VAR/controller-metrics" 2>/dev/null || true)}
	[[ -z $CTL_METRICS || $CTL_METRICS =~ ^(127\.[0-9.]+|\[::1\]):[0-9]{1,5}$ ]] ||
		die "ORCHARD_CONTROLLER_METRICS \"$CTL_METRICS\" must be 127.0.0.1:PORT or [::1]:PORT"
}

cmd_up() {
	need_bin orchard-admin orchard-api orchard-controller orchard-agent orchard-supervise
	command -v openssl >/dev/null || die "openssl is missing (run scripts/deps.sh)"
	command -v curl >/dev/null || die "curl is missing (run scripts/deps.sh)"
	[ -x "$NGINX_BIN" ] || die "nginx is missing (run scripts/deps.sh)"
	find_pgbin
	pick_port
	make_dirs
	check_traversable
	pg_init
	start_scripts
	pg_up
	db_setup
	grafana_role
	tls_setup
	agent_install
	nginx_prepare
	supervise_up
	wait_healthy
	write_env
}

# Sandboxes outlive the controller by design, so down stops them here with
# the controller's own teardown (orchard-controller reap: the local driver's
# list_owned and destroy), once the controller itself has stopped.
reap_sandboxes() {
	[ -d "$STATE" ] || return 0
	"${CONTROLLER[@]}" reap --driver local >>"$LOG/controller.log" 2>&1 ||
		say "orchard-controller reap failed; see $LOG/controller.log"
}

# For status: processes whose command line names this stack's sandbox dir.
sandbox_pids() {
	grep -laF -f <(printf '%s\n' "$STATE/") /proc/[0-9]*/cmdline 2>/dev/null |
		sed -e 's|^/proc/||' -e 's|/cmdline$||' | grep -vx -e "$$" -e "$BASHPID" || true
}

# The supervisor stops its components (nginx, controller, api, postgres);
# what it no longer watched (it was killed) is stopped by pid file here.
cmd_down() {
	[ -d "$RUN" ] || { say "nothing to stop in $VAR"; return 0; }
	stop_pid supervise TERM 120
	nginx_orphans_kill
	stop_pid nginx QUIT 10
	stop_pid controller TERM 10
	stop_pid api TERM 15
	reap_sandboxes
	if [ -f "$PGDATA/PG_VERSION" ]; then
		pg_stop
	fi
	rm -f "$API_SOCKET" "$API_AUTH_SOCKET"
}

cmd_status() {
	local name pid rc=0
	for name in supervise postgres api controller nginx; do
		if pid=$(pid_alive "$name"); then
			printf '%-11s running (pid %s)\n' "$name" "$pid"
		else
			printf '%-11s stopped\n' "$name"
			rc=1
		fi
	done
	printf '%-11s %s\n' sandboxes "$(sandbox_pids | wc -w) processes"
	if [ -s "$VAR/port" ]; then
		PORT=$(cat "$VAR/port")
		if curl -fsS --max-time 2 --cacert "$TLS/ca.crt" \
			"https://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
			printf '%-11s https://127.0.0.1:%s/health answers\n' health "$PORT"
		else
			printf '%-11s https://127.0.0.1:%s/health does not answer\n' health "$PORT"
			rc=1
		fi
	fi
	return $rc
}

cmd_run() {
	trap 'echo >&2; say "stopping"; cmd_down; exit 0' INT TERM HUP
	trap 'cmd_down' EXIT
	cmd_up
	what_now
	say "running in the foreground (orchard-supervise restarts what dies); Ctrl-C stops everything"
	while pid_alive supervise >/dev/null; do
		sleep 1
	done
	say "orchard-supervise exited; stopping the rest (see $LOG/supervise.log)"
	exit 1
}

cmd_nginx_config() {
	pick_port
	make_dirs
	tls_setup
	render_nginx off
	nginx_cmd -t -q || die "nginx rejected $NGX/orchard.conf"
	echo "$NGX/orchard.conf"
}

case $CMD in
nginx-config) cmd_nginx_config ;;
up)
	cmd_up
	what_now
	;;
run) cmd_run ;;
down) cmd_down ;;
status) cmd_status ;;
*) usage ;;
esac
