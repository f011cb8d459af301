"""`trainspec init`: a starting repository of training specs, written from the files of
``trainspec/scaffold/files/`` (package data): a spec, the base it extends, a team catalog, the
training script the spec's ``code`` names, the JSON Schemas its editor header names, the CI
workflow (the same bytes as ``examples/ci/github-actions.yml``), the pre-commit hooks and a
``.gitignore`` for what submitting leaves in the repository (``ignored_patterns``).

``render`` is pure (name and targets in, relative path -> bytes out); ``amend`` reads the one file
init adds to rather than replaces (a ``.gitignore`` that is there); ``write`` is the only code
that touches the folder: it never replaces a file unless told to, and writes all or nothing.
"""

from __future__ import annotations

import errno
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from trainspec.core.fields import NAME_PATTERN

FILES = Path(__file__).resolve().parent / "files"
NAME = "__NAME__"
DEFAULT_NAME = "train"

# where each packaged file goes in the new repository (NAME: the job's name)
LAYOUT = {
    "spec.yaml": f"specs/{NAME}.yaml",
    "specs-README.md": "specs/README.md",
    "base.yaml": "bases/gpu.yaml",
    "trainspec-skus.yaml": "trainspec-skus.yaml",
    "train.py": f"code/{NAME}/train.py",
    "github-actions.yml": ".github/workflows/training-specs.yml",
    "pre-commit-config.yaml": ".pre-commit-config.yaml",
}
SCHEMAS = ("schema/trainspec.schema.json", "schema/trainspec.base.schema.json")
GITIGNORE = ".gitignore"
# What a submit leaves where it runs, never to be committed (init's next step is `git add -A`):
# trainspec's own folder (the jobs submit stages in .trainspec/jobs/, the folders a job that
# reads the submit folder starts in, .trainspec/runs/<job id>/), then what each target says its
# jobs write there (its LEFT_BEHIND: a batch job's <job name>-<job id>.out). Unanchored: submit
# may run in a folder below the top.
STAGING = ".trainspec/"
IGNORED_HEADER = "# trainspec: what submit stages, and the files its jobs write where they were submitted"


def ignored_patterns() -> List[str]:
    """The lines of ``.gitignore`` init writes: STAGING, then every target's LEFT_BEHIND (all of
    them, whatever -t says: a target added to the spec later must not need init again)."""
    from trainspec.registry import TARGETS
    from trainspec.schema.vocabulary import settings

    found = [STAGING]
    for name in TARGETS:
        found += [p for p in getattr(settings(name), "LEFT_BEHIND", ()) if p not in found]
    return found


def default_name(folder: Path) -> str:
    """The job's name from the folder's own (``ML Infra`` -> ``ml-infra``), else ``train``."""
    name = re.sub(r"[^a-z0-9_-]+", "-", folder.resolve().name.lower()).strip("-_")[:63]
    return name if re.match(NAME_PATTERN, name) else DEFAULT_NAME


def name_problem(name: str) -> str:
    if re.match(NAME_PATTERN, name):
        return ""
    return (f"{json.dumps(name)} is not a job name: lowercase letters, digits, '-' and '_', starting with a letter "
            "or a digit, at most 63 characters")


def render(name: str, targets: Sequence[str]) -> Dict[str, bytes]:
    """Every file of the new repository: its path (relative, with '/') -> its bytes. ``name``
    must pass ``name_problem``; ``targets`` are registered names, each with its settings in
    ``files/targets/<name>.yaml``."""
    from trainspec.schema.model import Spec, base_json_schema

    assert not name_problem(name), name
    settings = []
    for target in targets:
        lines = (FILES / "targets" / f"{target}.yaml").read_text().splitlines()
        settings.append(f"  {target}:\n" + "".join(f"    {line}\n" for line in lines))
    out = {}
    for source, destination in LAYOUT.items():
        text = (FILES / source).read_text().replace(NAME, name)
        if source == "base.yaml":
            text = text.replace("__TARGETS__\n", "".join(settings))
        out[destination.replace(NAME, name)] = text.encode()
    for path, schema in zip(SCHEMAS, (Spec.model_json_schema(), base_json_schema())):
        out[path] = (json.dumps(schema, indent=2, sort_keys=True) + "\n").encode()
    out[GITIGNORE] = ignored(b"")
    return dict(sorted(out.items()))


def ignored(existing: bytes) -> bytes:
    """``existing`` (a ``.gitignore``'s bytes) with each line of ``ignored_patterns`` it lacks added at its
    end, under ``IGNORED_HEADER``; nothing of it changed. Lacking all: ``existing`` itself."""
    have = {line.strip() for line in existing.decode("utf-8", "replace").splitlines()}
    missing = [line for line in ignored_patterns() if line not in have]
    if not missing:
        return existing
    gap = b"" if not existing else b"\n" if existing.endswith(b"\n") else b"\n\n"
    return existing + gap + "".join(f"{line}\n" for line in (IGNORED_HEADER, *missing)).encode()


def amend(root: Path, files: Dict[str, bytes]) -> Tuple[Dict[str, bytes], List[str]]:
    """``files`` with a ``.gitignore`` that is there (a file, not a link) added to rather than
    replaced: its lines kept as they are and the missing ones of ``ignored_patterns`` appended, or left out
    of ``files`` when it has them all. Returns the files and the paths that replace what is there
    by design (``write``'s ``amended``): a user's ignore rules are theirs, with or without --force.
    A link there is like any file in the way (never read through)."""
    path = root / GITIGNORE
    if GITIGNORE not in files or path.is_symlink() or not path.is_file():
        return files, []
    existing = path.read_bytes()
    files = dict(files)
    files[GITIGNORE] = ignored(existing)
    if files[GITIGNORE] == existing:
        del files[GITIGNORE]
        return files, []
    return files, [GITIGNORE]


def in_the_way(root: Path, paths: Sequence[str]) -> List[str]:
    """What stops writing ``paths`` under ``root`` without replacing anything: each path that
    exists (a link too), and each folder on the way that is a link or not a folder."""
    found = unwritable(root, paths)
    found += [path for path in paths if os.path.lexists(root / path) and not _blocked(root, path)]
    return sorted(set(found))


def unwritable(root: Path, paths: Sequence[str]) -> List[str]:
    """What stops writing ``paths`` under ``root`` even with --force: a folder on the way that is
    a link (writing under it would write wherever it leads) or not a folder, and a path that is a
    folder. A file or a link at a path itself is replaced by a rename, which never follows it."""
    return sorted({problem for path in paths for problem in [_blocked(root, path)] if problem})


def _blocked(root: Path, path: str) -> str:
    parts = path.split("/")
    for depth in range(1, len(parts)):
        folder = root.joinpath(*parts[:depth])
        if folder.is_symlink() or (os.path.lexists(folder) and not folder.is_dir()):
            return "/".join(parts[:depth]) + ("/ is a link" if folder.is_symlink() else " is not a folder")
    final = root / path
    return f"{path} is a folder" if final.is_dir() and not final.is_symlink() else ""


def write(root: Path, files: Dict[str, bytes], force: bool = False, amended: Sequence[str] = ()) -> List[str]:
    """Write ``files`` under ``root``, all or nothing. Each is written whole to a temporary file
    in its own folder first; only when every one is there do they take their places, a rename
    each: none replaces a file that exists (unless ``force``, or it is one of ``amended``: a file
    whose bytes were read and added to, see ``amend``; a replaced file or link is kept
    aside until the last rename, and put back on a failure), and none is written under a folder
    that is a link (``unwritable``: refused before anything is written). On a failure everything
    is as it was (the folders made for them removed again), and the error raised. Returns the
    paths written."""
    blocked = unwritable(root, list(files))
    if blocked:
        raise OSError(errno.EEXIST, "cannot be written without following a link: " + ", ".join(blocked),
                      str(root / blocked[0].split(" ")[0]))
    made: List[Path] = []  # folders made for the files, parents first
    staged: List[Tuple[str, Path, bytes]] = []  # (temporary, final, bytes)
    path_of = {root / path: path for path in files}
    placed: List[List[Any]] = []  # [final, what it replaced (kept aside) or None, in place yet]
    try:
        for path, data in files.items():
            final = root / path
            missing = [folder for folder in (final.parent, *final.parent.parents) if not os.path.lexists(folder)]
            for folder in reversed(missing):
                folder.mkdir()
                made.append(folder)
            fd, temporary = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp")
            staged.append((temporary, final, data))
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(temporary, 0o644)
        for temporary, final, data in staged:
            step = [final, None, False]
            placed.append(step)
            if force or path_of[final] in amended:
                if os.path.lexists(final):
                    step[1] = final.with_name(f".{final.name}.{os.urandom(6).hex()}.old")
                    os.rename(final, step[1])  # the file or link itself, never what a link leads to
                os.rename(temporary, final)
            else:
                _link(temporary, final, data)
            step[2] = True
    except BaseException:
        for final, aside, done in reversed(placed):
            if done:
                os.unlink(final)
            if aside is not None:
                os.rename(aside, final)
        _remove([temporary for temporary, _, _ in staged])
        for folder in reversed(made):
            try:
                os.rmdir(folder)
            except OSError:
                pass
        raise
    _remove([aside for _, aside, _ in placed if aside is not None] + [temporary for temporary, _, _ in staged])
    return list(files)


def _remove(paths: Sequence[Any]) -> None:
    """Unlink each that is there (a temporary name left by a hard link, a replaced file kept aside)."""
    for path in paths:
        if os.path.lexists(path):
            os.unlink(path)


def _link(temporary: str, final: Path, data: bytes) -> None:
    """The whole file at ``final``, which must not exist (it appeared meanwhile: FileExistsError,
    nothing replaced). A file system without hard links: created exclusively, then written."""
    try:
        os.link(temporary, final)
    except FileExistsError:
        raise
    except OSError:
        fd = os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        except BaseException:
            os.unlink(final)  # ours, made just now: no half file stays
            raise
