"""The training spec, format version 1, as pydantic v2 models.

These models decide the *shape* of a spec: field names, types, enums, ranges, formats.
Cross-field and catalog checks (SKU, Lightning trap, files on disk) live in validate.py.
Every model forbids unknown keys and is strict: ``nodes: "2"`` or ``nodes: 2.5`` is an
error, not a silent coercion (azure-ai-ml truncates 2.5 to 2).
"""

from __future__ import annotations

from typing import Dict, Literal, Optional, Union

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr,
                      WithJsonSchema)
from typing_extensions import Annotated

from ..runtime.shim import AZUREML_MASTER_PORT, HPCPACK_MASTER_PORT  # the contract with every job
from .fields import (DURATION_PATTERN, NAME_PATTERN, SHELL_WORD, SHM_PATTERN, exact_int, literal_input,
                     parse_duration, scalar_to_str)

Framework = Literal["pytorch", "lightning", "deepspeed", "huggingface", "tensorflow"]
Launcher = Literal["per-process", "per-node", "mpi"]
Backend = Literal["nccl", "gloo", "mpi"]

# The JSON Schema (for editors) says what a file may hold, which is more than the validated type:
# a duration is seconds or `2d`/`12h`/`1h30m`; an env value any scalar but a boolean.
Duration = Annotated[int, BeforeValidator(parse_duration), WithJsonSchema(
    {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": DURATION_PATTERN}]})]
EnvValue = Annotated[str, BeforeValidator(scalar_to_str), WithJsonSchema({"type": ["string", "integer", "number"]})]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Resources(Model):
    nodes: int = Field(1, ge=1, le=1024, description="Number of nodes (VMs).", examples=[2])
    gpus_per_node: Optional[int] = Field(
        None, ge=0, le=16,
        description="GPUs used on each node. Default: all GPUs of the SKU.", examples=[4])
    procs_per_node: Optional[int] = Field(
        None, ge=1, le=256,
        description="Training processes per node. Default: gpus_per_node, or 1 without GPUs.", examples=[4])
    sku: Optional[str] = Field(
        None, min_length=1, description="Azure VM size, checked against the SKU catalog.",
        examples=["Standard_ND96isr_H100_v5"])
    spot: bool = Field(False, description="Run on spot / low-priority capacity.", examples=[True])
    shm_size: Optional[str] = Field(
        None, pattern=SHM_PATTERN,
        description="Shared memory of the container: an integer and a unit b, k, m or g.", examples=["16g"])


class Distribution(Model):
    launcher: Optional[Launcher] = Field(
        None,
        description="Who starts the training processes: the platform, one per process (per-process); "
        "one launcher per node that spawns the workers (per-node: torchrun or Lightning); or MPI (mpi). "
        "Default: per framework and target.", examples=["per-process"])
    backend: Optional[Backend] = Field(
        None, description="torch.distributed backend. Default: nccl with GPUs, gloo without.", examples=["nccl"])
    master_port: int = Field(AZUREML_MASTER_PORT, ge=1024, le=65535, description="Rendezvous port on the master node.",
                             examples=[AZUREML_MASTER_PORT])


class BuildContext(Model):
    path: str = Field(..., min_length=1, description="Docker build context: a folder, relative to the spec.",
                      examples=["../docker"])
    dockerfile_path: str = Field("Dockerfile", min_length=1, description="The Dockerfile, relative to the context.",
                                 examples=["Dockerfile"])


class Environment(Model):
    image: Optional[str] = Field(None, min_length=1, description="Docker image the job runs in.",
                                 examples=["mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04"])
    conda_file: Optional[str] = Field(None, min_length=1, description="Conda environment file, relative to the spec.",
                                      examples=["../examples/mnist/environment.yml"])
    pip: Optional[list[str]] = Field(None, description="pip requirements installed into the image's own Python "
                                     "(Azure ML: a Docker build context FROM the image; Ray: setup commands).",
                                     examples=[["torch==2.4.1", "lightning==2.4.0"]])
    python: str = Field("3.11", pattern=r"^3\.\d+$", description="No longer used (a warning): pip installs into "
                        "the image's own Python, so the image decides the version.",
                        examples=["3.11"])
    azureml: Optional[str] = Field(
        None, min_length=1,
        description="A registered Azure ML environment: name@label or name:version.", examples=["my-env@latest"])
    build: Optional[BuildContext] = Field(
        None, description="An image Azure ML builds from your Docker build context (Azure ML only).",
        examples=[{"path": "../docker"}])


LiteralValue = Union[StrictStr, StrictInt, StrictFloat, StrictBool]


class Input(Model):
    path: Optional[str] = Field(None, min_length=1,
                                description="Data asset (azureml:name@latest), datastore or URL, or a local path.",
                                examples=["azureml:mnist@latest"])
    value: Optional[LiteralValue] = Field(
        None, description="A literal input (written `epochs: 5` for short): Azure ML keeps ${{inputs.x}} in the "
        "command, so `az ml job create --set inputs.x=...` changes it at submit time.", examples=[5])
    type: Literal["uri_folder", "uri_file", "mltable", "mlflow_model", "custom_model"] = Field(
        "uri_folder", description="Azure ML input type.", examples=["uri_folder"])
    mode: Literal["ro_mount", "download", "direct", "eval_mount", "eval_download"] = Field(
        "ro_mount", description="How Azure ML makes the data available (eval_*: an MLTable's data, read by the "
        "runtime).", examples=["download"])


class Output(Model):
    path: Optional[str] = Field(None, min_length=1, description="Datastore path; default: the job's own output.",
                                examples=["azureml://datastores/workspaceblobstore/paths/checkpoints/"])
    type: Literal["uri_folder", "uri_file", "mlflow_model", "custom_model"] = Field(
        "uri_folder", description="Azure ML output type.", examples=["uri_folder"])
    mode: Literal["rw_mount", "upload"] = Field("rw_mount", description="How Azure ML stores what the job writes.",
                                                examples=["upload"])
    name: Optional[str] = Field(None, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}$",
                                description="Register what the job writes as this Azure ML data asset.",
                                examples=["mnist-checkpoints"])
    version: Optional[str] = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,30}$",
                                   description="Version of the registered asset (needs name).", examples=["1"])


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


class AzureMLTarget(Model):
    compute: Optional[str] = Field(
        None, description="Compute cluster name. Omitted: serverless, with resources.sku as instance_type.",
        examples=["gpu-cluster"])
    experiment_name: Optional[str] = Field(None, description="Default: the spec's name.", examples=["mnist"])
    job_tier: Optional[Literal["spot", "basic", "standard", "premium"]] = Field(
        None, description="Default: spot when resources.spot, else the workspace default.", examples=["standard"])
    priority: Optional[Literal["low", "medium", "high"]] = Field(None, description="Queue priority.",
                                                                 examples=["medium"])
    timeout: Optional[Duration] = Field(None, description="Job time limit: 2d, 12h, 90m or seconds.",
                                        examples=["2d"])
    tags: Dict[str, str] = Field(default_factory=dict, description="Extra job tags.", examples=[{"team": "vision"}])
    identity: Optional[Identity] = Field(None, description="The identity the job uses to access data.",
                                         examples=[{"type": "user_identity"}])
    services: Dict[str, Service] = Field(default_factory=dict,
                                         description="Interactive services (TensorBoard, SSH, JupyterLab, VS Code).",
                                         examples=[{"tensorboard": {"type": "tensor_board", "log_dir": "outputs/tb"}}])
    python: str = Field("python", pattern="^" + SHELL_WORD + "+$",
                        description="The image's interpreter that starts the shim (python3 where only that exists).",
                        examples=["python3"])
    parameter_server_count: int = Field(0, ge=0, le=1024,
                                        description="TensorFlow parameter servers (framework: tensorflow).",
                                        examples=[1])


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
    python: str = Field("python3", min_length=1,
                        description="Interpreter on the nodes (no conda or venv is active in a task).",
                        examples=["/opt/conda/envs/torch/bin/python"])
    setup: Optional[str] = Field(None, min_length=1,
                                 description="Shell line run before training on every node, e.g. an activation.",
                                 examples=["source /opt/conda/bin/activate torch"])
    rdzv_port: int = Field(HPCPACK_MASTER_PORT, ge=1024, le=65535,
                           description="torchrun rendezvous port on the first node.", examples=[HPCPACK_MASTER_PORT])
    priority: Optional[Literal["Lowest", "BelowNormal", "Normal", "AboveNormal", "Highest"]] = Field(
        None, description="Job priority.", examples=["Normal"])
    runtime: Optional[Duration] = Field(None, description="Job run-time limit: 2d, 12h, 90m or seconds.",
                                        examples=["12h"])
    job_template: Optional[str] = Field(None, min_length=1, description="HPC Pack job template.",
                                        examples=["GPUJobs"])
    project: Optional[str] = Field(None, min_length=1, description="Project name, for accounting.",
                                   examples=["ddp"])


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
    python: str = Field("python", min_length=1, description="Interpreter on the nodes (or in the image).",
                        examples=["python3"])
    ray_version: str = Field("2.60.0", pattern=r"^\d+\.\d+\.\d+$", description="Ray installed on the nodes.",
                             examples=["2.60.0"])
    idle_timeout_minutes: int = Field(10, ge=0, description="Minutes before idle workers are removed.",
                                      examples=[10])


class Targets(Model):
    azureml: Optional[AzureMLTarget] = Field(None, description="Azure ML v2 command job settings.",
                                             examples=[{"compute": "gpu-cluster"}])
    hpcpack: Optional[HPCPackTarget] = Field(None, description="HPC Pack job settings.",
                                             examples=[{"shared_dir": "/app", "node_group": "LinuxNodes"}])
    ray: Optional[RayTarget] = Field(None, description="Ray cluster on Azure settings.",
                                     examples=[{"location": "eastus", "resource_group": "rg-training"}])


VarValue = Union[StrictStr, StrictInt, StrictFloat, StrictBool]


def _file_shapes(schema: dict) -> None:
    """What a spec *file* may hold, beyond the validated model: a spec that `extends` a base gets
    its required fields from the chain (the editor asks for them only in a spec that extends
    nothing), and an input may be a bare scalar (a literal input, see fields.literal_input)."""
    required = schema.pop("required", [])
    schema["if"] = {"required": ["extends"]}
    schema["else"] = {"required": required}
    inputs = schema["properties"]["inputs"]
    inputs["additionalProperties"] = {"anyOf": [inputs["additionalProperties"], {"type": ["string", "number", "boolean"]}]}


class Spec(Model):
    model_config = ConfigDict(json_schema_extra=_file_shapes)

    version: Annotated[Literal[1], BeforeValidator(exact_int)] = Field(
        ..., description="Spec format version.", examples=[1])
    extends: Optional[str] = Field(
        None, description="A base spec this one builds on (relative path). Maps merge, lists and scalars replace.",
        examples=["../base.yaml"])
    vars: Dict[str, VarValue] = Field(
        default_factory=dict, description="Template variables: {{ vars.x }}. --var x=v overrides.",
        examples=[{"epochs": 10}])
    name: str = Field(..., pattern=NAME_PATTERN, description="Job name: lower case, digits, - and _.",
                      examples=["mnist-lightning"])
    description: Optional[str] = Field(None, description="What the job is, for people.",
                                       examples=["Lightning MNIST on 2 nodes x 8 GPUs"])
    code: str = Field(..., min_length=1, description="Directory with the training code, relative to the spec.",
                      examples=["../examples/mnist"])
    command: str = Field(..., min_length=1, description="Shell command run in the code directory; a Jinja2 template.",
                         examples=["python train.py --num_nodes {{ nodes }} --devices {{ procs_per_node }}"])
    framework: Framework = Field("pytorch", description="Training framework.", examples=["lightning"])
    resources: Resources = Field(default_factory=Resources, description="Nodes, GPUs and VM size.",
                                 examples=[{"nodes": 2, "sku": "Standard_ND96isr_H100_v5"}])
    distribution: Distribution = Field(default_factory=Distribution, description="How processes are started.",
                                       examples=[{"launcher": "per-node"}])
    environment: Environment = Field(default_factory=Environment, description="The software the job runs in.",
                                     examples=[{"image": "pytorch/pytorch:latest", "pip": ["lightning"]}])
    env: Dict[str, EnvValue] = Field(default_factory=dict, description="Environment variables for every process.",
                                     examples=[{"NCCL_DEBUG": "WARN"}])
    inputs: Dict[str, Annotated[Input, BeforeValidator(literal_input)]] = Field(
        default_factory=dict, description="Data the job reads, or literal values: {{ inputs.x }}.",
        examples=[{"mnist": {"path": "azureml:mnist@latest"}, "epochs": 5}])
    outputs: Dict[str, Output] = Field(default_factory=dict, description="Data the job writes: {{ outputs.x }}.",
                                       examples=[{"checkpoints": {"mode": "rw_mount"}}])
    targets: Targets = Field(default_factory=Targets,
                             description="Per-target settings; a target listed here is compiled by default.",
                             examples=[{"azureml": {"compute": "gpu-cluster"}}])
