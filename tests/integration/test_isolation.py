"""What a sandbox keeps from the host's other local users (issue 19): its
host-side directories, tested as a temporary unprivileged local user that
is removed afterwards."""
import os

import pytest

from stack import as_user

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="creating a local user needs root")


def run(stack, admin, sid, cmd):
    r = admin.post("%s/v1/sandboxes/%s/exec" % (stack.url, sid), json={"command": cmd, "wait": True})
    assert r.status_code == 200, r.text
    return r.json()


def test_other_local_users_cannot_read_or_plant_in_a_sandbox(stack, admin, local_user):
    """Issue 19 item 4: /workspace and /tmp on the host were 0755 and 1777."""
    sid = stack.new_sandbox(admin)
    try:
        out = run(stack, admin, sid, "echo secret > /workspace/s && echo secret > /tmp/s && echo ok")
        assert out["stdout"] == "ok\n", out
        d = os.path.join(stack.var, "sandboxes", sid)
        assert os.path.isdir(d), d
        # the user does reach the sandbox's dir (nginx must, for run/agent.sock) ...
        assert as_user(local_user, "test", "-x", d).returncode == 0
        for sub in ("workspace", "tmp"):
            p = os.path.join(d, sub)
            # ... but can neither list, read nor plant
            assert as_user(local_user, "ls", p).returncode != 0, sub
            assert as_user(local_user, "cat", os.path.join(p, "s")).returncode != 0, sub
            assert as_user(local_user, "touch", os.path.join(p, "planted")).returncode != 0, sub
            assert not os.path.exists(os.path.join(p, "planted"))
        # and the sandbox itself still uses both
        out = run(stack, admin, sid, "cat /workspace/s /tmp/s && touch /tmp/new && echo ok")
        assert out["stdout"] == "secret\nsecret\nok\n", out
    finally:
        admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))
