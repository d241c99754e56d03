"""Exec semantics of Orchard (issue 18 section 2), driven by Orchard's own SDK
(/work/shared/reference/orchard-sdk, imported, never copied) and by curl:
concurrent jobs by default, "serial": true for strict order, exit codes of
killed commands, the timeout note, the cwd fallback, max_output_bytes."""
import json
import os
import subprocess
import threading
import uuid

import pytest

import orchard_sdk  # noqa: E402

# The SDK lives beside the checkout, never in it (orchard_sdk.py): a machine
# without it skips this module with the reason instead of failing to import.
SandboxClient = orchard_sdk.load().SandboxClient


@pytest.fixture(scope="module")
def sdk_box(stack, sandbox):
    # the SDK's requests read the CA from the environment, as its README says
    saved = os.environ.get("REQUESTS_CA_BUNDLE")
    os.environ["REQUESTS_CA_BUNDLE"] = stack.cacert
    client = SandboxClient(base_url=stack.url, api_key=stack.admin_key, auto_cleanup=False)
    yield client.get_sandbox(sandbox)
    if saved is None:
        del os.environ["REQUESTS_CA_BUNDLE"]
    else:
        os.environ["REQUESTS_CA_BUNDLE"] = saved


def curl_exec(stack, sandbox, body):
    out = subprocess.run(
        ["curl", "-sS", "--cacert", stack.cacert, "-H", "X-API-Key: " + stack.admin_key,
         "-H", "Content-Type: application/json", "-w", "\n%{http_code}", "--max-time", "120",
         "-d", json.dumps(body), "%s/sandboxes/%s/exec" % (stack.url, sandbox)],
        capture_output=True, text=True, timeout=150, check=True).stdout
    text, _, code = out.rpartition("\n")
    return int(code), json.loads(text)


def test_sdk_execs_of_one_sandbox_run_concurrently(sdk_box):
    """Each command waits until all four have started: only concurrent
    execution lets any of them finish (in strict order the first gives up)."""
    d = "/tmp/conc-%s" % uuid.uuid4().hex
    cmd = ("mkdir -p {d}; touch {d}/$N; for i in $(seq 600); do"
           " [ $(ls {d} | wc -l) -ge 4 ] && exit 0; sleep 0.1; done; exit 3").format(d=d)
    results = {}

    def run(n):
        results[n] = sdk_box.exec(cmd, env={"N": str(n)}, timeout=120)
    threads = [threading.Thread(target=run, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(150)
    assert sorted(results) == [0, 1, 2, 3]
    assert [results[n].exit_code for n in range(4)] == [0, 0, 0, 0], \
        [(r.exit_code, r.stderr) for r in results.values()]


def test_serial_jobs_run_in_acceptance_order_beside_a_concurrent_one(stack, admin, sandbox):
    """serial: true jobs start one after another in seq order, while a
    concurrent job that only ends once they have all run does not hold them."""
    log = "/tmp/serial-%s.log" % uuid.uuid4().hex
    gate = log + ".done"
    code, blocker = curl_exec(stack, sandbox, {
        "command": "for i in $(seq 600); do [ -e %s ] && exit 0; sleep 0.1; done; exit 3" % gate})
    assert code == 200 and blocker["status"] == "queued", blocker
    jobs = []
    for n in range(1, 5):
        cmd = "echo start %d >> %s; sleep 0.2; echo end %d >> %s" % (n, log, n, log)
        if n == 4:
            cmd += "; touch %s" % gate
        code, job = curl_exec(stack, sandbox, {"command": cmd, "serial": True})
        assert code == 200, job
        jobs.append(job["job_id"])
    done = []
    for j in jobs + [blocker["job_id"]]:
        r = admin.get("%s/jobs/%s/wait" % (stack.url, j), params={"timeout": 120})
        assert r.status_code == 200, r.text
        done.append(r.json())
    assert [d["status"] for d in done] == ["succeeded"] * 5, done
    assert [d["serial"] for d in done] == [True] * 4 + [False]
    seqs = [d["seq"] for d in done[:4]]
    assert seqs == sorted(seqs) and done[4]["seq"] < seqs[0], seqs
    code, cat = curl_exec(stack, sandbox, {"command": "cat " + log, "wait": True})
    assert cat["stdout"].splitlines() == [
        line for n in range(1, 5) for line in ("start %d" % n, "end %d" % n)]


def test_sdk_killed_command_has_the_negative_signal_as_exit_code(sdk_box):
    r = sdk_box.exec("kill -9 $$", timeout=60)
    assert r.exit_code == -9, (r.exit_code, r.stderr)
    assert r.status == "failed"


def test_timeout_is_124_with_orchards_note_in_stderr(stack, sandbox):
    code, job = curl_exec(stack, sandbox, {"command": "echo before >&2; sleep 60",
                                           "timeout_seconds": 1, "wait": True})
    assert code == 200, job
    assert job["exit_code"] == 124 and job["timed_out"] is True, job
    assert job["stderr"] == "before\n\nCommand timed out after 1s and was killed", job
    assert job["error"] == "Command timed out after 1s", job


def test_sdk_missing_cwd_falls_back_to_root(sdk_box):
    r = sdk_box.exec("pwd", cwd="/no/such/dir-%s" % uuid.uuid4().hex, timeout=60)
    assert r.exit_code == 0 and r.stdout == "/\n", (r.exit_code, r.stdout, r.stderr)


def test_cwd_strict_names_the_missing_path(stack, sandbox):
    path = "/no/such/dir-%s" % uuid.uuid4().hex
    code, job = curl_exec(stack, sandbox, {"command": "pwd", "cwd": path, "cwd_strict": True,
                                           "wait": True})
    assert code == 200 and job["exit_code"] == 127 and path in job["stderr"], job
    assert job["stdout"] == ""


def test_max_output_bytes_caps_each_stream_honestly(stack, sandbox):
    code, job = curl_exec(stack, sandbox, {"command": "head -c 5000 /dev/zero | tr '\\0' a",
                                           "max_output_bytes": 100, "wait": True})
    assert code == 200 and job["status"] == "succeeded", job
    assert job["stdout"] == "a" * 100 and job["stdout_truncated"] is True, job
    assert job["stdout_bytes"] == 5000 and job["max_output_bytes"] == 100, job


@pytest.mark.parametrize("value", [0, -1, 16 * 1024 * 1024 + 1, "big"])
def test_bad_max_output_bytes_is_refused_and_runs_nothing(stack, admin, sandbox, value):
    before = stack.scalar("SELECT count(*) FROM jobs WHERE sandbox_id = '%s'" % sandbox)
    code, body = curl_exec(stack, sandbox, {"command": "true", "max_output_bytes": value})
    assert code in (400, 422) and "max_output_bytes" in body["detail"], body
    assert stack.scalar("SELECT count(*) FROM jobs WHERE sandbox_id = '%s'" % sandbox) == before


def test_exec_on_a_pending_sandbox_waits_until_it_is_ready(stack, admin, sandbox):
    """A pending sandbox row (no driver acts on it) becomes ready with the
    shared sandbox's agent while an exec on it waits: the exec runs there
    instead of answering 409 not_ready at once."""
    sid = "pend-%s" % uuid.uuid4().hex[:8]
    stack.psql("INSERT INTO sandboxes (id, tenant_id, image, driver, state, cpu, memory,"
               " cpu_millis, memory_bytes, agent_token) SELECT '%s', id, 'host', 'fake', 'pending', '1', '1Gi',"
               " 1000, 1073741824, 'none' FROM tenants WHERE name = 'default'" % sid)
    answer = {}
    try:
        t = threading.Thread(target=lambda: answer.update(res=curl_exec(
            stack, sid, {"command": "echo waited", "wait": True})))
        t.start()
        t.join(2)
        assert t.is_alive(), answer   # still waiting, not refused
        stack.psql("UPDATE sandboxes SET state = 'ready', ready_at = now(),"
                   " agent_address = r.agent_address, agent_token = r.agent_token"
                   " FROM sandboxes r WHERE r.id = '%s' AND sandboxes.id = '%s'" % (sandbox, sid))
        t.join(60)
        code, job = answer["res"]
        assert code == 200 and job["status"] == "succeeded" and job["stdout"] == "waited\n", job
    finally:
        stack.psql("UPDATE sandboxes SET state = 'deleted', agent_address = NULL"
                   " WHERE id = '%s'" % sid)


def sandbox_processes(stack, sandbox):
    """The command lines of every process of the sandbox (from /proc: no ps needed)."""
    code, job = curl_exec(stack, sandbox, {
        "command": "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done",
        "wait": True})
    assert code == 200 and job["exit_code"] == 0, job
    return job["stdout"]


def test_a_timeout_kills_what_left_the_process_group(stack, sandbox):
    """(setsid CMD &) leaves the command's process group and session; a
    timeout still kills it (issue 19, item 11), while what a command that
    ended by itself left in the background keeps running."""
    n = 3000 + int.from_bytes(os.urandom(2), "big") % 5000
    escaped, nested, kept = "sleep %d" % n, "sleep %d" % (n + 1), "sleep %d" % (n + 2)
    try:
        code, job = curl_exec(stack, sandbox, {"command": "(%s &); true" % kept.replace("sleep", "setsid sleep"),
                                               "wait": True})
        assert code == 200 and job["exit_code"] == 0, job
        code, job = curl_exec(stack, sandbox, {
            "command": "(setsid %s &); (setsid sh -c '%s; true' &); sleep 1000" % (escaped, nested),
            "timeout_seconds": 3, "wait": True})
        assert code == 200 and job["timed_out"] is True, job
        procs = sandbox_processes(stack, sandbox)
        assert escaped not in procs and nested not in procs, procs
        assert kept in procs, procs
    finally:
        curl_exec(stack, sandbox, {"command": "pkill -f 'sleep %d' || kill $(for p in /proc/[0-9]*;"
                                   " do grep -qa 'sleep %d' $p/cmdline 2>/dev/null && basename $p;"
                                   " done) 2>/dev/null; true" % (n + 2, n + 2), "wait": True})
