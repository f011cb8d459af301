"""The pipeline the commands share: find specs, load, validate, check and lower per target.

    spec.yaml --load--> Document --validate--> ValidSpec --lower[target]--> Artifact --write--> OUT/<name>/<target>/

`compile`, `validate` and `run --local` all go through `build()`; only `compile` writes.
Each target's lowering (targets/<name>/lower.py) is loaded here, by name, on first use.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from trainspec.compiler.base import Artifact, Target
from trainspec.compiler.write import landing
from trainspec.core.diagnostics import Diagnostic, SpecError
from trainspec.core.records import Record
from trainspec.schema.compose import compose
from trainspec.schema.loader import resolved
from trainspec.schema.validate import ValidSpec, secret_reference_errors, validate
from trainspec.registry import DEFAULT_TARGET, TARGETS

SPEC_SUFFIXES = (".yaml", ".yml")


class Outcome(Record):
    """One spec's result: every diagnostic (located), and the artifacts when there was no error."""

    __slots__ = ("file", "valid", "data", "document", "reads", "artifacts", "diagnostics")
    __hash__ = None  # type: ignore[assignment]  # filled in as the spec goes through the pipeline

    def __init__(self, file: str, valid: Optional[ValidSpec] = None, data: Any = None, document: Any = None,
                 reads: Optional[List[Path]] = None, artifacts: Optional[List[Artifact]] = None,
                 diagnostics: Optional[List[Diagnostic]] = None) -> None:
        self.file = file
        self.valid = valid
        self.data = data  # what the spec says, as written, with its extends chain and overrides applied
        self.document = document  # the composed Document: which file wrote each field (diagnostics, diff reasons)
        self.reads = [] if reads is None else reads  # the files that make the job: extends chain, conda file
        self.artifacts = [] if artifacts is None else artifacts
        self.diagnostics = [] if diagnostics is None else diagnostics

    @property
    def ok(self) -> bool:
        return not any(d.is_error for d in self.diagnostics)


MAX_SEARCH = 100_000  # entries looked at below the folders named: a repository, not a file system


class SearchError(ValueError):
    """A folder on the command line that trainspec will not search (the file-system root, or one
    so large that it cannot be a repository of specs): a usage error."""


def find_specs(paths: Iterable[str], known: Optional[Dict[str, Optional[str]]] = None) -> List[str]:
    """Spec files named directly, plus every *.yaml / *.yml below a named directory (sorted),
    except the bases (a file that another found spec `extends` is composed into it, not
    compiled by itself) and the team catalogs (trainspec-skus.yaml, docs/skus.md). The walk skips hidden folders, never follows a symlinked folder below
    the one named (no loops, no escape to `/`) and stops with SearchError after MAX_SEARCH
    entries; a named folder that is, or links to, the file-system root is refused. ``known``: the
    `extends` value of files by the sha256 of their bytes, used and filled (check's cache: what a
    file extends follows from its bytes)."""
    found, searched = search(paths)
    bases = _extended(searched, {} if known is None else known)
    walked = set(searched)
    return [f for f in found if not (f in walked and _real(f) in bases)]


def search(paths: Iterable[str]) -> Tuple[List[str], List[str]]:
    """(every file find_specs looks at, in its order; those of them found in a named folder,
    which are left out when another of those extends them): the walk of find_specs, without
    reading any file, so that check can share the reading with its worker process."""
    found: List[str] = []
    searched: List[str] = []
    for name in paths:
        path = Path(name)
        if _is_dir(path):
            for child in _walk(name):
                found.append(child)
                searched.append(child)
        else:
            found.append(name)
    return found, searched


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):  # a name too long, a NUL: not a folder; build() reports the file
        return False


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _walk(top: str) -> List[str]:
    import os

    if os.path.realpath(top) == os.path.realpath(os.sep):
        raise SearchError(f"{top}: will not search the whole file system for specs; name the specs' folder")
    from trainspec.schema.skus import TEAM_FILE

    found: List[str] = []
    seen = 0
    for folder, dirnames, filenames in os.walk(top, followlinks=False):
        seen += len(dirnames) + len(filenames)
        if seen > MAX_SEARCH:
            raise SearchError(f"{top}: more than {MAX_SEARCH:,} files and folders below it; "
                              "name the specs' folder (or the spec files) instead")
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for file in filenames:
            child = Path(folder, file)
            if not file.startswith(".") and child.suffix in SPEC_SUFFIXES and file != TEAM_FILE and _is_file(child):
                found.append(child)
    return [str(f) for f in sorted(found)]


def _real(file: str) -> Optional[Path]:
    from trainspec.schema.loader import ReadProblem, real_path

    try:
        return real_path(file)
    except ReadProblem:
        return None


def _extended(files: Iterable[str], known: Dict[str, Optional[str]]) -> set:
    """The resolved paths that any of ``files`` (found in a folder, so regular files) names in
    `extends:`."""
    return {base for base in (base_of(file, known) for file in files) if base is not None}


def base_of(file: str, known: Dict[str, Optional[str]]) -> Optional[Path]:
    """The resolved path of the file that ``file`` names in `extends:`, if any."""
    parent = extends_of(file, known)
    return _real(str(Path(file).parent / parent)) if parent else None


def extends_of(file: str, known: Optional[Dict[str, Optional[str]]] = None) -> Optional[str]:
    """What the spec in ``file`` names in `extends:` (None: nothing, or a file that cannot be
    read or parsed: build() reports it). ``known``: by the sha256 of a file's bytes, used and filled."""
    from trainspec.core.diagnostics import SpecError
    from trainspec.core.digests import sha256
    from trainspec.schema.loader import ReadProblem, load_bytes, read_bounded

    known = {} if known is None else known
    try:
        raw = read_bounded(file)
    except (OSError, ReadProblem):
        return None
    if b"extends:" not in raw:
        return None  # the common case, without parsing
    digest = sha256(raw).hexdigest()
    if digest not in known:
        try:
            data = load_bytes(raw, file).data  # the bytes the digest is of
        except SpecError:  # bytes that do not parse name nothing, however often they are met
            data = None
        parent = data.get("extends") if isinstance(data, dict) else None
        known[digest] = parent if isinstance(parent, str) and parent else None
    return known[digest]


def dependents(base: str, root: str, known: Optional[Dict[str, Optional[str]]] = None) -> List[str]:
    """The specs under ``root`` (found as a folder search finds them) whose extends chain, at any
    depth, reaches the file ``base``."""
    target = _real(base)
    found = []
    for spec in find_specs([root], known):
        current, seen = spec, 0
        while seen < 16:  # compose's own limit reports longer chains
            parent = extends_of(current, known)
            if parent is None:
                break
            current = os.path.join(os.path.dirname(current), parent)
            seen += 1
            if target is not None and _real(current) == target:
                found.append(spec)
                break
    return found


_LOADED: Dict[str, Target] = {}


def target(name: str) -> Target:
    """The registered target ``name``: its lower.py, imported on first use and wrapped in a
    ``Target`` (compiler/base.py), which supplies the defaults for what the module does not define."""
    found = _LOADED.get(name)
    if found is None:
        import importlib

        found = _LOADED[name] = Target(importlib.import_module(f"trainspec.targets.{name}.lower"))
    return found


def launcher(valid: ValidSpec, name: str) -> str:
    """Who starts the processes of ``valid`` on target ``name``."""
    return target(name).launcher(valid)


def hardware(valid: ValidSpec, name: str):
    """What chooses the machines of ``valid`` on target ``name`` (compiler/base.py's Hardware)."""
    return target(name).hardware(valid)


def unenforced(valid: ValidSpec, names: Sequence[str]) -> Dict[str, str]:
    """The targets among ``names`` where resources.sku does not choose the machines, each with
    what does ("sku not enforced on <target>: the partition gpu decides the hardware"): where
    plan and diff must not announce the sku's GPU. Empty when the job has no size."""
    if valid.sku is None:
        return {}
    found = {name: hardware(valid, name) for name in names}
    return {name: f"sku not enforced on {name}: {hw.by}" for name, hw in found.items() if not hw.enforced}


def targets_for(valid: ValidSpec, requested: Optional[Sequence[str]]) -> List[str]:
    """-t wins; else the targets the spec lists; else Azure ML (the one that needs no settings)."""
    if requested:
        return list(requested)
    listed = [name for name in TARGETS if getattr(valid.spec.targets, name, None) is not None]
    return listed or [DEFAULT_TARGET]


def targets_listed(data: Any) -> List[str]:
    """The targets a composed spec's data lists (what ``targets_for`` chooses without -t), read
    before validation: the job commands refuse a spec that lists several without -t before
    compiling it; data that is not a spec lists none (validation says why)."""
    listed = data.get("targets") if isinstance(data, dict) else None
    if not isinstance(listed, dict):
        return [DEFAULT_TARGET]
    return [name for name in TARGETS if listed.get(name) is not None] or [DEFAULT_TARGET]


def build(file: str, out: Path, requested: Optional[Sequence[str]] = None, *, lower: bool = True,
          transform=None, sets: Sequence[str] = (), variables: Sequence[str] = ()) -> Outcome:
    """Load (with its extends chain and overrides), validate, check and (unless ``lower`` is
    False) lower one spec for its targets.

    ``transform`` optionally rewrites the loaded data before validation (used by
    ``run --local`` to apply its overrides through the same validation as file content).
    """
    outcome = Outcome(file=file)
    try:
        doc = compose(file, sets, variables)
    except SpecError as exc:
        outcome.diagnostics = exc.diagnostics
        return outcome
    if transform is not None:
        doc.data = transform(doc.data)
    outcome.data = doc.data
    outcome.document = doc
    valid, diagnostics = validate(doc)
    found = list(diagnostics)
    if valid is not None:
        names = targets_for(valid, requested)
        # validation held the secrets to the targets the spec lists; -t may ask for another
        unlisted = [n for n in names if getattr(valid.spec.targets, n, None) is None]
        found.extend(secret_reference_errors(valid.spec, unlisted))
        for name in names:
            found.extend(target(name).cannot_express(valid))
        if lower and not any(d.is_error for d in found):
            for name in names:
                # landing(): where the files really land (through a symlinked -o), so that their
                # relative references (code, conda file) are right from there
                artifact = target(name).lower(valid, landing(out / valid.name / name))
                outcome.artifacts.append(artifact)
        outcome.valid = valid
        conda = valid.spec.environment.conda_file
        reads = {doc.path, *doc.chain, *(d.path for d in doc.origins.values()), *([valid.resolve(conda)] if conda else []),
                 *([valid.catalog] if valid.catalog else [])}
        outcome.reads = sorted(resolved(p) for p in reads)
    outcome.diagnostics = sorted((doc.locate(d) for d in found), key=lambda d: (d.line or 0, d.col or 0))
    return outcome


def build_all(files: Sequence[str], out: Path, requested: Optional[Sequence[str]] = None, **options: Any) -> List[Outcome]:
    """``build()`` for every file, then the rule no single spec can check: one job name, one spec."""
    outcomes = [build(file, out, requested, **options) for file in files]
    claim_names(outcomes)
    return outcomes


def claim_names(outcomes: Sequence[Outcome]) -> None:
    """A job name belongs to the first spec (in the order given) that uses it: every later spec
    with that name gets an error at its `name:` line naming the first, and no artifacts, so a
    copy-pasted spec that kept its name never reaches a plan, a diff or an output folder."""
    from trainspec.core.diagnostics import error

    owners: dict = {}
    for outcome in outcomes:
        if outcome.valid is None:
            continue
        name = outcome.valid.name
        first = owners.setdefault(name, outcome)
        if first is outcome:
            continue
        where = _name_location(first)
        problem = error(("name",), f"job name '{name}' is also the name of {where}; both would compile to "
                        f"the same output folder and the same job",
                        "give each spec its own name (a copied spec keeps the name of the one it was copied from)")
        located = outcome.document.locate(problem) if outcome.document is not None else problem
        outcome.diagnostics = sorted([*outcome.diagnostics, located], key=lambda d: (d.line or 0, d.col or 0))
        outcome.artifacts = []


def _name_location(outcome: Outcome) -> str:
    from trainspec.core.diagnostics import error

    if outcome.document is None:
        return outcome.file
    found = outcome.document.locate(error(("name",), ""))
    return f"{found.file}:{found.line}" if found.line is not None else str(found.file)
