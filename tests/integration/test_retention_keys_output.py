"""Retention of Idempotency-Key bodies and of the output pieces of jobs that
ended without their runner (issue 23; lib/prune.c, docs/observability.md
"Retention"): neither table grows for ever, a retry still never runs a
command twice, and a reader gets the same bytes after the pieces moved
into the job row.

Ages are set by backdating rows, so nothing depends on timing.
"""
import base64
import json
import uuid

from test_api import exec_wait, get_job


def prune(stack, *args):
    r = stack.admin("prune", *args)
    assert r.returncode == 0, r.stderr
    return r.stdout


def exec_with_key(stack, s, sandbox, key, command):
    r = s.post("%s/sandboxes/%s/exec" % (stack.url, sandbox),
               json=dict(command=command, wait=True), headers={"Idempotency-Key": key})
    assert r.status_code == 200, r.text
    return r


def stream(stack, s, job_id):
    r = s.get("%s/v1/jobs/%s/stream" % (stack.url, job_id), timeout=60)
    assert r.status_code == 200, r.text
    data = {"stdout": b"", "stderr": b""}
    lines = [json.loads(x) for x in r.text.splitlines() if x.strip()]
    for o in lines:
        if o["type"] in data:
            assert o["offset"] == len(data[o["type"]]), lines
            data[o["type"]] += base64.b64decode(o["data"])
    assert lines[-1]["type"] == "exit", lines
    return data


def test_old_idempotency_keys_go_and_a_retry_still_runs_nothing_twice(stack, admin, sandbox):
    old, new = "ret-old-" + uuid.uuid4().hex[:8], "ret-new-" + uuid.uuid4().hex[:8]
    marker = "/tmp/ret-%s" % uuid.uuid4().hex[:8]
    cmd = "echo x >> %s; wc -l < %s" % (marker, marker)
    first = exec_with_key(stack, admin, sandbox, old, cmd).json()
    exec_with_key(stack, admin, sandbox, new, "true")
    stack.psql("UPDATE idempotency_keys SET created_at = now() - interval '25 hours'"
               " WHERE key = '%s'" % old)
    assert "1 idempotency keys (older than 24 hours)" in prune(stack, "--dry-run")
    out = prune(stack)
    assert "1 idempotency keys (older than 24 hours)" in out, out
    assert stack.scalar("SELECT count(*) FROM idempotency_keys WHERE key = '%s'" % old) == "0"
    assert stack.scalar("SELECT count(*) FROM idempotency_keys WHERE key = '%s'" % new) == "1"
    # a retry with the pruned key is still the first job: the command ran once
    again = exec_with_key(stack, admin, sandbox, old, cmd)
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert again.json()["job_id"] == first["job_id"]
    assert exec_wait(stack, admin, sandbox, "wc -l < %s" % marker)["stdout"].strip() == "1"
    # the key within its retention still refuses another body
    r = admin.post("%s/sandboxes/%s/exec" % (stack.url, sandbox),
                   json=dict(command="echo other", wait=True), headers={"Idempotency-Key": new})
    assert r.status_code == 422, r.text


def test_output_pieces_of_an_ended_job_move_into_its_row(stack, admin, sandbox):
    # Jobs whose runner died: failed, no output in the row, pieces left in
    # job_output (what the lease reaper leaves; see test_job_stream_resume).
    orphan, recent, own = (exec_wait(stack, admin, sandbox, c)["job_id"]
                           for c in ("true", "true", "echo mine"))
    for job in (orphan, recent, own):
        stack.psql("UPDATE jobs SET status = 'failed', error = 'runner died: job was not completed',"
                   " stdout = CASE WHEN id = '%s' THEN stdout ELSE ''::bytea END,"
                   " completed_at = now() - interval '%s' WHERE id = '%s'"
                   % (own, "1 minute" if job == recent else "11 minutes", job))
        stack.psql("INSERT INTO job_output (job_id, stream, off, data) VALUES"
                   " ('%s', 'stdout', 0, 'ab'), ('%s', 'stderr', 0, 'e'), ('%s', 'stdout', 2, 'cd')"
                   % (job, job, job))
    before = stream(stack, admin, orphan)
    assert before == {"stdout": b"abcd", "stderr": b"e"}
    out = prune(stack)
    assert "6 output pieces of ended jobs" in out, out
    count = "SELECT count(*) FROM job_output WHERE job_id = '%s'"
    assert stack.scalar(count % orphan) == "0"
    assert stack.scalar(count % own) == "0"
    assert stack.scalar(count % recent) == "3", "a job that ended a minute ago keeps its pieces"
    # the same bytes from the row, to a reader and in the job
    assert stream(stack, admin, orphan) == before
    job = get_job(stack, admin, orphan)
    assert job["stdout"] == "abcd" and job["stderr"] == "e", job
    # a row with output of its own keeps it
    assert get_job(stack, admin, own)["stdout"] == "mine\n"
    assert "0 output pieces of ended jobs" in prune(stack)
