"""targets.slurm, the spec's words for a Slurm batch job: its settings model, the hints for a bad
value, the rules the model cannot state, and the variables only Slurm sets in a process.

Imports nothing but trainspec.core and the runtime's names: validation loads it, and none of lower.py.
"""

from __future__ import annotations

import functools
from typing import List

from trainspec.core import interpreter
from trainspec.core.diagnostics import Diagnostic

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

# for a bad spec (spec/explain.py): a hint per field below targets.slurm, and what a pattern means
HINTS = {("time",): "e.g. 2d, 12h, 1h30m or 3600",
         ("logs",): "a folder that exists when the job starts, e.g. logs or /shared/logs",
         ("python",): interpreter.PYTHON_HINT}
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

    from trainspec.core.types import Duration, Model

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
        python: str = interpreter.python_field("python3", "on the nodes (or in the container)")
        container_image: Optional[str] = Field(
            None, pattern=r"""^[^\s'"]+$""",
            description="Run every task in this image (pyxis/enroot: srun --container-image).",
            examples=["nvcr.io#nvidia/pytorch:24.08-py3"])

    return SlurmTarget


def settings_errors(spec) -> List[Diagnostic]:
    """What targets.slurm may not say, whatever is compiled (run by validation)."""
    return interpreter.python_errors(NAME, spec.targets.slurm)
