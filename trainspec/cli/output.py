"""What every command prints the same way: diagnostics (text, json, GitHub annotations), the
summary line, and a command line that cannot run (UsageError: exit 2 with the usage).
"""

from __future__ import annotations

import sys
from typing import List, Sequence, Tuple

class UsageError(Exception):
    """A command line that cannot run: exit 2 with the command's usage, as argparse does."""


def _err(text: str) -> None:
    print(text, file=sys.stderr)


def _report(outcomes, strict: bool) -> Tuple[int, int]:
    errors = warnings = 0
    for outcome in outcomes:
        for d in outcome.diagnostics:
            _err(d.render())
            errors += d.is_error
            warnings += not d.is_error
    return errors, warnings


def _summary(count: int, errors: int, warnings: int) -> str:
    def n(k, word):
        return f"{k} {word}{'' if k == 1 else 's'}"
    return f"{n(count, 'spec')}: {n(errors, 'error')}, {n(warnings, 'warning')}"


def _specs(paths: Sequence[str], known=None) -> List[str]:
    from trainspec.registry.build import SearchError, find_specs

    try:
        files = find_specs(paths, known)
    except SearchError as exc:
        raise UsageError(str(exc)) from None
    if not files:
        raise UsageError(f"no spec files (*.yaml, *.yml) in {' '.join(paths)}")
    return files


def _strict_note(strict: bool, errors: int, warnings: int) -> str:
    return " (--strict: warnings count as errors)" if strict and warnings else ""


def _report_for_machines(outcomes, fmt: str, strict: bool) -> Tuple[int, int]:
    """json: one document on stdout; github: workflow commands, so each problem shows on its line
    of the pull request (https://docs.github.com/actions/reference/workflow-commands)."""
    import json

    found = [d for o in outcomes for d in o.diagnostics]
    errors = sum(d.is_error for d in found)
    if fmt == "json":
        print(json.dumps([{"file": d.file, "line": d.line, "col": d.col, "severity": d.severity,
                           "field": d.field or None, "message": d.message, "hint": d.hint} for d in found],
                         indent=2))
    else:
        for d in found:
            level = "error" if d.is_error or strict else "warning"
            where = ",".join(f"{k}={_gh_property(str(v))}" for k, v in
                             (("file", d.file), ("line", d.line), ("col", d.col), ("title", d.field or None))
                             if v is not None)
            text = d.message + (f" (hint: {d.hint})" if d.hint else "")
            print(f"::{level} {where}::{_gh_data(text)}")
    return errors, len(found) - errors


def _gh_data(text: str) -> str:
    # a file name that is not UTF-8 (lone surrogates) as escapes: a strict stdout cannot print it
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_property(text: str) -> str:
    return _gh_data(text).replace(":", "%3A").replace(",", "%2C")


def _rerun(args, *extra: str) -> List[str]:
    """The command line that makes this document again (``extra`` after it, e.g. another
    --format): the real paths (or `.`), revision, output folder, targets and overrides, each word
    quoted by the caller (shlex.join), so the line shown is a command that runs."""
    words = ["trainspec", args.command]
    if getattr(args, "git", None):
        words += ["--git", args.git]
    if getattr(args, "out", "build") != "build":
        words += ["--out", args.out]
    for name in getattr(args, "targets", None) or ():
        words += ["-t", name]
    for flag, values in (("--set", getattr(args, "sets", None)), ("--var", getattr(args, "variables", None))):
        for value in values or ():
            words += [flag, value]
    words += list(extra)
    paths = list(getattr(args, "paths", None) or ["."])
    return words + (["--", *paths] if any(p.startswith("-") for p in paths) else paths)
