"""targets.azureml, the spec's words for an Azure ML job: its settings model, the hints for a bad
value, the rules the model cannot state, and the variables only Azure ML sets in a process.

Imports nothing but trainspec.core and the runtime's names: validation loads it, and none of lower.py.
"""

from __future__ import annotations

import functools
import re
from typing import List, Optional, Tuple

from trainspec.core import interpreter
from trainspec.core.diagnostics import Diagnostic, error
from trainspec.core.secret_refs import Reference

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

# The settings that change what a job runs or can reach (the cluster, and so its managed identity;
# `docker run` arguments, the identity, the services that open the job to a connection): a change to
# one is said in the review's summary, never cut (review/cost.py).
ACCESS_SETTINGS = ("compute", "docker_args", "identity", "services")

# --- secrets.<NAME>.azureml: a secret in an Azure Key Vault, read at start with the job's identity --

# https://<vault>.vault.azure.net (Azure), .vault.azure.cn (Azure in China), .vault.usgovcloudapi.net
# (Azure Government): a vault's name is 3-24 letters, digits and single hyphens, starting with a
# letter, ending with a letter or digit (the length: _keyvault_errors); a secret's, 1-127 letters,
# digits and hyphens. The shim asks for a token for https://vault.<suffix> (docs/targets/azureml.md).
KEYVAULT_URL = r"^https://([A-Za-z](?:-?[A-Za-z0-9])+)\.(vault\.azure\.net|vault\.azure\.cn|vault\.usgovcloudapi\.net)/?$"
KEYVAULT_SECRET = r"^[0-9A-Za-z-]{1,127}$"
# identities whose token a job can ask for inside the container (the shim: managed identity or
# on-behalf-of endpoint); aml_token reaches Azure ML's own data only
KEYVAULT_IDENTITIES = ("user_identity", "managed")


def _keyvault_field():
    from typing import Optional

    from pydantic import Field

    from trainspec.core.types import Model

    class KeyVaultSecret(Model):
        keyvault: str = Field(..., pattern=KEYVAULT_URL,
                              description="The vault's URL: https://<vault>.vault.azure.net (or .vault.azure.cn, "
                              ".vault.usgovcloudapi.net).", examples=["https://team-kv.vault.azure.net"])
        name: str = Field(..., pattern=KEYVAULT_SECRET,
                          description="The secret's name in the vault (its latest version is read).",
                          examples=["hf-token"])

    return (Optional[KeyVaultSecret], Field(
        None, description="A secret in an Azure Key Vault: the shim reads it when the job starts, with the job's "
        "identity (managed identity, or the submitter's with identity user_identity), through the Key Vault REST "
        "API. The identity needs the Key Vault Secrets User role (or a get-secret access policy).",
        examples=[{"keyvault": "https://team-kv.vault.azure.net", "name": "hf-token"}]))


def _keyvault_errors(path, ref) -> List[Diagnostic]:
    import re as _re

    found = _re.match(KEYVAULT_URL, ref.keyvault)
    if found and not 3 <= len(found.group(1)) <= 24:
        return [error((*path, "keyvault"), f"'{found.group(1)}' is not a Key Vault name: it has "
                      f"{len(found.group(1))} characters",
                      "a vault's name is 3-24 letters, digits and single hyphens")]
    return []


SECRET_REFERENCE = Reference(NAME, _keyvault_field,
                             lambda ref: f"Key Vault {ref.keyvault.rstrip('/')}, secret {ref.name}",
                             "{keyvault: https://<vault>.vault.azure.net, name: <secret>}", _keyvault_errors,
                             lambda ref: {"keyvault": ref.keyvault.rstrip("/"), "secret": ref.name},
                             {("keyvault",): "is not a Key Vault URL: https://<vault>.vault.azure.net (or "
                                             ".vault.azure.cn, .vault.usgovcloudapi.net)",
                              ("name",): "is not a Key Vault secret name (1-127 letters, digits and -)"})

# for a bad spec (schema/explain.py): a hint per field below targets.azureml, and what a pattern means
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
        timeout: Optional[Duration] = Field(None, description="Azure ML's time limit (limits.timeout): 2d, 12h, 90m or seconds. "
                                            "Overrides the spec's timeout on Azure ML.",
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
    identity = settings.identity.type if settings.identity is not None else None
    if identity is not None and identity not in KEYVAULT_IDENTITIES:
        for name, reference in spec.secrets.items():
            if getattr(reference, NAME) is not None:
                out.append(error(("targets", "azureml", "identity", "type"),
                                 f"secrets.{name} is read from Key Vault with the job's identity, and an "
                                 f"{identity} identity cannot ask for a Key Vault token: it reaches Azure ML's "
                                 "own data only", "use type: managed (the compute's identity) or user_identity"))
                break
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

# --- what chooses the hardware -------------------------------------------------------------------

def hardware_settings(settings) -> List[Tuple[str, str, str]]:
    """The settings of targets.azureml that choose the machines the job runs on, as (setting, what
    it names, its value): validation checks each against resources.sku (a compute cluster named under computes: in the team catalog, trainspec-skus.yaml, runs on the size it maps it to)."""
    compute = _bare_compute(settings.compute)
    return [("compute", "computes", compute)] if compute else []
