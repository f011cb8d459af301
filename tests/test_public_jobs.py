"""Issue 21: ten Azure ML distributed jobs their authors published (../shared/reference/
azureml-jobs-public, verbatim, source URL on each first line; never copied into this repository)
move in exactly. Each is imported, compiled -t azureml, and what azure-ai-ml would send for the
original and for the compiled job (``load_job(...)._to_job()._to_rest_object()``) is compared field
by field: the command is the original's under the shim, every other field is equal.

A copy of each job gets what the jobs leave out (their code folders, a one-line Dockerfile for a
build context) and what the import asks a team for when nothing in a job says it: its clusters'
VM sizes (``computes:`` in trainspec-skus.yaml) and, for the one job published with placeholders
(nebula-cifar10-deepspeed: ``< your environment name >``, ``< your compute name >``), the names
the team would fill in before submitting it anyway -- in the original copy as in the spec.
"""

import json
import shlex
import shutil
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from conftest import REPO, ts
from test_import import environment_of, loaded as rest
from trainspec.core.fields import is_remote

azure_ml = pytest.importorskip("azure.ai.ml", reason="azure-ai-ml is a test extra: pip install -e '.[test]'")

PUBLIC = REPO.parent / "shared" / "reference" / "azureml-jobs-public"
if not PUBLIC.is_dir():
    pytest.skip(f"the public jobs are read from {PUBLIC} (shared/ beside the clone), not copied here",
                allow_module_level=True)
JOBS = sorted(p.name for p in PUBLIC.iterdir() if (p / "job" / f"{p.name}.yml").is_file())
SHIM = ("TRAINSPEC_", "PL_TRAINER_")
# the team's answers: its clusters' sizes (what import asks for when a job does not say its GPUs)
TEAM_CATALOG = """\
computes:
  bloom: Standard_ND96amsr_A100_v4
  gpu-cluster: Standard_NC24ads_A100_v4
  gpu-v100-cluster: Standard_ND40rs_v2
  cpu-cluster-lg: Standard_D16s_v5
  t4-cluster: Standard_NC64as_T4_v3
  nc80h100: Standard_NC80adis_H100_v5
"""
PLACEHOLDERS = {"< your environment name >": "azureml:nebula-deepspeed@latest",
                "< your compute name >": "t4-cluster"}


def test_all_ten_are_there():
    assert len(JOBS) == 10, JOBS


def prepare(root, name, catalog=True):
    """A copy of the job with the folders it names (empty) and, with ``catalog``, the team's file."""
    shutil.copytree(PUBLIC / name, root / name)
    job_file = root / name / "job" / f"{name}.yml"
    text = job_file.read_text()
    for placeholder, value in PLACEHOLDERS.items():
        text = text.replace(placeholder, value)
    job_file.write_text(text)
    job = YAML(typ="safe").load(text)
    (job_file.parent / str(job.get("code", "."))).mkdir(parents=True, exist_ok=True)
    env = job.get("environment")
    contexts = [env["build"]["path"]] if isinstance(env, dict) and "build" in env else []
    if isinstance(env, str) and env.startswith("file:"):
        env_file = job_file.parent / env[len("file:"):]
        contexts = [str(env_file.parent.relative_to(job_file.parent) / YAML(typ="safe").load(
            env_file.read_text())["build"]["path"])]
    for context in contexts:
        (job_file.parent / context).mkdir(parents=True, exist_ok=True)
        (job_file.parent / context / "Dockerfile").write_text("FROM python:3.11\n")
    if catalog:
        (root / "trainspec-skus.yaml").write_text(TEAM_CATALOG)
    (root / "specs").mkdir(exist_ok=True)
    return job_file


def where(job, inputs):
    """A local input's path is written relative to each job: compare where it points."""
    for item in inputs.values():
        if "uri" in item and not is_remote(item["uri"]) and (job.base_path / item["uri"]).exists():
            item["uri"] = str((job.base_path / item["uri"]).resolve())
    return inputs


@pytest.mark.parametrize("name", JOBS)
def test_a_public_job_round_trips_exactly(tmp_path, name):
    job_file = prepare(tmp_path, name)
    proc = ts("import", str(job_file.relative_to(tmp_path)), "-o", f"specs/{name}.yaml", cwd=tmp_path)
    assert proc.returncode == 0 and "it validates" in proc.stderr, proc.stderr
    assert "assumed 1 per node" not in proc.stderr and "error" not in proc.stderr, proc.stderr
    compiled = ts("compile", f"specs/{name}.yaml", "-o", "build", "-t", "azureml", cwd=tmp_path)
    assert compiled.returncode == 0, compiled.stderr
    spec = YAML(typ="safe").load((tmp_path / "specs" / f"{name}.yaml").read_text())
    theirs_job, theirs = rest(job_file)
    ours_job, ours = rest(tmp_path / "build" / spec["name"] / "azureml" / "job.yml")

    # the command: the original's, under the shim (a command with shell operators runs as `bash -c '<it>'`,
    # the one wrapper the shim needs to exec a shell line); the original's surrounding blanks aside
    command = ours.pop("command")
    shim, _, under = command.partition(" -- ")
    assert shim.endswith("${{inputs.trainspec_runtime}}"), command
    if under.startswith("bash -c "):
        under = shlex.split(under)[2]
    assert under == theirs.pop("command").strip()
    # what trainspec adds beside the job's own fields: the shim as an input, its expectations, its tags
    assert ours["inputs"].pop("trainspec_runtime")["jobInputType"] == "uri_file"
    ours["environmentVariables"] = {k: v for k, v in ours["environmentVariables"].items() if not k.startswith(SHIM)}
    ours["tags"] = {k: v for k, v in ours["tags"].items() if not k.startswith("trainspec_")}
    # written relative to each job file: compare what they point at
    assert (ours_job.base_path / ours.pop("codeId")).resolve() == (theirs_job.base_path / theirs.pop("codeId")).resolve()
    assert environment_of(ours_job) == environment_of(theirs_job)
    for body in (ours, theirs):
        body.pop("environmentId", None)
        body.pop("environment", None)
    where(ours_job, ours["inputs"]), where(theirs_job, theirs.get("inputs", {}))
    # Azure's documented defaults, which the compiled job writes out: a data input's mode (ro_mount), an
    # output's mode (rw_mount), a pytorch/mpi distribution's process_count_per_instance (1)
    for item in theirs.get("inputs", {}).values():
        if "uri" in item:
            item.setdefault("mode", "ReadOnlyMount")
    for output in theirs.get("outputs", {}).values():
        output.setdefault("mode", "ReadWriteMount")
    if theirs.get("distribution", {}).get("distributionType") in ("PyTorch", "Mpi"):
        theirs["distribution"].setdefault("processCountPerInstance", 1)
    assert ours == theirs


@pytest.mark.parametrize("name", ["llama3-70b-deepspeed", "llama33-70b-fsdp-nd40"])
def test_gpus_per_node_are_the_launchers_counts_and_plan_runs_what_the_command_runs(tmp_path, name):
    """accelerate launch --num_processes 8 --num_machines 2 on 2 instances: 4 processes per node,
    per-node (Azure ML starts one launcher per node), and plan's world is 2 x 4 = 8, not 2 x 1."""
    job_file = prepare(tmp_path, name, catalog=False)
    proc = ts("import", str(job_file.relative_to(tmp_path)), "-o", f"specs/{name}.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    spec = YAML(typ="safe").load((tmp_path / "specs" / f"{name}.yaml").read_text())
    job = YAML(typ="safe").load(job_file.read_text())
    words = job["command"].split()
    total, machines = int(words[words.index("--num_processes") + 1]), int(words[words.index("--num_machines") + 1])
    per_node = total // machines
    assert spec["resources"] == {"nodes": machines, "procs_per_node": per_node, "gpus_per_node": per_node}
    assert spec["distribution"] == {"launcher": "per-node"}
    assert f"from accelerate launch --num_processes {total} --num_machines {machines}" in proc.stderr
    plan = ts("plan", f"specs/{name}.yaml", "--format", "json", cwd=tmp_path)
    target = json.loads(plan.stdout)["jobs"][0]["targets"][0]
    assert target["world_size"] == total, target


@pytest.mark.parametrize("name", ["cifar-distributed", "dask-nyctaxi", "tf-mnist-distributed", "bloom-pretrain"])
def test_where_nothing_tells_the_gpus_the_spec_holds_one_error_saying_what_to_set(tmp_path, name):
    """No guess and no warning: the spec is written without a GPU count, and validating it gives one
    located error that names the fields to set (the job on its CPU cluster included: no nccl for Dask)."""
    job_file = prepare(tmp_path, name, catalog=False)
    proc = ts("import", str(job_file.relative_to(tmp_path)), "-o", f"specs/{name}.yaml", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "assumed" not in proc.stderr.replace("framework: pytorch assumed", "")
    errors = [line for line in proc.stderr.splitlines() if ": error: " in line]
    text = (tmp_path / "specs" / f"{name}.yaml").read_text()
    line = text.splitlines().index("resources:") + 2  # its mapping, on the next line
    assert errors == [f"specs/{name}.yaml:{line}:3: error: resources: how many GPUs a node has cannot be known: "
                      "neither sku nor gpus_per_node is set (hint: set resources.sku (checked against the catalog) "
                      "or resources.gpus_per_node (gpus_per_node: 0 runs on CPU on purpose))"], proc.stderr
    assert "gpus_per_node" not in text and "nccl" not in text
