"""`trainspec import`: Turn an existing Azure ML command job (job.yml) into a spec that compiles
back to an equivalent job. A field of the wrong type, a key azure-ai-ml refuses, a placeholder
or a preview-schema compute is an error at its line (exit 1, nothing written); whatever the spec
cannot carry is reported by field, with its line; a
hand-written MPI-env wrapper in the command is dropped (the shim does its work). The spec is
printed, or written with -o (never over an existing file), then validated.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from trainspec.cli.output import UsageError


def command(args: argparse.Namespace) -> int:
    import importlib

    from trainspec.registry.build import build
    from trainspec.registry import IMPORTER

    importer = importlib.import_module(f"trainspec.targets.{IMPORTER}.importer")
    import_job, spec_text = importer.import_job, importer.spec_text

    from trainspec.core.diagnostics import printable
    from trainspec.core.memo import one_command
    from trainspec.schema.loader import ReadProblem, path_text_problem, real_path

    job = Path(args.job)  # `/` and `.` have no name: the job cannot be read, and import says so
    spec_file = args.out or str(job.parent / f"{job.stem or 'job'}.trainspec.yaml")
    if args.out:
        shown = printable(args.out)
        problem = path_text_problem(args.out)  # a NUL, an overlong name or path
        if problem is not None:
            raise UsageError(f"cannot write {shown}: the path {problem}")
        try:  # a symlink loop above it, where Path.resolve() raises RuntimeError
            real_path(Path(args.out).parent)
        except ReadProblem as exc:
            raise UsageError(f"cannot write {shown}: {exc.message}") from None
        if os.path.lexists(args.out):
            raise UsageError(f"{shown} exists: trainspec import never overwrites a file")
    imported = import_job(args.job, spec_file)
    for note in imported.notes:
        print(note.render(), file=sys.stderr)
    if not imported.ok:
        print(f"trainspec: {args.job} cannot be imported: see the errors above; nothing written", file=sys.stderr)
        return 1
    text = spec_text(imported, args.job)
    if not args.out:
        sys.stdout.write(text)
        return 0
    target = Path(args.out)
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {args.out}: {exc.strerror}") from None
    with one_command():  # what this command wrote is read afresh, not as the file system answered before
        outcome = build(args.out, Path("build"), [importer.TARGET], lower=False)
    for d in outcome.diagnostics:
        print(d.render(), file=sys.stderr)
    verdict = "it validates" if outcome.ok else "it does not validate yet: fix what is listed above"
    print(f"trainspec: wrote {args.out} from {args.job}; {verdict}", file=sys.stderr)
    return 0 if outcome.ok else 1
