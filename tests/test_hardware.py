"""The SKU is true or is not claimed (issue 28): the team catalog (trainspec-skus.yaml) says which
VM size an Azure ML compute, a Slurm partition and an HPC Pack node group run on, and a spec whose
resources.sku contradicts one is an error at the sku; Slurm can select the GPU itself
(targets.slurm.gpu_type); where nothing links the sku to the machines a target runs on, plan and
diff say so for that target instead of announcing a GPU model. Through the real command line, in
a folder that is its own git repository."""

import json

import pytest

from conftest import git, ts

H100 = "Standard_ND96isr_H100_v5"
A100 = "Standard_ND96amsr_A100_v4"  # 8 x A100, InfiniBand: only the GPU model differs from H100
CATALOG = f"""computes:
  h100-cluster: {H100}
partitions:
  gpu-h100: {H100}
  gpu-a100: {A100}
node_groups:
  H100Nodes: {H100}
"""
IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"


@pytest.fixture
def repo(tmp_path):
    git("init", "-q", "-b", "main", cwd=tmp_path)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print(1)\n")
    (tmp_path / "trainspec-skus.yaml").write_text(CATALOG)
    return tmp_path


def write(repo, targets, sku=H100, extra=""):
    resources = "resources:\n  nodes: 2\n" + (f"  sku: {sku}\n" if sku else "") + extra
    (repo / "job.yaml").write_text(
        "version: 1\nname: ft\ncode: code\ncommand: python train.py\n"
        f"environment: {{image: {IMAGE}}}\n{resources}targets:\n{targets}")
    return repo / "job.yaml"


def plan(repo):
    proc = ts("plan", "job.yaml", "--format", "json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["jobs"][0]


def hardware(job):
    return {t["target"]: t["hardware"] for t in job["targets"]}


# --- the team catalog -----------------------------------------------------------------------------

def test_partitions_and_node_groups_are_read_and_checked_like_computes(repo):
    (repo / "trainspec-skus.yaml").write_text(
        "computes:\n  c1: Standard_ND96isr_H100_v4\npartitions:\n  p1: Standard_ND96isrH100_v5\n"
        "  p2: 42\nnode_groups: [H100Nodes]\nclusters: {}\n")
    write(repo, "  slurm: {partition: p2}\n")
    proc = ts("validate", "job.yaml", cwd=repo)
    assert proc.returncode == 1
    err = proc.stderr
    assert "trainspec-skus.yaml:2:7: error: computes.c1: 'Standard_ND96isr_H100_v4' is not a VM size trainspec " \
           "knows (hint: did you mean Standard_ND96isr_H100_v5" in err, err
    assert "trainspec-skus.yaml:4:7: error: partitions.p1: 'Standard_ND96isrH100_v5' is not a VM size" in err, err
    assert "trainspec-skus.yaml:5:7: error: partitions.p2: '42' is not a VM size trainspec knows" in err, err
    assert "trainspec-skus.yaml:6:14: error: node_groups: expected a mapping of names to the VM size each runs " \
           "on (hint: node_groups: {H100Nodes: Standard_ND96isr_H100_v5})" in err, err
    assert "trainspec-skus.yaml:7:11: error: clusters: unknown field 'clusters' (hint: fields: skus, computes, " \
           "partitions, node_groups, region, prices)" in err, err
    assert "Traceback" not in err


# --- a sku that contradicts its compute, partition or node group ----------------------------------

def test_a_sku_that_contradicts_the_catalog_is_an_error_at_the_sku_naming_both(repo):
    write(repo, "  azureml: {compute: h100-cluster}\n  slurm: {partition: gpu-h100}\n"
                "  hpcpack: {shared_dir: /app, node_group: H100Nodes}\n", sku="Standard_NC24ads_A100_v4")
    proc = ts("validate", "job.yaml", cwd=repo)
    assert proc.returncode == 1
    at = "job.yaml:8:8: error: resources.sku: sku Standard_NC24ads_A100_v4 contradicts"
    for place, hint in (("targets.azureml.compute h100-cluster", "a compute"),
                        ("targets.slurm.partition gpu-h100", "a partition"),
                        ("targets.hpcpack.node_group H100Nodes", "a node group")):
        assert (f"{at} {place}, which trainspec-skus.yaml maps to {H100} (hint: set resources.sku: {H100}, or "
                f"{hint} of Standard_NC24ads_A100_v4 machines; or fix trainspec-skus.yaml if it maps "
                f"{place.split()[-1]} wrongly)") in proc.stderr, proc.stderr
    assert proc.stderr.count("error:") == 3  # every problem in one run


def test_a_sku_that_agrees_with_the_catalog_or_a_place_it_does_not_map_validates(repo):
    write(repo, "  azureml: {compute: azureml:h100-cluster}\n  slurm: {partition: gpu-h100}\n"
                "  hpcpack: {shared_dir: /app, node_group: H100Nodes}\n")
    assert ts("validate", "job.yaml", cwd=repo).returncode == 0
    write(repo, "  azureml: {compute: other}\n  slurm: {partition: gpu}\n", sku="Standard_NC24ads_A100_v4")
    proc = ts("validate", "job.yaml", cwd=repo)
    assert proc.returncode == 0 and "contradicts" not in proc.stderr, proc.stderr


def test_without_a_sku_the_size_the_catalog_maps_is_the_jobs_size(repo):
    """A demanding user's reading: `partition: gpu-h100` alone runs on H100s, so the job is
    checked as an H100 job (its GPU count, InfiniBand), and plan says where its size comes from."""
    write(repo, "  slurm: {partition: gpu-h100}\n", sku=None)
    job = plan(repo)
    assert (job["sku"], job["gpus_per_node"], job["gpu"]) == (H100, 8, "8 x H100")
    assert job["sku_source"] == "targets.slurm.partition gpu-h100, in trainspec-skus.yaml"
    text = ts("plan", "job.yaml", cwd=repo, check=True).stdout
    assert f"  sku            {H100} (from targets.slurm.partition gpu-h100, in trainspec-skus.yaml)\n" in text
    sbatch = ts("compile", "job.yaml", "-o", "build", cwd=repo, check=True) and \
        (repo / "build" / "ft" / "slurm" / "job.sbatch").read_text()
    assert "#SBATCH --gpus-per-node=8\n" in sbatch
    write(repo, "  slurm: {partition: gpu-h100}\n", sku=None, extra="  gpus_per_node: 16\n")
    proc = ts("validate", "job.yaml", cwd=repo)
    assert proc.returncode == 1 and f"resources.gpus_per_node: 16 GPUs per node, but {H100} has 8" in proc.stderr


def test_without_a_sku_places_that_run_different_sizes_are_an_error(repo):
    write(repo, "  slurm: {partition: gpu-a100}\n  hpcpack: {shared_dir: /app, node_group: H100Nodes}\n", sku=None)
    proc = ts("validate", "job.yaml", cwd=repo)
    assert proc.returncode == 1
    assert (f"job.yaml:9:22: error: targets.slurm.partition: partition gpu-a100 runs on {A100} "
            f"(trainspec-skus.yaml), but targets.hpcpack.node_group H100Nodes runs on {H100}: one spec is one VM "
            "size (hint: set resources.sku to the size the job needs, and pick places that have it)"
            ) in proc.stderr, proc.stderr


# --- Slurm selects the hardware itself --------------------------------------------------------------

def test_slurm_gpu_type_asks_slurm_for_that_gpu(repo):
    write(repo, "  slurm: {partition: gpu, gpu_type: h100}\n")
    ts("compile", "job.yaml", "-o", "build", cwd=repo, check=True)
    sbatch = (repo / "build" / "ft" / "slurm" / "job.sbatch").read_text()
    assert "#SBATCH --gpus-per-node=h100:8\n" in sbatch
    assert hardware(plan(repo))["slurm"] == {"enforced": True, "by": "--gpus-per-node=h100:8", "hint": ""}


@pytest.mark.parametrize("gpu_type, sku, message", [
    ("a100_80g", H100, f"job.yaml:8:8: error: resources.sku: sku {H100} (H100) contradicts gpu_type a100_80g, "
                       "which asks for A100 GPUs (targets.slurm.gpu_type)"),
    ("hopper", H100, "warning: targets.slurm.gpu_type: trainspec cannot tell which GPU 'hopper' is; "
                     "resources.sku's is H100"),
    ("h100", "Standard_D4s_v3", "error: targets.slurm.gpu_type: a GPU type, but Standard_D4s_v3 has no GPU"),
])
def test_a_gpu_type_is_checked_against_the_skus_gpu(repo, gpu_type, sku, message):
    write(repo, f"  slurm: {{gpu_type: {gpu_type}}}\n", sku=sku)
    proc = ts("validate", "job.yaml", cwd=repo)
    assert message in proc.stderr, proc.stderr
    assert proc.returncode == (0 if "warning" in message else 1)


def test_a_gpu_type_for_a_cpu_job_is_an_error(repo):
    write(repo, "  slurm: {gpu_type: h100}\n", sku=None, extra="  gpus_per_node: 0\n")
    proc = ts("validate", "job.yaml", cwd=repo)
    assert proc.returncode == 1
    assert "job.yaml:10:21: error: targets.slurm.gpu_type: a GPU type for a job that uses no GPU" in proc.stderr


# --- plan says, per target, whether the sku chooses the machines ------------------------------------

def test_plan_names_the_gpu_only_where_the_sku_chooses_the_machines(repo):
    write(repo, "  azureml: {compute: gpu-cluster}\n  slurm: {partition: gpu}\n"
                "  hpcpack: {shared_dir: /app}\n  kubernetes: {}\n  ray: {location: eastus, resource_group: rg}\n")
    job = plan(repo)
    found = hardware(job)
    assert found["azureml"] == {"enforced": False, "by": "the compute cluster gpu-cluster decides the hardware",
                                "hint": "map gpu-cluster to its VM size under computes: in trainspec-skus.yaml"}
    assert found["slurm"]["enforced"] is False and found["slurm"]["by"] == "the partition gpu decides the hardware"
    assert found["hpcpack"]["enforced"] is False
    assert found["kubernetes"] == {"enforced": True, "hint": "",
                                   "by": f"node selector node.kubernetes.io/instance-type={H100}"}
    assert found["ray"] == {"enforced": True, "by": f"the cluster's VMs: vm_size {H100}", "hint": ""}
    assert job["gpu"] == "8 x H100 on ray, kubernetes; sku not enforced on azureml, hpcpack, slurm"
    text = ts("plan", "job.yaml", cwd=repo, check=True).stdout
    assert ("  hardware: sku not enforced on slurm: the partition gpu decides the hardware (set targets.slurm."
            "gpu_type or constraint, or map the partition to its VM size under partitions: in trainspec-skus.yaml)"
            ) in text
    assert f"  hardware: {H100}, selected by node selector node.kubernetes.io/instance-type={H100}" in text


def test_plan_of_a_job_where_no_target_enforces_the_sku_announces_no_gpu_model(repo):
    write(repo, "  slurm: {partition: gpu}\n")
    job = plan(repo)
    assert job["gpu"] == "8 per node, model not enforced (sku not enforced on slurm)"
    assert "H100" not in job["gpu"]


@pytest.mark.parametrize("targets, by", [
    ("  azureml: {}\n", f"instance_type {H100}"),
    ("  azureml: {compute: h100-cluster}\n", f"compute h100-cluster: {H100}, in trainspec-skus.yaml"),
    ("  slurm: {partition: gpu-h100}\n", f"partition gpu-h100: {H100}, in trainspec-skus.yaml"),
    ("  slurm: {constraint: h100&ib}\n", "--constraint=h100&ib (the cluster's node features: not checked)"),
    ("  hpcpack: {shared_dir: /app, node_group: H100Nodes}\n", f"node group H100Nodes: {H100}, in trainspec-skus.yaml"),
])
def test_what_links_the_sku_to_each_targets_machines(repo, targets, by):
    write(repo, targets)
    job = plan(repo)
    (found,) = hardware(job).values()
    assert found == {"enforced": True, "by": by, "hint": ""}
    assert job["gpu"] == "8 x H100"


def test_a_kubernetes_node_selector_that_picks_another_size_unlinks_the_sku(repo):
    write(repo, "  kubernetes:\n    node_selector: {node.kubernetes.io/instance-type: Standard_ND96asr_v4}\n")
    found = hardware(plan(repo))["kubernetes"]
    assert found["enforced"] is False
    assert found["by"] == "the node selector node.kubernetes.io/instance-type=Standard_ND96asr_v4 decides the hardware"


# --- diff, over real git history -------------------------------------------------------------------

def commit(repo, message):
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", message, cwd=repo)


def diffed(repo):
    proc = ts("diff", "--git", "HEAD", "--format", "json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    return {j["name"]: j for j in json.loads(proc.stdout)["jobs"]}


def test_a_diff_claims_no_hardware_change_where_the_sku_is_not_linked(repo):
    """The issue's case: H100 -> A100 on a cluster that decides the hardware."""
    spec = write(repo, "  azureml: {compute: gpu-cluster}\n", sku="Standard_ND96asr_v4")  # 8 x A100
    commit(repo, "A100")
    spec.write_text(spec.read_text().replace("Standard_ND96asr_v4", H100))
    assert diffed(repo) == {}  # the cluster's job does not name a size: nothing that runs changes
    spec.write_text(spec.read_text().replace("nodes: 2", "nodes: 4"))
    job = diffed(repo)["ft"]
    note = "sku not enforced on azureml: the compute cluster gpu-cluster decides the hardware"
    assert job["changes"] == [{"field": "resources.nodes", "before": 2, "after": 4, "in": None},
                              {"field": "resources.sku", "before": "Standard_ND96asr_v4", "after": H100,
                               "in": None, "note": note},
                              {"field": "world", "before": 16, "after": 32, "in": None}], job["changes"]
    text = ts("diff", "--git", "HEAD", cwd=repo, check=True).stdout
    assert f"resources.sku Standard_ND96asr_v4 → {H100} ({note})" in text
    assert "GPU A100 → H100" not in text


def test_a_diff_names_the_gpu_change_where_the_sku_is_linked_and_says_where_it_is_not(repo):
    spec = write(repo, "  azureml: {}\n  slurm: {partition: gpu}\n", sku="Standard_ND96asr_v4")
    commit(repo, "A100")
    spec.write_text(spec.read_text().replace("Standard_ND96asr_v4", H100))
    text = ts("diff", "--git", "HEAD", cwd=repo, check=True).stdout
    note = "(sku not enforced on slurm: the partition gpu decides the hardware)"
    assert f"resources.sku Standard_ND96asr_v4 → {H100} {note}; GPU A100 → H100 {note}" in text, text
    # linking Slurm's hardware (gpu_type) is a change of its own: the sku now holds there
    commit(repo, "H100")
    spec.write_text(spec.read_text().replace("slurm: {partition: gpu}", "slurm: {partition: gpu, gpu_type: h100}"))
    job = diffed(repo)["ft"]
    assert {"field": "sku not enforced on", "before": "slurm", "after": None, "in": None} in job["changes"]
    assert "-#SBATCH --gpus-per-node=8\n+#SBATCH --gpus-per-node=h100:8" in job["files"][0]["diff"]


def test_trainspec_skus_lists_the_teams_clusters_and_their_sizes(repo):
    """`trainspec skus` shows what links a sku to a cluster: each compute, partition and node group
    of the team file with its size, in the table's text and in JSON."""
    text = ts("skus", "--gpu", "H100", cwd=repo, check=True).stdout
    assert f"compute h100-cluster: {H100}\npartition gpu-a100: {A100}\npartition gpu-h100: {H100}\n" \
           f"node group H100Nodes: {H100}\n" in text, text
    listed = json.loads(ts("skus", "--format", "json", cwd=repo, check=True).stdout)
    assert (listed["computes"], listed["partitions"], listed["node_groups"]) == (
        {"h100-cluster": H100}, {"gpu-h100": H100, "gpu-a100": A100}, {"H100Nodes": H100})
