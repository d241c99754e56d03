"""Container-escape probes (issue 9, item 5), run inside a local sandbox
through exec. Every probe is a command that succeeds only if the escape
works; the wrapper prints PROBE-RAN first (so a probe that could not even
start does not pass silently) and ESCAPED if the probe succeeded. All must
fail. The sandbox is the `host` image with its network blocked (the
default), so the host's own tools (python3, util-linux) are there to try.

A second sandbox of another tenant is the neighbour whose state dir and
agent socket the probes reach for.
"""
import os

import pytest

# x86_64 syscall numbers for the probes that go through python's ctypes
NR = {"mount": 165, "init_module": 175, "finit_module": 313, "keyctl": 250, "add_key": 248,
      "bpf": 321, "perf_event_open": 298, "setns": 308, "unshare": 272, "chroot": 161,
      "mknod": 133, "kexec_load": 246, "open_by_handle_at": 304, "reboot": 169,
      "syslog": 103, "pivot_root": 155, "userfaultfd": 323, "ptrace": 101, "getpid": 39,
      "getcwd": 79}


def syscall(name, *args):
    """python3 one-liner: exit 1 only when the raw syscall fails with EPERM
    or EACCES. Any other answer counts as an escape: the arguments are
    junk, so an unfiltered call would fail with EFAULT or EINVAL instead of
    the seccomp filter's (or the missing capability's) EPERM."""
    a = ", ".join(repr(x).replace("'", '"') for x in args)
    return ("python3 -c 'import ctypes,sys; l=ctypes.CDLL(None, use_errno=True); "
            "r=l.syscall(%d%s); sys.exit(1 if r < 0 and ctypes.get_errno() in (1, 13) else 0)'"
            % (NR[name], (", " + a) if a else ""))


def py(code):
    return "python3 -c '%s'" % code


# (id, probe) — {state} the host's state dir, {neighbour} the other
# sandbox's id, {var} the stack's var dir, {controller} the controller's host pid
PROBES = [
    # mounts and namespaces
    ("mount-tmpfs", "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m"),
    ("mount-proc-again", "mkdir -p /tmp/p && mount -t proc proc /tmp/p"),
    ("mount-bind-remount-rw", "mount -o remount,rw /usr"),
    ("mount-syscall", syscall("mount", 0, 0, 0, 0, 0)),
    ("pivot-root", syscall("pivot_root", 0, 0)),
    ("unshare-user", "unshare -U true"),
    ("unshare-user-map-root", "unshare -r true"),
    ("unshare-mount", "unshare -m true"),
    ("unshare-net", "unshare -n true"),
    ("unshare-pid", "unshare -p -f true"),
    ("unshare-syscall-newuser", syscall("unshare", 0x10000000)),
    ("setns-host-mnt", "nsenter -t 1 -m true"),
    ("setns-syscall", syscall("setns", 0, 0)),
    # processes outside: the host's pid 1, the controller, ptrace
    ("host-init-visible", "grep -qa -e systemd -e /sbin/init /proc/1/cmdline"),
    ("few-processes-only", "test $(ls -d /proc/[0-9]* | wc -l) -gt 30"),
    ("controller-visible", "grep -lqa 'orchard-[c]ontroller' /proc/[0-9]*/cmdline"),
    ("postgres-visible", "grep -lqa '[p]ostgres' /proc/[0-9]*/cmdline"),
    ("kill-controller", "kill -0 {controller}"),
    ("ptrace-attach-pid-1", py("import ctypes,sys; l=ctypes.CDLL(None, use_errno=True); "
                               "r=l.ptrace(16, 1, 0, 0); sys.exit(0 if r == 0 and "
                               "open(\"/proc/1/cmdline\",\"rb\").read().find(b\"bwrap\") < 0 else 1)")),
    ("proc-1-root-host-var", "ls /proc/1/root{var}/pg"),
    ("proc-1-root-admin-key", "cat /proc/1/root{var}/admin.key"),
    ("proc-self-root-up", "ls /proc/self/root/../../..{state}"),
    # the kernel and the machine
    ("write-sys", "echo 1 > /sys/kernel/mm/ksm/run"),
    ("write-sysrq", "echo h > /proc/sysrq-trigger"),
    ("write-proc-sys", "echo pwned > /proc/sys/kernel/hostname"),
    ("write-core-pattern", "echo '|/tmp/x' > /proc/sys/kernel/core_pattern"),
    ("cgroup-release-agent", "echo /tmp/x > $(ls -d /sys/fs/cgroup/*/release_agent | head -n1)"),
    ("cgroup-write-limits", "for f in /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes "
                            "/sys/fs/cgroup/pids.max /sys/fs/cgroup/pids/pids.max; do "
                            "test -e $f && echo max > $f && exit 0; done; exit 1"),
    ("read-kcore", "head -c 16 /proc/kcore > /dev/null"),
    ("read-kmsg", "head -c 16 /dev/kmsg > /dev/null"),
    ("dmesg", "dmesg"),
    ("syslog-syscall", syscall("syslog", 3, 0, 0)),
    ("init-module-syscall", syscall("init_module", 0, 0, 0)),
    ("finit-module-syscall", syscall("finit_module", 0, 0, 0)),
    ("kexec-load", syscall("kexec_load", 0, 0, 0, 0)),
    ("bpf", syscall("bpf", 0, 0, 0)),
    ("perf-event-open", syscall("perf_event_open", 0, 0, -1, -1, 0)),
    ("userfaultfd", syscall("userfaultfd", 0)),
    ("open-by-handle-at", syscall("open_by_handle_at", -100, 0, 0)),
    ("reboot", syscall("reboot", 0xfee1dead, 672274793, 0x4321fedc, 0)),
    ("keyctl-session", syscall("keyctl", 0, -3, 0)),   # KEYCTL_GET_KEYRING_ID of the session
    ("add-key", py("import ctypes,sys; l=ctypes.CDLL(None, use_errno=True); "
                   "sys.exit(0 if l.syscall(248, b\"user\", b\"x\", b\"y\", 1, -3) >= 0 else 1)")),
    ("capabilities-nonzero", "grep -q \"^CapEff:[[:space:]]*0*[1-9a-f]\" /proc/self/status"),
    ("no-new-privs-off", "grep -q \"^NoNewPrivs:[[:space:]]*0\" /proc/self/status"),
    ("seccomp-off", "grep -q \"^Seccomp:[[:space:]]*0\" /proc/self/status"),
    # the network is blocked
    ("raw-socket", py("import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)")),
    ("packet-socket", py("import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)")),
    ("tcp-out", py("import socket; socket.create_connection((\"1.1.1.1\", 53), timeout=3)")),
    ("udp-out", py("import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                   "s.connect((\"8.8.8.8\", 53)); s.send(b\"x\")")),
    ("host-loopback-postgres", "ls {var}/run/.s.PGSQL.5432"),
    ("interfaces-besides-lo", "test $(tail -n +3 /proc/net/dev | grep -vc '^ *lo:') -gt 0"),
    # setuid binaries (no_new_privs: they run without their privilege)
    ("su", "su -c true root < /dev/null"),
    ("sudo", "sudo -n true"),
    ("setuid-mount", "mkdir -p /tmp/m && /bin/mount -t tmpfs none /tmp/m"),
    ("setuid-bit-gains-root-on-host",
     "cp /bin/sh /tmp/sh && chmod 4755 /tmp/sh && /tmp/sh -p -c 'test $(cat /proc/self/status | "
     "grep ^Uid | cut -f3) != $(id -u)'"),
    # other sandboxes' state dirs and agent sockets, our own plumbing
    ("state-dir-visible", "ls {state}"),
    ("neighbour-dir", "ls {state}/{neighbour}"),
    ("neighbour-workspace", "cat {state}/{neighbour}/workspace/secret"),
    ("neighbour-agent-socket", py("import socket; s=socket.socket(socket.AF_UNIX); "
                                  "s.connect(\"{state}/{neighbour}/run/agent.sock\")")),
    ("neighbour-socket-shortlink", "ls {state}/.s"),
    ("run-orchard-replace-socket", "ln -sf /tmp/x /run/orchard/agent.sock"),
    ("run-orchard-new-entry", "touch /run/orchard/pwned"),
    ("agent-binary-writable", "echo x >> /run/orchard-agent"),
    ("root-fs-writable", "touch /usr/pwned"),
    ("etc-writable", "echo x >> /etc/passwd"),
    # chroot breakout
    ("chroot", "mkdir -p /tmp/jail && chroot /tmp/jail /bin/true"),
    ("chroot-syscall", py("import os; os.mkdir(\"/tmp/j2\"); os.chroot(\"/tmp/j2\")")),
    ("chroot-double-breakout", py("import os; os.makedirs(\"/tmp/j3/a\", exist_ok=True); "
                                  "os.chroot(\"/tmp/j3/a\"); os.chdir(\"../../../..\"); "
                                  "os.chroot(\".\")")),
    # device nodes
    ("mknod-block", "mknod /tmp/sda b 8 0"),
    ("mknod-mem", "mknod /tmp/mem c 1 1"),
    ("mknod-syscall", syscall("mknod", b"/tmp/mem2", 0o20600, 0x101)),
    ("chroot-raw-syscall", syscall("chroot", b"/tmp")),
    ("dev-mem", "head -c 1 /dev/mem"),
    ("dev-sda", "ls /dev/sda /dev/vda /dev/nvme0n1"),
    ("dev-fuse", "test -c /dev/fuse && exec 3<>/dev/fuse"),
    ("host-disk-by-proc", "head -c 512 /proc/1/root/dev/sda"),
]


@pytest.fixture(scope="module")
def boxes(stack, admin, other):
    def new(s):
        r = s.post(stack.url + "/v1/sandboxes", json={"image": "host"})
        assert r.status_code in (200, 201), r.text
        sid = r.json()["sandbox_id"]
        assert stack.wait_ready(s, sid)["status"] == "ready"
        return sid
    box, neighbour = new(admin), new(other)
    r = other.post("%s/v1/sandboxes/%s/exec" % (stack.url, neighbour),
                   json={"command": "echo theirs > /workspace/secret", "wait": True})
    assert r.status_code == 200 and r.json()["exit_code"] == 0, r.text
    yield box, neighbour
    admin.delete("%s/v1/sandboxes/%s" % (stack.url, box))
    other.delete("%s/v1/sandboxes/%s" % (stack.url, neighbour))


def run(stack, admin, sid, cmd):
    r = admin.post("%s/v1/sandboxes/%s/exec" % (stack.url, sid),
                   json={"command": cmd, "wait": True, "timeout_seconds": 30})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("name,probe", PROBES, ids=[p[0] for p in PROBES])
def test_escape_probe_fails(stack, admin, boxes, name, probe):
    box, neighbour = boxes
    with open(os.path.join(stack.run_dir, "controller.pid")) as f:
        controller = int(f.read().split()[0])
    cmd = probe.format(state=os.path.join(stack.var, "sandboxes"), neighbour=neighbour,
                       var=stack.var, controller=controller)
    job = run(stack, admin, box, "echo PROBE-RAN; if ( %s ) >/dev/null 2>&1; then echo ESCAPED; fi"
              % cmd)
    assert job["status"] == "succeeded" and job["stdout"].startswith("PROBE-RAN"), job
    assert "ESCAPED" not in job["stdout"], "escape probe %r succeeded: %s" % (name, cmd)


@pytest.mark.parametrize("probe", ["touch /tmp/ok", syscall("getpid"), syscall("getcwd", 0, 0)])
def test_the_probe_wrapper_detects_a_success(stack, admin, boxes, probe):
    """The harness itself: a probe that succeeds, or a syscall that fails
    with anything but EPERM (getcwd(NULL, 0) is EFAULT/ERANGE), is reported."""
    job = run(stack, admin, boxes[0], "echo PROBE-RAN; if ( %s ) >/dev/null 2>&1; "
              "then echo ESCAPED; fi" % probe)
    assert "ESCAPED" in job["stdout"], job


def test_neighbour_untouched(stack, other, boxes):
    """After all the probes, the other tenant's sandbox still has its file."""
    job = run(stack, other, boxes[1], "cat /workspace/secret")
    assert job["stdout"] == "theirs\n"
    assert os.path.exists(os.path.join(stack.var, "sandboxes", boxes[1]))
