"""The only code that touches the output directory. Writing is atomic per target directory:
the new files are assembled in a sibling temporary directory and swapped in with renames, so
a failure (disk full, read-only, interrupted) leaves the previous outputs as they were.

Made of ``os`` alone: ``tempfile`` and ``shutil`` (with ``random``, ``bz2``, ``lzma``) were ~5 ms of
every compile's start-up (docs/speed.md)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Iterable, List, Optional, Tuple

from trainspec.compiler.base import Artifact


def target_dir(out: Path, artifact: Artifact) -> Path:
    return out / artifact.name / artifact.target


def landing(folder: Path) -> Path:
    """Where files written into ``folder`` really land (symlinks resolved; a loop stays as it is
    and fails at the write): what relative references in the outputs are computed from (``-o``
    may lead through a link outside a repository: out_problem)."""
    return Path(os.path.realpath(folder))


def write_all(out: Path, artifacts: Iterable[Artifact]) -> List[Tuple[Path, bool]]:
    """Write every artifact; returns each target folder and whether it was written (False: it held
    the artifact's files already, and was left as it was). Before anything is written, ``out``
    is checked to stay in its repository (out_problem) and every target folder to have no link in
    ``OUT/<name>/<target>`` (inside); OSError otherwise, naming the link."""
    artifacts = list(artifacts)
    problem = out_problem(out)
    if problem is not None:
        raise problem
    for artifact in artifacts:
        inside(out, target_dir(out, artifact))
    return write_folders([(target_dir(out, artifact), artifact) for artifact in artifacts])


def out_problem(out: Path) -> Optional[OSError]:
    """Why trainspec will not use ``out``: it is a path inside a repository (the nearest folder
    above it with .git) that, through a link the repository holds (``build -> /home/runner/.ssh``),
    leads out of it. A folder outside any repository, or one the user names by its real place, is
    the user's choice (``-o /scratch/out``, or a link made outside a repository)."""
    from trainspec.core import files
    from trainspec.schema.loader import ReadProblem, real_path, repository_root

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
    return write_folders([(final, artifact)])[0][0]


def write_folders(folders: List[Tuple[Path, Artifact]]) -> List[Tuple[Path, bool]]:
    """Each artifact's files into its folder, in three steps: every file is written into a staging
    folder beside its final one; all of them are made durable together (``_fsync_all``); then each
    folder is swapped in whole. A folder that holds exactly the artifact's files already (``_holds``)
    is left as it is: nothing written, its files' times unchanged. A failure before the swaps
    leaves every previous folder as it was and no staging folder behind; returns each folder and
    whether it was written."""
    staged: List[Tuple[Path, Path]] = []  # (staging, final)
    kept = set()
    try:
        written: List[Path] = []
        for final, artifact in folders:
            if _holds(final, artifact):
                kept.add(final)
                continue
            final.parent.mkdir(parents=True, exist_ok=True)
            staging = _new_folder(final, ".new")
            staged.append((staging, final))
            written += _stage(staging, artifact)
        _fsync_all(written)
        for staging, _ in staged:
            os.chmod(staging, 0o755)
    except BaseException:
        for staging, _ in staged:
            _remove_tree(staging)
        raise
    for done, (staging, final) in enumerate(staged):
        try:
            _swap(staging, final)
        except BaseException:
            for left, _ in staged[done:]:
                _remove_tree(left)
            raise
    return [(final, final not in kept) for final, _ in folders]


def _holds(final: Path, artifact: Artifact) -> bool:
    """Whether ``final`` is a real folder (mode 0755) holding the artifact's files and no other:
    each a regular file with its bytes and mode; no link, no other file, no special file. Nothing
    is written, so nothing is fsynced: what compile wrote there was durable before it was swapped
    in, and files another tool wrote (a git checkout) are that tool's to make durable (an fsync of
    a clean file still flushes the disk's cache on ext4: 13 of them took ~1 ms, at times 30 ms).
    Any doubt (a link, a file it cannot read) is False: the folder is written, and the write says
    what went wrong."""
    from trainspec.core.files import list_folder

    try:
        status = os.lstat(final)
    except OSError:
        return False
    if not stat.S_ISDIR(status.st_mode) or stat.S_IMODE(status.st_mode) != 0o755:
        return False
    listing = list_folder(final, skip=())
    if listing.links or listing.others or listing.files != sorted(item.path for item in artifact.files):
        return False
    try:
        return all(_same(final / item.path, item.data, 0o755 if item.executable else 0o644)
                   for item in artifact.files)
    except OSError:
        return False


def _same(path: Path, data: bytes, mode: int) -> bool:
    """Whether ``path`` is a regular file (not through a link, never a FIFO) of ``mode`` holding
    ``data``; OSError when it cannot be opened."""
    fd = os.open(path, _READ)
    try:
        held = os.fstat(fd)
        return (stat.S_ISREG(held.st_mode) and stat.S_IMODE(held.st_mode) == mode and held.st_size == len(data)
                and os.read(fd, len(data) + 1) == data)
    finally:
        os.close(fd)


_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)


def _stage(staging: Path, artifact: Artifact) -> List[Path]:
    """Write the artifact's files into ``staging`` (not yet durable); returns their paths."""
    paths = []
    for item in artifact.files:
        path = staging / item.path
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(item.data)
        os.chmod(path, 0o755 if item.executable else 0o644)
        paths.append(path)
    return paths


def _fsync_all(paths: List[Path]) -> None:
    """fsync every file before any folder is swapped in (docs/reliability.md). Each file's
    write-back is started first, all of them at once (``posix_fadvise(DONTNEED)`` on Linux starts
    it and waits for nothing), so the file system allocates and commits them together; the fsyncs
    that follow, in order, then mostly find their file committed already. 13 files of a 3-target
    compile on the development machine's ext4: ~1.6 ms, against ~9 ms fsynced from 13 threads at
    once and 3 - 30 ms one after another (docs/speed.md). A failure is raised here: that of the
    first file in ``paths`` whose fsync failed (the advice is only advice: its failure is none)."""
    fds: List[int] = []
    try:
        for path in paths:
            fds.append(os.open(path, os.O_WRONLY))
        advise = getattr(os, "posix_fadvise", None)
        if advise is not None:
            for fd in fds:
                try:
                    advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                except OSError:
                    pass  # write-back starts at the fsync below instead
        for fd in fds:
            os.fsync(fd)
    finally:
        for fd in fds:
            os.close(fd)


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
