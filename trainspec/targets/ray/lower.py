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
  ``initialization_commands`` run on the VM itself, before the image is pulled and the container
  started: ``targets.ray.setup`` (what a bind mount needs there: storage, a secret's file), then
  the registry login (``targets.ray.registry``: docker login reading the secrets' files on the
  VM); ``setup_commands`` install Ray and the spec's environment (pip, or a conda file) where the
  job runs; an image becomes the ``docker`` block, which binds the volumes at absolute paths and
  each secret's file at its path; ``auth`` is left to Ray's defaults unless keys are given.

The training: ``launch.sh`` runs ``ray up``, then ``ray exec`` of the driver
(``trainspec/runtime/ray_driver.py``, copied as ``trainspec_ray_driver.py``) on the job request
``trainspec_ray_job.json`` written here (its type: ``runtime/ray_request.py``, shipped too); it
places one bundle per node (STRICT_SPREAD) and runs the spec's unmodified command under the shim
on ``nodes x procs_per_node`` processes, and stops them all at the spec's ``timeout`` (the
request's; exit 124). Whatever ends the job -- its end, a failure, the time limit, Ctrl-C --
launch.sh's trap runs ``ray down -y``, so no VM outlives it, unless ``targets.ray.keep_cluster``
keeps the cluster (then it says how to delete it).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any, Dict, List, Optional

from trainspec.core.diagnostics import Diagnostic, error, warning
from trainspec.core.patterns import Lazy
from trainspec.schema import skus
from trainspec.schema.validate import ValidSpec
from trainspec.schema.vocabulary import targets
from trainspec.compiler import base, capabilities, emit
from trainspec.targets.ray.settings import NAME, URL_SCHEMES
from trainspec.compiler.capabilities import Feature, only, problem, unsupported

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
VM_IMAGE = ":".join(IMAGE[key] for key in ("imagePublisher", "imageOffer", "imageSku"))  # as plan names it
# what `ray up` (here) and the head's autoscaler need to drive Azure (ray.md §4)
AZURE_SDK = ("azure-cli-core", "azure-core", "azure-identity", "azure-mgmt-compute", "azure-mgmt-network",
             "azure-mgmt-resource", "azure-common", "msrest", "msrestazure")
RUNTIME = Path(__file__).resolve().parents[2] / "runtime"
_REMOTE_DATA = Lazy(r"^(https?://|wasbs?://|abfss?://|s3://|gs://)")

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
    Feature.INFINIBAND: problem("{spec.resources.sku} has InfiniBand, but Ray's Azure VMs are standalone "
                                "(InfiniBand joins only the VMs of one scale set or availability set): NCCL runs over "
                                "TCP between the {spec.resources.nodes} nodes",
                                "train on one node (nodes: 1, its GPUs talk over NVLink), or compile the multi-node "
                                "job for another target: every other one gives the job InfiniBand",
                                fatal=False),
    Feature.INPUT_EVAL_MODE: unsupported(fatal=False),
    Feature.OUTPUT_ASSET_NAME: unsupported(fatal=False),
    Feature.INPUT_DATA_ASSET: unsupported("the Azure ML data asset '{path}'",
                                          "say where the data is for the cluster: targets.ray.volumes.{name}: "
                                          "{{path: abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/DIR}}"),
}
_LOST_OUTPUT = "what the job writes would stay on a VM that `ray down` deletes"
_KEEP_OUTPUT = ("say where it goes: targets.ray.volumes.{name}: {{path: abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/"
         "DIR}} (or an absolute path every node mounts); Azure ML keeps the job's own output")


def cannot_express(valid: ValidSpec) -> List[Diagnostic]:
    """What Ray cannot run: its table (CANNOT_RUN), then what depends on its settings and the command."""
    spec = valid.spec
    settings = spec.targets.ray
    out = capabilities.check(NAME, CANNOT_RUN, valid, volumes=settings.volumes if settings is not None else ())
    if valid.sku is not None and valid.sku.vendor == "amd":
        out.append(warning(("resources", "sku"), f"ray's VMs boot {VM_IMAGE}, built for NVIDIA GPUs (CUDA "
                           f"drivers): {valid.sku.name}'s AMD {valid.sku.gpu} GPUs "
                           "need ROCm's driver, which trainspec cannot say it has",
                           "check that the image has ROCm on this size before `ray up`, or run the job on kubernetes "
                           "or slurm"))
    if settings is None:
        out.append(error(("targets", "ray"), "compiling for ray needs targets.ray (location, resource_group)",
                         "add targets: {ray: {location: eastus, resource_group: rg-training}}"))
        return out
    out += base.lost_output_errors(NAME, valid, settings.volumes, _LOST_OUTPUT, _KEEP_OUTPUT)
    for name, item in spec.outputs.items():
        if name not in settings.volumes and item.path is not None and not _kept(item.path):
            out.append(error(("outputs", name, "path"), f"on Ray '{item.path}' is no place every node writes to "
                             "and that outlives the cluster: " + _LOST_OUTPUT, _KEEP_OUTPUT.format(name=name)))
    if settings.location not in AZURE_REGIONS:
        import difflib  # only for a mistake: off compile's start-up path

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
    from ...runtime.ray_request import MAX_TIMEOUT

    out += base.time_limit_errors(NAME, base.time_limit(valid, NAME, "timeout"), MAX_TIMEOUT,
                                  "driver (its job request's timeout)")
    launcher = valid.launcher
    out += base.command_variable_errors(NAME, valid, launcher)
    if launcher == "per-node" and spec.framework != "lightning":
        out += base.torchrun_errors(valid, refs_for(valid), "per-node launch wraps the command in torchrun",
                                    "write `python train.py ...`, or use launcher: per-process")
    if spec.environment.image:
        for key, reference in spec.secrets.items():
            if reference.file is not None and any(c in reference.file for c in _MOUNT_BREAKERS):
                out.append(error(("secrets", key, "file"), "a secret's file is mounted into the container (docker "
                                 "--mount type=bind,source=...), whose list cannot hold a path with ',' or '\"'",
                                 "move the file to a path without them"))
    return out + url_arguments(valid)


_MOUNT_BREAKERS = (",", '"')  # docker --mount reads its value as one CSV record


def url_arguments(valid: ValidSpec) -> List[Diagnostic]:
    """A warning at each input or output whose ``{{ inputs.x }}`` / ``{{ outputs.x }}`` the command
    gets as a storage URL: Ray mounts no storage, so the program receives the URL itself, and one
    that wants a local path (HF Trainer's --output_dir, open(), torch.save) writes a folder named
    ``abfss:`` on a VM that `ray down` deletes. A volume at an absolute path (storage the VMs
    mount) makes it a path."""
    def marker(kind: str, name: str) -> str:
        return f"\x00{kind}\x00{name}\x00"

    named = re.findall(r"\x00(inputs|outputs)\x00([^\x00]+)\x00", valid.render(("command",), valid.spec.command, marker))
    volumes = valid.spec.targets.ray.volumes
    out = []
    for kind, name in dict.fromkeys(named):
        item = (valid.spec.inputs if kind == "inputs" else valid.spec.outputs).get(name)
        location = volumes[name].path if name in volumes else getattr(item, "path", None)
        if location is None:
            continue  # a literal input (a value, not data), or an output without a place (an error above)
        if _REMOTE_DATA.match(location) or location.startswith(URL_SCHEMES):
            harm = ("finds no such folder" if kind == "inputs" else
                    "makes a folder of that name on a VM that `ray down` deletes")
            out.append(warning((kind, name), f"the command gets {{{{ {kind}.{name} }}}} as the URL '{location}', not a "
                               f"path: Ray mounts no storage, and a program that wants a local path there (HF "
                               f"Trainer's --output_dir, open(), torch.save) {harm}",
                               "mount the storage on every VM (targets.ray.setup) and give "
                               f"targets.ray.volumes.{name}: {{path: /mnt/...}} (mounted into the container at that "
                               "path), or open the URL in the code (fsspec, Ray Train's storage_path)"))
    return out


def _kept(path: str) -> bool:
    """An output location that outlives the cluster: an absolute path (storage the nodes mount) or
    a storage URL the job's code writes itself."""
    return path.startswith(("/", *URL_SCHEMES))


def refs_for(valid: ValidSpec):
    """``{{ inputs.x }}`` / ``{{ outputs.x }}``: the path or URL of its volume (targets.ray.volumes),
    else its own path (a relative input: the folder file_mounts uploads to every node) or literal."""
    spec = valid.spec
    volumes = spec.targets.ray.volumes if spec.targets.ray is not None else {}

    def refs(kind: str, name: str) -> str:
        if name in volumes:
            return shlex.quote(volumes[name].path)
        item = spec.inputs[name] if kind == "inputs" else spec.outputs[name]
        if kind == "inputs" and item.path is None:
            return shlex.quote(base.literal_text(item.value))
        path = item.path
        if path is None:  # an error (cannot_express): the VM's disk goes with `ray down`
            return shlex.quote(f"<outputs.{name}: no location, see targets.ray.volumes>")
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
        base.shim_file(NAME),
        base.OutFile(REQUEST_FILE, job_request(valid).to_json()),
        base.runtime_file(DRIVER_FILE, RUNTIME / "ray_driver.py"),
        base.runtime_file(PROCS_FILE, RUNTIME / "procs.py"),
        base.runtime_file(REQUEST_TYPE_FILE, RUNTIME / "ray_request.py"),
        *base.secrets_files(valid),
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
    config["initialization_commands"] = _initialization_commands(valid, docker is not None)
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
    if valid.gpus_per_node:  # NVIDIA's container toolkit; AMD's GPUs are the ROCm devices (ROCm's docker docs)
        amd = valid.sku is not None and valid.sku.vendor == "amd"
        run_options += ["--device=/dev/kfd", "--device=/dev/dri", "--group-add=video"] if amd else ["--gpus all"]
    # data on storage the nodes mount is at the same path in the container: inputs read-only
    # (writable with mode: rw_mount). Ray joins run_options into the shell line of `docker run`: each one is quoted
    writable = data_paths(valid, "inputs", writable=True)
    for kind in ("inputs", "outputs"):
        for location in data_paths(valid, kind):
            ro = kind == "inputs" and location not in writable
            run_options.append("--volume=" + shlex.quote(f"{location}:{location}" + (":ro" if ro else "")))
    # each secret's file, read-only at its own path: the secrets helper reads it in the container. A bind
    # --mount, not --volume: a file missing on the VM fails `docker run` (ray up) instead of becoming a directory
    for path in _secret_files(valid):
        run_options.append("--mount=" + shlex.quote(f"type=bind,source={path},target={path},readonly"))
    return {"image": image, "container_name": "trainspec", "pull_before_run": True, "run_options": run_options}


def data_paths(valid: ValidSpec, kind: str, writable: bool = False) -> List[str]:
    """The absolute paths on the nodes where the job's inputs or outputs (``kind``) are: a volume's
    path, else the spec's own absolute path (URLs and uploaded folders are no mount); ``writable``:
    only those the job writes (base.read_only)."""
    volumes = valid.spec.targets.ray.volumes
    items = valid.spec.inputs if kind == "inputs" else valid.spec.outputs
    paths = [volumes[name].path if name in volumes else item.path for name, item in items.items()
             if not (writable and base.read_only(kind, item))]
    return list(dict.fromkeys(path for path in paths if path is not None and path.startswith("/")))


def _file_mounts(valid: ValidSpec, out_dir: Path) -> Dict[str, str]:
    spec = valid.spec
    mounts = {
        f"{REMOTE}/code": base.relative(valid.resolve(spec.code), out_dir),
        f"{REMOTE}/{base.SHIM_FILE}": f"./{base.SHIM_FILE}",
        **{f"{REMOTE}/{name}": f"./{name}" for name in (REQUEST_FILE, DRIVER_FILE, PROCS_FILE, REQUEST_TYPE_FILE)},
        **{f"{REMOTE}/{f.path}": f"./{f.path}" for f in base.secrets_files(valid)},
    }
    if spec.environment.conda_file:
        mounts[f"{REMOTE}/environment.yml"] = base.relative(valid.resolve(spec.environment.conda_file), out_dir)
    for name, item in spec.inputs.items():
        if name in spec.targets.ray.volumes:
            continue  # the data is where the volume says, not uploaded
        if item.path is not None and not _REMOTE_DATA.match(item.path) and not item.path.startswith(("/", "azureml:")):
            mounts[f"{REMOTE}/inputs/{name}"] = base.relative(valid.resolve(item.path), out_dir)
    return mounts


def _secret_files(valid: ValidSpec) -> List[str]:
    """The files on the VMs the job's secrets are read from (validated: absolute paths), once each."""
    return list(dict.fromkeys(reference.file for reference in valid.spec.secrets.values()))


# Docker Hub under its own names: `docker login` without a server logs in there
_DOCKER_HUB = ("docker.io", "index.docker.io", "registry-1.docker.io")


def registry_server(image: str) -> Optional[str]:
    """The registry ``docker pull IMAGE`` asks: the first part of the name when it holds a . or a :
    or is localhost (Docker's own rule), else Docker Hub (None: `docker login` with no server)."""
    first, slash, _ = image.partition("@")[0].partition("/")
    if slash and ("." in first or ":" in first or first == "localhost") and first not in _DOCKER_HUB:
        return first
    return None


def _initialization_commands(valid: ValidSpec, docker: bool) -> List[str]:
    """What runs on every VM itself (outside the container, before Ray pulls the image and starts
    it; ray-schema.json): the ssh user in the docker group, the spec's targets.ray.setup in order
    (each a YAML string of its own, as written), then the registry login, which reads the
    secrets' files on the VM (never a value here)."""
    settings = valid.spec.targets.ray
    commands = ["sudo usermod -aG docker $USER || true"] if docker else []
    commands += settings.setup
    if docker and settings.registry is not None:
        files = {key: valid.spec.secrets[getattr(settings.registry, key)].file for key in ("username", "password")}
        server = registry_server(valid.spec.environment.image)
        login = (f'docker login --username "$(cat {shlex.quote(files["username"])})" --password-stdin'
                 + (f" {shlex.quote(server)}" if server else "") + f" < {shlex.quote(files['password'])}")
        # sg: the docker group the first command added, which this ssh session (Ray reuses its
        # connection) does not hold yet; docker keeps the login in ~/.docker/config.json for Ray's pull
        commands.append(f"sg docker -c {shlex.quote(login)}")
    return commands


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
    per_node = valid.launcher == "per-node"
    if per_node and spec.framework != "lightning" and not base.own_spawner(command):
        # node rank, master address and port reach torchrun from the shim as PET_*
        command = base.torchrun_line(valid, command, python=shlex.join(python))
    shim = base.with_secrets(valid, f"{shlex.join([*python, *base.SHIM_FLAGS])} $HOME/trainspec/{base.SHIM_FILE}",
                             shlex.join(python), f"$HOME/trainspec/{base.SECRETS_FILE}")
    return base.under_shim(shim, command, valid)


def job_request(valid: ValidSpec):
    """What the driver runs: the job's shape, as the driver's own type (runtime/ray_request.py)."""
    from ...runtime.ray_request import Request

    launcher = valid.launcher
    port = base.master_port_written(valid)
    env = base.job_env(valid, refs_for(valid), launcher, port)
    env.update(base.secret_env(valid, NAME))  # where each secret is kept: the shim reads it on the node
    limit = valid.spec.timeout
    return Request(nodes=valid.nodes, procs_per_node=valid.procs_per_node, launcher=launcher,
                   gpus_per_node=valid.gpus_per_node, cpus_per_node=_bundle_cpus(valid),
                   placement="STRICT_SPREAD", workdir="code", env=env, command=_command(valid),
                   master_port=port,  # None: the driver finds a free port on rank 0's node
                   timeout=limit)  # the driver enforces it: nobody edits launch.sh for a time limit


def _bundle_cpus(valid: ValidSpec) -> int:
    """The CPUs of each node's bundle: resources.cpus_per_node, else one per process. The node
    declares the size's vCPUs (cluster.yaml), which validation holds cpus_per_node to."""
    cpus = valid.spec.resources.cpus_per_node
    return cpus if cpus is not None else valid.procs_per_node


def driver_argv(valid: ValidSpec) -> List[str]:
    """The driver's command line on the head (run by `ray exec` from the home directory)."""
    return [*shlex.split(valid.spec.targets.ray.python), f"trainspec/{DRIVER_FILE}", f"trainspec/{REQUEST_FILE}"]


# launch.sh's end, whatever ends the job: ray down, or (keep_cluster) how to delete the cluster
_TEARDOWN = (
    "teardown() {",
    "  code=$?",
    f'  echo "trainspec: the job ended (exit $code); tearing the cluster down: ray down -y {CLUSTER_FILE}" >&2',
    f"  ray down -y {CLUSTER_FILE} || echo \"trainspec: ray down failed: its VMs may still run (and cost); delete "
    f"them: ray down -y $PWD/{CLUSTER_FILE}\" >&2",
    '  exit "$code"',
    "}",
    "trap teardown EXIT",
)
_KEEP = (f"trap 'echo \"trainspec: the cluster is kept (targets.ray.keep_cluster: true); delete it: ray down -y "
         f"$PWD/{CLUSTER_FILE}\" >&2' EXIT",)
# a signal ends the script through its EXIT trap, with the shell's usual code (128 + the signal)
_SIGNALS = ("trap 'exit 130' INT", "trap 'exit 143' TERM", "trap 'exit 129' HUP")


def _launch_script(valid: ValidSpec) -> str:
    keep = valid.spec.targets.ray.keep_cluster
    lines = [
        "#!/usr/bin/env bash",
        *[f"# {line}" for line in emit.header_lines(valid.source.display, valid.source.digest, NAME)],
        "# Start the cluster, run the training on it (the driver enforces the spec's timeout), then "
        + ("keep the cluster (targets.ray.keep_cluster)." if keep else
           "tear the cluster down,\n# whatever ended the job: its end, a failure, the time limit or Ctrl-C."),
        "# Needs here: " + shlex.join(["pip", "install", f"ray[default]=={valid.spec.targets.ray.ray_version}",
                                       *AZURE_SDK]) + " and `az login`.",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        *(_KEEP if keep else _TEARDOWN),
        *_SIGNALS,
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
                import difflib

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
    port = base.master_port_written(valid)
    return "<free port on node 0>" if port is None else str(port)  # None: the driver picks it at the start


def plan_facts(valid: ValidSpec) -> base.PlanFacts:
    """The cluster's region, its VM sizes and head, the driver's time limit, which nodes are spot,
    the image and the GPUs, as cluster.yaml and the job request have them."""
    settings = valid.spec.targets.ray
    size = valid.sku.name if valid.sku else valid.spec.resources.sku
    workers = valid.nodes - 1 if settings.head == "worker" else valid.nodes
    head = ("head: training node 0 (targets.ray.head worker)" if settings.head == "worker" else
            f"head: a {_head_sku(valid).name} CPU VM, no training (targets.ray.head cpu)")
    where = (f"Azure region {settings.location} (resource group {settings.resource_group}), {valid.nodes} x {size}"
             f" ({workers} worker{'' if workers == 1 else 's'}), {head}")
    limit = job_request(valid).timeout
    spot = valid.spec.resources.spot and workers > 0
    if spot:
        priority = (f"spot: {workers} of {valid.nodes} training nodes (priority Spot, evicted VMs deleted); "
                    "the head is regular" if settings.head == "worker" else
                    "spot: every training node (priority Spot, evicted VMs deleted); the CPU head is regular")
    else:
        priority = "regular VMs (priority Regular)" + (
            base.plan_spot_ignored(NAME, "a one-node cluster is all head, never spot")
            if valid.spec.resources.spot else "")
    return base.PlanFacts(
        where=where,
        time_limit=(base.TimeLimit(limit, ("timeout",)).plan_text("the driver stops every process, exit 124")
                    if limit is not None else "none: runs until it ends (the spec's timeout sets one)"),
        priority=priority,
        image=plan_image(valid),
        gpus=base.plan_gpus(valid, hardware(valid)))


def plan_settings(valid: ValidSpec) -> Dict[str, str]:
    """What the job does to the VMs it starts: how long it may run, whether they outlive it, and
    where its data is (a volume's URL or path, the spec's own, a folder file_mounts uploads)."""
    lines = {}
    if valid.spec.resources.cpus_per_node is not None:
        lines["bundle per node"] = f"CPU {_bundle_cpus(valid)}" + (f", GPU {valid.gpus_per_node}"
                                                                   if valid.gpus_per_node else "")
    lines["cluster"] = (f"kept after the job (targets.ray.keep_cluster): `ray down -y {CLUSTER_FILE}` in the job's "
                        "folder deletes it" if valid.spec.targets.ray.keep_cluster else
                        f"torn down when the job ends, however it ends (launch.sh runs `ray down -y {CLUSTER_FILE}`)")
    lines.update(base.plan_data(valid, refs_for(valid)))
    settings = valid.spec.targets.ray
    if settings.setup:
        lines["setup"] = (f"{len(settings.setup)} command{'' if len(settings.setup) == 1 else 's'} on every VM, "
                          "before the container starts (targets.ray.setup: Ray's initialization_commands)")
    if settings.registry is not None and valid.spec.environment.image:
        lines["registry login"] = (f"docker login {registry_server(valid.spec.environment.image) or 'Docker Hub'} on "
                                   f"every VM before the pull: user {settings.registry.username}, password "
                                   f"{settings.registry.password} (their secrets' files on the VM)")
    lines["shim"] = base.plan_shim(valid.spec.targets.ray.python)
    return lines


def plan_image(valid: ValidSpec) -> str:
    """The image of the docker block, or the VMs' own image with Ray (and pip / the conda file)
    installed by setup_commands."""
    image = valid.spec.environment.image
    if image:
        return image
    return f"no container: the VM image {VM_IMAGE}, Ray and the spec's packages installed by setup_commands"


# run --local: a Ray job needs a Ray cluster, which this machine does not pretend to be
LOCAL_REFUSAL = ("run --local plays the jobs of the other targets (-t " + "|".join(sorted(set(targets()) - {NAME}))
                 + "); a Ray job runs on a Ray cluster: start it with `bash OUT/<name>/ray/launch.sh` (README, "
                 "Ray), or try the spec here with another -t")


def hardware(valid: ValidSpec) -> base.Hardware:
    """The cluster's VMs are created at the sku's size: the sku is the hardware."""
    return base.Hardware(True, f"the cluster's VMs: vm_size {valid.sku.name if valid.sku else '-'}")


def cost_basis(valid: ValidSpec) -> base.CostBasis:
    """The cluster started for the job, in its own location: the head never spot (cluster.yaml),
    the workers spot when the spec says spot; the time limit is the job request's (the driver
    enforces it); a cluster kept after the job bills until `ray down`."""
    settings = valid.spec.targets.ray
    size = valid.sku.name if valid.sku else valid.spec.resources.sku
    workers = valid.nodes - 1 if settings.head == "worker" else valid.nodes
    vms = []
    if size:
        vms.append((1, size, False, "head") if settings.head == "worker" else
                   (1, _head_sku(valid).name, False, "CPU head"))
        if workers:
            vms.append((workers, size, bool(valid.spec.resources.spot), "workers" if workers > 1 else "worker"))
    unbounded = ("the cluster is kept after the job (targets.ray.keep_cluster) and bills until ray down"
                 if settings.keep_cluster else "")
    return base.CostBasis(tuple(vms), valid.spec.timeout, unbounded=unbounded, location=settings.location,
                          location_field="targets.ray.location")
