"""Orchard's own Python SDK, unmodified, against the whole stack (nginx, TLS,
api, controller, sandboxes): every public method of SandboxClient,
SandboxInstance, AsyncSandboxClient, AsyncSandboxInstance and JobResult,
asserting on what they return and on what the server then holds (issue 18,
section 2). The SDK is imported from ../shared/reference/orchard-sdk
(orchard_sdk.py); each test makes its own clients inside sdk_env.
"""
import asyncio
import base64
import hashlib
import os
import re
import time

import pytest
import requests

import orchard_sdk
from orchard_sdk import sdk_env
from test_api import api_pid

orchard_env = orchard_sdk.load()
from orchard_env import (AsyncSandboxClient, AsyncSandboxInstance, JobResult,  # noqa: E402
                         SandboxClient, SandboxInstance)

ID = re.compile(r"^[0-9a-f]{8}$")


def state(stack, sid):
    return stack.scalar("SELECT state FROM sandboxes WHERE id = '%s'" % sid)


def wait_state(stack, sid, want, timeout=60):
    return stack.wait_for(lambda: state(stack, sid) in want, timeout=timeout,
                          what="sandbox %s in %s" % (sid, want))


# ---- SandboxClient ---------------------------------------------------------------


def test_client_reads_the_environment_and_answers_health(stack):
    with sdk_env(stack):
        with SandboxClient(auto_cleanup=False) as client:
            assert client.base_url == stack.url and client.api_key == stack.admin_key
            assert client.session.headers["X-API-Key"] == stack.admin_key
            assert client.health() == {"status": "healthy"}
            assert repr(client) == "SandboxClient(base_url=%s)" % stack.url
        # explicit arguments win over the environment
        with SandboxClient(stack.url + "/", api_key="orc_nokey_nosecret", auto_cleanup=False) as c:
            assert c.base_url == stack.url
            with pytest.raises(requests.HTTPError) as e:
                c.get_sandbox("abcdef12")
            assert e.value.response.status_code == 403


def test_a_missing_key_is_401_and_an_unknown_sandbox_404(stack):
    with sdk_env(stack):
        os.environ.pop("SANDBOX_API_KEY")
        with SandboxClient(auto_cleanup=False) as client:
            assert client.health() == {"status": "healthy"}  # open
            with pytest.raises(requests.HTTPError) as e:
                client.get_sandbox("abcdef12")
            assert e.value.response.status_code == 401
        with SandboxClient(api_key=stack.admin_key, auto_cleanup=False) as client:
            with pytest.raises(requests.HTTPError) as e:
                client.get_sandbox("abcdef12")
            assert e.value.response.status_code == 404
            client.delete_sandbox("abcdef12")  # 200 for unknown ids; never raises


def test_create_sandbox_waits_until_ready_and_sends_every_option(stack):
    with sdk_env(stack):
        with SandboxClient(auto_cleanup=False) as client:
            sb = client.create_sandbox("host", block_network=False, cpu="1", memory="1Gi", timeout=120)
            try:
                assert isinstance(sb, SandboxInstance) and ID.match(sb.sandbox_id), sb.sandbox_id
                assert (sb.image, sb.block_network, sb.namespace) == ("host", False, "default")
                assert sb.sandbox_id in client._created_sandboxes
                assert repr(sb) == "SandboxInstance(id=%s, status=active)" % sb.sandbox_id
                assert state(stack, sb.sandbox_id) == "ready"
                row = stack.psql("SELECT cpu, memory, block_network, timeout_seconds FROM sandboxes"
                                 " WHERE id = '%s'" % sb.sandbox_id)[0]
                assert row == ["1", "1Gi", "f", "120"], row
                got = client.get_sandbox(sb.sandbox_id)
                assert isinstance(got, SandboxInstance) and got.sandbox_id == sb.sandbox_id
                assert (got.image, got.block_network) == ("host", False)
            finally:
                client.delete_sandbox(sb.sandbox_id)
            assert sb.sandbox_id not in client._created_sandboxes
            assert state(stack, sb.sandbox_id) in ("deleting", "deleted")


def test_create_with_an_id_a_prefix_and_without_waiting(stack):
    sid = "sdk-%s" % os.urandom(4).hex()
    with sdk_env(stack):
        with SandboxClient(auto_cleanup=False, prefix="sdkp") as client:
            sb = client.create_sandbox("host", sandbox_id=sid, wait_ready=False)
            try:
                assert sb.sandbox_id == "sdkp-" + sid  # the SDK prefixes the id it sends
                assert stack.scalar("SELECT count(*) FROM sandboxes WHERE id = '%s'" % sb.sandbox_id) == "1"
                wait_state(stack, sb.sandbox_id, ("ready",))
                assert sb.exec("echo ok").stdout == "ok\n"
            finally:
                sb.delete()
            assert sb._deleted and repr(sb).endswith("status=deleted)")
            with pytest.raises(RuntimeError):
                sb.exec("true")
            sb.delete()  # a second delete is a no-op
        os.environ["SANDBOX_PREFIX"] = "envp"
        with SandboxClient(auto_cleanup=False) as client:
            sb = client.create_sandbox("host", wait_ready=False)
            try:
                assert re.match(r"^envp-[0-9a-f]{8}$", sb.sandbox_id), sb.sandbox_id
            finally:
                sb.delete()


def test_a_sandbox_that_fails_raises_and_a_duplicate_id_is_refused(stack):
    with sdk_env(stack):
        with SandboxClient(auto_cleanup=False) as client:
            with pytest.raises(requests.HTTPError) as e:
                client.create_sandbox("no-such-image-%d" % os.getpid())
            assert 400 <= e.value.response.status_code < 500
            sb = client.create_sandbox("host")
            try:
                with pytest.raises(requests.HTTPError) as e:
                    client.create_sandbox("host", sandbox_id=sb.sandbox_id)
                assert e.value.response.status_code == 409
            finally:
                sb.delete()


def test_instance_context_manager_deletes_the_sandbox(stack):
    with sdk_env(stack):
        with SandboxClient(auto_cleanup=False) as client:
            with client.create_sandbox("host") as sb:
                sid = sb.sandbox_id
                assert state(stack, sid) == "ready"
            assert sb._deleted and state(stack, sid) in ("deleting", "deleted")


# ---- SandboxInstance.exec and JobResult ----------------------------------------------


def test_exec_returns_a_job_result_with_orchards_fields(stack, sandbox):
    with sdk_env(stack):
        with SandboxClient(auto_cleanup=False) as client:
            sb = client.get_sandbox(sandbox)
            r = sb.exec("echo out; echo err >&2; pwd")
            assert isinstance(r, JobResult)
            assert (r.status, r.exit_code, r.stdout, r.stderr) == ("succeeded", 0, "out\n/workspace\n",
                                                                  "err\n")
            assert r.succeeded and not r.failed and r.is_complete and r.error is None
            assert r.sandbox_id == sandbox and r.command == "echo out; echo err >&2; pwd"
            assert all(isinstance(t, float) for t in (r.created_at, r.started_at, r.completed_at))
            assert r.created_at <= r.started_at <= r.completed_at
            assert repr(r) == "JobResult(status=succeeded, exit_code=0)"
            assert stack.scalar("SELECT status FROM jobs WHERE id = '%s'" % r.job_id) == "succeeded"

            again = sb.get_job(r.job_id)
            assert (again.job_id, again.status, again.stdout, again.exit_code) == (
                r.job_id, "succeeded", r.stdout, 0)
            assert again.created_at == r.created_at


def test_exec_failure_cwd_env_list_and_login_shell(stack, sandbox):
    with sdk_env(stack):
        with SandboxClient(auto_cleanup=False) as client:
            sb = client.get_sandbox(sandbox)
            r = sb.exec("echo no >&2; exit 3")
            assert (r.status, r.exit_code, r.stderr) == ("failed", 3, "no\n")
            assert r.failed and not r.succeeded and r.is_complete
            assert repr(r) == "JobResult(status=failed, exit_code=3)"

            r = sb.exec("pwd; echo $A$B", cwd="/tmp", env={"A": "x", "B": "y z"})
            assert r.stdout == "/tmp\nxy z\n", r.stdout
            r = sb.exec(["printf", "%s|", "a b", "$HOME", "it's"])
            assert r.stdout == "a b|$HOME|it's|", r.stdout
            r = sb.exec("shopt -q login_shell && echo login || echo plain", login_shell=True)
            assert r.stdout == "login\n"
            r = sb.exec("shopt -q login_shell && echo login || echo plain")
            assert r.stdout == "plain\n"


def test_exec_timeout_is_a_failed_job(stack, sandbox):
    with sdk_env(stack):
        with SandboxClient(auto_cleanup=False) as client:
            sb = client.get_sandbox(sandbox)
            r = sb.exec("echo started; sleep 30", timeout=1)
            assert (r.status, r.exit_code) == ("failed", 124), (r.status, r.exit_code)
            assert r.error == "Command timed out after 1s" and r.stdout == "started\n"
            assert r.completed_at - r.started_at < 25


def test_exec_without_waiting_then_get_job(stack, sandbox):
    with sdk_env(stack):
        with SandboxClient(auto_cleanup=False) as client:
            sb = client.get_sandbox(sandbox)
            r = sb.exec("echo later", wait=False)
            assert isinstance(r, JobResult) and r.job_id
            done = sb.get_job(r.job_id)
            assert (done.status, done.stdout) == ("succeeded", "later\n")
            with pytest.raises(requests.HTTPError) as e:
                sb.get_job("00000000-0000-4000-8000-000000000000")
            assert e.value.response.status_code == 404


def test_check_env_probes_the_shells(stack, sandbox):
    with sdk_env(stack):
        with SandboxClient(auto_cleanup=False) as client:
            info = client.get_sandbox(sandbox).check_env(verbose=False)
            assert info["python3"].endswith("/python3") and info["path"], info
            assert info["bare_path"] and info["conda_available"] is False, info
            assert set(info) >= {"bashrc_loaded", "has_bashrc", "conda_env", "python_version"}


def test_heartbeat_thread_refreshes_the_sandbox(stack, admin):
    # A sandbox of its own: a heartbeat arms the heartbeat rule (deleted after
    # 180 s without one), which must not reach the session's shared sandbox.
    sandbox = stack.new_sandbox(admin)
    try:
        heartbeat_thread_refreshes(stack, sandbox)
    finally:
        admin.delete("%s/sandboxes/%s" % (stack.url, sandbox))


def heartbeat_thread_refreshes(stack, sandbox):
    def beat():
        return stack.scalar("SELECT extract(epoch FROM last_heartbeat_at) FROM sandboxes"
                            " WHERE id = '%s'" % sandbox)
    with sdk_env(stack):
        with SandboxClient(auto_cleanup=False) as client:
            sb = client.get_sandbox(sandbox)
            before = beat()
            sb.start_heartbeat(interval=1)
            try:
                stack.wait_for(lambda: beat() not in (None, before), timeout=60, what="a heartbeat")
                first = beat()
                stack.wait_for(lambda: beat() != first, timeout=60, what="a second heartbeat")
            finally:
                sb.stop_heartbeat()
            assert sb._heartbeat_thread is None


# ---- files and patches -------------------------------------------------------------


def test_files_upload_download_list(stack, sandbox, tmp_path):
    data = bytes(range(256)) * 300 + b"\x00end"
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    d = "/workspace/sdk-files-%d" % os.getpid()
    with sdk_env(stack):
        with SandboxClient(auto_cleanup=False) as client:
            sb = client.get_sandbox(sandbox)
            assert sb.upload_file(str(src), d + "/deep/a.bin") == {
                "success": True, "path": d + "/deep/a.bin", "size": len(data)}
            assert sb.upload_content(b"hello\n", d + "/b.txt")["size"] == 6
            assert sb.exec("sha256sum %s/deep/a.bin" % d).stdout.split()[0] == hashlib.sha256(data).hexdigest()
            assert sb.download_content(d + "/b.txt") == b"hello\n"
            dst = tmp_path / "dst.bin"
            assert sb.download_file(d + "/deep/a.bin", str(dst)) == len(data)
            assert dst.read_bytes() == data

            files = sb.list_files(d)
            assert [(f["name"], f["type"]) for f in files] == [("b.txt", "file"), ("deep", "directory")]
            assert files[0]["size"] == 6 and isinstance(files[1]["size"], int)
            assert all(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", f["modified"]) for f in files)
            assert "workspace" in [f["name"] for f in sb.list_files()]  # default "/"

            with pytest.raises(requests.HTTPError) as e:
                sb.download_content(d + "/missing")
            assert e.value.response.status_code == 404
            with pytest.raises(requests.HTTPError) as e:
                sb.download_content(d)
            assert e.value.response.status_code == 400
            with pytest.raises(requests.HTTPError) as e:
                sb.list_files(d + "/missing")
            assert e.value.response.status_code == 404


def test_apply_patch(stack, sandbox):
    d = "/workspace/sdk-patch-%d" % os.getpid()
    good = "--- a/f.txt\n+++ b/f.txt\n@@ -1 +1,2 @@\n line1\n+line2\n"
    with sdk_env(stack):
        with SandboxClient(auto_cleanup=False) as client:
            sb = client.get_sandbox(sandbox)
            sb.exec("mkdir -p %s && cd %s && git init -q && printf 'line1\\n' > f.txt" % (d, d))
            # Orchard's apply_patch runs in /workspace: the patch names the path from there
            rel = good.replace("a/f.txt", "a/%s/f.txt" % d[len("/workspace/"):]).replace(
                "b/f.txt", "b/%s/f.txt" % d[len("/workspace/"):])
            r = sb.apply_patch(rel)
            assert r["success"] is True and r["exit_code"] == 0, r
            assert sb.download_content(d + "/f.txt") == b"line1\nline2\n"
            bad = rel.replace(" line1\n+line2\n", "-nothere\n+x\n").replace("-1 +1,2", "-1 +1")
            r = sb.apply_patch(bad, timeout=10)  # a hunk that does not apply changes nothing
            assert r["success"] is False and r["exit_code"] != 0 and "f.txt" in r["stderr"], r
            assert sb.download_content(d + "/f.txt") == b"line1\nline2\n"


# ---- AsyncSandboxClient / AsyncSandboxInstance ---------------------------------------------


def test_async_client_covers_the_same_methods(stack, tmp_path):
    src = tmp_path / "up.txt"
    src.write_bytes(b"async bytes\n")
    dst = tmp_path / "down.txt"

    async def main():
        async with AsyncSandboxClient(auto_cleanup=False) as client:
            assert repr(client) == "AsyncSandboxClient(base_url=%s)" % stack.url
            assert await client.health() == {"status": "healthy"}
            sb = await client.create_sandbox("host", cpu="1", memory="1Gi", timeout=120)
            try:
                assert isinstance(sb, AsyncSandboxInstance) and ID.match(sb.sandbox_id)
                assert repr(sb) == "AsyncSandboxInstance(id=%s, status=active)" % sb.sandbox_id
                assert state(stack, sb.sandbox_id) == "ready"
                got = await client.get_sandbox(sb.sandbox_id)
                assert got.sandbox_id == sb.sandbox_id and got.image == "host"

                r = await sb.exec("echo hi; exit 2", cwd="/tmp", env={"X": "1"})
                assert (r.status, r.exit_code, r.stdout) == ("failed", 2, "hi\n")
                r = await sb.exec(["sh", "-c", "echo $X; pwd"], cwd="/tmp", env={"X": "1"})
                assert (r.succeeded, r.stdout) == (True, "1\n/tmp\n")
                r = await sb.exec("shopt -q login_shell && echo login", login_shell=True)
                assert r.stdout == "login\n"
                r = await sb.exec("sleep 30", timeout=1)
                assert (r.status, r.exit_code, r.error) == ("failed", 124, "Command timed out after 1s")
                q = await sb.exec("echo queued", wait=False)
                job = await sb.get_job(q.job_id)
                assert (job.status, job.stdout) == ("succeeded", "queued\n")

                assert (await sb.upload_file(str(src), "/workspace/a/up.txt"))["size"] == 12
                assert (await sb.upload_content(b"\x00\xff", "/workspace/a/b.bin"))["success"] is True
                assert await sb.download_content("/workspace/a/b.bin") == b"\x00\xff"
                assert await sb.download_file("/workspace/a/up.txt", str(dst)) == 12
                assert dst.read_bytes() == b"async bytes\n"
                names = [f["name"] for f in await sb.list_files("/workspace/a")]
                assert names == ["b.bin", "up.txt"]
                await sb.exec("cd /workspace && printf 'x\\n' > p.txt")
                r = await sb.apply_patch("--- a/p.txt\n+++ b/p.txt\n@@ -1 +1 @@\n-x\n+y\n")
                assert r["success"] is True, r
                assert await sb.download_content("/workspace/p.txt") == b"y\n"
                info = await sb.check_env(verbose=False)
                assert info["python3"].endswith("/python3"), info

                sb.start_heartbeat(interval=1)
                await _until(lambda: stack.scalar("SELECT last_heartbeat_at IS NOT NULL FROM sandboxes"
                                                  " WHERE id = '%s'" % sb.sandbox_id) == "t")
                sb.stop_heartbeat()
            finally:
                await sb.delete()
            assert sb._deleted and state(stack, sb.sandbox_id) in ("deleting", "deleted")
            with pytest.raises(RuntimeError):
                await sb.exec("true")
            await client.delete_sandbox("abcdef12")  # never raises

    with sdk_env(stack):
        asyncio.run(main())


def test_async_cleanup_all_and_context_managers(stack):
    async def main():
        client = AsyncSandboxClient(auto_cleanup=True)
        a = await client.create_sandbox("host", wait_ready=False)
        b = await client.create_sandbox("host")
        assert client._created_sandboxes == {a.sandbox_id, b.sandbox_id}
        async with b:
            assert state(stack, b.sandbox_id) == "ready"
        assert state(stack, b.sandbox_id) in ("deleting", "deleted")
        await client.close()  # cleanup=True deletes what is left
        assert client._session is None and client._created_sandboxes == set()
        assert state(stack, a.sandbox_id) in ("deleting", "deleted")

        async with AsyncSandboxClient(auto_cleanup=True) as c2:
            c = await c2.create_sandbox("host")
        assert state(stack, c.sandbox_id) in ("deleting", "deleted")

        c3 = AsyncSandboxClient(auto_cleanup=False)
        d = await c3.create_sandbox("host")
        d.delete_sync()  # from inside a running loop
        await c3.close()
        return d.sandbox_id

    with sdk_env(stack):
        sid = asyncio.run(main())
        wait_state(stack, sid, ("deleting", "deleted"))


async def _until(pred, timeout=60):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.2)


# ---- Orchard's example flow ------------------------------------------------------


def test_orchards_example_flow(stack, tmp_path):
    """create -> exec -> upload/download -> list -> apply_patch -> async
    job -> PTY -> delete, as Orchard's getting-started example does it."""
    with sdk_env(stack):
        with SandboxClient() as client:
            with client.create_sandbox("host") as sandbox:
                r = sandbox.exec("echo 'Hello from sandbox!'")
                assert (r.exit_code, r.stdout) == (0, "Hello from sandbox!\n")
                assert sandbox.exec("cat /etc/os-release | head -2").stdout.startswith(("PRETTY_NAME", "NAME"))
                assert sandbox.exec("pwd", login_shell=True).stdout.strip()
                assert sandbox.exec("echo 'test content' > /tmp/test.txt").succeeded
                assert sandbox.exec("cat /tmp/test.txt").stdout == "test content\n"

                sandbox.upload_content(b"line1\n", "/workspace/file.txt")
                assert sandbox.download_content("/workspace/file.txt") == b"line1\n"
                assert "file.txt" in [f["name"] for f in sandbox.list_files("/workspace")]
                r = sandbox.apply_patch("--- a/file.txt\n+++ b/file.txt\n@@ -1 +1,2 @@\n line1\n+line2")
                assert r["success"] is True, r
                assert sandbox.exec("cat /workspace/file.txt").stdout == "line1\nline2\n"

                job = sandbox.exec("sleep 1; echo done", wait=False)
                assert sandbox.get_job(job.job_id).stdout == "done\n"

                with sandbox.exec("bash", pty=True) as proc:
                    proc.write_stdin("cat /workspace/file.txt; exit 4\n")
                    assert proc.wait(timeout=60) == 4
                    assert b"line2" in proc.read_all(timeout=30)
                sid = sandbox.sandbox_id
            assert state(stack, sid) in ("deleting", "deleted")


# ---- a 64 MiB file through the base64 routes -------------------------------------------


def peak_rss_reset(pid):
    """Reset pid's peak RSS (VmHWM) to its current RSS (proc(5) clear_refs 5)."""
    with open("/proc/%d/clear_refs" % pid, "w") as f:
        f.write("5")


def status_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError("no %s in /proc/%d/status" % (field, pid))


def test_a_64_mib_file_round_trips_as_base64_without_the_api_holding_copies(stack, sandbox):
    """Orchard's upload_content/download_content of 64 MiB (about 89.5 MB of
    base64 each way): the bytes arrive whole, and the api's peak RSS grows
    by less than one and a half copies of the base64 each way (parsing the
    body as a JSON tree held two or three more)."""
    size = 64 << 20
    data = hashlib.shake_256(b"orchard").digest(1 << 20) * 64
    assert len(data) == size
    b64_len = (size + 2) // 3 * 4
    path = "/workspace/sdk-64mib-%d.bin" % os.getpid()
    pid = api_pid(stack)
    with sdk_env(stack):
        with SandboxClient(auto_cleanup=False) as client:
            sb = client.get_sandbox(sandbox)
            try:
                rss_before = status_kib(pid, "VmRSS")
                peak_rss_reset(pid)
                assert sb.upload_content(data, path) == {"success": True, "path": path, "size": size}
                up_growth = status_kib(pid, "VmHWM") - rss_before
                assert sb.exec("sha256sum " + path).stdout.split()[0] == hashlib.sha256(data).hexdigest()

                rss_before = status_kib(pid, "VmRSS")
                peak_rss_reset(pid)
                got = sb.download_content(path)
                down_growth = status_kib(pid, "VmHWM") - rss_before
                assert len(got) == size and got == data
            finally:
                sb.exec("rm -f " + path)
    if os.environ.get("ASAN_OPTIONS"):
        return  # ASan's allocator copies on realloc and keeps freed memory in quarantine
    limit_kib = 3 * b64_len // 2 // 1024  # one copy and a half
    assert up_growth < limit_kib and down_growth < limit_kib, (up_growth, down_growth, limit_kib)


def test_a_download_over_64_mib_is_413_naming_the_raw_route(stack, sandbox):
    path = "/workspace/sdk-big-%d.bin" % os.getpid()
    with sdk_env(stack):
        with SandboxClient(auto_cleanup=False) as client:
            sb = client.get_sandbox(sandbox)
            assert sb.exec("truncate -s %d %s" % ((64 << 20) + 1, path)).succeeded
            try:
                with pytest.raises(requests.HTTPError) as e:
                    sb.download_content(path)
            finally:
                sb.exec("rm -f " + path)
    r = e.value.response
    assert r.status_code == 413 and r.json()["code"] == "too_large", r.text
    assert "GET /sandboxes/%s/files/raw" % sandbox in r.json()["detail"], r.text


# ---- PTY: ContainerProcess / AsyncContainerProcess ------------------------------------


def read_until(proc, needle, timeout=60):
    """ContainerProcess.read until needle has arrived; all that was read."""
    got = b""
    deadline = time.monotonic() + timeout
    while needle not in got:
        assert time.monotonic() < deadline, "no %r in %r" % (needle, got)
        try:
            got += proc.read(timeout=max(0.1, min(5, deadline - time.monotonic())))
        except TimeoutError:
            continue
    return got


def test_pty_container_process(stack, sandbox):
    with sdk_env(stack):
        with SandboxClient(auto_cleanup=False) as client:
            sb = client.get_sandbox(sandbox)
            proc = sb.exec("stty size; echo ready; read line; echo got:$line; exit 7", pty=True,
                           rows=30, cols=100, cwd="/tmp", env={"PTYVAR": "v"})
            try:
                assert isinstance(proc, orchard_env.ContainerProcess)
                assert isinstance(proc.pid, int) and proc.pid > 0
                assert proc.poll() is None and proc.returncode is None
                out = read_until(proc, b"ready")
                assert b"30 100" in out, out
                proc.write_stdin("hello\n")
                assert proc.wait(timeout=60) == 7
                assert proc.returncode == 7 and proc.poll() == 7
                assert b"got:hello" in out + proc.read_all(timeout=30)
            finally:
                proc.close()

            # argv, env, cwd, resize; kill ends it with the negative signal
            with sb.exec(["bash", "-c", "echo $PTYVAR $PWD; trap 'stty size; exit 3' WINCH; "
                          "echo armed; while :; do sleep 0.1; done"],
                         pty=True, cwd="/tmp", env={"PTYVAR": "v"}) as proc:
                out = read_until(proc, b"armed")
                assert b"v /tmp" in out, out
                proc.resize(40, 120)
                assert b"40 120" in read_until(proc, b"40 120")
                assert proc.wait(timeout=60) == 3
            with sb.exec("echo up; sleep 600", pty=True) as proc:
                read_until(proc, b"up")
                proc.kill("KILL")
                assert proc.wait(timeout=60) == -9
            proc = sb.exec("echo up; sleep 601", pty=True)
            read_until(proc, b"up")
            with proc:
                pass  # leaving the block sends TERM and closes: the command ends
            stack.wait_for(lambda: sb.exec("pgrep -f '[s]leep 601' || echo gone").stdout == "gone\n",
                           timeout=60, what="the PTY's command to end")


def test_pty_async_container_process(stack, sandbox):
    async def main():
        async with AsyncSandboxClient(auto_cleanup=False) as client:
            sb = await client.get_sandbox(sandbox)
            proc = await sb.exec("stty size; echo ready; read line; echo got:$line; exit 5",
                                 pty=True, rows=33, cols=90)
            try:
                assert isinstance(proc, orchard_env.AsyncContainerProcess)
                assert isinstance(proc.pid, int) and proc.poll() is None and proc.returncode is None
                got = b""
                while b"ready" not in got:
                    got += await proc.read(timeout=30)
                assert b"33 90" in got, got
                await proc.resize(50, 60)
                await proc.write_stdin(b"there\n")
                assert await proc.wait(timeout=60) == 5
                assert proc.returncode == 5 and proc.poll() == 5
                assert b"got:there" in got + await proc.read_all(timeout=30)
            finally:
                await proc.close()
            async with await sb.exec(["sh", "-c", "echo up; sleep 600"], pty=True) as p2:
                got = b""
                while b"up" not in got:
                    got += await p2.read(timeout=30)
                await p2.kill("KILL")
                assert await p2.wait(timeout=60) == -9

    with sdk_env(stack):
        asyncio.run(main())


def test_orchards_small_shapes_through_the_sdks_transport(stack, sandbox):
    """The answers the SDK reads through its own _request (raise_for_status,
    then .json()): /, heartbeat, and delete of an unknown id."""
    with sdk_env(stack):
        with SandboxClient(auto_cleanup=False) as client:
            root = client._request("GET", "/")
            assert root["status"] == "running" and root["service"] and root["version"], root
            assert client._request("POST", "/sandboxes/%s/heartbeat" % sandbox) == {
                "status": "ok", "sandbox_id": sandbox}
            with pytest.raises(requests.HTTPError) as e:
                client._request("POST", "/sandboxes/abcdef12/heartbeat")
            assert e.value.response.status_code == 404
            assert client._request("DELETE", "/sandboxes/abcdef12") == {
                "status": "deleted", "sandbox_id": "abcdef12"}
            res = client._request("GET", "/resources")
            assert res["status"] == "ok" and sandbox in [p["sandbox_id"] for p in res["sandbox_pods"]]
