"""The spec's `timeout:` (issue 28): said once, enforced on every target, each platform's file read
by the platform's own tool (azure-ai-ml, the HPC Pack XSD, the pinned CRDs, the Ray driver's
request type); a target's own setting overrides it there; plan says, per target, the limit that
target enforces and where it came from; a limit a platform cannot hold is an error at the line
that wrote it."""

import json
import re
import shutil
import warnings

import pytest

import kube_schema
from conftest import REPO, ts

HPCPACK_XSD = REPO.parent / "shared" / "reference" / "hpcpack" / "xsd" / "job-v4.fixed.xsd"
SPEC = """version: 1
name: day-job
code: ../code
command: python train.py --steps 3
timeout: 24h
resources:
  nodes: 2
  sku: Standard_ND96isr_H100_v5
environment:
  image: nvcr.io/nvidia/pytorch:24.08-py3
targets:
  azureml: {compute: gpu-cluster}
  kubernetes: {namespace: ml}
  slurm: {partition: gpu}
  hpcpack: {shared_dir: /app}
  ray: {location: eastus, resource_group: rg-training}
"""
DAY = 86400


@pytest.fixture
def folder(tmp_path):
    shutil.copytree(REPO / "examples" / "ddp", tmp_path / "code")
    (tmp_path / "specs").mkdir()
    return tmp_path


def compile_spec(folder, text, *flags):
    (folder / "specs" / "job.yaml").write_text(text)
    return ts("compile", "specs/job.yaml", "-o", "build", *flags, cwd=folder)


def job_file(folder, target, name):
    return folder / "build" / "day-job" / target / name


def test_one_timeout_reaches_every_target_as_its_platform_reads_it(folder):
    proc = compile_spec(folder, SPEC)
    assert proc.returncode == 0, proc.stderr
    # Azure ML: limits.timeout, as azure-ai-ml sends it (ISO 8601)
    from azure.ai.ml import load_job

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        job = load_job(job_file(folder, "azureml", "job.yml"))
    assert job.limits.timeout == DAY
    assert job._to_job()._to_rest_object().as_dict()["properties"]["limits"]["timeout"] == "P1D"
    # Kubernetes: the TrainJob's activeDeadlineSeconds, valid for the pinned CRD
    text = job_file(folder, "kubernetes", "job.yaml").read_text()
    assert kube_schema.validate_stream(text) == []
    trainjob = next(d for d in kube_schema.load_documents(text) if d["kind"] == "TrainJob")
    assert trainjob["spec"]["activeDeadlineSeconds"] == DAY
    # Slurm: --time, in Slurm's days-hours:minutes:seconds
    assert "\n#SBATCH --time=1-00:00:00\n" in job_file(folder, "slurm", "job.sbatch").read_text()
    # HPC Pack: the job's RuntimeSeconds, valid for the scheduler's XSD
    from lxml import etree

    if not HPCPACK_XSD.exists():
        pytest.skip(f"the HPC Pack XSD is not here ({HPCPACK_XSD})")
    xml = etree.parse(str(job_file(folder, "hpcpack", "job.xml")))
    etree.XMLSchema(etree.parse(str(HPCPACK_XSD))).assertValid(xml)
    assert xml.getroot().get("RuntimeSeconds") == str(DAY)
    # Ray: the job request the driver reads (its own type), and nothing to edit in launch.sh
    from trainspec.runtime.ray_request import read_request

    assert read_request(str(job_file(folder, "ray", "trainspec_ray_job.json"))).timeout == DAY
    launch = job_file(folder, "ray", "launch.sh").read_text()
    assert "--timeout" not in launch and "edit" not in launch.lower().replace("edit the spec", "")


def test_a_pytorchjob_gets_the_deadline_in_its_run_policy(folder):
    proc = compile_spec(folder, SPEC.replace("{namespace: ml}", "{namespace: ml, api: pytorchjob}"),
                        "-t", "kubernetes")
    assert proc.returncode == 0, proc.stderr
    text = job_file(folder, "kubernetes", "job.yaml").read_text()
    assert kube_schema.validate_stream(text) == []
    job = next(d for d in kube_schema.load_documents(text) if d["kind"] == "PyTorchJob")
    assert job["spec"]["runPolicy"]["activeDeadlineSeconds"] == DAY


def test_a_targets_own_limit_overrides_the_spec_there_and_plan_says_who_set_each(folder):
    text = SPEC.replace("{compute: gpu-cluster}", "{compute: gpu-cluster, timeout: 2d}") \
        .replace("{partition: gpu}", "{partition: gpu, time: 90m}") \
        .replace("{shared_dir: /app}", "{shared_dir: /app, runtime: 12h}")
    proc = compile_spec(folder, text)
    assert proc.returncode == 0, proc.stderr
    assert "limits:\n  timeout: 172800\n" in job_file(folder, "azureml", "job.yml").read_text()
    assert "\n#SBATCH --time=0-01:30:00\n" in job_file(folder, "slurm", "job.sbatch").read_text()
    assert 'RuntimeSeconds="43200"' in job_file(folder, "hpcpack", "job.xml").read_text()
    assert "activeDeadlineSeconds: 86400\n" in job_file(folder, "kubernetes", "job.yaml").read_text()  # not set there
    plan = json.loads(ts("plan", "specs/job.yaml", "--format", "json", cwd=folder, check=True).stdout)
    limits = {t["target"]: t["facts"]["time limit"]
              for t in plan["jobs"][0]["targets"]}
    assert limits == {
        "azureml": "2d (limits.timeout: 172800), from targets.azureml.timeout",
        "hpcpack": "12h (RuntimeSeconds=43200), from targets.hpcpack.runtime",
        "kubernetes": "1d (activeDeadlineSeconds 86400), from the spec's timeout",
        "ray": "1d (the driver stops every process, exit 124), from the spec's timeout",
        "slurm": "1h30m (--time=0-01:30:00), from targets.slurm.time",
    }


def test_without_a_timeout_plan_says_none_is_enforced(folder):
    compile_spec(folder, SPEC.replace("timeout: 24h\n", ""))
    plan = json.loads(ts("plan", "specs/job.yaml", "--format", "json", cwd=folder, check=True).stdout)
    limits = {t["target"]: t["facts"]["time limit"]
              for t in plan["jobs"][0]["targets"]}
    assert limits["slurm"].startswith("none from the spec: the partition's default limit")
    assert all(text.startswith("none") for text in limits.values()), limits
    assert "--time" not in job_file(folder, "slurm", "job.sbatch").read_text()
    assert "limits" not in job_file(folder, "azureml", "job.yml").read_text()
    request = json.loads(job_file(folder, "ray", "trainspec_ray_job.json").read_text())
    assert request["timeout"] is None


@pytest.mark.parametrize("timeout, targets", [
    # sbatch reads --time into seconds in a C int; RuntimeSeconds is an xs:int
    ("25000d", ["hpcpack", "slurm"]),
    # activeDeadlineSeconds is an int64; azure-ai-ml's timedelta holds 999999999 days; the driver's request 10^12 s
    ("99999999999999999999", ["azureml", "hpcpack", "kubernetes", "ray", "slurm"]),
], ids=["int32", "int64"])
def test_a_limit_a_platform_cannot_hold_is_an_error_at_timeout(folder, timeout, targets):
    proc = compile_spec(folder, SPEC.replace("timeout: 24h", f"timeout: {timeout}"))
    assert proc.returncode == 1
    found = sorted(re.findall(r"^specs/job\.yaml:5:10: error: timeout: .* is more than (\w+)'s ", proc.stderr, re.M))
    assert found == targets, proc.stderr
    assert "Traceback" not in proc.stderr and "hint: a shorter duration" in proc.stderr


def test_a_targets_own_limit_it_cannot_hold_is_an_error_there(folder):
    proc = compile_spec(folder, SPEC.replace("{partition: gpu}", "{partition: gpu, time: 25000d}"), "-t", "slurm")
    assert proc.returncode == 1
    assert re.search(r"^specs/job\.yaml:14:\d+: error: targets\.slurm\.time: 25000d \(2160000000 seconds\) is "
                     r"more than slurm's --time", proc.stderr, re.M), proc.stderr


def test_a_bad_timeout_is_located_with_a_hint(folder):
    proc = compile_spec(folder, SPEC.replace("timeout: 24h", "timeout: 1 day"))
    assert proc.returncode == 1
    assert "specs/job.yaml:5:10: error: timeout:" in proc.stderr
    assert "hint: a duration, e.g. 2d, 24h, 1h30m or 3600 (seconds)" in proc.stderr, proc.stderr
