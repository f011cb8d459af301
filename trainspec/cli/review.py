"""`trainspec review --git BASE`: the whole pull-request comment in one command -- the cost
summary, the plan and the diff of every job a branch changes, what `plan --git` then `diff --git`
print (a blank line between), from one compile of each revision instead of two. Markdown by
default: one GitHub comment, which the plan and the diff share (review/change.review_text), text
for a log, json for tools.
"""

from __future__ import annotations

import argparse

from trainspec.cli.output import UsageError, _err, _rerun


def command(args: argparse.Namespace) -> int:
    from trainspec.cli.diff import git_change
    from trainspec.review.change import review_text

    try:
        change = git_change(args)
    except UsageError as exc:  # no repository, no such revision, a path outside it: one line
        _err(f"trainspec review: error: {exc}")
        return 2
    if change is None:
        return 1
    as_plan, as_diff = (argparse.Namespace(**{**vars(args), "command": name}) for name in ("plan", "diff"))
    print(review_text(change, args.format, _rerun(as_plan, "--format", "text"), _rerun(as_diff, "--format", "text")))
    return _staging_said()


def _staging_said() -> int:
    """A committed .trainspec/ (submit's own folder) changes no job the review shows, yet it is
    where submit compiles: named on stderr, exit 1, so the check that runs review fails."""
    from trainspec.review.check import staging_problems

    problems = staging_problems()
    for problem in problems:
        _err(f"trainspec review: error: {problem.render()}")
    return 1 if problems else 0
