"""orchard-agent and orchard-api under valgrind memcheck over a short
scenario each (docs/reliability.md, "Valgrind").

    tests/valgrind/run.sh [agent] [api]        (both by default)

agent: bin/orchard-agent on a unix socket under memcheck; exec (plain,
argv, stdin, timeout, streaming, cancel, a missing program), files (raw,
base64, list, stat, mkdir, delete), tar (download, upload), git (apply,
diff, reset) and two PTY sessions; SIGTERM; its exit status and log.

api: a whole stack (tests/integration/stack.py) whose orchard-api runs under
memcheck (a bin dir where orchard-api is a wrapper script, the rest links to
bin/); through nginx: create, wait, exec (waited and queued), job get and
list, files, list, get, errors, delete; SIGTERM to the api; its log.

Pass: every memcheck log says "ERROR SUMMARY: 0 errors" with
--errors-for-leak-kinds=definite,indirect, so a definite or indirect leak
counts as an error (possibly lost and still reachable blocks do not: the
api's request threads are still alive when it _exit()s). Suppressions:
tests/valgrind/orchard.supp, third-party libraries only. Logs go to
/tmp/valgrind-*/ (kept on failure).
"""
import base64
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

VALGRIND = shutil.which("valgrind") or "/usr/bin/valgrind"
SUPP = os.path.join(HERE, "orchard.supp")
BIN = os.path.join(REPO, "bin")


def memcheck_argv(log_pattern):
    return [VALGRIND, "--tool=memcheck", "--leak-check=full",
            "--show-leak-kinds=definite,indirect", "--errors-for-leak-kinds=definite,indirect",
            "--error-exitcode=99", "--child-silent-after-fork=yes", "--num-callers=30",
            "--suppressions=" + SUPP, "--log-file=" + log_pattern]


def check_log(path):
    """(ok, summary line or reason) of one memcheck log."""
    with open(path, errors="replace") as f:
        text = f.read()
    m = re.search(r"ERROR SUMMARY: (\d+) errors", text)
    if not m:
        return False, "no ERROR SUMMARY (the process did not exit?)"
    leaks = re.search(r"definitely lost: ([\d,]+) bytes.*?indirectly lost: ([\d,]+) bytes", text, re.S)
    figures = "definitely lost %s B, indirectly lost %s B" % (leaks.group(1), leaks.group(2)) \
        if leaks else "no leaks"
    return m.group(1) == "0", "%s errors, %s" % (m.group(1), figures)


def logs_ok(logdir, prefix):
    logs = sorted(p for p in os.listdir(logdir) if p.startswith(prefix + ".") and p.endswith(".log"))
    if not logs:
        print("valgrind: %s: no memcheck log in %s" % (prefix, logdir))
        return False
    ok = True
    for name in logs:
        good, what = check_log(os.path.join(logdir, name))
        print("valgrind: %s: %s (%s)" % (prefix, what, name))
        if not good:
            ok = False
            with open(os.path.join(logdir, name), errors="replace") as f:
                sys.stdout.write(f.read()[-20000:])
    return ok


class Step:
    """Counts the checks of a scenario; a failed one is reported, not raised,
    so the process still gets its SIGTERM and its leak check."""

    def __init__(self, name):
        self.name, self.passed, self.failed = name, 0, []

    def check(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failed.append(what)
            print("valgrind: %s: FAILED %s" % (self.name, what))

    def run(self, what, fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - any failure of a step is reported
            self.check(False, "%s: %r" % (what, e))


# ---- the agent --------------------------------------------------------------

PATCH = """diff --git a/a.txt b/a.txt
--- a/a.txt
+++ b/a.txt
@@ -1 +1 @@
-one
+two
"""


def tar_of(files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def agent_scenario(agent, work, s):
    from test_agent_pty import agent_ws
    ws_dir = os.path.join(work, "ws")
    os.makedirs(ws_dir)

    def exec_(**body):
        status, res, _ = agent.request("POST", "/exec", body, timeout=120)
        s.check(status == 200, "exec %r: %s %r" % (body, status, res))
        return res or {}

    def execs():
        s.check(exec_(command="echo hi; echo err >&2", cwd=ws_dir)["stdout"] == "hi\n", "exec stdout")
        r = exec_(command=["/bin/sh", "-c", "cat; echo $FOO"], stdin="in\n", env={"FOO": "bar"})
        s.check(r["stdout"] == "in\nbar\n", "exec argv, stdin, env: %r" % r)
        s.check(exec_(command="sleep 5", timeout_seconds=0.5)["timed_out"] is True, "exec timeout")
        s.check(exec_(command=["/no/such/program"])["exit_code"] == 127, "exec missing program")
        s.check(exec_(command="head -c 100000 /dev/zero", max_output_bytes=1000)["stdout_truncated"],
                "exec output cap")
        status, data, _ = agent.request("POST", "/exec", {"command": "echo a; echo b >&2; exit 3",
                                                          "stream": True}, raw=True)
        lines = [json.loads(x) for x in data.decode().splitlines()]
        s.check(status == 200 and lines[-1]["type"] == "exit" and lines[-1]["exit_code"] == 3,
                "streaming exec: %r" % lines)
        status, res, _ = agent.request("POST", "/exec", b"{not json", timeout=30)
        s.check(status == 400, "bad JSON is 400: %s" % status)

    def cancel():
        out = {}
        t = threading.Thread(target=lambda: out.update(exec_(command="sleep 30", job_id="vg-1")))
        t.start()
        deadline = time.time() + 60
        while time.time() < deadline:
            status, res, _ = agent.request("POST", "/exec/cancel", {"job_id": "vg-1"})
            if status == 200:
                break
            time.sleep(0.2)
        t.join(90)
        s.check(out.get("cancelled") is True, "exec cancel: %r" % out)

    def files():
        blob = os.urandom(1 << 20)
        p = ws_dir + "/sub/blob.bin"
        status, res, _ = agent.request("PUT", "/files?path=" + p + "&mode=0600", blob)
        s.check(status == 200 and res["size"] == len(blob), "raw upload: %s %r" % (status, res))
        status, data, _ = agent.request("GET", "/files?path=" + p, raw=True)
        s.check(status == 200 and data == blob, "raw download")
        status, res, _ = agent.request("POST", "/files/base64", {
            "path": ws_dir + "/b64.txt", "content": base64.b64encode(b"x" * 1000).decode()})
        s.check(status == 200, "base64 upload: %s %r" % (status, res))
        status, res, _ = agent.request("GET", "/files/base64?path=" + ws_dir + "/b64.txt")
        s.check(status == 200 and base64.b64decode(res["content"]) == b"x" * 1000, "base64 download")
        os.symlink("missing", os.path.join(ws_dir, "dangling"))
        status, res, _ = agent.request("GET", "/files/list?path=" + ws_dir)
        s.check(status == 200 and [f["name"] for f in res["files"]] ==
                ["b64.txt", "dangling", "sub"], "list: %r" % res)
        status, res, _ = agent.request("GET", "/files/stat?path=" + p)
        s.check(status == 200 and res["mode"] == "0600", "stat: %r" % res)
        status, res, _ = agent.request("POST", "/files/mkdir", {"path": ws_dir + "/d/e/f"})
        s.check(status == 200, "mkdir: %r" % res)
        status, res, _ = agent.request("DELETE", "/files?path=" + ws_dir + "/d&recursive=1")
        s.check(status == 200, "delete: %r" % res)
        status, res, _ = agent.request("GET", "/files?path=" + ws_dir + "/nothing")
        s.check(status == 404, "missing file is 404: %s" % status)

    def tar():
        status, data, _ = agent.request("GET", "/archive?path=" + ws_dir + "/sub", raw=True)
        s.check(status == 200 and len(data) > (1 << 20), "tar download: %s %d" % (status, len(data)))
        status, res, _ = agent.request("PUT", "/archive?path=" + ws_dir + "/copy", data)
        s.check(status == 200 and res["entries"] == 1, "tar upload: %s %r" % (status, res))
        status, res, _ = agent.request("PUT", "/archive?path=" + ws_dir + "/evil",
                                       tar_of({"../escape": b"x"}))
        s.check(status == 400, "tar with .. is 400: %s %r" % (status, res))

    def git():
        repo = os.path.join(work, "repo")
        r = exec_(command="git init -q %s && cd %s && echo one > a.txt && git add a.txt && "
                          "git -c user.name=t -c user.email=t@e commit -qm init" % (repo, repo))
        s.check(r["exit_code"] == 0, "git init: %r" % r)
        status, res, _ = agent.request("POST", "/git/apply", {"patch": PATCH, "cwd": repo})
        s.check(status == 200 and res["success"] and res["files"] == ["a.txt"], "git apply: %r" % res)
        status, res, _ = agent.request("POST", "/git/apply", {"patch": PATCH, "cwd": repo})
        s.check(status == 200 and not res["success"], "git apply twice fails: %r" % res)
        status, res, _ = agent.request("GET", "/git/diff?cwd=" + repo)
        s.check(status == 200 and "+two" in res["patch"], "git diff: %r" % res)
        status, res, _ = agent.request("POST", "/git/reset", {"cwd": repo})
        s.check(status == 200 and res["success"], "git reset: %r" % res)
        with open(os.path.join(repo, "a.txt")) as f:
            s.check(f.read() == "one\n", "reset restored a.txt")

    def pty():
        ws = agent_ws(agent.sock, token=agent.token, timeout=60)
        s.check(ws.status == 101, "pty upgrade: %s" % ws.status)
        ws.send({"type": "init", "cmd": ["/bin/sh"], "rows": 24, "cols": 80})
        s.check(ws.recv()["type"] == "ready", "pty ready")
        ws.send({"type": "resize", "rows": 30, "cols": 100})
        ws.stdin("stty size; echo pty-$((40+2)); exit 3\n")
        out, code = ws.until_exit(seconds=60)
        s.check("pty-42" in out and "30 100" in out and code == 3, "pty: %r %r" % (out, code))
        ws.close()
        # A session the client drops: the agent kills it at shutdown.
        ws = agent_ws(agent.sock, token=agent.token, timeout=60)
        ws.send({"type": "init", "cmd": ["/bin/sh", "-c", "sleep 300"]})
        s.check(ws.recv()["type"] == "ready", "second pty ready")
        ws.drop()

    for name, fn in (("exec", execs), ("cancel", cancel), ("files", files), ("tar", tar),
                     ("git", git), ("pty", pty)):
        s.run(name, fn)


def run_agent(work):
    import agent_http
    logdir = os.path.join(work, "logs")
    os.makedirs(logdir)
    token = agent_http.TOKEN
    with open(os.path.join(work, "token"), "w") as f:
        f.write(token + "\n")
    sock = os.path.join(work, "agent.sock")
    argv = memcheck_argv(os.path.join(logdir, "agent.%p.log")) + [
        os.path.join(BIN, "orchard-agent"), "--listen", "unix:" + sock,
        "--token-file", os.path.join(work, "token")]
    out = open(os.path.join(work, "agent.stderr"), "wb")
    proc = subprocess.Popen(argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                            env=dict(os.environ, ORCHARD_LOG_LEVEL="info"))
    out.close()
    agent = agent_http.Agent(sock, token, proc.pid)
    s = Step("agent")
    deadline = time.time() + 60
    while True:
        try:
            if agent.request("GET", "/health", timeout=5)[0] == 200:
                break
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            s.check(False, "the agent did not answer /health (exit %s)" % proc.poll())
            break
        time.sleep(0.2)
    if not s.failed:
        agent_scenario(agent, work, s)
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(120)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    s.check(rc == 0, "agent exit status %s (99: memcheck errors)" % rc)
    print("valgrind: agent: %d checks passed, %d failed, exit status %s" % (
        s.passed, len(s.failed), rc))
    return logs_ok(logdir, "agent") and not s.failed


# ---- the api ----------------------------------------------------------------

def api_scenario(stack, s):
    admin = stack.session()
    url = stack.url

    def expect(r, status, what):
        s.check(r.status_code in (status if isinstance(status, tuple) else (status,)), "%s: %s %s" % (what, r.status_code, r.text[:300]))
        return r.json() if r.content and r.headers.get("content-type", "").startswith(
            "application/json") else {}

    sid = expect(admin.post(url + "/v1/sandboxes", json={"image": "host", "labels": {"vg": "1"}}),
                 (200, 201), "create").get("sandbox_id")
    if not sid:
        r = admin.get(url + "/v1/sandboxes")
        s.check(False, "no sandbox id; list: %s" % r.text[:300])
        return
    box = "%s/v1/sandboxes/%s" % (url, sid)
    expect(admin.get(box + "/wait", params={"timeout": 120}, timeout=200), 200, "wait")
    r = expect(admin.post(box + "/exec", json={"command": "echo hi", "wait": True}), 200, "exec")
    s.check(r.get("stdout") == "hi\n", "exec stdout: %r" % r)
    r = expect(admin.post(box + "/exec", json={"command": ["sh", "-c", "exit 4"]}),
               200, "exec queued")
    job = r.get("job_id")
    if job:
        r = expect(admin.get("%s/v1/jobs/%s/wait" % (url, job), params={"timeout": 120}, timeout=200),
                   200, "job wait")
        s.check(r.get("exit_code") == 4, "queued job's exit code: %r" % r)
    expect(admin.get(box + "/jobs"), 200, "job list")
    expect(admin.post(box + "/files", json={"path": "/workspace/f.txt",
                                            "content": base64.b64encode(b"data").decode()}),
           200, "file upload")
    r = expect(admin.get(box + "/files", params={"path": "/workspace/f.txt"}), 200, "file download")
    s.check(base64.b64decode(r.get("content", "")) == b"data", "file content: %r" % r)
    expect(admin.get(box + "/files/list", params={"path": "/workspace"}), 200, "file list")
    r = expect(admin.get(url + "/v1/sandboxes", params={"label": "vg=1"}), 200, "list")
    expect(admin.get(box), 200, "get")
    expect(admin.get(box + "/trajectory"), 200, "trajectory")
    expect(admin.post(url + "/v1/sandboxes", data="{bad json",
                      headers={"Content-Type": "application/json"}), 400, "bad JSON")
    expect(admin.get(url + "/v1/sandboxes/no-such-box"), 404, "unknown sandbox")
    expect(stack.anonymous().get(url + "/v1/sandboxes"), 401, "no key")
    expect(admin.delete(box), 200, "delete")
    expect(admin.get(box), 404, "deleted sandbox")


def api_wrapper_bin(work, logdir):
    """A bin dir like bin/ whose orchard-api runs under memcheck."""
    d = os.path.join(work, "bin")
    os.makedirs(d)
    for name in ("orchard-admin", "orchard-controller", "orchard-agent", "orchardctl",
                 "orchard-supervise"):
        os.symlink(os.path.join(BIN, name), os.path.join(d, name))
    argv = memcheck_argv(os.path.join(logdir, "api.%p.log")) + [os.path.join(BIN, "orchard-api")]
    with open(os.path.join(d, "orchard-api"), "w") as f:
        f.write("#!/bin/sh\nexec %s \"$@\"\n" % " ".join("'%s'" % a for a in argv))
    os.chmod(os.path.join(d, "orchard-api"), 0o755)
    return d


def gone(pid):
    """pid has exited (a zombie nobody reaped counts)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def stop_api(stack, timeout=120):
    with open(os.path.join(stack.run_dir, "api.pid")) as f:
        pid = int(f.read().split()[0])
    os.kill(pid, signal.SIGTERM)
    deadline = time.time() + timeout
    while not gone(pid) and time.time() < deadline:
        time.sleep(0.2)
    return gone(pid)


def run_api(work):
    logdir = os.path.join(work, "logs")
    os.makedirs(logdir, exist_ok=True)
    os.chmod(logdir, 0o777)
    os.environ["ORCHARD_BIN_DIR"] = api_wrapper_bin(work, logdir)
    # Fewer request threads: each is a valgrind thread, and all run serialised.
    os.environ.setdefault("ORCHARD_API_THREADS", "4")
    import stack as stackmod
    stackmod.BIN = os.environ["ORCHARD_BIN_DIR"]
    st = stackmod.Stack()
    s = Step("api")
    try:
        st.up()
        api_scenario(st, s)
        s.check(stop_api(st), "orchard-api did not exit after SIGTERM")
    except Exception as e:  # noqa: BLE001
        s.check(False, "stack: %r" % e)
        print(stackmod.log_tails(st.var))
    finally:
        st.down()
        st.remove()
    print("valgrind: api: %d checks passed, %d failed" % (s.passed, len(s.failed)))
    return logs_ok(logdir, "api") and not s.failed


def main(argv):
    which = argv or ["agent", "api"]
    if not os.access(VALGRIND, os.X_OK):
        print("valgrind: %s is missing (apt-get install valgrind; scripts/deps.sh)" % VALGRIND)
        return 1
    work = tempfile.mkdtemp(prefix="valgrind-", dir="/tmp")
    os.chmod(work, 0o755)
    ok = True
    for name in which:
        t0 = time.monotonic()
        sub = os.path.join(work, name)
        os.makedirs(sub)
        os.chmod(sub, 0o755)
        good = {"agent": run_agent, "api": run_api}[name](sub)
        print("valgrind: %s %s in %.0f s" % (name, "passed" if good else "FAILED",
                                             time.monotonic() - t0))
        ok = ok and good
    if ok:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print("valgrind: logs kept in %s" % work)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
