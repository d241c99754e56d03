"""One host uid per `host` sandbox (issue 19 item 8; docs/controller.md,
"Sandbox uids"). Per-uid kernel limits (inotify instances, ...) are counted
against the host uid that owns a sandbox's user namespace; with one uid
shared by every sandbox, one sandbox holding all its inotify instances broke
inotify_init in every other sandbox on the host.

The controller claims a uid of ORCHARD_SANDBOX_UID_BASE/_COUNT per sandbox
with a file in /run/orchard-sandbox-uids ("<state dir>\\n<id>\\n"), gives
the sandbox's processes and files that uid, and drops the claim with the
sandbox. The stack runs as root for all of this; otherwise every sandbox
runs as the stack's own user and there is nothing to test."""
import os
import re

import pytest

import procs
from test_checkpoint_crash import kill_controller
from test_checkpoints import checkpoint, create, fork, sh

CLAIMS = procs.UID_CLAIMS
BASE, COUNT = 2000000000, 65536   # the defaults (docs/configuration.md)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="per-sandbox uids need a root stack")


def state_dir(stack):
    return os.path.realpath(os.path.join(stack.var, "sandboxes"))


def claims(stack):
    """{uid: sandbox id} of this stack's claims."""
    return procs.sandbox_uids(state_dir(stack))


def uid_of(stack, sid):
    return procs.sandbox_uid(state_dir(stack), sid)


def host_uids(stack, sid):
    """The real, effective, saved and fs uids (/proc/PID/status) of every
    process under the sandbox's watchdog (its handle)."""
    handle = stack.scalar("SELECT driver_handle FROM sandboxes WHERE id = '%s'" % sid)
    top = int(handle.split(":")[0])
    uids = set()
    for p in procs.descendants([top]) - {top}:
        try:
            with open("/proc/%d/status" % p) as f:
                m = re.search(r"^Uid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", f.read(), re.M)
        except OSError:
            continue
        uids.update(int(x) for x in m.groups())
    return uids


def delete(stack, s, sid):
    s.delete("%s/v1/sandboxes/%s" % (stack.url, sid))
    stack.wait_for(lambda: stack.scalar("SELECT state FROM sandboxes WHERE id = '%s'" % sid)
                   == "deleted", timeout=60, what="%s deleted" % sid)


INOTIFY = "import ctypes; l = ctypes.CDLL(None, use_errno=True); " \
          "fd = l.inotify_init(); print(fd >= 0, ctypes.get_errno())"

HOLD = r"""
import ctypes, time
l = ctypes.CDLL(None, use_errno=True)
fds = []
while True:
    fd = l.inotify_init()
    if fd < 0:
        break
    fds.append(fd)
with open("/tmp/held.tmp", "w") as f:
    f.write("%d %d" % (len(fds), ctypes.get_errno()))
import os
os.rename("/tmp/held.tmp", "/tmp/held")
time.sleep(3600)
"""


def test_two_sandboxes_run_as_different_host_uids_and_own_their_files(stack, admin):
    a, b = create(stack, admin), create(stack, admin)
    ua, ub = uid_of(stack, a), uid_of(stack, b)
    assert ua != ub
    for sid, uid in ((a, ua), (b, ub)):
        assert BASE <= uid < BASE + COUNT
        assert host_uids(stack, sid) == {uid}, sid
        for part in ("workspace", "tmp"):
            st = os.stat(os.path.join(state_dir(stack), sid, part))
            assert (st.st_uid, st.st_gid) == (uid, uid), part
        # Inside, the sandbox is root as before (mapped onto its own uid).
        assert sh(stack, admin, sid, "id -u") == "0\n"
        sh(stack, admin, sid, "echo mine > /workspace/f")
        assert os.stat(os.path.join(state_dir(stack), sid, "workspace", "f")).st_uid == uid
    delete(stack, admin, a)
    delete(stack, admin, b)


def test_one_sandbox_exhausting_inotify_does_not_break_another(stack, admin):
    a, b = create(stack, admin), create(stack, admin)
    sh(stack, admin, a, "cat > /tmp/hold.py <<'EOF'\n%s\nEOF\n(setsid python3 /tmp/hold.py "
       "</dev/null >/dev/null 2>&1 &)" % HOLD)
    stack.wait_for(lambda: "held" in sh(stack, admin, a, "ls /tmp"), timeout=60,
                   what="the inotify instances held")
    held, errno = map(int, sh(stack, admin, a, "cat /tmp/held").split())
    assert held > 0 and errno == 24, (held, errno)     # EMFILE: the per-uid limit
    # The limit is reached for a's uid ...
    assert sh(stack, admin, a, "python3 -c '%s'" % INOTIFY).split() == ["False", "24"]
    # ... and only for it.
    assert sh(stack, admin, b, "python3 -c '%s'" % INOTIFY).split()[0] == "True"
    delete(stack, admin, a)
    delete(stack, admin, b)


def test_delete_releases_the_uid_and_a_new_sandbox_takes_it_again(stack, admin):
    sid = create(stack, admin)
    uid = uid_of(stack, sid)
    assert os.path.exists(os.path.join(CLAIMS, str(uid)))
    delete(stack, admin, sid)
    stack.wait_for(lambda: uid not in claims(stack), timeout=30, what="the claim released")
    # The lowest free uid is taken first: at most the free ones below uid
    # are taken before it.
    below = sum(1 for u in range(BASE, uid) if not os.path.exists(os.path.join(CLAIMS, str(u))))
    made = []
    try:
        for _ in range(below + 1):
            made.append(create(stack, admin))
            if uid_of(stack, made[-1]) == uid:
                break
        assert uid_of(stack, made[-1]) == uid, [uid_of(stack, m) for m in made]
    finally:
        for m in made:
            delete(stack, admin, m)
    assert not set(made) & set(claims(stack).values())


def test_a_killed_controller_comes_back_with_the_claims(stack, admin):
    sid = create(stack, admin)
    uid = uid_of(stack, sid)
    before = claims(stack)
    kill_controller(stack)
    assert claims(stack) == before
    stack.up()
    assert stack.wait_ready(admin, sid)["status"] == "ready"
    assert sh(stack, admin, sid, "echo alive") == "alive\n"
    assert host_uids(stack, sid) == {uid}
    other = create(stack, admin)
    assert uid_of(stack, other) != uid
    assert uid_of(stack, sid) == uid
    delete(stack, admin, sid)
    delete(stack, admin, other)
    assert not {sid, other} & set(claims(stack).values())


def test_a_fork_owns_its_restored_files_and_can_write_them(stack, admin):
    parent = create(stack, admin)
    sh(stack, admin, parent, "mkdir -p /workspace/d/e && echo one > /workspace/d/e/f && "
       "chmod 700 /workspace/d && echo t > /tmp/t")
    ck = checkpoint(stack, admin, parent)
    (child,) = fork(stack, admin, ck["id"], 1)
    pu, cu = uid_of(stack, parent), uid_of(stack, child)
    assert pu != cu
    root = os.path.join(state_dir(stack), child)
    owners = set()
    for part in ("workspace", "tmp"):
        for d, dirs, files in os.walk(os.path.join(root, part)):
            owners.update(os.lstat(os.path.join(d, n)).st_uid for n in dirs + files + ["."])
    assert owners == {cu}
    assert host_uids(stack, child) == {cu}
    assert sh(stack, admin, child, "echo two >> /workspace/d/e/f && mkdir /workspace/d/x && "
              "echo t2 >> /tmp/t && cat /workspace/d/e/f") == "one\ntwo\n"
    delete(stack, admin, child)
    delete(stack, admin, parent)
    admin.delete("%s/v1/checkpoints/%s" % (stack.url, ck["id"]))
    assert not {parent, child} & set(claims(stack).values())
