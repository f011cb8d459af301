"""What the controllers make of a Kubeflow job, and its pods run on this machine.

No cluster runs here, so the pods a job would get are worked out as the controllers do it (read
in their source at the pinned tags, shared/reference/kubernetes.md), then started as processes:

- TrainJob (Trainer v2.3.0) + its ClusterTrainingRuntime (one in the same file, else the pinned
  `torch-distributed`): the JobSet's indexed Job `node` gives pods `<job>-node-0-<i>` with
  hostname `<job>-node-0-<i>` and subdomain `<job>`; the trainer container (`node`) gets the
  runtime's container after `runtimePatches`, `trainer.command/args/env/resourcesPerNode`, and
  exactly what the Torch plugin injects (PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK from the
  completion index, PET_MASTER_ADDR `<job>-node-0-0.<job>`, PET_MASTER_PORT 29500), plus
  JOB_COMPLETION_INDEX (Kubernetes sets it in indexed Jobs).
- PyTorchJob (training-operator v1.9.4): `<job>-master-0` and `<job>-worker-<i>` with the
  operator's variables (envvar.go, master.go) after the user's.

    pods = job_pods(documents)                       # documents: every object of one YAML file
    result = run_pods(pods, documents, workdir=tmp_path, pvcs={"data": tmp_path / "pvc"}, timeout=60)
    result.ok, result.exit_codes["ddp-node-0-1"], result.output["ddp-node-0-1"]

Each pod runs in network namespaces of trainspec.local.netns (one per pod, joined by a private bridge,
nothing routed elsewhere), inside `unshare --mount --uts --pid --fork`: its own hostname, its own
/proc, /etc/hosts bind-mounted from a per-pod file naming every pod as cluster DNS would, and its
volumes bind-mounted at their real mountPaths (ConfigMaps as files, emptyDir as a directory or,
with medium Memory, a tmpfs; a PVC as a directory the test gives). Mount points missing on this
machine are created for the run and removed after it; every mount lives in the pod's own mount
namespace and goes with it. The image is ignored: commands run with the test's interpreter first
on PATH. Needs root, iproute2 and util-linux.
"""

from __future__ import annotations

import copy
import math
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import yaml

from kube_schema import TRAINER

RUNTIMES = TRAINER / "runtimes"
TORCH_MASTER_PORT = 29500  # constants.ContainerTrainerPort
PYTORCHJOB_PORT = 23456  # PyTorchJobDefaultPort
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
CLUSTER_DOMAIN = "cluster.local"
GRACE = 5.0  # SIGTERM to SIGKILL when a run is stopped
MARKER = "KUBE_PODS_RUN"  # in every pod process's environment (not in Pod.env): finds what a run left


class EmulationError(ValueError):
    """The job uses something this emulation does not model; the message says what."""


@dataclass
class Pod:
    """One pod's main container as the controllers would create it."""

    name: str
    hostname: str
    subdomain: Optional[str]
    namespace: str
    command: List[str]          # command + args, $(VAR) already expanded as the kubelet does
    env: List[Tuple[str, str]]  # in order; a later duplicate wins, as in the kubelet
    resources: Dict[str, Any] = field(default_factory=dict)
    volume_mounts: List[Dict[str, Any]] = field(default_factory=list)
    volumes: List[Dict[str, Any]] = field(default_factory=list)
    working_dir: Optional[str] = None
    annotations: Dict[str, str] = field(default_factory=dict)
    services: List[str] = field(default_factory=list)  # headless Services (PyTorchJob) naming this pod

    @property
    def environ(self) -> Dict[str, str]:
        return dict(self.env)

    def dns_names(self) -> List[str]:
        """The names other pods of the job resolve to this pod's address."""
        names = []
        if self.subdomain:
            fqdn = f"{self.hostname}.{self.subdomain}"
            names += [fqdn, f"{fqdn}.{self.namespace}", f"{fqdn}.{self.namespace}.svc",
                      f"{fqdn}.{self.namespace}.svc.{CLUSTER_DOMAIN}"]
        for service in self.services:
            names += [service, f"{service}.{self.namespace}", f"{service}.{self.namespace}.svc",
                      f"{service}.{self.namespace}.svc.{CLUSTER_DOMAIN}"]
        return names


# --- env and commands as the kubelet makes them ------------------------------------------------

def upsert_env(env: List[Dict[str, Any]], new: Iterable[Dict[str, Any]]) -> None:
    """apply.UpsertEnvVars: replace an entry of the same name in place, else append."""
    for item in new:
        for index, old in enumerate(env):
            if old.get("name") == item.get("name"):
                env[index] = copy.deepcopy(item)
                break
        else:
            env.append(copy.deepcopy(item))


_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, variables: Mapping[str, str]) -> str:
    """The kubelet's $(VAR) expansion: a defined name is replaced, `$$` is `$`, the rest stays."""
    def one(match):
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return variables[name] if name in variables else match.group(0)
    return _REFERENCE.sub(one, text)


def resolve_env(env: List[Dict[str, Any]], pod_fields: Mapping[str, str]) -> List[Tuple[str, str]]:
    """Env entries to (name, value): `value` with $(VAR) of earlier entries expanded, `valueFrom`
    fieldRef from pod_fields; other sources (secrets, configMapKeyRef, resourceFieldRef) are not
    emulated."""
    resolved: List[Tuple[str, str]] = []
    for item in env:
        name = item["name"]
        if "valueFrom" in item:
            ref = item["valueFrom"].get("fieldRef")
            if not ref or ref.get("fieldPath") not in pod_fields:
                raise EmulationError(f"env {name}: valueFrom {item['valueFrom']} is not emulated")
            value = pod_fields[ref["fieldPath"]]
        else:
            value = expand(str(item.get("value", "")), dict(resolved))
        resolved.append((name, value))
    return resolved


def quantity(text: Any) -> float:
    """A Kubernetes quantity (`4`, `500m`, `2Gi`) as a number."""
    match = re.fullmatch(r"([0-9.]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?", str(text).strip())
    if not match:
        raise EmulationError(f"quantity {text!r} is not understood")
    scale = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
             "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40}[match.group(2)]
    return float(match.group(1)) * scale


# --- TrainJob ------------------------------------------------------------------------------------

def find_runtime(job: Dict[str, Any], documents: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    ref = job["spec"]["runtimeRef"]
    kind = ref.get("kind", "ClusterTrainingRuntime")
    pinned = [d for path in sorted(RUNTIMES.glob("*.yaml")) for d in yaml.safe_load_all(path.read_text()) if d]
    for candidate in [*documents, *pinned]:
        if candidate.get("kind") == kind and candidate.get("metadata", {}).get("name") == ref["name"]:
            return copy.deepcopy(candidate)
    raise EmulationError(f"spec.runtimeRef: no {kind} {ref['name']!r} in the file nor among the pinned runtimes")


def _patch_pod_spec(spec: Dict[str, Any], patch: Dict[str, Any]) -> None:
    """A runtimePatches pod spec patch onto the runtime's pod spec (lists merged by their keys)."""
    for key, value in patch.items():
        if key in ("volumes", "imagePullSecrets", "schedulingGates"):
            merged = spec.setdefault(key, [])
            for item in value:
                old = [i for i, v in enumerate(merged) if v.get("name") == item.get("name")]
                if old:
                    merged[old[0]] = copy.deepcopy(item)
                else:
                    merged.append(copy.deepcopy(item))
        elif key in ("containers", "initContainers"):
            for container_patch in value:
                target = next((c for c in spec.get(key, []) if c.get("name") == container_patch["name"]), None)
                if target is None:
                    raise EmulationError(f"runtimePatches: no {key} {container_patch['name']!r} in the runtime")
                upsert_env(target.setdefault("env", []), container_patch.get("env", []))
                mounts = target.setdefault("volumeMounts", [])
                for mount in container_patch.get("volumeMounts", []):
                    mounts[:] = [m for m in mounts if m.get("mountPath") != mount.get("mountPath")] + [mount]
                if "securityContext" in container_patch:
                    target["securityContext"] = copy.deepcopy(container_patch["securityContext"])
        elif key == "nodeSelector":
            spec.setdefault(key, {}).update(value)
        elif key == "tolerations":
            spec.setdefault(key, []).extend(copy.deepcopy(value))
        else:
            spec[key] = copy.deepcopy(value)


def trainjob_pods(job: Dict[str, Any], documents: Sequence[Dict[str, Any]] = ()) -> List[Pod]:
    """The pods of a TrainJob on the Torch runtime (torch.go EnforceMLPolicy, jobset builder)."""
    runtime = find_runtime(job, documents)
    name, namespace = job["metadata"]["name"], job["metadata"].get("namespace", "default")
    policy = runtime["spec"].get("mlPolicy") or {}
    if "torch" not in policy:
        raise EmulationError(f"runtime {runtime['metadata']['name']!r}: only the Torch mlPolicy is emulated")
    trainer = job["spec"].get("trainer") or {}
    replicated = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    ancestor = "trainer.kubeflow.org/trainjob-ancestor-step"
    node_job = next((r for r in replicated
                     if (r.get("template", {}).get("metadata", {}).get("labels") or {}).get(ancestor) == "trainer"), None)
    if node_job is None:
        raise EmulationError("runtime: no replicatedJob labelled as the trainer ancestor")
    pod_spec = copy.deepcopy(node_job["template"]["spec"]["template"]["spec"])
    for patch in job["spec"].get("runtimePatches") or []:
        for job_patch in ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec", {}) \
                .get("replicatedJobs", []):
            if job_patch.get("name") == node_job["name"]:
                _patch_pod_spec(pod_spec, job_patch.get("template", {}).get("spec", {}).get("template", {})
                                .get("spec", {}))
    container = next((c for c in pod_spec["containers"] if c["name"] == "node"), None)
    if container is None:
        raise EmulationError("runtime: the trainer job has no container named `node`")
    if trainer.get("command") is not None:
        container["command"] = list(trainer["command"])
    if trainer.get("args") is not None:
        container["args"] = list(trainer["args"])
    if trainer.get("resourcesPerNode") is not None:
        container["resources"] = copy.deepcopy(trainer["resourcesPerNode"])
    resources = container.get("resources") or {}
    nodes = trainer.get("numNodes", policy.get("numNodes", 1))
    procs: Any = trainer.get("numProcPerNode", "auto")
    gpus = quantity((resources.get("limits") or {}).get("nvidia.com/gpu", 0))
    if procs == "auto" and gpus == 0:
        cpu = (resources.get("requests") or {}).get("cpu") or (resources.get("limits") or {}).get("cpu") or 0
        procs = max(1, math.ceil(quantity(cpu)))
    env = container.setdefault("env", [])
    upsert_env(env, trainer.get("env") or [])
    upsert_env(env, [
        {"name": "PET_NNODES", "value": str(nodes)},
        {"name": "PET_NPROC_PER_NODE", "value": str(procs)},
        {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}},
        {"name": "PET_MASTER_ADDR", "value": f"{name}-{node_job['name']}-0-0.{name}"},
        {"name": "PET_MASTER_PORT", "value": str(TORCH_MASTER_PORT)},
    ])
    pods = []
    for index in range(nodes):
        hostname = f"{name}-{node_job['name']}-0-{index}"
        annotations = {COMPLETION_INDEX: str(index)}
        fields = {f"metadata.annotations['{COMPLETION_INDEX}']": str(index), "metadata.name": hostname,
                  "metadata.namespace": namespace}
        # the Job controller's env for indexed Jobs comes first; the container's follows
        pod_env = resolve_env([{"name": "JOB_COMPLETION_INDEX", "value": str(index)}, *env], fields)
        pods.append(Pod(name=hostname, hostname=hostname, subdomain=name, namespace=namespace,
                        command=_command(container, pod_env), env=pod_env, resources=resources,
                        volume_mounts=copy.deepcopy(container.get("volumeMounts") or []),
                        volumes=copy.deepcopy(pod_spec.get("volumes") or []),
                        working_dir=container.get("workingDir"), annotations=annotations))
    return pods


def _command(container: Dict[str, Any], env: List[Tuple[str, str]]) -> List[str]:
    words = [*(container.get("command") or []), *(container.get("args") or [])]
    if not container.get("command"):
        raise EmulationError(f"container {container['name']!r}: no command (the image's entrypoint is unknown here)")
    variables = dict(env)
    return [expand(str(word), variables) for word in words]


# --- PyTorchJob --------------------------------------------------------------------------------

def pytorchjob_pods(job: Dict[str, Any]) -> List[Pod]:
    """The pods of a PyTorchJob (training-operator v1.9.4: pytorch_defaults.go, envvar.go, master.go)."""
    spec = job["spec"]
    if spec.get("elasticPolicy"):
        raise EmulationError("spec.elasticPolicy: elastic PyTorchJobs are not emulated")
    name, namespace = job["metadata"]["name"], job["metadata"].get("namespace", "default")
    replica_specs = spec["pytorchReplicaSpecs"]
    if "Master" not in replica_specs:
        raise EmulationError("spec.pytorchReplicaSpecs: without a Master the operator sets no MASTER_ADDR")
    counts = {role: replica_specs[role].get("replicas", 1) for role in replica_specs}
    total = sum(counts.values())
    nproc = spec.get("nprocPerNode", "auto")
    world_size = total * (int(nproc) if str(nproc).isdigit() else 1)
    master_container = next(c for c in replica_specs["Master"]["template"]["spec"]["containers"] if c["name"] == "pytorch")
    port = next((p["containerPort"] for p in master_container.get("ports", []) if p.get("name") == "pytorchjob-port"),
                PYTORCHJOB_PORT)
    master = f"{name}-master-0"
    pods = []
    for role in ("Master", "Worker"):
        for index in range(counts.get(role, 0)):
            template = replica_specs[role]["template"]
            container = copy.deepcopy(next(c for c in template["spec"]["containers"] if c["name"] == "pytorch"))
            rank = index if role == "Master" else index + 1
            env = list(container.get("env") or [])
            env += [{"name": "PYTHONUNBUFFERED", "value": "1"},
                    {"name": "MASTER_PORT", "value": str(port)}, {"name": "PET_MASTER_PORT", "value": str(port)},
                    {"name": "MASTER_ADDR", "value": master}, {"name": "PET_MASTER_ADDR", "value": master},
                    {"name": "WORLD_SIZE", "value": str(world_size)}, {"name": "RANK", "value": str(rank)},
                    {"name": "PET_NODE_RANK", "value": str(rank)},
                    {"name": "PET_NPROC_PER_NODE", "value": str(nproc)},
                    {"name": "PET_NNODES", "value": str(total)}]
            pod_name = f"{name}-{role.lower()}-{index}"
            pod_env = resolve_env(env, {"metadata.name": pod_name, "metadata.namespace": namespace})
            pods.append(Pod(name=pod_name, hostname=pod_name, subdomain=None, namespace=namespace,
                            command=_command(container, pod_env), env=pod_env,
                            resources=container.get("resources") or {},
                            volume_mounts=container.get("volumeMounts") or [],
                            volumes=copy.deepcopy(template["spec"].get("volumes") or []),
                            working_dir=container.get("workingDir"), services=[pod_name]))
    return pods


def job_pods(documents: Sequence[Dict[str, Any]]) -> List[Pod]:
    """The pods of the one TrainJob or PyTorchJob among documents."""
    jobs = [d for d in documents if d.get("kind") in ("TrainJob", "PyTorchJob")]
    if len(jobs) != 1:
        raise EmulationError(f"expected one TrainJob or PyTorchJob, found {len(jobs)}")
    job = jobs[0]
    return trainjob_pods(job, documents) if job["kind"] == "TrainJob" else pytorchjob_pods(job)


# --- running them --------------------------------------------------------------------------------

@dataclass
class RunResult:
    exit_codes: Dict[str, int]   # 128 + n for a signal, as a container's exit code
    output: Dict[str, str]       # stdout and stderr together
    first_failure: Optional[str]  # the pod that failed first, or None
    stopped: List[str]           # pods this runner stopped (after a failure or the timeout)
    timed_out: bool
    addresses: Dict[str, str]    # pod -> its address on the bridge
    run_id: str                  # every pod process had MARKER=run_id in its environment

    @property
    def ok(self) -> bool:
        return self.first_failure is None and not self.timed_out


def _materialise_volume(volume: Dict[str, Any], root: Path, configmaps: Mapping[str, Dict[str, Any]],
                        pvcs: Mapping[str, Path]) -> Tuple[Path, Optional[str]]:
    """(host directory, how to mount it: None = bind, "tmpfs:<size>" = a fresh tmpfs)."""
    name = volume["name"]
    if "configMap" in volume:
        source = volume["configMap"]
        cm = configmaps.get(source["name"])
        if cm is None:
            raise EmulationError(f"volume {name}: no ConfigMap {source['name']!r} in the file")
        directory = root / "configmaps" / name
        directory.mkdir(parents=True)
        data = cm.get("data") or {}
        items = source.get("items") or [{"key": key, "path": key} for key in data]
        for item in items:
            if item["key"] not in data:
                raise EmulationError(f"volume {name}: ConfigMap {source['name']!r} has no key {item['key']!r}")
            path = directory / item["path"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(data[item["key"]])
            os.chmod(path, item.get("mode", source.get("defaultMode", 0o644)))
        return directory, None
    if "emptyDir" in volume:
        directory = root / "emptydir" / name
        directory.mkdir(parents=True)
        spec = volume["emptyDir"] or {}
        if spec.get("medium") == "Memory":
            size = spec.get("sizeLimit")
            return directory, "tmpfs:" + (str(int(quantity(size))) if size else "")
        return directory, None
    if "persistentVolumeClaim" in volume:
        claim = volume["persistentVolumeClaim"]["claimName"]
        if claim not in pvcs:
            raise EmulationError(f"volume {name}: PVC {claim!r} was not given to run_pods (pvcs=)")
        return Path(pvcs[claim]), None
    raise EmulationError(f"volume {name}: only configMap, emptyDir and persistentVolumeClaim are emulated")


def _setup_script(pod: Pod, root: Path, mounts: List[Tuple[str, Path, Optional[str], bool]]) -> str:
    """The shell run as the pod's pid 1 before exec: hostname, /etc/hosts, the volume mounts."""
    import shlex

    lines = ["set -e", f"hostname {shlex.quote(pod.hostname)}",
             f"mount --bind {shlex.quote(str(root / 'hosts'))} /etc/hosts"]
    for target, source, how, read_only in mounts:
        if how and how.startswith("tmpfs:"):
            size = how.split(":", 1)[1]
            options = f"-o size={size}" if size else ""
            lines.append(f"mount -t tmpfs {options} tmpfs {shlex.quote(target)}")
        else:
            lines.append(f"mount --bind {shlex.quote(str(source))} {shlex.quote(target)}")
        if read_only:
            lines.append(f"mount -o remount,bind,ro {shlex.quote(target)}")
    lines.append(f"cd {shlex.quote(pod.working_dir or '/')}")
    lines.append('exec "$@"')
    return "\n".join(lines)


def _hosts_file(pod: Pod, pods: Sequence[Pod], addresses: Mapping[str, str]) -> str:
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    for other in pods:
        names = other.dns_names()
        if other is pod:
            names = [*names, pod.hostname]  # only its own bare hostname, as the kubelet writes it
        if names:
            lines.append(f"{addresses[other.name]}\t" + " ".join(dict.fromkeys(names)))
    return "\n".join(lines) + "\n"


def _children(pid: int) -> List[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def run_pods(pods: Sequence[Pod], documents: Sequence[Dict[str, Any]] = (), *, workdir: Path,
             pvcs: Optional[Mapping[str, Path]] = None, timeout: float = 120.0,
             extra_env: Optional[Mapping[str, str]] = None) -> RunResult:
    """Start every pod, wait for all; the first to fail (or the timeout) stops the others
    (SIGTERM to each pod's pid 1, SIGKILL after GRACE). Every namespace, mount and created mount
    point is gone when this returns, whatever happened."""
    from trainspec.local.netns import Namespaces

    configmaps = {d["metadata"]["name"]: d for d in documents if d.get("kind") == "ConfigMap"}
    run_id = uuid.uuid4().hex
    workdir = Path(workdir)
    created_dirs: List[Path] = []
    procs: Dict[str, subprocess.Popen] = {}
    logs = {}
    exit_codes: Dict[str, int] = {}
    stopped: List[str] = []
    first_failure, timed_out = None, False
    path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/sbin", "/usr/local/bin",
                            "/usr/sbin", "/usr/bin", "/sbin", "/bin"])
    with Namespaces(len(pods)) as network:
        addresses = {pod.name: network.address(i) for i, pod in enumerate(pods)}
        try:
            for index, pod in enumerate(pods):
                root = workdir / pod.name
                root.mkdir(parents=True)
                (root / "hosts").write_text(_hosts_file(pod, pods, addresses))
                volumes = {v["name"]: _materialise_volume(v, root, configmaps, pvcs or {}) for v in pod.volumes}
                mounts = []
                for mount in pod.volume_mounts:
                    if mount["name"] not in volumes:
                        raise EmulationError(f"pod {pod.name}: volumeMount {mount['name']!r} names no volume")
                    source, how = volumes[mount["name"]]
                    if mount.get("subPath"):
                        if how:
                            raise EmulationError(f"pod {pod.name}: subPath on a Memory emptyDir is not emulated")
                        source = source / mount["subPath"]
                        if not source.is_file():  # one key of a ConfigMap mounts as that file
                            source.mkdir(parents=True, exist_ok=True)
                    read_only = bool(mount.get("readOnly")) or "configmaps" in source.parts
                    target = Path(mount["mountPath"])
                    missing = next((p for p in [*reversed(target.parents), target] if not p.exists()), None)
                    if missing is not None:
                        if source.is_file():
                            target.parent.mkdir(parents=True, exist_ok=True)
                            target.touch()
                        else:
                            target.mkdir(parents=True)
                        created_dirs.append(missing)
                    mounts.append((str(target), source, how, read_only))
                env = {"PATH": path, "HOME": "/root", "HOSTNAME": pod.hostname, **pod.environ,
                       **(extra_env or {}), MARKER: run_id}
                command = ["ip", "netns", "exec", network.netns(index),
                           "unshare", "--mount", "--uts", "--pid", "--fork", "--kill-child", "--mount-proc",
                           "--propagation", "private", "sh", "-c", _setup_script(pod, root, mounts), "sh", *pod.command]
                logs[pod.name] = root / "output.log"
                with open(logs[pod.name], "wb") as log:
                    procs[pod.name] = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                                       stderr=subprocess.STDOUT, env=env, start_new_session=True)
            first_failure, timed_out = _wait(procs, exit_codes, timeout)
        finally:
            stopped = _stop(procs, exit_codes)
            for directory in reversed(created_dirs):  # empty here: the mounts were the pods' own
                if os.path.isfile(directory):
                    os.unlink(directory)
                elif not os.path.ismount(directory):
                    shutil.rmtree(directory, ignore_errors=True)
    output = {name: log.read_text(errors="replace") for name, log in logs.items()}
    return RunResult(exit_codes=exit_codes, output=output, first_failure=first_failure, stopped=stopped,
                     timed_out=timed_out, addresses=addresses, run_id=run_id)


def _code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _wait(procs: Dict[str, subprocess.Popen], exit_codes: Dict[str, int], timeout: float):
    """Until every pod has exited, one fails, or the timeout: waits on pidfds, no polling."""
    fds = {os.pidfd_open(proc.pid): name for name, proc in procs.items()}
    deadline = time.monotonic() + timeout
    try:
        while len(exit_codes) < len(procs):
            left = deadline - time.monotonic()
            if left <= 0:
                return None, True
            ready, _, _ = select.select(list(fds), [], [], left)
            for fd in ready:
                name = fds.pop(fd)
                os.close(fd)
                exit_codes[name] = _code(procs[name].wait())
                if exit_codes[name] != 0:
                    return name, False
        return None, False
    finally:
        for fd in fds:
            os.close(fd)


def _stop(procs: Dict[str, subprocess.Popen], exit_codes: Dict[str, int]) -> List[str]:
    """SIGTERM to each running pod's pid 1 (unshare's child), SIGKILL to unshare after GRACE
    (its --kill-child takes pid 1, and with it every process of the pod's pid namespace). Returns
    once every pod's pid 1 has exited too: unshare's death only sends it SIGKILL, and it ends after
    the kernel has ended every other process of its namespace, as a deleted pod is gone only when
    its containers are."""
    running = {name: proc for name, proc in procs.items() if proc.poll() is None}
    pid_ones: List[int] = []  # pidfds of each running pod's pid 1
    for proc in running.values():
        for child in _children(proc.pid):
            try:
                pid_ones.append(os.pidfd_open(child))
                os.kill(child, signal.SIGTERM)
            except ProcessLookupError:
                pass
    try:
        stopped = _stop_unshares(procs, running, exit_codes)
        deadline = time.monotonic() + 60  # far above a SIGKILLed namespace's end
        waiting = list(pid_ones)
        while waiting and time.monotonic() < deadline:
            ready, _, _ = select.select(waiting, [], [], max(0.0, deadline - time.monotonic()))
            waiting = [fd for fd in waiting if fd not in ready]
        if waiting:
            raise EmulationError(f"{len(waiting)} pod(s) still running 60 s after SIGKILL")
        return stopped
    finally:
        for fd in pid_ones:
            os.close(fd)


def _stop_unshares(procs: Dict[str, subprocess.Popen], running: Dict[str, subprocess.Popen],
                   exit_codes: Dict[str, int]) -> List[str]:
    """Each running pod's unshare ended (waited for GRACE after its pid 1's SIGTERM, then SIGKILL),
    every exit code collected; returns the pods that were running."""
    deadline = time.monotonic() + GRACE
    for name, proc in running.items():
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        exit_codes[name] = _code(proc.returncode)
    for name, proc in procs.items():
        if name not in exit_codes:
            exit_codes[name] = _code(proc.wait())
    return sorted(running)
