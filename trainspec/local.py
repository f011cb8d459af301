"""`trainspec run --local`: the compiled job, on this machine, before paying for GPUs.

The spec is compiled for the target exactly as `compile` does, then the *compiled file* is
read back and played the way the platform would play it: one local process per platform
process, each with the variables that platform sets (Azure ML's pytorch distribution, or
Open MPI's only, or TF_CONFIG), the job's own environment_variables, and its command run
through bash in a copy of the code directory. Simulated nodes get distinct loopback
addresses (127.0.0.2, 127.0.0.3, ...). Overrides (processes per node, launcher) go through
the same validation as file content. With ``--netns`` every simulated node is a network
namespace of its own (trainspec/netns.py), so MASTER_ADDR is really another host.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import netns
from .compiler import DEFAULT_TARGET, target
from .netns import Loopback, Namespaces, NetnsError
from .runtime import shim as contract
from .runtime.procs import Master, Proc, run_all

# Variables a platform sets: never inherited from the shell that runs `trainspec run`.
_PLATFORM_PREFIXES = ("OMPI_", "PMIX_", "AZ_BATCH", "AZUREML_", "TORCHELASTIC_", "SLURM_", "CCP_", "PL_TRAINER_",
                      contract.ENV_PREFIX)
_PLATFORM_NAMES = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                   "NODE_RANK", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "TF_CONFIG"}


@dataclass
class LocalOptions:
    target: str = DEFAULT_TARGET
    procs_per_node: Optional[int] = None
    nodes: Optional[int] = None
    launcher: Optional[str] = None
    inputs: Dict[str, str] = field(default_factory=dict)
    timeout: float = 900
    rendezvous_timeout: float = 600  # how long the others wait for rank 0 to open MASTER_ADDR:MASTER_PORT
    netns: bool = False  # each simulated node in its own network namespace (root)
    workdir: Optional[str] = None
    start_delays: Dict[int, float] = field(default_factory=dict)  # node -> seconds late (hpcpack)
    sets: Tuple[str, ...] = ()
    variables: Tuple[str, ...] = ()
    keep: bool = False  # keep the temporary work directory (one given with --workdir is always kept)


def overrides(options: LocalOptions):
    """Rewrite the loaded spec for this machine: CPU processes standing in for GPUs, gloo."""
    def transform(data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        resources = dict(data.get("resources") or {}) if isinstance(data.get("resources", {}), dict) else {}
        resources.pop("sku", None)
        if options.nodes is not None:
            resources["nodes"] = options.nodes
        if options.procs_per_node is not None:
            resources["gpus_per_node"] = options.procs_per_node
            resources["procs_per_node"] = options.procs_per_node
        elif "gpus_per_node" not in resources and "procs_per_node" not in resources:
            resources["gpus_per_node"] = 1  # a GPU SKU's count is unknown without the SKU: say 1
        data["resources"] = resources
        distribution = dict(data.get("distribution") or {}) if isinstance(data.get("distribution", {}), dict) else {}
        distribution["backend"] = "gloo"
        if options.launcher is not None:
            distribution["launcher"] = options.launcher
        data["distribution"] = distribution
        targets = dict(data.get("targets") or {}) if isinstance(data.get("targets", {}), dict) else {}
        settings = dict(targets.get(options.target) or {}) if isinstance(targets.get(options.target, {}), dict) else {}
        targets[options.target] = target(options.target).local_settings(settings, Path(options.workdir).resolve())
        data["targets"] = targets
        return data
    return transform


def run_local(spec_file: str, options: LocalOptions, out=None) -> int:
    reason = netns.unavailable() if options.netns else None
    if reason:
        print(f"trainspec: error: {reason}", file=sys.stderr)  # before anything is compiled
        return 1
    temporary = not options.workdir
    try:
        if temporary:
            options.workdir = tempfile.mkdtemp(prefix="trainspec-run-")
        workdir = Path(options.workdir).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"trainspec: error: cannot make the work directory {options.workdir}: {exc.strerror}", file=sys.stderr)
        return 1
    try:
        return _compile_and_play(spec_file, options, workdir, out)
    finally:
        if temporary and not options.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        elif temporary:
            print(f"trainspec: kept the work directory {workdir} (--keep)", file=sys.stderr)


def _compile_and_play(spec_file: str, options: LocalOptions, workdir: Path, out) -> int:
    from .build import build
    from .compiler.write import target_dir, write

    outcome = build(spec_file, workdir, [options.target], transform=overrides(options), sets=options.sets,
                    variables=options.variables)
    for d in outcome.diagnostics:
        print(d.render(), file=sys.stderr)
    if not outcome.ok:
        print("trainspec: the spec has errors; nothing was run", file=sys.stderr)
        return 1
    valid = outcome.valid
    unknown = sorted(set(options.inputs) - set(valid.spec.inputs))
    if unknown:
        have = ", ".join(sorted(valid.spec.inputs)) or "none"
        print(f"trainspec: error: --input {', '.join(unknown)}: the spec has no such input (its inputs: {have})",
              file=sys.stderr)
        return 1
    artifact = outcome.artifacts[0]
    job_dir = write(target_dir(workdir, artifact), artifact)
    try:
        with _sigterm_unwinds():
            if not options.netns:
                return _play(options, job_dir, workdir, valid, out, Loopback())
            with Namespaces(valid.nodes) as hosts:
                print(f"trainspec: {valid.nodes} simulated node(s) in network namespaces {hosts.prefix}-0.. "
                      f"at {', '.join(hosts.address(n) for n in range(valid.nodes))}", file=sys.stderr)
                return _play(options, job_dir, workdir, valid, out, hosts)
    except NetnsError as exc:
        print(f"trainspec: error: {exc}", file=sys.stderr)
        return 1
    except Terminated:
        print("trainspec: terminated (SIGTERM); every process was stopped"
              + (" and every network namespace deleted" if options.netns else ""), file=sys.stderr)
        return 128 + signal.SIGTERM


class Terminated(BaseException):
    """SIGTERM to `trainspec run`: unwind as Ctrl-C does, so every process group is stopped and
    every namespace deleted (Python's default for SIGTERM is to die on the spot, leaving both)."""


@contextmanager
def _sigterm_unwinds():
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the clean-up short
        raise Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@dataclass
class LocalRun:
    """What a target's ``play_local(job_dir, run)`` gets: the run's options, the validated spec,
    the work directory, the simulated hosts (loopback addresses or network namespaces) and
    where the processes' output goes. The machinery to start and watch processes is below."""

    options: LocalOptions
    valid: Any
    workdir: Path
    hosts: Any
    out: Any

    def copy_code(self) -> Path:
        """A fresh copy of the spec's code directory, as the platform would upload it."""
        code = self.workdir / "code"
        if code.exists():
            shutil.rmtree(code)
        shutil.copytree(self.valid.resolve(self.valid.spec.code), code,
                        ignore=shutil.ignore_patterns("__pycache__", ".git", "lightning_logs", "outputs"))
        return code


def _play(options: LocalOptions, job_dir: Path, workdir: Path, valid, out, hosts) -> int:
    return target(options.target).play_local(job_dir, LocalRun(options, valid, workdir, hosts, out))


def run_and_report(procs: List[Proc], timeout: float, out, master: Optional[Master] = None) -> int:
    started = time.monotonic()
    result = run_all(procs, timeout=timeout, out=out or sys.stdout, master=master)
    elapsed = time.monotonic() - started
    if result.exit_code == 0:
        print(f"trainspec: all {len(procs)} processes exited 0 in {elapsed:.1f} s", file=sys.stderr)
        return 0
    if result.master_silent:
        assert master is not None
        print(f"trainspec: error: nothing listened on the master address {master.host}:{master.port} within "
              f"{master.timeout:g} s: {master.label} never opened the rendezvous (it hung, or is still busy before "
              "init_process_group), so every other process would have waited for torch's own timeout; every "
              f"process was stopped after {elapsed:.1f} s (hint: --rendezvous-timeout SECONDS if {master.label} "
              "needs longer). Its last lines:", file=sys.stderr)
        for line in result.tail:
            print(f"  | {line}", file=sys.stderr)
        return result.exit_code
    if result.timed_out:
        print(f"trainspec: error: the run did not finish within {timeout:g} s; every process was stopped",
              file=sys.stderr)
        return result.exit_code
    print(f"trainspec: error: {result.failed} exited with code {result.exit_code}{_signal_name(result.exit_code)} "
          f"after {result.failed_at or elapsed:.1f} s; the run was stopped{_how_the_others_ended(result)}. "
          f"Its last lines ({result.failed}):", file=sys.stderr)
    for line in result.tail:
        print(f"  | {line}", file=sys.stderr)
    return result.exit_code


def _signal_name(exit_code: int) -> str:
    """' (SIGKILL)' for 137: the shell's 128+n for a process killed by signal n."""
    try:
        return f" ({signal.Signals(exit_code - 128).name})" if exit_code > 128 else ""
    except ValueError:
        return ""


def _how_the_others_ended(result) -> str:
    """'; the other 3 processes ended within 1.2 s: rank 0 and rank 1 exited by themselves (code 1);
    rank 3 was stopped by SIGTERM' -- who failed on their own once a peer was gone, whom the runner stopped."""
    others = result.others
    if not others:
        return ""
    groups: Dict[Tuple[Optional[str], int], List[str]] = {}
    for ending in others:
        key = (ending.stopped_by, 0) if ending.stopped_by else (None, ending.exit_code)
        groups.setdefault(key, []).append(ending.label)

    def told(key: Tuple[Optional[str], int], labels: List[str]) -> str:
        shown = labels if len(labels) <= 4 else labels[:3] + [f"{len(labels) - 3} more"]
        names = shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]
        stopped_by, code = key
        if stopped_by:
            return f"{names} {'was' if len(labels) == 1 else 'were'} stopped by {stopped_by}"
        if code == 0:
            return f"{names} had finished (code 0)"
        return f"{names} exited by {'itself' if len(labels) == 1 else 'themselves'} (code {code})"

    within = max(0.0, max(ending.at for ending in others) - (result.failed_at or 0.0))
    plural = "process" if len(others) == 1 else f"{len(others)} processes"
    return (f"; the other {plural} ended within {within:.1f} s: "
            + "; ".join(told(key, labels) for key, labels in groups.items()))


def base_env(hosts) -> Dict[str, str]:
    startup = sys.modules.get("trainspec.cli")  # what the CLI set for its own start-up is not the job's
    own = set(getattr(startup, "CLI_STARTUP_ENV", ()))
    env = {k: v for k, v in os.environ.items()
           if k not in _PLATFORM_NAMES and not k.startswith(_PLATFORM_PREFIXES) and k not in own}
    # the job's `python` is the interpreter trainspec runs under (its virtualenv, its torch)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    env["GLOO_SOCKET_IFNAME"] = hosts.interface  # loopback, or the namespace's one interface
    return env


def job_port(env: Mapping[str, Any]) -> int:
    """The port the compiled job names (the spec's master_port, or HPC Pack's rdzv_port): the run
    uses it as the platform would, so a port the job cannot open shows up here."""
    return int(env.get(contract.ENV_MASTER_PORT) or contract.AZUREML_MASTER_PORT)


def port_taken(port: int, hosts, field_: str) -> int:
    print(f"trainspec: error: port {port} on {hosts.address(0)} (simulated node 0) is taken: the job uses the "
          f"spec's port, as the platform would, and something here already listens on it (another run?) "
          f"(hint: stop it, or try another port for this run with --set {field_}=PORT)", file=sys.stderr)
    return 1


