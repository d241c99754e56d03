"""Black-box tests of bin/orchard-controller with the local driver.

A throwaway PostgreSQL cluster (own data dir and unix socket under
/tmp/ctl-*), the migrations applied with psql, and the real
bin/orchard-controller and bin/orchard-agent launching real bubblewrap
sandboxes. Rows are inserted and changed with psql the way orchard-api
does it (state 'pending' with an agent_token; 'deleting' on delete).
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

import procs

from stack import process_argv0, sanitizer_env, save_sanitizer_reports

from ctl_harness import AGENT, CONTROLLER, IS_ROOT, PGBIN, Controller, Postgres, wait_for

SWEEP_MS = 300

pytestmark = pytest.mark.skipif(
    not (os.path.exists(CONTROLLER) and os.path.exists(AGENT) and shutil.which("bwrap")
         and os.path.exists(PGBIN)),
    reason="needs bin/orchard-controller, bin/orchard-agent, bwrap and PostgreSQL 15")


class Env:
    def __init__(self):
        self.base = tempfile.mkdtemp(prefix="ctl-", dir="/tmp")
        os.chmod(self.base, 0o711)  # the sandbox uid must reach the state dir
        self.state = os.path.join(self.base, "state")
        self.pg = Postgres(self.base, max_connections=50)
        self.tenant = self.pg.sql("INSERT INTO tenants (name) VALUES ('t1') RETURNING id")[0][0]
        self.ctl = None
        self.others = []

    def env(self, **extra):
        e = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "ORCHARD_DATABASE_URL": self.pg.url,
            "ORCHARD_STATE_DIR": self.state,
            "ORCHARD_AGENT_BIN": AGENT,
            "ORCHARD_SWEEP_INTERVAL_MS": str(SWEEP_MS),
            "ORCHARD_LOG_LEVEL": "debug",
            # Room for the bursts below (40 x 500m) on a 2-core host:
            # admission is test_admission.py's subject, not this file's.
            "ORCHARD_CPU_OVERCOMMIT": "64",
        }
        e.update(sanitizer_env())
        e.update(extra)
        return e

    def start(self, name="controller", wait_leader=True, **extra):
        c = Controller(self.env(**extra), os.path.join(self.base, name + ".log"))
        if wait_leader:
            wait_for(lambda: "holding the controller lock" in c.log() or c.proc.poll() is not None,
                     what="leadership")
            assert c.proc.poll() is None, c.log()
        return c

    def insert(self, image="host", block_network=True, timeout=60, sid=None, ttl=None,
               idle=None, cpu_millis=1000, memory_bytes=536870912):
        sid = sid or "t-" + uuid.uuid4().hex[:12]
        token = uuid.uuid4().hex + uuid.uuid4().hex
        self.pg.sql(
            "INSERT INTO sandboxes (id, tenant_id, image, cpu, memory, cpu_millis, memory_bytes,"
            " block_network, timeout_seconds, ttl_seconds, idle_timeout_seconds, agent_token)"
            " VALUES ('%s', %s, '%s', '%dm', '%d', %d, %d, %s, %d, %s, %s, '%s')"
            % (sid, self.tenant, image, cpu_millis, memory_bytes, cpu_millis, memory_bytes,
               "true" if block_network else "false", timeout,
               "NULL" if ttl is None else int(ttl), "NULL" if idle is None else int(idle), token))
        return sid, token

    def row(self, sid):
        rows = self.pg.sql(
            "SELECT state, state_message, driver_handle, agent_address, ready_at IS NOT NULL,"
            " agent_token FROM sandboxes WHERE id = '%s'" % sid)
        if not rows:
            return None
        k = ("state", "state_message", "driver_handle", "agent_address", "has_ready_at", "token")
        return dict(zip(k, rows[0]))

    def wait_state(self, sid, states, timeout=10.0):
        if isinstance(states, str):
            states = (states,)
        holder = {}

        def check():
            holder["row"] = self.row(sid)
            return holder["row"] and holder["row"]["state"] in states
        try:
            wait_for(check, timeout=timeout, what="%s in %s" % (sid, states))
        except AssertionError:
            raise AssertionError("%s: last row %r\n--- controller log tail ---\n%s"
                                 % (sid, holder.get("row"), self.ctl.log()[-3000:] if self.ctl else ""))
        return holder["row"]

    def set_state(self, sid, state):
        self.pg.sql("UPDATE sandboxes SET state = '%s', deleted_at = now() WHERE id = '%s'"
                    % (state, sid))

    def sandbox_dir(self, sid):
        return os.path.join(self.state, sid)

    def our_bwrap_pids(self):
        """Host pids of bubblewrap processes of this test's state dir."""
        pids = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    cmd = f.read().split(b"\0")
            except OSError:
                continue
            if cmd and cmd[0].endswith(b"bwrap") and any(
                    a.startswith(self.state.encode() + b"/") for a in cmd):
                pids.append(int(d))
        return pids

    def cgroup_bases(self):
        """Every cgroup base our controllers logged (one per controller)."""
        bases = set()
        for name in os.listdir(self.base):
            if not name.endswith(".log"):
                continue
            with open(os.path.join(self.base, name), errors="replace") as f:
                for line in f:
                    if '"sandbox limits"' in line:
                        d = json.loads(line)
                        bases.update(d[k] for k in ("cpu", "memory", "pids")
                                     if d.get(k, "").startswith("/sys/fs/cgroup/"))
        return bases

    def remove_cgroups(self):
        """Sandbox cgroups are nested in ours: never leave them behind."""
        for base in self.cgroup_bases():
            if not os.path.isdir(base):
                continue
            for sub in os.listdir(base):
                d = os.path.join(base, sub)
                if not os.path.isdir(d):
                    continue
                for _ in range(200):
                    for pid in read1(os.path.join(d, "cgroup.procs")).split():
                        try:
                            os.kill(int(pid), signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    try:
                        os.rmdir(d)
                        break
                    except OSError:
                        time.sleep(0.01)
            try:
                os.rmdir(base)
            except OSError:
                pass

    def close(self):
        for c in [self.ctl] + self.others:
            if c:
                c.stop(signal.SIGKILL)
        for pid in self.our_bwrap_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.remove_cgroups()
        try:
            self.pg.stop()
        finally:
            time.sleep(0.2)
            if os.environ.get("ORCHARD_SAN_LOG_DIR"):
                save_sanitizer_reports(self.base, os.environ["ORCHARD_SAN_LOG_DIR"],
                                       ("*.log", "state/*/agent.log"))
            shutil.rmtree(self.base, ignore_errors=True)


def pid_of(handle):
    m = re.fullmatch(r"(\d+):(\d+)", handle or "")
    assert m, "driver_handle %r is not <pid>:<starttime>" % handle
    return int(m.group(1)), int(m.group(2))


def children_of(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


def pid_gone(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def children_named(pid, suffix):
    return [c for c in children_of(pid) if process_argv0(c).endswith(suffix)]


def ns_init_of(handle):
    """The driver handle names the watchdog (orchard-watchdog); its child is
    bwrap's monitor (beside slirp4netns when block_network is false), whose
    child is the init of the sandbox's pid namespace (the agent: bwrap
    --as-pid-1)."""
    watchdog, _ = pid_of(handle)
    assert process_argv0(watchdog).endswith(b"/orchard-watchdog")
    outer = wait_for(lambda: children_named(watchdog, b"bwrap"), what="bwrap under the watchdog")[0]
    return wait_for(lambda: children_of(outer), what="the namespace init")[0]


def proc_alive(handle):
    pid, start = pid_of(handle)
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] not in ("Z", "X") and int(fields[19]) == start


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=5):
        super().__init__("agent", timeout=timeout)
        self.path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.path)
        self.sock = s


def agent_get(address, path, token=None):
    assert address.startswith("unix:"), address
    c = UnixHTTPConnection(address[5:])
    headers = {"Authorization": "Bearer " + token} if token else {}
    c.request("GET", path, headers=headers)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def agent_exec(address, token, command, timeout=30):
    """POST /exec on a sandbox's agent (docs/agent-protocol.md)."""
    assert address.startswith("unix:"), address
    c = UnixHTTPConnection(address[5:], timeout=timeout + 10)
    c.request("POST", "/exec", body=json.dumps({"command": command, "timeout_seconds": timeout}),
              headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    r = c.getresponse()
    body = r.read()
    c.close()
    assert r.status == 200, (r.status, body)
    return json.loads(body)


def limits_log(ctl):
    lines = [l for l in ctl.log_lines() if l.get("msg") == "sandbox limits"]
    assert lines, "no 'sandbox limits' line in the controller log"
    return lines[-1]


def sandbox_cgroups(env, sid):
    """The cgroup dirs the controller recorded for a sandbox."""
    with open(os.path.join(env.sandbox_dir(sid), "cgroup")) as f:
        return f.read().split()


def cgroup_of(dirs, ctrl):
    for d in dirs:
        if os.path.exists(os.path.join(d, {"cpu": "cpu.cfs_quota_us", "memory": "memory.limit_in_bytes",
                                           "pids": "pids.max"}[ctrl])) or \
                os.path.exists(os.path.join(d, {"cpu": "cpu.max", "memory": "memory.max",
                                                "pids": "pids.max"}[ctrl])):
            return d
    raise AssertionError("no %s cgroup among %r" % (ctrl, dirs))


def read1(path):
    with open(path) as f:
        return f.read().strip()


@pytest.fixture(scope="module")
def env():
    e = Env()
    try:
        e.ctl = e.start()
        yield e
    finally:
        e.close()


@pytest.fixture
def ready_sandbox(env):
    sid, token = env.insert()
    row = env.wait_state(sid, "ready")
    yield sid, token, row
    if (env.row(sid) or {}).get("state") in ("pending", "ready"):
        env.set_state(sid, "deleting")


# ---- configuration ----------------------------------------------------------

def test_help_exits_zero():
    r = subprocess.run([CONTROLLER, "--help"], capture_output=True, text=True, env={})
    assert r.returncode == 0
    assert "ORCHARD_STATE_DIR" in r.stdout and "--state-dir" in r.stdout


def test_missing_state_dir_is_an_error():
    r = subprocess.run([CONTROLLER], capture_output=True, text=True,
                       env={"ORCHARD_DATABASE_URL": "host=/nonexistent"})
    assert r.returncode != 0
    assert "ORCHARD_STATE_DIR" in r.stderr


def test_refuses_a_foreign_nonempty_state_dir(env):
    d = tempfile.mkdtemp(prefix="ctl-foreign-", dir="/tmp")
    try:
        open(os.path.join(d, "precious"), "w").close()
        os.mkdir(os.path.join(d, "looks-like-an-id"))
        c = Controller(env.env(ORCHARD_STATE_DIR=d), os.path.join(env.base, "foreign.log"))
        assert c.proc.wait(10) != 0
        assert "refusing to manage" in c.log()
        assert os.path.isdir(os.path.join(d, "looks-like-an-id"))
    finally:
        shutil.rmtree(d)


def test_state_dir_is_0711(env):
    assert os.stat(env.state).st_mode & 0o777 == 0o711


# ---- lifecycle --------------------------------------------------------------

def test_pending_becomes_ready_quickly(env):
    sid, token = env.insert()
    t0 = time.monotonic()
    row = env.wait_state(sid, "ready", timeout=10)
    elapsed = time.monotonic() - t0
    assert row["has_ready_at"] == "t"
    assert row["state_message"] is None
    assert row["agent_address"] == "unix:%s/%s/run/agent.sock" % (env.state, sid)
    assert proc_alive(row["driver_handle"])
    assert elapsed < 5, "took %.2fs" % elapsed
    events = env.pg.sql("SELECT kind FROM events WHERE sandbox_id = '%s' ORDER BY id" % sid)
    assert ["sandbox.ready"] in events


def test_agent_answers_health_with_the_token_only(env, ready_sandbox):
    sid, token, row = ready_sandbox
    status, body = agent_get(row["agent_address"], "/health", token)
    assert status == 200, body
    assert json.loads(body)["status"] == "ok"
    status, _ = agent_get(row["agent_address"], "/health")
    assert status == 401
    status, _ = agent_get(row["agent_address"], "/health", "x" * len(token))
    assert status == 401


def test_host_dir_layout_and_token_file(env, ready_sandbox):
    sid, token, row = ready_sandbox
    d = env.sandbox_dir(sid)
    # Root: the sandbox's own uid (controller/local_uid.c).
    want_uid = procs.sandbox_uid(env.state, sid) if IS_ROOT else os.geteuid()
    for sub in ("workspace", "tmp"):
        assert os.stat(os.path.join(d, sub)).st_uid == want_uid, sub
    st = os.stat(os.path.join(d, "run"))
    if IS_ROOT:   # sealed once the agent answered: see the next test
        assert st.st_uid == 0 and st.st_mode & 0o777 == 0o711
    else:
        assert st.st_uid == want_uid and st.st_mode & 0o777 == 0o700
    st = os.stat(os.path.join(d, "run", "token"))
    assert st.st_mode & 0o777 == 0o600 and st.st_uid == want_uid
    with open(os.path.join(d, "run", "token")) as f:
        assert f.read().strip() == token
    assert stat.S_ISSOCK(os.stat(os.path.join(d, "run", "agent.sock")).st_mode)


@pytest.mark.skipif(not IS_ROOT, reason="sealing needs root")
def test_sandbox_cannot_swap_its_agent_socket(env, ready_sandbox):
    """Otherwise a sandbox could point agent.sock at any socket on the host
    and the API, following the path, would connect there."""
    sid, token, row = ready_sandbox
    for cmd in ("rm /run/orchard/agent.sock", "ln -s /tmp /run/orchard/x",
                "mv /run/orchard/agent.sock /run/orchard/y", "chmod 777 /run/orchard"):
        r = agent_exec(row["agent_address"], token, cmd)
        assert r["exit_code"] != 0, (cmd, r)
    assert agent_get(row["agent_address"], "/health", token)[0] == 200


def sandbox_pids(ns_init):
    """Host pids in the sandbox's pid namespace (init and descendants)."""
    ns = os.readlink("/proc/%d/ns/pid" % ns_init)
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.readlink("/proc/%s/ns/pid" % d) == ns:
                    out.append(int(d))
            except OSError:
                pass
    return out


def test_sandbox_is_isolated(env, ready_sandbox):
    sid, token, row = ready_sandbox
    pid = ns_init_of(row["driver_handle"])
    for ns in ("pid", "user", "mnt", "ipc", "uts", "net"):
        assert os.readlink("/proc/%d/ns/%s" % (pid, ns)) != os.readlink("/proc/self/ns/" + ns), ns
    # The agent is the namespace's init (bwrap --as-pid-1).
    with open("/proc/%d/comm" % pid) as f:
        assert f.read().strip() == "orchard-agent"
    agent = [pid]
    with open("/proc/%d/status" % agent[0]) as f:
        status = f.read()
    assert re.search(r"^NSpid:\s+%d\s+1$" % pid, status, re.M), status
    assert re.search(r"^CapEff:\s+0+$", status, re.M), status
    assert re.search(r"^NoNewPrivs:\s+1$", status, re.M)
    uid = int(re.search(r"^Uid:\s+(\d+)", status, re.M).group(1))
    assert uid == (procs.sandbox_uid(env.state, sid) if IS_ROOT else os.geteuid())
    with open("/proc/%d/uid_map" % agent[0]) as f:
        assert f.read().split()[:3] == ["0", str(uid), "1"]
    # Its own session: not in the controller's session or process group.
    assert os.getsid(pid) != os.getsid(env.ctl.proc.pid)
    # Commands share the agent's uid but cannot read or trace it
    # (PR_SET_DUMPABLE 0): its memory holds the token and the results.
    r = agent_exec(row["agent_address"], token, "cat /proc/1/environ >/dev/null")
    assert r["exit_code"] != 0, r
    r = agent_exec(row["agent_address"], token, "cat /proc/self/environ >/dev/null")
    assert r["exit_code"] == 0, r


def interfaces(pid):
    with open("/proc/%d/net/dev" % pid) as f:
        return sorted(l.split(":")[0].strip() for l in f.readlines()[2:])


def test_block_network_leaves_only_loopback(env, ready_sandbox):
    sid, token, row = ready_sandbox
    pid = ns_init_of(row["driver_handle"])
    assert interfaces(pid) == ["lo"]


def test_unblocked_network_is_a_namespace_of_its_own_behind_slirp4netns(env):
    """block_network false: not the host's network namespace (issue 19
    item 6) but one with lo and slirp4netns's tap0, whose slirp4netns is
    the watchdog's child and dies with the sandbox."""
    sid, _ = env.insert(block_network=False)
    row = env.wait_state(sid, "ready")
    pid = ns_init_of(row["driver_handle"])
    assert os.readlink("/proc/%d/ns/pid" % pid) != os.readlink("/proc/self/ns/pid")
    assert os.readlink("/proc/%d/ns/net" % pid) != os.readlink("/proc/self/ns/net")
    assert interfaces(pid) == ["lo", "tap0"]
    watchdog, _ = pid_of(row["driver_handle"])
    slirp = children_named(watchdog, b"slirp4netns")
    assert len(slirp) == 1, children_of(watchdog)
    # slirp4netns itself stays in the host's namespace: that is the egress.
    assert os.readlink("/proc/%d/ns/net" % slirp[0]) == os.readlink("/proc/self/ns/net")
    env.set_state(sid, "deleting")
    env.wait_state(sid, "deleted")
    wait_for(lambda: pid_gone(slirp[0]), what="slirp4netns gone with its sandbox")


def test_delete_kills_the_sandbox_and_removes_its_dir(env):
    sid, token = env.insert()
    row = env.wait_state(sid, "ready")
    d = env.sandbox_dir(sid)
    # Something the sandbox left behind, including a symlink out of it.
    outside = os.path.join(env.base, "must-survive")
    with open(outside, "w") as f:
        f.write("x")
    os.makedirs(os.path.join(d, "workspace", "a", "b"))
    os.symlink(outside, os.path.join(d, "workspace", "a", "link"))
    os.symlink(env.base, os.path.join(d, "workspace", "dirlink"))
    os.chmod(os.path.join(d, "workspace", "a", "b"), 0)
    pids = sandbox_pids(ns_init_of(row["driver_handle"])) + [pid_of(row["driver_handle"])[0]]
    env.set_state(sid, "deleting")
    row = env.wait_state(sid, "deleted")
    assert not proc_alive(row["driver_handle"])
    for p in pids:
        assert not procs.alive(p), "pid %d survived" % p
    assert not os.path.exists(d)
    assert os.path.exists(outside) and os.path.isdir(env.base)
    assert ["sandbox.deleted"] in env.pg.sql(
        "SELECT kind FROM events WHERE sandbox_id = '%s'" % sid)


def test_deleting_a_pending_or_failed_row_finishes(env):
    sid, _ = env.insert(image="nope")
    env.wait_state(sid, "failed")
    env.set_state(sid, "deleting")
    env.wait_state(sid, "deleted")


def test_unknown_image_fails_with_a_clear_message(env):
    sid, _ = env.insert(image="ubuntu:22.04")
    row = env.wait_state(sid, "failed")
    assert 'image "ubuntu:22.04" is not available' in row["state_message"]
    assert '"host"' in row["state_message"]
    assert not os.path.exists(env.sandbox_dir(sid))


def test_ready_sandbox_whose_process_died_is_failed(env):
    sid, _ = env.insert()
    row = env.wait_state(sid, "ready")
    os.kill(ns_init_of(row["driver_handle"]), signal.SIGKILL)   # the sandbox dies
    row = env.wait_state(sid, "failed", timeout=5)
    assert row["state_message"] == "sandbox process exited"
    wait_for(lambda: not os.path.exists(env.sandbox_dir(sid)), what="dir removed")


def test_many_sandboxes_launch_fast(env):
    ids = [env.insert()[0] for _ in range(20)]
    wait_for(lambda: env.pg.sql(
        "SELECT count(*) FROM sandboxes WHERE state = 'ready' AND id IN (%s)"
        % ",".join("'%s'" % i for i in ids))[0][0] == str(len(ids)),
        timeout=20, what="20 sandboxes ready")
    lat = sorted(float(r[0]) for r in env.pg.sql(
        "SELECT extract(epoch FROM ready_at - created_at) * 1000 FROM sandboxes WHERE id IN (%s)"
        % ",".join("'%s'" % i for i in ids)))
    print("create->ready ms: p50 %.1f max %.1f" % (lat[len(lat) // 2], lat[-1]))
    assert lat[len(lat) // 2] < 2000
    for i in ids:
        env.set_state(i, "deleting")
    for i in ids:
        env.wait_state(i, "deleted")
    assert not any(os.path.exists(env.sandbox_dir(i)) for i in ids)


def test_a_burst_larger_than_a_launch_batch_is_recorded_row_by_row(env):
    """40 rows committed at once: more than one pass's launch batch (32),
    so the rest go to the next pass; handles and readiness are recorded
    in batches, but every row ends exactly as one transition would leave it."""
    ids = ["t-burst-%02d" % i for i in range(40)]
    env.pg.sql("INSERT INTO sandboxes (id, tenant_id, image, cpu, memory, cpu_millis, memory_bytes,"
               " block_network, timeout_seconds, agent_token) SELECT id, %s, 'host', '500m',"
               " '268435456', 500, 268435456, true, 60, md5(id) || md5(id)"
               " FROM unnest(ARRAY[%s]) AS id" % (env.tenant, ",".join("'%s'" % i for i in ids)))
    for i in ids:
        row = env.wait_state(i, "ready", timeout=60)
        assert row["state_message"] is None and row["has_ready_at"] == "t", row
        assert re.fullmatch(r"\d+:\d+", row["driver_handle"]) and row["agent_address"], row
    ev = env.pg.sql("SELECT sandbox_id, data::text FROM events WHERE kind = 'sandbox.ready'"
                    " AND sandbox_id LIKE 't-burst-%'")
    assert sorted(e[0] for e in ev) == ids                      # one each
    assert {e[1] for e in ev} == {'{"from": "pending"}'}
    for i in ids:
        env.set_state(i, "deleting")
    for i in ids:
        env.wait_state(i, "deleted", timeout=30)


# ---- orphans ----------------------------------------------------------------

def test_sandbox_without_a_row_is_removed(env):
    sid, _ = env.insert()
    row = env.wait_state(sid, "ready")
    env.pg.sql("DELETE FROM events WHERE sandbox_id = '%s'; DELETE FROM sandboxes WHERE id = '%s'"
               % (sid, sid))
    wait_for(lambda: not proc_alive(row["driver_handle"]) and not os.path.exists(
        env.sandbox_dir(sid)), timeout=5, what="orphan removed")


def test_stray_dir_is_removed_without_following_symlinks(env):
    outside = os.path.join(env.base, "keep-me")
    os.makedirs(outside, exist_ok=True)
    open(os.path.join(outside, "file"), "w").close()
    stray = env.sandbox_dir("stray-1")
    # Built under a name that is not an id, then moved in at once, so the
    # sweep never sees it half made.
    tmp = env.sandbox_dir(".building")
    os.makedirs(os.path.join(tmp, "workspace"))
    os.symlink(outside, os.path.join(tmp, "workspace", "out"))
    os.rename(tmp, stray)
    wait_for(lambda: not os.path.exists(stray), timeout=5, what="stray dir removed")
    assert os.path.exists(os.path.join(outside, "file"))


def test_failed_row_leaves_nothing_behind(env):
    # A row already failed (say by an operator) whose sandbox still runs.
    sid, _ = env.insert()
    row = env.wait_state(sid, "ready")
    env.pg.sql("UPDATE sandboxes SET state = 'failed' WHERE id = '%s'" % sid)
    wait_for(lambda: not proc_alive(row["driver_handle"]), timeout=5, what="sandbox stopped")


# ---- other agents: pending timeout, early exit --------------------------------

def restart_with_agent(env, agent_path, name):
    assert env.ctl.stop() == 0
    env.ctl = env.start(name=name, ORCHARD_AGENT_BIN=agent_path)


def write_script(env, name, body):
    path = os.path.join(env.base, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body + "\n")
    os.chmod(path, 0o755)
    return path


def test_pending_past_its_timeout_fails(env):
    hang = write_script(env, "hang-agent", "echo 'stand-in agent that never listens' >&2\nexec sleep 600")
    restart_with_agent(env, hang, "controller-hang")
    try:
        sid, _ = env.insert(timeout=3)
        wait_for(lambda: (env.row(sid) or {}).get("driver_handle"), what="launched")
        row = env.row(sid)
        handle = row["driver_handle"]
        assert row["state"] == "pending" and proc_alive(handle), (row, env.ctl.log()[-3000:])
        row = env.wait_state(sid, "failed", timeout=8)
        assert row["state_message"] == "sandbox did not become ready within 3 seconds"
        assert not proc_alive(handle)
        wait_for(lambda: not os.path.exists(env.sandbox_dir(sid)), what="dir removed")
    finally:
        restart_with_agent(env, AGENT, "controller")


def test_agent_that_exits_at_once_fails_fast(env):
    bad = write_script(env, "bad-agent", "echo 'stand-in agent: cannot start' >&2\nexit 3")
    restart_with_agent(env, bad, "controller-bad")
    try:
        sid, _ = env.insert(timeout=60)
        t0 = time.monotonic()
        row = env.wait_state(sid, "failed", timeout=5)
        assert time.monotonic() - t0 < 3
        assert row["state_message"].startswith("sandbox process exited before it became ready")
        assert "cannot start" in env.ctl.log()   # the log tail is reported
    finally:
        restart_with_agent(env, AGENT, "controller")


# ---- restart, re-adoption, leadership ---------------------------------------

def test_sigkill_leaves_sandboxes_running_and_restart_readopts(env):
    a, ta = env.insert()
    b, tb = env.insert()
    ra = env.wait_state(a, "ready")
    rb = env.wait_state(b, "ready")
    env.ctl.stop(signal.SIGKILL)
    time.sleep(0.3)
    assert proc_alive(ra["driver_handle"]) and proc_alive(rb["driver_handle"])
    assert agent_get(ra["agent_address"], "/health", ta)[0] == 200
    # Created while no controller runs: picked up on restart.
    c, tc = env.insert()
    env.ctl = env.start(name="controller-2")
    rc = env.wait_state(c, "ready")
    time.sleep(3 * SWEEP_MS / 1000.0)   # a few full sweeps
    for sid, before in ((a, ra), (b, rb)):
        now = env.row(sid)
        assert now["state"] == "ready" and now["driver_handle"] == before["driver_handle"], now
        assert proc_alive(before["driver_handle"])
    assert agent_get(rb["agent_address"], "/health", tb)[0] == 200
    assert agent_get(rc["agent_address"], "/health", tc)[0] == 200
    env.set_state(a, "deleting")
    env.wait_state(a, "deleted")
    assert not proc_alive(ra["driver_handle"]) and not os.path.exists(env.sandbox_dir(a))
    assert env.row(b)["state"] == "ready" and proc_alive(rb["driver_handle"])
    for sid in (b, c):
        env.set_state(sid, "deleting")
        env.wait_state(sid, "deleted")


def test_unblocked_sandboxes_keep_their_network_across_a_crash_and_lose_it_with_the_sandbox(env):
    """slirp4netns outlives a controller SIGKILL with its sandbox (egress
    keeps working), and ends with it afterwards: on delete, and when the
    restarted controller sweeps an orphan (no row)."""
    a, ta = env.insert(block_network=False)
    b, _ = env.insert(block_network=False)
    ra, rb = env.wait_state(a, "ready"), env.wait_state(b, "ready")
    slirp_a = children_named(pid_of(ra["driver_handle"])[0], b"slirp4netns")
    slirp_b = children_named(pid_of(rb["driver_handle"])[0], b"slirp4netns")
    assert len(slirp_a) == 1 and len(slirp_b) == 1
    env.ctl.stop(signal.SIGKILL)
    time.sleep(0.3)
    assert not pid_gone(slirp_a[0]) and not pid_gone(slirp_b[0])
    r = agent_exec(ra["agent_address"], ta, "cat /proc/net/dev")
    assert r["exit_code"] == 0 and "tap0:" in r["stdout"], r
    env.ctl = env.start(name="controller-net")
    time.sleep(3 * SWEEP_MS / 1000.0)
    assert env.row(a)["driver_handle"] == ra["driver_handle"] and not pid_gone(slirp_a[0])
    env.set_state(a, "deleting")
    env.wait_state(a, "deleted")
    wait_for(lambda: pid_gone(slirp_a[0]), what="slirp4netns of a deleted sandbox gone")
    env.pg.sql("DELETE FROM events WHERE sandbox_id = '%s'; DELETE FROM sandboxes WHERE id = '%s'"
               % (b, b))
    wait_for(lambda: pid_gone(slirp_b[0]) and not proc_alive(rb["driver_handle"]), timeout=10,
             what="slirp4netns of a swept orphan gone")


def test_without_a_working_slirp4netns_unblocked_creates_fail_and_never_share_the_host_network(env):
    assert env.ctl.stop() == 0
    try:
        env.ctl = env.start(name="controller-noslirp",
                            ORCHARD_SLIRP4NETNS=os.path.join(env.base, "missing-slirp4netns"))
        sid, _ = env.insert(block_network=False)
        row = env.wait_state(sid, "failed")
        assert "slirp4netns" in row["state_message"] and "missing" in row["state_message"], row
        assert not os.path.exists(env.sandbox_dir(sid))
        blocked, _ = env.insert()      # block_network true does not need it
        env.wait_state(blocked, "ready")
        env.set_state(blocked, "deleting")
        env.wait_state(blocked, "deleted")
        # One that starts but never brings the network up.
        assert env.ctl.stop() == 0
        env.ctl = env.start(name="controller-badslirp", ORCHARD_SLIRP4NETNS=shutil.which("false"))
        sid, _ = env.insert(block_network=False)
        row = env.wait_state(sid, "failed", timeout=30)
        assert "slirp4netns failed" in row["state_message"], row
    finally:
        env.ctl.stop()
        env.ctl = env.start(name="controller-slirp-again")


def test_restart_adopts_a_pending_sandbox_launched_before_the_crash(env):
    hang = write_script(env, "hang-agent2", "exec sleep 600")
    restart_with_agent(env, hang, "controller-hang2")
    sid, _ = env.insert(timeout=60)
    wait_for(lambda: (env.row(sid) or {}).get("driver_handle"), what="launched")
    handle = env.row(sid)["driver_handle"]
    env.ctl.stop(signal.SIGKILL)
    env.ctl = env.start(name="controller-3", ORCHARD_AGENT_BIN=hang)
    time.sleep(3 * SWEEP_MS / 1000.0)
    row = env.row(sid)
    assert row["state"] == "pending" and row["driver_handle"] == handle
    assert proc_alive(handle)
    assert len([l for l in env.ctl.log_lines() if l.get("msg") == "adopted a pending sandbox"]) == 1
    env.set_state(sid, "deleting")
    env.wait_state(sid, "deleted")
    assert not proc_alive(handle)
    restart_with_agent(env, AGENT, "controller")


def test_second_controller_is_standby_until_the_leader_goes(env):
    standby = env.start(name="standby", wait_leader=False)
    env.others.append(standby)
    wait_for(lambda: "standby" in standby.log(), what="standby log")
    sid, _ = env.insert()
    env.wait_state(sid, "ready")
    assert "holding the controller lock" not in standby.log()
    assert not [l for l in standby.log_lines() if l.get("sandbox_id") == sid]
    # The leader goes away: the standby takes over within a few seconds.
    env.ctl.stop(signal.SIGKILL)
    wait_for(lambda: "holding the controller lock" in standby.log(), timeout=5, what="takeover")
    env.ctl, env.others = standby, []
    sid2, _ = env.insert()
    env.wait_state(sid2, "ready")
    for s in (sid, sid2):
        env.set_state(s, "deleting")
        env.wait_state(s, "deleted")


def test_losing_the_lock_connection_stops_the_controller(env):
    sid, _ = env.insert()
    row = env.wait_state(sid, "ready")
    env.pg.sql("SELECT pg_terminate_backend(pid) FROM pg_locks"
               " WHERE locktype = 'advisory' AND granted")
    wait_for(lambda: env.ctl.proc.poll() is not None, timeout=5, what="controller exit")
    assert env.ctl.proc.returncode != 0
    assert "lost the connection holding the controller lock" in env.ctl.log()
    assert proc_alive(row["driver_handle"])  # sandboxes outlive it
    env.ctl = env.start(name="controller-4")
    time.sleep(2 * SWEEP_MS / 1000.0)
    assert env.row(sid)["state"] == "ready"
    env.set_state(sid, "deleting")
    env.wait_state(sid, "deleted")


def test_stop_leaves_nothing_of_ours_when_all_rows_are_deleted(env):
    time.sleep(2 * SWEEP_MS / 1000.0)
    live = env.pg.sql("SELECT id FROM sandboxes WHERE state IN ('pending', 'ready')")
    for (sid,) in live:
        env.set_state(sid, "deleting")
    for (sid,) in live:
        env.wait_state(sid, ("deleted",))
    wait_for(lambda: not env.our_bwrap_pids(), timeout=5, what="no bwrap processes left")
    # .checkpoints is the checkpoint store (docs/checkpoints.md): kept, and
    # empty when no checkpoint exists.
    left = sorted(os.listdir(env.state))
    if ".checkpoints" in left:
        assert os.listdir(os.path.join(env.state, ".checkpoints")) == []
        left.remove(".checkpoints")
    assert left in ([".orchard-state"], [".orchard-state", ".s"])
    # The cgroup parents exist only while they hold sandboxes (a SIGKILLed
    # controller must not leave them in its own cgroup).
    for base in env.cgroup_bases():
        assert not os.path.exists(base), base



# ---- lifetimes: TTL, idle timeout, heartbeat rule, hard deadline -------------

def expired_event(env, sid):
    rows = env.pg.sql("SELECT data->>'from', data->>'message' FROM events"
                      " WHERE sandbox_id = '%s' AND kind = 'sandbox.expired'" % sid)
    assert len(rows) == 1, rows
    return rows[0]


def test_ttl_expiry_deletes_with_the_reason(env):
    sid, _ = env.insert(ttl=2)
    row = env.wait_state(sid, "ready")
    row = env.wait_state(sid, "deleted", timeout=8)
    assert row["state_message"] == "ttl expired after 2s"
    assert expired_event(env, sid) == ["ready", "ttl expired after 2s"]
    assert not proc_alive(row["driver_handle"])
    assert not os.path.exists(env.sandbox_dir(sid))
    assert env.pg.sql("SELECT deleted_at IS NOT NULL FROM sandboxes WHERE id = '%s'" % sid) == [["t"]]


def test_default_ttl_is_two_hours(env, ready_sandbox):
    sid, _, _ = ready_sandbox
    # Ten minutes short of 2 h old: still alive; past it: expired.
    env.pg.sql("UPDATE sandboxes SET created_at = now() - interval '110 minutes' WHERE id = '%s'" % sid)
    time.sleep(3 * SWEEP_MS / 1000.0)
    assert env.row(sid)["state"] == "ready"
    env.pg.sql("UPDATE sandboxes SET created_at = now() - interval '121 minutes' WHERE id = '%s'" % sid)
    row = env.wait_state(sid, "deleted", timeout=5)
    assert row["state_message"] == "ttl expired after 7200s"


def test_idle_timeout_counts_activity(env):
    sid, _ = env.insert(idle=3)
    env.wait_state(sid, "ready")
    # Activity (exec/file calls; the API stamps last_activity_at) keeps it.
    # Each psql is a process: on a loaded machine one round may take long,
    # so "still ready" is asserted only while no gap reached the timeout.
    t_end = time.monotonic() + 5
    last = time.monotonic()
    while time.monotonic() < t_end:
        env.pg.sql("UPDATE sandboxes SET last_activity_at = now() WHERE id = '%s'" % sid)
        now = time.monotonic()
        gap, last = now - last, now
        if gap > 2:
            break
        assert env.row(sid)["state"] == "ready"
        time.sleep(0.3)
    row = env.wait_state(sid, "deleted", timeout=8)
    assert row["state_message"] == "idle timeout: no activity for 3s"
    assert expired_event(env, sid)[1] == row["state_message"]


def test_heartbeat_rule_applies_only_after_a_heartbeat(env):
    quiet, _ = env.insert()
    beat, _ = env.insert()
    env.wait_state(quiet, "ready")
    env.wait_state(beat, "ready")
    # Created long ago, never a heartbeat: no idle rule applies (TTL aside).
    env.pg.sql("UPDATE sandboxes SET created_at = now() - interval '30 minutes',"
               " ready_at = now() - interval '30 minutes' WHERE id = '%s'" % quiet)
    env.pg.sql("UPDATE sandboxes SET last_heartbeat_at = now() - interval '170 seconds',"
               " last_activity_at = now() - interval '170 seconds' WHERE id = '%s'" % beat)
    time.sleep(3 * SWEEP_MS / 1000.0)
    assert env.row(beat)["state"] == "ready"
    env.pg.sql("UPDATE sandboxes SET last_heartbeat_at = now() - interval '181 seconds',"
               " last_activity_at = now() - interval '181 seconds' WHERE id = '%s'" % beat)
    row = env.wait_state(beat, "deleted", timeout=5)
    assert row["state_message"] == "no heartbeat for 180s"
    assert env.row(quiet)["state"] == "ready"
    env.set_state(quiet, "deleting")
    env.wait_state(quiet, "deleted")


def test_ttl_holds_while_the_controller_is_down(env):
    sid, token = env.insert(ttl=3)
    row = env.wait_state(sid, "ready")
    # The watchdog (orchard-watchdog) is bwrap's parent and holds the TTL
    # plus a grace of 3 s; bwrap runs --die-with-parent.
    watchdog, _ = pid_of(row["driver_handle"])
    with open("/proc/%d/cmdline" % watchdog, "rb") as f:
        cmd = f.read().split(b"\0")
    assert cmd[0].endswith(b"/orchard-watchdog") and b"--die-with-parent" in cmd, cmd
    assert 1 <= int(cmd[cmd.index(b"--ttl") + 1]) <= 6, cmd
    ns_init = ns_init_of(row["driver_handle"])
    env.ctl.stop(signal.SIGKILL)
    try:
        t0 = time.monotonic()
        wait_for(lambda: not proc_alive(row["driver_handle"]), timeout=12, what="watchdog kill")
        wait_for(lambda: pid_gone(ns_init), what="the sandbox's init gone")
        print("sandbox gone %.1fs after the controller died" % (time.monotonic() - t0))
        assert env.row(sid)["state"] == "ready"   # nobody to record it yet
    finally:
        env.ctl = env.start(name="controller-ttl")
    row = env.wait_state(sid, "deleted", timeout=5)
    assert row["state_message"] == "ttl expired after 3s"
    assert not os.path.exists(env.sandbox_dir(sid))



# ---- limits (cgroups) ----------------------------------------------------------

def test_startup_reports_the_enforced_limits(env):
    line = limits_log(env.ctl)
    assert re.fullmatch(r"cpu=(v1|v2|off) memory=(v1|v2|off) pids=(v1|v2|off) freezer=(v1|v2|off)", line["enforced"]), line
    if os.path.isdir("/sys/fs/cgroup/memory") and IS_ROOT:   # this machine: cgroup v1, root
        freezer = "v1" if os.path.isdir("/sys/fs/cgroup/freezer") else "off"
        assert line["enforced"] == "cpu=v1 memory=v1 pids=v1 freezer=" + freezer, line


needs_limits = pytest.mark.skipif(not IS_ROOT, reason="cgroups need root here")


@needs_limits
def test_limits_are_written_and_every_process_is_in_the_cgroup(env):
    sid, _ = env.insert(cpu_millis=500, memory_bytes=96 * 1024 * 1024)
    row = env.wait_state(sid, "ready")
    dirs = sandbox_cgroups(env, sid)
    cpu, mem, pids = (cgroup_of(dirs, c) for c in ("cpu", "memory", "pids"))
    if os.path.exists(os.path.join(cpu, "cpu.cfs_quota_us")):
        assert read1(os.path.join(cpu, "cpu.cfs_period_us")) == "100000"
        assert read1(os.path.join(cpu, "cpu.cfs_quota_us")) == "50000"
        assert read1(os.path.join(mem, "memory.limit_in_bytes")) == str(96 * 1024 * 1024)
        if os.path.exists(os.path.join(mem, "memory.memsw.limit_in_bytes")):
            assert read1(os.path.join(mem, "memory.memsw.limit_in_bytes")) == str(96 * 1024 * 1024)
    else:
        assert read1(os.path.join(cpu, "cpu.max")) == "50000 100000"
        assert read1(os.path.join(mem, "memory.max")) == str(96 * 1024 * 1024)
    assert read1(os.path.join(pids, "pids.max")) == "1024"
    # Everything of the sandbox, including bwrap's monitor and the watchdog.
    ns_init = ns_init_of(row["driver_handle"])
    members = {int(p) for p in read1(os.path.join(pids, "cgroup.procs")).split()}
    assert set(sandbox_pids(ns_init)) <= members
    watchdog = pid_of(row["driver_handle"])[0]
    assert watchdog in members and set(children_of(watchdog)) <= members
    env.set_state(sid, "deleting")
    env.wait_state(sid, "deleted")
    for d in dirs:
        assert not os.path.exists(d), d


@needs_limits
def test_memory_hog_is_killed_inside_its_sandbox_only(env):
    small, tok = env.insert(memory_bytes=64 * 1024 * 1024)
    other, tok2 = env.insert()
    rs = env.wait_state(small, "ready")
    ro = env.wait_state(other, "ready")
    r = agent_exec(rs["agent_address"], tok,
                   "head -c 1G /dev/zero | tail > /dev/null; echo tail-exit=$?", timeout=60)
    assert "tail-exit=137" in r["stdout"], r          # SIGKILLed by the OOM killer
    mem = cgroup_of(sandbox_cgroups(env, small), "memory")
    if os.path.exists(os.path.join(mem, "memory.oom_control")):
        assert re.search(r"^oom_kill [1-9]", read1(os.path.join(mem, "memory.oom_control")), re.M)
    # The agent, the sandbox and its neighbour live on.
    assert agent_get(rs["agent_address"], "/health", tok)[0] == 200
    assert agent_exec(rs["agent_address"], tok, "echo still here")["stdout"] == "still here\n"
    assert env.row(small)["state"] == "ready" and proc_alive(rs["driver_handle"])
    assert agent_exec(ro["agent_address"], tok2, "echo fine")["stdout"] == "fine\n"
    for sid in (small, other):
        env.set_state(sid, "deleting")
        env.wait_state(sid, "deleted")


@needs_limits
def test_fork_bomb_is_contained(env):
    assert env.ctl.stop() == 0
    env.ctl = env.start(name="controller-pids", ORCHARD_SANDBOX_PIDS_MAX="64")
    try:
        bomb, tok = env.insert(cpu_millis=500)
        other, tok2 = env.insert()
        rb = env.wait_state(bomb, "ready")
        ro = env.wait_state(other, "ready")
        pids = cgroup_of(sandbox_cgroups(env, bomb), "pids")
        assert read1(os.path.join(pids, "pids.max")) == "64"
        import threading
        result = {}
        t = threading.Thread(target=lambda: result.update(agent_exec(
            rb["agent_address"], tok, "b() { b | b & }; b; sleep 30", timeout=4)))
        t.start()
        try:
            wait_for(lambda: int(read1(os.path.join(pids, "pids.current"))) >= 60, timeout=10,
                     what="the bomb to reach the limit")
            # The host and the neighbour carry on while the bomb runs.
            assert subprocess.run(["true"]).returncode == 0
            assert agent_exec(ro["agent_address"], tok2, "echo fine")["stdout"] == "fine\n"
            assert int(read1(os.path.join(pids, "pids.current"))) <= 64
            # Forks past the limit were refused (and counted).
            wait_for(lambda: int(re.search(r"max (\d+)", read1(os.path.join(pids, "pids.events")))
                                 .group(1)) > 0, timeout=5, what="a refused fork")
            assert int(read1(os.path.join(pids, "pids.current"))) <= 64
        finally:
            t.join(30)
        # The exec call itself came back: its timeout killed the command's
        # whole process group, the bomb included (a bomb left in the
        # background after a normal exit would keep the pids limit full).
        assert result.get("timed_out") is True, result

        def healthy():
            try:
                return agent_get(rb["agent_address"], "/health", tok)[0] == 200
            except OSError:   # no thread for the connection while pids drain
                return False
        wait_for(healthy, timeout=20, what="agent healthy after the bomb")
        assert env.row(bomb)["state"] == "ready"
        for sid in (bomb, other):
            env.set_state(sid, "deleting")
            env.wait_state(sid, "deleted")
        assert not os.path.exists(pids)
    finally:
        assert env.ctl.stop() == 0
        env.ctl = env.start(name="controller")


@needs_limits
def test_cpu_quota_throttles(env):
    sid, tok = env.insert(cpu_millis=200)
    row = env.wait_state(sid, "ready")
    cpu = cgroup_of(sandbox_cgroups(env, sid), "cpu")
    agent_exec(row["agent_address"], tok, "timeout 1 sh -c 'while :; do :; done'; true")
    cpu_stat = dict(l.split() for l in read1(os.path.join(cpu, "cpu.stat")).splitlines())
    assert int(cpu_stat["nr_throttled"]) > 0, cpu_stat
    env.set_state(sid, "deleting")
    env.wait_state(sid, "deleted")



# ---- seccomp ------------------------------------------------------------------

SYSCALL_PY = ("python3 -c 'import ctypes,sys; l=ctypes.CDLL(None, use_errno=True);"
              " r=l.syscall(%s); print(r, ctypes.get_errno())'")


def test_seccomp_denies_what_a_sandbox_never_needs(env, ready_sandbox):
    sid, tok, row = ready_sandbox
    a = row["agent_address"]
    r = agent_exec(a, tok, "grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status")
    assert "Seccomp:\t2" in r["stdout"], r
    # Namespaces and mounts: EPERM from the filter.
    for cmd in ("unshare -r true", "unshare -m true", "unshare -n true"):
        r = agent_exec(a, tok, cmd)
        assert r["exit_code"] != 0 and "Operation not permitted" in r["stderr"], (cmd, r)
    r = agent_exec(a, tok, "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m")
    assert r["exit_code"] != 0, r
    # Calls an unprivileged process may normally make, refused with EPERM:
    # keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0),
    # userfaultfd(UFFD_USER_MODE_ONLY), personality(ADDR_NO_RANDOMIZE).
    for call in ("250, 0, -3, 0", "323, 1", "135, 0x0040000"):
        r = agent_exec(a, tok, SYSCALL_PY % call)
        assert r["stdout"].split() == ["-1", "1"], (call, r)
    # ...while the same calls work on the host (the test means something).
    r = subprocess.run(["python3", "-c", "import ctypes; l=ctypes.CDLL(None, use_errno=True);"
                        " print(l.syscall(250, 0, -3, 0))"], capture_output=True, text=True)
    assert int(r.stdout) > 0, r
    # The default personality and the query stay allowed; ordinary work too.
    r = agent_exec(a, tok, "python3 -c 'import ctypes; l=ctypes.CDLL(None, use_errno=True);"
                   " l.personality.argtypes = [ctypes.c_ulong];"
                   " print(l.personality(0xffffffff), l.personality(0), ctypes.get_errno())'")
    assert r["stdout"].split() == ["0", "0", "0"], r
    r = agent_exec(a, tok, "setarch x86_64 true && ls / >/dev/null && echo ok")
    assert r["exit_code"] == 0 and r["stdout"] == "ok\n", r


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86_64 only")
def test_seccomp_kills_other_syscall_abis(env, ready_sandbox):
    """An x32 syscall (nr | 0x40000000) from a 64-bit process reaches the
    filter as a foreign ABI: the process is killed with SIGSYS. (32-bit
    int 0x80 is the same rule; this kernel has no ia32 emulation, so
    there it faults before seccomp.)"""
    sid, tok, row = ready_sandbox
    x32_getpid = "python3 -c 'import ctypes; ctypes.CDLL(None).syscall(0x40000000 + 39); print(\"alive\")'"
    r = agent_exec(row["agent_address"], tok, x32_getpid)
    assert r["exit_code"] == 128 + signal.SIGSYS and r["signal"] == signal.SIGSYS, r
    assert "alive" not in r["stdout"]
    # On the host the same call merely fails (ENOSYS without x32 support).
    h = subprocess.run(["sh", "-c", x32_getpid.replace("python3", sys.executable)],
                       capture_output=True, text=True)
    assert h.returncode == 0 and "alive" in h.stdout, h


# ---- long state dirs: the unix socket path limit -------------------------------

def test_long_state_dir_gets_short_socket_links():
    e = Env()
    try:
        # A CI clone deep in a long path: 63-char ids no longer fit in sun_path.
        e.state = os.path.join(e.base, "a-rather-long-directory-name-for-ci", "state-dir-of-orchard")
        assert 80 > len(e.state) > 107 - 1 - 63 - len("/run/agent.sock")
        e.ctl = e.start()
        sid = ("l" + uuid.uuid4().hex * 2)[:63]
        sid, tok = e.insert(sid=sid)
        short, tshort = e.insert()           # fits: the plain path as before
        row = e.wait_state(sid, "ready")
        rs = e.wait_state(short, "ready")
        assert rs["agent_address"] == "unix:%s/%s/run/agent.sock" % (e.state, short)
        addr = row["agent_address"]
        assert re.fullmatch(r"unix:%s/\.s/[0-9a-f]{16}" % re.escape(e.state), addr), addr
        assert len(addr) - len("unix:") <= 107
        assert os.readlink(addr[5:]) == "../%s/run/agent.sock" % sid
        assert agent_get(addr, "/health", tok)[0] == 200
        assert agent_exec(addr, tok, "echo via-link")["stdout"] == "via-link\n"
        for x in (sid, short):
            e.set_state(x, "deleting")
            e.wait_state(x, "deleted")
        assert not os.path.lexists(addr[5:])
        assert not os.path.exists(e.sandbox_dir(sid))
    finally:
        e.close()


# ---- measurement (opt-in: ORCHARD_BENCH=1; prints figures, asserts nothing on time)

def _latencies(env, ids):
    rows = env.pg.sql(
        "SELECT extract(epoch FROM ready_at - created_at) * 1000 FROM sandboxes"
        " WHERE id IN (%s) AND state = 'ready'" % ",".join("'%s'" % i for i in ids))
    return sorted(float(r[0]) for r in rows)


def _pct(xs, p):
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def _insert_many(env, n):
    ids = ["b-" + uuid.uuid4().hex[:12] for _ in range(n)]
    env.pg.sql("INSERT INTO sandboxes (id, tenant_id, image, cpu, memory, cpu_millis, memory_bytes,"
               " timeout_seconds, agent_token) VALUES %s" % ",".join(
                   "('%s', %s, 'host', '1', '512Mi', 1000, 536870912, 60, '%s')"
                   % (i, env.tenant, uuid.uuid4().hex * 2) for i in ids))
    return ids


def _delete_all(env, ids):
    env.pg.sql("UPDATE sandboxes SET state = 'deleting', deleted_at = now() WHERE id IN (%s)"
               % ",".join("'%s'" % i for i in ids))
    wait_for(lambda: env.pg.sql("SELECT count(*) FROM sandboxes WHERE state <> 'deleted' AND id IN (%s)"
                                % ",".join("'%s'" % i for i in ids))[0][0] == "0",
             timeout=120, every=0.1, what="bench sandboxes deleted")


@pytest.mark.skipif(not os.environ.get("ORCHARD_BENCH"), reason="set ORCHARD_BENCH=1 to measure")
def test_bench_create_to_ready(env):
    """create->ready (ready_at - created_at, both database clocks) over 50
    sandboxes: one at a time, then with 20 in flight."""
    n = 50
    seq = []
    for _ in range(n):
        (sid,) = _insert_many(env, 1)
        env.wait_state(sid, ("ready", "failed"), timeout=30)
        seq.append(sid)
    lat_seq = _latencies(env, seq)
    _delete_all(env, seq)
    conc, inflight = [], []
    while len(conc) < n or inflight:
        done = set()
        if inflight:
            done = {r[0] for r in env.pg.sql(
                "SELECT id FROM sandboxes WHERE state <> 'pending' AND id IN (%s)"
                % ",".join("'%s'" % i for i in inflight))}
        inflight = [i for i in inflight if i not in done]
        k = min(20 - len(inflight), n - len(conc))
        if k > 0:
            new = _insert_many(env, k)
            conc += new
            inflight += new
        time.sleep(0.005)
    lat_conc = _latencies(env, conc)
    _delete_all(env, conc)
    burst = _insert_many(env, n)     # one INSERT of 50 rows: one notification burst
    wait_for(lambda: env.pg.sql("SELECT count(*) FROM sandboxes WHERE state = 'pending' AND id IN (%s)"
                                % ",".join("'%s'" % i for i in burst))[0][0] == "0",
             timeout=120, every=0.05, what="burst settled")
    lat_burst = _latencies(env, burst)
    _delete_all(env, burst)
    for name, lat in (("sequential", lat_seq), ("20 concurrent", lat_conc), ("burst of 50", lat_burst)):
        print("\nBENCH create->ready %s: n=%d p50 %.1f ms p90 %.1f ms p99 %.1f ms max %.1f ms"
              % (name, len(lat), _pct(lat, 50), _pct(lat, 90), _pct(lat, 99), lat[-1]))
    # How long one launch holds the reconcile loop (create + recording it).
    blocked = sorted(float(l["create_ms"]) for l in env.ctl.log_lines()
                     if l.get("msg") == "sandbox launched" and l.get("sandbox_id", "").startswith("b-"))
    if blocked:
        print("BENCH loop blocked per launch: n=%d p50 %.1f ms p99 %.1f ms"
              % (len(blocked), _pct(blocked, 50), _pct(blocked, 99)))
    with open("/proc/loadavg") as f:
        print("BENCH load average after: %s" % " ".join(f.read().split()[:3]))
    assert len(lat_seq) == n and len(lat_conc) == n and len(lat_burst) == n
