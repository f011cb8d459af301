"""A change under review (--git BASE): each side compiled once (review/revision.py), and what
`plan --git`, `diff --git` and `review --git` print of it. `review` is the pull-request comment
in one command: the plan (its cost summary first) and the diff, from one compile of each
revision instead of two; what `plan` then `diff` print, byte for byte, unless one of them had to
be cut, when the two share one comment's room instead of keeping to their own budgets, and but
that under the summary the diff names a field whose new value the summary says by the field only
(issue 42: the comment says a value once).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from trainspec.registry.build import Outcome
from trainspec.review.comment import COMMENT_LIMIT, shares
from trainspec.review.cost import Summary, summarise
from trainspec.review.diff import JobDiff, render_diffs, said_once
from trainspec.review.plan import plan as make_plan, plan_document
from trainspec.review.revision import Catalogs, Side


@dataclass
class Change:
    """The jobs whose compiled outputs change since ``base`` (``diffs``), with both compiled
    sides; ``out``: the output folder as the user names it, for the paths a plan shows. Both
    sides are priced with the base's team catalogs (the base side's ``Side.catalogs``, and for
    the head's jobs ``catalogs``: revision.Catalogs, read in the base's tree), so a pull request
    that edits or shadows the catalog cannot make its own change look cheap; the summary, and so
    plan, diff and review alike, says what the catalog change would do instead."""

    base: str
    old: Side
    new: Side
    diffs: List[JobDiff]
    out: str
    catalogs: Dict[str, Catalogs] = field(default_factory=dict)
    _summary: Optional[Summary] = field(default=None, repr=False)

    @property
    def summary(self) -> Summary:
        """What the change costs (review/cost.py): computed once, opens the plan."""
        if self._summary is None:
            self._summary = summarise(self.old.jobs, self.new.jobs, self.diffs,
                                      (self.old.catalogs, self.pricing()), self.catalogs)
        return self._summary

    def pricing(self) -> Dict[str, Any]:
        """By job name, the catalog that prices each head job: the base's."""
        return {name: c.base for name, c in self.catalogs.items()} or dict(self.new.catalogs)

    def planned(self) -> List[Outcome]:
        """The head side's outcome of every job the change keeps or adds, in the diff's order."""
        return [self.new.jobs[d.name] for d in self.diffs if d.status != "removed"]

    def plans(self) -> List[Dict[str, Any]]:
        kept = [d for d in self.diffs if d.status != "removed"]
        pricing = self.pricing()
        return [make_plan(o, self.out, d.edited, pricing.get(d.name)) for o, d in zip(self.planned(), kept)]

    def removed(self) -> List[Dict[str, str]]:
        return [{"name": d.name, "spec": d.spec} for d in self.diffs if d.status == "removed"]


def plan_text(change: Change, fmt: str, max_chars: Optional[int], rerun: Sequence[str],
              plans: Optional[List[Dict[str, Any]]] = None) -> str:
    """What `plan --git` prints: the cost summary, then the plan of every job the change keeps or
    adds, and the jobs it removes (``plans``: already made, e.g. with what submit would do)."""
    return plan_document(change.plans() if plans is None else plans, change.removed(), fmt, change.base, max_chars,
                         rerun, change.summary)


def diff_text(change: Change, fmt: str, max_chars: Optional[int], rerun: Sequence[str], plan_rerun: str,
              below_summary: bool = False) -> str:
    """What `diff --git` prints. Markdown keeps to the diff's share of the comment, which the
    plan's cost summary (``plan_rerun``: the command line its note names) may have taken from
    (comment.shares). ``below_summary``: in review's comment, under the summary, whose new values
    it names by their field only (cost.Summary.said_above)."""
    if max_chars is None and fmt == "markdown":
        max_chars = _diff_budget(change, fmt, plan_rerun)
    said = change.summary.said_above(fmt, plan_rerun) if below_summary else None
    return render_diffs(change.diffs, fmt, change.base, max_chars, rerun, said)


def _diff_budget(change: Change, fmt: str, plan_rerun: str) -> int:
    """The diff's own budget: DIFF_BUDGET, less what the plan's cost summary takes beyond its share."""
    return shares(len(change.summary.render(fmt, plan_rerun)))[1]


def review_text(change: Change, fmt: str, plan_rerun: Sequence[str], diff_rerun: Sequence[str]) -> str:
    """What `review --git` prints: in markdown and text, the plan, a blank line and the diff (what
    the example workflow used to post as `plan`, `echo`, `diff`). In markdown the whole stays one
    GitHub comment (comment.COMMENT_LIMIT) and the two share it: each gets at least its own
    budget, and what one leaves the other may use, so a part is cut only when the comment is full
    (what `plan` then `diff` print, byte for byte, when neither is cut, but that the diff names a
    new value the summary says by its field: diff_text's ``below_summary``); in json one
    document: {"base", "cost", "plan": {"jobs", "removed"}, "diff": {"shared", "jobs"}}, the
    same values as plan's and diff's json."""
    import shlex

    if fmt == "json":
        groups, pointers = said_once(change.diffs)
        return json.dumps({
            "base": change.base,
            "cost": change.summary.as_json(),
            "plan": {"jobs": change.plans(), "removed": change.removed()},
            "diff": {"shared": [g.as_json() for g in groups],
                     "jobs": [d.as_json(pointers[d.name].shared.id if d.name in pointers else None)
                              for d in change.diffs]},
        }, indent=2, sort_keys=True)
    plan_command = shlex.join(plan_rerun)
    if fmt != "markdown":
        return plan_text(change, fmt, None, plan_rerun) + "\n\n" + diff_text(change, fmt, None, diff_rerun, plan_command)
    # One comment: the plan may use what the diff leaves of it (never less than its own budget,
    # which the diff's own leaves it), then the diff what the plan leaves beyond its own budget.
    room = COMMENT_LIMIT - 3  # the blank line between them, print()'s newline
    diff_budget = _diff_budget(change, fmt, plan_command)
    diff_part = diff_text(change, fmt, diff_budget, diff_rerun, plan_command, True)
    plan_part = plan_text(change, fmt, room - len(diff_part), plan_rerun)
    if room - len(plan_part) > diff_budget:
        diff_part = diff_text(change, fmt, room - len(plan_part), diff_rerun, plan_command, True)
    return plan_part + "\n\n" + diff_part
