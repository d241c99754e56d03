"""orchardctl cp, files, patch, shell, keys and tenants, black-box against the
real stack (docs/cli.md, issue 7); tars that a hostile sandbox could send come
from the fake server of test_cli.py, since a real agent never makes them.
"""
import fcntl
import io
import json
import os
import re
import select
import shutil
import signal
import stat
import struct
import subprocess
import tarfile
import tempfile
import termios
import time

import pytest

from stack import sha256_file
from test_cli import CTL, clean_env, ctl, fake_api, home, sctl, stack_env  # noqa: F401 (fixtures)


@pytest.fixture
def work():
    d = tempfile.mkdtemp(prefix="cli-files-", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def rexec(stack, home, sandbox, script):
    r = sctl(stack, home, "exec", sandbox, "--", "sh", "-c", script)
    assert r.returncode == 0, r.stderr
    return r.stdout


# ---- cp ---------------------------------------------------------------------

def test_cp_100_mib_file_both_ways_checksums_equal(stack, sandbox, home, work):
    src = os.path.join(work, "big.bin")
    with open(src, "wb") as f:
        for _ in range(100):
            f.write(os.urandom(1 << 20))
    os.chmod(src, 0o640)
    want = sha256_file(src)
    r = sctl(stack, home, "cp", src, "%s:/workspace/big-%d.bin" % (sandbox, os.getpid()))
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and r.stderr == ""  # no progress bar without a terminal
    remote = "/workspace/big-%d.bin" % os.getpid()
    got = rexec(stack, home, sandbox, "sha256sum %s; stat -c %%a %s" % (remote, remote)).split()
    assert (got[0], got[2]) == (want, "640"), got
    back = os.path.join(work, "back.bin")
    r = sctl(stack, home, "cp", "%s:%s" % (sandbox, remote), back)
    assert r.returncode == 0, r.stderr
    assert sha256_file(back) == want
    assert stat.S_IMODE(os.stat(back).st_mode) == 0o640
    # Into an existing directory: under its own name; no temporary file left behind.
    r = sctl(stack, home, "cp", "%s:%s" % (sandbox, remote), work + "/")
    assert r.returncode == 0, r.stderr
    assert sha256_file(os.path.join(work, os.path.basename(remote))) == want
    assert not [n for n in os.listdir(work) if "orchardctl" in n], os.listdir(work)
    rexec(stack, home, sandbox, "rm -f " + remote)


def make_tree(root):
    os.makedirs(os.path.join(root, "sub", "deep"))
    with open(os.path.join(root, "run.sh"), "w") as f:
        f.write("#!/bin/sh\necho run\n")
    os.chmod(os.path.join(root, "run.sh"), 0o755)
    with open(os.path.join(root, "sub", "secret"), "w") as f:
        f.write("s3cret\n")
    os.chmod(os.path.join(root, "sub", "secret"), 0o600)
    with open(os.path.join(root, "sub", "deep", ".hidden"), "wb") as f:
        f.write(b"\x00\xff" * 1000)
    os.chmod(os.path.join(root, "sub"), 0o700)
    os.symlink("run.sh", os.path.join(root, "link"))
    os.symlink("/nonexistent/target", os.path.join(root, "dangling"))


def describe_tree(root):
    """{relative path: (type, mode, content or link target)} of a local tree."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", None, os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), None)
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), open(p, "rb").read())
    return out


def test_cp_directory_round_trip_keeps_symlinks_and_modes(stack, sandbox, home, work):
    src = os.path.join(work, "tree")
    make_tree(src)
    remote = "/workspace/tree-%d" % os.getpid()
    r = sctl(stack, home, "cp", src, "%s:%s" % (sandbox, remote))
    assert r.returncode == 0, r.stderr
    listing = rexec(stack, home, sandbox, "cd %s && stat -c '%%n %%a %%F' run.sh sub sub/secret && "
                    "readlink link dangling && cat link" % remote)
    assert "run.sh 755 regular file" in listing and "sub 700 directory" in listing, listing
    assert "sub/secret 600 regular file" in listing, listing
    assert "run.sh\n/nonexistent/target\n#!/bin/sh\n" in listing, listing
    dst = os.path.join(work, "back")
    r = sctl(stack, home, "cp", "%s:%s" % (sandbox, remote), dst)
    assert r.returncode == 0, r.stderr
    assert describe_tree(dst) == describe_tree(src)
    # cp -r: an existing directory gets the copy under the source's name.
    r = sctl(stack, home, "cp", src, "%s:%s" % (sandbox, remote))
    assert r.returncode == 0, r.stderr
    assert rexec(stack, home, sandbox, "readlink %s/tree/link" % remote) == "run.sh\n"
    r = sctl(stack, home, "cp", "%s:%s" % (sandbox, remote), dst)
    assert r.returncode == 0, r.stderr
    assert describe_tree(os.path.join(dst, os.path.basename(remote), "tree")) == describe_tree(src)
    rexec(stack, home, sandbox, "rm -rf " + remote)


def test_cp_through_stdin_and_stdout(stack, sandbox, home, work):
    remote = "%s:/workspace/piped-%d" % (sandbox, os.getpid())
    data = "line one\nline two é\n"
    r = sctl(stack, home, "cp", "-", remote + "/in.txt", input=data)
    assert r.returncode == 0, r.stderr
    r = sctl(stack, home, "cp", remote + "/in.txt", "-")
    assert (r.returncode, r.stdout) == (0, data), r.stderr
    # A tar on stdin is extracted into the directory; a directory to stdout is a tar.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        info = tarfile.TarInfo("t/x.sh")
        info.size, info.mode = 3, 0o751
        t.addfile(info, io.BytesIO(b"hi\n"))
    r = subprocess.run([CTL, "cp", "--tar", "-", remote + "/dir"], input=buf.getvalue(), capture_output=True,
                       env=clean_env(home, ORCHARD_URL=stack.url, ORCHARD_API_KEY=stack.admin_key,
                                     ORCHARD_CACERT=stack.cacert), timeout=120)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([CTL, "cp", remote, "-"], capture_output=True, timeout=120,
                       env=clean_env(home, ORCHARD_URL=stack.url, ORCHARD_API_KEY=stack.admin_key,
                                     ORCHARD_CACERT=stack.cacert))
    assert r.returncode == 0, r.stderr
    with tarfile.open(fileobj=io.BytesIO(r.stdout)) as t:
        members = {m.name: m for m in t.getmembers()}
        assert t.extractfile(members["in.txt"]).read() == data.encode()
        assert members["dir/t/x.sh"].mode & 0o7777 == 0o751
    r = sctl(stack, home, "cp", "--tar", remote + "/in.txt", "-")
    assert r.returncode == 125 and "--tar copies directories" in r.stderr
    rexec(stack, home, sandbox, "rm -rf /workspace/piped-%d" % os.getpid())


def test_cp_errors_name_what_is_wrong(stack, sandbox, home, work):
    r = sctl(stack, home, "cp", "%s:/nonexistent/x" % sandbox, work)
    assert r.returncode == 125 and "no such file or directory in the sandbox" in r.stderr, r.stderr
    r = sctl(stack, home, "cp", os.path.join(work, "missing"), "%s:x" % sandbox)
    assert r.returncode == 125 and 'cannot read "%s/missing"' % work in r.stderr, r.stderr
    r = sctl(stack, home, "cp", "nosuchsandbox:/x", work)
    assert r.returncode == 125 and "sandbox nosuchsandbox not found (HTTP 404" in r.stderr, r.stderr
    # The server refuses a tar that leaves the directory, and says which entry.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        info = tarfile.TarInfo("../escaped")
        info.size = 1
        t.addfile(info, io.BytesIO(b"x"))
    r = subprocess.run([CTL, "cp", "--tar", "-", "%s:/workspace/jail-%d" % (sandbox, os.getpid())],
                       input=buf.getvalue(), capture_output=True, timeout=120,
                       env=clean_env(home, ORCHARD_URL=stack.url, ORCHARD_API_KEY=stack.admin_key,
                                     ORCHARD_CACERT=stack.cacert))
    assert r.returncode == 125 and b"../escaped" in r.stderr, r.stderr
    assert rexec(stack, home, sandbox, "ls /workspace/escaped 2>&1 || true").startswith("ls:")


def hostile_tar(kind):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        ok = tarfile.TarInfo("fine.txt")
        ok.size = 2
        t.addfile(ok, io.BytesIO(b"ok"))
        if kind == "dotdot":
            bad = tarfile.TarInfo("sub/../../escaped")
        elif kind == "absolute":
            bad = tarfile.TarInfo("/tmp/orchardctl-escaped-%d" % os.getpid())
        else:
            lnk = tarfile.TarInfo("lnk")
            lnk.type, lnk.linkname = tarfile.SYMTYPE, ".."
            t.addfile(lnk)
            bad = tarfile.TarInfo("lnk/escaped")
        bad.size = 4
        t.addfile(bad, io.BytesIO(b"evil"))
    return buf.getvalue()


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink"])
def test_cp_download_refuses_a_tar_that_leaves_the_directory(home, work, fake_api, kind):
    body = hostile_tar(kind)

    def respond(req, n):
        if "/files/stat" in req["path"]:
            return 200, {}, {"path": "/workspace/d", "name": "d", "type": "directory", "size": 0,
                             "mode": "0755", "modified": "2026-01-01T00:00:00Z"}
        if "/archive" in req["path"]:
            return 200, {}, body
        return 404, {}, {"detail": "no route for %s" % req["path"]}
    url = fake_api(respond).url
    dest = os.path.join(work, "dest")
    r = ctl("cp", "sb1:/workspace/d", dest, home=home, ORCHARD_URL=url)
    assert r.returncode == 125, r.stderr
    assert "refusing entry" in r.stderr, r.stderr
    assert open(os.path.join(dest, "fine.txt")).read() == "ok"  # what came before stays
    assert not os.path.exists(os.path.join(work, "escaped"))
    assert not os.path.exists("/tmp/orchardctl-escaped-%d" % os.getpid())


# ---- files -------------------------------------------------------------------

def test_files_ls_cat_rm_mkdir(stack, sandbox, home):
    base = "/workspace/files-%d" % os.getpid()
    r = sctl(stack, home, "files", "mkdir", sandbox, base + "/a/b")
    assert r.returncode == 125 and "(HTTP 404" in r.stderr, r.stderr  # no -p: the parent is missing
    r = sctl(stack, home, "files", "mkdir", "-p", "-m", "0700", sandbox, base + "/a/b")
    assert r.returncode == 0, r.stderr
    assert sctl(stack, home, "files", "mkdir", "-p", sandbox, base + "/a/b").returncode == 0
    assert sctl(stack, home, "files", "mkdir", sandbox, base + "/a/b").returncode == 125
    rexec(stack, home, sandbox, "cd %s && printf hello > f.txt && ln -s f.txt l" % base)
    r = sctl(stack, home, "files", "ls", sandbox, base)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["MODE", "SIZE", "MODIFIED", "NAME"]
    assert re.match(r"^drwx------\s+\d+\s+\S+Z\s+a$", lines[1]), lines
    assert re.match(r"^-rw-r--r--\s+5\s+\S+\s+f.txt$", lines[2]), lines
    assert re.match(r"^lrwxrwxrwx\s+5\s+\S+\s+l -> f.txt$", lines[3]), lines
    assert sctl(stack, home, "files", "ls", sandbox, base, "-q").stdout == "a\nf.txt\nl\n"
    doc = json.loads(sctl(stack, home, "files", "ls", sandbox, base + "/a", "-o", "json").stdout)
    assert [(f["name"], f["type"], f["mode"]) for f in doc["files"]] == [("b", "directory", "0700")]
    r = sctl(stack, home, "files", "cat", sandbox, base + "/f.txt", base + "/l")
    assert (r.returncode, r.stdout) == (0, "hellohello"), r.stderr
    r = sctl(stack, home, "files", "cat", sandbox, base + "/nope")
    assert r.returncode == 125 and "/nope" in r.stderr and "(HTTP 404" in r.stderr, r.stderr
    r = sctl(stack, home, "files", "rm", sandbox, base + "/a")
    assert r.returncode == 125 and "-r removes a directory" in r.stderr, r.stderr
    assert sctl(stack, home, "files", "rm", "-r", sandbox, base + "/a", base + "/l").returncode == 0
    assert sctl(stack, home, "files", "ls", sandbox, base, "-q").stdout == "f.txt\n"
    assert sctl(stack, home, "files", "rm", sandbox, base + "/a").returncode == 125
    assert sctl(stack, home, "files", "rm", "-f", sandbox, base + "/a").returncode == 0
    r = sctl(stack, home, "files", "rm", "-f", "nosuchsandbox", "x")
    assert r.returncode == 125 and "sandbox nosuchsandbox not found" in r.stderr  # -f is for paths only
    sctl(stack, home, "files", "rm", "-r", sandbox, base)


# ---- patch ---------------------------------------------------------------------

GOOD_PATCH = """diff --git a/f.txt b/f.txt
--- a/f.txt
+++ b/f.txt
@@ -1,3 +1,3 @@
 one
-two
+TWO
 three
"""


def test_patch_apply_diff_reset(stack, sandbox, home, work):
    repo = "/workspace/repo-%d" % os.getpid()
    head = rexec(stack, home, sandbox, "mkdir -p %s && cd %s && git init -q && printf 'one\\ntwo\\nthree\\n' "
                 "> f.txt && git add f.txt && git -c user.name=t -c user.email=t@t commit -qm init && "
                 "git rev-parse HEAD" % (repo, repo)).strip()
    path = os.path.join(work, "good.patch")
    with open(path, "w") as f:
        f.write(GOOD_PATCH)
    r = sctl(stack, home, "patch", "apply", sandbox, path, "--check", "--cwd", repo)
    assert (r.returncode, r.stdout) == (0, "f.txt\n"), r.stderr
    assert sctl(stack, home, "patch", "diff", sandbox, "--cwd", repo).stdout == ""  # --check wrote nothing
    r = sctl(stack, home, "patch", "apply", sandbox, "--cwd", repo, input=GOOD_PATCH)
    assert (r.returncode, r.stdout) == (0, "f.txt\n"), r.stderr
    diff = sctl(stack, home, "patch", "diff", sandbox, "--cwd", repo)
    assert diff.returncode == 0 and "-two\n+TWO\n" in diff.stdout, diff.stdout
    doc = json.loads(sctl(stack, home, "patch", "diff", sandbox, "--cwd", repo, "-o", "json").stdout)
    assert doc["files"] == 1 and doc["patch"] == diff.stdout
    # Applying it again fails: the file no longer matches. Nothing changes.
    r = sctl(stack, home, "patch", "apply", sandbox, path, "--cwd", repo)
    assert r.returncode == 125, r.stdout
    assert 'the patch does not apply: patch does not apply to "f.txt": hunk #1' in r.stderr, r.stderr
    r = sctl(stack, home, "patch", "apply", sandbox, "--cwd", repo, input="this is not a patch\n")
    assert r.returncode == 125 and "the patch does not apply" in r.stderr, r.stderr
    r = sctl(stack, home, "patch", "apply", sandbox, "--cwd", repo, input="")
    assert r.returncode == 125 and "empty" in r.stderr
    r = sctl(stack, home, "patch", "reset", sandbox, "--cwd", repo)
    assert (r.returncode, r.stdout) == (0, head + "\n"), r.stderr
    assert sctl(stack, home, "patch", "diff", sandbox, "--cwd", repo).stdout == ""
    r = sctl(stack, home, "patch", "reset", sandbox, "no-such-ref", "--cwd", repo)
    assert r.returncode == 125 and "no-such-ref" in r.stderr and "(HTTP 400" in r.stderr, r.stderr
    rexec(stack, home, sandbox, "rm -rf " + repo)


# ---- shell ------------------------------------------------------------------

class Terminal:
    """orchardctl on a pseudo-terminal that is its controlling terminal."""

    def __init__(self, args, env):
        self.master, slave = os.openpty()
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        self.before = termios.tcgetattr(self.master)

        def setup():
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        self.p = subprocess.Popen([CTL] + args, stdin=slave, stdout=slave, stderr=slave, env=env,
                                  preexec_fn=setup, close_fds=True)
        os.close(slave)
        self.out = b""

    def read_until(self, pattern, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, self.out)
            if m:
                return m
            if select.select([self.master], [], [], 0.2)[0]:
                try:
                    data = os.read(self.master, 65536)
                except OSError:
                    break
                if not data:
                    break
                self.out += data
        raise AssertionError("no %r in %r" % (pattern, self.out[-500:]))

    def type(self, text):
        os.write(self.master, text)

    def attrs(self):
        return termios.tcgetattr(self.master)

    def finish(self, timeout=60):
        try:
            rc = self.p.wait(timeout=timeout)
        finally:
            if self.p.poll() is None:
                self.p.kill()
                self.p.wait()
        return rc

    def close(self):
        os.close(self.master)


def test_shell_on_a_terminal_types_resizes_exits_and_restores_the_terminal(stack, sandbox, home):
    t = Terminal(["shell", sandbox], stack_env(stack, home))
    try:
        t.read_until(rb"[#$] ")  # the prompt
        raw = t.attrs()
        assert not raw[3] & termios.ECHO and not raw[3] & termios.ICANON, raw  # raw while it runs
        t.type(b"echo hi$((6*7))\r")
        t.read_until(rb"hi42")
        fcntl.ioctl(t.master, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 101, 0, 0))
        time.sleep(0.5)  # SIGWINCH reaches orchardctl, the resize frame the sandbox
        t.type(b"stty size\r")
        t.read_until(rb"33 101")
        t.type(b"exit 3\r")
        assert t.finish() == 3
        assert t.attrs() == t.before
    finally:
        t.close()


def test_shell_killed_by_a_signal_restores_the_terminal(stack, sandbox, home):
    t = Terminal(["shell", sandbox, "--", "sh"], stack_env(stack, home))
    try:
        t.type(b"echo rea''dy\r")
        t.read_until(rb"ready")
        assert t.attrs() != t.before
        t.p.send_signal(signal.SIGTERM)
        assert t.finish() == -signal.SIGTERM
        assert t.attrs() == t.before
    finally:
        t.close()


def test_shell_and_exec_t_exit_codes_and_refusals(stack, sandbox, home):
    t = Terminal(["exec", "-t", sandbox, "--", "sh", "-c", "tty; exit 5"], stack_env(stack, home))
    try:
        t.read_until(rb"/dev/pts/\d+")
        assert t.finish() == 5
        assert t.attrs() == t.before
    finally:
        t.close()
    # Not on a terminal: stdin is sent as typed, then ^D.
    r = sctl(stack, home, "shell", sandbox, "--no-login", "--", "sh", input="echo piped; exit 4\n")
    assert r.returncode == 4 and "piped" in r.stdout, (r.stdout, r.stderr)
    r = sctl(stack, home, "shell", "nosuchsandbox")
    assert r.returncode == 125 and "not found (HTTP 404" in r.stderr, r.stderr
    r = sctl(stack, home, "shell", sandbox, key="orch_000000000000_" + "0" * 40, input="")
    assert r.returncode == 125 and "HTTP 403" in r.stderr, r.stderr


# ---- keys and tenants -----------------------------------------------------------

def test_tenants_and_keys_for_admins(stack, home):
    name = "cli-%d" % os.getpid()
    r = sctl(stack, home, "tenants", "create", name, "--max-sandboxes", "3", "--max-cpu", "500m",
             "--max-memory", "1Gi")
    assert (r.returncode, r.stdout) == (0, name + "\n"), r.stderr
    r = sctl(stack, home, "tenants", "set", name, "--max-memory", "none", "-o", "json")
    doc = json.loads(r.stdout)
    assert (doc["max_sandboxes"], doc["max_cpu_millis"], doc["max_memory_bytes"]) == (3, 500, None), doc
    r = sctl(stack, home, "tenants", "ls")
    assert re.search(r"^%s\s+0\s+0\s+0 B\s+3\s+500m\s+-\s" % name, r.stdout, re.M), r.stdout
    assert name in sctl(stack, home, "tenants", "ls", "-q").stdout.split()
    r = sctl(stack, home, "tenants", "create", name)
    assert r.returncode == 125 and "(HTTP 409" in r.stderr
    key = stack.new_tenant_key(name + "-k")
    key_id = key.split("_")[1]
    r = sctl(stack, home, "keys", "ls", "--tenant", name + "-k")
    assert re.search(r"^%s\s+%s-k\s+user\s.*\sactive\s" % (key_id, name), r.stdout, re.M), r.stdout
    assert key_id in [k["key_id"] for k in json.loads(sctl(stack, home, "keys", "ls", "-o", "json").stdout)["keys"]]
    r = sctl(stack, home, "tenants", "ls", key=key)  # not an admin
    assert r.returncode == 125 and "(HTTP 403" in r.stderr, r.stderr
    assert sctl(stack, home, "keys", "revoke", key_id).stdout == key_id + "\n"
    r = sctl(stack, home, "ls", key=key)
    assert r.returncode == 125 and "HTTP 403" in r.stderr
    assert "revoked" in sctl(stack, home, "keys", "ls", "--tenant", name + "-k").stdout
