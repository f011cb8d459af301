"""`trainspec validate`: Check specs and print every problem as file:line:col: severity: message
(hint).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import List, Sequence

from trainspec.cli.output import _err, _report, _summary, _specs, _strict_note, _report_for_machines


def command(args: argparse.Namespace) -> int:
    from trainspec.registry.build import build_all

    files = _instead_of_bases(_specs(args.paths), args.paths)
    outcomes = build_all(files, Path("build"), args.targets, lower=False, sets=args.sets, variables=args.variables)
    if args.format == "text":
        errors, warnings = _report(outcomes, args.strict)
    else:
        errors, warnings = _report_for_machines(outcomes, args.format, args.strict)
    _err(_summary(len(files), errors, warnings) + _strict_note(args.strict, errors, warnings))
    return 1 if errors or (args.strict and warnings) else 0


def _instead_of_bases(files: List[str], named: Sequence[str]) -> List[str]:
    """A file named on the command line that specs in its repository extend (at any depth) is a
    base, not a spec: what it means is checked by validating those specs (a hook passes a changed
    base by its name). The team catalog (trainspec-skus.yaml) means the specs that read it. The
    repository: from the first folder with a .git above the file, else
    from the current folder."""
    from trainspec.registry.build import _is_file, _real, dependents, find_specs
    from trainspec.review.cache import Extends
    from trainspec.review.revision import looks_like_spec
    from trainspec.schema.skus import TEAM_FILE, team_file_for

    known = None
    result: List[str] = []
    for file in files:
        if file not in named or not _is_file(Path(file)):
            result.append(file)
            continue
        known = known if known is not None else Extends()
        if Path(file).name == TEAM_FILE:  # the team catalog: the specs that look sizes up in it
            found = [f for f in find_specs([_search_root(Path(file))], known) if looks_like_spec(Path(f))
                     and team_file_for(Path(f).resolve().parent) == Path(file).resolve()]
            _err(f"{file}: the team catalog of {len(found)} spec(s): validating them")
            result += found
            continue
        found = dependents(file, _search_root(Path(file)), known)
        if found:
            _err(f"{file}: a base of {len(found)} spec(s): validating them instead")
        result += found or [file]
    if known is not None:
        known.save()
    unique = {}  # one spec once, however it was named
    for file in result:
        unique.setdefault(_real(file) or file, file)  # a link loop or a NUL stays a name: build() reports it
    return list(unique.values())


def _search_root(file: Path) -> str:
    start = file.resolve().parent
    root = next((p for p in (start, *start.parents) if (p / ".git").exists()), Path.cwd())
    shown = os.path.relpath(root)
    return str(root) if shown.startswith("..") else shown
