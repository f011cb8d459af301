"""Issue 28, "done when": ONE spec (specs/sft-h100.yaml: 2 x 8 H100, an Azure ML data asset, the
same data on shared storage for Slurm, HPC Pack and Ray and on claims for Kubernetes, a checkpoint
output, a secret, `timeout: 24h`, CPUs and memory per node) compiles to all five targets, and each
output says what the spec says -- time, data locations, image, hardware, secret reference -- read
by the tool that consumes it: azure-ai-ml's load_job, the HPC Pack XSD, Ray's own validation, the
pinned Kubeflow CRDs, and for Slurm the #SBATCH lines and srun's argv as sbatch and bash read them.
(The real runs: tests/test_slurm_cluster.py and tests/test_kubernetes_run.py read an input and
leave a checkpoint on the shared location.)"""

import json
import shlex
import shutil
import subprocess
import warnings

import pytest
import yaml

import kube_schema
from conftest import REPO, SPECS, ray_validate, slurm_image, ts

SPEC = SPECS / "sft-h100.yaml"
DAY = 86400
SKU = "Standard_ND96isr_H100_v5"
IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"
CORPUS, CKPT, TOKEN_FILE = "/shared/datasets/sft", "/shared/checkpoints/sft-h100", "/shared/secrets/hf_token"
HPCPACK_XSD = REPO.parent / "shared" / "reference" / "hpcpack" / "xsd" / "job-v4.fixed.xsd"


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    """The example compiled once, from a copy of the repository's specs and its team catalog."""
    root = tmp_path_factory.mktemp("one-spec")
    shutil.copytree(SPECS, root / "specs")
    shutil.copy(REPO / "trainspec-skus.yaml", root)
    shutil.copytree(REPO / "examples", root / "examples")
    proc = ts("compile", "specs/sft-h100.yaml", "-o", "build", cwd=root)
    assert proc.returncode == 0, proc.stderr
    # what the platforms cannot do as the spec says is said, at its line, never dropped
    warned = sorted(line.split(": warning: ")[1].split(":")[0] for line in proc.stderr.splitlines()
                    if ": warning: " in line)
    assert warned == ["environment.image", "inputs.corpus", "outputs.ckpt", "resources.shm_size", "resources.shm_size",
                      "resources.sku"], proc.stderr
    assert proc.stderr.count("as the URL 'abfss://") == 2  # Ray's command gets its volumes' URLs, not paths
    assert "Ray's Azure VMs are standalone" in proc.stderr  # the one place InfiniBand cannot follow
    return root / "build" / "sft-h100"


def test_azure_ml_reads_the_data_asset_with_the_limit_and_the_key_vault_reference(out):
    from azure.ai.ml import load_job

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        job = load_job(out / "azureml" / "job.yml")
    assert job.limits.timeout == DAY
    assert job.inputs["corpus"].path in ("azureml:sft-corpus@latest", "sft-corpus@latest")
    assert job.outputs["ckpt"].mode == "rw_mount" and job.outputs["ckpt"].path is None  # the job's own output
    assert job.environment.image == IMAGE
    assert job.compute in ("h100-cluster", "azureml:h100-cluster") and job.resources.instance_count == 2
    assert job.identity.type == "managed_identity"  # azure-ai-ml's name for identity: {type: managed}
    assert "--data ${{inputs.corpus}} --output ${{outputs.ckpt}}" in job.command
    assert json.loads(job.environment_variables["TRAINSPEC_SECRETS"]) == [
        {"identity": "managed", "keyvault": "https://team-kv.vault.azure.net", "secret": "hf-token",
         "variable": "HF_TOKEN"}]


def test_slurm_runs_the_image_on_the_partition_with_the_data_mounted_and_the_limit(out):
    script = (out / "slurm" / "job.sbatch").read_text()
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    sbatch = [line.split(" ", 1)[1] for line in script.splitlines() if line.startswith("#SBATCH ")]
    # per node (the default for several processes): one task per node, torchrun starts its 8 workers
    for option in ("--time=1-00:00:00", "--partition=h100", "--nodes=2", "--ntasks-per-node=1",
                   "--gpus-per-node=8", "--cpus-per-task=80", "--mem=900G"):
        assert option in sbatch, sbatch
    srun = shlex.split(next(line for line in script.splitlines() if line.startswith("srun ")))
    assert slurm_image(script) == IMAGE.replace('/', '#', 1)  # enroot's registry#path:tag
    mounts = next(a for a in srun if a.startswith("--container-mounts=")).split("=", 1)[1].split(",")
    assert {f"{CORPUS}:{CORPUS}:ro", f"{CKPT}:{CKPT}", f"{TOKEN_FILE}:{TOKEN_FILE}:ro"} <= set(mounts)
    assert srun[-6:] == ["train.py", "--steps", "100", "--data", CORPUS, "--output", CKPT][-6:]
    assert f"mkdir -p -- {CKPT}" in script  # the checkpoint folder exists before any rank writes
    assert "export MELLANOX_VISIBLE_DEVICES=all" in script  # InfiniBand in the container
    assert json.loads(shlex.split(next(line for line in script.splitlines()
                                       if line.startswith("export TRAINSPEC_SECRETS=")))[1].split("=", 1)[1]) \
        == [{"file": TOKEN_FILE, "variable": "HF_TOKEN"}]


def test_hpcpack_job_is_valid_for_the_scheduler_and_says_the_limit_group_and_data(out):
    from lxml import etree

    xml = etree.parse(str(out / "hpcpack" / "job.xml"))
    etree.XMLSchema(etree.parse(str(HPCPACK_XSD))).assertValid(xml)
    job = xml.getroot()
    assert job.get("RuntimeSeconds") == str(DAY) and job.get("NodeGroups") == "H100Nodes"
    assert (job.get("MinCoresPerNode"), job.get("MinMemory")) == ("80", str(900 * 1024))
    ns = {"h": "http://schemas.microsoft.com/HPCS2008R2/scheduler/"}
    for task in xml.findall(".//h:Task", ns):
        argv = shlex.split(task.get("CommandLine"))
        assert argv[-4:] == ["--data", CORPUS, "--output", CKPT]
        names = {v.findtext("h:Name", namespaces=ns): v.findtext("h:Value", namespaces=ns)
                 for v in task.findall(".//h:Variable", ns)}
        assert json.loads(names["TRAINSPEC_SECRETS"]) == [{"file": TOKEN_FILE, "variable": "HF_TOKEN"}]


def test_ray_cluster_passes_rays_validation_with_the_sku_the_image_the_limit_and_the_teardown(out):
    config = ray_validate(yaml.safe_load((out / "ray" / "cluster.yaml").read_text()))
    sizes = {node["node_config"]["azure_arm_parameters"]["vmSize"] for node in config["available_node_types"].values()}
    assert sizes == {SKU}
    assert config["docker"]["image"] == IMAGE
    from trainspec.runtime.ray_request import read_request

    request = read_request(str(out / "ray" / "trainspec_ray_job.json"))
    assert request.timeout == DAY and request.cpus_per_node == 80
    assert "abfss://datasets@teamdata.dfs.core.windows.net/sft" in request.command
    assert json.loads(request.env["TRAINSPEC_SECRETS"]) == [{"file": TOKEN_FILE, "variable": "HF_TOKEN"}]
    assert "ray down -y" in (out / "ray" / "launch.sh").read_text()  # the H100 VMs end with the job


def test_kubernetes_trainjob_is_valid_for_the_pinned_crds_with_deadline_claims_secret_and_hardware(out):
    text = (out / "kubernetes" / "job.yaml").read_text()
    assert kube_schema.validate_stream(text) == []
    job = next(d for d in kube_schema.load_documents(text) if d["kind"] == "TrainJob")
    spec, trainer = job["spec"], job["spec"]["trainer"]
    assert spec["activeDeadlineSeconds"] == DAY and trainer["image"] == IMAGE
    assert trainer["resourcesPerNode"]["limits"] == {"nvidia.com/gpu": 8, "rdma/ib": 1, "cpu": 80, "memory": "900Gi"}
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}} in trainer["env"]
    assert trainer["command"][-1].endswith("--data /trainspec/inputs/corpus --output /trainspec/outputs/ckpt")
    pod = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"][
        "spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": SKU}
    claims = {v["name"]: v["persistentVolumeClaim"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
    assert sorted(c["claimName"] for c in claims.values()) == ["checkpoints", "datasets"]


def test_plan_says_per_target_the_limit_the_image_the_hardware_and_the_secret_never_a_value(out):
    plan = json.loads(ts("plan", str(SPEC), "--format", "json", check=True).stdout)
    targets = {t["target"]: t for t in plan["jobs"][0]["targets"]}
    assert set(targets) == {"azureml", "hpcpack", "ray", "slurm", "kubernetes"}
    for name, target in targets.items():
        limit = target["facts"]["time limit"]
        assert limit.startswith("1d ") and limit.endswith("from the spec's timeout"), (name, limit)
        assert target["hardware"]["enforced"], (name, target["hardware"])  # the team catalog links every one
    assert targets["slurm"]["facts"]["image"].startswith("nvcr.io#nvidia/pytorch:24.08-py3")
    assert targets["hpcpack"]["facts"]["image"].startswith("no container")
    assert "Key Vault https://team-kv.vault.azure.net, secret hf-token" in " ".join(targets["azureml"]["secrets"])
    assert "Secret hf, key token" in " ".join(targets["kubernetes"]["secrets"])
