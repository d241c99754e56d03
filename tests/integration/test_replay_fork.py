"""Replay of a forked sandbox (issue 21, docs/trajectory.md): POST
/v1/trajectories/replay of a fork's trajectory starts from its parent's
checkpoint while that exists (the fork's steps then see the parent's
state), and from the image once it is gone; the report's "start" says
which.
"""
import uuid

from rollout_helpers import checkpoint, create, drop, fork_at, ready_forks, sh

RUN = uuid.uuid4().hex[:8]


def replay(stack, s, text):
    r = s.post(stack.url + "/v1/trajectories/replay", data=text,
               headers={"Content-Type": "application/x-ndjson"}, timeout=600)
    assert r.status_code == 200, r.text
    return r.json()["trajectories"][0]


def test_a_forks_replay_starts_from_its_parents_checkpoint(stack, admin):
    parent = create(stack, admin, {"rf-run": RUN})
    sh(stack, admin, parent, "echo parent-state > /workspace/state")
    ck = checkpoint(stack, admin, parent)
    (child,) = ready_forks(stack, admin, fork_at(stack, admin, parent, {"step": 1}))
    assert sh(stack, admin, child, "cat /workspace/state") == "parent-state\n"
    text = admin.get("%s/v1/sandboxes/%s/trajectory" % (stack.url, child),
                     params={"include": "content"}).text

    rep = replay(stack, admin, text)
    assert rep["start"] == {"from": "checkpoint", "checkpoint_id": ck["id"],
                            "parent_sandbox_id": parent, "parent_step": 1}, rep
    assert rep["result"] == "match", rep
    assert stack.scalar("SELECT forked_from FROM sandboxes WHERE id = '%s'"
                        % rep["replay_sandbox_id"]) == ck["id"]

    assert admin.delete("%s/v1/checkpoints/%s" % (stack.url, ck["id"])).status_code == 200
    rep = replay(stack, admin, text)
    assert rep["start"]["from"] == "image" and "cannot be forked" in rep["start"]["reason"], rep
    assert rep["result"] == "diverged", rep         # cat finds no file without the parent's state
    for sid in (parent, child):
        drop(stack, admin, sid)
