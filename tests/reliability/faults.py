"""The fault-injection harness: a load that remembers what the service
acknowledged, the processes to kill, and the checks that run afterwards.

Every exec of the load is `echo TOKEN >> /workspace/.runs; sleep S; echo
TOKEN` with a token of its own, so a command that ran twice shows its token
twice in the sandbox's file (read on the host, through the sandbox's host
directory), and a job's real result is known in advance (stdout "TOKEN\\n",
exit 0).

The checks after a fault (verify()):
  lost      acknowledged sandboxes, jobs, deletes and uploads whose row or
            event is missing from the database
  stuck     jobs still queued/running once the runner leases have run out
  wrong     finished jobs whose result is not their command's (succeeded
            with other output, failed without an error, not one exec.finish)
  twice     tokens found more than once in a sandbox's .runs file
  leaked    sandboxes the driver has (host dirs, bubblewrap processes) with
            no pending/ready row, or rows whose sandbox is gone
"""
import collections
import os
import re
import signal
import subprocess
import threading
import time
import uuid

import requests
from procs import alive

RUNS = "/workspace/.runs"
PG_BIN = "/usr/lib/postgresql/15/bin"
SWEEP_S = 2          # controller: ORCHARD_SWEEP_INTERVAL_MS default
# api/api.h: a dead runner's jobs fail once its lease (30 s, renewed every
# 10 s) has run out and a reap (every 10 s) has seen it.
LEASE_WAIT_S = 30 + 10 + 5
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def token():
    return "t" + uuid.uuid4().hex[:16]


def command(tok, sleep=0.3):
    return "echo %s >> %s; sleep %s; echo %s" % (tok, RUNS, sleep, tok)


def q(s):
    return "'" + s.replace("'", "''") + "'"


def qlist(items):
    return "(" + ",".join(q(i) for i in items) + ")" if items else "(NULL)"


# ---- processes ----------------------------------------------------------

def pid_of(stack, name):
    try:
        with open(os.path.join(stack.run_dir, name + ".pid")) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def kill(pid, sig=signal.SIGKILL, group=False):
    (os.killpg if group else os.kill)(pid, sig)
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(pid), "pid %d survived signal %d" % (pid, sig)


def children():
    """pid -> [child pids] over the whole machine."""
    kids = collections.defaultdict(list)
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids[ppid].append(int(d))
    return kids


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def agent_pid(stack, sid):
    """The host pid of the orchard-agent of a sandbox (below its watchdog)."""
    handle = stack.scalar("SELECT driver_handle FROM sandboxes WHERE id = %s" % q(sid))
    root = int(handle.split(":")[0])
    kids, todo = children(), [root]
    while todo:
        p = todo.pop()
        if "orchard-agent" in cmdline(p).split(" ")[0]:
            return p
        todo.extend(kids.get(p, ()))
    raise AssertionError("no agent process below %s for %s" % (handle, sid))


def state_dir(stack):
    return os.path.join(stack.var, "sandboxes")


def driver_view(stack):
    """(host dirs, ids with a bubblewrap process): what the local driver has."""
    sd = state_dir(stack)
    dirs = {d for d in os.listdir(sd) if DNS_LABEL.match(d) and os.path.isdir(os.path.join(sd, d))}
    procs = set()
    pat = re.compile(re.escape(sd + "/") + r"([a-z0-9-]+)/run")
    for d in os.listdir("/proc"):
        if d.isdigit():
            m = pat.search(cmdline(int(d)))
            if m:
                procs.add(m.group(1))
    return dirs, procs


def pg_restart(stack):
    """PostgreSQL's fast restart, as its owner (scripts/stack.sh's way)."""
    pgdata = os.path.join(stack.var, "pg")
    argv = [PG_BIN + "/pg_ctl", "-D", pgdata, "-l", os.path.join(stack.var, "log", "postgres.log"),
            "-m", "fast", "-w", "-t", "60", "restart"]
    if os.getuid() == 0:
        argv = ["runuser", "-u", "postgres", "--"] + argv
    r = subprocess.run(argv, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, "pg_ctl restart: %s %s" % (r.stdout, r.stderr)


def answers(stack, t0=None, bound=30):
    """Seconds from t0 (default: now) until an authenticated request is
    answered 200 again; fails past bound (the service must come back within
    seconds, but the machine may be loaded: the figure is reported)."""
    t0 = time.monotonic() if t0 is None else t0
    s = stack.session()
    while True:
        try:
            if s.get(stack.url + "/sandboxes", timeout=5).status_code == 200:
                return time.monotonic() - t0
        except requests.RequestException:
            pass
        assert time.monotonic() < t0 + bound, "the service did not answer within %d s" % bound
        time.sleep(0.1)


def restart(stack):
    """scripts/stack.sh up (starts whatever is down); seconds until the
    service answers again, stack.sh's own run included."""
    t0 = time.monotonic()
    stack.up()
    return answers(stack, t0)


# ---- the load -----------------------------------------------------------

class Ledger:
    """What the service acknowledged (a 2xx the client received)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.sandboxes = set()        # created (201/200)
        self.deleted = set()          # delete answered 200
        self.jobs = {}                # job_id -> (sandbox, token, answered job or None)
        self.tokens = {}              # every token sent -> sandbox
        self.uploads = {}             # path -> (sandbox, size)
        self.failures = collections.Counter()   # what the client saw otherwise

    def fail(self, what):
        with self.lock:
            self.failures[what] += 1


class Load:
    """Worker threads issuing requests until stop(); every answer goes into
    the ledger."""

    def __init__(self, stack, ledger):
        self.stack, self.ledger = stack, ledger
        self.stop_ev = threading.Event()
        self.threads = []

    def start(self, fn, *args):
        t = threading.Thread(target=self._guard, args=(fn,) + args, daemon=True)
        t.start()
        self.threads.append(t)

    def _guard(self, fn, *args):
        s = self.stack.session()
        while not self.stop_ev.is_set():
            try:
                fn(s, *args)
            except requests.RequestException as e:
                self.ledger.fail(type(e).__name__)
                time.sleep(0.1)

    def stop(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join(timeout=120)
            assert not t.is_alive(), "a load thread is stuck"

    # -- operations (one request each; called in a loop) --

    def exec_sync(self, s, sid, sleep=0.3):
        tok = token()
        with self.ledger.lock:
            self.ledger.tokens[tok] = sid
        r = s.post("%s/sandboxes/%s/exec" % (self.stack.url, sid),
                   json={"command": command(tok, sleep), "wait": True}, timeout=60)
        if r.status_code == 200:
            job = r.json()
            with self.ledger.lock:
                self.ledger.jobs[job["job_id"]] = (sid, tok, job)
        else:
            self.ledger.fail(r.status_code)
            time.sleep(0.1)

    def exec_async(self, s, sid, sleep=0.3):
        """wait: false with an Idempotency-Key, retried with the same key
        until answered: the retry must never run the command again."""
        tok = token()
        with self.ledger.lock:
            self.ledger.tokens[tok] = sid
        for _ in range(50):
            try:
                r = s.post("%s/sandboxes/%s/exec" % (self.stack.url, sid),
                           json={"command": command(tok, sleep)},
                           headers={"Idempotency-Key": tok}, timeout=30)
            except requests.RequestException as e:
                self.ledger.fail(type(e).__name__)
                r = None
            if r is not None and r.status_code == 200:
                with self.ledger.lock:
                    self.ledger.jobs[r.json()["job_id"]] = (sid, tok, None)
                break
            if r is not None:
                self.ledger.fail(r.status_code)
            if self.stop_ev.is_set():
                break
            time.sleep(0.2)
        time.sleep(0.2)

    def create(self, s, limit):
        with self.ledger.lock:
            if len(self.ledger.sandboxes) >= limit:
                done = True
            else:
                done = False
        if done:
            time.sleep(0.1)
            return
        r = s.post(self.stack.url + "/sandboxes", json={"image": "host"}, timeout=30)
        if r.status_code in (200, 201):
            with self.ledger.lock:
                self.ledger.sandboxes.add(r.json()["sandbox_id"])
        else:
            self.ledger.fail(r.status_code)
        time.sleep(0.05)

    def delete_some(self, s):
        """Delete half of the created sandboxes, as they come."""
        with self.ledger.lock:
            L = self.ledger
            todo = sorted(L.sandboxes - L.deleted)[:1] if len(L.deleted) < len(L.sandboxes) // 2 else []
        if not todo:
            time.sleep(0.1)
            return
        r = s.delete("%s/sandboxes/%s" % (self.stack.url, todo[0]), timeout=30)
        if r.status_code == 200:
            with self.ledger.lock:
                self.ledger.deleted.add(todo[0])
        else:
            self.ledger.fail(r.status_code)
        time.sleep(0.1)


def run_load(load, before_s, fault, after_s):
    """Let the load run, inject the fault, let it run on, stop it."""
    time.sleep(before_s)
    out = fault()
    time.sleep(after_s)
    load.stop()
    return out


# ---- the checks ---------------------------------------------------------

def new_ready_sandboxes(stack, s, n):
    ids = []
    for _ in range(n):
        r = s.post(stack.url + "/sandboxes", json={"image": "host"})
        assert r.status_code in (200, 201), r.text
        ids.append(r.json()["sandbox_id"])
    for sid in ids:
        assert stack.wait_ready(s, sid, timeout=60)["status"] == "ready"
    return ids


def loaded(stack, n):
    """The setup of a test under load: a session, n new ready sandboxes, a
    Ledger and a Load (not started yet) that records into it."""
    s = stack.session()
    boxes = new_ready_sandboxes(stack, s, n)
    ledger = Ledger()
    return s, boxes, ledger, Load(stack, ledger)


def wait_settled(stack, timeout):
    """No open job and no sandbox on its way (pending, deleting)."""
    def settled():
        return stack.scalar(
            "SELECT (SELECT count(*) FROM jobs WHERE status IN ('queued', 'running'))"
            " + (SELECT count(*) FROM sandboxes WHERE state IN ('pending', 'deleting'))") == "0"
    try:
        stack.wait_for(settled, timeout=timeout, interval=0.5, what="jobs and sandboxes to settle")
    except AssertionError:
        pass   # counted as stuck below


def runs_of(stack, sid):
    """Tokens in a sandbox's .runs file, read on the host (None: it is gone)."""
    try:
        with open(os.path.join(state_dir(stack), sid, "workspace", ".runs")) as f:
            return collections.Counter(f.read().split())
    except OSError:
        return None


def leaks(stack, timeout=SWEEP_S * 2 + 8):
    """Wait up to a couple of reconcile sweeps for the driver and the
    database to agree; return what still disagrees."""
    deadline = time.monotonic() + timeout
    while True:
        rows = {r[0] for r in stack.psql("SELECT id FROM sandboxes WHERE state IN ('pending', 'ready')")}
        dirs, procs = driver_view(stack)
        bad = sorted((dirs | procs) ^ rows)
        if not bad or time.monotonic() > deadline:
            return bad
        time.sleep(0.3)


def verify(stack, ledger, name, settle_s=20, runs=None, gone=(), recovered=None):
    """Every check of the module docstring; prints and returns the counts.
    runs: {sandbox: Counter} read before a sandbox was lost; gone: sandboxes
    the fault itself took (their .runs file went with them)."""
    wait_settled(stack, settle_s)
    L = ledger
    problems = []

    # lost: acknowledged but not in the database
    job_ids = sorted(L.jobs)
    rows = {r[0]: r for r in stack.psql(
        "SELECT j.id, j.sandbox_id, j.status, coalesce(j.exit_code::text, ''),"
        " encode(j.stdout, 'hex'), coalesce(j.error, ''),"
        " (SELECT count(*) FROM events e WHERE e.job_id = j.id AND e.kind = 'exec.accept'),"
        " (SELECT count(*) FROM events e WHERE e.job_id = j.id AND e.kind = 'exec.finish'),"
        " j.command->>0 FROM jobs j")}
    assert all(len(r) == 9 for r in rows.values())
    lost = [("job", j) for j in job_ids if j not in rows or rows[j][6] != "1"]
    created = {r[0]: r for r in stack.psql(
        "SELECT s.id, s.state, (SELECT count(*) FROM events e WHERE e.sandbox_id = s.id"
        " AND e.kind = 'sandbox.create'), (SELECT count(*) FROM events e"
        " WHERE e.sandbox_id = s.id AND e.kind = 'sandbox.delete') FROM sandboxes s")}
    lost += [("sandbox", i) for i in L.sandboxes if i not in created or created[i][2] != "1"]
    lost += [("delete", i) for i in L.deleted
             if i not in created or created[i][1] not in ("deleting", "deleted") or created[i][3] == "0"]
    for path, (sid, size) in L.uploads.items():
        n = stack.scalar("SELECT count(*) FROM events WHERE sandbox_id = %s AND kind = 'file.write'"
                         " AND data->>'path' = %s AND (data->>'size')::bigint = %d"
                         " AND (data->>'success')::boolean" % (q(sid), q(path), size))
        if n != "1":
            lost.append(("upload", path))
    if lost:
        problems.append("lost: %s" % lost[:10])

    # stuck and wrong results; a job answered finished must match its row
    stuck, wrong = [], []
    for jid, r in rows.items():
        _, sid, status, exit_code, stdout, error, _, finishes, _ = r
        stdout = bytes.fromhex(stdout).decode("utf-8", "replace")
        if status in ("queued", "running"):
            stuck.append(jid)
            continue
        if finishes != "1":
            wrong.append((jid, "exec.finish events: %s" % finishes))
        if status == "succeeded":
            tok = L.jobs.get(jid, (None, None))[1]
            if exit_code != "0" or (tok and stdout != tok + "\n"):
                wrong.append((jid, status, exit_code, stdout))
        elif not error:
            wrong.append((jid, status, "failed without an error"))
        answered = L.jobs.get(jid, (None, None, None))[2]
        if answered and answered["status"] in ("succeeded", "failed") and answered["status"] != status:
            wrong.append((jid, "answered %s, stored %s" % (answered["status"], status)))
    if stuck:
        problems.append("stuck: %s" % stuck[:10])
    if wrong:
        problems.append("wrong: %s" % wrong[:10])

    # run twice: every token at most once in its sandbox's file
    twice = []
    files = dict(runs or {})
    for sid in set(L.tokens.values()) - set(gone):
        c = runs_of(stack, sid)
        if c is not None:
            files[sid] = c
    for sid, c in files.items():
        twice += [t for t, n in c.items() if n > 1]
    # a succeeded job ran exactly once
    for jid, (sid, tok, _) in L.jobs.items():
        if jid in rows and rows[jid][2] == "succeeded" and sid in files and files[sid][tok] != 1:
            twice.append(tok)
    if twice:
        problems.append("run twice (or a succeeded job that never ran): %s" % twice[:10])

    leaked = leaks(stack)
    if leaked:
        problems.append("driver and database disagree on: %s" % leaked)

    counts = {
        "acknowledged_sandboxes": len(L.sandboxes), "acknowledged_deletes": len(L.deleted),
        "acknowledged_jobs": len(L.jobs), "acknowledged_uploads": len(L.uploads),
        "jobs_in_db": len(rows),
        "succeeded": sum(1 for r in rows.values() if r[2] == "succeeded"),
        "failed": sum(1 for r in rows.values() if r[2] == "failed"),
        "lost": len(lost), "stuck": len(stuck), "wrong": len(wrong), "run_twice": len(twice),
        "leaked": len(leaked), "client_errors": dict(L.failures),
    }
    if recovered is not None:
        counts["answered_again_s"] = round(recovered, 1)
    print("\nFAULT %-22s %s" % (name, " ".join("%s=%s" % kv for kv in counts.items())))
    assert not problems, "%s: %s" % (name, "; ".join(problems))
    return counts
