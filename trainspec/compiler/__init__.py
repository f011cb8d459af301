"""Targets, registered by name. Each is one module; none imports another.

A target module exposes ``NAME``,
``check(valid) -> [Diagnostic]`` and ``lower(valid, out_dir) -> Artifact``. Modules are
imported on first use, so compiling for one target never pays for the others.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Dict

TARGETS: Dict[str, str] = {
    "azureml": "trainspec.compiler.azureml",
    "hpcpack": "trainspec.compiler.hpcpack",
    "ray": "trainspec.compiler.ray",
}


def target(name: str) -> ModuleType:
    return importlib.import_module(TARGETS[name])
