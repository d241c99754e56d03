"""Soak: a mixed load on a whole local stack, watching for growth.

    /usr/bin/python3 tests/soak/soak.py [--seconds 120] [--interval 3]

Starts a stack (tests/integration/stack.py: scripts/stack.sh in a temporary
directory, binaries from bin/ or ORCHARD_BIN_DIR) and runs, for --seconds:

  churn    (1 thread)   create a sandbox, wait for it, exec, upload, list,
                        delete; again
  steady   (2 threads)  on one long-lived sandbox each: execs (waited,
                        queued + job wait, argv), file upload, download,
                        list and delete, sandbox get and list

Every --interval seconds it samples the resident set (VmRSS) and the open
descriptors of orchard-api, orchard-controller, nginx (master and workers
summed) and the agents of the two long-lived sandboxes. The first
--warmup seconds (default a sixth of the run, at least 15 s) are dropped,
the rest split into thirds; it passes when, for every process,

  max RSS of the last third <= max RSS of the first third + --rss-mib
  min fds of the last third <= min fds of the first third + --fds
  (descriptors in flight come and go; leaked ones raise the floor)

(defaults 4 MiB and 4; nginx: 8 MiB and 16, its keep-alive connections come
and go), no request failed, api and controller are still running, and once
the load stops and every sandbox is deleted no sandbox process is left.
Prints the figures; exit status 0 on pass, 1 otherwise.
"""
import argparse
import base64
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))

from stack import Stack, log_tails, processes_referencing  # noqa: E402

MIB = 1024 * 1024


# ---- processes ----------------------------------------------------------------

def read_pid(path):
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def proc_stat(pid):
    """(rss bytes, open fds) of pid, or None when it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
        return rss, len(os.listdir("/proc/%d/fd" % pid))
    except (OSError, StopIteration, ValueError):
        return None


def children_table():
    kids = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(p))
    return kids


def descendants(pid, kids):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def agent_pid(stack, sid):
    """The orchard-agent of a local sandbox: below the launcher whose command
    line names the sandbox's directory."""
    kids = children_table()
    for root, _ in processes_referencing(os.path.join(stack.var, "sandboxes", sid) + "/"):
        for p in descendants(root, kids):
            argv = cmdline(p)
            if argv and argv[0].endswith(b"orchard-agent"):
                return p
    return None


class Sampler:
    """Samples of {name: (rss, fds)} every interval seconds."""

    def __init__(self, stack, agents, interval):
        self.stack, self.agents, self.interval = stack, agents, interval
        self.samples = []        # (t, {name: (rss, fds)})
        self.missing = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def pids(self):
        run = self.stack.run_dir
        out = {"api": [read_pid(os.path.join(run, "api.pid"))],
               "controller": [read_pid(os.path.join(run, "controller.pid"))]}
        master = read_pid(os.path.join(run, "nginx.pid"))
        out["nginx"] = [master] + (descendants(master, children_table()) if master else [])
        for name, pid in self.agents.items():
            out[name] = [pid]
        return out

    def sample(self):
        row = {}
        for name, pids in self.pids().items():
            stats = [proc_stat(p) for p in pids if p]
            if not stats or stats[0] is None:
                self.missing.add(name)
                continue
            stats = [s for s in stats if s]
            row[name] = (sum(s[0] for s in stats), sum(s[1] for s in stats))
        self.samples.append((time.monotonic(), row))

    def _run(self):
        while not self.stop.wait(self.interval):
            self.sample()


# ---- load -----------------------------------------------------------------------

class Load:
    def __init__(self, stack, deadline):
        self.stack, self.deadline = stack, deadline
        self.ops, self.errors = {}, []
        self.lock = threading.Lock()

    def count(self, op):
        with self.lock:
            self.ops[op] = self.ops.get(op, 0) + 1

    def error(self, what):
        with self.lock:
            self.errors.append(what)
            if len(self.errors) <= 10:
                print("soak: ERROR %s" % what, flush=True)

    def call(self, s, op, method, url, want=200, **kw):
        try:
            r = s.request(method, self.stack.url + url, **kw)
        except Exception as e:  # noqa: BLE001 - any failure is an error
            self.error("%s %s: %r" % (method, url, e))
            return None
        self.count(op)
        if r.status_code != want:
            self.error("%s %s: %d %s" % (method, url, r.status_code, r.text[:200]))
            return None
        return r.json() if r.content else {}

    def running(self):
        return time.monotonic() < self.deadline and len(self.errors) < 50

    def churn(self):
        s = self.stack.session()
        n = 0
        while self.running():
            n += 1
            body = self.call(s, "create", "POST", "/v1/sandboxes",
                             json={"image": "host", "labels": {"soak": "churn"}})
            if not body:
                time.sleep(1)
                continue
            box = "/v1/sandboxes/%s" % body["sandbox_id"]
            if self.call(s, "wait", "GET", box + "/wait", params={"timeout": 60}, timeout=120):
                r = self.call(s, "exec", "POST", box + "/exec",
                              json={"command": "echo churn-%d" % n, "wait": True})
                if r and r.get("stdout") != "churn-%d\n" % n:
                    self.error("churn exec output %r" % r)
                self.call(s, "files", "POST", box + "/files",
                          json={"path": "/workspace/c.txt", "content": "Y2h1cm4="})
                self.call(s, "list", "GET", "/v1/sandboxes", params={"label": "soak=churn"})
            self.call(s, "delete", "DELETE", box)

    def steady(self, sid, tag):
        s = self.stack.session()
        box = "/v1/sandboxes/%s" % sid
        blob = base64.b64encode(os.urandom(64 * 1024)).decode()
        n = 0
        while self.running():
            n += 1
            r = self.call(s, "exec", "POST", box + "/exec",
                          json={"command": "echo %s-%d; head -c 20000 /dev/urandom | wc -c" % (tag, n),
                                "wait": True})
            if r and r.get("stdout") != "%s-%d\n20000\n" % (tag, n):
                self.error("steady exec output %r" % r)
            r = self.call(s, "exec", "POST", box + "/exec", json={"command": ["true"]})
            if r and r.get("job_id"):
                self.call(s, "job", "GET", "/v1/jobs/%s/wait" % r["job_id"], params={"timeout": 60},
                          timeout=120)
            path = "/workspace/%s-%d.bin" % (tag, n % 5)
            self.call(s, "files", "POST", box + "/files", json={"path": path, "content": blob})
            r = self.call(s, "files", "GET", box + "/files", params={"path": path})
            if r and r.get("content") != blob:
                self.error("download of %s differs" % path)
            self.call(s, "files", "GET", box + "/files/list", params={"path": "/workspace"})
            if n % 5 == 0:
                self.call(s, "files", "DELETE", box + "/files", params={"path": path})
            self.call(s, "get", "GET", box)
            self.call(s, "list", "GET", "/v1/sandboxes")


# ---- analysis ------------------------------------------------------------------

BOUNDS = {"nginx": (8 * MIB, 16)}


def analyse(samples, t0, warmup, rss_bound, fd_bound):
    """(ok, lines): growth per process between the first and last thirds."""
    kept = [(t, row) for t, row in samples if t - t0 >= warmup]
    if len(kept) < 6:
        return False, ["only %d samples after the warm-up: run longer" % len(kept)]
    third = len(kept) // 3
    first, last = kept[:third], kept[-third:]
    names = sorted({n for _, row in kept for n in row})
    lines = ["%-12s %25s %8s %14s %6s" % ("process", "RSS MiB first/last max", "growth",
                                          "fds first/last", "growth")]
    ok = True
    for name in names:
        rss_b, fd_b = BOUNDS.get(name, (rss_bound, fd_bound))
        a = [row[name] for _, row in first if name in row]
        b = [row[name] for _, row in last if name in row]
        if not a or not b:
            lines.append("%-12s missing samples" % name)
            ok = False
            continue
        r1, r2 = max(x[0] for x in a), max(x[0] for x in b)
        # Descriptors come and go with the requests in flight at the
        # sampling instant (an agent holds one per exec and connection), so
        # their maximum measures concurrency; a leak raises the floor.
        f1, f2 = min(x[1] for x in a), min(x[1] for x in b)
        bad = r2 > r1 + rss_b or f2 > f1 + fd_b
        ok = ok and not bad
        lines.append("%-12s %12.1f / %-10.1f %+8.2f %6d / %-6d %+6d%s" % (
            name, r1 / MIB, r2 / MIB, (r2 - r1) / MIB, f1, f2, f2 - f1,
            "   OVER (bound +%d MiB, +%d fds)" % (rss_b // MIB, fd_b) if bad else ""))
    return ok, lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--interval", type=float, default=3)
    ap.add_argument("--warmup", type=float, default=None)
    ap.add_argument("--rss-mib", type=float, default=4)
    ap.add_argument("--fds", type=int, default=4)
    args = ap.parse_args()
    warmup = args.warmup if args.warmup is not None else max(15.0, args.seconds / 6)

    stack = Stack()
    ok = True
    try:
        stack.up()
        admin = stack.session()
        steady = []
        for _ in range(2):
            r = admin.post(stack.url + "/v1/sandboxes", json={"image": "host", "labels": {"soak": "steady"}})
            assert r.status_code in (200, 201), r.text
            steady.append(r.json()["sandbox_id"])
        for sid in steady:
            stack.wait_ready(admin, sid)
        agents = {}
        for i, sid in enumerate(steady):
            pid = stack.wait_for(lambda: agent_pid(stack, sid), timeout=30, what="the agent of %s" % sid)
            agents["agent-%d" % (i + 1)] = pid

        t0 = time.monotonic()
        load = Load(stack, t0 + args.seconds)
        sampler = Sampler(stack, agents, args.interval)
        sampler.sample()
        sampler.thread.start()
        threads = [threading.Thread(target=load.churn)]
        threads += [threading.Thread(target=load.steady, args=(sid, "s%d" % i))
                    for i, sid in enumerate(steady)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        sampler.stop.set()
        sampler.thread.join()
        elapsed = time.monotonic() - t0

        good, lines = analyse(sampler.samples, t0, warmup, int(args.rss_mib * MIB), args.fds)
        print("soak: %.0f s of load, %d samples every %g s, first %.0f s dropped as warm-up" % (
            elapsed, len(sampler.samples), args.interval, warmup))
        print("soak: requests: %s; errors: %d" % (
            ", ".join("%s %d" % kv for kv in sorted(load.ops.items())), len(load.errors)))
        for line in lines:
            print("soak: " + line)
        if not good:
            print("soak: FAILED: growth over the bound")
        if load.errors:
            print("soak: FAILED: %d requests failed" % len(load.errors))
        if sampler.missing:
            print("soak: FAILED: processes gone during the run: %s" % ", ".join(sorted(sampler.missing)))
        ok = good and not load.errors and not sampler.missing

        for sid in steady:
            r = admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))
            if r.status_code != 200:
                print("soak: FAILED: delete %s: %d %s" % (sid, r.status_code, r.text))
                ok = False
        left = 0
        try:
            stack.wait_for(lambda: not processes_referencing(os.path.join(stack.var, "sandboxes") + "/"),
                           timeout=60, what="sandbox processes to end")
        except AssertionError:
            left = len(processes_referencing(os.path.join(stack.var, "sandboxes") + "/"))
            ok = False
        live = stack.scalar("SELECT count(*) FROM sandboxes WHERE state NOT IN ('deleted', 'failed')")
        print("soak: after the run: %s sandboxes not deleted, %d sandbox processes left" % (live, left))
        if live != "0":
            ok = False
    except Exception as e:  # noqa: BLE001 - report, tear down, fail
        print("soak: FAILED: %r\n%s" % (e, log_tails(stack.var)))
        ok = False
    finally:
        stack.down()
        stack.remove()
    print("soak: %s" % ("passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
