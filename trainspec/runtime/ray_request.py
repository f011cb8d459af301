"""The Ray job request, defined once: what trainspec's Ray target writes and its driver runs.

The compiler builds a ``Request`` and writes ``to_json()`` as ``trainspec_ray_job.json``; the
driver (``ray_driver.py``) reads that file with ``read_request``, which checks every field and
names the file and the field of a bad one. Each field carries its own check, so a request the
compiler could build but the driver would refuse fails at compile time already.

Shipped as ``trainspec_ray_request.py`` beside ``trainspec_ray_driver.py`` in Ray jobs. One
file, standard library only, Python >= 3.8, nothing else of trainspec.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Callable, Dict, Optional

LAUNCHERS = ("per-process", "per-node")
PLACEMENTS = ("STRICT_SPREAD", "SPREAD", "PACK")
MAX_TIMEOUT = 10 ** 12  # seconds (31,000 years): what a float deadline on time.monotonic() holds exactly


class RequestError(ValueError):
    """A request that is not one; the message names the field (and, when read, the file)."""


def _is_int(value: object, low: int, high: int = 1 << 31) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _is_env(value: object) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and k and (k[0].isalpha() or k[0] == "_") and all(c.isalnum() or c == "_" for c in k)
        and isinstance(v, str) for k, v in value.items())


def _checked(valid: Callable[[object], bool], expected: str):
    """A field of the request: how to tell a valid value, and what to say when it is not."""
    return field(metadata={"valid": valid, "expected": expected})


@dataclass(frozen=True)
class Request:
    """The job: its shape, not how to run it (the driver's command line says that)."""

    nodes: int = _checked(lambda v: _is_int(v, 1), "an integer >= 1")
    # per-node: the workers the command starts on each node
    procs_per_node: int = _checked(lambda v: _is_int(v, 1), "an integer >= 1")
    # per-process: one actor per process; per-node: one per node, the command spawns the workers
    launcher: str = _checked(lambda v: v in LAUNCHERS, " or ".join(LAUNCHERS))
    gpus_per_node: int = _checked(lambda v: _is_int(v, 0), "an integer >= 0")
    cpus_per_node: float = _checked(
        lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf, "a number > 0")
    placement: str = _checked(lambda v: v in PLACEMENTS, " or ".join(PLACEMENTS))
    # relative to the request file's folder as written; read_request makes it absolute
    workdir: str = _checked(lambda v: isinstance(v, str) and v != "", "a folder, relative to the request")
    # set in every process
    env: Dict[str, str] = _checked(_is_env, "a mapping of variable names to strings")
    # one shell string, run by bash -c
    command: str = _checked(lambda v: isinstance(v, str) and v.strip() != "", "a non-empty shell command")
    # None: a port found free on rank 0's node when the job starts
    master_port: Optional[int] = _checked(lambda v: v is None or _is_int(v, 1, 65535), "null or a TCP port (1-65535)")
    # the spec's timeout in seconds, which the driver enforces (its --timeout overrides); None: no limit
    timeout: Optional[int] = _checked(lambda v: v is None or _is_int(v, 1, MAX_TIMEOUT),
                                      "null or a number of seconds (1-%d)" % MAX_TIMEOUT)

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if not item.metadata["valid"](value):
                raise RequestError("%s: expected %s, got %s" % (item.name, item.metadata["expected"],
                                                                json.dumps(value, default=repr)))

    def to_json(self) -> bytes:
        """The request file's bytes: sorted keys, two-space indent, a final newline (deterministic)."""
        return (json.dumps(asdict(self), indent=2, sort_keys=True) + "\n").encode()

    @classmethod
    def from_dict(cls, data: object) -> Request:
        """The request in parsed JSON, every field checked (RequestError names the field)."""
        if not isinstance(data, dict):
            raise RequestError("a job request is a JSON object")
        names = [item.name for item in fields(cls)]
        unknown = sorted(set(data) - set(names))
        missing = sorted(set(names) - set(data))
        if unknown or missing:
            raise RequestError("; ".join((["unknown field(s) %s" % ", ".join(unknown)] if unknown else [])
                                         + (["missing field(s) %s" % ", ".join(missing)] if missing else [])))
        return cls(**data)


def read_request(path: str) -> Request:
    """The request in the file ``path``, checked (RequestError names the file and the field), its
    workdir made absolute and its CPUs a float, as the driver uses them."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as error:
        raise RequestError("cannot read the job request %s: %s" % (path, error)) from None
    try:
        request = Request.from_dict(data)
    except RequestError as error:
        raise RequestError("%s: %s" % (path, error)) from None
    return replace(request, workdir=os.path.join(os.path.dirname(os.path.abspath(path)), request.workdir),
                   cpus_per_node=float(request.cpus_per_node))
