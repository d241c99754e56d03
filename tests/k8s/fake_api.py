"""The fake API server's resource verbs, independent of HTTP.

create, get, list, delete, deletecollection, patch and watch over the
resources in RESOURCES. Each verb returns (http_code, body) or raises
fake_status.ApiError; watch is a generator of events for the HTTP layer to
stream.
"""

import base64
import copy
import datetime
import json
import random
import string
import time

import k8s_validate
from fake_status import ApiError, already_exists, expired, invalid, not_found, success
from fake_store import Expired, Filter, SelectorError

RESOURCES = {
    # resource: (api prefix, apiVersion, kind, namespaced, writable)
    "pods": ("/api/v1", "v1", "Pod", True, True),
    "secrets": ("/api/v1", "v1", "Secret", True, True),
    "networkpolicies": ("/apis/networking.k8s.io/v1", "networking.k8s.io/v1",
                        "NetworkPolicy", True, True),
    "namespaces": ("/api/v1", "v1", "Namespace", False, False),
    "nodes": ("/api/v1", "v1", "Node", False, False),
}

PATCH_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json",
               "application/json-patch+json")


def group_of(resource):
    api_version = RESOURCES[resource][1]
    return api_version.split("/")[0] if "/" in api_version else ""


class Api:
    def __init__(self, store, kubelet, decode_error_status=422):
        self.store = store
        self.kubelet = kubelet
        # Real servers answer strict-decoding errors (unknown field, wrong
        # type) with 400 BadRequest; Orchard's contract tests want 422.
        self.decode_error_status = decode_error_status
        self.bookmark_interval = 1.0
        self.watch_timeout = 300.0
        self.stopping = False

    # -- create -------------------------------------------------------------

    def create(self, resource, ns, body, query):
        _, api_version, kind, _, writable = RESOURCES[resource]
        if not writable:
            raise ApiError(405, "the server does not allow this method on the "
                           "requested resource", "MethodNotAllowed")
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object")
        self._require_namespace(ns)
        meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else None
        if meta is not None and meta.get("namespace") not in (None, "", ns):
            raise ApiError(400, "the namespace of the provided object does not match "
                           "the namespace sent on the request")
        obj = copy.deepcopy(body)
        obj.setdefault("kind", kind)
        obj.setdefault("apiVersion", api_version)
        causes = self._validate(obj, kind, api_version, query)
        name = (meta or {}).get("name") or (meta or {}).get("generateName", "")
        if causes:
            self._raise_invalid(kind, name, causes, resource)
        meta = obj["metadata"]
        meta["namespace"] = ns
        for k in ("resourceVersion", "uid", "creationTimestamp", "deletionTimestamp"):
            meta.pop(k, None)
        if not meta.get("name"):
            meta["name"] = meta["generateName"] + "".join(
                random.choice(string.ascii_lowercase + string.digits) for _ in range(5))
        if resource == "pods":
            _default_pod(obj)
        if query.get("dryRun") == "All":
            return 201, obj
        stored = self.store.create(resource, obj)
        if stored is None:
            raise already_exists(resource, meta["name"], group_of(resource))
        if resource == "pods":
            self.kubelet.pod_created(stored)
        return 201, stored

    def _validate(self, obj, kind, api_version, query):
        causes = k8s_validate.validate_object(obj, kind, api_version)
        mode = query.get("fieldValidation", "Strict")
        if mode in ("Ignore", "Warn"):
            causes = [c for c in causes if c["reason"] != "FieldValueUnknown"]
        return causes

    def _raise_invalid(self, kind, name, causes, resource):
        decode = {"FieldValueUnknown", "FieldValueTypeInvalid"}
        code = self.decode_error_status if all(c["reason"] in decode for c in causes) else 422
        raise invalid(kind, name, causes, group_of(resource), code)

    def _require_namespace(self, ns):
        if ns is not None and self.store.get("namespaces", None, ns) is None:
            raise not_found("namespaces", ns)

    # -- read ---------------------------------------------------------------

    def get(self, resource, ns, name):
        obj = self.store.get(resource, ns, name)
        if obj is None:
            raise not_found(resource, name, group_of(resource))
        return 200, obj

    def list(self, resource, ns, query):
        _, api_version, kind, _, _ = RESOURCES[resource]
        flt = self._filter(ns, query)
        items, rv = self.store.list(resource, flt)
        for it in items:       # list items carry no kind/apiVersion on the wire
            it.pop("kind", None)
            it.pop("apiVersion", None)
        meta = {"resourceVersion": str(rv)}
        limit = _int(query.get("limit"), "limit", 0)
        start = 0
        if query.get("continue"):
            try:
                start = int(base64.b64decode(query["continue"]).decode())
            except ValueError:
                raise ApiError(400, "continue key is not valid")
        if limit > 0:
            if start + limit < len(items):
                meta["continue"] = base64.b64encode(str(start + limit).encode()).decode()
                meta["remainingItemCount"] = len(items) - start - limit
            items = items[start:start + limit]
        elif start:
            items = items[start:]
        return 200, {"kind": kind + "List", "apiVersion": api_version, "metadata": meta,
                     "items": items}

    def _filter(self, ns, query):
        try:
            return Filter(ns, query.get("labelSelector"), query.get("fieldSelector"))
        except SelectorError as e:
            raise ApiError(400, str(e))

    # -- delete -------------------------------------------------------------

    def delete(self, resource, ns, name, body, query):
        if not RESOURCES[resource][4]:
            raise ApiError(405, "the server does not allow this method", "MethodNotAllowed")
        opts = body if isinstance(body, dict) else {}
        obj = self.store.get(resource, ns, name)
        if obj is None:
            raise not_found(resource, name, group_of(resource))
        pre = opts.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != obj["metadata"]["uid"]:
            raise ApiError(409, "Precondition failed: UID in precondition: %s, UID in "
                           "object meta: %s" % (pre["uid"], obj["metadata"]["uid"]), "Conflict")
        if pre.get("resourceVersion") and pre["resourceVersion"] != obj["metadata"]["resourceVersion"]:
            raise ApiError(409, "Precondition failed: resourceVersion", "Conflict")
        if resource != "pods":
            gone = self.store.remove(resource, ns, name)
            if gone is None:
                raise not_found(resource, name, group_of(resource))
            return 200, success(name, resource, gone["metadata"]["uid"])
        grace = query.get("gracePeriodSeconds", opts.get("gracePeriodSeconds"))
        grace = _int(grace, "gracePeriodSeconds",
                     obj["spec"].get("terminationGracePeriodSeconds", 30))
        if grace == 0 or not obj["spec"].get("nodeName"):   # unscheduled: at once
            self.kubelet.pod_deleting(ns, name, 0)
            gone = self.store.remove("pods", ns, name)
            return 200, gone if gone is not None else obj

        def mark(pod):
            if pod["metadata"].get("deletionTimestamp"):
                return False
            when = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=grace)
            pod["metadata"]["deletionTimestamp"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
            pod["metadata"]["deletionGracePeriodSeconds"] = grace
        marked = self.store.update("pods", ns, name, mark)
        if marked is None:
            raise not_found(resource, name)
        self.kubelet.pod_deleting(ns, name, grace)
        return 200, marked

    def deletecollection(self, resource, ns, body, query):
        _, api_version, kind, _, _ = RESOURCES[resource]
        items, _ = self.store.list(resource, self._filter(ns, query))
        for it in items:
            try:
                self.delete(resource, it["metadata"]["namespace"], it["metadata"]["name"],
                            body, query)
            except ApiError:
                pass
        return 200, {"kind": kind + "List", "apiVersion": api_version,
                     "metadata": {"resourceVersion": str(self.store.rv)}, "items": items}

    # -- patch --------------------------------------------------------------

    def patch(self, resource, ns, name, body, content_type):
        _, api_version, kind, _, writable = RESOURCES[resource]
        if not writable:
            raise ApiError(405, "the server does not allow this method", "MethodNotAllowed")
        if content_type not in PATCH_TYPES:
            raise ApiError(415, "the body of the request was in an unknown format - "
                           "accepted media types include: " + ", ".join(PATCH_TYPES))
        current = self.store.get(resource, ns, name)
        if current is None:
            raise not_found(resource, name, group_of(resource))
        if content_type == "application/json-patch+json":
            patched = _json_patch(current, body)
        else:
            if not isinstance(body, dict):
                raise ApiError(400, "patch body must be a JSON object")
            patched = _merge_patch(current, body)
        want_rv = (body.get("metadata") or {}).get("resourceVersion") \
            if isinstance(body, dict) else None
        if want_rv and want_rv != current["metadata"]["resourceVersion"]:
            raise ApiError(409, 'Operation cannot be fulfilled on %s "%s": the object has '
                           'been modified; please apply your changes to the latest version '
                           'and try again' % (resource, name), "Conflict")
        for k in ("uid", "name", "namespace", "creationTimestamp", "resourceVersion"):
            patched["metadata"][k] = current["metadata"].get(k)
        patched["kind"], patched["apiVersion"] = kind, api_version
        causes = k8s_validate.validate_object(_without_server_fields(patched), kind, api_version)
        if resource == "pods":
            patched["status"] = current["status"]   # status only via /status
            spec_a, spec_b = dict(current["spec"]), dict(patched["spec"])
            spec_a.pop("activeDeadlineSeconds", None)
            spec_b.pop("activeDeadlineSeconds", None)
            if spec_a != spec_b:
                causes.append(k8s_validate.cause(
                    "FieldValueForbidden", "spec",
                    "Forbidden: pod updates may not change fields other than "
                    "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                    "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions "
                    "to existing tolerations) or `spec.terminationGracePeriodSeconds`"))
        if causes:
            self._raise_invalid(kind, name, causes, resource)

        def apply(obj):
            if obj.get("spec") != patched.get("spec"):
                patched["metadata"]["generation"] = obj["metadata"].get("generation", 1) + 1
            if _without_rv(obj) == _without_rv(patched):
                return False
            obj.clear()
            obj.update(copy.deepcopy(patched))
        out = self.store.update(resource, ns, name, apply)
        if out is None:
            raise not_found(resource, name, group_of(resource))
        return 200, out

    # -- watch --------------------------------------------------------------

    def watch(self, resource, ns, query):
        """An iterator of watch events (dicts) that ends with the watch.

        Checks the request first (ApiError before any byte is sent); the
        iterator yields the string "DROP" when the connection must be cut.
        """
        flt = self._filter(ns, query)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        timeout = _int(query.get("timeoutSeconds"), "timeoutSeconds", 0) or self.watch_timeout
        end = time.monotonic() + timeout
        _, api_version, kind, _, _ = RESOURCES[resource]
        rv_text = query.get("resourceVersion", "")
        store = self.store
        with store.lock:
            drop_gen, bm_gen = store.drop_generation, store.bookmark_generation
            if rv_text in ("", "0"):
                items, last = store.list(resource, flt)
                initial = [{"type": "ADDED", "object": o} for o in items]
            else:
                last = _int(rv_text, "resourceVersion", 0)
                initial = None
            try:
                sub = store.subscribe(resource, last, flt)
            except Expired as e:
                sub = None
                error = {"type": "ERROR", "object": expired(str(e))}
        if sub is None:
            return iter([error])
        return self._events(sub, initial, kind, api_version, bookmarks, end, drop_gen, bm_gen)

    def _events(self, sub, initial, *stream_args):
        try:
            for ev in initial or []:
                yield ev
            yield from self._stream(sub, *stream_args)
        finally:
            self.store.unsubscribe(sub)

    def _stream(self, sub, kind, api_version, bookmarks, end, drop_gen, bm_gen):
        store = self.store
        last_bookmark = time.monotonic()
        while not self.stopping:
            with store.lock:
                if not sub.queue and store.drop_generation == drop_gen and \
                        store.bookmark_generation == bm_gen:
                    now = time.monotonic()
                    wait = end - now
                    if bookmarks:
                        wait = min(wait, self.bookmark_interval - (now - last_bookmark))
                    if wait > 0:
                        store.changed.wait(wait)
                events, sub.queue = sub.queue, []
                dropped = store.drop_generation != drop_gen
                forced_bm = store.bookmark_generation != bm_gen
                bm_gen = store.bookmark_generation
                current = store.rv   # every matching event up to here is in `events`
            if dropped:
                yield "DROP"
                return
            for e in events:
                yield {"type": e.type, "object": e.obj}
            now = time.monotonic()
            if bookmarks and (forced_bm or now - last_bookmark >= self.bookmark_interval):
                yield {"type": "BOOKMARK", "object": {
                    "kind": kind, "apiVersion": api_version,
                    "metadata": {"resourceVersion": str(current)}}}
                last_bookmark = now
            if now >= end:
                return


def _int(value, name, default):
    if value is None or value == "":
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ApiError(400, "%s: invalid integer %r" % (name, value))


def _default_pod(pod):
    spec = pod["spec"]
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("securityContext", {})
    for c in (spec.get("initContainers") or []) + spec["containers"]:
        c.setdefault("imagePullPolicy", "Always" if c.get("image", "").endswith(":latest")
                     or ":" not in c.get("image", "").rsplit("/", 1)[-1] else "IfNotPresent")
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        c.setdefault("resources", {})
    pod["status"] = {"phase": "Pending", "qosClass": _qos(spec)}


def _qos(spec):
    cs = spec["containers"] + (spec.get("initContainers") or [])
    res = [c.get("resources") or {} for c in cs]
    if not any(r.get("limits") or r.get("requests") for r in res):
        return "BestEffort"
    for r in res:
        lim, req = r.get("limits") or {}, r.get("requests") or {}
        if not all(k in lim for k in ("cpu", "memory")):
            return "Burstable"
        if any(str(req.get(k, lim[k])) != str(lim[k]) for k in ("cpu", "memory")):
            return "Burstable"
    return "Guaranteed"


def _merge_patch(target, patch):
    """RFC 7386 JSON merge patch (also used for strategic merge patches on
    maps; lists are replaced whole)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k == "$patch" or k.startswith("$setElementOrder") or k.startswith("$retainKeys"):
            continue
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge_patch(out.get(k), v)
    return out


def _json_patch(target, ops):
    """RFC 6902 add/replace/remove/test on object paths."""
    if not isinstance(ops, list):
        raise ApiError(400, "json patch must be an array")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or "path" not in op:
            raise ApiError(400, "json patch operation must have a path")
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = doc
        try:
            for p in parts[:-1]:
                parent = parent[int(p)] if isinstance(parent, list) else parent[p]
            last = parts[-1]
            if isinstance(parent, list):
                last = len(parent) if last == "-" else int(last)
            kind = op.get("op")
            if kind == "add":
                parent.insert(last, op["value"]) if isinstance(parent, list) \
                    else parent.__setitem__(last, op["value"])
            elif kind == "replace":
                parent[last]  # must exist
                parent[last] = op["value"]
            elif kind == "remove":
                del parent[last]
            elif kind == "test":
                if parent[last] != op.get("value"):
                    raise ApiError(422, "testing value %s failed" % op["path"], "Invalid")
            else:
                raise ApiError(400, "unsupported json patch op %r" % kind)
        except (KeyError, IndexError, ValueError, TypeError):
            raise ApiError(422, "the server rejected our request due to an error in our "
                           "request: path %s" % op["path"], "Invalid")
    return doc


def _without_rv(obj):
    o = copy.deepcopy(obj)
    o["metadata"].pop("resourceVersion", None)
    return json.dumps(o, sort_keys=True)


def _without_server_fields(obj):
    """Object as a client would send it (status and server-set meta dropped)."""
    o = copy.deepcopy(obj)
    o.pop("status", None)
    return o
