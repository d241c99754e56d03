"""Rollout trees in the trajectory (issue 21, docs/trajectory.md):
GET /v1/trajectories?root=ID streams the root's trajectory and those of
every sandbox forked from it, recursively (parents first), each header
with forked_from {sandbox_id, step, checkpoint_id}; `orchardctl trajectory
tree` prints it as a tree or one nested JSON document.
"""
import json
import uuid

from rollout_helpers import create, drop, fork_at, ready_forks, sh

RUN = uuid.uuid4().hex[:8]


def test_tree_export_and_cli(stack, admin, other):
    root = create(stack, admin, {"tt-run": RUN}, checkpoints="every_step")
    sh(stack, admin, root, "echo a > /workspace/f")
    sh(stack, admin, root, "echo b > /workspace/f")
    kids = ready_forks(stack, admin, fork_at(stack, admin, root, {"step": 1, "count": 2}))
    r = admin.patch("%s/v1/sandboxes/%s" % (stack.url, kids[0]), json={"checkpoints": "every_step"})
    assert r.status_code == 200, r.text
    sh(stack, admin, kids[0], "echo c > /workspace/f")
    (grandkid,) = ready_forks(stack, admin, fork_at(stack, admin, kids[0], {"step": 1}))
    assert sh(stack, admin, grandkid, "cat /workspace/f") == "c\n"
    unrelated = create(stack, admin, {"tt-run": RUN})

    r = admin.get(stack.url + "/v1/trajectories", params={"root": root})
    assert r.status_code == 200, r.text
    lines = [json.loads(l) for l in r.text.splitlines()]
    headers = [l for l in lines if l["type"] == "header"]
    assert [h["sandbox_id"] for h in headers][0] == root
    assert sorted(h["sandbox_id"] for h in headers) == sorted([root] + kids + [grandkid])
    assert unrelated not in {l["sandbox_id"] for l in lines}
    by_id = {h["sandbox_id"]: h for h in headers}
    assert "forked_from" not in by_id[root]
    for k in kids:
        assert (by_id[k]["forked_from"]["sandbox_id"], by_id[k]["forked_from"]["step"]) == (root, 1)
    assert (by_id[grandkid]["forked_from"]["sandbox_id"], by_id[grandkid]["forked_from"]["step"]) == (kids[0], 1)
    order = [h["sandbox_id"] for h in headers]
    assert order.index(kids[0]) < order.index(grandkid)
    assert len([l for l in lines if l["type"] == "end"]) == 4

    # Bad input, other tenants.
    assert admin.get(stack.url + "/v1/trajectories", params={"root": "Bad!"}).status_code == 422
    assert admin.get(stack.url + "/v1/trajectories", params={"root": "f0f0f0f0"}).status_code == 404
    assert other.get(stack.url + "/v1/trajectories", params={"root": root}).status_code == 404

    # The CLI: a nested document and a drawn tree.
    out = stack.orchardctl("trajectory", "tree", root, "-o", "json")
    assert out.returncode == 0, out.stderr
    tree = json.loads(out.stdout)
    assert tree["sandbox_id"] == root and tree["steps"] == 2 and tree["forked_from"] is None
    assert tree["last_step"]["status"] == "succeeded" and tree["last_step"]["exit_code"] == 0
    assert sorted(c["sandbox_id"] for c in tree["children"]) == sorted(kids)
    first = [c for c in tree["children"] if c["sandbox_id"] == kids[0]][0]
    assert [g["sandbox_id"] for g in first["children"]] == [grandkid]
    assert first["children"][0]["forked_from"]["step"] == 1
    out = stack.orchardctl("trajectory", "tree", root)
    assert out.returncode == 0, out.stderr
    text = out.stdout.splitlines()
    assert text[0].startswith(root) and len(text) == 4, out.stdout
    assert any(grandkid in l and "from step 1" in l for l in text), out.stdout
    out = stack.orchardctl("trajectory", "tree", "f0f0f0f0")
    assert out.returncode == 125 and "not found" in out.stderr
    for sid in [root, unrelated, grandkid] + kids:
        drop(stack, admin, sid)
