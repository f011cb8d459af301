"""`trainspec init`: a starting repository of training specs, written from the files of
``trainspec/scaffold/files/`` (package data): a spec, the base it extends, a team catalog, the
training script the spec's ``code`` names, the JSON Schemas its editor header names, the CI
workflow (the same bytes as ``examples/ci/github-actions.yml``) and the pre-commit hooks.

``render`` is pure (name and targets in, relative path -> bytes out); ``write`` is the only code
that touches the folder: it never replaces a file unless told to, and writes all or nothing.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Dict, List, Sequence

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
    from trainspec.spec.model import Spec, base_json_schema

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
    return dict(sorted(out.items()))


def in_the_way(root: Path, paths: Sequence[str]) -> List[str]:
    """What stops writing ``paths`` under ``root`` without replacing anything: each path that
    exists (a link too), and each folder on the way that is a link or not a folder."""
    found = []
    for path in paths:
        parts = path.split("/")
        for depth in range(1, len(parts)):
            folder = root.joinpath(*parts[:depth])
            if folder.is_symlink() or (os.path.lexists(folder) and not folder.is_dir()):
                found.append("/".join(parts[:depth]) + ("/ is a link" if folder.is_symlink() else " is not a folder"))
                break
        else:
            if os.path.lexists(root / path):
                found.append(path)
    return sorted(set(found))


def write(root: Path, files: Dict[str, bytes], force: bool = False) -> List[str]:
    """Write ``files`` under ``root``, each through a temporary file in its own folder: a new
    file appears whole or not at all, and none replaces one that exists (unless ``force``, then
    in one rename). On a failure the files written so far are removed again, and the error
    raised. Returns the paths written."""
    written: List[Path] = []
    try:
        for path, data in files.items():
            final = root / path
            final.parent.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.chmod(temporary, 0o644)
                if force:
                    os.replace(temporary, final)
                else:
                    _link(temporary, final, data)
            finally:
                if os.path.lexists(temporary):
                    os.unlink(temporary)
            written.append(final)
    except BaseException:
        if not force:
            for final in written:
                final.unlink()
        raise
    return list(files)


def _link(temporary: str, final: Path, data: bytes) -> None:
    """The whole file at ``final``, which must not exist (it appeared meanwhile: FileExistsError,
    nothing replaced). A file system without hard links: created exclusively, then written."""
    try:
        os.link(temporary, final)
    except FileExistsError:
        raise
    except OSError:
        fd = os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
