"""k8s/ renders, and every object in it is valid and says what we promise.

Every rendered object is checked strictly against python3-kubernetes' models
(unknown fields, types, required fields) plus the API server's semantic
rules (k8s_validate.py), then for Orchard's own guarantees: least-privilege
RBAC, the sandbox namespace's default-deny policy, replicas, probes,
resources and security contexts, and references between objects.
"""

import glob
import os
import shutil
import subprocess

import pytest
import yaml

import k8s_validate
import kustomize_lite
from conftest import NS

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
K8S = os.path.join(REPO, "k8s")
TARGETS = ["base", "overlays/dev", "overlays/prod"]
KUBECTL = shutil.which("kubectl")


def render(target):
    return kustomize_lite.build(os.path.join(K8S, target))


def by_kind(objs, kind):
    return [o for o in objs if o["kind"] == kind]


def one(objs, kind, name):
    (o,) = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return o


def pod_specs(objs):
    for o in objs:
        if o["kind"] in ("Deployment", "StatefulSet", "Job"):
            yield o, o["spec"]["template"]["spec"]


# ---- every file parses; every rendering validates -------------------------

def test_every_yaml_file_parses():
    files = glob.glob(os.path.join(K8S, "**", "*.yaml"), recursive=True)
    assert len(files) >= 10
    for f in files:
        docs = kustomize_lite.load_yaml_docs(f)
        assert docs, f
        for d in docs:
            assert isinstance(d, dict) and d.get("kind"), f


@pytest.mark.parametrize("target", TARGETS)
def test_every_object_validates_strictly(target):
    objs = render(target)
    assert len(objs) >= 15
    for o in objs:
        causes = k8s_validate.validate_object(o)
        assert causes == [], "%s %s: %s" % (o["kind"], o["metadata"]["name"], causes)


def test_validator_rejects_what_it_should():
    """The manifest check can fail: a typo'd field, a bad quantity, a wrong type."""
    dep = one(render("base"), "Deployment", "orchard-api")
    dep["spec"]["template"]["spec"]["containers"][0]["resource"] = {}
    assert [c["field"] for c in k8s_validate.validate_object(dep)] == [
        "spec.template.spec.containers[0].resource"]
    dep = one(render("base"), "Deployment", "orchard-api")
    dep["spec"]["template"]["spec"]["containers"][1]["resources"]["limits"]["memory"] = "1GB"
    assert k8s_validate.validate_object(dep)
    dep = one(render("base"), "Deployment", "orchard-api")
    dep["spec"]["replicas"] = "2"
    assert k8s_validate.validate_object(dep)
    dep = one(render("base"), "Deployment", "orchard-api")
    dep["spec"]["template"]["metadata"]["labels"] = {"app.kubernetes.io/name": "other"}
    assert k8s_validate.validate_object(dep)


@pytest.mark.skipif(KUBECTL is None, reason="kubectl (with kustomize) is not installed")
@pytest.mark.parametrize("target", TARGETS)
def test_kubectl_kustomize_renders_the_same(target):
    out = subprocess.run([KUBECTL, "kustomize", os.path.join(K8S, target)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    theirs = [d for d in yaml.safe_load_all(out.stdout) if d]
    ours = render(target)
    key = kustomize_lite.object_id
    assert sorted(map(key, theirs), key=str) == sorted(map(key, ours), key=str)
    ours_by_id = {key(o): o for o in ours}
    for o in theirs:
        assert o == ours_by_id[key(o)], key(o)


# ---- Orchard's promises ------------------------------------------------------

def test_rbac_is_least_privilege():
    objs = render("base")
    # Cluster-wide: only reading nodes (the kubernetes driver's capacity).
    (crole,) = by_kind(objs, "ClusterRole")
    assert crole["rules"] == [{"apiGroups": [""], "resources": ["nodes"],
                               "verbs": ["get", "list"]}]
    (crb,) = by_kind(objs, "ClusterRoleBinding")
    assert crb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                              "name": crole["metadata"]["name"]}
    assert crb["subjects"] == [{"kind": "ServiceAccount", "name": "orchard-controller",
                                "namespace": "orchard"}]
    (role,) = by_kind(objs, "Role")
    assert role["metadata"]["namespace"] == NS
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    assert resources <= {"pods", "pods/status", "networkpolicies", "secrets"}
    assert "pods/exec" not in resources and "*" not in resources
    assert all("*" not in rule["verbs"] for rule in role["rules"])
    (rb,) = by_kind(objs, "RoleBinding")
    assert rb["metadata"]["namespace"] == NS and rb["roleRef"]["kind"] == "Role"
    assert rb["subjects"] == [{"kind": "ServiceAccount", "name": "orchard-controller",
                               "namespace": "orchard"}]


def test_only_the_controller_gets_a_service_account_token():
    objs = render("base")
    for o, spec in pod_specs(objs):
        mounted = spec.get("automountServiceAccountToken")
        if o["metadata"]["name"] == "orchard-controller":
            assert spec["serviceAccountName"] == "orchard-controller" and mounted is True
        else:
            assert mounted is False, o["metadata"]["name"]


def test_sandbox_namespace_default_deny():
    pol = one(render("base"), "NetworkPolicy", "orchard-sandbox-default-deny")
    assert pol["metadata"]["namespace"] == NS
    spec = pol["spec"]
    assert spec["podSelector"] == {} and set(spec["policyTypes"]) == {"Ingress", "Egress"}
    assert spec["egress"] == []
    (rule,) = spec["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 7070}]
    (peer,) = rule["from"]
    assert peer["podSelector"] == {"matchExpressions": [{
        "key": "app.kubernetes.io/name", "operator": "In",
        "values": ["orchard-api", "orchard-controller"]}]}
    assert peer["namespaceSelector"] == {"matchLabels": {
        "kubernetes.io/metadata.name": "orchard"}}
    cfg = one(render("base"), "ConfigMap", "orchard-config")["data"]
    assert cfg["ORCHARD_K8S_AGENT_PORT"] == "7070" and cfg["ORCHARD_K8S_NAMESPACE"] == NS


def selector_matches(sel, labels):
    """A LabelSelector (matchLabels + matchExpressions In/NotIn/Exists/
    DoesNotExist) against a label map."""
    for k, v in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in sel.get("matchExpressions") or []:
        op, k = e["operator"], e["key"]
        if op == "In" and labels.get(k) not in e["values"]:
            return False
        if op == "NotIn" and labels.get(k) in e["values"]:
            return False
        if op == "Exists" and k not in labels:
            return False
        if op == "DoesNotExist" and k in labels:
            return False
    return True


@pytest.mark.parametrize("target", ["base", "overlays/dev", "overlays/prod"])
def test_api_and_controller_pods_reach_sandbox_agents_and_nothing_else_does(target):
    """The api calls agents for exec/files/PTY, the controller for /health
    before a sandbox is ready: both must match the sandbox ingress rule."""
    objs = render(target)
    (peer,) = one(objs, "NetworkPolicy", "orchard-sandbox-default-deny")["spec"]["ingress"][0]["from"]
    for name in ("orchard-api", "orchard-controller"):
        dep = one(objs, "Deployment", name)
        assert dep["metadata"]["namespace"] == "orchard"
        assert selector_matches(peer["podSelector"], dep["spec"]["template"]["metadata"]["labels"])
    for o in objs:
        if o["kind"] in ("StatefulSet", "Job"):
            labels = o["spec"]["template"]["metadata"]["labels"]
            assert not selector_matches(peer["podSelector"], labels), o["metadata"]["name"]


@pytest.mark.parametrize("target,api_replicas", [("base", 2), ("overlays/prod", 3)])
def test_replicas(target, api_replicas):
    objs = render(target)
    assert one(objs, "Deployment", "orchard-api")["spec"]["replicas"] == api_replicas
    assert one(objs, "Deployment", "orchard-controller")["spec"]["replicas"] == 2


def test_containers_have_resources_probes_and_security_context():
    objs = render("base")
    for o, spec in pod_specs(objs):
        sc = spec.get("securityContext") or {}
        assert sc.get("seccompProfile") == {"type": "RuntimeDefault"}, o["metadata"]["name"]
        assert sc.get("runAsNonRoot") is True
        for c in spec["containers"]:
            where = "%s/%s" % (o["metadata"]["name"], c["name"])
            assert c["resources"]["limits"].keys() >= {"cpu", "memory"}, where
            assert c["resources"]["requests"].keys() >= {"cpu", "memory"}, where
            csc = c["securityContext"]
            assert csc["allowPrivilegeEscalation"] is False, where
            assert csc["capabilities"] == {"drop": ["ALL"]}, where
            if o["kind"] == "Deployment":
                assert csc.get("readOnlyRootFilesystem") is True, where
            if o["metadata"]["name"] in ("orchard-api", "orchard-postgres"):
                assert c.get("livenessProbe") or c.get("readinessProbe"), where


def test_pdbs_select_deployments():
    objs = render("base")
    deps = {d["metadata"]["name"]: d for d in by_kind(objs, "Deployment")}
    pdbs = by_kind(objs, "PodDisruptionBudget")
    assert {p["metadata"]["name"] for p in pdbs} == {"orchard-api", "orchard-controller"}
    for p in pdbs:
        labels = deps[p["metadata"]["name"]]["spec"]["template"]["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in p["spec"]["selector"]["matchLabels"].items())


def test_services_select_pods_and_name_their_ports():
    objs = render("base")
    workloads = by_kind(objs, "Deployment") + by_kind(objs, "StatefulSet")
    for svc in by_kind(objs, "Service"):
        sel = svc["spec"]["selector"]
        (w,) = [w for w in workloads if all(
            w["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in sel.items())]
        ports = {p["name"] for c in w["spec"]["template"]["spec"]["containers"]
                 for p in c.get("ports") or []}
        for p in svc["spec"]["ports"]:
            assert p["targetPort"] in ports, svc["metadata"]["name"]


@pytest.mark.parametrize("target", ["overlays/dev", "overlays/prod"])
def test_references_resolve(target):
    """ConfigMaps, ServiceAccounts and (in dev) Secrets that pods use exist."""
    objs = render(target)
    names = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objs}
    for o, spec in pod_specs(objs):
        ns = o["metadata"]["namespace"]
        assert ("ServiceAccount", ns, spec["serviceAccountName"]) in names
        refs = []
        for c in spec["containers"] + (spec.get("initContainers") or []):
            for e in c.get("envFrom") or []:
                refs.append(("ConfigMap", e["configMapRef"]["name"]))
            for e in c.get("env") or []:
                vf = e.get("valueFrom") or {}
                if "configMapKeyRef" in vf:
                    refs.append(("ConfigMap", vf["configMapKeyRef"]["name"]))
                if "secretKeyRef" in vf:
                    refs.append(("Secret", vf["secretKeyRef"]["name"]))
        for v in spec.get("volumes") or []:
            if "secret" in v:
                refs.append(("Secret", v["secret"]["secretName"]))
        for kind, name in refs:
            if kind == "Secret" and target == "overlays/prod":
                continue        # created out of band in production
            assert (kind, ns, name) in names, (o["metadata"]["name"], kind, name)


def test_prod_uses_managed_postgres_and_registry_images():
    objs = render("overlays/prod")
    assert not by_kind(objs, "StatefulSet")
    assert not [s for s in by_kind(objs, "Service") if s["metadata"]["name"] == "orchard-postgres"]
    for _, spec in pod_specs(objs):
        for c in spec["containers"]:
            assert c["image"].startswith("registry.example.com/orchard/"), c["image"]
    cfg = one(objs, "ConfigMap", "orchard-config")["data"]
    assert cfg["ORCHARD_K8S_RUNTIME_CLASS"] == "gvisor"


def test_dev_overlay_has_example_secrets_and_dev_images():
    objs = render("overlays/dev")
    assert {s["metadata"]["name"] for s in by_kind(objs, "Secret")} == {
        "orchard-secrets", "orchard-tls"}
    assert one(objs, "Secret", "orchard-tls")["type"] == "kubernetes.io/tls"
    for _, spec in pod_specs(objs):
        for c in spec["containers"]:
            if c["image"].startswith("orchard/"):
                assert c["image"].endswith(":dev"), c["image"]


def _doc_block(title):
    with open(os.path.join(REPO, "docs", "kubernetes.md")) as f:
        doc = f.read()
    return yaml.safe_load(doc.split("```yaml\n# %s\n" % title, 1)[1].split("```", 1)[0])


def test_fake_apiserver_accepts_the_documented_sandbox_objects(fake_k8s):
    """The namespace's default-deny policy and the sandbox pod and egress
    policy docs/kubernetes.md gives the driver pass the fake's strict
    checks, and the pod runs."""
    pol = one(render("base"), "NetworkPolicy", "orchard-sandbox-default-deny")
    fake_k8s.create("networkpolicies", NS, pol)
    egress = fake_k8s.create("networkpolicies", NS, _doc_block("per-sandbox egress policy"))
    assert egress["metadata"]["name"] == "sb-0123456789abcdef-egress"
    fake_k8s.create("secrets", NS, {"apiVersion": "v1", "kind": "Secret",
                                    "metadata": {"name": "sb-0123456789abcdef-token"},
                                    "stringData": {"token": "t"}})
    pod = fake_k8s.create("pods", NS, _doc_block("sandbox pod"))
    assert pod["metadata"]["labels"]["orchard.dev/sandbox"] == "0123456789abcdef"
    fake_k8s.wait_pod_phase(NS, "sb-0123456789abcdef", "Running")


@pytest.mark.parametrize("target", ["base", "overlays/dev", "overlays/prod"])
def test_agent_image_moves_with_the_controller_image(target):
    """The agent image is no container of a Deployment (kustomize's images:
    does not reach it): the ConfigMap names it, and it must come from the
    same registry and release as the controller that injects it."""
    objs = render(target)
    ctl = one(objs, "Deployment", "orchard-controller")
    (image,) = {c["image"] for c in ctl["spec"]["template"]["spec"]["containers"]}
    agent = one(objs, "ConfigMap", "orchard-config")["data"]["ORCHARD_K8S_AGENT_IMAGE"]
    assert "/controller" in image, image
    assert agent == image.replace("/controller", "/agent", 1), (agent, image)


@pytest.mark.parametrize("target", TARGETS)
def test_sandbox_pods_get_the_tools_image_of_the_controllers_release(target):
    """Issue 28: every rendering gives the kubernetes driver the sandbox-tools
    image (ORCHARD_K8S_TOOLS_IMAGE, docker/Dockerfile.tools) from the
    controller's registry and release, like the agent image, in a mode the
    driver accepts; the driver's pod spec for it is checked against the fake
    API server with this ConfigMap's values (tests/integration/
    test_controller_k8s.py::test_the_manifests_tools_image_reaches_the_pod)."""
    objs = render(target)
    ctl = one(objs, "Deployment", "orchard-controller")
    (image,) = {c["image"] for c in ctl["spec"]["template"]["spec"]["containers"]}
    data = one(objs, "ConfigMap", "orchard-config")["data"]
    assert data["ORCHARD_K8S_TOOLS_IMAGE"] == image.replace("/controller", "/tools", 1), (data, image)
    assert data["ORCHARD_K8S_TOOLS_MODE"] in ("init", "image")
    # the controller reads it: the whole ConfigMap is its environment
    spec = ctl["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert {"configMapRef": {"name": "orchard-config"}} in c["envFrom"], c.get("envFrom")


@pytest.mark.parametrize("target", TARGETS)
def test_the_controllers_checkpoint_store_is_a_shared_claim(target):
    """Kubernetes checkpoints (docs/checkpoints.md) live in a PVC that every
    controller replica mounts at ORCHARD_K8S_CHECKPOINT_DIR; the store's cap
    stays under the claim's size."""
    objs = render(target)
    dep = one(objs, "Deployment", "orchard-controller")
    spec = dep["spec"]["template"]["spec"]
    (vol,) = [v for v in spec["volumes"] if "persistentVolumeClaim" in v]
    claim = one(objs, "PersistentVolumeClaim", vol["persistentVolumeClaim"]["claimName"])
    assert claim["metadata"]["namespace"] == dep["metadata"]["namespace"]
    if dep["spec"]["replicas"] > 1:
        assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    (c,) = spec["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == vol["name"]]
    assert env["ORCHARD_K8S_CHECKPOINT_DIR"] == mount["mountPath"]
    size = claim["spec"]["resources"]["requests"]["storage"]
    assert size.endswith("Gi") and int(env["ORCHARD_K8S_CHECKPOINT_MAX_BYTES"]) < int(size[:-2]) << 30
    assert spec["securityContext"]["fsGroup"] == spec["securityContext"]["runAsUser"]
