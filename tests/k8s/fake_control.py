"""/_fake/ control endpoints: the FakeApiServer Python API over HTTP.

For a fake run as its own process (`fake_apiserver.py --port N`). No auth;
bodies and answers are JSON. Each entry: (method, path regex, fn(fake,
body, **groups)).
"""

POD = r"^/_fake/pods/(?P<ns>[^/]+)/(?P<name>[^/]+)"


def _faults(fake, body):
    f = fake.fault(status=body.get("status", 500), method=body.get("method"),
                   path=body.get("path"), count=body.get("count", 1),
                   retry_after=body.get("retry_after"), drop=body.get("drop", False),
                   delay=body.get("delay", 0.0), message=body.get("message"))
    return {"ok": True, "status": f.status}


def _rule(fake, body):
    kw = {k: body[k] for k in ("image", "name", "labels", "message", "exit_code",
                               "after", "count") if k in body}
    fake.pod_rule(body["action"], **kw)
    return {"ok": True}


def _requests(fake, body):
    with fake.lock:
        return {"requests": [dict(r) for r in fake.requests]}


def _clear_requests(fake, body):
    with fake.lock:
        fake.requests = []


def _token(fake, body):
    fake.token = body.get("token")


def _state(fake, body):
    return {r: fake.objects(r) for r in ("pods", "networkpolicies", "secrets", "namespaces")} | \
        {"resourceVersion": fake.resource_version}


def _pod(fn):
    return lambda fake, body, ns, name: {"object": fn(fake, body, ns, name)}


CONTROL_ROUTES = [
    ("GET", r"^/_fake/state$", _state),
    ("GET", r"^/_fake/requests$", _requests),
    ("DELETE", r"^/_fake/requests$", _clear_requests),
    ("POST", r"^/_fake/faults$", _faults),
    ("DELETE", r"^/_fake/faults$", lambda fake, body: fake.clear_faults()),
    ("POST", r"^/_fake/rules$", _rule),
    ("DELETE", r"^/_fake/rules$", lambda fake, body: fake.kubelet.clear_rules()),
    ("POST", r"^/_fake/watches/drop$", lambda fake, body: fake.drop_watches()),
    ("POST", r"^/_fake/watches/bookmark$", lambda fake, body: fake.bookmark()),
    ("POST", r"^/_fake/compact$", lambda fake, body: fake.compact()),
    ("PUT", r"^/_fake/token$", _token),
    ("POST", POD + r"/ready$", _pod(lambda f, b, ns, name: f.set_ready(
        ns, name, b.get("ready", True)))),
    ("POST", POD + r"/waiting$", _pod(lambda f, b, ns, name: f.set_waiting(
        ns, name, b["reason"], b.get("message")))),
    ("POST", POD + r"/unschedulable$", _pod(lambda f, b, ns, name: f.set_unschedulable(
        ns, name, b.get("message")))),
    ("POST", POD + r"/terminate$", _pod(lambda f, b, ns, name: f.terminate(
        ns, name, b.get("exit_code", 1), b.get("reason"), b.get("message")))),
    ("POST", POD + r"/deadline$", _pod(lambda f, b, ns, name: f.kubelet.deadline_exceeded(
        ns, name))),
]
