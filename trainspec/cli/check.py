"""`trainspec check`: CI gate: recompile in memory and fail (exit 1) for every output under OUT
that is stale (its spec changed), hand-edited, missing, orphaned (its spec is gone) or foreign
(not written by trainspec), each with the command that fixes it.
"""

from __future__ import annotations

import argparse
import os
import pickle
import shlex
import signal
import sys
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence

from trainspec.cli.output import _err, _report, _summary, _specs


def command(args: argparse.Namespace) -> int:
    from trainspec.build import build, claim_names
    from trainspec.review.cache import Cache, Extends, options_of, outputs_match
    from trainspec.review.check import KINDS, check_outputs

    out_path = Path(args.out)
    cache = Cache(out_path, options_of(args.targets, args.sets, args.variables))
    known = Extends()
    files = _specs(args.paths, known)
    known.save()
    cached = {}  # file -> its record: what the cache proves equal, from bytes alone
    for file in files:
        record = cache.lookup(file)
        if record is not None:
            folders = {out_path / record["name"] / target: hashes for target, hashes in record["outputs"].items()}
            if all(outputs_match(folder, hashes) for folder, hashes in folders.items()):
                cached[file] = record
    pending = [f for f in files if f not in cached]
    built = dict(zip(pending, _build_all(pending, lambda file: build(file, out_path, args.targets, sets=args.sets,
                                                                     variables=args.variables))))
    # one job name, one spec: a cached spec that shares its name with another is compiled again,
    # so that the error is located like every other
    names = [r["name"] for r in cached.values()] + [o.valid.name for o in built.values() if o.valid is not None]
    for file, record in list(cached.items()):
        if names.count(record["name"]) > 1:
            del cached[file]
            built[file] = build(file, out_path, args.targets, sets=args.sets, variables=args.variables)
    outcomes = [built[f] for f in files if f in built]
    claim_names(outcomes)
    for outcome in outcomes:
        cache.remember(outcome)
    cache.save()
    verified = {}  # output folder -> its spec
    for record in cached.values():
        verified.update(dict.fromkeys((out_path / record["name"] / target for target in record["outputs"]),
                                      record["display"]))
    errors, warnings = _report([o for o in outcomes if not o.ok], False)
    if errors:
        _err(_summary(len(files), errors, warnings) + "; fix the specs first")
        return 1
    findings = check_outputs(outcomes, out_path, _fix_command(args), args.targets, verified)
    for finding in findings:
        print(finding.render())
    count = sum(len(o.artifacts) for o in outcomes) + len(verified)
    if findings:
        kinds = ", ".join(f"{n} {k}" for k in KINDS for n in [sum(f.kind == k for f in findings)] if n)
        fixes = list(dict.fromkeys(f.fix for f in findings))
        _err(f"trainspec check: {len(findings)} problem(s) in {args.out} ({kinds}); to fix them all, run:")
        for line in fixes:
            _err(f"  {line}")
        return 1
    _err(f"trainspec check: {count} output folder(s) in {args.out} match their specs")
    return 0


FORK_FROM = 64  # specs to compile from which check shares them with a second process


def _build_all(files: List[str], build_one: Callable[[str], Any]) -> List[Any]:
    """``build_one`` of each of ``files``, in their order. With FORK_FROM files or more and a
    second core, a forked worker builds the second half while this process builds the first, and
    sends its Outcomes back pickled. A worker that fails (killed, or raising) is reported on
    stderr and its half built here, so the result is the one a single process gives."""
    if len(files) < FORK_FROM or len(os.sched_getaffinity(0)) < 2:
        return [build_one(f) for f in files]
    first = [build_one(files[0])]  # what every spec needs (the validator, the targets' modules) is made once
    files = files[1:]
    half = len(files) // 2
    sys.stdout.flush()
    sys.stderr.flush()
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker: build, send, and leave without running the parent's exit handlers
        status = 1
        try:
            os.close(reader)
            with os.fdopen(writer, "wb") as pipe:
                pickle.dump([build_one(f) for f in files[half:]], pipe, protocol=pickle.HIGHEST_PROTOCOL)
            status = 0
        finally:
            os._exit(status)
    os.close(writer)
    reaped = False
    try:
        mine = [build_one(f) for f in files[:half]]
        with os.fdopen(reader, "rb", closefd=False) as pipe:
            sent = pipe.read()  # until the worker exits: its end closes with it
        _, status = os.waitpid(pid, 0)
        reaped = True
        if status == 0:
            return first + mine + pickle.loads(sent)
        _err(f"trainspec check: the worker process failed ({_how(status)}); checking its "
             f"{len(files) - half} spec(s) here")
        return first + mine + [build_one(f) for f in files[half:]]
    finally:
        os.close(reader)
        if not reaped:  # this process is failing (an error, ^C): the worker ends with it
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def _fix_command(args: argparse.Namespace) -> Callable[[Optional[Sequence[str]], bool], str]:
    """The compile command line that fixes a check finding: the same output folder, targets and
    overrides as the check that found it; ``files`` None means the paths the check was given."""
    def command(files: Optional[Sequence[str]], prune: bool) -> str:
        words = ["trainspec", "compile", *(args.paths if files is None else files), "-o", args.out]
        for name in args.targets:
            words += ["-t", name]
        for text in args.sets:
            words += ["--set", text]
        for text in args.variables:
            words += ["--var", text]
        return shlex.join(words + (["--prune"] if prune else []))
    return command
