"""Plain value classes for the modules every command imports, instead of dataclasses.

``import dataclasses`` costs ~10 ms of every start (it imports ``inspect``, ``ast``, ``dis``),
and each dataclass ~0.3 ms more (its methods are source text compiled at import): together a
good part of a cold compile's CPU beyond the interpreter's own start (docs/speed.md, issue 30).
So the classes on that path are written out: ``__slots__`` names the fields in order, the class's
own ``__init__`` sets them (defaults, and any checking or redacting, read where they happen), and
``Record`` gives what ``@dataclass`` gave them:

- equality: the same type and equal fields, in order;
- a hash of the fields (a record holding a list or a dict has none, as a mutable dataclass);
- a repr that names every field: ``Diagnostic(severity='error', path=(), ...)``.

``replace(record, field=value)`` is ``dataclasses.replace`` for them. Records are values: nothing
assigns to one after it is made (the interpreter no longer refuses it, as a frozen dataclass did).
"""

from __future__ import annotations

from typing import Any, Tuple, TypeVar


class Record:
    __slots__: Tuple[str, ...] = ()

    def _values(self) -> Tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({fields})"


# bound to the class itself, not to its name: a name is a ForwardRef, whose compile() was ~1.4 ms
# of every start (the interpreter's first compile)
R = TypeVar("R", bound=Record)


def replace(record: R, **changes: Any) -> R:
    """A copy of ``record`` with ``changes`` (by field name), made by its class's ``__init__``."""
    unknown = sorted(set(changes) - set(record.__slots__))
    if unknown:
        raise TypeError(f"{type(record).__name__} has no field {', '.join(unknown)}")
    return type(record)(**{name: changes.get(name, getattr(record, name)) for name in record.__slots__})
