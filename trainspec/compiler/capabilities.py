"""What each target cannot run, as data: one catalogue of spec features, one table per target.

A feature (``Feature``) is something a spec can say that some platform cannot do as written:
spot capacity, a registered Azure ML environment, an input that is a URL. The catalogue gives
each one its spec path, where it occurs in a spec, and a line for the matrix. A target states
what it cannot run as a table next to its ``cannot_express``, the way a sqlglot dialect states
what it lacks as data::

    CANNOT_RUN = {
        Feature.SPOT: unsupported("spot capacity: the partition decides", "remove resources.spot", fatal=False),
        Feature.ENV_AZUREML: unsupported(hint="set targets.x.setup / python"),   # the standard wording
        Feature.SHM_SIZE: unsupported("...", when=only("without environment.image", lambda valid: ...)),
    }

``check(NAME, CANNOT_RUN, valid)`` turns the table into diagnostics at the spec path of every
occurrence. ``unsupported`` reads "<target> cannot express <what>" (base.unsupported), an error,
or a warning with ``fatal=False``; ``problem`` is a message as written. A part left out takes the
feature's standard wording (``Feature.X.standard``); a message or hint may name ``{spec.a.b}``,
the fields an occurrence carries (``{path}`` of an input) and fields the target passes to check().
What depends on more than a feature being there (torchrun's arguments, the variables a command
reads, a target's own settings) stays code in ``cannot_express``, beside the table.

``python docs/gen_capabilities.py`` writes the feature x
target matrix; ``--check`` exits 1 when the page is stale (tests/test_capabilities.py).
"""

from __future__ import annotations

import enum
import re
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from trainspec.core.diagnostics import Diagnostic, SpecPath, error, warning
from trainspec.core.fields import is_remote
from trainspec.core.records import Record
from trainspec.compiler import base

Occurrence = Tuple[SpecPath, Dict[str, str]]  # where in the spec, and the fields a message may name


# --- where a feature occurs ---------------------------------------------------------------------

def _fields(*names: str):
    """The fields each occurrence carries (what a message may name besides ``spec``)."""
    def mark(find):
        find.fields = names
        return find
    return mark


def _at(path: SpecPath, test: Callable[[Any], Any]) -> Callable[[Any], List[Occurrence]]:
    """A feature at one fixed path: there when ``test(valid)`` holds."""
    return _fields()(lambda valid: [(path, {})] if test(valid) else [])


def _inputs(test: Callable[[Any, Any], Any], key: str = "path") -> Callable[[Any], List[Occurrence]]:
    """A feature of each input with a path (at ``inputs.<name>.<key>``) for which ``test(valid, item)`` holds."""
    return _fields("name", "path", "mode")(
        lambda valid: [(("inputs", name, key), {"name": name, "path": item.path, "mode": item.mode})
                       for name, item in valid.spec.inputs.items() if item.path is not None and test(valid, item)])


def _outputs(test: Callable[[Any], Any], key: str) -> Callable[[Any], List[Occurrence]]:
    return _fields("name", "path")(lambda valid: [(("outputs", name, key), {"name": name, "path": item.path})
                                                 for name, item in valid.spec.outputs.items() if test(item)])


@_fields("ref")
def _data_in_env(valid) -> List[Occurrence]:
    """Each env key whose value names an input or output (``{{ outputs.x }}``, what an imported
    ``${{outputs.x}}`` becomes), with the first one named as ``ref``."""
    def marker(kind: str, name: str) -> str:
        return f"\x00{kind}.{name}\x00"

    out: List[Occurrence] = []
    for key, value in valid.spec.env.items():
        named = re.findall(r"\x00([^\x00]+)\x00", valid.render(("env", key), value, marker))
        if named:
            out.append((("env", key), {"ref": f"{{{{ {named[0]} }}}}"}))
    return out


def _explicit_launcher(name: str):
    # TensorFlow has a launcher of its own (ValidSpec.launcher); the default launcher (per-process
    # for one process, per-node for several) is one every target runs, so only a launcher the spec
    # names can be one it cannot
    return lambda valid: valid.spec.framework != "tensorflow" and valid.spec.distribution.launcher == name


_REMOTE_DATA = ("the remote data '{path}'", "give an absolute path on storage the nodes mount")


class Feature(enum.Enum):
    """The catalogue: (spec path as the matrix shows it, what it is, where it occurs[, standard
    wording (what, hint) for a target's ``unsupported()`` that leaves them out])."""

    TENSORFLOW = ("framework", "TensorFlow multi-worker training: one worker per node, TF_CONFIG",
                  _at(("framework",), lambda valid: valid.spec.framework == "tensorflow"),
                  ("TensorFlow multi-worker jobs (nothing sets TF_CONFIG)", "run TensorFlow on Azure ML"))
    LAUNCHER_PER_PROCESS = ("distribution.launcher", "launcher: per-process, the platform starts every process",
                            _at(("distribution", "launcher"), _explicit_launcher("per-process")))
    LAUNCHER_MPI = ("distribution.launcher", "launcher: mpi, mpirun starts every process",
                    _at(("distribution", "launcher"), _explicit_launcher("mpi")))
    NO_SKU = ("resources.sku", "no VM size: resources.sku left out",
              _at(("resources", "sku"), lambda valid: valid.sku is None))
    SPOT = ("resources.spot", "spot (low-priority) capacity",
            _at(("resources", "spot"), lambda valid: valid.spec.resources.spot))
    SHM_SIZE = ("resources.shm_size", "a shared-memory size",
                _at(("resources", "shm_size"), lambda valid: valid.spec.resources.shm_size))
    CPUS_PER_NODE = ("resources.cpus_per_node", "CPUs asked for on each node",
                     _at(("resources", "cpus_per_node"), lambda valid: valid.spec.resources.cpus_per_node is not None))
    MEMORY_PER_NODE = ("resources.memory_per_node", "memory asked for on each node",
                       _at(("resources", "memory_per_node"),
                           lambda valid: valid.spec.resources.memory_per_node is not None))
    INFINIBAND = ("resources.sku", "InfiniBand between the nodes: several nodes of a size that has it",
                  _at(("resources", "sku"), base.infiniband))
    NO_ENVIRONMENT = ("environment", "no image, registered environment or build context",
                      _at(("environment",), lambda valid: not (valid.spec.environment.image
                                                               or valid.spec.environment.azureml
                                                               or valid.spec.environment.build)))
    ENV_IMAGE = ("environment.image", "a container image",
                 _at(("environment", "image"), lambda valid: valid.spec.environment.image))
    ENV_CONDA_FILE = ("environment.conda_file", "a conda environment file",
                      _at(("environment", "conda_file"), lambda valid: valid.spec.environment.conda_file))
    ENV_AZUREML = ("environment.azureml", "an Azure ML registered environment",
                   _at(("environment", "azureml"), lambda valid: valid.spec.environment.azureml),
                   ("an Azure ML registered environment", None))
    ENV_BUILD = ("environment.build", "a Docker build context",
                 _at(("environment", "build"), lambda valid: valid.spec.environment.build))
    ENV_DATA_REF = ("env.<key>", "a variable whose value names an input or output ({{ outputs.x }})",
                    _data_in_env,
                    ("{ref} in a variable: it sets variables as written, and nothing there would expand the path",
                     "pass it in the command instead (--arg {ref}), where it is expanded"))
    INPUT_URL = ("inputs.<name>.path", "an input that is a URL (https, abfss, wasbs...)",
                 _inputs(lambda valid, item: is_remote(item.path) and not item.path.startswith("azureml:")),
                 _REMOTE_DATA)
    INPUT_DATA_ASSET = ("inputs.<name>.path", "an input that is an Azure ML data asset or datastore (azureml:...)",
                        _inputs(lambda valid, item: item.path.startswith("azureml:")), _REMOTE_DATA)
    INPUT_RELATIVE = ("inputs.<name>.path", "an input that is a relative local path",
                      _inputs(lambda valid, item: not is_remote(item.path) and not item.path.startswith("/")))
    # judged by its text alone: what is at such a path on the machine that compiles is never asked
    INPUT_ABSOLUTE = ("inputs.<name>.path", "an input that is an absolute path: storage where the job runs",
                      _inputs(lambda valid, item: item.path.startswith("/")))
    INPUT_EVAL_MODE = ("inputs.<name>.mode", "input mode eval_mount or eval_download (an MLTable's)",
                       _inputs(lambda valid, item: item.mode in ("eval_mount", "eval_download"), key="mode"),
                       ("input mode {mode} (an Azure ML runtime feature): the path is passed as it is", None))
    INPUT_RW_MOUNT = ("inputs.<name>.mode", "input mode rw_mount: the job writes beside its data",
                      _inputs(lambda valid, item: item.mode == "rw_mount", key="mode"))
    OUTPUT_NOT_ABSOLUTE = ("outputs.<name>.path", "an output location that is not an absolute path (relative, or a URL)",
                           _outputs(lambda item: item.path is not None and not item.path.startswith("/"), "path"),
                           ("the output location '{path}'", "give an absolute path on shared storage, or leave path out"))
    OUTPUT_ASSET_NAME = ("outputs.<name>.name", "registering an output as a data asset",
                         _outputs(lambda item: item.name is not None, "name"),
                         ("registering an output as a data asset", "register it after the job, or leave name out"))

    def __init__(self, path: str, description: str, find: Callable[[Any], List[Occurrence]],
                 standard: Optional[Tuple[str, Optional[str]]] = None):
        self.path = path
        self.description = description
        self.find = find
        self.standard = standard

    @property
    def fields(self) -> Tuple[str, ...]:
        """What an occurrence carries for a message to name (``{path}``), besides ``{spec.x}``."""
        return self.find.fields

    @property
    def anchor(self) -> str:
        return self.name.lower().replace("_", "-")


# --- a target's table ---------------------------------------------------------------------------

class Condition(Record):
    """When an entry applies beyond its feature being there (a target's setting, another field)."""

    __slots__ = ("text", "test")

    def __init__(self, text: str, test: Callable[[Any], Any]) -> None:
        self.text = text  # for the matrix: "without environment.image"
        self.test = test


def only(text: str, test: Callable[[Any], Any]) -> Condition:
    return Condition(text, test)


_STANDARD: Any = object()  # a part left out: the feature's standard wording


class Entry(Record):
    __slots__ = ("what", "hint", "fatal", "as_written", "when")

    def __init__(self, what: Any, hint: Any, fatal: bool, as_written: bool, when: Optional[Condition]) -> None:
        self.what = what  # str or _STANDARD
        self.hint = hint  # str, None or _STANDARD
        self.fatal = fatal
        self.as_written = as_written  # problem(): the message itself; unsupported(): "<target> cannot express <what>"
        self.when = when

    def texts(self, feature: Feature) -> Tuple[str, Optional[str]]:
        """(what or message, hint) as templates, the standard wording filled in."""
        what, hint = self.what, self.hint
        if what is _STANDARD:
            if feature.standard is None:
                raise ValueError(f"{feature.name} has no standard wording: say what the target cannot express")
            what = feature.standard[0]
        if hint is _STANDARD:
            hint = feature.standard[1] if feature.standard else None
        return what, hint

    @property
    def severity(self) -> str:
        return "error" if self.fatal else "warning"


def unsupported(what: str = _STANDARD, hint: Optional[str] = _STANDARD, *, fatal: bool = True,
                when: Optional[Condition] = None) -> Entry:
    """The target cannot express the feature: "<target> cannot express <what>", an error (a
    warning with ``fatal=False``: the job runs, without it)."""
    return Entry(what, hint, fatal, False, when)


def problem(message: str, hint: Optional[str] = None, *, fatal: bool = True,
            when: Optional[Condition] = None) -> Entry:
    """A diagnostic with the message as written (a need, or a caveat), not "cannot express"."""
    return Entry(message, hint, fatal, True, when)


Table = Mapping[Feature, Entry]


def check(target: str, table: Table, valid, *, volumes: Iterable[str] = (), **fields: Any) -> List[Diagnostic]:
    """A diagnostic at every occurrence of every feature in ``table`` the spec uses, in the
    table's order; ``fields`` are more names its messages may use. ``volumes``: the inputs and
    outputs the target has a location of its own for (``targets.<target>.volumes``): what their
    ``path`` says (a data asset, a URL, a relative folder) is Azure ML's, not this target's, so
    no feature of it is reported."""
    placed = set(volumes)
    out: List[Diagnostic] = []
    for feature, entry in table.items():
        found = [(path, values) for path, values in feature.find(valid)
                 if not (len(path) == 3 and path[0] in ("inputs", "outputs") and path[1] in placed
                         and path[2] == "path")]
        if not found or (entry.when is not None and not entry.when.test(valid)):
            continue
        what, hint = entry.texts(feature)
        for path, values in found:
            names = {"spec": valid.spec, **fields, **values}
            text = what.format(**names)
            shown = hint.format(**names) if hint is not None else None
            if entry.as_written:
                out.append((error if entry.fatal else warning)(path, text, shown))
            else:
                out.append(base.unsupported(target, path, text, shown, fatal=entry.fatal))
    return out


# --- the matrix page ----------------------------------------------------------------------------

PAGE = "docs/capabilities.md"


def placeholders(template: str) -> str:
    """A template as the matrix shows it: ``{spec.environment.image}`` -> ``<environment.image>``."""
    import string  # the matrix page only: off compile's start-up path

    out = []
    for literal, field, _spec, _conversion in string.Formatter().parse(template):
        out.append(literal)
        if field is not None:
            out.append(f"<{field[len('spec.'):] if field.startswith('spec.') else field}>")
    return "".join(out)


def text(value: str) -> str:
    """Our own text as Python-Markdown (mkdocs) shows it literally, in a table cell or a heading."""
    value = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([\\`*_\[\]|{}])", r"\\\1", value)


def code(value: str) -> str:
    return f"`{value}`"  # catalogue paths and target names: no backtick, no pipe


def _cell(entry: Optional[Entry]) -> str:
    if entry is None:
        return "supported"
    return entry.severity + (f" ({text(entry.when.text)})" if entry.when else "")


def matrix(tables: Mapping[str, Table]) -> str:
    """docs/capabilities.md: every feature x every target, then each feature's messages."""
    targets = list(tables)
    lines = [
        "# What each target can run",
        "",
        "<!-- generated by `python docs/gen_capabilities.py` from each target's CANNOT_RUN table: "
        "do not edit by hand -->",
        "",
        "Every spec feature that some platform cannot run as written, and what each target does with it:",
        "**supported**, an **error** (`compile` and `validate` refuse the spec), or a **warning** (the job",
        "runs without the feature; `validate --strict` refuses it). Each target states this as a table",
        "(`CANNOT_RUN`, next to its `cannot_express`), and `trainspec/compiler/capabilities.py` holds the",
        "catalogue of features; [Architecture](architecture.md#what-a-target-cannot-run) says how they fit.",
        "A target also checks, in code beside its table, what depends on more than a feature being",
        "there: its own settings, the variables a command reads, torchrun's arguments.",
        "",
        "| Feature | Spec field | " + " | ".join(f"[{code(t)}](targets/{t}.md)" for t in targets) + " |",
        "|---|---|" + "---|" * len(targets),
    ]
    for feature in Feature:
        cells = [_cell(tables[t].get(feature)) for t in targets]
        lines.append(f"| [{text(feature.description)}](#{feature.anchor}) | {code(feature.path)} | "
                     + " | ".join(cells) + " |")
    for feature in Feature:
        lines += ["", f"## {text(feature.description)} {{#{feature.anchor}}}", "",
                  f"Spec field: {code(feature.path)}.", "",
                  "| Target | Result | Message | Hint |", "|---|---|---|---|"]
        for t in targets:
            entry = tables[t].get(feature)
            if entry is None:
                lines.append(f"| {code(t)} | supported | | |")
                continue
            what, hint = entry.texts(feature)
            message = placeholders(what) if entry.as_written else f"{t} cannot express {placeholders(what)}"
            lines.append(f"| {code(t)} | {_cell(entry)} | {text(message)} | "
                         f"{text(placeholders(hint)) if hint else ''} |")
    return "\n".join(lines) + "\n"
