"""Sandbox helpers shared by the integration tests: create a sandbox and
wait for it, run a command, upload, checkpoint, fork, read the trajectory,
delete. First written for the rollout-tree tests (issue 21); the
checkpoint, replay and trajectory tests use them too. Each asserts the
answer it needs, so a test reads as its steps."""
import base64
import json


def create(stack, s, labels, **spec):
    body = {"image": "host", "labels": labels}
    body.update(spec)
    r = s.post(stack.url + "/v1/sandboxes", json=body)
    assert r.status_code == 200, r.text
    sid = r.json()["sandbox_id"]
    assert stack.wait_ready(s, sid)["status"] == "ready"
    return sid


def sh(stack, s, sid, command):
    r = s.post("%s/v1/sandboxes/%s/exec" % (stack.url, sid),
               json={"command": command, "wait": True, "timeout": 120})
    assert r.status_code == 200, r.text
    assert r.json()["exit_code"] == 0, r.json()
    return r.json()["stdout"]


def upload(stack, s, sid, path, data):
    r = s.post("%s/v1/sandboxes/%s/files" % (stack.url, sid),
               json={"path": path, "content": base64.b64encode(data).decode()})
    assert r.status_code == 200, r.text


def execute(stack, s, sid, command, **kw):
    """Run command to its end (exit status not checked); the job."""
    r = s.post("%s/v1/sandboxes/%s/exec" % (stack.url, sid),
               json=dict(command=command, wait=True, **kw))
    assert r.status_code == 200, r.text
    assert r.json()["status"] in ("succeeded", "failed"), r.json()
    return r.json()


def checkpoint(stack, s, sid, **body):
    r = s.post("%s/v1/sandboxes/%s/checkpoints" % (stack.url, sid), json=body)
    assert r.status_code == 200, r.text
    return r.json()


def counted_bytes(stack, s, ckpt_id):
    """A checkpoint's bytes once counted: the local driver counts them
    after the checkpoint is ready (null until then, docs/checkpoints.md)."""
    got = []
    stack.wait_for(lambda: got.append(s.get("%s/v1/checkpoints/%s" % (stack.url, ckpt_id))
                                      .json()["bytes"]) or got[-1] is not None,
                   timeout=120, what="the checkpoint's bytes counted")
    return got[-1]


def fork_at(stack, s, sid, body):
    return s.post("%s/v1/sandboxes/%s/fork" % (stack.url, sid), json=body)


def ready_forks(stack, s, r):
    assert r.status_code == 200, r.text
    ids = r.json()["sandbox_ids"]
    for sid in ids:
        assert stack.wait_ready(s, sid)["status"] == "ready"
    return ids


def steps(stack, s, sid):
    """The step lines of sid's trajectory."""
    r = s.get("%s/v1/sandboxes/%s/trajectory" % (stack.url, sid))
    assert r.status_code == 200, r.text
    return [l for l in map(json.loads, r.text.splitlines()) if "step" in l]


def drop(stack, s, sid):
    """Delete the sandbox and its checkpoints (which outlive it)."""
    s.delete("%s/v1/sandboxes/%s" % (stack.url, sid))
    listed = s.get(stack.url + "/v1/checkpoints", params={"sandbox_id": sid}).json()
    for c in listed["checkpoints"]:
        assert s.delete("%s/v1/checkpoints/%s" % (stack.url, c["id"])).status_code == 200
