"""What a change costs: the facts of a job that decide what it runs on and for how long (the
spec's time limit, nodes, GPUs per node, SKU, spot, each target's priority and own time limit,
the targets themselves), before and after, for every job a review lists, and a job added or
removed. `plan --git` opens with this summary in every format; in markdown it is never cut,
whatever else the comment holds: the rest of the comment makes room for it (comment.shares).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from trainspec.registry import build as pipeline
from trainspec.registry.build import Outcome
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


# The fields of the spec that decide what a job runs and what it can reach, by spec path (and
# below it): a change to one is said in the summary, never cut, beside the cost, however many jobs
# a change touches. A target's own are its ``ACCESS_SETTINGS`` (an identity, `docker run`
# arguments, a namespace, a service account...).
ACCESS = ("command", "code", "environment", "secrets")
ACCESS_VALUE_LIMIT = 240  # characters of one such value in a row: long enough for a command's `| bash`
ACCESS_FIELDS = 12  # such fields named in one row (the command first), the others counted


def access_facts(outcome: Outcome) -> Dict[str, Any]:
    """Every field of ``outcome``'s spec, as written, that decides what the job runs or can reach."""
    from trainspec.schema.vocabulary import settings

    watched = [*ACCESS, *(f"targets.{a.target}.{s}" for a in outcome.artifacts
                          for s in getattr(settings(a.target), "ACCESS_SETTINGS", ()))]
    return {path: value for path, value in spec_fields(outcome).items()
            if value not in (None, "", [], {}) and any(path == w or path.startswith(w + ".") for w in watched)}


def _changed(before: Dict[str, Any], after: Dict[str, Any]) -> List[Tuple[str, Any, Any]]:
    """(field, before, after) of every field that differs, in the order the fields were found."""
    return [(k, before.get(k), after.get(k)) for k in [*before, *(k for k in after if k not in before)]
            if before.get(k) != after.get(k)]


def gpus(outcome: Optional[Outcome]) -> int:
    """The GPUs a job asks for: nodes x GPUs per node (0 for no job)."""
    return outcome.valid.nodes * outcome.valid.gpus_per_node if outcome is not None else 0


def cost_facts(outcome: Outcome) -> Dict[str, Any]:
    """Every fact of ``outcome`` that decides its cost; a target's own (its ``COST_SETTINGS``:
    priority, tier, time limit...) as the spec wrote it, by spec path."""
    from trainspec.schema.vocabulary import settings

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
    access: List[Tuple[str, Any, Any]] = field(default_factory=list)  # what it runs or can reach (ACCESS)

    def as_json(self) -> Dict[str, Any]:
        return {"name": self.name, "status": self.status, "gpus_before": self.gpus[0], "gpus_after": self.gpus[1],
                "changes": [{"field": k, "before": a, "after": b} for k, a, b in self.changes],
                "access": [{"field": k, "before": a, "after": b} for k, a, b in self.access],
                "outputs_edited": self.edited}


# The cost table opens the comment and is never cut; one longer than this (a change of hundreds of
# jobs) keeps the totals and the largest changes, and says the command that shows every row.
TABLE_LIMIT = 30_000
assert TABLE_LIMIT < SUMMARY_LIMIT
COLUMNS = ("job", "target", "GPUs", "price per hour", "the most it can cost")


@dataclass
class CostRow:
    """One job on one target, before and after (None: not there on that side), or the totals of
    every job on a target (``job`` None)."""

    job: Optional[str]
    target: str
    before: Optional[Any]  # TargetCost, or for totals a Totals
    after: Optional[Any]

    def changed(self) -> bool:
        if self.before is None or self.after is None:
            return True
        return _key(self.before) != _key(self.after)

    def weight(self) -> Tuple[float, float, int]:
        """How large the change is: the most it can cost, its price per hour, its GPUs."""
        def delta(get):
            return abs((get(self.after) or 0) - (get(self.before) or 0))
        return (delta(lambda c: c.most if c else 0), delta(lambda c: c.per_hour if c else 0),
                delta(lambda c: c.gpus if c else 0))

    def cells(self) -> Tuple[str, str, str]:
        """GPUs, price per hour, the most it can cost: before → after, in words."""
        a, b = self.before, self.after
        gpus = _change(a.gpus if a else None, b.gpus if b else None, str, lambda d: f"{d:+,}")
        # totals over different sets of priced jobs have no meaningful difference: none is said
        partial = isinstance(a, Totals) and isinstance(b, Totals) and a.unpriced != b.unpriced
        price = _change(_per_hour(a), _per_hour(b), str,
                        lambda d: ("+" if d >= 0 else "-") + _usd(abs(d)) + "/h",
                        (a.per_hour if a and a.billed and not partial else None),
                        (b.per_hour if b and b.billed and not partial else None))
        latest = b if b is not None else a
        if not isinstance(latest, Totals) and latest.assumed and latest.per_hour is not None:
            price += "; sku not enforced"
        most_a, most_b = _most(a), _most(b)
        if a is None:
            most = f"{most_b} (new)"
        elif b is None:
            most = f"none (removed; was {most_a})"
        else:
            most = most_b if most_a == most_b else f"{most_b}, was {most_a}"
        return gpus, price, most

    def as_json(self) -> Dict[str, Any]:
        side = (lambda c: c.as_json() if c is not None else None)
        return {"job": self.job, "target": self.target, "before": side(self.before), "after": side(self.after),
                "said": dict(zip(COLUMNS[2:], self.cells()))}


@dataclass(frozen=True)
class Totals:
    """Every job on one target: its GPUs, what the jobs billed per job cost per hour and at most
    (with how many have no price or no maximum), and what the team's nodes they hold cost."""

    gpus: int
    per_hour: Optional[float]  # billed per job, of the jobs with a price
    most: Optional[float]  # of the jobs with a maximum
    unpriced: int
    unbounded: int
    held: Optional[float]  # team cluster: the nodes the jobs hold, per hour
    billed: bool
    kept: int = 0  # of the unbounded, the jobs whose cluster is kept after them (the others: no time limit)

    def as_json(self) -> Dict[str, Any]:
        return {"gpus": self.gpus, "usd_per_hour": self.per_hour, "max_usd": self.most,
                "jobs_without_price": self.unpriced, "jobs_without_maximum": self.unbounded,
                "team_nodes_usd_per_hour": self.held, "billed_per_job": self.billed}


def totals(costs: Sequence[Any]) -> Totals:
    """The Totals of ``costs`` (TargetCosts of one target)."""
    billed = [c for c in costs if c.billed]
    held = [c.per_hour for c in costs if not c.billed and c.per_hour is not None]
    priced = [c.per_hour for c in billed if c.per_hour is not None]
    most = [c.most for c in billed if c.most is not None]
    return Totals(gpus=sum(c.gpus for c in costs), per_hour=round(sum(priced), 6) if priced else None,
                  most=round(sum(most), 6) if most else None, unpriced=len(billed) - len(priced),
                  unbounded=len([c for c in billed if c.per_hour is not None]) - len(most),
                  held=round(sum(held), 6) if held else None, billed=bool(billed),
                  kept=len([c for c in billed if c.per_hour is not None and c.unbounded]))


def _key(cost: Any) -> Tuple[Any, ...]:
    if isinstance(cost, Totals):
        return (cost.gpus, cost.per_hour, cost.most, cost.unpriced, cost.unbounded, cost.kept, cost.held)
    return (cost.gpus, cost.per_hour, cost.seconds, cost.billed, cost.unbounded, tuple(cost.missing()),
            bool(cost.assumed))


def _change(a: Any, b: Any, show: Callable[[Any], str], diff: Callable[[Any], str],
            na: Optional[float] = None, nb: Optional[float] = None) -> str:
    """``a → b (difference)``; one value when they are the same; a job added or removed said so.
    The difference of numbers ``na`` and ``nb`` when given (else of ``a`` and ``b``, when numbers)."""
    if a is None:
        return f"{show(b)} (new)"
    if b is None:
        return f"{show(a)} → none (removed)"
    if a == b:
        return show(b)
    x, y = (na, nb) if na is not None or nb is not None else (a, b)
    numbers = isinstance(x, (int, float)) and isinstance(y, (int, float))
    return f"{show(a)} → {show(b)}" + (f" ({diff(y - x)})" if numbers and y != x else "")


def _per_hour(cost: Any) -> Optional[str]:
    if cost is None:
        return None
    if isinstance(cost, Totals):
        said = []
        if cost.billed:
            said.append(f"{_usd(cost.per_hour or 0)}/h" + (f" + {cost.unpriced} job(s) without a price"
                                                           if cost.unpriced else ""))
        if cost.held is not None:
            said.append(f"team nodes held {_usd(cost.held)}/h, not billed per job")
        return "; ".join(said) or "no price"
    if cost.per_hour is None:
        return "no price (" + ", ".join(cost.missing() or ["no VM size"]) + f" in {cost.region.name})"
    if not cost.billed:
        return f"not billed per job (its team nodes: {_usd(cost.per_hour)}/h)"
    return f"{_usd(cost.per_hour)}/h"


def _most(cost: Any) -> Optional[str]:
    if cost is None:
        return None
    if isinstance(cost, Totals):
        if not cost.billed:
            return "not billed per job"
        said = f"up to {_usd(cost.most or 0)}" if cost.most is not None or not cost.unbounded else ""
        if cost.unbounded:  # in words: never "up to $0.00" when no job has a time limit
            none = no_maximum(cost.unbounded - cost.kept, cost.kept)
            said = f"{said} ({none})" if said else none
        if cost.unpriced:  # never "up to $0.00" alone when a job has no price to bound it
            said += f" + {cost.unpriced} job(s) without a price"
        return said
    if not cost.billed:
        return "not billed per job"
    if cost.per_hour is None:
        return "no price"
    if cost.unbounded:
        return "no maximum (the cluster is kept after the job)"
    if cost.seconds is None:
        return "no maximum (no time limit)"
    return f"up to {_usd(cost.most)} at the time limit ({_hours(cost.seconds)})"


def no_maximum(limitless: int, kept: int = 0) -> str:
    """Why jobs of a total have no most they can cost, plainly: "no maximum: 12 jobs have no time
    limit" (``limitless``: jobs without one; ``kept``: Ray clusters kept after their job)."""
    said = []
    if limitless:
        said.append(f"{limitless} job{' has' if limitless == 1 else 's have'} no time limit")
    if kept:
        said.append(f"{kept} job{' keeps its' if kept == 1 else 's keep their'} cluster after the job")
    return "no maximum: " + " and ".join(said)


def prices_note(costs: Sequence[Any]) -> str:
    """Where the prices of ``costs`` come from and when they were taken: the table's footnote."""
    from trainspec.schema.prices import snapshot_about

    regions = sorted({c.region.said() for c in costs})
    team = sorted({p.size for c in costs for p in c.parts if p.rate is not None and p.rate.origin == "team"})
    files = sorted({c.team_file for c in costs if c.team_file})
    note = (f"Prices: USD per hour for one VM (list prices: no discounts, disks or egress), from the {snapshot_about()}; "
            f"priced in {', '.join(regions) or 'no region'}")
    if team:
        note += f"; the team's own prices ({', '.join(files)}) for {', '.join(team)}"
    return (note + ". Spot and low priority at the spot rate, a Ray head at the regular rate; a job on the team's "
            "own nodes (a Slurm partition, an HPC Pack node group, a Kubernetes node pool) says what those nodes "
            "cost, never a bill per job; \"sku not enforced\": the target's cluster decides the machines, priced "
            "as if they were the sku.")


@dataclass
class Summary:
    rows: List[Row]
    total: Tuple[int, int]  # the GPUs of every job on each side
    table: List[CostRow] = field(default_factory=list)  # the totals of each target, then each job that changes
    note: str = ""
    catalogs: List["CatalogChange"] = field(default_factory=list)  # team catalogs the change edits, adds, removes
    # what changes in how many jobs (each changed field or fact, with its jobs; a job added or
    # removed), said before the rows; None: not a review's summary
    changed: Optional[List[Tuple[str, int]]] = None

    def as_json(self) -> Dict[str, Any]:
        return {"gpus_before": self.total[0], "gpus_after": self.total[1], "jobs": [r.as_json() for r in self.rows],
                "table": [r.as_json() for r in self.table], "prices": self.note,
                "catalogs": [c.as_json() for c in self.catalogs]}

    def render(self, fmt: str, command: str = "") -> str:
        """The summary as markdown or text: the cost table (never cut; in markdown, one longer
        than TABLE_LIMIT keeps the totals and the largest changes, and ``command`` shows them
        all), then each job's changes, which keep to what is left of SUMMARY_LIMIT (a limit only
        a change of several hundred jobs reaches: then the last rows are counted)."""
        md = fmt == "markdown"
        lines = self._head(md, command)
        rows, _ = self._rows(md, command, len("\n".join(lines)))
        if md and rows:
            lines.append("")  # the list after the paragraph
        lines += rows
        return "\n".join(lines)

    def _head(self, md: bool, command: str) -> List[str]:
        """The summary's lines before its rows: what merging launches and what changes, the cost
        in one line, the catalog changes, the table."""
        costly = sum(1 for r in self.rows if r.changes)
        edited = sum(1 for r in self.rows if r.edited)
        before, after = self.total
        delta = f" ({after - before:+,})" if after != before else ""
        what = (f"{costly} job{'' if costly == 1 else 's'} with cost changes" if costly else "no cost changes")
        named = {r.name for r in self.rows if r.changes}
        priced = len({r.job for r in self.table if r.job is not None and r.job not in named})
        if priced:  # no fact of theirs changed, their price did (the team's prices, say)
            what = (f"{what}; " if costly else "") + f"{priced} {'more ' if costly else ''}job{'' if priced == 1 else 's'} " \
                   f"whose price changes"
        reach = sum(1 for r in self.rows if r.access and r.status == "changed")  # a new job: all of it is new
        if reach:
            what += f"; {reach} job{'' if reach == 1 else 's'} whose command, image or access changes"
        if edited:
            what += f"; {edited} job{'' if edited == 1 else 's'} where what CI would submit is not what the spec says"
        head = f"GPUs of all jobs: {before:,} → {after:,}{delta}; {what}"
        lines = [f"**Cost: {md_.text(head)}**" if md else f"cost: {head}"]
        for change in self.catalogs[:CATALOG_CHANGES] if md else self.catalogs:
            lines += ["", *change.render(md)] if md else change.render(md)
        if md and len(self.catalogs) > CATALOG_CHANGES:
            more = f"… and {len(self.catalogs) - CATALOG_CHANGES} more team catalog change(s)"
            lines += ["", f"*{md_.text(more)}: {md_.code(command)}*"] if md else [f"  {more}"]
        table = self._table(md, command)
        if table:
            lines += ["", table] if md else [table]
        return lines + self._what_changes(md)

    def _rows(self, md: bool, command: str, opening: int) -> Tuple[List[str], bool]:
        """The rows after an opening of ``opening`` characters, within what is left of
        SUMMARY_LIMIT in markdown (the last ones counted), and whether every row is shown."""
        rows = said_once_rows(self.rows, md)
        limit = SUMMARY_LIMIT - opening
        if not md or sum(len(r) + 1 for r in rows) <= limit:
            return rows, True
        kept, used = [], 1
        for count, row in enumerate(rows):
            more = f"- *… and {len(rows) - count} more job(s): {md_.code(command)}*"
            if used + len(row) + len(more) + 2 > limit:
                kept.append(more)
                break
            kept.append(row)
            used += len(row) + 1
        return kept, False

    def said_above(self, fmt: str, command: str = "") -> Dict[str, Dict[str, str]]:
        """By job name, each new value of what it runs or can reach that this summary says (its
        rows, never cut), with the field it is the value of: what the comment below it does not
        name again (the plan's lines, a shared change's headline say "said above" instead): only
        for a job the summary names. None when the summary counts its last rows instead of
        showing them (a change of hundreds of jobs): then the comment names every value where it
        stands."""
        md = fmt == "markdown"
        if not md or not self._rows(md, command, len("\n".join(self._head(md, command))))[1]:
            return {}
        from trainspec.review.comment import SHARED_NAMES

        alike: Dict[str, List[Row]] = {}  # said_once_rows' shared rows name their first SHARED_NAMES jobs
        for r in self.rows:
            if r.status == "changed" and r.access:
                alike.setdefault(repr(r.access), []).append(r)
        named = [r for rows in alike.values() for r in (rows if len(rows) < 2 else rows[:SHARED_NAMES])]
        return {r.name: {str(after): path for path, before, after in r.access[:ACCESS_FIELDS]
                         if after is not None and max(len(str(before)), len(str(after))) <= ACCESS_VALUE_LIMIT}
                for r in named}  # a longer value: shown in part (_window)

    def _what_changes(self, md: bool) -> List[str]:
        """What changes in how many jobs, in one line before the rows: the field names, the
        values in the rows and the diff."""
        if self.changed is None:
            return []
        said = []
        for count, names in _by_count([c for c in self.changed if c[0] not in (NEW, REMOVED)]):
            fields = ", ".join(_field(n, md) for n in names[:CHANGED_FIELDS])
            more = f" and {len(names) - CHANGED_FIELDS} more" if len(names) > CHANGED_FIELDS else ""
            said.append(f"{fields}{more} in {count} job{'' if count == 1 else 's'}")
        counted = dict(self.changed)
        if counted.get(NEW):
            said.append(f"{counted[NEW]} new job{'' if counted[NEW] == 1 else 's'}")
        if counted.get(REMOVED):
            said.append(f"{counted[REMOVED]} job{'' if counted[REMOVED] == 1 else 's'} removed")
        what = "; ".join(said) or "no field or fact of a job"
        return ["", f"**What changes:** {what}."] if md else [f"  what changes: {what}"]

    def _table(self, md: bool, command: str) -> str:
        if not self.table:
            return ""
        cells = [(r, [r.job, r.target, *r.cells()]) for r in self.table]
        if not md:
            width = max(len(md_.visible(r.job or "all jobs")) for r in self.table)
            out = [f"  {'job':<{width}}  {'target':<10}  GPUs; price per hour; the most it can cost"]
            out += [f"  {md_.visible(c[0] or 'all jobs'):<{width}}  {c[1]:<10}  GPUs {c[2]}; {c[3]}; {c[4]}"
                    for _, c in cells]
            return "\n".join(out + [f"  ({self.note})"])

        def line(row: CostRow, values: List[Optional[str]]) -> str:
            job = md_.cell_code(row.job) if row.job is not None else "**all jobs**"
            return "| " + " | ".join([job, *(md_.text(v or "") for v in values[1:])]) + " |"

        header = ["| " + " | ".join(COLUMNS) + " |", "| " + " | ".join("---" for _ in COLUMNS) + " |"]
        body = [line(r, c) for r, c in cells]
        note = f"*{md_.text(self.note)}*"
        if sum(len(x) + 1 for x in (*header, *body, note)) <= TABLE_LIMIT:
            return "\n".join([*header, *body, "", note])
        # too long for one comment: the totals, then the largest changes while they fit
        totals_ = [b for (r, _), b in zip(cells, body) if r.job is None]
        jobs = sorted(((r, b) for (r, _), b in zip(cells, body) if r.job is not None),
                      key=lambda rb: tuple(-w for w in rb[0].weight()) + (rb[0].job, rb[0].target))
        kept = list(totals_)
        used = sum(len(x) + 1 for x in (*header, *kept, note)) + 200
        for count, (_, b) in enumerate(jobs):
            if used + len(b) + 1 > TABLE_LIMIT:
                break
            kept.append(b)
            used += len(b) + 1
        left = len(jobs) - (len(kept) - len(totals_))
        more = (f"*{left} smaller change(s) not shown (largest first above); every row: {md_.code(command)}*"
                if left else "")
        return "\n".join([*header, *kept, "", more, "", note] if more else [*header, *kept, "", note])


def summarise(old_jobs: Dict[str, Outcome], new_jobs: Dict[str, Outcome], diffs: Sequence[JobDiff],
              catalogs: Tuple[Dict[str, Any], Dict[str, Any]] = ({}, {}),
              own: Optional[Dict[str, Any]] = None) -> Summary:
    """The cost of the change from ``old_jobs`` to ``new_jobs`` (by job name): the cost table
    (every job whose GPUs, price or time limit change on a target, each side priced with the
    team catalog ``catalogs`` gives it by job name: a review gives both the base's), the
    catalogs the change edits, adds or removes (``own``: revision.Catalogs by head job name)
    with what their jobs would cost with them, and job by job the facts that change, of cost and
    of what the job runs or can reach, for the jobs ``diffs`` lists."""
    rows = []
    for d in diffs:
        before, after = old_jobs.get(d.name), new_jobs.get(d.name)
        pair = (gpus(before), gpus(after))
        if before is None or after is None:  # a job added or removed (or whose base did not compile)
            facts = cost_facts(after or before)
            shown = [(k, v) for k, v in facts.items() if v not in (None, False, "")]
            changes = [(k, None, v) if after else (k, v, None) for k, v in shown]
            access = _changed({}, access_facts(after)) if after else []
            rows.append(Row(d.name, "new" if after else "removed", changes, pair, list(d.edited), access))
            continue
        changes = _changed(cost_facts(before), cost_facts(after))
        access = _changed(access_facts(before), access_facts(after))
        if changes or d.edited or access:
            rows.append(Row(d.name, "changed", changes, pair, list(d.edited), access))
    rows.sort(key=lambda r: not r.access)  # what a job runs or reaches first: the last rows may be counted
    total = (sum(gpus(o) for o in old_jobs.values()), sum(gpus(o) for o in new_jobs.values()))
    sides = [_costs(old_jobs, catalogs[0]), _costs(new_jobs, catalogs[1])]
    table = [CostRow(job, target, sides[0].get((job, target)), sides[1].get((job, target)))
             for job, target in sorted({*sides[0], *sides[1]})]
    table = [r for r in table if r.changed()]
    moved = catalog_changes(new_jobs, own or {})
    opening = {"changed": _changed_fields(diffs)}
    if not table:
        return Summary(rows, total, catalogs=moved, **opening)
    targets = sorted({r.target for r in table})
    by_target = []
    for t in targets:
        old = [c for (_, tt), c in sides[0].items() if tt == t]
        new = [c for (_, tt), c in sides[1].items() if tt == t]
        by_target.append(CostRow(None, t, totals(old) if old else None, totals(new) if new else None))
    used = [c for r in table for c in (r.before, r.after) if c is not None]
    return Summary(rows, total, by_target + table, prices_note(used), moved, **opening)


def _changed_fields(diffs: Sequence[JobDiff]) -> List[Tuple[str, int]]:
    """Each field or fact the diffs change, with how many jobs change it (in the order first
    met); a job added or removed, or changed by no field (a file it reads, a hand edit), counted
    as such."""
    counts: Dict[str, int] = {}
    for d in diffs:
        if d.status in ("new", "removed"):
            said = [NEW if d.status == "new" else REMOVED]
        else:
            said = [c.field for c in d.changes] or ["no spec field (" + (d.reasons[0] if d.reasons else "outputs") + ")"]
        for name in dict.fromkeys(said):
            counts[name] = counts.get(name, 0) + 1
    return list(counts.items())


def _costs(jobs: Dict[str, Outcome], catalogs: Dict[str, Any]) -> Dict[Tuple[str, str], Any]:
    """Every job's TargetCost on each of its targets, by (job, target)."""
    return {(name, a.target): target_cost(outcome, a.target, catalogs.get(name))
            for name, outcome in jobs.items() for a in outcome.artifacts}


def _value(value: Any, md: bool, limit: int = VALUE_LIMIT) -> str:
    import json

    if value is None:
        shown = "-"
    elif isinstance(value, bool):
        shown = "yes" if value else "no"
    elif isinstance(value, (list, dict)):
        shown = md_.clip(json.dumps(value, sort_keys=True, default=str), limit)
    else:
        shown = md_.clip(str(value), limit)
    return md_.code(shown) if md else md_.visible(shown)


def _window(a: Any, b: Any, limit: int) -> Tuple[Any, Any]:
    """Two values too long to show whole, each from a little before where they first differ:
    `curl … | bash` added at the end of a long command is what the row shows of it."""
    if not (isinstance(a, str) and isinstance(b, str)) or max(len(a), len(b)) <= limit:
        return a, b
    start = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    start = max(0, start - 40)
    return (("…" + a[start:], "…" + b[start:]) if start else (a, b))


def _field(name: str, md: bool) -> str:
    """A field's path: a part of it (a secret's or a cluster's name) is the spec's, escaped and cut."""
    name = md_.clip(name, VALUE_LIMIT)
    return md_.text(name) if md else md_.visible(name)


def _access(row: Row, md: bool, lead: str = "what it runs or can reach:") -> str:
    """What a row's job runs or can reach, changed: each field before → after (new: as it is)."""
    said = []
    for k, x, y in row.access[:ACCESS_FIELDS]:
        x, y = _window(x, y, ACCESS_VALUE_LIMIT)
        if row.status == "new":
            said.append(f"{_field(k, md)} {_value(y, md, ACCESS_VALUE_LIMIT)}")
        else:
            said.append(f"{_field(k, md)} {_value(x, md, ACCESS_VALUE_LIMIT)} → {_value(y, md, ACCESS_VALUE_LIMIT)}")
    if len(row.access) > ACCESS_FIELDS:
        said.append(f"… and {len(row.access) - ACCESS_FIELDS} more field(s)")
    return (f"**{lead}** " if md else f"{lead} ") + "; ".join(said)


NEW, REMOVED = " new", " removed"  # a job added or removed, among the changed fields (no field's name)
CHANGED_FIELDS = 12  # fields named per count in the opening's "what changes"; the others counted


def _by_count(changed: Sequence[Tuple[str, int]]) -> List[Tuple[int, List[str]]]:
    """The changed fields and facts grouped by how many jobs change them, the most first."""
    found: Dict[int, List[str]] = {}
    for name, count in changed:
        found.setdefault(count, []).append(name)
    return sorted(found.items(), key=lambda item: -item[0])


def said_once_rows(rows: Sequence[Row], md: bool) -> List[str]:
    """The summary's rows, a change several jobs make alike said once: the same cost changes
    (GPUs included) in two jobs or more are one line naming them, and so is the same change of
    what they run or can reach; each job's own line then says only the rest (a hand edit is
    always the job's own), and none when nothing is left. A shared line stands where its first
    job's line would."""
    def cost_key(r: Row) -> Optional[Tuple[Any, ...]]:
        return (repr(r.changes), r.gpus) if r.status == "changed" and (r.changes or r.gpus[0] != r.gpus[1]) else None

    def access_key(r: Row) -> Optional[str]:
        return repr(r.access) if r.status == "changed" and r.access else None

    groups: Dict[Tuple[str, Any], List[Row]] = {}
    for r in rows:
        for kind, key in (("cost", cost_key(r)), ("access", access_key(r))):
            if key is not None:
                groups.setdefault((kind, key), []).append(r)
    shared = {k: members for k, members in groups.items() if len(members) >= 2}
    lines, said = [], set()
    for r in rows:
        own = r
        for kind, key in (("cost", cost_key(r)), ("access", access_key(r))):
            members = shared.get((kind, key))
            if members is None:
                continue
            if (kind, key) not in said:
                said.add((kind, key))
                lines.append(_shared_row(members, kind, md))
            own = replace(own, changes=[], gpus=(r.gpus[1], r.gpus[1])) if kind == "cost" else replace(own, access=[])
        if own is r or own.changes or own.access or own.edited or own.gpus[0] != own.gpus[1]:
            lines.append(_row(own, md))
    return lines


def _shared_row(members: Sequence[Row], kind: str, md: bool) -> str:
    """One line for a change ``members`` make alike: how many, their names (SHARED_NAMES of them),
    and the change, as each of their rows would say it."""
    from trainspec.review.comment import SHARED_NAMES

    names = [md_.code(r.name) if md else md_.visible(r.name) for r in members[:SHARED_NAMES]]
    more = f", … and {len(members) - SHARED_NAMES} more" if len(members) > SHARED_NAMES else ""
    first = members[0]
    if kind == "access":
        said = _access(first, md, "what they run or can reach:")
    else:
        said = "; ".join([f"{k} {_value(x, md)} → {_value(y, md)}" for k, x, y in first.changes]
                         + ([f"GPUs {_value(first.gpus[0], md)} → {_value(first.gpus[1], md)}"]
                            if first.gpus[0] != first.gpus[1] else []))
    count = f"{len(members)} jobs"
    return (f"- **{count}** ({', '.join(names)}{more}): {said}" if md
            else f"  {count} ({', '.join(names)}{more}): {said}")


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
    if row.access:
        parts.append(_access(row, md))
    if row.edited:
        files = ", ".join(md_.code(f) if md else md_.visible(f) for f in row.edited)
        warning = f"what CI would submit is not what the spec says: {files}"
        parts.append(f"**{warning}**" if md else warning)
    return f"- {name}: " + "; ".join(parts) if md else f"  {name}: " + "; ".join(parts)


# --- what a job costs on a target: GPUs, price per hour, the most it can cost ------------------------

# A target whose jobs run on the team's own nodes (a Slurm partition, an HPC Pack node group, a
# Kubernetes node pool) says so in its cost basis (``team_nodes``): those nodes cost what they cost
# whether or not a job runs, so a job is never billed for itself there. The others bill the job's
# VMs while it holds them.


@dataclass(frozen=True)
class Part:
    """Some VMs of one size at one rate: ``count`` x ``size``, spot or not, its Rate (None: no price)."""

    count: int
    size: str
    spot: bool
    rate: Optional[Any]  # spec.prices.Rate
    role: str = ""  # what these VMs are, where a job has several kinds (a Ray cluster's head, its workers)

    def said(self) -> str:
        kind = "spot" if self.spot else "pay-as-you-go"
        role = f"{self.role} " if self.role else ""
        if self.rate is None:
            return f"{role}{self.count} x {self.size}: no {kind} price"
        origin = "team price" if self.rate.origin == "team" else "snapshot"
        return f"{role}{self.count} x {self.size} at {_rate(self.rate.usd)} {kind} ({origin})"


@dataclass(frozen=True)
class TargetCost:
    """What one job costs on one target, or, on a team cluster, what the nodes it holds cost."""

    target: str
    gpus: int
    parts: Tuple[Part, ...]
    region: Any  # spec.prices.Region
    seconds: Optional[int]  # the time limit the target enforces; None: none
    team_nodes: str  # the team's own nodes the job runs on ("": billed per job)
    unbounded: str = ""  # why there is no maximum beyond the time limit (a Ray cluster kept after the job)
    team_file: Optional[str] = None  # the team catalog's file name, when it prices the job
    assumed: str = ""  # what decides the machines where the sku does not (priced as if they were the sku)

    @property
    def billed(self) -> bool:
        """Billed per job (not the team's own nodes)."""
        return not self.team_nodes

    @property
    def per_hour(self) -> Optional[float]:
        """USD per hour of every VM the job holds; None when one of them has no price."""
        if any(p.rate is None for p in self.parts) or not self.parts:
            return None
        return round(sum(p.count * p.rate.usd for p in self.parts), 6)

    @property
    def most(self) -> Optional[float]:
        """The most the job can cost: its price per hour for its whole time limit (None: no maximum,
        no price, or not billed per job)."""
        if not self.billed or self.per_hour is None or self.seconds is None or self.unbounded:
            return None
        return round(self.per_hour * self.seconds / 3600, 6)

    def missing(self) -> List[str]:
        return [p.size for p in self.parts if p.rate is None]

    def text(self) -> str:
        """The plan's cost line."""
        gpus = f"{self.gpus} GPU{'' if self.gpus == 1 else 's'}"
        where = f"in {self.region.said()}"
        if not self.parts:
            return f"{gpus}; no price: the job names no VM size"
        if self.per_hour is None:
            what = "; ".join(p.said() for p in self.parts)
            return f"{gpus}; no price {where}: {what} (trainspec skus lists the prices; prices: in the team file sets one)"
        parts = " + ".join(p.said() for p in self.parts)
        if self.assumed:
            where += f"; priced as the sku, which is not enforced here: {self.assumed}"
        if not self.billed:
            return (f"{gpus}; not billed per job: {self.target} runs on the team's own nodes ({self.team_nodes}, "
                    f"paid whether or not a job runs); the {sum(p.count for p in self.parts)} node(s) it holds cost "
                    f"{_usd(self.per_hour)}/h ({parts}, {where})")
        head = f"{gpus}; {_usd(self.per_hour)}/h ({parts}, {where})"
        if self.unbounded:
            return f"{head}; no maximum: {self.unbounded}"
        if self.seconds is None:
            return f"{head}; no maximum: no time limit"
        return f"{head}; up to {_usd(self.most)} at its time limit ({_hours(self.seconds)})"

    def as_json(self) -> Dict[str, Any]:
        return {"target": self.target, "gpus": self.gpus, "usd_per_hour": self.per_hour, "max_usd": self.most,
                "time_limit_seconds": self.seconds, "billed_per_job": self.billed, "region": self.region.name,
                "region_from": self.region.why, "no_maximum": self.unbounded or None,
                "vms": [{"count": p.count, "size": p.size, "spot": p.spot,
                         "usd_per_hour": p.rate.usd if p.rate else None, "from": p.rate.origin if p.rate else None}
                        for p in self.parts],
                "text": self.text()}


def _usd(value: float) -> str:
    from trainspec.schema.prices import usd

    return usd(value)


def _rate(value: float) -> str:
    """One VM's rate as the price list has it ($3.6047), at least to the cent."""
    whole, _, cents = f"{value:,.6f}".rstrip("0").partition(".")
    return f"${whole}.{cents.ljust(2, '0')}"


def _hours(seconds: int) -> str:
    hours = seconds / 3600
    return f"{hours:g}h" if hours == int(hours) or hours >= 1 else f"{seconds // 60}min"


def target_cost(outcome: Outcome, target: str, catalog: Optional[Any] = None) -> TargetCost:
    """What ``outcome`` costs on ``target``, priced with ``catalog`` (the team's; default: the one
    nearest the spec): every VM it holds at its rate in the region that prices it (spot or
    low priority at the spot rate; a Ray head regular), and its time limit there."""
    from trainspec.schema import prices, skus

    valid = outcome.valid
    if catalog is None:
        catalog = skus.catalog_for(valid.source.dir)[0]
    gpus_ = valid.nodes * valid.gpus_per_node
    region = prices.region_for(catalog)
    team = catalog.team_file.name if catalog.team_file is not None else None

    def part(count: int, name: str, spot: bool, role: str = "") -> Part:
        kind = prices.SPOT if spot else prices.PAY_AS_YOU_GO
        return Part(count, name, spot, prices.rate(catalog, name, region.name, kind), role)

    basis = pipeline.target(target).cost_basis(valid)
    if basis.location:
        region = prices.region_for(catalog, basis.location, basis.location_field)
    parts = tuple(part(count, name, spot, role) for count, name, spot, role in basis.vms)
    found = pipeline.hardware(valid, target) if valid.sku is not None and not basis.location_field else None
    return TargetCost(target, gpus_, parts, region, basis.seconds, basis.team_nodes, basis.unbounded, team,
                      assumed=found.by if found is not None and not found.enforced else "")


# --- the team catalog a change edits, adds or removes ------------------------------------------------

# A review prices both sides with the base's catalogs (review/change.py): a pull request that
# edits trainspec-skus.yaml, or adds one nearer its specs that shadows the base's, changes no row
# of the table. What it changes is said above the table instead, never cut: the catalog's fields
# before and after, and what its jobs would cost with it, the largest differences first.
CATALOG_CHANGES = 5  # catalog changes said in markdown; the others counted (text and json say all)
CATALOG_JOBS = 10  # jobs named per catalog change; the others counted
CATALOG_FIELDS = 20  # fields named per catalog change; the others counted


def catalog_facts(catalog: Any) -> Dict[str, Any]:
    """What of a team catalog decides a job's price, by its field in trainspec-skus.yaml."""
    from trainspec.schema.skus import PLACES, RATES

    facts: Dict[str, Any] = {"region": catalog.region}
    for size, *rates in catalog.prices:
        facts.update({f"prices.{size}.{kind}": rate for kind, rate in zip(RATES, rates)})
    for kind in PLACES:
        facts.update({f"{kind}.{name}": size for name, size in getattr(catalog, kind)})
    for sku in catalog.team:
        facts.update({f"skus.{sku.name}.{key}": getattr(sku, key) for key in ("gpus", "gpu", "infiniband", "vcpus")})
    return {k: v for k, v in facts.items() if v is not None}


@dataclass
class CatalogChange:
    """A team catalog the change edits (``base_file`` is ``head_file``), adds (the base had none,
    or another, farther from the specs: it shadows that one) or removes, for the jobs it applies
    to (``names``): what changes in it, and each job and target whose price it changes, priced
    with the base's catalog (as the table is) and with the pull request's."""

    base_file: Optional[str]
    head_file: Optional[str]
    changes: List[Tuple[str, Any, Any]]
    names: List[str] = field(default_factory=list)
    jobs: List[CostRow] = field(default_factory=list)  # before: with the base's catalog; after: with the head's

    def as_json(self) -> Dict[str, Any]:
        return {"base_file": self.base_file, "head_file": self.head_file, "jobs": self.names,
                "changes": [{"field": k, "before": a, "after": b} for k, a, b in self.changes],
                "prices": [{"job": r.job, "target": r.target, "with_base_catalog": r.before.as_json(),
                            "with_head_catalog": r.after.as_json()} for r in self.jobs]}

    def render(self, md: bool) -> List[str]:
        """A paragraph (the catalog, what changes in it), then a line per job it reprices."""
        def name(file: str) -> str:
            return md_.code(md_.clip(file, VALUE_LIMIT)) if md else md_.visible(file)

        count = f"{len(self.names)} job{'' if len(self.names) == 1 else 's'}"
        if self.base_file == self.head_file:
            what = f"{name(self.head_file or '')} changes, for {count}"
        elif self.base_file is None:
            what = f"{name(self.head_file or '')} is new, for {count}"
        elif self.head_file is None:
            what = f"{name(self.base_file)} no longer applies to {count}"
        else:
            what = f"{name(self.head_file)} is new for {count} and shadows {name(self.base_file)}"
        fields = [f"{_field(k, md)} {_value(a, md)} → {_value(b, md)}" for k, a, b in self.changes[:CATALOG_FIELDS]]
        if len(self.changes) > CATALOG_FIELDS:
            fields.append(f"… and {len(self.changes) - CATALOG_FIELDS} more field(s)")
        lead = (f"Team catalog: {what}; the table prices both sides with the base's catalog, and with this pull "
                f"request's its jobs would cost what is said below")
        lines = [(f"**{lead}.** " if md else f"  {lead}. ") + ("; ".join(fields) or "no field changes")]
        shown = sorted(self.jobs, key=lambda r: tuple(-w for w in r.weight()) + (r.job or "", r.target))
        for row in shown[:CATALOG_JOBS]:
            job = md_.code(row.job or "") if md else md_.visible(row.job or "")
            price = f"with the base's catalog {_per_hour(row.before)}, {_most(row.before)}; " \
                    f"with this pull request's {_per_hour(row.after)}, {_most(row.after)}"
            lines.append(f"- {job} ({row.target}): {md_.text(price) if md else price}" if md else
                         f"    {job} ({row.target}): {price}")
        if len(shown) > CATALOG_JOBS:
            more = f"… and {len(shown) - CATALOG_JOBS} more job(s) whose price it changes"
            lines.append(f"- *{more}*" if md else f"    {more}")
        return lines


def catalog_changes(jobs: Dict[str, Outcome], catalogs: Dict[str, Any]) -> List[CatalogChange]:
    """The team catalogs that differ between the base and the head for ``jobs`` (by name;
    ``catalogs``: revision.Catalogs by job name), one CatalogChange per (file at the base, file
    in the head, what changes)."""
    found: Dict[Tuple[Any, ...], CatalogChange] = {}
    facts: Dict[int, Dict[str, Any]] = {}  # by id(catalog): many jobs share one
    for name in sorted(catalogs):
        pair, outcome = catalogs[name], jobs.get(name)
        if outcome is None:
            continue
        before, after = (facts.setdefault(id(c), catalog_facts(c)) for c in (pair.base, pair.head))
        changes = _changed(before, after)
        if not changes and pair.base_file == pair.head_file:
            continue
        key = (pair.base_file, pair.head_file, repr(changes))
        change = found.setdefault(key, CatalogChange(pair.base_file, pair.head_file, changes))
        change.names.append(name)
        for artifact in outcome.artifacts:
            row = CostRow(name, artifact.target, target_cost(outcome, artifact.target, pair.base),
                          target_cost(outcome, artifact.target, pair.head))
            if row.changed():
                change.jobs.append(row)
    return list(found.values())
