"""Runtime side of trainspec: the shim that runs inside every training process.

The shim itself is one stdlib-only file (``shim.py``) that the compiler copies, byte for byte,
next to every compiled job; ``SHIM_PATH`` points at it. Compiled jobs run it before the training
command, so torch is never imported yet.

This package adds what only code calling the runtime from Python needs: ``normalize()`` inside
a process that already joined a torch.distributed process group (Ray Train initializes it
before the user's train function runs). There the group is the world: it is checked against
the spec and returned, and the environment is left alone -- an initialized group no longer
reads it. It looks in sys.modules only: the runtime never imports torch. docs/runtime.md.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from trainspec.runtime.shim import DETECTORS, Expectation, ShimError, World, _int, _nodes, _place, detect, verify
from trainspec.runtime.shim import normalize as normalize_environment

SHIM_PATH = Path(__file__).resolve().with_name("shim.py")

__all__ = ["DETECTORS", "SHIM_PATH", "Expectation", "ShimError", "World", "detect", "normalize", "verify",
           "normalize_environment", "process_group_world"]


PROCESS_GROUP = "torch.distributed"  # the platform of a world read from an initialized process group
PROCESS_GROUP_SOURCES = {
    "world_size": "torch.distributed.get_world_size()",
    "rank": "torch.distributed.get_rank()",
    "local_rank": "LOCAL_RANK",
    "local_world_size": "LOCAL_WORLD_SIZE",
    "node_rank": "NODE_RANK",
    "nodes": "world size/LOCAL_WORLD_SIZE",
}


def process_group_world(env: Mapping[str, str], expect: Expectation) -> World | None:
    """The world of the torch.distributed process group this process already joined, else None.

    Ray Train initializes the group before the user's function runs; so may any script before it
    calls ``normalize``.  Looks in sys.modules only: the shim never imports torch.
    Rank and world size come from the group; what it does not know (local rank, node rank,
    master), from the environment as far as it tells.
    """
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if not (dist.is_available() and dist.is_initialized()):
            return None
        rank, world_size = int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # a half-imported or unusual torch: the environment decides, as usual
        return None
    local_world_size = _int(env, "LOCAL_WORLD_SIZE", minimum=1) or expect.procs_per_node or world_size
    node_rank, local_rank = _place(env, rank, local_world_size)
    return World(
        platform=PROCESS_GROUP,
        master_addr=env.get("MASTER_ADDR", "").strip(),
        master_port=_int(env, "MASTER_PORT", minimum=1) or 0,
        world_size=world_size,
        rank=rank,
        local_rank=local_rank,
        local_world_size=local_world_size,
        node_rank=node_rank,
        nodes=_nodes(world_size, local_world_size, "the process group's world size %d" % world_size),
    )


def normalize(env: MutableMapping[str, str] | None = None, *, apply: bool = True) -> World:
    """The world of this process: an initialized process group's (checked, env untouched), else
    what the shim reads from the environment (exported into env when ``apply``)."""
    if env is None:
        env = os.environ
    expect = Expectation.from_env(env)
    joined = process_group_world(env, expect)
    if joined is not None:
        # Like torchrun's workers: the final per-process world, whatever the spec's launcher.
        verify(joined, expect._replace(launcher="per-process", master_port=None), PROCESS_GROUP_SOURCES)
        return joined
    return normalize_environment(env, apply=apply)
