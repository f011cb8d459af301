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
    from trainspec.registry.build import build_all
    from trainspec.review.plan import plan as make_plan, plan_document

    if args.git:
        from trainspec.cli.diff import git_change
        from trainspec.review.change import plan_text

        change = git_change(args)
        if change is None:
            return 1
        plans = change.plans()
        if args.submitted:
            _ask(change.planned(), plans, args)
        print(plan_text(change, args.format, args.max_chars, _rerun(args, "--format", "text"), plans))
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
    from trainspec.commands.jobs import Options, what_submit_does

    options = Options(out=args.out)
    for outcome, data in zip(outcomes, plans):
        artifacts = {a.target: a for a in outcome.artifacts}
        for target in data["targets"]:
            target["job"]["submitted"] = what_submit_does(outcome, artifacts[target["target"]], options)
