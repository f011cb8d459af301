"""One pull-request comment: `plan --format markdown` and `diff --format markdown` each keep to a
budget so that both fit in one GitHub comment; what is cut is summarised, never dropped
silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence

from trainspec.core import markdown as md_


# --- one pull-request comment ------------------------------------------------------------------

# GitHub refuses a comment over 65,536 characters. The CI example posts `plan --format markdown`,
# a blank line and `diff --format markdown` as one comment: each keeps to its budget by default,
# both together stay under COMMENT_LIMIT. Text (a CI log, the full document) and json are not
# cut unless asked (--max-chars).
COMMENT_LIMIT = 60_000
PLAN_BUDGET = 24_000
DIFF_BUDGET = 35_000
assert PLAN_BUDGET + 1 + DIFF_BUDGET + 2 < COMMENT_LIMIT  # + the blank line, + print()'s newlines
# `plan --git` opens with the cost summary (review/cost.py), never cut: it takes its room first,
# the plan's jobs get what is left of PLAN_BUDGET (at least REST_MIN), and what the summary takes
# beyond that comes off the diff's budget (shares), so the comment still stays under
# COMMENT_LIMIT. A summary longer than SUMMARY_LIMIT (several hundred jobs with cost changes)
# counts its last rows instead of naming them.
REST_MIN = 2_000
SUMMARY_LIMIT = 40_000
DIFF_MIN = 10_000
assert DIFF_BUDGET - (SUMMARY_LIMIT + 2 + REST_MIN - PLAN_BUDGET) >= DIFF_MIN
SHARED_NAMES = 50  # jobs a thing said once names in a comment (the diff's change, the plan's group); the others counted
VALUE_LIMIT = 300  # characters of one value in the comment, and in a diff's one-line summary
LINE_LIMIT = 500  # characters of one diff line once a diff is cut


def shares(summary: int) -> "tuple[int, int]":
    """(plan's budget, diff's budget) of the comment whose plan opens with a cost summary of
    ``summary`` characters (and a blank line): the summary is never cut, the rest makes room."""
    over = max(0, min(summary, SUMMARY_LIMIT) + 2 + REST_MIN - PLAN_BUDGET)
    return PLAN_BUDGET + over, DIFF_BUDGET - over


def budget_for(max_chars: Optional[int], fmt: str, default: int) -> Optional[int]:
    if max_chars is None:
        return default if fmt == "markdown" else None
    return max_chars or None


@dataclass
class Part:
    """A piece of a job's section that can be shortened: ``cut(n)`` is it within ``n``
    characters, never shorter than ``cut(0)`` (its one-line summary)."""

    full: str
    cut: Callable[[int], str]
    keep: bool = False  # shown whole while every other part can make room (a change said once for many jobs)


def whole_part(full: str, summary: str, md: bool) -> Part:
    """A part shown whole or replaced by one line."""
    short = f"*({md_.text(summary)})*" if md else f"  ({summary})"
    return Part(full, lambda n: full if n >= len(full) else short)


@dataclass
class Section:
    """One job in a document: its names (for the list of jobs left out), its heading (shown
    while there is room), then its parts after ``glue``."""

    names: List[str]
    head: str
    glue: str = "\n\n"
    parts: List[Part] = field(default_factory=list)
    # when not every heading fits, what is shown first: 0 a change said once for many jobs (with
    # its diff), 1 a job's own changes, 2 a job that only points to a change said once
    rank: int = 1

    def render(self, parts: Sequence[str]) -> str:
        shown = [p for p in parts if p]
        return self.head + (self.glue + "\n\n".join(shown) if shown else "")


def fit(title: str, sections: Sequence[Section], budget: Optional[int], md: bool, what: str, command: str) -> str:
    """``title`` and ``sections`` as one document of at most ``budget`` characters (None: no
    limit). First every part whole; else every heading, with the room left shared fairly among
    the parts (each at least its summary); else as many headings as fit and the other jobs by
    name. Whatever was cut, a last line says where ``what`` is (``command``)."""
    whole = _join([title, *(s.render([p.full for p in s.parts]) for s in sections)])
    if budget is None or len(whole) <= budget:
        return whole
    note = (f"*Cut to fit one comment; {md_.text(what)}: {md_.code(command)}, or each job's compiled outputs "
            "among this pull request's files.*" if md else
            f"(cut to {budget:,} characters; {what}: {command})")
    fixed = 0
    for keeping in (True, False):  # the parts to keep whole, if the rest can be cut to make room
        shortest = [[p.full if keeping and p.keep else p.cut(0) for p in s.parts] for s in sections]
        fixed = len(title) + 2 + len(note) + sum(len(s.render(c)) + 2 for s, c in zip(sections, shortest))
        if fixed <= budget:
            break
    if fixed <= budget:
        wants = [len(p.full) - len(c) for s, cuts in zip(sections, shortest) for p, c in zip(s.parts, cuts)]
        cap = _fair_share(wants, budget - fixed)
        chosen = [[p.full if want <= cap else p.cut(len(c) + cap) for p, c, want in zip(s.parts, cuts, wants_of)]
                  for s, cuts, wants_of in zip(sections, shortest, _split(wants, sections))]
        left = budget - len(_join([title, *(s.render(c) for s, c in zip(sections, chosen)), note]))
        for s, parts in zip(sections, chosen):  # what is left (a part shown whole or not at all) goes in order
            for k, p in enumerate(s.parts):
                if parts[k] != p.full and len(p.full) - len(parts[k]) <= left:
                    left -= len(p.full) - len(parts[k])
                    parts[k] = p.full
        document = _join([title, *(s.render(c) for s, c in zip(sections, chosen)), note])
        if len(document) <= budget:
            return document
    return _names_only(title, sections, budget, md, note)


def _split(values: Sequence[int], sections: Sequence[Section]) -> List[List[int]]:
    """``values`` (one per part, all sections in a row) as one list per section."""
    out, i = [], 0
    for s in sections:
        out.append(list(values[i:i + len(s.parts)]))
        i += len(s.parts)
    return out


def _join(pieces: Sequence[str]) -> str:
    return "\n\n".join(p for p in pieces if p)


def _fair_share(wants: Sequence[int], room: int) -> int:
    """The largest cap such that the wants, each capped, fit in ``room`` (water-filling)."""
    left = len(wants)
    for want in sorted(wants):
        if want * left > room:
            return room // left
        room -= want
        left -= 1
    return max(wants, default=0)


def _names_only(title: str, sections: Sequence[Section], budget: int, md: bool, note: str) -> str:
    """What fits when not every heading does, the most telling first (Section.rank): a change
    said once for many jobs with as much of its diff as fits, then headings while they fit, each
    in its place in the document; then the other jobs on one last line, by name while the room
    left allows, then how many more. That line never takes a diff's room: it is given only what
    is left."""
    names = [name for s in sections for name in s.names]
    reserve = len(_more(names, 0, md)) + 2 if names else 0  # the last line, naming no job
    used = len(title) + 2 + len(note) + reserve
    shown = {}
    for i in sorted(range(len(sections)), key=lambda k: (sections[k].rank, k)):
        room = budget - used - 2
        fitting = next((text for text in _renderings(sections[i], room) if len(text) <= room), None)
        if fitting is None:
            if sections[i].rank > 0:
                break  # the headings are shown in order while they fit
            continue
        shown[i] = fitting
        used += len(fitting) + 2
    rest = [name for i, s in enumerate(sections) if i not in shown for name in s.names]
    kept = [shown[i] for i in sorted(shown)]
    if rest:
        kept.append(_more(rest, budget - used + reserve - 2, md))
    return _join([title, *kept, note])


def _renderings(section: Section, room: int) -> List[str]:
    """``section`` from the most to the least of it: a change said once for many jobs whole, its
    parts cut to share ``room``, at their shortest, then its heading; any other, its heading."""
    if not any(p.keep for p in section.parts):
        return [section.head]
    share = max(0, (room - len(section.head) - len(section.glue)) // len(section.parts) - 2)
    return [section.render([p.full for p in section.parts]), section.render([p.cut(share) for p in section.parts]),
            section.render([p.cut(0) for p in section.parts]), section.head]


def _more(names: Sequence[str], room: int, md: bool) -> str:
    """One line naming ``names``, within ``room`` characters when it can."""
    lead = f"**Not shown for length ({len(names)}):** " if md else f"not shown for length ({len(names)}): "
    shown: List[str] = []
    for count, name in enumerate(names):
        item = md_.code(name) if md else md_.visible(name)
        after = len(names) - count - 1
        left = f", … and {after} more" if after else ""
        if len(lead) + len(", ".join([*shown, item])) + len(left) > room:
            return lead + ", ".join(shown) + f"{', ' if shown else ''}… and {len(names) - count} more"
        shown.append(item)
    return lead + ", ".join(shown)
