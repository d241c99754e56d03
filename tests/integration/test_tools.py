"""The sandbox-tools bundle in local sandboxes (docs/sandbox-tools.md):
codex, claude and opencode on PATH in a `host` sandbox and in an imported
busybox image with no libc (codex is static; claude and opencode run on the
bundle's own glibc loader there), last on PATH in login shells too,
read-only from inside; a controller with ORCHARD_SANDBOX_TOOLS=off gives
none. The bundle is bin/sandbox-tools (make tools; built here if missing)."""
import os
import shutil
import subprocess

import pytest

from busybox import static_busybox
from stack import BIN, REPO, Stack, make_tmpdir

MOUNT = "/opt/sandbox-tools"
BUSYBOX_APPLETS = ("sh", "ls", "cat", "echo", "test", "touch", "env")


def pinned_versions():
    out = {}
    with open(os.path.join(REPO, "sandbox-tools", "versions")) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                name, _, spec = line.split()[:3]
                out[name] = spec.rsplit("@", 1)[1].split("-linux")[0]
    return out


VERSIONS = pinned_versions()


@pytest.fixture(scope="module")
def bundle():
    """The built bundle, hard-linked (or copied) into a directory the
    sandbox uid can reach whatever the checkout's parents allow."""
    src = os.path.join(REPO, "bin", "sandbox-tools")
    r = subprocess.run([os.path.join(REPO, "scripts", "tools-build.sh"), src],
                       capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, "tools-build: %s" % r.stderr[-2000:]
    top = make_tmpdir("orc-tools-")
    os.chmod(top, 0o755)
    dst = os.path.join(top, "sandbox-tools")
    if subprocess.run(["cp", "-al", src, dst], capture_output=True).returncode != 0:
        shutil.rmtree(dst, ignore_errors=True)
        subprocess.run(["cp", "-a", src, dst], check=True)
    yield dst
    shutil.rmtree(top, ignore_errors=True)


def start_stack(env):
    s = Stack(env=env)
    s.start()
    return s


@pytest.fixture(scope="module")
def tools_stack(bundle):
    s = start_stack({"ORCHARD_SANDBOX_TOOLS": bundle})
    yield s
    s.close()


@pytest.fixture(scope="module")
def session(tools_stack):
    return tools_stack.session()


def create(st, sess, image, **extra):
    r = sess.post(st.url + "/v1/sandboxes", json=dict({"image": image, "memory": "2Gi"}, **extra))
    assert r.status_code == 200, r.text
    sid = r.json()["sandbox_id"]
    info = st.wait_ready(sess, sid, timeout=120)
    assert info.get("status") == "ready", (info, st.scalar(
        "SELECT state_message FROM sandboxes WHERE id = '%s'" % sid))
    return sid


def run(st, sess, sid, cmd, login=False, timeout=180):
    r = sess.post("%s/v1/sandboxes/%s/exec" % (st.url, sid),
                  json={"command": cmd, "wait": True, "login_shell": login, "timeout": timeout},
                  timeout=timeout + 60)
    assert r.status_code == 200, r.text
    return r.json()


def assert_tools_run(st, sess, sid):
    for name, want in (("codex", VERSIONS["codex"]), ("claude", VERSIONS["claude"]),
                       ("opencode", VERSIONS["opencode"])):
        j = run(st, sess, sid, "%s --version" % name)
        assert j["exit_code"] == 0, (name, j["stdout"], j["stderr"])
        assert want in j["stdout"], (name, j)


@pytest.fixture(scope="module")
def host_sandbox(tools_stack, session):
    sid = create(tools_stack, session, "host")
    yield sid
    session.delete("%s/v1/sandboxes/%s" % (tools_stack.url, sid))


def test_all_three_run_in_a_host_sandbox(tools_stack, session, host_sandbox):
    assert_tools_run(tools_stack, session, host_sandbox)
    j = run(tools_stack, session, host_sandbox, 'command -v codex; echo "$PATH"')
    lines = j["stdout"].splitlines()
    assert lines[0] == MOUNT + "/bin/codex", j
    assert lines[1].endswith(":" + MOUNT + "/bin") and lines[1].startswith("/usr/local/sbin:"), j


def test_login_shells_keep_the_tools_last_on_path(tools_stack, session, host_sandbox):
    j = run(tools_stack, session, host_sandbox, 'echo "$PATH"; command -v claude', login=True)
    assert j["exit_code"] == 0, j
    path, where = j["stdout"].splitlines()[-2:]
    assert path.split(":")[-1] == MOUNT + "/bin" and path.count(MOUNT) == 1, j
    assert where == MOUNT + "/bin/claude", j


def test_the_bundle_is_read_only_inside(tools_stack, session, host_sandbox):
    j = run(tools_stack, session, host_sandbox,
            "touch %s/new; echo x > %s/bin/codex; rm -f %s/bin/claude; ls %s/bin" % ((MOUNT,) * 4))
    assert "Read-only file system" in j["stderr"], j
    assert set(j["stdout"].split()) >= {"codex", "claude", "opencode"}, j


def test_all_three_run_in_a_busybox_image_without_libc(tools_stack, session, tmp_path):
    bb = static_busybox()
    if not bb:
        pytest.skip("no static busybox: apt-get install busybox-static")
    root = tmp_path / "root"
    (root / "bin").mkdir(parents=True)
    (root / "etc").mkdir()
    shutil.copy(bb, root / "bin" / "busybox")
    for applet in BUSYBOX_APPLETS:
        os.symlink("busybox", root / "bin" / applet)
    env = dict(tools_stack.env(), ORCHARD_IMAGE_DIR=os.path.join(tools_stack.var, "images"))
    r = subprocess.run([os.path.join(BIN, "orchard-admin"), "image", "import", "bbtools",
                        "--dir", str(root)], env=env, capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    sid = create(tools_stack, session, "bbtools")
    try:
        j = run(tools_stack, session, sid, "test -e /lib64/ld-linux-x86-64.so.2 || echo no-glibc")
        assert j["stdout"] == "no-glibc\n", j
        assert_tools_run(tools_stack, session, sid)
    finally:
        session.delete("%s/v1/sandboxes/%s" % (tools_stack.url, sid))


def test_tools_false_on_create_gives_that_sandbox_none(tools_stack, session):
    sid = create(tools_stack, session, "host", tools=False)
    try:
        j = run(tools_stack, session, sid, 'command -v codex || echo none; test -e %s || echo absent; '
                'echo "$PATH"' % MOUNT)
        assert j["stdout"].splitlines()[:2] == ["none", "absent"], j
        assert MOUNT not in j["stdout"], j
        j = run(tools_stack, session, sid, 'echo "$PATH"', login=True)
        assert MOUNT not in j["stdout"], j
    finally:
        session.delete("%s/v1/sandboxes/%s" % (tools_stack.url, sid))


def test_tools_must_be_a_boolean(tools_stack, session):
    before = tools_stack.scalar("SELECT count(*) FROM sandboxes")
    r = session.post(tools_stack.url + "/v1/sandboxes", json={"image": "host", "tools": "no"})
    assert r.status_code == 422, r.text
    assert "tools" in r.json()["detail"], r.text
    assert tools_stack.scalar("SELECT count(*) FROM sandboxes") == before


def test_tools_off_gives_none(bundle):
    st = start_stack({"ORCHARD_SANDBOX_TOOLS": "off"})
    try:
        sess = st.session()
        sid = create(st, sess, "host")
        j = run(st, sess, sid, 'command -v codex || echo none; test -e %s || echo absent; echo "$PATH"'
                % MOUNT)
        assert j["stdout"].splitlines()[:2] == ["none", "absent"], j
        assert MOUNT not in j["stdout"], j
    finally:
        st.close()
