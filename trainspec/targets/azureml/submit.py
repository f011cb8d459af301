"""`trainspec submit -t azureml`: the compiled job.yml through azure-ai-ml's ``MLClient`` (the
``trainspec[azureml]`` extra), as ``az ml job create --file job.yml --name <name>`` would.

    find     jobs.get(name); None when Azure ML has no job of that name; the job's digest is its
             tag trainspec_digest (api.DIGEST_KEY)
    submit   load_job(job.yml), name = the job's name, the digest tag set, jobs.create_or_update
             (code, environment and input files are uploaded by azure-ai-ml itself, as the CLI does)
    status   jobs.get(name).status; the run history's error for a job that did not complete
    logs     the run history's log files (name -> SAS URL), what jobs.stream reads; each file is
             downloaded once per call and only its lines beyond the cursor are returned
    cancel   jobs.begin_cancel(name): returns once Azure ML accepted it (the job goes
             CancelRequested -> Canceled)

Nothing here waits for the job: jobs.stream is never called (it blocks until the job ends).
azure-ai-ml and azure-identity are imported inside the methods only: compiling never needs them.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from trainspec.jobs import api
from trainspec.jobs.api import Job, LogLine, State, Status, SubmitError
from trainspec.targets.azureml.lower import JOB_FILE

NAME = "azureml"

STATES = {
    "NotStarted": State.QUEUED, "Queued": State.QUEUED, "Preparing": State.QUEUED,
    "Provisioning": State.QUEUED, "Starting": State.QUEUED,
    "Running": State.RUNNING, "Finalizing": State.RUNNING, "CancelRequested": State.RUNNING,
    "NotResponding": State.RUNNING, "Paused": State.RUNNING,
    "Completed": State.COMPLETED, "Failed": State.FAILED, "Canceled": State.CANCELED,
}

# the log files jobs.stream reads (azure.ai.ml.constants JobLogPattern): the common runtime's
# user_logs/std_log*.txt, else the legacy azureml-logs/NN_*.txt
USER_LOG = re.compile(r"user_logs/std_log.*\.txt$")
LEGACY_LOG = re.compile(r"azureml-logs/\d{2}.+\.txt$")
# which process or node a log file is: std_log_process_3.txt, std_log_node_1_rank_2.txt,
# 70_driver_log_0.txt, 70_driver_log_worker_1.txt
FILE_RANK = re.compile(r"(?:process|rank|worker|log)_(\d+)\.txt$")

# what Azure ML says, and what to do (submit.md §4): matched on the error's code and message
QUOTA = ("JobNodeCountExceedsCoreQuota", "ClusterMinNodesExceedCoreQuota", "exceeding quota limits",
         "quota of", "QuotaExceeded")
NO_COMPUTE = ("Unknown compute target", "ComputeNotFound")
IMAGE_PULL = ("FailedPullingImage", "AcrRefreshTokenRetrievalError", "Unable to pull docker image",
              "ImagePullBackOff")
TIMEOUT = ("exceeded the timeout", "exceeded its timeout", "max_run_duration", "MaxRunDuration",
           "JobTimeout", "RUN_TIMEOUT", "timeout limit")
LOGIN_HINT = ("log in: `az login` (or set AZURE_CLIENT_ID, AZURE_TENANT_ID and AZURE_CLIENT_SECRET, "
              "or AZURE_FEDERATED_TOKEN_FILE for OIDC in CI)")
MESSAGE_LIMIT = 500  # characters of Azure's own message kept on the one line


class AzureMLScheduler(api.Scheduler):
    target = NAME
    extra = NAME

    def __init__(self, context: api.Context) -> None:
        super().__init__(context)
        self._ml = None
        self._levels: Dict[str, int] = {}

    # --- the client ------------------------------------------------------------------------------

    def client(self):
        if self._ml is not None:
            return self._ml
        try:
            from azure.ai.ml import MLClient
            from azure.identity import DefaultAzureCredential
        except ImportError:
            raise api.MissingClient(NAME, NAME, "azure-ai-ml") from None
        self._levels = _quiet()
        credential = DefaultAzureCredential()
        workspace = self.workspace()
        if len(workspace) < 3:
            workspace = self._from_config(MLClient, credential, workspace)
        self._ml = MLClient(credential, subscription_id=workspace["subscription_id"],
                            resource_group_name=workspace["resource_group"],
                            workspace_name=workspace["workspace"])
        return self._ml

    def workspace(self) -> Dict[str, str]:
        """The workspace from the flags, else AZUREML_SUBSCRIPTION_ID/RESOURCE_GROUP/WORKSPACE:
        the parts known (config.json fills the rest, see _from_config)."""
        env = self.context.env
        known = {}
        for key, variable in WORKSPACE_VARIABLES.items():
            value = self.context.workspace.get(key) or env.get(variable)
            if value:
                known[key] = value
        return known

    def _from_config(self, client_class, credential, known: Dict[str, str]) -> Dict[str, str]:
        """What MLClient.from_config() finds (config.json here or in a parent folder) fills the
        parts not given. MLClient holds the string 'None' for a part it lacks: checked here."""
        found: Dict[str, str] = {}
        try:
            config = client_class.from_config(credential)
            found = {"subscription_id": config.subscription_id, "resource_group": config.resource_group_name,
                     "workspace": config.workspace_name}
        except Exception:  # no config.json: the parts missing are said below
            pass
        workspace = {k: v for k, v in found.items() if v and v != "None"}
        workspace.update(known)
        missing = [k for k in WORKSPACE_VARIABLES if k not in workspace]
        if missing:
            flags = ", ".join(f"--{k.replace('_id', '').replace('_', '-')} or {WORKSPACE_VARIABLES[k]}"
                              for k in missing)
            parts = " and ".join(k.replace("_", " ") for k in missing)
            raise SubmitError(f"azureml: no workspace: the {parts} {'is' if len(missing) == 1 else 'are'} not known",
                              f"give {flags}, or write config.json (`az ml workspace show` has the values)")
        return workspace

    def close(self) -> None:
        for name, level in self._levels.items():
            logging.getLogger(name).setLevel(level)
        self._levels = {}
        if self._ml is not None:
            try:
                self._ml.close()
            except Exception:  # closing an idle client: nothing worth a message
                pass
            self._ml = None

    # --- the job ---------------------------------------------------------------------------------

    def find(self, name: str) -> Optional[Job]:
        remote = self._get(name)
        return None if remote is None else self._job(remote)

    def by_id(self, id: str) -> Job:
        remote = self._get(id)
        if remote is None:
            raise SubmitError(f"azureml: no job named {id!r} in this workspace",
                              "check the name (the Studio URL ends with it) and --workspace")
        return self._job(remote)

    def submit(self, job_dir: Path, name: str, digest: str) -> Job:
        ml = self.client()
        try:
            from azure.ai.ml import load_job

            job = load_job(source=Path(job_dir) / JOB_FILE)
            job.name = name
            job.tags = {**(job.tags or {}), api.DIGEST_KEY: digest}
            created = ml.jobs.create_or_update(job)
        except Exception as exc:
            error = said(exc, "submit")
            already = self._get(name)  # another submit of the same job won the race: follow that one
            if already is not None:
                return self._job(already)
            raise error from None
        return self._job(created)

    def status(self, job: Job) -> Status:
        remote = self._get(job.id)
        if remote is None:
            raise SubmitError(f"azureml: job {job.id} is gone from the workspace", "it may have been archived or deleted")
        word = _word(remote.status)
        state = STATES.get(word, State.RUNNING)
        detail = word
        if state in (State.FAILED, State.CANCELED):
            error, ran = self._run_error(job.id)
            if error:
                detail = f"{word}: {error}"
            if state is State.FAILED and any(w.lower() in error.lower() for w in IMAGE_PULL):
                detail = f"{word}: the image could not be pulled: {error} (hint: check the image name and " \
                         "that the workspace's identity can pull from the registry (AcrPull))"
            if timed_out(error, ran, _limit(remote)):
                state = State.TIMED_OUT
        return Status(state, detail)

    def _run_error(self, name: str) -> Tuple[str, Optional[float]]:
        """The run history's error for the job (its code and message, on one line) and how long it
        ran, in seconds (None when not known)."""
        try:
            details = self.client().jobs._runs_operations.get_run_details(name)
        except Exception:  # the state is known already; the error's words are a courtesy
            return "", None
        start, end = getattr(details, "start_time_utc", None), getattr(details, "end_time_utc", None)
        ran = (end - start).total_seconds() if start and end else None
        inner = getattr(getattr(details, "error", None), "error", None)
        if inner is None:
            return "", ran
        code = getattr(inner, "code", "") or ""
        message = getattr(inner, "message", "") or ""
        return one_line(f"{code}: {message}" if code and message else code or message), ran

    def logs(self, job: Job, cursor: Any, all_ranks: bool) -> Tuple[List[LogLine], Any]:
        printed: Dict[str, int] = dict(cursor or {})
        ml = self.client()
        try:
            details = ml.jobs._runs_operations.get_run_details(job.id)
        except Exception as exc:
            raise said(exc, "logs") from None
        files = log_files(dict(getattr(details, "log_files", None) or {}), all_ranks)
        lines: List[LogLine] = []
        for path, url in files:
            text = self._download(url)
            if text is None:
                continue
            rows = text.splitlines()
            node = node_of(path)
            lines.extend(LogLine(node, row) for row in rows[printed.get(path, 0):])
            printed[path] = max(len(rows), printed.get(path, 0))
        return lines, printed

    def _download(self, url: str) -> Optional[str]:
        from azure.ai.ml._utils.utils import download_text_from_url

        try:
            return download_text_from_url(url, self.client().jobs._requests_pipeline, timeout=(10, 60))
        except Exception:  # a file not written yet, or a SAS URL expired: the next poll tries again
            return None

    def cancel(self, job: Job) -> None:
        try:
            self.client().jobs.begin_cancel(job.id)
        except Exception as exc:
            raise said(exc, "cancel") from None

    # --- helpers ---------------------------------------------------------------------------------

    def _get(self, name: str):
        """The job named ``name``, or None when Azure ML has none (a 404 about the job, not about
        the workspace)."""
        ml = self.client()
        from azure.core.exceptions import ResourceNotFoundError

        try:
            return ml.jobs.get(name)
        except ResourceNotFoundError as exc:
            if _about_workspace(exc):
                raise said(exc, "find") from None
            return None
        except Exception as exc:
            raise said(exc, "find") from None

    def _job(self, remote) -> Job:
        services = getattr(remote, "services", None) or {}
        studio = getattr(services.get("Studio"), "endpoint", None) or getattr(remote, "studio_url", None) or ""
        digest = (getattr(remote, "tags", None) or {}).get(api.DIGEST_KEY) or ""
        return Job(NAME, remote.name, remote.name, studio or f"az ml job show --name {remote.name}",
                   digest=str(digest))


WORKSPACE_VARIABLES = {"subscription_id": "AZUREML_SUBSCRIPTION_ID", "resource_group": "AZUREML_RESOURCE_GROUP",
                       "workspace": "AZUREML_WORKSPACE"}


def _quiet() -> Dict[str, int]:
    """azure-ai-ml says its progress at INFO on stderr ("Proceeding with no tenant id appended to
    studio URL" on every jobs.get): kept to its warnings, so the job's own log lines stand out.
    Not at all: its warnings about its own experimental classes, and azure-identity's multi-line
    warning when no credential works (the one-line error says it, with Azure's words). Returns
    the levels before, for close() to put back."""
    wanted = {"azure.ai.ml._utils._experimental": logging.ERROR, "azure.identity": logging.ERROR}
    for name in [n for n in logging.root.manager.loggerDict if n.startswith("azure.ai.ml")] + ["azure.ai.ml"]:
        if logging.getLogger(name).level in (logging.NOTSET, logging.INFO) and name not in wanted:
            wanted[name] = logging.WARNING
    before = {name: logging.getLogger(name).level for name in wanted}
    for name, level in wanted.items():
        logging.getLogger(name).setLevel(level)
    return before


def _word(status) -> str:
    """The platform's word for the state: a JobStatus enum's value (str() of it is 'JobStatus.X'
    on Python 3.11), or the string itself."""
    return str(getattr(status, "value", status) or "NotStarted")


def timed_out(error: str, ran: Optional[float], limit: Optional[float]) -> bool:
    """A job Azure ML stopped at its limits.timeout: the error says so, or it ran that long (the
    exact words Azure ML uses are not verified here: docs/targets/azureml.md)."""
    if any(w.lower() in error.lower() for w in TIMEOUT):
        return True
    return bool(limit and ran is not None and ran >= limit)


def _limit(remote) -> Optional[float]:
    timeout = getattr(getattr(remote, "limits", None), "timeout", None)
    try:
        return float(timeout) if timeout else None
    except (TypeError, ValueError):
        return None


def log_files(files: Dict[str, str], all_ranks: bool) -> List[Tuple[str, str]]:
    """The (name, SAS URL) of the log files to print: the user logs (jobs.stream's pattern), else the
    legacy driver logs; rank 0's alone unless ``all_ranks``."""
    chosen = sorted(n for n in files if USER_LOG.search(n)) or sorted(n for n in files if LEGACY_LOG.search(n))
    if not all_ranks:
        first = [n for n in chosen if node_of(n) == "0"]
        chosen = first[:1] or chosen[:1]
    return [(n, files[n]) for n in chosen]


def node_of(path: str) -> str:
    match = FILE_RANK.search(path)
    return match.group(1) if match else Path(path).stem


def one_line(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT - 3] + "..."


def _about_workspace(exc) -> bool:
    text = _message(exc)
    return any(w in text for w in ("workspaces/", "ResourceGroupNotFound", "SubscriptionNotFound",
                                   "Workspace not found", "WorkspaceNotFound"))


def _message(exc) -> str:
    """Azure's code and message (an HttpResponseError's ``error``), else the exception's text."""
    error = getattr(exc, "error", None)
    code, message = getattr(error, "code", None), getattr(error, "message", None)
    if message:
        return one_line(f"{code}: {message}" if code and not message.startswith(code) else message)
    return one_line(getattr(exc, "message", None) or str(exc))


def said(exc: Exception, doing: str) -> SubmitError:
    """A refusal from Azure ML (or from the credential) as one line with its message kept, and what
    to do."""
    try:
        from azure.core.exceptions import ClientAuthenticationError
    except ImportError:  # pragma: no cover - azure-core comes with azure-ai-ml
        ClientAuthenticationError = ()  # type: ignore[assignment]
    text = _message(exc)
    kind = type(exc).__name__
    if isinstance(exc, ClientAuthenticationError) or kind == "CredentialUnavailableError" \
            or "DefaultAzureCredential failed" in text:
        return SubmitError(f"azureml: not logged in: {text}", LOGIN_HINT)
    status = getattr(exc, "status_code", None)
    if status in (401, 403) and "quota" not in text.lower():
        return SubmitError(f"azureml: {doing} refused ({status}): {text}",
                           "check that you are logged in to the right tenant and have a role on the workspace "
                           "(AzureML Data Scientist or Contributor)")
    if _about_workspace(exc):
        return SubmitError(f"azureml: workspace not found: {text}",
                           "check --subscription, --resource-group and --workspace (or AZUREML_*, config.json); "
                           "`az ml workspace list` shows yours")
    if any(w.lower() in text.lower() for w in QUOTA):
        return SubmitError(f"azureml: quota refused: {text}",
                           "ask for more vCPU quota for this VM family (Azure portal > Quotas), or use fewer "
                           "nodes or another instance type (targets.azureml.instance_type)")
    if any(w in text for w in NO_COMPUTE) or ("compute" in text.lower() and "does not exist" in text):
        return SubmitError(f"azureml: compute not found: {text}",
                           "create the compute cluster or fix targets.azureml.compute; "
                           "`az ml compute list` shows the workspace's")
    return SubmitError(f"azureml: {doing} failed: {kind}: {text}" if kind not in text else f"azureml: {doing} failed: {text}",
                       "see Azure ML's message; `trainspec compile -t azureml` and `az ml job validate` check the job file")


SCHEDULER = AzureMLScheduler
