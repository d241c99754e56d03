"""Black-box tests of the agent's files, tar and git endpoints
(docs/agent-protocol.md, "Files" and "Git").

A module fixture starts bin/orchard-agent on a unix socket (agent_http.py);
every test works in its own directory under /tmp/agentf-*.
"""
import hashlib
import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import urllib.parse
import zlib

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from agent_http import start_agent, stop_agent  # noqa: E402
from stack import sha256_file  # noqa: E402

GIT = shutil.which("git")
RFC3339_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


@pytest.fixture(scope="module")
def base():
    d = tempfile.mkdtemp(prefix="agentf-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def agent(base):
    run = os.path.join(base, "run")
    os.mkdir(run)
    proc, a = start_agent(run)
    yield a
    assert stop_agent(proc) == 0


@pytest.fixture
def d(base, request):
    """A fresh directory for one test."""
    p = os.path.join(base, re.sub(r"[^\w.-]", "_", request.node.name)[:100])
    os.makedirs(p)
    return p


def q(path, **extra):
    return urllib.parse.urlencode(dict(path=path, **extra))


def vm_hwm_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


# ---------------------------------------------------------------- raw files

def test_raw_round_trip_of_64_mib_streams_without_buffering(agent, d):
    src = os.path.join(d, "src.bin")
    with open(src, "wb") as f:
        for _ in range(64):
            f.write(os.urandom(1 << 20))
    want = sha256_file(src)
    target = os.path.join(d, "up", "big.bin")
    hwm_before = vm_hwm_kib(agent.pid)

    with open(src, "rb") as f:
        status, body, _ = agent.request("PUT", "/files?" + q(target, mode="0640"), body=f,
                                        headers={"Content-Length": str(64 << 20)})
    assert status == 200, body
    assert body == {"path": target, "size": 64 << 20, "sha256": want}
    assert sha256_file(target) == want
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640

    c = agent.connection()
    c.request("GET", "/files?" + q(target), headers={"Authorization": "Bearer " + agent.token})
    r = c.getresponse()
    assert r.status == 200
    assert r.getheader("Content-Type") == "application/octet-stream"
    assert r.getheader("X-File-Size") == str(64 << 20)
    assert r.getheader("X-File-Mode") == "0640"
    h, n = hashlib.sha256(), 0
    for block in iter(lambda: r.read(1 << 20), b""):
        h.update(block)
        n += len(block)
    c.close()
    assert (n, h.hexdigest()) == (64 << 20, want)

    grown_kib = vm_hwm_kib(agent.pid) - hwm_before
    assert grown_kib < 16 * 1024, "peak RSS grew by %d KiB for a 64 MiB transfer" % grown_kib
    assert os.listdir(os.path.dirname(target)) == ["big.bin"]  # no temporary file left


@pytest.mark.parametrize("data,digest", [
    (b"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
    (b"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
    (b"a" * 1000003, hashlib.sha256(b"a" * 1000003).hexdigest()),
], ids=["empty", "abc", "1000003-bytes"])
def test_upload_sha256_matches_known_vectors(agent, d, data, digest):
    status, body, _ = agent.request("PUT", "/files?" + q(os.path.join(d, "f")), body=data)
    assert status == 200, body
    assert body["sha256"] == digest and body["size"] == len(data)


def test_upload_creates_parents_and_keeps_the_mode_of_a_replaced_file(agent, d):
    target = os.path.join(d, "a", "b", "c.txt")
    status, body, _ = agent.request("PUT", "/files?" + q(target), body=b"one")
    assert status == 200, body
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o644
    os.chmod(target, 0o755)
    status, body, _ = agent.request("PUT", "/files?" + q(target), body=b"two")
    assert status == 200, body
    assert open(target, "rb").read() == b"two"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o755


def test_chunked_upload(agent, d):
    target = os.path.join(d, "chunked.bin")
    parts = [os.urandom(100000) for _ in range(5)]
    status, body, _ = agent.request("PUT", "/files?" + q(target), body=iter(parts),
                                    encode_chunked=True)
    assert status == 200, body
    assert open(target, "rb").read() == b"".join(parts)
    assert body["sha256"] == hashlib.sha256(b"".join(parts)).hexdigest()


def test_upload_over_the_limit_is_413_and_leaves_nothing(base, d):
    run = os.path.join(d, "run")
    os.mkdir(run)
    proc, small = start_agent(run, extra_env={"ORCHARD_AGENT_MAX_UPLOAD": "1000"})
    try:
        target = os.path.join(d, "out", "f")
        os.mkdir(os.path.dirname(target))
        status, body, _ = small.request("PUT", "/files?" + q(target), body=b"x" * 2000)
        assert status == 413, body
        status, body, _ = small.request("PUT", "/files?" + q(target),
                                        body=iter([b"x" * 600, b"y" * 600]), encode_chunked=True)
        assert status == 413, body
        assert os.listdir(os.path.dirname(target)) == []
        status, body, _ = small.request("PUT", "/files?" + q(target), body=b"x" * 1000)
        assert status == 200, body
    finally:
        stop_agent(proc)


def test_download_errors_are_404_and_400(agent, d):
    status, body, _ = agent.request("GET", "/files?" + q(os.path.join(d, "missing")))
    assert status == 404 and "missing" in body["error"]
    status, body, _ = agent.request("GET", "/files?" + q(d))
    assert status == 400 and "not a regular file" in body["error"]
    status, body, _ = agent.request("GET", "/files")
    assert status == 400 and "'path'" in body["error"]
    status, body, _ = agent.request("GET", "/files?path=/tmp/a%00b")
    assert status == 400


def test_paths_are_normalised_and_relative_ones_start_at_workspace(agent, d):
    status, body, _ = agent.request("PUT", "/files?" + q(d + "//x/../y/./z.txt"), body=b"z")
    assert status == 200, body
    assert body["path"] == os.path.join(d, "y", "z.txt")
    status, body, _ = agent.request("GET", "/files/stat?" + q("no-such-dir-orchard/f"))
    assert status == 404
    assert "/workspace/no-such-dir-orchard/f" in body["error"]
    status, body, _ = agent.request("GET", "/files/stat?" + q("/" + "a" * 5000))
    assert status == 400 and "longer" in body["error"]


# ------------------------------------------------------------------ base64

def test_base64_upload_and_download(agent, d):
    data = os.urandom(70000) + b"\x00\xff"
    target = os.path.join(d, "p", "b64.bin")
    import base64
    status, body, _ = agent.request("POST", "/files/base64", {
        "path": target, "content": base64.b64encode(data).decode(), "mode": "0755"})
    assert status == 200, body
    assert body == {"success": True, "path": target, "size": len(data)}
    assert open(target, "rb").read() == data
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o755
    status, body, _ = agent.request("GET", "/files/base64?" + q(target))
    assert status == 200, body
    assert body["path"] == target and body["size"] == len(data)
    assert base64.b64decode(body["content"]) == data


def test_base64_errors(agent, d):
    status, body, _ = agent.request("POST", "/files/base64", {"path": d + "/x", "content": "a===="})
    assert status == 400 and "base64" in body["error"]
    status, body, _ = agent.request("POST", "/files/base64", {"path": d + "/x"})
    assert status == 400 and "'content'" in body["error"]
    status, body, _ = agent.request("POST", "/files/base64",
                                    {"path": d + "/x", "content": "", "mode": "999"})
    assert status == 400 and "'mode'" in body["error"]
    assert not os.path.exists(d + "/x")
    status, body, _ = agent.request("GET", "/files/base64?" + q(d + "/missing"))
    assert status == 404
    status, body, _ = agent.request("GET", "/files/base64?" + q(d))
    assert status == 400


# ----------------------------------------------------- list, stat, mkdir, rm

def test_list_is_sorted_with_dotfiles_and_a_broken_symlink(agent, d):
    open(os.path.join(d, "b.txt"), "w").write("12345")
    open(os.path.join(d, ".hidden"), "w").write("")
    os.mkdir(os.path.join(d, "a-dir"))
    os.symlink("/nonexistent/target", os.path.join(d, "broken"))
    os.mkfifo(os.path.join(d, "fifo"))
    status, body, _ = agent.request("GET", "/files/list?" + q(d))
    assert status == 200, body
    assert body["path"] == d
    files = body["files"]
    assert [f["name"] for f in files] == [".hidden", "a-dir", "b.txt", "broken", "fifo"]
    by = {f["name"]: f for f in files}
    assert by["b.txt"]["type"] == "file" and by["b.txt"]["size"] == 5
    assert by["b.txt"]["mode"] == "0644" or by["b.txt"]["mode"] == "%04o" % stat.S_IMODE(
        os.stat(os.path.join(d, "b.txt")).st_mode)
    assert by["a-dir"]["type"] == "directory"
    assert by["broken"]["type"] == "symlink" and by["broken"]["target"] == "/nonexistent/target"
    assert by["fifo"]["type"] == "other"
    for f in files:
        assert RFC3339_Z.match(f["modified"]), f


def test_list_errors(agent, d):
    status, body, _ = agent.request("GET", "/files/list?" + q(os.path.join(d, "missing")))
    assert status == 404
    open(os.path.join(d, "f"), "w").close()
    status, body, _ = agent.request("GET", "/files/list?" + q(os.path.join(d, "f")))
    assert status == 400 and "not a directory" in body["error"]


def test_stat_reports_a_symlink_itself(agent, d):
    os.symlink("target", os.path.join(d, "l"))
    status, body, _ = agent.request("GET", "/files/stat?" + q(os.path.join(d, "l")))
    assert status == 200, body
    assert body["type"] == "symlink" and body["target"] == "target" and body["name"] == "l"
    assert RFC3339_Z.match(body["modified"])


def test_mkdir_parents(agent, d):
    p = os.path.join(d, "x", "y", "z")
    status, body, _ = agent.request("POST", "/files/mkdir", {"path": p})
    assert status == 200 and body == {"success": True, "path": p}
    assert os.path.isdir(p)
    status, body, _ = agent.request("POST", "/files/mkdir", {"path": p, "parents": True})
    assert status == 200  # mkdir -p of an existing directory is fine
    status, body, _ = agent.request("POST", "/files/mkdir", {"path": p, "parents": False})
    assert status == 409
    status, body, _ = agent.request("POST", "/files/mkdir",
                                    {"path": os.path.join(d, "no", "parent"), "parents": False})
    assert status == 404
    open(os.path.join(d, "file"), "w").close()
    status, body, _ = agent.request("POST", "/files/mkdir", {"path": os.path.join(d, "file", "sub")})
    assert status in (404, 409)


def test_recursive_delete_does_not_follow_symlinks(agent, d):
    outside = os.path.join(d, "outside")
    os.makedirs(os.path.join(outside, "keep"))
    open(os.path.join(outside, "keep", "precious"), "w").write("x")
    tree = os.path.join(d, "tree")
    os.makedirs(os.path.join(tree, "a", "b"))
    open(os.path.join(tree, "a", "b", "f"), "w").write("x")
    os.symlink(outside, os.path.join(tree, "a", "link-to-outside"))
    os.symlink(os.path.join(outside, "keep", "precious"), os.path.join(tree, "file-link"))

    status, body, _ = agent.request("DELETE", "/files?" + q(tree))
    assert status == 409 and "recursive" in body["error"]
    assert os.path.isdir(tree)
    status, body, _ = agent.request("DELETE", "/files?" + q(tree, recursive="1"))
    assert status == 200, body
    assert body == {"success": True, "path": tree}
    assert not os.path.lexists(tree)
    assert open(os.path.join(outside, "keep", "precious")).read() == "x"
    status, body, _ = agent.request("DELETE", "/files?" + q(tree))
    assert status == 404


def test_delete_a_symlink_to_a_directory_removes_only_the_link(agent, d):
    os.mkdir(os.path.join(d, "real"))
    open(os.path.join(d, "real", "f"), "w").close()
    os.symlink(os.path.join(d, "real"), os.path.join(d, "l"))
    status, body, _ = agent.request("DELETE", "/files?" + q(os.path.join(d, "l"), recursive="1"))
    assert status == 200, body
    assert not os.path.lexists(os.path.join(d, "l"))
    assert os.path.exists(os.path.join(d, "real", "f"))


# --------------------------------------------------------------------- tar

def make_tree(root):
    os.makedirs(os.path.join(root, "sub", "deeper"))
    with open(os.path.join(root, "exec.sh"), "w") as f:
        f.write("#!/bin/sh\necho hi\n")
    os.chmod(os.path.join(root, "exec.sh"), 0o755)
    with open(os.path.join(root, "sub", "secret"), "wb") as f:
        f.write(os.urandom(300000))
    os.chmod(os.path.join(root, "sub", "secret"), 0o600)
    os.chmod(os.path.join(root, "sub", "deeper"), 0o700)
    open(os.path.join(root, ".dot"), "w").write("dot")
    os.symlink("exec.sh", os.path.join(root, "link"))
    os.symlink("/nonexistent", os.path.join(root, "broken"))


def snapshot(root):
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), open(p, "rb").read())
    return out


def test_tar_round_trip_keeps_modes_and_symlinks(agent, d):
    src, dst = os.path.join(d, "src"), os.path.join(d, "dst")
    make_tree(src)
    status, data, r = agent.request("GET", "/archive?" + q(src), raw=True)
    assert status == 200 and r.getheader("Content-Type") == "application/x-tar"
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        names = {m.name: m for m in t.getmembers()}
    assert names["link"].issym() and names["link"].linkname == "exec.sh"
    assert names["exec.sh"].mode & 0o777 == 0o755

    status, body, _ = agent.request("PUT", "/archive?" + q(dst), body=data)
    assert status == 200, body
    assert body["path"] == dst and body["entries"] == len(names)
    assert body["bytes"] == sum(m.size for m in names.values() if m.isfile())
    assert snapshot(dst) == snapshot(src)


def test_tar_get_errors(agent, d):
    status, body, _ = agent.request("GET", "/archive?" + q(os.path.join(d, "missing")))
    assert status == 404
    open(os.path.join(d, "f"), "w").close()
    status, body, _ = agent.request("GET", "/archive?" + q(os.path.join(d, "f")))
    assert status == 400


def evil_tar(kind, outside):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        def add(name, data=b"bad\n"):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
        add("first.txt", b"ok\n")
        if kind == "dotdot":
            add("../evil")
        elif kind == "nested-dotdot":
            add("sub/../../evil")
        elif kind == "absolute":
            add(os.path.join(outside, "evil"))
        elif kind == "symlink":
            ti = tarfile.TarInfo("lnk")
            ti.type = tarfile.SYMTYPE
            ti.linkname = outside
            t.addfile(ti)
            add("lnk/evil")
        elif kind == "hardlink":
            ti = tarfile.TarInfo("hl")
            ti.type = tarfile.LNKTYPE
            ti.linkname = "../outside/evil"
            t.addfile(ti)
        add("after.txt", b"after\n")
    return buf.getvalue()


@pytest.mark.parametrize("kind,bad", [("dotdot", "../evil"), ("nested-dotdot", "sub/../../evil"),
                                      ("absolute", "/evil"), ("symlink", "lnk/evil"),
                                      ("hardlink", "hl")])
def test_tar_entry_outside_the_directory_is_refused(agent, d, kind, bad):
    outside = os.path.join(d, "outside")
    os.mkdir(outside)
    dest = os.path.join(d, "dest")
    status, body, _ = agent.request("PUT", "/archive?" + q(dest), body=evil_tar(kind, outside))
    assert status == 400, body
    assert bad in body["error"]
    assert os.listdir(outside) == []
    assert not os.path.exists(os.path.join(d, "evil"))
    assert os.listdir(dest) == []  # atomic: not even the entries before the refusal


def test_tar_refuses_writing_through_a_symlink_already_in_the_directory(agent, d):
    outside = os.path.join(d, "outside")
    dest = os.path.join(d, "dest")
    os.makedirs(outside)
    os.makedirs(dest)
    os.symlink(outside, os.path.join(dest, "lnk"))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        ti = tarfile.TarInfo("lnk/evil")
        ti.size = 3
        t.addfile(ti, io.BytesIO(b"bad"))
    status, body, _ = agent.request("PUT", "/archive?" + q(dest), body=buf.getvalue())
    assert status == 400 and "lnk/evil" in body["error"], body
    assert os.listdir(outside) == []


def tar_of(entries):
    """A tar of (name, bytes) files and (name, None) directories."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, data in entries:
            ti = tarfile.TarInfo(name)
            if data is None:
                ti.type = tarfile.DIRTYPE
                ti.mode = 0o755
                t.addfile(ti)
            else:
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def test_tar_refused_late_changes_nothing(agent, d):
    """Issue 19 item 14: a tar refused at its last entry leaves the directory
    exactly as it was: earlier entries are not extracted, files it would
    replace keep their content, and no staging directory is left."""
    dest = os.path.join(d, "dest")
    os.makedirs(os.path.join(dest, "keep"))
    with open(os.path.join(dest, "keep", "old.txt"), "w") as f:
        f.write("old\n")
    before = snapshot(dest)
    body = tar_of([("keep/old.txt", b"new\n"), ("keep/added.txt", b"added\n"),
                   ("top.txt", b"top\n"), ("../evil", b"bad\n")])
    status, reply, _ = agent.request("PUT", "/archive?" + q(dest), body=body)
    assert status == 400 and "../evil" in reply["error"], reply
    assert snapshot(dest) == before
    assert not os.path.exists(os.path.join(d, "evil"))


def test_tar_cut_short_changes_nothing(agent, d):
    dest = os.path.join(d, "dest")
    os.makedirs(dest)
    body = tar_of([("a.txt", b"a" * 5000), ("b.txt", b"b" * 5000)])
    status, reply, _ = agent.request("PUT", "/archive?" + q(dest), body=body[:4096])
    assert status == 400, reply
    assert os.listdir(dest) == []


def test_tar_merges_into_an_existing_directory(agent, d):
    """An accepted tar is moved in: new names added, files replaced,
    existing directories merged (keeping their other entries), a symlink
    at an entry's own name replaced by the entry, not followed."""
    dest, outside = os.path.join(d, "dest"), os.path.join(d, "outside")
    os.makedirs(os.path.join(dest, "sub"))
    os.makedirs(outside)
    with open(os.path.join(dest, "sub", "other.txt"), "w") as f:
        f.write("other\n")
    with open(os.path.join(dest, "f.txt"), "w") as f:
        f.write("old\n")
    os.symlink(os.path.join(outside, "target"), os.path.join(dest, "lnk"))
    body = tar_of([("sub", None), ("sub/new.txt", b"new\n"), ("f.txt", b"replaced\n"),
                   ("lnk", b"plain\n"), ("deep", None), ("deep/er", None), ("deep/er/x", b"x")])
    status, reply, _ = agent.request("PUT", "/archive?" + q(dest), body=body)
    assert status == 200 and reply["entries"] == 7, reply
    assert sorted(os.listdir(dest)) == ["deep", "f.txt", "lnk", "sub"]
    assert sorted(os.listdir(os.path.join(dest, "sub"))) == ["new.txt", "other.txt"]
    assert open(os.path.join(dest, "f.txt")).read() == "replaced\n"
    assert not os.path.islink(os.path.join(dest, "lnk"))
    assert open(os.path.join(dest, "lnk")).read() == "plain\n"
    assert open(os.path.join(dest, "deep", "er", "x")).read() == "x"
    assert os.listdir(outside) == []


def test_tar_read_only_directory_entry_is_moved_in(agent, d):
    """A directory entry without owner write (applied at the end of the
    extraction) still moves into place and keeps its mode."""
    dest = os.path.join(d, "dest")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        ti = tarfile.TarInfo("ro")
        ti.type = tarfile.DIRTYPE
        ti.mode = 0o555
        t.addfile(ti)
        ti = tarfile.TarInfo("ro/f")
        ti.size = 2
        t.addfile(ti, io.BytesIO(b"hi"))
    status, reply, _ = agent.request("PUT", "/archive?" + q(dest), body=buf.getvalue())
    assert status == 200, reply
    assert os.listdir(dest) == ["ro"]
    assert stat.S_IMODE(os.stat(os.path.join(dest, "ro")).st_mode) == 0o555
    assert open(os.path.join(dest, "ro", "f")).read() == "hi"
    os.chmod(os.path.join(dest, "ro"), 0o755)


_BOMB = []


def gzip_bomb():
    """About 1 MiB of tar.gz that expands to 1 GiB of zeros (cached)."""
    if not _BOMB:
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        ti = tarfile.TarInfo("zeros")
        ti.size = 1 << 30
        out = [c.compress(ti.tobuf(format=tarfile.GNU_FORMAT))]
        zeros = bytes(1 << 20)
        out += [c.compress(zeros) for _ in range(1024)]
        out += [c.compress(bytes(1024)), c.flush()]
        _BOMB.append(b"".join(out))
    return _BOMB[0]


def test_tar_gzip_bomb_is_413_and_leaves_nothing(agent, d):
    """Issue 19 item 3: a 1 MiB tar.gz that would become 1 GiB is refused
    by the expansion ratio with 413, and nothing of it stays on disk."""
    dest = os.path.join(d, "dest")
    os.makedirs(dest)
    bomb = gzip_bomb()
    assert len(bomb) < 2 << 20
    status, reply, _ = agent.request("PUT", "/archive?" + q(dest), body=bomb)
    assert status == 413, reply
    assert "times its size" in reply["error"]
    assert os.listdir(dest) == []


def test_tar_entry_and_byte_bounds_are_413(base, d):
    run = os.path.join(d, "run")
    os.mkdir(run)
    proc, small = start_agent(run, extra_env={"ORCHARD_AGENT_ARCHIVE_MAX_ENTRIES": "3",
                                              "ORCHARD_AGENT_ARCHIVE_MAX_BYTES": "1000"})
    try:
        dest = os.path.join(d, "dest")
        status, reply, _ = small.request("PUT", "/archive?" + q(dest),
                                         body=tar_of([("f%d" % i, b"x") for i in range(4)]))
        assert status == 413 and "more than 3 entries" in reply["error"], reply
        assert os.listdir(dest) == []
        status, reply, _ = small.request("PUT", "/archive?" + q(dest),
                                         body=tar_of([("a", b"x" * 600), ("b", b"y" * 600)]))
        assert status == 413 and "1000 bytes" in reply["error"], reply
        assert os.listdir(dest) == []
        status, reply, _ = small.request("PUT", "/archive?" + q(dest),
                                         body=tar_of([("a", b"x" * 600), ("b", b"y" * 400)]))
        assert status == 200 and reply["entries"] == 2, reply
        assert sorted(os.listdir(dest)) == ["a", "b"]
    finally:
        assert stop_agent(proc) == 0


def test_tar_gzip_is_accepted(agent, d):
    src = os.path.join(d, "src")
    make_tree(src)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        t.add(src, arcname=".")
    status, body, _ = agent.request("PUT", "/archive?" + q(os.path.join(d, "dst")), body=buf.getvalue())
    assert status == 200, body
    assert snapshot(os.path.join(d, "dst")) == snapshot(src)


def test_tar_upload_is_streamed(agent, d):
    """A chunked 40 MiB tar extracts without the agent's RSS growing by its size."""
    src = os.path.join(d, "src")
    os.mkdir(src)
    for i in range(4):
        with open(os.path.join(src, "f%d" % i), "wb") as f:
            f.write(os.urandom(10 << 20))
    tar_path = os.path.join(d, "src.tar")
    with tarfile.open(tar_path, "w") as t:
        t.add(src, arcname=".")
    hwm_before = vm_hwm_kib(agent.pid)

    def chunks():
        with open(tar_path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                yield block
    dst = os.path.join(d, "dst")
    status, body, _ = agent.request("PUT", "/archive?" + q(dst), body=chunks(), encode_chunked=True)
    assert status == 200, body
    for i in range(4):
        assert sha256_file(os.path.join(dst, "f%d" % i)) == sha256_file(os.path.join(src, "f%d" % i))
    assert vm_hwm_kib(agent.pid) - hwm_before < 16 * 1024


def test_tar_garbage_is_400(agent, d):
    status, body, _ = agent.request("PUT", "/archive?" + q(os.path.join(d, "x")),
                                    body=b"this is not a tar file" * 100)
    assert status == 400, body


# --------------------------------------------------------------------- git

def git(cwd, *args):
    return subprocess.run([GIT, "-c", "user.name=t", "-c", "user.email=t@t", "-c",
                           "init.defaultBranch=main", *args],
                          cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(d):
    if not GIT:
        pytest.skip("git is needed to build test repositories")
    r = os.path.join(d, "repo")
    os.mkdir(r)
    git(r, "init", "-q")
    with open(os.path.join(r, "a.txt"), "w") as f:
        f.write("".join("line %d\n" % i for i in range(1, 21)))
    with open(os.path.join(r, "b.txt"), "w") as f:
        f.write("alpha\nbeta\ngamma\n")
    with open(os.path.join(r, ".gitignore"), "w") as f:
        f.write("*.log\nbuild/\n")
    git(r, "add", ".")
    git(r, "commit", "-qm", "init")
    return r


PATCH_OK = """diff --git a/a.txt b/a.txt
--- a/a.txt
+++ b/a.txt
@@ -1,3 +1,3 @@
 line 1
-line 2
+LINE TWO
 line 3
diff --git a/new/file.py b/new/file.py
new file mode 100644
--- /dev/null
+++ b/new/file.py
@@ -0,0 +1,2 @@
+print("hello")
+print("world")
diff --git a/b.txt b/b.txt
deleted file mode 100644
--- a/b.txt
+++ /dev/null
@@ -1,3 +0,0 @@
-alpha
-beta
-gamma
"""

# a.txt's hunk applies; b.txt's second hunk does not.
PATCH_BAD = """diff --git a/a.txt b/a.txt
--- a/a.txt
+++ b/a.txt
@@ -1,3 +1,3 @@
 line 1
-line 2
+LINE TWO
 line 3
diff --git a/b.txt b/b.txt
--- a/b.txt
+++ b/b.txt
@@ -1,2 +1,2 @@
-alpha
+ALPHA
 beta
@@ -3 +3 @@
-not what is there
+GAMMA
"""


def test_git_apply_changes_files_and_lists_them(agent, repo):
    status, body, _ = agent.request("POST", "/git/apply", {"patch": PATCH_OK, "cwd": repo})
    assert status == 200, body
    assert body["success"] is True and body["exit_code"] == 0 and body["error"] is None
    assert body["stdout"] == "" and body["stderr"] == ""
    assert sorted(body["files"]) == ["a.txt", "b.txt", "new/file.py"]
    assert "LINE TWO\n" in open(os.path.join(repo, "a.txt")).read()
    assert open(os.path.join(repo, "new", "file.py")).read() == 'print("hello")\nprint("world")\n'
    assert not os.path.exists(os.path.join(repo, "b.txt"))
    # the index is left alone, as `git apply` leaves it
    assert git(repo, "diff", "--cached", "--name-only") == ""


def test_git_apply_check_only_leaves_files_untouched(agent, repo):
    before = snapshot(repo)
    status, body, _ = agent.request("POST", "/git/apply",
                                    {"patch": PATCH_OK, "cwd": repo, "check": True})
    assert status == 200, body
    assert body["success"] is True and body["check"] is True
    assert snapshot(repo) == before


def test_git_apply_failure_names_file_and_hunk_and_changes_nothing(agent, repo):
    before = snapshot(repo)
    status, body, _ = agent.request("POST", "/git/apply", {"patch": PATCH_BAD, "cwd": repo})
    assert status == 200, body
    assert body["success"] is False and body["exit_code"] == 1
    assert "b.txt" in body["error"] and "hunk #2" in body["error"] and "@@ -3 +3 @@" in body["error"]
    assert body["error"] in body["stderr"]
    assert snapshot(repo) == before  # a.txt's applicable hunk was not written either


def test_git_apply_plain_unified_diff(agent, repo):
    """diff -u output (no "diff --git", dates after tabs) applies too; a removed
    line "-- x" followed by an added "++ y" inside a hunk is not a header."""
    with open(os.path.join(repo, "c.sql"), "w") as f:
        f.write("select 1;\n-- old comment\nselect 2;\n")
    patch = ("--- a/c.sql\t2024-01-01 00:00:00.000000000 +0000\n"
             "+++ b/c.sql\t2024-01-02 00:00:00.000000000 +0000\n"
             "@@ -1,3 +1,3 @@\n"
             " select 1;\n"
             "--- old comment\n"
             "+++ new comment\n"
             " select 2;\n"
             "--- /dev/null\n"
             "+++ b/made.txt\n"
             "@@ -0,0 +1 @@\n"
             "+made\n"
             "--- a/b.txt\n"
             "+++ /dev/null\n"
             "@@ -1,3 +0,0 @@\n"
             "-alpha\n"
             "-beta\n"
             "-gamma\n")
    status, body, _ = agent.request("POST", "/git/apply", {"patch": patch, "cwd": repo})
    assert status == 200 and body["success"] is True, body
    assert sorted(body["files"]) == ["b.txt", "c.sql", "made.txt"]
    assert open(os.path.join(repo, "c.sql")).read() == "select 1;\n++ new comment\nselect 2;\n"
    assert open(os.path.join(repo, "made.txt")).read() == "made\n"
    assert not os.path.exists(os.path.join(repo, "b.txt"))


def test_git_apply_malformed_or_empty_patch(agent, repo):
    for patch in ("", "this is not a patch\n"):
        status, body, _ = agent.request("POST", "/git/apply", {"patch": patch, "cwd": repo})
        assert status == 200 and body["success"] is False and body["error"], body


def test_git_apply_to_a_plain_directory(agent, d):
    plain = os.path.join(d, "plain")
    os.mkdir(plain)
    with open(os.path.join(plain, "a.txt"), "w") as f:
        f.write("".join("line %d\n" % i for i in range(1, 21)))
    with open(os.path.join(plain, "b.txt"), "w") as f:
        f.write("alpha\nbeta\ngamma\n")
    status, body, _ = agent.request("POST", "/git/apply", {"patch": PATCH_OK, "cwd": plain})
    assert status == 200 and body["success"] is True, body
    assert sorted(os.listdir(plain)) == ["a.txt", "new"]  # no .git appeared
    assert "LINE TWO\n" in open(os.path.join(plain, "a.txt")).read()


def test_git_apply_bad_requests(agent, d):
    status, body, _ = agent.request("POST", "/git/apply", {"cwd": d})
    assert status == 400 and "'patch'" in body["error"]
    status, body, _ = agent.request("POST", "/git/apply", {"patch": PATCH_OK, "cwd": d + "/missing"})
    assert status == 404


def test_git_diff_includes_untracked_files_and_applies_to_a_fresh_clone(agent, repo, d):
    with open(os.path.join(repo, "a.txt"), "a") as f:
        f.write("appended\n")
    os.remove(os.path.join(repo, "b.txt"))
    os.makedirs(os.path.join(repo, "pkg", "mod"))
    open(os.path.join(repo, "pkg", "mod", "new.py"), "w").write("x = 1\n")
    open(os.path.join(repo, "untracked.txt"), "w").write("no newline at end")
    with open(os.path.join(repo, "blob.bin"), "wb") as f:
        f.write(bytes(range(256)) * 4)
    open(os.path.join(repo, "ignored.log"), "w").write("ignored\n")
    os.makedirs(os.path.join(repo, "build"))
    open(os.path.join(repo, "build", "out"), "w").write("ignored\n")

    status, body, _ = agent.request("GET", "/git/diff?" + urllib.parse.urlencode({"cwd": repo}))
    assert status == 200, body
    patch = body["patch"]
    assert "untracked.txt" in patch and "pkg/mod/new.py" in patch and "GIT binary patch" in patch
    assert "ignored.log" not in patch and "build/out" not in patch

    clone = os.path.join(d, "clone")
    git(d, "clone", "-q", repo, clone)
    patch_file = os.path.join(d, "model.patch")
    open(patch_file, "w").write(patch)
    git(clone, "apply", "--check", patch_file)
    git(clone, "apply", patch_file)
    want = {k: v for k, v in snapshot(repo).items()
            if not k.startswith(".git" + os.sep) and k != ".git" and k != "ignored.log"
            and not k.startswith("build")}
    got = {k: v for k, v in snapshot(clone).items() if not k.startswith(".git" + os.sep) and k != ".git"}
    assert got == want


def test_git_diff_of_a_clean_tree_is_empty_and_non_repo_is_400(agent, repo, d):
    status, body, _ = agent.request("GET", "/git/diff?" + urllib.parse.urlencode({"cwd": repo}))
    assert status == 200 and body["patch"] == ""
    plain = os.path.join(d, "plain")
    os.mkdir(plain)
    status, body, _ = agent.request("GET", "/git/diff?" + urllib.parse.urlencode({"cwd": plain}))
    assert status == 400 and "not a git repository" in body["error"]


def test_git_reset_restores_files_and_removes_untracked_ones(agent, repo):
    head = git(repo, "rev-parse", "HEAD").strip()
    open(os.path.join(repo, "a.txt"), "w").write("clobbered\n")
    os.remove(os.path.join(repo, "b.txt"))
    os.makedirs(os.path.join(repo, "newdir"))
    open(os.path.join(repo, "newdir", "x"), "w").write("x")
    open(os.path.join(repo, "u.txt"), "w").write("u")
    open(os.path.join(repo, "keep.log"), "w").write("ignored")
    git(repo, "add", "u.txt")

    status, body, _ = agent.request("POST", "/git/reset", {"cwd": repo})
    assert status == 200, body
    assert body == {"success": True, "cwd": repo, "head": head}
    assert git(repo, "status", "--porcelain") == ""
    assert open(os.path.join(repo, "b.txt")).read() == "alpha\nbeta\ngamma\n"
    assert not os.path.exists(os.path.join(repo, "newdir"))
    assert os.path.exists(os.path.join(repo, "keep.log"))  # ignored files stay by default

    status, body, _ = agent.request("POST", "/git/reset", {"cwd": repo, "remove_ignored": True})
    assert status == 200, body
    assert not os.path.exists(os.path.join(repo, "keep.log"))


def test_git_reset_to_an_older_commit(agent, repo):
    first = git(repo, "rev-parse", "HEAD").strip()
    open(os.path.join(repo, "c.txt"), "w").write("c")
    git(repo, "add", "c.txt")
    git(repo, "commit", "-qm", "second")
    status, body, _ = agent.request("POST", "/git/reset", {"cwd": repo, "ref": first})
    assert status == 200 and body["head"] == first, body
    assert git(repo, "rev-parse", "HEAD").strip() == first
    assert not os.path.exists(os.path.join(repo, "c.txt"))
    status, body, _ = agent.request("POST", "/git/reset", {"cwd": repo, "ref": "no-such-ref"})
    assert status == 400 and "no-such-ref" in body["error"]


# ---------------------------------------------------------------- lazy libraries

def mapped_libraries(pid):
    with open("/proc/%d/maps" % pid) as f:
        return {os.path.basename(line.split()[-1]) for line in f if ".so" in line}


def maps(libs, prefix):
    return any(name.startswith(prefix) for name in libs)


def test_libgit2_and_libarchive_are_loaded_on_first_use(base, d):
    """An idle agent maps neither libgit2, libarchive nor GnuTLS (bench
    README, "Agent memory"); the first tar call loads libarchive alone, the
    first git call libgit2."""
    run = os.path.join(base, "lazy-run")
    os.mkdir(run)
    proc, a = start_agent(run)
    try:
        libs = mapped_libraries(proc.pid)
        assert maps(libs, "libc.so"), libs
        for lib in ("libgit2.", "libarchive.", "libgnutls.", "libmicrohttpd."):
            assert not maps(libs, lib), (lib, libs)
        st, _, _ = a.request("GET", "/archive?" + q(d), raw=True)
        assert st == 200
        libs = mapped_libraries(proc.pid)
        assert maps(libs, "libarchive.") and not maps(libs, "libgit2."), libs
        st, body, _ = a.request("GET", "/git/diff?" + urllib.parse.urlencode({"cwd": d}))
        assert st == 400 and "not a git repository" in body["error"], body
        assert maps(mapped_libraries(proc.pid), "libgit2.")
    finally:
        assert stop_agent(proc) == 0
