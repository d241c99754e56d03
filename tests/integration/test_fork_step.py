"""Forks from step t of a sandbox's trajectory (issue 21,
docs/checkpoints.md): POST /v1/sandboxes/{id}/fork {"step": t} restores the
checkpoint taken at step t, also after the sandbox was deleted; a step
without a usable checkpoint is a clear 409, a step the trajectory does not
have is 422, and neither creates anything.
"""
import json
import uuid

from rollout_helpers import checkpoint, create, fork_at, sh, upload

RUN = uuid.uuid4().hex[:8]


def sandboxes_of_run(stack):
    return int(stack.scalar("SELECT count(*) FROM sandboxes WHERE labels->>'fs-run' = '%s'" % RUN))


def test_fork_at_step_after_the_sandbox_was_deleted(stack, admin):
    parent = create(stack, admin, {"fs-run": RUN})
    sh(stack, admin, parent, "echo 1 > /workspace/state")
    ck1 = checkpoint(stack, admin, parent)
    upload(stack, admin, parent, "/workspace/state", b"2\n")
    ck2 = checkpoint(stack, admin, parent)
    sh(stack, admin, parent, "echo 3 > /workspace/state")
    assert (ck1["trajectory_step"], ck2["trajectory_step"]) == (1, 2)
    assert admin.delete("%s/v1/sandboxes/%s" % (stack.url, parent)).status_code == 200
    stack.wait_for(lambda: stack.scalar("SELECT state FROM sandboxes WHERE id = '%s'" % parent)
                   == "deleted", timeout=60, what="the parent deleted")

    r = fork_at(stack, admin, parent, {"step": 2, "count": 2})
    assert r.status_code == 200, r.text
    assert r.json()["checkpoint_id"] == ck2["id"]
    kids = r.json()["sandbox_ids"]
    r = fork_at(stack, admin, parent, {"step": 1})
    assert r.status_code == 200, r.text
    assert r.json()["checkpoint_id"] == ck1["id"]
    kids += r.json()["sandbox_ids"]
    for sid, want in zip(kids, ("2\n", "2\n", "1\n")):
        assert stack.wait_ready(admin, sid)["status"] == "ready"
        assert sh(stack, admin, sid, "cat /workspace/state") == want
    header = json.loads(admin.get("%s/v1/sandboxes/%s/trajectory" % (stack.url, kids[0]))
                        .text.splitlines()[0])
    assert header["forked_from"] == {"checkpoint_id": ck2["id"], "sandbox_id": parent, "step": 2}

    # The CLI: orchardctl fork ID --step T prints the new ids.
    out = stack.orchardctl("fork", parent, "--step", "1", "-n", "2")
    assert out.returncode == 0, out.stderr
    cli_kids = out.stdout.split()
    assert len(cli_kids) == 2
    for sid in cli_kids:
        assert stack.scalar("SELECT forked_from FROM sandboxes WHERE id = '%s'" % sid) == ck1["id"]
    kids += cli_kids
    out = stack.orchardctl("fork", parent, "--step", "x")
    assert out.returncode == 125 and "--step" in out.stderr

    # Bad steps: clear errors, nothing created.
    before = sandboxes_of_run(stack)
    r = fork_at(stack, admin, parent, {"step": 3})
    assert r.status_code == 409 and "no checkpoint was taken at step 3" in r.json()["detail"], r.text
    assert "1, 2" in r.json()["detail"]
    r = fork_at(stack, admin, parent, {"step": 0})
    assert r.status_code == 409, r.text
    r = fork_at(stack, admin, parent, {"step": 4})
    assert r.status_code == 422 and "has 3 steps" in r.json()["detail"], r.text
    for bad in (-1, "2", 1.5, True):
        r = fork_at(stack, admin, parent, {"step": bad})
        assert r.status_code == 422, (bad, r.text)
    r = admin.post("%s/v1/checkpoints/%s/fork" % (stack.url, ck1["id"]), json={"step": 1})
    assert r.status_code == 422, r.text
    assert fork_at(stack, admin, "f0f0f0f0", {"step": 1}).status_code == 404
    # A deleted checkpoint of the step: 409 that says so.
    assert admin.delete("%s/v1/checkpoints/%s" % (stack.url, ck1["id"])).status_code == 200
    r = fork_at(stack, admin, parent, {"step": 1})
    assert r.status_code == 409 and "no longer available" in r.json()["detail"], r.text
    assert sandboxes_of_run(stack) == before
    for sid in kids:
        admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))
    admin.delete("%s/v1/checkpoints/%s" % (stack.url, ck2["id"]))


def test_another_tenants_sandbox_steps_are_404(stack, admin, other):
    parent = create(stack, admin, {"fs-run": RUN})
    sh(stack, admin, parent, "true")
    ck = checkpoint(stack, admin, parent)
    r = fork_at(stack, other, parent, {"step": 1})
    assert r.status_code == 404, r.text
    assert int(stack.scalar("SELECT count(*) FROM sandboxes WHERE forked_from = '%s'" % ck["id"])) == 0
    admin.delete("%s/v1/sandboxes/%s" % (stack.url, parent))
    admin.delete("%s/v1/checkpoints/%s" % (stack.url, ck["id"]))
