"""Kubernetes (AKS): ``kubectl apply -f job.yaml`` (../shared/reference/kubernetes.md).

==============  ===========================================================================
launcher        Kubeflow
==============  ===========================================================================
per-node        one pod per node runs torchrun under the shim (Lightning: its own
                ``devices``); the shim reads the PET_* the Trainer's torch plugin (or the
                training-operator) sets
per-process     one process per pod: only with one process per node
==============  ===========================================================================

``job.yaml`` holds, in order, the ConfigMap of the shim, the ConfigMap of the code folder
(unless ``targets.kubernetes.code`` names a claim or a path in the image) and the job: a
TrainJob (trainer.kubeflow.org/v1alpha1, Kubeflow Trainer v2.3) or, with ``api: pytorchjob``, a
PyTorchJob (kubeflow.org/v1, training-operator v1.9). Every container runs ``bash -c 'cd <code>
&& exec <python> -I -S /trainspec/trainspec_shim.py -- <command>'``, built with shlex; with the
code in the (read-only) ConfigMap, ``<code>`` is an emptyDir the line first copies it into
(WORK_DIR), so a command that writes ./outputs finds a folder it may write to. Every document
goes through ruamel (compiler/emit.py).
"""

from __future__ import annotations

import base64
import functools
import re
import shlex
from pathlib import Path
from typing import Any, Dict, List, Tuple

from trainspec.core import files
from trainspec.core.diagnostics import Diagnostic, error, shown, warning
from trainspec.schema.validate import ValidSpec
from trainspec.compiler import base, capabilities, emit
from trainspec.runtime import shim as contract  # the runtime file's name, written once
from trainspec.targets.kubernetes.settings import MAX_SECONDS, NAME, RESERVED_ENV, image_problem, runtime_ref
from trainspec.compiler.capabilities import Feature, problem, unsupported

JOB_FILE = "job.yaml"
SUBMIT = "kubectl apply -f {dir}/" + JOB_FILE
SHIM_DIR = "/trainspec"
CODE_DIR = "/trainspec/code"
WORK_DIR = "/trainspec/work"  # an emptyDir: the writable copy of the ConfigMap's code the command starts in
# the copy, by the job's python: the kubelet's own entries of a ConfigMap volume (..data, ..<time>) left out,
# its links to them followed (every other file of the map is one of the code folder's, code_files)
_COPY = ("import shutil, sys; shutil.copytree(sys.argv[1], sys.argv[2], dirs_exist_ok=True, "
         'ignore=shutil.ignore_patterns("..*"))')
INPUTS_DIR = "/trainspec/inputs"
OUTPUTS_DIR = "/trainspec/outputs"
RUNTIME_NAMES = (base.SHIM_FILE,)  # in the <name>-shim ConfigMap, mounted under SHIM_DIR
CONFIGMAP_LIMIT = 1 << 20  # what the API server stores in one object
# A GPU vendor's device plugin advertises its GPUs as one extended resource: NVIDIA's k8s-device-plugin
# (or GPU Operator) nvidia.com/gpu, AMD's ROCm k8s-device-plugin (or GPU Operator) amd.com/gpu
GPU_RESOURCES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
TRAINJOB_PORT = 29500  # PET_MASTER_PORT, fixed by the Trainer's torch plugin
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_CODE_CHOICES = ("put the code on a PersistentVolumeClaim (targets.kubernetes.code: {pvc: {claim: NAME, sub_path: "
                 "DIR}}) or in the image (targets.kubernetes.code: {image: {path: /DIR}})")


INSTANCE_TYPE = "node.kubernetes.io/instance-type"  # the node label of its VM size, on AKS


def _settings(valid: ValidSpec):
    return valid.spec.targets.kubernetes or settings_defaults()


@functools.lru_cache(maxsize=None)
def settings_defaults():
    from trainspec.schema import structure

    return structure.parse({"version": 1, "name": "x", "code": ".", "command": "x",
                            "targets": {NAME: {}}}).targets.kubernetes


def refs_for(valid: ValidSpec):
    """``{{ inputs.x }}`` / ``{{ outputs.x }}``: where its volume is mounted
    (``/trainspec/inputs/x``, ``/trainspec/outputs/x``), else its path in the pod (or literal)."""
    volumes = _settings(valid).volumes
    paths = base.node_path_refs(valid, lambda name: shlex.quote(f"{OUTPUTS_DIR}/{name}"))

    def refs(kind: str, name: str) -> str:
        if name in volumes:
            return shlex.quote(mount_path(kind, name))
        return paths(kind, name)

    return refs


def mount_path(kind: str, name: str) -> str:
    """Where the volume of input or output ``name`` is in the pod."""
    return f"{INPUTS_DIR if kind == 'inputs' else OUTPUTS_DIR}/{name}"


CANNOT_RUN = {
    Feature.ENV_DATA_REF: unsupported(),
    Feature.TENSORFLOW: unsupported(),
    Feature.LAUNCHER_MPI: unsupported("launcher mpi: Kubeflow starts torchrun, not mpirun",
                                      "use launcher: per-node (torchrun in every pod)"),
    Feature.SPOT: unsupported("spot capacity: the node pool decides",
                              "remove resources.spot, or select a spot pool with targets.kubernetes.node_selector",
                              fatal=False),
    Feature.NO_ENVIRONMENT: problem("a pod needs an image: environment has none",
                                    "set environment.image (with torch, and bash)"),
    Feature.ENV_AZUREML: unsupported(hint="a pod needs an image: set environment.image"),
    Feature.ENV_BUILD: unsupported("a Docker build context (a pod pulls an image)",
                                   "build and push the image, then set environment.image"),
    Feature.ENV_CONDA_FILE: unsupported("environment.conda_file: pods run the image's software, and nothing "
                                        "would create the environment",
                                        "list the packages under environment.pip (installed in every pod before "
                                        "the command), or install them in the image"),
    Feature.INPUT_EVAL_MODE: unsupported(fatal=False),
    Feature.OUTPUT_ASSET_NAME: unsupported(fatal=False),
    Feature.INPUT_URL: unsupported(hint="put the data on a PersistentVolumeClaim: targets.kubernetes.volumes."
                                   "{name}: {{pvc: {{claim: NAME, sub_path: DIR}}}}"),
    Feature.INPUT_DATA_ASSET: unsupported(hint="put the data on a PersistentVolumeClaim: targets.kubernetes."
                                          "volumes.{name}: {{pvc: {{claim: NAME, sub_path: DIR}}}}"),
    Feature.INPUT_RELATIVE: problem("on Kubernetes an input is a path in the pod: '{path}' is relative",
                                    "mount it from a claim (targets.kubernetes.volumes.{name}: {{pvc: {{claim: "
                                    "NAME}}}}), or give an absolute path in the image"),
    Feature.OUTPUT_NOT_ABSOLUTE: unsupported(hint="mount a claim for it: targets.kubernetes.volumes.{name}: "
                                             "{{pvc: {{claim: NAME, sub_path: DIR}}}}"),
}
_ON_VOLUME = "targets.kubernetes.volumes.{name}: {{pvc: {{claim: NAME, sub_path: DIR}}}}"


def suggested_name(name: str, room: int = 63) -> str:
    """A DNS-1035 label close to ``name``: lower case, - for anything else, a letter first, at
    most ``room`` characters."""
    out = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    if not out or not out[0].isalpha():
        out = "job-" + out
    return out[:room].rstrip("-")


def longest_name(valid: ValidSpec) -> Tuple[str, str]:
    """The longest name the controller derives from the job's (what it names, the name): a
    TrainJob's JobSet pod (JobSet's ``<job>-node-0-<index>`` and a 5-character suffix, which its
    webhook checks), a PyTorchJob's Service of the last pod (``<job>-worker-<index>``)."""
    if _settings(valid).api == "trainjob":
        return "pod", f"{valid.name}-node-0-{valid.nodes - 1}-xxxxx"
    role = "worker" if valid.nodes > 1 else "master"
    return "Service", f"{valid.name}-{role}-{max(valid.nodes - 2, 0)}"


def job_name_limit(valid: ValidSpec) -> int:
    """How long the job's name may be, so that every name derived from it (the pods', the
    Services') fits 63 characters."""
    return 63 - (len(longest_name(valid)[1]) - len(valid.name))


def time_limit(valid: ValidSpec):
    """activeDeadlineSeconds (a TrainJob's spec, a PyTorchJob's runPolicy): targets.kubernetes.timeout,
    else the spec's timeout (None: none)."""
    return base.time_limit(valid, NAME, "timeout")


def cannot_express(valid: ValidSpec) -> List[Diagnostic]:
    """What Kubernetes cannot run: its table, the job name, reserved variables, the code's size."""
    volumes = _settings(valid).volumes
    out = capabilities.check(NAME, CANNOT_RUN, valid, volumes=volumes)
    limit = time_limit(valid)
    if limit is not None and limit.path == ("timeout",):  # targets.kubernetes.timeout: checked by validation
        out += base.time_limit_errors(NAME, limit, MAX_SECONDS, "activeDeadlineSeconds (an int64)")
    out += base.lost_output_errors(NAME, valid, volumes, "what the job writes would stay in the pod and be lost "
                                   "with it", "mount a claim: " + _ON_VOLUME + " (Azure ML keeps the job's own "
                                   "output)")
    out += _rdma_unused(valid)
    name = valid.name
    room = job_name_limit(valid)
    if not DNS_1035.match(name) or len(name) > 63:
        out.append(error(("name",), f"'{name}' cannot name a Kubernetes job: it must be a DNS-1035 label (lower-case "
                         "letters, digits and -, starting with a letter, at most 63 characters)",
                         f"e.g. name: {suggested_name(name, room)}"))
    elif len(name) > room:
        longest = longest_name(valid)
        out.append(error(("name",), f"'{name}' is too long for this job: the controller names the {longest[0]} "
                         f"'{longest[1]}', over Kubernetes' 63 characters, and the job would never start",
                         f"at most {room} characters here, e.g. name: {suggested_name(name, room)}"))
    image = valid.spec.environment.image
    if image and image_problem(image):
        out.append(error(("environment", "image"), f"'{shown(image)}' {image_problem(image)}",
                         "e.g. pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime or myregistry.azurecr.io/train:1"))
    for field, key in [*(("env", k) for k in valid.spec.env), *(("secrets", k) for k in valid.spec.secrets)]:
        if key in RESERVED_ENV or key.startswith("PET_"):
            out.append(error((field, key), f"{key} is set by Kubeflow in every pod: the Trainer rejects a job "
                             "that sets it", "remove it: the shim reads the platform's value"))
    launcher = valid.launcher
    if launcher == "per-process" and valid.procs_per_node > 1:
        out.append(error(("distribution", "launcher"), "per process on Kubernetes means one process per pod, "
                         f"and this spec runs {valid.procs_per_node} per node",
                         "use launcher: per-node (torchrun in every pod), the default"))
    out += base.command_variable_errors(NAME, valid, launcher)
    if launcher == "per-node" and valid.spec.framework != "lightning":
        out += base.torchrun_errors(valid, refs_for(valid), "per node, each pod runs the command under torchrun",
                                    "write `python train.py ...`")
    if _settings(valid).code is None:
        size = sum(len(data) for _, data in code_files(valid))
        if size > CONFIGMAP_LIMIT:
            out.append(error(("code",), f"the code folder holds {size} bytes, more than a ConfigMap's 1 MiB",
                             _CODE_CHOICES))
    return out


def _rdma_unused(valid: ValidSpec) -> List[Diagnostic]:
    """targets.kubernetes.rdma_resource, written, on a job that requests no InfiniBand (one node,
    or a size without it, base.infiniband): the pods do not ask for the resource, said where it is written."""
    settings = _settings(valid)
    if "rdma_resource" not in settings.__pydantic_fields_set__ or base.infiniband(valid):
        return []
    why = ("the job runs on one node" if valid.nodes == 1 else
           "resources.sku names no size" if valid.sku is None else f"{valid.sku.name} has no InfiniBand")
    return [warning(("targets", NAME, "rdma_resource"), f"'{shown(settings.rdma_resource)}' is not requested: "
                    f"{why}, and the pods ask for the InfiniBand resource only on a multi-node job of a size "
                    "that has it", "remove rdma_resource, or set resources.sku to an InfiniBand size (e.g. "
                    "Standard_ND96isr_H100_v5)")]


def code_files(valid: ValidSpec) -> List[Tuple[str, bytes]]:
    """The code folder's regular files (posix paths, sorted), without hidden files and caches. A
    link is never followed (validation refuses one in the code folder) and a file is opened
    without following one, so nothing outside the folder reaches the ConfigMap."""
    root = valid.resolve(valid.spec.code)
    if not root.is_dir():
        return []
    out = []
    for name in sorted(files.list_folder(root).files, key=lambda n: n.split("/")):
        if any(part.startswith(".") or part == "__pycache__" for part in name.split("/")):
            continue
        try:
            out.append((name, files.read_regular(root / name)))
        except OSError:
            continue  # swapped for a link or a FIFO since validation: never read
    return out


def _configmap(name: str, valid: ValidSpec, files: List[Tuple[str, bytes]]) -> Tuple[Dict[str, Any], List[Dict]]:
    """A ConfigMap of ``files`` and the volume items that put each key back at its path."""
    data: Dict[str, str] = {}
    binary: Dict[str, str] = {}
    items = []
    used = set()
    for i, (path, raw) in enumerate(files):
        key = re.sub(r"[^-._a-zA-Z0-9]", "_", path)[:240] or "_"
        if key in used or key in (".", ".."):
            key = f"{i}.{key}"[:253]
        used.add(key)
        try:
            data[key] = raw.decode("utf-8")
        except UnicodeDecodeError:
            binary[key] = base64.b64encode(raw).decode("ascii")
        items.append({"key": key, "path": path})
    doc: Dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _metadata(valid, name, queue=False)}
    if data:
        doc["data"] = data
    if binary:
        doc["binaryData"] = binary
    return doc, items


def _metadata(valid: ValidSpec, name: str, *, queue: bool) -> Dict[str, Any]:
    settings = _settings(valid)
    meta: Dict[str, Any] = {"name": name}
    if settings.namespace:
        meta["namespace"] = settings.namespace
    labels = {"app.kubernetes.io/managed-by": "trainspec"}
    if queue and settings.queue:
        labels["kueue.x-k8s.io/queue-name"] = settings.queue
    meta["labels"] = labels
    return meta


def _quantity(size: str) -> str:
    """The spec's shm_size (16g) as a Kubernetes quantity (16Gi)."""
    match = re.match(r"^\s*(\d+)\s*([bkmgBKMG]?)", size)
    number, unit = match.group(1), match.group(2).lower()
    return number + {"": "", "b": "", "k": "Ki", "m": "Mi", "g": "Gi"}[unit]


def _volume(path: str) -> str:
    """trainspec_shim.py -> trainspec-shim: a runtime file's volume name."""
    return path[:-len(".py")].replace("_", "-")


def _data_volume(kind: str, key: str, used: set) -> str:
    """A volume name (a DNS-1123 label) for input or output ``key``: ``in-data``, ``out-ckpt``;
    numbered when two keys differ only in case or _ (``Data``, ``data``)."""
    stem = f"{'in' if kind == 'inputs' else 'out'}-" + re.sub(r"[^a-z0-9]+", "-", key.lower()).strip("-")
    stem = stem[:55].rstrip("-")
    name, i = stem, 1
    while name in used:
        name, i = f"{stem}-{i}", i + 1
    used.add(name)
    return name


def gpu_resource(valid: ValidSpec) -> str:
    """The extended resource the GPU vendor's device plugin advertises (GPU_RESOURCES): the size's
    vendor from the catalog; NVIDIA's without a size (gpus_per_node alone)."""
    vendor = valid.sku.vendor if valid.sku is not None and valid.sku.vendor else "nvidia"
    return GPU_RESOURCES[vendor]


def pod_parts(valid: ValidSpec) -> Dict[str, Any]:
    """What every pod of the job gets, both APIs alike: volumes, mounts, node selection, the
    container's command, env and resources."""
    spec = valid.spec
    settings = _settings(valid)
    name = valid.name
    # one volume per runtime file: a container's volumeMounts are keyed by volume name
    volumes: List[Dict[str, Any]] = [{"name": _volume(path), "configMap": {
        "name": f"{name}-shim", "items": [{"key": path, "path": path}]}} for path in RUNTIME_NAMES]
    mounts: List[Dict[str, Any]] = [{"name": _volume(path), "mountPath": f"{SHIM_DIR}/{path}",
                                     "subPath": path, "readOnly": True} for path in RUNTIME_NAMES]
    code_dir = CODE_DIR
    if settings.code is None:
        _, items = _configmap(f"{name}-code", valid, code_files(valid))
        volumes.append({"name": "trainspec-code", "configMap": {"name": f"{name}-code", "items": items}})
        mounts.append({"name": "trainspec-code", "mountPath": CODE_DIR, "readOnly": True})
        volumes.append({"name": "trainspec-work", "emptyDir": {}})
        mounts.append({"name": "trainspec-work", "mountPath": WORK_DIR})
    elif settings.code.pvc is not None:
        volumes.append({"name": "trainspec-code", "persistentVolumeClaim": {"claimName": settings.code.pvc.claim}})
        mount = {"name": "trainspec-code", "mountPath": CODE_DIR}
        if settings.code.pvc.sub_path:
            mount["subPath"] = settings.code.pvc.sub_path
        mounts.append(mount)
    else:
        code_dir = settings.code.image.path
    if spec.resources.shm_size:
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": _quantity(spec.resources.shm_size)}})
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    used = {volume["name"] for volume in volumes} | {"trainspec-code", "trainspec-work", "dshm"}
    for key, volume in sorted(settings.volumes.items()):
        kind = "inputs" if key in spec.inputs else "outputs"
        volume_name = _data_volume(kind, key, used)
        volumes.append({"name": volume_name, "persistentVolumeClaim": {"claimName": volume.pvc.claim}})
        mount: Dict[str, Any] = {"name": volume_name, "mountPath": mount_path(kind, key)}
        if volume.pvc.sub_path:
            mount["subPath"] = volume.pvc.sub_path
        if base.read_only(kind, spec.inputs.get(key)):
            volumes[-1]["persistentVolumeClaim"]["readOnly"] = True
            mount["readOnly"] = True
        mounts.append(mount)
    limits: Dict[str, Any] = {}
    if valid.gpus_per_node:
        limits[gpu_resource(valid)] = valid.gpus_per_node
    infiniband = base.infiniband(valid)
    if infiniband:
        limits[settings.rdma_resource] = 1
    requests = cpu_and_memory(valid)
    limits.update(requests)  # requests = limits: the pod is Guaranteed, its CPUs its own
    node_selector = {}
    tolerations = []
    if valid.sku is not None:
        node_selector[INSTANCE_TYPE] = valid.sku.name
        if valid.sku.gpus:
            tolerations.append({"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"})
    node_selector.update(settings.node_selector)
    for toleration in settings.tolerations:
        tolerations.append({field: getattr(toleration, field) for field in ("key", "operator", "value", "effect")
                            if getattr(toleration, field) is not None})
    launcher = valid.launcher
    python = shlex.split(settings.python)
    command = valid.render(("command",), spec.command, refs_for(valid)).strip()
    if launcher == "per-node" and spec.framework != "lightning" and not base.own_spawner(command):
        command = base.torchrun_line(valid, command, python=shlex.join(python))
    shim = shlex.join([*python, *base.SHIM_FLAGS, f"{SHIM_DIR}/{base.SHIM_FILE}"])
    line = f"cd {shlex.quote(code_dir)} && exec {base.under_shim(shim, command, valid)}"
    if settings.code is None:  # the ConfigMap is read-only: the command starts in a writable copy of it
        copy = shlex.join([*python, "-I", "-S", "-c", _COPY, CODE_DIR, WORK_DIR])
        line = f"{copy} && cd {WORK_DIR} && exec {base.under_shim(shim, command, valid)}"
    api = settings.api
    env = base.job_env(valid, refs_for(valid), launcher, rendezvous_port(valid))
    env.update(base.pip_env(valid))  # the shim installs them in each pod, before the command
    return {"volumes": volumes, "mounts": mounts, "limits": limits, "requests": requests,
            "node_selector": node_selector,
            "tolerations": tolerations, "command": ["bash", "-c", line],
            "env": [{"name": k, "value": v} for k, v in env.items()] + _secret_env(valid), "ipc_lock": infiniband}


def _secret_env(valid: ValidSpec) -> List[Dict[str, Any]]:
    """The spec's secrets as the kubelet sets them: each from a key of a Secret in the job's namespace."""
    return [{"name": name, "valueFrom": {"secretKeyRef": {"name": reference.kubernetes.secret,
                                                          "key": reference.kubernetes.key}}}
            for name, reference in valid.spec.secrets.items()]


def cpu_and_memory(valid: ValidSpec) -> Dict[str, Any]:
    """resources.cpus_per_node and memory_per_node as the container's cpu and memory (a request,
    and the same limit): whole CPUs, the memory quantity as written (Kubernetes reads Mi/Gi/Ti and
    M/G/T alike)."""
    resources = valid.spec.resources
    out: Dict[str, Any] = {}
    if resources.cpus_per_node is not None:
        out["cpu"] = resources.cpus_per_node
    if resources.memory_per_node is not None:
        out["memory"] = resources.memory_per_node
    return out


def _resources(parts: Dict[str, Any]) -> Dict[str, Any]:
    """A container's ResourceRequirements: requests only when the spec asks for CPUs or memory."""
    out: Dict[str, Any] = {}
    if parts["requests"]:
        out["requests"] = parts["requests"]
    if parts["limits"]:
        out["limits"] = parts["limits"]
    return out


def _pod_settings(valid: ValidSpec, parts: Dict[str, Any]) -> Dict[str, Any]:
    settings = _settings(valid)
    pod: Dict[str, Any] = {}
    if settings.service_account:
        pod["serviceAccountName"] = settings.service_account
    if settings.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": s} for s in settings.image_pull_secrets]
    if parts["node_selector"]:
        pod["nodeSelector"] = parts["node_selector"]
    if parts["tolerations"]:
        pod["tolerations"] = parts["tolerations"]
    return pod


def trainjob(valid: ValidSpec) -> Dict[str, Any]:
    settings = _settings(valid)
    parts = pod_parts(valid)
    trainer: Dict[str, Any] = {"image": valid.spec.environment.image, "command": parts["command"],
                               "env": parts["env"], "numNodes": valid.nodes}
    if valid.launcher == "per-node" or valid.procs_per_node == 1:
        trainer["numProcPerNode"] = valid.procs_per_node
    if parts["limits"]:
        trainer["resourcesPerNode"] = _resources(parts)
    container: Dict[str, Any] = {"name": "node", "volumeMounts": parts["mounts"]}
    if parts["ipc_lock"]:
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    pod = {**_pod_settings(valid, parts), "containers": [container], "volumes": parts["volumes"]}
    runtime, kind = runtime_ref(settings)
    spec: Dict[str, Any] = {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": kind, "name": runtime}}
    if settings.queue:
        spec["suspend"] = True
    limit = time_limit(valid)
    if limit is not None:
        spec["activeDeadlineSeconds"] = limit.seconds
    spec["trainer"] = trainer
    spec["runtimePatches"] = [{"manager": "trainspec", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": pod}}}}]}}}}]
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": _metadata(valid, valid.name, queue=True), "spec": spec}


def pytorchjob(valid: ValidSpec) -> Dict[str, Any]:
    settings = _settings(valid)
    parts = pod_parts(valid)
    container: Dict[str, Any] = {"name": "pytorch", "image": valid.spec.environment.image,
                                 "command": parts["command"], "env": parts["env"],
                                 "ports": [{"name": "pytorchjob-port", "containerPort":
                                            valid.spec.distribution.master_port}],
                                 "volumeMounts": parts["mounts"]}
    if parts["limits"]:
        container["resources"] = _resources(parts)
    if parts["ipc_lock"]:
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    pod = {**_pod_settings(valid, parts), "containers": [container], "volumes": parts["volumes"]}
    replicas = {"Master": {"replicas": 1, "restartPolicy": "Never", "template": {"spec": pod}}}
    if valid.nodes > 1:
        replicas["Worker"] = {"replicas": valid.nodes - 1, "restartPolicy": "Never", "template": {"spec": pod}}
    run_policy: Dict[str, Any] = {"backoffLimit": 0}
    if settings.queue:
        run_policy["suspend"] = True
    limit = time_limit(valid)
    if limit is not None:
        run_policy["activeDeadlineSeconds"] = limit.seconds
    spec = {"nprocPerNode": str(valid.procs_per_node), "runPolicy": run_policy, "pytorchReplicaSpecs": replicas}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": _metadata(valid, valid.name, queue=True), "spec": spec}


def runtime_files() -> Tuple[base.OutFile, ...]:
    """The shim, with Kubeflow's detectors joined in (runtime/kubernetes_detector.py): RUNTIME_NAMES, read."""
    return (base.shim_file(NAME),)


def job_document(valid: ValidSpec) -> Dict[str, Any]:
    """The TrainJob or PyTorchJob, as ``api`` says."""
    return trainjob(valid) if _settings(valid).api == "trainjob" else pytorchjob(valid)


def pod_template(job: Dict[str, Any]) -> Dict[str, Any]:
    """The pod spec every pod of a compiled job has: a TrainJob's runtime patch of the ``node``
    replicated job, a PyTorchJob's Master (its Workers' is the same)."""
    if job["kind"] == "TrainJob":
        return job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0][
            "template"]["spec"]["template"]["spec"]
    return job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]


def documents(valid: ValidSpec, runtime: Tuple[base.OutFile, ...]) -> List[Dict[str, Any]]:
    """The documents of job.yaml, in the order kubectl creates them (``runtime``: runtime_files())."""
    docs = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": _metadata(valid, f"{valid.name}-shim", queue=False),
             "data": {file.path: file.data.decode("utf-8") for file in runtime}}]
    if _settings(valid).code is None:
        docs.append(_configmap(f"{valid.name}-code", valid, code_files(valid))[0])
    docs.append(job_document(valid))
    return docs


def lower(valid: ValidSpec, out_dir: Path) -> base.Artifact:
    """job.yaml, which embeds the runtime files (the shim ConfigMap's data): ``diff`` shows it
    with each of them as one placeholder line and summarises them (OutFile.embedded)."""
    header = emit.yaml_header(valid.source.display, valid.source.digest, NAME)
    embedded = runtime_files()
    docs = documents(valid, embedded)
    reviewed = [_with_placeholders(doc, f"{valid.name}-shim", embedded) for doc in docs]
    job = base.OutFile(JOB_FILE, _stream(docs, header), embedded=embedded, shown=_stream(reviewed, header))
    return base.Artifact(target=NAME, name=valid.name, files=(job,), submit=SUBMIT)


def _stream(docs: List[Dict[str, Any]], header: str) -> bytes:
    """The documents as one multi-document YAML file, the header on the first."""
    return b"---\n".join(emit.yaml_bytes(doc, header if i == 0 else "") for i, doc in enumerate(docs))


def _with_placeholders(doc: Dict[str, Any], shim_map: str, files: Tuple[base.OutFile, ...]) -> Dict[str, Any]:
    """``doc`` as a reviewer reads it: the shim ConfigMap (``shim_map``) with each runtime file's
    content replaced by its placeholder line; any other document as it is."""
    if doc["kind"] != "ConfigMap" or doc["metadata"]["name"] != shim_map:
        return doc
    by_key = {file.path: file for file in files}
    return {**doc, "data": {key: base.placeholder(by_key[key]) for key in doc["data"]}}


def rendezvous_port(valid: ValidSpec) -> int:
    """The port the job rendezvous on. A PyTorchJob's is the spec's (its container port, which the
    operator exports). A TrainJob's torch plugin sets PET_MASTER_PORT=29500, but the pods reach
    each other directly on any port, and the shim exports TRAINSPEC_MASTER_PORT over the plugin's:
    distribution.master_port when the spec writes it, else the plugin's port."""
    if _settings(valid).api != "trainjob":
        return valid.spec.distribution.master_port
    written = base.master_port_written(valid)
    return TRAINJOB_PORT if written is None else written


def plan_port(valid: ValidSpec) -> str:
    return str(rendezvous_port(valid))


def plan_facts(valid: ValidSpec) -> base.PlanFacts:
    """The namespace and queue, activeDeadlineSeconds, the pods' priority class, the image and the
    GPUs, read from the compiled job document (so plan cannot disagree with job.yaml)."""
    job = job_document(valid)
    meta, pod = job["metadata"], pod_template(job)
    policy = job["spec"] if job["kind"] == "TrainJob" else job["spec"]["runPolicy"]
    where = (f"namespace {meta['namespace']}" if "namespace" in meta else "kubectl's current namespace")
    queue = meta["labels"].get("kueue.x-k8s.io/queue-name")
    where += (f", Kueue local queue {queue}" + (" (created suspended: Kueue admits it)" if policy.get("suspend") else "")
              if queue else ", no queue (the pods are scheduled at once)")
    deadline, limit = policy.get("activeDeadlineSeconds"), time_limit(valid)
    priority = (f"priority class {pod['priorityClassName']}" if pod.get("priorityClassName") else
                "the cluster's default priority class")
    if valid.spec.resources.spot:
        priority += base.plan_spot_ignored(NAME, "the node pool decides")
    return base.PlanFacts(
        where=where,
        time_limit=(limit.plan_text(f"activeDeadlineSeconds {deadline}") if deadline is not None else
                    base.plan_no_time_limit("targets.kubernetes.timeout")),
        priority=priority,
        image=plan_image(valid),
        gpus=base.plan_gpus(valid, hardware(valid)))


def plan_settings(valid: ValidSpec) -> Dict[str, str]:
    """What a cluster admin checks before ``kubectl apply`` beyond the facts, read from the
    compiled job document (so plan cannot disagree with job.yaml): the kind, the pods and what
    each asks for, where they may run, who they run as, every volume."""
    settings = _settings(valid)
    job = job_document(valid)
    spec, pod = job["spec"], pod_template(job)
    if job["kind"] == "TrainJob":
        trainer = spec["trainer"]
        resources = trainer.get("resourcesPerNode", {})
        pods = f"{trainer['numNodes']} (one per node)"
    else:
        replicas = spec["pytorchReplicaSpecs"]
        resources = pod["containers"][0].get("resources", {})
        kinds = " + ".join(f"{kind} {replica['replicas']}" for kind, replica in replicas.items())
        pods = f"{sum(replica['replicas'] for replica in replicas.values())} ({kinds})"
    container = pod["containers"][0]
    lines = {"job": f"{job['kind']} {job['apiVersion']}"}
    limits, requests = resources.get("limits", {}), resources.get("requests", {})
    if requests:
        lines["pods"] = f"{pods}, each with requests {_pairs(requests)}, limits {_pairs(limits)}"
    elif limits:
        lines["pods"] = f"{pods}, each with limits {_pairs(limits)}"
    else:
        lines["pods"] = f"{pods}, no resource limits"
    added = container.get("securityContext", {}).get("capabilities", {}).get("add", [])
    if added:
        lines["capabilities"] = ", ".join(added)
    if pod.get("nodeSelector"):
        lines["node selector"] = _pairs(pod["nodeSelector"])
    if pod.get("tolerations"):
        lines["tolerations"] = ", ".join(_toleration(t) for t in pod["tolerations"])
    if pod.get("serviceAccountName"):
        lines["service account"] = pod["serviceAccountName"]
    if pod.get("imagePullSecrets"):
        lines["image pull secrets"] = ", ".join(s["name"] for s in pod["imagePullSecrets"])
    mounts = container.get("volumeMounts", [])
    code = next((m["name"] for m in mounts if m["mountPath"] == CODE_DIR), None)
    lines["code"] = f"at {CODE_DIR} (volume {code})" if code else f"in the image, at {settings.code.image.path}"
    for volume in pod.get("volumes", []):
        lines[f"volume {volume['name']}"] = _volume_text(volume, [m for m in mounts if m["name"] == volume["name"]])
    lines.update(base.plan_data(valid, refs_for(valid)))
    lines["shim"] = base.plan_shim(settings.python)
    return lines


def plan_image(valid: ValidSpec) -> str:
    """The image every pod runs, read from the compiled job document."""
    job = job_document(valid)
    if job["kind"] == "TrainJob":
        return job["spec"]["trainer"]["image"]
    return pod_template(job)["containers"][0]["image"]


def _pairs(mapping: Dict[str, Any]) -> str:
    """{a: 1, b: x} -> 'a=1, b=x' (labels, limits)."""
    return ", ".join(f"{key}={value}" for key, value in mapping.items())


def _toleration(toleration: Dict[str, Any]) -> str:
    """A toleration as the taint it tolerates (kubectl's key=value:effect; Exists: any value)."""
    key, effect = toleration.get("key"), toleration.get("effect")
    if toleration.get("operator") == "Exists":
        taint, any_ = (key, ["any value"]) if key else ("every taint", [])
    else:
        taint, any_ = f"{key}={toleration.get('value', '')}", []
    taint += f":{effect}" if effect else ""
    any_ += [] if effect or not key else ["any effect"]
    return taint + (f" ({', '.join(any_)})" if any_ else "")


def _volume_text(volume: Dict[str, Any], mounts: List[Dict[str, Any]]) -> str:
    """A pod volume as an admin reads it: its source, then where the container mounts it."""
    kind = next(key for key in volume if key != "name")
    source = volume[kind]
    if kind == "configMap":
        items = source.get("items", [])
        files = items[0]["path"] if len(items) == 1 else f"{len(items)} files"
        what = f"ConfigMap {source['name']} ({files})"
    elif kind == "persistentVolumeClaim":
        what = f"PVC {source['claimName']}" + (" (read-only)" if source.get("readOnly") else "")
    elif kind == "emptyDir":
        what = "emptyDir" + (" in memory" if source.get("medium") == "Memory" else "") + (
            f" (at most {source['sizeLimit']})" if source.get("sizeLimit") else "")
    else:  # a source this page does not know yet: as written
        import json

        what = f"{kind} {json.dumps(source, sort_keys=True)}"
    where = ", ".join(_mount_text(mount) for mount in mounts)
    return f"{what} at {where}" if where else f"{what}, not mounted"


def _mount_text(mount: Dict[str, Any]) -> str:
    """/trainspec/code (sub-path team/x, read-only)."""
    notes = ([f"sub-path {mount['subPath']}"] if mount.get("subPath") else []) + (
        ["read-only"] if mount.get("readOnly") else [])
    return mount["mountPath"] + (f" ({', '.join(notes)})" if notes else "")


def local_settings(settings: Dict[str, Any], workdir: Path) -> Dict[str, Any]:
    """run --local: the pods' python is this one; the code travels as a ConfigMap, as by default."""
    import sys

    settings["python"] = shlex.quote(sys.executable)
    settings.pop("code", None)
    return settings


def hardware(valid: ValidSpec) -> base.Hardware:
    """The pods select nodes by node.kubernetes.io/instance-type (the label AKS gives each node
    its VM size): the sku, unless targets.kubernetes.node_selector says another."""
    selected = _settings(valid).node_selector.get(INSTANCE_TYPE, valid.sku.name if valid.sku else None)
    if valid.sku is not None and selected == valid.sku.name:
        return base.Hardware(True, f"node selector {INSTANCE_TYPE}={selected}")
    return base.Hardware(False, f"the node selector {INSTANCE_TYPE}={selected} decides the hardware"
                         if selected else "nothing selects the nodes' VM size",
                         f"leave {INSTANCE_TYPE} out of targets.kubernetes.node_selector: resources.sku selects it")


def cost_basis(valid: ValidSpec) -> base.CostBasis:
    """The node pool's nodes the job holds: the team's own, never a bill per job."""
    return base.nodes_cost(valid, time_limit(valid), team_nodes="the node pool's nodes")
