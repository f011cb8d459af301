"""A fake Kubernetes API server at the HTTP level, on loopback, for `trainspec submit -t kubernetes`.

No API server can run here (shared/reference/kubernetes.md), so this speaks the part of the API
the kubernetes client uses for a job, the way kube-apiserver answers it:

- server-side apply: ``PATCH`` with ``application/apply-patch+yaml``, ``fieldManager`` required,
  ``force`` false; it creates or updates the object (its spec; the status stays the
  controller's), keeps no managedFields, and every applied object is first checked against the
  pinned CRDs and Kubernetes' own schemas (kube_schema.validate): a 422 Invalid otherwise;
- ``GET`` of a TrainJob / PyTorchJob / LocalQueue / namespace; ``LIST`` pods by ``labelSelector``;
  a pod's ``log``; ``DELETE`` with ``propagationPolicy`` (Foreground: the object stays, with a
  deletionTimestamp, until the next read);
- the refusals as Status objects: 404 with ``details`` for an object that does not exist, 404
  ``namespaces "x" not found`` when applying into a namespace that does not exist, 404 without
  details ("the server could not find the requested resource") for an API the cluster does not
  serve (a CRD not installed), 403 for a namespace the user may not touch, 401 without the token.

The controllers are emulated: each GET of a job is one tick of its script (SCRIPTS), the
conditions the Kubeflow controllers write (Trainer v2.3: Suspended/Complete/Failed with JobSet's
reasons and the Trainer's DeadlineExceeded; training-operator v1.9: Created/Running/Succeeded/
Failed with its <Kind><Event> reasons and its deadline message), and the pods they make, named and
labelled as JobSet (``<job>-node-0-<i>-<suffix>``, ``jobset.sigs.k8s.io/jobset-name``,
``batch.kubernetes.io/job-completion-index``) and the training-operator (``<job>-master-0``,
``<job>-worker-<i>``, ``training.kubeflow.org/job-name``) name them. Right after apply there are
no pods (the race of kubeflow/sdk #182).
"""

from __future__ import annotations

import copy
import json
import re
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Set, Tuple
from urllib.parse import parse_qs, urlsplit

import yaml

import kube_schema

TOKEN = "fake-token"
APIS = {  # plural -> (group/version, kind)
    "trainjobs": ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
    "pytorchjobs": ("kubeflow.org/v1", "PyTorchJob"),
    "localqueues": ("kueue.x-k8s.io/v1beta1", "LocalQueue"),
}
# what a job's pods do at each tick (a GET of the job): (pod phase or None: no pods yet, log lines per pod)
# and the final condition at the last tick
SCRIPTS = {
    "complete": ["none", "pending", "running", "running", "complete"],
    "fail": ["none", "pending", "running", "failed"],
    "deadline": ["none", "running", "deadline"],
    "forever": ["none", "running"],
    "image-pull": ["none", "image-pull"],
}
DELETING_READS = 2  # a job deleted in the foreground is still read (with its deletionTimestamp) this often
LINES_AT = {"none": 0, "pending": 0, "image-pull": 0, "running": 2, "complete": 3, "failed": 3, "deadline": 2}


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(type_: str, reason: str, message: str, status: str = "True") -> Dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": now()}


class Cluster:
    """The cluster's state and the script its controllers follow; the server reads and writes it."""

    def __init__(self, namespaces=("default", "ml"), apis=("trainjobs", "pytorchjobs", "localqueues"),
                 queues=(("ml", "team-a"),), forbidden=(), script="complete", said=(), failure=None):
        self.namespaces: Set[str] = set(namespaces)
        self.said: Tuple[str, ...] = tuple(said)  # what every pod prints once it ended, after its own lines
        self.failure: Optional[str] = failure  # the Failed condition's message, when not the controller's
        self.apis: Set[str] = set(apis)
        self.forbidden: Set[str] = set(forbidden)
        self.script = script
        self.objects: Dict[Tuple[str, str, str], Dict[str, Any]] = {}  # (plural, namespace, name)
        for namespace, queue in queues:
            self.objects[("localqueues", namespace, queue)] = {"apiVersion": APIS["localqueues"][0],
                                                               "kind": "LocalQueue",
                                                               "metadata": {"name": queue, "namespace": namespace}}
        self.ticks: Dict[Tuple[str, str, str], int] = {}
        self.applied: List[Tuple[str, Dict[str, str], Dict[str, Any]]] = []  # (path, query, body)
        self.deleted: List[Tuple[str, Optional[str]]] = []  # (path, propagationPolicy)
        self.requests: List[Tuple[str, str]] = []  # (method, path)
        self.invalid: List[str] = []  # what kube_schema found in an applied object
        self.lock = threading.Lock()

    # --- the controllers ---------------------------------------------------------------------------

    def step(self, key) -> str:
        """The job's step now; a GET of it moves it on."""
        obj = self.objects[key]
        steps = SCRIPTS[self.script]
        spec = obj.get("spec", {})
        suspended = spec.get("suspend") or spec.get("runPolicy", {}).get("suspend")
        if suspended:
            return "suspended"
        return steps[min(self.ticks.get(key, 0), len(steps) - 1)]

    def advance(self, key) -> None:
        obj = self.objects[key]
        spec = obj.get("spec", {})
        if spec.get("suspend") or spec.get("runPolicy", {}).get("suspend"):  # Kueue admits it at the next read
            obj["status"] = self.status_of(obj, "suspended")
            spec.pop("suspend", None)
            spec.get("runPolicy", {}).pop("suspend", None)
            return
        self.ticks[key] = self.ticks.get(key, 0) + 1
        obj["status"] = self.status_of(obj, self.step(key))

    def status_of(self, obj: Dict[str, Any], step: str) -> Dict[str, Any]:
        name, kind = obj["metadata"]["name"], obj["kind"]
        if kind == "TrainJob":
            conditions = {
                "suspended": [condition("Suspended", "Suspended", "TrainJob is suspended")],
                "complete": [condition("Complete", "AllJobsCompleted", "jobset completed successfully")],
                "failed": [condition("Failed", "FailedJobs", self.failure or "jobset failed: job node-0 failed")],
                "deadline": [condition("Failed", "DeadlineExceeded", "TrainJob exceeded its activeDeadlineSeconds")],
            }.get(step, [])
            nodes = obj["spec"]["trainer"]["numNodes"]
            active = nodes if step in ("pending", "running", "image-pull") else 0
            return {"conditions": conditions, "jobsStatus": [{
                "name": "node", "active": active, "ready": nodes if step == "running" else 0,
                "succeeded": nodes if step == "complete" else 0, "failed": 1 if step == "failed" else 0,
                "suspended": 0}]}
        conditions = [condition("Created", "PyTorchJobCreated", f"PyTorchJob {name} is created.")]
        if step == "suspended":
            conditions.append(condition("Suspended", "PyTorchJobSuspended", f"PyTorchJob {name} is suspended."))
        if step in ("running", "complete", "failed", "deadline"):
            conditions.append(condition("Running", "PyTorchJobRunning", f"PyTorchJob {name} is running.",
                                        "True" if step == "running" else "False"))
        if step == "complete":
            conditions.append(condition("Succeeded", "PyTorchJobSucceeded",
                                        f"PyTorchJob {name} is successfully completed."))
        if step == "failed":
            conditions.append(condition("Failed", "PyTorchJobFailed", f"PyTorchJob {name} is failed because 1 "
                                        "Master replica(s) failed."))
        if step == "deadline":
            conditions.append(condition("Failed", "PyTorchJobFailed", f"Job {name} has failed because it was active "
                                        "longer than specified deadline"))
        return {"conditions": conditions}

    def pods(self, namespace: str) -> List[Dict[str, Any]]:
        """The pods the controllers made for every job in ``namespace``, as they are now."""
        out = []
        for (plural, ns, name), obj in self.objects.items():
            if ns != namespace or plural not in ("trainjobs", "pytorchjobs"):
                continue
            step = self.step((plural, ns, name))
            if step in ("none", "suspended"):
                continue
            phase = {"pending": "Pending", "image-pull": "Pending", "running": "Running", "complete": "Succeeded",
                     "failed": "Failed", "deadline": "Failed"}[step]
            for index, (pod, labels, container) in enumerate(self._pod_names(obj)):
                status: Dict[str, Any] = {"phase": phase}
                if step == "image-pull":
                    status["containerStatuses"] = [{"name": container, "image": "registry.invalid/x:1", "state": {
                        "waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image '
                                    '"registry.invalid/x:1"'}}}]
                out.append({"metadata": {"name": pod, "namespace": ns, "labels": labels}, "status": status,
                            "_lines": [f"node {index} line {k}" for k in range(LINES_AT[step])]
                            + (list(self.said) if step in ("complete", "failed", "deadline") else []),
                            "_container": container})
        return out

    @staticmethod
    def _pod_names(obj: Dict[str, Any]) -> List[Tuple[str, Dict[str, str], str]]:
        name = obj["metadata"]["name"]
        if obj["kind"] == "TrainJob":
            return [(f"{name}-node-0-{i}-x{i}k7z", {"jobset.sigs.k8s.io/jobset-name": name,
                                                    "jobset.sigs.k8s.io/replicatedjob-name": "node",
                                                    "batch.kubernetes.io/job-completion-index": str(i)}, "node")
                    for i in range(obj["spec"]["trainer"]["numNodes"])]
        replicas = obj["spec"]["pytorchReplicaSpecs"]
        out = [(f"{name}-master-0", {"training.kubeflow.org/job-name": name,
                                     "training.kubeflow.org/replica-type": "master",
                                     "training.kubeflow.org/replica-index": "0"}, "pytorch")]
        for i in range(replicas.get("Worker", {}).get("replicas", 0)):
            out.append((f"{name}-worker-{i}", {"training.kubeflow.org/job-name": name,
                                               "training.kubeflow.org/replica-type": "worker",
                                               "training.kubeflow.org/replica-index": str(i)}, "pytorch"))
        return out

    # --- the server ----------------------------------------------------------------------------------

    def start(self) -> "Cluster":
        cluster = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                cluster.handle(self, "GET")

            def do_PATCH(self):
                cluster.handle(self, "PATCH")

            def do_DELETE(self):
                cluster.handle(self, "DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def kubeconfig(self, namespace: str = "default", token: str = TOKEN) -> str:
        return yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester", "namespace": namespace}}]})

    def handle(self, request: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(request.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        with self.lock:
            self.requests.append((method, parts.path))
            if request.headers.get("Authorization") != f"Bearer {TOKEN}":
                code, answer = 401, _status(401, "Unauthorized", "Unauthorized")
            else:
                code, answer = self.route(method, parts.path, query, request.headers.get("Content-Type", ""), body)
        data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        request.send_response(code)
        request.send_header("Content-Type", "text/plain" if isinstance(answer, bytes) else "application/json")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)

    def route(self, method: str, path: str, query: Dict[str, str], content_type: str, body: bytes):
        match = re.fullmatch(r"/api/v1/namespaces/([^/]+)", path)
        if match and method == "GET":
            ns = match.group(1)
            return (200, {"kind": "Namespace", "metadata": {"name": ns}}) if ns in self.namespaces else \
                (404, _status(404, "NotFound", f'namespaces "{ns}" not found', {"name": ns, "kind": "namespaces"}))
        match = re.fullmatch(r"/api/v1/namespaces/([^/]+)/(configmaps|pods)(?:/([^/]+))?(/log)?", path)
        if match:
            ns, plural, name, log = match.groups()
            if ns in self.forbidden:
                return 403, _status(403, "Forbidden", f'{plural} is forbidden: User "tester" cannot {method.lower()} '
                                    f'resource "{plural}" in API group "" in the namespace "{ns}"')
            if plural == "configmaps":
                return self.object(method, ("configmaps", ns, name), "v1", "ConfigMap", query, content_type, body)
            if name is None and method == "GET":
                return 200, {"kind": "PodList", "apiVersion": "v1", "items": [
                    {k: v for k, v in pod.items() if not k.startswith("_")} for pod in self.pods(ns)
                    if _selected(pod, query.get("labelSelector", ""))]}
            if log and method == "GET":
                pod = next((p for p in self.pods(ns) if p["metadata"]["name"] == name), None)
                if pod is None:
                    return 404, _status(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
                if query.get("container") != pod["_container"]:
                    return 400, _status(400, "BadRequest", f"container {query.get('container')} is not valid for "
                                        f"pod {name}")
                if pod["status"]["phase"] == "Pending":
                    return 400, _status(400, "BadRequest", f'container "{pod["_container"]}" in pod "{name}" is '
                                        "waiting to start: ContainerCreating")
                return 200, "".join(line + "\n" for line in pod["_lines"]).encode()
        match = re.fullmatch(r"/apis/([^/]+/[^/]+)/namespaces/([^/]+)/([^/]+)/([^/]+)", path)
        if match:
            group_version, ns, plural, name = match.groups()
            if plural not in self.apis or APIS[plural][0] != group_version:
                return 404, _status(404, "NotFound", "the server could not find the requested resource")
            if ns in self.forbidden:
                return 403, _status(403, "Forbidden", f'{plural}.{group_version.split("/")[0]} "{name}" is '
                                    f'forbidden: User "tester" cannot {method.lower()} resource "{plural}" in the '
                                    f'namespace "{ns}"')
            return self.object(method, (plural, ns, name), group_version, APIS[plural][1], query, content_type, body)
        return 404, _status(404, "NotFound", "the server could not find the requested resource")

    def object(self, method, key, api_version, kind, query, content_type, body):
        plural, ns, name = key
        missing = (404, _status(404, "NotFound", f'{plural} "{name}" not found',
                                {"name": name, "group": api_version.rpartition("/")[0], "kind": plural}))
        if method == "GET":
            if key not in self.objects:
                return missing
            obj = self.objects[key]
            if obj.get("metadata", {}).get("deletionTimestamp"):  # Foreground: gone once its pods are
                if obj["_reads_left"] == 0:
                    del self.objects[key]
                    return missing
                obj["_reads_left"] -= 1
            elif plural in ("trainjobs", "pytorchjobs"):
                self.advance(key)
            return 200, {k: v for k, v in obj.items() if not k.startswith("_")}
        if method == "DELETE":
            self.deleted.append(("/".join(key), query.get("propagationPolicy")))
            if key not in self.objects:
                return missing
            if query.get("propagationPolicy") == "Foreground" and plural in ("trainjobs", "pytorchjobs"):
                meta = self.objects[key]["metadata"]
                meta["deletionTimestamp"] = now()
                meta["finalizers"] = ["foregroundDeletion"]
                self.objects[key]["_reads_left"] = DELETING_READS
                return 200, self.objects[key]
            return 200, self.objects.pop(key)
        if method == "PATCH":
            if content_type != "application/apply-patch+yaml":
                return 415, _status(415, "UnsupportedMediaType", f"the body of the request was in an unknown "
                                    f"format - accepted media types include: application/apply-patch+yaml "
                                    f"(got {content_type})")
            if not query.get("fieldManager"):
                return 400, _status(400, "BadRequest", "PATCH requests require fieldManager for apply")
            if query.get("force", "false") != "false":
                return 400, _status(400, "BadRequest", "trainspec applies with force=false")
            if ns not in self.namespaces:
                return 404, _status(404, "NotFound", f'namespaces "{ns}" not found', {"name": ns, "kind": "namespaces"})
            doc = yaml.safe_load(body)
            if (doc.get("apiVersion"), doc.get("kind")) != (api_version, kind) or doc["metadata"].get("name") != name \
                    or doc["metadata"].get("namespace", ns) != ns:
                return 400, _status(400, "BadRequest", "the object does not match the request's path")
            errors = kube_schema.validate(doc)
            if errors:
                self.invalid += errors
                return 422, _status(422, "Invalid", f'{kind}.{api_version} "{name}" is invalid: ' + "; ".join(errors))
            self.applied.append(("/".join(key), query, copy.deepcopy(doc)))
            stored = self.objects.get(key, {})
            stored.update({k: v for k, v in doc.items() if k != "status"})
            stored["metadata"] = {**doc["metadata"], "namespace": ns, "uid": f"uid-{len(self.applied)}",
                                  "creationTimestamp": stored.get("metadata", {}).get("creationTimestamp", now())}
            stored["metadata"].pop("managedFields", None)
            self.objects[key] = stored
            return 200, {k: v for k, v in stored.items() if not k.startswith("_")}
        return 405, _status(405, "MethodNotAllowed", f"{method} is not supported here")


def _selected(pod: Dict[str, Any], selector: str) -> bool:
    """key=value[,key=value]: the only label selectors the fake reads."""
    labels = pod["metadata"]["labels"]
    wanted = [term.split("=", 1) for term in selector.split(",") if term]
    return all(labels.get(key) == value for key, value in wanted)


def _status(code: int, reason: str, message: str, details: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "details": details or {}, "code": code}
