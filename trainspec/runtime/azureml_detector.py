"""The shim's Azure ML detectors, joined into Azure ML jobs' shim only (``shim_source`` in
runtime/__init__.py): the mpi, pytorch and tensorflow distributions. Standard library only."""

from __future__ import annotations

from collections.abc import Mapping

from trainspec.runtime.shim import (  # package only
    AZUREML_MASTER_PORT, SET_BY_LAUNCHER, Detector, Expectation, ShimError, World, _int, _nodes)
from trainspec.runtime.shim_torch import _TORCH_SOURCES, _torch_style, ordered  # package only

def _split_host_port(text: str, name: str) -> tuple[str, int | None]:
    """'host:port' or 'host' -> (host, port or None)."""
    host, sep, port = text.strip().rpartition(":")
    if not sep:
        host, port = port, ""
    if not host or (port and not port.isdigit()):
        raise ShimError("%s=%r is not 'host' or 'host:port'" % (name, text))
    return host, int(port) if port else None


class AzureMLMPI(Detector):
    """Azure ML MPI distribution (Open MPI's mpirun started every process)."""

    name = "azureml-mpi"
    sources = {
        "world_size": "OMPI_COMM_WORLD_SIZE",
        "rank": "OMPI_COMM_WORLD_RANK",
        "local_rank": "OMPI_COMM_WORLD_LOCAL_RANK",
        "local_world_size": "OMPI_COMM_WORLD_LOCAL_SIZE",
        "node_rank": "OMPI_COMM_WORLD_RANK//OMPI_COMM_WORLD_LOCAL_SIZE",
        "nodes": "OMPI_COMM_WORLD_SIZE/OMPI_COMM_WORLD_LOCAL_SIZE",
    }

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return "OMPI_COMM_WORLD_RANK" in env

    @staticmethod
    def world(env: Mapping[str, str], expect: Expectation) -> World:
        world_size = _int(env, "OMPI_COMM_WORLD_SIZE", minimum=1, required=SET_BY_LAUNCHER)
        rank = _int(env, "OMPI_COMM_WORLD_RANK", required=SET_BY_LAUNCHER)
        local_rank = _int(env, "OMPI_COMM_WORLD_LOCAL_RANK", required=SET_BY_LAUNCHER)
        local_size = _int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", minimum=1, required=SET_BY_LAUNCHER)
        # OMPI_COMM_WORLD_NODE_RANK is not a node index; node ranks only follow
        # from the rank when mpirun fills each node's slots before the next.
        if local_rank != rank % local_size:
            raise ShimError(
                "OMPI_COMM_WORLD_LOCAL_RANK=%d but OMPI_COMM_WORLD_RANK=%d %% OMPI_COMM_WORLD_LOCAL_SIZE=%d is %d: "
                "mpirun placed the ranks round-robin, not by slot, so node ranks cannot be derived; "
                "run mpirun with --map-by slot (the default) instead of --map-by node"
                % (local_rank, rank, local_size, rank % local_size))
        nodes = _nodes(world_size, local_size, "OMPI_COMM_WORLD_SIZE=%d" % world_size, expect)
        # AZ_BATCH_MASTER_NODE's port belongs to Azure Batch: take only its host.
        if env.get("AZ_BATCH_MASTER_NODE", "").strip():
            master_addr, _ = _split_host_port(env["AZ_BATCH_MASTER_NODE"], "AZ_BATCH_MASTER_NODE")
        elif env.get("AZ_BATCHAI_MPI_MASTER_NODE", "").strip():
            master_addr = env["AZ_BATCHAI_MPI_MASTER_NODE"].strip()
        elif env.get("MASTER_ADDR", "").strip():
            master_addr = env["MASTER_ADDR"].strip()
        elif local_size == world_size:
            master_addr = "127.0.0.1"
        else:
            raise ShimError("no master address: none of AZ_BATCH_MASTER_NODE, AZ_BATCHAI_MPI_MASTER_NODE, MASTER_ADDR "
                            "is set in an MPI world of %d processes on %d nodes" % (world_size, nodes))
        return World(AzureMLMPI.name, master_addr, _int(env, "MASTER_PORT", 1) or AZUREML_MASTER_PORT, world_size,
                     rank, local_rank, local_size, rank // local_size, nodes)


class AzureMLPyTorch(Detector):
    """Azure ML pytorch distribution: Azure ML itself starts every process."""

    name = "azureml-pytorch"
    sources = _TORCH_SOURCES

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return all(name in env for name in ("AZUREML_RUN_ID", "RANK", "WORLD_SIZE"))

    @staticmethod
    def world(env: Mapping[str, str], expect: Expectation) -> World:
        return _torch_style(AzureMLPyTorch.name, env, expect, AZUREML_MASTER_PORT)


# ---------------------------------------------------------------- TensorFlow (TF_CONFIG)


class TensorFlow(Detector):
    """TF_CONFIG (Azure ML tensorflow distribution): one worker process per node."""

    name = "tensorflow"
    sources = {
        "world_size": "TF_CONFIG cluster.worker",
        "rank": "TF_CONFIG task.index",
        "node_rank": "TF_CONFIG task.index",
        "nodes": "TF_CONFIG cluster.worker",
        "local_world_size": "TF_CONFIG (one worker per node)",
    }

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return "TF_CONFIG" in env

    @staticmethod
    def world(env: Mapping[str, str], expect: Expectation) -> World:
        import json  # only here: keeps the shim's start-up cheap elsewhere

        try:
            config = json.loads(env["TF_CONFIG"])
            workers = config["cluster"]["worker"]
            task_type, index = config["task"]["type"], config["task"]["index"]
        except (ValueError, KeyError, TypeError) as error:
            raise ShimError(
                "TF_CONFIG=%r is not {\"cluster\": {\"worker\": [...]}, \"task\": {\"type\", \"index\"}} (%s)"
                % (env["TF_CONFIG"], error)) from None
        if task_type != "worker":
            raise ShimError("TF_CONFIG task type %r is not supported; trainspec runs only workers" % task_type)
        if not isinstance(workers, list) or not workers or not isinstance(index, int) or index < 0:
            raise ShimError("TF_CONFIG=%r needs a non-empty worker list and an integer index" % env["TF_CONFIG"])
        master_addr, master_port = _split_host_port(str(workers[0]), "TF_CONFIG cluster.worker[0]")
        if master_port is None:
            raise ShimError("TF_CONFIG cluster.worker[0]=%r has no port" % workers[0])
        return World(TensorFlow.name, master_addr, master_port, len(workers), index, 0, 1, index, len(workers))


# This platform's detectors in priority order, and the job's: between torch's own (shim_torch.ordered).
PLATFORM = (AzureMLMPI, AzureMLPyTorch, TensorFlow)
DETECTORS = ordered(PLATFORM)
