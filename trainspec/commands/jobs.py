"""`trainspec submit`, `status`, `logs` and `cancel`: the same steps on every target, each
platform reached through its ``Scheduler`` (jobs/api.py, ``targets/<name>/submit.py``).

    spec --build--> Artifact --name--> <spec name>-<digest> --find--> the job already there (carrying
                                                                 the full digest), followed
                                                               \\-> compiled now into .trainspec/jobs/,
                                                                   submitted with its digest
         --wait--> poll status (and, --follow, the logs) until a final state or --max-wait

A job's name on its platform is the spec's name and the digest of what was compiled for that
target (jobs/api.py job_name), so the same compiled job is never submitted twice: submit finds it
first. A job of that name that does not carry the full digest is not this job (made by hand, or
by anyone who can create jobs there and read the spec): an error, never followed. What is
submitted is what the spec compiles to now: the staging folder is written at every submit, and
one that git tracks or that is a link is refused (docs/security.md). Every wait has a limit;
Ctrl-C stops the waiting, never the job.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from trainspec.registry.build import Outcome, build_all, target as target_of
from trainspec.compiler.base import Artifact
from trainspec.core import records
from trainspec.jobs import api
from trainspec.jobs.api import Context, Job, Scheduler, State, Status, SubmitError
from trainspec.review.naming import platform_job

STAGE = Path(".trainspec") / "jobs"  # where submit compiles a job without --out: <job name>/<target>/
QUEUE_ALLOWANCE = 3600  # the default --max-wait: the spec's timeout and this long in a queue
NO_TIMEOUT_WAIT = 72 * 3600  # ... or this, for a spec without a timeout
POLL_FIRST, POLL_MOST = 2.0, 30.0  # seconds between polls: from the first, growing to the most


@dataclass
class Tracked:
    """One job of the command: where it comes from, and what is known of it."""

    spec: str  # the spec as given on the command line (or the --id)
    target: str
    name: str  # the platform job name
    digest: str = ""  # the full digest of what was compiled (none with --id)
    job_dir: Optional[Path] = None
    limit: Optional[int] = None  # the spec's timeout, seconds
    job: Optional[Job] = None
    how: str = ""  # "submitted", "found" (already there), "" (status/logs/cancel)
    status: Optional[Status] = None
    error: Optional[SubmitError] = None
    cursor: Any = None
    scheduler: Optional[Scheduler] = None
    failures: int = 0  # status calls refused in a row
    log_errors: set = field(default_factory=set)  # each logs error is said once

    @property
    def exit(self) -> int:
        if self.error is not None or self.job is None:
            return api.EXIT_NOT_SUBMITTED
        if self.status is None:
            return api.EXIT_STILL_RUNNING
        return api.EXIT_CODES[self.status.state]

    def label(self) -> str:
        return f"{self.name} on {self.target}"


@dataclass
class Options:
    """The command line of the job commands (trainspec/cli/jobs.py builds it)."""

    targets: Sequence[str] = ()
    out: Optional[str] = None  # take the committed outputs there (refused unless `check` passes)
    sets: Sequence[str] = ()
    variables: Sequence[str] = ()
    address: Optional[str] = None
    workspace: Dict[str, str] = field(default_factory=dict)
    wait: bool = False
    follow: bool = False
    all_ranks: bool = False
    max_wait: Optional[float] = None  # seconds; None: from the specs' timeouts
    fmt: str = "text"
    summary: Optional[str] = None  # a file to append a markdown table of the jobs to ($GITHUB_STEP_SUMMARY)
    job_id: Optional[str] = None  # status/logs/cancel --id
    submitting: bool = False  # the command is submit


class Printer:
    """Where the command's lines go: stdout for text; with --format json, stdout holds only the
    final document and the lines go to stderr.

    What a job prints is data: its log lines, its platform's state words and messages, even its
    name (a Slurm job can rename itself) reach a terminal and a CI log through here, so every
    line is ``shown_line`` (core/diagnostics.py): control and invisible characters escaped
    (``\\x1b``, ``\\u200b``), and a line GitHub would run as a workflow command
    (``::add-mask::``, ``::stop-commands::``, ``::error file=...``) prefixed so it is text."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt

    def say(self, line: str) -> None:
        print(_shown(line), file=sys.stdout if self.fmt == "text" else sys.stderr, flush=True)

    def error(self, line: str) -> None:
        print(_shown(f"trainspec: error: {line}"), file=sys.stderr, flush=True)


def _shown(text: str) -> str:
    """Each line of ``text`` (one, but for a committed output's finding with its hunk) as data."""
    from trainspec.core.diagnostics import shown_line

    return "\n".join(shown_line(line) for line in text.split("\n"))


# --- which jobs --------------------------------------------------------------------------------

def scheduler_for(target: str, context: Context) -> Scheduler:
    """The target's Scheduler (targets/<name>/submit.py), or SubmitError when it has none."""
    try:
        module = importlib.import_module(f"trainspec.targets.{target}.submit")
    except ModuleNotFoundError as exc:
        if exc.name != f"trainspec.targets.{target}.submit":
            raise
        raise SubmitError(f"{target}: trainspec cannot submit to this target yet",
                          "submit the compiled files with the platform's own command (trainspec compile prints it)")
    return module.SCHEDULER(context)


def context_for(outcome: Optional[Outcome], target: str, options: Options, submitting: bool = False) -> Context:
    import os

    settings = getattr(outcome.valid.spec.targets, target, None) if outcome and outcome.valid else None
    return Context(settings=settings, spec_name=outcome.valid.name if outcome and outcome.valid else "",
                   address=options.address, workspace=dict(options.workspace), env=dict(os.environ),
                   submitting=submitting)


def this_job(job: Job, digest: str, target: str, outcome: str = "nothing submitted") -> Job:
    """``job`` when it carries ``digest``: the job trainspec submitted from this compiled job.
    Else a SubmitError: a job of the same name without it (or with another) was made by hand, by a
    trainspec from before the digest was recorded, or by anyone who can create jobs on the
    platform and read the spec (the name is the one `plan` prints); it is never followed, read or
    canceled as this one."""
    if job.digest == digest:
        return job
    carries = f"the digest {job.digest}" if job.digest else f"no {api.DIGEST_KEY}"
    raise SubmitError(f"{target}: a job named {job.name} is already there ({job.id}; {job.where}) but it is not this "
                      f"job: it carries {carries}, not {digest}; {outcome}",
                      "trainspec did not submit it from this spec: ask who made it; to submit this job anyway, "
                      "give the spec another name")


def what_submit_does(outcome: Outcome, artifact: Artifact, options: Options) -> str:
    """`plan --submitted`: ask the platform whether this compiled job is there (new, or already
    submitted and in which state), as submit would."""
    name, digest = platform_job(outcome, artifact)
    scheduler = None
    try:
        scheduler = scheduler_for(artifact.target, context_for(outcome, artifact.target, options))
        job = scheduler.find(name)
        if job is None:
            return "new: submit creates it"
        if job.digest != digest:
            return (f"refused: a job of this name is there ({job.id}) without this job's digest: submit says so "
                    "and starts nothing")
        state = scheduler.status(job)
        return f"already submitted ({job.id}), {_state_text(state)}: submit follows it and starts nothing"
    except SubmitError as exc:
        return f"unknown: {exc}"
    finally:
        if scheduler is not None:
            scheduler.close()


def prepare(files: Sequence[str], options: Options, printer: Printer,
            listed: Optional[Dict[str, List[str]]] = None) -> Tuple[List[Tuple[Outcome, Artifact]], int]:
    """The compiled jobs to act on, each (outcome, artifact); and 0, or the exit code when the
    specs are invalid (1) or, with --out, the committed outputs are not what they compile to (1).
    ``listed``: the targets of each spec that a plan listed (--plan), narrowed by -t."""
    from trainspec.registry.build import build, claim_names

    out = Path(options.out) if options.out else STAGE
    if listed is None:
        outcomes = build_all(files, out, options.targets or None, sets=options.sets, variables=options.variables)
    else:
        outcomes = [build(f, out, [t for t in listed[f] if not options.targets or t in options.targets],
                          sets=options.sets, variables=options.variables) for f in files]
        claim_names(outcomes)
    bad = [o for o in outcomes if not o.ok]
    if bad:
        found = [d for o in bad for d in o.diagnostics]
        for diagnostic in found:
            print(diagnostic.render(), file=sys.stderr)
        errors = sum(d.is_error for d in found)
        printer.error(f"{errors} error(s) in {len(bad)} spec(s); " + ("nothing submitted" if listed is not None
                                                                      or options.submitting else "nothing asked"))
        return [], api.EXIT_INVALID
    if options.submitting and not options.out:
        from trainspec.review.check import staging_problems

        problems = staging_problems()
        if problems:
            for problem in problems:
                printer.error(problem.render())
            printer.error(f"submit compiles every job into {STAGE}/ and will not use this one; nothing submitted")
            return [], api.EXIT_INVALID
    if options.out:
        from trainspec.review.check import check_outputs

        def fix(specs, prune):
            import shlex

            return shlex.join(["trainspec", "compile", *(specs or files), "-o", options.out])

        findings = check_outputs(outcomes, out, fix, options.targets)
        findings = [f for f in findings if f.kind not in ("orphaned", "foreign")]  # other specs' business
        if findings:
            for finding in findings:
                printer.error(finding.render())
            printer.error(f"{len(findings)} committed output(s) in {options.out} are not what their specs compile "
                          "to; nothing submitted")
            return [], api.EXIT_INVALID
    return [(o, a) for o in outcomes for a in o.artifacts], 0


def job_folder(outcome: Outcome, artifact: Artifact, options: Options, name: str) -> Path:
    """The compiled job's folder: the committed one (--out, compared byte for byte by prepare), or
    .trainspec/jobs/<job name>/<target>/ written now with what the spec compiles to. Whatever was
    there (a folder of that name a pull request brought, a hand edit) is replaced; a folder that
    holds exactly these files already is kept as it is (a Slurm or HPC Pack job of this name
    reads its files while it runs, and they are the same). A target whose job would read its code
    from the working tree when it starts (Target.STAGES_CODE: Slurm) gets a copy of the code folder
    beside its files, under the job's own name: what runs is what was submitted, whatever the
    repository becomes while the job waits. With --out the committed job runs, and its code is
    the repository's as the job finds it."""
    from trainspec.compiler.base import code_copy
    from trainspec.compiler.write import target_dir, write_all

    if options.out:
        return target_dir(Path(options.out), artifact)
    staged = records.replace(artifact, name=name)
    copy_into = target_of(artifact.target).STAGES_CODE
    if copy_into:  # the job runs this copy, named by its digest: an edit or a checkout after submit changes nothing
        staged = records.replace(staged, files=(*staged.files, *code_copy(outcome.valid, copy_into)))
    try:
        _ignored_by_git(STAGE.parent)
        [(folder, _)] = write_all(STAGE, [staged])
    except OSError as exc:
        where = exc.filename or target_dir(STAGE, staged)
        raise SubmitError(f"cannot write the job into {where}: {exc.strerror or exc}",
                          f"{STAGE}/ is trainspec's own: remove it (rm -r {STAGE.parent}) and submit again") from None
    return folder


def _ignored_by_git(folder: Path) -> None:
    """``folder/.gitignore`` saying ``*``, made once: trainspec's own folder (the staged jobs, the
    folders Slurm jobs start in) never shows in ``git status`` nor is committed by ``git add -A``.
    Never written through a link (prepare refuses a staging folder that is one)."""
    import os

    folder.mkdir(exist_ok=True)
    try:
        fd = os.open(folder / ".gitignore", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as handle:
        handle.write("# trainspec's own: the jobs submit staged, the folders they ran in\n*\n")


# --- submit --------------------------------------------------------------------------------------

def submit(files: Sequence[str], options: Options, listed: Optional[Dict[str, List[str]]] = None) -> int:
    options = replace(options, submitting=True)
    printer = Printer(options.fmt)
    prepared, code = prepare(files, options, printer, listed)
    if code:
        return code
    if not prepared:
        printer.error("no job to submit")
        return api.EXIT_INVALID
    tracked: List[Tracked] = []
    try:
        for outcome, artifact in prepared:
            name, digest = platform_job(outcome, artifact)
            item = Tracked(outcome.file, artifact.target, name, digest, limit=outcome.valid.spec.timeout)
            tracked.append(item)
            try:
                item.scheduler = scheduler_for(artifact.target, context_for(outcome, artifact.target, options,
                                                                            submitting=True))
                found = item.scheduler.find(item.name)
                if found is not None:
                    item.job = this_job(found, item.digest, item.target)
                    item.how = "found"
                    printer.say(f"{item.label()}: already submitted ({item.job.id}), not submitted again; "
                                f"watch: {item.job.where}")
                else:
                    item.job_dir = job_folder(outcome, artifact, options, item.name)
                    # the job submit made, or one of this name another submit made meanwhile: this job only
                    item.job = this_job(item.scheduler.submit(item.job_dir, item.name, item.digest), item.digest,
                                        item.target)
                    item.how = "submitted"
                    printer.say(f"{item.label()}: submitted ({item.job.id}); watch: {item.job.where}")
            except SubmitError as exc:
                item.error = exc
                printer.error(f"{item.label()}: {_own(item, exc)}")
        if options.wait or options.follow:
            waiting = [t for t in tracked if t.job is not None]
            wait_for(waiting, options, printer)
            for item in waiting:
                if item.status is not None and item.status.state.final:
                    _after(item, printer)
        else:
            for item in tracked:
                if item.job is not None:  # the state for --format json; submitted is the outcome
                    _quiet_status(item)
        return finish(tracked, options, printer, waited=options.wait or options.follow)
    finally:
        for item in tracked:
            if item.scheduler is not None:
                item.scheduler.close()


def _after(item: Tracked, printer: Printer) -> None:
    try:
        item.scheduler.after(item.job, item.status)
    except SubmitError as exc:
        printer.error(f"{item.label()}: {_own(item, exc)}")


def default_wait(tracked: Iterable[Tracked]) -> float:
    limits = [t.limit for t in tracked]
    if not limits or any(limit is None for limit in limits):
        return NO_TIMEOUT_WAIT
    return max(limits) + QUEUE_ALLOWANCE


def poll_interval(env: Optional[Dict[str, str]] = None) -> Tuple[float, float]:
    """(first, most) seconds between polls; TRAINSPEC_POLL_SECONDS sets the most (and caps the first)."""
    import os

    text = (env if env is not None else os.environ).get("TRAINSPEC_POLL_SECONDS")
    try:
        most = float(text) if text else POLL_MOST
    except ValueError:
        most = POLL_MOST
    most = min(max(most, 0.05), 600.0)
    return min(POLL_FIRST, most), most


def wait_for(tracked: Sequence[Tracked], options: Options, printer: Printer) -> None:
    """Poll every job until each is final or --max-wait has passed; with --follow, print the logs
    as they come. Ctrl-C: stop waiting, say how to cancel, leave every job running."""
    limit = options.max_wait if options.max_wait is not None else default_wait(tracked)
    deadline = time.monotonic() + limit
    first, most = poll_interval()
    interval = first
    many = len(tracked) > 1
    try:
        while True:
            open_ = [t for t in tracked if not (t.status and t.status.state.final) and t.error is None]
            for item in open_:
                if options.follow:
                    _print_logs(item, options, printer, many)
                _poll_status(item, printer, patient=True)
                if options.follow and item.status and item.status.state.final:
                    _print_logs(item, options, printer, many)  # what was written before it ended
            if not [t for t in tracked if not (t.status and t.status.state.final) and t.error is None]:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                for item in tracked:
                    if item.status and not item.status.state.final:
                        printer.say(f"{item.label()}: still {item.status.state.value} after --max-wait "
                                    f"{_duration(limit)}; not waiting longer (it goes on)")
                return
            time.sleep(min(interval, left))
            interval = min(interval * 1.5, most)
    except KeyboardInterrupt:
        for item in tracked:
            if item.job is not None and not (item.status and item.status.state.final):
                item.status = item.status or Status(State.QUEUED)
                printer.say(f"{item.label()}: stopped waiting; the job goes on. Cancel it with: "
                            f"{job_command(item, 'cancel')}")
        raise Interrupted() from None


class Interrupted(Exception):
    """Ctrl-C while waiting: the command ends with EXIT_INTERRUPTED."""


def job_command(item: Tracked, verb: str, *more: str) -> str:
    """The command line that acts on this job by its platform's id (`cancel` stops it, `status
    --wait` waits for a job trainspec stopped waiting for)."""
    import shlex

    if item.job is None:
        return ""
    return shlex.join(["trainspec", verb, "-t", item.target, "--id", item.job.id, *more])


LOST_AFTER = 5  # consecutive failed polls before a wait gives up on a job (a blip is not an outcome)


def _poll_status(item: Tracked, printer: Printer, quiet: bool = False, patient: bool = False) -> None:
    """Ask for the job's state; print it when it changed (unless ``quiet``). A refusal is the
    job's error at once, or (``patient``, while waiting) after LOST_AFTER in a row."""
    try:
        status = item.scheduler.status(item.job)
    except SubmitError as exc:
        item.failures += 1
        if patient and item.failures < LOST_AFTER:
            if item.failures == 1:
                printer.error(f"{item.label()}: {exc}; asking again")
            return
        item.error = SubmitError(f"lost track of the job: {exc.message}" if patient else exc.message, exc.hint)
        printer.error(f"{item.label()}: {_own(item, item.error)}")
        return
    item.failures = 0
    changed = item.status is None or (status.state, status.detail) != (item.status.state, item.status.detail)
    item.status = status
    if changed and not quiet:
        printer.say(f"{item.label()}: {_state_text(status)}")


def _own(item: Tracked, exc: SubmitError) -> str:
    """A scheduler's message after the job's label ("x-3f9a on slurm: "), without its target's name
    said twice."""
    text = str(exc)
    return text[len(item.target) + 2:] if text.startswith(f"{item.target}: ") else text


def _quiet_status(item: Tracked) -> None:
    try:
        item.status = item.scheduler.status(item.job)
    except SubmitError:
        item.status = None


def _state_text(status: Status) -> str:
    return status.state.value + (f" ({status.detail})" if status.detail else "")


def _print_logs(item: Tracked, options: Options, printer: Printer, many: bool) -> None:
    try:
        lines, item.cursor = item.scheduler.logs(item.job, item.cursor, options.all_ranks)
    except SubmitError as exc:
        if str(exc) not in item.log_errors:
            item.log_errors.add(str(exc))
            printer.error(f"{item.label()}: logs: {exc}")
        return
    for line in lines:
        prefix = (f"[{item.name}/{item.target}] " if many else "") + (f"[node {line.node}] " if options.all_ranks else "")
        printer.say(prefix + line.text)


def _duration(seconds: float) -> str:
    from trainspec.core.fields import duration_text

    return duration_text(max(int(seconds), 1))


def finish(tracked: Sequence[Tracked], options: Options, printer: Printer, waited: bool) -> int:
    """The closing lines (json: the document), the summary file, and the exit code."""
    codes = []
    for item in tracked:
        code = item.exit
        if not waited and code == api.EXIT_STILL_RUNNING:
            code = api.EXIT_COMPLETED  # submitted without --wait: submitting was the work
        codes.append(code)
    overall = api.overall_exit(codes)
    if options.fmt == "json":
        document = json.dumps({"jobs": [_json(t, c) for t, c in zip(tracked, codes)], "exit": overall}, indent=2)
        # JSON escapes every control character; a `##[` in a string (a job's state word) is the
        # one thing a CI runner would still obey, anywhere in a line: the same data as \u005b
        print(document.replace("##[", "##\\u005b"))
    elif waited:
        for item in tracked:
            if item.status is not None:
                printer.say(f"{item.label()}: {_state_text(item.status)}, exit {item.exit}")
    if options.summary:
        _write_summary(Path(options.summary), tracked, printer, waited)
    return overall


def _json(item: Tracked, code: int) -> Dict[str, Any]:
    return {"spec": item.spec, "target": item.target, "name": item.name,
            "id": item.job.id if item.job else None, "where": item.job.where if item.job else None,
            "submitted": item.how or None,
            "state": item.status.state.value if item.status else None,
            "detail": item.status.detail if item.status else None,
            "error": str(item.error) if item.error else None, "exit": code}


def _write_summary(path: Path, tracked: Sequence[Tracked], printer: Printer, waited: bool = False) -> None:
    """A markdown table of the jobs, appended (GitHub's job summary, $GITHUB_STEP_SUMMARY): every
    value through core/markdown, so a spec's words render as text. After a wait that --max-wait
    ended (CI's runner has a limit, a training job may run longer), a line under it says which
    jobs go on and the command that follows each."""
    from trainspec.core.markdown import cell_code, code, text

    rows = ["### trainspec submit", "", "| job | target | | state | where |", "|---|---|---|---|---|"]
    for item in tracked:
        state = (f"could not submit: {item.error}" if item.error else
                 _state_text(item.status) if item.status else "submitted")
        where = item.job.where if item.job else ""
        link = where if where.startswith("https://") and " " not in where else ""
        rows.append("| " + " | ".join([cell_code(item.name), cell_code(item.target), text(item.how or ""),
                                       text(state), f"[{text(where)}]({link})" if link else cell_code(where)]) + " |")
    going = [t for t in tracked if t.job is not None and t.error is None and t.status and not t.status.state.final]
    if waited and going:
        follow = ", ".join(code(job_command(t, "status", "--wait")) for t in going)
        rows += ["", text(f"{len(going)} job(s) still running when trainspec stopped waiting (--max-wait); they go "
                          "on, nothing was canceled. Follow them with: ") + follow]
    try:
        with path.open("a", encoding="utf-8") as handle:
            handle.write("\n".join(rows) + "\n\n")
    except OSError as exc:
        printer.error(f"cannot write the summary to {path}: {exc.strerror}")


# --- status, logs, cancel ------------------------------------------------------------------------

def existing(files: Sequence[str], options: Options, printer: Printer) -> Tuple[List[Tracked], int]:
    """The jobs that status/logs/cancel act on: named by --id (with -t), or found from each spec
    and target by the name submit gave them. A spec whose job is not there is said, exit 3."""
    if options.job_id:
        target = options.targets[0]
        item = Tracked(options.job_id, target, options.job_id)
        try:
            item.scheduler = scheduler_for(target, context_for(None, target, options))
            item.job = item.scheduler.by_id(options.job_id)
            item.name = item.job.name or item.name
        except SubmitError as exc:
            item.error = exc
            printer.error(f"{options.job_id} on {target}: {exc}")
        return [item], 0
    prepared, code = prepare(files, replace(options, out=options.out), printer)
    if code:
        return [], code
    found: List[Tracked] = []
    for outcome, artifact in prepared:
        name, digest = platform_job(outcome, artifact)
        item = Tracked(outcome.file, artifact.target, name, digest, limit=outcome.valid.spec.timeout)
        found.append(item)
        try:
            item.scheduler = scheduler_for(artifact.target, context_for(outcome, artifact.target, options))
            job = item.scheduler.find(item.name)
            if job is not None:
                job = this_job(job, item.digest, item.target, "not read, nor canceled")
            item.job = job
            if item.job is None:
                item.error = SubmitError("not submitted (no job of this name on the platform)",
                                         f"submit it: trainspec submit {outcome.file} -t {artifact.target}")
                printer.error(f"{item.label()}: {_own(item, item.error)}")
        except SubmitError as exc:
            item.error = exc
            printer.error(f"{item.label()}: {_own(item, exc)}")
    return found, 0


def _on_existing(files: Sequence[str], options: Options, act) -> int:
    """Find the jobs (existing) and ``act(tracked, printer)`` on them; every client is closed."""
    printer = Printer(options.fmt)
    tracked, code = existing(files, options, printer)
    try:
        return code or act(tracked, printer)
    finally:
        _close(tracked)


def status(files: Sequence[str], options: Options) -> int:
    def act(tracked: List[Tracked], printer: Printer) -> int:
        for item in tracked:
            if item.job is not None:
                _poll_status(item, printer, quiet=True)
                if item.status is not None and options.fmt == "text":
                    printer.say(f"{item.label()}: {_state_text(item.status)} ({item.job.id}); watch: {item.job.where}")
        if options.wait:
            wait_for(_live(tracked), options, printer)
        return finish(tracked, options, printer, waited=True)
    return _on_existing(files, options, act)


def logs(files: Sequence[str], options: Options) -> int:
    def act(tracked: List[Tracked], printer: Printer) -> int:
        live = _live(tracked)
        if options.follow:
            wait_for(live, replace(options, follow=True), printer)
            return api.overall_exit([t.exit for t in tracked])
        for item in live:
            _print_logs(item, options, printer, len(live) > 1)
        return api.overall_exit([api.EXIT_NOT_SUBMITTED if t.job is None or t.error else 0 for t in tracked])
    return _on_existing(files, options, act)


def cancel(files: Sequence[str], options: Options) -> int:
    def act(tracked: List[Tracked], printer: Printer) -> int:
        codes = []
        for item in tracked:
            if item.job is None or item.error is not None:
                codes.append(api.EXIT_NOT_SUBMITTED)
                continue
            try:
                _poll_status(item, printer, quiet=True)
                if item.status is not None and item.status.state.final:
                    printer.say(f"{item.label()}: already {_state_text(item.status)}; nothing to cancel")
                else:
                    item.scheduler.cancel(item.job)
                    printer.say(f"{item.label()}: cancel requested ({item.job.id})")
                codes.append(api.EXIT_COMPLETED)
            except SubmitError as exc:
                printer.error(f"{item.label()}: {_own(item, exc)}")
                codes.append(api.EXIT_NOT_SUBMITTED)
        if options.wait:
            wait_for(_live(tracked), options, printer)
        return api.overall_exit(codes)
    return _on_existing(files, options, act)


def _live(tracked: Sequence[Tracked]) -> List[Tracked]:
    return [t for t in tracked if t.job is not None and t.error is None]


def _close(tracked: Sequence[Tracked]) -> None:
    for item in tracked:
        if item.scheduler is not None:
            item.scheduler.close()
