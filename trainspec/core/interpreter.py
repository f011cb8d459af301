"""targets.<name>.python, the setting every target has: the interpreter that starts the shim
(and, on the nodes' own software, the user's `python` where a target names it), written as the
shell reads it ('/opt/my env/bin/python', `conda run -n torch python`): split by shlex, each
word quoted again wherever it goes. The shim needs Python 3.8+, standard library only."""

from __future__ import annotations

from typing import List

from trainspec.core.diagnostics import Diagnostic, error

PYTHON_HINT = "e.g. python3 or /opt/conda/envs/torch/bin/python (quote a path with spaces): the shim needs Python 3.8+"


def python_field(default: str, where: str):
    """The ``python`` setting of a target's model (pydantic, imported only with the models)."""
    from pydantic import Field

    return Field(default, min_length=1, description=f"The interpreter {where} that starts the shim (Python 3.8+, "
                 "standard library only), as the shell reads it: a name on PATH or a path.", examples=["python3"])


def python_errors(target: str, settings) -> List[Diagnostic]:
    """targets.<target>.python must be shell words naming something: the rule of every target."""
    from trainspec.core.fields import split_command

    try:
        words = split_command(settings.python)
    except ValueError as exc:
        return [error(("targets", target, "python"), f"is not shell words: {exc}", PYTHON_HINT)]
    return [] if words else [error(("targets", target, "python"), "names no interpreter", PYTHON_HINT)]
