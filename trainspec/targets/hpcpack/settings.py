"""targets.hpcpack, the spec's words for an HPC Pack job: its settings model, the hints for a bad
value, the rules the model cannot state, and the variables only HPC Pack sets in a process.

Imports nothing but trainspec.core and the runtime's names: validation loads it, and none of lower.py.
"""

from __future__ import annotations

import functools
from typing import List, Tuple

from trainspec.core import interpreter, volumes
from trainspec.core.diagnostics import Diagnostic
from trainspec.core.secret_refs import FILE as SECRET_REFERENCE  # secrets.<NAME>.file: a file on every node
from trainspec.runtime import shim as contract

NAME = "hpcpack"
# What the node agent sets in a task that no other target's platform does, and the portable name
# to read instead (None: there is none): another target's command that reads one is an error there.
PLATFORM_VARIABLES = {"CCP_TASKID": "$NODE_RANK (one task per node)", "CCP_*": None}


# --- settings: targets.hpcpack in a spec -------------------------------------------------------

SETTINGS_DESCRIPTION = 'HPC Pack job settings.'
SETTINGS_EXAMPLE = {'shared_dir': '/app', 'node_group': 'LinuxNodes'}

# The settings that change what a job costs (its priority or tier, its time limit, a machine it
# adds): a change to one opens the cost summary of the pull-request review (review/cost.py).
COST_SETTINGS = ("priority", "runtime")

# The settings that change what a job runs or can reach (the template, the shell line run first, the
# shared folder, the paths mounted): a change to one is said in the review's summary, never cut
# (review/cost.py).
ACCESS_SETTINGS = ("job_template", "project", "setup", "shared_dir", "volumes")

# for a bad spec (schema/explain.py): a hint per field below targets.hpcpack, and what a pattern means
HINTS = {("runtime",): "e.g. 2d, 12h, 1h30m or 3600",
         ("shared_dir",): "an absolute path without spaces or shell characters, e.g. /app",
         ("python",): interpreter.PYTHON_HINT,
         ("volumes", "*"): "{path: /shared/datasets/NAME}: where the data is on storage every node mounts"}
PATTERN_WORDS = {("shared_dir",): "is not an absolute path the node agent can use unquoted",
                 ("volumes", "*", "path"): "is not an absolute path on the nodes"}


@functools.lru_cache(maxsize=None)
def settings_model():
    """The pydantic model of this target's settings. Built on demand: only model.py (the JSON
    Schema, the stored structure snapshot) and explain.py (hints for a bad spec) need it."""
    from typing import Dict, Literal, Optional

    from pydantic import Field

    from trainspec.core.fields import SHELL_WORD
    from trainspec.core.types import Duration, Model

    class Volume(Model):
        path: str = Field(..., pattern=volumes.ABSOLUTE_PATH, description="Where the data is on the nodes: an "
                          "absolute path on storage every node mounts.", examples=["/shared/datasets/sft"])

    class HPCPackTarget(Model):
        shared_dir: str = Field(
            ..., pattern="^/" + SHELL_WORD + "*$",
            description="Absolute path of storage every node mounts: the code, the shim and the logs live there.",
            examples=["/app"])
        node_group: Optional[str] = Field(None, min_length=1, description="HPC Pack node group to run on.",
                                          examples=["LinuxNodes"])
        nodes: Optional[list[str]] = Field(
            None, description="Explicit node names, one per resources.nodes: the first is the rendezvous host.",
            examples=[["GPUNODE-000", "GPUNODE-001"]])
        python: str = interpreter.python_field("python3", "on the nodes (no conda or venv is active in a task)")
        setup: Optional[str] = Field(None, min_length=1,
                                     description="Shell line run before training on every node, e.g. an activation.",
                                     examples=["source /opt/conda/bin/activate torch"])
        rdzv_port: int = Field(contract.HPCPACK_MASTER_PORT, ge=1024, le=65535,
                               description="torchrun rendezvous port on the first node (default: "
                               f"distribution.master_port when the spec writes it, else {contract.HPCPACK_MASTER_PORT}).",
                               examples=[contract.HPCPACK_MASTER_PORT])
        priority: Optional[Literal["Lowest", "BelowNormal", "Normal", "AboveNormal", "Highest"]] = Field(
            None, description="Job priority.", examples=["Normal"])
        runtime: Optional[Duration] = Field(None, description="Job run-time limit (RuntimeSeconds): 2d, 12h, 90m or seconds. "
                                            "Overrides the spec's timeout on HPC Pack.",
                                            examples=["12h"])
        job_template: Optional[str] = Field(None, min_length=1, description="HPC Pack job template.",
                                            examples=["GPUJobs"])
        project: Optional[str] = Field(None, min_length=1, description="Project name, for accounting.",
                                       examples=["ddp"])
        volumes: Dict[str, Volume] = Field(
            {}, description="Where each input's or output's data is on the nodes, by its name: {{ inputs.<name> }} "
            "/ {{ outputs.<name> }} are that path in the job (Azure ML keeps the input's own path, e.g. a data "
            "asset). An output with neither a volume nor a path goes to <shared_dir>/outputs/<spec name>/<job id>/"
            "<name>, on the shared storage.",
            examples=[{"corpus": {"path": "/shared/datasets/sft"}, "ckpt": {"path": "/shared/checkpoints/ft"}}])

    return HPCPackTarget


def settings_errors(spec) -> List[Diagnostic]:
    """What targets.hpcpack may not say, whatever is compiled (run by validation)."""
    return [*interpreter.python_errors(NAME, spec.targets.hpcpack), *volumes.volume_errors(spec, NAME),
            *volumes.dot_dot_errors(spec, NAME)]


# --- what chooses the hardware -------------------------------------------------------------------

def hardware_settings(settings) -> List[Tuple[str, str, str]]:
    """The settings of targets.hpcpack that choose the machines the job runs on, as (setting, what
    it names, its value): validation checks each against resources.sku (a node group named under
    node_groups: in the team catalog, trainspec-skus.yaml, runs on the size it maps it to)."""
    return [("node_group", "node_groups", settings.node_group)] if settings.node_group else []
