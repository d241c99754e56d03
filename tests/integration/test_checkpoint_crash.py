"""A controller killed (SIGKILL) mid-checkpoint or mid-fork, on both
checkpoint backends (docs/checkpoints.md, "Crash safety"): no half
checkpoint is visible meanwhile, and the next controller finishes the
work, with nothing left behind (no .partial, no subvolume, no sandbox
dir) once everything is deleted.

The window is made with ORCHARD_TEST_CHECKPOINT_DELAY_MS, a test-only
sleep after the copy or snapshot is on disk and before the database
knows (docs/configuration.md). ORCHARD_FORK_PARALLEL is 2 here, so a
fork of 3 has two launches in their helpers and one waiting for a helper.
"""
import contextlib
import json
import os
import signal
import threading
import time

import pytest

import btrfs_loop
import procs
import rollout_helpers
from test_checkpoints import checkpoint, create, sh

DELAY_MS = 4000
FORK_PARALLEL = 2


@pytest.fixture(scope="module", params=["copy", "btrfs"])
def stack(request):
    backend = request.param
    if backend == "btrfs" and btrfs_loop.unavailable():
        pytest.skip(btrfs_loop.unavailable())
    with btrfs_loop.stack_on(backend, {"ORCHARD_TEST_CHECKPOINT_DELAY_MS": str(DELAY_MS),
                                       "ORCHARD_FORK_PARALLEL": str(FORK_PARALLEL)},
                             "1G") as s:
        yield s


@pytest.fixture(scope="module")
def admin(stack):
    return stack.session()


def log_lines(stack):
    with open(os.path.join(stack.var, "log", "controller.log")) as f:
        for line in f:
            with contextlib.suppress(ValueError):
                yield json.loads(line)


def in_delay(stack, what, ident):
    return any(j.get("in") == what and j.get("id") == ident for j in log_lines(stack))


def kill_controller(stack):
    with open(os.path.join(stack.run_dir, "controller.pid")) as f:
        pid = int(f.read().split()[0])
    os.kill(pid, signal.SIGKILL)
    stack.wait_for(lambda: not procs.alive(pid), timeout=30, what="the controller gone")


def checkpoint_in_delay(stack, admin, sid):
    """POST a checkpoint of sid from a thread, and wait until the
    controller is in its test delay: (thread, [answer], checkpoint id)."""
    answers = []
    t = threading.Thread(target=lambda: answers.append(admin.post(
        "%s/v1/sandboxes/%s/checkpoints" % (stack.url, sid), json={})))
    t.start()
    ck = []
    stack.wait_for(lambda: ck.extend(stack.psql("SELECT id FROM checkpoints WHERE sandbox_id = '%s'"
                                                % sid)[:1]) or ck, timeout=60, what="the row")
    stack.wait_for(lambda: in_delay(stack, "checkpoint", ck[0][0]), timeout=120,
                   what="the checkpoint in its test delay")
    return t, answers, ck[0][0]


def state(stack, table, ident):
    return stack.scalar("SELECT state FROM %s WHERE id = '%s'" % (table, ident))


def store(stack):
    return os.path.join(stack.var, "sandboxes", ".checkpoints")


def leftovers(stack, names):
    """What of names is still on disk (sandbox dirs, copies, partials,
    subvolumes)."""
    base = os.path.join(stack.var, "sandboxes")
    left = [n for n in names if os.path.lexists(os.path.join(base, n))]
    for n in names:
        for p in (os.path.join(store(stack), n), os.path.join(store(stack), n + ".partial")):
            if os.path.lexists(p):
                left.append(p)
    if stack.backend == "btrfs":
        left += [p for p in btrfs_loop.subvolumes(base) if p.split("/")[-1] in names]
    return left


def test_killed_mid_checkpoint_no_half_checkpoint_and_the_next_controller_finishes(stack, admin):
    sid = create(stack, admin)
    sh(stack, admin, sid, "head -c 3000000 /dev/urandom > /workspace/big; echo v1 > /workspace/f")
    t, answers, ck = checkpoint_in_delay(stack, admin, sid)
    kill_controller(stack)
    # Not visible as a checkpoint: pending, and a fork of it is refused.
    assert state(stack, "checkpoints", ck) == "pending"
    r = admin.post("%s/v1/checkpoints/%s/fork" % (stack.url, ck), json={"count": 1})
    assert r.status_code in (404, 409), r.text
    before = stack.counts()["sandboxes"]
    if stack.backend == "copy":
        assert os.path.isdir(os.path.join(store(stack), ck + ".partial"))
        assert not os.path.exists(os.path.join(store(stack), ck))
    stack.up()   # a new controller
    stack.wait_for(lambda: state(stack, "checkpoints", ck) == "ready", timeout=180,
                   what="the checkpoint taken again")
    t.join(timeout=300)
    assert not os.path.exists(os.path.join(store(stack), ck + ".partial"))
    # Taken again, whole.
    with open(os.path.join(store(stack), ck, "workspace", "f")) as f:
        assert f.read() == "v1\n"
    assert os.path.getsize(os.path.join(store(stack), ck, "workspace", "big")) == 3000000
    assert stack.counts()["sandboxes"] == before
    # The killed controller froze it for the copy; it runs again (not paused).
    assert sh(stack, admin, sid, "echo v2 > /workspace/f; cat /workspace/f") == "v2\n"
    assert admin.get("%s/v1/sandboxes/%s" % (stack.url, sid)).json()["paused"] is False
    admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))
    admin.delete("%s/v1/checkpoints/%s" % (stack.url, ck))
    stack.wait_for(lambda: state(stack, "checkpoints", ck) == "deleted" and
                   state(stack, "sandboxes", sid) == "deleted", timeout=180, what="all deleted")
    assert leftovers(stack, [sid, ck]) == []


def test_killed_mid_fork_the_next_controller_launches_it_and_nothing_leaks(stack, admin):
    sid = create(stack, admin)
    sh(stack, admin, sid, "mkdir -p /workspace/d && echo forked > /workspace/d/f")
    ck = checkpoint(stack, admin, sid)["id"]
    r = admin.post("%s/v1/checkpoints/%s/fork" % (stack.url, ck), json={"count": 1})
    assert r.status_code == 200, r.text
    (child,) = r.json()["sandbox_ids"]
    stack.wait_for(lambda: in_delay(stack, "fork", child), timeout=120, what="the restore done")
    kill_controller(stack)
    assert state(stack, "sandboxes", child) == "pending"
    stack.up()
    info = stack.wait_ready(admin, child)
    assert info["status"] == "ready", info
    assert sh(stack, admin, child, "cat /workspace/d/f; ls /workspace") == "forked\nd\n"
    for x in (sid, child):
        admin.delete("%s/v1/sandboxes/%s" % (stack.url, x))
    admin.delete("%s/v1/checkpoints/%s" % (stack.url, ck))
    stack.wait_for(lambda: state(stack, "checkpoints", ck) == "deleted" and
                   state(stack, "sandboxes", sid) == "deleted" and
                   state(stack, "sandboxes", child) == "deleted", timeout=180, what="all deleted")
    assert leftovers(stack, [sid, child, ck]) == []


def test_a_long_copy_does_not_hold_up_the_reconcile_loop(stack, admin):
    """The copy backend copies in a helper process: while one checkpoint's
    copy is still running (held open by the test delay), another sandbox
    is created and becomes ready."""
    if stack.backend != "copy":
        pytest.skip("a btrfs snapshot is taken at once, in the loop")
    sid = create(stack, admin)
    t, r, ck = checkpoint_in_delay(stack, admin, sid)
    other = create(stack, admin)
    assert state(stack, "checkpoints", ck) == "pending", "the copy ended before the create: inconclusive"
    t.join(timeout=300)
    assert r and r[0].status_code == 200 and r[0].json()["state"] == "ready", r and r[0].text
    for x in (sid, other):
        admin.delete("%s/v1/sandboxes/%s" % (stack.url, x))


def helpers_of(pid):
    """The live child processes of pid that are copies of it (the
    controller's helpers: same executable)."""
    exe = os.readlink("/proc/%d/exe" % pid)
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        with contextlib.suppress(OSError):
            st = open("/proc/%s/stat" % d).read().rsplit(") ", 1)[1].split()
            if int(st[1]) == pid and st[0] != "Z" and os.readlink("/proc/%s/exe" % d) == exe:
                out.append(int(d))
    return out


def controller_pid(stack):
    with open(os.path.join(stack.run_dir, "controller.pid")) as f:
        return int(f.read().split()[0])


def test_a_fork_launches_in_parallel_helpers_bounded_and_survives_a_killed_controller(stack, admin):
    """A fork of 3 with ORCHARD_FORK_PARALLEL=2: two launches run at once
    in helper processes while the third waits for one, the loop meanwhile
    makes another sandbox ready; the controller is then killed with all
    three pending, its helpers die with it, and the next controller
    launches all three with the checkpoint's files; nothing is left after
    deletion."""
    sid = create(stack, admin)
    sh(stack, admin, sid, "mkdir -p /workspace/d && echo forked > /workspace/d/f")
    ck = checkpoint(stack, admin, sid)["id"]
    rollout_helpers.counted_bytes(stack, admin, ck)   # its count's helper is gone
    r = admin.post("%s/v1/checkpoints/%s/fork" % (stack.url, ck), json={"count": 3})
    assert r.status_code == 200, r.text
    kids = r.json()["sandbox_ids"]
    assert len(kids) == 3
    ctl = controller_pid(stack)
    stack.wait_for(lambda: sum(in_delay(stack, "fork", k) for k in kids) >= FORK_PARALLEL,
                   timeout=120, what="two launches in their test delay")
    # Bounded: two helpers run, the third launch waits for one.
    assert sum(in_delay(stack, "fork", k) for k in kids) == FORK_PARALLEL
    assert len(helpers_of(ctl)) == FORK_PARALLEL, helpers_of(ctl)
    # Not holding the loop: another sandbox becomes ready meanwhile.
    other = create(stack, admin)
    assert [state(stack, "sandboxes", k) for k in kids] == ["pending"] * 3, \
        "the launches ended before the create: inconclusive"
    helpers = helpers_of(ctl)
    kill_controller(stack)
    stack.wait_for(lambda: not any(procs.alive(h) for h in helpers), timeout=30,
                   what="the helpers gone with the controller")
    assert [state(stack, "sandboxes", k) for k in kids] == ["pending"] * 3
    stack.up()
    for k in kids:
        info = stack.wait_ready(admin, k)
        assert info["status"] == "ready", info
        assert sh(stack, admin, k, "cat /workspace/d/f; ls /workspace") == "forked\nd\n"
    for x in [sid, other] + kids:
        admin.delete("%s/v1/sandboxes/%s" % (stack.url, x))
    admin.delete("%s/v1/checkpoints/%s" % (stack.url, ck))
    stack.wait_for(lambda: state(stack, "checkpoints", ck) == "deleted" and
                   all(state(stack, "sandboxes", x) == "deleted" for x in [sid, other] + kids),
                   timeout=180, what="all deleted")
    assert leftovers(stack, [sid, other, ck] + kids) == []


def test_a_fork_deleted_while_it_launches_stops_its_helper_and_leaves_nothing(stack, admin):
    """Deleting the forks while their launches run in helpers: every row
    ends deleted, no helper is left, and nothing of them stays on disk."""
    sid = create(stack, admin)
    ck = checkpoint(stack, admin, sid)["id"]
    rollout_helpers.counted_bytes(stack, admin, ck)
    r = admin.post("%s/v1/checkpoints/%s/fork" % (stack.url, ck), json={"count": 3})
    assert r.status_code == 200, r.text
    kids = r.json()["sandbox_ids"]
    ctl = controller_pid(stack)
    stack.wait_for(lambda: any(in_delay(stack, "fork", k) for k in kids), timeout=120,
                   what="a launch in its test delay")
    for k in kids:
        assert admin.delete("%s/v1/sandboxes/%s" % (stack.url, k)).status_code in (200, 202, 204)
    stack.wait_for(lambda: all(state(stack, "sandboxes", k) == "deleted" for k in kids),
                   timeout=180, what="the forks deleted")
    stack.wait_for(lambda: helpers_of(ctl) == [], timeout=60, what="no helper left")
    admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))
    admin.delete("%s/v1/checkpoints/%s" % (stack.url, ck))
    stack.wait_for(lambda: state(stack, "checkpoints", ck) == "deleted" and
                   state(stack, "sandboxes", sid) == "deleted", timeout=180, what="all deleted")
    assert leftovers(stack, [sid, ck] + kids) == []


def test_bytes_are_counted_after_the_answer_and_a_killed_controller_counts_them_again(stack, admin):
    """The checkpoint answers ready before its bytes are counted (null
    until then); a controller killed mid-count leaves them null, the next
    one counts them, and max_checkpoint_bytes then counts them."""
    sid = create(stack, admin)
    sh(stack, admin, sid, "head -c 3000000 /dev/urandom > /workspace/big")
    ck = checkpoint(stack, admin, sid)
    assert ck["bytes"] is None, ck
    stack.wait_for(lambda: in_delay(stack, "count", ck["id"]), timeout=120,
                   what="the count in its test delay")
    kill_controller(stack)
    got = admin.get("%s/v1/checkpoints/%s" % (stack.url, ck["id"])).json()
    assert got["state"] == "ready" and got["bytes"] is None, got
    stack.up()
    n = rollout_helpers.counted_bytes(stack, admin, ck["id"])
    assert n >= 3000000, n
    tenant = stack.scalar("SELECT tenant_id FROM sandboxes WHERE id = '%s'" % sid)
    stack.psql("UPDATE tenants SET max_checkpoint_bytes = %d WHERE id = '%s'" % (n, tenant))
    try:
        r = admin.post("%s/v1/sandboxes/%s/checkpoints" % (stack.url, sid), json={})
        assert r.status_code == 429 and "max_checkpoint_bytes" in r.json()["detail"], r.text
    finally:
        stack.psql("UPDATE tenants SET max_checkpoint_bytes = NULL WHERE id = '%s'" % tenant)
    admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))
    admin.delete("%s/v1/checkpoints/%s" % (stack.url, ck["id"]))
    stack.wait_for(lambda: state(stack, "checkpoints", ck["id"]) == "deleted" and
                   state(stack, "sandboxes", sid) == "deleted", timeout=180, what="all deleted")
    assert leftovers(stack, [sid, ck["id"]]) == []
