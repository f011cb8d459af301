"""Load a spec file: bytes -> plain Python data + a map from spec path to (line, col).

This module knows YAML and positions and nothing about training. One loader: ruamel.yaml's
round-trip loader (YAML 1.2), which gives every key and value its position. Everything that
can go wrong before a mapping exists (size, encoding, tabs, duplicate keys, alias bombs,
absurd nesting) becomes a Diagnostic with a position, never a traceback.
"""

from __future__ import annotations

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

    data = _parse(text, fail)
    positions = Positions()
    plain = _walk(data, (), positions, [MAX_NODES], 0, fail)
    return Document(file=file, path=path, data={} if plain is None else plain, positions=positions, raw=raw)


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
