"""The command line's parser: every command, its flags and its help, built without importing any
command (each is trainspec/cli/<module>.py, imported by main() when it runs). The lists of
targets in the help come from the registry.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Optional, Sequence

from trainspec import __version__
from trainspec.registry import DEFAULT_TARGET, TARGETS, display_names

DESCRIPTION = f"Compile one training spec into the job files of {display_names()}, checked before anything runs."
EPILOG = """\
Examples:
  trainspec init my-training                      start a repository: spec, base, catalog, CI, hooks
  trainspec validate specs/                       check every spec, show every problem
  trainspec compile specs/ -o build/              write build/<name>/<target>/...
  trainspec compile specs/mnist-lightning.yaml --set resources.nodes=4
  trainspec run specs/mnist-lightning.yaml --local --procs-per-node 2
  trainspec submit specs/mnist-lightning.yaml --follow   submit, stream the logs, exit with the outcome
  trainspec review --git origin/main              a pull request's comment: its cost, plan and diff
  trainspec schema > trainspec.schema.json        JSON Schema for editors
"""
# Each command: its module (trainspec/cli/<module>.py, imported only when the command runs) and
# what --help says of it (the first sentence in the list of commands).
COMMANDS = {
    "init": ("init", "Start a repository of training specs in DIR (default: here). Writes a spec, the base it extends, a team catalog, its training script, the JSON Schemas, the CI workflow and the pre-commit hooks, which validate and compile as written, and a .gitignore for what a submit leaves behind (one that is there gets the lines it lacks); never replaces a file (if one exists, it is named and nothing is written; --force replaces them)."),
    "validate": ("validate", 'Check specs and print every problem as file:line:col: severity: message (hint).'),
    "compile": ("compile", "Validate specs and write each target's files. Nothing is written unless every spec is valid. With --prune, also remove the output folders trainspec wrote for specs that are gone."),
    "check": ("check", 'CI gate: recompile in memory and fail (exit 1) for every output under OUT that is stale (its spec changed), hand-edited, missing, orphaned (its spec is gone) or foreign (not written by trainspec), each with the command that fixes it.'),
    "plan": ("plan", 'What will run, for a reviewer: per job and target the world, nodes x processes, launcher, SKU, spot, environment, and the variables the first and the last rank get. Over files, folders, or (--git BASE) the jobs whose compiled outputs a branch changes: one document.'),
    "diff": ("diff", 'What a change does to the jobs: per job whose compiled outputs change, every changed field of the spec and of the derived job (world, processes, GPUs, env, timeout, target settings), then the diff of each output. --git BASE: every spec in the repository, compiled there and here (a change to an `extends` base or a conda file shows in every job that reads it). BASE.yaml HEAD.yaml: two files. One SPEC with --set/--var: the spec against itself with the overrides. Exit 0 either way: this is for reading.'),
    "review": ("review", "The pull-request comment of a branch in one command: what it costs, the plan and the diff of every job whose compiled outputs change since the git revision BASE (what `plan --git` then `diff --git` print), compiling each revision once. Markdown by default, within one GitHub comment; text for a log, json for tools. Exit 0 whatever the change (1 when the branch's own specs do not compile): this is for reading."),
    "skus": ("skus", "List the Azure VM sizes trainspec knows: the built-in catalog plus your team's trainspec-skus.yaml (the nearest one from the current folder up to the repository root). Filter by GPU model, GPU count and InfiniBand. With --import, turn what `az vm list-skus --resource-type virtualMachines --output json` printed into entries for trainspec-skus.yaml (printed, or merged into the file given with --write)."),
    "import": ("import_job", 'Turn an existing Azure ML command job (job.yml) into a spec that compiles back to an equivalent job. Whatever the spec cannot carry is reported by field, with its line; a hand-written MPI-env wrapper in the command is dropped (the shim does its work). The spec is printed, or written with -o (never over an existing file), then validated.'),
    "schema": ("schema", 'Print the JSON Schema of the spec (for editors: yaml-language-server). --base: the schema of a base that specs extend (every field optional, names and types checked).'),
    "submit": ("jobs", "Submit each spec's job to its targets through the platform's own client, print its id and where to watch it, and with --wait (or --follow, which also streams the logs) wait for its final state: exit 0 completed, 4 failed, 5 canceled, 6 timed out, 3 could not submit, 7 still running at --max-wait. The job is named after the spec and the digest of what was compiled, so the same job is never submitted twice: submitting again finds it and follows it."),
    "status": ("jobs", "The state of the job submitted from each spec (found by the name submit gave it) or named by --id: the same exit codes as submit --wait, 7 while it runs."),
    "logs": ("jobs", "The logs of the job submitted from each spec, or named by --id: rank 0's, or every node's with --all-ranks, each line prefixed by its node; --follow until the job ends (exit: its final state)."),
    "cancel": ("jobs", "Cancel the job submitted from each spec, or named by --id; returns once the platform accepted (--wait: until it is final)."),
    "run": ("run", "Run a spec's job here, before paying for GPUs: nodes x processes local processes, each with exactly the environment the target platform would give it, on CPU with gloo."),
}


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


def _max_chars(text: str) -> int:
    value = _int_range(0, 10**9)(text)
    if 0 < value < 1000:
        raise argparse.ArgumentTypeError(f"{value} is too small for a document: give at least 1000, or 0 for no limit")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value >= 1:
        raise argparse.ArgumentTypeError(f"{text} is less than 1 second")
    return value


def _duration(text: str) -> float:
    from trainspec.core.fields import parse_duration

    try:
        return float(parse_duration(int(text) if text.isdigit() else text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def _columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size()`` reads it: COLUMNS, else the width of
    the terminal on stdout, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class Help(argparse.HelpFormatter):
    """argparse's help formatter, its width found without importing ``shutil``: argparse makes a
    formatter for every flag it adds, and the first one would import shutil (with bz2, lzma, zlib:
    ~3 ms of every start) for ``get_terminal_size`` alone."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: Optional[int] = None) -> None:
        super().__init__(prog, indent_increment, max_help_position, _columns() - 2 if width is None else width)


class RawDescriptionHelp(argparse.RawDescriptionHelpFormatter, Help):
    """The top level's: its description and examples as written."""


def parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The whole command line. Only the command ``argv`` names gets its flags: argparse makes a help
    formatter for each flag it adds, ~10 ms for all of them, a tenth of a cold `trainspec compile`.
    Without a command's name (``--help``, a misspelt command) every command gets its flags."""
    top = argparse.ArgumentParser(prog="trainspec", description=DESCRIPTION, epilog=EPILOG,
                                  formatter_class=RawDescriptionHelp)
    top.add_argument("--version", action="version", version=f"trainspec {__version__}")
    commands = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    named = next((word for word in argv if not word.startswith("-")), None)  # the top level's flags take no value
    for name, flags in FLAGS.items():  # in the order of --help
        module, doc = COMMANDS[name]
        whole = named not in FLAGS or name == named  # a command that does not run needs neither flags nor -h
        sub = commands.add_parser(name, help=doc.split(". ")[0].rstrip("."), description=doc, formatter_class=Help,
                                  add_help=whole)
        sub.set_defaults(module=module, parser=sub)
        if whole:
            flags(sub)
    return top


# --- flags that several commands share -----------------------------------------------------------

def targets(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("-t", "--target", dest="targets", action="append", default=[], choices=sorted(TARGETS),
                     help="target to compile for (repeatable); default: the targets the spec lists, "
                          f"else {DEFAULT_TARGET}")


def job_targets(sub: argparse.ArgumentParser) -> None:
    """-t for submit, status, logs and cancel: a spec that lists several targets needs it, or
    --all-targets, so a job is never sent to every platform the machine is logged in to unasked."""
    choice = sub.add_mutually_exclusive_group()
    choice.add_argument("-t", "--target", dest="targets", action="append", default=[], choices=sorted(TARGETS),
                        help="the target whose job to act on (repeatable); a spec that lists one target needs "
                             "none, one that lists several needs -t or --all-targets")
    choice.add_argument("--all-targets", action="store_true",
                        help="every target each spec lists (default for a spec that lists one)")


def overrides(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--set", dest="sets", action="append", default=[], metavar="PATH=VALUE",
                     help="override a spec field, validated like file content: --set resources.nodes=4")
    sub.add_argument("--var", dest="variables", action="append", default=[], metavar="NAME=VALUE",
                     help="template variable {{ vars.NAME }} (repeatable; wins over the spec's vars:)")


def strict(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--strict", action="store_true", help="treat warnings as errors")


def paths(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("paths", nargs="+", metavar="SPEC|DIR", help="spec files, or folders to search")


def out(sub: argparse.ArgumentParser, help: str) -> None:
    sub.add_argument("-o", "--out", default="build", help=f"{help} (default: build)")


def git_base(sub: argparse.ArgumentParser, what: str) -> None:
    sub.add_argument("--git", metavar="BASE", help=f"{what}; PATHS (default: the whole repository) limit "
                                                   "where specs are searched")


def max_chars(sub: argparse.ArgumentParser, what: str, default: str) -> None:
    sub.add_argument("--max-chars", type=_max_chars, metavar="N",
                     help=f"cut the {what} to at most N characters (long diffs shortened, the jobs that "
                          f"do not fit named), saying where the whole {what} is; 0: never cut. Default: "
                          f"{default} for markdown (plan and diff markdown together stay under 60,000: one "
                          "GitHub comment), no limit for text; json is never cut")


def platform(sub: argparse.ArgumentParser) -> None:
    group = sub.add_argument_group("where the platform is (each target reads only its own)")
    group.add_argument("--address", metavar="URL",
                       help="ray: the dashboard of a running cluster (http://HEAD:8265; default: `ray up` of "
                            "the compiled cluster, or RAY_ADDRESS); hpcpack: the head node's REST service "
                            "(https://HEAD; default: HPCPACK_REST_URL)")
    group.add_argument("--subscription", metavar="ID", help="azureml: the subscription (default: "
                       "AZUREML_SUBSCRIPTION_ID, else config.json as the SDK finds it)")
    group.add_argument("--resource-group", metavar="NAME", help="azureml: default AZUREML_RESOURCE_GROUP")
    group.add_argument("--workspace", metavar="NAME", help="azureml: default AZUREML_WORKSPACE")


def job_paths(sub: argparse.ArgumentParser, what: str) -> None:
    sub.add_argument("paths", nargs="*", metavar="SPEC|DIR", help=f"spec files, or folders to search: {what}")
    sub.add_argument("--out", metavar="OUT", default=None,
                     help="take the compiled outputs committed in OUT (refused unless `trainspec check` passes "
                          "for them) instead of compiling into .trainspec/jobs/")


def waiting(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--max-wait", type=_duration, metavar="DURATION",
                     help="stop waiting after this long (2h, 90m, seconds), exit 7: the job goes on (default: "
                          "the spec's timeout plus 1h for the queue, or 72h without one)")


def by_id(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--id", dest="job_id", metavar="ID",
                     help="the platform's id of the job (as submit printed it; needs exactly one -t) instead of "
                          "finding it from a spec")


def job_format(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--format", choices=["text", "json"], default="text",
                     help="json: one document on stdout at the end (log lines and progress go to stderr)")


# --- each command's flags ---------------------------------------------------------------------

def _init(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("dir", nargs="?", default=".", metavar="DIR", help="where to write (created if missing; "
                                                                          "default: the current folder)")
    sub.add_argument("--name", help="the job's name, and its spec's file name (default: the folder's name, "
                                    "else train)")
    sub.add_argument("-t", "--target", dest="targets", action="append", default=[], choices=sorted(TARGETS),
                     help=f"a target the base configures (repeatable; default: {DEFAULT_TARGET}). Where a "
                          "platform cannot run the base as written (Ray's VMs have no InfiniBand between them, HPC "
                          "Pack runs the nodes' own software), validate warns, and --strict counts it")
    sub.add_argument("--force", action="store_true", help="replace files that exist")


def _validate(sub: argparse.ArgumentParser) -> None:
    paths(sub)
    targets(sub)
    strict(sub)
    sub.add_argument("--format", choices=["text", "json", "github"], default="text",
                     help="json: one document on stdout; github: GitHub Actions annotations, so each problem "
                          "shows on its line of the pull request (default: text on stderr)")
    overrides(sub)


def _compile(sub: argparse.ArgumentParser) -> None:
    paths(sub)
    targets(sub)
    out(sub, "output directory; files go to OUT/<name>/<target>/")
    strict(sub)
    sub.add_argument("--prune", action="store_true",
                     help="also remove output folders that trainspec wrote (recognised by their header) for specs "
                          "that are gone or no longer produce them; never anything else")
    overrides(sub)


def _check(sub: argparse.ArgumentParser) -> None:
    paths(sub)
    out(sub, "the output directory that compile wrote, and that is committed")
    targets(sub)
    overrides(sub)


def _plan(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("paths", nargs="*", metavar="SPEC|DIR", help="spec files, or folders to search")
    git_base(sub, "plan only the jobs whose compiled outputs change since the git revision BASE")
    sub.add_argument("--format", choices=["text", "markdown", "json"], default="text",
                     help="markdown for a pull-request comment, json for tools (default: text)")
    max_chars(sub, "plan", "24,000")
    sub.add_argument("--submitted", action="store_true",
                     help="ask each job's platform whether `trainspec submit` would create it or find it already "
                          "submitted (and in which state): needs the platform's client and login; never in a "
                          "pull request's review")
    out(sub, "where outputs go, for the paths in the plan")
    targets(sub)
    overrides(sub)


def _diff(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("paths", nargs="*", metavar="SPEC|DIR",
                     help="BASE.yaml HEAD.yaml; one SPEC with --set/--var; or, with --git, where to search")
    git_base(sub, "compare every spec with the git revision BASE (a branch, a tag, a commit)")
    sub.add_argument("--format", choices=["text", "markdown", "json"], default="text",
                     help="markdown for a pull-request comment, json for tools (default: text)")
    max_chars(sub, "diff", "35,000")
    out(sub, "the output directory, for the paths in diff headers")
    targets(sub)
    overrides(sub)


def _review(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("paths", nargs="*", metavar="SPEC|DIR",
                     help="where to search for specs (default: the whole repository)")
    sub.add_argument("--git", metavar="BASE", required=True,
                     help="the git revision the branch is compared with (a branch, a tag, a commit)")
    sub.add_argument("--format", choices=["markdown", "text", "json"], default="markdown",
                     help="markdown: one pull-request comment, under 60,000 characters whatever the change "
                          "(default); text: the whole review, never cut; json: one document for tools "
                          '({"base", "cost", "plan", "diff"})')
    out(sub, "the output directory, for the paths in the plan and diff headers")
    targets(sub)
    overrides(sub)


def _schema(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--base", action="store_true",
                     help="the schema of a base (a file specs extend): every field optional, names and types checked")


def _import_job(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("job", metavar="JOB.yml", help="an Azure ML command job (the file `az ml job create` reads)")
    sub.add_argument("-o", "--out", metavar="SPEC", help="write the spec here and validate it (default: print it)")


def _skus(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--gpu", metavar="MODEL",
                     help="only this GPU model and its variants, e.g. H100 (also H100 NVL; case-insensitive)")
    sub.add_argument("--gpus", type=int, metavar="N", help="only sizes with N GPUs")
    sub.add_argument("--infiniband", action=argparse.BooleanOptionalAction, default=None,
                     help="only sizes with (or, --no-infiniband, without) InfiniBand")
    sub.add_argument("--retired", action="store_true", help="include retired sizes")
    sub.add_argument("--format", choices=["text", "json"], default="text")
    sub.add_argument("--import", dest="import_file", metavar="AZ_JSON",
                     help="turn `az vm list-skus --resource-type virtualMachines -o json` output into "
                          "trainspec-skus.yaml entries")
    sub.add_argument("--gpu-only", action="store_true", help="with --import: only sizes that have GPUs")
    sub.add_argument("--write", metavar="FILE", help="with --import: merge the entries into FILE "
                                                      "(e.g. trainspec-skus.yaml) instead of printing them")


def _submit(sub: argparse.ArgumentParser) -> None:
    job_paths(sub, "the jobs to submit")
    job_targets(sub)
    overrides(sub)
    sub.add_argument("--plan", metavar="PLAN.json",
                     help="submit exactly the jobs (spec and target) that `trainspec plan --format json` listed in "
                          "this file")
    follow = sub.add_mutually_exclusive_group()
    follow.add_argument("--wait", action="store_true", help="wait for every job's final state")
    follow.add_argument("--follow", action="store_true", help="wait, and stream the logs meanwhile")
    sub.add_argument("--all-ranks", action="store_true", help="with --follow: every node's logs, each line "
                                                               "prefixed by its node (default: rank 0's)")
    waiting(sub)
    job_format(sub)
    sub.add_argument("--summary", metavar="FILE", help="append a markdown table of the jobs, their links and "
                                                       "states to FILE (in GitHub Actions: $GITHUB_STEP_SUMMARY)")
    platform(sub)


def _status(sub: argparse.ArgumentParser) -> None:
    job_paths(sub, "whose jobs to look up")
    job_targets(sub)
    overrides(sub)
    by_id(sub)
    sub.add_argument("--wait", action="store_true", help="wait for every job's final state")
    waiting(sub)
    job_format(sub)
    sub.add_argument("--summary", metavar="FILE", help="append a markdown table of the jobs to FILE")
    platform(sub)


def _logs(sub: argparse.ArgumentParser) -> None:
    job_paths(sub, "whose jobs' logs to print")
    job_targets(sub)
    overrides(sub)
    by_id(sub)
    sub.add_argument("--follow", "-f", action="store_true", help="keep printing until the job ends")
    sub.add_argument("--all-ranks", action="store_true", help="every node's logs, each line prefixed by its node")
    waiting(sub)
    platform(sub)


def _cancel(sub: argparse.ArgumentParser) -> None:
    job_paths(sub, "whose jobs to cancel")
    job_targets(sub)
    overrides(sub)
    by_id(sub)
    sub.add_argument("--wait", action="store_true", help="wait until each job is final")
    waiting(sub)
    platform(sub)


def _run(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("spec", metavar="SPEC")
    sub.add_argument("--local", action="store_true",
                     help="run on this machine, simulating the target's nodes with local processes (the only "
                          "mode today, so it may be left out)")
    sub.add_argument("-t", "--target", default=DEFAULT_TARGET, choices=sorted(TARGETS),
                     help=f"whose environment to simulate (default: {DEFAULT_TARGET})")
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
                     help="where the run's copy of the code and its outputs go, kept afterwards (default: a "
                          "temporary directory, removed when the run ends)")
    sub.add_argument("--keep", action="store_true",
                     help="keep the temporary work directory (compiled job, code copy, outputs) after the run")
    overrides(sub)


# Each command's flags, in the order --help lists the commands.
FLAGS = {
    "init": _init, "validate": _validate, "compile": _compile, "check": _check, "plan": _plan, "diff": _diff,
    "review": _review, "schema": _schema, "import": _import_job, "skus": _skus, "submit": _submit,
    "status": _status, "logs": _logs, "cancel": _cancel, "run": _run,
}
