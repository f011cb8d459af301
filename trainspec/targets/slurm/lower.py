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
the shim in the code directory (``--kill-on-bad-exit``: the first failing task ends the step); a
command that needs a shell runs as ``bash -c`` under the shim (base.under_shim), so the batch
script's own shell never expands it.
With ``container_image``, srun runs every task in it (pyxis/enroot). Every string of ours or
the spec's reaches the script through shlex; ``setup`` and the command after its interpreter
are shell the user wrote, kept verbatim. sbatch runs a copy of the script, so it asks Slurm
where the original lies (the shim is beside it) and falls back to the submit directory.
"""

from __future__ import annotations

import functools
import shlex
import sys
from pathlib import Path
from typing import Any, Dict, List

from trainspec.core.diagnostics import Diagnostic
from trainspec.spec.validate import ValidSpec
from trainspec.compile import base, capabilities, emit
from trainspec.targets.slurm.settings import NAME
from trainspec.compile.capabilities import Feature, only, problem, unsupported

# Who starts the processes when the spec does not say: srun starts every rank (Lightning's own
# SLURMEnvironment expects that too: tasks per node = devices).
LAUNCHERS = {"pytorch": "per-process", "lightning": "per-process", "huggingface": "per-process",
             "deepspeed": "per-process"}
JOB_FILE = "job.sbatch"
SUBMIT = "sbatch {dir}/" + JOB_FILE

def _settings(valid: ValidSpec):
    return valid.spec.targets.slurm or settings_defaults()


@functools.lru_cache(maxsize=None)
def settings_defaults():
    """targets.slurm is optional: a spec that lists no Slurm settings gets these."""
    from trainspec.spec import structure

    return structure.parse({"version": 1, "name": "x", "code": ".", "command": "x",
                            "targets": {NAME: {}}}).targets.slurm


def refs_for(valid: ValidSpec):
    """``{{ inputs.x }}``: a path on the nodes, quoted for bash; ``{{ outputs.x }}``: its path, or
    ``<job folder>/outputs/<job id>/x`` (made by the script; ``$job_dir`` and ``$SLURM_JOB_ID``
    expanded by bash)."""
    return base.node_path_refs(valid, lambda name: f'"$job_dir"/outputs/"$SLURM_JOB_ID"/{name}')


# What Slurm cannot run, by feature (capabilities.py: the catalogue, the matrix in docs/capabilities.md)
_NODES_SOFTWARE = "set targets.slurm.setup (module load, an activation) or container_image"
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
    Feature.ENV_IMAGE: unsupported("environment.image without a container runtime: tasks run on the nodes' own "
                                   "software", "set targets.slurm.container_image: {spec.environment.image} (pyxis/enroot)",
                                   fatal=False, when=only("without targets.slurm.container_image",
                                                          lambda valid: not _settings(valid).container_image)),
    Feature.ENV_CONDA_FILE: unsupported("environment.conda_file: tasks run on the nodes' own software (or the "
                                        "container's)", _NODES_SOFTWARE, fatal=False),
    Feature.ENV_PIP: unsupported("environment.pip: tasks run on the nodes' own software (or the container's)",
                                 _NODES_SOFTWARE, fatal=False),
    Feature.SHM_SIZE: unsupported("a shared-memory size: tasks see the node's", None, fatal=False),
    Feature.INPUT_EVAL_MODE: unsupported(fatal=False),
    Feature.OUTPUT_ASSET_NAME: unsupported(fatal=False),
    Feature.INPUT_URL: unsupported(),
    Feature.INPUT_DATA_ASSET: unsupported(),
    Feature.INPUT_RELATIVE: problem("on Slurm an input is a path on the nodes: it must be absolute",
                                    "e.g. /data/mnist on the shared storage"),
    Feature.OUTPUT_NOT_ABSOLUTE: unsupported(),
}


def cannot_express(valid: ValidSpec) -> List[Diagnostic]:
    """What Slurm cannot run: its table (CANNOT_RUN), then what depends on the command."""
    out = capabilities.check(NAME, CANNOT_RUN, valid)
    launcher = base.launcher(valid, LAUNCHERS)
    out += base.command_variable_errors(NAME, valid, launcher)
    if launcher == "per-node" and valid.spec.framework != "lightning":
        out += base.torchrun_errors(valid, refs_for(valid), "per node, Slurm runs the command under torchrun",
                                    "write `python train.py ...`; put preparation in targets.slurm.setup")
    return out


def lower(valid: ValidSpec, out_dir: Path) -> base.Artifact:
    script = _script(valid, base.relative(valid.resolve(valid.spec.code), out_dir))
    files = (base.OutFile(JOB_FILE, script.encode("utf-8"), executable=True), base.shim_file())
    return base.Artifact(target=NAME, name=valid.name, files=files, submit=SUBMIT)


def tasks_per_node(valid: ValidSpec) -> int:
    return 1 if base.launcher(valid, LAUNCHERS) == "per-node" else valid.procs_per_node


def sbatch_options(valid: ValidSpec) -> List[str]:
    """The #SBATCH options, one per line: the job's shape, then the cluster's settings."""
    settings = _settings(valid)
    tasks = tasks_per_node(valid)
    options = [f"--job-name={valid.name}", f"--nodes={valid.nodes}", f"--ntasks-per-node={tasks}"]
    if valid.gpus_per_node:
        options.append(f"--gpus-per-node={valid.gpus_per_node}")
    if valid.sku is not None and valid.sku.vcpus:
        options.append(f"--cpus-per-task={max(1, valid.sku.vcpus // tasks)}")
    if settings.time is not None:
        options.append(f"--time={_slurm_time(settings.time)}")
    for field in ("partition", "account", "qos", "constraint"):
        if getattr(settings, field):
            options.append(f"--{field}={getattr(settings, field)}")
    if settings.exclusive:
        options.append("--exclusive")
    options.append("--requeue" if settings.requeue else "--no-requeue")
    logs = (settings.logs.rstrip("/") + "/") if settings.logs else ""
    options += [f"--output={logs}%x-%j.out", f"--error={logs}%x-%j.err"]
    return options


def _slurm_time(seconds: int) -> str:
    """Slurm's days-hours:minutes:seconds, rounded up to a whole minute as Slurm does."""
    minutes = -(-seconds // 60)
    return f"{minutes // 1440}-{minutes // 60 % 24:02d}:{minutes % 60:02d}:00"


def _script(valid: ValidSpec, code: str) -> str:
    spec = valid.spec
    settings = _settings(valid)
    python = shlex.split(settings.python)
    command = valid.render(("command",), spec.command, refs_for(valid)).strip()
    launcher = base.launcher(valid, LAUNCHERS)
    if launcher == "per-node" and spec.framework != "lightning" and not base.own_spawner(command):
        command = base.torchrun_line(valid, command, python=shlex.join(python))
    shim = f'{shlex.join([*python, *base.SHIM_FLAGS])} "$job_dir"/{base.SHIM_FILE}'
    srun = ["srun", "--kill-on-bad-exit=1", f"--ntasks-per-node={tasks_per_node(valid)}"]
    if settings.container_image:
        srun += [f"--container-image={shlex.quote(settings.container_image)}",
                 '--container-mounts="$job_dir:$job_dir,$code_dir:$code_dir"', '--container-workdir="$code_dir"']
    env = base.job_env(valid, refs_for(valid), launcher, spec.distribution.master_port)
    lines = ["#!/bin/bash",
             *[f"# {line}" for line in emit.header_lines(valid.source.display, valid.source.digest, NAME)],
             *[f"#SBATCH {option}" for option in sbatch_options(valid)],
             "set -euo pipefail",
             "# sbatch runs a copy of this script: Slurm says where the original (and the shim beside it) lies",
             "job_dir=$(scontrol show job \"$SLURM_JOB_ID\" 2>/dev/null | sed -n 's|^ *Command=\\(.*\\)/[^/]*$|\\1|p' "
             "|| true)",
             'export job_dir=${job_dir:-$SLURM_SUBMIT_DIR}  # exported: a command run through bash reads it',
             f'code_dir=$(cd "$job_dir"/{shlex.quote(code)} && pwd)',
             *[f"export {key}={shlex.quote(value)}" for key, value in env.items()]]
    if any(item.path is None for item in spec.outputs.values()):
        lines.append('mkdir -p "$job_dir"/outputs/"$SLURM_JOB_ID"')
    if settings.setup:
        lines.append(settings.setup)
    lines += ['cd "$code_dir"', base.under_shim(f"{' '.join(srun)} {shim}", command, valid)]
    return "\n".join(lines) + "\n"


# --- what plan and run --local need --------------------------------------------------------

def plan_settings(valid: ValidSpec) -> Dict[str, str]:
    """The #SBATCH lines a cluster admin reviews, and what starts the shim."""
    return {"sbatch": " ".join(sbatch_options(valid)), "shim": base.plan_shim(_settings(valid).python)}


def local_settings(settings: Dict[str, Any], workdir: Path) -> Dict[str, Any]:
    """The nodes' python is this one; no setup line, no container, logs where the run prints them."""
    settings["python"] = shlex.quote(sys.executable)
    for field in ("setup", "container_image", "logs"):
        settings.pop(field, None)
    return settings


class Slurm(base.Target):
    name = NAME
    launchers = LAUNCHERS
    cannot_run = CANNOT_RUN
    cannot_express = staticmethod(cannot_express)
    lower = staticmethod(lower)
    refs_for = staticmethod(refs_for)
    plan_settings = staticmethod(plan_settings)
    local_settings = staticmethod(local_settings)


TARGET = Slurm()
