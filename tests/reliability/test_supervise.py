"""The local stack's supervisor (issue 19, item 7): a killed component comes
back by itself, with nobody running `scripts/stack.sh up`; pid files are
trusted only for the very process they name; `down` leaves nothing.

Each test has a stack of its own (`private_stack`, or a Stack with
supervisor settings). The checks after a kill under load are faults.verify's
(nothing acknowledged lost, nothing stuck, wrong or run twice, no leak).
docs/reliability.md keeps the latest figures (`pytest -s` prints FAULT lines).
"""
import json
import os
import re
import signal
import subprocess
import time

import pytest

import faults
from faults import alive, kill, pid_of, verify
from stack import BIN, STACK_SH, Stack, processes_referencing

COMPONENTS = ("api", "controller", "nginx", "postgres")


def supervise_log(st):
    """orchard-supervise's log lines (JSON objects)."""
    out = []
    with open(os.path.join(st.var, "log", "supervise.log")) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def restarts_of(st, name):
    return [j for j in supervise_log(st) if j.get("msg") == "exited; restarting"
            and j.get("process") == name]


def back(st, name, old, timeout=120):
    """The pid of name's new process, once its pid file names one that is
    alive (the supervisor writes the pid file before the program runs)."""
    def new():
        p = pid_of(st, name)
        return p if p and p != old and alive(p) else None
    return st.wait_for(new, timeout=timeout, interval=0.05, what="a new %s process" % name)


def status(st):
    r = subprocess.run([STACK_SH, "status", st.var], capture_output=True, text=True, timeout=60)
    lines = dict(re.findall(r"^(\S+)\s+(.*)$", r.stdout, re.M))
    return r.returncode, lines


def with_args(name):
    """The processes whose command line has name as one argument."""
    return [p for p, cmd in processes_referencing(name) if name in cmd.split(" ")]


@pytest.mark.parametrize("name", COMPONENTS)
def test_a_killed_component_comes_back_without_up(private_stack, name):
    st = private_stack
    s, boxes, ledger, load = faults.loaded(st, 2)
    load.start(load.exec_sync, boxes[0])
    load.start(load.exec_async, boxes[1])
    old = {n: pid_of(st, n) for n in COMPONENTS}
    workers = faults.children()[old["nginx"]]
    assert workers

    def fault():
        t0 = time.monotonic()
        kill(old[name])    # nginx: the master alone; its workers are the supervisor's to end
        back(st, name, old[name])
        return faults.answers(st, t0, bound=180)
    recovered = faults.run_load(load, 2, fault, 3)
    settle = faults.LEASE_WAIT_S if name in ("api", "postgres") else 40
    c = verify(st, ledger, "%s-kill-no-up" % name, settle_s=settle, recovered=recovered)
    assert c["acknowledged_jobs"] > 0, c

    # the supervisor logged the restart, and nothing else was restarted
    # (the controller also leaves when its database goes: postgres's case)
    line = restarts_of(st, name)[0]
    assert line["how"] in ("signal", "unknown (adopted, not our child)"), line
    for other in set(COMPONENTS) - {name, "controller" if name == "postgres" else name}:
        assert pid_of(st, other) == old[other], other
    if name == "nginx":   # the dead master's workers are gone, not serving beside the new ones
        assert not [w for w in workers if alive(w)], workers
    # the whole stack works again: a new sandbox is launched and runs a command
    (sid,) = faults.new_ready_sandboxes(st, s, 1)
    r = s.post("%s/sandboxes/%s/exec" % (st.url, sid), json={"command": "echo ok", "wait": True})
    assert r.status_code == 200 and r.json()["stdout"] == "ok\n", r.text
    code, lines = status(st)
    assert code == 0, lines


def test_backoff_doubles_up_to_its_bound_and_starts_over_after_a_stable_run():
    st = Stack(env={"ORCHARD_SUPERVISE_BACKOFF_MS": "200", "ORCHARD_SUPERVISE_BACKOFF_MAX_MS": "800",
                    "ORCHARD_SUPERVISE_STABLE_MS": "5000"})
    st.start()
    try:
        pid = pid_of(st, "api")
        for _ in range(5):      # each death comes well before the 5 s of a stable run
            kill(pid)
            pid = back(st, "api", pid)
        delays = [j["restart_in_ms"] for j in restarts_of(st, "api")]
        # rounded down to whole milliseconds when logged
        assert [(d + 50) // 100 * 100 for d in delays] == [200, 400, 800, 800, 800], delays
        assert [j["restarts"] for j in restarts_of(st, "api")] == [1, 2, 3, 4, 5]
        # a process that ran longer than the stable time starts over at the first delay
        started = time.monotonic()
        st.wait_for(lambda: time.monotonic() - started > 6, timeout=30, interval=0.5)
        kill(pid)
        back(st, "api", pid)
        assert (restarts_of(st, "api")[-1]["restart_in_ms"] + 50) // 100 * 100 == 200
        assert faults.answers(st, bound=120) >= 0
    finally:
        st.close()


def test_a_clean_exit_stays_stopped_until_up(private_stack):
    """SIGTERM is how one stops a component on purpose: it exits 0 and the
    supervisor leaves it stopped (and says so) until `up`."""
    st = private_stack
    pid = pid_of(st, "controller")
    os.kill(pid, signal.SIGTERM)
    st.wait_for(lambda: not alive(pid), timeout=30, what="the controller gone")
    st.wait_for(lambda: any(j.get("process") == "controller" and j["msg"].startswith("exited 0")
                            for j in supervise_log(st)), timeout=30, what="the supervisor's note")
    time.sleep(2)    # four first backoffs: a restart would have come by now
    assert not alive(pid_of(st, "controller") or pid)
    code, lines = status(st)
    assert code != 0 and lines["controller"] == "stopped", lines
    st.up()
    new = back(st, "controller", pid)
    assert status(st)[0] == 0
    assert not restarts_of(st, "controller"), "a clean exit is not a failure"
    assert alive(new)


def test_a_killed_supervisor_leaves_the_stack_serving_and_up_adopts_it(private_stack):
    st = private_stack
    old = {n: pid_of(st, n) for n in COMPONENTS}
    sv = pid_of(st, "supervise")
    kill(sv)
    # everything still runs and answers; status says who is missing
    assert faults.answers(st, bound=60) >= 0
    code, lines = status(st)
    assert code != 0 and lines["supervise"] == "stopped", lines
    assert all(lines[n].startswith("running (pid %d)" % old[n]) for n in COMPONENTS), lines

    st.up()     # a new supervisor adopts them: nothing is started twice
    new_sv = pid_of(st, "supervise")
    assert new_sv != sv and alive(new_sv)
    assert {n: pid_of(st, n) for n in COMPONENTS} == old
    assert len(with_args(os.path.join(st.var, "run"))) == 1, "one supervisor per stack"
    adopted = [j["process"] for j in supervise_log(st) if j.get("msg") == "adopted a running process"]
    assert adopted[-4:] == ["postgres", "api", "controller", "nginx"], adopted
    # and supervises them: an adopted process that dies comes back
    kill(old["api"])
    back(st, "api", old["api"])
    assert faults.answers(st, bound=120) >= 0


def test_down_after_the_supervisor_was_killed_leaves_no_process(private_stack):
    st = private_stack
    pids = {n: pid_of(st, n) for n in COMPONENTS + ("supervise",)}
    s = st.session()
    faults.new_ready_sandboxes(st, s, 1)
    kill(pids["supervise"])
    r = st.down()
    assert r.returncode == 0, r.stderr
    assert not [n for n, p in pids.items() if alive(p)], pids
    assert not processes_referencing(st.var), processes_referencing(st.var)


def test_down_stops_restarted_components_and_leaves_no_process(private_stack):
    st = private_stack
    for name in ("api", "nginx"):
        old = pid_of(st, name)
        kill(old)
        back(st, name, old)
    pids = {n: pid_of(st, n) for n in COMPONENTS + ("supervise",)}
    workers = faults.children().get(pids["nginx"], [])
    r = st.down()
    assert r.returncode == 0, r.stderr
    st.wait_for(lambda: not processes_referencing(st.var), timeout=10, what="nothing left")
    assert not [n for n, p in pids.items() if alive(p)], pids
    assert not [w for w in workers if alive(w)]
    msgs = [j["msg"] for j in supervise_log(st)]
    assert msgs[-1] == "stopped" and "stopping every component" in msgs


def test_a_reused_pid_in_a_pid_file_is_not_trusted(private_stack):
    """The pid file of a controller that is gone names a live process that
    looks like one (its pid was reused): status says stopped, and up starts
    a real controller instead of trusting it."""
    st = private_stack
    pid = pid_of(st, "controller")
    os.kill(pid, signal.SIGTERM)        # stopped on purpose: the supervisor leaves it
    st.wait_for(lambda: not alive(pid), timeout=30, what="the controller gone")
    decoy = subprocess.Popen(["bash", "-c", 'exec -a "$0" sleep 600',
                              os.path.join(BIN, "orchard-controller")])
    try:
        with open("/proc/%d/stat" % decoy.pid) as f:
            start = int(f.read().rsplit(")", 1)[1].split()[19])
        pidfile = os.path.join(st.run_dir, "controller.pid")
        for content in ("%d\n" % decoy.pid,                       # no start time
                        "%d %d\n" % (decoy.pid, start + 1)):     # another process's start time
            with open(pidfile, "w") as f:
                f.write(content)
            code, lines = status(st)
            assert code != 0 and lines["controller"] == "stopped", (content, lines)
        st.up()
        real = back(st, "controller", decoy.pid)
        assert "orchard-controller" in faults.cmdline(real) and real != decoy.pid
        assert decoy.poll() is None, "up must not touch a process that is not ours"
        assert status(st)[0] == 0
        st.down()
        assert decoy.poll() is None, "nor down"
    finally:
        decoy.kill()
        decoy.wait()
