"""API keys do not reach the logs, and the logs are not world-readable
(issue 19, item 5). Orchard's PTY client may send its key as ?api_key=;
nginx's access log shows such a query as "?<redacted>", and every log file
is 0640 in a 0750 directory, so a local user reads none of them.
"""
import os
import stat
import subprocess
import uuid

from local_user import as_user, local_user  # noqa: F401 - a fixture


def access_log_line(stack, rid, timeout=30):
    path = os.path.join(stack.var, "log", "nginx-access.log")

    def find():
        with open(path) as f:
            return [line for line in f if "rid=%s " % rid in line]
    lines = stack.wait_for(find, timeout=timeout, what="access log line of %s" % rid)
    return lines[0]


def test_a_key_in_the_query_is_not_logged(stack):
    secret = stack.admin_key
    for query in ("api_key=%s" % secret, "API_KEY=%s&session=x" % secret,
                  "session=x&api%%5Fkey=%s" % secret):
        rid = "redact-" + uuid.uuid4().hex
        url = "%s/v1/sandboxes/nope/exec/pty?%s" % (stack.url, query)
        r = subprocess.run(["curl", "-sS", "--max-time", "60", "--cacert", stack.cacert,
                            "-H", "X-Request-ID: " + rid, "-o", "/dev/null",
                            "-w", "%{http_code}", url],
                           capture_output=True, text=True, timeout=90)
        assert r.stdout in ("401", "404"), (r.stdout, r.stderr)  # no upper-case or escaped name
        line = access_log_line(stack, rid)
        assert "/v1/sandboxes/nope/exec/pty?<redacted>" in line, line
    logdir = os.path.join(stack.var, "log")
    for name in os.listdir(logdir):
        with open(os.path.join(logdir, name), errors="replace") as f:
            assert secret.split("_")[-1] not in f.read(), name


def test_logs_are_not_world_readable(stack, local_user):
    logdir = os.path.join(stack.var, "log")
    assert stat.S_IMODE(os.stat(logdir).st_mode) & 0o007 == 0
    names = os.listdir(logdir)
    assert "nginx-access.log" in names and "api.log" in names, names
    for name in names:
        mode = stat.S_IMODE(os.stat(os.path.join(logdir, name)).st_mode)
        assert mode & 0o007 == 0, (name, oct(mode))

    def read_access_log():
        with open(os.path.join(logdir, "nginx-access.log")) as f:
            return len(f.read())
    assert as_user(local_user, read_access_log) == "PermissionError"
