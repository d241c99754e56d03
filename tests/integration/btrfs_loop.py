"""A btrfs filesystem in a sparse file, loop-mounted on a directory, for
the btrfs checkpoint backend's tests and bench (docs/checkpoints.md).

    with btrfs_loop.mounted("/tmp/x/sandboxes", "2G"):
        ...

The mount and the loop device are always undone, also when the body
fails; the image file is removed. stack_on() is a whole started stack on
either checkpoint backend, for the tests' module fixtures.
"""
import contextlib
import os
import shutil
import subprocess


def unavailable():
    """Why no loop btrfs can be made here, or None."""
    if os.geteuid() != 0:
        return "loop mounts need root"
    with open("/proc/filesystems") as f:
        if "btrfs" not in f.read().split():
            return "the kernel has no btrfs"
    if not shutil.which("mkfs.btrfs"):
        return "mkfs.btrfs missing (btrfs-progs: scripts/deps.sh)"
    if not os.path.exists("/dev/loop-control"):
        return "no loop devices"
    return None


def _run(*argv):
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=120)


@contextlib.contextmanager
def mounted(mnt, size="2G"):
    """Make mnt (created if missing) a fresh btrfs of size (sparse)."""
    image = mnt.rstrip("/") + ".btrfs.img"
    loop = None
    mounted_it = False
    try:
        os.makedirs(mnt, exist_ok=True)
        with open(image, "wb") as f:
            f.truncate(_size_bytes(size))
        r = _run("mkfs.btrfs", "-q", image)
        assert r.returncode == 0, r.stderr
        r = _run("losetup", "--find", "--show", image)
        assert r.returncode == 0, r.stderr
        loop = r.stdout.strip()
        r = _run("mount", "-t", "btrfs", loop, mnt)
        assert r.returncode == 0, r.stderr
        mounted_it = True
        yield mnt
    finally:
        if mounted_it and _run("umount", mnt).returncode != 0:
            _run("umount", "-l", mnt)
        if loop:
            _run("losetup", "-d", loop)
        if os.path.exists(image):
            os.unlink(image)


@contextlib.contextmanager
def stack_on(backend, env=None, size="2G"):
    """A started Stack with ORCHARD_CHECKPOINT_BACKEND=backend (and env),
    whose state dir is a fresh loop btrfs of size for "btrfs"; taken down,
    unmounted and removed after. stack.backend names the backend."""
    from stack import Stack, make_tmpdir
    var = make_tmpdir()
    s = Stack(var=var, env=dict(env or {}, ORCHARD_CHECKPOINT_BACKEND=backend))
    s.backend = backend
    with (mounted(os.path.join(var, "sandboxes"), size) if backend == "btrfs"
          else contextlib.nullcontext()):
        try:
            s.start()
            yield s
        finally:
            s.down()
    s.remove()


def _size_bytes(size):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if size[-1] in units:
        return int(size[:-1]) * units[size[-1]]
    return int(size)


def subvolumes(mnt):
    """Paths (relative to mnt) of the subvolumes on the filesystem at mnt."""
    r = _run("btrfs", "subvolume", "list", "-o", mnt)
    assert r.returncode == 0, r.stderr
    return sorted(line.split(" path ", 1)[1] for line in r.stdout.splitlines() if " path " in line)


def readonly(path):
    """True when the subvolume at path is read-only (btrfs property)."""
    r = _run("btrfs", "property", "get", "-ts", path, "ro")
    assert r.returncode == 0, r.stderr
    return r.stdout.strip() == "ro=true"
