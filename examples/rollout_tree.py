#!/usr/bin/env python3
"""A rollout tree with Orchard (issue 21, docs/checkpoints.md).

An RL-style loop in miniature:

1. a 3-step rollout in a sandbox with a checkpoint after every step;
2. after the rollout has ended (its sandbox deleted), 4 branches forked
   from its state after step 2, each continued differently;
3. each branch graded with hidden tests through POST .../evaluate, which
   runs them on a throwaway fork, so the tests never enter the branch;
4. the whole tree exported as JSON lines (GET /v1/trajectories?root=).

Needs only the standard library and requests. Configuration as orchardctl's:
ORCHARD_URL, ORCHARD_API_KEY, ORCHARD_CACERT (optional). Prints a JSON
summary on stdout; writes the tree to the file given as the first argument
(default rollout_tree.jsonl). Exits 0 when every branch got a grade.

    ORCHARD_URL=https://localhost:8443 ORCHARD_API_KEY=... \\
        python3 examples/rollout_tree.py tree.jsonl
"""
import base64
import json
import os
import sys

import requests

SOLUTION = "/workspace/solution.py"
HIDDEN_TESTS = [{
    "path": "/workspace/test_hidden.py",
    "content": "from solution import add\n"
               "assert add(2, 3) == 5, add(2, 3)\n"
               "assert add(-1, 1) == 0\n"
               "print('PASS')\n",
}]
# The rollout: what a policy did, one state-changing step at a time.
ROLLOUT = [
    ("write", "def add(a, b):\n    return a - b\n"),
    ("exec", "sed -i 's/a - b/a + b/' %s" % SOLUTION),          # step 2: the fix
    ("exec", "sed -i 's/a + b/a * b/' %s" % SOLUTION),          # step 3: a regression
]
# Four continuations of the state after step 2.
BRANCHES = [
    "true",
    "printf '# reviewed\\n' >> %s" % SOLUTION,
    "sed -i 's/a + b/a - b/' %s" % SOLUTION,
    "sed -i 's/a + b/b + a/' %s" % SOLUTION,
]
FORK_STEP = 2


class Orchard:
    def __init__(self):
        self.url = os.environ["ORCHARD_URL"].rstrip("/")
        self.s = requests.Session()
        self.s.headers["X-API-Key"] = os.environ["ORCHARD_API_KEY"]
        # Per request: REQUESTS_CA_BUNDLE in the environment would win over Session.verify.
        self.verify = os.environ.get("ORCHARD_CACERT") or True

    def call(self, method, path, **kw):
        r = self.s.request(method, self.url + path, timeout=kw.pop("timeout", 600),
                           verify=self.verify, **kw)
        if r.status_code >= 300:
            raise RuntimeError("%s %s: HTTP %d %s" % (method, path, r.status_code, r.text))
        return r

    def create(self, **spec):
        sid = self.call("POST", "/v1/sandboxes", json=dict({"image": "host"}, **spec)).json()["sandbox_id"]
        self.wait(sid)
        return sid

    def wait(self, sid):
        got = self.call("GET", "/v1/sandboxes/%s/wait" % sid, params={"timeout": 300}).json()
        if got.get("status") != "ready":
            raise RuntimeError("sandbox %s is %s" % (sid, got.get("status")))

    def exec(self, sid, command):
        job = self.call("POST", "/v1/sandboxes/%s/exec" % sid,
                        json={"command": command, "wait": True, "timeout_seconds": 120}).json()
        if job.get("exit_code") != 0:
            raise RuntimeError("step %r failed: %s" % (command, job))
        return job

    def write(self, sid, path, text):
        self.call("POST", "/v1/sandboxes/%s/files" % sid,
                  json={"path": path, "content": base64.b64encode(text.encode()).decode()})

    def fork(self, sid, step, count):
        ids = self.call("POST", "/v1/sandboxes/%s/fork" % sid,
                        json={"step": step, "count": count}).json()["sandbox_ids"]
        for fid in ids:
            self.wait(fid)
        return ids

    def evaluate(self, sid, command, files):
        return self.call("POST", "/v1/sandboxes/%s/evaluate" % sid,
                         json={"command": command, "files": files, "timeout_seconds": 60}).json()

    def export_tree(self, root, out):
        r = self.call("GET", "/v1/trajectories", params={"root": root}, stream=True)
        n = 0
        for line in r.iter_lines():
            if line:
                out.write(line.decode() + "\n")
                n += 1
        return n

    def delete(self, sid):
        self.call("DELETE", "/v1/sandboxes/%s" % sid)


def main(argv):
    tree_file = argv[1] if len(argv) > 1 else "rollout_tree.jsonl"
    o = Orchard()
    root = o.create(checkpoints="every_step", labels={"example": "rollout_tree"})
    for kind, arg in ROLLOUT:
        if kind == "write":
            o.write(root, SOLUTION, arg)
        else:
            o.exec(root, arg)
    o.delete(root)                                   # the rollout has ended

    branches = o.fork(root, FORK_STEP, len(BRANCHES))
    summary = {"root": root, "fork_step": FORK_STEP, "branches": []}
    for sid, continuation in zip(branches, BRANCHES):
        o.exec(sid, continuation)
        graded = o.evaluate(sid, "cd /workspace && python3 test_hidden.py", HIDDEN_TESTS)
        job = graded["job"]
        summary["branches"].append({
            "sandbox_id": sid, "continuation": continuation,
            "evaluated_in": graded["fork_sandbox_id"], "exit_code": job["exit_code"],
            "reward": 1 if job["exit_code"] == 0 else 0,
        })
    with open(tree_file, "w") as out:
        summary["tree_lines"] = o.export_tree(root, out)
    summary["tree_file"] = tree_file
    for sid in branches:
        o.delete(sid)
    json.dump(summary, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
