"""trainspec runtime shim: turn a platform's distributed variables into torch's.

Every compiled job runs each training process as ``python trainspec_shim.py [--print] -- CMD...``.
The shim finds out which platform started this process (one detector each, in ``DETECTORS``),
checks the world it sees against what the compiler expected (``TRAINSPEC_*``), exports
MASTER_ADDR, MASTER_PORT, RANK, LOCAL_RANK, NODE_RANK, ... as PyTorch and Lightning read them,
and execs CMD: a world that disagrees with the spec fails here, at once, not in a 30-minute hang.

One file, standard library only, Python >= 3.8: it is copied next to every job. The logic works
on a plain mapping; only ``main`` touches os.environ and execs, and only HPC Pack's election
touches files: that lives in its own file, shipped with HPC Pack jobs only (``_election``). How
each platform is read, and the election's protocol: docs/runtime.md.
"""

from __future__ import annotations

import os
import sys
from collections import namedtuple
from collections.abc import Mapping, MutableMapping

# The contract between a compiled job and this file, written once: the compiler imports these
# names and ports (compile/base.py, the targets, validation), and this file reads them.
ENV_PREFIX = "TRAINSPEC_"
ENV_SPEC = "TRAINSPEC_SPEC"  # the spec's path, for messages
ENV_NODES = "TRAINSPEC_NODES"
ENV_PROCS_PER_NODE = "TRAINSPEC_PROCS_PER_NODE"
ENV_LAUNCHER = "TRAINSPEC_LAUNCHER"
ENV_MASTER_PORT = "TRAINSPEC_MASTER_PORT"
ENV_MASTER_ADDR = "TRAINSPEC_MASTER_ADDR"  # HPC Pack with listed nodes: the first one's name
ENV_NODE_RANK = "TRAINSPEC_NODE_RANK"  # HPC Pack: baked into each task
ENV_RDZV_DIR = "TRAINSPEC_RDZV_DIR"  # HPC Pack: the shared directory of the master election
ENV_RDZV_TIMEOUT = "TRAINSPEC_RDZV_TIMEOUT"
ENV_RAY = "TRAINSPEC_RAY"  # set by trainspec's Ray driver in every actor
ENV_PIP = "TRAINSPEC_PIP"  # Slurm, HPC Pack, Kubernetes: environment.pip as a JSON list, installed once per node

LAUNCHERS = ("per-process", "per-node", "mpi", "tensorflow")  # tensorflow: one worker per node, TF_CONFIG
AZUREML_MASTER_PORT = 6105  # what Azure ML's pytorch distribution uses
HPCPACK_MASTER_PORT = 29400  # trainspec's rendezvous port on HPC Pack unless the spec sets one
RDZV_TIMEOUT = 900  # seconds a node waits for node 0 in the shared directory (TRAINSPEC_RDZV_TIMEOUT)
# HPC Pack's shared-folder election ships beside this file in HPC Pack jobs only, under this
# name (runtime/hpcpack_election.py in the package); the HPC Pack detector loads it when needed.
ELECTION_FILE = "trainspec_hpcpack_election.py"
KUBEFLOW_FILE = "trainspec_kubeflow.py"  # Kubeflow's detectors (runtime/kubeflow.py): Kubernetes jobs only


class ShimError(Exception):
    """A problem the user can fix; the message is shown as is, without a traceback."""


# Immutable records as namedtuples rather than dataclasses: `dataclasses` imports `inspect`,
# which costs every training process more start-up than the rest of the shim.
_WorldFields = namedtuple(
    "_WorldFields",
    "platform master_addr master_port world_size rank local_rank local_world_size node_rank nodes")


class World(_WorldFields):
    """The processes as the platform started them, seen from this process."""

    __slots__ = ()

    def env(self, launcher: str | None, procs_per_node: int | None = None) -> dict[str, str | None]:
        """The variables to export (None: unset). per-node: this process launches the workers
        (torchrun, Lightning), so no LOCAL_RANK, and torchrun's PET_* defaults (docs/runtime.md)."""
        common: dict[str, str | None] = {
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
            "NODE_RANK": str(self.node_rank),
            "GROUP_RANK": str(self.node_rank),
        }
        if launcher == "per-node":
            unset = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
            torchrun: dict[str, str | None] = {
                "PET_NNODES": str(self.nodes),
                "PET_NODE_RANK": str(self.node_rank),
                "PET_MASTER_ADDR": self.master_addr,
                "PET_MASTER_PORT": str(self.master_port),
            }
            if procs_per_node is not None:
                torchrun["PET_NPROC_PER_NODE"] = str(procs_per_node)
            return {**common, **dict.fromkeys(unset), **torchrun}
        if launcher not in (None, "per-process", "mpi", "tensorflow"):
            raise ShimError("unknown launcher %r; expected one of %s" % (launcher, ", ".join(LAUNCHERS)))
        return {
            **common,
            "WORLD_SIZE": str(self.world_size),
            "RANK": str(self.rank),
            "LOCAL_RANK": str(self.local_rank),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
        }


_ExpectationFields = namedtuple("_ExpectationFields", "nodes procs_per_node launcher master_port spec",
                                defaults=(None, None, None, None, None))


class Expectation(_ExpectationFields):
    """What the compiler expected, from TRAINSPEC_* variables; None = not checked. procs_per_node:
    in the final world; master_port overrides the platform's; spec: the file, for messages."""

    __slots__ = ()

    @property
    def procs_per_node_launched(self) -> int | None:
        """Processes per node the platform starts: one launcher per node in per-node mode."""
        return 1 if self.launcher in ("per-node", "tensorflow") else self.procs_per_node

    @staticmethod
    def from_env(env: Mapping[str, str]) -> Expectation:
        launcher = env.get(ENV_LAUNCHER) or None
        if launcher is not None and launcher not in LAUNCHERS:
            raise ShimError("TRAINSPEC_LAUNCHER=%r (distribution.launcher) is not one of %s"
                            % (launcher, ", ".join(LAUNCHERS)))
        port = _int(env, ENV_MASTER_PORT, minimum=1)
        if port is not None and port > 65535:
            raise ShimError("TRAINSPEC_MASTER_PORT=%d is not a TCP port (1-65535)" % port)
        return Expectation(
            nodes=_int(env, ENV_NODES, minimum=1),
            procs_per_node=_int(env, ENV_PROCS_PER_NODE, minimum=1),
            launcher=launcher,
            master_port=port,
            spec=env.get(ENV_SPEC) or None,
        )


# ---------------------------------------------------------------- parsing helpers


SET_BY_LAUNCHER = ", but the launcher sets it for every process"
SET_BY_RAY_LAUNCHER = ", but trainspec's Ray driver sets it for every process (TRAINSPEC_RAY=1)"
SET_BY_SRUN = ", but srun sets it for every task"
BAKED = "; trainspec writes it into every task of the HPC Pack jobs it compiles, so this job was not " \
        "compiled by trainspec or was edited"


def _int(env: Mapping[str, str], name: str, minimum: int = 0, required: str | None = None,
         why: str = "") -> int | None:
    """The one integer reader: the integer in env[name]. Unset or empty: None, or, when
    ``required`` says who should have set it, an error. Garbage is an error (``why`` appended)."""
    text = env.get(name, "").strip()
    if not text:
        if required is None:
            return None
        raise ShimError("%s is not set%s" % (name, required))
    try:
        value = int(text)
    except ValueError:
        raise ShimError("%s=%r is not an integer%s" % (name, env[name], why)) from None
    if value < minimum:
        raise ShimError("%s=%d must be at least %d%s" % (name, value, minimum, why))
    return value


def _split_host_port(text: str, name: str) -> tuple[str, int | None]:
    """'host:port' or 'host' -> (host, port or None)."""
    host, sep, port = text.strip().rpartition(":")
    if not sep:
        host, port = port, ""
    if not host or (port and not port.isdigit()):
        raise ShimError("%s=%r is not 'host' or 'host:port'" % (name, text))
    return host, int(port) if port else None


def _nodes(world_size: int, local_world_size: int, how: str, expect: Expectation | None = None) -> int:
    if world_size % local_world_size:
        message = ("%s: world size %d is not a multiple of the processes per node %d; "
                   "every node must run the same number of processes" % (how, world_size, local_world_size))
        if expect is not None and expect.procs_per_node_launched is not None:
            expected = (expect.nodes or 0) * expect.procs_per_node_launched
            message += "; the spec expects %s = resources.nodes (%s) x resources.procs_per_node (%d)" % (
                expected or "a multiple of %d" % expect.procs_per_node_launched,
                expect.nodes if expect.nodes is not None else "?", expect.procs_per_node_launched)
        raise ShimError(message)
    return world_size // local_world_size


def _place(env: Mapping[str, str], rank: int, local_world_size: int) -> tuple[int, int]:
    """(node rank, local rank): NODE_RANK (or GROUP_RANK) and LOCAL_RANK when set, else what
    consecutive ranks on each node imply."""
    node_rank = _int(env, "NODE_RANK")
    if node_rank is None:
        node_rank = _int(env, "GROUP_RANK")
    if node_rank is None:
        node_rank = rank // local_world_size
    local_rank = _int(env, "LOCAL_RANK")
    return node_rank, rank - node_rank * local_world_size if local_rank is None else local_rank


def _torch_style(name: str, env: Mapping[str, str], expect: Expectation, default_port: int | None) -> World:
    """A world from torch's own variables, as Azure ML's pytorch distribution and env:// launchers set them."""
    world_size = _int(env, "WORLD_SIZE", minimum=1, required=SET_BY_LAUNCHER)
    rank = _int(env, "RANK", required=SET_BY_LAUNCHER)
    local_world_size = (
        _int(env, "LOCAL_WORLD_SIZE", minimum=1) or expect.procs_per_node_launched or world_size)
    node_rank, local_rank = _place(env, rank, local_world_size)
    if "LOCAL_WORLD_SIZE" not in env and expect.procs_per_node_launched is not None:
        _check_shape(world_size, rank, local_rank, node_rank, expect)
    master_addr = env.get("MASTER_ADDR", "").strip()
    if not master_addr:
        if local_world_size != world_size:
            raise ShimError("MASTER_ADDR is not set in a world of %d processes on several nodes" % world_size)
        master_addr = "127.0.0.1"
    master_port = _int(env, "MASTER_PORT", minimum=1) or default_port or expect.master_port
    if master_port is None:
        raise ShimError("MASTER_PORT is not set and the spec sets no port (TRAINSPEC_MASTER_PORT)")
    nodes = _nodes(world_size, local_world_size, "WORLD_SIZE=%d" % world_size, expect)
    return World(name, master_addr, master_port, world_size, rank, local_rank, local_world_size, node_rank, nodes)


def _check_shape(world_size: int, rank: int, local_rank: int, node_rank: int, expect: Expectation) -> None:
    """The platform did not say how many processes it started per node (Azure ML sets no
    LOCAL_WORLD_SIZE), so compare what its ranks imply with the spec's number, and name the
    spec field rather than a variable the platform never set."""
    per_node = expect.procs_per_node_launched
    seen = None
    if node_rank > 0 and (rank - local_rank) % node_rank == 0:
        seen = (rank - local_rank) // node_rank
    if world_size % per_node or local_rank >= per_node or (seen is not None and seen != per_node):
        shape = ("%d per node" % seen) if seen is not None else (
            "at least %d per node" % (local_rank + 1) if local_rank >= per_node else
            "%d in all (not a multiple of %d)" % (world_size, per_node))
        total = "%d = " % (expect.nodes * per_node) if expect.nodes is not None else ""
        raise ShimError(
            "the platform started %s processes (WORLD_SIZE=%d, RANK=%d, LOCAL_RANK=%d, NODE_RANK=%d) but %s "
            "expects %sresources.nodes (%s) x resources.procs_per_node (%d); check the job's instance count and "
            "processes per instance" % (shape, world_size, rank, local_rank, node_rank, expect.spec or "the spec",
                                         total, expect.nodes if expect.nodes is not None else "?", per_node))


# ---------------------------------------------------------------- detectors: one section per platform


class Detector:
    """One platform: ``detect`` says whether it started this process, ``world`` reads its variables
    (pure), ``rendezvous`` (after ``verify``) may do I/O to learn what only the others know.
    ``sources``: where each World field came from, for messages. ``inside_launcher``: an agent
    (torchrun) already exported the final world and owns the port; the shim keeps both."""

    name = "?"
    sources: Mapping[str, str] = {}
    inside_launcher = False
    per_node_unset: tuple[str, ...] = ()  # the platform's variables a per-node launcher must not see

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        raise NotImplementedError

    @staticmethod
    def world(env: Mapping[str, str], expect: Expectation) -> World:
        raise NotImplementedError

    @staticmethod
    def rendezvous(env: Mapping[str, str], world: World) -> World:
        """The world completed by talking to the other processes; most launchers already told us all."""
        return world


_TORCH_SOURCES = {
    "world_size": "WORLD_SIZE",
    "rank": "RANK",
    "local_rank": "LOCAL_RANK",
    "local_world_size": "LOCAL_WORLD_SIZE",
    "node_rank": "NODE_RANK",
    "nodes": "WORLD_SIZE/LOCAL_WORLD_SIZE",
}


# ---------------------------------------------------------------- torchrun


class TorchElastic(Detector):
    """Inside a torchrun worker: torchrun's variables are already right."""

    name = "torchelastic"
    sources = {**_TORCH_SOURCES, "node_rank": "GROUP_RANK", "nodes": "GROUP_WORLD_SIZE"}
    inside_launcher = True

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return "TORCHELASTIC_RUN_ID" in env

    @staticmethod
    def world(env: Mapping[str, str], expect: Expectation) -> World:
        world_size = _int(env, "WORLD_SIZE", minimum=1, required=SET_BY_LAUNCHER)
        rank = _int(env, "RANK", required=SET_BY_LAUNCHER)
        local_world_size = _int(env, "LOCAL_WORLD_SIZE", minimum=1, required=SET_BY_LAUNCHER)
        nodes = _int(env, "GROUP_WORLD_SIZE", minimum=1)
        if nodes is None:
            nodes = _nodes(world_size, local_world_size, "WORLD_SIZE=%d" % world_size, expect)
        node_rank = _int(env, "GROUP_RANK")
        master_addr = env.get("MASTER_ADDR", "").strip()
        if not master_addr:
            raise ShimError("MASTER_ADDR is not set, but torchrun sets it for every worker")
        return World(TorchElastic.name, master_addr, _int(env, "MASTER_PORT", 1, SET_BY_LAUNCHER), world_size, rank,
                     _int(env, "LOCAL_RANK", 0, SET_BY_LAUNCHER), local_world_size,
                     rank // local_world_size if node_rank is None else node_rank, nodes)


# ---------------------------------------------------------------- HPC Pack (its election: hpcpack_election.py)


class HPCPack(Detector):
    """HPC Pack (Linux node agent), one task per node as trainspec compiles it: node rank and count
    baked into each task; the master's name too, or elected in a shared directory (``_election``)."""

    name = "hpcpack"
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


def _shipped(env: Mapping[str, str]) -> tuple[type[Detector], ...]:
    """Kubeflow's detectors when Kubeflow may have started this pod (PET_NNODES) and they are here."""
    module = _beside(KUBEFLOW_FILE, "kubeflow.py") if "PET_NNODES" in env and ENV_RAY not in env else None
    return module.detectors(sys.modules[__name__]) if module is not None else ()


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


# ---------------------------------------------------------------- Ray (trainspec's driver)


class Ray(Detector):
    """Actors started by trainspec's Ray driver (TRAINSPEC_RAY=1), which sets torch's variables
    itself; per-node, those of the node's launcher process. Ray Train is not this: docs/runtime.md."""

    name = "ray"
    sources = _TORCH_SOURCES

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return bool(env.get(ENV_RAY, "").strip())

    @staticmethod
    def world(env: Mapping[str, str], expect: Expectation) -> World:
        master_addr = env.get("MASTER_ADDR", "").strip()
        if not master_addr:
            raise ShimError("MASTER_ADDR is not set%s" % SET_BY_RAY_LAUNCHER)
        master_port = _int(env, "MASTER_PORT", minimum=1, required=SET_BY_RAY_LAUNCHER)
        if "RANK" not in env and "WORLD_SIZE" not in env and "PET_NNODES" in env:
            # A shim already ran here in per-node mode and unset the worker variables.
            nodes = _int(env, "PET_NNODES", minimum=1, required=SET_BY_RAY_LAUNCHER)
            node_rank = _int(env, "NODE_RANK", required=SET_BY_RAY_LAUNCHER)
            return World(Ray.name, master_addr, master_port, nodes, node_rank, 0, 1, node_rank, nodes)
        world_size = _int(env, "WORLD_SIZE", minimum=1, required=SET_BY_RAY_LAUNCHER)
        local_world_size = _int(env, "LOCAL_WORLD_SIZE", minimum=1, required=SET_BY_RAY_LAUNCHER)
        return World(Ray.name, master_addr, master_port, world_size, _int(env, "RANK", 0, SET_BY_RAY_LAUNCHER),
                     _int(env, "LOCAL_RANK", 0, SET_BY_RAY_LAUNCHER), local_world_size,
                     _int(env, "NODE_RANK", 0, SET_BY_RAY_LAUNCHER),
                     _nodes(world_size, local_world_size, "WORLD_SIZE=%d" % world_size, expect))


# ---------------------------------------------------------------- Slurm


class Slurm(Detector):
    """A task that srun started: ranks from SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID/SLURM_NODEID,
    the master the first host of SLURM_JOB_NODELIST, the port the spec's (docs/runtime.md)."""

    name = "slurm"
    sources = {"world_size": "SLURM_NTASKS", "rank": "SLURM_PROCID", "local_rank": "SLURM_LOCALID",
               "local_world_size": "SLURM_NTASKS/SLURM_JOB_NUM_NODES", "node_rank": "SLURM_NODEID",
               "nodes": "SLURM_JOB_NUM_NODES"}
    per_node_unset = ("SLURM_NTASKS",)  # else Lightning takes the 1 task per node for its world, and never spawns

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return "SLURM_PROCID" in env and "SLURM_NTASKS" in env

    @staticmethod
    def world(env: Mapping[str, str], expect: Expectation) -> World:
        world_size = _int(env, "SLURM_NTASKS", 1, SET_BY_SRUN)
        nodes = _int(env, "SLURM_STEP_NUM_NODES", 1) or _int(env, "SLURM_JOB_NUM_NODES", 1, SET_BY_SRUN)
        hosts = expand_hostlist(env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", ""))
        if not hosts:
            raise ShimError("SLURM_JOB_NODELIST is not set%s" % SET_BY_SRUN)
        if world_size % nodes:
            raise ShimError("SLURM_NTASKS=%d is not a multiple of SLURM_JOB_NUM_NODES=%d: every node must run the "
                            "same number of tasks (srun --ntasks-per-node)" % (world_size, nodes))
        local_world_size = world_size // nodes
        job = env.get("SLURM_JOB_ID", "").strip()
        port = _int(env, "MASTER_PORT", 1) or (15000 + int(job[-4:]) if job[-4:].isdigit() else None)
        return World(Slurm.name, hosts[0], port or AZUREML_MASTER_PORT, world_size,
                     _int(env, "SLURM_PROCID", 0, SET_BY_SRUN), _int(env, "SLURM_LOCALID", 0, SET_BY_SRUN),
                     local_world_size, _int(env, "SLURM_NODEID", 0, SET_BY_SRUN), nodes)


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host list, expanded in order: 'gpu-[01-04,07],login1' -> gpu-01 .. gpu-04,
    gpu-07, login1; zero padding kept; several bracket groups multiply ('r[1-2]-n[1-2]')."""
    hosts: list[str] = []
    depth, start = 0, 0
    for i, char in enumerate(text + ","):
        depth += (char == "[") - (char == "]")
        if depth < 0 or (char == "," and depth == 0):
            if depth < 0:
                raise ShimError("SLURM_JOB_NODELIST=%r has a ']' without its '['" % text)
            if text[start:i].strip():
                hosts.extend(_expand_one(text[start:i].strip(), text))
            start = i + 1
    if depth:
        raise ShimError("SLURM_JOB_NODELIST=%r has a '[' without its ']'" % text)
    return hosts


def _expand_one(item: str, whole: str) -> list[str]:
    head, bracket, rest = item.partition("[")
    if not bracket:
        return [item]
    inside, _, tail = rest.partition("]")
    numbers: list[str] = []
    for part in inside.split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()) or (dash and int(high) < int(low)):
            raise ShimError("SLURM_JOB_NODELIST=%r: %r is not a number or a range like 01-04" % (whole, part))
        numbers += [str(n).zfill(len(low)) for n in range(int(low), int(high if dash else low) + 1)]
    return [head + number + more for number in numbers for more in _expand_one(tail, whole)]


# ---------------------------------------------------------------- Azure ML (MPI and pytorch distributions)


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


# ---------------------------------------------------------------- any env:// launcher, or none


class EnvVars(Detector):
    """A generic env:// launcher (or trainspec run --local): torch's variables, no platform marker."""

    name = "env"
    sources = _TORCH_SOURCES

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return all(name in env for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR"))

    @staticmethod
    def world(env: Mapping[str, str], expect: Expectation) -> World:
        return _torch_style(EnvVars.name, env, expect, None)


class SingleProcess(Detector):
    """No launcher at all: a world of one process on this machine."""

    name = "single-process"
    sources = {}

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return True

    @staticmethod
    def world(env: Mapping[str, str], expect: Expectation) -> World:
        port = _int(env, "MASTER_PORT", minimum=1) or expect.master_port or _free_port()
        return World(SingleProcess.name, "127.0.0.1", port, 1, 0, 0, 1, 0, 1)


def _free_port() -> int:
    """Any free port: one process cannot collide with itself, but may with a neighbour's fixed port."""
    import _socket  # the C module under `socket`: 0.3 ms to import instead of 4.5

    sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
    finally:
        sock.close()


# In priority order: the first whose detect() is true wins.
DETECTORS: tuple[type[Detector], ...] = (
    TorchElastic, HPCPack, Ray, Slurm, AzureMLMPI, AzureMLPyTorch, TensorFlow, EnvVars, SingleProcess)


# ---------------------------------------------------------------- detect, verify, normalize


def detect(env: Mapping[str, str], expect: Expectation | None = None) -> tuple[type[Detector], World]:
    """The first detector that recognises env, and the world it reads from env."""
    if expect is None:
        expect = Expectation.from_env(env)
    for detector in (DETECTORS[0], *_shipped(env), *DETECTORS[1:]):  # torchrun's workers first
        if detector.detect(env):
            return detector, detector.world(env, expect)
    raise ShimError("no detector matched")  # unreachable: SingleProcess always matches


def _described(world: World, field: str, sources: Mapping[str, str] | None = None) -> str:
    """'(WORLD_SIZE=4)': the value of a World field and the variable it came from."""
    if sources is None:
        sources = next((d.sources for d in DETECTORS if d.name == world.platform), {})
    source = sources.get(field)
    value = getattr(world, field)
    return "(%s=%d)" % (source, value) if source else "(%s %d, no launcher variables found)" % (field, value)


def verify(world: World, expect: Expectation, sources: Mapping[str, str] | None = None) -> None:
    """Fail at once when the platform's world disagrees with the spec or with itself; ``sources``
    names where each field came from (default: the platform's detector)."""
    def told(field: str) -> str:
        return _described(world, field, sources)

    launcher = expect.launcher or "per-process"
    spec = "the spec %s" % expect.spec if expect.spec else "the spec"
    per_node = expect.procs_per_node_launched
    if launcher == "per-node":
        per_node_text = "1 launcher process per node (distribution.launcher per-node)"
    else:
        per_node_text = "resources.procs_per_node (%s)" % expect.procs_per_node
    if expect.nodes is not None and per_node is not None and world.world_size != expect.nodes * per_node:
        raise ShimError("the platform started %d processes %s but %s expects %d = resources.nodes (%d) x %s "
                        "[launcher %s]; check the job's instance count and processes per instance"
                        % (world.world_size, told("world_size"), spec, expect.nodes * per_node, expect.nodes,
                           per_node_text, launcher))
    if per_node is not None and world.local_world_size != per_node:
        raise ShimError("the platform started %d processes on this node %s but %s expects %s [launcher %s]; check "
                        "the job's processes per instance (resources.procs_per_node defaults to "
                        "resources.gpus_per_node)"
                        % (world.local_world_size, told("local_world_size"), spec, per_node_text, launcher))
    if expect.nodes is not None and world.nodes != expect.nodes:
        raise ShimError("the platform started %d node(s) %s but %s expects resources.nodes (%d); check the job's "
                        "instance count" % (world.nodes, told("nodes"), spec, expect.nodes))
    spec_sizes = {"world_size": "resources.nodes x resources.procs_per_node", "nodes": "resources.nodes",
                  "local_world_size": "resources.procs_per_node"}
    for field, size_field in (("rank", "world_size"), ("node_rank", "nodes"), ("local_rank", "local_world_size")):
        if not 0 <= getattr(world, field) < getattr(world, size_field):
            raise ShimError("%s %d %s is outside 0..%d %s, the size %s expects (%s): the platform started more "
                            "processes than the spec says"
                            % (field, getattr(world, field), told(field), getattr(world, size_field) - 1,
                               told(size_field), spec, spec_sizes[size_field]))
    if launcher != "per-node" and world.rank != world.node_rank * world.local_world_size + world.local_rank:
        raise ShimError("rank %d %s is not node_rank %d %s x local_world_size %d + local_rank %d %s; the platform "
                        "did not place consecutive ranks on the same node"
                        % (world.rank, told("rank"), world.node_rank, told("node_rank"), world.local_world_size,
                           world.local_rank, told("local_rank")))


def _resolve(env: Mapping[str, str]) -> tuple[World, Expectation, dict[str, str | None]]:
    """Detect, verify and compute exports; the world carries the port actually exported."""
    expect = Expectation.from_env(env)
    detector, world = detect(env, expect)
    if detector.inside_launcher:
        # The agent owns ports and started the final workers: keep what it exported.
        expect = expect._replace(launcher="per-process", master_port=None)
    verify(world, expect, detector.sources)
    if expect.master_port is not None:
        world = world._replace(master_port=expect.master_port)
    world = detector.rendezvous(env, world)  # after verify: a wrong world fails before any waiting
    exports = world.env(expect.launcher, expect.procs_per_node)
    if expect.launcher == "per-node":
        exports.update(dict.fromkeys(detector.per_node_unset))
    return world, expect, exports


def normalize(env: MutableMapping[str, str] | None = None, *, apply: bool = True) -> World:
    """Detect and verify the world, and (if apply) export torch's variables into env (default os.environ)."""
    if env is None:
        env = os.environ
    world, _, exports = _resolve(env)
    if apply:
        _apply(env, exports)
    return world


def _apply(env: MutableMapping[str, str], exports: Mapping[str, str | None]) -> None:
    for key, value in exports.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value


# ---------------------------------------------------------------- spawners that take the world as flags (accelerate, deepspeed)

# Per node, `accelerate launch` and `deepspeed` start the node's workers themselves and read the
# world from their own flags, not from torch's variables: the shim adds the flags the command
# lacks; a flag the user wrote that disagrees with the world fails here, before any waiting.
_ACCELERATE = ("--num_machines", "--machine_rank", "--main_process_ip", "--main_process_port", "--num_processes")
_DEEPSPEED = ("--num_nodes", "--node_rank", "--master_addr", "--master_port", "--num_gpus")
# accelerate + DeepSpeed on several machines defaults to pdsh over `--hostfile None`: DeepSpeed then
# finds no hostfile and trains on this node alone, so every node is a world of its own. "standard"
# is torchrun across the nodes, one world. accelerate reads the flag only when DeepSpeed runs (by
# --use_deepspeed or its config file, which the shim does not parse), so every multi-node launch gets it.
DEEPSPEED_MULTINODE = ("--deepspeed_multinode_launcher", "standard")
# rendezvous backends that assign node ranks themselves (torchrun's --rdzv_backend); static does not
DYNAMIC_RDZV = ("c10d", "etcd", "etcd-v2")


def spawner_at(command: list[str]) -> tuple[str, int] | None:
    """('accelerate'|'deepspeed', index after which its flags go), or None."""
    name = os.path.basename(command[0]) if command else ""
    if name == "accelerate" and command[1:2] == ["launch"]:
        return "accelerate", 2
    if name == "deepspeed":
        return "deepspeed", 1
    if name.startswith("python") and command[1:2] == ["-m"] and len(command) > 2:
        if command[2] == "accelerate.commands.launch":
            return "accelerate", 3
        if command[2] == "deepspeed.launcher.runner":
            return "deepspeed", 3
    return None


def _given(args: list[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg[len(flag) + 1:]
    return None


def spawner_command(command: list[str], world: World, expect: Expectation, tmpdir: str | None = None) -> list[str]:
    """``command`` with the world added as the flags its launcher reads (per node), else as is."""
    if expect.launcher == "per-node" and command[:2] == ["bash", "-c"] and len(command) == 3:
        return [*command[:2], _accelerate_line(command[2], world)]
    found = spawner_at(command)
    if found is None or expect.launcher != "per-node":
        return command
    kind, at = found
    procs = expect.procs_per_node
    if kind == "accelerate":
        values = [world.nodes, world.node_rank, world.master_addr, world.master_port,
                  world.nodes * procs if procs is not None else None]
        names = _ACCELERATE
    else:
        values = [world.nodes, world.node_rank, world.master_addr, world.master_port, procs]
        names = _DEEPSPEED
    added: list[str] = []
    for flag, value in zip(names, values):
        if value is None:
            continue
        given = _given(command[at:], flag)
        if given is None:
            added += [flag, str(value)]
        elif given != str(value):
            raise ShimError("%s %s %s, but this node's world says %s (%s on node %d of %d): remove the flag, "
                            "trainspec passes it" % (kind, flag, given, value, world.platform, world.node_rank,
                                                     world.nodes))
    if kind == "accelerate" and world.nodes > 1:
        flag, standard = DEEPSPEED_MULTINODE
        given = _given(command[at:], flag)
        if given is None:
            added += [flag, standard]
        elif given != standard:
            raise ShimError("accelerate %s %s: every node runs its own accelerate launch, so DeepSpeed must join "
                            "the nodes through torchrun (%s %s), or each node trains alone: remove the flag, "
                            "trainspec passes it" % (flag, given, flag, standard))
    if kind == "deepspeed" and "--no_ssh" not in command[at:]:
        added.append("--no_ssh")  # every node starts its own launcher: no ssh between them
        if world.nodes > 1 and _given(command[at:], "--hostfile") is None:
            # --no_ssh still wants one line per node to place node_rank in; the names are never dialled
            import tempfile

            hostfile = os.path.join(tmpdir or tempfile.gettempdir(), "trainspec-hostfile-%d" % os.getpid())
            with open(hostfile, "w") as fh:
                fh.write("".join("node-%d slots=%d\n" % (n, procs or 1) for n in range(world.nodes)))
            added += ["--hostfile", hostfile]
    return [*command[:at], *added, *command[at:]]


# `accelerate launch` (or `python -m accelerate.commands.launch`) at the start of a shell line
_ACCELERATE_LINE = r"^\s*(?:\S*/)?(?:accelerate\s+launch|python[\d.]*\s+-m\s+accelerate\.commands\.launch)(?=\s|$)"


def _accelerate_line(line: str, world: World) -> str:
    """A command that expands ``$...`` runs as ``bash -c LINE`` and writes its world flags itself
    (the compiler says which it lacks); an ``accelerate launch`` line still gets the two that need
    none of its expansions, after ``launch``: DeepSpeed's standard multinode launcher and, under a
    rendezvous that assigns node ranks (c10d), the ``--machine_rank`` accelerate insists on."""
    import re
    import shlex

    found = re.match(_ACCELERATE_LINE, line)
    if found is None or world.nodes == 1:
        return line
    try:
        words = shlex.split(line)
    except ValueError:  # bash reports it
        return line
    added: list[str] = []
    if _given(words, DEEPSPEED_MULTINODE[0]) is None:
        added += DEEPSPEED_MULTINODE
    if _given(words, "--machine_rank") is None and _given(words, "--rdzv_backend") in DYNAMIC_RDZV:
        added += ["--machine_rank", str(world.node_rank)]
    return line[:found.end()] + "".join(" " + shlex.quote(word) for word in added) + line[found.end():]


# ---------------------------------------------------------------- environment.pip, once per node

PIP_DIR_PREFIX = "trainspec-pip-"


def pip_requirements(env: Mapping[str, str]) -> list[str]:
    """The spec's environment.pip, as the compiler wrote it into TRAINSPEC_PIP (a JSON list)."""
    text = env.get(ENV_PIP)
    if not text:
        return []
    import json

    try:
        requirements = json.loads(text)
    except ValueError:
        requirements = None
    if not isinstance(requirements, list) or not all(isinstance(r, str) and r and not r.startswith("-")
                                                     for r in requirements):
        raise ShimError("%s=%r is not a JSON list of pip requirements" % (ENV_PIP, text))
    return requirements


def pip_folder(env: Mapping[str, str], requirements: list[str], tmpdir: str) -> str:
    """This node's folder of the job's packages: in the node's own temporary folder, named by
    the user, the job (its platform's id) and what is installed, so every process of a job on a
    node finds the same one and no other job's."""
    import hashlib

    key = "\0".join([sys.executable, env.get("SLURM_JOB_ID") or env.get("CCP_JOBID") or "", *requirements])
    digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return os.path.join(tmpdir, "%s%d-%s" % (PIP_DIR_PREFIX, os.getuid(), digest))


def _own_folder(folder: str) -> None:
    """Create ``folder`` (0700) or accept it only if it is this user's own real folder that no one
    else may write: a shared /tmp must not let another user plant the packages the job imports."""
    import stat

    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise ShimError("%s is not a folder of this user's that only it can write: it would hold the "
                        "packages of environment.pip (remove it, or set TMPDIR)" % folder)


def install_pip(env: MutableMapping[str, str], run=None, tmpdir: str | None = None) -> str | None:
    """Install TRAINSPEC_PIP into this node's folder (``pip install --target``) unless another
    process of the job on this node did, then put the folder first on PYTHONPATH, so the command
    (and every process it starts) imports them. The first process to take the folder's lock
    installs; the others wait for it and find it done. ``run`` runs pip (tests: a stand-in),
    ``tmpdir`` is the node's temporary folder (TMPDIR, else /tmp). Returns the folder (None: nothing
    to do)."""
    requirements = pip_requirements(env)
    if not requirements:
        return None
    import fcntl
    import subprocess
    import tempfile

    folder = pip_folder(env, requirements, tmpdir or tempfile.gettempdir())
    _own_folder(folder)
    site = os.path.join(folder, "site-packages")
    with open(os.path.join(folder, "lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process ends
        if not os.path.exists(os.path.join(folder, "installed")):
            print("trainspec: installing environment.pip on this node into %s: %s"
                  % (site, " ".join(requirements)), file=sys.stderr)
            sys.stderr.flush()
            argv = [sys.executable, "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
                    "--target", site, "--", *requirements]
            code = (run or subprocess.call)(argv)
            if code != 0:
                raise ShimError("pip could not install environment.pip (exit %d): its messages are above"
                                % code)
            with open(os.path.join(folder, "installed"), "w") as done:
                done.write("\n".join(requirements) + "\n")
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = site + (os.pathsep + path if path else "")
    return site


# ---------------------------------------------------------------- command line

USAGE = "usage: python trainspec_shim.py [--print] -- CMD [ARG...]"


def main(argv: list[str] | None = None) -> int:
    """Normalize os.environ, then exec CMD (or, with --print, show the variables)."""
    args = list(sys.argv[1:] if argv is None else argv)
    show, command = False, []
    while args:
        arg = args.pop(0)
        if arg == "--":
            command = args
            break
        if arg == "--print":
            show = True
        elif arg in ("-h", "--help"):
            print(USAGE)
            return 0
        elif arg.startswith("-"):
            print("trainspec: error: unknown option %s\n%s" % (arg, USAGE), file=sys.stderr)
            return 2
        else:
            command = [arg, *args]
            break
    if not command and not show:
        print("trainspec: error: no command to run\n%s" % USAGE, file=sys.stderr)
        return 2
    try:
        world, expect, exports = _resolve(os.environ)
        command = spawner_command(command, world, expect)
    except ShimError as error:
        print("trainspec: error: %s" % error, file=sys.stderr)
        return 3
    _apply(os.environ, exports)
    if not show:
        try:
            install_pip(os.environ)
        except (ShimError, OSError) as error:
            print("trainspec: error: %s" % error, file=sys.stderr)
            return 3
    launcher = expect.launcher or "per-process"
    if (world.node_rank if launcher == "per-node" else world.rank) == 0:
        procs = world.local_world_size
        if launcher == "per-node" and expect.procs_per_node is not None:
            procs = expect.procs_per_node
        print(
            "trainspec: %s detected; world %d = %d node(s) x %d process(es) [%s]; master %s:%d"
            % (world.platform, world.nodes * procs, world.nodes, procs, launcher, world.master_addr, world.master_port),
            file=sys.stderr,
        )
    if show:
        for key in sorted(key for key, value in exports.items() if value is not None):
            print("%s=%s" % (key, exports[key]))
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(command[0], command)
    except OSError as error:
        print("trainspec: error: cannot run %s: %s" % (command[0], error.strerror), file=sys.stderr)
        return 127
    return 0  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main())
