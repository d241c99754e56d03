"""Grading on a branch (issue 21, docs/checkpoints.md): POST
/v1/sandboxes/{id}/evaluate forks the sandbox (now or at step t, also after
it was deleted), writes hidden files into the fork, runs the command there,
answers the job and deletes the fork. The original never sees the files,
its steps do not change, and its trajectory gets an "evaluate" line naming
the fork; several evaluations run at once; bad input creates nothing.
"""
import concurrent.futures
import json
import uuid

from rollout_helpers import create, sh, steps

RUN = uuid.uuid4().hex[:8]
HIDDEN = [{"path": "/workspace/hidden_test.sh",
           "content": "grep -q 'answer = 42' /workspace/solution.py && echo PASS || { echo FAIL; exit 1; }\n"}]


def evaluate(stack, s, sid, **body):
    body.setdefault("command", "sh /workspace/hidden_test.sh")
    body.setdefault("files", HIDDEN)
    return s.post("%s/v1/sandboxes/%s/evaluate" % (stack.url, sid), json=body)


def fork_state(stack, sid):
    return stack.scalar("SELECT state FROM sandboxes WHERE id = '%s'" % sid)


def test_evaluate_now_and_at_a_step_leaves_the_original_untouched(stack, admin):
    sid = create(stack, admin, {"ev-run": RUN}, checkpoints="every_step")
    sh(stack, admin, sid, "echo 'answer = 41' > /workspace/solution.py")
    sh(stack, admin, sid, "echo 'answer = 42' > /workspace/solution.py")
    before = steps(stack, admin, sid)

    r = evaluate(stack, admin, sid, timeout_seconds=60)
    assert r.status_code == 200, r.text
    now = r.json()
    assert now["sandbox_id"] == sid and now["fork_sandbox_id"] != sid and now["from_step"] is None
    assert (now["job"]["exit_code"], now["job"]["stdout"]) == (0, "PASS\n"), now["job"]
    r = evaluate(stack, admin, sid, step=1)
    assert r.status_code == 200, r.text
    at1 = r.json()
    assert (at1["job"]["exit_code"], at1["job"]["stdout"], at1["from_step"]) == (1, "FAIL\n", 1)

    # The original: no hidden file, same steps, two evaluate lines.
    assert sh(stack, admin, sid, "ls /workspace") == "solution.py\n"
    after = [l for l in steps(stack, admin, sid)][:len(before)]
    assert [l["step"] for l in after] == [l["step"] for l in before]
    r = admin.get("%s/v1/sandboxes/%s/trajectory" % (stack.url, sid))
    evals = [l for l in map(json.loads, r.text.splitlines()) if l["type"] == "evaluate"]
    assert [(e["fork_sandbox_id"], e["job_id"], e["exit_code"]) for e in evals] == [
        (now["fork_sandbox_id"], now["job"]["job_id"], 0), (at1["fork_sandbox_id"], at1["job"]["job_id"], 1)]
    assert evals[1]["checkpoint_id"] == at1["checkpoint_id"] and evals[1]["files"] == [HIDDEN[0]["path"]]
    # The forks are gone; the checkpoint taken for "now" too, the step's stays.
    for e in (now, at1):
        assert fork_state(stack, e["fork_sandbox_id"]) in ("deleting", "deleted")
    assert admin.get("%s/v1/checkpoints/%s" % (stack.url, now["checkpoint_id"])).status_code == 404
    assert admin.get("%s/v1/checkpoints/%s" % (stack.url, at1["checkpoint_id"])).status_code == 200

    # Several at once, of the deleted sandbox's step 2.
    assert admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid)).status_code == 200
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        rs = list(pool.map(lambda _: evaluate(stack, admin, sid, step=2), range(3)))
    for r in rs:
        assert r.status_code == 200, r.text
        assert r.json()["job"]["exit_code"] == 0
    assert len({r.json()["fork_sandbox_id"] for r in rs}) == 3


def test_a_timeout_is_the_jobs_and_bad_input_creates_nothing(stack, admin):
    sid = create(stack, admin, {"ev-run": RUN})
    r = evaluate(stack, admin, sid, command="sleep 30", files=[], timeout_seconds=1)
    assert r.status_code == 200, r.text
    assert r.json()["job"]["timed_out"] is True

    before = stack.counts()
    for body in ({"command": None}, {"command": 5}, {"files": [{"path": "rel"}]},
                 {"files": [{"path": "/workspace/x", "content": "a", "content_base64": "YQ=="}]},
                 {"files": "x"}, {"timeout_seconds": 0}, {"step": -1}):
        r = admin.post("%s/v1/sandboxes/%s/evaluate" % (stack.url, sid),
                       json=dict({"command": "true"}, **body))
        assert r.status_code == 422, (body, r.text)
    r = evaluate(stack, admin, sid, step=7)
    assert r.status_code == 422, r.text
    assert evaluate(stack, admin, "f0f0f0f0").status_code == 404
    assert stack.counts() == before
    admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))
