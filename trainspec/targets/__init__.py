"""The targets, by name: the one list every other list is made from or checked against.

A target is a folder, ``trainspec/targets/<name>/`` (docs/architecture.md, "A target is a
folder"): ``settings.py`` (the spec's words for it: ``targets.<name>``), ``lower.py`` (the spec
to its job files: the module declares the names of compile/base.py's ``Target``), and optionally
``local.py`` (``run --local`` plays its jobs) and ``importer.py`` (``trainspec import`` reads
its job files).

This module imports nothing: the spec layer loads a target's settings through
targets/vocabulary.py, the pipeline its lowering through build.py, ``run --local`` its play
through local/command.py -- each only when needed, so compiling for one target never pays for
the others. tests/test_layers.py holds every import to the layers of docs/architecture.md.
"""

TARGETS = {  # name (in -t and under targets:) -> the platform's name, as people write it
    "azureml": "Azure ML",
    "hpcpack": "HPC Pack",
    "ray": "Ray",
    "slurm": "Slurm",
    "kubernetes": "Kubernetes",
}
DEFAULT_TARGET = "azureml"  # what `compile` lowers to when neither -t nor the spec's targets say
IMPORTER = "azureml"  # `trainspec import`: whose job files it reads (targets/<name>/importer.py)


def display_names(names=None) -> str:
    """'Azure ML, HPC Pack, Ray and Slurm': the platforms' names as a sentence lists them."""
    shown = [TARGETS[name] for name in (TARGETS if names is None else names)]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]
