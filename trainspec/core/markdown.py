"""Spec-derived strings in a pull-request comment (GitHub-flavoured markdown) and in a CI log
(plain text): shown as written, unable to change the document around them.

A value can hold anything a YAML string holds: ``ok\\n<!--`` would open an HTML comment that
hides the rest of the comment, a backtick would end its code span, ``|`` would cut a table cell,
a newline in a CI log could start a line GitHub reads as a workflow command (``::error::``).
So every such string goes through one of these, per CommonMark and GFM:

- ``visible``: line breaks and other control characters shown escaped (the value as a JSON
  string, quoted), for plain text and for everything below;
- ``text``: inline prose, backslash-escaped where a character could be markup (backslash,
  backtick, emphasis, brackets, ``<``, ``&``, ``|``, ``~``, ``!``, ``#``, ``+``) and, at its
  start, where it could begin a block (``-``, ``1.``...); the reader sees the character itself;
- ``code`` / ``cell_code``: a code span whose backtick fence is longer than any backtick run
  inside (``cell_code`` also escapes ``|``, which GFM splits cells on even inside code);
- ``fenced``: a fenced block whose fence is longer than any backtick run inside;
- ``clip``: a long value cut to a prefix that says how long the whole is.
"""

from __future__ import annotations

import json
import re

# Control characters (C0, DEL, C1) and the Unicode line/paragraph separators: anything that
# could break a line or hide in one.
_UNSEEN = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_MARKUP = re.compile(r"([\\`*_\[\]<>&|~!#+])")
_BLOCK_START = re.compile(r"^([!-/:-@\[-`{-~]|\d+[.)])")  # a list marker, a heading, a quote...
_BACKTICKS = re.compile(r"`+")


def visible(value: str, line: bool = False) -> str:
    """``value`` itself, or, when it holds a line break or another control character, as a
    JSON string (``"ok\\n<!--"``): one line, nothing hidden. ``line``: it starts a line of a
    CI log, where a (space-indented) ``::`` would be a workflow command: quoted too."""
    if not _UNSEEN.search(value) and not (line and value.lstrip().startswith("::")):
        return value
    quoted = json.dumps(value, ensure_ascii=False)  # escapes C0, '"' and '\\'
    return _UNSEEN.sub(lambda m: "\\u%04x" % ord(m.group()), quoted)


def clip(value: str, limit: int) -> str:
    """``value`` when it has at most ``limit`` characters, else its start and how long it is."""
    if len(value) <= limit:
        return value
    return f"{value[:limit]}… ({len(value):,} characters in all)"


def text(value: str) -> str:
    """Inline markdown that renders as ``value`` (made visible): nothing in it is markup, HTML,
    an entity, a table cell's end or the start of a block."""
    escaped = _MARKUP.sub(r"\\\1", visible(value))
    start = _BLOCK_START.match(escaped)
    if start and not escaped.startswith("\\"):
        mark = start.group()
        escaped = mark[:-1] + "\\" + mark[-1] + escaped[len(mark):]
    return escaped


def _longest_run(value: str) -> int:
    return max((len(m.group()) for m in _BACKTICKS.finditer(value)), default=0)


def code(value: str) -> str:
    """An inline code span that renders as ``value`` (made visible)."""
    value = visible(value)
    if not value:
        return "*(empty)*"
    fence = "`" * (_longest_run(value) + 1)
    # CommonMark strips one space from each side when both are spaces: pad so that what is
    # stripped is the padding (and a backtick at either end cannot join the fence)
    pad = value[0] in "` " or value[-1] in "` "
    if value.strip(" ") == "":
        pad = False  # a span of spaces only is not stripped
    inner = f" {value} " if pad else value
    return f"{fence}{inner}{fence}"


def cell_code(value: str) -> str:
    """A code span for a GFM table cell: ``|`` escaped (GFM removes the backslash before it
    parses the cell's inlines)."""
    return code(value).replace("|", "\\|")


def fenced(body: str, info: str = "") -> str:
    """A fenced code block holding ``body`` verbatim: no line of it can close the fence."""
    fence = "`" * max(3, _longest_run(body) + 1)
    return f"{fence}{info}\n{body}\n{fence}"
