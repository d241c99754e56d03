"""The PTY WebSocket through the whole stack (WSS -> nginx -> the sandbox's
agent), as docs/architecture.md ("PTY WebSocket") describes it: the key as
?api_key=, as the subprotocol api_key.<key> or as X-API-Key, and the
refusals, which are HTTP answers in our error shape before any upgrade.

Self-contained: the minimal RFC 6455 client of ws_client.py over TLS (no
websocket library).
"""
import base64
import hashlib
import json
import os
import time

import pytest

import ws_client
from ws_client import GUID, Closed
ERROR_SHAPE = {"detail", "code", "request_id"}


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
    ws = ws_client.tls(stack, pty_path(box, "?api_key=" + stack.admin_key))
    try:
        assert_upgraded(ws)
        assert ws.header("sec-websocket-protocol") is None
        out, code, close = run_shell(ws)
        assert "hi" in out and code == 3 and close == 1000, (out, code, close)
    finally:
        ws.close()


def test_key_as_subprotocol_is_accepted_back(stack, box):
    offer = "api_key." + stack.admin_key
    ws = ws_client.tls(stack, pty_path(box, v1=False), protocols=[offer, "other"])
    try:
        assert_upgraded(ws)
        # A client that offers subprotocols needs one of them selected.
        assert ws.header("sec-websocket-protocol") == offer
        out, code, close = run_shell(ws)
        assert "hi" in out and code == 3 and close == 1000, (out, code, close)
    finally:
        ws.close()


def test_key_in_x_api_key(stack, box):
    ws = ws_client.tls(stack, pty_path(box), headers={"X-API-Key": stack.admin_key})
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
    ws = ws_client.tls(stack, pty_path(box, "?session=%s&offset=0&api_key=%s" % ("0" * 32, stack.admin_key)))
    try:
        assert_refused(ws, 404, "not_found")
    finally:
        ws.close()
    ws = ws_client.tls(stack, pty_path(box, "?session=nothex&api_key=" + stack.admin_key))
    try:
        assert_refused(ws, 400, "invalid")
    finally:
        ws.close()


# ---- refusals: HTTP answers before the upgrade ----------------------------


def test_no_key_is_401(stack, box):
    ws = ws_client.tls(stack, pty_path(box))
    try:
        assert_refused(ws, 401, "unauthorized")
    finally:
        ws.close()


def test_bad_key_is_403(stack, box):
    ws = ws_client.tls(stack, pty_path(box, "?api_key=orc_nope_nope"))
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
    ws = ws_client.tls(stack, pty_path(box), headers={"X-API-Key": stack.admin_key, "X-Request-ID": rid})
    try:
        assert_upgraded(ws)
        run_shell(ws)
    finally:
        ws.close()
    assert pty_opens(stack, box) == before + 1
    assert stack.scalar("SELECT request_id FROM events WHERE kind = 'pty.open'"
                        " AND sandbox_id = '%s' ORDER BY id DESC LIMIT 1" % box) == rid
    key = stack.new_tenant_key("pty-rec")
    ws = ws_client.tls(stack, pty_path(box), headers={"X-API-Key": key})
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
        ws = ws_client.tls(stack, pty_path(box), **kw)
        try:
            assert_refused(ws, 404, "not_found")
        finally:
            ws.close()


def test_unknown_sandbox_is_404(stack):
    ws = ws_client.tls(stack, pty_path("no-such-box", "?api_key=" + stack.admin_key))
    try:
        assert_refused(ws, 404, "not_found")
    finally:
        ws.close()


def test_without_upgrade_is_426_json(stack, box):
    ws = ws_client.tls(stack, pty_path(box), headers={"X-API-Key": stack.admin_key}, upgrade=False)
    try:
        assert_refused(ws, 426, "invalid")
    finally:
        ws.close()


def test_other_methods_are_405(stack, admin, box):
    r = admin.post(stack.url + pty_path(box))
    assert r.status_code == 405, r.text
    assert set(r.json()) == ERROR_SHAPE
