"""orchard-admin migrate --wait: a database that is still starting (a
compose stack's PostgreSQL container, podman-compose ignoring depends_on
conditions) is waited for, boundedly; docs/deploy.md."""
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from ctl_harness import PGBIN, Postgres, run_as_postgres
from stack import BIN

ADMIN = os.path.join(BIN, "orchard-admin")
pytestmark = pytest.mark.skipif(not (os.path.exists(ADMIN) and os.path.exists(PGBIN)),
                                reason="needs bin/orchard-admin and PostgreSQL 15")


@pytest.fixture
def stopped_pg():
    """A PostgreSQL with an empty database (p.url), stopped: start() brings
    it back."""
    base = tempfile.mkdtemp(prefix="migwait-", dir="/tmp")
    os.chmod(base, 0o755)
    p = Postgres(base)
    subprocess.run(["createdb", "-h", p.sock, "-U", "orchard", "fresh"], check=True)
    p.url = p.url.replace("dbname=orchard", "dbname=fresh")
    p.stop()

    def start():
        run_as_postgres([PGBIN + "/pg_ctl", "-D", p.data, "-w", "-l", p.log, "-o",
                         "-k %s -c listen_addresses='' -c fsync=off" % p.sock, "start"])
    p.start = start
    try:
        yield p
    finally:
        subprocess.run(["runuser", "-u", "postgres", "--", PGBIN + "/pg_ctl", "-D", p.data,
                        "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def migrate(url, *args):
    return subprocess.Popen([ADMIN, "migrate"] + list(args),
                            env=dict(os.environ, ORCHARD_DATABASE_URL=url),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_migrate_waits_for_a_database_that_comes_up_later(stopped_pg):
    m = migrate(stopped_pg.url, "--wait", "120")
    time.sleep(3)
    assert m.poll() is None                     # still waiting, not failed
    stopped_pg.start()
    out, err = m.communicate(timeout=120)
    assert m.returncode == 0, (out, err)
    assert "applied 001_init.sql" in out and "waiting for the database" in err, (out, err)


def test_migrate_gives_up_after_the_wait(stopped_pg):
    m = migrate(stopped_pg.url, "--wait", "2")
    out, err = m.communicate(timeout=120)
    assert m.returncode != 0 and "cannot connect to the database" in err, (out, err)


def test_without_wait_it_fails_at_once(stopped_pg):
    m = migrate(stopped_pg.url)
    out, err = m.communicate(timeout=60)
    assert m.returncode != 0 and "waiting" not in err, (out, err)


@pytest.mark.parametrize("bad", ["-1", "3601", "soon", ""])
def test_a_bad_wait_is_a_usage_error(stopped_pg, bad):
    m = migrate(stopped_pg.url, "--wait", bad)
    out, err = m.communicate(timeout=60)
    assert m.returncode == 2 and "--wait" in err, (m.returncode, out, err)
