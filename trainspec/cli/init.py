"""`trainspec init`: Start a repository of training specs in DIR (default: here). Writes a spec,
the base it extends, a team catalog, its training script, the JSON Schemas, the CI workflow and
the pre-commit hooks, which validate and compile as written, and a .gitignore for what a submit
leaves behind (one that is there gets the lines it lacks, nothing of it changed); never replaces
a file (if one exists, it is named and nothing is written; --force replaces them, a link by a
file, never writing through one, and all or nothing).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Optional

from trainspec.cli.output import UsageError, _err


def command(args: argparse.Namespace) -> int:
    from trainspec.scaffold import repository
    from trainspec.registry import DEFAULT_TARGET

    root = Path(args.dir)
    if root.exists() and not root.is_dir():
        raise UsageError(f"{args.dir}: not a folder")
    name = args.name if args.name is not None else repository.default_name(root)
    problem = repository.name_problem(name)
    if problem:
        raise UsageError(f"--name: {problem}")
    targets = list(dict.fromkeys(args.targets)) or [DEFAULT_TARGET]
    files, amended = repository.amend(root, repository.render(name, targets))
    # --force: a file or a link there is replaced, never followed; a folder on the way that is a link stops it
    blocked = (repository.unwritable if args.force else repository.in_the_way)(
        root, [path for path in files if path not in amended])
    if blocked:
        _err(f"trainspec init: {len(blocked)} path(s) in {args.dir} cannot be replaced without writing through a "
             "link or over a folder; nothing written (move them away):" if args.force else
             f"trainspec init: {len(blocked)} file(s) in {args.dir} would be replaced; nothing written "
             "(move them away, or --force to replace them):")
        for problem in blocked:
            _err(f"  {problem}")
        return 1
    try:
        written = repository.write(root, files, force=args.force, amended=amended)
    except OSError as exc:
        _err(f"trainspec init: {exc.filename or args.dir}: {exc.strerror or exc}; nothing written")
        return 1
    print(f"wrote {len(written)} files in {args.dir} (job {name}, target(s) {', '.join(targets)}):")
    for path in written:
        print(f"  {path}" + ("   (the lines it lacked, added at its end)" if path in amended else ""))
    repository_made = _git_init(root)
    above = _repository_above(root)
    if above is not None:
        _err(f"note: {args.dir} is inside the repository {above}: GitHub runs only the workflows of its root's "
             ".github/workflows/, from its root; init at the root, or move the workflow there and give its "
             "commands this folder's paths")
    if repository_made is not None:
        print(repository_made)
    print("next:")
    if root.resolve() != Path.cwd().resolve():
        print(f"  cd {shlex.quote(args.dir)}")
    if repository_made is None and not _in_a_repository(root):
        print("  git init && git symbolic-ref HEAD refs/heads/main")
    for line in ("trainspec validate --strict specs/", "trainspec plan specs/",
                 "trainspec compile specs/ -o build/",
                 'git add -A && git commit -m "A first training job, compiled"',
                 "pre-commit install   (pip install pre-commit, once)"):
        print(f"  {line}")
    print("then set the repository variable TRAINSPEC_REQUIREMENT the workflow installs trainspec with "
          "(specs/README.md says more)")
    return 0


def _in_a_repository(root: Path) -> bool:
    return any(os.path.lexists(folder / ".git") for folder in (root.resolve(), *root.resolve().parents))


def _repository_above(root: Path) -> Optional[Path]:
    """The repository ``root`` is in, when ``root`` is not its top folder."""
    here = root.resolve()
    if os.path.lexists(here / ".git"):
        return None
    return next((folder for folder in here.parents if os.path.lexists(folder / ".git")), None)


def _git_init(root: Path) -> Optional[str]:
    """A folder in no git repository becomes one (branch main, the workflow's), so the specs'
    paths are the repository's from the first compile on; what was done, or None."""
    git = shutil.which("git")
    if _in_a_repository(root) or git is None:
        return None
    for step in (["init", "-q"], ["symbolic-ref", "HEAD", "refs/heads/main"]):
        if subprocess.run([git, *step], cwd=root, capture_output=True).returncode != 0:
            return None
    return f"git init: {root} is a new repository (branch main)"
