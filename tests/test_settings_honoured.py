"""Issue 41, "the job that runs is the job the user wrote": a spec setting is honoured on every
target, or said where it is written. distribution.master_port is the port each target's job
rendezvous on (or a located warning where the platform fixes it); targets.kubernetes.rdma_resource
on a job that requests no InfiniBand is a located warning; an input with mode rw_mount is mounted
writable wherever a target mounts data (and refused on Azure ML, whose input schema has no such
mode); targets.kubernetes.runtime names a namespaced TrainingRuntime, and a runtime whose launcher
is not the torchrun trainspec writes is refused at that key. The documents are checked by the
platforms' own parts: the pinned Kubeflow CRDs as strict schemas, azure-ai-ml's load_job, Ray's
docker command line."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from conftest import REPO
import kube_schema
from trainspec.registry.build import build
from trainspec.runtime import normalize

REFERENCE = REPO.parent / "shared" / "reference"
H100 = "Standard_ND96isr_H100_v5"  # 8 GPUs and InfiniBand
IMAGE = "nvcr.io/nvidia/pytorch:24.01-py3"


def outcome(tmp_path: Path, body: str, targets: str, *, resources: str = f"{{nodes: 2, sku: {H100}}}",
            command: str = "python train.py", only=None):
    """build() of a spec made of ``body`` and ``targets`` (in-process: the CLI's own path)."""
    (tmp_path / "code").mkdir(parents=True, exist_ok=True)
    (tmp_path / "code" / "train.py").write_text("print(1)\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""version: 1
name: job
code: code
command: {command}
resources: {resources}
environment: {{image: '{IMAGE}'}}
{body}
targets:
{targets}
""", encoding="utf-8")
    names = only or [line.strip().split(":")[0] for line in targets.splitlines() if line.startswith("  ")
                     and not line.startswith("   ")]
    return build(str(spec), tmp_path / "out", names)


def found(result, severity=None):
    """The diagnostics, {(severity, dotted path, line): message}."""
    return {(d.severity, ".".join(map(str, d.path)), d.line): d.message for d in result.diagnostics
            if severity is None or d.severity == severity}


def line(result, words: str) -> int:
    """The spec's line that holds ``words``: where a diagnostic about them must point."""
    lines = Path(result.file).read_text(encoding="utf-8").splitlines()
    return next(i for i, text in enumerate(lines, 1) if words in text)


def artifact(result, target: str):
    return next(a for a in result.artifacts if a.target == target)


def text(result, target: str, path: str) -> str:
    return artifact(result, target).file(path).data.decode("utf-8")


def trainjob(result):
    stream = text(result, "kubernetes", "job.yaml")
    assert kube_schema.validate_stream(stream) == []
    return list(yaml.safe_load_all(stream))[-1]


def container_env(job):
    return {e["name"]: e.get("value") for e in job["spec"]["trainer"]["env"]}


def pod(job):
    return job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0][
        "template"]["spec"]["template"]["spec"]


RAY = "  ray: {location: eastus, resource_group: rg}"
ALL = f"""  kubernetes: {{}}
  slurm: {{partition: gpu}}
  hpcpack: {{shared_dir: /app}}
{RAY}"""


# --- distribution.master_port ----------------------------------------------------------------------

def ports(result):
    """The rendezvous port each target's job names: what the shim is told (TRAINSPEC_MASTER_PORT,
    which it exports over the platform's) or what the Ray driver is asked for."""
    from trainspec.registry.build import target

    xml = text(result, "hpcpack", "job.xml")
    hpcpack = xml.split("<Name>TRAINSPEC_MASTER_PORT</Name>")[1].split("<Value>")[1].split("<")[0]
    sbatch = text(result, "slurm", "job.sbatch")
    slurm = sbatch.split("export TRAINSPEC_MASTER_PORT=")[1].split()[0]
    ray = json.loads(text(result, "ray", "trainspec_ray_job.json"))["master_port"]
    return ({"kubernetes": container_env(trainjob(result))["TRAINSPEC_MASTER_PORT"], "slurm": slurm,
             "hpcpack": hpcpack, "ray": ray},
            {name: target(name).plan_port(result.valid) for name in ("kubernetes", "slurm", "hpcpack", "ray")})


def test_a_written_master_port_is_the_port_every_target_rendezvous_on(tmp_path):
    result = outcome(tmp_path, "distribution: {master_port: 7100}", ALL)
    assert [d for d in result.diagnostics if ".".join(d.path) == "distribution.master_port"] == []
    written, planned = ports(result)
    assert written == {"kubernetes": "7100", "slurm": "7100", "hpcpack": "7100", "ray": 7100}
    assert planned == dict.fromkeys(planned, "7100")


def test_without_one_each_target_keeps_its_platforms_port(tmp_path):
    written, planned = ports(outcome(tmp_path, "", ALL))
    assert written == {"kubernetes": "29500", "slurm": "6105", "hpcpack": "29400", "ray": None}
    assert planned == {"kubernetes": "29500", "slurm": "6105", "hpcpack": "29400", "ray": "<free port on node 0>"}


def test_the_shim_exports_the_compiled_port_over_the_trainjob_plugins():
    """The Trainer's torch plugin sets PET_MASTER_PORT=29500; the pods reach each other on any port,
    and the shim exports the port the job was compiled with, which torchrun reads."""
    env = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "8", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "job-node-0-0.job",
           "PET_MASTER_PORT": "29500", "TRAINSPEC_LAUNCHER": "per-node", "TRAINSPEC_NODES": "2",
           "TRAINSPEC_PROCS_PER_NODE": "8", "TRAINSPEC_MASTER_PORT": "7100"}
    assert normalize(env).master_port == 7100
    assert env["PET_MASTER_PORT"] == env["MASTER_PORT"] == "7100"


def test_where_the_platform_fixes_the_port_a_written_one_is_a_located_warning(tmp_path):
    per_node = outcome(tmp_path, "distribution: {master_port: 7100, launcher: per-node}", "  azureml: {}",
                       resources=f"{{nodes: 2, sku: {H100}}}")
    assert [key for key in found(per_node, "warning") if key[1] == "distribution.master_port"] == [
        ("warning", "distribution.master_port", line(per_node, "master_port"))]
    overridden = outcome(tmp_path / "h", "distribution: {master_port: 7100}",
                         "  hpcpack: {shared_dir: /app, rdzv_port: 29401}")
    warnings = found(overridden, "warning")
    assert "rdzv_port" in warnings[("warning", "distribution.master_port", line(overridden, "master_port"))]
    assert "29401" in text(overridden, "hpcpack", "job.xml")


# --- targets.kubernetes.rdma_resource ---------------------------------------------------------------

@pytest.mark.parametrize("resources, why", [
    (f"{{nodes: 1, sku: {H100}}}", "one node"),
    ("{nodes: 2, sku: Standard_NC24ads_A100_v4}", "has no InfiniBand"),
])
def test_an_rdma_resource_the_job_never_requests_is_a_located_warning(tmp_path, resources, why):
    result = outcome(tmp_path, "", "  kubernetes: {rdma_resource: rdma/shared_ib}", resources=resources)
    message = found(result, "warning")[("warning", "targets.kubernetes.rdma_resource", line(result, "rdma"))]
    assert why in message and "rdma/shared_ib" in message
    assert "rdma/shared_ib" not in json.dumps(trainjob(result))


def test_an_rdma_resource_on_an_infiniband_job_is_requested_without_a_word(tmp_path):
    result = outcome(tmp_path, "", "  kubernetes: {rdma_resource: rdma/shared_ib}")
    assert found(result) == {}
    assert trainjob(result)["spec"]["trainer"]["resourcesPerNode"]["limits"]["rdma/shared_ib"] == 1


# --- inputs.<name>.mode: rw_mount ---------------------------------------------------------------------

DATA = """inputs:
  data: {path: /fsx, mode: rw_mount}
  vocab: {path: /fsx/gpt2}
"""


def test_a_rw_mount_input_is_a_writable_volume_on_kubernetes(tmp_path):
    result = outcome(tmp_path, DATA, "  kubernetes: {volumes: {data: {pvc: {claim: fsx}}, vocab: {pvc: {claim: "
                     "vocab}}}}")
    assert found(result) == {}
    spec = pod(trainjob(result))
    claims = {v["persistentVolumeClaim"]["claimName"]: v["persistentVolumeClaim"].get("readOnly", False)
              for v in spec["volumes"] if "persistentVolumeClaim" in v}
    mounts = {m["mountPath"]: m.get("readOnly", False) for m in spec["containers"][0]["volumeMounts"]}
    assert claims == {"fsx": False, "vocab": True}
    assert mounts["/trainspec/inputs/data"] is False and mounts["/trainspec/inputs/vocab"] is True


def test_megatron_writing_index_caches_beside_its_data_compiles_on_slurm(tmp_path):
    """aws-megatron-gpt3.sbatch mounts /fsx writable into its container and Megatron writes its
    index caches beside the data: the spec says so with mode: rw_mount, the rest stays read-only."""
    public = REFERENCE / "jobs-public" / "slurm" / "aws-megatron-gpt3.sbatch"
    if public.exists():  # the public job's own mount, read: writable, no :ro
        assert ': "${FSX_MOUNT:=/fsx:/fsx}"' in public.read_text(encoding="utf-8")
    result = outcome(tmp_path, DATA, "  slurm: {partition: gpu}",
                     command="python pretrain_gpt.py --data-path {{ inputs.data }}/gpt2/my-gpt2_text_document")
    assert found(result, "error") == {}
    line = next(line for line in text(result, "slurm", "job.sbatch").splitlines() if line.startswith("srun "))
    mounts = next(word for word in shlex.split(line) if word.startswith("--container-mounts=")).split(",")
    assert "/fsx:/fsx" in mounts and "/fsx/gpt2:/fsx/gpt2:ro" in mounts


def test_a_rw_mount_input_is_a_writable_docker_volume_on_ray(tmp_path):
    result = outcome(tmp_path, DATA, RAY)
    options = yaml.safe_load(text(result, "ray", "cluster.yaml"))["docker"]["run_options"]
    assert "--volume=/fsx:/fsx" in options and "--volume=/fsx/gpt2:/fsx/gpt2:ro" in options


def test_hpcpack_runs_a_rw_mount_input_at_its_path_without_a_word(tmp_path):
    """HPC Pack's tasks run on the nodes' own file system: the data is as writable as it is there."""
    result = outcome(tmp_path, DATA, "  hpcpack: {shared_dir: /app}")
    assert found(result, "error") == {} and "inputs.data.mode" not in {k[1] for k in found(result)}


def test_azureml_refuses_a_rw_mount_input_where_it_is_written_as_azure_ai_ml_does(tmp_path):
    body = "inputs:\n  data: {path: 'azureml:gpt2@latest', mode: rw_mount}\n"
    result = outcome(tmp_path, body, "  azureml: {}")
    assert ("error", "inputs.data.mode", line(result, "rw_mount")) in found(result) and result.artifacts == []
    # azure-ai-ml itself: the job compiled with ro_mount loads, the same job with rw_mount does not
    from azure.ai.ml import load_job
    from marshmallow.exceptions import ValidationError

    good = outcome(tmp_path / "ro", body.replace("rw_mount", "ro_mount"), "  azureml: {}")
    job_file = tmp_path / "ro" / "out" / "job" / "azureml" / "job.yml"  # where compile writes it: code is beside
    job_file.parent.mkdir(parents=True)
    job_file.write_text(text(good, "azureml", "job.yml"))
    assert load_job(job_file).inputs["data"].mode == "ro_mount"
    job_file.write_text(text(good, "azureml", "job.yml").replace("mode: ro_mount", "mode: rw_mount"))
    with pytest.raises(ValidationError, match="rw_mount"):
        load_job(job_file)


# --- targets.kubernetes.runtime -----------------------------------------------------------------------

def test_a_namespaced_training_runtime_can_be_named_and_the_crd_accepts_it(tmp_path):
    result = outcome(tmp_path, "", "  kubernetes: {namespace: mlteam, runtime: {name: mnist-runtime, kind: "
                     "TrainingRuntime}}")
    assert found(result) == {}
    assert trainjob(result)["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime",
                                                      "name": "mnist-runtime"}
    plain = outcome(tmp_path / "p", "", "  kubernetes: {runtime: team-torch}")
    assert trainjob(plain)["spec"]["runtimeRef"]["kind"] == "ClusterTrainingRuntime"  # the string form, as before


@pytest.mark.parametrize("runtime", ["deepspeed-distributed", "mpi-distributed",
                                     "{name: deepspeed-distributed, kind: ClusterTrainingRuntime}"])
def test_a_runtime_whose_launcher_is_mpi_is_refused_at_its_key(tmp_path, runtime):
    result = outcome(tmp_path, "", f"  kubernetes: {{runtime: {runtime}}}")
    message = found(result, "error")[("error", "targets.kubernetes.runtime", line(result, "runtime"))]
    assert "mpirun" in message and "torchrun" in message and result.artifacts == []


def test_a_bad_runtime_kind_is_located_with_the_choices(tmp_path):
    result = outcome(tmp_path, "", "  kubernetes: {runtime: {name: x, kind: Runtime}}")
    message = found(result, "error")[("error", "targets.kubernetes.runtime.kind", line(result, "runtime"))]
    assert "'ClusterTrainingRuntime' or 'TrainingRuntime'" in message


def test_a_runtime_named_for_a_pytorchjob_is_a_located_warning(tmp_path):
    result = outcome(tmp_path, "", "  kubernetes: {api: pytorchjob, runtime: torch-distributed}")
    assert "PyTorchJob" in found(result, "warning")[("warning", "targets.kubernetes.runtime", line(result, "runtime"))]


def runtimes():
    folder = REFERENCE / "kubernetes" / "trainer-v2.3.0" / "runtimes"
    if not folder.is_dir():
        pytest.skip(f"the pinned Kubeflow runtimes are read from {folder} (shared/ beside the clone)")
    return [yaml.safe_load(path.read_text(encoding="utf-8")) for path in sorted(folder.glob("*.yaml"))]


def test_the_known_runtimes_launch_as_the_pinned_trainer_says():
    from trainspec.targets.kubernetes.settings import CLUSTER_RUNTIMES

    pinned = {doc["metadata"]["name"]: next(k for k in ("torch", "mpi") if k in doc["spec"]["mlPolicy"])
              for doc in runtimes()}
    assert pinned == {"torch-distributed": "torch", "deepspeed-distributed": "mpi"}
    assert {name: CLUSTER_RUNTIMES[name] for name in pinned} == pinned


def public_trainjob(name: str):
    path = REFERENCE / "jobs-public" / "kubernetes" / name
    if not path.exists():
        pytest.skip(f"the public jobs are read from {path.parent} (shared/ beside the clone)")
    return next(d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d and d["kind"] == "TrainJob")


def as_spec(job) -> str:
    """A public TrainJob's runtime and namespace as a spec's targets.kubernetes."""
    ref = job["spec"]["runtimeRef"]
    runtime = ref["name"] if ref.get("kind", "ClusterTrainingRuntime") == "ClusterTrainingRuntime" else \
        f"{{name: {ref['name']}, kind: {ref['kind']}}}"
    return f"  kubernetes: {{namespace: {job['metadata']['namespace']}, runtime: {runtime}}}"


def test_the_public_trainjob_on_a_namespaced_runtime_compiles_to_the_same_runtime_ref(tmp_path):
    job = public_trainjob("ds2qdu-mnist-trainjob-runtime.yaml")
    result = outcome(tmp_path, "", as_spec(job))
    ours = trainjob(result)["spec"]["runtimeRef"]
    assert ours == {k: v.strip() for k, v in job["spec"]["runtimeRef"].items()}


def test_a_public_trainjob_moved_to_an_mpi_runtime_is_refused_at_the_runtime(tmp_path):
    job = public_trainjob("ds2qdu-vit-trainjob-gb10.yaml")  # a copy of it, on the Trainer's DeepSpeed runtime
    job["spec"]["runtimeRef"]["name"] = "deepspeed-distributed"
    result = outcome(tmp_path, "", as_spec(job))
    assert ("error", "targets.kubernetes.runtime", line(result, "runtime")) in found(result)
    assert result.artifacts == []
