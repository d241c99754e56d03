"""orchard-api beyond the skeleton (issue 4), through the real stack:
runner leases, quotas and the admin routes, job listing and cancel,
/resources and readiness, Kubernetes label rules.

Every test of bad input also checks that nothing was written (row counts
through the fixture's psql helper).
"""
import os
import re
import signal
import time
import uuid

import pytest

ERROR_SHAPE = {"detail", "code", "request_id"}
RUNNER_DIED = "runner died: job was not completed"
# api/api.h: LEASE_S, LEASE_RENEW_S, LEASE_REAP_S
LEASE_S, RENEW_S, REAP_S = 30, 10, 10


def assert_error(r, status, code=None):
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json()
    assert ERROR_SHAPE <= set(body), body
    assert body["detail"], body
    if code is not None:
        assert body["code"] == code, body
    return body


def unique(prefix="api"):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def q(s):
    """A SQL string literal (test-made values only)."""
    return "'" + s.replace("'", "''") + "'"


def exec_async(stack, s, sid, command, **kw):
    r = s.post("%s/sandboxes/%s/exec" % (stack.url, sid), json=dict(command=command, **kw))
    assert r.status_code == 200, r.text
    return r.json()["job_id"]


def exec_wait(stack, s, sid, command, **kw):
    r = s.post("%s/sandboxes/%s/exec" % (stack.url, sid),
               json=dict(command=command, wait=True, **kw))
    assert r.status_code == 200, r.text
    return r.json()


def get_job(stack, s, job_id):
    r = s.get("%s/jobs/%s" % (stack.url, job_id))
    assert r.status_code == 200, r.text
    return r.json()


def wait_status(stack, s, job_id, statuses, timeout=30):
    return stack.wait_for(lambda: (lambda j: j if j["status"] in statuses else None)(
        get_job(stack, s, job_id)), timeout=timeout, what="job %s in %s" % (job_id, statuses))


def api_pid(stack):
    with open(os.path.join(stack.var, "run", "api.pid")) as f:
        return int(f.read().split()[0])


# ---- 1. runner leases ------------------------------------------------------

def test_jobs_carry_a_runner_and_a_lease(stack, admin, sandbox):
    job = exec_wait(stack, admin, sandbox, "true")
    runner, lease_ok = stack.psql(
        "SELECT runner, lease_until > created_at FROM jobs WHERE id = %s" % q(job["job_id"]))[0]
    # hostname:pid:starttime, the pid being the api process of the stack
    m = re.fullmatch(r"(.+):(\d+):(\d+)", runner)
    assert m and int(m.group(2)) == api_pid(stack), runner
    assert lease_ok == "t"


def test_killed_runner_fails_its_job_and_never_reruns_it(stack, admin, sandbox):
    marker = "/workspace/%s" % unique("runs")
    job_id = exec_async(stack, admin, sandbox, "echo x >> %s; sleep 30" % marker)
    wait_status(stack, admin, job_id, ("running",))
    lease0 = stack.scalar("SELECT lease_until FROM jobs WHERE id = %s" % q(job_id))
    # the owner renews the lease while the job runs
    stack.wait_for(lambda: stack.scalar("SELECT lease_until > %s::timestamptz FROM jobs WHERE id = %s"
                                        % (q(lease0), q(job_id))) == "t",
                   timeout=RENEW_S + 5, what="lease renewed")

    pid = api_pid(stack)
    os.kill(pid, signal.SIGKILL)
    stack.wait_for(lambda: not os.path.exists("/proc/%d" % pid), timeout=10, what="api gone")
    killed_at = time.monotonic()
    stack.up()  # restarts what is missing: the api
    assert api_pid(stack) != pid

    job = stack.wait_for(
        lambda: (lambda j: j if j["status"] != "running" else None)(get_job(stack, admin, job_id)),
        timeout=LEASE_S + REAP_S + RENEW_S + 15, what="job of the dead runner failed")
    assert time.monotonic() - killed_at >= 5, "the lease was not honoured"
    assert job["status"] == "failed", job
    assert job["error"] == RUNNER_DIED, job
    assert job["completed_at"] is not None and job["exit_code"] is None, job
    assert stack.scalar("SELECT count(*) FROM events WHERE job_id = %s AND kind = 'exec.finish'"
                        % q(job_id)) == "1"
    # It ran once: the agent finished the first run (the sandbox runs one
    # command at a time), nobody ran it again, and the sandbox still works.
    assert exec_wait(stack, admin, sandbox, "cat %s" % marker)["stdout"] == "x\n"
    time.sleep(1)
    assert get_job(stack, admin, job_id)["status"] == "failed"


# ---- 2. admin routes and quotas ----------------------------------------------

def tenant_row(stack, name):
    rows = stack.psql("SELECT max_sandboxes, max_cpu_millis, max_memory_bytes FROM tenants"
                      " WHERE name = %s" % q(name))
    return rows[0] if rows else None


def test_admin_routes_need_an_admin_key(stack, admin, other):
    name = unique("adm")
    assert admin.post(stack.url + "/v1/tenants", json={"name": name}).status_code == 201
    before, row = stack.counts(), tenant_row(stack, name)
    for method, path, body in (("GET", "/v1/tenants", None),
                               ("POST", "/v1/tenants", {"name": unique("adm")}),
                               ("PATCH", "/v1/tenants/" + name, {"max_sandboxes": 0}),
                               ("GET", "/v1/keys", None),
                               ("DELETE", "/v1/keys/1", None),
                               ("GET", "/tenants", None)):
        body = assert_error(other.request(method, stack.url + path, json=body), 403, "forbidden")
        assert "admin" in body["detail"], body
    assert stack.counts() == before
    assert tenant_row(stack, name) == row
    assert stack.scalar("SELECT count(*) FROM api_keys WHERE revoked_at IS NOT NULL AND id = 1") == "0"
    assert_error(stack.anonymous().get(stack.url + "/v1/tenants"), 401)


def test_tenants_create_list_patch(stack, admin):
    name = unique("ten")
    r = admin.post(stack.url + "/v1/tenants",
                   json={"name": name, "max_sandboxes": 3, "max_memory_bytes": 1 << 30})
    assert r.status_code == 201, r.text
    t = r.json()
    assert t["name"] == name and t["max_sandboxes"] == 3 and t["max_cpu_millis"] is None
    assert t["max_memory_bytes"] == 1 << 30
    assert t["usage"] == {"sandboxes": 0, "cpu_millis": 0, "memory_bytes": 0}
    assert tenant_row(stack, name) == ["3", "", str(1 << 30)]

    r = admin.get(stack.url + "/v1/tenants")
    assert r.status_code == 200, r.text
    names = [x["name"] for x in r.json()["tenants"]]
    assert name in names and "default" in names and names == sorted(names)

    r = admin.patch(stack.url + "/v1/tenants/" + name,
                    json={"max_cpu_millis": 500, "max_memory_bytes": None})
    assert r.status_code == 200, r.text
    t = r.json()
    assert (t["max_sandboxes"], t["max_cpu_millis"], t["max_memory_bytes"]) == (3, 500, None)
    assert tenant_row(stack, name) == ["3", "500", ""]
    # unprefixed too
    r = admin.patch(stack.url + "/tenants/" + name, json={"max_sandboxes": None})
    assert r.status_code == 200 and r.json()["max_sandboxes"] is None, r.text


@pytest.mark.parametrize("body", [
    {}, {"name": "Bad_Name"}, {"name": ""}, {"name": 5}, {"name": "x" * 64},
    {"name": "ok-name", "max_sandboxes": -1}, {"name": "ok-name", "max_sandboxes": "2"},
    {"name": "ok-name", "max_cpu_millis": 0}, {"name": "ok-name", "max_memory_bytes": 1.5},
    {"name": "ok-name", "max_sandbox": 1},
])
def test_tenant_create_rejects_bad_input(stack, admin, body):
    before = stack.counts()
    assert_error(admin.post(stack.url + "/v1/tenants", json=body), 422, "invalid")
    assert stack.counts() == before


def test_tenant_create_conflict_and_patch_errors(stack, admin):
    name = unique("ten")
    assert admin.post(stack.url + "/v1/tenants", json={"name": name, "max_sandboxes": 1}).status_code == 201
    before, row = stack.counts(), tenant_row(stack, name)
    assert_error(admin.post(stack.url + "/v1/tenants", json={"name": name}), 409, "conflict")
    url = stack.url + "/v1/tenants/" + name
    for body in ({}, {"max_sandboxes": -1}, {"max_cpu_millis": "1"}, {"name": "other"},
                 {"max_memory_bytes": 0}):
        assert_error(admin.patch(url, json=body), 422, "invalid")
    assert_error(admin.patch(url, data="not json", headers={"Content-Type": "application/json"}),
                 400, "bad_request")
    assert_error(admin.patch(stack.url + "/v1/tenants/no-such-tenant", json={"max_sandboxes": 1}),
                 404, "not_found")
    assert_error(admin.patch(stack.url + "/v1/tenants/NOT_A_NAME", json={"max_sandboxes": 1}), 404)
    assert stack.counts() == before
    assert tenant_row(stack, name) == row


def test_quota_max_sandboxes_is_exact_under_concurrency(stack, admin):
    import concurrent.futures
    name = unique("qsb")
    assert admin.post(stack.url + "/v1/tenants", json={"name": name, "max_sandboxes": 2}).status_code == 201
    s = stack.session(key=stack.new_tenant_key(name))
    body = {"image": "host", "cpu": "100m", "memory": "256Mi"}
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        rs = list(pool.map(lambda _: s.post(stack.url + "/sandboxes", json=body), range(6)))
    ok = [r for r in rs if r.status_code == 200]
    refused = [r for r in rs if r.status_code == 429]
    assert len(ok) == 2 and len(refused) == 4, [(r.status_code, r.text) for r in rs]
    for r in refused:
        detail = assert_error(r, 429, "quota_exceeded")["detail"]
        assert "max_sandboxes" in detail and " 2 " in detail, detail
    tid = stack.scalar("SELECT id FROM tenants WHERE name = %s" % q(name))
    assert stack.scalar("SELECT count(*) FROM sandboxes WHERE tenant_id = %s" % tid) == "2"
    assert stack.scalar("SELECT count(*) FROM events WHERE tenant_id = %s"
                        " AND kind = 'sandbox.create'" % tid) == "2"
    # a deleted sandbox frees its slot
    sid = ok[0].json()["sandbox_id"]
    assert s.delete("%s/sandboxes/%s" % (stack.url, sid)).status_code == 200
    r = s.post(stack.url + "/sandboxes", json=body)
    assert r.status_code == 200, r.text
    # raising the quota lets more in
    assert_error(s.post(stack.url + "/sandboxes", json=body), 429, "quota_exceeded")
    assert admin.patch(stack.url + "/v1/tenants/" + name, json={"max_sandboxes": 3}).status_code == 200
    r2 = s.post(stack.url + "/sandboxes", json=body)
    assert r2.status_code == 200, r2.text
    for x in (ok[1], r, r2):
        s.delete("%s/sandboxes/%s" % (stack.url, x.json()["sandbox_id"]))


def test_quota_cpu_and_memory_per_sandbox(stack, admin):
    name = unique("qcm")
    assert admin.post(stack.url + "/v1/tenants", json={
        "name": name, "max_cpu_millis": 1000, "max_memory_bytes": 512 << 20}).status_code == 201
    s = stack.session(key=stack.new_tenant_key(name))
    before = stack.counts()
    detail = assert_error(s.post(stack.url + "/sandboxes", json={"image": "host", "cpu": "2",
                                                                "memory": "256Mi"}),
                          429, "quota_exceeded")["detail"]
    assert "max_cpu_millis" in detail and "1000" in detail and "2000" in detail, detail
    detail = assert_error(s.post(stack.url + "/sandboxes", json={"image": "host", "cpu": "1"}),
                          429, "quota_exceeded")["detail"]  # memory defaults to 1Gi
    assert "max_memory_bytes" in detail and str(512 << 20) in detail and str(1 << 30) in detail
    assert stack.counts() == before
    r = s.post(stack.url + "/sandboxes", json={"image": "host", "cpu": "1", "memory": "512Mi"})
    assert r.status_code == 200, r.text
    s.delete("%s/sandboxes/%s" % (stack.url, r.json()["sandbox_id"]))


def test_keys_list_and_revoke(stack, admin):
    name = unique("key")
    assert admin.post(stack.url + "/v1/tenants", json={"name": name}).status_code == 201
    key = stack.new_tenant_key(name)
    key_id = key.split("_")[1]
    s = stack.session(key=key)
    assert s.get(stack.url + "/sandboxes").status_code == 200

    r = admin.get(stack.url + "/v1/keys", params={"tenant": name})
    assert r.status_code == 200, r.text
    keys = r.json()["keys"]
    assert [k["key_id"] for k in keys] == [key_id], keys
    k = keys[0]
    assert k["tenant"] == name and k["role"] == "user" and k["revoked"] is False
    assert k["revoked_at"] is None
    assert key.split("_")[2] not in r.text and "argon2" not in r.text
    r = admin.get(stack.url + "/v1/keys")
    assert key_id in [x["key_id"] for x in r.json()["keys"]]

    before = stack.counts()
    assert_error(admin.get(stack.url + "/v1/keys", params={"tenant": "no-such-tenant"}), 404)
    assert_error(admin.get(stack.url + "/v1/keys", params={"tenant": "Bad Name"}), 422)
    assert_error(admin.delete(stack.url + "/v1/keys/999999999"), 404, "not_found")
    assert_error(admin.delete(stack.url + "/v1/keys/NOT_A_KEY"), 404)
    assert_error(admin.delete(stack.url + "/v1/keys/ffffffffffff"), 404)
    assert stack.counts() == before
    assert stack.scalar("SELECT count(*) FROM api_keys WHERE revoked_at IS NOT NULL"
                        " AND tenant_id = (SELECT id FROM tenants WHERE name = %s)" % q(name)) == "0"

    r = admin.delete(stack.url + "/v1/keys/" + key_id)
    assert r.status_code == 200, r.text
    revoked = r.json()
    assert revoked["revoked"] is True and revoked["revoked_at"], revoked
    stack.wait_for(lambda: s.get(stack.url + "/sandboxes").status_code == 403,
                   timeout=10, what="revoked key refused")
    # again, by numeric id: the same answer, the first revocation time kept
    r = admin.delete("%s/v1/keys/%d" % (stack.url, k["id"]))
    assert r.status_code == 200 and r.json()["revoked_at"] == revoked["revoked_at"], r.text


def test_key_create_over_the_api(stack, admin, other):
    name = unique("kc")
    assert admin.post(stack.url + "/v1/tenants", json={"name": name}).status_code == 201
    r = admin.post(stack.url + "/v1/keys", json={"tenant": name, "name": "ci runner \u00e9"})
    assert r.status_code == 201, r.text
    made = r.json()
    key = made["key"]
    assert re.fullmatch(r"orch_[0-9a-f]{12}_[0-9a-f]{40}", key), made
    assert made["key_id"] == key.split("_")[1] and made["tenant"] == name
    assert made["role"] == "user" and made["name"] == "ci runner \u00e9" and made["revoked"] is False
    s = stack.session(key=key)
    assert s.get(stack.url + "/sandboxes").status_code == 200
    assert_error(s.get(stack.url + "/v1/tenants"), 403)        # a user key is no admin
    listed = admin.get(stack.url + "/v1/keys", params={"tenant": name}).json()["keys"]
    assert [k["key_id"] for k in listed] == [made["key_id"]]
    assert key.split("_")[2] not in str(listed)                 # shown once, never again

    r = admin.post(stack.url + "/keys", json={"tenant": name, "role": "admin"})
    assert r.status_code == 201 and r.json()["role"] == "admin" and r.json()["name"] is None, r.text
    assert stack.session(key=r.json()["key"]).get(stack.url + "/v1/tenants").status_code == 200

    before = stack.counts()
    for body, status in ((None, 400), ({}, 422), ({"tenant": "no-such-tenant"}, 404),
                         ({"tenant": "Bad Name"}, 422), ({"tenant": 7}, 422),
                         ({"tenant": name, "role": "root"}, 422), ({"tenant": name, "role": 1}, 422),
                         ({"tenant": name, "name": "x" * 201}, 422),
                         ({"tenant": name, "name": "a\nb"}, 422),
                         ({"tenant": name, "secret": "mine"}, 422), ([name], 400)):
        kw = {"data": b"{"} if body is None else {"json": body}
        assert_error(admin.post(stack.url + "/v1/keys", **kw), status)
    assert_error(other.post(stack.url + "/v1/keys", json={"tenant": name}), 403)
    assert stack.counts() == before


# ---- 3. job lists and cancel ----------------------------------------------------

def new_sandbox(stack, s, **kw):
    r = s.post(stack.url + "/sandboxes", json=dict(image="host", cpu="500m", memory="512Mi", **kw))
    assert r.status_code == 200, r.text
    sid = r.json()["sandbox_id"]
    assert stack.wait_ready(s, sid)["status"] == "ready"
    return sid


def test_job_list_newest_first_with_cursor(stack, admin, other):
    sid = new_sandbox(stack, admin)
    try:
        ids = [exec_wait(stack, admin, sid, "echo %d" % i)["job_id"] for i in range(5)]
        url = "%s/v1/sandboxes/%s/jobs" % (stack.url, sid)
        r = admin.get(url)
        assert r.status_code == 200, r.text
        body = r.json()
        assert [j["job_id"] for j in body["jobs"]] == ids[::-1] and body["next_cursor"] is None
        j = body["jobs"][0]
        assert "stdout" not in j and "stderr" not in j, j
        assert j["status"] == "succeeded" and j["stdout_bytes"] == 2 and j["command"] == "echo 4"
        seen, cursor = [], None
        while True:
            params = {"limit": 2}
            if cursor:
                params["cursor"] = cursor
            page = admin.get(url, params=params).json()
            assert len(page["jobs"]) <= 2
            seen += [x["job_id"] for x in page["jobs"]]
            cursor = page["next_cursor"]
            if not cursor:
                break
        assert seen == ids[::-1]
        # unprefixed too
        assert admin.get("%s/sandboxes/%s/jobs" % (stack.url, sid)).json()["jobs"][0]["job_id"] == ids[-1]

        before = stack.counts()
        for params in ({"limit": 0}, {"limit": 501}, {"limit": "x"}, {"cursor": "nope"},
                       {"cursor": "12_NOT_AN_ID"}):
            assert_error(admin.get(url, params=params), 422, "invalid")
        assert_error(other.get(url), 404, "not_found")
        assert_error(admin.get("%s/v1/sandboxes/no-such-sb/jobs" % stack.url), 404)
        assert stack.counts() == before
    finally:
        admin.delete("%s/sandboxes/%s" % (stack.url, sid))
    assert_error(admin.get("%s/v1/sandboxes/%s/jobs" % (stack.url, sid)), 404)


def test_cancel_queued_job(stack, admin, other, sandbox):
    marker = "/workspace/%s" % unique("cancelled")
    first = exec_async(stack, admin, sandbox, "sleep 3", serial=True)
    queued = exec_async(stack, admin, sandbox, "touch %s" % marker, serial=True)
    before = stack.counts()
    assert_error(other.post("%s/jobs/%s/cancel" % (stack.url, queued)), 404, "not_found")
    assert_error(admin.post("%s/jobs/no-such-job/cancel" % stack.url), 404, "not_found")
    assert_error(admin.get("%s/jobs/%s/cancel" % (stack.url, queued)), 405)
    assert get_job(stack, admin, queued)["status"] == "queued"

    r = admin.post("%s/v1/jobs/%s/cancel" % (stack.url, queued))
    assert r.status_code == 200, r.text
    job = r.json()
    assert job["status"] == "failed" and job["error"] == "cancelled", job
    assert job["started_at"] is None and job["completed_at"] is not None
    assert stack.counts() == before
    assert stack.scalar("SELECT count(*) FROM events WHERE job_id = %s AND kind = 'exec.cancel'"
                        % q(queued)) == "1"
    # a finished job cannot be cancelled, and the cancelled one never runs
    assert_error(admin.post("%s/jobs/%s/cancel" % (stack.url, queued)), 409, "conflict")
    assert wait_status(stack, admin, first, ("succeeded", "failed"))["status"] == "succeeded"
    assert_error(admin.post("%s/jobs/%s/cancel" % (stack.url, first)), 409, "conflict")
    r = exec_wait(stack, admin, sandbox, "test -e %s; echo $?" % marker)
    assert r["stdout"] == "1\n", r
    assert get_job(stack, admin, queued)["error"] == "cancelled"


def test_cancel_running_job(stack, admin, sandbox):
    job_id = exec_async(stack, admin, sandbox, "sleep 8; echo finished")
    wait_status(stack, admin, job_id, ("running",))
    t0 = time.monotonic()
    r = admin.post("%s/jobs/%s/cancel" % (stack.url, job_id))
    if r.status_code == 200:
        # the agent knows POST /exec/cancel: the command was killed
        job = wait_status(stack, admin, job_id, ("failed", "succeeded"), timeout=15)
        assert time.monotonic() - t0 < 7, "the command was not killed"
        assert job["status"] == "failed" and job["error"] == "cancelled", job
        assert job["stdout"] == "", job
        assert stack.scalar("SELECT count(*) FROM events WHERE job_id = %s AND kind = 'exec.cancel'"
                            % q(job_id)) == "1"
    else:
        # an agent without /exec/cancel: 409, and nothing changed
        body = assert_error(r, 409, "conflict")
        assert body["detail"] == "cannot cancel a running job on this agent", body
        assert stack.scalar("SELECT cancel_requested_at IS NULL FROM jobs WHERE id = %s"
                            % q(job_id)) == "t"
        assert stack.scalar("SELECT count(*) FROM events WHERE job_id = %s AND kind = 'exec.cancel'"
                            % q(job_id)) == "0"
        job = wait_status(stack, admin, job_id, ("failed", "succeeded"), timeout=20)
        assert job["status"] == "succeeded" and job["stdout"] == "finished\n", job
        assert job["error"] is None


class FakeAgent:
    """An agent on a unix socket that runs each /exec until /exec/cancel
    names its job (the contract the real agent is getting), for a sandbox
    row the controller does not own (driver 'fake')."""

    def __init__(self, path, token):
        import http.server
        import json
        import socketserver
        import threading
        agent = self
        self.path, self.token = path, token
        self.execs, self.cancels = [], []
        self.cancelled = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            def address_string(self):
                return "unix"

            def log_message(self, *a):
                pass

            def reply(self, status, obj):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                if self.headers.get("Authorization") != "Bearer " + agent.token:
                    return self.reply(401, {"error": "bad token"})
                if self.path == "/exec":
                    agent.execs.append(body)
                    killed = agent.cancelled.wait(20)
                    return self.reply(200, {
                        "exit_code": 137 if killed else 0, "signal": 9 if killed else None,
                        "timed_out": False, "stdout": "", "stderr": "", "stdout_bytes": 0,
                        "stderr_bytes": 0, "stdout_truncated": False, "stderr_truncated": False})
                if self.path == "/exec/cancel":
                    agent.cancels.append(body)
                    running = [e.get("job_id") for e in agent.execs]
                    if body.get("job_id") not in running:
                        return self.reply(404, {"error": "no such job"})
                    agent.cancelled.set()
                    return self.reply(200, {"job_id": body["job_id"], "cancelled": True})
                return self.reply(404, {"error": "no such path"})

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        self.server = Server(path, Handler)
        os.chmod(path, 0o666)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.cancelled.set()
        self.server.shutdown()
        self.server.server_close()


def test_cancel_running_job_asks_the_agent_with_its_job_id(stack, admin):
    sid = unique("fake")
    sock = os.path.join(stack.var, "run", sid + ".sock")
    agent = FakeAgent(sock, "tok-" + sid)
    try:
        stack.psql("INSERT INTO sandboxes (id, tenant_id, image, driver, state, cpu, memory,"
                   " cpu_millis, memory_bytes, agent_address, agent_token)"
                   " SELECT %s, id, 'host', 'fake', 'ready', '1', '1Gi', 1000, 1073741824, %s, %s"
                   " FROM tenants WHERE name = 'default'"
                   % (q(sid), q("unix:" + sock), q(agent.token)))
        job_id = exec_async(stack, admin, sid, "sleep 100")
        wait_status(stack, admin, job_id, ("running",))
        stack.wait_for(lambda: agent.execs, timeout=10, what="the exec reached the agent")
        assert agent.execs[0]["job_id"] == job_id, agent.execs
        t0 = time.monotonic()
        r = admin.post("%s/jobs/%s/cancel" % (stack.url, job_id))
        assert r.status_code == 200, r.text
        assert agent.cancels == [{"job_id": job_id}]
        job = r.json()
        assert time.monotonic() - t0 < 10
        assert job["status"] == "failed" and job["error"] == "cancelled", job
        assert job["exit_code"] == -9 and job["signal"] == 9, job
        assert stack.scalar("SELECT count(*) FROM events WHERE job_id = %s AND kind = 'exec.cancel'"
                            % q(job_id)) == "1"
        assert_error(admin.post("%s/jobs/%s/cancel" % (stack.url, job_id)), 409, "conflict")
    finally:
        agent.close()
        stack.psql("UPDATE sandboxes SET state = 'deleted' WHERE id = %s" % q(sid))


# ---- 4. resources and readiness ---------------------------------------------------

def test_resources_from_the_database_and_the_host(stack, admin, other):
    before = stack.counts()
    r = admin.get(stack.url + "/resources")
    assert r.status_code == 200, r.text
    res = r.json()
    assert res["status"] == "ok"
    cpus = os.sysconf("SC_NPROCESSORS_ONLN")
    mem = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert res["totals"] == {"cpu": float(cpus), "cpu_millis": cpus * 1000, "memory_bytes": mem,
                             "nodes": 1}
    live, cpu, memory = map(int, stack.psql(
        "SELECT count(*), coalesce(sum(cpu_millis), 0), coalesce(sum(memory_bytes), 0)"
        " FROM sandboxes WHERE state IN ('pending', 'ready')")[0])
    assert res["live_sandboxes"] == live
    # Orchard's shape: nodes, total_* and sandbox_pods as the caller's pods
    assert [n["capacity"] for n in res["nodes"]] == [{"cpu": float(cpus), "memory_bytes": mem}]
    assert res["nodes"][0]["allocatable"] == res["nodes"][0]["capacity"] and res["nodes"][0]["name"]
    assert res["total_capacity"] == res["total_allocatable"] == {"cpu": float(cpus), "memory_bytes": mem}
    assert res["total_requested"] == {"cpu": cpu / 1000.0, "memory_bytes": memory}
    mine = stack.psql("SELECT s.id, s.cpu_millis, s.memory_bytes FROM sandboxes s"
                      " JOIN tenants t ON t.id = s.tenant_id WHERE t.name = 'default'"
                      " AND s.state IN ('pending', 'ready') ORDER BY s.created_at, s.id")
    assert [(p["sandbox_id"], p["cpu_request"], p["memory_request_bytes"], p["namespace"])
            for p in res["sandbox_pods"]] == [(i, int(c) / 1000.0, int(m), "default") for i, c, m in mine]
    assert all(p["phase"] == {"ready": "Running", "pending": "Pending"}[p["status"]] and p["name"]
               for p in res["sandbox_pods"])
    assert res["sandbox_pods_truncated"] is False
    assert res["allocated"]["cpu_millis"] == cpu and res["allocated"]["memory_bytes"] == memory
    assert res["available"]["cpu_millis"] == max(0, cpus * 1000 - cpu)
    assert res["available"]["memory_bytes"] == max(0, mem - memory)
    assert set(res["sandboxes"]) == {"pending", "ready", "failed", "deleting"}
    assert res["sandboxes"]["pending"] + res["sandboxes"]["ready"] == live
    assert res["tenant"]["name"] == "default"
    assert stack.counts() == before

    # another tenant sees the same capacity and its own usage and quotas
    name = stack.scalar("SELECT t.name FROM api_keys k JOIN tenants t ON t.id = k.tenant_id"
                        " WHERE k.key_id = %s" % q(other.headers["X-API-Key"].split("_")[1]))
    sid = new_sandbox(stack, other)
    try:
        res2 = other.get(stack.url + "/v1/resources").json()
        assert res2["live_sandboxes"] >= 1 and res2["tenant"]["name"] == name
        # a tenant's pods are its own, never another tenant's
        assert [p["sandbox_id"] for p in res2["sandbox_pods"]] == [sid]
        assert sid not in [p["sandbox_id"] for p in admin.get(stack.url + "/resources").json()["sandbox_pods"]]
        assert res2["tenant"]["usage"]["sandboxes"] == int(stack.scalar(
            "SELECT count(*) FROM sandboxes s JOIN tenants t ON t.id = s.tenant_id"
            " WHERE t.name = %s AND s.state IN ('pending', 'ready')" % q(name)))
        assert res2["tenant"]["usage"]["cpu_millis"] >= 500
    finally:
        other.delete("%s/sandboxes/%s" % (stack.url, sid))
    assert_error(stack.anonymous().get(stack.url + "/resources"), 401)


def test_ready_needs_the_database_and_a_leading_controller(stack, admin):
    for path in ("/ready", "/v1/ready"):
        r = stack.anonymous().get(stack.url + path)  # open, like /health
        assert r.status_code == 200, r.text
        assert r.json() == {"status": "ready", "checks": {"database": "ok", "controller": "ok"}}
    with open(os.path.join(stack.var, "run", "controller.pid")) as f:
        pid = int(f.read().split()[0])
    os.kill(pid, signal.SIGTERM)
    try:
        # (a list: a 503 Response is falsy)
        r = stack.wait_for(lambda: (lambda x: [x] if x.status_code != 200 else None)(
            admin.get(stack.url + "/ready")), timeout=20, what="not ready without a controller")[0]
        body = assert_error(r, 503, "unavailable")
        assert "controller" in body["detail"], body
        assert r.headers.get("Retry-After")
    finally:
        stack.up()  # restarts the controller
    stack.wait_for(lambda: admin.get(stack.url + "/v1/ready").status_code == 200, timeout=30,
                   what="ready again")


# ---- 5. labels ------------------------------------------------------------------------

GOOD_LABELS = {"app": "web", "example.com/team": "a.b_c-d", "A-b.c_D": "", "x": "9" * 63,
               "a.b.example-1.com/" + "n" * 63: "v"}


def test_labels_by_kubernetes_rules_and_and_filters(stack, admin):
    tag = unique("lbl")
    r = admin.post(stack.url + "/sandboxes", json={"image": "host", "cpu": "100m", "memory": "64Mi",
                                                   "labels": dict(GOOD_LABELS, run=tag, tier="a")})
    assert r.status_code == 200, r.text
    sid1 = r.json()["sandbox_id"]
    assert r.json()["labels"]["example.com/team"] == "a.b_c-d"
    r = admin.post(stack.url + "/sandboxes", json={"image": "host", "cpu": "100m", "memory": "64Mi",
                                                   "labels": {"run": tag, "tier": "b"}})
    sid2 = r.json()["sandbox_id"]
    many = {"k%d" % i: "v" for i in range(64)}
    r = admin.post(stack.url + "/sandboxes", json={"image": "host", "cpu": "100m", "memory": "64Mi",
                                                   "labels": many})
    assert r.status_code == 200, r.text
    sid3 = r.json()["sandbox_id"]
    try:
        def ids(*labels):
            r = admin.get(stack.url + "/sandboxes", params=[("label", x) for x in labels])
            assert r.status_code == 200, r.text
            return sorted(s["sandbox_id"] for s in r.json()["sandboxes"])
        assert ids("run=" + tag) == sorted([sid1, sid2])
        assert ids("run=" + tag, "tier=a") == [sid1]
        assert ids("tier=a", "run=" + tag, "example.com/team=a.b_c-d") == [sid1]
        assert ids("run=" + tag, "tier=a", "tier=b") == []       # AND, not OR
        assert ids("run=" + tag, "A-b.c_D=") == [sid1]            # empty value
        assert ids("run=" + tag, "tier=c") == []

        before = stack.counts()
        for bad in ("noequals", "Bad Key=x", "run=" + "v" * 64, "run=-x", "UPPER.com/x=1",
                    "/x=1", "a/b/c=1", "=v"):
            body = assert_error(admin.get(stack.url + "/sandboxes", params={"label": bad}), 422,
                                "invalid")
            assert "label" in body["detail"], body
        assert stack.counts() == before
    finally:
        for sid in (sid1, sid2, sid3):
            admin.delete("%s/sandboxes/%s" % (stack.url, sid))


@pytest.mark.parametrize("labels", [
    {"k%d" % i: "v" for i in range(65)},
    {"": "v"}, {"-a": "v"}, {"a-": "v"}, {"a b": "v"}, {"n" * 64: "v"},
    {"Example.com/x": "v"}, {"example..com/x": "v"}, {"-ex.com/x": "v"}, {"ex.com/": "v"},
    {"/x": "v"}, {"a/b/c": "v"}, {("p" * 250) + ".com/x": "v"},
    {"k": "v" * 64}, {"k": "-v"}, {"k": "v_"}, {"k": "a b"}, {"k": "\u00e9"}, {"k": 1},
    {"k": None}, {"k": ["v"]}, {"k": "a\nb"},
])
def test_bad_labels_are_422_and_write_nothing(stack, admin, labels):
    before = stack.counts()
    body = assert_error(admin.post(stack.url + "/sandboxes", json={"image": "host", "labels": labels}),
                        422, "invalid")
    assert "label" in body["detail"], body
    assert stack.counts() == before


# ---- the OpenAPI document --------------------------------------------------------------

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HTTP_METHODS = {"get", "post", "put", "patch", "delete"}


def load_spec():
    yaml = pytest.importorskip("yaml")
    with open(os.path.join(REPO, "docs", "openapi.yaml")) as f:
        return yaml.safe_load(f)


def test_openapi_and_the_route_table_list_the_same_routes():
    spec = load_spec()
    with open(os.path.join(REPO, "api", "router.c")) as f:
        table = set(re.findall(r'\{\s*"([A-Z]+)",\s*"(/[^"]*)",\s*api_\w+', f.read()))
    assert ("POST", "/jobs/{id}/cancel") in table, table
    documented = set()
    for path, item in spec["paths"].items():
        if item.get("x-served-by") == "nginx":
            continue
        route = re.sub(r"\{[a-z_]+\}", "{id}", path[3:] if path.startswith("/v1/") else path)
        documented |= {(m.upper(), route) for m in item if m in HTTP_METHODS}
    assert table == documented, (table - documented, documented - table)


def check_against_spec(spec, r, method, path):
    """The response's status is documented for (method, path) and its body
    validates against the documented schema."""
    jsonschema = pytest.importorskip("jsonschema")
    op = spec["paths"][path][method]
    resp = op["responses"].get(str(r.status_code))
    assert resp is not None, "%s %s: %d is not documented" % (method, path, r.status_code)
    if "$ref" in resp:
        resp = spec["components"]["responses"][resp["$ref"].split("/")[-1]]
    schema = resp["content"]["application/json"]["schema"]
    root = dict(spec, **schema) if "$ref" not in schema else dict(spec, **{"$ref": schema["$ref"]})
    jsonschema.Draft202012Validator(root).validate(r.json())


def test_new_routes_answer_as_documented(stack, admin, other, sandbox):
    spec = load_spec()
    name = unique("spec")
    check_against_spec(spec, admin.post(stack.url + "/v1/tenants", json={"name": name, "max_sandboxes": 0}),
                       "post", "/v1/tenants")
    check_against_spec(spec, admin.get(stack.url + "/v1/tenants"), "get", "/v1/tenants")
    check_against_spec(spec, admin.patch(stack.url + "/v1/tenants/" + name, json={"max_cpu_millis": 1}),
                       "patch", "/v1/tenants/{name}")
    check_against_spec(spec, admin.patch(stack.url + "/v1/tenants/" + name, json={}),
                       "patch", "/v1/tenants/{name}")
    check_against_spec(spec, other.get(stack.url + "/v1/tenants"), "get", "/v1/tenants")
    key = stack.new_tenant_key(name)
    check_against_spec(spec, admin.get(stack.url + "/v1/keys"), "get", "/v1/keys")
    check_against_spec(spec, stack.session(key=key).post(stack.url + "/v1/sandboxes",
                                                         json={"image": "host"}),
                       "post", "/v1/sandboxes")  # 429
    check_against_spec(spec, admin.delete(stack.url + "/v1/keys/" + key.split("_")[1]),
                       "delete", "/v1/keys/{key}")
    check_against_spec(spec, admin.get(stack.url + "/v1/resources"), "get", "/v1/resources")
    check_against_spec(spec, admin.get(stack.url + "/v1/ready"), "get", "/v1/ready")
    first = exec_async(stack, admin, sandbox, "sleep 2")
    queued = exec_async(stack, admin, sandbox, "true")
    check_against_spec(spec, admin.post("%s/v1/jobs/%s/cancel" % (stack.url, queued)),
                       "post", "/v1/jobs/{job_id}/cancel")
    check_against_spec(spec, admin.post("%s/v1/jobs/%s/cancel" % (stack.url, queued)),
                       "post", "/v1/jobs/{job_id}/cancel")  # 409
    check_against_spec(spec, admin.get("%s/v1/sandboxes/%s/jobs" % (stack.url, sandbox),
                                       params={"limit": 3}),
                       "get", "/v1/sandboxes/{sandbox_id}/jobs")
    wait_status(stack, admin, first, ("succeeded", "failed"))
