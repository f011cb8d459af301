"""`trainspec import` (issue 11): an Azure ML command job becomes a spec that compiles back to an
equivalent job. Over the hand-written jobs in tests/jobs/: import, compile, then compare the
two REST bodies azure-ai-ml makes, field by field; and what cannot be carried is reported by
field with its line."""

import os
import shutil
from pathlib import Path
import warnings

import pytest
from ruamel.yaml import YAML

from conftest import REPO, ts
from trainspec.core.fields import is_remote

azure_ml = pytest.importorskip("azure.ai.ml", reason="azure-ai-ml is a test extra: pip install -e '.[test]'")

JOBS = REPO / "tests" / "jobs"
ACCEPTED = ["pytorch-cluster", "mpi-serverless", "tensorflow-ps", "build-context", "env-file"]
# Your own jobs too: TRAINSPEC_IMPORT_JOBS=/path/to/jobs pytest tests/test_import.py round-trips every
# *.yml command job in that folder (its code folders must be there), so a team can check its fifty
# jobs before moving them.
OWN = os.environ.get("TRAINSPEC_IMPORT_JOBS")
SHIM = ("TRAINSPEC_", "PL_TRAINER_")




def loaded(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        job = azure_ml.load_job(path)
        return job, job._to_job()._to_rest_object().as_dict()["properties"]


def environment_of(job):
    """What the job runs in: a registered name, or an image with its conda file, or a build folder."""
    env = job.environment
    if isinstance(env, str):
        return env
    # an environment in a file of its own (`file:`) is relative to that file
    build = (Path(env.base_path or job.base_path) / env.build.path).resolve() if env.build else None
    return {"image": env.image, "conda": env.conda_file, "build": build}


@pytest.fixture
def workdir(tmp_path):
    shutil.copytree(JOBS, tmp_path / "jobs")
    (tmp_path / "specs").mkdir()  # the spec lives elsewhere than the job: its paths are rewritten
    return tmp_path


def own_jobs():
    if not OWN:
        return []
    return [pytest.param(p, id=p.relative_to(OWN).as_posix()) for p in sorted(Path(OWN).rglob("*.yml"))
            if "command:" in p.read_text(errors="replace")]


if OWN:  # defined only when asked for, so a normal run neither runs nor skips it
    @pytest.mark.parametrize("job", own_jobs())
    def test_your_own_jobs_round_trip(tmp_path, job):
        shutil.copytree(OWN, tmp_path / "jobs", dirs_exist_ok=True)
        (tmp_path / "specs").mkdir()
        name = job.relative_to(OWN).with_suffix("").as_posix()
        check_round_trip(tmp_path, name)


@pytest.mark.parametrize("name", ACCEPTED)
def test_an_imported_job_compiles_back_to_an_equivalent_job(workdir, name):
    check_round_trip(workdir, name)


def check_round_trip(workdir, name):
    (workdir / "specs" / name).parent.mkdir(parents=True, exist_ok=True)
    proc = ts("import", f"jobs/{name}.yml", "-o", f"specs/{name}.yaml", cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    assert "it validates" in proc.stderr
    compiled = ts("compile", f"specs/{name}.yaml", "-o", "build", cwd=workdir)
    assert compiled.returncode == 0, compiled.stderr
    spec = YAML(typ="safe").load((workdir / "specs" / f"{name}.yaml").read_text())
    theirs_job, theirs = loaded(workdir / "jobs" / f"{name}.yml")
    ours_job, ours = loaded(workdir / "build" / spec["name"] / "azureml" / "job.yml")
    # Azure's defaults, written out by the compiled job: an input's and an output's mode, and for a single process a
    # pytorch distribution of one (what Azure ML runs when a one-node job names none)
    for output in theirs.get("outputs", {}).values():
        output.setdefault("mode", "ReadWriteMount")
    for item in theirs.get("inputs", {}).values():  # a data input's default mode
        if "uri" in item:
            item.setdefault("mode", "ReadOnlyMount")
    if "distribution" not in theirs and theirs.get("resources", {}).get("instanceCount", 1) == 1:
        theirs["distribution"] = {"processCountPerInstance": 1, "distributionType": "PyTorch"}
    # where it runs, how many processes, in what
    for key in ("computeId", "distribution", "description", "identity", "services"):
        assert ours.get(key) == theirs.get(key), key
    assert ours["resources"] == theirs.get("resources", {"instanceCount": 1, "properties": {}})
    assert environment_of(ours_job) == environment_of(theirs_job)
    assert (ours_job.base_path / ours_job.code).resolve() == (theirs_job.base_path / theirs_job.code).resolve()
    # its data and settings (a local input's path is written relative to each job: compare where it points)
    def where(job, inputs):
        for item in inputs.values():
            if "uri" in item and not is_remote(item["uri"]) and (job.base_path / item["uri"]).exists():
                item["uri"] = str((job.base_path / item["uri"]).resolve())
        return inputs
    theirs_inputs = where(theirs_job, theirs.get("inputs", {}))
    assert where(ours_job, {k: v for k, v in ours["inputs"].items() if k != "trainspec_runtime"}) == theirs_inputs
    assert ours.get("outputs") == theirs.get("outputs")
    assert ours.get("limits") == theirs.get("limits")
    assert str(ours.get("queueSettings")).lower() == str(theirs.get("queueSettings")).lower()
    # names as written, and none where the job set none; every tag the job had, trainspec's beside them
    assert ours.get("experimentName") == theirs.get("experimentName")
    assert ours.get("displayName") == theirs.get("displayName")
    assert theirs.get("tags", {}) == {k: v for k, v in ours["tags"].items() if not k.startswith("trainspec_")}
    kept = {k: v for k, v in theirs.get("environmentVariables", {}).items() if k != "MASTER_PORT"}
    assert kept == {k: v for k, v in ours["environmentVariables"].items() if not k.startswith(SHIM)}
    # the command: the job's own, under the shim (an MPI-env wrapper dropped)
    command = theirs["command"].replace("python aml_mpi_env.py ", "")
    assert ours["command"].endswith(" -- " + command), (ours["command"], command)


def test_what_a_spec_cannot_carry_is_reported_by_field_with_its_line(workdir):
    proc = ts("import", "jobs/refused.yml", "-o", "specs/refused.yaml", cwd=workdir)
    assert proc.returncode == 1
    assert not (workdir / "specs" / "refused.yaml").exists()
    lines = proc.stderr.splitlines()
    assert "jobs/refused.yml:4:10: error: command: ${{parent.inputs.seed}} is not an input or output reference: " \
           "a spec cannot carry it" in lines
    assert "jobs/refused.yml:7:43: warning: resources.locations: has no place in a spec: not carried" in lines
    assert "jobs/refused.yml:9:34: error: inputs.data.path: a binding to another job's output is not carried" in lines
    # a key azure-ai-ml itself refuses (issue 27): an error at the key, no longer a warning that drops it
    assert any(l.startswith("jobs/refused.yml:10:1: error: is_deterministic: azure-ai-ml refuses this key") for l in lines)
    assert "Traceback" not in proc.stderr


def test_the_wrapper_and_the_shims_variables_are_dropped_with_a_note(workdir):
    proc = ts("import", "jobs/mpi-serverless.yml", cwd=workdir)
    assert proc.returncode == 0
    assert "jobs/mpi-serverless.yml:4:10: warning: command: aml_mpi_env.py (a wrapper that exports torch's " \
           "variables) dropped" in proc.stderr
    assert "environment_variables.MASTER_PORT: MASTER_PORT is set by the trainspec shim: dropped" in proc.stderr
    spec = YAML(typ="safe").load(proc.stdout.split("\n", 1)[1])
    assert spec["command"] == "python train.py --epochs 10 --out {{ outputs.ckpt }}"
    assert spec["resources"]["spot"] is True and "job_tier" not in spec["targets"]["azureml"]


def test_import_never_overwrites(workdir):
    (workdir / "specs" / "x.yaml").write_text("keep me\n")
    proc = ts("import", "jobs/tensorflow-ps.yml", "-o", "specs/x.yaml", cwd=workdir)
    assert proc.returncode == 2 and "never overwrites" in proc.stderr
    assert (workdir / "specs" / "x.yaml").read_text() == "keep me\n"


JOB = """\
type: command
display_name: Gpu Diag (NCCL tests)
tags: {framework: jax, backend: tpu, launcher: slurm, team: nlp}
code: src
command: python train.py --cache ${{outputs.hf_dir}}
environment: azureml:acpt@latest
environment_variables:
  HF_HUB_CACHE: ${{outputs.hf_dir}}
  DATA: ${{inputs.data}}/train
compute: azureml:h100-nvl
resources: {instance_count: 1, docker_args: "--ipc=host --ulimit memlock=-1"}
distribution: {type: pytorch, process_count_per_instance: 2}
inputs:
  data: {type: uri_folder, path: azureml:corpus@latest}
outputs:
  hf_dir: {type: uri_folder}
services:
  tb: {type: tensor_board, properties: {logDir: outputs/tb}, port: 6006}
  lab: {type: jupyter_lab, properties: {token: abc}}
"""


def test_nothing_dropped_nothing_invented(workdir):
    """Env references, a TensorBoard service's logDir and other properties, docker_args, the display
    name as written, an experiment name the job never set (none), the team's own `framework` tag:
    all reach the compiled job's REST body exactly as the original's."""
    (workdir / "jobs" / "carried.yml").write_text(JOB)
    (workdir / "trainspec-skus.yaml").write_text("computes: {h100-nvl: Standard_NC80adis_H100_v5}\n")
    check_round_trip(workdir, "carried")
    spec = YAML(typ="safe").load((workdir / "specs" / "carried.yaml").read_text())
    assert spec["env"] == {"HF_HUB_CACHE": "{{ outputs.hf_dir }}", "DATA": "{{ inputs.data }}/train"}
    assert spec["resources"]["sku"] == "Standard_NC80adis_H100_v5" and "gpus_per_node" not in spec["resources"]
    settings = spec["targets"]["azureml"]
    assert settings["display_name"] == "Gpu Diag (NCCL tests)" and settings["experiment_name"] is None
    assert settings["docker_args"] == "--ipc=host --ulimit memlock=-1"
    assert settings["services"]["tb"] == {"type": "tensor_board", "port": 6006, "log_dir": "outputs/tb"}
    _, ours = loaded(workdir / "build" / spec["name"] / "azureml" / "job.yml")
    theirs = loaded(workdir / "jobs" / "carried.yml")[1]
    for key in ("environmentVariables", "services", "resources", "tags", "displayName", "experimentName"):
        mine = ours.get(key)
        if key == "environmentVariables":
            mine = {k: v for k, v in mine.items() if not k.startswith(SHIM)}
        if key == "tags":
            mine = {k: v for k, v in mine.items() if not k.startswith("trainspec_")}
        assert mine == theirs.get(key), key
    assert "experimentName" not in ours and ours["tags"]["framework"] == "jax"
    assert ours["tags"]["trainspec_framework"] == "pytorch" and ours["resources"]["dockerArgs"] == "--ipc=host --ulimit memlock=-1"


def test_assumptions_are_said_once_after_the_notes_the_one_that_changes_the_job_first(workdir):
    (workdir / "jobs" / "own.yml").write_text(
        "type: command\ncode: src\nenvironment: azureml:acpt@latest\ncompute: azureml:gpu\n"
        "command: torchrun --nproc_per_node 4 --nnodes 2 train.py --data ${{inputs.data}}\n"
        "inputs: {data: {path: azureml:corpus@latest}}\n"
        "resources: {instance_count: 2, locations: [westus]}\ndistribution: {type: pytorch}\n")
    proc = ts("import", "jobs/own.yml", cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("jobs/own.yml:7:43: warning: resources.locations: has no place in a spec")
    assert lines[1] == ("jobs/own.yml:5:10: warning: command: 4 process(es) per node on 2 node(s), from torchrun "
                        "--nproc_per_node 4 --nnodes 2: launcher per-node, gpus_per_node 4")
    assert "framework: pytorch assumed" in lines[2] and len(lines) == 3
    assert sum("assumed" in line for line in lines) == 1
    spec = YAML(typ="safe").load(proc.stdout.split("\n", 1)[1])
    # torchrun's own line gives way to trainspec's (the same counts, per node): the script stays
    assert spec["command"] == "python train.py --data {{ inputs.data }}"
    assert spec["resources"] == {"nodes": 2, "procs_per_node": 4, "gpus_per_node": 4}
    assert spec["distribution"] == {"launcher": "per-node"}


@pytest.mark.parametrize("command, expected", [
    ("accelerate launch --num_processes 8 --num_machines 2 train.py", (4, 2)),
    ("accelerate launch --num_processes=4 train.py", (4, 1)),
    ("python -m accelerate.commands.launch --num_processes 16 --num_machines 2 t.py", (8, 2)),
    ("deepspeed --num_gpus 8 --num_nodes 2 train.py --deepspeed", (8, 2)),
    ("torchrun --nproc-per-node=2 -m pkg.train", (2, 1)),
    ("accelerate launch --num_processes 7 --num_machines 2 train.py", None),  # not whole per node
    ("accelerate launch --num_processes {{ inputs.n }} train.py", None),  # a value known at submit only
    ("deepspeed train.py", None),  # every GPU it sees: unknown here
    ("torchrun --nproc_per_node gpu train.py", None),
    ("python train.py --num_processes 8", None),  # a script's own flag, not a launcher's
])
def test_the_launcher_counts_import_reads(command, expected):
    from trainspec.targets.azureml.importer import _launcher_counts

    found = _launcher_counts(command)
    assert (found[:2] if found else None) == expected


def test_launcher_machines_that_disagree_with_the_instances_are_refused(workdir):
    (workdir / "jobs" / "bad.yml").write_text(
        "type: command\ncode: src\nenvironment: azureml:acpt@latest\ncompute: azureml:gpu\n"
        "command: accelerate launch --num_processes 8 --num_machines 2 train.py\n"
        "resources: {instance_count: 4}\ndistribution: {type: pytorch, process_count_per_instance: 1}\n")
    proc = ts("import", "jobs/bad.yml", cwd=workdir)
    assert proc.returncode == 1
    assert ("jobs/bad.yml:5:10: error: command: accelerate launch --num_processes 8 --num_machines 2: 2 machine(s), "
            "but instance_count is 4") in proc.stderr


def test_a_compute_in_the_team_catalog_must_name_a_known_size(workdir):
    (workdir / "trainspec-skus.yaml").write_text("computes:\n  gpu: Standard_ND96asr_v5\n")
    proc = ts("skus", cwd=workdir)
    assert proc.returncode == 1
    assert "trainspec-skus.yaml:2:8: error: computes.gpu: 'Standard_ND96asr_v5' is not a VM size trainspec knows " \
           "(hint: did you mean Standard_ND96asr_v4" in proc.stderr


def test_the_jobs_time_limit_becomes_the_specs_timeout(workdir):
    """limits.timeout is the job's time limit: the imported spec says it once, at the top, as a
    duration, so every target it is later compiled for gets it; Azure ML's REST body is unchanged."""
    check_round_trip(workdir, "pytorch-cluster")  # limits: {timeout: 86400}
    text = (workdir / "specs" / "pytorch-cluster.yaml").read_text()
    spec = YAML(typ="safe").load(text)
    assert spec["timeout"] == "1d" and "timeout" not in spec["targets"]["azureml"]
    assert list(spec).index("timeout") == list(spec).index("command") + 1  # beside what runs
    _, ours = loaded(workdir / "build" / spec["name"] / "azureml" / "job.yml")
    assert ours["limits"] == loaded(workdir / "jobs" / "pytorch-cluster.yml")[1]["limits"]
    # a time limit that is not whole hours is written exactly
    (workdir / "jobs" / "odd.yml").write_text((workdir / "jobs" / "pytorch-cluster.yml").read_text()
                                              .replace("limits: {timeout: 86400}", "limits: {timeout: 5430}"))
    check_round_trip(workdir, "odd")
    assert YAML(typ="safe").load((workdir / "specs" / "odd.yaml").read_text())["timeout"] == "1h30m30s"
