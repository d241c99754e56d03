"""Two orchard-api replicas over one database (issue 4, "a two-replica run"):
a job submitted through one is waited on through the other, both ways.

The session stack's api is replica A (behind nginx). Replica B is a second
orchard-api process with A's environment and its own FastCGI sockets (the
request socket and the auth socket: each replica has both); the
test speaks to B directly as nginx would after its auth_request (the
ORCHARD_TENANT/KEY/ROLE params), so it knows which replica answered.
Waiting across replicas relies on LISTEN/NOTIFY (orchard_job), since the
job's runner is the other process.
"""
import json
import os
import subprocess

import pytest

import fcgi_client
from stack import BIN
from test_api import api_pid


@pytest.fixture(scope="module")
def replica_b(stack):
    """A second orchard-api with replica A's environment; its socket path."""
    with open("/proc/%d/environ" % api_pid(stack), "rb") as f:
        env = dict(x.decode().split("=", 1) for x in f.read().split(b"\0") if b"=" in x)
    sock = os.path.join(stack.run_dir, "api-b.sock")
    env["ORCHARD_API_SOCKET"] = sock
    # stack.sh names A's auth socket; B must not try to take it.
    env["ORCHARD_API_AUTH_SOCKET"] = sock + ".auth"
    log = open(os.path.join(stack.var, "log", "api-b.log"), "ab")
    proc = subprocess.Popen([os.path.join(BIN, "orchard-api")], env=env, stdin=subprocess.DEVNULL,
                            stdout=log, stderr=log)
    try:
        stack.wait_for(lambda: os.path.exists(sock) or proc.poll() is not None, timeout=20,
                       what="replica B's socket")
        assert proc.poll() is None, "replica B exited with %s" % proc.returncode
        yield sock
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


class Replica:
    """Requests to one api socket as the admin key's tenant."""

    def __init__(self, stack, sock):
        key_id = stack.admin_key.split("_")[1]
        row = stack.psql("SELECT k.id, k.tenant_id, k.role FROM api_keys k WHERE k.key_id = '%s'"
                         % key_id)[0]
        self.sock, self.key, self.tenant, self.role = sock, row[0], row[1], row[2]

    def request(self, method, path, body=None, query=""):
        data = json.dumps(body).encode() if body is not None else b""
        params = {"REQUEST_METHOD": method, "DOCUMENT_URI": path, "SCRIPT_NAME": path,
                  "REQUEST_URI": path + ("?" + query if query else ""), "QUERY_STRING": query,
                  "CONTENT_TYPE": "application/json" if body is not None else "",
                  "CONTENT_LENGTH": str(len(data)) if body is not None else "",
                  "REQUEST_ID": os.urandom(16).hex(),
                  "ORCHARD_TENANT": self.tenant, "ORCHARD_KEY": self.key, "ORCHARD_ROLE": self.role}
        status, headers, out = fcgi_client.call(self.sock, params, data, timeout=90)
        return status, json.loads(out) if out else None


def runner_of(stack, job_id):
    return stack.scalar("SELECT runner FROM jobs WHERE id = '%s'" % job_id)


def test_submitted_through_b_waited_on_through_a(stack, admin, sandbox, replica_b):
    b = Replica(stack, replica_b)
    status, job = b.request("POST", "/v1/sandboxes/%s/exec" % sandbox,
                            {"command": "sleep 1; echo from-b", "wait": False})
    assert status == 200 and job["status"] in ("queued", "running"), (status, job)
    r = admin.get("%s/v1/jobs/%s/wait" % (stack.url, job["job_id"]), params={"timeout": 60})
    assert r.status_code == 200, r.text
    done = r.json()
    assert done["status"] == "succeeded" and done["stdout"] == "from-b\n", done
    a_job = submit_through_a(stack, admin, sandbox)
    assert runner_of(stack, job["job_id"]) != runner_of(stack, a_job)   # B ran it, not A


def submit_through_a(stack, admin, sandbox, command="true"):
    r = admin.post("%s/v1/sandboxes/%s/exec" % (stack.url, sandbox),
                   json={"command": command, "wait": True})
    assert r.status_code == 200 and r.json()["status"] == "succeeded", r.text
    return r.json()["job_id"]


def test_submitted_through_a_waited_on_through_b(stack, admin, sandbox, replica_b):
    b = Replica(stack, replica_b)
    r = admin.post("%s/v1/sandboxes/%s/exec" % (stack.url, sandbox),
                   json={"command": "sleep 1; echo from-a; exit 4", "wait": False})
    assert r.status_code == 200, r.text
    job_id = r.json()["job_id"]
    # (a wait that missed the job's end would answer "running" at its timeout)
    status, done = b.request("GET", "/v1/jobs/%s/wait" % job_id, query="timeout=60")
    assert status == 200, done
    assert done["status"] == "failed" and done["exit_code"] == 4 and done["stdout"] == "from-a\n", done
    # both replicas see the same job, and B did not run it
    assert b.request("GET", "/v1/jobs/%s" % job_id)[1] == done
    status, jobs = b.request("GET", "/v1/sandboxes/%s/jobs" % sandbox)
    assert status == 200 and job_id in [j["job_id"] for j in jobs["jobs"]], jobs


def test_b_answers_for_the_tenant_only(stack, other, sandbox, replica_b):
    """Replica B keeps tenant isolation: another tenant's view of A's sandbox is 404."""
    b = Replica(stack, replica_b)
    key_id = other.headers["X-API-Key"].split("_")[1]
    row = stack.psql("SELECT id, tenant_id, role FROM api_keys WHERE key_id = '%s'" % key_id)[0]
    b.key, b.tenant, b.role = row
    status, body = b.request("GET", "/v1/sandboxes/%s" % sandbox)
    assert status == 404 and body["code"] == "not_found", body


def test_b_has_its_own_auth_socket(stack, admin, replica_b):
    """Each replica answers nginx's key checks on its own auth socket, and
    only them."""
    key = stack.new_tenant_key("replica-auth")
    params = {"REQUEST_METHOD": "GET", "DOCUMENT_URI": "/_auth", "SCRIPT_NAME": "/_auth",
              "REQUEST_URI": "/_auth", "QUERY_STRING": "", "HTTP_X_API_KEY": key}
    status, headers, _ = fcgi_client.call(replica_b + ".auth", params, timeout=30)
    assert status == 204 and headers.get("X-Orchard-Role") == "user", (status, headers)
    status, _, _ = fcgi_client.call(replica_b + ".auth", dict(params, DOCUMENT_URI="/v1/sandboxes",
                                                              SCRIPT_NAME="/v1/sandboxes"), timeout=30)
    assert status == 404


# ---- jobs of one sandbox in acceptance order across replicas (issue 4 §3) ----

def log_command(log, n, pause="0.2"):
    """A job that brackets a pause with its number: overlap or reordering shows in the log."""
    return "echo start %d >> %s; sleep %s; echo end %d >> %s" % (n, log, pause, n, log)


def bracketed(numbers):
    return [line for n in numbers for line in ("start %d" % n, "end %d" % n)]


def submit(stack, admin, b, replica, sandbox, command, wait=False, **fields):
    """POST exec through replica "a" (nginx) or "b" (its socket): (status, body)."""
    body = dict(fields, command=command, wait=wait, serial=True)
    if replica == "a":
        r = admin.post("%s/v1/sandboxes/%s/exec" % (stack.url, sandbox), json=body)
        return r.status_code, r.json()
    return b.request("POST", "/v1/sandboxes/%s/exec" % sandbox, body)


def wait_job(stack, admin, job_id):
    r = admin.get("%s/v1/jobs/%s/wait" % (stack.url, job_id), params={"timeout": 60})
    assert r.status_code == 200, r.text
    return r.json()


def read_log(stack, admin, sandbox, log):
    r = admin.post("%s/v1/sandboxes/%s/exec" % (stack.url, sandbox),
                   json={"command": "cat %s" % log, "wait": True})
    assert r.status_code == 200 and r.json()["status"] == "succeeded", r.text
    return r.json()["stdout"].splitlines()


def new_log():
    return "/workspace/order-%s.log" % os.urandom(4).hex()


def test_async_jobs_run_in_acceptance_order_across_replicas(stack, admin, sandbox, replica_b):
    """12 jobs accepted one after another, in runs of two per replica: each
    starts after the one accepted before it ended (a per-process order would
    let a replica's second job run before the other replica's first)."""
    b, log = Replica(stack, replica_b), new_log()
    jobs = []
    for n, replica in enumerate(["a", "a", "b", "b"] * 3, 1):
        status, job = submit(stack, admin, b, replica, sandbox, log_command(log, n))
        assert status == 200 and job["status"] == "queued", (status, job)
        jobs.append(job["job_id"])
    done = [wait_job(stack, admin, j) for j in jobs]
    assert [d["status"] for d in done] == ["succeeded"] * 12, done
    assert read_log(stack, admin, sandbox, log) == bracketed(range(1, 13))
    starts = [d["started_at"] for d in done]
    assert starts == sorted(starts), starts
    # both replicas ran some of them
    assert len({runner_of(stack, j) for j in jobs}) == 2


def accepted(stack, sandbox, command):
    return stack.scalar("SELECT count(*) FROM jobs WHERE sandbox_id = '%s' AND command #>> '{}' = '%s'"
                        % (sandbox, command)) == "1"


def test_sync_and_async_jobs_share_one_order_across_replicas(stack, admin, sandbox, replica_b):
    """wait: true callers on either replica take their turn among the
    asynchronous jobs and answer with their own finished job."""
    import threading

    b, log = Replica(stack, replica_b), new_log()
    plan = [("a", False), ("b", True), ("b", False), ("a", True), ("a", False), ("b", True),
            ("b", False), ("a", False)]
    async_jobs, sync_answers, threads = [], {}, []
    for n, (replica, wait) in enumerate(plan, 1):
        command = log_command(log, n)
        if not wait:
            status, job = submit(stack, admin, b, replica, sandbox, command)
            assert status == 200, job
            async_jobs.append(job["job_id"])
            continue

        def call(n=n, replica=replica, command=command):
            sync_answers[n] = submit(stack, admin, b, replica, sandbox, command, wait=True)
        t = threading.Thread(target=call)
        t.start()
        threads.append(t)
        # the next job is accepted only after this one
        stack.wait_for(lambda: accepted(stack, sandbox, command), what="job %d accepted" % n)
    for t in threads:
        t.join(90)
    for j in async_jobs:
        assert wait_job(stack, admin, j)["status"] == "succeeded"
    for n, (status, job) in sync_answers.items():
        assert status == 200 and job["status"] == "succeeded", (n, status, job)
        assert job["stdout"] == "" and job["exit_code"] == 0, job
    assert sorted(sync_answers) == [2, 4, 6]
    assert read_log(stack, admin, sandbox, log) == bracketed(range(1, len(plan) + 1))


def test_concurrent_sync_callers_on_both_replicas_never_overlap(stack, admin, sandbox, replica_b):
    """wait: true callers racing on both replicas: accepting a job may claim
    it at once (exec.c) only when its turn has come, so however the accepts
    interleave, the jobs run one at a time in seq (acceptance) order."""
    import threading

    b, log = Replica(stack, replica_b), new_log()
    answers, threads = {}, []
    for n in range(1, 13):
        def call(n=n):
            answers[n] = submit(stack, admin, b, "a" if n % 2 else "b", sandbox,
                                log_command(log, n, "0.05"), wait=True)
        threads.append(threading.Thread(target=call))
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(answers) == list(range(1, 13)), answers
    for n, (status, job) in answers.items():
        assert status == 200 and job["status"] == "succeeded", (n, status, job)
    seq = {n: int(stack.scalar("SELECT seq FROM jobs WHERE id = '%s'" % job["job_id"]))
           for n, (status, job) in answers.items()}
    order = sorted(seq, key=seq.get)
    assert read_log(stack, admin, sandbox, log) == bracketed(order)


def test_cancelled_waiting_job_does_not_block_the_rest(stack, admin, sandbox, replica_b):
    """A job waiting for its turn behind another replica's job is cancelled
    at once (it never starts), and the jobs after it still run in order."""
    b, log = Replica(stack, replica_b), new_log()
    jobs = []
    for n, replica in enumerate(["a", "b", "a", "b"], 1):
        status, job = submit(stack, admin, b, replica, sandbox, log_command(log, n, "1" if n == 1 else "0.2"))
        assert status == 200, job
        jobs.append(job["job_id"])
    status, job = b.request("POST", "/v1/jobs/%s/cancel" % jobs[1])
    assert status == 200, job
    assert job["status"] == "failed" and job["error"] == "cancelled" and job["started_at"] is None, job
    done = [wait_job(stack, admin, j) for j in (jobs[0], jobs[2], jobs[3])]
    assert [d["status"] for d in done] == ["succeeded"] * 3, done
    assert read_log(stack, admin, sandbox, log) == bracketed([1, 3, 4])


def test_queued_job_of_a_dead_replica_fails_and_the_next_proceeds(stack, admin, sandbox, replica_b):
    """A queued job whose runner died (its lease ran out) is failed by the
    reaper of a live replica; the job accepted after it then runs."""
    b, dead = Replica(stack, replica_b), "dead-%s" % os.urandom(6).hex()
    stack.psql(
        "WITH n AS (UPDATE sandboxes SET job_seq = job_seq + 1 WHERE id = '%s'"
        " RETURNING id, tenant_id, job_seq)"
        " INSERT INTO jobs (id, sandbox_id, tenant_id, command, runner, lease_until, seq, serial)"
        " SELECT '%s', n.id, n.tenant_id, '\"true\"', 'gone-host:1:1', now() - interval '1 second',"
        " n.job_seq, true FROM n" % (sandbox, dead))
    status, job = submit(stack, admin, b, "b", sandbox, "echo after-the-dead-one", wait=True)
    assert status == 200 and job["status"] == "succeeded", job
    assert job["stdout"] == "after-the-dead-one\n"
    row = stack.psql("SELECT status, error, completed_at <= (SELECT started_at FROM jobs WHERE id = '%s')"
                     " FROM jobs WHERE id = '%s'" % (job["job_id"], dead))[0]
    assert row == ["failed", "runner died: job was not completed", "t"], row


def test_streamed_exec_waits_for_the_other_replicas_job(stack, admin, sandbox, replica_b):
    b, log = Replica(stack, replica_b), new_log()
    status, first = submit(stack, admin, b, "b", sandbox, log_command(log, 1, "1"))
    assert status == 200, first
    r = admin.post("%s/v1/sandboxes/%s/exec" % (stack.url, sandbox),
                   json={"command": log_command(log, 2) + "; echo streamed", "stream": True,
                            "serial": True})
    assert r.status_code == 200, r.text
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert lines[0]["type"] == "job" and lines[-1]["type"] == "exit", lines
    assert lines[-1]["job"]["status"] == "succeeded" and lines[-1]["job"]["stdout"] == "streamed\n", lines
    assert wait_job(stack, admin, first["job_id"])["status"] == "succeeded"
    assert read_log(stack, admin, sandbox, log) == bracketed([1, 2])


def test_sync_caller_that_gives_up_hands_its_job_over_and_it_runs_once(stack, admin, sandbox,
                                                                        replica_b):
    """wait: true gives up after timeout_seconds + 30 s without its turn (an
    earlier job still runs on the other replica): the answer is the queued
    job, which a worker of that replica runs once, after the earlier one."""
    b, log = Replica(stack, replica_b), new_log()
    # The caller gives up at 3 + 30 s, well before the first job ends; 3 s
    # (not less) so that the handed-over echo itself never times out on a
    # loaded machine.
    status, first = submit(stack, admin, b, "a", sandbox,
                           "echo start 1 >> %s; sleep 40; echo end 1 >> %s" % (log, log))
    assert status == 200, first
    status, job = submit(stack, admin, b, "b", sandbox, "echo ran 2 >> %s" % log, wait=True,
                         timeout_seconds=3)
    assert status == 200 and job["status"] == "queued" and job["started_at"] is None, job
    assert wait_job(stack, admin, job["job_id"])["status"] == "succeeded"
    assert read_log(stack, admin, sandbox, log) == ["start 1", "end 1", "ran 2"]
    assert runner_of(stack, job["job_id"]) != runner_of(stack, first["job_id"])


def test_jobs_waiting_in_a_deleted_sandbox_fail_without_starting(stack, admin, replica_b):
    b = Replica(stack, replica_b)
    r = admin.post(stack.url + "/v1/sandboxes", json={"image": "host"})
    assert r.status_code in (200, 201), r.text
    sid = r.json()["sandbox_id"]
    stack.wait_ready(admin, sid)
    status, first = submit(stack, admin, b, "a", sid, "sleep 20")
    assert status == 200, first
    status, waiting = submit(stack, admin, b, "b", sid, "echo never")
    assert status == 200, waiting
    assert admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid)).status_code in (200, 202, 204)
    done = wait_job(stack, admin, waiting["job_id"])
    assert done["status"] == "failed" and done["started_at"] is None, done
    assert "not ready" in done["error"], done
    assert wait_job(stack, admin, first["job_id"])["status"] == "failed"
