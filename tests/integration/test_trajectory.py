"""Trajectories (docs/trajectory.md): export, JSON Schema, replay, views.

A multi-turn session is recorded through the real stack, exported as JSON
lines (every line validated against docs/trajectory.schema.json), replayed
with orchardctl into fresh sandboxes, and summarised by the SQL views.
Needs python3-jsonschema (Debian 12: 4.10, which has Draft 2020-12).
"""
import base64
import hashlib
import json
import os
import uuid

import jsonschema
import pytest

import rollout_helpers
from rollout_helpers import execute
from stack import REPO

SCHEMA_PATH = os.path.join(REPO, "docs", "trajectory.schema.json")
RUN = uuid.uuid4().hex[:12]          # labels every sandbox of this module
NDJSON = "application/x-ndjson"


@pytest.fixture(scope="module")
def validator():
    with open(SCHEMA_PATH) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def create(stack, session, labels=None, **spec):
    return rollout_helpers.create(stack, session, dict({"traj-run": RUN}, **(labels or {})),
                                  **spec)


def export(stack, session, sid, params=None):
    r = session.get("%s/v1/sandboxes/%s/trajectory" % (stack.url, sid), params=params)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith(NDJSON)
    return [json.loads(line) for line in r.text.splitlines() if line]


def check_lines(validator, lines):
    """Every line valid; header first, end last; steps numbered 1..N."""
    for i, line in enumerate(lines):
        errors = sorted(validator.iter_errors(line), key=str)
        assert not errors, "line %d %r: %s" % (i, line, errors[0].message)
    assert lines[0]["type"] == "header" and lines[-1]["type"] == "end"
    steps = [l for l in lines if "step" in l]
    assert [l["step"] for l in steps] == list(range(1, len(steps) + 1))
    assert lines[-1]["steps"] == len(steps)
    return steps


def write_lines(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("".join(json.dumps(l) + "\n" for l in lines))
    return str(path)


# ---- a recorded multi-turn session ------------------------------------------

@pytest.fixture(scope="module")
def recorded(stack, admin):
    """A session of several turns; returns (sandbox id, what each step was)."""
    sid = create(stack, admin, labels={"kind": "recorded"}, env={"GREETING": "hello"})
    turns = []

    def turn(kind, expect_ok, **info):
        turns.append(dict(kind=kind, ok=expect_ok, **info))

    execute(stack, admin, sid, "echo $GREETING world")
    turn("exec", True, stdout="hello world\n")
    execute(stack, admin, sid, ["cat"], stdin="line1\nline2\n")
    turn("exec", True, stdout="line1\nline2\n", stdin="line1\nline2\n")
    execute(stack, admin, sid, "mkdir -p /workspace/proj && printf 'a\\nb\\n' > /workspace/proj/f.txt")
    turn("exec", True)

    # A file upload and a patch are steps too.
    content = b"print('hi')\n"
    r = admin.post("%s/v1/sandboxes/%s/files" % (stack.url, sid),
                   json={"path": "/workspace/proj/g.py",
                         "content": base64.b64encode(content).decode()})
    assert r.status_code == 200, r.text
    turn("file.write", True, path="/workspace/proj/g.py", size=len(content),
         sha256=hashlib.sha256(content).hexdigest())
    patch = ("--- a/proj/f.txt\n+++ b/proj/f.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n")
    r = admin.post("%s/v1/sandboxes/%s/apply_patch" % (stack.url, sid), json={"patch": patch})
    assert r.status_code == 200, r.text
    assert r.json()["success"] is True, r.text
    turn("git.apply", True, patch=patch)

    execute(stack, admin, sid, "echo to-stderr >&2; exit 3")
    turn("exec", False, stderr="to-stderr\n", exit_code=3)
    execute(stack, admin, sid, ["sh", "-c", "echo $X; pwd"], cwd="/workspace/proj", env={"X": "1"})
    turn("exec", True, stdout="1\n/workspace/proj\n", cwd="/workspace/proj", env={"X": "1"})
    return sid, turns


def test_export_is_valid_jsonl_with_every_step_in_order(stack, admin, recorded, validator):
    sid, turns = recorded
    lines = export(stack, admin, sid)
    steps = check_lines(validator, lines)
    header = lines[0]
    assert header["format"] == "orchard.trajectory" and header["version"] == 1
    assert header["sandbox"]["image"] == "host"
    assert header["sandbox"]["env"] == {"GREETING": "hello"}
    assert header["sandbox"]["labels"]["traj-run"] == RUN
    assert all(l["sandbox_id"] == sid for l in lines)
    assert [s["type"] for s in steps] == [t["kind"] for t in turns], \
        "the file/git routes must record file.write / git.apply events (docs/trajectory.md)"
    for step, want in zip(steps, turns):
        for key in ("stdout", "stderr", "stdin", "exit_code", "cwd", "env", "path", "size",
                    "sha256", "patch"):
            if key in want:
                assert step[key] == want[key], (step, key)
        if step["type"] == "exec":
            assert step["status"] == ("succeeded" if want["ok"] else "failed")
            assert step["timed_out"] is False
            assert step["completed_at"] >= step["started_at"]
            assert step["duration_seconds"] >= 0
    assert "stdin" not in steps[0]
    assert lines[-1]["state"] == "ready"


def test_export_streams_and_rejects_bad_parameters(stack, admin, recorded):
    sid, _ = recorded
    r = admin.get("%s/v1/sandboxes/%s/trajectory" % (stack.url, sid), params={"include": "nope"})
    assert r.status_code == 422 and r.json()["code"] == "invalid"
    r = admin.get("%s/sandboxes/%s/trajectory" % (stack.url, sid), params={"include": "content"})
    assert r.status_code == 200 and r.text.endswith("\n")  # unprefixed route too
    r = admin.get(stack.url + "/v1/trajectories", params={"limit": "0"})
    assert r.status_code == 422
    r = admin.get(stack.url + "/v1/sandboxes/no-such-sandbox/trajectory")
    assert r.status_code == 404 and r.json()["code"] == "not_found"


def test_another_tenants_trajectory_is_not_found(stack, other, recorded):
    sid, _ = recorded
    r = other.get("%s/v1/sandboxes/%s/trajectory" % (stack.url, sid))
    assert r.status_code == 404
    r = other.get(stack.url + "/v1/trajectories", params={"label": "traj-run=" + RUN})
    assert r.status_code == 200 and r.text == ""


def test_replay_matches_every_step(stack, recorded, tmp_path):
    sid, turns = recorded
    out = str(tmp_path / "t.jsonl")
    r = stack.orchardctl("trajectory", "export", sid, "-o", out)
    assert r.returncode == 0, r.stderr
    r = stack.orchardctl("replay", out, "-o", "json", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["summary"]["trajectories"] == 1 and report["summary"]["matched"] == 1
    t = report["trajectories"][0]
    assert t["sandbox_id"] == sid and t["result"] == "match"
    assert t["steps"] == len(turns) and t["diverged"] == 0 and t["errors"] == 0
    assert [s["result"] for s in t["step_results"]] == ["match"] * len(turns)
    # The replay sandbox was deleted (not kept).
    new = t["replay_sandbox_id"]
    assert stack.scalar("SELECT state FROM sandboxes WHERE id = '%s'" % new) in ("deleting", "deleted")
    assert stack.scalar("SELECT labels->>'orchard/replay-of' FROM sandboxes WHERE id = '%s'" % new) == sid
    # The text report.
    r = stack.orchardctl("replay", out, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "result: match" in r.stdout and "summary: 1 trajectory" in r.stdout


@pytest.fixture(scope="module")
def nondeterministic(stack, admin):
    sid = create(stack, admin, labels={"kind": "nondeterministic"})
    execute(stack, admin, sid, "echo stable")
    execute(stack, admin, sid, "date +%s%N")
    execute(stack, admin, sid, "echo after")
    return sid


def test_a_nondeterministic_step_is_a_divergence(stack, nondeterministic, tmp_path):
    out = str(tmp_path / "nd.jsonl")
    r = stack.orchardctl("trajectory", "export", nondeterministic, "-o", out)
    assert r.returncode == 0, r.stderr
    r = stack.orchardctl("replay", out, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "DIVERGED: stdout differs" in r.stdout
    assert "--- recorded stdout" in r.stdout and "+++ replayed stdout" in r.stdout
    r = stack.orchardctl("replay", out, "-o", "json", timeout=300)
    assert r.returncode == 1
    steps = json.loads(r.stdout)["trajectories"][0]["step_results"]
    assert [s["result"] for s in steps] == ["match", "diverged", "match"]
    assert steps[1]["reason"] == "stdout differs" and "@@ line 1 @@" in steps[1]["diff"]
    r = stack.orchardctl("replay", out, "--compare", "exit-code", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    r = stack.orchardctl("replay", out, "--compare", "none", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def test_bulk_export_and_parallel_replay(stack, admin, recorded, nondeterministic, validator, tmp_path):
    sid, turns = recorded
    r = admin.get(stack.url + "/v1/trajectories", params={"label": "traj-run=" + RUN, "limit": "50"})
    assert r.status_code == 200 and r.headers["Content-Type"].startswith(NDJSON)
    lines = [json.loads(l) for l in r.text.splitlines()]
    headers = [l["sandbox_id"] for l in lines if l["type"] == "header"]
    assert sid in headers and nondeterministic in headers
    for one in headers:  # each trajectory is whole and contiguous
        part = [l for l in lines if l["sandbox_id"] == one]
        check_lines(validator, part)
    r = admin.get(stack.url + "/v1/trajectories",
                  params=[("label", "traj-run=" + RUN), ("label", "kind=recorded")])
    assert [l["sandbox_id"] for l in map(json.loads, r.text.splitlines())
            if l["type"] == "header"] == [sid]
    r = admin.get(stack.url + "/v1/trajectories", params={"label": "traj-run=" + RUN, "limit": "1"})
    assert sum(1 for l in r.text.splitlines() if json.loads(l)["type"] == "header") == 1

    out = str(tmp_path / "bulk.jsonl")
    r = stack.orchardctl("trajectory", "export", "--all", "-l", "traj-run=" + RUN, "-o", out)
    assert r.returncode == 0, r.stderr
    r = stack.orchardctl("replay", out, "--parallel", "3", "--compare", "exit-code", "-o", "json",
                         timeout=600)
    report = json.loads(r.stdout)
    n = len(report["trajectories"])
    assert report["summary"]["trajectories"] == n >= 2
    by_id = {t["sandbox_id"]: t for t in report["trajectories"]}
    assert by_id[sid]["result"] == "match" and by_id[nondeterministic]["result"] == "match"
    assert r.returncode == (0 if report["summary"]["matched"] == n else 1)


def test_deleted_sandbox_still_exports(stack, admin, validator):
    sid = create(stack, admin, labels={"kind": "deleted"})
    execute(stack, admin, sid, "echo bye")
    assert admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid)).status_code == 200
    assert admin.get("%s/v1/sandboxes/%s" % (stack.url, sid)).status_code == 404
    lines = export(stack, admin, sid)
    steps = check_lines(validator, lines)
    assert [s["stdout"] for s in steps] == ["bye\n"]
    assert [l["type"] for l in lines].count("delete") == 1
    assert lines[-1]["state"] in ("deleting", "deleted") and lines[-1]["deleted_at"]


def test_views_give_the_figures_of_the_session(stack, admin, recorded):
    sid, turns = recorded
    lines = export(stack, admin, sid)
    steps = [l for l in lines if "step" in l]
    execs = [s for s in steps if s["type"] == "exec"]
    first_failed = next(i + 1 for i, t in enumerate(turns) if not t["ok"])
    row = stack.psql("SELECT steps, exec_steps, failed_steps, first_failed_step, duration_seconds,"
                     " exec_seconds, tenant_id FROM trajectory_summary"
                     " WHERE sandbox_id = '%s'" % sid)
    assert len(row) == 1
    n, n_exec, n_failed, first, duration, exec_s, tenant = row[0]
    assert int(n) == len(turns) and int(n_exec) == len(execs)
    assert int(n_failed) == sum(1 for t in turns if not t["ok"])
    assert int(first) == first_failed
    starts = [s["started_at"] if s["type"] == "exec" else s["at"] for s in steps]
    ends = [s["completed_at"] if s["type"] == "exec" else s["at"] for s in steps]
    assert abs(float(duration) - (max(ends) - min(starts))) < 0.01
    assert abs(float(exec_s) - sum(s["duration_seconds"] for s in execs)) < 0.01
    assert tenant == stack.scalar("SELECT tenant_id FROM sandboxes WHERE id = '%s'" % sid)
    per_step = stack.psql("SELECT step, kind, ok FROM trajectory_steps WHERE sandbox_id = '%s'"
                          " ORDER BY step" % sid)
    assert [(int(s), k) for s, k, _ in per_step] == [(s["step"], s["type"]) for s in steps]
    assert [ok == "t" for _, _, ok in per_step] == [t["ok"] for t in turns]


def test_replay_refuses_files_that_are_not_complete_trajectories(stack, admin, recorded, tmp_path):
    sid, _ = recorded
    lines = export(stack, admin, sid)
    truncated = write_lines(tmp_path, "trunc.jsonl", lines[:-1])
    r = stack.orchardctl("replay", truncated)
    assert r.returncode == 125 and 'no "end" line' in r.stderr
    future = dict(lines[0], version=2)
    r = stack.orchardctl("replay", write_lines(tmp_path, "v2.jsonl", [future] + lines[1:]))
    assert r.returncode == 125 and "version 2 is not supported" in r.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    assert stack.orchardctl("replay", str(bad)).returncode == 125
    assert stack.orchardctl("replay", str(bad), "--compare", "fuzzy").returncode == 125
    assert stack.orchardctl("replay").returncode == 125
    r = stack.orchardctl("trajectory", "export", "no-such-sandbox")
    assert r.returncode == 125 and "not found" in r.stderr
