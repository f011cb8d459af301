"""run --local for Azure ML: the compiled job.yml played the way Azure ML would, with local
processes carrying the variables its distributions set (an emulation written from Azure ML's
documentation, independent of the shim that reads them).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from trainspec.core.fields import is_remote
from trainspec.runtime import shim as contract
from trainspec.targets.azureml.lower import JOB_FILE


def play_local(job_dir: Path, run) -> int:
    o = run.options
    return play_job(job_dir / JOB_FILE, run.copy_code(), run.workdir, inputs=o.inputs, timeout=o.timeout, out=run.out,
                    name=run.valid.name, rendezvous_timeout=o.rendezvous_timeout, hosts=run.hosts)


_BATCH_PORT = 6000  # the port in AZ_BATCH_MASTER_NODE belongs to Azure Batch: the shim must ignore it


def play_job(job_file: Path, code: Path, workdir: Path, *, inputs: Mapping[str, str] = {}, timeout: float = 900,
             out=None, name: str = "job", rendezvous_timeout: float = 600, hosts=None) -> int:
    """Run a compiled Azure ML job file the way Azure ML would, with local processes."""
    from ruamel.yaml import YAML

    from trainspec.local.machinery import Master, base_env, job_port, port_taken, run_and_report
    from trainspec.local.netns import Loopback

    out = out or sys.stdout
    job = YAML(typ="safe", pure=True).load(Path(job_file).read_text())
    paths = _data_paths(job, Path(job_file).parent, workdir, inputs)
    command = _substitute(job["command"], paths)
    hosts = hosts or Loopback()
    kind = (job.get("distribution") or {}).get("type", "pytorch").lower()
    port = job_port(job.get("environment_variables") or {})
    world = int(job["resources"]["instance_count"]) if kind == "tensorflow" else 1
    taken = [p for p in range(port, port + world) if hosts.port_taken(p)]
    if taken:
        return port_taken(taken[0], hosts, "distribution.master_port")
    procs = platform_processes(job, command, cwd=str(code), base_env=base_env(hosts), hosts=hosts, port=port)
    print(f"trainspec: running {name} locally as Azure ML would: {len(procs)} process(es) "
          f"on {job['resources']['instance_count']} simulated node(s); workdir {workdir}", file=sys.stderr)
    master = None
    if len(procs) > 1 and kind != "tensorflow":
        master = Master(hosts.address(0), int(procs[0].env[contract.ENV_MASTER_PORT]), procs[0].label,
                        rendezvous_timeout, hosts.netns(0))
    return run_and_report(procs, timeout, out, master)


def platform_processes(job: Mapping[str, Any], command: str, *, cwd: str, base_env: Mapping[str, str],
                       hosts=None, port: Optional[int] = None) -> list:
    """One Proc per process Azure ML would start, with the variables it would set: an emulation of
    the platform, written from its documentation, independent of the shim that reads them."""
    from trainspec.local.machinery import Proc, job_port
    from trainspec.local.netns import Loopback

    hosts = hosts or Loopback()
    nodes = int(job["resources"]["instance_count"])
    distribution = job.get("distribution") or {"type": "pytorch", "process_count_per_instance": 1}
    kind = distribution["type"].lower()
    per_node = int(distribution.get("process_count_per_instance", 1))
    job_env = {str(k): str(v) for k, v in (job.get("environment_variables") or {}).items()}
    port = port if port is not None else job_port(job_env)
    world = nodes * per_node if kind != "tensorflow" else int(distribution.get("worker_count", nodes))
    procs = []
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
                env["AZ_BATCH_MASTER_NODE"] = f"{hosts.address(0)}:{_BATCH_PORT}"
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
