"""Attaching to a job's output from any byte offset (issue 25, "Attach to
output, from any offset"; GET /v1/jobs/{id}/stream, docs/api.md).

Readers are clients we did not write (curl, requests); the jobs are gated
on a file in the sandbox so that nothing depends on timing: output written
before the gate opens must reach a reader before the job can end.
"""
import base64
import json
import os
import signal
import subprocess
import threading
import time

import pytest

from stack import BIN
from test_api import LEASE_S, REAP_S, RENEW_S, RUNNER_DIED, api_pid, assert_error, exec_wait, unique

READ_TIMEOUT = 120


def gated_job(stack, s, sandbox, before="one", after_err="two", after="three", **kw):
    """A job that writes `before`, waits for its gate file, then writes the
    rest; returns (job_id, gate path)."""
    gate = "/tmp/%s" % unique("gate")
    cmd = ("echo %s; while [ ! -e %s ]; do sleep 0.1; done; echo %s >&2; echo %s"
           % (before, gate, after_err, after))
    r = s.post("%s/sandboxes/%s/exec" % (stack.url, sandbox), json=dict(command=cmd, **kw))
    assert r.status_code == 200, r.text
    return r.json()["job_id"], gate


def open_gate(stack, s, sandbox, gate):
    assert exec_wait(stack, s, sandbox, "touch %s" % gate)["exit_code"] == 0


def stream_url(stack, job_id, out=None, err=None):
    url = "%s/v1/jobs/%s/stream" % (stack.url, job_id)
    q = []
    if out is not None:
        q.append("stdout_offset=%d" % out)
    if err is not None:
        q.append("stderr_offset=%d" % err)
    return url + ("?" + "&".join(q) if q else "")


class Reader:
    """Collects one NDJSON answer's lines, checking offsets as it goes."""

    def __init__(self, out=0, err=0):
        self.data = {"stdout": b"", "stderr": b""}
        self.start = {"stdout": out, "stderr": err}
        self.lines = []
        self.exit = None

    def take(self, line):
        o = json.loads(line)
        self.lines.append(o)
        if o["type"] in ("stdout", "stderr"):
            # each piece starts exactly where the last one ended
            assert o["offset"] == self.start[o["type"]] + len(self.data[o["type"]]), o
            self.data[o["type"]] += base64.b64decode(o["data"])
        elif o["type"] == "exit":
            self.exit = o["job"]
        return o


def read_requests(s, url, reader, until=None):
    """Read with requests until the answer ends (or until(reader) is true:
    then the connection is dropped)."""
    with s.get(url, stream=True, timeout=READ_TIMEOUT) as r:
        assert r.status_code == 200, r.text
        assert r.headers["Content-Type"].startswith("application/x-ndjson")
        for line in r.iter_lines():
            if line:
                reader.take(line)
                if until and until(reader):
                    return reader
    return reader


def curl_reader(stack, key, url):
    return subprocess.Popen(["curl", "-sS", "-N", "--cacert", stack.cacert, "-H", "X-API-Key: " + key,
                             "--max-time", str(READ_TIMEOUT), url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_two_readers_see_output_as_it_is_produced(stack, admin, sandbox):
    job_id, gate = gated_job(stack, admin, sandbox)
    curl = curl_reader(stack, stack.admin_key, stream_url(stack, job_id))
    try:
        # reader 1 (requests) sees "one" while the job is still blocked
        first = Reader()
        read_requests(admin, stream_url(stack, job_id), first,
                      until=lambda rd: rd.data["stdout"] == b"one\n")
        assert admin.get("%s/v1/jobs/%s" % (stack.url, job_id)).json()["status"] == "running"
        # reader 2 (curl), attached at the same time, sees the same line
        # before the gate opens: read its first lines
        head = [json.loads(curl.stdout.readline()) for _ in range(2)]
        assert head[0] == {"type": "job", "job_id": job_id}
        assert head[1]["type"] == "stdout" and base64.b64decode(head[1]["data"]) == b"one\n"
        # a third reader attaches from the start while both are attached
        second = Reader()
        t = threading.Thread(target=read_requests, args=(admin, stream_url(stack, job_id), second))
        t.start()
        open_gate(stack, admin, sandbox, gate)
        t.join(READ_TIMEOUT)
        assert not t.is_alive()
        rest, _ = curl.communicate(timeout=READ_TIMEOUT)
    finally:
        if curl.poll() is None:
            curl.kill()
            curl.wait()
    assert curl.returncode == 0
    curl_reader_ = Reader()
    for line in head + [json.loads(x) for x in rest.splitlines() if x.strip()]:
        curl_reader_.take(json.dumps(line))
    for rd in (second, curl_reader_):
        assert rd.data == {"stdout": b"one\nthree\n", "stderr": b"two\n"}, rd.lines
        assert rd.lines[0] == {"type": "job", "job_id": job_id}
        assert rd.lines[-1]["type"] == "exit"
        assert rd.exit["status"] == "succeeded" and rd.exit["exit_code"] == 0, rd.exit
    # while it ran, the output was kept outside the job row; now it is in it
    assert stack.scalar("SELECT count(*) FROM job_output WHERE job_id = '%s'" % job_id) == "0"


def test_reconnect_at_an_offset_gets_exactly_the_rest(stack, admin, sandbox):
    job_id, gate = gated_job(stack, admin, sandbox, before="abcdefgh")
    got = read_requests(admin, stream_url(stack, job_id), Reader(),
                        until=lambda rd: rd.data["stdout"] == b"abcdefgh\n")
    # the connection dropped after 9 bytes; one of them is lost on our side:
    # resume from 8, then the job goes on while nobody is attached
    open_gate(stack, admin, sandbox, gate)
    rest = read_requests(admin, stream_url(stack, job_id, out=8, err=0), Reader(out=8))
    assert got.data["stdout"][:8] + rest.data["stdout"] == b"abcdefgh\nthree\n"
    assert rest.data["stderr"] == b"two\n"
    assert rest.exit["status"] == "succeeded"
    # a finished job: its kept output from any offsets, then the exit line
    done = read_requests(admin, stream_url(stack, job_id, out=3, err=2), Reader(out=3, err=2))
    assert done.data == {"stdout": b"defgh\nthree\n", "stderr": b"o\n"}
    assert [o["type"] for o in done.lines][-1] == "exit"
    past = read_requests(admin, stream_url(stack, job_id, out=1000, err=1000), Reader(1000, 1000))
    assert [o["type"] for o in past.lines] == ["job", "exit"]


@pytest.mark.spec_exempt
def test_bad_offsets_and_other_tenants_jobs_are_refused(stack, admin, other, sandbox):
    job = exec_wait(stack, admin, sandbox, "echo hi")
    for bad in ("-1", "x", "1e3", "9007199254740993"):
        r = admin.get("%s/v1/jobs/%s/stream?stdout_offset=%s" % (stack.url, job["job_id"], bad))
        assert_error(r, 422)
        assert "stdout_offset" in r.json()["detail"]
    assert_error(other.get(stream_url(stack, job["job_id"])), 404)
    assert_error(admin.get(stream_url(stack, "nosuch-job")), 404)


def test_a_reader_resumes_across_an_api_restart(stack, admin, sandbox):
    job_id, gate = gated_job(stack, admin, sandbox)
    got = read_requests(admin, stream_url(stack, job_id), Reader(),
                        until=lambda rd: rd.data["stdout"] == b"one\n")
    # the api dies with the job's agent call in it (it is the job's runner)
    pid = api_pid(stack)
    os.kill(pid, signal.SIGKILL)
    stack.wait_for(lambda: not os.path.exists("/proc/%d" % pid), timeout=10, what="api gone")
    stack.up()
    # the reader reconnects with its offsets and gets the rest: nothing more
    # was kept, and the job ends failed once its runner's lease runs out
    rest = stack.wait_for(lambda: read_requests(admin, stream_url(stack, job_id, out=4, err=0),
                                                Reader(out=4)),
                          timeout=LEASE_S + REAP_S + RENEW_S + 60, what="stream after restart")
    assert rest.exit is not None and rest.exit["status"] == "failed", rest.lines
    assert rest.exit["error"] == RUNNER_DIED
    assert rest.data == {"stdout": b"", "stderr": b""}, rest.lines
    # what was kept before the restart is still there from the start
    again = read_requests(admin, stream_url(stack, job_id), Reader())
    assert again.data["stdout"] == got.data["stdout"] == b"one\n"
    open_gate(stack, admin, sandbox, gate)


def restart_nginx(stack):
    """Drop every client connection: nginx stops (fast shutdown) and the
    stack starts it again."""
    with open(os.path.join(stack.run_dir, "nginx.pid")) as f:
        pid = int(f.read().split()[0])
    os.kill(pid, signal.SIGTERM)
    stack.wait_for(lambda: not os.path.exists("/proc/%d" % pid), timeout=30, what="nginx gone")
    stack.up()


def orchardctl_across_a_dropped_connection(stack, admin, sandbox, gate, *args):
    """Run orchardctl ARGS on a gated job: it prints "one" while the job is
    blocked; every connection drops (nginx restarts); the gate opens; it
    must go on from where it was and finish."""
    p = subprocess.Popen([os.path.join(BIN, "orchardctl")] + list(args), env=stack.env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert p.stdout.readline() == b"one\n"
        restart_nginx(stack)
        open_gate(stack, admin, sandbox, gate)
        out, err = p.communicate(timeout=READ_TIMEOUT)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    # nothing missed, nothing written twice
    assert out == b"three\n", (out, err)
    assert err.endswith(b"two\n") and b"one" not in err, err


def test_orchardctl_jobs_logs_follows_and_survives_a_dropped_connection(stack, admin, sandbox):
    job_id, gate = gated_job(stack, admin, sandbox)
    orchardctl_across_a_dropped_connection(stack, admin, sandbox, gate, "jobs", "logs", "-f", job_id)


def test_orchardctl_exec_streams_and_survives_a_dropped_connection(stack, admin, sandbox):
    gate = "/tmp/%s" % unique("gate")
    orchardctl_across_a_dropped_connection(
        stack, admin, sandbox, gate, "exec", sandbox, "--", "sh", "-c",
        "echo one; while [ ! -e %s ]; do sleep 0.1; done; echo two >&2; echo three" % gate)
