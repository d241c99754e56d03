"""POST /v1/trajectories/replay (docs/trajectory.md, "Replay in the API").

A multi-turn session (exec, file upload, tar upload, patch, exec) is
recorded through the real stack, exported, and replayed by the api itself:
every step matches, a nondeterministic step diverges, bad bodies are
refused before anything is created, the replay runs as the caller's
tenant, keep decides whether the sandbox stays, and concurrent replays of
one tenant are bounded. The report has the shape `orchardctl replay -o
json` prints, and the replayed sandbox records its own trajectory.
"""
import base64
import hashlib
import io
import json
import tarfile
import os
import threading
import uuid

import jsonschema
import pytest

import rollout_helpers
from rollout_helpers import execute
from stack import REPO
from test_api import check_against_spec, load_spec

ROUTE = "/v1/trajectories/replay"

RUN = uuid.uuid4().hex[:12]
REPLAY_TIMEOUT = 300
TAR_FILES = (("a.txt", b"from the tar\n"), ("sub/b.txt", b"deeper\n"))


def create(stack, session, **spec):
    return rollout_helpers.create(stack, session, {"replay-api-run": RUN}, **spec)


def export_text(stack, session, sid):
    r = session.get("%s/v1/sandboxes/%s/trajectory" % (stack.url, sid),
                    params={"include": "content"})
    assert r.status_code == 200, r.text
    return r.text


def lines_of(text):
    return [json.loads(l) for l in text.splitlines() if l]


def replay(stack, session, body, **params):
    if isinstance(body, list):
        body = "".join(json.dumps(l) + "\n" for l in body)
    return session.post(stack.url + "/v1/trajectories/replay", data=body, params=params,
                        headers={"Content-Type": "application/x-ndjson"}, timeout=REPLAY_TIMEOUT)


def make_tar():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in TAR_FILES:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def sandbox_state(stack, sid):
    return stack.scalar("SELECT state FROM sandboxes WHERE id = '%s'" % sid)


def replays_of(stack, sid):
    return int(stack.scalar("SELECT count(*) FROM sandboxes WHERE labels->>'orchard/replay-of' = '%s'"
                            % sid))


@pytest.fixture(scope="module")
def session_recorded(stack, admin):
    """exec, upload, tar upload, patch, exec; returns (sandbox id, tar bytes, export text)."""
    sid = create(stack, admin, env={"GREETING": "hello"})
    execute(stack, admin, sid, "echo $GREETING; mkdir -p /workspace/proj && printf 'a\\nb\\n' > /workspace/proj/f.txt")
    r = admin.post("%s/v1/sandboxes/%s/files" % (stack.url, sid),
                   json={"path": "/workspace/proj/g.py", "content": base64.b64encode(b"print(42)\n").decode()})
    assert r.status_code == 200, r.text
    tar = make_tar()
    r = admin.put("%s/v1/sandboxes/%s/archive" % (stack.url, sid), params={"path": "/workspace/tree"},
                  data=tar)
    assert r.status_code == 200, r.text
    patch = "--- a/proj/f.txt\n+++ b/proj/f.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"
    r = admin.post("%s/v1/sandboxes/%s/apply_patch" % (stack.url, sid), json={"patch": patch})
    assert r.status_code == 200, r.text
    execute(stack, admin, sid, "cat /workspace/tree/a.txt /workspace/tree/sub/b.txt /workspace/proj/g.py; "
            "ls /workspace/tree")
    return sid, tar, export_text(stack, admin, sid)


def test_archive_upload_is_one_recorded_and_exported_step(stack, session_recorded):
    sid, tar, text = session_recorded
    with open(os.path.join(REPO, "docs", "trajectory.schema.json")) as f:
        validator = jsonschema.Draft202012Validator(json.load(f))
    for line in lines_of(text):
        errors = list(validator.iter_errors(line))
        assert not errors, (line["type"], errors[0].message)
    assert stack.scalar("SELECT count(*) FROM events WHERE sandbox_id = '%s' AND kind = 'archive.upload'"
                        % sid) == "1"
    steps = [l for l in lines_of(text) if "step" in l]
    assert [s["type"] for s in steps] == ["exec", "file.write", "archive.upload", "git.apply", "exec"]
    arc = steps[2]
    assert arc["path"] == "/workspace/tree" and arc["success"] is True
    assert arc["size"] == len(tar) and arc["sha256"] == hashlib.sha256(tar).hexdigest()
    assert arc["entries"] >= 2 and arc["content_recorded"] is True
    assert base64.b64decode(arc["content"]) == tar
    # the views number it like the export
    rows = stack.psql("SELECT step, kind FROM trajectory_steps WHERE sandbox_id = '%s' ORDER BY step" % sid)
    assert [(int(n), k) for n, k in rows] == [(s["step"], s["type"]) for s in steps]


def test_replay_in_the_api_matches_every_step(stack, admin, session_recorded, tmp_path):
    sid, _, text = session_recorded
    r = replay(stack, admin, text)
    assert r.status_code == 200, r.text
    check_against_spec(load_spec(), r, "post", ROUTE)
    out = r.json()
    assert out["summary"] == {"trajectories": 1, "matched": 1, "diverged": 0, "errors": 0,
                              "compare": "exact",
                              "steps": {"matched": 5, "diverged": 0, "skipped": 0, "errors": 0}}
    t = out["trajectories"][0]
    assert t["sandbox_id"] == sid and t["result"] == "match" and t["kept"] is False
    assert [(s["step"], s["type"], s["result"]) for s in t["step_results"]] == [
        (1, "exec", "match"), (2, "file.write", "match"), (3, "archive.upload", "match"),
        (4, "git.apply", "match"), (5, "exec", "match")]
    new = t["replay_sandbox_id"]
    assert new != sid
    # not kept, labelled with what it replays, and its own trajectory was
    # recorded by the same routes
    assert sandbox_state(stack, new) in ("deleting", "deleted")
    assert stack.scalar("SELECT labels->>'orchard/replay-of' FROM sandboxes WHERE id = '%s'" % new) == sid
    mine = [l for l in lines_of(export_text(stack, admin, new)) if "step" in l]
    theirs = [l for l in lines_of(text) if "step" in l]
    assert [s["type"] for s in mine] == [s["type"] for s in theirs]
    assert mine[4]["stdout"] == theirs[4]["stdout"] and "from the tar" in mine[4]["stdout"]
    assert mine[2]["sha256"] == theirs[2]["sha256"]
    assert [l["type"] for l in lines_of(export_text(stack, admin, new))].count("delete") == 1

    # orchardctl replay -o json reports the same shape and the same
    # verdicts: one step loop (lib/traj_replay.c), the archive PUT again
    f = tmp_path / "t.jsonl"
    f.write_text(text)
    c = stack.orchardctl("replay", str(f), "-o", "json", timeout=REPLAY_TIMEOUT)
    cli = json.loads(c.stdout)
    assert set(cli) == set(out) and set(cli["summary"]) == set(out["summary"])
    ct = cli["trajectories"][0]
    assert set(ct) == set(t)
    assert [s["result"] for s in ct["step_results"]] == ["match"] * 5
    for a, b in zip(ct["step_results"], t["step_results"]):
        assert set(a) == set(b), (a, b)


@pytest.fixture(scope="module")
def nondeterministic(stack, admin):
    sid = create(stack, admin)
    execute(stack, admin, sid, "echo stable")
    execute(stack, admin, sid, "head -c8 /dev/urandom | od -An -tx1")
    execute(stack, admin, sid, ["sh", "-c", "echo after; exit 3"])
    return sid, export_text(stack, admin, sid)


def test_a_nondeterministic_step_is_reported_diverged(stack, admin, nondeterministic):
    sid, text = nondeterministic
    r = replay(stack, admin, text)
    assert r.status_code == 200, r.text
    t = r.json()["trajectories"][0]
    assert t["result"] == "diverged" and r.json()["summary"]["diverged"] == 1
    steps = t["step_results"]
    assert [s["result"] for s in steps] == ["match", "diverged", "match"]
    assert steps[1]["reason"] == "stdout differs"
    assert "--- recorded stdout" in steps[1]["diff"] and "@@ line 1 @@" in steps[1]["diff"]
    recorded = [l for l in lines_of(text) if "step" in l]
    assert steps[1]["replayed"]["stdout"] != recorded[1]["stdout"]
    assert steps[2]["recorded"]["exit_code"] == 3 and steps[2]["replayed"]["exit_code"] == 3
    r = replay(stack, admin, text, compare="exit-code")
    assert r.status_code == 200 and r.json()["trajectories"][0]["result"] == "match", r.text
    assert r.json()["summary"]["compare"] == "exit-code"


def test_keep_leaves_the_sandbox_and_reports_it(stack, admin, nondeterministic):
    _, text = nondeterministic
    r = replay(stack, admin, text, keep="true", compare="none")
    assert r.status_code == 200, r.text
    t = r.json()["trajectories"][0]
    assert t["kept"] is True and t["result"] == "match"
    new = t["replay_sandbox_id"]
    info = admin.get("%s/v1/sandboxes/%s" % (stack.url, new))
    assert info.status_code == 200 and info.json()["status"] == "ready"
    assert admin.delete("%s/v1/sandboxes/%s" % (stack.url, new)).status_code == 200


def test_bad_bodies_are_refused_and_create_nothing(stack, admin, nondeterministic):
    _, text = nondeterministic
    lines = lines_of(text)
    spec = load_spec()
    before = stack.counts()
    cases = [
        ("not json\n", 400, "bad_request", "not a JSON object"),
        ("", 422, "invalid", "no trajectory"),
        (lines[:-1], 422, "invalid", 'no "end" line'),
        ([dict(lines[0], version=2)] + lines[1:], 422, "invalid", "version 2 is not supported"),
        ([dict(lines[0], format="other")] + lines[1:], 422, "invalid", "not an orchard.trajectory"),
        (lines + lines, 422, "invalid", "more than one trajectory"),
        (lines[1:], 422, "invalid", "outside its trajectory"),
        ('{"type":"header"', 400, "bad_request", "line 1"),
    ]
    for body, status, code, words in cases:
        r = replay(stack, admin, body)
        assert r.status_code == status, (body if isinstance(body, str) else body[:1], r.text)
        assert r.json()["code"] == code and words in r.json()["detail"], r.text
        check_against_spec(spec, r, "post", ROUTE)
    for params in ({"compare": "fuzzy"}, {"keep": "maybe"}, {"ready_timeout": "0"},
                   {"ready_timeout": "x"}, {"image": ""}):
        r = replay(stack, admin, text, **params)
        assert r.status_code == 422 and r.json()["code"] == "invalid", (params, r.text)
    # past the api's body limit (16 MiB): refused before it is read
    huge = text + "\n" * (17 << 20)
    r = replay(stack, admin, huge)
    assert r.status_code == 413, r.text
    check_against_spec(spec, r, "post", ROUTE)
    # an image that does not validate is the create's 422: nothing exists
    r = replay(stack, admin, text, image="has space")
    assert r.status_code == 422
    r = replay(stack, admin, [dict(lines[0], sandbox=dict(lines[0]["sandbox"], memory="lots"))] + lines[1:])
    assert r.status_code == 422 and "cannot create a sandbox to replay into" in r.json()["detail"], r.text
    after = stack.counts()
    assert after["sandboxes"] == before["sandboxes"] and after["jobs"] == before["jobs"]


def test_the_replay_runs_as_the_callers_tenant(stack, admin, other, session_recorded):
    sid, _, text = session_recorded
    steps_before = stack.scalar("SELECT count(*) FROM events WHERE sandbox_id = '%s'" % sid)
    r = replay(stack, other, text, keep="true")
    assert r.status_code == 200, r.text
    t = r.json()["trajectories"][0]
    assert t["result"] == "match", t
    new = t["replay_sandbox_id"]
    owner = stack.scalar("SELECT t.name FROM sandboxes s JOIN tenants t ON t.id = s.tenant_id"
                         " WHERE s.id = '%s'" % new)
    assert owner == "tenant-b"
    assert admin.get("%s/v1/sandboxes/%s" % (stack.url, new)).status_code == 404
    assert other.get("%s/v1/sandboxes/%s" % (stack.url, new)).status_code == 200
    # the recorded sandbox (tenant default) was not touched
    assert stack.scalar("SELECT count(*) FROM events WHERE sandbox_id = '%s'" % sid) == steps_before
    assert other.get("%s/v1/sandboxes/%s/trajectory" % (stack.url, sid)).status_code == 404
    assert other.delete("%s/v1/sandboxes/%s" % (stack.url, new)).status_code == 200


def test_concurrent_replays_of_a_tenant_are_bounded(stack, admin):
    sid = create(stack, admin)
    execute(stack, admin, sid, "sleep 6; echo slept")
    text = export_text(stack, admin, sid)
    results = []

    def run():
        results.append(replay(stack, admin, text))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        # both hold their slot once their sandboxes exist (default: 2 per tenant)
        stack.wait_for(lambda: replays_of(stack, sid) == 2, timeout=60, what="two running replays")
        r = replay(stack, admin, text)
        assert r.status_code == 429, r.text
        assert r.json()["code"] == "quota_exceeded" and "Retry-After" in r.headers
        check_against_spec(load_spec(), r, "post", ROUTE)
    finally:
        for t in threads:
            t.join(timeout=REPLAY_TIMEOUT)
    assert [x.status_code for x in results] == [200, 200], [x.text for x in results]
    assert all(x.json()["trajectories"][0]["result"] == "match" for x in results)
    assert replays_of(stack, sid) == 2


def test_a_client_that_goes_away_stops_the_replay(stack, admin):
    """nginx closes the FastCGI connection when the client leaves; the api
    sees it before the next step, runs no more steps and deletes the
    sandbox instead of replaying to no one."""
    import requests
    sid = create(stack, admin)
    for n in range(5):
        execute(stack, admin, sid, "sleep 3; echo %d" % n)
    text = export_text(stack, admin, sid)
    with pytest.raises(requests.exceptions.ReadTimeout):
        admin.post(stack.url + ROUTE, data=text, headers={"Content-Type": "application/x-ndjson"},
                   timeout=(10, 2))
    stack.wait_for(lambda: replays_of(stack, sid) == 1, timeout=60, what="the replay's sandbox")
    new = stack.scalar("SELECT id FROM sandboxes WHERE labels->>'orchard/replay-of' = '%s'" % sid)
    stack.wait_for(lambda: sandbox_state(stack, new) in ("deleting", "deleted"), timeout=120,
                   what="the abandoned replay's sandbox deleted")
    ran = int(stack.scalar("SELECT count(*) FROM jobs WHERE sandbox_id = '%s'" % new))
    assert ran < 5, ran   # 0 when it left before the first step began
