"""The only code that touches the output directory. Writing is atomic per target directory:
the new files are assembled in a sibling temporary directory and swapped in with renames, so
a failure (disk full, read-only, interrupted) leaves the previous outputs as they were."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, List

from .base import Artifact


def target_dir(out: Path, artifact: Artifact) -> Path:
    return out / artifact.name / artifact.target


def write_all(out: Path, artifacts: Iterable[Artifact]) -> List[Path]:
    """Write every artifact; returns the directories written."""
    written = []
    for artifact in artifacts:
        written.append(write(target_dir(out, artifact), artifact))
    return written


def write(final: Path, artifact: Artifact) -> Path:
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".new", dir=final.parent))
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
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def _swap(staging: Path, final: Path) -> None:
    if not final.exists():
        os.rename(staging, final)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".old", dir=final.parent))
    os.rmdir(old)
    os.rename(final, old)
    try:
        os.rename(staging, final)
    except BaseException:
        os.rename(old, final)
        raise
    shutil.rmtree(old, ignore_errors=True)
