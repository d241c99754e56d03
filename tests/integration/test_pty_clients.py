"""The PTY WebSocket through the whole stack (TLS, nginx, the sandbox's
agent) with clients this project did not write (issue 18, section 1):
Debian's python3-websocket (websocket-client, what Orchard's sync SDK
uses), python3-websockets (an independent asyncio implementation), and
Orchard's SDK itself, `exec(..., pty=True)` sync and async. Each checks
the handshake (RFC 6455's Sec-WebSocket-Accept) on its own.
"""
import asyncio
import base64
import json
import ssl
import struct
import time

import pytest
import websocket  # python3-websocket
import websockets  # python3-websockets

import orchard_sdk
from orchard_sdk import sdk_env

# The SDK's tests skip on a machine without it; the other clients' run.
orchard_env = orchard_sdk.load_or_none()
needs_sdk = orchard_sdk.needs_sdk


@pytest.fixture(scope="module")
def box(stack, admin):
    sid = stack.new_sandbox(admin)
    yield sid
    admin.delete("%s/sandboxes/%s" % (stack.url, sid))


def wss(stack, sid, query=""):
    return "wss://%s/sandboxes/%s/exec/pty%s" % (stack.url.split("://", 1)[1], sid, query)


def stdin(text):
    return json.dumps({"type": "stdin", "data": base64.b64encode(text.encode()).decode()})


INIT = json.dumps({"type": "init", "cmd": ["/bin/sh"], "rows": 24, "cols": 80})


# ---- websocket-client ----

class WC:
    """A websocket-client connection and the PTY frames it reads."""

    def __init__(self, stack, sid, query="", **kw):
        self.ws = websocket.create_connection(wss(stack, sid, query), timeout=30,
                                              sslopt={"ca_certs": stack.cacert}, **kw)
        self.out = ""

    def frame(self):
        """(opcode, payload) of the next frame, control frames included."""
        return self.ws.recv_data(control_frame=True)

    def msg(self):
        while True:
            op, data = self.frame()
            if op == websocket.ABNF.OPCODE_CLOSE:
                return {"type": "_close", "code": struct.unpack("!H", data[:2])[0] if len(data) >= 2 else None}
            if op in (websocket.ABNF.OPCODE_TEXT, websocket.ABNF.OPCODE_BINARY):
                m = json.loads(data)
                if m["type"] == "stdout":
                    self.out += base64.b64decode(m["data"]).decode(errors="replace")
                return m

    def until(self, text, seconds=30):
        end = time.monotonic() + seconds
        while text not in self.out:
            assert time.monotonic() < end, "no %r in %r" % (text, self.out)
            m = self.msg()
            assert m["type"] in ("stdout", "ready"), (m, self.out)
        return self.out

    def until_exit(self, seconds=60):
        """(exit code, close code)."""
        end, code = time.monotonic() + seconds, None
        while time.monotonic() < end:
            m = self.msg()
            if m["type"] == "exit":
                code = m["code"]
            elif m["type"] == "_close":
                return code, m["code"]
        raise AssertionError("no close in time: %r" % self.out)


@pytest.mark.parametrize("auth", ["query", "subprotocol", "header"])
def test_websocket_client_echo_resize_and_exit(stack, box, auth):
    key = stack.admin_key
    kw = {}
    query = ""
    if auth == "query":
        query = "?api_key=" + key
    elif auth == "subprotocol":
        kw["subprotocols"] = ["api_key." + key]
    else:
        kw["header"] = ["X-API-Key: " + key]
    c = WC(stack, box, query, **kw)
    if auth == "subprotocol":
        assert c.ws.getsubprotocol() == "api_key." + key
    c.ws.send(INIT)
    ready = c.msg()
    assert ready["type"] == "ready" and ready["pid"] > 0 and len(ready["session_id"]) == 32
    c.ws.send(stdin("echo hi-$((40+2))\n"))
    c.until("hi-42")
    c.ws.send(json.dumps({"type": "resize", "rows": 33, "cols": 101}))
    c.ws.send(stdin("stty size\n"))
    c.until("33 101")
    c.ws.send(stdin("exit 5\n"))
    assert c.until_exit() == (5, 1000)


def test_websocket_client_ping_answered_and_agent_pings(stack, box):
    c = WC(stack, box, "?api_key=" + stack.admin_key)
    c.ws.send(INIT)
    assert c.msg()["type"] == "ready"
    c.ws.ping(b"are-you-there")
    end, got_pong, got_ping = time.monotonic() + 30, False, False
    while not (got_pong and got_ping):
        assert time.monotonic() < end, (got_pong, got_ping)
        op, data = c.frame()
        if op == websocket.ABNF.OPCODE_PONG:
            assert data == b"are-you-there"
            got_pong = True
        elif op == websocket.ABNF.OPCODE_PING:
            got_ping = True  # within 30 s: the agent pings every 5 s
    c.ws.send(json.dumps({"type": "signal", "sig": "KILL"}))
    assert c.until_exit() == (-9, 1000)


@pytest.mark.parametrize("key,status", [("orch_nope_nope", 403), (None, 401)])
def test_websocket_client_bad_key_is_refused(stack, box, key, status):
    query = "?api_key=" + key if key else ""
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        WC(stack, box, query)
    assert e.value.status_code == status


def test_websocket_client_bad_init_closes_4400(stack, box):
    c = WC(stack, box, "?api_key=" + stack.admin_key)
    c.ws.send(json.dumps({"type": "stdin", "data": ""}))
    m = c.msg()
    assert m["type"] == "error"
    assert c.msg() == {"type": "_close", "code": 4400}


def test_websocket_client_error_frame_then_close_message(stack, box):
    """After init a bad frame gets an error frame and the session goes on;
    the close message hangs up (SIGHUP: exit -1), then close 1000."""
    c = WC(stack, box, header=["X-API-Key: " + stack.admin_key])
    c.ws.send(INIT)
    assert c.msg()["type"] == "ready"
    c.ws.send(json.dumps({"type": "bogus"}))
    m = c.msg()
    while m["type"] == "stdout":
        m = c.msg()
    assert m["type"] == "error" and m["message"]
    c.ws.send(stdin("echo still-$((2*4))\n"))
    c.until("still-8")
    c.ws.send(json.dumps({"type": "close"}))
    assert c.until_exit() == (-1, 1000)


# ---- websockets (asyncio) ----

def ws_ssl(stack):
    return ssl.create_default_context(cafile=stack.cacert)


async def ws_session(stack, sid, init, **kw):
    """(stdout bytes, exit code, close code) of one session to its end."""
    async with websockets.connect(wss(stack, sid), ssl=ws_ssl(stack), max_size=8 << 20,
                                  subprotocols=["api_key." + stack.admin_key], **kw) as ws:
        await ws.send(json.dumps(init))
        out, code = bytearray(), None
        async for raw in ws:
            m = json.loads(raw)
            if m["type"] == "stdout":
                out += base64.b64decode(m["data"])
            elif m["type"] == "exit":
                code = m["code"]
            elif m["type"] == "ready":
                for text in init.get("_stdin", []):
                    await ws.send(stdin(text))
        return bytes(out), code, ws.close_code


def test_websockets_four_mb_of_output(stack, box):
    out, code, close = asyncio.run(asyncio.wait_for(ws_session(
        stack, box, {"type": "init", "cmd": ["seq", "1", "600000"]}), 180))
    nums = out.split()
    assert code == 0 and close == 1000
    assert len(out) > 4 * 1000 * 1000
    assert len(nums) == 600000 and nums[0] == b"1" and nums[-1] == b"600000"


def test_websockets_eight_sessions_at_once(stack, box):
    async def all_of_them():
        return await asyncio.gather(*[
            ws_session(stack, box, {"type": "init", "cmd": ["/bin/sh"],
                                    "_stdin": ["echo s-$((%d*3))\n" % i, "exit %d\n" % i]})
            for i in range(8)])
    res = asyncio.run(asyncio.wait_for(all_of_them(), 180))
    for i, (out, code, close) in enumerate(res):
        assert b"s-%d" % (i * 3) in out and code == i and close == 1000


@pytest.mark.parametrize("pause", [0.2, 0])
def test_websockets_reconnect_to_the_session(stack, box, pause):
    # pause 0: the new client attaches while the agent may not have seen the
    # old connection's loss yet, so both arrive in one wake-up of the session
    async def go():
        ws = await websockets.connect(wss(stack, box), ssl=ws_ssl(stack),
                                      subprotocols=["api_key." + stack.admin_key])
        await ws.send(json.dumps({"type": "init", "cmd": ["/bin/sh"]}))
        ready = json.loads(await ws.recv())
        await ws.send(stdin("sleep 1; echo after-$((6*7))\n"))
        ws.transport.abort()  # a lost connection, no close frame: the session stays
        await asyncio.sleep(pause)
        again = await websockets.connect(wss(stack, box, "?session=%s&offset=0" % ready["session_id"]),
                                         ssl=ws_ssl(stack), subprotocols=["api_key." + stack.admin_key])
        r = json.loads(await again.recv())
        assert r["type"] == "ready" and r["session_id"] == ready["session_id"] and r["pid"] == ready["pid"]
        out = b""
        while b"after-42" not in out:
            m = json.loads(await again.recv())
            if m["type"] == "stdout":
                out += base64.b64decode(m["data"])
        await again.send(stdin("exit 3\n"))
        code = None
        async for raw in again:
            m = json.loads(raw)
            if m["type"] == "exit":
                code = m["code"]
        return code, again.close_code
    assert asyncio.run(asyncio.wait_for(go(), 120)) == (3, 1000)


# ---- Orchard's SDK ----

def sandbox_has_pid(stack, admin, sid, pid):
    r = admin.post("%s/sandboxes/%s/exec" % (stack.url, sid),
                   json={"command": "kill -0 %d 2>/dev/null && echo alive || echo gone" % pid, "wait": True})
    assert r.status_code == 200, r.text
    return r.json()["stdout"].strip() == "alive"


@needs_sdk
def test_sdk_sync_pty(stack, admin, box):
    with sdk_env(stack):
        client = orchard_env.SandboxClient()
        try:
            sb = client.get_sandbox(box)
            proc = sb.exec("read x; echo got-$x; stty size", pty=True, rows=30, cols=90)
            assert proc.pid and proc.pid > 0
            proc.write_stdin("zz\n")
            assert proc.wait(timeout=60) == 0
            out = b""
            while True:
                chunk = proc.read(timeout=5)
                if not chunk:
                    break
                out += chunk
            assert b"got-zz" in out and b"30 90" in out

            # close() of a running process ends it (SIGHUP, then SIGTERM)
            proc = sb.exec("trap '' HUP; echo up; sleep 300", pty=True)
            pid = proc.pid
            assert b"up" in proc.read(timeout=30)
            assert sandbox_has_pid(stack, admin, box, pid)
            proc.close()
            assert stack.wait_for(lambda: not sandbox_has_pid(stack, admin, box, pid), timeout=30,
                                  what="the closed PTY's program to end")
        finally:
            client.close()


@needs_sdk
def test_sdk_async_pty(stack, box):
    async def go():
        client = orchard_env.AsyncSandboxClient()
        try:
            sb = await client.get_sandbox(box)
            proc = await sb.exec("cat", pty=True)
            await proc.write_stdin(b"ping-pong\n")
            got = b""
            while b"ping-pong\r\n" not in got:
                got += await proc.read(timeout=30)
            await proc.kill("TERM")
            code = await proc.wait(timeout=60)
            await proc.close()
            return code
        finally:
            await client.close(cleanup=False)
    with sdk_env(stack):
        assert asyncio.run(asyncio.wait_for(go(), 120)) == -15


# ---- orchardctl shell (on wslay's client) against the same route ----

def test_orchardctl_shell_round_trip(stack, box):
    import os
    import subprocess
    ctl = os.environ.get("ORCHARD_TEST_ORCHARDCTL") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bin", "orchardctl")
    big = "seq 1 100000 | tail -n 1\n"
    r = subprocess.run([ctl, "shell", box, "--", "/bin/sh"], env=stack.env(),
                       input="echo hi-$((40+2))\n" + big + "exit 6\n",
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 6, r.stderr
    assert "hi-42" in r.stdout and "100000" in r.stdout
    gone = subprocess.run([ctl, "shell", "nosuchbox"], env=stack.env(), input="", capture_output=True,
                          text=True, timeout=60)
    assert gone.returncode != 0
    assert "not found" in gone.stderr.lower() or "404" in gone.stderr, gone.stderr
