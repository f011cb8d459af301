"""Regular expressions compiled when first used, for the patterns a usual compile never needs.

Compiling a pattern costs 0.1 - 0.5 ms; at module level, every start pays for all of them, and
a cold `trainspec compile` paid ~2.6 ms for patterns only an unusual spec reaches (a remote data
URL, a credential-looking name, a duration to parse: docs/speed.md). A ``Lazy`` stands where the
compiled pattern stood and answers what it would (``match``, ``search``, ``sub``, ``pattern``...)."""

from __future__ import annotations

import re
from typing import Any, Optional


class Lazy:
    """``re.compile(text, flags)``, compiled at the first use of any of its attributes."""

    __slots__ = ("_text", "_flags", "_compiled")

    def __init__(self, text: str, flags: int = 0) -> None:
        self._text = text
        self._flags = flags
        self._compiled: Optional[re.Pattern] = None

    def __getattr__(self, name: str) -> Any:  # only for what the slots do not hold
        if self._compiled is None:
            self._compiled = re.compile(self._text, self._flags)
        return getattr(self._compiled, name)

    def __repr__(self) -> str:
        return f"Lazy({self._text!r}, {self._flags!r})"
