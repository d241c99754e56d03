"""Hostile input (issue 9, item 4): a table of requests an attacker or a
broken client could send, against the real stack. Each must get its
expected 4xx with the JSON error shape {detail, code, request_id} (or, for
protocol-level garbage and bad WebSocket frames, a clean close), and for the
whole module:

  - nothing changed in the database: the row counts of sandboxes, jobs,
    tenants, api_keys (and revoked ones), ready sandboxes, and of events
    other than those the API records on purpose: a change the sandbox
    refused is an event with `success: false` (docs/openapi.yaml "Files and
    git"), and the WebSocket cases do open PTY sessions (`pty.*`) before
    their bad frames;
  - no process died: api, controller and nginx keep their pids, and the
    sandboxes' agents still answer.

`pytest -s` prints the number of cases.
"""
import base64
import io
import json
import os
import socket
import ssl
import struct
import tarfile
import time
from urllib.parse import quote, urlparse

import pytest

from faults import agent_pid, alive, pid_of
import ws_client
from ws_client import Closed

ERROR_SHAPE = {"detail", "code", "request_id"}
BAD = (400, 422)            # "invalid": either is a fair answer to bad input
NOT_FOUND = (404,)
MiB = 1 << 20


# ---- the world the cases run in ------------------------------------------

class World:
    pass


def _ready_box(stack, s):
    r = s.post(stack.url + "/v1/sandboxes", json={"image": "host"})
    assert r.status_code in (200, 201), r.text
    sid = r.json()["sandbox_id"]
    assert stack.wait_ready(s, sid)["status"] == "ready"
    return sid


def _exec(stack, s, sid, cmd):
    r = s.post("%s/v1/sandboxes/%s/exec" % (stack.url, sid), json={"command": cmd, "wait": True})
    assert r.status_code == 200, r.text
    return r.json()


def db_counts(stack):
    row = stack.psql(
        "SELECT (SELECT count(*) FROM sandboxes), (SELECT count(*) FROM jobs),"
        " (SELECT count(*) FROM tenants), (SELECT count(*) FROM api_keys),"
        " (SELECT count(*) FROM api_keys WHERE revoked_at IS NOT NULL),"
        " (SELECT count(*) FROM events WHERE coalesce(data->>'success', '') <> 'false'"
        " AND kind NOT LIKE 'pty.%'),"
        " (SELECT count(*) FROM sandboxes WHERE state = 'ready')")[0]
    return dict(zip(("sandboxes", "jobs", "tenants", "api_keys", "revoked", "events", "ready"),
                    map(int, row)))


@pytest.fixture(scope="module")
def world(stack, admin, other):
    w = World()
    w.stack, w.admin, w.other = stack, admin, other
    w.box = _ready_box(stack, admin)
    w.obox = _ready_box(stack, other)
    w.job = _exec(stack, admin, w.box, "mkdir -p /workspace/d && ln -sfn /etc /workspace/etc-link"
                  " && ln -sfn ../../../.. /workspace/up-link && echo hi > /workspace/d/f")["job_id"]
    w.ojob = _exec(stack, other, w.obox, "echo theirs > /workspace/secret")["job_id"]
    w.user_key = stack.new_tenant_key("hostile-user")
    w.user = stack.session(key=w.user_key)
    revoked = stack.new_tenant_key("hostile-user")
    key_id = revoked.split("_")[1]
    r = admin.delete("%s/v1/keys/%s" % (stack.url, key_id))
    assert r.status_code == 200, r.text
    w.revoked = revoked
    w.pids = {n: pid_of(stack, n) for n in ("api", "controller", "nginx")}
    w.agents = {sid: agent_pid(stack, sid) for sid in (w.box, w.obox)}
    w.before = db_counts(stack)
    w.last_event = int(stack.scalar("SELECT coalesce(max(id), 0) FROM events"))
    yield w
    # -- the module's end: nothing written, nobody died --
    after = db_counts(stack)   # before the checks below write their own
    for name, pid in w.pids.items():
        assert pid_of(stack, name) == pid and alive(pid), "%s died or was replaced" % name
    for sid, pid in w.agents.items():
        assert alive(pid), "the agent of %s died" % sid
    assert _exec(stack, admin, w.box, "cat /workspace/d/f")["stdout"] == "hi\n"
    assert _exec(stack, other, w.obox, "cat /workspace/secret")["stdout"] == "theirs\n"
    new_events = stack.psql("SELECT kind, data FROM events WHERE id > %d AND"
                            " coalesce(data->>'success', '') <> 'false' AND kind NOT LIKE 'pty.%%'"
                            " ORDER BY id" % w.last_event)
    assert after == w.before, (w.before, after, new_events[:20])
    print("\nHOSTILE %d cases; database unchanged %s; api, controller, nginx and agents alive"
          % (hostile_count(), after))
    for sid in (w.box, w.obox):
        (admin if sid == w.box else other).delete("%s/v1/sandboxes/%s" % (stack.url, sid))


def session_for(w, who):
    if who == "admin":
        return w.admin
    if who == "other":
        return w.other
    if who == "user":
        return w.user
    if who == "revoked":
        return w.stack.session(key=w.revoked)
    if who == "revoked-bearer":
        return w.stack.session(key=w.revoked, bearer=True)
    if who == "none":
        return w.stack.anonymous()
    return w.stack.session(key=who)   # a literal (malformed) key


def assert_error(r, statuses):
    assert r.status_code in statuses, (r.status_code, r.text[:500])
    body = r.json()
    assert ERROR_SHAPE <= set(body), body
    assert body["detail"] and body["code"], body
    assert r.headers.get("X-Request-ID") == body["request_id"] or not body["request_id"], body
    return body


# ---- the table -------------------------------------------------------------
# (id, who, method, path, requests kwargs, expected statuses)
# path placeholders: {box} ours, {obox} the other tenant's, {job}, {ojob}

CASES = []


def case(name, who, method, path, statuses, **kw):
    CASES.append((name, who, method, path, kw, tuple(statuses)))


JSON = {"Content-Type": "application/json"}

# -- malformed JSON, to every route that takes a body
MALFORMED = [
    ("empty", b""), ("open-brace", b"{"), ("array", b"[]"), ("null", b"null"), ("number", b"123"),
    ("string", b'"str"'), ("single-quotes", b"{'image': 'host'}"), ("missing-value", b'{"a":}'),
    ("missing-colon", b'{"a" 1}'), ("trailing-comma", b'{"image":"host",}'),
    ("trailing-garbage", b'{"image":"host"} x'), ("nan", b'{"image":"host","cpu":NaN}'),
    ("bom-utf16", b"\xff\xfe{\x00}\x00"), ("nul-byte", b'{"image":"ho\x00st"}'),
    ("deep-arrays", b'{"a":' + b"[" * 20000 + b"]" * 20000 + b"}"),
    ("deep-objects", b'{"a":' * 5000 + b"1" + b"}" * 5000),
    ("unterminated-string", b'{"image":"host'), ("control-char", b'{"image":"ho\x01st"}'),
]
BODY_ROUTES = [
    ("create", "admin", "POST", "/v1/sandboxes"),
    ("exec", "admin", "POST", "/v1/sandboxes/{box}/exec"),
    ("upload", "admin", "POST", "/v1/sandboxes/{box}/files"),
    ("mkdir", "admin", "POST", "/v1/sandboxes/{box}/files/mkdir"),
    ("tenant", "admin", "POST", "/v1/tenants"),
    ("patch", "admin", "POST", "/v1/sandboxes/{box}/apply_patch"),
]
for rname, who, method, path in BODY_ROUTES:
    for bname, body in MALFORMED:
        case("malformed-%s-%s" % (rname, bname), who, method, path, BAD, data=body, headers=JSON)

# -- wrong types and bad values when creating a sandbox
BAD_CREATE = {
    "image-number": {"image": 5}, "image-list": {"image": []}, "image-object": {"image": {}},
    "image-bool": {"image": True}, "image-null": {"image": None}, "image-empty": {"image": ""},
    "cpu-word": {"image": "host", "cpu": "lots"}, "cpu-negative": {"image": "host", "cpu": -1},
    "cpu-list": {"image": "host", "cpu": []}, "cpu-huge": {"image": "host", "cpu": 1e300},
    "memory-word": {"image": "host", "memory": "16 furlongs"},
    "memory-negative": {"image": "host", "memory": -5}, "memory-bool": {"image": "host", "memory": True},
    "memory-overflow": {"image": "host", "memory": "99999999999999999999Gi"},
    "timeout-word": {"image": "host", "timeout": "soon"}, "timeout-negative": {"image": "host", "timeout": -1},
    "block-network-word": {"image": "host", "block_network": "yes"},
    "block-network-number": {"image": "host", "block_network": 1},
    "labels-string": {"image": "host", "labels": "x"}, "labels-list": {"image": "host", "labels": [1]},
    "labels-number-value": {"image": "host", "labels": {"a": 5}},
    "labels-empty-key": {"image": "host", "labels": {"": "x"}},
    "labels-long-key": {"image": "host", "labels": {"a" * 300: "b"}},
    "labels-bad-value": {"image": "host", "labels": {"a": "b c;"}},
    "env-string": {"image": "host", "env": "A=1"}, "env-number": {"image": "host", "env": {"A": 1}},
    "env-empty-name": {"image": "host", "env": {"": "x"}},
    "env-equals-name": {"image": "host", "env": {"A=B": "c"}},
    "env-nul": {"image": "host", "env": {"A": "b\u0000c"}},
    "id-upper": {"image": "host", "sandbox_id": "Bad_ID"},
    "id-long": {"image": "host", "sandbox_id": "a" * 64},
    "id-leading-dash": {"image": "host", "sandbox_id": "-x"},
    "id-trailing-dash": {"image": "host", "sandbox_id": "x-"},
    "id-empty": {"image": "host", "sandbox_id": ""}, "id-number": {"image": "host", "sandbox_id": 5},
    "id-traversal": {"image": "host", "sandbox_id": "../x"},
    "id-sql": {"image": "host", "sandbox_id": "x'; DROP TABLE sandboxes; --"},
    "id-unicode": {"image": "host", "sandbox_id": "s\u00e4ndbox"},
    "ttl-negative": {"image": "host", "ttl_seconds": -1},
    "ttl-word": {"image": "host", "ttl_seconds": "x"},
    "idle-timeout-word": {"image": "host", "idle_timeout_seconds": "x"},
    "workdir-relative": {"image": "host", "workdir": "../../x"},
    "workdir-number": {"image": "host", "workdir": 7},
    "image-sql": {"image": "host'; DROP TABLE sandboxes; --"},
    "id-lone-surrogate": {"image": "host", "sandbox_id": "a\ud800"},
}
for name, body in BAD_CREATE.items():
    case("create-" + name, "admin", "POST", "/v1/sandboxes", BAD, json=body)
case("create-image-megabyte", "admin", "POST", "/v1/sandboxes", BAD, json={"image": "a" * MiB})
case("create-label-megabyte", "admin", "POST", "/v1/sandboxes", BAD,
     json={"image": "host", "labels": {"a": "b" * MiB}})
case("create-non-utf8-image", "admin", "POST", "/v1/sandboxes", BAD,
     data=b'{"image": "ho\xff\xfest"}', headers=JSON)
case("create-overlong-utf8", "admin", "POST", "/v1/sandboxes", BAD,
     data=b'{"image": "\xc0\xafetc"}', headers=JSON)
case("create-cesu-surrogate", "admin", "POST", "/v1/sandboxes", BAD,
     data=b'{"image": "\xed\xa0\x80"}', headers=JSON)
case("create-idempotency-key-injection", "admin", "POST", "/v1/sandboxes", BAD,
     json={"image": 5}, headers={"Idempotency-Key": "'; DROP TABLE sandboxes; --"})
case("create-idempotency-key-too-long", "admin", "POST", "/v1/sandboxes", BAD,
     json={"image": "host"}, headers={"Idempotency-Key": "k" * 300})
case("create-idempotency-key-control", "admin", "POST", "/v1/sandboxes", BAD,
     json={"image": "host"}, headers={"Idempotency-Key": "a\tb"})

# -- wrong types and bad values for exec
BAD_EXEC = {
    "command-number": {"command": 5}, "command-empty-list": {"command": []},
    "command-list-number": {"command": ["echo", 1]}, "command-object": {"command": {}},
    "command-null": {"command": None}, "command-nul": {"command": "echo a\u0000b"},
    "argv-nul": {"command": ["echo", "a\u0000"]}, "command-bool": {"command": True},
    "timeout-negative": {"command": "true", "timeout_seconds": -1},
    "timeout-word": {"command": "true", "timeout_seconds": "x"},
    "timeout-huge": {"command": "true", "timeout_seconds": 1e10},
    "timeout-over-a-day": {"command": "true", "timeout_seconds": 86401},
    "env-string": {"command": "true", "env": "A=1"}, "env-number": {"command": "true", "env": {"A": 1}},
    "env-empty-name": {"command": "true", "env": {"": "v"}},
    "env-nul-value": {"command": "true", "env": {"A": "v\u0000w"}},
    "cwd-number": {"command": "true", "cwd": 5}, "cwd-empty": {"command": "true", "cwd": ""},
    "cwd-nul": {"command": "true", "cwd": "/a\u0000"},
    "wait-word": {"command": "true", "wait": "yes"},
    "login-shell-word": {"command": "true", "login_shell": "x"},
    "stdin-number": {"command": "true", "stdin": 5},
}
for name, body in BAD_EXEC.items():
    case("exec-" + name, "admin", "POST", "/v1/sandboxes/{box}/exec", BAD, json=dict(body, wait=True)
         if "wait" not in body else body)
case("exec-stdin-9mib", "admin", "POST", "/v1/sandboxes/{box}/exec", BAD + (413,),
     json={"command": "true", "stdin": "x" * (9 * MiB), "wait": True})
case("exec-non-utf8-command", "admin", "POST", "/v1/sandboxes/{box}/exec", BAD,
     data=b'{"command": "echo \xc3\x28", "wait": true}', headers=JSON)
case("exec-bad-idempotency-key", "admin", "POST", "/v1/sandboxes/{box}/exec", BAD,
     json={"command": "true"}, headers={"Idempotency-Key": "k" * 300})

# -- files: traversal, symlinks, the sandbox's own plumbing, bad queries
FILE_GETS = {
    "relative-traversal-shadow": ("../../etc/shadow", (403, 404)),
    "empty-path": ("", BAD),
    "nul-in-path": ("/workspace/a\x00b", BAD),
    "overlong-path": ("/" + "a" * 5000, BAD + (414,)),
    "shadow": ("/etc/shadow", (403, 404)),
    "missing": ("/workspace/nope", NOT_FOUND),
    "traversal-missing": ("/workspace/../../nope/x", NOT_FOUND),
    "a-directory": ("/workspace/d", BAD + (409,)),
    "through-symlink-shadow": ("/workspace/etc-link/shadow", (403, 404)),
    "host-root-through-proc": ("/proc/1/root/../../etc/shadow", (403, 404)),
}
for name, (path, st) in FILE_GETS.items():
    case("files-get-" + name, "admin", "GET", "/v1/sandboxes/{box}/files", st, params={"path": path})
    case("files-raw-get-" + name, "admin", "GET", "/v1/sandboxes/{box}/files/raw",
         st + ((409,) if name == "a-directory" else ()), params={"path": path})
case("files-get-no-path", "admin", "GET", "/v1/sandboxes/{box}/files", BAD)
case("files-stat-missing", "admin", "GET", "/v1/sandboxes/{box}/files/stat", NOT_FOUND,
     params={"path": "x/../../nope"})
case("files-list-nul", "admin", "GET", "/v1/sandboxes/{box}/files/list", BAD,
     params={"path": "/a\x00"})
case("files-list-missing", "admin", "GET", "/v1/sandboxes/{box}/files/list", NOT_FOUND,
     params={"path": "/workspace/nope"})

B64 = base64.b64encode(b"pwned").decode()
FILE_WRITES = {
    "empty-path": ({"path": "", "content": B64}, BAD),
    "path-number": ({"path": 5, "content": B64}, BAD),
    "content-not-base64": ({"path": "/workspace/x", "content": "%%%not base64%%%"}, BAD),
    "content-number": ({"path": "/workspace/x", "content": 5}, BAD),
    "no-content": ({"path": "/workspace/x"}, BAD),
    "mode-word": ({"path": "/workspace/x", "content": B64, "mode": "rwx"}, BAD),
    "mode-too-big": ({"path": "/workspace/x", "content": B64, "mode": "77777"}, BAD),
    "nul-in-path": ({"path": "/workspace/a\u0000b", "content": B64}, BAD),
}
for name, (body, st) in FILE_WRITES.items():
    case("files-upload-" + name, "admin", "POST", "/v1/sandboxes/{box}/files", st, json=body)
RAW_PUTS = {
    "empty": ("", BAD), "nul": ("/workspace/a\x00b", BAD),
    "overlong": ("/workspace/" + "a" * 5000, BAD + (414,)),
}
for name, (path, st) in RAW_PUTS.items():
    case("files-raw-put-" + name, "admin", "PUT", "/v1/sandboxes/{box}/files/raw", st,
         params={"path": path}, data=b"pwned")
case("files-raw-put-bad-mode", "admin", "PUT", "/v1/sandboxes/{box}/files/raw", BAD,
     params={"path": "/workspace/x", "mode": "9999"}, data=b"pwned")
case("files-delete-root", "admin", "DELETE", "/v1/sandboxes/{box}/files", BAD, params={"path": "/"})
case("files-delete-dotdot-root", "admin", "DELETE", "/v1/sandboxes/{box}/files", BAD,
     params={"path": "/workspace/../.."})
case("files-mkdir-over-a-file", "admin", "POST", "/v1/sandboxes/{box}/files/mkdir", (409,),
     json={"path": "/workspace/d/f"})
case("files-mkdir-number", "admin", "POST", "/v1/sandboxes/{box}/files/mkdir", BAD, json={"path": 1})
case("archive-get-missing", "admin", "GET", "/v1/sandboxes/{box}/archive", NOT_FOUND,
     params={"path": "/workspace/nope"})
case("archive-get-a-file", "admin", "GET", "/v1/sandboxes/{box}/archive", BAD + (409,),
     params={"path": "/workspace/d/f"})
case("git-diff-bad-path", "admin", "GET", "/v1/sandboxes/{box}/git/diff", BAD + NOT_FOUND,
     params={"path": "\x00"})
case("git-reset-ref-injection", "admin", "POST", "/v1/sandboxes/{box}/git/reset", BAD + NOT_FOUND,
     json={"path": "/workspace/nope", "ref": "HEAD; rm -rf /"})


def _tar(*members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name, kind, target in members:
            ti = tarfile.TarInfo(name)
            if kind == "file":
                ti.size = len(target)
                t.addfile(ti, io.BytesIO(target))
            elif kind == "symlink":
                ti.type, ti.linkname = tarfile.SYMTYPE, target
                t.addfile(ti)
            elif kind == "hardlink":
                ti.type, ti.linkname = tarfile.LNKTYPE, target
                t.addfile(ti)
            elif kind == "device":
                ti.type, ti.devmajor, ti.devminor = tarfile.CHRTYPE, 1, 3
                t.addfile(ti)
    return buf.getvalue()


TAR_SLIPS = {
    "dotdot": _tar(("../../../tmp/slip", "file", b"x")),
    "absolute": _tar(("/tmp/abs-slip", "file", b"x")),
    "symlink-then-write": _tar(("l", "symlink", "/etc"), ("l/evil", "file", b"x")),
    "symlink-dotdot": _tar(("u", "symlink", "../../.."), ("u/tmp/evil", "file", b"x")),
    "hardlink-outside": _tar(("h", "hardlink", "/etc/passwd")),
    "hardlink-dotdot": _tar(("h", "hardlink", "../../etc/passwd")),
    "not-a-tar": b"this is not a tar archive at all" * 40,
    "truncated": _tar(("f", "file", b"y" * 5000))[:700],
}
for name, body in TAR_SLIPS.items():
    case("archive-put-" + name, "admin", "PUT", "/v1/sandboxes/{box}/archive", BAD,
         params={"path": "/workspace/unpack-" + name}, data=body)
case("archive-put-into-symlink", "admin", "PUT", "/v1/sandboxes/{box}/archive", BAD + (403, 409),
     params={"path": "/workspace/etc-link"}, data=_tar(("evil", "file", b"x")))
case("upload-through-symlink-to-etc", "admin", "POST", "/v1/sandboxes/{box}/files", (400, 403, 409),
     json={"path": "/workspace/etc-link/evil", "content": B64})
case("raw-put-through-symlink-to-etc", "admin", "PUT", "/v1/sandboxes/{box}/files/raw", (400, 403, 409),
     params={"path": "/workspace/etc-link/evil"}, data=b"x")
case("upload-read-only-etc", "admin", "POST", "/v1/sandboxes/{box}/files", (400, 403, 409),
     json={"path": "/etc/passwd", "content": B64})
case("upload-proc", "admin", "POST", "/v1/sandboxes/{box}/files", (400, 403, 404, 409),
     json={"path": "/proc/1/mem", "content": B64})
case("upload-agent-socket", "admin", "POST", "/v1/sandboxes/{box}/files", (400, 403, 409),
     json={"path": "/run/orchard/agent.sock", "content": B64})
case("delete-agent-socket", "admin", "DELETE", "/v1/sandboxes/{box}/files", (400, 403, 409),
     params={"path": "/run/orchard/agent.sock"})
case("delete-agent-binary", "admin", "DELETE", "/v1/sandboxes/{box}/files", (400, 403, 409),
     params={"path": "/run/orchard-agent"})
case("mkdir-in-sys", "admin", "POST", "/v1/sandboxes/{box}/files/mkdir", (400, 403, 404, 409),
     json={"path": "/sys/evil"})

# -- huge uploads
# POST /files takes bodies up to 96 MiB (a 64 MiB file in base64), every
# other JSON body up to 16 MiB (docs/openapi.yaml)
case("huge-json-97mib", "admin", "POST", "/v1/sandboxes/{box}/files", (413,),
     data=b'{"path": "/workspace/big", "content": "' + b"A" * (97 * MiB) + b'"}', headers=JSON)
case("huge-create-65mib", "admin", "POST", "/v1/sandboxes", (413,),
     data=b'{"image": "host", "x": "' + b"a" * (65 * MiB) + b'"}', headers=JSON)
case("huge-upload-66mib-in-base64", "admin", "POST", "/v1/sandboxes/{box}/files", (413,) + BAD,
     data=b'{"path": "/workspace/big", "content": "' + b"A" * (88 * MiB) + b'"}', headers=JSON)
case("huge-json-17mib-not-a-file", "admin", "POST", "/v1/sandboxes/{box}/files/mkdir", (413,) + BAD,
     data=b'{"path": "/workspace/big", "x": "' + b"A" * (17 * MiB) + b'"}', headers=JSON)

# -- SQL injection strings where the API reads text
SQLI = ["' OR '1'='1", "'; DROP TABLE jobs; --", "\\'; SELECT pg_sleep(5); --", "1 OR 1=1",
        "%' OR 1=1 --", "$1", "') UNION SELECT * FROM api_keys --"]
for i, s in enumerate(SQLI):
    case("sqli-sandbox-path-%d" % i, "admin", "GET", "/v1/sandboxes/" + quote(s, safe=""), NOT_FOUND)
    case("sqli-job-path-%d" % i, "admin", "GET", "/v1/jobs/" + quote(s, safe=""), NOT_FOUND)
    case("sqli-label-filter-%d" % i, "admin", "GET", "/v1/sandboxes", BAD, params={"label": s})
    case("sqli-status-filter-%d" % i, "admin", "GET", "/v1/sandboxes", BAD, params={"status": s})
    case("sqli-tenant-name-%d" % i, "admin", "POST", "/v1/tenants", BAD, json={"name": s})
    case("sqli-cursor-%d" % i, "admin", "GET", "/v1/sandboxes/{box}/jobs", BAD, params={"cursor": s})
case("sqli-jobs-limit", "admin", "GET", "/v1/sandboxes/{box}/jobs", BAD, params={"limit": "1;DROP"})
case("sqli-keys-tenant", "admin", "GET", "/v1/keys", BAD + NOT_FOUND, params={"tenant": "x' OR 1=1"})

# -- invalid ids
for name, sid in {"upper": "UPPER", "underscore": "a_b", "nul": "%00", "long": "a" * 300,
                  "dot": "a.b", "encoded-slash": "a%2Fb", "unicode": "%C3%A4", "space": "a%20b",
                  "dashes": "-a-", "semicolon": "a;b"}.items():
    case("id-sandbox-" + name, "admin", "GET", "/v1/sandboxes/" + sid, NOT_FOUND + BAD)
    case("id-exec-" + name, "admin", "POST", "/v1/sandboxes/%s/exec" % sid, NOT_FOUND + BAD,
         json={"command": "true"})
    case("id-job-" + name, "admin", "GET", "/v1/jobs/" + sid, NOT_FOUND + BAD)
for name, kid in {"negative": "-1", "word": "abc", "huge": "9" * 30, "zero": "0"}.items():
    case("id-key-" + name, "admin", "DELETE", "/v1/keys/" + kid, NOT_FOUND + BAD)
case("id-tenant-upper", "admin", "PATCH", "/v1/tenants/NOT_A_NAME", NOT_FOUND + BAD,
     json={"max_sandboxes": 1})
case("wait-timeout-word", "admin", "GET", "/v1/sandboxes/{box}/wait", BAD, params={"timeout": "x"})
case("wait-timeout-negative", "admin", "GET", "/v1/sandboxes/{box}/wait", BAD, params={"timeout": "-5"})
case("job-wait-timeout-huge", "admin", "GET", "/v1/jobs/{job}/wait", BAD, params={"timeout": "1e99"})
case("list-limit-negative", "admin", "GET", "/v1/sandboxes", BAD, params={"limit": "-1"})
case("list-limit-huge", "admin", "GET", "/v1/sandboxes", BAD, params={"limit": "99999999999"})

# -- another tenant's ids (404, never 403: their existence is not revealed)
OTHERS = [
    ("get", "GET", "/v1/sandboxes/{obox}", {}),
    ("wait", "GET", "/v1/sandboxes/{obox}/wait", {"params": {"timeout": 1}}),
    ("heartbeat", "POST", "/v1/sandboxes/{obox}/heartbeat", {}),
    ("exec", "POST", "/v1/sandboxes/{obox}/exec", {"json": {"command": "cat /workspace/secret"}}),
    ("jobs", "GET", "/v1/sandboxes/{obox}/jobs", {}),
    ("job", "GET", "/v1/jobs/{ojob}", {}),
    ("job-wait", "GET", "/v1/jobs/{ojob}/wait", {}),
    ("job-cancel", "POST", "/v1/jobs/{ojob}/cancel", {}),
    ("trajectory", "GET", "/v1/sandboxes/{obox}/trajectory", {}),
    ("files-get", "GET", "/v1/sandboxes/{obox}/files", {"params": {"path": "/workspace/secret"}}),
    ("files-raw-get", "GET", "/v1/sandboxes/{obox}/files/raw", {"params": {"path": "/workspace/secret"}}),
    ("files-raw-put", "PUT", "/v1/sandboxes/{obox}/files/raw",
     {"params": {"path": "/workspace/secret"}, "data": b"mine"}),
    ("files-upload", "POST", "/v1/sandboxes/{obox}/files",
     {"json": {"path": "/workspace/secret", "content": B64}}),
    ("files-delete", "DELETE", "/v1/sandboxes/{obox}/files", {"params": {"path": "/workspace/secret"}}),
    ("files-list", "GET", "/v1/sandboxes/{obox}/files/list", {"params": {"path": "/workspace"}}),
    ("files-stat", "GET", "/v1/sandboxes/{obox}/files/stat", {"params": {"path": "/workspace/secret"}}),
    ("mkdir", "POST", "/v1/sandboxes/{obox}/files/mkdir", {"json": {"path": "/workspace/x"}}),
    ("archive-get", "GET", "/v1/sandboxes/{obox}/archive", {"params": {"path": "/workspace"}}),
    ("archive-put", "PUT", "/v1/sandboxes/{obox}/archive",
     {"params": {"path": "/workspace"}, "data": _tar(("secret", "file", b"mine"))}),
    ("git-diff", "GET", "/v1/sandboxes/{obox}/git/diff", {"params": {"path": "/workspace"}}),
    ("git-reset", "POST", "/v1/sandboxes/{obox}/git/reset", {"json": {"path": "/workspace"}}),
    ("apply-patch", "POST", "/v1/sandboxes/{obox}/apply_patch", {"json": {"patch": "x"}}),
]
for name, method, path, kw in OTHERS:
    case("other-tenant-" + name, "admin", method, path, NOT_FOUND, **kw)
    case("other-tenant-unprefixed-" + name, "admin", method, path.replace("/v1", "", 1), NOT_FOUND, **kw)

# -- keys: revoked, malformed, a user key on admin routes, spoofed identity headers
for name, method, path, kw in [
        ("list", "GET", "/v1/sandboxes", {}), ("create", "POST", "/v1/sandboxes", {"json": {"image": "host"}}),
        ("exec", "POST", "/v1/sandboxes/{box}/exec", {"json": {"command": "true"}}),
        ("raw-get", "GET", "/v1/sandboxes/{box}/files/raw", {"params": {"path": "/workspace/d/f"}}),
        ("raw-put", "PUT", "/v1/sandboxes/{box}/files/raw", {"params": {"path": "/workspace/x"}, "data": b"x"}),
        ("tenants", "GET", "/v1/tenants", {}), ("resources", "GET", "/v1/resources", {})]:
    case("revoked-key-" + name, "revoked", method, path, (403,), **kw)
    case("revoked-bearer-" + name, "revoked-bearer", method, path, (403,), **kw)
    case("no-key-" + name, "none", method, path, (401,), **kw)
for name, key in {"garbage": "garbage", "three-parts": "orc_abc_def", "long": "k" * 8000,
                  "sql": "orc_' OR 1=1 --_x", "empty-parts": "__", "latin1": "orc_\xe9_\xe9"}.items():
    case("bad-key-" + name, key, "GET", "/v1/sandboxes", (400, 403))
for name, method, path, kw in [
        ("tenants", "GET", "/v1/tenants", {}), ("keys", "GET", "/v1/keys", {}),
        ("tenant-create", "POST", "/v1/tenants", {"json": {"name": "pwned"}}),
        ("key-revoke", "DELETE", "/v1/keys/1", {})]:
    case("user-key-admin-route-" + name, "user", method, path, (403,), **kw)
    case("spoofed-role-admin-route-" + name, "user", method, path, (403,),
         headers={"X-Orchard-Role": "admin", "X-Orchard-Tenant": "1", "X-Orchard-Key": "1"}, **kw)
case("spoofed-tenant-reads-other", "user", "GET", "/v1/sandboxes/{obox}", NOT_FOUND,
     headers={"X-Orchard-Tenant": "2"})
case("spoofed-agent-upstream", "user", "GET", "/v1/sandboxes/{box}/files/raw", NOT_FOUND,
     params={"path": "/etc/hostname"},
     headers={"X-Orchard-Agent-Upstream": "http://127.0.0.1:1", "X-Orchard-Agent-Token": "x"})
case("auth-agent-from-outside", "admin", "GET", "/v1/_auth_agent", NOT_FOUND)
case("auth-from-outside", "admin", "GET", "/_auth", NOT_FOUND + (403,))


@pytest.mark.parametrize("name,who,method,path,kw,statuses", CASES, ids=[c[0] for c in CASES])
def test_hostile_request(world, name, who, method, path, kw, statuses):
    w = world
    url = w.stack.url + path.format(box=w.box, obox=w.obox, job=w.job, ojob=w.ojob)
    r = session_for(w, who).request(method, url, timeout=60, **kw)
    assert_error(r, statuses)


# ---- protocol level: raw bytes over TLS -------------------------------------

def raw_http(stack, data, pause_after=None, close_early=False, timeout=15):
    """Send bytes; (status or None, head, body). close_early: send data and
    hang up without reading (a client that gives up mid-request)."""
    u = urlparse(stack.url)
    ctx = ssl.create_default_context(cafile=stack.cacert)
    s = ctx.wrap_socket(socket.create_connection((u.hostname, u.port), timeout=timeout),
                        server_hostname="localhost")
    try:
        s.sendall(data)
        if close_early:
            return None, b"", b""
        buf = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (socket.timeout, ConnectionError, ssl.SSLError):
                break
            if not chunk:
                break
            buf += chunk
            if b"\r\n\r\n" in buf:
                head, body = buf.split(b"\r\n\r\n", 1)
                n = [int(l.split(b":")[1]) for l in head.split(b"\r\n")
                     if l.lower().startswith(b"content-length:")]
                if n and len(body) >= n[0]:
                    break
        if not buf:
            return None, b"", b""
        if not buf.startswith(b"HTTP/1."):
            return "no status line", buf, b""     # an HTTP/0.9 answer: body only
        head, _, body = buf.partition(b"\r\n\r\n")
        return int(head.split(b" ")[1]), head, body
    finally:
        s.close()


def _req(w, method, path, headers=(), body=b"", key=True):
    lines = ["%s %s HTTP/1.1" % (method, path), "Host: localhost", "Connection: close"]
    if key:
        lines.append("X-API-Key: " + w.stack.admin_key)
    out = "\r\n".join(lines).encode() + b"\r\n"
    for h in headers:
        out += h + b"\r\n"
    return out + b"\r\n" + body


RAW = {
    "crlf-in-request-id": (lambda w: _req(w, "GET", "/v1/sandboxes",
                                          [b"X-Request-ID: a\rX-Injected: 1"]), (400,)),
    "nul-in-header": (lambda w: _req(w, "GET", "/v1/sandboxes", [b"X-Foo: a\x00b"]), (400,)),
    "header-20k": (lambda w: _req(w, "GET", "/v1/sandboxes", [b"X-Big: " + b"a" * 20000]), (400,)),
    "cl-and-te": (lambda w: _req(w, "POST", "/v1/sandboxes",
                                 [b"Content-Length: 5", b"Transfer-Encoding: chunked"],
                                 b"0\r\n\r\n"), (400,)),
    "two-content-lengths": (lambda w: _req(w, "POST", "/v1/sandboxes",
                                           [b"Content-Length: 2", b"Content-Length: 20"], b"{}"), (400,)),
    "negative-content-length": (lambda w: _req(w, "POST", "/v1/sandboxes",
                                               [b"Content-Length: -1"]), (400,)),
    "bad-chunk-size": (lambda w: _req(w, "POST", "/v1/sandboxes", [b"Transfer-Encoding: chunked"],
                                      b"zz\r\n{}\r\n0\r\n\r\n"), (400,)),
    "obs-fold": (lambda w: _req(w, "GET", "/v1/sandboxes", [b"X-Foo: a", b" folded"]), (400, 200)),
    "bad-method": (lambda w: _req(w, "G\x01T", "/v1/sandboxes"), (400,)),
    "http-0.9": (lambda w: b"GET /v1/sandboxes\r\n\r\n", (None, 400, "no status line")),
    "bad-version": (lambda w: b"GET /v1/sandboxes HTTP/9.9\r\nHost: x\r\n\r\n", (400, 505)),
    "absolute-uri-other-host": (lambda w: _req(w, "GET", "http://169.254.169.254/latest/meta-data"),
                                (404,)),
    "dotdot-path": (lambda w: _req(w, "GET", "/v1/sandboxes/../../../../etc/passwd"), (400, 404)),
    "encoded-dotdot-path": (lambda w: _req(w, "GET", "/v1/sandboxes/%2e%2e/%2e%2e/etc/passwd"),
                            (400, 404)),
    "uri-10k": (lambda w: _req(w, "GET", "/v1/sandboxes?x=" + "a" * 20000), (414, 400)),
    "x-orchard-tenant-spoof-no-key": (lambda w: _req(w, "GET", "/v1/sandboxes",
                                                     [b"X-Orchard-Tenant: 1", b"X-Orchard-Role: admin"],
                                                     key=False), (401,)),
}


@pytest.mark.parametrize("name", sorted(RAW))
def test_hostile_raw_request(world, name):
    build, statuses = RAW[name]
    status, head, body = raw_http(world.stack, build(world))
    assert status in statuses, (status, head[:300], body[:300])
    if isinstance(status, int) and 400 <= status < 500:
        b = json.loads(body)
        assert ERROR_SHAPE <= set(b), b
    # an injected header never comes back
    assert b"X-Injected" not in head


SLOW = {
    # a body that stops half way and the client hangs up: nothing happens
    "create-cut-body": lambda w: _req(w, "POST", "/v1/sandboxes", [b"Content-Type: application/json",
                                                                   b"Content-Length: 1000"],
                                      b'{"image": "ho'),
    "exec-cut-body": lambda w: _req(w, "POST", "/v1/sandboxes/%s/exec" % w.box,
                                    [b"Content-Type: application/json", b"Content-Length: 500"],
                                    b'{"command": "echo pwned > /workspace/pwned", "wa'),
    "raw-put-cut-body": lambda w: _req(w, "PUT", "/v1/sandboxes/%s/files/raw?path=/workspace/cut" % w.box,
                                       [b"Content-Length: 1000000"], b"x" * 1000),
    "archive-put-cut-body": lambda w: _req(w, "PUT", "/v1/sandboxes/%s/archive?path=/workspace/cut" % w.box,
                                           [b"Content-Length: 100000"], _tar(("a", "file", b"x" * 9000))[:4000]),
    "chunked-cut-body": lambda w: _req(w, "POST", "/v1/sandboxes", [b"Transfer-Encoding: chunked"],
                                       b"100\r\n{\"image\""),
    "headers-cut": lambda w: b"POST /v1/sandboxes HTTP/1.1\r\nHost: localhost\r\nX-API-K",
}


@pytest.mark.parametrize("name", sorted(SLOW))
def test_slow_and_cut_bodies(world, name):
    raw_http(world.stack, SLOW[name](world), close_early=True)
    time.sleep(0.3)
    assert not os.path.exists(os.path.join(world.stack.var, "sandboxes", world.box, "workspace", "pwned"))
    assert not os.path.exists(os.path.join(world.stack.var, "sandboxes", world.box, "workspace", "cut"))


def test_slow_body_that_completes_is_still_validated(world):
    """A body that trickles in (1 byte per 20 ms) is read whole, then judged."""
    body = b'{"image": 5}'
    u = urlparse(world.stack.url)
    ctx = ssl.create_default_context(cafile=world.stack.cacert)
    s = ctx.wrap_socket(socket.create_connection((u.hostname, u.port), timeout=30),
                        server_hostname="localhost")
    try:
        s.sendall(_req(world, "POST", "/v1/sandboxes", [b"Content-Type: application/json",
                                                        b"Content-Length: %d" % len(body)]))
        for i in range(len(body)):
            s.sendall(body[i:i + 1])
            time.sleep(0.02)
        buf = b""
        while b"\r\n\r\n" not in buf or not buf.rstrip().endswith(b"}"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    finally:
        s.close()
    head, _, rest = buf.partition(b"\r\n\r\n")
    assert int(head.split(b" ")[1]) in BAD, head
    assert ERROR_SHAPE <= set(json.loads(rest))


# ---- bad WebSocket frames: the session ends cleanly, the agent lives on ------

def _frame(opcode, payload, fin=True, mask=True, length=None):
    return ws_client.frame(opcode, payload, fin=fin, masked=mask, length=length)


def _json_frame(obj):
    return _frame(0x1, json.dumps(obj).encode())


WS_FRAMES = {
    "unmasked": [_frame(0x1, b'{"type":"init"}', mask=False)],
    "reserved-opcode": [_frame(0x3, b"x")],
    "reserved-control-opcode": [_frame(0xB, b"x")],
    "rsv-bits": [b"\xf1\x80" + os.urandom(4)],
    "invalid-json": [_frame(0x1, b"{not json")],
    "json-array": [_frame(0x1, b"[1,2,3]")],
    "unknown-type": [_json_frame({"type": "bogus"})],
    "no-type": [_json_frame({"cmd": ["/bin/sh"]})],
    "invalid-utf8-text": [_frame(0x1, b'{"type":"\xff\xfe"}')],
    "binary-frame": [_frame(0x2, b"\x00\x01\x02")],
    "fragmented-control": [_frame(0x9, b"ping", fin=False)],
    "control-too-long": [_frame(0x9, b"p" * 200)],
    "huge-length": [_frame(0x1, b"", length=1 << 62)],
    "continuation-first": [_frame(0x0, b"x")],
    "init-cmd-not-list": [_json_frame({"type": "init", "cmd": "sh", "rows": 24, "cols": 80})],
    "init-negative-size": [_json_frame({"type": "init", "cmd": ["/bin/sh"], "rows": -1, "cols": 99999})],
    "stdin-before-init": [_json_frame({"type": "stdin", "data": "aGkK"})],
    "stdin-bad-base64": [_json_frame({"type": "init", "cmd": ["/bin/sh"], "rows": 24, "cols": 80}),
                         _json_frame({"type": "stdin", "data": "%%%"})],
    "signal-bogus": [_json_frame({"type": "init", "cmd": ["/bin/sh"], "rows": 24, "cols": 80}),
                     _json_frame({"type": "signal", "signal": "SIGNOPE"})],
    "close-bad-code": [_frame(0x8, struct.pack("!H", 999))],
    "close-one-byte": [_frame(0x8, b"\x03")],
    "message-too-big": [_frame(0x1, b'{"type":"stdin","data":"' + b"A" * (2 * MiB) + b'"}')],
}


@pytest.mark.parametrize("name", sorted(WS_FRAMES))
def test_bad_websocket_frames(world, name):
    ws = ws_client.tls(world.stack, "/v1/sandboxes/%s/exec/pty" % world.box,
             headers={"X-API-Key": world.stack.admin_key})
    try:
        assert ws.status == 101, (ws.status, ws.buf)
        outcome = None
        try:
            for f in WS_FRAMES[name]:
                ws.s.sendall(f)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                m = ws.recv()
                if m.get("type") == "error":
                    outcome = "error message"
                    break
                if m.get("type") == "exit":
                    outcome = "exit"
                    break
        except Closed as c:
            outcome = "closed %s" % c.code
        except (ConnectionError, ssl.SSLError, socket.timeout, OSError) as e:
            outcome = "connection ended (%s)" % type(e).__name__
        assert outcome, "no error and no close for a bad frame"
    finally:
        ws.close()
    # the agent survived it
    assert alive(world.agents[world.box])


def test_websocket_handshake_garbage(world):
    """Versions and keys that are not RFC 6455: refused before the upgrade."""
    path = "/v1/sandboxes/%s/exec/pty" % world.box
    for headers in ({"Sec-WebSocket-Version": "8"},):
        ws = ws_client.tls(world.stack, path, headers=dict(headers, **{"X-API-Key": world.stack.admin_key}),
                 upgrade=False)
        try:
            assert 400 <= ws.status < 500, ws.status
            assert ERROR_SHAPE <= set(ws.body())
        finally:
            ws.close()
    ws = ws_client.tls(world.stack, path, headers={"X-API-Key": world.revoked})
    try:
        assert ws.status == 403 and ERROR_SHAPE <= set(ws.body())
    finally:
        ws.close()
    ws = ws_client.tls(world.stack, "/v1/sandboxes/%s/exec/pty" % world.obox,
             headers={"X-API-Key": world.stack.admin_key})
    try:
        assert ws.status == 404 and ERROR_SHAPE <= set(ws.body())
    finally:
        ws.close()


def hostile_count():
    """Every hostile request of this module (the table and the special ones)."""
    return len(CASES) + len(RAW) + len(SLOW) + len(WS_FRAMES) + 2
