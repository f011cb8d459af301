"""Load a spec file: bytes -> plain Python data + a map from spec path to (line, col).

This module knows YAML and positions and nothing about training. Everything that can go
wrong before a mapping exists (size, encoding, tabs, duplicate keys, alias bombs, absurd
nesting) becomes a Diagnostic with a position, never a traceback.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from ..diagnostics import Diagnostic, SpecError, SpecPath, error

MAX_BYTES = 1024 * 1024  # a spec is a page of YAML; a megabyte is already absurd
MAX_NODES = 20_000  # after alias expansion: stops "billion laughs" long before memory does
MAX_DEPTH = 40


@dataclass
class Positions:
    """Spec path -> 1-based (line, col) of its key and of its value."""

    keys: Dict[SpecPath, Tuple[int, int]] = field(default_factory=dict)
    values: Dict[SpecPath, Tuple[int, int]] = field(default_factory=dict)

    def find(self, path: SpecPath, on_key: bool = False) -> Tuple[int, int]:
        """The position of ``path``, or of its nearest ancestor that has one."""
        path = tuple(path)
        while True:
            table = (self.keys, self.values) if on_key else (self.values, self.keys)
            for t in table:
                if path in t:
                    return t[path]
            if not path:
                return (1, 1)
            path = path[:-1]


@dataclass
class Document:
    file: str  # as the user named it, for messages
    path: Path  # resolved, for relative lookups
    data: Any
    positions: Positions
    raw: bytes
    # after composition (compose.py): which file each path came from, and which paths an
    # override (--set / --var) wrote; empty for a single file
    origins: Dict[SpecPath, "Document"] = field(default_factory=dict)
    overrides: Dict[SpecPath, str] = field(default_factory=dict)

    def locate(self, diagnostic: Diagnostic) -> Diagnostic:
        """Attach file:line:col: of the file (or override) that wrote the diagnostic's path."""
        if diagnostic.file:
            return diagnostic
        if diagnostic.line is not None:
            return diagnostic.at(self.file, diagnostic.line, diagnostic.col)
        path = tuple(diagnostic.path)
        while True:
            if path in self.overrides:
                return replace(diagnostic, file=self.overrides[path])
            source = self.origins.get(path)
            if source is not None and source is not self:
                line, col = source.positions.find(diagnostic.path, diagnostic.on_key)
                return diagnostic.at(source.file, line, col)
            if not path or source is not None:
                break
            path = path[:-1]
        line, col = self.positions.find(diagnostic.path, diagnostic.on_key)
        return diagnostic.at(self.file, line, col)


def load_file(file: str) -> Document:
    path = Path(file)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise SpecError([error((), "no such file").at(file, 1, 1)]) from None
    except IsADirectoryError:
        raise SpecError([error((), "is a directory, not a spec file").at(file, 1, 1)]) from None
    except OSError as exc:
        raise SpecError([error((), f"cannot read: {exc.strerror}").at(file, 1, 1)]) from None
    return load_bytes(raw, file, path.resolve())


def load_bytes(raw: bytes, file: str, path: Optional[Path] = None) -> Document:
    path = path or Path(file).resolve()

    def fail(message: str, hint: Optional[str] = None, line: int = 1, col: int = 1) -> SpecError:
        return SpecError([error((), message, hint).at(file, line, col)])

    if len(raw) > MAX_BYTES:
        raise fail(f"file is larger than {MAX_BYTES // 1024} KiB", "a spec is a short YAML file; keep data out of it")
    if b"\x00" in raw:
        line, col = _line_col(raw, raw.index(b"\x00"))
        raise fail("file contains NUL bytes: this is not a text file", line=line, col=col)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, col = _line_col(raw, exc.start)
        raise fail(f"file is not valid UTF-8 (byte 0x{raw[exc.start]:02x})", "save the spec as UTF-8", line, col) from None
    if text.startswith("\ufeff"):
        text = text[1:]

    tab = _leading_tab(text)
    if tab:
        raise fail("tab character in indentation", "YAML indents with spaces only", *tab)

    fast = _fast_load(text)
    if fast is not None:
        plain, positions = fast
    else:  # libyaml could not read it, or it is an error: ruamel's YAML 1.2 loader decides, and says why
        data = _parse(text, fail)
        positions = Positions()
        plain = _walk(data, (), positions, [MAX_NODES], 0, fail)
    return Document(file=file, path=path, data={} if plain is None else plain, positions=positions, raw=raw)


def _fast_load(text: str) -> Optional[Tuple[Any, Positions]]:
    """A spec through libyaml's parser (ruamel.yaml.clib), 4x faster than ruamel's pure-Python
    round-trip loader, or None when anything is unusual. libyaml reads YAML 1.1, so it is only
    trusted with what it accepts without complaint; whatever it rejects (a colon inside a flow
    mapping, `pytorch:latest`, is fine in YAML 1.2), every error of the spec itself (duplicate
    keys, alias bombs, deep nesting) and any %-directive go to the round-trip loader, which
    stays the authority on what YAML means and on every error message.
    tests/test_loader.py holds both to the same data and positions."""
    from ruamel.yaml.error import YAMLError

    if text.lstrip().startswith("%") or "\n%" in text or any(c in text for c in _YAML11_LINE_BREAKS):
        return None
    try:
        composer = _Composer(text)
        return composer.document(), composer.positions
    except (YAMLError, _Unusual, ValueError, TypeError):
        return None


# Line breaks to YAML 1.1 (libyaml), ordinary characters to YAML 1.2: lines would be counted differently
_YAML11_LINE_BREAKS = ("\x85", "\u2028", "\u2029")


class _Unusual(Exception):
    """Something the fast path leaves to the round-trip loader."""


class _Composer:
    """libyaml's events -> plain data and positions, iteratively (libyaml's own composer recurses
    in C and crashes on deep nesting), with aliases and merge keys expanded against the node
    budget. Scalars are typed by ruamel's YAML 1.2 resolver and constructor, as the round-trip
    loader types them."""

    _TYPED = {"tag:yaml.org,2002:str", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
              "tag:yaml.org,2002:bool", "tag:yaml.org,2002:null"}

    def __init__(self, text: str) -> None:
        from ruamel.yaml import events
        from ruamel.yaml.constructor import SafeConstructor
        from ruamel.yaml.cyaml import CParser
        from ruamel.yaml.resolver import VersionedResolver

        class Parser(CParser, VersionedResolver):
            def __init__(self, stream: str) -> None:
                CParser.__init__(self, stream)
                VersionedResolver.__init__(self, version=(1, 2), loader=self)

        self.events = events
        self.parser = Parser(text)
        self.constructor = SafeConstructor(loader=self.parser)
        self.positions = Positions()
        self.budget = MAX_NODES
        self.anchors: Dict[str, Tuple[Any, Tuple[int, int], list]] = {}  # name -> value, place, places below

    def document(self) -> Any:
        parser, events = self.parser, self.events
        parser.get_event()  # stream start
        if isinstance(parser.peek_event(), events.StreamEndEvent):
            return None
        parser.get_event()  # document start
        value = self._node((), 0)
        parser.get_event()  # document end
        if not isinstance(parser.peek_event(), events.StreamEndEvent):
            raise _Unusual("a second document")
        return value

    def _spend(self, count: int = 1) -> None:
        self.budget -= count
        if self.budget < 0:
            raise _Unusual("too many nodes")

    def _node(self, path: SpecPath, depth: int) -> Any:
        events = self.events
        event = self.parser.get_event()
        mark = event.start_mark
        self.positions.values.setdefault(path, (mark.line + 1, mark.column + 1))
        if isinstance(event, events.AliasEvent):
            if event.anchor not in self.anchors:
                raise _Unusual("unknown alias")
            value, where, below = self.anchors[event.anchor]
            self.positions.values[path] = where  # the anchored node's own place, as ruamel gives it
            for table, suffix, where in below:  # an alias's keys and values sit where the anchor's do
                self._spend()
                (self.positions.keys if table else self.positions.values).setdefault(path + suffix, where)
            return self._copy(value)
        if depth > MAX_DEPTH:
            raise _Unusual("too deep")
        self._spend()
        marks = (len(self.positions.keys), len(self.positions.values)) if event.anchor else None
        if isinstance(event, events.ScalarEvent):
            value = self._scalar(event)
            if value is _MERGE:
                raise _Unusual("a merge key as a value")
            if value is None and event.value == "" and not event.style:
                raise _Unusual("an empty value")  # its position is the round-trip loader's to give
        elif isinstance(event, events.SequenceStartEvent):
            value = []
            while not isinstance(self.parser.peek_event(), events.SequenceEndEvent):
                value.append(self._node(path + (len(value),), depth + 1))
            self.parser.get_event()
        elif isinstance(event, events.MappingStartEvent):
            value = self._mapping(path, depth)
        else:
            raise _Unusual(type(event).__name__)
        if marks is not None:
            below = [(table, p[len(path):], where)
                     for table, (start, positions) in enumerate(zip(reversed(marks), (self.positions.values,
                                                                                       self.positions.keys)))
                     for p, where in itertools.islice(positions.items(), start, None)]
            self.anchors[event.anchor] = (value, (mark.line + 1, mark.column + 1), below)
        return value

    def _mapping(self, path: SpecPath, depth: int) -> Dict[str, Any]:
        events = self.events
        out: Dict[str, Any] = {}
        seen = set()  # the keys as YAML typed them: 1 and true are one key to a dict
        while not isinstance(self.parser.peek_event(), events.MappingEndEvent):
            event = self.parser.get_event()
            key = self._scalar(event) if isinstance(event, events.ScalarEvent) and not event.anchor else None
            if key is _MERGE:
                raise _Unusual("merge key")  # rare in specs: the round-trip loader's merge rules apply
            if key is None or not isinstance(key, (str, int, float, bool)):
                raise _Unusual("a key that is not a plain scalar")
            name = key if isinstance(key, str) else str(key)
            if name in out or key in seen:
                raise _Unusual("duplicate key")
            seen.add(key)
            mark = event.start_mark
            self.positions.keys[path + (name,)] = (mark.line + 1, mark.column + 1)
            out[name] = self._node(path + (name,), depth + 1)
        self.parser.get_event()
        return out

    def _copy(self, value: Any) -> Any:
        """An alias expands to a fresh copy, and every node of it counts against the budget."""
        self._spend()
        if isinstance(value, dict):
            return {k: self._copy(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._copy(v) for v in value]
        return value

    def _scalar(self, event) -> Any:
        from ruamel.yaml.nodes import ScalarNode

        if event.tag not in (None, "!"):
            raise _Unusual("an explicit tag")
        tag = str(self.parser.resolve(ScalarNode, event.value, event.implicit))  # a Tag object: its text
        if tag == "tag:yaml.org,2002:merge":
            return _MERGE
        if tag not in self._TYPED:
            raise _Unusual(tag)  # dates, binary: as the round-trip loader keeps them
        return self.constructor.construct_object(ScalarNode(tag, event.value, event.start_mark, event.end_mark))


_MERGE = object()


def _parse(text: str, fail) -> Any:
    from ruamel.yaml import YAML
    from ruamel.yaml.constructor import DuplicateKeyError
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    try:
        return yaml.load(text)
    except DuplicateKeyError as exc:
        mark = exc.problem_mark
        first = exc.context_mark
        key = _duplicate_key_name(exc)
        where = f" (first defined on line {first.line + 1})" if first is not None else ""
        raise fail(f"duplicate key {key}{where}", "YAML keeps only the last one; remove one of them",
                   mark.line + 1, mark.column + 1) from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = (exc.problem or exc.context or "invalid YAML").strip()
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        raise fail(f"invalid YAML: {problem}", line=line, col=col) from None
    except YAMLError as exc:
        raise fail(f"invalid YAML: {exc}") from None
    except RecursionError:
        raise fail(f"document is nested too deeply (limit {MAX_DEPTH} levels)") from None


def _duplicate_key_name(exc) -> str:
    problem = getattr(exc, "problem", "") or ""
    # ruamel: 'found duplicate key "nodes" with value "4" (original value: "2")'
    if '"' in problem:
        return '"' + problem.split('"')[1] + '"'
    return "key"


def _walk(node: Any, path: SpecPath, positions: Positions, budget, depth: int, fail) -> Any:
    """Copy ruamel's round-trip objects into plain dict/list/str/int/float/bool/None,
    recording positions, counting nodes so aliases cannot expand without bound."""
    budget[0] -= 1
    if budget[0] < 0:
        raise fail(f"document expands to more than {MAX_NODES} nodes (anchors/aliases?)",
                   "a spec needs a few dozen values; remove the alias chain")
    if depth > MAX_DEPTH:
        line, col = positions.find(path)
        raise fail(f"document is nested too deeply (limit {MAX_DEPTH} levels)", line=line, col=col)
    if isinstance(node, dict):
        out = {}
        lc = getattr(node, "lc", None)
        if lc is not None and lc.line is not None:
            positions.values.setdefault(path, (lc.line + 1, lc.col + 1))
        for key in node:
            if not isinstance(key, (str, int, float, bool)) or key is None:
                line, col = positions.find(path)
                raise fail("mapping keys must be plain scalars", line=line, col=col)
            skey = key if isinstance(key, str) else str(key)
            child = path + (skey,)
            if lc is not None:
                try:
                    kl, kc = lc.key(key)
                    positions.keys[child] = (kl + 1, kc + 1)
                    vl, vc = lc.value(key)
                    positions.values[child] = (vl + 1, vc + 1)
                except (KeyError, TypeError):
                    pass
            out[skey] = _walk(node[key], child, positions, budget, depth + 1, fail)
        return out
    if isinstance(node, list):
        out_list = []
        lc = getattr(node, "lc", None)
        if lc is not None and lc.line is not None:
            positions.values.setdefault(path, (lc.line + 1, lc.col + 1))
        for i, item in enumerate(node):
            child = path + (i,)
            if lc is not None:
                try:
                    il, ic = lc.item(i)
                    positions.values[child] = (il + 1, ic + 1)
                except (KeyError, TypeError, IndexError):
                    pass
            out_list.append(_walk(item, child, positions, budget, depth + 1, fail))
        return out_list
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, str):
        return str(node)
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    # dates, binary and other YAML types a spec never needs: keep them as text
    return str(node)


def _line_col(raw: bytes, offset: int) -> Tuple[int, int]:
    before = raw[:offset]
    line = before.count(b"\n") + 1
    col = offset - (before.rfind(b"\n") + 1) + 1
    return line, col


def _leading_tab(text: str) -> Optional[Tuple[int, int]]:
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip(" ")
        if stripped.startswith("\t"):
            return number, len(line) - len(stripped) + 1
    return None
