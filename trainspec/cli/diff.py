"""`trainspec diff`: What a change does to the jobs: per job whose compiled outputs change, every
changed field of the spec and of the derived job (world, processes, GPUs, env, timeout, target
settings), then the diff of each output. --git BASE: every spec in the repository, compiled
there and here (a change to an `extends` base or a conda file shows in every job that reads it).
BASE.yaml HEAD.yaml: two files. One SPEC with --set/--var: the spec against itself with the
overrides. Exit 0 either way: this is for reading.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from trainspec.cli.output import UsageError, _err, _report, _rerun


def command(args: argparse.Namespace) -> int:
    from trainspec.registry.build import build
    from trainspec.review.diff import diff_outcomes, render_diffs

    if args.git:
        from trainspec.review.change import diff_text

        change = git_change(args)
        if change is None:
            return 1
        print(diff_text(change, args.format, args.max_chars, _rerun(args, "--format", "text"), _plan_rerun(args)))
        return 0
    if len(args.paths) == 1 and (args.sets or args.variables):
        pairs = [(args.paths[0], (), ()), (args.paths[0], args.sets, args.variables)]
    elif len(args.paths) == 2:
        pairs = [(p, args.sets, args.variables) for p in args.paths]
    else:
        raise UsageError("give BASE.yaml HEAD.yaml, one SPEC with --set/--var, or --git BASE [PATHS]")
    sides = []
    for file, sets, variables in pairs:
        outcome = build(file, Path(args.out), args.targets, sets=sets, variables=variables)
        if not outcome.ok:
            _report([outcome], False)
            return 1
        sides.append(outcome)
    result = diff_outcomes(sides[0], sides[1], Path(args.out).as_posix())
    print(render_diffs([result], args.format, max_chars=args.max_chars, rerun=_rerun(args, "--format", "text")))
    return 0


def _plan_rerun(args: argparse.Namespace) -> str:
    """The full-plan command line the plan of the same change names (its summary's length counts)."""
    import shlex

    return shlex.join(_rerun(argparse.Namespace(**{**vars(args), "command": "plan"}), "--format", "text"))


def git_change(args: argparse.Namespace):
    """Compile every spec under PATHS in the working tree and at --git BASE, from the
    repository root on both sides, each once; returns the review.change.Change (the job diffs and
    both sides), or None when the working tree's specs do not compile (their errors printed).
    A repository or revision that is not there is a UsageError."""
    import subprocess
    from contextlib import ExitStack

    from trainspec.review import revision as review
    from trainspec.review.cache import Extends
    from trainspec.review.change import Change

    cwd = Path.cwd()
    try:
        root = Path(review.git("rev-parse", "--show-toplevel", cwd=cwd).strip())
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        raise UsageError(f"--git needs a git repository: {getattr(exc, 'stderr', '') or exc}".strip()) from None
    try:
        paths = review.root_relative(args.paths, root)
        out = review.root_relative([args.out], root)[0]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    options = dict(requested=args.targets, sets=args.sets, variables=args.variables)
    extends = Extends()  # what each file extends, by its bytes: both sides, and the next run, share it
    with ExitStack() as stack:
        try:
            tree = stack.enter_context(review.revision_tree(args.git, root, paths))
        except subprocess.CalledProcessError:
            raise UsageError(f"--git {args.git}: not a revision of the repository at {root}") from None
        # the working tree first, the base's specs claiming their job names first (a copy that kept
        # its original's name gets the error); then the base, where a spec whose every input is
        # the same is the working tree's outcome again, not a second compile
        established = review.spec_files(tree, paths, extends)
        new = review.compile_side(root, paths, out, None, established, extends, **options)
        if new.errors:  # the change must compile; the base may not have (this change may be its fix)
            for d in new.errors:
                _err(d.render())
            _err(f"trainspec: {len(new.errors)} error(s); fix the specs first")
            return None
        same = review.Unchanged(new, root, tree, out)
        old = review.compile_side(tree, paths, out, args.git, (), extends, same, **options)
        catalogs = review.catalogs_at(tree, root, new)  # while the base's tree is there
    extends.save()
    for d in old.errors:
        _err(d.render().replace(": error: ", ": note: (at the base revision) ", 1))
    diffs = review.compare(old, new, out, review.changed_since(args.git, root), root)
    return Change(args.git, old, new, diffs, Path(args.out).as_posix(), catalogs)
