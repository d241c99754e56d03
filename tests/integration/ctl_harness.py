"""What the controller test files share (test_controller.py for the local
driver, test_controller_k8s.py against the fake API server): the binaries
under test, a throwaway PostgreSQL with our migrations, and one
orchard-controller process with its log."""
import json
import os
import shutil
import signal
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# ORCHARD_TEST_CONTROLLER, ORCHARD_AGENT_BIN: run against another build (A/B
# measurements, the sanitizer stage's bin-san/).
CONTROLLER = os.environ.get("ORCHARD_TEST_CONTROLLER") or os.path.join(ROOT, "bin", "orchard-controller")
AGENT = os.environ.get("ORCHARD_AGENT_BIN") or os.path.join(ROOT, "bin", "orchard-agent")
PGBIN = "/usr/lib/postgresql/15/bin"
IS_ROOT = os.geteuid() == 0


def wait_for(pred, timeout=10.0, every=0.02, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(every)


def run_as_postgres(argv, **kw):
    if IS_ROOT:
        argv = ["runuser", "-u", "postgres", "--"] + argv
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw)


class Postgres:
    """A PostgreSQL 15 server on a unix socket under base (no TCP, fsync off),
    with database orchard migrated."""

    def __init__(self, base, max_connections=100):
        self.sock = os.path.join(base, "pgsock")
        self.data = os.path.join(base, "pgdata")
        os.mkdir(self.sock)
        os.mkdir(self.data)
        if IS_ROOT:
            shutil.chown(self.sock, "postgres")
            shutil.chown(self.data, "postgres")
        self.log = os.path.join(self.sock, "pg.log")
        run_as_postgres([PGBIN + "/initdb", "-D", self.data, "-U", "orchard",
                         "--auth=trust", "-E", "UTF8", "--no-sync"])
        run_as_postgres([PGBIN + "/pg_ctl", "-D", self.data, "-w", "-l", self.log, "-o",
                         "-k %s -c listen_addresses='' -c fsync=off -c max_connections=%d"
                         % (self.sock, max_connections), "start"])
        subprocess.run(["createdb", "-h", self.sock, "-U", "orchard", "orchard"], check=True)
        self.url = "host=%s user=orchard dbname=orchard" % self.sock
        mig = os.path.join(ROOT, "sql", "migrations")
        for f in sorted(os.listdir(mig)):
            if f.endswith(".sql"):
                self.psql_file(os.path.join(mig, f))

    def psql_file(self, path):
        subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", self.sock, "-U",
                        "orchard", "-d", "orchard", "-f", path],
                       check=True, capture_output=True, text=True)

    def sql(self, query):
        """Rows of a query as lists of strings (NULL -> None)."""
        r = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-F", "\x1f", "-P", "null=\x1e",
                            "-v", "ON_ERROR_STOP=1", "-h", self.sock, "-U", "orchard",
                            "-d", "orchard", "-c", query],
                           check=True, capture_output=True, text=True)
        return [[None if v == "\x1e" else v for v in line.split("\x1f")]
                for line in r.stdout.split("\n") if line]

    def stop(self):
        run_as_postgres([PGBIN + "/pg_ctl", "-D", self.data, "-m", "immediate", "stop"])


class Controller:
    """One orchard-controller process with its log file."""

    def __init__(self, env, logpath):
        self.logpath = logpath
        self.logf = open(logpath, "ab")
        self.offset = self.logf.tell()  # a restart appends to the same file
        self.proc = subprocess.Popen([CONTROLLER], env=env, stdout=self.logf,
                                     stderr=subprocess.STDOUT)

    def log(self):
        with open(self.logpath, "rb") as f:
            f.seek(self.offset)
            return f.read().decode(errors="replace")

    def log_lines(self):
        out = []
        for line in self.log().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()
        return self.proc.returncode
