"""Typed failure attribution (issue 21, sql/migrations/023_failure_class.sql):
every way a job can end is provoked for real and its `failure` class read
back from the job object, the job list, the trajectory and the dashboard
views. The stack has a small pids limit so a fork bomb reaches it quickly.
"""
import json
import os
import signal

import pytest

from stack import Stack
from ctl_harness import IS_ROOT
from test_controller import ns_init_of, sandbox_pids

WAIT = 180          # generous: the machine is loaded

needs_limits = pytest.mark.skipif(not IS_ROOT, reason="cgroups need root here")

# A fork bomb that gives up: fork sleeping children until the pids limit
# refuses one, then take them down and fail.
FORK_BOMB = """python3 -c '
import os, signal, sys, time
kids = []
try:
    while len(kids) < 4096:
        pid = os.fork()
        if pid == 0:
            time.sleep(120)
            os._exit(0)
        kids.append(pid)
except OSError as e:
    print("fork refused after", len(kids), e, file=sys.stderr)
for k in kids:
    os.kill(k, signal.SIGKILL)
    os.waitpid(k, 0)
sys.exit(1)
'"""


@pytest.fixture(scope="module")
def fstack():
    s = Stack(env={"ORCHARD_SANDBOX_PIDS_MAX": "64"})
    s.start()
    yield s
    s.close()


@pytest.fixture(scope="module")
def fs(fstack):
    return fstack.session()


def new_sandbox(st, s, **body):
    r = s.post(st.url + "/sandboxes", json=dict({"image": "host", "idle_timeout_seconds": 3600},
                                                **body))
    assert r.status_code in (200, 201), r.text
    sid = r.json()["sandbox_id"]
    info = st.wait_ready(s, sid, timeout=WAIT)
    assert info["status"] == "ready", info
    return sid


@pytest.fixture(scope="module")
def box(fstack, fs):
    sid = new_sandbox(fstack, fs)
    yield sid
    fs.delete("%s/sandboxes/%s" % (fstack.url, sid))


def run(st, s, sid, command, timeout=60):
    r = s.post("%s/sandboxes/%s/exec" % (st.url, sid),
               json={"command": command, "timeout_seconds": timeout, "wait": True},
               timeout=timeout + WAIT)
    assert r.status_code == 200, r.text
    return r.json()


def start(st, s, sid, command, timeout=600):
    r = s.post("%s/sandboxes/%s/exec" % (st.url, sid),
               json={"command": command, "timeout_seconds": timeout, "wait": False})
    assert r.status_code in (200, 202), r.text
    return r.json()["job_id"]


def job(st, s, job_id):
    r = s.get("%s/jobs/%s" % (st.url, job_id))
    assert r.status_code == 200, r.text
    return r.json()


def wait_job(st, s, job_id):
    r = s.get("%s/jobs/%s/wait" % (st.url, job_id), params={"timeout": WAIT},
              timeout=WAIT + 30)
    assert r.status_code == 200, r.text
    assert r.json()["status"] in ("succeeded", "failed"), r.json()
    return r.json()


def wait_running(st, s, job_id):
    st.wait_for(lambda: job(st, s, job_id)["status"] == "running", timeout=WAIT,
                what="job %s running" % job_id)


def agent_of(st, s, sid):
    """The host pid of the sandbox's agent (its pid namespace's init)."""
    r = s.get("%s/sandboxes/%s" % (st.url, sid))
    assert r.status_code == 200, r.text
    return ns_init_of(r.json()["pod_name"])


def find_in_sandbox(agent, argv):
    """Host pid of the process in the sandbox whose command line is argv."""
    want = "\0".join(argv).encode() + b"\0"
    for pid in sandbox_pids(agent):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                if f.read() == want:
                    return pid
        except OSError:
            pass
    return None


def sandbox(st, s, sid):
    r = s.get("%s/sandboxes/%s" % (st.url, sid))
    assert r.status_code == 200, r.text
    return r.json()


def test_success_and_plain_exit_have_no_class(fstack, fs, box):
    ok = run(fstack, fs, box, "echo fine")
    assert ok["status"] == "succeeded" and ok["failure"] is None, ok
    bad = run(fstack, fs, box, "exit 3")
    assert bad["status"] == "failed" and bad["exit_code"] == 3, bad
    assert "failure" in bad and bad["failure"] is None, bad
    assert job(fstack, fs, bad["job_id"])["failure"] is None
    # 124 of its own is not a timeout
    own = run(fstack, fs, box, "exit 124")
    assert own["timed_out"] is False and own["failure"] is None, own
    listed = fs.get("%s/sandboxes/%s/jobs" % (fstack.url, box)).json()
    rows = {j["job_id"]: j for j in listed["jobs"]} if isinstance(listed, dict) else \
        {j["job_id"]: j for j in listed}
    assert rows[bad["job_id"]]["failure"] is None and "failure" in rows[ok["job_id"]]


def test_timeout(fstack, fs, box):
    j = run(fstack, fs, box, "sleep 60", timeout=2)
    assert j["timed_out"] is True and j["failure"] == "timeout", j


def test_cancel(fstack, fs, box):
    job_id = start(fstack, fs, box, "sleep 300")
    wait_running(fstack, fs, job_id)
    r = fs.post("%s/jobs/%s/cancel" % (fstack.url, job_id))
    assert r.status_code in (200, 202), r.text
    j = wait_job(fstack, fs, job_id)
    assert j["status"] == "failed" and j["failure"] == "canceled", j


@needs_limits
def test_memory_bomb_is_oom_killed(fstack, fs):
    sid = new_sandbox(fstack, fs, memory="64Mi")
    try:
        j = run(fstack, fs, sid, "head -c 1G /dev/zero | tail > /dev/null", timeout=120)
        assert j["status"] == "failed" and j["exit_code"] == 137, j
        assert j["failure"] == "oom_killed", j
        # The sandbox lives on; the next command has no class.
        assert sandbox(fstack, fs, sid)["failure"] is None
        after = run(fstack, fs, sid, "exit 1")
        assert after["failure"] is None, after
    finally:
        fs.delete("%s/sandboxes/%s" % (fstack.url, sid))


@needs_limits
def test_fork_bomb_hits_the_pids_limit(fstack, fs, box):
    j = run(fstack, fs, box, FORK_BOMB, timeout=120)
    assert j["status"] == "failed" and j["exit_code"] == 1, j
    assert "fork refused" in j["stderr"], j
    assert j["failure"] == "pids_limit", j


@needs_limits
def test_kill_from_the_host_is_killed(fstack, fs, box):
    job_id = start(fstack, fs, box, "sleep 987")
    wait_running(fstack, fs, job_id)
    agent = agent_of(fstack, fs, box)
    pid = fstack.wait_for(lambda: find_in_sandbox(agent, ["sleep", "987"]), timeout=WAIT,
                          what="the command in the sandbox")
    os.kill(pid, signal.SIGKILL)
    j = wait_job(fstack, fs, job_id)
    assert j["status"] == "failed" and j["signal"] == 9, j
    assert j["timed_out"] is False and j["failure"] == "killed", j


@needs_limits
def test_stopped_agent_is_agent_error(fstack, fs):
    sid = new_sandbox(fstack, fs)
    agent = agent_of(fstack, fs, sid)
    os.kill(agent, signal.SIGSTOP)
    try:
        j = run(fstack, fs, sid, "echo never", timeout=2)
        assert j["status"] == "failed", j
        assert j["failure"] == "agent_error", j
        assert sandbox(fstack, fs, sid)["status"] == "ready"
    finally:
        os.kill(agent, signal.SIGCONT)
    assert run(fstack, fs, sid, "echo back")["failure"] is None
    fs.delete("%s/sandboxes/%s" % (fstack.url, sid))


@needs_limits
def test_sandbox_killed_under_a_job_is_sandbox_lost(fstack, fs):
    sid = new_sandbox(fstack, fs)
    job_id = start(fstack, fs, sid, "sleep 600")
    wait_running(fstack, fs, job_id)
    agent = agent_of(fstack, fs, sid)
    fstack.wait_for(lambda: find_in_sandbox(agent, ["sleep", "600"]), timeout=WAIT,
                    what="the command in the sandbox")
    for pid in [agent] + sandbox_pids(agent):       # kill -9 of the sandbox
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    j = wait_job(fstack, fs, job_id)
    assert j["status"] == "failed", j
    # The api waits briefly for the controller; the controller's mark wins
    # even when the api stored its answer first.
    fstack.wait_for(lambda: job(fstack, fs, job_id)["failure"] == "sandbox_lost", timeout=WAIT,
                    what="sandbox_lost on the job")
    s = fstack.wait_for(lambda: (lambda o: o if o["status"] == "failed" else None)(
        sandbox(fstack, fs, sid)), timeout=WAIT, what="the sandbox failed")
    assert s["failure"] == "sandbox_lost", s
    ok = fs.get(fstack.url + "/sandboxes", params={"status": "failed"})
    assert ok.status_code == 200, ok.text
    fs.delete("%s/sandboxes/%s" % (fstack.url, sid))


def test_trajectory_and_dashboards_carry_the_class(fstack, fs, box):
    j = run(fstack, fs, box, "sleep 30", timeout=1)
    assert j["failure"] == "timeout"
    r = fs.get("%s/sandboxes/%s/trajectory" % (fstack.url, box))
    assert r.status_code == 200, r.text
    lines = [json.loads(l) for l in r.text.splitlines() if l.strip()]
    steps = {l.get("job_id"): l for l in lines if l.get("type") == "exec"}
    assert steps[j["job_id"]]["failure"] == "timeout"
    assert all("failure" in l for l in steps.values())
    assert any(l["failure"] is None and l["status"] == "failed" for l in steps.values())
    assert fstack.scalar("SELECT failure FROM trajectory_steps WHERE job_id = '%s'"
                         % j["job_id"]) == "timeout"
    assert fstack.scalar("SELECT failure FROM dash_failures WHERE job_id = '%s'"
                         % j["job_id"]) == "timeout"
    classes = dict((r[0], int(r[1])) for r in fstack.psql(
        "SELECT failure, sum(total) FROM dash_failure_classes WHERE source = 'job' GROUP BY 1"))
    assert classes.get("timeout", 0) >= 1 and classes.get("exit", 0) >= 1, classes
    stats = fs.get(fstack.url + "/v1/stats")
    assert stats.status_code == 200, stats.text
    reasons = stats.json()["failure_reasons"]
    assert any(x.get("failure") == "timeout" for x in reasons), reasons


def test_sandbox_that_never_started_is_infra_error(fstack):
    """A row that fails before it was ever ready (here written failed at
    once, as the api does for a sandbox it cannot launch) is an
    infrastructure failure."""
    tenant = fstack.scalar("SELECT id FROM tenants WHERE name = 'default'")
    fstack.psql("INSERT INTO sandboxes (id, tenant_id, image, state, state_message, cpu, memory,"
                " cpu_millis, memory_bytes, agent_token) VALUES ('fc0infra', %s, 'host', 'failed',"
                " 'launch failed', '1', '1Gi', 1000, 1073741824, 'x')" % tenant)
    assert fstack.scalar("SELECT failure FROM sandboxes WHERE id = 'fc0infra'") == "infra_error"
    assert fstack.psql("SELECT source, failure FROM dash_failures WHERE sandbox_id = 'fc0infra'") \
        == [["sandbox", "infra_error"]]


def test_bad_class_is_refused_by_the_database(fstack):
    with pytest.raises(RuntimeError):
        fstack.psql("UPDATE jobs SET failure = 'bogus'")
    assert fstack.scalar("SELECT count(*) FROM jobs WHERE failure = 'bogus'") == "0"
