"""Files, git and raw streams through the whole stack (HTTPS -> nginx ->
orchard-api -> agent), as docs/openapi.yaml and docs/architecture.md
("Raw file streams") describe them: Orchard's base64 routes, stat, mkdir,
remove, apply_patch, diff, reset, raw and tar streams, the events each
change records, tenant isolation, and bad input that writes nothing.
"""
import base64
import hashlib
import io
import json
import os
import tarfile
import threading
import time
import zlib

import pytest

import fcgi_client

ERROR_SHAPE = {"detail", "code", "request_id"}
MiB = 1 << 20


def assert_error(r, status, code=None, contains=None):
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json()
    assert set(body) == ERROR_SHAPE, body
    if code:
        assert body["code"] == code, body
    if contains:
        assert contains in body["detail"], body
    return body


def b64(data):
    return base64.b64encode(data).decode()


@pytest.fixture(scope="module")
def box(stack, admin):
    """A fresh ready sandbox for this module (its events are ours alone)."""
    sid = stack.new_sandbox(admin)
    yield sid
    admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))


def url(stack, sid, tail, v1=True):
    return "%s%s/sandboxes/%s/%s" % (stack.url, "/v1" if v1 else "", sid, tail)


def run(stack, admin, sid, cmd):
    r = admin.post(url(stack, sid, "exec"), json={"command": cmd, "wait": True})
    assert r.status_code == 200, r.text
    return r.json()


def events(stack, sid, kind=None):
    sql = "SELECT kind, data FROM events WHERE sandbox_id = '%s'" % sid
    if kind:
        sql += " AND kind = '%s'" % kind
    return [(k, json.loads(d)) for k, d in stack.psql(sql + " ORDER BY id")]


def event_count(stack, sid):
    return int(stack.scalar("SELECT count(*) FROM events WHERE sandbox_id = '%s'" % sid))


# ---- Orchard's base64 routes ----------------------------------------------------------


def test_base64_round_trip_binary_mode_and_list(stack, admin, box):
    data = bytes(range(256)) * 40 + b"\x00\xff"
    r = admin.post(url(stack, box, "files", v1=False),
                   json={"path": "/workspace/sub/bin.dat", "content": b64(data), "mode": "0755"})
    assert r.status_code == 200, r.text
    assert r.json() == {"success": True, "path": "/workspace/sub/bin.dat", "size": len(data)}

    r = admin.get(url(stack, box, "files", v1=False), params={"path": "/workspace/sub/bin.dat"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["path"] == "/workspace/sub/bin.dat" and body["size"] == len(data)
    assert base64.b64decode(body["content"]) == data

    run(stack, admin, box, "ln -sfn /nowhere /workspace/sub/dangling")
    r = admin.get(url(stack, box, "files/list", v1=False), params={"path": "/workspace/sub"})
    assert r.status_code == 200, r.text
    listing = r.json()
    assert listing["path"] == "/workspace/sub"
    entries = {e["name"]: e for e in listing["files"]}
    assert [e["name"] for e in listing["files"]] == sorted(entries)
    assert entries["bin.dat"]["type"] == "file" and entries["bin.dat"]["size"] == len(data)
    assert entries["bin.dat"]["mode"] == "0755"
    assert entries["dangling"]["type"] == "symlink" and entries["dangling"]["target"] == "/nowhere"
    for e in listing["files"]:
        assert set(e) >= {"name", "type", "size", "modified"}

    # the default directory is /workspace
    r = admin.get(url(stack, box, "files/list", v1=False))
    assert r.status_code == 200 and r.json()["path"] == "/workspace"


def test_download_errors(stack, admin, box):
    assert_error(admin.get(url(stack, box, "files", v1=False), params={"path": "/workspace/missing.txt"}),
                 404, "not_found", "/workspace/missing.txt")
    assert_error(admin.get(url(stack, box, "files", v1=False), params={"path": "/workspace"}),
                 400, "bad_request")
    assert_error(admin.get(url(stack, box, "files/list"), params={"path": "/workspace/missing-dir"}),
                 404, "not_found", "/workspace/missing-dir")


def test_stat_mkdir_delete(stack, admin, box):
    r = admin.post(url(stack, box, "files/mkdir"), json={"path": "/workspace/d1/d2", "mode": "0700"})
    assert r.status_code == 200, r.text
    assert r.json()["path"] == "/workspace/d1/d2"
    r = admin.get(url(stack, box, "files/stat"), params={"path": "/workspace/d1/d2"})
    assert r.status_code == 200, r.text
    st = r.json()
    assert st["type"] == "directory" and st["mode"] == "0700" and st["name"] == "d2"
    assert admin.post(url(stack, box, "files"), json={"path": "/workspace/d1/f", "content": "eA=="}).ok

    assert_error(admin.delete(url(stack, box, "files"), params={"path": "/workspace/d1"}),
                 409, "conflict")
    assert_error(admin.post(url(stack, box, "files/mkdir"),
                            json={"path": "/workspace/d1", "parents": False}), 409, "conflict")
    r = admin.delete(url(stack, box, "files"), params={"path": "/workspace/d1", "recursive": "true"})
    assert r.status_code == 200 and r.json()["success"] is True, r.text
    assert_error(admin.get(url(stack, box, "files/stat"), params={"path": "/workspace/d1"}),
                 404, "not_found", "/workspace/d1")
    assert_error(admin.delete(url(stack, box, "files"), params={"path": "/workspace/d1"}),
                 404, "not_found")

    kinds = [(k, d["path"], d["success"]) for k, d in events(stack, box)
             if k in ("file.mkdir", "file.delete")]
    assert ("file.mkdir", "/workspace/d1/d2", True) in kinds
    assert ("file.mkdir", "/workspace/d1", False) in kinds        # refused: a failed step
    assert ("file.delete", "/workspace/d1", True) in kinds
    assert ("file.delete", "/workspace/d1", False) in kinds


# ---- git ----------------------------------------------------------------------------------


GIT = "git -c user.email=t@example.com -c user.name=t -c init.defaultBranch=main"


@pytest.fixture(scope="module")
def repo(stack, admin, box):
    job = run(stack, admin, box,
              "set -e; mkdir -p /workspace/repo && cd /workspace/repo && %s init -q && "
              "printf 'one\\ntwo\\nthree\\n' > a.txt && printf 'x\\n' > b.txt && "
              "%s add . && %s commit -qm init" % (GIT, GIT, GIT))
    assert job["exit_code"] == 0, job
    return "/workspace/repo"


PATCH_A = """diff --git a/a.txt b/a.txt
--- a/a.txt
+++ b/a.txt
@@ -1,3 +1,3 @@
 one
-two
+TWO
 three
"""

PATCH_BAD = """--- a/a.txt
+++ b/a.txt
@@ -1,3 +1,3 @@
 one
-TWO
+2
 three
--- a/b.txt
+++ b/b.txt
@@ -1 +1 @@
-not what is there
+y
"""


def read(stack, admin, sid, path):
    r = admin.get(url(stack, sid, "files"), params={"path": path})
    assert r.status_code == 200, r.text
    return base64.b64decode(r.json()["content"])


def test_apply_patch_check_success_and_failure(stack, admin, box, repo):
    r = admin.post(url(stack, box, "apply_patch"), json={"patch": PATCH_A, "check": True, "cwd": repo})
    assert r.status_code == 200, r.text
    assert r.json()["success"] is True and r.json()["check"] is True
    assert read(stack, admin, box, repo + "/a.txt") == b"one\ntwo\nthree\n"   # dry run

    r = admin.post(url(stack, box, "apply_patch", v1=False),
                   json={"patch": PATCH_A, "timeout_seconds": 30, "cwd": repo})
    assert r.status_code == 200, r.text
    body = r.json()
    assert {"success", "stdout", "stderr", "exit_code"} <= set(body)
    assert body["success"] is True and body["exit_code"] == 0 and body["files"] == ["a.txt"]
    assert read(stack, admin, box, repo + "/a.txt") == b"one\nTWO\nthree\n"

    # the second file does not apply: nothing changes, the message names it
    r = admin.post(url(stack, box, "apply_patch", v1=False), json={"patch": PATCH_BAD, "cwd": repo})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["success"] is False and body["exit_code"] == 1
    assert "b.txt" in body["stderr"], body
    assert read(stack, admin, box, repo + "/a.txt") == b"one\nTWO\nthree\n"
    assert read(stack, admin, box, repo + "/b.txt") == b"x\n"

    applied = events(stack, box, "git.apply")
    assert [(d["success"], d["exit_code"]) for _, d in applied][-2:] == [(True, 0), (False, 1)]
    assert applied[-2][1]["patch"] == PATCH_A and applied[-2][1]["files"] == ["a.txt"]
    assert "b.txt" in applied[-1][1]["stderr"]
    assert events(stack, box, "git.check")[-1][1]["success"] is True


def test_diff_has_untracked_files_and_reset_restores(stack, admin, box, repo):
    assert admin.post(url(stack, box, "files"),
                      json={"path": repo + "/new.txt", "content": b64(b"fresh\n")}).ok
    r = admin.get(url(stack, box, "git/diff"), params={"cwd": repo})
    assert r.status_code == 200, r.text
    diff = r.json()
    assert "b/new.txt" in diff["patch"] and "+fresh" in diff["patch"]
    assert "+TWO" in diff["patch"]

    r = admin.post(url(stack, box, "git/reset"), json={"ref": "no-such-ref", "cwd": repo})
    assert_error(r, 400, "bad_request", "no-such-ref")
    r = admin.post(url(stack, box, "git/reset"), json={"cwd": repo})
    assert r.status_code == 200, r.text
    assert r.json()["success"] is True and len(r.json()["head"]) == 40
    assert read(stack, admin, box, repo + "/a.txt") == b"one\ntwo\nthree\n"
    assert_error(admin.get(url(stack, box, "files/stat"), params={"path": repo + "/new.txt"}), 404)
    r = admin.get(url(stack, box, "git/diff"), params={"cwd": repo})
    assert r.status_code == 200 and r.json()["patch"] == ""

    resets = [d for _, d in events(stack, box, "git.reset")]
    assert resets[-2]["ref"] == "no-such-ref" and resets[-2]["success"] is False
    assert resets[-1]["ref"] is None and resets[-1]["success"] is True


def test_reset_without_a_body_resets_the_workspace(stack, admin):
    # The body of git/reset is optional (docs/openapi.yaml): no body at all
    # is {}, a reset of /workspace to HEAD, not a 400 for "bad JSON".
    sid = stack.new_sandbox(admin)
    try:
        job = run(stack, admin, sid,
                  "set -e; cd /workspace && %s init -q && echo kept > k.txt && %s add . && "
                  "%s commit -qm init && echo changed > k.txt && echo new > untracked.txt"
                  % (GIT, GIT, GIT))
        assert job["exit_code"] == 0, job
        r = admin.post(url(stack, sid, "git/reset"))
        assert r.status_code == 200, r.text
        assert r.json()["success"] is True and r.json()["cwd"] == "/workspace"
        assert read(stack, admin, sid, "/workspace/k.txt") == b"kept\n"
        assert_error(admin.get(url(stack, sid, "files/stat"),
                               params={"path": "/workspace/untracked.txt"}), 404)
        assert events(stack, sid, "git.reset")[-1][1]["success"] is True
        # a body that is there must still be a JSON object
        assert_error(admin.post(url(stack, sid, "git/reset"), data=b"[",
                                headers={"Content-Type": "application/json"}), 400, "bad_request")
    finally:
        admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))


# ---- raw streams --------------------------------------------------------------------------


def pids_of(stack):
    """orchard-api and the nginx workers."""
    def read_pid(name):
        with open(os.path.join(stack.run_dir, name + ".pid")) as f:
            return int(f.read().split()[0])
    master = read_pid("nginx")
    pids = [read_pid("api")]
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open("/proc/%s/stat" % p) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == master:
                        pids.append(int(p))
            except (OSError, IndexError, ValueError):
                pass
    return pids


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class RssSampler:
    """The largest RSS growth of some processes while a transfer runs."""

    def __init__(self, pids):
        self.pids = pids
        self.base = {p: rss_kib(p) for p in pids}
        self.peak = dict(self.base)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.is_set():
            for p in self.pids:
                try:
                    self.peak[p] = max(self.peak[p], rss_kib(p))
                except OSError:
                    pass
            time.sleep(0.02)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def growth_kib(self):
        return {p: self.peak[p] - self.base[p] for p in self.pids}


def access_log_line(stack, request_id):
    with open(os.path.join(stack.var, "log", "nginx-access.log")) as f:
        lines = [line for line in f if "rid=%s " % request_id in line]
    assert lines, request_id
    return lines[-1]


def test_raw_64mib_round_trip_streams_without_buffering(stack, admin, box, tmp_path):
    size = 64 * MiB
    src = tmp_path / "big.bin"
    h = hashlib.sha256()
    with open(src, "wb") as f:
        block = os.urandom(MiB)
        for i in range(64):
            chunk = bytes([i]) + block[1:]
            h.update(chunk)
            f.write(chunk)
    want = h.hexdigest()
    pids = pids_of(stack)

    with RssSampler(pids) as up, open(src, "rb") as f:
        r = admin.put(url(stack, box, "files/raw"), params={"path": "/workspace/big.bin"}, data=f,
                      headers={"X-Request-ID": "raw-up-1"})
    assert r.status_code == 200, r.text
    assert r.json() == {"path": "/workspace/big.bin", "size": size, "sha256": want}
    assert "api.sock" in access_log_line(stack, "raw-up-1")   # through the api (recorded)

    got = hashlib.sha256()
    n = 0
    with RssSampler(pids) as down:
        r = admin.get(url(stack, box, "files/raw"), params={"path": "/workspace/big.bin"},
                      stream=True, headers={"X-Request-ID": "raw-down-1"})
        assert r.status_code == 200, r.text
        assert r.headers["Content-Type"] == "application/octet-stream"
        assert int(r.headers["Content-Length"]) == size
        for chunk in r.iter_content(256 * 1024):
            got.update(chunk)
            n += len(chunk)
    assert n == size and got.hexdigest() == want
    line = access_log_line(stack, "raw-down-1")
    assert "agent.sock" in line and "api.sock" not in line, line   # nginx -> agent directly

    for sampler in (up, down):
        print("rss growth (KiB) by pid:", sampler.growth_kib())
        for pid, grew in sampler.growth_kib().items():
            assert grew < 24 * 1024, "pid %d grew by %d KiB moving %d MiB" % (pid, grew, size // MiB)

    ev = events(stack, box, "file.write")[-1][1]
    assert ev["path"] == "/workspace/big.bin" and ev["size"] == size and ev["sha256"] == want
    assert ev["success"] is True and "content" not in ev     # too big to keep


def test_raw_small_upload_keeps_content_and_mode(stack, admin, box):
    r = admin.put(url(stack, box, "files/raw", v1=False), params={"path": "/workspace/x.sh", "mode": "0750"},
                  data=b"#!/bin/sh\necho hi\n")
    assert r.status_code == 200, r.text
    ev = events(stack, box, "file.write")[-1][1]
    assert ev["mode"] == "0750" and base64.b64decode(ev["content"]) == b"#!/bin/sh\necho hi\n"
    assert ev["sha256"] == hashlib.sha256(b"#!/bin/sh\necho hi\n").hexdigest()
    st = admin.get(url(stack, box, "files/stat"), params={"path": "/workspace/x.sh"}).json()
    assert st["mode"] == "0750"
    # raw download errors answer in our shape, naming the path
    assert_error(admin.get(url(stack, box, "files/raw"), params={"path": "/workspace/nope"}),
                 404, "not_found", "/workspace/nope")
    assert_error(admin.get(url(stack, box, "files/raw"), params={"path": "/workspace"}), 400)


def test_raw_download_never_shows_the_agent_token(stack, admin, box):
    token = stack.scalar("SELECT agent_token FROM sandboxes WHERE id = '%s'" % box)
    assert admin.post(url(stack, box, "files"), json={"path": "/workspace/t.txt", "content": "dA=="}).ok
    for path in ("/workspace/t.txt", "/workspace/none"):
        r = admin.get(url(stack, box, "files/raw"), params={"path": path})
        blob = json.dumps(dict(r.headers)) + r.text
        assert token not in blob
        assert not any(k.lower().startswith("x-orchard") for k in r.headers), r.headers


def test_tar_directory_round_trip(stack, admin, box):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in (("top.txt", b"top\n"), ("sub/deep.bin", os.urandom(5000))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o640
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("link")
        link.type = tarfile.SYMTYPE
        link.linkname = "top.txt"
        tar.addfile(link)
    r = admin.put(url(stack, box, "archive"), params={"path": "/workspace/tree"}, data=buf.getvalue())
    assert r.status_code == 200, r.text
    assert r.json()["path"] == "/workspace/tree" and r.json()["entries"] >= 3
    ev = events(stack, box, "archive.upload")[-1][1]
    assert ev["success"] is True and ev["path"] == "/workspace/tree"

    r = admin.get(url(stack, box, "archive"), params={"path": "/workspace/tree"})
    assert r.status_code == 200 and r.headers["Content-Type"] == "application/x-tar"
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        names = {m.name: m for m in tar.getmembers()}
        assert tar.extractfile("top.txt").read() == b"top\n"
        assert names["link"].issym() and names["link"].linkname == "top.txt"
        assert names["top.txt"].mode & 0o777 == 0o640
        assert "sub/deep.bin" in names

    # an escaping entry is refused and recorded as a failed upload
    bad = io.BytesIO()
    with tarfile.open(fileobj=bad, mode="w") as tar:
        info = tarfile.TarInfo("../escape")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    assert_error(admin.put(url(stack, box, "archive"), params={"path": "/workspace/tree"},
                           data=bad.getvalue()), 400, "bad_request", "escape")
    assert events(stack, box, "archive.upload")[-1][1]["success"] is False


def gzip_bomb():
    """About 1 MiB of tar.gz that expands to 1 GiB of zeros."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    info = tarfile.TarInfo("zeros")
    info.size = 1 << 30
    out = [c.compress(info.tobuf(format=tarfile.GNU_FORMAT))]
    zeros = bytes(MiB)
    out += [c.compress(zeros) for _ in range(1024)]
    return b"".join(out + [c.compress(bytes(1024)), c.flush()])


def test_tar_bomb_and_refused_tar_leave_nothing_in_the_sandbox(stack, admin, box):
    """Issue 19 items 3 and 14 through the stack: a 1 MiB tar.gz bomb is a
    413 JSON error, a tar refused at its last entry is a 400, and neither
    leaves an entry (or a staging directory) in the sandbox."""
    run(stack, admin, box, "mkdir -p /workspace/atomic && echo old > /workspace/atomic/keep")
    bomb = gzip_bomb()
    assert len(bomb) < 2 * MiB
    assert_error(admin.put(url(stack, box, "archive"), params={"path": "/workspace/atomic"},
                           data=bomb), 413, None, "times its size")
    late = io.BytesIO()
    with tarfile.open(fileobj=late, mode="w") as tar:
        for name in ("keep", "new.txt", "../escape"):
            info = tarfile.TarInfo(name)
            info.size = 4
            tar.addfile(info, io.BytesIO(b"new\n"))
    assert_error(admin.put(url(stack, box, "archive"), params={"path": "/workspace/atomic"},
                           data=late.getvalue()), 400, "bad_request", "escape")
    out = run(stack, admin, box, "ls -A /workspace/atomic; cat /workspace/atomic/keep")
    assert out["stdout"] == "keep\nold\n", out


# ---- tenants, readiness, bad input --------------------------------------------------------


ROUTES = [
    ("post", "files", {"json": {"path": "/workspace/x", "content": "eA=="}}),
    ("get", "files", {"params": {"path": "/workspace/a"}}),
    ("delete", "files", {"params": {"path": "/workspace/a"}}),
    ("get", "files/list", {}),
    ("get", "files/stat", {"params": {"path": "/workspace"}}),
    ("post", "files/mkdir", {"json": {"path": "/workspace/m"}}),
    ("put", "files/raw", {"params": {"path": "/workspace/r"}, "data": b"raw"}),
    ("get", "files/raw", {"params": {"path": "/workspace/a"}}),
    ("put", "archive", {"params": {"path": "/workspace/t"}, "data": b"x" * 1024}),
    ("get", "archive", {"params": {"path": "/workspace"}}),
    ("post", "apply_patch", {"json": {"patch": PATCH_A}}),
    ("get", "git/diff", {}),
    ("post", "git/reset", {"json": {}}),
]


def test_other_tenant_gets_404_everywhere_and_changes_nothing(stack, admin, other, box):
    before = event_count(stack, box)
    listing = admin.get(url(stack, box, "files/list")).json()
    for method, tail, kw in ROUTES:
        for v1 in (True, False):
            r = getattr(other, method)(url(stack, box, tail, v1=v1), **kw)
            assert_error(r, 404, "not_found")
            assert box in r.json()["detail"], (method, tail, r.text)
    assert event_count(stack, box) == before
    assert admin.get(url(stack, box, "files/list")).json() == listing


def test_not_ready_sandbox_is_409(stack, admin):
    # Known to the api (so the create is accepted), never imported on disk:
    # the sandbox never becomes ready.
    stack.psql("INSERT INTO images (name, source, size_bytes) VALUES "
               "('no-such-image-for-files', 'test', 0) ON CONFLICT DO NOTHING")
    r = admin.post(stack.url + "/v1/sandboxes", json={"image": "no-such-image-for-files"})
    assert r.status_code in (200, 201), r.text
    sid = r.json()["sandbox_id"]
    try:
        for method, tail, kw in ROUTES:
            r = getattr(admin, method)(url(stack, sid, tail), **kw)
            assert_error(r, 409, "not_ready")
        assert event_count(stack, sid) == int(stack.scalar(
            "SELECT count(*) FROM events WHERE sandbox_id = '%s' AND kind LIKE 'sandbox.%%'" % sid))
    finally:
        admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))


@pytest.mark.parametrize("body,status,field", [
    ({"content": "eA=="}, 422, "path"),
    ({"path": "", "content": "eA=="}, 422, "path"),
    ({"path": "/workspace/a\u0000b", "content": "eA=="}, 422, "path"),
    ({"path": "/workspace/bad", "content": "not base64!"}, 400, "content"),
    ({"path": "/workspace/bad", "content": "eA="}, 400, "content"),
    ({"path": "/workspace/bad"}, 422, "content"),
    ({"path": "/workspace/bad", "content": 5}, 422, "content"),
    ({"path": "/workspace/bad", "content": "eA==", "mode": "999"}, 422, "mode"),
    ({"path": "/workspace/bad", "content": "eA==", "mode": 493}, 422, "mode"),
    ({"path": "/workspace/bad", "content": "eA==", "mode": "0000000644"}, 422, "mode"),
])
def test_bad_upload_writes_nothing(stack, admin, box, body, status, field):
    before = event_count(stack, box)
    r = admin.post(url(stack, box, "files"), json=body)
    assert_error(r, status, contains=field)
    assert event_count(stack, box) == before
    assert_error(admin.get(url(stack, box, "files/stat"), params={"path": "/workspace/bad"}), 404)


def test_bad_queries_and_huge_bodies_write_nothing(stack, admin, box):
    before = event_count(stack, box)
    assert_error(admin.get(url(stack, box, "files", v1=False)), 422, "invalid", "path")
    assert_error(admin.get(url(stack, box, "files/stat")), 422, "invalid", "path")
    assert_error(admin.delete(url(stack, box, "files")), 422, "invalid", "path")
    assert_error(admin.put(url(stack, box, "files/raw"), data=b"x"), 422, "invalid", "path")
    assert_error(admin.get(url(stack, box, "files/raw")), 422, "invalid", "path")
    assert_error(admin.put(url(stack, box, "archive"), data=b"x"), 422, "invalid", "path")
    assert_error(admin.put(url(stack, box, "files/raw") + "?path=/workspace/a%00b", data=b"x"), 400)
    assert_error(admin.get(url(stack, box, "files") + "?path=/workspace/a%00b"), 400)
    assert_error(admin.get(url(stack, box, "files/stat") + "?path=/workspace/a%00b"), 400)
    assert_error(admin.put(url(stack, box, "files/raw"), params={"path": "/workspace/m", "mode": "8"},
                           data=b"x"), 422, "invalid", "mode")
    assert_error(admin.put(url(stack, box, "files/raw"), params={"path": "/workspace/m",
                                                                 "mode": "0000000644"},
                           data=b"x"), 422, "invalid", "mode")
    assert_error(admin.delete(url(stack, box, "files"), params={"path": "/workspace/x",
                                                                "recursive": "maybe"}), 422)
    assert_error(admin.post(url(stack, box, "apply_patch"), json={}), 422, "invalid", "patch")
    assert_error(admin.post(url(stack, box, "apply_patch"), json={"patch": 1}), 422, "invalid", "patch")
    assert_error(admin.post(url(stack, box, "apply_patch"), json={"patch": PATCH_A,
                                                                  "timeout_seconds": -1}), 422)
    assert_error(admin.post(url(stack, box, "git/reset"), json={"ref": 7}), 422, "invalid", "ref")
    # base64 that decodes past the 64 MiB of the base64 routes is refused
    # before the agent sees it, naming the raw route
    huge = "A" * ((64 * MiB + 3) // 3 * 4)
    r = admin.post(url(stack, box, "files"), data='{"path": "/workspace/huge", "content": "%s"}' % huge,
                   headers={"Content-Type": "application/json"})
    del huge
    assert_error(r, 413, "too_large", "PUT /files/raw")
    assert event_count(stack, box) == before
    assert_error(admin.get(url(stack, box, "files/stat"), params={"path": "/workspace/huge"}), 404)


def test_bad_keys_on_raw_routes(stack, box):
    for method in ("get", "put"):
        for session, status in ((stack.anonymous(), 401), (stack.session(key="orch_x"), 403)):
            r = getattr(session, method)(url(stack, box, "files/raw"), params={"path": "/workspace/a"},
                                         data=b"x" if method == "put" else None)
            assert_error(r, status)


def test_responses_validate_against_the_spec(stack, admin, box, repo):
    jsonschema = pytest.importorskip("jsonschema")
    yaml = pytest.importorskip("yaml")
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "openapi.yaml")) as f:
        spec = yaml.safe_load(f)

    def check(r, method, tail):
        op = spec["paths"]["/v1/sandboxes/{sandbox_id}/" + tail][method]
        resp = op["responses"].get(str(r.status_code))
        assert resp is not None, "%s %s: %d is not documented" % (method, tail, r.status_code)
        if "$ref" in resp:
            resp = spec["components"]["responses"][resp["$ref"].split("/")[-1]]
        schema = resp["content"]["application/json"]["schema"]
        jsonschema.Draft202012Validator(dict(spec, **schema)).validate(r.json())

    p = {"path": "/workspace/spec.txt"}
    check(admin.post(url(stack, box, "files"), json=dict(p, content="c3BlYw==")), "post", "files")
    check(admin.get(url(stack, box, "files"), params=p), "get", "files")
    check(admin.get(url(stack, box, "files"), params={"path": "/nope"}), "get", "files")
    check(admin.get(url(stack, box, "files/list")), "get", "files/list")
    check(admin.get(url(stack, box, "files/stat"), params=p), "get", "files/stat")
    check(admin.post(url(stack, box, "files/mkdir"), json={"path": "/workspace/specdir"}),
          "post", "files/mkdir")
    check(admin.put(url(stack, box, "files/raw"), params=p, data=b"raw"), "put", "files/raw")
    check(admin.put(url(stack, box, "archive"), params={"path": "/workspace/spect"}, data=b"junk" * 300),
          "put", "archive")
    check(admin.post(url(stack, box, "apply_patch"), json={"patch": PATCH_A, "check": True, "cwd": repo}),
          "post", "apply_patch")
    check(admin.post(url(stack, box, "apply_patch"), json={"patch": "garbage"}), "post", "apply_patch")
    check(admin.get(url(stack, box, "git/diff"), params={"cwd": repo}), "get", "git/diff")
    check(admin.post(url(stack, box, "git/reset"), json={"cwd": repo}), "post", "git/reset")
    check(admin.delete(url(stack, box, "files"), params=p), "delete", "files")
    check(admin.get(url(stack, box, "files/stat")), "get", "files/stat")


# ---- /_auth_agent, spoken to directly over FastCGI -----------------------------------------


def fcgi_call(sock_path, params):
    """One FastCGI request to orchard-api; (status, headers) of the answer."""
    status, headers, _ = fcgi_client.call(sock_path, params, timeout=30)
    return status, headers


def auth_agent(stack, uri, method="GET", **headers):
    params = {"DOCUMENT_URI": "/_auth_agent", "SCRIPT_NAME": "/_auth_agent", "REQUEST_METHOD": "GET",
              "ORCHARD_ORIGINAL_URI": uri, "ORCHARD_ORIGINAL_METHOD": method}
    params.update({"HTTP_" + k.upper(): v for k, v in headers.items()})
    return fcgi_call(os.path.join(stack.run_dir, "api.sock"), params)


def test_auth_agent_contract(stack, other, box):
    key = stack.admin_key
    token = stack.scalar("SELECT agent_token FROM sandboxes WHERE id = '%s'" % box)
    address = stack.scalar("SELECT agent_address FROM sandboxes WHERE id = '%s'" % box)
    assert address.startswith("unix:/")
    for uri in ("/v1/sandboxes/%s/files/raw?path=/x" % box, "/sandboxes/%s/archive" % box):
        status, h = auth_agent(stack, uri, x_api_key=key)
        assert status == 204, h
        assert h["X-Orchard-Agent-Upstream"] == "http://%s:" % address
        assert h["X-Orchard-Agent-Token"] == token
        assert h["X-Orchard-Tenant"] == stack.scalar("SELECT id FROM tenants WHERE name = 'default'")
    # Orchard's PTY auth: ?api_key= or the api_key.<key> subprotocol
    pty = "/v1/sandboxes/%s/exec/pty" % box
    assert auth_agent(stack, pty + "?x=1&api_key=" + key)[0] == 204
    assert auth_agent(stack, pty, sec_websocket_protocol="orchard, api_key." + key)[0] == 204
    assert auth_agent(stack, pty)[0] == 401
    assert auth_agent(stack, pty + "?api_key=orch_nope")[0] == 403
    # the query key is for the PTY only
    assert auth_agent(stack, "/v1/sandboxes/%s/files/raw?api_key=%s" % (box, key))[0] == 401
    # not the caller's, not a proxied route, not a read: 403 and why, no agent
    other_key = other.headers["X-API-Key"]
    for uri, method, why in (("/v1/sandboxes/%s/files/raw" % box, "GET", "not_found"),
                             ("/v1/sandboxes/nope-%s/files/raw" % box, "GET", "not_found"),
                             ("/v1/sandboxes/%s/files" % box, "GET", "bad_uri"),
                             ("/v1/sandboxes/%s/../x/files/raw" % box, "GET", "bad_uri"),
                             ("/v1/sandboxes/%s/files/raw" % box, "PUT", "bad_method")):
        k = other_key if why == "not_found" and "nope" not in uri else key
        status, h = auth_agent(stack, uri, method=method, x_api_key=k)
        assert status == 403 and h["X-Orchard-Auth-Error"] == why, (uri, h)
        assert "X-Orchard-Agent-Token" not in h and "X-Orchard-Tenant" in h
    # only nginx's subrequest: from outside it does not exist
    r = stack.session().get(stack.url + "/v1/_auth_agent")
    assert_error(r, 404)
    assert not any(k.lower().startswith("x-orchard") for k in r.headers)
