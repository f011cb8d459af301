"""What reviewers and CI see: `check` (are the committed outputs what the specs compile to?),
`plan` (what will run) and `diff` (what a change to the specs changes).

All three reuse build(): the same Artifact that `compile` writes is what `check` compares,
`plan` describes and `diff` diffs, so they cannot disagree with `compile`. A git revision is
compiled exactly like the working tree: its files are extracted and compiled from its own root
with the same repository-relative names, so both sides produce the same relative paths and
messages name `REV:specs/x.yaml`, never a temporary folder.

This module is `check` (and `compile --prune`): are the committed outputs what the specs compile
to? Its cache is review/cache.py.
"""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from trainspec import __version__
from trainspec.build import Outcome
from trainspec.compile import base
from trainspec.compile.write import target_dir
from trainspec.core.secrets import redact_bytes
from trainspec.review.outputs import Header, folder_header, repo_root, unified


# --- check ------------------------------------------------------------------------------------

KINDS = ("stale", "hand-edited", "missing", "orphaned", "foreign")


@dataclass
class Finding:
    kind: str  # one of KINDS
    path: Path
    why: str
    fix: str  # a command that fixes it, as the user types it
    diff: str = ""

    def render(self) -> str:
        text = f"{self.path}: {self.kind}: {self.why}\n  fix: {self.fix}"
        return text + ("\n" + self.diff if self.diff else "")


# (spec files, or None for the paths this run was given; prune?) -> the compile command line
FixCommand = Callable[[Optional[Sequence[str]], bool], str]


def check_outputs(outcomes: Sequence[Outcome], out: Path, fix: FixCommand,
                  targets: Sequence[str] = (), verified: Optional[Dict[Path, str]] = None) -> List[Finding]:
    """Every way the files under ``out`` differ from what ``outcomes`` compile to, each with
    what it is and the command that fixes it. ``verified``: output folders already known to hold
    exactly what their spec compiles to (review/cache.py), by the spec they are written from."""
    findings: List[Finding] = []
    expected: Dict[Path, Any] = dict.fromkeys(verified or {})
    compiled: Dict[Path, Tuple[Outcome, base.Artifact]] = {}
    for outcome in outcomes:
        for artifact in outcome.artifacts:
            compiled[target_dir(out, artifact)] = (outcome, artifact)
    expected.update(compiled)
    for folder, (outcome, artifact) in compiled.items():
        findings += _compare(folder, outcome, artifact, fix([outcome.file], False))
    prune = fix(None, True)
    for folder, header in orphans(outcomes, out, targets, verified):
        findings.append(Finding("orphaned", folder, f"written from {header.spec}, which is gone or no longer "
                                "produces it; compile --prune removes it", prune))
    for path in _foreign(out, expected):
        findings.append(Finding("foreign", path, "not written by trainspec (no trainspec header), inside the "
                                "output directory: move it elsewhere or delete it",
                                shlex.join(["rm", "-r", "--", str(path)])))
    return findings


def _compare(folder: Path, outcome: Outcome, artifact: base.Artifact, fix: str) -> List[Finding]:
    found: List[Finding] = []
    digest = outcome.valid.source.digest
    header = folder_header(folder)
    if header is not None and header.spec != outcome.valid.source.display:
        stale = f"its spec moved from {header.spec} to {outcome.valid.source.display}"
    elif header is not None and header.digest != digest:
        stale = f"its spec changed since it was compiled (spec sha256:{header.digest} -> {digest})"
    elif header is not None and header.version != __version__:
        stale = f"compiled by trainspec {header.version}; this is trainspec {__version__}"
    else:
        stale = ""
    produced = {f.path for f in artifact.files}
    for item in artifact.files:
        path = folder / item.path
        if not path.is_file():
            found.append(Finding("missing", path, "its spec produces it", fix))
            continue
        current = path.read_bytes()
        if current == item.data:
            continue
        label = path.as_posix()
        diff = unified(redact_bytes(current), redact_bytes(item.data), label, f"{label} (compiled)")
        if stale:
            found.append(Finding("stale", path, stale, fix, diff))
        else:
            found.append(Finding("hand-edited", path, "changed since trainspec wrote it (its spec did not "
                                 "change): move the edit into the spec, then compile", fix, diff))
    if folder.is_dir():
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.relative_to(folder).as_posix() not in produced:
                kind, why = (("stale", f"its spec no longer produces it ({stale})") if stale else
                             ("hand-edited", "added by hand: its spec does not produce it"))
                found.append(Finding(kind, path, why, fix))
    return found


def orphans(outcomes: Sequence[Outcome], out: Path, targets: Sequence[str] = (),
            verified: Optional[Dict[Path, str]] = None) -> List[Tuple[Path, Header]]:
    """Output folders trainspec wrote (by their header) for a spec that is gone, or for a spec of
    this run that no longer produces them. Outputs of specs outside this run are not touched;
    with ``targets``, only those targets' folders are considered. ``verified``: more folders of
    this run (folder -> its spec), known from the check cache."""
    expected = {target_dir(out, a) for o in outcomes for a in o.artifacts} | set(verified or {})
    in_run = {o.valid.source.display for o in outcomes if o.valid is not None} | set((verified or {}).values())
    root = repo_root(out.resolve())
    found = []
    for folder in _folders(out):
        if folder in expected:
            continue
        header = folder_header(folder)
        if header is None or (targets and header.target not in targets):
            continue
        gone = root is None or not (root / header.spec).is_file()
        if gone or header.spec in in_run:
            found.append((folder, header))
    return found


def _folders(out: Path) -> List[Path]:
    if not out.is_dir():
        return []
    return [f for f in sorted(out.glob("*/*")) if f.is_dir() and not any(p.startswith(".") for p in f.parts[-2:])]


def _foreign(out: Path, expected: Dict[Path, Any]) -> List[Path]:
    """Anything under OUT/ (one or two levels down) that trainspec did not write. Dot-files
    (.gitkeep, a write in progress) are not reported."""
    if not out.is_dir():
        return []
    names = {folder.parent for folder in expected}
    found = []
    for entry in sorted(out.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_file() or (entry not in names and all(folder_header(f) is None for f in _children(entry))):
            found.append(entry)
            continue
        for child in _children(entry):
            if child not in expected and (child.is_file() or folder_header(child) is None):
                found.append(child)
    return found


def _children(folder: Path) -> List[Path]:
    return [c for c in sorted(folder.iterdir()) if not c.name.startswith(".")] if folder.is_dir() else []


def prune(outcomes: Sequence[Outcome], out: Path, targets: Sequence[str] = ()) -> List[Tuple[Path, Header]]:
    """Remove orphaned output folders (never one without a trainspec header); returns them."""
    removed = orphans(outcomes, out, targets)
    for folder, _ in removed:
        shutil.rmtree(folder)
        try:
            folder.parent.rmdir()  # the job's folder, when that was its last target
        except OSError:
            pass
    return removed
