"""A small kustomize for the subset k8s/ uses, for machines without one.

Supports: `resources` (files and directories with a kustomization.yaml),
`patches` with `path` (strategic merge: maps merge, lists of containers,
volumes, env, ports... merge by `name`, other lists are replaced,
`$patch: delete` removes an object), `images` (newName, newTag, digest) and
`labels` (pairs added to metadata.labels; includeSelectors/includeTemplates
not supported). Anything else in a kustomization is an error, so the test
notices when k8s/ starts using a feature this does not implement. Where
kubectl is installed, tests/k8s/test_manifests.py checks that its output is
identical to `kubectl kustomize`.
"""

import copy
import os

import yaml

SUPPORTED = {"apiVersion", "kind", "resources", "patches", "images", "labels"}
# Lists merged by their items' "name" in a strategic merge patch.
MERGE_BY_NAME = {"containers", "initContainers", "volumes", "env", "ports",
                 "volumeMounts", "imagePullSecrets", "volumeClaimTemplates"}


class KustomizeError(Exception):
    pass


def load_yaml_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def build(directory):
    """The objects a kustomization directory renders to, in order."""
    kpath = os.path.join(directory, "kustomization.yaml")
    if not os.path.exists(kpath):
        raise KustomizeError("no kustomization.yaml in %s" % directory)
    (k,) = load_yaml_docs(kpath)
    extra = set(k) - SUPPORTED
    if extra:
        raise KustomizeError("%s: unsupported fields %s" % (kpath, sorted(extra)))
    objs = []
    for res in k.get("resources") or []:
        path = os.path.normpath(os.path.join(directory, res))
        if os.path.isdir(path):
            objs.extend(build(path))
        else:
            if not os.path.abspath(path).startswith(os.path.abspath(directory) + os.sep):
                raise KustomizeError("%s: file %s is outside the kustomization root"
                                     % (kpath, res))
            objs.extend(load_yaml_docs(path))
    for patch in k.get("patches") or []:
        if set(patch) != {"path"}:
            raise KustomizeError("%s: only `patches: - path:` is supported" % kpath)
        for p in load_yaml_docs(os.path.join(directory, patch["path"])):
            objs = _apply_patch(objs, p, kpath)
    for img in k.get("images") or []:
        for o in objs:
            _set_image(o, img)
    for lab in k.get("labels") or []:
        if set(lab) - {"pairs", "includeSelectors"} or lab.get("includeSelectors"):
            raise KustomizeError("%s: only labels.pairs is supported" % kpath)
        for o in objs:
            o.setdefault("metadata", {}).setdefault("labels", {}).update(lab["pairs"])
    _check_unique(objs)
    return objs


def object_id(o):
    m = o.get("metadata") or {}
    return (o.get("apiVersion", "").split("/")[0] if "/" in o.get("apiVersion", "") else "",
            o.get("kind"), m.get("namespace"), m.get("name"))


def _check_unique(objs):
    seen = set()
    for o in objs:
        i = object_id(o)
        if i in seen:
            raise KustomizeError("duplicate object %s" % (i,))
        seen.add(i)


def _apply_patch(objs, patch, where):
    pid = object_id(patch)
    for i, o in enumerate(objs):
        oid = object_id(o)
        if oid[1:] == pid[1:] and oid[0] == pid[0]:
            if patch.get("$patch") == "delete":
                return objs[:i] + objs[i + 1:]
            objs[i] = strategic_merge(o, patch)
            return objs
    raise KustomizeError("%s: patch target %s not found" % (where, pid))


def strategic_merge(target, patch, key=None):
    if isinstance(patch, dict) and isinstance(target, dict):
        out = copy.deepcopy(target)
        for k, v in patch.items():
            if k == "$patch":
                continue
            if v is None:
                out.pop(k, None)
            elif k in out:
                out[k] = strategic_merge(out[k], v, k)
            else:
                out[k] = copy.deepcopy(v)
        return out
    if isinstance(patch, list) and isinstance(target, list) and key in MERGE_BY_NAME:
        def name_of(item):
            return (item.get("metadata") or {}).get("name") \
                if key == "volumeClaimTemplates" else item.get("name")
        by_name = {name_of(it): it for it in target}
        # As kustomize orders them: the patch's items (merged into the
        # target's item of the same name, or new) first, then the rest.
        out = [strategic_merge(by_name[name_of(it)], it) if name_of(it) in by_name
               else copy.deepcopy(it) for it in patch]
        patched = {name_of(it) for it in patch}
        return out + [copy.deepcopy(it) for it in target if name_of(it) not in patched]
    return copy.deepcopy(patch)


def _containers(o):
    spec = o.get("spec") or {}
    pod = spec if o.get("kind") == "Pod" else (spec.get("template") or {}).get("spec") or {}
    return (pod.get("initContainers") or []) + (pod.get("containers") or [])


def _set_image(o, img):
    for c in _containers(o):
        image = c.get("image", "")
        name, tag = image, None
        if "@" in image:
            name = image.split("@")[0]
        elif ":" in image.rsplit("/", 1)[-1]:
            name, tag = image.rsplit(":", 1)
        if name != img["name"]:
            continue
        name = img.get("newName", name)
        if img.get("digest"):
            c["image"] = "%s@%s" % (name, img["digest"])
        else:
            tag = img.get("newTag", tag)
            c["image"] = name + (":" + tag if tag else "")
