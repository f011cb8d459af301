"""What `submit`, `status`, `logs` and `cancel` ask of a platform: one ``Scheduler`` per target
(``targets/<name>/submit.py``, its ``SCHEDULER`` class), each speaking through the platform's own
client (azure-ai-ml, kubernetes, Ray's job submission client, Slurm's commands, HPC Pack's REST
service) and answering in the words below. The command (commands/jobs.py) does the rest the same
way on every target: the job's name, finding it before submitting, waiting, following the logs,
the exit code.

    ===============================  ================================================================
    ``find(name)``                   the job of that name, running or finished, with the digest it
                                     carries (``Job.digest``), or None: what makes a second submit
                                     start nothing new
    ``submit(job_dir, name, digest)`` submit the compiled files in ``job_dir`` under ``name``, the
                                     full ``digest`` recorded with the job (a tag, an annotation,
                                     its comment, a custom property, its metadata: DIGEST_KEY)
    ``status(job)``                  its ``State`` now, with the platform's own word for it
    ``logs(job, cursor, all_ranks)`` the lines written since ``cursor`` (None: from the start), and
                                     the cursor to pass next time: rank 0's, or every node's
    ``cancel(job)``                  ask the platform to stop it; returns once it accepted
    ``by_id(id)``                    a job named by the platform's id (`status --id`)
    ===============================  ================================================================

A platform's refusal is a ``SubmitError``: one line that keeps the platform's own message, and
what to do. Nothing here waits: each call returns once the platform answered, within the client's
own timeout; commands/jobs.py owns every wait and its limit.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple


class State(str, enum.Enum):
    """Where a job is, in the same words on every target (each platform's own word is kept in
    ``Status.detail``)."""

    QUEUED = "queued"  # accepted; waiting for machines, an image, a queue's admission
    RUNNING = "running"  # started (preparing, running, finishing, being canceled)
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"
    TIMED_OUT = "timed-out"  # stopped at its time limit (the spec's `timeout:` or the platform's)

    @property
    def final(self) -> bool:
        return self in FINAL


FINAL = frozenset({State.COMPLETED, State.FAILED, State.CANCELED, State.TIMED_OUT})

# The exit code of submit --wait/--follow and status (docs/commands.md, "Exit codes"): one per
# final state, and one each for what is not a final state. 1 and 2 keep their meaning on every
# command: the spec is invalid (nothing was submitted), the command line is wrong.
EXIT_COMPLETED = 0
EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_NOT_SUBMITTED = 3  # not logged in, no workspace, quota, a refused job: the platform said no
EXIT_FAILED = 4
EXIT_CANCELED = 5
EXIT_TIMED_OUT = 6
EXIT_STILL_RUNNING = 7  # --max-wait passed, or status of a job that is not final: it goes on
EXIT_INTERRUPTED = 130  # Ctrl-C: trainspec stopped waiting; the job goes on
EXIT_CODES: Dict[State, int] = {State.COMPLETED: EXIT_COMPLETED, State.FAILED: EXIT_FAILED,
                                State.CANCELED: EXIT_CANCELED, State.TIMED_OUT: EXIT_TIMED_OUT,
                                State.QUEUED: EXIT_STILL_RUNNING, State.RUNNING: EXIT_STILL_RUNNING}
# several jobs: the exit code is the first of these that one of them has
EXIT_PRECEDENCE = (EXIT_NOT_SUBMITTED, EXIT_FAILED, EXIT_TIMED_OUT, EXIT_CANCELED, EXIT_INTERRUPTED,
                   EXIT_STILL_RUNNING, EXIT_COMPLETED)


def overall_exit(codes: Sequence[int]) -> int:
    """The exit code of a command over several jobs: the most serious of theirs."""
    for code in EXIT_PRECEDENCE:
        if code in codes:
            return code
    return EXIT_COMPLETED


@dataclass(frozen=True)
class Job:
    """A job on a platform, as trainspec submitted it."""

    target: str
    name: str  # the name trainspec gave it there: job_name(spec name, digest)
    id: str  # the platform's id: the Slurm job id, the Azure ML job name, namespace/name, the submission id
    where: str  # where to watch it: the Studio URL, `kubectl -n ml get trainjob x`, `squeue -j 12`, a URL
    extra: Mapping[str, str] = field(default_factory=dict)  # what the scheduler needs again (a cluster address)
    # the full digest of what was compiled, as the platform keeps it with the job (DIGEST_KEY); ""
    # when the job carries none: not submitted by trainspec, or by one from before it recorded it
    digest: str = ""


@dataclass(frozen=True)
class Status:
    state: State
    detail: str = ""  # the platform's own state and message: "FAILED (NonZeroExitCode 1:0)"


@dataclass(frozen=True)
class LogLine:
    node: str  # "0", "1", ... (a node's index), or the platform's name for where the line came from
    text: str


class SubmitError(Exception):
    """The platform refused, or cannot be reached: one line with its own message kept, and what to
    do (``hint``)."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message


class MissingClient(SubmitError):
    """The platform's client is not installed: the extra that brings it."""

    def __init__(self, target: str, extra: str, module: str) -> None:
        super().__init__(f"{target}: submitting needs {module}, which is not installed",
                         f"pip install 'trainspec[{extra}]'")


@dataclass(frozen=True)
class Context:
    """What a scheduler is given: where to submit (the command line's flags, the environment) and
    the compiled job's settings for its target, when the job comes from a spec."""

    settings: Any = None  # the spec's targets.<name> model (None with --id)
    spec_name: str = ""
    address: Optional[str] = None  # --address: a Ray dashboard, the HPC Pack head node's REST service
    workspace: Mapping[str, str] = field(default_factory=dict)  # Azure ML: subscription_id, resource_group, workspace
    env: Mapping[str, str] = field(default_factory=dict)  # the environment trainspec runs in
    submitting: bool = False  # find() for submit (may answer "not there yet") or for status/logs/cancel


class Scheduler:
    """A target's platform, as the job commands use it (see the module's docstring)."""

    target = ""
    extra: Optional[str] = None  # the pip extra with its client: `trainspec[<extra>]`

    def __init__(self, context: Context) -> None:
        self.context = context

    def find(self, name: str) -> Optional[Job]:
        raise NotImplementedError

    def submit(self, job_dir: Path, name: str, digest: str) -> Job:
        raise NotImplementedError

    def status(self, job: Job) -> Status:
        raise NotImplementedError

    def logs(self, job: Job, cursor: Any, all_ranks: bool) -> Tuple[List[LogLine], Any]:
        raise NotImplementedError

    def cancel(self, job: Job) -> None:
        raise NotImplementedError

    def by_id(self, id: str) -> Job:
        raise NotImplementedError

    def after(self, job: Job, status: Status) -> None:
        """Once the job is final and trainspec waited for it: what the spec asked for then (Ray:
        tear the cluster down unless keep_cluster). Nothing by default."""

    def close(self) -> None:
        """Release the client (connections, a cluster started for the job). Nothing by default."""


# --- the job's name --------------------------------------------------------------------------

# the key under which a platform keeps a job's full digest: an Azure ML tag, a Kubernetes
# annotation, an HPC Pack custom property, Ray job metadata (Slurm: the job's comment, DIGEST_KEY=<hex>)
DIGEST_KEY = "trainspec_digest"
DIGEST_CHARS = 10  # 40 bits: two different compiled jobs of one spec never share a name in practice
NAME_LIMIT = 63  # the shortest limit of the five: a Kubernetes object's name (DNS-1035 label)


def compiled_digest(files: Sequence[Tuple[str, bytes]]) -> str:
    """The sha256 of what was compiled for one target: each file's path and bytes, without the
    provenance (the header's version, spec path and spec hash are blanked by the caller). The
    same job compiled again, from the same spec or a renamed one, has the same digest; any change
    to what runs is a new one."""
    digest = hashlib.sha256()
    for path, data in sorted(files):
        digest.update(len(path).to_bytes(8, "big") + path.encode("utf-8"))
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


def job_name(spec_name: str, digest: str, limit: int = NAME_LIMIT) -> str:
    """The job's name on its platform: the spec's name, a dash, the first DIGEST_CHARS of the
    digest of what was compiled (`sft-h100-3f9a2c41d0`). A spec name too long for ``limit`` is
    cut (and a trailing - or _ dropped); the digest is never cut."""
    room = limit - DIGEST_CHARS - 1
    stem = spec_name[:room].rstrip("-_") or "job"
    return f"{stem}-{digest[:DIGEST_CHARS]}"
