"""Black-box tests of bin/orchard-agent: exec cancel, streaming exec, the PTY
WebSocket (docs/agent-protocol.md) and the self-contained bundle.

Self-contained: a small HTTP helper and the minimal RFC 6455 client of
ws_client.py over the agent's unix socket (no websocket library needed).
"""
import base64
import hashlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import tarfile
import threading
import time

import pytest

import agent_http
from agent_http import AGENT, REPO, UnixHTTPConnection, stop_agent
import ws_client
from busybox import static_busybox
from procs import alive

TOKEN = "pty-t0ken"
INIT_TIMEOUT_MS = 1500


class Agent(agent_http.Agent):
    """agent_http.Agent with its process and directory; request answers
    (status, JSON body)."""

    def __init__(self, sock, proc=None, tmp=None):
        super().__init__(sock, TOKEN, proc.pid if proc else None)
        self.proc, self.tmp = proc, tmp

    def request(self, *args, **kw):
        return super().request(*args, **kw)[:2]

    def log(self):
        with open(os.path.join(self.tmp, "agent.log"), errors="replace") as f:
            return f.read()[-4000:]


def start_agent(tmp, extra_env=None):
    env = {"ORCHARD_AGENT_PTY_INIT_TIMEOUT_MS": str(INIT_TIMEOUT_MS)}
    env.update(extra_env or {})
    proc, agent = agent_http.start_agent(tmp, env, token=TOKEN, log_level="debug")
    return Agent(agent.sock, proc, tmp)


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("agentp"))
    a = start_agent(tmp, {"ORCHARD_AGENT_PTY_GRACE_MS": "20000"})
    yield a
    rc = stop_agent(a.proc)
    assert rc == 0, "agent exited with %s; log:\n%s" % (rc, a.log())


def wait_until(pred, seconds=5.0):
    end = time.time() + seconds
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


# ---- the WebSocket client (ws_client.py) on the agent's socket ----

def agent_ws(sock_path, query="", token=TOKEN, header_auth=True, timeout=10, headers=None):
    h = {"Authorization": "Bearer %s" % token} if token and header_auth else {}
    h.update(headers or {})
    return ws_client.unix(sock_path, "/pty" + query, timeout=timeout, headers=h)


def open_session(agent, init=None, **kw):
    ws = agent_ws(agent.sock, **kw)
    assert ws.status == 101, ws.headers
    ws.send(dict({"type": "init", "cmd": ["/bin/sh"]}, **(init or {})))
    ready = ws.recv()
    assert ready["type"] == "ready", ready
    return ws, ready


# ---- revoked keys (POST /keys/revoke, agent/revoke.h) ----

def test_a_revoked_key_ends_its_sessions_and_is_refused_from_then_on(agent):
    doomed, _ = open_session(agent, headers={"X-Orchard-Key": "41"})
    kept, _ = open_session(agent, headers={"X-Orchard-Key": "42"})
    plain, _ = open_session(agent)       # no key: the api's own, or a direct client
    assert agent.request("POST", "/keys/revoke?key=4x")[0] == 400
    status, body = agent.request("POST", "/keys/revoke?key=41")
    assert status == 200 and body == {"key": "41", "pty_sessions_ended": 1}, body
    code, _ = doomed.expect_close()
    assert code == 1008
    late = agent_ws(agent.sock, headers={"X-Orchard-Key": "41"})
    assert late.status == 403, late.headers
    assert agent.request("GET", "/health", headers={"X-Orchard-Key": "41"})[0] == 403
    assert agent.request("POST", "/keys/revoke?key=41")[1]["pty_sessions_ended"] == 0
    for ws in (kept, plain):
        ws.stdin("echo on-$((6*7))\n")
        ws.read_until("on-42")
        ws.close()


def test_a_revoked_key_cuts_its_tar_download(agent, tmp_path):
    d = tmp_path / "big"
    d.mkdir()
    with open(d / "zeros", "wb") as f:
        f.truncate(256 << 20)            # 256 MiB of tar to send
    c = UnixHTTPConnection(agent.sock, timeout=60)
    try:
        c.request("GET", "/archive?path=%s" % d, headers={"Authorization": "Bearer " + TOKEN,
                                                          "X-Orchard-Key": "43"})
        r = c.getresponse()
        assert r.status == 200
        got = len(r.read(1 << 20))
        assert agent.request("POST", "/keys/revoke?key=43")[0] == 200
        with pytest.raises(Exception):   # a cut chunked body (IncompleteRead, reset)
            while True:
                chunk = r.read(1 << 20)
                if not chunk:
                    break
                got += len(chunk)
        assert 1 << 20 <= got < 256 << 20, got
    finally:
        c.close()


# ---- exec cancel ----

def run_in_thread(fn, *args, **kw):
    box = {}

    def go():
        try:
            box["result"] = fn(*args, **kw)
        except Exception as e:  # noqa: BLE001 - reported by the test
            box["error"] = e
    t = threading.Thread(target=go)
    t.start()
    return t, box


def test_cancel_running_exec_kills_its_process_group(agent, tmp_path):
    pidfile = tmp_path / "grandchild"
    t, box = run_in_thread(agent.exec, job_id="run-1", timeout_seconds=60,
                           command="sleep 60 & echo $! > %s; wait" % pidfile)
    assert wait_until(lambda: pidfile.exists() and pidfile.read_text().strip())
    grandchild = int(pidfile.read_text())
    started = time.time()
    status, body = agent.cancel("run-1")
    assert (status, body) == (200, {"cancelled": True, "state": "running"})
    t.join(10)
    res = box["result"]
    assert time.time() - started < 5
    assert res["cancelled"] is True and res["exit_code"] == 137 and res["signal"] == 9
    assert res["timed_out"] is False
    assert wait_until(lambda: not alive(grandchild)), "the background sleep survived"
    # finished: cancelling again is 404
    assert agent.cancel("run-1") == (404, {"error": "no such job"})


def test_cancel_errors(agent):
    assert agent.cancel("never-seen")[0] == 404
    assert agent.request("POST", "/exec/cancel", {"job_id": "bad id!"})[0] == 400
    assert agent.request("POST", "/exec/cancel", {})[0] == 400
    st, body = agent.request("POST", "/exec", {"command": "true", "job_id": "x" * 65})
    assert st == 400 and "job_id" in body["error"]
    t, box = run_in_thread(agent.exec, job_id="dup", command="sleep 1")
    time.sleep(0.3)
    st, body = agent.request("POST", "/exec", {"command": "true", "job_id": "dup"})
    assert st == 409, body
    t.join(10)
    assert box["result"]["exit_code"] == 0
    # the id is free again once the job has finished
    assert agent.exec(command="true", job_id="dup")["cancelled"] is False


# ---- streaming exec ----

def stream_exec(agent, body, headers=None):
    """Yields (seconds since the request, parsed line)."""
    c = UnixHTTPConnection(agent.sock, timeout=30)
    h = {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"}
    h.update(headers or {})
    t0 = time.time()
    c.request("POST", "/exec", body=json.dumps(body), headers=h)
    r = c.getresponse()
    assert r.status == 200
    assert r.getheader("Content-Type") == "application/x-ndjson"
    try:
        while True:
            line = r.readline()
            if not line:
                return
            yield time.time() - t0, json.loads(line)
    finally:
        c.close()


def collect(lines):
    out = {"stdout": b"", "stderr": b""}
    frames = []
    for t, m in lines:
        frames.append((t, m))
        if m["type"] in out:
            out[m["type"]] += base64.b64decode(m["data"])
    return out, frames


def test_streaming_output_arrives_before_the_command_ends(agent):
    cmd = "echo one; sleep 1; echo two >&2; sleep 1; printf three"
    out, frames = collect(stream_exec(agent, {"command": cmd, "stream": True}))
    first_t = frames[0][0]
    last_t = frames[-1][0]
    assert frames[0][1] == {"type": "stdout", "data": base64.b64encode(b"one\n").decode()}
    # the first line comes long before the end (the command sleeps 2 s)
    assert first_t + 1.0 < last_t and last_t > 1.8, (first_t, last_t)
    assert out == {"stdout": b"one\nthree", "stderr": b"two\n"}
    kinds = [m["type"] for _, m in frames]
    assert kinds[-1] == "exit" and kinds.count("exit") == 1
    ex = frames[-1][1]
    assert ex["exit_code"] == 0 and ex["signal"] is None and ex["cancelled"] is False
    assert ex["stdout_bytes"] == 9 and ex["stderr_bytes"] == 4
    assert "stdout" not in ex and "stderr" not in ex and ex["duration_ms"] >= 1900


def test_streaming_by_accept_header_with_cap_and_binary(agent):
    cmd = "head -c 100000 /dev/zero; printf '\\377\\376' >&2; exit 3"
    out, frames = collect(stream_exec(agent, {"command": cmd, "max_output_bytes": 1000},
                                      headers={"Accept": "application/x-ndjson"}))
    ex = frames[-1][1]
    assert out["stdout"] == b"\0" * 1000 and out["stderr"] == b"\xff\xfe"
    assert ex["exit_code"] == 3 and ex["stdout_bytes"] == 100000 and ex["stdout_truncated"] is True
    assert ex["stderr_bytes"] == 2 and ex["stderr_truncated"] is False


def test_streaming_command_that_cannot_start(agent):
    out, frames = collect(stream_exec(agent, {"command": ["/no/such/program"], "stream": True}))
    ex = frames[-1][1]
    assert ex["type"] == "exit" and ex["exit_code"] == 127 and "cannot execute" in ex["error"]
    assert out["stderr"].startswith(b"orchard-agent: ")


def test_streaming_login_shell_has_no_tty_warnings(agent, tmp_path):
    (tmp_path / ".bashrc").write_text("echo from-bashrc >&2\n")
    out, frames = collect(stream_exec(agent, {"command": "echo hi >&2", "login_shell": True,
                                              "env": {"HOME": str(tmp_path)}, "stream": True}))
    assert out["stderr"] == b"from-bashrc\nhi\n", out
    assert frames[-1][1]["stderr_bytes"] == len(b"from-bashrc\nhi\n")


def test_streaming_exec_can_be_cancelled(agent):
    lines = stream_exec(agent, {"command": "echo go; sleep 30", "stream": True, "job_id": "s-1"})
    t, first = next(lines)
    assert first["type"] == "stdout"
    assert agent.cancel("s-1")[0] == 200
    rest = [m for _, m in lines]
    assert rest[-1]["type"] == "exit" and rest[-1]["cancelled"] is True and rest[-1]["signal"] == 9


def test_plain_exec_reports_cancelled_false(agent):
    assert agent.exec(command="true")["cancelled"] is False


# ---- PTY ----

def test_pty_upgrade_checks(agent):
    st, body = agent.request("GET", "/pty")
    assert st == 426 and "WebSocket" in body["error"]
    ws = agent_ws(agent.sock, token=None)
    assert ws.status == 401
    ws = agent_ws(agent.sock, token="wrong")
    assert ws.status == 401
    ws = agent_ws(agent.sock, query="?session=" + "0" * 32)
    assert ws.status == 404
    ws = agent_ws(agent.sock, query="?session=zz")
    assert ws.status == 400


def test_pty_token_in_query(agent):
    ws = agent_ws(agent.sock, query="?token=" + TOKEN, header_auth=False)
    assert ws.status == 101
    ws.send({"type": "init", "cmd": ["/bin/sh", "-c", "exit 0"]})
    assert ws.recv()["type"] == "ready"
    ws.close()


def test_pty_echo_and_exit_code(agent):
    ws, ready = open_session(agent)
    assert ready["pid"] > 1 and len(ready["session_id"]) == 32 and ready["offset"] == 0
    ws.stdin("echo hello-$((6*7))\n")
    ws.read_until("hello-42")
    ws.stdin("exit 7\n")
    _, code = ws.until_exit()
    assert code == 7
    assert ws.expect_close()[0] == 1000


def test_pty_default_shell_is_a_login_shell_on_a_terminal(agent, tmp_path):
    ws = agent_ws(agent.sock)
    ws.send({"type": "init", "env": {"HOME": str(tmp_path)}})  # not this host's profile
    assert ws.recv()["type"] == "ready"
    ws.stdin("[ -t 0 ] && echo TTY-$TERM; shopt -q login_shell && echo LOGIN-yes; exit\n")
    out, code = ws.until_exit()
    assert "TTY-xterm-256color" in out and "LOGIN-yes" in out and code == 0


def test_pty_init_fields(agent, tmp_path):
    ws, _ = open_session(agent, {"cmd": ["/bin/sh", "-c", "echo $FOO; pwd; stty size"],
                                 "env": {"FOO": "bar"}, "cwd": str(tmp_path),
                                 "rows": 50, "cols": 132})
    out, code = ws.until_exit()
    assert out.split() == ["bar", str(tmp_path), "50", "132"] and code == 0


def test_pty_resize_changes_stty_size(agent):
    ws, _ = open_session(agent)
    ws.stdin("stty size\n")
    ws.read_until("24 80")
    ws.send({"type": "resize", "rows": 33, "cols": 111})
    time.sleep(0.1)
    ws.stdin("stty size\n")
    ws.read_until("33 111")
    ws.send({"type": "close"})
    _, code = ws.until_exit()
    assert code == -signal.SIGHUP


def test_pty_signal_gives_a_negative_exit_code(agent):
    ws, ready = open_session(agent, {"cmd": ["sleep", "100"]})
    ws.send({"type": "signal", "sig": "TERM"})
    _, code = ws.until_exit()
    assert code == -signal.SIGTERM
    assert wait_until(lambda: not alive(ready["pid"]))


def test_pty_interrupt_reaches_the_foreground_job(agent):
    ws, _ = open_session(agent, {"cmd": ["/bin/bash", "--norc", "-i"]})
    ws.stdin("sleep 100\n")
    time.sleep(0.5)
    ws.send({"type": "signal", "sig": "INT"})
    ws.stdin("echo after-$?\n")
    ws.read_until("after-130")
    ws.send({"type": "signal", "sig": "KILL"})
    _, code = ws.until_exit()
    assert code == -signal.SIGKILL


@pytest.mark.parametrize("first", [
    {"type": "stdin", "data": ""},
    {"type": "init", "rows": "tall"},
    {"type": "init", "cmd": []},
    {"type": "init", "cwd": ""},
    {"type": "nonsense"},
])
def test_pty_bad_init_closes_4400(agent, first):
    ws = agent_ws(agent.sock)
    ws.send(first)
    code, frames = ws.expect_close()
    assert code == 4400
    assert frames and frames[0]["type"] == "error" and frames[0]["message"]


def test_pty_no_init_in_time_closes_4400(agent):
    ws = agent_ws(agent.sock)
    t0 = time.time()
    code, frames = ws.expect_close(seconds=10)
    assert code == 4400 and frames[0]["type"] == "error"
    assert INIT_TIMEOUT_MS / 1000 - 0.2 < time.time() - t0 < INIT_TIMEOUT_MS / 1000 + 2


def test_pty_spawn_failure_closes_4500(agent, tmp_path):
    ws = agent_ws(agent.sock)
    ws.send({"type": "init", "cmd": ["/no/such/program"]})
    code, frames = ws.expect_close()
    assert code == 4500 and "cannot execute" in frames[0]["message"]
    ws = agent_ws(agent.sock)
    ws.send({"type": "init", "cmd": ["/bin/sh"], "cwd": str(tmp_path / "missing")})
    assert ws.expect_close()[0] == 4500


def test_pty_errors_after_init_keep_the_session(agent):
    def next_error():
        while True:
            m = ws.recv()
            if m["type"] != "stdout":  # the prompt may come first
                return m

    ws, _ = open_session(agent)
    ws.send({"type": "stdin", "data": "!!!"})
    assert next_error() == {"type": "error", "message": "field 'data' is not valid base64"}
    ws.send_frame(0x1, b"{not json")
    assert next_error()["type"] == "error"
    ws.send({"type": "signal", "sig": "USR1"})
    assert "TERM" in next_error()["message"]
    ws.send({"type": "init"})
    assert next_error()["message"] == "the session has already started"
    ws.stdin("echo still-$((1+1))\n")
    ws.read_until("still-2")
    ws.send({"type": "close"})
    ws.until_exit()


def test_pty_websocket_framing(agent):
    ws = agent_ws(agent.sock)
    # a fragmented init, then a ping answered with its payload
    text = json.dumps({"type": "init", "cmd": ["/bin/sh"]}).encode()
    ws.send_frame(0x1, text[:10], fin=False)
    ws.send_frame(0x0, text[10:20], fin=False)
    ws.send_frame(0x0, text[20:], fin=True)
    assert ws.recv()["type"] == "ready"
    ws.send_frame(0x9, b"are-you-there")
    op, payload = ws.recv_frame()
    while op != 0xA:
        op, payload = ws.recv_frame()
    assert payload == b"are-you-there"
    # over 1 MiB in one message: 1009 (the agent may stop reading early)
    try:
        ws.send_frame(0x1, b" " * (1024 * 1024 + 10))
    except OSError:
        pass
    assert ws.expect_close()[0] == 1009


def test_pty_unmasked_frame_is_a_protocol_error(agent):
    ws = agent_ws(agent.sock)
    ws.send_frame(0x1, json.dumps({"type": "init"}).encode(), masked=False)
    assert ws.expect_close()[0] == 1002


def test_pty_two_sessions_at_once(agent):
    a, ra = open_session(agent)
    b, rb = open_session(agent)
    assert ra["session_id"] != rb["session_id"] and ra["pid"] != rb["pid"]
    a.stdin("echo A-$((1+1))\n")
    b.stdin("echo B-$((2+2))\n")
    assert "A-" not in b.read_until("B-4")
    assert "B-" not in a.read_until("A-2")
    b.stdin("exit 4\n")
    a.stdin("exit 3\n")
    assert a.until_exit()[1] == 3 and b.until_exit()[1] == 4


def test_pty_reattach_replays_missed_output(agent):
    ws, ready = open_session(agent)
    sid = ready["session_id"]
    ws.stdin("echo before-$((1+1))\n")
    ws.read_until("before-2")
    time.sleep(0.2)
    while True:  # whatever else the shell printed (the prompt)
        ws.s.settimeout(0.3)
        try:
            ws.recv()
        except socket.timeout:
            break
    offset = ws.received
    ws.stdin("sleep 0.5; echo missed-$((3+3))\n")
    time.sleep(0.1)
    ws.drop()
    time.sleep(1.2)  # the output is produced while nobody is attached

    again = agent_ws(agent.sock, query="?session=%s&offset=%d" % (sid, offset))
    assert again.status == 101
    r = again.recv()
    assert r == {"type": "ready", "pid": ready["pid"], "session_id": sid, "offset": offset}
    out = again.read_until("missed-6")
    assert "before-2" not in out
    again.stdin("echo live\n")
    again.read_until("live")

    # from offset 0 everything is still there
    third = agent_ws(agent.sock, query="?session=%s&offset=0" % sid)
    assert third.recv()["offset"] == 0
    assert "before-2" in third.read_until("missed-6")
    # the second client was replaced
    assert again.expect_close()[0] == 4000
    third.stdin("exit 5\n")
    assert third.until_exit()[1] == 5
    assert third.expect_close()[0] == 1000
    # delivered: the session is gone
    assert wait_until(lambda: agent.request("GET", "/pty?session=" + sid,
                                            headers={"Upgrade": "websocket", "Connection": "Upgrade",
                                                     "Sec-WebSocket-Version": "13",
                                                     "Sec-WebSocket-Key": base64.b64encode(b"k" * 16).decode()})[0] == 404)


def test_pty_reattach_after_exit_gets_output_and_exit(agent):
    ws, ready = open_session(agent, {"cmd": ["/bin/sh", "-c", "sleep 0.5; echo done-late; exit 9"]})
    ws.drop()
    time.sleep(1)
    again = agent_ws(agent.sock, query="?session=%s" % ready["session_id"])
    assert again.recv()["type"] == "ready"
    out, code = again.until_exit()
    assert "done-late" in out and code == 9


def test_pty_offset_past_the_end_is_4400(agent):
    ws, ready = open_session(agent)
    again = agent_ws(agent.sock, query="?session=%s&offset=999999" % ready["session_id"])
    assert again.expect_close()[0] == 4400
    ws.send({"type": "close"})
    ws.until_exit()


def test_pty_detached_session_expires_after_the_grace(tmp_path):
    agent = start_agent(str(tmp_path), {"ORCHARD_AGENT_PTY_GRACE_MS": "500"})
    try:
        ws, ready = open_session(agent, {"cmd": ["sleep", "100"]})
        ws.drop()
        assert wait_until(lambda: not alive(ready["pid"]), 5), "the detached program survived"
        st = agent_ws(agent.sock, query="?session=" + ready["session_id"]).status
        assert st == 404
    finally:
        assert stop_agent(agent.proc) == 0


def test_pty_websocket_close_hangs_up_then_terminates(agent, tmp_path):
    """A client's WebSocket close frame (what Orchard's close() sends) ends
    the program: SIGHUP, then SIGTERM for one that ignores SIGHUP. Without
    a close frame the session would wait 20 s for a reattach."""
    mark = tmp_path / "term"
    script = 'trap "" HUP; trap "echo term > %s; exit 7" TERM; echo up; while :; do sleep 0.05; done' % mark
    ws, ready = open_session(agent, {"cmd": ["/bin/sh", "-c", script]})
    ws.read_until("up")
    ws.close()
    assert wait_until(lambda: not alive(ready["pid"]), 10), "the program survived the close"
    assert mark.read_text() == "term\n"
    assert wait_until(lambda: agent_ws(agent.sock, query="?session=" + ready["session_id"]).status == 404, 10)


def test_pty_websocket_close_kills_what_ignores_hup_and_term(agent):
    ws, ready = open_session(agent, {"cmd": ["/bin/sh", "-c", 'trap "" HUP TERM; echo up; sleep 100']})
    ws.read_until("up")
    ws.close()
    assert wait_until(lambda: not alive(ready["pid"]), 10), "the program survived SIGKILL"


def test_pty_pings_at_the_configured_interval(tmp_path):
    agent = start_agent(str(tmp_path), {"ORCHARD_AGENT_PTY_PING_MS": "200"})
    try:
        ws, _ = open_session(agent, {"cmd": ["sleep", "30"]})
        pings, end = 0, time.time() + 10
        while pings < 3 and time.time() < end:
            op, _ = ws.recv_frame()
            pings += op == 0x9
        assert pings == 3
        ws.send({"type": "close"})
        ws.until_exit()
    finally:
        assert stop_agent(agent.proc) == 0


def test_sigterm_with_an_open_session_ends_it(tmp_path):
    agent = start_agent(str(tmp_path))
    ws, ready = open_session(agent, {"cmd": ["sleep", "100"]})
    t0 = time.time()
    assert stop_agent(agent.proc) == 0
    assert time.time() - t0 < 5
    assert ws.expect_close()[0] == 1001
    assert wait_until(lambda: not alive(ready["pid"]))


# ---- the self-contained agent in a busybox root ----

BUSYBOX_APPLETS = ("sh", "ls", "cat", "echo", "sleep", "stty", "env", "pwd", "mkdir", "rm",
                   "true", "printf", "head", "wc", "tty")


def build_bundle(tmp_path):
    """scripts/agent-bundle.sh of the agent under test into tmp_path/bundle."""
    bundle = tmp_path / "bundle"
    r = subprocess.run([os.path.join(REPO, "scripts", "agent-bundle.sh"), str(bundle)],
                       capture_output=True, text=True, env=dict(os.environ, ORCHARD_AGENT_BIN=AGENT))
    assert r.returncode == 0, r.stderr
    return bundle


def test_bundled_agent_runs_in_a_busybox_root(tmp_path):
    """scripts/agent-bundle.sh, then the agent in a root holding only a
    static busybox (no libc, no bash, no git) under bubblewrap: health, exec
    through sh, a long script, a streaming exec, files, tar, git apply/diff/
    reset and a PTY session."""
    bb = static_busybox()
    if not bb:
        pytest.skip("no static busybox: apt-get install busybox-static")
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed")
    bundle = build_bundle(tmp_path)
    command = (bundle / "command").read_text().split()
    assert command == ["/run/orchard-agent/ld-linux-x86-64.so.2", "--inhibit-cache", "--library-path",
                       "/run/orchard-agent/lib", "/run/orchard-agent/orchard-agent"]
    assert (bundle / "lib" / "libc.so.6").exists() and (bundle / "lib" / "libwslay.so.1").exists()

    root = tmp_path / "root"
    for d in ("bin", "tmp", "workspace", "proc", "dev", "run/orchard-agent", "run/orchard", "run/sock"):
        (root / d).mkdir(parents=True)
    make_repo(root / "workspace" / "repo")
    shutil.copy(bb, root / "bin" / "busybox")
    for applet in BUSYBOX_APPLETS:
        os.symlink("busybox", root / "bin" / applet)
    (root / "run" / "orchard" / "token").write_text(TOKEN + "\n")
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*")
                   if p.is_file() and not p.is_symlink() and "workspace" not in p.parts)
    assert files == ["bin/busybox", "run/orchard/token"]
    sockdir = tmp_path / "sock"
    sockdir.mkdir()
    log = open(tmp_path / "agent.log", "ab")
    proc = subprocess.Popen(
        ["bwrap", "--bind", str(root), "/", "--ro-bind", str(bundle), "/run/orchard-agent",
         "--bind", str(sockdir), "/run/sock", "--proc", "/proc", "--dev", "/dev",
         "--unshare-all", "--die-with-parent", "--clearenv", "--setenv", "PATH", "/bin",
         "--setenv", "ORCHARD_LOG_LEVEL", "debug"] + command +
        ["--listen", "unix:/run/sock/agent.sock", "--token-file", "/run/orchard/token"],
        stdout=log, stderr=log)
    log.close()
    agent = Agent(str(sockdir / "agent.sock"), proc, str(tmp_path))
    try:
        def healthy():
            try:
                return agent.request("GET", "/health", timeout=2)
            except OSError:  # not listening yet
                return None
        assert wait_until(lambda: proc.poll() is not None or healthy(), 10)
        assert proc.poll() is None, agent.log()
        st, health = healthy()
        assert st == 200 and health["status"] == "ok", agent.log()

        res = agent.exec(command="echo $0; [ -e /bin/bash ] || echo no-bash; ls /lib 2>&1; pwd")
        assert res["exit_code"] == 0, res
        lines = res["stdout"].splitlines()
        assert lines[0] == "sh" and lines[1] == "no-bash" and lines[-1] == "/workspace"
        assert agent.exec(command=["cat"], stdin="piped")["stdout"] == "piped"
        script = "x=0\n" + "x=$((x+1))\n" * 20000 + "echo $x\n"  # > 64 KiB: via /dev/fd/3
        assert agent.exec(command=script)["stdout"] == "20000\n"
        out, frames = collect(stream_exec(agent, {"command": "echo a; sleep 0.3; echo b", "stream": True}))
        assert out["stdout"] == b"a\nb\n" and frames[-1][1]["exit_code"] == 0
        busybox_files_tar_and_git(agent_http.Agent(agent.sock, token=TOKEN))

        ws = agent_ws(agent.sock)
        ws.send({"type": "init", "rows": 20, "cols": 70})
        ready = ws.recv()
        assert ready["type"] == "ready", ready
        ws.stdin("tty; stty size\n")
        out = ws.read_until("20 70")
        assert "/dev/pts/" in out
        ws.send({"type": "resize", "rows": 44, "cols": 99})
        time.sleep(0.1)
        ws.stdin("stty size; exit 3\n")
        out, code = ws.until_exit()
        assert "44 99" in out and code == 3
        # bwrap does not pass signals on: SIGTERM the agent itself
        inner = descendant_running(proc.pid, b"/run/orchard-agent/ld-linux")
        assert inner, "the agent process was not found under bwrap"
        os.kill(inner, signal.SIGTERM)
        proc.wait(10)
        assert proc.returncode == 0, agent.log()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_bundled_agent_without_libgit2_names_it_and_serves_the_rest(tmp_path):
    """libgit2 is loaded on first use (docs/agent-protocol.md, "Memory"):
    a bundle missing it starts, serves health and tar, and answers git
    calls with a 500 naming the library."""
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed")
    bundle = build_bundle(tmp_path)
    gone = list((bundle / "lib").glob("libgit2.so.*"))
    assert len(gone) == 1 and (bundle / "lib" / "libarchive.so.13").exists()
    gone[0].unlink()
    command = (bundle / "command").read_text().split()
    sockdir = tmp_path / "sock"
    sockdir.mkdir()
    (tmp_path / "token").write_text(TOKEN + "\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x").write_text("x\n")
    log = open(tmp_path / "agent.log", "ab")
    # an empty root: the system's libgit2 is out of reach
    proc = subprocess.Popen(
        ["bwrap", "--tmpfs", "/", "--ro-bind", str(bundle), "/run/orchard-agent",
         "--bind", str(sockdir), "/run/sock", "--ro-bind", str(tmp_path / "token"), "/run/token",
         "--ro-bind", str(tmp_path / "data"), "/data", "--proc", "/proc", "--dev", "/dev", "--unshare-all", "--die-with-parent", "--clearenv"] +
        command + ["--listen", "unix:/run/sock/agent.sock", "--token-file", "/run/token"],
        stdout=log, stderr=log)
    log.close()
    a = agent_http.Agent(str(sockdir / "agent.sock"), token=TOKEN)
    try:
        def healthy():
            try:
                return a.request("GET", "/health", timeout=2)[0] == 200
            except OSError:  # not listening yet
                return False
        assert wait_until(lambda: proc.poll() is not None or healthy(), 10)
        assert proc.poll() is None
        for method, path, body in (("GET", "/git/diff?cwd=/run", None),
                                   ("POST", "/git/apply", {"patch": "", "cwd": "/run"}),
                                   ("POST", "/git/reset", {"cwd": "/run"})):
            st, out, _ = a.request(method, path, body)
            assert st == 500 and out["error"].startswith("libgit2 cannot be loaded (%s)" % gone[0].name), out
        st, tar, _ = a.request("GET", "/archive?path=/data", raw=True)
        assert st == 200 and tarfile.open(fileobj=io.BytesIO(tar)).getnames() == ["x"]
        assert a.request("GET", "/health")[0] == 200
    finally:
        proc.kill()
        proc.wait()


def make_repo(path):
    """A git repository made on the host (the busybox root has no git)."""
    path.mkdir(parents=True)
    (path / "a.txt").write_text("one\ntwo\n")
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "a.txt"], ["commit", "-qm", "first"]):
        subprocess.run(git + args, check=True, capture_output=True)


def busybox_files_tar_and_git(a):
    """Files, tar and git (libgit2) in a root without libc, bash or git."""
    blob = os.urandom(1 << 20)
    st, body, _ = a.request("PUT", "/files?path=/workspace/d/blob&mode=0600", body=blob)
    assert st == 200 and body["sha256"] == hashlib.sha256(blob).hexdigest(), body
    st, data, r = a.request("GET", "/files?path=/workspace/d/blob", raw=True)
    assert st == 200 and data == blob and r.getheader("X-File-Mode") == "0600"
    st, body, _ = a.request("POST", "/files/base64", {"path": "d/b64", "content":
                                                      base64.b64encode(b"\x00\xffx").decode()})
    assert st == 200 and body["size"] == 3, body
    st, body, _ = a.request("GET", "/files/base64?path=/workspace/d/b64")
    assert st == 200 and base64.b64decode(body["content"]) == b"\x00\xffx", body
    st, body, _ = a.request("POST", "/files/mkdir", {"path": "/workspace/d/sub/deep"})
    assert st == 200, body
    st, body, _ = a.request("GET", "/files/list?path=/workspace/d")
    assert st == 200 and [f["name"] for f in body["files"]] == ["b64", "blob", "sub"], body
    st, body, _ = a.request("GET", "/files/stat?path=/workspace/d/sub")
    assert st == 200 and body["type"] == "directory", body

    st, tar, _ = a.request("GET", "/archive?path=/workspace/d", raw=True)
    assert st == 200
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        names = sorted(t.getnames())
        assert t.extractfile("blob").read() == blob
    assert names == ["b64", "blob", "sub", "sub/deep"], names
    st, body, _ = a.request("PUT", "/archive?path=/workspace/copy", body=tar)
    assert st == 200 and body["entries"] == 4, body
    assert a.request("POST", "/exec", {"command": "wc -c < /workspace/copy/blob"})[1]["stdout"] \
        .strip() == str(1 << 20)
    st, body, _ = a.request("DELETE", "/files?path=/workspace/copy&recursive=1")
    assert st == 200 and a.request("GET", "/files/stat?path=/workspace/copy")[0] == 404

    patch = ("diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+2\n"
             "diff --git a/new.txt b/new.txt\nnew file mode 100644\n--- /dev/null\n+++ b/new.txt\n"
             "@@ -0,0 +1 @@\n+new\n")
    st, body, _ = a.request("POST", "/git/apply", {"patch": patch, "cwd": "/workspace/repo"})
    assert st == 200 and body["success"] and sorted(body["files"]) == ["a.txt", "new.txt"], body
    assert a.request("POST", "/exec", {"command": "cat /workspace/repo/a.txt"})[1]["stdout"] == "one\n2\n"
    st, body, _ = a.request("GET", "/git/diff?cwd=/workspace/repo")
    assert st == 200 and body["files"] == 2 and "+2" in body["patch"] and "+new" in body["patch"], body
    st, body, _ = a.request("POST", "/git/reset", {"cwd": "/workspace/repo"})
    assert st == 200 and body["success"], body
    st, body, _ = a.request("GET", "/git/diff?cwd=/workspace/repo")
    assert st == 200 and body["patch"] == "", body


def descendant_running(root_pid, needle):
    """pid of a descendant of root_pid whose command line starts with needle."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    todo = list(children.get(root_pid, []))
    while todo:
        pid = todo.pop()
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                if f.read().startswith(needle):
                    return pid
        except OSError:
            continue
        todo.extend(children.get(pid, []))
    return None


def test_pty_large_output_arrives_complete(agent):
    """More than the replay ring holds: an attached client loses nothing
    (a slow reader holds the program back instead)."""
    ws, _ = open_session(agent, {"cmd": ["seq", "1", "300000"]})
    time.sleep(1.5)  # not reading: 2 MB would overrun the 1 MiB ring
    out, code = ws.until_exit(seconds=120)
    assert code == 0
    nums = out.split()
    assert len(nums) == 300000 and nums[0] == "1" and nums[-1] == "300000"
    assert ws.received > 1024 * 1024
