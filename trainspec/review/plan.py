"""`plan`: what will run, for every job a spec compiles to (the world, who starts the processes,
the same facts for every target -- where it runs, its time limit, priority or spot, image and
GPUs in all --, the environment the first and last process see, each target's own settings),
as text, json or one markdown document.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence, Tuple

from trainspec.registry.build import Outcome
from trainspec.core import markdown as md_
from trainspec.core.secrets import redact_value
from trainspec.compiler import base
from trainspec.schema.validate import ValidSpec
from trainspec.registry import build as pipeline
from trainspec.review.comment import (PLAN_BUDGET, REST_MIN, SHARED_NAMES, VALUE_LIMIT, Section, budget_for, fit,
                                      shares, whole_part)

# What plan says of a job whose committed outputs are not what its spec compiles to: CI submits
# the committed files.
EDITED = "what CI would submit is not what the spec says"


# --- plan -------------------------------------------------------------------------------------

def plan(outcome: Outcome, out: str = "<out>", edited: Sequence[str] = (), catalog: Optional[Any] = None) -> Dict[str, Any]:
    """A reviewer's view of one spec: per target, who runs where with which environment
    (``out``: the output directory as the user names it, for the submit commands; ``edited``:
    its committed outputs that are not what it compiles to, which CI would submit; ``catalog``:
    the team catalog that prices it, default the one nearest the spec)."""
    from trainspec.review.naming import platform_name
    from trainspec.review.cost import target_cost

    from trainspec.schema.skus import catalog_for

    valid = outcome.valid
    spec = valid.spec
    catalog = catalog if catalog is not None else catalog_for(valid.source.dir)[0]
    targets = []
    for artifact in outcome.artifacts:
        launcher = pipeline.launcher(valid, artifact.target)
        module = pipeline.target(artifact.target)
        targets.append({
            "command": valid.render(("command",), spec.command, module.refs_for(valid)).strip(),
            "target": artifact.target,
            "world_size": valid.world_size,
            "nodes": valid.nodes,
            "procs_per_node": valid.procs_per_node,
            "launcher": launcher,
            "files": [f.path for f in artifact.files],
            "submit": artifact.submit.format(dir=shlex.quote(f"{out}/{valid.name}/{artifact.target}")),
            # the name `trainspec submit` gives it there: what it finds instead of submitting twice
            "job": {"name": platform_name(outcome, artifact), "submitted": None},
            # the same facts, in the same order, for every target (compiler/base.py PlanFacts)
            "facts": module.plan_facts(valid).as_dict(),
            # its GPUs, price per hour and the most it can cost (review/cost.py)
            "cost": target_cost(outcome, artifact.target, catalog).as_json(),
            "settings": module.plan_settings(valid),  # its own, beyond the facts
            "secrets": base.secret_lines(valid, artifact.target),
            "hardware": _hardware(valid, artifact.target),
            "ranks": {"first": _rank_env(valid, artifact.target, 0),
                      "last": _rank_env(valid, artifact.target, _started(valid, launcher) - 1)},
        })
    return redact_value(None, {  # defence in depth: validation refuses credentials (core/secrets.py)
        "spec": valid.source.display,
        "name": valid.name,
        "hash": valid.source.digest,
        "description": spec.description,
        "command": spec.command,
        "outputs_edited": list(edited),
        "framework": spec.framework,
        "sku": valid.sku.name if valid.sku else spec.resources.sku,
        "sku_source": valid.sku_source,
        "gpu": _gpu(valid, [a.target for a in outcome.artifacts]),
        "gpus_per_node": valid.gpus_per_node,
        "backend": valid.backend,
        "spot": spec.resources.spot,
        "image": spec.environment.image or spec.environment.azureml,
        "inputs": {name: (f"literal {item.value!r}" if item.path is None else f"{item.path} ({item.type}, {item.mode})")
                   for name, item in spec.inputs.items()},
        "outputs": {name: _output_text(item) for name, item in spec.outputs.items()},
        "targets": targets,
        "warnings": [d.render() for d in outcome.diagnostics if not d.is_error],
    })


def _hardware(valid: ValidSpec, target: str) -> Optional[Dict[str, Any]]:
    """What chooses the machines on ``target`` (None: the job names no size): the sku, or, where it
    is not enforced, what decides instead and how to link them."""
    if valid.sku is None:
        return None
    found = pipeline.hardware(valid, target)
    return {"enforced": found.enforced, "by": found.by, "hint": found.hint}


def _gpu(valid: ValidSpec, targets: Sequence[str]) -> Optional[str]:
    """The GPUs of a node, the model named only for the targets where the sku chooses the machines."""
    sku = valid.sku
    if sku is None or not sku.gpu:
        return f"{valid.gpus_per_node} per node (model unknown: no sku)" if valid.gpus_per_node else None
    if not sku.gpus:
        return None
    loose = pipeline.unenforced(valid, targets)
    if not loose:
        return f"{sku.gpus} x {sku.gpu}"
    if len(loose) == len(targets):
        return f"{valid.gpus_per_node} per node, model not enforced (sku not enforced on {', '.join(loose)})"
    held = ", ".join(t for t in targets if t not in loose)
    return f"{sku.gpus} x {sku.gpu} on {held}; sku not enforced on {', '.join(loose)}"


def _output_text(item) -> str:
    where = item.path or "the job's own output"
    asset = f", registered as {item.name}" + (f":{item.version}" if item.version else "") if item.name else ""
    return f"{where} ({item.type}, {item.mode}{asset})"


def _rank_env(valid: ValidSpec, target: str, rank: int) -> Dict[str, str]:
    """What the process the platform starts as number ``rank`` gets (addresses symbolic, the spec's
    env rendered as the compiled job has it): with a per-node launcher, that is node ``rank``'s
    launcher, which starts the workers."""
    module = pipeline.target(target)
    port = module.plan_port(valid)
    env: Dict[str, Any] = base.spec_env(valid, module.refs_for(valid))
    env.update(base.lightning_defaults(valid))
    launcher = pipeline.launcher(valid, target)
    if launcher == "tensorflow":  # the platform's TF_CONFIG, worker by worker
        workers = ", ".join(f'"<address of node {n}>:<port>"' for n in range(valid.nodes))
        env["TF_CONFIG"] = ('{"cluster": {"worker": [%s]}, "task": {"type": "worker", "index": %d}}'
                            % (workers, rank))
        return {k: str(v) for k, v in env.items()}
    # what the shim exports to that process: its own answer (World.env), not a second one
    from trainspec.runtime.shim import World

    per_process = valid.procs_per_node if launcher != "per-node" else 1  # per node: the node's launcher
    node_rank, local_rank = divmod(rank, per_process)
    world = World(platform=target, master_addr="<address of node 0>", master_port=port,
                  world_size=valid.nodes * per_process, rank=rank, local_rank=local_rank,
                  local_world_size=per_process, node_rank=node_rank, nodes=valid.nodes)
    env.update({k: v for k, v in world.env(launcher, valid.procs_per_node).items() if v is not None})
    return {k: str(v) for k, v in env.items()}


def _started(valid: ValidSpec, launcher: str) -> int:
    """How many processes the platform starts: one per node when a launcher on each node fans out."""
    return valid.nodes if launcher in ("per-node", "tensorflow") else valid.world_size


def plan_document(plans: Sequence[Dict[str, Any]], removed: Sequence[Dict[str, str]], fmt: str,
                  base_rev: Optional[str] = None, max_chars: Optional[int] = None,
                  rerun: Sequence[str] = ("trainspec", "plan", "--format", "text", "."),
                  summary: Optional[Any] = None) -> str:
    """One document for every planned job (and the jobs a change removes): what a pull request
    comment or a tool reads. ``summary`` (a cost.Summary, with --git) opens it and is never cut.
    Markdown stays within ``max_chars`` (default PLAN_BUDGET, grown by what the summary needs,
    comment.shares; 0: no limit): the jobs that do not fit are summarised, and a note says where
    the full plan is: ``rerun`` (the command line that made this document) in text."""
    if fmt == "json":
        document = {"base": base_rev, "jobs": list(plans), "removed": list(removed)}
        if summary is not None:
            document["cost"] = summary.as_json()
        return json.dumps(document, indent=2, sort_keys=True)
    md = fmt == "markdown"
    scope = f" changed since {base_rev}" if base_rev else ""
    count = f"{len(plans)} job{'' if len(plans) == 1 else 's'}{scope}"
    title = f"# trainspec plan: {md_.text(count)}" if md else f"trainspec plan: {count}"
    if base_rev:
        title += "\n\n" + launches(plans, md)
    command = shlex.join(rerun)
    budget = budget_for(max_chars, fmt, PLAN_BUDGET)
    if summary is not None:
        opening = summary.render(fmt, command)
        title += "\n\n" + opening
        if budget is not None:  # the summary is never cut: the rest makes room
            budget = shares(len(opening))[0] if max_chars is None else max(budget, len(title) + REST_MIN)
    # what the summary says is not named again below it (cost.Summary.said_above)
    said = summary.said_above(fmt, command) if summary is not None else {}
    sections = _plan_sections(plans, fmt, said)
    if removed:
        lines = [f"- {md_.text(r['name'])} ({md_.text(r['spec'])}): no longer compiled; its outputs go with --prune"
                 if md else f"- {md_.visible(r['name'])} ({md_.visible(r['spec'])}): no longer compiled; "
                 "its outputs go with --prune" for r in removed]
        sections.append(Section([f"{r['name']} (removed)" for r in removed],
                                 "## removed jobs" if md else "removed jobs:", "\n",
                                 [whole_part("\n".join(lines), f"{len(removed)} removed job(s), in the full plan", md)]))
    if not plans and not removed:
        sections.append(Section([], "no job changes" if base_rev else "no jobs"))
    return fit(title, sections, budget, md, "the full plan", command)


def launches(plans: Sequence[Dict[str, Any]], md: bool) -> str:
    """What merging the change launches: every (job, target) of the plan, which is what the
    example workflow's `trainspec submit --plan` submits on a push (each target it submits to:
    the per-target counts say which), counted where the merge is decided, in the comment."""
    by_target = Counter(t["target"] for p in plans for t in p["targets"])
    total = sum(by_target.values())
    head = f"Merging this launches {total} job{'' if total == 1 else 's'}" if total else "Merging this launches no job"
    if not total:
        return f"**{head}**" if md else head.lower()
    where = ", ".join(f"{count} on {target}" for target, count in sorted(by_target.items()))
    return f"**{head}** ({md_.text(where)})" if md else f"{head.lower()} ({where})"


def _plan_sections(plans: Sequence[Dict[str, Any]], fmt: str, said: Dict[str, Dict[str, str]]) -> List[Section]:
    """Each job's plan section; in markdown (the comment), what several jobs' plans say alike
    said once first (said_once_plans), each of those jobs' sections only what differs from it,
    and a new value the summary says (``said``, by job) not named again."""
    if fmt != "markdown":
        return [_plan_section(p, fmt) for p in plans]
    groups, own = said_once_plans(plans, fmt, said)
    sections = []
    for names, shared in groups:
        jobs = ", ".join(md_.code(n) for n in names[:SHARED_NAMES])
        more = f", … and {len(names) - SHARED_NAMES} more" if len(names) > SHARED_NAMES else ""
        head = (f"## Said once for {len(names)} jobs\nJobs ({len(names)}): {jobs}{more}\n\n"
                "*Each of their sections below shows only where the job differs from this.*")
        part = whole_part(shared, f"what the {len(names)} jobs share is in the full plan", True)
        part.keep = True
        sections.append(Section([f"said once for {len(names)} jobs"], head, "\n\n", [part], rank=0))
    for p in plans:
        if p["name"] in own:
            head, _, rest = own[p["name"]].partition("\n\n")
            parts = [whole_part(rest, "the rest of what differs is in the full plan", True)] if rest else []
            sections.append(Section([p["name"]], head, "\n\n", parts))
        else:
            sections.append(_plan_section(p, fmt, said.get(p["name"])))
    return sections


def _plan_section(data: Dict[str, Any], fmt: str, said: Optional[Dict[str, str]] = None) -> "Section":
    """A job's plan: its heading, then the rest (left out as a whole when it does not fit)."""
    md = fmt == "markdown"
    head, rest = _assemble(_pieces(data, fmt, said), md).split("\n", 1)
    if md:
        rest = rest[1:]  # the blank line after the heading
    return Section([data["name"]], head, "\n\n" if md else "\n",
                    [whole_part(rest, "the rest of this job's plan is in the full plan", md)])


def _hardware_text(target: Dict[str, Any], sku: str) -> str:
    """A target's hardware line: what selects the sku, or that it is not enforced there and why."""
    found = target["hardware"]
    if found["enforced"]:
        return f"{sku}, selected by {found['by']}"
    return f"sku not enforced on {target['target']}: {found['by']}" + (f" ({found['hint']})" if found["hint"] else "")


def _job_text(job: Dict[str, Any]) -> str:
    """What `trainspec submit` would do with a job: unknown unless plan --submitted asked the platform."""
    found = job.get("submitted")
    if found is None:
        return "(trainspec submit creates it, or follows it if it is already there; plan --submitted asks)"
    return f"({found})"


def render_plan(data: Dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(data, indent=2, sort_keys=True)
    return _assemble(_pieces(data, fmt), fmt == "markdown")


# A job's plan in pieces, each keyed by what it says (a fact of the table, a target's bullet), so
# that what several jobs say alike can be said once (grouped): (key, line).
Piece = Tuple[Tuple[str, ...], str]


def _pieces(data: Dict[str, Any], fmt: str, said: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """A job's plan as its heading, its hand-edit warning, its table (facts, inputs, outputs), each
    target's heading and bullets, and its warnings, every line keyed (Piece). ``said``: the new
    values the comment's summary says of this job, by value, with their field (markdown): a line
    of one of them names the field instead of the value again."""
    md = fmt == "markdown"
    vis, text, code, cell = md_.visible, md_.text, md_.code, md_.cell_code
    said = said or {}

    def value(v: Any) -> str:  # one spec-derived value: whole in text, clipped in the comment
        return md_.clip(vis(str(v)), VALUE_LIMIT) if md else vis(str(v))

    def shown(v: Any, in_cell: bool = False) -> str:  # a value in the comment, or which new value said above it is
        span = md_.cell_code if in_cell else md_.code
        return f"the new {span(said[str(v)])}, said above" if str(v) in said else span(value(v))

    title = (f"## {text(data['name'])} ({text(data['spec'])})" if md
             else f"{vis(data['name'])}  ({vis(data['spec'])}, sha256:{data['hash']})")
    edited = []
    if data.get("outputs_edited"):
        files = ", ".join(code(f) if md else vis(f) for f in data["outputs_edited"])
        about = f"{EDITED}: {files} differ from what the spec compiles to, and CI submits the committed files"
        edited = [f"**{about}** (see the diff; check fails until they are recompiled)" if md
                  else f"  !! {about} (see diff; check fails until they are recompiled)"]
    facts = [("description", data.get("description") or "-"), ("framework", data["framework"]),
             ("sku", (data["sku"] or "-") + (f" (from {data['sku_source']})" if data.get("sku_source") else "")),
             ("backend", data["backend"]), ("environment", data["image"] or "-")]
    table: List[Piece] = [(("fact", k), f"| {k} | {shown(v, True)} |" if md else f"  {k:<14} {value(v)}")
                          for k, v in facts]
    for kind in ("inputs", "outputs"):
        for name, about in data[kind].items():
            label = f"{kind[:-1]} {name}"
            table.append(((kind, name), f"| {text(label)} | {cell(value(about))} |" if md
                          else f"  {vis(label):<14} {value(about)}"))
    targets = []
    for t in data["targets"]:
        head = (f"{t['target']}: world {t['world_size']} = {t['nodes']} node(s) x {t['procs_per_node']} "
                f"process(es), launcher {t['launcher']}")
        lines: List[Piece] = [(("submit",), f"- submit: {code(t['submit'])}" if md else f"  submit: {vis(t['submit'])}")]
        about = _job_text(t["job"])
        lines.append((("job",), f"- job: {code(t['job']['name'])} {text(about)}" if md
                      else f"  job: {t['job']['name']} {about}"))
        # what runs: the spec's command, its templates rendered as this target's job has them
        lines.append((("command",), f"- command: {shown(t['command'])}" if md
                      else f"  command: {value(t['command'])}"))
        for key, fact in t["facts"].items():  # where, time limit, priority, image, GPUs: every target alike
            lines.append((("fact", key), f"- {text(key)}: {shown(fact)}"
                          if md else f"  {vis(key)}: {value(fact)}"))
        if t.get("cost"):  # our own words and figures: prose, every $ escaped
            lines.append((("cost",), f"- cost: {text(value(t['cost']['text']))}" if md
                          else f"  cost: {value(t['cost']['text'])}"))
        if t.get("hardware"):
            about = _hardware_text(t, data["sku"])
            lines.append((("hardware",), f"- hardware: {text(value(about))}" if md else f"  hardware: {value(about)}"))
        for key, setting in t["settings"].items():
            lines.append((("setting", key), f"- {text(key)}: {shown(setting)}" if md
                          else f"  {vis(key)}: {value(setting)}"))
        for i, line in enumerate(t.get("secrets", ())):  # where each secret is kept here, never its value
            lines.append((("secret", str(i)), f"- secret: {code(value(line))}" if md else f"  secret: {value(line)}"))
        for which in ("first", "last"):
            env = t["ranks"][which]
            variables = " ".join(f"{vis(k)}={value(v)}" for k, v in sorted(env.items()))
            per_node = t["launcher"] in ("per-node", "tensorflow")
            number = 0 if which == "first" else (t["nodes"] if per_node else t["world_size"]) - 1
            kind = {"tensorflow": "worker {}", "per-node": "node {} launcher"}.get(t["launcher"], "rank {}")
            label = f"{kind.format(number)} ({which})"
            lines.append((("rank", which), f"- {label}: {code(variables)}" if md else f"  {label}: {variables}"))
        targets.append((t["target"], f"### {text(head)}" if md else head, lines))
    warnings: List[Piece] = [(("warning", w), f"- {text(md_.clip(w, 4 * VALUE_LIMIT))}" if md
                              else f"  {vis(w, line=True)}") for w in data["warnings"]]
    return {"title": title, "edited": edited, "table": table, "targets": targets, "warnings": warnings}


def _assemble(pieces: Dict[str, Any], md: bool, short_heads: Sequence[str] = ()) -> str:
    """A plan's lines from its pieces (all of a job's, or only those that differ from a group's):
    the title, the table when it has rows, each target with bullets (its heading short, the
    target's name, when it is in ``short_heads``: the same as the group's), the warnings."""
    lines = [pieces["title"]] if pieces["title"] else []
    if pieces["edited"]:
        lines += ["", *pieces["edited"]]
    table = [line for _, line in pieces["table"]]
    if table:
        lines += ["", "| | |", "| --- | --- |", *table] if md else table
    for target, head, bullets in pieces["targets"]:
        if target in short_heads:
            head = f"### {md_.text(target)}" if md else f"{target}:"
        lines += ["", head, "", *(line for _, line in bullets)]
    if pieces["warnings"]:
        lines += ["", "### warnings" if md else "warnings:", *(line for _, line in pieces["warnings"])]
    return "\n".join(lines).lstrip("\n")


def said_once_plans(plans: Sequence[Dict[str, Any]], fmt: str, said: Optional[Dict[str, Dict[str, str]]] = None
                    ) -> Tuple[List[Tuple[List[str], str]], Dict[str, str]]:
    """What several jobs' plans say alike, said once: jobs with the same lines to say (the same
    targets, table rows and bullets: a line said once is never one a job lacks) are a group when
    they are two or more, and a line most of them say the same (more than half, at least two; a
    warning: all of them) is said once for the group; each of its jobs then says only the lines
    where it differs from that (its heading always, a target's heading with its world when that
    differs). Returns the groups ([job names], their shared lines) and, by job name, each grouped
    job's own lines. ``said``: by job, the new values said above (_pieces)."""
    from collections import Counter

    md = fmt == "markdown"
    pieces = {p["name"]: _pieces(p, fmt, (said or {}).get(p["name"])) for p in plans}
    by_targets: Dict[Tuple[Any, ...], List[str]] = {}
    for p in plans:  # the same lines to say: a line said once is one every job of the group has
        mine = pieces[p["name"]]
        shape = (tuple(k for k, _ in mine["table"]), tuple((t, tuple(k for k, _ in b)) for t, _, b in mine["targets"]))
        by_targets.setdefault(shape, []).append(p["name"])
    groups: List[Tuple[List[str], str]] = []
    own: Dict[str, str] = {}
    for shape, names in by_targets.items():
        if len(names) < 2:
            continue
        targets = [t for t, _ in shape[1]]
        def common(items: Sequence[Sequence[Piece]]) -> Dict[Tuple[str, ...], str]:
            said: Dict[Tuple[str, ...], str] = {}
            counts = Counter(piece for item in items for piece in dict(item).items())
            for (key, line), count in counts.items():
                if count * 2 > len(names) and count >= 2 and key not in said:
                    said[key] = line
            return said
        table = common([pieces[n]["table"] for n in names])
        heads = Counter((t, head) for n in names for t, head, _ in pieces[n]["targets"])
        shared_heads = {t: head for (t, head), count in heads.items() if count * 2 > len(names) and count >= 2}
        bullets = {t: common([next(b for tt, _, b in pieces[n]["targets"] if tt == t) for n in names])
                   for t in targets}
        warnings = {k: line for k, line in common([pieces[n]["warnings"] for n in names]).items()
                    if all(dict(pieces[n]["warnings"]).get(k) == line for n in names)}  # said of all, or by each
        if not (table or any(bullets.values()) or warnings):
            continue
        first = pieces[names[0]]  # the shared lines in a job's order
        shared = {"title": "", "edited": [],
                  "table": [(k, table[k]) for k, _ in first["table"] if k in table],
                  "targets": [(t, shared_heads.get(t, f"### {md_.text(t)}" if md else f"{t}:"),
                               [(k, bullets[t][k]) for k, _ in b if k in bullets[t]])
                              for t, _, b in first["targets"]],
                  "warnings": [(k, warnings[k]) for k, _ in first["warnings"] if k in warnings]}
        groups.append((names, _assemble(shared, md)))
        for n in names:
            mine = pieces[n]
            differ = {"title": mine["title"], "edited": mine["edited"],
                      "table": [(k, line) for k, line in mine["table"] if table.get(k) != line],
                      "targets": [], "warnings": [(k, line) for k, line in mine["warnings"] if warnings.get(k) != line]}
            short = []
            for t, head, b in mine["targets"]:
                rest = [(k, line) for k, line in b if bullets[t].get(k) != line]
                if shared_heads.get(t) == head:
                    if not rest:
                        continue
                    short.append(t)
                differ["targets"].append((t, head, rest))
            own[n] = _assemble(differ, md, short)
    return groups, own
