"""One diagnostic type for every stage: load, validate, lower.

Stages report problems by *spec path* (``("resources", "gpus_per_node")``); the loader's
position map turns that into ``file:line:col`` once, at the end, so no stage needs to know
about YAML.
"""

from __future__ import annotations

from typing import Iterable, Optional, Tuple, Union

from trainspec.core.records import Record, replace
from trainspec.core.secrets import redact, redact_shapes

PathPart = Union[str, int]
SpecPath = Tuple[PathPart, ...]

ERROR = "error"
WARNING = "warning"


class Diagnostic(Record):
    severity: str  # ERROR | WARNING
    path: SpecPath  # where in the spec: ("resources", "nodes"); () is the whole document
    message: str
    hint: Optional[str]
    file: Optional[str]  # filled in by locate()
    line: Optional[int]  # 1-based
    col: Optional[int]  # 1-based
    on_key: bool  # point at the key (unknown key) rather than its value
    __slots__ = ("severity", "path", "message", "hint", "file", "line", "col", "on_key")

    def __init__(self, severity: str, path: SpecPath, message: str, hint: Optional[str] = None,
                 file: Optional[str] = None, line: Optional[int] = None, col: Optional[int] = None,
                 on_key: bool = False) -> None:
        # a message may quote what the spec says, and an override's label (`--set env.X=...`) is
        # the user's text: whatever looks like a credential never leaves as a diagnostic (secrets.py)
        self.severity = severity
        self.path = path
        self.message = redact_shapes(message)
        self.hint = redact_shapes(hint) if hint else hint
        self.file = redact(file) if file and file.startswith("--") else file
        self.line = line
        self.col = col
        self.on_key = on_key

    @property
    def is_error(self) -> bool:
        return self.severity == ERROR

    @property
    def field(self) -> str:
        return dotted(self.path)

    def at(self, file: str, line: int, col: int) -> "Diagnostic":
        return replace(self, file=file, line=line, col=col)

    def render(self) -> str:
        """One line of text. Control characters (a key or a value the user wrote with a newline,
        an escape sequence, a bidi override) are escaped: a CI runner would otherwise read a
        line starting with `::error` as a workflow command, and a terminal would obey escapes."""
        where = printable(self.file or "<spec>")
        if self.line is not None:
            where = f"{where}:{self.line}:{self.col}"
        field = f"{printable(self.field)}: " if self.path else ""
        text = f"{where}: {self.severity}: {field}{printable(self.message)}"
        if self.hint:
            text += f" (hint: {printable(self.hint)})"
        return text


_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# bidi embeddings, overrides and isolates: they reorder what a terminal or a review page shows
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def printable(text: str) -> str:
    """``text`` with control characters (C0, DEL, C1), line and paragraph separators and bidi
    controls written as escapes (``\\n``, ``\\x1b``, ``\\u2028``); everything else unchanged."""
    if text.isprintable() and not _BIDI.intersection(text):
        return text
    import unicodedata

    out = []
    for ch in text:
        if ch in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[ch])
        elif ch in _BIDI or unicodedata.category(ch) in ("Cc", "Zl", "Zp", "Cs"):  # Cs: a byte not UTF-8
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def shown(value: str, limit: int = 80) -> str:
    """A value as a message quotes it: its first ``limit`` characters, then ``...``."""
    return value if len(value) <= limit else value[:limit] + "..."


def dotted(path: SpecPath) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def error(path: SpecPath, message: str, hint: Optional[str] = None, *, on_key: bool = False) -> Diagnostic:
    return Diagnostic(ERROR, tuple(path), message, hint, on_key=on_key)


def warning(path: SpecPath, message: str, hint: Optional[str] = None) -> Diagnostic:
    return Diagnostic(WARNING, tuple(path), message, hint)


def has_errors(diagnostics: Iterable[Diagnostic]) -> bool:
    return any(d.is_error for d in diagnostics)


class SpecError(Exception):
    """Raised when a spec cannot go further; carries every diagnostic found so far."""

    def __init__(self, diagnostics: Iterable[Diagnostic]):
        self.diagnostics = list(diagnostics)
        super().__init__("\n".join(d.render() for d in self.diagnostics))
