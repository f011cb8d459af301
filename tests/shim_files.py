"""The shim as a job ships it, for tests: joined for one platform (``runtime.shim_source``), so a
test of a platform's detectors runs them alone, with torch's own and no other platform's."""

import functools
import sys
import types
from pathlib import Path

from trainspec.runtime import shim_source


def ship(platform: str, folder: Path) -> Path:
    """``folder``/trainspec_shim.py: the shim a ``platform`` job ships, as it ships it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "trainspec_shim.py"
    path.write_text(shim_source(platform))
    return path


@functools.lru_cache(maxsize=None)
def load(platform: str) -> types.ModuleType:
    """The shim a ``platform`` job ships, imported as a module of its own (its own World,
    ShimError, DETECTORS...); ``__file__`` is the package's runtime folder, as in the package."""
    from trainspec.runtime import RUNTIME_DIR

    name = "trainspec_shim_%s" % platform
    module = types.ModuleType(name)
    module.__file__ = str(RUNTIME_DIR / ("%s_detector.py" % platform))
    sys.modules[name] = module  # namedtuple and dataclass-free records look their module up here
    exec(compile(shim_source(platform), "trainspec_shim.py (%s)" % platform, "exec"), module.__dict__)
    return module
