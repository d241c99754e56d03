"""A `block_network: false` sandbox gets a network namespace of its own with
egress only (issue 19 item 6): not the host's loopback listeners, not its
abstract unix sockets, none of its socket paths in /proc/net/unix; but a
host that is not this one, here an address in a network namespace the test
makes, joined to the host by a veth pair (there is no internet here)."""
import json
import os
import signal
import socket
import subprocess
import threading
import uuid

import pytest

from procs import alive
from stack import process_argv0

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a veth pair and a netns need root")

PROBE = r"""
import json, socket, sys
out = {}
for name, host, port in json.loads(sys.argv[1]):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect((host, port))
        out[name] = "connected:" + s.recv(64).decode()
    except OSError as e:
        out[name] = type(e).__name__
    s.close()
u = socket.socket(socket.AF_UNIX)
try:
    u.connect("\0" + sys.argv[2])
    out["abstract"] = "connected"
except OSError as e:
    out["abstract"] = type(e).__name__
out["unix"] = open("/proc/net/unix").read()
out["ifaces"] = sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:])
print(json.dumps(out))
"""


def run(stack, admin, sid, argv):
    r = admin.post("%s/v1/sandboxes/%s/exec" % (stack.url, sid),
                   json={"command": argv, "wait": True, "timeout": 60})
    assert r.status_code == 200, r.text
    return r.json()


def create(stack, admin, block_network):
    r = admin.post(stack.url + "/sandboxes", json={"image": "host", "block_network": block_network})
    assert r.status_code in (200, 201), r.text
    sid = r.json()["sandbox_id"]
    stack.wait_ready(admin, sid)
    return sid


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def slirp_of(stack, sid):
    """The slirp4netns under the sandbox's watchdog (its driver handle)."""
    watchdog = int(stack.scalar("SELECT driver_handle FROM sandboxes WHERE id = '%s'" % sid)
                   .split(":")[0])
    return watchdog, [p for p in children(watchdog) if process_argv0(p).endswith(b"/slirp4netns")]


class Listener:
    """A TCP server that answers each connection with a word and counts them."""

    def __init__(self, sock, word):
        self.sock, self.word, self.accepted = sock, word, 0
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.stop = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            c.sendall(self.word.encode())
            c.close()

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()


@pytest.fixture
def host_services():
    """What a sandbox must not reach: a TCP listener on the host's
    127.0.0.1 and an abstract unix socket of the host's namespace."""
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    lo = Listener(tcp, "loopback")
    name = "orchard-netns-test-" + uuid.uuid4().hex[:8]
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\0" + name)
    abstract.listen(1)
    try:
        yield {"port": tcp.getsockname()[1], "listener": lo, "abstract": name}
    finally:
        lo.close()
        abstract.close()


@pytest.fixture
def egress_host():
    """A listener on 10.213.<n>.2 in a network namespace the test makes,
    routed from the host over a veth pair: an address the host can reach
    that is not its own."""
    tag = uuid.uuid4().hex[:6]
    ns, host_if, peer_if = "orc-eg-" + tag, "oeg" + tag, "oegp" + tag
    net = "10.213.%d" % (os.getpid() % 200 + 20)
    sh = [
        ["ip", "netns", "add", ns],
        ["ip", "link", "add", host_if, "type", "veth", "peer", "name", peer_if],
        ["ip", "link", "set", peer_if, "netns", ns],
        ["ip", "addr", "add", net + ".1/30", "dev", host_if],
        ["ip", "link", "set", host_if, "up"],
        ["ip", "-n", ns, "addr", "add", net + ".2/30", "dev", peer_if],
        ["ip", "-n", ns, "link", "set", peer_if, "up"],
        ["ip", "-n", ns, "link", "set", "lo", "up"],
    ]
    server = None
    try:
        for argv in sh:
            subprocess.run(argv, check=True, capture_output=True, timeout=30)
        server = subprocess.Popen(
            ["ip", "netns", "exec", ns, "python3", "-c",
             "import socket\n"
             "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
             "s.bind(('%s.2', 8765)); s.listen(8); print('up', flush=True)\n"
             "while True:\n"
             "    c, _ = s.accept(); c.sendall(b'egress'); c.close()\n" % net],
            stdout=subprocess.PIPE, text=True)
        assert server.stdout.readline().strip() == "up"
        yield {"addr": net + ".2", "port": 8765}
    finally:
        if server:
            server.kill()
            server.wait()
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def probe(stack, admin, sid, host_services, egress_host):
    targets = [
        ("loopback", "127.0.0.1", host_services["port"]),
        # slirp4netns's host-loopback gateway, off (--disable-host-loopback)
        ("gateway", "10.0.2.2", host_services["port"]),
        ("egress", egress_host["addr"], egress_host["port"]),
    ]
    out = run(stack, admin, sid, ["python3", "-c", PROBE, json.dumps(targets),
                                  host_services["abstract"]])
    assert out["exit_code"] == 0, out
    return json.loads(out["stdout"])


def test_unblocked_sandbox_has_egress_but_not_the_hosts_loopback(stack, admin, host_services,
                                                                 egress_host):
    # The host itself reaches all three (so what follows can fail).
    with socket.create_connection(("127.0.0.1", host_services["port"]), timeout=5) as c:
        assert c.recv(16) == b"loopback"
    with socket.create_connection((egress_host["addr"], egress_host["port"]), timeout=5) as c:
        assert c.recv(16) == b"egress"
    with open("/proc/net/unix") as f:
        assert "@" + host_services["abstract"] in f.read()
    seen = host_services["listener"].accepted

    sid = create(stack, admin, block_network=False)
    try:
        got = probe(stack, admin, sid, host_services, egress_host)
        assert got["egress"] == "connected:egress", got
        assert got["loopback"] == "ConnectionRefusedError", got
        assert got["gateway"] in ("ConnectionRefusedError", "OSError"), got
        assert got["abstract"] == "ConnectionRefusedError", got
        assert host_services["listener"].accepted == seen
        assert got["ifaces"] == ["lo", "tap0"], got
        # Its own sockets only: none of the host's (the stack's api socket,
        # our abstract name), where the host namespace lists them.
        assert host_services["abstract"] not in got["unix"]
        assert "api.sock" not in got["unix"] and stack.var not in got["unix"], got["unix"]
    finally:
        admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))


def test_blocked_sandbox_still_has_loopback_alone(stack, admin, host_services, egress_host):
    sid = create(stack, admin, block_network=True)
    try:
        got = probe(stack, admin, sid, host_services, egress_host)
        assert got["ifaces"] == ["lo"], got
        assert got["egress"] == "OSError" or got["egress"].endswith("Error"), got
        assert not got["egress"].startswith("connected"), got
        assert got["loopback"] == "ConnectionRefusedError", got
        assert got["abstract"] == "ConnectionRefusedError", got
        assert slirp_of(stack, sid)[1] == []
    finally:
        admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))


def test_slirp4netns_ends_with_its_sandbox(stack, admin):
    """Deleted, or its watchdog killed (what a crash sweep does): no
    slirp4netns is left behind."""
    a = create(stack, admin, block_network=False)
    b = create(stack, admin, block_network=False)
    _, slirp_a = slirp_of(stack, a)
    watchdog_b, slirp_b = slirp_of(stack, b)
    assert len(slirp_a) == 1 and len(slirp_b) == 1
    r = admin.delete("%s/v1/sandboxes/%s" % (stack.url, a))
    assert r.status_code in (200, 202, 204), r.text
    stack.wait_for(lambda: not alive(slirp_a[0]), what="slirp4netns of a deleted sandbox gone")
    try:
        os.kill(watchdog_b, signal.SIGKILL)
        stack.wait_for(lambda: not alive(slirp_b[0]), what="slirp4netns of a killed sandbox gone")
    finally:
        admin.delete("%s/v1/sandboxes/%s" % (stack.url, b))


def test_a_fork_of_an_unblocked_sandbox_is_isolated_the_same_way(stack, admin, host_services,
                                                                 egress_host):
    parent = create(stack, admin, block_network=False)
    forks = []
    try:
        r = admin.post("%s/v1/sandboxes/%s/fork" % (stack.url, parent), json={"count": 1})
        assert r.status_code == 200, r.text
        forks = r.json()["sandbox_ids"]
        stack.wait_ready(admin, forks[0])
        got = probe(stack, admin, forks[0], host_services, egress_host)
        assert got["ifaces"] == ["lo", "tap0"], got
        assert got["egress"] == "connected:egress", got
        assert got["loopback"] == "ConnectionRefusedError", got
        assert got["abstract"] == "ConnectionRefusedError", got
        assert len(slirp_of(stack, forks[0])[1]) == 1
    finally:
        for sid in forks + [parent]:
            admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))
