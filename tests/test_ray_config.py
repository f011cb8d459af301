"""Ray target: the compiled cluster.yaml passes Ray's own offline validation (what `ray up` runs
before any cloud call) and plain jsonschema against Ray's schema, and our own checks catch what
Ray lets through."""

import copy
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import REPO, SPECS, ray_validate, trainspec_cmd
from trainspec.targets.ray.lower import cluster_problems

ray = pytest.importorskip("ray", reason="ray is a test extra: pip install -e '.[test]'")

REFERENCE = REPO.parent / "shared" / "reference" / "ray-examples"




def compile_ray(spec: Path, out: Path) -> Path:
    proc = subprocess.run([*trainspec_cmd(), "compile", str(spec), "-t", "ray", "-o", str(out)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return next(out.glob("*/ray"))


def variant(tmp_path: Path, **replace) -> Path:
    text = (SPECS / "ray-lightning.yaml").read_text().replace("code: ../examples/", f"code: {REPO}/examples/")
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    return spec


def test_example_spec_passes_rays_validation(tmp_path):
    folder = compile_ray(SPECS / "ray-lightning.yaml", tmp_path)
    config = yaml.safe_load((folder / "cluster.yaml").read_text())
    prepared = ray_validate(config)
    assert cluster_problems(config) == []
    types = config["available_node_types"]
    # head is a training node: it and one worker are the spec's SKU with its real counts
    for name in ("ray.head.default", "ray.worker.gpu"):
        assert types[name]["resources"] == {"CPU": 96, "GPU": 8}
        assert types[name]["node_config"]["azure_arm_parameters"]["vmSize"] == "Standard_ND96asr_v4"
        assert types[name]["node_config"]["azure_arm_parameters"]["priority"] == "Regular"
        assert "evictionPolicy" not in types[name]["node_config"]["azure_arm_parameters"]  # ray#46198
    assert types["ray.worker.gpu"]["min_workers"] == types["ray.worker.gpu"]["max_workers"] == 1
    assert config["provider"] == {"type": "azure", "location": "eastus", "resource_group": "rg-trainspec",
                                  "cache_stopped_nodes": False}
    assert "ssh_private_key" not in config["auth"]  # left to Ray's defaults
    assert config["docker"]["image"] == "rayproject/ray:2.60.0-py311-gpu"
    assert "--shm-size=32g" in config["docker"]["run_options"]
    assert set(config["file_mounts"]) == {"~/trainspec/code", "~/trainspec/trainspec_shim.py",
                                          "~/trainspec/trainspec_ray_driver.py", "~/trainspec/trainspec_procs.py",
                                          "~/trainspec/trainspec_ray_request.py", "~/trainspec/trainspec_ray_job.json"}
    assert (folder / config["file_mounts"]["~/trainspec/code"]).resolve() == REPO / "examples" / "mnist"
    assert any("lightning==2.6.6" in c for c in config["setup_commands"])
    assert "azure-mgmt-compute" in config["head_setup_commands"][0]  # the autoscaler drives Azure
    assert prepared["head_node_type"] == "ray.head.default"


def test_cpu_head_and_spot_workers(tmp_path):
    spec = variant(tmp_path, **{"head: worker": "head: cpu", "shm_size: 32g": "shm_size: 32g\n  spot: true"})
    config = yaml.safe_load((compile_ray(spec, tmp_path / "out") / "cluster.yaml").read_text())
    ray_validate(config)
    assert cluster_problems(config) == []
    head = config["available_node_types"]["ray.head.default"]
    workers = config["available_node_types"]["ray.worker.gpu"]
    assert head["node_config"]["azure_arm_parameters"]["vmSize"] == "Standard_D8s_v3"
    assert head["resources"] == {"CPU": 0}  # nothing of the training lands on the head
    assert workers["min_workers"] == workers["max_workers"] == config["max_workers"] == 2
    arm = workers["node_config"]["azure_arm_parameters"]
    assert (arm["priority"], arm["evictionPolicy"], arm["billingProfile"]) == ("Spot", "Delete", {"maxPrice": -1})
    assert head["node_config"]["azure_arm_parameters"]["priority"] == "Regular"


def test_launch_script_runs_the_unmodified_command_under_the_shim(tmp_path):
    folder = compile_ray(SPECS / "ray-lightning.yaml", tmp_path)
    lines = (folder / "launch.sh").read_text().splitlines()
    assert "ray up -y cluster.yaml" in lines
    exec_line = next(l for l in lines if l.startswith("ray exec "))
    words = shlex.split(exec_line)
    assert words[:3] == ["ray", "exec", "cluster.yaml"]
    argv = shlex.split(words[3])
    assert argv == ["python", "trainspec/trainspec_ray_driver.py", "trainspec/trainspec_ray_job.json"]
    # the request the driver reads, typed: what the driver's own reader accepts
    from trainspec.runtime.ray_driver import read_request

    request = read_request(str(folder / "trainspec_ray_job.json"))
    assert (request.nodes, request.procs_per_node, request.launcher, request.placement) == (
        2, 8, "per-node", "STRICT_SPREAD")
    assert request.env["TRAINSPEC_NODES"] == "2" and request.env["TRAINSPEC_LAUNCHER"] == "per-node"
    assert request.workdir == str(folder / "code") and request.master_port is None
    command = request.command
    assert command == ("python -I -S $HOME/trainspec/trainspec_shim.py -- python train.py --num_nodes 2 --devices 8 "
                       "--max_epochs 5")
    assert "trap teardown EXIT" in lines  # ray down, whatever ends the job: tests/test_ray_launch.py runs it
    assert bash_n(folder / "launch.sh")


def bash_n(script: Path) -> bool:
    return subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0


@pytest.mark.parametrize("replace, message", [
    ({"location: eastus": "location: eastuss"}, "targets.ray.location: 'eastuss' is not an Azure region (hint: did you mean eastus"),
    ({"  sku: Standard_ND96asr_v4\n": "  gpus_per_node: 8\n"}, "resources.sku: a Ray cluster on Azure needs the VM size"),
    ({"framework: lightning": "framework: lightning\ndistribution: {launcher: mpi}"},
     "distribution.launcher: ray cannot express launcher mpi"),
    ({"    resource_group: rg-trainspec\n": ""}, "targets.ray.resource_group: is required"),
    ({"  image: rayproject/ray:2.60.0-py311-gpu\n": ""},
     "warning: resources.shm_size: ray cannot express a shared-memory size without a container"),
])
def test_spec_errors_ray_would_only_find_in_the_cloud(tmp_path, replace, message):
    spec = variant(tmp_path, **replace)
    proc = subprocess.run([*trainspec_cmd(), "validate", "-t", "ray", str(spec)], capture_output=True, text=True)
    assert message in proc.stderr, proc.stderr
    assert proc.returncode == (0 if message.startswith("warning") else 1)


def test_our_checks_catch_what_ray_lets_through():
    good = yaml.safe_load((REFERENCE / "azure-2x4gpu.yaml").read_text()) if (REFERENCE / "azure-2x4gpu.yaml").exists() \
        else pytest.skip("the shared reference Ray examples are not here")
    assert cluster_problems(good) == []
    typo = yaml.safe_load((REFERENCE / "broken" / "arm-typo-not-caught.yaml").read_text())
    ray_validate(typo)  # Ray accepts it...
    assert any("vmSize is missing" in p for p in cluster_problems(typo))  # ...we do not
    for mutate, expected in [
        (lambda c: c["provider"].pop("location"), "provider.location is missing"),
        (lambda c: c["provider"].update(locaton=c["provider"].pop("location")), "found 'locaton': misspelt?"),
        (lambda c: c["provider"].update(location="eastus9"), "'eastus9' is not an Azure region"),
        (lambda c: c["available_node_types"]["ray.worker.gpu"]["resources"].update(GPU=8),
         "resources.GPU is 8 but Standard_NC24s_v3 has 4 GPUs"),
    ]:
        config = copy.deepcopy(good)
        mutate(config)
        ray_validate(config)
        assert any(expected in p for p in cluster_problems(config)), (expected, cluster_problems(config))
