"""Ray cluster on Azure: ``cluster.yaml`` for ``ray up``, and ``launch.sh`` that starts the
training on it.

The cluster (../shared/reference/ray.md):

- every training node is the spec's SKU, with ``resources`` carrying the SKU's real vCPU and
  GPU counts; ``min_workers = max_workers`` so that every node exists before training starts;
- the head (``targets.ray.head``): by default ``worker`` -- one of the training nodes. A 2-node
  job then costs 2 VMs, not 3; the head's own processes (GCS, autoscaler) need a core or two
  of a 24-96 vCPU GPU VM, and the cluster exists only for this job. ``cpu`` adds a small CPU VM
  as head, which keeps the autoscaler off the GPUs and lets spot workers come and go without
  losing the cluster: pick it for spot or for many nodes;
- spot workers get ``priority: Spot`` + ``evictionPolicy: Delete`` + ``billingProfile``;
  regular ones get ``priority: Regular`` and *no* ``evictionPolicy`` (ray#46198: sending one
  for a regular VM failed every worker). The head is never spot;
- ``file_mounts`` carry the code directory, the shim and the launcher to ``~/trainspec``;
  ``setup_commands`` install Ray and the spec's environment (pip, or a conda file); an image
  becomes the ``docker`` block; ``auth`` is left to Ray's defaults unless keys are given.

The training: ``launch.sh`` runs ``ray up``, then ``ray exec`` of the driver
(``trainspec/runtime/ray_driver.py``, copied as ``trainspec_ray_driver.py``) on the job request
``trainspec_ray_job.json`` written here (its type: ``runtime/ray_request.py``, shipped too); it
places one bundle per node (STRICT_SPREAD) and runs the spec's unmodified command under the shim
on ``nodes x procs_per_node`` processes, then launch.sh says how to tear the cluster down.
"""

from __future__ import annotations

import difflib
import re
import shlex
from pathlib import Path
from typing import Any, Dict, List, Optional

from trainspec.core.diagnostics import Diagnostic, error, warning
from trainspec.spec import skus
from trainspec.spec.validate import ValidSpec
from trainspec.targets import TARGETS
from trainspec.compile import base, capabilities, emit
from trainspec.targets.ray.settings import NAME
from trainspec.compile.capabilities import Feature, only, problem, unsupported

# Who starts the processes when the spec does not say (framework -> distribution.launcher):
# the driver starts one actor per process, like Azure ML's pytorch distribution.
LAUNCHERS = {"pytorch": "per-process", "lightning": "per-process", "huggingface": "per-process",
             "deepspeed": "per-process"}
CLUSTER_FILE = "cluster.yaml"
LAUNCH_FILE = "launch.sh"
DRIVER_FILE = "trainspec_ray_driver.py"  # runtime/ray_driver.py, copied
PROCS_FILE = "trainspec_procs.py"  # runtime/procs.py, copied: the driver's process handling
REQUEST_FILE = "trainspec_ray_job.json"  # what the driver runs: the job's shape
REQUEST_TYPE_FILE = "trainspec_ray_request.py"  # runtime/ray_request.py, copied: the request's one definition
SUBMIT = "bash {dir}/" + LAUNCH_FILE
REMOTE = "~/trainspec"  # where file_mounts put things on every node
HEAD_TYPE = "ray.head.default"
WORKER_TYPE = "ray.worker.gpu"
# Microsoft's Ubuntu HPC image: NVIDIA drivers, CUDA, NCCL, InfiniBand (OFED) and docker
IMAGE = {"imagePublisher": "microsoft-dsvm", "imageOffer": "ubuntu-hpc", "imageSku": "2204",
         "imageVersion": "latest"}
# what `ray up` (here) and the head's autoscaler need to drive Azure (ray.md §4)
AZURE_SDK = ("azure-cli-core", "azure-core", "azure-identity", "azure-mgmt-compute", "azure-mgmt-network",
             "azure-mgmt-resource", "azure-common", "msrest", "msrestazure")
RUNTIME = Path(__file__).resolve().parents[2] / "runtime"
_REMOTE_DATA = re.compile(r"^(https?://|wasbs?://|abfss?://|s3://|gs://)")

# Azure regions that offer GPU VM sizes (az account list-locations, 2026): a misspelt
# location is otherwise caught only by `ray up`, after it created the resource group.
AZURE_REGIONS = (
    "australiaeast", "brazilsouth", "canadacentral", "canadaeast", "centralindia", "centralus",
    "eastasia", "eastus", "eastus2", "francecentral", "germanywestcentral", "italynorth", "japaneast",
    "japanwest", "koreacentral", "northcentralus", "northeurope", "norwayeast", "polandcentral",
    "qatarcentral", "southafricanorth", "southcentralus", "southeastasia", "southindia", "spaincentral",
    "swedencentral", "switzerlandnorth", "uaenorth", "uksouth", "ukwest", "westcentralus", "westeurope",
    "westus", "westus2", "westus3",
)


# What Ray cannot run, by feature (capabilities.py: the catalogue, the matrix in docs/capabilities.md)
CANNOT_RUN = {
    Feature.ENV_DATA_REF: unsupported(),  # ${{outputs.x}} in a variable is Azure ML's alone
    Feature.NO_SKU: problem("a Ray cluster on Azure needs the VM size of its nodes",
                            "set resources.sku, e.g. Standard_ND96isr_H100_v5"),
    Feature.TENSORFLOW: unsupported("TensorFlow jobs (the launcher sets torch's variables)", "run TensorFlow on Azure ML"),
    Feature.LAUNCHER_MPI: unsupported("launcher mpi: Ray has no mpirun",
                                      "use per-process (one actor per process) or per-node"),
    Feature.ENV_AZUREML: unsupported(hint="use environment.image, conda_file or pip"),
    Feature.ENV_BUILD: unsupported("a Docker build context (Ray pulls an image)",
                                   "push the image it builds and use environment.image"),
    Feature.SPOT: problem("the head is one of the training nodes and stays on regular capacity; only the other "
                          "nodes are spot", "set targets.ray.head: cpu to make every training node spot", fatal=False,
                          when=only("head: worker, the default", lambda valid: valid.spec.targets.ray is None
                                    or valid.spec.targets.ray.head == "worker")),
    Feature.SHM_SIZE: unsupported("a shared-memory size without a container: it sizes the docker block",
                                  "set environment.image, or remove shm_size", fatal=False,
                                  when=only("without environment.image", lambda valid: not valid.spec.environment.image)),
    Feature.INPUT_EVAL_MODE: unsupported(fatal=False),
    Feature.OUTPUT_ASSET_NAME: unsupported(fatal=False),
    Feature.INPUT_DATA_ASSET: unsupported("the Azure ML data asset '{path}'",
                                          "give a local path (uploaded with file_mounts) or an https/abfss URL"),
}


def cannot_express(valid: ValidSpec) -> List[Diagnostic]:
    """What Ray cannot run: its table (CANNOT_RUN), then what depends on its settings and the command."""
    spec = valid.spec
    settings = spec.targets.ray
    out = capabilities.check(NAME, CANNOT_RUN, valid)
    if settings is None:
        out.append(error(("targets", "ray"), "compiling for ray needs targets.ray (location, resource_group)",
                         "add targets: {ray: {location: eastus, resource_group: rg-training}}"))
        return out
    if settings.location not in AZURE_REGIONS:
        close = difflib.get_close_matches(settings.location, AZURE_REGIONS, n=2)
        out.append(error(("targets", "ray", "location"), f"'{settings.location}' is not an Azure region",
                         f"did you mean {' or '.join(close)}?" if close else "e.g. eastus, westeurope"))
    if settings.head == "cpu" and _head_sku(valid) is None:
        close = skus.closest(settings.head_sku)
        out.append(error(("targets", "ray", "head_sku"), f"unknown Azure VM size '{settings.head_sku}'",
                         f"did you mean {', '.join(close)}?" if close else None))
    if (settings.ssh_private_key is None) != (settings.ssh_public_key is None):
        which = "ssh_public_key" if settings.ssh_public_key is None else "ssh_private_key"
        out.append(error(("targets", "ray", which), "give both ssh keys or neither (Ray generates a pair)"))
    launcher = base.launcher(valid, LAUNCHERS)
    out += base.command_variable_errors(NAME, valid, launcher)
    if launcher == "per-node" and spec.framework != "lightning":
        out += base.torchrun_errors(valid, refs_for(valid), "per-node launch wraps the command in torchrun",
                                    "write `python train.py ...`, or use launcher: per-process")
    return out


def refs_for(valid: ValidSpec):
    spec = valid.spec

    def refs(kind: str, name: str) -> str:
        item = spec.inputs[name] if kind == "inputs" else spec.outputs[name]
        if kind == "inputs" and item.path is None:
            return shlex.quote(base.literal_text(item.value))
        path = item.path
        if path is None:
            return f"$HOME/trainspec/outputs/{name}"  # on each node; $HOME expands in the actor's shell
        if kind == "inputs" and not _REMOTE_DATA.match(path) and not path.startswith("/"):
            return f"$HOME/trainspec/inputs/{name}"  # a local folder, uploaded by file_mounts
        return shlex.quote(path)

    return refs


def lower(valid: ValidSpec, out_dir: Path) -> base.Artifact:
    spec = valid.spec
    header = emit.yaml_header(valid.source.display, valid.source.digest, NAME)
    files = (
        base.OutFile(CLUSTER_FILE, emit.yaml_bytes(cluster_config(valid, out_dir), header)),
        base.OutFile(LAUNCH_FILE, _launch_script(valid).encode("utf-8"), executable=True),
        base.shim_file(),
        base.OutFile(REQUEST_FILE, job_request(valid).to_json()),
        base.runtime_file(DRIVER_FILE, RUNTIME / "ray_driver.py"),
        base.runtime_file(PROCS_FILE, RUNTIME / "procs.py"),
        base.runtime_file(REQUEST_TYPE_FILE, RUNTIME / "ray_request.py"),
    )
    return base.Artifact(target=NAME, name=spec.name, files=files, submit=SUBMIT)


def _head_sku(valid: ValidSpec) -> Optional[skus.Sku]:
    """The cpu head's size, looked up where the spec's own size was: the team's catalog too."""
    return skus.catalog_for(valid.source.dir)[0].lookup(valid.spec.targets.ray.head_sku)


def cluster_config(valid: ValidSpec, out_dir: Path) -> Dict[str, Any]:
    spec = valid.spec
    settings = spec.targets.ray
    sku = valid.sku
    workers = valid.nodes - 1 if settings.head == "worker" else valid.nodes
    training = {"CPU": sku.vcpus, "GPU": sku.gpus}
    config: Dict[str, Any] = {
        "cluster_name": settings.cluster_name or spec.name,
        "max_workers": workers,
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": settings.idle_timeout_minutes,
    }
    docker = _docker(valid)
    if docker:
        config["docker"] = docker
    provider: Dict[str, Any] = {"type": "azure", "location": settings.location,
                                "resource_group": settings.resource_group}
    if settings.subscription_id:
        provider["subscription_id"] = settings.subscription_id
    provider["cache_stopped_nodes"] = False  # a training cluster is torn down, not parked
    config["provider"] = provider
    auth: Dict[str, Any] = {"ssh_user": settings.ssh_user}
    if settings.ssh_private_key:
        auth["ssh_private_key"] = settings.ssh_private_key
        auth["ssh_public_key"] = settings.ssh_public_key
    config["auth"] = auth
    if settings.head == "worker":
        head = {"resources": training, "node_config": _node_config(sku.name, spot=False)}
    else:
        head_sku = _head_sku(valid)
        # no GPU and CPU 0: nothing of the training is ever scheduled on a cpu head
        head = {"resources": {"CPU": 0}, "node_config": _node_config(head_sku.name, spot=False)}
    node_types: Dict[str, Any] = {HEAD_TYPE: head}
    if workers:
        node_types[WORKER_TYPE] = {"min_workers": workers, "max_workers": workers, "resources": training,
                                   "node_config": _node_config(sku.name, spot=spec.resources.spot)}
    config["available_node_types"] = node_types
    config["head_node_type"] = HEAD_TYPE
    config["file_mounts"] = _file_mounts(valid, out_dir)
    config["rsync_exclude"] = ["**/.git", "**/.git/**", "**/__pycache__"]
    config["initialization_commands"] = ["sudo usermod -aG docker $USER || true"] if docker else []
    config["setup_commands"] = _setup_commands(valid)
    # the head's autoscaler launches the workers through the Azure SDK
    config["head_setup_commands"] = [shlex.join([*shlex.split(settings.python), "-m", "pip", "install", "-q",
                                                 *AZURE_SDK])]
    return config


def _node_config(vm_size: str, *, spot: bool) -> Dict[str, Any]:
    arm: Dict[str, Any] = {"vmSize": vm_size, **IMAGE, "osDiskSize": 256, "enableAcceleratedNetworking": True}
    if spot:
        arm.update(priority="Spot", evictionPolicy="Delete", billingProfile={"maxPrice": -1})
    else:
        arm["priority"] = "Regular"
    return {"azure_arm_parameters": arm}


def _docker(valid: ValidSpec) -> Optional[Dict[str, Any]]:
    image = valid.spec.environment.image
    if not image:
        return None
    run_options = ["--ulimit memlock=-1", "--ulimit nofile=65536:65536", "--cap-add=IPC_LOCK"]
    if valid.spec.resources.shm_size:
        run_options.append(f"--shm-size={valid.spec.resources.shm_size}")
    if valid.gpus_per_node:
        run_options.append("--gpus all")
    return {"image": image, "container_name": "trainspec", "pull_before_run": True, "run_options": run_options}


def _file_mounts(valid: ValidSpec, out_dir: Path) -> Dict[str, str]:
    spec = valid.spec
    mounts = {
        f"{REMOTE}/code": base.relative(valid.resolve(spec.code), out_dir),
        f"{REMOTE}/{base.SHIM_FILE}": f"./{base.SHIM_FILE}",
        **{f"{REMOTE}/{name}": f"./{name}" for name in (REQUEST_FILE, DRIVER_FILE, PROCS_FILE, REQUEST_TYPE_FILE)},
    }
    if spec.environment.conda_file:
        mounts[f"{REMOTE}/environment.yml"] = base.relative(valid.resolve(spec.environment.conda_file), out_dir)
    for name, item in spec.inputs.items():
        if item.path is not None and not _REMOTE_DATA.match(item.path) and not item.path.startswith(("/", "azureml:")):
            mounts[f"{REMOTE}/inputs/{name}"] = base.relative(valid.resolve(item.path), out_dir)
    return mounts


def _setup_commands(valid: ValidSpec) -> List[str]:
    e = valid.spec.environment
    settings = valid.spec.targets.ray
    python = shlex.split(settings.python)
    commands = [shlex.join([*python, "-m", "pip", "install", "-q", f"ray[default]=={settings.ray_version}"])]
    if e.pip:
        commands.append(shlex.join([*python, "-m", "pip", "install", "-q", *e.pip]))
    if e.conda_file:
        commands.append(f"conda env update -n base -f {REMOTE}/environment.yml")
    return commands


def _command(valid: ValidSpec) -> str:
    """What every actor runs (bash, in ~/trainspec/code): the spec's command under the shim."""
    spec = valid.spec
    python = shlex.split(spec.targets.ray.python)
    command = valid.render(("command",), spec.command, refs_for(valid)).strip()
    per_node = base.launcher(valid, LAUNCHERS) == "per-node"
    if per_node and spec.framework != "lightning" and not base.own_spawner(command):
        # node rank, master address and port reach torchrun from the shim as PET_*
        command = base.torchrun_line(valid, command, python=shlex.join(python))
    return base.under_shim(f"{shlex.join([*python, *base.SHIM_FLAGS])} $HOME/trainspec/{base.SHIM_FILE}", command,
                           valid)


def job_request(valid: ValidSpec):
    """What the driver runs: the job's shape, as the driver's own type (runtime/ray_request.py)."""
    from ...runtime.ray_request import Request

    launcher = base.launcher(valid, LAUNCHERS)
    env = base.job_env(valid, refs_for(valid), launcher)
    return Request(nodes=valid.nodes, procs_per_node=valid.procs_per_node, launcher=launcher,
                   gpus_per_node=valid.gpus_per_node, cpus_per_node=valid.procs_per_node,
                   placement="STRICT_SPREAD", workdir="code", env=env, command=_command(valid),
                   master_port=None)  # None: the driver finds a free port on rank 0's node


def driver_argv(valid: ValidSpec) -> List[str]:
    """The driver's command line on the head (run by `ray exec` from the home directory)."""
    return [*shlex.split(valid.spec.targets.ray.python), f"trainspec/{DRIVER_FILE}", f"trainspec/{REQUEST_FILE}"]


def _launch_script(valid: ValidSpec) -> str:
    lines = [
        "#!/usr/bin/env bash",
        *[f"# {line}" for line in emit.header_lines(valid.source.display, valid.source.digest, NAME)],
        "# Start the cluster, run the training on it, then tear it down yourself when done.",
        "# Needs here: " + shlex.join(["pip", "install", f"ray[default]=={valid.spec.targets.ray.ray_version}",
                                       *AZURE_SDK]) + " and `az login`.",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        f"trap 'echo \"trainspec: when done, tear the cluster down: ray down -y $PWD/{CLUSTER_FILE}\"' EXIT",
        f"ray up -y {CLUSTER_FILE}",
        f"ray exec {CLUSTER_FILE} {shlex.quote(shlex.join(driver_argv(valid)))}",
    ]
    return "\n".join(lines) + "\n"


def cluster_problems(config: Dict[str, Any]) -> List[str]:
    """What Ray's own validation lets through in an Azure cluster config (ray.md §1): provider
    location/resource_group missing or misspelt, vmSize missing, resources that disagree with
    the VM size's catalog entry. Usable on hand-written configs too."""
    problems: List[str] = []
    provider = config.get("provider") or {}
    if provider.get("type") == "azure":
        for key in ("location", "resource_group"):
            if not provider.get(key):
                near = [k for k in provider if difflib.get_close_matches(k, [key], n=1, cutoff=0.75)]
                problems.append(f"provider.{key} is missing" + (f" (found '{near[0]}': misspelt?)" if near else ""))
        location = provider.get("location")
        if location and location not in AZURE_REGIONS:
            problems.append(f"provider.location '{location}' is not an Azure region")
    for name, node_type in (config.get("available_node_types") or {}).items():
        arm = ((node_type.get("node_config") or {}).get("azure_arm_parameters") or {})
        vm_size = arm.get("vmSize")
        if not vm_size:
            near = [k for k in arm if k.lower() == "vmsize"]
            problems.append(f"available_node_types.{name}: node_config.azure_arm_parameters.vmSize is missing"
                            + (f" (found '{near[0]}': misspelt?)" if near else ""))
            continue
        sku = skus.lookup(vm_size)
        resources = node_type.get("resources") or {}
        if sku is None:
            problems.append(f"available_node_types.{name}: unknown VM size '{vm_size}'")
        elif resources.get("GPU", 0) != sku.gpus:
            problems.append(f"available_node_types.{name}: resources.GPU is {resources.get('GPU', 0)} "
                            f"but {sku.name} has {sku.gpus} GPUs")
    return problems


# --- what plan and run --local need --------------------------------------------------------

def plan_port(valid: ValidSpec) -> str:
    return "<free port on node 0>"  # the driver picks it when the job starts


def plan_settings(valid: ValidSpec) -> Dict[str, str]:
    return {"shim": base.plan_shim(valid.spec.targets.ray.python)}


# run --local: a Ray job needs a Ray cluster, which this machine does not pretend to be
LOCAL_REFUSAL = ("run --local plays the jobs of the other targets (-t " + "|".join(sorted(set(TARGETS) - {NAME}))
                 + "); a Ray job runs on a Ray cluster: start it with `bash OUT/<name>/ray/launch.sh` (README, "
                 "Ray), or try the spec here with another -t")


class Ray(base.Target):
    name = NAME
    launchers = LAUNCHERS
    cannot_run = CANNOT_RUN
    cannot_express = staticmethod(cannot_express)
    lower = staticmethod(lower)
    refs_for = staticmethod(refs_for)
    plan_port = staticmethod(plan_port)
    plan_settings = staticmethod(plan_settings)
    local_refusal = LOCAL_REFUSAL


TARGET = Ray()
