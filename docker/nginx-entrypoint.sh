#!/bin/sh
# Entry point of the orchard-nginx image: render nginx/orchard.conf.in (the
# same template scripts/stack.sh renders for the local stack) for a
# container, then run nginx in the foreground.
#
#   nginx-entrypoint.sh            render, check, exec nginx
#   nginx-entrypoint.sh --check    render and `nginx -t` only
#
# Environment (defaults for the Kubernetes api pod and docker-compose):
#   ORCHARD_NGINX_LISTEN   address:port to listen on (0.0.0.0:8443)
#   ORCHARD_API_SOCKET     orchard-api's FastCGI socket (/run/orchard/api.sock)
#   ORCHARD_API_AUTH_SOCKET  its socket for the auth subrequests
#                          (ORCHARD_API_SOCKET plus ".auth", as the api's default)
#   ORCHARD_TLS_CERT, ORCHARD_TLS_KEY  (/etc/orchard/tls/tls.crt, tls.key)
#   ORCHARD_NGINX_WORKERS  worker_processes (auto)
#   ORCHARD_NGINX_PREFIX   writable directory for pid, temp files (/tmp/nginx)
#   ORCHARD_NGINX_TEMPLATES directory holding orchard.conf.in and
#                          fastcgi_*.conf (/etc/orchard/nginx)
#   ORCHARD_TLS_SELF_SIGNED=1  make a self-signed certificate and key when
#                          the files are missing (docker-compose only)
# Logs go to the container's stdout (access) and stderr (errors).
set -eu

LISTEN=${ORCHARD_NGINX_LISTEN:-0.0.0.0:8443}
SOCK=${ORCHARD_API_SOCKET:-/run/orchard/api.sock}
AUTH_SOCK=${ORCHARD_API_AUTH_SOCKET:-$SOCK.auth}
CERT=${ORCHARD_TLS_CERT:-/etc/orchard/tls/tls.crt}
KEY=${ORCHARD_TLS_KEY:-/etc/orchard/tls/tls.key}
WORKERS=${ORCHARD_NGINX_WORKERS:-auto}
PREFIX=${ORCHARD_NGINX_PREFIX:-/tmp/nginx}
TEMPLATES=${ORCHARD_NGINX_TEMPLATES:-/etc/orchard/nginx}
NGINX=${NGINX:-nginx}

die() { echo "nginx-entrypoint: $*" >&2; exit 1; }

# Values end up inside sed replacements and nginx's config: keep them plain.
for v in "$LISTEN" "$SOCK" "$AUTH_SOCK" "$CERT" "$KEY" "$PREFIX" "$TEMPLATES"; do
	case $v in *[!A-Za-z0-9._/:+-]*|"") die "unsafe value \"$v\"" ;; esac
done
case $WORKERS in auto|[1-9]|[1-9][0-9]|[1-9][0-9][0-9]) ;; *) die "bad ORCHARD_NGINX_WORKERS" ;; esac

mkdir -p "$PREFIX/tmp" "$PREFIX/run" "$PREFIX/log"
if [ "${ORCHARD_TLS_SELF_SIGNED:-0}" = 1 ] && [ ! -s "$CERT" ] && [ ! -s "$KEY" ]; then
	mkdir -p "$(dirname "$CERT")" "$(dirname "$KEY")"
	openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj /CN=localhost \
		-addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
		-keyout "$KEY" -out "$CERT" 2>/dev/null || die "openssl could not make a certificate"
	chmod 600 "$KEY"
	echo "nginx-entrypoint: made a self-signed certificate $CERT" >&2
fi
# The template writes its logs to files in LOG_DIR; point them at the
# container's output streams.
ln -sf /dev/stdout "$PREFIX/log/nginx-access.log"
ln -sf /dev/stderr "$PREFIX/log/nginx-error.log"
cp "$TEMPLATES/fastcgi_common.conf" "$TEMPLATES/fastcgi_request.conf" "$PREFIX/"

if [ "$(id -u)" = 0 ]; then
	if id www-data >/dev/null 2>&1; then user_line="user www-data;"; else user_line="user nobody nogroup;"; fi
else
	user_line="# not root: workers run as $(id -un 2>/dev/null || id -u)"
fi

# The template listens on 127.0.0.1 (the local stack); a container listens
# on ORCHARD_NGINX_LISTEN instead.
sed -e "s|@USER_LINE@|$user_line|g" \
	-e "s|@DAEMON@|off|g" \
	-e "s|@WORKERS@|$WORKERS|g" \
	-e "s|@PREFIX@|$PREFIX|g" \
	-e "s|@RUN_DIR@|$PREFIX/run|g" \
	-e "s|@LOG_DIR@|$PREFIX/log|g" \
	-e "s|listen 127\.0\.0\.1:@PORT@|listen $LISTEN|g" \
	-e "s|@API_SOCKET@|$SOCK|g" \
	-e "s|@API_AUTH_SOCKET@|$AUTH_SOCK|g" \
	-e "s|@TLS_CERT@|$CERT|g" \
	-e "s|@TLS_KEY@|$KEY|g" \
	"$TEMPLATES/orchard.conf.in" >"$PREFIX/orchard.conf.tmp"
if grep -q '@[A-Z_]*@' "$PREFIX/orchard.conf.tmp"; then
	die "unrendered placeholder: $(grep -o '@[A-Z_]*@' "$PREFIX/orchard.conf.tmp" | head -n1)"
fi
mv "$PREFIX/orchard.conf.tmp" "$PREFIX/orchard.conf"

"$NGINX" -t -q -p "$PREFIX/" -c "$PREFIX/orchard.conf" -e /dev/stderr
[ "${1:-}" = "--check" ] && exit 0
exec "$NGINX" -p "$PREFIX/" -c "$PREFIX/orchard.conf" -e /dev/stderr
