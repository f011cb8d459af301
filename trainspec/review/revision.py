"""The two sides of a review: the specs of the working tree and of a git revision, each compiled
from its own root with the same repository-relative names (a revision's files are extracted
with `git archive`), so messages name `REV:specs/x.yaml`, never a temporary folder.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from trainspec.build import Outcome, build, find_specs
from trainspec.core.diagnostics import Diagnostic
from trainspec.review.diff import JobDiff, OutputDiff, diff_outcomes


# --- two sides: the working tree and a revision -----------------------------------------------

@dataclass
class Side:
    """A set of specs compiled from one tree: by job name, plus every error found (and, by spec
    path, the specs that did not compile, for the base side of a review)."""

    jobs: Dict[str, Outcome] = field(default_factory=dict)
    errors: List[Diagnostic] = field(default_factory=list)
    invalid: Dict[str, List[Diagnostic]] = field(default_factory=dict)
    # by job name, the team catalog (trainspec-skus.yaml) of its tree: its region and prices price
    # the job (review/cost.py), read while the tree (a revision's, removed after) is there
    catalogs: Dict[str, Any] = field(default_factory=dict)


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@contextmanager
def revision_tree(rev: str, root: Path) -> Iterator[Path]:
    """The tree of ``rev`` extracted into a temporary folder (removed afterwards); it has a
    .git marker so spec paths are repository-relative there too. Only what stays inside the
    folder is extracted: a symlink that is absolute or leaves the tree (``tz ->
    /usr/share/zoneinfo/UTC``) is left out, so a spec that reads through it finds nothing there
    and says so, located, instead of reading this machine's files."""
    import tempfile

    git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=root)
    files = subprocess.run(["git", "ls-tree", "--name-only", rev], cwd=root, check=True, capture_output=True).stdout
    tree = Path(tempfile.mkdtemp(prefix="trainspec-rev-"))
    try:
        if files:  # git archive of a tree without files is no tar at all
            _extract(subprocess.run(["git", "archive", "--format=tar", rev], cwd=root, check=True,
                                    capture_output=True).stdout, tree)
        (tree / ".git").mkdir(exist_ok=True)
        yield tree
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def _extract(archive: bytes, tree: Path) -> None:
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = [m for m in tar.getmembers() if _stays_inside(m)]
        if hasattr(tarfile, "data_filter"):
            tar.extractall(tree, members=members, filter=_skip_unsafe)
        else:  # Python without extraction filters: _stays_inside did the same checks
            tar.extractall(tree, members=members)


def _stays_inside(member: Any) -> bool:
    """A git archive member that is a file, a folder, or a symlink whose target is inside the tree."""
    import posixpath

    name = posixpath.normpath(member.name)
    if name.startswith(("/", "../")) or name == ".." or "\0" in member.name:
        return False
    if member.issym():
        link = member.linkname
        target = posixpath.normpath(posixpath.join(posixpath.dirname(name), link))
        return not (link.startswith("/") or target == ".." or target.startswith("../"))
    return member.isfile() or member.isdir()


def _skip_unsafe(member: Any, dest: str) -> Any:
    import tarfile

    try:
        return tarfile.data_filter(member, dest)
    except tarfile.FilterError:
        return None  # left out, like a symlink that leaves the tree


@contextmanager
def working_in(folder: Path) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def looks_like_spec(path: Path) -> bool:
    """A trainspec spec (`version: 1` or `extends:` at the top level), not any YAML file."""
    from trainspec.spec.loader import ReadProblem, read_bounded

    try:
        head = read_bounded(path, 8000)[:8000].decode("utf-8", "replace")
    except (OSError, ReadProblem):
        return False
    return any(re.match(r"(version:\s*1\s*(#.*)?$|extends:)", line) for line in head.splitlines())


def compile_side(root: Path, paths: Sequence[str], out: str, label: Optional[str],
                 established: Sequence[str] = (), **options: Any) -> Side:
    """Every spec under ``paths`` (repository-relative) compiled from ``root``; diagnostics name
    ``label:path`` (a revision) or the path. A job name belongs to the first spec that uses it,
    the ``established`` ones (the specs of the base revision) first: a copy that kept its
    original's name is the one that gets the error."""
    from trainspec.build import claim_names
    from trainspec.spec.skus import catalog_for

    side = Side()
    known = set(established)
    with working_in(root):
        present = [p for p in paths if Path(p).exists()]
        files = [f for f in find_specs(present) if looks_like_spec(Path(f))] if present else []
        files.sort(key=lambda f: (Path(f).as_posix() not in known, f))
        outcomes = [build(file, Path(out), **options) for file in files]
        claim_names(outcomes)
        for outcome in outcomes:
            if label:
                outcome.diagnostics = [_relabel(d, label) for d in outcome.diagnostics]
            errors = [d for d in outcome.diagnostics if d.is_error]
            side.errors += errors
            if errors:
                side.invalid[Path(outcome.file).as_posix()] = errors
            elif outcome.valid is not None:
                side.jobs[outcome.valid.name] = outcome
                side.catalogs[outcome.valid.name] = catalog_for(outcome.valid.source.dir)[0]
    return side


def _relabel(diagnostic: Diagnostic, label: str) -> Diagnostic:
    from dataclasses import replace

    if diagnostic.file and not diagnostic.file.startswith("--"):
        return replace(diagnostic, file=f"{label}:{Path(diagnostic.file).as_posix()}")
    return diagnostic


def compare(old: Side, new: Side, out: str, changed_files: Sequence[str] = (), root: Optional[Path] = None) -> List[JobDiff]:
    """Every job whose compiled job changes between the sides, by job name: its outputs' bytes
    (the provenance header aside), a file it references rather than copies (a conda file), the
    code folder it uploads, or a committed output that is not what its spec compiles to (all from
    ``changed_files``, repository-relative; with ``root``, the working tree's repository)."""
    diffs = []
    changed = set(changed_files)
    for name in sorted(set(old.jobs) | set(new.jobs)):
        before, head = old.jobs.get(name), new.jobs.get(name)
        base_errors = old.invalid.get(head.valid.source.display) if head is not None and before is None else None
        result = diff_outcomes(before, head, out)
        if base_errors:
            result.status, result.base_errors = "changed", [d.render() for d in base_errors]
        if head is not None and root is not None:
            result.reads = [r for r in _relative(referenced(head), root) if r in changed]
            result.code = [f for f in _code_changes(head, root, changed) if f not in result.reads]
            result.edits = _edited_outputs(head, root, out, changed)
            result.edited = [e.path for e in result.edits]
        if result.files or result.base_errors or (result.status != "removed" and result.reasons):
            if result.status == "unchanged":
                result.status = "changed"
            diffs.append(result)
    return diffs


def referenced(outcome: Outcome) -> List[Path]:
    """Files a compiled job names but does not contain: their content reaches the job when it is
    submitted (Azure ML uploads a conda file), so a change to them changes the job."""
    conda = outcome.valid.spec.environment.conda_file
    return [outcome.valid.resolve(conda)] if conda else []


def _code_changes(outcome: Outcome, root: Path, changed: set) -> List[str]:
    """The changed files inside the code folder the job uploads (repository-relative)."""
    code = outcome.valid.spec.code
    if not code:
        return []
    folder = _relative([outcome.valid.resolve(code)], root)
    if not folder:
        return []
    prefix = "" if folder[0] in ("", ".") else folder[0] + "/"
    return sorted(name for name in changed if name.startswith(prefix))


def _edited_outputs(outcome: Outcome, root: Path, out: str, changed: set) -> List[OutputDiff]:
    """Committed outputs of this job that the change touched and that are not the bytes its spec
    compiles to (a hand edit): `check` fails on them, CI would submit them, and a reviewer sees
    each as a hunk (compiled against committed). A link is never followed: it is not what the
    spec compiles to, and it is named, not read."""
    from trainspec.core.secrets import redact_bytes
    from trainspec.review.outputs import unified

    found = []
    for artifact in outcome.artifacts:
        for item in artifact.files:
            output = f"{artifact.target}/{item.path}"
            name = f"{out}/{outcome.valid.name}/{output}"
            if name not in changed:
                continue
            current = _committed(root, name, len(item.data) + EDIT_ROOM)
            if current is None or current == item.data:
                continue  # deleted (check reports it missing), or what the spec compiles to
            if isinstance(current, str):
                text = f"{name}: {current}: not what the spec compiles to (not read)"
            elif len(current) > len(item.data) + EDIT_ROOM:
                text = f"{name}: {len(current) - len(item.data):,}+ bytes longer than what the spec compiles to"
            else:
                text = unified(redact_bytes(item.data), redact_bytes(current),
                               f"compiled from {outcome.valid.source.display}",
                               f"committed {name} (what CI would submit)")
            found.append(OutputDiff(name, output, text))
    return found


EDIT_ROOM = 1 << 20  # bytes a committed output may have beyond the compiled one and still be shown as a hunk


def _committed(root: Path, name: str, limit: int) -> Union[bytes, str, None]:
    """The committed file ``name`` (repository-relative), at most ``limit`` + 1 bytes, read
    without following a link on the way (core/files.read_regular, and its folder must be where it
    says); what it is instead when it is not a regular file ("a symbolic link"); None when it is gone."""
    import stat

    from trainspec.core.files import read_regular

    path = root / name
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    if stat.S_ISLNK(info.st_mode):
        return "a symbolic link"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if Path(os.path.realpath(path.parent)) != Path(os.path.realpath(root)) / Path(name).parent:
        return "inside a linked folder"
    try:
        return read_regular(path, limit)
    except OSError as exc:
        return f"unreadable ({exc.strerror})"


def _relative(paths: Sequence[Path], root: Path) -> List[str]:
    out = []
    for path in paths:
        try:
            out.append(path.relative_to(root.resolve()).as_posix())
        except ValueError:
            pass
    return out


def changed_since(rev: str, root: Path) -> List[str]:
    """Files that differ between ``rev`` and the working tree, and files git does not track yet
    but does not ignore (repository-relative)."""
    tracked = git("diff", "--name-only", "--no-renames", "-z", rev, "--", cwd=root).split("\0")
    untracked = git("ls-files", "--others", "--exclude-standard", "-z", cwd=root).split("\0")
    return sorted({n for n in [*tracked, *untracked] if n})


def root_relative(paths: Sequence[str], root: Path) -> List[str]:
    """Paths the user gave (relative to where they are) as paths relative to the repository."""
    out = []
    for p in paths or ["."]:
        absolute = (Path.cwd() / p).resolve()
        try:
            out.append(absolute.relative_to(root.resolve()).as_posix() or ".")
        except ValueError:
            raise ValueError(f"{p} is outside the repository at {root}") from None
    return out
