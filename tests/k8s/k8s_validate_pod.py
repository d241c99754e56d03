"""Semantic checks for pod specs and network policy specs.

A subset of k8s.io/kubernetes/pkg/apis/core/validation and
pkg/apis/networking/validation: what a driver building pods and policies
can get wrong. Structure (unknown fields, types, required fields) is checked
before these run, by k8s_validate.check_structure.
"""

import ipaddress

from k8s_validate import (ENV_VAR_NAME, IANA_SVC_NAME, cause, check_dns_label,
                          check_dns_subdomain, check_label_selector, check_labels,
                          invalid, not_supported, quantity_value, required)

PROTOCOLS = ["TCP", "UDP", "SCTP"]
RESTART_POLICIES = ["Always", "OnFailure", "Never"]
PULL_POLICIES = ["Always", "IfNotPresent", "Never"]
SECCOMP_TYPES = ["RuntimeDefault", "Unconfined", "Localhost"]
RESOURCE_NAMES = {"cpu", "memory", "ephemeral-storage"}


def check_pod_spec(spec, path, causes, extra_volumes=()):
    """extra_volumes: names a StatefulSet's volumeClaimTemplates provide."""
    if not isinstance(spec, dict):
        causes.append(required(path))
        return
    volumes = set(extra_volumes)
    for i, vol in enumerate(spec.get("volumes") or []):
        f = "%s.volumes[%d].name" % (path, i)
        name = vol.get("name", "")
        check_dns_label(name, f, causes)
        if name in volumes:
            causes.append(cause("FieldValueDuplicate", f, 'Duplicate value: "%s"' % name))
        volumes.add(name)
        sources = [k for k in vol if k != "name"]
        if len(sources) != 1:
            causes.append(cause("FieldValueRequired" if not sources else "FieldValueForbidden",
                                "%s.volumes[%d]" % (path, i),
                                "must specify exactly 1 volume type"))
    containers = spec.get("containers") or []
    if not containers:
        causes.append(required(path + ".containers"))
    names = set()
    for key in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(key) or []):
            _check_container(c, "%s.%s[%d]" % (path, key, i), names, volumes, causes)
    rp = spec.get("restartPolicy")
    if rp is not None and rp not in RESTART_POLICIES:
        causes.append(not_supported(path + ".restartPolicy", rp, RESTART_POLICIES))
    ads = spec.get("activeDeadlineSeconds")
    if ads is not None and ads <= 0:
        causes.append(invalid(path + ".activeDeadlineSeconds", ads,
                              "must be between 1 and 2147483647, inclusive"))
    tgp = spec.get("terminationGracePeriodSeconds")
    if tgp is not None and tgp < 0:
        causes.append(invalid(path + ".terminationGracePeriodSeconds", tgp,
                              "must be greater than or equal to 0"))
    if spec.get("serviceAccountName"):
        check_dns_subdomain(spec["serviceAccountName"], path + ".serviceAccountName", causes)
    if spec.get("runtimeClassName"):
        check_dns_subdomain(spec["runtimeClassName"], path + ".runtimeClassName", causes)
    check_labels(spec.get("nodeSelector"), path + ".nodeSelector", causes)
    for i, t in enumerate(spec.get("tolerations") or []):
        op = t.get("operator")
        if op not in (None, "Exists", "Equal"):
            causes.append(not_supported("%s.tolerations[%d].operator" % (path, i),
                                        op, ["Equal", "Exists"]))
        eff = t.get("effect")
        if eff not in (None, "", "NoSchedule", "PreferNoSchedule", "NoExecute"):
            causes.append(not_supported("%s.tolerations[%d].effect" % (path, i), eff,
                                        ["NoSchedule", "PreferNoSchedule", "NoExecute"]))
    for i, s in enumerate(spec.get("imagePullSecrets") or []):
        if not s.get("name"):
            causes.append(required("%s.imagePullSecrets[%d].name" % (path, i)))
    _check_security_context(spec.get("securityContext"), path + ".securityContext", causes)


def _check_container(c, path, names, volumes, causes):
    name = c.get("name", "")
    check_dns_label(name, path + ".name", causes)
    if name in names:
        causes.append(cause("FieldValueDuplicate", path + ".name", 'Duplicate value: "%s"' % name))
    names.add(name)
    image = c.get("image")
    if not image:
        causes.append(required(path + ".image"))
    elif image != image.strip():
        causes.append(invalid(path + ".image", image,
                              "must not have leading or trailing whitespace"))
    pp = c.get("imagePullPolicy")
    if pp is not None and pp not in PULL_POLICIES:
        causes.append(not_supported(path + ".imagePullPolicy", pp, PULL_POLICIES))
    ports = set()
    for i, p in enumerate(c.get("ports") or []):
        f = "%s.ports[%d]" % (path, i)
        cp = p.get("containerPort")
        if not 1 <= cp <= 65535:
            causes.append(invalid(f + ".containerPort", cp,
                                  "must be between 1 and 65535, inclusive"))
        if p.get("name"):
            _check_port_name(p["name"], f + ".name", causes)
        proto = p.get("protocol", "TCP")
        if proto not in PROTOCOLS:
            causes.append(not_supported(f + ".protocol", proto, PROTOCOLS))
        if (cp, proto) in ports:
            causes.append(cause("FieldValueDuplicate", f, "Duplicate value"))
        ports.add((cp, proto))
    for i, e in enumerate(c.get("env") or []):
        f = "%s.env[%d]" % (path, i)
        if not ENV_VAR_NAME.match(e.get("name", "")):
            causes.append(invalid(f + ".name", e.get("name"),
                                  "a valid environment variable name must consist of "
                                  "alphabetic characters, digits, '_', '-', or '.', "
                                  "and must not start with a digit"))
        if e.get("value") is not None and e.get("valueFrom") is not None:
            causes.append(invalid(f + ".valueFrom", "",
                                  "may not be specified when `value` is not empty"))
    for i, m in enumerate(c.get("volumeMounts") or []):
        f = "%s.volumeMounts[%d]" % (path, i)
        if m.get("name") not in volumes:
            causes.append(cause("FieldValueNotFound", f + ".name",
                                'Not found: "%s"' % m.get("name")))
        if not m.get("mountPath"):
            causes.append(required(f + ".mountPath"))
    _check_resources(c.get("resources"), path + ".resources", causes)
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        _check_probe(c.get(probe), "%s.%s" % (path, probe), causes)
    _check_security_context(c.get("securityContext"), path + ".securityContext", causes)


def _check_port_name(name, field, causes):
    if len(name) > 15 or not IANA_SVC_NAME.match(name) or "--" in name or \
            not any(ch.isalpha() for ch in name):
        causes.append(invalid(field, name,
                              "must be no more than 15 characters, contain only "
                              "lowercase alphanumerics and '-', and at least one letter"))


def _check_resources(res, path, causes):
    if not isinstance(res, dict):
        return
    limits = res.get("limits") or {}
    requests = res.get("requests") or {}
    for kind, values in (("limits", limits), ("requests", requests)):
        for name, q in values.items():
            f = "%s.%s[%s]" % (path, kind, name)
            if name not in RESOURCE_NAMES and "/" not in name and \
                    not name.startswith("hugepages-"):
                causes.append(invalid(f, name, "must be a standard resource type "
                                      "or fully qualified"))
            v = quantity_value(q)
            if v is not None and v < 0:
                causes.append(invalid(f, q, "must be greater than or equal to 0"))
    for name, q in requests.items():
        if name in limits:
            r, lim = quantity_value(q), quantity_value(limits[name])
            if r is not None and lim is not None and r > lim:
                causes.append(invalid("%s.requests[%s]" % (path, name), q,
                                      "must be less than or equal to %s limit" % name))


def _check_probe(probe, path, causes):
    if not isinstance(probe, dict):
        return
    handlers = [k for k in ("exec", "httpGet", "tcpSocket", "grpc") if probe.get(k)]
    if len(handlers) != 1:
        causes.append(cause("FieldValueRequired", path,
                            "must specify exactly 1 handler type"))
    for key in ("httpGet", "tcpSocket"):
        port = (probe.get(key) or {}).get("port")
        if isinstance(port, int) and not 1 <= port <= 65535:
            causes.append(invalid("%s.%s.port" % (path, key), port,
                                  "must be between 1 and 65535, inclusive"))
        elif isinstance(port, str):
            _check_port_name(port, "%s.%s.port" % (path, key), causes)
    for key in ("periodSeconds", "timeoutSeconds", "failureThreshold", "successThreshold"):
        v = probe.get(key)
        if v is not None and v < 1:
            causes.append(invalid("%s.%s" % (path, key), v,
                                  "must be greater than or equal to 1"))


def _check_security_context(sc, path, causes):
    if not isinstance(sc, dict):
        return
    for key in ("runAsUser", "runAsGroup", "fsGroup"):
        v = sc.get(key)
        if v is not None and not 0 <= v <= 2147483647:
            causes.append(invalid("%s.%s" % (path, key), v,
                                  "must be between 0 and 2147483647, inclusive"))
    prof = sc.get("seccompProfile")
    if isinstance(prof, dict):
        t = prof.get("type")
        if t not in SECCOMP_TYPES:
            causes.append(not_supported(path + ".seccompProfile.type", t, SECCOMP_TYPES))
        elif (t == "Localhost") != bool(prof.get("localhostProfile")):
            causes.append(invalid(path + ".seccompProfile.localhostProfile",
                                  prof.get("localhostProfile"),
                                  "must be set if and only if type is Localhost"))
    if sc.get("privileged") and sc.get("allowPrivilegeEscalation") is False:
        causes.append(invalid(path, "", "cannot set `allowPrivilegeEscalation` to "
                              "false and `privileged` to true"))


def check_network_policy_spec(spec, path, causes):
    if not isinstance(spec, dict):
        causes.append(required(path))
        return
    check_label_selector(spec.get("podSelector"), path + ".podSelector", causes)
    for i, t in enumerate(spec.get("policyTypes") or []):
        if t not in ("Ingress", "Egress"):
            causes.append(not_supported("%s.policyTypes[%d]" % (path, i), t,
                                        ["Ingress", "Egress"]))
    for key, peers in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(spec.get(key) or []):
            f = "%s.%s[%d]" % (path, key, i)
            for j, port in enumerate(rule.get("ports") or []):
                _check_np_port(port, "%s.ports[%d]" % (f, j), causes)
            for j, peer in enumerate(rule.get(peers) or []):
                _check_np_peer(peer, "%s.%s[%d]" % (f, peers, j), causes)


def _check_np_port(port, path, causes):
    proto = port.get("protocol", "TCP")
    if proto not in PROTOCOLS:
        causes.append(not_supported(path + ".protocol", proto, PROTOCOLS))
    p = port.get("port")
    if isinstance(p, int) and not 1 <= p <= 65535:
        causes.append(invalid(path + ".port", p, "must be between 1 and 65535, inclusive"))
    elif isinstance(p, str):
        _check_port_name(p, path + ".port", causes)
    end = port.get("endPort")
    if end is not None and (not isinstance(p, int) or end < p):
        causes.append(invalid(path + ".endPort", end,
                              "must be greater than or equal to `port` (a number)"))


def _check_np_peer(peer, path, causes):
    set_fields = [k for k in ("podSelector", "namespaceSelector", "ipBlock")
                  if peer.get(k) is not None]
    if not set_fields:
        causes.append(required(path))
    if "ipBlock" in set_fields and len(set_fields) > 1:
        causes.append(cause("FieldValueForbidden", path,
                            "may not specify more than 1 peer when ipBlock is set"))
    for k in ("podSelector", "namespaceSelector"):
        check_label_selector(peer.get(k), "%s.%s" % (path, k), causes)
    block = peer.get("ipBlock")
    if not isinstance(block, dict):
        return
    try:
        net = ipaddress.ip_network(block.get("cidr", ""), strict=False)
    except ValueError:
        causes.append(invalid(path + ".ipBlock.cidr", block.get("cidr"),
                              "must be a valid CIDR"))
        return
    for i, ex in enumerate(block.get("except") or []):
        f = "%s.ipBlock.except[%d]" % (path, i)
        try:
            exn = ipaddress.ip_network(ex, strict=False)
        except ValueError:
            causes.append(invalid(f, ex, "must be a valid CIDR"))
            continue
        if exn.version != net.version or not exn.subnet_of(net) or exn == net:
            causes.append(invalid(f, ex, "must be a strict subset of `cidr`"))
