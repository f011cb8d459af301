"""The shim's command line: resolve the world (the core, shim.py), add the launcher flags
(shim_launch.py), install environment.pip (shim_pip.py), say the world once, and exec the
command. Platform-independent: joined into every job's shim, whose last lines call ``main``
(``shim_source`` in runtime/__init__.py); standard library only."""

from __future__ import annotations

import os
import sys

from trainspec.runtime.shim import ShimError, _apply, _resolve  # package only
from trainspec.runtime.shim_launch import spawner_command  # package only
from trainspec.runtime.shim_pip import install_pip  # package only

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
        detector, world, expect, exports = _resolve(os.environ)
        command = spawner_command(command, world, expect)
    except ShimError as error:
        print("trainspec: error: %s" % error, file=sys.stderr)
        return 3
    _apply(os.environ, exports)
    if not show:
        try:
            job = os.environ.get(detector.job_variable, "") if detector.job_variable else ""
            install_pip(os.environ, job=job)
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
