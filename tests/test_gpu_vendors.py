"""GPU vendors (issue 28): the catalog knows who makes a size's GPUs (AMD for MI300X, NVIDIA for
the rest, or what a team file says), the Kubernetes job asks for the vendor's device-plugin
resource (amd.com/gpu on Standard_ND96isr_MI300X_v5, checked against the pinned CRDs), Ray's
container gets the vendor's devices, and an image built for the other vendor is a warning where
it is written: environment.image, or targets.slurm.container_image when that is what Slurm runs."""

import json
import re

import pytest
import yaml

from conftest import REPO, SPECS, ts
import kube_schema
from trainspec.schema import skus

AMD = "Standard_ND96isr_MI300X_v5"
NVIDIA = "Standard_ND96isr_H100_v5"


def test_the_catalog_says_who_makes_each_sizes_gpus():
    vendors = {sku.name: sku.vendor for sku in skus.all_skus()}
    assert vendors[AMD] == "amd" and vendors[NVIDIA] == "nvidia" and vendors["Standard_D4s_v3"] is None
    assert {name for name, vendor in vendors.items() if vendor == "amd"} == {AMD}
    assert all(vendor == "nvidia" for sku in skus.all_skus() if sku.gpus and sku.name != AMD
               for vendor in [sku.vendor])
    # a size newer than the catalog: from the GPU its name carries
    assert skus.inferred("Standard_ND96isr_MI300X_v6", 8).vendor == "amd"
    assert skus.inferred("Standard_ND96isr_H200_v6", 8).vendor == "nvidia"


@pytest.fixture
def repo(tmp_path):
    (tmp_path / ".git").mkdir()  # the team file is looked for up to the repository root
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print(1)\n")
    return tmp_path


def write_spec(repo, sku, image, targets="kubernetes: {}", name="job.yaml"):
    path = repo / name
    path.write_text(f"""version: 1
name: job
code: code
command: python train.py
resources: {{nodes: 2, sku: {sku}}}
environment: {{image: '{image}'}}
targets:
  {targets}
""")
    return path


def test_a_team_file_may_say_the_vendor_and_a_wrong_one_is_located(repo):
    (repo / "trainspec-skus.yaml").write_text("""skus:
  Standard_ND96isr_X9_v9:
    gpus: 8
    gpu: X9
    infiniband: true
    vendor: amd
  Standard_ND96isr_MI355X_v7: {gpus: 8, gpu: MI355X, infiniband: true}
""")
    catalog, problems = skus.catalog_for(repo)
    assert problems == []
    assert catalog.lookup("Standard_ND96isr_X9_v9").vendor == "amd"  # stated
    assert catalog.lookup("Standard_ND96isr_MI355X_v7").vendor == "amd"  # from the GPU's name
    job = yaml.safe_load_all(_compile(repo, write_spec(repo, "Standard_ND96isr_X9_v9", "rocm/pytorch:latest"))
                             .read_text())
    assert list(job)[-1]["spec"]["trainer"]["resourcesPerNode"]["limits"] == {"amd.com/gpu": 8, "rdma/ib": 1}
    (repo / "trainspec-skus.yaml").write_text("skus:\n  Standard_ND96isr_X9_v9: {gpus: 8, infiniband: true, "
                                              "vendor: intel}\n")
    proc = ts("validate", "job.yaml", cwd=repo)
    assert proc.returncode == 1
    assert "trainspec-skus.yaml:2:63: error: skus.Standard_ND96isr_X9_v9.vendor: 'intel' is not a GPU vendor " \
           "trainspec knows (hint: vendor: nvidia or amd" in proc.stderr, proc.stderr


def _compile(repo, path, target="kubernetes"):
    proc = ts("compile", str(path), "-o", str(repo / "out"), cwd=repo)
    assert proc.returncode == 0, proc.stderr
    return repo / "out" / "job" / target / ("job.yaml" if target == "kubernetes" else "job.sbatch")


@pytest.mark.parametrize("api", ["trainjob", "pytorchjob"])
@pytest.mark.parametrize("sku, resource", [(AMD, "amd.com/gpu"), (NVIDIA, "nvidia.com/gpu")])
def test_the_kubernetes_gpu_resource_is_the_vendors_device_plugins(repo, api, sku, resource):
    image = "rocm/pytorch:latest" if resource == "amd.com/gpu" else "nvcr.io/nvidia/pytorch:24.08-py3"
    text = _compile(repo, write_spec(repo, sku, image, targets=f"kubernetes: {{api: {api}}}")).read_text()
    assert kube_schema.validate_stream(text) == []  # the pinned CRDs as strict schemas
    job = list(yaml.safe_load_all(text))[-1]
    if api == "trainjob":
        limits = job["spec"]["trainer"]["resourcesPerNode"]["limits"]
        pod = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0][
            "template"]["spec"]["template"]["spec"]
    else:
        pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
        limits = pod["containers"][0]["resources"]["limits"]
    assert limits == {resource: 8, "rdma/ib": 1}  # InfiniBand is the NICs' (NVIDIA ConnectX on both sizes)
    assert ({"nvidia.com/gpu", "amd.com/gpu"} - {resource}).isdisjoint(text.split())
    # the node selection: the size itself, which names the vendor's GPUs, on AKS's GPU pool taint
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": sku}
    assert pod["tolerations"] == [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    plan = json.loads(ts("plan", str(repo / "job.yaml"), "--format", "json", cwd=repo, check=True).stdout)
    assert f"each with limits {resource}=8, rdma/ib=1" in plan["jobs"][0]["targets"][0]["settings"]["pods"]


WARNED = "is a {stack} image, built for {built} GPUs, and {sku} has {has} GPUs: torch in it would find no GPU"


@pytest.mark.parametrize("sku, image, warned", [
    (AMD, "nvcr.io/nvidia/pytorch:24.08-py3", WARNED.format(stack="CUDA", built="NVIDIA", sku=AMD, has="AMD MI300X")),
    (AMD, "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime", "is a CUDA image"),
    (NVIDIA, "rocm/pytorch:rocm6.2_ubuntu22.04_py3.10_pytorch_release_2.3.0",
     WARNED.format(stack="ROCm", built="AMD", sku=NVIDIA, has="NVIDIA H100")),
    (AMD, "rocm/pytorch:latest", None),
    (NVIDIA, "nvcr.io/nvidia/pytorch:24.08-py3", None),
    (AMD, "python:3.11", None),  # the name says nothing: no guess
    ("Standard_D4s_v3", "nvcr.io/nvidia/pytorch:24.08-py3", None),  # no GPU to miss
], ids=["nvcr-on-amd", "cuda-on-amd", "rocm-on-nvidia", "rocm-on-amd", "nvcr-on-nvidia", "unknown", "cpu"])
def test_an_image_for_the_other_vendor_is_a_warning_at_environment_image(repo, sku, image, warned):
    proc = ts("validate", str(write_spec(repo, sku, image, targets="azureml: {compute: gpu-cluster}")), cwd=repo)
    assert proc.returncode == 0, proc.stderr
    found = re.findall(r"job\.yaml:6:\d+: warning: environment\.image: '([^']*)' (.*)", proc.stderr)
    if warned is None:
        assert found == [], proc.stderr
    else:
        assert len(found) == 1 and found[0][0] == image and warned in found[0][1], proc.stderr
        assert "(hint: use a " + ("ROCm" if sku == AMD else "CUDA") + " image, e.g. " in proc.stderr


def test_on_slurm_the_override_that_runs_is_checked_too(repo):
    override = "slurm: {container_image: 'nvcr.io#nvidia/pytorch:24.08-py3'}"
    proc = ts("compile", str(write_spec(repo, AMD, "rocm/pytorch:latest", targets=override)), "-o", str(repo / "out"),
              cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"job\.yaml:8:\d+: warning: targets\.slurm\.container_image: 'nvcr\.io#nvidia/pytorch:24\.08-py3' "
                     r"is a CUDA image, built for NVIDIA GPUs", proc.stderr), proc.stderr
    assert "environment.image" not in proc.stderr  # the spec's own image is right for the size
    ok = "slurm: {container_image: 'docker.io#rocm/pytorch:latest'}"
    proc = ts("compile", str(write_spec(repo, AMD, "rocm/pytorch:latest", targets=ok)), "-o", str(repo / "out2"),
              cwd=repo)
    assert proc.returncode == 0 and "warning:" not in proc.stderr, proc.stderr


def test_ray_gives_an_amd_container_the_rocm_devices_and_warns_of_its_vm_image(tmp_path):
    text = (SPECS / "ray-lightning.yaml").read_text().replace("code: ../examples/", f"code: {REPO}/examples/")
    sku = re.search(r"sku: (\S+)", text).group(1)
    spec = tmp_path / "spec.yaml"
    spec.write_text(text.replace(f"sku: {sku}", f"sku: {AMD}").replace("rayproject/ray:2.60.0-py311-gpu",
                                                                       "rocm/ray:latest"))
    proc = ts("compile", str(spec), "-t", "ray", "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"spec\.yaml:\d+:\d+: warning: resources\.sku: ray's VMs boot microsoft-dsvm:ubuntu-hpc:2204, "
                     r"built for NVIDIA GPUs", proc.stderr), proc.stderr
    config = yaml.safe_load(next((tmp_path / "out").glob("*/ray/cluster.yaml")).read_text())
    options = config["docker"]["run_options"]
    assert {"--device=/dev/kfd", "--device=/dev/dri", "--group-add=video"} <= set(options)
    assert "--gpus all" not in options
