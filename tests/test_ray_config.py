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


# --- issue 41: the job that runs is the job the user wrote ---------------------------------------

HOSTILE = "echo 'a: b' # no comment\n- [not, a, list]\n---\n{{ nodes }} \"$(id)\" ${HOME}"


def job_spec(tmp_path: Path, image: str, command: str, ray_extra: str = "", secrets: str = "") -> Path:
    """A Ray spec with an image, the command given and targets.ray's extra lines (indented 4)."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""version: 1
name: sft
code: {REPO}/examples/ddp
command: {command}
resources: {{nodes: 2, sku: Standard_ND40rs_v2}}
environment: {{image: '{image}'}}
{secrets}outputs:
  ckpt: {{}}
targets:
  ray:
    location: eastus
    resource_group: rg
    volumes:
      ckpt: {{path: "abfss://runs@team.dfs.core.windows.net/ft"}}
{ray_extra}""", encoding="utf-8")
    return spec


def test_each_secret_file_reaches_the_container_at_its_path_never_its_value(tmp_path):
    """The secrets helper reads secrets.X.file inside the container: `docker run` (Ray's own
    docker_start_cmds, fed the compiled run_options) binds each file read-only at the same path.
    A bind --mount: a file missing on the VM fails `docker run` instead of becoming a directory."""
    token = tmp_path / "secret dir" / "hf_token"
    token.parent.mkdir()
    token.write_text("hf_value-never-compiled\n")
    spec = job_spec(tmp_path, "rayproject/ray:2.60.0-py311-gpu", "python train.py --steps 3",
                    secrets=f"secrets:\n  HF_TOKEN: {{file: '{token}'}}\n  OTHER: {{file: /shared/secrets/other}}\n")
    folder = compile_ray(spec, tmp_path / "out")
    config = yaml.safe_load((folder / "cluster.yaml").read_text())
    ray_validate(config)
    from ray.autoscaler._private.docker import docker_start_cmds

    line = docker_start_cmds("ubuntu", config["docker"]["image"], config["file_mounts"], "trainspec",
                             config["docker"]["run_options"], "sft", "/home/ray", "docker")
    words = shlex.split(line)
    for path in (str(token), "/shared/secrets/other"):
        assert f"--mount=type=bind,source={path},target={path},readonly" in words, words
    for file in folder.iterdir():
        assert b"hf_value" not in file.read_bytes(), file  # the path is compiled, never what the file holds
    # a path docker's --mount cannot hold is an error at the secret's file, in the same run as the rest
    bad = tmp_path / "bad"
    bad.mkdir()
    spec = job_spec(bad, "rayproject/ray:2.60.0-py311-gpu", "python train.py",
                    secrets="secrets:\n  HF_TOKEN: {file: '/shared/a,b'}\n")
    proc = subprocess.run([*trainspec_cmd(), "validate", "-t", "ray", str(spec)], capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "spec.yaml:8:" in proc.stderr and "secrets.HF_TOKEN.file: a secret's file is mounted into the container" \
        in proc.stderr, proc.stderr


def test_a_url_the_command_gets_for_an_output_or_input_is_a_warning_at_it_unless_a_mount_makes_it_a_path(tmp_path):
    spec = job_spec(tmp_path, "rayproject/ray:2.60.0-py311-gpu",
                    "python train.py --output_dir {{ outputs.ckpt }} --data {{ inputs.corpus }} --n {{ inputs.n }}")
    text = spec.read_text().replace("outputs:\n", "inputs:\n  corpus: {path: 'https://example.org/d.tar'}\n"
                                    "  n: 3\n  local: {path: /mnt/data}\noutputs:\n")
    spec.write_text(text)
    proc = subprocess.run([*trainspec_cmd(), "validate", "-t", "ray", str(spec)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = text.splitlines()
    ckpt = next(n for n, l in enumerate(lines, 1) if l.startswith("  ckpt: {}"))
    corpus = next(n for n, l in enumerate(lines, 1) if l.startswith("  corpus:"))
    warned = [l for l in proc.stderr.splitlines() if "as the URL" in l]
    assert len(warned) == 2, proc.stderr  # not the literal input n, not the input the command does not name
    assert f"spec.yaml:{ckpt}:" in warned[0] or f"spec.yaml:{ckpt}:" in warned[1], warned
    out_line = next(l for l in warned if "outputs.ckpt" in l)
    assert f"spec.yaml:{ckpt}:9: warning: outputs.ckpt: the command gets {{{{ outputs.ckpt }}}} as the URL " \
           "'abfss://runs@team.dfs.core.windows.net/ft'" in out_line and "--output_dir" in out_line
    assert f"spec.yaml:{corpus}:11: warning: inputs.corpus:" in next(l for l in warned if "inputs.corpus" in l)
    # a volume at an absolute path (storage the VMs mount, mounted into the container) is a path: no warning
    spec.write_text(text.replace('abfss://runs@team.dfs.core.windows.net/ft', "/mnt/runs/ft").replace(
        "https://example.org/d.tar", "/mnt/data/d.tar"))
    proc = subprocess.run([*trainspec_cmd(), "validate", "-t", "ray", str(spec)], capture_output=True, text=True)
    assert proc.returncode == 0 and "as the URL" not in proc.stderr, proc.stderr


def test_setup_and_the_registry_login_run_on_every_vm_in_order_before_the_pull_never_a_credential(tmp_path):
    """targets.ray.setup: Ray's initialization_commands (on the VM, before the image is pulled and
    the container started), each a YAML string as written; then docker login to the image's
    registry with the secrets' files on the VM, played here with a fake docker and sg."""
    user, password = tmp_path / "registry user", tmp_path / "registry_password"
    user.write_text("pull-bot\n")
    password.write_text("registry-password-never-compiled\n")
    ray_extra = ("    setup:\n      - sudo mkdir -p /mnt/runs\n      - " + json_str(HOSTILE) + "\n"
                 "    registry: {username: REGISTRY_USERNAME, password: REGISTRY_PASSWORD}\n")
    secrets = f"secrets:\n  REGISTRY_USERNAME: {{file: '{user}'}}\n  REGISTRY_PASSWORD: {{file: '{password}'}}\n"
    spec = job_spec(tmp_path, "team.azurecr.io/train:1", "python train.py", ray_extra, secrets)
    folder = compile_ray(spec, tmp_path / "out")
    config = yaml.safe_load((folder / "cluster.yaml").read_text())
    ray_validate(config)
    init = config["initialization_commands"]
    assert init[:3] == ["sudo usermod -aG docker $USER || true", "sudo mkdir -p /mnt/runs", HOSTILE]
    assert len(init) == 4 and init[3].startswith("sg docker -c ")
    for file in folder.iterdir():
        assert b"registry-password" not in file.read_bytes() and b"pull-bot" not in file.read_bytes(), file
    # the login, as a VM's shell runs it: docker gets the user name and the password on stdin
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sg").write_text('#!/bin/sh\n[ "$1 $2" = "docker -c" ] || exit 9\nexec sh -c "$3"\n')
    (bin_dir / "docker").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/argv\ncat > {tmp_path}/stdin\n')
    for tool in ("sg", "docker"):
        (bin_dir / tool).chmod(0o755)
    import os

    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "-c", init[3]], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "argv").read_text().splitlines() == ["login", "--username", "pull-bot", "--password-stdin",
                                                            "team.azurecr.io"]
    assert (tmp_path / "stdin").read_text() == "registry-password-never-compiled\n"  # docker drops the newline
    # Docker Hub: docker login without a server; a registry without an image, or naming no secret: errors
    hub = tmp_path / "hub"
    hub.mkdir()
    config = yaml.safe_load((compile_ray(job_spec(hub, "team/private:1", "python train.py", ray_extra, secrets),
                                         hub / "out") / "cluster.yaml").read_text())
    assert config["initialization_commands"][3].endswith(f"--password-stdin < {shlex.quote(str(password))}'")
    bad = tmp_path / "bad"
    bad.mkdir()
    spec = job_spec(bad, "team.azurecr.io/train:1", "python train.py",
                    "    registry: {username: REGISTRY_USER, password: REGISTRY_PASSWORD}\n    setup: ['  ']\n", secrets)
    proc = subprocess.run([*trainspec_cmd(), "validate", "-t", "ray", str(spec)], capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "targets.ray.registry.username: 'REGISTRY_USER' names no secret of the spec" in proc.stderr, proc.stderr
    assert "targets.ray.setup[0]: is an empty command" in proc.stderr, proc.stderr


def json_str(text: str) -> str:
    import json

    return json.dumps(text)
