"""Revoking a key ends what it opened (issue 19, item 10).

nginx proxies the PTY WebSocket and raw downloads straight to the sandbox's
agent once /_auth_agent accepted the key, so a revocation must reach the
agents: DELETE /v1/keys/{id} ends that key's open PTY sessions (the shell
and its processes too), and the key cannot attach again, while another key
of the same tenant keeps its session. The client is python3-websocket, not
ours.
"""
import base64
import json
import struct
import subprocess
import time

import pytest
import websocket  # python3-websocket

from stack import PSQL

TENANT = "revoke-t"


def wss(stack, sid):
    return "wss://%s/v1/sandboxes/%s/exec/pty" % (stack.url.split("://", 1)[1], sid)


def connect(stack, sid, key):
    return websocket.create_connection(wss(stack, sid), timeout=60, header=["X-API-Key: " + key],
                                       sslopt={"ca_certs": stack.cacert})


def send_stdin(ws, text):
    ws.send(json.dumps({"type": "stdin", "data": base64.b64encode(text.encode()).decode()}))


def read_until(ws, text, seconds=60):
    out, end = "", time.monotonic() + seconds
    while text not in out:
        assert time.monotonic() < end, "no %r in %r" % (text, out)
        m = json.loads(ws.recv())
        assert m["type"] in ("ready", "stdout"), (m, out)
        if m["type"] == "stdout":
            out += base64.b64decode(m["data"]).decode(errors="replace")
    return out


def open_shell(stack, sid, key):
    ws = connect(stack, sid, key)
    ws.send(json.dumps({"type": "init", "cmd": ["/bin/sh"], "rows": 24, "cols": 80}))
    send_stdin(ws, "echo up-$((6*7))\n")
    read_until(ws, "up-42")
    return ws


def closed_within(ws, seconds):
    """The close code once the server ends the socket (None: ended without
    a close frame); fails when it is still open after seconds."""
    end = time.monotonic() + seconds
    ws.settimeout(5)
    while time.monotonic() < end:
        try:
            op, data = ws.recv_data(control_frame=True)
        except websocket.WebSocketTimeoutException:
            continue
        except (websocket.WebSocketConnectionClosedException, ConnectionError, OSError):
            return None
        if op == websocket.ABNF.OPCODE_CLOSE:
            return struct.unpack("!H", data[:2])[0] if len(data) >= 2 else None
    pytest.fail("the PTY socket is still open %d s after its key was revoked" % seconds)


def new_key(stack, admin):
    stack.new_tenant_key(TENANT)     # the tenant
    r = admin.post(stack.url + "/v1/keys", json={"tenant": TENANT, "name": "revoke-test"})
    assert r.status_code == 201, r.text
    return r.json()


def processes(stack, session, sid):
    """The command lines of every process in the sandbox."""
    r = session.post("%s/v1/sandboxes/%s/exec" % (stack.url, sid), json={
        "command": "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done",
        "wait": True})
    assert r.status_code == 200, r.text
    return r.json()["stdout"]


def test_revoking_a_key_ends_its_pty_sessions(stack, admin):
    doomed, kept = new_key(stack, admin), new_key(stack, admin)
    mine = stack.session(key=kept["key"])
    sid = stack.new_sandbox(mine)
    try:
        ws = open_shell(stack, sid, doomed["key"])
        other = open_shell(stack, sid, kept["key"])
        send_stdin(ws, "(setsid sleep 4243 &); sleep 4242\n")
        deadline = time.monotonic() + 60
        while not all(p in processes(stack, mine, sid) for p in ("sleep 4242", "sleep 4243")):
            assert time.monotonic() < deadline, "the session's sleep never started"
            time.sleep(0.2)

        r = admin.delete("%s/v1/keys/%s" % (stack.url, doomed["id"]))
        assert r.status_code == 200 and r.json()["revoked"] is True, r.text

        code = closed_within(ws, 60)
        assert code == 1008, code      # policy violation: "the API key was revoked"
        ws.close()
        # The session's processes went with it.
        deadline = time.monotonic() + 60
        while any(p in processes(stack, mine, sid) for p in ("sleep 4242", "sleep 4243")):
            assert time.monotonic() < deadline, "the revoked key's shell (or what it setsid'd) still runs"
            time.sleep(0.5)
        # The key cannot open a new session.
        with pytest.raises(websocket.WebSocketBadStatusException) as e:
            connect(stack, sid, doomed["key"])
        assert e.value.status_code == 403
        # Another key of the tenant keeps its own.
        send_stdin(other, "echo still-$((7*6))\n")
        read_until(other, "still-42")
        other.close()
    finally:
        mine.delete("%s/v1/sandboxes/%s" % (stack.url, sid))
        admin.delete("%s/v1/keys/%s" % (stack.url, kept["id"]))


def ndjson(response):
    for line in response.iter_lines():
        if line:
            yield json.loads(line)


def test_revoking_a_key_ends_the_streams_the_api_holds_for_it(stack, admin):
    """A streaming exec and GET /jobs/{id}/stream of the key end with an
    error line once it is revoked; the job itself runs on, readable by
    another key of the tenant."""
    doomed, kept = new_key(stack, admin), new_key(stack, admin)
    mine, theirs = stack.session(key=kept["key"]), stack.session(key=doomed["key"])
    sid = stack.new_sandbox(mine)
    try:
        r = mine.post("%s/v1/sandboxes/%s/exec" % (stack.url, sid),
                      json={"command": "sleep 300", "wait": False})
        assert r.status_code in (200, 202), r.text
        quiet = r.json()["job_id"]
        follow = theirs.get("%s/v1/jobs/%s/stream" % (stack.url, quiet), stream=True, timeout=120)
        assert follow.status_code == 200, follow.text
        follow_lines = ndjson(follow)
        assert next(follow_lines)["type"] == "job"
        ticking = theirs.post("%s/v1/sandboxes/%s/exec" % (stack.url, sid), stream=True, timeout=120,
                              json={"command": "for i in $(seq 150); do echo tick $i; sleep 0.2; done",
                                    "stream": True})
        assert ticking.status_code == 200, ticking.text
        tick_lines = ndjson(ticking)
        assert next(tick_lines)["type"] == "job"
        assert next(tick_lines)["type"] == "stdout"     # it runs

        r = admin.delete("%s/v1/keys/%s" % (stack.url, doomed["id"]))
        assert r.status_code == 200, r.text

        tail = [m for m in follow_lines]       # ends within the requests timeout, or fails
        assert tail and tail[-1] == {"type": "error", "error": "the API key was revoked"}, tail
        tail = [m for m in tick_lines]
        assert tail[-1] == {"type": "error", "error": "the API key was revoked"}, tail[-3:]
        assert not [m for m in tail if m["type"] == "exit"], tail[-3:]
        # The jobs are the tenant's still: the other key reads them.
        r = mine.get("%s/v1/jobs/%s" % (stack.url, quiet))
        assert r.status_code == 200 and r.json()["status"] in ("queued", "running"), r.text
    finally:
        mine.delete("%s/v1/sandboxes/%s" % (stack.url, sid))
        admin.delete("%s/v1/keys/%s" % (stack.url, kept["id"]))


def test_a_revocation_the_listener_missed_still_ends_the_sessions(stack, admin):
    """The api's notification connection is cut and the key revoked before
    it is back (one transaction): on reconnecting the api tells the agents
    of the keys revoked meanwhile."""
    doomed, kept = new_key(stack, admin), new_key(stack, admin)
    mine = stack.session(key=kept["key"])
    sid = stack.new_sandbox(mine)
    try:
        ws = open_shell(stack, sid, doomed["key"])
        # The listener cannot come back (no new connections to the
        # database) until the key is revoked on a connection opened before;
        # only the listener runs these queries (pool connections never LISTEN).
        def psql(db, *sql):
            r = subprocess.run([PSQL, stack.database_url.replace("dbname=orchard", "dbname=" + db),
                                "-XAtq", "-v", "ON_ERROR_STOP=1"] + [a for q in sql for a in ("-c", q)],
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            return r.stdout.split()
        held = subprocess.Popen([PSQL, stack.database_url, "-XAtq", "-v", "ON_ERROR_STOP=1"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            held.stdin.write("SELECT 'held';\n")
            held.stdin.flush()
            assert held.stdout.readline().strip() == "held"
            psql("postgres", "ALTER DATABASE orchard ALLOW_CONNECTIONS false")
            cut = psql("postgres", "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))"
                       " FROM pg_stat_activity WHERE datname = 'orchard' AND"
                       " query LIKE 'LISTEN %'")
            assert cut == ["1"], cut      # the listener's connection was cut
            time.sleep(1)
            held.stdin.write("UPDATE api_keys SET revoked_at = now() WHERE id = %d;\n" % doomed["id"])
            held.stdin.close()
            assert held.wait(timeout=60) == 0
        finally:
            psql("postgres", "ALTER DATABASE orchard ALLOW_CONNECTIONS true")
            if held.poll() is None:
                held.kill()
                held.wait()
        code = closed_within(ws, 90)
        assert code == 1008, code      # policy violation: "the API key was revoked"
        ws.close()
    finally:
        mine.delete("%s/v1/sandboxes/%s" % (stack.url, sid))
        admin.delete("%s/v1/keys/%s" % (stack.url, kept["id"]))


def test_a_used_key_records_last_used_at(stack, admin):
    """auth.c writes a used key's last_used_at itself (not the listener)."""
    k = new_key(stack, admin)

    def listed():
        r = admin.get(stack.url + "/v1/keys", params={"tenant": TENANT})
        assert r.status_code == 200, r.text
        return [x for x in r.json()["keys"] if x["id"] == k["id"]][0]
    try:
        assert listed()["last_used_at"] is None
        r = stack.session(key=k["key"]).get(stack.url + "/v1/sandboxes")
        assert r.status_code == 200, r.text
        deadline = time.monotonic() + 60
        while listed()["last_used_at"] is None:
            assert time.monotonic() < deadline, "last_used_at was never written"
            time.sleep(0.5)
    finally:
        admin.delete("%s/v1/keys/%s" % (stack.url, k["id"]))
