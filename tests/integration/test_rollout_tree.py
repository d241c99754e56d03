"""The issue 21 flow end to end: examples/rollout_tree.py against a test
stack (a 3-step rollout with every_step checkpoints, 4 branches forked at
step 2 after the rollout's sandbox was deleted, each graded with hidden
tests through evaluate, the tree exported), then the exported tree checked
line by line.
"""
import json
import os
import subprocess
import sys

from rollout_helpers import drop

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_example_runs_a_rollout_tree(stack, admin, tmp_path):
    tree_file = str(tmp_path / "tree.jsonl")
    r = subprocess.run([sys.executable, os.path.join(REPO, "examples", "rollout_tree.py"), tree_file],
                       env=stack.env(), capture_output=True, text=True, timeout=900,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    root = summary["root"]
    branches = [b["sandbox_id"] for b in summary["branches"]]
    # The continuations: untouched, a comment, the bug back, an equivalent rewrite.
    assert [b["reward"] for b in summary["branches"]] == [1, 1, 0, 1], summary
    assert [b["exit_code"] for b in summary["branches"]][2] == 1

    with open(tree_file) as f:
        lines = [json.loads(l) for l in f]
    assert summary["tree_lines"] == len(lines)
    headers = {l["sandbox_id"]: l for l in lines if l["type"] == "header"}
    ends = {l["sandbox_id"]: l for l in lines if l["type"] == "end"}
    evals = [b["evaluated_in"] for b in summary["branches"]]
    assert set(headers) == set([root] + branches + evals) == set(ends)
    assert lines[0]["type"] == "header" and lines[0]["sandbox_id"] == root
    assert ends[root]["state"] == "deleted" and ends[root]["steps"] == 3
    root_steps = [l for l in lines if l["sandbox_id"] == root and "step" in l]
    assert [l["step"] for l in root_steps] == [1, 2, 3]
    assert all(l.get("checkpoint_id") for l in root_steps)
    for b, e in zip(branches, evals):
        ff = headers[b]["forked_from"]
        assert (ff["sandbox_id"], ff["step"], ff["checkpoint_id"]) == (root, 2, root_steps[1]["checkpoint_id"])
        assert headers[e]["forked_from"]["sandbox_id"] == b
        ev = [l for l in lines if l["sandbox_id"] == b and l["type"] == "evaluate"]
        assert len(ev) == 1 and ev[0]["fork_sandbox_id"] == e and ev[0]["files"] == ["/workspace/test_hidden.py"]
        # The hidden tests ran in the evaluation fork, never in the branch.
        assert not any(l.get("path") == "/workspace/test_hidden.py" for l in lines if l["sandbox_id"] == b)
        assert ends[b]["steps"] == 1
    for sid in [root] + branches:
        drop(stack, admin, sid)
