"""`trainspec submit -t hpcpack`: the head node's REST web service (HPC Pack 2016 and later paths,
api-version 2012-11-01.4.0), over HTTPS with Basic authentication, from the standard library.

    find(name)     GET  /WindowsHPC/Jobs?Properties=Id,Name,State     (Get Job List; continuation by QueryId),
                   then GET /WindowsHPC/Job/<id>/CustomProperties: its trainspec_digest (Get Job Custom Properties)
    submit         bash stage.sh <job name> (the code into the job's own folder on the shared folder), then
                   POST /WindowsHPC/Jobs/JobFile  job.xml, its Name, its custom property trainspec_digest
                                                  and its tasks' folder set  -> <int>id</int>  (Create Job From XML)
                   POST /WindowsHPC/Job/<id>/Submit  <ArrayOfProperty/>                      (Submit Job)
    status         GET  /WindowsHPC/Job/<id>?Properties=Id,Name,State,ErrorMessage&Render=RestPropRender
    logs           GET  /WindowsHPC/Job/<id>/Tasks?Properties=...StdOutFilePath,Output    (Get Task List),
                   then each task's StdOutFilePath on the shared folder, read from where it is mounted here
    cancel         POST /WindowsHPC/Job/<id>/Cancel

Where: --address https://HEAD, else HPCPACK_REST_URL; who: HPCPACK_USERNAME, HPCPACK_PASSWORD
(never printed); which certificate authority: HPCPACK_CA_BUNDLE, else REQUESTS_CA_BUNDLE, else
the system's. docs/targets/hpcpack.md, "Submit, follow, status, cancel", says where each fact
comes from and which are not verified against a real head node.
"""

from __future__ import annotations

import base64
import errno
import re
import shlex
import ssl
import subprocess
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from trainspec.core.files import read_below
from trainspec.jobs.api import DIGEST_KEY, Context, Job, LogLine, Scheduler, State, Status, SubmitError
from trainspec.targets.hpcpack.lower import (CODE_FOLDER, ENV_STAGED_DIR, JOB_FILE, NAMESPACE, STAGE_FILE,
                                             _keep_carriage_returns, staged_dir)
from trainspec.targets.hpcpack.settings import NAME

API_VERSION = "2012-11-01.4.0"  # HPC Pack 2012, 2012 R2, 2016 and later (Azure-Samples/hpcpack-samples)
COMMON = "http://schemas.microsoft.com/HPCS2008R2/common"
HTTP_SECONDS = 30.0  # each request: the service answers or the call fails
STAGE_SECONDS = 1800.0  # stage.sh copies the code folder; a bound, not an expectation
ROWS_PER_READ = 500
MOST_PAGES = 200  # Get Job List: at most 100,000 jobs looked through for one name
LOG_CHUNK = 1 << 20  # bytes read from one log file per call

# HPC Pack's job (and task) states, in the common words (JobState in the scheduler's API)
STATES = {
    "Configuring": State.QUEUED, "Submitted": State.QUEUED, "Validating": State.QUEUED,
    "ExternalValidation": State.QUEUED, "Queued": State.QUEUED, "Dispatching": State.RUNNING,
    "Running": State.RUNNING, "Finishing": State.RUNNING, "Canceling": State.RUNNING,
    "Finished": State.COMPLETED, "Failed": State.FAILED, "Canceled": State.CANCELED,
}
TASK_FINAL = {"Finished", "Failed", "Canceled"}
# not verified on a real head node: how the scheduler words a job stopped at its RuntimeSeconds
_RUN_TIME_LIMIT = re.compile(r"(run ?time|runtime).{0,40}(exceed|limit|expire)|(exceed|limit|expire).{0,40}(run ?time)",
                             re.I)

_CREDENTIALS_HINT = ("set HPCPACK_USERNAME (DOMAIN\\user) and HPCPACK_PASSWORD to a user of the cluster; "
                     "the REST service takes HTTP Basic authentication over HTTPS")


def state_of(word: str, error_message: str = "") -> State:
    """The common state of an HPC Pack job state (and its ErrorMessage: a job stopped at its run
    time limit is TIMED_OUT)."""
    state = STATES.get(word, State.QUEUED)
    if state in (State.FAILED, State.CANCELED) and _RUN_TIME_LIMIT.search(error_message or ""):
        return State.TIMED_OUT
    return state


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def _parse(body: bytes) -> ET.Element:
    try:
        return ET.fromstring(body)
    except ET.ParseError as exc:
        raise SubmitError(f"the head node answered something that is not XML ({exc})",
                          "check that --address / HPCPACK_REST_URL is the head node's HPC web service") from None


def _properties(element: ET.Element) -> Dict[str, str]:
    """{Name: Value} of the <Property> children of an ArrayOfProperty or an Object's Properties."""
    out = {}
    for prop in element.iter():
        if _local(prop.tag) != "Property":
            continue
        name = value = ""
        for child in prop:
            if _local(child.tag) == "Name":
                name = child.text or ""
            elif _local(child.tag) == "Value":
                value = child.text or ""
        out[name] = value
    return out


def _objects(root: ET.Element) -> List[Dict[str, str]]:
    return [_properties(obj) for obj in root if _local(obj.tag) == "Object"]


def _fault(body: bytes) -> str:
    """The service's own message: HpcWebServiceFault's Message, or a serialized <string>."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return one_line(body.decode("utf-8", "replace")) if body and not body.lstrip().startswith(b"<") else ""
    if _local(root.tag) == "string":
        return one_line(root.text or "")
    for child in root.iter():
        if _local(child.tag) == "Message":
            return one_line(child.text or "")
    return ""


def named_job_xml(data: bytes, name: str, digest: str = "", staged: str = "") -> bytes:
    """job.xml with the job's Name set to ``name`` and, given a ``digest``, the job's custom
    property trainspec_digest (``<CustomProperties><Term>``, the Job's first child in the XSD's
    order); given ``staged``, the job's own folder on the shared storage (lower.py staged_dir),
    each task starts in its code (``WorkDirectory``) and its command line runs the shim there
    (``TRAINSPEC_STAGED_DIR``). Through the XML, never a string edit."""
    ET.register_namespace("", NAMESPACE)
    root = ET.fromstring(data)
    root.set("Name", name)
    tag = f"{{{NAMESPACE}}}"
    if digest:
        custom = root.find(tag + "CustomProperties")
        if custom is None:
            custom = ET.Element(tag + "CustomProperties")
            root.insert(0, custom)
        for term in [t for t in custom if t.findtext(tag + "Name") == DIGEST_KEY]:
            custom.remove(term)
        term = ET.SubElement(custom, tag + "Term")
        ET.SubElement(term, tag + "Name").text = DIGEST_KEY
        ET.SubElement(term, tag + "Value").text = digest
    if staged:
        for task in root.iter(tag + "Task"):
            task.set("WorkDirectory", f"{staged}/{CODE_FOLDER}")
            for variable in task.iter(tag + "Variable"):
                if variable.findtext(tag + "Name") == ENV_STAGED_DIR:
                    variable.find(tag + "Value").text = staged
    text = _keep_carriage_returns(ET.tostring(root, encoding="unicode"))
    return ('<?xml version="1.0" encoding="utf-8"?>\n' + text + "\n").encode("utf-8")


class HPCPackScheduler(Scheduler):
    """A head node's REST web service."""

    target = NAME
    extra = None  # the standard library's urllib and ssl: nothing to install

    def __init__(self, context: Context) -> None:
        super().__init__(context)
        self._context_ssl: Optional[ssl.SSLContext] = None

    # --- where and who --------------------------------------------------------------------------

    def _base(self) -> str:
        """https://HEAD[:PORT], or a SubmitError that says how to submit by hand."""
        env = self.context.env
        address = (self.context.address or env.get("HPCPACK_REST_URL") or "").strip()
        if not address:
            spec = self.context.spec_name or "<spec name>"
            folder = f"build/{spec}/{NAME}"
            raise SubmitError(
                "no head node to submit to: give --address https://HEAD (the head node's HPC web service) "
                "or set HPCPACK_REST_URL; nothing submitted",
                f"or submit by hand: trainspec compile SPEC -t {NAME} (writes {folder}/), then "
                f"bash {folder}/{STAGE_FILE} on a machine that mounts the shared folder, and from a Windows "
                f"client: job submit /jobfile:{folder}/{JOB_FILE}")
        if "://" not in address:
            address = "https://" + address
        parts = urllib.parse.urlsplit(address)
        if parts.scheme != "https" or not parts.hostname:
            raise SubmitError(f"{address}: the head node's address must be https://HEAD[:PORT]",
                              "the REST service takes a password (HTTP Basic): only over HTTPS")
        path = parts.path.rstrip("/")
        if path.lower().endswith("/windowshpc"):
            path = path[:-len("/windowshpc")]
        netloc = parts.netloc.rpartition("@")[2]  # a user:password@ in the address is never used nor printed
        return urllib.parse.urlunsplit(("https", netloc, path, "", ""))

    def _head(self) -> str:
        return urllib.parse.urlsplit(self._base()).hostname or ""

    def _authorization(self) -> str:
        env = self.context.env
        user, password = env.get("HPCPACK_USERNAME", ""), env.get("HPCPACK_PASSWORD", "")
        if not user or not password:
            raise SubmitError("no credentials for the head node: HPCPACK_USERNAME and HPCPACK_PASSWORD are not set",
                              _CREDENTIALS_HINT)
        return "Basic " + base64.b64encode(f"{user}:{password}".encode("utf-8")).decode("ascii")

    def _ssl(self) -> ssl.SSLContext:
        if self._context_ssl is None:
            env = self.context.env
            bundle = env.get("HPCPACK_CA_BUNDLE") or env.get("REQUESTS_CA_BUNDLE") or None
            try:
                self._context_ssl = ssl.create_default_context(cafile=bundle)
            except (OSError, ssl.SSLError) as exc:
                raise SubmitError(f"cannot read the CA bundle {bundle}: {exc}",
                                  "set HPCPACK_CA_BUNDLE to a PEM file with the head node's CA certificate") from None
        return self._context_ssl

    # --- one request ---------------------------------------------------------------------------

    def _request(self, method: str, path: str, query: Optional[Dict[str, str]] = None,
                 body: Optional[bytes] = None, missing: str = "") -> Tuple[bytes, Dict[str, str]]:
        """One call to the service: its body and headers, or a SubmitError that keeps its message.
        ``missing``: what a 404 means here."""
        url = self._base() + "/WindowsHPC/" + path + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = {"Authorization": self._authorization(), "api-version": API_VERSION, "Accept": "application/xml"}
        if body is not None:
            headers["Content-Type"] = "application/xml; charset=utf-8"
        request = urllib.request.Request(url, data=body, headers=headers, method=method)
        where = self._base()
        try:
            with urllib.request.urlopen(request, timeout=HTTP_SECONDS, context=self._ssl()) as response:
                return response.read(), {k.lower(): v for k, v in response.headers.items()}
        except urllib.error.HTTPError as exc:
            raise self._refusal(exc.code, exc.reason, _fault(exc.read() or b""), missing) from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise SubmitError(f"the head node's TLS certificate is not trusted ({reason.verify_message})",
                                  "set HPCPACK_CA_BUNDLE to the PEM certificate of the head node or its CA") from None
            raise SubmitError(f"cannot reach the HPC Pack REST service at {where}: {reason}",
                              "check --address / HPCPACK_REST_URL, that the head node's HPC web service is "
                              "running and that its HTTPS port is open from here") from None
        except TimeoutError:
            raise SubmitError(f"no answer from the HPC Pack REST service at {where} within {HTTP_SECONDS:.0f} s",
                              "check that the head node is up and reachable") from None
        except OSError as exc:
            raise SubmitError(f"the connection to the HPC Pack REST service at {where} failed: {exc}",
                              "check that the head node is up and reachable") from None

    def _refusal(self, code: int, reason: str, message: str, missing: str) -> SubmitError:
        said = f" ({message})" if message else ""
        if code == 401:
            return SubmitError(f"the head node refused the user name or password (401 {reason}){said}",
                               _CREDENTIALS_HINT)
        if code == 403:
            return SubmitError(f"the head node did not allow this (403 {reason}){said}",
                               "the user must be a user of the cluster (HPC Users); ask its administrator")
        if code == 404 and missing:
            return SubmitError(f"{missing} (404){said}", "check the job id: `job list /all` on the head node")
        lowered = message.lower()
        hint = ("check targets.hpcpack.node_group: `node listgroups` names the cluster's node groups"
                if "group" in lowered else
                "check targets.hpcpack.job_template: `job listtemplates` (HPC PowerShell: Get-HpcJobTemplate)"
                if "template" in lowered else
                "check targets.hpcpack.nodes: `node list` names the cluster's nodes" if "node" in lowered else
                "the head node's own message says what it refused")
        return SubmitError(f"the head node refused the request ({code} {reason}){said}", hint)

    # --- the interface -------------------------------------------------------------------------

    def _job(self, id: str, name: str, digest: str = "") -> Job:
        base = self._base()
        return Job(target=NAME, name=name, id=id, where=f"job view {id} /scheduler:{self._head()}",
                   extra={"address": base, "url": f"{base}/WindowsHPC/Job/{id}"}, digest=digest)

    def _digest(self, id: str) -> str:
        """The job's custom property trainspec_digest, "" when it has none."""
        body, _ = self._request("GET", f"Job/{id}/CustomProperties", missing=f"no job {id} on the head node")
        return _properties(_parse(body)).get(DIGEST_KEY, "")

    def find(self, name: str) -> Optional[Job]:
        """The newest job called ``name`` that was submitted (a job only created, still
        Configuring, is not: a submit that failed halfway leaves one)."""
        best: Optional[int] = None
        query = {"Properties": "Id,Name,State", "RowsPerRead": str(ROWS_PER_READ)}
        for _ in range(MOST_PAGES):
            body, headers = self._request("GET", "Jobs", query)
            for job in _objects(_parse(body)):
                if job.get("Name") == name and job.get("State") != "Configuring" and job.get("Id", "").isdigit():
                    best = max(best or 0, int(job["Id"]))
            more = headers.get("x-ms-continuation-queryid")
            if not more:
                break
            query = {**query, "QueryId": more}
        else:
            raise SubmitError(f"more than {MOST_PAGES * ROWS_PER_READ} jobs on the head node to look through",
                              "remove old jobs, or follow the job by its id: trainspec status -t hpcpack --id ID")
        return self._job(str(best), name, self._digest(str(best))) if best is not None else None

    def submit(self, job_dir: Path, name: str, digest: str) -> Job:
        self._base()  # refuse before staging anything
        self._authorization()
        self._stage(job_dir, name)
        # the job runs its own folder, as the nodes see it (the spec's shared_dir: submit comes from a spec)
        staged = staged_dir(self.context.settings.shared_dir, name)
        xml = named_job_xml((job_dir / JOB_FILE).read_bytes(), name, digest, staged)
        body, _ = self._request("POST", "Jobs/JobFile", body=xml)
        root = _parse(body)
        id = (root.text or "").strip()
        if _local(root.tag) != "int" or not id.isdigit():
            raise SubmitError(f"the head node created the job but answered no job id: {one_line(body.decode('utf-8', 'replace'))}",
                              "look for it with `job list /all` on the head node")
        empty = f'<ArrayOfProperty xmlns="{COMMON}" />'.encode("utf-8")
        try:
            self._request("POST", f"Job/{id}/Submit", body=empty, missing=f"job {id} vanished before it was submitted")
        except SubmitError as exc:
            raise SubmitError(f"job {id} was created but not submitted: {exc.message}",
                              exc.hint + f"; it stays Configuring: remove it with `job cancel {id}`") from None
        return self._job(id, name, digest)

    def _stage(self, job_dir: Path, name: str) -> None:
        """Run the compiled stage.sh: it copies the code, the shim and its election file to the
        job's own folder on the shared storage, ``<shared_dir>/<name>/``, the folder its tasks run
        from (named_job_xml). Our own compiled script (the spec's command runs on the nodes, not
        here), run with bash from the job folder, bounded."""
        stage = job_dir / STAGE_FILE
        run = shlex.join(["bash", str(stage), name])  # what submit runs, as a user would type it
        if not stage.is_file():
            raise SubmitError(f"{stage} is missing", f"compile the job again: trainspec compile SPEC -t {NAME}")
        env = self.context.env
        shared = env.get("TRAINSPEC_SHARED_DIR") or getattr(self.context.settings, "shared_dir", None)
        if shared and not Path(shared).is_dir():
            raise SubmitError(f"the shared folder {shared} is not here: submit stages the code there first "
                              f"({run})",
                              "submit from a machine that mounts it, or set TRAINSPEC_SHARED_DIR to where it is "
                              "mounted here")
        try:
            proc = subprocess.run(["bash", STAGE_FILE, name], cwd=job_dir, capture_output=True, text=True,
                                  env={k: v for k, v in env.items() if k != "HPCPACK_PASSWORD"}, timeout=STAGE_SECONDS)
        except subprocess.TimeoutExpired:
            raise SubmitError(f"staging the code did not end within {STAGE_SECONDS:.0f} s: {run}",
                              "a smaller code folder, or stage it by hand and submit job.xml") from None
        except OSError as exc:
            raise SubmitError(f"cannot run bash {stage}: {exc.strerror}", "install bash") from None
        if proc.returncode != 0:
            said = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            raise SubmitError(f"staging the code on the shared folder failed: {one_line(said)}",
                              f"run it yourself to see why: {run}")

    def status(self, job: Job) -> Status:
        body, _ = self._request("GET", f"Job/{job.id}",
                                {"Properties": "Id,Name,State,ErrorMessage", "Render": "RestPropRender"},
                                missing=f"no job {job.id} on the head node")
        props = _properties(_parse(body))
        word, message = props.get("State", ""), props.get("ErrorMessage", "")
        return Status(state_of(word, message), word + (f": {one_line(message)}" if message else ""))

    def by_id(self, id: str) -> Job:
        if not id.isdigit():
            raise SubmitError(f"{id!r} is not an HPC Pack job id", "the number submit printed, e.g. --id 1234")
        body, _ = self._request("GET", f"Job/{id}", {"Properties": "Id,Name", "Render": "RestPropRender"},
                                missing=f"no job {id} on the head node")
        return self._job(id, _properties(_parse(body)).get("Name", ""))

    def cancel(self, job: Job) -> None:
        message = '<string xmlns="http://schemas.microsoft.com/2003/10/Serialization/">canceled by trainspec</string>'
        self._request("POST", f"Job/{job.id}/Cancel", body=message.encode("utf-8"),
                      missing=f"no job {job.id} on the head node")

    # --- logs ----------------------------------------------------------------------------------

    def _tasks(self, job: Job) -> List[Dict[str, str]]:
        query = {"Properties": "TaskId,Name,State,StdOutFilePath,Output", "RowsPerRead": str(ROWS_PER_READ)}
        tasks: List[Dict[str, str]] = []
        for _ in range(MOST_PAGES):
            body, headers = self._request("GET", f"Job/{job.id}/Tasks", query, missing=f"no job {job.id} on the head node")
            tasks += _objects(_parse(body))
            more = headers.get("x-ms-continuation-queryid")
            if not more:
                break
            query = {**query, "QueryId": more}
        return tasks

    def _log_file(self, job: Job, node_path: str) -> Tuple[str, str]:
        """(folder, path below it) where this machine reads a task's log: the job's own log folder,
        <shared_dir>/logs/<spec name>/<job id>.node-<i>.out (with --id, no spec: <a folder>/logs/<a
        name>/<job id>.node-<i>.out), on the
        shared folder as mounted here (TRAINSPEC_SHARED_DIR, else as the nodes name it). The
        path is the head node's word: one anywhere else (`/etc/passwd`, `../`) is refused."""
        path = node_path.replace("${CCP_JOBID}", job.id).replace("$CCP_JOBID", job.id)
        shared = getattr(self.context.settings, "shared_dir", None)
        if shared and self.context.spec_name:
            root, name = shared.rstrip("/"), self.context.spec_name
        else:  # with --id there is no spec: trainspec's jobs write their logs in <shared_dir>/logs/<name>/
            root, _, rest = path.rpartition("/logs/")
            name = rest.partition("/")[0]
        below = path[len(root) + 1:].lstrip("/").split("/") if path.startswith(root + "/") else []  # root `/`: //logs
        if len(below) != 3 or below[:2] != ["logs", name] or not name or root[:1] not in ("", "/") \
                or not re.fullmatch(rf"{re.escape(job.id)}\.node-\d+\.out", below[2]):  # as lower.py names it
            raise SubmitError(f"the head node names {node_path!r} as the log of a task of job {job.id}: that is not "
                              f"in the job's log folder ({root or '<shared_dir>'}/logs/{name or '<name>'}/), not read",
                              "trainspec reads a job's logs only in the folder its job file names; ask the cluster's "
                              "administrator who changed the task")
        here = self.context.env.get("TRAINSPEC_SHARED_DIR")
        return (here.rstrip("/") or "/") if here else root or "/", "/".join(below)

    def logs(self, job: Job, cursor: Any, all_ranks: bool) -> Tuple[List[LogLine], Any]:
        """Each task's StdOutFilePath on the shared folder, from where the last call stopped; a
        log not readable here: the task's Output (its first bytes) once it ended, and where the
        log is."""
        cursor = dict(cursor or {})
        lines: List[LogLine] = []
        for task in self._tasks(job):
            task_name = task.get("Name", "")
            node = task_name[len("node-"):] if task_name.startswith("node-") else task_name or task.get("TaskId", "?")
            if node != "0" and not all_ranks:
                continue
            final = task.get("State") in TASK_FINAL
            node_path = task.get("StdOutFilePath", "")
            offset = cursor.get(node, 0) if isinstance(cursor.get(node, 0), int) else 0
            data = self._read_log(job, node_path, offset) if node_path else None
            if data is not None:
                end = len(data) if final and len(data) < LOG_CHUNK else data.rfind(b"\n") + 1
                if end == 0 and len(data) == LOG_CHUNK:  # one line longer than a chunk: in pieces
                    end = len(data)
                text = data[:end].decode("utf-8", "replace")
                lines += [LogLine(node, line) for line in text.splitlines()]
                cursor[node] = offset + end
            elif final and cursor.get(node) != "told":
                output = task.get("Output", "")
                lines += [LogLine(node, line) for line in output.splitlines()]
                where = (f"{node_path.replace('$CCP_JOBID', job.id)} on the shared folder, not readable here "
                         "(set TRAINSPEC_SHARED_DIR to where it is mounted)" if node_path else "not kept")
                lines.append(LogLine(node, f"trainspec: {'that was the first bytes; ' if output else ''}"
                                           f"the task's log is {where}"))
                cursor[node] = "told"
        return lines, cursor

    def _read_log(self, job: Job, node_path: str, offset: int) -> Optional[bytes]:
        """A chunk of the task's log from ``offset``, opened without following a link (a job
        that replaced its log, or its log folder, with one is refused); None when it is not
        readable here."""
        root, relative = self._log_file(job, node_path)
        try:
            return read_below(root, relative, offset, LOG_CHUNK)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise SubmitError(f"{root}/{relative} is reached through a symbolic link (the job replaced its log "
                                  "or its log folder with one): not followed, not read",
                                  "the job writes its own log files: look at what it did to them") from None
            return None


SCHEDULER = HPCPackScheduler
