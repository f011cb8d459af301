"""targets.azureml, the spec's words for an Azure ML job: its settings model, the hints for a bad
value, the rules the model cannot state, and the variables only Azure ML sets in a process.

Imports nothing but trainspec.core and the runtime's names: validation loads it, and none of lower.py.
"""

from __future__ import annotations

import functools
import re
from typing import List, Optional

from trainspec.core import interpreter
from trainspec.core.diagnostics import Diagnostic, error

NAME = "azureml"
_COMPUTE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,14}[A-Za-z0-9]$")
_EXPERIMENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,254}$")
# What Azure ML (and Azure Batch, Open MPI, TF_CONFIG under it) sets in a process that no other
# target's platform does, and the portable name to read instead (None: there is none): another
# target's command that reads one is an error there.
PLATFORM_VARIABLES = {"OMPI_COMM_WORLD_RANK": "$RANK", "OMPI_COMM_WORLD_SIZE": "$WORLD_SIZE",
                      "OMPI_COMM_WORLD_LOCAL_RANK": "$LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE": "$LOCAL_WORLD_SIZE",
                      "AZ_BATCH_MASTER_NODE": "$MASTER_ADDR:$MASTER_PORT", "AZ_BATCHAI_MPI_MASTER_NODE": "$MASTER_ADDR",
                      "AZ_BATCH*": None, "AZUREML_*": None, "OMPI_*": None, "TF_CONFIG": None}


# --- settings: targets.azureml in a spec -------------------------------------------------------

SETTINGS_DESCRIPTION = 'Azure ML v2 command job settings.'
SETTINGS_EXAMPLE = {'compute': 'gpu-cluster'}

# The settings that change what a job costs (its priority or tier, its time limit, a machine it
# adds): a change to one opens the cost summary of the pull-request review (review/cost.py).
COST_SETTINGS = ("job_tier", "priority", "timeout")

# for a bad spec (spec/explain.py): a hint per field below targets.azureml, and what a pattern means
HINTS = {("timeout",): "e.g. 2d, 12h, 1h30m or 3600", ("python",): interpreter.PYTHON_HINT}


@functools.lru_cache(maxsize=None)
def settings_model():
    """The pydantic model of this target's settings. Built on demand: only model.py (the JSON
    Schema, the stored structure snapshot) and explain.py (hints for a bad spec) need it."""
    from typing import Dict, Literal, Optional

    from pydantic import Field

    from trainspec.core.types import Duration, Model

    class Identity(Model):
        type: Literal["user_identity", "managed", "aml_token"] = Field(
            ..., description="Whose identity the job uses to reach data: the submitter's, the compute's managed "
            "identity, or the workspace's AML token.", examples=["user_identity"])
        client_id: Optional[str] = Field(None, pattern=r"^[0-9a-fA-F-]{36}$",
                                         description="A user-assigned managed identity (type managed).",
                                         examples=["00000000-0000-0000-0000-000000000000"])

    class Service(Model):
        type: Literal["tensor_board", "ssh", "jupyter_lab", "vs_code"] = Field(
            ..., description="An interactive service on the job's nodes.", examples=["tensor_board"])
        nodes: Optional[Literal["all"]] = Field(None, description="all: on every node; default: the first node.",
                                                examples=["all"])
        log_dir: Optional[str] = Field(None, min_length=1, description="TensorBoard's log directory (tensor_board).",
                                       examples=["outputs/tblogs"])
        ssh_public_keys: Optional[str] = Field(None, min_length=1, description="The public key(s) for ssh.",
                                               examples=["ssh-rsa AAAA... user@host"])
        port: Optional[int] = Field(None, ge=1, le=65535, description="The port the service listens on.",
                                    examples=[6006])
        properties: Dict[str, str] = Field(default_factory=dict,
                                           description="The service's other properties, as Azure ML sends them.",
                                           examples=[{"key": "value"}])

    class AzureMLTarget(Model):
        compute: Optional[str] = Field(
            None, description="Compute cluster name. Omitted: serverless, with resources.sku as instance_type.",
            examples=["gpu-cluster"])
        display_name: Optional[str] = Field(
            None, min_length=1, description="The job's name in the studio, as written. Default: the spec's name; "
            "null: none (Azure ML shows the job's generated name).", examples=["BERT finetune (DDP)"])
        experiment_name: Optional[str] = Field(
            None, description="Default: the spec's name; null: none (Azure ML uses the name of the folder the job "
            "is submitted from).", examples=["mnist"])
        job_tier: Optional[Literal["spot", "basic", "standard", "premium"]] = Field(
            None, description="Default: spot when resources.spot, else the workspace default.", examples=["standard"])
        priority: Optional[Literal["low", "medium", "high"]] = Field(None, description="Queue priority.",
                                                                     examples=["medium"])
        timeout: Optional[Duration] = Field(None, description="Job time limit: 2d, 12h, 90m or seconds.",
                                            examples=["2d"])
        tags: Dict[str, str] = Field(default_factory=dict, description="Extra job tags.", examples=[{"team": "vision"}])
        identity: Optional[Identity] = Field(None, description="The identity the job uses to access data.",
                                             examples=[{"type": "user_identity"}])
        services: Dict[str, Service] = Field(
            default_factory=dict, description="Interactive services (TensorBoard, SSH, JupyterLab, VS Code).",
            examples=[{"tensorboard": {"type": "tensor_board", "log_dir": "outputs/tb"}}])
        python: str = interpreter.python_field("python", "in the image")
        docker_args: Optional[str] = Field(None, min_length=1,
                                           description="Extra arguments for `docker run` of the job's container.",
                                           examples=["--ipc=host --ulimit memlock=-1"])
        parameter_server_count: int = Field(0, ge=0, le=1024,
                                            description="TensorFlow parameter servers (framework: tensorflow).",
                                            examples=[1])

    return AzureMLTarget


def settings_errors(spec) -> List[Diagnostic]:
    """What targets.azureml may not say, whatever is compiled (run by validation, beside the spec's
    other checks: a bad compute name shows up with a missing folder, not after it is fixed)."""
    settings = spec.targets.azureml
    out: List[Diagnostic] = interpreter.python_errors(NAME, settings)
    if settings.parameter_server_count and spec.framework != "tensorflow":
        out.append(error(("targets", "azureml", "parameter_server_count"),
                         "parameter servers are TensorFlow's: this job's framework is " + spec.framework,
                         "remove it, or set framework: tensorflow"))
    if settings.identity is not None and settings.identity.client_id is not None \
            and settings.identity.type != "managed":
        out.append(error(("targets", "azureml", "identity", "client_id"),
                         f"client_id names a managed identity; type is {settings.identity.type}",
                         "set type: managed, or remove client_id"))
    for name, service in settings.services.items():
        for key, kind in (("log_dir", "tensor_board"), ("ssh_public_keys", "ssh")):
            if getattr(service, key) is not None and service.type != kind:
                out.append(error(("targets", "azureml", "services", name, key),
                                 f"{key} belongs to a {kind} service; this one is {service.type}"))
    compute = _bare_compute(settings.compute)
    if compute is not None and not _COMPUTE_NAME.fullmatch(compute):
        out.append(error(("targets", "azureml", "compute"), f"'{compute}' is not a compute name Azure ML accepts",
                         "2-16 letters, digits and hyphens, starting with a letter, not ending with a hyphen"))
    if settings.experiment_name is not None and not _EXPERIMENT_NAME.fullmatch(settings.experiment_name):
        out.append(error(("targets", "azureml", "experiment_name"),
                         f"'{settings.experiment_name}' is not an experiment name Azure ML accepts",
                         "letters, digits, - and _, starting with a letter or digit, at most 255 characters"))
    if settings.docker_args is not None and any(c in settings.docker_args for c in "\r\n\x00"):
        out.append(error(("targets", "azureml", "docker_args"), "docker_args is one line of `docker run` arguments",
                         "e.g. --ipc=host --ulimit memlock=-1"))
    if settings.job_tier is not None and spec.resources.spot != (settings.job_tier == "spot"):
        out.append(error(("targets", "azureml", "job_tier"),
                         f"job_tier {settings.job_tier} contradicts resources.spot: {str(spec.resources.spot).lower()}",
                         "set resources.spot and leave job_tier out, or make them agree"))
    for key in settings.tags:
        if key.startswith("trainspec_"):
            out.append(error(("targets", "azureml", "tags", key),
                             "tags starting with trainspec_ are written by trainspec",
                             on_key=True))
    return out


def _bare_compute(compute: Optional[str]) -> Optional[str]:
    return compute[len("azureml:"):] if compute is not None and compute.startswith("azureml:") else compute
