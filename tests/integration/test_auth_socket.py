"""nginx's auth subrequests have their own FastCGI socket and threads in
orchard-api (issue 8; docs/architecture.md, "nginx <-> orchard-api").

A /wait or an exec with wait:true holds one of the api's request threads
(ORCHARD_API_THREADS) for its whole duration. The key check that nginx runs
before every request used to queue behind them on the same socket; nginx
gave up after 30 s and the client got 502. These tests hold every request
thread of a stack started with two of them and show that what needs only
the key check still answers while those waits are pending, and that the
auth socket answers nothing but the auth routes.
"""
import concurrent.futures
import os

import pytest
import requests

import fcgi_client
from stack import Stack, log_tails
from test_api import api_pid

THREADS = 2


@pytest.fixture(scope="module")
def lean():
    """A stack whose api has THREADS request threads."""
    s = Stack(env={"ORCHARD_API_THREADS": str(THREADS)})
    s.start()
    yield s
    s.close()


def accepted_on(sock_path, pid):
    """Connections to sock_path that process pid has accepted (those still in
    the listen backlog are in /proc/net/unix too, but in no process's fds)."""
    inodes = set()
    with open("/proc/net/unix") as f:
        next(f)
        for line in f:
            cols = line.split()
            # Num RefCount Protocol Flags Type St Inode Path; St 03 = connected
            if len(cols) >= 8 and cols[7] == sock_path and cols[5] == "03":
                inodes.add(cols[6])
    held = 0
    fd_dir = "/proc/%d/fd" % pid
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            held += 1
    return held


def test_key_checks_answer_while_every_request_thread_waits(lean):
    admin = lean.session()
    r = admin.post(lean.url + "/v1/sandboxes", json={"image": "host"})
    assert r.status_code in (200, 201), r.text
    box = r.json()["sandbox_id"]
    lean.wait_ready(admin, box)
    r = admin.put("%s/v1/sandboxes/%s/files/raw" % (lean.url, box),
                  params={"path": "/workspace/probe.txt"}, data=b"still here\n")
    assert r.status_code == 200, r.text
    # A job that outlives the probes below by far; every request thread waits on it.
    r = admin.post("%s/v1/sandboxes/%s/exec" % (lean.url, box),
                   json={"command": "sleep 20", "wait": False})
    assert r.status_code == 200, r.text
    job = r.json()["job_id"]

    pid = api_pid(lean)
    pool = concurrent.futures.ThreadPoolExecutor(THREADS)
    try:
        waits = [pool.submit(lean.session().get, "%s/v1/jobs/%s/wait" % (lean.url, job),
                             params={"timeout": 120}, timeout=180) for _ in range(THREADS)]
        lean.wait_for(lambda: accepted_on(lean.api_socket, pid) >= THREADS, timeout=30,
                      what="every request thread holding a wait")

        # A raw GET needs only /_auth_agent: nginx then proxies to the agent.
        r = admin.get("%s/v1/sandboxes/%s/files/raw" % (lean.url, box),
                      params={"path": "/workspace/probe.txt"}, timeout=60)
        assert r.status_code == 200 and r.content == b"still here\n", (r.status_code, r.text)
        # A bad key is refused by /_auth alone.
        r = lean.session(key="orch_nope_nope").get(lean.url + "/v1/sandboxes", timeout=60)
        assert r.status_code == 403 and r.json()["code"] == "forbidden", r.text
        assert not any(w.done() for w in waits), "the waits ended before the probes answered"
        assert accepted_on(lean.api_socket, pid) >= THREADS

        for w in waits:
            r = w.result()
            assert r.status_code == 200 and r.json()["status"] == "succeeded", r.text
    except requests.RequestException:
        print(log_tails(lean.var))
        raise
    finally:
        pool.shutdown(wait=True)
    admin.delete("%s/v1/sandboxes/%s" % (lean.url, box))


def auth_params(path, key, uri="/v1/sandboxes"):
    return {"REQUEST_METHOD": "GET", "DOCUMENT_URI": path, "SCRIPT_NAME": path,
            "REQUEST_URI": path, "QUERY_STRING": "", "CONTENT_TYPE": "", "CONTENT_LENGTH": "",
            "HTTP_X_API_KEY": key, "ORCHARD_ORIGINAL_METHOD": "GET",
            "ORCHARD_ORIGINAL_URI": uri}


def test_auth_socket_answers_the_auth_routes_only(stack):
    status, headers, _ = fcgi_client.call(stack.api_auth_socket,
                                          auth_params("/_auth", stack.admin_key))
    assert status == 204 and headers.get("X-Orchard-Role") == "admin", (status, headers)
    status, _, _ = fcgi_client.call(stack.api_auth_socket, auth_params("/_auth", "orch_x_y"))
    assert status == 403
    # /_auth_agent is served there too (an unknown sandbox: 403 not_found)
    status, headers, _ = fcgi_client.call(
        stack.api_auth_socket,
        auth_params("/_auth_agent", stack.admin_key, "/v1/sandboxes/nope/files/raw"))
    assert status == 403 and headers.get("X-Orchard-Auth-Error") == "not_found", (status, headers)

    # Anything else is 404 there, even with nginx's trusted params.
    key_id = stack.admin_key.split("_")[1]
    tenant = stack.scalar("SELECT tenant_id FROM api_keys WHERE key_id = '%s'" % key_id)
    for path in ("/v1/sandboxes", "/health", "/", "/metrics"):
        p = dict(auth_params(path, stack.admin_key), ORCHARD_TENANT=tenant, ORCHARD_ROLE="admin")
        status, _, body = fcgi_client.call(stack.api_auth_socket, p)
        assert status == 404 and b'"not_found"' in body, (path, status, body)

    # The request socket still answers /_auth as before (an nginx
    # configured before the auth socket existed keeps working).
    status, headers, _ = fcgi_client.call(stack.api_socket, auth_params("/_auth", stack.admin_key))
    assert status == 204 and headers.get("X-Orchard-Role") == "admin", (status, headers)
