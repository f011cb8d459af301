"""trainspec runtime shim: turn a platform's distributed variables into torch's.

Every compiled job runs each training process as ``python trainspec_shim.py [--print] -- CMD...``.
The shim finds out which platform started this process (one detector each, in ``DETECTORS``),
checks the world it sees against what the compiler expected (``TRAINSPEC_*``), exports
MASTER_ADDR, MASTER_PORT, RANK, LOCAL_RANK, NODE_RANK, ... as PyTorch and Lightning read them,
and execs CMD: a world that disagrees with the spec fails here, at once, not in a 30-minute hang.

This file is the shim's core: the contract with the compiler, the world, the detector interface
and the checks. A job ships one file, standard library only, Python >= 3.8: this core joined with
the parts every job needs (shim_torch.py: torch's own variables; shim_launch.py: launcher flags;
shim_pip.py: environment.pip; shim_main.py: the command line) and its own platform's detectors
only (<target>_detector.py), by ``shim_source`` in runtime/__init__.py, which drops the lines
marked ``# package only`` (the imports between these modules in the package). The logic works on
a plain mapping; only ``main`` touches os.environ and execs. How each platform is read:
docs/runtime.md.
"""

from __future__ import annotations

import os
import sys
from collections import namedtuple
from collections.abc import Mapping, MutableMapping

# The contract between a compiled job and this file, written once: the compiler imports these
# names and ports (compiler/base.py, the targets, validation), and this file reads them.
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
ENV_STAGED_DIR = "TRAINSPEC_STAGED_DIR"  # HPC Pack: the job's own staged folder, set by submit
ENV_RAY = "TRAINSPEC_RAY"  # set by trainspec's Ray driver in every actor
ENV_PIP = "TRAINSPEC_PIP"  # Slurm, HPC Pack, Kubernetes: environment.pip as a JSON list, installed once per node

LAUNCHERS = ("per-process", "per-node", "mpi", "tensorflow")  # tensorflow: one worker per node, TF_CONFIG
AZUREML_MASTER_PORT = 6105  # what Azure ML's pytorch distribution uses
HPCPACK_MASTER_PORT = 29400  # trainspec's rendezvous port on HPC Pack unless the spec sets one
RDZV_TIMEOUT = 900  # seconds a node waits for node 0 in the shared directory (TRAINSPEC_RDZV_TIMEOUT)
# HPC Pack's shared-folder election ships beside this file in HPC Pack jobs only, under this
# name (runtime/hpcpack_election.py in the package); the HPC Pack detector loads it when needed.
ELECTION_FILE = "trainspec_hpcpack_election.py"


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
    job_variable = ""  # the platform's variable naming the job, if any: its node's pip folder (shim_pip.py)

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


# The job's detectors in priority order (the first whose detect() is true wins): in the shipped
# file, its platform's detector file sets them (shim_torch.ordered); in the package, the caller
# passes them (trainspec.runtime.DETECTORS: every platform's).
DETECTORS: tuple[type[Detector], ...] = ()


# ---------------------------------------------------------------- detect, verify, normalize


def detect(env: Mapping[str, str], expect: Expectation | None = None,
           detectors: tuple[type[Detector], ...] | None = None) -> tuple[type[Detector], World]:
    """The first of ``detectors`` (default: the job's, DETECTORS) that recognises env, and the
    world it reads from env."""
    if expect is None:
        expect = Expectation.from_env(env)
    for detector in DETECTORS if detectors is None else detectors:
        if detector.detect(env):
            return detector, detector.world(env, expect)
    raise ShimError("no detector matched")  # unreachable with shim_torch.ordered: SingleProcess always matches


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


def _resolve(env: Mapping[str, str], detectors: tuple[type[Detector], ...] | None = None
             ) -> tuple[type[Detector], World, Expectation, dict[str, str | None]]:
    """Detect, verify and compute exports; the world carries the port actually exported."""
    expect = Expectation.from_env(env)
    detector, world = detect(env, expect, detectors)
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
    return detector, world, expect, exports


def normalize(env: MutableMapping[str, str] | None = None, *, apply: bool = True,
              detectors: tuple[type[Detector], ...] | None = None) -> World:
    """Detect and verify the world, and (if apply) export torch's variables into env (default os.environ)."""
    if env is None:
        env = os.environ
    _, world, _, exports = _resolve(env, detectors)
    if apply:
        _apply(env, exports)
    return world


def _apply(env: MutableMapping[str, str], exports: Mapping[str, str | None]) -> None:
    for key, value in exports.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
