"""The shim's Ray detector, joined into Ray jobs' shim only (``shim_source`` in
runtime/__init__.py): actors started by trainspec's Ray driver (runtime/ray_driver.py), which
sets torch's variables itself. Standard library only."""

from __future__ import annotations

from collections.abc import Mapping

from trainspec.runtime.shim import ENV_RAY, Detector, Expectation, ShimError, World, _int, _nodes  # package only
from trainspec.runtime.shim_torch import _TORCH_SOURCES, ordered  # package only

SET_BY_RAY_LAUNCHER = ", but trainspec's Ray driver sets it for every process (TRAINSPEC_RAY=1)"


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


# This platform's detectors in priority order, and the job's: between torch's own (shim_torch.ordered).
PLATFORM = (Ray,)
DETECTORS = ordered(PLATFORM)
