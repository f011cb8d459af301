"""The targets, by name: the one list every other list is made from or checked against.

A target is a folder, ``trainspec/targets/<name>/`` (docs/architecture.md, "A target is a
folder"): ``settings.py`` (the spec's words for it: ``targets.<name>``), ``lower.py`` (the spec
to its job files: the module declares the names of compiler/base.py's ``Target``), and optionally
``local.py`` (``run --local`` plays its jobs), ``submit.py`` (its ``Scheduler``) and
``importer.py`` (``trainspec import`` reads its job files).

The registry sits above the targets: importing it plugs their names and settings into the schema
(``schema/vocabulary.py``), which never imports a target. Each target's module is loaded by name,
only when needed -- its settings by the schema through the loader plugged in here, its lowering by
the pipeline (``registry/build.py``), its play and scheduler by the commands -- so compiling for
one target never pays for the others. tests/test_layers.py holds every import to the layers of
docs/architecture.md.
"""

import importlib
from types import ModuleType

from trainspec.schema import vocabulary

TARGETS = {  # name (in -t and under targets:) -> the platform's name, as people write it
    "azureml": "Azure ML",
    "hpcpack": "HPC Pack",
    "ray": "Ray",
    "slurm": "Slurm",
    "kubernetes": "Kubernetes",
}
DEFAULT_TARGET = "azureml"  # what `compile` lowers to when neither -t nor the spec's targets say
IMPORTER = "azureml"  # `trainspec import`: whose job files it reads (targets/<name>/importer.py)


def settings(name: str) -> ModuleType:
    """targets/<name>/settings.py (what it holds: schema/vocabulary.py, ``settings``)."""
    return importlib.import_module(f"trainspec.targets.{name}.settings")


def display_names(names=None) -> str:
    """'Azure ML, HPC Pack, Ray and Slurm': the platforms' names as a sentence lists them."""
    shown = [TARGETS[name] for name in (TARGETS if names is None else names)]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


vocabulary.plug(TARGETS, DEFAULT_TARGET, settings)
