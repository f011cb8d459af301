"""What the file system answered, remembered for one command.

A `check` of a repository asks the same questions once per spec: where `specs/` really leads,
which folder above it holds `.git`, whether the base every spec extends is a link, what the
conda file they all name resolves to (issue 30: ~15,000 realpath calls for 500 specs). While
one command reads a repository the answers cannot change (it never asks about what it
writes), but between two commands they can: tests and long-lived callers run many commands in
one process, and a file changed between them must be seen. So the answers live exactly as long
as one command: the command line runs each command inside ``one_command()``, and outside it
every question goes to the file system.

An answer is reused only for the same question about the same path (a relative path together
with the working folder it was asked from); an exception is an answer too, raised again.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional

_ANSWERS: Optional[Dict[Any, Any]] = None  # while a command runs: (question, path) -> answer


class one_command:
    """``with one_command():`` remembers file-system answers until the block ends; a nested
    command starts with none and the outer one's come back after it."""

    def __enter__(self) -> "one_command":
        global _ANSWERS
        self._outer, _ANSWERS = _ANSWERS, {}
        return self

    def __exit__(self, *exc: Any) -> None:
        global _ANSWERS
        _ANSWERS = self._outer


def answer(question: Callable[[str], Any], path: str) -> Any:
    """``question(path)``, or what it returned (or raised) for the same ``path`` earlier in this
    command."""
    answers = _ANSWERS
    if answers is None:
        return question(path)
    if path.startswith("/"):
        key: Any = (question, path)
    else:
        try:
            key = (question, os.getcwd(), path)
        except OSError:  # the working folder was deleted: nothing to tell this path's answer by
            return question(path)
    try:
        found = answers[key]
    except KeyError:
        try:
            found = answers[key] = (True, question(path))
        except Exception as exc:  # noqa: BLE001 - the same question raises the same way again
            answers[key] = (False, exc)
            raise
    returned, value = found
    if returned:
        return value
    raise value.with_traceback(None)
