#!/bin/sh
# Entry point of the orchard/postgres image (docker-compose): Debian's
# PostgreSQL 15, initialised on first start as the official image is.
#
# Environment:
#   POSTGRES_PASSWORD  required: the password of POSTGRES_USER
#   POSTGRES_USER      the superuser (orchard's compose: orchard; default postgres)
#   POSTGRES_DB        a database created on first start (default POSTGRES_USER)
#   PGDATA             the data directory (/var/lib/postgresql/data)
# The server listens on all addresses of the container (the compose
# network; nothing publishes it), password (scram-sha-256) auth over TCP,
# trust only on its own unix socket.
set -eu

BIN=/usr/lib/postgresql/15/bin
PGDATA=${PGDATA:-/var/lib/postgresql/data}
USER_=${POSTGRES_USER:-postgres}
DB=${POSTGRES_DB:-$USER_}

die() { echo "postgres-entrypoint: $*" >&2; exit 1; }

[ -n "${POSTGRES_PASSWORD:-}" ] || die "set POSTGRES_PASSWORD"
for v in "$USER_" "$DB"; do
	case $v in *[!A-Za-z0-9_]*|"") die "POSTGRES_USER/POSTGRES_DB: letters, digits and _ only" ;; esac
done

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	pw=$(mktemp)
	trap 'rm -f "$pw"' EXIT
	printf '%s\n' "$POSTGRES_PASSWORD" >"$pw"
	"$BIN/initdb" -D "$PGDATA" -U "$USER_" --pwfile="$pw" -E UTF8 \
		--auth-local=trust --auth-host=scram-sha-256 >/dev/null
	rm -f "$pw"
	trap - EXIT
	echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
	if [ "$DB" != postgres ]; then
		echo "CREATE DATABASE \"$DB\" OWNER \"$USER_\";" |
			"$BIN/postgres" --single -j -D "$PGDATA" postgres >/dev/null
	fi
	echo "postgres-entrypoint: initialised $PGDATA (user $USER_, database $DB)" >&2
fi
exec "$BIN/postgres" -D "$PGDATA" -c listen_addresses='*' \
	-c unix_socket_directories=/run/postgresql "$@"
