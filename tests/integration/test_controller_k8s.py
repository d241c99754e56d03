"""Black-box tests of bin/orchard-controller with the kubernetes driver.

The real controller (ORCHARD_DRIVER=kubernetes) against the fake API server
of tests/k8s/ (in this process; it validates every body strictly, so a
malformed pod is a 422 and the test fails) whose kubelet runs each pod's
agent as a local process on 127.X.Y.N, and a throwaway PostgreSQL
(/tmp/k8sd-*). Rows are inserted with driver = 'kubernetes' through psql,
as orchard-api would with ORCHARD_DRIVER=kubernetes.
"""
import base64
import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "k8s"))

from stack import sanitizer_env, save_sanitizer_reports  # noqa: E402

# The binaries (another build through ORCHARD_TEST_CONTROLLER and
# ORCHARD_AGENT_BIN), PostgreSQL and the controller process: ctl_harness.py.
from ctl_harness import AGENT, CONTROLLER, PGBIN, Controller, Postgres, wait_for  # noqa: E402

NS = "orchard-sandboxes"


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Ports and the pods' loopback network are per run, so that runs of this
# file in parallel (other engineers, the whole suite) never meet.
FAKE_PORT = free_port()
AGENT_PORT = free_port()
POD_NET = "127.%d.%d." % (100 + os.getpid() % 150, (os.getpid() // 150) % 250)
API_TOKEN = "k8sd-api-token"
SELECTOR = "app.kubernetes.io/managed-by=orchard-controller"

try:
    from fake_apiserver import FakeApiServer  # noqa: E402
    from fake_runner import LocalRunner  # noqa: E402
    HAVE_FAKE = True
except ImportError:  # python3-kubernetes missing
    HAVE_FAKE = False

pytestmark = pytest.mark.skipif(
    not (HAVE_FAKE and os.path.exists(CONTROLLER) and os.path.exists(AGENT)
         and os.path.exists(PGBIN)),
    reason="needs python3-kubernetes, bin/orchard-controller, bin/orchard-agent, PostgreSQL 15")


@pytest.fixture(scope="module")
def pg():
    base = tempfile.mkdtemp(prefix="k8sd-pg-", dir="/tmp")
    os.chmod(base, 0o755)
    p = Postgres(base)
    p.tenant = p.sql("INSERT INTO tenants (name) VALUES ('k8s') RETURNING id")[0][0]
    yield p
    try:
        p.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


class K8s:
    """One fake API server (with a kubelet running agents) and the
    controllers of one test."""

    def __init__(self, pg, tls=False, private_tmp=False, client_ca=None):
        self.pg = pg
        self.base = tempfile.mkdtemp(prefix="k8sd-", dir="/tmp")
        self.token_file = os.path.join(self.base, "api-token")
        self.write_token(API_TOKEN)
        self.runner = LocalRunner({"orchard-agent": AGENT}, workdir=os.path.join(self.base, "pods"),
                                  private_tmp=private_tmp)
        self.fake = FakeApiServer(port=FAKE_PORT, token=API_TOKEN, namespaces=(NS,),
                                  ready_delay=0.1, delete_delay=0.3, bookmark_interval=0.5,
                                  runner=self.runner, pod_ip_prefix=POD_NET)
        self.ctls = []
        self.ids = []
        if tls:
            self.start_tls(client_ca)
        else:
            self.fake.start()

    def start_tls(self, client_ca=None):
        """The fake behind TLS with a certificate for 127.0.0.1, as an
        in-cluster API server is (KUBERNETES_SERVICE_HOST + the CA); with
        client_ca, a client certificate that CA signed is required."""
        import ssl
        import threading
        from http.server import ThreadingHTTPServer
        from fake_apiserver import Handler
        self.ca = os.path.join(self.base, "ca.crt")
        key = os.path.join(self.base, "tls.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-keyout", key, "-out", self.ca, "-subj", "/CN=kubernetes",
                        "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.ca, key)
        if client_ca:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(client_ca)
        f = self.fake
        f.httpd = ThreadingHTTPServer((f.host, f.port), Handler)
        f.httpd.daemon_threads = True
        f.httpd.fake = f
        f.httpd.socket = ctx.wrap_socket(f.httpd.socket, server_side=True)
        f.thread = threading.Thread(target=f.httpd.serve_forever, args=(0.05,), daemon=True)
        f.thread.start()

    def write_token(self, tok):
        tmp = self.token_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(tok + "\n")
        os.rename(tmp, self.token_file)

    def env(self, **extra):
        e = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "ORCHARD_DATABASE_URL": self.pg.url,
            "ORCHARD_STATE_DIR": os.path.join(self.base, "state"),
            "ORCHARD_DRIVER": "kubernetes",
            "ORCHARD_K8S_API_URL": self.fake.url,
            "ORCHARD_K8S_TOKEN_FILE": self.token_file,
            "ORCHARD_K8S_NAMESPACE": NS,
            "ORCHARD_K8S_AGENT_IMAGE": "orchard/agent:test",
            "ORCHARD_K8S_AGENT_PORT": str(AGENT_PORT),
            "ORCHARD_K8S_SERVICE_ACCOUNT": "orchard-sandbox",
            "ORCHARD_K8S_RETRY_BUDGET_MS": "10000",
            "ORCHARD_SWEEP_INTERVAL_MS": "300",
            "ORCHARD_LOG_LEVEL": "debug",
        }
        e.update(sanitizer_env())
        e.update(extra)
        return e

    def start(self, **extra):
        c = Controller(self.env(**extra), os.path.join(self.base, "controller%d.log" % len(self.ctls)))
        self.ctls.append(c)
        wait_for(lambda: "holding the controller lock" in c.log() or c.proc.poll() is not None,
                 what="leadership")
        assert c.proc.poll() is None, c.log()
        return c

    @property
    def ctl(self):
        return self.ctls[-1]

    def insert(self, image="python:3.11-slim", block_network=True, timeout=30, cpu_millis=500,
               memory_bytes=268435456, ttl=None, sid=None, forked_from=None):
        sid = sid or "k-" + uuid.uuid4().hex[:12]
        token = uuid.uuid4().hex + uuid.uuid4().hex
        self.pg.sql(
            "INSERT INTO sandboxes (id, tenant_id, image, driver, cpu, memory, cpu_millis,"
            " memory_bytes, block_network, timeout_seconds, ttl_seconds, agent_token, forked_from)"
            " VALUES ('%s', %s, '%s', 'kubernetes', '%dm', '%d', %d, %d, %s, %d, %s, '%s', %s)"
            % (sid, self.pg.tenant, image, cpu_millis, memory_bytes, cpu_millis, memory_bytes,
               "true" if block_network else "false", timeout,
               "NULL" if ttl is None else int(ttl), token,
               "NULL" if forked_from is None else "'%s'" % forked_from))
        self.ids.append(sid)
        return sid, token

    def row(self, sid):
        rows = self.pg.sql("SELECT state, state_message, driver_handle, agent_address"
                           " FROM sandboxes WHERE id = '%s'" % sid)
        return dict(zip(("state", "message", "handle", "address"), rows[0])) if rows else None

    def wait_state(self, sid, states, timeout=20.0):
        states = (states,) if isinstance(states, str) else states
        last = {}

        def check():
            last["row"] = self.row(sid)
            return last["row"]["state"] in states
        try:
            wait_for(check, timeout=timeout, what="%s in %s" % (sid, states))
        except AssertionError:
            raise AssertionError("%s: last row %r\n--- controller log tail ---\n%s"
                                 % (sid, last.get("row"), self.ctl.log()[-4000:]))
        return last["row"]

    def delete(self, sid):
        self.pg.sql("UPDATE sandboxes SET state = 'deleting', deleted_at = now()"
                    " WHERE id = '%s'" % sid)

    def pod(self, sid):
        return self.fake.get("pods", NS, "sb-" + sid)

    def posts(self, resource):
        """POSTs of one resource with their answers (no 4xx other than 409
        and 429 may ever appear: the fake validates strictly)."""
        return self.fake.requests_matching("POST", r"/%s$" % resource)

    def assert_no_invalid_requests(self):
        bad = [(r["method"], r["path"], r["code"]) for r in self.fake.requests_matching()
               if r["code"] in (400, 415, 422)]
        assert not bad, bad

    def close(self):
        for c in self.ctls:
            c.stop(signal.SIGKILL)
        if self.ids:
            self.pg.sql("UPDATE sandboxes SET state = 'deleted' WHERE id IN (%s)"
                        % ",".join("'%s'" % sid for sid in self.ids))
        self.fake.stop()
        if os.environ.get("ORCHARD_SAN_LOG_DIR"):
            save_sanitizer_reports(self.base, os.environ["ORCHARD_SAN_LOG_DIR"],
                                   ("*.log", "pods/*.log"))
        self.runner.cleanup()
        if os.environ.get("K8SD_KEEP") != "1":     # keep the logs to read them
            shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture
def k8s(pg):
    k = K8s(pg)
    try:
        yield k
    finally:
        k.close()


@pytest.fixture
def k8s_tls(pg):
    k = K8s(pg, tls=True)
    try:
        yield k
    finally:
        k.close()


def agent_call(address, token, method, path, body=None):
    assert address.startswith("http://"), address
    host, port = address[len("http://"):].rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=10)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data) if data else None


def ready_sandbox(k8s, **kw):
    sid, token = k8s.insert(**kw)
    row = k8s.wait_state(sid, "ready")
    return sid, token, row


# ---- creation and readiness ---------------------------------------------------------


def test_pending_row_becomes_a_ready_pod_whose_agent_runs_commands(k8s):
    k8s.start()
    sid, token, row = ready_sandbox(k8s, cpu_millis=500, memory_bytes=268435456, ttl=900)
    pod = k8s.pod(sid)
    assert pod is not None
    assert row["address"] == "http://%s:%d" % (pod["status"]["podIP"], AGENT_PORT)
    assert row["address"].startswith("http://" + POD_NET)
    assert row["handle"] == "%s/sb-%s/%s" % (NS, sid, pod["metadata"]["uid"])
    # The agent in the "pod" answers with the row's token, and only with it.
    status, body = agent_call(row["address"], token, "POST", "/exec",
                              {"command": "echo hello-from-pod"})
    assert status == 200 and body["stdout"] == "hello-from-pod\n", body
    assert agent_call(row["address"], "wrong", "GET", "/health")[0] == 401
    k8s.assert_no_invalid_requests()


def test_pod_spec_follows_the_contract(k8s):
    k8s.start()
    sid, token, _ = ready_sandbox(k8s, cpu_millis=250, memory_bytes=134217728, ttl=600)
    pod = k8s.pod(sid)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["labels"] == {"app.kubernetes.io/managed-by": "orchard-controller",
                              "orchard.dev/sandbox": sid}
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    assert spec["serviceAccountName"] == "orchard-sandbox"
    assert 590 <= spec["activeDeadlineSeconds"] <= 600
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "runtimeClassName" not in spec and "nodeSelector" not in spec
    init = spec["initContainers"][0]
    assert init["image"] == "orchard/agent:test"
    main = spec["containers"][0]
    assert main["image"] == "python:3.11-slim"
    assert main["command"] == ["/orchard/bin/orchard-agent"]
    assert main["args"] == ["--listen", "tcp:0.0.0.0:%d" % AGENT_PORT,
                            "--token-file", "/run/orchard/token"]
    assert main["readinessProbe"]["tcpSocket"] == {"port": "agent"}
    res = main["resources"]
    # Requests are the size over the overcommit ratios (cpu 8, memory 1 by
    # default), so the scheduler packs as admission does; limits the size.
    assert res["limits"]["cpu"] == "250m" and res["requests"]["cpu"] == "31m"
    assert res["limits"]["memory"] == res["requests"]["memory"] == "134217728"
    assert res["limits"]["ephemeral-storage"] == "10Gi"
    for c in (init, main):
        assert c["securityContext"] == {"allowPrivilegeEscalation": False,
                                        "capabilities": {"drop": ["ALL"]}}
    mounts = {m["mountPath"]: m for m in main["volumeMounts"]}
    assert mounts["/run/orchard"]["readOnly"] is True
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols["token"]["secret"] == {"secretName": "sb-%s-token" % sid, "defaultMode": 0o400}
    # The token is in the Secret, not in the pod spec.
    assert token not in json.dumps(pod)
    secret = k8s.fake.get("secrets", NS, "sb-%s-token" % sid)
    import base64
    assert base64.b64decode(secret["data"]["token"]).decode() == token
    assert secret["metadata"]["labels"]["orchard.dev/sandbox"] == sid
    # block_network defaults to true: no egress policy.
    assert k8s.fake.get("networkpolicies", NS, "sb-%s-egress" % sid) is None
    k8s.assert_no_invalid_requests()


def test_configured_scheduling_and_security_options_reach_the_pod(k8s):
    # A node the selector picks, tainted as the toleration allows (no
    # capacity, no admission: the default fake-node-1 lacks the label).
    k8s.fake.add_node("pool-1", "8", "32Gi", labels={"orchard.dev/pool": "sandboxes"},
                      taints=[{"key": "orchard.dev/sandbox", "effect": "NoSchedule"}])
    k8s.start(ORCHARD_K8S_RUNTIME_CLASS="gvisor",
              ORCHARD_K8S_NODE_SELECTOR='{"orchard.dev/pool": "sandboxes"}',
              ORCHARD_K8S_TOLERATIONS='[{"key": "orchard.dev/sandbox", "operator": "Exists",'
                                      ' "effect": "NoSchedule"}]',
              ORCHARD_K8S_IMAGE_PULL_SECRETS="regcred, other-cred",
              ORCHARD_K8S_RUN_AS_NON_ROOT="1",
              ORCHARD_K8S_EPHEMERAL_STORAGE="2Gi")
    sid, _, _ = ready_sandbox(k8s)
    spec = k8s.pod(sid)["spec"]
    assert spec["runtimeClassName"] == "gvisor"
    assert spec["nodeSelector"] == {"orchard.dev/pool": "sandboxes"}
    assert spec["tolerations"] == [{"key": "orchard.dev/sandbox", "operator": "Exists",
                                    "effect": "NoSchedule"}]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}, {"name": "other-cred"}]
    assert spec["securityContext"]["runAsNonRoot"] is True
    # A non-root agent must read its token: fsGroup owns the Secret's
    # files, which are group-readable.
    for key in ("runAsUser", "runAsGroup", "fsGroup"):
        assert spec["securityContext"][key] == 65532, spec["securityContext"]
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols["token"]["secret"]["defaultMode"] == 0o440
    assert spec["containers"][0]["resources"]["limits"]["ephemeral-storage"] == "2Gi"
    k8s.assert_no_invalid_requests()


def test_tools_bundle_is_copied_by_an_init_container_and_mounted_read_only(k8s):
    k8s.start(ORCHARD_K8S_TOOLS_IMAGE="orchard/sandbox-tools:test")
    sid, token, row = ready_sandbox(k8s)
    spec = k8s.pod(sid)["spec"]
    inits = {c["name"]: c for c in spec["initContainers"]}
    tools = inits["tools-install"]
    assert tools["image"] == "orchard/sandbox-tools:test"
    assert tools["command"] == ["cp", "-a", "/opt/sandbox-tools/.", "/tools/"]
    assert tools["volumeMounts"] == [{"name": "sandbox-tools", "mountPath": "/tools"}]
    assert tools["securityContext"]["allowPrivilegeEscalation"] is False
    vols = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in vols["sandbox-tools"]
    main = spec["containers"][0]
    mounts = {m["mountPath"]: m for m in main["volumeMounts"]}
    assert mounts["/opt/sandbox-tools"] == {"name": "sandbox-tools", "mountPath": "/opt/sandbox-tools",
                                            "readOnly": True}
    env = {e["name"]: e["value"] for e in main["env"]}
    assert env["SANDBOX_TOOLS"] == "/opt/sandbox-tools"
    assert env["PATH"].endswith(":/opt/sandbox-tools/bin") and env["PATH"].startswith("/usr/local/")
    # the agent still works with that environment
    status, body = agent_call(row["address"], token, "POST", "/exec", {"command": "echo ok"})
    assert status == 200 and body["stdout"] == "ok\n", body
    k8s.assert_no_invalid_requests()


def test_tools_bundle_as_an_image_volume(k8s):
    k8s.start(ORCHARD_K8S_TOOLS_IMAGE="orchard/sandbox-tools:test", ORCHARD_K8S_TOOLS_MODE="image")
    sid, _, _ = ready_sandbox(k8s)
    spec = k8s.pod(sid)["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["agent-install"]
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols["sandbox-tools"] == {"name": "sandbox-tools", "image": {
        "reference": "orchard/sandbox-tools:test", "pullPolicy": "IfNotPresent"}}
    mounts = {m["mountPath"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["/opt/sandbox-tools"]["subPath"] == "opt/sandbox-tools"
    assert mounts["/opt/sandbox-tools"]["readOnly"] is True
    k8s.assert_no_invalid_requests()


@pytest.mark.parametrize("target", ["overlays/dev", "overlays/prod"])
def test_the_manifests_tools_image_reaches_the_pod(k8s, target):
    """Issue 28: the controller configured with the tools settings of the
    rendered k8s/ ConfigMap (tests/k8s/test_manifests.py checks they are
    there) puts that image into the sandbox pod and mounts the bundle."""
    import kustomize_lite
    objs = kustomize_lite.build(os.path.join(ROOT, "k8s", target))
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "orchard-config"]
    tools = {k: v for k, v in cm["data"].items() if k.startswith("ORCHARD_K8S_TOOLS_")}
    assert tools["ORCHARD_K8S_TOOLS_IMAGE"]
    k8s.start(**tools)
    sid, _, _ = ready_sandbox(k8s)
    spec = k8s.pod(sid)["spec"]
    inits = {c["name"]: c for c in spec["initContainers"]}
    assert inits["tools-install"]["image"] == tools["ORCHARD_K8S_TOOLS_IMAGE"]
    mounts = {m["mountPath"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["/opt/sandbox-tools"]["readOnly"] is True
    env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
    assert env["PATH"].endswith(":/opt/sandbox-tools/bin")
    k8s.assert_no_invalid_requests()


def test_no_tools_image_means_no_tools_in_the_pod(k8s):
    k8s.start()
    sid, _, _ = ready_sandbox(k8s)
    spec = k8s.pod(sid)["spec"]
    assert "sandbox-tools" not in json.dumps(spec)
    c = Controller(k8s.env(ORCHARD_K8S_TOOLS_MODE="copy"), os.path.join(k8s.base, "badtools.log"))
    assert c.proc.wait(10) != 0
    assert "ORCHARD_K8S_TOOLS_MODE" in c.log()
    c.stop()


def test_run_as_user_sets_the_pod_user_group_and_fs_group(k8s):
    k8s.start(ORCHARD_K8S_RUN_AS_NON_ROOT="1", ORCHARD_K8S_RUN_AS_USER="1000")
    sid, _, _ = ready_sandbox(k8s)
    psc = k8s.pod(sid)["spec"]["securityContext"]
    assert (psc["runAsUser"], psc["runAsGroup"], psc["fsGroup"]) == (1000, 1000, 1000), psc
    k8s.assert_no_invalid_requests()


def test_bad_configuration_refuses_to_start(k8s):
    c = Controller(k8s.env(ORCHARD_K8S_EGRESS_EXCEPT="10.0.0.0/8,not-a-cidr"),
                   os.path.join(k8s.base, "bad.log"))
    assert c.proc.wait(10) != 0
    assert "ORCHARD_K8S_EGRESS_EXCEPT" in c.log()
    c.stop()
    c = Controller(k8s.env(ORCHARD_K8S_RUN_AS_USER="0"), os.path.join(k8s.base, "bad2.log"))
    assert c.proc.wait(10) != 0
    assert "ORCHARD_K8S_RUN_AS_USER" in c.log()
    c.stop()


# ---- egress policy and deletion ------------------------------------------------------


def test_block_network_false_gets_a_valid_egress_policy_and_delete_removes_everything(k8s):
    k8s.start()
    sid, _, _ = ready_sandbox(k8s, block_network=False)
    np = k8s.fake.get("networkpolicies", NS, "sb-%s-egress" % sid)
    assert np is not None, "no egress policy"
    assert [p["code"] for p in k8s.posts("networkpolicies")] == [201]
    spec = np["spec"]
    assert spec["podSelector"] == {"matchLabels": {"orchard.dev/sandbox": sid}}
    assert spec["policyTypes"] == ["Egress"]
    block = spec["egress"][0]["to"][0]["ipBlock"]
    assert block["cidr"] == "0.0.0.0/0"
    assert set(block["except"]) == {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                                    "169.254.169.254/32", "100.64.0.0/10"}
    assert len(spec["egress"][0]["to"]) == 1      # no IPv6 egress by default
    dns = spec["egress"][1]
    assert {(p["protocol"], p["port"]) for p in dns["ports"]} == {("UDP", 53), ("TCP", 53)}
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}

    k8s.delete(sid)
    k8s.wait_state(sid, "deleted")
    wait_for(lambda: k8s.pod(sid) is None, what="pod removed")
    assert k8s.fake.get("secrets", NS, "sb-%s-token" % sid) is None
    assert k8s.fake.get("networkpolicies", NS, "sb-%s-egress" % sid) is None
    k8s.assert_no_invalid_requests()


def test_ipv6_excepts_add_an_ipv6_block(k8s):
    k8s.start(ORCHARD_K8S_EGRESS_EXCEPT="10.0.0.0/8,169.254.0.0/16,fd00::/8,fe80::/10")
    sid, _, _ = ready_sandbox(k8s, block_network=False)
    to = k8s.fake.get("networkpolicies", NS, "sb-%s-egress" % sid)["spec"]["egress"][0]["to"]
    assert to[0]["ipBlock"] == {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "169.254.0.0/16"]}
    assert to[1]["ipBlock"] == {"cidr": "::/0", "except": ["fd00::/8", "fe80::/10"]}


def test_delete_is_idempotent_when_objects_are_already_gone(k8s):
    k8s.start()
    sid, _, _ = ready_sandbox(k8s)
    # Someone removed the secret already; the pod's DELETE answers 404 once too.
    k8s.fake.api.delete("secrets", NS, "sb-%s-token" % sid, None, {})
    k8s.fake.fault(404, method="DELETE", path="/pods/sb-%s$" % sid, count=1)
    k8s.delete(sid)
    row = k8s.wait_state(sid, "deleted")
    assert row["state"] == "deleted"


# ---- failures ---------------------------------------------------------------------------


@pytest.mark.parametrize("image,reason", [
    ("registry.example/bad/image:1", "ErrImagePull"),
    ("Not-A-Valid/Reference", "InvalidImageName"),
])
def test_image_errors_fail_the_row_with_the_reason(k8s, image, reason):
    k8s.fake.pod_rule("ErrImagePull", image="registry.example/bad/*")
    k8s.start()
    sid, _ = k8s.insert(image=image)
    row = k8s.wait_state(sid, "failed")
    assert reason in row["message"] or (reason == "ErrImagePull" and
                                        "ImagePullBackOff" in row["message"]), row
    if reason == "ErrImagePull":
        assert image in row["message"], row
    # Nothing is left behind.
    wait_for(lambda: k8s.pod(sid) is None, what="failed pod removed")
    assert k8s.fake.get("secrets", NS, "sb-%s-token" % sid) is None
    k8s.assert_no_invalid_requests()


def test_unschedulable_pod_fails_after_the_pending_timeout_with_the_scheduler_message(k8s):
    msg = "0/3 nodes are available: 3 Insufficient memory."
    k8s.start(ORCHARD_K8S_PENDING_TIMEOUT_S="2")
    sid = "k-unsched-" + uuid.uuid4().hex[:6]
    k8s.fake.pod_rule("Unschedulable", labels={"orchard.dev/sandbox": sid}, message=msg)
    t0 = time.monotonic()
    k8s.insert(sid=sid)
    row = k8s.wait_state(sid, "failed")
    assert time.monotonic() - t0 >= 1.9
    assert msg in row["message"] and "unschedulable" in row["message"], row
    wait_for(lambda: k8s.pod(sid) is None, what="unschedulable pod removed")


def test_pending_note_shows_why_and_goes_once_the_pod_starts(k8s):
    msg = "0/2 nodes are available: 2 node(s) had untolerated taint."
    k8s.start()
    sid = "k-note-" + uuid.uuid4().hex[:6]
    k8s.fake.pod_rule("Unschedulable", labels={"orchard.dev/sandbox": sid}, message=msg)
    k8s.insert(sid=sid, timeout=60)
    wait_for(lambda: (k8s.row(sid)["message"] or "").endswith(msg), what="pending note")
    assert k8s.row(sid)["state"] == "pending"
    assert k8s.row(sid)["message"] == "pod unschedulable: " + msg
    # A node frees up: the pod starts, the row is ready and the note is gone.
    k8s.fake.start_pod(NS, "sb-" + sid)
    row = k8s.wait_state(sid, "ready")
    assert row["message"] is None, row


def test_fifty_creates_progress_at_once(k8s):
    """create() returns once the API server accepted the pod; the loop
    follows every pending pod through the watch, so 50 pods are all created
    while none of them has started, each becomes ready when it starts, and
    the loop is never held by the ones still pending."""
    k8s.start()
    tag = uuid.uuid4().hex[:4]
    k8s.fake.pod_rule("Stay", name="sb-k-many-%s-*" % tag)
    sids = ["k-many-%s-%02d" % (tag, i) for i in range(50)]
    k8s.pg.sql(     # in one statement: one NOTIFY-driven burst, as from many clients
        "INSERT INTO sandboxes (id, tenant_id, image, driver, cpu, memory, cpu_millis,"
        " memory_bytes, block_network, timeout_seconds, agent_token)"
        " SELECT 'k-many-%s-' || lpad(i::text, 2, '0'), %s, 'python:3.11-slim', 'kubernetes',"
        " '100m', '67108864', 100, 67108864, true, 300, md5(random()::text) || md5(i::text)"
        " FROM generate_series(0, 49) i" % (tag, k8s.pg.tenant))
    k8s.ids.extend(sids)

    def states():
        return dict((r[0], (r[1], r[2])) for r in k8s.pg.sql(
            "SELECT id, state, driver_handle FROM sandboxes WHERE id LIKE 'k-many-%s-%%'" % tag))
    wait_for(lambda: sum(p["code"] == 201 for p in k8s.posts("pods")) >= 50, timeout=60,
             what="50 pods created")
    wait_for(lambda: all(h for _, h in states().values()), what="50 handles recorded")
    assert {st for st, _ in states().values()} == {"pending"}
    assert {p["status"]["phase"] for p in k8s.fake.objects("pods", NS)
            if p["metadata"]["name"].startswith("sb-k-many-" + tag)} == {"Pending"}
    # Some start (in reverse order of creation): exactly those become ready.
    started = sids[-1:-6:-1]
    for sid in started:
        k8s.fake.start_pod(NS, "sb-" + sid)
    rows = [k8s.wait_state(sid, "ready") for sid in started]
    assert len({r["address"] for r in rows}) == len(started)
    tok = k8s.pg.sql("SELECT agent_token FROM sandboxes WHERE id = '%s'" % started[2])[0][0]
    status, body = agent_call(rows[2]["address"], tok, "POST", "/exec", {"command": "echo many"})
    assert status == 200 and body["stdout"] == "many\n", body
    assert sum(st == "pending" for st, _ in states().values()) == 45
    # A sandbox created meanwhile is not held up behind the 45.
    other, _ = k8s.insert(timeout=60)
    k8s.wait_state(other, "ready")
    # The 45 that never started are deleted together.
    k8s.pg.sql("UPDATE sandboxes SET state = 'deleting', deleted_at = now()"
               " WHERE id LIKE 'k-many-%s-%%' AND state = 'pending'" % tag)
    wait_for(lambda: sum(st == "deleted" for st, _ in states().values()) == 45, timeout=60,
             what="45 deleted")
    wait_for(lambda: len([p for p in k8s.fake.objects("pods", NS)
                          if p["metadata"]["name"].startswith("sb-k-many-" + tag)]) == 5,
             timeout=30, what="45 pods removed")
    k8s.assert_no_invalid_requests()


# ---- capacity (GET /api/v1/nodes) -------------------------------------------------------


def capacity_row(k8s):
    rows = k8s.pg.sql("SELECT nodes, cpu_millis, memory_bytes, node_cpu_millis, node_memory_bytes"
                      " FROM driver_capacity WHERE driver = 'kubernetes'")
    return tuple(int(v) for v in rows[0]) if rows else None


def queue(k8s, sid):
    return k8s.pg.sql("SELECT state, admitted_at IS NOT NULL, queue_position, queue_reason,"
                      " state_message FROM sandboxes WHERE id = '%s'" % sid)[0]


def test_capacity_is_the_allocatable_of_the_nodes_pods_may_use_and_admission_follows_it(k8s):
    gi = 1 << 30
    k8s.fake.remove_node("fake-node-1")
    pool = {"pool": "sandbox"}
    k8s.fake.add_node("a", "2", "4Gi", labels=pool)
    k8s.fake.add_node("b", "1500m", "2097152Ki", labels=pool,     # tolerated taint
                      taints=[{"key": "orchard", "value": "yes", "effect": "NoSchedule"}])
    k8s.fake.add_node("tainted", "64", "256Gi", labels=pool,
                      taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    k8s.fake.add_node("soft", "500m", "1Gi", labels=pool,          # only a preference
                      taints=[{"key": "x", "effect": "PreferNoSchedule"}])
    k8s.fake.add_node("cordoned", "64", "256Gi", labels=pool, unschedulable=True)
    k8s.fake.add_node("notready", "64", "256Gi", labels=pool, ready=False)
    k8s.fake.add_node("elsewhere", "64", "256Gi", labels={"pool": "other"})
    k8s.start(ORCHARD_K8S_NODE_SELECTOR='{"pool": "sandbox"}',
              ORCHARD_K8S_TOLERATIONS='[{"key": "orchard", "operator": "Equal", "value": "yes",'
                                      ' "effect": "NoSchedule"}]',
              ORCHARD_K8S_NODES_REFRESH_S="1", ORCHARD_CPU_OVERCOMMIT="1",
              ORCHARD_CAPACITY_MEMORY_RESERVE="0")
    want = (3, 4000, 7 * gi, 2000, 4 * gi)
    wait_for(lambda: capacity_row(k8s) == want, timeout=30, what="capacity %r" % (want,))
    lists = k8s.fake.requests_matching("GET", "/api/v1/nodes$")
    assert lists and all(r["query"].get("labelSelector") == "pool=sandbox" for r in lists), lists

    # Larger than the largest usable node: fails at once, no pod.
    big, _ = k8s.insert(cpu_millis=2500, memory_bytes=256 << 20)
    row = k8s.wait_state(big, "failed")
    assert "larger than any node" in row["message"], row
    assert k8s.pod(big) is None
    # 3 x 1500m on 4000m: two run, the third waits for capacity without a pod.
    first = [ready_sandbox(k8s, cpu_millis=1500, memory_bytes=256 << 20)[0] for _ in range(2)]
    third, _ = k8s.insert(cpu_millis=1500, memory_bytes=256 << 20, timeout=120)
    wait_for(lambda: queue(k8s, third)[2] == "1", what="queue position")
    state, admitted, _, reason, _ = queue(k8s, third)
    assert state == "pending" and admitted == "f" and "waiting for capacity" in reason
    time.sleep(1.5)                       # a few sweeps: still no pod for it
    assert k8s.pod(third) is None and queue(k8s, third)[1] == "f"
    # One is deleted: the third is admitted and comes up.
    k8s.delete(first[0])
    k8s.wait_state(third, "ready", timeout=60)
    # A new node is picked up by the next listing.
    k8s.fake.add_node("c", "4", "8Gi", labels=pool)
    want = (4, 8000, 15 * gi, 4000, 8 * gi)
    wait_for(lambda: capacity_row(k8s) == want, timeout=30, what="capacity %r" % (want,))
    k8s.assert_no_invalid_requests()


def test_until_the_nodes_can_be_listed_admission_is_left_to_the_scheduler(k8s):
    # As with a role that may not list nodes: 403 until it is fixed.
    k8s.fake.fault(403, method="GET", path="/api/v1/nodes$", count=None,
                   message='nodes is forbidden: User "system:serviceaccount:orchard:orchard-'
                           'controller" cannot list resource "nodes" in API group ""')
    k8s.pg.sql("DELETE FROM driver_capacity WHERE driver = 'kubernetes'")
    c = k8s.start(ORCHARD_K8S_NODES_REFRESH_S="1", ORCHARD_CPU_OVERCOMMIT="1")
    big, _ = k8s.insert(cpu_millis=100000, timeout=120)    # more than fake-node-1's 64
    wait_for(lambda: "listing nodes failed" in c.log() and "cannot list" in c.log(),
             what="the failure logged")
    k8s.wait_state(big, "ready", timeout=60)    # admitted: the scheduler decides
    assert capacity_row(k8s) is None and c.proc.poll() is None
    k8s.fake.clear_faults()
    wait_for(lambda: capacity_row(k8s) == (1, 64000, 255 << 30, 64000, 255 << 30), timeout=30,
             what="capacity once listed")
    too_big, _ = k8s.insert(cpu_millis=100000)
    assert "larger than any node" in k8s.wait_state(too_big, "failed")["message"]


def test_container_exit_after_ready_fails_the_row(k8s):
    k8s.start()
    sid, _, _ = ready_sandbox(k8s)
    k8s.fake.terminate(NS, "sb-" + sid, exit_code=137, reason="OOMKilled")
    row = k8s.wait_state(sid, "failed")
    assert row["message"] == "sandbox process exited: container exited with code 137 (OOMKilled)"
    wait_for(lambda: k8s.pod(sid) is None, what="pod removed")


def test_pod_that_vanishes_fails_the_row(k8s):
    k8s.start()
    sid, _, _ = ready_sandbox(k8s)
    k8s.fake.api.delete("pods", NS, "sb-" + sid, None, {"gracePeriodSeconds": "0"})
    row = k8s.wait_state(sid, "failed")
    assert row["message"] in ("sandbox process exited: the pod is gone",
                              "sandbox process exited: the pod is being deleted"), row


def test_invalid_pod_is_not_retried_and_fails_the_row(k8s):
    # A node selector value the API server rejects: 422, a permanent error.
    k8s.start(ORCHARD_K8S_NODE_SELECTOR='{"pool": "not valid!"}')
    sid, _ = k8s.insert()
    row = k8s.wait_state(sid, "failed")
    assert "is invalid" in row["message"] and "nodeSelector" in row["message"], row
    assert [p["code"] for p in k8s.posts("pods")] == [422]
    # The secret created before the pod was cleaned up.
    wait_for(lambda: k8s.fake.get("secrets", NS, "sb-%s-token" % sid) is None,
             what="secret removed")


# ---- the API server misbehaves -------------------------------------------------------------


def test_429_with_retry_after_is_honoured(k8s):
    k8s.start()
    k8s.fake.fault(429, method="POST", path="/pods$", count=2, retry_after=1)
    sid, _, _ = ready_sandbox(k8s)
    posts = k8s.posts("pods")
    assert [p["code"] for p in posts] == [429, 429, 201]
    gaps = [b["time"] - a["time"] for a, b in zip(posts, posts[1:])]
    assert all(g >= 0.95 for g in gaps), gaps
    k8s.assert_no_invalid_requests()


def test_5xx_and_dropped_connections_are_retried(k8s):
    k8s.start()
    k8s.fake.fault(503, method="POST", path="/secrets$", count=2)
    k8s.fake.fault(drop=True, method="POST", path="/pods$", count=1)
    sid, _, _ = ready_sandbox(k8s)
    assert [p["code"] for p in k8s.posts("secrets")] == [503, 503, 201]
    assert [p["code"] for p in k8s.posts("pods")][-1] == 201
    assert len(k8s.posts("pods")) == 2


def test_rotated_token_is_reread(k8s):
    k8s.start()
    ready_sandbox(k8s)
    k8s.fake.token = "rotated-token"
    k8s.write_token("rotated-token")
    sid, _, _ = ready_sandbox(k8s)
    last = k8s.posts("pods")[-1]
    assert last["authorization"] == "Bearer rotated-token" and last["code"] == 201


def test_watch_410_relists_and_continues(k8s):
    k8s.start()
    first, _, _ = ready_sandbox(k8s)

    def watches():
        return [r for r in k8s.fake.requests_matching("GET", "/pods$")
                if r["query"].get("watch") == "1"]
    n = len(watches())
    old_rv = int(watches()[-1]["query"]["resourceVersion"])
    with k8s.fake.store.lock:   # atomically, so no bookmark slips in between:
        # a write we do not watch moves the resourceVersion past ours, and
        # the compaction makes every older version too old
        k8s.fake.create("secrets", NS, {"metadata": {"name": "unrelated"}, "type": "Opaque"})
        k8s.fake.compact()
        compacted_at = k8s.fake.resource_version
        k8s.fake.drop_watches()     # the reconnect asks for an old one and gets 410
    wait_for(lambda: "watch expired (410)" in k8s.ctl.log(), what="410 seen")
    # Then a LIST, and the next watch starts from the LIST's (new) version.
    wait_for(lambda: [w for w in watches()[n:]
                      if int(w["query"]["resourceVersion"]) >= compacted_at],
             what="a watch from a re-listed resourceVersion")
    assert old_rv < compacted_at
    # The table is live again: a new sandbox becomes ready, and a pod change
    # of the first is seen.
    ready_sandbox(k8s)
    k8s.fake.terminate(NS, "sb-" + first, exit_code=1)
    k8s.wait_state(first, "failed")


def test_dropped_watch_reconnects_from_its_resource_version(k8s):
    k8s.start()
    sid, _, _ = ready_sandbox(k8s)
    watches = lambda: [r for r in k8s.fake.requests_matching("GET", "/pods$")  # noqa: E731
                       if r["query"].get("watch") == "1"]
    n = len(watches())
    k8s.fake.drop_watches()
    wait_for(lambda: len(watches()) > n, what="watch reconnect")
    again = watches()[-1]["query"]
    assert again["resourceVersion"] not in ("", "0")
    assert again["allowWatchBookmarks"] == "true"
    assert again["labelSelector"] == SELECTOR
    k8s.fake.terminate(NS, "sb-" + sid, exit_code=3)
    k8s.wait_state(sid, "failed")


# ---- restarts, adoption, orphans ------------------------------------------------------------


def test_restart_adopts_an_existing_pod_through_409(k8s):
    c = k8s.start()
    sid, token, row = ready_sandbox(k8s)
    uid = k8s.pod(sid)["metadata"]["uid"]
    c.stop()
    # As if the controller had died after creating the pod but before
    # recording it on the row.
    k8s.pg.sql("UPDATE sandboxes SET state = 'pending', driver_handle = NULL,"
               " agent_address = NULL, ready_at = NULL WHERE id = '%s'" % sid)
    k8s.start()
    row = k8s.wait_state(sid, "ready")
    assert k8s.pod(sid)["metadata"]["uid"] == uid, "the pod was replaced, not adopted"
    assert [p["code"] for p in k8s.posts("pods")] == [201, 409]
    assert row["handle"].endswith("/" + uid)
    assert agent_call(row["address"], token, "GET", "/health")[0] == 200
    assert "adopted an existing object" in k8s.ctl.log()


def test_a_foreign_pod_of_the_same_name_is_not_adopted(k8s):
    k8s.start()
    sid = "k-foreign-" + uuid.uuid4().hex[:6]
    k8s.fake.pod_rule("Stay", name="sb-" + sid)
    k8s.fake.create("pods", NS, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "sb-" + sid, "labels": {"app": "someone-else"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}})
    k8s.insert(sid=sid)
    row = k8s.wait_state(sid, "failed")
    assert "already exists and is not this sandbox's" in row["message"], row
    assert k8s.pod(sid)["metadata"]["labels"] == {"app": "someone-else"}  # left alone


def test_ready_rows_survive_a_restart_untouched(k8s):
    c = k8s.start()
    sid, token, row = ready_sandbox(k8s)
    c.stop()
    k8s.start()
    time.sleep(1.5)    # several sweeps
    assert k8s.row(sid)["state"] == "ready"
    assert len(k8s.fake.requests_matching("DELETE")) == 0
    assert agent_call(row["address"], token, "GET", "/health")[0] == 200


def test_pending_row_with_a_handle_is_adopted_after_restart(k8s):
    c = k8s.start()
    sid, token, row = ready_sandbox(k8s)
    c.stop()
    # Launched and recorded, but not yet ready when the controller died.
    k8s.pg.sql("UPDATE sandboxes SET state = 'pending', ready_at = NULL,"
               " agent_address = 'unix:/nonexistent' WHERE id = '%s'" % sid)
    k8s.start()
    row2 = k8s.wait_state(sid, "ready")
    assert row2["address"] == row["address"]
    assert [p["code"] for p in k8s.posts("pods")] == [201]


def test_orphan_pods_are_deleted_but_never_after_a_failed_list(k8s):
    k8s.start()
    sid, _, _ = ready_sandbox(k8s)
    orphan = "k-orphan-" + uuid.uuid4().hex[:6]
    k8s.fake.pod_rule("Stay", name="sb-" + orphan)
    # Every LIST fails from now on (watch reconnects included).
    k8s.fake.fault(500, method="GET", path="/pods$", count=None)
    k8s.fake.create("pods", NS, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "sb-" + orphan, "labels": {
            "app.kubernetes.io/managed-by": "orchard-controller", "orchard.dev/sandbox": orphan}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}})
    wait_for(lambda: k8s.ctl.log().count("no orphan cleanup") >= 2, timeout=20,
             what="failed orphan sweeps")
    assert k8s.pod(orphan) is not None, "deleted although listing failed"
    assert k8s.row(sid)["state"] == "ready"
    k8s.fake.clear_faults()
    wait_for(lambda: k8s.pod(orphan) is None, what="orphan removed")
    assert k8s.pod(sid) is not None and k8s.row(sid)["state"] == "ready"


def test_sigterm_stops_the_controller_promptly(k8s):
    c = k8s.start()
    ready_sandbox(k8s)
    t0 = time.monotonic()
    assert c.stop(signal.SIGTERM) == 0
    assert time.monotonic() - t0 < 5


# ---- in-cluster access ------------------------------------------------------------------------


def in_cluster_env(k, ca):
    env = k.env(KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(FAKE_PORT),
                ORCHARD_K8S_CA_FILE=ca)
    del env["ORCHARD_K8S_API_URL"]
    return env


def test_in_cluster_https_with_the_cluster_ca(k8s_tls):
    k = k8s_tls
    c = Controller(in_cluster_env(k, k.ca), os.path.join(k.base, "controller0.log"))
    k.ctls.append(c)
    assert '"api":"https://127.0.0.1:%d"' % FAKE_PORT in wait_for(
        lambda: "holding the controller lock" in c.log() and c.log(), what="leadership")
    sid, token, row = ready_sandbox(k)
    assert agent_call(row["address"], token, "GET", "/health")[0] == 200
    assert k.posts("pods")[-1]["authorization"] == "Bearer " + API_TOKEN


def test_in_cluster_refuses_a_server_the_ca_does_not_vouch_for(k8s_tls):
    k = k8s_tls
    other = os.path.join(k.base, "other-ca.crt")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", os.path.join(k.base, "other.key"), "-out", other,
                    "-subj", "/CN=other"], check=True, capture_output=True)
    c = Controller(in_cluster_env(k, other), os.path.join(k.base, "controller0.log"))
    k.ctls.append(c)
    wait_for(lambda: "holding the controller lock" in c.log(), what="leadership")
    sid, _ = k.insert(timeout=30)
    wait_for(lambda: "unavailable" in (k.row(sid)["message"] or ""), timeout=30,
             what="create failing")
    assert k.row(sid)["state"] == "failed"
    assert "certificate" in c.log()
    assert k.fake.requests_matching() == []       # no request got through TLS


# ---- the whole stack against the fake: HTTPS -> nginx -> api -> a pod's agent ----------------
#
# scripts/stack.sh (the production script) with ORCHARD_DRIVER=kubernetes and
# the ORCHARD_K8S_* settings in its environment, which it passes on to
# orchard-api and orchard-controller: rows get driver 'kubernetes', the
# controller creates pods in the fake, whose kubelet runs each pod's agent on
# 127.X.Y.N; exec and files go through nginx and the api to that address,
# the PTY WebSocket through nginx straight to it.

class K8sStack:
    def __init__(self, private_tmp=False, extra_env=None):
        from stack import Stack, free_port as stack_free_port
        self.base = tempfile.mkdtemp(prefix="k8sd-stack-", dir="/tmp")
        self.token_file = os.path.join(self.base, "api-token")
        with open(self.token_file, "w") as f:
            f.write(API_TOKEN + "\n")
        self.runner = LocalRunner({"orchard-agent": AGENT}, workdir=os.path.join(self.base, "pods"),
                                  private_tmp=private_tmp)
        self.fake = FakeApiServer(port=stack_free_port(), token=API_TOKEN, namespaces=(NS,),
                                  ready_delay=0.1, delete_delay=0.3, bookmark_interval=0.5,
                                  runner=self.runner, pod_ip_prefix=POD_NET)
        self.fake.start()
        env = {
            "ORCHARD_DRIVER": "kubernetes",
            "ORCHARD_K8S_API_URL": self.fake.url,
            "ORCHARD_K8S_TOKEN_FILE": self.token_file,
            "ORCHARD_K8S_NAMESPACE": NS,
            "ORCHARD_K8S_AGENT_IMAGE": "orchard/agent:test",
            "ORCHARD_K8S_AGENT_PORT": str(AGENT_PORT),
            "ORCHARD_K8S_SERVICE_ACCOUNT": "orchard-sandbox",
        }
        env.update(extra_env or {})

        class S(Stack):
            def _script(self, cmd, timeout):
                return subprocess.run(
                    [os.path.join(ROOT, "scripts", "stack.sh"), cmd, self.var],
                    env=dict(os.environ, ORCHARD_PORT=str(self.port), **env),
                    stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
        self.stack = S()

    def workspace(self, sid):
        """Where the pod's /workspace emptyDir is on this machine."""
        return os.path.join(self.runner.workdir, "%s_sb-%s" % (NS, sid), "vol-workspace")

    def controller_pid(self):
        with open(os.path.join(self.stack.var, "run", "controller.pid")) as f:
            return int(f.readline().split()[0])

    def close(self):
        try:
            self.stack.down()
        finally:
            self.fake.stop()
            self.stack.remove()
            self.runner.cleanup()
            shutil.rmtree(self.base, ignore_errors=True)


@contextlib.contextmanager
def running_k8s_stack(**kw):
    """A K8sStack (kw: its options) that is up, taken down at the end."""
    k = K8sStack(**kw)
    try:
        k.stack.up()
    except Exception:
        k.close()
        raise
    try:
        yield k
    finally:
        k.close()


@pytest.fixture(scope="module")
def kstack():
    with running_k8s_stack() as k:
        yield k


def api_exec(s, admin, sid, cmd):
    r = admin.post("%s/v1/sandboxes/%s/exec" % (s.url, sid), json={"command": cmd, "wait": True})
    assert r.status_code == 200, r.text
    return r.json()


def test_whole_stack_exec_files_pty_delete_through_a_pod(kstack):
    import ws_client
    from test_pty_stack import pty_path, run_shell
    s, fake = kstack.stack, kstack.fake
    admin = s.session()
    r = admin.post(s.url + "/v1/sandboxes", json={"image": "python:3.11-slim"})
    assert r.status_code in (200, 201), r.text
    sid = r.json()["sandbox_id"]
    s.wait_ready(admin, sid)
    assert s.scalar("SELECT driver FROM sandboxes WHERE id = '%s'" % sid) == "kubernetes"
    pod = fake.get("pods", NS, "sb-" + sid)
    addr = s.scalar("SELECT agent_address FROM sandboxes WHERE id = '%s'" % sid)
    assert addr == "http://%s:%d" % (pod["status"]["podIP"], AGENT_PORT)

    # exec through nginx and the api, run by the pod's agent
    out = api_exec(s, admin, sid, "echo from-the-pod $((6*7))")
    assert out["exit_code"] == 0 and out["stdout"] == "from-the-pod 42\n", out

    # files: Orchard's base64 routes and a raw stream, in the pod's workspace
    ws = kstack.workspace(sid)
    path = os.path.join(ws, "hello.txt")
    r = admin.post("%s/sandboxes/%s/files" % (s.url, sid),
                   json={"path": path, "content": base64.b64encode(b"hi pod\n").decode()})
    assert r.status_code == 200, r.text
    with open(path, "rb") as f:
        assert f.read() == b"hi pod\n"
    r = admin.get("%s/sandboxes/%s/files" % (s.url, sid), params={"path": path})
    assert r.status_code == 200 and base64.b64decode(r.json()["content"]) == b"hi pod\n", r.text
    blob = os.urandom(300000)
    r = admin.put("%s/v1/sandboxes/%s/files/raw" % (s.url, sid), params={"path": path + ".bin"},
                  data=blob)
    assert r.status_code in (200, 201), r.text
    r = admin.get("%s/v1/sandboxes/%s/files/raw" % (s.url, sid), params={"path": path + ".bin"})
    assert r.status_code == 200 and r.content == blob

    # the PTY WebSocket: nginx proxies it straight to the pod's agent address
    w = ws_client.tls(s, pty_path(sid, "?api_key=" + s.admin_key))
    try:
        assert w.status == 101, (w.status, w.buf)
        text, code, _ = run_shell(w)
    finally:
        w.close()
    assert "hi" in text and code == 3, (text, code)

    # delete: the pod, its Secret go; the row is deleted
    assert admin.delete("%s/v1/sandboxes/%s" % (s.url, sid)).status_code in (200, 202, 204)
    s.wait_for(lambda: s.scalar("SELECT state FROM sandboxes WHERE id = '%s'" % sid) == "deleted",
               what="row deleted")
    s.wait_for(lambda: fake.get("pods", NS, "sb-" + sid) is None, what="pod removed")
    assert fake.get("secrets", NS, "sb-%s-token" % sid) is None
    bad = [(q["method"], q["path"], q["code"]) for q in fake.requests_matching()
           if q["code"] in (400, 415, 422)]
    assert not bad, bad


def test_whole_stack_survives_a_controller_restart_and_a_lost_watch(kstack):
    s, fake = kstack.stack, kstack.fake
    admin = s.session()
    r = admin.post(s.url + "/v1/sandboxes", json={"image": "python:3.11-slim"})
    assert r.status_code in (200, 201), r.text
    sid = r.json()["sandbox_id"]
    s.wait_ready(admin, sid)
    uid = fake.get("pods", NS, "sb-" + sid)["metadata"]["uid"]

    # The controller stops; the sandbox keeps serving (the api reaches the
    # pod directly), and a sandbox asked for meanwhile waits for the next one.
    pid = kstack.controller_pid()
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not os.path.exists("/proc/%d" % pid), timeout=15, what="controller gone")
    assert api_exec(s, admin, sid, "echo still-here")["stdout"] == "still-here\n"
    r = admin.post(s.url + "/v1/sandboxes", json={"image": "python:3.11-slim"})
    assert r.status_code in (200, 201), r.text
    later = r.json()["sandbox_id"]
    assert s.scalar("SELECT state FROM sandboxes WHERE id = '%s'" % later) == "pending"
    s.up()    # starts only what is not running: a new controller
    assert kstack.controller_pid() != pid
    s.wait_ready(admin, later)
    assert api_exec(s, admin, later, "echo new")["stdout"] == "new\n"
    assert fake.get("pods", NS, "sb-" + sid)["metadata"]["uid"] == uid   # adopted, not replaced
    assert s.scalar("SELECT state FROM sandboxes WHERE id = '%s'" % sid) == "ready"

    # The watch breaks; a pod that dies meanwhile is still noticed (the
    # watch resumes from its resourceVersion), and the api reports it.
    fake.drop_watches()
    fake.terminate(NS, "sb-" + sid, exit_code=137, reason="OOMKilled")
    s.wait_for(lambda: s.scalar("SELECT state FROM sandboxes WHERE id = '%s'" % sid) == "failed",
               what="row failed")
    r = admin.get("%s/v1/sandboxes/%s" % (s.url, sid))
    assert r.status_code == 200, r.text
    assert "OOMKilled" in json.dumps(r.json()), r.json()
    s.wait_for(lambda: fake.get("pods", NS, "sb-" + sid) is None, what="failed pod removed")
    admin.delete("%s/v1/sandboxes/%s" % (s.url, later))


def test_whole_stack_image_host_is_422_under_kubernetes(kstack):
    # "host" (orchardctl's default) is the local driver's; as a container
    # image it would end in ErrImagePull. One sandbox or a batch: 422, no row.
    s = kstack.stack
    admin = s.session()
    n, posts = s.scalar("SELECT count(*) FROM sandboxes"), len(kstack.fake.requests_matching("POST"))
    r = admin.post(s.url + "/v1/sandboxes", json={"image": "host"})
    assert r.status_code == 422 and "kubernetes" in r.json()["detail"], r.text
    r = admin.post(s.url + "/v1/sandboxes/batch", json={"count": 2, "image": "host"})
    assert r.status_code == 422 and "kubernetes" in r.text, r.text
    assert s.scalar("SELECT count(*) FROM sandboxes") == n
    assert len(kstack.fake.requests_matching("POST")) == posts


def test_whole_stack_a_size_no_node_can_hold_is_422(kstack):
    # fake-node-1: 64 cpus, 256Gi allocatable; less the 1Gi reserve, memory
    # not overcommitted: 255Gi is the most one sandbox may ask for.
    s = kstack.stack
    admin = s.session()
    wait_for(lambda: (admin.get(s.url + "/v1/resources").json().get("admission") or {})
             .get("largest_node", {}).get("memory_bytes") == 255 << 30, timeout=30,
             what="the kubernetes capacity in /v1/resources")
    n = s.scalar("SELECT count(*) FROM sandboxes")
    r = admin.post(s.url + "/v1/sandboxes", json={"image": "python:3.11-slim", "memory": "300Gi"})
    assert r.status_code == 422 and "larger than any node" in r.text, r.text
    assert s.scalar("SELECT count(*) FROM sandboxes") == n
