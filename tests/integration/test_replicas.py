"""Two orchard-api replicas over one database (issue 4, "a two-replica run"):
a job submitted through one is waited on through the other, both ways.

The session stack's api is replica A (behind nginx). Replica B is a second
orchard-api process with A's environment and its own FastCGI socket; the
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


def api_pid(stack):
    with open(os.path.join(stack.run_dir, "api.pid")) as f:
        return int(f.read().split()[0])


@pytest.fixture(scope="module")
def replica_b(stack):
    """A second orchard-api with replica A's environment; its socket path."""
    with open("/proc/%d/environ" % api_pid(stack), "rb") as f:
        env = dict(x.decode().split("=", 1) for x in f.read().split(b"\0") if b"=" in x)
    sock = os.path.join(stack.run_dir, "api-b.sock")
    env["ORCHARD_API_SOCKET"] = sock
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
