"""Backpressure on exec (issue 22; api/exec_limit.c, docs/architecture.md
"Exec limits"): per-sandbox and per-tenant limits on execs running at once,
the execs beyond them queued in order in the database, and a 429 naming the
bound with Retry-After only when a queue bound is hit, writing nothing.

The bound on concurrency is proven from inside the sandbox (a counter
under flock(1) that every exec raises while it runs) and from the job rows
(claims are serialized by the tenant's exec lock, so no started_at falls
inside more than the limit of other jobs' [started_at, completed_at]).
"""
import os
import signal
import uuid

import pytest

import orchard_sdk
from orchard_sdk import sdk_env
from stack import Stack
from test_api import LEASE_S, REAP_S, RENEW_S, api_pid, exec_async, get_job, q, wait_status

SMALL = {"image": "host", "cpu": "100m", "memory": "64Mi"}


def tenant(stack, **limits):
    """A new tenant with these exec limits: its name, a session with a key
    of it, and the key."""
    name = "bp-%s" % uuid.uuid4().hex[:8]
    r = stack.session().post(stack.url + "/v1/tenants", json=dict(name=name, **limits))
    assert r.status_code == 201, r.text
    key = stack.new_tenant_key(name)
    return name, stack.session(key=key), key


def new_sandbox(stack, s):
    r = s.post(stack.url + "/v1/sandboxes", json=SMALL)
    assert r.status_code in (200, 201), r.text
    sid = r.json()["sandbox_id"]
    stack.wait_ready(s, sid)
    return sid


def counted(tag, seconds=2):
    """A command that raises /tmp/<tag>.n while it runs and logs the value
    it saw at its start, so the log's maximum is the most that ran at once."""
    d = "/tmp/%s" % tag
    return ("exec 9>%s.lock; flock 9; n=$(( $(cat %s.n 2>/dev/null || echo 0) + 1 )); echo $n > %s.n;"
            " echo $n >> %s.log; flock -u 9; sleep %d;"
            " flock 9; echo $(( $(cat %s.n) - 1 )) > %s.n" % (d, d, d, d, seconds, d, d))


def wait_done(stack, s, job_id, timeout=120):
    r = s.get("%s/v1/jobs/%s/wait" % (stack.url, job_id), params={"timeout": timeout},
              timeout=timeout + 30)
    assert r.status_code == 200, r.text
    return r.json()


def most_at_once(stack, job_ids):
    """The most jobs of job_ids that were running at any one start."""
    ids = ",".join(q(j) for j in job_ids)
    return int(stack.scalar(
        "SELECT max((SELECT count(*) FROM jobs o WHERE o.id IN (%s) AND o.started_at <= j.started_at"
        " AND o.completed_at > j.started_at)) FROM jobs j WHERE j.id IN (%s)" % (ids, ids)))


def start_order(stack, job_ids):
    ids = ",".join(q(j) for j in job_ids)
    return [r[0] for r in stack.psql("SELECT id FROM jobs WHERE id IN (%s) ORDER BY started_at" % ids)]


def test_a_sandbox_runs_at_most_its_limit_and_starts_the_rest_in_order(stack):
    _, s, _ = tenant(stack, max_execs_per_sandbox=2)
    sid = new_sandbox(stack, s)
    tag = "bp-" + uuid.uuid4().hex[:8]
    jobs = [exec_async(stack, s, sid, counted(tag)) for _ in range(5)]
    done = [wait_done(stack, s, j) for j in jobs]
    assert [d["status"] for d in done] == ["succeeded"] * 5, done
    seen = exec_async(stack, s, sid, "cat /tmp/%s.log" % tag)
    starts = [int(n) for n in wait_done(stack, s, seen)["stdout"].split()]
    assert len(starts) == 5 and max(starts) == 2, starts   # two ran together, never three
    assert most_at_once(stack, jobs) == 2
    assert start_order(stack, jobs) == jobs
    s.delete("%s/v1/sandboxes/%s" % (stack.url, sid))


def test_a_tenant_limit_holds_across_its_sandboxes_and_serves_them_in_order(stack):
    _, s, _ = tenant(stack, max_execs=2)
    a, b = new_sandbox(stack, s), new_sandbox(stack, s)
    jobs = [exec_async(stack, s, sid, "sleep 1") for sid in (a, b, a, b, a, b)]
    assert [wait_done(stack, s, j)["status"] for j in jobs] == ["succeeded"] * 6
    assert most_at_once(stack, jobs) <= 2
    assert start_order(stack, jobs) == jobs
    res = s.get(stack.url + "/v1/resources").json()["tenant"]
    assert res["execs"]["max_execs"] == 2 and res["execs"]["max_execs_per_sandbox"] is None, res
    assert res["quotas"]["max_execs"] == {"limit": 2, "used": 0}, res
    for sid in (a, b):
        s.delete("%s/v1/sandboxes/%s" % (stack.url, sid))


def test_a_full_queue_is_429_naming_the_bound_and_writes_nothing(stack):
    name, s, _ = tenant(stack, max_execs_per_sandbox=1, max_queued_execs_per_sandbox=1)
    sid = new_sandbox(stack, s)
    first = exec_async(stack, s, sid, "sleep 5")
    wait_status(stack, s, first, ("running",))
    second = exec_async(stack, s, sid, "true")
    assert get_job(stack, s, second)["status"] == "queued"
    res = s.get(stack.url + "/v1/resources").json()["tenant"]["execs"]
    assert (res["running"], res["queued"]) == (1, 1), res
    count = "SELECT count(*) FROM jobs WHERE sandbox_id = %s" % q(sid)
    events = "SELECT count(*) FROM events WHERE sandbox_id = %s" % q(sid)
    before = (stack.scalar(count), stack.scalar(events))
    key = "bp-key-" + uuid.uuid4().hex
    r = s.post("%s/v1/sandboxes/%s/exec" % (stack.url, sid), json={"command": "echo refused"},
               headers={"Idempotency-Key": key})
    assert r.status_code == 429 and r.json()["code"] == "quota_exceeded", r.text
    assert "max_queued_execs_per_sandbox" in r.json()["detail"] and name in r.json()["detail"], r.text
    assert int(r.headers["Retry-After"]) >= 1, r.headers
    assert (stack.scalar(count), stack.scalar(events)) == before
    # the refused request left its Idempotency-Key unused: once there is
    # room, the same key with another body is a new exec
    for j in (first, second):
        wait_done(stack, s, j)
    r = s.post("%s/v1/sandboxes/%s/exec" % (stack.url, sid),
               json={"command": "echo accepted", "wait": True}, headers={"Idempotency-Key": key})
    assert r.status_code == 200 and r.json()["stdout"] == "accepted\n", r.text
    s.delete("%s/v1/sandboxes/%s" % (stack.url, sid))


def test_execs_free_to_start_never_count_as_queued(stack):
    """With no queue at all, a burst of wait: false execs up to the limit is
    accepted (each claimed as it is accepted), and only the next is 429."""
    _, s, _ = tenant(stack, max_execs_per_sandbox=2, max_queued_execs_per_sandbox=0)
    sid = new_sandbox(stack, s)
    jobs = [exec_async(stack, s, sid, "sleep 3") for _ in range(2)]
    r = s.post("%s/v1/sandboxes/%s/exec" % (stack.url, sid), json={"command": "true"})
    assert r.status_code == 429 and "max_queued_execs_per_sandbox" in r.json()["detail"], r.text
    assert [wait_done(stack, s, j)["status"] for j in jobs] == ["succeeded"] * 2
    assert most_at_once(stack, jobs) == 2
    s.delete("%s/v1/sandboxes/%s" % (stack.url, sid))


def test_a_full_tenant_queue_is_429_naming_max_queued_execs(stack):
    _, s, _ = tenant(stack, max_execs=1, max_queued_execs=1)
    a, b = new_sandbox(stack, s), new_sandbox(stack, s)
    first = exec_async(stack, s, a, "sleep 5")
    second = exec_async(stack, s, b, "true")
    r = s.post("%s/v1/sandboxes/%s/exec" % (stack.url, b), json={"command": "true"})
    assert r.status_code == 429 and "max_queued_execs " in r.json()["detail"], r.text
    assert [wait_done(stack, s, j)["status"] for j in (first, second)] == ["succeeded"] * 2
    for sid in (a, b):
        s.delete("%s/v1/sandboxes/%s" % (stack.url, sid))


def test_another_tenant_is_not_held_back_by_one_at_its_limit(stack, admin, sandbox):
    _, s, _ = tenant(stack, max_execs=1, max_queued_execs=0)
    sid = new_sandbox(stack, s)
    busy = exec_async(stack, s, sid, "sleep 5")
    wait_status(stack, s, busy, ("running",))
    r = s.post("%s/v1/sandboxes/%s/exec" % (stack.url, sid), json={"command": "true"})
    assert r.status_code == 429, r.text
    r = admin.post("%s/v1/sandboxes/%s/exec" % (stack.url, sandbox),
                   json={"command": "echo free", "wait": True})
    assert r.status_code == 200 and r.json()["stdout"] == "free\n", r.text
    assert get_job(stack, s, busy)["status"] == "running"
    wait_done(stack, s, busy)
    s.delete("%s/v1/sandboxes/%s" % (stack.url, sid))


@orchard_sdk.needs_sdk
def test_a_queued_wait_true_exec_waits_for_its_slot_through_the_sdk(stack):
    _, s, key = tenant(stack, max_execs_per_sandbox=1)
    sid = new_sandbox(stack, s)
    first = exec_async(stack, s, sid, "sleep 3; echo first > /tmp/bp-order")
    orchard_env = orchard_sdk.load()
    with sdk_env(stack, key=key):
        with orchard_env.SandboxClient(auto_cleanup=False) as client:
            r = client.get_sandbox(sid).exec("cat /tmp/bp-order")
    assert (r.status, r.stdout) == ("succeeded", "first\n"), (r.status, r.stdout, r.error)
    assert start_order(stack, [first, r.job_id]) == [first, r.job_id]
    assert most_at_once(stack, [first, r.job_id]) == 1
    s.delete("%s/v1/sandboxes/%s" % (stack.url, sid))


def test_queued_execs_survive_a_killed_api_and_run_exactly_once(stack):
    _, s, _ = tenant(stack, max_execs_per_sandbox=1)
    sid = new_sandbox(stack, s)
    log = "/tmp/bp-%s.log" % uuid.uuid4().hex[:8]
    running = exec_async(stack, s, sid, "sleep 3")
    wait_status(stack, s, running, ("running",))
    queued = [exec_async(stack, s, sid, "echo %d >> %s" % (n, log)) for n in (1, 2)]
    assert [get_job(stack, s, j)["status"] for j in queued] == ["queued"] * 2
    pid = api_pid(stack)
    os.kill(pid, signal.SIGKILL)
    stack.wait_for(lambda: not os.path.exists("/proc/%d" % pid), timeout=10, what="api gone")
    stack.up()  # restarts what is missing: the api
    done = [wait_done(stack, s, j, timeout=LEASE_S + REAP_S + RENEW_S + 90) for j in queued]
    assert [d["status"] for d in done] == ["succeeded"] * 2, done
    assert start_order(stack, queued) == queued
    for j in queued + [running]:
        assert stack.scalar("SELECT count(*) FROM events WHERE job_id = %s AND kind = 'exec.finish'"
                            % q(j)) == "1"
    check = exec_async(stack, s, sid, "cat %s" % log)
    assert wait_done(stack, s, check)["stdout"] == "1\n2\n"
    s.delete("%s/v1/sandboxes/%s" % (stack.url, sid))


def test_limits_are_tenant_fields_validated_and_removable(stack):
    admin = stack.session()
    name, _, _ = tenant(stack, max_execs_per_sandbox=3, max_queued_execs=10)
    t = admin.get("%s/v1/tenants/%s" % (stack.url, name)).json()
    assert (t["max_execs_per_sandbox"], t["max_execs"], t["max_queued_execs"]) == (3, None, 10), t
    r = admin.patch("%s/v1/tenants/%s" % (stack.url, name), json={"max_execs": 0})
    assert r.status_code == 422 and "max_execs" in r.text, r.text
    r = admin.patch("%s/v1/tenants/%s" % (stack.url, name), json={"max_execs_per_sandbox": None})
    assert r.status_code == 200 and r.json()["max_execs_per_sandbox"] is None, r.text
    out = stack.orchardctl("tenants", "set", name, "--max-execs", "4", "-o", "json")
    assert out.returncode == 0, out.stderr
    assert stack.scalar("SELECT max_execs FROM tenants WHERE name = '%s'" % name) == "4"


@pytest.fixture(scope="module")
def defaults():
    """A stack whose api limits every tenant by default: one exec running
    per sandbox, none queued."""
    s = Stack(env={"ORCHARD_EXEC_MAX_PER_SANDBOX": "1", "ORCHARD_EXEC_QUEUE_PER_SANDBOX": "0"})
    s.start()
    try:
        yield s
    finally:
        s.close()


def test_server_defaults_apply_to_tenants_without_their_own_limits(defaults):
    st = defaults
    name, s, _ = tenant(st)
    sid = new_sandbox(st, s)
    res = s.get(st.url + "/v1/resources").json()["tenant"]["execs"]
    assert (res["max_execs_per_sandbox"], res["max_queued_execs_per_sandbox"]) == (1, 0), res
    busy = exec_async(st, s, sid, "sleep 5")
    wait_status(st, s, busy, ("running",))
    r = s.post("%s/v1/sandboxes/%s/exec" % (st.url, sid), json={"command": "true"})
    assert r.status_code == 429 and "max_queued_execs_per_sandbox" in r.json()["detail"], r.text
    # the tenant's own value wins over the default
    r = st.session().patch("%s/v1/tenants/%s" % (st.url, name), json={"max_queued_execs_per_sandbox": 5})
    assert r.status_code == 200, r.text
    queued = exec_async(st, s, sid, "echo after")
    assert wait_done(st, s, queued)["stdout"] == "after\n"
    assert start_order(st, [busy, queued]) == [busy, queued] and most_at_once(st, [busy, queued]) == 1
