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

import os
import shlex
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from trainspec import __version__
from trainspec.registry.build import Outcome
from trainspec.compiler import base
from trainspec.compiler.write import links_in, out_problem, target_dir
from trainspec.core import files
from trainspec.core.diagnostics import printable
from trainspec.core.records import Record
from trainspec.core.markdown import visible
from trainspec.core.secrets import redact_bytes
from trainspec.review.outputs import Header, folder_header, repo_root, unified


# --- check ------------------------------------------------------------------------------------

KINDS = ("stale", "hand-edited", "missing", "orphaned", "foreign", "link", "committed")
STAGING = ".trainspec"  # submit's own folder: it compiles each job into .trainspec/jobs/<job name>/<target>/


class Finding(Record):
    __slots__ = ("kind", "path", "why", "fix", "diff")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, kind: str, path: Path, why: str, fix: str, diff: str = "") -> None:
        self.kind = kind  # one of KINDS
        self.path = path
        self.why = why
        self.fix = fix  # a command that fixes it, as the user types it
        self.diff = diff

    def render(self) -> str:
        # a folder a pull request added to the output directory may be named `x\n::error::...`: one
        # line per finding, whatever the names (the fix is already one line: _shell_word)
        path = os.fsencode(self.path).decode("utf-8", "backslashreplace")  # bytes not UTF-8 as \xff
        text = f"{visible(path, line=True)}: {self.kind}: {visible(self.why)}\n  fix: {self.fix}"
        return text + ("\n" + self.diff if self.diff else "")


def _shell_word(text: str) -> str:
    """``text`` as one bash word on one line: shlex-quoted, or, when it holds a line break, another
    control character or a byte that is not UTF-8, ANSI-C quoted with the bytes escaped
    (``$'out/x\\n::error::'``, ``$'out/x\\xff'``), which bash reads back as the same name."""
    unseen = [ch for ch in text if visible(ch) != ch or 0xDC80 <= ord(ch) <= 0xDCFF]
    if not unseen:
        return shlex.quote(text)
    out = []
    for ch in text:
        if ch in "\\'":
            out.append("\\" + ch)
        elif ch in "\n\r\t":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        elif ch in unseen:
            out.append("".join(f"\\x{byte:02x}" for byte in os.fsencode(ch)))
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


# (spec files, or None for the paths this run was given; prune?) -> the compile command line
FixCommand = Callable[[Optional[Sequence[str]], bool], str]


def check_outputs(outcomes: Sequence[Outcome], out: Path, fix: FixCommand,
                  targets: Sequence[str] = (), verified: Optional[Dict[Path, str]] = None,
                  compared: Optional[Dict[Path, List[Finding]]] = None,
                  links: Optional[Dict[Path, str]] = None) -> List[Finding]:
    """Every way the files under ``out`` differ from what ``outcomes`` compile to, each with
    what it is and the command that fixes it. ``verified``: output folders already known to hold
    exactly what their spec compiles to (review/cache.py), by the spec they are written from.
    ``compared``: output folders already compared (``compare``), with their findings; ``links``:
    links_in(out), when the caller has it already."""
    compared = compared or {}
    findings: List[Finding] = []
    problem = out_problem(out)
    if problem is not None:  # OUT leads out of the repository: nothing under it is read
        return [Finding("link", out, problem.strerror, f"rm -- {_shell_word(str(out))}")]
    links = dict(links_in(out)) if links is None else links
    for link, target in links.items():
        findings.append(_link(link, target))
    expected: Dict[Path, Any] = dict.fromkeys(verified or {})
    compiled: Dict[Path, Tuple[Outcome, base.Artifact]] = {}
    for outcome in outcomes:
        for artifact in outcome.artifacts:
            compiled[target_dir(out, artifact)] = (outcome, artifact)
    expected.update(compiled)
    for folder, (outcome, artifact) in compiled.items():
        if folder in links or folder.parent in links:
            continue  # reported as a link, never read
        if folder in compared:
            findings += compared[folder]
        else:
            findings += _compare(folder, outcome, artifact, fix([outcome.file], False))
    prune = fix(None, True)
    for folder, header in orphans(outcomes, out, targets, verified):
        findings.append(Finding("orphaned", folder, f"written from {header.spec}, which is gone or no longer "
                                "produces it; compile --prune removes it", prune))
    for path in _foreign(out, expected):
        findings.append(Finding("foreign", path, "not written by trainspec (no trainspec header), inside the "
                                "output directory: move it elsewhere or delete it", f"rm -r -- {_shell_word(str(path))}"))
    return findings


def compare(outcome: Outcome, out: Path, fix: FixCommand,
            links: Optional[Dict[Path, str]]) -> Dict[Path, List[Finding]]:
    """check_outputs' findings for the folders of one outcome's artifacts, by folder, as the
    worker process of check finds them. ``links``: links_in(out); None when out_problem(out)
    (then nothing under OUT is read). Folders that are or lie in a link are not read."""
    if links is None:
        return {}
    found = {}
    for artifact in outcome.artifacts:
        folder = target_dir(out, artifact)
        if not (folder in links or folder.parent in links):
            found[folder] = _compare(folder, outcome, artifact, fix([outcome.file], False))
    return found


def _link(path: Path, target: str) -> Finding:
    """A symbolic link where trainspec writes: reported as what it is, never followed or read."""
    return Finding("link", path, f"is a symbolic link (to {printable(target)}) inside the output directory: "
                   "trainspec never reads or writes through it; delete the link, then compile",
                   f"rm -- {_shell_word(str(path))}")


def staging_problems() -> List[Finding]:
    """What is wrong with submit's staging folder (STAGING) here and at the top of the repository:
    a symbolic link (submit would write its jobs, and a later submit read them, where the link
    says), or a folder git tracks (a pull request that commits .trainspec/jobs/<the name plan
    prints>/ brings its own job files where submit compiles: submit compiles them again and
    refuses the folder, check and review name it). git is asked only when there is a STAGING to
    ask about, and never follows a link; without git, or outside a repository, a folder is not
    said to be tracked."""
    from trainspec.schema.loader import repository_root

    here = Path(".")
    root = repository_root(Path.cwd())
    places = [here / STAGING]
    if root is not None and Path(os.path.relpath(root)) != here:
        places.append(Path(os.path.relpath(root)) / STAGING)
    found: List[Finding] = []
    for place in places:
        if not os.path.lexists(place):
            continue
        link = next((p for p in (place, place / "jobs") if os.path.islink(p)), None)
        if link is not None:
            found.append(Finding("link", link, f"is a symbolic link (to {printable(files.link_target(link))}): "
                                 f"submit compiles its jobs into {STAGING}/jobs/ and never writes or reads through "
                                 "a link there", f"rm -- {_shell_word(str(link))}"))
        tracked = _tracked(place) if root is not None else []
        if tracked:
            word = _shell_word(str(place))
            found.append(Finding(
                "committed", place, f"is committed ({len(tracked)} file(s) git tracks, e.g. {printable(tracked[0])}): "
                "it is trainspec's own folder, where submit compiles each job at the time it submits; submit "
                "refuses it while git tracks it (what a commit puts there is never what runs)",
                f"git rm -r --cached -- {word} && echo {_shell_word('/' + STAGING)} >> "
                f"{_shell_word(str(place.parent / '.gitignore'))}"))
    return found


def _tracked(place: Path) -> List[str]:
    """The files under ``place`` that git tracks (paths as git prints them), or none when git
    cannot say (not installed, not a repository)."""
    import subprocess

    try:
        listed = subprocess.run(["git", "--literal-pathspecs", "ls-files", "-z", "--", str(place)],
                                capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if listed.returncode != 0:
        return []
    return sorted(os.fsdecode(name) for name in listed.stdout.split(b"\0") if name)


def _compare(folder: Path, outcome: Outcome, artifact: base.Artifact, fix: str) -> List[Finding]:
    found: List[Finding] = []
    said: List[str] = []

    def stale() -> str:
        """Why the folder is stale by its header ("": it is not), read once and only for a file
        that differs: a folder that matches (the usual case) is not read twice."""
        if not said:
            digest = outcome.valid.source.digest
            header = folder_header(folder)
            if header is not None and header.spec != outcome.valid.source.display:
                said.append(f"its spec moved from {header.spec} to {outcome.valid.source.display}")
            elif header is not None and header.digest != digest:
                said.append(f"its spec changed since it was compiled (spec sha256:{header.digest} -> {digest})")
            elif header is not None and header.version != __version__:
                said.append(f"compiled by trainspec {header.version}; this is trainspec {__version__}")
            else:
                said.append("")
        return said[0]

    produced = {f.path for f in artifact.files}
    listing = files.list_folder(folder, skip=())
    odd = dict(listing.links)
    for name, target in listing.links:
        found.append(_link(folder / name, target))
    for item in artifact.files:
        path = folder / item.path
        if any(item.path == name or item.path.startswith(name + "/") for name in odd):
            continue  # the link is the finding
        try:
            current = files.read_regular(path)  # never through a link, never a FIFO
        except OSError:
            found.append(Finding("missing", path, "its spec produces it", fix))
            continue
        if current == item.data:
            continue
        label = path.as_posix()
        diff = unified(redact_bytes(current), redact_bytes(item.data), label, f"{label} (compiled)")
        if stale():
            found.append(Finding("stale", path, stale(), fix, diff))
        else:
            found.append(Finding("hand-edited", path, "changed since trainspec wrote it (its spec did not "
                                 "change): move the edit into the spec, then compile", fix, diff))
    for name in listing.files:
        if name not in produced:
            kind, why = (("stale", f"its spec no longer produces it ({stale()})") if stale() else
                         ("hand-edited", "added by hand: its spec does not produce it"))
            found.append(Finding(kind, folder / name, why, fix))
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
    """OUT/<name>/<target> folders, never through a link (links_in reports those). Listed with
    scandir, whose entries know their type: no stat per folder (a check of 500 specs made 2,000)."""
    if not out.is_dir() or out_problem(out) is not None:
        return []
    found = []
    for job in _real_subfolders(os.fspath(out)):
        found += (Path(target) for target in _real_subfolders(job))
    return sorted(found)


def _real_subfolders(folder: str) -> List[str]:
    """The paths of the folders in ``folder`` that are no link, whose names start with no dot
    (none when it cannot be listed)."""
    try:
        with os.scandir(folder) as entries:
            return [e.path for e in entries if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _real_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _foreign(out: Path, expected: Dict[Path, Any]) -> List[Path]:
    """Anything under OUT/ (one or two levels down) that trainspec did not write. Dot-files
    (.gitkeep, a write in progress) are not reported."""
    if not out.is_dir():
        return []
    names = {folder.parent for folder in expected}
    found = []
    for entry in sorted(out.iterdir()):
        if entry.name.startswith(".") or entry.is_symlink():
            continue  # a link: reported as a link
        if entry.is_file() or (entry not in names and all(folder_header(f) is None for f in _children(entry))):
            found.append(entry)
            continue
        for child in _children(entry):
            if child not in expected and (child.is_file() or folder_header(child) is None):
                found.append(child)
    return found


def _children(folder: Path) -> List[Path]:
    """The entries of a real folder, links left out (links_in reports them)."""
    if not _real_folder(folder):
        return []
    return [c for c in sorted(folder.iterdir()) if not c.name.startswith(".") and not c.is_symlink()]


def prune(outcomes: Sequence[Outcome], out: Path, targets: Sequence[str] = ()) -> List[Tuple[Path, Header]]:
    """Remove orphaned output folders (never one without a trainspec header); returns them."""
    if out_problem(out) is not None or links_in(out):
        return []  # compile --prune refuses first, naming each link; never delete through one
    import shutil  # here: ~3 ms of every check's start otherwise (with bz2, lzma)

    removed = orphans(outcomes, out, targets)
    for folder, _ in removed:
        shutil.rmtree(folder)  # refuses a link itself, and unlinks links inside without following them
        try:
            folder.parent.rmdir()  # the job's folder, when that was its last target
        except OSError:
            pass
    return removed
