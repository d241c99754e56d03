"""Local users other than nginx's cannot speak to orchard-api (issue 19, item 1).

nginx sends trusted FastCGI params (ORCHARD_TENANT, ORCHARD_ROLE) over the
api's unix sockets, so whoever can connect to them is an admin. The sockets
are 0660 in nginx's group, and the api serves no peer whose uid is neither
root, its own nor nginx's (SO_PEERCRED), even when a socket's mode is
loosened by mistake. The tests run as a temporary unprivileged local user,
created here and removed afterwards.
"""
import os
import pwd
import socket
import stat

import fcgi_client
from local_user import as_user, local_user  # noqa: F401 - a fixture


def nginx_user():
    for name in ("www-data", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise AssertionError("neither www-data nor nobody exists")


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
