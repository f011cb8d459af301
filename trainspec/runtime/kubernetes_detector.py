"""The shim's Kubeflow detectors, joined into Kubernetes jobs' shim only (``shim_source`` in
runtime/__init__.py): a pod that Kubeflow Trainer v2 (TrainJob) or the training-operator
(PyTorchJob) started, one launcher per pod (../shared/reference/kubernetes.md). Standard library only.

- TrainJob (the Trainer's torch plugin): ``PET_NNODES``, ``PET_NPROC_PER_NODE``,
  ``PET_NODE_RANK`` (the pod's completion index), ``PET_MASTER_ADDR``, ``PET_MASTER_PORT``;
  no RANK, WORLD_SIZE or MASTER_ADDR.
- PyTorchJob: those PET_* and ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK`` = the POD index (Master
  0, Worker i -> i + 1), ``WORLD_SIZE`` = pods x nprocPerNode: a per-pod view, not torch's.

Either way the platform starts one process per pod: per node that process is torchrun (or
Lightning), which starts the pod's workers; per process, one per pod.
"""

from __future__ import annotations

from collections.abc import Mapping

from trainspec.runtime.shim import Detector, Expectation, ShimError, World, _int  # package only
from trainspec.runtime.shim_torch import ordered  # package only

TRAINJOB = "kubeflow-trainjob"
PYTORCHJOB = "kubeflow-pytorchjob"
SET_BY_TRAINER = ", but Kubeflow sets it in every pod of a TrainJob or PyTorchJob"
_POD = {"local_rank": "one process per pod", "local_world_size": "one process per pod"}


def _pod_world(name: str, env: Mapping[str, str], expect: Expectation, node_rank_var: str) -> World:
    nodes = _int(env, "PET_NNODES", 1, SET_BY_TRAINER)
    node_rank = _int(env, node_rank_var, 0, SET_BY_TRAINER)
    master_addr = env.get("PET_MASTER_ADDR", "").strip() or env.get("MASTER_ADDR", "").strip()
    if not master_addr:
        raise ShimError("PET_MASTER_ADDR is not set%s" % SET_BY_TRAINER)
    port = _int(env, "PET_MASTER_PORT", 1) or _int(env, "MASTER_PORT", 1, SET_BY_TRAINER)
    nproc = env.get("PET_NPROC_PER_NODE", "").strip()
    if (expect.launcher == "per-node" and expect.procs_per_node is not None and nproc not in ("", "auto")
            and nproc != str(expect.procs_per_node)):
        raise ShimError("PET_NPROC_PER_NODE=%s: the job starts %s processes per pod, but %s expects "
                        "resources.procs_per_node (%d); compile the job again"
                        % (nproc, nproc, expect.spec or "the spec", expect.procs_per_node))
    return World(name, master_addr, port, nodes, node_rank, 0, 1, node_rank, nodes)


class TrainJob(Detector):
    """A TrainJob's pod: the Trainer's torch plugin set PET_* only."""

    name = TRAINJOB
    sources = {"world_size": "PET_NNODES", "rank": "PET_NODE_RANK", "node_rank": "PET_NODE_RANK",
               "nodes": "PET_NNODES", **_POD}

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return "PET_NNODES" in env and "PET_NODE_RANK" in env and "WORLD_SIZE" not in env

    @staticmethod
    def world(env: Mapping[str, str], expect: Expectation) -> World:
        return _pod_world(TRAINJOB, env, expect, "PET_NODE_RANK")


class PyTorchJob(Detector):
    """A PyTorchJob's pod: RANK is the pod's index, WORLD_SIZE pods x nprocPerNode."""

    name = PYTORCHJOB
    sources = {"world_size": "PET_NNODES", "rank": "RANK (the pod index)", "node_rank": "RANK (the pod index)",
               "nodes": "PET_NNODES", **_POD}

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return "PET_NNODES" in env and "RANK" in env and "WORLD_SIZE" in env

    @staticmethod
    def world(env: Mapping[str, str], expect: Expectation) -> World:
        world = _pod_world(PYTORCHJOB, env, expect, "RANK")
        node_rank = _int(env, "PET_NODE_RANK")
        if node_rank is not None and node_rank != world.node_rank:
            raise ShimError("RANK=%d but PET_NODE_RANK=%d: the training-operator sets both to the pod "
                            "index; the job was edited" % (world.node_rank, node_rank))
        return world


# This platform's detectors in priority order, and the job's: between torch's own (shim_torch.ordered).
PLATFORM = (PyTorchJob, TrainJob)
DETECTORS = ordered(PLATFORM)
