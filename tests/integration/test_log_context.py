"""What the JSON-lines logs say about one request (docs/observability.md,
"Logs"): one access line per request in api.log, numbers and booleans as
JSON numbers and booleans, the request id and the W3C trace context from
nginx through orchard-api to the sandbox's agent.
"""
import json
import os
import re
import uuid

HEX32 = re.compile(r"[0-9a-f]{32}\Z")
HEX16 = re.compile(r"[0-9a-f]{16}\Z")
# Fields that are numbers wherever they appear; a string there is the old bug.
NUMERIC = ("status", "duration_ms", "pid", "bytes", "rows", "ms", "exit_code", "signal",
           "ms_since_launch", "create_ms", "wait_ms", "pods", "tenant_id", "key_id",
           "sandboxes", "jobs", "events")


def log_lines(path):
    with open(path, "rb") as f:
        return [json.loads(line) for line in f.read().decode().splitlines() if line]


def lines_of(stack, path, rid, min_count=1):
    """The lines of path with request_id rid, once there are min_count."""
    def find():
        found = [o for o in log_lines(path) if o.get("request_id") == rid]
        return found if len(found) >= min_count else None
    return stack.wait_for(find, timeout=30, what="%d log lines of %s in %s" % (min_count, rid, path))


def api_log(stack):
    return os.path.join(stack.var, "log", "api.log")


def agent_log(stack, sid):
    return os.path.join(stack.var, "sandboxes", sid, "agent.log")


def exec_with(stack, admin, sid, headers):
    r = admin.post("%s/sandboxes/%s/exec" % (stack.url, sid), json={"command": "echo hi", "wait": True},
                   headers=headers)
    assert r.status_code == 200 and r.json()["status"] == "succeeded", r.text
    return r


def access_line(stack, rid):
    lines = [o for o in lines_of(stack, api_log(stack), rid) if o["msg"] == "request"]
    assert len(lines) == 1, lines
    return lines[0]


def test_one_access_line_per_request_with_typed_fields(stack, admin, sandbox):
    rid = "acc-" + uuid.uuid4().hex
    exec_with(stack, admin, sandbox, {"X-Request-ID": rid})
    line = access_line(stack, rid)
    assert line["level"] == "info" and line["component"] == "api"
    assert line["method"] == "POST" and line["route"] == "/sandboxes/{id}/exec"
    assert line["path"] == "/sandboxes/%s/exec" % sandbox
    assert line["status"] == 200 and type(line["status"]) is int
    assert type(line["duration_ms"]) is int and line["duration_ms"] >= 0
    assert type(line["tenant_id"]) is int and type(line["key_id"]) is int
    assert HEX32.match(line["trace_id"]) and HEX16.match(line["span_id"])
    assert "parent_span_id" not in line          # the trace began at the api
    # The key check of this request is not a second info line.
    assert [o["msg"] for o in log_lines(api_log(stack)) if o.get("request_id") == rid
            and o["level"] != "debug"].count("request") == 1


def test_a_refused_request_has_its_auth_line(stack):
    rid = "refused-" + uuid.uuid4().hex
    s = stack.session(key="orch_nosuchkey_" + "0" * 32)
    assert s.get(stack.url + "/sandboxes", headers={"X-Request-ID": rid}).status_code in (401, 403)
    (line,) = lines_of(stack, api_log(stack), rid)
    assert line["msg"] == "auth request" and line["level"] == "info"
    assert line["path"] == "/_auth" and line["status"] in (401, 403)
    assert "0" * 32 not in json.dumps(line)


def test_the_request_id_and_trace_reach_the_agent(stack, admin, sandbox):
    rid = "agent-" + uuid.uuid4().hex
    trace, parent = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    exec_with(stack, admin, sandbox, {"X-Request-ID": rid,
                                      "traceparent": "00-%s-%s-01" % (trace, parent)})
    api = access_line(stack, rid)
    assert api["trace_id"] == trace and api["parent_span_id"] == parent
    assert api["span_id"] != parent
    agent = [o for o in lines_of(stack, agent_log(stack, sandbox), rid)
             if o["msg"] == "request" and o["path"] == "/exec"]
    assert len(agent) == 1, agent
    agent = agent[0]
    assert agent["component"] == "agent"
    assert agent["status"] == 200 and type(agent["duration_ms"]) is int
    assert agent["trace_id"] == trace
    assert agent["parent_span_id"] == api["span_id"]   # the api's span called it
    assert HEX16.match(agent["span_id"]) and agent["span_id"] != api["span_id"]


def test_a_missing_or_malformed_traceparent_starts_a_trace(stack, admin, sandbox):
    bad = ["00-%s-%s-01" % ("0" * 32, "1" * 16),        # all-zero trace id
           "00-%s-%s-01" % ("A" * 32, "1" * 16),        # upper case
           "ff-%s-%s-01" % ("a" * 32, "1" * 16),        # version ff
           "00-%s-%s-01-x" % ("a" * 32, "1" * 16),      # version 00 is exactly 55 long
           "garbage", None]
    seen = set()
    for tp in bad:
        rid = "badtp-" + uuid.uuid4().hex
        headers = {"X-Request-ID": rid}
        if tp:
            headers["traceparent"] = tp
        exec_with(stack, admin, sandbox, headers)
        api = access_line(stack, rid)
        assert HEX32.match(api["trace_id"]) and api["trace_id"] not in (tp or "")
        assert "parent_span_id" not in api, (tp, api)
        (agent,) = [o for o in lines_of(stack, agent_log(stack, sandbox), rid) if o["path"] == "/exec"]
        assert agent["trace_id"] == api["trace_id"]
        seen.add(api["trace_id"])
    assert len(seen) == len(bad)


def test_no_number_or_boolean_is_a_string(stack, admin, sandbox):
    exec_with(stack, admin, sandbox, {})
    files = [api_log(stack), os.path.join(stack.var, "log", "controller.log"), agent_log(stack, sandbox)]
    checked = 0
    for path in files:
        for o in log_lines(path):
            for k, v in o.items():
                if k in NUMERIC:
                    assert type(v) in (int, float), (path, k, o)
                    checked += 1
                assert v not in ("true", "false"), (path, k, o)
    assert checked > 0


def test_nginx_passes_the_trace_to_the_agent_directly(stack, admin, sandbox):
    """A raw download goes from nginx straight to the agent (no api line but
    the key check's): the agent logs the client's request id and trace."""
    rid = "raw-" + uuid.uuid4().hex
    trace, parent = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    r = admin.get("%s/sandboxes/%s/files/raw" % (stack.url, sandbox), params={"path": "/etc/hostname"},
                  headers={"X-Request-ID": rid, "traceparent": "00-%s-%s-01" % (trace, parent)})
    assert r.status_code == 200, r.text
    (agent,) = [o for o in lines_of(stack, agent_log(stack, sandbox), rid) if o["msg"] == "request"]
    assert agent["path"] == "/files" and agent["status"] == 200
    assert agent["trace_id"] == trace and agent["parent_span_id"] == parent
