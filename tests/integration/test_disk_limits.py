"""Per-sandbox disk limits (issue 19, item 3; docs/controller.md, "Disk").

The stack's state dir is a loop-mounted btrfs (btrfs_loop), so each
sandbox dir is a subvolume whose qgroup the controller limits to the
sandbox's `disk`: a write past it fails inside the sandbox with EDQUOT,
the host's use stays bounded and other sandboxes still write. The default
(ORCHARD_SANDBOX_DISK_DEFAULT) is set small here so that it is enforced
too, not only recorded.
"""
import os
import subprocess

import pytest

import btrfs_loop
from rollout_helpers import checkpoint, fork_at, ready_forks

pytestmark = pytest.mark.skipif(btrfs_loop.unavailable() is not None,
                                reason=str(btrfs_loop.unavailable()))

MIB = 1 << 20
DEFAULT = "96Mi"
# 200 MiB, flushed, so the quota is met while dd runs, not at a later commit.
FILL = "dd if=/dev/zero of=%s bs=1M count=200 conv=fsync"


@pytest.fixture(scope="module")
def stack():
    with btrfs_loop.stack_on("btrfs", env={"ORCHARD_SANDBOX_DISK_DEFAULT": DEFAULT}) as s:
        yield s


@pytest.fixture(scope="module")
def admin(stack):
    return stack.session()


def create(stack, s, **spec):
    body = {"image": "host"}
    body.update(spec)
    r = s.post(stack.url + "/v1/sandboxes", json=body)
    assert r.status_code == 200, r.text
    sb = r.json()
    assert stack.wait_ready(s, sb["sandbox_id"])["status"] == "ready"
    return sb


def run(stack, s, sid, command):
    r = s.post("%s/v1/sandboxes/%s/exec" % (stack.url, sid),
               json={"command": command, "wait": True, "timeout": 300})
    assert r.status_code == 200, r.text
    return r.json()


def host_bytes(stack, sid):
    """Blocks the sandbox dir uses on the host (du, not apparent size)."""
    out = subprocess.run(["du", "-s", "--block-size=1", os.path.join(stack.var, "sandboxes", sid)],
                         capture_output=True, text=True, timeout=120)
    return int(out.stdout.split()[0])


def assert_fill_fails(stack, s, sid, path="/workspace/big"):
    job = run(stack, s, sid, FILL % path)
    assert job["exit_code"] != 0, job
    assert "quota" in job["stderr"] or "No space" in job["stderr"], job["stderr"]
    return job


def test_a_write_past_the_limit_fails_inside_and_others_still_write(stack, admin):
    small = create(stack, admin, disk="64Mi")
    assert small["disk"] == "64Mi"
    assert admin.get("%s/v1/sandboxes/%s" % (stack.url, small["sandbox_id"])).json()["disk"] == "64Mi"
    other = create(stack, admin, disk="64Mi")
    assert_fill_fails(stack, admin, small["sandbox_id"])
    assert host_bytes(stack, small["sandbox_id"]) < 80 * MIB
    # /tmp is part of the same limit.
    assert_fill_fails(stack, admin, small["sandbox_id"], "/tmp/more")
    # The other sandbox is unaffected.
    assert run(stack, admin, other["sandbox_id"],
               "dd if=/dev/zero of=/workspace/f bs=1M count=32 conv=fsync")["exit_code"] == 0
    # Removing the file frees the space again.
    job = run(stack, admin, small["sandbox_id"],
              "rm -f /workspace/big /tmp/more && sync && "
              "dd if=/dev/zero of=/workspace/g bs=1M count=16 conv=fsync")
    assert job["exit_code"] == 0, job
    for sb in (small, other):
        assert admin.delete("%s/v1/sandboxes/%s" % (stack.url, sb["sandbox_id"])).status_code == 200


def test_the_default_is_applied_and_enforced(stack, admin):
    sb = create(stack, admin)
    assert sb["disk"] == DEFAULT
    assert stack.scalar("SELECT disk_bytes FROM sandboxes WHERE id = '%s'" % sb["sandbox_id"]) \
        == str(96 * MIB)
    assert_fill_fails(stack, admin, sb["sandbox_id"])
    assert host_bytes(stack, sb["sandbox_id"]) < 112 * MIB
    assert admin.delete("%s/v1/sandboxes/%s" % (stack.url, sb["sandbox_id"])).status_code == 200


@pytest.mark.parametrize("disk", ["2GB", "-1Mi", "1Ki", "15Mi", "65Ti", "", "lots", True, [1]])
def test_bad_disk_values_are_422_and_create_nothing(stack, admin, disk):
    before = stack.scalar("SELECT count(*) FROM sandboxes")
    r = admin.post(stack.url + "/v1/sandboxes", json={"image": "host", "disk": disk})
    assert r.status_code == 422, r.text
    assert "disk" in r.json()["detail"]
    r = admin.post(stack.url + "/v1/sandboxes/batch", json={"image": "host", "count": 2, "disk": disk})
    assert r.status_code == 422, r.text
    assert stack.scalar("SELECT count(*) FROM sandboxes") == before


def test_batch_create_takes_disk(stack, admin):
    r = admin.post(stack.url + "/v1/sandboxes/batch", json={"image": "host", "count": 2, "disk": "80Mi"})
    assert r.status_code == 201, r.text
    for sid in r.json()["sandbox_ids"]:
        assert stack.wait_ready(admin, sid)["disk"] == "80Mi"
        assert admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid)).status_code == 200


def test_a_fork_keeps_the_limit_unless_it_names_its_own(stack, admin):
    parent = create(stack, admin, disk="64Mi")["sandbox_id"]
    assert run(stack, admin, parent, "dd if=/dev/zero of=/workspace/seed bs=1M count=8")["exit_code"] == 0
    ck = checkpoint(stack, admin, parent)
    assert ck["state"] == "ready", ck
    bad = admin.post("%s/v1/checkpoints/%s/fork" % (stack.url, ck["id"]), json={"disk": "1Ki"})
    assert bad.status_code == 422, bad.text
    r = admin.post("%s/v1/checkpoints/%s/fork" % (stack.url, ck["id"]), json={"count": 1})
    (kept,) = ready_forks(stack, admin, r)
    assert admin.get("%s/v1/sandboxes/%s" % (stack.url, kept)).json()["disk"] == "64Mi"
    assert run(stack, admin, kept, "cat /workspace/seed | wc -c")["stdout"].strip() == str(8 * MIB)
    assert_fill_fails(stack, admin, kept)
    # A fork that names its own limit gets it (fork-now of the sandbox too).
    (bigger,) = ready_forks(stack, admin, fork_at(stack, admin, parent, {"disk": "160Mi"}))
    assert admin.get("%s/v1/sandboxes/%s" % (stack.url, bigger)).json()["disk"] == "160Mi"
    assert run(stack, admin, bigger,
               "dd if=/dev/zero of=/workspace/f bs=1M count=100 conv=fsync")["exit_code"] == 0
    for sid in (parent, kept, bigger):
        assert admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid)).status_code == 200


# Make /workspace/own with BTRFS_IOC_SUBVOL_CREATE, its request with and
# without high bits (the kernel reads 32); print the errno of each.
SUBVOL_CREATE = r'''
import errno, fcntl, os, struct
fd = os.open("/workspace", os.O_RDONLY | os.O_DIRECTORY)
for req in (0x5000940E, 0x5000940E | (1 << 32)):
    args = bytearray(struct.pack("q", 0) + b"own".ljust(4088, b"\0"))
    try:
        fcntl.ioctl(fd, req, args)
        print("created")
    except OSError as e:
        print(errno.errorcode[e.errno])
'''


def test_a_sandbox_cannot_make_a_subvolume_outside_its_limit(stack, admin):
    """A subvolume has a qgroup of its own: one made inside a sandbox would
    not count against its limit, so the seccomp filter refuses it."""
    sid = create(stack, admin, disk="64Mi")["sandbox_id"]
    job = run(stack, admin, sid, "btrfs subvolume create /workspace/own; "
              "btrfs subvolume snapshot /workspace/own /workspace/snap; "
              "python3 -c '%s'" % SUBVOL_CREATE.replace("'", "'\\''"))
    assert "Operation not permitted" in job["stderr"], job
    tries = job["stdout"].split("\n")[-3:-1]   # python's two lines
    assert tries == ["EPERM", "EPERM"], job
    mnt = os.path.join(stack.var, "sandboxes")
    assert not [p for p in btrfs_loop.subvolumes(mnt) if p.startswith(sid + "/")]
    assert_fill_fails(stack, admin, sid)
    assert admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid)).status_code == 200


def test_the_controller_says_disk_limits_are_enforced(stack):
    import json
    with open(os.path.join(stack.var, "log", "controller.log")) as f:
        lines = [json.loads(line) for line in f if '"disk limits' in line]
    assert lines and lines[-1]["enforced"] == "disk=btrfs-qgroup", lines
    assert lines[-1]["quotas"] in ("simple", "full"), lines
