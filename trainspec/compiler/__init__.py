"""The targets, registered by name: one module each, and everything else asks it.

A target module (``trainspec/compiler/<name>.py``) is the one place that knows its platform on
the compiler side. It never imports another target; shared machinery lives in base.py (the
Artifact, the shim, who starts the processes) and emit.py (YAML, shell). It exposes:

=========================================  ====================================================
``NAME``                                   its name in ``-t`` and under ``targets:``
``LAUNCHERS``                              framework -> distribution.launcher when the spec
                                           gives none
``SETTINGS_DESCRIPTION``,                  how ``targets.<name>`` is described and exemplified
``SETTINGS_EXAMPLE``                       in the JSON Schema
``settings_model()``                       the pydantic model of ``targets.<name>`` (built on
                                           demand: the JSON Schema and the structure snapshot)
``HINTS``, ``PATTERN_WORDS`` (optional)    help for a bad value below ``targets.<name>``
``settings_errors(spec)``                  rules for its settings that the model cannot state;
                                           run by validation whenever the spec configures it
``CANNOT_RUN``                             what the platform cannot run, as data: catalogued
                                           features (capabilities.py) -> ``unsupported()``
                                           or ``problem()``; docs/capabilities.md shows them
``cannot_express(valid)``                  what the platform cannot run as the spec says, as
                                           diagnostics: ``capabilities.check(CANNOT_RUN)``,
                                           then what depends on settings and the command
``lower(valid, out_dir) -> Artifact``      the files, pure: no I/O, no clock, no randomness
``refs_for(valid)``                        how ``{{ inputs.x }}`` / ``{{ outputs.x }}`` render
                                           in its job (``base.spec_env``: the env ``plan`` shows)
``PLATFORM_VARIABLES``                     the variables only its platform sets in a process
                                           (``SLURM_*``: a prefix), each with the portable
                                           name to read instead, or None; a command that
                                           reads one is an error on the other targets
``plan_port(valid)``                       the rendezvous port as ``plan`` shows it
``plan_settings(valid)``                   its own settings a reviewer should see in ``plan``
``local_settings(settings, workdir)``      ``run --local``: the settings rewritten for this
                                           machine (a mapping in, a mapping out)
``play_local(job_dir, run)``               ``run --local``: play the compiled job the way the
                                           platform would (trainspec/local.py's LocalRun gives
                                           the machinery); or ``LOCAL_REFUSAL``, one line that
                                           says why it cannot be played here
=========================================  ====================================================

Modules are imported on first use, so compiling for one target never pays for the others.
Adding a target: its module, a line here, its detector in runtime/shim.py (the platform's
variables), its tests. ``tests/test_layout.py`` holds the rest of the code to that.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Dict

TARGETS: Dict[str, str] = {
    "azureml": "trainspec.compiler.azureml",
    "hpcpack": "trainspec.compiler.hpcpack",
    "ray": "trainspec.compiler.ray",
    "slurm": "trainspec.compiler.slurm",
}
DEFAULT_TARGET = "azureml"  # what `compile` lowers to when neither -t nor the spec's targets say
IMPORTER = "trainspec.compiler.azureml_import"  # `trainspec import`: a platform's job file -> a spec


def target(name: str) -> ModuleType:
    return importlib.import_module(TARGETS[name])


def launcher(valid, name: str) -> str:
    """Who starts the processes of ``valid`` on target ``name``."""
    from .base import launcher as resolve

    return resolve(valid, target(name).LAUNCHERS)


def platform_variable(name: str):
    """(the target, the portable name or None) when only that target's platform sets the variable
    ``name`` (its ``PLATFORM_VARIABLES``), else None. Asks every target: only for a command that
    reads a variable trainspec does not set itself."""
    for target_name in TARGETS:
        table = target(target_name).PLATFORM_VARIABLES
        for pattern in sorted(table, key=lambda p: p.endswith("*")):  # exact names before prefixes
            if name == pattern or (pattern.endswith("*") and name.startswith(pattern[:-1])):
                return target_name, table[pattern]
    return None
