"""targets.slurm, the spec's words for a Slurm batch job: its settings model, the hints for a bad
value, the rules the model cannot state, and the variables only Slurm sets in a process.

Imports nothing but trainspec.core and the runtime's names: validation loads it, and none of lower.py.
"""

from __future__ import annotations

import functools
from typing import List, Tuple

from trainspec.core import interpreter, volumes
from trainspec.core.diagnostics import Diagnostic, error
from trainspec.core.secret_refs import FILE as SECRET_REFERENCE  # secrets.<NAME>.file: a file on every node

NAME = "slurm"
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

# The settings that change what a job costs (its priority or tier, its time limit, a machine it
# adds): a change to one opens the cost summary of the pull-request review (review/cost.py).
COST_SETTINGS = ("qos", "time")
# What a submitted job leaves where sbatch ran (or under logs:), for the .gitignore `trainspec
# init` writes: its output and error files, lower.py's --output=%x-%j.out and --error=%x-%j.err
# (the job's name, a dash, its id)
LEFT_BEHIND = ("*-[0-9]*.out", "*-[0-9]*.err")

# The settings that change what a job runs or can reach (the account, the container and its image,
# the shell line run before srun, the paths mounted): a change to one is said in the review's
# summary, never cut (review/cost.py).
ACCESS_SETTINGS = ("account", "container", "container_image", "setup", "volumes")

# for a bad spec (schema/explain.py): a hint per field below targets.slurm, and what a pattern means
HINTS = {("time",): "e.g. 2d, 12h, 1h30m or 3600",
         ("gpu_type",): "the cluster's GRES type, e.g. h100 (`scontrol show node` shows Gres=gpu:<type>:N)",
         ("logs",): "a folder that exists when the job starts, e.g. logs or /shared/logs",
         ("python",): interpreter.PYTHON_HINT,
         ("volumes", "*"): "{path: /shared/datasets/NAME}: where the data is on storage every node mounts"}
PATTERN_WORDS = {("volumes", "*", "path"): "is not an absolute path on the nodes",
                 ("partition",): "is not a Slurm name (letters, digits, _ . , + - : = @ % /)",
                 ("account",): "is not a Slurm name (letters, digits, _ . , + - : = @ % /)",
                 ("qos",): "is not a Slurm name (letters, digits, _ . , + - : = @ % /)",
                 ("logs",): "is not a folder name sbatch can read unquoted",
                 ("gpu_type",): "is not a GRES type name (letters, digits, _ . -)",
                 ("constraint",): "is not a Slurm feature expression (features joined by & | , without spaces)"}


@functools.lru_cache(maxsize=None)
def settings_model():
    """The pydantic model of this target's settings. Built on demand: only model.py (the JSON
    Schema, the stored structure snapshot) and explain.py (hints for a bad spec) need it."""
    from typing import Dict, Optional

    from pydantic import Field

    from trainspec.core.types import Duration, Model

    class Volume(Model):
        path: str = Field(..., pattern=volumes.ABSOLUTE_PATH, description="Where the data is on the nodes: an "
                          "absolute path on storage every node mounts (and, with a container, mounted into it at "
                          "the same path).", examples=["/shared/datasets/sft"])

    class SlurmTarget(Model):
        partition: Optional[str] = Field(None, pattern=_SBATCH_WORD, description="Partition (--partition).",
                                         examples=["gpu"])
        account: Optional[str] = Field(None, pattern=_SBATCH_WORD, description="Account charged (--account).",
                                       examples=["ml-team"])
        qos: Optional[str] = Field(None, pattern=_SBATCH_WORD, description="Quality of service (--qos).",
                                   examples=["high"])
        time: Optional[Duration] = Field(None, description="Time limit (--time): 2d, 12h, 90m or seconds. Overrides the "
                                         "spec's timeout on Slurm; without either, the partition's default.",
                                         examples=["12h"])
        gpu_type: Optional[str] = Field(
            None, pattern=r"^[A-Za-z0-9_.-]+$",
            description="The GPU type the job's nodes must have, as the cluster names it in its GRES "
            "(`scontrol show node`: Gres=gpu:<type>:N): the GPUs are asked for as --gpus-per-node=<type>:<n> "
            "(the same request as --gres=gpu:<type>:<n>), so Slurm runs the job only on that GPU. A type "
            "that names a model (h100, a100_80g, nvidia_h100_80gb_hbm3) must be resources.sku's GPU.",
            examples=["h100"])
        constraint: Optional[str] = Field(None, pattern=_CONSTRAINT,
                                          description="Node features the job needs (--constraint). A "
                                          "constraint is taken to select resources.sku's hardware (plan says so; "
                                          "trainspec cannot check a cluster's feature names).",
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
        python: str = interpreter.python_field("python3", "on the nodes (or in the container)")
        container: bool = Field(True, description="Run every task in a container (pyxis/enroot: srun "
                                "--container-image): environment.image in enroot's form (nvcr.io/nvidia/pytorch:"
                                "24.08-py3 becomes nvcr.io#nvidia/pytorch:24.08-py3), or container_image. false: "
                                "the cluster has no pyxis, and tasks run on the nodes' own software (setup, "
                                "python), with a warning at environment.image.", examples=[False])
        container_image: Optional[str] = Field(
            None, pattern=r"""^[^\s'"]+$""",
            description="Run every task in this image instead of environment.image, written as pyxis reads it "
            "(srun --container-image, passed as written): enroot's registry#image:tag, a squashfs file, or a "
            "name the cluster's enroot knows.",
            examples=["nvcr.io#nvidia/pytorch:24.08-py3"])
        volumes: Dict[str, Volume] = Field(
            {}, description="Where each input's or output's data is on the cluster, by its name: {{ inputs.<name> }} "
            "/ {{ outputs.<name> }} are that path in the job (Azure ML keeps the input's own path, e.g. a data "
            "asset). In a container, inputs are mounted read-only and outputs read-write at the same path. An "
            "output with neither a volume nor an absolute path is an error: the job would write it into the "
            "compiled job folder.",
            examples=[{"corpus": {"path": "/shared/datasets/sft"}, "ckpt": {"path": "/shared/checkpoints/ft"}}])

    return SlurmTarget


def settings_errors(spec) -> List[Diagnostic]:
    """What targets.slurm may not say, whatever is compiled (run by validation)."""
    settings = spec.targets.slurm
    out = interpreter.python_errors(NAME, settings)
    if settings.container_image and not settings.container:
        out.append(error(("targets", NAME, "container_image"), "names an image, and container: false says tasks "
                         "run without one", "remove container: false to run every task in it, or remove "
                         "container_image"))
    if settings.gpu_type and spec.resources.gpus_per_node == 0:
        out.append(error(("targets", NAME, "gpu_type"), "a GPU type for a job that uses no GPU (gpus_per_node: 0)",
                         "remove gpu_type, or give the job GPUs"))
    return [*out, *volumes.volume_errors(spec, NAME), *volumes.dot_dot_errors(spec, NAME)]


# --- what chooses the hardware -------------------------------------------------------------------

def hardware_settings(settings) -> List[Tuple[str, str, str]]:
    """The settings of targets.slurm that choose the machines the job runs on, as (setting, what
    it names, its value): validation checks each against resources.sku (a partition named under
    partitions: in the team catalog, trainspec-skus.yaml, runs on the size it maps it to; gpu_type
    names a GPU model, which must be the size's)."""
    found = [("partition", "partitions", settings.partition)] if settings.partition else []
    if settings.gpu_type:
        found.append(("gpu_type", "gpu", settings.gpu_type))
    return found
