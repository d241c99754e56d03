#!/usr/bin/python3
"""A fake Kubernetes API server for Orchard's kubernetes driver tests.

Serves core/v1 pods, secrets and namespaces (read-only) and
networking.k8s.io/v1 networkpolicies over HTTP/1.1 like a real API server:
create (201, 409 AlreadyExists, 422 Invalid after strict validation against
python3-kubernetes' models), get (404 NotFound), list with label and field
selectors, delete (grace periods), patch (merge, strategic, json), watch
(chunked JSON lines, ADDED/MODIFIED/DELETED/BOOKMARK, ERROR 410 on a
resourceVersion older than the retained window), bearer-token auth (401),
and a simulated kubelet (fake_kubelet.py). Tests drive faults and pod
states through the Python API of FakeApiServer or the /_fake/ endpoints.
See tests/k8s/README.md.

    python3 tests/k8s/fake_apiserver.py --port 18820 [--token T] [--namespace N]...
"""

import argparse
import json
import re
import signal
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import k8s_validate  # noqa: E402
from fake_api import RESOURCES, Api  # noqa: E402
from fake_control import CONTROL_ROUTES  # noqa: E402
from fake_kubelet import Kubelet  # noqa: E402
from fake_status import ApiError  # noqa: E402
from fake_store import Store  # noqa: E402

MAX_BODY = 3 * 1024 * 1024

PREFIX = r"(?P<prefix>/api/v1|/apis/networking\.k8s\.io/v1)"
ROUTES = [
    re.compile(r"^" + PREFIX + r"(?P<watch>/watch)?/namespaces/(?P<ns>[^/]+)/"
               r"(?P<resource>[a-z]+)(?:/(?P<name>[^/]+)(?P<sub>/status)?)?$"),
    re.compile(r"^" + PREFIX + r"(?P<watch>/watch)?/(?P<resource>namespaces|nodes)"
               r"(?:/(?P<name>[^/]+))?$"),
    re.compile(r"^" + PREFIX + r"(?P<watch>/watch)?/(?P<resource>[a-z]+)$"),
]

DISCOVERY = {
    "/version": {"major": "1", "minor": "22", "gitVersion": "v1.22.0-orchard-fake",
                 "platform": "linux/amd64"},
    "/api": {"kind": "APIVersions", "versions": ["v1"],
             "serverAddressByClientCIDRs": []},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [{
        "name": "networking.k8s.io",
        "versions": [{"groupVersion": "networking.k8s.io/v1", "version": "v1"}],
        "preferredVersion": {"groupVersion": "networking.k8s.io/v1", "version": "v1"}}]},
}


class Fault:
    """An injected failure for requests matching method and path (regex)."""

    def __init__(self, status=500, method=None, path=None, count=1, retry_after=None,
                 drop=False, delay=0.0, message=None):
        self.status, self.method, self.count = status, method, count
        self.path = re.compile(path) if path else None
        self.retry_after, self.drop, self.delay = retry_after, drop, delay
        self.message = message
        self.hits = 0

    def matches(self, method, path):
        if self.count is not None and self.hits >= self.count:
            return False
        if self.method and self.method.upper() != method:
            return False
        return not self.path or self.path.search(path) is not None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "orchard-fake-apiserver"

    def log_message(self, fmt, *args):
        if self.server.fake.verbose:
            sys.stderr.write("fake-apiserver: " + (fmt % args) + "\n")

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def do_PUT(self):
        self._dispatch("PUT")

    # -- plumbing -----------------------------------------------------------

    def _send(self, code, body, headers=None):
        data = (json.dumps(body) + "\n").encode() if not isinstance(body, bytes) else body
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Audit-Id", "fake")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _read_body(self):
        te = self.headers.get("Transfer-Encoding", "")
        if te.lower() == "chunked":
            raise ApiError(400, "chunked request bodies are not supported by the fake")
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise ApiError(400, "bad Content-Length")
        if n > MAX_BODY:
            self.close_connection = True
            raise ApiError(413, "request entity too large", "RequestEntityTooLarge")
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return None, raw
        try:
            return json.loads(raw), raw
        except ValueError as e:
            raise ApiError(400, "the body is not valid JSON: %s" % e)

    def _dispatch(self, method):
        fake = self.server.fake
        url = urllib.parse.urlsplit(self.path)
        path = url.path
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query,
                                                             keep_blank_values=True).items()}
        body, raw = None, b""
        try:
            body, raw = self._read_body()
        except ApiError as e:
            self._send(e.code, e.status, e.headers)
            return
        if path.startswith("/_fake/"):
            self._control(method, path, body)
            return
        entry = fake.record(method, path, query, self.headers, body)
        code = None
        try:
            code = self._serve(method, path, query, body)
        except ApiError as e:
            code = e.code
            self._send(e.code, e.status, e.headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            entry["code"] = code

    def _serve(self, method, path, query, body):
        fake = self.server.fake
        if path in ("/healthz", "/readyz", "/livez"):
            self._send(200, b"ok")
            return 200
        token = fake.token
        if token is not None and self.headers.get("Authorization") != "Bearer " + token:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        fault = fake.take_fault(method, path)
        if fault is not None:
            if fault.delay:
                time.sleep(fault.delay)
            if fault.drop:
                self.close_connection = True
                self.connection.shutdown(2)
                return 0
            headers = {}
            if fault.retry_after is not None:
                headers["Retry-After"] = str(fault.retry_after)
            raise ApiError(fault.status, fault.message or "injected fault %d" % fault.status,
                           headers=headers,
                           details={"retryAfterSeconds": fault.retry_after}
                           if fault.retry_after is not None else None)
        if path in DISCOVERY and method == "GET":
            self._send(200, DISCOVERY[path])
            return 200
        route = None
        for r in ROUTES:
            route = r.match(path)
            if route:
                break
        if route is None:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        g = route.groupdict()
        resource, ns, name = g["resource"], g.get("ns"), g.get("name")
        if resource not in RESOURCES or RESOURCES[resource][0] != g["prefix"]:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        if not RESOURCES[resource][3]:      # cluster-scoped: namespaces, nodes
            if ns is not None:
                raise ApiError(404, "the server could not find the requested resource",
                               "NotFound")
            ns = None
        if g.get("watch") or (method == "GET" and not name and
                              query.get("watch") in ("1", "true")):
            if method != "GET":
                raise ApiError(405, "watch needs GET", "MethodNotAllowed")
            if name:
                query["fieldSelector"] = "metadata.name=" + name
            return self._watch(resource, ns, query)
        api = fake.api
        if method == "GET":
            code, out = api.get(resource, ns, name) if name else api.list(resource, ns, query)
        elif method == "POST" and not name:
            if not RESOURCES[resource][4] or ns is None:
                raise ApiError(405, "the server does not allow this method on the requested "
                               "resource", "MethodNotAllowed")
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            if ctype not in ("application/json", ""):
                raise ApiError(415, 'the body of the request was in an unknown format - '
                               'accepted media types include: application/json',
                               "UnsupportedMediaType")
            code, out = api.create(resource, ns, body, query)
        elif method == "DELETE" and name and not g.get("sub"):
            code, out = api.delete(resource, ns, name, body, query)
        elif method == "DELETE" and not name and ns is not None:
            code, out = api.deletecollection(resource, ns, body, query)
        elif method == "PATCH" and name and not g.get("sub"):
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            code, out = api.patch(resource, ns, name, body, ctype)
        else:
            raise ApiError(405, "the server does not allow this method on the requested "
                           "resource", "MethodNotAllowed")
        self._send(code, out)
        return code

    def _watch(self, resource, ns, query):
        events = self.server.fake.api.watch(resource, ns, query)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.flush()
        try:
            for ev in events:
                if ev == "DROP":
                    self.close_connection = True
                    self.connection.shutdown(2)   # no final chunk: a broken stream
                    return 200
                data = (json.dumps(ev) + "\n").encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
        finally:
            if hasattr(events, "close"):
                events.close()
        return 200

    def _control(self, method, path, body):
        fake = self.server.fake
        for m, pattern, fn in CONTROL_ROUTES:
            match = re.match(pattern, path)
            if match and m == method:
                try:
                    out = fn(fake, body or {}, **match.groupdict())
                except (KeyError, TypeError, ValueError) as e:
                    self._send(400, {"error": str(e)})
                    return
                self._send(200, out if out is not None else {"ok": True})
                return
        self._send(404, {"error": "no control route %s %s" % (method, path)})


class FakeApiServer:
    """The fake, in-process. Use as a context manager or start()/stop().

    FakeApiServer(port=0, token=None, namespaces=("orchard-sandboxes",),
                  ready_delay=0.2, delete_delay=0.2, window=1000,
                  bookmark_interval=1.0, runner=None, decode_error_status=422)
    """

    def __init__(self, host="127.0.0.1", port=0, token=None,
                 namespaces=("orchard-sandboxes",), ready_delay=0.2, delete_delay=0.2,
                 window=1000, bookmark_interval=1.0, runner=None,
                 decode_error_status=422, pod_ip_prefix="127.0.0.", verbose=False,
                 nodes=(("fake-node-1", "64", "256Gi"),)):
        self.host, self.port, self.token, self.verbose = host, port, token, verbose
        self.store = Store(window)
        self.kubelet = Kubelet(self.store, ready_delay, delete_delay, pod_ip_prefix, runner)
        self.api = Api(self.store, self.kubelet, decode_error_status)
        self.api.bookmark_interval = bookmark_interval
        self.runner = runner
        self.faults = []
        self.requests = []
        self.lock = threading.Lock()
        self.httpd = None
        self.thread = None
        for ns in namespaces:
            self.add_namespace(ns)
        for name, cpu, memory in nodes:
            self.add_node(name, cpu, memory)

    # -- lifecycle ----------------------------------------------------------

    def start(self):
        self.httpd = ThreadingHTTPServer((self.host, self.port), Handler)
        self.httpd.daemon_threads = True
        self.httpd.fake = self
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                       name="fake-apiserver", daemon=True)
        self.thread.start()
        return self

    def stop(self):
        self.api.stopping = True
        self.store.drop_watches()
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None
        self.kubelet.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def url(self):
        return "http://%s:%d" % (self.host, self.port)

    # -- objects ------------------------------------------------------------

    def add_namespace(self, name):
        self.store.create("namespaces", {
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})

    def add_node(self, name, cpu, memory, labels=None, taints=None, ready=True,
                 unschedulable=False):
        """A Node (validated against V1Node) with status.allocatable cpu/memory."""
        node = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": dict({"kubernetes.io/hostname": name},
                                                     **(labels or {}))},
            "spec": {"unschedulable": unschedulable, "taints": taints or []},
            "status": {"capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
                       "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                       "reason": "KubeletReady" if ready else "KubeletNotReady"}]}}
        if not taints:
            del node["spec"]["taints"]
        causes = k8s_validate.validate_object(node, "Node", "v1")
        for key in ("cpu", "memory"):
            k8s_validate._check_quantity(node["status"]["allocatable"][key],
                                         "status.allocatable[%s]" % key, causes)
        if causes:
            raise ValueError("invalid node: %r" % causes)
        if self.store.create("nodes", node) is None:
            raise ValueError("node %s exists" % name)

    def remove_node(self, name):
        self.store.remove("nodes", None, name)

    def get(self, resource, ns, name):
        return self.store.get(resource, ns if RESOURCES[resource][3] else None, name)

    def objects(self, resource, ns=None):
        return [o for o in self.store.items(resource)
                if ns is None or o["metadata"].get("namespace") == ns]

    def create(self, resource, ns, obj):
        """Create as a client would (validated); returns the stored object."""
        return self.api.create(resource, ns, obj, {})[1]

    # -- faults -------------------------------------------------------------

    def fault(self, status=500, method=None, path=None, count=1, retry_after=None,
              drop=False, delay=0.0, message=None):
        """Fail the next `count` (None: all) requests matching method/path regex."""
        f = Fault(status, method, path, count, retry_after, drop, delay, message)
        with self.lock:
            self.faults.append(f)
        return f

    def clear_faults(self):
        with self.lock:
            self.faults = []

    def take_fault(self, method, path):
        with self.lock:
            for f in self.faults:
                if f.matches(method, path):
                    f.hits += 1
                    return f
        return None

    def drop_watches(self):
        """Cut every open watch connection (no final chunk)."""
        self.store.drop_watches()

    def compact(self):
        """Forget all past events: watches from any older rv get 410 Gone."""
        self.store.compact()

    def bookmark(self):
        """Make every open watch with bookmarks send one now."""
        self.store.bookmark_now()

    @property
    def resource_version(self):
        return self.store.rv

    # -- pod lifecycle (delegates to the kubelet) -----------------------------

    def pod_rule(self, action, **kw):
        """Pods created from now on matching image=/name= (fnmatch) and
        labels= (subset) get `action` instead of running; see fake_kubelet."""
        return self.kubelet.add_rule(action, **kw)

    def start_pod(self, ns, name):
        return self.kubelet.start(ns, name)

    def set_ready(self, ns, name, ready=True):
        return self.kubelet.set_ready(ns, name, ready)

    def set_waiting(self, ns, name, reason, message=None):
        return self.kubelet.set_waiting(ns, name, reason, message)

    def set_unschedulable(self, ns, name, message=None):
        return self.kubelet.set_unschedulable(ns, name, message)

    def terminate(self, ns, name, exit_code=1, reason=None, message=None):
        return self.kubelet.terminate(ns, name, exit_code, reason, message)

    def wait_for(self, pred, timeout=10.0, interval=0.02):
        """Poll pred() until truthy; returns its value or raises TimeoutError."""
        end = time.monotonic() + timeout
        while True:
            v = pred()
            if v:
                return v
            if time.monotonic() > end:
                raise TimeoutError("condition not met in %.1fs" % timeout)
            time.sleep(interval)

    def wait_pod_phase(self, ns, name, phase, timeout=10.0):
        return self.wait_for(lambda: (self.get("pods", ns, name) or {}).get(
            "status", {}).get("phase") == phase and self.get("pods", ns, name), timeout)

    # -- request log --------------------------------------------------------

    def record(self, method, path, query, headers, body):
        entry = {"method": method, "path": path, "query": query,
                 "content_type": headers.get("Content-Type"),
                 "authorization": headers.get("Authorization"),
                 "body": body, "time": time.time(), "code": None}
        with self.lock:
            self.requests.append(entry)
            if len(self.requests) > 10000:
                del self.requests[:5000]
        return entry

    def requests_matching(self, method=None, path=None):
        with self.lock:
            return [r for r in self.requests if (method is None or r["method"] == method)
                    and (path is None or re.search(path, r["path"]))]


def main(argv=None):
    p = argparse.ArgumentParser(description="fake Kubernetes API server for tests")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=18820)
    p.add_argument("--token")
    p.add_argument("--namespace", action="append", dest="namespaces")
    p.add_argument("--ready-delay", type=float, default=0.2)
    p.add_argument("--window", type=int, default=1000)
    p.add_argument("--agent-bin", help="run pods' orchard-agent with this binary")
    p.add_argument("--decode-error-status", type=int, default=422, choices=(400, 422))
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args(argv)
    runner = None
    if a.agent_bin:
        from fake_runner import LocalRunner
        runner = LocalRunner({"orchard-agent": a.agent_bin})
    fake = FakeApiServer(a.host, a.port, a.token, a.namespaces or ["orchard-sandboxes"],
                         a.ready_delay, window=a.window, runner=runner,
                         decode_error_status=a.decode_error_status, verbose=a.verbose)
    fake.start()
    print("fake apiserver listening on %s" % fake.url, flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    fake.stop()
    if runner:
        runner.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
