"""The fake Kubernetes API server behaves like a real one where a driver cares."""

import json
import os
import sys
import textwrap
import time

import pytest
import requests

from conftest import NS
from fake_apiserver import FakeApiServer
from fake_runner import LocalRunner

AUTH = {"Authorization": "Bearer test-token"}
JSON = dict(AUTH, **{"Content-Type": "application/json"})


def pods_url(fake, name=None, ns=NS):
    u = "%s/api/v1/namespaces/%s/pods" % (fake.url, ns)
    return u + "/" + name if name else u


def np_url(fake, name=None):
    u = "%s/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies" % (fake.url, NS)
    return u + "/" + name if name else u


def pod(name, image="debian:12", labels=None, **spec):
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {"app": "orchard"}},
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "main", "image": image,
                                     "resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                                                   "requests": {"cpu": "500m",
                                                                "memory": "512Mi"}}}]}}
    body["spec"].update(spec)
    return body


def create(fake, body, url=None):
    return requests.post(url or pods_url(fake), headers=JSON, data=json.dumps(body), timeout=5)


def watch(fake, url, timeout=5, **params):
    """Events of a watch until it ends, as parsed JSON lines."""
    params.setdefault("timeoutSeconds", 2)
    r = requests.get(url, headers=AUTH, params=dict(params, watch="1"), stream=True,
                     timeout=timeout)
    assert r.status_code == 200
    assert r.headers["Transfer-Encoding"] == "chunked"
    return [json.loads(line) for line in r.iter_lines() if line]


def assert_status(r, code, reason):
    assert r.status_code == code, r.text
    st = r.json()
    assert st["kind"] == "Status" and st["status"] == "Failure"
    assert st["code"] == code and st["reason"] == reason
    return st


# ---- create / get / 409 / 404 / auth ---------------------------------------

def test_create_get_and_pod_becomes_running_and_ready(fake_k8s):
    r = create(fake_k8s, pod("sb-1"))
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["metadata"]["namespace"] == NS and created["metadata"]["uid"]
    assert created["status"]["phase"] == "Pending"
    assert created["status"]["qosClass"] == "Burstable"
    rv1 = int(created["metadata"]["resourceVersion"])
    got = requests.get(pods_url(fake_k8s, "sb-1"), headers=AUTH, timeout=5).json()
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    running = fake_k8s.wait_pod_phase(NS, "sb-1", "Running")
    assert running["status"]["podIP"].startswith("127.0.0.")
    assert running["status"]["podIP"] != "127.0.0.1"
    ready = fake_k8s.wait_for(lambda: next(
        (c for c in fake_k8s.get("pods", NS, "sb-1")["status"]["conditions"]
         if c["type"] == "Ready" and c["status"] == "True"), None))
    assert ready
    assert int(fake_k8s.get("pods", NS, "sb-1")["metadata"]["resourceVersion"]) > rv1


def test_create_twice_is_409_already_exists(fake_k8s):
    assert create(fake_k8s, pod("dup")).status_code == 201
    st = assert_status(create(fake_k8s, pod("dup")), 409, "AlreadyExists")
    assert st["details"] == {"name": "dup", "kind": "pods"}
    assert st["message"] == 'pods "dup" already exists'


def test_get_missing_is_404_status(fake_k8s):
    st = assert_status(requests.get(pods_url(fake_k8s, "nope"), headers=AUTH, timeout=5),
                       404, "NotFound")
    assert st["details"]["name"] == "nope" and st["message"] == 'pods "nope" not found'


def test_create_in_missing_namespace_is_404(fake_k8s):
    r = create(fake_k8s, pod("x"), url=pods_url(fake_k8s, ns="elsewhere"))
    st = assert_status(r, 404, "NotFound")
    assert st["details"]["kind"] == "namespaces"


def test_namespace_mismatch_is_400(fake_k8s):
    body = pod("x")
    body["metadata"]["namespace"] = "other"
    assert_status(create(fake_k8s, body), 400, "BadRequest")


def test_bearer_token_is_required(fake_k8s):
    r = requests.get(pods_url(fake_k8s), timeout=5)
    assert_status(r, 401, "Unauthorized")
    r = requests.get(pods_url(fake_k8s), headers={"Authorization": "Bearer wrong"}, timeout=5)
    assert_status(r, 401, "Unauthorized")
    fake_k8s.token = "rotated"          # token rotation: the old one stops working
    assert requests.get(pods_url(fake_k8s), headers=AUTH, timeout=5).status_code == 401
    r = requests.get(pods_url(fake_k8s), headers={"Authorization": "Bearer rotated"}, timeout=5)
    assert r.status_code == 200


def test_namespaces_are_readable_not_writable(fake_k8s):
    r = requests.get(fake_k8s.url + "/api/v1/namespaces/" + NS, headers=AUTH, timeout=5)
    assert r.status_code == 200 and r.json()["status"]["phase"] == "Active"
    r = requests.get(fake_k8s.url + "/api/v1/namespaces", headers=AUTH, timeout=5)
    assert [n["metadata"]["name"] for n in r.json()["items"]] == [NS]
    r = requests.post(fake_k8s.url + "/api/v1/namespaces", headers=JSON,
                      data=json.dumps({"metadata": {"name": "x"}}), timeout=5)
    assert r.status_code == 405


# ---- 422 validation ---------------------------------------------------------

def _causes(r):
    st = assert_status(r, 422, "Invalid")
    return {c["field"]: c for c in st["details"]["causes"]}, st


def test_unknown_field_is_422_with_its_path(fake_k8s):
    body = pod("u1")
    body["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    causes, st = _causes(create(fake_k8s, body))
    assert "spec.containers[0].imagePullPolicyy" in causes
    assert st["message"].startswith('Pod "u1" is invalid: ')
    assert fake_k8s.get("pods", NS, "u1") is None


def test_unknown_top_level_and_metadata_fields_are_422(fake_k8s):
    body = pod("u2")
    body["metadata"]["labelz"] = {}
    body["extra"] = 1
    causes, _ = _causes(create(fake_k8s, body))
    assert set(causes) == {"metadata.labelz", "extra"}


def test_bad_quantity_is_422(fake_k8s):
    body = pod("q1")
    body["spec"]["containers"][0]["resources"]["limits"]["memory"] = "1 GB"
    causes, _ = _causes(create(fake_k8s, body))
    assert "spec.containers[0].resources.limits[memory]" in causes


def test_request_above_limit_is_422(fake_k8s):
    body = pod("q2")
    body["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    causes, _ = _causes(create(fake_k8s, body))
    assert "spec.containers[0].resources.requests[cpu]" in causes


@pytest.mark.parametrize("name", ["Upper", "under_score", "-lead", "a" * 254, "dot..dot"])
def test_bad_names_are_422(fake_k8s, name):
    causes, _ = _causes(create(fake_k8s, pod(name)))
    assert "metadata.name" in causes


def test_missing_required_fields_are_422(fake_k8s):
    body = pod("r1")
    del body["spec"]["containers"][0]["name"]
    causes, _ = _causes(create(fake_k8s, body))
    assert causes["spec.containers[0].name"]["reason"] == "FieldValueRequired"
    body = pod("r2")
    del body["spec"]["containers"][0]["image"]
    causes, _ = _causes(create(fake_k8s, body))
    assert causes["spec.containers[0].image"]["reason"] == "FieldValueRequired"
    body = pod("r3")
    del body["metadata"]["name"]
    causes, _ = _causes(create(fake_k8s, body))
    assert "metadata.name" in causes


def test_wrong_types_are_422(fake_k8s):
    body = pod("t1", activeDeadlineSeconds="3600")
    body["spec"]["containers"][0]["ports"] = [{"containerPort": "7070"}]
    body["spec"]["automountServiceAccountToken"] = "false"
    causes, _ = _causes(create(fake_k8s, body))
    assert set(causes) == {"spec.activeDeadlineSeconds", "spec.containers[0].ports[0].containerPort",
                           "spec.automountServiceAccountToken"}


def test_bad_labels_and_enums_are_422(fake_k8s):
    body = pod("l1", labels={"orchard.dev/sandbox": "x" * 64, "bad key!": "v"},
               restartPolicy="Sometimes")
    causes, _ = _causes(create(fake_k8s, body))
    assert "metadata.labels[orchard.dev/sandbox]" in causes
    assert "metadata.labels" in causes
    assert causes["spec.restartPolicy"]["reason"] == "FieldValueNotSupported"


def test_decode_errors_can_be_400_like_a_real_server():
    with FakeApiServer(decode_error_status=400) as fake:
        body = pod("d1")
        body["spec"]["bogus"] = True
        r = requests.post(pods_url(fake), headers={"Content-Type": "application/json"},
                          data=json.dumps(body), timeout=5)
        assert_status(r, 400, "BadRequest")
        body = pod("BAD")          # semantic errors stay 422
        r = requests.post(pods_url(fake), headers={"Content-Type": "application/json"},
                          data=json.dumps(body), timeout=5)
        assert r.status_code == 422


def test_field_validation_ignore_drops_unknown_fields(fake_k8s):
    body = pod("i1")
    body["spec"]["bogus"] = True
    r = requests.post(pods_url(fake_k8s), headers=JSON, params={"fieldValidation": "Ignore"},
                      data=json.dumps(body), timeout=5)
    assert r.status_code == 201


def test_valid_orchard_like_pod_is_accepted(fake_k8s):
    body = pod("sb-full", activeDeadlineSeconds=3600, automountServiceAccountToken=False,
               runtimeClassName="gvisor", nodeSelector={"pool": "sandboxes"},
               tolerations=[{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}],
               enableServiceLinks=False,
               securityContext={"runAsNonRoot": False, "seccompProfile": {"type": "RuntimeDefault"}},
               volumes=[{"name": "orchard", "emptyDir": {"sizeLimit": "64Mi"}},
                        {"name": "token", "secret": {"secretName": "sb-full-token",
                                                     "defaultMode": 0o400}}],
               initContainers=[{"name": "agent-install", "image": "orchard/agent:1",
                                "command": ["/opt/orchard/install", "/orchard"],
                                "volumeMounts": [{"name": "orchard", "mountPath": "/orchard"}]}])
    c = body["spec"]["containers"][0]
    c.update({"command": ["/orchard/bin/orchard-agent"],
              "args": ["--listen", "tcp:0.0.0.0:7070", "--token-file", "/run/orchard/token"],
              "ports": [{"name": "agent", "containerPort": 7070, "protocol": "TCP"}],
              "readinessProbe": {"tcpSocket": {"port": "agent"}, "periodSeconds": 1},
              "securityContext": {"allowPrivilegeEscalation": False,
                                  "capabilities": {"drop": ["ALL"]}},
              "volumeMounts": [{"name": "orchard", "mountPath": "/orchard", "readOnly": True},
                               {"name": "token", "mountPath": "/run/orchard", "readOnly": True}]})
    c["resources"]["limits"]["ephemeral-storage"] = "10Gi"
    r = create(fake_k8s, body)
    assert r.status_code == 201, r.text


# ---- list and selectors ---------------------------------------------------

def _names(r):
    assert r.status_code == 200, r.text
    return sorted(i["metadata"]["name"] for i in r.json()["items"])


def test_list_with_label_and_field_selectors(fake_k8s):
    for name, labels in (("a", {"app": "orchard", "tier": "x"}),
                         ("b", {"app": "orchard", "tier": "y"}),
                         ("c", {"app": "other"})):
        assert create(fake_k8s, pod(name, labels=labels)).status_code == 201

    def ls(**params):
        return _names(requests.get(pods_url(fake_k8s), headers=AUTH, params=params, timeout=5))
    assert ls() == ["a", "b", "c"]
    assert ls(labelSelector="app=orchard") == ["a", "b"]
    assert ls(labelSelector="app==orchard,tier=y") == ["b"]
    assert ls(labelSelector="app!=orchard") == ["c"]
    assert ls(labelSelector="tier in (x, z)") == ["a"]
    assert ls(labelSelector="tier notin (x)") == ["b", "c"]
    assert ls(labelSelector="tier") == ["a", "b"]
    assert ls(labelSelector="!tier") == ["c"]
    assert ls(fieldSelector="metadata.name=b") == ["b"]
    assert ls(fieldSelector="metadata.name!=b", labelSelector="app=orchard") == ["a"]
    r = requests.get(pods_url(fake_k8s), headers=AUTH, timeout=5).json()
    assert r["kind"] == "PodList" and r["metadata"]["resourceVersion"] == str(
        fake_k8s.resource_version)
    assert "kind" not in r["items"][0]
    r = requests.get(pods_url(fake_k8s), headers=AUTH, params={"labelSelector": "a in b"},
                     timeout=5)
    assert_status(r, 400, "BadRequest")
    all_ns = requests.get(fake_k8s.url + "/api/v1/pods", headers=AUTH, timeout=5)
    assert _names(all_ns) == ["a", "b", "c"]


def test_list_pagination(fake_k8s):
    for i in range(5):
        create(fake_k8s, pod("p%d" % i))
    r = requests.get(pods_url(fake_k8s), headers=AUTH, params={"limit": 2}, timeout=5).json()
    seen = [i["metadata"]["name"] for i in r["items"]]
    while r["metadata"].get("continue"):
        r = requests.get(pods_url(fake_k8s), headers=AUTH, timeout=5,
                         params={"limit": 2, "continue": r["metadata"]["continue"]}).json()
        seen += [i["metadata"]["name"] for i in r["items"]]
    assert seen == ["p0", "p1", "p2", "p3", "p4"]


# ---- delete ---------------------------------------------------------------

def test_delete_with_grace_then_gone_then_404(fake_k8s):
    create(fake_k8s, pod("d1"))
    fake_k8s.wait_pod_phase(NS, "d1", "Running")
    r = requests.delete(pods_url(fake_k8s, "d1"), headers=AUTH, timeout=5)
    assert r.status_code == 200
    assert r.json()["kind"] == "Pod" and r.json()["metadata"]["deletionTimestamp"]
    assert r.json()["metadata"]["deletionGracePeriodSeconds"] == 30
    again = requests.delete(pods_url(fake_k8s, "d1"), headers=AUTH, timeout=5)
    assert again.status_code in (200, 404)
    fake_k8s.wait_for(lambda: fake_k8s.get("pods", NS, "d1") is None, timeout=5)
    assert_status(requests.delete(pods_url(fake_k8s, "d1"), headers=AUTH, timeout=5),
                  404, "NotFound")


def test_delete_grace_zero_is_immediate(fake_k8s):
    create(fake_k8s, pod("d2"))
    fake_k8s.wait_pod_phase(NS, "d2", "Running")
    r = requests.delete(pods_url(fake_k8s, "d2"), headers=AUTH,
                        params={"gracePeriodSeconds": 0}, timeout=5)
    assert r.status_code == 200
    assert fake_k8s.get("pods", NS, "d2") is None


def test_delete_precondition_uid_mismatch_is_409(fake_k8s):
    create(fake_k8s, pod("d3"))
    r = requests.delete(pods_url(fake_k8s, "d3"), headers=JSON, timeout=5,
                        data=json.dumps({"preconditions": {"uid": "not-it"}}))
    assert_status(r, 409, "Conflict")


# ---- watch ------------------------------------------------------------------

def test_watch_from_resource_version_streams_events_in_order(fake_k8s):
    start = fake_k8s.resource_version
    create(fake_k8s, pod("w1"))
    fake_k8s.wait_pod_phase(NS, "w1", "Running")
    requests.delete(pods_url(fake_k8s, "w1"), headers=AUTH, params={"gracePeriodSeconds": 0},
                    timeout=5)
    events = watch(fake_k8s, pods_url(fake_k8s), resourceVersion=start, timeoutSeconds=1)
    types = [e["type"] for e in events]
    assert types[0] == "ADDED" and types[-1] == "DELETED"
    assert set(types[1:-1]) == {"MODIFIED"}
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and len(set(rvs)) == len(rvs) and rvs[0] > start
    assert all(e["object"]["kind"] == "Pod" for e in events)
    phases = [e["object"]["status"]["phase"] for e in events]
    assert "Running" in phases


def test_watch_without_resource_version_starts_with_added_for_existing(fake_k8s):
    create(fake_k8s, pod("e1"))
    create(fake_k8s, pod("e2", labels={"app": "other"}))
    events = watch(fake_k8s, pods_url(fake_k8s), labelSelector="app=orchard", timeoutSeconds=1)
    assert events[0]["type"] == "ADDED" and events[0]["object"]["metadata"]["name"] == "e1"
    assert all(e["object"]["metadata"]["name"] == "e1" for e in events)


def test_watch_sends_bookmarks_when_allowed(fake_k8s):
    rv = fake_k8s.resource_version
    events = watch(fake_k8s, pods_url(fake_k8s), resourceVersion=rv,
                   allowWatchBookmarks="true", timeoutSeconds=1)
    bms = [e for e in events if e["type"] == "BOOKMARK"]
    assert bms and all(e["object"]["kind"] == "Pod" for e in bms)
    assert int(bms[-1]["object"]["metadata"]["resourceVersion"]) >= rv
    none = watch(fake_k8s, pods_url(fake_k8s), resourceVersion=rv, timeoutSeconds=1)
    assert not [e for e in none if e["type"] == "BOOKMARK"]


def test_watch_from_too_old_resource_version_is_410():
    with FakeApiServer(window=3, ready_delay=0.05) as fake:
        fake.pod_rule("Stay")      # no kubelet updates: only our creates move the rv
        old = fake.resource_version
        for i in range(4):
            fake.create("pods", NS, pod("o%d" % i))
        events = watch(fake, pods_url(fake), resourceVersion=old)
        assert len(events) == 1 and events[0]["type"] == "ERROR"
        st = events[0]["object"]
        assert st["kind"] == "Status" and st["code"] == 410 and st["reason"] == "Expired"
        assert "too old resource version" in st["message"]
        # A fresh LIST gives a resourceVersion the watch can resume from.
        rv = requests.get(pods_url(fake), timeout=5).json()["metadata"]["resourceVersion"]
        assert all(e["type"] != "ERROR" for e in watch(fake, pods_url(fake), resourceVersion=rv,
                                                         timeoutSeconds=1))


def test_compact_makes_older_watches_410(fake_k8s):
    rv = fake_k8s.resource_version
    fake_k8s.create("pods", NS, pod("c1"))
    fake_k8s.compact()
    events = watch(fake_k8s, pods_url(fake_k8s), resourceVersion=rv)
    assert events[0]["type"] == "ERROR" and events[0]["object"]["code"] == 410


def test_dropped_watch_breaks_the_stream(fake_k8s):
    r = requests.get(pods_url(fake_k8s), headers=AUTH, stream=True, timeout=5,
                     params={"watch": "1", "resourceVersion": fake_k8s.resource_version,
                             "timeoutSeconds": 30})
    t0 = time.monotonic()
    fake_k8s.create("pods", NS, pod("dw"))
    lines = r.iter_lines()
    first = json.loads(next(lines))
    assert first["type"] == "ADDED"
    fake_k8s.drop_watches()
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        for _ in lines:
            pass
    assert time.monotonic() - t0 < 10


def test_networkpolicy_watch_path_and_single_object_watch(fake_k8s):
    rv = fake_k8s.resource_version
    r = create(fake_k8s, netpol("np-a"), url=np_url(fake_k8s))
    assert r.status_code == 201
    create(fake_k8s, netpol("np-b"), url=np_url(fake_k8s))
    legacy = "%s/apis/networking.k8s.io/v1/watch/namespaces/%s/networkpolicies/np-a" % (
        fake_k8s.url, NS)
    events = watch(fake_k8s, legacy, resourceVersion=rv, timeoutSeconds=1)
    assert [e["object"]["metadata"]["name"] for e in events] == ["np-a"]


# ---- faults ---------------------------------------------------------------

def test_429_with_retry_after_then_success(fake_k8s):
    fake_k8s.fault(429, method="POST", path="/pods$", count=2, retry_after=3)
    for _ in range(2):
        r = create(fake_k8s, pod("f1"))
        st = assert_status(r, 429, "TooManyRequests")
        assert r.headers["Retry-After"] == "3"
        assert st["details"]["retryAfterSeconds"] == 3
    assert create(fake_k8s, pod("f1")).status_code == 201


def test_500_and_dropped_connection_faults(fake_k8s):
    fake_k8s.fault(500, method="GET", count=1)
    assert_status(requests.get(pods_url(fake_k8s), headers=AUTH, timeout=5), 500,
                  "InternalError")
    fake_k8s.fault(drop=True, method="GET", count=1)
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(pods_url(fake_k8s), headers=AUTH, timeout=5)
    assert requests.get(pods_url(fake_k8s), headers=AUTH, timeout=5).status_code == 200


def test_control_endpoints(fake_k8s):
    r = requests.post(fake_k8s.url + "/_fake/faults", timeout=5,
                      json={"status": 503, "path": "/pods", "count": 1, "retry_after": 1})
    assert r.status_code == 200
    assert requests.get(pods_url(fake_k8s), headers=AUTH, timeout=5).status_code == 503
    create(fake_k8s, pod("ctl"))
    fake_k8s.wait_pod_phase(NS, "ctl", "Running")
    r = requests.post(fake_k8s.url + "/_fake/pods/%s/ctl/terminate" % NS, timeout=5,
                      json={"exit_code": 137, "reason": "OOMKilled"})
    assert r.json()["object"]["status"]["phase"] == "Failed"
    st = requests.get(fake_k8s.url + "/_fake/state", timeout=5).json()
    assert [p["metadata"]["name"] for p in st["pods"]] == ["ctl"]
    reqs = requests.get(fake_k8s.url + "/_fake/requests", timeout=5).json()["requests"]
    assert any(q["method"] == "POST" and q["body"]["metadata"]["name"] == "ctl" for q in reqs)


# ---- simulated pod lifecycle -------------------------------------------------

def _waiting_reason(fake, name):
    p = fake.get("pods", NS, name)
    cs = (p["status"].get("containerStatuses") or [{}])[0]
    return (cs.get("state") or {}).get("waiting", {}).get("reason")


def test_image_pull_failure_rule(fake_k8s):
    fake_k8s.pod_rule("ErrImagePull", image="registry.example/missing:*")
    create(fake_k8s, pod("ip1", image="registry.example/missing:1"))
    fake_k8s.wait_for(lambda: _waiting_reason(fake_k8s, "ip1") == "ErrImagePull")
    fake_k8s.wait_for(lambda: _waiting_reason(fake_k8s, "ip1") == "ImagePullBackOff")
    assert fake_k8s.get("pods", NS, "ip1")["status"]["phase"] == "Pending"


def test_invalid_image_name_is_detected(fake_k8s):
    create(fake_k8s, pod("ii", image="Debian:12"))
    fake_k8s.wait_for(lambda: _waiting_reason(fake_k8s, "ii") == "InvalidImageName")


def test_unschedulable_rule(fake_k8s):
    fake_k8s.pod_rule("Unschedulable", labels={"size": "huge"})
    create(fake_k8s, pod("us", labels={"size": "huge"}))

    def cond():
        c = (fake_k8s.get("pods", NS, "us")["status"].get("conditions") or [{}])[0]
        return c.get("reason") == "Unschedulable" and c
    c = fake_k8s.wait_for(cond)
    assert c["type"] == "PodScheduled" and c["status"] == "False" and "nodes" in c["message"]
    assert "podIP" not in fake_k8s.get("pods", NS, "us")["status"]


def test_container_exit_fails_the_pod(fake_k8s):
    fake_k8s.pod_rule("CrashExit", name="crash-*", exit_code=3)
    create(fake_k8s, pod("crash-1"))
    p = fake_k8s.wait_pod_phase(NS, "crash-1", "Failed")
    term = p["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 3 and term["reason"] == "Error"


def test_active_deadline_fails_the_pod(fake_k8s):
    create(fake_k8s, pod("dl", activeDeadlineSeconds=1))
    p = fake_k8s.wait_pod_phase(NS, "dl", "Failed", timeout=5)
    assert p["status"]["reason"] == "DeadlineExceeded"


def test_set_waiting_and_not_ready(fake_k8s):
    create(fake_k8s, pod("sw"))
    fake_k8s.wait_pod_phase(NS, "sw", "Running")
    fake_k8s.set_ready(NS, "sw", False)
    assert fake_k8s.get("pods", NS, "sw")["status"]["containerStatuses"][0]["ready"] is False
    fake_k8s.set_waiting(NS, "sw", "CreateContainerConfigError", "secret not found")
    assert _waiting_reason(fake_k8s, "sw") == "CreateContainerConfigError"


# ---- patch and network policies ---------------------------------------------

def test_merge_and_strategic_patch_labels(fake_k8s):
    create(fake_k8s, pod("pt", labels={"app": "orchard", "old": "1"}))
    r = requests.patch(pods_url(fake_k8s, "pt"), timeout=5,
                       headers=dict(AUTH, **{"Content-Type": "application/merge-patch+json"}),
                       data=json.dumps({"metadata": {"labels": {"old": None, "new": "2"}}}))
    assert r.status_code == 200, r.text
    assert r.json()["metadata"]["labels"] == {"app": "orchard", "new": "2"}
    r = requests.patch(pods_url(fake_k8s, "pt"), timeout=5, headers=dict(
        AUTH, **{"Content-Type": "application/strategic-merge-patch+json"}),
        data=json.dumps({"metadata": {"annotations": {"orchard.dev/note": "x"}}}))
    assert r.json()["metadata"]["annotations"] == {"orchard.dev/note": "x"}
    r = requests.patch(pods_url(fake_k8s, "pt"), timeout=5,
                       headers=dict(AUTH, **{"Content-Type": "application/json-patch+json"}),
                       data=json.dumps([{"op": "add", "path": "/metadata/labels/j", "value": "3"}]))
    assert r.json()["metadata"]["labels"]["j"] == "3"
    r = requests.patch(pods_url(fake_k8s, "pt"), timeout=5,
                       headers=dict(AUTH, **{"Content-Type": "application/merge-patch+json"}),
                       data=json.dumps({"spec": {"restartPolicy": "Always"}}))
    assert_status(r, 422, "Invalid")
    r = requests.patch(pods_url(fake_k8s, "pt"), headers=JSON, timeout=5, data="{}")
    assert r.status_code == 415


def netpol(name, cidr="0.0.0.0/0", excepts=("10.0.0.0/8", "169.254.169.254/32")):
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "labels": {"app": "orchard"}},
            "spec": {"podSelector": {"matchLabels": {"orchard.dev/sandbox": name}},
                     "policyTypes": ["Egress"],
                     "egress": [{"to": [{"ipBlock": {"cidr": cidr, "except": list(excepts)}}]}]}}


def test_networkpolicy_create_validate_delete(fake_k8s):
    r = create(fake_k8s, netpol("np1"), url=np_url(fake_k8s))
    assert r.status_code == 201, r.text
    assert r.json()["apiVersion"] == "networking.k8s.io/v1"
    causes, _ = _causes(create(fake_k8s, netpol("np2", excepts=("300.0.0.0/8",)),
                               url=np_url(fake_k8s)))
    assert "spec.egress[0].to[0].ipBlock.except[0]" in causes
    body = netpol("np3")
    del body["spec"]["podSelector"]
    causes, st = _causes(create(fake_k8s, body, url=np_url(fake_k8s)))
    assert "spec.podSelector" in causes and st["details"]["group"] == "networking.k8s.io"
    r = requests.delete(np_url(fake_k8s, "np1"), headers=AUTH, timeout=5)
    assert r.status_code == 200 and r.json()["status"] == "Success"
    st = assert_status(requests.delete(np_url(fake_k8s, "np1"), headers=AUTH, timeout=5),
                       404, "NotFound")
    assert st["message"] == 'networkpolicies.networking.k8s.io "np1" not found'


# ---- the kubelet running a real process ------------------------------------

AGENT = textwrap.dedent("""
    import http.server, sys
    args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
    _, host, port = args["--listen"].split(":")
    token = open(args["--token-file"]).read().strip()
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ok = self.headers.get("Authorization") == "Bearer " + token
            self.send_response(200 if ok else 401); self.end_headers()
        def log_message(self, *a): pass
    http.server.HTTPServer((host, int(port)), H).serve_forever()
""")


def test_local_runner_starts_the_container_on_the_pod_ip(tmp_path):
    script = tmp_path / "orchard-agent.py"
    script.write_text(AGENT)
    wrapper = tmp_path / "orchard-agent"
    wrapper.write_text("#!/bin/sh\nexec %s %s \"$@\"\n" % (sys.executable, script))
    wrapper.chmod(0o755)
    runner = LocalRunner({"orchard-agent": str(wrapper)}, workdir=str(tmp_path / "pods"))
    with FakeApiServer(ready_delay=0.05, runner=runner) as fake:
        fake.create("secrets", NS, {"apiVersion": "v1", "kind": "Secret",
                                    "metadata": {"name": "rt-token"},
                                    "stringData": {"token": "s3cret"}})
        body = pod("rt")
        c = body["spec"]["containers"][0]
        c.update({"command": ["/orchard/bin/orchard-agent"],
                  "args": ["--listen", "tcp:0.0.0.0:18839", "--token-file", "/run/orchard/token"],
                  "ports": [{"name": "agent", "containerPort": 18839}],
                  "readinessProbe": {"httpGet": {"port": "agent", "path": "/health",
                                                 "httpHeaders": [{"name": "Authorization",
                                                                  "value": "Bearer s3cret"}]}},
                  "volumeMounts": [{"name": "token", "mountPath": "/run/orchard"}]})
        body["spec"]["volumes"] = [{"name": "token", "secret": {"secretName": "rt-token"}}]
        fake.create("pods", NS, body)
        p = fake.wait_for(lambda: fake.get("pods", NS, "rt")["status"].get(
            "containerStatuses", [{}])[0].get("ready") and fake.get("pods", NS, "rt"), timeout=10)
        ip = p["status"]["podIP"]
        r = requests.get("http://%s:18839/health" % ip, headers={"Authorization": "Bearer s3cret"},
                         timeout=5)
        assert r.status_code == 200
        fake.kubelet.handle(NS, "rt").proc.kill()     # the agent dies: the pod fails
        p = fake.wait_pod_phase(NS, "rt", "Failed")
        assert p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
    assert os.path.isdir(str(tmp_path / "pods"))


# ---- nodes (cluster-scoped, read-only) ----------------------------------------

def test_nodes_are_listed_by_label_read_only_and_validated(fake_k8s):
    fake_k8s.add_node("pool-a", "3920m", "16318384Ki", labels={"pool": "a"},
                      taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}])
    url = fake_k8s.url + "/api/v1/nodes"
    r = requests.get(url, headers=AUTH, timeout=5)
    assert r.status_code == 200 and r.json()["kind"] == "NodeList", r.text
    items = {n["metadata"]["name"]: n for n in r.json()["items"]}
    assert set(items) == {"fake-node-1", "pool-a"}
    assert items["pool-a"]["status"]["allocatable"]["cpu"] == "3920m"
    assert items["pool-a"]["spec"]["taints"][0]["effect"] == "NoSchedule"
    assert "kind" not in items["pool-a"]
    r = requests.get(url, headers=AUTH, params={"labelSelector": "pool=a", "limit": "1"},
                     timeout=5)
    assert [n["metadata"]["name"] for n in r.json()["items"]] == ["pool-a"]
    assert requests.get(url + "/pool-a", headers=AUTH, timeout=5).json()["metadata"]["name"] \
        == "pool-a"
    assert_status(requests.get(url + "/nope", headers=AUTH, timeout=5), 404, "NotFound")
    assert_status(requests.post(url, headers=JSON, data="{}", timeout=5), 405,
                  "MethodNotAllowed")
    assert_status(requests.get(pods_url(fake_k8s).replace("/pods", "/nodes"), headers=AUTH,
                               timeout=5), 404, "NotFound")      # not namespaced
    assert requests.get(url, timeout=5).status_code == 401
    with pytest.raises(ValueError):
        fake_k8s.add_node("bad", "lots", "1Gi")
    with pytest.raises(ValueError):
        fake_k8s.add_node("pool-a", "1", "1Gi")
    fake_k8s.remove_node("pool-a")
    assert [n["metadata"]["name"] for n in requests.get(url, headers=AUTH, timeout=5)
            .json()["items"]] == ["fake-node-1"]
