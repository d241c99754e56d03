"""Runs a pod's main container as a local process, for the fake kubelet.

`LocalRunner(replace={"orchard-agent": "/path/bin/orchard-agent"})` makes
the fake API server act as a kubelet for Orchard's pods: it takes the main
container's `command` + `args`, replaces the program (by basename) with a
local binary, rewrites `tcp:HOST:PORT` listen addresses to the pod IP,
materialises secret and emptyDir volumes under a per-pod directory and
rewrites paths under their mountPaths to it, resolves `env` (literal
values, `secretKeyRef`, `fieldRef` to status.podIP / metadata.name /
metadata.namespace), and starts the process in its own session (with
`private_tmp=True` under bubblewrap with a /tmp of its own, so that pods do
not share the host's /tmp, as real pods do not). The
kubelet polls `probe()` (the container's readinessProbe: httpGet with
httpHeaders, tcpSocket; no probe = alive) and `poll()` (exit status).
"""

import base64
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import urllib.request
import urllib.error


class LocalRunner:
    def __init__(self, replace, workdir=None, log_dir=None, extra_env=None, private_tmp=False):
        self.replace = dict(replace)
        self.private_tmp = private_tmp
        self.workdir = workdir or tempfile.mkdtemp(prefix="k8s-pods-", dir="/tmp")
        self.log_dir = log_dir or self.workdir
        self.extra_env = dict(extra_env or {})

    def start(self, pod, ip, store):
        meta, spec = pod["metadata"], pod["spec"]
        podname = "%s_%s" % (meta["namespace"], meta["name"])
        root = os.path.join(self.workdir, podname)
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(root)
        c = spec["containers"][0]
        mounts = self._volumes(spec, c, root, meta["namespace"], store)
        argv = list(c.get("command") or []) + list(c.get("args") or [])
        if not argv:
            raise RuntimeError("pod %s: main container has no command" % podname)
        argv = [self._rewrite(a, mounts, ip) for a in argv]
        prog = os.path.basename(argv[0])
        if prog in self.replace:
            argv[0] = self.replace[prog]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        env.update(self.extra_env)
        for e in c.get("env") or []:
            env[e["name"]] = self._env_value(e, pod, ip, store)
        cwd = mounts.get(c.get("workingDir") or "", root)
        if self.private_tmp:
            # An empty /tmp per pod; the pod's volumes (under the runner's
            # workdir, itself under /tmp) and its log stay where they are.
            binds = []
            for d in (root, self.log_dir):
                binds += ["--bind", d, d]
            argv = ["bwrap", "--dev-bind", "/", "/", "--tmpfs", "/tmp"] + binds + argv
        log = open(os.path.join(self.log_dir, podname + ".log"), "ab")
        try:
            proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True)
        finally:
            log.close()
        return ProcessHandle(proc, argv, c)

    def _volumes(self, spec, container, root, ns, store):
        """mountPath -> local directory, for the container's volume mounts."""
        by_name = {v["name"]: v for v in spec.get("volumes") or []}
        out = {}
        for m in container.get("volumeMounts") or []:
            vol = by_name.get(m["name"], {})
            local = os.path.join(root, "vol-" + m["name"])
            os.makedirs(local, exist_ok=True)
            src = vol.get("secret")
            if src is not None:
                secret = store.get("secrets", ns, src["secretName"]) or {}
                data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
                for k, v in (secret.get("stringData") or {}).items():
                    data[k] = v.encode()
                items = src.get("items") or [{"key": k, "path": k} for k in data]
                for it in items:
                    if it["key"] in data:
                        path = os.path.join(local, it["path"])
                        os.makedirs(os.path.dirname(path), exist_ok=True)
                        with open(path, "wb") as f:
                            f.write(data[it["key"]])
                        os.chmod(path, src.get("defaultMode", 0o644) & 0o777)
            out[m["mountPath"].rstrip("/") or "/"] = local
        return out

    @staticmethod
    def _rewrite(arg, mounts, ip):
        prefix = ""
        if arg.startswith("--") and "=" in arg:
            prefix, arg = arg.split("=", 1)
            prefix += "="
        if arg.startswith("tcp:"):
            port = arg.rsplit(":", 1)[-1]
            return "%stcp:%s:%s" % (prefix, ip, port)
        for mp in sorted(mounts, key=len, reverse=True):
            if arg == mp or arg.startswith(mp + "/"):
                return prefix + mounts[mp] + arg[len(mp):]
        return prefix + arg

    @staticmethod
    def _env_value(e, pod, ip, store):
        if e.get("value") is not None:
            return e["value"]
        vf = e.get("valueFrom") or {}
        ref = vf.get("secretKeyRef")
        if ref:
            secret = store.get("secrets", pod["metadata"]["namespace"], ref["name"]) or {}
            if ref["key"] in (secret.get("stringData") or {}):
                return secret["stringData"][ref["key"]]
            return base64.b64decode((secret.get("data") or {}).get(ref["key"], "")).decode()
        field = (vf.get("fieldRef") or {}).get("fieldPath")
        return {"status.podIP": ip, "metadata.name": pod["metadata"]["name"],
                "metadata.namespace": pod["metadata"]["namespace"]}.get(field, "")

    def cleanup(self):
        shutil.rmtree(self.workdir, ignore_errors=True)


class ProcessHandle:
    def __init__(self, proc, argv, container):
        self.proc, self.argv, self.container = proc, argv, container

    def poll(self):
        return self.proc.poll()

    def describe(self):
        return " ".join(self.argv)

    def stop(self, timeout=5):
        if self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass

    def _port(self, port):
        if isinstance(port, int):
            return port
        for p in self.container.get("ports") or []:
            if p.get("name") == port:
                return p["containerPort"]
        return None

    def probe(self, pod, ip):
        probe = self.container.get("readinessProbe") or {}
        if probe.get("httpGet"):
            hg = probe["httpGet"]
            url = "http://%s:%s%s" % (ip, self._port(hg["port"]), hg.get("path", "/"))
            req = urllib.request.Request(url, headers={
                h["name"]: h["value"] for h in hg.get("httpHeaders") or []})
            try:
                with urllib.request.urlopen(req, timeout=1) as r:
                    return 200 <= r.status < 400
            except (urllib.error.URLError, OSError):
                return False
        if probe.get("tcpSocket"):
            try:
                with socket.create_connection((ip, self._port(probe["tcpSocket"]["port"])), 1):
                    return True
            except OSError:
                return False
        return True
