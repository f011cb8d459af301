"""The shim's detectors of torch's own variables, joined into every job's shim (``shim_source``
in runtime/__init__.py): inside a torchrun worker (TorchElastic), any env:// launcher or
``trainspec run --local`` (EnvVars), no launcher at all (SingleProcess). A platform's detector
file puts its own between them with ``ordered``. Pure functions of the environment mapping;
standard library only."""

from __future__ import annotations

from collections.abc import Mapping

from trainspec.runtime.shim import (  # package only
    SET_BY_LAUNCHER, Detector, Expectation, ShimError, World, _int, _nodes, _place)


def ordered(platform: tuple[type[Detector], ...]) -> tuple[type[Detector], ...]:
    """A job's detectors in priority order, the first whose detect() is true wins: torchrun's
    workers first (their agent already exported the final world), then the platform's, then
    torch's variables of any launcher, then one process alone."""
    return (TorchElastic, *platform, EnvVars, SingleProcess)


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
