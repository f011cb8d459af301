"""`trainspec import JOB.yml`: an Azure ML command job a team already has, as a spec.

The inverse of azureml.py, field by field (a table, read top to bottom):

====================================  ==================================================
job.yml                               spec
====================================  ==================================================
display_name (or the file's name)     name (made a spec name: lowercase, [a-z0-9_-]), and
                                      targets.azureml.display_name exactly as written
                                      (null when the job has none: it stays unset)
description, experiment_name, tags    description, targets.azureml.experiment_name (null
                                      when unset), tags (all of them, the team's own)
code                                  code (relative to the spec)
command                               command: ${{inputs.x}} -> {{ inputs.x }}; an
                                      MPI-env wrapper (aml_mpi_env.py ...) dropped: the
                                      shim does its work
environment                           environment.azureml | image (+ conda_file) | build
compute / resources.instance_type     targets.azureml.compute / resources.sku (a compute
                                      the team's trainspec-skus.yaml names: its size)
resources.instance_count, shm_size    resources.nodes, shm_size; docker_args:
                                      targets.azureml.docker_args
GPUs per node                         the size's, or the command's own launcher counts
                                      (accelerate --num_processes/--num_machines, torchrun
                                      --nproc_per_node, deepspeed --num_gpus: per-node);
                                      never guessed: else the spec has one error to fix
distribution pytorch | mpi            launcher per-process | mpi, procs_per_node
distribution tensorflow               framework tensorflow, parameter_server_count
environment_variables                 env (${{outputs.x}} -> {{ outputs.x }})
inputs, outputs                       inputs (literals stay literals), outputs
identity, services                    targets.azureml.identity, services (port,
                                      properties; logDir -> log_dir)
limits.timeout                        timeout (the spec's time limit, on every target;
                                      written as a duration: 900 -> 15m)
queue_settings                        targets.azureml.job_tier, priority
====================================  ==================================================

Before any of it is read, the job is checked against what azure-ai-ml reads (``JOB`` below): a
wrongly typed value, a key azure-ai-ml refuses, a placeholder where a name goes or a preview-schema
compute is an error at its line, and left out of what is read next. Whatever has no place in a
spec is reported by field, with its line in the job file, never dropped silently. The spec is
written by ruamel.yaml (every string escaped by it).
"""

from __future__ import annotations

import io
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from trainspec.core.diagnostics import Diagnostic, SpecError, SpecPath, error, warning
from trainspec.runtime import shim as contract
from trainspec.runtime import shim_launch as launch_flags
from trainspec.core.fields import ENV_NAME_PATTERN, duration_text, is_remote
from trainspec.schema.loader import MAX_INT_DIGITS
from trainspec.schema.validate import RESERVED_ENV

TARGET = "azureml"  # the target an imported job is validated for: the platform it came from
_REF = re.compile(r"\$\{\{\s*(inputs|outputs)\.([A-Za-z_]\w*)\s*\}\}")
_OTHER_REF = re.compile(r"\$\{\{[^}]*\}\}")
_REF_SPEC = re.compile(r"\{\{ (?:inputs|outputs)\.[A-Za-z_]\w* \}\}")  # what _REF makes
# a hand-written wrapper that exports torch's variables from Open MPI's (the shim does that now):
# `python aml_mpi_env.py python train.py`, `python mpi_env.py && python train.py`, `source set_env.sh; ...`
_WRAPPER = re.compile(r"^\s*(?:python3?\s+|source\s+|\.\s+)(?P<script>[\w./-]*(?:mpi_env|dist_env|set_env|"
                      r"env_setup|setup_env)\w*\.(?:py|sh))\s*(?:&&|;)?\s*(?P<rest>\S.*)$", re.S)
_PORTABLE_ENV = re.compile(ENV_NAME_PATTERN)
_CARRIED = {"$schema", "type", "name", "display_name", "description", "experiment_name", "tags", "code",
            "command", "environment", "compute", "resources", "distribution", "environment_variables", "inputs",
            "outputs", "identity", "services", "limits", "queue_settings"}


# ---------------------------------------------------------------- the job file's shape
#
# What import reads, checked before it is read: azure-ai-ml 1.35's CommandJobSchema (the key/type
# tree in ../shared/reference/azureml-schema), as far as import goes. A value of the wrong type is
# an error at its line ("expected ..., got ..."), a key azure-ai-ml refuses (marshmallow's
# unknown=RAISE) an error at the key, a placeholder where a name goes an error at the name; each
# is then left out of what the rest of import reads, so that every problem is said in one run and
# no read meets a type it did not expect. A key azure-ai-ml takes but a spec cannot carry is
# described here too, and said by the importer below ("has no place in a spec").

TEXT = "text"        # a string
NAME = "name"        # a string that names something (a compute, an image, a path): no placeholder
COUNT = "count"      # an integer (not a boolean, not 2.5); digits in quotes, as azure-ai-ml reads them
SCALAR = "scalar"    # text, a number or a boolean (a literal input, a variable's value)
ANY = "any"          # not read by import


@dataclass(frozen=True)
class Keys:
    """A mapping of known keys (each with its shape; ``required`` ones it must have), or of free
    names (``names``: each value's shape), as azure-ai-ml takes it."""

    fields: Dict[str, Any] = field(default_factory=dict)
    names: Any = None
    required: tuple = ()


@dataclass(frozen=True)
class Either:
    shapes: tuple
    expected: str


@dataclass(frozen=True)
class ListOf:
    item: Any


_EXPECTED = {TEXT: "text", NAME: "a name", COUNT: "a whole number", SCALAR: "text, a number or a boolean"}
_EXAMPLES = {
    "type": "type: command", "name": "name: my-job", "display_name": "display_name: My job",
    "description": "description: what it trains", "experiment_name": "experiment_name: nlp",
    "tags": "tags: {team: nlp}", "code": "code: ./src", "command": "command: python train.py",
    "environment": "environment: azureml:acpt-pytorch@latest", "compute": "compute: azureml:gpu-cluster",
    "resources": "resources: {instance_count: 2, instance_type: Standard_NC24ads_A100_v4}",
    "instance_count": "instance_count: 2", "instance_type": "instance_type: Standard_NC24ads_A100_v4",
    "shm_size": 'shm_size: "16g"', "docker_args": 'docker_args: "--ipc=host"',
    "distribution": "distribution: {type: pytorch, process_count_per_instance: 8}",
    "process_count_per_instance": "process_count_per_instance: 8", "worker_count": "worker_count: 2",
    "parameter_server_count": "parameter_server_count: 1",
    "environment_variables": "environment_variables: {NCCL_DEBUG: WARN}",
    "inputs": "inputs: {data: {type: uri_folder, path: azureml:corpus@latest}}",
    "outputs": "outputs: {model: {type: uri_folder}}", "identity": "identity: {type: managed}",
    "services": "services: {tb: {type: tensor_board, log_dir: outputs/tb}}", "limits": "limits: {timeout: 3600}",
    "timeout": "timeout: 3600", "queue_settings": "queue_settings: {job_tier: spot}", "image": "image: python:3.11",
    "conda_file": "conda_file: conda.yml", "build": "build: {path: ./docker}", "path": "path: ./data",
    "port": "port: 6006", "properties": "properties: {key: value}",
}
_SERVICE = Keys({"type": TEXT, "port": COUNT, "nodes": TEXT, "log_dir": TEXT, "ssh_public_keys": TEXT,
                 "properties": Keys(names=SCALAR)})
_BUILD = Keys({"path": NAME, "local_path": NAME, "dockerfile_path": NAME})  # local_path: the older spelling
ENVIRONMENT = Keys({"$schema": TEXT, "name": NAME, "version": Either((TEXT, COUNT), "text"), "description": TEXT,
                    "tags": Keys(names=ANY), "build": _BUILD, "image": NAME, "conda_file": ANY, "os_type": TEXT,
                    "inference_config": ANY, "datastore": TEXT, "auto_delete_setting": ANY, "id": ANY})
_DISTRIBUTION_KEYS = {"pytorch": ("process_count_per_instance",), "mpi": ("process_count_per_instance",),
                      "tensorflow": ("worker_count", "parameter_server_count")}  # the fourth has no launcher
JOB = Keys({
    "$schema": TEXT, "type": TEXT, "name": NAME, "display_name": TEXT, "description": TEXT, "experiment_name": NAME,
    "tags": Keys(names=TEXT), "command": TEXT,
    "code": Either((NAME, Keys({"local_path": NAME}, required=("local_path",))), "a folder"),
    "environment": Either((NAME, ENVIRONMENT), "a name or a mapping"), "compute": NAME,
    "resources": Keys({"instance_count": COUNT, "instance_type": NAME, "shm_size": TEXT,
                       "docker_args": Either((TEXT,), "text (trainspec carries docker_args as one string)"),
                       "locations": ListOf(TEXT), "properties": Keys(names=ANY), "max_instance_count": COUNT}),
    "distribution": Keys({"type": TEXT, "process_count_per_instance": COUNT, "worker_count": COUNT,
                          "parameter_server_count": COUNT, "port": COUNT, "address": TEXT, "include_dashboard": ANY,
                          "dashboard_port": COUNT, "head_node_additional_args": TEXT,
                          "worker_node_additional_args": TEXT}, required=("type",)),
    "environment_variables": Keys(names=SCALAR),
    "inputs": Keys(names=Either((SCALAR, Keys({"type": TEXT, "path": NAME, "mode": TEXT, "value": SCALAR,
                                                "datastore": NAME, "path_on_compute": TEXT})),
                                "a literal or a mapping")),
    "outputs": Keys(names=Keys({"path": NAME, "type": TEXT, "mode": TEXT, "name": NAME,
                                "version": Either((TEXT, COUNT), "text")})),
    "identity": Keys({"type": TEXT, "client_id": NAME, "object_id": NAME, "msi_resource_id": NAME}),
    "services": Keys(names=_SERVICE),
    "limits": Keys({"timeout": COUNT}),
    "queue_settings": Keys({"job_tier": TEXT, "priority": TEXT}),
    "properties": Keys(names=ANY), "parent_job_name": TEXT,
})
# keys people write that azure-ai-ml refuses, and what it reads instead
_RENAMED = {"job_service_type": "type (ssh, tensor_board, vs_code or jupyter_lab): job_service_type is the REST "
                                "API's name, which azure-ai-ml refuses in a job file",
            "node_count": "resources.instance_count", "instance_count": "resources.instance_count",
            "process_count": "distribution.process_count_per_instance"}
_PLACEHOLDER = re.compile(r"<[^<>\n]*>|\{[^{}\n]*\}")
_BAD = object()  # a value left out of what import reads


def _kind(value: Any) -> str:
    from trainspec.core.diagnostics import shown

    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"text '{shown(value)}'"
    return "a list" if isinstance(value, list) else "a mapping"


def _placeholder(value: Any) -> Optional[str]:
    """The placeholder a name holds (`<compute name>`, `{your environment}`, which YAML reads as a
    one-key mapping), or None."""
    if isinstance(value, str):
        found = _PLACEHOLDER.search(_OTHER_REF.sub("", value))
        return found.group(0) if found else None
    if isinstance(value, dict) and len(value) == 1 and next(iter(value.values())) is None:
        return "{" + str(next(iter(value))) + "}"
    return None


def checked(value: Any, shape: Any, path: SpecPath, problems: List[Diagnostic]) -> Any:
    """``value`` as ``shape`` says, with what is wrong left out (``_BAD`` when all of it is), and
    each problem an error at its path in ``problems``."""
    example = _EXAMPLES.get(next((p for p in reversed(path) if isinstance(p, str) and p in _EXAMPLES), ""), "")
    hint = f"e.g. {example}" if example else None

    def wrong(expected: str, advice: Optional[str] = None) -> Any:
        # a null has no place of its own (ruamel puts it where the next line starts): said at its key
        problems.append(error(path, f"expected {expected}, got {_kind(value)}", advice or hint,
                              on_key=value is None))
        return _BAD

    if shape == ANY:
        return value
    if isinstance(shape, Either):
        placeholder = _placeholder(value) if NAME in shape.shapes else None
        if placeholder is not None and (isinstance(value, str) or all(
                not isinstance(s, Keys) or placeholder[1:-1] not in s.fields for s in shape.shapes)):
            return checked(value, NAME, path, problems)
        for option in shape.shapes:  # the first whose kind the value has says what is wrong inside it
            if isinstance(option, Keys) == isinstance(value, dict) and (
                    isinstance(option, Keys) or _scalar_fits(value, option)):
                return checked(value, option, path, problems)
        return wrong(shape.expected)
    if isinstance(shape, Keys):
        if not isinstance(value, dict):
            return wrong("a mapping")
        out: Dict[str, Any] = {}
        for key, item in value.items():
            if shape.names is not None:
                inner = checked(item, shape.names, path + (key,), problems)
            elif key in shape.fields:
                inner = checked(item, shape.fields[key], path + (key,), problems)
            else:
                problems.append(error(path + (key,), "azure-ai-ml refuses this key (unknown field)",
                                      _refused_hint(key, shape), on_key=True))
                continue
            if inner is not _BAD:
                out[key] = inner
        missing = [key for key in shape.required if key not in value]
        if missing:
            problems.append(error(path, f"expected a mapping with {' and '.join(missing)}", hint))
        return _BAD if any(key not in out for key in shape.required) else out
    if isinstance(shape, ListOf):
        if not isinstance(value, list):
            return wrong("a list")
        items = [checked(item, shape.item, path + (i,), problems) for i, item in enumerate(value)]
        return [item for item in items if item is not _BAD]
    if not _scalar_fits(value, shape):
        if shape == NAME and _placeholder(value) is not None:
            problems.append(error(path, f"{_placeholder(value)} is a placeholder, not a name",
                                  "write the real name the job runs with" + (f", {hint}" if hint else "")))
            return _BAD
        return wrong(_EXPECTED[shape], "quote it: azure-ai-ml reads it as text" if shape in (TEXT, NAME)
                     and isinstance(value, (int, float)) else None)
    if shape == COUNT and isinstance(value, str):
        return int(value)
    return value


def _scalar_fits(value: Any, shape: Any) -> bool:
    if shape in (TEXT, NAME):
        return isinstance(value, str) and (shape == TEXT or _placeholder(value) is None)
    if shape == COUNT:
        # digits in quotes, as many as the loader reads as a number (int() refuses 4,300)
        digits = value.strip() if isinstance(value, str) else ""
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            digits.isascii() and digits.isdigit() and len(digits) <= MAX_INT_DIGITS)
    if shape == SCALAR:
        return isinstance(value, (str, int, float))  # bool is an int
    return isinstance(shape, (Keys, ListOf))


def _refused_hint(key: str, shape: Keys) -> str:
    import difflib

    if key in _RENAMED:
        return f"write {_RENAMED[key]}"
    close = difflib.get_close_matches(key, list(shape.fields), n=1)
    if close:
        return f"did you mean '{close[0]}'?"
    return "it takes " + ", ".join(k for k in shape.fields if not k.startswith("$"))


@dataclass
class Imported:
    spec: Dict[str, Any] = field(default_factory=dict)
    notes: List[Diagnostic] = field(default_factory=list)  # located in the job file

    @property
    def ok(self) -> bool:
        return not any(d.is_error for d in self.notes)


def import_job(job_file: str, spec_file: str) -> Imported:
    """Read ``job_file`` (an Azure ML command job) and make the spec that would live at
    ``spec_file``: paths in it are relative to that spec."""
    from trainspec.schema.loader import load_file

    try:
        doc = load_file(job_file)
    except SpecError as exc:
        return Imported(notes=exc.diagnostics)
    result = Imported()
    refused: List[SpecPath] = []  # what the shape check refused: nothing more is said inside it

    def note(path: SpecPath, message: str, hint: Optional[str] = None, *, fatal: bool = False) -> None:
        if not any(tuple(path[:len(bad)]) == bad for bad in refused):
            result.notes.append(doc.locate((error if fatal else warning)(path, message, hint)))

    job = doc.data if isinstance(doc.data, dict) else None
    if job is not None:
        problems = _shape_problems(job)
        job = checked(job, JOB, (), problems)
        job = _distribution_checked(job, problems)
        for problem in problems:
            result.notes.append(doc.locate(problem))
            refused.append(tuple(problem.path))
    if job is None or job.get("type", "command") != "command":
        note(("type",) if job else (), "not an Azure ML command job: trainspec imports `type: command` jobs",
             fatal=True)
        return result
    job_dir = doc.path.parent
    spec_dir = Path(spec_file).resolve().parent
    spec = result.spec

    def relative(path: str, at: SpecPath) -> str:
        """``path`` (relative to the job) relative to the spec; a NUL, an overlong name or a symlink
        loop is an error at ``at`` (Path.resolve() raises RuntimeError on a loop before 3.13)."""
        from trainspec.core.diagnostics import shown
        from trainspec.schema.loader import ReadProblem, real_path

        try:
            return Path(os.path.relpath(real_path(job_dir / path), spec_dir)).as_posix()
        except ReadProblem as exc:
            note(at, f"'{shown(path)}': {exc.message}", exc.hint, fatal=True)
            return path

    for key in job:
        if key not in _CARRIED:
            note((key,), "has no place in a spec: not carried", "set it on the job after compiling, or drop it")
    spec["version"] = 1
    shown = str(job.get("display_name") or job.get("name") or Path(job_file).stem)
    spec["name"] = _spec_name(shown)
    assumed: List[Diagnostic] = []  # what import read or assumed: said once, after the notes

    def assume(path: SpecPath, message: str, hint: Optional[str] = None, *, changes_job: bool) -> None:
        assumed.append((not changes_job, len(assumed), doc.locate(warning(path, message, hint))))
    if job.get("description"):
        spec["description"] = str(job["description"])
    if "code" not in doc.data:
        note((), "has no code: a spec needs the folder the command runs in", "add code: ./src", fatal=True)
    elif "code" in job:  # else refused by its shape, and said
        code = job["code"]
        code = code.get("local_path") if isinstance(code, dict) else code
        if not isinstance(code, str) or is_remote(code):
            note(("code",), f"'{code}' is not a local folder: a spec's code is uploaded from this machine",
                 fatal=True)
        else:
            spec["code"] = relative(code, ("code",))
    spec["command"] = _command(job.get("command"), note)
    azureml: Dict[str, Any] = {}
    distribution = job.get("distribution") or {}
    kind = str(distribution.get("type", "")).lower() if isinstance(distribution, dict) else ""
    if kind == "tensorflow":
        spec["framework"] = "tensorflow"
    else:
        assume(("distribution",) if "distribution" in job else ("command",),
               "the job does not say its framework: framework: pytorch assumed (only trainspec's own checks and "
               "its trainspec_framework tag read it)",
               "set framework: lightning (the num_nodes/devices check), deepspeed, huggingface or tensorflow",
               changes_job=False)
    from trainspec.schema.skus import catalog_for

    catalog = catalog_for(spec_dir)[0]
    if catalog.team_file is None:
        catalog = catalog_for(job_dir)[0]
    spec["resources"], launcher = _resources(job, kind, distribution, azureml, note, assume, spec, catalog)
    if launcher is not None:
        spec["distribution"] = {"launcher": launcher}
    elif kind in ("pytorch", "mpi"):
        spec["distribution"] = {"launcher": "per-process" if kind == "pytorch" else "mpi"}
    elif kind == "" and job.get("distribution") is None:
        spec["distribution"] = {"launcher": "per-process"}
    elif kind != "tensorflow":
        note(("distribution", "type"), f"distribution {kind} has no trainspec launcher", fatal=True)
    def report(diagnostic: Diagnostic) -> None:  # located in a file of its own (an environment file)
        result.notes.append(diagnostic)

    spec["environment"] = _environment(job.get("environment"), relative, note, job_dir, report,
                                       os.path.dirname(job_file))
    env = job.get("environment_variables") or {}
    if env:
        spec["env"] = {}
        for key, value in env.items():
            if key in RESERVED_ENV or str(key).startswith((contract.ENV_PREFIX, "PL_TRAINER_")):
                note(("environment_variables", key), f"{key} is set by the trainspec shim: dropped")
            elif not _PORTABLE_ENV.match(str(key)):
                note(("environment_variables", key), f"'{key}' is not a variable name a shell can set", fatal=True)
            else:
                text = str(value) if not isinstance(value, bool) else str(value).lower()
                # ${{inputs.x}} / ${{outputs.x}}: Azure ML expands them in variables too
                spec["env"][str(key)] = _references(text, ("environment_variables", key), note)
        if not spec["env"]:
            del spec["env"]
    inputs, outputs = _inputs(job.get("inputs") or {}, relative, note), _outputs(job.get("outputs") or {}, note)
    if inputs:
        spec["inputs"] = inputs
    if outputs:
        spec["outputs"] = outputs
    _azureml_settings(job, azureml, note, spec["name"])
    timeout = (job.get("limits") or {}).get("timeout")
    if timeout:  # the job's time limit is the spec's, said once for every target
        spec = _with_timeout(spec, duration_text(int(timeout)))
        result.spec = spec
    if azureml.get("job_tier") == "spot":  # said the spec's way: resources.spot
        del azureml["job_tier"]
        spec["resources"]["spot"] = True
    spec["targets"] = {"azureml": azureml}
    result.notes.sort(key=lambda d: (d.line or 0, d.col or 0))
    result.notes += [d for *_, d in sorted(assumed, key=lambda a: a[:2])]  # the one that changes the job first
    return result


def _with_timeout(spec: Dict[str, Any], timeout: str) -> Dict[str, Any]:
    """``spec`` with its top-level ``timeout`` after the command, where a reader looks for what runs."""
    out: Dict[str, Any] = {}
    for key, value in spec.items():
        out[key] = value
        if key == "command":
            out["timeout"] = timeout
    out.setdefault("timeout", timeout)
    return out


def _shape_problems(job: Dict[str, Any]) -> List[Diagnostic]:
    """What is refused before the shape check: a preview schema's ``compute: {target: ...,
    instance_count: 2}`` (never read as a one-node job on no compute). Left out of the job."""
    compute = job.get("compute")
    if not (isinstance(compute, dict) and "target" in compute):
        return []
    del job["compute"]
    target = compute.get("target")
    count = compute.get("instance_count")
    said = (f"compute: azureml:{target[len('azureml:'):] if target.startswith('azureml:') else target}"
            if isinstance(target, str) and _placeholder(target) is None else "compute: azureml:<cluster>")
    if isinstance(count, int) and not isinstance(count, bool):
        said += f" and resources: {{instance_count: {count}}}"
    return [error(("compute",), "a compute mapping (target, instance_count) is the preview schema: azure-ai-ml "
                  "reads compute as a name and the node count from resources.instance_count",
                  f"write {said}", on_key=True)]


def _distribution_checked(job: Dict[str, Any], problems: List[Diagnostic]) -> Dict[str, Any]:
    """A distribution says its type, and takes only that type's keys (azure-ai-ml refuses
    `worker_count` in a pytorch distribution)."""
    distribution = job.get("distribution")
    if not isinstance(distribution, dict):
        return job
    kind = distribution["type"]  # required: a distribution without it is left out already
    allowed = _DISTRIBUTION_KEYS.get(kind.lower())
    if allowed is None:
        return job  # said by the importer: no trainspec launcher
    kept = {"type": kind}
    for key, value in distribution.items():
        if key in allowed:
            kept[key] = value
        elif key != "type":
            problems.append(error(("distribution", key), f"azure-ai-ml refuses {key} in a {kind.lower()} "
                                  "distribution", f"a {kind.lower()} distribution takes " + ", ".join(allowed),
                                  on_key=True))
    return {**job, "distribution": kept}


def _spec_name(text: str) -> str:
    name = re.sub(r"[^a-z0-9_-]+", "-", text.lower()).strip("-_") or "job"
    return name[:63] if name[0].isalnum() else ("job-" + name)[:63]


def _command(command: Any, note) -> str:
    if not isinstance(command, str) or not command.strip():
        note(("command",), "a command job needs a command", fatal=True)
        return "python train.py"
    text = command.strip()
    wrapper = _WRAPPER.match(text)
    if wrapper:
        note(("command",), f"{wrapper.group('script')} (a wrapper that exports torch's variables) dropped: the "
             "trainspec shim sets them in every process", "delete the wrapper from the code once the spec runs")
        text = wrapper.group("rest")
    return _references(text, ("command",), note)


def _references(text: str, path: SpecPath, note) -> str:
    """``${{inputs.x}}`` / ``${{outputs.x}}`` -> ``{{ inputs.x }}`` (each target renders its own
    reference: Azure ML's is the same text again); anything else a spec would read as a template
    is refused."""
    text = _REF.sub(lambda m: "{{ %s.%s }}" % (m.group(1), m.group(2)), text)
    for other in _OTHER_REF.findall(text):
        note(path, f"{other} is not an input or output reference: a spec cannot carry it", fatal=True)
    rest = _REF_SPEC.sub("", _OTHER_REF.sub("", text))
    if any(mark in rest for mark in ("{{", "{%", "{#")):
        note(path, "holds text a spec would read as a template", fatal=True)
    return text


def _resources(job, kind, distribution, azureml, note, assume, spec, catalog):
    """(spec resources, launcher or None). GPUs per node come from the size (instance_type, or the
    compute's size in the team's catalog) or the command's own launcher counts, never from a guess:
    where nothing tells, the spec says neither, and validating it says what to set."""
    resources = job.get("resources") or {}
    out: Dict[str, Any] = {"nodes": int(resources.get("instance_count", 1))}
    compute = job.get("compute")
    if isinstance(compute, str) and compute:
        azureml["compute"] = compute[len("azureml:"):] if compute.startswith("azureml:") else compute
    instance_type = resources.get("instance_type")
    if instance_type:
        out["sku"] = str(instance_type)
        if compute:
            note(("resources", "instance_type"), "an instance type on a named compute (Kubernetes) is not "
                 "carried: trainspec sends resources.sku only to serverless jobs")
    elif azureml.get("compute"):
        size = catalog.compute_size(azureml["compute"])
        if size is not None:
            out["sku"] = size.name
            assume(("compute",), f"{azureml['compute']} is a {size.name} cluster ({size.gpus} GPUs per node), as "
                   f"{catalog.team_file} says", changes_job=True)
    per_instance = 1
    if kind in ("pytorch", "mpi"):
        per_instance = int(distribution.get("process_count_per_instance", 1))
    elif kind == "tensorflow":
        workers = int(distribution.get("worker_count", out["nodes"]))
        if workers != out["nodes"]:
            note(("distribution", "worker_count"), f"{workers} workers on {out['nodes']} nodes: trainspec runs "
                 "one worker per node", fatal=True)
        servers = int(distribution.get("parameter_server_count", 0) or 0)
        if servers:
            azureml["parameter_server_count"] = servers
    launcher = None
    counted = _launcher_counts(spec["command"]) if kind in ("pytorch", "") and per_instance == 1 else None
    if counted is not None:
        per_node, machines, said, command = counted
        if machines != out["nodes"]:
            note(("command",), f"{said}: {machines} machine(s), but instance_count is {out['nodes']}",
                 "make them agree: the job cannot run as written", fatal=True)
        # Azure ML starts one process per node and the command's launcher starts the node's workers:
        # trainspec's per-node launch, with that many processes per node
        launcher = "per-node"
        spec["command"] = command
        out["procs_per_node"] = per_node
        if "sku" not in out:
            out["gpus_per_node"] = per_node
        assume(("command",), f"{per_node} process(es) per node on {machines} node(s), from {said}: "
               f"launcher per-node{'' if 'sku' in out else f', gpus_per_node {per_node}'}", changes_job=True)
    elif kind != "tensorflow":
        out["procs_per_node"] = per_instance
    if resources.get("shm_size"):
        out["shm_size"] = str(resources["shm_size"])
    if resources.get("docker_args") is not None:
        azureml["docker_args"] = str(resources["docker_args"])
    for key in resources:
        if key not in ("instance_count", "instance_type", "shm_size", "docker_args"):
            note(("resources", key), "has no place in a spec: not carried")
    return out, launcher


# a launcher's options that take a value (torchrun), to find the script after them
_TORCHRUN_VALUED = {"--nnodes", "--nproc_per_node", "--nproc-per-node", "--node_rank", "--node-rank",
                    "--master_addr", "--master-addr", "--master_port", "--master-port", "--rdzv_backend",
                    "--rdzv-backend", "--rdzv_endpoint", "--rdzv-endpoint", "--rdzv_id", "--rdzv-id",
                    "--max_restarts", "--max-restarts"}


def _launcher_counts(command: str):
    """(processes per node, machines, the flags as written, the command to keep) when the command is a
    launcher that says its own counts -- accelerate launch --num_processes T --num_machines M (T / M
    per node), torchrun --nproc_per_node P [--nnodes M], deepspeed --num_gpus G [--num_nodes M] --
    else None. torchrun's own line is replaced by the script it runs: trainspec's per-node launch
    puts torchrun there again, with the same counts."""
    from trainspec.core.fields import split_command

    refs = _REF_SPEC.findall(command)  # kept whole through the split: one word each
    marked = _REF_SPEC.sub(lambda m: f"trainspecref{refs.index(m.group(0))}x", command)
    try:
        words = split_command(marked)
    except ValueError:
        return None
    found = launch_flags.spawner_at(words)
    torchrun = not found and words and (os.path.basename(words[0]) == "torchrun" or words[:3] in (
        ["python", "-m", "torch.distributed.run"], ["python3", "-m", "torch.distributed.run"]))

    def given(*flags: str) -> Optional[str]:
        for i, word in enumerate(words):
            for flag in flags:
                if word == flag and i + 1 < len(words):
                    return words[i + 1]
                if word.startswith(flag + "="):
                    return word[len(flag) + 1:]
        return None

    def number(text: Optional[str], default: Optional[int] = None) -> Optional[int]:
        if text is None:
            return default
        # ASCII digits only: '²' is a digit to str.isdigit() and a ValueError to int()
        return int(text) if text.isascii() and text.isdigit() and int(text) > 0 else None

    if found and found[0] == "accelerate":
        total, machines = number(given("--num_processes")), number(given("--num_machines"), 1)
        if total is None or machines is None or total % machines:
            return None
        said = f"accelerate launch --num_processes {total} --num_machines {machines}"
        return total // machines, machines, said, command
    if found and found[0] == "deepspeed":
        per_node, machines = number(given("--num_gpus")), number(given("--num_nodes"), 1)
        if per_node is None or machines is None:
            return None
        return per_node, machines, f"deepspeed --num_gpus {per_node} --num_nodes {machines}", command
    if torchrun:
        per_node, machines = number(given("--nproc_per_node", "--nproc-per-node")), number(given("--nnodes"), 1)
        if per_node is None or machines is None:
            return None
        at = 1 if os.path.basename(words[0]) == "torchrun" else 3
        python = ["python"]
        while at < len(words) and words[at].startswith("-"):
            word = words[at]
            if word in _TORCHRUN_VALUED:
                at += 2
            elif word.split("=")[0] in _TORCHRUN_VALUED or word == "--standalone":
                at += 1
            elif word in ("-m", "--module"):
                python, at = ["python", "-m"], at + 1
                break
            elif word in ("--no-python", "--no_python"):
                python, at = [], at + 1
            else:
                return None  # an option trainspec's torchrun line would not carry: keep the job as it is
        if at >= len(words) or _has_operator(command):
            return None
        kept = shlex.join([*python, *words[at:]])
        kept = re.sub(r"trainspecref(\d+)x", lambda m: refs[int(m.group(1))], kept)
        return per_node, machines, f"torchrun --nproc_per_node {per_node} --nnodes {machines}", kept
    return None


def _has_operator(command: str) -> bool:
    from trainspec.compiler import base

    return base._has_shell_operator(command)


def _environment(environment, relative, note, job_dir: Path, report, shown_dir: str) -> Dict[str, Any]:
    if isinstance(environment, str) and environment.startswith("file:"):
        # an environment in a file of its own (`environment: file:./env.yml`); its paths are
        # relative to that file, and its problems are said at its own lines
        from trainspec.schema.loader import ReadProblem, load_bytes, read_bounded, real_path

        written = environment[len("file:"):]
        try:
            where = real_path(job_dir / written)
            env_doc = load_bytes(read_bounded(where), os.path.normpath(os.path.join(shown_dir, written)), where)
        except ReadProblem as exc:
            note(("environment",), f"cannot read the environment file {written}: {exc.message}", fatal=True)
            return {}
        except SpecError as exc:
            for diagnostic in exc.diagnostics:
                report(diagnostic)
            note(("environment",), f"cannot read the environment file {written}: see above", fatal=True)
            return {}
        if not isinstance(env_doc.data, dict) or not env_doc.data:
            note(("environment",), f"{where.name} is not an environment definition", fatal=True)
            return {}
        problems: List[Diagnostic] = []
        loaded = checked(env_doc.data, ENVIRONMENT, (), problems)
        for problem in problems:
            report(env_doc.locate(problem))
        base = where.parent

        def from_there(path: str, at: SpecPath) -> str:
            return relative(os.path.relpath(base / path, job_dir), at)

        return _environment(loaded, from_there, note, base, report, shown_dir)
    if isinstance(environment, str):
        return {"azureml": environment}
    if not isinstance(environment, dict):
        note(("environment",), "a command job needs an environment", fatal=True)
        return {}
    out: Dict[str, Any] = {}
    if environment.get("build"):
        build = environment["build"]
        where = str(build.get("path") or build.get("local_path") or "")  # local_path: the older spelling
        out["build"] = {"path": where if is_remote(where) else relative(where, ("environment", "build", "path"))}
        if build.get("dockerfile_path"):
            out["build"]["dockerfile_path"] = build["dockerfile_path"]
    if environment.get("image"):
        out["image"] = str(environment["image"])
    conda = environment.get("conda_file")
    if isinstance(conda, str):
        out["conda_file"] = relative(conda, ("environment", "conda_file"))
    elif conda is not None:
        note(("environment", "conda_file"), "an inline conda file is not carried: write it to a file",
             fatal=True)
    for key in environment:
        if key not in ("image", "conda_file", "build", "name", "version", "description", "tags", "os_type",
                       "$schema"):  # an environment file's own schema URL: not data
            note(("environment", key), "has no place in a spec: not carried")
    return out


def _inputs(inputs, relative, note) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for name, item in inputs.items():
        if not isinstance(item, dict):
            out[name] = item  # a literal input stays a literal
            continue
        if "value" in item and "path" not in item:
            out[name] = item["value"]
            continue
        path = str(item.get("path", ""))
        if _OTHER_REF.search(path):
            note(("inputs", name, "path"), "a binding to another job's output is not carried", fatal=True)
            continue
        entry: Dict[str, Any] = {"path": path if is_remote(path) else relative(path, ("inputs", name, "path"))}
        for key in ("type", "mode"):
            if item.get(key):
                entry[key] = str(item[key])
        for key in item:
            if key not in ("path", "type", "mode"):
                note(("inputs", name, key), "has no place in a spec: not carried")
        out[name] = entry
    return out


def _outputs(outputs, note) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for name, item in outputs.items():
        entry: Dict[str, Any] = {}
        for key in ("path", "type", "mode", "name", "version"):
            if isinstance(item, dict) and item.get(key) is not None:
                entry[key] = str(item[key])
        for key in (item or {}):
            if key not in ("path", "type", "mode", "name", "version"):
                note(("outputs", name, key), "has no place in a spec: not carried")
        out[name] = entry
    return out


def _azureml_settings(job, azureml, note, spec_name: str) -> None:
    # the job's names exactly as written; one it did not set stays unset (null: not the spec's name)
    display = job.get("display_name")
    if display is None or str(display) != spec_name:
        azureml["display_name"] = None if display is None else str(display)
    experiment = job.get("experiment_name")
    azureml["experiment_name"] = None if experiment is None else str(experiment)
    tags = {}
    for key, value in (job.get("tags") or {}).items():
        if str(key).startswith("trainspec_"):
            note(("tags", key), "written by trainspec when it compiles: dropped")
        else:
            tags[str(key)] = str(value)
    if tags:
        azureml["tags"] = tags
    if job.get("identity"):
        identity = job["identity"]
        azureml["identity"] = {k: identity[k] for k in ("type", "client_id") if identity.get(k)}
        for key in identity:
            if key not in ("type", "client_id"):
                note(("identity", key), "has no place in a spec: not carried")
    if job.get("services"):
        azureml["services"] = {}
        for name, service in job["services"].items():
            azureml["services"][name] = _service(name, service, note)
    limits = job.get("limits") or {}
    for key in limits:
        if key != "timeout":
            note(("limits", key), "has no place in a spec: not carried")
    queue = job.get("queue_settings") or {}
    for key in queue:
        if key in ("job_tier", "priority"):
            azureml[key] = str(queue[key]).lower()
        else:
            note(("queue_settings", key), "has no place in a spec: not carried")


# the properties azure-ai-ml sends for a service's own fields: said the spec's way
_SERVICE_PROPERTIES = {"logDir": ("tensor_board", "log_dir"), "sshPublicKeys": ("ssh", "ssh_public_keys")}


def _service(name: str, service, note) -> Dict[str, Any]:
    out = {k: service[k] for k in ("type", "nodes", "port", "log_dir", "ssh_public_keys")
           if service.get(k) is not None}
    for key, value in (service.get("properties") or {}).items():
        own = _SERVICE_PROPERTIES.get(str(key))
        if own is not None and own[0] == service.get("type") and own[1] not in out:
            out[own[1]] = str(value)
        else:
            out.setdefault("properties", {})[str(key)] = str(value)
    for key in service:
        if key not in ("type", "nodes", "port", "log_dir", "ssh_public_keys", "properties"):
            note(("services", name, key), "has no place in a spec: not carried")
    return out


def spec_text(imported: Imported, job_file: str) -> str:
    """The spec as YAML, written by ruamel.yaml, with a header that says where it came from."""
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.default_flow_style = False
    yaml.width = 4096  # a command stays on one line, as written
    buffer = io.StringIO()
    yaml.dump(imported.spec, buffer)
    header = (f"# Imported from {Path(job_file).as_posix()} by `trainspec import`: review it, then delete that job "
              "file.\n")
    return header + buffer.getvalue()
