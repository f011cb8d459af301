"""`trainspec submit -t ray`: the compiled job through Ray's job submission REST API (the Ray
dashboard's job server, docs.ray.io "Ray Jobs REST API"), spoken with the standard library's
urllib: the API is documented and plain JSON over HTTP, and Ray's own Python client
(``ray.job_submission``) needs ``ray[default]``, whose pins clash with azure-ai-ml.

==========  =====================================================================================
address     --address, else RAY_ADDRESS: a running cluster's dashboard (http://HEAD:8265). Neither:
            ``ray up -y cluster.yaml`` of the compiled job, the head's address from
            ``ray get-head-ip cluster.yaml`` (dashboard port 8265), and ``ray down -y`` once the job
            is final (``after``), unless targets.ray.keep_cluster
submit      the job folder's files as the cluster.yaml's file_mounts lay them out (``trainspec/``:
            the code, the shim, the driver, the request, uploaded inputs) zipped and uploaded
            (``PUT /api/packages/gcs/_ray_pkg_<sha>.zip``) as the job's working_dir; then
            ``POST /api/jobs/`` with submission_id = the job's name and the entrypoint
            ``python trainspec/trainspec_ray_driver.py --home "$PWD" trainspec/trainspec_ray_job.json``:
            launch.sh's ``ray exec`` line, with HOME of every process the working_dir (the command
            finds the shim at $HOME/trainspec as under ``ray up``)
find        ``GET /api/jobs/<name>``: 404 is "not submitted"; the job's digest is its metadata's
            trainspec_digest (api.DIGEST_KEY), which submit sets
status      ``GET /api/jobs/<id>``: PENDING, RUNNING, SUCCEEDED, STOPPED, FAILED; FAILED with the
            driver's exit code 124 (``driver_exit_code``, else the message) is the spec's timeout
logs        ``GET /api/jobs/<id>/logs``: the driver's output, every line ``[rank R] ...`` (or
            ``[node N] ...`` per-node) and the driver's own ``trainspec: ...`` lines; the cursor is
            the characters already read
cancel      ``POST /api/jobs/<id>/stop``
==========  =====================================================================================

Every request is bounded (REQUEST_TIMEOUT), every ``ray`` command too (RAY_UP_TIMEOUT).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from trainspec.core.files import list_folder
from trainspec.jobs.api import DIGEST_KEY, Job, LogLine, MissingClient, Scheduler, State, Status, SubmitError
from trainspec.targets.ray.lower import CLUSTER_FILE, DRIVER_FILE, REMOTE, REQUEST_FILE
from trainspec.targets.ray.settings import NAME

REQUEST_TIMEOUT = 60.0  # s per HTTP request: the job server answers at once; an upload may take a while
RAY_UP_TIMEOUT = 3600  # s for `ray up` (VMs, images, setup commands) and `ray down`
RAY_SHORT_TIMEOUT = 120  # s for `ray get-head-ip`
DASHBOARD_PORT = 8265
TIMEOUT_EXIT = 124  # the driver's exit code at the spec's timeout (runtime/ray_driver.py)
PACKAGE_FOLDER = "trainspec"  # the working_dir holds what file_mounts put in ~/trainspec
SKIP = (".git", "__pycache__")  # cluster.yaml's rsync_exclude

STATES = {"PENDING": State.QUEUED, "RUNNING": State.RUNNING, "SUCCEEDED": State.COMPLETED,
          "STOPPED": State.CANCELED, "FAILED": State.FAILED}
_LINE = re.compile(r"^\[(rank|node) (\d+)\] ?(.*)$")
_EXIT = re.compile(r"exit code (-?\d+)")
_ADDRESS_HINT = ("give the dashboard of a running cluster: --address http://HEAD:8265 or RAY_ADDRESS (from "
                 "outside Azure: `ray dashboard cluster.yaml` forwards it to http://127.0.0.1:8265)")


class RayJobs(Scheduler):
    target = NAME
    extra = None  # urllib: nothing to install here; `ray` itself only for the cluster `ray up` starts

    def __init__(self, context) -> None:
        super().__init__(context)
        self._address: Optional[str] = None
        self._started: Optional[Path] = None  # the cluster.yaml this scheduler brought up

    # -- where -----------------------------------------------------------------------------------

    def address(self, job_dir: Optional[Path] = None) -> str:
        """The dashboard's address: --address, RAY_ADDRESS, else (job_dir given) `ray up` of it."""
        if self._address is None:
            given = self.context.address or self.context.env.get("RAY_ADDRESS")
            if given:
                self._address = dashboard_address(given)
            elif job_dir is not None:
                self._address = self._ray_up(job_dir)
            else:
                raise SubmitError("ray: no cluster to ask: no --address and no RAY_ADDRESS", _ADDRESS_HINT)
        return self._address

    def _ray_up(self, job_dir: Path) -> str:
        self._ray(job_dir, ["up", "-y", CLUSTER_FILE], RAY_UP_TIMEOUT, "start the cluster")
        self._started = job_dir
        head = self._ray(job_dir, ["get-head-ip", CLUSTER_FILE], RAY_SHORT_TIMEOUT, "find the head")
        ip = head.strip().splitlines()[-1].strip() if head.strip() else ""
        if not ip:
            raise SubmitError("ray: `ray get-head-ip` named no head after `ray up`", _ADDRESS_HINT)
        return f"http://{ip}:{DASHBOARD_PORT}"

    def _ray(self, job_dir: Path, args: List[str], timeout: float, what: str) -> str:
        ray = shutil.which("ray", path=self.context.env.get("PATH"))
        if ray is None:  # to start the cluster; a running cluster's address needs nothing installed
            raise MissingClient(NAME, "ray", f"the `ray` command (no --address or RAY_ADDRESS: to {what})")
        try:
            done = subprocess.run([ray, *args], cwd=job_dir, capture_output=True, text=True, timeout=timeout,
                                  env=dict(self.context.env), stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise SubmitError(f"ray: `ray {shlex.join(args)}` did not finish within {timeout:.0f} s",
                              f"see `ray monitor {CLUSTER_FILE}` in {job_dir}") from None
        if done.returncode != 0:
            said = _last_line(done.stderr) or _last_line(done.stdout) or f"exit {done.returncode}"
            raise SubmitError(f"ray: `ray {shlex.join(args)}` failed: {said}",
                              "`az login` first (ray up drives Azure with your login); the whole output: run it "
                              f"in {job_dir}")
        return done.stdout

    def _job(self, info: Dict[str, Any], address: str) -> Job:
        sid = info.get("submission_id") or info.get("job_id") or ""
        metadata = info.get("metadata") or {}
        extra = {"address": address, **{k: str(v) for k, v in metadata.items() if k.startswith("trainspec_")}}
        return Job(NAME, metadata.get("trainspec_name", sid), sid,
                   f"{address}/#/jobs/{urllib.parse.quote(sid, safe='')}", extra, str(metadata.get(DIGEST_KEY) or ""))

    # -- the interface ---------------------------------------------------------------------------

    def find(self, name: str) -> Optional[Job]:
        given = self.context.address or self.context.env.get("RAY_ADDRESS")
        if not given and self._address is None:
            if not self.context.submitting:  # status/logs/cancel: there is nothing to ask
                raise SubmitError("ray: no cluster to ask: no --address and no RAY_ADDRESS", _ADDRESS_HINT)
            return None  # no cluster yet: submit brings one up, and nothing on it can be this job
        return self._find(self.address(), name)

    def _find(self, address: str, name: str) -> Optional[Job]:
        info = self._call(address, "GET", f"/api/jobs/{_quote(name)}", missing_ok=True)
        return None if info is None else self._job(info, address)

    def by_id(self, id: str) -> Job:
        address = self.address()
        info = self._call(address, "GET", f"/api/jobs/{_quote(id)}", missing_ok=True)
        if info is None:
            raise SubmitError(f"ray: no job {id} on the cluster at {address}",
                              "`ray job list --address ADDRESS` lists them; a cluster torn down forgets its jobs")
        return self._job(info, address)

    def submit(self, job_dir: Path, name: str, digest: str) -> Job:
        request = json.loads((job_dir / REQUEST_FILE).read_text(encoding="utf-8"))
        package = working_dir(job_dir)
        address = self.address(job_dir)
        if self._started is not None:  # a cluster `ray up` found (kept, or still up) may hold the job already
            there = self._find(address, name)
            if there is not None:
                return there
        uri = f"gcs://_ray_pkg_{hashlib.sha256(package).hexdigest()[:32]}.zip"
        path = "/api/packages/gcs/" + uri[len("gcs://"):]
        if self._call(address, "GET", path, missing_ok=True, raw=True) is None:
            self._call(address, "PUT", path, body=package, raw=True,
                     what=f"the job's files ({len(package) / 1e6:.1f} MB zipped)")
        python = self._python()
        entrypoint = shlex.join([*python, f"{PACKAGE_FOLDER}/{DRIVER_FILE}", "--home"]) + ' "$PWD" ' + \
            shlex.quote(f"{PACKAGE_FOLDER}/{REQUEST_FILE}")
        body = {"entrypoint": entrypoint, "submission_id": name, "runtime_env": {"working_dir": uri},
                "metadata": {"trainspec_name": name, DIGEST_KEY: digest, "trainspec_spec": self.context.spec_name,
                             "trainspec_launcher": str(request.get("launcher", "")),
                             "trainspec_procs_per_node": str(request.get("procs_per_node", 1))}}
        answer = self._call(address, "POST", "/api/jobs/", body=body, what="the job")
        sid = (answer or {}).get("submission_id") or name
        return self._job({"submission_id": sid, "metadata": body["metadata"]}, address)

    def _python(self) -> List[str]:
        settings = self.context.settings
        return shlex.split(getattr(settings, "python", None) or "python")

    def status(self, job: Job) -> Status:
        info = self._call(self._at(job), "GET", f"/api/jobs/{_quote(job.id)}")
        return status_of(info)

    def logs(self, job: Job, cursor: Any, all_ranks: bool) -> Tuple[List[LogLine], Any]:
        answer = self._call(self._at(job), "GET", f"/api/jobs/{_quote(job.id)}/logs")
        text = str((answer or {}).get("logs") or "")
        start = cursor or 0
        if len(text) < start:  # the job server restarted its log: read it again
            start = 0
        end = text.rfind("\n", start) + 1  # whole lines only: the rest comes next time
        if end <= start:
            return [], start
        per_node = int(job.extra.get("trainspec_procs_per_node", "1") or 1)
        return log_lines(text[start:end], all_ranks, max(per_node, 1)), end

    def cancel(self, job: Job) -> None:
        answer = self._call(self._at(job), "POST", f"/api/jobs/{_quote(job.id)}/stop", body={})
        if answer is not None and answer.get("stopped") is False:
            raise SubmitError(f"ray: the job server did not stop {job.id} (it had ended already)")

    def after(self, job: Job, status: Status) -> None:
        """Tear down the cluster this scheduler brought up, unless targets.ray.keep_cluster."""
        if self._started is None:
            return
        folder, self._started = self._started, None
        if getattr(self.context.settings, "keep_cluster", False):
            print(f"trainspec: the cluster is kept (targets.ray.keep_cluster: true); delete it: ray down -y "
                  f"{shlex.quote(str(folder / CLUSTER_FILE))}", flush=True)
            return
        self._ray(folder, ["down", "-y", CLUSTER_FILE], RAY_UP_TIMEOUT, "tear the cluster down")

    def _at(self, job: Job) -> str:
        return job.extra.get("address") or self.address()

    def _call(self, address: str, method: str, path: str, **kwargs) -> Any:
        # a cluster with token authentication (RAY_AUTH_MODE=token) wants its token
        return _request(address, method, path, token=self.context.env.get("RAY_AUTH_TOKEN"), **kwargs)


SCHEDULER = RayJobs


# --- what the scheduler is made of (pure, or plain HTTP) ----------------------------------------

def dashboard_address(given: str) -> str:
    """The dashboard's base URL from --address or RAY_ADDRESS: http(s)://HOST:PORT, or HOST:PORT."""
    text = given.strip().rstrip("/")
    if "://" not in text:
        text = "http://" + text
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SubmitError(f"ray: '{given}' is not the address of a Ray dashboard (ray:// is Ray Client's, not the "
                          "job server's)", _ADDRESS_HINT)
    return text


def status_of(info: Dict[str, Any]) -> Status:
    """A job's state from Ray's job info; FAILED with the driver's timeout exit (124) is TIMED_OUT."""
    word = str(info.get("status") or "")
    state = STATES.get(word)
    if state is None:
        return Status(State.RUNNING, f"{word or '?'} (a state trainspec does not know)")
    message = said_by_ray(str(info.get("message") or ""))
    code = info.get("driver_exit_code")
    if code is None:
        found = _EXIT.search(str(info.get("message") or ""))
        code = int(found.group(1)) if found else None
    if state is State.FAILED and code == TIMEOUT_EXIT:
        state = State.TIMED_OUT
    detail = word + (f" (exit {code})" if code is not None and state is not State.COMPLETED else "")
    if message and state.final and state is not State.COMPLETED:
        detail += f": {message[:300]}"
    return Status(state, detail)


def said_by_ray(message: str) -> str:
    """The line of a job's message that says why it ended: the driver's last ``trainspec: error:``
    (Ray's message ends with the job's last logs), else Ray's first line."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("trainspec: error:")]
    return errors[-1] if errors else (lines[0] if lines else "")


def log_lines(text: str, all_ranks: bool, procs_per_node: int) -> List[LogLine]:
    """The driver's output as lines: rank 0's (its prefix taken off) and the driver's own, or
    every line with the node it came from (``[rank R]`` is on node R // procs_per_node)."""
    out = []
    for line in text.splitlines():
        found = _LINE.match(line)
        if found is None:
            out.append(LogLine("head", line))  # the driver's own lines (and the job server's)
            continue
        kind, number, rest = found.group(1), int(found.group(2)), found.group(3)
        node = number // procs_per_node if kind == "rank" else number
        if all_ranks:
            out.append(LogLine(str(node), line if kind == "rank" else rest))
        elif number == 0:
            out.append(LogLine("0", rest))
    return out


def working_dir(job_dir: Path) -> bytes:
    """A zip of what cluster.yaml's file_mounts put in ~/trainspec, laid out as ``trainspec/...``:
    the same files `ray up` uploads, for the job's runtime_env. Deterministic (sorted, fixed
    times); links and special files are refused, as validation refuses them in the code."""
    mounts = _file_mounts(job_dir)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for remote, local in sorted(mounts.items()):
            name = PACKAGE_FOLDER + "/" + remote
            source = (job_dir / local)
            if source.is_dir():
                listing = list_folder(source, skip=SKIP)
                if listing.links or listing.others:
                    odd = (listing.links + listing.others)[0][0]
                    raise SubmitError(f"ray: {source / odd} is a link or special file; the job's files are shipped "
                                      "as regular files", "replace it with the file it names")
                for relative in listing.files:
                    _add(archive, f"{name}/{relative}", source / relative)
            elif source.is_file():
                _add(archive, name, source)
            else:
                raise SubmitError(f"ray: {source} (file_mounts of {CLUSTER_FILE}) is missing",
                                  "compile the job again: trainspec compile -t ray")
    return buffer.getvalue()


def _add(archive: zipfile.ZipFile, name: str, path: Path) -> None:
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.external_attr = ((0o755 if os.access(path, os.X_OK) else 0o644) | 0o100000) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, path.read_bytes())


def _file_mounts(job_dir: Path) -> Dict[str, str]:
    """cluster.yaml's file_mounts under ~/trainspec: {path below it: local path, relative to job_dir}."""
    from ruamel.yaml import YAML

    try:
        config = YAML(typ="safe").load((job_dir / CLUSTER_FILE).read_text(encoding="utf-8"))
    except OSError as exc:
        raise SubmitError(f"ray: cannot read {job_dir / CLUSTER_FILE}: {exc.strerror}",
                          "compile the job again: trainspec compile -t ray") from None
    prefix = REMOTE + "/"
    return {remote[len(prefix):]: str(local) for remote, local in (config.get("file_mounts") or {}).items()
            if remote.startswith(prefix) and ".." not in remote[len(prefix):].split("/")}


def _quote(id: str) -> str:
    return urllib.parse.quote(id, safe="")


def _request(address: str, method: str, path: str, body: Any = None, missing_ok: bool = False,
             raw: bool = False, what: str = "", token: Optional[str] = None) -> Any:
    """One call to the job server: its JSON answer (raw: b"" or the bytes), None for a 404 when
    ``missing_ok``; a SubmitError with the server's own words otherwise."""
    data = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else None)
    headers = {"Content-Type": "application/octet-stream" if isinstance(body, bytes) else "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(address + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as response:
            payload = response.read()
    except urllib.error.HTTPError as exc:
        said = _last_line(exc.read().decode("utf-8", "replace")) or exc.reason
        if exc.code == 404 and missing_ok:
            return None
        if exc.code == 404:
            raise SubmitError(f"ray: {address} has no job server ({method} {path}: 404 {said})",
                              "is it a Ray dashboard, started with the dashboard (ray[default], not "
                              "--include-dashboard=false)? " + _ADDRESS_HINT) from None
        if exc.code in (401, 403):
            raise SubmitError(f"ray: the job server at {address} refused trainspec: {exc.code} {said}",
                              "the cluster wants a token: set RAY_AUTH_TOKEN") from None
        raise SubmitError(f"ray: the job server at {address} refused {what or path}: {exc.code} {said}",
                          "the message is Ray's; `ray job list --address " + address + "` shows the jobs") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SubmitError(f"ray: the dashboard at {address} is unreachable: {reason}", _ADDRESS_HINT) from None
    if raw:
        return payload
    try:
        return json.loads(payload.decode("utf-8")) if payload else {}
    except ValueError:
        raise SubmitError(f"ray: {address} answered {method} {path} with something other than JSON",
                          _ADDRESS_HINT) from None


def _last_line(text: str) -> str:
    """The last non-empty line: a traceback's error, a command's complaint."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
