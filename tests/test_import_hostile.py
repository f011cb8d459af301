"""Issue 27: `trainspec import` never ends in an internal error. Every field the importer reads,
given each wrong type (text, an integer, a list, a mapping, null, a boolean), is a located error in
the job file, all of them in one run, exit 1; a key azure-ai-ml refuses, a placeholder where a name
goes and a preview-schema compute are refused at their own line, never dropped or guessed.

The runs go through the command line's own entry point in this process (`test_fuzz.run_in_process`,
under its hang guard): a few hundred imports in seconds."""

from __future__ import annotations

import copy
import re
import warnings
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from conftest import REPO
from test_fuzz import run_in_process
from trainspec.core.diagnostics import dotted

LOCATED = re.compile(r"^job\.yml:(\d+):(\d+): error: (\S+): (.*)$")
JOB = """\
$schema: https://azuremlschemas.azureedge.net/latest/commandJob.schema.json
type: command
name: base-job
display_name: Base job
description: what it trains
experiment_name: nlp
tags: {team: nlp}
code: src
command: python train.py --data ${{inputs.data}} --epochs ${{inputs.epochs}} --out ${{outputs.model}}
environment: azureml:acpt@latest
compute: azureml:gpu-cluster
resources: {instance_count: 2, instance_type: Standard_NC24ads_A100_v4, shm_size: 16g, docker_args: --ipc=host}
distribution: {type: pytorch, process_count_per_instance: 8}
environment_variables: {NCCL_DEBUG: WARN}
inputs:
  data: {type: uri_folder, path: azureml:corpus@latest, mode: ro_mount}
  epochs: 3
outputs:
  model: {type: uri_folder, mode: rw_mount, name: model, version: "1"}
identity: {type: managed, client_id: abc}
services:
  tb: {type: tensor_board, port: 6006, log_dir: outputs/tb, properties: {a: b}}
limits: {timeout: 3600}
queue_settings: {job_tier: standard, priority: medium}
"""
TENSORFLOW = {"distribution": {"type": "tensorflow", "worker_count": 2, "parameter_server_count": 1}}
INLINE_ENV = {"environment": {"image": "python:3.11", "conda_file": "conda.yml"}}
BUILD_ENV = {"environment": {"build": {"path": "docker", "dockerfile_path": "Dockerfile"}}}

# every field `trainspec import` reads, with what it takes (written here, not read from the importer:
# a field the importer forgets to check fails here); the variant of the job it is in
TEXT, COUNT, SCALAR, MAPPING, NAME_OR_MAPPING, INPUT = "text", "count", "scalar", "mapping", "name or mapping", "input"
FIELDS = [
    (("type",), TEXT, {}), (("name",), TEXT, {}), (("display_name",), TEXT, {}), (("description",), TEXT, {}),
    (("experiment_name",), TEXT, {}), (("tags",), MAPPING, {}), (("tags", "team"), TEXT, {}),
    (("code",), NAME_OR_MAPPING, {}), (("command",), TEXT, {}), (("environment",), NAME_OR_MAPPING, {}),
    (("compute",), TEXT, {}), (("resources",), MAPPING, {}), (("resources", "instance_count"), COUNT, {}),
    (("resources", "instance_type"), TEXT, {}), (("resources", "shm_size"), TEXT, {}),
    (("resources", "docker_args"), TEXT, {}), (("distribution",), MAPPING, {}),
    (("distribution", "type"), TEXT, {}), (("distribution", "process_count_per_instance"), COUNT, {}),
    (("distribution", "worker_count"), COUNT, TENSORFLOW), (("distribution", "parameter_server_count"), COUNT, TENSORFLOW),
    (("environment_variables",), MAPPING, {}), (("environment_variables", "NCCL_DEBUG"), SCALAR, {}),
    (("inputs",), MAPPING, {}), (("inputs", "data"), INPUT, {}), (("inputs", "data", "path"), TEXT, {}),
    (("inputs", "data", "type"), TEXT, {}), (("inputs", "data", "mode"), TEXT, {}), (("inputs", "epochs"), SCALAR, {}),
    (("outputs",), MAPPING, {}), (("outputs", "model"), MAPPING, {}), (("outputs", "model", "type"), TEXT, {}),
    (("outputs", "model", "mode"), TEXT, {}), (("outputs", "model", "name"), TEXT, {}),
    (("identity",), MAPPING, {}), (("identity", "type"), TEXT, {}), (("identity", "client_id"), TEXT, {}),
    (("services",), MAPPING, {}), (("services", "tb"), MAPPING, {}), (("services", "tb", "type"), TEXT, {}),
    (("services", "tb", "port"), COUNT, {}), (("services", "tb", "log_dir"), TEXT, {}),
    (("services", "tb", "properties"), MAPPING, {}), (("services", "tb", "properties", "a"), SCALAR, {}),
    (("limits",), MAPPING, {}), (("limits", "timeout"), COUNT, {}), (("queue_settings",), MAPPING, {}),
    (("queue_settings", "job_tier"), TEXT, {}), (("queue_settings", "priority"), TEXT, {}),
    (("environment", "image"), TEXT, INLINE_ENV), (("environment", "build"), MAPPING, BUILD_ENV),
    (("environment", "build", "path"), TEXT, BUILD_ENV), (("environment", "build", "dockerfile_path"), TEXT, BUILD_ENV),
]
WRONG = {"text": "x", "integer": 5, "list": [1], "mapping": {"a": {"b": 1}}, "null": None, "boolean": True, "number": 2.5}
TAKES = {TEXT: {"text"}, COUNT: {"integer"}, SCALAR: {"text", "integer", "boolean", "number"}, MAPPING: set(),
         NAME_OR_MAPPING: {"text"}, INPUT: {"text", "integer", "boolean", "number"}}


def job_with(tmp_path: Path, changes=(), variant=None) -> Path:
    """The job (with ``variant``'s fields) with each ``(path, value)`` of ``changes`` written in."""
    job = YAML(typ="rt").load(JOB)
    job.update(copy.deepcopy(variant or {}))
    for path, value in changes:
        node = job
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    yaml = YAML()
    yaml.default_flow_style = False
    with open(tmp_path / "job.yml", "w") as out:
        yaml.dump(job, out)
    (tmp_path / "src").mkdir(exist_ok=True)
    return tmp_path / "job.yml"


def errors_of(stderr: str):
    return [LOCATED.match(line) for line in stderr.splitlines() if ": error: " in line]


def test_the_job_every_case_breaks_imports_cleanly(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for variant in ({}, TENSORFLOW, INLINE_ENV, BUILD_ENV):
        job_with(tmp_path, variant=variant)
        code, stdout, stderr = run_in_process(["import", "job.yml"])
        assert code == 0 and errors_of(stderr) == [], stderr


CASES = [pytest.param(path, kind, variant, id=f"{dotted(path)}={kind}")
         for path, takes, variant in FIELDS for kind in WRONG if kind not in TAKES[takes]]


@pytest.mark.parametrize("path, kind, variant", CASES)
def test_every_wrongly_typed_field_is_a_located_error_never_an_internal_error(tmp_path, monkeypatch, path, kind,
                                                                              variant):
    """Bug: `outputs: "x"`, `resources: {instance_count: "x"}`, `services: {a: 5}` and 14 more shapes
    ended in "internal error" (exit 70)."""
    monkeypatch.chdir(tmp_path)
    job = job_with(tmp_path, [(path, WRONG[kind])], variant)
    code, stdout, stderr = run_in_process(["import", "job.yml"])
    assert code == 1, stderr
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    assert stdout == "" and "nothing written" in stderr
    errors = errors_of(stderr)
    assert errors and all(errors), stderr  # every error located: job.yml:LINE:COL
    lines = job.read_text().splitlines()
    field = dotted(path)
    mine = [e for e in errors if e.group(3) == field or e.group(3).startswith((field + ".", field + "["))]
    assert mine, stderr
    for found in mine:
        line = int(found.group(1))
        assert 1 <= line <= len(lines), found.group(0)
        assert re.search(r"expected .+, got |expected a mapping with|azure-ai-ml refuses|not an Azure ML command job",
                         found.group(4)), \
            found.group(0)


def test_all_the_wrong_fields_of_a_job_are_said_in_one_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    changes = [(("outputs", "model"), "x"), (("resources", "instance_count"), "x"), (("services", "tb"), 5),
               (("limits", "timeout"), [1]), (("tags", "team"), 3), (("display_name",), None),
               (("distribution", "process_count_per_instance"), 2.5), (("environment_variables", "NCCL_DEBUG"), {"a": 1})]
    job_with(tmp_path, changes)
    code, stdout, stderr = run_in_process(["import", "job.yml"])
    assert code == 1 and "Traceback" not in stderr, stderr
    said = {e.group(3) for e in errors_of(stderr)}
    assert said == {dotted(path) for path, _ in changes}, stderr


def run_job(tmp_path, monkeypatch, text: str):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.yml").write_text(text)
    (tmp_path / "src").mkdir(exist_ok=True)
    code, stdout, stderr = run_in_process(["import", "job.yml"])
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    return code, stderr.splitlines()


BASE = "type: command\ncode: src\ncommand: python train.py\n"


def test_a_key_azure_ai_ml_refuses_is_an_error_at_its_own_line_never_dropped(tmp_path, monkeypatch):
    """Bug: `job_service_type` (the REST API's name for a service's type) was dropped with a warning;
    azure-ai-ml refuses the job file (unknown=RAISE), so the import was of a job that never ran."""
    text = (BASE + "environment: azureml:acpt@latest\ncompute: azureml:gpu\n"
            "services:\n  ssh:\n    job_service_type: ssh\n    port: 22\n"
            "distribution: {type: pytorch, worker_count: 2}\nnode_count: 2\n")
    code, lines = run_job(tmp_path, monkeypatch, text)
    assert code == 1
    assert ("job.yml:8:5: error: services.ssh.job_service_type: azure-ai-ml refuses this key (unknown field) (hint: "
            "write type (ssh, tensor_board, vs_code or jupyter_lab): job_service_type is the REST API's name, which "
            "azure-ai-ml refuses in a job file)") in lines, lines
    assert ("job.yml:10:31: error: distribution.worker_count: azure-ai-ml refuses worker_count in a pytorch "
            "distribution (hint: a pytorch distribution takes process_count_per_instance)") in lines, lines
    assert ("job.yml:11:1: error: node_count: azure-ai-ml refuses this key (unknown field) (hint: write "
            "resources.instance_count)") in lines, lines
    # and azure-ai-ml itself does refuse each of them
    azure_ml = pytest.importorskip("azure.ai.ml", reason="azure-ai-ml is a test extra: pip install -e '.[test]'")
    for key, refused in (("job_service_type", "services:\n  ssh:\n    job_service_type: ssh\n"),
                         ("worker_count", "distribution: {type: pytorch, worker_count: 2}\n"),
                         ("node_count", "node_count: 2\n")):
        (tmp_path / "one.yml").write_text(BASE + "environment: azureml:acpt:1\ncompute: azureml:gpu\n" + refused)
        with warnings.catch_warnings(), pytest.raises(Exception, match=key):
            warnings.simplefilter("ignore")
            azure_ml.load_job(tmp_path / "one.yml")


@pytest.mark.parametrize("written, field, line, col, placeholder", [
    ("environment: {your environment}\ncompute: azureml:gpu\n", "environment", 4, 14, "{your environment}"),
    ("environment: azureml:acpt@latest\ncompute: <compute name>\n", "compute", 5, 10, "<compute name>"),
    ("environment: < your environment name >\ncompute: azureml:gpu\n", "environment", 4, 14,
     "< your environment name >"),
    ("environment: {image: <your image>}\ncompute: azureml:gpu\n", "environment.image", 4, 22, "<your image>"),
    ("environment: azureml:acpt@latest\ncompute: {your compute}\n", "compute", 5, 10, "{your compute}"),
    ("environment: azureml:acpt@latest\nresources: {instance_type: <vm size>}\n", "resources.instance_type", 5, 28,
     "<vm size>"),
    ("environment: azureml:acpt@latest\ninputs: {d: {path: 'azureml://datastores/<store>/paths/x'}}\n",
     "inputs.d.path", 5, 20, "<store>"),
    ("environment: azureml:acpt@latest\nexperiment_name: <your experiment>\n", "experiment_name", 5, 18,
     "<your experiment>"),
])
def test_a_placeholder_where_a_name_goes_is_refused_at_its_line(tmp_path, monkeypatch, written, field, line, col,
                                                                 placeholder):
    """Bug: `environment: {your environment}` (YAML reads braces as a mapping) became `environment: {}`
    in the spec, with a warning; `<compute name>` was carried as the compute's name."""
    code, lines = run_job(tmp_path, monkeypatch, BASE + written)
    assert code == 1
    said = [l for l in lines if l.startswith(f"job.yml:{line}:{col}: error: {field}: ")]
    assert said and f"{placeholder} is a placeholder, not a name" in said[0], lines


def test_a_preview_schema_compute_is_refused_at_its_line_never_imported_as_one_node(tmp_path, monkeypatch):
    """Bug: `compute: {target: azureml:gpu, instance_count: 2}` (the preview schema) was imported as a
    one-node job with no compute."""
    code, lines = run_job(tmp_path, monkeypatch, BASE + "environment: azureml:acpt@latest\n"
                          "compute:\n  target: azureml:gpu\n  instance_count: 2\n")
    assert code == 1
    assert ("job.yml:5:1: error: compute: a compute mapping (target, instance_count) is the preview schema: "
            "azure-ai-ml reads compute as a name and the node count from resources.instance_count (hint: write "
            "compute: azureml:gpu and resources: {instance_count: 2})") in lines, lines


def test_a_distribution_without_its_type_is_refused(tmp_path, monkeypatch):
    code, lines = run_job(tmp_path, monkeypatch, BASE + "environment: azureml:acpt@latest\n"
                          "distribution: {process_count_per_instance: 4}\n")
    assert code == 1
    assert any(l.startswith("job.yml:5:15: error: distribution: expected a mapping with type") for l in lines), lines


def test_an_environment_file_of_the_wrong_shape_is_refused_at_its_own_lines(tmp_path, monkeypatch):
    (tmp_path / "env.yml").write_text("name: e\nbuild: ./docker\nimage: [a]\n")
    code, lines = run_job(tmp_path, monkeypatch, BASE + "environment: file:env.yml\n")
    assert code == 1
    assert any(l.startswith("env.yml:2:8: error: build: expected a mapping, got text './docker'") for l in lines), lines
    assert any(l.startswith("env.yml:3:8: error: image: expected a name, got a list") for l in lines), lines


def test_digits_in_quotes_are_a_count_as_azure_ai_ml_reads_them(tmp_path, monkeypatch):
    code, lines = run_job(tmp_path, monkeypatch, BASE + "environment: azureml:acpt@latest\n"
                          "resources: {instance_count: '2'}\ndistribution: {type: mpi, process_count_per_instance: '4'}\n")
    assert code == 0, lines
    # but not 5,000 of them (int() refuses more than 4,300): an error, not an internal error
    code, lines = run_job(tmp_path, monkeypatch, BASE + "environment: azureml:acpt@latest\n"
                          f"resources: {{instance_count: '{'9' * 5000}'}}\n")
    assert code == 1 and any(": error: resources.instance_count: expected a whole number, got text '999" in line
                             for line in lines), lines


@pytest.mark.parametrize("count", ["\u00b2", "\u0663", "\uff18"])
def test_a_launcher_count_in_other_digits_is_not_a_count(tmp_path, monkeypatch, count):
    """Bug: `accelerate launch --num_processes ²` ended in "internal error: ValueError" (exit 70):
    '²' is a digit to str.isdigit() and not to int(). Not a count: the command is kept as written."""
    code, lines = run_job(tmp_path, monkeypatch, BASE.replace("python train.py", f"accelerate launch "
                          f"--num_processes {count} train.py") + "environment: azureml:acpt@latest\n")
    assert code == 0, lines
    assert not any("process(es) per node" in line for line in lines), lines


@pytest.mark.parametrize("written, field, col", [
    ('code: "a\\0b"\nenvironment: azureml:acpt@latest\n', "code", 7),
    ("code: loop-a\nenvironment: azureml:acpt@latest\n", "code", 7),
    ("code: " + "x" * 300 + "\nenvironment: azureml:acpt@latest\n", "code", 7),
    ("code: src\nenvironment: {image: x, conda_file: loop-a}\n", "environment.conda_file", 37),
    ('code: src\nenvironment: {build: {path: "a\\0b"}}\n', "environment.build.path", 29),
    ("code: src\nenvironment: azureml:acpt@latest\ninputs: {d: {path: loop-a}}\n", "inputs.d.path", 20),
])
def test_a_path_no_file_system_can_hold_is_an_error_at_its_field(tmp_path, monkeypatch, written, field, col):
    """Bug: a NUL in a path ended in "internal error: ValueError: embedded null byte", a symlink loop
    in "RuntimeError: Symlink loop" (Path.resolve()), both exit 70."""
    (tmp_path / "loop-a").symlink_to("loop-b")
    (tmp_path / "loop-b").symlink_to("loop-a")
    code, lines = run_job(tmp_path, monkeypatch, "type: command\ncommand: python train.py\n" + written)
    assert code == 1
    line = 3 if field == "code" else (4 if field.startswith("environment") else 5)
    assert any(l.startswith(f"job.yml:{line}:{col}: error: {field}: ") for l in lines), lines


@pytest.mark.parametrize("argv, expected", [
    (["/"], "/:1:1: error: is a directory, not a spec file"),
    (["."], ".:1:1: error: is a directory, not a spec file"),
    (["job.yml", "-o", "loop-a/x.yaml"], "cannot write loop-a/x.yaml: is a symbolic link loop"),
    (["job.yml", "-o", "x" * 300 + "/x.yaml"], "the path has a part of 300 bytes"),
    (["job.yml", "-o", "a\0b.yaml"], "cannot write a\\x00b.yaml: the path contains a NUL character"),
    (["job.yml", "-o", "loop-a"], "loop-a exists: trainspec import never overwrites a file"),
])
def test_the_job_and_the_out_arguments_never_end_in_an_internal_error(tmp_path, monkeypatch, argv, expected):
    """Bug: `trainspec import /` and `import .` ended in "ValueError: ... has an empty name", `-o`
    through a symlink loop or a 300-byte name in RuntimeError / OSError: exit 70."""
    (tmp_path / "loop-a").symlink_to("loop-b")
    (tmp_path / "loop-b").symlink_to("loop-a")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.yml").write_text(BASE + "environment: azureml:acpt@latest\n")
    code, stdout, stderr = run_in_process(["import", *argv])
    assert code in (1, 2) and "internal error" not in stderr and "Traceback" not in stderr, stderr
    assert expected in stderr, stderr


PUBLIC = REPO.parent / "shared" / "reference" / "azureml-jobs-public"


@pytest.mark.skipif(not PUBLIC.is_dir(), reason=f"the public jobs are read from {PUBLIC}, not copied here")
def test_the_public_job_published_with_placeholders_is_refused_at_both(tmp_path, monkeypatch):
    """nebula-cifar10-deepspeed as published (`< your environment name >`, `< your compute name >`):
    the two lines to fill in, nothing written (test_public_jobs imports it with the names filled)."""
    text = (PUBLIC / "nebula-cifar10-deepspeed" / "job" / "nebula-cifar10-deepspeed.yml").read_text()
    code, lines = run_job(tmp_path, monkeypatch, text)
    assert code == 1
    errors = [l for l in lines if ": error: " in l]
    assert [l.split(": error: ")[1].split(":")[0] for l in errors] == ["environment", "compute"], errors
    assert [l.split(":")[1] for l in errors] == [
        str(n) for n, l in enumerate(text.splitlines(), 1) if "< your" in l and not l.lstrip().startswith("#")]
