"""Decide whether a spec is correct, and resolve its defaults.

The only place that says what a correct spec is. It turns a loaded document into a
`ValidSpec` (the pydantic `Spec` plus the numbers every target lowers from) or a list of
diagnostics, every one with its spec path. Targets add what they cannot express through
their own ``cannot_express()``; they never re-check what is decided here.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from trainspec.core import files, memo, secrets
from trainspec.core.diagnostics import Diagnostic, SpecPath, error, shown, warning
from trainspec.core.digests import sha256
from trainspec.core.patterns import Lazy
from trainspec.core.records import Record
from trainspec.runtime import shim as contract
from trainspec.schema import skus, structure, templating
from trainspec.schema.structure import ValidationError  # pydantic-core's, without its package's start-up cost
from trainspec.schema.loader import Document, ReadProblem, path_text_problem, real_path, repository_root, resolved
from trainspec.core.fields import (ENV_NAME_PATTERN, IO_NAME_PATTERN, is_remote, memory_bytes, split_command,
                                   unwritable_char)

TENSORFLOW = "tensorflow"  # its launcher and backend: the platform starts one worker per node, TF_CONFIG

if TYPE_CHECKING:
    from trainspec.schema.model import Spec

# Set by the shim in every process: a spec that sets them would fight it.
RESERVED_ENV = frozenset({"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK",
                          "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK"})
RESERVED_INPUTS = frozenset({"trainspec_runtime", "trainspec_secret_refs"})
# What trainspec sets in a Lightning job's processes (compiler/base.lightning_defaults)
LIGHTNING_VARIABLES = ("PL_TRAINER_NUM_NODES", "PL_TRAINER_DEVICES")
# the fields of environment: that say where the software comes from (azureml: a registered environment)
ENVIRONMENT_SOURCES = ("image", "azureml", "conda_file", "pip")
_AZUREML_ASSET = Lazy(r"^azureml:(?!//)([^:@/]+)(?:(:[^:@/]+)|(@[^:@/]+))?$")


class Source(Record):
    """Where a spec came from, in the forms messages and outputs need."""

    __slots__ = ("file", "path", "display", "digest")

    def __init__(self, file: str, path: Path, display: str, digest: str) -> None:
        self.file = file  # as the user named it: for diagnostics
        self.path = path  # absolute: for resolving relative paths
        self.display = display  # relative to the repository root (or the file name): for generated headers/tags
        self.digest = digest  # content hash of the validated spec

    @property
    def dir(self) -> Path:
        return self.path.parent


class Placement(Record):
    """A target's setting that the team catalog (trainspec-skus.yaml) maps to a VM size: on that
    target, the job runs on ``size`` (``targets.<target>.<setting>: <value>``)."""

    __slots__ = ("target", "setting", "value", "size")

    def __init__(self, target: str, setting: str, value: str, size: str) -> None:
        self.target = target
        self.setting = setting  # e.g. "partition"
        self.value = value  # e.g. "gpu-h100"
        self.size = size  # the size's canonical name, e.g. "Standard_ND96isr_H100_v5"

    def __str__(self) -> str:
        return f"{self.setting} {self.value}"


class ValidSpec(Record):
    """A spec that passed validation, with every default resolved."""

    __slots__ = ("spec", "source", "gpus_per_node", "procs_per_node", "backend", "sku", "catalog", "placements")

    def __init__(self, spec: Spec, source: Source, gpus_per_node: int, procs_per_node: int, backend: str,
                 sku: Optional[skus.Sku], catalog: Optional[Path] = None,
                 placements: Tuple[Placement, ...] = ()) -> None:
        self.spec = spec
        self.source = source
        self.gpus_per_node = gpus_per_node
        self.procs_per_node = procs_per_node
        self.backend = backend
        self.sku = sku
        self.catalog = catalog  # the team's trainspec-skus.yaml the size was looked up in, if any
        # the targets' settings the team catalog maps to a size (each agrees with sku: validated)
        self.placements = placements

    def placement(self, target: str) -> Optional[Placement]:
        """The setting of ``target`` that the team catalog maps to this job's size, if any."""
        return next((p for p in self.placements if p.target == target), None)

    @property
    def sku_source(self) -> Optional[str]:
        """Where the size comes from when the spec names none: the team catalog's size of a
        target's compute, partition or node group (None when resources.sku says it)."""
        if self.spec.resources.sku is not None or self.sku is None or not self.placements:
            return None
        first = self.placements[0]
        return f"targets.{first.target}.{first.setting} {first.value}, in {skus.TEAM_FILE}"

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def nodes(self) -> int:
        return self.spec.resources.nodes

    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node

    @property
    def launcher(self) -> str:
        """Who starts the processes, decided here once and the same on every target:
        distribution.launcher as written; else per-process for a job of one process (the platform
        starts it, nothing wraps it), per-node for several (a launcher on each node starts its
        workers: the one way every target runs several processes on a node). TensorFlow has a
        launcher of its own everywhere: the platform starts one worker per node and sets TF_CONFIG."""
        if self.spec.framework == TENSORFLOW:
            return TENSORFLOW
        if self.spec.distribution.launcher is not None:
            return self.spec.distribution.launcher
        return "per-process" if self.world_size == 1 else "per-node"

    def resolve(self, relative: str) -> Path:
        """A path written in the spec, made absolute against the spec's directory."""
        return resolved(os.path.join(self.source.dir, relative))

    def template_context(self, refs: templating.Refs) -> Dict[str, Any]:
        return templating.context(
            name=self.name, nodes=self.nodes, gpus_per_node=self.gpus_per_node,
            procs_per_node=self.procs_per_node, world_size=self.world_size, backend=self.backend,
            inputs={n: refs("inputs", n) for n in self.spec.inputs},
            outputs={n: refs("outputs", n) for n in self.spec.outputs},
            variables=self.spec.vars)

    def render(self, path: SpecPath, text: str, refs: templating.Refs) -> str:
        """Render a templated spec string for one target (validated already: cannot fail)."""
        return templating.render(text, self.template_context(refs))


def neutral_refs(kind: str, name: str) -> str:
    return f"<{kind}.{name}>"


def validate(doc: Document) -> Tuple[Optional[ValidSpec], List[Diagnostic]]:
    """Structure (pydantic), then meaning. Returns the ValidSpec only when there is no error.

    Every problem of the file in one run: when the structure is wrong, the meaning is checked on
    what stands (``_what_stands``: the spec without its broken fields), and a check that reads a
    broken field is skipped rather than run on a default the spec did not write."""
    display = _display_path(doc.path)
    named = _path_problems(doc.file, display)  # whatever else is wrong: every problem in one run
    if not isinstance(doc.data, dict):
        return None, [*named, error((), "a spec is a YAML mapping (key: value lines)",
                                    "start from one of the files in specs/")]
    # whatever else is wrong: a credential is never compiled, and its message never holds it
    found = [error(path, message, secrets.HINT, on_key=on_key)
             for path, message, on_key in secrets.secrets_in(doc.data)]
    structural: List[Diagnostic] = []
    broken: Tuple[SpecPath, ...] = ()
    try:
        spec = structure.parse(doc.data)
    except ValidationError as exc:
        from trainspec.schema import explain  # the pydantic models, for hints: only when something is wrong

        errors = explain.merge_union_branches(exc.errors())
        structural = [explain.diagnostic(e) for e in errors]
        spec, broken = _what_stands(doc.data, errors)
        if spec is None:
            return None, [*named, *_with_secrets(structural, found)]

    def stands(*fields: SpecPath) -> bool:
        return not any(_overlap(b, f) for b in broken for f in fields)

    catalog, meaning = skus.catalog_for(doc.path.parent)
    # the size: resources.sku, or (without one) what the targets' places map to in the team catalog
    sized = stands(("resources", "sku"), ("resources", "gpus_per_node"),
                   *([("targets",)] if spec.resources.sku is None else []))
    counted = sized and stands(("resources", "procs_per_node"), ("framework",),
                               ("distribution", "launcher"), ("distribution", "backend"))
    sku, placements, gpus, procs, backend = None, (), 0, 1, "gloo"  # unless counted: no ValidSpec leaves
    if sized:
        sku = _check_sku(spec, catalog, meaning)
        sku, placements = _check_hardware(spec, catalog, sku, meaning)
    if counted:
        gpus, procs, backend = _resolve_counts(spec, sku, meaning)
    counts_stand = counted and not any(d.is_error for d in meaning)
    if sized:
        _check_cpus_and_memory(spec, sku, meaning)
        _check_infiniband_env(spec, sku, meaning)
        _check_image_vendor(spec, sku, meaning)
    _check_names(spec, meaning)
    if stands(("secrets",)):
        _check_secrets(spec, meaning)
    _check_environment(spec, doc, meaning)
    if stands(("code",)):
        _check_paths(spec, doc, meaning)
    _check_data(spec, meaning)
    _check_io_fields(spec, meaning)
    _check_target_settings(spec, meaning, skip={b[1] for b in broken if b[:1] == ("targets",) and len(b) > 1})
    source = Source(file=doc.file, path=doc.path, display=display, digest=digest(spec))
    valid = ValidSpec(spec=spec, source=source, gpus_per_node=gpus, procs_per_node=procs,
                      backend=backend, sku=sku, catalog=catalog.team_file, placements=placements)
    # templates are checked whatever else is wrong (every independent problem in one pass), unless
    # a name they may use is broken (a broken string itself is gone: its stand-in renders); the
    # Lightning check compares with the counts, so only the numbers that stand: resources.nodes
    # (num_nodes), and the process count (devices)
    if stands(("vars",), ("inputs",), ("outputs",)):
        lightning = tuple(key for key, holds in (("num_nodes", stands(("resources", "nodes")) and not any(
            d.is_error and d.path == ("resources", "nodes") for d in meaning)), ("devices", counts_stand)) if holds)
        _check_templates(valid, meaning, lightning=lightning)
    # a broken field is said once, by its structure error: nothing the meaning checks said at,
    # inside or above it (what they saw there was the default, not what the spec wrote)
    meaning = [d for d in meaning if not (d.path and any(_overlap(b, d.path) for b in broken))]
    diagnostics = _with_secrets([*named, *structural, *meaning], found)
    if any(d.is_error for d in diagnostics):
        return None, diagnostics
    return valid, diagnostics


# what a required field that is broken reads as while the rest is checked: its checks are skipped
_STAND_INS = {"version": 1, "name": "job", "code": ".", "command": "true"}
_REPAIRS = 4  # a removed field can reveal another error (a required key of the mapping above it)


def _overlap(a: SpecPath, b: SpecPath) -> bool:
    """One path is the other, or inside it."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def _what_stands(data: Dict[str, Any], errors: List[Dict[str, Any]]) -> Tuple[Any, Tuple[SpecPath, ...]]:
    """The spec without its broken fields (validated: a Record tree), and their paths. An unknown
    key is dropped (as if not written: nothing depends on it); a value of the wrong type or range
    is dropped, so its default stands in, and its path is broken; a list with a bad item goes
    whole; a required top-level field gets a stand-in. None when what is left is no spec."""
    import copy

    data = copy.deepcopy(data)
    broken: List[SpecPath] = []
    for _ in range(_REPAIRS):
        cut: List[SpecPath] = []
        for err in errors:
            loc = tuple(err["loc"])
            if any(loc[:len(c)] == c for c in cut):
                continue  # a second error inside what is already gone
            if err["type"] == "missing":
                if loc[:-1] == () and loc[-1] in _STAND_INS:
                    data[loc[-1]] = _STAND_INS[loc[-1]]
                    broken.append(loc)
                    continue
                loc = loc[:-1]  # a mapping without its required key: the mapping is broken
            path = _cut(data, loc)
            if path is None:
                return None, tuple(broken)
            cut.append(path)
            if err["type"] != "extra_forbidden" or path != loc:
                broken.append(path)
        try:
            return structure.parse(data), tuple(broken)
        except ValidationError as exc:
            errors = exc.errors()
    return None, tuple(broken)


def _cut(data: Dict[str, Any], loc: SpecPath) -> Optional[SpecPath]:
    """Remove the value at ``loc`` (or the list, or the deepest mapping key, that holds it) from
    ``data``; the path removed, None when it is the whole spec."""
    node: Any = data
    for depth, part in enumerate(loc):
        if not isinstance(node, dict) or part not in node:
            loc = loc[:depth]
            break
        if isinstance(node[part], list) and depth + 1 < len(loc):
            loc = loc[:depth + 1]  # an item of a list: the list goes (its indices stay its own)
            break
        node = node[part]
    if not loc:
        return None
    parent: Any = data
    for part in loc[:-1]:
        parent = parent[part]
    if len(loc) == 1 and loc[0] in _STAND_INS:
        parent[loc[0]] = _STAND_INS[loc[0]]
    else:
        del parent[loc[-1]]
    return loc


def _with_secrets(diagnostics: List[Diagnostic], found: List[Diagnostic]) -> List[Diagnostic]:
    """The credentials' errors instead of any other diagnostic at or below their paths (a
    message about a value may quote it, and the value is the problem)."""
    if not found:
        return diagnostics
    paths = [d.path for d in found]
    return [*found, *(d for d in diagnostics if not any(d.path[:len(p)] == p for p in paths))]


def digest(spec: Spec) -> str:
    # what the spec says, canonically: stable when trainspec adds fields with defaults
    canonical = json.dumps(structure.written(spec), sort_keys=True, separators=(",", ":"))
    return sha256(canonical.encode()).hexdigest()[:16]


# --- meaning --------------------------------------------------------------------------------

def _check_sku(spec: Spec, catalog: "skus.Catalog", out: List[Diagnostic]) -> Optional[skus.Sku]:
    """The size's facts: from the catalog (built-in, or the team's trainspec-skus.yaml); for a
    size spelt the Azure way that the catalog lacks (a size newer than it), from gpus_per_node
    and the name, with a warning. A near miss of a known size is an error with did-you-mean."""
    name = spec.resources.sku
    if name is None:
        return None
    sku = catalog.lookup(name)
    if sku is not None:
        if sku.retired:
            out.append(warning(("resources", "sku"), f"{sku.name} was retired on {sku.retired}: Azure no longer "
                               "provisions it", "pick a current size, e.g. Standard_ND96isr_H100_v5"))
        return sku
    near = skus.near_miss(name, catalog.names())
    if near or not skus.looks_like_azure(name):
        close = near or skus.closest(name)
        hint = f"did you mean {', '.join(close)}?" if close else "`trainspec skus` lists the catalog"
        out.append(error(("resources", "sku"), f"unknown Azure VM size '{name}'", hint))
        return None
    add = f"or add it to {skus.TEAM_FILE} in your repository (`trainspec skus --help`)"
    if spec.resources.gpus_per_node is None:
        close = skus.closest(name)
        known = f"; the closest it knows: {', '.join(close)}" if close else ""
        out.append(error(("resources", "sku"), f"{name} is not in trainspec's catalog, so how many GPUs it has "
                         f"is unknown{known}", f"set resources.gpus_per_node to say what it has, {add}"))
        return None
    sku = skus.inferred(name, spec.resources.gpus_per_node)
    network = "InfiniBand (the 'r' in its name)" if sku.infiniband else "no InfiniBand (no 'r' in its name)"
    typo = skus.one_edit(name, catalog.names())  # Standard_ND96asr_v5 for Standard_ND96asr_v4: new, or a typo
    hint = (f"did you mean {', '.join(typo)}? If not, to" if typo else "to") + f" have it checked, {add[3:]}"
    out.append(warning(("resources", "sku"), f"{name} is not in trainspec's catalog: trusting gpus_per_node: "
                       f"{sku.gpus}, and assuming {network}", hint))
    return sku


def _check_hardware(spec: Spec, catalog: "skus.Catalog", sku: Optional[skus.Sku],
                    out: List[Diagnostic]) -> Tuple[Optional[skus.Sku], Tuple[Placement, ...]]:
    """resources.sku against what each configured target chooses its hardware by (the
    ``hardware_settings`` of its settings.py): a compute, partition or node group that the team
    catalog maps to another size, or a GPU type of another model, is an error at resources.sku
    naming both. A spec with no sku runs on the size the catalog maps its places to: that size
    is checked like a sku (GPU count, InfiniBand), and the places must agree on it.
    Returns the size and the places the catalog maps."""
    from trainspec.schema.vocabulary import TARGETS
    from trainspec.schema.vocabulary import settings as vocabulary

    placements: List[Placement] = []
    gpu_types: List[Tuple[str, str, str]] = []
    for name in TARGETS:
        settings = getattr(spec.targets, name, None)
        if settings is None:
            continue  # a target the spec does not configure: its settings module is not loaded
        chooses = getattr(vocabulary(name), "hardware_settings", None)
        if chooses is None:
            continue
        for setting, kind, value in chooses(settings):
            size = catalog.place_size(kind, value) if kind in skus.PLACES else None
            if size is not None:
                placements.append(Placement(name, setting, value, size.name))
            elif kind == skus.GPU_TYPE:
                gpu_types.append((name, setting, value))
    team = skus.TEAM_FILE
    if sku is None and spec.resources.sku is None and placements:
        first = placements[0]
        sku = catalog.lookup(first.size)
        for other in placements[1:]:
            if other.size != first.size:
                out.append(error(("targets", other.target, other.setting),
                                 f"{other} runs on {other.size} ({team}), but targets.{first.target}.{first.setting} "
                                 f"{first.value} runs on {first.size}: one spec is one VM size",
                                 "set resources.sku to the size the job needs, and pick places that have it"))
    elif sku is not None:
        for place in placements:
            if place.size != sku.name:
                out.append(error(("resources", "sku"),
                                 f"sku {sku.name} contradicts targets.{place.target}.{place.setting} {place.value}, "
                                 f"which {team} maps to {place.size}",
                                 f"set resources.sku: {place.size}, or a {place.setting.replace('_', ' ')} of "
                                 f"{sku.name} machines; or fix {team} if it maps {place.value} wrongly"))
    for name, setting, value in gpu_types:
        _check_gpu_type(("targets", name, setting), value, sku, out)
    return sku, tuple(placements)


def _check_gpu_type(path: SpecPath, value: str, sku: Optional[skus.Sku], out: List[Diagnostic]) -> None:
    """A GPU type a target asks its scheduler for (Slurm's GRES type) against the size's GPU."""
    if sku is None:
        return
    if not sku.gpus:
        out.append(error(path, f"a GPU type, but {sku.name} has no GPU", "remove it, or use a GPU size"))
        return
    if sku.gpu in (None, "unknown"):  # a size newer than the catalog, its GPU not in its name
        return
    named = skus.gpu_model_in(value)
    model = sku.gpu.split()[0]
    if named is None:
        out.append(warning(path, f"trainspec cannot tell which GPU '{value}' is; resources.sku's is {sku.gpu}",
                           f"the cluster's GRES type names are in `scontrol show node` (Gres=gpu:<type>:N); "
                           f"one that names the model ({model.lower()}) is checked against the sku"))
    elif named.lower() != model.lower():
        out.append(error(("resources", "sku"),
                         f"sku {sku.name} ({sku.gpu}) contradicts {path[-1]} {value}, which asks for {named} GPUs "
                         f"(targets.{path[1]}.{path[-1]})",
                         f"set resources.sku to a {named} size, or {path[-1]} to the cluster's type for {model}"))


def _resolve_counts(spec: Spec, sku: Optional[skus.Sku], out: List[Diagnostic]) -> Tuple[int, int, str]:
    r = spec.resources
    gpus = r.gpus_per_node
    if sku is not None:
        if gpus is None:
            gpus = sku.gpus
        elif gpus > sku.gpus:
            out.append(error(("resources", "gpus_per_node"),
                             f"{gpus} GPUs per node, but {sku.name} has {sku.gpus}"
                             + (f" x {sku.gpu}" if sku.gpu else ""),
                             f"use at most {sku.gpus}, or a larger SKU"))
        elif gpus < sku.gpus:
            out.append(warning(("resources", "gpus_per_node"),
                               f"{gpus} of the {sku.gpus} GPUs of {sku.name} are used; {sku.gpus - gpus} stay idle",
                               f"set gpus_per_node: {sku.gpus} or pick a smaller SKU"))
    elif gpus is None:
        gpus = 0
        if spec.resources.sku is None:
            # a cluster fixes the VM size, so `compute: gpu-cluster` alone is the usual way to write
            # a job -- and without a count it would train on one CPU process per node
            out.append(error(("resources",), "how many GPUs a node has cannot be known: neither sku nor "
                             "gpus_per_node is set", "set resources.sku (checked against the catalog) or "
                             "resources.gpus_per_node (gpus_per_node: 0 runs on CPU on purpose)"))

    procs = r.procs_per_node
    if procs is None:
        procs = gpus if gpus > 0 else 1
    elif gpus > 0 and procs > gpus:
        out.append(error(("resources", "procs_per_node"),
                         f"{procs} processes per node share {gpus} GPUs: NCCL fails with 'Duplicate GPU detected'",
                         f"use procs_per_node <= {gpus}"))
    if spec.framework == "tensorflow":
        if r.procs_per_node not in (None, 1):
            out.append(error(("resources", "procs_per_node"),
                             "TensorFlow runs one worker per node (MultiWorkerMirroredStrategy uses all its GPUs)",
                             "remove procs_per_node"))
        if spec.distribution.launcher is not None:
            out.append(error(("distribution", "launcher"),
                             "does not apply to tensorflow: the platform starts one worker per node",
                             "remove distribution.launcher"))
        if spec.distribution.backend is not None:
            out.append(error(("distribution", "backend"),
                             "does not apply to tensorflow: its collectives choose NCCL or ring themselves",
                             "remove distribution.backend"))
        procs = 1

    # TensorFlow is told one way everywhere (tags, TRAINSPEC_*, plan): launcher and backend "tensorflow"
    backend = TENSORFLOW if spec.framework == TENSORFLOW else spec.distribution.backend or ("nccl" if gpus > 0 else "gloo")
    if backend == "nccl" and gpus == 0 and (sku is not None or r.gpus_per_node is not None):
        out.append(error(("distribution", "backend"), "nccl needs GPUs, but the nodes have none",
                         "use backend: gloo, or a GPU SKU"))
    if (sku is not None and backend in ("nccl", TENSORFLOW) and sku.gpus and r.nodes > 1 and not sku.infiniband):
        who = "TensorFlow's collectives fall" if backend == TENSORFLOW else "NCCL falls"
        out.append(warning(("resources", "sku"),
                           f"{sku.name} has no InfiniBand: {who} back to TCP sockets between {r.nodes} nodes",
                           "multi-node training wants an RDMA size (an 'r' in the name, e.g. Standard_ND96isr_H100_v5)"))
    return gpus, procs, backend


def _check_cpus_and_memory(spec: Spec, sku: Optional[skus.Sku], out: List[Diagnostic]) -> None:
    """cpus_per_node and memory_per_node fit the size: at most its vCPUs, at most its memory (the
    catalog's memory_gb is Azure's GiB). A size described from its name only has no memory figure."""
    r = spec.resources
    if sku is None:
        return
    unknown = f"set it in {skus.TEAM_FILE} (`trainspec skus --help`) to have the request checked"
    if r.cpus_per_node is not None and not sku.vcpus:
        out.append(warning(("resources", "cpus_per_node"), f"how many vCPUs {sku.name} has is unknown: "
                           f"{r.cpus_per_node} per node is not checked against it", f"vcpus: {unknown}"))
    elif r.cpus_per_node is not None and r.cpus_per_node > sku.vcpus:
        out.append(error(("resources", "cpus_per_node"), f"{r.cpus_per_node} CPUs per node, but {sku.name} has "
                         f"{sku.vcpus} vCPUs", f"ask for at most {sku.vcpus}, or pick a larger size"))
    if r.memory_per_node is not None and not sku.memory_gb:
        out.append(warning(("resources", "memory_per_node"), f"how much memory {sku.name} has is unknown: "
                           f"{r.memory_per_node} per node is not checked against it", f"memory_gb: {unknown}"))
    elif r.memory_per_node is not None:
        have = int(sku.memory_gb * (1 << 30))
        if memory_bytes(r.memory_per_node) > have:
            gib = memory_bytes(r.memory_per_node) / (1 << 30)
            out.append(error(("resources", "memory_per_node"),
                             f"{r.memory_per_node} ({gib:.4g} GiB) per node, but {sku.name} has {sku.memory_gb:g} GiB",
                             f"ask for at most {sku.memory_gb:g}Gi, or pick a larger size"))


def _check_infiniband_env(spec: Spec, sku: Optional[skus.Sku], out: List[Diagnostic]) -> None:
    """NCCL_IB_DISABLE set (to anything but 0) in a multi-node job on an InfiniBand size: NCCL then
    talks TCP over the Ethernet of a VM bought for its InfiniBand (lightning.md: never on an RDMA size)."""
    value = spec.env.get("NCCL_IB_DISABLE")
    if value is None or value.strip() in ("", "0") or sku is None or not sku.infiniband or spec.resources.nodes < 2:
        return
    out.append(warning(("env", "NCCL_IB_DISABLE"), f"NCCL_IB_DISABLE={value} makes NCCL talk TCP sockets between the "
                       f"{spec.resources.nodes} nodes, and {sku.name} has InfiniBand",
                       "remove it: every target but Ray gives a multi-node job on this size its InfiniBand"))


def _check_names(spec: Spec, out: List[Diagnostic]) -> None:
    for key in spec.env:
        path = ("env", key)
        if not re.fullmatch(ENV_NAME_PATTERN, key):
            out.append(error(path, f"'{key}' is not a valid environment variable name",
                             "letters, digits and _, not starting with a digit", on_key=True))
        elif key in RESERVED_ENV or key.startswith(contract.ENV_PREFIX):
            out.append(error(path, f"{key} is set by the trainspec shim in every process",
                             "remove it; use distribution.master_port for the port", on_key=True))
        elif key == "_":
            out.append(error(path, "_ is the shell's own: bash sets $_ after every command, so no job would "
                             "read the value", "give the variable a name", on_key=True))
    for kind in ("inputs", "outputs"):
        for key in getattr(spec, kind):
            if not re.fullmatch(IO_NAME_PATTERN, key):
                out.append(error((kind, key), f"'{key}' is not a valid {kind[:-1]} name",
                                 "letters, digits and _, not starting with a digit", on_key=True))
            elif key in RESERVED_INPUTS:
                out.append(error((kind, key), f"'{key}' is reserved for the trainspec runtime", on_key=True))
    clash = sorted(set(spec.inputs) & set(spec.outputs))
    for key in clash:
        out.append(error(("outputs", key), f"'{key}' is both an input and an output", on_key=True))


def _check_secrets(spec: Spec, out: List[Diagnostic]) -> None:
    """secrets: each name an environment variable nobody else sets, each reference well formed,
    and a reference for every target the spec lists (``secret_reference_errors``)."""
    from trainspec.schema.vocabulary import TARGETS

    lightning = set(LIGHTNING_VARIABLES)
    for key, reference in spec.secrets.items():
        path = ("secrets", key)
        if not re.fullmatch(ENV_NAME_PATTERN, key) or key == "_":
            out.append(error(path, f"'{key}' is not a valid environment variable name",
                             "letters, digits and _, not starting with a digit", on_key=True))
        elif key in RESERVED_ENV or key.startswith(contract.ENV_PREFIX) or key in lightning:
            out.append(error(path, f"{key} is set by trainspec in every process (the shim's contract): a secret "
                             "of that name would never reach the command",
                             "name it as your code reads the secret, e.g. HF_TOKEN", on_key=True))
        elif key in spec.env:
            out.append(error(path, f"{key} is also in env: one variable, two values",
                             f"remove env.{key}: the secret sets it", on_key=True))
        if not structure.written(reference):
            out.append(error(path, "a secret needs at least one reference: where a platform keeps it",
                             f"e.g. {key}: {{file: /shared/secrets/{key.lower()}}}"))
        for name in TARGETS:
            kind = secret_reference(name)
            if kind.errors is not None and getattr(reference, kind.key) is not None:
                out.extend(kind.errors((*path, kind.key), getattr(reference, kind.key)))
    listed = [name for name in TARGETS if getattr(spec.targets, name, None) is not None]
    out.extend(secret_reference_errors(spec, listed))


def secret_reference(target: str):
    """The reference ``target`` reads a secret from (its settings' SECRET_REFERENCE)."""
    from trainspec.schema.vocabulary import settings

    return settings(target).SECRET_REFERENCE


def secret_reference_errors(spec: Spec, targets: List[str]) -> List[Diagnostic]:
    """An error at each secret that has no reference for one of ``targets`` (those the spec
    lists, at validation; those -t asks for, at build), naming the target and the key to add."""
    from trainspec.schema.vocabulary import TARGETS

    out: List[Diagnostic] = []
    for key, reference in spec.secrets.items():
        for name in targets:
            kind = secret_reference(name)
            if getattr(reference, kind.key) is not None:
                continue
            readers = {k: [TARGETS[n] for n in TARGETS if secret_reference(n).key == k]
                       for k in structure.written(reference)}
            has = "; ".join(f"{k}: for {', '.join(r)}" for k, r in readers.items())
            why = f" (it has {has})" if has else ""
            out.append(error(("secrets", key), f"{key} has no reference for {TARGETS[name]}, which this spec "
                             f"compiles to{why}", f"add secrets.{key}.{kind.key}: {kind.example}",
                             on_key=True))
    return out


def _check_environment(spec: Spec, doc: Document, out: List[Diagnostic]) -> None:
    e = spec.environment
    if e.image and e.azureml:
        out.append(error(("environment", "azureml"), "set either image or azureml, not both"))
    if e.build is not None:
        for other in ENVIRONMENT_SOURCES:
            if getattr(e, other):
                out.append(error(("environment", other), "does not go with environment.build: the build context's "
                                 "Dockerfile makes the whole environment", f"remove environment.{other}"))
        context = _usable_path(("environment", "build", "path"), e.build.path, out)
        dockerfile = _usable_path(("environment", "build", "dockerfile_path"), e.build.dockerfile_path, out)
        if context is None or dockerfile is None:
            pass
        elif _kind(doc.path.parent / context) != "folder":
            out.append(error(("environment", "build", "path"), f"'{e.build.path}' is not a folder (relative to the spec)"))
        elif _kind(doc.path.parent / context / dockerfile) != "file":
            out.append(error(("environment", "build", "dockerfile_path"),
                             f"no {e.build.dockerfile_path} in {e.build.path}"))
        else:
            # the build context is uploaded whole: inside the project, without a link
            base, project = doc.path.parent, repository_root(doc.path.parent)
            if _inside_project(("environment", "build", "path"), context, base, project, out):
                if _inside_project(("environment", "build", "dockerfile_path"), os.path.join(context, dockerfile),
                                   base, project, out):
                    _check_no_links(("environment", "build", "path"), context, base / context, out)
    if e.azureml and (e.conda_file or e.pip):
        which = "conda_file" if e.conda_file else "pip"
        out.append(error(("environment", which), "only applies to an image; a registered environment is complete"))
    if e.conda_file and e.pip:
        out.append(error(("environment", "pip"), "set either conda_file or pip, not both",
                         "put the pip packages in the conda file's pip: section"))
    for i, requirement in enumerate(e.pip or ()):
        problem = pip_requirement_problem(requirement)
        if problem:
            out.append(error(("environment", "pip", i), problem,
                             "one requirement per item: a name with extras, versions or markers "
                             "(transformers[torch]==4.44.0), or name @ URL; an index or mirror goes in "
                             "env: PIP_INDEX_URL / PIP_EXTRA_INDEX_URL / PIP_FIND_LINKS, which pip reads"))
    if e.azureml:
        value = e.azureml
        if not value.startswith("azureml://"):
            bare = value[len("azureml:"):] if value.startswith("azureml:") else value
            name = bare.split(':')[0].split('@')[0]
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
                # a placeholder (`< your environment name >`) or a typo: never suggest writing it again
                out.append(error(("environment", "azureml"), f"'{value}' is not an environment name",
                                 "write the name of a registered environment with a version or label, e.g. "
                                 "my-env@latest or azureml:my-env:1"))
            elif not re.fullmatch(r"^[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+|@[A-Za-z0-9_.-]+)$", bare):
                out.append(error(("environment", "azureml"),
                                 f"'{value}' needs a version or a label: Azure ML rejects it only at submit",
                                 f"write {name}@latest or {name}:1"))


def _check_image_vendor(spec: Spec, sku: Optional[skus.Sku], out: List[Diagnostic]) -> None:
    """A CUDA image on an AMD size, or a ROCm image on an NVIDIA one: it runs, without a GPU."""
    mismatch = spec.environment.image and skus.vendor_mismatch(spec.environment.image, sku)
    if mismatch:
        out.append(warning(("environment", "image"), *mismatch))


def _check_paths(spec: Spec, doc: Document, out: List[Diagnostic]) -> None:
    """Every path the spec names stays inside the repository the spec is in (a pull request's
    boundary: nothing trainspec or the platform reads comes from elsewhere on the runner), and a
    folder the job ships holds no link, in a repository or not."""
    base = doc.path.parent
    project = repository_root(base)
    if _usable_path(("code",), spec.code, out) is not None:
        code = base / spec.code
        kind = _kind(code)
        if kind != "folder":
            what = {"missing": "does not exist", "loop": "is a symbolic link loop"}.get(kind, "is not a directory")
            from trainspec.schema.compose import named  # `specs/../nope` shown as `nope`, as every diagnostic path

            out.append(error(("code",), f"'{spec.code}' {what} (resolved against the spec's directory: "
                                        f"{named(str(code))})",
                             "code is a directory relative to the spec file"))
        elif _check_code_scope(spec.code, code, base, out) and \
                _inside_project(("code",), spec.code, base, project, out):
            _check_no_links(("code",), spec.code, code, out)
    conda = spec.environment.conda_file
    if conda is not None and _usable_path(("environment", "conda_file"), conda, out) is not None:
        kind = _kind(base / conda)
        if kind in ("missing", "loop"):
            out.append(error(("environment", "conda_file"), f"'{conda}' does not exist (relative to the spec)"
                             if kind == "missing" else f"'{conda}' is a symbolic link loop"))
        elif kind != "file":
            out.append(error(("environment", "conda_file"), f"'{conda}' is {'a folder' if kind == 'folder' else kind}, "
                             "not a regular file",
                             "a conda environment file (environment.yml)"))
        else:
            _inside_project(("environment", "conda_file"), conda, base, project, out)
    for name, item in spec.inputs.items():
        if item.path is None or is_remote(item.path):
            continue
        if item.path.startswith("file:"):  # azure-ai-ml's form of a file of the machine that submits
            out.append(error(("inputs", name, "path"), f"'{shown(item.path)}' is a file: URL, a file of the machine "
                             "that compiles or submits the job: no target reads data from there", _LOCAL_DATA_HINT))
            continue
        if _usable_path(("inputs", name, "path"), item.path, out) is None:
            continue
        # an absolute path names storage where the job runs (Slurm's, HPC Pack's or Ray's nodes, a
        # pod; Azure ML has none and refuses it: targets/azureml/lower.py): trainspec never reads,
        # stats or resolves it, so nothing it says depends on the machine that compiles. A relative
        # one is local data the platform uploads, so it stays inside the project
        if item.path.startswith("/"):
            continue
        kind = _kind(base / item.path)
        if kind in ("missing", "loop"):
            out.append(error(("inputs", name, "path"), f"local path '{item.path}' does not exist (relative to the spec)",
                             "use azureml:<asset>@latest, azureml://datastores/..., a URL, or an existing path"))
        elif not _inside_project(("inputs", name, "path"), item.path, base, project, out):
            pass
        elif kind == "folder":  # local data the platform uploads: no link in it
            _check_no_links(("inputs", name, "path"), item.path, base / item.path, out)
        elif kind != "file":  # the upload would read it: a FIFO blocks, a device never ends
            out.append(error(("inputs", name, "path"), f"'{shown(item.path)}' is {kind}, not a regular file or a "
                             "folder: local data is uploaded, and trainspec ships regular files only",
                             "replace it with a regular file, or name the data where the job runs"))


_LOCAL_DATA_HINT = ("local data is a path relative to the spec, inside the repository (../data); data where the "
                    "job runs is an absolute path (/shared/data), a target's volumes, or on Azure ML an azureml: "
                    "asset, an azureml:// datastore or a URL")


def _inside_project(path: SpecPath, text: str, base: Path, project: Optional[Path], out: List[Diagnostic]) -> bool:
    """True when ``text`` (relative to ``base``), every link in it followed, is inside the
    repository ``project`` (None: the spec is in no repository, nothing to hold it to); else an
    error at ``path`` that says where it leads."""
    if project is None:
        return True
    where = f"the repository {project}"
    hint = "a path relative to the spec file, inside the repository; copy what it names into the repository"
    if os.path.isabs(text):
        out.append(error(path, f"'{shown(text)}' is an absolute path: trainspec reads and ships only files inside "
                         f"{where}", hint))
        return False
    try:
        real = real_path(base / text)
    except ReadProblem:
        return True  # a loop: the kind checks say so
    if files.in_repository(real, project):
        return True
    lexical = Path(os.path.normpath(base / text))
    through = " through a symbolic link" if files.in_repository(lexical, project) else ""
    outside = f"inside {project / '.git'}" if files.inside(real, project) else f"outside {where}"
    out.append(error(path, f"'{shown(text)}' leads{through} to {real}, {outside}: trainspec never reads "
                     "what a spec names there", hint))
    return False


_MAX_LINKS_SHOWN = 20
_TOO_BIG_HINT = {"code": "point code at the folder of your training code",
                 "inputs": "keep large data where the platform reads it: an azureml: data asset, a datastore "
                           "or https URL, or the target's volumes (targets.<target>.volumes)",
                 "environment": "a build context holds only what the image's Dockerfile copies"}


def _shipped_listing(folder: str) -> "files.Listing":
    return files.list_folder(Path(folder), limit=files.SHIPPED_LIMIT)


def _check_no_links(path: SpecPath, text: str, folder: Path, out: List[Diagnostic]) -> None:
    """A folder the job uploads (the code, a build context, local data) holds regular files and
    folders only: a link is never followed (it could lead to /proc/self/environ or .git/config,
    and the platform's upload would follow it), an error names each one."""
    import posixpath

    listing = memo.answer(_shipped_listing, os.fspath(folder))  # read, never changed: one per folder
    if listing.more:
        out.append(error(path, f"'{shown(text)}' holds more than {files.SHIPPED_LIMIT:,} files and folders: the job "
                               "would ship all of them, and trainspec checks every entry of a folder it ships",
                         _TOO_BIG_HINT[path[0]]))
        return
    link = ("never follows a link in a folder the job ships, and the platform's upload would",
            "replace the link with a copy of the file it points to, or delete it")
    special = ("ships regular files only: reading this one could block or read a device", "delete it")
    odd = [(name, f"is a symbolic link (to {shown(target)})", link) for name, target in listing.links]
    odd += [(name, f"is {what}, not a regular file", special) for name, what in listing.others]
    for name, what, (why, hint) in sorted(odd)[:_MAX_LINKS_SHOWN]:
        shown_name = posixpath.normpath(posixpath.join(text, name))
        out.append(error(path, f"{shown(shown_name)} {what}: trainspec {why}", hint))
    if len(odd) > _MAX_LINKS_SHOWN:
        out.append(error(path, f"and {len(odd) - _MAX_LINKS_SHOWN} more links or special files in '{shown(text)}'"))


def _usable_path(path: SpecPath, text: str, out: List[Diagnostic]) -> Optional[str]:
    """``text`` if it can name a file at all; else an error at ``path`` (NUL, a part over 255
    bytes, a path over 4095) and None."""
    problem = path_text_problem(text)
    if problem is None:
        return text
    out.append(error(path, f"'{shown(text)}': the path {problem}", "a path relative to the spec file"))
    return None


def _kind(path: Path) -> str:
    """What is at ``path`` (links followed): folder, file, missing, loop, or what else it is;
    asked once per path in a command (core/memo.py)."""
    return memo.answer(_kind_of, os.fspath(path))


def _kind_of(path: str) -> str:
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        import errno

        return "loop" if exc.errno == errno.ELOOP else "missing"
    except ValueError:
        return "missing"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISREG(mode):
        return "file"
    return "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"


def _check_code_scope(text: str, code: Path, spec_dir: Path, out: List[Diagnostic]) -> bool:
    """The code folder is uploaded or staged whole: never the file-system root, never a folder
    above the repository the spec is in (its root is the nearest folder with .git above the spec).
    Outside a repository there is no project boundary to hold it to: only the root is refused."""
    try:
        real = real_path(code)
    except ReadProblem:
        return False  # _kind said folder; a race at worst
    if real == Path(real.anchor):
        out.append(error(("code",), f"'{text}' is the file-system root ({real}): the job would upload the "
                         "whole machine", "code is the folder of your training code, relative to the spec file"))
        return False
    root = repository_root(spec_dir)
    if root is not None and real != root and files.inside(root, real):  # real is above root
        out.append(error(("code",), f"'{text}' is {real}, above the repository root {root}: the job would "
                         "upload more than the repository", "point code at a folder inside the repository"))
        return False
    return True


def _check_data(spec: Spec, out: List[Diagnostic]) -> None:
    for name, item in spec.inputs.items():
        if item.path is not None and item.path.startswith("azureml:") and not item.path.startswith("azureml://"):
            m = _AZUREML_ASSET.fullmatch(item.path)
            if not m or not (m.group(2) or m.group(3)):
                asset = item.path[len("azureml:"):].split(":")[0].split("@")[0]
                out.append(error(("inputs", name, "path"), f"data asset '{item.path}' needs a version or a label",
                                 f"write azureml:{asset}@latest or azureml:{asset}:1"))


def _check_io_fields(spec: Spec, out: List[Diagnostic]) -> None:
    """A literal input is a value and nothing else; a registered output has a name."""
    for name, item in spec.inputs.items():
        written = structure.written(item)
        if item.path is None and item.value is None:
            out.append(error(("inputs", name), "an input needs a path (data) or a value (a literal)",
                             f"write `{name}: {{path: azureml:<asset>@latest}}`, or `{name}: 5` for a literal"))
        elif item.path is not None and item.value is not None:
            out.append(error(("inputs", name, "value"), "an input is either data (path) or a literal (value), not both"))
        elif item.value is not None:
            for key in ("type", "mode"):
                if key in written:
                    out.append(error(("inputs", name, key), f"a literal input has no {key}",
                                     "remove it, or give a path for data"))
            if isinstance(item.value, str) and is_remote(item.value):
                out.append(warning(("inputs", name), f"'{item.value}' is passed as a literal string, not as data",
                                   f"for data write `{name}: {{path: {item.value}}}`"))
    for name, output in spec.outputs.items():
        if output.version is not None and output.name is None:
            out.append(error(("outputs", name, "version"), "a version needs the asset's name",
                             "set outputs.%s.name, the data asset Azure ML registers" % name))


def _check_target_settings(spec: Spec, out: List[Diagnostic], skip: frozenset = frozenset()) -> None:
    """Each configured target's own rules for its settings (targets/<name>/settings.py, settings_errors),
    checked whatever is compiled: a spec is correct or not, not correct for one target only. The
    targets in ``skip`` have a broken setting: their rules would judge its default."""
    from trainspec.schema.vocabulary import TARGETS
    from trainspec.schema.vocabulary import settings

    for name in TARGETS:
        if name not in skip and getattr(spec.targets, name, None) is not None:
            out.extend(settings(name).settings_errors(spec))


# --- templates and the Lightning trap -------------------------------------------------------

def _check_templates(valid: ValidSpec, out: List[Diagnostic],
                     lightning: Tuple[str, ...] = ("num_nodes", "devices")) -> None:
    """Every templated string renders; the command is a shell command; a Lightning command's
    num_nodes/devices (those in ``lightning``: whose numbers stand) match the launcher's."""
    spec = valid.spec
    ctx = valid.template_context(neutral_refs)
    strings: List[Tuple[SpecPath, str]] = [(("command",), spec.command)]
    strings += [(("env", k), v) for k, v in spec.env.items()]
    if spec.description:
        strings.append((("description",), spec.description))
    rendered: Dict[SpecPath, str] = {}
    budget = templating.Budget()  # one for the spec: its strings together, not each
    for path, text in strings:
        try:
            rendered[path] = templating.render(text, ctx, budget)
        except templating.TemplateProblem as exc:
            out.append(error(path, exc.message, exc.hint))
            continue
        _check_rendered_secret(path, text, rendered[path], out)
    command = rendered.get(("command",))
    if command is None:
        return
    if not command.strip():
        out.append(error(("command",), "renders to an empty command"))
        return
    try:
        split_command(command)
    except ValueError as exc:
        out.append(error(("command",), f"is not a valid shell command: {exc}", "close the quote"))
        return
    if spec.framework == "lightning" and lightning:
        _check_lightning(valid, command, out, lightning)
    if "devices" in lightning and valid.launcher == "per-process":  # the process count stands
        _check_one_launcher(valid, command, out)


# launchers a command can start itself: programs, and Python modules (``python -m ...``)
_LAUNCHER_PROGRAMS = {"torchrun": "torchrun", "deepspeed": "deepspeed", "mpirun": "mpirun", "mpiexec": "mpiexec",
                      "srun": "srun"}
_LAUNCHER_MODULES = {"torch.distributed.run": "python -m torch.distributed.run",
                     "torch.distributed.launch": "python -m torch.distributed.launch",
                     "accelerate.commands.launch": "accelerate launch", "deepspeed.launcher.runner": "deepspeed"}
_SHELL_SEPARATORS = ("&&", "||", ";", "|")
_COMMAND_PREFIXES = ("exec", "env", "nohup", "time")
_ASSIGNMENT = Lazy(r"^[A-Za-z_][A-Za-z0-9_]*=")  # VAR=value before a command


def started_launcher(command: str) -> Optional[str]:
    """The launcher a command line starts itself (``torchrun``, ``accelerate launch``, ``python -m
    torch.distributed.run``, ``deepspeed``, ``mpirun``/``mpiexec``/``srun``) in any of its simple
    commands, after variable assignments and ``exec``/``env``; else None."""
    words = split_command(command)
    starts = [0] + [i + 1 for i, word in enumerate(words) if word in _SHELL_SEPARATORS]
    for i in starts:
        while i < len(words) and (words[i] in _COMMAND_PREFIXES or "=" in words[i] and _ASSIGNMENT.match(words[i])):
            i += 1
        if i >= len(words):
            continue
        program = os.path.basename(words[i])
        if program in _LAUNCHER_PROGRAMS:
            return _LAUNCHER_PROGRAMS[program]
        if program == "accelerate" and words[i + 1:i + 2] == ["launch"]:
            return "accelerate launch"
        if program.startswith("python"):
            j = i + 1
            while j < len(words) and words[j].startswith("-") and words[j] not in ("-m", "-c"):
                j += 1
            if words[j:j + 1] == ["-m"] and j + 1 < len(words) and words[j + 1] in _LAUNCHER_MODULES:
                return _LAUNCHER_MODULES[words[j + 1]]
    return None


def _check_one_launcher(valid: ValidSpec, command: str, out: List[Diagnostic]) -> None:
    """One launcher per job: under per-process the platform starts every process, so a command that
    starts a launcher itself would run one launcher in each of them (N x N workers, or a
    rendezvous that never completes) -- on every target alike."""
    found = started_launcher(command)
    if found is None:
        return
    written = ("distribution.launcher is per-process" if valid.spec.distribution.launcher
               else "a job of one process runs per-process (the default)")
    out.append(error(("command",), f"starts its own launcher ({found}), but {written}: the platform starts every "
                     f"process ({valid.world_size} in all), and each would run its own {found}",
                     "write `python train.py ...` and let the platform start the processes, or set "
                     "distribution.launcher: per-node, where one launcher per node starts its workers"))


def _check_rendered_secret(path: SpecPath, text: str, rendered: str, out: List[Diagnostic]) -> None:
    """A credential a template assembles (`{{ vars.a }}{{ vars.b }}`, `{{ 'hf' ~ '_' ~ ... }}`) is
    refused as a written one is: the scan of the spec's own strings (secrets_in) sees only its
    pieces. Said once: a string that already holds one was refused as written."""
    if rendered == text or not templating.is_template(text) or secrets.credential_kind(text):
        return
    kind = secrets.credential_kind(rendered)
    if kind:
        out.append(error(path, f"renders to what looks like {kind}", secrets.HINT))


# A PEP 508 requirement's start: a project name, then extras, a version, a marker, `@ URL` or
# nothing. Never an option (-e, --index-url: pip would read it as one), a path or a bare URL
# (git+https://..., ./pkg): each runs what it names, unnamed, and the same word is reviewed as a
# package. An archive's name (x.whl, x.tar.gz) pip reads as a path.
_PIP_REQUIREMENT = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?\s*(?:\[[^\]]*\]\s*)?(?:[<>=!~;@(].*)?")
_ARCHIVE = re.compile(r"\.(?:whl|zip|tar|tgz|tbz|txz|tar\.gz|tar\.bz2|tar\.xz)\s*$", re.IGNORECASE)


def pip_requirement_problem(requirement: str) -> Optional[str]:
    """Why an item of environment.pip is not one requirement (None: it is). Every target passes
    it to pip as one argument, after ``--`` where a shell is involved (runtime/shim_pip.py)."""
    if not requirement.strip() or any(c in requirement for c in "\r\n\x00"):
        return "a pip requirement is one line"
    if requirement.lstrip().startswith("-"):
        return f"'{requirement}' is a pip option, not a requirement"
    if not _PIP_REQUIREMENT.fullmatch(requirement.strip()) or _ARCHIVE.search(requirement.split(";")[0]):
        return f"'{requirement}' is not a requirement (a path, a URL without a name, or not a name)"
    return None


_LIGHTNING_FLAG = re.compile(r"^--?(?:[\w-]+\.)*(num[_-]nodes|devices)$")
_LIGHTNING_ASSIGN = re.compile(r"^(?:--?)?(?:[\w-]+\.)*(num[_-]nodes|devices)=(.*)$")
_LIGHTNING_KWARG = re.compile(r"\b(num_nodes|devices)\s*=\s*([\w\"'.-]+)")


def lightning_settings(command: str) -> List[Tuple[str, str]]:
    """Every (num_nodes|devices, value) literal in a command line: flags, key=value, kwargs in -c code."""
    found: List[Tuple[str, str]] = []
    tokens = split_command(command)
    for i, token in enumerate(tokens):
        m = _LIGHTNING_FLAG.match(token)
        if m and i + 1 < len(tokens):
            found.append((m.group(1).replace("-", "_"), tokens[i + 1]))
            continue
        m = _LIGHTNING_ASSIGN.match(token)
        if m:
            found.append((m.group(1).replace("-", "_"), m.group(2)))
            continue
        for kw, value in _LIGHTNING_KWARG.findall(token):
            found.append((kw, value.strip("\"'")))
    return found


def _check_lightning(valid: ValidSpec, command: str, out: List[Diagnostic],
                     keys: Tuple[str, ...] = ("num_nodes", "devices")) -> None:
    expected = {"num_nodes": (valid.nodes, "resources.nodes"),
                "devices": (valid.procs_per_node, "resources.procs_per_node"
                            if valid.spec.resources.procs_per_node is not None else "resources.gpus_per_node")}
    for key, value in lightning_settings(command):
        if key not in keys:
            continue
        want, source = expected[key]
        if value.lstrip("-").isdigit():
            if int(value) != want:
                out.append(error(("command",),
                                 f"Lightning {key}={value} but {source} gives {want}: "
                                 f"the launcher starts {valid.world_size} processes and Lightning expects "
                                 f"{int(value) * (valid.procs_per_node if key == 'num_nodes' else valid.nodes)}, "
                                 "so the job hangs at the rendezvous",
                                 f"write {{{{ {'nodes' if key == 'num_nodes' else 'procs_per_node'} }}}} instead of {value}"))
        elif value in ("auto", "-1") and key == "devices":
            out.append(warning(("command",), f"Lightning devices={value} lets Lightning count the devices itself",
                               "write --devices {{ procs_per_node }} so it always matches the launcher"))


def _path_problems(file: str, display: str) -> List[Diagnostic]:
    """One error for the file when its path holds a character no output can carry safely."""
    for text in (file, display):
        bad = unwritable_char(text)
        if bad is None:
            continue
        code = ord(bad)
        if 0xDC80 <= code <= 0xDCFF:
            what = f"a byte that is not UTF-8 (0x{code - 0xDC00:02x})"
        elif bad in "\n\r\x85\u2028\u2029\x0b\x0c":
            what = f"a line break (U+{code:04X})"
        else:
            what = f"{'a Unicode noncharacter' if code > 0x9F else 'a control character'} (U+{code:04X})"
        # about the file, not a line of it: at 1:1, as a file that cannot be read is
        return [error((), f"the spec's path holds {what}, which its job files would have to write into "
                          "comments and strings",
                      "rename the file (and its folders) to printable characters").at(file, 1, 1)]
    return []


def _display_path(path: Path) -> str:
    """``path`` relative to the nearest folder above it with a .git (its name without one); that
    folder is looked for once per folder in a command (core/memo.py), not once per spec in it."""
    path = Path(path)
    root = memo.answer(_git_folder, os.fspath(path.parent))
    return path.name if root is None else path.relative_to(root).as_posix()


def _git_folder(text: str) -> Optional[Path]:
    """The nearest folder at or above ``text`` that has a .git (not resolved), or None."""
    folder = Path(text)
    for parent in (folder, *folder.parents):
        if (parent / ".git").exists():
            return parent
    return None
