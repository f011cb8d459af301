"""Spec-derived strings in a pull-request comment (GitHub-flavoured markdown) and in a CI log
(plain text): shown as written, unable to change the document around them.

A value can hold anything a YAML string holds: ``ok\\n<!--`` would open an HTML comment that
hides the rest of the comment, a backtick would end its code span, ``|`` would cut a table cell,
a newline in a CI log could start a line GitHub reads as a workflow command (``::error::``).
So every such string goes through one of these, per CommonMark and GFM:

- ``visible``: line breaks, other control characters and the characters a reader cannot see
  (zero-width spaces and joiners, bidi embeddings, overrides and isolates, the BOM, a soft
  hyphen, spaces other than the plain one, the Hangul fillers, the braille blank: the one set
  core/diagnostics.py ``unseen`` defines, which diagnostics escape too) shown
  escaped (the value as a JSON string, quoted), for plain text and for everything below, so
  ``WARN`` and ``WARN`` with a zero-width space never look alike;
- ``reveal``: the same characters escaped inside a line kept as it is (a line of a diff);
- ``text``: inline prose, backslash-escaped where a character could be markup (backslash,
  backtick, emphasis, brackets, ``<``, ``&``, ``|``, ``~``, ``!``, ``#``, ``+``) and, at its
  start, where it could begin a block (``-``, ``1.``...), and ``$`` (GitHub's math); the reader sees the character itself.
  A word GitHub would make live whatever its escapes (an ``@mention``, ``@org/team``, a URL,
  ``www.``, an e-mail address, an ``#123`` reference) goes in a code span, where it is text;
- ``code`` / ``cell_code``: a code span whose backtick fence is longer than any backtick run
  inside (``cell_code`` also escapes ``|``, which GFM splits cells on even inside code);
- ``fenced``: a fenced block whose fence is longer than any backtick run inside;
- ``clip``: a long value cut to a prefix that says how long the whole is.
"""

from __future__ import annotations

import json
import re

from trainspec.core.diagnostics import all_seen, unseen

# A word GitHub turns into a link or a notification in a comment even when its characters are
# backslash-escaped: @user, @org/team, an e-mail address, a URL, www.x, #123, owner/repo#123.
_LIVE = re.compile(r"[^\s|`<>]*(?:@|://|\bwww\.|#\d)[^\s|`<>]*", re.I)
_MARKUP = re.compile(r"([\\`*_\[\]<>&|~!#+$])")  # $: GitHub renders $...$ as math
_BLOCK_START = re.compile(r"^([!-/:-@\[-`{-~]|\d+[.)])")  # a list marker, a heading, a quote...
_BACKTICKS = re.compile(r"`+")


def visible(value: str, line: bool = False) -> str:
    """``value`` itself, or, when it holds a line break or another control character, as a
    JSON string (``"ok\\n<!--"``): one line, nothing hidden. ``line``: it starts a line of a
    CI log, where a (space-indented) ``::`` would be a workflow command: quoted too."""
    if all_seen(value) and not (line and value.lstrip().startswith("::")):
        return value
    quoted = json.dumps(value, ensure_ascii=False)  # escapes C0, '"' and '\\'
    return "".join(_escape(ch) if unseen(ch) else ch for ch in quoted)


def _escape(ch: str) -> str:
    """One character as JSON writes it escaped (a surrogate pair beyond the BMP)."""
    return json.dumps(ch)[1:-1]


def reveal(line: str) -> str:
    """``line`` with every character ``visible`` would escape, but tabs and line feeds, written
    as its JSON escape (``WARN\\u200b``): for a line shown as it is, like a diff's."""
    if all_seen(line.replace("\t", " ").replace("\n", " ")):
        return line
    return "".join(_escape(ch) if ch not in "\t\n" and unseen(ch) else ch for ch in line)


def clip(value: str, limit: int) -> str:
    """``value`` when it has at most ``limit`` characters, else its start and how long it is."""
    if len(value) <= limit:
        return value
    return f"{value[:limit]}… ({len(value):,} characters in all)"


def text(value: str) -> str:
    """Inline markdown that renders as ``value`` (made visible): nothing in it is markup, HTML,
    an entity, a table cell's end or the start of a block, and nothing in it can notify someone
    or link anywhere (such a word is a code span)."""
    value = visible(value)
    pieces, at = [], 0
    for live in _LIVE.finditer(value):
        pieces += [_escaped(value[at:live.start()]), code(live.group())]
        at = live.end()
    pieces.append(_escaped(value[at:]))
    escaped = "".join(pieces)
    start = _BLOCK_START.match(escaped)
    if start and not escaped.startswith(("\\", "`")):  # a code span opens no block
        mark = start.group()
        escaped = mark[:-1] + "\\" + mark[-1] + escaped[len(mark):]
    return escaped


def _escaped(value: str) -> str:
    return _MARKUP.sub(r"\\\1", value)


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
