"""Black-box tests of bin/orchard-agent (docs/agent-protocol.md).

A module fixture starts the real agent on a unix socket in a temporary
directory with a token file; the tests talk HTTP to it over the socket.
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest

from agent_http import AGENT, TOKEN, Agent, start_agent, stop_agent, wait_for_health
from procs import alive


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("agent"))


@pytest.fixture(scope="module")
def agent_proc(workdir):
    proc, agent = start_agent(workdir, log_level="debug", extra_env={
        "ORCHARD_SECRET_FOR_TEST": "must-not-leak",
        "AGENT_TEST_INHERITED": "from-agent",
        "AGENT_TEST_OVERRIDE": "agent-value",
    })
    yield proc, agent
    rc = stop_agent(proc)
    assert rc == 0, "agent exited with %s; log:\n%s" % (rc, open(os.path.join(workdir, "agent.log")).read()[-4000:])


@pytest.fixture
def agent(agent_proc):
    return agent_proc[1]


def wait_gone(pid, seconds=5):
    end = time.time() + seconds
    while time.time() < end and alive(pid):
        time.sleep(0.05)
    return not alive(pid)


# --- health and auth -------------------------------------------------------

def test_health_reports_status_version_and_pid(agent_proc):
    proc, agent = agent_proc
    status, body, r = agent.request("GET", "/health")
    assert status == 200
    assert r.getheader("Content-Type") == "application/json"
    assert body["status"] == "ok"
    assert isinstance(body["version"], str) and body["version"]
    assert body["pid"] == proc.pid


@pytest.mark.parametrize("auth", [None, "Bearer wrong", "Bearer " + TOKEN[:-1],
                                  "Bearer " + TOKEN + "x", "Basic " + TOKEN, TOKEN])
def test_missing_or_wrong_token_is_401(agent, auth):
    headers = {"Authorization": auth} if auth else {}
    for method, path, body in (("GET", "/health", None),
                               ("POST", "/exec", {"command": "touch /tmp/agent-test-should-not-run"}),
                               ("GET", "/no-such-route", None)):
        status, resp, _ = agent.request(method, path, body, token=None, headers=headers)
        assert status == 401, (method, path, resp)
        assert isinstance(resp["error"], str) and resp["error"]


def test_unknown_route_is_404_and_wrong_method_405(agent):
    status, body, _ = agent.request("GET", "/nope")
    assert status == 404 and body["error"]
    status, body, r = agent.request("GET", "/exec")
    assert status == 405 and body["error"]
    assert r.getheader("Allow") == "POST"
    status, body, _ = agent.request("POST", "/health", {})
    assert status == 405


# --- request validation ----------------------------------------------------

@pytest.mark.parametrize("body,field", [
    ("{bad json", "JSON"),
    ("[1, 2]", "object"),
    ("", "empty"),
    ({}, "command"),
    ({"command": 42}, "command"),
    ({"command": []}, "command"),
    ({"command": ["ls", 1]}, "command"),
    ({"command": "true", "cwd": 5}, "cwd"),
    ({"command": "true", "env": ["A=1"]}, "env"),
    ({"command": "true", "env": {"A": 1}}, "env"),
    ({"command": "true", "env": {"A=B": "x"}}, "env"),
    ({"command": "true", "timeout_seconds": "10"}, "timeout_seconds"),
    ({"command": "true", "timeout_seconds": -1}, "timeout_seconds"),
    ({"command": "true", "stdin": ["x"]}, "stdin"),
    ({"command": "true", "login_shell": "yes"}, "login_shell"),
    ({"command": "true", "max_output_bytes": 1.5}, "max_output_bytes"),
    ({"command": "true", "max_output_bytes": -1}, "max_output_bytes"),
])
def test_bad_request_is_400_naming_the_problem(agent, body, field):
    status, resp, _ = agent.request("POST", "/exec", body)
    assert status == 400, resp
    assert field in resp["error"], resp


def test_body_over_limit_is_413(agent):
    # Headers announcing a 9 MiB body are refused before any of it is sent.
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(agent.sock)
    s.sendall(("POST /exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
               "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
               % (TOKEN, 9 * 1024 * 1024)).encode())
    r = http.client.HTTPResponse(s)
    r.begin()
    body = json.loads(r.read())
    s.close()
    assert r.status == 413
    assert "too large" in body["error"]


# --- running commands ------------------------------------------------------

def test_string_command_returns_output_and_exit_code(agent):
    r = agent.exec(command="echo out; echo err >&2; printf 'no newline'; exit 7")
    assert r["exit_code"] == 7
    assert r["stdout"] == "out\nno newline"
    assert r["stderr"] == "err\n"
    assert r["stdout_bytes"] == len("out\nno newline") and r["stderr_bytes"] == 4
    assert r["signal"] is None and r["timed_out"] is False
    assert r["stdout_truncated"] is False and r["stderr_truncated"] is False
    assert r["error"] is None
    assert isinstance(r["duration_ms"], float) and 0 < r["duration_ms"] < 30000
    assert r["started_at"] <= r["finished_at"]
    assert abs(r["started_at"] - time.time()) < 60


def test_string_command_runs_in_bash(agent):
    r = agent.exec(command='echo "$0 ${BASH_VERSION:+bash}"; [[ 1 == 1 ]] && echo ok')
    assert r["exit_code"] == 0
    assert r["stdout"] == "bash bash\nok\n"


def test_argv_command_preserves_arguments_without_a_shell(agent):
    args = ["a b", "c'd", 'e"f', "$HOME", "*", "", "x\ny"]
    r = agent.exec(command=["printf", "[%s]"] + args)
    assert r["exit_code"] == 0, r
    assert r["stdout"] == "".join("[%s]" % a for a in args)


def test_argv_exit_code(agent):
    assert agent.exec(command=["sh", "-c", "exit 3"])["exit_code"] == 3
    assert agent.exec(command="exit 0")["exit_code"] == 0


def test_program_that_cannot_start_is_127_or_126(agent, workdir):
    r = agent.exec(command=["no-such-program-orchard"])
    assert r["exit_code"] == 127
    assert "no-such-program-orchard" in r["stderr"] and r["error"]
    r = agent.exec(command=["/nonexistent/dir/prog"])
    assert r["exit_code"] == 127 and "/nonexistent/dir/prog" in r["stderr"]
    path = os.path.join(workdir, "not-executable")
    with open(path, "w") as f:
        f.write("echo hi\n")
    os.chmod(path, 0o644)
    r = agent.exec(command=[path])
    assert r["exit_code"] == 126 and path in r["stderr"]


def test_script_without_shebang_runs_with_sh(agent, workdir):
    path = os.path.join(workdir, "noshebang")
    with open(path, "w") as f:
        f.write("echo from-script \"$1\"\n")
    os.chmod(path, 0o755)
    r = agent.exec(command=[path, "arg"])
    assert r["exit_code"] == 0 and r["stdout"] == "from-script arg\n"


def test_cwd_defaults_to_workspace_or_root(agent):
    expected = "/workspace" if os.path.isdir("/workspace") else "/"
    assert agent.exec(command="pwd")["stdout"] == expected + "\n"


def test_explicit_cwd(agent, workdir):
    assert agent.exec(command=["pwd"], cwd=workdir)["stdout"] == os.path.realpath(workdir) + "\n"


def test_missing_explicit_cwd_is_an_error_result(agent, workdir):
    missing = os.path.join(workdir, "no-such-dir")
    r = agent.exec(command="touch %s/should-not-exist" % workdir, cwd=missing)
    assert r["exit_code"] == 127
    assert missing in r["stderr"] and "No such file" in r["stderr"]
    assert missing in r["error"]
    assert not os.path.exists(os.path.join(workdir, "should-not-exist"))


def test_env_is_merged_and_orchard_variables_removed(agent):
    r = agent.exec(command=["env"], env={"MY_VAR": "x y=z", "AGENT_TEST_OVERRIDE": "request-value"})
    env = dict(line.split("=", 1) for line in r["stdout"].splitlines() if "=" in line)
    assert env["MY_VAR"] == "x y=z"
    assert env["AGENT_TEST_OVERRIDE"] == "request-value"
    assert env["AGENT_TEST_INHERITED"] == "from-agent"
    assert "PATH" in env
    # The agent's own ORCHARD_* settings never reach a command; its only
    # ORCHARD_ variable is the tag a timeout's sweep looks for (sweep.h).
    assert not [k for k in env if k.startswith("ORCHARD_") and k != "ORCHARD_JOB_TAG"], env
    assert re.fullmatch(r"[0-9a-f]{32}", env["ORCHARD_JOB_TAG"]), env
    assert r["stdout"].count("AGENT_TEST_OVERRIDE=") == 1


def test_shell_is_set_once_and_a_job_may_override_it(agent):
    r = agent.exec(command=["env"])
    shells = [line for line in r["stdout"].splitlines() if line.startswith("SHELL=")]
    assert len(shells) == 1, shells   # inherited, else the shell commands run in
    r = agent.exec(command=["env"], env={"SHELL": "/custom/sh"})
    shells = [line for line in r["stdout"].splitlines() if line.startswith("SHELL=")]
    assert shells == ["SHELL=/custom/sh"], shells


def test_stdin_is_passed_then_closed(agent):
    data = "line one\nline two\n" + "z" * 200000
    r = agent.exec(command="cat; echo done", stdin=data)
    assert r["stdout"] == data + "done\n"
    # Without stdin the command reads EOF at once instead of hanging.
    r = agent.exec(command="cat; echo eof", timeout_seconds=10)
    assert r["stdout"] == "eof\n" and r["timed_out"] is False


def test_timeout_kills_the_whole_process_group(agent_proc, workdir):
    proc, agent = agent_proc
    bg = os.path.join(workdir, "bg.pid")
    sh = os.path.join(workdir, "sh.pid")
    t0 = time.time()
    r = agent.exec(command="sleep 1000 & echo $! > %s; echo $$ > %s; echo before; sleep 1000" % (bg, sh),
                   timeout_seconds=0.5)
    elapsed = time.time() - t0
    assert r["timed_out"] is True
    assert r["exit_code"] == 124
    assert r["stdout"] == "before\n"
    assert 0.4 < elapsed < 10
    pids = [int(open(f).read()) for f in (bg, sh)]
    try:
        for pid in pids:
            assert wait_gone(pid), "pid %d survived the timeout" % pid
    finally:
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert proc.poll() is None
    assert agent.request("GET", "/health")[0] == 200


def test_background_process_does_not_hold_the_request(agent, workdir):
    pidfile = os.path.join(workdir, "bgsleep.pid")
    t0 = time.time()
    r = agent.exec(command="sleep 30 & echo $! > %s; echo started" % pidfile)
    elapsed = time.time() - t0
    try:
        assert r["exit_code"] == 0 and r["timed_out"] is False
        assert r["stdout"] == "started\n"
        assert elapsed < 5
        assert alive(int(open(pidfile).read())), "the background process should keep running"
    finally:
        try:
            os.kill(int(open(pidfile).read()), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def test_killed_by_signal_reports_128_plus_n(agent):
    r = agent.exec(command="echo pre; kill -9 $$")
    assert r["exit_code"] == 137 and r["signal"] == 9
    assert r["timed_out"] is False and r["stdout"] == "pre\n"
    r = agent.exec(command=["sh", "-c", "kill -TERM $$"])
    assert r["exit_code"] == 143 and r["signal"] == 15


def test_sigpipe_is_not_ignored_in_commands(agent):
    # The agent ignores SIGPIPE itself; commands must get the default back.
    r = agent.exec(command="yes | head -c 3; echo \"${PIPESTATUS[0]}\"")
    assert r["stdout"] == "y\ny141\n"


def test_output_cap_truncates_and_counts_every_byte(agent):
    r = agent.exec(command="head -c 100000 /dev/zero | tr '\\0' a; echo -n errors >&2",
                   max_output_bytes=1000)
    assert r["stdout"] == "a" * 1000
    assert r["stdout_bytes"] == 100000 and r["stdout_truncated"] is True
    assert r["stderr"] == "errors" and r["stderr_truncated"] is False and r["stderr_bytes"] == 6


def test_default_output_cap_is_8_mib(agent):
    r = agent.exec(command="head -c 9000000 /dev/zero | tr '\\0' b")
    assert len(r["stdout"]) == 8 * 1024 * 1024
    assert r["stdout_bytes"] == 9000000 and r["stdout_truncated"] is True


def test_invalid_utf8_is_replaced(agent):
    r = agent.exec(command="printf 'ok\\xff\\xfe\\xc3\\xa9'; printf '\\x80' >&2")
    assert r["stdout"] == "ok\ufffd\ufffd\u00e9"
    assert r["stdout_bytes"] == 6
    assert r["stderr"] == "\ufffd"


def test_one_mebibyte_script(agent):
    lines = ["x=0"] + ["x=$((x+1)) # padding to make the script large"] * 25000
    script = "\n".join(lines) + '\necho "count=$x zero=$0"\ncat\n'
    assert len(script) > 1024 * 1024
    r = agent.exec(command=script, stdin="stdin-still-works")
    assert r["exit_code"] == 0, r["stderr"][:500]
    assert r["stdout"] == "count=25000 zero=bash\nstdin-still-works"
    assert r["stderr"] == ""


def test_large_script_exit_code_and_syntax(agent):
    script = "f() { return 5; }\n" + "true\n" * 40000 + "f\nexit $?\n"
    r = agent.exec(command=script)
    assert r["exit_code"] == 5, r["stderr"][:500]


def test_login_shell_sources_bashrc_once_without_tty_warnings(agent, workdir):
    home = os.path.join(workdir, "home-profile")
    os.makedirs(home, exist_ok=True)
    with open(os.path.join(home, ".bashrc"), "w") as f:
        f.write('case $- in *i*) ;; *) return;; esac\n'
                'echo sourced >> "$HOME/count"\nexport FROM_BASHRC=yes\nalias hello="echo hello-alias"\n')
    with open(os.path.join(home, ".profile"), "w") as f:
        f.write('if [ -n "$BASH_VERSION" ] && [ -f "$HOME/.bashrc" ]; then . "$HOME/.bashrc"; fi\n')
    r = agent.exec(command="echo $FROM_BASHRC; hello", login_shell=True, env={"HOME": home})
    assert r["exit_code"] == 0, r
    assert r["stdout"] == "yes\nhello-alias\n"
    assert "job control" not in r["stderr"] and "terminal process group" not in r["stderr"]
    assert r["stderr_bytes"] == len(r["stderr"].encode())
    assert open(os.path.join(home, "count")).read() == "sourced\n"

    # Without login files ~/.bashrc is sourced directly.
    bare = os.path.join(workdir, "home-bare")
    os.makedirs(bare, exist_ok=True)
    shutil.copy(os.path.join(home, ".bashrc"), bare)
    r = agent.exec(command="echo $FROM_BASHRC", login_shell=True, env={"HOME": bare})
    assert r["stdout"] == "yes\n"
    assert open(os.path.join(bare, "count")).read() == "sourced\n"

    # Not a login shell: .bashrc is not read.
    r = agent.exec(command="echo \"[$FROM_BASHRC]\"", env={"HOME": home})
    assert r["stdout"] == "[]\n"


# --- concurrency -----------------------------------------------------------

def wait_file(path, seconds=10):
    end = time.time() + seconds
    while time.time() < end:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return
        time.sleep(0.02)
    raise AssertionError("%s never appeared" % path)


def test_execs_run_concurrently(agent, workdir):
    """Each command waits for the other's marker: only concurrent execution
    lets both finish (the api orders serial jobs itself)."""
    d = os.path.join(workdir, "conc")
    os.makedirs(d, exist_ok=True)
    results = {}

    def run(name, mine, theirs):
        results[name] = agent.exec(command="touch %s/%s; for i in $(seq 300); do [ -e %s/%s ] && exit 0;"
                                   " sleep 0.1; done; exit 3" % (d, mine, d, theirs))
    threads = [threading.Thread(target=run, args=("a", "a", "b")),
               threading.Thread(target=run, args=("b", "b", "a"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [results[n]["exit_code"] for n in ("a", "b")] == [0, 0], results


def test_health_answers_while_a_long_exec_runs(agent, workdir):
    marker = os.path.join(workdir, "long-running")
    result = {}
    t = threading.Thread(target=lambda: result.update(agent.exec(command="echo x > %s; sleep 3" % marker)))
    t.start()
    try:
        wait_file(marker)
        t0 = time.time()
        status, body, _ = agent.request("GET", "/health", timeout=5)
        assert status == 200 and body["status"] == "ok"
        assert time.time() - t0 < 1.5
        assert t.is_alive(), "the exec should still be running"
    finally:
        t.join(30)
    assert result["exit_code"] == 0


# --- process lifecycle -----------------------------------------------------

def test_refuses_to_start_without_a_usable_token(tmp_path):
    sock = str(tmp_path / "a.sock")
    r = subprocess.run([AGENT, "--listen", "unix:" + sock], capture_output=True, timeout=10)
    assert r.returncode != 0 and b"--token-file" in r.stderr
    r = subprocess.run([AGENT, "--listen", "unix:" + sock, "--token-file", str(tmp_path / "missing")],
                       capture_output=True, timeout=10)
    assert r.returncode != 0 and b"missing" in r.stderr
    empty = tmp_path / "empty"
    empty.write_text("\n")
    r = subprocess.run([AGENT, "--listen", "unix:" + sock, "--token-file", str(empty)],
                       capture_output=True, timeout=10)
    assert r.returncode != 0 and b"empty" in r.stderr
    assert not os.path.exists(sock)


def test_version_and_help():
    r = subprocess.run([AGENT, "--version"], capture_output=True, timeout=10)
    assert r.returncode == 0 and r.stdout.startswith(b"orchard-agent ")
    r = subprocess.run([AGENT, "--help"], capture_output=True, timeout=10)
    assert r.returncode == 0 and b"--listen" in r.stdout


def test_stale_socket_is_replaced_and_removed_on_sigterm(tmp_path):
    sock = str(tmp_path / "stale.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(sock)
    s.close()  # leaves a socket file nobody listens on
    proc, agent = start_agent(str(tmp_path), sock=sock, log_level="debug")
    try:
        assert os.stat(sock).st_mode & 0o777 == 0o666
        assert agent.request("GET", "/health")[0] == 200
    finally:
        rc = stop_agent(proc)
    assert rc == 0
    assert not os.path.exists(sock)


def test_socket_name_appears_only_once_listening(tmp_path):
    """The socket is bound as <path>.new and renamed after listen(), so a
    watcher that connects the moment the name exists is never refused. A
    stale <path>.new socket is replaced; one that is not a socket stops it."""
    token_file = str(tmp_path / "token")
    with open(token_file, "w") as f:
        f.write(TOKEN + "\n")
    refused = 0
    for i in range(15):
        sock = str(tmp_path / ("s%d.sock" % i))
        if i == 0:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(sock + ".new")
            s.close()
        proc = subprocess.Popen([AGENT, "--listen", "unix:" + sock, "--token-file", token_file],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 10
            while not os.path.lexists(sock):
                assert time.time() < deadline and proc.poll() is None, "no socket"
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                c.connect(sock)
            except ConnectionRefusedError:
                refused += 1
            c.close()
            assert not os.path.lexists(sock + ".new")
        finally:
            stop_agent(proc)
    assert refused == 0
    bad = str(tmp_path / "bad.sock")
    open(bad + ".new", "w").close()
    r = subprocess.run([AGENT, "--listen", "unix:" + bad, "--token-file", token_file],
                       capture_output=True, timeout=10)
    assert r.returncode != 0 and b"is not a socket" in r.stderr


def test_sigterm_during_an_exec_kills_the_command_and_exits(tmp_path):
    proc, agent = start_agent(str(tmp_path), log_level="debug")
    pidfile = str(tmp_path / "cmd.pid")
    t = threading.Thread(target=lambda: _ignore_errors(
        lambda: agent.exec(command="echo $$ > %s; sleep 1000" % pidfile)))
    t.start()
    try:
        wait_file(pidfile)
        pid = int(open(pidfile).read())
        t0 = time.time()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(8) == 0
        assert time.time() - t0 < 5
        assert wait_gone(pid), "the running command survived the agent's shutdown"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if os.path.exists(pidfile) and alive(int(open(pidfile).read())):
            os.kill(int(open(pidfile).read()), signal.SIGKILL)
        t.join(10)


def _ignore_errors(f):
    try:
        f()
    except Exception:
        pass


def test_tcp_listener(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("tcp-token\n")
    port = 18700
    proc = subprocess.Popen([AGENT, "--listen", "tcp:127.0.0.1:%d" % port, "--token-file", str(token_file)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.time() + 10
        status = None
        while time.time() < end and status != 200:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/health", headers={"Authorization": "Bearer tcp-token"})
                status = c.getresponse().status
                c.close()
            except OSError:
                time.sleep(0.05)
        assert status == 200
    finally:
        assert stop_agent(proc) == 0


def children_states(pid):
    states = []
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
            for child in f.read().split():
                try:
                    with open("/proc/%s/stat" % child) as s:
                        states.append((int(child), s.read().rsplit(")", 1)[1].split()[0]))
                except FileNotFoundError:
                    pass
    return states


def test_reaps_orphans_when_pid_1(tmp_path):
    """As PID 1 of a pid namespace (Kubernetes), orphans become the agent's
    children; they must not pile up as zombies."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1)")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    sock = str(tmp_path / "pid1.sock")
    outer = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", AGENT,
                              "--listen", "unix:" + sock, "--token-file", str(token_file)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    agent_pid = None
    try:
        agent = Agent(sock)
        health = wait_for_health(agent, outer)
        assert health["pid"] == 1
        with open("/proc/%d/task/%d/children" % (outer.pid, outer.pid)) as f:
            agent_pid = int(f.read().split()[0])
        r = agent.exec(command="(sleep 0.2 &); (sleep 0.2 &); echo spawned")
        assert r["stdout"] == "spawned\n"
        time.sleep(1.5)  # the orphans exit; the periodic reap runs at least once
        assert [st for _, st in children_states(agent_pid) if st == "Z"] == []
        # An exec still gets its own exit status while orphans are being reaped.
        r = agent.exec(command="(sleep 0.1 &); exit 9")
        assert r["exit_code"] == 9
    finally:
        if agent_pid:
            os.kill(agent_pid, signal.SIGTERM)  # PID 1 gets it only with a handler
        else:
            outer.send_signal(signal.SIGTERM)
        try:
            outer.wait(10)
        except subprocess.TimeoutExpired:
            outer.kill()
            outer.wait()
