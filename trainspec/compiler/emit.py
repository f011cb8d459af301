"""Serialisation shared by the targets: YAML through ruamel.yaml, headers, stable bytes.

Every user string reaches an output file through a library that escapes it; this module is
the YAML half of that promise. Output is deterministic: insertion order is kept, lines never
wrap, and strings a YAML 1.1 reader (PyYAML, which azure-ai-ml and Ray use) would turn into
booleans, numbers or dates are quoted.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any, Mapping, Optional, Pattern, Tuple

from trainspec import __version__

# what a YAML 1.1 reader takes for something other than a string, and the characters only a
# double-quoted scalar carries; compiled on first use (``_patterns``): ~1.6 ms that most
# compiles never need, since the quick answers below cover their strings
_YAML11_NON_STRING = r"""^(?:
        ~|null|Null|NULL|
        y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF|
        [-+]?(?:0|[1-9][0-9_]*)|[-+]?0[0-7_]+|[-+]?0x[0-9a-fA-F_]+|[-+]?0b[01_]+|
        [-+]?(?:[0-9][0-9_]*)?\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+|
        [-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?|
        [-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)|
        [0-9]{4}-[0-9]{1,2}-[0-9]{1,2}.*|=|<<
    )$"""
_SPECIAL = "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\ufeff]"
_COMPILED: Optional[Tuple[Pattern[str], Pattern[str]]] = None


def _patterns() -> Tuple[Pattern[str], Pattern[str]]:
    """(special characters, YAML 1.1 non-strings), compiled once per process, when first needed."""
    global _COMPILED
    if _COMPILED is None:
        _COMPILED = (re.compile(_SPECIAL), re.compile(_YAML11_NON_STRING, re.X))
    return _COMPILED


# what _YAML11_NON_STRING matches of a one-line ASCII string that starts with no digit, sign or dot
_YAML11_WORDS = frozenset("~ null Null NULL y Y yes Yes YES n N no No NO true True TRUE false False FALSE "
                          "on On ON off Off OFF = <<".split())


def _style(value: str) -> Optional[str]:
    """How a string is written: double-quoted when a reader could take it for something else or
    only escapes carry it, literal block when it is several plain lines, else plain."""
    if value.isascii() and value.isprintable():
        # most strings (names, paths, commands, numbers as text): no control character or line
        # break; the same answers as below, most without the patterns
        first = value[:1]
        if first not in "0123456789+-.":
            return '"' if value in _YAML11_WORDS else None  # none of the numbers, dates or times
        # the patterns' number, date and time forms, by what follows the first character: the
        # strings none of them can match are answered here (tests/test_emit.py holds the two equal)
        if first in "+-" and value[1:2] not in "0123456789.":
            return None  # a sign, then neither a digit nor a dot ("--nnodes", "-m")
        if first == "." and len(value) > 1 and value[1] not in "0123456789_eEiInN":
            return None  # a dot, then no digit, exponent, inf or nan ("./train.py", "../data")
        if value.isdigit():
            # digits alone: an int (0, or no leading zero) or an octal (0, then 0-7) to a
            # YAML 1.1 reader; anything else ("089") is a string
            return '"' if first != "0" or not value.strip("01234567") else None
        if first in "0123456789":
            after = value.lstrip("0123456789_")
            if after[:1] not in ".eE:xb-":
                return None  # digits, then a letter no number or date has there ("1f45e0", "4x4")
            if after[:1] == "." and after[1:].lstrip("0123456789_")[:1] not in "eE":
                return None  # digits, a dot, digits, then neither the end nor an exponent ("0.1.0")
        return '"' if value == "" or _patterns()[1].match(value) else None
    special, non_string = _patterns()
    if special.search(value):
        # control characters and Unicode line breaks: only a double-quoted scalar carries them
        # unchanged (escaped); a plain or literal one lets readers turn NEL into a line end
        return '"'
    if "\n" in value.rstrip("\n") and not any(c in value for c in "\t\r") and value == value.strip(" "):
        return "|"
    if value == "" or non_string.match(value):
        return '"'
    return None


def _writer():
    """The node builder and the writer of ``yaml_bytes``, made once per process: ruamel.yaml's
    libyaml emitter (ruamel.yaml.clib: 4x faster than the pure-Python one, and the one emitter
    every install uses, so the bytes never depend on what is installed) fed a node tree that
    ``Representer.node`` builds. ``YAML.dump`` would make a new dumper class per call, a fifth of
    the cost of a small file; the node tree and the emitter's questions are the same as in a dump."""
    from ruamel.yaml.main import CEmitter  # what YAML(typ="safe", pure=False) writes with
    from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode
    from ruamel.yaml.representer import SafeRepresenter
    from ruamel.yaml.resolver import Resolver
    from ruamel.yaml.tag import Tag

    # one Tag per type, made once: given a string, ruamel makes (and URI-decodes) a Tag for every
    # node, a quarter of the time of a dump
    tags = {name: Tag(suffix=f"tag:yaml.org,2002:{name}") for name in ("str", "int", "bool", "null", "map", "seq")}
    text = {name: tag.value for name, tag in tags.items()}
    new = ScalarNode.__new__

    def scalar(tag: str, value: str, style: Optional[str] = None) -> ScalarNode:
        """``ScalarNode(tag, value, style=style)`` with its tag kept as the string the emitter reads
        (``node.tag``, once per node) rather than a Tag that ``str()`` unwraps each time: a third
        of the cost of a node."""
        node = new(ScalarNode)
        node.ctag, node.value, node.style = tag, value, style
        node.start_mark = node.end_mark = node.comment = node.anchor = None
        return node

    # a string's style, by its text: every job file of a repository holds the same keys and most
    # of the same values
    styles: dict[str, Optional[str]] = {}

    def style_of(value: str) -> Optional[str]:
        try:
            return styles[value]
        except KeyError:
            found = _style(value)
            if len(styles) < 10_000:
                styles[value] = found
            return found

    class Representer(SafeRepresenter):
        def node(self, value: Any) -> Any:
            """The node the methods below make for ``value``, made directly for the plain types
            (ruamel's generic dispatch and alias bookkeeping was a fifth of a cold `check`):
            mappings become mappings (order kept) and tuples lists, each a new node, so none is an
            alias; keys are written as they are."""
            kind = type(value)
            if kind is str:
                return scalar(text["str"], value, style_of(value))
            if kind is bool:
                return scalar(text["bool"], "true" if value else "false")
            if kind is int:
                return scalar(text["int"], str(value))
            if value is None:
                return scalar(text["null"], "null")
            if isinstance(value, Mapping):
                return MappingNode(tags["map"], [(self.key(k), self.node(v)) for k, v in value.items()],
                                   flow_style=False)
            if isinstance(value, (list, tuple)):
                return SequenceNode(tags["seq"], [self.node(v) for v in value], flow_style=False)
            return self.represent_data(value)

        def key(self, value: Any) -> Any:
            kind = type(value)
            if kind is str:
                return scalar(text["str"], value, style_of(value))
            if kind is bool or kind is int or value is None:
                return self.node(value)
            return self.represent_data(value)

        def represent_str(self, value: str):
            return self.represent_scalar(tags["str"], value, style=_style(value))

        def represent_int(self, value: int):
            return self.represent_scalar(tags["int"], str(value))

        def represent_bool(self, value: bool, anchor=None):
            return self.represent_scalar(tags["bool"], "true" if value else "false")

        def represent_none(self, value: None):
            return self.represent_scalar(tags["null"], "null")

        def represent_dict(self, value: dict):
            return self.represent_mapping(tags["map"], value)

        def represent_list(self, value: list):
            return self.represent_sequence(tags["seq"], value)

    for kind, method in ((str, Representer.represent_str), (int, Representer.represent_int),
                         (bool, Representer.represent_bool), (type(None), Representer.represent_none),
                         (dict, Representer.represent_dict), (list, Representer.represent_list)):
        Representer.add_representer(kind, method)

    if CEmitter is None or CEmitter.__module__.split(".")[:3] != ["ruamel", "yaml", "clib"]:
        raise RuntimeError("trainspec needs ruamel.yaml.clib (pip install ruamel.yaml.clib): its emitter "
                           "keeps compiled files byte-identical across installs")
    if Resolver.yaml_path_resolvers:
        raise RuntimeError("ruamel.yaml's Resolver has path resolvers: yaml_bytes does not ask them")
    default = {ScalarNode: text["str"], SequenceNode: text["seq"], MappingNode: text["map"]}
    # the Resolver's implicit patterns by first character, as the `match` methods of compiled
    # patterns, looked up as characters come up: its own table holds lazily compiled patterns,
    # which cost a Python call per attribute read
    matchers: dict[str, list] = {}
    # a plain scalar's answer, by its text: the emitter asks several times per node, and every
    # job file of a repository holds the same keys
    resolved: dict[str, str] = {}

    def implicit(first: str) -> list:
        patterns = Resolver.yaml_implicit_resolvers.get(first, ())
        found = matchers[first] = [(tag, pattern.match) for tag, pattern in patterns]
        return found

    class Writer(CEmitter):
        """The emitter asks, for each node, which tag its value would read back as (plain,
        then quoted) to decide whether a tag must be written or a plain scalar quoted: the
        answer of ruamel's Resolver, as a string (the emitter compares it with the node's tag
        string) rather than a new Tag per question."""

        def resolve(self, kind: Any, value: Any, implicit_flags: Any) -> str:
            if kind is ScalarNode and implicit_flags[0]:
                tag = resolved.get(value)
                if tag is None:
                    tag = default[kind]
                    first = value[:1]
                    found = matchers.get(first)
                    for pattern_tag, match in implicit(first) if found is None else found:
                        if match(value):
                            tag = pattern_tag
                            break
                    if len(resolved) < 10_000:
                        resolved[value] = tag
                return tag
            return default[kind]

        def descend_resolver(self, parent: Any, index: Any) -> None:
            """No path resolvers (checked above): nothing to track."""

        def ascend_resolver(self) -> None:
            """No path resolvers: nothing to track."""

    return Representer, Writer


_WRITER = None


def yaml_bytes(data: Mapping[str, Any], header: str = "") -> bytes:
    """``data`` as YAML bytes, preceded by ``header`` (already a comment block). Lines never wrap,
    non-ASCII characters are written as they are, mappings keep their order."""
    global _WRITER
    if _WRITER is None:
        _WRITER = _writer()
    representer, writer = _WRITER
    stream = io.StringIO()
    stream.write(header)
    builder = representer(default_flow_style=False)
    builder.sort_base_mapping_type_on_output = False  # as YAML.dump was set up: what ruamel builds keeps its order
    node = builder.node(data)
    out = writer(stream, width=1 << 16, allow_unicode=True, encoding="utf-8")
    try:
        out.open()
        out.serialize(node)
        out.close()
    finally:
        out.dispose()
    return stream.getvalue().encode("utf-8")


def header_path(path: str) -> str:
    """The spec's path as a header names it: as written when every character is printable and
    nothing in it can end or mimic a comment of any output's format; else as a JSON string
    (``"specs/a\\u202eb.yaml"``) whose escapes show every invisible character (bidi controls,
    zero-width and other format characters, spaces other than ' ') and break every ``--`` (which an
    XML comment cannot hold). Validation refuses the characters that no comment can carry (line
    breaks and other controls: schema/validate.py); ``spec_path`` reads either form back."""
    if path.isprintable() and "--" not in path and not path.startswith('"') and _HEADER_END not in path:
        return path
    out = ['"']
    for ch in path:
        if ch in '"\\':
            out.append("\\" + ch)
        elif not ch.isprintable() or (ch == "-" and out[-1].endswith("-")):
            out.append(json.dumps(ch)[1:-1] if ord(ch) > 0x7F else "\\u%04x" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def spec_path(written: str) -> str:
    """The spec's path from a header's text of it (``header_path``'s inverse; a path written
    before paths were quoted is read as written)."""
    if len(written) > 1 and written.startswith('"') and written.endswith('"'):
        try:
            value = json.loads(written)
        except ValueError:
            return written
        if isinstance(value, str):
            return value
    return written


_HEADER_END = " (spec sha256:"


def header_lines(source_display: str, digest: str, target: str) -> list[str]:
    return [
        f"Generated by trainspec {__version__} for {target} from {header_path(source_display)}{_HEADER_END}{digest}).",
        "Edit the spec, not this file: `trainspec compile` rewrites it.",
    ]


def yaml_header(source_display: str, digest: str, target: str) -> str:
    return "".join(f"# {line}\n" for line in header_lines(source_display, digest, target))
