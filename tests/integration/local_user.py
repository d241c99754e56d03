"""A temporary unprivileged local user for tests, and running code as it.

The user is created by the fixture and removed afterwards (with its group),
so no test leaves an account behind on the host.
"""
import grp
import os
import pwd
import shutil
import subprocess
import uuid

import pytest


def _tool(name):
    # /usr/sbin may be missing from a CI runner's PATH.
    return shutil.which(name) or os.path.join("/usr/sbin", name)


@pytest.fixture(scope="module")
def local_user():
    if os.geteuid() != 0:
        pytest.skip("creating a local user needs root")
    name = "orc-t%s" % uuid.uuid4().hex[:8]
    subprocess.run([_tool("useradd"), "--system", "--no-create-home", "--user-group",
                    "--shell", "/usr/sbin/nologin", name], check=True, capture_output=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run([_tool("userdel"), name], capture_output=True)
        try:
            grp.getgrnam(name)
            subprocess.run([_tool("groupdel"), name], capture_output=True)
        except KeyError:
            pass
    try:
        pwd.getpwnam(name)
        raise AssertionError("user %s was not removed" % name)
    except KeyError:
        pass


def as_user(pw, fn):
    """Run fn() in a forked child with pw's uid and gid and no other groups;
    returns "ok:<fn's result>" or the name of the exception it raised."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            try:
                out = "ok:%s" % (fn(),)
            except Exception as e:  # noqa: BLE001 - reported to the parent
                out = type(e).__name__
            os.write(w, out.encode()[:4000])
        finally:
            os._exit(0)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 4096)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode()
