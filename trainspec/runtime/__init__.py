"""Runtime side of trainspec: the shim that runs inside every training process.

The shim a job ships is one stdlib-only file (``trainspec_shim.py``) joined from this folder's
modules by ``shim_source(platform)``: the core (``shim.py``), the parts every job needs
(``SHIM_PARTS``) and that platform's detectors only (``<platform>_detector.py``), so an Azure ML
job carries no Slurm or HPC Pack code. Compiled jobs run it before the training command, so
torch is never imported yet.

In the package the same modules import each other (the lines marked ``# package only``, which
the join drops), and ``DETECTORS`` holds every platform's detectors, for code calling the
runtime from Python: ``normalize()`` inside a process that already joined a torch.distributed
process group (Ray Train initializes it before the user's train function runs). There the group
is the world: it is checked against the spec and returned, and the environment is left alone --
an initialized group no longer reads it. It looks in sys.modules only: the runtime never imports
torch. docs/runtime.md.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from trainspec.runtime import shim
from trainspec.runtime.shim import Detector, Expectation, ShimError, World, _int, _nodes, _place

RUNTIME_DIR = Path(__file__).resolve().parent
SHIM_PATH = RUNTIME_DIR / "shim.py"  # the core: the contract the compiler imports
# joined after the core into every job's shim, in this order, before the platform's detectors
SHIM_PARTS = ("shim_torch.py", "shim_launch.py", "shim_pip.py", "shim_main.py")
DETECTOR_SUFFIX = "_detector.py"  # <platform>_detector.py: one platform's detectors, its DETECTORS
PACKAGE_ONLY = "# package only"  # ends the first line of an import between the modules
_FUTURE = "from __future__ import annotations\n"
_MAIN = '\n\nif __name__ == "__main__":\n    sys.exit(main())\n'


def shim_platforms(folder: Path = RUNTIME_DIR) -> tuple[str, ...]:
    """The platforms that have a detector file, sorted: the arguments ``shim_source`` takes."""
    return tuple(sorted(p.name[:-len(DETECTOR_SUFFIX)] for p in folder.glob("*" + DETECTOR_SUFFIX)))


def shim_source(platform: str, folder: Path = RUNTIME_DIR) -> str:
    """The shim a ``platform`` job ships, as one stdlib-only module: the core, SHIM_PARTS and
    ``<platform>_detector.py``, joined in that order, each under a comment naming its source,
    without the package's imports between them (PACKAGE_ONLY). Deterministic: the files' text
    only. The platform's file sets DETECTORS last, so the core's ``detect`` sees that platform's
    and torch's own, no other. ``folder``: where the files are (tests: an older runtime)."""
    if platform not in shim_platforms(folder):
        raise ValueError("no shim detectors for platform %r; expected one of %s"
                         % (platform, ", ".join(shim_platforms(folder))))
    text = ""
    for name in ("shim.py", *SHIM_PARTS, platform + DETECTOR_SUFFIX):
        source = _without_package_imports((folder / name).read_text(encoding="utf-8"))
        if text:
            source = "\n\n# " + "-" * 64 + " runtime/%s\n\n" % name + source.replace(_FUTURE, "", 1)
        text += source.rstrip("\n") + "\n"
    return text + _MAIN


def _without_package_imports(source: str) -> str:
    """``source`` without its lines marked PACKAGE_ONLY; a marked line that opens a parenthesis
    goes with the lines up to the one that closes it."""
    kept, dropping = [], False
    for line in source.splitlines(keepends=True):
        if line.rstrip().endswith(PACKAGE_ONLY):
            dropping = line.count("(") > line.count(")")
        elif dropping:
            dropping = ")" not in line
        else:
            kept.append(line)
    return "".join(kept)


def _every_platform() -> tuple[type[Detector], ...]:
    """Every platform's detectors, in one priority order: each platform's in its own order,
    Kubeflow's (whose pods look like any env:// launcher's) after the ones with a marker."""
    from trainspec.runtime import azureml_detector, hpcpack_detector, kubernetes_detector, ray_detector, slurm_detector
    from trainspec.runtime.shim_torch import ordered

    platforms = (hpcpack_detector, ray_detector, slurm_detector, azureml_detector, kubernetes_detector)
    return ordered(tuple(d for module in platforms for d in module.PLATFORM))


def __getattr__(name: str) -> object:
    """``DETECTORS``, made at its first use: compile and check import this package for the
    contract (``shim``) and the shim's sources, never the detectors (~1.5 ms of every start)."""
    if name == "DETECTORS":
        return _detectors()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _detectors() -> tuple[type[Detector], ...]:
    found = globals().get("DETECTORS")
    if found is None:
        found = globals()["DETECTORS"] = _every_platform()
    return found


__all__ = ["DETECTORS", "SHIM_PATH", "SHIM_PARTS", "Expectation", "ShimError", "World", "detect", "normalize",
           "verify", "normalize_environment", "process_group_world", "shim_platforms", "shim_source"]


def detect(env: Mapping[str, str], expect: Expectation | None = None) -> tuple[type[Detector], World]:
    """``shim.detect`` over every platform's detectors."""
    return shim.detect(env, expect, _detectors())


def normalize_environment(env: MutableMapping[str, str] | None = None, *, apply: bool = True) -> World:
    """``shim.normalize`` over every platform's detectors."""
    return shim.normalize(env, apply=apply, detectors=_detectors())


def verify(world: World, expect: Expectation, sources: Mapping[str, str] | None = None) -> None:
    """``shim.verify``; ``sources`` default: those of the platform's detector that read ``world``."""
    if sources is None:
        sources = next((d.sources for d in _detectors() if d.name == world.platform), {})
    shim.verify(world, expect, sources)


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
