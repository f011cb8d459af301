"""The `trainspec` command line. Thin: parses flags, calls build(), prints diagnostics.

Imports stay lazy so `compile` starts fast and never loads torch, ray or azure-ai-ml.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import click

# trainspec's models use no pydantic plugin; scanning every installed package's entry points
# for them costs more than compiling a spec.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from . import __version__  # noqa: E402
from .compiler import TARGETS  # noqa: E402

EPILOG = """\b
Examples:
  trainspec validate specs/                       check every spec, show every problem
  trainspec compile specs/ -o build/              write build/<name>/<target>/...
  trainspec compile specs/mnist-lightning.yaml -t azureml --set resources.nodes=4
  trainspec run specs/mnist-lightning.yaml --local --procs-per-node 2
  trainspec schema > trainspec.schema.json        JSON Schema for editors
"""


@click.group(epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="trainspec")
def cli() -> None:
    """Compile one training spec into the job files of Azure ML and HPC Pack,
    checked before anything runs."""


target_option = click.option(
    "-t", "--target", "targets", multiple=True, type=click.Choice(sorted(TARGETS)),
    help="Target to compile for (repeatable). Default: the targets the spec lists, else azureml.")
strict_option = click.option("--strict", is_flag=True, help="Treat warnings as errors.")


def override_options(fn):
    fn = click.option("--var", "variables", multiple=True, metavar="NAME=VALUE",
                      help="Template variable {{ vars.NAME }} (repeatable; wins over the spec's vars:).")(fn)
    fn = click.option("--set", "sets", multiple=True, metavar="PATH=VALUE",
                      help="Override a spec field, validated like file content: --set resources.nodes=4.")(fn)
    return fn


def _report(outcomes, strict: bool) -> Tuple[int, int]:
    errors = warnings = 0
    for outcome in outcomes:
        for d in outcome.diagnostics:
            click.echo(d.render(), err=True)
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
        raise click.UsageError(f"no spec files (*.yaml, *.yml) in {' '.join(paths)}")
    return files


@cli.command()
@click.argument("paths", nargs=-1, required=True, metavar="SPEC|DIR...")
@target_option
@strict_option
@override_options
def validate(paths: Sequence[str], targets: Sequence[str], strict: bool, sets: Sequence[str],
             variables: Sequence[str]) -> None:
    """Check specs and print every problem as file:line:col: severity: message (hint)."""
    from .build import build

    files = _specs(paths)
    outcomes = [build(f, Path("build"), targets, lower=False, sets=sets, variables=variables) for f in files]
    errors, warnings = _report(outcomes, strict)
    click.echo(_summary(len(files), errors, warnings), err=True)
    sys.exit(1 if errors or (strict and warnings) else 0)


@cli.command(name="compile")
@click.argument("paths", nargs=-1, required=True, metavar="SPEC|DIR...")
@target_option
@click.option("-o", "--out", default="build", show_default=True, type=click.Path(file_okay=False),
              help="Output directory; files go to OUT/<name>/<target>/.")
@strict_option
@override_options
def compile_(paths: Sequence[str], targets: Sequence[str], out: str, strict: bool, sets: Sequence[str],
             variables: Sequence[str]) -> None:
    """Validate specs and write each target's files. Nothing is written unless every spec is valid."""
    from .build import build
    from .compiler.write import target_dir, write_all

    files = _specs(paths)
    out_path = Path(out)
    outcomes = [build(f, out_path, targets, sets=sets, variables=variables) for f in files]
    errors, warnings = _report(outcomes, strict)
    errors += _duplicate_names(outcomes)
    if errors or (strict and warnings):
        click.echo(_summary(len(files), errors, warnings) + "; nothing written", err=True)
        sys.exit(1)
    artifacts = [a for o in outcomes for a in o.artifacts]
    try:
        write_all(out_path, artifacts)
    except OSError as exc:
        click.echo(f"trainspec: error: cannot write {exc.filename or out}: {exc.strerror}; "
                   "existing outputs are unchanged", err=True)
        sys.exit(1)
    for artifact in artifacts:
        where = target_dir(out_path, artifact)
        names = ", ".join(f.path for f in artifact.files)
        click.echo(f"wrote {where}/ ({names})")
        click.echo(f"  submit: {artifact.submit.format(dir=shlex.quote(str(where)))}")
    click.echo(_summary(len(files), errors, warnings), err=True)


def _duplicate_names(outcomes) -> int:
    seen = {}
    count = 0
    for outcome in outcomes:
        if outcome.valid is None:
            continue
        name = outcome.valid.name
        if name in seen:
            click.echo(f"{outcome.file}: error: name: '{name}' is also the name of {seen[name]}; "
                       "outputs would overwrite each other (hint: give each spec its own name)", err=True)
            count += 1
        else:
            seen[name] = outcome.file
    return count


@cli.command()
@click.argument("paths", nargs=-1, required=True, metavar="SPEC|DIR...")
@click.option("-o", "--out", default="build", show_default=True, type=click.Path(file_okay=False),
              help="The output directory that compile wrote (and that is committed).")
@target_option
@override_options
def check(paths: Sequence[str], out: str, targets: Sequence[str], sets: Sequence[str],
          variables: Sequence[str]) -> None:
    """CI gate: recompile in memory and fail (exit 1, with a diff) if any output under OUT is
    stale, missing, hand-edited, or left over from a spec that is gone."""
    from .build import build
    from .review import check_outputs

    files = _specs(paths)
    out_path = Path(out)
    outcomes = [build(f, out_path, targets, sets=sets, variables=variables) for f in files]
    errors, warnings = _report([o for o in outcomes if not o.ok], False)
    if errors:
        click.echo(_summary(len(files), errors, warnings) + "; fix the specs first", err=True)
        sys.exit(1)
    findings = check_outputs(outcomes, out_path)
    for finding in findings:
        click.echo(finding.render())
    count = sum(len(o.artifacts) for o in outcomes)
    if findings:
        click.echo(f"trainspec check: {len(findings)} problem(s) in {out}; run: trainspec compile "
                   f"{' '.join(paths)} -o {out}", err=True)
        sys.exit(1)
    click.echo(f"trainspec check: {count} output folder(s) in {out} match their specs", err=True)


@cli.command()
@click.argument("spec", metavar="SPEC")
@target_option
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json"]), default="text",
              show_default=True, help="markdown for a pull-request comment, json for tools.")
@override_options
def plan(spec: str, targets: Sequence[str], fmt: str, sets: Sequence[str], variables: Sequence[str]) -> None:
    """What will run, for a reviewer: per target the world, nodes x processes, launcher, SKU,
    spot, environment, and the variables the first and the last rank get."""
    from .build import build
    from .review import plan as make_plan, render_plan

    outcome = build(spec, Path("build"), targets, sets=sets, variables=variables)
    if not outcome.ok:
        _report([outcome], False)
        sys.exit(1)
    click.echo(render_plan(make_plan(outcome), fmt))


@cli.command()
@click.argument("specs", nargs=-1, metavar="[BASE HEAD]")
@click.option("--git", "rev", metavar="REV", help="Compare every spec changed since REV with its version there.")
@click.option("--format", "fmt", type=click.Choice(["text", "markdown"]), default="text", show_default=True)
@target_option
def diff(specs: Sequence[str], rev: Optional[str], fmt: str, targets: Sequence[str]) -> None:
    """The semantic change between two specs (nodes, world, SKU, GPUs...), then the diff of
    each compiled output. Exit 0 either way: this is for reading."""
    from .build import build
    from .review import diff_outcomes, git_changed_specs, render_diffs

    def outcome(path: Optional[Path]):
        if path is None or not path.exists():
            return None
        result = build(str(path), Path("build"), targets)
        if not result.ok:
            _report([result], False)
            sys.exit(1)
        return result

    if rev:
        if specs:
            raise click.UsageError("give either BASE HEAD or --git REV")
        import shutil
        import subprocess
        try:
            root, changed, old_tree = git_changed_specs(rev, (), Path.cwd())
        except subprocess.CalledProcessError as exc:
            raise click.UsageError(f"git: {exc.stderr.strip() if exc.stderr else exc}") from None
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
        if len(specs) != 2:
            raise click.UsageError("give BASE and HEAD spec files, or --git REV")
        diffs = [diff_outcomes(specs[1], outcome(Path(specs[0])), outcome(Path(specs[1])))]
    click.echo(render_diffs(diffs, fmt) if diffs else "no spec changed")


def _looks_like_spec(path: Path) -> bool:
    if not path.is_file():
        return False
    head = path.read_text(encoding="utf-8", errors="replace")[:4000]
    return any(line.startswith(("version:", "extends:")) for line in head.splitlines())


@cli.command()
def schema() -> None:
    """Print the JSON Schema of the spec (for editors: yaml-language-server)."""
    import json

    from .schema.model import Spec

    click.echo(json.dumps(Spec.model_json_schema(), indent=2, sort_keys=True))


@cli.command()
@click.argument("spec", metavar="SPEC")
@click.option("--local", is_flag=True, required=True,
              help="Run on this machine, simulating the target's nodes with local processes.")
@click.option("-t", "--target", default="azureml", show_default=True, type=click.Choice(sorted(TARGETS)),
              help="Whose environment to simulate.")
@click.option("--procs-per-node", type=click.IntRange(1, 64), default=None,
              help="Processes per simulated node (default: the spec's; CPU only here).")
@click.option("--nodes", type=click.IntRange(1, 16), default=None, help="Simulated nodes (default: the spec's).")
@click.option("--launcher", type=click.Choice(["per-process", "per-node", "mpi"]), default=None,
              help="Override distribution.launcher (e.g. mpi: only Open MPI variables, as Azure ML's MPI jobs).")
@click.option("--input", "inputs", multiple=True, metavar="NAME=PATH", help="Local path for a spec input.")
@click.option("--timeout", type=click.FloatRange(1), default=900, show_default=True,
              help="Seconds before the whole run is stopped.")
@click.option("--workdir", type=click.Path(file_okay=False), default=None,
              help="Where the run's copy of the code and its outputs go (default: a temporary directory).")
@override_options
def run(spec: str, local: bool, target: str, procs_per_node: Optional[int], nodes: Optional[int],
        launcher: Optional[str], inputs: Sequence[str], timeout: float, workdir: Optional[str],
        sets: Sequence[str], variables: Sequence[str]) -> None:
    """Run a spec's job here, before paying for GPUs: nodes x processes local processes, each
    with exactly the environment the target platform would give it, on CPU with gloo."""
    from .local import LocalOptions, run_local

    parsed = {}
    for item in inputs:
        name, sep, path = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"expected NAME=PATH, got {item!r}", param_hint="--input")
        parsed[name] = path
    options = LocalOptions(target=target, procs_per_node=procs_per_node, nodes=nodes, launcher=launcher,
                           inputs=parsed, timeout=timeout, workdir=workdir, sets=tuple(sets),
                           variables=tuple(variables))
    sys.exit(run_local(spec, options))


def main(argv: Optional[Sequence[str]] = None) -> None:
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="trainspec")
    except KeyboardInterrupt:
        click.echo("trainspec: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # a bug of ours: say so in one line, no traceback unless asked
        if os.environ.get("TRAINSPEC_DEBUG"):
            raise
        click.echo(f"trainspec: internal error: {type(exc).__name__}: {exc} "
                   "(set TRAINSPEC_DEBUG=1 for a traceback, and please report it)", err=True)
        sys.exit(70)


if __name__ == "__main__":
    main()
