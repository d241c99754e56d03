"""The kubernetes driver reading KUBECONFIG (docs/kubernetes.md, "API server
access"): the current context's server, CA and credentials, as kubectl
writes them, against the fake API server behind TLS (test_controller_k8s.py
has the harness). Each test proves the controller reached the server with
those credentials: the fake answers 401 without the token, and the TLS
handshake fails without the client certificate it requires.
"""
import base64
import os
import subprocess

import pytest
import yaml

from test_controller_k8s import (API_TOKEN, FAKE_PORT, K8s, k8s_tls, pg,  # noqa: F401
                                 ready_sandbox, agent_call, pytestmark)
from ctl_harness import Controller, wait_for


def b64(path):
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


def kubeconfig_env(k, path):
    env = k.env(KUBECONFIG=path)
    del env["ORCHARD_K8S_API_URL"]
    del env["ORCHARD_K8S_TOKEN_FILE"]
    return env


def write_kubeconfig(path, cluster, user, current="ctx"):
    doc = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "current-context": current,
        "contexts": [{"name": "other", "context": {"cluster": "nowhere", "user": "nobody"}},
                     {"name": "ctx", "context": {"cluster": "fake", "user": "me",
                                                 "namespace": "default"}}],
        "clusters": [{"name": "nowhere", "cluster": {"server": "https://192.0.2.1:6443"}},
                     {"name": "fake", "cluster": cluster}],
        "users": [{"name": "nobody", "user": {"token": "wrong"}}, {"name": "me", "user": user}],
    }
    with open(path, "w") as f:
        yaml.safe_dump(doc, f)


def start(k, path):
    c = Controller(kubeconfig_env(k, path), os.path.join(k.base, "controller%d.log" % len(k.ctls)))
    k.ctls.append(c)
    log = wait_for(lambda: ("holding the controller lock" in c.log() or c.proc.poll() is not None)
                   and c.log(), what="leadership")
    assert c.proc.poll() is None, log
    assert '"api":"https://127.0.0.1:%d"' % FAKE_PORT in log, log
    return c


@pytest.fixture
def client_ca(tmp_path):
    """A self-signed client certificate (its own CA) and its key."""
    crt, key = str(tmp_path / "client.crt"), str(tmp_path / "client.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", key, "-out", crt, "-subj", "/CN=orchard-controller"],
                   check=True, capture_output=True)
    return crt, key


@pytest.fixture
def k8s_mtls(pg, client_ca):  # noqa: F811
    """The fake behind TLS requiring client_ca's certificate, no token."""
    k = K8s(pg, tls=True, client_ca=client_ca[0])
    k.fake.token = None            # the client certificate is the credential
    try:
        yield k
    finally:
        k.close()


def test_current_context_with_a_ca_file_relative_to_the_kubeconfig_and_a_token(k8s_tls):
    k = k8s_tls
    os.makedirs(os.path.join(k.base, "kube"))
    os.rename(k.ca, os.path.join(k.base, "kube", "ca.crt"))
    path = os.path.join(k.base, "kube", "config")
    write_kubeconfig(path, {"server": "https://127.0.0.1:%d/" % FAKE_PORT,
                            "certificate-authority": "ca.crt"}, {"token": API_TOKEN})
    start(k, path)
    sid, token, row = ready_sandbox(k)
    assert agent_call(row["address"], token, "GET", "/health")[0] == 200
    assert k.posts("pods")[-1]["authorization"] == "Bearer " + API_TOKEN
    k.assert_no_invalid_requests()


def test_inline_ca_and_client_certificate_data(k8s_mtls, client_ca):
    k, (crt, key) = k8s_mtls, client_ca
    path = os.path.join(k.base, "config")
    write_kubeconfig(path, {"server": "https://127.0.0.1:%d" % FAKE_PORT,
                            "certificate-authority-data": b64(k.ca)},
                     {"client-certificate-data": b64(crt), "client-key-data": b64(key)})
    start(k, path)
    sid, token, row = ready_sandbox(k)
    assert agent_call(row["address"], token, "GET", "/health")[0] == 200
    assert not k.posts("pods")[-1].get("authorization")


def test_client_certificate_files_and_a_second_file_in_the_list(k8s_mtls, client_ca):
    # KUBECONFIG=a:b — the first file sets current-context (kubectl's
    # merge: the first file that sets a thing wins), the second holds it.
    k, (crt, key) = k8s_mtls, client_ca
    first, second = os.path.join(k.base, "first"), os.path.join(k.base, "second")
    with open(first, "w") as f:
        yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "ctx"}, f)
    write_kubeconfig(second, {"server": "https://127.0.0.1:%d" % FAKE_PORT,
                              "certificate-authority": k.ca},
                     {"client-certificate": crt, "client-key": key}, current="other")
    start(k, first + ":" + second)
    ready_sandbox(k)


def test_without_the_client_certificate_nothing_gets_through(k8s_mtls):
    k = k8s_mtls
    path = os.path.join(k.base, "config")
    write_kubeconfig(path, {"server": "https://127.0.0.1:%d" % FAKE_PORT,
                            "certificate-authority": k.ca}, {})
    start(k, path)
    sid, _ = k.insert(timeout=30)
    wait_for(lambda: k.row(sid)["state"] == "failed", timeout=60, what="create failing")
    assert k.fake.requests_matching() == []


@pytest.mark.parametrize("cluster,user,current,problem", [
    ({"server": "https://127.0.0.1:1"}, {"exec": {"command": "aws"}}, "ctx",
     "credential plugins are not supported"),
    ({"server": "https://127.0.0.1:1"}, {"username": "a", "password": "b"}, "ctx",
     "basic auth is not supported"),
    ({"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}, {}, "ctx",
     "insecure-skip-tls-verify"),
    ({"server": "https://127.0.0.1:1"}, {}, "missing", "current-context is not among"),
    ({"server": "ftp://x"}, {}, "ctx", "http(s)://"),
    ({"server": "https://127.0.0.1:1", "certificate-authority-data": "not base64!"}, {}, "ctx",
     "certificate-authority-data"),
    ({"server": "https://127.0.0.1:1"}, {"client-certificate": "c.crt"}, "ctx",
     "needs its key"),
])
def test_a_kubeconfig_it_cannot_use_refuses_to_start(k8s_tls, cluster, user, current, problem):
    k = k8s_tls
    path = os.path.join(k.base, "config")
    write_kubeconfig(path, cluster, user, current=current)
    c = Controller(kubeconfig_env(k, path), os.path.join(k.base, "bad.log"))
    k.ctls.append(c)
    assert c.proc.wait(20) != 0
    assert "bad KUBECONFIG" in c.log() and problem in c.log(), c.log()


def test_a_missing_or_malformed_kubeconfig_refuses_to_start(k8s_tls):
    k = k8s_tls
    bad = os.path.join(k.base, "bad-yaml")
    with open(bad, "w") as f:
        f.write("clusters: [unclosed\n")
    for path, problem in ((os.path.join(k.base, "absent"), "cannot be opened"), (bad, "")):
        c = Controller(kubeconfig_env(k, path), os.path.join(k.base, "bad%d.log" % len(k.ctls)))
        k.ctls.append(c)
        assert c.proc.wait(20) != 0
        assert "bad KUBECONFIG" in c.log() and problem in c.log(), c.log()
