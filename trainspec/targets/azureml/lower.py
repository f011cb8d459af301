"""Azure ML v2 command job: ``az ml job create --file job.yml``.

Lowering table (see ../shared/reference/azureml.md):

=============  ==========================================================================
launcher       Azure ML job
=============  ==========================================================================
per-process    distribution pytorch, process_count_per_instance = procs_per_node;
               Azure ML starts every process and sets MASTER_*/WORLD_SIZE/NODE_RANK/RANK
per-node       distribution pytorch, process_count_per_instance = 1; the command runs under
               torchrun (static rendezvous on $MASTER_ADDR), or Lightning spawns `devices`
mpi            distribution mpi, process_count_per_instance = procs_per_node; the shim maps
               OMPI_COMM_WORLD_* and AZ_BATCH_MASTER_NODE
tensorflow     distribution tensorflow, worker_count = nodes (TF_CONFIG per worker)
=============  ==========================================================================

Every process runs ``python <shim> -- <command>`` (``-- bash -c '<command>'`` when it needs a shell:
base.under_shim); the shim travels as the ``uri_file``
input ``trainspec_runtime`` written next to job.yml, so the user's code directory is never
touched.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Dict, List

from trainspec import __version__
from trainspec.core.diagnostics import Diagnostic, error, shown, warning
from trainspec.core.fields import is_remote
from trainspec.core.patterns import Lazy
from trainspec.schema import skus
from trainspec.schema.validate import ValidSpec
from trainspec.compiler import base, capabilities, emit
from trainspec.targets.azureml.settings import NAME, _bare_compute
from trainspec.compiler.capabilities import Feature, only, problem

JOB_FILE = "job.yml"
DOCKER_CONTEXT = "docker"  # image + pip: a Docker build context, FROM the image, pip into its Python
# a Docker image reference: [host[:port]/]name[/name...][:tag][@sha256:digest]
_IMAGE_REF = Lazy(r"^(?:[A-Za-z0-9.-]+(?::\d+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
                  r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$")
SCHEMA_URL = "https://azuremlschemas.azureedge.net/latest/commandJob.schema.json"
SHIM_INPUT = "trainspec_runtime"
# azure-ai-ml turns limits.timeout into a timedelta, sent as ISO 8601: at most 999999999 days, 23:59:59
MAX_TIMEOUT = 86400 * 10 ** 9 - 1
SECRETS_INPUT = "trainspec_secret_refs"  # the secrets helper (runtime/secret_refs.py), with secrets only
DEFAULT_MASTER_PORT = base.contract.AZUREML_MASTER_PORT  # what Azure ML's pytorch distribution exports
SUBMIT = "az ml job create --file {dir}/" + JOB_FILE



def refs(kind: str, name: str) -> str:
    return "${{%s.%s}}" % (kind, name)


def refs_for(valid: ValidSpec):
    """How ``{{ inputs.x }}`` / ``{{ outputs.x }}`` render: Azure ML's own ``${{inputs.x}}``."""
    return refs


# What Azure ML cannot run, by feature (capabilities.py: the catalogue, the matrix in docs/capabilities.md);
# its messages may name {compute}, the compute cluster's name
_WHERE_AZUREML_READS = ("name the data where Azure ML reads it: azureml:<asset>@<version>, "
                        "azureml://datastores/<datastore>/paths/<path>, an https://, abfss:// or wasbs:// URL, or a "
                        "path relative to the spec inside the repository (uploaded at submit)")
_NO_SIZE = only("without resources.sku", lambda valid: valid.sku is None)
CANNOT_RUN = {
    Feature.NO_ENVIRONMENT: problem("Azure ML needs an environment",
                                    "set environment.image (+ conda_file or pip) or environment.azureml: name@label"),
    Feature.NO_SKU: problem("serverless Azure ML jobs need a VM size (it becomes instance_type)",
                            "set resources.sku, or targets.azureml.compute to run on a cluster",
                            when=only("serverless: no targets.azureml.compute", lambda valid: _compute_name(valid) is None)),
    Feature.SPOT: problem("on the cluster '{compute}' spot capacity is the cluster's VM priority, not the job's",
                          "create the cluster with tier low_priority; job_tier: spot applies to serverless jobs",
                          fatal=False, when=only("on a cluster: targets.azureml.compute",
                                                 lambda valid: _compute_name(valid) is not None)),
    Feature.CPUS_PER_NODE: problem("Azure ML gives each node a whole VM of the cluster's size and takes no CPU "
                                   "request: without resources.sku nothing checks that it has "
                                   "{spec.resources.cpus_per_node} vCPUs",
                                   "set resources.sku to the cluster's VM size: validation holds cpus_per_node to it",
                                   fatal=False, when=_NO_SIZE),
    Feature.MEMORY_PER_NODE: problem("Azure ML gives each node a whole VM of the cluster's size and takes no memory "
                                     "request: without resources.sku nothing checks that it has "
                                     "{spec.resources.memory_per_node}",
                                     "set resources.sku to the cluster's VM size: validation holds memory_per_node "
                                     "to it", fatal=False, when=_NO_SIZE),
    # an absolute path names storage where the job runs, and an Azure ML job has none: azure-ai-ml
    # would take it as a file of the machine that submits (a CI runner: /proc/self/environ is its
    # environment) and upload it. Judged by the text, never by what is at the path here.
    Feature.INPUT_ABSOLUTE: problem("'{path}' is an absolute path, storage where the job runs on the other "
                                    "targets: an Azure ML job has none, and azure-ai-ml would upload the file of "
                                    "that name from the machine that submits the job", _WHERE_AZUREML_READS),
    # azure-ai-ml's command job schema takes rw_mount for outputs only: an input's mode is one of
    # ro_mount, download, direct (and an MLTable's eval_*); load_job refuses the job
    Feature.INPUT_RW_MOUNT: problem("a command job's input cannot be mounted read-write on Azure ML: azure-ai-ml "
                                    "takes mode ro_mount, download or direct for an input, rw_mount for an "
                                    "output only", "use mode: download (a writable copy on each node's disk), or "
                                    "write what the job makes to an output"),
}


def time_limit(valid: ValidSpec):
    """limits.timeout: targets.azureml.timeout, else the spec's timeout (None: none)."""
    return base.time_limit(valid, NAME, "timeout")


def cannot_express(valid: ValidSpec) -> List[Diagnostic]:
    """What Azure ML cannot run, or runs differently from what the spec says: its table (CANNOT_RUN),
    then what depends on the environment's contents, the launcher and the command."""
    spec = valid.spec
    out = capabilities.check(NAME, CANNOT_RUN, valid, compute=_compute_name(valid))
    out += base.time_limit_errors(NAME, time_limit(valid), MAX_TIMEOUT, "limits.timeout (a Python timedelta in "
                                  "azure-ai-ml, sent as ISO 8601)")
    env = spec.environment
    if env.image and env.pip:
        out += _docker_context_problems(valid)
    launcher = valid.launcher
    out += base.command_variable_errors(NAME, valid, launcher)
    out += _asset_shaped_local_inputs(valid)
    if launcher == "per-node" and spec.framework != "lightning":
        out += base.torchrun_errors(valid, refs, "per-node launch wraps the command in torchrun",
                                    "write `python train.py ...`, or use launcher: per-process")
        out += base.master_port_fixed(valid, DEFAULT_MASTER_PORT, "per-node torchrun on Azure ML reads the "
                                      "MASTER_PORT Azure ML sets", "remove master_port, or use launcher: per-process")
    if spec.distribution.backend == "mpi" and launcher != "mpi":
        out.append(warning(("distribution", "backend"), "torch's mpi backend needs an MPI launch",
                           "set distribution.launcher: mpi"))
    return out


def _asset_shaped_local_inputs(valid: ValidSpec) -> List[Diagnostic]:
    """A local input (a relative path) whose path holds ':' or '@': azure-ai-ml takes a path with
    either for a data asset (name:version, name@label) and looks it up instead of uploading the
    folder, so the job would fail at submit, or read something else than the repository's data."""
    out: List[Diagnostic] = []
    for name, item in valid.spec.inputs.items():
        path = item.path
        if path is None or is_remote(path) or path.startswith("/") or not (":" in path or "@" in path):
            continue
        out.append(error(("inputs", name, "path"), f"'{shown(path)}' holds ':' or '@': azure-ai-ml reads such a "
                         "path as a data asset (name:version, name@label), not as the repository's data to upload",
                         "rename the folder or file without ':' and '@'"))
    return out


def lower(valid: ValidSpec, out_dir: Path) -> base.Artifact:
    spec = valid.spec
    settings = spec.targets.azureml
    launcher = valid.launcher
    compute = _compute_name(valid)
    files: List[base.OutFile] = []

    job: Dict[str, Any] = {"$schema": SCHEMA_URL, "type": "command"}
    # each defaults to the spec's name; an explicit null leaves it to Azure ML (an imported job that had none)
    for key in ("display_name", "experiment_name"):
        value = getattr(settings, key) if settings is not None else None
        if value is not None or settings is None or key not in settings.__pydantic_fields_set__:
            job[key] = value if value is not None else spec.name
    if spec.description:
        job["description"] = valid.render(("description",), spec.description, refs)
    job["tags"] = {
        "trainspec_spec": valid.source.display,
        "trainspec_hash": valid.source.digest,
        "trainspec_version": __version__,
        # for people reading the job in the studio; nothing reads them at run time. Prefixed: a team's
        # own `framework` or `backend` tag is theirs
        "trainspec_framework": spec.framework,
        "trainspec_launcher": launcher,
        "trainspec_backend": valid.backend,
        **(settings.tags if settings else {}),
    }
    job["code"] = base.relative(valid.resolve(spec.code), out_dir)
    job["command"] = _command(valid, launcher)
    job["environment"] = _environment(valid, out_dir, files)
    if compute is not None:
        job["compute"] = f"azureml:{compute}"
    resources: Dict[str, Any] = {"instance_count": valid.nodes}
    if compute is None:
        resources["instance_type"] = valid.sku.name if valid.sku else spec.resources.sku
    if spec.resources.shm_size:
        resources["shm_size"] = spec.resources.shm_size
    if settings is not None and settings.docker_args is not None:
        resources["docker_args"] = settings.docker_args
    job["resources"] = resources
    job["distribution"] = _distribution(valid, launcher)
    job["environment_variables"] = _environment_variables(valid, launcher)
    job["inputs"] = _inputs(valid, out_dir)
    if spec.outputs:
        job["outputs"] = {name: _output(o) for name, o in spec.outputs.items()}
    if settings is not None and settings.identity is not None:
        job["identity"] = {k: v for k, v in (("type", settings.identity.type),
                                               ("client_id", settings.identity.client_id)) if v is not None}
    if settings is not None and settings.services:
        job["services"] = {name: _service(s) for name, s in settings.services.items()}
    limit = time_limit(valid)
    if limit is not None:
        job["limits"] = {"timeout": limit.seconds}
    queue = _queue_settings(valid, compute)
    if queue:
        job["queue_settings"] = queue

    header = emit.yaml_header(valid.source.display, valid.source.digest, NAME)
    files.insert(0, base.OutFile(JOB_FILE, emit.yaml_bytes(job, header)))
    files.append(base.shim_file(NAME))
    files.extend(base.secrets_files(valid))
    return base.Artifact(target=NAME, name=spec.name, files=tuple(files), submit=SUBMIT)


def _compute_name(valid: ValidSpec):
    settings = valid.spec.targets.azureml
    return None if settings is None else _bare_compute(settings.compute)


def _command(valid: ValidSpec, launcher: str) -> str:
    spec = valid.spec
    command = valid.render(("command",), spec.command, refs).strip()
    if launcher == "per-node" and spec.framework != "lightning" and not base.own_spawner(command):
        # $NODE_RANK, $MASTER_ADDR, $MASTER_PORT: set by Azure ML on each node, expanded by its shell
        command = base.torchrun_line(
            valid, command, rendezvous="--node_rank $NODE_RANK --master_addr $MASTER_ADDR --master_port $MASTER_PORT")
    python = shlex.join(_python_words(valid))
    shim = base.with_secrets(valid, f"{python} {' '.join(base.SHIM_FLAGS)} {refs('inputs', SHIM_INPUT)}", python,
                             refs("inputs", SECRETS_INPUT))
    return base.under_shim(shim, command, valid)


def _distribution(valid: ValidSpec, launcher: str) -> Dict[str, Any]:
    if launcher == "tensorflow":
        settings = valid.spec.targets.azureml
        servers = settings.parameter_server_count if settings else 0
        return {"type": "tensorflow", "worker_count": valid.nodes,
                **({"parameter_server_count": servers} if servers else {})}
    if launcher == "mpi":
        return {"type": "mpi", "process_count_per_instance": valid.procs_per_node}
    per_instance = 1 if launcher == "per-node" else valid.procs_per_node
    return {"type": "pytorch", "process_count_per_instance": per_instance}


def _environment_variables(valid: ValidSpec, launcher: str) -> Dict[str, str]:
    env = base.job_env(valid, refs, launcher, valid.spec.distribution.master_port)
    # the Key Vault secrets, read by the shim with the job's identity (docs/targets/azureml.md, "Secrets")
    identity = valid.spec.targets.azureml.identity if valid.spec.targets.azureml is not None else None
    env.update(base.secret_env(valid, NAME, identity=identity.type if identity else None,
                               client_id=identity.client_id if identity else None))
    return env


def _environment(valid: ValidSpec, out_dir: Path, files: List[base.OutFile]):
    e = valid.spec.environment
    if e.azureml:
        return e.azureml if e.azureml.startswith("azureml:") else f"azureml:{e.azureml}"
    if e.build:  # the user's own build context, uploaded by azure-ai-ml from where it is
        build = {"path": base.relative(valid.resolve(e.build.path), out_dir)}
        if e.build.dockerfile_path != "Dockerfile":
            build["dockerfile_path"] = e.build.dockerfile_path
        return {"build": build}
    if e.pip:
        # Azure ML builds image + conda file as a *new* conda environment inside the image, so the
        # image's own Python (and its torch) would not be the one the job runs. A build context
        # extends the image itself, as Azure ML documents for curated images.
        files.append(base.OutFile(f"{DOCKER_CONTEXT}/Dockerfile", _dockerfile(valid)))
        return {"build": {"path": f"./{DOCKER_CONTEXT}"}}
    environment: Dict[str, Any] = {"image": e.image}
    if e.conda_file:
        environment["conda_file"] = base.relative(valid.resolve(e.conda_file), out_dir)
    return environment


def environment_kind(valid: ValidSpec) -> str:
    """How the job's Python environment is made, in words for `plan`."""
    e = valid.spec.environment
    if e.azureml:
        return "the registered Azure ML environment"
    if e.build:
        return f"your Docker build context {e.build.path} (its {e.build.dockerfile_path})"
    if e.pip:
        return f"Docker build context {DOCKER_CONTEXT}/: FROM the image, pip install into the image's own Python"
    if e.conda_file:
        return "a new conda environment from the conda file, built inside the image"
    return "the image as it is"


def plan_image(valid: ValidSpec) -> str:
    """What the job runs in: the image, the registered environment, or the image Azure ML builds."""
    e = valid.spec.environment
    if e.azureml:
        return f"the registered environment {e.azureml if e.azureml.startswith('azureml:') else 'azureml:' + e.azureml}"
    if e.build:
        return f"the image Azure ML builds from {e.build.path} ({e.build.dockerfile_path})"
    if e.pip:
        return f"the image Azure ML builds FROM {e.image}, with the spec's pip packages"
    return e.image or "Azure ML's default"


def _python_words(valid: ValidSpec) -> List[str]:
    settings = valid.spec.targets.azureml
    return shlex.split(settings.python if settings else "python")


def _dockerfile(valid: ValidSpec) -> bytes:
    """FROM the image, then pip into the interpreter the job runs (targets.azureml.python). The
    packages are shell words in a RUN line: shlex-quoted; validation refused line breaks."""
    e = valid.spec.environment
    header = emit.yaml_header(valid.source.display, valid.source.digest, NAME)
    run = shlex.join([*_python_words(valid), "-m", "pip", "install", "--no-cache-dir", *e.pip])
    return (header + f"FROM {e.image}\nRUN {run}\n").encode("utf-8")


def _docker_context_problems(valid: ValidSpec) -> List[Diagnostic]:
    e = valid.spec.environment
    out: List[Diagnostic] = []
    if not _IMAGE_REF.fullmatch(e.image):
        out.append(error(("environment", "image"), f"'{e.image}' is not a Docker image reference",
                         "e.g. mcr.microsoft.com/azureml/curated/acpt-pytorch-2.2-cuda12.1:latest"))
    if "python" in e.__pydantic_fields_set__:
        out.append(warning(("environment", "python"),
                           "does not apply with image + pip: the packages go into the image's own Python",
                           "remove environment.python, or pick an image with the Python you want"))
    return out


def _inputs(valid: ValidSpec, out_dir: Path) -> Dict[str, Any]:
    inputs: Dict[str, Any] = {}
    for name, item in valid.spec.inputs.items():
        if item.path is None:  # a literal: ${{inputs.x}} stays in the command, --set inputs.x=... at submit
            inputs[name] = item.value
            continue
        path = item.path
        if not is_remote(path):  # a folder or file of the repository (validation), which azure-ai-ml uploads
            path = base.relative(valid.resolve(path), out_dir)
        inputs[name] = {"type": item.type, "path": path, "mode": item.mode}
    inputs[SHIM_INPUT] = {"type": "uri_file", "path": f"./{base.SHIM_FILE}", "mode": "download"}
    for helper in base.secrets_files(valid):
        inputs[SECRETS_INPUT] = {"type": "uri_file", "path": f"./{helper.path}", "mode": "download"}
    return inputs


def _output(item) -> Dict[str, Any]:
    out: Dict[str, Any] = {"type": item.type}
    if item.path:
        out["path"] = item.path
    out["mode"] = item.mode
    if item.name is not None:
        out["name"] = item.name
    if item.version is not None:
        out["version"] = item.version
    return out


def _service(item) -> Dict[str, Any]:
    out: Dict[str, Any] = {"type": item.type}
    for key in ("nodes", "port", "log_dir", "ssh_public_keys"):
        if getattr(item, key) is not None:
            out[key] = getattr(item, key)
    if item.properties:
        out["properties"] = dict(item.properties)
    return out


def _queue_settings(valid: ValidSpec, compute) -> Dict[str, str]:
    settings = valid.spec.targets.azureml
    queue: Dict[str, str] = {}
    tier = settings.job_tier if settings else None
    if tier is None and valid.spec.resources.spot and compute is None:
        tier = "spot"
    if tier is not None:
        queue["job_tier"] = tier
    if settings is not None and settings.priority is not None:
        queue["priority"] = settings.priority
    return queue


# --- what plan and run --local need --------------------------------------------------------

def plan_facts(valid: ValidSpec) -> base.PlanFacts:
    """Where the job runs (a compute cluster or serverless, and its experiment), limits.timeout,
    its queue_settings, the image and the GPUs: what job.yml says."""
    settings = valid.spec.targets.azureml
    compute = _compute_name(valid)
    where = (f"compute cluster {compute}" if compute is not None else
             f"serverless compute, instance_type {valid.sku.name if valid.sku else valid.spec.resources.sku}")
    experiment = settings.experiment_name if settings is not None else None
    if experiment is None and (settings is None or "experiment_name" not in settings.__pydantic_fields_set__):
        experiment = valid.spec.name  # lower()'s default; an explicit null leaves it to Azure ML
    where += f", experiment {experiment}" if experiment is not None else ", the workspace's default experiment"
    limit = time_limit(valid)
    return base.PlanFacts(
        where=where,
        time_limit=(limit.plan_text(f"limits.timeout: {limit.seconds}") if limit is not None
                    else base.plan_no_time_limit("targets.azureml.timeout")),
        priority=_plan_priority(valid, compute),
        image=plan_image(valid),
        gpus=base.plan_gpus(valid, hardware(valid)))


def _plan_priority(valid: ValidSpec, compute) -> str:
    """queue_settings as job.yml has them: job_tier (spot when resources.spot is honoured) and priority."""
    queue = _queue_settings(valid, compute)
    tier = queue.get("job_tier")
    said = []
    if tier == "spot":
        said.append("spot: job_tier spot" + ("" if valid.spec.targets.azureml is not None
                                             and valid.spec.targets.azureml.job_tier else " (from resources.spot)"))
    elif tier is not None:
        said.append(f"job_tier {tier}")
    if "priority" in queue:
        said.append(f"priority {queue['priority']}")
    text = ", ".join(said) if said else "Azure ML's default (no queue_settings)"
    if valid.spec.resources.spot and tier != "spot":
        text += base.plan_spot_ignored(NAME, f"the cluster {compute}'s VM priority decides" if compute is not None
                                       else f"job_tier {tier} is set")
    return text


def plan_settings(valid: ValidSpec) -> Dict[str, str]:
    """What a reviewer should see of targets.azureml beyond the world and the facts: the
    environment build, what starts the shim, identity, services, parameter servers."""
    settings = valid.spec.targets.azureml
    shown: Dict[str, str] = {"environment": environment_kind(valid),
                             "shim": base.plan_shim(shlex.join(_python_words(valid)))}
    if settings is None:
        return shown
    if settings.identity is not None:
        shown["identity"] = settings.identity.type + (f" ({settings.identity.client_id})"
                                                      if settings.identity.client_id else "")
    if settings.services:
        shown["services"] = ", ".join(f"{name} ({s.type}{', all nodes' if s.nodes else ''})"
                                      for name, s in settings.services.items())
    if settings.docker_args is not None:
        shown["docker args"] = settings.docker_args
    if settings.parameter_server_count:
        shown["parameter servers"] = str(settings.parameter_server_count)
    return shown


def local_settings(settings: Dict[str, Any], workdir: Path) -> Dict[str, Any]:
    settings.setdefault("compute", "local-sim")  # a serverless job would otherwise want a SKU
    return settings


def hardware(valid: ValidSpec) -> base.Hardware:
    """Serverless: the sku is the instance_type. On a cluster, the cluster's VMs: the sku only when
    the team catalog says which size the cluster has (validation then checks they agree)."""
    compute = _compute_name(valid)
    if compute is None:
        return base.Hardware(True, f"instance_type {valid.sku.name if valid.sku else '-'}")
    placed = valid.placement(NAME)
    if placed is not None:
        return base.Hardware(True, f"compute {compute}: {placed.size}, in {skus.TEAM_FILE}")
    return base.Hardware(False, f"the compute cluster {compute} decides the hardware",
                         f"map {compute} to its VM size under computes: in {skus.TEAM_FILE}")


def cost_basis(valid: ValidSpec) -> base.CostBasis:
    """The job's nodes for its time limit, billed per job; at the spot rate on the spot tier."""
    spot = _queue_settings(valid, _compute_name(valid)).get("job_tier") == "spot"
    return base.nodes_cost(valid, time_limit(valid), spot)
