"""spec_check.py itself: an answer docs/openapi.yaml does not document is
caught (status, route, method, body, NDJSON line), a documented one is not.
No stack: a tiny local HTTP server plays one, registered like a stack."""
import http.server
import json
import threading

import pytest
import requests

import spec_check

ERROR = b'{"detail": "x", "code": "not_found", "request_id": "r"}'


@pytest.fixture(scope="module")
def spec():
    return spec_check.Spec()


@pytest.mark.parametrize("method,path,status,ctype,body", [
    ("POST", "/sandboxes/abc/exec", 200, "application/json", b'{"job_id": "j", "status": "queued"}'),
    ("GET", "/v1/sandboxes/abc", 404, "application/json", ERROR),
    ("PATCH", "/v1/sandboxes", 405, "application/json",
     b'{"detail": "x", "code": "method_not_allowed", "request_id": "r"}'),
    ("GET", "/v1/no-such-route", 404, "application/json", ERROR),
    ("GET", "/nginx_status", 200, "text/plain", b"Active connections: 1 \n"),
    ("GET", "/v1/sandboxes/abc/trajectory", 200, "application/x-ndjson",
     b'{"type": "header", "sandbox_id": "a"}\n{"type": "end", "sandbox_id": "a"}\n'),
])
def test_documented_answers_pass(spec, method, path, status, ctype, body):
    assert spec.check(method, path, status, ctype, body) == []


@pytest.mark.parametrize("method,path,status,ctype,body,why", [
    ("GET", "/v1/sandboxes/abc/files/stat", 418, "application/json", ERROR, "status 418"),
    ("POST", "/sandboxes/abc/exec", 200, "application/json", b'{"job_id": "j"}', "exec"),
    ("GET", "/v1/no-such-route", 200, "application/json", b"{}", "undocumented route"),
    ("PUT", "/v1/jobs/j", 200, "application/json", b"{}", "method PUT"),
    ("GET", "/v1/sandboxes/abc", 404, "application/json", b'{"detail": "x"}', "required"),
    ("GET", "/v1/sandboxes/abc", 404, "text/html", b"<html>", "content type"),
    ("GET", "/v1/sandboxes/abc/trajectory", 200, "application/x-ndjson",
     b'{"type": "header", "sandbox_id": "a"}\n{"type": "bogus"}\n', "line 2"),
])
def test_undocumented_answers_are_caught(spec, method, path, status, ctype, body, why):
    problems = spec.check(method, path, status, ctype, body)
    assert problems and why in " ".join(problems), problems


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        status, body = (200, b"{}") if self.path == "/v1/health" else (404, ERROR)
        if self.path == "/v1/health-wrong":
            status, body = 200, b'{"status": "sick"}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.mark.spec_exempt
def test_a_session_answer_is_recorded_for_its_test():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        if not spec_check.enabled():
            pytest.skip("ORCHARD_SPEC_CHECK=0")
        base = "http://127.0.0.1:%d" % server.server_address[1]
        spec_check.register(base)
        spec_check.take_problems()
        s = requests.Session()
        s.trust_env = False
        assert s.get(base + "/v1/nope", timeout=30).status_code == 404   # documented
        assert spec_check.take_problems() == []
        s.get(base + "/v1/health", timeout=30)                           # {} lacks status
        problems = spec_check.take_problems()
        assert len(problems) == 1 and "status" in problems[0], problems
        assert json.loads(s.get(base + "/v1/health-wrong", timeout=30).content) == {"status": "sick"}
        problems = spec_check.take_problems()     # no such route, yet 200
        assert len(problems) == 1 and "undocumented route" in problems[0], problems
    finally:
        server.shutdown()
        server.server_close()
