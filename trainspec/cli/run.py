"""`trainspec run`: Run a spec's job here, before paying for GPUs: nodes x processes local
processes, each with exactly the environment the target platform would give it, on CPU with
gloo.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from trainspec.cli.output import UsageError


def command(args: argparse.Namespace) -> int:
    from trainspec.commands.run import LocalOptions, refusal_of, run_local

    refusal = refusal_of(args.target)
    if refusal:  # before anything is read: a spec error here would mislead
        raise UsageError(refusal)
    parsed = {}
    for item in args.inputs:
        name, sep, path = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--input: expected NAME=PATH, got {item!r}")
        if not Path(path).exists():
            raise UsageError(f"--input {name}={path}: no such file or directory")
        parsed[name] = path
    options = LocalOptions(target=args.target, procs_per_node=args.procs_per_node, nodes=args.nodes,
                           launcher=args.launcher, inputs=parsed, timeout=args.timeout,
                           rendezvous_timeout=args.rendezvous_timeout, netns=args.netns, workdir=args.workdir,
                           sets=tuple(args.sets), variables=tuple(args.variables), keep=args.keep)
    return run_local(args.spec, options)
