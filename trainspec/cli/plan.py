"""`trainspec plan`: What will run, for a reviewer: per job and target the world, nodes x
processes, launcher, SKU, spot, environment, and the variables the first and the last rank get.
Over files, folders, or (--git BASE) the jobs whose compiled outputs a branch changes: one
document.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from trainspec.cli.output import _err, _report, _rerun, _summary, _specs


def command(args: argparse.Namespace) -> int:
    from trainspec.build import build_all
    from trainspec.review.cost import summarise
    from trainspec.review.plan import plan as make_plan, plan_document

    if args.git:
        from trainspec.cli.diff import _git_diffs

        diffs, sides = _git_diffs(args)
        if diffs is None:
            return 1
        planned = [sides[1].jobs[d.name] for d in diffs if d.status != "removed"]
        plans = [make_plan(o, Path(args.out).as_posix(), d.edited, sides[1].catalogs.get(o.valid.name))
                 for o, d in zip(planned, [d for d in diffs if d.status != "removed"])]
        if args.submitted:
            _ask(planned, plans, args)
        removed = [{"name": d.name, "spec": d.spec} for d in diffs if d.status == "removed"]
        summary = summarise(sides[0].jobs, sides[1].jobs, diffs, (sides[0].catalogs, sides[1].catalogs))
        rerun = _rerun(args, "--format", "text")
        print(plan_document(plans, removed, args.format, args.git, args.max_chars, rerun, summary))
        return 0
    files = _specs(args.paths)
    outcomes = build_all(files, Path(args.out), args.targets, sets=args.sets, variables=args.variables)
    bad = [o for o in outcomes if not o.ok]
    if bad:
        errors, warnings = _report(bad, False)
        _err(_summary(len(files), errors, warnings))
        return 1
    plans = [make_plan(o, Path(args.out).as_posix()) for o in outcomes]
    if args.submitted:
        _ask(outcomes, plans, args)
    print(plan_document(plans, [], args.format,
                        max_chars=args.max_chars, rerun=_rerun(args, "--format", "text")))
    return 0



def _ask(outcomes, plans, args: argparse.Namespace) -> None:
    """--submitted: what submit would do with each job, asked of its platform (with the
    environment's login and addresses: AZUREML_*, KUBECONFIG, RAY_ADDRESS, HPCPACK_REST_URL)."""
    from trainspec.jobs.command import Options, what_submit_does

    options = Options(out=args.out)
    for outcome, data in zip(outcomes, plans):
        artifacts = {a.target: a for a in outcome.artifacts}
        for target in data["targets"]:
            target["job"]["submitted"] = what_submit_does(outcome, artifacts[target["target"]], options)
