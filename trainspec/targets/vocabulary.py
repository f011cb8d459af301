"""What the spec layer knows of the targets: each one's settings module
(``targets/<name>/settings.py``: the model of ``targets.<name>``, its hints, its rules, the
variables only its platform sets), loaded by name on first use. Nothing here loads lowering.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Optional, Tuple

from trainspec.targets import TARGETS


def settings(name: str) -> ModuleType:
    """targets/<name>/settings.py: NAME, SETTINGS_DESCRIPTION, SETTINGS_EXAMPLE, settings_model(),
    settings_errors(spec), PLATFORM_VARIABLES, SECRET_REFERENCE (where it reads a secret from:
    core/secret_refs.py), and optionally HINTS, PATTERN_WORDS, COST_SETTINGS (the settings a
    review's cost summary watches: priority, time limit...) and ACCESS_SETTINGS (those that change
    what a job runs or can reach: an identity, `docker run` arguments, a namespace...) and
    LEFT_BEHIND (.gitignore patterns of the files a submitted job writes where it was submitted:
    `trainspec init` ignores them)."""
    return importlib.import_module(f"trainspec.targets.{name}.settings")


def platform_variable(name: str) -> Optional[Tuple[str, Optional[str]]]:
    """(the target, the portable name or None) when only that target's platform sets the variable
    ``name`` (its ``PLATFORM_VARIABLES``), else None. Asks every target: only for a command that
    reads a variable trainspec does not set itself."""
    for target_name in TARGETS:
        table = settings(target_name).PLATFORM_VARIABLES
        for pattern in sorted(table, key=lambda p: p.endswith("*")):  # exact names before prefixes
            if name == pattern or (pattern.endswith("*") and name.startswith(pattern[:-1])):
                return target_name, table[pattern]
    return None
