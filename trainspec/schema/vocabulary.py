"""What the schema knows of the targets: only what the registry plugs in.

The schema sits below the targets (each target's settings and lowering import it), so it never
imports one. The registry, ``trainspec/registry/``, above them, plugs in on import the targets'
names and a loader of each one's settings module (``targets/<name>/settings.py``: the model of
``targets.<name>``, its hints, its rules, the variables only its platform sets); the spec's model,
validation and explanations ask through the functions here. A program that uses the schema imports
``trainspec.registry`` first (the pipeline, the command line and the tests do); one that does not
gets a RuntimeError that says so, never a spec model without its targets.
"""

from __future__ import annotations

from types import ModuleType
from typing import Callable, Dict, List, Optional, Tuple

TARGETS: Dict[str, str] = {}  # name (in -t and under targets:) -> the platform's name; filled by plug()
_PLUGGED: List[Tuple[str, Callable[[str], ModuleType]]] = []  # (the default target, the settings loader)

NOT_PLUGGED = "no targets are plugged into the schema: import trainspec.registry first"


def plug(targets: Dict[str, str], default: str, load_settings: Callable[[str], ModuleType]) -> None:
    """The registry's call: these targets, the one `compile` lowers to when nothing says, and how
    to load a target's settings module. Plugging the same again is a no-op."""
    if _PLUGGED and (dict(TARGETS), _PLUGGED[0]) == (targets, (default, load_settings)):
        return
    TARGETS.clear()
    TARGETS.update(targets)
    _PLUGGED[:] = [(default, load_settings)]


def targets() -> Dict[str, str]:
    """Every plugged target: name -> display name, in the registry's order."""
    if not _PLUGGED:
        raise RuntimeError(NOT_PLUGGED)
    return TARGETS


def default_target() -> str:
    if not _PLUGGED:
        raise RuntimeError(NOT_PLUGGED)
    return _PLUGGED[0][0]


def settings(name: str) -> ModuleType:
    """targets/<name>/settings.py: NAME, SETTINGS_DESCRIPTION, SETTINGS_EXAMPLE, settings_model(),
    settings_errors(spec), PLATFORM_VARIABLES, SECRET_REFERENCE (where it reads a secret from:
    core/secret_refs.py), and optionally HINTS, PATTERN_WORDS, COST_SETTINGS (the settings a
    review's cost summary watches: priority, time limit...) and ACCESS_SETTINGS (those that change
    what a job runs or can reach: an identity, `docker run` arguments, a namespace...) and
    LEFT_BEHIND (.gitignore patterns of the files a submitted job writes where it was submitted:
    `trainspec init` ignores them)."""
    if not _PLUGGED:
        raise RuntimeError(NOT_PLUGGED)
    return _PLUGGED[0][1](name)


def platform_variable(name: str) -> Optional[Tuple[str, Optional[str]]]:
    """(the target, the portable name or None) when only that target's platform sets the variable
    ``name`` (its ``PLATFORM_VARIABLES``), else None. Asks every target: only for a command that
    reads a variable trainspec does not set itself."""
    for target_name in targets():
        table = settings(target_name).PLATFORM_VARIABLES
        for pattern in sorted(table, key=lambda p: p.endswith("*")):  # exact names before prefixes
            if name == pattern or (pattern.endswith("*") and name.startswith(pattern[:-1])):
                return target_name, table[pattern]
    return None
