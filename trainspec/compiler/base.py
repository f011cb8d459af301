"""What every target shares: the ``Target`` its lower.py declares, the Artifact it returns, how it
reports what it cannot express, who starts the processes, the shim it ships and the variables
the shim checks.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, List, Mapping, Optional, Tuple

from trainspec.core.diagnostics import Diagnostic, SpecPath, error, warning
from trainspec.core.fields import duration_text
from trainspec.core.patterns import Lazy
from trainspec.core.records import Record
from trainspec.runtime import shim as contract  # the TRAINSPEC_* names and default ports, written once
from trainspec.runtime import secret_refs  # TRAINSPEC_SECRETS: what the secrets helper reads
from trainspec.runtime import shim_launch as launch_flags  # the flags the shim adds, read the same way
from trainspec.schema.validate import LIGHTNING_VARIABLES, TENSORFLOW, ValidSpec, neutral_refs, secret_reference

SHIM_FILE = "trainspec_shim.py"
# The shim starts isolated: no site-packages, no PYTHON* variables, no user site. It needs only
# the standard library, so nothing in the job's Python environment can break it, and skipping
# site halves its start-up (README, "Speed"). The command it execs gets the environment as is.
SHIM_FLAGS = ("-I", "-S")


def plan_shim(python: str) -> str:
    """What ``plan`` says starts the shim (``python``: the target's setting)."""
    return f"{shlex.join(shlex.split(python))} {' '.join(SHIM_FLAGS)} {SHIM_FILE} (needs Python 3.8+)"


class OutFile(Record):
    __slots__ = ("path", "data", "executable", "runtime", "embedded", "shown")

    def __init__(self, path: str, data: bytes, executable: bool = False, runtime: Optional[str] = None,
                 embedded: Tuple[OutFile, ...] = (), shown: Optional[bytes] = None) -> None:
        self.path = path  # relative to the target's output directory, posix
        self.data = data
        self.executable = executable
        # a generated runtime file (the shim, the Ray driver...): the trainspec version it comes
        # from. `diff` summarises such files (size, sha256, version) instead of printing them whole.
        self.runtime = runtime
        # runtime files written inside this one (a manifest that carries them), each an OutFile with
        # its `runtime`, and `shown`: `data` as a reviewer reads it, each of them replaced by its
        # placeholder() line. `diff` summarises them as it does runtime files of their own and diffs
        # `shown`; `data` stays what is written, checked and compared (a change inside one is a change).
        self.embedded = embedded
        self.shown = shown
        for inner in self.embedded:
            if inner.runtime is None or self.shown is None or placeholder(inner).encode("utf-8") not in self.shown:
                raise ValueError(f"{self.path}: the embedded {inner.path} needs a runtime version and its "
                                 "placeholder line in `shown`")

    @property
    def reviewed(self) -> bytes:
        """The file as ``diff`` shows it: ``shown`` when it embeds runtime files, else ``data``."""
        return self.data if self.shown is None else self.shown


def placeholder(file: OutFile) -> str:
    """The one line that stands for an embedded runtime file in what a reviewer reads (one line,
    no ': ' or '#', so a YAML or shell string holds it unquoted)."""
    from trainspec.core.digests import sha256

    return (f"trainspec runtime file {file.path}, {len(file.data):,} bytes, sha256 "
            f"{sha256(file.data).hexdigest()} (summarised here, written whole)")


class Artifact(Record):
    """Everything one target makes of one spec: the files and how to submit them."""

    __slots__ = ("target", "name", "files", "submit")

    def __init__(self, target: str, name: str, files: Tuple[OutFile, ...], submit: str) -> None:
        self.target = target
        self.name = name
        self.files = files
        self.submit = submit  # the platform's own command, relative to the output directory's parent

    def file(self, path: str) -> OutFile:
        return next(f for f in self.files if f.path == path)


class Hardware(Record):
    """What chooses the machines a target's job runs on, as ``plan`` and ``diff`` say it:
    ``enforced`` when that is resources.sku (the job runs on that size or not at all), and
    ``by``, one line: what selects it ("instance_type Standard_ND96isr_H100_v5"), or, not enforced,
    what decides instead ("the partition gpu decides the hardware")."""

    __slots__ = ("enforced", "by", "hint")

    def __init__(self, enforced: bool, by: str, hint: str = "") -> None:
        self.enforced = enforced
        self.by = by
        self.hint = hint  # how to link the sku to this target's machines, when it is not enforced


class PlanFacts(Record):
    """What ``plan`` says of a job on every target, the same facts in the same order (each one
    line, read from what the target compiles, so plan cannot claim what the job does not do):

    - ``where``: where it runs (an Azure ML compute or serverless and the experiment, a Slurm
      partition, an HPC Pack node group, a Ray cluster's region and VM sizes, a Kubernetes
      namespace and queue), the platform's default said as such;
    - ``time_limit``: the limit the platform enforces, or that it enforces none;
    - ``priority``: its priority, tier or QoS, and whether resources.spot is honoured ("spot");
    - ``image``: what it runs in (``plan_image``);
    - ``gpus``: the GPUs of the whole job, nodes x GPUs per node, with the model where the sku
      holds (``plan_gpus``)."""

    __slots__ = ("where", "time_limit", "priority", "image", "gpus")

    def __init__(self, where: str, time_limit: str, priority: str, image: str, gpus: str) -> None:
        self.where = where
        self.time_limit = time_limit
        self.priority = priority
        self.image = image
        self.gpus = gpus

    LABELS = ("where", "time limit", "priority", "image", "GPUs")

    def as_dict(self) -> Dict[str, str]:
        """The facts by label, in their order."""
        return dict(zip(self.LABELS, (self.where, self.time_limit, self.priority, self.image, self.gpus)))


def plan_gpus(valid: ValidSpec, found: "Hardware") -> str:
    """The GPUs of the whole job: "16 x H100 (2 nodes x 8)"; the model only where the sku
    chooses the machines (``found``: the target's hardware)."""
    per_node = valid.gpus_per_node
    if not per_node:
        return "none"
    shape = f"({valid.nodes} node{'' if valid.nodes == 1 else 's'} x {per_node})"
    total = valid.nodes * per_node
    sku = valid.sku
    if sku is None or not sku.gpu:
        return f"{total} {shape}, model unknown: no sku"
    if not found.enforced:
        return f"{total} {shape}, model not enforced here ({sku.gpu} only if the machines are {sku.name})"
    return f"{total} x {sku.gpu} {shape}"


def plan_spot_ignored(target: str, why: str) -> str:
    """The end of a priority fact when the spec asks for spot a target cannot honour."""
    return f"; resources.spot is not honoured on {target} ({why})"


class Target:
    """A target's compiler side, as the pipeline sees it. A target declares what it is once, in
    its module ``targets/<name>/lower.py``: the module-level names of the table below, defined
    there or imported (``NAME`` from its settings.py). registry/build.py imports that module by name on
    first use (compiling for one target never pays for the others) and wraps it in a Target, which
    supplies the default of every name the module does not define; no class re-lists the module's
    functions. Each name is spelled the same in lower.py and on the Target: registry/build.py's
    ``target(name).CANNOT_RUN`` is that lower.py's ``CANNOT_RUN``. Its vocabulary -- the
    model of ``targets.<name>``, its hints, the rules for its settings, the variables only its
    platform sets -- is ``targets/<name>/settings.py``, which validation loads without this. A
    target never imports another.

    =========================================  ====================================================
    ``NAME``                                   its name in ``-t`` and under ``targets:``
                                               (required)
    ``CANNOT_RUN``                             what the platform cannot run, as data: catalogued
                                               features (compiler/capabilities.py) ->
                                               ``unsupported()`` or ``problem()``;
                                               docs/capabilities.md shows every table (required)
    ``cannot_express(valid)``                  what the platform cannot run as the spec says, as
                                               diagnostics: ``capabilities.check(CANNOT_RUN)``,
                                               then what depends on settings and the command
                                               (required)
    ``lower(valid, out_dir) -> Artifact``      the files, pure: no I/O, no clock, no randomness
                                               (required)
    ``refs_for(valid)``                        how ``{{ inputs.x }}`` / ``{{ outputs.x }}`` render
                                               in its job (``spec_env``: the env ``plan`` shows;
                                               required)
    ``plan_facts(valid) -> PlanFacts``         what ``plan`` says of every target alike, in one
                                               order: where it runs, the time limit it
                                               enforces, its priority or spot, the image, the
                                               GPUs in all (required: a target says each)
    ``cost_basis(valid) -> CostBasis``         the VMs the job holds, the time limit it
                                               enforces, the team's own nodes or the region it
                                               names itself: what review/cost.py prices, naming
                                               no target (required)
    ``plan_port(valid)``                       the rendezvous port as ``plan`` shows it (default:
                                               distribution.master_port)
    ``plan_settings(valid)``                   its own settings a reviewer should see in ``plan``
                                               beyond the facts (default: none)
    ``plan_image(valid)``                      what its job runs in, as ``plan`` and ``diff``
                                               show it: the image it really runs (a target's
                                               own form or override), or the software its
                                               nodes have (default: environment.image as
                                               written, or the nodes' own software)
    ``local_settings(settings, workdir)``      ``run --local``: the settings rewritten for this
                                               machine, a mapping in, a mapping out (default: as
                                               they are)
    ``hardware(valid) -> Hardware``            what chooses the machines: resources.sku (plan
                                               and diff then name its GPU for this target), or
                                               something else (they say the sku is not
                                               enforced there; default: nothing links it)
    ``job_name_limit(valid)``                  how long the job's name on the platform may be
                                               (``submit``: jobs/api.py job_name; default 63, a
                                               Kubernetes object's limit)
    ``STAGES_CODE``                            the folder ``submit`` copies the code into, beside
                                               the job's files (.trainspec/jobs/<job name>/
                                               <target>/<folder>/, code_copy), for a platform
                                               whose job reads its code from where it was
                                               submitted (default None: its job carries the
                                               code itself, a snapshot, a ConfigMap)
    ``LOCAL_REFUSAL``                          ``run --local`` for a target without
                                               ``targets/<name>/local.py`` (whose
                                               ``play_local(job_dir, run)`` plays the job): one line
                                               that says why it cannot be played here (default:
                                               nothing on this machine stands in for the platform)
    =========================================  ====================================================

    Who starts the processes is not a target's to say: the spec decides it, the same on every
    target (``launcher``, below); a target that cannot run it says so in ``cannot_express``.

    A lower.py that lacks a required name cannot be wrapped (a TypeError that names what it
    lacks); tests/test_layout.py also fails on a module-level name that looks like one of these
    but is not (``plan_setting``, ``cannot_run``), which would otherwise leave the default in place.
    """

    REQUIRED = ("NAME", "CANNOT_RUN", "cannot_express", "lower", "refs_for", "plan_facts", "cost_basis")
    OPTIONAL = ("plan_port", "plan_settings", "plan_image", "local_settings", "hardware", "job_name_limit",
                "STAGES_CODE", "LOCAL_REFUSAL")

    NAME: str
    CANNOT_RUN: Mapping[Any, Any]  # capabilities.Feature -> capabilities.Entry

    def __init__(self, module: ModuleType) -> None:
        missing = [member for member in self.REQUIRED if not hasattr(module, member)]
        if missing:
            raise TypeError(f"{module.__name__} does not define {', '.join(missing)}: every target's lower.py "
                            "must (compiler/base.py, Target)")
        self.module = module
        for member in (*self.REQUIRED, *self.OPTIONAL):
            if hasattr(module, member):
                setattr(self, member, getattr(module, member))
        if not hasattr(module, "LOCAL_REFUSAL"):
            from trainspec.schema.vocabulary import TARGETS

            self.LOCAL_REFUSAL = (f"run --local cannot play {TARGETS[self.NAME]} jobs here: nothing on this machine "
                                  "stands in for the platform")

    # The defaults, for what a lower.py does not define (each called as the module's function is).

    @staticmethod
    def plan_port(valid: ValidSpec) -> str:
        return str(valid.spec.distribution.master_port)

    @staticmethod
    def plan_settings(valid: ValidSpec) -> Dict[str, str]:
        return {}

    @staticmethod
    def plan_image(valid: ValidSpec) -> str:
        return valid.spec.environment.image or "no image: the nodes' own software"

    @staticmethod
    def local_settings(settings: Dict[str, Any], workdir: Path) -> Dict[str, Any]:
        return settings

    @staticmethod
    def hardware(valid: ValidSpec) -> Hardware:
        return Hardware(False, "nothing in its job selects a VM size")

    @staticmethod
    def job_name_limit(valid: ValidSpec) -> int:
        return 63

    STAGES_CODE: Optional[str] = None
    LOCAL_REFUSAL: str

    def launcher(self, valid: ValidSpec) -> str:
        """Who starts the processes of ``valid``: the spec decides (ValidSpec.launcher), the same on
        every target; a target that cannot run it says so in cannot_express."""
        return valid.launcher


def literal_text(value) -> str:
    """A literal input as the command sees it: as Azure ML sends it (azure-ai-ml's REST body:
    str(value), so a YAML `true` arrives as True)."""
    return str(value)


def node_path_refs(valid: ValidSpec, default_output, volumes: Optional[Mapping[str, Any]] = None):
    """References for a target whose jobs see the data as paths on the nodes (HPC Pack, Slurm):
    ``{{ inputs.x }}`` / ``{{ outputs.x }}`` is the ``path`` of its volume on the target
    (``volumes``: targets.<target>.volumes), else its own path (or literal); an output with
    neither is ``default_output(name)`` (shell the target writes). Each quoted for bash."""
    spec = valid.spec
    volumes = volumes or {}

    def refs(kind: str, name: str) -> str:
        if name in volumes:
            return shlex.quote(volumes[name].path)
        if kind == "inputs":
            item = spec.inputs[name]
            return shlex.quote(item.path if item.path is not None else literal_text(item.value))
        item = spec.outputs[name]
        return shlex.quote(item.path) if item.path is not None else default_output(name)

    return refs


def plan_data(valid: ValidSpec, refs) -> Dict[str, str]:
    """What ``plan`` shows of where a target's job finds each input with data and each output
    (``inputs.x``: the location), rendered by the same references (``refs``: its refs_for) as
    its command, so plan cannot say a place the job does not use."""
    spec = valid.spec
    places = {f"inputs.{name}": refs("inputs", name) for name, item in spec.inputs.items() if item.path is not None}
    places.update({f"outputs.{name}": refs("outputs", name) for name in spec.outputs})
    return places


def lost_output_errors(target: str, valid: ValidSpec, volumes: Mapping[str, Any], lost: str,
                       hint: str) -> List[Diagnostic]:
    """An error at ``outputs.<name>`` (its key) for each output with neither a volume on the
    target (``volumes``) nor a path of its own, on a target where what the job writes to a default
    place would be lost: ``lost`` says where it would go and why it is lost, ``hint`` (a template
    with ``{name}``) how to keep it. Azure ML keeps such an output as the job's own."""
    return [error(("outputs", name), f"it has no location on {target}: {lost}", hint.format(name=name),
                  on_key=True)
            for name, item in valid.spec.outputs.items() if item.path is None and name not in volumes]


def infiniband(valid: ValidSpec) -> bool:
    """A job whose nodes talk over InfiniBand: more than one node, of a size that has it
    (skus.json ``infiniband``). What such a job needs is each target's to write: the devices in
    its container, memlock, the platform's NCCL settings (docs/targets/*.md, "InfiniBand")."""
    return valid.sku is not None and valid.sku.infiniband and valid.nodes > 1


def read_only(kind: str, item: Any) -> bool:
    """Whether the job reads the data of input or output ``item`` without writing it: an input,
    unless its mode is rw_mount (Megatron writes its index caches beside its data). Every target
    mounts such an input read-only where it mounts data (a pod's volume, a container's bind
    mount), and writable with rw_mount."""
    return kind == "inputs" and item.mode != "rw_mount"


def master_port_written(valid: ValidSpec) -> Optional[int]:
    """distribution.master_port when the spec writes it (None: it keeps the default). A target
    whose platform fixes the port warns only about a port the user asked for."""
    distribution = valid.spec.distribution
    return distribution.master_port if "master_port" in distribution.__pydantic_fields_set__ else None


def master_port_fixed(valid: ValidSpec, platform_port: int, why: str, hint: str) -> List[Diagnostic]:
    """A located warning at distribution.master_port where the platform, not trainspec, chooses
    the rendezvous port (``platform_port``) and the spec asks for another."""
    port = master_port_written(valid)
    if port is None or port == platform_port:
        return []
    return [warning(("distribution", "master_port"), f"{why}: the job rendezvous on port {platform_port}, "
                    f"not {port}", hint)]


def unsupported(target: str, path: SpecPath, what: str, hint: Optional[str] = None, *,
                fatal: bool = True) -> Diagnostic:
    """A spec setting the target cannot express: an error (or a warning when it can be ignored
    safely). Never dropped silently."""
    message = f"{target} cannot express {what}"
    return error(path, message, hint) if fatal else warning(path, message, hint)


# --- the time limit: the spec's `timeout:`, or a target's own setting -------------------------

class CostBasis(Record):
    """What a job holds on a target, for review/cost.py to price: its VMs as (count, size, spot,
    role), the time limit the target enforces (seconds; None: none), and, where they apply, the
    team's own nodes it runs on (``team_nodes``, e.g. "the partition's nodes": never a bill per
    job), why it has no maximum beyond its limit, and the region the target names itself
    (``location``, by the spec field ``location_field``)."""

    __slots__ = ("vms", "seconds", "team_nodes", "unbounded", "location", "location_field")

    def __init__(self, vms: Tuple[Tuple[int, str, bool, str], ...], seconds: Optional[int], team_nodes: str = "",
                 unbounded: str = "", location: Optional[str] = None, location_field: str = "") -> None:
        self.vms = vms
        self.seconds = seconds
        self.team_nodes = team_nodes
        self.unbounded = unbounded
        self.location = location
        self.location_field = location_field


def nodes_cost(valid, limit: Optional["TimeLimit"], spot: bool = False, team_nodes: str = "") -> CostBasis:
    """The cost basis of a job that holds its nodes of the spec's sku for the target's time limit."""
    size = valid.sku.name if valid.sku else valid.spec.resources.sku
    return CostBasis(((valid.nodes, size, spot, ""),) if size else (), limit.seconds if limit is not None else None,
                     team_nodes)


class TimeLimit(Record):
    """The time limit a target enforces: ``seconds``, and the spec path that set it (``timeout``,
    or the target's own setting, ``targets.<name>.<field>``, which overrides it there)."""

    __slots__ = ("seconds", "path")

    def __init__(self, seconds: int, path: SpecPath) -> None:
        self.seconds = seconds
        self.path = path

    @property
    def source(self) -> str:
        return ".".join(str(p) for p in self.path)

    def plan_text(self, enforced_as: str) -> str:
        """What ``plan`` shows: the limit, how the platform holds it, and who said it."""
        said = "the spec's timeout" if self.path == ("timeout",) else self.source
        return f"{duration_text(self.seconds)} ({enforced_as}), from {said}"


def time_limit(valid: ValidSpec, target: str, own_field: str) -> Optional[TimeLimit]:
    """The limit ``target`` enforces: its own ``targets.<target>.<own_field>`` when set, else the
    spec's top-level ``timeout``; None: neither says one."""
    settings = getattr(valid.spec.targets, target)
    own = getattr(settings, own_field, None) if settings is not None else None
    if own is not None:
        return TimeLimit(own, ("targets", target, own_field))
    if valid.spec.timeout is not None:
        return TimeLimit(valid.spec.timeout, ("timeout",))
    return None


def time_limit_errors(target: str, limit: Optional[TimeLimit], most: int, holder: str) -> List[Diagnostic]:
    """A limit the platform cannot hold (``most``: the largest number of seconds its ``holder``
    takes), located where it was written: the spec's timeout or the target's own setting."""
    if limit is None or limit.seconds <= most:
        return []
    return [error(limit.path, f"{duration_text(limit.seconds)} ({limit.seconds} seconds) is more than {target}'s "
                  f"{holder} holds: at most {most} seconds ({duration_text(most)})",
                  "a shorter duration, e.g. 2d, 24h or 90m")]


def plan_no_time_limit(own: str) -> str:
    """What ``plan`` shows for a target that enforces no limit (``own``: its own setting's path)."""
    return f"none: runs until it ends (the spec's timeout, or {own}, sets one)"


def expectations(valid: ValidSpec, launcher_name: str, master_port: Optional[int] = None) -> Dict[str, str]:
    """The TRAINSPEC_* variables the shim checks the platform's world against."""
    env = {
        contract.ENV_SPEC: valid.source.display,
        contract.ENV_NODES: str(valid.nodes),
        contract.ENV_PROCS_PER_NODE: str(valid.procs_per_node),
        contract.ENV_LAUNCHER: launcher_name,
    }
    if master_port is not None:
        env[contract.ENV_MASTER_PORT] = str(master_port)
    return env


def job_env(valid: ValidSpec, refs, launcher_name: str, master_port: Optional[int] = None) -> Dict[str, str]:
    """Every process's environment as a target writes it: the spec's env (rendered with the
    target's references), Lightning's defaults, then the TRAINSPEC_* expectations."""
    env = spec_env(valid, refs)
    env.update(lightning_defaults(valid))
    env.update(expectations(valid, launcher_name, master_port))
    return env


def secret_env(valid: ValidSpec, target: str, **more: Any) -> Dict[str, str]:
    """TRAINSPEC_SECRETS for a target whose shim sets the secrets (empty when the spec has none):
    where each is kept, as the secrets helper reads it (``runtime/secret_refs.py`` secret_values), with ``more``
    (a target's own, e.g. the identity Key Vault is read with) in each entry. Never a value."""
    import json

    kind = secret_reference(target)
    references = [{"variable": name, **kind.runtime(getattr(reference, kind.key)),
                   **{k: v for k, v in more.items() if v is not None}}
                  for name, reference in valid.spec.secrets.items()]
    if not references:
        return {}
    return {secret_refs.ENV_SECRETS: json.dumps(references, sort_keys=True, separators=(",", ":"))}


def pip_env(valid: ValidSpec) -> Dict[str, str]:
    """TRAINSPEC_PIP for a target whose shim installs environment.pip itself (Slurm, HPC Pack,
    Kubernetes): the requirements as a JSON list, one value that every format escapes as a whole
    and pip gets as separate arguments (runtime/shim_pip.py install_pip). Empty without pip."""
    import json

    if not valid.spec.environment.pip:
        return {}
    return {contract.ENV_PIP: json.dumps(list(valid.spec.environment.pip), separators=(",", ":"))}


# runtime/secret_refs.py, shipped beside the shim in the jobs of a spec with secrets a target's
# shim does not get from the platform: it sets them, then execs the shim
SECRETS_FILE = "trainspec_secret_refs.py"
SECRETS_SOURCE = Path(__file__).resolve().parents[1] / "runtime" / "secret_refs.py"


def secrets_files(valid: ValidSpec) -> Tuple[OutFile, ...]:
    """The secrets helper, when the spec has secrets (else nothing: jobs without stay as they were)."""
    return (runtime_file(SECRETS_FILE, SECRETS_SOURCE),) if valid.spec.secrets else ()


def with_secrets(valid: ValidSpec, shim: str, python: str, helper: str) -> str:
    """``shim`` (the words that start it) preceded, when the spec has secrets, by the helper that
    sets them and execs it: ``<python> -I -S <helper> -- <shim>`` (``python`` and ``helper``
    already shell words)."""
    return f"{python} {' '.join(SHIM_FLAGS)} {helper} -- {shim}" if valid.spec.secrets else shim


def secret_lines(valid: ValidSpec, target: str) -> List[str]:
    """What ``plan`` shows of the secrets on ``target``: ``NAME <- <where it is kept>``, never a value."""
    kind = secret_reference(target)
    return [f"{name} <- {kind.shown(getattr(reference, kind.key))}" for name, reference in valid.spec.secrets.items()
            if getattr(reference, kind.key) is not None]


def spec_env(valid: ValidSpec, refs) -> Dict[str, str]:
    """The spec's env as every process gets it: templates rendered with the target's references
    (``refs_for``). `plan` shows the same values."""
    return {key: valid.render(("env", key), value, refs) for key, value in valid.spec.env.items()}


def lightning_defaults(valid: ValidSpec) -> Dict[str, str]:
    """Lightning reads PL_TRAINER_* as Trainer() defaults (explicit arguments still win), so a
    script that passes neither num_nodes nor devices gets the spec's numbers instead of 1."""
    if valid.spec.framework != "lightning":
        return {}
    return dict(zip(LIGHTNING_VARIABLES, (str(valid.nodes), str(valid.procs_per_node))))


def relative(target: Path, start: Path) -> str:
    """``target`` relative to ``start`` as a posix path, for files that reference each other."""
    import os

    rel = os.path.relpath(target, start)
    return Path(rel).as_posix()


# trainspec's runtime files (the shim, the Ray driver...), copied byte for byte next to jobs. Read
# by path rather than through `trainspec.runtime` so compiling never imports the runtime itself.
RUNTIME_DIR = Path(__file__).resolve().parents[1] / "runtime"
SHIM_SOURCE = RUNTIME_DIR / "shim.py"

# the runtime files read so far in this process, by path: they are trainspec's own and do not
# change under a running command, while every spec of a `check` or `compile` copies them
_RUNTIME_BYTES: Dict[Path, bytes] = {}
_SHIM_BYTES: Dict[str, bytes] = {}  # the joined shim, by platform


STAGING_FOLDER = ".trainspec"  # trainspec's own folder where submit runs (commands/jobs.py): never part of a copy


def code_copy(valid: ValidSpec, under: str) -> Tuple[OutFile, ...]:
    """The code folder's regular files as files of a job below ``under`` (each with its bytes and
    its executable bit, as read now): what ``submit`` stages beside a job that would otherwise read
    the live working tree when it starts (Target.STAGES_CODE). Every file of the folder but .git's
    and .trainspec's (a code folder that is the repository's top holds the jobs staged before); a
    link is never followed
    (validation refuses one in the code folder, core/files.py reads none), nor is anything else
    but a regular file copied."""
    import os
    import stat

    from trainspec.core import files

    root = valid.resolve(valid.spec.code) if valid.spec.code else None
    if root is None or not root.is_dir():
        return ()
    out = []
    for name in files.list_folder(root, skip=(".git", STAGING_FOLDER), limit=files.SHIPPED_LIMIT).files:
        path = root / name
        try:
            mode = os.lstat(path).st_mode
            data = files.read_regular(path)
        except OSError:
            continue  # swapped for a link or a FIFO since validation: never read
        out.append(OutFile(f"{under}/{name}", data, executable=bool(mode & stat.S_IXUSR)))
    return tuple(out)


def shim_file(platform: str) -> OutFile:
    """The shim a ``platform`` job ships: the core joined with that platform's detectors only
    (runtime.shim_source), so a job carries no other platform's code."""
    from trainspec import __version__
    from trainspec.runtime import shim_source

    folder = SHIM_SOURCE.parent
    if folder != RUNTIME_DIR:  # a test's older runtime: read each time
        return OutFile(SHIM_FILE, shim_source(platform, folder).encode("utf-8"), runtime=__version__)
    data = _SHIM_BYTES.get(platform)
    if data is None:
        data = _SHIM_BYTES[platform] = shim_source(platform).encode("utf-8")
    return OutFile(SHIM_FILE, data, runtime=__version__)


def runtime_file(name: str, source: Path) -> OutFile:
    """A file of trainspec's runtime copied next to a job as ``name``, marked as such. A file
    from anywhere else (a test's older runtime) is read each time."""
    from trainspec import __version__

    if source.parent != RUNTIME_DIR:
        return OutFile(name, source.read_bytes(), runtime=__version__)
    data = _RUNTIME_BYTES.get(source)
    if data is None:
        data = _RUNTIME_BYTES[source] = source.read_bytes()
    return OutFile(name, data, runtime=__version__)


_PYTHON = re.compile(r"^\s*(?P<python>python(?:3(?:\.\d+)?)?)\s+(?P<rest>\S.*)$", re.S)
_VARIABLE = Lazy(r"\$(?:\{[!#]?)?([A-Za-z_][A-Za-z0-9_]*)")


_SHELL_CHARS = frozenset("\\'\"$`;&|<>()\n")  # every character _shell_scan's answer depends on


def _shell_scan(command: str, names_too: bool = True) -> Tuple[bool, List[str], bool]:
    """(an operator, the names of the variables it expands, any expansion at all) as bash reads
    ``command``: an unquoted, unescaped ; & | < > ( ) or newline is an operator (more than one
    simple command); a ``$`` or backquote outside single quotes expands. shlex cannot tell ``';'``
    (an argument) from ``;`` (an operator) once it removed the quotes. ``names_too`` False: no
    names (a compiled line's own ``$NODE_RANK``, per node, needs no pattern compiled at start-up)."""
    if _SHELL_CHARS.isdisjoint(command):
        return False, [], False  # the usual command (`python train.py --lr 0.1`): nothing to scan for
    quote = None
    escaped = operator = expands = False
    names: List[str] = []
    for i, char in enumerate(command):
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote == "'":
            quote = None if char == "'" else quote
        elif char in "$`":
            expands = True
            found = _VARIABLE.match(command, i) if names_too else None
            if found:
                names.append(found.group(1))
        elif quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in ";&|<>()\n":
            operator = True
    return operator, names, expands


def _has_shell_operator(command: str) -> bool:
    return _shell_scan(command, names_too=False)[0]


def _user_command(valid: ValidSpec) -> str:
    """The command as the user wrote it, templates rendered without any target's references: what
    it expands is the user's, not a target's own ``$job_dir`` or ``${{inputs.x}}``."""
    return valid.render(("command",), valid.spec.command, neutral_refs)


def under_shim(shim: str, command: str, valid: ValidSpec) -> str:
    """``<shim> -- <command>``. The shim execs its arguments, so a command that needs a shell --
    several commands (``cd src && python train.py``, a newline), or an expansion (``$NODE_RANK``,
    which the shim sets) -- runs as one ``bash -c`` under it: every command sees the shim's
    variables, and every ``$`` expands after the shim set them, on every target alike."""
    if _has_shell_operator(command) or _shell_scan(_user_command(valid))[2]:
        return f"{shim} -- bash -c {shlex.quote(command)}"
    return f"{shim} -- {command}"


# What the shim exports in every process (per node, all but the workers' own four): the names a
# command reads on every target. The spec's env is portable too.
PORTABLE = ("NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
PER_WORKER = {"RANK": None, "LOCAL_RANK": None, "WORLD_SIZE": "{{ world_size }}",
              "LOCAL_WORLD_SIZE": "{{ procs_per_node }}"}  # and the template to write instead


def command_variable_errors(target: str, valid: ValidSpec, launcher_name: str) -> List[Diagnostic]:
    """An error at ``command`` for each variable it reads that will not be set when it expands
    (after the shim, on ``target``): another platform's own (``$SLURM_PROCID`` on Azure ML), or,
    per node, a worker's (``$RANK``: the command starts the workers). The spec's env always is."""
    from trainspec.schema.vocabulary import platform_variable

    out: List[Diagnostic] = []
    command = _user_command(valid)
    _, names, expands = _shell_scan(command)
    spawner = own_spawner(command)
    missing = _world_flags_missing(command, spawner) if expands and spawner else []
    if missing and launcher_name == "per-node":
        out.append(error(("command",), f"per node the shim hands {spawner} the world as flags, which it cannot add "
                         f"to a command that needs a shell (it expands $...); it lacks {', '.join(missing)}",
                         "write them yourself, from $NODE_RANK, $MASTER_ADDR and $MASTER_PORT (set before the "
                         "shell expands them) and templates ({{ nodes }}), or expand the rest in a script"))
    out += _multinode_launcher_errors(target, command, spawner, launcher_name, valid.nodes)
    for name in dict.fromkeys(names):
        if name in valid.spec.env or name in valid.spec.secrets or name in PORTABLE:
            continue
        if name in PER_WORKER:
            if launcher_name == "per-node":
                out.append(error(("command",), f"reads ${name}, but per node the command starts the node's workers: "
                                 f"{name} is each worker's, set only when they start",
                                 f"write {PER_WORKER[name]}" if PER_WORKER[name] else
                                 "read it in the script (os.environ), or use $NODE_RANK"))
            continue
        owner = platform_variable(name)
        if owner is not None and owner[0] != target:
            out.append(error(("command",), f"reads ${name}, which only {owner[0]} jobs set: compiled for {target}, "
                             "the command would read it empty",
                             f"use {owner[1]}, which every target sets" if owner[1] else
                             "every target sets $NODE_RANK, $MASTER_ADDR, $MASTER_PORT, $RANK, $WORLD_SIZE, "
                             "$LOCAL_RANK and the spec's env; use those"))
    return out


def _multinode_launcher_errors(target: str, command: str, spawner: Optional[str], launcher_name: str,
                               nodes: int) -> List[Diagnostic]:
    """Per node on several nodes, an accelerate DeepSpeed launcher other than torchrun's: every
    node runs its own accelerate, so pdsh (or ssh) from each starts the job once per node, or,
    without a hostfile, each node trains alone. The shim refuses it at start; this says it at the line."""
    from trainspec.core.fields import split_command

    if spawner != "accelerate" or launcher_name != "per-node" or nodes < 2:
        return []
    try:
        given = launch_flags._given(split_command(command), launch_flags.DEEPSPEED_MULTINODE[0])
    except ValueError:
        return []
    if given is None or given == launch_flags.DEEPSPEED_MULTINODE[1]:
        return []
    flag, standard = launch_flags.DEEPSPEED_MULTINODE
    return [error(("command",), f"{flag} {given}: per node on {target} every node runs its own accelerate launch, so "
                  f"DeepSpeed must join the {nodes} nodes through torchrun, or each node trains alone or starts "
                  "them all",
                  f"remove the flag (trainspec passes {flag} {standard}) or write {standard}")]


def _world_flags_missing(command: str, spawner: str) -> List[str]:
    """The flags through which ``spawner`` (accelerate, deepspeed) learns the world that
    ``command`` does not give itself (a command run through a shell gets none from the shim)."""
    from trainspec.core.fields import split_command

    try:
        words = split_command(command)
    except ValueError:
        return []
    flags = launch_flags._ACCELERATE if spawner == "accelerate" else (*launch_flags._DEEPSPEED, "--no_ssh")
    if spawner == "accelerate" and launch_flags._given(words, "--rdzv_backend") in launch_flags.DYNAMIC_RDZV:
        # the rendezvous assigns node ranks; the shim still gives accelerate the --machine_rank it wants
        flags = tuple(f for f in flags if f != "--machine_rank")
    return [f for f in flags if not any(w == f or w.startswith(f + "=") for w in words)]


def own_spawner(command: str) -> Optional[str]:
    """'accelerate' or 'deepspeed' when the command is that launcher (it starts the node's workers
    itself, and the shim gives it the world as flags), else None: the shim's own recognizer."""
    from trainspec.core.fields import split_command

    try:
        found = launch_flags.spawner_at(split_command(command))
    except ValueError:  # an unclosed quote: validation reports it
        return None
    return found[0] if found else None


def torchrun_problem(command: str) -> Optional[str]:
    """Why ``command`` cannot be handed to torchrun, or None. torchrun runs one program per worker,
    not a shell line: ``python train.py ...``, ``python -m pkg ...``, or any executable through
    ``--no-python`` (a console script such as ``fast-llm train``)."""
    if _has_shell_operator(command):
        return "it contains shell operators (&&, ;, |, redirections)"
    return None


def torchrun_errors(valid: ValidSpec, refs, wrapped_by: str, hint: str) -> List[Diagnostic]:
    """An error at ``command`` when a target would hand it to torchrun and it is not a Python
    script or module line (else none); ``wrapped_by`` says who puts torchrun there."""
    command = valid.render(("command",), valid.spec.command, refs)
    if own_spawner(command) and not _has_shell_operator(command):
        return []  # accelerate launch / deepspeed start the workers themselves: no torchrun
    problem = torchrun_problem(command)
    return [error(("command",), f"{wrapped_by}, but {problem}", hint)] if problem else []


def torchrun_line(valid: ValidSpec, command: str, runner: Tuple[str, ...] = ("torchrun",), rendezvous: str = "",
                  python: Optional[str] = None) -> str:
    """``<runner> --nnodes N --nproc_per_node P [rendezvous] --no-python <command>``: torchrun
    starting the node's workers, each running the user's command intact. ``rendezvous``: flags
    (shell, the target's own) for what the shim does not hand torchrun as PET_*."""
    counts = shlex.join([*runner, "--nnodes", str(valid.nodes), "--nproc_per_node", str(valid.procs_per_node)])
    return " ".join(part for part in (counts, rendezvous, torchrun_worker(command, python)) if part)


def torchrun_worker(command: str, python: Optional[str] = None) -> str:
    """What follows torchrun's own flags so that every worker runs the user's command intact:
    ``--no-python`` and the command as written (``python -u -X faulthandler train.py``, ``python
    -m pkg``: the interpreter's own flags survive, which torchrun's ``train.py`` form drops; any
    other program, such as ``fast-llm train``, as is). ``python`` (already shell-quoted) replaces
    the interpreter word where the target names its own; the rest is the user's text verbatim
    (shell, written by them)."""
    match = _PYTHON.match(command)
    if match is None:
        return f"--no-python {command.strip()}"
    return f"--no-python {python or match.group('python')} {match.group('rest')}"
