"""Hostile values through every Kubernetes setting and every spec field that reaches job.yaml.

Each value is either a located error (file:line:col, the field, what was expected; nothing
written, no traceback) or a job.yaml that kubectl's YAML reader (PyYAML) reads back with the
value exactly where the spec put it, and that passes the pinned CRDs as strict schemas
(tests/kube_schema.py). Values Kubernetes itself would refuse when the job or its pods are
created (a label value over 63 characters, an image with a space, a node selector value with
/ ...) are errors at compile time: the CRD schemas do not see inside a pod's node selector,
tolerations or image, so validate_stream is not the line of defence for them
(test_the_crd_schemas_alone_do_not_catch_what_compile_refuses shows it).

Most cases compile in-process (build(), the function `trainspec compile` calls); a few go
through the command line for the exit code and the absence of a traceback.
"""

from __future__ import annotations

import copy
import re
import shlex
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest
import yaml

from conftest import REPO, ts, yq
import kube_schema
from trainspec.build import build

CODE = REPO / "examples" / "ddp"
# YAML's special words and characters, shell metacharacters, spaces at the ends, bidi and control
# characters (no NUL: the loader refuses it), a 10k-character string, and Kubernetes' bounds
STRINGS = ["ok", "yes", "no", "null", "~", "0x1F", "1e3", "*a", "&a", "!!python/object", "- x", "a: b", "#", "\n",
           " lead", "trail ", "\u202eevil\u202c", "עברית", "bell\x07\x1b[31m", "\x7f\x85\u2028", "x" * 10000,
           "", "$(id);`id`", "a" * 63, "a" * 64, "x/y", "UPPER", "with space", "a.b_c-d", "-x", "x-"]


def flow(value: Any) -> str:
    """A value as YAML flow text, every string double-quoted with everything escaped."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return yq(value)
    if isinstance(value, list):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    # a key over 1024 characters is YAML only as an explicit key (`? key : value`)
    return "{" + ", ".join(f"{'? ' if len(str(k)) > 1000 else ''}{yq(str(k))}: {flow(v)}" for k, v in value.items()) + "}"


def spec_text(settings: Dict[str, Any], *, name: Any = "job", image: Any = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
              command: str = "python train.py", env: Optional[Dict[str, Any]] = None, description: Any = None,
              inputs: Optional[Dict[str, Any]] = None) -> str:
    lines = ["version: 1", f"name: {flow(name)}"]
    if description is not None:
        lines.append(f"description: {flow(description)}")
    lines += [f"code: {yq(str(CODE))}", f"command: {yq(command)}",
              "resources: {nodes: 2, sku: Standard_ND96isr_H100_v5}", f"environment: {{image: {flow(image)}}}"]
    if env:
        lines.append(f"env: {flow(env)}")
    if inputs:
        lines.append(f"inputs: {flow(inputs)}")
    lines += ["targets:", f"  kubernetes: {flow(settings)}"]
    return "\n".join(lines) + "\n"


def compile_text(text: str, tmp: Path) -> Tuple[List[str], Optional[List[dict]], Optional[str]]:
    """(error lines, job.yaml's documents, job.yaml's text): in-process, as `trainspec compile` does."""
    folder = Path(tempfile.mkdtemp(dir=tmp))
    (folder / "spec.yaml").write_text(text, encoding="utf-8")
    outcome = build(str(folder / "spec.yaml"), folder / "out", ["kubernetes"])
    errors = [d.render() for d in outcome.diagnostics if d.is_error]
    if errors:
        assert not outcome.artifacts, "an error and an output"
        return errors, None, None
    [artifact] = outcome.artifacts
    [job_file] = artifact.files
    text = job_file.data.decode("utf-8")
    return [], list(yaml.safe_load_all(text)), text


def pod_of(job: dict) -> dict:
    if job["kind"] == "TrainJob":
        return job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0][
            "template"]["spec"]["template"]["spec"]
    return job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]


def container_of(job: dict) -> dict:
    return job["spec"]["trainer"] if job["kind"] == "TrainJob" else pod_of(job)["containers"][0]


def line_words(job: dict) -> List[str]:
    """The container's `bash -c` line as the shell splits it (shlex, POSIX rules)."""
    bash, dash_c, line = container_of(job)["command"]
    assert (bash, dash_c) == ("bash", "-c")
    return shlex.split(line)


def limits_of(job: dict) -> dict:
    container = container_of(job)
    return (container.get("resourcesPerNode") or container.get("resources") or {}).get("limits", {})


# field -> (how the spec says it: value -> spec_text keywords, where job.yaml carries it: job -> value,
#           the error's field as diagnostics print it: value -> dotted path)
def _setting(key):
    return lambda v: {"settings": {key: v}}


FIELDS = {
    "name": (lambda v: {"name": v}, lambda docs: docs[-1]["metadata"]["name"], lambda v: "name"),
    "description": (lambda v: {"description": v}, None, lambda v: "description"),
    "command": (lambda v: {"command": shlex.join(["python", "train.py", v])},
                lambda docs: line_words(docs[-1])[-1], lambda v: "command"),
    "env-value": (lambda v: {"env": {"HOSTILE": v}},
                  lambda docs: {e["name"]: e["value"] for e in container_of(docs[-1])["env"]}["HOSTILE"],
                  lambda v: "env.HOSTILE"),
    "env-key": (lambda v: {"env": {v: "x"}},
                lambda docs: [e["name"] for e in container_of(docs[-1])["env"]][0], lambda v: "env"),
    "input-path": (lambda v: {"inputs": {"data": {"path": "/" + v}}, "command": "python train.py {{ inputs.data }}"},
                   lambda docs: "/" + line_words(docs[-1])[-1][1:], lambda v: "inputs.data.path"),
    "image": (lambda v: {"image": v}, lambda docs: container_of(docs[-1])["image"], lambda v: "environment.image"),
    "namespace": (_setting("namespace"), lambda docs: {d["metadata"]["namespace"] for d in docs} == {docs[-1][
        "metadata"]["namespace"]} and docs[-1]["metadata"]["namespace"], lambda v: "targets.kubernetes.namespace"),
    "queue": (_setting("queue"), lambda docs: docs[-1]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
              lambda v: "targets.kubernetes.queue"),
    "runtime": (_setting("runtime"), lambda docs: docs[-1]["spec"]["runtimeRef"]["name"],
                lambda v: "targets.kubernetes.runtime"),
    "service_account": (_setting("service_account"), lambda docs: pod_of(docs[-1])["serviceAccountName"],
                        lambda v: "targets.kubernetes.service_account"),
    "image_pull_secrets": (lambda v: {"settings": {"image_pull_secrets": [v]}},
                           lambda docs: pod_of(docs[-1])["imagePullSecrets"][0]["name"],
                           lambda v: "targets.kubernetes.image_pull_secrets"),
    "node_selector-key": (lambda v: {"settings": {"node_selector": {v: "gpu"}}},
                          lambda docs: list(pod_of(docs[-1])["nodeSelector"])[-1], lambda v: "targets.kubernetes.node_selector"),
    "node_selector-value": (lambda v: {"settings": {"node_selector": {"agentpool": v}}},
                            lambda docs: pod_of(docs[-1])["nodeSelector"]["agentpool"],
                            lambda v: "targets.kubernetes.node_selector.agentpool"),
    "toleration-key": (lambda v: {"settings": {"tolerations": [{"key": v, "value": "ml"}]}},
                       lambda docs: pod_of(docs[-1])["tolerations"][-1]["key"], lambda v: "targets.kubernetes.tolerations"),
    "toleration-value": (lambda v: {"settings": {"tolerations": [{"key": "dedicated", "value": v}]}},
                         lambda docs: pod_of(docs[-1])["tolerations"][-1].get("value", ""),
                         lambda v: "targets.kubernetes.tolerations"),
    "toleration-effect": (lambda v: {"settings": {"tolerations": [{"key": "dedicated", "effect": v}]}},
                          lambda docs: pod_of(docs[-1])["tolerations"][-1]["effect"],
                          lambda v: "targets.kubernetes.tolerations"),
    "toleration-operator": (lambda v: {"settings": {"tolerations": [{"key": "dedicated", "operator": v}]}},
                            lambda docs: pod_of(docs[-1])["tolerations"][-1]["operator"],
                            lambda v: "targets.kubernetes.tolerations"),
    "pvc-claim": (lambda v: {"settings": {"code": {"pvc": {"claim": v}}}},
                  lambda docs: next(vol for vol in pod_of(docs[-1])["volumes"] if vol["name"] == "trainspec-code")[
                      "persistentVolumeClaim"]["claimName"], lambda v: "targets.kubernetes.code.pvc.claim"),
    "pvc-sub_path": (lambda v: {"settings": {"code": {"pvc": {"claim": "code", "sub_path": v}}}},
                     lambda docs: next(m for m in container_mounts(docs[-1]) if m["name"] == "trainspec-code")[
                         "subPath"], lambda v: "targets.kubernetes.code.pvc.sub_path"),
    "image-path": (lambda v: {"settings": {"code": {"image": {"path": "/" + v}}}},
                   lambda docs: "/" + line_words(docs[-1])[1][1:], lambda v: "targets.kubernetes.code.image.path"),
    "rdma_resource": (_setting("rdma_resource"), lambda docs: [k for k in limits_of(docs[-1]) if k != "nvidia.com/gpu"][0],
                      lambda v: "targets.kubernetes.rdma_resource"),
    "python": (_setting("python"), lambda docs: line_words(docs[-1])[4:line_words(docs[-1]).index("-I")],
               lambda v: "targets.kubernetes.python"),
}
# what the spec wrote -> what job.yaml must carry (where it is not the string itself)
CARRIED = {"input-path": lambda v: "/" + v, "image-path": lambda v: "/" + v, "python": shlex.split}


def container_mounts(job: dict) -> List[dict]:
    return (pod_of(job)["containers"][0]["volumeMounts"])


# (field, value) pairs Kubernetes refuses when the job or its pods are created, or that would not
# run: each must be an error at compile time (the rest of the table may go either way)
MUST_REFUSE = {
    ("name", "a" * 64), ("name", "UPPER"), ("name", "x-"),
    ("image", "with space"), ("image", " lead"), ("image", "trail "), ("image", "UPPER"), ("image", "x" * 10000),
    ("image", "\n"), ("image", ""), ("image", "-x"),
    ("namespace", "a" * 64), ("namespace", "UPPER"), ("namespace", "\n"),
    ("queue", "a" * 64), ("queue", "x/y"), ("queue", "with space"), ("queue", "trail "), ("queue", "-x"),
    ("image_pull_secrets", "UPPER"), ("image_pull_secrets", "ok\n"), ("image_pull_secrets", "x/y"),
    ("node_selector-key", "a" * 64), ("node_selector-key", "ok\n"), ("node_selector-key", "with space"),
    ("node_selector-value", "a" * 64), ("node_selector-value", "x/y"), ("node_selector-value", "ok\n"),
    ("node_selector-value", "x" * 10000), ("node_selector-value", "-x"),
    ("toleration-key", "a" * 64), ("toleration-key", "x-"), ("toleration-value", "a" * 64),
    ("toleration-value", "x/y"), ("toleration-effect", "UPPER"), ("toleration-operator", "yes"),
    ("toleration-key", ""),  # no key with operator Equal
    ("pvc-claim", "UPPER"), ("pvc-sub_path", "x/../.."), ("pvc-sub_path", ""),
    ("rdma_resource", "ok"), ("rdma_resource", "a" * 64), ("rdma_resource", "x/" + "a" * 64),
    ("python", ""), ("python", "\n"),
    ("env-key", "PET_NODE_RANK"), ("env-key", "ok\n"), ("env-key", "a: b"),
}
# and values that are fine for Kubernetes, YAML-special or not: each must compile and come back exactly
MUST_CARRY = {
    ("name", "a" * 63), ("queue", "yes"), ("queue", "null"), ("queue", "0x1F"), ("queue", "1e3"), ("queue", "a" * 63),
    ("node_selector-key", "yes"), ("node_selector-key", "kubernetes.azure.com/agentpool"),
    ("node_selector-value", "null"), ("node_selector-value", "no"), ("node_selector-value", ""),
    ("node_selector-value", "a" * 63), ("toleration-value", "1e3"),
    ("env-value", "x" * 10000), ("env-value", "\n"), ("env-value", "bell\x07\x1b[31m"), ("env-value", "- x"),
    ("command", "!!python/object"), ("command", "\u202eevil\u202c"), ("input-path", "a: b"),
    ("input-path", "$(id);`id`"), ("image-path", "with space"), ("image-path", "#"), ("pvc-sub_path", "with space"),
    ("python", "$(id);`id`"), ("image", "ok"), ("rdma_resource", "x/y"), ("namespace", "a" * 63),
    ("runtime", "yes"), ("service_account", "null"), ("pvc-claim", "no"),
    ("toleration-operator", "Exists"), ("toleration-effect", "NoExecute"),
}
CASES = [(field, value, api) for field, value in sorted(
    {(field, value) for field in FIELDS for value in STRINGS} | MUST_REFUSE | MUST_CARRY,
    key=lambda c: (c[0], len(c[1]), c[1])) for api in ("trainjob", "pytorchjob")
    if not (field == "runtime" and api == "pytorchjob")]  # runtime: a TrainJob's ClusterTrainingRuntime


def _id(case) -> str:
    field, value, api = case
    return f"{api}-{field}-{value[:20]!r}" + (f"-len{len(value)}" if len(value) > 20 else "")


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_a_hostile_value_is_a_located_error_or_carried_exactly_in_a_valid_job(tmp_path, case):
    field, value, api = case
    say, carried, where = FIELDS[field]
    kw = say(value)
    settings = {"api": api, **kw.pop("settings", {})}
    errors, docs, text = compile_text(spec_text(settings, **kw), tmp_path)
    if errors:
        assert (field, value) not in MUST_CARRY, errors
        field_re = re.escape(where(value))
        assert any(re.match(rf"/\S*spec\.yaml:\d+:\d+: error: {field_re}\b", e) for e in errors), errors
        return
    assert (field, value) not in MUST_REFUSE, f"{field}={value!r} compiled: Kubernetes refuses it when it creates the job"
    assert kube_schema.validate_stream(text) == []
    if carried is not None:
        assert carried(docs) == CARRIED.get(field, lambda v: v)(value)


TIMEOUTS = [(10 ** 30, None), (2 ** 63, None), (2 ** 63 - 1, 2 ** 63 - 1), (-1, None), (0, None), (1.5, None),
            ("1e9", None), (True, None), (False, None), ("12h", 43200), ("0h", None), ("", None), ([1], None),
            ("99999999999999999999d", None), (1, 1), ("yes", None), (None, "absent")]


@pytest.mark.parametrize("api", ["trainjob", "pytorchjob"])
@pytest.mark.parametrize("value, seconds", TIMEOUTS, ids=[repr(v)[:24] for v, _ in TIMEOUTS])
def test_a_timeout_is_a_located_error_or_an_int64_deadline(tmp_path, value, seconds, api):
    errors, docs, text = compile_text(spec_text({"api": api, "timeout": value}), tmp_path)
    if seconds is None:
        assert any(re.match(r"/\S*spec\.yaml:\d+:\d+: error: targets\.kubernetes\.timeout: ", e) for e in errors), errors
        return
    assert errors == [] and kube_schema.validate_stream(text) == []
    spec = docs[-1]["spec"]
    got = (spec if api == "trainjob" else spec["runPolicy"]).get("activeDeadlineSeconds", "absent")
    assert got == seconds


@pytest.mark.parametrize("toleration, ok", [
    ({"operator": "Exists"}, True),  # tolerates every taint
    ({"key": "k", "operator": "Exists"}, True),
    ({"key": "k", "operator": "Exists", "value": "v"}, False),  # "value must be empty when operator is Exists"
    ({"value": "v"}, False),  # "operator must be Exists when key is empty"
    ({}, False),
    ({"key": "example.com/" + "a" * 63, "value": "v", "effect": "NoExecute"}, True),
    ({"key": "a" * 254 + "/k"}, False),  # the prefix: a DNS subdomain of at most 253
])
def test_tolerations_kubernetes_refuses_are_errors(tmp_path, toleration, ok):
    errors, docs, text = compile_text(spec_text({"tolerations": [toleration]}), tmp_path)
    if not ok:
        assert any(re.match(r"/\S*spec\.yaml:\d+:\d+: error: targets\.kubernetes\.tolerations\[0\]", e)
                   for e in errors), errors
        return
    assert errors == [] and kube_schema.validate_stream(text) == []
    assert pod_of(docs[-1])["tolerations"][-1] == {"operator": "Equal", **toleration}


def test_nvidia_gpu_as_the_rdma_resource_is_an_error_not_a_limit_of_one_gpu(tmp_path):
    """Bug: `rdma_resource: nvidia.com/gpu` compiled, and the limits dict's second write made the
    job ask for 1 GPU per node instead of 8."""
    errors, _, _ = compile_text(spec_text({"rdma_resource": "nvidia.com/gpu"}), tmp_path)
    assert any("targets.kubernetes.rdma_resource: 'nvidia.com/gpu' is not an extended resource: it is the GPU "
               "resource" in e for e in errors), errors


def test_the_crd_schemas_alone_do_not_catch_what_compile_refuses(tmp_path):
    """validate_stream is not the line of defence for what sits inside a pod: a valid job with the
    values above written in by hand still passes it, so compile must (and does) refuse them."""
    _, docs, _ = compile_text(spec_text({"image_pull_secrets": ["acr"], "node_selector": {"agentpool": "gpu"}}),
                              tmp_path)
    job = copy.deepcopy(docs[-1])
    pod = pod_of(job)
    pod["nodeSelector"] = {"a" * 64: "x/y", "k": "v\n"}
    pod["tolerations"] = [{"operator": "Equal", "value": "v"}, {"key": "k", "operator": "Exists", "value": "v"}]
    pod["imagePullSecrets"] = [{"name": "acr\n"}]
    job["spec"]["trainer"]["image"] = "Py Torch"
    job["spec"]["trainer"]["resourcesPerNode"]["limits"]["ib"] = 1
    assert kube_schema.validate(job) == []
    for settings, image in [({"node_selector": {"a" * 64: "x"}}, None), ({"node_selector": {"k": "x/y"}}, None),
                            ({"node_selector": {"k": "v\n"}}, None), ({"tolerations": [{"value": "v"}]}, None),
                            ({"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}, None),
                            ({"image_pull_secrets": ["acr\n"]}, None), ({"rdma_resource": "ib"}, None),
                            ({}, "Py Torch")]:
        errors, _, _ = compile_text(spec_text(settings, **({"image": image} if image else {})), tmp_path)
        assert errors, (settings, image)


@pytest.mark.parametrize("settings, image, where", [
    ({"node_selector": {"k": "x/y"}}, None, "targets.kubernetes.node_selector.k: 'x/y' is not a label value"),
    ({"timeout": 10 ** 30}, None, "targets.kubernetes.timeout: 1000000000000000000000000000000 seconds is more than"),
    ({}, "py torch:latest", "environment.image: 'py torch:latest' is not an image reference"),
    ({"image_pull_secrets": ["acr\n"]}, None, "targets.kubernetes.image_pull_secrets[0]: 'acr\\n' is not a Kubernetes name"),
])
def test_the_command_line_exits_1_with_the_located_error_and_writes_nothing(tmp_path, settings, image, where):
    (tmp_path / "spec.yaml").write_text(spec_text(settings, **({"image": image} if image else {})), encoding="utf-8")
    proc = ts("compile", "spec.yaml", "-o", "out", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert re.search(r"^spec\.yaml:\d+:\d+: error: " + re.escape(where), proc.stderr, re.M), proc.stderr
    assert not (tmp_path / "out").exists()
