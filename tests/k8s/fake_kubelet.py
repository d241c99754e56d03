"""The fake API server's kubelet and scheduler: pod phases, conditions, IPs.

A created pod is scheduled at once (Pending, PodScheduled=True, a node) and
becomes Running with a pod IP 127.0.0.N and Ready=True after `ready_delay`
seconds. With a `runner` (see fake_runner.py) the kubelet really starts the
pod's main container as a local process on that IP, reports Ready only when
the readiness probe passes, and reports the container terminated when the
process exits. Rules injected by tests turn matching pods into image-pull
failures, unschedulable pods or crashing containers instead.
"""

import copy
import fnmatch
import heapq
import itertools
import re
import threading
import time

from fake_store import now_rfc3339

ACTIONS = ("Run", "ErrImagePull", "ImagePullBackOff", "InvalidImageName",
           "Unschedulable", "CrashExit", "Stay")

IMAGE_REF = re.compile(
    r"^(?:[A-Za-z0-9.-]+(?::\d+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::\w[\w.-]{0,127})?"
    r"(?:@sha256:[0-9a-f]{64})?$")

DEFAULT_MESSAGES = {
    "ErrImagePull": 'rpc error: code = NotFound desc = failed to pull and unpack '
                    'image "%s": not found',
    "ImagePullBackOff": 'Back-off pulling image "%s"',
    "InvalidImageName": 'Failed to apply default image tag "%s": couldn\'t parse '
                        'image reference "%s": invalid reference format',
    "Unschedulable": "0/3 nodes are available: 3 Insufficient cpu. preemption: "
                     "0/3 nodes are available: 3 No preemption victims found for "
                     "incoming pod.",
}


class Timers:
    """One thread running callbacks at their due time."""

    def __init__(self):
        self.heap, self.seq = [], itertools.count()
        self.cond = threading.Condition()
        self.stopped = False
        self.thread = threading.Thread(target=self._run, name="fake-kubelet", daemon=True)
        self.thread.start()

    def after(self, delay, fn):
        with self.cond:
            heapq.heappush(self.heap, (time.monotonic() + delay, next(self.seq), fn))
            self.cond.notify()

    def stop(self):
        with self.cond:
            self.stopped = True
            self.cond.notify()
        self.thread.join(5)

    def _run(self):
        while True:
            with self.cond:
                while not self.stopped and (not self.heap or
                                            self.heap[0][0] > time.monotonic()):
                    wait = self.heap[0][0] - time.monotonic() if self.heap else None
                    self.cond.wait(wait)
                if self.stopped:
                    return
                _, _, fn = heapq.heappop(self.heap)
            try:
                fn()
            except Exception as e:  # a test's runner may fail; keep going
                print("fake kubelet: callback failed: %r" % (e,), flush=True)


class Kubelet:
    def __init__(self, store, ready_delay=0.2, delete_delay=0.2, pod_ip_prefix="127.0.0.",
                 runner=None, probe_period=0.1):
        self.store = store
        self.ready_delay = ready_delay
        self.delete_delay = delete_delay
        self.pod_ip_prefix = pod_ip_prefix
        self.runner = runner
        self.probe_period = probe_period
        self.rules = []
        self.lock = threading.Lock()
        self.free_ips = list(range(2, 255))
        self.ips = {}          # (ns, name) -> last octet
        self.procs = {}        # (ns, name) -> runner handle
        self.timers = Timers()

    def stop(self):
        self.timers.stop()
        with self.lock:
            procs, self.procs = list(self.procs.values()), {}
        for p in procs:
            p.stop()

    # -- rules --------------------------------------------------------------

    def add_rule(self, action, image=None, name=None, labels=None, message=None,
                 exit_code=1, after=None, count=None):
        """Pods matching image/name (fnmatch) and labels (subset) get `action`.

        `after`: seconds before the action shows (default ready_delay);
        `count`: how many pods the rule applies to (None: all).
        """
        if action not in ACTIONS:
            raise ValueError("action must be one of %s" % (ACTIONS,))
        rule = {"action": action, "image": image, "name": name, "labels": labels or {},
                "message": message, "exit_code": exit_code, "after": after, "count": count}
        with self.lock:
            self.rules.append(rule)
        return rule

    def clear_rules(self):
        with self.lock:
            self.rules = []

    def _rule_for(self, pod):
        meta, spec = pod["metadata"], pod["spec"]
        image = spec["containers"][0].get("image", "")
        labels = meta.get("labels") or {}
        with self.lock:
            for r in self.rules:
                if r["image"] and not fnmatch.fnmatchcase(image, r["image"]):
                    continue
                if r["name"] and not fnmatch.fnmatchcase(meta["name"], r["name"]):
                    continue
                if any(labels.get(k) != v for k, v in r["labels"].items()):
                    continue
                if r["count"] is not None:
                    if r["count"] <= 0:
                        continue
                    r["count"] -= 1
                return r
        if not IMAGE_REF.match(image):
            return {"action": "InvalidImageName", "message": None, "after": None}
        return {"action": "Run", "message": None, "after": None}

    # -- lifecycle ----------------------------------------------------------

    def pod_created(self, pod):
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        rule = self._rule_for(pod)
        action = rule["action"]
        delay = self.ready_delay if rule["after"] is None else rule["after"]
        if action == "Unschedulable":
            msg = rule["message"] or DEFAULT_MESSAGES["Unschedulable"]
            self.timers.after(0, lambda: self.set_unschedulable(ns, name, msg))
            return
        self.timers.after(0, lambda: self._schedule(ns, name))
        if action == "Stay":
            return
        if action in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName"):
            self.timers.after(delay, lambda: self._pull_failure(ns, name, action,
                                                                rule["message"]))
            return
        self.timers.after(delay, lambda: self._start(ns, name))
        if action == "CrashExit":
            self.timers.after(delay * 2 + 0.05, lambda: self.terminate(
                ns, name, exit_code=rule["exit_code"], message=rule["message"]))

    def _alive(self, pod):
        return pod["metadata"].get("deletionTimestamp") is None and \
            pod["status"].get("phase") in ("Pending", "Running")

    def _update(self, ns, name, fn):
        def guarded(pod):
            if not self._alive(pod):
                return False
            return fn(pod)
        return self.store.update("pods", ns, name, guarded)

    def _schedule(self, ns, name):
        def fn(pod):
            pod["spec"]["nodeName"] = "fake-node-1"
            st = pod["status"]
            st["conditions"] = [_cond("PodScheduled", "True")]
            st["hostIP"] = "127.0.0.1"
        self._update(ns, name, fn)

    def _ip_for(self, ns, name):
        with self.lock:
            if (ns, name) not in self.ips:
                if not self.free_ips:
                    raise RuntimeError("fake kubelet: out of pod IPs")
                self.ips[(ns, name)] = self.free_ips.pop(0)
            return self.pod_ip_prefix + str(self.ips[(ns, name)])

    def _base_running_status(self, pod, ip, waiting=None):
        st = pod["status"]
        st["podIP"], st["podIPs"] = ip, [{"ip": ip}]
        st.setdefault("startTime", now_rfc3339())
        st["initContainerStatuses"] = [
            _cstatus(c, {"terminated": {"exitCode": 0, "reason": "Completed",
                                        "startedAt": st["startTime"],
                                        "finishedAt": st["startTime"]}}, ready=True)
            for c in pod["spec"].get("initContainers") or []]
        state = {"waiting": waiting} if waiting else {"running": {"startedAt": now_rfc3339()}}
        st["containerStatuses"] = [_cstatus(c, state, ready=False)
                                   for c in pod["spec"]["containers"]]
        st["conditions"] = [_cond("Initialized", "True"),
                            _cond("Ready", "False", "ContainersNotReady"),
                            _cond("ContainersReady", "False", "ContainersNotReady"),
                            _cond("PodScheduled", "True")]

    def _pull_failure(self, ns, name, reason, message):
        ip = self._ip_for(ns, name)

        def fn(pod):
            image = pod["spec"]["containers"][0].get("image", "")
            msg = message or DEFAULT_MESSAGES[reason].replace("%s", image)
            pod["status"]["phase"] = "Pending"
            self._base_running_status(pod, ip, waiting={"reason": reason, "message": msg})
        self._update(ns, name, fn)
        if reason == "ErrImagePull":   # the kubelet backs off and says so
            self.timers.after(self.ready_delay, lambda: self._pull_failure(
                ns, name, "ImagePullBackOff", None))

    def _start(self, ns, name):
        ip = self._ip_for(ns, name)
        pod = self.store.get("pods", ns, name)
        if pod is None or not self._alive(pod):
            return
        handle = None
        if self.runner is not None:
            try:
                handle = self.runner.start(pod, ip, self.store)
            except (OSError, RuntimeError, KeyError) as e:
                self.set_waiting(ns, name, "RunContainerError", str(e))
                return
            with self.lock:
                self.procs[(ns, name)] = handle

        def fn(p):
            p["status"]["phase"] = "Running"
            self._base_running_status(p, ip)
            for cs in p["status"]["containerStatuses"]:
                cs["started"] = True
        self._update(ns, name, fn)
        if handle is None:
            self.timers.after(0, lambda: self.set_ready(ns, name, True))
        else:
            self.timers.after(0, lambda: self._probe(ns, name, handle, ip))
        deadline = pod["spec"].get("activeDeadlineSeconds")
        if deadline:
            self.timers.after(deadline, lambda: self.deadline_exceeded(ns, name))

    def _probe(self, ns, name, handle, ip):
        pod = self.store.get("pods", ns, name)
        if pod is None or not self._alive(pod):
            return
        code = handle.poll()
        if code is not None:
            # Exited on its own, or stopped on purpose (terminate(), a
            # delete): those pop the handle before stopping it and report
            # their own exit, which this probe must not overwrite.
            with self.lock:
                if self.procs.get((ns, name)) is not handle:
                    return
                del self.procs[(ns, name)]
            if code < 0:            # killed by a signal: 128 + N, as a kubelet says
                code = 128 - code
            self.terminate(ns, name, exit_code=code,
                           message="process exited: %s" % handle.describe())
            return
        ready = handle.probe(pod, ip)
        cs = (pod["status"].get("containerStatuses") or [{}])[0]
        if ready != cs.get("ready"):
            self.set_ready(ns, name, ready)
        self.timers.after(self.probe_period, lambda: self._probe(ns, name, handle, ip))

    # -- what tests (and the runner) change ----------------------------------

    def start(self, ns, name):
        """Start a pod now that a Stay (or Unschedulable) rule holds back:
        scheduled, then Running as without a rule (with a runner, its
        process starts and Ready follows the probe)."""
        def fn():
            self._schedule(ns, name)
            self._start(ns, name)
        self.timers.after(0, fn)

    def set_ready(self, ns, name, ready=True):
        def fn(pod):
            if pod["status"].get("phase") != "Running":
                return False
            val = "True" if ready else "False"
            for c in pod["status"]["conditions"]:
                if c["type"] in ("Ready", "ContainersReady"):
                    c["status"] = val
                    c["lastTransitionTime"] = now_rfc3339()
                    c.pop("reason", None) if ready else c.update(reason="ContainersNotReady")
            for cs in pod["status"]["containerStatuses"]:
                cs["ready"] = ready
        return self._update(ns, name, fn)

    def set_waiting(self, ns, name, reason, message=None):
        """The main container waits with `reason` (ErrImagePull, ...)."""
        image_msg = DEFAULT_MESSAGES.get(reason, "%s")
        self._stop_proc(ns, name)

        def fn(pod):
            image = pod["spec"]["containers"][0].get("image", "")
            pod["status"]["phase"] = "Pending"
            ip = pod["status"].get("podIP") or self._ip_for(ns, name)
            self._base_running_status(pod, ip, waiting={
                "reason": reason, "message": message or image_msg.replace("%s", image)})
        return self._update(ns, name, fn)

    def set_unschedulable(self, ns, name, message=None):
        def fn(pod):
            pod["status"]["phase"] = "Pending"
            pod["status"]["conditions"] = [_cond(
                "PodScheduled", "False", "Unschedulable",
                message or DEFAULT_MESSAGES["Unschedulable"])]
        return self._update(ns, name, fn)

    def terminate(self, ns, name, exit_code=1, reason=None, message=None):
        """The main container exits; the pod fails (or succeeds on 0) when its
        restartPolicy is Never, else the container waits in CrashLoopBackOff."""
        self._stop_proc(ns, name)
        reason = reason or ("Completed" if exit_code == 0 else "Error")

        def fn(pod):
            st = pod["status"]
            term = {"exitCode": exit_code, "reason": reason,
                    "startedAt": st.get("startTime") or now_rfc3339(),
                    "finishedAt": now_rfc3339()}
            if message:
                term["message"] = message
            if not st.get("containerStatuses"):
                self._base_running_status(pod, st.get("podIP") or self._ip_for(ns, name))
            cs = st["containerStatuses"][0]
            cs["ready"], cs["started"] = False, False
            if pod["spec"].get("restartPolicy", "Always") == "Never":
                cs["state"] = {"terminated": term}
                st["phase"] = "Succeeded" if exit_code == 0 else "Failed"
            else:
                cs["restartCount"] += 1
                cs["lastState"] = {"terminated": term}
                cs["state"] = {"waiting": {"reason": "CrashLoopBackOff",
                                           "message": "back-off restarting failed container"}}
            for c in st.get("conditions") or []:
                if c["type"] in ("Ready", "ContainersReady"):
                    c["status"], c["reason"] = "False", "ContainersNotReady"
        return self._update(ns, name, fn)

    def deadline_exceeded(self, ns, name):
        self._stop_proc(ns, name)

        def fn(pod):
            st = pod["status"]
            st["phase"], st["reason"] = "Failed", "DeadlineExceeded"
            st["message"] = "Pod was active on the node longer than the specified deadline"
            for c in st.get("conditions") or []:
                if c["type"] in ("Ready", "ContainersReady"):
                    c["status"] = "False"
        return self._update(ns, name, fn)

    def pod_deleting(self, ns, name, grace):
        """A DELETE arrived: stop the container, remove the pod after the grace
        period (capped at delete_delay so tests stay fast)."""
        self._stop_proc(ns, name)
        self.timers.after(min(grace, self.delete_delay), lambda: self._remove(ns, name))

    def _remove(self, ns, name):
        self.store.remove("pods", ns, name)
        with self.lock:
            octet = self.ips.pop((ns, name), None)
            if octet is not None:
                self.free_ips.append(octet)

    def _stop_proc(self, ns, name):
        with self.lock:
            handle = self.procs.pop((ns, name), None)
        if handle is not None:
            handle.stop()

    def handle(self, ns, name):
        """The runner's handle for a pod (None without a runner)."""
        with self.lock:
            return self.procs.get((ns, name))


def _cond(ctype, status, reason=None, message=None):
    c = {"type": ctype, "status": status, "lastProbeTime": None,
         "lastTransitionTime": now_rfc3339()}
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


def _cstatus(container, state, ready):
    return {"name": container["name"], "image": container.get("image", ""),
            "imageID": "", "containerID": "", "ready": ready, "restartCount": 0,
            "started": False, "state": copy.deepcopy(state)}
