"""nginx keeps its FastCGI connections to orchard-api's request socket
(issue 8, the read path; api/serve.c, nginx/orchard.conf.in).

A kept connection costs no connect, accept and close per request. The api
parks idle kept connections in an epoll set instead of leaving each bound to
the thread that accepted it (libfcgi's way), so connections that nginx keeps
idle never hold a request thread: these tests run a stack with two request
threads and many more kept connections. A request that leaves input unread
(a raw upload refused before its body was read) must not break the
connections that follow it.
"""
import concurrent.futures
import os
import socket

import fcgi_client

# lean: a stack of this module's own with THREADS request threads
from test_auth_socket import THREADS, accepted_on, api_pid, lean  # noqa: F401 (fixture)
from test_auth_socket import auth_params
from test_metrics import parse_metrics, value

# More clients at once than the api has request threads; nginx opens one
# upstream connection per request in flight and keeps them afterwards.
CLIENTS = 12


def accepted(stack, session):
    r = session.get(stack.url + "/metrics", timeout=60)
    assert r.status_code == 200, r.text
    fams = parse_metrics(r.text)
    return (value(fams, "orchard_api_connections_accepted_total", socket="request"),
            value(fams, "orchard_api_connections_accepted_total", socket="auth"))


def test_requests_reuse_the_connections_nginx_keeps(lean):
    admin = lean.session()
    req0, auth0 = accepted(lean, admin)
    for _ in range(100):
        r = admin.get(lean.url + "/v1/sandboxes", timeout=60)
        assert r.status_code == 200, r.text
    req1, auth1 = accepted(lean, admin)
    # 101 requests (the scrape included) over a handful of connections
    # (at most one per nginx worker is needed one request at a time) ...
    assert req1 - req0 <= 8, (req0, req1)
    # ... while each auth subrequest still has a connection of its own:
    # nginx ends an auth_request subrequest before reading END_REQUEST.
    assert auth1 - auth0 >= 101, (auth0, auth1)


def test_idle_kept_connections_hold_no_request_thread(lean):
    admin = lean.session()
    sessions = [lean.session() for _ in range(CLIENTS)]

    def burst(i):
        return [sessions[i].get(lean.url + "/v1/sandboxes", timeout=60).status_code
                for _ in range(10)]

    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        codes = [c for cs in pool.map(burst, range(CLIENTS)) for c in cs]
    assert codes == [200] * (10 * CLIENTS)
    # Now idle: the connections nginx keeps outnumber the api's threads.
    # Bound to threads (libfcgi), at most THREADS could be open, and every
    # further request on another connection would wait for nginx to drop
    # an idle one (keepalive_timeout, 60 s).
    pid = api_pid(lean)
    idle = accepted_on(lean.api_socket, pid)
    assert idle > THREADS, idle
    for _ in range(3 * CLIENTS):
        r = lean.session().get(lean.url + "/v1/sandboxes", timeout=30)
        assert r.status_code == 200, r.text
    r = admin.get(lean.url + "/health", timeout=30)
    assert r.status_code == 200, r.text


def test_a_request_that_leaves_its_body_unread_does_not_break_later_ones(lean):
    admin = lean.session()
    big = os.urandom(4 << 20)
    for _ in range(3):
        # The api refuses this before reading the body (unknown sandbox);
        # nginx is still sending it, so that connection is not kept.
        # (A session of its own: nginx may close the client's connection
        # after answering before the body's end.)
        r = lean.session().put(lean.url + "/v1/sandboxes/nosuchbox/files/raw",
                               params={"path": "/workspace/x"}, data=big, timeout=60)
        assert r.status_code == 404, r.text
        # A JSON body refused as malformed was read whole: kept.
        r = admin.post(lean.url + "/v1/sandboxes", data=b"{not json", timeout=60,
                       headers={"Content-Type": "application/json"})
        assert r.status_code == 400, r.text
        for _ in range(10):
            r = admin.get(lean.url + "/v1/sandboxes", timeout=60)
            assert r.status_code == 200, r.text


def health_params():
    return {"REQUEST_METHOD": "GET", "DOCUMENT_URI": "/health", "SCRIPT_NAME": "/health",
            "REQUEST_URI": "/health", "QUERY_STRING": "", "CONTENT_TYPE": "",
            "CONTENT_LENGTH": ""}


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(path)
    return s


def closed_by_peer(s):
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def test_kept_silent_and_garbage_connections_cost_no_thread(lean):
    """Straight at the request socket, with 2 request threads: connections
    that send nothing, kept connections between requests, and connections
    that send garbage (after a request, or at once) neither hold a thread
    nor stop the api from answering everyone else."""
    silent = [connect(lean.api_socket) for _ in range(4 * THREADS)]
    kept = [connect(lean.api_socket) for _ in range(2 * THREADS)]
    try:
        for _ in range(3):   # several requests on each kept connection
            for s in kept:
                status, _, body = fcgi_client.request(s, health_params(), keep=True)
                assert status == 200 and b"healthy" in body, (status, body)
        # Garbage on a kept connection, and on a new one: closed, nothing else.
        bad = kept.pop()
        bad.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert closed_by_peer(bad)
        bad.close()
        fresh = connect(lean.api_socket)
        fresh.sendall(b"\x01\x01\x00\x01\x00\x08\x00\x00" + b"\x00\x09" + b"\x00" * 6)  # unknown role
        assert closed_by_peer(fresh)
        fresh.close()
        # Nobody's thread is taken: the auth socket and the api through
        # nginx still answer, and so do the kept connections.
        status, headers, _ = fcgi_client.call(lean.api_auth_socket, auth_params("/_auth", lean.admin_key))
        assert status == 204, (status, headers)
        admin = lean.session()
        for _ in range(10):
            r = admin.get(lean.url + "/v1/sandboxes", timeout=30)
            assert r.status_code == 200, r.text
        for s in kept:
            status, _, _ = fcgi_client.request(s, health_params(), keep=True)
            assert status == 200
    finally:
        for s in silent + kept:
            s.close()
