"""The shim's launcher flags: per node, ``accelerate launch`` and ``deepspeed`` start the node's
workers themselves and read the world from their own flags, not from torch's variables, so the
shim adds the flags the command lacks. Platform-independent: joined into every job's shim
(``shim_source`` in runtime/__init__.py); standard library only."""

from __future__ import annotations

import os

from trainspec.runtime.shim import Expectation, ShimError, World  # package only

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
