"""Every example spec compiles, and azure-ai-ml's own loader accepts the output and turns it
into the REST body `az ml job create` would send, with the counts the spec implies."""

import subprocess

import pytest

from conftest import SPECS, trainspec_cmd

azure_ml = pytest.importorskip("azure.ai.ml", reason="azure-ai-ml is a test extra: pip install -e '.[test]'")

SPEC_FILES = sorted(SPECS.glob("*.yaml"))

# name -> (instance_count, distribution type, processes per instance or workers)
EXPECTED = {
    "mnist-lightning": (2, "PyTorch", 8),
    "mnist-lightning-mpi": (2, "Mpi", 8),
    "ddp-torchrun": (2, "PyTorch", 1),
    "single-node": (1, "PyTorch", 1),  # Lightning starts its 2 devices (per node, the default)
    "hf-finetune": (2, "PyTorch", 1),
    "tf-multiworker": (2, "TensorFlow", 2),
    "ddp-on-base": (2, "PyTorch", 1),  # the base's H100 size: 8 GPUs, torchrun per node (the default)
    "sft-h100": (2, "PyTorch", 1),  # the five-target fine-tune: its secret's helper runs first
    "sft-deepspeed-h100": (2, "PyTorch", 1),  # accelerate + DeepSpeed per node: the shim hands it the world
}
# the command's first runtime file: the secrets helper where a spec has secrets, else the shim
FIRST = {"sft-h100": "trainspec_secret_refs"}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory, request):
    out = tmp_path_factory.mktemp("build")
    proc = subprocess.run([*trainspec_cmd(), "compile", str(SPECS), "-o", str(out)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


def test_every_azureml_example_spec_has_an_expectation(compiled):
    assert {p.parent.parent.name for p in compiled.glob("*/azureml/job.yml")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_output_loads_in_azure_ai_ml(compiled, name):
    from azure.ai.ml import load_job

    job_file = compiled / name / "azureml" / "job.yml"
    job = load_job(job_file)
    result = job._validate()
    assert result.passed, result.error_messages
    command_job = job._to_job()
    command_job._validate()  # raises on a missing environment or an undefined ${{inputs.x}}
    body = command_job._to_rest_object().as_dict()["properties"]
    instances, kind, per_instance = EXPECTED[name]
    assert body["jobType"] == "Command"
    assert body["resources"]["instanceCount"] == instances
    assert body["distribution"]["distributionType"] == kind
    if kind == "TensorFlow":
        assert body["distribution"]["workerCount"] == per_instance
    else:
        assert body["distribution"]["processCountPerInstance"] == per_instance
    # the shim travels as an input file next to job.yml, and every process runs under it
    assert body["inputs"]["trainspec_runtime"]["jobInputType"] == "uri_file"
    first = FIRST.get(name, "trainspec_runtime")
    assert body["inputs"][first]["jobInputType"] == "uri_file"
    assert body["command"].startswith(f"python -I -S ${{{{inputs.{first}}}}} -- ")
    assert "-- python -I -S ${{inputs.trainspec_runtime}} -- " in body["command"] or first == "trainspec_runtime"
    env = body["environmentVariables"]
    assert env["TRAINSPEC_NODES"] == str(instances)
    assert body["tags"]["trainspec_spec"] == f"specs/{name}.yaml"


def test_per_node_wraps_torchrun(compiled):
    from azure.ai.ml import load_job

    job = load_job(compiled / "ddp-torchrun" / "azureml" / "job.yml")
    assert " -- torchrun --nnodes 2 --nproc_per_node 8 --node_rank $NODE_RANK --master_addr $MASTER_ADDR " \
           "--master_port $MASTER_PORT --no-python python train.py --steps 100" in job.command


def test_serverless_spot_job(compiled):
    from azure.ai.ml import load_job

    job = load_job(compiled / "mnist-lightning-mpi" / "azureml" / "job.yml")
    body = job._to_job()._to_rest_object().as_dict()["properties"]
    assert body.get("computeId") is None  # serverless
    assert body["resources"]["instanceType"] == "Standard_ND96amsr_A100_v4"
    assert body["queueSettings"]["jobTier"].lower() == "spot"


def cluster_spec(path, name, compute, gpus_per_node):
    """A 2-node job on a named cluster (no sku), with the GPU count the spec states."""
    path.write_text(f"""version: 1
name: {name}
code: {SPECS.parent / 'examples' / 'mnist'}
command: python train.py
resources: {{nodes: 2, gpus_per_node: {gpus_per_node}}}
environment: {{image: pytorch:latest}}
targets:
  azureml: {{compute: {compute}}}
""")
    return path


def test_a_cpu_job_is_stated_not_guessed(tmp_path):
    """A cluster job with no GPU count is an error (tests/bad_specs/gpu-count-unknown.yaml);
    gpus_per_node: 0 says CPU on purpose: gloo, one process per node."""
    from azure.ai.ml import load_job

    spec = cluster_spec(tmp_path / "cpu.yaml", "cpu-job", "cpu-cluster", gpus_per_node=0)
    proc = subprocess.run([*trainspec_cmd(), "compile", str(spec), "-o", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stderr == "1 spec: 0 errors, 0 warnings\n", proc.stderr
    body = load_job(tmp_path / "out" / "cpu-job" / "azureml" / "job.yml")._to_job()._to_rest_object().as_dict()
    props = body["properties"]
    assert props["distribution"] == {"distributionType": "PyTorch", "processCountPerInstance": 1}
    assert props["tags"]["trainspec_backend"] == "gloo" and "TRAINSPEC_BACKEND" not in props["environmentVariables"]
    plan = subprocess.run([*trainspec_cmd(), "plan", str(spec)], capture_output=True, text=True, timeout=300)
    assert "  GPUs: none\n" in plan.stdout and "  backend        gloo\n" in plan.stdout


def test_tensorflow_is_told_one_way(compiled):
    """Tags, TRAINSPEC_* expectations, plan and the shim all say `tensorflow` (launcher and backend);
    plan shows each worker's TF_CONFIG, not torch's MASTER_ADDR/RANK."""
    import json
    import os
    import sys

    from azure.ai.ml import load_job

    job = compiled / "tf-multiworker" / "azureml" / "job.yml"
    props = load_job(job)._to_job()._to_rest_object().as_dict()["properties"]
    env = props["environmentVariables"]
    assert props["tags"]["trainspec_launcher"] == env["TRAINSPEC_LAUNCHER"] == props["tags"]["trainspec_backend"] == "tensorflow"
    plan = json.loads(subprocess.run([*trainspec_cmd(), "plan", str(SPECS / "tf-multiworker.yaml"), "--format",
                                      "json"], capture_output=True, text=True, timeout=300, check=True).stdout)
    job_plan = plan["jobs"][0]
    assert job_plan["backend"] == "tensorflow" and job_plan["targets"][0]["launcher"] == "tensorflow"
    last = job_plan["targets"][0]["ranks"]["last"]
    assert "MASTER_ADDR" not in last and "RANK" not in last
    assert json.loads(last["TF_CONFIG"])["task"] == {"type": "worker", "index": 1}
    # the shim reads that job's expectations next to the TF_CONFIG Azure ML sets, and agrees
    tf_config = {"cluster": {"worker": ["10.0.0.4:2222", "10.0.0.5:2222"]}, "task": {"type": "worker", "index": 1}}
    child = subprocess.run(
        [sys.executable, "-I", "-S", str(job.parent / "trainspec_shim.py"), "--", sys.executable, "-c",
         "import os; print(os.environ['RANK'], os.environ['WORLD_SIZE'], os.environ['MASTER_ADDR'])"],
        capture_output=True, text=True, timeout=60,
        env={"PATH": os.environ["PATH"], "TF_CONFIG": json.dumps(tf_config), **{k: str(v) for k, v in env.items()}})
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["1", "2", "10.0.0.4"]


def test_plan_shows_a_clusters_gpus_without_a_sku(tmp_path):
    """`compute: gpu-cluster` + gpus_per_node: plan says the count, not "GPUs none" (issue 11, finding 1)."""
    spec = cluster_spec(tmp_path / "gpu.yaml", "gpu-job", "gpu-cluster", gpus_per_node=8)
    plan = subprocess.run([*trainspec_cmd(), "plan", str(spec)], capture_output=True, text=True, timeout=300)
    assert "  GPUs: 16 (2 nodes x 8), model unknown: no sku\n" in plan.stdout, plan.stdout
