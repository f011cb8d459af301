"""CPUs, memory and InfiniBand: ``resources.cpus_per_node`` and ``memory_per_node`` held to the
SKU and said the way each platform's own tool reads them (the pinned Kubeflow CRDs, the HPC Pack
XSD, Ray's validation and the driver's own request type, azure-ai-ml's loader, Slurm's #SBATCH
lines), and a multi-node job on an InfiniBand size given what each platform needs, or a warning
where it cannot have it (Ray)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from conftest import REPO, ts
import kube_schema

from trainspec.core.fields import MEMORY_PATTERN, mebibytes, memory_bytes

H100 = "Standard_ND96isr_H100_v5"  # 96 vCPUs, 1900 GiB, 8 GPUs, InfiniBand (skus.json)
A100_NO_IB = "Standard_NC96ads_A100_v4"  # 96 vCPUs, 880 GiB, 4 GPUs, no InfiniBand


def spec(tmp_path, resources, targets, body="", name="job"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"""version: 1
name: {name}
code: {REPO}/examples/ddp
command: python train.py --steps 3
resources: {resources}
environment: {{image: 'nvcr.io/nvidia/pytorch:24.08-py3'}}
{body}
targets:
{targets}
""", encoding="utf-8")
    return path


def compile_(tmp_path, target, resources, settings="{}", body="", ok=True):
    path = spec(tmp_path, resources, f"  {target}: {settings}", body)
    proc = ts("compile", str(path), "-t", target, "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert "Traceback" not in proc.stderr
    assert proc.returncode == (0 if ok else 1), proc.stdout + proc.stderr
    return proc, tmp_path / "out" / "job" / target


# --- the words: units, and the SKU's numbers --------------------------------------------------

@pytest.mark.parametrize("quantity, size", [
    ("900Gi", 900 << 30), ("512G", 512 * 10 ** 9), ("2Ti", 2 << 40), ("1T", 10 ** 12), ("1536Mi", 1536 << 20),
    ("1500M", 1500 * 10 ** 6)])
def test_memory_units_are_kubernetes_binary_and_decimal_suffixes(quantity, size):
    assert re.fullmatch(MEMORY_PATTERN, quantity)
    assert memory_bytes(quantity) == size
    assert mebibytes(quantity) == -(-size // (1 << 20))  # rounded up, never less than asked


@pytest.mark.parametrize("bad", ["900gb", "900", "900Ki", "0Gi", "1.5Ti", "900 Gi", "900gi"])
def test_a_memory_quantity_without_a_known_unit_is_an_error_at_the_field_with_the_units(tmp_path, bad):
    path = spec(tmp_path, f"{{nodes: 1, sku: {H100}, memory_per_node: '{bad}'}}", "  kubernetes: {}")
    proc = ts("validate", str(path), cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert re.search(r"job\.yaml:5:\d+: error: resources\.memory_per_node: is not a memory quantity like 900Gi "
                     r"or 512G", proc.stderr), proc.stderr
    assert "Mi, Gi, Ti (binary) or M, G, T (decimal)" in proc.stderr


def test_more_cpus_or_memory_than_the_sku_has_is_an_error_naming_its_numbers(tmp_path):
    path = spec(tmp_path, f"{{nodes: 2, sku: {H100}, cpus_per_node: 128, memory_per_node: 2Ti}}", "  slurm: {}")
    proc = ts("validate", str(path), cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert any(re.match(r".*job\.yaml:5:\d+: error: resources\.cpus_per_node: 128 CPUs per node, but "
                        rf"{H100} has 96 vCPUs \(hint: ask for at most 96, or pick a larger size\)", line)
               for line in lines), proc.stderr
    assert any(re.match(r".*job\.yaml:5:\d+: error: resources\.memory_per_node: 2Ti \(2048 GiB\) per node, but "
                        rf"{H100} has 1900 GiB \(hint: ask for at most 1900Gi", line) for line in lines), proc.stderr


def test_a_size_whose_memory_is_unknown_warns_that_the_request_is_not_checked(tmp_path):
    """A size newer than the catalog: its vCPUs come from its name (checked), its memory from nowhere."""
    path = spec(tmp_path, "{nodes: 2, sku: Standard_ND96isr_B300_v7, gpus_per_node: 8, cpus_per_node: 128, "
                "memory_per_node: 900Gi}", "  slurm: {}")
    proc = ts("validate", str(path), cwd=tmp_path)
    assert re.search(r"error: resources\.cpus_per_node: 128 CPUs per node, but Standard_ND96isr_B300_v7 has 96 vCPUs",
                     proc.stderr), proc.stderr
    assert re.search(r"job\.yaml:5:\d+: warning: resources\.memory_per_node: how much memory Standard_ND96isr_B300_v7 "
                     r"has is unknown: 900Gi per node is not checked against it \(hint: memory_gb: set it in "
                     r"trainspec-skus\.yaml", proc.stderr), proc.stderr


def test_what_the_sku_has_is_accepted(tmp_path):
    path = spec(tmp_path, f"{{nodes: 2, sku: {H100}, cpus_per_node: 96, memory_per_node: 1900Gi}}", "  slurm: {}")
    proc = ts("validate", str(path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


# --- Kubernetes: requests and limits on the training container ---------------------------------

@pytest.mark.parametrize("api", ["trainjob", "pytorchjob"])
def test_kubernetes_requests_and_limits_on_the_training_container(tmp_path, api):
    _, folder = compile_(tmp_path, "kubernetes", f"{{nodes: 2, sku: {H100}, cpus_per_node: 88, "
                         "memory_per_node: 900Gi}", settings=f"{{api: {api}}}")
    text = (folder / "job.yaml").read_text(encoding="utf-8")
    assert kube_schema.validate_stream(text) == []
    job = list(yaml.safe_load_all(text))[-1]
    if api == "trainjob":
        resources = job["spec"]["trainer"]["resourcesPerNode"]
    else:
        resources = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"]
        assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] == \
            resources
    # requests = limits (a Guaranteed pod), beside the GPUs and the InfiniBand device as before
    assert resources["requests"] == {"cpu": 88, "memory": "900Gi"}
    assert resources["limits"] == {"nvidia.com/gpu": 8, "rdma/ib": 1, "cpu": 88, "memory": "900Gi"}


def test_kubernetes_without_them_asks_for_gpus_only(tmp_path):
    _, folder = compile_(tmp_path, "kubernetes", f"{{nodes: 2, sku: {H100}}}")
    job = list(yaml.safe_load_all((folder / "job.yaml").read_text(encoding="utf-8")))[-1]
    assert job["spec"]["trainer"]["resourcesPerNode"] == {"limits": {"nvidia.com/gpu": 8, "rdma/ib": 1}}


def test_kubernetes_plan_shows_requests_and_limits(tmp_path):
    path = spec(tmp_path, f"{{nodes: 2, sku: {H100}, cpus_per_node: 88, memory_per_node: 900Gi}}",
                "  kubernetes: {}")
    proc = ts("plan", str(path), "-t", "kubernetes", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert ("pods: 2 (one per node), each with requests cpu=88, memory=900Gi, limits nvidia.com/gpu=8, "
            "rdma/ib=1, cpu=88, memory=900Gi") in proc.stdout


# --- Slurm: --cpus-per-task per task, --mem per node ---------------------------------------------

def sbatch(folder):
    script = (folder / "job.sbatch").read_text()
    return script, [line[len("#SBATCH "):] for line in script.splitlines() if line.startswith("#SBATCH ")]


@pytest.mark.parametrize("launcher, cpus, per_task", [("per-process", 96, 12), ("per-process", 64, 8),
                                                      ("per-node", 90, 90)])
def test_slurm_cpus_per_task_is_the_nodes_cpus_divided_among_its_tasks(tmp_path, launcher, cpus, per_task):
    _, folder = compile_(tmp_path, "slurm", f"{{nodes: 2, sku: {H100}, cpus_per_node: {cpus}}}",
                         body=f"distribution: {{launcher: {launcher}}}")
    script, options = sbatch(folder)
    assert f"--cpus-per-task={per_task}" in options
    assert not any(option.startswith("--mem") for option in options)
    # srun does not take it from the allocation (Slurm 22.05 and later): each step is told again
    [srun] = [line for line in script.splitlines() if line.startswith("srun ")]
    assert f" --cpus-per-task={per_task} " in srun


def test_slurm_cpus_that_do_not_divide_among_the_tasks_are_an_error_with_the_multiples(tmp_path):
    proc, _ = compile_(tmp_path, "slurm", f"{{nodes: 2, sku: {H100}, cpus_per_node: 90}}", ok=False,
                       body="distribution: {launcher: per-process}")  # srun starts the 8 processes of a node
    assert re.search(r"job\.yaml:5:\d+: error: resources\.cpus_per_node: 90 CPUs per node do not divide among the "
                     r"8 tasks per node srun starts \(--cpus-per-task is per task\) \(hint: ask for a multiple of 8, "
                     r"e\.g\. 88 or 96, or use launcher: per-node", proc.stderr), proc.stderr


@pytest.mark.parametrize("quantity, mem", [("900Gi", "900G"), ("1Ti", "1T"), ("1536Mi", "1536M"),
                                           ("512G", "488282M"), ("1T", "953675M")])
def test_slurm_mem_is_per_node_in_slurms_binary_units(tmp_path, quantity, mem):
    _, folder = compile_(tmp_path, "slurm", f"{{nodes: 2, sku: {H100}, memory_per_node: {quantity}}}")
    _, options = sbatch(folder)
    assert f"--mem={mem}" in options


# --- HPC Pack: the nodes it may choose -----------------------------------------------------------

def test_hpcpack_selects_nodes_with_the_cores_and_memory_and_the_xsd_accepts_it(tmp_path):
    lxml = pytest.importorskip("lxml.etree")
    xsd = REPO.parent / "shared" / "reference" / "hpcpack" / "xsd" / "job-v4.fixed.xsd"
    if not xsd.exists():
        pytest.skip("the HPC Pack XSD lives in the shared reference")
    _, folder = compile_(tmp_path, "hpcpack", "{nodes: 2, gpus_per_node: 4, cpus_per_node: 40, memory_per_node: 512G}",
                         settings="{shared_dir: /shared/jobs}")
    doc = lxml.parse(str(folder / "job.xml"))
    lxml.XMLSchema(lxml.parse(str(xsd))).assertValid(doc)
    root = doc.getroot()
    assert (root.get("MinCoresPerNode"), root.get("MinMemory")) == ("40", "488282")  # MB, rounded up
    assert (root.get("UnitType"), root.get("IsExclusive")) == ("Node", "true")  # whole nodes: all of it is the job's
    # both are attributes the scheduler's XML reader imports (JobPropertyBag, hpcpack.md §1: "Min/MaxCoresPerNode,
    # Min/MaxMemory"), with every other one we write (tests/test_hpcpack.py's list)
    reader = {"Version", "Name", "Project", "JobTemplate", "IsExclusive", "FailOnTaskFailure", "Priority",
              "RuntimeSeconds", "UnitType", "MinNodes", "MaxNodes", "AutoCalculateMin", "AutoCalculateMax",
              "RequestedNodes", "NodeGroups", "MinCoresPerNode", "MinMemory"}
    assert set(root.attrib) <= reader
    path = spec(tmp_path, "{nodes: 2, gpus_per_node: 4, cpus_per_node: 40, memory_per_node: 512G}",
                "  hpcpack: {shared_dir: /shared/jobs}")
    plan = ts("plan", str(path), "-t", "hpcpack", cwd=tmp_path)
    assert "nodes with at least: MinCoresPerNode=40, MinMemory=488282 MB" in plan.stdout, plan.stdout + plan.stderr


# --- Ray: the bundle of each node ----------------------------------------------------------------

RAY = "{location: eastus, resource_group: rg}"


def test_ray_bundle_carries_the_cpus_and_the_cluster_still_passes_rays_validation(tmp_path):
    pytest.importorskip("ray")
    from conftest import ray_validate
    from trainspec.runtime.ray_driver import Options, read_request

    proc, folder = compile_(tmp_path, "ray", f"{{nodes: 1, sku: {H100}, cpus_per_node: 64, memory_per_node: 900Gi}}",
                            settings=RAY, body="distribution: {launcher: per-process}")  # an actor per process
    assert "warning:" not in proc.stderr, proc.stderr
    request = read_request(str(folder / "trainspec_ray_job.json"))  # the driver's own reading
    options = Options(request=request, address="auto", timeout=0, grace=1, placement_timeout=1)
    assert options.bundle() == {"CPU": 64, "GPU": 8.0}
    assert options.actor_resources() == (8, 1)  # 8 processes share the node's bundle
    config = yaml.safe_load((folder / "cluster.yaml").read_text())
    ray_validate(config)
    assert config["available_node_types"]["ray.head.default"]["resources"] == {"CPU": 96, "GPU": 8}


def test_ray_without_cpus_keeps_one_cpu_per_process(tmp_path):
    _, folder = compile_(tmp_path, "ray", f"{{nodes: 1, sku: {H100}}}", settings=RAY)
    assert json.loads((folder / "trainspec_ray_job.json").read_text())["cpus_per_node"] == 8


# --- Azure ML: the node is the whole VM ----------------------------------------------------------

def test_azureml_without_a_size_warns_that_nothing_checks_the_cpus_and_memory(tmp_path):
    proc, _ = compile_(tmp_path, "azureml", "{nodes: 2, gpus_per_node: 8, cpus_per_node: 96, memory_per_node: 900Gi}",
                       settings="{compute: gpu-cluster}")
    assert re.search(r"job\.yaml:5:\d+: warning: resources\.cpus_per_node: Azure ML gives each node a whole VM of the "
                     r"cluster's size and takes no CPU request: without resources\.sku nothing checks that it has 96 "
                     r"vCPUs \(hint: set resources\.sku", proc.stderr), proc.stderr
    assert re.search(r"warning: resources\.memory_per_node: .* nothing checks that it has 900Gi", proc.stderr)


def test_azureml_with_a_size_says_nothing_and_the_job_loads(tmp_path):
    pytest.importorskip("azure.ai.ml")
    from azure.ai.ml import load_job

    proc, folder = compile_(tmp_path, "azureml", f"{{nodes: 2, sku: {H100}, cpus_per_node: 96, "
                            "memory_per_node: 1900Gi}", settings="{compute: gpu-cluster}")
    assert "warning:" not in proc.stderr, proc.stderr
    job = load_job(folder / "job.yml")
    assert job._validate().passed
    assert job._to_job()._to_rest_object().as_dict()["properties"]["resources"]["instanceCount"] == 2


# --- InfiniBand ----------------------------------------------------------------------------------

CONTAINER = "{container_image: 'nvcr.io#nvidia/pytorch:24.08-py3'}"


def test_slurm_container_on_an_infiniband_size_gets_the_devices_through_enroots_hook(tmp_path):
    _, folder = compile_(tmp_path, "slurm", f"{{nodes: 2, sku: {H100}}}", settings=CONTAINER)
    script, _ = sbatch(folder)
    lines = script.splitlines()
    export = next(i for i, line in enumerate(lines) if line.startswith("export MELLANOX_VISIBLE_DEVICES=all"))
    assert export < next(i for i, line in enumerate(lines) if line.startswith("srun "))


@pytest.mark.parametrize("resources, settings", [
    (f"{{nodes: 1, sku: {H100}}}", CONTAINER),  # one node: NVLink, no InfiniBand between nodes
    (f"{{nodes: 2, sku: {A100_NO_IB}}}", CONTAINER),  # no InfiniBand on the size
    (f"{{nodes: 2, sku: {H100}}}", "{container: false}"),  # no container: the tasks see the node's /dev/infiniband
])
def test_slurm_without_infiniband_in_a_container_adds_nothing(tmp_path, resources, settings):
    _, folder = compile_(tmp_path, "slurm", resources, settings=settings)
    assert "MELLANOX" not in sbatch(folder)[0]


def test_ray_multi_node_on_an_infiniband_size_warns_at_the_sku_and_says_what_to_do(tmp_path):
    proc, _ = compile_(tmp_path, "ray", f"{{nodes: 2, sku: {H100}}}", settings=RAY)
    assert re.search(rf"job\.yaml:5:\d+: warning: resources\.sku: {H100} has InfiniBand, but Ray's Azure VMs are "
                     r"standalone .*NCCL runs over TCP between the 2 nodes \(hint: train on one node .*for another "
                     r"target: every other one gives the job InfiniBand", proc.stderr), proc.stderr


@pytest.mark.parametrize("nodes, sku, value, warned", [(2, H100, "1", True), (2, H100, "0", False), (1, H100, "1", False),
                                                      (2, A100_NO_IB, "1", False)])
def test_nccl_ib_disable_on_an_infiniband_job_is_a_warning_at_its_key(tmp_path, nodes, sku, value, warned):
    path = spec(tmp_path, f"{{nodes: {nodes}, sku: {sku}}}", "  kubernetes: {}",
                body=f"env: {{NCCL_IB_DISABLE: '{value}'}}")
    proc = ts("validate", str(path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    found = re.search(rf"job\.yaml:7:\d+: warning: env\.NCCL_IB_DISABLE: NCCL_IB_DISABLE=1 makes NCCL talk TCP "
                      rf"sockets between the 2 nodes, and {H100} has InfiniBand \(hint: remove it", proc.stderr)
    assert bool(found) == warned, proc.stderr


@pytest.mark.parametrize("target, settings", [("azureml", "{compute: gpu-cluster}"), ("kubernetes", "{}"),
                                              ("slurm", CONTAINER), ("hpcpack", "{shared_dir: /shared/jobs}")])
def test_the_targets_that_carry_infiniband_do_not_warn(tmp_path, target, settings):
    proc, _ = compile_(tmp_path, target, f"{{nodes: 2, sku: {H100}}}", settings=settings)
    assert "InfiniBand" not in proc.stderr, proc.stderr


# --- Slurm itself reads them: a real cluster (tests/slurm_cluster.py) ------------------------------

@pytest.mark.realproc
def test_a_real_slurm_binds_each_task_to_its_cpus_and_refuses_more_memory_than_a_node_has(tmp_path):
    """The fake nodes have CPUS_PER_NODE CPUs and Slurm's default RealMemory of 1 MB: 4 CPUs per
    node among 2 tasks is --cpus-per-task=2 in every task; 1Mi is --mem=1M, which fits; 2Mi is
    --mem=2M, which sbatch refuses, so Slurm read our units as MiB.

    The cluster binds tasks to CPUs (task/affinity, as production clusters do), and each task
    prints its affinity: the two tasks of a node hold halves of the node's CPUs of their own, no
    CPU in common (issue 41). Without srun's own --cpus-per-task (Slurm 22.05 no longer reads the
    batch allocation's), the step's tasks have one CPU each on paper, and slurmd binds every task
    of the node to all the CPUs the job holds there: the halves are lost. Both nodes run on this
    one machine, so only the tasks of one node are compared."""
    import os
    import sys

    from slurm_cluster import CPUS_PER_NODE, SlurmCluster, missing

    reason = missing()
    if reason:
        pytest.skip(f"no Slurm cluster here: {reason}")
    code = tmp_path / "code"
    code.mkdir()
    (code / "probe.py").write_text("import os\nprint('TASK', os.environ['RANK'], os.environ['SLURM_CPUS_PER_TASK'], "
                                   "os.environ['SLURM_MEM_PER_NODE'], os.environ['SLURMD_NODENAME'], "
                                   "','.join(map(str, sorted(os.sched_getaffinity(0)))), flush=True)\n")

    def folder(name, memory):
        path = tmp_path / f"{name}.yaml"
        path.write_text(f"""version: 1
name: {name}
code: {code}
command: python probe.py
resources: {{nodes: 2, gpus_per_node: 0, procs_per_node: 2, cpus_per_node: {CPUS_PER_NODE}, memory_per_node: {memory}}}
distribution: {{launcher: per-process}}
targets:
  slurm: {{python: {sys.executable}}}
""")
        proc = ts("compile", str(path), "-t", "slurm", "-o", str(tmp_path / "build"), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        return tmp_path / "build" / name / "slurm"

    fits, too_big = folder("fits", "1Mi"), folder("too-big", "2Mi")
    script = (fits / "job.sbatch").read_text()
    assert f"#SBATCH --cpus-per-task={CPUS_PER_NODE // 2}\n#SBATCH --mem=1M\n" in script
    assert f"srun --kill-on-bad-exit=1 --ntasks-per-node=2 --cpus-per-task={CPUS_PER_NODE // 2} " in script
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    with SlurmCluster(tmp_path / "cluster", bind_cpus=True) as cluster:
        done = cluster.sbatch(fits / "job.sbatch", tmp_path, timeout=300, path=path)
        assert done.returncode == 0 and done.job_id, done
        out = (tmp_path / f"fits-{done.job_id}.out").read_text()
        tasks = sorted(re.findall(r"^(?:\d+: )?TASK (\d) (\S+) (\S+) (\S+) (\S+)$", out, re.M))
        assert [task[:3] for task in tasks] == [(str(rank), str(CPUS_PER_NODE // 2), "1") for rank in range(4)], out
        for node in ("n1", "n2"):
            first, second = [set(cpus.split(",")) for _, _, _, name, cpus in tasks if name == node]
            assert len(first) == len(second) and not first & second, out  # each its own half of the node's CPUs
        refused = cluster.run(["sbatch", str(too_big / "job.sbatch")], cwd=tmp_path, timeout=60)
        assert refused.returncode != 0 and "Submitted batch job" not in refused.stdout
        assert re.search(r"[Mm]emory specification can not be satisfied|node configuration is not available",
                         refused.stderr), refused.stderr
