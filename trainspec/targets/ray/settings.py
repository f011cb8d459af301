"""targets.ray, the spec's words for a Ray cluster on Azure: its settings model, the hints for a
bad value, the rules the model cannot state, and the variables only Ray sets in a process.

Imports nothing but trainspec.core and the runtime's names: validation loads it, and none of lower.py.
"""

from __future__ import annotations

import functools
from typing import List

from trainspec.core import interpreter, volumes
from trainspec.core.diagnostics import Diagnostic, error
from trainspec.core.secret_refs import FILE as SECRET_REFERENCE  # secrets.<NAME>.file: a file on every node

NAME = "ray"
# What Ray sets in an actor's process that no other target's platform does (None: no portable
# name to read instead): another target's command that reads one is an error there.
PLATFORM_VARIABLES = {"RAY_*": None}
# The storage URLs a Ray job's code reads and writes itself (pyarrow and fsspec know these schemes;
# Ray Train's storage_path takes them too): a volume or an output may be one of them
URL_SCHEMES = ("abfss://", "abfs://", "az://", "s3://", "gs://")
VOLUME_LOCATION = "^(/|" + "|".join(URL_SCHEMES) + ")" + volumes.LOCATION_CHARS + "$"


# --- settings: targets.ray in a spec ----------------------------------------------------------

SETTINGS_DESCRIPTION = 'Ray cluster on Azure settings.'
SETTINGS_EXAMPLE = {'location': 'eastus', 'resource_group': 'rg-training'}

# The settings that change what a job costs (its priority or tier, its time limit, a machine it
# adds): a change to one opens the cost summary of the pull-request review (review/cost.py).
COST_SETTINGS = ("head_sku", "keep_cluster")

# The settings that change what a job runs or can reach (where the cluster is started, the keys and
# user that reach it, the paths mounted): a change to one is said in the review's summary, never cut
# (review/cost.py).
ACCESS_SETTINGS = ("resource_group", "subscription_id", "ssh_private_key", "ssh_public_key", "ssh_user", "volumes")

# for a bad spec (schema/explain.py): a hint per field below targets.ray, and what a pattern means
HINTS = {("python",): interpreter.PYTHON_HINT,
         ("volumes", "*"): "{path: abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/DIR} or {path: /mnt/shared/DIR}"}
PATTERN_WORDS = {("volumes", "*", "path"): "is neither an absolute path on the nodes nor a storage URL (abfss://, "
                 "abfs://, az://, s3://, gs://)"}


@functools.lru_cache(maxsize=None)
def settings_model():
    """The pydantic model of this target's settings. Built on demand: only model.py (the JSON
    Schema, the stored structure snapshot) and explain.py (hints for a bad spec) need it."""
    from typing import Dict, List, Literal, Optional

    from pydantic import Field

    from trainspec.core.fields import ENV_NAME_PATTERN, NAME_PATTERN
    from trainspec.core.types import Model

    class Volume(Model):
        path: str = Field(..., pattern=VOLUME_LOCATION, description="Where the data is for every node: a storage "
                          "URL the job's code reads and writes itself (abfss://, abfs://, az://, s3://, gs://), or an "
                          "absolute path every node mounts (mounted into the container at the same path).",
                          examples=["abfss://data@team.dfs.core.windows.net/sft"])

    class Registry(Model):
        username: str = Field(..., pattern=ENV_NAME_PATTERN, description="The secret (its name under `secrets:`) "
                              "that holds the registry's user name.", examples=["REGISTRY_USERNAME"])
        password: str = Field(..., pattern=ENV_NAME_PATTERN, description="The secret (its name under `secrets:`) "
                              "that holds the registry's password or token.", examples=["REGISTRY_PASSWORD"])

    class RayTarget(Model):
        location: str = Field(..., pattern=r"^[a-z0-9]+$", description="Azure region of the cluster.",
                              examples=["eastus"])
        # `+` and max_length, not `{1,90}`: ninety copies of the Unicode class \w cost pydantic-core's
        # regex compiler 25 ms at every start (README, "Speed")
        resource_group: str = Field(..., pattern=r"^[-\w._()]+$", max_length=90,
                                    description="Azure resource group (created if missing).", examples=["rg-training"])
        subscription_id: Optional[str] = Field(
            None, pattern=r"^[0-9a-fA-F-]{36}$", description="Default: the subscription of the `az` CLI profile.",
            examples=["00000000-0000-0000-0000-000000000000"])
        cluster_name: Optional[str] = Field(None, pattern=NAME_PATTERN, description="Default: the spec's name.",
                                            examples=["mnist-ray"])
        head: Literal["worker", "cpu"] = Field(
            "worker", description="The head node: one of the training nodes (worker), or a small extra CPU VM (cpu).",
            examples=["cpu"])
        head_sku: str = Field("Standard_D8s_v3", description="VM size of a cpu head.", examples=["Standard_D8s_v3"])
        ssh_user: str = Field("ubuntu", pattern=r"^[a-z_][a-z0-9_-]{0,31}$", description="SSH user on the nodes.",
                              examples=["ubuntu"])
        ssh_private_key: Optional[str] = Field(None, description="Both keys or neither: Ray generates a pair if unset.",
                                               examples=["~/.ssh/id_rsa"])
        ssh_public_key: Optional[str] = Field(None, description="The public half of ssh_private_key.",
                                              examples=["~/.ssh/id_rsa.pub"])
        python: str = interpreter.python_field("python", "on the nodes (or in the image)")
        ray_version: str = Field("2.60.0", pattern=r"^\d+\.\d+\.\d+$", description="Ray installed on the nodes.",
                                 examples=["2.60.0"])
        idle_timeout_minutes: int = Field(10, ge=0, description="Minutes before idle workers are removed.",
                                          examples=[10])
        volumes: Dict[str, Volume] = Field(
            {}, description="Where each input's or output's data is for the cluster, by its name: {{ inputs.<name> }} "
            "/ {{ outputs.<name> }} are that URL or path in the job (Azure ML keeps the input's own path, e.g. a data "
            "asset). An output with neither a volume nor an absolute path or storage URL is an error: the job "
            "would write it on a VM that `ray down` deletes.",
            examples=[{"corpus": {"path": "abfss://data@team.dfs.core.windows.net/sft"},
                       "ckpt": {"path": "abfss://runs@team.dfs.core.windows.net/ft"}}])
        setup: List[str] = Field(
            [], description="Shell commands run on every VM, in order, before the container starts and the job runs "
            "(Ray's initialization_commands, on the VM itself, not in the container): mount the storage a volume or "
            "a secret's file is on, fetch a file. The job's packages belong in environment.pip or conda_file.",
            examples=[["sudo mkdir -p /mnt/data", "sudo blobfuse2 mount /mnt/data --config-file=/etc/blobfuse.yaml"]])
        registry: Optional[Registry] = Field(
            None, description="Log in to environment.image's registry on every VM before Ray pulls the image "
            "(docker login, in initialization_commands): the secrets that hold the user name and the password, by "
            "their names under `secrets:`, read from their files on the VM; never a value in a compiled file.",
            examples=[{"username": "REGISTRY_USERNAME", "password": "REGISTRY_PASSWORD"}])
        keep_cluster: bool = Field(
            False, description="Keep the cluster when the job ends. Default false: launch.sh runs `ray down -y` "
            "whatever ends the job (its end, a failure, the time limit, Ctrl-C), so no VM outlives it; true: it "
            "says how to delete the cluster, and the VMs cost until someone does.", examples=[True])

    return RayTarget


def settings_errors(spec) -> List[Diagnostic]:
    """What targets.ray may not say, whatever is compiled (run by validation)."""
    return [*interpreter.python_errors(NAME, spec.targets.ray), *volumes.volume_errors(spec, NAME),
            *volumes.dot_dot_errors(spec, NAME), *_setup_errors(spec), *_registry_errors(spec)]


def _setup_errors(spec) -> List[Diagnostic]:
    """A setup command is one shell command line Ray runs over ssh: not blank, no NUL byte."""
    return [error(("targets", NAME, "setup", i), "is an empty command" if not command.strip() else
                  "holds a NUL byte, which no shell command line can",
                  "write one shell command per item, or remove it")
            for i, command in enumerate(spec.targets.ray.setup) if not command.strip() or "\x00" in command]


def _registry_errors(spec) -> List[Diagnostic]:
    """targets.ray.registry names two of the spec's secrets, and needs an image to log in for."""
    registry = spec.targets.ray.registry
    if registry is None:
        return []
    out = []
    if not spec.environment.image:
        out.append(error(("targets", NAME, "registry"), "a registry login is for pulling environment.image, and the "
                         "spec names no image", "set environment.image, or remove targets.ray.registry"))
    for key in ("username", "password"):
        name = getattr(registry, key)
        if name not in spec.secrets:
            out.append(error(("targets", NAME, "registry", key), f"'{name}' names no secret of the spec",
                             f"add secrets: {{{name}: {{file: /abs/path/on/every/vm}}}}" if not spec.secrets else
                             f"one of: {', '.join(sorted(spec.secrets))}"))
    return out
