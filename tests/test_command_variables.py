"""A command means the same on every target (issue 21): what it expands ($NODE_RANK,
"$MASTER_ADDR", the spec's env) expands after the shim set it, and a variable only one platform
sets is an error at the command's line on the others. The real runs are in test_local_run.py,
test_hpcpack_run.py and test_slurm_cluster.py; here: the rule, per target, in-process."""

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from trainspec.registry.build import build

SETTINGS = {"azureml": "{compute: gpu}", "hpcpack": "{shared_dir: /app}",
            "ray": "{location: eastus, resource_group: rg}", "slurm": "{}"}


def spec(tmp_path: Path, command: str, *, target: str, launcher: str = "", env: str = "{OMP_NUM_THREADS: 1}",
         python: str = "", outputs: str = "") -> Path:
    (tmp_path / "code").mkdir(exist_ok=True)
    settings = SETTINGS[target] if not python else SETTINGS[target][:-1].rstrip() + \
        (", " if SETTINGS[target] != "{}" else "") + f"python: {python}}}"
    path = tmp_path / "spec.yaml"
    path.write_text(f"""version: 1
name: probe
code: code
command: {command}
framework: pytorch
resources: {{nodes: 2, gpus_per_node: 2, sku: Standard_NC48ads_A100_v4}}
distribution: {{backend: gloo{', launcher: ' + launcher if launcher else ''}}}
environment: {{image: pytorch/pytorch:latest}}
env: {env}
{outputs}
targets:
  {target}: {settings}
""")
    return path


def errors(path: Path, target: str):
    outcome = build(str(path), path.parent / "out", [target], lower=False)
    return [d for d in outcome.diagnostics if d.is_error]


# a variable only one platform sets, the platform, the portable name the hint gives
OWN = [("SLURM_PROCID", "slurm", "$RANK"), ("SLURM_JOB_ID", "slurm", None), ("CCP_TASKID", "hpcpack", "$NODE_RANK"),
       ("OMPI_COMM_WORLD_LOCAL_RANK", "azureml", "$LOCAL_RANK"), ("AZ_BATCH_NODE_ID", "azureml", None),
       ("AZUREML_RUN_ID", "azureml", None), ("RAY_ADDRESS", "ray", None)]


@pytest.mark.parametrize("target", sorted(SETTINGS))
@pytest.mark.parametrize("name, owner, portable", OWN, ids=[o[0] for o in OWN])
def test_another_platforms_variable_is_an_error_at_the_command(tmp_path, target, name, owner, portable):
    path = spec(tmp_path, f'python train.py --tag "x-${{{name}}}"', target=target)
    found = errors(path, target)
    if target == owner:
        assert found == []
        return
    assert len(found) == 1, found
    d = found[0]
    assert (d.file, d.line, d.col, d.field) == (str(path), 4, 10, "command")  # the command's line
    assert f"reads ${name}, which only {owner} jobs set: compiled for {target}" in d.message
    assert (portable or "$NODE_RANK, $MASTER_ADDR, $MASTER_PORT, $RANK") in d.hint


@pytest.mark.parametrize("target", sorted(SETTINGS))
def test_portable_names_and_the_specs_env_are_read_on_every_target(tmp_path, target):
    command = 'python train.py $NODE_RANK "${MASTER_ADDR}:$MASTER_PORT" $SLURM_LIKE \'$AZUREML_QUOTED\' \\$CCP_X'
    path = spec(tmp_path, command, target=target, env="{SLURM_LIKE: mine}")
    assert errors(path, target) == []  # single quotes and a backslash keep a $ literal


@pytest.mark.parametrize("target", ["azureml", "hpcpack", "ray", "slurm"])
@pytest.mark.parametrize("name, hint", [("RANK", "os.environ"), ("WORLD_SIZE", "{{ world_size }}"),
                                         ("LOCAL_WORLD_SIZE", "{{ procs_per_node }}")])
def test_per_node_a_workers_variable_is_an_error(tmp_path, target, name, hint):
    """Per node the command starts the workers (torchrun): they have RANK, the command does not."""
    path = spec(tmp_path, f"python train.py --rank ${name} --node $NODE_RANK", target=target, launcher="per-node")
    found = errors(path, target)
    assert [(d.line, d.field) for d in found] == [(4, "command")], found
    assert f"reads ${name}, but per node" in found[0].message and hint in found[0].hint


def test_per_node_a_spawner_cannot_take_the_world_through_a_shell(tmp_path):
    path = spec(tmp_path, "accelerate launch train.py --out $HOME/x", target="slurm", launcher="per-node")
    found = errors(path, "slurm")
    assert [d.field for d in found] == ["command"] and "hands accelerate the world as flags" in found[0].message
    assert "it lacks --num_machines, --machine_rank" in found[0].message
    # a command that gives accelerate the whole world itself, from what the shim set (the public
    # Azure ML jobs do): bash expands it after the shim, so it runs as written
    whole = ("accelerate launch --num_processes 4 --num_machines 2 --machine_rank $NODE_RANK "
             "--main_process_ip $MASTER_ADDR --main_process_port $MASTER_PORT train.py")
    assert errors(spec(tmp_path, whole, target="slurm", launcher="per-node"), "slurm") == []


def compiled_line(path: Path, target: str) -> str:
    outcome = build(str(path), path.parent / "out", [target])
    assert outcome.ok, [d.render() for d in outcome.diagnostics]
    artifact = outcome.artifacts[0]
    if target == "azureml":
        from ruamel.yaml import YAML

        return YAML(typ="safe").load(artifact.file("job.yml").data)["command"]
    if target == "ray":
        return json.loads(artifact.file("trainspec_ray_job.json").data)["command"]
    if target == "slurm":
        return artifact.file("job.sbatch").data.decode().splitlines()[-1]
    import xml.etree.ElementTree as ET

    return next(ET.fromstring(artifact.file("job.xml").data).iter(
        "{http://schemas.microsoft.com/HPCS2008R2/scheduler/}Task")).get("CommandLine")


@pytest.mark.parametrize("target", sorted(SETTINGS))
def test_a_command_that_expands_runs_through_bash_under_the_shim(tmp_path, target):
    """The same rule everywhere: `<shim> -- bash -c '<the line>'`, so the platform's own shell
    (Slurm's batch script, HPC Pack's task, Azure ML's, the Ray actor's) leaves every $ to it."""
    path = spec(tmp_path, 'python train.py --node $NODE_RANK --master "$MASTER_ADDR"', target=target)
    words = shlex.split(compiled_line(path, target).replace("${{", "{{"))
    at = words.index("--")
    assert words[at + 1:at + 3] == ["bash", "-c"] and len(words) == at + 4, words
    assert words[-1].endswith('train.py --node $NODE_RANK --master "$MASTER_ADDR"')
    plain = spec(tmp_path, "python train.py --steps 3", target=target)
    assert "bash -c" not in compiled_line(plain, target)  # nothing to expand: exec'd as it is


def test_slurm_outputs_reach_a_command_run_through_bash(tmp_path):
    """`{{ outputs.x }}` on Slurm is its volume's path (issue 28; it used to be "$job_dir"/outputs/...,
    the compiled folder): quoted for bash, it reaches the task's own bash (a compound command, or
    one that expands $...) intact, and the batch script made the folder before srun."""
    shared = tmp_path / "shared dir" / "it's"
    path = spec(tmp_path, "python train.py --node $NODE_RANK --out {{ outputs.ckpt }}", target="slurm",
                launcher="per-process", outputs="outputs: {ckpt: {}}")  # the task runs the command itself
    path.write_text(path.read_text().replace("  slurm: {}", f'  slurm: {{volumes: {{ckpt: {{path: "{shared}/ckpt"}}}}}}'))
    outcome = build(str(path), tmp_path / "out", ["slurm"])
    assert outcome.artifacts, [d.render() for d in outcome.diagnostics]
    script = outcome.artifacts[0].file("job.sbatch").data.decode()
    head, srun = script.rsplit("\n", 2)[0], script.splitlines()[-1]
    inner = shlex.split(srun)[-1]  # what the task's bash runs under the shim
    job_dir = tmp_path / "out" / "probe" / "slurm"
    job_dir.mkdir(parents=True)
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "77", "SLURM_SUBMIT_DIR": str(job_dir)}
    # the batch script up to srun; then, as a task would after the shim, the command's own bash
    probe = f"{head}\nNODE_RANK=1 bash -c {shlex.quote(inner.replace('python train.py', 'echo'))}\n"
    done = subprocess.run(["bash", "-c", probe], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip("\n").split(" ", 3) == ["--node", "1", "--out", f"{shared}/ckpt"]
    assert (shared / "ckpt").is_dir()


@pytest.mark.parametrize("target", sorted(SETTINGS))
@pytest.mark.parametrize("python, message", [("\"'/opt/py\"", "is not shell words: No closing quotation"),
                                             ("\" \"", "names no interpreter")])
def test_a_python_that_is_not_shell_words_is_an_error_at_its_line_on_every_target(tmp_path, target, python, message):
    path = spec(tmp_path, "python train.py", target=target, python=python)
    outcome = build(str(path), tmp_path / "out", [target], lower=False)
    found = [d for d in outcome.diagnostics if d.is_error]
    assert [(d.field, d.line) for d in found] == [(f"targets.{target}.python", 12)], [d.render() for d in found]
    assert message in found[0].message and "Python 3.8+" in found[0].hint


@pytest.mark.parametrize("target", sorted(SETTINGS))
def test_plan_names_what_starts_the_shim(tmp_path, target):
    from trainspec.registry.build import target as module

    path = spec(tmp_path, "python train.py", target=target, python="\"'/opt/my py/bin/python3.11'\"")
    outcome = build(str(path), tmp_path / "out", [target])
    assert module(target).plan_settings(outcome.valid)["shim"] == \
        "'/opt/my py/bin/python3.11' -I -S trainspec_shim.py (needs Python 3.8+)"
    assert "'/opt/my py/bin/python3.11' -I -S " in compiled_line(path, target)
