"""`trainspec import JOB.yml`: an Azure ML command job a team already has, as a spec.

The inverse of azureml.py, field by field (a table, read top to bottom):

====================================  ==================================================
job.yml                               spec
====================================  ==================================================
display_name (or the file's name)     name (made a spec name: lowercase, [a-z0-9_-])
description, experiment_name, tags    description, targets.azureml.experiment_name/tags
code                                  code (relative to the spec)
command                               command: ${{inputs.x}} -> {{ inputs.x }}; an
                                      MPI-env wrapper (aml_mpi_env.py ...) dropped: the
                                      shim does its work
environment                           environment.azureml | image (+ conda_file) | build
compute / resources.instance_type     targets.azureml.compute / resources.sku
resources.instance_count, shm_size    resources.nodes, shm_size
distribution pytorch | mpi            launcher per-process | mpi, procs_per_node
distribution tensorflow               framework tensorflow, parameter_server_count
environment_variables                 env
inputs, outputs                       inputs (literals stay literals), outputs
identity, services                    targets.azureml.identity, services
limits.timeout, queue_settings        targets.azureml.timeout, job_tier, priority
====================================  ==================================================

Whatever has no place in a spec is reported by field, with its line in the job file, never
dropped silently. The spec is written by ruamel.yaml (every string escaped by it).
"""

from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..diagnostics import Diagnostic, SpecError, SpecPath, error, warning
from ..runtime import shim as contract
from ..schema.fields import ENV_NAME_PATTERN, is_remote
from ..schema.validate import RESERVED_ENV

TARGET = "azureml"  # the target an imported job is validated for: the platform it came from
_REF = re.compile(r"\$\{\{\s*(inputs|outputs)\.([A-Za-z_]\w*)\s*\}\}")
_OTHER_REF = re.compile(r"\$\{\{[^}]*\}\}")
# a hand-written wrapper that exports torch's variables from Open MPI's (the shim does that now):
# `python aml_mpi_env.py python train.py`, `python mpi_env.py && python train.py`, `source set_env.sh; ...`
_WRAPPER = re.compile(r"^\s*(?:python3?\s+|source\s+|\.\s+)(?P<script>[\w./-]*(?:mpi_env|dist_env|set_env|"
                      r"env_setup|setup_env)\w*\.(?:py|sh))\s*(?:&&|;)?\s*(?P<rest>\S.*)$", re.S)
_PORTABLE_ENV = re.compile(ENV_NAME_PATTERN)
_CARRIED = {"$schema", "type", "name", "display_name", "description", "experiment_name", "tags", "code",
            "command", "environment", "compute", "resources", "distribution", "environment_variables", "inputs",
            "outputs", "identity", "services", "limits", "queue_settings"}


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
    from ..schema.loader import load_file

    try:
        doc = load_file(job_file)
    except SpecError as exc:
        return Imported(notes=exc.diagnostics)
    result = Imported()

    def note(path: SpecPath, message: str, hint: Optional[str] = None, *, fatal: bool = False) -> None:
        result.notes.append(doc.locate((error if fatal else warning)(path, message, hint)))

    job = doc.data if isinstance(doc.data, dict) else None
    if job is None or job.get("type", "command") != "command":
        note(("type",) if job else (), "not an Azure ML command job: trainspec imports `type: command` jobs",
             fatal=True)
        return result
    job_dir = doc.path.parent
    spec_dir = Path(spec_file).resolve().parent
    spec = result.spec

    def relative(path: str) -> str:
        return Path(os.path.relpath((job_dir / path).resolve(), spec_dir)).as_posix()

    for key in job:
        if key not in _CARRIED:
            note((key,), "has no place in a spec: not carried", "set it on the job after compiling, or drop it")
    spec["version"] = 1
    shown = str(job.get("display_name") or job.get("name") or Path(job_file).stem)
    spec["name"] = _spec_name(shown)
    if spec["name"] != shown and job.get("display_name"):
        note(("display_name",), f"becomes the spec name '{spec['name']}' (a spec name is lowercase letters, "
             "digits, - and _): the compiled job's display_name")
    if job.get("description"):
        spec["description"] = str(job["description"])
    if "code" not in job:
        note((), "has no code: a spec needs the folder the command runs in", "add code: ./src", fatal=True)
    else:
        code = job["code"]
        code = code.get("local_path") if isinstance(code, dict) else code
        if not isinstance(code, str) or is_remote(code):
            note(("code",), f"'{code}' is not a local folder: a spec's code is uploaded from this machine",
                 fatal=True)
        else:
            spec["code"] = relative(code)
    spec["command"] = _command(job.get("command"), note)
    azureml: Dict[str, Any] = {}
    distribution = job.get("distribution") or {}
    kind = str(distribution.get("type", "")).lower() if isinstance(distribution, dict) else ""
    if kind == "tensorflow":
        spec["framework"] = "tensorflow"
    else:
        note(("distribution",) if "distribution" in job else ("command",),
             "a job does not say its framework: framework: pytorch assumed",
             "set framework: lightning (the num_nodes/devices check), deepspeed, huggingface or tensorflow")
    spec["resources"] = _resources(job, kind, distribution, azureml, note)
    if kind in ("pytorch", "mpi"):
        spec["distribution"] = {"launcher": "per-process" if kind == "pytorch" else "mpi"}
    elif kind == "" and job.get("distribution") is None:
        spec["distribution"] = {"launcher": "per-process"}
    elif kind != "tensorflow":
        note(("distribution", "type"), f"distribution {kind} has no trainspec launcher", fatal=True)
    spec["environment"] = _environment(job.get("environment"), relative, note, job_dir)
    env = job.get("environment_variables") or {}
    if env:
        spec["env"] = {}
        for key, value in env.items():
            if key in RESERVED_ENV or str(key).startswith((contract.ENV_PREFIX, "PL_TRAINER_")):
                note(("environment_variables", key), f"{key} is set by the trainspec shim: dropped")
            elif not _PORTABLE_ENV.match(str(key)):
                note(("environment_variables", key), f"'{key}' is not a variable name a shell can set", fatal=True)
            elif any(mark in str(value) for mark in ("{{", "{%", "{#")):
                note(("environment_variables", key), "holds text a spec would read as a template", fatal=True)
            else:
                spec["env"][str(key)] = str(value) if not isinstance(value, bool) else str(value).lower()
        if not spec["env"]:
            del spec["env"]
    inputs, outputs = _inputs(job.get("inputs") or {}, relative, note), _outputs(job.get("outputs") or {}, note)
    if inputs:
        spec["inputs"] = inputs
    if outputs:
        spec["outputs"] = outputs
    _azureml_settings(job, azureml, note)
    if azureml.get("job_tier") == "spot":  # said the spec's way: resources.spot
        del azureml["job_tier"]
        spec["resources"]["spot"] = True
    if not job.get("experiment_name"):
        note((), f"has no experiment_name: the compiled job names its experiment '{spec['name']}' (the spec's "
             "name), where Azure ML would have used the job folder's name", "set targets.azureml.experiment_name")
    spec["targets"] = {"azureml": azureml}
    result.notes.sort(key=lambda d: (d.line or 0, d.col or 0))
    return result


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
    text = _REF.sub(lambda m: "{{ %s.%s }}" % (m.group(1), m.group(2)), text)
    for other in _OTHER_REF.findall(text):
        note(("command",), f"{other} is not an input or output reference: a spec cannot carry it", fatal=True)
    rest = _OTHER_REF.sub("", text)
    if "{%" in rest or "{#" in rest or re.search(r"\{\{(?!\s*(?:inputs|outputs)\.)", rest):
        note(("command",), "the command holds text a spec would read as a template", fatal=True)
    return text


def _resources(job, kind, distribution, azureml, note) -> Dict[str, Any]:
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
    if kind != "tensorflow":
        out["procs_per_node"] = per_instance
    if not instance_type:
        # a cluster fixes the VM size: say the GPU count the job's processes imply
        out["gpus_per_node"] = per_instance if kind != "tensorflow" else 1
        note(("resources",), f"the cluster's GPU count is not in the job: assumed {out['gpus_per_node']} per node "
             "(one per process)", "set resources.gpus_per_node (0: CPU) or resources.sku in the spec")
    if resources.get("shm_size"):
        out["shm_size"] = str(resources["shm_size"])
    for key in resources:
        if key not in ("instance_count", "instance_type", "shm_size"):
            note(("resources", key), "has no place in a spec: not carried")
    return out


def _environment(environment, relative, note, job_dir: Path) -> Dict[str, Any]:
    if isinstance(environment, str) and environment.startswith("file:"):
        # an environment in a file of its own (`environment: file:./env.yml`); its paths are
        # relative to that file
        from ruamel.yaml import YAML

        where = (job_dir / environment[len("file:"):]).resolve()
        try:
            loaded = YAML(typ="safe").load(where.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            note(("environment",), f"cannot read the environment file {where.name}: {exc}", fatal=True)
            return {}
        if not isinstance(loaded, dict):
            note(("environment",), f"{where.name} is not an environment definition", fatal=True)
            return {}
        base = where.parent

        def from_there(path: str) -> str:
            return relative(os.path.relpath(base / path, job_dir))

        return _environment(loaded, from_there, note, base)
    if isinstance(environment, str):
        return {"azureml": environment}
    if not isinstance(environment, dict):
        note(("environment",), "a command job needs an environment", fatal=True)
        return {}
    out: Dict[str, Any] = {}
    if environment.get("build"):
        build = environment["build"]
        where = str(build.get("path") or build.get("local_path") or "")  # local_path: the older spelling
        out["build"] = {"path": where if is_remote(where) else relative(where)}
        if build.get("dockerfile_path"):
            out["build"]["dockerfile_path"] = build["dockerfile_path"]
    if environment.get("image"):
        out["image"] = str(environment["image"])
    conda = environment.get("conda_file")
    if isinstance(conda, str):
        out["conda_file"] = relative(conda)
    elif conda is not None:
        note(("environment", "conda_file"), "an inline conda file is not carried: write it to a file",
             fatal=True)
    for key in environment:
        if key not in ("image", "conda_file", "build", "name", "version", "description", "tags", "os_type"):
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
        entry: Dict[str, Any] = {"path": path if is_remote(path) else relative(path)}
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


def _azureml_settings(job, azureml, note) -> None:
    if job.get("experiment_name"):
        azureml["experiment_name"] = str(job["experiment_name"])
    tags = {str(k): str(v) for k, v in (job.get("tags") or {}).items() if not str(k).startswith("trainspec_")
            and k not in ("framework", "launcher", "backend")}
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
            azureml["services"][name] = {k: service[k] for k in ("type", "nodes", "log_dir", "ssh_public_keys")
                                         if service.get(k) is not None}
            for key in service:
                if key not in ("type", "nodes", "log_dir", "ssh_public_keys"):
                    note(("services", name, key), "has no place in a spec: not carried")
    limits = job.get("limits") or {}
    if limits.get("timeout"):
        azureml["timeout"] = int(limits["timeout"])
    for key in limits:
        if key != "timeout":
            note(("limits", key), "has no place in a spec: not carried")
    queue = job.get("queue_settings") or {}
    for key in queue:
        if key in ("job_tier", "priority"):
            azureml[key] = str(queue[key]).lower()
        else:
            note(("queue_settings", key), "has no place in a spec: not carried")


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
