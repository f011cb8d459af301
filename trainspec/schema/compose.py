"""Composition: ``extends:`` chains, ``--set`` overrides and ``--var`` values, applied to the
loaded data *before* validation, so that they are validated exactly like file content.

Merge rules (documented in the README): mappings merge key by key, recursively; lists and
scalars replace. A path written in a base file (``code``, ``environment.conda_file``, local
``inputs.*.path``) stays relative to the file it is written in. Every value remembers the file
it came from, so a problem inside an extended file is reported at that file's line, and a
problem in an override names the override.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from trainspec.core.diagnostics import SpecError, SpecPath, error, shown
from trainspec.core.files import in_repository, inside
from trainspec.core.fields import is_remote
from trainspec.core.records import replace
from trainspec.schema.loader import (MAX_DEPTH, Document, NestedTooDeeply, ReadProblem, depth_limited, is_link,
                                   load_bytes, path_text_problem, read_bounded, real_path, repository_root)

MAX_CHAIN = 16
_PATH_FIELDS: Tuple[SpecPath, ...] = (("code",), ("environment", "conda_file"), ("environment", "build", "path"))


def compose(file: str, sets: Sequence[str] = (), variables: Sequence[str] = ()) -> Document:
    """The spec in ``file`` with its ``extends`` chain merged underneath and the overrides on top."""
    chain = _chain(file)
    leaf = chain[-1]
    data: Any = {}
    origins: Dict[SpecPath, Document] = {}
    for doc in chain:
        content = dict(doc.data) if isinstance(doc.data, dict) else doc.data
        if isinstance(content, dict):
            content.pop("extends", None)
            if doc is not leaf:
                content = _rebase(content, os.path.dirname(doc.path), os.path.dirname(leaf.path))
        data = _merge(data, content, (), doc, origins) if isinstance(content, dict) else content
    composed = Document(file=leaf.file, path=leaf.path, data=data, positions=leaf.positions, raw=leaf.raw)
    composed.origins = origins
    composed.chain = tuple(doc.path for doc in chain)
    for text in sets:
        path, value = _parse_override(text, "--set")
        if not isinstance(composed.data, dict):
            break
        for written in (*_assign(composed.data, path, value), path):
            composed.overrides[written] = f"--set {text}"
    for text in variables:
        (name,), value = _parse_override(text, "--var", dotted=False)
        if isinstance(composed.data, dict):
            current = composed.data.get("vars")
            merged = dict(current) if isinstance(current, dict) else {}
            merged[name] = value
            composed.data["vars"] = merged
            composed.overrides[("vars", name)] = f"--var {text}"
    return composed


def _chain(file: str) -> List[Document]:
    """[root base, ..., the spec itself]."""
    docs: List[Document] = []
    seen: List[Path] = []
    current: Optional[str] = file
    via: Optional[Tuple[Document, str]] = None
    project: Optional[Path] = None  # the leaf spec's repository: every base stays inside it
    while current is not None:
        try:
            resolved = real_path(current)
            if via is None:
                _spec_stays_inside(current, resolved)
            raw = read_bounded(current)
        except ReadProblem as exc:
            if via is None:  # the spec itself, as the command line named it
                raise SpecError([error((), exc.message, exc.hint).at(named(current), 1, 1)]) from None
            parent, text = via
            if exc.missing:
                raise SpecError([parent.locate(error(("extends",), f"extended file '{text}' does not exist",
                                                     "extends is relative to the file it is written in"))]) from None
            raise SpecError([parent.locate(error(("extends",), f"'{text}' {exc.message}",
                                                 exc.hint or "extends names a base spec file"))]) from None
        if resolved in seen:
            names = " -> ".join([*(str(p) for p in seen), str(resolved)])
            doc, _ = via
            raise SpecError([doc.locate(error(("extends",), f"extends forms a cycle: {names}",
                                              "a spec may extend a base, never itself through a chain"))])
        if len(seen) >= MAX_CHAIN:
            doc, _ = via
            raise SpecError([doc.locate(error(("extends",), f"extends chain longer than {MAX_CHAIN} files"))])
        doc = load_bytes(raw, named(current), resolved)
        seen.append(resolved)
        docs.append(doc)
        parent_ref = doc.data.get("extends") if isinstance(doc.data, dict) else None
        if parent_ref is None:
            break
        if not isinstance(parent_ref, str) or not parent_ref:
            raise SpecError([doc.locate(error(("extends",), "expected the path of one base spec",
                                              "e.g. extends: ../base.yaml"))])
        problem = path_text_problem(parent_ref)
        if problem:
            raise SpecError([doc.locate(error(("extends",), f"the path {problem}", "e.g. extends: ../base.yaml"))])
        if len(docs) == 1:  # the spec itself: its repository holds the whole chain
            project = repository_root(resolved.parent)
        outside = _outside(parent_ref, os.path.dirname(resolved), project) if project is not None else None
        if outside:
            raise SpecError([doc.locate(error(("extends",), outside, "extends names a base spec inside the "
                                              "repository, relative to the file it is written in"))])
        current = os.path.join(os.path.dirname(current), parent_ref)
        via = (doc, parent_ref)
    return list(reversed(docs))


def named(path: str) -> str:
    """``path`` as diagnostics name it: ``.`` parts and ``folder/..`` folded away, as
    ``os.path.normpath`` does (``specs/../bases/h100.yaml`` -> ``bases/h100.yaml``), except after a
    folder that is a symbolic link: the file system reads ``link/..`` as the parent of the link's
    target, so that part is kept as written. No link is resolved: a base reached through a linked
    folder keeps the path that names it."""
    absolute = path.startswith("/")
    out: List[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if absolute and not out:
                continue  # /.. is /
            if out and out[-1] != ".." and not is_link(("/" if absolute else "") + "/".join(out)):
                out.pop()
                continue
        out.append(part)
    text = "/".join(out)
    return ("/" + text) if absolute else (text or ".")


def _spec_stays_inside(file: str, resolved: Path) -> None:
    """A spec file in a repository that is a link leading out of it (`specs/x.yaml ->
    /home/runner/secret.yaml`) is never read: ReadProblem. A spec named outside any repository is
    the user's own file."""
    root = repository_root(os.path.dirname(os.path.abspath(file)))
    if root is not None and not in_repository(resolved, root):
        where = f"inside {root / '.git'}" if inside(resolved, root) else f"outside the repository {root}"
        raise ReadProblem(f"is a symbolic link to {resolved}, {where}: never read",
                          "a spec is a regular file inside the repository")


def _outside(text: str, folder: str, project: Path) -> Optional[str]:
    """Why the base spec ``text`` (relative to ``folder``) is not read: an absolute path, or one
    that leads (through a link or `..`) out of ``project``; None when it stays inside."""
    where = f"the repository {project}"
    if os.path.isabs(text):
        return f"'{text}' is an absolute path: a base spec is read only inside {where}"
    try:
        real = real_path(os.path.join(folder, text))
    except ReadProblem:
        return None  # a loop: reading it says so
    if in_repository(real, project):
        return None
    where = f"inside {project / '.git'}" if inside(real, project) else f"outside {where}"
    return f"'{text}' leads to {real}, {where}: trainspec never reads a spec from there"


def _merge(base: Any, child: Any, path: SpecPath, doc: Document, origins: Dict[SpecPath, Document]) -> Any:
    if isinstance(base, dict) and isinstance(child, dict):
        out = dict(base)
        for key, value in child.items():
            out[key] = _merge(base.get(key), value, path + (key,), doc, origins)
        origins[path] = origins.get(path, doc) if path else doc
        return out
    _forget(base, path, origins)
    _claim(child, path, doc, origins)
    return child


def _forget(value: Any, path: SpecPath, origins: Dict[SpecPath, Document]) -> None:
    """The paths inside ``value`` (the base's value at ``path``, now replaced) come from no file:
    walked from the value itself, so that replacing it costs its size, not the size of every path
    recorded so far (a scan of ``origins`` per replaced value made a 19,500-item list take 30 s)."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for key, item in items:
        origins.pop(path + (key,), None)
        _forget(item, path + (key,), origins)


def _claim(value: Any, path: SpecPath, doc: Document, origins: Dict[SpecPath, Document]) -> None:
    """Every path inside ``value`` now comes from ``doc`` (a replaced list or mapping)."""
    origins[path] = doc
    if isinstance(value, dict):
        for key, item in value.items():
            _claim(item, path + (key,), doc, origins)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _claim(item, path + (index,), doc, origins)


def _rebase(content: Dict[str, Any], base_dir: str, leaf_dir: str) -> Dict[str, Any]:
    """Relative paths in a base file are relative to it; make them relative to the spec."""
    def fix(value: Any) -> Any:
        if not isinstance(value, str) or is_remote(value) or os.path.isabs(value):
            return value
        return Path(os.path.relpath(os.path.join(base_dir, value), leaf_dir)).as_posix()

    out = dict(content)
    for path in _PATH_FIELDS:
        _update(out, path, fix)
    inputs = out.get("inputs")
    if isinstance(inputs, dict):
        out["inputs"] = {k: ({**v, "path": fix(v.get("path"))} if isinstance(v, dict) and "path" in v else v)
                         for k, v in inputs.items()}
    return out


def _update(data: Dict[str, Any], path: SpecPath, fn) -> None:
    node: Any = data
    for key in path[:-1]:
        if not isinstance(node, dict) or not isinstance(node.get(key), dict):
            return
        node[key] = dict(node[key])
        node = node[key]
    if isinstance(node, dict) and path[-1] in node:
        node[path[-1]] = fn(node[path[-1]])


def _parse_override(text: str, flag: str, dotted: bool = True) -> Tuple[SpecPath, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise SpecError([replace(error((), "expected KEY=VALUE",
                                       "e.g. --set resources.nodes=4" if dotted else "e.g. --var epochs=3"),
                                 file=f"{flag} {text}")])
    parts = tuple(key.strip().split(".")) if dotted else (key.strip(),)
    if any(not p for p in parts):
        raise SpecError([replace(error((), f"empty part in '{key}'"), file=f"{flag} {text}")])
    try:
        return parts, _scalar(raw)
    except (NestedTooDeeply, RecursionError):
        raise SpecError([replace(error((), f"the value is nested too deeply (limit {MAX_DEPTH} levels)",
                                       "an override sets one value or a short list"),
                                 file=f"{flag} {shown(text)}")]) from None


def _scalar(raw: str) -> Any:
    """A value as YAML would read it (4 -> int, true -> bool, [a, b] -> list), else the text.
    Deep flow nesting stops at the bracket too deep (NestedTooDeeply), before it costs seconds."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError
    from ruamel.yaml.scanner import Scanner

    if raw == "":
        return ""
    yaml = YAML(typ="safe", pure=True)
    yaml.Scanner = depth_limited(Scanner)
    try:
        value = yaml.load(raw)
    except (YAMLError, ValueError):  # ValueError: an integer Python will not convert (4,300 digits)
        return raw
    return raw if value is None and raw.strip() not in ("null", "~") else value


def _assign(data: Dict[str, Any], path: SpecPath, value: Any) -> List[SpecPath]:
    """``value`` at ``path`` in ``data``; returns the paths above it that the override made a
    mapping of (they were missing, or not a mapping: ``--set resources.nodes.x=1`` makes
    resources.nodes one): what is wrong there is the override's to answer for, so a diagnostic
    at such a path is located at the ``--set``, never at a line of the spec."""
    node, made = data, []
    for depth, key in enumerate(path[:-1]):
        child = node.get(key)
        if not isinstance(child, dict):
            made.append(path[:depth + 1])
        child = dict(child) if isinstance(child, dict) else {}
        node[key] = child
        node = child
    node[path[-1]] = value
    return made
