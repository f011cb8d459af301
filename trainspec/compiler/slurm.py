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

from ..diagnostics import Diagnostic
from ..schema.validate import ValidSpec
from . import base, capabilities, emit
from .capabilities import Feature, only, problem, unsupported

NAME = "slurm"
# Who starts the processes when the spec does not say: srun starts every rank (Lightning's own
# SLURMEnvironment expects that too: tasks per node = devices).
LAUNCHERS = {"pytorch": "per-process", "lightning": "per-process", "huggingface": "per-process",
             "deepspeed": "per-process"}
JOB_FILE = "job.sbatch"
SUBMIT = "sbatch {dir}/" + JOB_FILE
# Values that go into #SBATCH lines, which sbatch reads itself (no shell): no spaces, quotes or #
_SBATCH_WORD = r"^[A-Za-z0-9_.,+:=@%/-]+$"
_CONSTRAINT = r"^[A-Za-z0-9_.,&|*()\[\]!:-]+$"
# What srun sets in a task that no other target's platform does, and the portable name to read
# instead (None: there is none): another target's command that reads one is an error there.
PLATFORM_VARIABLES = {"SLURM_PROCID": "$RANK", "SLURM_LOCALID": "$LOCAL_RANK", "SLURM_NODEID": "$NODE_RANK",
                      "SLURM_NTASKS": "$WORLD_SIZE", "SLURM_NTASKS_PER_NODE": "$LOCAL_WORLD_SIZE",
                      "SLURM_JOB_NUM_NODES": "{{ nodes }}", "SLURM_NNODES": "{{ nodes }}",
                      "SLURM_JOB_NODELIST": "$MASTER_ADDR (node 0)", "SLURM*": None}

# --- settings: targets.slurm in a spec ---------------------------------------------------

SETTINGS_DESCRIPTION = "Slurm batch job settings."
SETTINGS_EXAMPLE = {"partition": "gpu", "time": "12h"}
# for a bad spec (schema/explain.py): a hint per field below targets.slurm, and what a pattern means
HINTS = {("time",): "e.g. 2d, 12h, 1h30m or 3600",
         ("logs",): "a folder that exists when the job starts, e.g. logs or /shared/logs",
         ("python",): base.PYTHON_HINT}
PATTERN_WORDS = {("partition",): "is not a Slurm name (letters, digits, _ . , + - : = @ % /)",
                 ("account",): "is not a Slurm name (letters, digits, _ . , + - : = @ % /)",
                 ("qos",): "is not a Slurm name (letters, digits, _ . , + - : = @ % /)",
                 ("logs",): "is not a folder name sbatch can read unquoted",
                 ("constraint",): "is not a Slurm feature expression (features joined by & | , without spaces)"}


@functools.lru_cache(maxsize=None)
def settings_model():
    """The pydantic model of this target's settings. Built on demand: only model.py (the JSON
    Schema, the stored structure snapshot) and explain.py (hints for a bad spec) need it."""
    from typing import Optional

    from pydantic import Field

    from ..schema.types import Duration, Model

    class SlurmTarget(Model):
        partition: Optional[str] = Field(None, pattern=_SBATCH_WORD, description="Partition (--partition).",
                                         examples=["gpu"])
        account: Optional[str] = Field(None, pattern=_SBATCH_WORD, description="Account charged (--account).",
                                       examples=["ml-team"])
        qos: Optional[str] = Field(None, pattern=_SBATCH_WORD, description="Quality of service (--qos).",
                                   examples=["high"])
        time: Optional[Duration] = Field(None, description="Time limit (--time): 2d, 12h, 90m or seconds.",
                                         examples=["12h"])
        constraint: Optional[str] = Field(None, pattern=_CONSTRAINT,
                                          description="Node features the job needs (--constraint).",
                                          examples=["a100&ib"])
        exclusive: bool = Field(True, description="Whole nodes for this job (--exclusive): training shares "
                                "no GPU, CPU or network with other jobs.", examples=[True])
        requeue: bool = Field(False, description="Requeue the job when a node fails (--requeue). Default "
                              "--no-requeue: the job ends NODE_FAIL, and a training job is not restarted from "
                              "scratch behind your back.", examples=[False])
        logs: Optional[str] = Field(None, pattern=r"^[A-Za-z0-9_./~-]+$",
                                    description="Folder of the job's output and error files (<job name>-<job id>"
                                    ".out/.err), relative to where sbatch runs; it must exist. Default: there.",
                                    examples=["logs"])
        setup: Optional[str] = Field(None, min_length=1, description="Shell line run before srun, e.g. `module "
                                     "load cuda` or an activation.", examples=["source ~/venvs/torch/bin/activate"])
        python: str = base.python_field("python3", "on the nodes (or in the container)")
        container_image: Optional[str] = Field(
            None, pattern=r"""^[^\s'"]+$""",
            description="Run every task in this image (pyxis/enroot: srun --container-image).",
            examples=["nvcr.io#nvidia/pytorch:24.08-py3"])

    return SlurmTarget


def settings_errors(spec) -> List[Diagnostic]:
    """What targets.slurm may not say, whatever is compiled (run by validation)."""
    return base.python_errors(NAME, spec.targets.slurm)


def _settings(valid: ValidSpec):
    return valid.spec.targets.slurm or settings_defaults()


@functools.lru_cache(maxsize=None)
def settings_defaults():
    """targets.slurm is optional: a spec that lists no Slurm settings gets these."""
    from ..schema import structure

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

def plan_port(valid: ValidSpec) -> str:
    return str(valid.spec.distribution.master_port)


def plan_settings(valid: ValidSpec) -> Dict[str, str]:
    """The #SBATCH lines a cluster admin reviews, and what starts the shim."""
    return {"sbatch": " ".join(sbatch_options(valid)), "shim": base.plan_shim(_settings(valid).python)}


def local_settings(settings: Dict[str, Any], workdir: Path) -> Dict[str, Any]:
    """The nodes' python is this one; no setup line, no container, logs where the run prints them."""
    settings["python"] = shlex.quote(sys.executable)
    for field in ("setup", "container_image", "logs"):
        settings.pop(field, None)
    return settings


_LOCAL_JOB_ID = "4242"


def play_local(job_dir: Path, run) -> int:
    """Run job.sbatch with bash as the batch step on node 0 would, with `srun` standing in for
    Slurm's: it starts every task on its simulated node with the variables srun sets (below)."""
    import os
    import subprocess

    from ..local import base_env

    hosts = run.hosts
    nodes = run.valid.nodes
    stubs = run.workdir / "slurm-bin"
    stubs.mkdir(parents=True, exist_ok=True)
    (stubs / "srun").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m {__name__} srun \"$@\"\n")
    (stubs / "scontrol").write_text("#!/bin/sh\nexit 1\n")  # no controller here: the script's fallback applies
    for stub in ("srun", "scontrol"):
        (stubs / stub).chmod(0o755)
    env = base_env(hosts)
    env.update(PATH=f"{stubs}{os.pathsep}{env['PATH']}", SLURM_JOB_ID=_LOCAL_JOB_ID, SLURM_JOB_NAME=run.valid.name,
               SLURM_SUBMIT_DIR=str(job_dir), SLURM_JOB_NUM_NODES=str(nodes), SLURM_NNODES=str(nodes),
               SLURM_JOB_NODELIST=",".join(hosts.address(n) for n in range(nodes)),
               SIMULATED_NETNS=",".join(hosts.netns(n) or "" for n in range(nodes)),
               SIMULATED_TIMEOUT=str(run.options.timeout),
               SIMULATED_RDZV_TIMEOUT=str(run.options.rendezvous_timeout))
    print(f"trainspec: running {run.valid.name} locally as Slurm would: {JOB_FILE} through bash, srun on "
          f"{nodes} simulated node(s); workdir {run.workdir}", file=sys.stderr)
    out = run.out or sys.stdout
    sys.stdout.flush()
    done = subprocess.run(["bash", str(job_dir / JOB_FILE)], env=env, cwd=str(job_dir), stdin=subprocess.DEVNULL,
                          stdout=out if hasattr(out, "fileno") else None)
    return done.returncode


def srun(argv: List[str]) -> int:
    """`srun [options] COMMAND...` on the simulated nodes: each task with the variables srun sets
    (SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, SLURM_NTASKS, SLURM_NTASKS_PER_NODE, the step's
    node count and host list), output prefixed, the first failure stopping all (--kill-on-bad-exit)."""
    import os

    from ..local import Master, Proc, run_and_report

    per_node = 1
    while argv and argv[0].startswith("-"):
        option = argv.pop(0)
        if option.startswith("--ntasks-per-node="):
            per_node = int(option.split("=", 1)[1])
        elif option != "--kill-on-bad-exit=1":
            print(f"trainspec: error: the local srun does not know {option}", file=sys.stderr)
            return 2
    nodes = int(os.environ["SLURM_JOB_NUM_NODES"])
    hosts = os.environ["SLURM_JOB_NODELIST"].split(",")
    namespaces = os.environ.get("SIMULATED_NETNS", "").split(",")
    world = nodes * per_node
    procs = []
    for rank in range(world):
        node, local = divmod(rank, per_node)
        env = dict(os.environ, SLURM_PROCID=str(rank), SLURM_LOCALID=str(local), SLURM_NODEID=str(node),
                   SLURM_NTASKS=str(world), SLURM_NTASKS_PER_NODE=str(per_node), SLURM_STEP_NUM_NODES=str(nodes),
                   SLURM_STEP_NUM_TASKS=str(world), SLURM_NODELIST=",".join(hosts), SLURM_STEP_NODELIST=",".join(hosts),
                   SLURMD_NODENAME=hosts[node])
        label = f"rank {rank}" if per_node > 1 else f"node {node}"
        procs.append(Proc(label=label, argv=argv, env=env, cwd=os.getcwd(), netns=namespaces[node] or None))
    port = int(os.environ.get(base.contract.ENV_MASTER_PORT) or base.contract.AZUREML_MASTER_PORT)
    master = (Master(hosts[0], port, procs[0].label, float(os.environ["SIMULATED_RDZV_TIMEOUT"]),
                     namespaces[0] or None) if world > 1 else None)
    return run_and_report(procs, float(os.environ["SIMULATED_TIMEOUT"]), sys.stdout, master)


if __name__ == "__main__" and sys.argv[1:2] == ["srun"]:
    sys.exit(srun(sys.argv[2:]))
