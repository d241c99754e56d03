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
from test_checkpoint_crash import log_lines
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
from test_step_checkpoints import (  # noqa: F401
    test_every_step_checkpoints_hold_each_steps_state_and_retention_expires_them,
)


pytestmark = pytest.mark.skipif(btrfs_loop.unavailable() is not None,
                                reason=str(btrfs_loop.unavailable()))


@pytest.fixture(scope="module")
def stack():
    # debug: the controller's "checkpoint snapshot taken" says whether it froze
    with btrfs_loop.stack_on("btrfs", env={"ORCHARD_LOG_LEVEL": "debug"}) as s:
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


def test_an_idle_sandbox_is_snapshotted_unfrozen_and_a_busy_one_frozen(stack, admin):
    """Between steps only the launch chain runs (watchdog, bwrap, agent,
    and slirp4netns with a network): the atomic snapshot needs no freeze. A
    process a command left behind may be mid-write, so then the sandbox is
    frozen for the snapshot (and thawed after)."""
    net = create(stack, admin, block_network=False)
    assert sh(stack, admin, net, "echo x > /workspace/x; cat /workspace/x") == "x\n"
    net_ck = checkpoint(stack, admin, net)
    sid = create(stack, admin)
    sh(stack, admin, sid, "echo one > /workspace/f")
    idle = checkpoint(stack, admin, sid)
    sh(stack, admin, sid, "(while :; do date > /workspace/busy; sleep 0.01; done)"
       " >/dev/null 2>&1 </dev/null &")
    busy = checkpoint(stack, admin, sid)
    frozen = {j["checkpoint_id"]: j["frozen"] for j in log_lines(stack)
              if j.get("msg") == "checkpoint snapshot taken"}
    assert frozen[idle["id"]] is False
    assert frozen[net_ck["id"]] is False
    assert frozen[busy["id"]] is True
    # thawed again: the writer goes on, and the sandbox answers
    first = sh(stack, admin, sid, "cat /workspace/busy; sleep 1.2; cat /workspace/busy")
    assert first.split("\n")[0] != first.split("\n")[1], first
    (child,) = fork(stack, admin, idle["id"], 1)
    assert sh(stack, admin, child, "cat /workspace/f") == "one\n"
    for x in (sid, child, net):
        assert admin.delete("%s/v1/sandboxes/%s" % (stack.url, x)).status_code == 200


def test_back_to_back_steps_each_checkpoint_holds_its_steps_state(stack, admin):
    """The step barrier lets the next step go once the snapshot is taken,
    before the row is ready (docs/checkpoints.md): every snapshot still
    holds the state after its step and before the next, steps back to back
    (the same file changed by each, and a file added by each)."""
    sid = create(stack, admin, checkpoints="every_step")
    for i in range(1, 13):
        sh(stack, admin, sid, "echo %d > /workspace/n; touch /workspace/s%d" % (i, i))
    lines = rollout_helpers.steps(stack, admin, sid)
    assert [l["step"] for l in lines] == list(range(1, 13))
    ids = [l["checkpoint_id"] for l in lines]
    stack.wait_for(lambda: all(admin.get("%s/v1/checkpoints/%s" % (stack.url, c)).json()["state"]
                               == "ready" for c in ids), timeout=120, what="the step checkpoints")
    for i, c in enumerate(ids, 1):
        ws = os.path.join(stack.var, "sandboxes", ".checkpoints", c, "workspace")
        with open(os.path.join(ws, "n")) as f:
            assert f.read() == "%d\n" % i, "step %d" % i
        assert sorted(x for x in os.listdir(ws) if x.startswith("s")) == \
            sorted("s%d" % k for k in range(1, i + 1)), "step %d" % i
    assert admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid)).status_code == 200


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
