"""Every HTTP answer the integration suite receives from a stack, checked
against docs/openapi.yaml (issue 18, section 3).

install() wraps requests.Session.send (the tests' sessions and Orchard's
SDK, which uses requests) so that each answer from a registered stack URL
(Stack.up registers its own) is checked:
- the route and method are documented (a documented path with another
  method must answer 405; an undocumented path must answer 404);
- the status is among the operation's documented responses;
- a body the response declares is of a documented media type, and a JSON
  body validates against the schema (python3-jsonschema, JSON Schema
  2020-12 as OpenAPI 3.1 uses it); NDJSON is validated line by line.
Bodies of `stream=True` requests are not read here (the test reads them);
their status is still checked.

A disagreement is recorded, not raised (a test's own retry loop or thread
must not swallow it); conftest.py fails the test that received it, unless
the test is marked `spec_exempt` (it sends garbage on purpose).
ORCHARD_SPEC_CHECK=0 turns the whole check off.
"""
import json
import os
import re
import threading
from urllib.parse import urlsplit

import jsonschema
import requests
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC_PATH = os.path.join(REPO, "docs", "openapi.yaml")
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")

_lock = threading.Lock()
_bases = set()          # "https://127.0.0.1:PORT" of each stack
_problems = []
_spec = None


def enabled():
    return os.environ.get("ORCHARD_SPEC_CHECK", "1") != "0"


def register(base_url):
    """Check the answers of the stack at base_url from now on."""
    with _lock:
        _bases.add(base_url.rstrip("/"))


def take_problems():
    """The disagreements since the last call, and forget them."""
    with _lock:
        out = list(_problems)
        del _problems[:]
    return out


class Spec:
    def __init__(self, path=SPEC_PATH):
        with open(path) as f:
            self.doc = yaml.safe_load(f)
        self.resolver = jsonschema.RefResolver.from_schema(self.doc)
        self.routes = []
        for tmpl, item in self.doc["paths"].items():
            rx = re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(tmpl))
            if tmpl.startswith("/v1/"):
                rx = "(?:/v1)?" + rx[len(re.escape("/v1")):]
            ops = {m: op for m, op in item.items() if m in METHODS}
            if "x-websocket-get" in item:
                ops["get"] = item["x-websocket-get"]
            self.routes.append((re.compile("^" + rx + "$"), tmpl, ops))

    def deref(self, obj):
        while isinstance(obj, dict) and "$ref" in obj:
            obj = self.resolver.resolve(obj["$ref"])[1]
        return obj

    def route(self, path):
        for rx, tmpl, ops in self.routes:
            if rx.match(path):
                return tmpl, ops
        return None, None

    def validate(self, schema, instance):
        v = jsonschema.Draft202012Validator(schema, resolver=self.resolver)
        errors = sorted(v.iter_errors(instance), key=lambda e: list(e.absolute_path))
        return ["%s: %s" % ("/".join(map(str, e.absolute_path)) or "(body)", e.message[:300])
                for e in errors[:3]]

    def check(self, method, path, status, ctype, body):
        """Why this answer disagrees with the spec (a list, empty if it agrees);
        body is None when it was not read."""
        tmpl, ops = self.route(path)
        if tmpl is None:
            return [] if status == 404 else ["undocumented route (answered %d)" % status]
        op = ops.get(method.lower())
        if op is None:
            if status == 405:
                return self._error_body(status, ctype, body)
            return ["method %s not documented on %s (answered %d)" % (method, tmpl, status)]
        responses = op.get("responses", {})
        resp = responses.get(str(status)) or responses.get("%dXX" % (status // 100)) \
            or responses.get("default")
        if resp is None:
            return ["status %d not documented for %s %s (documented: %s)" % (
                status, method, tmpl, ", ".join(sorted(responses)))]
        resp = self.deref(resp)
        content = resp.get("content")
        if body is None or not content or method.upper() == "HEAD" or body == b"":
            return []
        media = (ctype or "").split(";")[0].strip().lower()
        match = None
        for name, mt in content.items():
            if name.split(";")[0].strip().lower() == media:
                match = mt
        if match is None:
            return ["%s %s %d: content type %r not documented (documented: %s)" % (
                method, tmpl, status, ctype, ", ".join(content))]
        schema = match.get("schema")
        if schema is None or media not in ("application/json", "application/x-ndjson"):
            return []
        where = "%s %s %d" % (method, tmpl, status)
        if media == "application/json":
            try:
                value = json.loads(body)
            except ValueError as e:
                return ["%s: body is not JSON (%s)" % (where, e)]
            return ["%s: %s" % (where, p) for p in self.validate(schema, value)]
        out = []
        lines = body.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        for n, line in enumerate(lines, 1):
            try:
                value = json.loads(line)
            except ValueError as e:
                # A stream cut off mid-line by the server is the test's business.
                if n == len(lines):
                    break
                out.append("%s: NDJSON line %d is not JSON (%s)" % (where, n, e))
                continue
            out += ["%s: line %d: %s" % (where, n, p) for p in self.validate(schema, value)]
            if len(out) >= 3:
                break
        return out

    def _error_body(self, status, ctype, body):
        if body is None or body == b"":
            return []
        try:
            value = json.loads(body)
        except ValueError:
            return ["%d answer is not JSON: %r" % (status, body[:200])]
        return ["%d: %s" % (status, p)
                for p in self.validate({"$ref": "#/components/schemas/Error"}, value)]


def spec():
    global _spec
    if _spec is None:
        _spec = Spec()
    return _spec


def _base(url):
    u = urlsplit(url)
    return "%s://%s" % (u.scheme, u.netloc), u.path


def check_response(r, streamed):
    base, path = _base(r.request.url)
    with _lock:
        if base not in _bases:
            return
    body = None if streamed else r.content
    problems = spec().check(r.request.method, path, r.status_code,
                            r.headers.get("Content-Type"), body)
    if problems:
        with _lock:
            _problems.append("%s %s -> %d:\n    %s" % (
                r.request.method, r.request.url, r.status_code, "\n    ".join(problems)))


_installed = False


def install():
    """Wrap requests.Session.send once (no-op when ORCHARD_SPEC_CHECK=0)."""
    global _installed
    if _installed or not enabled():
        return
    _installed = True
    spec()      # a spec that does not load fails at once
    original = requests.Session.send

    def send(self, request, **kw):
        r = original(self, request, **kw)
        try:
            check_response(r, kw.get("stream", False))
        except Exception as e:  # noqa: BLE001 - a checker bug must show, not pass
            with _lock:
                _problems.append("spec_check failed on %s %s: %r" % (
                    request.method, request.url, e))
        return r

    requests.Session.send = send
