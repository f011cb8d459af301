"""`trainspec submit/status/logs/cancel -t kubernetes` against a fake API server (tests/kube_api.py)
at the HTTP level: the real command line in a subprocess, the kubernetes client reading a
kubeconfig that points at http://127.0.0.1:<port>, every applied object checked against the pinned
CRDs, the Kubeflow controllers' conditions emulated tick by tick."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import kube_api
import kube_schema
from conftest import HOSTILE_OUTPUT, HOSTILE_SHOWN, REPO, assert_inert

pytest.importorskip("kubernetes", reason="the kubernetes extra (trainspec[kubernetes]) is what this target submits with")

SPEC = """version: 1
name: tiny
code: code
command: python train.py
framework: pytorch
resources: {{nodes: 2, gpus_per_node: 0}}
environment: {{image: "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"}}
timeout: 1h
targets:
  kubernetes: {{namespace: ml, api: {api}{extra}}}
"""


@pytest.fixture
def cluster():
    """A fake API server on loopback, stopped by the test that started it."""
    made = []

    def start(**kw):
        made.append(kube_api.Cluster(**kw).start())
        return made[-1]

    try:
        yield start
    finally:
        for one in made:
            one.stop()


def workspace(tmp_path: Path, api: str = "trainjob", extra: str = "") -> Path:
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "train.py").write_text("print('training')\n")
    (tmp_path / "tiny.yaml").write_text(SPEC.format(api=api, extra=extra))
    return tmp_path


def trainspec(folder: Path, cluster, *args, kubeconfig: str = None):
    """The command line as a user runs it, this worktree's code, the fake cluster's kubeconfig."""
    config = folder / "kubeconfig"
    config.write_text(kubeconfig if kubeconfig is not None else cluster.kubeconfig())
    env = dict(os.environ, PYTHONPATH=str(REPO), KUBECONFIG=str(config), HOME=str(folder),
               TRAINSPEC_POLL_SECONDS="0.2")
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return subprocess.run([sys.executable, "-m", "trainspec.cli", *args], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=120)


def errors(proc) -> list:
    return [line for line in proc.stderr.splitlines() if line.startswith("trainspec: error:")]


# --- submit --wait, and again ----------------------------------------------------------------------

def test_wait_to_complete_then_a_second_submit_follows_the_same_job(tmp_path, cluster):
    fake = cluster()
    folder = workspace(tmp_path)
    first = trainspec(folder, fake, "submit", "tiny.yaml", "-t", "kubernetes", "--wait")
    assert first.returncode == 0, first.stdout + first.stderr
    paths = [path for path, _, _ in fake.applied]
    name = paths[-1].rsplit("/", 1)[1]
    assert name.startswith("tiny-") and len(name) == len("tiny-") + 10
    # the ConfigMaps first, the job last, each applied under the job's name by the trainspec field manager
    assert paths == [f"configmaps/ml/{name}-shim", f"configmaps/ml/{name}-code", f"trainjobs/ml/{name}"]
    assert all(query.get("fieldManager") == "trainspec" and query.get("force") == "false"
               for _, query, _ in fake.applied)
    assert fake.invalid == []
    assert f"submitted (ml/{name}); watch: kubectl -n ml get trainjob {name}" in first.stdout
    assert "completed (Complete (AllJobsCompleted: jobset completed successfully)), exit 0" in first.stdout

    second = trainspec(folder, fake, "submit", "tiny.yaml", "-t", "kubernetes", "--wait")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "already submitted (ml/" + name + "), not submitted again" in second.stdout
    assert len(fake.applied) == 3  # nothing applied again

    status = trainspec(folder, fake, "status", "tiny.yaml", "-t", "kubernetes")
    assert status.returncode == 0 and "completed" in status.stdout

    (folder / "code" / "train.py").write_text("print('training, changed')\n")  # a changed spec is a new job
    changed = trainspec(folder, fake, "submit", "tiny.yaml", "-t", "kubernetes")
    assert changed.returncode == 0, changed.stdout + changed.stderr
    assert len({path for path, _, _ in fake.applied if path.startswith("trainjobs/")}) == 2


@pytest.mark.parametrize("api, script, code, said", [
    ("trainjob", "fail", 4, "failed (Failed (FailedJobs: jobset failed: job node-0 failed))"),
    ("trainjob", "deadline", 6, "timed-out (Failed (DeadlineExceeded:"),
    ("pytorchjob", "complete", 0, "completed (Succeeded (PyTorchJobSucceeded:"),
    ("pytorchjob", "deadline", 6, "timed-out (Failed (PyTorchJobFailed: Job tiny-"),
])
def test_final_states_and_exit_codes(tmp_path, cluster, api, script, code, said):
    fake = cluster(script=script)
    folder = workspace(tmp_path, api)
    proc = trainspec(folder, fake, "submit", "tiny.yaml", "-t", "kubernetes", "--wait")
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert said in proc.stdout
    assert fake.invalid == []
    kinds = [doc["kind"] for _, _, doc in fake.applied]
    assert kinds[-1] == {"trainjob": "TrainJob", "pytorchjob": "PyTorchJob"}[api]


def test_kueue_queue_reads_queued_until_admitted(tmp_path, cluster):
    fake = cluster()
    folder = workspace(tmp_path, extra=", queue: team-a")
    proc = trainspec(folder, fake, "submit", "tiny.yaml", "-t", "kubernetes", "--wait")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "queued (Suspended (Suspended: TrainJob is suspended))" in proc.stdout
    job = fake.applied[-1][2]
    assert job["spec"]["suspend"] is True and job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"


# --- logs ----------------------------------------------------------------------------------------------

def test_follow_prints_rank_0s_pod_and_all_ranks_every_node(tmp_path, cluster):
    fake = cluster()
    folder = workspace(tmp_path)
    proc = trainspec(folder, fake, "submit", "tiny.yaml", "-t", "kubernetes", "--follow")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert [line for line in lines if line.startswith("node ")] == ["node 0 line 0", "node 0 line 1", "node 0 line 2"]
    assert errors(proc) == []  # no pods right after apply, then a container waiting to start: not errors

    again = trainspec(folder, fake, "logs", "tiny.yaml", "-t", "kubernetes", "--all-ranks")
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.splitlines() == [f"[node {n}] node {n} line {k}" for n in (0, 1) for k in range(3)]


def test_follow_all_ranks_of_a_pytorchjob(tmp_path, cluster):
    fake = cluster()
    folder = workspace(tmp_path, "pytorchjob")
    proc = trainspec(folder, fake, "submit", "tiny.yaml", "-t", "kubernetes", "--follow", "--all-ranks")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    printed = [line for line in proc.stdout.splitlines() if line.startswith("[node ")]
    assert sorted(printed) == sorted(f"[node {n}] node {n} line {k}" for n in (0, 1) for k in range(3))


def test_what_a_job_prints_reaches_the_terminal_and_the_ci_log_as_data(tmp_path, cluster):
    # its log lines and its controller's message: escapes, invisible characters and workflow
    # commands, through submit --follow (its state line too) and status --format json
    failure = "\x1b]0;pwned\x07 ::add-mask::hunter2\n::error::forged"
    fake = cluster(script="fail", said=HOSTILE_OUTPUT, failure=failure)
    folder = workspace(tmp_path)
    follow = trainspec(folder, fake, "submit", "tiny.yaml", "-t", "kubernetes", "--follow")
    assert follow.returncode == 4, follow.stdout + follow.stderr
    assert [line for line in follow.stdout.splitlines() if line in HOSTILE_SHOWN] == HOSTILE_SHOWN
    shown_failure = "\\x1b]0;pwned\\x07 ::add-mask::hunter2 ::error::forged"  # the message on one line
    assert shown_failure in follow.stdout
    assert_inert(follow.stdout + follow.stderr)
    document = trainspec(folder, fake, "status", "tiny.yaml", "-t", "kubernetes", "--format", "json")
    assert document.returncode == 4, document.stdout + document.stderr
    detail = json.loads(document.stdout)["jobs"][0]["detail"]  # JSON: the same data, escaped
    assert detail == f"Failed (FailedJobs: {failure.replace(chr(10), ' ')})"
    assert_inert(document.stdout)


# --- cancel ------------------------------------------------------------------------------------------

def test_cancel_deletes_the_job_and_its_configmaps(tmp_path, cluster):
    fake = cluster(script="forever")
    folder = workspace(tmp_path)
    assert trainspec(folder, fake, "submit", "tiny.yaml", "-t", "kubernetes").returncode == 0
    name = fake.applied[-1][2]["metadata"]["name"]
    cancel = trainspec(folder, fake, "cancel", "tiny.yaml", "-t", "kubernetes")
    assert cancel.returncode == 0, cancel.stdout + cancel.stderr
    assert f"cancel requested (ml/{name})" in cancel.stdout
    assert fake.deleted == [(f"trainjobs/ml/{name}", "Foreground"), (f"configmaps/ml/{name}-shim", "Foreground"),
                            (f"configmaps/ml/{name}-code", "Foreground")]
    # being deleted (Foreground: its pods first): canceled
    status = trainspec(folder, fake, "status", "tiny.yaml", "-t", "kubernetes")
    assert status.returncode == 5, status.stdout + status.stderr
    assert "canceled (being deleted)" in status.stdout
    # gone: Kubernetes keeps nothing of a deleted job, so the spec's job reads as not submitted
    gone = trainspec(folder, fake, "status", "tiny.yaml", "-t", "kubernetes")
    assert gone.returncode == 3 and "not submitted" in gone.stderr


def test_a_job_deleted_while_waiting_reads_as_canceled(tmp_path, cluster):
    fake = cluster(script="forever")
    folder = workspace(tmp_path)
    assert trainspec(folder, fake, "submit", "tiny.yaml", "-t", "kubernetes").returncode == 0
    job_id = "ml/" + fake.applied[-1][2]["metadata"]["name"]
    cancel = trainspec(folder, fake, "cancel", "-t", "kubernetes", "--id", job_id, "--wait", "--max-wait", "30s")
    assert cancel.returncode == 0, cancel.stdout + cancel.stderr
    assert "canceled" in cancel.stdout


# --- refusals, said plainly -----------------------------------------------------------------------------

@pytest.mark.parametrize("setup, expected", [
    (dict(namespaces=("default",)), "the namespace 'ml' does not exist"),
    (dict(apis=("pytorchjobs", "localqueues")), "the cluster has no TrainJob API (trainer.kubeflow.org/v1alpha1)"),
    (dict(forbidden=("ml",)), "forbidden:"),
])
def test_refusals_are_one_line_and_exit_3(tmp_path, cluster, setup, expected):
    fake = cluster(**setup)
    folder = workspace(tmp_path)
    proc = trainspec(folder, fake, "submit", "tiny.yaml", "-t", "kubernetes", "--wait")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    [line] = errors(proc)
    assert expected in line and "(hint: " in line
    assert "the API server:" in line  # its own message kept
    if "TrainJob API" in expected:
        assert "install Kubeflow Trainer v2.3" in line


@pytest.mark.parametrize("setup, expected", [
    (dict(queues=()), "the Kueue LocalQueue 'team-a' does not exist in namespace 'ml'"),
    (dict(apis=("trainjobs", "pytorchjobs")), "the cluster has no Kueue (kueue.x-k8s.io/v1beta1)"),
])
def test_a_queue_that_does_not_exist_is_refused_before_applying(tmp_path, cluster, setup, expected):
    fake = cluster(**setup)
    folder = workspace(tmp_path, extra=", queue: team-a")
    proc = trainspec(folder, fake, "submit", "tiny.yaml", "-t", "kubernetes")
    assert proc.returncode == 3
    [line] = errors(proc)
    assert expected in line and "suspended for ever" in line
    assert fake.applied == []


def test_not_logged_in_no_kubeconfig_and_unreachable(tmp_path, cluster):
    fake = cluster()
    folder = workspace(tmp_path)
    bad_token = trainspec(folder, fake, "submit", "tiny.yaml", "-t", "kubernetes",
                          kubeconfig=fake.kubeconfig(token="expired"))
    assert bad_token.returncode == 3 and "not logged in to the cluster" in errors(bad_token)[0]
    env = dict(os.environ, PYTHONPATH=str(REPO), KUBECONFIG=str(folder / "nowhere"), HOME=str(folder))
    env.pop("KUBERNETES_SERVICE_HOST", None)
    none = subprocess.run([sys.executable, "-m", "trainspec.cli", "submit", "tiny.yaml", "-t", "kubernetes"],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    assert none.returncode == 3 and "no kubeconfig" in errors(none)[0] and "az aks get-credentials" in none.stderr
    address = fake.kubeconfig()
    fake.stop()
    try:
        unreachable = trainspec(folder, fake, "submit", "tiny.yaml", "-t", "kubernetes", kubeconfig=address)
    finally:
        fake.start()  # the fixture stops it again
    assert unreachable.returncode == 3 and "cannot reach the Kubernetes API server" in errors(unreachable)[0]
    assert kube_api.TOKEN not in unreachable.stderr + bad_token.stderr


def test_an_image_that_cannot_be_pulled_is_said(tmp_path, cluster):
    fake = cluster(script="image-pull")
    folder = workspace(tmp_path)
    proc = trainspec(folder, fake, "submit", "tiny.yaml", "-t", "kubernetes", "--wait", "--max-wait", "2s")
    assert proc.returncode == 7, proc.stdout + proc.stderr
    assert "ImagePullBackOff: Back-off pulling image" in proc.stdout
    assert "image_pull_secrets" in proc.stdout


# --- the documents under the job's name --------------------------------------------------------------

@pytest.mark.parametrize("spec, api", [("k8s-ddp", "trainjob"), ("tiny", "pytorchjob")])
def test_renamed_documents_still_validate_and_name_nothing_old(tmp_path, spec, api):
    from trainspec.targets.kubernetes import submit

    if spec == "tiny":
        folder = workspace(tmp_path, api)
        subprocess.run([sys.executable, "-m", "trainspec.cli", "compile", "tiny.yaml", "-o", "out"], cwd=folder,
                       env=dict(os.environ, PYTHONPATH=str(REPO)), check=True, capture_output=True, timeout=120)
        job_dir = folder / "out" / "tiny" / "kubernetes"
    else:
        job_dir = REPO / "tests" / "golden" / spec / "kubernetes"
    documents = submit.load_job(job_dir)
    new = "renamed-0123456789"
    renamed = submit.rename(documents, new)
    assert [doc["metadata"]["name"] for doc in renamed] == [new + "-shim", new + "-code", new]
    pod = (renamed[-1]["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
           ["template"]["spec"]["template"]["spec"] if api == "trainjob" else
           renamed[-1]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"])
    assert {v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v} == {new + "-shim", new + "-code"}
    old = documents[-1]["metadata"]["name"]
    # nothing but the names trainspec gave changed: the documents read back with the old names are the originals
    back = submit.rename(renamed, old)
    assert yaml.safe_dump(back) == yaml.safe_dump(documents)
    for doc in renamed:
        assert kube_schema.validate(doc) == [], doc["kind"]
    assert yaml.safe_dump(documents) != yaml.safe_dump(renamed) and documents[-1]["metadata"]["name"] == old


KUBERNETES_SPECS = sorted(path.name for path in (REPO / "specs").glob("*.yaml")
                          if "kubernetes" in (yaml.safe_load(path.read_text()).get("targets") or {}))


@pytest.mark.parametrize("spec_file", KUBERNETES_SPECS)
def test_every_kubernetes_spec_submits_and_strings_equal_to_its_name_stay(tmp_path, cluster, spec_file):
    """The job and its ConfigMaps get the job's name; an env value, a claim's sub_path and a queue
    that happen to equal the spec's name are the user's words and are applied as written."""
    spec = yaml.safe_load((REPO / "specs" / spec_file).read_text())
    name = spec["name"]
    spec.setdefault("env", {})["WANDB_PROJECT"] = name
    settings = spec["targets"]["kubernetes"]
    settings["queue"] = name
    for volume in (settings.get("volumes") or {}).values():
        volume["pvc"]["sub_path"] = name
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / spec_file).write_text(yaml.safe_dump(spec, sort_keys=False))
    shutil.copytree(REPO / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    fake = cluster(queues=((settings.get("namespace", "default"), name),))
    proc = trainspec(tmp_path, fake, "submit", f"specs/{spec_file}", "-t", "kubernetes")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert fake.invalid == []
    *configmaps, (_, _, job) = fake.applied
    job_name = job["metadata"]["name"]
    assert job_name.startswith(name + "-") and job_name != name
    assert [doc["metadata"]["name"] for _, _, doc in configmaps] == [job_name + "-shim", job_name + "-code"][
        :len(configmaps)]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == name
    envs = job["spec"]["trainer"]["env"] if job["kind"] == "TrainJob" else \
        job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "WANDB_PROJECT", "value": name} in envs
    sub_paths = [mount["subPath"] for mount in _strings_at(job, "volumeMounts") if mount["name"].startswith(("in-", "out-"))]
    assert sub_paths == [name] * len(settings.get("volumes") or {})
    assert {ref["name"] for ref in _strings_at(job, "configMap")} <= {job_name + "-shim", job_name + "-code"}


def _strings_at(value, key):
    """Every item under ``key`` anywhere in a document (a list's items one by one)."""
    if isinstance(value, dict):
        for k, item in value.items():
            if k == key:
                yield from item if isinstance(item, list) else [item]
            else:
                yield from _strings_at(item, key)
    elif isinstance(value, list):
        for item in value:
            yield from _strings_at(item, key)


def test_missing_client_names_the_extra(monkeypatch):
    from trainspec.jobs.api import Context, MissingClient
    from trainspec.targets.kubernetes import submit

    monkeypatch.setitem(sys.modules, "kubernetes", None)
    with pytest.raises(MissingClient) as raised:
        submit.Kubernetes(Context(env={})).find("x")
    assert "pip install 'trainspec[kubernetes]'" in str(raised.value)


def test_a_job_of_the_same_name_is_followed_only_with_this_jobs_digest(tmp_path, cluster):
    """The TrainJob carries its full digest in the annotation trainspec_digest; one of its name
    without it (created by anyone who may create TrainJobs in the namespace) is an error."""
    from conftest import job_of

    fake = cluster()
    folder = workspace(tmp_path)
    name, digest = job_of(folder / "tiny.yaml", "kubernetes")
    first = trainspec(folder, fake, "submit", "tiny.yaml", "-t", "kubernetes")
    assert first.returncode == 0, first.stdout + first.stderr
    notes = fake.objects[("trainjobs", "ml", name)]["metadata"]["annotations"]
    assert notes == {"trainspec_digest": digest}
    del notes["trainspec_digest"]
    again = trainspec(folder, fake, "submit", "tiny.yaml", "-t", "kubernetes", "--wait")
    assert again.returncode == 3, again.stdout + again.stderr
    assert errors(again) == [f"trainspec: error: {name} on kubernetes: a job named {name} is already there "
                             f"(ml/{name}; kubectl -n ml get trainjob {name}) but it is not this job: it carries no "
                             f"trainspec_digest, not {digest}; nothing submitted (hint: trainspec did not submit it "
                             "from this spec: ask who made it; to submit this job anyway, give the spec another name)"]
    assert [p for p, _, _ in fake.applied if p.startswith("trainjobs/")] == [f"trainjobs/ml/{name}"]
