"""Start and stop a whole Orchard stack for the integration tests.

The tests use exactly the production scripts: `scripts/stack.sh up DIR`
with ORCHARD_PORT set to a free port, and `scripts/stack.sh down DIR`.
Everything lives in a fresh temporary directory that is removed afterwards
(kept when ORCHARD_TEST_KEEP=1, to read the logs).
"""
import glob
import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import requests

import spec_check

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# ORCHARD_BIN_DIR picks another build (scripts/test.sh: bin-san/ for the
# sanitizer run); scripts/stack.sh reads the same variable.
BIN = os.environ.get("ORCHARD_BIN_DIR") or os.path.join(REPO, "bin")
STACK_SH = os.path.join(REPO, "scripts", "stack.sh")
PSQL = "/usr/bin/psql"

# Generous: a sandbox wait or a sanitizer build can be slow.
HTTP_TIMEOUT = 120


def free_port():
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sha256_file(path):
    """The hex SHA-256 of a file's contents, read in blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def make_tmpdir(prefix="orc-"):
    # /tmp and short: the path ends up in unix socket addresses (<= 107
    # bytes), agent sockets under <dir>/sandboxes/<id>/run/ included.
    d = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    os.chmod(d, 0o755)  # PostgreSQL, nginx workers and sandboxes must reach it
    return d


def as_user(user, *argv, timeout=60):
    """Run argv as a local user (conftest's local_user): CompletedProcess."""
    return subprocess.run(["runuser", "-u", user, "--"] + list(argv), capture_output=True,
                          text=True, timeout=timeout)


def log_tails(var, lines=30):
    """The ends of the stack's logs, for a failure message."""
    out = []
    logdir = os.path.join(var, "log")
    if not os.path.isdir(logdir):
        return ""
    for name in sorted(os.listdir(logdir)):
        path = os.path.join(logdir, name)
        try:
            with open(path, "rb") as f:
                tail = f.read().decode("utf-8", "replace").splitlines()[-lines:]
        except OSError:
            continue
        out.append("==> %s <==\n%s" % (path, "\n".join(tail)))
    return "\n".join(out)


def process_argv0(pid):
    """argv[0] of a process as bytes; b"" when it is gone (or a zombie)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().split(b"\0")[0]
    except OSError:
        return b""


def processes_referencing(text):
    """Pids of processes whose command line mentions text (not ourselves)."""
    found = []
    needle = text.encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if needle in cmdline:
            found.append((int(pid), cmdline.replace(b"\0", b" ").decode("utf-8", "replace")))
    return found


# A sanitizer report, or the last line of one (a controller's "sandbox log
# tail" of an agent that aborted).
SAN_REPORT = re.compile(rb"ERROR: [A-Za-z]+Sanitizer|runtime error: |SUMMARY: [A-Za-z]+Sanitizer"
                        rb"|==[0-9]+==ABORTING")


def save_sanitizer_reports(var, dest, patterns=("log/*.log", "sandboxes/*/agent.log")):
    """Copy the logs under var (glob patterns relative to it; by default the
    stack's logs and the sandbox agents' logs) that hold a sanitizer report
    into dest. The sanitized servers write theirs to ASAN_OPTIONS' log_path;
    agents in sandboxes get no environment, so their reports land in their
    log (scripts/test.sh's sanitizer stage)."""
    paths = []
    for pattern in patterns:
        paths += glob.glob(os.path.join(var, pattern))
    for path in paths:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        if SAN_REPORT.search(data):
            name = os.path.basename(var) + "-" + os.path.relpath(path, var).replace("/", "-")
            shutil.copyfile(path, os.path.join(dest, name))


def sanitizer_env():
    """The sanitizer options of this run, for a test that builds a child's
    environment from scratch (empty outside the sanitizer stage)."""
    return {k: v for k, v in os.environ.items() if k in ("ASAN_OPTIONS", "UBSAN_OPTIONS")}


class Stack:
    """A running stack: url, cacert, admin key, database url and helpers."""

    def __init__(self, var=None, env=None):
        """env: extra environment for stack.sh and so for the processes it
        starts (e.g. ORCHARD_API_THREADS for a stack with few threads)."""
        self.var = var or make_tmpdir()
        self.extra_env = dict(env or {})
        self.port = free_port()
        self.url = "https://127.0.0.1:%d" % self.port
        spec_check.register(self.url)
        self.cacert = os.path.join(self.var, "tls", "ca.crt")
        self.run_dir = os.path.join(self.var, "run")
        self.api_socket = os.path.join(self.run_dir, "api.sock")
        self.api_auth_socket = self.api_socket + ".auth"   # stack.sh's API_AUTH_SOCKET
        self.database_url = "host=%s user=orchard dbname=orchard" % self.run_dir
        self.admin_key = None
        self.started = False

    # -- lifecycle --------------------------------------------------------

    def _script(self, cmd, timeout):
        env = dict(os.environ, ORCHARD_PORT=str(self.port), **self.extra_env)
        return subprocess.run([STACK_SH, cmd, self.var], env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout)

    def up(self):
        self.started = True
        try:
            r = self._script("up", timeout=300)
        except subprocess.TimeoutExpired as e:
            raise RuntimeError("stack.sh up timed out\n%s\n%s" % (e.stderr, log_tails(self.var)))
        if r.returncode != 0:
            raise RuntimeError("stack.sh up failed (exit %d)\nstdout:\n%s\nstderr:\n%s\n%s" % (
                r.returncode, r.stdout, r.stderr, log_tails(self.var)))
        with open(os.path.join(self.var, "admin.key")) as f:
            self.admin_key = f.read().strip()
        return self

    def down(self):
        r = self._script("down", timeout=120)
        return r

    def start(self):
        """up() for a pytest fixture: a stack that cannot start is taken down
        and removed, and the test fails with why."""
        try:
            return self.up()
        except Exception as e:
            import pytest
            r = self.down()
            self.remove()
            pytest.fail("could not start the stack: %s\n(down: %s)" % (e, r.stderr), pytrace=False)

    def close(self):
        """down() and remove() at a fixture's end; a failing down is reported
        with the logs' ends."""
        r = self.down()
        if r.returncode != 0:
            print("stack.sh down failed: %s\n%s" % (r.stderr, log_tails(self.var)), file=sys.stderr)
        self.remove()

    def remove(self):
        if os.environ.get("ORCHARD_SAN_LOG_DIR"):
            save_sanitizer_reports(self.var, os.environ["ORCHARD_SAN_LOG_DIR"])
        if os.environ.get("ORCHARD_TEST_KEEP") == "1":
            return
        shutil.rmtree(self.var, ignore_errors=True)

    # -- helpers ----------------------------------------------------------

    def env(self, key=None):
        """Environment for orchardctl against this stack."""
        return dict(os.environ, ORCHARD_URL=self.url, ORCHARD_API_KEY=key or self.admin_key,
                    ORCHARD_CACERT=self.cacert, ORCHARD_DATABASE_URL=self.database_url)

    def session(self, key=None, bearer=False):
        """A requests session that trusts the stack's CA and sends a key."""
        s = requests.Session()
        s.verify = self.cacert
        # REQUESTS_CA_BUNDLE or a proxy in the environment must not apply.
        s.trust_env = False
        key = self.admin_key if key is None else key
        if key:
            if bearer:
                s.headers["Authorization"] = "Bearer " + key
            else:
                s.headers["X-API-Key"] = key
        s.request = _with_timeout(s.request)
        return s

    def anonymous(self):
        return self.session(key="")

    def psql(self, sql):
        """Run one SQL statement; rows as lists of strings."""
        r = subprocess.run([PSQL, self.database_url, "-XAtq", "-v", "ON_ERROR_STOP=1",
                            "-F", "\t", "-c", sql],
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise RuntimeError("psql failed: %s" % r.stderr)
        return [line.split("\t") for line in r.stdout.splitlines() if line != ""]

    def scalar(self, sql):
        rows = self.psql(sql)
        return rows[0][0] if rows else None

    def counts(self):
        """Row counts of the tables a request could write to."""
        row = self.psql("SELECT (SELECT count(*) FROM sandboxes), (SELECT count(*) FROM jobs),"
                        " (SELECT count(*) FROM tenants), (SELECT count(*) FROM api_keys)")[0]
        return dict(zip(("sandboxes", "jobs", "tenants", "api_keys"), map(int, row)))

    def admin(self, *args, check=True):
        r = subprocess.run([os.path.join(BIN, "orchard-admin")] + list(args),
                           env=self.env(), capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        if check and r.returncode != 0:
            raise RuntimeError("orchard-admin %s failed (%d): %s" % (
                " ".join(args), r.returncode, r.stderr))
        return r

    def new_tenant_key(self, tenant, admin=False):
        """Create tenant (if needed) and a key for it; returns the key."""
        if self.scalar("SELECT 1 FROM tenants WHERE name = '%s'" % tenant) is None:
            self.admin("tenant", "create", tenant)
        args = ["key", "create", "--tenant", tenant] + (["--admin"] if admin else [])
        key = self.admin(*args).stdout.strip()
        assert key and "\n" not in key, "key create must print only the key, got %r" % key
        return key

    def orchardctl(self, *args, key=None, timeout=HTTP_TIMEOUT):
        return subprocess.run([os.path.join(BIN, "orchardctl")] + list(args),
                              env=self.env(key), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def new_sandbox(self, session, timeout=90):
        """POST /sandboxes (image host), then wait until it is ready; its id."""
        r = session.post(self.url + "/sandboxes", json={"image": "host"})
        assert r.status_code in (200, 201), r.text
        sid = r.json()["sandbox_id"]
        self.wait_ready(session, sid, timeout=timeout)
        return sid

    def wait_ready(self, session, sandbox_id, timeout=90):
        """GET /sandboxes/{id}/wait; returns the final sandbox object."""
        r = session.get("%s/sandboxes/%s/wait" % (self.url, sandbox_id),
                        params={"timeout": timeout}, timeout=timeout + 30)
        assert r.status_code == 200, "wait: %d %s" % (r.status_code, r.text)
        return r.json()

    def wait_for(self, predicate, timeout=30, interval=0.2, what="condition"):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))
            time.sleep(interval)


def _with_timeout(request):
    def wrapped(method, url, **kw):
        kw.setdefault("timeout", HTTP_TIMEOUT)
        return request(method, url, **kw)
    return wrapped
