"""scripts/stack.sh itself: `up` twice is harmless, `down` leaves nothing
(no process, no cgroup).

Uses a second stack of its own (the session's `stack` fixture must keep
running for the other tests).
"""
import os
import subprocess
import time

import pytest

from stack import STACK_SH, Stack, log_tails, processes_referencing
from procs import alive, comm, descendants


def read_pids(var):
    pids = {}
    run = os.path.join(var, "run")
    for name in ("postgres", "api", "controller", "nginx"):
        with open(os.path.join(run, name + ".pid")) as f:
            pids[name] = int(f.read().split()[0])
    return pids


@pytest.fixture
def own_stack():
    s = Stack()
    try:
        s.up()
    except Exception as e:
        s.down()
        s.remove()
        pytest.fail("could not start the stack: %s" % e, pytrace=False)
    yield s
    s.down()
    s.remove()


def test_up_twice_is_harmless_and_down_leaves_no_process(own_stack):
    st = own_stack
    env_file = os.path.join(st.var, "env")
    with open(env_file) as f:
        env = f.read()
    for name in ("ORCHARD_URL", "ORCHARD_API_KEY", "ORCHARD_CACERT", "ORCHARD_DATABASE_URL"):
        assert "export %s=" % name in env, env
    assert "ORCHARD_URL=%s\n" % st.url in env
    assert "ORCHARD_API_KEY=%s\n" % st.admin_key in env
    assert os.stat(os.path.join(st.var, "admin.key")).st_mode & 0o077 == 0

    # the env file is sourceable and names a working stack
    r = subprocess.run(["bash", "-c", ". %s && curl -fsS --cacert \"$ORCHARD_CACERT\" "
                        "-H \"X-API-Key: $ORCHARD_API_KEY\" \"$ORCHARD_URL/sandboxes\"" % env_file],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr

    # a running sandbox, which outlives the controller by design
    s = st.session()
    r = s.post(st.url + "/sandboxes", json={"image": "host"})
    assert r.status_code in (200, 201), r.text
    sid = r.json()["sandbox_id"]
    st.wait_ready(s, sid)
    sandbox_dir = os.path.join(st.var, "sandboxes", sid)
    assert processes_referencing(sandbox_dir), "no process for sandbox %s" % sid

    # its cgroups, as the controller recorded them (none without cgroups)
    cgroup_file = os.path.join(sandbox_dir, "cgroup")
    cgroups = open(cgroup_file).read().split() if os.path.exists(cgroup_file) else []
    assert all(os.path.isdir(d) for d in cgroups), cgroups

    # and one with egress, whose slirp4netns runs below its watchdog
    r = s.post(st.url + "/sandboxes", json={"image": "host", "block_network": False})
    assert r.status_code in (200, 201), r.text
    net_sid = r.json()["sandbox_id"]
    st.wait_ready(s, net_sid)
    net_dir = os.path.join(st.var, "sandboxes", net_sid)
    slirps = [p for p in descendants(p for p, _ in processes_referencing(net_dir))
              if comm(p) == "slirp4netns"]
    assert slirps, "no slirp4netns for sandbox %s" % net_sid
    net_cgroup_file = os.path.join(net_dir, "cgroup")
    if os.path.exists(net_cgroup_file):
        cgroups += open(net_cgroup_file).read().split()

    pids = read_pids(st.var)
    up2 = st.up()  # again: nothing restarts, nothing is re-created
    assert read_pids(up2.var) == pids
    assert up2.admin_key == st.admin_key
    assert st.counts()["api_keys"] == 1 and st.counts()["tenants"] == 1
    r = subprocess.run([STACK_SH, "status", st.var], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr

    r = st.down()
    assert r.returncode == 0, r.stderr + log_tails(st.var)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (
            processes_referencing(st.var) or any(alive(p) for p in pids.values())):
        time.sleep(0.1)
    left = processes_referencing(st.var)
    assert not left, "still running after down: %s" % left
    assert not [n for n, p in pids.items() if alive(p)], pids
    # nor any cgroup: the sandbox's and the stack's parent ones are gone
    left = [d for d in cgroups + [os.path.dirname(d) for d in cgroups] if os.path.exists(d)]
    assert not left, "cgroups left after down: %s" % left
    assert not [p for p in slirps if alive(p)], "slirp4netns left after down: %s" % slirps
    with open("/proc/self/mountinfo") as f:
        mounts = [line for line in f if st.var in line]
    assert not mounts, "mounts left after down: %s" % mounts

    r = subprocess.run([STACK_SH, "status", st.var], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, r.stdout
    # down twice is harmless too
    assert st.down().returncode == 0


def test_deps_check_passes_here():
    r = subprocess.run([os.path.join(os.path.dirname(STACK_SH), "deps.sh"), "--check"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
