"""Plan says the same facts for every target (issue 30): where the job runs, the time limit the
platform enforces, its priority or spot, the image it runs and the GPUs of the whole job -- the
same labels in the same order, in json, text and markdown, each one what the compiled file says
as the platform's own tool reads it (azure-ai-ml's load_job, lxml for HPC Pack's XML, ruamel for
Ray's and Kubernetes' YAML, the #SBATCH lines), and "none" where a target enforces no limit."""

import json
import re
import shutil
import warnings

import pytest
from lxml import etree
from ruamel.yaml import YAML

from conftest import REPO, slurm_image, ts
from trainspec.compiler.base import PlanFacts, Target
from trainspec.core.fields import duration_text
from trainspec.registry import TARGETS

H100 = "Standard_ND96isr_H100_v5"
GPUS_PER_H100 = 8  # skus.json: the catalog says it, the compiled files name only the size
IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"

# every fact set by the spec: a time limit (and targets' own), spot, priorities, places
SET = f"""version: 1
name: facts
code: ../code
command: python train.py --steps 3
timeout: 24h
resources: {{nodes: 2, sku: {H100}, spot: true}}
environment: {{image: {IMAGE}}}
targets:
  azureml: {{experiment_name: exp-a, priority: high}}
  kubernetes: {{namespace: ml, queue: team-a, timeout: 90m}}
  slurm: {{partition: gpu, account: vision, qos: high, time: 12h}}
  hpcpack: {{shared_dir: /app, node_group: H100Nodes, priority: AboveNormal, runtime: 2d}}
  ray: {{location: westus3, resource_group: rg-training, head: cpu}}
"""
# nothing set: the platforms' defaults, said as such; no target enforces a limit
DEFAULTS = f"""version: 1
name: facts
code: ../code
command: python train.py --steps 3
resources: {{nodes: 3, sku: {H100}}}
environment: {{image: {IMAGE}}}
targets:
  azureml: {{compute: gpu-cluster}}
  kubernetes: {{}}
  slurm: {{}}
  hpcpack: {{shared_dir: /app}}
  ray: {{location: eastus, resource_group: rg-training}}
"""


def test_every_registered_target_says_every_fact():
    """A target that forgot plan_facts fails here (it has no default: the wrapper refuses a lower.py
    without it), and none may add or drop one."""
    import importlib
    import types

    for name in TARGETS:
        module = importlib.import_module(f"trainspec.targets.{name}.lower")
        assert "plan_facts" in Target.REQUIRED and callable(module.plan_facts), f"{name} does not say plan's facts"
    with pytest.raises(TypeError, match="does not define .*plan_facts"):
        Target(types.ModuleType("trainspec.targets.fake.lower"))
    assert list(PlanFacts("w", "t", "p", "i", "g").as_dict()) == ["where", "time limit", "priority", "image", "GPUs"]


@pytest.fixture
def compiled(tmp_path, request):
    shutil.copytree(REPO / "examples" / "ddp", tmp_path / "code")
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "job.yaml").write_text(request.param)
    proc = ts("compile", "specs/job.yaml", "-o", "build", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(ts("plan", "specs/job.yaml", "--format", "json", cwd=tmp_path, check=True).stdout)
    facts = {t["target"]: t["facts"] for t in plan["jobs"][0]["targets"]}
    return tmp_path, tmp_path / "build" / "facts", facts


@pytest.mark.parametrize("compiled", [SET, DEFAULTS], indirect=True, ids=["set", "defaults"])
def test_the_same_facts_in_the_same_order_in_every_format(compiled):
    folder, _, facts = compiled
    assert set(facts) == set(TARGETS)
    for name, said in facts.items():
        assert list(said) == sorted(PlanFacts.LABELS), name  # json sorts every object's keys, this one's too
        assert all(isinstance(v, str) and v and "\n" not in v for v in said.values()), (name, said)
    text = ts("plan", "specs/job.yaml", cwd=folder, check=True).stdout
    markdown = ts("plan", "specs/job.yaml", "--format", "markdown", cwd=folder, check=True).stdout
    for name, said in facts.items():
        lines = "".join(f"  {key}: {said[key]}\n" for key in PlanFacts.LABELS)
        items = "".join(f"- {key}: `{said[key]}`\n" for key in PlanFacts.LABELS)
        assert lines in text.split(f"\n{name}: world", 1)[1], name  # consecutive, in their order
        assert items in markdown.split(f"\n### {name}: world", 1)[1], name
    # said once: the facts are not repeated among a target's own settings, nor as the job's headline
    plan = json.loads(ts("plan", "specs/job.yaml", "--format", "json", cwd=folder, check=True).stdout)
    for target in plan["jobs"][0]["targets"]:
        assert not {"time limit", "deadline", "namespace", "queue", "image"} & set(target["settings"]), target
    sbatch = next(line for line in text.splitlines() if line.startswith("  sbatch: "))
    assert not re.search(r"--(time|partition|account|qos)=", sbatch) and "GPUs per node" not in text, sbatch


def _azureml(job_dir):
    from azure.ai.ml import load_job

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_job(job_dir / "azureml" / "job.yml")


def _sbatch(job_dir):
    script = (job_dir / "slurm" / "job.sbatch").read_text()
    options = dict(line[len("#SBATCH --"):].partition("=")[::2] for line in script.splitlines()
                   if line.startswith("#SBATCH --"))
    return options, slurm_image(script)


def _seconds(slurm_time: str) -> int:
    days, _, rest = slurm_time.rpartition("-")
    h, m, s = (int(x) for x in rest.split(":"))
    return int(days or 0) * 86400 + h * 3600 + m * 60 + s


def _yaml_documents(path):
    return list(YAML(typ="safe").load_all(path.read_text()))


def _total(gpus_fact: str) -> int:
    return 0 if gpus_fact == "none" else int(re.match(r"\d+", gpus_fact).group())


@pytest.mark.parametrize("compiled", [SET, DEFAULTS], indirect=True, ids=["set", "defaults"])
def test_azureml_facts_are_what_job_yml_says(compiled):
    _, job_dir, facts = compiled
    said, job = facts["azureml"], _azureml(job_dir)
    if job.compute:
        assert said["where"].startswith(f"compute cluster {job.compute.removeprefix('azureml:')}, "), said
    else:
        assert said["where"].startswith(f"serverless compute, instance_type {job.resources.instance_type}, "), said
    assert said["where"].endswith(f"experiment {job.experiment_name}")
    timeout = job.limits.timeout if job.limits is not None else None
    if timeout is None:
        assert said["time limit"].startswith("none"), said
    else:
        assert said["time limit"].startswith(f"{duration_text(timeout)} (limits.timeout: {timeout}),"), said
    queue = job.queue_settings
    tier, priority = (queue.job_tier, queue.priority) if queue is not None else (None, None)
    assert said["priority"].startswith("spot") == (tier == "spot"), (said, tier)
    assert (f"priority {priority}" in said["priority"]) == (priority is not None)
    if not tier and not priority:
        assert said["priority"].startswith("Azure ML's default")
    assert said["image"] == job.environment.image
    assert _total(said["GPUs"]) == job.resources.instance_count * GPUS_PER_H100


@pytest.mark.parametrize("compiled", [SET, DEFAULTS], indirect=True, ids=["set", "defaults"])
def test_hpcpack_facts_are_what_job_xml_says(compiled):
    _, job_dir, facts = compiled
    said = facts["hpcpack"]
    job = etree.parse(str(job_dir / "hpcpack" / "job.xml")).getroot()
    group = job.get("NodeGroups")
    assert said["where"] == (f"node group {group}" if group else "the cluster's default node group"), said
    runtime = job.get("RuntimeSeconds")
    assert said["time limit"].startswith(f"{duration_text(int(runtime))} (RuntimeSeconds={runtime}),"
                                         if runtime else "none"), said
    priority = job.get("Priority")
    assert said["priority"].startswith(f"Priority={priority}" if priority else "the job template's default"), said
    assert ("spot" in said["priority"]) == ("resources.spot is not honoured" in said["priority"])  # never spot
    assert said["image"].startswith("no container")
    assert _total(said["GPUs"]) == int(job.get("MinNodes")) * GPUS_PER_H100


@pytest.mark.parametrize("compiled", [SET, DEFAULTS], indirect=True, ids=["set", "defaults"])
def test_slurm_facts_are_what_the_sbatch_lines_say(compiled):
    _, job_dir, facts = compiled
    said = facts["slurm"]
    options, image = _sbatch(job_dir)
    where = f"partition {options['partition']}" if "partition" in options else "the cluster's default partition"
    assert said["where"].startswith(where), said
    assert ("account " + options["account"] in said["where"]) if "account" in options else \
        said["where"].endswith("the user's default account")
    if "time" in options:
        seconds = _seconds(options["time"])
        assert said["time limit"].startswith(f"{duration_text(seconds)} (--time={options['time']}),"), said
    else:
        assert said["time limit"].startswith("none from the spec: the partition's default limit"), said
    assert said["priority"].startswith(f"qos {options['qos']}" if "qos" in options else "the account's default qos")
    assert not said["priority"].startswith("spot")
    assert said["image"].startswith(f"{image} ")
    assert _total(said["GPUs"]) == int(options["nodes"]) * int(options["gpus-per-node"].split(":")[-1])


@pytest.mark.parametrize("compiled", [SET, DEFAULTS], indirect=True, ids=["set", "defaults"])
def test_ray_facts_are_what_cluster_yaml_and_the_request_say(compiled):
    _, job_dir, facts = compiled
    said = facts["ray"]
    config = YAML(typ="safe").load((job_dir / "ray" / "cluster.yaml").read_text())
    request = json.loads((job_dir / "ray" / "trainspec_ray_job.json").read_text())
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    workers = [t for name, t in types.items() if name != config["head_node_type"]]
    assert said["where"].startswith(f"Azure region {config['provider']['location']} "), said
    training = [t for t in [head, *workers] if t["resources"].get("GPU")]
    sizes = {t["node_config"]["azure_arm_parameters"]["vmSize"] for t in training}
    assert sizes == {H100} and f"x {H100}" in said["where"]
    if not head["resources"].get("GPU"):
        assert f"head: a {head['node_config']['azure_arm_parameters']['vmSize']} CPU VM" in said["where"]
    if request["timeout"] is None:
        assert said["time limit"].startswith("none"), said
    else:
        assert said["time limit"].startswith(f"{duration_text(request['timeout'])} (the driver stops"), said
    spot = [t for t in training if t["node_config"]["azure_arm_parameters"]["priority"] == "Spot"]
    assert said["priority"].startswith("spot") == bool(spot), said
    assert head["node_config"]["azure_arm_parameters"]["priority"] == "Regular"
    assert said["image"] == config["docker"]["image"]
    total = sum(t["resources"]["GPU"] * t.get("min_workers", 1) for t in training)
    assert _total(said["GPUs"]) == total


@pytest.mark.parametrize("compiled", [SET, DEFAULTS], indirect=True, ids=["set", "defaults"])
def test_kubernetes_facts_are_what_job_yaml_says(compiled):
    _, job_dir, facts = compiled
    said = facts["kubernetes"]
    job = _yaml_documents(job_dir / "kubernetes" / "job.yaml")[-1]
    assert job["kind"] == "TrainJob"
    meta, spec = job["metadata"], job["spec"]
    where = f"namespace {meta['namespace']}" if "namespace" in meta else "kubectl's current namespace"
    assert said["where"].startswith(where + ", "), said
    queue = meta["labels"].get("kueue.x-k8s.io/queue-name")
    assert (f"Kueue local queue {queue}" in said["where"]) if queue else said["where"].endswith("no queue "
                                                                                              "(the pods are scheduled at once)")
    deadline = spec.get("activeDeadlineSeconds")
    assert said["time limit"].startswith(f"{duration_text(deadline)} (activeDeadlineSeconds {deadline}),"
                                         if deadline else "none"), said
    assert "priorityClassName" not in json.dumps(job) and said["priority"].startswith("the cluster's default")
    assert said["image"] == spec["trainer"]["image"]
    limits = spec["trainer"]["resourcesPerNode"]["limits"]
    assert _total(said["GPUs"]) == spec["trainer"]["numNodes"] * limits["nvidia.com/gpu"]


def test_the_gpus_are_the_whole_jobs_with_the_model_where_the_sku_holds(tmp_path):
    """"16 x H100 (2 nodes x 8)", not the per-node "8 x H100"; where the sku does not choose the
    machines the model is not claimed."""
    shutil.copytree(REPO / "examples" / "ddp", tmp_path / "code")
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "job.yaml").write_text(DEFAULTS.replace("nodes: 3", "nodes: 2"))
    plan = json.loads(ts("plan", "specs/job.yaml", "--format", "json", cwd=tmp_path, check=True).stdout)
    gpus = {t["target"]: t["facts"]["GPUs"] for t in plan["jobs"][0]["targets"]}
    assert gpus["ray"] == gpus["kubernetes"] == "16 x H100 (2 nodes x 8)"  # the sku makes the VMs, selects nodes
    # a cluster, a partition, a node group the team catalog does not map: the count, not the model
    for name in ("azureml", "slurm", "hpcpack"):
        assert gpus[name].startswith("16 (2 nodes x 8), model not enforced here"), (name, gpus[name])


def test_spot_is_said_where_it_is_honoured_and_not_claimed_elsewhere(tmp_path):
    shutil.copytree(REPO / "examples" / "ddp", tmp_path / "code")
    (tmp_path / "specs").mkdir()
    text = SET.replace("{experiment_name: exp-a, priority: high}", "{compute: gpu-cluster}") \
        .replace("head: cpu", "head: worker")
    (tmp_path / "specs" / "job.yaml").write_text(text)
    plan = json.loads(ts("plan", "specs/job.yaml", "--format", "json", cwd=tmp_path, check=True).stdout)
    priority = {t["target"]: t["facts"]["priority"] for t in plan["jobs"][0]["targets"]}
    assert priority["ray"].startswith("spot: 1 of 2 training nodes"), priority["ray"]
    for name in ("azureml", "slurm", "hpcpack", "kubernetes"):  # a cluster's VM priority, a partition, a pool
        assert not priority[name].startswith("spot") and "resources.spot is not honoured" in priority[name], name
