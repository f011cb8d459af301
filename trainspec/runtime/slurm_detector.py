"""The shim's Slurm detector, joined into Slurm jobs' shim only (``shim_source`` in
runtime/__init__.py): a task srun started, and Slurm's compressed host lists. Standard library only."""

from __future__ import annotations

from collections.abc import Mapping

from trainspec.runtime.shim import AZUREML_MASTER_PORT, Detector, Expectation, ShimError, World, _int  # package only
from trainspec.runtime.shim_torch import ordered  # package only

SET_BY_SRUN = ", but srun sets it for every task"


class Slurm(Detector):
    """A task that srun started: ranks from SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID/SLURM_NODEID,
    the master the first host of SLURM_JOB_NODELIST, the port the spec's (docs/runtime.md)."""

    name = "slurm"
    sources = {"world_size": "SLURM_NTASKS", "rank": "SLURM_PROCID", "local_rank": "SLURM_LOCALID",
               "local_world_size": "SLURM_NTASKS/SLURM_JOB_NUM_NODES", "node_rank": "SLURM_NODEID",
               "nodes": "SLURM_JOB_NUM_NODES"}
    job_variable = "SLURM_JOB_ID"
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


# This platform's detectors in priority order, and the job's: between torch's own (shim_torch.ordered).
PLATFORM = (Slurm,)
DETECTORS = ordered(PLATFORM)
