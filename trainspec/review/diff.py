"""`diff`: what a change to the specs changes, semantic first (the job's facts and the spec's
fields), then each output file as a unified diff (runtime files summarised).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Collection, Dict, List, Optional, Sequence, Tuple

from trainspec.registry.build import Outcome
from trainspec.core import markdown as md_
from trainspec.core.secrets import redact_bytes, redact_value
from trainspec.compiler import base
from trainspec.registry import build as pipeline
from trainspec.review.comment import (DIFF_BUDGET, LINE_LIMIT, SHARED_NAMES, VALUE_LIMIT, Part, Section, budget_for, fit,
                                      whole_part)
from trainspec.review.outputs import repo_root, unified, without_provenance


# --- diff -------------------------------------------------------------------------------------

# Facts of the compiled job that no single spec field states (world, the per-target launcher,
# GPUs from the SKU...), each with the spec field that states it when the user wrote it: when
# that field changed too, the fact is not repeated.
_FACTS: Tuple[Tuple[str, Optional[str]], ...] = (
    ("world", None), ("processes per node", "resources.procs_per_node"),
    ("GPUs per node", "resources.gpus_per_node"), ("GPU", None), ("sku not enforced on", None),
    ("backend", "distribution.backend"),
    ("targets", "targets"),
)

# What each target runs in (Target.plan_image), a fact per target: "image (slurm)". environment.image
# states it only where a target runs that image as written.
IMAGE_FACT = "image"
_IMAGE_FIELD = "environment.image"


def facts(outcome: Outcome) -> Dict[str, Any]:
    """What the compiled job is, beyond what the spec wrote."""
    valid = outcome.valid
    loose = _unenforced(outcome)
    found: Dict[str, Any] = {
        "world": valid.world_size,
        "processes per node": valid.procs_per_node,
        "GPUs per node": valid.gpus_per_node,
        # a GPU model only where the sku chooses the machines: on a target where the partition
        # or the cluster decides, a new sku changes nothing the job runs on
        "GPU": valid.sku.gpu if valid.sku and len(loose) < len(outcome.artifacts) else None,
        "sku not enforced on": ", ".join(loose) or None,
        "backend": valid.backend,
        "targets": ", ".join(a.target for a in outcome.artifacts),
    }
    for artifact in outcome.artifacts:
        found[f"launcher ({artifact.target})"] = pipeline.launcher(valid, artifact.target)
    for artifact in outcome.artifacts:  # what each target runs in: not always environment.image as written
        found[f"{IMAGE_FACT} ({artifact.target})"] = pipeline.target(artifact.target).plan_image(valid)
    return found


def _unenforced(outcome: Outcome) -> Dict[str, str]:
    """The targets of ``outcome`` where resources.sku does not choose the machines, each with what
    does (build.unenforced)."""
    return pipeline.unenforced(outcome.valid, [a.target for a in outcome.artifacts])


def spec_fields(outcome: Outcome) -> Dict[str, Any]:
    """Every field the spec wrote (with its extends chain and overrides), by dotted path, as
    written (`timeout: 2d`, not its seconds)."""
    flat: Dict[str, Any] = {}

    def walk(value: Any, prefix: str) -> None:
        if isinstance(value, dict) and value:
            for key, item in value.items():
                walk(item, f"{prefix}.{key}" if prefix else str(key))
        else:
            flat[prefix] = value

    walk(outcome.data, "")
    return flat


def show(value: Any) -> str:
    """A value in a one-line summary: line breaks shown escaped, a long value cut (the diff
    below it has it whole)."""
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, dict)):
        return md_.clip(json.dumps(value, sort_keys=True, default=str), VALUE_LIMIT)
    return md_.clip(md_.visible(str(value)), VALUE_LIMIT)


@dataclass
class Change:
    field: str
    before: Any
    after: Any
    where: str = ""  # who wrote the new value, when not the spec itself: "in bases/gpu.yaml", "by --set"
    note: str = ""  # what the change does not do: "sku not enforced on slurm: the partition gpu decides the hardware"

    def render(self, said: bool = False) -> str:
        """The change in one line; ``said``: its values were said above it (the comment's
        summary), so it names the field only."""
        if self.before == self.after:  # a fact a changed field leaves as it was (a target's own image)
            return f"{self.field} unchanged: {show(self.after)}"
        text = f"{self.field} {show(self.before)} → {show(self.after)}" if not said else \
            f"{self.field} → its new value, said above"
        about = "; ".join(part for part in (self.where, self.note) if part)
        return text + (f" ({about})" if about else "")


@dataclass(frozen=True)
class RuntimeFile:
    """A generated runtime file (the shim, the Ray driver...; OutFile.runtime, or one written
    inside another output: OutFile.embedded): summarised by its size, sha256 and trainspec
    runtime version, never printed whole."""

    size: int
    sha256: str
    summary: str  # "unchanged trainspec runtime v0.1.0", "changed: trainspec runtime vA -> vB"...
    before: Optional[str] = None  # the runtime version on each side (None: no such file there)
    after: Optional[str] = None
    sha256_before: Optional[str] = None

    @property
    def line(self) -> str:
        """The summary in one line: size and sha256 of a new, changed or removed file (json has
        them for an unchanged one too)."""
        if self.before is not None and self.before == self.after and not self.sha256_before:
            return self.summary
        was = f" (was sha256 {self.sha256_before})" if self.sha256_before else ""
        return f"{self.size:,} bytes, sha256 {self.sha256}: {self.summary}{was}"

    def as_json(self) -> Dict[str, Any]:
        return {"size": self.size, "sha256": self.sha256, "summary": self.summary, "version_before": self.before,
                "version_after": self.after, "sha256_before": self.sha256_before}


@dataclass
class OutputDiff:
    path: str  # as the user sees it: build/<name>/<target>/<file>
    output: str  # <target>/<file>
    diff: str  # a unified diff (of OutFile.reviewed); for a runtime file, its summary line
    runtime: Optional[RuntimeFile] = None
    # what changes in it, the same in every job it is the same change in (said_once): the lines
    # removed and added, the job's own spec path and hash aside; a runtime file's summary and
    # digests. None: not comparable (a hand edit), never grouped.
    key: Optional[Tuple[str, ...]] = None
    # both sides' lines as the key reads them (provenance blanked, secrets redacted): what a
    # shared change is taken out of when the job changes more lines of the file (said_once)
    lines: Optional[Tuple[List[str], List[str]]] = field(default=None, repr=False)


@dataclass
class JobDiff:
    name: str
    spec: str  # where the spec is (the head side's, else the base side's)
    status: str  # "changed" | "new" | "removed" | "unchanged"
    changes: List[Change] = field(default_factory=list)
    about: str = ""  # for a new or removed job: what it is
    files: List[OutputDiff] = field(default_factory=list)
    reads: List[str] = field(default_factory=list)  # changed files the job reads (--git), e.g. its conda file
    code: List[str] = field(default_factory=list)  # changed files in the code folder the job uploads (--git)
    edited: List[str] = field(default_factory=list)  # committed outputs that differ from the compiled ones (--git)
    edits: List[OutputDiff] = field(default_factory=list)  # each of those: compiled against committed, a hunk
    base_errors: List[str] = field(default_factory=list)  # the base side of this spec did not compile
    runtime: List[OutputDiff] = field(default_factory=list)  # its runtime files that did not change

    @property
    def reasons(self) -> List[str]:
        """Why the job changes, beyond its spec's fields: files it reads or uploads, hand edits."""
        found = []
        if self.base_errors:
            found.append(f"the spec did not compile at the base revision ({len(self.base_errors)} error(s): "
                         f"{self.base_errors[0]})")
        if self.reads:  # referenced, not copied: the job changes when it is submitted
            found.append("the job reads changed files: " + ", ".join(self.reads))
        if self.code:
            found.append(f"the code folder it uploads changed ({_count(self.code, 'file')}: "
                         + ", ".join(self.code[:5]) + (", ..." if len(self.code) > 5 else "") + ")")
        if self.edited:
            found.append("what CI would submit is not what the spec says: committed outputs differ from what the "
                         "spec compiles to (edited by hand? check fails until they are recompiled): "
                         + ", ".join(self.edited))
        return found

    @property
    def headline(self) -> str:
        return self.line()

    def line(self, said: Collection[str] = ()) -> str:
        """What the job changes in one line; ``said``: the fields whose new values were said
        above (Change.render)."""
        if self.status in ("new", "removed"):
            return "; ".join([f"{self.status} job: {self.about}", *self.reasons])
        if self.changes:  # what changes the cost first: a long list of other changes cannot hide it
            ordered = sorted(self.changes, key=lambda c: not costly(c.field))
            return "; ".join([*(c.render(c.field in said) for c in ordered), *self.reasons])
        if self.base_errors:
            return "; ".join(self.reasons)
        if self.reasons:
            return "no spec field changed; " + "; ".join(self.reasons)
        if self.files:  # trainspec itself changed what it writes
            return "no spec field changed; outputs changed: " + ", ".join(f.output for f in self.files)
        return "no change to what runs"

    def as_json(self, shared: Optional[str] = None) -> Dict[str, Any]:
        """The job's whole diff; ``shared``: the id of the change it makes with other jobs (said_once)."""
        return {"name": self.name, "spec": self.spec, "status": self.status, "summary": self.headline,
                "shared": shared, "changes": _changes_json(self.changes),
                "files": [_file_json(f) for f in self.files], "reads_changed": self.reads,
                "runtime_unchanged": [_file_json(f) for f in self.runtime], "code_changed": self.code,
                "outputs_edited": self.edited, "edits": [_file_json(f) for f in self.edits],
                "base_errors": self.base_errors}


# The fields and facts of a job that change what it costs (the cost summary's, review/cost.py),
# besides each target's COST_SETTINGS: named first in a job's one-line summary.
COSTLY = ("timeout", "resources.nodes", "resources.gpus_per_node", "resources.sku", "resources.spot", "world", "GPUs per node",
          "GPU", "targets")


def costly(name: str) -> bool:
    """Whether a changed field or fact (a Change's) changes what the job costs."""
    from trainspec.registry import TARGETS
    from trainspec.schema.vocabulary import settings

    if name in COSTLY or name.startswith("size "):  # a catalog entry of its size (_catalog_changes)
        return True
    parts = name.split(".")
    return len(parts) == 3 and parts[0] == "targets" and parts[1] in TARGETS \
        and parts[2] in getattr(settings(parts[1]), "COST_SETTINGS", ())


def _changes_json(changes: Sequence[Change]) -> List[Dict[str, Any]]:
    return [{"field": c.field, "before": c.before, "after": c.after, "in": c.where or None,
             **({"note": c.note} if c.note else {})} for c in changes]


def _file_json(item: OutputDiff) -> Dict[str, Any]:
    return {"path": item.path, "diff": item.diff, "runtime": item.runtime.as_json() if item.runtime else None}


def _count(items: Sequence[Any], word: str) -> str:
    return f"{len(items)} {word}{'' if len(items) == 1 else 's'}"


def semantic_changes(old: Outcome, new: Outcome) -> List[Change]:
    before, after = spec_fields(old), spec_fields(new)
    changes = [Change(k, redact_value(k, before.get(k)), redact_value(k, after.get(k)),
                      _written_in(new if k in after else old, k))
               for k in _union(before, after) if before.get(k) != after.get(k)]
    changes += _catalog_changes(old, new)
    changed = {c.field for c in changes}
    old_facts, new_facts = facts(old), facts(new)
    stated_by = dict(_FACTS)
    for key in _union(old_facts, new_facts):
        if key.startswith(IMAGE_FACT + " ("):
            changes += _image_change(key, old_facts.get(key), new_facts.get(key), before, after)
            continue
        spec_field = stated_by.get(key, "distribution.launcher" if key.startswith("launcher") else None)
        if old_facts.get(key) != new_facts.get(key) and not (spec_field and spec_field in changed):
            changes.append(Change(key, old_facts.get(key), new_facts.get(key)))
    loose = _unenforced(new)
    for change in changes:  # a new size or GPU is no new hardware where the sku chooses none
        if change.field in ("resources.sku", "GPU") and loose:
            change.note = "; ".join(loose.values())
    return changes


def _image_change(key: str, old: Any, new: Any, before: Dict[str, Any], after: Dict[str, Any]) -> List[Change]:
    """What a target runs in, when environment.image changed or it did: said unless it is the spec's
    image as written on both sides (the field's own change says it); said unchanged when the field
    changed and the target still runs what it ran (Slurm's container_image, HPC Pack's nodes)."""
    was, now = before.get(_IMAGE_FIELD), after.get(_IMAGE_FIELD)
    if old is None or new is None or (old == was and new == now) or (old, was) == (new, now):
        return []
    return [Change(key, old, new)]


def _written_in(outcome: Outcome, dotted_field: str) -> str:
    """The file (an `extends` base) or override that wrote a field, when it is not the spec itself."""
    doc = outcome.document
    if doc is None or not (doc.origins or doc.overrides):
        return ""
    from trainspec.core.diagnostics import error

    path: Tuple[Any, ...] = tuple(dotted_field.split("."))
    found = doc.locate(error(path, ""))
    if found.file == doc.file or not found.file:
        return ""
    if found.file.startswith("--"):
        return "by " + found.file.split()[0]
    return "in " + _display(found.file, outcome)


def _display(file: Optional[str], outcome: Outcome) -> str:
    """A file named in a diagnostic, relative to the repository like the spec's own display name."""
    if not file or file.startswith("--"):
        return file or ""
    root = repo_root(outcome.valid.source.path.parent)
    try:
        return Path(file).resolve().relative_to(root.resolve()).as_posix() if root else file
    except ValueError:
        return file


def _catalog_changes(old: Outcome, new: Outcome) -> List[Change]:
    """A size whose catalog entry changed (a fix in the team's trainspec-skus.yaml), field by field."""
    a, b = old.valid.sku, new.valid.sku
    if a is None or b is None or a.name != b.name or a == b:
        return []
    where = "in " + (_display(str(new.valid.catalog), new) if new.valid.catalog else "the built-in catalog")
    return [Change(f"size {b.name}: {name}", getattr(a, name), getattr(b, name), where)
            for name in a.__slots__ if getattr(a, name) != getattr(b, name)]


def _union(a: Dict[str, Any], b: Dict[str, Any]) -> List[str]:
    return list(a) + [k for k in b if k not in a]


def about(outcome: Outcome) -> str:
    """A new or removed job in one line."""
    valid = outcome.valid
    sku = valid.sku.name if valid.sku else valid.spec.resources.sku
    loose = _unenforced(outcome)
    where = f" ({'; '.join(loose.values())})" if loose else ""
    return (f"world {valid.world_size} = {valid.nodes} node(s) x {valid.procs_per_node} process(es)"
            + (f" on {sku}{where}" if sku else "") + f", targets {facts(outcome)['targets']}")


def diff_outcomes(old: Optional[Outcome], new: Optional[Outcome], out: str) -> JobDiff:
    """How the job changes from ``old`` to ``new`` (either may be absent: a new or removed job).
    ``out`` is the output directory as the user names it, for the diff headers."""
    either = new or old
    name = either.valid.name
    if old is None or new is None:
        result = JobDiff(name, either.valid.source.display, "new" if old is None else "removed", about=about(either))
    else:
        result = JobDiff(name, new.valid.source.display, "changed", semantic_changes(old, new))
    old_files = {(a.target, f.path): f for a in (old.artifacts if old else []) for f in a.files}
    new_files = {(a.target, f.path): f for a in (new.artifacts if new else []) for f in a.files}
    for key in sorted(set(old_files) | set(new_files)):
        was, now = old_files.get(key), new_files.get(key)
        before, after = (was.data if was else None), (now.data if now else None)
        output = f"{key[0]}/{key[1]}"
        path = f"{out}/{name}/{output}"
        if (was or now).runtime:  # the shim, the Ray driver...: summarised, not printed whole
            runtime = runtime_change(was, now, result.status)
            shown = OutputDiff(path, output, runtime.line, runtime, _runtime_key(output, runtime))
            (result.runtime if before == after else result.files).append(shown)
            continue
        # runtime files written inside this one (OutFile.embedded): summarised the same way
        inner = _embedded_changes(was, now, result.status, path, output)
        if before is None or after is None \
                or without_provenance(before, old) != without_provenance(after, new):
            # the file as a reviewer reads it, each embedded file a placeholder line (unchanged
            # when only the embedded file changed: then its summary says so, and nothing else)
            shown_before, shown_after = _reviewed(was, now)
            if shown_before is None or shown_after is None \
                    or without_provenance(shown_before, old) != without_provenance(shown_after, new):
                text = unified(redact_bytes(shown_before or b""), redact_bytes(shown_after or b""),
                               "/dev/null" if before is None else f"a/{path}",
                               "/dev/null" if after is None else f"b/{path}")
                sides = (_key_lines(shown_before, old), _key_lines(shown_after, new))
                result.files.append(OutputDiff(path, output, text, key=_lines_key(output, *sides, before is None,
                                                                                   after is None), lines=sides))
        # else the same job: only the spec's path or bytes (a comment, formatting) differ
        for item, same in inner:
            (result.runtime if same else result.files).append(item)
    if result.status == "changed" and not result.files and not result.changes:
        result.status = "unchanged"
    return result


def _key_lines(data: Optional[bytes], outcome: Optional[Outcome]) -> List[str]:
    """An output's lines as OutputDiff.key compares them: the job's own spec path and hash blanked
    (outputs.without_provenance), secrets redacted."""
    if data is None:
        return []
    return redact_bytes(without_provenance(data, outcome)).decode("utf-8", "replace").splitlines()


def _lines_key(output: str, before: List[str], after: List[str], new: bool = False,
               removed: bool = False) -> Tuple[str, ...]:
    """What changes in an output, as OutputDiff.key: its name, then each hunk's removed and added
    lines without context or line numbers (_key_lines: the job's own spec path and hash blanked
    on each side). Two jobs with equal keys remove and add the same lines."""
    import difflib

    found = [output, "new" if new else "removed" if removed else "changed"]
    hunks = difflib.unified_diff(before, after, n=0, lineterm="")
    for line in list(hunks)[2:]:  # after the ---/+++ header
        found.append("@@" if line.startswith("@@") else line)
    return tuple(found)


def _beyond(item: OutputDiff, shared: OutputDiff) -> Optional[OutputDiff]:
    """What ``item`` (an output of one job) changes beyond the change ``shared`` makes to the same
    output of another job: the job's old lines with the shared hunks applied (each found where its
    removed lines are, in order), against its new lines; None when the shared change is not
    there exactly (a hunk that only adds lines has no place to be found, nothing is guessed)."""
    if item.lines is None or shared.key is None or item.key is None or item.key[:2] != shared.key[:2] \
            or shared.key[1] != "changed":
        return None
    hunks: List[Tuple[List[str], List[str]]] = []
    for line in shared.key[2:]:
        if line == "@@":
            hunks.append(([], []))
        else:
            hunks[-1][0 if line.startswith("-") else 1].append(line[1:])
    before, after = item.lines
    middle, at = list(before), 0
    for removed, added in hunks:
        if not removed:
            return None
        found = next((i for i in range(at, len(middle) - len(removed) + 1) if middle[i:i + len(removed)] == removed),
                     None)
        if found is None:
            return None
        middle[found:found + len(removed)] = added
        at = found + len(added)
    if _lines_key(item.output, before, middle) != shared.key or middle == after:
        return None
    text = unified("\n".join(middle).encode("utf-8"), "\n".join(after).encode("utf-8"),
                   f"a/{item.path} (with the shared change; its spec path and hash as <spec>, <hash>)",
                   f"b/{item.path}", context=BEYOND_CONTEXT)
    return OutputDiff(item.path, item.output, text, key=_lines_key(item.output, middle, after), lines=(middle, after))


BEYOND_CONTEXT = 2  # lines of context around what a job changes beyond a shared change: its own lines, not the shared ones


def _runtime_key(output: str, runtime: "RuntimeFile") -> Tuple[str, ...]:
    return (output, runtime.summary, runtime.sha256, runtime.sha256_before or "")


EMBEDDED = "#"  # between an output and a runtime file embedded in it: build/<job>/<target>/job.yaml#trainspec_shim.py


def _embedded_changes(was: Optional[base.OutFile], now: Optional[base.OutFile], status: str, path: str,
                      output: str) -> List[Tuple[OutputDiff, bool]]:
    """Each runtime file embedded in an output (OutFile.embedded), summarised like a runtime file
    of its own under ``<path>#<name>``, and whether it is unchanged."""
    old = {f.path: f for f in (was.embedded if was else ())}
    new = {f.path: f for f in (now.embedded if now else ())}
    found = []
    for name in [*old, *(n for n in new if n not in old)]:
        a, b = old.get(name), new.get(name)
        runtime = runtime_change(a, b, status)
        inner = f"{output}{EMBEDDED}{name}"
        item = OutputDiff(f"{path}{EMBEDDED}{name}", inner, runtime.line, runtime, _runtime_key(inner, runtime))
        found.append((item, a is not None and b is not None and a.data == b.data))
    return found


def _reviewed(was: Optional[base.OutFile], now: Optional[base.OutFile]) -> Tuple[Optional[bytes], Optional[bytes]]:
    """Both sides of an output as a reviewer reads them (OutFile.reviewed), the old side's
    placeholder of each embedded file written as the new side's: a changed embedded file is its
    summary line, not a hunk."""
    before = was.reviewed if was else None
    if was is not None and now is not None:
        new = {f.path: f for f in now.embedded}
        for inner in was.embedded:
            if inner.path in new:
                before = before.replace(base.placeholder(inner).encode("utf-8"),
                                        base.placeholder(new[inner.path]).encode("utf-8"))
    return before, (now.reviewed if now else None)


def runtime_change(was: Optional[base.OutFile], now: Optional[base.OutFile], status: str) -> RuntimeFile:
    """What became of a runtime file between two compilations of a job (``status``: the job's)."""
    import hashlib

    item = now or was
    digest = hashlib.sha256(item.data).hexdigest()
    version = f"trainspec runtime v{item.runtime}"
    if was is None:
        summary = f"{version} ({'new job' if status == 'new' else 'new output'})"
    elif now is None:
        summary = f"{version} ({'removed job' if status == 'removed' else 'removed output'})"
    elif was.data == now.data:
        summary = f"unchanged {version}"
    else:
        summary = f"changed: trainspec runtime v{was.runtime} -> v{now.runtime}"
    changed = was is not None and now is not None and was.data != now.data
    before = hashlib.sha256(was.data).hexdigest() if changed else None
    return RuntimeFile(len(item.data), digest, summary, was.runtime if was else None, now.runtime if now else None,
                       before)


# --- said once ------------------------------------------------------------------------------------

@dataclass
class Shared:
    """A change several jobs make identically (from one base, one catalog entry, one runtime
    version, one shared file): said once, with the jobs it touches; each of their sections points
    to it. Identical means the same spec fields and facts changed the same way, the same changed
    files read or uploaded, and in the same outputs the same lines removed and added (each job's
    own spec path and hash aside: OutputDiff.key); nothing less is grouped."""

    id: str  # "A", "B"...
    example: JobDiff  # the change, as the first of its jobs makes it (its own changes aside)
    jobs: List[str] = field(default_factory=list)  # in the order of the diff

    @property
    def headline(self) -> str:
        return self.example.headline

    def as_json(self) -> Dict[str, Any]:
        e = self.example
        return {"id": self.id, "jobs": self.jobs, "summary": self.headline, "shown_for": e.name,
                "changes": _changes_json(e.changes), "files": [_file_json(f) for f in e.files],
                "reads_changed": e.reads, "code_changed": e.code}


@dataclass
class Pointer:
    """A job's place in a shared change: the change, and what the job changes besides (its own
    fields, files, hand edits), shown in its section."""

    shared: Shared
    rest: JobDiff


def said_once(diffs: Sequence[JobDiff]) -> Tuple[List[Shared], Dict[str, Pointer]]:
    """The changes made identically by two jobs or more, and each of those jobs' pointer. First
    the jobs whose whole diffs are identical (OutputDiff.key); then a job that makes one of those
    changes exactly and more of its own joins it (the largest first), its own part shown in its
    section. A job whose output combines a shared change with its own lines is shown whole."""
    alike: Dict[Tuple[Any, ...], List[JobDiff]] = {}
    for d in diffs:
        signature = _signature(d)
        if signature is not None:
            alike.setdefault(signature, []).append(d)
    groups: List[Shared] = []
    pointers: Dict[str, Pointer] = {}
    for members in alike.values():  # in the order of each group's first job
        if len(members) < 2:
            continue
        shared = Shared(_group_id(len(groups)), replace(members[0], edits=[], edited=[], runtime=[]))
        groups.append(shared)
        for d in members:
            pointers[d.name] = Pointer(shared, _without(d, shared.example))
    by_size = sorted(groups, key=lambda g: -len(alike[_signature(g.example)]))  # stable: ties in order
    for d in diffs:
        if d.name in pointers or _signature(d) is None:
            continue
        for shared in by_size:
            rest = _without(d, shared.example)
            if rest is not None:
                pointers[d.name] = Pointer(shared, rest)
                break
    for d in diffs:
        if d.name in pointers:
            pointers[d.name].shared.jobs.append(d.name)
    return groups, pointers


def _group_id(index: int) -> str:
    return chr(ord("A") + index) if index < 26 else f"Z{index - 25}"


def _change_key(change: Change) -> Tuple[str, ...]:
    return (change.field, json.dumps(change.before, sort_keys=True, default=str),
            json.dumps(change.after, sort_keys=True, default=str), change.where, change.note)


def _signature(d: JobDiff) -> Optional[Tuple[Any, ...]]:
    """What a changed job changes, comparable across jobs; None for a job never grouped (new,
    removed, not compiled at the base revision, an output without a key, or nothing to share:
    only a hand edit, which is the job's own)."""
    if d.status != "changed" or d.base_errors or any(f.key is None for f in d.files) \
            or not (d.changes or d.reads or d.code or d.files):
        return None
    return (tuple(sorted(_change_key(c) for c in d.changes)), tuple(sorted(d.reads)), tuple(sorted(d.code)),
            tuple(sorted(f.key for f in d.files if f.key is not None)))


def _without(d: JobDiff, shared: JobDiff) -> Optional[JobDiff]:
    """``d`` without the change ``shared`` makes, when ``d`` makes all of it exactly; else None."""
    changes = {_change_key(c) for c in shared.changes}
    if not changes <= {_change_key(c) for c in d.changes} or not set(shared.reads) <= set(d.reads) \
            or not set(shared.code) <= set(d.code):
        return None
    files = list(d.files)
    for made in shared.files:  # each of the shared change's outputs: made the same, or made and more
        same = next((f for f in files if f.key == made.key), None)
        if same is not None:
            files.remove(same)
            continue
        mine = next((f for f in files if f.output == made.output), None)
        rest = _beyond(mine, made) if mine is not None else None
        if rest is None:
            return None
        files[files.index(mine)] = rest
    return replace(d, changes=[c for c in d.changes if _change_key(c) not in changes],
                   reads=[r for r in d.reads if r not in shared.reads],
                   code=[c for c in d.code if c not in shared.code], files=files)


def _own(rest: JobDiff, above: Collection[str] = ()) -> str:
    """What a job changes besides its shared change, in one line ('' for nothing; ``above``: the
    fields whose new values were said above, Change.render)."""
    ordered = sorted(rest.changes, key=lambda c: not costly(c.field))
    said = [*(c.render(c.field in above) for c in ordered), *rest.reasons]
    if not said and rest.files:
        said.append("outputs changed: " + ", ".join(f.output for f in rest.files))
    return "; ".join(said)


# --- rendering ---------------------------------------------------------------------------------------

def render_diffs(diffs: Sequence[JobDiff], fmt: str, base_rev: Optional[str] = None,
                 max_chars: Optional[int] = None,
                 rerun: Sequence[str] = ("trainspec", "diff", "--format", "text"),
                 said: Optional[Dict[str, Dict[str, str]]] = None) -> str:
    """The job diffs as a document. A change several jobs make identically is said once
    (said_once), first, with the jobs it touches; each of their sections points to it and shows
    only what the job changes besides. Runtime files are summarised (RuntimeFile), an unchanged
    one not listed; markdown stays within ``max_chars`` (default DIFF_BUDGET; 0: no limit) by
    cutting long diffs (a shared change's last), then by naming the jobs that do not fit, with a
    note saying where the full diff is: ``rerun`` (the command line that made this document) in
    text. ``said`` (markdown, in review's comment): by job, the new values its summary says,
    with their fields (cost.Summary.said_above): a change of one names its field only."""
    groups, pointers = said_once(diffs)
    if fmt == "json":
        return json.dumps({"base": base_rev, "shared": [g.as_json() for g in groups],
                           "jobs": [d.as_json(pointers[d.name].shared.id if d.name in pointers else None)
                                    for d in diffs]}, indent=2, sort_keys=True)
    md = fmt == "markdown"
    budget = budget_for(max_chars, fmt, DIFF_BUDGET)
    title = ""
    if md:
        scope = f" since {base_rev}" if base_rev else ""
        title = f"# trainspec diff{md_.text(scope)}: {len(diffs)} job{'' if len(diffs) == 1 else 's'} changed"
    command = shlex.join(rerun)
    cut = budget is not None
    said = said if md and said else {}

    def above(d: JobDiff, jobs: Sequence[str]) -> List[str]:  # the fields said above for every one of ``jobs``
        return [c.field for c in d.changes if all(said.get(j, {}).get(str(c.after)) == c.field for j in jobs)]

    sections = [_shared_section(g, md, cut, above(g.example, g.jobs)) for g in groups]
    sections += [_pointer_section(d, pointers[d.name], md, cut, above(pointers[d.name].rest, [d.name]))
                 if d.name in pointers else _diff_section(d, md, cut, above(d, [d.name])) for d in diffs]
    if not diffs:
        since = f" since {base_rev}" if base_rev else ""
        sections.append(Section([], f"no job changes{md_.text(since) if md else md_.visible(since)}"))
    return fit(title, sections, budget, md, "the full diff", command)


HEADLINE_LIMIT = 2_000  # characters of a job's one-line summary in the comment


def _shared_section(g: Shared, md: bool, cut: bool, said: Collection[str] = ()) -> Section:
    """A shared change: what it changes, its jobs, and its outputs' diffs as in its first job
    (kept whole before any job's own diff is cut: it carries most jobs)."""
    headline = g.example.line(said)
    headline = md_.clip(headline, HEADLINE_LIMIT) if md or cut else headline
    count = f"{len(g.jobs)} jobs"
    shown = (f"Each job's outputs change in the same lines (its own spec path and hash aside), shown for "
             f"{md_.code(g.example.name) if md else md_.visible(g.example.name)}:")
    jobs = g.jobs[:SHARED_NAMES] if md and cut else g.jobs
    more = f", … and {len(g.jobs) - len(jobs)} more" if len(jobs) < len(g.jobs) else ""
    if md:
        head = (f"## Change {g.id}: the same in {count}\n**{md_.text(headline)}**\n\n"
                f"Jobs ({len(g.jobs)}): " + ", ".join(md_.code(n) for n in jobs) + more)
    else:
        head = (f"== change {g.id}: the same in {count}\n{md_.visible(headline)}\n"
                f"jobs ({len(g.jobs)}): " + ", ".join(md_.visible(n) for n in g.jobs))
    parts = _file_parts(g.example, md)
    if g.example.files:
        head += ("\n\n" if md else "\n") + shown
    for part in parts:
        part.keep = True
    return Section([f"change {g.id}"], head, "\n\n", parts, rank=0)


def _pointer_section(d: JobDiff, pointer: Pointer, md: bool, cut: bool, said: Collection[str] = ()) -> Section:
    """A job that makes a shared change: a pointer to it, then only what the job changes besides."""
    g = pointer.shared
    own = _own(pointer.rest, said)
    said = f"change {g.id} (above)"
    headline = f"{said}, and: {own}" if own else f"{said} and nothing else"
    headline = md_.clip(headline, HEADLINE_LIMIT) if md or cut else headline
    head = (f"## {md_.text(d.name)} ({md_.text(d.spec)})\n**{md_.text(headline)}**" if md else
            f"== {md_.visible(d.name)} ({md_.visible(d.spec)})\n{md_.visible(headline)}")
    return Section([d.name], head, "\n\n", _file_parts(pointer.rest, md), rank=1 if own else 2)


def _diff_section(d: JobDiff, md: bool, cut: bool, said: Collection[str] = ()) -> Section:
    headline = d.line(said)
    headline = md_.clip(headline, HEADLINE_LIMIT) if md or cut else headline
    head = (f"## {md_.text(d.name)} ({md_.text(d.spec)})\n**{md_.text(headline)}**" if md else
            f"== {md_.visible(d.name)} ({md_.visible(d.spec)})\n{md_.visible(headline)}")
    return Section([d.name], head, "\n\n", _file_parts(d, md))


def _file_parts(d: JobDiff, md: bool) -> List[Part]:
    """A job's hand edits (what CI would submit: first), its outputs' diffs, then its changed
    runtime files in one list (an unchanged one is not listed: JSON has them)."""
    parts = [_diff_part(item, md, EDIT_LEAD) for item in d.edits]
    parts += [_diff_part(item, md) for item in d.files if item.runtime is None]
    runtime = [item for item in d.files if item.runtime is not None]
    if runtime:
        lines = [f"- {md_.code(item.path)}: {md_.text(item.diff)}" if md else f"{item.path}: {item.diff}"
                 for item in runtime]
        if md:
            lines.insert(0, "Runtime files (summarised):")
        parts.append(whole_part("\n".join(lines), f"{len(runtime)} trainspec runtime file(s), summarised in the full diff",
                            md))
    return parts


# Before the hunk of a committed output that is not what its spec compiles to (a hand edit).
EDIT_LEAD = ("Hand edit: {path} is not what the spec compiles to, and it is what CI would submit "
             "(- compiled from the spec, + committed):")


def _diff_part(item: OutputDiff, md: bool, lead: str = "") -> Part:
    """A file's unified diff: whole, or its first lines (each at most LINE_LIMIT characters)
    and how many more there are; after ``lead`` ({path}: the file's), never cut."""
    lines = [md_.clip(line, LINE_LIMIT) for line in item.diff.split("\n")]
    if lead:
        head, tail = lead.split("{path}")
        lead = (f"**{md_.text(head)}{md_.code(item.path)}{md_.text(tail)}**\n" if md
                else f"{head}{md_.visible(item.path)}{tail}\n")

    def note(shown: int) -> str:
        left = len(lines) - shown
        if md:
            what = f"{left:,} more line(s)" if shown else f"the diff of {md_.code(item.path)} ({left:,} lines)"
            return f"*… {what} left out for length: see the full diff*"
        return f"… {left:,} more line(s) of {item.path} left out for length: see the full diff"

    def shown(count: int) -> str:
        if count == 0:
            return lead + note(0)
        body = "\n".join(lines[:count])
        return lead + (md_.fenced(body, "diff") if md else body) + "\n" + note(count)

    def cut(room: int) -> str:
        low, high = 0, len(lines) - 1  # the most lines that fit (one fewer than all: it is a cut)
        while low < high:
            middle = (low + high + 1) // 2
            if len(shown(middle)) <= room:
                low = middle
            else:
                high = middle - 1
        while low and len(shown(low)) > room:  # the length is nearly, not strictly, monotonic
            low -= 1
        return shown(low)

    return Part(lead + (md_.fenced(item.diff, "diff") if md else item.diff), cut)
