"""`trainspec submit/status/logs/cancel -t azureml` against a fake Azure ML at the HTTP level
(tests/azureml_api.py): the real command line (trainspec.cli.main, in this process), the real
azure-ai-ml, azure-identity and azure-storage-blob, a real DefaultAzureCredential getting its token
from a fake `az` on PATH; only `requests`' last step is replaced, so every management, run-history
and storage request is answered by the fake and none reaches the network.

In-process rather than a subprocess: the code and input uploads go through azure-storage-blob's
own pipeline to <account>.blob.core.windows.net, which a loopback server cannot stand in for
without DNS (azureml.md §7), and importing azure-ai-ml once keeps the file fast. The Ctrl-C test
runs the command as its own process, with the same fake inside it.
"""

import json
import logging
import sys
import textwrap

import pytest

pytest.importorskip("azure.ai.ml", reason="the trainspec[azureml] extra is not installed")

from azureml_api import Fake, patch_requests  # noqa: E402
from conftest import HOSTILE_OUTPUT, HOSTILE_SHOWN, assert_inert, copy_examples, example_specs  # noqa: E402
from trainspec.jobs import api  # noqa: E402

SPEC = """\
version: 1
name: az-smoke
code: ./src
command: python train.py
resources:
  nodes: 2
  gpus_per_node: 1
environment:
  image: mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04
timeout: 1h
targets:
  azureml:
    compute: gpu-cluster
"""
WORKSPACE = ["--subscription", "sub", "--resource-group", "rg", "--workspace", "ws"]
TOKEN = {"accessToken": "fake-token", "expiresOn": "2099-01-01 00:00:00.000000", "expires_on": 4070908800,
         "subscription": "sub", "tenant": "tenant", "tokenType": "Bearer"}


@pytest.fixture
def azure(tmp_path, monkeypatch):
    """A user's folder with the spec, a fake `az` that is logged in, and the fake Azure ML."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print('hello')\n")
    (tmp_path / "spec.yaml").write_text(SPEC)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    write_az(bin_dir, logged_in=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("AZURE_TOKEN_CREDENTIALS", "AzureCliCredential")  # the az CLI alone: no IMDS probe
    monkeypatch.setenv("TRAINSPEC_POLL_SECONDS", "0.2")
    monkeypatch.setenv("AZUREML_CURRENT_CLOUD", "AzureCloud")  # MLClient writes it: restored after the test
    for name in ("AZUREML_SUBSCRIPTION_ID", "AZUREML_RESOURCE_GROUP", "AZUREML_WORKSPACE", "AZURE_CLIENT_ID",
                 "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_FEDERATED_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    fake = Fake()
    fake.bin = bin_dir
    patch_requests(monkeypatch, fake)
    return fake


def write_az(bin_dir, logged_in: bool) -> None:
    az = bin_dir / "az"
    if logged_in:
        az.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(TOKEN)}\nEOF\n")
    else:
        az.write_text("#!/bin/sh\necho \"ERROR: Please run 'az login' to setup account.\" >&2\nexit 1\n")
    az.chmod(0o755)


def trainspec(capsys, *args):
    """The command line, as a user types it: (exit code, stdout, stderr)."""
    from trainspec.cli import main

    with pytest.raises(SystemExit) as ended:
        main(list(args))
    out, err = capsys.readouterr()
    return ended.value.code, out, err


def submit(capsys, *flags):
    return trainspec(capsys, "submit", "spec.yaml", "-t", "azureml", *WORKSPACE, *flags)


def test_submit_wait_uploads_the_code_and_ends_completed(azure, capsys):
    code, out, err = submit(capsys, "--wait")
    assert code == api.EXIT_COMPLETED, out + err
    name = next(iter(azure.jobs))
    assert name.startswith("az-smoke-")
    assert f"{name} on azureml: submitted ({name}); watch: https://ml.azure.com/runs/{name}?wsid=" in out
    assert "completed (Completed), exit 0" in out
    assert azure.job_puts == 1 and azure.unknown == []
    uploaded = {path.rsplit("/", 1)[-1] for path in azure.uploads}
    assert {"train.py", "trainspec_shim.py"} <= uploaded  # the code folder and the shim, through storage
    assert azure.jobs[name].body["properties"]["computeId"].endswith("/computes/gpu-cluster")


def test_json_keeps_stdout_for_the_document(azure, capsys):
    azure.default["logs"] = {"user_logs/std_log_process_0.txt": ["a line"]}
    code, out, err = submit(capsys, "--follow", "--format", "json")
    assert code == api.EXIT_COMPLETED, out + err
    document = json.loads(out)  # the upload's progress and the job's lines went to stderr
    (job,) = document["jobs"]
    assert (job["state"], job["submitted"], job["exit"]) == ("completed", "submitted", 0)
    assert job["where"].startswith("https://ml.azure.com/runs/") and "a line" in err


def test_a_second_submit_finds_the_job_and_submits_nothing(azure, capsys):
    assert submit(capsys)[0] == api.EXIT_COMPLETED
    code, out, err = submit(capsys, "--wait")
    assert code == api.EXIT_COMPLETED, out + err
    assert "already submitted" in out and "not submitted again" in out
    assert azure.job_puts == 1


def test_a_submit_that_loses_the_race_follows_the_job_already_there(azure, capsys):
    azure.race = True  # our find saw nothing; the PUT is refused: a job of that name exists now
    code, out, err = submit(capsys, "--wait")
    assert code == api.EXIT_COMPLETED, out + err
    assert len(azure.jobs) == 1


def test_a_changed_spec_is_a_new_job(azure, capsys):
    assert submit(capsys)[0] == 0
    (azure.bin.parent / "spec.yaml").write_text(SPEC.replace("python train.py", "python train.py --lr 0.1"))
    assert submit(capsys)[0] == 0
    assert len(azure.jobs) == 2 and azure.job_puts == 2


LOGS = {"user_logs/std_log_process_0.txt": ["epoch 0 loss 0.9", "epoch 1 loss 0.5", "done"],
        "user_logs/std_log_process_1.txt": ["rank 1 here"],
        "system_logs/lifecycler/execution-wrapper.log": ["not a user log"]}


def test_follow_streams_rank_0_in_order(azure, capsys):
    azure.default["logs"] = LOGS
    code, out, err = submit(capsys, "--follow")
    assert code == api.EXIT_COMPLETED, out + err
    lines = out.splitlines()
    assert [line for line in lines if line.startswith(("epoch", "done"))] == LOGS["user_logs/std_log_process_0.txt"]
    assert "rank 1 here" not in out and "not a user log" not in out


def test_follow_all_ranks_prefixes_each_line_with_its_node(azure, capsys):
    azure.default["logs"] = LOGS
    code, out, err = submit(capsys, "--follow", "--all-ranks")
    assert code == api.EXIT_COMPLETED, out + err
    assert "[node 0] epoch 0 loss 0.9" in out and "[node 1] rank 1 here" in out
    assert out.count("[node 0] done") == 1  # each line once: the cursor remembers what was printed


def test_logs_of_a_finished_job(azure, capsys):
    azure.default["logs"] = LOGS
    assert submit(capsys, "--wait")[0] == 0
    code, out, err = trainspec(capsys, "logs", "spec.yaml", "-t", "azureml", *WORKSPACE)
    assert code == 0, out + err
    assert out.splitlines() == LOGS["user_logs/std_log_process_0.txt"]


def test_what_a_job_prints_reaches_the_terminal_and_the_ci_log_as_data(azure, capsys):
    # its log lines and Azure ML's error message: escapes, invisible characters and workflow
    # commands, through submit --follow, logs -f and status --format json
    message = "\x1b[2J::add-mask::hunter2 ##[error]forged\u200b"
    azure.default = {"statuses": ["Queued", "Running", "Failed"], "error": ("UserError", message), "ran": 60,
                     "logs": {"user_logs/std_log_process_0.txt": HOSTILE_OUTPUT}}
    code, out, err = submit(capsys, "--follow")
    assert code == api.EXIT_FAILED, out + err
    assert [line for line in out.splitlines() if line in HOSTILE_SHOWN] == HOSTILE_SHOWN
    assert "failed (Failed: UserError: \\x1b[2J::add-mask::hunter2 ##\\x5berror]forged\\u200b), exit 4" in out
    assert_inert(out)  # stderr: azure-ai-ml's own upload progress bar, in colour
    code, out, err = trainspec(capsys, "logs", "spec.yaml", "-t", "azureml", *WORKSPACE, "-f")
    assert code == api.EXIT_FAILED and out.splitlines()[:len(HOSTILE_SHOWN)] == HOSTILE_SHOWN, out + err
    assert_inert(out + err)
    code, out, err = trainspec(capsys, "status", "spec.yaml", "-t", "azureml", *WORKSPACE, "--format", "json")
    assert json.loads(out)["jobs"][0]["detail"] == f"Failed: UserError: {message}"  # JSON: the same data, escaped
    assert_inert(out + err)


@pytest.mark.parametrize("final, error, exit_code, words", [
    ("Failed", ("UserError", "Execution failed. User process 'python' exited with status code 1."),
     api.EXIT_FAILED, "failed (Failed: UserError: Execution failed. User process 'python' exited with status code 1.)"),
    ("Canceled", None, api.EXIT_CANCELED, "canceled (Canceled)"),
    ("Failed", ("JobTimeout", "The job exceeded the timeout of 3600 seconds set in limits.timeout."),
     api.EXIT_TIMED_OUT, "timed-out (Failed: JobTimeout: The job exceeded the timeout"),
    ("Failed", ("FailedPullingImage", "Unable to pull docker image: unauthorized: authentication required"),
     api.EXIT_FAILED, "the image could not be pulled: FailedPullingImage: Unable to pull docker image"),
])
def test_every_final_state_has_its_exit_code(azure, capsys, final, error, exit_code, words):
    azure.default = {"statuses": ["Queued", "Running", final], "error": error, "ran": 60}
    code, out, err = submit(capsys, "--wait")
    assert code == exit_code, out + err
    assert words in out


@pytest.mark.parametrize("ran, exit_code", [(3600, api.EXIT_TIMED_OUT), (3599, api.EXIT_CANCELED)])
def test_a_job_stopped_after_its_timeout_is_timed_out(azure, capsys, ran, exit_code):
    # whatever words Azure ML uses: a job canceled once it ran the spec's timeout (1h) timed out
    azure.default = {"statuses": ["Queued", "Running", "Canceled"], "ran": ran}
    code, out, err = submit(capsys, "--wait")
    assert code == exit_code, out + err


def test_cancel_then_status(azure, capsys):
    azure.default = {"statuses": ["Queued", "Running"]}  # runs until canceled
    assert submit(capsys)[0] == 0
    code, out, err = trainspec(capsys, "cancel", "spec.yaml", "-t", "azureml", *WORKSPACE)
    assert code == 0, out + err
    assert "cancel requested" in out and azure.cancels == [next(iter(azure.jobs))]
    code, out, err = trainspec(capsys, "status", "spec.yaml", "-t", "azureml", *WORKSPACE, "--wait", "--max-wait", "10")
    assert code == api.EXIT_CANCELED, out + err


def test_status_by_id_of_a_job_not_there(azure, capsys):
    code, out, err = trainspec(capsys, "status", "-t", "azureml", "--id", "nope-123", *WORKSPACE)
    assert code == api.EXIT_NOT_SUBMITTED
    assert "no job named 'nope-123'" in err


def one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("trainspec: error:")]
    assert len(lines) == 1, err
    return lines[0]


def test_quota_refused_is_one_line_with_azures_words(azure, capsys):
    azure.quota_nodes = 1
    code, out, err = submit(capsys, "--wait")
    assert code == api.EXIT_NOT_SUBMITTED
    line = one_error(err)
    assert "quota refused: UserError: JobNodeCountExceedsCoreQuota" in line and "(hint: ask for more vCPU quota" in line
    assert azure.jobs == {}


def test_compute_not_found(azure, capsys):
    azure.computes = set()
    code, out, err = submit(capsys, "--wait")
    assert code == api.EXIT_NOT_SUBMITTED
    line = one_error(err)
    assert "compute not found: UserError: AzureMLCompute cluster gpu-cluster does not exist" in line
    assert "az ml compute list" in line


def test_workspace_not_found(azure, capsys):
    code, out, err = trainspec(capsys, "submit", "spec.yaml", "-t", "azureml", "--subscription", "sub",
                               "--resource-group", "rg", "--workspace", "other")
    assert code == api.EXIT_NOT_SUBMITTED
    line = one_error(err)
    assert "workspace not found: ResourceNotFound: The Resource 'Microsoft.MachineLearningServices/workspaces/other'" in line


def test_not_logged_in(azure, capsys, caplog):
    write_az(azure.bin, logged_in=False)
    code, out, err = submit(capsys, "--wait")
    assert code == api.EXIT_NOT_SUBMITTED
    line = one_error(err)
    assert "azureml: not logged in:" in line and "az login" in line
    # azure-identity's own multi-line warning is not said again above it
    assert not [r for r in caplog.records if r.name.startswith("azure.identity") and r.levelno >= logging.WARNING]
    assert azure.job_puts == 0


def test_the_workspace_from_the_environment_and_what_is_missing(azure, capsys, monkeypatch):
    monkeypatch.setenv("AZUREML_SUBSCRIPTION_ID", "sub")
    monkeypatch.setenv("AZUREML_RESOURCE_GROUP", "rg")
    code, out, err = trainspec(capsys, "submit", "spec.yaml", "-t", "azureml")
    assert code == api.EXIT_NOT_SUBMITTED
    line = one_error(err)
    assert "no workspace: the workspace is not known" in line and "AZUREML_WORKSPACE" in line
    monkeypatch.setenv("AZUREML_WORKSPACE", "ws")
    assert trainspec(capsys, "submit", "spec.yaml", "-t", "azureml")[0] == api.EXIT_COMPLETED
    assert azure.job_puts == 1


def test_the_workspace_from_config_json(azure, capsys):
    (azure.bin.parent / "config.json").write_text(json.dumps(
        {"subscription_id": "sub", "resource_group": "rg", "workspace_name": "ws"}))
    code, out, err = trainspec(capsys, "submit", "spec.yaml", "-t", "azureml", "--wait")
    assert code == api.EXIT_COMPLETED, out + err


def test_without_azure_ai_ml_the_error_names_the_extra(azure, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "azure.ai.ml", None)  # import azure.ai.ml now raises ImportError
    code, out, err = submit(capsys)
    assert code == api.EXIT_NOT_SUBMITTED
    assert "pip install 'trainspec[azureml]'" in one_error(err)


def test_compiling_never_imports_azure_ai_ml(tmp_path):
    import subprocess

    script = textwrap.dedent("""
        import sys
        from trainspec.cli import main
        try:
            main(["compile", "spec.yaml", "-t", "azureml", "--out", "out"])
        except SystemExit:
            pass
        import trainspec.targets.azureml.submit
        assert not [m for m in sys.modules if m.startswith(("azure.ai.ml", "azure.identity"))], "imported"
    """)
    (tmp_path / "src").mkdir()
    (tmp_path / "spec.yaml").write_text(SPEC)
    import os

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr


RUN_WITH_FAKE = """
import atexit, json, os, sys
sys.path.insert(0, {tests!r})
import azureml_api

class Patch:
    def setattr(self, owner, name, value):
        setattr(owner, name, value)

fake = azureml_api.Fake()
fake.default = {{"statuses": ["Queued", "Running"]}}  # runs until canceled
azureml_api.patch_requests(Patch(), fake)
atexit.register(lambda: open("fake.json", "w").write(json.dumps({{"cancels": fake.cancels, "jobs": list(fake.jobs)}})))
from trainspec.cli import main
main(sys.argv[1:])
"""


def test_ctrl_c_while_waiting_leaves_the_job_running(azure, tmp_path):
    """The real process: SIGINT during --wait ends trainspec with 130 and cancels nothing."""
    import os
    import select
    import signal
    import subprocess
    import time
    from pathlib import Path

    from conftest import sigint_default

    script = RUN_WITH_FAKE.format(tests=str(Path(__file__).parent))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-c", script, "submit", "spec.yaml", "-t", "azureml", *WORKSPACE,
                             "--wait"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=sigint_default)
    try:
        deadline = time.monotonic() + 60
        seen = ""
        while "running" not in seen and time.monotonic() < deadline:  # it is waiting: the job is running
            if not select.select([proc.stdout], [], [], max(deadline - time.monotonic(), 0))[0]:
                break
            line = proc.stdout.readline()
            if not line:
                break
            seen += line
        assert "running" in seen, seen + proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == api.EXIT_INTERRUPTED, seen + out + err
    assert "stopped waiting; the job goes on. Cancel it with: trainspec cancel -t azureml --id az-smoke-" in seen + out
    record = json.loads((tmp_path / "fake.json").read_text())
    assert record["cancels"] == [] and len(record["jobs"]) == 1


def test_a_job_of_the_same_name_is_followed_only_with_this_jobs_digest(azure, capsys):
    """The job carries its full digest as the tag trainspec_digest; a job of its name without it
    (made by anyone who can create jobs in the workspace and read the spec), or with another, is
    an error: nothing submitted, nothing followed."""
    from pathlib import Path

    from conftest import job_of

    name, digest = job_of(Path("spec.yaml"), "azureml")
    code, out, err = submit(capsys)
    assert code == api.EXIT_COMPLETED, out + err
    tags = azure.jobs[name].body["properties"]["tags"]
    assert tags["trainspec_digest"] == digest
    for planted, said in ((None, "no trainspec_digest"), ("f" * 64, f"the digest {'f' * 64}")):
        tags.pop("trainspec_digest", None)
        if planted:
            tags["trainspec_digest"] = planted
        code, out, err = submit(capsys, "--wait")
        assert code == api.EXIT_NOT_SUBMITTED, out + err
        assert f"a job named {name} is already there ({name}; https://ml.azure.com/runs/{name}" in err
        assert f"it carries {said}, not {digest}; nothing submitted" in err
    assert azure.job_puts == 1


AZUREML_SPECS = example_specs("azureml")


@pytest.mark.parametrize("spec_file", sorted(AZUREML_SPECS))
def test_every_example_spec_submits(azure, capsys, tmp_path, spec_file):
    """Issue 41: each spec of specs/ that names Azure ML, as checked in, submitted from a copy of
    the repository's layout: the code and the shim uploaded, the job PUT on the spec's compute
    (or serverless, with none)."""
    copy_examples(tmp_path)
    compute = AZUREML_SPECS[spec_file].get("compute")  # none: serverless
    azure.computes = {compute}
    azure.assets = {"data": {"mnist", "sft-corpus"}, "environments": {"lightning-gpu-env"}}  # what the specs name
    code, out, err = trainspec(capsys, "submit", f"specs/{spec_file}", "-t", "azureml", *WORKSPACE)
    assert code == api.EXIT_COMPLETED, out + err
    [job] = azure.jobs.values()
    assert (job.body["properties"].get("computeId") or "/computes/None").endswith(f"/computes/{compute}")
    assert azure.unknown == []
    assert any(path.endswith("/trainspec_shim.py") for path in azure.uploads)
