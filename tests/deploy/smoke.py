#!/usr/bin/env python3
"""Smoke of a deployed Orchard through nginx and TLS, from the host, with
clients Orchard did not write (requests, websocket-client). Used by
scripts/deploy-test.sh (make deploy-test) against the compose stack and
the kube-played pods; docs/deploy.md says what each step proves.

    smoke.py URL API_KEY [--image IMG] [--tools NAME=VERSION,...]
             [--restart-controller CMD] [--exec-only]

--tools: each NAME runs in the sandbox (found on its PATH, from the
sandbox-tools bundle at /opt/sandbox-tools) and its `--version` names VERSION.

--restart-controller CMD: with a sandbox ready, run CMD (e.g. `podman
restart orchard-dt_controller_1`) and report what became of the sandbox
(the local driver's sandboxes live in the controller container's pid
namespace: docs/deploy.md).
"""
import argparse
import base64
import json
import os
import ssl
import subprocess
import sys
import time

import requests
import urllib3
import websocket

urllib3.disable_warnings()     # the compose stack's certificate is self-signed


def step(msg):
    print("smoke: " + msg, flush=True)


def wait(pred, timeout, what):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.5)
    raise SystemExit("smoke: FAILED waiting for " + what)


def check(cond, what):
    if not cond:
        raise SystemExit("smoke: FAILED: " + what)


class Api:
    def __init__(self, url, key):
        self.url, self.s = url, requests.Session()
        self.s.headers["X-API-Key"] = key

    def __getattr__(self, verb):
        # verify per request: REQUESTS_CA_BUNDLE would override a session's
        return lambda path, **kw: getattr(self.s, verb)(self.url + path, timeout=60,
                                                        verify=False, **kw)


def create_ready(api, image):
    r = api.post("/v1/sandboxes", json={"image": image})
    check(r.status_code in (200, 201), "create: %s %s" % (r.status_code, r.text))
    sid = r.json()["sandbox_id"]
    wait(lambda: api.get("/v1/sandboxes/" + sid).json().get("status") == "ready", 180,
         "sandbox %s ready (%s)" % (sid, api.get("/v1/sandboxes/" + sid).text))
    return sid


def run(api, sid, cmd):
    r = api.post("/v1/sandboxes/%s/exec" % sid, json={"command": cmd, "wait": True})
    check(r.status_code == 200, "exec: %s %s" % (r.status_code, r.text))
    return r.json()


def pty(url, key, sid):
    ws = websocket.create_connection(
        url.replace("https://", "wss://") + "/v1/sandboxes/%s/exec/pty" % sid,
        subprotocols=["api_key." + key], sslopt={"cert_reqs": ssl.CERT_NONE}, timeout=30)
    try:
        ws.send(json.dumps({"type": "init", "cmd": ["/bin/sh"], "rows": 24, "cols": 80}))
        check(json.loads(ws.recv())["type"] == "ready", "pty ready")
        ws.send(json.dumps({"type": "stdin",
                            "data": base64.b64encode(b"echo pty-$((40+2))\nexit 3\n").decode()}))
        out, code = "", None
        while code is None:
            m = json.loads(ws.recv())
            if m["type"] == "stdout":
                out += base64.b64decode(m["data"]).decode(errors="replace")
            elif m["type"] == "exit":
                code = m["code"]
            check(m["type"] != "error", "pty: %s" % m)
    finally:
        ws.close()
    check("pty-42" in out and code == 3, "pty: %r exit %r" % (out, code))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("key")
    p.add_argument("--image", default="host")
    p.add_argument("--restart-controller")
    p.add_argument("--exec-only", action="store_true")
    p.add_argument("--tools", default="")
    a = p.parse_args()
    api = Api(a.url, a.key)

    r = wait(lambda: (lambda r: r.status_code == 200 and r)(
        requests.get(a.url + "/health", verify=False, timeout=10)), 120, "/health")
    step("/health %s" % r.text.strip()[:80])
    sid = create_ready(api, a.image)
    step("sandbox %s ready" % sid)
    out = run(api, sid, "echo hi")
    check(out["exit_code"] == 0 and out["stdout"] == "hi\n", "exec: %r" % out)
    step("exec echo hi: %r" % out["stdout"])
    for name, version in (t.split("=", 1) for t in a.tools.split(",") if t):
        out = run(api, sid, "command -v %s && %s --version" % (name, name))
        where = out["stdout"].split("\n", 1)[0]
        check(out["exit_code"] == 0 and where == "/opt/sandbox-tools/bin/" + name
              and version in out["stdout"], "%s --version in the sandbox: %r" % (name, out))
        step("in the sandbox: %s --version: %r" % (where, out["stdout"].split("\n")[1]))
    if a.exec_only:
        api.delete("/v1/sandboxes/" + sid)
        return
    blob = os.urandom(200000)
    r = api.put("/v1/sandboxes/%s/files/raw" % sid, params={"path": "/tmp/blob"}, data=blob)
    check(r.status_code in (200, 201), "file put: %s %s" % (r.status_code, r.text))
    r = api.get("/v1/sandboxes/%s/files/raw" % sid, params={"path": "/tmp/blob"})
    check(r.status_code == 200 and r.content == blob, "file get: %s" % r.status_code)
    check(run(api, sid, "wc -c < /tmp/blob")["stdout"].strip() == "200000", "file in sandbox")
    step("file round trip (200000 bytes)")
    pty(a.url, a.key, sid)
    step("pty (websocket-client): echo and exit 3")
    if a.restart_controller:
        subprocess.run(a.restart_controller, shell=True, check=True)
        step("controller container restarted")
        wait(lambda: requests.get(a.url + "/health", verify=False, timeout=10).ok, 120,
             "/health after restart")
        later = create_ready(api, a.image)
        check(run(api, later, "echo again")["stdout"] == "again\n", "exec after restart")
        step("a sandbox created after the restart runs commands")
        st = wait(lambda: (lambda s: s in ("ready", "failed") and s)(
            api.get("/v1/sandboxes/" + sid).json().get("status")), 60, "old sandbox state")
        msg = api.get("/v1/sandboxes/" + sid).json().get("status_message")
        step("the sandbox from before the restart: %s (%s)" % (st, msg))
        if st == "ready":
            step("  and it runs: %r" % run(api, sid, "echo survived")["stdout"])
        api.delete("/v1/sandboxes/" + later)
    r = api.delete("/v1/sandboxes/" + sid)
    check(r.status_code in (200, 202, 204), "delete: %s %s" % (r.status_code, r.text))
    wait(lambda: (lambda r: r.status_code == 404 or r.json().get("status") == "deleted")(
        api.get("/v1/sandboxes/" + sid)), 120, "sandbox deleted")
    step("deleted")


if __name__ == "__main__":
    sys.exit(main())
