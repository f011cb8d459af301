"""The only code that touches the output directory. Writing is atomic per target directory:
the new files are assembled in a sibling temporary directory and swapped in with renames, so
a failure (disk full, read-only, interrupted) leaves the previous outputs as they were."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, List

from trainspec.compile.base import Artifact


def target_dir(out: Path, artifact: Artifact) -> Path:
    return out / artifact.name / artifact.target


def landing(folder: Path) -> Path:
    """Where files written into ``folder`` really land (symlinks resolved; a loop stays as it is
    and fails at the write): what relative references in the outputs are computed from."""
    return Path(os.path.realpath(folder))


def write_all(out: Path, artifacts: Iterable[Artifact]) -> List[Path]:
    """Write every artifact; returns the directories written. Before anything is written, every
    target folder is checked to stay inside ``out`` once symlinks are followed (``out`` itself may
    be a link: that is the user's choice of place); OSError otherwise, naming the link."""
    artifacts = list(artifacts)
    for artifact in artifacts:
        inside(out, target_dir(out, artifact))
    written = []
    for artifact in artifacts:
        written.append(write(target_dir(out, artifact), artifact))
    return written


def inside(out: Path, final: Path) -> None:
    """OSError unless ``final`` (below ``out``), with every symlink in ``OUT/<name>/<target>``
    followed, is still below ``out``: a link there would make compile write elsewhere."""
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
        if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
            raise OSError(errno.EXDEV, f"is a symbolic link to {real}, outside the output folder {out}; "
                          "nothing written (remove the link)", str(step))


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
