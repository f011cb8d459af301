"""targets.kubernetes, the spec's words for a Kubeflow job on Kubernetes (AKS): its settings
model, the hints for a bad value, the rules the model cannot state, and the variables only
Kubeflow sets in a pod (../shared/reference/kubernetes.md).

Imports nothing but trainspec.core and the runtime's names: validation loads it, and none of lower.py.
"""

from __future__ import annotations

import functools
from typing import List, Optional, Tuple

from trainspec.core import interpreter, volumes
from trainspec.core.diagnostics import Diagnostic, error, shown, warning
from trainspec.core.secret_refs import Reference

NAME = "kubernetes"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"  # DNS-1123 label: namespaces, claims, secrets, queues
_QUALIFIED = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
_LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
_RESOURCE = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$"
# A container image as the kubelet parses it (distribution/reference's grammar): [host[:port]/]path[:tag][@digest],
# the path's components lower case, the name at most 255 characters; anything else fails as InvalidImageName
_IMAGE_HOST = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*"
_IMAGE_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_NAME = rf"(?:(?:{_IMAGE_HOST}|\[[a-fA-F0-9:]+\])(?::[0-9]+)?/)?{_IMAGE_COMPONENT}(?:/{_IMAGE_COMPONENT})*"
_IMAGE = rf"(?P<name>{_IMAGE_NAME})(?::[\w][\w.-]{{0,127}})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{{32,}})?"
MAX_SECONDS = 2 ** 63 - 1  # activeDeadlineSeconds is an int64
# What the Trainer's torch plugin and the training-operator set in a pod that no other target's
# platform does, and the portable name to read instead.
PLATFORM_VARIABLES = {"PET_NNODES": "{{ nodes }}", "PET_NPROC_PER_NODE": "{{ procs_per_node }}",
                      "PET_NODE_RANK": "$NODE_RANK", "PET_MASTER_ADDR": "$MASTER_ADDR",
                      "PET_MASTER_PORT": "$MASTER_PORT", "PET*": None}
# The ClusterTrainingRuntimes Kubeflow Trainer installs (v2.3, ../shared/reference/kubernetes/trainer-v2.3.0/
# runtimes/ and the Trainer's manifests) and the launcher each one's mlPolicy starts: torch (torchrun,
# PET_* in every pod) or mpi (mpirun from a launcher pod over SSH). trainspec writes a torchrun job.
CLUSTER_RUNTIMES = {"torch-distributed": "torch", "deepspeed-distributed": "mpi", "mpi-distributed": "mpi"}
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
# The names the Trainer's webhook rejects in trainer.env (TorchRunReservedEnvNames)
RESERVED_ENV = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")


# --- settings: targets.kubernetes in a spec ----------------------------------------------

SETTINGS_DESCRIPTION = "Kubernetes (Kubeflow TrainJob or PyTorchJob) settings."
SETTINGS_EXAMPLE = {"namespace": "ml", "queue": "team-a"}

# The settings that change what a job costs (its priority or tier, its time limit, a machine it
# adds): a change to one opens the cost summary of the pull-request review (review/cost.py).
COST_SETTINGS = ("timeout",)

# The settings that change what a job runs or can reach (the namespace, the service account, the
# secrets the pods pull with, the nodes they may run on, the claims mounted): a change to one is
# said in the review's summary, never cut (review/cost.py).
ACCESS_SETTINGS = ("code", "image_pull_secrets", "namespace", "node_selector", "runtime", "service_account",
                   "tolerations", "volumes")


# --- secrets.<NAME>.kubernetes: a key of a Secret in the job's namespace ------------------------

_SECRET_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"  # a DNS-1123 subdomain
_SECRET_KEY = r"^[-._a-zA-Z0-9]+$"  # a Secret's data key


def _secret_field():
    from typing import Optional

    from pydantic import Field

    from trainspec.core.types import Model

    class KubernetesSecret(Model):
        secret: str = Field(..., pattern=_SECRET_NAME, max_length=253,
                            description="The Secret, in the namespace the job runs in.", examples=["hf"])
        key: str = Field(..., pattern=_SECRET_KEY, max_length=253, description="The key in the Secret's data.",
                         examples=["token"])

    return (Optional[KubernetesSecret], Field(
        None, description="A key of a Kubernetes Secret: the container's env gets it through valueFrom."
        "secretKeyRef, so the value never appears in job.yaml.", examples=[{"secret": "hf", "key": "token"}]))


SECRET_REFERENCE = Reference(NAME, _secret_field, lambda ref: f"Secret {ref.secret}, key {ref.key}",
                             "{secret: <Secret>, key: <key>}",
                             words={("secret",): "is not a Secret's name (lower case letters, digits, - and ., "
                                    "a DNS-1123 subdomain)",
                                    ("key",): "is not a key of a Secret (letters, digits, -, _ and .)"})

HINTS = {("api",): "trainjob (Kubeflow Trainer v2, the default) or pytorchjob (training-operator v1)",
         ("timeout",): "e.g. 2d, 12h, 1h30m or 3600",
         ("python",): interpreter.PYTHON_HINT,
         ("runtime",): "a ClusterTrainingRuntime's name (e.g. torch-distributed), or {name: NAME, kind: "
                       "TrainingRuntime} for one in the job's namespace",
         ("runtime", "kind"): " or ".join(RUNTIME_KINDS),
         ("code",): "leave it out (a ConfigMap), or {pvc: {claim: NAME, sub_path: DIR}} or {image: {path: /DIR}}",
         ("volumes", "*"): "{pvc: {claim: NAME, sub_path: DIR}}: the claim (and the folder in it) with the data"}
_LABEL_WORDS = "is not a Kubernetes name (lower-case letters, digits and -, at most 63 characters)"
PATTERN_WORDS = {("namespace",): _LABEL_WORDS, ("queue",): "is not a Kueue LocalQueue name (a label value)",
                 ("runtime", "name"): _LABEL_WORDS, ("service_account",): _LABEL_WORDS,
                 ("image_pull_secrets",): _LABEL_WORDS, ("rdma_resource",): "is not a resource name, e.g. rdma/ib",
                 ("code", "pvc", "claim"): _LABEL_WORDS, ("volumes", "*", "pvc", "claim"): _LABEL_WORDS,
                 ("volumes", "*", "pvc", "sub_path"): "is not a relative path inside the claim",
                 ("tolerations", "key"): "is not a taint key (a label key, e.g. dedicated or example.com/pool)",
                 ("tolerations", "value"): "is not a taint value (a label value)",
                 ("code", "pvc", "sub_path"): "is not a relative path inside the claim",
                 ("code", "image", "path"): "is not an absolute path in the image"}


@functools.lru_cache(maxsize=None)
def settings_model():
    """The pydantic model of this target's settings (built on demand, as every target's)."""
    from typing import Dict, List as ListOf, Literal, Optional

    from pydantic import BeforeValidator, Field, WithJsonSchema
    from typing_extensions import Annotated

    from trainspec.core.fields import named

    from trainspec.core.types import Duration, Model

    class Pvc(Model):
        claim: str = Field(..., pattern=DNS_LABEL, max_length=253, description="The PersistentVolumeClaim.",
                           examples=["code"])
        sub_path: Optional[str] = Field(None, pattern=r"^[^/\x00][^\x00]*$",
                                        description="A folder inside the claim (default: its root).",
                                        examples=["trainspec/mnist"])

    class Image(Model):
        path: str = Field(..., pattern=r"^/[^\x00]*$", description="Where the code is in the image.",
                          examples=["/workspace"])

    class Code(Model):
        pvc: Optional[Pvc] = Field(None, description="Code on a PersistentVolumeClaim (at a sub-path).",
                                   examples=[{"claim": "code", "sub_path": "team/mnist"}])
        image: Optional[Image] = Field(None, description="Code already in the image at a path.",
                                       examples=[{"path": "/workspace"}])

    class Volume(Model):
        pvc: Pvc = Field(..., description="The PersistentVolumeClaim (at a sub-path) that holds the data.",
                         examples=[{"claim": "datasets", "sub_path": "mnist"}])

    class Runtime(Model):
        name: str = Field(..., pattern=DNS_LABEL, max_length=253, description="The runtime's name.",
                          examples=["torch-distributed"])
        kind: Literal[RUNTIME_KINDS] = Field(
            "ClusterTrainingRuntime", description="ClusterTrainingRuntime (cluster-wide) or TrainingRuntime (in "
            "the job's namespace).", examples=["TrainingRuntime"])

    class Toleration(Model):
        key: Optional[str] = Field(None, pattern=_QUALIFIED, max_length=316, description="The taint's key.",
                                   examples=["dedicated"])
        operator: Literal["Equal", "Exists"] = Field("Equal", description="Equal: key and value match; Exists: "
                                                     "the key does.", examples=["Equal"])
        value: Optional[str] = Field(None, pattern=_LABEL_VALUE, max_length=63, description="The taint's value.",
                                     examples=["ml"])
        effect: Optional[Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]] = Field(
            None, description="The taint's effect (default: all).", examples=["NoSchedule"])

    class KubernetesTarget(Model):
        api: Literal["trainjob", "pytorchjob"] = Field(
            "trainjob", description="trainjob: a Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1); "
            "pytorchjob: a training-operator PyTorchJob (kubeflow.org/v1).", examples=["trainjob"])
        namespace: Optional[str] = Field(None, pattern=DNS_LABEL, max_length=63,
                                         description="The namespace (default: kubectl's).", examples=["ml"])
        queue: Optional[str] = Field(None, pattern=_LABEL_VALUE, min_length=1, max_length=63,
                                     description="A Kueue LocalQueue: the job is created suspended and Kueue "
                                     "admits it.", examples=["team-a"])
        runtime: Annotated[Runtime, BeforeValidator(named), WithJsonSchema({"anyOf": [
            {"type": "string", "pattern": DNS_LABEL, "maxLength": 253},
            {"type": "object", "additionalProperties": False, "required": ["name"], "properties": {
                "name": {"type": "string", "pattern": DNS_LABEL, "maxLength": 253, "description": "The runtime's name."},
                "kind": {"enum": list(RUNTIME_KINDS), "default": RUNTIME_KINDS[0], "description": "Cluster"
                         "TrainingRuntime (cluster-wide) or TrainingRuntime (in the job's namespace)."}}}]})] = Field(
            "torch-distributed", validate_default=True, description="The runtime a TrainJob runs on: a ClusterTrainingRuntime's name, or "
            "{name, kind} with kind TrainingRuntime for a runtime in the job's namespace. Its launcher must be "
            "torch (mlPolicy.torch): trainspec writes a torchrun job, and a known MPI runtime (deepspeed-"
            "distributed, mpi-distributed) is an error.", examples=["torch-distributed",
                                                                     {"name": "team-torch", "kind": "TrainingRuntime"}])
        service_account: Optional[str] = Field(None, pattern=DNS_LABEL, max_length=253,
                                               description="The pods' service account.", examples=["training"])
        image_pull_secrets: ListOf[str] = Field([], description="Secrets for pulling the image.",
                                                examples=[["acr-pull"]])
        node_selector: Dict[str, str] = Field({}, description="Extra node labels the pods need.",
                                              examples=[{"agentpool": "gpu"}])
        tolerations: ListOf[Toleration] = Field([], description="Extra taints the pods tolerate.",
                                                examples=[[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]])
        code: Optional[Code] = Field(
            None, description="How the code reaches the pods when not as a ConfigMap of the code folder (the "
            "default, at most 1 MiB): pvc (a PersistentVolumeClaim with a sub-path) or image (a path in it).",
            examples=[{"pvc": {"claim": "code", "sub_path": "team/mnist"}}])
        volumes: Dict[str, Volume] = Field(
            {}, description="Inputs and outputs on PersistentVolumeClaims, by their names: an input is mounted "
            "read-only at /trainspec/inputs/<name>, an output read-write at /trainspec/outputs/<name>, and "
            "{{ inputs.<name> }} / {{ outputs.<name> }} are those paths.",
            examples=[{"data": {"pvc": {"claim": "datasets", "sub_path": "mnist"}}, "ckpt": {"pvc": {"claim": "runs"}}}])
        rdma_resource: str = Field("rdma/ib", pattern=_RESOURCE, max_length=253,
                                   description="The extended resource for InfiniBand on sizes that have it "
                                   "(NVIDIA Network Operator).", examples=["rdma/shared_ib"])
        timeout: Optional[Duration] = Field(None, description="activeDeadlineSeconds: 2d, 12h, 90m or seconds. "
                                            "Overrides the spec's timeout on Kubernetes.",
                                            examples=["12h"])
        python: str = interpreter.python_field("python3", "in the image")

    return KubernetesTarget


def runtime_ref(settings) -> Tuple[str, str]:
    """targets.kubernetes.runtime as (name, kind): the plain string is a ClusterTrainingRuntime's name."""
    return settings.runtime.name, settings.runtime.kind


def _runtime_errors(settings) -> List[Diagnostic]:
    """A runtime whose launcher is not the torchrun trainspec writes, refused where it is named; a
    runtime named for a PyTorchJob, which has none, a warning."""
    name, kind = runtime_ref(settings)
    where = ("targets", NAME, "runtime")
    if "runtime" in settings.__pydantic_fields_set__ and settings.api != "trainjob":
        return [warning(where, "a PyTorchJob runs on no runtime: runtime is a TrainJob's (api: trainjob)",
                        "remove runtime, or use api: trainjob")]
    if kind == RUNTIME_KINDS[0] and CLUSTER_RUNTIMES.get(name) == "mpi":
        return [error(where, f"the ClusterTrainingRuntime {name} launches with mpirun (mlPolicy.mpi), but "
                      "trainspec writes a torchrun job (the torch plugin's PET_* variables in every pod): the job "
                      "would not start as the spec says", "use runtime: torch-distributed, or a runtime whose "
                      "mlPolicy is torch ({name: NAME, kind: TrainingRuntime} for your namespace's own)")]
    return []


def qualified_name_problem(key: str) -> Optional[str]:
    """Why ``key`` is no Kubernetes qualified name (a label or taint key, an extended resource):
    ``[prefix/]name``, the prefix a DNS-1123 subdomain of at most 253 characters, the name at most 63."""
    import re

    prefix, _, name = key.rpartition("/")
    if not re.fullmatch(_QUALIFIED, key):
        return "lower-case DNS prefix and /, then letters, digits, - _ . starting and ending with a letter or digit"
    if len(name) > 63:
        return f"the name after the prefix has {len(name)} characters, at most 63"
    if len(prefix) > 253:
        return f"the prefix has {len(prefix)} characters, at most 253"
    return None


def image_problem(image: str) -> Optional[str]:
    """Why ``image`` is not an image reference a kubelet pulls (None: it is one)."""
    import re

    match = re.fullmatch(_IMAGE, image)
    if match is None:
        return ("is not an image reference: [registry[:port]/]repository[:tag][@digest], the repository in lower "
                "case, no spaces")
    if len(match.group("name")) > 255:
        return f"is too long: the repository name has {len(match.group('name'))} characters, at most 255"
    return None


def settings_errors(spec) -> List[Diagnostic]:
    """What targets.kubernetes may not say, whatever is compiled (run by validation)."""
    import re

    settings = spec.targets.kubernetes
    out = interpreter.python_errors(NAME, settings)
    if settings.code is not None and (settings.code.pvc is None) == (settings.code.image is None):
        out.append(error(("targets", NAME, "code"), "give one of pvc or image",
                         "leave code out to ship the code folder as a ConfigMap"))
    claims = [(("targets", NAME, "volumes", name, "pvc", "sub_path"), volume.pvc)
              for name, volume in settings.volumes.items()]
    if settings.code is not None and settings.code.pvc is not None:
        claims.insert(0, (("targets", NAME, "code", "pvc", "sub_path"), settings.code.pvc))
    for where, pvc in claims:
        if pvc.sub_path and ".." in pvc.sub_path.split("/"):
            out.append(error(where, f"'{shown(pvc.sub_path)}' leaves the claim (..)",
                             "a folder inside the claim, e.g. trainspec/mnist"))
    out += volumes.volume_errors(spec, NAME)
    out += _runtime_errors(settings)
    for i, secret in enumerate(settings.image_pull_secrets):
        if not re.fullmatch(DNS_LABEL, secret) or len(secret) > 253:
            out.append(error(("targets", NAME, "image_pull_secrets", i), f"'{shown(secret)}' {_LABEL_WORDS}"))
        elif secret in settings.image_pull_secrets[:i]:  # a list keyed by name: the API server refuses a repeat
            out.append(error(("targets", NAME, "image_pull_secrets", i), f"'{secret}' is named twice",
                             "name each secret once"))
    for key, value in settings.node_selector.items():
        problem = qualified_name_problem(key)
        if problem:
            out.append(error(("targets", NAME, "node_selector", key), f"'{shown(key)}' is not a label key: {problem}",
                             "e.g. agentpool or kubernetes.azure.com/agentpool", on_key=True))
        elif not re.fullmatch(_LABEL_VALUE, value) or len(value) > 63:
            out.append(error(("targets", NAME, "node_selector", key), f"'{shown(value)}' is not a label value",
                             "letters, digits, - _ . (at most 63), starting and ending with a letter or digit"))
    for i, toleration in enumerate(settings.tolerations):
        where = ("targets", NAME, "tolerations", i)
        problem = toleration.key and qualified_name_problem(toleration.key)
        if problem:
            out.append(error(where + ("key",), f"'{shown(toleration.key)}' is not a taint key: {problem}",
                             "e.g. dedicated or example.com/pool"))
        if not toleration.key and toleration.operator != "Exists":
            out.append(error(where, "a toleration without a key must have operator: Exists (it tolerates every "
                             "taint)", "give the taint's key, or operator: Exists"))
        if toleration.operator == "Exists" and toleration.value:
            out.append(error(where + ("value",), "operator Exists tolerates any value: Kubernetes refuses one here",
                             "remove value, or use operator: Equal"))
    resource = settings.rdma_resource
    problem = qualified_name_problem(resource) if "/" in resource else "it names no domain (domain/name)"
    if not problem and (resource.startswith("requests.") or resource.split("/")[0].endswith("kubernetes.io")):
        problem = "requests.* and the kubernetes.io domain are Kubernetes' own"
    if not problem and resource in ("nvidia.com/gpu", "amd.com/gpu"):
        problem = "it is a GPU resource, which the job requests already"
    if problem:
        out.append(error(("targets", NAME, "rdma_resource"), f"'{shown(resource)}' is not an extended resource: {problem}",
                         "e.g. rdma/ib or rdma/shared_ib, as the NVIDIA Network Operator names it"))
    if settings.timeout is not None and settings.timeout > MAX_SECONDS:
        out.append(error(("targets", NAME, "timeout"), f"{settings.timeout} seconds is more than Kubernetes' "
                         f"activeDeadlineSeconds holds (an int64, at most {MAX_SECONDS})", HINTS[("timeout",)]))
    return out
