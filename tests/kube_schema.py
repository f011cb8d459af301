"""Kubernetes documents checked as the API server (with kubectl's strict field validation) would.

No API server can run here, so the pinned CustomResourceDefinitions are read from
shared/reference/kubernetes/ (beside the repository, never copied into it) and turned into a
STRICT JSON Schema:

- every object without ``x-kubernetes-preserve-unknown-fields: true`` gets
  ``additionalProperties: false`` (the server would prune an unknown field; ``kubectl apply``'s
  default ``--validate=strict`` rejects it, and a compiler that writes one has a bug);
- ``x-kubernetes-int-or-string`` is an integer or a string; ``x-kubernetes-embedded-resource``
  implies ``apiVersion``, ``kind`` and ``metadata``; ``nullable`` allows null (else null is an
  error here: the server would silently drop it); ``format: int32/int64`` are ranges;
- ``metadata`` (ObjectMeta, not in a CRD's schema) is checked by hand with Kubernetes' rules:
  names are DNS-1123 subdomains (the CRD's CEL may demand more), namespaces DNS-1123 labels,
  label and annotation keys qualified names, label values at most 63 characters;
- ``default`` values are applied first (the server defaults before it validates), then the
  CRD's CEL rules (``x-kubernetes-validations``) are evaluated with cel-python on every value
  they sit on; rules that mention ``oldSelf`` are transition rules and do not apply at creation;
- ``x-kubernetes-list-type: map`` / ``set`` lists may not repeat a key / an item;
- the operators' validating webhooks (``webhook``, read in their source at the pinned tags) and,
  apart, counts the server accepts but that train nothing (``sense``: ``numNodes: 0``).

Core objects (ConfigMap, Secret, Service, ...) are checked against the strict schemas that
kubernetes-validate ships for a pinned Kubernetes version, plus the server-side rules those
schemas cannot say (ConfigMap/Secret keys and their 1 MiB total, metadata as above).

    validate(document) -> ["spec.trainer.numNodes: 0 is less than the minimum of 1", ...]
    validate_stream(text) -> the same for every document of a multi-document YAML file

Every error starts with the field's path (``spec.pytorchReplicaSpecs.Master.replicas``,
``spec.runtimePatches[0].manager``); ``without=`` turns named checks off (see CHECKS) so a test
can show that the check it means is the one that catches a broken document.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

import yaml

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO.parent / "shared" / "reference" / "kubernetes"
TRAINER = REFERENCE / "trainer-v2.3.0"
TRAINING_OPERATOR = REFERENCE / "training-operator-v1.9.4"
CRD_FILES = [
    TRAINER / "crds" / "trainer.kubeflow.org_trainjobs.yaml",
    TRAINER / "crds" / "trainer.kubeflow.org_clustertrainingruntimes.yaml",
    TRAINER / "crds" / "trainer.kubeflow.org_trainingruntimes.yaml",
    TRAINING_OPERATOR / "crds" / "kubeflow.org_pytorchjobs.yaml",
]
KUBERNETES_VERSION = "1.33.0"  # core objects: kubernetes-validate's schemas for this release (AKS supports it)

# the checks `without=` can turn off
CHECKS = frozenset({"unknown-fields", "types", "bounds", "cel", "metadata", "list-keys", "defaults",
                    "webhook", "sense"})
TORCH_RESERVED_ENV = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")

INT32 = (-(2 ** 31), 2 ** 31 - 1)
INT64 = (-(2 ** 63), 2 ** 63 - 1)
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")
MAX_CONFIGMAP_BYTES = 1024 * 1024
MAX_ANNOTATIONS_BYTES = 256 * 1024
OBJECT_META_FIELDS = {
    "name", "generateName", "namespace", "labels", "annotations", "finalizers", "ownerReferences",
    "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
    "deletionGracePeriodSeconds", "managedFields", "selfLink",
}
# core kinds whose metadata.name is a DNS-1035 label (the rest: DNS-1123 subdomain)
NAME_RULES = {"Service": "dns1035", "Namespace": "dns1123-label"}


# --- paths ---------------------------------------------------------------------------------------

def format_path(parts: Iterable[Any]) -> str:
    """spec.replicatedJobs[0].name: dotted keys, [i] for list indexes ("" for the document)."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "<document>"


def _join(path: str, key: Any) -> str:
    base = "" if path == "<document>" else path
    if isinstance(key, int):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else str(key)


# --- CRDs --------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _crds() -> Dict[Tuple[str, str], Dict[str, Any]]:
    """(apiVersion, kind) -> the openAPIV3Schema of that served version, for every pinned CRD."""
    found = {}
    for path in CRD_FILES:
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version.get("served", True):
                found[(f"{group}/{version['name']}", kind)] = version["schema"]["openAPIV3Schema"]
    return found


def crd_schema(api_version: str, kind: str) -> Optional[Dict[str, Any]]:
    """The pinned CRD's openAPIV3Schema for apiVersion/kind, or None."""
    return _crds().get((api_version, kind))


def strict_schema(schema: Dict[str, Any], without: Iterable[str] = ()) -> Dict[str, Any]:
    """A CRD's structural schema as a strict JSON Schema (2020-12), see the module's docstring.
    The root's `metadata` is left open: ObjectMeta is checked by check_metadata."""
    without = frozenset(without)
    root = _convert(schema, without)
    root.setdefault("properties", {})["metadata"] = {"type": "object"}
    return root


_DROPPED = {"description", "default", "example", "externalDocs", "x-kubernetes-validations",
            "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
            "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string",
            "x-kubernetes-embedded-resource", "nullable", "format"}


def _convert(node: Dict[str, Any], without: frozenset) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "properties":
            out[key] = {name: _convert(sub, without) for name, sub in value.items()}
        elif key == "items" and isinstance(value, dict):
            out[key] = _convert(value, without)
        elif key == "additionalProperties":
            out[key] = _convert(value, without) if isinstance(value, dict) else value
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [_convert(sub, without) for sub in value]
        elif key == "not":
            out[key] = _convert(value, without)
        elif key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") and "bounds" in without:
            continue
        elif key == "type" and "types" in without:
            continue
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        if "types" not in without:
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
            out.pop("allOf", None)
    if node.get("x-kubernetes-embedded-resource"):
        props = out.setdefault("properties", {})
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props.setdefault("metadata", {"type": "object"})
    if node.get("type") == "object" or "properties" in node:
        open_ = node.get("x-kubernetes-preserve-unknown-fields") or "additionalProperties" in node
        if not open_ and "unknown-fields" not in without:
            out["additionalProperties"] = False
    fmt = node.get("format")
    if fmt in ("int32", "int64") and "bounds" not in without:
        low, high = INT32 if fmt == "int32" else INT64
        out["minimum"] = max(out.get("minimum", low), low)
        out["maximum"] = min(out.get("maximum", high), high)
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"] if isinstance(out["type"], str) else [*out["type"], "null"]
    return out


@functools.lru_cache(maxsize=None)
def _validator(api_version: str, kind: str, without: frozenset):
    from jsonschema import Draft202012Validator

    return Draft202012Validator(strict_schema(crd_schema(api_version, kind), without))


def _schema_errors(validator, document) -> List[str]:
    errors = []
    for error in sorted(validator.iter_errors(document), key=lambda e: list(map(str, e.absolute_path))):
        path = format_path(error.absolute_path)
        if error.validator == "additionalProperties" and error.validator_value is False:
            known = set(error.schema.get("properties", {}))
            for key in sorted(set(error.instance) - known):
                errors.append(f"{_join(path, key)}: unknown field (not in the schema)")
        elif error.validator == "anyOf" and error.schema.get("anyOf") == [{"type": "integer"}, {"type": "string"}]:
            errors.append(f"{path}: {json.dumps(error.instance)} is not an integer or a string")
        else:
            errors.append(f"{path}: {error.message}")
    return errors


# --- defaults, CEL, list keys ----------------------------------------------------------------

def apply_defaults(value: Any, schema: Dict[str, Any]) -> Any:
    """The value with the schema's `default`s filled in where a parent object exists (in place)."""
    if isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                apply_defaults(value[name], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for name in value:
                if name not in (schema.get("properties") or {}):
                    apply_defaults(value[name], extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(item, schema["items"])
    return value


@functools.lru_cache(maxsize=None)
def _cel_program(expression: str):
    import celpy

    environment = celpy.Environment()
    return environment.program(environment.compile(expression))


def _cel(expression: str, self_value: Any):
    """(result, error text): the rule evaluated with `self`."""
    import celpy

    try:
        result = _cel_program(expression).evaluate({"self": celpy.json_to_cel(self_value)})
    except Exception as error:  # celpy raises its own errors and lark's; each is the rule's failure
        return None, f"{type(error).__name__}: {error}"
    if isinstance(result, celpy.CELEvalError):
        return None, str(result.args[0] if result.args else result)
    return result, None


def _rules(value: Any, schema: Dict[str, Any], path: str, without: frozenset, errors: List[str]) -> None:
    import celpy

    if value is None:
        return
    if "cel" not in without:
        for rule in schema.get("x-kubernetes-validations") or []:
            expression = rule["rule"]
            if re.search(r"\boldSelf\b", expression):
                continue  # a transition rule: nothing to compare with at creation
            result, problem = _cel(expression, value)
            where = path
            if rule.get("fieldPath"):
                where = ((path if path != "<document>" else "") + rule["fieldPath"]).lstrip(".")
            if problem is not None:
                errors.append(f"{where}: rule {expression!r} could not be evaluated: {problem}")
            elif not isinstance(result, celpy.celtypes.BoolType):
                errors.append(f"{where}: rule {expression!r} gave {result!r}, not a bool")
            elif not result:
                message = rule.get("message") or f"failed rule: {expression}"
                if rule.get("messageExpression"):
                    text, _ = _cel(rule["messageExpression"], value)
                    message = str(text) if text is not None else message
                errors.append(f"{where}: {message} (CEL: {expression})")
    if isinstance(value, list) and "list-keys" not in without:
        kind = schema.get("x-kubernetes-list-type")
        keys = schema.get("x-kubernetes-list-map-keys") or []
        seen: Dict[str, int] = {}
        for index, item in enumerate(value):
            if kind == "map" and isinstance(item, dict):
                ident = json.dumps([item.get(k) for k in keys])
                label = ", ".join(f"{k}={json.dumps(item.get(k))}" for k in keys)
            elif kind == "set":
                ident = label = json.dumps(item, sort_keys=True)
            else:
                continue
            if ident in seen:
                errors.append(f"{_join(path, index)}: duplicate entry {label} (also at [{seen[ident]}]; "
                              f"x-kubernetes-list-type: {kind})")
            seen.setdefault(ident, index)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for name, sub in value.items():
            sub_schema = props.get(name, extra if isinstance(extra, dict) else None)
            if sub_schema is not None:
                if name == "metadata" and "labels" in (sub_schema.get("properties") or {}) and \
                        "metadata" not in without and isinstance(sub, dict):
                    errors.extend(check_labels_annotations(sub, _join(path, name)))
                _rules(sub, sub_schema, _join(path, name), without, errors)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            _rules(item, schema["items"], _join(path, index), without, errors)


# --- ObjectMeta --------------------------------------------------------------------------------

def _qualified_name_problem(key: str) -> Optional[str]:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return f"prefix {prefix!r} must be a DNS-1123 subdomain (lower case, at most 253 characters)"
    if not name or len(name) > 63 or not QUALIFIED_NAME.fullmatch(name):
        return ("name part must be at most 63 characters of [A-Za-z0-9_.-], starting and ending "
                "with an alphanumeric character")
    return None


def check_labels_annotations(meta: Dict[str, Any], path: str) -> List[str]:
    errors = []
    labels = meta.get("labels")
    if isinstance(labels, dict):
        for key, value in labels.items():
            where = f"{path}.labels[{key!r}]"
            problem = _qualified_name_problem(str(key))
            if problem:
                errors.append(f"{where}: label key: {problem}")
            if not isinstance(value, str):
                errors.append(f"{where}: label value {json.dumps(value)} must be a string (quote it in YAML)")
            elif value and (len(value) > 63 or not QUALIFIED_NAME.fullmatch(value)):
                errors.append(f"{where}: label value {value!r} must be empty or at most 63 characters of "
                              "[A-Za-z0-9_.-], starting and ending with an alphanumeric character")
    elif labels is not None:
        errors.append(f"{path}.labels: must be a map of strings")
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        size = 0
        for key, value in annotations.items():
            where = f"{path}.annotations[{key!r}]"
            problem = _qualified_name_problem(str(key))
            if problem:
                errors.append(f"{where}: annotation key: {problem}")
            if not isinstance(value, str):
                errors.append(f"{where}: annotation value {json.dumps(value)} must be a string (quote it in YAML)")
            else:
                size += len(str(key).encode()) + len(value.encode())
        if size > MAX_ANNOTATIONS_BYTES:
            errors.append(f"{path}.annotations: {size} bytes in total, at most {MAX_ANNOTATIONS_BYTES}")
    elif annotations is not None:
        errors.append(f"{path}.annotations: must be a map of strings")
    return errors


def check_metadata(document: Dict[str, Any], name_rule: str = "dns1123-subdomain") -> List[str]:
    """ObjectMeta as the API server checks it on create (name_rule: dns1123-subdomain,
    dns1123-label or dns1035)."""
    meta = document.get("metadata")
    if not isinstance(meta, dict):
        return ["metadata: required, a map with at least `name`"]
    errors = [f"metadata.{key}: unknown field (not in ObjectMeta)" for key in meta if key not in OBJECT_META_FIELDS]
    name = meta.get("name")
    if name is None:
        if not meta.get("generateName"):
            errors.append("metadata.name: required")
    elif not isinstance(name, str):
        errors.append(f"metadata.name: {json.dumps(name)} must be a string")
    else:
        pattern, limit, what = {
            "dns1123-subdomain": (DNS1123_SUBDOMAIN, 253, "a DNS-1123 subdomain (lower-case alphanumerics, '-' and '.')"),
            "dns1123-label": (DNS1123_LABEL, 63, "a DNS-1123 label (lower-case alphanumerics and '-')"),
            "dns1035": (DNS1035_LABEL, 63, "a DNS-1035 label (lower-case alphanumerics and '-', starting with a letter)"),
        }[name_rule]
        if len(name) > limit or not pattern.fullmatch(name):
            errors.append(f"metadata.name: {name!r} must be {what} of at most {limit} characters")
    namespace = meta.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or len(namespace) > 63
                                  or not DNS1123_LABEL.fullmatch(namespace)):
        errors.append(f"metadata.namespace: {namespace!r} must be a DNS-1123 label of at most 63 characters")
    errors.extend(check_labels_annotations(meta, "metadata"))
    return errors


# --- core objects ------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _core_validator(api_version: str, kind: str):
    """kubernetes-validate's strict JSON Schema for a core kind, or None if it has none."""
    import importlib.resources

    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    folder = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema" / \
        f"v{KUBERNETES_VERSION}-local-strict"
    schema_file = folder / f"{kind.lower()}-{group}.json"
    if not schema_file.is_file():
        return None
    schema = json.loads(schema_file.read_text())
    definitions = json.loads((folder / "_definitions.json").read_text())
    registry = Resource.from_contents(schema) @ Registry()
    registry = Resource.from_contents(definitions) @ registry
    return Draft202012Validator(schema, registry=registry)


def check_data_keys(document: Dict[str, Any]) -> List[str]:
    """ConfigMap/Secret `data`/`binaryData`/`stringData`: key syntax, no key twice, 1 MiB in all."""
    errors, seen, size = [], {}, 0
    for field in ("data", "binaryData", "stringData"):
        entries = document.get(field)
        if not isinstance(entries, dict):
            continue
        for key, value in entries.items():
            where = f"{field}[{key!r}]"
            key = str(key)
            if len(key) > 253 or not CONFIGMAP_KEY.fullmatch(key) or key in (".", "..") or key.startswith(".."):
                errors.append(f"{where}: key must be at most 253 characters of [-._a-zA-Z0-9], "
                              "not '.' or '..' and not starting with '..'")
            if key in seen and not (document.get("kind") == "Secret" and {seen[key], field} == {"data", "stringData"}):
                errors.append(f"{where}: key also in {seen[key]}")
            seen.setdefault(key, field)
            if isinstance(value, str):
                size += len(value.encode())
    if size > MAX_CONFIGMAP_BYTES:
        errors.append(f"data: {size} bytes in total, at most {MAX_CONFIGMAP_BYTES} (1 MiB)")
    return errors


# --- admission webhooks and sense -------------------------------------------------------------

def check_webhooks(document: Dict[str, Any]) -> List[str]:
    """What the operators' validating webhooks reject on create (read in their source at the
    pinned tags): Trainer v2.3.0's Torch plugin (`torch.go` Validate: trainer.env must not set
    TorchRunReservedEnvNames; applied to every TrainJob here, not only torch runtimes'), the
    training-operator v1.9.4 PyTorchJob webhook (`pytorchjob_webhook.go`: name a DNS-1035 label,
    only Master/Worker, Master replicas exactly 1, Worker at least 1, a container `pytorch`,
    every container an image)."""
    errors: List[str] = []
    spec = document.get("spec") if isinstance(document.get("spec"), dict) else {}
    name = (document.get("metadata") or {}).get("name")
    if document.get("kind") == "TrainJob":
        env = (spec.get("trainer") or {}).get("env") or []
        reserved = sorted({e.get("name") for e in env if isinstance(e, dict)} & set(TORCH_RESERVED_ENV))
        if reserved:
            errors.append(f"spec.trainer.env: must not have reserved envs, invalid envs configured: {reserved} "
                          "(the Torch plugin sets them; webhook)")
        # the JobSet the Trainer makes of it (named as the TrainJob, replicated job `node`, one Job of
        # numNodes completions), as JobSet's webhook checks it: the longest Job and pod names
        # (placement.GenJobName / GenPodName + a 5-character suffix) must be DNS-1035 labels
        nodes = (spec.get("trainer") or {}).get("numNodes", 1)
        if isinstance(name, str) and isinstance(nodes, int):
            for what, generated in (("job", f"{name}-node-0"), ("pod", f"{name}-node-0-{max(nodes - 1, 0)}-abcde")):
                if len(generated) > 63:
                    errors.append(f"metadata.name: JobSet name is too long, {what} names generated for this JobSet "
                                  f"will exceed 63 characters ({generated!r}; JobSet webhook)")
    elif document.get("kind") == "PyTorchJob":
        if isinstance(name, str) and (len(name) > 63 or not DNS1035_LABEL.fullmatch(name)):
            errors.append(f"metadata.name: {name!r} should match a DNS-1035 label (webhook)")
        # the operator makes a headless Service per pod, <name>-<role>-<index>: a DNS-1035 label
        for role, replica in (spec.get("pytorchReplicaSpecs") or {}).items():
            count = replica.get("replicas", 1) if isinstance(replica, dict) else 1
            service = f"{name}-{str(role).lower()}-{max(count - 1, 0) if isinstance(count, int) else 0}"
            if isinstance(name, str) and len(service) > 63:
                errors.append(f"metadata.name: the Service {service!r} the operator creates for "
                              f"{role} exceeds 63 characters (the API server refuses it)")
        replica_specs = spec.get("pytorchReplicaSpecs")
        if not isinstance(replica_specs, dict) or not replica_specs:
            return errors + ["spec.pytorchReplicaSpecs: must be required (webhook)"]
        for role, replica in replica_specs.items():
            where = f"spec.pytorchReplicaSpecs.{role}"
            if role not in ("Master", "Worker"):
                errors.append(f"{where}: unsupported replica type {role!r}: Master or Worker (webhook)")
            replica = replica if isinstance(replica, dict) else {}
            containers = ((replica.get("template") or {}).get("spec") or {}).get("containers") or []
            for index, container in enumerate(containers):
                if isinstance(container, dict) and not container.get("image"):
                    errors.append(f"{where}.template.spec.containers[{index}].image: must be required (webhook)")
            if not any(isinstance(c, dict) and c.get("name") == "pytorch" for c in containers):
                errors.append(f"{where}.template.spec.containers: must have at least one container with name "
                              "pytorch (webhook)")
            replicas = replica.get("replicas", 1)
            if role == "Master" and replicas != 1:
                errors.append(f"{where}.replicas: must be 1 (webhook)")
            elif role == "Worker" and isinstance(replicas, int) and replicas < 1:
                errors.append(f"{where}.replicas: must be at least 1 (webhook)")
    return errors


def check_sense(document: Dict[str, Any]) -> List[str]:
    """Counts the API server ACCEPTS but that make a job that trains nothing: the v2.3.0 TrainJob
    CRD has no minimum on trainer.numNodes / numProcPerNode and no webhook checks them (JobSet
    then makes an indexed Job of 0 completions, or torchrun gets --nproc-per-node 0)."""
    errors: List[str] = []
    if document.get("kind") == "TrainJob":
        trainer = (document.get("spec") or {}).get("trainer") or {}
        for field in ("numNodes", "numProcPerNode"):
            value = trainer.get(field)
            if isinstance(value, int) and not isinstance(value, bool) and value < 1:
                errors.append(f"spec.trainer.{field}: {value} is less than 1 (the API server accepts it: "
                              "the pinned CRD has no minimum; the job would train nothing)")
    return errors


# --- the entry points --------------------------------------------------------------------------

def validate(document: Any, without: Iterable[str] = ()) -> List[str]:
    """Every problem of one Kubernetes document, each `path: message`; [] when it would be
    accepted. The schema is picked by apiVersion/kind: a pinned CRD, else a core kind."""
    without = frozenset(without)
    unknown = without - CHECKS
    if unknown:
        raise ValueError(f"unknown checks {sorted(unknown)}; known: {sorted(CHECKS)}")
    if not isinstance(document, dict):
        return [f"<document>: a Kubernetes object is a map, not {type(document).__name__}"]
    api_version, kind = document.get("apiVersion"), document.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return ["<document>: apiVersion and kind are required strings"]
    schema = crd_schema(api_version, kind)
    if schema is not None:
        document = copy.deepcopy(document)
        if "defaults" not in without:
            apply_defaults(document, schema)
        errors = _schema_errors(_validator(api_version, kind, without), document)
        if "metadata" not in without:
            errors.extend(check_metadata(document))
        _rules(document, schema, "<document>", without, errors)
        if "webhook" not in without:
            errors.extend(check_webhooks(document))
        if "sense" not in without:
            errors.extend(check_sense(document))
        return errors
    known_kinds = sorted({k for (_, k) in _crds()})
    if any(k == kind for (_, k) in _crds()):
        served = sorted(v for (v, k) in _crds() if k == kind)
        return [f"apiVersion: {api_version!r} is not served for {kind} by the pinned CRD (served: {served})"]
    validator = _core_validator(api_version, kind)
    if validator is None:
        return [f"kind: no schema for {api_version} {kind} (pinned CRDs: {known_kinds}; "
                f"core kinds of Kubernetes {KUBERNETES_VERSION})"]
    errors = _schema_errors(validator, document)
    if "metadata" not in without:
        errors.extend(check_metadata(document, NAME_RULES.get(kind, "dns1123-subdomain")))
    if kind in ("ConfigMap", "Secret") and api_version == "v1":
        errors.extend(check_data_keys(document))
    return errors


def load_documents(text: str) -> List[Dict[str, Any]]:
    """The documents of a (multi-document) YAML file, empty ones left out, as kubectl reads it."""
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


def validate_stream(text: str, without: Iterable[str] = ()) -> List[str]:
    """validate() for every document of a YAML stream; each error names its document:
    `TrainJob/ddp (document 2): spec.trainer.numNodes: ...`. Two objects of one kind, namespace
    and name are an error too (the second would overwrite the first)."""
    errors, seen = [], {}
    for number, document in enumerate(load_documents(text), 1):
        meta = document.get("metadata") if isinstance(document, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        kind = document.get("kind") if isinstance(document, dict) else None
        label = f"{kind}/{name} (document {number})"
        ident = (kind, (meta or {}).get("namespace"), name) if isinstance(meta, dict) else None
        if ident is not None and ident in seen:
            errors.append(f"{label}: metadata.name: the same {kind} as document {seen[ident]}")
        if ident is not None:
            seen.setdefault(ident, number)
        errors.extend(f"{label}: {error}" for error in validate(document, without))
    return errors
