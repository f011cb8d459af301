"""The spec's structure (fields, types, ranges), validated by pydantic-core from a snapshot of the models' core schema.

model.py defines the spec with pydantic models, and stays the one definition. But importing
pydantic and building those classes costs ~70 ms at every start (README, "Speed"), and
the validator pydantic builds is pydantic-core's anyway. So the core schema pydantic
generates from model.py is stored in ``spec.core.json`` and handed to pydantic-core directly:
the same validator, the same errors, the same defaults, without the import.

    python docs/gen_structure.py    # after changing model.py

tests/test_structure.py fails when the file is stale and checks, over the example specs, the
bad-spec corpus and generated ones, that this validator and pydantic's agree. The snapshot
serves any pydantic-core of the release it was taken with (same major.minor: patch releases
keep the core-schema format); with another release the schema is generated from model.py in
memory instead (slower, the same result).

Validated mappings become ``Record`` objects: read-only attributes, like the pydantic models
they mirror; ``written()`` gives back what the spec itself wrote.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, Optional

SNAPSHOT = Path(__file__).with_name("spec.core.json")
_FUNCTIONS = ("trainspec.core.fields", "builtins")  # where a snapshot may name a function


class Record:
    """A validated mapping of the spec (``spec.resources``, ``spec.targets.<name>``, ...)."""

    # the slots pydantic-core fills when it builds a model instance
    __slots__ = ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.__dict__ == self.__dict__

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"

    def __reduce__(self) -> Any:
        # the record classes are made when the validator is built, so a pickle names the class
        # (check's worker process sends its outcomes to the process that started it)
        slots = {name: getattr(self, name, None) for name in Record.__slots__ if name != "__dict__"}
        return _unpickled, (type(self).__name__, self.__dict__, slots)


def _unpickled(name: str, values: Dict[str, Any], slots: Dict[str, Any]) -> Record:
    """A Record pickled by ``Record.__reduce__``, as this process's class ``name``."""
    validator()
    record = object.__new__(_records[name])
    for slot, value in {"__dict__": values, **slots}.items():
        object.__setattr__(record, slot, value)
    return record


def written(value: Any) -> Any:
    """What the spec wrote, validated: Records -> dicts of their set fields, recursively (as
    pydantic's ``model_dump(exclude_unset=True)``)."""
    if isinstance(value, Record):
        return {k: written(v) for k, v in value.__dict__.items() if k in value.__pydantic_fields_set__}
    if isinstance(value, dict):
        return {k: written(v) for k, v in value.items()}
    if isinstance(value, list):
        return [written(v) for v in value]
    return value


def _compiled() -> Any:
    """pydantic-core's compiled module (SchemaValidator, ValidationError), loaded without running
    its package's ``__init__``: that builds core_schema's typed dicts, ~40 ms of every start (issue
    30), which validating from a stored schema never uses. It is the same module object the package
    imports when something imports it later (pydantic, for hints): sys.modules holds it by its full
    name. Anything unexpected: the ordinary import."""
    name = "pydantic_core._pydantic_core"
    if name in sys.modules:
        return sys.modules[name]
    try:
        import importlib.machinery
        import importlib.util

        package = importlib.util.find_spec("pydantic_core")  # finds the folder; runs nothing
        for folder in (package.submodule_search_locations or []) if package else []:
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                file = os.path.join(folder, "_pydantic_core" + suffix)
                if os.path.isfile(file):
                    spec = importlib.util.spec_from_file_location(name, file)
                    module = importlib.util.module_from_spec(spec)
                    sys.modules[name] = module
                    try:
                        spec.loader.exec_module(module)
                    except BaseException:
                        del sys.modules[name]
                        raise
                    return module
    except Exception:  # noqa: BLE001 - an unusual install: the package's own import below
        pass
    import pydantic_core._pydantic_core as module

    return module


_core = _compiled()
ValidationError = _core.ValidationError


# --- taking the snapshot (needs pydantic) -----------------------------------------------------

def take() -> Dict[str, Any]:
    """The core schema of model.Spec as JSON-able data: classes and functions by name."""
    from pydantic import BaseModel
    from pydantic._internal._config import ConfigWrapper

    from trainspec.schema.model import Spec

    def plain(node: Any) -> Any:
        if isinstance(node, dict):
            if node.get("type") == "definition-ref":
                raise ValueError("recursive models are not supported by the snapshot")
            out: Dict[str, Any] = {}
            for key, value in node.items():
                if key in ("metadata", "serialization", "ref"):  # JSON Schema and dumping only; ref has an id()
                    continue
                if key == "cls":
                    out[key] = {"$record": value.__name__}
                elif key == "default_factory" and isinstance(value, type) and issubclass(value, BaseModel):
                    # Field(default_factory=Resources): the defaults of an empty mapping, nothing set
                    out["default"], out["validate_default"] = {}, True
                elif key == "default_factory_takes_data":
                    continue
                else:
                    out[key] = plain(value)
            return out
        if isinstance(node, (list, tuple)):
            return [plain(v) for v in node]
        if callable(node):
            if node.__module__ not in _FUNCTIONS:
                raise ValueError(f"{node!r}: a snapshot may only call functions of {', '.join(_FUNCTIONS)}")
            return {"$function": f"{node.__module__}:{node.__qualname__}"}
        if node is None or isinstance(node, (str, int, float, bool)):
            return node
        raise ValueError(f"{node!r} cannot be stored in the snapshot")

    return {"pydantic_core": _core.__version__,
            "config": plain(ConfigWrapper(Spec.model_config).core_config(None)),
            "schema": plain(Spec.__pydantic_core_schema__)}


def write(path: Path = SNAPSHOT) -> None:
    path.write_text(json.dumps(take(), indent=1) + "\n")  # field order is error order: keep it


# --- using it (pydantic-core only) -------------------------------------------------------------

def _marker(node: Dict[str, Any], records: Dict[str, type]) -> Any:
    """What a mapping of the snapshot stands for: the Record class it names (``$record``), the
    function it names (``$function``), or itself."""
    if "$record" in node:
        name = node["$record"]
        if name not in records:
            records[name] = type(name, (Record,), {"__slots__": ()})
        return records[name]
    if "$function" in node:
        import importlib

        module, _, name = node["$function"].partition(":")
        if module not in _FUNCTIONS:
            raise ValueError(f"snapshot names a function outside {', '.join(_FUNCTIONS)}: {module}")
        return getattr(importlib.import_module(module), name)
    return node


def _resolve(node: Any, records: Dict[str, type]) -> Any:
    """``node`` (what ``take`` returns) with its markers replaced, recursively."""
    if isinstance(node, dict):
        return _marker({k: _resolve(v, records) for k, v in node.items()}, records)
    if isinstance(node, list):
        return [_resolve(v, records) for v in node]
    return node


def compatible(taken_with: str, installed: str = _core.__version__) -> bool:
    """A snapshot serves the pydantic-core release it was taken with: same major.minor."""
    return taken_with.split(".")[:2] == installed.split(".")[:2]


_validator: Optional[Any] = None
_records: Dict[str, type] = {}  # the validator's Record classes, by name


def validator() -> Any:
    """The spec validator (a pydantic_core.SchemaValidator), built once per process."""
    global _validator
    if _validator is None:
        # the markers are replaced as the JSON is read (each mapping once, innermost first): a
        # second walk over the parsed snapshot cost twice the parse (docs/speed.md)
        snapshot = json.loads(SNAPSHOT.read_text(), object_hook=lambda node: _marker(node, _records))
        if not compatible(snapshot["pydantic_core"]):
            snapshot = take()  # another pydantic-core: its own schema, from the models
            snapshot["schema"] = _resolve(snapshot["schema"], _records)
        _validator = _core.SchemaValidator(snapshot["schema"], snapshot["config"])
    return _validator


def parse(data: Any) -> Any:
    """The validated spec (a Record tree), or pydantic_core.ValidationError."""
    return validator().validate_python(data)

