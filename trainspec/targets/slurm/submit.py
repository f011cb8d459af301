"""`trainspec submit -t slurm`: the compiled job.sbatch through Slurm's own commands, run where the
user runs them (a login node: sbatch, squeue, scontrol, sacct, scancel on PATH, the cluster's
slurm.conf).

==========  =====================================================================================
submit      ``sbatch --parsable --job-name=<name> --comment=trainspec_digest=<digest>
            <job_dir>/job.sbatch`` in the current directory (the script's relative ``--output``
            is relative to where sbatch runs)
find        ``squeue --me --name=<name> --states=all`` (every job slurmctld still holds: running,
            and finished within MinJobAge), else ``sacct --name`` (the accounting database, when
            the cluster keeps one): the newest job of that name, its digest from its Comment
status      ``scontrol show job -o ID`` (JobState, Reason, ExitCode), else ``sacct -j ID``
logs        the job's output and error files (StdOut/StdErr), read from a byte offset; srun
            ``--label`` prefixes every task's line with its task id, so rank 0's lines (task 0)
            and each node's (task // tasks per node) are told apart. Only a file below the job's
            working folder (WorkDir: where sbatch ran) or the spec's absolute targets.slurm.logs
            is read, a part at a time without following a link (core/files.py read_below): the
            job owns those files, and one replaced by a link to /proc/self/environ is refused
cancel      ``scancel ID``
==========  =====================================================================================

Every command is bounded (COMMAND_TIMEOUT); a refusal is one line with Slurm's own message and a
hint (REFUSALS).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from trainspec.core.files import read_below
from trainspec.jobs.api import DIGEST_KEY, Job, LogLine, Scheduler, State, Status, SubmitError
from trainspec.targets.slurm.lower import ERROR, JOB_FILE, OUTPUT
from trainspec.targets.slurm.settings import NAME

COMMAND_TIMEOUT = 60  # s: slurmctld answers in MessageTimeout (10 s by default); a client retries a few times
READ_LIMIT = 4 << 20  # bytes of a log file read per call: the next call goes on from there
BATCH = "batch"  # where a line without srun's label comes from: the batch script itself (on node 0)

# Slurm's job states (squeue(1), "JOB STATE CODES") in the common words
STATES: Dict[str, State] = {
    **dict.fromkeys(("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD",
                     "SPECIAL_EXIT", "POWER_UP_NODE"), State.QUEUED),
    **dict.fromkeys(("RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "RESIZING", "STAGE_OUT"),
                    State.RUNNING),
    "COMPLETED": State.COMPLETED,
    **dict.fromkeys(("FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "PREEMPTED", "DEADLINE"), State.FAILED),
    **dict.fromkeys(("CANCELLED", "REVOKED"), State.CANCELED),
    "TIMEOUT": State.TIMED_OUT,
}

_CONTROLLER = ("slurmctld is unreachable from here: `scontrol ping` says why; run trainspec on a login node of "
               "the cluster (SLURM_CONF names its slurm.conf)")
# What Slurm says when it refuses (its messages, lower case), and what to do
REFUSALS: Sequence[Tuple[str, str]] = (
    ("invalid partition", "the partition does not exist on this cluster: `sinfo -s` lists them; "
                          "set targets.slurm.partition"),
    ("invalid account", "`sacctmgr show assoc user=$USER format=account,partition` lists the accounts you may "
                        "use; set targets.slurm.account"),
    ("invalid qos", "`sacctmgr show assoc user=$USER format=qos` lists the QOS you may use; set targets.slurm.qos"),
    ("accounting/qos policy", "the account's or QOS's limits refuse this job (nodes, GPUs, time, jobs at once): "
                              "`sacctmgr show qos` shows them; ask for less, or another account or qos"),
    ("requested node configuration is not available", "no node of the partition has what the job asks (GPUs of "
                                                      "that type, CPUs, memory, the constraint): "
                                                      "`sinfo -o '%P %D %G %c %m %f'` shows what there is"),
    ("node count specification invalid", "more nodes than the partition has: `sinfo -s`; lower resources.nodes "
                                         "or pick another partition"),
    ("time limit", "the partition's MaxTime is shorter: `sinfo -o '%P %l'`; lower the spec's timeout or "
                   "targets.slurm.time"),
    ("unable to contact slurm controller", _CONTROLLER),
    ("connection refused", _CONTROLLER),
    ("socket timed out", _CONTROLLER),
    ("zero bytes were transmitted", _CONTROLLER),
    ("could not establish a configuration source", _CONTROLLER),
)


def refusal(command: str, stderr: str) -> SubmitError:
    """One line: Slurm's own message (its `error:` lines, joined), and the hint for it."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()] or lines[-1:]
    message = "; ".join(re.sub(r"^\S+: error: ", "", line) for line in errors) or "failed without a message"
    lowered = message.lower()
    hint = next((hint for words, hint in REFUSALS if words in lowered), "")
    return SubmitError(f"{command}: {message}", hint)


def fields(line: str) -> Dict[str, str]:
    """`scontrol show job -o`'s one line as a mapping: Key=value pairs, a value running to the next
    key (a path may hold a space)."""
    keys = list(re.finditer(r"(?:^|\s)([A-Za-z][A-Za-z/:_]*)=", line))
    out = {}
    for here, after in zip(keys, keys[1:] + [None]):
        out[here.group(1)] = line[here.end():after.start() if after else len(line)].strip()
    return out


def status_of(word: str, exit_code: str = "", reason: str = "") -> Status:
    """Slurm's state word (`CANCELLED by 0`, `RUNNING`) as a Status keeping its own word, the exit
    code and the reason."""
    state = word.split()[0].rstrip("+") if word.strip() else "UNKNOWN"
    extras = [f"exit {exit_code}" if exit_code and exit_code != "0:0" else "",
              reason if reason and reason not in ("None", "(null)") else ""]
    detail = word.strip() + "".join(f", {extra}" for extra in extras if extra)
    return Status(STATES.get(state, State.RUNNING), detail)


def expand(pattern: str, name: str, job_id: str) -> str:
    """An sbatch filename pattern (`%x-%j.out`) for this job: the replacements trainspec's scripts
    use (%x the job's name, %j and %A its id, %% a percent sign)."""
    return re.sub(r"%(%|x|j|A)", lambda m: {"%": "%", "x": name, "j": job_id, "A": job_id}[m.group(1)], pattern)


def script_option(script: str, option: str) -> Optional[str]:
    """The value of ``#SBATCH --<option>=`` in a batch script (the last one, as sbatch reads it)."""
    found = re.findall(rf"^#SBATCH --{re.escape(option)}=(\S+)$", script, re.M)
    return found[-1] if found else None


def digest_in(comment: str) -> str:
    """The digest submit wrote in the job's comment (``--comment=trainspec_digest=<hex>``: what
    scontrol shows as Comment=, sacct as Comment with AccountingStoreFlags=job_comment), or ""."""
    key, _, value = comment.strip().partition("=")
    return value if key == DIGEST_KEY else ""


def label(line: str) -> Tuple[Optional[int], str]:
    """srun --label's task id and the line after it (`  3: text`), or (None, line): a line the batch
    script itself, or srun, wrote."""
    match = re.match(r"^ *(\d+): (.*)$", line, re.S)
    return (int(match.group(1)), match.group(2)) if match else (None, line)


class SlurmScheduler(Scheduler):
    target = NAME

    def __init__(self, context) -> None:
        super().__init__(context)
        self._final: set = set()  # ids seen in a final state: their last partial log line is complete

    # --- the commands -------------------------------------------------------------------------

    def _env(self) -> Mapping[str, str]:
        return self.context.env or os.environ

    def _run(self, argv: List[str]) -> subprocess.CompletedProcess:
        env = dict(self._env())
        program = shutil.which(argv[0], path=env.get("PATH"))
        if program is None:  # Slurm's client commands come together: without sbatch, none is there
            missing = "sbatch" if shutil.which("sbatch", path=env.get("PATH")) is None else argv[0]
            raise SubmitError(f"{missing} not found", "run trainspec submit on a login node of the cluster "
                                                      "(where Slurm's commands are on PATH)")
        try:
            return subprocess.run([program, *argv[1:]], capture_output=True, text=True, env=env,
                                  stdin=subprocess.DEVNULL, timeout=COMMAND_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise SubmitError(f"{argv[0]}: no answer within {COMMAND_TIMEOUT} s", _CONTROLLER) from None

    def _show(self, job_id: str) -> Optional[Dict[str, str]]:
        """scontrol's record of the job, or None when slurmctld no longer holds it."""
        done = self._run(["scontrol", "show", "job", "-o", job_id])
        if done.returncode != 0:
            if "invalid job id" in done.stderr.lower():
                return None
            raise refusal("scontrol", done.stderr)
        line = next((line for line in done.stdout.splitlines() if line.startswith("JobId=")), None)
        return fields(line) if line else None

    def _accounted(self, argv: List[str]) -> List[List[str]]:
        """sacct's rows (-P: |-separated), or none when the cluster keeps no accounting (sacct then
        fails: that is "unknown", never an error)."""
        done = self._run(["sacct", "-X", "-n", "-P", *argv])
        if done.returncode != 0:
            return []
        return [line.split("|") for line in done.stdout.splitlines() if line.strip()]

    # --- the job -------------------------------------------------------------------------------

    def _job(self, job_id: str, name: str, stdout: str, stderr: str, tasks_per_node: str, comment: str,
             workdir: str) -> Job:
        where = f"squeue -j {job_id}" + (f"; output: {stdout}" if stdout else "")
        return Job(NAME, name, job_id, where, {"stdout": stdout, "stderr": stderr, "tasks_per_node": tasks_per_node,
                                               "workdir": workdir}, digest_in(comment))

    def _from_record(self, record: Dict[str, str]) -> Job:
        nodes, tasks = record.get("NumNodes", "1").split("-")[0], record.get("NumTasks", "1")
        per_node = str(int(tasks) // int(nodes)) if tasks.isdigit() and nodes.isdigit() and int(nodes) else "1"
        return self._job(record["JobId"], record.get("JobName", ""), record.get("StdOut", ""),
                         record.get("StdErr", ""), per_node, record.get("Comment", ""), record.get("WorkDir", ""))

    def _derived(self, job_id: str, name: str, workdir: str, comment: str) -> Job:
        """A job slurmctld no longer holds (found in sacct): its files where the spec's
        targets.slurm.logs put them, under the folder it was submitted from."""
        folder = getattr(self.context.settings, "logs", None) or ""
        base = Path(workdir or ".") / folder
        out, err = (str(base / expand(pattern, name, job_id)) for pattern in (OUTPUT, ERROR))
        return self._job(job_id, name, out, err, "", comment, workdir)

    def submit(self, job_dir: Path, name: str, digest: str) -> Job:
        script = Path(job_dir).resolve() / JOB_FILE
        done = self._run(["sbatch", "--parsable", f"--job-name={name}", f"--comment={DIGEST_KEY}={digest}", str(script)])
        if done.returncode != 0:
            raise refusal("sbatch", done.stderr)
        last = (done.stdout.strip().splitlines() or [""])[-1]
        job_id = last.split(";")[0].strip()  # `jobid` or `jobid;cluster`
        if not job_id.isdigit():
            raise SubmitError(f"sbatch: printed no job id ({last!r})", "see `sbatch --parsable`'s output")
        text = script.read_text(encoding="utf-8")
        here = Path.cwd()  # where sbatch ran: a relative --output is relative to it
        out = expand(script_option(text, "output") or "slurm-%j.out", name, job_id)
        err = expand(script_option(text, "error") or out, name, job_id)
        return self._job(job_id, name, str(here / out), str(here / err), script_option(text, "ntasks-per-node") or "1",
                         f"{DIGEST_KEY}={digest}", str(here))

    def find(self, name: str) -> Optional[Job]:
        done = self._run(["squeue", "--me", f"--name={name}", "--states=all", "--noheader", "--format=%i"])
        if done.returncode != 0:
            raise refusal("squeue", done.stderr)
        ids = [word for word in done.stdout.split() if word.isdigit()]
        if ids:
            return self.by_id(max(ids, key=int))
        rows = [row for row in self._accounted([f"--name={name}", "--starttime=2000-01-01", "-o",
                                                "JobID,WorkDir,Comment"]) if len(row) >= 3 and row[0].isdigit()]
        if rows:
            job_id, workdir, comment = max(rows, key=lambda row: int(row[0]))[:3]
            record = self._show(job_id)
            return self._from_record(record) if record else self._derived(job_id, name, workdir, comment)
        return None

    def by_id(self, id: str) -> Job:
        if not id.isdigit():
            raise SubmitError(f"{id!r} is not a Slurm job id", "the number sbatch printed (`squeue --me` lists yours)")
        record = self._show(id)
        if record is not None:
            return self._from_record(record)
        rows = self._accounted(["-j", id, "-o", "JobID,JobName,WorkDir,Comment"])
        if rows and len(rows[0]) >= 4:
            return self._derived(id, rows[0][1], rows[0][2], rows[0][3])
        raise SubmitError(f"job {id}: slurmctld does not know it (finished more than MinJobAge ago, or never "
                          "submitted) and sacct has no record of it", "`sacct -j ID` needs the cluster's accounting")

    def status(self, job: Job) -> Status:
        record = self._show(job.id)
        if record is not None:
            status = status_of(record.get("JobState", ""), record.get("ExitCode", ""), record.get("Reason", ""))
        else:
            rows = self._accounted(["-j", job.id, "-o", "State,ExitCode"])
            if not rows:
                raise SubmitError(f"job {job.id}: slurmctld no longer holds it (it ended more than MinJobAge ago) "
                                  "and this cluster keeps no accounting (sacct)",
                                  f"its output is in {job.extra.get('stdout') or 'its output file'}")
            status = status_of(rows[0][0], rows[0][1] if len(rows[0]) > 1 else "")
        if status.state.final:
            self._final.add(job.id)
        return status

    def cancel(self, job: Job) -> None:
        done = self._run(["scancel", job.id])
        if done.returncode != 0:
            raise refusal("scancel", done.stderr)

    # --- logs ----------------------------------------------------------------------------------

    def logs(self, job: Job, cursor: Any, all_ranks: bool) -> Tuple[List[LogLine], Any]:
        """The lines of the job's output, then error file written since ``cursor`` (each file's
        byte offset): task 0's and the batch script's, or (``all_ranks``) every task's, as its node."""
        offsets: Dict[str, int] = dict(cursor or {})
        per_node = int(job.extra.get("tasks_per_node") or 0) or self._tasks_per_node(job)
        files = list(dict.fromkeys(path for path in (job.extra.get("stdout"), job.extra.get("stderr")) if path))
        out: List[LogLine] = []
        final: Optional[bool] = None
        for path in files:
            offset = offsets.get(path, 0)
            root, relative = self._below(job, path)
            try:
                data = read_below(root, relative, offset, READ_LIMIT)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise SubmitError(f"{path} is reached through a symbolic link (the job replaced its log or a "
                                      "folder on the way with one): not followed, not read",
                                      "the job writes its own log files: look at what it did to them") from None
                raise SubmitError(f"cannot read {path}: {exc.strerror}", "read the logs on a login node that "
                                  "mounts the folder the job was submitted from") from None
            if data is None:
                continue  # not started yet
            end = data.rfind(b"\n") + 1
            if end < len(data) and len(data) < READ_LIMIT:  # a last line without its newline yet
                if final is None:
                    final = job.id in self._final or self.status(job).state.final
                end = len(data) if final else end
            offsets[path] = offset + end
            for text in data[:end].decode("utf-8", "replace").splitlines():
                task, rest = label(text)
                if task is None:
                    out.append(LogLine(BATCH, text))
                elif all_ranks or task == 0:
                    out.append(LogLine(str(task // per_node), rest))
        return out, offsets

    def _below(self, job: Job, path: str) -> Tuple[str, str]:
        """(folder, path below it) for a log file of the job: below its working folder (where
        sbatch ran), or below the spec's targets.slurm.logs when that is absolute; else refused."""
        workdir = job.extra.get("workdir") or os.getcwd()
        logs = getattr(self.context.settings, "logs", None) or ""
        # the working folder as Slurm and as the file system spell it (/home may be a link to /data/home)
        for root in dict.fromkeys([workdir, os.path.realpath(workdir)] + ([logs] if logs.startswith("/") else [])):
            relative = os.path.relpath(path, root) if os.path.isabs(path) else os.path.normpath(path)
            if relative not in (".", "..") and not relative.startswith("../"):
                return root, relative
        raise SubmitError(f"{path} is not below the job's working folder {workdir}: not read",
                          "trainspec reads a job's logs only where it was submitted from (or the spec's "
                          "targets.slurm.logs); read that file yourself if you trust it")

    def _tasks_per_node(self, job: Job) -> int:
        record = self._show(job.id)
        per_node = self._from_record(record).extra["tasks_per_node"] if record else "1"
        return max(int(per_node), 1)


SCHEDULER = SlurmScheduler
