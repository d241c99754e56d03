"""The whole stack through HTTPS: PostgreSQL, nginx, orchard-api,
orchard-controller and real bubblewrap sandboxes, started by
scripts/stack.sh (see conftest.py). Contracts: docs/architecture.md,
../shared/reference/orchard-api.md, issue 2.
"""
import datetime
import http.client
import json
import os
import re
import ssl
import uuid

import pytest

ERROR_SHAPE = {"detail", "code", "request_id"}
SANDBOX_FIELDS = {"sandbox_id", "namespace", "image", "pod_name", "block_network", "cpu",
                  "memory", "created_at", "ready", "status", "status_message"}
CREATE_FIELDS = {"sandbox_id", "namespace", "image", "block_network", "cpu", "memory",
                 "timeout", "status"}
JOB_FIELDS = {"job_id", "sandbox_id", "command", "status", "stdout", "stderr", "exit_code",
              "created_at", "started_at", "completed_at", "error"}


def assert_error(r, statuses, code=None):
    """A JSON error {detail, code, request_id} with one of the statuses."""
    if isinstance(statuses, int):
        statuses = (statuses,)
    assert r.status_code in statuses, (r.status_code, r.text)
    assert r.headers.get("Content-Type", "").startswith("application/json"), r.headers
    body = r.json()
    assert ERROR_SHAPE <= set(body), body
    assert isinstance(body["detail"], str) and body["detail"], body
    assert body["request_id"] == r.headers["X-Request-ID"], (body, r.headers)
    if code is not None:
        assert body["code"] == code, body
    return body


def exec_(stack, s, sid, command, **kw):
    body = dict(command=command, wait=True, **kw)
    return s.post("%s/sandboxes/%s/exec" % (stack.url, sid), json=body)


def unique_id(prefix="it"):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


# ---- open routes ---------------------------------------------------------

def test_root_and_health_need_no_key(stack):
    s = stack.anonymous()
    r = s.get(stack.url + "/")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "running" and "service" in body and "version" in body
    for path in ("/health", "/v1/health"):
        r = s.get(stack.url + path)
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "healthy"
        assert re.fullmatch(r"[0-9a-f]{32}", r.headers["X-Request-ID"])


def nginx_workers(stack):
    with open(os.path.join(stack.run_dir, "nginx.pid")) as f:
        master = int(f.read().split()[0])
    with open("/proc/%d/task/%d/children" % (master, master)) as f:
        return sorted(int(p) for p in f.read().split())


def test_up_again_keeps_nginx_and_its_keepalive_connections(stack):
    """`make up` on a running stack must not reload an unchanged nginx: a
    reload drops every idle keep-alive connection, and a client reusing one
    at that moment sees the server hang up without an answer."""
    ctx = ssl.create_default_context(cafile=stack.cacert)
    conn = http.client.HTTPSConnection("127.0.0.1", stack.port, context=ctx, timeout=30)
    try:
        conn.request("GET", "/health")
        r = conn.getresponse()
        assert r.status == 200 and r.read()
        sock = conn.sock
        workers = nginx_workers(stack)
        stack.up()
        assert nginx_workers(stack) == workers
        conn.request("GET", "/health")
        r = conn.getresponse()
        assert r.status == 200 and json.loads(r.read())["status"] == "healthy"
        assert conn.sock is sock  # the same connection answered
    finally:
        conn.close()


# ---- the lifecycle ---------------------------------------------------------

def test_create_wait_exec_job_delete(stack, admin):
    before = stack.counts()
    r = admin.post(stack.url + "/sandboxes", json={"image": "host"})
    assert r.status_code in (200, 201), r.text
    created = r.json()
    assert CREATE_FIELDS <= set(created), created
    sid = created["sandbox_id"]
    assert created["image"] == "host"
    assert created["block_network"] is True
    assert created["status"] == "pending"
    assert stack.counts()["sandboxes"] == before["sandboxes"] + 1

    info = stack.wait_ready(admin, sid)
    assert SANDBOX_FIELDS <= set(info), info
    assert info["ready"] is True and info["status"] == "ready", info
    assert stack.scalar("SELECT state FROM sandboxes WHERE id = '%s'" % sid) == "ready"

    r = admin.get("%s/sandboxes/%s" % (stack.url, sid))
    assert r.status_code == 200 and r.json()["sandbox_id"] == sid
    # created_at has Orchard's type, epoch seconds as a float; created_at_iso
    # is the same instant as ISO-8601 UTC
    got = r.json()
    assert isinstance(got["created_at"], float) and isinstance(info["created_at"], float), got
    iso = datetime.datetime.strptime(got["created_at_iso"], "%Y-%m-%dT%H:%M:%S.%fZ")
    assert abs(iso.replace(tzinfo=datetime.timezone.utc).timestamp() - got["created_at"]) < 1e-3, got
    assert abs(got["created_at"] - float(stack.scalar(
        "SELECT extract(epoch FROM created_at) FROM sandboxes WHERE id = '%s'" % sid))) < 1e-3

    r = exec_(stack, admin, sid, "echo hello; echo oops >&2; pwd")
    assert r.status_code == 200, r.text
    job = r.json()
    assert JOB_FIELDS <= set(job), job
    assert job["status"] == "succeeded", job
    assert job["exit_code"] == 0
    assert job["stdout"] == "hello\n/workspace\n"
    assert job["stderr"] == "oops\n"
    assert job["sandbox_id"] == sid
    assert job["error"] is None
    for t in ("created_at", "started_at", "completed_at"):
        assert isinstance(job[t], float), (t, job[t])
    assert job["created_at"] <= job["started_at"] <= job["completed_at"]

    r = admin.get("%s/jobs/%s" % (stack.url, job["job_id"]))
    assert r.status_code == 200, r.text
    again = r.json()
    for k in ("job_id", "status", "stdout", "stderr", "exit_code"):
        assert again[k] == job[k], k
    assert stack.scalar("SELECT status FROM jobs WHERE id = '%s'" % job["job_id"]) == "succeeded"

    r = admin.delete("%s/sandboxes/%s" % (stack.url, sid))
    assert r.status_code == 200, r.text
    assert r.json() == {"status": "deleted", "sandbox_id": sid}
    r = admin.get("%s/sandboxes/%s" % (stack.url, sid))
    assert_error(r, 404)
    # The controller tears it down.
    stack.wait_for(lambda: stack.scalar("SELECT state FROM sandboxes WHERE id = '%s'" % sid)
                   == "deleted", timeout=30, what="sandbox %s deleted" % sid)


def test_delete_of_unknown_id_is_200(stack, admin):
    r = admin.delete(stack.url + "/sandboxes/never-existed-1")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "deleted"


def test_exec_exit_code_is_reported(stack, admin, sandbox):
    r = exec_(stack, admin, sandbox, "exit 3")
    assert r.status_code == 200, r.text
    job = r.json()
    assert job["exit_code"] == 3
    assert job["status"] == "failed"
    r = exec_(stack, admin, sandbox, ["sh", "-c", "exit 3"])
    assert r.json()["exit_code"] == 3


def test_exec_argv_runs_without_a_shell(stack, admin, sandbox):
    job = exec_(stack, admin, sandbox, ["echo", "a  b", "$HOME", "*"]).json()
    assert job["exit_code"] == 0, job
    assert job["stdout"] == "a  b $HOME *\n"
    job = exec_(stack, admin, sandbox, "echo 'a  b' $((1 + 2))").json()
    assert job["stdout"] == "a  b 3\n"


def test_exec_cwd_and_env(stack, admin, sandbox):
    job = exec_(stack, admin, sandbox, "echo $FOO; pwd", env={"FOO": "bar"}, cwd="/tmp").json()
    assert job["stdout"] == "bar\n/tmp\n", job


def test_exec_sees_shell_unless_it_sets_its_own(stack, admin, sandbox):
    # The sandbox's environment has no SHELL; the agent gives its shell.
    job = exec_(stack, admin, sandbox, "echo $SHELL").json()
    assert job["stdout"] == "/bin/bash\n", job
    job = exec_(stack, admin, sandbox, ["env"], env={"SHELL": "/bin/sh"}).json()
    assert [line for line in job["stdout"].splitlines() if line.startswith("SHELL=")] == \
        ["SHELL=/bin/sh"], job


def test_exec_missing_program(stack, admin, sandbox):
    job = exec_(stack, admin, sandbox, ["/no/such/program"]).json()
    assert job["exit_code"] == 127, job
    assert job["status"] == "failed"


# ---- request ids -----------------------------------------------------------

def test_request_id_generated_and_passed_through(stack, admin):
    r = admin.get(stack.url + "/sandboxes")
    assert r.status_code == 200, r.text
    assert re.fullmatch(r"[0-9a-f]{32}", r.headers["X-Request-ID"])
    r = admin.get(stack.url + "/sandboxes", headers={"X-Request-ID": "my-trace.1_A"})
    assert r.headers["X-Request-ID"] == "my-trace.1_A"
    r = admin.get(stack.url + "/sandboxes/NOT_VALID", headers={"X-Request-ID": "my-trace.2"})
    body = r.json()
    assert r.headers["X-Request-ID"] == "my-trace.2" and body["request_id"] == "my-trace.2"
    r = admin.get(stack.url + "/sandboxes", headers={"X-Request-ID": "bad id <script>"})
    assert re.fullmatch(r"[0-9a-f]{32}", r.headers["X-Request-ID"])


# ---- auth ------------------------------------------------------------------

def test_no_key_is_401(stack):
    s = stack.anonymous()
    for method, path in (("GET", "/sandboxes"), ("POST", "/sandboxes"),
                         ("GET", "/jobs/x"), ("GET", "/v1/sandboxes")):
        body = assert_error(s.request(method, stack.url + path, json={"image": "host"}),
                            401, "unauthorized")
        assert "API key" in body["detail"]


def test_wrong_and_malformed_keys_are_403(stack):
    key = stack.admin_key
    wrong_secret = key[:-4] + ("AAAA" if not key.endswith("AAAA") else "BBBB")
    for bad in (wrong_secret, "garbage", "orc_nokey_", "x" * 5000, key + "x"):
        r = stack.session(key=bad).get(stack.url + "/sandboxes")
        assert_error(r, 403, "forbidden")


def test_bearer_works(stack):
    r = stack.session(bearer=True).get(stack.url + "/sandboxes")
    assert r.status_code == 200, r.text
    r = stack.session(key="garbage", bearer=True).get(stack.url + "/sandboxes")
    assert_error(r, 403)


def test_revoked_key_is_403(stack):
    key = stack.new_tenant_key("default")
    s = stack.session(key=key)
    assert s.get(stack.url + "/sandboxes").status_code == 200  # now cached
    # the key's database id, found by its public key_id part
    key_row = None
    for row in stack.psql("SELECT id, key_id FROM api_keys WHERE revoked_at IS NULL"):
        if row[1] and "_%s_" % row[1] in key:
            key_row = row
    assert key_row, "key id of %r not found in api_keys" % key
    r = stack.admin("key", "revoke", key_row[0], check=False)
    if r.returncode != 0:  # accept the public key_id as the argument too
        stack.admin("key", "revoke", key_row[1])
    assert stack.scalar("SELECT revoked_at IS NOT NULL FROM api_keys WHERE id = %s"
                        % key_row[0]) == "t"
    stack.wait_for(lambda: s.get(stack.url + "/sandboxes").status_code == 403,
                   timeout=10, what="revoked key refused")
    assert_error(s.get(stack.url + "/sandboxes"), 403, "forbidden")


def test_other_tenant_sees_404(stack, admin, other, sandbox):
    url = "%s/sandboxes/%s" % (stack.url, sandbox)
    assert_error(other.get(url), 404)
    assert_error(other.get(url + "/wait", params={"timeout": 1}), 404)
    before = stack.counts()
    assert_error(other.post(url + "/exec", json={"command": "echo hi", "wait": True}), 404)
    r = other.delete(url)
    assert r.status_code == 200, r.text
    assert stack.counts()["jobs"] == before["jobs"]
    assert stack.scalar("SELECT state FROM sandboxes WHERE id = '%s'" % sandbox) == "ready"
    assert admin.get(url).json()["status"] == "ready"
    # and a forged tenant header changes nothing
    tenant = stack.scalar("SELECT id FROM tenants WHERE name = 'default'")
    assert_error(other.get(url, headers={"X-Orchard-Tenant": tenant}), 404)
    r = other.get(stack.url + "/sandboxes")
    assert r.status_code == 200
    assert sandbox not in r.text


def test_other_tenant_cannot_read_jobs(stack, admin, other, sandbox):
    job = exec_(stack, admin, sandbox, "echo secret").json()
    assert_error(other.get("%s/jobs/%s" % (stack.url, job["job_id"])), 404)


# ---- bad input writes nothing --------------------------------------------

BAD_CREATES = [
    ("malformed json", b'{"image": "host"', (400, 422)),
    ("not an object", b'["host"]', (400, 422)),
    ("empty body", b"", (400, 422)),
    ("missing image", b"{}", (400, 422)),
    ("image not a string", b'{"image": 5}', (400, 422)),
    ("empty image", b'{"image": ""}', (400, 422)),
    ("block_network not a bool", b'{"image": "host", "block_network": "yes"}', (400, 422)),
    ("cpu a list", b'{"image": "host", "cpu": []}', (400, 422)),
    ("bad cpu", b'{"image": "host", "cpu": "lots"}', (400, 422)),
    ("bad memory", b'{"image": "host", "memory": "16 furlongs"}', (400, 422)),
    ("timeout a string", b'{"image": "host", "timeout": "soon"}', (400, 422)),
    ("bad sandbox id", b'{"image": "host", "sandbox_id": "Bad_ID!"}', (422,)),
    ("too long sandbox id", json.dumps({"image": "host", "sandbox_id": "a" * 64}).encode(),
     (422,)),
    ("nul in image", b'{"image": "ho\\u0000st"}', (400, 422)),
]


@pytest.mark.parametrize("name,body,statuses", BAD_CREATES, ids=[b[0] for b in BAD_CREATES])
def test_bad_create_is_4xx_and_writes_nothing(stack, admin, name, body, statuses):
    before = stack.counts()
    r = admin.post(stack.url + "/sandboxes", data=body,
                   headers={"Content-Type": "application/json"})
    assert_error(r, statuses)
    assert stack.counts() == before


BAD_EXECS = [
    ("malformed json", b'{"command": "echo"'),
    ("missing command", b'{"wait": true}'),
    ("command a number", b'{"command": 5, "wait": true}'),
    ("argv with a number", b'{"command": ["echo", 1], "wait": true}'),
    ("empty argv", b'{"command": [], "wait": true}'),
    ("env not an object", b'{"command": "true", "env": "A=1", "wait": true}'),
    ("env value not a string", b'{"command": "true", "env": {"A": 1}, "wait": true}'),
    ("timeout negative", b'{"command": "true", "timeout_seconds": -1, "wait": true}'),
    ("wait not a bool", b'{"command": "true", "wait": "yes"}'),
]


@pytest.mark.parametrize("name,body", BAD_EXECS, ids=[b[0] for b in BAD_EXECS])
def test_bad_exec_is_4xx_and_writes_nothing(stack, admin, sandbox, name, body):
    before = stack.counts()
    r = admin.post("%s/sandboxes/%s/exec" % (stack.url, sandbox), data=body,
                   headers={"Content-Type": "application/json"})
    assert_error(r, (400, 422))
    assert stack.counts() == before


def test_exec_on_unknown_sandbox_is_404(stack, admin):
    before = stack.counts()
    r = admin.post(stack.url + "/sandboxes/no-such-box/exec", json={"command": "true",
                                                                   "wait": True})
    assert_error(r, 404)
    assert stack.counts() == before


def test_unknown_job_and_sandbox_are_404(stack, admin):
    assert_error(admin.get(stack.url + "/jobs/no-such-job"), 404)
    assert_error(admin.get(stack.url + "/sandboxes/no-such-box"), 404)
    assert_error(admin.get(stack.url + "/sandboxes/no-such-box/wait?timeout=1"), 404)


def test_bad_sandbox_id_in_path_is_422_or_404(stack, admin):
    # (not "..": nginx normalises /sandboxes/.. to /, the open root route)
    for bad in ("Bad_ID", "a" * 200, "x%00y", "x%2Fy", "-leading-dash"):
        r = admin.get("%s/sandboxes/%s" % (stack.url, bad))
        assert_error(r, (400, 404, 422))


def test_unknown_route_is_404(stack, admin):
    before = stack.counts()
    for path in ("/nope", "/v1/nope", "/sandboxes/x/y/z", "/v2/sandboxes"):
        assert_error(admin.get(stack.url + path), 404)
    assert_error(admin.post(stack.url + "/nope", json={"image": "host"}), 404)
    assert stack.counts() == before


def test_wrong_method_is_405(stack, admin):
    before = stack.counts()
    for method, path in (("PUT", "/sandboxes"), ("PATCH", "/sandboxes"),
                         ("DELETE", "/sandboxes"), ("PUT", "/jobs/x"),
                         ("GET", "/sandboxes/x/exec"), ("POST", "/health")):
        r = admin.request(method, stack.url + path, json={"image": "host"})
        assert_error(r, 405)
    assert stack.counts() == before


def test_huge_body_is_413(stack, admin):
    before = stack.counts()
    big = b'{"image": "host", "x": "' + b"a" * (65 * 1024 * 1024) + b'"}'
    r = admin.post(stack.url + "/sandboxes", data=big,
                   headers={"Content-Type": "application/json"})
    assert_error(r, 413)
    assert stack.counts() == before


def test_duplicate_sandbox_id_is_409(stack, admin):
    sid = unique_id("dup")
    r = admin.post(stack.url + "/sandboxes", json={"image": "host", "sandbox_id": sid})
    assert r.status_code in (200, 201), r.text
    assert r.json()["sandbox_id"] == sid
    try:
        before = stack.counts()
        r = admin.post(stack.url + "/sandboxes", json={"image": "host", "sandbox_id": sid})
        assert_error(r, 409)
        assert stack.counts() == before
    finally:
        admin.delete("%s/sandboxes/%s" % (stack.url, sid))


# ---- /v1 ---------------------------------------------------------------

def test_v1_prefix_is_the_same_api(stack, admin, sandbox):
    a = admin.get("%s/sandboxes/%s" % (stack.url, sandbox))
    b = admin.get("%s/v1/sandboxes/%s" % (stack.url, sandbox))
    assert a.status_code == b.status_code == 200
    assert a.json() == b.json()
    r = admin.post("%s/v1/sandboxes/%s/exec" % (stack.url, sandbox),
                   json={"command": "echo v1", "wait": True})
    assert r.status_code == 200, r.text
    job = r.json()
    assert job["stdout"] == "v1\n"
    a = admin.get("%s/jobs/%s" % (stack.url, job["job_id"])).json()
    b = admin.get("%s/v1/jobs/%s" % (stack.url, job["job_id"])).json()
    assert a == b


def test_v1_lifecycle(stack, admin):
    r = admin.post(stack.url + "/v1/sandboxes", json={"image": "host"})
    assert r.status_code in (200, 201), r.text
    sid = r.json()["sandbox_id"]
    r = admin.get("%s/v1/sandboxes/%s/wait" % (stack.url, sid), params={"timeout": 60})
    assert r.status_code == 200 and r.json()["status"] == "ready", r.text
    r = admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))
    assert r.status_code == 200 and r.json()["status"] == "deleted", r.text
    assert_error(admin.get("%s/v1/sandboxes/%s" % (stack.url, sid)), 404)
    assert_error(stack.anonymous().get(stack.url + "/v1/sandboxes"), 401)


# ---- orchardctl ----------------------------------------------------------

def test_orchardctl_end_to_end(stack):
    r = stack.orchardctl("create", "host", "--wait")
    assert r.returncode == 0, (r.stdout, r.stderr)
    sid = r.stdout.strip()
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", sid), r.stdout
    try:
        r = stack.orchardctl("exec", sid, "--", "echo", "hi")
        assert (r.returncode, r.stdout) == (0, "hi\n"), (r.returncode, r.stdout, r.stderr)
        r = stack.orchardctl("exec", sid, "--", "sh", "-c", "echo err >&2; exit 3")
        assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
        assert r.stderr.endswith("err\n"), r.stderr
        r = stack.orchardctl("get", sid, "-o", "json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["status"] == "ready"
        r = stack.orchardctl("ls")
        assert r.returncode == 0 and sid in r.stdout, (r.stdout, r.stderr)
    finally:
        r = stack.orchardctl("rm", sid)
    assert r.returncode == 0, (r.stdout, r.stderr)
    r = stack.orchardctl("get", sid)
    assert r.returncode != 0


def test_orchardctl_bad_key_fails(stack):
    r = stack.orchardctl("ls", key="garbage")
    assert r.returncode != 0
    assert r.stderr.strip(), "orchardctl should say what went wrong"
