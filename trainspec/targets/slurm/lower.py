"""Slurm batch job: ``sbatch job.sbatch`` (../shared/reference/slurm.md).

==============  ===========================================================================
launcher        Slurm job
==============  ===========================================================================
per-process     ``#SBATCH --ntasks-per-node=procs_per_node``: srun starts every rank; the
                shim reads SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID/SLURM_NODEID
per-node        ``--ntasks-per-node=1``: one task per node runs torchrun (the shim hands it
                the world as PET_*), or Lightning, which spawns its ``devices``
==============  ===========================================================================

The script: ``#SBATCH`` lines for the job's shape (nodes, tasks per node, GPUs, CPUs, time,
logs, partition, account, qos, constraint, exclusive nodes), then bash: the job's variables
exported, the user's ``setup`` line, then one ``srun`` step running the spec's command under
the shim (``--kill-on-bad-exit``: the first failing task ends the step) in a writable copy of the
code of the job's own (``work_dir``, ``.trainspec/runs/<job id>/`` where sbatch ran: never the
repository), copied from the code submit staged beside the script (``code/``) or, run by hand,
the spec's code folder as the job finds it (docs/targets/slurm.md); a
command that needs a shell runs as ``bash -c`` under the shim (base.under_shim), so the batch
script's own shell never expands it.
With an image, srun runs every task in it (pyxis/enroot, ``container_image``): ``environment.image``
in enroot's form (pyxis_image), or ``targets.slurm.container_image`` as written; ``container:
false`` (a cluster without pyxis) runs the nodes' own software. The image is a variable of its own line
(``image=...``, srun's ``--container-image="$image"``): a new image (a base bumped) changes that
line alone, the same in every job (review/diff.said_once). In a container the job and code
folders and every input (read-only) and output location are mounted at their own paths. Data is
where ``targets.slurm.volumes`` (or the spec's absolute path) says; every output's folder is made
before srun, and an output with no location is an error, never the job folder. Every string of ours or
the spec's reaches the script through shlex; ``setup`` and the command after its interpreter
are shell the user wrote, kept verbatim. sbatch runs a copy of the script, so it asks Slurm
where the original lies (the shim is beside it) and falls back to the submit directory.
"""

from __future__ import annotations

import functools
import shlex
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from trainspec.core.diagnostics import Diagnostic, error, shown, warning
from trainspec.core.fields import mebibytes
from trainspec.schema import skus
from trainspec.schema.validate import ValidSpec
from trainspec.compiler import base, capabilities, emit
from trainspec.targets.slurm.settings import NAME
from trainspec.compiler.capabilities import Feature, only, problem, unsupported

JOB_FILE = "job.sbatch"
STAGES_CODE = "code"  # beside job.sbatch: the copy of the code submit stages with the job (commands/jobs.py)
SUBMIT = "sbatch {dir}/" + JOB_FILE
OUTPUT, ERROR = "%x-%j.out", "%x-%j.err"  # the job's output and error files (under targets.slurm.logs)
# sbatch parses --time into seconds in a C int (src/common/parse_time.c, time_str2secs) and
# rounds up to a minute with +59: the longest limit it reads back is 35791393 minutes
MAX_TIME = 35791393 * 60

def _settings(valid: ValidSpec):
    return valid.spec.targets.slurm or settings_defaults()


@functools.lru_cache(maxsize=None)
def settings_defaults():
    """targets.slurm is optional: a spec that lists no Slurm settings gets these."""
    from trainspec.schema import structure

    return structure.parse({"version": 1, "name": "x", "code": ".", "command": "x",
                            "targets": {NAME: {}}}).targets.slurm


def refs_for(valid: ValidSpec):
    """``{{ inputs.x }}`` / ``{{ outputs.x }}``: the path of its volume (targets.slurm.volumes), else
    its own path on the nodes, quoted for bash. An output with neither is an error (cannot_express):
    its default would be the compiled job folder, the one the repository commits."""
    return base.node_path_refs(valid, _no_location, _settings(valid).volumes)


def _no_location(name: str) -> str:
    """What an output without a location renders as (checks render the command before errors stop
    the compile; no job is ever written with it)."""
    return shlex.quote(f"<outputs.{name}: no location, see targets.slurm.volumes>")


# What Slurm cannot run, by feature (capabilities.py: the catalogue, the matrix in docs/capabilities.md)
_NODES_SOFTWARE = "set targets.slurm.setup (module load, an activation), or run an image (environment.image)"
_VOLUME = "say where it is on the cluster's shared storage: targets.slurm.volumes.{name}: {{path: /shared/...}}"
# pyxis splits --container-mounts at , and each mount at :
_MOUNT_BREAKERS = (",", ":")
CANNOT_RUN = {
    Feature.ENV_DATA_REF: unsupported(),  # ${{outputs.x}} in a variable is Azure ML's alone
    Feature.TENSORFLOW: unsupported(),
    Feature.LAUNCHER_MPI: unsupported("launcher mpi: srun starts every rank itself",
                                      "use launcher: per-process (srun) or per-node (torchrun)"),
    Feature.SPOT: unsupported("spot capacity: the partition decides",
                              "remove resources.spot, or pick the partition with targets.slurm.partition", fatal=False),
    Feature.ENV_AZUREML: unsupported(hint="set targets.slurm.setup / python, or container_image"),
    Feature.ENV_BUILD: unsupported("a Docker build context",
                                   "build and push the image, then set targets.slurm.container_image", fatal=False),
    Feature.ENV_IMAGE: unsupported("environment.image with targets.slurm.container: false: tasks run on the "
                                   "nodes' own software", "on a cluster with pyxis/enroot, remove container: false "
                                   "and every task runs in the image", fatal=False,
                                   when=only("with targets.slurm.container: false",
                                             lambda valid: not _settings(valid).container)),
    Feature.ENV_CONDA_FILE: unsupported("environment.conda_file: tasks run on the nodes' own software (or the "
                                        "container's), and nothing would create the environment",
                                        "list the packages under environment.pip (installed on every node before "
                                        "the command), or " + _NODES_SOFTWARE),
    Feature.SHM_SIZE: unsupported("a shared-memory size: tasks see the node's", None, fatal=False),
    Feature.INPUT_EVAL_MODE: unsupported(fatal=False),
    Feature.OUTPUT_ASSET_NAME: unsupported(fatal=False),
    Feature.INPUT_URL: unsupported(hint=_VOLUME),
    Feature.INPUT_DATA_ASSET: unsupported(hint=_VOLUME),
    Feature.INPUT_RELATIVE: problem("on Slurm an input is a path on the nodes: '{path}' is relative", _VOLUME),
    Feature.OUTPUT_NOT_ABSOLUTE: unsupported(hint=_VOLUME),
}


# job.sbatch's own shell variables (_script): the job folder, the code folder, the folder the command
# starts in, the image srun runs
SCRIPT_VARIABLES = ("job_dir", "code_dir", "work_dir", "image")


def cannot_express(valid: ValidSpec) -> List[Diagnostic]:
    """What Slurm cannot run: its table (CANNOT_RUN), an override image built for the other GPU
    vendor, data with no place here, then what depends on the command."""
    volumes = _settings(valid).volumes
    out = capabilities.check(NAME, CANNOT_RUN, valid, volumes=volumes)
    out += base.lost_output_errors(
        NAME, valid, volumes, "what the job writes would land in the compiled job folder (build/<name>/slurm/), the "
        "folder the repository commits", "say where it goes on the shared storage: targets.slurm.volumes.{name}: "
        "{{path: /shared/checkpoints/...}} (Azure ML keeps the job's own output)")
    out += base.time_limit_errors(NAME, time_limit(valid), MAX_TIME, "--time (seconds in a C int)")
    override = _settings(valid).container_image
    mismatch = override and skus.vendor_mismatch(override, valid.sku)  # what runs here instead of environment.image
    if mismatch:
        out.append(warning(("targets", NAME, "container_image"), *mismatch))
    for key in valid.spec.env:  # exported before them, a variable of the same name would be overwritten or win
        if key in SCRIPT_VARIABLES and (key != "image" or container_image(valid)):
            out.append(error(("env", key), f"{key} is a variable of job.sbatch's own (where the job, its code or "
                             "its image is): the script would overwrite it, or it would replace the script's",
                             "give the variable another name", on_key=True))
    if container_image(valid):
        out += _mount_errors(valid)
        for key, reference in valid.spec.secrets.items():
            if reference.file is not None and any(c in reference.file for c in _MOUNT_BREAKERS):
                out.append(error(("secrets", key, "file"), "a secret's file is mounted into the container "
                                 "(--container-mounts), whose list cannot hold a path with ',' or ':'",
                                 "move the file to a path without them"))
    launcher = valid.launcher
    cpus, tasks = valid.spec.resources.cpus_per_node, tasks_per_node(valid)
    if cpus is not None and cpus % tasks:
        below = cpus - cpus % tasks
        near = " or ".join(str(n) for n in (below, below + tasks)
                           if n >= tasks and (valid.sku is None or not valid.sku.vcpus or n <= valid.sku.vcpus))
        out.append(error(("resources", "cpus_per_node"), f"{cpus} CPUs per node do not divide among the {tasks} tasks "
                         f"per node srun starts (--cpus-per-task is per task)",
                         f"ask for a multiple of {tasks}" + (f", e.g. {near}" if near else "")
                         + ", or use launcher: per-node (one task per node)"))
    out += base.command_variable_errors(NAME, valid, launcher)
    if launcher == "per-node" and valid.spec.framework != "lightning":
        out += base.torchrun_errors(valid, refs_for(valid), "per node, Slurm runs the command under torchrun",
                                    "write `python train.py ...`; put preparation in targets.slurm.setup")
    return out


def _data_locations(valid: ValidSpec, volumes: Mapping[str, Any]) -> Dict[str, List[Tuple[str, str]]]:
    """Where the job's data is on Slurm's nodes, by kind: ``{"inputs": [(name, location)],
    "outputs": [...]}``, each the ``path`` of its volume (``volumes``), else its own path; literal
    inputs and outputs without either are left out."""
    out: Dict[str, List[Tuple[str, str]]] = {"inputs": [], "outputs": []}
    for kind, items in (("inputs", valid.spec.inputs), ("outputs", valid.spec.outputs)):
        for name, item in items.items():
            location = volumes[name].path if name in volumes else item.path
            if location is not None:
                out[kind].append((name, location))
    return out


def _mount_errors(valid: ValidSpec) -> List[Diagnostic]:
    """A location pyxis cannot mount into the container: --container-mounts is SRC:DST[:FLAGS],...
    (an error at the field that gave it)."""
    volumes = _settings(valid).volumes
    out = []
    for kind, places in _data_locations(valid, volumes).items():
        for name, location in places:
            if location.startswith("/") and any(c in location for c in _MOUNT_BREAKERS):
                where = ("targets", NAME, "volumes", name, "path") if name in volumes else (kind, name, "path")
                out.append(error(where, f"'{shown(location)}' holds , or :, which pyxis's --container-mounts "
                                 "cannot carry (it splits mounts at , and each at :)",
                                 "use a path without , and : (a link to it, for example)"))
    return out


def container_mounts(valid: ValidSpec) -> List[str]:
    """pyxis mounts beyond the job and code folders: every input's location read-only (writable
    with mode: rw_mount), every output's read-write, each at the same path in the container
    (``SRC:DST[:ro]``)."""
    mounts = []
    for kind, places in _data_locations(valid, _settings(valid).volumes).items():
        items = valid.spec.inputs if kind == "inputs" else valid.spec.outputs
        for name, location in places:
            if location.startswith("/"):
                mounts.append(f"{location}:{location}" + (":ro" if base.read_only(kind, items[name]) else ""))
    return list(dict.fromkeys(mounts))


def output_locations(valid: ValidSpec) -> List[str]:
    """Every output's folder on the shared storage, made before srun (a container mounts only
    what exists, and the command finds its folder there on every target)."""
    return [location for _, location in _data_locations(valid, _settings(valid).volumes)["outputs"]]


# Docker Hub under its own names: enroot's default registry (registry-1.docker.io) when none is given
_DOCKER_HUB = ("docker.io", "index.docker.io", "registry-1.docker.io")


def pyxis_image(image: str) -> str:
    """A Docker image reference as pyxis' ``--container-image`` reads it: enroot's
    ``[USER@][REGISTRY#]IMAGE[:TAG]`` (enroot src/docker.sh), where ``#`` ends the registry. Without
    it enroot would look ``nvcr.io/nvidia/pytorch`` up on Docker Hub: nvcr.io/nvidia/pytorch:24.08-py3
    -> nvcr.io#nvidia/pytorch:24.08-py3. The registry is the first part when it holds a . or a : or
    is localhost (Docker's own rule); Docker Hub's names drop it (enroot's default). A digest
    (``@sha256:...``) becomes the tag, which it replaces: enroot fetches ``/v2/IMAGE/manifests/TAG``,
    and a digest there pins the image as Docker's ``@`` does. Already enroot's form (a ``#``), or a
    squashfs file (a path): as it is."""
    if "#" in image or image.startswith(("/", ".")):
        return image
    name, _, digest = image.partition("@")
    first, slash, rest = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        name = rest if first in _DOCKER_HUB else f"{first}#{rest}"
    if digest:
        last = max(name.rfind("/"), name.rfind("#"))
        if ":" in name[last + 1:]:
            name = name[:name.rindex(":")]
        name = f"{name}:{digest}"
    return name


def container_image(valid: ValidSpec) -> Optional[str]:
    """What srun runs every task in: targets.slurm.container_image as written (an override), else
    environment.image in enroot's form; None without an image, or with container: false."""
    settings = _settings(valid)
    if settings.container_image:
        return settings.container_image
    image = valid.spec.environment.image
    return pyxis_image(image) if image and settings.container else None


def lower(valid: ValidSpec, out_dir: Path) -> base.Artifact:
    script = _script(valid, base.relative(valid.resolve(valid.spec.code), out_dir))
    files = (base.OutFile(JOB_FILE, script.encode("utf-8"), executable=True), base.shim_file(NAME),
             *base.secrets_files(valid))
    return base.Artifact(target=NAME, name=valid.name, files=files, submit=SUBMIT)


def tasks_per_node(valid: ValidSpec) -> int:
    return 1 if valid.launcher == "per-node" else valid.procs_per_node


def cpus_per_task(valid: ValidSpec) -> Optional[int]:
    """Each task's CPUs: resources.cpus_per_node (else the size's vCPUs) among the node's tasks
    (divisible: cannot_express says so); None when neither is known (Slurm's default)."""
    cpus = valid.spec.resources.cpus_per_node
    if cpus is None and valid.sku is not None and valid.sku.vcpus:
        cpus = valid.sku.vcpus
    return None if cpus is None else max(1, cpus // tasks_per_node(valid))


def sbatch_options(valid: ValidSpec) -> List[str]:
    """The #SBATCH options, one per line: the job's shape, then the cluster's settings."""
    settings = _settings(valid)
    tasks = tasks_per_node(valid)
    options = [f"--job-name={valid.name}", f"--nodes={valid.nodes}", f"--ntasks-per-node={tasks}"]
    if valid.gpus_per_node:  # with a GPU type, only nodes of that GPU (the same as --gres=gpu:<type>:<n>)
        kind = f"{settings.gpu_type}:" if settings.gpu_type else ""
        options.append(f"--gpus-per-node={kind}{valid.gpus_per_node}")
    cpus = cpus_per_task(valid)
    if cpus is not None:
        options.append(f"--cpus-per-task={cpus}")
    if valid.spec.resources.memory_per_node is not None:
        options.append(f"--mem={slurm_memory(valid.spec.resources.memory_per_node)}")
    limit = time_limit(valid)
    if limit is not None:
        options.append(f"--time={_slurm_time(limit.seconds)}")
    for field in ("partition", "account", "qos", "constraint"):
        if getattr(settings, field):
            options.append(f"--{field}={getattr(settings, field)}")
    if settings.exclusive:
        options.append("--exclusive")
    options.append("--requeue" if settings.requeue else "--no-requeue")
    logs = (settings.logs.rstrip("/") + "/") if settings.logs else ""
    options += [f"--output={logs}{OUTPUT}", f"--error={logs}{ERROR}"]
    return options


def slurm_memory(quantity: str) -> str:
    """memory_per_node in the units of sbatch's --mem (M, G, T: MiB, GiB, TiB; Slurm counts in
    MiB): the largest unit that says it exactly, a decimal quantity rounded up to a whole MiB."""
    mib = mebibytes(quantity)
    for unit, size in (("T", 1 << 20), ("G", 1 << 10)):
        if mib % size == 0:
            return f"{mib // size}{unit}"
    return f"{mib}M"


def time_limit(valid: ValidSpec):
    """--time: targets.slurm.time, else the spec's timeout (None: the partition's default)."""
    return base.time_limit(valid, NAME, "time")


def _slurm_time(seconds: int) -> str:
    """Slurm's days-hours:minutes:seconds, rounded up to a whole minute as Slurm does."""
    minutes = -(-seconds // 60)
    return f"{minutes // 1440}-{minutes // 60 % 24:02d}:{minutes % 60:02d}:00"


def _script(valid: ValidSpec, code: str) -> str:
    spec = valid.spec
    settings = _settings(valid)
    python = shlex.split(settings.python)
    command = valid.render(("command",), spec.command, refs_for(valid)).strip()
    launcher = valid.launcher
    if launcher == "per-node" and spec.framework != "lightning" and not base.own_spawner(command):
        command = base.torchrun_line(valid, command, python=shlex.join(python))
    shim = f'{shlex.join([*python, *base.SHIM_FLAGS])} "$job_dir"/{base.SHIM_FILE}'
    shim = base.with_secrets(valid, shim, shlex.join(python), f'"$job_dir"/{base.SECRETS_FILE}')
    # --label: every line a task writes starts with its task id, so `trainspec logs` tells rank 0's
    # lines (and each node's) apart in the one output file
    srun = ["srun", "--kill-on-bad-exit=1", f"--ntasks-per-node={tasks_per_node(valid)}", "--label"]
    if cpus_per_task(valid) is not None:
        # since Slurm 22.05 srun does not take --cpus-per-task from the batch allocation: said again,
        # or every task is bound to one CPU
        srun.insert(3, f"--cpus-per-task={cpus_per_task(valid)}")
    image = container_image(valid)
    if image:
        # every input (read-only) and output location, and each secret's file (read-only: the helper
        # reads it inside the container), at its own path
        extra = "".join("," + mount for mount in [*container_mounts(valid),
                                                  *(f"{path}:{path}:ro" for path in _secret_files(valid))])
        srun += ['--container-image="$image"',
                 '--container-mounts="$job_dir:$job_dir,$work_dir:$work_dir"' + (shlex.quote(extra) if extra else ""),
                 '--container-workdir="$work_dir"']
    env = base.job_env(valid, refs_for(valid), launcher, spec.distribution.master_port)
    env.update(base.secret_env(valid, NAME))  # where each secret is kept: the shim reads it on the node
    env.update(base.pip_env(valid))  # the shim installs them once per node, before the command
    lines = ["#!/bin/bash",
             *[f"# {line}" for line in emit.header_lines(valid.source.display, valid.source.digest, NAME)],
             *[f"#SBATCH {option}" for option in sbatch_options(valid)],
             "set -euo pipefail",
             "# sbatch runs a copy of this script: Slurm says where the original (and the shim beside it) lies",
             "job_dir=$(scontrol show job \"$SLURM_JOB_ID\" 2>/dev/null | sed -n 's|^ *Command=\\(.*\\)/[^/]*$|\\1|p' "
             "|| true)",
             'export job_dir=${job_dir:-$SLURM_SUBMIT_DIR}  # exported: a command run through bash reads it',
             "# submit copies the code beside this script (code/, at submit: an edit or a checkout after it changes",
             "# nothing for this job); run by hand (sbatch build/...), the code folder as it is when the job starts",
             f'if [ -d "$job_dir"/{STAGES_CODE} ]; then code_dir="$job_dir"/{STAGES_CODE}; '
             f'else code_dir=$(cd "$job_dir"/{shlex.quote(code)} && pwd); fi',
             "# the command starts in a writable copy of the code of its own, on the shared storage where sbatch ran",
             "# (.trainspec/runs/<job id>/, which git ignores): what it writes there never lands in the code folder",
             'export work_dir="$SLURM_SUBMIT_DIR"/.trainspec/runs/"$SLURM_JOB_ID"',
             "# (links copied as links; .git and trainspec's own .trainspec, when the code folder holds them, left out)",
             'mkdir -p "$work_dir" && (shopt -s dotglob nullglob; for entry in "$code_dir"/*; do case ${entry##*/} in '
             '.git|.trainspec) ;; *) cp -RP "$entry" "$work_dir"/;; esac; done) && chmod -R u+w "$work_dir"',
             "[ -e \"$SLURM_SUBMIT_DIR\"/.trainspec/.gitignore ] || echo '*' > \"$SLURM_SUBMIT_DIR\"/.trainspec/.gitignore",
             *[f"export {key}={shlex.quote(value)}" for key, value in env.items()]]
    if image and base.infiniband(valid):
        # enroot's 99-mellanox hook mounts the InfiniBand devices (/dev/infiniband) and the host's
        # verbs drivers into the container only when this is set (pyxis passes the job's variables)
        lines.append("export MELLANOX_VISIBLE_DEVICES=all  # InfiniBand in the container (enroot's mellanox hook)")
    if output_locations(valid):
        lines.append(shlex.join(["mkdir", "-p", "--", *output_locations(valid)]))
    if settings.setup:
        lines.append(settings.setup)
    if image:  # a line of its own, after setup: a new image changes this line alone, the same in every job
        lines.append(f"image={shlex.quote(image)}  # every task runs in it (srun --container-image, pyxis)")
    lines += ['cd "$work_dir"', base.under_shim(f"{' '.join(srun)} {shim}", command, valid)]
    return "\n".join(lines) + "\n"


def _secret_files(valid: ValidSpec) -> List[str]:
    """The files the job's secrets are read from (validated: absolute paths)."""
    return [reference.file for reference in valid.spec.secrets.values()]


# --- what plan and run --local need --------------------------------------------------------

# the #SBATCH options plan says as facts (where, time limit, priority), not again in its sbatch line
_FACT_OPTIONS = ("--time=", "--partition=", "--account=", "--qos=")


def plan_facts(valid: ValidSpec) -> base.PlanFacts:
    """The partition (and account), --time, --qos, the image and the GPUs, as job.sbatch has them."""
    settings = _settings(valid)
    where = f"partition {settings.partition}" if settings.partition else "the cluster's default partition"
    where += f", account {settings.account}" if settings.account else ", the user's default account"
    limit = time_limit(valid)
    priority = f"qos {settings.qos}" if settings.qos else "the account's default qos"
    if valid.spec.resources.spot:
        priority += base.plan_spot_ignored(NAME, "the partition decides")
    return base.PlanFacts(
        where=where,
        time_limit=(limit.plan_text(f"--time={_slurm_time(limit.seconds)}") if limit is not None else
                    "none from the spec: the partition's default limit (the spec's timeout, or "
                    "targets.slurm.time, sets one)"),
        priority=priority,
        image=plan_image(valid),
        gpus=base.plan_gpus(valid, hardware(valid)))


def plan_settings(valid: ValidSpec) -> Dict[str, str]:
    """The other #SBATCH lines a cluster admin reviews, where the data is, and what starts the shim."""
    return {"sbatch": " ".join(o for o in sbatch_options(valid) if not o.startswith(_FACT_OPTIONS)),
            **base.plan_data(valid, refs_for(valid)),
            "shim": base.plan_shim(_settings(valid).python)}


def plan_image(valid: ValidSpec) -> str:
    """What every task runs in: the container image srun is given, or the nodes' own software."""
    settings = _settings(valid)
    if settings.container_image:
        return f"{settings.container_image} (targets.slurm.container_image, pyxis)"
    image = container_image(valid)
    if image:
        return f"{image} (environment.image, as pyxis reads it)"
    why = " (targets.slurm.container: false)" if valid.spec.environment.image else ""
    return "no container: the nodes' own software" + why


def local_settings(settings: Dict[str, Any], workdir: Path) -> Dict[str, Any]:
    """The nodes' python is this one; no setup line, no container, logs where the run prints them."""
    settings["python"] = shlex.quote(sys.executable)
    for field in ("setup", "container_image", "logs"):
        settings.pop(field, None)
    settings["container"] = False
    return settings


def hardware(valid: ValidSpec) -> base.Hardware:
    """The sku is what the job gets when a partition the team catalog maps, a GPU type or a
    constraint selects it; otherwise the partition (or the cluster's default) decides."""
    settings = _settings(valid)
    placed = valid.placement(NAME)
    chosen = [f"partition {placed.value}: {placed.size}, in {skus.TEAM_FILE}"] if placed else []
    if settings.gpu_type and valid.gpus_per_node:
        chosen.append(f"--gpus-per-node={settings.gpu_type}:{valid.gpus_per_node}")
    if settings.constraint:
        chosen.append(f"--constraint={settings.constraint} (the cluster's node features: not checked)")
    if chosen:
        return base.Hardware(True, "; ".join(chosen))
    by = f"the partition {settings.partition}" if settings.partition else "the cluster's default partition"
    return base.Hardware(False, f"{by} decides the hardware",
                         f"set targets.slurm.gpu_type or constraint, or map the partition to its VM size under "
                         f"partitions: in {skus.TEAM_FILE}")


def cost_basis(valid: ValidSpec) -> base.CostBasis:
    """The partition's nodes the job holds: the team's own, never a bill per job."""
    return base.nodes_cost(valid, time_limit(valid), team_nodes="the partition's nodes")
