"""The training spec, format version 1, as pydantic v2 models.

These models decide the *shape* of a spec: field names, types, enums, ranges, formats.
Cross-field and catalog checks (SKU, Lightning trap, files on disk) live in validate.py.
Every model forbids unknown keys and is strict: ``nodes: "2"`` or ``nodes: 2.5`` is an
error, not a silent coercion (azure-ai-ml truncates 2.5 to 2).
"""

from __future__ import annotations

from typing import Dict, Literal, Optional, Union

from pydantic.fields import FieldInfo
from pydantic import BeforeValidator, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, create_model
from typing_extensions import Annotated

from trainspec.schema.vocabulary import default_target, settings, targets
from trainspec.runtime.shim import AZUREML_MASTER_PORT  # the contract with every job
from trainspec.core.fields import MEMORY_PATTERN, NAME_PATTERN, SHM_PATTERN, exact_int, literal_input
from trainspec.core.types import Duration, EnvValue, LiteralValue, Model

Framework = Literal["pytorch", "lightning", "deepspeed", "huggingface", "tensorflow"]
Launcher = Literal["per-process", "per-node", "mpi"]
Backend = Literal["nccl", "gloo", "mpi"]


class Resources(Model):
    nodes: int = Field(1, ge=1, le=1024, description="Number of nodes (VMs).", examples=[2])
    gpus_per_node: Optional[int] = Field(
        None, ge=0, le=16,
        description="GPUs used on each node. Default: all GPUs of the SKU.", examples=[4])
    procs_per_node: Optional[int] = Field(
        None, ge=1, le=256,
        description="Training processes per node. Default: gpus_per_node, or 1 without GPUs.", examples=[4])
    sku: Optional[str] = Field(
        None, min_length=1, description="Azure VM size, checked against the SKU catalog, and against the size "
        "your team catalog (trainspec-skus.yaml) gives the job's Azure ML compute, Slurm partition or HPC Pack "
        "node group: a contradiction is an error. Left out, such a mapped place's size is the job's. Where "
        "nothing links the size to a target's machines (a cluster the team catalog does not map), plan and "
        "diff say the sku is not enforced there.",
        examples=["Standard_ND96isr_H100_v5"])
    spot: bool = Field(False, description="Run on spot / low-priority capacity.", examples=[True])
    shm_size: Optional[str] = Field(
        None, pattern=SHM_PATTERN,
        description="Shared memory of the container: an integer and a unit b, k, m or g.", examples=["16g"])
    cpus_per_node: Optional[int] = Field(
        None, ge=1, le=1024,
        description="CPUs (vCPUs) the job needs on each node, at most the SKU's. Kubernetes: the training "
        "container's cpu request and limit; Slurm: --cpus-per-task, this divided by the tasks per node (it must "
        "divide evenly); HPC Pack: MinCoresPerNode (only nodes with at least this many cores); Ray: the CPUs "
        "of each node's placement-group bundle; Azure ML: each node is a whole VM of the cluster's size, which "
        "resources.sku is checked against. Default: what each platform gives (Slurm: the SKU's vCPUs).",
        examples=[80])
    memory_per_node: Optional[str] = Field(
        None, pattern=MEMORY_PATTERN,
        description="Memory the job needs on each node: a whole number and a unit, binary Mi, Gi, Ti (2^20, 2^30, "
        "2^40 bytes) or decimal M, G, T (10^6, 10^9, 10^12 bytes), as Kubernetes writes quantities; at most the "
        "SKU's memory (Azure's sizes list GiB). Kubernetes: the training container's memory request and limit, "
        "as written; Slurm: --mem in MiB-based units (900Gi is 900G, 512G is 488282M: rounded up to a whole MiB); "
        "HPC Pack: MinMemory in MB, rounded up the same way (only nodes with at least this much memory); Ray and "
        "Azure ML: each node is a whole VM of the size resources.sku names, checked against it.",
        examples=["900Gi"])


class Distribution(Model):
    launcher: Optional[Launcher] = Field(
        None,
        description="Who starts the training processes: the platform, one per process (per-process); "
        "one launcher per node that spawns the workers (per-node: torchrun or Lightning); or MPI (mpi). "
        "Default, the same on every target: per-process for a job of one process, per-node for several.",
        examples=["per-process"])
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
    image: Optional[str] = Field(None, min_length=1, description="Docker image the job runs in, on every platform "
                                 "that runs containers (written in the form each one reads: a target page says "
                                 "which, and any setting of a target that overrides it; `plan` shows what each "
                                 "target runs). An image built for the other GPU vendor than the size's (CUDA or "
                                 "nvcr.io on AMD, ROCm on NVIDIA) is a warning.",
                                 examples=["mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04"])
    conda_file: Optional[str] = Field(None, min_length=1, description="Conda environment file, relative to the spec.",
                                      examples=["../examples/mnist/environment.yml"])
    pip: Optional[list[str]] = Field(None, description="pip requirements, installed on every target before the "
                                     "command (Azure ML: a Docker build context FROM the image; Ray: setup commands; "
                                     "on the targets that run the nodes' or the image's own software: the shim, once "
                                     "per node, into a folder first on PYTHONPATH). One requirement per item (name, extras, versions, markers, or "
                                     "name @ URL); an option, a path or a bare URL is an error: an index goes in "
                                     "env: PIP_INDEX_URL.",
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


class Input(Model):
    path: Optional[str] = Field(None, min_length=1,
                                description="Data asset (azureml:name@latest), datastore or URL; local data as a path "
                                            "relative to the spec, inside the repository (uploaded); or an "
                                            "absolute path: storage where the job runs (not on Azure ML).",
                                examples=["azureml:mnist@latest"])
    value: Optional[LiteralValue] = Field(
        None, description="A literal input (written `epochs: 5` for short): Azure ML keeps ${{inputs.x}} in the "
        "command, so `az ml job create --set inputs.x=...` changes it at submit time.", examples=[5])
    type: Literal["uri_folder", "uri_file", "mltable", "mlflow_model", "custom_model"] = Field(
        "uri_folder", description="Azure ML input type.", examples=["uri_folder"])
    mode: Literal["ro_mount", "rw_mount", "download", "direct", "eval_mount", "eval_download"] = Field(
        "ro_mount", description="How Azure ML makes the data available (eval_*: an MLTable's data, read by the "
        "runtime). rw_mount: the job may write beside its data (Megatron's index caches), on every target: "
        "Azure ML mounts it read-write, Kubernetes' volume and the containers of Slurm and Ray are writable; "
        "every other input is mounted read-only wherever a target mounts data.", examples=["download"])


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


# targets: one optional settings mapping per registered target, each defined by its settings module
Targets = create_model(
    "Targets", __base__=Model,
    **{name: (Optional[settings(name).settings_model()],
              Field(None, description=settings(name).SETTINGS_DESCRIPTION, examples=[settings(name).SETTINGS_EXAMPLE]))
       for name in targets()})



def _secret_reference_fields():
    """secrets.<NAME>: one field per distinct key the targets read (their settings'
    SECRET_REFERENCE: ``file`` serves several), each saying which targets read it."""
    readers: Dict[str, list] = {}
    for name in targets():
        readers.setdefault(settings(name).SECRET_REFERENCE.key, []).append(name)
    fields = {}
    for key, names in readers.items():
        annotation, field = settings(names[0]).SECRET_REFERENCE.field()
        fields[key] = (annotation, FieldInfo.merge_field_infos(
            field, description=f"Read by {'; '.join(targets()[n] for n in names)}. {field.description}"))
    return fields


_SECRET_FIELDS = _secret_reference_fields()
SecretReference = create_model("SecretReference", __base__=Model, **_SECRET_FIELDS)
SecretReference.__doc__ = "Where each platform keeps one secret: a reference per target, never the value."

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
    timeout: Optional[Duration] = Field(
        None, description="The job's time limit, said once for every target: 90m, 24h, 2d or seconds. Each target "
        "enforces it in its platform's own words (a job time limit, a deadline, --time, a run time; where the "
        "platform has none, trainspec's driver stops every process and exits 124): the spec guide, 'The time "
        "limit'. A target's own time-limit setting overrides it on that target; plan shows each target's limit and "
        "where it came from.",
        examples=["24h"])
    resources: Resources = Field(default_factory=Resources, description="Nodes, GPUs and VM size.",
                                 examples=[{"nodes": 2, "sku": "Standard_ND96isr_H100_v5"}])
    distribution: Distribution = Field(default_factory=Distribution, description="How processes are started.",
                                       examples=[{"launcher": "per-node"}])
    environment: Environment = Field(default_factory=Environment, description="The software the job runs in.",
                                     examples=[{"image": "pytorch/pytorch:latest", "pip": ["lightning"]}])
    env: Dict[str, EnvValue] = Field(default_factory=dict, description="Environment variables for every process.",
                                     examples=[{"NCCL_DEBUG": "WARN"}])
    secrets: Dict[str, SecretReference] = Field(
        default_factory=dict,
        description="Environment variables whose values each platform keeps: NAME -> where (a Kubernetes Secret, "
        "a file on the nodes, an Azure Key Vault secret), never the value. Every target the spec compiles needs "
        "its reference; the value is set before the command starts and is never printed.",
        examples=[{"HF_TOKEN": {key: field.examples[0] for key, (_, field) in _SECRET_FIELDS.items()}}])
    inputs: Dict[str, Annotated[Input, BeforeValidator(literal_input)]] = Field(
        default_factory=dict, description="Data the job reads, or literal values: {{ inputs.x }}.",
        examples=[{"mnist": {"path": "azureml:mnist@latest"}, "epochs": 5}])
    outputs: Dict[str, Output] = Field(default_factory=dict, description="Data the job writes: {{ outputs.x }}.",
                                       examples=[{"checkpoints": {"mode": "rw_mount"}}])
    targets: Targets = Field(default_factory=Targets,
                             description="Per-target settings; a target listed here is compiled by default.",
                             examples=[{default_target(): settings(default_target()).SETTINGS_EXAMPLE}])


def base_json_schema() -> dict:
    """The JSON Schema of a base (a file other specs `extends`, e.g. bases/gpu.yaml): a part of a
    spec, so no field is required at any depth (a base may set one setting of a target, the
    spec the rest), while every field it does set keeps its type, and a key the spec does not
    have is still an error."""
    schema = Spec.model_json_schema()
    for key in ("if", "else"):
        schema.pop(key, None)
    schema["title"] = "Spec base"
    schema["description"] = ("A base that specs extend (extends: ../bases/x.yaml): any part of a spec. "
                             "Every field is optional; names and types are a spec's.")

    def optional(node):
        if isinstance(node, dict):
            if isinstance(node.get("required"), list):
                del node["required"]
            for value in node.values():
                optional(value)
        elif isinstance(node, list):
            for value in node:
                optional(value)

    optional(schema)
    return schema
