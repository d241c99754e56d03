"""The PTY WebSocket through the whole stack (WSS -> nginx -> the sandbox's
agent), as docs/architecture.md ("PTY WebSocket") describes it: the key as
?api_key=, as the subprotocol api_key.<key> or as X-API-Key, and the
refusals, which are HTTP answers in our error shape before any upgrade.

Self-contained: a minimal RFC 6455 client over TLS (no websocket library).
"""
import base64
import hashlib
import json
import os
import socket
import ssl
import struct
import time
from urllib.parse import urlparse

import pytest

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
ERROR_SHAPE = {"detail", "code", "request_id"}


class Closed(Exception):
    def __init__(self, code):
        super().__init__("closed %s" % code)
        self.code = code


class WSS:
    """One client connection: the handshake's answer, then frames."""

    def __init__(self, stack, path, headers=None, protocols=None, upgrade=True, timeout=20):
        u = urlparse(stack.url)
        ctx = ssl.create_default_context(cafile=stack.cacert)
        raw = socket.create_connection((u.hostname, u.port), timeout=timeout)
        self.s = ctx.wrap_socket(raw, server_hostname="localhost")
        self.key = base64.b64encode(os.urandom(16)).decode()
        req = "GET %s HTTP/1.1\r\nHost: localhost\r\n" % path
        if upgrade:
            req += ("Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                    "Sec-WebSocket-Version: 13\r\n" % self.key)
        if protocols:
            req += "Sec-WebSocket-Protocol: %s\r\n" % ", ".join(protocols)
        for k, v in (headers or {}).items():
            req += "%s: %s\r\n" % (k, v)
        if not upgrade:
            req += "Connection: close\r\n"
        self.s.sendall((req + "\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.s.recv(4096)
            if not chunk:
                raise ConnectionError("closed during the handshake: %r" % self.buf)
            self.buf += chunk
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {}
        for line in lines[1:]:
            k, v = line.split(":", 1)
            self.headers.setdefault(k.strip().lower(), []).append(v.strip())

    def header(self, name):
        v = self.headers.get(name.lower())
        assert v is None or len(v) == 1, (name, v)
        return v[0] if v else None

    def body(self):
        """The JSON body of a non-101 answer."""
        n = int(self.header("content-length"))
        while len(self.buf) < n:
            chunk = self.s.recv(4096)
            if not chunk:
                break
            self.buf += chunk
        return json.loads(self.buf[:n])

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.s.recv(65536)
            if not chunk:
                raise Closed(None)
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send_frame(self, opcode, payload):
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = os.urandom(4)
        self.s.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def send(self, obj):
        self.send_frame(0x1, json.dumps(obj).encode())

    def recv(self):
        """The next JSON message; answers pings, raises Closed on close."""
        data = b""
        while True:
            b0, b1 = self._read(2)
            op, n = b0 & 0x0F, b1 & 0x7F
            assert not b1 & 0x80, "server frames must not be masked"
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            payload = self._read(n)
            if op == 0x8:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                try:
                    self.send_frame(0x8, payload[:2])
                except OSError:
                    pass
                raise Closed(code)
            if op == 0x9:
                self.send_frame(0xA, payload)
                continue
            if op == 0xA:
                continue
            data += payload
            if b0 & 0x80:
                return json.loads(data)

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


@pytest.fixture(scope="module")
def box(stack, admin):
    sid = stack.new_sandbox(admin)
    yield sid
    admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))


def pty_path(sid, query="", v1=True):
    return "%s/sandboxes/%s/exec/pty%s" % ("/v1" if v1 else "", sid, query)


def run_shell(ws):
    """init /bin/sh, echo hi, exit 3: (stdout text, exit code, close code)."""
    ws.send({"type": "init", "cmd": ["/bin/sh"], "rows": 24, "cols": 80})
    ready = ws.recv()
    assert ready["type"] == "ready" and ready["pid"] > 0, ready
    ws.send({"type": "stdin", "data": base64.b64encode(b"echo hi\nexit 3\n").decode()})
    out, code, end = "", None, time.time() + 20
    while code is None:
        assert time.time() < end, out
        m = ws.recv()
        if m["type"] == "stdout":
            out += base64.b64decode(m["data"]).decode(errors="replace")
        elif m["type"] == "exit":
            code = m["code"]
        else:
            assert m["type"] != "error", m
    try:
        ws.recv()
        close = "no close"
    except Closed as c:
        close = c.code
    return out, code, close


def assert_upgraded(ws):
    assert ws.status == 101, (ws.status, ws.headers, ws.buf)
    want = base64.b64encode(hashlib.sha1((ws.key + GUID).encode()).digest()).decode()
    assert ws.header("sec-websocket-accept") == want
    assert ws.header("x-request-id")
    assert ws.header("x-orchard-agent-token") is None
    assert ws.header("x-orchard-agent-upstream") is None


def assert_refused(ws, status, code):
    assert ws.status == status, (ws.status, ws.headers, ws.buf)
    body = ws.body()
    assert set(body) == ERROR_SHAPE, body
    assert body["code"] == code, body
    assert body["request_id"] == ws.header("x-request-id")
    return body


# ---- a whole session, with the key in each place Orchard allows ----------


def test_key_in_the_query(stack, box):
    ws = WSS(stack, pty_path(box, "?api_key=" + stack.admin_key))
    try:
        assert_upgraded(ws)
        assert ws.header("sec-websocket-protocol") is None
        out, code, close = run_shell(ws)
        assert "hi" in out and code == 3 and close == 1000, (out, code, close)
    finally:
        ws.close()


def test_key_as_subprotocol_is_accepted_back(stack, box):
    offer = "api_key." + stack.admin_key
    ws = WSS(stack, pty_path(box, v1=False), protocols=[offer, "other"])
    try:
        assert_upgraded(ws)
        # A client that offers subprotocols needs one of them selected.
        assert ws.header("sec-websocket-protocol") == offer
        out, code, close = run_shell(ws)
        assert "hi" in out and code == 3 and close == 1000, (out, code, close)
    finally:
        ws.close()


def test_key_in_x_api_key(stack, box):
    ws = WSS(stack, pty_path(box), headers={"X-API-Key": stack.admin_key})
    try:
        assert_upgraded(ws)
        out, code, close = run_shell(ws)
        assert "hi" in out and code == 3 and close == 1000, (out, code, close)
    finally:
        ws.close()


def test_reattach_query_reaches_the_agent_and_the_key_does_not(stack, box):
    # Of the query only session and offset reach the agent: an unknown
    # session is the agent's 404 and a malformed one its 400, both in our
    # error shape (the agent's own {"error"} bodies are intercepted).
    ws = WSS(stack, pty_path(box, "?session=%s&offset=0&api_key=%s" % ("0" * 32, stack.admin_key)))
    try:
        assert_refused(ws, 404, "not_found")
    finally:
        ws.close()
    ws = WSS(stack, pty_path(box, "?session=nothex&api_key=" + stack.admin_key))
    try:
        assert_refused(ws, 400, "invalid")
    finally:
        ws.close()


# ---- refusals: HTTP answers before the upgrade ----------------------------


def test_no_key_is_401(stack, box):
    ws = WSS(stack, pty_path(box))
    try:
        assert_refused(ws, 401, "unauthorized")
    finally:
        ws.close()


def test_bad_key_is_403(stack, box):
    ws = WSS(stack, pty_path(box, "?api_key=orc_nope_nope"))
    try:
        assert_refused(ws, 403, "forbidden")
    finally:
        ws.close()


def pty_opens(stack, sid):
    return int(stack.scalar("SELECT count(*) FROM events WHERE kind = 'pty.open'"
                            " AND sandbox_id = '%s'" % sid))


def test_a_session_is_recorded_and_a_refusal_is_not(stack, admin, box):
    before = pty_opens(stack, box)
    rid = "pty-%s" % os.urandom(6).hex()
    ws = WSS(stack, pty_path(box), headers={"X-API-Key": stack.admin_key, "X-Request-ID": rid})
    try:
        assert_upgraded(ws)
        run_shell(ws)
    finally:
        ws.close()
    assert pty_opens(stack, box) == before + 1
    assert stack.scalar("SELECT request_id FROM events WHERE kind = 'pty.open'"
                        " AND sandbox_id = '%s' ORDER BY id DESC LIMIT 1" % box) == rid
    key = stack.new_tenant_key("pty-rec")
    ws = WSS(stack, pty_path(box), headers={"X-API-Key": key})
    try:
        assert_refused(ws, 404, "not_found")
    finally:
        ws.close()
    assert pty_opens(stack, box) == before + 1
    lines = [json.loads(x) for x in admin.get(
        "%s/v1/sandboxes/%s/trajectory" % (stack.url, box)).text.splitlines()]
    assert any(x.get("type") == "event" and x.get("kind") == "pty.open" for x in lines), lines


def test_another_tenants_sandbox_is_404(stack, box):
    key = stack.new_tenant_key("pty-other")
    for kw in ({"headers": {"X-API-Key": key}}, {"protocols": ["api_key." + key]}):
        ws = WSS(stack, pty_path(box), **kw)
        try:
            assert_refused(ws, 404, "not_found")
        finally:
            ws.close()


def test_unknown_sandbox_is_404(stack):
    ws = WSS(stack, pty_path("no-such-box", "?api_key=" + stack.admin_key))
    try:
        assert_refused(ws, 404, "not_found")
    finally:
        ws.close()


def test_without_upgrade_is_426_json(stack, box):
    ws = WSS(stack, pty_path(box), headers={"X-API-Key": stack.admin_key}, upgrade=False)
    try:
        assert_refused(ws, 426, "invalid")
    finally:
        ws.close()


def test_other_methods_are_405(stack, admin, box):
    r = admin.post(stack.url + pty_path(box))
    assert r.status_code == 405, r.text
    assert set(r.json()) == ERROR_SHAPE
