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
if "PYDANTIC_DISABLE_PLUGINS" not in os.environ:
    os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
    CLI_STARTUP_ENV = ("PYDANTIC_DISABLE_PLUGINS",)  # ours, not the user's: never passed to a training process
else:
    CLI_STARTUP_ENV = ()

from . import __version__  # noqa: E402
from .compiler import DEFAULT_TARGET, IMPORTER, TARGETS  # noqa: E402

DESCRIPTION = ("Compile one training spec into the job files of Azure ML, HPC Pack and Ray, "
               "checked before anything runs.")
EPILOG = """\
Examples:
  trainspec validate specs/                       check every spec, show every problem
  trainspec compile specs/ -o build/              write build/<name>/<target>/...
  trainspec compile specs/mnist-lightning.yaml --set resources.nodes=4
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


def _specs(paths: Sequence[str], known=None) -> List[str]:
    from .build import SearchError, find_specs

    try:
        files = find_specs(paths, known)
    except SearchError as exc:
        raise UsageError(str(exc)) from None
    if not files:
        raise UsageError(f"no spec files (*.yaml, *.yml) in {' '.join(paths)}")
    return files


# --- the commands ---------------------------------------------------------------------------

def validate(args: argparse.Namespace) -> int:
    """Check specs and print every problem as file:line:col: severity: message (hint)."""
    from .build import build_all

    files = _instead_of_bases(_specs(args.paths), args.paths)
    outcomes = build_all(files, Path("build"), args.targets, lower=False, sets=args.sets, variables=args.variables)
    if args.format == "text":
        errors, warnings = _report(outcomes, args.strict)
    else:
        errors, warnings = _report_for_machines(outcomes, args.format, args.strict)
    _err(_summary(len(files), errors, warnings) + _strict_note(args.strict, errors, warnings))
    return 1 if errors or (args.strict and warnings) else 0


def _instead_of_bases(files: List[str], named: Sequence[str]) -> List[str]:
    """A file named on the command line that specs in its repository extend (at any depth) is a
    base, not a spec: what it means is checked by validating those specs (a hook passes a changed
    base by its name). The team catalog (trainspec-skus.yaml) means the specs that read it. The
    repository: from the first folder with a .git above the file, else
    from the current folder."""
    from .build import _is_file, _real, dependents, find_specs
    from .cache import Extends
    from .review import looks_like_spec
    from .schema.skus import TEAM_FILE, team_file_for

    known = None
    result: List[str] = []
    for file in files:
        if file not in named or not _is_file(Path(file)):
            result.append(file)
            continue
        known = known if known is not None else Extends()
        if Path(file).name == TEAM_FILE:  # the team catalog: the specs that look sizes up in it
            found = [f for f in find_specs([_search_root(Path(file))], known) if looks_like_spec(Path(f))
                     and team_file_for(Path(f).resolve().parent) == Path(file).resolve()]
            _err(f"{file}: the team catalog of {len(found)} spec(s): validating them")
            result += found
            continue
        found = dependents(file, _search_root(Path(file)), known)
        if found:
            _err(f"{file}: a base of {len(found)} spec(s): validating them instead")
        result += found or [file]
    if known is not None:
        known.save()
    unique = {}  # one spec once, however it was named
    for file in result:
        unique.setdefault(_real(file) or file, file)  # a link loop or a NUL stays a name: build() reports it
    return list(unique.values())


def _search_root(file: Path) -> str:
    start = file.resolve().parent
    root = next((p for p in (start, *start.parents) if (p / ".git").exists()), Path.cwd())
    shown = os.path.relpath(root)
    return str(root) if shown.startswith("..") else shown


def _strict_note(strict: bool, errors: int, warnings: int) -> str:
    return " (--strict: warnings count as errors)" if strict and warnings else ""


def _report_for_machines(outcomes, fmt: str, strict: bool) -> Tuple[int, int]:
    """json: one document on stdout; github: workflow commands, so each problem shows on its line
    of the pull request (https://docs.github.com/actions/reference/workflow-commands)."""
    import json

    found = [d for o in outcomes for d in o.diagnostics]
    errors = sum(d.is_error for d in found)
    if fmt == "json":
        print(json.dumps([{"file": d.file, "line": d.line, "col": d.col, "severity": d.severity,
                           "field": d.field or None, "message": d.message, "hint": d.hint} for d in found],
                         indent=2))
    else:
        for d in found:
            level = "error" if d.is_error or strict else "warning"
            where = ",".join(f"{k}={_gh_property(str(v))}" for k, v in
                             (("file", d.file), ("line", d.line), ("col", d.col), ("title", d.field or None))
                             if v is not None)
            text = d.message + (f" (hint: {d.hint})" if d.hint else "")
            print(f"::{level} {where}::{_gh_data(text)}")
    return errors, len(found) - errors


def _gh_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_property(text: str) -> str:
    return _gh_data(text).replace(":", "%3A").replace(",", "%2C")


def _fix_command(args: argparse.Namespace) -> Callable[[Optional[Sequence[str]], bool], str]:
    """The compile command line that fixes a check finding: the same output folder, targets and
    overrides as the check that found it; ``files`` None means the paths the check was given."""
    def command(files: Optional[Sequence[str]], prune: bool) -> str:
        words = ["trainspec", "compile", *(args.paths if files is None else files), "-o", args.out]
        for name in args.targets:
            words += ["-t", name]
        for text in args.sets:
            words += ["--set", text]
        for text in args.variables:
            words += ["--var", text]
        return shlex.join(words + (["--prune"] if prune else []))
    return command


def compile_(args: argparse.Namespace) -> int:
    """Validate specs and write each target's files. Nothing is written unless every spec is
    valid. With --prune, also remove the output folders trainspec wrote for specs that are gone."""
    from .build import build_all
    from .compiler.write import target_dir, write_all

    files = _specs(args.paths)
    out_path = Path(args.out)
    outcomes = build_all(files, out_path, args.targets, sets=args.sets, variables=args.variables)
    errors, warnings = _report(outcomes, args.strict)
    if errors or (args.strict and warnings):
        _err(_summary(len(files), errors, warnings) + _strict_note(args.strict, errors, warnings) + "; nothing written")
        return 1
    artifacts = [a for o in outcomes for a in o.artifacts]
    try:
        write_all(out_path, artifacts)
        if args.prune:
            from .review import prune

            for folder, header in prune(outcomes, out_path, args.targets):
                print(f"removed {folder}/ (written from {header.spec}, which is gone or no longer produces it)")
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


def check(args: argparse.Namespace) -> int:
    """CI gate: recompile in memory and fail (exit 1) for every output under OUT that is stale
    (its spec changed), hand-edited, missing, orphaned (its spec is gone) or foreign (not
    written by trainspec), each with the command that fixes it."""
    from .build import build, claim_names
    from .cache import Cache, Extends, options_of, outputs_match
    from .review import KINDS, check_outputs

    out_path = Path(args.out)
    cache = Cache(out_path, options_of(args.targets, args.sets, args.variables))
    known = Extends()
    files = _specs(args.paths, known)
    known.save()
    built = {}
    cached = {}  # file -> its record: what the cache proves equal, from bytes alone
    for file in files:
        record = cache.lookup(file)
        if record is not None:
            folders = {out_path / record["name"] / target: hashes for target, hashes in record["outputs"].items()}
            if all(outputs_match(folder, hashes) for folder, hashes in folders.items()):
                cached[file] = record
                continue
        built[file] = build(file, out_path, args.targets, sets=args.sets, variables=args.variables)
    # one job name, one spec: a cached spec that shares its name with another is compiled again,
    # so that the error is located like every other
    names = [r["name"] for r in cached.values()] + [o.valid.name for o in built.values() if o.valid is not None]
    for file, record in list(cached.items()):
        if names.count(record["name"]) > 1:
            del cached[file]
            built[file] = build(file, out_path, args.targets, sets=args.sets, variables=args.variables)
    outcomes = [built[f] for f in files if f in built]
    claim_names(outcomes)
    for outcome in outcomes:
        cache.remember(outcome)
    cache.save()
    verified = {}  # output folder -> its spec
    for record in cached.values():
        verified.update(dict.fromkeys((out_path / record["name"] / target for target in record["outputs"]),
                                      record["display"]))
    errors, warnings = _report([o for o in outcomes if not o.ok], False)
    if errors:
        _err(_summary(len(files), errors, warnings) + "; fix the specs first")
        return 1
    findings = check_outputs(outcomes, out_path, _fix_command(args), args.targets, verified)
    for finding in findings:
        print(finding.render())
    count = sum(len(o.artifacts) for o in outcomes) + len(verified)
    if findings:
        kinds = ", ".join(f"{n} {k}" for k in KINDS for n in [sum(f.kind == k for f in findings)] if n)
        fixes = list(dict.fromkeys(f.fix for f in findings))
        _err(f"trainspec check: {len(findings)} problem(s) in {args.out} ({kinds}); to fix them all, run:")
        for line in fixes:
            _err(f"  {line}")
        return 1
    _err(f"trainspec check: {count} output folder(s) in {args.out} match their specs")
    return 0


def plan(args: argparse.Namespace) -> int:
    """What will run, for a reviewer: per job and target the world, nodes x processes, launcher,
    SKU, spot, environment, and the variables the first and the last rank get. Over files,
    folders, or (--git BASE) the jobs whose compiled outputs a branch changes: one document."""
    from .build import build_all
    from .review import plan as make_plan, plan_document

    if args.git:
        jobs, removed = _changed_jobs(args)
        if jobs is None:
            return 1
        plans = [make_plan(d, Path(args.out).as_posix()) for d in jobs]
        print(plan_document(plans, removed, args.format, args.git, args.max_chars))
        return 0
    files = _specs(args.paths)
    outcomes = build_all(files, Path(args.out), args.targets, sets=args.sets, variables=args.variables)
    bad = [o for o in outcomes if not o.ok]
    if bad:
        errors, warnings = _report(bad, False)
        _err(_summary(len(files), errors, warnings))
        return 1
    print(plan_document([make_plan(o, Path(args.out).as_posix()) for o in outcomes], [], args.format,
                        max_chars=args.max_chars))
    return 0


def _changed_jobs(args: argparse.Namespace):
    """(head outcomes of the jobs whose outputs change since --git BASE, removed jobs), or
    (None, None) after reporting errors."""
    diffs, sides = _git_diffs(args)
    if diffs is None:
        return None, None
    head = sides[1]
    jobs = [head.jobs[d.name] for d in diffs if d.status != "removed"]
    removed = [{"name": d.name, "spec": d.spec} for d in diffs if d.status == "removed"]
    return jobs, removed


def _git_diffs(args: argparse.Namespace):
    """Compile every spec under PATHS in the working tree and at --git BASE, from the
    repository root on both sides; returns (job diffs, (base side, head side)) or (None, None)."""
    import subprocess

    from . import review

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
    try:
        with review.revision_tree(args.git, root) as tree:
            old = review.compile_side(tree, paths, out, args.git, **options)
    except subprocess.CalledProcessError:
        raise UsageError(f"--git {args.git}: not a revision of the repository at {root}") from None
    established = [o.valid.source.display for o in old.jobs.values()] + list(old.invalid)
    new = review.compile_side(root, paths, out, None, established, **options)
    if new.errors:  # the change must compile; the base may not have (this change may be its fix)
        for d in new.errors:
            _err(d.render())
        _err(f"trainspec: {len(new.errors)} error(s); fix the specs first")
        return None, None
    for d in old.errors:
        _err(d.render().replace(": error: ", ": note: (at the base revision) ", 1))
    return review.compare(old, new, out, review.changed_since(args.git, root), root), (old, new)


def diff(args: argparse.Namespace) -> int:
    """What a change does to the jobs: per job whose compiled outputs change, every changed field
    of the spec and of the derived job (world, processes, GPUs, env, timeout, target settings),
    then the diff of each output. --git BASE: every spec in the repository, compiled there and
    here (a change to an `extends` base or a conda file shows in every job that reads it).
    BASE.yaml HEAD.yaml: two files. One SPEC with --set/--var: the spec against itself with the
    overrides. Exit 0 either way: this is for reading."""
    from .build import build
    from .review import diff_outcomes, render_diffs

    if args.git:
        diffs, _ = _git_diffs(args)
        if diffs is None:
            return 1
        print(render_diffs(diffs, args.format, args.git, args.max_chars))
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
    print(render_diffs([result], args.format, max_chars=args.max_chars))
    return 0


def skus(args: argparse.Namespace) -> int:
    """List the Azure VM sizes trainspec knows: the built-in catalog plus your team's
    trainspec-skus.yaml (the nearest one from the current folder up to the repository root).
    Filter by GPU model, GPU count and InfiniBand. With --import, turn what `az vm list-skus
    --resource-type virtualMachines --output json` printed into entries for trainspec-skus.yaml
    (printed, or merged into the file given with --write)."""
    import json

    from .schema import skus as catalog_module

    if args.import_file:
        return _import_skus(args)
    catalog, problems = catalog_module.catalog_for(Path.cwd())
    for problem in problems:
        print(problem.render(), file=sys.stderr)
    rows = []
    for sku, origin in catalog.all():
        if args.gpu and not catalog_module.gpu_matches(sku.gpu, args.gpu):
            continue
        if args.gpus is not None and sku.gpus != args.gpus:
            continue
        if args.infiniband is not None and sku.infiniband != args.infiniband:
            continue
        if sku.retired and not args.retired:
            continue
        rows.append({"name": sku.name, "gpus": sku.gpus, "gpu": sku.gpu, "gpu_memory_gb": sku.gpu_memory_gb,
                     "vcpus": sku.vcpus, "memory_gb": sku.memory_gb, "infiniband": sku.infiniband,
                     "retired": sku.retired, "from": origin, "note": sku.note})
    if args.format == "json":
        print(json.dumps({"built_in_source": catalog_module.catalog_source(), "team_file":
                          str(catalog.team_file) if catalog.team_file else None, "skus": rows}, indent=2))
        return 1 if problems else 0
    header = ("size", "GPUs", "GPU", "GPU GB", "vCPUs", "mem GB", "IB", "from")
    table = [header] + [(r["name"], str(r["gpus"]), r["gpu"] or "-", str(r["gpu_memory_gb"] or "-"), str(r["vcpus"]),
                         f"{r['memory_gb']:g}", "yes" if r["infiniband"] else "no",
                         r["from"] + (f" (retired {r['retired']})" if r["retired"] else "")) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    team = f"; team file {catalog.team_file}" if catalog.team_file else f"; no {catalog_module.TEAM_FILE} here"
    print(f"{len(rows)} size(s){team}", file=sys.stderr)
    return 1 if problems else 0


def _import_skus(args: argparse.Namespace) -> int:
    """`az vm list-skus` JSON -> trainspec-skus.yaml entries (ruamel.yaml writes them)."""
    import io
    import json

    from ruamel.yaml import YAML

    from .schema import skus as catalog_module

    from .schema.loader import ReadProblem, read_bounded

    try:
        listed = json.loads(read_bounded(args.import_file, 256 * 1024 * 1024).decode("utf-8"))
    except ReadProblem as exc:
        raise UsageError(f"--import {args.import_file}: {exc.message}") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"--import {args.import_file}: not the JSON `az vm list-skus` prints ({exc})") from None
    if not isinstance(listed, list):
        raise UsageError(f"--import {args.import_file}: expected a JSON list, as `az vm list-skus --output json` prints")
    entries = {}
    for item in listed:
        if not isinstance(item, dict) or item.get("resourceType", "virtualMachines") != "virtualMachines":
            continue
        name = item.get("name")
        caps = {c.get("name"): c.get("value") for c in item.get("capabilities") or [] if isinstance(c, dict)}
        if not isinstance(name, str) or not catalog_module.looks_like_azure(name) or name in entries:
            continue
        gpus = int(caps.get("GPUs") or 0)
        if args.gpu_only and gpus == 0:
            continue
        described = catalog_module.inferred(name, gpus)
        entry = {"gpus": gpus}
        if described.gpu:
            entry["gpu"] = described.gpu
        entry["vcpus"] = int(caps.get("vCPUs") or described.vcpus)
        entry["memory_gb"] = float(caps.get("MemoryGB") or 0)
        entry["infiniband"] = str(caps.get("RdmaEnabled", "False")).lower() == "true"
        if item.get("family"):
            entry["family"] = item["family"]
        entry["source"] = "az vm list-skus"
        entries[name] = entry
    yaml = YAML()
    yaml.default_flow_style = False
    if args.write:
        target = Path(args.write)
        existing = yaml.load(target.read_text(encoding="utf-8")) if target.exists() else None
        document = existing if isinstance(existing, dict) else {"skus": {}}
        document.setdefault("skus", {})
        for name in sorted(entries):
            document["skus"][name] = entries[name]
        buffer = io.StringIO()
        yaml.dump(document, buffer)
        target.write_text(buffer.getvalue(), encoding="utf-8")
        print(f"{args.write}: {len(entries)} size(s) imported", file=sys.stderr)
        return 0
    yaml.dump({"skus": {name: entries[name] for name in sorted(entries)}}, sys.stdout)
    return 0


def import_(args: argparse.Namespace) -> int:
    """Turn an existing Azure ML command job (job.yml) into a spec that compiles back to an
    equivalent job. Whatever the spec cannot carry is reported by field, with its line; a
    hand-written MPI-env wrapper in the command is dropped (the shim does its work). The spec
    is printed, or written with -o (never over an existing file), then validated."""
    from .build import build
    import importlib

    importer = importlib.import_module(IMPORTER)
    import_job, spec_text = importer.import_job, importer.spec_text

    spec_file = args.out or str(Path(args.job).with_name(Path(args.job).stem + ".trainspec.yaml"))
    if args.out and Path(args.out).exists():
        raise UsageError(f"{args.out} exists: trainspec import never overwrites a file")
    imported = import_job(args.job, spec_file)
    for note in imported.notes:
        print(note.render(), file=sys.stderr)
    if not imported.ok:
        print(f"trainspec: {args.job} cannot be imported: see the errors above; nothing written", file=sys.stderr)
        return 1
    text = spec_text(imported, args.job)
    if not args.out:
        sys.stdout.write(text)
        return 0
    target = Path(args.out)
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {args.out}: {exc.strerror}") from None
    outcome = build(args.out, Path("build"), [importer.TARGET], lower=False)
    for d in outcome.diagnostics:
        print(d.render(), file=sys.stderr)
    verdict = "it validates" if outcome.ok else "it does not validate yet: fix what is listed above"
    print(f"trainspec: wrote {args.out} from {args.job}; {verdict}", file=sys.stderr)
    return 0 if outcome.ok else 1


def schema(args: argparse.Namespace) -> int:
    """Print the JSON Schema of the spec (for editors: yaml-language-server). --base: the schema
    of a base that specs extend (every field optional, names and types checked)."""
    import json

    from .schema.model import Spec, base_json_schema

    print(json.dumps(base_json_schema() if args.base else Spec.model_json_schema(), indent=2, sort_keys=True))
    return 0


def run(args: argparse.Namespace) -> int:
    """Run a spec's job here, before paying for GPUs: nodes x processes local processes, each
    with exactly the environment the target platform would give it, on CPU with gloo."""
    from .local import LocalOptions, run_local

    from .compiler import target

    refusal = getattr(target(args.target), "LOCAL_REFUSAL", None)
    if refusal:  # before anything is read: a spec error here would mislead
        raise UsageError(refusal)
    parsed = {}
    for item in args.inputs:
        name, sep, path = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--input: expected NAME=PATH, got {item!r}")
        if not Path(path).exists():
            raise UsageError(f"--input {name}={path}: no such file or directory")
        parsed[name] = path
    options = LocalOptions(target=args.target, procs_per_node=args.procs_per_node, nodes=args.nodes,
                           launcher=args.launcher, inputs=parsed, timeout=args.timeout,
                           rendezvous_timeout=args.rendezvous_timeout, netns=args.netns, workdir=args.workdir,
                           sets=tuple(args.sets), variables=tuple(args.variables), keep=args.keep)
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
                              f"else {DEFAULT_TARGET}")

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
    sub.add_argument("--format", choices=["text", "json", "github"], default="text",
                     help="json: one document on stdout; github: GitHub Actions annotations, so each problem "
                          "shows on its line of the pull request (default: text on stderr)")
    overrides(sub)

    def out(sub: argparse.ArgumentParser, help: str) -> None:
        sub.add_argument("-o", "--out", default="build", help=f"{help} (default: build)")

    sub = command(compile_, "compile")
    paths(sub)
    targets(sub)
    out(sub, "output directory; files go to OUT/<name>/<target>/")
    strict(sub)
    sub.add_argument("--prune", action="store_true",
                     help="also remove output folders that trainspec wrote (recognised by their header) for specs "
                          "that are gone or no longer produce them; never anything else")
    overrides(sub)

    sub = command(check)
    paths(sub)
    out(sub, "the output directory that compile wrote, and that is committed")
    targets(sub)
    overrides(sub)

    def git_base(sub: argparse.ArgumentParser, what: str) -> None:
        sub.add_argument("--git", metavar="BASE", help=f"{what}; PATHS (default: the whole repository) limit "
                                                       "where specs are searched")

    def max_chars(sub: argparse.ArgumentParser, what: str, default: str) -> None:
        sub.add_argument("--max-chars", type=_max_chars, metavar="N",
                         help=f"cut the {what} to at most N characters (long diffs shortened, the jobs that "
                              f"do not fit named), saying where the whole {what} is; 0: never cut. Default: "
                              f"{default} for markdown (plan and diff markdown together stay under 60,000: one "
                              "GitHub comment), no limit for text; json is never cut")

    sub = command(plan)
    sub.add_argument("paths", nargs="*", metavar="SPEC|DIR", help="spec files, or folders to search")
    git_base(sub, "plan only the jobs whose compiled outputs change since the git revision BASE")
    sub.add_argument("--format", choices=["text", "markdown", "json"], default="text",
                     help="markdown for a pull-request comment, json for tools (default: text)")
    max_chars(sub, "plan", "24,000")
    out(sub, "where outputs go, for the paths in the plan")
    targets(sub)
    overrides(sub)

    sub = command(diff)
    sub.add_argument("paths", nargs="*", metavar="SPEC|DIR",
                     help="BASE.yaml HEAD.yaml; one SPEC with --set/--var; or, with --git, where to search")
    git_base(sub, "compare every spec with the git revision BASE (a branch, a tag, a commit)")
    sub.add_argument("--format", choices=["text", "markdown", "json"], default="text",
                     help="markdown for a pull-request comment, json for tools (default: text)")
    max_chars(sub, "diff", "35,000")
    out(sub, "the output directory, for the paths in diff headers")
    targets(sub)
    overrides(sub)

    sub = command(schema)
    sub.add_argument("--base", action="store_true",
                     help="the schema of a base (a file specs extend): every field optional, names and types checked")

    sub = command(import_, "import")
    sub.add_argument("job", metavar="JOB.yml", help="an Azure ML command job (the file `az ml job create` reads)")
    sub.add_argument("-o", "--out", metavar="SPEC", help="write the spec here and validate it (default: print it)")

    sub = command(skus)
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

    sub = command(run)
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
    return top


def main(argv: Optional[Sequence[str]] = None) -> None:
    argv = list(argv) if argv is not None else sys.argv[1:]
    top = parser()
    if not argv:
        top.print_help()  # bare `trainspec`: what it does and how to start
        sys.exit(0)
    args = top.parse_args(argv)  # exits 2 on a bad command line
    try:
        code = args.handler(args)
        sys.stdout.flush()
    except BrokenPipeError:
        _closed_pipe()
        code = 0
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


def _closed_pipe() -> None:
    """The reader went away (`trainspec plan x.yaml | head -1`): stop quietly with status 0, as
    `git log | head` does. Python would report the failed flush at exit: point stdout at
    /dev/null first (https://docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    main()
