"""Local users other than nginx's cannot speak to orchard-api (issue 19, item 1).

nginx sends trusted FastCGI params (ORCHARD_TENANT, ORCHARD_ROLE) over the
api's unix sockets, so whoever can connect to them is an admin. The sockets
are 0660 in nginx's group, and the api serves no peer whose uid is neither
root, its own nor nginx's (SO_PEERCRED), even when a socket's mode is
loosened by mistake. The tests run as a temporary unprivileged local user,
created here and removed afterwards.
"""
import grp
import os
import pwd
import socket
import stat
import subprocess
import uuid

import pytest

import fcgi_client


def nginx_user():
    for name in ("www-data", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise AssertionError("neither www-data nor nobody exists")


@pytest.fixture(scope="module")
def local_user():
    if os.geteuid() != 0:
        pytest.skip("creating a local user needs root")
    name = "orc-t%s" % uuid.uuid4().hex[:8]
    subprocess.run(["useradd", "--system", "--no-create-home", "--user-group",
                    "--shell", "/usr/sbin/nologin", name], check=True, capture_output=True)
    try:
        pw = pwd.getpwnam(name)
        yield pw
    finally:
        subprocess.run(["userdel", name], capture_output=True)
        try:
            grp.getgrnam(name)
            subprocess.run(["groupdel", name], capture_output=True)
        except KeyError:
            pass
    with pytest.raises(KeyError):
        pwd.getpwnam(name)


def as_user(pw, fn):
    """Run fn() in a child process with pw's uid and gids; its result: "ok:..."
    or the name of the exception it raised."""
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


def forged_admin_request(sock_path):
    """nginx's trusted params, forged: list every sandbox as an admin."""
    params = {"REQUEST_METHOD": "GET", "DOCUMENT_URI": "/v1/sandboxes",
              "SCRIPT_NAME": "/v1/sandboxes", "REQUEST_URI": "/v1/sandboxes",
              "QUERY_STRING": "", "CONTENT_TYPE": "", "CONTENT_LENGTH": "",
              "ORCHARD_TENANT": "1", "ORCHARD_KEY": "1", "ORCHARD_ROLE": "admin"}

    def fn():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(sock_path)
            status, _, _ = fcgi_client.request(s, params)
            return status
    return fn


def test_api_sockets_are_for_nginx_group_alone(stack):
    gid = nginx_user().pw_gid
    for path in (stack.api_socket, stack.api_auth_socket):
        st = os.stat(path)
        assert stat.S_ISSOCK(st.st_mode), path
        assert stat.S_IMODE(st.st_mode) == 0o660, (path, oct(st.st_mode))
        assert st.st_gid == gid, (path, st.st_gid, gid)


def test_a_local_user_cannot_connect_to_the_api(stack, local_user):
    for path in (stack.api_socket, stack.api_auth_socket):
        assert as_user(local_user, forged_admin_request(path)) == "PermissionError", path


def test_the_api_refuses_a_peer_that_is_not_nginx(stack, local_user, admin):
    """Even when a socket is opened to everyone, the api serves nobody but
    nginx (and root): the connection ends without an answer."""
    for path in (stack.api_socket, stack.api_auth_socket):
        os.chmod(path, 0o666)
        try:
            got = as_user(local_user, forged_admin_request(path))
        finally:
            os.chmod(path, 0o660)
        assert not got.startswith("ok:"), (path, got)
        # closed at once: no answer, and no wait for one either
        assert got in ("EOFError", "ConnectionResetError", "BrokenPipeError"), (path, got)
    # nginx itself still gets through.
    r = admin.get(stack.url + "/v1/sandboxes")
    assert r.status_code == 200, r.text
