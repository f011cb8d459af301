"""`trainspec check`: CI gate: recompile in memory and fail (exit 1) for every output under OUT
that is stale (its spec changed), hand-edited, missing, orphaned (its spec is gone) or foreign
(not written by trainspec), each with the command that fixes it.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Callable, Optional, Sequence

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
    built = {}
    cached = {}  # file -> its record: what the cache proves equal, from bytes alone
    for file in files:
        record = cache.lookup(file)
        if record is not None:
            folders = {out_path / record["name"] / target: hashes for target, hashes in record["outputs"].items()}
            if all(outputs_match(folder, hashes) for folder, hashes in folders.items()):
                cached[file] = record
                continue
        built[file] = build(file, out_path, args.targets, sets=args.sets, variables=args.variables)
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
