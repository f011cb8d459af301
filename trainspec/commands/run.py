"""`trainspec run --local`: the compiled job, on this machine, before paying for GPUs.

The spec is compiled for the target exactly as `compile` does, then the *compiled file* is
read back and played the way the platform would play it: one local process per platform
process, each with the variables that platform sets (Azure ML's pytorch distribution, or
Open MPI's only, or TF_CONFIG), the job's own environment_variables, and its command run
through bash in a copy of the code directory. Simulated nodes get distinct loopback
addresses (127.0.0.2, 127.0.0.3, ...). Overrides (processes per node, launcher) go through
the same validation as file content. With ``--netns`` every simulated node is a network
namespace of its own (local/netns.py), so MASTER_ADDR is really another host.
"""

from __future__ import annotations

import shutil
import signal
import sys
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from trainspec.registry.build import target
from trainspec.local import netns
from trainspec.local.machinery import RUN_LOG, LocalRun, RunOutput
from trainspec.local.netns import Loopback, Namespaces, NetnsError
from trainspec.registry import DEFAULT_TARGET

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
        environment = data.get("environment")
        if isinstance(environment, dict) and "conda_file" in environment:
            # this machine's Python runs the job: a conda file is never created here, on any target
            # (Slurm, HPC Pack and Kubernetes refuse one; environment.pip is installed as there)
            data["environment"] = {k: v for k, v in environment.items() if k != "conda_file"}
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
        return _compile_and_play(spec_file, options, workdir, out, removed=temporary and not options.keep)
    finally:
        if temporary and not options.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        elif temporary:
            print(f"trainspec: kept the work directory {workdir} (--keep)", file=sys.stderr)


def _compile_and_play(spec_file: str, options: LocalOptions, workdir: Path, out, removed: bool = False) -> int:
    from trainspec.registry.build import build
    from trainspec.compiler.write import target_dir, write

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
                return _play(options, job_dir, workdir, valid, out, Loopback(), removed)
            with Namespaces(valid.nodes) as hosts:
                print(f"trainspec: {valid.nodes} simulated node(s) in network namespaces {hosts.prefix}-0.. "
                      f"at {', '.join(hosts.address(n) for n in range(valid.nodes))}", file=sys.stderr)
                return _play(options, job_dir, workdir, valid, out, hosts, removed)
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


def refusal_of(name: str) -> Optional[str]:
    """Why target ``name``'s jobs cannot be played here (its Target's ``LOCAL_REFUSAL``), or None
    when it plays them: it has a targets/<name>/local.py."""
    import importlib.util

    return None if importlib.util.find_spec(f"trainspec.targets.{name}.local") is not None else target(name).LOCAL_REFUSAL


def _play(options: LocalOptions, job_dir: Path, workdir: Path, valid, out, hosts, removed: bool = False) -> int:
    """The target's own play (targets/<name>/local.py: ``play_local(job_dir, run)``), its
    processes' lines going to the terminal (``out``) and to the run's log, WORKDIR/run.log."""
    import importlib

    player = importlib.import_module(f"trainspec.targets.{options.target}.local")
    with RunOutput(out or sys.stdout, workdir / RUN_LOG, removed=removed) as output:
        return player.play_local(job_dir, LocalRun(options, valid, workdir, hosts, output))
