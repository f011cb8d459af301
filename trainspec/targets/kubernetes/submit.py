"""`trainspec submit -t kubernetes`: the compiled job.yaml through the Kubernetes API, with the
``kubernetes`` client (``trainspec[kubernetes]``) and the credentials kubectl uses (KUBECONFIG or
~/.kube/config, its current context; in a pod, the service account).

==========  =====================================================================================
submit      job.yaml's documents renamed to the job's name (``rename``), then each one
            server-side applied in order (PATCH ``application/apply-patch+yaml``, field manager
            ``trainspec``, force=false): the ConfigMaps first, the TrainJob or PyTorchJob last;
            with a Kueue queue, its LocalQueue must exist first; the job carries the full digest
            in its annotation ``trainspec_digest`` (api.DIGEST_KEY: a label value holds 63 characters)
find        GET the TrainJob (or PyTorchJob, ``targets.kubernetes.api``) of that name: 404 is None
status      the job's conditions (``trainjob_state``, ``pytorchjob_state``), and while it is not
            final its pods: an image that cannot be pulled is said in the detail
logs        the pods' logs (the JobSet's pods by ``jobset.sigs.k8s.io/jobset-name``, the
            training-operator's by ``training.kubeflow.org/job-name``): node 0's pod, or every
            node's; the cursor is the number of lines already printed of each pod
cancel      DELETE the job (propagationPolicy Foreground: its pods go first), then its ConfigMaps
==========  =====================================================================================

Each call is bounded by REQUEST_TIMEOUT; a refusal is one line with the API server's own message
and what to do (``_refusal``).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from trainspec.jobs.api import DIGEST_KEY, Job, LogLine, MissingClient, Scheduler, State, Status, SubmitError
from trainspec.targets.kubernetes.lower import JOB_FILE
from trainspec.targets.kubernetes.settings import NAME

REQUEST_TIMEOUT = (10, 60)  # s: connecting, then each answer of the API server
RETRIES = 2  # connection attempts the client repeats before it says the server is unreachable
FIELD_MANAGER = "trainspec"
APPLY = "application/apply-patch+yaml"
MESSAGE_LIMIT = 400  # characters of the API server's message kept in one line
CONFIGMAP_SUFFIXES = ("-shim", "-code")  # the ConfigMaps lower.py names after the job
IMAGE_PULL = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
KUEUE = ("kueue.x-k8s.io", "v1beta1", "localqueues")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


@dataclass(frozen=True)
class Kind:
    """A job kind as the API serves it, and how its pods are found."""

    kind: str
    group: str
    version: str
    plural: str
    selector: str  # the label on every pod of the job, = the job's name
    container: str  # the training container of each pod
    install: str  # what to install when the cluster does not serve it

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


# Kubeflow Trainer v2.3 (JobSet's pods) and training-operator v1.9 (its own pods)
KINDS: Dict[str, Kind] = {
    "trainjob": Kind("TrainJob", "trainer.kubeflow.org", "v1alpha1", "trainjobs", "jobset.sigs.k8s.io/jobset-name",
                     "node", "install Kubeflow Trainer v2.3 (its CRDs and the torch-distributed runtime)"),
    "pytorchjob": Kind("PyTorchJob", "kubeflow.org", "v1", "pytorchjobs", "training.kubeflow.org/job-name",
                       "pytorch", "install the Kubeflow training-operator v1.9, or set targets.kubernetes.api: "
                       "trainjob"),
}
BY_KIND = {kind.kind: key for key, kind in KINDS.items()}


# --- the documents under the job's name ------------------------------------------------------------

def rename(documents: List[Dict[str, Any]], name: str) -> List[Dict[str, Any]]:
    """job.yaml's documents with the job (a TrainJob or PyTorchJob, named after the spec) named
    ``name``, its ConfigMaps ``<name>-shim`` / ``<name>-code``, and the pod volumes that mount them
    following. Those are the only places lower.py writes a name of its own: every other string (an
    env value, a volume's sub_path, a queue) is the user's and stays as written, even when it equals
    the spec's name. Checked: every ConfigMap a pod mounts is one of the renamed documents."""
    jobs = [doc for doc in documents if doc.get("kind") in BY_KIND]
    if len(jobs) != 1:
        raise SubmitError(f"{JOB_FILE} holds {len(jobs)} TrainJob/PyTorchJob documents, not one",
                          "compile the spec again: trainspec compile SPEC -t kubernetes")
    old = jobs[0]["metadata"]["name"]
    configmaps = {}
    for doc in documents:
        if doc.get("kind") == "ConfigMap":
            current = doc["metadata"]["name"]
            suffix = next((s for s in CONFIGMAP_SUFFIXES if current == old + s), None)
            if suffix is None:
                raise SubmitError(f"{JOB_FILE}: ConfigMap {current!r} is not named after the job {old!r}",
                                  "compile the spec again: trainspec compile SPEC -t kubernetes")
            configmaps[current] = name + suffix
    out = [_renamed(doc, name if doc is jobs[0] else configmaps.get(doc["metadata"]["name"]), configmaps)
           for doc in documents]
    for doc in out:
        left = [ref for ref in _configmap_refs(doc) if ref not in configmaps.values()]
        if left:
            raise SubmitError(f"{JOB_FILE}: {doc['kind']} {doc['metadata']['name']} mounts the ConfigMap "
                              f"{left[0]!r}, which {JOB_FILE} does not hold under the job's name",
                              "compile the spec again: trainspec compile SPEC -t kubernetes")
    return out


def _renamed(doc: Dict[str, Any], name: Optional[str], configmaps: Dict[str, str]) -> Dict[str, Any]:
    """One document named ``name`` (None: as it is), each ``configMap.name`` of a pod volume that
    names one of ``configmaps`` following; nothing else touched."""
    def walk(value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            out = {k: walk(v, k) for k, v in value.items()}
            if key == "configMap" and out.get("name") in configmaps:
                out["name"] = configmaps[out["name"]]
            return out
        if isinstance(value, list):
            return [walk(item) for item in value]
        return value

    out = walk(doc)
    if name is not None:
        out["metadata"]["name"] = name
    return out


def _configmap_refs(value: Any, key: str = "") -> Iterator[str]:
    """The ConfigMaps a document's pod volumes mount (``volumes[].configMap.name``)."""
    if isinstance(value, dict):
        if key == "configMap" and isinstance(value.get("name"), str):
            yield value["name"]
        for k, item in value.items():
            yield from _configmap_refs(item, k)
    elif isinstance(value, list):
        for item in value:
            yield from _configmap_refs(item)


def load_job(job_dir: Path) -> List[Dict[str, Any]]:
    """job.yaml's documents as plain data (ruamel's safe loader)."""
    from ruamel.yaml import YAML

    try:
        text = (job_dir / JOB_FILE).read_text(encoding="utf-8")
    except OSError as exc:
        raise SubmitError(f"cannot read {job_dir / JOB_FILE}: {exc.strerror}",
                          "compile the spec first: trainspec compile SPEC -t kubernetes") from None
    return [doc for doc in YAML(typ="safe", pure=True).load_all(text) if doc]


# --- states ------------------------------------------------------------------------------------------

def _true(status: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """The job's conditions whose status is True, by type."""
    return {c.get("type"): c for c in status.get("conditions") or [] if c.get("status") == "True"}


def _said(condition: Dict[str, Any]) -> str:
    """Failed (DeadlineExceeded: the message): a condition as its controller wrote it."""
    words = [w for w in (condition.get("reason"), _line(condition.get("message", ""))) if w]
    return condition.get("type", "") + (f" ({': '.join(words)})" if words else "")


def _deadline(condition: Dict[str, Any]) -> bool:
    """A Failed condition for the job's activeDeadlineSeconds: the Trainer's reason
    DeadlineExceeded, or the training-operator's message (its reason is PyTorchJobFailed)."""
    return (condition.get("reason") == "DeadlineExceeded"
            or "active longer than specified deadline" in condition.get("message", ""))


def trainjob_state(job: Dict[str, Any]) -> Optional[Status]:
    """A TrainJob's state from its conditions (Trainer v2.3: Suspended, Complete, Failed), or None
    when they say nothing final or queued (the pods decide: see Kubernetes.status)."""
    true = _true(job.get("status") or {})
    if "Complete" in true:
        return Status(State.COMPLETED, _said(true["Complete"]))
    if "Failed" in true:
        return Status(State.TIMED_OUT if _deadline(true["Failed"]) else State.FAILED, _said(true["Failed"]))
    if job.get("metadata", {}).get("deletionTimestamp"):
        return Status(State.CANCELED, "being deleted")
    if "Suspended" in true:
        return Status(State.QUEUED, _said(true["Suspended"]))
    return None


def pytorchjob_state(job: Dict[str, Any]) -> Optional[Status]:
    """A PyTorchJob's state from its conditions (training-operator v1.9: Created, Running,
    Restarting, Succeeded, Failed, Suspended), or None when it has none yet."""
    true = _true(job.get("status") or {})
    if "Succeeded" in true:
        return Status(State.COMPLETED, _said(true["Succeeded"]))
    if "Failed" in true:
        return Status(State.TIMED_OUT if _deadline(true["Failed"]) else State.FAILED, _said(true["Failed"]))
    if job.get("metadata", {}).get("deletionTimestamp"):
        return Status(State.CANCELED, "being deleted")
    for kind, state in (("Suspended", State.QUEUED), ("Restarting", State.RUNNING), ("Running", State.RUNNING),
                        ("Created", State.QUEUED)):
        if kind in true:
            return Status(state, _said(true[kind]))
    return None


def pod_problem(pods: List[Dict[str, Any]]) -> str:
    """An image that cannot be pulled, as the kubelet says it: 'pod x: ImagePullBackOff: ...'."""
    for pod in pods:
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in IMAGE_PULL:
                return (f"pod {pod['metadata']['name']}: {waiting['reason']}: "
                        f"{_line(waiting.get('message', '')) or container.get('image', '')}; "
                        "check environment.image and targets.kubernetes.image_pull_secrets")
    return ""


def node_of(pod: Dict[str, Any], kind: Kind) -> int:
    """The node a pod is: the JobSet's completion index (node i), or the training-operator's
    Master (0) and Worker i (i + 1)."""
    meta = pod.get("metadata") or {}
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    if kind.kind == "TrainJob":
        index = labels.get("batch.kubernetes.io/job-completion-index",
                           notes.get("batch.kubernetes.io/job-completion-index"))
        if index is None:
            match = re.search(r"-node-0-(\d+)(-[a-z0-9]+)?$", meta.get("name", ""))
            index = match.group(1) if match else "0"
        return int(index)
    index = int(labels.get("training.kubeflow.org/replica-index", "0"))
    return 0 if labels.get("training.kubeflow.org/replica-type", "").lower() == "master" else index + 1


def _line(text: str) -> str:
    """The API server's message as one bounded line."""
    text = " ".join(str(text).split())
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT - 3] + "..."


# --- the scheduler -------------------------------------------------------------------------------

class Kubernetes(Scheduler):
    target = NAME
    extra = "kubernetes"

    def __init__(self, context) -> None:
        super().__init__(context)
        self._client = None
        self._namespace: Optional[str] = None
        self._host = ""

    # the client, as kubectl finds the cluster
    def _api(self):
        if self._client is not None:
            return self._client
        try:
            from kubernetes import client, config
            from kubernetes.config.config_exception import ConfigException
        except ImportError:
            raise MissingClient(NAME, "kubernetes", "kubernetes") from None
        env = self.context.env
        configuration = client.Configuration()
        kubeconfig = env.get("KUBECONFIG") or str(Path(env.get("HOME") or "~").expanduser() / ".kube" / "config")
        namespace = None
        try:
            if any(Path(p).is_file() for p in kubeconfig.split(":") if p):
                config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
                _, active = config.list_kube_config_contexts(config_file=kubeconfig)
                namespace = ((active or {}).get("context") or {}).get("namespace")
            elif env.get("KUBERNETES_SERVICE_HOST"):
                config.load_incluster_config(client_configuration=configuration)
                namespace = Path(SERVICE_ACCOUNT_NAMESPACE).read_text().strip()
            else:
                raise SubmitError(f"no kubeconfig: {kubeconfig} does not exist and this is not a pod in a cluster",
                                  "get credentials (AKS: az aks get-credentials -g GROUP -n CLUSTER), or set "
                                  "KUBECONFIG")
        except (ConfigException, OSError, ValueError, TypeError, KeyError) as exc:
            raise SubmitError(f"cannot load the kubeconfig {kubeconfig}: {_line(exc)}",
                              "`kubectl config current-context` must name a context with a cluster and a user; "
                              "get credentials again (AKS: az aks get-credentials -g GROUP -n CLUSTER)") from None
        configuration.retries = RETRIES
        self._host = configuration.host
        self._namespace = namespace or "default"
        api_client = client.ApiClient(configuration)
        self._client = (api_client, client.CoreV1Api(api_client), client.CustomObjectsApi(api_client))
        return self._client

    def namespace(self) -> str:
        """targets.kubernetes.namespace, else the kubeconfig context's, else default (as kubectl)."""
        settings = self.context.settings
        self._api()
        return (settings.namespace if settings is not None and settings.namespace else None) or self._namespace

    def _kind(self) -> Kind:
        settings = self.context.settings
        return KINDS[settings.api if settings is not None else "trainjob"]

    def _call(self, what: str, call, *args, namespace: str = "", kind: Optional[Kind] = None,
              missing_ok: bool = False, **kwargs) -> Optional[bytes]:
        """One request, bounded: the answer's bytes; None for an object that does not exist when
        ``missing_ok``; else a SubmitError said plainly (its ``status``: the HTTP status, or 0)."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return call(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs).data
        except ApiException as exc:
            if missing_ok and exc.status == 404 and _missing_object(exc):
                return None
            raise _refusal(exc, what, namespace, kind) from None
        except (HTTPError, OSError) as exc:  # refused, unknown host, timed out: after RETRIES
            error = SubmitError(f"cannot reach the Kubernetes API server at {self._host}: {_line(exc)}",
                                "check the kubeconfig's current context (kubectl config current-context) and "
                                "that the cluster answers (kubectl cluster-info)")
            error.status = 0
            raise error from None

    def _get_job(self, kind: Kind, namespace: str, name: str) -> Optional[Dict[str, Any]]:
        """The job object, or None when the API server says it does not exist."""
        _, _, custom = self._api()
        data = self._call(f"get {kind.kind} {name}", custom.get_namespaced_custom_object, kind.group, kind.version,
                          namespace, kind.plural, name, namespace=namespace, kind=kind, missing_ok=True)
        return None if data is None else json.loads(data)

    def _job(self, kind: Kind, namespace: str, name: str, found: Optional[Dict[str, Any]] = None) -> Job:
        notes = ((found or {}).get("metadata") or {}).get("annotations") or {}
        return Job(NAME, name, f"{namespace}/{name}",
                   shlex.join(["kubectl", "-n", namespace, "get", kind.kind.lower(), name]),
                   {"kind": kind.kind, "namespace": namespace}, str(notes.get(DIGEST_KEY) or ""))

    def find(self, name: str) -> Optional[Job]:
        kind, namespace = self._kind(), self.namespace()
        found = self._get_job(kind, namespace, name)
        return self._job(kind, namespace, name, found) if found is not None else None

    def by_id(self, id: str) -> Job:
        namespace, _, name = id.rpartition("/")
        namespace = namespace or self.namespace()
        missing = []
        for kind in KINDS.values():
            try:
                found = self._get_job(kind, namespace, name)
                if found is not None:
                    return self._job(kind, namespace, name, found)
            except SubmitError as exc:
                if getattr(exc, "status", None) != 404:  # that API is not installed: the other may be
                    raise
            missing.append(kind.kind)
        raise SubmitError(f"no {' or '.join(missing)} {name!r} in namespace {namespace!r} (deleted, or never "
                          "submitted)", f"kubectl -n {namespace} get trainjobs,pytorchjobs lists the jobs there")

    def submit(self, job_dir: Path, name: str, digest: str) -> Job:
        _, core, custom = self._api()
        namespace = self.namespace()
        documents = rename(load_job(job_dir), name)
        job = next(doc for doc in documents if doc["kind"] in BY_KIND)
        job["metadata"]["annotations"] = {**(job["metadata"].get("annotations") or {}), DIGEST_KEY: digest}
        kind = KINDS[BY_KIND[job["kind"]]]
        queue = (job["metadata"].get("labels") or {}).get(QUEUE_LABEL)
        if queue:
            self._check_queue(queue, namespace)
        for doc in documents:
            doc["metadata"]["namespace"] = namespace
            doc_name = doc["metadata"]["name"]
            if doc["kind"] == "ConfigMap":
                self._call(f"apply ConfigMap {doc_name}", core.patch_namespaced_config_map, doc_name, namespace,
                           doc, field_manager=FIELD_MANAGER, force=False, _content_type=APPLY, namespace=namespace)
            elif doc["kind"] in BY_KIND:
                self._call(f"apply {kind.kind} {doc_name}", custom.patch_namespaced_custom_object, kind.group,
                           kind.version, namespace, kind.plural, doc_name, doc, field_manager=FIELD_MANAGER,
                           force=False, _content_type=APPLY, namespace=namespace, kind=kind)
            else:
                raise SubmitError(f"{JOB_FILE}: a {doc['kind']} is not what trainspec compiles",
                                  "compile the spec again: trainspec compile SPEC -t kubernetes")
        return self._job(kind, namespace, name, job)

    def _check_queue(self, queue: str, namespace: str) -> None:
        """A Kueue LocalQueue that does not exist leaves the job suspended for ever: refuse first.
        When trainspec may not read LocalQueues (RBAC: 403), the job goes and Kueue decides."""
        _, _, custom = self._api()
        group, version, plural = KUEUE
        try:
            found = self._call(f"get LocalQueue {queue}", custom.get_namespaced_custom_object, group, version,
                               namespace, plural, queue, namespace=namespace, missing_ok=True)
        except SubmitError as exc:
            if getattr(exc, "status", None) == 403:
                return
            if getattr(exc, "status", None) == 404:
                raise SubmitError(f"the cluster has no Kueue ({group}/{version}) but the spec names the queue "
                                  f"{queue!r}; the job would wait suspended for ever",
                                  "install Kueue, or remove targets.kubernetes.queue") from None
            raise
        if found is None:
            raise SubmitError(f"the Kueue LocalQueue {queue!r} does not exist in namespace {namespace!r}; the job "
                              "would wait suspended for ever",
                              f"kubectl -n {namespace} get localqueues lists them; set targets.kubernetes.queue")

    def _pods(self, job: Job) -> List[Dict[str, Any]]:
        _, core, _ = self._api()
        kind = KINDS[BY_KIND[job.extra["kind"]]]
        data = self._call(f"list the pods of {job.name}", core.list_namespaced_pod, job.extra["namespace"],
                          label_selector=f"{kind.selector}={job.name}", namespace=job.extra["namespace"])
        return sorted(json.loads(data).get("items") or [], key=lambda pod: (node_of(pod, kind),
                                                                           pod["metadata"]["name"]))

    def status(self, job: Job) -> Status:
        kind = KINDS[BY_KIND[job.extra["kind"]]]
        found = self._get_job(kind, job.extra["namespace"], job.name)
        if found is None:
            return Status(State.CANCELED, f"deleted: no {kind.kind} {job.id} on the cluster any more")
        state = trainjob_state(found) if kind.kind == "TrainJob" else pytorchjob_state(found)
        if state is not None and state.state.final:
            return state
        pods = self._pods(job)
        problem = pod_problem(pods)
        if problem:
            return Status(state.state if state else State.QUEUED, problem)
        if state is not None:  # Suspended (Kueue), or a PyTorchJob's Created/Running/Restarting
            return state
        # a TrainJob says nothing until it ends: its pods do (none yet right after apply)
        phases = sorted({(pod.get("status") or {}).get("phase", "Pending") for pod in pods})
        if set(phases) - {"Pending"}:
            return Status(State.RUNNING, f"pods: {', '.join(phases)}")
        return Status(State.QUEUED, f"pods: {', '.join(phases)}" if pods else "no pods yet")

    def logs(self, job: Job, cursor: Any, all_ranks: bool) -> Tuple[List[LogLine], Any]:
        _, core, _ = self._api()
        kind = KINDS[BY_KIND[job.extra["kind"]]]
        printed: Dict[str, int] = dict(cursor or {})
        lines: List[LogLine] = []
        for pod in self._pods(job):
            node = node_of(pod, kind)
            if node != 0 and not all_ranks:
                continue
            name = pod["metadata"]["name"]
            try:
                data = self._call(f"read the log of pod {name}", core.read_namespaced_pod_log, name,
                                  job.extra["namespace"], container=kind.container, namespace=job.extra["namespace"])
            except SubmitError as exc:
                if getattr(exc, "status", None) in (400, 404):  # the container has not started yet, or the pod is gone
                    continue
                raise
            text = data.decode("utf-8", "replace").splitlines()
            lines += [LogLine(str(node), line) for line in text[printed.get(name, 0):]]
            printed[name] = max(printed.get(name, 0), len(text))
        return lines, printed

    def cancel(self, job: Job) -> None:
        _, core, custom = self._api()
        kind = KINDS[BY_KIND[job.extra["kind"]]]
        namespace = job.extra["namespace"]
        self._delete(f"delete {kind.kind} {job.name}", custom.delete_namespaced_custom_object, kind.group,
                     kind.version, namespace, kind.plural, job.name, namespace=namespace, kind=kind)
        for suffix in CONFIGMAP_SUFFIXES:
            self._delete(f"delete ConfigMap {job.name}{suffix}", core.delete_namespaced_config_map,
                         job.name + suffix, namespace, namespace=namespace)

    def _delete(self, what: str, call, *args, namespace: str, kind: Optional[Kind] = None) -> None:
        """DELETE with propagationPolicy Foreground (the pods go first); gone already is done."""
        self._call(what, call, *args, propagation_policy="Foreground", namespace=namespace, kind=kind,
                   missing_ok=True)

    def close(self) -> None:
        if self._client is not None:
            self._client[0].close()
            self._client = None


def _status_body(exc) -> Dict[str, Any]:
    """The API server's Status object of a refusal ({} when the body is not one)."""
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def _missing_object(exc) -> bool:
    """A 404 for an object that does not exist (its Status names it in details), not for an API the
    cluster does not serve ("the server could not find the requested resource", no details)."""
    details = _status_body(exc).get("details") or {}
    return bool(details.get("name")) and details.get("kind") != "namespaces"


def _refusal(exc, what: str, namespace: str, kind: Optional[Kind]) -> SubmitError:
    """An ApiException as one line: what was asked, the server's own message, what to do (the
    error's ``status``: the HTTP status)."""
    error = _said_plainly(exc, what, namespace, kind)
    error.status = exc.status
    return error


def _said_plainly(exc, what: str, namespace: str, kind: Optional[Kind]) -> SubmitError:
    body = _status_body(exc)
    message = _line(body.get("message") or exc.reason or "")
    details = body.get("details") or {}
    said = f"(the API server: {exc.status} {body.get('reason') or exc.reason}: {message})"
    if exc.status == 401:
        return SubmitError(f"not logged in to the cluster: {what} {said}",
                           "get credentials again (AKS: az aks get-credentials -g GROUP -n CLUSTER; "
                           "kubelogin for Entra ID), then check with kubectl get pods")
    if exc.status == 403:
        return SubmitError(f"forbidden: {what} in namespace {namespace!r} {said}",
                           f"ask the cluster's admin for a Role that allows it (kubectl auth can-i --list -n "
                           f"{namespace} says what you may do)")
    if exc.status == 404 and details.get("kind") == "namespaces":
        return SubmitError(f"the namespace {namespace!r} does not exist {said}",
                           f"create it (kubectl create namespace {namespace}) or set targets.kubernetes.namespace")
    if exc.status == 404 and kind is not None and not details.get("name"):
        return SubmitError(f"the cluster has no {kind.kind} API ({kind.api_version}): {what} {said}", kind.install)
    if exc.status == 409:
        return SubmitError(f"conflict: {what} {said}",
                           "another field manager owns these fields: delete the object (trainspec cancel) or "
                           "rename the spec")
    if exc.status == 422:
        return SubmitError(f"the API server refused the object: {what} {said}",
                           "the cluster's CRD or webhook may be another version than trainspec's "
                           "(Trainer v2.3, training-operator v1.9)")
    return SubmitError(f"{what} {said}", "kubectl can say more: kubectl get events -n " + (namespace or "default"))


SCHEDULER = Kubernetes
