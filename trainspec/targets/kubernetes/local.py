"""run --local for Kubernetes: job.yaml's pods played on the simulated nodes, one process per pod
with exactly the variables Kubeflow's controller injects (../shared/reference/kubernetes.md): a
TrainJob's PET_* (PET_MASTER_ADDR: node 0's simulated address, standing in for its JobSet DNS
name), a PyTorchJob's MASTER_ADDR/RANK (the pod index)/WORLD_SIZE and PET_*. The ConfigMaps are
written into the work directory and the pod's two paths of ours (the shim, the code) point there.
"""

from __future__ import annotations

import base64
import shlex
import sys
from pathlib import Path
from typing import Dict, List

from trainspec.compile.base import SHIM_FILE
from trainspec.targets.kubernetes.lower import CODE_DIR, JOB_FILE, SHIM_DIR, TRAINJOB_PORT


def pod_env(job: Dict, node: int, nodes: int, master: str) -> Dict[str, str]:
    """What the controller puts in node ``node``'s pod: the job's env, then its own variables."""
    if job["kind"] == "TrainJob":
        trainer = job["spec"]["trainer"]
        env = {e["name"]: e["value"] for e in trainer.get("env", [])}
        env.update(PET_NNODES=str(nodes), PET_NPROC_PER_NODE=str(trainer.get("numProcPerNode", 1)),
                   PET_NODE_RANK=str(node), PET_MASTER_ADDR=master, PET_MASTER_PORT=str(TRAINJOB_PORT),
                   JOB_COMPLETION_INDEX=str(node))
        return env
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container.get("env", [])}
    port = str(container["ports"][0]["containerPort"])
    nproc = job["spec"]["nprocPerNode"]
    env.update(MASTER_ADDR=master, PET_MASTER_ADDR=master, MASTER_PORT=port, PET_MASTER_PORT=port,
               WORLD_SIZE=str(nodes * (1 if nproc == "auto" else int(nproc))), RANK=str(node),
               PET_NODE_RANK=str(node), PET_NNODES=str(nodes), PET_NPROC_PER_NODE=nproc, PYTHONUNBUFFERED="1")
    return env


def _command(job: Dict, shim: Path, code: Path) -> List[str]:
    """The container's command, with our two paths moved to where the ConfigMaps were written."""
    spec = job["spec"]
    command = (spec["trainer"]["command"] if job["kind"] == "TrainJob" else
               spec["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"])
    line = command[2].replace(f"cd {CODE_DIR} && ", f"cd {shlex.quote(str(code))} && ", 1)
    line = line.replace(f" {SHIM_DIR}/{SHIM_FILE} ", f" {shlex.quote(str(shim))} ", 1)
    return [*command[:2], line]


def play_local(job_dir: Path, run) -> int:
    import yaml  # a test and CLI dependency already (PyYAML reads what kubectl reads)

    from trainspec.local.machinery import Master, Proc, base_env, run_and_report

    documents = [d for d in yaml.safe_load_all((job_dir / JOB_FILE).read_text(encoding="utf-8")) if d]
    runtime = run.workdir / "trainspec"
    code = runtime / "code"
    job = documents[-1]
    maps = {doc["metadata"]["name"]: doc for doc in documents[:-1]}  # the ConfigMaps
    if job["kind"] == "TrainJob":
        volumes = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0][
            "template"]["spec"]["template"]["spec"]["volumes"]
    else:
        volumes = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["volumes"]
    for volume in volumes:  # every ConfigMap key written at its path, as the kubelet mounts it
        source = volume.get("configMap")
        if source is None:
            continue
        data = maps[source["name"]]
        files = {**{k: v.encode("utf-8") for k, v in (data.get("data") or {}).items()},
                 **{k: base64.b64decode(v) for k, v in (data.get("binaryData") or {}).items()}}
        folder = code if volume["name"] == "trainspec-code" else runtime
        for item in source["items"]:
            path = folder / item["path"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(files[item["key"]])
    if not code.is_dir():
        code = run.valid.resolve(run.valid.spec.code)  # a claim or a path in the image: the spec's folder
    hosts, nodes = run.hosts, run.valid.nodes
    argv = _command(job, runtime / "trainspec_shim.py", code)
    procs = []
    for node in range(nodes):
        env = base_env(hosts)
        env.update(pod_env(job, node, nodes, hosts.address(0)))
        procs.append(Proc(label=f"node {node}", argv=argv, env=env, cwd=str(code), netns=hosts.netns(node)))
    port = int(procs[0].env.get("PET_MASTER_PORT", TRAINJOB_PORT))
    print(f"trainspec: running {run.valid.name} locally as Kubeflow would: the {job['kind']}'s {nodes} pod(s) on "
          f"simulated nodes; workdir {run.workdir}", file=sys.stderr)
    master = Master(hosts.address(0), port, "node 0", run.options.rendezvous_timeout, hosts.netns(0)) if nodes > 1 \
        else None
    return run_and_report(procs, run.options.timeout, run.out, master)
