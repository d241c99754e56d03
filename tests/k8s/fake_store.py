"""Object store of the fake API server: resourceVersions, events, selectors.

One lock guards everything; one condition wakes watchers. Every write bumps
a single resourceVersion counter shared by all objects (as etcd's revision
does) and appends an event to a bounded log. A watch from resourceVersion N
replays the events after N from the log; when N is older than the oldest
retained event (the log is a window of `window` events, or `compact()` was
called), the watch fails with 410 Gone.
"""

import collections
import copy
import re
import threading
import uuid
import datetime


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Expired(Exception):
    """The requested resourceVersion is older than the retained window."""


# ---- selectors ------------------------------------------------------------

_SEL_IN = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_SEL_EQ = re.compile(r"^\s*([^\s!=]+)\s*(==|=|!=)\s*([^\s,]*)\s*$")
_SEL_EXISTS = re.compile(r"^\s*(!?)([^\s!=()]+)\s*$")


class SelectorError(ValueError):
    pass


def _split_selector(text):
    """Split on commas outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


def parse_label_selector(text):
    """A list of predicates over a labels dict; raises SelectorError."""
    preds = []
    for part in _split_selector(text or ""):
        m = _SEL_IN.match(part)
        if m:
            key, op = m.group(1), m.group(2)
            vals = {v.strip() for v in m.group(3).split(",") if v.strip()}
            if op == "in":
                preds.append(lambda l, k=key, vs=vals: l.get(k) in vs)
            else:
                preds.append(lambda l, k=key, vs=vals: l.get(k) not in vs)
            continue
        m = _SEL_EQ.match(part)
        if m:
            key, op, val = m.groups()
            if op == "!=":
                preds.append(lambda l, k=key, v=val: l.get(k) != v)
            else:
                preds.append(lambda l, k=key, v=val: l.get(k) == v)
            continue
        m = _SEL_EXISTS.match(part)
        if m:
            neg, key = m.groups()
            preds.append((lambda l, k=key: k not in l) if neg else
                         (lambda l, k=key: k in l))
            continue
        raise SelectorError("unable to parse requirement: %r" % part)
    return preds


FIELDS = {
    "metadata.name": lambda o: o["metadata"].get("name"),
    "metadata.namespace": lambda o: o["metadata"].get("namespace"),
    "status.phase": lambda o: (o.get("status") or {}).get("phase"),
    "spec.nodeName": lambda o: (o.get("spec") or {}).get("nodeName"),
}


def parse_field_selector(text):
    preds = []
    for part in _split_selector(text or ""):
        m = _SEL_EQ.match(part)
        if not m or m.group(1) not in FIELDS:
            raise SelectorError('field label not supported: "%s"' % part.strip())
        key, op, val = m.groups()
        get = FIELDS[key]
        if op == "!=":
            preds.append(lambda o, g=get, v=val: g(o) != v)
        else:
            preds.append(lambda o, g=get, v=val: g(o) == v)
    return preds


class Filter:
    """Namespace + label selector + field selector over whole objects."""

    def __init__(self, namespace=None, label_selector=None, field_selector=None):
        self.namespace = namespace
        self.labels = parse_label_selector(label_selector)
        self.fields = parse_field_selector(field_selector)

    def match(self, obj):
        meta = obj["metadata"]
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        labels = meta.get("labels") or {}
        return all(p(labels) for p in self.labels) and all(p(obj) for p in self.fields)


# ---- the store ------------------------------------------------------------

class Subscription:
    def __init__(self, resource, flt):
        self.resource, self.flt, self.queue = resource, flt, []


Event = collections.namedtuple("Event", "rv resource type obj")


class Store:
    def __init__(self, window=1000):
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.rv = 1
        self.objects = {}           # (resource, namespace, name) -> object
        self.events = collections.deque(maxlen=max(1, window))
        self.compacted = 1          # watches from an rv below this are Expired
                                    # (the rv of the newest forgotten event)
        self.drop_generation = 0    # bumped to make every open watch drop
        self.subscribers = set()    # open watches: each gets every later event
        self.bookmark_generation = 0

    # -- writes (caller holds nothing; each takes the lock) -----------------

    def _emit(self, resource, etype, obj):
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        if len(self.events) == self.events.maxlen:
            self.compacted = self.events[0].rv
        ev = Event(self.rv, resource, etype, copy.deepcopy(obj))
        self.events.append(ev)
        for sub in self.subscribers:
            if sub.resource == resource and sub.flt.match(ev.obj):
                sub.queue.append(ev)
        self.changed.notify_all()

    def create(self, resource, obj):
        """Store a new object; returns a copy, or None when the name exists."""
        with self.lock:
            meta = obj["metadata"]
            key = (resource, meta.get("namespace"), meta["name"])
            if key in self.objects:
                return None
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            meta.setdefault("generation", 1)
            self.objects[key] = obj
            self._emit(resource, "ADDED", obj)
            return copy.deepcopy(obj)

    def update(self, resource, namespace, name, fn):
        """Apply fn(obj) in place under the lock and emit MODIFIED.

        fn returns False to make no change. Returns a copy or None (absent).
        """
        with self.lock:
            obj = self.objects.get((resource, namespace, name))
            if obj is None:
                return None
            if fn(obj) is False:
                return copy.deepcopy(obj)
            self._emit(resource, "MODIFIED", obj)
            return copy.deepcopy(obj)

    def remove(self, resource, namespace, name):
        with self.lock:
            obj = self.objects.pop((resource, namespace, name), None)
            if obj is None:
                return None
            self._emit(resource, "DELETED", obj)
            return copy.deepcopy(obj)

    # -- reads --------------------------------------------------------------

    def get(self, resource, namespace, name):
        with self.lock:
            obj = self.objects.get((resource, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, resource, flt):
        """(items, resourceVersion) of the objects matching flt."""
        with self.lock:
            items = [copy.deepcopy(o) for (r, _, _), o in sorted(self.objects.items())
                     if r == resource and flt.match(o)]
            return items, self.rv

    def events_after(self, resource, rv, flt):
        """Events with rv > `rv` for `resource` that match; raises Expired."""
        with self.lock:
            if rv < self.compacted:
                raise Expired("too old resource version: %d (%d)" % (rv, self.compacted))
            return [e for e in self.events
                    if e.rv > rv and e.resource == resource and flt.match(e.obj)]

    def subscribe(self, resource, rv, flt):
        """Open a watch from `rv`: the retained events after it are queued
        at once and every later matching event as it happens (an open watch
        never falls out of the window, as with etcd). Raises Expired."""
        with self.lock:
            sub = Subscription(resource, flt)
            sub.queue.extend(self.events_after(resource, rv, flt))
            self.subscribers.add(sub)
            return sub

    def unsubscribe(self, sub):
        with self.lock:
            self.subscribers.discard(sub)

    def compact(self):
        """Forget every event so far: any watch from an older rv gets 410."""
        with self.lock:
            self.events.clear()
            self.compacted = self.rv

    def drop_watches(self):
        with self.lock:
            self.drop_generation += 1
            self.changed.notify_all()

    def bookmark_now(self):
        with self.lock:
            self.bookmark_generation += 1
            self.changed.notify_all()

    def items(self, resource):
        with self.lock:
            return [copy.deepcopy(o) for (r, _, _), o in self.objects.items() if r == resource]
