"""nginx's side of the contract (docs/architecture.md), against a fake api.

The config is rendered by the production script (`scripts/stack.sh
nginx-config`) and nginx is started with the same command line as
`stack.sh up`; orchard-api is replaced by tests/integration/fake_fcgi.py,
so these tests pin down what nginx sends and answers on its own.
"""
import json
import os
import re
import signal
import subprocess
import time

import pytest
import requests

from fake_fcgi import AGENT_TOKEN, GOOD_KEY, KEY_ID, ROLE, TENANT, FakeAgent, FakeApi
from stack import STACK_SH, free_port, log_tails, make_tmpdir

import shutil

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
ERROR_SHAPE = {"detail", "code", "request_id"}


class Nginx:
    def __init__(self):
        self.var = make_tmpdir("orc-ngx-")
        self.port = free_port()
        self.url = "https://127.0.0.1:%d" % self.port
        self.cacert = os.path.join(self.var, "tls", "ca.crt")
        env = dict(os.environ, ORCHARD_PORT=str(self.port))
        r = subprocess.run([STACK_SH, "nginx-config", self.var], env=env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        self.api = FakeApi(os.path.join(self.var, "run", "api.sock"))
        self.agent = FakeAgent(os.path.join(self.var, "run", "agent.sock"))
        self.api.agent_upstream = "http://unix:%s:" % self.agent.path
        ngx = os.path.join(self.var, "nginx")
        log = os.path.join(self.var, "log", "nginx-error.log")
        self.proc = subprocess.Popen(
            [NGINX, "-p", ngx + "/", "-c", os.path.join(ngx, "orchard.conf"), "-e", log],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        deadline = time.monotonic() + 20
        while True:
            try:
                self.get("/health")
                break
            except requests.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("nginx did not start\n" + log_tails(self.var))
                time.sleep(0.1)

    def stop(self):
        self.api.close()
        self.agent.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.var, ignore_errors=True)

    def get(self, path, key=None, headers=None, **kw):
        h = dict(headers or {})
        if key is not None:
            h["X-API-Key"] = key
        with requests.Session() as s:
            s.trust_env = False  # REQUESTS_CA_BUNDLE would override verify
            return s.request(kw.pop("method", "GET"), self.url + path, headers=h,
                             verify=self.cacert, timeout=30, **kw)


@pytest.fixture(scope="module")
def ngx():
    n = Nginx()
    yield n
    n.stop()


def params(r):
    assert r.status_code == 200, (r.status_code, r.text)
    return r.json()["params"]


def assert_error(r, status, code, detail=None):
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["Content-Type"].startswith("application/json")
    body = r.json()
    assert set(body) == ERROR_SHAPE, body
    assert body["code"] == code
    assert body["request_id"] == r.headers["X-Request-ID"]
    if detail is not None:
        assert body["detail"] == detail


def test_open_routes_need_no_key_and_get_no_tenant(ngx):
    for path in ("/", "/health", "/v1/health"):
        p = params(ngx.get(path, headers={"X-Orchard-Tenant": "99"}))
        assert p["DOCUMENT_URI"] == [path]
        assert "ORCHARD_TENANT" not in p and "ORCHARD_KEY" not in p and "ORCHARD_ROLE" not in p
        assert "HTTP_X_ORCHARD_TENANT" not in p or p["HTTP_X_ORCHARD_TENANT"] == [""]


def test_missing_key_is_401_json(ngx):
    assert_error(ngx.get("/sandboxes"), 401, "unauthorized",
                 "missing API key: send X-API-Key or Authorization: Bearer")
    assert_error(ngx.get("/v1/sandboxes"), 401, "unauthorized")
    # /v1/ itself is not an open route
    assert_error(ngx.get("/v1/"), 401, "unauthorized")


def test_wrong_key_is_403_json(ngx):
    assert_error(ngx.get("/sandboxes", key="nope"), 403, "forbidden",
                 "invalid or revoked API key")
    r = ngx.get("/sandboxes", headers={"Authorization": "Bearer nope"})
    assert_error(r, 403, "forbidden")


def test_good_key_reaches_api_with_tenant_params(ngx):
    for h in ({"X-API-Key": GOOD_KEY}, {"Authorization": "Bearer " + GOOD_KEY}):
        p = params(ngx.get("/sandboxes/abc", headers=h))
        assert p["ORCHARD_TENANT"] == [TENANT]
        assert p["ORCHARD_KEY"] == [KEY_ID]
        assert p["ORCHARD_ROLE"] == [ROLE]
        assert p["DOCUMENT_URI"] == ["/sandboxes/abc"]


def test_client_cannot_forge_tenant(ngx):
    forged = {"X-Orchard-Tenant": "99", "X-Orchard-Key": "1", "X-Orchard-Role": "admin",
              "Orchard-Tenant": "99"}
    p = params(ngx.get("/sandboxes", key=GOOD_KEY, headers=forged))
    assert p["ORCHARD_TENANT"] == [TENANT]
    assert p["ORCHARD_ROLE"] == [ROLE]
    for name in ("HTTP_X_ORCHARD_TENANT", "HTTP_X_ORCHARD_KEY", "HTTP_X_ORCHARD_ROLE"):
        assert p.get(name, [""]) == [""], (name, p.get(name))
    # Every param is sent once: the api must never have to pick one.
    assert all(len(v) == 1 for v in p.values()), p


def test_auth_subrequest_gets_headers_not_body(ngx):
    ngx.api.auth_calls.clear()
    r = ngx.get("/sandboxes?x=1", key=GOOD_KEY, method="POST", data=b"x" * 5000,
                headers={"Content-Type": "application/json"})
    p = params(r)
    assert r.json()["body_length"] == 5000
    assert p["CONTENT_LENGTH"] == ["5000"]
    assert p["REQUEST_METHOD"] == ["POST"]
    assert p["QUERY_STRING"] == ["x=1"]
    a = {k: v[0] for k, v in ngx.api.auth_calls[-1].items()}
    assert a["DOCUMENT_URI"] == "/_auth"
    # on the api's auth socket, never queued behind requests
    assert ngx.api.auth_sockets[-1] == ngx.api.auth_path
    assert a["CONTENT_LENGTH"] == ""
    assert a["HTTP_X_API_KEY"] == GOOD_KEY
    assert a["REQUEST_ID"] == p["REQUEST_ID"][0]
    assert "ORCHARD_TENANT" not in a


def test_request_id_generated_passed_through_and_sanitised(ngx):
    r = ngx.get("/health")
    rid = r.headers["X-Request-ID"]
    assert re.fullmatch(r"[0-9a-f]{32}", rid)
    assert params(r)["REQUEST_ID"] == [rid]

    good = "trace-1.2_AB"
    r = ngx.get("/sandboxes", key=GOOD_KEY, headers={"X-Request-ID": good})
    assert r.headers["X-Request-ID"] == good
    assert params(r)["REQUEST_ID"] == [good]

    for bad in ("has space", "x" * 129, "semi;colon", "ünï"):
        r = ngx.get("/health", headers={"X-Request-ID": bad.encode("utf-8")})
        rid = r.headers["X-Request-ID"]
        assert re.fullmatch(r"[0-9a-f]{32}", rid), (bad, rid)
        assert params(r)["REQUEST_ID"] == [rid]

    # on nginx's own error pages too
    r = ngx.get("/sandboxes", headers={"X-Request-ID": good})
    assert_error(r, 401, "unauthorized")
    assert r.headers["X-Request-ID"] == good


def test_api_errors_pass_through_untouched(ngx):
    r = ngx.get("/status/404", key=GOOD_KEY)
    assert r.status_code == 404
    assert r.json()["code"] == "api"
    r = ngx.get("/status/422", key=GOOD_KEY)
    assert r.status_code == 422 and r.json()["code"] == "api"


def test_nginx_level_errors_are_json(ngx):
    assert_error(ngx.get("/_auth"), 404, "not_found")
    assert_error(ngx.get("/", method="TRACE"), 405, "method_not_allowed")
    big = b"0" * (96 * 1024 * 1024 + 1)  # client_max_body_size 96m
    assert_error(ngx.get("/sandboxes", key=GOOD_KEY, method="POST", data=big), 413, "too_large")


def test_tls_versions(ngx):
    import ssl
    import socket
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        ctx = ssl.create_default_context(cafile=ngx.cacert)
        ctx.minimum_version = ctx.maximum_version = version
        with socket.create_connection(("127.0.0.1", ngx.port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                assert tls.version() in ("TLSv1.2", "TLSv1.3")
    # the certificate is valid for the IP address too (verified by requests)
    assert ngx.get("/health").ok


def test_api_down_is_503_json_with_retry_after(ngx):
    """An outage is 503 with Retry-After: Orchard's SDK retries those."""
    ngx.api.close()
    try:
        for r in (ngx.get("/health"), ngx.get("/sandboxes", key=GOOD_KEY)):
            assert_error(r, 503, "unavailable")
            assert r.headers.get("Retry-After") == "5" and r.headers.get("X-Request-ID"), r.headers
    finally:
        ngx.api = FakeApi(ngx.api.path)
        ngx.api.agent_upstream = "http://unix:%s:" % ngx.agent.path


def test_auth_socket_down_is_503_json(ngx):
    """The auth subrequest has its own socket: without it a keyed request is
    503 "orchard-api is unavailable" with Retry-After, never a 500, and open
    routes still work."""
    os.unlink(ngx.api.auth_path)   # nothing listens there any more
    try:
        assert ngx.get("/health").status_code == 200
        r = ngx.get("/sandboxes", key=GOOD_KEY)
        assert_error(r, 503, "unavailable", "orchard-api is unavailable")
        assert r.headers.get("Retry-After") == "5", r.headers
    finally:
        ngx.api.close()
        ngx.api = FakeApi(ngx.api.path)
        ngx.api.agent_upstream = "http://unix:%s:" % ngx.agent.path


def test_bad_requests_are_json(ngx):
    assert_error(ngx.get("/sandboxes/x%00y", key=GOOD_KEY), 400, "invalid")
    assert_error(ngx.get("/sandboxes/" + "a" * 20000, key=GOOD_KEY), 414, "too_large")


# ---- raw streams: GET/HEAD to the agent, everything else to the api ----------


def test_raw_get_goes_to_the_agent_with_its_token_only(ngx):
    for tail, agent_path in (("files/raw", "/files"), ("archive", "/archive")):
        ngx.agent.requests.clear()
        r = ngx.get("/v1/sandboxes/box1/%s?path=/workspace/a%%20b" % tail, key=GOOD_KEY,
                    headers={"Cookie": "c=1", "X-Request-ID": "raw-1"})
        assert r.status_code == 200, r.text
        seen = r.json()
        assert seen["method"] == "GET" and seen["path"] == agent_path + "?path=/workspace/a%20b"
        h = seen["headers"]
        assert h["authorization"] == "Bearer " + AGENT_TOKEN
        assert h["x-request-id"] == "raw-1"
        # the client's key and other headers never reach the sandbox
        assert "x-api-key" not in h and "cookie" not in h
        assert r.headers["X-File-Size"] == "3"
        assert r.headers["X-Request-ID"] == "raw-1"
        assert not any(k.lower().startswith("x-orchard") for k in r.headers)
        assert AGENT_TOKEN not in str(r.headers)
    # unprefixed too, and HEAD
    assert ngx.get("/sandboxes/box1/files/raw?path=x", key=GOOD_KEY).json()["path"] == "/files?path=x"
    r = ngx.get("/sandboxes/box1/files/raw?path=x", key=GOOD_KEY, method="HEAD")
    assert r.status_code == 200 and ngx.agent.requests[-1]["method"] == "HEAD"


def test_raw_auth_subrequest_sees_the_original_uri(ngx):
    ngx.api.auth_calls.clear()
    ngx.get("/v1/sandboxes/box1/files/raw?path=/x", key=GOOD_KEY)
    a = {k: v[0] for k, v in ngx.api.auth_calls[-1].items()}
    assert a["DOCUMENT_URI"] == "/_auth_agent"
    assert ngx.api.auth_sockets[-1] == ngx.api.auth_path
    assert a["ORCHARD_ORIGINAL_URI"] == "/v1/sandboxes/box1/files/raw?path=/x"
    assert a["ORCHARD_ORIGINAL_METHOD"] == "GET"
    assert a["CONTENT_LENGTH"] == ""


def test_raw_key_errors_are_nginx_json(ngx):
    assert_error(ngx.get("/v1/sandboxes/box1/files/raw?path=x"), 401, "unauthorized")
    assert_error(ngx.get("/v1/sandboxes/box1/files/raw?path=x", key="bad"), 403, "forbidden")
    assert_error(ngx.get("/v1/sandboxes/box1/files/raw?path=x", key="bad", method="PUT", data=b"x"),
                 403, "forbidden")
    assert_error(ngx.get("/_auth_agent", key=GOOD_KEY), 404, "not_found")


def test_raw_refusals_and_agent_errors_go_to_the_api(ngx):
    # another sandbox (/_auth_agent defers with 403): the api answers, with the tenant
    ngx.agent.requests.clear()
    p = params(ngx.get("/v1/sandboxes/box2/files/raw?path=/x", key=GOOD_KEY))
    assert p["DOCUMENT_URI"] == ["/v1/sandboxes/box2/files/raw"]
    assert p["QUERY_STRING"] == ["path=/x"]
    assert p["ORCHARD_TENANT"] == [TENANT] and p["ORCHARD_KEY"] == [KEY_ID]
    assert not ngx.agent.requests
    # the agent's own error: the api redoes the request to answer in our shape
    p = params(ngx.get("/v1/sandboxes/box1/files/raw?path=/missing", key=GOOD_KEY))
    assert p["DOCUMENT_URI"] == ["/v1/sandboxes/box1/files/raw"]
    assert p["REQUEST_METHOD"] == ["GET"] and p["ORCHARD_TENANT"] == [TENANT]
    assert ngx.agent.requests[-1]["path"] == "/files?path=/missing"


def test_raw_upload_streams_to_the_api_past_the_json_limit(ngx):
    ngx.agent.requests.clear()
    size = 65 * 1024 * 1024
    r = ngx.get("/v1/sandboxes/box1/files/raw?path=/big", key=GOOD_KEY, method="PUT",
                data=b"\0" * size)
    body = r.json()
    p = body["params"]
    assert body["body_length"] == size
    assert p["REQUEST_METHOD"] == ["PUT"] and p["CONTENT_LENGTH"] == [str(size)]
    assert p["DOCUMENT_URI"] == ["/v1/sandboxes/box1/files/raw"]
    assert p["ORCHARD_TENANT"] == [TENANT]
    assert not ngx.agent.requests
    # a body over the raw limit is refused by nginx before anything runs
    import socket
    import ssl
    ctx = ssl.create_default_context(cafile=ngx.cacert)
    with socket.create_connection(("127.0.0.1", ngx.port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(("PUT /v1/sandboxes/box1/archive?path=/t HTTP/1.1\r\nHost: localhost\r\n"
                         "X-API-Key: %s\r\nContent-Length: %d\r\n\r\n" % (GOOD_KEY, 3 << 30)).encode())
            head = tls.recv(65536).decode("latin-1")
    assert head.startswith("HTTP/1.1 413"), head
    assert '"code": "too_large"' in head and "2 GiB" in head


def test_unknown_transfer_encoding_is_501_json(ngx):
    """nginx refuses a Transfer-Encoding other than chunked before any
    location; the answer is still ours (issue 19, item 15). curl sends the
    header as given, with the body raw."""
    r = subprocess.run(["curl", "-sS", "--max-time", "30", "--cacert", ngx.cacert,
                        "-X", "POST", "-H", "X-API-Key: " + GOOD_KEY,
                        "-H", "Transfer-Encoding: gzip", "-H", "Content-Type: application/json",
                        "--data-binary", "{}", "-w", "\n%{http_code}",
                        "https://127.0.0.1:%d/sandboxes" % ngx.port],
                       capture_output=True, text=True, timeout=60)
    body, _, status = r.stdout.rpartition("\n")
    assert status == "501", (r.stdout, r.stderr)
    doc = json.loads(body)
    assert doc["code"] == "not_implemented" and "Transfer-Encoding" in doc["detail"], doc
    assert doc["request_id"], doc
