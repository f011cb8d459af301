"""`trainspec run --local`: the compiled job, on this machine, before paying for GPUs.

The spec is compiled for the target exactly as `compile` does, then the *compiled file* is
read back and played the way the platform would play it: one local process per platform
process, each with the variables that platform sets (Azure ML's pytorch distribution, or
Open MPI's only, or TF_CONFIG), the job's own environment_variables, and its command run
through bash in a copy of the code directory. Simulated nodes get distinct loopback
addresses (127.0.0.2, 127.0.0.3, ...). Overrides (processes per node, launcher) go through
the same validation as file content.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from .runtime.procs import Proc, free_port, loopback_host, run_all

# Variables a platform sets: never inherited from the shell that runs `trainspec run`.
_PLATFORM_PREFIXES = ("OMPI_", "PMIX_", "AZ_BATCH", "AZUREML_", "TORCHELASTIC_", "SLURM_", "CCP_", "PL_TRAINER_",
                      "TRAINSPEC_")
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
    workdir: Optional[str] = None


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
        # local runs need no cloud compute; a serverless job would otherwise want a SKU
        targets = dict(data.get("targets") or {}) if isinstance(data.get("targets", {}), dict) else {}
        azureml = dict(targets.get("azureml") or {}) if isinstance(targets.get("azureml", {}), dict) else {}
        azureml.setdefault("compute", "local-sim")
        targets["azureml"] = azureml
        data["targets"] = targets
        return data
    return transform


def run_local(spec_file: str, options: LocalOptions, out=None) -> int:
    from .build import build
    from .compiler.write import target_dir, write

    workdir = Path(options.workdir) if options.workdir else Path(tempfile.mkdtemp(prefix="trainspec-run-"))
    workdir.mkdir(parents=True, exist_ok=True)
    outcome = build(spec_file, workdir, [options.target], transform=overrides(options))
    for d in outcome.diagnostics:
        print(d.render(), file=sys.stderr)
    if not outcome.ok:
        print("trainspec: the spec has errors; nothing was run", file=sys.stderr)
        return 1
    artifact = outcome.artifacts[0]
    job_dir = write(target_dir(workdir, artifact), artifact)
    valid = outcome.valid
    code = workdir / "code"
    if code.exists():
        shutil.rmtree(code)
    shutil.copytree(valid.resolve(valid.spec.code), code,
                    ignore=shutil.ignore_patterns("__pycache__", ".git", "lightning_logs", "outputs"))

    return play(job_dir / "job.yml", code, workdir, inputs=options.inputs, timeout=options.timeout, out=out,
                name=valid.name, target=options.target)


def play(job_file: Path, code: Path, workdir: Path, *, inputs: Mapping[str, str] = {}, timeout: float = 900,
         out=None, name: str = "job", target: str = "azureml") -> int:
    """Run a compiled Azure ML job file the way Azure ML would, with local processes."""
    from ruamel.yaml import YAML

    out = out or sys.stdout
    job = YAML(typ="safe", pure=True).load(Path(job_file).read_text())
    paths = _data_paths(job, Path(job_file).parent, workdir, inputs)
    command = _substitute(job["command"], paths)
    procs = simulate_azureml(job, command, cwd=str(code), base_env=_base_env())
    print(f"trainspec: running {name} locally as {target} would: {len(procs)} process(es) "
          f"on {job['resources']['instance_count']} simulated node(s); workdir {workdir}", file=sys.stderr)
    started = time.monotonic()
    result = run_all(procs, timeout=timeout, out=out)
    elapsed = time.monotonic() - started
    if result.exit_code == 0:
        print(f"trainspec: all {len(procs)} processes exited 0 in {elapsed:.1f} s", file=sys.stderr)
        return 0
    if result.timed_out:
        print(f"trainspec: error: the run did not finish within {timeout:g} s; every process was stopped",
              file=sys.stderr)
        return result.exit_code
    print(f"trainspec: error: {result.failed} exited with code {result.exit_code} after {elapsed:.1f} s; "
          "the run was stopped. Its last lines:", file=sys.stderr)
    for line in result.tail:
        print(f"  | {line}", file=sys.stderr)
    return result.exit_code


def _base_env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in _PLATFORM_NAMES and not k.startswith(_PLATFORM_PREFIXES)}
    # the job's `python` is the interpreter trainspec runs under (its virtualenv, its torch)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    env["GLOO_SOCKET_IFNAME"] = "lo"  # simulated nodes talk over loopback only
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
        elif "://" in item["path"] or item["path"].startswith("azureml:"):
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


def simulate_azureml(job: Mapping[str, Any], command: str, *, cwd: str, base_env: Mapping[str, str]) -> List[Proc]:
    """One Proc per process Azure ML would start, with the variables it would set."""
    nodes = int(job["resources"]["instance_count"])
    distribution = job.get("distribution") or {"type": "pytorch", "process_count_per_instance": 1}
    kind = distribution["type"].lower()
    per_node = int(distribution.get("process_count_per_instance", 1))
    port = free_port(loopback_host(0))
    job_env = {str(k): str(v) for k, v in (job.get("environment_variables") or {}).items()}
    job_env["TRAINSPEC_MASTER_PORT"] = str(port)  # a free port here instead of the cluster's fixed one
    world = nodes * per_node if kind != "tensorflow" else int(distribution.get("worker_count", nodes))
    procs: List[Proc] = []
    for rank in range(world):
        node_rank, local_rank = divmod(rank, per_node) if kind != "tensorflow" else (rank, 0)
        env = dict(base_env)
        env.update(job_env)
        env["AZUREML_RUN_ID"] = "local-simulation"
        env["AZ_BATCH_NODE_ID"] = f"tvmps_local_{node_rank}"
        if kind == "pytorch":
            env.update(MASTER_ADDR=loopback_host(0), MASTER_PORT=str(port), WORLD_SIZE=str(world),
                       NODE_RANK=str(node_rank), RANK=str(rank), LOCAL_RANK=str(local_rank))
        elif kind == "mpi":
            env.update(OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_SIZE=str(world),
                       OMPI_COMM_WORLD_LOCAL_RANK=str(local_rank), OMPI_COMM_WORLD_LOCAL_SIZE=str(per_node),
                       OMPI_COMM_WORLD_NODE_RANK=str(node_rank * 7 + 3))  # deliberately not a node index
            if nodes > 1:
                env["AZ_BATCH_MASTER_NODE"] = f"{loopback_host(0)}:{BATCH_PORT}"
            else:
                env["AZ_BATCHAI_MPI_MASTER_NODE"] = loopback_host(0)
        elif kind == "tensorflow":
            import json
            workers = [f"{loopback_host(i)}:{port + i}" for i in range(world)]
            env["TF_CONFIG"] = json.dumps({"cluster": {"worker": workers},
                                           "task": {"type": "worker", "index": rank}, "environment": "cloud"})
        label = f"rank {rank}" if per_node > 1 or kind == "mpi" else f"node {node_rank}"
        procs.append(Proc(label=label, argv=["bash", "-c", command], env=env, cwd=cwd))
    return procs
