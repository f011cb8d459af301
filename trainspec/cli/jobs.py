"""`trainspec submit`, `status`, `logs` and `cancel`: the flags become jobs/command.py's Options;
the work is there.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Callable, Optional, Set, Tuple

from trainspec.cli.output import UsageError, _specs


def command(args: argparse.Namespace) -> int:
    from trainspec.jobs import api, command as jobs

    options = jobs.Options(
        targets=args.targets, out=args.out, sets=args.sets, variables=args.variables, address=args.address,
        workspace={k: v for k, v in (("subscription_id", args.subscription), ("resource_group", args.resource_group),
                                     ("workspace", args.workspace)) if v},
        wait=getattr(args, "wait", False), follow=getattr(args, "follow", False),
        all_ranks=getattr(args, "all_ranks", False), max_wait=args.max_wait,
        fmt=getattr(args, "format", "text"), summary=getattr(args, "summary", None),
        job_id=getattr(args, "job_id", None))
    if options.job_id is not None:
        if args.paths or len(args.targets) != 1:
            raise UsageError("--id names one job: give exactly one -t TARGET and no spec")
        files = []
    else:
        wanted, paths = _from_plan(getattr(args, "plan", None), args.paths)
        if wanted is not None and not paths:
            print("trainspec: the plan lists no job; nothing to submit")
            return api.EXIT_COMPLETED
        files = _specs(paths or ["."]) if paths or wanted is None else []
    run = {"submit": jobs.submit, "status": jobs.status, "logs": jobs.logs, "cancel": jobs.cancel}[args.command]
    try:
        if args.command == "submit" and options.job_id is None:
            return jobs.submit(files, options, wanted)
        return run(files, options)
    except jobs.Interrupted:
        return api.EXIT_INTERRUPTED


def _from_plan(plan: Optional[str], paths) -> Tuple[Optional[Callable[[str, str], bool]], list]:
    """--plan FILE: the specs the plan's JSON lists, and a filter for its (spec, target) pairs."""
    if plan is None:
        return None, list(paths)
    if paths:
        raise UsageError("--plan names the jobs: give no SPEC with it")
    try:
        document = json.loads(Path(plan).read_text(encoding="utf-8"))
        pairs: Set[Tuple[str, str]] = {(job["spec"], item["target"]) for job in document["jobs"]
                                       for item in job["targets"]}
    except OSError as exc:
        raise UsageError(f"--plan {plan}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError):
        raise UsageError(f"--plan {plan}: not what `trainspec plan --format json` writes") from None
    specs = sorted({spec for spec, _ in pairs})
    return (lambda spec, target: (spec, target) in pairs), specs
