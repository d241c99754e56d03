"""Per-step checkpoints (issue 21, docs/checkpoints.md): a sandbox with
checkpoints "every_step" gets a checkpoint after every state-changing step,
named by the step's trajectory line; each holds the state after its step
and not after the next one; retention (keep last N, TTL) removes old ones
and the line then says checkpoint_expired; the policy can be changed with
PATCH and defaulted per tenant; a PTY session of such a sandbox gets one
when it ends; bad input changes nothing.
"""
import json
import uuid

import websocket  # python3-websocket

from rollout_helpers import create, drop, fork_at, ready_forks, sh, steps, upload

RUN = uuid.uuid4().hex[:8]


def test_every_step_checkpoints_hold_each_steps_state_and_retention_expires_them(stack, admin):
    sid = create(stack, admin, {"sc-run": RUN}, checkpoints="every_step", checkpoint_keep=3)
    # Each step overwrites the same file, without a pause between them.
    sh(stack, admin, sid, "echo 1 > /workspace/state")
    upload(stack, admin, sid, "/workspace/state", b"2\n")
    sh(stack, admin, sid, "echo 3 > /workspace/state")
    upload(stack, admin, sid, "/workspace/state", b"4\n")
    lines = steps(stack, admin, sid)
    assert [l["step"] for l in lines] == [1, 2, 3, 4]
    assert all(l.get("checkpoint_id") for l in lines), lines
    # keep 3: step 1 expired, 2 to 4 kept.
    assert [l.get("checkpoint_expired", False) for l in lines] == [True, False, False, False]
    stack.wait_for(lambda: all(
        admin.get("%s/v1/checkpoints/%s" % (stack.url, l["checkpoint_id"])).json().get("state")
        == "ready" for l in lines[2:]), timeout=120, what="the step checkpoints taken")
    ck = admin.get("%s/v1/checkpoints/%s" % (stack.url, lines[3]["checkpoint_id"])).json()
    assert (ck["kind"], ck["trajectory_step"], ck["sandbox_id"]) == ("step", 4, sid)
    sh(stack, admin, sid, "echo 5 > /workspace/state")   # not a state of any fork below
    assert steps(stack, admin, sid)[1].get("checkpoint_expired") is True

    a, b = ready_forks(stack, admin, fork_at(stack, admin, sid, {"step": 3})) + \
        ready_forks(stack, admin, fork_at(stack, admin, sid, {"step": 4}))
    assert sh(stack, admin, a, "cat /workspace/state") == "3\n"
    assert sh(stack, admin, b, "cat /workspace/state") == "4\n"
    r = fork_at(stack, admin, sid, {"step": 1})
    assert r.status_code == 409 and "expired" in r.json()["detail"], r.text
    # The expired copies are removed by the controller.
    stack.wait_for(lambda: stack.scalar("SELECT count(*) FROM checkpoints WHERE sandbox_id = '%s'"
                                        " AND state = 'deleted'" % sid) == "2",
                   timeout=120, what="expired step checkpoints removed")

    # PATCH turns it off: the next step has no checkpoint.
    r = admin.patch("%s/v1/sandboxes/%s" % (stack.url, sid), json={"checkpoints": "none"})
    assert r.status_code == 200, r.text
    assert r.json()["checkpoints"] == "none" and r.json()["checkpoint_keep"] == 3
    sh(stack, admin, sid, "true")
    assert "checkpoint_id" not in steps(stack, admin, sid)[-1]
    for x in (sid, a, b):
        drop(stack, admin, x)


def test_a_ttl_expires_step_checkpoints(stack, admin):
    sid = create(stack, admin, {"sc-run": RUN}, checkpoints="every_step", checkpoint_ttl_seconds=1)
    sh(stack, admin, sid, "echo x > /workspace/f")
    line = steps(stack, admin, sid)[0]
    assert line.get("checkpoint_id"), line
    stack.wait_for(lambda: steps(stack, admin, sid)[0].get("checkpoint_expired"), timeout=120,
                   what="the step checkpoint expired by its TTL")
    assert stack.scalar("SELECT state_message FROM checkpoints WHERE id = '%s'"
                        % line["checkpoint_id"]) == "expired"
    drop(stack, admin, sid)


def test_patch_turns_it_on(stack, admin):
    sid = create(stack, admin, {"sc-run": RUN})
    sh(stack, admin, sid, "true")
    r = admin.patch("%s/v1/sandboxes/%s" % (stack.url, sid), json={"checkpoints": "every_step"})
    assert r.status_code == 200, r.text
    assert r.json()["checkpoint_keep"] == 100 and r.json()["checkpoint_ttl_seconds"] is None
    sh(stack, admin, sid, "true")
    got = steps(stack, admin, sid)
    assert "checkpoint_id" not in got[0] and got[1].get("checkpoint_id"), got
    drop(stack, admin, sid)


def test_a_tenant_default_set_through_the_api_applies_unless_the_sandbox_says_none(stack, admin):
    name = "sc-default-" + RUN
    r = stack.orchardctl("tenants", "create", name, "--checkpoints", "every_step", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["default_checkpoints"] == "every_step"
    url = "%s/v1/tenants/%s" % (stack.url, name)
    s = stack.session(key=stack.new_tenant_key(name))
    on = create(stack, s, {"sc-run": RUN})
    off = create(stack, s, {"sc-run": RUN}, checkpoints="none")
    sh(stack, s, on, "true")
    sh(stack, s, off, "true")
    assert steps(stack, s, on)[0].get("checkpoint_id")
    assert "checkpoint_id" not in steps(stack, s, off)[0]
    r = s.patch("%s/v1/sandboxes/%s" % (stack.url, on), json={"checkpoint_keep": 50})
    assert r.status_code == 200 and r.json()["checkpoints"] == "every_step", r.text

    # Bad values and non-admins change nothing.
    tag = admin.get(url).headers["ETag"]
    for body in ({"default_checkpoints": "always"}, {"default_checkpoints": 1}):
        r = admin.patch(url, json=body)
        assert r.status_code == 422 and "default_checkpoints" in r.json()["detail"], r.text
    assert s.patch(url, json={"default_checkpoints": None}).status_code == 403
    r = stack.orchardctl("tenants", "set", name, "--checkpoints", "sometimes")
    assert r.returncode != 0 and "--checkpoints" in r.stderr
    assert admin.get(url).headers["ETag"] == tag

    # null removes the default (If-Match as for quotas): the policy is read
    # when a step ends, so the same sandbox's next step has no checkpoint.
    r = admin.patch(url, json={"default_checkpoints": None}, headers={"If-Match": tag})
    assert r.status_code == 200 and r.json()["default_checkpoints"] is None, r.text
    assert admin.patch(url, json={"default_checkpoints": "none"},
                       headers={"If-Match": tag}).status_code == 412
    sh(stack, s, on, "true")
    assert "checkpoint_id" not in steps(stack, s, on)[1]
    r = stack.orchardctl("tenants", "set", name, "--checkpoints", "every_step")
    assert r.returncode == 0, r.stderr
    sh(stack, s, on, "true")
    assert steps(stack, s, on)[2].get("checkpoint_id")
    for x in (on, off):
        drop(stack, s, x)


def test_bad_policies_change_nothing(stack, admin, other):
    before = stack.counts()
    for body in ({"checkpoints": "sometimes"}, {"checkpoints": 1}, {"checkpoint_keep": 0},
                 {"checkpoint_ttl_seconds": -5}):
        body.update({"image": "host"})
        r = admin.post(stack.url + "/v1/sandboxes", json=body)
        assert r.status_code == 422, (body, r.text)
    assert stack.counts() == before
    sid = create(stack, admin, {"sc-run": RUN})
    for body in ({"checkpoints": "always"}, {"image": "other"}, {"checkpoint_keep": "3"}):
        r = admin.patch("%s/v1/sandboxes/%s" % (stack.url, sid), json=body)
        assert r.status_code == 422, (body, r.text)
    assert stack.scalar("SELECT checkpoints IS NULL FROM sandboxes WHERE id = '%s'" % sid) == "t"
    assert other.patch("%s/v1/sandboxes/%s" % (stack.url, sid),
                       json={"checkpoints": "none"}).status_code == 404
    assert admin.patch("%s/v1/sandboxes/f0f0f0f0" % stack.url,
                       json={"checkpoints": "none"}).status_code == 404
    drop(stack, admin, sid)


def test_a_pty_session_ending_takes_a_step_checkpoint_named_by_its_pty_close_line(stack, admin):
    sid = create(stack, admin, {"sc-run": RUN}, checkpoints="every_step")
    sh(stack, admin, sid, "echo before > /workspace/state")
    # python3-websocket, a client we did not write.
    ws = websocket.create_connection(
        "wss://%s/v1/sandboxes/%s/exec/pty" % (stack.url.split("://", 1)[1], sid), timeout=30,
        sslopt={"ca_certs": stack.cacert}, header=["X-API-Key: " + stack.admin_key])
    try:
        ws.send(json.dumps({"type": "init", "cmd": ["/bin/sh", "-c", "echo pty > /workspace/state"]}))
        while json.loads(ws.recv()).get("type") != "exit":
            pass
    finally:
        ws.close()

    def pty_close():
        got = [l for l in map(json.loads, admin.get("%s/v1/sandboxes/%s/trajectory"
                                                    % (stack.url, sid)).text.splitlines())
               if l.get("kind") == "pty.close"]
        return got[0] if got else None
    line = stack.wait_for(pty_close, timeout=60, what="the pty.close line")
    assert line["type"] == "event" and line.get("checkpoint_id"), line
    assert [l["step"] for l in steps(stack, admin, sid)] == [1]   # a PTY session is not a step
    stack.wait_for(lambda: admin.get("%s/v1/checkpoints/%s" % (stack.url, line["checkpoint_id"]))
                   .json().get("state") == "ready", timeout=120, what="the PTY's checkpoint taken")
    r = admin.post("%s/v1/checkpoints/%s/fork" % (stack.url, line["checkpoint_id"]), json={"count": 1})
    [f] = ready_forks(stack, admin, r)
    assert sh(stack, admin, f, "cat /workspace/state") == "pty\n"
    # The state after step 1 is still the step's own checkpoint, not the PTY's.
    [g] = ready_forks(stack, admin, fork_at(stack, admin, sid, {"step": 1}))
    assert sh(stack, admin, g, "cat /workspace/state") == "before\n"
    for x in (sid, f, g):
        drop(stack, admin, x)
