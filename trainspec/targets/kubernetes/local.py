"""run --local for Kubernetes: job.yaml's pods played on the simulated nodes, one process per pod
with exactly the variables Kubeflow's controller injects (../shared/reference/kubernetes.md): a
TrainJob's PET_* (PET_MASTER_ADDR: node 0's simulated address, standing in for its JobSet DNS
name), a PyTorchJob's MASTER_ADDR/RANK (the pod index)/WORLD_SIZE and PET_*. The ConfigMaps are
written into the work directory, a claim is a folder of it (an input's: ``--input``, or its own
path when it is here), and every path of ours in the command (/trainspec/...) points there.
"""

from __future__ import annotations

import base64
import shlex
import sys
from pathlib import Path
from typing import Dict, List, Tuple

from trainspec.runtime import shim as contract
from trainspec.targets.kubernetes.lower import CODE_DIR, JOB_FILE, SHIM_DIR, TRAINJOB_PORT, pod_template


def pod_env(job: Dict, node: int, nodes: int, master: str) -> Dict[str, str]:
    """What the controller puts in node ``node``'s pod: the job's env, then its own variables."""
    if job["kind"] == "TrainJob":
        trainer = job["spec"]["trainer"]
        env = {e["name"]: e["value"] for e in trainer.get("env", []) if "value" in e}  # a Secret's: _secrets
        env.update(PET_NNODES=str(nodes), PET_NPROC_PER_NODE=str(trainer.get("numProcPerNode", 1)),
                   PET_NODE_RANK=str(node), PET_MASTER_ADDR=master, PET_MASTER_PORT=str(TRAINJOB_PORT),
                   JOB_COMPLETION_INDEX=str(node))
        return env
    container = pod_template(job)["containers"][0]
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}  # a Secret's: _secrets
    port = str(container["ports"][0]["containerPort"])
    nproc = job["spec"]["nprocPerNode"]
    env.update(MASTER_ADDR=master, PET_MASTER_ADDR=master, MASTER_PORT=port, PET_MASTER_PORT=port,
               WORLD_SIZE=str(nodes * (1 if nproc == "auto" else int(nproc))), RANK=str(node),
               PET_NODE_RANK=str(node), PET_NNODES=str(nodes), PET_NPROC_PER_NODE=nproc, PYTHONUNBUFFERED="1")
    return env


def _secrets(job: Dict) -> List[str]:
    """A line per variable the kubelet would take from a Secret: no Secret is here, so the run
    passes this shell's variable of that name, if it has one (base_env)."""
    env = job["spec"]["trainer"].get("env", []) if job["kind"] == "TrainJob" else \
        pod_template(job)["containers"][0].get("env", [])
    import os

    lines = []
    for entry in env:
        ref = (entry.get("valueFrom") or {}).get("secretKeyRef")
        if ref is not None:
            here = "this shell's" if entry["name"] in os.environ else "not set here: export it to give one"
            lines.append(f"{entry['name']}: from Secret {ref['name']}, key {ref['key']} in the cluster; {here}")
    return lines


def _command(job: Dict, paths: Dict[str, Path]) -> List[str]:
    """The container's command, each path of ours (``paths``: mount path -> where it is here)
    moved to where this run put it, word by word."""
    spec = job["spec"]
    command = spec["trainer"]["command"] if job["kind"] == "TrainJob" else pod_template(job)["containers"][0]["command"]
    order = sorted(paths, key=len, reverse=True)

    def moved(word: str) -> str:
        for mount in order:
            for at in [0] + [i + 1 for i, c in enumerate(word) if c == "="]:  # a word, or --flag=<path>
                rest = word[at:]
                if rest == mount or rest.startswith(mount + "/"):
                    return word[:at] + str(paths[mount]) + rest[len(mount):]
        return word

    words = [moved(w) for w in shlex.split(command[2])]  # [copy &&] cd <code> && exec <shim> -- <command>
    # the operators are ours, before exec: an argument "&&" of the command stays an argument
    ours = words.index("exec")
    return [*command[:2], " ".join(w if i < ours and w == "&&" else shlex.quote(w) for i, w in enumerate(words))]


def _volumes(job: Dict, documents: List[Dict], run) -> Tuple[Dict[str, Path], List[str]]:
    """Every volume of the pod made here, as the kubelet would mount it: the ConfigMaps' keys
    written at their paths, a claim a folder of the work directory (an input: ``--input``, else
    its path when it is here). Returns mount path -> local path, and a line per claim."""
    maps = {doc["metadata"]["name"]: doc for doc in documents if doc.get("kind") == "ConfigMap"}
    pod = pod_template(job)
    mounts = {m["name"]: m for m in pod["containers"][0].get("volumeMounts", [])}
    root = run.workdir / "trainspec"
    paths: Dict[str, Path] = {}
    told = []
    for volume in pod.get("volumes", []):
        mount = mounts.get(volume["name"])
        if mount is None or not mount["mountPath"].startswith(SHIM_DIR + "/"):
            continue  # /dev/shm: this machine's own
        at = mount["mountPath"]
        here = root / at[len(SHIM_DIR) + 1:]
        source = volume.get("configMap")
        if source is not None:
            data = maps[source["name"]]
            files = {**{k: v.encode("utf-8") for k, v in (data.get("data") or {}).items()},
                     **{k: base64.b64decode(v) for k, v in (data.get("binaryData") or {}).items()}}
            folder = root if mount.get("subPath") else here  # one key at a file, or the map as a folder
            for item in source["items"]:
                path = folder / item["path"]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(files[item["key"]])
            paths[at] = here
            continue
        if "emptyDir" in volume:  # a folder of the pod's own: one of the work directory
            paths[at] = root / "emptydir" / volume["name"]
            paths[at].mkdir(parents=True, exist_ok=True)
            continue
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if claim is None:
            continue
        if at == CODE_DIR:
            paths[at] = run.valid.resolve(run.valid.spec.code)  # the code on a claim: the spec's folder
            continue
        kind, _, name = at[len(SHIM_DIR) + 1:].partition("/")
        item = run.valid.spec.inputs.get(name) if kind == "inputs" else None
        given = run.options.inputs.get(name) if item is not None else None
        if given is None and item is not None and item.path and run.valid.resolve(item.path).exists():
            given = str(run.valid.resolve(item.path))
        if given is not None:
            paths[at] = Path(given).resolve()
            told.append(f"{kind}.{name}: {paths[at]} (claim {claim} in the cluster)")
            continue
        here = run.workdir / "claims" / claim / (mount.get("subPath") or "")
        here.mkdir(parents=True, exist_ok=True)
        paths[at] = here
        told.append(f"{kind}.{name}: {here} (claim {claim}" + (", empty here: give --input " + name + "=PATH"
                                                                if kind == "inputs" else "") + ")")
    return paths, told


def play_local(job_dir: Path, run) -> int:
    import yaml  # a test and CLI dependency already (PyYAML reads what kubectl reads)

    from trainspec.local.machinery import Master, Proc, base_env, run_and_report

    documents = [d for d in yaml.safe_load_all((job_dir / JOB_FILE).read_text(encoding="utf-8")) if d]
    job = documents[-1]
    paths, told = _volumes(job, documents, run)
    told += _secrets(job)
    code = paths.get(CODE_DIR) or run.valid.resolve(run.valid.spec.code)  # code in the image: the spec's folder
    paths.setdefault(CODE_DIR, code)
    hosts, nodes = run.hosts, run.valid.nodes
    argv = _command(job, paths)
    procs = []
    for node in range(nodes):
        env = base_env(hosts)
        env.update(pod_env(job, node, nodes, hosts.address(0)))
        procs.append(Proc(label=f"node {node}", argv=argv, env=env, cwd=str(code), netns=hosts.netns(node)))
    port = int(procs[0].env.get(contract.ENV_MASTER_PORT) or procs[0].env.get("PET_MASTER_PORT", TRAINJOB_PORT))
    print(f"trainspec: running {run.valid.name} locally as Kubeflow would: the {job['kind']}'s {nodes} pod(s) on "
          f"simulated nodes; workdir {run.workdir}", file=sys.stderr)
    for line in told:
        print(f"trainspec: {line}", file=sys.stderr)
    master = Master(hosts.address(0), port, "node 0", run.options.rendezvous_timeout, hosts.netns(0)) if nodes > 1 \
        else None
    return run_and_report(procs, run.options.timeout, run.out, master)
