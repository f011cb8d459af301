"""Structure errors, explained: pydantic-core's errors as diagnostics with hints.

Only imported when a spec has a structure error, so it may use the pydantic models
(model.py) for what a mapping allows: the did-you-mean for an unknown key, the hint for a
field.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Dict, List, Optional, Tuple

from pydantic import BaseModel

from trainspec.core.diagnostics import Diagnostic, SpecPath, error
from trainspec.schema.model import Spec

_TYPE_WORDS = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
               dict: "a mapping", list: "a list", type(None): "null"}


def diagnostic(err: Dict[str, Any]) -> Diagnostic:
    """One pydantic-core error (after merge_union_branches) as a diagnostic at its field."""
    path = tuple(err["loc"])
    kind = err["type"]
    given = err.get("input")
    if kind == "extra_forbidden":
        parent, key = path[:-1], str(path[-1])
        allowed = _allowed_keys(parent)
        # a key written one level too high (`--set nodes=2`, `sku:` at the top) means the field of
        # that name below: suggest its full path before a sibling that merely looks alike
        deeper = [".".join(p) for p in _field_paths(_model_at(parent)) if len(p) > 1 and p[-1] == key]
        close = deeper[:1] or difflib.get_close_matches(key, allowed, n=1, cutoff=0.6) \
            or [k for k in allowed if k.startswith(key) or key.startswith(k)][:1]
        hint = f"did you mean '{close[0]}'?" if close else (f"allowed keys: {', '.join(allowed)}" if allowed else None)
        return error(path, f"unknown key '{key}'", hint, on_key=True)
    if kind == "missing":
        return error(path, "is required", _field_hint(path), on_key=True)
    got = f", got {_describe(given)}" if kind not in ("missing",) else ""
    message = err["msg"]
    if kind == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        close = difflib.get_close_matches(str(given), re.findall(r"'([^']*)'", expected), n=1)
        hint = f"did you mean '{close[0]}'?" if close else _field_hint(path)
        words = f"one of {expected}" if " or " in expected else expected
        return error(path, f"expected {words}{got}", hint)
    if kind == "string_pattern_mismatch":
        return error(path, f"{_pattern_words(path)}{got}", _field_hint(path))
    if kind == "union":
        words = message.rsplit(", ", 1)
        return error(path, f"{' or '.join(words) if len(words) == 2 else message}{got}", _field_hint(path))
    if kind.startswith("value_error"):
        message = message.removeprefix("Value error, ")
        return error(path, f"{message}{got}", _field_hint(path))
    message = message[0].lower() + message[1:] if message else message
    message = message.replace("input should be", "expected")
    return error(path, f"{message}{got}", _field_hint(path))


_BRANCHES = {"str": "a string", "int": "an integer", "float": "a number", "bool": "a boolean"}


def merge_union_branches(errors: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """pydantic reports a value that fits no branch of Union[str, int, ...] once per branch
    (vars.x.str, vars.x.int, ...): say it once, at the value, listing what would fit."""
    merged: List[Dict[str, Any]] = []
    seen: Dict[tuple, Dict[str, Any]] = {}
    for err in errors:
        loc = tuple(err["loc"])
        if loc and loc[-1] in _BRANCHES:
            key = loc[:-1]
            if key in seen:
                seen[key]["msg"] += f", {_BRANCHES[loc[-1]]}"
                continue
            seen[key] = {**err, "loc": key, "type": "union", "msg": f"expected {_BRANCHES[loc[-1]]}"}
            merged.append(seen[key])
        else:
            merged.append(err)
    return merged


def _describe(value: Any) -> str:
    word = _TYPE_WORDS.get(type(value), type(value).__name__)
    if isinstance(value, (dict, list)):
        return word
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({word})" if not isinstance(value, str) else text


def _model_at(path: SpecPath):
    """The pydantic model class describing the mapping at ``path`` (None for free-form maps)."""
    model: Any = Spec
    in_dict = False  # the next part is a key of Dict[str, Model]
    for part in path:
        if in_dict:
            in_dict = False
            continue
        info = model.model_fields.get(part) if model is not None and isinstance(part, str) else None
        if info is None:
            return None
        model, in_dict = _unwrap(info.annotation)
    return None if in_dict else model


def _unwrap(annotation) -> Tuple[Any, bool]:
    """Optional[M] -> (M, False); Dict[str, M] -> (M, True); anything else -> (None, False)."""
    from typing import get_args, get_origin

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    if get_origin(annotation) is dict:
        value = get_args(annotation)[1]
        return (value, True) if isinstance(value, type) and issubclass(value, BaseModel) else (None, False)
    for arg in get_args(annotation):
        found = _unwrap(arg)
        if found[0] is not None:
            return found
    return None, False


def _field_paths(model, prefix: Tuple[str, ...] = ()) -> List[Tuple[str, ...]]:
    """Every field path below ``model`` (through nested models, not through free-form maps)."""
    if model is None:
        return []
    paths = []
    for name, info in model.model_fields.items():
        paths.append(prefix + (name,))
        inner, in_dict = _unwrap(info.annotation)
        if inner is not None and not in_dict:
            paths += _field_paths(inner, prefix + (name,))
    return paths


def _allowed_keys(parent: SpecPath) -> List[str]:
    model = _model_at(parent)
    return sorted(model.model_fields) if model is not None else []


_HINTS = {
    ("version",): "write version: 1",
    ("name",): "lower case letters, digits, - and _, starting with a letter or digit, at most 63 characters",
    ("code",): "a directory relative to the spec, e.g. ../examples/mnist",
    ("command",): "e.g. python train.py --num_nodes {{ nodes }} --devices {{ procs_per_node }}",
    ("timeout",): "a duration, e.g. 2d, 24h, 1h30m or 3600 (seconds)",
    ("resources", "nodes"): "an integer >= 1, e.g. nodes: 2",
    ("resources", "gpus_per_node"): "an integer, at most the SKU's GPU count",
    ("resources", "procs_per_node"): "an integer >= 1",
    ("resources", "shm_size"): "an integer and a unit, e.g. 16g or 512m",
    ("resources", "cpus_per_node"): "an integer >= 1, at most the SKU's vCPUs, e.g. cpus_per_node: 80",
    ("resources", "memory_per_node"): "a number and a unit Mi, Gi, Ti (binary) or M, G, T (decimal), e.g. 900Gi",
    ("distribution", "master_port"): "a port number between 1024 and 65535",
}


def _target_table(path: SpecPath, table: str) -> Tuple[Dict[Tuple[str, ...], str], SpecPath]:
    """Under targets.<name>: that target's own HINTS or PATTERN_WORDS, and the path below it."""
    from trainspec.schema.vocabulary import TARGETS
    from trainspec.schema.vocabulary import settings

    if len(path) > 2 and path[0] == "targets" and path[1] in TARGETS:
        return getattr(settings(str(path[1])), table, {}), path[2:]
    return {}, path


def _field_hint(path: SpecPath) -> Optional[str]:
    keys = tuple(p for p in path if isinstance(p, str))
    own, below = _target_table(keys, "HINTS")
    return _lookup(own, below) or _HINTS.get(keys)


def _pattern_words(path: SpecPath) -> str:
    if len(path) > 2 and path[0] == "secrets":  # secrets.<NAME>.<key>...: the reference's own words
        return _secret_words(tuple(p for p in path[2:] if isinstance(p, str))) or "has the wrong format"
    if path[-1:] == ("name",) and path[:1] != ("targets",):  # a target's own names have its words below
        return "is not a valid job name"
    if path[-1:] == ("shm_size",):
        return "is not a size like 16g"
    if tuple(path) == ("resources", "memory_per_node"):
        return "is not a memory quantity like 900Gi or 512G"
    if tuple(path) == ("environment", "python"):  # a target's python is an interpreter: its own words below
        return "expected a Python version like 3.11"
    own, below = _target_table(path, "PATTERN_WORDS")
    return _lookup(own, tuple(p for p in below if isinstance(p, str))) or "has the wrong format"


def _secret_words(path: Tuple[str, ...]) -> Optional[str]:
    from trainspec.schema.vocabulary import TARGETS
    from trainspec.schema.vocabulary import settings

    for name in TARGETS:
        reference = settings(name).SECRET_REFERENCE
        if reference.key == path[0]:
            return (reference.words or {}).get(path[1:])
    return None


def _lookup(table, path):
    """A target's entry for ``path``; ``*`` in an entry stands for any key of a mapping
    (``("volumes", "*", "pvc", "claim")``)."""
    if path in table:
        return table[path]
    return next((text for key, text in table.items() if len(key) == len(path)
                 and all(k == "*" or k == p for k, p in zip(key, path))), None)
