"""Secrets by reference: ``secrets: {NAME: {<where>: <reference>}}`` in a spec says where each
platform keeps the value of the environment variable NAME, never the value itself.

Each target's settings module names the key it reads (``SECRET_REFERENCE``, a ``Reference``):
the same key may serve several targets (``file``: a path every node reads), and the spec model
has one field per distinct key (schema/model.py). This module holds the shared one, ``FILE``, and
what every reference needs: its field in the model and the one line ``plan`` shows.
Plain data; pydantic only inside ``field()``, which only the models call.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

from trainspec.core.records import Record

# an absolute path without NUL or a line break: read as is on every node
FILE_PATTERN = r"^/[^\x00\n\r]*$"


class Reference(Record):
    """One way a platform keeps a secret: ``key`` under ``secrets.<NAME>``, its pydantic field
    (``field()``: (type, FieldInfo)), how plan shows it (``shown(value)``), and the rules its
    pattern cannot state (``errors(path, value)``: diagnostics at ``path``, run by validation)."""

    __slots__ = ("key", "field", "shown", "example", "errors", "runtime", "words")

    def __init__(self, key: str, field: Callable[[], Tuple[Any, Any]], shown: Callable[[Any], str],
                 example: str, errors: Optional[Callable[[tuple, Any], List[Any]]] = None,
                 runtime: Optional[Callable[[Any], dict]] = None,
                 words: Optional[Dict[Tuple[str, ...], str]] = None) -> None:
        self.key = key
        self.field = field
        self.shown = shown
        self.example = example  # as a spec writes it, for hints
        self.errors = errors
        # what the shim reads (TRAINSPEC_SECRETS, runtime/secret_refs.py secret_values), None where
        # the platform itself sets the variable (a Kubernetes secretKeyRef)
        self.runtime = runtime
        # what a value that misses its pattern is, by the path below secrets.<NAME>.<key> (schema/explain.py)
        self.words = words


def _file_field() -> Tuple[Any, Any]:
    from typing import Optional

    from pydantic import Field

    return (Optional[str], Field(
        None, pattern=FILE_PATTERN, max_length=4095,
        description="An absolute path to a file on every node that holds the value (its one trailing newline "
        "dropped); the shim reads it on each node before the command starts, as the user the job runs as.",
        examples=["/shared/secrets/hf_token"]))


FILE = Reference("file", _file_field, lambda path: f"file {path}", "/shared/secrets/<file>",
                 runtime=lambda path: {"file": path},
                 words={(): "is not an absolute path: the file's path on every node, e.g. /shared/secrets/hf_token"})
