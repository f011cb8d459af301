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
from typing import Dict, Optional

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


# every field of the request, in order: its name, how to tell a valid value, and what to say when
# it is not (a plain class, not a dataclass: `dataclasses` is ~10 ms of the compiler's start-up)
FIELDS = (
    ("nodes", lambda v: _is_int(v, 1), "an integer >= 1"),
    # per-node: the workers the command starts on each node
    ("procs_per_node", lambda v: _is_int(v, 1), "an integer >= 1"),
    # per-process: one actor per process; per-node: one per node, the command spawns the workers
    ("launcher", lambda v: v in LAUNCHERS, " or ".join(LAUNCHERS)),
    ("gpus_per_node", lambda v: _is_int(v, 0), "an integer >= 0"),
    ("cpus_per_node", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf,
     "a number > 0"),
    ("placement", lambda v: v in PLACEMENTS, " or ".join(PLACEMENTS)),
    # relative to the request file's folder as written; read_request makes it absolute
    ("workdir", lambda v: isinstance(v, str) and v != "", "a folder, relative to the request"),
    # set in every process
    ("env", _is_env, "a mapping of variable names to strings"),
    # one shell string, run by bash -c
    ("command", lambda v: isinstance(v, str) and v.strip() != "", "a non-empty shell command"),
    # None: a port found free on rank 0's node when the job starts
    ("master_port", lambda v: v is None or _is_int(v, 1, 65535), "null or a TCP port (1-65535)"),
    # the spec's timeout in seconds, which the driver enforces (its --timeout overrides); None: no limit
    ("timeout", lambda v: v is None or _is_int(v, 1, MAX_TIMEOUT),
     "null or a number of seconds (1-%d)" % MAX_TIMEOUT),
)


class Request:
    """The job: its shape, not how to run it (the driver's command line says that). A value: equal
    to another with the same fields; ``replace`` makes a changed copy."""

    __slots__ = tuple(name for name, _, _ in FIELDS)

    def __init__(self, nodes: int, procs_per_node: int, launcher: str, gpus_per_node: int, cpus_per_node: float,
                 placement: str, workdir: str, env: Dict[str, str], command: str, master_port: Optional[int],
                 timeout: Optional[int]) -> None:
        self.nodes = nodes
        self.procs_per_node = procs_per_node
        self.launcher = launcher
        self.gpus_per_node = gpus_per_node
        self.cpus_per_node = cpus_per_node
        self.placement = placement
        self.workdir = workdir
        self.env = env
        self.command = command
        self.master_port = master_port
        self.timeout = timeout
        for name, valid, expected in FIELDS:
            value = getattr(self, name)
            if not valid(value):
                raise RequestError("%s: expected %s, got %s" % (name, expected, json.dumps(value, default=repr)))

    def as_dict(self) -> Dict[str, object]:
        return {name: getattr(self, name) for name in self.__slots__}

    def replace(self, **changes: object) -> Request:
        """A copy with ``changes`` (by field name), checked as a new request is."""
        return Request(**{**self.as_dict(), **changes})  # type: ignore[arg-type]

    def __eq__(self, other: object) -> bool:
        return self.as_dict() == other.as_dict() if isinstance(other, Request) else NotImplemented

    __hash__ = None  # type: ignore[assignment]  # env is a dict

    def __repr__(self) -> str:
        return "Request(%s)" % ", ".join("%s=%r" % item for item in self.as_dict().items())

    def to_json(self) -> bytes:
        """The request file's bytes: sorted keys, two-space indent, a final newline (deterministic)."""
        return (json.dumps(self.as_dict(), indent=2, sort_keys=True) + "\n").encode()

    @classmethod
    def from_dict(cls, data: object) -> Request:
        """The request in parsed JSON, every field checked (RequestError names the field)."""
        if not isinstance(data, dict):
            raise RequestError("a job request is a JSON object")
        names = [name for name, _, _ in FIELDS]
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
    return request.replace(workdir=os.path.join(os.path.dirname(os.path.abspath(path)), request.workdir),
                           cpus_per_node=float(request.cpus_per_node))
