"""The `trainspec` command line. Thin: parses flags, calls build(), prints diagnostics.

argparse (the standard library's) rather than click: click's import alone was 12-15 ms of a
~110 ms `trainspec compile` (README, "Speed"). Imports stay lazy so `compile` starts fast
and never loads torch, ray, azure-ai-ml or pydantic. Each command is a function taking the
parsed arguments and returning the exit code.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

# trainspec's models use no pydantic plugin; scanning every installed package's entry points
# for them costs more than compiling a spec (pydantic is imported only to explain bad specs).
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from . import __version__  # noqa: E402
from .compiler import TARGETS  # noqa: E402

DESCRIPTION = ("Compile one training spec into the job files of Azure ML, HPC Pack and Ray, "
               "checked before anything runs.")
EPILOG = """\
Examples:
  trainspec validate specs/                       check every spec, show every problem
  trainspec compile specs/ -o build/              write build/<name>/<target>/...
  trainspec compile specs/mnist-lightning.yaml -t azureml --set resources.nodes=4
  trainspec run specs/mnist-lightning.yaml --local --procs-per-node 2
  trainspec schema > trainspec.schema.json        JSON Schema for editors
"""


class UsageError(Exception):
    """A command line that cannot run: exit 2 with the command's usage, as argparse does."""


def _err(text: str) -> None:
    print(text, file=sys.stderr)


def _report(outcomes, strict: bool) -> Tuple[int, int]:
    errors = warnings = 0
    for outcome in outcomes:
        for d in outcome.diagnostics:
            _err(d.render())
            errors += d.is_error
            warnings += not d.is_error
    return errors, warnings


def _summary(count: int, errors: int, warnings: int) -> str:
    def n(k, word):
        return f"{k} {word}{'' if k == 1 else 's'}"
    return f"{n(count, 'spec')}: {n(errors, 'error')}, {n(warnings, 'warning')}"


def _specs(paths: Sequence[str]) -> List[str]:
    from .build import find_specs

    files = find_specs(paths)
    if not files:
        raise UsageError(f"no spec files (*.yaml, *.yml) in {' '.join(paths)}")
    return files


# --- the commands ---------------------------------------------------------------------------

def validate(args: argparse.Namespace) -> int:
    """Check specs and print every problem as file:line:col: severity: message (hint)."""
    from .build import build

    files = _specs(args.paths)
    outcomes = [build(f, Path("build"), args.targets, lower=False, sets=args.sets, variables=args.variables)
                for f in files]
    errors, warnings = _report(outcomes, args.strict)
    _err(_summary(len(files), errors, warnings))
    return 1 if errors or (args.strict and warnings) else 0


def compile_(args: argparse.Namespace) -> int:
    """Validate specs and write each target's files. Nothing is written unless every spec is valid."""
    from .build import build
    from .compiler.write import target_dir, write_all

    files = _specs(args.paths)
    out_path = Path(args.out)
    outcomes = [build(f, out_path, args.targets, sets=args.sets, variables=args.variables) for f in files]
    errors, warnings = _report(outcomes, args.strict)
    errors += _duplicate_names(outcomes)
    if errors or (args.strict and warnings):
        _err(_summary(len(files), errors, warnings) + "; nothing written")
        return 1
    artifacts = [a for o in outcomes for a in o.artifacts]
    try:
        write_all(out_path, artifacts)
    except OSError as exc:
        _err(f"trainspec: error: cannot write {exc.filename or args.out}: {exc.strerror}; "
             "existing outputs are unchanged")
        return 1
    for artifact in artifacts:
        where = target_dir(out_path, artifact)
        names = ", ".join(f.path for f in artifact.files)
        print(f"wrote {where}/ ({names})")
        print(f"  submit: {artifact.submit.format(dir=shlex.quote(str(where)))}")
    _err(_summary(len(files), errors, warnings))
    return 0


def _duplicate_names(outcomes) -> int:
    seen = {}
    count = 0
    for outcome in outcomes:
        if outcome.valid is None:
            continue
        name = outcome.valid.name
        if name in seen:
            _err(f"{outcome.file}: error: name: '{name}' is also the name of {seen[name]}; "
                 "outputs would overwrite each other (hint: give each spec its own name)")
            count += 1
        else:
            seen[name] = outcome.file
    return count


def check(args: argparse.Namespace) -> int:
    """CI gate: recompile in memory and fail (exit 1, with a diff) if any output under OUT is
    stale, missing, hand-edited, or left over from a spec that is gone."""
    from .build import build
    from .review import check_outputs

    files = _specs(args.paths)
    out_path = Path(args.out)
    outcomes = [build(f, out_path, args.targets, sets=args.sets, variables=args.variables) for f in files]
    errors, warnings = _report([o for o in outcomes if not o.ok], False)
    if errors:
        _err(_summary(len(files), errors, warnings) + "; fix the specs first")
        return 1
    findings = check_outputs(outcomes, out_path)
    for finding in findings:
        print(finding.render())
    count = sum(len(o.artifacts) for o in outcomes)
    if findings:
        _err(f"trainspec check: {len(findings)} problem(s) in {args.out}; run: trainspec compile "
             f"{' '.join(args.paths)} -o {args.out}")
        return 1
    _err(f"trainspec check: {count} output folder(s) in {args.out} match their specs")
    return 0


def plan(args: argparse.Namespace) -> int:
    """What will run, for a reviewer: per target the world, nodes x processes, launcher, SKU,
    spot, environment, and the variables the first and the last rank get."""
    from .build import build
    from .review import plan as make_plan, render_plan

    outcome = build(args.spec, Path("build"), args.targets, sets=args.sets, variables=args.variables)
    if not outcome.ok:
        _report([outcome], False)
        return 1
    print(render_plan(make_plan(outcome), args.format))
    return 0


def diff(args: argparse.Namespace) -> int:
    """The semantic change between two specs (nodes, world, SKU, GPUs...), then the diff of
    each compiled output. Exit 0 either way: this is for reading."""
    from .build import build
    from .review import diff_outcomes, git_changed_specs, render_diffs

    class Invalid(Exception):
        pass

    def outcome(path: Optional[Path]):
        if path is None or not path.exists():
            return None
        result = build(str(path), Path("build"), args.targets)
        if not result.ok:
            _report([result], False)
            raise Invalid()
        return result

    try:
        if args.git:
            if args.specs:
                raise UsageError("give either BASE HEAD or --git REV")
            import shutil
            import subprocess
            try:
                root, changed, old_tree = git_changed_specs(args.git, (), Path.cwd())
            except subprocess.CalledProcessError as exc:
                raise UsageError(f"git: {exc.stderr.strip() if exc.stderr else exc}") from None
            try:
                diffs = []
                for name in changed:
                    old, new = old_tree / name, root / name
                    if not _looks_like_spec(old) and not _looks_like_spec(new):
                        continue
                    diffs.append(diff_outcomes(name, outcome(old if old.exists() else None),
                                               outcome(new if new.exists() else None)))
            finally:
                shutil.rmtree(old_tree, ignore_errors=True)
        else:
            if len(args.specs) != 2:
                raise UsageError("give BASE and HEAD spec files, or --git REV")
            diffs = [diff_outcomes(args.specs[1], outcome(Path(args.specs[0])), outcome(Path(args.specs[1])))]
    except Invalid:
        return 1
    print(render_diffs(diffs, args.format) if diffs else "no spec changed")
    return 0


def _looks_like_spec(path: Path) -> bool:
    if not path.is_file():
        return False
    head = path.read_text(encoding="utf-8", errors="replace")[:4000]
    return any(line.startswith(("version:", "extends:")) for line in head.splitlines())


def schema(args: argparse.Namespace) -> int:
    """Print the JSON Schema of the spec (for editors: yaml-language-server)."""
    import json

    from .schema.model import Spec

    print(json.dumps(Spec.model_json_schema(), indent=2, sort_keys=True))
    return 0


def run(args: argparse.Namespace) -> int:
    """Run a spec's job here, before paying for GPUs: nodes x processes local processes, each
    with exactly the environment the target platform would give it, on CPU with gloo."""
    from .local import LocalOptions, run_local

    parsed = {}
    for item in args.inputs:
        name, sep, path = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--input: expected NAME=PATH, got {item!r}")
        parsed[name] = path
    options = LocalOptions(target=args.target, procs_per_node=args.procs_per_node, nodes=args.nodes,
                           launcher=args.launcher, inputs=parsed, timeout=args.timeout,
                           rendezvous_timeout=args.rendezvous_timeout, netns=args.netns, workdir=args.workdir,
                           sets=tuple(args.sets), variables=tuple(args.variables))
    return run_local(args.spec, options)


# --- the parser -----------------------------------------------------------------------------

def _int_range(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not in the range {low}..{high}")
        return value
    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value >= 1:
        raise argparse.ArgumentTypeError(f"{text} is less than 1 second")
    return value


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="trainspec", description=DESCRIPTION, epilog=EPILOG,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="version", version=f"trainspec {__version__}")
    commands = top.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(fn: Callable[[argparse.Namespace], int], name: Optional[str] = None) -> argparse.ArgumentParser:
        doc = " ".join((fn.__doc__ or "").split())
        sub = commands.add_parser(name or fn.__name__, help=doc.split(". ")[0].rstrip("."), description=doc)
        sub.set_defaults(handler=fn, parser=sub)
        return sub

    def targets(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("-t", "--target", dest="targets", action="append", default=[], choices=sorted(TARGETS),
                         help="target to compile for (repeatable); default: the targets the spec lists, "
                              "else azureml")

    def overrides(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--set", dest="sets", action="append", default=[], metavar="PATH=VALUE",
                         help="override a spec field, validated like file content: --set resources.nodes=4")
        sub.add_argument("--var", dest="variables", action="append", default=[], metavar="NAME=VALUE",
                         help="template variable {{ vars.NAME }} (repeatable; wins over the spec's vars:)")

    def strict(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--strict", action="store_true", help="treat warnings as errors")

    def paths(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("paths", nargs="+", metavar="SPEC|DIR", help="spec files, or folders to search")

    sub = command(validate)
    paths(sub)
    targets(sub)
    strict(sub)
    overrides(sub)

    def out(sub: argparse.ArgumentParser, help: str) -> None:
        sub.add_argument("-o", "--out", default="build", help=f"{help} (default: build)")

    sub = command(compile_, "compile")
    paths(sub)
    targets(sub)
    out(sub, "output directory; files go to OUT/<name>/<target>/")
    strict(sub)
    overrides(sub)

    sub = command(check)
    paths(sub)
    out(sub, "the output directory that compile wrote, and that is committed")
    targets(sub)
    overrides(sub)

    sub = command(plan)
    sub.add_argument("spec", metavar="SPEC")
    targets(sub)
    sub.add_argument("--format", choices=["text", "markdown", "json"], default="text",
                     help="markdown for a pull-request comment, json for tools (default: text)")
    overrides(sub)

    sub = command(diff)
    sub.add_argument("specs", nargs="*", metavar="BASE HEAD", help="two spec files")
    sub.add_argument("--git", metavar="REV", help="compare every spec changed since REV with its version there")
    sub.add_argument("--format", choices=["text", "markdown"], default="text", help="(default: text)")
    targets(sub)

    command(schema)

    sub = command(run)
    sub.add_argument("spec", metavar="SPEC")
    sub.add_argument("--local", action="store_true", required=True,
                     help="run on this machine, simulating the target's nodes with local processes")
    sub.add_argument("-t", "--target", default="azureml", choices=sorted(TARGETS),
                     help="whose environment to simulate (default: azureml)")
    sub.add_argument("--procs-per-node", type=_int_range(1, 64), default=None,
                     help="processes per simulated node (default: the spec's; CPU only here)")
    sub.add_argument("--nodes", type=_int_range(1, 16), default=None, help="simulated nodes (default: the spec's)")
    sub.add_argument("--launcher", choices=["per-process", "per-node", "mpi"], default=None,
                     help="override distribution.launcher (e.g. mpi: only Open MPI variables, as Azure ML's MPI jobs)")
    sub.add_argument("--input", dest="inputs", action="append", default=[], metavar="NAME=PATH",
                     help="local path for a spec input")
    sub.add_argument("--timeout", type=_seconds, default=900,
                     help="seconds before the whole run is stopped (default: 900)")
    sub.add_argument("--netns", action="store_true",
                     help="each simulated node in a network namespace of its own, joined by a private bridge "
                          "(root): MASTER_ADDR is really another host")
    sub.add_argument("--rendezvous-timeout", type=_seconds, default=600,
                     help="seconds the others wait for rank 0 (node 0 under torchrun) to open MASTER_ADDR:MASTER_PORT "
                          "before the run is stopped (default: 600)")
    sub.add_argument("--workdir", default=None,
                     help="where the run's copy of the code and its outputs go (default: a temporary directory)")
    overrides(sub)
    return top


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parser().parse_args(list(argv) if argv is not None else None)  # exits 2 on a bad command line
    try:
        code = args.handler(args)
    except UsageError as exc:
        args.parser.error(str(exc))  # usage and message on stderr, exit 2
    except KeyboardInterrupt:
        _err("trainspec: interrupted")
        sys.exit(130)
    except Exception as exc:  # a bug of ours: say so in one line, no traceback unless asked
        if os.environ.get("TRAINSPEC_DEBUG"):
            raise
        _err(f"trainspec: internal error: {type(exc).__name__}: {exc} "
             "(set TRAINSPEC_DEBUG=1 for a traceback, and please report it)")
        sys.exit(70)
    sys.exit(code)


if __name__ == "__main__":
    main()
