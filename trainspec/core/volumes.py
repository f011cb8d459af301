"""targets.<target>.volumes, the rule every target with volumes shares: a volume says where the
data of one input or output of the spec is on that target's platform, by its name
(``volumes: {corpus: {path: /shared/datasets/sft}}``), so one spec can name an Azure ML data asset
for Azure ML and the same data on shared storage, or on a claim, for the others.

Imports nothing but trainspec.core: each target's settings.py calls it from settings_errors().
"""

from __future__ import annotations

from typing import Any, List

from trainspec.core.diagnostics import Diagnostic, error, shown

# A path on the nodes (the models' pattern for a volume's `path`): absolute, one line, no control
# character (it reaches a shell line, an XML attribute, a YAML file and plan)
LOCATION_CHARS = r"[^\x00-\x1f\x7f]*"
ABSOLUTE_PATH = "^/" + LOCATION_CHARS + "$"


def volume_errors(spec: Any, target: str) -> List[Diagnostic]:
    """An error at ``targets.<target>.volumes.<name>`` for a volume that names neither an input nor
    an output of ``spec``, or names a literal input (a value, no data to place)."""
    out = []
    names = [*spec.inputs, *spec.outputs]
    for name in getattr(spec.targets, target).volumes:
        where = ("targets", target, "volumes", name)
        if name not in names:
            import difflib  # only for a mistake: off compile's start-up path

            close = difflib.get_close_matches(name, names, n=1)
            have = ", ".join(names) or "none"
            out.append(error(where, f"'{name}' is neither an input nor an output of this spec",
                             f"did you mean '{close[0]}'?" if close else f"its inputs and outputs: {have}",
                             on_key=True))
        elif name in spec.inputs and spec.inputs[name].path is None:
            out.append(error(where, f"inputs.{name} is a literal value: there is no data to place",
                             f"remove volumes.{name}", on_key=True))
    return out


def dot_dot_errors(spec: Any, target: str) -> List[Diagnostic]:
    """An error at a volume's ``path`` that climbs with ``..``: the location a reviewer reads
    must be the one the job uses."""
    out = []
    for name, volume in getattr(spec.targets, target).volumes.items():
        path = getattr(volume, "path", None)
        if path and ".." in path.split("/"):
            out.append(error(("targets", target, "volumes", name, "path"), f"'{shown(path)}' climbs with ..",
                             "write the location without .., e.g. /shared/datasets/" + name))
    return out
