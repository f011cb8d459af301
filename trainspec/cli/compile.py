"""`trainspec compile`: Validate specs and write each target's files. Nothing is written unless
every spec is valid. With --prune, also remove the output folders trainspec wrote for specs that
are gone.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from trainspec.cli.output import _err, _report, _summary, _specs, _strict_note


def command(args: argparse.Namespace) -> int:
    from trainspec.registry.build import build_all
    from trainspec.compiler.write import target_dir, write_all

    files = _specs(args.paths)
    out_path = Path(args.out)
    outcomes = build_all(files, out_path, args.targets, sets=args.sets, variables=args.variables)
    errors, warnings = _report(outcomes, args.strict)
    if errors or (args.strict and warnings):
        _err(_summary(len(files), errors, warnings) + _strict_note(args.strict, errors, warnings) + "; nothing written")
        return 1
    artifacts = [a for o in outcomes for a in o.artifacts]
    if args.prune:
        from trainspec.compiler.write import links_in

        links = links_in(out_path)
        for link, target in links:
            _err(f"trainspec: error: {link}: is a symbolic link (to {target}) inside the output folder: "
                 "compile --prune never follows or deletes through a link (hint: delete the link itself: "
                 f"{shlex.join(['rm', '--', str(link)])})")
        if links:
            _err("trainspec: nothing written or removed")
            return 1
    try:
        written = dict(write_all(out_path, artifacts))
        if args.prune:
            from trainspec.review.check import prune

            for folder, header in prune(outcomes, out_path, args.targets):
                print(f"removed {folder}/ (written from {header.spec}, which is gone or no longer produces it)")
    except OSError as exc:
        _err(f"trainspec: error: cannot write {exc.filename or args.out}: {exc.strerror}; "
             "existing outputs are unchanged")
        return 1
    for artifact in artifacts:
        where = target_dir(out_path, artifact)
        names = ", ".join(f.path for f in artifact.files)
        print(f"{'wrote' if written[where] else 'unchanged'} {where}/ ({names})")
        print(f"  submit: {artifact.submit.format(dir=shlex.quote(str(where)))}")
    _err(_summary(len(files), errors, warnings))
    return 0
