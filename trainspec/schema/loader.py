"""Load a spec file: bytes -> plain Python data + a map from spec path to (line, col).

This module knows YAML and positions and nothing about training. What a spec means is what
ruamel.yaml's round-trip loader (YAML 1.2) reads, every key and value with its position; libyaml's
parser reads the documents it reads the same way, faster (see _libyaml_parse). Everything that
can go wrong before a mapping exists (size, encoding, tabs, duplicate keys, alias bombs,
absurd nesting) becomes a Diagnostic with a position, never a traceback.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from trainspec.core import memo
from trainspec.core.diagnostics import Diagnostic, SpecError, SpecPath, error
from trainspec.core.files import read_open
from trainspec.core.records import Record, replace

MAX_BYTES = 1024 * 1024  # a spec is a page of YAML; a megabyte is already absurd
MAX_NODES = 20_000  # after alias expansion: stops "billion laughs" long before memory does
MAX_DEPTH = 40
MAX_INT_DIGITS = 100  # no count, port or timeout comes near; Python cannot even print 4,300 digits
NAME_MAX = 255  # bytes in one part of a path (Linux, macOS, Windows)
PATH_MAX = 4095  # bytes in a whole path


class Positions(Record):
    """Spec path -> 1-based (line, col) of its key and of its value."""

    __slots__ = ("keys", "values")
    __hash__ = None  # type: ignore[assignment]  # filled in as the spec is read

    def __init__(self, keys: Optional[Dict[SpecPath, Tuple[int, int]]] = None,
                 values: Optional[Dict[SpecPath, Tuple[int, int]]] = None) -> None:
        self.keys = {} if keys is None else keys
        self.values = {} if values is None else values

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


class Document(Record):
    __slots__ = ("file", "path", "data", "positions", "raw", "origins", "overrides", "chain")
    __hash__ = None  # type: ignore[assignment]  # compose fills in a composed one

    def __init__(self, file: str, path: Path, data: Any, positions: Positions, raw: bytes,
                 origins: Optional[Dict[SpecPath, Document]] = None, overrides: Optional[Dict[SpecPath, str]] = None,
                 chain: Tuple[Path, ...] = ()) -> None:
        self.file = file  # as the user named it, for messages
        self.path = path  # resolved, for relative lookups
        self.data = data
        self.positions = positions
        self.raw = raw
        # after composition (compose.py): which file each path came from, and which paths an
        # override (--set / --var) wrote; empty for a single file
        self.origins = {} if origins is None else origins
        self.overrides = {} if overrides is None else overrides
        # every file of the extends chain, base first: a file whose fields are all overridden, or that
        # holds only `extends:`, writes no path of ``origins`` but still decides what the spec is
        self.chain = chain

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


class ReadProblem(Exception):
    """A user's path that trainspec will not read (missing, a FIFO or device, a loop, a NUL,
    a name too long...): the message names what it is, the caller names the field or file."""

    def __init__(self, message: str, hint: Optional[str] = None, missing: bool = False):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.missing = missing


# what trainspec never reads, even when it is a regular file behind the name: the process's own
# streams (`/dev/stdin` is the file a shell redirected, when it is one) and the kernel's files
_STREAMS = ("/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/fd/", "/proc/", "/sys/")
_KERNEL = ("/proc/", "/sys/")


def path_text_problem(text: str) -> Optional[str]:
    """Why ``text`` cannot be a path on any file system (before it reaches one): a NUL byte, a
    part longer than NAME_MAX bytes, the whole longer than PATH_MAX. None when it can."""
    if "\x00" in text:
        return "contains a NUL character"
    try:
        encoded = os.fsencode(text)
    except UnicodeError:
        return "is not encodable as a file name"
    long = next((part for part in encoded.split(b"/") if len(part) > NAME_MAX), None)
    if long is not None:
        return f"has a part of {len(long):,} bytes (a file name has at most {NAME_MAX})"
    if len(encoded) > PATH_MAX:
        return f"is {len(encoded):,} bytes long (a path has at most {PATH_MAX})"
    return None


def real_path(path) -> Path:
    """``path`` with every symlink resolved, or ReadProblem for a loop (never RuntimeError, never
    a hang): Path.resolve() raises RuntimeError on a loop before Python 3.13. Asked once per
    path in a command (core/memo.py)."""
    return memo.answer(_real_path, os.fspath(path))


def _real_path(text: str) -> Path:
    problem = path_text_problem(text)
    if problem:
        raise ReadProblem(f"the path {problem}")
    try:
        return Path(os.path.realpath(text, strict=True))
    except FileNotFoundError:
        return Path(os.path.realpath(text))  # a missing file: the caller says so when it reads
    except OSError as exc:
        raise _problem(exc) from None


def resolved(path) -> Path:
    """``Path(path).resolve()``, asked once per path in a command; a symbolic link loop is
    resolved as far as it goes, never an exception (Path.resolve raises RuntimeError on one in
    Python 3.11, OSError from 3.13: an input pointed at a loop was an internal error): the kind
    checks say what is wrong with the path."""
    return memo.answer(_resolved, os.fspath(path))


def _resolved(text: str) -> Path:
    return Path(os.path.realpath(text))  # not strict: follows what it can, never raises on a loop


def is_link(path) -> bool:
    """``os.path.islink(path)``, asked once per path in a command."""
    return memo.answer(os.path.islink, os.fspath(path))


def repository_root(start: Path) -> Optional[Path]:
    """The nearest folder at or above ``start`` that has a .git (resolved), or None: every path a
    spec in it names must stay inside it (`--git`'s extracted revision has a .git marker too).
    Asked once per folder in a command (core/memo.py)."""
    return memo.answer(_repository_root, os.fspath(start))


def _repository_root(text: str) -> Optional[Path]:
    start = Path(text)
    for folder in (start, *start.parents):
        if os.path.lexists(folder / ".git"):
            if _through_a_link_inside_a_repository(folder):
                continue  # a link inside a repository to another one (`build -> /other/repo`) is not a root
            try:
                return real_path(folder)
            except ReadProblem:
                return None
    return None


def _through_a_link_inside_a_repository(folder: Path) -> bool:
    """``folder`` is reached through a symbolic link that a repository above it holds."""
    for part in (folder, *folder.parents):
        if os.path.islink(part) and any(os.path.lexists(above / ".git") for above in part.parents):
            return True
    return False


def _problem(exc: OSError) -> ReadProblem:
    if exc.errno == errno.ENOENT:
        return ReadProblem("no such file", missing=True)
    if exc.errno == errno.ELOOP:
        return ReadProblem("is a symbolic link loop (too many levels of symbolic links)",
                           "point the link at a real file")
    if exc.errno == errno.ENAMETOOLONG:
        return ReadProblem("the path is too long for the file system")
    if exc.errno == errno.EISDIR:
        return ReadProblem("is a directory, not a spec file")
    if exc.errno == errno.ENOTDIR:
        return ReadProblem("no such file (a part of the path is not a directory)", missing=True)
    return ReadProblem(f"cannot read: {exc.strerror or exc}")


def read_bounded(file, limit: int = MAX_BYTES) -> bytes:
    """At most ``limit`` + 1 bytes of a regular file, never blocking: a FIFO, a socket or a device
    (``/dev/stdin``, ``/dev/zero``) is refused from its stat before it is opened (checked once per
    path in a command), and the file is opened non-blocking and checked again, so a swap in
    between cannot make a read wait."""
    text = os.fspath(file)
    memo.answer(_readable, text)
    try:
        fd = os.open(text, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _problem(exc) from None
    try:
        status = os.fstat(fd)
        _regular(status)
        return read_open(fd, status.st_size, limit)
    except OSError as exc:
        raise _problem(exc) from None
    finally:
        os.close(fd)


def _readable(text: str) -> None:
    """ReadProblem unless ``text`` names a regular file outside the process's streams and the
    kernel's files, as far as its name and its stat tell."""
    problem = path_text_problem(text)
    if problem:
        raise ReadProblem(f"the path {problem}")
    try:
        shown = os.path.abspath(text)
        if any(shown == p or shown.startswith(p) for p in _STREAMS) \
                or real_path(text).as_posix().startswith(_KERNEL):  # resolved once, not once per prefix
            raise ReadProblem("names a device or a process's stream, not a file",
                              "a spec and the files it names are regular files")
        _regular(os.stat(text))
    except OSError as exc:
        raise _problem(exc) from None


def _regular(st: os.stat_result) -> None:
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise ReadProblem("is a directory, not a spec file")
    kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file")
    raise ReadProblem(f"is {kind}, not a regular file", "a spec and the files it names are regular files")


def load_file(file: str) -> Document:
    try:
        raw = read_bounded(file)
        path = real_path(file)
    except ReadProblem as exc:
        raise SpecError([error((), exc.message, exc.hint).at(file, 1, 1)]) from None
    return load_bytes(raw, file, path)


# Documents this process has read, by (bytes, name, resolved path): `check` of a repository reads
# each spec twice (to find the bases, then to compose it) and a shared base once per spec; parsing
# is most of a cold check (docs/speed.md). A Document's data and positions are never changed after
# loading (compose copies what it merges), so the same one serves every reader of the same bytes.
_LOADED: Dict[Tuple[bytes, str, Path], Document] = {}


def load_bytes(raw: bytes, file: str, path: Optional[Path] = None) -> Document:
    if path is None:
        try:
            path = real_path(file)
        except ReadProblem:
            path = Path(os.path.abspath(file))
    key = (raw, file, path)
    doc = _LOADED.get(key)
    if doc is None:
        doc = _LOADED[key] = _load(raw, file, path)
    return replace(doc, origins={}, overrides={}, chain=())


def _load(raw: bytes, file: str, path: Path) -> Document:

    def fail(message: str, hint: Optional[str] = None, line: int = 1, col: int = 1) -> SpecError:
        return SpecError([error((), message, hint).at(file, line, col)])

    fail.file = file

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
    fast = _libyaml_parse(text)
    if fast is not _DECLINED:
        return fast
    return _ruamel_parse(text, fail)


# --- libyaml's parser, for the documents it reads exactly as ruamel's does --------------------
#
# ruamel.yaml's pure-Python parser is most of a cold `check` (issue 30). ruamel.yaml.clib, which
# trainspec installs for its emitter, holds libyaml's parser too: it composes the same nodes,
# with their marks, ~10x faster. The tags are resolved by ruamel's YAML 1.2 resolver and the
# values built by the constructor above, as on ruamel's path; libyaml parses YAML 1.1, so what
# the two versions read differently is declined before or after parsing and read by ruamel:
# directives, NEL and the Unicode line and paragraph separators (line breaks in 1.1 only), any
# tag but the core schema's (timestamps, merge keys, binary, local tags), aliases, keys that are
# not scalars, an empty value (libyaml and ruamel place it differently), nesting deeper than
# MAX_DEPTH (ruamel says where it starts). Anything
# libyaml refuses is read by ruamel, so every message about invalid YAML is ruamel's.
# tests/test_loader.py holds both paths to the same data and positions over every YAML file in
# the repository and the fuzzer's mutants.

_DECLINED = object()
_UNLIKE_RUAMEL = re.compile(r"^%|[\x85\u2028\u2029]|^[ ?:-]{" + str(2 * MAX_DEPTH) + ",}", re.MULTILINE)
_MAX_BRACKETS = 400  # libyaml's composer recurses in C: a bound on how deep a flow collection can go
_STR = "tag:yaml.org,2002:str"
_CORE_TAGS = frozenset("tag:yaml.org,2002:" + name for name in ("str", "int", "float", "bool", "null", "map", "seq"))
_LIBYAML_LOADER: Any = None
_RESOLVED: Dict[Tuple[Any, Any, Any], Any] = {}  # (node kind, value, implicit) -> tag
_RESOLVED_MAX = 10_000


def _libyaml_loader() -> Any:
    global _LIBYAML_LOADER
    if _LIBYAML_LOADER is None:
        from _ruamel_yaml import CParser
        from ruamel.yaml.resolver import VersionedResolver

        constructor = _constructor()
        tables: Dict[Any, Any] = {}

        class Loader(CParser, constructor, VersionedResolver):
            def __init__(self, text: str) -> None:
                CParser.__init__(self, text)
                self._parser = self._composer = self
                constructor.__init__(self, loader=self)
                VersionedResolver.__init__(self, version=(1, 2), loadumper=self)
                # YAML 1.2's table of implicit patterns, built once per process, not per document
                self._version_implicit_resolver = tables
                self.allow_duplicate_keys = False
                self.comment_handling = None

            def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
                # a node's tag follows from these three alone (YAML 1.2, no path resolvers): a
                # spec's keys and a shared base's values are resolved once per process, not per
                # spec (ruamel's resolve was a quarter of the parse)
                key = (kind, value, implicit)
                tag = _RESOLVED.get(key)
                if tag is None:
                    tag = VersionedResolver.resolve(self, kind, value, implicit)
                    if len(_RESOLVED) < _RESOLVED_MAX:
                        _RESOLVED[key] = tag
                return tag

        _LIBYAML_LOADER = Loader
    return _LIBYAML_LOADER


def _libyaml_parse(text: str) -> Any:
    """The document as ruamel's round-trip loader reads it, or _DECLINED."""
    if _UNLIKE_RUAMEL.search(text) or text.count("[") + text.count("{") > _MAX_BRACKETS:
        return _DECLINED
    try:
        loader = _libyaml_loader()(text)
        node = loader.get_single_node()
        if node is None:
            return None
        return _Read(loader, node)
    except Exception:  # noqa: BLE001 - invalid YAML, a duplicate key, no libyaml: ruamel reads it and says why
        return _DECLINED


class _Unlike(Exception):
    """The document holds what YAML 1.1 and 1.2 may read differently (_Read's first check)."""


class _Read:
    """A document read from libyaml's nodes straight into plain data and positions: what ruamel's
    round-trip constructor would build and _walk copy, without building the CommentedMaps, their
    line/column records and comment slots first (most of the parse). Every node is first held to
    what the two YAML versions read alike (a core-schema tag, no alias, no deeper than MAX_DEPTH,
    keys that are scalars, no empty plain scalar: _Unlike otherwise). Only plain and quoted
    strings are taken from the nodes as they are; every other scalar (int, float, bool, null, a
    literal or folded block) is the constructor's object, converted as _walk converts it. A
    duplicate key (as the constructor compares keys) raises here too, so the document is
    declined and ruamel says why. What _walk would raise (too many nodes, a key that is no plain
    scalar, an integer too long) is kept with its place in _walk's order, and raised by _walk."""

    def __init__(self, loader: Any, root: Any) -> None:
        from ruamel.yaml.nodes import MappingNode, ScalarNode

        construct = loader.construct_non_recursive_object
        positions = self.positions = Positions()
        # (where _walk would raise it: after the node of that number, before the next; the error, given fail)
        self.problems: List[Tuple[float, Callable[[Any], SpecError]]] = []
        count = 0
        seen = set()

        def scalar(node: Any, depth: int) -> Any:
            tag = alike(node, depth)
            if node.value == "" and not node.style:  # plain: None from ruamel, "" from libyaml
                raise _Unlike()
            if tag == _STR and node.style not in ("|", ">"):
                return node.value
            return construct(node)

        def alike(node: Any, depth: int) -> str:
            tag = node.tag
            if id(node) in seen or tag not in _CORE_TAGS or depth > MAX_DEPTH:
                raise _Unlike()
            seen.add(id(node))
            return tag

        def visit(node: Any, path: SpecPath, depth: int) -> Any:
            nonlocal count
            count += 1
            if isinstance(node, ScalarNode):
                value = scalar(node, depth)
                if isinstance(value, _HugeInt):
                    self.problems.append((count + 0.5, lambda fail, p=path, v=value: _plain_scalar(v, p, positions, fail)))
                    return None
                return _plain_scalar(value, path, positions, None)
            alike(node, depth)
            positions.values.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
            if isinstance(node, MappingNode):
                out: Dict[str, Any] = {}
                keys: Dict[Any, None] = {}
                for key_node, value_node in node.value:
                    if not isinstance(key_node, ScalarNode):
                        raise _Unlike()
                    key = scalar(key_node, depth + 1)
                    if key in keys:
                        raise _DuplicateKey(_key_name(key), key_node.start_mark, None)
                    keys[key] = None
                    if not isinstance(key, (str, int, float, bool)) or key is None:
                        self.problems.append((count + 0.5, lambda fail, p=path: fail(
                            "mapping keys must be plain scalars", None, *positions.find(p))))
                        visit(value_node, path + ("",), depth + 1)  # read on: a later key may be a duplicate
                        continue
                    skey = key if isinstance(key, str) else str(key)
                    child = path + (skey,)
                    positions.keys[child] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                    positions.values[child] = (value_node.start_mark.line + 1, value_node.start_mark.column + 1)
                    out[skey] = visit(value_node, child, depth + 1)
                return out
            items = []
            for i, item in enumerate(node.value):
                child = path + (i,)
                positions.values[child] = (item.start_mark.line + 1, item.start_mark.column + 1)
                items.append(visit(item, child, depth + 1))
            return items

        self.data = visit(root, (), 0)
        self.count = count

    def walk(self, positions: Positions, budget, fail) -> Any:
        problems = list(self.problems)
        if self.count > budget[0]:
            problems.append((budget[0] + 1, lambda fail: fail(
                f"document expands to more than {MAX_NODES} nodes (anchors/aliases?)",
                "a spec needs a few dozen values; remove the alias chain")))
        budget[0] -= self.count
        positions.keys.update(self.positions.keys)
        positions.values.update(self.positions.values)
        if problems:
            raise min(problems, key=lambda problem: problem[0])[1](fail)
        return self.data


def _ruamel_parse(text: str, fail) -> Any:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    yaml = YAML(typ="rt")
    yaml.Constructor = _constructor()
    yaml.Scanner = depth_limited()
    yaml.allow_duplicate_keys = False
    try:
        return yaml.load(text)
    except _DuplicateKey as exc:
        where = f" (first defined on line {exc.first.line + 1})" if exc.first is not None else ""
        raise fail(f"duplicate key {exc.name}{where}", "YAML keeps only the last one; remove one of them",
                   exc.mark.line + 1, exc.mark.column + 1) from None
    except NestedTooDeeply as exc:
        raise fail(f"document is nested too deeply (limit {MAX_DEPTH} levels)",
                   "a spec is a few levels deep; flatten the brackets", exc.mark.line + 1,
                   exc.mark.column + 1) from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = (exc.problem or exc.context or "invalid YAML").strip()
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        raise fail(f"invalid YAML: {_short(problem, 200)}", line=line, col=col) from None
    except YAMLError as exc:
        raise fail(f"invalid YAML: {_short(str(exc), 200)}") from None
    except RecursionError:
        raise fail(f"document is nested too deeply (limit {MAX_DEPTH} levels)") from None


class _DuplicateKey(Exception):
    def __init__(self, name: str, mark, first):
        super().__init__(name)
        self.name, self.mark, self.first = name, mark, first


class NestedTooDeeply(Exception):
    """A flow collection (``[`` or ``{``) opened deeper than MAX_DEPTH, at ``mark``."""

    def __init__(self, mark):
        super().__init__("nested too deeply")
        self.mark = mark


_SCANNERS: Dict[Any, Any] = {}


def depth_limited(base: Any = None) -> Any:
    """ruamel's scanner ``base`` (the round-trip one by default), except that a bracket opening a
    flow collection deeper than MAX_DEPTH stops the parse at that bracket (NestedTooDeeply).
    ruamel's cost grows with the square of the flow depth (10,000 `{` took 6 s of CPU before the
    nesting limit was checked on the parsed document); counted where the scanner opens each
    level, the refusal costs no more than the brackets before it."""
    if base is None:
        from ruamel.yaml.scanner import RoundTripScanner as base
    if base not in _SCANNERS:
        class Scanner(base):
            def fetch_flow_collection_start(self, TokenClass: Any, to_push: Any) -> None:
                if len(self.flow_context) >= MAX_DEPTH:
                    raise NestedTooDeeply(self.reader.get_mark())
                super().fetch_flow_collection_start(TokenClass, to_push)

        _SCANNERS[base] = Scanner
    return _SCANNERS[base]


class _HugeInt:
    """An integer written with more than MAX_INT_DIGITS digits: kept as a marker so that the
    walk reports it at its field, and never converted (Python refuses to print 4,300 digits)."""

    def __init__(self, digits: int):
        self.digits = digits


_CONSTRUCTOR: Any = None


def _constructor():
    """ruamel's round-trip constructor, except: a duplicate key is reported by name and place
    only (ruamel formats both values into its message: an alias bomb's value takes forever), and
    an integer of absurd length is a marker instead of a conversion that raises ValueError."""
    global _CONSTRUCTOR
    if _CONSTRUCTOR is not None:
        return _CONSTRUCTOR
    from ruamel.yaml.constructor import RoundTripConstructor

    class Constructor(RoundTripConstructor):
        def check_mapping_key(self, node, key_node, mapping, key, value) -> bool:
            if key in mapping:
                raise _DuplicateKey(_key_name(key), key_node.start_mark, self._first(node, key_node, key))
            return True

        def check_set_key(self, node, key_node, setting, key) -> None:
            if key in setting:
                raise _DuplicateKey(_key_name(key), key_node.start_mark, self._first(node, key_node, key))

        def _first(self, node, key_node, key):
            """Where the key was written first: the earlier key node that constructs to it."""
            for earlier, _ in node.value:
                if earlier is key_node:
                    break
                if earlier in self.constructed_objects:
                    try:
                        if self.constructed_objects[earlier] == key:
                            return earlier.start_mark
                    except Exception:  # a key type whose == fails: no place rather than a crash
                        continue
            return None

        def construct_yaml_int(self, node):
            written = node.value.replace("_", "").lstrip("+-")
            if written[:2].lower() in ("0x", "0o", "0b"):
                written = written[2:]
            if len(written) > MAX_INT_DIGITS:
                return _HugeInt(len(written))
            return super().construct_yaml_int(node)

    Constructor.add_constructor("tag:yaml.org,2002:int", Constructor.construct_yaml_int)
    _CONSTRUCTOR = Constructor
    return Constructor


def _key_name(key: Any) -> str:
    if isinstance(key, (str, int, float, bool)):
        return '"' + _short(str(key), 80) + '"'
    return "key"


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text):,} characters)"


def _walk(node: Any, path: SpecPath, positions: Positions, budget, depth: int, fail) -> Any:
    """Copy ruamel's round-trip objects into plain dict/list/str/int/float/bool/None,
    recording positions, counting nodes so aliases cannot expand without bound."""
    if isinstance(node, _Read):  # libyaml's path: read already
        return node.walk(positions, budget, fail)
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
    return _plain_scalar(node, path, positions, fail)


def _plain_scalar(node: Any, path: SpecPath, positions: Positions, fail) -> Any:
    """A scalar as _walk copies it: a plain Python value, or the located error of an integer
    too long to convert."""
    if isinstance(node, _HugeInt):
        line, col = positions.find(path)
        raise SpecError([error(path, f"an integer of {node.digits:,} digits is out of range",
                               f"trainspec reads integers of at most {MAX_INT_DIGITS} digits: no count, port "
                               "or timeout comes near; to mean text, quote it").at(fail.file, line, col)])
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
