"""One diagnostic type for every stage: load, validate, lower.

Stages report problems by *spec path* (``("resources", "gpus_per_node")``); the loader's
position map turns that into ``file:line:col`` once, at the end, so no stage needs to know
about YAML.
"""

from __future__ import annotations

import re
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
        """The spec path in words; a key shaped like a token (`env.ghp_...`) is ``<redacted>``, as
        a value would be: the line and column say where it is."""
        return redact_shapes(dotted(self.path))

    def at(self, file: str, line: int, col: int) -> "Diagnostic":
        return replace(self, file=file, line=line, col=col)

    def render(self) -> str:
        """One line of text (``shown_line``). Control characters (a key or a value the user wrote
        with a newline, an escape sequence, a bidi override) are escaped, and so is a line that
        starts like a workflow command (a spec file named `::error::x.yaml`): a CI runner would
        otherwise obey it, and a terminal would obey escapes."""
        where = printable(self.file or "<spec>")
        if self.line is not None:
            where = f"{where}:{self.line}:{self.col}"
        field = f"{printable(self.field)}: " if self.path else ""
        text = f"{where}: {self.severity}: {field}{printable(self.message)}"
        if self.hint:
            text += f" (hint: {printable(self.hint)})"
        return shown_line(text)


_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# The printable characters a reader still cannot see: the Hangul fillers, the braille blank, the
# combining grapheme joiner, Khmer's inherent vowels and the variation selectors.
_BLANK = re.compile("[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180d\u180f\u2800\u3164\uffa0\ufe00-\ufe0f"
                    "\U000e0100-\U000e01ef]")
# What makes a line a command to the CI runner that shows it: GitHub's `::name::` at its start
# (after blanks), and `##[name]` (GitHub's older form) or `##vso[` (Azure Pipelines) anywhere in it.
_COMMAND_START = ("::", "##[")
_COMMAND_ANYWHERE = re.compile(r"##(vso)?\[")


def unseen(ch: str) -> bool:
    """``ch`` is escaped wherever trainspec shows text (a diagnostic, a job's log, a comment): a
    character ``str.isprintable`` refuses (Unicode's controls Cc, format characters Cf: zero-width
    spaces and joiners, bidi marks, embeddings, overrides and isolates, the BOM, tags; line and
    paragraph separators Zl, Zp; every space but the plain one; private use Co; surrogates Cs, a
    byte that was not UTF-8; unassigned Cn), or a printable one that looks blank (``_BLANK``).
    The one definition: core/markdown.py escapes the same characters."""
    return not ch.isprintable() or _BLANK.match(ch) is not None


def all_seen(text: str) -> bool:
    """No character of ``text`` is ``unseen``: the common case, answered in C."""
    return text.isprintable() and _BLANK.search(text) is None


def printable(text: str) -> str:
    """``text`` with every ``unseen`` character written as an escape (``\\n``, ``\\x1b``,
    ``\\u200b``, ``\\U000e0041``); everything else unchanged."""
    if all_seen(text):
        return text
    out = []
    for ch in text:
        if not unseen(ch):
            out.append(ch)
        elif ch in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[ch])
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
    return "".join(out)


def shown_line(text: str) -> str:
    """``text`` as one line a terminal or a CI log shows as data: ``printable``, and never a
    command to the runner: a line that would start one (``::add-mask::``, ``::stop-commands::``,
    ``::error file=...``, ``##[``) is prefixed with a backslash, and a ``##[`` or ``##vso[``
    anywhere has its bracket written ``\\x5b``."""
    text = printable(text)
    command = text.lstrip(" ").startswith(_COMMAND_START)
    if "##" in text:
        text = _COMMAND_ANYWHERE.sub(lambda m: m.group()[:-1] + "\\x5b", text)
    return "\\" + text if command else text


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
