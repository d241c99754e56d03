"""Imported images under the local driver, through the real stack
(docs/images.md): orchard-admin image import (--dir, --tar, --oci), ls and
rm; sandboxes whose root is the image under a private overlayfs layer; the
API's 422 for an image that was never imported; and no mount or layer left
behind by a delete.

The rootfs is a static busybox and nothing else (no libc, no bash), so the
agent that runs in it is the self-contained bundle of scripts/agent-bundle.sh.
"""
import base64
import io
import json
import os
import shutil
import subprocess
import tarfile

import pytest

from busybox import static_busybox
from stack import BIN, as_user

BUSYBOX_APPLETS = ("sh", "ls", "cat", "echo", "test", "mkdir", "rm", "true", "id", "stat", "touch")
MARKER = "original marker\n"


def image_dir(stack):
    return os.path.join(stack.var, "images")


def state_dir(stack):
    return os.path.join(stack.var, "sandboxes")


def img(stack, *args, check=True):
    """orchard-admin image ... against the stack's store."""
    env = dict(stack.env(), ORCHARD_IMAGE_DIR=image_dir(stack))
    r = subprocess.run([os.path.join(BIN, "orchard-admin"), "image"] + list(args), env=env,
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    if check:
        assert r.returncode == 0, "image %s: %d %s" % (" ".join(args), r.returncode, r.stderr)
    return r


def make_rootfs(path):
    bb = static_busybox()
    for d in ("bin", "etc"):
        os.makedirs(os.path.join(path, d))
    shutil.copy(bb, os.path.join(path, "bin", "busybox"))
    for applet in BUSYBOX_APPLETS:
        os.symlink("busybox", os.path.join(path, "bin", applet))
    with open(os.path.join(path, "etc", "marker"), "w") as f:
        f.write(MARKER)
    os.chmod(os.path.join(path, "etc", "marker"), 0o644)
    return path


@pytest.fixture(scope="module")
def env(stack, tmp_path_factory):
    if not static_busybox():
        pytest.skip("no static busybox: apt-get install busybox-static")
    # stack.sh built the controller's default bundle, <agent-bin>.bundle
    bundle = os.path.join(stack.var, "bin", "orchard-agent.bundle")
    assert os.path.isfile(os.path.join(bundle, "command")), os.listdir(os.path.dirname(bundle))
    return make_rootfs(str(tmp_path_factory.mktemp("bbroot") / "root"))


def create(stack, admin, image):
    r = admin.post(stack.url + "/v1/sandboxes", json={"image": image, "cpu": "0.5", "memory": "256Mi"})
    assert r.status_code == 200, r.text
    sid = r.json()["sandbox_id"]
    info = stack.wait_ready(admin, sid, timeout=60)
    assert info.get("status") == "ready", (info, stack.scalar(
        "SELECT state_message FROM sandboxes WHERE id = '%s'" % sid))
    return sid


def run(stack, admin, sid, cmd):
    r = admin.post("%s/v1/sandboxes/%s/exec" % (stack.url, sid), json={"command": cmd, "wait": True})
    assert r.status_code == 200, r.text
    return r.json()


def delete(stack, admin, sid):
    r = admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))
    assert r.status_code in (200, 204), r.text
    stack.wait_for(lambda: stack.scalar("SELECT state FROM sandboxes WHERE id = '%s'" % sid) == "deleted",
                   what="sandbox %s deleted" % sid)


def mounts_under(path):
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(path + "/")]


def image_row(stack, name):
    return stack.psql("SELECT name, source, size_bytes FROM images WHERE name = '%s'" % name)


def test_import_dir_two_sandboxes_private_layers(stack, admin, env):
    """--dir: the tree is copied and owned by the sandbox uid; two sandboxes
    of the image each write their own layer, invisible to the other and to
    the image; exec with sh -c and file upload/download work; delete
    unmounts and removes the layer."""
    r = img(stack, "import", "bbdir", "--dir", env)
    assert 'imported image "bbdir"' in r.stdout
    root = os.path.join(image_dir(stack), "bbdir")
    meta = json.load(open(os.path.join(root, "image.json")))
    assert meta["name"] == "bbdir" and meta["source"] == "dir " + env
    assert meta["size_bytes"] == os.path.getsize(os.path.join(env, "bin", "busybox")) + len(MARKER)
    assert image_row(stack, "bbdir") == [["bbdir", "dir " + env, str(meta["size_bytes"])]]
    st = os.lstat(os.path.join(root, "rootfs", "etc", "marker"))
    assert (st.st_uid, st.st_gid) == (65534, 65534)   # the sandbox uid (the stack runs as root)
    assert os.readlink(os.path.join(root, "rootfs", "bin", "sh")) == "busybox"
    assert not [n for n in os.listdir(image_dir(stack)) if ".tmp-" in n]

    a = create(stack, admin, "bbdir")
    b = create(stack, admin, "bbdir")
    for sid in (a, b):
        assert os.path.join(state_dir(stack), sid, "root") in mounts_under(state_dir(stack))

    j = run(stack, admin, a, "echo changed > /etc/marker && echo new > /newfile && cat /etc/marker /newfile"
                              " && id -u && ls /bin/bash 2>&1; true")
    assert j["stdout"].startswith("changed\nnew\n0\n"), j
    assert "No such file" in j["stdout"]   # no bash in this image: sh ran the command
    j = run(stack, admin, b, "cat /etc/marker; test -e /newfile && echo leaked || echo absent")
    assert j["stdout"] == MARKER + "absent\n", j
    assert open(os.path.join(root, "rootfs", "etc", "marker")).read() == MARKER
    assert not os.path.exists(os.path.join(root, "rootfs", "newfile"))
    # the write went to a's upper layer in its state dir
    assert open(os.path.join(state_dir(stack), a, "upper", "etc", "marker")).read() == "changed\n"

    data = bytes(range(256)) * 8
    r = admin.post("%s/v1/sandboxes/%s/files" % (stack.url, a),
                   json={"path": "/workspace/d/x.bin", "content": base64.b64encode(data).decode()})
    assert r.status_code == 200, r.text
    r = admin.get("%s/v1/sandboxes/%s/files" % (stack.url, a), params={"path": "/workspace/d/x.bin"})
    assert r.status_code == 200 and base64.b64decode(r.json()["content"]) == data, r.text
    r = admin.get("%s/v1/sandboxes/%s/files" % (stack.url, b), params={"path": "/workspace/d/x.bin"})
    assert r.status_code == 404, r.text

    for sid in (a, b):
        delete(stack, admin, sid)
        assert not os.path.exists(os.path.join(state_dir(stack), sid))
    assert mounts_under(state_dir(stack)) == []
    img(stack, "rm", "bbdir")


def test_image_layer_is_private_to_the_sandbox(stack, admin, env, local_user):
    """Issue 19 item 4: another local user can read nothing a sandbox wrote
    into its image's layer, neither through root/ nor upper/."""
    img(stack, "import", "bbpriv", "--dir", env)
    sid = create(stack, admin, "bbpriv")
    try:
        j = run(stack, admin, sid, "echo secret > /newfile && cat /newfile")
        assert j["stdout"] == "secret\n", j
        d = os.path.join(state_dir(stack), sid)
        subs = ["root"] + (["upper"] if os.path.isdir(os.path.join(d, "upper")) else [])
        for sub in subs:
            p = os.path.join(d, sub)
            assert os.path.exists(os.path.join(p, "newfile")), sub
            assert as_user(local_user, "cat", os.path.join(p, "newfile")).returncode != 0, sub
            assert as_user(local_user, "ls", p).returncode != 0, sub
    finally:
        delete(stack, admin, sid)
        img(stack, "rm", "bbpriv")


def _tar_of(root, extra=()):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        t.add(root, arcname=".")
        for info, data in extra:
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def test_import_tar_skips_devices_and_runs(stack, admin, env, tmp_path):
    dev = tarfile.TarInfo("dev/null-ish")
    dev.type, dev.devmajor, dev.devminor = tarfile.CHRTYPE, 1, 3
    fifo = tarfile.TarInfo("etc/fifo")
    fifo.type = tarfile.FIFOTYPE
    hl = tarfile.TarInfo("etc/marker-link")
    hl.type, hl.linkname = tarfile.LNKTYPE, "./etc/marker"
    path = tmp_path / "root.tar.gz"
    path.write_bytes(_tar_of(env, [(dev, None), (fifo, None), (hl, None)]))

    r = img(stack, "import", "bbtar", "--tar", str(path))
    assert "2 device nodes, fifos or sockets skipped" in r.stdout, r.stdout
    rootfs = os.path.join(image_dir(stack), "bbtar", "rootfs")
    assert not os.path.lexists(os.path.join(rootfs, "dev", "null-ish"))
    assert not os.path.lexists(os.path.join(rootfs, "etc", "fifo"))
    assert open(os.path.join(rootfs, "etc", "marker-link")).read() == MARKER
    assert os.stat(os.path.join(rootfs, "bin", "busybox")).st_mode & 0o111

    sid = create(stack, admin, "bbtar")
    j = run(stack, admin, sid, "cat /etc/marker-link; echo $0")
    assert j["stdout"] == MARKER + "sh\n" and j["exit_code"] == 0, j
    delete(stack, admin, sid)
    img(stack, "rm", "bbtar")


@pytest.mark.parametrize("name", ["../x", "a/../../x", "/abs"])
def test_tar_escaping_the_root_is_refused(stack, env, tmp_path, name):
    evil = tarfile.TarInfo(name)
    evil.size = 3
    path = tmp_path / "evil.tar"
    path.write_bytes(_tar_of(env, [(evil, b"bad")]))
    r = img(stack, "import", "evil", "--tar", str(path), check=False)
    assert r.returncode == 1, r
    assert "refusing entry" in r.stderr and name.lstrip("/") in r.stderr, r.stderr
    assert image_row(stack, "evil") == []
    assert sorted(n for n in os.listdir(image_dir(stack)) if "evil" in n) == []
    assert not os.path.exists(os.path.join(image_dir(stack), "x"))


def test_tar_cut_inside_a_file_is_refused_and_leaves_nothing(stack, tmp_path):
    """A tar whose stream ends inside a file's data (a download cut short):
    the import fails naming the file, and no image or partial tree stays."""
    data = os.urandom(64 << 10)
    big = tarfile.TarInfo("etc/big.bin")
    big.size = len(data)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        t.addfile(big, io.BytesIO(data))
    path = tmp_path / "cut.tar"
    path.write_bytes(buf.getvalue()[:512 + len(data) // 2])   # header + half the data
    r = img(stack, "import", "cut", "--tar", str(path), check=False)
    assert r.returncode == 1, r
    assert "is broken at \"etc/big.bin\"" in r.stderr, r.stderr
    assert image_row(stack, "cut") == []
    assert sorted(n for n in os.listdir(image_dir(stack)) if "cut" in n) == []


def test_unknown_image_is_422_with_the_import_hint(stack, admin):
    before = stack.counts()
    r = admin.post(stack.url + "/v1/sandboxes", json={"image": "never-imported"})
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["code"] == "invalid"
    assert '"never-imported"' in body["detail"]
    assert "orchard-admin image import" in body["detail"] and "--tar" in body["detail"]
    assert stack.counts() == before
    r = admin.post(stack.url + "/sandboxes", json={"image": "python:3.11"})   # Orchard's route
    assert r.status_code == 422 and "python:3.11" in r.json()["detail"], r.text
    assert stack.counts() == before


def test_image_vanished_after_acceptance_fails_the_row(stack, admin):
    """The row exists (the API accepts) but the tree is gone: the controller
    fails the sandbox with the import hint, and leaves nothing behind."""
    stack.psql("INSERT INTO images (name, source, size_bytes) VALUES ('ghost', 'test', 0)")
    try:
        r = admin.post(stack.url + "/v1/sandboxes", json={"image": "ghost"})
        assert r.status_code == 200, r.text
        sid = r.json()["sandbox_id"]
        stack.wait_for(lambda: stack.scalar("SELECT state FROM sandboxes WHERE id = '%s'" % sid) == "failed",
                       what="row failed")
        msg = stack.scalar("SELECT state_message FROM sandboxes WHERE id = '%s'" % sid)
        assert 'image "ghost" is not available' in msg and "orchard-admin image import ghost" in msg, msg
        assert not os.path.exists(os.path.join(state_dir(stack), sid))
    finally:
        stack.psql("DELETE FROM images WHERE name = 'ghost'")


def test_ls_and_rm_refused_while_in_use(stack, admin, env):
    img(stack, "import", "bbuse", "--dir", env)
    r = img(stack, "ls")
    line = [l for l in r.stdout.splitlines() if l.startswith("bbuse ")]
    assert len(line) == 1 and " ok " in line[0] and "dir " + env in line[0], r.stdout
    sid = create(stack, admin, "bbuse")
    r = img(stack, "rm", "bbuse", check=False)
    assert r.returncode == 1 and "in use" in r.stderr and sid in r.stderr, r.stderr
    assert os.path.isdir(os.path.join(image_dir(stack), "bbuse", "rootfs"))
    assert len(image_row(stack, "bbuse")) == 1
    r = img(stack, "import", "bbuse", "--dir", env, check=False)
    assert r.returncode == 1 and "already exists" in r.stderr, r.stderr

    delete(stack, admin, sid)
    r = img(stack, "rm", "bbuse")
    assert 'removed image "bbuse"' in r.stdout
    assert image_row(stack, "bbuse") == []
    assert not [n for n in os.listdir(image_dir(stack)) if "bbuse" in n]
    assert "bbuse" not in img(stack, "ls").stdout
    r = img(stack, "rm", "bbuse", check=False)
    assert r.returncode == 1 and 'no image "bbuse"' in r.stderr
    r = admin.post(stack.url + "/v1/sandboxes", json={"image": "bbuse"})
    assert r.status_code == 422, r.text


@pytest.mark.parametrize("name", ["host", "Upper", "_x", ".hidden", "a/b", "x" * 64])
def test_bad_names_are_refused(stack, env, name):
    r = img(stack, "import", name, "--dir", env, check=False)
    assert r.returncode == 1 and "invalid image name" in r.stderr, r.stderr
    r = img(stack, "import", "ok", check=False)
    assert r.returncode == 2   # no source: usage


def test_import_oci_layout(stack, admin, env, tmp_path):
    if not shutil.which("umoci"):
        pytest.skip("umoci is not installed (apt-get install umoci)")
    layout, bundle = str(tmp_path / "layout"), str(tmp_path / "bundle")

    def umoci(*args):
        r = subprocess.run(["umoci"] + list(args), capture_output=True, text=True)
        assert r.returncode == 0, r.stderr

    umoci("init", "--layout", layout)
    umoci("new", "--image", layout + ":v1")
    umoci("unpack", "--rootless", "--image", layout + ":v1", bundle)
    shutil.rmtree(os.path.join(bundle, "rootfs"))
    shutil.copytree(env, os.path.join(bundle, "rootfs"), symlinks=True)
    umoci("repack", "--image", layout + ":v1", bundle)

    r = img(stack, "import", "bboci", "--oci", layout + ":nope", check=False)
    assert r.returncode == 1 and "umoci failed" in r.stderr, r.stderr
    assert image_row(stack, "bboci") == []
    img(stack, "import", "bboci", "--oci", layout + ":v1")
    assert image_row(stack, "bboci")[0][1] == "oci %s:v1" % layout
    sid = create(stack, admin, "bboci")
    j = run(stack, admin, sid, "cat /etc/marker")
    assert j["stdout"] == MARKER, j
    delete(stack, admin, sid)
    img(stack, "rm", "bboci")


def test_orphan_layer_is_unmounted_and_removed(stack, admin, env):
    """A sandbox whose row no longer wants it (here: marked deleted behind
    the controller's back) is an orphan; the sweep's destroy unmounts its
    overlay and removes its layer like a normal delete."""
    img(stack, "import", "bborphan", "--dir", env)
    sid = create(stack, admin, "bborphan")
    d = os.path.join(state_dir(stack), sid)
    assert os.path.join(d, "root") in mounts_under(state_dir(stack))
    stack.psql("UPDATE sandboxes SET state = 'deleted', deleted_at = now() WHERE id = '%s'" % sid)
    stack.wait_for(lambda: not os.path.exists(d), timeout=30, what="orphan %s removed" % sid)
    assert os.path.join(d, "root") not in mounts_under(state_dir(stack))
    img(stack, "rm", "bborphan")


def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_leftovers_of_dead_imports_and_rms_are_swept(stack, env):
    """What an import or rm killed halfway leaves is cleaned by the next
    import or rm: an unpublished .tmp- dir is removed, an image an
    uncommitted rm renamed aside is put back, a committed rm's dir removed;
    a live process's dir is left alone."""
    store = image_dir(stack)
    img(stack, "import", "bbswept", "--dir", env)
    gone = dead_pid()
    tmp = os.path.join(store, ".bbhalf.tmp-%d" % gone)
    os.makedirs(os.path.join(tmp, "rootfs"))
    # an rm that renamed bbswept aside and died before its COMMIT: row kept
    aside = os.path.join(store, ".bbswept.rm-%d" % gone)
    os.rename(os.path.join(store, "bbswept"), aside)
    # an rm that committed (no row) and died before deleting the tree
    committed = os.path.join(store, ".bbdone.rm-%d" % gone)
    os.makedirs(os.path.join(committed, "rootfs", "etc"))
    live = os.path.join(store, ".bblive.tmp-%d" % os.getpid())
    os.makedirs(live)
    try:
        r = img(stack, "import", "bbnext", "--dir", env)
        assert "interrupted" in r.stderr, r.stderr
        assert not os.path.exists(tmp) and not os.path.exists(committed)
        assert not os.path.exists(aside)
        assert os.path.isfile(os.path.join(store, "bbswept", "rootfs", "etc", "marker"))
        assert len(image_row(stack, "bbswept")) == 1
        assert os.path.isdir(live)
    finally:
        shutil.rmtree(live, ignore_errors=True)
    img(stack, "rm", "bbswept")
    img(stack, "rm", "bbnext")
    assert not [n for n in os.listdir(store) if n.startswith(".")], os.listdir(store)
