"""The shim's HPC Pack detector, joined into HPC Pack jobs' shim only (``shim_source`` in
runtime/__init__.py): one task per node as trainspec compiles it, its rank and the node count
baked in; the master's name too, or elected in a shared directory by hpcpack_election.py,
shipped beside the shim and loaded by path. Standard library only."""

from __future__ import annotations

import os
from collections.abc import Mapping

from trainspec.runtime.shim import (  # package only
    ENV_MASTER_ADDR, ENV_NODE_RANK, ENV_NODES, ENV_RDZV_DIR, ENV_RDZV_TIMEOUT, ENV_SPEC, ELECTION_FILE,
    HPCPACK_MASTER_PORT, RDZV_TIMEOUT, Detector, Expectation, ShimError, World, _int)
from trainspec.runtime.shim_torch import ordered  # package only

BAKED = "; trainspec writes it into every task of the HPC Pack jobs it compiles, so this job was not " \
        "compiled by trainspec or was edited"


class HPCPack(Detector):
    """HPC Pack (Linux node agent), one task per node as trainspec compiles it: node rank and count
    baked into each task; the master's name too, or elected in a shared directory (``_election``)."""

    name = "hpcpack"
    job_variable = "CCP_JOBID"
    sources = {
        "world_size": ENV_NODES,
        "rank": ENV_NODE_RANK,
        "local_rank": "HPC Pack task on its node",
        "local_world_size": "HPC Pack tasks per node",
        "node_rank": ENV_NODE_RANK,
        "nodes": ENV_NODES,
    }

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return "CCP_JOBID" in env

    @staticmethod
    def world(env: Mapping[str, str], expect: Expectation) -> World:
        """Pure: the baked-in variables only.  master_addr "" means: elect it in ``rendezvous``."""
        nodes = _int(env, ENV_NODES, 1, BAKED, BAKED)
        node_rank = _int(env, ENV_NODE_RANK, 0, BAKED, BAKED)
        if node_rank >= nodes:
            raise ShimError(
                "TRAINSPEC_NODE_RANK=%d is not below TRAINSPEC_NODES=%d: the HPC Pack job has more tasks than "
                "nodes, or was edited; node ranks run from 0 to %d" % (node_rank, nodes, nodes - 1))
        master_addr = env.get(ENV_MASTER_ADDR, "").strip()
        if not master_addr:
            if nodes == 1:
                master_addr = "127.0.0.1"  # nothing to elect: the only node is the master
            elif not env.get(ENV_RDZV_DIR, "").strip():
                raise ShimError(
                    "neither TRAINSPEC_MASTER_ADDR nor TRAINSPEC_RDZV_DIR is set in an HPC Pack job of %d nodes, "
                    "so the nodes cannot agree on a master; the job was not compiled by trainspec or was edited "
                    "(targets.hpcpack: list the node names, or set shared_dir)" % nodes)
        return World(HPCPack.name, master_addr, expect.master_port or HPCPACK_MASTER_PORT, nodes, node_rank, 0, 1,
                     node_rank, nodes)

    @staticmethod
    def rendezvous(env: Mapping[str, str], world: World) -> World:
        """Elect the master in TRAINSPEC_RDZV_DIR when it was not baked in (file I/O, may wait)."""
        if world.master_addr:
            return world
        job = env.get("CCP_JOBID", "").strip()
        if not _safe_name(job):
            raise ShimError("CCP_JOBID=%r is not a job id: it names the job's folder in TRAINSPEC_RDZV_DIR"
                            % env.get("CCP_JOBID"))
        timeout = _int(env, ENV_RDZV_TIMEOUT, 1, None, " (whole seconds)")
        identity = "job=%s nodes=%d port=%d spec=%s" % (
            job, world.nodes, world.master_port, " ".join(env.get(ENV_SPEC, "").split()))
        election = _election()
        try:
            master = election.elect_master(env[ENV_RDZV_DIR].strip(), job, world.node_rank, world.nodes,
                                           _hpcpack_host(env), RDZV_TIMEOUT if timeout is None else timeout, identity)
        except election.ElectionError as error:
            raise ShimError(str(error)) from None
        return world._replace(master_addr=master)


def _election():
    """The election module beside this file, loaded by path: the shim runs as ``python -I -S
    trainspec_shim.py``, so its own folder is not on sys.path. HPC Pack jobs ship it as
    ELECTION_FILE; in the trainspec package it is hpcpack_election.py."""
    module = _beside(ELECTION_FILE, "hpcpack_election.py")
    if module is not None:
        return module
    raise ShimError("%s is missing beside %s: this HPC Pack job elects its master through TRAINSPEC_RDZV_DIR, "
                    "which needs it; stage the job again (bash stage.sh copies both files), or list the nodes "
                    "(targets.hpcpack.nodes) so that none is elected" % (ELECTION_FILE, os.path.abspath(__file__)))


def _beside(*names: str):
    """The first of ``names`` beside this file, loaded by path as a module (None: none is there)."""
    import importlib.util  # only here: keeps the shim's start-up cheap elsewhere

    for name in names:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location(os.path.splitext(names[0])[0], path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    return None


def _safe_name(text: str) -> bool:
    """A job id that is safe as one path component (HPC Pack's are integers)."""
    return bool(text) and text not in (".", "..") and all(c.isalnum() or c in "-_" for c in text)


def _hpcpack_host(env: Mapping[str, str]) -> str:
    """This node's HPC Pack name: CCP_NODES is '<count> <node> <cores> ...', this task's node first.

    HPC node names, not IPs: torch's c10d handled names better than IPs (pytorch#69197).
    """
    fields = env.get("CCP_NODES", "").split()
    if len(fields) >= 2:
        return fields[1]
    import socket  # only here: keeps the shim's start-up cheap elsewhere

    return socket.gethostname()


# This platform's detectors in priority order, and the job's: between torch's own (shim_torch.ordered).
PLATFORM = (HPCPack,)
DETECTORS = ordered(PLATFORM)
