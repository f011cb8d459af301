"""A catalog a team can live with (issue 11, finding 3): sizes newer than the catalog, near misses,
`trainspec skus`, a team's own trainspec-skus.yaml, and `az vm list-skus` imports -- through the
real command line, in a folder that is its own git repository."""

import json
import subprocess

import pytest
from ruamel.yaml import YAML

from conftest import REPO, ts

NEW = "Standard_ND128isr_NDR_GB200_v6"




@pytest.fixture
def repo(tmp_path):
    (tmp_path / ".git").mkdir()  # the team file is looked for up to the repository root
    (tmp_path / "specs").mkdir()
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print(1)\n")
    return tmp_path


def spec(repo, sku, gpus=None, nodes=2):
    counts = f", gpus_per_node: {gpus}" if gpus is not None else ""
    (repo / "specs" / "job.yaml").write_text(
        "version: 1\nname: job\ncode: ../code\ncommand: python train.py\n"
        f"resources: {{nodes: {nodes}, sku: {sku}{counts}}}\nenvironment: {{image: python:3.11}}\n"
        "targets: {azureml: {}}\n")  # serverless: the sku is the instance_type
    return ts("validate", "specs/job.yaml", cwd=repo)


def test_a_size_newer_than_the_catalog_is_a_warning_when_gpus_per_node_says_what_it_has(repo):
    proc = spec(repo, NEW, gpus=4)
    assert proc.returncode == 0, proc.stderr
    assert (f"specs/job.yaml:5:28: warning: resources.sku: {NEW} is not in trainspec's catalog: trusting "
            "gpus_per_node: 4, and assuming InfiniBand (the 'r' in its name)") in proc.stderr
    plan = json.loads(ts("plan", "specs/job.yaml", "--format", "json", cwd=repo).stdout)["jobs"][0]
    assert (plan["sku"], plan["gpu"], plan["gpus_per_node"]) == (NEW, "4 x GB200", 4)
    proc = spec(repo, "Standard_NCC40ads_H100_v5", gpus=1)
    assert proc.returncode == 0 and "assuming no InfiniBand" in proc.stderr
    assert "has no InfiniBand: NCCL falls back to TCP sockets" in proc.stderr  # what that means for 2 nodes


def test_without_a_gpu_count_a_new_size_is_an_error_that_says_how_to_use_it(repo):
    proc = spec(repo, NEW)
    assert proc.returncode == 1
    assert f"error: resources.sku: {NEW} is not in trainspec's catalog, so how many GPUs it has is unknown" \
           in proc.stderr and "set resources.gpus_per_node" in proc.stderr and "trainspec-skus.yaml" in proc.stderr


@pytest.mark.parametrize("typo, meant", [
    ("Standard_ND96irs_H100_v5", "Standard_ND96isr_H100_v5"),   # feature letters out of order
    ("Standard_ND96isr_H100v5", "Standard_ND96isr_H100_v5"),    # a separator missing
    ("Standard-ND96isr-H100-v5", "Standard_ND96isr_H100_v5"),   # the wrong separator
    ("ND96isr_H100_v6", None),                                  # not spelt the Azure way (no Standard_)
    ("NC24ads_A100_v4", "Standard_NC24ads_A100_v4"),           # a known size without Standard_ (docs/skus.md)
    ("nd96isr_h100_v5", "Standard_ND96isr_H100_v5"),
])
def test_a_near_miss_is_an_error_with_did_you_mean_even_with_a_gpu_count(repo, typo, meant):
    proc = spec(repo, typo, gpus=8)
    assert proc.returncode == 1
    assert f"error: resources.sku: unknown Azure VM size '{typo}'" in proc.stderr
    if meant:
        assert f"did you mean {meant}" in proc.stderr


TEAM = f"""\
skus:
  {NEW}:
    gpus: 4
    gpu: GB200
    gpu_memory_gb: 186
    vcpus: 128
    memory_gb: 900
    infiniband: true
    source: our capacity reservation, 2026-11
"""


def test_a_team_file_adds_sizes_that_are_then_checked(repo):
    (repo / "trainspec-skus.yaml").write_text(TEAM)
    proc = spec(repo, NEW)
    assert proc.returncode == 0 and "warning:" not in proc.stderr, proc.stderr
    proc = spec(repo, NEW, gpus=8)  # now checked against the team's facts
    assert proc.returncode == 1 and f"8 GPUs per node, but {NEW} has 4 x GB200" in proc.stderr
    listed = ts("skus", "--gpu", "gb200", "--format", "json", cwd=repo / "specs")
    rows = json.loads(listed.stdout)["skus"]
    assert [(r["name"], r["gpus"], r["infiniband"], r["from"]) for r in rows] == [
        (NEW, 4, True, str(repo / "trainspec-skus.yaml"))]


def test_one_specs_problems_never_reach_another_spec_of_the_repository(repo):
    """Bug: the team catalog's diagnostics list was cached and shared, and validation added each
    spec's problems to it, so every later spec in the repository reported the earlier specs'
    problems as its own (a link in a shared code folder: one error for the first spec, two for
    the second, both at the second's line)."""
    (repo / "trainspec-skus.yaml").write_text(TEAM)
    for name, sku in (("a", NEW), ("b", "Standard_ND96isr_H100_v5"), ("c", NEW)):
        (repo / "specs" / f"{name}.yaml").write_text(
            f"version: 1\nname: {name}\ncode: ../code\ncommand: python train.py\n"
            f"resources: {{nodes: 2, sku: {sku}, gpus_per_node: 8}}\nenvironment: {{image: python:3.11}}\n"
            "targets: {azureml: {}}\n")  # a and c: 8 GPUs per node on a 4-GPU size; b: right
    proc = ts("validate", "specs/", cwd=repo)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if ": error: " in line]
    assert [line.split(":")[0] for line in errors] == ["specs/a.yaml", "specs/c.yaml"], proc.stderr
    (repo / "code" / "leak.txt").symlink_to("/etc/hostname")  # every spec ships the folder: one error each
    proc = ts("validate", "specs/", cwd=repo)
    links = [line.split(":")[0] for line in proc.stderr.splitlines() if "leak.txt is a symbolic link" in line]
    assert links == ["specs/a.yaml", "specs/b.yaml", "specs/c.yaml"], proc.stderr


def test_a_size_without_standard_is_the_error_the_page_shows(repo):
    """docs/skus.md shows what validate prints for `sku: NC24ads_A100_v4`: that line, at the
    sku's place, and nothing is compiled; in the team file, the same size is refused at its line
    too, never quietly spelt anew."""
    page = (REPO / "docs" / "skus.md").read_text()
    shown = "specs/job.yaml:5:28: error: resources.sku: unknown Azure VM size 'NC24ads_A100_v4' (hint: did you mean " \
            "Standard_NC24ads_A100_v4?)"
    assert f"`{shown}`" in page.replace("\n", " ")
    proc = spec(repo, "NC24ads_A100_v4")
    assert proc.returncode == 1 and proc.stderr.splitlines()[0] == shown, proc.stderr
    (repo / "trainspec-skus.yaml").write_text("computes:\n  gpu-a100: NC24ads_A100_v4\n")
    proc = spec(repo, "Standard_NC24ads_A100_v4")
    assert proc.returncode == 1
    assert "trainspec-skus.yaml:2:13: error: computes.gpu-a100: 'NC24ads_A100_v4' is not a VM size trainspec knows " \
           "(hint: did you mean Standard_NC24ads_A100_v4" in proc.stderr, proc.stderr


def test_a_team_files_mistakes_are_located_in_it(repo):
    (repo / "trainspec-skus.yaml").write_text("skus:\n  Standard_X1_v1:\n    gpus: two\n    infiniband: true\n"
                                              "  not-a-size: {gpus: 1, infiniband: false}\n")
    proc = spec(repo, "Standard_ND96isr_H100_v5")
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[:2] == [
        "trainspec-skus.yaml:3:11: error: skus.Standard_X1_v1.gpus: expected a whole number",
        "trainspec-skus.yaml:5:15: error: skus.not-a-size: 'not-a-size' is not spelt like an Azure VM size "
        "(hint: e.g. Standard_ND96isr_H100_v5)"]


def test_changing_the_team_file_names_the_jobs_it_changes_in_diff(repo):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["rm", "-r", str(repo / ".git")], check=True)
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=repo, check=True)
    (repo / "trainspec-skus.yaml").write_text(TEAM)
    spec(repo, NEW)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "base"], cwd=repo, check=True)
    (repo / "trainspec-skus.yaml").write_text(TEAM.replace("gpus: 4", "gpus: 2"))
    proc = ts("diff", "--git", "main", cwd=repo)
    assert proc.returncode in (0, 1), proc.stderr
    assert "specs/job.yaml" in proc.stdout and "4 → 2" in proc.stdout, proc.stdout


AZ = [  # the shape `az vm list-skus --resource-type virtualMachines -o json` prints (one entry per region)
    {"resourceType": "virtualMachines", "name": NEW, "family": "standardNDGB200v6Family", "locations": ["eastus"],
     "capabilities": [{"name": "vCPUs", "value": "128"}, {"name": "MemoryGB", "value": "900"},
                      {"name": "GPUs", "value": "4"}, {"name": "RdmaEnabled", "value": "True"}]},
    {"resourceType": "virtualMachines", "name": NEW, "family": "standardNDGB200v6Family", "locations": ["westus"],
     "capabilities": [{"name": "vCPUs", "value": "128"}, {"name": "GPUs", "value": "4"}]},
    {"resourceType": "virtualMachines", "name": "Standard_D2s_v6", "family": "standardDSv6Family",
     "capabilities": [{"name": "vCPUs", "value": "2"}, {"name": "MemoryGB", "value": "8"}]},
    {"resourceType": "disks", "name": "Premium_LRS", "capabilities": []},
]


def test_az_vm_list_skus_output_becomes_a_team_file_that_validates(repo):
    (repo / "az.json").write_text(json.dumps(AZ))
    proc = ts("skus", "--import", "az.json", "--gpu-only", "--write", "trainspec-skus.yaml", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    team = YAML(typ="safe").load((repo / "trainspec-skus.yaml").read_text())
    assert team["skus"] == {NEW: {"gpus": 4, "gpu": "GB200", "vcpus": 128, "memory_gb": 900.0, "infiniband": True,
                                  "family": "standardNDGB200v6Family", "source": "az vm list-skus"}}
    proc = spec(repo, NEW)
    assert proc.returncode == 0 and "warning:" not in proc.stderr, proc.stderr


def test_a_ray_cpu_head_is_looked_up_in_the_team_file_too(repo):
    """Noticed in issue 12: targets.ray.head_sku was checked against the built-in sizes only."""
    head = "Standard_E8s_v9"  # a size the built-in catalog lacks, in the team's file
    (repo / "trainspec-skus.yaml").write_text(TEAM + f"  {head}:\n    gpus: 0\n    vcpus: 8\n    memory_gb: 64\n"
                                              "    infiniband: false\n")
    (repo / "specs" / "ray.yaml").write_text(
        "version: 1\nname: rayjob\ncode: ../code\ncommand: python train.py\n"
        f"resources: {{nodes: 2, sku: {NEW}}}\nenvironment: {{image: python:3.11}}\n"
        f"targets: {{ray: {{location: eastus, resource_group: rg, head: cpu, head_sku: {head}}}}}\n")
    proc = ts("compile", "specs/ray.yaml", "-o", "out", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    config = YAML(typ="safe").load((repo / "out" / "rayjob" / "ray" / "cluster.yaml").read_text())
    assert config["available_node_types"]["ray.head.default"]["node_config"]["azure_arm_parameters"]["vmSize"] == head
