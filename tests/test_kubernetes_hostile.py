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

from conftest import REPO, flow, ts, yq
import kube_schema
from trainspec.registry.build import build

CODE = REPO / "examples" / "ddp"
# YAML's special words and characters, shell metacharacters, spaces at the ends, bidi and control
# characters (no NUL: the loader refuses it), a 10k-character string, and Kubernetes' bounds
STRINGS = ["ok", "yes", "no", "null", "~", "0x1F", "1e3", "*a", "&a", "!!python/object", "- x", "a: b", "#", "\n",
           " lead", "trail ", "\u202eevil\u202c", "עברית", "bell\x07\x1b[31m", "\x7f\x85\u2028", "x" * 10000,
           "", "$(id);`id`", "a" * 63, "a" * 64, "x/y", "UPPER", "with space", "a.b_c-d", "-x", "x-"]


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
    """The container's `bash -c` line as the shell splits it (shlex, POSIX rules), from its `cd`:
    with the code in a ConfigMap, the copy of it the command starts in comes first (python -c
    <the copy> /trainspec/code /trainspec/work &&)."""
    from trainspec.targets.kubernetes.lower import _COPY

    bash, dash_c, line = container_of(job)["command"]
    assert (bash, dash_c) == ("bash", "-c")
    words = shlex.split(line)
    return words[words.index(_COPY) + 4:] if _COPY in words else words


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
                          lambda docs: list(pod_of(docs[-1])["nodeSelector"])[-1],
                          lambda v: "targets.kubernetes.node_selector"),
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
    "volume-claim": (lambda v: {"settings": {"volumes": {"data": {"pvc": {"claim": v}}}},
                     "inputs": {"data": {"path": "/data"}}, "command": "python train.py {{ inputs.data }}"},
                     lambda docs: next(vol for vol in pod_of(docs[-1])["volumes"] if vol["name"].endswith("data"))[
                         "persistentVolumeClaim"]["claimName"], lambda v: "targets.kubernetes.volumes.data.pvc.claim"),
    "volume-sub_path": (lambda v: {"settings": {"volumes": {"data": {"pvc": {"claim": "datasets", "sub_path": v}}}},
                        "inputs": {"data": {"path": "/data"}}, "command": "python train.py {{ inputs.data }}"},
                        lambda docs: next(m for m in container_mounts(docs[-1]) if m["name"].endswith("data"))[
                            "subPath"], lambda v: "targets.kubernetes.volumes.data.pvc.sub_path"),
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
    ("name", "a" * 64), ("name", "a" * 55), ("name", "UPPER"), ("name", "x-"),  # 55: its pods or Services would pass 63
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
    ("name", "a" * 48), ("queue", "yes"), ("queue", "null"), ("queue", "0x1F"), ("queue", "1e3"), ("queue", "a" * 63),
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
VALUES = {field: sorted({*STRINGS, *(v for f, v in MUST_REFUSE | MUST_CARRY if f == field)}, key=lambda v: (len(v), v))
          for field in FIELDS}


@pytest.mark.parametrize("api", ["trainjob", "pytorchjob"])
@pytest.mark.parametrize("field", [f for f in FIELDS])
def test_hostile_values_are_located_errors_or_carried_exactly_in_a_valid_job(tmp_path, field, api):
    """Every value of VALUES[field] (the strings above, and the field's own must-refuse and
    must-carry cases); one test per field and API, every wrong outcome listed at the end."""
    say, carried, where = FIELDS[field]
    if field == "runtime" and api == "pytorchjob":
        carried = None  # a PyTorchJob has no runtime: its errors are checked, nothing is carried
    wrong = []
    for value in VALUES[field]:
        kw = say(value)
        settings = {"api": api, **kw.pop("settings", {})}
        errors, docs, text = compile_text(spec_text(settings, **kw), tmp_path)
        case = f"{field}={value[:40]!r}"
        if errors:
            located = any(re.match(rf"/\S*spec\.yaml:\d+:\d+: error: {re.escape(where(value))}\b", e) for e in errors)
            if (field, value) in MUST_CARRY or not located:
                wrong.append(f"{case}: {errors}")
            continue
        if (field, value) in MUST_REFUSE:
            wrong.append(f"{case} compiled: Kubernetes refuses it when it creates the job or its pods")
        problems = kube_schema.validate_stream(text)
        if problems:
            wrong.append(f"{case}: job.yaml fails the CRDs: {problems}")
        elif carried is not None and carried(docs) != CARRIED.get(field, lambda v: v)(value):
            wrong.append(f"{case} came back as {carried(docs)!r}")
    assert wrong == [], "\n".join(wrong)


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


@pytest.mark.parametrize("resource", ["nvidia.com/gpu", "amd.com/gpu"])
def test_nvidia_gpu_as_the_rdma_resource_is_an_error_not_a_limit_of_one_gpu(tmp_path, resource):
    """Bug: `rdma_resource: nvidia.com/gpu` compiled, and the limits dict's second write made the
    job ask for 1 GPU per node instead of 8 (amd.com/gpu: the same on an AMD size)."""
    errors, _, _ = compile_text(spec_text({"rdma_resource": resource}), tmp_path)
    assert any(f"targets.kubernetes.rdma_resource: '{resource}' is not an extended resource: it is a GPU "
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
    ({"image_pull_secrets": ["acr\n"]}, None,
     "targets.kubernetes.image_pull_secrets[0]: 'acr\\n' is not a Kubernetes name"),
])
def test_the_command_line_exits_1_with_the_located_error_and_writes_nothing(tmp_path, settings, image, where):
    (tmp_path / "spec.yaml").write_text(spec_text(settings, **({"image": image} if image else {})), encoding="utf-8")
    proc = ts("compile", "spec.yaml", "-o", "out", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert re.search(r"^spec\.yaml:\d+:\d+: error: " + re.escape(where), proc.stderr, re.M), proc.stderr
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- any settings mapping


def _settings_maps():
    from hypothesis import strategies as st

    text = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=20)
    hostile = st.one_of(st.sampled_from(STRINGS), text)
    label = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?\Z")
    key = st.from_regex(r"\A([a-z0-9]{1,8}(\.[a-z]{2,4})?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,10}[A-Za-z0-9])?\Z")
    value = st.from_regex(r"\A([A-Za-z0-9]([-A-Za-z0-9_.]{0,10}[A-Za-z0-9])?)?\Z")
    # valid values seven times as often as hostile ones, so that about half the mappings compile
    def mostly(good):
        return st.integers(0, 7).flatmap(lambda i: hostile if i == 0 else good)

    names, keys, values = mostly(label), mostly(key), mostly(value)
    resource = mostly(st.from_regex(r"\A[a-z0-9]{1,8}(\.[a-z]{2,4})?/[a-z0-9]([-a-z0-9_.]{0,10}[a-z0-9])?\Z"))
    effects = mostly(st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]))
    toleration = st.one_of(
        st.fixed_dictionaries({"key": keys}, optional={"value": values, "effect": effects}),
        st.fixed_dictionaries({"operator": st.just("Exists")}, optional={"key": keys, "effect": effects}),
        st.fixed_dictionaries({}, optional={"key": keys, "value": values, "effect": effects,
                                            "operator": mostly(st.sampled_from(["Equal", "Exists"]))}))
    code = st.one_of(
        st.fixed_dictionaries({"pvc": st.fixed_dictionaries({"claim": names}, optional={"sub_path": hostile})}),
        st.fixed_dictionaries({"image": st.fixed_dictionaries({"path": mostly(hostile.map("/".__add__))})}))
    return st.fixed_dictionaries({}, optional={
        "api": st.sampled_from(["trainjob", "pytorchjob", "trainjob", "pytorchjob", "TrainJob"]),
        "namespace": names, "queue": mostly(value.filter(bool)), "runtime": names, "service_account": names,
        "image_pull_secrets": st.lists(names, max_size=2), "node_selector": st.dictionaries(keys, values, max_size=2),
        "tolerations": st.lists(toleration, max_size=2), "code": code,
        "rdma_resource": resource,
        "timeout": mostly(st.one_of(st.integers(1, 2 ** 63 - 1), st.sampled_from(["12h", "2d", "1h30m"]))) | st.one_of(
            st.integers(-5, 2 ** 70), st.sampled_from(["1e9", 1.5, True])),
        "python": st.one_of(st.sampled_from(["python3", "python3 -u", "'/opt/my env/bin/python'"]), hostile)})


def check_any_settings(settings: Dict[str, Any], tmp: Path) -> None:
    """Located errors only (at least one under targets.kubernetes), or a CRD-valid job.yaml that
    carries every setting exactly."""
    errors, docs, text = compile_text(spec_text(settings), tmp)
    if errors:
        assert all(re.match(r"/\S*spec\.yaml:\d+:\d+: error: ", e) for e in errors), errors
        assert any(re.match(r"/\S*spec\.yaml:\d+:\d+: error: targets\.kubernetes\b", e) for e in errors), errors
        return
    assert kube_schema.validate_stream(text) == []
    job = docs[-1]
    pod = pod_of(job)
    assert job["kind"] == {"trainjob": "TrainJob", "pytorchjob": "PyTorchJob"}[settings.get("api", "trainjob")]
    assert [d["metadata"].get("namespace") for d in docs] == [settings.get("namespace")] * len(docs)
    assert job["metadata"]["labels"].get("kueue.x-k8s.io/queue-name") == settings.get("queue")
    if job["kind"] == "TrainJob":
        assert job["spec"]["runtimeRef"]["name"] == settings.get("runtime", "torch-distributed")
    assert pod.get("serviceAccountName") == settings.get("service_account")
    assert [s["name"] for s in pod.get("imagePullSecrets", [])] == settings.get("image_pull_secrets", [])
    for k, v in settings.get("node_selector", {}).items():
        assert pod["nodeSelector"][k] == v
    tolerations = settings.get("tolerations", [])
    assert pod["tolerations"][len(pod["tolerations"]) - len(tolerations):] == [
        {"operator": "Equal", **t} for t in tolerations]
    words = line_words(job)
    assert words[4:words.index("-I")] == shlex.split(settings.get("python", "python3"))
    code = settings.get("code", {})
    if "image" in code:
        assert words[1] == code["image"]["path"]
    if "pvc" in code:
        volume = next(v for v in pod["volumes"] if v["name"] == "trainspec-code")
        mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "trainspec-code")
        assert (volume["persistentVolumeClaim"]["claimName"], mount.get("subPath")) == (
            code["pvc"]["claim"], code["pvc"].get("sub_path"))
    assert set(limits_of(job)) == {"nvidia.com/gpu", settings.get("rdma_resource", "rdma/ib")}
    assert limits_of(job)["nvidia.com/gpu"] == 8


def test_any_settings_mapping_is_located_errors_or_a_valid_job_that_carries_it(tmp_path):
    """Property: whatever targets.kubernetes holds (valid names, hostile strings, numbers, lists,
    unknown keys), compile gives located errors or a job the CRDs accept with every setting in it."""
    pytest.importorskip("hypothesis", reason="hypothesis is needed for the property tests: pip install hypothesis")
    import os

    from hypothesis import HealthCheck, given, settings as hsettings

    @hsettings(max_examples=int(150 * float(os.environ.get("TRAINSPEC_HYPOTHESIS_SCALE", "1"))), deadline=None,
               database=None, derandomize=not os.environ.get("TRAINSPEC_HYPOTHESIS_RANDOM"),
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                      HealthCheck.function_scoped_fixture])
    @given(settings=_settings_maps())
    def run(settings):
        check_any_settings(settings, tmp_path)

    run()


def test_a_pull_secret_named_twice_is_an_error_at_the_repeat(tmp_path):
    """Bug (found by the property above): `image_pull_secrets: [acr, acr]` compiled into a list the
    TrainJob's schema keys by name (x-kubernetes-list-type: map): the API server refuses the repeat."""
    errors, _, _ = compile_text(spec_text({"image_pull_secrets": ["acr", "acr"]}), tmp_path)
    assert any(re.search(r"spec\.yaml:\d+:\d+: error: targets\.kubernetes\.image_pull_secrets\[1\]: 'acr' is named "
                         "twice", e) for e in errors), errors


@pytest.mark.parametrize("api", ["trainjob", "pytorchjob"])
def test_run_local_gives_hostile_env_and_arguments_to_every_pod_exactly(tmp_path, api):
    """`run --local -t kubernetes` plays job.yaml's pods from what PyYAML reads in it: env values and
    arguments with shell, YAML and bidi characters reach the script exactly, and nothing runs that
    the spec only quoted.

    Bug: local.py re-joins the container's line word by word and left every `&&` unquoted, so the
    argument `'&&'` of `python show.py '&&' touch x` became an operator and `touch x` ran."""
    import json

    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "show.py").write_text(
        "import json, os, sys\nprint('SHOW ' + json.dumps([sys.argv[1:], {k: v for k, v in os.environ.items() "
        "if k.startswith('H_')}]))\n")
    pwned = shlex.quote(str(tmp_path / "pwned"))
    args = [f"$(touch {pwned})", f"; touch {pwned}", "&&", "touch", pwned, "a b", '--x="q"', "two\nlines", "- x",
            "a: b", "/trainspec/other",
            "cd /trainspec/code && x", "\u202eevil\u202c", "yes"]
    env = {"H_A": f"$(touch {pwned}) `id` ${{HOME}}", "H_B": "two\nlines", "H_C": "null", "H_D": " x ", "H_E": "\u202eevil",
           "H_F": "#", "H_G": "*a"}
    (tmp_path / "spec.yaml").write_text(f"""version: 1
name: k8s-hostile
code: code
command: {yq(shlex.join(["python", "show.py", *args]))}
resources: {{nodes: 2, gpus_per_node: 0, procs_per_node: 1}}
distribution: {{backend: gloo, launcher: per-process}}
environment: {{image: pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime}}
env: {flow(env)}
targets:
  kubernetes: {{api: {api}}}
""", encoding="utf-8")
    proc = ts("run", "--local", "spec.yaml", "-t", "kubernetes", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shown = [json.loads(m) for m in re.findall(r"^\[node \d\] SHOW (.*)$", proc.stdout + proc.stderr, re.M)]
    assert shown == [[args, env]] * 2, proc.stdout + proc.stderr
    assert not (tmp_path / "pwned").exists()
