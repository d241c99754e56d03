"""The checkpoint tests of test_checkpoints.py again, on the btrfs
backend (docs/checkpoints.md): the stack's state dir is a loop-mounted
btrfs and ORCHARD_CHECKPOINT_BACKEND=btrfs, so a sandbox dir is a
subvolume, a checkpoint a read-only snapshot and a fork a writable
snapshot of it. Plus what only btrfs has: the subvolumes themselves, and
that none is left behind.
"""
import os

import pytest

import btrfs_loop
import rollout_helpers
# Collected again here, against this module's stack.
from test_checkpoints import (  # noqa: F401
    test_a_checkpoint_outlives_its_sandbox_and_delete_removes_it,
    test_a_forked_git_repo_has_the_checkpointed_head_and_status,
    test_bad_input_and_other_tenants_get_clear_errors_and_create_nothing,
    test_delete_of_a_paused_sandbox_completes,
    test_fork_now_with_one_idempotency_key_for_the_batch,
    test_fork_restores_the_checkpointed_state_and_forks_are_isolated,
    test_pause_stops_cpu_use_and_exec_is_409_until_resume,
    test_what_a_crash_mid_checkpoint_leaves_is_finished_or_removed,
    checkpoint, create, fork, sh, SETUP, LISTING,
)

pytestmark = pytest.mark.skipif(btrfs_loop.unavailable() is not None,
                                reason=str(btrfs_loop.unavailable()))


@pytest.fixture(scope="module")
def stack():
    with btrfs_loop.stack_on("btrfs") as s:
        yield s


@pytest.fixture(scope="module")
def admin(stack):
    return stack.session()


@pytest.fixture(scope="module")
def other(stack):
    return stack.session(key=stack.new_tenant_key("tenant-b"))


def test_sandboxes_are_subvolumes_checkpoints_readonly_snapshots_and_none_leak(stack, admin):
    mnt = os.path.join(stack.var, "sandboxes")
    parent = create(stack, admin)
    sh(stack, admin, parent, SETUP)
    before = sh(stack, admin, parent, LISTING)
    assert parent in btrfs_loop.subvolumes(mnt)
    ck = checkpoint(stack, admin, parent)
    snap = os.path.join(mnt, ".checkpoints", ck["id"])
    assert ".checkpoints/" + ck["id"] in btrfs_loop.subvolumes(mnt)
    assert btrfs_loop.readonly(snap)
    with pytest.raises(OSError):
        open(os.path.join(snap, "workspace", "data.bin"), "ab").close()
    assert rollout_helpers.counted_bytes(stack, admin, ck["id"]) >= len("hello\0bytes") + len("x\n")
    (child,) = fork(stack, admin, ck["id"], 1)
    assert child in btrfs_loop.subvolumes(mnt)
    assert not btrfs_loop.readonly(os.path.join(mnt, child))
    assert sh(stack, admin, child, LISTING) == before
    # The fork has its own run/ (token, socket), not the parent's.
    with open(os.path.join(mnt, parent, "run", "token")) as a, \
            open(os.path.join(mnt, child, "run", "token")) as b:
        assert a.read() != b.read()
    # A subvolume the sandbox made itself must not keep its dir alive.
    r = admin.post("%s/v1/sandboxes/%s/exec" % (stack.url, child),
                   json={"command": "btrfs subvolume create /workspace/own", "wait": True})
    assert r.status_code == 200, r.text
    own = r.json()["exit_code"] == 0
    for sid in (parent, child):
        assert admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid)).status_code == 200
    assert admin.delete("%s/v1/checkpoints/%s" % (stack.url, ck["id"])).status_code == 200
    stack.wait_for(lambda: stack.scalar("SELECT state FROM checkpoints WHERE id = '%s'" % ck["id"])
                   == "deleted", timeout=120, what="the checkpoint deleted")
    for sid in (parent, child):
        stack.wait_for(lambda: stack.scalar("SELECT state FROM sandboxes WHERE id = '%s'" % sid)
                       == "deleted", timeout=120, what="the sandbox deleted")
    left = [p for p in btrfs_loop.subvolumes(mnt)
            if p.split("/")[-1] in (parent, child, ck["id"]) or p.startswith(child + "/")]
    assert left == [], (left, own)
    assert not os.path.exists(os.path.join(mnt, child))


def test_fork_of_an_imported_image_keeps_its_private_layer(stack, admin, tmp_path):
    from busybox import static_busybox
    from test_images import img, make_rootfs, mounts_under, run
    from test_images import create as create_from
    if not static_busybox():
        pytest.skip("no static busybox: apt-get install busybox-static")
    mnt = os.path.join(stack.var, "sandboxes")
    name = "ckbtrfs"
    img(stack, "import", name, "--dir", make_rootfs(str(tmp_path / "root")))
    parent = create_from(stack, admin, name)
    assert run(stack, admin, parent, "echo changed > /etc/marker && echo w > /workspace/w")["exit_code"] == 0
    ck = checkpoint(stack, admin, parent)
    assert run(stack, admin, parent, "echo later > /etc/marker")["exit_code"] == 0
    (child,) = fork(stack, admin, ck["id"], 1)
    got = run(stack, admin, child, "cat /etc/marker /workspace/w")
    assert got["stdout"] == "changed\nw\n", got
    overlay = os.path.exists(os.path.join(mnt, parent, "upper"))
    assert os.path.exists(os.path.join(mnt, child, "upper")) == overlay
    if overlay:
        assert os.path.join(mnt, child, "root") in mounts_under(os.path.join(mnt, child))
    for sid in (parent, child):
        admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))
    for sid in (parent, child):
        stack.wait_for(lambda: stack.scalar("SELECT state FROM sandboxes WHERE id = '%s'" % sid)
                       == "deleted", timeout=120, what="the sandbox deleted")
    img(stack, "rm", name)
