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
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import netns
from .netns import Loopback, Namespaces, NetnsError
from .runtime import shim as contract
from .schema.fields import is_remote
from .runtime.procs import Master, Proc, run_all

# Variables a platform sets: never inherited from the shell that runs `trainspec run`.
_PLATFORM_PREFIXES = ("OMPI_", "PMIX_", "AZ_BATCH", "AZUREML_", "TORCHELASTIC_", "SLURM_", "CCP_", "PL_TRAINER_",
                      contract.ENV_PREFIX)
_PLATFORM_NAMES = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                   "NODE_RANK", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "TF_CONFIG"}
BATCH_PORT = 6000  # the port in AZ_BATCH_MASTER_NODE belongs to Azure Batch: the shim must ignore it


@dataclass
class LocalOptions:
    target: str = "azureml"
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
        if options.target == "azureml":
            settings.setdefault("compute", "local-sim")  # a serverless job would otherwise want a SKU
        elif options.target == "hpcpack":
            # the "shared storage" is a folder of the run; the nodes' python is this one
            settings["shared_dir"] = str(shared_dir(options))
            settings["python"] = shlex.quote(sys.executable)
            settings.pop("setup", None)
        targets[options.target] = settings
        data["targets"] = targets
        return data
    return transform


def shared_dir(options: LocalOptions) -> Path:
    return Path(options.workdir).resolve() / "shared"


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


def _play(options: LocalOptions, job_dir: Path, workdir: Path, valid, out, hosts) -> int:
    if options.target == "hpcpack":
        staged = subprocess.run(["bash", str(job_dir / "stage.sh")], capture_output=True, text=True)
        if staged.returncode != 0:
            print(f"trainspec: error: stage.sh failed: {staged.stderr.strip()}", file=sys.stderr)
            return 1
        return play_hpcpack(job_dir / "job.xml", timeout=options.timeout, out=out, name=valid.name,
                            start_delays=options.start_delays, rendezvous_timeout=options.rendezvous_timeout,
                            hosts=hosts)
    code = workdir / "code"
    if code.exists():
        shutil.rmtree(code)
    shutil.copytree(valid.resolve(valid.spec.code), code,
                    ignore=shutil.ignore_patterns("__pycache__", ".git", "lightning_logs", "outputs"))
    return play(job_dir / "job.yml", code, workdir, inputs=options.inputs, timeout=options.timeout, out=out,
                name=valid.name, target=options.target, rendezvous_timeout=options.rendezvous_timeout, hosts=hosts)


def play(job_file: Path, code: Path, workdir: Path, *, inputs: Mapping[str, str] = {}, timeout: float = 900,
         out=None, name: str = "job", target: str = "azureml", rendezvous_timeout: float = 600,
         hosts=None) -> int:
    """Run a compiled Azure ML job file the way Azure ML would, with local processes."""
    from ruamel.yaml import YAML

    out = out or sys.stdout
    job = YAML(typ="safe", pure=True).load(Path(job_file).read_text())
    paths = _data_paths(job, Path(job_file).parent, workdir, inputs)
    command = _substitute(job["command"], paths)
    hosts = hosts or Loopback()
    kind = (job.get("distribution") or {}).get("type", "pytorch").lower()
    port = _job_port(job.get("environment_variables") or {})
    world = int(job["resources"]["instance_count"]) if kind == "tensorflow" else 1
    taken = [p for p in range(port, port + world) if hosts.port_taken(p)]
    if taken:
        return _port_taken(taken[0], hosts, "distribution.master_port")
    procs = simulate_azureml(job, command, cwd=str(code), base_env=_base_env(hosts), hosts=hosts, port=port)
    print(f"trainspec: running {name} locally as {target} would: {len(procs)} process(es) "
          f"on {job['resources']['instance_count']} simulated node(s); workdir {workdir}", file=sys.stderr)
    master = None
    if len(procs) > 1 and kind != "tensorflow":
        master = Master(hosts.address(0), int(procs[0].env[contract.ENV_MASTER_PORT]), procs[0].label,
                        rendezvous_timeout, hosts.netns(0))
    return _run_and_report(procs, timeout, out, master)


def play_hpcpack(job_xml: Path, *, timeout: float = 900, out=None, name: str = "job",
                 start_delays: Optional[Mapping[int, float]] = None, job_id: str = "4242",
                 retry_count: str = "0", rendezvous_timeout: float = 600, hosts=None) -> int:
    """Run a compiled HPC Pack job the way the Linux node agent would: every task's CommandLine
    written to cmd.sh and run by bash in its WorkDirectory, with the task's environment plus the
    CCP_* variables the scheduler sets; task i on the simulated host 127.0.0.(i+2).
    ``start_delays`` starts some tasks late, as a busy scheduler would."""
    import xml.etree.ElementTree as ET

    hosts = hosts or Loopback()
    ns = {"j": "http://schemas.microsoft.com/HPCS2008R2/scheduler/"}
    root = ET.parse(job_xml).getroot()
    tasks = root.findall("j:Tasks/j:Task", ns)
    port = _job_port({v.findtext("j:Name", namespaces=ns): v.findtext("j:Value", namespaces=ns)
                      for v in root.findall("j:Tasks/j:Task/j:EnvironmentVariables/j:Variable", ns)})
    if hosts.port_taken(port):
        return _port_taken(port, hosts, "targets.hpcpack.rdzv_port")
    cores = str(os.cpu_count() or 1)
    procs: List[Proc] = []
    folder = Path(job_xml).parent / "tasks"
    for i, task in enumerate(tasks):
        env = dict(_base_env(hosts))
        env.update({v.findtext("j:Name", namespaces=ns): v.findtext("j:Value", namespaces=ns) or ""
                    for v in task.findall("j:EnvironmentVariables/j:Variable", ns)})
        host = hosts.address(i)
        env.update(CCP_JOBID=job_id, CCP_TASKID=str(i + 1), CCP_TASKINSTANCEID="0", CCP_RETRY_COUNT=retry_count,
                   CCP_NODES=f"1 {host} {cores}", CCP_NUMCPUS=cores, CCP_JOBNAME=root.get("Name", ""),
                   CCP_WORKDIR=task.get("WorkDirectory", ""), TRAINSPEC_MASTER_PORT=str(port))
        if contract.ENV_MASTER_ADDR in env:  # explicit node names: node 0 is simulated at its address
            env[contract.ENV_MASTER_ADDR] = hosts.address(0)
        script = folder / task.get("Name", f"task-{i}") / "cmd.sh"
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(task.get("CommandLine", ""))
        delay = (start_delays or {}).get(i)
        run = f"cd {shlex.quote(task.get('WorkDirectory') or '.')} && exec /bin/bash {shlex.quote(str(script))}"
        if delay:
            run = f"sleep {delay:g} && {run}"  # the scheduler starts this task late
        procs.append(Proc(label=f"node {i}", argv=["bash", "-c", run], env=env, cwd=str(script.parent),
                          netns=hosts.netns(i)))
    print(f"trainspec: running {name} locally as hpcpack would: {len(procs)} task(s), one per simulated node",
          file=sys.stderr)
    # node 0's shim publishes its host as the master, and its torchrun opens the store there
    master = (Master(hosts.address(0), port, procs[0].label, rendezvous_timeout, hosts.netns(0))
              if len(procs) > 1 else None)
    return _run_and_report(procs, timeout, out, master)


def _run_and_report(procs: List[Proc], timeout: float, out, master: Optional[Master] = None) -> int:
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


def _base_env(hosts) -> Dict[str, str]:
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


def _data_paths(job: Mapping[str, Any], job_dir: Path, workdir: Path,
                given: Mapping[str, str]) -> Dict[str, str]:
    """``inputs.x`` / ``outputs.x`` -> local paths, as Azure ML would mount them."""
    paths: Dict[str, str] = {}
    for name, item in (job.get("inputs") or {}).items():
        ref = f"inputs.{name}"
        if name in given:
            paths[ref] = str(Path(given[name]).resolve())
        elif not isinstance(item, Mapping):
            paths[ref] = str(item)
        elif is_remote(item["path"]):
            empty = workdir / "inputs" / name
            empty.mkdir(parents=True, exist_ok=True)
            print(f"trainspec: warning: input {name} ({item['path']}) is not available locally; using the empty "
                  f"directory {empty} (hint: --input {name}=PATH)", file=sys.stderr)
            paths[ref] = str(empty)
        else:
            paths[ref] = str((job_dir / item["path"]).resolve())
    for name in (job.get("outputs") or {}):
        path = workdir / "outputs" / name
        path.mkdir(parents=True, exist_ok=True)
        paths[f"outputs.{name}"] = str(path)
    return paths


def _substitute(command: str, paths: Mapping[str, str]) -> str:
    for ref, path in paths.items():
        command = command.replace("${{%s}}" % ref, shlex.quote(path))
    return command


def _job_port(env: Mapping[str, Any]) -> int:
    """The port the compiled job names (the spec's master_port, or HPC Pack's rdzv_port): the run
    uses it as the platform would, so a port the job cannot open shows up here."""
    return int(env.get(contract.ENV_MASTER_PORT) or contract.AZUREML_MASTER_PORT)


def _port_taken(port: int, hosts, field_: str) -> int:
    print(f"trainspec: error: port {port} on {hosts.address(0)} (simulated node 0) is taken: the job uses the "
          f"spec's port, as the platform would, and something here already listens on it (another run?) "
          f"(hint: stop it, or try another port for this run with --set {field_}=PORT)", file=sys.stderr)
    return 1


def simulate_azureml(job: Mapping[str, Any], command: str, *, cwd: str, base_env: Mapping[str, str],
                     hosts=None, port: Optional[int] = None) -> List[Proc]:
    """One Proc per process Azure ML would start, with the variables it would set."""
    hosts = hosts or Loopback()
    nodes = int(job["resources"]["instance_count"])
    distribution = job.get("distribution") or {"type": "pytorch", "process_count_per_instance": 1}
    kind = distribution["type"].lower()
    per_node = int(distribution.get("process_count_per_instance", 1))
    job_env = {str(k): str(v) for k, v in (job.get("environment_variables") or {}).items()}
    port = port if port is not None else _job_port(job_env)
    world = nodes * per_node if kind != "tensorflow" else int(distribution.get("worker_count", nodes))
    procs: List[Proc] = []
    for rank in range(world):
        node_rank, local_rank = divmod(rank, per_node) if kind != "tensorflow" else (rank, 0)
        env = dict(base_env)
        env.update(job_env)
        env["AZUREML_RUN_ID"] = "local-simulation"
        env["AZ_BATCH_NODE_ID"] = f"tvmps_local_{node_rank}"
        if kind == "pytorch":
            env.update(MASTER_ADDR=hosts.address(0), MASTER_PORT=str(port), WORLD_SIZE=str(world),
                       NODE_RANK=str(node_rank), RANK=str(rank), LOCAL_RANK=str(local_rank))
        elif kind == "mpi":
            env.update(OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_SIZE=str(world),
                       OMPI_COMM_WORLD_LOCAL_RANK=str(local_rank), OMPI_COMM_WORLD_LOCAL_SIZE=str(per_node),
                       OMPI_COMM_WORLD_NODE_RANK=str(node_rank * 7 + 3))  # deliberately not a node index
            if nodes > 1:
                env["AZ_BATCH_MASTER_NODE"] = f"{hosts.address(0)}:{BATCH_PORT}"
            else:
                env["AZ_BATCHAI_MPI_MASTER_NODE"] = hosts.address(0)
        elif kind == "tensorflow":
            import json
            workers = [f"{hosts.address(i)}:{port + i}" for i in range(world)]
            env["TF_CONFIG"] = json.dumps({"cluster": {"worker": workers},
                                           "task": {"type": "worker", "index": rank}, "environment": "cloud"})
        label = f"rank {rank}" if per_node > 1 or kind == "mpi" else f"node {node_rank}"
        procs.append(Proc(label=label, argv=["bash", "-c", command], env=env, cwd=cwd, netns=hosts.netns(node_rank)))
    return procs
