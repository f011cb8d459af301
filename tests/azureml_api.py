"""A fake Azure ML, at the HTTP level, for tests/test_submit_azureml.py: azure-ai-ml and
azure-storage-blob speak to it through `requests` exactly as they would to Azure, and it answers
as the documented REST API does (docs/targets/azureml.md, "Submit, follow, status, cancel"):

    ARM (management.azure.com)   GET/PUT .../workspaces/W/jobs/NAME, POST .../jobs/NAME/cancel (202 +
                                 Location), GET .../workspaces/W (its discovery URL), code and
                                 environment versions, the default datastore and its SAS, the
                                 versions of the data assets and environments registered (``assets``)
    discovery                    {"api": <the run history's host>}
    run history                  GET .../runs/NAME/details: status, error, logFiles (name -> SAS URL)
    storage (*.blob.core...)     blob uploads (PUT, 201) and the log files' SAS GETs

Every request is answered in-process by ``Fake.answer``, reached by patching
``requests.adapters.HTTPAdapter.send`` (azure-ai-ml's pipelines and azure-storage-blob's own
pipeline both end there: azureml.md §7). Unknown requests get a 404 and are kept in ``unknown``
so a test can assert there were none.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Dict, List, Optional, Tuple
from urllib.parse import urlsplit

ARM = "management.azure.com"
API = "fake-region.api.azureml.ms"
STORE = "fakestore.blob.core.windows.net"
STUDIO = "https://ml.azure.com/runs/{name}?wsid=/subscriptions/{sub}/resourcegroups/{rg}/workspaces/{ws}"
WORKSPACE_PATH = re.compile(r"^/subscriptions/([^/]+)/resourceGroups/([^/]+)/providers/"
                            r"Microsoft\.MachineLearningServices/workspaces/([^/]+)(/.*)?$", re.I)
RUN_PATH = re.compile(r"^/history/v1\.0/subscriptions/[^/]+/resourceGroups/[^/]+/providers/"
                      r"Microsoft\.MachineLearningServices/workspaces/[^/]+/(?:experimentids/[^/]+/)?runs/([^/]+)/details$",
                      re.I)


@dataclass
class FakeJob:
    name: str
    body: dict
    statuses: List[str]  # each GET moves one step; the last one stays
    error: Optional[Tuple[str, str]] = None  # (code, message) in the run history once final
    ran: Optional[int] = None  # seconds between the run's start and end, once final
    logs: Dict[str, List[str]] = field(default_factory=dict)  # file name -> its lines, growing per step
    seen: int = 0

    @property
    def status(self) -> str:
        return self.statuses[min(self.seen, len(self.statuses) - 1)]


class Fake:
    """The workspace ``sub/rg/ws`` with the compute clusters ``computes``."""

    def __init__(self, sub="sub", rg="rg", ws="ws", computes=("gpu-cluster",), quota_nodes=8) -> None:
        self.sub, self.rg, self.ws = sub, rg, ws
        self.computes = set(computes)
        # registered assets by kind ("data", "environments"): each has one version, "1", its latest
        self.assets: Dict[str, set] = {"data": set(), "environments": set()}
        self.quota_nodes = quota_nodes
        self.jobs: Dict[str, FakeJob] = {}
        self.script: Dict[str, dict] = {}  # job name -> how it will run: statuses, error, logs
        self.default = {"statuses": ["NotStarted", "Queued", "Running", "Running", "Completed"]}
        self.requests: List[Tuple[str, str]] = []
        self.unknown: List[Tuple[str, str]] = []
        self.uploads: Dict[str, bytes] = {}
        self.job_puts = 0
        self.race = False  # another submit of the same job gets in between our find and our PUT
        self.cancels: List[str] = []
        self.lock = threading.Lock()

    # --- the answer to one request ----------------------------------------------------------------

    def answer(self, method: str, url: str, body: bytes) -> Tuple[int, object, Dict[str, str]]:
        with self.lock:
            self.requests.append((method, url))
            parts = urlsplit(url)
            try:
                if parts.hostname == ARM:
                    return self._arm(method, parts.path, body)
                if parts.hostname == API:
                    return self._history(method, parts.path)
                if parts.hostname == STORE:
                    return self._storage(method, parts.path, parts.query, body)
            except _Answer as answer:
                return answer.args
            self.unknown.append((method, url))
            return 404, {"error": {"code": "NotFound", "message": f"the fake does not know {method} {url}"}}, {}

    def _arm(self, method: str, path: str, body: bytes):
        match = WORKSPACE_PATH.match(path)
        if not match:
            raise _Answer(404, {"error": {"code": "NotFound", "message": path}}, {})
        sub, rg, ws, rest = match.group(1), match.group(2), match.group(3), match.group(4) or ""
        if (sub, rg, ws) != (self.sub, self.rg, self.ws):  # ARM's own answer for a workspace not there
            raise _Answer(404, {"error": {"code": "ResourceNotFound", "message":
                                          f"The Resource 'Microsoft.MachineLearningServices/workspaces/{ws}' under "
                                          f"resource group '{rg}' was not found. For more details please go to "
                                          "https://aka.ms/ARMResourceNotFoundFix"}}, {})
        base = f"https://{ARM}{path[:len(path) - len(rest)]}"
        if rest == "":
            return 200, {"id": path, "name": ws, "location": "westeurope",
                         "properties": {"discoveryUrl": f"https://{API}/discovery", "workspaceId": "0000-ws"}}, {}
        job = re.match(r"^/jobs/([^/]+)(/cancel)?$", rest)
        if job and method == "GET" and not job.group(2):
            known = self.jobs.get(job.group(1))
            if known is None:
                return 404, {"error": {"code": "UserError", "message": f"Job {job.group(1)} not found."}}, {}
            known.seen += 1
            return 200, self._job_body(known, base), {}
        if job and method == "PUT":
            return self._put_job(job.group(1), json.loads(body), base)
        if job and method == "POST" and job.group(2):
            known = self.jobs.get(job.group(1))
            if known is None:
                return 404, {"error": {"code": "UserError", "message": "Job not found."}}, {}
            self.cancels.append(known.name)
            if known.status not in ("Completed", "Failed", "Canceled"):
                known.statuses = ["CancelRequested", "Canceled"]
                known.seen = 0
            return 202, None, {"Location": f"{base}/operationResults/cancel-{known.name}", "Retry-After": "0"}
        if rest.startswith("/operationResults/"):
            return 200, {}, {}
        if re.match(r"^/codes/[^/]+/versions$", rest):  # the code lookup by content hash: not uploaded yet
            return 200, {"value": []}, {}
        pending = re.match(r"^/codes/([^/]+)/versions/([^/]+)/startPendingUpload$", rest)
        if pending:
            blob = f"https://{STORE}/code/{pending.group(1)}"
            return 200, {"blobReferenceForConsumption": {
                "blobUri": blob, "storageAccountArmId": "/subscriptions/sub/storage",
                "credential": {"credentialType": "SAS", "sasUri": blob + "?sv=2023&sig=fake"}},
                "pendingUploadId": "up-1", "pendingUploadType": "TemporaryBlobReference"}, {}
        registered = re.match(r"^/(data|environments)/([^/]+)(/versions(?:/1)?)?$", rest)
        if registered and method == "GET" and registered.group(2) in self.assets[registered.group(1)]:
            kind, name, versions = registered.groups()
            workspace = path[:len(path) - len(rest)]
            if not versions:  # the asset itself: azure-ai-ml reads @latest from it
                return 200, {"id": f"{workspace}/{kind}/{name}", "name": name,
                             "properties": {"latestVersion": "1", "nextVersion": "2"}}, {}
            version = self._asset(workspace, kind, name)
            return 200, version if versions.endswith("/1") else {"value": [version]}, {}
        asset = re.match(r"^/(codes|environments)/([^/]+)/versions/([^/]+)$", rest)
        if asset and method == "PUT":
            sent = json.loads(body)
            sent.update({"id": path, "name": asset.group(3), "type": f"Microsoft.MachineLearningServices/workspaces/{asset.group(1)}/versions"})
            return 200, sent, {}
        if re.match(r"^/datastores/?$", rest) or re.match(r"^/datastores/workspaceblobstore$", rest):
            return 200, self._datastore(base), {}
        if rest.startswith("/datastores/") and method == "GET":
            return 200, self._datastore(base), {}
        if re.match(r"^/datastores/[^/]+/listSecrets$", rest):
            return 200, {"secretsType": "Sas", "sasToken": "sv=2023&sig=fake"}, {}
        raise _Answer(404, {"error": {"code": "NotFound", "message": f"fake: {method} {rest}"}}, {})

    def _asset(self, workspace: str, kind: str, name: str) -> dict:
        """Version 1 of a registered data asset (a folder on the default datastore) or environment."""
        properties = ({"dataType": "uri_folder", "dataUri": f"azureml://datastores/workspaceblobstore/paths/{name}/"}
                      if kind == "data" else {"image": "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04"})
        return {"id": f"{workspace}/{kind}/{name}/versions/1", "name": "1",
                "type": f"Microsoft.MachineLearningServices/workspaces/{kind}/versions", "properties": properties}

    def _datastore(self, base: str) -> dict:
        one = {"id": f"{base}/datastores/workspaceblobstore", "name": "workspaceblobstore",
               "properties": {"datastoreType": "AzureBlob", "accountName": "fakestore", "containerName": "data",
                              "endpoint": "core.windows.net", "protocol": "https", "isDefault": True,
                              "credentials": {"credentialsType": "AccountKey"}}}
        return {"value": [one], **one}

    def _put_job(self, name: str, body: dict, base: str):
        self.job_puts += 1
        properties = body.get("properties", {})
        compute = (properties.get("computeId") or "").rsplit("/", 1)[-1]
        if compute and compute not in self.computes:
            return 400, {"error": {"code": "UserError", "message":
                                   f"AzureMLCompute cluster {compute} does not exist in workspace {self.ws}."}}, {}
        nodes = (properties.get("resources") or {}).get("instanceCount") or 1
        if nodes > self.quota_nodes:
            return 400, {"error": {"code": "UserError", "message":
                                   "JobNodeCountExceedsCoreQuota: The specified subscription has a Standard NCADSA100v4 "
                                   f"family vCPU quota of {self.quota_nodes * 24} and is less than the requested job "
                                   f"node count of {nodes}."}}, {}
        if self.race and name not in self.jobs:
            self.jobs[name] = FakeJob(name, body, list(self.default["statuses"]))
        if name in self.jobs:  # Azure ML: a job's definition cannot change once submitted
            return 400, {"error": {"code": "UserError", "message": f"A job with name {name} already exists."}}, {}
        plan = dict(self.default, **self.script.get(name, {}))
        properties["status"] = "NotStarted"
        self.jobs[name] = FakeJob(name, body, list(plan["statuses"]), plan.get("error"), plan.get("ran"),
                                 dict(plan.get("logs", {})))
        return 201, self._job_body(self.jobs[name], base), {}

    def _job_body(self, job: FakeJob, base: str) -> dict:
        properties = dict(job.body.get("properties", {}))
        properties["status"] = job.status
        properties["services"] = {"Studio": {"jobServiceType": "Studio", "endpoint": STUDIO.format(
            name=job.name, sub=self.sub, rg=self.rg, ws=self.ws)}}
        return {"id": f"{base}/jobs/{job.name}", "name": job.name,
                "type": "Microsoft.MachineLearningServices/workspaces/jobs", "properties": properties}

    def _history(self, method: str, path: str):
        if path == "/discovery":
            return 200, {"api": f"https://{API}", "history": f"https://{API}"}, {}
        match = RUN_PATH.match(path)
        if match and match.group(1) in self.jobs:
            job = self.jobs[match.group(1)]
            files = {name: f"https://{STORE}/logs/{job.name}/{name}?sv=2023&sig=fake" for name in job.logs}
            details = {"runId": job.name, "status": job.status, "logFiles": files, "target": "gpu-cluster"}
            if job.ran is not None and job.status in ("Completed", "Failed", "Canceled"):
                details["startTimeUtc"] = "2026-11-26T10:00:00.000Z"
                details["endTimeUtc"] = (datetime(2026, 11, 26, 10, 0, tzinfo=timezone.utc)
                                         + timedelta(seconds=job.ran)).isoformat().replace("+00:00", "Z")
            if job.error and job.status in ("Failed", "Canceled"):
                details["error"] = {"error": {"code": job.error[0], "message": job.error[1]}}
            return 200, details, {}
        return 404, {"error": {"code": "UserError", "message": "run not found"}}, {}

    def _storage(self, method: str, path: str, query: str, body: bytes):
        logs = re.match(r"^/logs/([^/]+)/(.+)$", path)
        if logs and method == "GET":
            job = self.jobs[logs.group(1)]
            lines = job.logs.get(logs.group(2), [])
            # a file grows as the job runs: a line more per status step, all of it once final
            final = job.status in ("Completed", "Failed", "Canceled")
            shown = lines if final else lines[:job.seen]
            return 200, ("".join(line + "\n" for line in shown)).encode(), {"Content-Type": "text/plain"}
        if method in ("PUT", "POST"):
            self.uploads[path] = self.uploads.get(path, b"") + (body or b"")
            digest = base64.b64encode(hashlib.md5(body or b"").digest()).decode()
            return 201 if "comp=" not in query else 200, b"", {"ETag": '"0x1"', "Last-Modified": "Thu, 26 Nov 2026 10:00:00 GMT",
                              "x-ms-request-server-encrypted": "true", "Content-MD5": digest}
        if method in ("GET", "HEAD"):
            return 404, b"", {"x-ms-error-code": "BlobNotFound"}
        return 404, b"", {}


class _Answer(Exception):
    pass


def patch_requests(monkeypatch, fake: Fake) -> None:
    """Every HTTP request of this process goes to ``fake`` (nothing reaches the network)."""
    import requests.adapters
    import urllib3

    def send(adapter, request, **kwargs):
        body = request.body or b""
        if hasattr(body, "read"):
            body = body.read()
        if isinstance(body, str):
            body = body.encode()
        status, payload, headers = fake.answer(request.method, request.url, bytes(body))
        if isinstance(payload, (bytes, str)):
            data = payload.encode() if isinstance(payload, str) else payload
        else:
            data = b"" if payload is None else json.dumps(payload).encode()
            headers = {"Content-Type": "application/json", **headers}
        headers = {"Content-Length": str(len(data)), "x-ms-request-id": "fake", **headers}
        raw = urllib3.HTTPResponse(body=io.BytesIO(data), headers=headers, status=status,
                                   preload_content=False, decode_content=False, request_method=request.method)
        return adapter.build_response(request, raw)

    monkeypatch.setattr(requests.adapters.HTTPAdapter, "send", send)
