"""Checkpoints, forks and pause/resume of sandboxes (issue 20,
docs/checkpoints.md), on the local driver through the real stack.

State after a fork equals the state at the checkpoint (bytes, modes,
symlinks, hard links, empty dirs); forks are isolated from each other and
from the parent; a checkpoint outlives its sandbox; another tenant's
checkpoint is 404; bad input creates nothing; the quota is a 429 naming
it; pause stops CPU use and exec on a paused sandbox is 409.
"""
import json
import os
import subprocess
import time
import uuid

import pytest

import rollout_helpers
from rollout_helpers import sh

RUN = uuid.uuid4().hex[:8]

# A listing of everything in /workspace and /tmp/ck that a fork must keep.
# Directory sizes are left out: they depend on the filesystem's history.
LISTING = ("cd /workspace && find . -printf '%p %y %m %l %n\\n' | sort;"
           " find . -type f -printf '%p %s\\n' | sort;"
           " find . -type f -exec sha256sum {} + | sort; cat /tmp/ck/t")

SETUP = ("set -e; cd /workspace; printf 'hello\\0bytes' > data.bin; mkdir -p deep/empty sub;"
         " echo x > sub/mode; chmod 750 sub/mode; ln -s sub/mode link; ln data.bin hard;"
         " mkdir -p /tmp/ck; echo tmpstate > /tmp/ck/t")


def create(stack, s, **spec):
    return rollout_helpers.create(stack, s, {"ck-run": RUN}, **spec)


def checkpoint(stack, s, sid, **body):
    ck = rollout_helpers.checkpoint(stack, s, sid, **body)
    assert ck["state"] == "ready", ck
    return ck


def fork(stack, s, ckpt, count, headers=None):
    r = s.post("%s/v1/checkpoints/%s/fork" % (stack.url, ckpt), json={"count": count},
               headers=headers or {})
    assert r.status_code == 200, r.text
    ids = r.json()["sandbox_ids"]
    assert len(ids) == count
    for sid in ids:
        assert stack.wait_ready(s, sid)["status"] == "ready"
    return ids


def test_fork_restores_the_checkpointed_state_and_forks_are_isolated(stack, admin):
    parent = create(stack, admin)
    sh(stack, admin, parent, SETUP)
    before = sh(stack, admin, parent, LISTING)
    ck = checkpoint(stack, admin, parent, name="turn-1", labels={"ck-run": RUN})
    assert ck["sandbox_id"] == parent and ck["name"] == "turn-1"
    assert rollout_helpers.counted_bytes(stack, admin, ck["id"]) > 0
    # Written after the checkpoint: no fork may see it.
    sh(stack, admin, parent, "echo later > /workspace/later")
    a, b = fork(stack, admin, ck["id"], 2)
    for sid in (a, b):
        assert sh(stack, admin, sid, LISTING) == before
        info = admin.get("%s/v1/sandboxes/%s" % (stack.url, sid)).json()
        assert info["forked_from"] == ck["id"]
    sh(stack, admin, a, "echo only-a > /workspace/a-only")
    assert sh(stack, admin, b, "ls /workspace") == sh(stack, admin, parent, "ls /workspace").replace("later\n", "")
    assert "a-only" not in sh(stack, admin, parent, "ls /workspace")
    # Lineage is in the fork's trajectory header.
    r = admin.get("%s/v1/sandboxes/%s/trajectory" % (stack.url, a))
    assert r.status_code == 200, r.text
    header = json.loads(r.text.splitlines()[0])
    assert header["forked_from"] == {"checkpoint_id": ck["id"], "sandbox_id": parent, "step": 2}
    r = admin.get("%s/v1/sandboxes/%s/trajectory" % (stack.url, parent))
    assert "forked_from" not in json.loads(r.text.splitlines()[0])
    got = admin.get("%s/v1/checkpoints/%s" % (stack.url, ck["id"])).json()
    assert got["forks"] == 2
    listed = admin.get(stack.url + "/v1/checkpoints", params={"sandbox_id": parent}).json()
    assert [c["id"] for c in listed["checkpoints"]] == [ck["id"]]
    for sid in (parent, a, b):
        admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))


GIT = "git -c user.email=t@orchard.test -c user.name=t -c init.defaultBranch=main"
GIT_STATE = ("cd /workspace/repo && git rev-parse HEAD && git status --porcelain=v1 --untracked-files=all"
             " && git diff && git diff --cached && git log --format=%H%s")


def test_a_forked_git_repo_has_the_checkpointed_head_and_status(stack, admin):
    parent = create(stack, admin)
    sh(stack, admin, parent,
       "set -e; mkdir /workspace/repo; cd /workspace/repo; G='%s'; $G init -q; echo a > a;"
       " echo b > b; $G add a b; $G commit -qm one; echo a2 >> a; $G commit -qam two;"
       " echo dirty >> a; echo staged > s; $G add s; echo new > untracked" % GIT)
    before = sh(stack, admin, parent, GIT_STATE)
    assert " M a" in before and "A  s" in before and "?? untracked" in before, before
    ck = checkpoint(stack, admin, parent)
    sh(stack, admin, parent, "cd /workspace/repo && %s commit -qam three" % GIT)
    (child,) = fork(stack, admin, ck["id"], 1)
    assert sh(stack, admin, child, GIT_STATE) == before
    assert sh(stack, admin, child, "cd /workspace/repo && git fsck --no-progress && echo ok") \
        .endswith("ok\n")
    for sid in (parent, child):
        admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))


def test_a_checkpoint_outlives_its_sandbox_and_delete_removes_it(stack, admin):
    parent = create(stack, admin)
    sh(stack, admin, parent, "echo kept > /workspace/f")
    ck = checkpoint(stack, admin, parent)
    assert admin.delete("%s/v1/sandboxes/%s" % (stack.url, parent)).status_code == 200
    stack.wait_for(lambda: stack.scalar("SELECT state FROM sandboxes WHERE id = '%s'" % parent)
                   == "deleted", timeout=60, what="the parent deleted")
    (child,) = fork(stack, admin, ck["id"], 1)
    assert sh(stack, admin, child, "cat /workspace/f") == "kept\n"
    admin.delete("%s/v1/sandboxes/%s" % (stack.url, child))
    r = admin.delete("%s/v1/checkpoints/%s" % (stack.url, ck["id"]))
    assert r.status_code == 200, r.text
    assert admin.get("%s/v1/checkpoints/%s" % (stack.url, ck["id"])).status_code == 404
    stack.wait_for(lambda: stack.scalar("SELECT state FROM checkpoints WHERE id = '%s'" % ck["id"])
                   == "deleted", timeout=60, what="the copy removed")
    state_dir = os.path.join(stack.var, "sandboxes", ".checkpoints", ck["id"])
    assert not os.path.exists(state_dir)


def test_fork_now_with_one_idempotency_key_for_the_batch(stack, admin):
    parent = create(stack, admin)
    sh(stack, admin, parent, "echo now > /workspace/n")
    key = "fork-" + uuid.uuid4().hex
    url = "%s/v1/sandboxes/%s/fork" % (stack.url, parent)
    r1 = admin.post(url, json={"count": 2}, headers={"Idempotency-Key": key})
    assert r1.status_code == 200, r1.text
    r2 = admin.post(url, json={"count": 2}, headers={"Idempotency-Key": key})
    assert r2.status_code == 200, r2.text
    assert sorted(r1.json()["sandbox_ids"]) == sorted(r2.json()["sandbox_ids"])
    assert stack.scalar("SELECT count(*) FROM sandboxes WHERE forked_from = '%s'"
                        % r1.json()["checkpoint_id"]) == "2"
    for sid in r1.json()["sandbox_ids"]:
        stack.wait_ready(admin, sid)
        assert sh(stack, admin, sid, "cat /workspace/n") == "now\n"
        admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))
    admin.delete("%s/v1/sandboxes/%s" % (stack.url, parent))


def test_bad_input_and_other_tenants_get_clear_errors_and_create_nothing(stack, admin, other):
    parent = create(stack, admin)
    ck = checkpoint(stack, admin, parent)
    before = stack.counts()["sandboxes"]
    for count in (0, 10000, "2"):
        r = admin.post("%s/v1/checkpoints/%s/fork" % (stack.url, ck["id"]), json={"count": count})
        assert r.status_code == 422, r.text
        assert "count" in r.json()["detail"]
    r = admin.post(stack.url + "/v1/checkpoints/ck000000000000/fork", json={"count": 1})
    assert r.status_code == 404, r.text
    r = admin.post("%s/v1/sandboxes/%s/checkpoints" % (stack.url, parent), json={"ttl_seconds": -1})
    assert r.status_code == 422, r.text
    # Another tenant: 404 on every route.
    for method, path in (("GET", "/v1/checkpoints/%s" % ck["id"]),
                         ("DELETE", "/v1/checkpoints/%s" % ck["id"]),
                         ("POST", "/v1/checkpoints/%s/fork" % ck["id"]),
                         ("POST", "/v1/sandboxes/%s/checkpoints" % parent),
                         ("POST", "/v1/sandboxes/%s/fork" % parent),
                         ("POST", "/v1/sandboxes/%s/pause" % parent)):
        r = other.request(method, stack.url + path, json={})
        assert r.status_code == 404, (method, path, r.text)
    assert other.get(stack.url + "/v1/checkpoints").json()["checkpoints"] == []
    assert stack.counts()["sandboxes"] == before
    assert admin.get("%s/v1/checkpoints/%s" % (stack.url, ck["id"])).json()["state"] == "ready"
    admin.delete("%s/v1/sandboxes/%s" % (stack.url, parent))


def test_checkpoint_quota_is_a_429_naming_it(stack):
    tenant = "ckq-" + RUN
    s = stack.session(key=stack.new_tenant_key(tenant))
    stack.psql("UPDATE tenants SET max_checkpoints = 1 WHERE name = '%s'" % tenant)
    sid = create(stack, s)
    checkpoint(stack, s, sid)
    r = s.post("%s/v1/sandboxes/%s/checkpoints" % (stack.url, sid), json={})
    assert r.status_code == 429, r.text
    assert "max_checkpoints" in r.json()["detail"]
    assert stack.scalar("SELECT count(*) FROM checkpoints c JOIN tenants t ON t.id = c.tenant_id"
                        " WHERE t.name = '%s'" % tenant) == "1"
    s.delete("%s/v1/sandboxes/%s" % (stack.url, sid))


def cpu_ticks(marker):
    """utime + stime of the host process whose command line holds marker."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if marker.encode() not in f.read():
                    continue
            with open("/proc/%s/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return int(fields[11]) + int(fields[12])
        except OSError:
            continue
    return None


def freezer_available():
    return os.path.exists("/sys/fs/cgroup/freezer/freezer.state") or \
        os.path.exists("/sys/fs/cgroup/cgroup.freeze") or os.path.isdir("/sys/fs/cgroup/freezer")


@pytest.mark.skipif(not freezer_available(), reason="no cgroup freezer on this host")
def test_pause_stops_cpu_use_and_exec_is_409_until_resume(stack, admin):
    sid = create(stack, admin)
    marker = "busy-" + uuid.uuid4().hex[:10]
    r = admin.post("%s/v1/sandboxes/%s/exec" % (stack.url, sid),
                   json={"command": "while :; do :; done; echo %s" % marker, "wait": False,
                         "timeout": 600})
    assert r.status_code == 200, r.text
    job = r.json()["job_id"]
    stack.wait_for(lambda: (cpu_ticks(marker) or 0) > 0, timeout=60, what="the busy loop")
    r = admin.post("%s/v1/sandboxes/%s/pause" % (stack.url, sid), json={})
    assert r.status_code == 200, r.text
    assert r.json()["paused"] is True
    t0 = cpu_ticks(marker)
    time.sleep(1.5)   # a span of time with no CPU use is what is measured
    assert cpu_ticks(marker) == t0
    r = admin.post("%s/v1/sandboxes/%s/exec" % (stack.url, sid), json={"command": "true"})
    assert r.status_code == 409, r.text
    assert "paused" in r.json()["detail"]
    r = admin.post("%s/v1/sandboxes/%s/exec" % (stack.url, sid), json={"command": "true", "resume": "yes"})
    assert r.status_code == 422, r.text
    # A checkpoint of a paused sandbox works and leaves it paused.
    checkpoint(stack, admin, sid)
    assert admin.get("%s/v1/sandboxes/%s" % (stack.url, sid)).json()["paused"] is True
    r = admin.post("%s/v1/sandboxes/%s/resume" % (stack.url, sid), json={})
    assert r.status_code == 200, r.text
    assert r.json()["paused"] is False
    stack.wait_for(lambda: cpu_ticks(marker) > t0, timeout=60, what="CPU use after resume")
    # Jobs of a sandbox run in order: the busy loop must end first.
    r = admin.post("%s/v1/jobs/%s/cancel" % (stack.url, job), json={})
    assert r.status_code == 200, r.text
    assert sh(stack, admin, sid, "echo ok") == "ok\n"
    admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))


@pytest.mark.skipif(not freezer_available(), reason="no cgroup freezer on this host")
def test_delete_of_a_paused_sandbox_completes(stack, admin):
    sid = create(stack, admin)
    r = admin.post("%s/v1/sandboxes/%s/pause" % (stack.url, sid), json={})
    assert r.status_code == 200, r.text
    admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))
    stack.wait_for(lambda: stack.scalar("SELECT state FROM sandboxes WHERE id = '%s'" % sid)
                   == "deleted", timeout=60, what="the paused sandbox deleted")


def test_curl_creates_and_lists_checkpoints(stack, admin):
    sid = create(stack, admin)
    out = subprocess.run(["curl", "-sS", "--cacert", stack.cacert, "-H",
                          "X-API-Key: " + stack.admin_key, "-X", "POST", "-d", "{}",
                          "%s/v1/sandboxes/%s/checkpoints" % (stack.url, sid)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert '"state":"ready"' in out.stdout.replace(" ", ""), out.stdout
    admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))


def test_orchardctl_checkpoint_fork_pause_resume(stack, admin):
    sid = create(stack, admin)
    sh(stack, admin, sid, "echo cli > /workspace/c")
    r = stack.orchardctl("checkpoint", "create", sid, "--name", "cli", timeout=700)
    assert r.returncode == 0, r.stderr
    ck = r.stdout.strip()
    r = stack.orchardctl("checkpoint", "ls", "--sandbox", sid, "-o", "json")
    assert r.returncode == 0, r.stderr
    assert ck in r.stdout and '"cli"' in r.stdout
    r = stack.orchardctl("fork", ck, "-n", "2")
    assert r.returncode == 0, r.stderr
    ids = r.stdout.split()
    assert len(ids) == 2
    for child in ids:
        stack.wait_ready(admin, child)
        assert sh(stack, admin, child, "cat /workspace/c") == "cli\n"
    # exec with resume: true resumes a paused sandbox first.
    r = admin.post("%s/v1/sandboxes/%s/pause" % (stack.url, ids[1]), json={})
    if r.status_code == 200:
        r = admin.post("%s/v1/sandboxes/%s/exec" % (stack.url, ids[1]),
                       json={"command": "echo resumed", "resume": True, "wait": True})
        assert r.status_code == 200 and r.json()["stdout"] == "resumed\n", r.text
        assert admin.get("%s/v1/sandboxes/%s" % (stack.url, ids[1])).json()["paused"] is False
    r = stack.orchardctl("pause", ids[0])
    if r.returncode == 0:
        assert admin.get("%s/v1/sandboxes/%s" % (stack.url, ids[0])).json()["paused"] is True
        r = stack.orchardctl("resume", ids[0])
        assert r.returncode == 0, r.stderr
        assert admin.get("%s/v1/sandboxes/%s" % (stack.url, ids[0])).json()["paused"] is False
    r = stack.orchardctl("checkpoint", "rm", ck)
    assert r.returncode == 0 and r.stdout.strip() == ck, r.stderr
    r = stack.orchardctl("checkpoint", "get", ck)
    assert r.returncode == 125 and "not found" in r.stderr
    for x in [sid] + ids:
        admin.delete("%s/v1/sandboxes/%s" % (stack.url, x))


def test_what_a_crash_mid_checkpoint_leaves_is_finished_or_removed(stack, admin):
    """A controller killed mid-copy leaves a pending row and a .partial
    copy; copies without a row are left by a crash after the row went.
    The reconcile takes the pending one again from scratch and the sweep
    removes the orphans."""
    store = os.path.join(stack.var, "sandboxes", ".checkpoints")
    os.makedirs(store, exist_ok=True)
    sid = create(stack, admin)
    sh(stack, admin, sid, "echo real > /workspace/r")
    ck = "ckcrash" + uuid.uuid4().hex[:6]
    orphan = os.path.join(store, "ckorphan" + uuid.uuid4().hex[:6])
    for d in (os.path.join(store, ck + ".partial"), orphan, orphan + "x.partial"):
        os.makedirs(os.path.join(d, "workspace"))
        with open(os.path.join(d, "workspace", "junk"), "w") as f:
            f.write("half")
    stack.psql("INSERT INTO checkpoints (id, tenant_id, sandbox_id, image, cpu, memory, cpu_millis,"
               " memory_bytes, block_network) SELECT '%s', tenant_id, id, image, cpu, memory,"
               " cpu_millis, memory_bytes, block_network FROM sandboxes WHERE id = '%s'" % (ck, sid))
    stack.wait_for(lambda: stack.scalar("SELECT state FROM checkpoints WHERE id = '%s'" % ck)
                   == "ready", timeout=120, what="the pending checkpoint taken again")
    assert os.listdir(os.path.join(store, ck, "workspace")) == ["r"]
    stack.wait_for(lambda: not any(os.path.exists(p) for p in
                                   (orphan, orphan + "x.partial", os.path.join(store, ck + ".partial"))),
                   timeout=120, what="the orphan copies removed")
    (child,) = fork(stack, admin, ck, 1)
    assert sh(stack, admin, child, "ls /workspace") == "r\n"
    for x in (sid, child):
        admin.delete("%s/v1/sandboxes/%s" % (stack.url, x))


@pytest.mark.skipif(not freezer_available(), reason="no cgroup freezer on this host")
def test_stack_down_stops_a_paused_sandbox():
    """stack.sh down stops the controller first, so a sandbox left paused
    (a test that failed mid-pause) must be thawed by the script to die."""
    from stack import Stack, processes_referencing
    s = Stack()
    s.start()
    try:
        session = s.session()
        sid = s.new_sandbox(session)
        r = session.post("%s/v1/sandboxes/%s/pause" % (s.url, sid), json={})
        assert r.status_code == 200, r.text
        state = os.path.join(s.var, "sandboxes", sid)
        assert processes_referencing(state)
        r = s.down()
        assert r.returncode == 0, r.stderr
        assert processes_referencing(state) == []
    finally:
        s.close()
