"""Folders and files a pull request controls, read without ever following a link.

A code folder, a build context and the output folder are the repository's content: whoever
writes the repository chooses what is in them, symbolic links included (`code/env.txt ->
/proc/self/environ`, `build/x -> /elsewhere`). Everything that lists, reads, hashes, copies or
deletes them goes through here: a folder is walked with ``os.scandir`` (``lstat``, never
``stat``), a link is reported as a link with where it points and never entered, a file is
opened with ``O_NOFOLLOW`` and checked to be a regular file before a byte is read.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from trainspec.core.records import Record


# entries of a folder a job ships (the code, a build context, local data) that validation and
# check's cache walk: a project's folders, never a disk; a spec pointed at `/`, a home folder or
# a dataset mount outside a repository is refused after this many, never walked whole (a hang)
SHIPPED_LIMIT = 100_000


class Listing(Record):
    """A folder's content, by posix path relative to the folder, sorted."""

    __slots__ = ("files", "links", "others", "more")
    __hash__ = None  # type: ignore[assignment]  # filled in as the folder is walked

    def __init__(self, files: Optional[List[str]] = None, links: Optional[List[Tuple[str, str]]] = None,
                 others: Optional[List[Tuple[str, str]]] = None, more: bool = False) -> None:
        self.files = [] if files is None else files  # regular files
        self.links = [] if links is None else links  # (path, what the link says)
        self.others = [] if others is None else others  # (path, what it is): FIFO, socket, device
        self.more = more  # the walk stopped at its limit: there is more than it lists


def kind_of(mode: int) -> str:
    """What a non-regular, non-folder ``st_mode`` is, in words."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def link_target(path) -> str:
    """What the link at ``path`` says (its text, never followed)."""
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def list_folder(folder: Path, skip: Sequence[str] = (".git",), limit: Optional[int] = None) -> Listing:
    """Every entry below ``folder`` (folder names in ``skip`` are not entered), never following a
    link: links and special files are returned apart from the regular files. With ``limit``, the
    walk stops once it has seen more than ``limit`` entries (files, folders, links, others) and
    the listing says so (``more``): a spec that names `/` or a whole disk is never walked whole."""
    found = Listing()
    pending = [""]
    seen = 0
    while pending:
        relative = pending.pop()
        try:
            with os.scandir(os.path.join(folder, relative) if relative else folder) as entries:
                items = sorted(entries, key=lambda e: e.name)
        except OSError:
            continue
        seen += len(items)
        if limit is not None and seen > limit:
            found.more = True
            break
        for entry in items:
            name = f"{relative}/{entry.name}" if relative else entry.name
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISLNK(mode):
                found.links.append((name, link_target(entry.path)))
            elif stat.S_ISDIR(mode):
                if entry.name not in skip:
                    pending.append(name)
            elif stat.S_ISREG(mode):
                found.files.append(name)
            else:
                found.others.append((name, kind_of(mode)))
    found.files.sort()
    found.links.sort()
    found.others.sort()
    return found


def read_regular(path, limit: Optional[int] = None) -> bytes:
    """The bytes of the regular file at ``path`` (at most ``limit`` + 1 with a limit), opened
    without following a link in its last part and without blocking; OSError for anything else
    (ELOOP for a link, EINVAL for a FIFO, socket or device)."""
    fd, status = _open_regular(path)
    try:
        return read_open(fd, status.st_size, limit)
    finally:
        os.close(fd)


def hash_regular(path) -> Tuple[os.stat_result, bytes]:
    """(the stat, the sha256 digest) of the regular file at ``path``, opened as read_regular opens
    it and read a megabyte at a time: a code folder's large file costs no more memory than a small one."""
    import hashlib

    fd, status = _open_regular(path)
    try:
        digest = hashlib.sha256()
        for part in iter(lambda: os.read(fd, 1 << 20), b""):
            digest.update(part)
        return status, digest.digest()
    finally:
        os.close(fd)


def _open_regular(path) -> Tuple[int, os.stat_result]:
    """An open descriptor of the regular file at ``path`` and its stat: not through a link in its
    last part, never blocking; OSError for anything else."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    if not hasattr(os, "O_NOFOLLOW") and os.path.islink(path):
        raise OSError(errno.ELOOP, "is a symbolic link", str(path))
    fd = os.open(path, flags)
    try:
        status = os.fstat(fd)
        mode = status.st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, f"is {kind_of(mode) if not stat.S_ISDIR(mode) else 'a folder'}", str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd, status


def read_below(root, relative: str, offset: int, limit: int) -> Optional[bytes]:
    """At most ``limit`` bytes from ``offset`` of the regular file at ``relative`` (a posix path
    of plain parts) below the folder ``root``, opened a part at a time with ``O_NOFOLLOW``: a
    folder on the way or the file itself that is a symbolic link (a job that replaced its log with
    a link to /proc/self/environ, or its log folder with one to /) is ELOOP, never followed; a
    FIFO, socket or device is EINVAL. None when a part is not there (yet). ``root`` is the
    caller's: the folder it trusts (where the job was submitted from), followed as it is."""
    parts = relative.split("/")
    if relative.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise OSError(errno.EINVAL, "is not a path below the folder", relative)
    flags = os.O_RDONLY | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0) | os.O_NOFOLLOW
    try:
        folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, flags | os.O_DIRECTORY, dir_fd=folder)
            except NotADirectoryError:  # what Linux says for a link with O_DIRECTORY and O_NOFOLLOW
                if stat.S_ISLNK(os.lstat(part, dir_fd=folder).st_mode):
                    raise OSError(errno.ELOOP, "is a symbolic link", part) from None
                raise
            os.close(folder)
            folder = inner
        fd = os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=folder)
    except FileNotFoundError:
        return None
    finally:
        os.close(folder)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, f"is {kind_of(mode) if not stat.S_ISDIR(mode) else 'a folder'}", relative)
        os.lseek(fd, offset, os.SEEK_SET)
        parts_read: List[bytes] = []
        got = 0
        while got < limit:
            part = os.read(fd, limit - got)
            if not part:
                break
            parts_read.append(part)
            got += len(part)
        return b"".join(parts_read)
    finally:
        os.close(fd)


def read_open(fd: int, size: int, limit: Optional[int] = None) -> bytes:
    """The bytes of the open regular file ``fd`` whose stat said ``size``, at most ``limit`` + 1
    with a limit. A read allocates what it is asked for, so it asks for the size (and one byte
    more, to see the end), not the limit: a 256 MiB limit would cost a 256 MiB buffer per file.
    A file that grew since its stat is read on, up to the limit. ``os.read`` rather than a
    buffered file object: a spec is read in one call, and the object cost twice that."""
    parts: List[bytes] = []
    got = 0
    while limit is None or got <= limit:
        want = size - got + 1 if got <= size else 64 * 1024  # past its stat's size: it grew
        part = os.read(fd, want if limit is None else min(want, limit + 1 - got))
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def inside(real: Path, root: Path) -> bool:
    """``real`` is ``root`` or below it (both already resolved, so compared as text: a part at a
    time, `/repo-other` is not below `/repo`)."""
    real, root = os.fspath(real), os.fspath(root)
    return real == root or real.startswith(os.path.join(root, ""))


def in_repository(real: Path, root: Path) -> bool:
    """``real`` (resolved) is inside the repository ``root`` and not in its ``.git`` folder (the
    credentials actions/checkout leaves in .git/config, the hooks git runs)."""
    return inside(real, root) and not inside(real, os.path.join(root, ".git"))
