"""HPC Pack job XML for Linux GPU nodes: ``job submit /jobfile:job.xml``.

What the scheduler and its Linux node agent really do (../shared/reference/hpcpack.md) fixes
the shape of the job:

- whole nodes: ``UnitType="Node"``, ``MinNodes=MaxNodes=nodes``, ``IsExclusive`` -- a task is
  pinned by cgroup to the cores it was allocated, and GPUs are not a schedulable resource;
- one Basic task per node (``MinNodes=MaxNodes=1``): a multi-node task runs its command on the
  first node only. Each task runs ``<python> <shim> -- <python> -m torch.distributed.run ...``
  (``-- bash -c '...'`` when the command expands ``$...``: base.under_shim) through bash, as the job owner, with the agent's PATH (nothing activated: ``python`` and
  ``setup`` say what to use);
- rendezvous: each task carries its node rank (``TRAINSPEC_NODE_RANK``). With explicit
  ``nodes`` the first node's name is baked in as the master; otherwise the shim elects node
  0's host through ``<shared_dir>/.trainspec/<job id>/`` on the shared storage
  (docs/runtime.md) and hands torchrun the rank and master through ``PET_*``;
- ``WorkDirectory``, ``StdOutFilePath`` and ``StdErrFilePath`` on the shared storage: without
  them a multi-node task cannot ``cd`` and the output is deleted on success.

Layout on the shared storage (``stage.sh`` makes it)::

    <shared_dir>/<folder>/code/            the spec's code directory (WorkDirectory)
    <shared_dir>/<folder>/trainspec_shim.py
    <shared_dir>/<folder>/trainspec_hpcpack_election.py   the shim's master election
    <shared_dir>/logs/<name>/<job id>.node-<i>.out|.err
    <shared_dir>/.trainspec/               rendezvous files

``<folder>`` is what a job runs, and it is the job's own: ``submit`` stages it under the job's
name (``<spec name>-<digest>``, jobs/api.py job_name) and names it in the job it creates
(submit.py named_job_xml), so a later submit of a changed spec stages beside it, never over
it, and a queued job keeps its copy. The compiled job.xml cannot name that folder itself (the
digest is computed over job.xml), so it names ``<shared_dir>/<spec name>/``, where ``bash
stage.sh`` by hand stages, and its tasks reach the folder through two values submit sets through
the XML: each task's ``WorkDirectory`` and its ``TRAINSPEC_STAGED_DIR`` (which the command line
expands, in double quotes, to start the shim).
"""

from __future__ import annotations

import shlex
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Dict, List, Optional

from trainspec.core.diagnostics import Diagnostic, error
from trainspec.core.fields import mebibytes
from trainspec.core.patterns import Lazy
from trainspec.schema import skus
from trainspec.schema.validate import ValidSpec
from trainspec.compiler import base, capabilities, emit
from trainspec.compiler.base import contract
from trainspec.targets.hpcpack.settings import NAME
from trainspec.compiler.capabilities import Feature, problem, unsupported

JOB_FILE = "job.xml"
STAGE_FILE = "stage.sh"
NAMESPACE = "http://schemas.microsoft.com/HPCS2008R2/scheduler/"
VERSION = "3.000"
CODE_FOLDER = "code"  # below the job's staged folder: the code, and where every task starts
ENV_STAGED_DIR = contract.ENV_STAGED_DIR  # the job's staged folder on the nodes: the shim starts there
SUBMIT = "job submit /jobfile:{dir}/" + JOB_FILE + "  (after: bash {dir}/" + STAGE_FILE + ", which stages the code)"

# XML 1.0 has no way to carry C0 controls (but tab, newline, carriage return) or non-characters;
# C1 controls and the Unicode line separators are turned into line ends by readers.
_XML_UNSAFE = Lazy("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\ufffe\uffff\ud800-\udfff]")
_XML_LINE_ENDS = str.maketrans("", "", "\t\n\r")
_NODE_NAME = Lazy(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
MAX_RUNTIME = 2 ** 31 - 1  # the job XML's RuntimeSeconds is an xs:int (../shared/reference/hpcpack/xsd)


def xml_unsafe(text: str) -> Optional[str]:
    """The first character of ``text`` a job XML cannot carry unchanged, or None. Text of ' ' to
    '~', tabs and line ends (what nearly every spec writes) is answered without the pattern."""
    if text.isascii() and text.translate(_XML_LINE_ENDS).isprintable():
        return None
    bad = _XML_UNSAFE.search(text)
    return bad.group() if bad else None


def _settings(valid: ValidSpec):
    return valid.spec.targets.hpcpack


def refs_for(valid: ValidSpec):
    """How ``{{ inputs.x }}`` / ``{{ outputs.x }}`` render in the command: the path of its volume
    (targets.hpcpack.volumes), else its own path on the nodes (quoted for bash); an output with
    neither defaults to ``<shared_dir>/outputs/<name>/$CCP_JOBID/x``, on the shared storage, not in
    the compiled job folder (``$CCP_JOBID`` expanded by bash on the node; the rest is validated to
    need no quoting)."""
    outputs = _Layout(_settings(valid).shared_dir, valid.spec.name).outputs
    return base.node_path_refs(valid, lambda name: f"{outputs}/$CCP_JOBID/{name}", _settings(valid).volumes)


# What HPC Pack cannot run, by feature (capabilities.py: the catalogue, the matrix in docs/capabilities.md)
_NODES_SOFTWARE = "set targets.hpcpack.python / setup; the nodes must have the packages"
_ONE_TASK_PER_NODE = "HPC Pack runs one task per node: use launcher: per-node (torchrun)"
_VOLUME = "say where it is on the nodes' shared storage: targets.hpcpack.volumes.{name}: {{path: /shared/...}}"
CANNOT_RUN = {
    Feature.ENV_DATA_REF: unsupported(),  # ${{outputs.x}} in a variable is Azure ML's alone
    Feature.TENSORFLOW: unsupported(),
    Feature.LAUNCHER_PER_PROCESS: unsupported("launcher per-process", _ONE_TASK_PER_NODE),
    Feature.LAUNCHER_MPI: unsupported("launcher mpi", _ONE_TASK_PER_NODE),
    Feature.SPOT: unsupported("spot capacity: the job runs on the cluster's nodes",
                              "remove resources.spot, or compile this spec for azureml only", fatal=False),
    Feature.ENV_AZUREML: unsupported(hint="set targets.hpcpack.python (and setup) to what the nodes have"),
    Feature.ENV_BUILD: unsupported("a Docker build context: tasks run on the nodes' own software",
                                   "set targets.hpcpack.python / setup", fatal=False),
    Feature.ENV_IMAGE: unsupported("environment.image: tasks run on the nodes' own software", _NODES_SOFTWARE,
                                   fatal=False),
    Feature.ENV_CONDA_FILE: unsupported("environment.conda_file: tasks run on the nodes' own software, and "
                                        "nothing would create the environment",
                                        "list the packages under environment.pip (installed on every node before "
                                        "the command), or " + _NODES_SOFTWARE),
    Feature.SHM_SIZE: unsupported("a shared-memory size: tasks run on the host", None, fatal=False),
    Feature.INPUT_EVAL_MODE: unsupported(fatal=False),
    Feature.OUTPUT_ASSET_NAME: unsupported(fatal=False),
    Feature.INPUT_URL: unsupported(hint=_VOLUME),
    Feature.INPUT_DATA_ASSET: unsupported(hint=_VOLUME),
    Feature.INPUT_RELATIVE: problem("on HPC Pack an input is a path on the nodes: '{path}' is relative", _VOLUME),
    Feature.OUTPUT_NOT_ABSOLUTE: unsupported(hint=_VOLUME),
}


def cannot_express(valid: ValidSpec) -> List[Diagnostic]:
    """What HPC Pack cannot run: its table (CANNOT_RUN), then what depends on its settings and the command."""
    settings = _settings(valid)
    out = capabilities.check(NAME, CANNOT_RUN, valid, volumes=settings.volumes if settings is not None else ())
    if settings is None:
        out.append(error(("targets", "hpcpack"), "compiling for hpcpack needs targets.hpcpack.shared_dir",
                         "add targets: {hpcpack: {shared_dir: /app}} -- storage every node mounts"))
        return out
    out += base.time_limit_errors(NAME, time_limit(valid), MAX_RUNTIME, "RuntimeSeconds (an xs:int)")
    launcher = valid.launcher
    out += base.command_variable_errors(NAME, valid, launcher)
    out += base.master_port_fixed(valid, rendezvous_port(valid), "targets.hpcpack.rdzv_port overrides it",
                                  "remove one of the two, or give both the same port")
    if launcher == "per-node":
        out += base.torchrun_errors(valid, refs_for(valid), "HPC Pack runs the command under torchrun",
                                    "write `python train.py ...`; put preparation in targets.hpcpack.setup")
    for path, text in _xml_strings(valid):
        bad = xml_unsafe(text)
        if bad is not None:
            out.append(error(path, f"contains the character U+{ord(bad):04X}, which an HPC Pack job XML "
                                   "cannot carry unchanged", "remove the control character"))
    if settings.nodes is not None:
        if len(settings.nodes) != valid.nodes:
            out.append(error(("targets", "hpcpack", "nodes"),
                             f"{len(settings.nodes)} node names for resources.nodes: {valid.nodes}",
                             "list exactly one name per node, or leave nodes out and use node_group"))
        for i, node in enumerate(settings.nodes):
            if not _NODE_NAME.fullmatch(node):
                out.append(error(("targets", "hpcpack", "nodes", i), f"'{node}' is not an HPC Pack node name"))
        if len(set(n.upper() for n in settings.nodes)) != len(settings.nodes):
            out.append(error(("targets", "hpcpack", "nodes"), "a node is listed twice: one task per node"))
    return out


def _xml_strings(valid: ValidSpec):
    """Every spec string that lands in the job XML, with its spec path."""
    spec = valid.spec
    yield ("command",), spec.command
    for key, value in spec.env.items():
        yield ("env", key), value
    for key, value in spec.vars.items():
        if isinstance(value, str):
            yield ("vars", key), value
    settings = _settings(valid)
    for field in ("setup", "python", "node_group", "job_template", "project"):
        value = getattr(settings, field)
        if value:
            yield ("targets", NAME, field), value
    for name, volume in settings.volumes.items():
        yield ("targets", NAME, "volumes", name, "path"), volume.path
    for name, item in spec.inputs.items():
        if name in settings.volumes:
            continue
        if item.path is not None:
            yield ("inputs", name, "path"), item.path
        elif isinstance(item.value, str):
            yield ("inputs", name, "value"), item.value


def _keep_carriage_returns(xml: str) -> str:
    """ElementTree writes a carriage return in element text raw, and every XML reader turns a raw
    one into a line feed (end-of-line handling): `a\r\nb` in an env value would arrive as `a\nb`.
    Its character reference survives. ElementTree already writes one in attributes, so a raw
    carriage return in its output can only be element text."""
    return xml.replace("\r", "&#13;")


def lower(valid: ValidSpec, out_dir: Path) -> base.Artifact:
    spec = valid.spec
    settings = _settings(valid)
    layout = _Layout(settings.shared_dir, spec.name)
    command = _command(valid, layout)

    ET.register_namespace("", NAMESPACE)
    job = ET.Element(_tag("Job"), _job_attributes(valid))
    ET.SubElement(job, _tag("Dependencies"))
    tasks = ET.SubElement(job, _tag("Tasks"))
    shared_env = _environment(valid, layout)
    for node_rank in range(valid.nodes):
        task = ET.SubElement(tasks, _tag("Task"), _task_attributes(valid, layout, node_rank, command))
        variables = ET.SubElement(task, _tag("EnvironmentVariables"))
        env = dict(shared_env)
        env[contract.ENV_NODE_RANK] = str(node_rank)
        for name, value in env.items():
            variable = ET.SubElement(variables, _tag("Variable"))
            ET.SubElement(variable, _tag("Name")).text = name
            ET.SubElement(variable, _tag("Value")).text = value
    ET.indent(job, space="  ")
    # an XML comment cannot hold "--": the header writes a path with one as a JSON string that escapes it
    comment = " ".join(emit.header_lines(valid.source.display, valid.source.digest, NAME))
    xml = ('<?xml version="1.0" encoding="utf-8"?>\n'
           + ET.tostring(ET.Comment(f" {comment} "), encoding="unicode") + "\n"
           + _keep_carriage_returns(ET.tostring(job, encoding="unicode")) + "\n")
    files = (
        base.OutFile(JOB_FILE, xml.encode("utf-8")),
        base.OutFile(STAGE_FILE, _stage_script(valid, layout, out_dir).encode("utf-8"), executable=True),
        base.shim_file(NAME),
        base.runtime_file(contract.ELECTION_FILE, base.RUNTIME_DIR / "hpcpack_election.py"),
        *base.secrets_files(valid),
    )
    return base.Artifact(target=NAME, name=spec.name, files=files, submit=SUBMIT)


class _Layout:
    """Where things live on the shared storage. What the tasks run (the code, the shim and its
    helpers) is in the job's staged folder, which the command line reaches through
    ``$TRAINSPEC_STAGED_DIR``; logs, outputs and rendezvous files are the spec's, kept by job id."""

    def __init__(self, shared_dir: str, name: str):
        root = shared_dir.rstrip("/") or "/"
        self.root = root
        self.job = staged_dir(shared_dir, name)  # by hand; submit names the job's own (submit.py named_job_xml)
        self.code = f"{self.job}/{CODE_FOLDER}"
        staged = f'"${ENV_STAGED_DIR}"'  # expanded by the task's bash, whatever the folder's name
        self.shim = f"{staged}/{shlex.quote(base.SHIM_FILE)}"
        self.secrets = f"{staged}/{shlex.quote(base.SECRETS_FILE)}"
        self.logs = f"{root}/logs/{name}"
        self.rendezvous = f"{root}/.trainspec"
        self.outputs = f"{root}/outputs/{name}"


def staged_dir(shared_dir: str, folder: str) -> str:
    """The folder a job runs from on the shared storage: ``<shared_dir>/<folder>``, where
    ``folder`` is the job's name (submit) or the spec's (the compiled job.xml, stage.sh by hand)."""
    return f"{shared_dir.rstrip('/')}/{folder}"


def _tag(name: str) -> str:
    return f"{{{NAMESPACE}}}{name}"


def time_limit(valid: ValidSpec):
    """The job's RuntimeSeconds: targets.hpcpack.runtime, else the spec's timeout (None: none)."""
    return base.time_limit(valid, NAME, "runtime")


def _job_attributes(valid: ValidSpec) -> Dict[str, str]:
    settings = _settings(valid)
    n = str(valid.nodes)
    attrs = {"Version": VERSION, "Name": valid.name, "UnitType": "Node", "MinNodes": n, "MaxNodes": n,
             "AutoCalculateMin": "false", "AutoCalculateMax": "false", "IsExclusive": "true",
             "FailOnTaskFailure": "true"}
    # whole nodes: CPUs and memory select the nodes (those with at least this much), the job has them all
    resources = valid.spec.resources
    if resources.cpus_per_node is not None:
        attrs["MinCoresPerNode"] = str(resources.cpus_per_node)
    if resources.memory_per_node is not None:
        attrs["MinMemory"] = str(mebibytes(resources.memory_per_node))  # MB, as the scheduler counts
    if settings.node_group:
        attrs["NodeGroups"] = settings.node_group
    if settings.nodes:
        attrs["RequestedNodes"] = ",".join(settings.nodes)
    if settings.priority:
        attrs["Priority"] = settings.priority
    limit = time_limit(valid)
    if limit is not None:
        attrs["RuntimeSeconds"] = str(limit.seconds)
    if settings.job_template:
        attrs["JobTemplate"] = settings.job_template
    if settings.project:
        attrs["Project"] = settings.project
    return attrs


def _task_attributes(valid: ValidSpec, layout: _Layout, node_rank: int, command: str) -> Dict[str, str]:
    settings = _settings(valid)
    attrs = {"Version": VERSION, "Name": f"node-{node_rank}", "Type": "Basic", "MinNodes": "1", "MaxNodes": "1",
             "IsExclusive": "true", "IsRerunnable": "false"}
    if settings.nodes:
        attrs["RequiredNodes"] = settings.nodes[node_rank]
    # Std* paths are unquoted bash redirections on the node: $CCP_JOBID expands there
    attrs["WorkDirectory"] = layout.code
    attrs["StdOutFilePath"] = f"{layout.logs}/$CCP_JOBID.node-{node_rank}.out"
    attrs["StdErrFilePath"] = f"{layout.logs}/$CCP_JOBID.node-{node_rank}.err"
    attrs["CommandLine"] = command
    return attrs


def _python(valid: ValidSpec) -> List[str]:
    return shlex.split(_settings(valid).python)


def _command(valid: ValidSpec, layout: _Layout) -> str:
    """The bash line every task runs. Our words go through shlex; the user's command after
    its interpreter and their ``setup`` line are shell they wrote, kept verbatim."""
    spec = valid.spec
    settings = _settings(valid)
    python = _python(valid)
    user = valid.render(("command",), spec.command, refs_for(valid)).strip()
    shim = base.with_secrets(valid, f"{shlex.join([*python, *base.SHIM_FLAGS])} {layout.shim}", shlex.join(python),
                             layout.secrets)
    if valid.launcher == "per-process" or base.own_spawner(user):
        # one process: the task is it, nothing wraps it (ValidSpec.launcher); accelerate launch /
        # deepspeed per node: the shim hands it the world as flags
        line = base.under_shim(shim, user, valid)
    else:
        # node rank, master address and port (TRAINSPEC_MASTER_PORT = rendezvous_port) reach torchrun
        # from the shim as PET_NODE_RANK / PET_MASTER_ADDR / PET_MASTER_PORT
        torchrun = base.torchrun_line(valid, user, (*python, "-m", "torch.distributed.run"), python=shlex.join(python))
        line = base.under_shim(shim, torchrun, valid)
    if settings.setup:
        line = f"{settings.setup} && {line}"
    return line


def _environment(valid: ValidSpec, layout: _Layout) -> Dict[str, str]:
    settings = _settings(valid)
    env = base.job_env(valid, refs_for(valid), valid.launcher, rendezvous_port(valid))
    env.update(base.secret_env(valid, NAME))  # where each secret is kept: the shim reads it on the node
    env.update(base.pip_env(valid))  # the shim installs them once per node, before the command
    env[ENV_STAGED_DIR] = layout.job
    if settings.nodes:
        env[contract.ENV_MASTER_ADDR] = settings.nodes[0]
    else:
        env[contract.ENV_RDZV_DIR] = layout.rendezvous
    return env


def _stage_script(valid: ValidSpec, layout: _Layout, out_dir: Path) -> str:
    """Copies the code, the shim and its election file to the job's folder on the shared storage
    and makes the log folder. Run it on any machine that mounts the shared storage, from the
    folder it sits in: ``bash stage.sh [FOLDER]``, FOLDER the job's name (submit gives it) or, by
    hand, the spec's. The copy is made aside and moved into place whole, replacing what a
    folder of that name held (a submit that failed before its job was queued): a task never
    starts in a half-copied folder, and nothing of an older copy stays."""
    code = base.relative(valid.resolve(valid.spec.code), out_dir)
    q = shlex.quote
    name = q(valid.name)
    lines = [
        "#!/usr/bin/env bash",
        *[f"# {line}" for line in emit.header_lines(valid.source.display, valid.source.digest, NAME)],
        "# Stage the job on the shared storage, then submit job.xml from a Windows client:",
        f"#   job submit /jobfile:{JOB_FILE}",
        "# bash stage.sh [FOLDER]: the job's folder below the shared storage, the spec's name unless",
        "# given (trainspec submit gives the job's name, and names that folder in the job it creates)",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        f"shared=${{TRAINSPEC_SHARED_DIR:-{q(layout.root)}}}",
        f"folder=${{1:-{name}}}",
        'case $folder in ""|.*|*/*) echo "stage.sh: $folder is not a folder name" >&2; exit 2;; esac',
        f'mkdir -p "$shared"/logs/{name} "$shared"/.trainspec "$shared"/outputs/{name}',
        'staging="$shared/.trainspec/staging.$folder.$$"',
        f'rm -rf "$staging" && mkdir "$staging" "$staging"/{q(CODE_FOLDER)}',
        f'cp -R {q(code)}/. "$staging"/{q(CODE_FOLDER)}/',
        *[f'cp {q(item)} "$staging"/{q(item)}'
          for item in (base.SHIM_FILE, contract.ELECTION_FILE, *[f.path for f in base.secrets_files(valid)])],
        'rm -rf "${shared:?}/$folder" && mv "$staging" "$shared/$folder"',
        'echo "staged in $shared/$folder"',
    ]
    return "\n".join(lines) + "\n"


# --- what plan and run --local need --------------------------------------------------------

def rendezvous_port(valid: ValidSpec) -> int:
    """The port torchrun's rendezvous opens on node 0: targets.hpcpack.rdzv_port when written (the
    target's own word wins), else distribution.master_port when written, else HPC Pack's default."""
    settings = _settings(valid)
    if "rdzv_port" in settings.__pydantic_fields_set__:
        return settings.rdzv_port
    written = base.master_port_written(valid)
    return settings.rdzv_port if written is None else written


def plan_port(valid: ValidSpec) -> str:
    return str(rendezvous_port(valid))


def plan_facts(valid: ValidSpec) -> base.PlanFacts:
    """The job's node group (or requested nodes, template), RuntimeSeconds and Priority, as job.xml has them."""
    attrs = _job_attributes(valid)
    where = (f"node group {attrs['NodeGroups']}" if "NodeGroups" in attrs else "the cluster's default node group")
    if "RequestedNodes" in attrs:
        where += f", requested nodes {attrs['RequestedNodes']}"
    if "JobTemplate" in attrs:
        where += f", job template {attrs['JobTemplate']}"
    limit = time_limit(valid)
    priority = (f"Priority={attrs['Priority']}" if "Priority" in attrs else
                "the job template's default priority (Normal unless it says another)")
    if valid.spec.resources.spot:
        priority += base.plan_spot_ignored(NAME, "the job runs on the cluster's own nodes")
    return base.PlanFacts(
        where=where,
        time_limit=(limit.plan_text(f"RuntimeSeconds={limit.seconds}") if limit is not None
                    else base.plan_no_time_limit("targets.hpcpack.runtime")),
        priority=priority,
        image=plan_image(valid),
        gpus=base.plan_gpus(valid, hardware(valid)))


def plan_settings(valid: ValidSpec) -> Dict[str, str]:
    attrs = _job_attributes(valid)
    chosen = [f"{key}={attrs[key]}" + (" MB" if key == "MinMemory" else "") for key in ("MinCoresPerNode", "MinMemory")
              if key in attrs]
    lines = {"nodes with at least": ", ".join(chosen)} if chosen else {}
    lines.update(base.plan_data(valid, refs_for(valid)))  # where the data is: a volume's, the spec's, shared_dir
    lines["shim"] = base.plan_shim(_settings(valid).python)
    layout = _Layout(_settings(valid).shared_dir, valid.spec.name)
    lines["code"] = (f"{staged_dir(layout.root, '<job name>')}/{CODE_FOLDER}, copied at submit: the job's own, "
                     f"a queued job keeps it (bash {STAGE_FILE} by hand: {layout.code})")
    return lines


def plan_image(valid: ValidSpec) -> str:
    """HPC Pack runs no container: every task runs the nodes' own software."""
    return "no container: the nodes' own software" + (" (environment.image is not run here)"
                                                        if valid.spec.environment.image else "")


def local_settings(settings: Dict[str, Any], workdir: Path) -> Dict[str, Any]:
    """The "shared storage" is a folder of the run; the nodes' python is this one."""
    import sys

    settings["shared_dir"] = str(workdir / "shared")
    settings["python"] = shlex.quote(sys.executable)
    settings.pop("setup", None)
    return settings


def hardware(valid: ValidSpec) -> base.Hardware:
    """The sku is what the job gets when its node group is one the team catalog maps; otherwise
    the node group, the requested nodes or the scheduler decide."""
    settings = _settings(valid)
    placed = valid.placement(NAME)
    if placed is not None:
        return base.Hardware(True, f"node group {placed.value}: {placed.size}, in {skus.TEAM_FILE}")
    by = (f"the node group {settings.node_group}" if settings.node_group else
          "the requested nodes" if settings.nodes else "the scheduler (any node)")
    return base.Hardware(False, f"{by} decides the hardware",
                         f"set targets.hpcpack.node_group and map it to its VM size under node_groups: in "
                         f"{skus.TEAM_FILE}")


def cost_basis(valid: ValidSpec) -> base.CostBasis:
    """The node group's nodes the job holds: the team's own, never a bill per job."""
    return base.nodes_cost(valid, time_limit(valid), team_nodes="the node group's nodes")
