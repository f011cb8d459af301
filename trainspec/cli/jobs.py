"""`trainspec submit`, `status`, `logs` and `cancel`: the flags become commands/jobs.py's Options;
the work is there.
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import Dict, List, Optional

from trainspec.cli.output import UsageError, _specs


def command(args: argparse.Namespace) -> int:
    from trainspec.commands import jobs
    from trainspec.jobs import api

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
        listed = _from_plan(getattr(args, "plan", None), args.paths, args.targets)
        if listed is not None and not listed:
            print("trainspec: the plan lists no job for these targets; nothing to submit")
            return api.EXIT_COMPLETED
        files = list(listed) if listed is not None else _specs(args.paths or ["."])
        if listed is None and not args.targets and not args.all_targets:
            _one_target_each(files, args)
    run = {"submit": jobs.submit, "status": jobs.status, "logs": jobs.logs, "cancel": jobs.cancel}[args.command]
    try:
        if args.command == "submit" and options.job_id is None:
            return jobs.submit(files, options, listed)
        return run(files, options)
    except jobs.Interrupted:
        return api.EXIT_INTERRUPTED


def _one_target_each(files: List[str], args: argparse.Namespace) -> None:
    """Without -t or --all-targets, each spec must list one target: a spec that lists several would
    otherwise act on every platform the machine is logged in to (five copies of a 16-GPU job).
    Refused before anything is compiled or any platform contacted; a spec that cannot be read
    passes here and is reported by the command itself."""
    from trainspec.registry.build import targets_listed
    from trainspec.core.diagnostics import SpecError
    from trainspec.schema.compose import compose

    several = []
    for file in files:
        try:
            names = targets_listed(compose(file, args.sets, args.variables).data)
        except (OSError, SpecError):
            continue
        if len(names) > 1:
            several.append((file, names))
    if several:
        file, names = several[0]
        listed = "; ".join(f"{file} lists {len(names)} targets ({', '.join(names)})" for file, names in several)
        raise UsageError(f"{listed}: choose one with -t TARGET (e.g. trainspec {args.command} {shlex.quote(file)} "
                         f"-t {names[0]}), or act on every one with --all-targets; nothing was contacted")


def _from_plan(plan: Optional[str], paths, targets) -> Optional[Dict[str, List[str]]]:
    """--plan FILE: each spec the plan's JSON lists, with the targets it lists for it (those of -t
    only, when given)."""
    if plan is None:
        return None
    if paths:
        raise UsageError("--plan names the jobs: give no SPEC with it")
    try:
        document = json.loads(Path(plan).read_text(encoding="utf-8"))
        listed: Dict[str, List[str]] = {}
        for job in document["jobs"]:
            for item in job["targets"]:
                if not targets or item["target"] in targets:
                    listed.setdefault(str(job["spec"]), []).append(str(item["target"]))
    except OSError as exc:
        raise UsageError(f"--plan {plan}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError):
        raise UsageError(f"--plan {plan}: not what `trainspec plan --format json` writes") from None
    return listed
