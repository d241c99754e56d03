"""Streaming exec through the whole stack (issue 4, item 3): POST
/sandboxes/{id}/exec with "stream": true or Accept: application/x-ndjson
answers NDJSON as the command writes: {"type":"job"}, the agent's
stdout/stderr lines (base64), then {"type":"exit","job":{...}}.
"""
import base64
import json
import os
import subprocess
import uuid

import pytest

from stack import BIN


def lines_of(r):
    for raw in r.iter_lines():
        if raw:
            yield json.loads(raw)


def upload(stack, s, sid, path, data=b"go"):
    r = s.put("%s/v1/sandboxes/%s/files/raw" % (stack.url, sid), params={"path": path}, data=data)
    assert r.status_code == 200, r.text


def test_output_arrives_while_the_command_runs(stack, admin, sandbox):
    """The command prints, then blocks until the test answers by uploading a
    file (not an exec: execs of one sandbox queue): a buffered answer would
    never show the first line, and the test would time out."""
    go = "/tmp/go-%s" % uuid.uuid4().hex[:8]
    cmd = "printf first; while [ ! -e %s ]; do sleep 0.05; done; printf second >&2; exit 2" % go
    with admin.post("%s/v1/sandboxes/%s/exec" % (stack.url, sandbox),
                    json={"command": cmd, "stream": True}, stream=True) as r:
        assert r.status_code == 200, r.text
        assert r.headers["Content-Type"].startswith("application/x-ndjson")
        it = lines_of(r)
        head = next(it)
        assert head["type"] == "job" and head["job_id"], head
        first = next(it)
        assert first == {"type": "stdout", "data": base64.b64encode(b"first").decode()}, first
        running = admin.get("%s/v1/jobs/%s" % (stack.url, head["job_id"])).json()
        assert running["status"] == "running", running
        upload(stack, admin, sandbox, go)
        rest = list(it)
    assert [x["type"] for x in rest] == ["stderr", "exit"], rest
    assert base64.b64decode(rest[0]["data"]) == b"second"
    job = rest[-1]["job"]
    assert job["job_id"] == head["job_id"] and job["status"] == "failed" and job["exit_code"] == 2
    assert job["stdout"] == "first" and job["stderr"] == "second", job
    # the stored job is the same as the last line's
    assert admin.get("%s/v1/jobs/%s" % (stack.url, head["job_id"])).json() == job


def test_accept_header_streams_binary_output_exactly(stack, admin, sandbox):
    with admin.post("%s/v1/sandboxes/%s/exec" % (stack.url, sandbox),
                    json={"command": ["sh", "-c", "printf '\\377\\000x'; printf 'y'"], "wait": False},
                    headers={"Accept": "application/x-ndjson"}, stream=True) as r:
        assert r.status_code == 200, r.text
        frames = list(lines_of(r))
    assert frames[0]["type"] == "job" and frames[-1]["type"] == "exit"
    out = b"".join(base64.b64decode(f["data"]) for f in frames if f["type"] == "stdout")
    assert out == b"\xff\x00xy"
    job = frames[-1]["job"]
    assert job["status"] == "succeeded" and job["exit_code"] == 0, job


def test_a_failure_to_start_is_the_job_not_the_request(stack, admin, sandbox):
    with admin.post("%s/v1/sandboxes/%s/exec" % (stack.url, sandbox),
                    json={"command": ["no-such-program-orchard"], "stream": True}, stream=True) as r:
        assert r.status_code == 200, r.text
        frames = list(lines_of(r))
    job = frames[-1]["job"]
    assert job["exit_code"] == 127 and "no-such-program-orchard" in job["stderr"], job


@pytest.mark.parametrize("body, status", [
    ({"command": "true", "stream": "yes"}, 422),
    ({"command": "true", "stream": 1}, 422),
    ({"stream": True}, 422),
])
def test_bad_stream_requests_are_4xx_and_write_nothing(stack, admin, sandbox, body, status):
    before = stack.counts()
    r = admin.post("%s/v1/sandboxes/%s/exec" % (stack.url, sandbox), json=body)
    assert r.status_code == status, r.text
    assert r.json()["code"] and r.headers["Content-Type"].startswith("application/json")
    assert stack.counts() == before


def test_streaming_on_an_unknown_sandbox_is_a_plain_404(stack, admin):
    r = admin.post("%s/v1/sandboxes/no-such-box-%s/exec" % (stack.url, uuid.uuid4().hex[:6]),
                   json={"command": "true", "stream": True})
    assert r.status_code == 404 and r.json()["code"] == "not_found", r.text


def test_orchardctl_exec_prints_output_as_the_command_writes(stack, admin, sandbox):
    """orchardctl exec streams: the first line is on our stdout while the
    command still waits for the test (a file upload) to let it finish."""
    go = "/tmp/go-%s" % uuid.uuid4().hex[:8]
    cmd = "echo first; while [ ! -e %s ]; do sleep 0.05; done; echo second; echo err >&2; exit 3" % go
    p = subprocess.Popen([os.path.join(BIN, "orchardctl"), "exec", "-n", sandbox, "--", "sh", "-c", cmd],
                         env=stack.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL)
    try:
        assert p.stdout.readline() == b"first\n"
        assert p.poll() is None
        upload(stack, admin, sandbox, go)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert out == b"second\n" and err == b"err\n" and p.returncode == 3, (out, err)
