"""Checkpoints and forks on the kubernetes driver (docs/checkpoints.md),
against the fake API server whose kubelet runs real agents.

Rows are written as the api writes them (a pending checkpoint, pending
sandboxes with forked_from); the controller takes the checkpoint through
the agent's GET /archive into its store and restores each fork through
PUT /archive before the fork becomes ready. Each fake pod has a /tmp of
its own (bubblewrap), so forks are as isolated as real pods are.
"""

import hashlib
import os
import sys
import tarfile
import uuid

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from ctl_harness import Controller, wait_for  # noqa: E402
from test_controller_k8s import (K8s, agent_call, api_exec, pg,  # noqa: E402,F401
                                 pytestmark, ready_sandbox, running_k8s_stack)

WORK = "/tmp/work"                      # a checkpoint path inside each pod's own /tmp
PATHS = "/workspace,%s" % WORK          # /workspace does not exist in a fake pod: skipped

if os.path.exists("/workspace"):
    pytestmark = pytest.mark.skip(reason="the host has a /workspace; fake pods would share it")

# The tree: bytes, modes, a symlink, an empty directory, a nested file.
MAKE_TREE = (
    "set -e; mkdir -p %(w)s/sub/deeper %(w)s/empty; cd %(w)s;"
    " printf 'hello\\n' > a.txt; head -c 70000 /dev/urandom > sub/deeper/blob.bin;"
    " printf '#!/bin/sh\\necho run\\n' > run.sh; chmod 0751 run.sh; chmod 0700 sub;"
    " ln -s a.txt link; printf x > 'sp ace.txt'" % {"w": WORK})
# What must be equal after a fork: names, types, modes, sizes, link targets, bytes.
MANIFEST = ("cd %s && find . -printf '%%p %%y %%m %%s %%l\\n' | sort &&"
            " find . -type f -print0 | sort -z | xargs -0 sha256sum" % WORK)


@pytest.fixture
def k8s(pg):  # noqa: F811
    k = K8s(pg, private_tmp=True)
    try:
        yield k
    finally:
        k.close()


def sh(row, token, command):
    status, body = agent_call(row["address"], token, "POST", "/exec", {"command": command})
    assert status == 200 and body["exit_code"] == 0, (command, status, body)
    return body["stdout"]


def store_dir(k):
    return os.path.join(k.base, "state", "k8s-checkpoints")


def checkpoint(k, sid, timeout=30):
    ck = "ck" + uuid.uuid4().hex[:10]
    k.pg.sql("INSERT INTO checkpoints (id, tenant_id, sandbox_id, driver, image, cpu, memory,"
             " cpu_millis, memory_bytes, block_network)"
             " SELECT '%s', tenant_id, id, driver, image, cpu, memory, cpu_millis, memory_bytes,"
             " block_network FROM sandboxes WHERE id = '%s'" % (ck, sid))
    k.pg.sql("NOTIFY orchard_checkpoint, '%s'" % ck)
    return ck, ckpt_row(k, ck, ("ready", "failed"), timeout)


def ckpt_row(k, ck, states, timeout=30):
    last = {}

    def done():
        rows = k.pg.sql("SELECT state, state_message, bytes, sha256 FROM checkpoints"
                        " WHERE id = '%s'" % ck)
        last["row"] = dict(zip(("state", "message", "bytes", "sha256"), rows[0]))
        return last["row"]["state"] in states
    wait_for(done, timeout=timeout, what="checkpoint %s in %s (log: %s)" % (ck, states, k.ctl.log()[-2000:]))
    return last["row"]


def fork(k, ck, states=("ready",)):
    sid, token = k.insert(forked_from=ck)
    return sid, token, k.wait_state(sid, states, timeout=30)


def ready_checkpoint(k):
    """A controller, a sandbox with the tree, a ready checkpoint of it:
    (checkpoint id, its store file)."""
    k.start(ORCHARD_K8S_CHECKPOINT_PATHS=PATHS)
    sid, token, row = ready_sandbox(k)
    sh(row, token, MAKE_TREE)
    ck, c = checkpoint(k, sid)
    assert c["state"] == "ready", c
    return ck, os.path.join(store_dir(k), ck + ".tar")


def test_fork_restores_the_files_and_each_fork_is_isolated(k8s):
    k8s.start(ORCHARD_K8S_CHECKPOINT_PATHS=PATHS)
    sid, token, row = ready_sandbox(k8s)
    sh(row, token, MAKE_TREE)
    want = sh(row, token, MANIFEST)
    assert "./link l 777 5 a.txt" in want and "./run.sh f 751" in want and "./empty d" in want

    ck, c = checkpoint(k8s, sid)
    assert c["state"] == "ready", c
    # The store file: a tar of one tar per present path, its sha256 on the row.
    path = os.path.join(store_dir(k8s), ck + ".tar")
    with open(path, "rb") as f:
        data = f.read()
    assert hashlib.sha256(data).hexdigest() == c["sha256"] and int(c["bytes"]) == len(data)
    with tarfile.open(path) as outer:
        assert outer.getnames() == ["tmp/work.tar"]
        with tarfile.open(fileobj=outer.extractfile("tmp/work.tar")) as inner:
            assert "sub/deeper/blob.bin" in inner.getnames()
    assert not [n for n in os.listdir(store_dir(k8s)) if n.endswith(".partial")]

    # Written after the checkpoint: in no fork.
    sh(row, token, "echo later > %s/after.txt" % WORK)
    forks = [fork(k8s, ck) for _ in range(2)]
    for fsid, ftoken, frow in forks:
        assert sh(frow, ftoken, MANIFEST) == want, fsid
        assert sh(frow, ftoken, "%s/run.sh" % WORK) == "run\n"
    # Isolated: a write in one fork shows neither in the other nor in the parent.
    (s1, t1, r1), (s2, t2, r2) = forks
    sh(r1, t1, "echo mine > %s/a.txt; rm %s/link" % (WORK, WORK))
    assert sh(r2, t2, "cat %s/a.txt; ls %s" % (WORK, WORK)).startswith("hello\n")
    assert "link" in sh(r2, t2, "ls %s" % WORK)
    assert sh(row, token, "cat %s/a.txt" % WORK) == "hello\n"
    # The checkpoint outlives its sandbox and forks again.
    k8s.delete(sid)
    k8s.wait_state(sid, "deleted")
    s3, t3, r3 = fork(k8s, ck)
    assert sh(r3, t3, MANIFEST) == want
    k8s.assert_no_invalid_requests()


def test_deleting_a_checkpoint_removes_its_store_file(k8s):
    ck, path = ready_checkpoint(k8s)
    assert os.path.exists(path)
    k8s.pg.sql("UPDATE checkpoints SET state = 'deleting' WHERE id = '%s'" % ck)
    k8s.pg.sql("NOTIFY orchard_checkpoint, '%s'" % ck)
    ckpt_row(k8s, ck, ("deleted",))
    assert not os.path.exists(path)
    # A store file without a live row (a crash between copy and record) goes on a sweep.
    orphan = os.path.join(store_dir(k8s), "ckorphan0001.tar")
    with open(orphan, "wb") as f:
        f.write(b"\0" * 1024)
    wait_for(lambda: not os.path.exists(orphan), timeout=20, what="orphan store file removed")


@pytest.mark.parametrize("damage", ["flip", "truncate", "missing"])
def test_a_corrupt_store_file_fails_the_fork_with_the_reason(k8s, damage):
    ck, path = ready_checkpoint(k8s)
    if damage == "flip":
        with open(path, "r+b") as f:
            f.seek(2000)
            b = f.read(1)
            f.seek(2000)
            f.write(bytes([b[0] ^ 0xff]))
    elif damage == "truncate":
        os.truncate(path, os.path.getsize(path) - 1024)
    else:
        os.unlink(path)
    fsid, _, frow = fork(k8s, ck, states=("failed", "ready"))
    assert frow["state"] == "failed", frow
    assert "restoring checkpoint %s failed" % ck in frow["message"], frow
    want = "is not in the checkpoint store" if damage == "missing" else "is corrupt: the sha256"
    assert want in frow["message"], frow


def test_the_store_is_bounded_and_a_checkpoint_past_it_fails_naming_the_knob(k8s):
    k8s.start(ORCHARD_K8S_CHECKPOINT_PATHS=PATHS, ORCHARD_K8S_CHECKPOINT_MAX_BYTES="200000")
    sid, token, row = ready_sandbox(k8s)
    sh(row, token, MAKE_TREE)                  # about 75 kB: fits once, not three times
    cks = [checkpoint(k8s, sid) for _ in range(3)]
    assert cks[0][1]["state"] == "ready", cks[0]
    failed = [c for _, c in cks if c["state"] == "failed"]
    assert failed, cks
    assert "ORCHARD_K8S_CHECKPOINT_MAX_BYTES is 200000" in failed[0]["message"], failed
    names = os.listdir(store_dir(k8s))
    assert not [n for n in names if n.endswith(".partial")], names
    assert sum(os.path.getsize(os.path.join(store_dir(k8s), n)) for n in names) <= 200000


def test_a_checkpoint_of_a_sandbox_that_is_not_ready_fails(k8s):
    k8s.start(ORCHARD_K8S_CHECKPOINT_PATHS=PATHS)
    sid, token, row = ready_sandbox(k8s)
    k8s.delete(sid)
    k8s.wait_state(sid, "deleted")
    ck, c = checkpoint(k8s, sid)
    assert c["state"] == "failed" and "only a running sandbox" in c["message"], c
    assert not os.path.exists(os.path.join(store_dir(k8s), ck + ".tar"))


def test_bad_checkpoint_paths_refuse_to_start(k8s):
    for n, bad in enumerate(("relative", "/", "/a/../b", "/tmp/", "/a,,/b", "/a/.", "/a//b", "/..")):
        c = Controller(k8s.env(ORCHARD_K8S_CHECKPOINT_PATHS=bad),
                       os.path.join(k8s.base, "bad%d.log" % n))
        assert c.proc.wait(10) != 0, bad
        assert "ORCHARD_K8S_CHECKPOINT_PATHS" in c.log(), (bad, c.log())
        c.stop()


# ---- the whole stack: HTTPS -> nginx -> api -> controller -> the pods' agents ----------------


@pytest.fixture(scope="module")
def ckstack():
    with running_k8s_stack(private_tmp=True,
                           extra_env={"ORCHARD_K8S_CHECKPOINT_PATHS": PATHS}) as k:
        yield k


def api_sandbox(s, session):
    r = session.post(s.url + "/v1/sandboxes", json={"image": "python:3.11-slim"})
    assert r.status_code in (200, 201), r.text
    sid = r.json()["sandbox_id"]
    assert s.wait_ready(session, sid)["status"] == "ready"
    return sid


def api_sh(s, session, sid, command):
    out = api_exec(s, session, sid, command)
    assert out["exit_code"] == 0, out
    return out["stdout"]


def test_whole_stack_checkpoint_and_fork_through_the_api(ckstack):
    s = ckstack.stack
    admin = s.session()
    sid = api_sandbox(s, admin)
    api_sh(s, admin, sid, MAKE_TREE)
    want = api_sh(s, admin, sid, MANIFEST)
    r = admin.post("%s/v1/sandboxes/%s/checkpoints" % (s.url, sid), json={"name": "k8s-ck"})
    assert r.status_code == 200 and r.json()["state"] == "ready", r.text
    ck = r.json()
    assert ck["bytes"] > 70000 and ck["sandbox_id"] == sid
    r = admin.post("%s/v1/checkpoints/%s/fork" % (s.url, ck["id"]), json={"count": 2})
    assert r.status_code == 200, r.text
    ids = r.json()["sandbox_ids"]
    assert len(ids) == 2
    for fid in ids:
        got = s.wait_ready(admin, fid)
        assert got["status"] == "ready" and got["forked_from"] == ck["id"], got
        assert api_sh(s, admin, fid, MANIFEST) == want
    api_sh(s, admin, ids[0], "echo changed > %s/a.txt" % WORK)
    assert api_sh(s, admin, ids[1], "cat %s/a.txt" % WORK) == "hello\n"
    assert api_sh(s, admin, sid, "cat %s/a.txt" % WORK) == "hello\n"
    # Checkpoint now + fork, in one call.
    r = admin.post("%s/v1/sandboxes/%s/fork" % (s.url, ids[0]), json={"count": 1})
    assert r.status_code == 200, r.text
    (now,) = r.json()["sandbox_ids"]
    assert s.wait_ready(admin, now)["status"] == "ready"
    assert api_sh(s, admin, now, "cat %s/a.txt" % WORK) == "changed\n"


def test_whole_stack_bad_input_pause_quota_and_corruption(ckstack):
    s = ckstack.stack
    admin = s.session()
    sid = api_sandbox(s, admin)
    api_sh(s, admin, sid, MAKE_TREE)
    r = admin.post("%s/v1/sandboxes/%s/checkpoints" % (s.url, sid), json={})
    assert r.status_code == 200, r.text
    ck = r.json()["id"]
    before = s.counts()["sandboxes"]
    for count in (0, 10000, "2"):
        r = admin.post("%s/v1/checkpoints/%s/fork" % (s.url, ck), json={"count": count})
        assert r.status_code == 422 and "count" in r.json()["detail"], r.text
    r = admin.post(s.url + "/v1/checkpoints/ck000000000000/fork", json={"count": 1})
    assert r.status_code == 404, r.text
    # No freezer through the Kubernetes API: pause and resume are a clear 422.
    for what in ("pause", "resume"):
        r = admin.post("%s/v1/sandboxes/%s/%s" % (s.url, sid, what), json={})
        assert r.status_code == 422, r.text
        assert "%s is not supported by the kubernetes driver" % what in r.json()["detail"], r.text
    # Another tenant sees none of it.
    other = s.session(key=s.new_tenant_key("k8s-ck-other"))
    assert other.get("%s/v1/checkpoints/%s" % (s.url, ck)).status_code == 404
    assert other.post("%s/v1/checkpoints/%s/fork" % (s.url, ck), json={"count": 1}).status_code == 404
    assert s.counts()["sandboxes"] == before
    # The tenant's byte quota: 429 naming it, and no checkpoint row.
    tenant = "k8s-ckq"
    q = s.session(key=s.new_tenant_key(tenant))
    s.psql("UPDATE tenants SET max_checkpoint_bytes = 1000 WHERE name = '%s'" % tenant)
    qsid = api_sandbox(s, q)
    api_sh(s, q, qsid, MAKE_TREE)
    assert q.post("%s/v1/sandboxes/%s/checkpoints" % (s.url, qsid), json={}).status_code == 200
    r = q.post("%s/v1/sandboxes/%s/checkpoints" % (s.url, qsid), json={})
    assert r.status_code == 429 and "max_checkpoint_bytes" in r.json()["detail"], r.text
    # An altered store file: the fork fails, saying why.
    path = os.path.join(s.var, "sandboxes", "k8s-checkpoints", ck + ".tar")
    with open(path, "r+b") as f:
        f.seek(600)
        f.write(b"X")
    r = admin.post("%s/v1/checkpoints/%s/fork" % (s.url, ck), json={"count": 1})
    assert r.status_code == 200, r.text
    (fid,) = r.json()["sandbox_ids"]
    got = s.wait_ready(admin, fid)
    assert got["status"] == "failed", got
    assert "is corrupt: the sha256" in got["status_message"], got


def test_whole_stack_every_step_checkpoints_and_fork_at_a_step(ckstack):
    """Per-step checkpoints (issue 21) go through the same store on kubernetes."""
    s = ckstack.stack
    admin = s.session()
    r = admin.post(s.url + "/v1/sandboxes", json={"image": "python:3.11-slim",
                                                  "checkpoints": "every_step"})
    assert r.status_code in (200, 201), r.text
    sid = r.json()["sandbox_id"]
    assert s.wait_ready(admin, sid)["status"] == "ready"
    for n in (1, 2, 3):
        api_sh(s, admin, sid, "mkdir -p %s; echo %d > %s/state" % (WORK, n, WORK))
    r = admin.post("%s/v1/sandboxes/%s/fork" % (s.url, sid), json={"step": 2, "count": 1})
    assert r.status_code == 200, r.text
    (fid,) = r.json()["sandbox_ids"]
    assert s.wait_ready(admin, fid)["status"] == "ready"
    assert api_sh(s, admin, fid, "cat %s/state" % WORK) == "2\n"
    sha = s.scalar("SELECT sha256 FROM checkpoints WHERE id = '%s'" % r.json()["checkpoint_id"])
    assert sha and len(sha) == 64
