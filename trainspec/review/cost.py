"""What a change costs: the facts of a job that decide what it runs on and for how long (the
spec's time limit, nodes, GPUs per node, SKU, spot, each target's priority and own time limit,
the targets themselves), before and after, for every job a review lists, and a job added or
removed. `plan --git` opens with this summary in every format; in markdown it is never cut,
whatever else the comment holds: the rest of the comment makes room for it (comment.shares).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from trainspec.build import Outcome
from trainspec.core import markdown as md_
from trainspec.review.comment import SUMMARY_LIMIT
from trainspec.review.diff import JobDiff, spec_fields


# The facts of one job that decide its cost, in the order a row names them. A field of the spec
# that decides it too is one more line here: the time limit first, as the spec wrote it.
FACTS: Tuple[Tuple[str, Callable[[Outcome], Any]], ...] = (
    ("timeout", lambda o: spec_fields(o).get("timeout")),
    ("nodes", lambda o: o.valid.nodes),
    ("GPUs per node", lambda o: o.valid.gpus_per_node),
    ("sku", lambda o: o.valid.sku.name if o.valid.sku else o.valid.spec.resources.sku),
    ("spot", lambda o: o.valid.spec.resources.spot),
    ("targets", lambda o: ", ".join(a.target for a in o.artifacts)),
)
VALUE_LIMIT = 80  # characters of one value in a row: the rows stay short, so that all of them fit


def gpus(outcome: Optional[Outcome]) -> int:
    """The GPUs a job asks for: nodes x GPUs per node (0 for no job)."""
    return outcome.valid.nodes * outcome.valid.gpus_per_node if outcome is not None else 0


def cost_facts(outcome: Outcome) -> Dict[str, Any]:
    """Every fact of ``outcome`` that decides its cost; a target's own (its ``COST_SETTINGS``:
    priority, tier, time limit...) as the spec wrote it, by spec path."""
    from trainspec.targets.vocabulary import settings

    found = {label: get(outcome) for label, get in FACTS}
    written = spec_fields(outcome)
    for artifact in outcome.artifacts:
        for setting in getattr(settings(artifact.target), "COST_SETTINGS", ()):
            path = f"targets.{artifact.target}.{setting}"
            found[path] = written.get(path)
    return found


@dataclass
class Row:
    """One job of the summary: how its cost changes, or that what CI would submit is not what
    its spec says (``edited``)."""

    name: str
    status: str  # "new" | "removed" | "changed"
    changes: List[Tuple[str, Any, Any]] = field(default_factory=list)
    gpus: Tuple[int, int] = (0, 0)
    edited: List[str] = field(default_factory=list)

    def as_json(self) -> Dict[str, Any]:
        return {"name": self.name, "status": self.status, "gpus_before": self.gpus[0], "gpus_after": self.gpus[1],
                "changes": [{"field": k, "before": a, "after": b} for k, a, b in self.changes],
                "outputs_edited": self.edited}


@dataclass
class Summary:
    rows: List[Row]
    total: Tuple[int, int]  # the GPUs of every job on each side

    def as_json(self) -> Dict[str, Any]:
        return {"gpus_before": self.total[0], "gpus_after": self.total[1], "jobs": [r.as_json() for r in self.rows]}

    def render(self, fmt: str, command: str = "") -> str:
        """The summary as markdown or text; markdown keeps to SUMMARY_LIMIT (a limit only a
        change of several hundred jobs reaches: then the last rows are counted, and ``command``
        shows them all)."""
        md = fmt == "markdown"
        costly = sum(1 for r in self.rows if r.changes)
        edited = sum(1 for r in self.rows if r.edited)
        before, after = self.total
        delta = f" ({after - before:+,})" if after != before else ""
        what = (f"{costly} job{'' if costly == 1 else 's'} with cost changes" if costly else "no cost changes")
        if edited:
            what += f"; {edited} job{'' if edited == 1 else 's'} where what CI would submit is not what the spec says"
        head = f"GPUs of all jobs: {before:,} → {after:,}{delta}; {what}"
        lines = [f"**Cost: {md_.text(head)}**" if md else f"cost: {head}"]
        rows = [_row(r, md) for r in self.rows]
        if md and len(lines[0]) + sum(len(r) + 1 for r in rows) > SUMMARY_LIMIT:
            kept, used = [], len(lines[0]) + 1
            for count, row in enumerate(rows):
                more = f"- *… and {len(rows) - count} more job(s): {md_.code(command)}*"
                if used + len(row) + len(more) + 2 > SUMMARY_LIMIT:
                    kept.append(more)
                    break
                kept.append(row)
                used += len(row) + 1
            rows = kept
        if md and rows:
            lines.append("")  # the list after the paragraph
        lines += rows
        return "\n".join(lines)


def summarise(old_jobs: Dict[str, Outcome], new_jobs: Dict[str, Outcome], diffs: Sequence[JobDiff]) -> Summary:
    """The cost of the change from ``old_jobs`` to ``new_jobs`` (by job name), job by job for the
    jobs ``diffs`` lists."""
    rows = []
    for d in diffs:
        before, after = old_jobs.get(d.name), new_jobs.get(d.name)
        pair = (gpus(before), gpus(after))
        if before is None or after is None:  # a job added or removed (or whose base did not compile)
            facts = cost_facts(after or before)
            shown = [(k, v) for k, v in facts.items() if v not in (None, False, "")]
            changes = [(k, None, v) if after else (k, v, None) for k, v in shown]
            rows.append(Row(d.name, "new" if after else "removed", changes, pair, list(d.edited)))
            continue
        old_facts, new_facts = cost_facts(before), cost_facts(after)
        changes = [(k, old_facts.get(k), new_facts.get(k)) for k in [*old_facts, *(k for k in new_facts
                                                                                  if k not in old_facts)]
                   if old_facts.get(k) != new_facts.get(k)]
        if changes or d.edited:
            rows.append(Row(d.name, "changed", changes, pair, list(d.edited)))
    total = (sum(gpus(o) for o in old_jobs.values()), sum(gpus(o) for o in new_jobs.values()))
    return Summary(rows, total)


def _value(value: Any, md: bool) -> str:
    if value is None:
        shown = "-"
    elif isinstance(value, bool):
        shown = "yes" if value else "no"
    else:
        shown = md_.clip(str(value), VALUE_LIMIT)
    return md_.code(shown) if md else md_.visible(shown)


def _row(row: Row, md: bool) -> str:
    name = md_.code(row.name) if md else md_.visible(row.name)
    parts = []
    a, b = row.gpus
    if row.status == "new":
        parts.append(f"new job, GPUs {_value(b, md)}: " + ", ".join(f"{k} {_value(v, md)}" for k, _, v in row.changes))
    elif row.status == "removed":
        parts.append(f"removed job, GPUs {_value(a, md)} → {_value(0, md)}: "
                     + ", ".join(f"{k} {_value(v, md)}" for k, v, _ in row.changes))
    else:
        parts += [f"{k} {_value(x, md)} → {_value(y, md)}" for k, x, y in row.changes]
        if a != b:
            parts.append(f"GPUs {_value(a, md)} → {_value(b, md)}")
    if row.edited:
        files = ", ".join(md_.code(f) if md else md_.visible(f) for f in row.edited)
        warning = f"what CI would submit is not what the spec says: {files}"
        parts.append(f"**{warning}**" if md else warning)
    return f"- {name}: " + "; ".join(parts) if md else f"  {name}: " + "; ".join(parts)
