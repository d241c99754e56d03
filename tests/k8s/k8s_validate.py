"""Strict validation of Kubernetes objects against python3-kubernetes' models.

Two layers, like a real API server with strict field validation:

1. Structure (decoding): every JSON key must be a field of the model
   (`attribute_map`), every value must have the model's type
   (`openapi_types`), required fields must be present, and the object must
   deserialize through the client's own ApiClient into the model class.
2. Semantics (a subset of the API server's validation that a driver can
   trip over): DNS-1123 names, label keys and values, annotation keys,
   resource quantities, container/volume/port rules, pod and network policy
   enums and CIDRs.

`validate_object(obj)` returns a list of causes, each
`{"reason": ..., "message": ..., "field": ...}` as in a Status's
`details.causes`; an empty list means valid. It is used by the fake API
server (tests/k8s/fake_apiserver.py) and by tests/k8s/test_manifests.py.
"""

import datetime
import re
import functools

from kubernetes import client as k8s_client
from kubernetes.client.configuration import Configuration

# ---- patterns from k8s.io/apimachinery/pkg/util/validation ----------------

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
IANA_SVC_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
ENV_VAR_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
QUANTITY = re.compile(
    r"^[+-]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")

DNS1123_LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case "
                     "alphanumeric characters or '-', and must start and end "
                     "with an alphanumeric character")
DNS1123_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower "
                         "case alphanumeric characters, '-' or '.', and must "
                         "start and end with an alphanumeric character")

# 'object' in the models is IntOrString for these (class, attribute) pairs.
INT_OR_STRING = {
    ("V1HTTPGetAction", "port"), ("V1TCPSocketAction", "port"),
    ("V1NetworkPolicyPort", "port"), ("V1ServicePort", "target_port"),
    ("V1PodDisruptionBudgetSpec", "max_unavailable"),
    ("V1PodDisruptionBudgetSpec", "min_available"),
    ("V1RollingUpdateDeployment", "max_surge"),
    ("V1RollingUpdateDeployment", "max_unavailable"),
    ("V1RollingUpdateDaemonSet", "max_surge"),
    ("V1RollingUpdateDaemonSet", "max_unavailable"),
}

# Fields whose values are resource.Quantity (a string or a JSON number).
QUANTITY_MAPS = {("V1ResourceRequirements", "limits"),
                 ("V1ResourceRequirements", "requests"),
                 ("V1PodSpec", "overhead")}
QUANTITY_SCALARS = {("V1EmptyDirVolumeSource", "size_limit")}

_API_CLIENT = k8s_client.ApiClient()


def cause(reason, field, message):
    return {"reason": reason, "message": message, "field": field}


def invalid(field, value, detail):
    return cause("FieldValueInvalid", field,
                 "Invalid value: %s: %s" % (_show(value), detail))


def required(field):
    return cause("FieldValueRequired", field, "Required value")


def not_supported(field, value, allowed):
    return cause("FieldValueNotSupported", field,
                 "Unsupported value: %s: supported values: %s" % (
                     _show(value), ", ".join('"%s"' % a for a in allowed)))


def _show(value):
    if isinstance(value, str):
        return '"%s"' % value
    return str(value)


def model_class(api_version, kind):
    """The python3-kubernetes model for apiVersion/kind, or None."""
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return None
    version = api_version.rsplit("/", 1)[-1]
    name = version[:1].upper() + version[1:] + kind
    return getattr(k8s_client.models, name, None)


@functools.lru_cache(maxsize=None)
def _required_attrs(cls):
    """Attributes whose setter refuses None (the model's required fields)."""
    out = set()
    conf = Configuration()
    conf.client_side_validation = True
    for attr in cls.openapi_types:
        obj = cls.__new__(cls)
        obj.local_vars_configuration = conf
        try:
            setattr(obj, attr, None)
        except ValueError:
            out.add(attr)
    return frozenset(out)


@functools.lru_cache(maxsize=None)
def _json_to_attr(cls):
    return {v: k for k, v in cls.attribute_map.items()}


# ---- layer 1: structure ---------------------------------------------------

def check_structure(value, type_name, path, causes, owner=None):
    """Walk `value` against the openapi type `type_name`; append causes."""
    if value is None:
        return
    if type_name.startswith("list["):
        if not isinstance(value, list):
            causes.append(_wrong_type(path, value, "array"))
            return
        inner = type_name[5:-1]
        for i, item in enumerate(value):
            check_structure(item, inner, "%s[%d]" % (path, i), causes, owner)
        return
    if type_name.startswith("dict("):
        if not isinstance(value, dict):
            causes.append(_wrong_type(path, value, "object"))
            return
        inner = type_name[type_name.index(",") + 1:-1].strip()
        for k, v in value.items():
            sub = "%s[%s]" % (path, k)
            if owner in QUANTITY_MAPS:
                _check_quantity(v, sub, causes)
            else:
                check_structure(v, inner, sub, causes)
        return
    if type_name == "str":
        if owner in QUANTITY_SCALARS:
            _check_quantity(value, path, causes)
        elif not isinstance(value, str):
            causes.append(_wrong_type(path, value, "string"))
        return
    if type_name == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            causes.append(_wrong_type(path, value, "integer"))
        return
    if type_name == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            causes.append(_wrong_type(path, value, "number"))
        return
    if type_name == "bool":
        if not isinstance(value, bool):
            causes.append(_wrong_type(path, value, "boolean"))
        return
    if type_name == "datetime":
        if not isinstance(value, str) or not _is_rfc3339(value):
            causes.append(_wrong_type(path, value, "RFC 3339 time"))
        return
    if type_name == "object":
        if owner in INT_OR_STRING and (isinstance(value, bool) or
                                       not isinstance(value, (int, str))):
            causes.append(_wrong_type(path, value, "integer or string"))
        return
    cls = getattr(k8s_client.models, type_name, None)
    if cls is None:
        causes.append(cause("InternalError", path, "no model " + type_name))
        return
    if not isinstance(value, dict):
        causes.append(_wrong_type(path, value, "object"))
        return
    names = _json_to_attr(cls)
    for key, sub in value.items():
        field = "%s.%s" % (path, key) if path else key
        attr = names.get(key)
        if attr is None and (type_name, key) in NEWER_FIELDS:
            NEWER_FIELDS[(type_name, key)](sub, field, causes)
            continue
        if attr is None:
            causes.append(cause("FieldValueUnknown", field,
                                'unknown field "%s"' % field))
            continue
        check_structure(sub, cls.openapi_types[attr], field, causes,
                        (type_name, attr))
    for attr in _required_attrs(cls):
        if value.get(cls.attribute_map[attr]) is None:
            key = cls.attribute_map[attr]
            causes.append(required("%s.%s" % (path, key) if path else key))


def _image_volume(value, path, causes):
    """V1ImageVolumeSource (Kubernetes 1.31+, GA in 1.35): reference and
    pullPolicy, both strings."""
    if not isinstance(value, dict):
        causes.append(_wrong_type(path, value, "object"))
        return
    for key, sub in value.items():
        if key not in ("reference", "pullPolicy"):
            causes.append(cause("FieldValueUnknown", "%s.%s" % (path, key),
                                'unknown field "%s.%s"' % (path, key)))
        elif not isinstance(sub, str):
            causes.append(_wrong_type("%s.%s" % (path, key), sub, "string"))
    if key_missing(value, "reference"):
        causes.append(required(path + ".reference"))


def key_missing(value, key):
    return not value.get(key)


# Fields newer than the Kubernetes models python3-kubernetes has: checked
# here by hand where the models do not know them.
NEWER_FIELDS = {
    ("V1Volume", "image"): _image_volume,
}


def _wrong_type(path, value, want):
    return cause("FieldValueTypeInvalid", path,
                 "Invalid value: %s: expected %s, got %s" % (
                     _show(value) if not isinstance(value, (dict, list))
                     else type(value).__name__, want,
                     _json_type(value)))


def _json_type(value):
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def _is_rfc3339(s):
    try:
        datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))
        return True
    except ValueError:
        return False


def _check_quantity(value, path, causes):
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        causes.append(_wrong_type(path, value, "quantity"))
    elif not QUANTITY.match(str(value)):
        causes.append(invalid(path, value,
                              "quantities must match the regular expression "
                              "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"))


def quantity_value(q):
    """A quantity as a float (for comparisons), or None when malformed."""
    m = QUANTITY.match(str(q))
    if not m:
        return None
    suffix = m.group(3) or ""
    num = float(str(q)[:len(str(q)) - len(suffix)])
    binary = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
    decimal = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9,
               "T": 12, "P": 15, "E": 18}
    if suffix in binary:
        return num * (1024 ** binary[suffix])
    if suffix in decimal:
        return num * (10 ** decimal[suffix])
    return num * (10 ** int(suffix[1:]))


def deserialize(obj, cls):
    """The object as a model instance, through the client's deserializer."""
    return _API_CLIENT._ApiClient__deserialize(obj, cls.__name__)


# ---- layer 2: semantics ---------------------------------------------------

def check_dns_subdomain(value, field, causes):
    if len(value) > 253:
        causes.append(invalid(field, value, "must be no more than 253 characters"))
    elif not DNS1123_SUBDOMAIN.match(value):
        causes.append(invalid(field, value, DNS1123_SUBDOMAIN_MSG))


def check_dns_label(value, field, causes):
    if len(value) > 63:
        causes.append(invalid(field, value, "must be no more than 63 characters"))
    elif not DNS1123_LABEL.match(value):
        causes.append(invalid(field, value, DNS1123_LABEL_MSG))


def check_qualified_name(key, field, causes):
    name = key
    if "/" in key:
        prefix, _, name = key.partition("/")
        if not prefix or len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix):
            causes.append(invalid(field, key, "prefix part " + DNS1123_SUBDOMAIN_MSG))
            return
    if not name or len(name) > 63 or not QUALIFIED_NAME.match(name):
        causes.append(invalid(field, key,
                              "name part must consist of alphanumeric characters, "
                              "'-', '_' or '.', must start and end with an "
                              "alphanumeric character, at most 63 characters"))


def check_labels(labels, field, causes):
    for k, v in (labels or {}).items():
        check_qualified_name(k, field, causes)
        if not isinstance(v, str):
            continue
        if len(v) > 63 or not LABEL_VALUE.match(v):
            causes.append(invalid("%s[%s]" % (field, k), v,
                                  "a valid label must be an empty string or "
                                  "consist of alphanumeric characters, '-', '_' "
                                  "or '.', at most 63 characters"))


def check_meta(meta, causes, namespaced=True, name_check=check_dns_subdomain):
    if not isinstance(meta, dict):
        causes.append(required("metadata"))
        return
    name, gen = meta.get("name"), meta.get("generateName")
    if not name and not gen:
        causes.append(cause("FieldValueRequired", "metadata.name",
                            "name or generateName is required"))
    if isinstance(name, str) and name:
        name_check(name, "metadata.name", causes)
    ns = meta.get("namespace")
    if namespaced and isinstance(ns, str) and ns:
        check_dns_label(ns, "metadata.namespace", causes)
    check_labels(meta.get("labels"), "metadata.labels", causes)
    annotations = meta.get("annotations") or {}
    for k in annotations:
        check_qualified_name(k, "metadata.annotations", causes)
    if sum(len(k) + len(str(v)) for k, v in annotations.items()) > 262144:
        causes.append(cause("FieldValueTooLong", "metadata.annotations",
                            "Too long: must have at most 262144 bytes"))


def check_label_selector(sel, field, causes):
    if not isinstance(sel, dict):
        return
    check_labels(sel.get("matchLabels"), field + ".matchLabels", causes)
    for i, expr in enumerate(sel.get("matchExpressions") or []):
        f = "%s.matchExpressions[%d]" % (field, i)
        op = expr.get("operator")
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            causes.append(not_supported(f + ".operator", op,
                                        ["In", "NotIn", "Exists", "DoesNotExist"]))
        elif op in ("In", "NotIn") and not expr.get("values"):
            causes.append(required(f + ".values"))
        elif op in ("Exists", "DoesNotExist") and expr.get("values"):
            causes.append(cause("FieldValueForbidden", f + ".values",
                                "Forbidden: may not be specified when `operator` "
                                "is 'Exists' or 'DoesNotExist'"))


from k8s_validate_pod import check_pod_spec, check_network_policy_spec  # noqa: E402

SEMANTIC = {
    "Pod": lambda o, c: check_pod_spec(o.get("spec"), "spec", c),
    "NetworkPolicy": lambda o, c: check_network_policy_spec(o.get("spec"), "spec", c),
}


def _template_spec(o, c, path="spec.template"):
    spec = o.get("spec") or {}
    tpl = spec.get("template") or {}
    check_labels((tpl.get("metadata") or {}).get("labels"), path + ".metadata.labels", c)
    claims = [(t.get("metadata") or {}).get("name")
              for t in spec.get("volumeClaimTemplates") or []]
    check_pod_spec(tpl.get("spec"), path + ".spec", c, claims)
    sel = spec.get("selector")
    check_label_selector(sel, "spec.selector", c)
    want = (sel or {}).get("matchLabels") or {}
    have = (tpl.get("metadata") or {}).get("labels") or {}
    if any(have.get(k) != v for k, v in want.items()):
        c.append(invalid(path + ".metadata.labels", have,
                         "`selector` does not match template `labels`"))


for _kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"):
    SEMANTIC[_kind] = _template_spec
SEMANTIC["Job"] = lambda o, c: check_pod_spec(
    ((o.get("spec") or {}).get("template") or {}).get("spec"), "spec.template.spec", c)

CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding",
                  "PersistentVolume", "StorageClass", "Node"}


def validate_object(obj, expect_kind=None, expect_api_version=None):
    """All causes that make `obj` invalid (empty list when it is valid)."""
    causes = []
    if not isinstance(obj, dict):
        return [cause("FieldValueTypeInvalid", "", "body must be a JSON object")]
    kind = obj.get("kind", expect_kind)
    api_version = obj.get("apiVersion", expect_api_version)
    if expect_kind and kind != expect_kind:
        return [invalid("kind", kind, "must be %s" % expect_kind)]
    if expect_api_version and api_version != expect_api_version:
        return [invalid("apiVersion", api_version, "must be %s" % expect_api_version)]
    cls = model_class(api_version, kind)
    if cls is None:
        return [invalid("kind", kind, "no model for %s %s" % (api_version, kind))]
    check_structure(obj, cls.__name__, "", causes)
    if causes:
        return causes
    try:
        deserialize(obj, cls)
    except (ValueError, TypeError) as e:  # the models' own checks
        return [cause("FieldValueInvalid", "", str(e))]
    check_meta(obj.get("metadata"), causes, namespaced=kind not in CLUSTER_SCOPED,
               name_check=check_dns_label if kind in ("Namespace", "Service")
               else check_dns_subdomain)
    sem = SEMANTIC.get(kind)
    if sem:
        sem(obj, causes)
    return causes
