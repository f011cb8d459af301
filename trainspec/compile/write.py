"""The only code that touches the output directory. Writing is atomic per target directory:
the new files are assembled in a sibling temporary directory and swapped in with renames, so
a failure (disk full, read-only, interrupted) leaves the previous outputs as they were.

Made of ``os`` alone: ``tempfile`` and ``shutil`` (with ``random``, ``bz2``, ``lzma``) were ~5 ms of
every compile's start-up (docs/speed.md)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Iterable, List, Optional, Tuple

from trainspec.compile.base import Artifact


def target_dir(out: Path, artifact: Artifact) -> Path:
    return out / artifact.name / artifact.target


def landing(folder: Path) -> Path:
    """Where files written into ``folder`` really land (symlinks resolved; a loop stays as it is
    and fails at the write): what relative references in the outputs are computed from (``-o``
    may lead through a link outside a repository: out_problem)."""
    return Path(os.path.realpath(folder))


def write_all(out: Path, artifacts: Iterable[Artifact]) -> List[Path]:
    """Write every artifact; returns the directories written. Before anything is written, ``out``
    is checked to stay in its repository (out_problem) and every target folder to have no link in
    ``OUT/<name>/<target>`` (inside); OSError otherwise, naming the link."""
    artifacts = list(artifacts)
    problem = out_problem(out)
    if problem is not None:
        raise problem
    for artifact in artifacts:
        inside(out, target_dir(out, artifact))
    written = []
    for artifact in artifacts:
        written.append(write(target_dir(out, artifact), artifact))
    return written


def out_problem(out: Path) -> Optional[OSError]:
    """Why trainspec will not use ``out``: it is a path inside a repository (the nearest folder
    above it with .git) that, through a link the repository holds (``build -> /home/runner/.ssh``),
    leads out of it. A folder outside any repository, or one the user names by its real place, is
    the user's choice (``-o /scratch/out``, or a link made outside a repository)."""
    from trainspec.core import files
    from trainspec.spec.loader import ReadProblem, real_path, repository_root

    lexical = Path(os.path.abspath(out))
    try:
        root = repository_root(lexical)
        real = real_path(lexical)
    except ReadProblem:
        return None  # a loop or a name too long: the write itself says so
    if root is None or files.in_repository(real, root):
        return None
    step = next((p for p in [lexical, *lexical.parents] if os.path.islink(p)), None)
    how = f"leads through the symbolic link {step} to {real}" if step is not None else f"is {real}"
    where = f"inside {root / '.git'}" if files.inside(real, root) else f"outside the repository {root}"
    return OSError(errno.EXDEV, f"{how}, {where}: "
                   f"trainspec never writes, reads or deletes there; nothing written (remove the link, or name the "
                   f"folder you mean with -o {real})", str(out))


def links_in(out: Path) -> List[Tuple[Path, str]]:
    """The symbolic links at ``OUT/<name>`` and ``OUT/<name>/<target>`` (what each says), never
    followed: the places compile writes, check reads and prune deletes."""
    from trainspec.core.files import link_target

    found: List[Tuple[Path, str]] = []
    for entry in _entries(out):
        if entry.is_symlink():
            found.append((entry, link_target(entry)))
        elif entry.is_dir():
            found += [(child, link_target(child)) for child in _entries(entry) if child.is_symlink()]
    return found


def _entries(folder: Path) -> List[Path]:
    try:
        return sorted(folder.iterdir()) if folder.is_dir() and not folder.is_symlink() else []
    except OSError:
        return []


def inside(out: Path, final: Path) -> None:
    """OSError when a part of ``OUT/<name>/<target>`` (below ``out``) is a symbolic link: whether it
    leads outside ``out`` or not, compile would write where the link says, and a later prune or
    check would follow it."""
    root = os.path.realpath(out)
    relative = final.relative_to(out)
    step = Path(out)
    for part in relative.parts:
        step = step / part
        if not os.path.islink(step):
            continue
        try:
            real = os.path.realpath(step, strict=True)
        except FileNotFoundError:  # a dangling link: where it points to decides
            real = os.path.realpath(step)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise OSError(errno.ELOOP, "is a symbolic link loop; nothing written (remove the link)", str(step)) \
                from None
        where = "inside" if real == root or real.startswith(root.rstrip(os.sep) + os.sep) else "outside"
        raise OSError(errno.EXDEV, f"is a symbolic link to {real}, {where} the output folder {out}: trainspec "
                      "never writes through a link there; nothing written (remove the link)", str(step))


def write(final: Path, artifact: Artifact) -> Path:
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = _new_folder(final, ".new")
    try:
        for item in artifact.files:
            path = staging / item.path
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(item.data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(path, 0o755 if item.executable else 0o644)
        os.chmod(staging, 0o755)
        _swap(staging, final)
    except BaseException:
        _remove_tree(staging)
        raise
    return final


def _swap(staging: Path, final: Path) -> None:
    if not final.exists():
        os.rename(staging, final)
        return
    old = _new_folder(final, ".old")
    os.rmdir(old)
    os.rename(final, old)
    try:
        os.rename(staging, final)
    except BaseException:
        os.rename(old, final)
        raise
    _remove_tree(old)


def _new_folder(final: Path, suffix: str) -> Path:
    """A new, empty folder beside ``final`` (``.<name>.<random><suffix>``, mode 0700) that no other
    writer names, as tempfile.mkdtemp makes it."""
    for _ in range(100):
        folder = final.parent / f".{final.name}.{os.urandom(6).hex()}{suffix}"
        try:
            os.mkdir(folder, 0o700)
            return folder
        except FileExistsError:
            continue  # 48 random bits taken already: another name
    raise FileExistsError(errno.EEXIST, "no free name for a temporary folder", str(final.parent))


def _remove_tree(folder: Path) -> None:
    """Delete ``folder`` and what it holds, ignoring errors, as shutil.rmtree(ignore_errors=True)
    does: walked through file descriptors, never through a symbolic link (a link is deleted, not
    what it leads to)."""
    for _, folders, files, parent in os.fwalk(folder, topdown=False):
        for name in files:
            _ignoring_errors(os.unlink, name, parent)
        for name in folders:  # a link to a folder is listed here too, and not walked into
            if not _ignoring_errors(os.rmdir, name, parent):
                _ignoring_errors(os.unlink, name, parent)
    _ignoring_errors(os.rmdir, folder, None)


def _ignoring_errors(remove, name, parent: Optional[int]) -> bool:
    try:
        remove(name, dir_fd=parent)
        return True
    except OSError:
        return False
