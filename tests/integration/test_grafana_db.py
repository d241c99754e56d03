"""How Grafana reaches the local stack's PostgreSQL (docs/observability.md):
ORCHARD_PG_TCP_PORT opens a listener on 127.0.0.1 that only the read-only
role grafana may use, with a password, to read the dash_* views.
"""
import os
import stat
import subprocess

import pytest

from stack import PSQL, Stack, free_port


@pytest.fixture(scope="module")
def tcp_stack():
    port = free_port()
    s = Stack(env={"ORCHARD_PG_TCP_PORT": str(port)})
    s.pg_port = port
    # The socket's name follows the port (one port per server).
    s.database_url = "host=%s port=%d user=orchard dbname=orchard" % (s.run_dir, port)
    s.start()
    yield s
    s.close()


def password(stack):
    with open(os.path.join(stack.var, "grafana-db-password")) as f:
        return f.read().strip()


def tcp_psql(stack, sql, user="grafana", pw=None, db="orchard"):
    conninfo = "host=127.0.0.1 port=%d dbname=%s user=%s sslmode=disable connect_timeout=10" % (
        stack.pg_port, db, user)
    env = dict(os.environ, PGPASSWORD=pw if pw is not None else password(stack))
    env.pop("PGPORT", None)
    return subprocess.run([PSQL, conninfo, "-XAtq", "-c", sql], env=env, capture_output=True,
                          text=True, timeout=60)


def test_the_default_stack_has_no_tcp_listener(stack):
    assert stack.scalar("SELECT current_setting('listen_addresses') = ''") == "t"


def test_grafana_reads_every_dash_view_over_tcp(tcp_stack):
    views = [r[0] for r in tcp_stack.psql(
        "SELECT viewname FROM pg_views WHERE schemaname = 'public' AND viewname LIKE 'dash\\_%'")]
    assert len(views) >= 7, views
    for v in views:
        r = tcp_psql(tcp_stack, "SELECT count(*) FROM %s" % v)
        assert r.returncode == 0, (v, r.stderr)
    assert tcp_stack.scalar("SHOW listen_addresses") == "127.0.0.1"


def test_grafana_reads_nothing_else(tcp_stack):
    for sql in ("SELECT * FROM api_keys", "SELECT * FROM sandboxes", "SELECT * FROM jobs",
                "CREATE TABLE t (x int)", "CREATE ROLE x"):
        r = tcp_psql(tcp_stack, sql)
        assert r.returncode != 0 and "permission denied" in r.stderr, (sql, r.stderr)
    assert tcp_psql(tcp_stack, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user") \
        .stdout.strip() == "f"


def test_every_other_tcp_login_is_refused(tcp_stack):
    r = tcp_psql(tcp_stack, "SELECT 1", pw="wrong")
    assert r.returncode != 0 and "password authentication failed" in r.stderr, r.stderr
    for user, db in (("orchard", "orchard"), ("postgres", "orchard"), ("grafana", "postgres")):
        r = tcp_psql(tcp_stack, "SELECT 1", user=user, db=db)
        assert r.returncode != 0 and "rejects connection" in r.stderr, (user, db, r.stderr)


def test_the_listener_is_loopback_only_and_the_password_private(tcp_stack):
    out = subprocess.run(["ss", "-Hltn", "sport = :%d" % tcp_stack.pg_port], capture_output=True,
                         text=True, timeout=30).stdout.split()
    local = [w for w in out if w.endswith(":%d" % tcp_stack.pg_port)]
    assert local == ["127.0.0.1:%d" % tcp_stack.pg_port], out
    mode = stat.S_IMODE(os.stat(os.path.join(tcp_stack.var, "grafana-db-password")).st_mode)
    assert mode == 0o600, oct(mode)
    with open(os.path.join(tcp_stack.var, "env")) as f:
        env = f.read()
    assert ("export ORCHARD_GRAFANA_DATABASE_URL='host=127.0.0.1 port=%d dbname=orchard user=grafana"
            " sslmode=disable'\n" % tcp_stack.pg_port) in env
    assert password(tcp_stack) not in env
    assert "port=%d" % tcp_stack.pg_port in env.split("ORCHARD_DATABASE_URL=")[1].split("\n")[0]


def test_the_stack_works_on_the_moved_socket(tcp_stack):
    r = tcp_stack.session().get(tcp_stack.url + "/sandboxes")
    assert r.status_code == 200, r.text
