"""Issue 40, what the review showed is what gets submitted: nothing local is uploaded that the
repository does not hold. A local input is a relative path inside the repository; an absolute
`inputs.*.path` is storage where the job runs (a path on Slurm's or HPC Pack's nodes, on Ray's
nodes, in a Kubernetes pod), never read, stat-ed or resolved on the machine that compiles, and
refused at its field on Azure ML, which has no such storage: azure-ai-ml uploads an absolute path
from the submitting machine (`path: /proc/self/environ` sent a CI runner's environment to the job).

Azure ML is checked with azure-ai-ml itself: its `load_job` of the compiled job.yml, and its own
submit path (`trainspec submit`, in this process, against the HTTP-level fake of
tests/azureml_api.py, which records every blob uploaded)."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from xml.etree import ElementTree

import pytest
import yaml

from conftest import git
from test_submit_azureml import WORKSPACE, azure, trainspec  # noqa: F401 (azure: the fake Azure ML, a fixture)

SECRET = "hunter2-runner"
TARGETS = ("azureml", "hpcpack", "ray", "slurm", "kubernetes")
SETTINGS = {"azureml": "{compute: gpu-cluster}", "hpcpack": "{shared_dir: /app}",
            "ray": "{location: eastus, resource_group: rg}", "slurm": "{}", "kubernetes": "{}"}
# what azure-ai-ml reads as remote and never uploads (its JobOperations._resolve_job_input: a URL
# with a host, or a name with : or @ that it looks up as an asset)
REMOTE = {"asset": "azureml:corpus:3", "store": "azureml://datastores/workspaceblobstore/paths/corpus/",
          "web": "https://example.com/corpus.csv", "lake": "abfss://data@acct.dfs.core.windows.net/corpus",
          "blob": "wasbs://data@acct.blob.core.windows.net/corpus"}


def repository(root: Path, inputs: str, targets=TARGETS) -> Path:
    """A git repository at ``root`` with the training code, a data folder and ``specs/job.yaml``
    whose inputs are ``inputs`` (a YAML flow mapping's content), for ``targets``."""
    (root / "specs").mkdir(parents=True, exist_ok=True)
    (root / "src").mkdir(exist_ok=True)
    (root / "src" / "train.py").write_text("print('train')\n")
    (root / "data").mkdir(exist_ok=True)
    (root / "data" / "vocab.txt").write_text("the repository's own data\n")
    if not (root / ".git").exists():
        git("init", "-q", "-b", "main", cwd=root)
    lines = "".join(f"  {target}: {SETTINGS[target]}\n" for target in targets)
    (root / "specs" / "job.yaml").write_text(f"""version: 1
name: job
code: ../src
command: python train.py --data {{{{ inputs.data }}}}
resources: {{nodes: 1, sku: Standard_NC24ads_A100_v4}}
environment: {{image: python:3.12}}
inputs: {{{inputs}}}
outputs: {{ckpt: {{path: /shared/ckpt}}}}
targets:
{lines}""")
    return root / "specs" / "job.yaml"


def run(capsys, monkeypatch, cwd: Path, *args):
    monkeypatch.chdir(cwd)
    return trainspec(capsys, *args)


# --- Azure ML, with azure-ai-ml itself -----------------------------------------------------------

def test_proc_self_environ_on_azureml_is_refused_at_its_field_and_nothing_is_uploaded(azure, capsys, monkeypatch,
                                                                                      tmp_path):
    """The issue's case: `inputs: {env: {path: /proc/self/environ, type: uri_file}}`, submitted to
    Azure ML from a runner whose environment holds a secret. It is an error at inputs.env.path (the
    hint names the forms Azure ML reads); no job is sent, no byte uploaded, nothing written."""
    monkeypatch.setenv("SECRET_TOKEN", SECRET)
    repository(tmp_path, "data: {path: ../data}, env: {path: /proc/self/environ, type: uri_file}", ["azureml"])
    code, out, err = run(capsys, monkeypatch, tmp_path, "submit", "specs/job.yaml", "-t", "azureml", *WORKSPACE)
    assert code != 0, out + err
    assert re.search(r"^specs/job\.yaml:7:45: error: inputs\.env\.path: '/proc/self/environ' is an absolute path, "
                     r"storage where the job runs on the other targets: an Azure ML job has none, and azure-ai-ml "
                     r"would upload the file of that name from the machine that submits the job \(hint: .*"
                     r"azureml:<asset>@<version>, azureml://datastores/<datastore>/paths/<path>, an https://, "
                     r"abfss:// or wasbs:// URL, or a path relative to the spec inside the repository", err, re.M), err
    assert azure.uploads == {} and azure.job_puts == 0
    assert not any(SECRET.encode() in body for body in azure.uploads.values())
    assert SECRET not in out + err
    code, out, err = run(capsys, monkeypatch, tmp_path, "compile", "specs/", "-o", "build", "-t", "azureml")
    assert code == 1 and "inputs.env.path: '/proc/self/environ' is an absolute path" in err, err
    assert not (tmp_path / "build").exists()


def test_azureml_uploads_only_the_repositorys_files_and_reads_every_other_input_where_it_is(azure, capsys, monkeypatch,
                                                                                           tmp_path):
    """Every form a compiled job.yml carries: the remote ones as written (azure-ai-ml's load_job
    keeps them, its submit looks them up, never uploads), a folder and a file of the repository as
    paths relative to job.yml; submitting through azure-ai-ml uploads exactly the repository's
    files (the code, the data) and trainspec's shim, nothing else."""
    from azure.ai.ml import load_job

    remote = ", ".join(f"{name}: {{path: '{path}'}}" for name, path in REMOTE.items())
    repository(tmp_path, "data: {path: ../data}, vocab: {path: ../data/vocab.txt, type: uri_file}, " + remote,
               ["azureml"])
    code, out, err = run(capsys, monkeypatch, tmp_path, "compile", "specs/", "-o", "build", "-t", "azureml")
    assert code == 0, err
    job_file = tmp_path / "build" / "job" / "azureml" / "job.yml"
    job = load_job(job_file)
    written = yaml.safe_load(job_file.read_text())["inputs"]
    assert {name: written[name]["path"] for name in ("data", "vocab")} == {"data": "../../../data",
                                                                          "vocab": "../../../data/vocab.txt"}
    for name, path in REMOTE.items():
        assert written[name]["path"] == path and job.inputs[name].path in (path, path.removeprefix("azureml:"))
    code, out, err = run(capsys, monkeypatch, tmp_path, "submit", "specs/job.yaml", "-t", "azureml", *WORKSPACE)
    assert code == 0, out + err
    ours = {p.read_bytes() for p in (tmp_path / "src" / "train.py", tmp_path / "data" / "vocab.txt",
                                     tmp_path / "build" / "job" / "azureml" / "trainspec_shim.py")}
    assert azure.uploads and set(azure.uploads.values()) <= ours, sorted(azure.uploads)
    assert {"train.py", "vocab.txt", "trainspec_shim.py"} == {path.rsplit("/", 1)[-1] for path in azure.uploads}
    (sent,) = [job.body["properties"]["inputs"] for job in azure.jobs.values()]
    for name, path in REMOTE.items():
        if not path.startswith("azureml:corpus"):
            assert sent[name]["uri"] == path, (name, sent[name])


# --- every target: an absolute path is never asked about here; a relative one stays inside ---------

def elsewhere(tmp_path: Path) -> Path:
    """A folder outside the repository that would answer "does it exist" differently from the
    cluster: a secret file in it, and a link to this process's environment."""
    place = tmp_path / "elsewhere" / "data"
    place.mkdir(parents=True)
    (place / "secret.txt").write_text(f"SECRET={SECRET}\n")
    os.symlink("/proc/self/environ", place / "env")
    return place


def spy_on(monkeypatch, place: Path) -> list:
    """Every file-system call of this process that names ``place`` or a path below it: stat,
    lstat (what realpath and resolve() call), open, scandir, listdir, readlink, access."""
    asked = []
    prefix = str(place)

    def watch(name):
        real = getattr(os, name)

        def call(path, *args, **kwargs):
            text = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else ""
            if text == prefix or text.startswith(prefix + "/"):
                asked.append((name, text))
            return real(path, *args, **kwargs)
        monkeypatch.setattr(os, name, call)

    for name in ("stat", "lstat", "open", "scandir", "listdir", "readlink", "access"):
        watch(name)
    return asked


@pytest.mark.parametrize("target", TARGETS)
def test_an_absolute_input_path_is_where_the_job_runs_and_never_asked_about_here(capsys, monkeypatch, tmp_path,
                                                                                 target):
    """validate, compile, plan and check never stat, resolve, list or open an absolute input path
    (it names the cluster's storage, or a place in the pod): on Slurm, HPC Pack, Ray and Kubernetes
    it reaches the job as written; on Azure ML it is an error at its field."""
    place = elsewhere(tmp_path)
    root = tmp_path / "repo"
    repository(root, f"data: {{path: '{place}'}}", [target])
    asked = spy_on(monkeypatch, place)
    results = {command: run(capsys, monkeypatch, root, command, "specs/", "-t", target, *extra)
               for command, extra in (("validate", ()), ("compile", ("-o", "build")), ("plan", ()),
                                      ("check", ("-o", "build")))}
    assert asked == [], asked
    for command, (code, out, err) in results.items():
        assert SECRET not in out + err, command
        if target == "azureml":
            assert code == 1 and re.search(rf"^specs/job\.yaml:7:23: error: inputs\.data\.path: "
                                           rf"'{re.escape(str(place))}' is an absolute path, storage where the job runs",
                                           err, re.M), (command, err)
        else:
            assert code == 0, (command, out + err)
    if target == "azureml":
        assert not (root / "build").exists()
        return
    job = root / "build" / "job" / target
    words = {"slurm": lambda: shlex.split(next(line for line in (job / "job.sbatch").read_text().splitlines()
                                               if line.startswith("srun "))),
             "hpcpack": lambda: shlex.split(next(ElementTree.parse(job / "job.xml").iter(
                 "{http://schemas.microsoft.com/HPCS2008R2/scheduler/}Task")).get("CommandLine")),
             "ray": lambda: json.loads((job / "trainspec_ray_job.json").read_text())["command"].split(),
             "kubernetes": lambda: (job / "job.yaml").read_text().split()}[target]()
    assert words[words.index("--data") + 1] == str(place), words
    if target == "ray":  # a path on the nodes, mounted into the container; nothing uploaded
        config = yaml.safe_load((job / "cluster.yaml").read_text())
        assert f"--volume={place}:{place}:ro" in config["docker"]["run_options"]
        assert not any("inputs" in key for key in config["file_mounts"])


@pytest.mark.parametrize("target", TARGETS)
def test_a_relative_input_path_that_leaves_the_repository_is_an_error_at_its_field(capsys, monkeypatch, tmp_path,
                                                                                   target):
    """A local input is a relative path inside the repository on every target: `../../elsewhere/data`
    is an error at inputs.data.path that says where it leads, and nothing is compiled."""
    place = elsewhere(tmp_path)
    root = tmp_path / "repo"
    repository(root, "data: {path: ../../elsewhere/data}", [target])
    for command, extra in (("validate", ()), ("compile", ("-o", "build"))):
        code, out, err = run(capsys, monkeypatch, root, command, "specs/", "-t", target, *extra)
        assert code == 1, err
        assert re.search(rf"^specs/job\.yaml:7:23: error: inputs\.data\.path: '\.\./\.\./elsewhere/data' leads to "
                         rf"{re.escape(str(place.resolve()))}, outside the repository ", err, re.M), err
        assert SECRET not in out + err
    assert not (root / "build").exists()


def test_a_local_input_that_is_a_fifo_is_an_error_at_its_field(capsys, monkeypatch, tmp_path):
    """Local data is uploaded (Azure ML, Ray's file_mounts): a FIFO in the repository would block
    the upload, or hand it what another process writes; a regular file or a folder only."""
    os.mkfifo(tmp_path / "pipe")
    repository(tmp_path, "data: {path: ../pipe, type: uri_file}")
    code, out, err = run(capsys, monkeypatch, tmp_path, "validate", "specs/")
    assert code == 1
    assert re.search(r"^specs/job\.yaml:7:23: error: inputs\.data\.path: '\.\./pipe' is a FIFO \(named pipe\), not "
                     r"a regular file or a folder", err, re.M), err


def test_a_local_input_azure_ml_would_take_for_a_data_asset_is_an_error_on_azureml(capsys, monkeypatch, tmp_path):
    """azure-ai-ml looks a path with ':' or '@' up as a data asset (name:version, name@label) and
    never uploads it: a repository folder `data@v2` would not be the job's data."""
    (tmp_path / "data@v2").mkdir()
    repository(tmp_path, "data: {path: ../data@v2}", ["azureml", "ray"])
    code, out, err = run(capsys, monkeypatch, tmp_path, "validate", "specs/")
    assert code == 1
    assert re.search(r"^specs/job\.yaml:7:23: error: inputs\.data\.path: '\.\./data@v2' holds ':' or '@': "
                     r"azure-ai-ml reads such a path as a data asset \(name:version, name@label\), not as the "
                     r"repository's data to upload \(hint: rename", err, re.M), err
    assert run(capsys, monkeypatch, tmp_path, "compile", "specs/", "-t", "ray", "-o", "build")[0] == 0  # Ray uploads it


@pytest.mark.parametrize("path", ["file:///proc/self/environ", "file:../data"])
def test_a_file_url_input_is_an_error_at_its_field(capsys, monkeypatch, tmp_path, path):
    """A `file:` URL names a file of the machine that compiles or submits (azure-ai-ml's schema
    reads it as a local path): no target reads data there, whatever the spec lists."""
    repository(tmp_path, f"data: {{path: '{path}'}}")
    code, out, err = run(capsys, monkeypatch, tmp_path, "validate", "specs/")
    assert code == 1
    assert re.search(rf"^specs/job\.yaml:7:23: error: inputs\.data\.path: '{re.escape(path)}' is a file: URL, a file "
                     r"of the machine that compiles or submits the job: no target reads data from there \(hint: local "
                     r"data is a path relative to the spec, inside the repository", err, re.M), err


def test_compiles_are_byte_identical_whatever_is_at_an_absolute_input_path(capsys, monkeypatch, tmp_path):
    """Nothing missing, a file, a folder, a link to this process's environment, or /proc/self/environ
    itself in two processes (two pids): every target's output, and Azure ML's error, are the same."""
    from conftest import ts

    place = tmp_path / "elsewhere" / "data"
    place.parent.mkdir()
    root = tmp_path / "repo"
    repository(root, f"data: {{path: '{place}'}}")
    others = [word for target in TARGETS[1:] for word in ("-t", target)]

    def compiled(out: str):
        code, _, err = run(capsys, monkeypatch, root, "compile", "specs/", "-o", out, *others)
        assert code == 0, err
        files = {p.relative_to(root / out).as_posix(): p.read_bytes() for p in (root / out).rglob("*") if p.is_file()}
        refused = run(capsys, monkeypatch, root, "compile", "specs/", "-o", out + "-azureml", "-t", "azureml")
        assert refused[0] == 1 and not (root / (out + "-azureml")).exists()
        return files, refused

    results = [compiled("missing")]
    place.write_text(f"SECRET={SECRET}\n")
    results.append(compiled("file"))
    place.unlink()
    place.mkdir()
    results.append(compiled("folder"))
    place.rmdir()
    os.symlink("/proc/self/environ", place)
    results.append(compiled("link"))
    assert all(result == results[0] for result in results[1:])
    # /proc/self resolves to each process's own pid: two compiles are still the same
    repository(root, "data: {path: /proc/self/environ}")
    runs = [ts("compile", "specs/", "-o", out, "-t", "azureml", cwd=root) for out in ("one", "two")]
    assert [proc.returncode for proc in runs] == [1, 1] and runs[0].stderr == runs[1].stderr, runs[0].stderr
    assert not (root / "one").exists() and not (root / "two").exists()
