"""What reviewers and CI see: `check` (are the committed outputs what the specs compile to?),
`plan` (what will run) and `diff` (what a change to a spec changes).

All three reuse build(): the same Artifact that `compile` writes is what `check` compares and
`diff` diffs, so they cannot disagree with `compile`.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .build import Outcome
from .compiler import base
from .compiler.write import target_dir
from .schema.validate import ValidSpec

MARKERS = ("Edit the spec, not this file",)  # how a directory is recognised as trainspec output


# --- check ------------------------------------------------------------------------------------

@dataclass
class Finding:
    kind: str  # "stale" | "missing" | "extra" | "orphan"
    path: Path
    diff: str = ""

    def render(self) -> str:
        words = {"stale": "differs from what its spec compiles to (edited by hand, or the spec changed)",
                 "missing": "is missing: the spec produces it",
                 "extra": "is not produced by its spec any more",
                 "orphan": "has no spec: it was compiled from a spec that is gone or renamed"}
        text = f"{self.path}: {words[self.kind]}"
        return text + ("\n" + self.diff if self.diff else "")


def check_outputs(outcomes: Sequence[Outcome], out: Path) -> List[Finding]:
    findings: List[Finding] = []
    expected_dirs = set()
    for outcome in outcomes:
        for artifact in outcome.artifacts:
            folder = target_dir(out, artifact)
            expected_dirs.add(folder)
            produced = {f.path for f in artifact.files}
            for item in artifact.files:
                path = folder / item.path
                if not path.exists():
                    findings.append(Finding("missing", path))
                    continue
                current = path.read_bytes()
                if current != item.data:
                    findings.append(Finding("stale", path, unified(current, item.data, str(path), "compiled")))
            if folder.is_dir():
                for path in sorted(folder.rglob("*")):
                    if path.is_file() and path.relative_to(folder).as_posix() not in produced:
                        findings.append(Finding("extra", path))
    if out.is_dir():
        for folder in sorted(p for p in out.glob("*/*") if p.is_dir()):
            if folder not in expected_dirs and _is_ours(folder):
                findings.append(Finding("orphan", folder))
    return findings


def _is_ours(folder: Path) -> bool:
    for path in folder.iterdir():
        if path.is_file() and path.suffix in (".yml", ".yaml", ".xml", ".sh"):
            head = path.read_bytes()[:600].decode("utf-8", "replace")
            if any(m in head for m in MARKERS):
                return True
    return False


def unified(old: bytes, new: bytes, old_name: str, new_name: str) -> str:
    lines = difflib.unified_diff(old.decode("utf-8", "replace").splitlines(keepends=True),
                                 new.decode("utf-8", "replace").splitlines(keepends=True), old_name, new_name)
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines).rstrip("\n")


# --- plan -------------------------------------------------------------------------------------

def plan(outcome: Outcome) -> Dict[str, Any]:
    """A reviewer's view of one spec: per target, who runs where with which environment."""
    valid = outcome.valid
    spec = valid.spec
    targets = []
    for artifact in outcome.artifacts:
        launcher = base.launcher(valid, artifact.target)
        targets.append({
            "target": artifact.target,
            "world_size": valid.world_size,
            "nodes": valid.nodes,
            "procs_per_node": valid.procs_per_node,
            "launcher": "tensorflow" if spec.framework == "tensorflow" else launcher,
            "files": [f.path for f in artifact.files],
            "submit": artifact.submit.format(dir=f"<out>/{valid.name}/{artifact.target}"),
            "settings": _target_settings(valid, artifact.target),
            "ranks": {"first": _rank_env(valid, artifact.target, 0),
                      "last": _rank_env(valid, artifact.target, valid.world_size - 1)},
        })
    return {
        "spec": valid.source.display,
        "name": valid.name,
        "hash": valid.source.digest,
        "framework": spec.framework,
        "sku": valid.sku.name if valid.sku else spec.resources.sku,
        "gpu": (f"{valid.sku.gpus} x {valid.sku.gpu}" if valid.sku and valid.sku.gpu else None),
        "gpus_per_node": valid.gpus_per_node,
        "backend": valid.backend,
        "spot": spec.resources.spot,
        "image": spec.environment.image or spec.environment.azureml,
        "inputs": {name: (f"literal {item.value!r}" if item.path is None else f"{item.path} ({item.type}, {item.mode})")
                   for name, item in spec.inputs.items()},
        "outputs": {name: _output_text(item) for name, item in spec.outputs.items()},
        "targets": targets,
        "warnings": [d.render() for d in outcome.diagnostics if not d.is_error],
    }


def _output_text(item) -> str:
    where = item.path or "the job's own output"
    asset = f", registered as {item.name}" + (f":{item.version}" if item.version else "") if item.name else ""
    return f"{where} ({item.type}, {item.mode}{asset})"


def _target_settings(valid: ValidSpec, target: str) -> Dict[str, str]:
    """What a reviewer should see of a target's own settings beyond the world (Azure ML's
    identity, services, interpreter, parameter servers)."""
    settings = getattr(valid.spec.targets, target, None)
    if target != "azureml" or settings is None:
        return {}
    shown: Dict[str, str] = {}
    if settings.identity is not None:
        shown["identity"] = settings.identity.type + (f" ({settings.identity.client_id})"
                                                      if settings.identity.client_id else "")
    if settings.services:
        shown["services"] = ", ".join(f"{name} ({s.type}{', all nodes' if s.nodes else ''})"
                                      for name, s in settings.services.items())
    if settings.python != "python":
        shown["interpreter"] = settings.python
    if settings.parameter_server_count:
        shown["parameter servers"] = str(settings.parameter_server_count)
    return shown


def _rank_env(valid: ValidSpec, target: str, rank: int) -> Dict[str, str]:
    """What a training process of this rank gets (addresses symbolic, templates unrendered)."""
    node_rank, local_rank = divmod(rank, valid.procs_per_node)
    settings = getattr(valid.spec.targets, target, None)
    port = {"hpcpack": str(getattr(settings, "rdzv_port", "")), "ray": "<free port on node 0>"}.get(
        target, str(valid.spec.distribution.master_port))
    env = dict(valid.spec.env)
    env.update(base.lightning_defaults(valid))
    env.update({"MASTER_ADDR": "<address of node 0>", "MASTER_PORT": port,
                "WORLD_SIZE": str(valid.world_size), "RANK": str(rank), "LOCAL_RANK": str(local_rank),
                "LOCAL_WORLD_SIZE": str(valid.procs_per_node), "NODE_RANK": str(node_rank)})
    return env


def render_plan(data: Dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(data, indent=2, sort_keys=True)
    md = fmt == "markdown"
    lines = [f"## {data['name']} ({data['spec']})" if md else f"{data['name']}  ({data['spec']}, sha256:{data['hash']})"]
    facts = [("framework", data["framework"]), ("sku", data["sku"] or "-"), ("GPUs", data["gpu"] or "none"),
             ("GPUs per node", data["gpus_per_node"]), ("backend", data["backend"]),
             ("spot", "yes" if data["spot"] else "no"), ("environment", data["image"] or "-")]
    if md:
        lines += ["", "| | |", "| --- | --- |", *[f"| {k} | `{v}` |" for k, v in facts]]
    else:
        lines += [f"  {k:<14} {v}" for k, v in facts]
    for kind in ("inputs", "outputs"):
        for name, text in data[kind].items():
            lines.append(f"| {kind[:-1]} {name} | `{text}` |" if md else f"  {kind[:-1] + ' ' + name:<14} {text}")
    for t in data["targets"]:
        head = (f"{t['target']}: world {t['world_size']} = {t['nodes']} node(s) x {t['procs_per_node']} "
                f"process(es), launcher {t['launcher']}")
        lines += ["", f"### {head}" if md else head, ""]
        lines += [f"- submit: `{t['submit']}`" if md else f"  submit: {t['submit']}"]
        for key, value in t["settings"].items():
            lines.append(f"- {key}: `{value}`" if md else f"  {key}: {value}")
        for which in ("first", "last"):
            env = t["ranks"][which]
            text = " ".join(f"{k}={v}" for k, v in sorted(env.items()))
            label = f"rank {env['RANK']} ({which})"
            lines.append(f"- {label}: `{text}`" if md else f"  {label}: {text}")
    if data["warnings"]:
        lines += ["", "### warnings" if md else "warnings:"]
        lines += [f"- {w}" if md else f"  {w}" for w in data["warnings"]]
    return "\n".join(lines)


# --- diff -------------------------------------------------------------------------------------

SUMMARY: Tuple[Tuple[str, str], ...] = (
    ("nodes", "nodes"), ("world", "world"), ("procs_per_node", "processes per node"), ("sku", "sku"),
    ("gpus_per_node", "GPUs per node"), ("launcher", "launcher"), ("backend", "backend"),
    ("framework", "framework"), ("spot", "spot"), ("image", "environment"), ("command", "command"),
    ("targets", "targets"),
)


def summary(outcome: Optional[Outcome]) -> Dict[str, Any]:
    if outcome is None or outcome.valid is None:
        return {}
    valid = outcome.valid
    return {"nodes": valid.nodes, "world": valid.world_size, "procs_per_node": valid.procs_per_node,
            "sku": valid.sku.name if valid.sku else valid.spec.resources.sku, "gpus_per_node": valid.gpus_per_node,
            "launcher": ",".join(sorted({base.launcher(valid, a.target) for a in outcome.artifacts})) or None,
            "backend": valid.backend, "framework": valid.spec.framework, "spot": valid.spec.resources.spot,
            "image": valid.spec.environment.image or valid.spec.environment.azureml,
            "command": valid.spec.command, "targets": ",".join(a.target for a in outcome.artifacts)}


def semantic_changes(old: Dict[str, Any], new: Dict[str, Any]) -> List[str]:
    changes = []
    for key, words in SUMMARY:
        if old.get(key) != new.get(key):
            changes.append(f"{words} {_show(old.get(key))} → {_show(new.get(key))}")
    return changes


def _show(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


@dataclass
class SpecDiff:
    name: str
    changes: List[str]
    outputs: List[str] = field(default_factory=list)  # unified diffs


def diff_outcomes(name: str, old: Optional[Outcome], new: Optional[Outcome]) -> SpecDiff:
    result = SpecDiff(name, semantic_changes(summary(old), summary(new)))
    old_files = {(a.target, f.path): f.data for a in (old.artifacts if old else []) for f in a.files}
    new_files = {(a.target, f.path): f.data for a in (new.artifacts if new else []) for f in a.files}
    for key in sorted(set(old_files) | set(new_files)):
        before, after = old_files.get(key, b""), new_files.get(key, b"")
        if before != after and key[1] != base.SHIM_FILE:
            label = f"{name}/{key[0]}/{key[1]}"
            result.outputs.append(unified(before, after, f"a/{label}", f"b/{label}"))
    return result


def render_diffs(diffs: Sequence[SpecDiff], fmt: str) -> str:
    md = fmt == "markdown"
    out: List[str] = []
    for d in diffs:
        out.append(f"### {d.name}" if md else f"== {d.name}")
        changes = "; ".join(d.changes) if d.changes else "no change to what runs"
        out.append(f"**{changes}**" if md else changes)
        for text in d.outputs:
            out += ["", "```diff", text, "```"] if md else ["", text]
        out.append("")
    return "\n".join(out).rstrip("\n")


def git_changed_specs(rev: str, paths: Sequence[str], cwd: Path) -> Tuple[Path, List[str], Path]:
    """(repository root, spec files changed since ``rev`` relative to it, a folder holding the
    tree at ``rev``). The old tree is extracted whole so that its code directories match."""
    import subprocess
    import tarfile
    import tempfile

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout

    root = Path(git("rev-parse", "--show-toplevel").strip())
    names = git("diff", "--name-only", "--no-renames", rev, "--", *(paths or ["."])).split("\n")
    changed = sorted(n for n in names if n.endswith((".yaml", ".yml")))
    old_tree = Path(tempfile.mkdtemp(prefix="trainspec-diff-"))
    archive = subprocess.run(["git", "archive", "--format=tar", rev], cwd=root, check=True, capture_output=True).stdout
    import io
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        try:
            tar.extractall(old_tree, filter="data")
        except TypeError:  # Python without extraction filters: git archive output is trusted
            tar.extractall(old_tree)
    (old_tree / ".git").mkdir()  # spec paths in headers are relative to the repository root
    return root, changed, old_tree
